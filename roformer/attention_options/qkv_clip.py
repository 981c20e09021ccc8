"""Clipped projections (`attention.qkv_clip`): every element of the projected queries, keys and
values clamped to [-qkv_clip_value, qkv_clip_value], before QK-norm, the cache and any rotation.
OLMo 1.7 and 0724 (Groeneveld et al. 2024, "OLMo") and MPT (`clip_qkv`) train with it to keep
the attention logits from growing without bound. It acts on the projections alone, so it runs on
every implementation and adds no FLOPs to the scores.
"""

import jax.numpy as jnp

from roformer.attention_options import base
from roformer.specs import Float


@base.register
class QKVClip(base.AttentionOption):
  field = 'qkv_clip'
  paper = 'Groeneveld et al. 2024'
  about = 'q, k and v clamped to within qkv_clip_value after their projection'
  specs = {'qkv_clip_value': Float(0, 1e6, min_open=True, default=8.0)}
  # clip_qkv: OlmoConfig's, and MptConfig's attn_config's (roformer/hf_export_config.py writes
  # MPT's there).
  transformers_families = ('olmo', 'mpt')

  def transformers_fields(self, att, family: str) -> dict:
    del family  # The same name in each.
    return {'clip_qkv': att.qkv_clip_value}

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    module.qkv_clip_value = float(att.qkv_clip_value)

  def projections(self, module, q, k, v):
    bound = jnp.asarray(module.qkv_clip_value, q.dtype)
    return tuple(jnp.clip(x, -bound, bound) for x in (q, k, v))
