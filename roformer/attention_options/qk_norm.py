"""QK-norm (`attention.qk_norm`): RMSNorm of each head's queries and keys, with a learned scale
per dimension shared by the heads, before the cache and any rotation, so that cached keys are
normed keys (Dehghani et al. 2023, "Scaling Vision Transformers to 22 Billion Parameters"). Its
epsilon, `qk_norm_eps`, is the file's rms_norm_eps in an imported Qwen3 or Gemma 3
(roformer/hf_config.py).
"""

import jax.numpy as jnp

from roformer import attention
from roformer import variables
from roformer.attention_options import base
from roformer.specs import Float


@base.register
class QKNorm(base.AttentionOption):
  field = 'qk_norm'
  paper = 'Dehghani et al. 2023'
  about = "RMSNorm of each head's queries and keys"
  specs = {'qk_norm_eps': Float(0, 1, min_open=True, default=1e-6)}
  transformers_families = ('qwen3', 'gemma3')  # q_norm and k_norm, with the blocks' rms_norm_eps.

  def transformers_refusal(self, model_cfg, att) -> str:
    if att.qk_norm_eps == model_cfg.layer_norm_eps:
      return ''
    return (f'QK-norm with its own epsilon (attention.qk_norm_eps={att.qk_norm_eps}, '
            f'layer_norm_eps={model_cfg.layer_norm_eps}): Qwen3 and Gemma 3 have one '
            'rms_norm_eps for both. Fix: train with --config.model.attention.qk_norm_eps equal '
            'to model.layer_norm_eps')

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    module.q_scale, module.k_scale = (
        variables.param(jnp.ones((module.head_dim,), jnp.float32), (None,), decay=False)
        for _ in range(2))
    module.qk_norm_eps = float(att.qk_norm_eps)

  def queries_keys(self, module, q, k):
    eps = module.qk_norm_eps
    return (attention.rms_norm(q, module.q_scale[...], eps),
            attention.rms_norm(k, module.k_scale[...], eps))
