"""Causal language model on the embedded Shakespeare corpus, sized for a 2-core CPU.

  python train.py --config configs/lm.py --workdir runs/lm
  python train.py --config configs/lm.py:sinusoidal --workdir runs/lm_sin
  python train.py --config configs/lm.py --config.model.position.kind=learned --workdir ...
"""

from configs import base


def get_config(position: str = 'rope'):
  config = base.get_config()
  config.model.type = 'causal_lm'
  config.model.position.kind = position or 'rope'
  return config
