"""Additive biases: a function of the distance i - j added to every attention logit, learned
(T5, Raffel et al. 2020) or fixed (ALiBi, Press et al. 2022)."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer import errors
from roformer.positions import base


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


@base.register('t5')
class T5Bias(base.PositionScheme):
  """T5 relative attention bias: a learned scalar per (bucket, head), added to the logits; one
  table shared by all layers unless `shared_across_layers` is False."""

  fields = ('t5',)
  defaults = {'t5': {'num_buckets': 32, 'max_distance': 128, 'shared_across_layers': True}}

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


class _T5Layer(base.PositionScheme):

  def __init__(self, scheme: T5Bias, table: nnx.Param):
    self.scheme, self.table = scheme, table

  def logits_bias(self, q, k, q_pos, k_pos, mask=None):
    del mask  # The bias does not depend on which keys are visible.
    s = self.scheme
    buckets = t5_buckets(-base.relative_positions(q_pos, k_pos), bidirectional=s.bidirectional,
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


@base.register('alibi')
class ALiBi(base.PositionScheme):
  """ALiBi: a fixed, head-specific linear penalty -m_h |i - j| on the logits. Causal models see
  only j <= i (the paper's form); bidirectional models get the symmetric variant."""

  fields = ('alibi',)
  defaults = {'alibi': {}}

  def __init__(self, model_cfg, *, causal, rngs):
    del causal, rngs
    self.slopes = tuple(float(m) for m in alibi_slopes(model_cfg.num_heads))

  def logits_bias(self, q, k, q_pos, k_pos, mask=None):
    del mask  # The bias does not depend on which keys are visible.
    distance = jnp.abs(base.relative_positions(q_pos, k_pos)).astype(jnp.float32)[:, None]
    return -jnp.asarray(self.slopes, jnp.float32)[None, :, None, None] * distance
