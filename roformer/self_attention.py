"""Self-attention and cross-attention: the projections, the head layout and the key/value cache
around `roformer.attention`'s kernels, with every position signal taken from the block's
position module (its hooks).

The head layout: `model.num_heads` query heads share `model.num_kv_heads` key/value heads
(grouped-query attention, Ainslie et al. 2023; multi-query with one). The cache keeps the
keys and values of the key/value heads only; each is repeated for the query heads of its group
after the cache, so every position scheme sees the same per-head keys as with full multi-head
attention (query head h reads key/value head h // (num_heads / num_kv_heads), as Llama's
`repeat_kv`).
"""

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from roformer import attention
from roformer import attention_options
from roformer import differential
from roformer import fused_bias
from roformer import layers
from roformer import positions as positions_lib
from roformer import sharding
from roformer import variables


def kv_heads(cfg) -> int:
  """The number of key/value heads: `model.num_kv_heads`, 0 meaning one per query head."""
  return int(cfg.num_kv_heads) or cfg.num_heads


def expand_heads(x: jax.Array, num_heads: int) -> jax.Array:
  """Keys or values [batch, len, kv_heads, head_dim] repeated for the query heads of each
  group: [batch, len, num_heads, head_dim], head h from kv head h // (num_heads / kv_heads)."""
  groups = num_heads // x.shape[2]
  return x if groups == 1 else jnp.repeat(x, groups, axis=2)


# Random features of layer i, draw n come from key(FEATURE_SEED) folded with i, then n.
FEATURE_SEED = 1729


def layer_window(cfg, layer: int) -> int:
  """Layer `layer`'s sliding window from `model.layer_windows` (cycled over the layers; 0 and
  an empty pattern: the whole causal context)."""
  windows = tuple(cfg.layer_windows) if 'layer_windows' in cfg else ()
  return int(windows[layer % len(windows)]) if windows else 0


def attention_config(cfg) -> ml_collections.ConfigDict:
  """`config.model.attention`, its declared defaults where a model config has none."""
  if 'attention' in cfg:
    return cfg.attention
  return ml_collections.ConfigDict(attention_options.DEFAULTS)


class MultiHeadAttention(nnx.Module):
  """Self-attention whose position information comes entirely from the scheme's hooks (the
  block's position module): softmax attention, or FAVOR+ linear attention
  (`config.model.attention.kind='favor'`). Every layer's is built alike but for its window, so
  the blocks of a stack repeat with the period of the per-layer settings (roformer/scanned.py)."""

  def __init__(self, cfg: ml_collections.ConfigDict, *, dtype, rngs: nnx.Rngs,
               causal: bool = True, window: int = 0):
    d = cfg.d_model
    self.window = window  # > 0: query i sees keys i - window + 1 .. i (a sliding window).
    self.num_heads = cfg.num_heads
    self.head_dim = d // cfg.num_heads
    caps = positions_lib.capabilities(cfg.position.kind)
    att = attention_config(cfg)
    self.favor = att.kind == 'favor'
    # Stick-breaking attention: sigmoid weights from the logits, on the einsum path.
    self.stick_breaking = att.kind == 'stick_breaking'
    self.attend_current = self.stick_breaking and att.attend_current
    # A training-free distance remap (the position layer's `remapped_logits`), einsum path.
    self.remap = positions_lib.scheme(cfg.position.kind).remaps(cfg)
    self.impl = attention.resolve(
        cfg.attention_impl, dtype=dtype,
        einsum_only=(caps.implementations == ('einsum',) or self.stick_breaking
                     or self.remap or att.dape or att.differential))
    self.value_term, self.computes_logits = caps.value_term, caps.computes_logits
    self.qk_norm, self.ssmax = att.qk_norm, att.ssmax
    # Llama 4's temperature, on layers whose scheme gives no position signal at all.
    no_positions = not (caps.reads_positions or caps.logits_term or caps.rotary)
    self.temperature = ((att.nope_temperature_floor, att.nope_temperature_scale)
                        if att.nope_temperature and no_positions else None)
    if self.qk_norm:  # RMSNorm of each head's query and key, one scale shared by the heads.
      self.q_scale, self.k_scale = (
          variables.param(jnp.ones((self.head_dim,), jnp.float32), (None,), decay=False)
          for _ in range(2))
    if self.ssmax:  # Scalable-Softmax: logits times s_h log n, s_h learned per head.
      self.ssmax_scale = variables.param(
          jnp.full((cfg.num_heads,), att.ssmax_init, jnp.float32), (None,), decay=False)
    self.causal = causal
    # Causal self-attention without a cache skips the query blocks' keys past their last row.
    self.causal_block = cfg.causal_block if causal else 0
    if self.favor:
      self.num_features, self.chunk = att.num_features, att.chunk
      self.rotate_features = att.rope_mode == 'features' and caps.feature_rotation
      # The index of the current random-feature draw, travelling with the weights into
      # checkpoints, evaluation and decoding; the train step sets it to step // redraw_interval.
      self.feature_draw = variables.FeatureDraw(jnp.zeros((), jnp.float32), out_sharding=(),
                                                eager_sharding=False)
    self.dape = att.dape
    if self.dape:  # DAPE's MLP over each pair's logits and biases (attention.dape_logits).
      h, width = cfg.num_heads, att.dape_width
      init = lambda key, shape, fan_in: jax.random.normal(key, shape, jnp.float32) * fan_in ** -0.5
      self.dape_w1 = variables.param(init(rngs.params(), (2 * h, width), 2 * h), (None, None),
                                     decay=True)
      self.dape_b1 = variables.param(jnp.zeros((width,), jnp.float32), (None,), decay=False)
      self.dape_w2 = variables.param(init(rngs.params(), (width, h), width), (None, None),
                                     decay=True)
      self.dape_b2 = variables.param(jnp.zeros((h,), jnp.float32), (None,), decay=False)
    self.differential = att.differential
    if self.differential:  # Differential attention: heads pair up (differential.py).
      init = lambda: jax.random.normal(rngs.params(), (self.head_dim,),
                                       jnp.float32) * differential.LAMBDA_STD
      self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
          variables.param(init(), (None,), decay=False) for _ in range(4))
      self.diff_scale = variables.param(jnp.ones((2 * self.head_dim,), jnp.float32), (None,),
                                        decay=False)
    if att.output_gate:  # Gated attention: sigmoid(x W_g + b) on each head's output, b from 0.
      self.gate = layers.dense(d, d, dtype=dtype, rngs=rngs, axes=('embed', 'heads'))
    self.output_gate = att.output_gate
    # Set by roformer/sinks.py: the einsum path, and each call sows its attention weights
    # [batch, heads, q_len, k_len] as the Intermediate `attention_probs`.
    self.record_probs = False
    self.num_kv_heads = kv_heads(cfg)
    width = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim  # [q | k | v] columns.
    self.qkv = layers.linear(cfg, d, width, dtype=dtype, rngs=rngs, axes=('embed', 'heads'),
                             use_bias=layers.has_bias(cfg, 'qkv'))
    self.out = layers.linear(cfg, d, d, dtype=dtype, rngs=rngs, axes=('heads', 'embed'),
                             residual=True, use_bias=layers.has_bias(cfg, 'out'))

  def __call__(self, x, mask, pos, position: positions_lib.Layer, shared=None, cache=None,
               segments=None, layer=0):
    """Self-attention over x with the block's `position` module (`shared`: what the stack's
    Shared module returned). With `cache` ({'k', 'v'} [batch, max_len, heads, head_dim],
    'positions' [batch, max_len], 'index'), x's keys and values are written at slots
    index.. and the queries attend over the whole cache. Keys and values are cached before
    any position hook, so every scheme sees the same keys as without a cache. `segments`
    (packed segment ids) is what FAVOR+ reads instead of the dense mask, and what lets
    cuDNN run with sequence lengths when every row is one document; `layer` (an int or
    an int32 scalar) seeds FAVOR+'s random features and sets differential attention's
    lambda_init. Returns (output, updated layer cache or None)."""
    b, length, _ = x.shape
    ctx = position.prepare(x, pos, shared)
    h, g = self.num_heads, self.num_kv_heads
    q, k, v = jnp.split(self.qkv(x).reshape(b, length, h + 2 * g, self.head_dim), (h, h + g),
                        axis=2)
    q = sharding.constrain(q, ('batch', None, 'act_heads', None))
    if self.qk_norm:  # Before the cache and any rotation: cached keys are normed keys.
      q, k = attention.rms_norm(q, self.q_scale[...]), attention.rms_norm(k, self.k_scale[...])
    k_pos = pos
    first_slot = 0 if cache is None else cache['index']  # The queries' first key slot.
    if cache is not None:
      at = (0, cache['index'], 0, 0)
      k = jax.lax.dynamic_update_slice(cache['k'], k.astype(cache['k'].dtype), at)
      v = jax.lax.dynamic_update_slice(cache['v'], v.astype(cache['v'].dtype), at)
      k_pos = cache['positions']  # Positions of every slot, the new ones included.
      ctx, state = position.extend_cache(ctx, cache.get('position'), cache['index'])
      cache = {'k': k, 'v': v, **({} if state is None else {'position': state})}
    k, v = (sharding.constrain(expand_heads(t, h), ('batch', None, 'act_heads', None))
            for t in (k, v))
    if self.window:
      mask = mask & attention.window_mask(first_slot + jnp.arange(length), k.shape[1],
                                          self.window)
    if self.favor:
      return self._favor(q, k, v, mask, pos, k_pos, position, ctx, cache, segments, layer)
    if not self.remap:
      q, k = position.rotate(q, k, pos, k_pos, ctx)
    v = position.rotate_value(v, k_pos, ctx)
    if self.differential:  # Each map weights its differential head's values.
      v = differential.paired_values(v)
    if self.temperature:
      q = (q * attention.nope_temperature(pos, *self.temperature)[:, :, None, None]).astype(
          q.dtype)
    if self.stick_breaking and self.computes_logits:
      out, probs = attention.stick_breaking_attend(
          position.logits(q, k, pos, k_pos, mask, ctx), v, mask,
          attend_current=self.attend_current, query_slots=first_slot + jnp.arange(length))
    elif self.stick_breaking:  # In causal blocks where no value term needs the weights.
      out, probs = attention.stick_breaking(
          q, k, v, mask, position.logits_bias(q, k, pos, k_pos, mask, ctx),
          attend_current=self.attend_current,
          causal_block=(0 if cache is not None or self.value_term or self.record_probs
                        else self.causal_block),
          window=self.window, query_slots=first_slot + jnp.arange(length))
    elif self.computes_logits or self.remap:
      if self.remap:
        logits, seen = position.remapped_logits(q, k, pos, k_pos)
        mask = mask if seen is None else mask & seen[:, None]
      else:
        logits = position.logits(q, k, pos, k_pos, mask, ctx)
      if self.ssmax:
        logits = logits * attention.ssmax_factor(self.ssmax_scale[...], mask)[..., None]
      out, probs = attention.attend_logits(logits, v, mask)
    elif self.impl == 'pallas' and cache is None and segments is not None and not self.record_probs:
      # The fused kernel: the scheme's bias computed block by block, never materialised.
      bias, params, row, col = position.fused_bias(pos, ctx) or (fused_bias.NONE, None, None,
                                                                 None)
      out, probs = fused_bias.attend(q, k, v, pos, segments, bias, params=params, row=row,
                                     col=col, causal=self.causal, window=self.window), None
    elif self.dape:
      bias = position.logits_bias(q, k, pos, k_pos, mask, ctx)
      logits = attention.dape_logits(attention.scaled_logits(q, k), bias, self.dape_w1[...],
                                     self.dape_b1[...], self.dape_w2[...], self.dape_b2[...])
      out, probs = attention.attend_logits(logits, v, mask)
    else:
      bias = position.logits_bias(q, k, pos, k_pos, mask, ctx)
      if self.ssmax:  # (q.k + bias) s log n, with q scaled so that every kernel can run it.
        factor = attention.ssmax_factor(self.ssmax_scale[...], mask)
        q = (q * jnp.transpose(factor, (0, 2, 1))[..., None]).astype(q.dtype)
        bias = None if bias is None else bias * factor[..., None]
      out, probs = attention.attend(q, k, v, mask, bias=bias,
                                    impl='einsum' if self.record_probs else self.impl,
                                    return_probs=self.value_term or self.record_probs,
                                    causal_block=self.causal_block if cache is None else 0,
                                    window=self.window,
                                    segments=segments if cache is None else None,
                                    causal=self.causal)
    if self.record_probs:
      self.sow(nnx.Intermediate, 'attention_probs', probs)
    if self.value_term:
      out = out + position.value_term(probs, pos, k_pos, ctx)
    if self.differential:
      init = differential.lambda_init(layer)
      lam = differential.lambdas(self.lambda_q1[...], self.lambda_k1[...], self.lambda_q2[...],
                                 self.lambda_k2[...], init)
      out = differential.combine(out, lam, init, self.diff_scale[...])
    out = out.reshape(b, length, -1)
    if self.output_gate:
      out = out * jax.nn.sigmoid(self.gate(x)).astype(out.dtype)
    return self.out(out), cache

  def projection(self, layer=0) -> jax.Array:
    """Layer `layer`'s random features for the current draw: [num_features, head_dim]."""
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(FEATURE_SEED), layer),
                             self.feature_draw.value.astype(jnp.int32))
    return attention.orthogonal_features(key, self.num_features, self.head_dim)

  def _favor(self, q, k, v, mask, pos, k_pos, position, ctx, cache, segments, layer):
    b, length = q.shape[:2]
    v = position.rotate_value(v, k_pos, ctx)
    rotate = None
    if self.rotate_features:  # The RoFormer paper: rotate the features, numerator only.
      rotate = lambda qf, kf: position.rotate_features(qf, kf, pos, k_pos, ctx)
    else:  # Rotate q, k (if the scheme rotates at all); the features stay positive.
      q, k = position.rotate(q, k, pos, k_pos, ctx)
    projection = self.projection(layer)
    if cache is None:
      if segments is None:
        segments = jnp.ones((b, length), jnp.int32)
      out = attention.favor_attend(q, k, v, segments, projection, causal=self.causal,
                                   rotate=rotate, chunk=self.chunk)
    else:  # Decoding: a few queries over the filled cache slots, with the dense mask.
      out = attention.favor_attend_masked(q, k, v, mask, projection, rotate=rotate)
    return self.out(out.reshape(b, length, -1)), cache



class CrossAttention(nnx.Module):
  """Decoder-to-encoder attention. It carries no position information: positions enter the
  encoder and decoder self-attention only, as in the RoFormer paper's translation model."""

  def __init__(self, cfg, *, dtype, rngs):
    d = cfg.d_model
    self.num_heads, self.head_dim = cfg.num_heads, d // cfg.num_heads
    self.impl = attention.resolve(cfg.attention_impl, dtype=dtype)
    self.q = layers.linear(cfg, d, d, dtype=dtype, rngs=rngs, axes=('embed', 'heads'))
    self.kv = layers.linear(cfg, d, 2 * d, dtype=dtype, rngs=rngs, axes=('embed', 'heads'))
    self.out = layers.linear(cfg, d, d, dtype=dtype, rngs=rngs, axes=('heads', 'embed'),
                             residual=True)

  def __call__(self, x, memory, mask):
    b, length, _ = x.shape
    q = self.q(x).reshape(b, length, self.num_heads, self.head_dim)
    k, v = jnp.split(self.kv(memory).reshape(b, memory.shape[1], 2 * self.num_heads,
                                             self.head_dim), 2, axis=2)
    out, _ = attention.attend(q, k, v, mask, impl=self.impl, return_probs=False)
    return self.out(out.reshape(b, length, -1))

