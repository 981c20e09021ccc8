"""Contextual positions: CoPE (Golovneva et al. 2024), where a query's distance to a key counts
the keys in between that the query's gates select, instead of every token."""

import jax
import jax.numpy as jnp

from roformer import specs
from roformer import variables
from roformer.positions import base


def causal_mask(q_len: int, k_len: int) -> jax.Array:
  """[1, 1, q_len, k_len]: query i (the last q_len of the k_len slots) sees keys 0..its slot."""
  slots = k_len - q_len + jnp.arange(q_len)
  return (jnp.arange(k_len)[None, :] <= slots[:, None])[None, None]


class _CoPELayer(base.Layer):
  """One layer's position embeddings e[0..max_position], [max_position + 1, head_dim], shared
  by the heads (the reference folds the heads into the batch). They start at zero."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal, rngs
    self.max_position = max_position = model_cfg.position.cope.max_position
    self.embeddings = variables.param(
        jnp.zeros((max_position + 1, base.head_dim(model_cfg)), jnp.float32), (None, None),
        decay=True)

  def positions(self, q, k, mask=None):
    """p_ij = sum_{t=j..i} g_it with g_it = sigmoid(q_i . k_t / sqrt(d)) over the keys the
    mask lets query i see (the others add no gate), clipped at max_position: float32
    [batch, heads, q_len, k_len]. Keys are ordered by slot: positions count along the sequence
    (the cache's slots when decoding), restarting in each packed segment through the mask."""
    if mask is None:
      mask = causal_mask(q.shape[1], k.shape[1])
    logits = jnp.einsum('bqhd,bkhd->bhqk', q, k, preferred_element_type=jnp.float32)
    gates = jnp.where(mask, jax.nn.sigmoid(logits * q.shape[-1] ** -0.5), 0.0)
    counts = jax.lax.cumsum(gates, axis=3, reverse=True)  # Sum over t >= j (t <= i: masked).
    return jnp.minimum(counts, float(self.max_position))

  def logits_bias(self, q, k, q_pos, k_pos, mask, ctx):
    """q_i . e[p_ij] / sqrt(d), e interpolated linearly between the integers around p_ij.
    q_i . e[p] is computed for every integer p ([batch, heads, q_len, max_position + 1]) and
    then gathered and interpolated, so no [q_len, k_len, head_dim] tensor is formed. Scaled by
    1/sqrt(d) like q . k: the reference adds q . e to q . k before dividing both (the paper's
    listing adds it after, an option of the reference code)."""
    del q_pos, k_pos  # Contextual positions come from the gates, not from token counts.
    p = self.positions(q, k, mask)
    per_position = jnp.einsum('bqhd,pd->bhqp', q.astype(jnp.float32),
                              self.embeddings[...].astype(jnp.float32))
    floor = jnp.floor(p)
    below = jnp.take_along_axis(per_position, floor.astype(jnp.int32), axis=-1)
    above = jnp.take_along_axis(per_position, jnp.ceil(p).astype(jnp.int32), axis=-1)
    weight = p - floor  # Differentiable in the gates; floor and ceil are not.
    return (below * (1.0 - weight) + above * weight) * q.shape[-1] ** -0.5


@base.register('cope')
class CoPE(base.PositionScheme):
  """CoPE (Golovneva et al. 2024): gates g_ij = sigmoid(q_i . k_j) decide which keys count;
  the contextual position of key j for query i is p_ij = sum_{t=j..i} g_it (fractional, clipped
  at `cope.max_position`), and the logit gains q_i . e[p_ij], with e a learned embedding per
  integer position 0..max_position interpolated linearly in between,
  e[p] = (p - floor p) e[ceil p] + (1 - p + floor p) e[floor p] (eq. 3-5).

  As in the reference code (facebookresearch/RAM, projects/cope): gates read q . k / sqrt(d);
  the embeddings start at zero, one table per layer shared by its heads; masked keys (other
  segments, padding, unfilled cache slots, future keys) have no gate. Causal only: p_ij sums
  the gates from j to i. Cost per layer: one more q . k product and a [L, max_position + 1]
  product per head, then O(L^2) gathers; no [L, L, d] tensor.
  """

  options = {'cope': {'max_position': specs.Int(1, 2**20, default=64)}}  # Clipped at it.
  capabilities = base.Capabilities(
      causal_only=True, reads_positions=False,
      logits_term='it adds q_i.e[p_ij] with p_ij a sum of gates sigmoid(q_i.k_t) over the L x L '
      'pairs')
  causal_reason = "a key's contextual position sums the gates of the keys from it up to the query"
  Layer = _CoPELayer

  @classmethod
  def legacy_params(cls, cfg):
    return ((r'layers/(\d+)/(.+)', r'layer:\2'),)
