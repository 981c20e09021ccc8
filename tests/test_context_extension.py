"""Beyond the training length: continuing a causal LM at a new length and RoPE scaling
(`config.init_from`), randomized positions, and evaluation per position bucket."""

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import errors
from roformer import evaluate
from roformer import loop
from roformer import metrics
from roformer import models
from roformer import resolve
from roformer import saved_config
from roformer.positions import randomized


def _config(data_dir, **fields):
  cfg = test_config.get_config()
  cfg.data.data_dir = data_dir
  cfg.mesh.num_devices = 1
  cfg.train.update(steps=6, eval_every=6, checkpoint_every=6, eval_batches=2)
  for dotted, value in fields.items():
    node, parts = cfg, dotted.split('.')
    for part in parts[:-1]:
      node = node[part]
    node[parts[-1]] = value
  return cfg


@pytest.fixture(scope='module')
def source(tmp_path_factory, data_dir):
  """A tiny causal LM trained at length 32, with randomized positions from [0, 256) (evaluation
  and continuation use consecutive ones)."""
  workdir = str(tmp_path_factory.mktemp('extend') / 'source')
  last = loop.train_and_evaluate(_config(data_dir, **{'train.random_positions': 256}), workdir)
  assert np.isfinite(last['validation']['loss'])
  return workdir


def _validation(workdir):
  return {r['step']: r for r in metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
          if r['split'] == 'validation'}


def test_continuing_starts_from_exactly_the_saved_parameters(source, data_dir, tmp_path):
  """Continued at 64 with linear interpolation (factor 2), the run's evaluation before its first
  step equals eval.py on the source at length 64 with the same scaling."""
  scaling = {'model.position.rope.scaling.kind': 'linear',
             'model.position.rope.scaling.factor': 2.0}
  cfg = _config(data_dir, **{'init_from': source, 'data.seq_len': 64, 'train.steps': 2,
                             'train.learning_rate': 1e-4, **scaling})
  workdir = str(tmp_path / 'continued')
  loop.train_and_evaluate(cfg, workdir)
  first = _validation(workdir)[0]
  eval_cfg = saved_config.load(source)  # What eval.py does, with these overrides:
  eval_cfg.data.seq_len, eval_cfg.eval.length_multipliers, eval_cfg.eval.max_batches = 64, (1,), 2
  eval_cfg.model.position.rope.scaling.update(kind='linear', factor=2.0)
  reference = evaluate.evaluate_workdir(eval_cfg, source, splits=('validation',))
  row = reference['splits']['validation']['lengths'][0]
  assert row['length'] == 64 and row['tokens'] == first['tokens']
  np.testing.assert_allclose(first['loss'], row['loss'], rtol=1e-6)
  steps = {r['step'] for r in metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
           if r['split'] == 'train'}
  assert steps == {1, 2}  # And it trains on from there, with a fresh optimizer.


@pytest.mark.parametrize('fields, match', [
    ({'model.d_model': 64}, r'different model.*model\.d_model'),
    ({'model.position.kind': 'alibi'}, r'different model.*position\.kind'),
    ({'data.seq_len': 128, 'model.position.rope.scaling.kind': 'linear',
      'model.position.rope.scaling.factor': 2.0}, r'factor=2.0 stretches.*to 64.*factor=4'),
    ({'data.seq_len': 64, 'model.position.rope.scaling.kind': 'yarn',
      'model.position.rope.scaling.factor': 2.0,
      'model.position.rope.scaling.original_length': 16}, r'original_length=32'),
    ({'data.name': 'synthetic/copy'}, r"trained on shakespeare \(its ids name text through its "
     r"tokenizer\), but config.data.name='synthetic/copy' gives ids that name the words of "
     r'synthetic/copy: the weights would read other tokens'),
])
def test_a_continuation_that_does_not_fit_the_source_is_refused(source, data_dir, tmp_path,
                                                                fields, match):
  cfg = _config(data_dir, init_from=source, **fields)
  workdir = tmp_path / 'refused'
  with pytest.raises(errors.ConfigError, match=match):
    loop.train_and_evaluate(cfg, str(workdir))
  assert not workdir.exists()


def test_init_from_another_model_type_is_refused(data_dir, tmp_path, mlm_workdir):
  cfg = _config(data_dir, init_from=mlm_workdir[0])
  with pytest.raises(errors.ConfigError, match=r"'mlm' run; a 'causal_lm' model starts from"):
    loop.train_and_evaluate(cfg, str(tmp_path / 'x'))


def test_learned_positions_cannot_continue_past_their_table(data_dir, tmp_path):
  """Refused from the source's config.json alone, before anything is built."""
  source_cfg = _config(data_dir, **{'model.position.kind': 'learned',
                                    'model.position.learned.max_length': 48})
  source = str(tmp_path / 'learned')
  os.makedirs(source)
  saved_config.save(source_cfg, source)
  cfg = _config(data_dir, **{'init_from': source, 'data.seq_len': 64,
                             'model.position.kind': 'learned',
                             'model.position.learned.max_length': 48})
  with pytest.raises(errors.ConfigError, match='cover 48 positions.*cannot be continued'):
    loop.train_and_evaluate(cfg, str(tmp_path / 'y'))


def test_randomized_positions_are_sorted_distinct_in_range_and_restart_per_segment():
  segments = jnp.asarray([[1] * 5 + [2] * 7 + [3] * 3 + [0] * 1,
                          [1] * 16])
  pos = np.asarray(randomized.randomized_positions(jax.random.key(0), segments, 100))
  seen_large = False
  for row, seg in zip(pos, np.asarray(segments)):
    for s in set(seg) - {0}:
      p = row[seg == s]
      assert np.all(np.diff(p) > 0) and p.min() >= 0 and p.max() < 100  # Sorted, distinct.
      seen_large |= p.max() >= 16
    assert np.all(row[seg == 0] == 0)
  assert seen_large  # Not just 0..n-1.
  other = np.asarray(randomized.randomized_positions(jax.random.key(1), segments, 100))
  assert not np.array_equal(pos, other)


def test_randomized_positions_draw_uniform_subsets():
  """Each position of [0, 20) is drawn for a 4-token segment with probability 4/20."""
  segments = jnp.asarray([[1] * 4 + [2] * 4] * 2000)
  pos = np.asarray(randomized.randomized_positions(jax.random.key(3), segments, 20))
  counts = np.bincount(pos.reshape(-1), minlength=20) / (2000 * 2)
  np.testing.assert_allclose(counts, 4 / 20, atol=0.02)


@pytest.mark.parametrize('kind', ['rope', 'alibi'])
def test_relative_schemes_see_only_gaps_of_randomized_positions(kind):
  """With randomized (non-consecutive) positions, a relative scheme's logits are unchanged when
  every position shifts by the same amount."""
  cfg = test_config.get_config(kind).model
  cfg.vocab_size = 50
  model = models.create(cfg, seed=0)
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 12)))
  segments = jnp.ones_like(tokens)
  pos = randomized.randomized_positions(jax.random.key(4), segments, 200)
  forward = nnx.jit(lambda m, p: m(tokens, p, segments))
  np.testing.assert_allclose(forward(model, pos), forward(model, pos + 37), atol=2e-5)


@pytest.mark.parametrize('fields, match', [
    ({'train.random_positions': 16}, 'below config.data.seq_len=32'),
    ({'train.random_positions': 64, 'model.position.kind': 'none'}, 'reads no integer'),
    ({'train.random_positions': 256, 'model.position.kind': 'learned',
      'model.position.learned.max_length': 128},
     r'config.train.random_positions=256 trains on positions up to 256: sequence length 256 is '
     r'longer than the learned position table .* Fix: a smaller config.train.random_positions'),
])
def test_bad_randomized_positions_are_refused(data_dir, fields, match):
  with pytest.raises(errors.ConfigError, match=match):
    resolve.validate(_config(data_dir, **fields))


def test_a_continuation_resumes_with_what_it_took_from_its_source_even_once_that_is_gone(
    source, data_dir, tmp_path):
  """YaRN's original length, left unset, is the source's training length (32) when the
  continuation starts; rerunning the same command resumes with it from the run's own config,
  after the source is deleted too, and trains on from the saved step."""
  copy = str(tmp_path / 'source')
  shutil.copytree(source, copy)
  fields = {'init_from': copy, 'data.seq_len': 64, 'train.learning_rate': 1e-4,
            'model.position.rope.scaling.kind': 'yarn', 'model.position.rope.scaling.factor': 2.0}
  workdir = str(tmp_path / 'continued')
  loop.train_and_evaluate(_config(data_dir, **fields, **{'train.steps': 2}), workdir)
  shutil.rmtree(copy)
  again = _config(data_dir, **fields, **{'train.steps': 4})
  assert again.model.position.rope.scaling.original_length == 0
  loop.train_and_evaluate(again, workdir)
  assert saved_config.load(workdir).model.position.rope.scaling.original_length == 32
  steps = [r['step'] for r in metrics.read_jsonl(os.path.join(workdir, 'metrics.jsonl'))
           if r['split'] == 'train']
  assert steps == [1, 2, 3, 4]


def test_a_stretching_scaling_takes_the_source_training_length(source, data_dir):
  cfg = _config(data_dir, **{'init_from': source, 'data.seq_len': 64,
                             'model.position.rope.scaling.kind': 'yarn',
                             'model.position.rope.scaling.factor': 2.0})
  resolve.take_from_source(cfg)
  assert cfg.model.position.rope.scaling.original_length == 32
  resolve.validate(cfg)
