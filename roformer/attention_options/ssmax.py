"""Scalable-Softmax (`attention.ssmax`; Nakanishi 2025, "Scalable-Softmax Is Superior for
Attention"): each query's logits times s_h log n_i, n_i the keys query i sees (its row of the
mask) and s_h learned per head from `ssmax_init` (the paper's 0.43), so that attention does not
flatten as the context grows. Softmax attention; on a kernel the factor scales the queries and
the bias, which is the same product.
"""

import jax
import jax.numpy as jnp

from roformer import variables
from roformer.attention_options import base
from roformer.specs import Float


def ssmax_factor(scale: jax.Array, mask: jax.Array) -> jax.Array:
  """Scalable-Softmax's factor s_h log n_i [batch or 1, heads, q_len]: n_i is the number of keys
  query i may see (its row of the mask), s_h the head's learned scale."""
  n = jnp.sum(mask, axis=-1, dtype=jnp.float32)  # [batch or 1, 1 or heads, q_len]
  return scale.astype(jnp.float32)[None, :, None] * jnp.log(jnp.maximum(n, 1.0))


@base.register
class SSMax(base.AttentionOption):
  field = 'ssmax'
  paper = 'Nakanishi 2025'
  about = 'logits times s_h log n (Scalable-Softmax)'
  specs = {'ssmax_init': Float(0, 100, min_open=True, default=0.43)}
  needs = ('softmax',)
  not_on = ('pallas',)  # The fused kernel adds its bias unscaled; the factor would scale it too.

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    module.ssmax_scale = variables.param(
        jnp.full((cfg.num_heads,), att.ssmax_init, jnp.float32), (None,), decay=False)

  def logits_factor(self, module, mask):
    return ssmax_factor(module.ssmax_scale[...], mask)
