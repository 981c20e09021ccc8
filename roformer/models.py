"""The shared Transformer stack and the task models built on it.

One stack (multi-head attention + MLP) serves every model; it is parameterized by a position
scheme from `roformer.positions`, whose hooks it calls at fixed points; `roformer.stack` runs the
blocks (a loop, or one scan). LayerNorm is pre-residual
by default (`config.model.norm='pre'`); 'post' gives the BERT/RoFormer layout (LayerNorm after
each residual sum and after the embeddings), which pretrained Hugging Face RoFormer weights need.
Dropout is functional (an explicit key per call), so a train step stays a pure function of its
inputs.
"""

import copy
import math

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from roformer import attention
from roformer import dense_grad
from roformer import differential
from roformer import errors
from roformer import positions as positions_lib
from roformer import sharding
from roformer import stack
from roformer import variables


def dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
  if key is None or rate == 0.0:
    return x
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


def _split(key, n):
  return [None] * n if key is None else list(jax.random.split(key, n))


def dense(d_in: int, d_out: int, *, dtype, rngs, axes=(None, None),
          fan_in_scale: float = 1.0) -> nnx.Linear:
  """A Linear layer with N(0, fan_in_scale^2 / d_in) weights, as every layer here uses. Its
  kernel has the logical `axes` (input, output) and decays; its bias follows the output axis.
  Its product's weight gradient is one 2-D product (roformer.dense_grad: XLA:CPU ran autodiff's
  3x slower)."""
  kernel_init = nnx.initializers.normal(stddev=fan_in_scale * d_in ** -0.5)
  return nnx.Linear(d_in, d_out, kernel_init=variables.init(kernel_init, axes, decay=True),
                    bias_init=variables.init(nnx.initializers.zeros, axes[1:], decay=False),
                    dtype=dtype, rngs=rngs, dot_general=dense_grad.dot_general)


@jax.custom_vjp
def add_bias(x: jax.Array, bias: jax.Array) -> jax.Array:
  """x + bias over the last axis. Its gradient for `bias` is a product with a vector of ones,
  not a reduction: XLA:CPU sums a [rows, 32000] gradient over its rows some 40x slower than
  it multiplies it by ones (a vocabulary-sized output bias, measured with jax 0.10)."""
  return x + bias


def _add_bias_fwd(x, bias):
  return x + bias, bias


def _add_bias_bwd(bias, grad):
  rows = grad.reshape(-1, grad.shape[-1])
  return grad, jnp.dot(jnp.ones((rows.shape[0],), rows.dtype), rows).astype(bias.dtype)


add_bias.defvjp(_add_bias_fwd, _add_bias_bwd)


def residual_scale(cfg) -> float:
  """1/sqrt(2 num_layers): the init scale of layers that write into the residual stream."""
  return (2 * cfg.num_layers) ** -0.5


ACTIVATIONS = {
    'gelu_tanh': lambda x: jax.nn.gelu(x, approximate=True),
    'gelu': lambda x: jax.nn.gelu(x, approximate=False),  # BERT's and Hugging Face's 'gelu'.
    'relu': jax.nn.relu,
}
NORMS = ('pre', 'post')


def layer_norm(cfg, *, dtype, rngs) -> nnx.LayerNorm:
  return nnx.LayerNorm(
      cfg.d_model, epsilon=cfg.layer_norm_eps, dtype=dtype, rngs=rngs,
      scale_init=variables.init(nnx.initializers.ones, (None,), decay=False),
      bias_init=variables.init(nnx.initializers.zeros, (None,), decay=False))


def residual(x, sublayer, norm: nnx.LayerNorm, post: bool, rate: float, key):
  """x + dropout(sublayer(LN(x))) (pre-norm), or LN(x + dropout(sublayer(x))) (post-norm).
  `sublayer` returns (output, extra); returns (new x, extra)."""
  out, extra = sublayer(x if post else norm(x))
  x = x + dropout(out, rate, key)
  return (norm(x) if post else x), extra


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
  from roformer import config_schema  # pylint: disable=import-outside-toplevel (a cycle)
  return config_schema.default_config().model.attention


class MultiHeadAttention(nnx.Module):
  """Self-attention whose position information comes entirely from the scheme's hooks (the
  block's position module): softmax attention, or FAVOR+ linear attention
  (`config.model.attention.kind='favor'`). Every layer's is built alike, so the blocks of a
  stack have one structure (`run_blocks` can scan them)."""

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
    # A training-free distance remap of RoPE (positions/remap.py): its logits, einsum path.
    self.remap = positions_lib.layer_remap(cfg)
    self.impl = attention.resolve(
        cfg.attention_impl, dtype=dtype,
        einsum_only=(caps.implementations == ('einsum',) or self.stick_breaking
                     or self.remap is not None or att.dape or att.differential))
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
      self.gate = dense(d, d, dtype=dtype, rngs=rngs, axes=('embed', 'heads'))
    self.output_gate = att.output_gate
    # Set by roformer/sinks.py: the einsum path, and each call sows its attention weights
    # [batch, heads, q_len, k_len] as the Intermediate `attention_probs`.
    self.record_probs = False
    self.qkv = dense(d, 3 * d, dtype=dtype, rngs=rngs, axes=('embed', 'heads'))
    self.out = dense(d, d, dtype=dtype, rngs=rngs, axes=('heads', 'embed'),
                     fan_in_scale=residual_scale(cfg))

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
    q, k, v = jnp.split(self.qkv(x).reshape(b, length, 3 * self.num_heads, self.head_dim), 3, axis=2)
    q, k, v = (sharding.constrain(t, ('batch', None, 'act_heads', None)) for t in (q, k, v))
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
    if self.window:
      mask = mask & attention.window_mask(first_slot + jnp.arange(length), k.shape[1],
                                          self.window)
    if self.favor:
      return self._favor(q, k, v, mask, pos, k_pos, position, ctx, cache, segments, layer)
    if self.remap is None:
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
    elif self.computes_logits or self.remap is not None:
      if self.remap is not None:
        logits, seen = position.remapped_logits(q, k, pos, k_pos, self.remap)
        mask = mask if seen is None else mask & seen[:, None]
      else:
        logits = position.logits(q, k, pos, k_pos, mask, ctx)
      if self.ssmax:
        logits = logits * attention.ssmax_factor(self.ssmax_scale[...], mask)[..., None]
      out, probs = attention.attend_logits(logits, v, mask)
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


class MLP(nnx.Module):

  def __init__(self, cfg, *, dtype, rngs):
    d, f = cfg.d_model, cfg.d_ff
    self.activation = cfg.activation
    self.up = dense(d, f, dtype=dtype, rngs=rngs, axes=('embed', 'mlp'))
    self.down = dense(f, d, dtype=dtype, rngs=rngs, axes=('mlp', 'embed'),
                      fan_in_scale=residual_scale(cfg))

  def __call__(self, x):
    hidden = sharding.constrain(self.up(x), ('batch', None, 'act_mlp'))
    return self.down(ACTIVATIONS[self.activation](hidden))


class Block(nnx.Module):
  """Transformer block: self-attention and MLP, each a residual branch with LayerNorm, and the
  layer's own position module (`position`, the scheme's Layer: its per-layer parameters)."""

  def __init__(self, cfg, *, dtype, rngs, causal: bool = True, window: int = 0):
    self.ln_attn = layer_norm(cfg, dtype=dtype, rngs=rngs)
    self.attn = MultiHeadAttention(cfg, dtype=dtype, rngs=rngs, causal=causal, window=window)
    self.ln_mlp = layer_norm(cfg, dtype=dtype, rngs=rngs)
    self.mlp = MLP(cfg, dtype=dtype, rngs=rngs)
    self.dropout_rate = cfg.dropout
    self.post_norm = cfg.norm == 'post'
    self.position = positions_lib.scheme(cfg.position.kind).Layer(cfg, causal=causal, rngs=rngs)

  def __call__(self, x, mask, pos, shared=None, key=None, cache=None, segments=None, layer=0):
    """`shared`: what the stack's position Shared module returned; `layer`: this block's index.
    Returns (output, updated layer cache or None)."""
    k1, k2 = _split(key, 2)
    x = self.position.layer_input(x, pos, shared)
    attend = lambda h: self.attn(h, mask, pos, self.position, shared, cache, segments, layer)
    x, cache = residual(x, attend, self.ln_attn, self.post_norm, self.dropout_rate, k1)
    x, _ = residual(x, lambda h: (self.mlp(h), None), self.ln_mlp, self.post_norm,
                    self.dropout_rate, k2)
    return x, cache


class CrossAttention(nnx.Module):
  """Decoder-to-encoder attention. It carries no position information: positions enter the
  encoder and decoder self-attention only, as in the RoFormer paper's translation model."""

  def __init__(self, cfg, *, dtype, rngs):
    d = cfg.d_model
    self.num_heads, self.head_dim = cfg.num_heads, d // cfg.num_heads
    self.impl = attention.resolve(cfg.attention_impl, dtype=dtype)
    self.q = dense(d, d, dtype=dtype, rngs=rngs, axes=('embed', 'heads'))
    self.kv = dense(d, 2 * d, dtype=dtype, rngs=rngs, axes=('embed', 'heads'))
    self.out = dense(d, d, dtype=dtype, rngs=rngs, axes=('heads', 'embed'),
                     fan_in_scale=residual_scale(cfg))

  def __call__(self, x, memory, mask):
    b, length, _ = x.shape
    q = self.q(x).reshape(b, length, self.num_heads, self.head_dim)
    k, v = jnp.split(self.kv(memory).reshape(b, memory.shape[1], 2 * self.num_heads,
                                             self.head_dim), 2, axis=2)
    out, _ = attention.attend(q, k, v, mask, impl=self.impl, return_probs=False)
    return self.out(out.reshape(b, length, -1))


class DecoderBlock(Block):
  """Decoder block: causal self-attention, cross-attention, MLP."""

  def __init__(self, cfg, *, dtype, rngs):
    super().__init__(cfg, dtype=dtype, rngs=rngs)
    self.ln_cross = layer_norm(cfg, dtype=dtype, rngs=rngs)
    self.cross = CrossAttention(cfg, dtype=dtype, rngs=rngs)

  def __call__(self, x, mask, pos, shared=None, key=None, cache=None, segments=None, layer=0,
               *, memory, memory_mask):
    del segments  # The decoder's self-attention is softmax attention (no FAVOR+).
    k1, k2, k3 = _split(key, 3)
    x = self.position.layer_input(x, pos, shared)
    post, rate = self.post_norm, self.dropout_rate
    attend = lambda h: self.attn(h, mask, pos, self.position, shared, cache, None, layer)
    x, cache = residual(x, attend, self.ln_attn, post, rate, k1)
    x, _ = residual(x, lambda h: (self.cross(h, memory, memory_mask), None), self.ln_cross,
                    post, rate, k2)
    x, _ = residual(x, lambda h: (self.mlp(h), None), self.ln_mlp, post, rate, k3)
    return x, cache


def _position_shared(cfg, *, causal: bool, rngs: nnx.Rngs) -> positions_lib.Shared:
  """The position scheme's stack-wide module (the config was checked before: resolve.py)."""
  return positions_lib.model_scheme(cfg).Shared(cfg, causal=causal, rngs=rngs)


def layer_rope_base(cfg, layer: int) -> float:
  """Layer `layer`'s RoPE base: `model.layer_rope_bases` cycled over the layers, or
  `position.rope.base`."""
  bases = tuple(cfg.layer_rope_bases) if 'layer_rope_bases' in cfg else ()
  return float(bases[layer % len(bases)]) if bases else float(cfg.position.rope.base)


def layer_config(cfg, layer: int) -> ml_collections.ConfigDict:
  """The model config that block `layer` is built from: `cfg` with its layer's position kind
  (`model.layer_kinds`) and RoPE base (`model.layer_rope_bases`), or `cfg` itself."""
  kind = positions_lib.layer_kinds(cfg)[layer]
  base = layer_rope_base(cfg, layer)
  if kind == cfg.position.kind and base == float(cfg.position.rope.base):
    return cfg
  layer_cfg = copy.deepcopy(cfg)
  with layer_cfg.unlocked():
    layer_cfg.position.kind = kind
    layer_cfg.position.rope.base = base
  return layer_cfg


class TiedEmbeddingModel(nnx.Module):
  """Shared by every model: the token embedding, also used (transposed) as the output layer."""

  causal = False  # Whether attention is causal: schemes such as t5 and xpos depend on it.
  # Each stack's position Shared module and its blocks, by attribute name: checkpoints written
  # when the per-layer position parameters lived beside the blocks are converted through them.
  stacks = (('position', 'blocks'),)

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    # Plain fields, not the ConfigDict: the module's graph must stay hashable for jit.
    self.d_model, self.num_heads, self.dropout_rate = cfg.d_model, cfg.num_heads, cfg.dropout
    self.dtype = jnp.dtype(cfg.dtype)
    self.remat = cfg.remat
    self.scan_layers = bool(cfg.scan_layers)
    self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, dtype=self.dtype, rngs=rngs,
                           embedding_init=variables.init(nnx.initializers.normal(stddev=1.0),
                                                         ('vocab', 'embed'), decay=True))

  @property
  def logits_scale(self) -> float:
    """The tied output layer's scale, 1/sqrt(d_model), matching the N(0, 1) init."""
    return self.d_model ** -0.5

  def logits(self, hidden):
    """Tied output layer; float32 logits scaled by `logits_scale`."""
    logits = self.embed.attend(hidden) * jnp.asarray(self.logits_scale, hidden.dtype)
    return logits.astype(jnp.float32)


class Transformer(TiedEmbeddingModel):
  """Token embedding (plus token-type embedding if `type_vocab_size` > 0), position scheme, a
  stack of blocks and a LayerNorm: after the stack (pre-norm) or after the embeddings
  (post-norm, where every block ends in one)."""

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    super().__init__(cfg, rngs=rngs)
    dtype = self.dtype
    self.post_norm = cfg.norm == 'post'
    if cfg.type_vocab_size:
      self.token_type = nnx.Embed(
          cfg.type_vocab_size, cfg.d_model, dtype=dtype, rngs=rngs,
          embedding_init=variables.init(nnx.initializers.normal(stddev=0.02), (None, 'embed'),
                                        decay=True))
    # The scheme's stack-wide module (embedding, shared parameters); each block has its own.
    self.position = _position_shared(cfg, causal=self.causal, rngs=rngs)
    if self.post_norm:
      self.ln_embed = layer_norm(cfg, dtype=dtype, rngs=rngs)
    self.blocks = nnx.List([Block(layer_config(cfg, i), dtype=dtype, rngs=rngs,
                                  causal=self.causal, window=layer_window(cfg, i))
                            for i in range(cfg.num_layers)])
    if not self.post_norm:
      self.ln_final = layer_norm(cfg, dtype=dtype, rngs=rngs)

  def encode(self, tokens, positions, mask, key=None, cache=None, token_types=None,
             segments=None):
    """Hidden states [batch, len, d_model] for integer tokens and positions [batch, len]
    (and token types, for models with a token-type embedding; default all 0).

    With a `cache` (from `init_cache`), tokens are appended at slot cache['index'] and attend
    to every cached slot through `mask`; returns (hidden, updated cache) then.
    """
    keys = _split(key, len(self.blocks) + 1)
    x = self.embed(tokens)
    if hasattr(self, 'token_type'):
      x = x + self.token_type(jnp.zeros_like(tokens) if token_types is None else token_types)
    x = self.position.embed(x, positions)
    if self.post_norm:
      x = self.ln_embed(x)
    x = dropout(x, self.dropout_rate, keys[-1])
    extra = {} if segments is None else {'segments': segments}
    x, cache = stack.run_blocks(self.blocks, self.position(), x, positions, mask, keys, cache,
                                remat=self.remat, scan=self.scan_layers, **extra)
    if not self.post_norm:
      x = self.ln_final(x)
    return x if cache is None else (x, cache)

  def init_cache(self, batch: int, max_len: int) -> dict:
    return stack.empty_cache(batch, max_len, self.blocks, self.num_heads,
                             self.d_model // self.num_heads, self.dtype)

  def encode_segments(self, tokens, positions, segment_ids, key=None, token_types=None):
    """Bidirectional hidden states where packed segments attend only within themselves
    (the encoder of the masked LM and the classifier)."""
    mask = attention.make_mask(segment_ids, segment_ids, causal=False)
    return self.encode(tokens, positions, mask, key, token_types=token_types,
                       segments=segment_ids)


class CausalLM(Transformer):
  """Decoder-only language model: causal mask plus segment masking for packed documents."""

  causal = True

  def __call__(self, tokens, positions, segment_ids, key=None):
    return self.logits(self.hidden(tokens, positions, segment_ids, key))

  def hidden(self, tokens, positions, segment_ids, key=None):
    """The final hidden states [batch, len, d_model], before the output layer."""
    mask = attention.make_mask(segment_ids, segment_ids, causal=True)
    return self.encode(tokens, positions, mask, key, segments=segment_ids)

  def decode(self, tokens, positions, cache):
    """Incremental decoding: logits for `tokens` [batch, len] appended to the cache (one
    sequence per row, occupying slots 0..index+len-1) and the updated cache."""
    hidden, cache = self.encode(tokens, positions, stack.cache_mask(tokens, cache), cache=cache)
    return self.logits(hidden), cache


class MaskedLM(Transformer):
  """Bidirectional encoder with a BERT-style masked-LM head (dense, activation, LayerNorm, then
  the tied embedding plus an output bias). Packed documents attend within their segment."""

  causal = False

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    super().__init__(cfg, rngs=rngs)
    d = cfg.d_model
    self.activation = cfg.activation
    self.head = dense(d, d, dtype=self.dtype, rngs=rngs)
    self.head_ln = layer_norm(cfg, dtype=self.dtype, rngs=rngs)
    self.output_bias = variables.param(jnp.zeros((cfg.vocab_size,), jnp.float32), ('vocab',),
                                       decay=False)

  def __call__(self, tokens, positions, segment_ids, key=None, token_types=None):
    """Float32 logits [batch, len, vocab] at every position."""
    return self.predict(self.encode_segments(tokens, positions, segment_ids, key, token_types))

  def transform(self, hidden):
    """The masked-LM head's dense layer, activation and LayerNorm, before the tied output."""
    return self.head_ln(ACTIVATIONS[self.activation](self.head(hidden)))

  def predict(self, hidden):
    """The masked-LM head on encoder states [..., d_model] (any subset of the positions)."""
    return add_bias(self.logits(self.transform(hidden)), self.output_bias.value)


class Classifier(Transformer):
  """Bidirectional encoder with a pooled classification (or, with one output, regression)
  head: the first token's state through a tanh dense layer (BERT's pooler), or the mean over
  the tokens, then dropout and a linear layer. The encoder's parameters have the same names as
  `MaskedLM`'s, so a pretrained encoder loads into it."""

  causal = False

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    super().__init__(cfg, rngs=rngs)
    d = cfg.d_model
    self.pooling = cfg.pooling
    self.pooler = dense(d, d, dtype=self.dtype, rngs=rngs)
    self.classifier = dense(d, cfg.num_classes, dtype=self.dtype, rngs=rngs)

  def __call__(self, tokens, positions, segment_ids, key=None, token_types=None):
    """Float32 logits [batch, num_classes] for one example per row (segment id 1, 0 = pad)."""
    k1, k2 = _split(key, 2)
    hidden = self.encode_segments(tokens, positions, segment_ids, k1, token_types)
    if self.pooling == 'mean':
      weights = (segment_ids > 0).astype(hidden.dtype)[..., None]
      pooled = (hidden * weights).sum(1) / jnp.maximum(weights.sum(1), 1)
    else:
      pooled = hidden[:, 0]
    pooled = dropout(jnp.tanh(self.pooler(pooled)), self.dropout_rate, k2)
    return self.classifier(pooled).astype(jnp.float32)


class EncoderDecoder(TiedEmbeddingModel):
  """Encoder-decoder Transformer for translation: one position scheme configuration applied to
  the encoder (bidirectional) and the decoder (causal) self-attention, separate instances of it
  for each, a shared source/target vocabulary and tied embeddings."""

  causal = True  # The decoder's self-attention; the encoder's is bidirectional.
  stacks = (('encoder_position', 'encoder_blocks'), ('decoder_position', 'decoder_blocks'))

  def __init__(self, cfg: ml_collections.ConfigDict, *, rngs: nnx.Rngs):
    super().__init__(cfg, rngs=rngs)
    dtype = self.dtype
    self.encoder_position = _position_shared(cfg, causal=False, rngs=rngs)
    self.encoder_blocks = nnx.List([Block(cfg, dtype=dtype, rngs=rngs, causal=False)
                                    for _ in range(cfg.num_layers)])
    self.encoder_ln = layer_norm(cfg, dtype=dtype, rngs=rngs)
    self.decoder_position = _position_shared(cfg, causal=True, rngs=rngs)
    self.decoder_blocks = nnx.List([DecoderBlock(cfg, dtype=dtype, rngs=rngs)
                                    for _ in range(cfg.num_layers)])
    self.decoder_ln = layer_norm(cfg, dtype=dtype, rngs=rngs)

  def encode_source(self, tokens, positions, segment_ids, key=None):
    """Encoder states [batch, src_len, d_model]; packed sources attend within their segment."""
    keys = _split(key, len(self.encoder_blocks) + 1)
    mask = attention.make_mask(segment_ids, segment_ids, causal=False)
    x = self.encoder_position.embed(self.embed(tokens), positions)
    x = dropout(x, self.dropout_rate, keys[-1])
    x, _ = stack.run_blocks(self.encoder_blocks, self.encoder_position(), x, positions, mask,
                            keys, remat=self.remat, scan=self.scan_layers)
    return self.encoder_ln(x)

  def _decode(self, tokens, positions, mask, memory, memory_mask, key=None, cache=None):
    keys = _split(key, len(self.decoder_blocks) + 1)
    x = self.decoder_position.embed(self.embed(tokens), positions)
    x = dropout(x, self.dropout_rate, keys[-1])
    x, cache = stack.run_blocks(self.decoder_blocks, self.decoder_position(), x, positions,
                                mask, keys, cache, remat=self.remat, scan=self.scan_layers,
                                memory=memory, memory_mask=memory_mask)
    return self.logits(self.decoder_ln(x)), cache

  def __call__(self, inputs, inputs_positions, inputs_segment_ids, decoder_inputs,
               targets_positions, targets_segment_ids, key=None):
    """Teacher-forced logits [batch, tgt_len, vocab] for packed source/target pairs: target
    tokens see earlier tokens of their own target and only the source of the same pair."""
    k1, k2 = _split(key, 2)
    memory = self.encode_source(inputs, inputs_positions, inputs_segment_ids, k1)
    self_mask = attention.make_mask(targets_segment_ids, targets_segment_ids, causal=True)
    cross_mask = attention.make_mask(targets_segment_ids, inputs_segment_ids, causal=False)
    return self._decode(decoder_inputs, targets_positions, self_mask, memory, cross_mask, k2)[0]

  def init_cache(self, memory, memory_segment_ids, max_len: int) -> dict:
    """A decoder cache for one source per row; it carries the encoder memory so that beam
    search reorders it with the keys and values."""
    cache = stack.empty_cache(memory.shape[0], max_len, self.decoder_blocks,
                              self.num_heads, self.d_model // self.num_heads, self.dtype)
    return {**cache, 'memory': memory, 'memory_segment_ids': memory_segment_ids}

  def decode(self, tokens, positions, cache):
    """Incremental decoding of target `tokens` [batch, len] at the cache index."""
    cross_mask = attention.make_mask(jnp.ones_like(tokens), cache['memory_segment_ids'],
                                     causal=False)
    return self._decode(tokens, positions, stack.cache_mask(tokens, cache), cache['memory'],
                        cross_mask, cache=cache)


MODELS = {'causal_lm': CausalLM, 'encoder_decoder': EncoderDecoder, 'mlm': MaskedLM,
          'classifier': Classifier}
POOLINGS = ('first', 'mean')


def is_causal(cfg: ml_collections.ConfigDict) -> bool:
  return MODELS[cfg.type].causal


def attention_directions(cfg: ml_collections.ConfigDict) -> tuple[bool, ...]:
  """The causalities of the self-attention stacks of a model type (the position scheme must
  support each): (True,) for the causal LM, (False, True) for the encoder-decoder."""
  return (False, True) if cfg.type == 'encoder_decoder' else (is_causal(cfg),)


def create(cfg: ml_collections.ConfigDict, *, seed: int | jax.Array = 0):
  """Builds the model named by `cfg.type` with parameters drawn from `seed` (an int, or the
  key `jax.random.key(seed)` makes: the same parameters)."""
  if cfg.type not in MODELS:
    raise errors.ConfigError(f'config.model.type={cfg.type!r} is unknown. Fix: one of {sorted(MODELS)}.')
  return MODELS[cfg.type](cfg, rngs=nnx.Rngs(params=seed))


def legacy_param_path(cfg: ml_collections.ConfigDict, path: str) -> str:
  """Where a parameter of a checkpoint written under the earlier layout (every per-layer
  position parameter in one module beside the blocks) is in the model `cfg` builds: a
  '/'-joined path, any prefix (params/, opt_state/0/mu/) kept."""
  return positions_lib.legacy_param_path(path, MODELS[cfg.type].stacks, cfg.position)


def parameter_count(params) -> int:
  """Number of scalars in a tree of (abstract or concrete) parameters."""
  return sum(math.prod(p.shape) for p in jax.tree.leaves(params))


def num_parameters(cfg: ml_collections.ConfigDict) -> int:
  """Parameter count of the model `cfg` builds, from shapes only (nothing is allocated)."""
  return parameter_count(nnx.state(nnx.eval_shape(lambda: create(cfg, seed=0)), nnx.Param))
