"""The model types (`config.model.type`), each declared once: what its stacks attend to, what the
config may combine with it, what a run of it may start from, its own config rules and its FLOPs.

The config checks (roformer/resolve.py), the warm start, the FLOP count, the attention and
position options that only a decoder-only model can take, the Hugging Face import and export and
generation ask these declarations; none of them names a type. What a type trains on (its
batches, loss and evaluation) is its task in roformer/tasks/, and the model it builds is in
roformer/models.py (`models.MODELS`), both keyed by the same name.
"""

import dataclasses
from typing import Callable

import ml_collections

from roformer import errors
from roformer import metrics
from roformer import positions


@dataclasses.dataclass(frozen=True)
class ModelType:
  """One value of config.model.type.

  about: what its runs are, for messages ("causal LMs").
  start: the config a new run of it starts from.
  stacks: the causality of each self-attention stack (the position scheme must support each).
  decoder_only: one causal stack that predicts the next token: per-layer position kinds and
    windows, stick-breaking attention, training-position samplers, the synthetic tasks, a
    pretrained tokenizer's own ids, Hugging Face's causal-LM classes and sampling take it.
  documents: it trains on plain documents (config.data.name='files', mixtures of text).
  post_norm, parallel_residual, linear_attention: the block layouts and FAVOR+ it builds.
  starts_from: the type of run config.init_from names ('' : none), and `continues`: whether
    it takes over every parameter of that run (a continuation) or its encoder (fine-tuning).
  generates: what scripts/generate.py does with a run of it ('': it serves none).
  own_fields: the group of config fields only its runs read ('': none), named in words; the
    schema (roformer/config_schema.py) marks that group's fields as read by it.
  validate: its own config rules (ConfigError naming the field and the fix).
  forward_flops(model_cfg, seq_len, predicted_fraction, layer_flops): forward FLOPs per input
    token, with layer_flops(model_cfg, seq_len, causal) one layer's (roformer/flops.py).
  predicted_fraction(config): the share of the tokens its output layer runs at (a masked LM's
    selection rate), for the FLOPs of a measured step (scripts/benchmark.py).
  """
  name: str
  about: str
  start: str
  stacks: tuple[bool, ...]
  forward_flops: Callable[..., float]
  decoder_only: bool = False
  documents: bool = False
  post_norm: bool = True
  parallel_residual: bool = True
  linear_attention: bool = True
  starts_from: str = ''
  continues: bool = False
  generates: str = ''
  own_fields: str = ''
  validate: Callable[[ml_collections.ConfigDict], None] | None = None
  predicted_fraction: Callable[[ml_collections.ConfigDict], float] = lambda config: 1.0


def _mlm_rules(config) -> None:
  d = config.data
  if d.mask_fraction + d.random_fraction > 1.0:
    raise errors.ConfigError(
        f'config.data.mask_fraction={d.mask_fraction} and random_fraction='
        f'{d.random_fraction} must have a sum <= 1 (the rest keeps the token).')


def _classifier_rules(config) -> None:
  m, d = config.model, config.data
  keys = d.text_keys
  if not 1 <= len(keys) <= 2 or not d.label_key:
    raise errors.ConfigError(
        f'config.data.text_keys={tuple(keys)} and label_key={d.label_key!r}: a classifier '
        'needs one or two text features and a label feature. Fix: start from '
        'configs/classify.py.')
  if d.seq_len < len(keys) + 2:
    raise errors.ConfigError(f'config.data.seq_len={d.seq_len} leaves no room for text.')
  regression = m.num_classes == 1
  allowed = metrics.REGRESSION_METRICS if regression else metrics.CLASSIFICATION_METRICS
  bad = [name for name in config.eval.metrics if name not in allowed]
  if bad:
    raise errors.ConfigError(
        f'config.eval.metrics has {bad}, which do not apply to '
        f'{"regression" if regression else "classification"} (num_classes={m.num_classes}). '
        f'Fix: choose from {sorted(allowed)}.')
  if m.type_vocab_size == 1 and len(keys) == 2:
    raise errors.ConfigError('config.model.type_vocab_size=1 cannot tell two sentences apart. '
                             'Fix: 2 (or 0 for no token types).')


def _translation_rules(config) -> None:
  d = config.data
  if not (d.source_key and d.target_key):
    raise errors.ConfigError(
        f'config.data.source_key={d.source_key!r} and target_key={d.target_key!r}: a '
        'translation model needs the features of both languages. Fix: start from '
        'configs/translate.py.')


def _causal_lm_flops(m, seq_len, predicted_fraction, layer):
  del predicted_fraction
  return m.num_layers * layer(m, seq_len, True) + 2 * m.d_model * m.vocab_size


def _mlm_flops(m, seq_len, predicted_fraction, layer):
  """The head (a dense layer) and the output layer at the predicted tokens only."""
  d = m.d_model
  return (m.num_layers * layer(m, seq_len, False)
          + predicted_fraction * (2 * d * d + 2 * d * m.vocab_size))


def _classifier_flops(m, seq_len, predicted_fraction, layer):
  """The pooler and classifier act once per row: negligible."""
  del predicted_fraction
  return m.num_layers * layer(m, seq_len, False)


def _translation_flops(m, seq_len, predicted_fraction, layer):
  """Per target token: the decoder with cross-attention counted like self-attention over
  `seq_len` source tokens, and the encoder per source token."""
  del predicted_fraction
  d, width = m.d_model, m.num_heads * positions.head_dim(m)  # Cross-attention: h heads.
  encoder = m.num_layers * layer(m, seq_len, False)
  cross = 2 * 4 * d * width + 2 * 2 * seq_len * width
  decoder = m.num_layers * (layer(m, seq_len, True) + cross)
  return encoder + decoder + 2 * d * m.vocab_size


# The first is the default of config.model.type.
TYPES = {t.name: t for t in (
    ModelType('causal_lm', 'causal LMs', 'configs/lm.py', (True,), _causal_lm_flops,
              decoder_only=True, documents=True, starts_from='causal_lm', continues=True,
              generates='continues each prompt by sampling'),
    ModelType('mlm', 'masked LMs', 'configs/mlm.py', (False,), _mlm_flops, documents=True,
              own_fields='masking', validate=_mlm_rules,
              predicted_fraction=lambda config: config.data.mask_rate),
    ModelType('classifier', 'classifiers', 'configs/classify.py', (False,), _classifier_flops,
              starts_from='mlm', own_fields='labels and metrics', validate=_classifier_rules),
    ModelType('encoder_decoder', 'translation models', 'configs/translate.py', (False, True),
              _translation_flops, post_norm=False, parallel_residual=False,
              linear_attention=False, generates='translates each prompt with beam search',
              own_fields='language pairs and decoding', validate=_translation_rules),
)}


DEFAULT = next(iter(TYPES))


def named(flag: str) -> list[str]:
  """The names of the types that declare `flag` ("causal_lm")."""
  return [t.name for t in TYPES.values() if getattr(t, flag)]


def owning(group: str) -> ModelType:
  """The type whose `own_fields` are `group`."""
  return next(t for t in TYPES.values() if t.own_fields == group)


def of(model_cfg: ml_collections.ConfigDict) -> ModelType:
  """The declaration of `model_cfg.type`, or ConfigError naming the types."""
  if model_cfg.type not in TYPES:
    raise errors.ConfigError(f'config.model.type={model_cfg.type!r} is unknown. Fix: one of '
                             f'{sorted(TYPES)}.')
  return TYPES[model_cfg.type]


def offering(flag: str) -> str:
  """The types that declare `flag`, in words for a message ("causal LMs")."""
  return ', '.join(t.about for t in TYPES.values() if getattr(t, flag))
