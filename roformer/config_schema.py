"""Every config field's type and range, declared once: the fields of configs/base.py and those
the task configs add (configs/mlm.py, classify.py, translate.py, synthetic.py).

`check(config)` holds every field of a config to its spec (roformer/specs.py) before anything is
built: the type, the range, finiteness for every number. A field that is present but declared
nowhere is an error too, which catches a typo in a config file and a new field added without a
spec. The position schemes declare their options in their own classes (`defaults`), so
`config.model.position` comes from the registry. The checks that relate several fields (d_model
divisible by num_heads, warmup_steps <= steps, ...) stay in roformer/config_lib.py.

A field missing from a config is not an error here: configs saved before a field existed lack
it, and the code reads it with its default.
"""

from roformer import attention
from roformer import metrics
from roformer import models
from roformer import positions
from roformer import stack
from roformer.specs import Bool, Float, Int, Map, Names, Seq, Str, check_tree

_STEPS = 2**31 - 1  # Step counters are int32.
_BIG = 2**24  # Sizes and counts beyond any model this project trains on one host.


def schema() -> dict:
  """{field: spec or group}, built on each call: position schemes may register later."""
  return {
      'seed': Int(0, 2**31 - 2),  # seed + 1 seeds dropout.
      'init_from': Str(),  # A workdir, or '' for none.
      'data': {
          'name': Str(nonempty=True),
          'data_dir': Str(),
          'text_key': Str(),  # '' where the task reads other features.
          'splits': Map(Str(nonempty=True)),
          'vocab_size': Int(16, 2**20),
          'seq_len': Int(1, 2**20),
          'shuffle_window': Int(0, _BIG),
          # configs/mlm.py
          'mask_rate': Float(0, 1, min_open=True),
          'mask_fraction': Float(0, 1),
          'random_fraction': Float(0, 1),
          'max_predictions': Int(-1, _BIG),  # -1 automatic, 0 every position, N per row.
          # configs/classify.py
          'text_keys': Seq(Str(nonempty=True), 1, 2),
          'label_key': Str(nonempty=True),
          # configs/translate.py
          'source_key': Str(nonempty=True),
          'target_key': Str(nonempty=True),
          'reverse': Bool(),
          # configs/synthetic.py
          'synthetic': {
              'seed': Int(0, 2**31 - 1),
              'eval_examples': Int(1, 10**9),
              'key_digits': Int(1, 10),
              'depth_buckets': Int(1, 100),
              'num_keys': Int(1, 100_000),
              'num_values': Int(2, 100_000),
              'num_queries': Int(1, 1000),
              'num_symbols': Int(2, 100_000),
              'min_length': Int(1, 100_000),
              'reverse': Bool(),
          },
      },
      'model': {
          'type': Str(choices=lambda: models.MODELS),
          'vocab_size': Int(1, _BIG),
          'num_layers': Int(1, 1024),
          'd_model': Int(1, 2**16),
          'num_heads': Int(1, 1024),
          'd_ff': Int(1, 2**18),
          'dropout': Float(0, 1, max_open=True),
          'dtype': Str(('float32', 'bfloat16', 'float16')),
          'remat': Str(choices=lambda: stack.REMAT_POLICIES),
          'scan_layers': Bool(),
          'attention_impl': Str(attention.IMPLEMENTATIONS),
          'loss_chunk': Int(0, 2**20),  # Sequence positions per chunk of the output layer; 0: all.
          'causal_block': Int(0, 2**20),  # Query rows per block of causal attention; 0: whole.
          'norm': Str(models.NORMS),
          'activation': Str(choices=lambda: models.ACTIVATIONS),
          'layer_norm_eps': Float(0, 1, min_open=True),
          'type_vocab_size': Int(0, 1024),
          'position': positions.field_specs(),
          'attention': {
              'kind': Str(('softmax', 'favor')),
              'num_features': Int(1, 2**16),
              'redraw_interval': Int(0, _STEPS),
              'rope_mode': Str(('features', 'qk')),
              'chunk': Int(1, 2**20),
          },
          # configs/classify.py
          'num_classes': Int(1, 2**20),  # 1: regression.
          'pooling': Str(models.POOLINGS),
      },
      'train': {
          'batch_size': Int(1, _BIG),
          'grad_accum_steps': Int(1, 2**16),
          'steps': Int(1, _STEPS),
          'learning_rate': Float(0, min_open=True),
          'warmup_steps': Int(0, _STEPS),
          'schedule': Str(('cosine', 'rsqrt')),
          'end_lr_fraction': Float(0, 1),
          'weight_decay': Float(0),
          'b1': Float(0, 1, max_open=True),
          'b2': Float(0, 1, max_open=True),
          'grad_clip': Float(0, min_open=True),
          'label_smoothing': Float(0, 1, max_open=True),
          'log_every': Int(1, _STEPS),
          'eval_every': Int(1, _STEPS),
          'eval_batches': Int(1, _STEPS, also=(-1,)),  # -1: the whole split.
          'checkpoint_every': Int(1, _STEPS),
          'grace_period_s': Float(0, 10**7),  # 0: no limit.
          'on_nonfinite': Str(('stop', 'skip')),
          'random_positions': Int(0, _STEPS),  # 0: consecutive positions.
          'max_to_keep': Int(1, 10**6),
      },
      'eval': {
          'length_multipliers': Seq(Int(1, 1024), 1),
          'batch_size': Int(1, _BIG),
          'max_batches': Int(1, _STEPS, also=(-1,)),  # -1: the whole split.
          'scale_rope_to_length': Bool(),
          'position_bucket': Int(0, 2**20),  # 0: data.seq_len / 4.
          # configs/classify.py
          'metrics': Seq(Str(choices=lambda: {**metrics.CLASSIFICATION_METRICS,
                                              **metrics.REGRESSION_METRICS}), 1),
          'splits': Seq(Str(nonempty=True), 1),
          # configs/translate.py
          'beam_size': Int(1, 1024),
          'alpha': Float(0, 100),  # GNMT length penalty.
          'bleu_sentences': Int(1, _BIG, also=(-1,)),  # -1: the whole split.
          'bleu_sentences_test': Int(1, _BIG, also=(-1,)),
      },
      'mesh': {  # -1: the remaining devices (num_devices: all).
          'data': Int(1, 2**20, also=(-1,)),
          'fsdp': Int(1, 2**20, also=(-1,)),
          'tensor': Int(1, 2**20, also=(-1,)),
          'num_devices': Int(1, 2**20, also=(-1,)),
          'rules': Map(Names()),  # Logical axis -> mesh axes (sharding.rules_from_config).
      },
  }


def spec_at(path: str):
  """The spec (or group) of the dotted field `path` ('model.position.rope.base'), or None."""
  node = schema()
  for part in path.split('.'):
    if not isinstance(node, dict) or part not in node:
      return None
    node = node[part]
  return node


def check(config) -> None:
  """Raises ConfigError naming the first field that is undeclared or outside its spec."""
  check_tree(config, schema(), 'config')
