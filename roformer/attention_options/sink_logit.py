"""A sink logit per head (`attention.sink_logit`): one more logit s_h in each row's softmax that
weights no value, so that a query can give part of its attention to nothing:

  w_ij = exp(l_ij) / (exp(s_h) + sum_j' exp(l_ij'))

learned per head from `sink_logit_init` (gpt-oss, OpenAI 2025, whose attention stores them as
`sinks`), or fixed there (`sink_logit_learned=False`; at 0 it is the "softmax plus one" of
Miller 2023). A head's weights then sum to less than 1; a query may attend to no key at all
instead of to the first token, which is how trained models otherwise form attention sinks
(Xiao et al. 2023). The extra term is in each row's normalisation, which the fused kernels do
not take: the einsum path only.
"""

import jax
import jax.numpy as jnp
import numpy as np

from roformer import variables
from roformer.attention_options import base
from roformer.specs import Bool, Float


@base.register
class SinkLogit(base.AttentionOption):
  field = 'sink_logit'
  paper = 'gpt-oss 2025'
  about = "a logit per head in each row's softmax that weights no value"
  specs = {'sink_logit_learned': Bool(default=True),
           'sink_logit_init': Float(-1e4, 1e4, default=0.0)}
  needs = ('softmax',)
  einsum_only = True
  adds_sink = True
  transformers_families = ('gpt_oss',)

  def from_transformers(self, family: str, hf: dict, eps: float) -> dict:
    del hf, eps
    return {'sink_logit': True} if family in self.transformers_families else {}

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    if att.sink_logit_learned:
      module.sink = variables.param(
          jnp.full((cfg.num_heads,), att.sink_logit_init, jnp.float32), (None,), decay=False)
    else:
      module.sink_value = float(att.sink_logit_init)

  def transformers_refusal(self, model_cfg, att) -> str:
    del att
    if model_cfg.mlp != 'moe':
      return ("attention.sink_logit with a dense MLP: gpt-oss's, the class with sinks, is a "
              "mixture of experts (model.mlp='moe' with moe.biases and moe.swiglu_limit)")
    return ''

  def fixed_sinks(self, att, heads: int) -> np.ndarray:
    """Each head's sink logit where they are not learned (an export writes them)."""
    return np.full((heads,), att.sink_logit_init, np.float32)

  def sink(self, module) -> jax.Array:
    if hasattr(module, 'sink'):
      return module.sink[...].astype(jnp.float32)
    return jnp.full((module.num_heads,), module.sink_value, jnp.float32)
