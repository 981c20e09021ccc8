"""Continue a causal LM (trained here or imported from Hugging Face) from its own config.

  python train.py --config configs/continued.py:runs/llama --workdir runs/llama_yarn \
      --config.data.seq_len=1024 --config.train.steps=200 \
      --config.model.position.rope.scaling.kind=yarn \
      --config.model.position.rope.scaling.factor=4

The config is the source workdir's own (its model, tokenizer and data) with init_from set to it,
so that only what continuing changes needs a flag: data.seq_len, train.*, RoPE's base and
scaling, train.pose_target_length (PoSE), the data (--config.data.name=files ...) and the
compute settings (dtype, remat, ...). What may change is roformer/saved_config.py's
'continue' column; any other model field differing from the source's is refused by train.py.
"""

import os

from roformer import errors
from roformer import saved_config


_FIX = ('Fix: --config configs/continued.py:WORKDIR, with WORKDIR a causal LM trained here or '
        'imported by scripts/convert_hf.py.')


def get_config(workdir: str = ''):
  if not workdir:
    raise errors.ConfigError(f'configs/continued.py continues a source run and names none. {_FIX}')
  if not os.path.exists(os.path.join(workdir, 'config.json')):
    raise errors.ConfigError(f'{workdir} holds no config.json: it is no run to continue. {_FIX}')
  config = saved_config.load(workdir)
  with config.unlocked():
    config.init_from = workdir
    # The source's scaling is its own trained setting: a stretching one takes its original
    # length from the source again (roformer/resolve.py: take_from_source), so it is reset with it.
    config.model.position.rope.scaling.original_length = 0
  return config
