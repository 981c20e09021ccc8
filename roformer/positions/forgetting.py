"""Data-dependent decay: the Forgetting Transformer (FoX, Lin et al., ICLR 2025).

Each head has a forget gate per token, f_t = sigmoid(w . x_t + b), computed from the layer's
(normed) input, and query i's logit for key j gains

  D_ij = sum_{l=j+1..i} log f_l        (0 on the diagonal),

so that a key's weight is multiplied by the product of the gates of the tokens after it: what
the gates close, attention forgets. With c_t = sum_{l<=t} log f_l (one cumulative sum per row),
D_ij = c_i - c_j: the bias costs one [L, L] difference per head, like any additive bias, and no
[L, L, anything] tensor.

The gate is one linear layer from d_model to the heads (weights N(0, 1/d_model) as every
projection here, bias `fox.gate_bias_init`, 0 as in the paper's reference code: every gate
starts near 1/2). Causal only: D_ij sums the gates between key and query.

Packed rows need no reset of the sum: keys of another segment are masked, and within a segment
c_i - c_j has the same value wherever the segment starts. The key/value cache holds each slot's
c_t per head ([batch, slots, heads], float32): a new token's c is the last filled slot's plus
its own cumulative sum. In float32, c_i - c_j is exact to about |c_i| x 6e-8; |c| grows with
the length at up to |log f| per token, and where it is large the bias is large and negative
anyway (a gate of 1/2 gives -0.69 per token).
"""

import jax
import jax.numpy as jnp

from roformer import fused_bias
from roformer import specs
from roformer import variables
from roformer.positions import base


def forgetting_bias(log_f: jax.Array) -> jax.Array:
  """FoX's bias from the log forget values `log_f` [..., L] (each <= 0): [..., L, L] with
  entry (i, j) = sum_{l=j+1..i} log_f[l] for j <= i, and -inf above the diagonal (masked)."""
  c = jnp.cumsum(log_f.astype(jnp.float32), axis=-1)
  bias = c[..., :, None] - c[..., None, :]
  length = log_f.shape[-1]
  below = jnp.arange(length)[:, None] >= jnp.arange(length)[None, :]
  return jnp.where(below, bias, -jnp.inf)


class _ForgetLayer(base.Layer):
  """One layer's forget gates: a projection of the layer's input to one logit per head."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    d, heads = model_cfg.d_model, model_cfg.num_heads
    self.num_heads = heads
    kernel = jax.random.normal(rngs.params(), (d, heads), jnp.float32) * d ** -0.5
    self.gate_kernel = variables.param(kernel, ('embed', None), decay=True)
    self.gate_bias = variables.param(
        jnp.full((heads,), model_cfg.position.fox.gate_bias_init, jnp.float32), (None,),
        decay=False)

  def log_forget(self, x: jax.Array) -> jax.Array:
    """log f_t per token and head: [batch, len, heads], float32."""
    z = jnp.einsum('bld,dh->blh', x.astype(jnp.float32), self.gate_kernel[...]) + self.gate_bias[...]
    return jax.nn.log_sigmoid(z)

  def prepare(self, x, positions, shared):
    """The cumulative sums c_t of the row ([batch, len, heads]) for queries and keys."""
    del positions, shared
    c = jnp.cumsum(self.log_forget(x), axis=1)
    return {'queries': c, 'keys': c}

  def cache_state(self, batch: int, max_len: int):
    return jnp.zeros((batch, max_len, self.num_heads), jnp.float32)

  def extend_cache(self, ctx, state, index):
    """Continues the sums from the last filled slot, writes the new tokens' at `index`."""
    last = jax.lax.dynamic_slice_in_dim(state, jnp.maximum(index - 1, 0), 1, axis=1)
    c = ctx['queries'] + jnp.where(index > 0, last, 0.0)
    state = jax.lax.dynamic_update_slice_in_dim(state, c, index, axis=1)
    return {'queries': c, 'keys': state}, state

  def logits_bias(self, q, k, q_pos, k_pos, mask, ctx):
    """c_i - c_j per head: [batch, heads, q_len, k_len] (entries above the diagonal are left
    to the mask)."""
    del q, k, q_pos, k_pos, mask
    queries = jnp.transpose(ctx['queries'], (0, 2, 1))
    keys = jnp.transpose(ctx['keys'], (0, 2, 1))
    return queries[..., :, None] - keys[..., None, :]

  def fused_bias(self, q_pos, ctx):
    """c_i - c_j as the kernel's row and column values [batch, heads, len]."""
    del q_pos
    return (fused_bias.SEPARABLE, None, jnp.transpose(ctx['queries'], (0, 2, 1)),
            jnp.transpose(ctx['keys'], (0, 2, 1)))


@base.register('fox')
class Forgetting(base.PositionScheme):
  """The Forgetting Transformer's forget gates (see the module docstring): no other position
  signal; with RoPE as `rope+fox`."""

  options = {'fox': {'gate_bias_init': specs.Float(-20.0, 20.0, default=0.0)}}
  capabilities = base.Capabilities(
      causal_only=True, reads_positions=False, bias_only=True,
      logits_term='it adds each head\'s cumulative log forget gates between key and query',
      fused_bias=True, fused_first=True, latent_cache=True)
  causal_reason = 'the bias of key j sums the forget gates of the tokens from j + 1 to the query'
  Layer = _ForgetLayer

