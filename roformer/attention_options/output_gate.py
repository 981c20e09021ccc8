"""Gated attention (`attention.output_gate`): each head's output times sigmoid(x W_g + b), x the
layer's (normed) input, elementwise per head and dimension, before the output projection (Qiu
et al. 2025, "Gated Attention for Large Language Models"). W_g adds d_model x (num_heads x
head_dim) parameters (d_model x d_model by default) and a matmul per layer; b starts at 0.
"""

import jax

from roformer import layers
from roformer import positions
from roformer.attention_options import base


@base.register
class OutputGate(base.AttentionOption):
  field = 'output_gate'
  paper = 'Qiu et al. 2025'
  about = "a sigmoid gate on each head's output"
  needs = ('head_outputs',)

  def layer_flops(self, model_cfg, seq_len: int, causal: bool) -> float:
    return 2 * model_cfg.d_model * model_cfg.num_heads * positions.head_dim(model_cfg)

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    module.gate = layers.dense(cfg.d_model, module.num_heads * module.head_dim, dtype=dtype,
                               rngs=rngs, axes=('embed', 'heads'))

  def outputs(self, module, out, x, layer):
    gate = jax.nn.sigmoid(module.gate(x)).astype(out.dtype)
    return out * gate.reshape(out.shape)
