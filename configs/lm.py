"""Causal language model on the embedded Shakespeare corpus, sized for a 2-core CPU.

  python train.py --config configs/lm.py --workdir runs/lm
  python train.py --config configs/lm.py:sinusoidal --workdir runs/lm_sin
  python train.py --config configs/lm.py --config.model.position.kind=learned --workdir ...
  python train.py --config configs/lm.py:gemma3 --workdir runs/lm_gemma3   # Gemma 3's layout
"""

from configs import base


def get_config(position: str = 'rope'):
  config = base.get_config()
  config.model.type = 'causal_lm'
  if position == 'gemma3':  # Gemma 3's layout: 5 windowed layers at base 10k, 1 global at 1M.
    config.model.position.kind = 'rope'
    config.model.num_layers = 6
    window = config.data.seq_len // 4  # Gemma 3: 1,024 of a 32k context; here a quarter.
    config.model.layer_windows = (window,) * 5 + (0,)
    config.model.layer_rope_bases = (10_000.0,) * 5 + (1_000_000.0,)
    return config
  config.model.position.kind = position or 'rope'
  return config
