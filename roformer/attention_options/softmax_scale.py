"""A set factor of the attention logits (`attention.softmax_scale`): q.k times `softmax_scale_value`
in place of q.k / sqrt(head_dim). Granite 3 trains with 1/head_dim (`attention_multiplier`), as muP
scales attention (Yang et al. 2022, "Tensor Programs V"), and MPT's `softmax_scale` is the same
factor. Like `attention.logit_scale`, it
multiplies the rotated queries by softmax_scale_value * sqrt(head_dim), which every kernel then
scales by 1 / sqrt(head_dim): the same product on every implementation, and the scheme's bias left
unscaled, as those classes leave it.
"""

import jax.numpy as jnp

from roformer.attention_options import base
from roformer.specs import Float


@base.register
class SoftmaxScale(base.AttentionOption):
  field = 'softmax_scale'
  paper = 'Yang et al. 2022'
  about = 'q.k times softmax_scale_value in place of 1 / sqrt(head_dim)'
  specs = {'softmax_scale_value': Float(0, 1e6, min_open=True, default=0.125)}
  excludes = (('logit_scale', 'sets the same factor of q.k (give one)'),)
  # GraniteConfig's attention_multiplier, MptConfig's attn_config.softmax_scale, and DeepSeek-V3's
  # and V2's scaling's mscale_all_dim (which roformer/hf_deepseek.py derives from
  # `softmax_scale`).
  transformers_families = ('granite', 'mpt', 'deepseek_v3', 'deepseek_v2')

  def transformers_fields(self, att, family: str) -> dict:
    named = ('mpt', 'deepseek_v3', 'deepseek_v2')
    return {'softmax_scale' if family in named else 'attention_multiplier':
            att.softmax_scale_value}

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    module.query_factor = float(att.softmax_scale_value) * module.head_dim ** 0.5

  def queries(self, module, q, pos):
    return (q * jnp.float32(module.query_factor)).astype(q.dtype)
