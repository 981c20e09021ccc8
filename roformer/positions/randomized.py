"""Integer training positions other than 0, 1, ..., n - 1, for any scheme that reads positions:
randomized positions (Ruoss et al. 2023, arXiv 2305.16843) and PoSE's skipped chunks
(`pose_positions`, Zhu et al. 2024), each a training-position sampler (`training.py`).

Instead of 0, 1, ..., n - 1, a training sequence of n tokens gets a sorted random subset of
[0, max_position), so the model meets the larger positions (and gaps) that evaluation on longer
sequences will use; evaluation keeps consecutive positions. Relative schemes then see random
gaps, absolute ones random offsets. With packed rows, every segment draws its own subset.
"""

import jax
import jax.numpy as jnp

from roformer import errors
from roformer import specs
from roformer.positions import training


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


def pose_positions(key: jax.Array, positions: jax.Array, segment_ids: jax.Array,
                   target_length: int, chunks: int = 2) -> jax.Array:
  """PoSE (Zhu et al., ICLR 2024, arXiv 2309.10400): int32 [batch, len] training positions
  that skip, so that a window of len tokens covers positions up to `target_length` - 1.

  Each row is cut into `chunks` contiguous chunks at chunks - 1 distinct cut points drawn
  uniformly from 1..len-1; chunk i's positions are moved up by a skip u_i, with u_0 = 0 and
  u_i drawn uniformly from u_{i-1}..target_length - len (the paper's sampling, so the skips do
  not decrease). `positions` (a row's packed documents restart theirs at 0) get the skip of the
  chunk each token falls in: they keep their order within a chunk, and a document after a cut
  starts at that chunk's skip; padding (segment id 0) stays at 0. Evaluation uses consecutive
  positions.
  """
  batch, length = positions.shape
  if not length < target_length < 2**31 - 1 or not 1 <= chunks <= length:
    raise ValueError(f'PoSE needs len {length} < target_length {target_length} and 1 <= '
                     f'chunks {chunks} <= len.')
  room = target_length - length

  def row(k):
    k_cut, k_skip = jax.random.split(k)
    cuts = jnp.sort(jax.random.choice(k_cut, jnp.arange(1, length), (chunks - 1,),
                                      replace=False))
    skips, skip = [jnp.zeros((), jnp.int32)], jnp.zeros((), jnp.int32)
    for sub in jax.random.split(k_skip, chunks - 1):
      skip = jax.random.randint(sub, (), skip, room + 1, jnp.int32)
      skips.append(skip)
    chunk_of = jnp.searchsorted(cuts, jnp.arange(length), side='right')
    return jnp.stack(skips)[chunk_of]

  skip = jax.vmap(row)(jax.random.split(key, batch))
  return jnp.where(segment_ids > 0, positions.astype(jnp.int32) + skip, 0)


@training.register('random')
class RandomPositions(training.Sampler):
  """`config.train.random_positions` N > 0: each training row's positions a sorted random
  subset of [0, N) (`randomized_positions`); evaluation keeps 0, 1, ...; 0: off."""

  options = {'random_positions': specs.Int(0, 2**31 - 1, default=0)}
  switch = 'random_positions'
  seed = 2305

  @classmethod
  def validate(cls, config):
    top, seq_len = config.train.random_positions, config.data.seq_len
    if not seq_len <= top < 2**31 // (seq_len + 2):
      raise errors.ConfigError(
          f'config.train.random_positions={top} is below config.data.seq_len={seq_len} (a '
          'row needs that many distinct positions) or too large. Fix: a value from '
          f'{seq_len} (e.g. 8 x seq_len, the longest evaluation length).')

  @classmethod
  def draw(cls, key, batch, train):
    return randomized_positions(key, batch['inputs_segment_ids'], train.random_positions)


@training.register('pose')
class PoSE(training.Sampler):
  """`config.train.pose_target_length` T > 0: PoSE cuts each training row into `pose_chunks`
  chunks of random lengths and moves chunk i's positions up by a random, non-decreasing skip,
  so that rows of data.seq_len cover positions up to T - 1 (`pose_positions`); evaluation keeps
  0, 1, ...; 0: off. T is at most 2**31 - 2: the positions are int32."""

  options = {'pose_target_length': specs.Int(0, 2**31 - 2, default=0),
             'pose_chunks': specs.Int(1, 1024, default=2)}
  switch = 'pose_target_length'
  seed = 2309

  @classmethod
  def validate(cls, config):
    t, seq_len = config.train, config.data.seq_len
    if t.pose_target_length <= seq_len:
      raise errors.ConfigError(
          f'config.train.pose_target_length={t.pose_target_length} is not above '
          f'config.data.seq_len={seq_len}: PoSE trains rows of seq_len to cover a longer '
          f'length. Fix: a target above {seq_len} (e.g. 4 x seq_len).')
    if t.pose_chunks > seq_len:
      raise errors.ConfigError(
          f'config.train.pose_chunks={t.pose_chunks} is more chunks than a row of '
          f"config.data.seq_len={seq_len} tokens has. Fix: 2 (the paper's) or at most "
          f'{seq_len}.')

  @classmethod
  def draw(cls, key, batch, train):
    return pose_positions(key, batch['inputs_positions'], batch['inputs_segment_ids'],
                          train.pose_target_length, train.pose_chunks)
