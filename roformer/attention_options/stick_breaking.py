"""Stick-breaking attention (`attention.kind='stick_breaking'`; Tan et al., ICLR 2025,
"Scaling Stick-Breaking Attention"): sigmoid weights from the logits, each query's stick broken
from its nearest key outwards, with no softmax and no normalisation. Causal LMs. On the einsum
path in causal blocks (roformer/attention.py's `over_causal_blocks`) where no value term needs
the weights; with attention_impl='pallas', on the kernels of roformer/fused_stick_breaking.py,
which never form the weights.
"""

import jax
import jax.numpy as jnp

from roformer import attention
from roformer import fused_stick_breaking
from roformer.attention_options import base
from roformer.specs import Bool


def stick_breaking_attend(logits: jax.Array, v: jax.Array, mask: jax.Array, *,
                          attend_current: bool, query_slots: jax.Array | None = None
                          ) -> tuple[jax.Array, jax.Array]:
  """sum_j A_ij v_j with A the stick-breaking weights of `logits` [batch, heads, q_len, k_len]
  (scaled, biases added); what is left of the stick (1 - sum_j A_ij) weighs no value. Returns
  (output [batch, q_len, heads, head_dim], the weights) as `attend_logits` does."""
  weights = attention.stick_breaking_weights(logits, attend_current, mask, query_slots).astype(
      v.dtype)
  return jnp.einsum('bhqk,bkhd->bqhd', weights, v), weights


def stick_breaking(q, k, v, mask, bias, *, attend_current: bool, causal_block: int = 0,
                   window: int = 0, query_slots: jax.Array | None = None
                   ) -> tuple[jax.Array, jax.Array | None]:
  """`stick_breaking_attend` of q.k/sqrt(d) + bias, as `attend` is for the softmax: with
  0 < `causal_block` < q_len (a causal self-attention without a cache, or a prompt filling its
  own: `Site.block_rows`), without the blocks above the diagonal; each run of at most
  `causal_block` queries computes its logits, weights and weighted values over the keys up to
  its last row only (from the first key its window sees, with a sliding `window`). Exact: a key after the query, like any masked key, neither
  takes nor breaks its stick. `query_slots` (the queries' cache slots) is for the whole
  matrix: the blocks are a full causal pass, slots 0..q_len-1. Returns (output [batch, q_len,
  heads, head_dim], the weights, or None from the blocks)."""
  if 0 < causal_block < q.shape[1]:
    block = lambda q, k, v, mask, bias: stick_breaking_attend(
        attention.scaled_logits(q, k, bias), v, mask, attend_current=attend_current)[0]
    return attention.over_causal_blocks(block, q, k, v, mask, bias, causal_block, window), None
  return stick_breaking_attend(attention.scaled_logits(q, k, bias), v, mask,
                               attend_current=attend_current, query_slots=query_slots)


@base.register
class StickBreaking(base.AttentionKind):
  name = 'stick_breaking'
  about = 'stick-breaking weights (Tan et al. 2025)'
  has = frozenset({'logits', 'head_outputs', 'mask'})
  implementations = ('einsum', 'pallas')
  model_flag = 'decoder_only'
  # A query may attend to its own token (the product then runs to it).
  specs = {'attend_current': Bool(default=False)}

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    del cfg, caps, rngs, dtype
    module.attend_current = att.attend_current

  def attend(self, module, q, k, v, mask, site: base.Site):
    slots = site.first_slot + jnp.arange(q.shape[1])
    fused = site.fused_inputs(module)
    if fused:
      bias, params, row, col = fused
      return fused_stick_breaking.attend(
          q, k, v, site.pos, site.segments, bias, params=params, row=row, col=col,
          attend_current=module.attend_current, window=module.window), None
    if module.computes_logits:
      return stick_breaking_attend(
          site.position.logits(q, k, site.pos, site.k_pos, mask, site.ctx), v, mask,
          attend_current=module.attend_current, query_slots=slots)
    no_blocks = module.value_term or module.record_probs
    return stick_breaking(
        q, k, v, mask, site.position.logits_bias(q, k, site.pos, site.k_pos, mask, site.ctx),
        attend_current=module.attend_current,
        causal_block=0 if no_blocks else site.block_rows(module, q.shape[1]),
        window=module.window,
        query_slots=slots)

  def sees_itself(self, module) -> bool:
    return module.attend_current
