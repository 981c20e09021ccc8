"""The PyTorch side of the speed comparison: transformers' models at the JAX benchmark's shapes.

  pip install torch transformers        # not in requirements.txt
  python scripts/benchmark_torch.py --model causal --preset small [--steps 10] [--threads 2]
  python scripts/benchmark_torch.py --model mlm --preset small
  python scripts/compare_torch.py --model causal --preset small   # both sides, taking turns

`--model causal` builds GPTNeoXForCausalLM as `scripts/benchmark.py --config configs/lm.py
--preset P` builds this codebase's causal LM with RoPE: pre-norm blocks with a sequential
residual (use_parallel_residual=False), biases in every projection, LayerNorm (eps 1e-6), a
tanh-approximated GELU MLP, RoPE on the whole head dimension (partial_rotary_factor=1.0), tied
input and output embeddings and dropout 0; the parameter counts are equal (`neox_parameters`,
checked by compare_torch.py before it times anything). The loss is the mean cross-entropy of
[batch, L] targets from [batch, L] inputs, as the JAX side's. Two differences in work that
no option of GPTNeoX removes: the JAX model scales its tied logits by 1/sqrt(d_model) (one
elementwise multiply) and rotates interleaved pairs where GPT-NeoX rotates halves (the same
arithmetic, laid out differently).

`--model mlm` builds RoFormerForMaskedLM as configs/mlm.py:roformer: post-norm encoder with RoPE,
GELU MLP, tied MLM head, dropout 0; the batch is random tokens with 15% of positions selected
(80/10/10 corruption done on the host, outside the timing, as the JAX side does it inside its
step), loss on the selected ones. transformers computes that head's logits at every position.
Its sinusoidal position table is a frozen parameter (sequence x head_dim), left out of the
count that is compared: the trained parameters are as many as the JAX model's.

Both: AdamW with weight decay, gradient clipping at 1.0, float32 eager mode; reports the median
step time and tokens/s over `--steps` after `--warmup` steps. This module imports neither torch
nor JAX at the top, so that its shape and parameter-count helpers run without them.
"""

import json
import statistics
import sys
import time
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position
from roformer import provenance  # pylint: disable=wrong-import-position
from scripts.timing import PRESETS, TORCH_PRESETS  # pylint: disable=wrong-import-position

MODELS = ('causal', 'mlm')
# The packages whose versions its record keeps (provenance.measurement: none imports JAX).
PACKAGES = ('torch', 'transformers', 'numpy')


def neox_config(p: dict) -> dict:
  """GPTNeoXConfig arguments for the shapes `p` (a PRESETS entry), mirroring configs/lm.py."""
  return {'vocab_size': p['vocab_size'], 'hidden_size': p['d_model'],
          'num_hidden_layers': p['num_layers'], 'num_attention_heads': p['num_heads'],
          'intermediate_size': p['d_ff'], 'hidden_act': 'gelu_pytorch_tanh',
          'attention_dropout': 0.0, 'hidden_dropout': 0.0,
          'max_position_embeddings': p['seq_len'], 'layer_norm_eps': 1e-6,
          'tie_word_embeddings': True, 'use_parallel_residual': False, 'attention_bias': True,
          'rope_parameters': {'rope_type': 'default', 'rope_theta': 10000.0,
                              'partial_rotary_factor': 1.0}}


def neox_parameters(config: dict) -> int:
  """The parameter count of GPTNeoXForCausalLM(GPTNeoXConfig(**config)), by hand: the tied
  embedding, and per layer two LayerNorms, the fused qkv and output projections and the MLP
  (with biases when attention_bias), then the final LayerNorm. A test checks it against the
  built model when torch is installed, and against roformer.models.num_parameters."""
  d, f, v = config['hidden_size'], config['intermediate_size'], config['vocab_size']
  bias = config.get('attention_bias', True)
  attention = 3 * d * d + d * d + (4 * d if bias else 0)
  mlp = d * f + f + f * d + d
  layer = 2 * 2 * d + attention + mlp
  embeddings = v * d * (1 if config.get('tie_word_embeddings') else 2)
  return embeddings + config['num_hidden_layers'] * layer + 2 * d


def check_parameters(jax_counts: dict[str, int], torch_count: int) -> str:
  """'' if every JAX model has `torch_count` parameters, else the error naming the counts."""
  wrong = {name: n for name, n in jax_counts.items() if n != torch_count}
  if not wrong:
    return ''
  listed = ', '.join(f'JAX {name} {n:,}' for name, n in sorted(wrong.items()))
  return (f'the parameter counts differ ({listed}; PyTorch {torch_count:,}): not the same model, '
          'so the timings would not compare like with like.')


def _build_causal(torch, transformers, p):
  config = transformers.GPTNeoXConfig(**neox_config(p))
  model = transformers.GPTNeoXForCausalLM(config).train()
  b, length = p['batch_size'], p['seq_len']
  generator = torch.Generator().manual_seed(0)
  tokens = torch.randint(5, p['vocab_size'] - 1, (b, length + 1), generator=generator)
  inputs, targets = tokens[:, :-1], tokens[:, 1:]

  def loss_fn():
    logits = model(input_ids=inputs, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))
  return model, loss_fn


def _build_mlm(torch, transformers, p):
  config = transformers.RoFormerConfig(
      vocab_size=p['vocab_size'], embedding_size=p['d_model'], hidden_size=p['d_model'],
      num_hidden_layers=p['num_layers'], num_attention_heads=p['num_heads'],
      intermediate_size=p['d_ff'], hidden_act='gelu', hidden_dropout_prob=0.0,
      attention_probs_dropout_prob=0.0, max_position_embeddings=p['seq_len'],
      type_vocab_size=2, rotary_value=False)
  model = transformers.RoFormerForMaskedLM(config).train()
  b, length = p['batch_size'], p['seq_len']
  generator = torch.Generator().manual_seed(0)
  tokens = torch.randint(5, p['vocab_size'] - 1, (b, length), generator=generator)
  selected = torch.rand((b, length), generator=generator) < 0.15
  labels = torch.where(selected, tokens, torch.full_like(tokens, -100))
  inputs = torch.where(selected, torch.full_like(tokens, p['vocab_size'] - 1), tokens)
  return model, lambda: model(input_ids=inputs, labels=labels).loss


def build(preset: str, threads: int, model_name: str = 'mlm'):
  """The model, optimizer and batch of `preset`; returns (step, info). step() runs one
  optimizer step and returns the loss tensor."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  if threads:
    torch.set_num_threads(threads)
  p = PRESETS[preset]
  torch.manual_seed(0)
  model, loss_fn = (_build_causal if model_name == 'causal' else _build_mlm)(
      torch, transformers, p)
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)

  def step():
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss

  info = {'framework': f'torch {torch.__version__}, transformers {transformers.__version__}',
          'model': type(model).__name__, 'preset': preset, 'threads': torch.get_num_threads(),
          'attention': model.config._attn_implementation,  # pylint: disable=protected-access
          'tokens': p['batch_size'] * p['seq_len'],
          # Trained parameters; RoFormer's sinusoidal table is a frozen one (not in the count).
          'parameters': sum(t.numel() for t in model.parameters() if t.requires_grad),
          'made_with': provenance.measurement(PACKAGES),
          'frozen_parameters': sum(t.numel() for t in model.parameters()
                                   if not t.requires_grad)}
  return step, info


def time_steps(step, steps: int) -> tuple[list[float], float]:
  times, loss = [], None
  for _ in range(steps):
    start = time.perf_counter()
    loss = step()
    times.append(time.perf_counter() - start)
  return times, float('nan') if loss is None else loss.item()


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('--model', choices=MODELS, default='mlm')
  parser.add_argument('--preset', choices=TORCH_PRESETS, default='small')
  parser.add_argument('--steps', type=int, default=10)
  parser.add_argument('--warmup', type=int, default=2)
  parser.add_argument('--threads', type=int, default=0, help='torch threads (0: default).')
  parser.add_argument('--malloc', choices=('default', 'reuse'), default='default',
                      help='reuse: set glibc malloc as this codebase\'s entry points do '
                      '(roformer/host_memory.py), for a comparison on the same footing.')
  parser.add_argument('--out', default='')
  parser.add_argument('--serve', action='store_true',
                      help='Warm up, then take commands on stdin (the worker of '
                      'scripts/compare_torch.py): `time torch N`, `report`, `quit`.')
  args = parser.parse_args(argv)
  malloc = 'default'
  if args.malloc == 'reuse':
    from roformer import host_memory  # pylint: disable=g-import-not-at-top
    why = host_memory.unavailable()
    if why or not host_memory.reuse_freed_memory():
      print(f'error: --malloc=reuse: {why or "mallopt refused the settings"}. Fix: leave '
            f'--malloc at default, or unset {host_memory.ENV}.', file=sys.stderr)
      return 2
    malloc = 'reuse'
  try:
    step, info = build(args.preset, args.threads, args.model)
    info['malloc'] = malloc
  except ImportError:
    print('error: this benchmark needs torch and transformers (pip install torch '
          'transformers); they are not in requirements.txt.', file=sys.stderr)
    return 2
  time_steps(step, args.warmup)
  if args.serve:
    return serve(step, info)
  times, loss = time_steps(step, args.steps)
  step_s = statistics.median(times)
  result = {**info, 'step_s': step_s, 'tokens_per_s': info['tokens'] / step_s, 'loss': loss,
            'date': time.strftime('%Y-%m-%d')}
  print(json.dumps(result, indent=2))
  if args.out:
    files.write_json_atomic(args.out, result)
  return 0


def serve(step, info: dict) -> int:
  """Answers `time torch N` / `report` / `quit` with `BENCH <json>` lines (as
  scripts/benchmark.py --serve does for the JAX side)."""
  def reply(obj):
    print('BENCH ' + json.dumps(obj), flush=True)
  all_times, loss = [], float('nan')
  reply({'ready': ['torch'], 'parameters': {'torch': info['parameters']}})
  for line in sys.stdin:
    words = line.split()
    if not words or words[0] == 'quit':
      break
    if words[:2] == ['time', 'torch'] and len(words) == 3:
      times, loss = time_steps(step, int(words[2]))
      all_times.extend(times)
      reply({'times': times})
    elif words[0] == 'report':
      step_s = statistics.median(all_times)
      reply({**info, 'step_s': step_s, 'tokens_per_s': info['tokens'] / step_s, 'loss': loss,
             'steps': len(all_times), 'date': time.strftime('%Y-%m-%d')})
    else:
      reply({'error': f'unknown command {line.strip()!r}'})
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
