"""Position schemes: how a Transformer learns where each token is.

Every scheme is a small `nnx.Module` that implements only the hooks it needs; the shared stack
(`roformer.models`) calls all of them and the defaults are the identity:

| hook                                   | used by                 | effect                           |
|----------------------------------------|-------------------------|----------------------------------|
| `embed(x, positions)`                  | sinusoidal, learned     | adds an absolute code to x       |
| `layer_input(x, positions)`            | learned (per layer)     | adds a code at a layer's input   |
| `rotate(q, k, q_pos, k_pos)`           | rope, xpos              | rotates queries and keys         |
| `rotate_value(v, k_pos)`               | rope (rotate_values)    | rotates values                   |
| `logits_bias(q, k, q_pos, k_pos)`      | shaw, xl, t5, alibi     | added to the attention logits    |
| `value_term(probs, q_pos, k_pos)`      | shaw                    | added to the attention output    |

`for_layer(i)` gives the view whose hooks layer i uses (per-layer parameters: shaw, xl, t5 when
not shared, per-layer learned).
Positions are always explicit integer arrays (they restart at 0 in every packed segment and start
at the cache index when decoding); angles are computed in float32 from them and cast to the
activation dtype only at the end. A registry maps `config.model.position.kind` to a scheme class.
"""

import functools
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

  def logits_bias(self, q, k, q_pos, k_pos):
    del q, k, q_pos, k_pos
    return None

  def value_term(self, probs, q_pos, k_pos):
    del probs, q_pos, k_pos
    return None


# Each kind's own sub-config and its defaults (configs/base.py builds from these); a sub-config
# changed from its defaults while another kind is selected is an error, not silently ignored.
def default_fields() -> dict:
  return {
      'learned': {'max_length': 2048, 'per_layer': False},
      'sinusoidal': {'base': 10000.0},
      'rope': {'base': 10000.0, 'fraction': 1.0, 'rotate_values': False, 'layout': 'interleaved',
               'scaling': {'kind': 'none', 'factor': 1.0, 'original_length': 0, 'alpha': 1.0,
                           'beta': 32.0}},
      'xpos': {'gamma': 0.4, 'scale_base': 512.0},
      'shaw': {'max_distance': 16},
      'xl': {'base': 10000.0},
      't5': {'num_buckets': 32, 'max_distance': 128, 'shared_across_layers': True},
      'alibi': {},
  }


def scheme_fields(kind: str) -> tuple[str, ...]:
  """The option groups of config.model.position that scheme `kind` reads."""
  return tuple(_REGISTRY[kind].fields)


def validate(model_cfg: ml_collections.ConfigDict, seq_len: int, causal: bool = True) -> None:
  """Checks `model_cfg.position` before anything is built or compiled."""
  cfg = model_cfg.position
  kind = cfg.kind
  if kind not in _REGISTRY:
    raise errors.ConfigError(
        f'config.model.position.kind={kind!r} is not a known position scheme. '
        f'Fix: choose one of {kinds()}.')
  used = set(scheme_fields(kind))
  for name, default in default_fields().items():
    if name in used or name not in cfg:
      continue
    value = cfg[name].to_dict() if hasattr(cfg[name], 'to_dict') else cfg[name]
    if value != default:
      raise errors.ConfigError(
          f'config.model.position.{name} is changed from its defaults but '
          f'config.model.position.kind={kind!r} does not use it. Fix: set '
          f'--config.model.position.kind={name}, or drop the {name} overrides.')
  _REGISTRY[kind].validate(cfg, model_cfg, seq_len, causal)


def create(model_cfg: ml_collections.ConfigDict, *, causal: bool,
           rngs: nnx.Rngs) -> PositionScheme:
  """Builds the scheme named by `model_cfg.position.kind`."""
  validate(model_cfg, seq_len=0, causal=causal)
  return _REGISTRY[model_cfg.position.kind](model_cfg, causal=causal, rngs=rngs)


def _head_dim(model_cfg) -> int:
  return model_cfg.d_model // model_cfg.num_heads


def _relative(q_pos, k_pos):
  """Integer distances q_pos - k_pos, [batch, q_len, k_len]."""
  return q_pos[:, :, None] - k_pos[:, None, :]


@register('none')
class NoPositions(PositionScheme):
  """No position information at all (a causal mask still leaks some, Haviv et al. 2022)."""

  def __init__(self, model_cfg, *, causal, rngs):
    del model_cfg, causal, rngs


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

  fields = ('sinusoidal',)

  def __init__(self, model_cfg, *, causal, rngs):
    del causal, rngs
    self.dim = model_cfg.d_model
    self.base = float(model_cfg.position.sinusoidal.base)

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    if model_cfg.d_model % 2:
      raise errors.ConfigError(f'config.model.d_model={model_cfg.d_model} must be even for '
                               'sinusoidal positions. Fix: use an even d_model.')

  def embed(self, x, positions):
    return x + sinusoidal_table(positions, self.dim, self.base).astype(x.dtype)


class _Table(nnx.Module):
  """One learned table of absolute position embeddings, added to its input."""

  def __init__(self, length, dim, rngs):
    self.table = nnx.Param(nnx.initializers.normal(stddev=0.02)(rngs.params(), (length, dim)))

  def __call__(self, x, positions):
    return x + jnp.take(self.table[...], positions, axis=0).astype(x.dtype)


class _LayerInput(PositionScheme):
  """Per-layer view of `learned` with per_layer=True: its table is added at the layer input."""

  def __init__(self, table: _Table):
    self.table = table

  def layer_input(self, x, positions):
    return self.table(x, positions)


@register('learned')
class Learned(PositionScheme):
  """Trained absolute position embeddings (BERT, GPT-2); with `per_layer`, one table per layer
  added at every layer's input (Al-Rfou et al. 2019)."""

  fields = ('learned',)

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    cfg = model_cfg.position.learned
    self.per_layer = bool(cfg.per_layer)
    n = model_cfg.num_layers if self.per_layer else 1
    self.tables = nnx.List([_Table(cfg.max_length, model_cfg.d_model, rngs) for _ in range(n)])

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    if cfg.learned.max_length < 1:
      raise errors.ConfigError(
          f'config.model.position.learned.max_length={cfg.learned.max_length} must be >= 1.')
    if seq_len > cfg.learned.max_length:
      raise errors.ConfigError(
          f'sequence length {seq_len} is longer than the learned position table '
          f'(config.model.position.learned.max_length={cfg.learned.max_length}). Fix: raise '
          f'--config.model.position.learned.max_length to at least {seq_len}, or shorten the '
          'sequence.')

  def embed(self, x, positions):
    return x if self.per_layer else self.tables[0](x, positions)

  def for_layer(self, index):
    return _LayerInput(self.tables[index]) if self.per_layer else self


# --------------------------------------------------------------------------------------------
# Rotary position embedding (Su et al. 2021, RoFormer) and its variants.


def rope_frequencies(head_dim: int, base: float = 10000.0) -> np.ndarray:
  """theta_i = base^(-2(i-1)/d) for i = 1..d/2 (float64 constants, not parameters)."""
  return base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def scaled_frequencies(head_dim: int, base: float, scaling) -> tuple[np.ndarray, float]:
  """Frequencies and the q/k multiplier for RoPE context extension (`rope.scaling`).

  - linear (Chen et al. 2023, position interpolation): positions / s, i.e. theta_i / s.
  - ntk: the base becomes base * s^(d / (d - 2)).
  - yarn (Peng et al. 2023): with r_i = original_length / (2 pi / theta_i) and the ramp
    g(r) = clip((r - alpha) / (beta - alpha), 0, 1), theta_i' = (1 - g) theta_i / s + g theta_i;
    logits are sharpened by t^-1 with sqrt(1/t) = 0.1 ln(s) + 1, applied to both q and k.
  """
  kind, s = scaling.kind, float(scaling.factor)
  if kind == 'none':
    return rope_frequencies(head_dim, base), 1.0
  if kind == 'linear':
    return rope_frequencies(head_dim, base) / s, 1.0
  if kind == 'ntk':
    return rope_frequencies(head_dim, base * s ** (head_dim / (head_dim - 2))), 1.0
  if kind == 'yarn':
    theta = rope_frequencies(head_dim, base)
    ratio = scaling.original_length * theta / (2 * np.pi)
    ramp = np.clip((ratio - scaling.alpha) / (scaling.beta - scaling.alpha), 0.0, 1.0)
    return (1 - ramp) * theta / s + ramp * theta, 0.1 * np.log(s) + 1.0
  raise errors.ConfigError(f'config.model.position.rope.scaling.kind={kind!r} is unknown. '
                           "Fix: one of 'none', 'linear', 'ntk', 'yarn'.")


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
  return rotate_pairs(x, positions, rope_frequencies(x.shape[-1], base))


def rotate_pairs(x: jax.Array, positions: jax.Array, inv_freq, layout: str = 'interleaved',
                 scale: jax.Array | None = None) -> jax.Array:
  """Rotates pairs of x's last dimension by positions * inv_freq (float32 angles).

  `interleaved` pairs (x[2i], x[2i+1]) as the RoFormer paper; `half` pairs (x[i], x[i + d/2])
  as GPT-NeoX/Llama. `scale` (float32 [..., seq, d/2]) multiplies each pair afterwards (xPos);
  it is a function of the positions and gets no gradient. Without a scale the backward pass is
  the rotation by the opposite angles (R(-a) = R(a)^T), one more pass of the same kind, instead
  of the transposes of the reshapes and the products.
  """
  if scale is None:
    return _rotation(x, positions, tuple(float(f) for f in np.asarray(inv_freq)), layout)
  return _rotate_by(x, *_cos_sin(positions, inv_freq, layout, scale), layout)


@functools.lru_cache(maxsize=None)
def _spread(layout: str, d: int) -> tuple[np.ndarray, np.ndarray]:
  """0/+-1 matrices [d/2, d] that place pair i's cosine on both its dimensions and its sine
  on them with the signs of the rotation: C = (c0, c0, c1, c1, ..), S = (-s0, s0, -s1, s1, ..)
  (interleaved) or C = (c, c), S = (-s, s) (half)."""
  i = np.arange(d // 2)
  first, second = (2 * i, 2 * i + 1) if layout == 'interleaved' else (i, i + d // 2)
  c, s = np.zeros((d // 2, d), np.float32), np.zeros((d // 2, d), np.float32)
  c[i, first] = c[i, second] = 1.0
  s[i, first], s[i, second] = -1.0, 1.0
  c.flags.writeable = s.flags.writeable = False  # Cached: shared by every trace.
  return c, s


def _cos_sin(positions, inv_freq, layout, scale=None):
  """The rotation's C and S (see _spread) as float32 [..., seq, 1, d], broadcast over heads.

  The cosines and sines are computed once per position and frequency, and spread over the
  head dimension by a product with _spread's matrices (exact: one nonzero term of +-1 per
  entry). The product matters for speed: XLA does not fuse a matrix product into the
  elementwise loop over q or k, where on CPU it would otherwise evaluate a cosine and a sine
  again for every element of every head (7x the rotation's time at [8, 128, 4, 64]; an
  optimization barrier does not stop it: XLA:CPU removes barriers before fusing)."""
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq, jnp.float32)
  cos, sin = jnp.cos(angles), jnp.sin(angles)
  if scale is not None:
    cos, sin = cos * scale, sin * scale
  to_c, to_s = _spread(layout, 2 * angles.shape[-1])
  spread = lambda a, m: jnp.einsum('...k,kd->...d', a, m, precision=jax.lax.Precision.HIGHEST)
  return spread(cos, to_c)[..., None, :], spread(sin, to_s)[..., None, :]


def _swap(x, layout):
  """Each pair's two members exchanged."""
  d = x.shape[-1]
  if layout == 'interleaved':
    return x.reshape(x.shape[:-1] + (d // 2, 2))[..., ::-1].reshape(x.shape)
  return jnp.concatenate([x[..., d // 2:], x[..., :d // 2]], axis=-1)


def _rotate_by(x, cos, sin, layout):
  """x rotated pair by pair: x * C + swap(x) * S, in float32."""
  xf = x.astype(jnp.float32)
  return (xf * cos + _swap(xf, layout) * sin).astype(x.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _rotation(x, positions, inv_freq: tuple[float, ...], layout: str):
  return _rotate_by(x, *_cos_sin(positions, inv_freq, layout), layout)


def _rotation_fwd(x, positions, inv_freq, layout):
  # Saves the integer positions, not C and S: a remat policy that keeps products would
  # otherwise keep two float32 [batch, seq, 1, d] arrays per rotation.
  return _rotate_by(x, *_cos_sin(positions, inv_freq, layout), layout), positions


def _rotation_bwd(inv_freq, layout, positions, grad):
  cos, sin = _cos_sin(positions, inv_freq, layout)
  return _rotate_by(grad, cos, -sin, layout), None  # R(a)^T = R(-a): the sines negated.


_rotation.defvjp(_rotation_fwd, _rotation_bwd)


@register('rope')
class Rotary(PositionScheme):
  """RoPE: queries and keys rotated by their absolute positions, so q_m . k_n depends on m - n.

  Options (`config.model.position.rope`): `base`; `fraction` of each head rotated (the first
  dimensions; the rest pass through); `rotate_values` (Hugging Face's `rotary_value`); `layout`
  `interleaved` (the paper) or `half` (GPT-NeoX/Llama weights); `scaling` for context extension.
  """

  fields = ('rope',)
  rotates = True

  def __init__(self, model_cfg, *, causal, rngs):
    del causal, rngs
    cfg = model_cfg.position.rope
    self.base = float(cfg.base)
    self.rotary_dim = int(round(_head_dim(model_cfg) * cfg.fraction))
    self.layout = cfg.layout
    self.rotate_values = bool(cfg.rotate_values)
    inv_freq, mscale = scaled_frequencies(self.rotary_dim, float(cfg.base), cfg.scaling)
    self.inv_freq = tuple(float(f) for f in inv_freq)  # Python floats: constants, not state.
    self.mscale = float(mscale)

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    r = cfg.rope
    head_dim = _head_dim(model_cfg)
    if not 0.0 < r.fraction <= 1.0:
      raise errors.ConfigError(f'config.model.position.rope.fraction={r.fraction} must be in '
                               '(0, 1].')
    rotary_dim = int(round(head_dim * r.fraction))
    if rotary_dim % 2 or rotary_dim == 0:
      raise errors.ConfigError(
          f'rope rotates pairs, but the rotated dimension is {rotary_dim} (head_dim '
          f'{model_cfg.d_model}/{model_cfg.num_heads} = {head_dim} x fraction {r.fraction}). '
          'Fix: change --config.model.d_model, --config.model.num_heads or '
          '--config.model.position.rope.fraction so that it is even.')
    if r.base <= 1.0:
      raise errors.ConfigError(f'config.model.position.rope.base={r.base} must be > 1.')
    if r.layout not in ('interleaved', 'half'):
      raise errors.ConfigError(f"config.model.position.rope.layout={r.layout!r}: use "
                               "'interleaved' (the paper) or 'half' (GPT-NeoX/Llama).")
    sc = r.scaling
    if sc.kind not in ('none', 'linear', 'ntk', 'yarn'):
      raise errors.ConfigError(f'config.model.position.rope.scaling.kind={sc.kind!r} is '
                               "unknown. Fix: one of 'none', 'linear', 'ntk', 'yarn'.")
    if sc.kind == 'ntk' and rotary_dim <= 2:
      raise errors.ConfigError('rope.scaling.kind=ntk needs a rotated dimension above 2 (it '
                               'scales the base by factor^(d/(d-2))).')
    if sc.factor < 1.0:
      raise errors.ConfigError(
          f'config.model.position.rope.scaling.factor={sc.factor} must be >= 1 (it is the '
          'ratio of the new context length to the trained one).')
    if sc.kind == 'yarn':
      if sc.original_length < 1:
        raise errors.ConfigError(
            'rope.scaling.kind=yarn needs config.model.position.rope.scaling.original_length '
            '(the training length; eval.py fills it in from the workdir).')
      if not 0 < sc.alpha < sc.beta:
        raise errors.ConfigError('config.model.position.rope.scaling needs 0 < alpha < beta.')

  def _rotate(self, x, positions, scale=None):
    n = self.rotary_dim
    rotated = rotate_pairs(x[..., :n], positions, self.inv_freq, self.layout, scale)
    return rotated if n == x.shape[-1] else jnp.concatenate([rotated, x[..., n:]], axis=-1)

  def rotate(self, q, k, q_pos, k_pos):
    q, k = self._rotate(q, q_pos), self._rotate(k, k_pos)
    if self.mscale != 1.0:  # YaRN temperature, on both q and k.
      q, k = q * jnp.asarray(self.mscale, q.dtype), k * jnp.asarray(self.mscale, k.dtype)
    return q, k

  def rotate_value(self, v, k_pos):
    return self._rotate(v, k_pos) if self.rotate_values else v


def xpos_decay(rotary_dim: int, gamma: float) -> np.ndarray:
  """xPos per-pair decay base zeta_i = (2i/d + gamma) / (1 + gamma), i = 0..d/2-1."""
  return (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim + gamma) / (1.0 + gamma)


@register('xpos')
class XPos(Rotary):
  """RoPE with xPos decay (Sun et al. 2022): q_n is scaled by zeta^(n/B) and k_m by
  zeta^(-m/B) per pair, so q_n . k_m gains the factor zeta^((n-m)/B), decaying with distance
  for causal attention (n >= m). Uses the `rope` fields for base, fraction and layout."""

  fields = ('rope', 'xpos')

  def __init__(self, model_cfg, *, causal, rngs):
    super().__init__(model_cfg, causal=causal, rngs=rngs)
    cfg = model_cfg.position.xpos
    self.log_zeta = tuple(float(z) for z in np.log(xpos_decay(self.rotary_dim, cfg.gamma)))
    self.scale_base = float(cfg.scale_base)

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    super().validate(cfg, model_cfg, seq_len, causal)
    if not causal:
      raise errors.ConfigError(
          "config.model.position.kind='xpos' is for causal attention only: its decay "
          'zeta^((n-m)/B) grows without bound for keys after the query. Fix: use rope for '
          'bidirectional models.')
    if cfg.xpos.scale_base <= 0 or cfg.xpos.gamma <= 0:
      raise errors.ConfigError('config.model.position.xpos needs scale_base > 0, gamma > 0.')
    # After centring, the largest exponent is (L/2) |ln zeta_0| / B; keep exp() in range.
    exponent = seq_len / 2 * abs(np.log(cfg.xpos.gamma / (1 + cfg.xpos.gamma))) / (
        cfg.xpos.scale_base)
    limit = 8.0 if model_cfg.dtype == 'float16' else 60.0
    if exponent > limit:
      raise errors.ConfigError(
          f'xpos at sequence length {seq_len} scales q and k by up to exp({exponent:.0f}), '
          f'beyond {model_cfg.dtype} range. Fix: raise config.model.position.xpos.scale_base '
          f'to at least {cfg.xpos.scale_base * exponent / limit:.0f}, or shorten the sequence.')

  def _scale(self, positions, center, sign):
    power = (positions - center).astype(jnp.float32)[..., None] * (sign / self.scale_base)
    return jnp.exp(power * jnp.asarray(self.log_zeta, jnp.float32))

  def rotate(self, q, k, q_pos, k_pos):
    # Scales are taken relative to a per-row centre shared by q and k (it cancels in q . k),
    # so zeta^(+-n/B) stays within float range for long sequences.
    center = (k_pos.min(axis=-1, keepdims=True) + k_pos.max(axis=-1, keepdims=True)) // 2
    q = self._rotate(q, q_pos, self._scale(q_pos, center, 1.0))
    k = self._rotate(k, k_pos, self._scale(k_pos, center, -1.0))
    if self.mscale != 1.0:  # YaRN temperature, as in Rotary.
      q, k = q * jnp.asarray(self.mscale, q.dtype), k * jnp.asarray(self.mscale, k.dtype)
    return q, k


# --------------------------------------------------------------------------------------------
# Relative schemes that add to the logits (and, for Shaw, to the values).


class _ShawLayer(PositionScheme):
  """One layer's Shaw tables a^K and a^V: (2k+1) x head_dim each, shared by the heads."""

  has_value_term = True

  def __init__(self, max_distance, head_dim, rngs):
    self.k = max_distance
    init = nnx.initializers.normal(stddev=head_dim ** -0.5)
    self.keys = nnx.Param(init(rngs.params(), (2 * max_distance + 1, head_dim)))
    self.values = nnx.Param(init(rngs.params(), (2 * max_distance + 1, head_dim)))

  def _bucket(self, q_pos, k_pos):
    """Clipped relative position j - i shifted to a row index in [0, 2k]."""
    return jnp.clip(-_relative(q_pos, k_pos), -self.k, self.k) + self.k

  def logits_bias(self, q, k, q_pos, k_pos):
    # q . a^K for each of the 2k+1 distances ([b, h, L, 2k+1]), then gathered to [b, h, L, L].
    per_row = jnp.einsum('bqhd,rd->bhqr', q, self.keys[...].astype(q.dtype),
                         preferred_element_type=jnp.float32)
    index = jnp.broadcast_to(self._bucket(q_pos, k_pos)[:, None],
                             per_row.shape[:3] + (k_pos.shape[1],))
    return jnp.take_along_axis(per_row, index, axis=-1) * q.shape[-1] ** -0.5

  def value_term(self, probs, q_pos, k_pos):
    # Sum the probabilities that fall on each clipped distance ([b, h, L, 2k+1], a scatter-add
    # over the L x L probabilities), then one matmul with a^V: never an L x L x d tensor.
    b, h, lq, _ = probs.shape
    index = self._bucket(q_pos, k_pos)[:, None]
    weights = jnp.zeros((b, h, lq, 2 * self.k + 1), jnp.float32).at[
        jnp.arange(b)[:, None, None, None], jnp.arange(h)[None, :, None, None],
        jnp.arange(lq)[None, None, :, None], index].add(probs.astype(jnp.float32))
    out = jnp.einsum('bhqr,rd->bqhd', weights, self.values[...].astype(jnp.float32))
    return out.astype(probs.dtype)


@register('shaw')
class Shaw(PositionScheme):
  """Shaw et al. 2018: learned relative position embeddings for keys and values, distances
  clipped at k = `max_distance`, one pair of (2k+1)-row tables per layer shared by all heads."""

  fields = ('shaw',)
  has_value_term = True

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    self.layers = nnx.List([_ShawLayer(model_cfg.position.shaw.max_distance,
                                       _head_dim(model_cfg), rngs)
                            for _ in range(model_cfg.num_layers)])

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    if cfg.shaw.max_distance < 1:
      raise errors.ConfigError(f'config.model.position.shaw.max_distance='
                               f'{cfg.shaw.max_distance} must be >= 1.')
    if model_cfg.attention_impl not in ('einsum', 'auto'):
      raise errors.ConfigError(
          "config.model.position.kind='shaw' adds relative embeddings to the attention values, "
          "which jax.nn.dot_product_attention cannot do. Fix: "
          "--config.model.attention_impl=einsum.")

  def for_layer(self, index):
    return self.layers[index]


class _XLLayer(PositionScheme):
  """One layer's Transformer-XL relative terms with its own projection W_R and the model's
  global biases u, v."""

  def __init__(self, w_r: nnx.Param, u: nnx.Param, v: nnx.Param, d_model: int, base: float):
    self.w_r, self.u, self.v = w_r, u, v
    self.d_model, self.base = d_model, base

  def logits_bias(self, q, k, q_pos, k_pos):
    """(b) + (c) + (d) of Dai et al. 2019, eq. 3 (term (a), q . k, is the attention itself):
    (b) q_i . W_R R_{i-j}, (c) u . k_j, (d) v . W_R R_{i-j}, with R the sinusoidal encoding of
    the distance i - j. The relative shift is a gather from the 2M-1 distances |i - j| < M,
    M = max(q_len, k_len). That covers every pair that can attend: positions restart at 0 in
    each packed segment (< L), and a decoding query at cache slot p sees keys at 0..p."""
    m = max(q.shape[1], k.shape[1])
    distances = jnp.arange(-(m - 1), m)
    rel = jnp.einsum('rm,mhd->rhd', sinusoidal_table(distances, self.d_model, self.base),
                     self.w_r[...].astype(jnp.float32))  # [2M-1, heads, head_dim]
    qv = q.astype(jnp.float32) + self.v[...].astype(jnp.float32)
    per_distance = jnp.einsum('bqhd,rhd->bhqr', qv, rel)  # (b) + (d) for every distance.
    index = jnp.clip(_relative(q_pos, k_pos), -(m - 1), m - 1) + (m - 1)
    index = jnp.broadcast_to(index[:, None], per_distance.shape[:3] + (k.shape[1],))
    bd = jnp.take_along_axis(per_distance, index, axis=-1)
    c = jnp.einsum('hd,bkhd->bhk', self.u[...].astype(jnp.float32), k.astype(jnp.float32))
    return (bd + c[:, :, None, :]) * q.shape[-1] ** -0.5


@register('xl')
class TransformerXL(PositionScheme):
  """Transformer-XL relative attention (Dai et al. 2019): sinusoidal relative encodings, a
  projection W_R per layer, and global content/position biases u, v shared by all layers."""

  fields = ('xl',)

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    d, h, hd = model_cfg.d_model, model_cfg.num_heads, _head_dim(model_cfg)
    self.d_model, self.base = d, float(model_cfg.position.xl.base)
    init = nnx.initializers.normal(stddev=d ** -0.5)
    self.w_r = nnx.List([nnx.Param(init(rngs.params(), (d, h, hd)))
                         for _ in range(model_cfg.num_layers)])
    # The paper's global biases u and v (named *_bias: no weight decay, like other biases).
    self.u_bias = nnx.Param(nnx.initializers.normal(stddev=0.02)(rngs.params(), (h, hd)))
    self.v_bias = nnx.Param(nnx.initializers.normal(stddev=0.02)(rngs.params(), (h, hd)))

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    if model_cfg.d_model % 2:
      raise errors.ConfigError(f'config.model.d_model={model_cfg.d_model} must be even for xl.')

  def for_layer(self, index):
    return _XLLayer(self.w_r[index], self.u_bias, self.v_bias, self.d_model, self.base)


def t5_buckets(relative_position, *, bidirectional: bool, num_buckets: int,
               max_distance: int) -> jax.Array:
  """T5's bucket of each relative position (key minus query), Raffel et al. 2020.

  Bidirectional: half of the buckets for keys after the query (the sign is one bit). Within a
  side, distances below half the buckets get a bucket each; larger ones share logarithmically
  wider buckets up to max_distance, beyond which all fall in the last bucket.
  """
  n = -relative_position  # Query minus key: positive for keys in the past.
  bucket = jnp.zeros_like(n)
  if bidirectional:
    num_buckets //= 2
    bucket = bucket + (n < 0).astype(n.dtype) * num_buckets
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  exact = num_buckets // 2
  log_ratio = jnp.log(jnp.maximum(n, 1).astype(jnp.float32) / exact) / np.log(
      max_distance / exact)
  large = exact + (log_ratio * (num_buckets - exact)).astype(n.dtype)
  large = jnp.minimum(large, num_buckets - 1)
  return bucket + jnp.where(n < exact, n, large)


@register('t5')
class T5Bias(PositionScheme):
  """T5 relative attention bias: a learned scalar per (bucket, head), added to the logits; one
  table shared by all layers unless `shared_across_layers` is False."""

  fields = ('t5',)

  def __init__(self, model_cfg, *, causal, rngs):
    cfg = model_cfg.position.t5
    self.bidirectional = not causal
    self.num_buckets, self.max_distance = cfg.num_buckets, cfg.max_distance
    n = 1 if cfg.shared_across_layers else model_cfg.num_layers
    init = nnx.initializers.normal(stddev=0.02)
    self.bias_tables = nnx.List([nnx.Param(init(rngs.params(), (cfg.num_buckets,
                                                                   model_cfg.num_heads)))
                                 for _ in range(n)])

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    t = cfg.t5
    if t.max_distance < 1:
      raise errors.ConfigError(f'config.model.position.t5.max_distance={t.max_distance} must '
                               'be >= 1.')
    per_side = t.num_buckets // (1 if causal else 2)
    if per_side < 2 or t.max_distance <= per_side // 2:
      raise errors.ConfigError(
          f'config.model.position.t5.num_buckets={t.num_buckets} leaves {per_side} buckets per '
          f'side; need >= 2 and max_distance ({t.max_distance}) > {per_side // 2}.')

  def for_layer(self, index):
    return _T5Layer(self, self.bias_tables[index % len(self.bias_tables)])


class _T5Layer(PositionScheme):

  def __init__(self, scheme: T5Bias, table: nnx.Param):
    self.scheme, self.table = scheme, table

  def logits_bias(self, q, k, q_pos, k_pos):
    s = self.scheme
    buckets = t5_buckets(-_relative(q_pos, k_pos), bidirectional=s.bidirectional,
                         num_buckets=s.num_buckets, max_distance=s.max_distance)
    bias = jnp.take(self.table[...].astype(jnp.float32), buckets, axis=0)  # [b, q, k, heads]
    return jnp.transpose(bias, (0, 3, 1, 2))


def alibi_slopes(num_heads: int) -> np.ndarray:
  """ALiBi head slopes (Press et al. 2022): the geometric sequence starting at 2^(-8/n) with
  that ratio for n a power of two; otherwise the slopes of the closest smaller power of two
  followed by every other slope of twice that many heads."""
  def geometric(n):
    start = 2.0 ** (-8.0 / n)
    return [start ** (i + 1) for i in range(n)]
  if num_heads & (num_heads - 1) == 0:
    return np.asarray(geometric(num_heads))
  closest = 2 ** int(np.floor(np.log2(num_heads)))
  return np.asarray(geometric(closest) + geometric(2 * closest)[0::2][:num_heads - closest])


@register('alibi')
class ALiBi(PositionScheme):
  """ALiBi: a fixed, head-specific linear penalty -m_h |i - j| on the logits. Causal models see
  only j <= i (the paper's form); bidirectional models get the symmetric variant."""

  fields = ('alibi',)

  def __init__(self, model_cfg, *, causal, rngs):
    del causal, rngs
    self.slopes = tuple(float(m) for m in alibi_slopes(model_cfg.num_heads))

  def logits_bias(self, q, k, q_pos, k_pos):
    distance = jnp.abs(_relative(q_pos, k_pos)).astype(jnp.float32)[:, None]
    return -jnp.asarray(self.slopes, jnp.float32)[None, :, None, None] * distance
