"""Rotary schemes: queries and keys rotated by their positions. RoPE (Su et al. 2021, RoFormer)
with its options (p-RoPE's `keep_fraction`, Barbero et al. 2024) and scalings, and xPos (Sun et
al. 2022)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from roformer import autodiff
from roformer import errors
from roformer import specs
from roformer.positions import absolute
from roformer.positions import base
from roformer.positions import registry
from roformer.positions import remap
from roformer.positions import scaling


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
  return rotate_pairs(x, positions, scaling.rope_frequencies(x.shape[-1], base))


def rotate_pairs(x: jax.Array, positions: jax.Array, inv_freq, layout: str = 'interleaved',
                 scale: jax.Array | None = None) -> jax.Array:
  """Rotates pairs of x's last dimension by positions * inv_freq (float32 angles).

  `interleaved` pairs (x[2i], x[2i+1]) as the RoFormer paper; `half` pairs (x[i], x[i + d/2])
  as GPT-NeoX/Llama. `scale` (float32 [..., seq, d/2]) multiplies each pair afterwards (xPos);
  it is a function of the positions and gets no gradient. With constant frequencies (a
  sequence of numbers) and no scale the backward pass is the rotation by the opposite angles
  (R(-a) = R(a)^T), one more pass of the same kind, instead of the transposes of the reshapes
  and the products. Frequencies computed from the positions (a jax.Array broadcastable to
  [..., 1, d/2]: dynamic NTK scaling) take the plain autodiff path.
  """
  if scale is None and not isinstance(inv_freq, jax.Array):
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


@autodiff.custom_vjp('rotation', nondiff_argnums=(2, 3), why='saves the positions, not the cosines and sines')
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


def remapped_rope_logits(q: jax.Array, k: jax.Array, inv_freq, method: str, /,
                         layout: str = 'interleaved', **options) -> jax.Array:
  """remapped_logits for a full pass (positions 0..length-1 in every row) with RoPE's
  frequencies `inv_freq` [d/2] over the whole head."""
  batch, length = q.shape[:2]
  pos = jnp.broadcast_to(jnp.arange(length), (batch, length))
  rotate = lambda x, p: rotate_pairs(x.astype(jnp.float32), p, jnp.asarray(
      inv_freq, jnp.float32), layout)
  return remap.remapped_logits(q, k, pos, pos, rotate, method, **options)


def kept_pairs(rotary_dim: int, keep_fraction: float) -> int:
  """p-RoPE's number of rotated pairs: floor(keep_fraction * rotary_dim / 2), as Barbero et al.
  2024 compute it (`int(rope_percentage * head_dim // 2)`)."""
  return int(keep_fraction * rotary_dim // 2)


@dataclasses.dataclass(frozen=True)
class _Rotation:
  """RoPE's rotation of a `width`-wide vector with the scheme's options (frozen and compared by
  value: it is part of a layer's static graph, the same in every layer). Built for the heads,
  and for FAVOR+'s random features."""
  base: float
  rotary_dim: int
  layout: str
  kept: int
  inv_freq: tuple[float, ...]  # Python floats: constants, not state.
  mscale: float  # The scaling's attention factor on q and k (1: none).
  mscale_rotated_only: bool  # It multiplies the rotated dimensions alone (transformers').
  dynamic: bool  # Dynamic NTK: frequencies from each call's positions.
  dynamic_factor: float
  original_length: int
  long_freq: tuple[float, ...] | None  # LongRoPE: the frequencies past original_length.

  @classmethod
  def build(cls, width: int, cfg) -> '_Rotation':
    rotary_dim = int(round(width * cfg.fraction))
    kept = kept_pairs(rotary_dim, cfg.keep_fraction)
    sc = cfg.scaling
    inv_freq, mscale = scaling.scaled_frequencies(rotary_dim, float(cfg.base), sc)
    keep = lambda f: tuple(float(x) for x in np.where(np.arange(rotary_dim // 2) < kept, f, 0.0))
    long_freq = None
    if sc.kind == 'longrope':
      long_freq = keep(scaling.longrope_frequencies(
          scaling.rope_frequencies(rotary_dim, float(cfg.base)), sc)[1])
    return cls(float(cfg.base), rotary_dim, cfg.layout, kept, keep(inv_freq), float(mscale),
               scaling.option(sc, 'attention_factor_dims') == 'rotated', sc.kind == 'dynamic',
               float(sc.factor), int(sc.original_length), long_freq)

  def frequencies(self, *positions):
    """Constants (a tuple of floats), or float32 [batch, 1, d/2] from each row's length, its
    largest position + 1: dynamic NTK's, or LongRoPE's long set where the length exceeds the
    original length and its short set elsewhere."""
    if not (self.dynamic or self.long_freq):
      return self.inv_freq
    length = functools.reduce(jnp.maximum, [p.max(axis=-1) for p in positions]) + 1
    if self.long_freq:
      long = (length > self.original_length)[..., None]
      return jnp.where(long, jnp.asarray(self.long_freq, jnp.float32),
                       jnp.asarray(self.inv_freq, jnp.float32))[..., None, :]
    freqs = scaling.dynamic_frequencies(self.rotary_dim, self.base, self.dynamic_factor,
                                        self.original_length, length)
    kept = np.arange(self.rotary_dim // 2) < self.kept
    return jnp.where(kept, freqs, 0.0)[..., None, :]

  def __call__(self, x, positions, inv_freq, scale=None, tempered: bool = False):
    """x's first rotary_dim dimensions rotated (each pair times `scale`: xPos); `tempered`:
    times the attention factor (q and k, on the dimensions `mscale_rotated_only` says; never
    the values)."""
    n, factor = self.rotary_dim, tempered and self.mscale != 1.0
    rotated = rotate_pairs(x[..., :n], positions, inv_freq, self.layout, scale)
    if factor and self.mscale_rotated_only:
      rotated = rotated * jnp.asarray(self.mscale, rotated.dtype)
    out = rotated if n == x.shape[-1] else jnp.concatenate([rotated, x[..., n:]], axis=-1)
    if factor and not self.mscale_rotated_only:
      out = out * jnp.asarray(self.mscale, out.dtype)
    return out


def _favor_features(model_cfg) -> int:
  """FAVOR+'s random features per head when they are rotated (rope_mode 'features'), else 0."""
  att = model_cfg.get('attention')
  if att is None or att.get('kind') != 'favor' or att.get('rope_mode') != 'features':
    return 0
  return int(att.num_features)


class _RotaryLayer(base.Layer):
  """RoPE in one layer: no parameters, the rotation's constants."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal, rngs
    cfg = model_cfg.position.rope
    self.heads = _Rotation.build(base.head_dim(model_cfg), cfg)
    features = _favor_features(model_cfg)
    self.features = _Rotation.build(features, cfg) if features else None
    self.rotate_values = bool(cfg.rotate_values)
    self.remap = layer_remap(model_cfg)  # (method, option items), or None.

  def rotate(self, q, k, q_pos, k_pos, ctx):
    r = self.heads
    inv_freq = r.frequencies(q_pos, k_pos)
    return r(q, q_pos, inv_freq, tempered=True), r(k, k_pos, inv_freq, tempered=True)

  def rotates_keys_alone(self) -> bool:
    # Dynamic NTK's and LongRoPE's frequencies follow the row's length; a subclass that
    # rotates otherwise (xPos's scale about the keys' centre) says so itself.
    return (type(self).rotate is _RotaryLayer.rotate
            and not (self.heads.dynamic or self.heads.long_freq))

  def keeps_unrotated_dims(self) -> bool:
    # A scaling's attention factor on every dimension (YaRN's 'all') multiplies them too.
    return self.heads.mscale == 1.0 or self.heads.mscale_rotated_only

  def remapped_logits(self, q, k, q_pos, k_pos, row_pos=None):
    """RoPE's scaled logits [batch, heads, q_len, k_len] with the distances of this layer's
    remap (`layer_remap`), rotated by its own rotation (its scaling, fraction and layout; the
    scaling's attention factor on q and k), and the [batch, q_len, k_len] pairs the method lets
    a query see (None: all)."""
    r = self.heads
    freqs = r.frequencies(q_pos, k_pos) if row_pos is None else r.frequencies(row_pos)
    method, options = self.remap[0], dict(self.remap[1])
    logits = remap.remapped_logits(q, k, q_pos, k_pos,
                                   lambda x, p: r(x, p, freqs, tempered=True), method, **options)
    return (logits * q.shape[-1] ** -0.5,
            remap.visible(method, q_pos, k_pos, **options))

  def rotate_value(self, v, k_pos, ctx):
    # The keys include the queries' positions, so k_pos alone gives the same dynamic length.
    return self.heads(v, k_pos, self.heads.frequencies(k_pos)) if self.rotate_values else v

  def rotate_features(self, qf, kf, q_pos, k_pos, ctx):
    """The RoFormer paper's linear attention: the positive features phi(q), phi(k) rotated by
    the scheme's own frequencies over the feature width (scaling, keep_fraction, fraction and
    layout included), in the numerator only."""
    r = self.features
    inv_freq = r.frequencies(q_pos, k_pos)
    return r(qf, q_pos, inv_freq), r(kf, k_pos, inv_freq)  # FAVOR+ refuses a factor.


def _validate_rotation(width: int, what: str, r) -> int:
  rotary_dim = int(round(width * r.fraction))
  if rotary_dim % 2 or rotary_dim == 0:
    raise errors.ConfigError(
        f'rope rotates pairs, but the rotated dimension is {rotary_dim} ({what} {width} x '
        f'fraction {r.fraction}). Fix: change --config.model.head_dim (or d_model / num_heads), '
        '--config.model.attention.num_features or --config.model.position.rope.fraction so '
        'that it is even.')
  keep = r.keep_fraction
  if kept_pairs(rotary_dim, keep) == 0:
    raise errors.ConfigError(
        f'config.model.position.rope.keep_fraction={keep} keeps none of the {rotary_dim // 2} '
        f'rotated pairs (p-RoPE rotates floor(keep_fraction x {rotary_dim // 2}) pairs). Fix: '
        'raise it, or use --config.model.position.kind=none for no rotation at all.')
  return rotary_dim


ROPE = 'rope'  # Rotary's registered kind: what a checkpoint of another library computes.


def rope_layers(model_cfg) -> tuple[bool, ...] | None:
  """Whether each layer rotates, where every layer is plain RoPE or has no positions at all
  (SmolLM3's NoPE layers, which transformers' SmolLM3 class computes); None for any other
  layout."""
  schemes = [registry.scheme(k) for k in registry.layer_kinds(model_cfg)]
  if not all(s in (Rotary, absolute.NoPositions) for s in schemes) or Rotary not in schemes:
    return None
  return tuple(s is Rotary for s in schemes)


def values_rotated(model_cfg) -> bool:
  """Whether a layer kind rotates the values too (rope.rotate_values)."""
  return any('rope' in registry.scheme(k).fields()
             for k in dict.fromkeys(registry.layer_kinds(model_cfg))) and bool(
                 model_cfg.position.rope.rotate_values)


def rotation_problem(model_cfg, dims: int, why: str) -> str | None:
  """Where a layer kind rotates by the rope options another number of dimensions of each head
  than `dims` (`why` says who needs that many), the error's line naming the fraction that
  rotates them; else None."""
  width = base.head_dim(model_cfg)
  fraction = model_cfg.position.rope.fraction
  rotated = int(round(width * fraction))
  reads = any('rope' in registry.scheme(k).fields()
              for k in dict.fromkeys(registry.layer_kinds(model_cfg)))
  if not reads or rotated == dims:
    return None
  return (f'config.model.position.rope.fraction={fraction} rotates {rotated} dimensions of each '
          f'head, where {why}. Fix: --config.model.position.rope.fraction={dims / width} '
          f'({dims} / head_dim {width}).')


def layer_kinds_of(rotates) -> tuple[str, ...]:
  """`model.layer_kinds` for layers that each rotate or have no positions (SmolLM3's
  no_rope_layers): () where every layer rotates."""
  if all(rotates):
    return ()
  return tuple(ROPE if r else absolute.NoPositions.kind for r in rotates)


@base.register(ROPE)
class Rotary(base.PositionScheme):
  """RoPE: queries and keys rotated by their absolute positions, so q_m . k_n depends on m - n.

  Options (`config.model.position.rope`): `base`; `fraction` of each head rotated; `keep_fraction`
  of the rotated pairs kept rotating (p-RoPE); `rotate_values` (Hugging Face's `rotary_value`);
  `layout` `interleaved` (the paper) or `half` (GPT-NeoX/Llama weights); `scaling` for context
  extension (scaling.py).

  `fraction` and `keep_fraction` both leave part of each head unrotated, differently:
  - `fraction` f (GPT-NeoX's rotary_pct) rotates the first f * d dimensions with RoPE's
    frequencies spread over that width, theta_i = base^(-2i / (f d)): its rotated pairs still
    run from frequency 1 down to 1/base, and the last (1 - f) d dimensions pass through.
  - `keep_fraction` p (p-RoPE, Barbero et al. 2024) keeps RoPE's frequencies theta_i =
    base^(-2i / d) of the first floor(p d / 2) pairs, the highest ones, and sets the rest to 0.
    Models use the lowest frequencies, which barely turn over a training context, as semantic
    channels that the slow rotation corrupts at long range; p-RoPE leaves them exactly
    unrotated (cos 0 = 1, sin 0 = 0), in either layout.
  `keep_fraction` applies to the rotated pairs, after any scaling.
  """

  options = {'rope': {
      'base': specs.Float(1, 1e12, min_open=True, default=10000.0),
      'fraction': specs.Float(0, 1, min_open=True, default=1.0),
      'keep_fraction': specs.Float(0, 1, min_open=True, default=1.0),
      'rotate_values': specs.Bool(default=False),
      'layout': specs.Str(('interleaved', 'half'), default='interleaved'),
      'scaling': scaling.SPECS,
      # A training-free distance remap at evaluation (remap.py; eval.py overrides, like the
      # scalings): the method and the options it reads, the others ignored.
      'remap': remap.SPECS}}
  capabilities = base.Capabilities(rotary=True, feature_rotation=True, real_positions=True,
                                   latent_cache=True)
  Layer = _RotaryLayer
  may_change = (
      ('rope.base', ('continue',),
       "RoPE's base: raising it extends the context, and the continued steps train it"),
      ('rope.scaling', ('continue', 'evaluate'),
       "RoPE's context-extension scaling: trained by a continued model, or applied to a "
       'checkpoint at evaluation'),
      ('rope.remap', ('evaluate',),
       "a training-free remap of RoPE's distances (ReRoPE, Self-Extend, STRING, DCA, sinks), "
       'applied to a checkpoint at evaluation'),
  )

  filled_from_source = ('rope.scaling.original_length',)

  @classmethod
  def from_source(cls, cfg, trained, occasion):
    """A scaling relative to the trained length whose original length is unset takes the
    read run's: the kinds whose frequencies read it (yarn, llama3, dynamic), and on a
    continuation every stretching kind too, whose factor is checked against it."""
    sc = cfg.rope.scaling
    relative = scaling.NEEDS_ORIGINAL_LENGTH + (
        scaling.STRETCHING if occasion == 'continue' else ())
    if sc.kind in relative and sc.original_length < 1:
      sc.original_length = trained

  @classmethod
  def check_continuation(cls, cfg, trained, seq_len, source):
    """A stretching scaling continues from the source's length and covers the new one."""
    sc, field = cfg.rope.scaling, 'config.model.position.rope.scaling'
    if sc.kind not in scaling.STRETCHING:
      return
    if sc.original_length != trained:  # from_source filled it in if it was unset.
      raise errors.ConfigError(
          f'{field}.original_length={sc.original_length}, but {source} was trained at '
          f'{trained}. Fix: --{field}.original_length={trained} (or 0 to take it from the '
          'source).')
    if sc.factor * trained < seq_len:
      raise errors.ConfigError(
          f"{field}.factor={sc.factor} stretches the source's training length {trained} to "
          f'{sc.factor * trained:g}, short of config.data.seq_len={seq_len}. Fix: '
          f'--{field}.factor={seq_len / trained:g} (or more).')

  @classmethod
  def remaps(cls, model_cfg):
    return layer_remap(model_cfg) is not None

  @classmethod
  def length_factor(cls, cfg):
    if cfg.rope.scaling.kind == 'none':
      raise errors.ConfigError(
          'config.eval.scale_rope_to_length=True sets the RoPE scaling factor to each '
          f'evaluation length / data.seq_len, but position.kind={cls.kind!r} with '
          "rope.scaling.kind='none' has no RoPE scaling to set. Fix: add "
          '--config.model.position.rope.scaling.kind=linear (or ntk, yarn, llama3, dynamic) or '
          'drop it.')
    if cfg.rope.scaling.kind == 'longrope':
      raise errors.ConfigError(
          'config.eval.scale_rope_to_length=True sets the RoPE scaling factor to each '
          "evaluation length / data.seq_len, but rope.scaling.kind='longrope' stretches by its "
          'per-pair short_factor and long_factor, which a factor does not change. Fix: drop '
          'config.eval.scale_rope_to_length, or evaluate under another scaling kind.')
    return 'rope.scaling.factor'

  @classmethod
  def unread(cls, cfg, model_cfg):
    """The base beside model.layer_rope_bases (which gives each layer its own), and the
    remap's options that its method does not read."""
    r = cfg.rope
    bases = tuple(model_cfg.layer_rope_bases) if 'layer_rope_bases' in model_cfg else ()
    default = Rotary.options['rope']['base'].default
    out = [('rope.remap.' + name, why) for name, why in remap.unread(r.remap)]
    if bases and r.base != default:
      out.append(('rope.base', f'config.model.position.rope.base={r.base:g} is not read: '
                               f'config.model.layer_rope_bases={bases} gives each layer its '
                               f'base. Fix: put {r.base:g} in layer_rope_bases, or drop '
                               f'--config.model.position.rope.base (its default is '
                               f'{default:g}).'))
    return out

  @classmethod
  def factor_basis(cls, cfg, trained):
    """A model trained with a scaling keeps its factor, stretching its original length. A
    factor above 1 without that length is refused: a checkpoint imported with linear at 4
    stretches its data.seq_len, a run trained from scratch at factor 4 a quarter of it."""
    sc, field = cfg.rope.scaling, 'config.model.position.rope.scaling'
    if sc.factor > 1 and not sc.original_length:
      raise errors.ConfigError(
          f'config.eval.scale_rope_to_length sets {field}.factor from the length the factor '
          f'stretches, and the model, with factor={sc.factor:g}, does not say it ('
          f'{field}.original_length=0). Fix: --{field}.original_length=N: the trained '
          f'length {trained} for a checkpoint that stretches it, {trained / sc.factor:g} for one '
          'trained from scratch at that factor.')
    return float(sc.factor), int(sc.original_length) or trained

  @classmethod
  def layer_options(cls, model_cfg, layer):
    """`model.layer_rope_bases` cycled over the layers (Gemma 3's local and global bases), and
    no scaling on a windowed layer where the scaling applies to the global ones
    (`rope.scaling.layers='global'`: Gemma 3's linear factor on its global layers)."""
    given = 'layer_rope_bases' in model_cfg and tuple(model_cfg.layer_rope_bases)
    out = {'rope.base': registry.layer_rope_bases(model_cfg)[layer]} if given else {}
    sc = model_cfg.position.rope.scaling
    if scaling.option(sc, 'layers') == 'global' and registry.layer_windows(model_cfg)[layer]:
      out['rope.scaling.kind'] = 'none'
    return out

  @classmethod
  def cache_breaks(cls, cfg):
    """LongRoPE's original length: past it, every position rotates by the long set."""
    sc = cfg.rope.scaling
    return (int(sc.original_length),) if sc.kind == 'longrope' else ()

  @classmethod
  def results_fields(cls, cfg):
    sc, rm = cfg.rope.scaling, cfg.rope.remap
    return {'rope_scaling': sc.to_dict() if sc.kind != 'none' else None,
            'rope_remap': ({'method': rm.method, **remap.options_of(rm)}
                           if rm.method != 'none' else None)}

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    r = cfg.rope
    head_dim = base.head_dim(model_cfg)
    rotary_dim = _validate_rotation(
        head_dim, 'head_dim', r)
    scaling.validate(r.scaling, rotary_dim)
    if scaling.option(r.scaling, 'layers') == 'global' and all(registry.layer_windows(model_cfg)):
      raise errors.ConfigError(
          "config.model.position.rope.scaling.layers='global' scales the layers without a "
          f'sliding window, and every layer has one (config.model.layer_windows='
          f'{tuple(model_cfg.layer_windows)}), so nothing would be scaled. Fix: '
          "--config.model.position.rope.scaling.kind=none, or layers=all to scale every layer.")
    features = _favor_features(model_cfg)
    _validate_remap(cls, r.remap, model_cfg, causal)
    if features and cls.capabilities.feature_rotation:
      if r.scaling.kind in scaling.TEMPERED:
        raise errors.ConfigError(
            f"rope.scaling.kind={r.scaling.kind!r} scales the attention temperature, which "
            "FAVOR+'s rotated features (attention.rope_mode=features) do not carry. Fix: "
            '--config.model.attention.rope_mode=qk.')
      scaling.validate(r.scaling, _validate_rotation(features, 'attention.num_features', r))


def layer_remap(model_cfg) -> tuple[str, tuple] | None:
  """(method, sorted option items) of the distance remap a layer built from `model_cfg`
  applies to RoPE's logits (positions/remap.py), or None: plain rope layers only."""
  rope = model_cfg.position.get('rope')
  if rope is None or rope.remap.method == 'none' or model_cfg.position.kind != 'rope':
    return None
  return rope.remap.method, tuple(sorted(remap.options_of(rope.remap).items()))


def check_remap_length(model_cfg, trained: int, trained_field: str) -> None:
  """Refuses a distance remap whose window, chunk or shift keeps RoPE's distances past the
  `trained` positions (`trained_field` says where that number comes from)."""
  layer = layer_remap(model_cfg)
  kept = layer and remap.longest_kept(layer[0], dict(layer[1]))
  if kept and kept[1] + kept[2] > trained:
    words, value, extra = kept
    raise errors.ConfigError(
        f'config.model.position.rope.remap: {layer[0]} with {words} = {value} needs '
        f'{value + extra} trained positions, past the {trained} positions the model was trained '
        f'on ({trained_field}); the remap would run RoPE at distances it never saw. Fix: '
        f'{words} at most {trained - extra}.')


def _validate_remap(cls, cfg, model_cfg, causal: bool) -> None:
  """A distance remap needs causal attention over RoPE's logits, which it computes itself (and
  a softmax over them: roformer/attention_options' `check_kind`), and no option it ignores."""
  if cfg.method == 'none':
    return
  field = 'config.model.position.rope.remap.method'
  impl = model_cfg.attention_impl
  reason = ('it remaps plain RoPE, the kind of config.model.position.kind=rope (with '
            'model.layer_kinds, its rope layers)'
            if cls is not Rotary or model_cfg.position.kind != 'rope' else
            'it is for causal attention (a decoder)' if not causal else
            'rope.rotate_values rotates values by absolute positions'
            if model_cfg.position.rope.rotate_values else
            f'it computes its logits on the einsum path, not attention_impl={impl!r}'
            if impl not in ('auto', 'einsum') else '')
  if reason:
    raise errors.ConfigError(f'{field}={cfg.method!r}: {reason}. Fix: leave it '
                             "'none' here.")
  try:
    remap.check(cfg.method, 1, remap.options_of(cfg))
  except errors.ConfigError as e:  # Only STRING's pair of options reaches here.
    raise errors.ConfigError(
        f'config.model.position.rope.remap: {str(e).split(": ", 1)[1]} Fix: '
        '--config.model.position.rope.remap.local_window=<below shift>.') from None


def xpos_decay(rotary_dim: int, gamma: float) -> np.ndarray:
  """xPos per-pair decay base zeta_i = (2i/d + gamma) / (1 + gamma), i = 0..d/2-1."""
  return (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim + gamma) / (1.0 + gamma)


class _XPosLayer(_RotaryLayer):

  def __init__(self, model_cfg, *, causal, rngs):
    super().__init__(model_cfg, causal=causal, rngs=rngs)
    cfg = model_cfg.position.xpos
    self.log_zeta = tuple(float(z) for z in np.log(xpos_decay(self.heads.rotary_dim,
                                                              cfg.gamma)))
    self.scale_base = float(cfg.scale_base)

  def _scale(self, positions, center, sign):
    power = (positions - center).astype(jnp.float32)[..., None] * (sign / self.scale_base)
    return jnp.exp(power * jnp.asarray(self.log_zeta, jnp.float32))

  def rotate(self, q, k, q_pos, k_pos, ctx):
    # Scales are taken relative to a per-row centre shared by q and k (it cancels in q . k),
    # so zeta^(+-n/B) stays within float range for long sequences.
    r = self.heads
    center = (k_pos.min(axis=-1, keepdims=True) + k_pos.max(axis=-1, keepdims=True)) // 2
    inv_freq = r.frequencies(q_pos, k_pos)
    q = r(q, q_pos, inv_freq, self._scale(q_pos, center, 1.0), tempered=True)
    k = r(k, k_pos, inv_freq, self._scale(k_pos, center, -1.0), tempered=True)
    return q, k


@base.register('xpos')
class XPos(Rotary):
  """RoPE with xPos decay (Sun et al. 2022): q_n is scaled by zeta^(n/B) and k_m by
  zeta^(-m/B) per pair, so q_n . k_m gains the factor zeta^((n-m)/B), decaying with distance
  for causal attention (n >= m). Uses the `rope` fields for base, fraction and layout. FAVOR+
  takes it with rope_mode 'qk' only: the decay has no form on the random features."""

  reads = ('rope',)
  options = {'xpos': {'gamma': specs.Float(0, 1e6, min_open=True, default=0.4),
                      'scale_base': specs.Float(0, 1e12, min_open=True, default=512.0)}}
  capabilities = base.Capabilities(causal_only=True, rotary=True, real_positions=True)
  causal_reason = "its decay zeta^((n-m)/B) grows without bound for keys after the query"
  Layer = _XPosLayer

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    super().validate(cfg, model_cfg, seq_len, causal)
    # After centring, the largest exponent is (L/2) |ln zeta_0| / B; keep exp() in range.
    exponent = seq_len / 2 * abs(np.log(cfg.xpos.gamma / (1 + cfg.xpos.gamma))) / (
        cfg.xpos.scale_base)
    limit = 8.0 if model_cfg.dtype == 'float16' else 60.0
    if exponent > limit:
      raise errors.ConfigError(
          f'xpos at sequence length {seq_len} scales q and k by up to exp({exponent:.0f}), '
          f'beyond {model_cfg.dtype} range. Fix: raise config.model.position.xpos.scale_base '
          f'to at least {cfg.xpos.scale_base * exponent / limit:.0f}, or shorten the sequence.')
