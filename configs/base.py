"""Shared configuration pieces. Every task config starts from `get_config()` here."""

import ml_collections

from roformer import positions
from roformer import sharding


def position_config(kind: str = 'rope') -> ml_collections.ConfigDict:
  """`config.model.position`: the kind, and each kind's own fields with their defaults (a kind's
  fields may only be changed while that kind is selected)."""
  return ml_collections.ConfigDict({'kind': kind, **positions.default_fields()})


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0
  # A workdir to start from: a masked-LM run for a classifier (its encoder), or a causal-LM run
  # to continue (every parameter; data.seq_len, train.* and RoPE's base and scaling may change).
  c.init_from = ''

  c.data = ml_collections.ConfigDict({
      'name': 'shakespeare',  # An embedded dataset or any TFDS dataset name (e.g. 'lm1b').
      'data_dir': '',  # Default: $ROFORMER_DATA_DIR or ~/.cache/roformer/tfds.
      'text_key': 'text',
      'splits': {},  # Optional renames, e.g. {'validation': 'test'} for datasets without one.
      'vocab_size': 4096,
      'seq_len': 256,
      'shuffle_window': 512,  # Chunks shuffled in a window so one batch mixes documents.
  })

  c.model = ml_collections.ConfigDict({
      'type': 'causal_lm',
      'vocab_size': 4096,  # Set from the tokenizer.
      'num_layers': 4,
      'd_model': 256,
      'num_heads': 4,
      'd_ff': 1024,
      'dropout': 0.0,
      'dtype': 'float32',  # Activations; parameters, optimizer state and statistics: float32.
      'remat': 'none',  # Recompute blocks in the backward pass: 'full', 'dots', 'dots_no_batch'.
      # Run the stack as one lax.scan over the blocks (one block compiled, whatever the depth;
      # the same outputs, gradients and checkpoints as the loop). Decoding with a cache loops.
      'scan_layers': False,
      # 'auto': cuDNN flash attention on GPU in bf16, XLA's on other accelerators, einsum on CPU
      # (and for Shaw). Or force 'einsum' (every scheme), 'xla' or 'cudnn'.
      'attention_impl': 'auto',
      # Causal LM: the output layer and its loss this many sequence positions (of every row) at
      # a time (roformer/losses.py), never the whole [tokens, vocabulary] logits; 0: all at once.
      'loss_chunk': 32,
      # Causal self-attention (einsum path, no value term): queries in blocks of about this many
      # rows, each attending only to keys up to its last row, so blocks above the diagonal are
      # never computed (roformer/attention.py causal_block_attention); 0: the whole matrix.
      'causal_block': 128,
      'norm': 'pre',  # LayerNorm before each residual branch, or 'post' (BERT, HF RoFormer).
      'activation': 'gelu_tanh',  # MLP activation: 'gelu_tanh', 'gelu' (exact erf), 'relu'.
      'layer_norm_eps': 1e-6,
      'type_vocab_size': 0,  # > 0: a token-type (sentence A/B) embedding, as in BERT.
      'position': position_config('rope'),
      'attention': {
          'kind': 'softmax',  # Or 'favor': FAVOR+ linear attention (Performer).
          'num_features': 256,  # FAVOR+ random features per head.
          'redraw_interval': 1000,  # Steps between feature redraws; 0: never.
          'rope_mode': 'qk',  # RoPE with favor: rotate q, k, or 'features' (the paper's eq. 19).
          'chunk': 128,  # Causal prefix sums: rows per scan step.
      },
  })

  c.train = ml_collections.ConfigDict({
      'batch_size': 8,  # Global, across all devices and processes.
      'grad_accum_steps': 1,  # Micro-batches per step (batch_size / this rows each).
      'steps': 600,
      'learning_rate': 1e-3,
      'warmup_steps': 60,
      'schedule': 'cosine',  # 'cosine' or 'rsqrt'.
      'end_lr_fraction': 0.1,
      'weight_decay': 0.1,
      'b1': 0.9,
      'b2': 0.98,
      'grad_clip': 1.0,
      'label_smoothing': 0.0,
      'log_every': 25,
      'eval_every': 100,
      'eval_batches': -1,  # -1: the whole validation split.
      'checkpoint_every': 200,
      'grace_period_s': 60,  # After SIGTERM/SIGINT: save and exit within this, else exit 1.
      'on_nonfinite': 'stop',  # Non-finite loss/gradient: 'stop' (keep the last checkpoint)
                               # or 'skip' (drop that update, counted as skipped_steps).
      # Randomized positions (Ruoss et al. 2023): N > 0 gives each training row a sorted random
      # subset of [0, N) as positions (evaluation keeps 0, 1, ...); 0: consecutive positions.
      'random_positions': 0,
      'max_to_keep': 3,
  })

  c.eval = ml_collections.ConfigDict({
      'length_multipliers': (1, 2, 4),
      'batch_size': 8,
      'max_batches': -1,
      # eval.py with RoPE scaling: at each length L, rope.scaling.factor = L / data.seq_len
      # (at least 1) instead of one fixed factor for every length.
      'scale_rope_to_length': False,
      # Loss per bucket of this many positions in eval_results.json (0: data.seq_len / 4).
      'position_bucket': 0,
  })

  # Mesh axis sizes; -1 takes the remaining devices. Every axis exists (size 1 if unused).
  c.mesh = ml_collections.ConfigDict({'data': -1, 'fsdp': 1, 'tensor': 1, 'num_devices': -1})
  # Logical axis -> mesh axis (roformer/sharding.py): with fsdp > 1 parameters and optimizer
  # state split along d_model (FSDP); with tensor > 1 heads, MLP columns and vocabulary split.
  c.mesh.rules = ml_collections.ConfigDict(sharding.DEFAULT_RULES)
  return c
