"""Additive biases: a function of the distance i - j added to every attention logit, learned
(T5, Raffel et al. 2020) or fixed (ALiBi, Press et al. 2022)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer import errors
from roformer import fused_bias
from roformer import specs
from roformer import variables
from roformer.positions import base
from roformer.positions import registry


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


@dataclasses.dataclass(frozen=True)
class _T5Buckets:
  """T5's bucketing of distances (constants, hashable: part of a layer's static graph)."""
  bidirectional: bool
  num_buckets: int
  max_distance: int

  def __call__(self, distance):
    """The buckets of distances q_pos - k_pos given as floats (the fused kernel's tiles)."""
    # floor(d + 1/2), not round: Triton lowers no rounding primitive.
    return t5_buckets(-jnp.floor(distance + 0.5).astype(jnp.int32),
                      bidirectional=self.bidirectional,
                      num_buckets=self.num_buckets, max_distance=self.max_distance)

  def bias(self, table, q_pos, k_pos):
    """The bias [batch, heads, q_len, k_len] that `table` [num_buckets, heads] gives."""
    buckets = t5_buckets(-base.relative_positions(q_pos, k_pos), bidirectional=self.bidirectional,
                         num_buckets=self.num_buckets, max_distance=self.max_distance)
    bias = jnp.take(table.astype(jnp.float32), buckets, axis=0)  # [b, q, k, heads]
    return jnp.transpose(bias, (0, 3, 1, 2))


def _t5_table(model_cfg, rngs) -> nnx.Param:
  table = nnx.initializers.normal(stddev=0.02)(
      rngs.params(), (model_cfg.position.t5.num_buckets, model_cfg.num_heads))
  return variables.param(table, (None, None), decay=False)


class _T5Shared(base.Shared):
  """The table every layer reads, when `shared_across_layers` (T5's choice)."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    if model_cfg.position.t5.shared_across_layers:
      self.bias_table = _t5_table(model_cfg, rngs)

  def __call__(self):
    return self.bias_table[...] if hasattr(self, 'bias_table') else None


class _T5Layer(base.Layer):
  """This layer's table, or the shared one (`ctx`, from _T5Shared)."""

  def __init__(self, model_cfg, *, causal, rngs):
    cfg = model_cfg.position.t5
    self.buckets = _T5Buckets(not causal, cfg.num_buckets, cfg.max_distance)
    if not cfg.shared_across_layers:
      self.bias_table = _t5_table(model_cfg, rngs)

  def logits_bias(self, q, k, q_pos, k_pos, mask, ctx):
    table = self.bias_table[...] if hasattr(self, 'bias_table') else ctx
    return self.buckets.bias(table, q_pos, k_pos)

  def fused_bias(self, q_pos, ctx):
    table = self.bias_table[...] if hasattr(self, 'bias_table') else ctx
    return (fused_bias.bucketed(self.buckets, self.buckets.num_buckets),
            table.astype(jnp.float32).T, None, None)


@base.register('t5')
class T5Bias(base.PositionScheme):
  """T5 relative attention bias: a learned scalar per (bucket, head), added to the logits; one
  table shared by all layers unless `shared_across_layers` is False."""

  options = {'t5': {'num_buckets': specs.Int(2, 4096, default=32),
                    'max_distance': specs.Int(1, 2**24, default=128),
                    'shared_across_layers': specs.Bool(default=True)}}
  capabilities = base.Capabilities(
      logits_term='it adds a learned bias to each of the L x L attention logits',
      fused_bias=True, latent_cache=True)
  Shared, Layer = _T5Shared, _T5Layer
  FUSED_BUCKETS = 128  # The fused kernel loops over the buckets in every tile.

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    t = cfg.t5
    per_side = t.num_buckets // (1 if causal else 2)
    if per_side < 2 or t.max_distance <= per_side // 2:
      raise errors.ConfigError(
          f'config.model.position.t5.num_buckets={t.num_buckets} leaves {per_side} buckets per '
          f'side; need >= 2 and max_distance ({t.max_distance}) > {per_side // 2}.')
    if model_cfg.attention_impl == 'pallas' and t.num_buckets > cls.FUSED_BUCKETS:
      raise errors.ConfigError(
          f'config.model.position.t5.num_buckets={t.num_buckets} on attention_impl='
          f"'pallas': the fused kernel loops over the buckets in every tile, so it takes at most "
          f'{cls.FUSED_BUCKETS}. Fix: fewer buckets, or --config.model.attention_impl=auto.')

  @classmethod
  def legacy_params(cls, cfg):
    if cfg.t5.shared_across_layers:
      return ((r'bias_tables/0', 'bias_table'),)
    return ((r'bias_tables/(\d+)', 'layer:bias_table'),)


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


def alibi_bias(slope, distance):
  """ALiBi's -m |d|: the einsum path's [batch, heads, q, k] and the fused kernel's tiles."""
  return -slope * jnp.abs(distance)


ALIBI_FUSED = fused_bias.Bias('alibi', 1, lambda p, d, q_pos: alibi_bias(p[0], d))


class _ALiBiLayer(base.Layer):

  def __init__(self, model_cfg, *, causal, rngs):
    del causal, rngs
    self.slopes = tuple(float(m) for m in alibi_slopes(model_cfg.num_heads))

  def logits_bias(self, q, k, q_pos, k_pos, mask, ctx):
    distance = base.relative_positions(q_pos, k_pos).astype(jnp.float32)[:, None]
    return alibi_bias(jnp.asarray(self.slopes, jnp.float32)[None, :, None, None], distance)

  def fused_bias(self, q_pos, ctx):
    return ALIBI_FUSED, jnp.asarray(self.slopes, jnp.float32)[:, None], None, None


ALIBI = 'alibi'  # ALiBi's registered kind: BLOOM's positions.


@base.register(ALIBI)
class ALiBi(base.PositionScheme):
  """ALiBi: a fixed, head-specific linear penalty -m_h |i - j| on the logits. Causal models see
  only j <= i (the paper's form); bidirectional models get the symmetric variant."""

  options = {'alibi': {}}
  capabilities = base.Capabilities(
      logits_term='it adds -m|i-j| to each of the L x L attention logits', real_positions=True,
      fused_bias=True, fused_first=True, latent_cache=True)
  Layer = _ALiBiLayer


def alibi_everywhere(model_cfg) -> bool:
  """Whether every layer's positions are ALiBi's (BLOOM's, which transformers' BLOOM class
  computes)."""
  return registry.model_scheme(model_cfg) is ALiBi


# --------------------------------------------------------------------------------------------
# Learned functions of the distance: KERPLE (Chi et al. 2022) and FIRE (Li et al. 2023).


KERPLE_EPS = 0.01  # The reference's lower clamp of r1 and r2.
FIRE_EPS = 1e-6  # Added to FIRE's normaliser psi(max(L, i)), as in the reference code.


def _clamped(x: jax.Array, low: float, high: float = np.inf) -> jax.Array:
  """x clipped to [low, high] in the forward pass, with the gradient of the identity."""
  return x + jax.lax.stop_gradient(jnp.clip(x, low, high) - x)


def _kerple_log(r1, r2, distance):
  return -r1 * jnp.log1p(r2 * jnp.abs(distance))


def _kerple_power(r1, r2, distance):
  """-r1 |d|^r2 with |d|^r2 as exp(r2 ln|d|), 0 on the diagonal (a plain power's gradient in
  r2 is 0 * log 0 = NaN there)."""
  a = jnp.abs(distance)
  positive = a > 0
  return -r1 * jnp.where(positive, jnp.exp(r2 * jnp.log(jnp.where(positive, a, 1.0))), 0.0)


# KERPLE's kernels by variant, for the einsum path's [batch, heads, q, k] and the fused
# kernel's tiles alike.
KERPLE_KERNELS = {'log': _kerple_log, 'power': _kerple_power}
KERPLE_FUSED = {variant: fused_bias.Bias(f'kerple {variant}', 2,
                                          lambda p, d, q_pos, f=f: f(p[0], p[1], d))
                 for variant, f in KERPLE_KERNELS.items()}


class _KerpleLayer(base.Layer):
  """One layer's KERPLE kernel: r1, r2 [heads]."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    self.variant = variant = model_cfg.position.kerple.variant
    num_heads = model_cfg.num_heads
    # The reference's initialisation: the multiplier of the log kernel and the exponent of
    # the power kernel U(0, 2), the other parameter U(0, 1).
    r1_scale, r2_scale = (2.0, 1.0) if variant == 'log' else (1.0, 2.0)
    uniform = lambda scale: scale * jax.random.uniform(rngs.params(), (num_heads,))
    self.r1 = variables.param(uniform(r1_scale), (None,), decay=False)
    self.r2 = variables.param(uniform(r2_scale), (None,), decay=False)

  def _r(self):
    """(r1, r2) [heads], clamped (the power's exponent also to 2)."""
    high = np.inf if self.variant == 'log' else 2.0
    return (_clamped(self.r1[...].astype(jnp.float32), KERPLE_EPS),
            _clamped(self.r2[...].astype(jnp.float32), KERPLE_EPS, high))

  def logits_bias(self, q, k, q_pos, k_pos, mask, ctx):
    distance = base.relative_positions(q_pos, k_pos).astype(jnp.float32)[:, None]
    r1, r2 = (r[None, :, None, None] for r in self._r())
    return KERPLE_KERNELS[self.variant](r1, r2, distance)

  def fused_bias(self, q_pos, ctx):
    return KERPLE_FUSED[self.variant], jnp.stack(self._r(), 1), None, None


@base.register('kerple')
class Kerple(base.PositionScheme):
  """KERPLE (Chi et al. 2022): a conditionally positive definite kernel of the distance added
  to the logits, learned per layer and head,

    log:   b(i, j) = -r1 log(1 + r2 |i - j|)      power: b(i, j) = -r1 |i - j|^r2

  with r1, r2 > 0 (0 < r2 <= 2 for power, where the kernel stays conditionally positive
  definite). As the reference code does, r1 and r2 are clamped to [0.01, inf) and the power's
  exponent to [0.01, 2]. The reference projects the stored parameters after each step; here the
  forward pass clamps and passes the gradient through unchanged (straight-through), so a
  clamped parameter receives the gradient it would have at the clamp and can move back in range.
  The paper trains causal LMs (keys j <= i); bidirectional models get the same kernel of
  |i - j| on both sides, as the kernel is symmetric (as ALiBi here).
  """

  VARIANTS = ('log', 'power')
  options = {'kerple': {'variant': specs.Str(VARIANTS, default='log')}}
  capabilities = base.Capabilities(
      logits_term='it adds a learned kernel of abs(i-j) to each of the L x L attention logits',
      real_positions=True, fused_bias=True, latent_cache=True)
  Layer = _KerpleLayer

  @classmethod
  def legacy_params(cls, cfg):
    return ((r'layers/(\d+)/(.+)', r'layer:\2'),)


def _torch_linear(rngs: nnx.Rngs, d_in: int, d_out: int) -> tuple[nnx.Param, nnx.Param]:
  """Kernel and bias drawn as torch.nn.Linear draws them (U(-1/sqrt(d_in), 1/sqrt(d_in)) both),
  the initialisation FIRE's reference code gets. Not decayed: the MLP is a bias function, like
  T5's and KERPLE's bias parameters."""
  bound = d_in ** -0.5
  draw = lambda shape: jax.random.uniform(rngs.params(), shape, minval=-bound, maxval=bound)
  return (variables.param(draw((d_in, d_out)), (None, None), decay=False),
          variables.param(draw((d_out,)), (None,), decay=False))


_FIRE_PARAMS = ('hidden_kernel', 'hidden_bias', 'out_kernel', 'out_bias', 'c',
                'threshold_multiplier')


class _FireFunction(nnx.Module):
  """One FIRE function: the MLP f (1 -> width -> heads, ReLU), c and the threshold's multiplier."""

  def __init__(self, model_cfg, rngs: nnx.Rngs):
    cfg = model_cfg.position.fire
    self.hidden_kernel, self.hidden_bias = _torch_linear(rngs, 1, cfg.mlp_width)
    self.out_kernel, self.out_bias = _torch_linear(rngs, cfg.mlp_width, model_cfg.num_heads)
    self.c = variables.param(jnp.asarray(cfg.init_c, jnp.float32), (), decay=False)
    # L = |multiplier x init_threshold|: as in the reference code, a multiplier (initially 1)
    # of the fixed initial threshold is learned, so an update moves L in proportion to it.
    self.threshold_multiplier = variables.param(jnp.ones((), jnp.float32), (), decay=False)

  def arrays(self) -> dict:
    return {name: getattr(self, name)[...] for name in _FIRE_PARAMS}


def _fire_c_and_threshold(p: dict, init_threshold: float):
  return (jnp.abs(p['c'].astype(jnp.float32)),
          jnp.abs(p['threshold_multiplier'].astype(jnp.float32) * init_threshold))


def fire_input(c, threshold, distance, q_pos):
  """psi(|d|) / psi(max(L, i)), psi(x) = log(1 + c x), for distances and the query positions
  broadcast against them: the einsum path's and the fused kernel's tiles alike."""
  return jnp.log1p(c * jnp.abs(distance)) / (jnp.log1p(c * jnp.maximum(q_pos, threshold))
                                             + FIRE_EPS)


def fire_inputs(p: dict, init_threshold: float, q_pos, k_pos):
  """The MLP's input psi(i - j) / psi(max(L, i)), float32 [batch, q_len, k_len], for a FIRE
  function's arrays `p` (_FireFunction.arrays)."""
  c, threshold = _fire_c_and_threshold(p, init_threshold)
  distance = base.relative_positions(q_pos, k_pos).astype(jnp.float32)
  return fire_input(c, threshold, distance, q_pos.astype(jnp.float32)[:, :, None])


@functools.lru_cache(maxsize=None)
def fire_fused(width: int) -> fused_bias.Bias:
  """FIRE on the fused kernel, with the MLP as its linear pieces (fire_pieces). A head's
  parameters: c, L, the sorted kinks [width] (their gradient is 0: they only choose the piece,
  as ReLU's derivative), then each piece's slope and intercept [width + 1] each."""
  pieces = width + 1

  def of_distance(params, d, q_pos):
    c, threshold, kinks = params[0], params[1], params[2:2 + width]
    slopes, intercepts = params[2 + width:2 + width + pieces], params[2 + width + pieces:]
    x = fire_input(c, threshold, d, q_pos)
    piece = sum((x > kink).astype(jnp.int32) for kink in kinks)
    return sum(jnp.where(piece == s, slopes[s] * x + intercepts[s], 0.0) for s in range(pieces))
  return fused_bias.Bias(f'fire, {pieces} linear pieces', 2 + width + 2 * pieces, of_distance)


def fire_pieces(p: dict):
  """f as the piecewise-linear function it is: f(x) = b2 + sum_m W2[m] relu(w1_m x + b1_m)
  is linear between the kinks t_m = -b1_m / w1_m. Returns the sorted kinks [width] and the
  slope and intercept of each of the width + 1 pieces [width + 1, heads]: on piece s (s kinks
  below x) unit m is active iff w1_m > 0 and t_m is among those s, or w1_m < 0 and it is
  not, or w1_m = 0 and b1_m > 0. The pieces are differentiable in the MLP's parameters; which
  units are active is not (as relu's derivative)."""
  w1 = p['hidden_kernel'].astype(jnp.float32)[0]
  b1 = p['hidden_bias'].astype(jnp.float32)
  w2, b2 = p['out_kernel'].astype(jnp.float32), p['out_bias'].astype(jnp.float32)
  nonzero = w1 != 0
  kinks = jax.lax.stop_gradient(jnp.where(nonzero, -b1 / jnp.where(nonzero, w1, 1.0), jnp.inf))
  order = jnp.argsort(kinks)
  rank = jnp.argsort(order)  # Where each unit's kink falls among the sorted kinks.
  below = rank[None, :] < jnp.arange(w1.shape[0] + 1)[:, None]  # [piece, unit]
  active = jnp.where(w1 > 0, below, jnp.where(w1 < 0, ~below, b1 > 0)).astype(jnp.float32)
  return kinks[order], (active * w1) @ w2, (active * b1) @ w2 + b2


def fire_bias(p: dict, init_threshold: float, q_pos, k_pos):
  """f at every pair's input, one linear piece each: the MLP itself runs once per piece, and
  each pair costs a count of the kinks below its input, a gather and a multiply-add (no
  [batch, L, L, width] hidden activations; about 9x faster than the MLP on every pair)."""
  x = fire_inputs(p, init_threshold, q_pos, k_pos)
  kinks, slope, intercept = fire_pieces(p)
  piece = jnp.sum(x[..., None] > kinks, axis=-1)  # [batch, q_len, k_len]
  out = x[..., None] * jnp.take(slope, piece, axis=0) + jnp.take(intercept, piece, axis=0)
  return jnp.moveaxis(out, -1, 1)


# 'bias' in the names: a bias function, spared by weight decay like T5's bias tables.
class _FireShared(base.Shared):
  """The function every layer uses, with `fire.shared_across_layers`."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    if model_cfg.position.fire.shared_across_layers:
      self.bias_function = _FireFunction(model_cfg, rngs)

  def __call__(self):
    return self.bias_function.arrays() if hasattr(self, 'bias_function') else None


class _FireLayer(base.Layer):
  """This layer's FIRE function, or the shared one (`ctx`)."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    cfg = model_cfg.position.fire
    self.init_threshold = float(cfg.init_threshold)
    if not cfg.shared_across_layers:
      self.bias_function = _FireFunction(model_cfg, rngs)

  def arrays(self, ctx=None) -> dict:
    """The FIRE function's arrays: this layer's, or the shared ones (`ctx`)."""
    return self.bias_function.arrays() if hasattr(self, 'bias_function') else ctx

  def inputs(self, q_pos, k_pos, ctx=None):
    """The MLP's inputs at every pair (fire_inputs), e.g. to plot the learned function."""
    return fire_inputs(self.arrays(ctx), self.init_threshold, q_pos, k_pos)

  def pieces(self, ctx=None):
    return fire_pieces(self.arrays(ctx))

  def logits_bias(self, q, k, q_pos, k_pos, mask, ctx):
    return fire_bias(self.arrays(ctx), self.init_threshold, q_pos, k_pos)

  def fused_bias(self, q_pos, ctx):
    """c, L, the kinks (shared by the heads) and each head's slopes and intercepts."""
    p = self.arrays(ctx)
    c, threshold = _fire_c_and_threshold(p, self.init_threshold)
    kinks, slope, intercept = fire_pieces(p)
    heads, width = slope.shape[1], kinks.shape[0]
    shared = lambda x, n: jnp.broadcast_to(x, (heads, n))
    params = jnp.concatenate([shared(c, 1), shared(threshold, 1), shared(kinks, width), slope.T,
                              intercept.T], axis=1)
    return fire_fused(width), params, None, None


@base.register('fire')
class Fire(base.PositionScheme):
  """FIRE (Li et al. 2023): a learned function of the distance, normalised by the query
  position,

    b(i, j) = f(psi(i - j) / psi(max(L, i))),   psi(x) = log(c |x| + 1),

  with f an MLP from one input to one output per head (`fire.mlp_width` hidden ReLU units, 32
  in the paper), c and the threshold L learned (L = |m x init_threshold| with the multiplier m
  learned from 1, as the reference code does; c from `fire.init_c`; 1e-6 is added to the
  normaliser as there). For queries below L every row shares psi(L) and the inputs depend on
  i - j alone; above it every (i, j) has its own input, and L is learned, so f is needed at
  every pair. Since f is piecewise linear in its scalar input, it is evaluated once per linear
  piece (at most mlp_width + 1) and each pair takes its piece's slope and intercept:
  O(L^2 x mlp_width) comparisons and O(L^2 x heads) arithmetic per layer and batch row, no
  hidden activations. Causal only: max(L, i) normalises by the query's prefix, which a key
  after the query would leave. One function per layer (`fire.shared_across_layers` shares one).
  """

  options = {'fire': {  # The paper's values.
      'mlp_width': specs.Int(1, 4096, default=32),
      'init_c': specs.Float(0, 1e6, min_open=True, default=0.1),
      'init_threshold': specs.Float(0, 1e12, min_open=True, default=512.0),
      'shared_across_layers': specs.Bool(default=False)}}
  capabilities = base.Capabilities(
      causal_only=True,
      logits_term='it adds a learned function of (i-j, i) to each of the L x L attention logits',
      real_positions=True, fused_bias=True, latent_cache=True)
  causal_reason = ('it normalises the distance by the query position max(L, i), which bounds '
                   'only the keys before the query')
  Shared, Layer = _FireShared, _FireLayer
  FUSED_WIDTH = 64  # The fused kernel loops over the linear pieces in every tile.

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    if model_cfg.attention_impl == 'pallas' and cfg.fire.mlp_width > cls.FUSED_WIDTH:
      raise errors.ConfigError(
          f'config.model.position.fire.mlp_width={cfg.fire.mlp_width} on attention_impl='
          f"'pallas': the fused kernel loops over its {cfg.fire.mlp_width + 1} linear pieces in "
          f'every tile, so it takes at most {cls.FUSED_WIDTH} units. Fix: a narrower MLP, or '
          '--config.model.attention_impl=auto.')

  @classmethod
  def legacy_params(cls, cfg):
    if cfg.fire.shared_across_layers:
      return ((r'bias_functions/0/(.+)', r'bias_function/\1'),)
    return ((r'bias_functions/(\d+)/(.+)', r'layer:bias_function/\2'),)
