"""The position-scheme interface: the base class with its hooks, and the registry.

Every scheme is a small `nnx.Module` that implements only the hooks it needs; the shared stack
(`roformer.models`) calls all of them and the defaults are the identity:

| hook                                   | used by                 | effect                           |
|----------------------------------------|-------------------------|----------------------------------|
| `embed(x, positions)`                  | sinusoidal, learned     | adds an absolute code to x       |
| `layer_input(x, positions)`            | learned (per layer)     | adds a code at a layer's input   |
| `rotate(q, k, q_pos, k_pos)`           | rope, xpos              | rotates queries and keys         |
| `rotate_value(v, k_pos)`               | rope (rotate_values)    | rotates values                   |
| `logits_bias(q, k, q_pos, k_pos, mask)`| the bias schemes (*)    | added to the attention logits    |
| `value_term(probs, q_pos, k_pos)`      | shaw                    | added to the attention output    |

(*) shaw, xl, t5, alibi, kerple, fire, cope.
`for_layer(i)` gives the view whose hooks layer i uses (per-layer parameters: shaw, xl, t5 when
not shared, per-layer learned, kerple, fire unless shared, cope). `logits_bias` also receives the
attention mask (bool, broadcastable to [batch, heads, q_len, k_len]), which only CoPE reads: its
positions count the gates of the keys a query may see, so other segments, padding, unfilled
cache slots and future keys must add nothing.
Positions are always explicit integer arrays (they restart at 0 in every packed segment and start
at the cache index when decoding); angles are computed in float32 from them and cast to the
activation dtype only at the end. A registry maps `config.model.position.kind` to a scheme class;
each family of schemes lives in its own module of this package.
"""

import copy
from typing import Callable

import jax
import ml_collections
from flax import nnx

from roformer import errors
from roformer import specs

_REGISTRY: dict[str, type['PositionScheme']] = {}


def register(kind: str) -> Callable[[type['PositionScheme']], type['PositionScheme']]:
  def wrap(cls):
    cls.kind = kind
    _REGISTRY[kind] = cls
    return cls
  return wrap


def kinds() -> list[str]:
  return sorted(_REGISTRY)


def scheme_class(kind: str) -> type['PositionScheme']:
  return _REGISTRY[kind]


class PositionScheme(nnx.Module):
  """Base class: every hook leaves attention untouched.

  Hooks receive queries/keys as [batch, len, heads, head_dim] and integer positions as
  [batch, len]; biases are [batch or 1, heads, q_len, k_len] in float32, already on the scale of
  the (1/sqrt(head_dim)-scaled) attention logits. `for_layer(i)` returns the object whose hooks
  layer i uses (itself unless the scheme has per-layer parameters).
  """

  kind = 'base'
  has_value_term = False  # True: needs the explicit einsum attention path.
  # Sub-configs of config.model.position that belong to this kind (checked for misuse).
  fields: tuple[str, ...] = ()
  # The sub-configs this class introduces: {group: {option: spec}}, each option's type and
  # range carrying its default (roformer/specs.py, e.g. `specs.Int(1, default=16)`).
  # configs/base.py builds config.model.position from every registered class's defaults, and
  # the config check (roformer/config_schema.py) holds each value to its spec. An option given
  # as a plain value has a default but no declared range: every config check then fails,
  # naming it, until it is declared.
  defaults: dict = {}

  @classmethod
  def validate(cls, cfg: ml_collections.ConfigDict, model_cfg: ml_collections.ConfigDict,
               seq_len: int, causal: bool) -> None:
    """Raises ConfigError naming the field and the fix for inconsistent options."""
    del cfg, model_cfg, seq_len, causal

  rotates = False  # Whether `rotate` does anything (RoPE-like schemes).

  def for_layer(self, index: int) -> 'PositionScheme':
    del index
    return self

  def embed(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    """Added to the token embeddings at the bottom of the stack."""
    del positions
    return x

  def layer_input(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    """Added to the residual stream at the input of a layer."""
    del positions
    return x

  def rotate(self, q, k, q_pos, k_pos):
    del q_pos, k_pos
    return q, k

  def rotate_value(self, v, k_pos):
    del k_pos
    return v

  def logits_bias(self, q, k, q_pos, k_pos, mask=None):
    """Added to the logits. `mask` (bool, broadcastable to [batch, heads, q_len, k_len]) is the
    attention mask MultiHeadAttention applies; schemes whose bias depends on which keys are
    visible (CoPE) read it, the others ignore it."""
    del q, k, q_pos, k_pos, mask
    return None

  def value_term(self, probs, q_pos, k_pos):
    del probs, q_pos, k_pos
    return None


def default_fields() -> dict:
  """Each kind's own sub-config with its defaults, collected from the registered classes. A
  sub-config changed from its defaults while another kind is selected is an error (`validate`),
  not silently ignored."""
  fields = {}
  for cls in _REGISTRY.values():
    fields.update(copy.deepcopy(specs.defaults(cls.defaults)))
  return fields


def field_specs() -> dict:
  """The spec of every field of config.model.position: `kind` and each registered scheme's
  options (an option without a spec becomes specs.Undeclared, which fails every check)."""
  def declared(tree, where):
    return {k: declared(v, where) if isinstance(v, dict) else
            (v if isinstance(v, specs.Spec) else specs.Undeclared(v, where))
            for k, v in tree.items()}
  fields = {'kind': specs.Str(choices=kinds)}
  for cls in _REGISTRY.values():
    fields.update(declared(cls.defaults, f'{cls.__module__}.{cls.__name__}.defaults'))
  return fields


def _with_defaults(value, default):
  """`value` with the options it lacks (a config saved before they existed) at their defaults."""
  if not isinstance(value, dict) or not isinstance(default, dict):
    return value
  return {**default, **{k: _with_defaults(v, default.get(k)) for k, v in value.items()}}


def scheme_fields(kind: str) -> tuple[str, ...]:
  """The option groups of config.model.position that scheme `kind` reads."""
  return tuple(_REGISTRY[kind].fields)


def validate(model_cfg: ml_collections.ConfigDict, seq_len: int, causal: bool = True) -> None:
  """Checks `model_cfg.position` before anything is built or compiled: each option against
  its spec, options of other kinds left at their defaults, then the scheme's own checks."""
  cfg = model_cfg.position
  kind = cfg.get('kind')
  if kind not in _REGISTRY:
    raise errors.ConfigError(
        f'config.model.position.kind={kind!r} is not a known position scheme. '
        f'Fix: choose one of {kinds()}.')
  used = set(scheme_fields(kind))
  for name, default in default_fields().items():
    if name in used or name not in cfg:
      continue
    value = cfg[name].to_dict() if hasattr(cfg[name], 'to_dict') else cfg[name]
    if _with_defaults(value, default) != default:
      raise errors.ConfigError(
          f'config.model.position.{name} is changed from its defaults but '
          f'config.model.position.kind={kind!r} does not use it. Fix: set '
          f'--config.model.position.kind={name}, or drop the {name} overrides.')
  specs.check_tree(cfg, field_specs(), 'config.model.position')
  _REGISTRY[kind].validate(cfg, model_cfg, seq_len, causal)


def create(model_cfg: ml_collections.ConfigDict, *, causal: bool,
           rngs: nnx.Rngs) -> PositionScheme:
  """Builds the scheme named by `model_cfg.position.kind`."""
  validate(model_cfg, seq_len=0, causal=causal)
  return _REGISTRY[model_cfg.position.kind](model_cfg, causal=causal, rngs=rngs)


def head_dim(model_cfg) -> int:
  return model_cfg.d_model // model_cfg.num_heads


def relative_positions(q_pos, k_pos):
  """Integer distances q_pos - k_pos, [batch, q_len, k_len]."""
  return q_pos[:, :, None] - k_pos[:, None, :]
