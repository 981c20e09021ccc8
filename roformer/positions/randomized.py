"""Randomized positions (Ruoss et al. 2023, arXiv 2305.16843): a training option for any scheme
that reads integer positions.

Instead of 0, 1, ..., n - 1, a training sequence of n tokens gets a sorted random subset of
[0, max_position), so the model meets the larger positions (and gaps) that evaluation on longer
sequences will use; evaluation keeps consecutive positions. Relative schemes then see random
gaps, absolute ones random offsets. With packed rows, every segment draws its own subset.
"""

import jax
import jax.numpy as jnp


def randomized_positions(key: jax.Array, segment_ids: jax.Array, max_position: int) -> jax.Array:
  """int32 [batch, len] positions: within each packed segment (segment id > 0) a sorted subset
  of [0, max_position) drawn uniformly without replacement; 0 on padding (segment id 0).

  Each row draws `len` distinct values (a uniform random subset, in random order); a segment
  takes the values at its own indices, which are then a uniform random subset of their own
  size, and they are sorted within the segment by sorting the row on (segment, value). Packed
  segments are contiguous runs in increasing order of id, so this keeps each segment's slots.
  """
  batch, length = segment_ids.shape
  if not length <= max_position < 2**31 // (length + 2):  # The sort keys fit in int32.
    raise ValueError(f'max_position={max_position} must be in [{length}, '
                     f'{2**31 // (length + 2)}) for sequences of {length}.')
  keys = jax.random.split(key, batch)
  draw = jax.vmap(lambda k: jax.random.choice(k, max_position, (length,), replace=False))(keys)
  draw = draw.astype(jnp.int32)
  # Padding sorts after every segment: segment ids are at most `length`.
  group = jnp.where(segment_ids > 0, segment_ids, length + 1).astype(jnp.int32)
  ordered = jnp.sort(group * max_position + draw, axis=-1)
  return jnp.where(segment_ids > 0, ordered % max_position, 0)
