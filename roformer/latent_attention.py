"""Multi-head latent attention (MLA: DeepSeek-V2, arXiv 2405.04434, and DeepSeek-V3): each token's
keys and values come out of one low-rank latent, and RoPE is decoupled onto a few key dimensions
that every head shares (`model.mla`, on where `kv_rank` > 0).

With r = `kv_rank`, p = `rope_dim`, e = `model.head_dim` (q and k) and e_v = `v_head_dim`:
  [c | k_R] = x W_a                  c: the latent (r wide), k_R: the shared rotary key (p wide);
  [k_C,h | v_h] = RMSNorm(c) W_b,h   each head's own key part (e - p wide) and value (e_v wide);
  q_h = x W_q,h, or RMSNorm(x W_qa) W_qb,h with `q_rank` > 0 (a low-rank query too);
and head h attends with key [k_R | k_C,h] and query [q_R,h | q_C,h] (q_h's last p columns first).
The rotary part comes first in each head, so that RoPE with `position.rope.fraction` = p / e
rotates exactly the decoupled dimensions (DeepSeek's class keeps them last: the same dot
product). The latent norms' epsilon is 1e-6, as DeepSeek's class has them.

Every head then has keys and values of its own (num_kv_heads = num_heads): the attention
kernels, the position hooks and the key/value cache see ordinary heads, values e_v wide (a scheme
that acts on the values, Shaw's term or RoPE's rotated values, and the fused kernels take them
only e wide: refused otherwise, roformer/config_checks.py). This is
MLA's plain form: the cache holds each head's keys and values, heads (e + e_v) numbers a token,
where the absorbed form (W_b folded into the query and the output) caches c and k_R alone, r + p
numbers, and computes the same logits; the absorbed form is not implemented here.
"""

import jax.numpy as jnp
from flax import nnx

from roformer import layers
from roformer import positions as positions_lib
from roformer.specs import Int

LATENT_EPS = 1e-6  # DeepSeek's latent norms (q_a_layernorm, kv_a_layernorm) take its default.

# config.model.mla
FIELDS = {
    # > 0: MLA, keys and values from a latent this wide; 0: the block's q/k/v projection.
    'kv_rank': Int(0, 2**16, default=0),
}
# Read where kv_rank > 0 (roformer/config_schema.py).
LATENT_FIELDS = {
    # > 0: the queries from a latent this wide (RMSNorm between); 0: one projection.
    'q_rank': Int(0, 2**16, default=0),
    # The key dimensions every head shares, which carry RoPE (qk_rope_head_dim).
    'rope_dim': Int(0, 4096, default=0),
    # Each head's value width; 0: model.head_dim.
    'v_head_dim': Int(0, 4096, default=0),
}


def enabled(model_cfg) -> bool:
  return 'mla' in model_cfg and model_cfg.mla.kv_rank > 0


def value_dim(model_cfg) -> int:
  """Each head's value width: MLA's `v_head_dim`, else the head width."""
  e = positions_lib.head_dim(model_cfg)
  return (model_cfg.mla.v_head_dim or e) if enabled(model_cfg) else e


def projection_flops(model_cfg) -> float:
  """Forward FLOPs per token of the query, latent, key/value and output projections."""
  o, d, h = model_cfg.mla, model_cfg.d_model, model_cfg.num_heads
  e, ev = positions_lib.head_dim(model_cfg), value_dim(model_cfg)
  query = 2 * o.q_rank * (d + h * e) if o.q_rank else 2 * d * h * e
  latent = 2 * d * (o.kv_rank + o.rope_dim) + 2 * o.kv_rank * h * (e - o.rope_dim + ev)
  return query + latent + 2 * h * ev * d


def validate(model_cfg) -> str | None:
  """What is wrong with `model.mla` beside the block's heads and biases, in one line naming the
  field and the fix, or None (its attention and rotation: roformer/config_checks.py)."""
  if not enabled(model_cfg):
    return None
  o, e = model_cfg.mla, positions_lib.head_dim(model_cfg)
  if o.rope_dim >= e or o.rope_dim % 2:
    return (f'config.model.mla.rope_dim={o.rope_dim} is not an even number below the head '
            f'width {e} (model.head_dim, the query and key heads). Fix: an even rope_dim, or '
            'a wider model.head_dim.')
  if model_cfg.num_kv_heads not in (0, model_cfg.num_heads):
    return (f'config.model.num_kv_heads={model_cfg.num_kv_heads}: MLA gives every head its own '
            'keys and values from the latent. Fix: --config.model.num_kv_heads=0.')
  if layers.has_bias(model_cfg, 'qkv') or layers.has_bias(model_cfg, 'out'):
    return (f'config.model.biases={model_cfg.biases!r} gives attention biases, which MLA\'s '
            "projections do not have here. Fix: --config.model.biases=none (or 'mlp').")
  return None


class LatentProjections(nnx.Module):
  """The queries, keys and values of MLA (the module docstring), heads [batch, len, heads, .]."""

  def __init__(self, cfg, *, dtype, rngs):
    o, d, h = cfg.mla, cfg.d_model, cfg.num_heads
    e = positions_lib.head_dim(cfg)
    self.heads, self.rank, self.rope_dim, self.q_rank = h, o.kv_rank, o.rope_dim, o.q_rank
    self.value_dim = value_dim(cfg)

    def linear(d_in, d_out, axes):
      return layers.linear(cfg, d_in, d_out, dtype=dtype, rngs=rngs, axes=axes, use_bias=False)
    if o.q_rank:
      self.q_a = linear(d, o.q_rank, ('embed', None))
      self.q_norm = layers.RMSNorm(o.q_rank, eps=LATENT_EPS, dtype=dtype)
      self.q_b = linear(o.q_rank, h * e, (None, 'heads'))
    else:
      self.q = linear(d, h * e, ('embed', 'heads'))
    self.kv_a = linear(d, o.kv_rank + o.rope_dim, ('embed', None))
    self.kv_norm = layers.RMSNorm(o.kv_rank, eps=LATENT_EPS, dtype=dtype)
    self.kv_b = linear(o.kv_rank, h * (e - o.rope_dim + self.value_dim), (None, 'heads'))

  def __call__(self, x):
    b, length, _ = x.shape
    h, p = self.heads, self.rope_dim
    q = self.q_b(self.q_norm(self.q_a(x))) if self.q_rank else self.q(x)
    q = q.reshape(b, length, h, -1)
    q = jnp.concatenate([q[..., q.shape[-1] - p:], q[..., :q.shape[-1] - p]], axis=-1)
    latent, k_rope = jnp.split(self.kv_a(x), [self.rank], axis=-1)
    kv = self.kv_b(self.kv_norm(latent)).reshape(b, length, h, -1)
    k_own, v = jnp.split(kv, [kv.shape[-1] - self.value_dim], axis=-1)
    k = jnp.concatenate([jnp.broadcast_to(k_rope[:, :, None], (b, length, h, p)), k_own], axis=-1)
    return q, k, v
