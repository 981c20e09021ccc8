"""A sliding-window layer's decoding cache as a ring of its window's slots.

A layer with a window of W (config.model.layer_windows, a Mistral or Gemma checkpoint's sliding
window, a chunk's length) never reads a key more than W - 1 slots before its query, so decoding
needs only the last W keys and values. Where the layer's cache may hold them out of order, it
keeps W slots and writes the key of cache slot s at ring slot s mod W: its memory and each
step's reads are the window's, not the whole call's (a hybrid stack's global layers keep every
slot). The cache's other arrays (the positions of every slot, the index) are the stack's, as for
every layer, and the mask a layer receives stays one over every cache slot: a ring layer reads
its columns at the slots its keys hold.

A ring serves a layer that computes each key's terms from that key's position alone
(`positions.base.Layer.keys_by_position_alone`: RoPE and its static scalings, RoPE-ID, the
absolute codes added to the input, no position at all), through the softmax with no distance
remap; the others (a bias, CoPE's counts, FoX's and PaTH's per-slot state, frequencies that
follow the row's length, stick-breaking's order) keep every slot.

A call of one token writes its key first and attends over the ring in place: the key it
overwrites, W slots back, is outside its window. A longer call attends over the ring before it
and its own keys, then keeps the last W of them. Generation fills the prompt into a cache of its
own slots instead, with no ring (its queries attend over its keys alone), and keeps their last
W in the ring after (decode.causal_lm_start)."""

import jax
import jax.numpy as jnp

from roformer import attention


def slots(module, position, max_len: int) -> int:
  """The slots of attention `module`'s cache (roformer/self_attention.py) for a call of
  `max_len` cache slots: its window's where a ring serves it and the window is the smaller."""
  ring = (module.window and module.window < max_len
          and module.kind.decodes_over_a_ring(module, position))
  return module.window if ring else max_len


def ring_size(layer_cache: dict, heads_first: bool) -> int:
  """The slots of a layer's cache (keys, values and the stack's `positions` over every slot)
  where it is a ring, holding fewer slots than the cache has; else 0."""
  held = layer_cache['k'].shape[2 if heads_first else 1]
  return held if held < layer_cache['positions'].shape[1] else 0


def key_slots(index, ring: int, length: int) -> jax.Array:
  """The cache slot of each key a call of `length` tokens at slots index.. attends over
  ([ring] for one token, the ring after its write; [ring + length] otherwise, the ring before
  the call then its own tokens); < 0 where a ring slot holds no key yet."""
  j = jnp.arange(ring)
  if length == 1:  # Ring slot j holds the last slot <= index that is j mod ring.
    return index - (index - j) % ring
  before = index - 1 - (index - 1 - j) % ring  # The last slot < index that is j mod ring.
  return jnp.concatenate([before, index + jnp.arange(length)])


def attend_over(cached, new, index, heads_first: bool):
  """(the keys (or values) a call attends over [batch, slots, heads, width], as `key_slots`
  orders them; the ring after the call), for `cached` a ring of the layout `heads_first`
  ([batch, heads, ring, width], else [batch, ring, heads, width]) and `new` [batch, length,
  heads, width] the call's own, written at slots index..index + length - 1."""
  axis = 2 if heads_first else 1
  ring, length = cached.shape[axis], new.shape[1]
  turn = (lambda t: jnp.swapaxes(t, 1, 2)) if heads_first else (lambda t: t)
  new = new.astype(cached.dtype)
  if length == 1:
    at = [0] * cached.ndim
    at[axis] = index % ring
    kept = jax.lax.dynamic_update_slice(cached, turn(new), at)
    return turn(kept), kept
  last = new[:, -ring:]  # The ones the ring keeps, at distinct ring slots.
  where = (index + length - last.shape[1] + jnp.arange(last.shape[1])) % ring
  kept = (cached.at[:, :, where].set(turn(last)) if heads_first
          else cached.at[:, where].set(last))
  return jnp.concatenate([turn(cached), new], axis=1), kept


def mask_and_positions(mask, slot_positions, slots: jax.Array, window: int, first_slot, length):
  """The mask [.., q_len, len(slots)] and key positions [batch, len(slots)] of a ring call:
  `mask` (over every cache slot) and the cache's `slot_positions` read at the keys' `slots`,
  with the window of queries at slots first_slot.. and the ring's empty slots masked."""
  at = jnp.maximum(slots, 0)
  mask = jnp.take(mask, at, axis=-1) & (slots >= 0)
  mask = mask & attention.window_mask(first_slot + jnp.arange(length), slots, window)
  return mask, jnp.take(slot_positions, at, axis=1)
