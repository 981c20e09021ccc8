"""Running a stack of blocks: the Python loop (the reference, and decoding with a key/value
cache), the same computation as one `lax.scan` over the blocks (`config.model.scan_layers`),
rematerialisation policies, and the cache itself."""

import jax
import jax.numpy as jnp
from flax import nnx

from roformer import attention
from roformer import sharding


# config.model.remat: what each block keeps for the backward pass ('none': everything; 'full':
# only its input, recomputing the rest; 'dots': matmul outputs; 'dots_no_batch': matmul outputs
# without batch dimensions, i.e. not the attention logits).
REMAT_POLICIES = {
    'none': None,
    'full': None,
    'dots': jax.checkpoint_policies.checkpoint_dots,
    'dots_no_batch': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def _stacked(blocks):
  """The blocks as one graph and their states stacked along a new leading axis. The blocks of a
  stack are built alike, so their graphs are equal; a ValueError says so if one differs."""
  graphdef, first = nnx.split(blocks[0])
  states = [first]
  for i, block in enumerate(blocks[1:], 1):
    other, state = nnx.split(block)
    if other != graphdef:
      raise ValueError(f'block {i} differs in structure from block 0, so the stack cannot be '
                       'scanned; run it with config.model.scan_layers=False.')
    states.append(state)
  return graphdef, jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)


def _scan_blocks(blocks, shared, x, positions, mask, keys, remat, extra):
  """`run_blocks` without a cache as one `lax.scan` over the stacked block states: one block's
  computation is traced and compiled once, whatever the depth. The states are stacked at every
  call (the parameters keep the per-block layout of the loop, so checkpoints, the sharding rules
  and decoding are the same either way); the stack is one copy of the blocks' parameters, and
  its gradient is the slices of the stacked gradient."""
  graphdef, stacked = _stacked(blocks)
  n = len(blocks)
  layer_keys = None if keys[0] is None else jnp.stack(keys[:n])

  def body(h, xs):
    state, key, index = xs
    block = nnx.merge(graphdef, state)
    h = block(h, mask, positions, shared, key, None, layer=index, **extra)[0]
    return sharding.constrain(h, ('batch', None, None)), None

  if remat != 'none':  # Training: recompute inside the backward pass.
    body = jax.checkpoint(body, policy=REMAT_POLICIES[remat])
  x, _ = jax.lax.scan(body, x, (stacked, layer_keys, jnp.arange(n, dtype=jnp.int32)))
  return x


def _block_output(block, x, mask, positions, shared, key, index, extra):
  return block(x, mask, positions, shared, key, None, layer=index, **extra)[0]


def run_blocks(blocks, shared, x, positions, mask, keys, cache=None, remat: str = 'none',
               scan: bool = False, **extra):
  """Runs x through `blocks`, each with its own position module and `shared` (what the
  stack's position Shared module returned). With a cache, the new positions are written at
  slot cache['index'] and every layer's keys/values are updated; returns (x, updated cache or
  None). `extra` goes to every block (cross-attention memory); `remat` names a REMAT_POLICIES
  entry (used without a cache); `scan` runs the blocks as one `lax.scan` (without a cache: the
  same outputs and gradients as the loop, one block compiled instead of all)."""
  if scan and cache is None:
    return _scan_blocks(blocks, shared, x, positions, mask, keys, remat, extra), None
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


def empty_cache(batch: int, max_len: int, blocks, num_heads: int, head_dim: int,
                dtype) -> dict:
  """An empty key/value cache for `max_len` slots of each of `blocks` (a plain pytree of
  arrays): keys, values, and the state a block's position scheme keeps per slot, if any."""
  shape = (batch, max_len, num_heads, head_dim)
  layers = []
  for block in blocks:
    layer = {'k': jnp.zeros(shape, dtype), 'v': jnp.zeros(shape, dtype)}
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
