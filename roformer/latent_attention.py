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
only e wide: refused otherwise, roformer/config_checks.py).

The cache (`cache`): 'heads' keeps each head's keys and values, h (e + e_v) numbers a token;
'latent' keeps [k_R | c], p + r numbers (DeepSeek-V3: 576 against 40,960), and decodes in MLA's
absorbed form, one key/value head shared by every query head (multi-query attention):
  query  [q_R,h | W_uk,h q_C,h]  (p + r wide: q_C,h . k_C,h = (W_uk,h q_C,h) . c),
  key    [k_R | c],  value  c,   output  W_uv,h (sum_j a_hj c_j)  (e_v wide),
with W_b,h = [W_uk,h | W_uv,h]. The logits and outputs are the plain form's; the queries are
scaled by sqrt((p + r) / e), so that every kernel's 1 / sqrt(width) gives the heads' 1 / sqrt(e).
RoPE rotates the first p dimensions of the wider heads as of the plain ones, and a bias of the
positions is the same, so a scheme that acts only so (`Capabilities.latent_cache`) and the
options on the queries and logits computes the same; training and a full pass run the plain
form (fewer products where every token is a query).
"""

import jax.numpy as jnp
from flax import nnx

from roformer import layers
from roformer import positions as positions_lib
from roformer.specs import Int, Str

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
    # What decoding caches: 'heads' (each head's keys and values) or 'latent' ([k_R | c], MLA's
    # absorbed form): the same outputs.
    'cache': Str(('heads', 'latent'), default='heads'),
}


def enabled(model_cfg) -> bool:
  return 'mla' in model_cfg and model_cfg.mla.kv_rank > 0


def value_dim(model_cfg) -> int:
  """Each head's value width: MLA's `v_head_dim`, else the head width."""
  e = positions_lib.head_dim(model_cfg)
  return (model_cfg.mla.v_head_dim or e) if enabled(model_cfg) else e


def latent_cache(model_cfg) -> bool:
  """Whether decoding caches MLA's latent (the absorbed form, the module docstring)."""
  return enabled(model_cfg) and model_cfg.mla.cache == 'latent'


def cache_widths(model_cfg, kv_heads: int) -> tuple[int, int, int]:
  """(heads, key width, value width) of a layer's cache for `kv_heads` key/value heads; a
  value width 0: the values are the keys' last r columns (the latent), not kept twice."""
  if latent_cache(model_cfg):
    return 1, model_cfg.mla.kv_rank + model_cfg.mla.rope_dim, 0
  return kv_heads, positions_lib.head_dim(model_cfg), value_dim(model_cfg)


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
    q = self._queries(x)
    latent, k_rope = jnp.split(self.kv_a(x), [self.rank], axis=-1)
    kv = self.kv_b(self.kv_norm(latent)).reshape(b, length, h, -1)
    k_own, v = jnp.split(kv, [kv.shape[-1] - self.value_dim], axis=-1)
    k = jnp.concatenate([jnp.broadcast_to(k_rope[:, :, None], (b, length, h, p)), k_own], axis=-1)
    return q, k, v

  def _queries(self, x):
    """[batch, len, heads, e], the rotary part first."""
    b, length, _ = x.shape
    q = self.q_b(self.q_norm(self.q_a(x))) if self.q_rank else self.q(x)
    q = q.reshape(b, length, self.heads, -1)
    p = self.rope_dim
    return jnp.concatenate([q[..., q.shape[-1] - p:], q[..., :q.shape[-1] - p]], axis=-1)

  def _up(self, dtype):
    """W_uk [r, heads, e - p] and W_uv [r, heads, e_v]: kv_b's kernel by head."""
    kernel = self.kv_b.kernel[...].astype(dtype).reshape(self.rank, self.heads, -1)
    return kernel[..., :kernel.shape[-1] - self.value_dim], kernel[..., -self.value_dim:]

  def absorbed(self, x):
    """The absorbed form's queries [batch, len, heads, p + r] (scaled by sqrt((p + r) / e))
    and its one key head [batch, len, 1, p + r] = [k_R | c]; the values are c, the keys'
    last r columns."""
    q = self._queries(x)
    p, e = self.rope_dim, q.shape[-1]
    w_k, _ = self._up(q.dtype)
    q = jnp.concatenate([q[..., :p], jnp.einsum('blhc,rhc->blhr', q[..., p:], w_k)], axis=-1)
    q = (q.astype(jnp.float32) * (q.shape[-1] / e) ** 0.5).astype(q.dtype)
    latent, k_rope = jnp.split(self.kv_a(x), [self.rank], axis=-1)
    k = jnp.concatenate([k_rope, self.kv_norm(latent).astype(k_rope.dtype)], axis=-1)
    return q, k[:, :, None]

  def absorbed_outputs(self, out):
    """The heads' outputs [batch, len, heads, e_v] from their averages of the latent
    [batch, len, heads, r]: W_uv,h applied after the attention."""
    _, w_v = self._up(out.dtype)
    return jnp.einsum('blhr,rhv->blhv', out, w_v)
