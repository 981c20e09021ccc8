"""Performer (FAVOR+ linear attention) language model on the embedded Shakespeare corpus.

  python train.py --config configs/performer.py --workdir runs/performer_rope        # with RoPE
  python train.py --config configs/performer.py:none --workdir runs/performer_none   # without
  python train.py --config configs/performer.py:rope,qk --workdir ...   # rotate q, k instead

The RoFormer paper's comparison (its section 4.5.3): Performer with and without RoPE on the same
steps. With `rope`, the feature vectors are rotated in the numerator and the denominator keeps
the unrotated features (the paper's eq. 19); `,qk` rotates q and k before the feature map. All
sizes equal configs/lm.py, so the numbers compare with softmax attention there.
"""

from configs import lm
from roformer import positions


def get_config(arg: str = 'rope'):
  parts = [p for p in (arg or 'rope').split(',') if p]
  kinds = [p for p in parts if p in positions.kinds()]
  unknown = [p for p in parts if p not in kinds and p != 'qk']
  if unknown or len(kinds) > 1:
    raise ValueError(f'configs/performer.py:{arg}: give one position kind (rope, none, '
                     "sinusoidal, learned) and optionally 'qk'.")
  config = lm.get_config(kinds[0] if kinds else 'rope')
  config.model.attention.kind = 'favor'
  config.model.attention.rope_mode = 'qk' if 'qk' in parts else 'features'
  config.model.attention.redraw_interval = 200  # Three draws over the 600 steps.
  return config
