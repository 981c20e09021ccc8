"""Relative schemes with learned or projected relative embeddings that enter the logits
through the queries (and, for Shaw, the values): Shaw et al. 2018 and Transformer-XL (Dai et al.
2019)."""

import jax.numpy as jnp
from flax import nnx

from roformer import errors
from roformer import specs
from roformer import variables
from roformer.positions import absolute
from roformer.positions import base


class _ShawLayer(base.Layer):
  """One layer's Shaw tables a^K and a^V: (2k+1) x head_dim each, shared by the heads."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    self.k = max_distance = model_cfg.position.shaw.max_distance
    head_dim = base.head_dim(model_cfg)
    init = nnx.initializers.normal(stddev=head_dim ** -0.5)
    rows = 2 * max_distance + 1
    self.keys = variables.param(init(rngs.params(), (rows, head_dim)), (None, None), decay=True)
    self.values = variables.param(init(rngs.params(), (rows, head_dim)), (None, None),
                                  decay=True)

  def _bucket(self, q_pos, k_pos):
    """Clipped relative position j - i shifted to a row index in [0, 2k]."""
    return jnp.clip(-base.relative_positions(q_pos, k_pos), -self.k, self.k) + self.k

  def logits_bias(self, q, k, q_pos, k_pos, mask, ctx):
    # q . a^K for each of the 2k+1 distances ([b, h, L, 2k+1]), then gathered to [b, h, L, L].
    per_row = jnp.einsum('bqhd,rd->bhqr', q, self.keys[...].astype(q.dtype),
                         preferred_element_type=jnp.float32)
    index = jnp.broadcast_to(self._bucket(q_pos, k_pos)[:, None],
                             per_row.shape[:3] + (k_pos.shape[1],))
    return jnp.take_along_axis(per_row, index, axis=-1) * q.shape[-1] ** -0.5

  def value_term(self, probs, q_pos, k_pos, ctx):
    # Sum the probabilities that fall on each clipped distance ([b, h, L, 2k+1], a scatter-add
    # over the L x L probabilities), then one matmul with a^V: never an L x L x d tensor.
    b, h, lq, _ = probs.shape
    index = self._bucket(q_pos, k_pos)[:, None]
    weights = jnp.zeros((b, h, lq, 2 * self.k + 1), jnp.float32).at[
        jnp.arange(b)[:, None, None, None], jnp.arange(h)[None, :, None, None],
        jnp.arange(lq)[None, None, :, None], index].add(probs.astype(jnp.float32))
    out = jnp.einsum('bhqr,rd->bqhd', weights, self.values[...].astype(jnp.float32))
    return out.astype(probs.dtype)


@base.register('shaw')
class Shaw(base.PositionScheme):
  """Shaw et al. 2018: learned relative position embeddings for keys and values, distances
  clipped at k = `max_distance`, one pair of (2k+1)-row tables per layer shared by all heads."""

  options = {'shaw': {'max_distance': specs.Int(1, 2**16, default=16)}}
  capabilities = base.Capabilities(
      logits_term='it adds q_i.r(i-j) to each logit and a value term weighted by the '
      'probabilities', value_term=True)
  Layer = _ShawLayer

  @classmethod
  def legacy_params(cls, cfg):
    return ((r'layers/(\d+)/(.+)', r'layer:\2'),)


class _XLShared(base.Shared):
  """The paper's global content and position biases u, v, shared by every layer (no weight
  decay, like other biases)."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    h, hd = model_cfg.num_heads, base.head_dim(model_cfg)
    init = nnx.initializers.normal(stddev=0.02)
    self.u_bias = variables.param(init(rngs.params(), (h, hd)), (None, None), decay=False)
    self.v_bias = variables.param(init(rngs.params(), (h, hd)), (None, None), decay=False)

  def __call__(self):
    return {'u': self.u_bias[...], 'v': self.v_bias[...]}


class _XLLayer(base.Layer):
  """One layer's Transformer-XL relative terms: its projection W_R, with the shared u, v."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    d, h, hd = model_cfg.d_model, model_cfg.num_heads, base.head_dim(model_cfg)
    self.d_model, self.base = d, float(model_cfg.position.xl.base)
    w_r = nnx.initializers.normal(stddev=d ** -0.5)(rngs.params(), (d, h, hd))
    self.w_r = variables.param(w_r, (None, None, None), decay=True)

  def logits_bias(self, q, k, q_pos, k_pos, mask, ctx):
    """(b) + (c) + (d) of Dai et al. 2019, eq. 3 (term (a), q . k, is the attention itself):
    (b) q_i . W_R R_{i-j}, (c) u . k_j, (d) v . W_R R_{i-j}, with R the sinusoidal encoding of
    the distance i - j. The relative shift is a gather from the 2M-1 distances |i - j| < M,
    M = max(q_len, k_len). That covers every pair that can attend: positions restart at 0 in
    each packed segment (< L), and a decoding query at cache slot p sees keys at 0..p."""
    m = max(q.shape[1], k.shape[1])
    distances = jnp.arange(-(m - 1), m)
    rel = jnp.einsum('rm,mhd->rhd', absolute.sinusoidal_table(distances, self.d_model, self.base),
                     self.w_r[...].astype(jnp.float32))  # [2M-1, heads, head_dim]
    qv = q.astype(jnp.float32) + ctx['v'].astype(jnp.float32)
    per_distance = jnp.einsum('bqhd,rhd->bhqr', qv, rel)  # (b) + (d) for every distance.
    index = jnp.clip(base.relative_positions(q_pos, k_pos), -(m - 1), m - 1) + (m - 1)
    index = jnp.broadcast_to(index[:, None], per_distance.shape[:3] + (k.shape[1],))
    bd = jnp.take_along_axis(per_distance, index, axis=-1)
    c = jnp.einsum('hd,bkhd->bhk', ctx['u'].astype(jnp.float32), k.astype(jnp.float32))
    return (bd + c[:, :, None, :]) * q.shape[-1] ** -0.5


@base.register('xl')
class TransformerXL(base.PositionScheme):
  """Transformer-XL relative attention (Dai et al. 2019): sinusoidal relative encodings, a
  projection W_R per layer, and global content/position biases u, v shared by all layers."""

  options = {'xl': {'base': specs.Float(1, 1e12, min_open=True, default=10000.0)}}
  capabilities = base.Capabilities(
      logits_term='it adds content- and position-dependent terms to each of the L x L logits')
  Shared, Layer = _XLShared, _XLLayer

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    if model_cfg.d_model % 2:
      raise errors.ConfigError(f'config.model.d_model={model_cfg.d_model} must be even for xl.')

  @classmethod
  def legacy_params(cls, cfg):
    return ((r'w_r/(\d+)', 'layer:w_r'),)
