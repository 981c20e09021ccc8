"""Self-attention and cross-attention: the projections, the head layout and the key/value cache
around `roformer.attention`'s kernels, with every position signal taken from the block's
position module (its hooks).

The head layout: `model.num_heads` query heads share `model.num_kv_heads` key/value heads
(grouped-query attention, Ainslie et al. 2023; multi-query with one): query head h reads
key/value head h // (num_heads / num_kv_heads), as Llama's `repeat_kv`. Each key/value head is
repeated for the query heads of its group after the cache, so every position scheme sees the
same per-head keys as with full multi-head attention, except on a decoding step's plain softmax
path (below). With multi-head latent attention (`model.mla`, roformer/latent_attention.py) the
queries, keys and values come from its latent projections instead, every head with its own.

The decoding cache keeps the key/value heads only, as [batch, kv_heads, slots, width]: each
head's slots are contiguous, so a step's products read the cache in place (as [batch, slots,
kv_heads, width] for cuDNN's kernels, which take that layout). Where the layer's
rotation turns each key by its own position alone (`rotates_keys_alone`: RoPE and its static
scalings, no remap) the keys are rotated once, as they are written, and cached rotated; where
the step attends by the plain softmax (`AttentionKind.takes_grouped_keys`), the query heads of a
group read their key head without repeating it (`attention.grouped_logits`). Otherwise every
step transposes, rotates and repeats the cached keys as the full pass does its own. Either way
a step computes what the full pass computes (tests/test_decode.py).
"""

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from roformer import attention
from roformer import attention_options
from roformer import errors
from roformer import fused_bias
from roformer import latent_attention
from roformer import layers
from roformer import positions as positions_lib
from roformer import sharding
from roformer import window_cache


def kv_heads(cfg) -> int:
  """The number of key/value heads: `model.num_kv_heads`, 0 meaning one per query head."""
  return int(cfg.num_kv_heads) or cfg.num_heads


def layer_window(cfg, layer: int) -> int:
  """Layer `layer`'s sliding window (positions.layer_windows; 0: the whole causal context)."""
  return positions_lib.layer_windows(cfg)[layer]


def layer_chunk(cfg, layer: int) -> int:
  """Layer `layer`'s chunk of positions (`model.layer_chunks` cycled over the layers; 0: no
  chunks)."""
  pattern = tuple(cfg.layer_chunks) if 'layer_chunks' in cfg else ()
  return int(pattern[layer % len(pattern)]) if pattern else 0


def chunk_segments(segments: jax.Array, pos: jax.Array, chunk: int) -> jax.Array:
  """Packed segment ids [batch, len] split at every `chunk`-th position of each document, so
  that a kernel taking segments (cuDNN, the fused ones) attends within chunks: each run of one
  segment and one chunk numbered in order along the row (a document is one run of slots);
  padding (0) stays 0."""
  part = pos // chunk
  starts = jnp.concatenate([jnp.ones_like(segments[:, :1], bool),
                            (segments[:, 1:] != segments[:, :-1]) | (part[:, 1:] != part[:, :-1])],
                           axis=1)
  return jnp.where(segments > 0, jnp.cumsum(starts, axis=1), 0).astype(segments.dtype)


def attention_config(cfg) -> ml_collections.ConfigDict:
  """`config.model.attention`, its declared defaults where a model config has none."""
  if 'attention' in cfg:
    return cfg.attention
  return ml_collections.ConfigDict(attention_options.DEFAULTS)


class MultiHeadAttention(nnx.Module):
  """Self-attention whose position information comes entirely from the scheme's hooks (the
  block's position module), and whose kind and switches are those of `config.model.attention`,
  each a module of roformer/attention_options/ that this one calls through its hooks. Every
  layer's is built alike but for its window and chunk, so the blocks of a stack repeat with the
  period of the per-layer settings (roformer/scanned.py)."""

  def __init__(self, cfg: ml_collections.ConfigDict, *, dtype, rngs: nnx.Rngs,
               causal: bool = True, window: int = 0, chunk: int = 0):
    d = cfg.d_model
    # > 0: query i sees keys i - window + 1 .. i (a sliding window).
    # A chunk of C positions holds every key its query sees within the last C slots (positions
    # advance by at least one a slot), so the kernels and the causal blocks take it as that
    # window too (the narrower where both are set).
    self.window = min(w for w in (window, chunk) if w) if window or chunk else 0
    self.chunk = chunk  # > 0: query at position p sees the keys at positions of its p // chunk.
    self.num_heads = cfg.num_heads
    self.head_dim = positions_lib.head_dim(cfg)
    caps = positions_lib.capabilities(cfg.position.kind)
    att = attention_config(cfg)
    self.attention_kind = att.kind
    self.option_fields = tuple(o.field for o in attention_options.enabled(att))
    # A training-free distance remap (the position layer's `remapped_logits`), einsum path.
    self.remap = positions_lib.scheme(cfg.position.kind).remaps(cfg)
    allowed = set(caps.implementations) & attention_options.implementations(att)
    self.latent = latent_attention.enabled(cfg)
    self.latent_cache = latent_attention.latent_cache(cfg)  # Decodes in the absorbed form.
    self.value_dim = latent_attention.value_dim(cfg)
    if self.value_dim != self.head_dim:  # The fused kernels take values as wide as the keys.
      allowed -= {'pallas'}
    if self.remap:
      allowed &= {'einsum'}
    # The kernel where it was timed faster: its own backward pass (without the hand-written
    # gradients it runs the plain form, the bias materialised) and heads Triton's blocks take.
    self.impl = attention.resolve(
        cfg.attention_impl, dtype=dtype, allowed=allowed,
        fused_first=(caps.fused_first and fused_bias.triton_takes(self.head_dim)
                     and cfg.get('custom_gradients') is not False))
    if (self.impl == 'pallas' and jax.default_backend() == 'gpu'
        and not fused_bias.triton_takes(self.head_dim)):  # Else Triton's compile traceback.
      raise errors.ConfigError(
          f'model.attention_impl=pallas runs the fused kernels through Triton on a GPU, whose '
          f'blocks take heads of a power of 2 and at least 16 wide; the heads are '
          f'{self.head_dim} wide. Fix: attention_impl=auto, or a head width (model.head_dim, '
          'or d_model / num_heads) such as 16, 32 or 64.')
    # Calls the fused kernels do not take (a key/value cache, rows without packed segments)
    # run what 'auto' chooses without them; an explicit 'pallas' runs the einsum path there.
    self.unfused_impl = attention.resolve(cfg.attention_impl, dtype=dtype,
                                          allowed=allowed - {'pallas'})
    # With a cache: the same, but XLA's kernel for MLA's absorbed form, whose heads
    # (kv_rank + rope_dim: DeepSeek-V3's 576) are wider than cuDNN's flash kernels take (256).
    self.cache_impl = ('xla' if self.latent_cache and self.unfused_impl == 'cudnn'
                       else self.unfused_impl)
    # The cache's layout (stack.empty_cache): heads first, where a step's products read it in
    # place; slots first for cuDNN's kernels, which take [batch, slots, heads, width] and would
    # otherwise be handed a transposed copy of the cache at each step.
    self.cache_heads_first = self.cache_impl != 'cudnn'
    self.value_term, self.computes_logits = caps.value_term, caps.computes_logits
    self.causal = causal
    # Causal self-attention without a cache skips the query blocks' keys past their last row.
    self.causal_block = cfg.causal_block if causal else 0
    # Set by roformer/sinks.py: the einsum path, and each call sows its attention weights
    # [batch, heads, q_len, k_len] as the Intermediate `attention_probs`.
    self.record_probs = False
    self.num_kv_heads = kv_heads(cfg)  # Before the options, whose parameters may follow it.
    self.kind.init(self, cfg, att, caps, rngs, dtype)
    for option in self.options:
      option.init(self, cfg, att, caps, rngs, dtype)
    if self.latent:  # MLA's queries, keys and values (roformer/latent_attention.py).
      self.projections = latent_attention.LatentProjections(cfg, dtype=dtype, rngs=rngs)
    else:
      width = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim  # [q | k | v] columns.
      self.qkv = layers.linear(cfg, d, width, dtype=dtype, rngs=rngs, axes=('embed', 'heads'),
                               use_bias=layers.has_bias(cfg, 'qkv'))
    self.out = layers.linear(cfg, self.num_heads * self.value_dim, d, dtype=dtype, rngs=rngs,
                             axes=('heads', 'embed'), residual=True,
                             use_bias=layers.has_bias(cfg, 'out'))

  @property
  def kind(self) -> attention_options.AttentionKind:
    return attention_options.KINDS[self.attention_kind]

  @property
  def options(self) -> tuple[attention_options.AttentionOption, ...]:
    """The switches that are on, in the order their hooks run."""
    return tuple(attention_options.OPTIONS[f] for f in self.option_fields)

  def absorbs(self, cache) -> bool:
    """Whether a call with `cache` runs MLA's absorbed form: one key head, the values read
    from the cached keys (roformer/latent_attention.py)."""
    return bool(self.latent_cache) and cache is not None

  def __call__(self, x, mask, pos, position: positions_lib.Layer, shared=None, cache=None,
               segments=None, layer=0):
    """Self-attention over x with the block's `position` module (`shared`: what the stack's
    Shared module returned). With `cache` ({'k', 'v'} [batch, kv_heads, max_len, head_dim],
    the values value_dim wide, or MLA's latent alone; 'positions' [batch, max_len], 'index'),
    x's keys and values are written at slots index.. and the queries attend over the whole
    cache. Keys and values are cached before any position hook but a rotation of each key by
    its own position (module docstring), so every scheme sees the same keys as without a
    cache. `segments`
    (packed segment ids) is what FAVOR+ reads instead of the dense mask, and what lets
    cuDNN run with sequence lengths when every row is one document; `layer` (an int or
    an int32 scalar) seeds FAVOR+'s random features and sets differential attention's
    lambda_init. Returns (output, updated layer cache or None)."""
    b, length, _ = x.shape
    ctx = position.prepare(x, pos, shared)
    h, g = self.num_heads, self.num_kv_heads
    absorbed = self.absorbs(cache)
    if absorbed:  # Queries p + r wide, one key head [k_R | c]; the values, c, after the cache.
      (q, k), v = self.projections.absorbed(x), None
    elif self.latent:
      q, k, v = self.projections(x)
    else:
      q, k, v = jnp.split(self.qkv(x).reshape(b, length, h + 2 * g, self.head_dim), (h, h + g),
                          axis=2)
    for option in self.options:
      q, k, v = option.projections(self, q, k, v)
    q = sharding.constrain(q, ('batch', None, 'act_heads', None))
    for option in self.options:  # Before the cache and any rotation.
      q, k = option.queries_keys(self, q, k)
    k_pos = pos
    first_slot = 0 if cache is None else cache['index']  # The queries' first key slot.
    make_site = lambda k_pos, ctx, cache, fills_cache=False: attention_options.Site(
        pos=pos, k_pos=k_pos, position=position, ctx=ctx, cache=cache, segments=segments,
        layer=layer, first_slot=first_slot, fills_cache=fills_cache)
    # Decoding: keys turned by their own positions alone are cached rotated (but where the
    # absorbed form's values, read from the cached keys, would be turned or scaled too).
    early = (cache is not None and self.kind.rotates_before_cache(self, position)
             and (not absorbed or position.keeps_unrotated_dims()))
    if early:
      q, k = self.kind.rotate(self, q, k, make_site(pos, ctx, None))
    grouped = False
    ring = 0 if cache is None else window_cache.ring_size(cache, self.cache_heads_first)
    if ring:  # The window's keys alone, out of order (roformer/window_cache.py).
      write = lambda old, new: window_cache.attend_over(old, new, cache['index'],
                                                        self.cache_heads_first)
    elif cache is not None:
      # [batch, slots, kv_heads, width] as the layer computes, whatever the cache's layout.
      turn = (lambda t: jnp.swapaxes(t, 1, 2)) if self.cache_heads_first else (lambda t: t)
      at = (0, 0, cache['index'], 0) if self.cache_heads_first else (0, cache['index'], 0, 0)

      def write(old, new):  # Read in place by the products (the transposes fold into them).
        updated = jax.lax.dynamic_update_slice(old, turn(new).astype(old.dtype), at)
        return turn(updated), updated
    if cache is not None:
      k, kept = write(cache['k'], k)
      kept = {'k': kept}
      if absorbed:
        v = k[..., self.projections.rope_dim:]
      else:
        v, kept['v'] = write(cache['v'], v)
      k_pos = cache['positions']  # Positions of every slot, the new ones included.
      if ring:
        slots = window_cache.key_slots(cache['index'], ring, length)
        mask, k_pos = window_cache.mask_and_positions(mask, k_pos, slots, self.window,
                                                      first_slot, length)
      ctx, state = position.extend_cache(ctx, cache.get('position'), cache['index'])
      cache = {**kept, **({} if state is None else {'position': state})}
      # Grouped heads where no rotation follows (a scheme may turn each query head's keys).
      grouped = early and self.kind.takes_grouped_keys(self)
    if not (absorbed or grouped):  # The absorbed form's one key head: broadcast.
      k, v = (sharding.constrain(attention.expand_heads(t, h),
                                 ('batch', None, 'act_heads', None)) for t in (k, v))
    if self.window and not ring:
      mask = mask & attention.window_mask(first_slot + jnp.arange(length), k.shape[1],
                                          self.window)
    if self.chunk:  # Keys of the query's own chunk alone.
      mask = mask & (pos[:, :, None] // self.chunk == k_pos[:, None, :] // self.chunk)[:, None]
      if segments is not None and cache is None:
        segments = chunk_segments(segments, pos, self.chunk)
    # A call as long as its (whole-slot) cache starts at slot 0: a prompt filling its own cache.
    site = make_site(k_pos, ctx, cache, fills_cache=cache is not None and not ring
                     and k.shape[1] == length)
    if not early:
      q, k = self.kind.rotate(self, q, k, site)
    v = position.rotate_value(v, k_pos, ctx)
    for option in self.options:
      v = option.values(self, v)
    for option in self.options:
      q = option.queries(self, q, pos)
    out, probs = self.kind.attend(self, q, k, v, mask, site)
    if self.record_probs:
      self.sow(nnx.Intermediate, 'attention_probs', probs)
    if self.value_term:
      out = out + position.value_term(probs, pos, k_pos, ctx)
    if absorbed:
      out = self.projections.absorbed_outputs(out)
    for option in self.options:
      out = option.outputs(self, out, x, layer)
    return self.out(out.reshape(b, length, -1)), cache


class CrossAttention(nnx.Module):
  """Decoder-to-encoder attention. It carries no position information: positions enter the
  encoder and decoder self-attention only, as in the RoFormer paper's translation model."""

  def __init__(self, cfg, *, dtype, rngs):
    d = cfg.d_model
    self.num_heads, self.head_dim = cfg.num_heads, positions_lib.head_dim(cfg)
    width = self.num_heads * self.head_dim
    self.impl = attention.resolve(cfg.attention_impl, dtype=dtype)
    self.q = layers.linear(cfg, d, width, dtype=dtype, rngs=rngs, axes=('embed', 'heads'))
    self.kv = layers.linear(cfg, d, 2 * width, dtype=dtype, rngs=rngs, axes=('embed', 'heads'))
    self.out = layers.linear(cfg, width, d, dtype=dtype, rngs=rngs, axes=('heads', 'embed'),
                             residual=True)

  def __call__(self, x, memory, mask):
    b, length, _ = x.shape
    q = self.q(x).reshape(b, length, self.num_heads, self.head_dim)
    k, v = jnp.split(self.kv(memory).reshape(b, memory.shape[1], 2 * self.num_heads,
                                             self.head_dim), 2, axis=2)
    out, _ = attention.attend(q, k, v, mask, impl=self.impl, return_probs=False)
    return self.out(out.reshape(b, length, -1))

