"""QK-norm (`attention.qk_norm`): RMSNorm of the queries and keys before the cache and any
rotation, so that cached keys are normed keys (Dehghani et al. 2023, "Scaling Vision Transformers
to 22 Billion Parameters"). `qk_norm_over` says over what: each head's vector with a learned
scale per dimension shared by the heads ('head': Qwen3, Gemma 3, EXAONE 4), or all the heads'
queries (and all the key/value heads' keys) at once, one scale per dimension of each ('heads':
OLMo 2 and 3, which norm the projection before splitting it into heads). Its epsilon,
`qk_norm_eps`, is the file's rms_norm_eps in an imported checkpoint (roformer/hf_config.py).
"""

import jax.numpy as jnp

from roformer import attention
from roformer import variables
from roformer.attention_options import base
from roformer.specs import Float
from roformer.specs import Str

SPANS = ('head', 'heads')  # attention.qk_norm_over


@base.register
class QKNorm(base.AttentionOption):
  field = 'qk_norm'
  paper = 'Dehghani et al. 2023'
  about = "RMSNorm of each head's queries and keys, or of all the heads' at once"
  specs = {'qk_norm_eps': Float(0, 1, min_open=True, default=1e-6),
           # Its span (SPANS): each head, or all the heads together.
           'qk_norm_over': Str(SPANS, default='head')}
  # q_norm and k_norm, with the blocks' rms_norm_eps: per head in Qwen3, Gemma 3 and EXAONE 4,
  # over the heads in OLMo 2 and 3.
  transformers_families = ('qwen3', 'gemma3', 'exaone4', 'olmo2', 'olmo3', 'qwen3_moe', 'olmoe')

  def transformers_computes(self, att, family: str) -> bool:
    """OLMo 2's, 3's and OLMoE's classes norm all the heads at once, the others each head."""
    heads = family in ('olmo2', 'olmo3', 'olmoe')
    return family in self.transformers_families and (att.qk_norm_over == 'heads') == heads

  def transformers_refusal(self, model_cfg, att) -> str:
    over = att.qk_norm_over
    if over == 'heads' and model_cfg.norm != 'output' and model_cfg.mlp != 'moe':
      return (f"QK-norm over all the heads (attention.qk_norm_over={over!r}) with "
              f"norm={model_cfg.norm!r}: transformers' classes norm the heads together only in "
              "the block with output norms alone (OLMo 2 and 3, norm='output') and in OLMoE's "
              "mixture (mlp='moe'), and each head in the others (Qwen3, Gemma 3, EXAONE 4)")
    if att.qk_norm_eps == model_cfg.layer_norm_eps:
      return ''
    return (f'QK-norm with its own epsilon (attention.qk_norm_eps={att.qk_norm_eps}, '
            f'layer_norm_eps={model_cfg.layer_norm_eps}): Qwen3, Gemma 3, EXAONE 4 and OLMo '
            'have one rms_norm_eps for both. Fix: train with '
            '--config.model.attention.qk_norm_eps equal to model.layer_norm_eps')

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    module.qk_norm_heads = att.qk_norm_over == 'heads'
    widths = (module.head_dim,) * 2
    if module.qk_norm_heads:  # One scale per dimension of the queries', and the keys', heads.
      widths = (module.num_heads * module.head_dim, module.num_kv_heads * module.head_dim)
    module.q_scale, module.k_scale = (
        variables.param(jnp.ones((width,), jnp.float32), (None,), decay=False)
        for width in widths)
    module.qk_norm_eps = float(att.qk_norm_eps)

  def queries_keys(self, module, q, k):
    eps = module.qk_norm_eps
    if not module.qk_norm_heads:
      return (attention.rms_norm(q, module.q_scale[...], eps),
              attention.rms_norm(k, module.k_scale[...], eps))
    # [batch, len, heads, head_dim] normed over its last two axes together.
    flat = lambda x, scale: attention.rms_norm(
        x.reshape(x.shape[:-2] + (-1,)), scale[...], eps).reshape(x.shape)
    return flat(q, module.q_scale), flat(k, module.k_scale)
