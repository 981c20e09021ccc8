"""Encoder-decoder translation, English -> German by default.

  python train.py --config configs/translate.py --workdir runs/translate          # CPU-sized
  python train.py --config configs/translate.py:sinusoidal --workdir runs/tr_sin
  python train.py --config configs/translate.py:base --workdir runs/wmt_base     # WMT14, base

The argument is a comma-separated list of a position kind and/or `base` (Transformer-base sizes
on wmt14_translate/de-en, as in the RoFormer paper's first experiment). `--config.data.reverse`
translates the other way; reports name the direction.
"""

from configs import base as base_config
from roformer import positions


def get_config(arg: str = 'rope'):
  parts = [p for p in (arg or 'rope').split(',') if p]
  kinds = [p for p in parts if p in positions.kinds()]
  config = base_config.get_config()
  config.model.type = 'encoder_decoder'
  config.model.position.kind = kinds[0] if kinds else 'rope'
  config.model.update(num_layers=3, d_model=256, num_heads=4, d_ff=1024, dropout=0.1)
  config.data.update(name='bible_en_de', text_key='', source_key='en', target_key='de',
                     vocab_size=8000, seq_len=64)
  # About 0.65 steps/s on 2 CPU cores: 2,000 steps plus evaluation fit in about an hour.
  config.train.update(batch_size=32, steps=2000, learning_rate=1e-3, warmup_steps=200,
                      label_smoothing=0.1, eval_every=500, checkpoint_every=500)
  config.eval.update(length_multipliers=(1,), batch_size=32)
  # Beam search (4 beams, GNMT length penalty 0.6), validation BLEU on the first 200 pairs and
  # eval.py's on the whole test split are the defaults (config.eval.beam_size, alpha,
  # bleu_sentences, bleu_sentences_test).
  if 'base' in parts:  # Vaswani et al. 2017, Transformer-base.
    config.model.update(num_layers=6, d_model=512, num_heads=8, d_ff=2048, dropout=0.1)
    config.data.update(name='wmt14_translate/de-en', vocab_size=32000, seq_len=128)
    config.train.update(batch_size=256, steps=100_000, learning_rate=7e-4, warmup_steps=4000,
                        schedule='rsqrt', eval_every=5000, checkpoint_every=5000)
  unknown = [p for p in parts if p not in kinds and p != 'base']
  if len(kinds) > 1:  # One run trains one kind; a sweep compares them.
    raise ValueError(f'configs/translate.py:{arg}: one position kind a run, not {kinds}. Fix: '
                     f'train each apart (configs/translate.py:{kinds[0]}, ...:{kinds[1]}).')
  if unknown:
    raise ValueError(f'configs/translate.py:{arg}: unknown parts {unknown}; use position kinds '
                     f'{positions.kinds()} and/or "base".')
  return config
