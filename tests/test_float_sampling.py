"""Random float sampling: sorted uniform training positions per packed segment (against the order
statistics of the uniform distribution), the evaluation grid by hand, the checks, and a run
that trains and evaluates with it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import test as test_config
from roformer import errors
from roformer import resolve
from roformer import saved_config
from roformer import tasks
from roformer.positions import float_sampling


def test_training_positions_are_sorted_uniform_draws_within_each_segment():
  seg = jnp.asarray([[1] * 5 + [2] * 6 + [0] * 3, [1] * 14])
  got = np.asarray(float_sampling.float_positions(jax.random.key(0), seg, 32.0))
  assert got.dtype == np.float32
  assert (got[0, 11:] == 0).all()  # Padding.
  for row, spans in ((0, [(0, 5), (5, 11)]), (1, [(0, 14)])):
    for a, b in spans:
      assert (np.diff(got[row, a:b]) >= 0).all()
      assert got[row, a:b].min() >= 0 and got[row, a:b].max() < 32


def test_the_kth_position_has_the_uniform_order_statistics_mean():
  """The k-th smallest of n uniform draws on [0, S) has mean S k / (n + 1) (k = 1..n)."""
  n, top, rows = 8, 10.0, 4000
  seg = jnp.ones((rows, n), jnp.int32)
  got = np.asarray(float_sampling.float_positions(jax.random.key(1), seg, top))
  want = top * np.arange(1, n + 1) / (n + 1)
  # Each mean has a standard error below S / (2 sqrt(rows)) = 0.08.
  np.testing.assert_allclose(got.mean(axis=0), want, atol=0.25)
  assert len({tuple(r) for r in got[:50]}) == 50  # A new draw per row.


def test_the_evaluation_grid_by_hand():
  pos = jnp.broadcast_to(jnp.arange(4), (1, 4))
  np.testing.assert_allclose(float_sampling.evaluation_positions(pos, 8), [[0.5, 1.5, 2.5, 3.5]])
  pos = jnp.broadcast_to(jnp.arange(16), (1, 16))  # Twice the range: cells of 1/2.
  np.testing.assert_allclose(float_sampling.evaluation_positions(pos, 8)[0, :3],
                             [0.25, 0.75, 1.25])
  assert float(float_sampling.evaluation_positions(pos, 8)[0, -1]) == pytest.approx(7.75)
  packed = jnp.asarray([[0, 1, 2, 0, 1]])  # Segments restart their positions.
  np.testing.assert_allclose(float_sampling.evaluation_positions(packed, 10),
                             [[0.5, 1.5, 2.5, 0.5, 1.5]])


def test_the_task_draws_while_training_and_evaluates_on_the_grid():
  cfg = test_config.get_config()
  cfg.train.float_positions = 64
  task = tasks.for_config(cfg)
  batch = {'inputs_positions': jnp.broadcast_to(jnp.arange(32), (4, 32)),
           'inputs_segment_ids': jnp.ones((4, 32), jnp.int32)}
  np.testing.assert_allclose(task.positions(batch, None), batch['inputs_positions'] + 0.5)
  trained = np.asarray(task.positions(batch, jax.random.key(1)))
  assert trained.dtype == np.float32 and trained.max() < 64 and trained.max() > 31
  assert (trained % 1 != 0).mean() > 0.99  # Real numbers, not integers.
  assert resolve.trained_positions(cfg) == (64, 'config.train.float_positions')


@pytest.mark.parametrize('fields,message', [
    ({'train.float_positions': 64, 'model.position.kind': 't5'}, 'does not declare that it reads'),
    ({'train.float_positions': 64, 'train.random_positions': 64}, 'both choose'),
    ({'train.float_positions': 16}, 'below config.data.seq_len'),
    ({'train.float_positions': 64, 'model.position.kind': 'none'}, 'reads no integer'),
])
def test_bad_settings_are_one_error_naming_the_field(fields, message):
  cfg = test_config.get_config()
  for dotted, value in fields.items():
    group, name = dotted.rsplit('.', 1)
    node = cfg
    for part in group.split('.'):
      node = node[part]
    node[name] = value
  with pytest.raises(errors.ConfigError, match=message):
    resolve.validate(cfg)


def test_a_run_trains_and_evaluates_with_float_positions(tmp_path):
  from roformer import loop  # pylint: disable=import-outside-toplevel
  cfg = test_config.get_config()
  cfg.train.float_positions = cfg.data.seq_len
  cfg.train.update(steps=2, eval_every=2, checkpoint_every=2, log_every=1, eval_batches=1)
  last = loop.train_and_evaluate(cfg, str(tmp_path / 'w'))
  assert np.isfinite(last['validation']['loss'])
  saved = saved_config.load(str(tmp_path / 'w'))
  assert saved.train.float_positions == cfg.data.seq_len


def test_a_model_trained_on_real_positions_is_not_exported_to_transformers():
  from roformer import hf_export_config  # pylint: disable=import-outside-toplevel
  cfg = test_config.get_config()
  plain = hf_export_config._refusal(cfg)  # pylint: disable=protected-access
  cfg.train.float_positions = cfg.data.seq_len
  refusal = hf_export_config._refusal(cfg)  # pylint: disable=protected-access
  assert 'real-valued positions' in refusal
  assert plain is None or 'real-valued' not in plain


def test_the_range_is_fixed_once_trained_at_evaluation_and_on_resume():
  """S decides the positions the model trained on and its evaluation grid: an evaluation or a
  resumed run that changes it is refused (a continuation may train at another range)."""
  saved = test_config.get_config()
  saved.train.float_positions = 64
  changed = test_config.get_config()
  changed.train.float_positions = 128
  for occasion in (saved_config.EVALUATE, saved_config.RESUME):
    assert any('train.float_positions' in d
               for d in saved_config.changed(saved, changed, occasion)), occasion
  assert not any('float_positions' in d
                 for d in saved_config.changed(saved, changed, saved_config.CONTINUE))
