"""A tiny LM config for tests and smoke runs: seconds per run on one CPU core."""

from configs import lm


def get_config(position: str = 'rope'):
  config = lm.get_config(position)
  config.data.vocab_size = 512
  config.data.seq_len = 32
  config.data.shuffle_window = 16
  config.model.update(num_layers=2, d_model=32, num_heads=4, d_ff=64)
  config.train.update(batch_size=8, steps=12, warmup_steps=2, learning_rate=3e-3, log_every=1, eval_every=6,
                      eval_batches=2, checkpoint_every=6)
  config.eval.update(batch_size=8, max_batches=2, length_multipliers=(1, 2))
  return config
