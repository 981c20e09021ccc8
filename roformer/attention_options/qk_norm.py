"""QK-norm (`attention.qk_norm`): RMSNorm of each head's queries and keys, with a learned scale
per dimension shared by the heads, before the cache and any rotation, so that cached keys are
normed keys (Dehghani et al. 2023, "Scaling Vision Transformers to 22 Billion Parameters").
"""

import jax.numpy as jnp

from roformer import attention
from roformer import variables
from roformer.attention_options import base


@base.register
class QKNorm(base.AttentionOption):
  field = 'qk_norm'
  paper = 'Dehghani et al. 2023'
  about = "RMSNorm of each head's queries and keys"

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    module.q_scale, module.k_scale = (
        variables.param(jnp.ones((module.head_dim,), jnp.float32), (None,), decay=False)
        for _ in range(2))

  def queries_keys(self, module, q, k):
    return attention.rms_norm(q, module.q_scale[...]), attention.rms_norm(k, module.k_scale[...])
