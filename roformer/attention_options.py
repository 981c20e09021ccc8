"""The attention options (`config.model.attention`): each one's type, range and default, declared
once. roformer/config_schema.py puts them in the config, and a model config without the group
(one built by hand) reads these defaults (`self_attention.attention_config`).

The options act in roformer/self_attention.py and roformer/attention.py. Each attention kind
and each switch declares below what it needs (of the kind, the implementation, the other
options and the position schemes) and what it costs: the config checks (`check`), the FLOPs
(roformer/flops.py) and the table of docs/positions.md (`table`) follow from the declarations.
"""

import copy
import dataclasses
from typing import Any, Callable

from roformer import errors
from roformer import model_types
from roformer import positions
from roformer.specs import Bool, Float, Int, Str, defaults

_STEPS = 2**31 - 1  # Step counters are int32.

SPECS = {
    # 'softmax', 'favor': FAVOR+ linear attention (Performer), or 'stick_breaking'
    # (Tan et al. 2025: sigmoid weights, each query's stick broken from its nearest key
    # outwards; causal LMs, einsum path).
    'kind': Str(('softmax', 'favor', 'stick_breaking'), default='softmax'),
    # stick_breaking: a query may attend to its own token (the product then runs to it).
    'attend_current': Bool(default=False),
    # RMSNorm of each head's queries and keys (a learned scale per dimension, shared by
    # the heads), before any rotation.
    'qk_norm': Bool(default=False),
    # Scalable-Softmax (Nakanishi 2025): logits times s_h log n_i, n_i the keys query i
    # sees, s_h learned per head from `ssmax_init` (the paper's 0.43).
    'ssmax': Bool(default=False),
    'ssmax_init': Float(0, 100, min_open=True, default=0.43),
    # Gated attention (Qiu et al. 2025): each head's output times sigmoid(x W_g + b),
    # x the layer's (normed) input, elementwise per head and dimension, before the
    # output projection (W_g: d_model x d_model more parameters and matmul per layer).
    'output_gate': Bool(default=False),
    # Differential attention (Ye et al. 2025): num_heads / 2 heads, each the difference
    # of two softmax maps (one learned lambda per layer) over values of twice the head
    # width, RMS-normed per head (roformer/differential.py); adds 6 x head_dim
    # parameters per layer.
    'differential': Bool(default=False),
    # DAPE (Zheng et al. 2024): logits q.k/sqrt(d) + B + f([q.k/sqrt(d); B]) with f a
    # two-layer MLP (2 heads -> dape_width -> heads, GELU) applied to each query-key
    # pair's logits and biases over the heads; schemes that add a bias (alibi, kerple,
    # fire, t5, ...). It materialises [batch, L, L, 2 heads + width] per layer.
    'dape': Bool(default=False),
    'dape_width': Int(1, 4096, default=32),
    # Llama 4's attention temperature on the layers without positions (NoPE): their
    # queries times 1 + scale log(floor((p + 1) / floor) + 1) at position p (1 below
    # `floor`), so that attention sharpens with the distance it must cover.
    'nope_temperature': Bool(default=False),
    'nope_temperature_floor': Int(1, 2**30, default=8192),
    'nope_temperature_scale': Float(0, 100, default=0.1),
    'num_features': Int(1, 2**16, default=256),  # FAVOR+ random features per head.
    'redraw_interval': Int(0, _STEPS, default=1000),  # Steps between redraws; 0: never.
    # RoPE with favor: rotate q and k, or the features (the paper's eq. 19).
    'rope_mode': Str(('features', 'qk'), default='qk'),
    'chunk': Int(1, 2**20, default=128),  # Causal prefix sums: rows per scan step.
}
DEFAULTS = defaults(SPECS)


# What each attention kind and option declares: the checks that relate the options to each other,
# to the attention implementation and to the position schemes (`check`), their FLOPs
# (roformer/flops.py) and the table in docs/positions.md (`table`) all follow from these
# declarations; none names a pair of options.

# Features an attention kind may form, and how a message says that one lacks it.
FEATURES = {
    'softmax': 'has no softmax: it forms no softmax maps over logits',
    'logits': 'forms no L x L logits',
    'head_outputs': 'has no per-head outputs formed as weights times values',
    'mask': 'never forms the attention mask',
}


@dataclasses.dataclass(frozen=True)
class AttentionKind:
  """A value of `attention.kind`: what it forms (FEATURES), the implementations it runs on
  (None: it has its own path and ignores `attention_impl`), the model types it serves (those
  whose declaration, roformer/model_types.py, has the flag `model_flag`; '': every one), and
  its attention FLOPs per token and layer (forward)."""
  name: str
  about: str
  has: frozenset
  implementations: tuple[str, ...] | None
  model_flag: str
  flops: Callable[..., float]
  validate: Callable[..., None] | None = None  # Its own further checks, (model_cfg, att).
  redraws: bool = False  # Random features redrawn every `redraw_interval` steps (FAVOR+).
  reads: tuple[str, ...] = ()  # Its own fields of config.model.attention.


def _scores_flops(model_cfg, seq_len: int, causal: bool) -> float:
  """q.k scores and weighted values, 2 L d each; half of it when causal."""
  full = 2 * 2 * seq_len * model_cfg.d_model
  return full / 2 if causal else full


def _favor_flops(model_cfg, seq_len: int, causal: bool) -> float:
  """FAVOR+: q, k features (2 m d) and the prefix or total sums (2 m d), times two."""
  del seq_len, causal
  return 2 * 2 * model_cfg.attention.num_features * model_cfg.d_model * 2


def _favor_check(m, att) -> None:
  """FAVOR+'s features come in rotated pairs, and it never forms the logits or probabilities
  that a scheme's terms need."""
  if att.num_features % 2:
    raise errors.ConfigError(f'config.model.attention.num_features={att.num_features} must be '
                             'even (RoPE rotates pairs of features).')
  scheme = positions.model_scheme(m)
  caps = scheme.capabilities
  if not caps.linear_attention:
    linear = [k for k in positions.kinds() if positions.capabilities(k).linear_attention]
    raise errors.ConfigError(
        f"config.model.position.kind={scheme.kind!r} cannot be used with attention.kind='favor': "
        f'{caps.logits_term or "it needs the attention probabilities"}, and linear attention '
        f'never forms those logits. Fix: use one of {linear} with favor, or softmax attention.')
  if att.rope_mode == 'features' and caps.rotary and not caps.feature_rotation:
    raise errors.ConfigError(
        f'{scheme.kind} rotates queries and keys in a way that has no form on the random '
        'features (attention.rope_mode=features). Fix: --config.model.attention.rope_mode=qk.')


KINDS = {k.name: k for k in (
    AttentionKind('softmax', 'softmax over the scaled logits and the scheme\'s terms',
                  frozenset(FEATURES), ('einsum', 'xla', 'cudnn', 'pallas'), '', _scores_flops),
    AttentionKind('favor', 'FAVOR+ linear attention (Choromanski et al. 2021)', frozenset(),
                  None, 'linear_attention', _favor_flops, _favor_check,
                  redraws=True, reads=('num_features', 'redraw_interval', 'rope_mode')),
    AttentionKind('stick_breaking', 'stick-breaking weights (Tan et al. 2025)',
                  frozenset({'logits', 'head_outputs', 'mask'}), ('einsum',), 'decoder_only',
                  _scores_flops, reads=('attend_current',)),
)}


@dataclasses.dataclass(frozen=True)
class AttentionOption:
  """A switch of `config.model.attention` (a Bool field): what it needs of the attention kind
  (FEATURES), whether it runs on the einsum path only, the options it cannot be combined with
  ((field, why)), what it needs of the position schemes of the layers (`positions`: the reason
  they do not fit, or ''; `positions_need` says it in words for the table), its own further
  checks (`validate(config, model_cfg, attention_cfg)`: ConfigError or nothing), and its FLOPs
  per token and layer beyond the plain attention (`attention_flops` in the scores and values,
  `layer_flops` elsewhere)."""
  field: str
  paper: str
  about: str
  needs: tuple[str, ...] = ()
  einsum_only: bool = False
  excludes: tuple[tuple[str, str], ...] = ()
  positions: Callable[[Any], str] | None = None
  positions_need: str = ''
  validate: Callable[..., None] | None = None
  attention_flops: Callable[..., float] | None = None
  layer_flops: Callable[..., float] | None = None
  reads: tuple[str, ...] = ()  # Its fields besides its switch, read when it is on.
  not_on: tuple[str, ...] = ()  # Implementations that cannot run it.


def _layer_caps(model_cfg) -> dict:
  """{kind: capabilities} of the distinct position kinds of the layers."""
  return {k: positions.capabilities(k) for k in dict.fromkeys(positions.layer_kinds(model_cfg))}


def _dape_positions(model_cfg) -> str:
  no_bias = [k for k, c in _layer_caps(model_cfg).items()
             if not c.logits_term or c.computes_logits or c.value_term]
  return f'position kinds {no_bias} add no bias to q.k for it to read' if no_bias else ''


def _differential_positions(model_cfg) -> str:
  values = [k for k, c in _layer_caps(model_cfg).items() if c.value_term]
  return (f'position kinds {values} add a value term of the head width to each map output'
          if values else '')


def _nope_positions(model_cfg) -> str:
  plain = [k for k, c in _layer_caps(model_cfg).items()
           if not (c.reads_positions or c.logits_term or c.rotary)]
  return '' if plain else 'it scales the layers without any position signal, and no layer is one'


def _differential_check(config, m, att) -> None:
  del config, att
  if m.num_heads % 2:
    raise errors.ConfigError(
        f'config.model.attention.differential=True: num_heads={m.num_heads} is odd (its heads '
        'pair up into num_heads / 2 differential heads). Fix: an even num_heads (and d_model a '
        'multiple of it), or --config.model.attention.differential=False.')


DAPE_LIMIT_BYTES = 32 * 2**30  # Its [batch, L, L, 3 heads + width] maps, per layer.


def _dape_check(config, m, att) -> None:
  longest = config.data.seq_len * max(config.eval.length_multipliers, default=1)
  batch = max(config.train.batch_size, config.eval.batch_size)
  size = batch * longest ** 2 * (3 * m.num_heads + att.dape_width) * 4
  if size > DAPE_LIMIT_BYTES:
    raise errors.ConfigError(
        'config.model.attention.dape=True materialises [batch, L, L, 3 heads + width] float32 '
        f'per layer: {size / 2**30:.0f} GiB at batch {batch} and the longest evaluated length '
        f'{longest}, over {DAPE_LIMIT_BYTES // 2**30} GiB. Fix: fewer eval.length_multipliers, '
        'a smaller batch or attention.dape_width.')


def _dape_flops(m, seq_len: int, causal: bool) -> float:
  """DAPE's MLP on each (query, key) pair: 2h -> width -> h."""
  h, width = m.num_heads, m.attention.dape_width
  return (seq_len / 2 if causal else seq_len) * 2 * (2 * h * width + width * h)


OPTIONS = {o.field: o for o in (
    AttentionOption('qk_norm', 'Dehghani et al. 2023', "RMSNorm of each head's queries and keys"),
    AttentionOption('ssmax', 'Nakanishi 2025', 'logits times s_h log n (Scalable-Softmax)',
                    needs=('softmax',), reads=('ssmax_init',),
                    # The fused kernel adds its bias unscaled; the factor would scale it too.
                    not_on=('pallas',)),
    AttentionOption('output_gate', 'Qiu et al. 2025', "a sigmoid gate on each head's output",
                    needs=('head_outputs',),
                    layer_flops=lambda m, seq_len, causal: 2 * m.d_model * m.d_model),
    AttentionOption('differential', 'Ye et al. 2025', 'each head the difference of two maps',
                    needs=('softmax',), einsum_only=True, positions=_differential_positions,
                    positions_need='no value term', validate=_differential_check,
                    # Values of twice the head width weighted once per map: 2 L 2d, not 2 L d.
                    attention_flops=lambda m, seq_len, causal: _scores_flops(m, seq_len,
                                                                             causal) / 2),
    AttentionOption('dape', 'Zheng et al. 2024', "an MLP over each pair's logits and biases",
                    needs=('softmax',), einsum_only=True,
                    excludes=(('ssmax', 'scales the same logits (not combined)'),),
                    positions=_dape_positions, positions_need='a bias in every layer',
                    validate=_dape_check, layer_flops=_dape_flops, reads=('dape_width',)),
    AttentionOption('nope_temperature', 'Llama 4', 'a temperature on the layers without positions',
                    needs=('logits',), positions=_nope_positions,
                    positions_need='some layer without positions',
                    reads=('nope_temperature_floor', 'nope_temperature_scale')),
)}


def enabled(att) -> list[AttentionOption]:
  return [o for o in OPTIONS.values() if att[o.field]]


def fields_read(att) -> dict:
  """The fields of config.model.attention `att` that decide what attention computes: the
  kind and its own fields, every switch, and the fields of the switches that are on (not
  FAVOR+'s `chunk`, which only orders its sums, nor the fields of what is off)."""
  kind = KINDS[att.kind]
  return {'kind': att.kind, **{f: att[f] for f in kind.reads},
          **{o.field: bool(att[o.field]) for o in OPTIONS.values()},
          **{f: att[f] for o in enabled(att) for f in o.reads}}


def check(config, m, att) -> None:
  """Every enabled option against the attention kind, the implementation, the other options and
  the layers' position schemes, from the declarations; the first that does not fit is one
  ConfigError naming the option, why and the fix."""
  kind = KINDS[att.kind]
  for o in enabled(att):
    field = f'config.model.attention.{o.field}=True'
    off = f'--config.model.attention.{o.field}=False'
    for feature in o.needs:
      if feature not in kind.has:
        fit = [k.name for k in KINDS.values() if feature in k.has]
        raise errors.ConfigError(
            f'{field} ({o.about}): attention.kind={kind.name!r} {FEATURES[feature]}. Fix: '
            f'--config.model.attention.kind={fit[0]} (kinds that have it: {fit}), or {off}.')
    if o.einsum_only and m.attention_impl not in ('auto', 'einsum'):
      raise errors.ConfigError(
          f'{field} ({o.about}): it runs on the einsum path, not attention_impl='
          f'{m.attention_impl!r}. Fix: --config.model.attention_impl=auto (or einsum), or {off}.')
    if m.attention_impl in o.not_on:
      raise errors.ConfigError(
          f'{field} ({o.about}) does not run on attention_impl={m.attention_impl!r}. Fix: '
          f'--config.model.attention_impl=auto, or {off}.')
    for other, why in o.excludes:
      if att[other]:
        raise errors.ConfigError(f'{field} ({o.about}): attention.{other} {why}. Fix: {off}, or '
                                 f'--config.model.attention.{other}=False.')
    reason = o.positions(m) if o.positions else ''
    if reason:
      fit = [k for k in positions.kinds() if not o.positions(_with_kind(m, k))]
      raise errors.ConfigError(f'{field} ({o.about}): {reason}. Fix: position kinds that fit '
                               f'({", ".join(fit)}), or {off}.')
    if o.validate:
      o.validate(config, m, att)


def _with_kind(m, kind: str):
  """`m` with every layer of position kind `kind` (for the fix's list of kinds that fit)."""
  other = copy.deepcopy(m)
  with other.unlocked():
    other.position.kind, other.layer_kinds = kind, ()
  return other


def check_kind(m, att) -> None:
  """The attention kind against the model type and the implementation."""
  kind = KINDS[att.kind]
  field = f'config.model.attention.kind={kind.name!r}'
  if kind.model_flag and not getattr(model_types.of(m), kind.model_flag):
    raise errors.ConfigError(
        f'{field} ({kind.about}) is for {model_types.offering(kind.model_flag)}, not '
        f'model.type={m.type!r}. Fix: --config.model.attention.kind=softmax.')
  if kind.implementations is not None and m.attention_impl not in ('auto',) + kind.implementations:
    raise errors.ConfigError(
        f'{field} runs on the {"/".join(kind.implementations)} path, not attention_impl='
        f'{m.attention_impl!r}. Fix: --config.model.attention_impl=auto.')
  if kind.validate:
    kind.validate(m, att)


def _implementations(o: AttentionOption) -> str:
  if o.einsum_only:
    return 'einsum'
  return 'not ' + ', '.join(o.not_on) if o.not_on else 'any'


def table() -> str:
  """The Markdown table of docs/positions.md: each attention option, what it needs of the kind,
  the kinds and implementations it runs with, what it excludes and needs of the position
  schemes, from the declarations (tests/test_docs.py keeps the page equal to it)."""
  kinds = list(KINDS)
  lines = ['| option | paper | what it does | ' + ' | '.join(f'kind={k}' for k in kinds)
           + ' | attention_impl | not with | position schemes |',
           '|' + '---|' * (len(kinds) + 6)]
  for o in OPTIONS.values():
    runs = ['yes' if all(f in KINDS[k].has for f in o.needs) else 'no' for k in kinds]
    lines.append(
        f'| `{o.field}` | {o.paper} | {o.about} | ' + ' | '.join(runs)
        + f' | {_implementations(o)} | '
        + (', '.join(f'`{other}`' for other, _ in o.excludes) or '-') + ' | '
        + (o.positions_need or 'any') + ' |')
  return '\n'.join(lines)
