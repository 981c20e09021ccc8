"""Multi-head attention: masks and one entry point with selectable implementations.

`impl='einsum'` is an explicit einsum/softmax path that supports every position scheme and is the
fastest on CPU. `impl='xla'` or `'cudnn'` call `jax.nn.dot_product_attention` (cuDNN flash attention
on GPU), for schemes without a value term; an additive logits bias is passed as its `bias`.
"""

import jax
import jax.numpy as jnp

from roformer import errors

IMPLEMENTATIONS = ('einsum', 'xla', 'cudnn')


def make_mask(q_segment_ids: jax.Array, k_segment_ids: jax.Array, *, causal: bool,
              q_index: jax.Array | None = None, k_index: jax.Array | None = None) -> jax.Array:
  """Boolean mask [batch, 1, q_len, k_len]: True where query i may attend to key j.

  Tokens attend only within their own packed segment (segment id 0 is padding and attends to
  nothing). With `causal`, query i sees keys j <= i, compared by sequence index (`q_index`,
  `k_index`, default arange), which for a cache is the absolute slot.
  """
  mask = (q_segment_ids[:, :, None] == k_segment_ids[:, None, :]) & (
      q_segment_ids[:, :, None] > 0)
  if causal:
    if q_index is None:
      q_index = jnp.arange(q_segment_ids.shape[1])[None]
    if k_index is None:
      k_index = jnp.arange(k_segment_ids.shape[1])[None]
    mask &= q_index[:, :, None] >= k_index[:, None, :]
  return mask[:, None]


def attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *,
           bias: jax.Array | None = None, scale: float | None = None,
           impl: str = 'einsum') -> tuple[jax.Array, jax.Array | None]:
  """Scaled dot-product attention.

  Args:
    q: [batch, q_len, heads, head_dim]; k, v: [batch, k_len, heads, head_dim].
    mask: bool, broadcastable to [batch, heads, q_len, k_len].
    bias: optional float additive logits bias, broadcastable like mask.
    scale: logits scale, default 1/sqrt(head_dim).
    impl: one of IMPLEMENTATIONS.
  Returns:
    (output [batch, q_len, heads, head_dim], probabilities [batch, heads, q_len, k_len] for the
    einsum path, None otherwise). Fully masked rows average the values instead of giving NaN.
  """
  if scale is None:
    scale = q.shape[-1] ** -0.5
  if impl == 'einsum':
    logits = jnp.einsum('bqhd,bkhd->bhqk', q * jnp.asarray(scale, q.dtype), k,
                        preferred_element_type=jnp.float32)
    if bias is not None:
      logits = logits + bias.astype(jnp.float32)
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    return jnp.einsum('bhqk,bkhd->bqhd', probs, v), probs
  if impl in ('xla', 'cudnn'):
    if bias is not None and impl == 'cudnn':  # cuDNN wants a full bias in the input dtype;
      bias = jnp.broadcast_to(  # XLA adds a float32 bias to float32 logits, like einsum.
          bias, (q.shape[0], q.shape[2], q.shape[1], k.shape[1])).astype(q.dtype)
    out = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=scale,
                                       implementation=impl)
    return out, None
  raise errors.ConfigError(f'config.model.attention_impl={impl!r} is unknown. Fix: choose one of '
                   f'{IMPLEMENTATIONS}.')
