"""Tiny configs for tests and smoke runs: seconds per run on one CPU core.

  configs/test.py           causal LM
  configs/test.py:mlm       masked LM (configs/mlm.py, shrunk)
  configs/test.py:classify  rotten_tomatoes classifier with the same encoder sizes
"""

from configs import classify
from configs import lm
from configs import mlm


def _shrink(config):
  config.data.vocab_size = 512
  config.data.seq_len = 32
  config.data.shuffle_window = 16
  config.model.update(num_layers=2, d_model=32, num_heads=4, d_ff=64)
  config.train.update(batch_size=8, steps=12, warmup_steps=2, learning_rate=3e-3, log_every=1,
                      eval_every=6, eval_batches=2, checkpoint_every=6)
  config.eval.update(batch_size=8, max_batches=2)
  if config.model.type != 'classifier':  # A classifier scores its examples at seq_len.
    config.eval.length_multipliers = (1, 2)
  return config


def get_config(arg: str = 'rope'):
  parts = (arg or 'rope').split(',')
  if parts[0] == 'mlm':
    return _shrink(mlm.get_config(parts[1] if len(parts) > 1 else 'roformer'))
  if parts[0] == 'classify':
    return _shrink(classify.get_config(','.join(['rotten_tomatoes'] + parts[1:])))
  return _shrink(lm.get_config(arg))
