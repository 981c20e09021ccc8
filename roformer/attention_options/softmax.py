"""Softmax attention (`attention.kind='softmax'`, the default): softmax over q.k/sqrt(d) and the
position scheme's terms, on every implementation (`attention.attend`), or on the fused bias
kernel of roformer/fused_bias.py with attention_impl='pallas'."""

import jax.numpy as jnp

from roformer import attention
from roformer import fused_bias
from roformer.attention_options import base


@base.register
class Softmax(base.AttentionKind):
  name = 'softmax'
  about = "softmax over the scaled logits and the scheme's terms"
  has = frozenset(base.FEATURES)
  implementations = ('einsum', 'xla', 'cudnn', 'pallas')
  in_transformers = True

  def attend(self, module, q, k, v, mask, site: base.Site):
    position, cache = site.position, site.cache
    args = (site.pos, site.k_pos)
    factors = lambda mask: [f for f in (o.logits_factor(module, mask) for o in module.options)
                            if f is not None]
    former = next((o for o in module.options if o.forms_logits), None)
    if module.computes_logits or module.remap:
      if module.remap:
        logits, seen = position.remapped_logits(q, k, *args)
        mask = mask if seen is None else mask & seen[:, None]
      else:
        logits = position.logits(q, k, *args, mask, site.ctx)
      for factor in factors(mask):
        logits = logits * factor[..., None]
      return attention.attend_logits(logits, v, mask)
    fused = site.fused_inputs(module)
    if fused:
      # The fused kernel: the scheme's bias computed block by block, never materialised.
      bias, params, row, col = fused
      return fused_bias.attend(q, k, v, site.pos, site.segments, bias, params=params, row=row,
                               col=col, causal=module.causal, window=module.window), None
    bias = position.logits_bias(q, k, *args, mask, site.ctx)
    if former:
      logits = former.logits(module, attention.scaled_logits(q, k), bias)
      return attention.attend_logits(logits, v, mask)
    for factor in factors(mask):  # (q.k + bias) f, with q scaled so that every kernel can run it.
      q = (q * jnp.transpose(factor, (0, 2, 1))[..., None]).astype(q.dtype)
      bias = None if bias is None else bias * factor[..., None]
    return attention.attend(q, k, v, mask, bias=bias,
                            impl='einsum' if module.record_probs else module.impl,
                            return_probs=module.value_term or module.record_probs,
                            causal_block=module.causal_block if cache is None else 0,
                            window=module.window,
                            segments=site.segments if cache is None else None,
                            causal=module.causal)
