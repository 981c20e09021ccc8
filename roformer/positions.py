"""Position schemes: how a Transformer learns where each token is.

Every scheme is a small `nnx.Module` that implements only the hooks it needs; the shared stack
(`roformer.models`) calls all of them and the defaults are the identity:

| hook                                   | used by                 | effect                           |
|----------------------------------------|-------------------------|----------------------------------|
| `embed(x, positions)`                  | sinusoidal, learned     | adds an absolute code to x       |
| `rotate(q, k, q_pos, k_pos)`           | rope                    | rotates queries and keys         |
| `logits_bias(q, q_pos, k_pos)`         | (relative bias schemes) | added to the attention logits    |
| `value_term(probs, q_pos, k_pos)`      | (relative value schemes)| added to the attention output    |

Positions are always explicit integer arrays (they restart at 0 in every packed segment and start
at the cache index when decoding); angles are computed in float32 from them and cast to the
activation dtype only at the end. A registry maps `config.model.position.kind` to a scheme class.
"""

from typing import Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from roformer import errors

_REGISTRY: dict[str, type['PositionScheme']] = {}


def register(kind: str) -> Callable[[type['PositionScheme']], type['PositionScheme']]:
  def wrap(cls):
    cls.kind = kind
    _REGISTRY[kind] = cls
    return cls
  return wrap


def kinds() -> list[str]:
  return sorted(_REGISTRY)


class PositionScheme(nnx.Module):
  """Base class: every hook leaves attention untouched."""

  kind = 'base'
  has_value_term = False

  @classmethod
  def validate(cls, cfg: ml_collections.ConfigDict, model_cfg: ml_collections.ConfigDict,
               seq_len: int) -> None:
    """Raises ValueError naming the field and the fix for inconsistent options."""
    del cfg, model_cfg, seq_len

  def embed(self, x: jax.Array, positions: jax.Array) -> jax.Array:
    del positions
    return x

  def rotate(self, q, k, q_pos, k_pos):
    del q_pos, k_pos
    return q, k

  def logits_bias(self, q, q_pos, k_pos):
    del q, q_pos, k_pos
    return None

  def value_term(self, probs, q_pos, k_pos):
    del probs, q_pos, k_pos
    return None


def validate(model_cfg: ml_collections.ConfigDict, seq_len: int) -> None:
  """Checks `model_cfg.position` before anything is built or compiled."""
  kind = model_cfg.position.kind
  if kind not in _REGISTRY:
    raise errors.ConfigError(
        f'config.model.position.kind={kind!r} is not a known position scheme. '
        f'Fix: choose one of {kinds()}.')
  _REGISTRY[kind].validate(model_cfg.position, model_cfg, seq_len)


def create(model_cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs) -> PositionScheme:
  """Builds the scheme named by `model_cfg.position.kind`."""
  validate(model_cfg, seq_len=0)
  return _REGISTRY[model_cfg.position.kind](model_cfg, rngs=rngs)


@register('none')
class NoPositions(PositionScheme):
  """No position information at all (a causal mask still leaks some, Haviv et al. 2022)."""

  def __init__(self, model_cfg, *, rngs):
    del model_cfg, rngs


# --------------------------------------------------------------------------------------------
# Absolute schemes.


def sinusoidal_table(positions: jax.Array, dim: int, base: float = 10000.0) -> jax.Array:
  """Vaswani et al. 2017: PE[p, 2k] = sin(p * w_k), PE[p, 2k+1] = cos(p * w_k),
  w_k = 1 / base^(2k/d). Returns float32 [..., len, dim] for integer positions [..., len]."""
  if dim % 2:
    raise errors.ConfigError(f'sinusoidal encodings need an even model dimension, got {dim}.')
  omega = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(omega, jnp.float32)
  # Interleave: sin on even dimensions, cos on odd ones.
  return jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1).reshape(*angles.shape[:-1], dim)


@register('sinusoidal')
class Sinusoidal(PositionScheme):
  """Fixed sinusoidal absolute encodings added to the token embeddings."""

  def __init__(self, model_cfg, *, rngs):
    del rngs
    self.dim = model_cfg.d_model
    self.base = float(model_cfg.position.get('base', 10000.0))

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len):
    if model_cfg.d_model % 2:
      raise errors.ConfigError(f'config.model.d_model={model_cfg.d_model} must be even for '
                       'sinusoidal positions. Fix: use an even d_model.')

  def embed(self, x, positions):
    return x + sinusoidal_table(positions, self.dim, self.base).astype(x.dtype)


@register('learned')
class Learned(PositionScheme):
  """A trained table of absolute position embeddings (BERT, GPT-2)."""

  def __init__(self, model_cfg, *, rngs):
    self.max_length = model_cfg.position.max_length
    self.table = nnx.Param(
        nnx.initializers.normal(stddev=0.02)(rngs.params(), (self.max_length, model_cfg.d_model)))

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len):
    if cfg.max_length < 1:
      raise errors.ConfigError(f'config.model.position.max_length={cfg.max_length} must be >= 1.')
    if seq_len > cfg.max_length:
      raise errors.ConfigError(
          f'sequence length {seq_len} is longer than the learned position table '
          f'(config.model.position.max_length={cfg.max_length}). Fix: raise '
          f'--config.model.position.max_length to at least {seq_len}, or shorten the sequence.')

  def embed(self, x, positions):
    return x + jnp.take(self.table[...], positions, axis=0).astype(x.dtype)


# --------------------------------------------------------------------------------------------
# Rotary position embedding (Su et al. 2021, RoFormer).


def rope_frequencies(head_dim: int, base: float = 10000.0) -> np.ndarray:
  """theta_i = base^(-2(i-1)/d) for i = 1..d/2 (float64 constants, not parameters)."""
  return base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def apply_rotary(x: jax.Array, positions: jax.Array, base: float = 10000.0) -> jax.Array:
  """Rotates x by the RoFormer matrix R(m): pairs (x1, x2), (x3, x4), ... are interleaved and
  pair i is rotated by angle m * theta_i.

  Args:
    x: [..., seq, heads, head_dim] queries or keys; head_dim must be even.
    positions: integer [..., seq] (broadcastable to x's leading dims).
    base: the frequency base (10000 in the paper).
  Returns:
    The rotated array, same shape and dtype as x. Angles are computed in float32.
  """
  return rotate_interleaved(x, positions, rope_frequencies(x.shape[-1], base))


def rotate_interleaved(x: jax.Array, positions: jax.Array, inv_freq) -> jax.Array:
  """Rotates interleaved pairs of x's last dimension by positions * inv_freq (float32 angles)."""
  d = x.shape[-1]
  if d % 2:
    raise errors.ConfigError(f'rotary embeddings need an even head dimension, got {d}.')
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq, jnp.float32)
  cos = jnp.cos(angles)[..., None, :]  # [..., seq, 1, d/2], broadcast over heads.
  sin = jnp.sin(angles)[..., None, :]
  pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], d // 2, 2)
  x1, x2 = pairs[..., 0], pairs[..., 1]
  out = jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
  return out.reshape(x.shape).astype(x.dtype)


@register('rope')
class Rotary(PositionScheme):
  """RoPE: queries and keys rotated by their absolute positions, so q_m . k_n depends on m - n."""

  def __init__(self, model_cfg, *, rngs):
    del rngs
    self.base = float(model_cfg.position.rope.base)
    self.head_dim = model_cfg.d_model // model_cfg.num_heads

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len):
    head_dim = model_cfg.d_model // model_cfg.num_heads
    if head_dim % 2:
      raise errors.ConfigError(
          f'rope needs an even head dimension, but d_model/num_heads = '
          f'{model_cfg.d_model}/{model_cfg.num_heads} = {head_dim}. Fix: change '
          '--config.model.d_model or --config.model.num_heads.')
    if cfg.rope.base <= 1.0:
      raise errors.ConfigError(f'config.model.position.rope.base={cfg.rope.base} must be > 1.')

  def rotate(self, q, k, q_pos, k_pos):
    inv_freq = rope_frequencies(self.head_dim, self.base)
    return rotate_interleaved(q, q_pos, inv_freq), rotate_interleaved(k, k_pos, inv_freq)
