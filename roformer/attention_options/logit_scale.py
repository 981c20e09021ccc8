"""Logits scaled by another width (`attention.logit_scale`; Gemma 2 and 3's
`query_pre_attn_scalar`): q.k / sqrt(`logit_scale_dim`) in place of q.k / sqrt(head_dim). Gemma 2
27B and Gemma 3 27B scale by hidden_size / heads (144, 168) with heads 128 wide. It multiplies
the rotated queries by sqrt(head_dim / logit_scale_dim), which every kernel then scales by
1 / sqrt(head_dim): the same product, on every implementation, and the scheme's bias unscaled as
Gemma's attention leaves it.
"""

import jax.numpy as jnp

from roformer.attention_options import base
from roformer.specs import Int


@base.register
class LogitScale(base.AttentionOption):
  field = 'logit_scale'
  paper = 'Gemma 2'
  about = 'q.k / sqrt(logit_scale_dim) in place of sqrt(head_dim)'
  specs = {'logit_scale_dim': Int(1, 2**20, default=256)}
  # query_pre_attn_scalar.
  transformers_families = ('gemma2', 'gemma3')

  def transformers_fields(self, att, family: str) -> dict:
    del family  # The same name in each.
    return {'query_pre_attn_scalar': att.logit_scale_dim}

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    module.query_factor = (module.head_dim / att.logit_scale_dim) ** 0.5

  def queries(self, module, q, pos):
    return (q * jnp.float32(module.query_factor)).astype(q.dtype)
