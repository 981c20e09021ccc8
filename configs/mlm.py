"""Masked-LM pretraining of a bidirectional encoder (BERT's objective), sized for a 2-core CPU.

  python train.py --config configs/mlm.py:roformer --workdir runs/mlm_roformer   # RoPE
  python train.py --config configs/mlm.py:bert --workdir runs/mlm_bert           # learned
  python train.py --config configs/mlm.py:alibi --workdir ...                    # any kind

`bert` and `roformer` differ only in the position scheme, as in the RoFormer paper's
pretraining comparison. 15% of tokens are selected (80% [MASK], 10% random, 10% kept); the loss
and accuracy are over the selected tokens. Any TFDS text dataset works by name, e.g.
`--config.data.name=lm1b`.
"""

from configs import base
from roformer import positions

NAMED = {'bert': 'learned', 'roformer': 'rope'}


def get_config(arg: str = 'roformer'):
  arg = arg or 'roformer'
  if arg not in NAMED and arg not in positions.kinds():
    raise ValueError(f'configs/mlm.py:{arg}: use bert, roformer or a position kind '
                     f'{positions.kinds()}.')
  config = base.get_config()
  config.model.type = 'mlm'
  config.model.position.kind = NAMED.get(arg, arg)
  if config.model.position.kind == 'learned':
    config.model.position.learned.max_length = 512  # BERT's table.
  config.model.type_vocab_size = 2  # Sentence A/B, used by sentence-pair fine-tuning.
  config.data.seq_len = 256
  # BERT's masking is the default (config.data.mask_rate, mask_fraction, random_fraction,
  # max_predictions: roformer/config_schema.py).
  # configs/lm.py's budget (600 steps of 8 x 256 tokens); validation every 50 steps on 40
  # batches, for the loss curves.
  config.train.update(batch_size=8, steps=600, warmup_steps=60, eval_every=50,
                      checkpoint_every=200, eval_batches=40)
  config.eval.length_multipliers = (1,)
  return config
