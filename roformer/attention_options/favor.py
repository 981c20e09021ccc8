"""FAVOR+ linear attention (`attention.kind='favor'`): positive orthogonal random features phi
with E[phi(q).phi(k)] = exp(q.k/sqrt(d)), and attention as D^-1 phi(Q) (phi(K)^T V) in O(L)
memory (Choromanski et al. 2021, "Rethinking Attention with Performers").
It never forms logits, weights or the mask, so only schemes without a logits term run with it
(`Capabilities.linear_attention`); RoPE rotates q and k, or (rope_mode='features') the features
in the numerator, as the RoFormer paper's eq. 19 does.

Each layer's features come from key(FEATURE_SEED) folded with the layer's index and the current
draw, which the train step sets to step // redraw_interval (`feature_draw`, a variable that
travels with the weights into checkpoints, evaluation and decoding).
"""

import jax
import jax.numpy as jnp

from roformer import errors
from roformer import positions
from roformer import variables
from roformer.attention_options import base
from roformer.specs import Int, Str

_STEPS = 2**31 - 1  # Step counters are int32.

# Random features of layer i, draw n come from key(FEATURE_SEED) folded with i, then n.
FEATURE_SEED = 1729


def orthogonal_features(key: jax.Array, num_features: int, dim: int) -> jax.Array:
  """FAVOR+'s random projection [num_features, dim]: blocks of dim orthogonal rows (QR of a
  Gaussian matrix), each row rescaled to the norm of an independent Gaussian vector, so every
  row is marginally N(0, I) while rows within a block stay exactly orthogonal."""
  blocks = -(-num_features // dim)
  keys = jax.random.split(key, blocks + 1)
  rows = []
  for k in keys[:-1]:
    q, r = jnp.linalg.qr(jax.random.normal(k, (dim, dim), jnp.float32))
    rows.append((q * jnp.sign(jnp.diag(r))).T)  # Signs fixed: Haar-distributed, unbiased.
  norms = jnp.linalg.norm(jax.random.normal(keys[-1], (num_features, dim), jnp.float32), axis=1)
  return jnp.concatenate(rows)[:num_features] * norms[:, None]


SHIFT_CAP = 40.0  # exp(40) ~ 2e17 and exp(-40) ~ 4e-18: far from float32's limits.


def positive_features(x: jax.Array, projection: jax.Array, *, is_query: bool,
                      valid: jax.Array | None = None) -> jax.Array:
  """Positive random features with E[phi(q).phi(k)] = exp(q.k / sqrt(d)) (times a per-query
  constant), for x = input * d^-1/4 and rows w_r of the projection:

    keys:    phi(k)_r = exp(w_r.k - |k|^2/2 - s_r) / sqrt(m)
    queries: phi(q)_r = exp(w_r.q - |q|^2/2 + s_r - c_q) / sqrt(m)

  The s_r moved from keys to queries cancels in phi(q).phi(k), and c_q (the max over r of
  the query's exponents) cancels between numerator and denominator, so a key's features depend
  on that key alone: unlike a max over all keys, nothing about future keys reaches a causal
  prefix sum. Only the part of |w_r|^2/2 above SHIFT_CAP moves (s_r = max(|w_r|^2/2 - cap, 0)),
  so key exponents stay <= cap (no overflow) and typical ones >= -cap (no underflow, even at
  head_dim 128 where |w_r|^2/2 reaches ~90). Rows where `valid` is False (padding
  keys) become exactly 0 (phi(0) is not 0).
  x: [batch, len, heads, d] -> float32 [batch, len, heads, m]."""
  d = x.shape[-1]
  x = x.astype(jnp.float32) * d ** -0.25
  exponent = jnp.einsum('blhd,md->blhm', x, projection) - 0.5 * jnp.sum(
      x * x, axis=-1, keepdims=True)
  shift = jnp.maximum(0.5 * jnp.sum(projection * projection, axis=-1) - SHIFT_CAP, 0.0)
  if is_query:
    exponent = exponent + shift
    exponent = exponent - jax.lax.stop_gradient(jnp.max(exponent, axis=-1, keepdims=True))
  else:
    exponent = exponent - shift
  phi = jnp.exp(exponent) * projection.shape[0] ** -0.5  # No additive eps: it would bias
  # the many tiny key features; an all-zero denominator is guarded where it is divided.
  return phi if valid is None else jnp.where(valid[:, :, None, None], phi, 0.0)


def causal_linear_sums(qf, kf, v, segment_ids, chunk: int = 128):
  """sum_{j <= i, same segment} (qf_i . kf_j) v_j for every i, in O(L) memory: a scan over
  chunks carries the running sums of kf_j v_j^T [m, d] of the segment that reaches the chunk
  boundary; inside a chunk a masked [chunk, chunk] product does the rest. Packed segments must
  be contiguous runs (as packing makes them). qf, kf: [b, L, h, m]; v: [b, L, h, d];
  segment_ids: [b, L]. Returns float32 [b, L, h, d]."""
  b, length, h, m = qf.shape
  d = v.shape[-1]
  pad = -length % chunk
  if pad:
    widen = lambda x: jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
    qf, kf, v, segment_ids = widen(qf), widen(kf), widen(v), widen(segment_ids)
  n = qf.shape[1] // chunk
  split = lambda x: jnp.moveaxis(x.reshape((b, n, chunk) + x.shape[2:]), 1, 0)
  causal = jnp.tril(jnp.ones((chunk, chunk), bool))

  def step(carry, xs):
    state, carried = carry  # [b, h, m, d], [b]
    q_c, k_c, v_c, s_c = xs
    continues = (s_c == carried[:, None]).astype(jnp.float32)  # [b, c]
    earlier = jnp.einsum('bchm,bhmd->bchd', q_c, state) * continues[:, :, None, None]
    within = jnp.einsum('bihm,bjhm->bhij', q_c, k_c)
    within = jnp.where(causal & (s_c[:, :, None] == s_c[:, None, :])[:, None], within, 0.0)
    out = earlier + jnp.einsum('bhij,bjhd->bihd', within, v_c.astype(jnp.float32))
    last = s_c[:, -1]
    in_last = (s_c == last[:, None]).astype(jnp.float32)
    chunk_state = jnp.einsum('bjhm,bjhd,bj->bhmd', k_c, v_c.astype(jnp.float32), in_last)
    keep = (last == carried)[:, None, None, None]
    return (jnp.where(keep, state + chunk_state, chunk_state), last), out

  init = (jnp.zeros((b, h, m, d), jnp.float32), jnp.full((b,), -1, segment_ids.dtype))
  _, out = jax.lax.scan(step, init, (split(qf), split(kf), split(v), split(segment_ids)))
  return jnp.moveaxis(out, 0, 1).reshape(b, n * chunk, h, d)[:, :length]


def linear_sums(qf, kf, v, segment_ids, *, causal: bool, chunk: int = 128):
  """Causal sums, or bidirectional ones (every j of i's segment) as a forward pass plus a
  backward pass without the diagonal, each O(L) in memory."""
  forward = causal_linear_sums(qf, kf, v, segment_ids, chunk)
  if causal:
    return forward
  flip = lambda x: jnp.flip(x, axis=1)
  backward = flip(causal_linear_sums(flip(qf), flip(kf), flip(v), flip(segment_ids), chunk))
  diagonal = jnp.einsum('blhm,blhm->blh', qf, kf)[..., None] * v.astype(jnp.float32)
  return forward + backward - diagonal


def favor_attend(q, k, v, segment_ids, projection, *, causal: bool, rotate=None,
                 chunk: int = 128) -> jax.Array:
  """FAVOR+ attention (Choromanski et al. 2021): D^-1 (phi(Q) (phi(K)^T V)), with the sums
  restricted to each query's segment (and to j <= i when causal). `rotate(x)` rotates feature
  vectors by their positions for RoPE as the RoFormer paper does it: in the numerator only, the
  denominator keeps the unrotated (positive) features. q, k, v: [b, L, h, d]."""
  valid = segment_ids > 0
  qf = positive_features(q, projection, is_query=True)
  kf = positive_features(k, projection, is_query=False, valid=valid)
  ones = jnp.ones(v.shape[:-1] + (1,), jnp.float32)
  if rotate is None:
    sums = linear_sums(qf, kf, jnp.concatenate([v.astype(jnp.float32), ones], -1),
                       segment_ids, causal=causal, chunk=chunk)
    numerator, denominator = sums[..., :-1], sums[..., -1:]
  else:
    qr, kr = rotate(qf, kf)
    numerator = linear_sums(qr, kr, v, segment_ids, causal=causal, chunk=chunk)
    denominator = linear_sums(qf, kf, ones, segment_ids, causal=causal, chunk=chunk)
  out = numerator / jnp.where(denominator > 0, denominator, 1.0)
  return jnp.where(valid[:, :, None, None], out, 0.0).astype(v.dtype)


def favor_attend_masked(q, k, v, mask, projection, *, rotate=None) -> jax.Array:
  """FAVOR+ with an explicit boolean mask [b, 1, q_len, k_len]: the same estimator as
  `favor_attend`, for a few queries over a key/value cache (decoding), where the q_len x k_len
  products are small."""
  valid = mask.any(axis=(1, 2))  # Keys some query may see: [b, k_len].
  qf = positive_features(q, projection, is_query=True)
  kf = positive_features(k, projection, is_query=False, valid=valid)
  weights = jnp.einsum('bqhm,bkhm->bhqk', qf, kf) * mask
  denominator = weights.sum(-1)  # [b, h, q]
  if rotate is not None:
    qf, kf = rotate(qf, kf)
    weights = jnp.einsum('bqhm,bkhm->bhqk', qf, kf) * mask
  numerator = jnp.einsum('bhqk,bkhd->bqhd', weights, v.astype(jnp.float32))
  denominator = jnp.moveaxis(denominator, 1, 2)[..., None]
  return (numerator / jnp.where(denominator > 0, denominator, 1.0)).astype(v.dtype)


def projection(module, layer=0) -> jax.Array:
  """Layer `layer`'s random features for the attention `module`'s current draw:
  [num_features, head_dim]."""
  key = jax.random.fold_in(jax.random.fold_in(jax.random.key(FEATURE_SEED), layer),
                           module.feature_draw.value.astype(jnp.int32))
  return orthogonal_features(key, module.num_features, module.head_dim)


@base.register
class Favor(base.AttentionKind):
  name = 'favor'
  about = 'FAVOR+ linear attention (Choromanski et al. 2021)'
  model_flag = 'linear_attention'
  specs = {
      'num_features': Int(1, 2**16, default=256),  # Random features per head.
      'redraw_interval': Int(0, _STEPS, default=1000),  # Steps between redraws; 0: never.
      # With RoPE: rotate q and k, or the features (the paper's eq. 19).
      'rope_mode': Str(('features', 'qk'), default='qk'),
      'chunk': Int(1, 2**20, default=128),  # Causal prefix sums: rows per scan step.
  }

  @property
  def reads(self) -> tuple[str, ...]:
    return ('num_features', 'redraw_interval', 'rope_mode')  # `chunk` only orders the sums.

  def redraw_interval(self, att) -> int:
    return int(att.redraw_interval)

  def flops(self, model_cfg, seq_len: int, causal: bool) -> float:
    """q, k features (2 m h e) and the prefix or total sums (2 m h e), times two."""
    del seq_len, causal
    width = model_cfg.num_heads * positions.head_dim(model_cfg)
    return 2 * 2 * model_cfg.attention.num_features * width * 2

  def validate(self, model_cfg, att) -> None:
    """Its features come in rotated pairs, and it never forms the logits or probabilities that
    a scheme's terms need."""
    if att.num_features % 2:
      raise errors.ConfigError(f'config.model.attention.num_features={att.num_features} must '
                               'be even (RoPE rotates pairs of features).')
    scheme = positions.model_scheme(model_cfg)
    caps = scheme.capabilities
    if not caps.linear_attention:
      linear = [k for k in positions.kinds() if positions.capabilities(k).linear_attention]
      raise errors.ConfigError(
          f"config.model.position.kind={scheme.kind!r} cannot be used with attention.kind="
          f"'favor': {caps.logits_term or 'it needs the attention probabilities'}, and linear "
          f'attention never forms those logits. Fix: use one of {linear} with favor, or '
          'softmax attention.')

  def unread(self, model_cfg, att) -> list[tuple[str, str]]:
    """rope_mode=features for a kind without RoPE's rotation of the features (fope, rope_id,
    xpos, none...): it would run as qk."""
    scheme = positions.model_scheme(model_cfg)
    if att.rope_mode != 'features' or scheme.capabilities.feature_rotation:
      return []
    fit = [k for k in positions.kinds() if positions.capabilities(k).feature_rotation]
    return [('rope_mode', f'config.model.attention.rope_mode=features rotates the random '
                          f'features as RoPE rotates queries and keys, and position.kind='
                          f'{scheme.kind!r} has no such rotation (kinds that have: '
                          f'{", ".join(fit)}). Fix: --config.model.attention.rope_mode=qk.')]

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    del cfg, rngs, dtype
    module.num_features, module.chunk = att.num_features, att.chunk
    module.rotate_features = att.rope_mode == 'features' and caps.feature_rotation
    module.feature_draw = variables.FeatureDraw(jnp.zeros((), jnp.float32), out_sharding=(),
                                                eager_sharding=False)

  def rotate(self, module, q, k, site: base.Site):
    if module.rotate_features:  # The features are rotated instead, in the numerator only.
      return q, k
    return super().rotate(module, q, k, site)

  def attend(self, module, q, k, v, mask, site: base.Site):
    rotate = None
    if module.rotate_features:
      rotate = lambda qf, kf: site.position.rotate_features(qf, kf, site.pos, site.k_pos,
                                                             site.ctx)
    features = projection(module, site.layer)
    if site.cache is None:
      segments = site.segments
      if segments is None:
        segments = jnp.ones(q.shape[:2], jnp.int32)
      return favor_attend(q, k, v, segments, features, causal=module.causal, rotate=rotate,
                          chunk=module.chunk), None
    # Decoding: a few queries over the filled cache slots, with the dense mask.
    return favor_attend_masked(q, k, v, mask, features, rotate=rotate), None
