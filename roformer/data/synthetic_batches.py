"""Batches of a synthetic task's rows (roformer/data/synthetic.py, ruler_text.py), built in the
calling thread rather than by grain's reader threads: for rows that are computed, not read,
those threads cost more than the rows (SyntheticBatches says how much)."""

import grain
import numpy as np

from roformer.data import passkey_text
from roformer.data import row_cache
from roformer.data import ruler_text
from roformer.data import synthetic


def synthetic_dataset(split, *, seq_len: int, batch_size: int, seed: int, train: bool,
                      shard_index: int = 0, shard_count: int = 1, tokenizer=None):
  """Batches of a synthetic task's rows of seq_len predictions (see roformer.data.synthetic;
  a `passkey_text.Split`'s in `tokenizer`'s ids): training rows drawn without end from the
  run's seed, evaluation rows the split's fixed set (the last batch shorter)."""
  if isinstance(split, passkey_text.Split):
    source = ruler_text.rows(split, tokenizer, seq_len, seed)
  else:
    # Read from the rows a sweep built beforehand, where it did (roformer/data/row_cache.py).
    source = row_cache.read(synthetic.Source(split, seq_len, seed))
  return _Iterable(lambda: SyntheticBatches(source, batch_size, shard_index, shard_count,
                                            drop_remainder=train))


class _Iterable:
  def __init__(self, make):
    self.make = make

  def __iter__(self):
    return self.make()


class SyntheticBatches(grain.DatasetIterator):
  """Batches of a synthetic source's rows, this process's share (rows index, index + count,
  ...), built in the calling thread.

  Not grain's MapDataset -> batch: its reader threads (16, with a buffer of 500 rows that its
  iterator polls row by row) and per-row statistics made a batch of 128 recall rows take 2-4x
  as long as building the rows (docs/performance.md); here a batch costs its rows. The state
  is the one grain's iterator of the same rows has ({'next_index': rows read}), so checkpoints
  written by either resume in the other."""

  def __init__(self, source, batch_size: int, shard_index: int = 0, shard_count: int = 1,
               drop_remainder: bool = True):
    super().__init__()
    self.source, self.batch_size = source, batch_size
    self.shard_index, self.shard_count, self.drop_remainder = (shard_index, shard_count,
                                                               drop_remainder)
    self.rows = len(range(shard_index, len(source), shard_count))
    self.next_index = 0

  def __next__(self) -> dict:
    end = min(self.next_index + self.batch_size, self.rows)
    if end <= self.next_index or (self.drop_remainder and end - self.next_index <
                                  self.batch_size):
      raise StopIteration
    indices = [self.shard_index + self.shard_count * k for k in range(self.next_index, end)]
    self.next_index = end
    if hasattr(self.source, 'stacked'):  # Built as one set of arrays.
      return self.source.stacked(indices)
    rows = [self.source[i] for i in indices]
    return {key: np.stack([row[key] for row in rows]) for key in rows[0]}

  def get_state(self) -> dict:
    return {'next_index': self.next_index}

  def set_state(self, state: dict) -> None:
    self.next_index = int(state['next_index'])
