"""Performer (FAVOR+ linear attention) language model on the embedded Shakespeare corpus.

  python train.py --config configs/performer.py --workdir runs/performer_rope        # with RoPE
  python train.py --config configs/performer.py:none --workdir runs/performer_none   # without
  python train.py --config configs/performer.py:rope,features --workdir ...  # the paper's form

The RoFormer paper's comparison: Performer with and without RoPE on the same steps. By default
RoPE rotates q and k before the positive feature map (`rope_mode='qk'`); `,features` rotates
the feature vectors in the numerator and keeps the denominator unrotated, as the paper's eq. 19
writes it (that ratio is not bounded, and at these sizes and learning rate it diverges: see the
README). All sizes equal configs/lm.py, so the numbers compare with softmax attention there.
"""

from configs import lm
from roformer import positions


def get_config(arg: str = 'rope'):
  parts = [p for p in (arg or 'rope').split(',') if p]
  kinds = [p for p in parts if p in positions.kinds()]
  unknown = [p for p in parts if p not in kinds and p not in ('qk', 'features')]
  if unknown or len(kinds) > 1:
    raise ValueError(f'configs/performer.py:{arg}: give one position kind (rope, none, '
                     "sinusoidal, learned) and optionally 'qk', or 'features' with rope.")
  config = lm.get_config(kinds[0] if kinds else 'rope')
  config.model.attention.kind = 'favor'
  config.model.attention.rope_mode = 'features' if 'features' in parts else 'qk'
  config.model.attention.redraw_interval = 200  # Features redrawn once, at step 200.
  # 300 steps (a 2-core CPU); scripts/performer_reference.sh trains softmax on this schedule.
  config.train.update(steps=300, warmup_steps=30, eval_every=50)
  return config
