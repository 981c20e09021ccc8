"""PoSE (Zhu et al. 2024): training rows' positions skip by chunk, covering the target length;
the draws follow the paper's sampling; evaluation keeps consecutive positions."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import test as test_config
from roformer import errors
from roformer import resolve
from roformer import tasks
from roformer.positions import randomized


def _rows(key, batch=64, length=16, target=48, chunks=2, segments=None):
  pos = jnp.broadcast_to(jnp.arange(length), (batch, length))
  seg = jnp.ones((batch, length), jnp.int32) if segments is None else segments
  return np.asarray(randomized.pose_positions(key, pos, seg, target, chunks))


@pytest.mark.parametrize('chunks', [1, 2, 3, 5])
def test_each_row_is_chunks_of_consecutive_positions_moved_up_by_non_decreasing_skips(chunks):
  length, target = 16, 48
  rows = _rows(jax.random.key(0), length=length, target=target, chunks=chunks)
  for row in rows:
    skip = row - np.arange(length)  # Each token's skip.
    assert skip[0] == 0 and (np.diff(skip) >= 0).all()  # u_0 = 0, never decreasing.
    assert len(np.unique(skip)) <= chunks and len(np.flatnonzero(np.diff(skip))) <= chunks - 1
    assert row.max() <= target - 1  # The target length covered, never passed.


def test_the_skips_follow_the_papers_sampling():
  """Two chunks: the cut is uniform over 1..len-1 and the skip uniform over 0..T-len; three:
  u_2 is drawn from u_1..T-len, so its mean is above u_1's (chi-square / mean checks over many
  rows against the float64 expectations)."""
  length, target = 8, 20
  rows = np.concatenate([_rows(jax.random.key(s), batch=500, length=length, target=target)
                         for s in range(4)])
  skip = rows - np.arange(length)
  cuts = (np.diff(skip) != 0).argmax(axis=1) + 1  # Where the second chunk starts...
  moved = skip[:, -1] > 0  # ...when it moved at all (u_1 = 0 leaves no visible cut).
  room = target - length
  counts = np.bincount(skip[:, -1], minlength=room + 1)
  expected = len(rows) / (room + 1)
  assert ((counts - expected) ** 2 / expected).sum() < 35  # chi2(12) 99.99th pct ~ 35.
  cut_counts = np.bincount(cuts[moved], minlength=length)[1:]
  expected = moved.sum() / (length - 1)
  assert ((cut_counts - expected) ** 2 / expected).sum() < 27  # chi2(6) 99.99th pct ~ 27.
  three = _rows(jax.random.key(9), batch=2000, length=length, target=target, chunks=3)
  skips = three - np.arange(length)
  u2 = skips[:, -1]
  # E[u_1] = room / 2; E[u_2 | u_1] = (u_1 + room) / 2, so E[u_2] = 3 room / 4.
  np.testing.assert_allclose(u2.mean(), 0.75 * room, atol=0.25)


def test_packed_documents_and_padding():
  seg = jnp.asarray([[1] * 5 + [2] * 6 + [0] * 5])
  pos = jnp.asarray([list(range(5)) + list(range(6)) + [0] * 5])
  got = np.asarray(randomized.pose_positions(jax.random.key(3), pos, seg, 64, 2))
  assert (got[0, 11:] == 0).all()  # Padding stays at 0.
  skip = got[0, :11] - np.asarray(pos[0, :11])
  assert (np.diff(skip) >= 0).all() and got[0, :11].max() <= 63


def test_training_rows_skip_and_evaluation_keeps_consecutive_positions():
  cfg = test_config.get_config()
  cfg.train.pose_target_length = 128
  task = tasks.for_config(cfg)
  batch = {'inputs_positions': jnp.broadcast_to(jnp.arange(32), (4, 32)),
           'inputs_segment_ids': jnp.ones((4, 32), jnp.int32)}
  np.testing.assert_array_equal(task.positions(batch, None), batch['inputs_positions'])
  trained = np.asarray(task.positions(batch, jax.random.key(1)))
  assert trained.max() > 31 and trained.max() <= 127


@pytest.mark.parametrize('fields,message', [
    ({'pose_target_length': 32}, 'is not above config.data.seq_len=32'),
    ({'pose_target_length': 128, 'random_positions': 128}, 'both choose the training positions'),
    ({'pose_target_length': 128, 'pose_chunks': 40}, 'pose_chunks=40 is more chunks'),
])
def test_bad_pose_settings_are_one_error_naming_the_field(fields, message):
  cfg = test_config.get_config()
  cfg.train.update(fields)
  with pytest.raises(errors.ConfigError, match=message):
    resolve.validate(cfg)


def test_pose_with_a_scheme_that_reads_no_positions_is_refused():
  cfg = test_config.get_config('none')
  cfg.train.pose_target_length = 128
  with pytest.raises(errors.ConfigError, match='reads no integer positions'):
    resolve.validate(cfg)


