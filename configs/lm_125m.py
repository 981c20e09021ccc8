"""A GPT-3 Small-sized causal LM (125M parameters), trained as its published baseline was.

  python train.py --config configs/lm_125m.py --workdir runs/125m \
      --config.data.name=files --config.data.files='CORPUS/*.jsonl.gz'
  python train.py --config configs/lm_125m.py:125m,alibi ...  # Another position scheme
  python train.py --config configs/lm_350m.py ...             # GPT-3 Medium (350M)

For a GPU or TPU mesh: the shapes, batch and schedule of Brown et al. 2020 ("Language Models
are Few-Shot Learners", Table 2.1 and Appendix B): 12 layers of d_model 768 and 12 heads of 64
(350M: 24 layers, d_model 1024, 16 heads of 64), context 2048, a batch of 0.5M tokens (256
rows of 2048; the paper's gradual batch ramp is left out), Adam with beta2 0.95 and gradient
clipping at 1.0, weight decay 0.1, peak learning rate 6e-4 (350M: 3e-4) warmed up linearly
over the first 375M tokens (715 steps), then a cosine down to 10% of the peak; the run, 300B
tokens, is 572,204 steps. GPT-3 ended its cosine at 260B tokens and held 10% after; here the
cosine spans train.steps, so a shorter run (--config.train.steps) decays within it. Activations in bfloat16 (parameters and optimizer in float32); on a CPU
pass --config.model.dtype=float32. The layers run as one scan (compile time independent of
depth) and every block is rematerialised to its matmuls ('dots').

Differences from GPT-3 that this project keeps on purpose: the position scheme is an argument
(RoPE by default, where GPT-3 learned absolute positions), attention is dense in every layer
(GPT-3 alternated dense and locally banded sparse layers), and the tokenizer is the data's
(a SentencePiece model of up to data.vocab_size pieces, 50,304 = GPT-2's 50,257 rounded up to a
multiple of 128, or any tokenizer config.data.tokenizer names; model.vocab_size follows it).
"""

from configs import lm

TOKENS_PER_STEP = 256 * 2048  # GPT-3's 0.5M-token batch.
SIZES = {  # name: (num_layers, d_model, num_heads, peak learning rate), Table 2.1.
    '125m': (12, 768, 12, 6e-4),
    '350m': (24, 1024, 16, 3e-4),
}


def get_config(arg: str = '125m'):
  parts = (arg or '125m').split(',')
  size, position = parts[0], (parts[1] if len(parts) > 1 else 'rope')
  if size not in SIZES:
    raise ValueError(f'configs/lm_125m.py:{arg}: the size is one of {sorted(SIZES)}.')
  layers, d_model, heads, learning_rate = SIZES[size]
  config = lm.get_config(position)
  config.data.update(seq_len=2048, vocab_size=50_304)
  # GPT-3's initialisation (GPT-2's): every weight N(0, 0.02^2), the residual writes at
  # 0.02 / sqrt(2 layers), the tied output unscaled; the loss starts near ln V (T5's N(0, 1)
  # embedding read out at 1/sqrt(d), the classic default, starts about 14 above it here).
  config.model.update(num_layers=layers, d_model=d_model, num_heads=heads, d_ff=4 * d_model,
                      dtype='bfloat16', scan_layers=True, remat='dots', init='normal',
                      init_std=0.02)
  config.train.update(
      batch_size=256, grad_accum_steps=8,  # 32 rows of 2048 per micro-batch.
      steps=300_000_000_000 // TOKENS_PER_STEP,
      warmup_steps=375_000_000 // TOKENS_PER_STEP,
      learning_rate=learning_rate, schedule='cosine', end_lr_fraction=0.1,
      weight_decay=0.1, b1=0.9, b2=0.95, grad_clip=1.0,
      log_every=100, eval_every=2000, eval_batches=50, checkpoint_every=2000)
  config.eval.update(batch_size=16, length_multipliers=(1, 2))
  return config
