"""Running a stack of blocks: the Python loop (the reference, and decoding with a key/value
cache) or the blocks stored stacked and run as one `lax.scan` (`config.model.scan_layers`,
roformer/scanned.py), rematerialisation policies, and the cache itself."""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from roformer import attention
from roformer import scanned
from roformer import sharding
from roformer import window_cache


# config.model.remat: what each block keeps for the backward pass ('none': everything; 'full':
# only its input, recomputing the rest; 'dots': matmul outputs; 'dots_no_batch': matmul outputs
# without batch dimensions, i.e. not the attention logits).
REMAT_POLICIES = {
    'none': None,
    'full': None,
    'dots': jax.checkpoint_policies.checkpoint_dots,
    'dots_no_batch': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def build(make_block, num_layers: int, scan: bool, rngs: nnx.Rngs):
  """The container a model keeps its blocks in, `make_block(i, rngs)` creating layer i's: an
  nnx.List run by the loop, or, with `scan` (config.model.scan_layers), the same blocks stored
  stacked and run as one scan (roformer/scanned.py).

  While the model is traced (an abstract build, or the jitted initialisation), each block is
  created in a trace of its own: a nested jit, one call in the trace around it, which XLA
  inlines when it compiles, so the values drawn are the same. flax asks each updated variable
  for its sharding, and under JAX 0.10.2 a tracer's answer walks every equation of its trace,
  which made creating a model in one trace quadratic in its layers (configs/lm.py: 4.3 s at 50
  layers, 18 s at 100, 105 s at 200). Under an eager transformation (vmap, grad) the rngs are
  traced too, and each block then compiles on its own."""
  traced = any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(nnx.state(rngs)))
  blocks = [nnx.jit(functools.partial(make_block, i))(rngs) if traced else make_block(i, rngs)
            for i in range(num_layers)]
  return scanned.ScannedBlocks(blocks) if scan else nnx.List(blocks)


def _block_output(block, x, mask, positions, shared, key, index, extra):
  return block(x, mask, positions, shared, key, None, layer=index, **extra)[0]


def run_blocks(blocks, shared, x, positions, mask, keys, cache=None, remat: str = 'none',
               **extra):
  """Runs x through `blocks`, each with its own position module and `shared` (what the
  stack's position Shared module returned). With a cache, the new positions are written at
  slot cache['index'] and every layer's keys/values are updated; returns (x, updated cache or
  None). `extra` goes to every block (cross-attention memory); `remat` names a REMAT_POLICIES
  entry (used without a cache). Blocks kept stacked (`build`) run as one scan without a cache
  (the same outputs and gradients as the loop) and layer by layer with one."""
  if isinstance(blocks, scanned.ScannedBlocks) and cache is None:
    checkpoint = (None if remat == 'none' else
                  lambda f, **kw: jax.checkpoint(f, policy=REMAT_POLICIES[remat], **kw))
    return blocks.run(shared, x, positions, mask, keys, checkpoint, extra), None
  if cache is not None:
    slot_positions = jax.lax.dynamic_update_slice(
        cache['positions'], positions.astype(jnp.int32), (0, cache['index']))
  new_layers = []
  policy = REMAT_POLICIES[remat]
  per_layer = isinstance(shared, list)  # One value per block (positions.per_layer).
  for i, (block, k) in enumerate(zip(blocks, keys)):
    block_shared = shared[i] if per_layer else shared
    layer_cache = None if cache is None else {
        **cache['layers'][i], 'index': cache['index'], 'positions': slot_positions}
    if remat != 'none' and cache is None:  # Training: recompute inside the backward pass.
      x = nnx.remat(_block_output, policy=policy)(block, x, mask, positions, block_shared, k,
                                                  jnp.int32(i), extra)
    else:
      x, layer_cache = block(x, mask, positions, block_shared, k, layer_cache, layer=i,
                             **extra)
    x = sharding.constrain(x, ('batch', None, None))
    new_layers.append(layer_cache)
  if cache is None:
    return x, None
  return x, {**cache, 'index': cache['index'] + x.shape[1], 'positions': slot_positions,
             'layers': new_layers}


def empty_cache(batch: int, max_len: int, blocks, widths: tuple[int, int, int],
                dtype, rings: bool = True) -> dict:
  """An empty key/value cache for `max_len` slots of each of `blocks` (a plain pytree of
  arrays): keys and values [batch, heads, max_len, width] of `widths` = (heads, key width, value
  width; 0: no values of their own, MLA's latent cache: roformer/latent_attention.py; the slots
  after the heads, or before them for a layer on cuDNN's kernels: its attention's
  `cache_heads_first`, roformer/self_attention.py), and the state a block's position scheme
  keeps per slot, if any. A windowed layer that a ring serves keeps its window's slots alone
  (roformer/window_cache.py), unless `rings` is off: a prompt's own cache, whose queries attend
  over its keys alone, before decode.causal_lm_start keeps their last window in the ring."""
  heads, key_width, value_width = widths
  layers = []
  for block in blocks:
    held = window_cache.slots(block.attn, block.position, max_len) if rings else max_len
    shape = ((lambda w: (batch, heads, held, w)) if block.attn.cache_heads_first
             else (lambda w: (batch, held, heads, w)))
    layer = {'k': jnp.zeros(shape(key_width), dtype)}
    if value_width:
      layer['v'] = jnp.zeros(shape(value_width), dtype)
    state = block.position.cache_state(batch, max_len)
    layers.append(layer if state is None else {**layer, 'position': state})
  return {'index': jnp.int32(0), 'positions': jnp.zeros((batch, max_len), jnp.int32),
          'layers': layers}


def cache_mask(tokens, cache, *, q_segments=None):
  """Causal mask of new `tokens` (at slots index..) over every filled cache slot."""
  max_len = cache['positions'].shape[1]
  slots = cache['index'] + jnp.arange(tokens.shape[1])
  filled = (jnp.arange(max_len) < cache['index'] + tokens.shape[1]).astype(jnp.int32)
  return attention.make_mask(
      jnp.ones_like(tokens) if q_segments is None else q_segments,
      jnp.broadcast_to(filled, (tokens.shape[0], max_len)), causal=True,
      q_index=slots[None], k_index=jnp.arange(max_len)[None])
