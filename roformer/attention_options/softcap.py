"""Logit soft-capping (`attention.softcap`; Gemma 2): each logit l, after the position scheme's
bias and any factor, becomes c tanh(l / c) with c = `softcap_value`, so that no logit passes c in
size before the mask and the softmax. Gemma 2's checkpoints use c = 50 (Gemma 3's none). The
capped logits are formed whole, so the einsum path only: the fused kernels take no function of
the logits.
"""

from roformer import attention
from roformer.attention_options import base
from roformer.specs import Float


@base.register
class Softcap(base.AttentionOption):
  field = 'softcap'
  paper = 'Gemma 2'
  about = 'logits l -> c tanh(l / c) before the softmax'
  specs = {'softcap_value': Float(0, 1e6, min_open=True, default=50.0)}
  needs = ('softmax',)
  einsum_only = True
  maps_logits = True
  # attn_logit_softcapping (Gemma 3's class reads the field, and its attention does not apply it).
  transformers_families = ('gemma2',)

  def transformers_fields(self, att, family: str) -> dict:
    del family  # The same name in each.
    return {'attn_logit_softcapping': att.softcap_value}

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    module.softcap_value = float(att.softcap_value)

  def map_logits(self, module, logits):
    return attention.soft_capped(logits, module.softcap_value)
