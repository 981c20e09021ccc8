"""A GPT-3 Medium-sized causal LM (350M parameters): 24 layers of d_model 1024 and 16 heads,
peak learning rate 3e-4; everything else as configs/lm_125m.py (Brown et al. 2020, Table 2.1).

  python train.py --config configs/lm_350m.py --workdir runs/350m \
      --config.data.name=files --config.data.files='CORPUS/*.jsonl.gz'
  python train.py --config configs/lm_350m.py:alibi ...   # Another position scheme
"""

from configs import lm_125m


def get_config(position: str = 'rope'):
  return lm_125m.get_config(f'350m,{position or "rope"}')
