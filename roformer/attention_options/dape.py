"""DAPE (`attention.dape`; Zheng et al., NeurIPS 2024, "DAPE: Data-Adaptive Positional
Encoding for Length Extrapolation"): logits q.k/sqrt(d) + B + f([q.k/sqrt(d); B]), with B the
scheme's bias and f a two-layer MLP (2 heads -> dape_width -> heads, GELU) applied to each
query-key pair's logits and biases over the heads. For the schemes that add a bias (alibi,
kerple, fire, t5, ...); it materialises [batch, L, L, 3 heads + width] per layer (the 2H
inputs, the hidden units and the H outputs), so the einsum path only.
"""

import jax
import jax.numpy as jnp

from roformer import attention
from roformer import errors
from roformer import sharding
from roformer import variables
from roformer.attention_options import base
from roformer.specs import Int

# On CPU DAPE's MLP runs over chunks of query rows whose [rows, batch, k_len, width] hidden layer
# takes at most this many bytes, recomputed in the backward pass, so that its passes stay in
# cache (docs/performance.md: the variable-tracking step 1.6x faster with the layout change, its
# memory 582 -> 210 MiB). Off CPU it runs in one piece.
DAPE_CHUNK_BYTES = 2**20


def dape_logits(logits: jax.Array, bias: jax.Array, w1, b1, w2, b2,
                chunk_bytes: int | None = None) -> jax.Array:
  """DAPE's logits: logits + bias + f([logits; bias]) for logits [batch, heads, q, k] (scaled)
  and a bias broadcastable to them, f a two-layer MLP over each (query, key) pair's 2 x heads
  values: gelu(x w1 + b1) w2 + b2 with w1 [2 heads, width] and w2 [width, heads]. Float32; the
  mask is applied after, by the softmax.

  The pairs are laid out [q, batch, k, 2 heads] so that both layers are plain matmuls over the
  last axis (contracting the heads axis in place made XLA transpose the width-sized hidden
  layer), and on CPU they go through the MLP in chunks of query rows (DAPE_CHUNK_BYTES,
  or `chunk_bytes` on any backend; 0: one piece); the batch axis, which a mesh shards, is not
  split."""
  logits = logits.astype(jnp.float32)
  bias = jnp.broadcast_to(bias.astype(jnp.float32), logits.shape)
  b, h, q_len, k_len = logits.shape
  width = w1.shape[-1]
  pairs = jnp.transpose(jnp.concatenate([logits, bias], axis=1), (2, 0, 3, 1))  # [q, b, k, 2h]

  def mlp(x):
    return jax.nn.gelu(x @ w1 + b1) @ w2 + b2

  if chunk_bytes is None:
    chunk_bytes = DAPE_CHUNK_BYTES if jax.default_backend() == 'cpu' else 0
  local_rows = b // sharding.shards('batch', b)
  n = 1 if not chunk_bytes else attention.batch_blocks(
      q_len, local_rows * k_len * width * 4, chunk_bytes)
  if n == 1:
    f = mlp(pairs)
  else:
    chunks = pairs.reshape(n, q_len // n, b, k_len, 2 * h)
    f = jax.lax.map(jax.checkpoint(mlp), chunks).reshape(q_len, b, k_len, h)
  return logits + bias + jnp.transpose(f, (1, 3, 0, 2))


DAPE_LIMIT_BYTES = 32 * 2**30  # Its [batch, L, L, 3 heads + width] maps, per layer.


@base.register
class Dape(base.AttentionOption):
  field = 'dape'
  paper = 'Zheng et al. 2024'
  about = "an MLP over each pair's logits and biases"
  specs = {'dape_width': Int(1, 4096, default=32)}
  needs = ('softmax',)
  einsum_only = True
  excludes = (('ssmax', 'scales the same logits (not combined)'),)
  positions_need = 'a bias in every layer'
  forms_logits = True

  def positions(self, model_cfg) -> str:
    no_bias = [k for k, c in base.layer_caps(model_cfg).items()
               if not c.logits_term or c.computes_logits or c.value_term]
    return f'position kinds {no_bias} add no bias to q.k for it to read' if no_bias else ''

  def validate(self, config, model_cfg, att) -> None:
    longest = config.data.seq_len * max(config.eval.length_multipliers, default=1)
    batch = max(config.train.batch_size, config.eval.batch_size)
    size = batch * longest ** 2 * (3 * model_cfg.num_heads + att.dape_width) * 4
    if size > DAPE_LIMIT_BYTES:
      raise errors.ConfigError(
          'config.model.attention.dape=True materialises [batch, L, L, 3 heads + width] float32 '
          f'per layer: {size / 2**30:.0f} GiB at batch {batch} and the longest evaluated length '
          f'{longest}, over {DAPE_LIMIT_BYTES // 2**30} GiB. Fix: fewer eval.length_multipliers, '
          'a smaller batch or attention.dape_width.')

  def layer_flops(self, model_cfg, seq_len: int, causal: bool) -> float:
    """Its MLP on each (query, key) pair: 2h -> width -> h."""
    h, width = model_cfg.num_heads, model_cfg.attention.dape_width
    return (seq_len / 2 if causal else seq_len) * 2 * (2 * h * width + width * h)

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    h, width = cfg.num_heads, att.dape_width
    init = lambda key, shape, fan_in: jax.random.normal(key, shape, jnp.float32) * fan_in ** -0.5
    module.dape_w1 = variables.param(init(rngs.params(), (2 * h, width), 2 * h), (None, None),
                                     decay=True)
    module.dape_b1 = variables.param(jnp.zeros((width,), jnp.float32), (None,), decay=False)
    module.dape_w2 = variables.param(init(rngs.params(), (width, h), width), (None, None),
                                     decay=True)
    module.dape_b2 = variables.param(jnp.zeros((h,), jnp.float32), (None,), decay=False)

  def logits(self, module, scaled, bias):
    return dape_logits(scaled, bias, module.dape_w1[...], module.dape_b1[...],
                       module.dape_w2[...], module.dape_b2[...])
