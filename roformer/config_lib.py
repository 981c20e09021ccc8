"""Config checks (before anything is built or compiled) and the workdir's saved config."""

import json
import os

import jax
import ml_collections

from roformer import attention
from roformer import metrics
from roformer import models
from roformer import errors
from roformer import positions
from roformer import sharding
from roformer.data import synthetic

SCHEDULES = ('cosine', 'rsqrt')


def _positive_int(value, name):
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    raise errors.ConfigError(f'{name}={value!r} must be a positive integer.')


def validate(config: ml_collections.ConfigDict, num_data_parallel: int | None = None,
             process_count: int = 1) -> None:
  """Raises ValueError naming the offending field and the fix."""
  m, t, d = config.model, config.train, config.data
  for name in ('num_layers', 'd_model', 'num_heads', 'd_ff'):
    _positive_int(m[name], f'config.model.{name}')
  for name in ('batch_size', 'steps', 'log_every', 'eval_every', 'checkpoint_every',
               'max_to_keep'):
    _positive_int(t[name], f'config.train.{name}')
  _positive_int(d.seq_len, 'config.data.seq_len')
  _positive_int(d.vocab_size, 'config.data.vocab_size')
  if d.vocab_size < 16:
    raise errors.ConfigError(f'config.data.vocab_size={d.vocab_size} is too small (>= 16).')
  if m.d_model % m.num_heads:
    raise errors.ConfigError(f'config.model.d_model={m.d_model} is not divisible by '
                     f'config.model.num_heads={m.num_heads}. Fix: change one of them.')
  if not 0.0 <= m.dropout < 1.0:
    raise errors.ConfigError(f'config.model.dropout={m.dropout} must be in [0, 1).')
  if m.attention_impl not in attention.IMPLEMENTATIONS:
    raise errors.ConfigError(f'config.model.attention_impl={m.attention_impl!r} is unknown. Fix: one of '
                     f'{attention.IMPLEMENTATIONS}.')
  loss_chunk = m.get('loss_chunk', 0)
  if not isinstance(loss_chunk, int) or isinstance(loss_chunk, bool) or loss_chunk < 0:
    raise errors.ConfigError(f'config.model.loss_chunk={loss_chunk!r} must be an integer >= 0 '
                             '(sequence positions per chunk of the output layer; 0: all).')
  causal_block = m.get('causal_block', 0)
  if not isinstance(causal_block, int) or isinstance(causal_block, bool) or causal_block < 0:
    raise errors.ConfigError(f'config.model.causal_block={causal_block!r} must be an integer >= 0 '
                             '(query rows per block of causal attention; 0: the whole matrix).')
  if m.get('remat', 'none') not in models.REMAT_POLICIES:
    raise errors.ConfigError(f'config.model.remat={m.remat!r} is unknown. Fix: one of '
                             f'{sorted(models.REMAT_POLICIES)}.')
  if t.get('on_nonfinite', 'stop') not in ('stop', 'skip'):
    raise errors.ConfigError(f"config.train.on_nonfinite={t.on_nonfinite!r}: use 'stop' or "
                             "'skip'.")
  if not isinstance(t.get('grace_period_s', 60), (int, float)) or t.get('grace_period_s', 60) < 0:
    raise errors.ConfigError(f'config.train.grace_period_s={t.grace_period_s!r} must be a '
                             'number of seconds >= 0 (0: no limit).')
  accum = t.get('grad_accum_steps', 1)
  _positive_int(accum, 'config.train.grad_accum_steps')
  if t.batch_size % accum:
    raise errors.ConfigError(f'config.train.batch_size={t.batch_size} is not divisible by '
                             f'config.train.grad_accum_steps={accum}. Fix: make the batch a '
                             'multiple of the number of micro-batches.')
  if m.dtype not in ('float32', 'bfloat16', 'float16'):
    raise errors.ConfigError(f'config.model.dtype={m.dtype!r}: use float32, bfloat16 or float16.')
  if t.schedule not in SCHEDULES:
    raise errors.ConfigError(f'config.train.schedule={t.schedule!r} is unknown. Fix: one of {SCHEDULES}.')
  if t.learning_rate <= 0:
    raise errors.ConfigError(f'config.train.learning_rate={t.learning_rate} must be > 0.')
  if not 0 <= t.warmup_steps <= t.steps:
    raise errors.ConfigError(f'config.train.warmup_steps={t.warmup_steps} must be in [0, '
                             f'config.train.steps={t.steps}].')
  for name in ('b1', 'b2'):
    if not 0.0 <= t[name] < 1.0:
      raise errors.ConfigError(f'config.train.{name}={t[name]} must be in [0, 1).')
  if not 0.0 <= t.end_lr_fraction <= 1.0:
    raise errors.ConfigError(f'config.train.end_lr_fraction={t.end_lr_fraction} must be in '
                             '[0, 1].')
  if not 0.0 <= t.get('label_smoothing', 0.0) < 1.0:
    raise errors.ConfigError(f'config.train.label_smoothing={t.label_smoothing} must be in '
                             '[0, 1).')
  if t.grad_clip <= 0 or t.weight_decay < 0:
    raise errors.ConfigError('config.train.grad_clip must be > 0 and config.train.weight_decay '
                             '>= 0.')
  if not isinstance(config.seed, int):
    raise errors.ConfigError(f'config.seed={config.seed!r} must be an integer.')
  if d.shuffle_window < 0:
    raise errors.ConfigError(f'config.data.shuffle_window={d.shuffle_window} must be >= 0.')
  _positive_int(config.eval.batch_size, 'config.eval.batch_size')
  for name, value in (('config.train.eval_batches', t.eval_batches),
                      ('config.eval.max_batches', config.eval.max_batches)):
    if value == 0 or value < -1:
      raise errors.ConfigError(f'{name}={value} must be a positive count or -1 (everything).')
  if m.attention_impl == 'cudnn' and (jax.default_backend() != 'gpu' or m.dtype == 'float32'):
    raise errors.ConfigError(
        "config.model.attention_impl='cudnn' needs a GPU and bfloat16/float16 activations "
        f"(backend {jax.default_backend()}, dtype {m.dtype}). Fix: use 'xla' or 'einsum'.")
  if m.type not in models.MODELS:
    raise errors.ConfigError(f'config.model.type={m.type!r} is unknown. Fix: one of '
                             f'{sorted(models.MODELS)}.')
  _validate_architecture(config)
  for causal in models.attention_directions(m):
    positions.validate(m, d.seq_len, causal=causal)
  for mult in config.eval.length_multipliers:
    _positive_int(mult, 'config.eval.length_multipliers[]')
  _validate_lengths(config)
  if config.eval.get('scale_rope_to_length') and (
      'rope' not in positions.scheme_fields(m.position.kind)
      or m.position.rope.scaling.kind == 'none'):
    raise errors.ConfigError(
        'config.eval.scale_rope_to_length=True sets the RoPE scaling factor to each evaluation '
        f'length / data.seq_len, but position.kind={m.position.kind!r} with '
        f'rope.scaling.kind={m.position.rope.scaling.kind!r} has no RoPE scaling to set. Fix: '
        "add --config.model.position.rope.scaling.kind=linear (or ntk, yarn, llama3, dynamic) "
        'or drop it.')
  sharding.rules_from_config(config.mesh)
  if num_data_parallel is not None:
    # Each micro-batch is split over the devices.
    train_name = 'train.batch_size' + (f' / train.grad_accum_steps ({accum})' if accum > 1 else '')
    for name, batch in ((train_name, t.batch_size // accum),
                        ('eval.batch_size', config.eval.batch_size)):
      if batch % num_data_parallel or batch % process_count:
        raise errors.ConfigError(
            f'config.{name} = {batch} is not divisible by the data-parallel size '
            f'{num_data_parallel} (mesh data x fsdp) and process count {process_count}. Fix: '
            f'use a multiple of {num_data_parallel * process_count}.')


def _validate_lengths(config) -> None:
  """Synthetic tasks against the training and evaluation lengths; randomized positions."""
  m, d, t = config.model, config.data, config.train
  task = synthetic.task_name(d)
  if task:
    if m.type != 'causal_lm' or 'synthetic' not in d:
      raise errors.ConfigError(
          f'config.data.name={d.name!r} is a synthetic task for a causal LM with a '
          f'config.data.synthetic group (model.type is {m.type!r}). Fix: start from '
          'configs/synthetic.py.')
    longest = d.seq_len * max(config.eval.length_multipliers, default=1)
    synthetic.validate(task, d.synthetic, d.seq_len, longest)
  top = t.get('random_positions', 0)
  if not isinstance(top, int) or isinstance(top, bool) or top < 0:
    raise errors.ConfigError(f'config.train.random_positions={top!r} must be an integer >= 0 '
                             '(0: consecutive positions).')
  if top:
    if m.type != 'causal_lm':
      raise errors.ConfigError('config.train.random_positions is offered for the causal LM '
                               f'(model.type is {m.type!r}). Fix: set it to 0.')
    if m.position.kind in ('none', 'cope'):
      raise errors.ConfigError(
          f'config.train.random_positions={top}, but position.kind={m.position.kind!r} reads '
          'no integer positions. Fix: set it to 0, or choose a scheme that reads positions.')
    if not d.seq_len <= top < 2**31 // (d.seq_len + 2):
      raise errors.ConfigError(
          f'config.train.random_positions={top} is below config.data.seq_len={d.seq_len} (a '
          'row needs that many distinct positions) or too large. Fix: a value from '
          f'{d.seq_len} (e.g. 8 x seq_len, the longest evaluation length).')
    positions.validate(m, top, causal=True)  # E.g. a learned table shorter than that.
  bucket = config.eval.get('position_bucket', 0)
  if not isinstance(bucket, int) or isinstance(bucket, bool) or bucket < 0:
    raise errors.ConfigError(f'config.eval.position_bucket={bucket!r} must be an integer >= 0 '
                             '(0: data.seq_len / 4).')


def _validate_architecture(config) -> None:
  """The stack's options and each model type's own fields."""
  m, d = config.model, config.data
  if m.get('norm', 'pre') not in models.NORMS:
    raise errors.ConfigError(f'config.model.norm={m.norm!r} is unknown. Fix: one of '
                             f'{models.NORMS}.')
  if m.get('norm', 'pre') == 'post' and m.type == 'encoder_decoder':
    raise errors.ConfigError("config.model.norm='post' is offered for encoder and decoder-only "
                             "models. Fix: use norm='pre' for encoder_decoder.")
  if m.get('activation', 'gelu_tanh') not in models.ACTIVATIONS:
    raise errors.ConfigError(f'config.model.activation={m.activation!r} is unknown. Fix: one of '
                             f'{sorted(models.ACTIVATIONS)}.')
  if not isinstance(m.get('type_vocab_size', 0), int) or m.get('type_vocab_size', 0) < 0:
    raise errors.ConfigError(f'config.model.type_vocab_size={m.type_vocab_size!r} must be an '
                             'integer >= 0 (0: no token-type embedding).')
  if not m.get('layer_norm_eps', 1e-6) > 0:
    raise errors.ConfigError(f'config.model.layer_norm_eps={m.layer_norm_eps} must be > 0.')
  _validate_attention(m)
  if m.type == 'mlm':
    if not 0.0 < d.mask_rate <= 1.0:
      raise errors.ConfigError(f'config.data.mask_rate={d.mask_rate} must be in (0, 1].')
    if (min(d.mask_fraction, d.random_fraction) < 0 or
        d.mask_fraction + d.random_fraction > 1.0):
      raise errors.ConfigError(
          f'config.data.mask_fraction={d.mask_fraction} and random_fraction='
          f'{d.random_fraction} must be >= 0 with a sum <= 1 (the rest keeps the token).')
    cap = d.get('max_predictions', -1)
    if not isinstance(cap, int) or cap < -1:
      raise errors.ConfigError(
          f'config.data.max_predictions={cap!r} must be an integer: -1 (automatic), 0 (logits '
          'at every position) or a count per row.')
  if m.type == 'classifier':
    _positive_int(m.num_classes, 'config.model.num_classes')
    if m.pooling not in models.POOLINGS:
      raise errors.ConfigError(f'config.model.pooling={m.pooling!r} is unknown. Fix: one of '
                               f'{models.POOLINGS}.')
    keys = d.get('text_keys') or ()
    if not 1 <= len(keys) <= 2 or not d.get('label_key'):
      raise errors.ConfigError(
          f'config.data.text_keys={tuple(keys)} and label_key={d.get("label_key")!r}: a '
          'classifier needs one or two text features and a label feature. Fix: start from '
          'configs/classify.py.')
    if d.seq_len < len(keys) + 2:
      raise errors.ConfigError(f'config.data.seq_len={d.seq_len} leaves no room for text.')
    regression = m.num_classes == 1
    allowed = metrics.REGRESSION_METRICS if regression else metrics.CLASSIFICATION_METRICS
    bad = [name for name in config.eval.get('metrics', ()) if name not in allowed]
    if bad:
      raise errors.ConfigError(
          f'config.eval.metrics has {bad}, which do not apply to '
          f'{"regression" if regression else "classification"} (num_classes={m.num_classes}). '
          f'Fix: choose from {sorted(allowed)}.')
    if m.get('type_vocab_size', 0) == 1 and len(keys) == 2:
      raise errors.ConfigError('config.model.type_vocab_size=1 cannot tell two sentences apart. '
                               'Fix: 2 (or 0 for no token types).')
  elif config.get('init_from') and m.type != 'causal_lm':
    raise errors.ConfigError(f'config.init_from starts a classifier from a masked LM or '
                             f'continues a causal LM, not a {m.type!r} model. Fix: leave it '
                             'empty.')


# Why a position scheme cannot be combined with FAVOR+ linear attention.
_NOT_LINEAR = {
    't5': 'it adds a learned bias to each of the L x L attention logits',
    'alibi': 'it adds -m|i-j| to each of the L x L attention logits',
    'shaw': 'it adds q_i.r(i-j) to each logit and a value term weighted by the probabilities',
    'xl': 'it adds content- and position-dependent terms to each of the L x L logits',
    'kerple': 'it adds a learned kernel of abs(i-j) to each of the L x L attention logits',
    'fire': 'it adds a learned function of (i-j, i) to each of the L x L attention logits',
    'cope': 'it adds q_i.e[p_ij] with p_ij a sum of gates sigmoid(q_i.k_t) over the L x L pairs',
}


def _validate_attention(m) -> None:
  att = models.attention_config(m)
  if att.kind not in ('softmax', 'favor'):
    raise errors.ConfigError(f"config.model.attention.kind={att.kind!r} is unknown. Fix: "
                             "'softmax' or 'favor'.")
  if att.kind != 'favor':
    return
  _positive_int(att.num_features, 'config.model.attention.num_features')
  _positive_int(att.chunk, 'config.model.attention.chunk')
  if att.num_features % 2:
    raise errors.ConfigError(f'config.model.attention.num_features={att.num_features} must be '
                             'even (RoPE rotates pairs of features).')
  if not isinstance(att.redraw_interval, int) or att.redraw_interval < 0:
    raise errors.ConfigError(f'config.model.attention.redraw_interval={att.redraw_interval!r} '
                             'must be an integer >= 0 (0: never redraw).')
  if att.rope_mode not in ('features', 'qk'):
    raise errors.ConfigError(f"config.model.attention.rope_mode={att.rope_mode!r}: use "
                             "'features' (the RoFormer paper) or 'qk'.")
  if m.type == 'encoder_decoder':
    raise errors.ConfigError("config.model.attention.kind='favor' is offered for causal_lm, mlm "
                             "and classifier. Fix: use 'softmax' for encoder_decoder.")
  kind = m.position.kind
  if kind in _NOT_LINEAR:
    raise errors.ConfigError(
        f"config.model.position.kind={kind!r} cannot be used with attention.kind='favor': "
        f'{_NOT_LINEAR[kind]}, and linear attention never forms those logits. Fix: use rope, '
        'none, sinusoidal or learned positions with favor, or softmax attention.')
  rope = m.position.rope
  plain_rope = (rope.scaling.kind == 'none' and rope.fraction == 1.0
                and rope.get('keep_fraction', 1.0) == 1.0)
  if att.rope_mode == 'features' and (kind == 'xpos' or (kind == 'rope' and not plain_rope)):
    raise errors.ConfigError(
        f"{kind}{' with rope.scaling, fraction or keep_fraction' if kind == 'rope' else ''} "
        'rotates queries and keys in ways the feature rotation (all features, plain '
        'frequencies) does not reproduce. Fix: --config.model.attention.rope_mode=qk.')


def save(config: ml_collections.ConfigDict, workdir: str, name: str = 'config.json') -> None:
  path = os.path.join(workdir, name)
  tmp = path + '.tmp'
  with open(tmp, 'w', encoding='utf-8') as f:
    f.write(config.to_json(indent=2, sort_keys=True))
  os.replace(tmp, path)


def load(workdir: str) -> ml_collections.ConfigDict:
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    raise errors.ConfigError(f'{path} does not exist: --workdir={workdir!r} is not a training '
                            'workdir. Fix: point --workdir at a directory made by train.py.')
  with open(path, encoding='utf-8') as f:
    return ml_collections.ConfigDict(_lists_to_tuples(json.load(f)))


def _lists_to_tuples(value):
  """JSON has no tuples; configs use tuples so that flags can override them."""
  if isinstance(value, dict):
    return {k: _lists_to_tuples(v) for k, v in value.items()}
  if isinstance(value, list):
    return tuple(_lists_to_tuples(v) for v in value)
  return value


def _as_dict(value):
  if hasattr(value, 'to_dict'):
    value = value.to_dict()
  if isinstance(value, dict):
    return {k: _as_dict(v) for k, v in value.items()}
  return value


def differences(a, b, prefix='') -> list[str]:
  """Fields whose values differ between two configs (as nested dicts)."""
  a, b = _as_dict(a), _as_dict(b)
  out = []
  for key in sorted(set(a) | set(b)):
    va, vb = a.get(key), b.get(key)
    name = f'{prefix}.{key}' if prefix else key
    if isinstance(va, dict) and isinstance(vb, dict):
      out += differences(va, vb, name)
    elif va != vb and not (isinstance(va, (list, tuple)) and list(va) == list(vb or [])):
      out.append(f'{name}: {va!r} vs {vb!r}')
  return out
