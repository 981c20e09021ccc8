"""roformer/data/row_cache.py: rows read back are the rows built, an entry serves only the
settings it was built for, and a damaged or stale entry is named and left unread."""

import errno
import fcntl
import itertools
import json
import logging
import os
import time

import numpy as np
import processes
import pytest

import test_synthetic
from configs import synthetic as synthetic_config
from roformer import tasks
from roformer.data import pipeline
from roformer.data import row_cache
from roformer.data import synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source(task='associative_recall', split='train', multiple=1, run_seed=1, **changes):
  cfg = synthetic_config.get_config(task)
  cfg.data.synthetic.update(changes)
  return synthetic.Source(synthetic.Split(cfg.data.synthetic, task, split),
                          multiple * cfg.data.seq_len, run_seed)


def assert_same(got: dict, expected: dict):
  assert sorted(got) == sorted(expected)
  for key, value in expected.items():
    assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
    assert np.array_equal(got[key], value), key


@pytest.fixture(autouse=True)
def no_cache_from_the_environment(monkeypatch):
  monkeypatch.delenv(row_cache.ENV, raising=False)


@pytest.mark.parametrize('task', synthetic.TASKS)
@pytest.mark.parametrize('split,multiple', [('train', 1), ('validation', 4)])
def test_rows_read_back_are_the_rows_built(tmp_path, task, split, multiple):
  built = source(task, split, multiple)
  assert row_cache.build([(built, 70)], str(tmp_path)) == 70
  cached = row_cache.read(source(task, split, multiple), str(tmp_path))
  assert isinstance(cached, row_cache.Rows)
  for indices in (range(0, 32), range(32, 70), [5, 3, 64, 0], range(60, 80), [69]):
    assert_same(cached.stacked(list(indices)), built.stacked(list(indices)))
  assert_same(cached[17], built[17])


@pytest.mark.parametrize('key', [('associative_recall', 1, 'train'), ('passkey', 4, 'validation'),
                                 ('niah_multikey', 1, 'train'), ('flip_flop', 4, 'train')])
def test_cached_rows_hash_to_the_rows_recorded_runs_trained_on(tmp_path, key):
  """The independent check: test_synthetic's digests of rows taken from the generators before
  this cache existed."""
  task, multiple, split = key
  row_cache.build([(source(task, split, multiple), 20)], str(tmp_path))
  cached = row_cache.read(source(task, split, multiple), str(tmp_path))
  assert isinstance(cached, row_cache.Rows)
  assert test_synthetic.rows_digest(cached) == test_synthetic.ROW_DIGESTS[key]


def test_batches_of_a_run_are_the_same_with_and_without_the_cache(tmp_path, monkeypatch):
  """What a training run and its evaluation read (SyntheticTask.batches: this process's share,
  its iterator state, a short last evaluation batch), and that the cached run builds no row
  but the three each entry's opening checks."""
  config = synthetic_config.get_config('associative_recall')
  config.train.update(steps=6, batch_size=16)
  config.data.synthetic.eval_examples = 40
  task = tasks.for_config(config)
  splits = pipeline.load_sources(config.data, ('train', 'validation'))
  read = lambda split, **kw: list(itertools.islice(
      task.batches(config, splits[split], None, **kw), 6))
  plain = {'train': read('train', train=True), 'validation': read('validation', train=False),
           'long': read('validation', train=False, seq_len=2 * config.data.seq_len)}
  streams = row_cache.streams(config, ('validation',))
  assert [(s.key, s.length, n) for s, n in streams] == [
      ((0, 0, 0), 16, 96), ((0, 1), 16, 40), ((0, 1), 32, 40), ((0, 1), 64, 40),
      ((0, 1), 128, 40)]
  row_cache.build(streams, str(tmp_path))
  generated = []
  generate = synthetic.Source._generate
  monkeypatch.setattr(synthetic.Source, '_generate',
                      lambda self, i: generated.append(i) or generate(self, i))
  monkeypatch.setenv(row_cache.ENV, str(tmp_path))
  cached = {'train': read('train', train=True), 'validation': read('validation', train=False),
            'long': read('validation', train=False, seq_len=2 * config.data.seq_len)}
  assert len(generated) == 3 * 3  # Three rows checked as each of the three entries opens.
  for name, batches in plain.items():
    assert len(cached[name]) == len(batches)
    for got, expected in zip(cached[name], batches):
      assert_same(got, expected)


def test_ids_past_two_bytes_and_empty_or_negative_indices_read_as_built(tmp_path):
  """A vocabulary over 65,536 ids keeps its tokens in int32; no rows, and a negative index (no
  row: the generator refuses it), are the generator's too."""
  built = source('copy', num_symbols=70_000)
  assert built.vocab.vocab_size > 2**16
  row_cache.build([(built, 40)], str(tmp_path))
  cached = row_cache.read(source('copy', num_symbols=70_000), str(tmp_path))
  assert cached.arrays['tokens'].dtype == np.int32
  batch = cached.stacked(range(40))
  assert batch['inputs'].max() > 2**16
  assert_same(batch, built.stacked(range(40)))
  assert_same(cached.stacked([]), built.stacked([]))
  for rows in (cached, built):
    with pytest.raises(ValueError):
      rows.stacked([3, -1])


def test_two_workers_write_the_entry_one_writes(tmp_path, monkeypatch):
  monkeypatch.setattr(row_cache, 'CHUNK_ROWS', 40)  # Five chunks for the workers to share.
  streams = [(source('niah_multikey'), 200), (source('copy'), 90)]
  row_cache.build(streams, str(tmp_path / 'one'), workers=1)
  row_cache.build(streams, str(tmp_path / 'two'), workers=2)
  names = sorted(os.listdir(tmp_path / 'one'))
  assert names == sorted(os.listdir(tmp_path / 'two')) and len(names) == 2
  for name in names:
    for array in row_cache.ARRAYS:
      one = np.load(tmp_path / 'one' / name / f'{array}.npy')
      assert np.array_equal(one, np.load(tmp_path / 'two' / name / f'{array}.npy'))


@pytest.mark.parametrize('other', [
    {'run_seed': 2}, {'split': 'validation'}, {'multiple': 2}, {'seed': 7}, {'num_queries': 3},
    {'task': 'copy'}])
def test_an_entry_serves_only_the_settings_it_was_built_for(tmp_path, other):
  row_cache.build([(source(), 50)], str(tmp_path))
  assert isinstance(row_cache.read(source(), str(tmp_path)), row_cache.Rows)
  different = source(**other)
  assert row_cache.digest(different) != row_cache.digest(source())
  assert row_cache.read(different, str(tmp_path)) is different


def test_changed_generator_code_is_another_entry(tmp_path, monkeypatch):
  row_cache.build([(source(), 50)], str(tmp_path))
  monkeypatch.setattr(row_cache, '_code', lambda: 'f' * 64)
  fresh = source()
  assert row_cache.read(fresh, str(tmp_path)) is fresh


def test_the_code_key_follows_numpys_version_and_this_modules_source(tmp_path, monkeypatch):
  code = row_cache._code_digest()
  assert code == row_cache._code()
  monkeypatch.setattr(np, '__version__', np.__version__ + '.post1')
  assert row_cache._code_digest() != code
  monkeypatch.undo()
  changed = tmp_path / 'row_cache.py'
  changed.write_text(open(row_cache.__file__).read() + '\nFORMAT = FORMAT\n')
  monkeypatch.setattr(row_cache, '__file__', str(changed))
  assert row_cache._code_digest() != code


def _one_entry(tmp_path) -> str:
  row_cache.build([(source(), 50)], str(tmp_path))
  (name,) = os.listdir(tmp_path)
  return str(tmp_path / name)


@pytest.mark.parametrize('damage', ['generator', 'truncated', 'empty', 'meta', 'settings'])
def test_a_stale_or_damaged_entry_is_named_and_its_rows_built(tmp_path, monkeypatch, caplog,
                                                              damage):
  path = _one_entry(tmp_path)
  if damage == 'generator':  # Code that changes rows without changing the modules' text.
    recall = synthetic._GENERATORS['associative_recall']

    def changed(rng, cfg, vocab, length):
      tokens, spans, bucket = recall(rng, cfg, vocab, length)
      return np.where(tokens == vocab.query, vocab.separator, tokens), spans, bucket
    monkeypatch.setitem(synthetic._GENERATORS, 'associative_recall', changed)
  elif damage == 'truncated':
    with open(os.path.join(path, 'tokens.npy'), 'r+b') as f:
      f.truncate(os.path.getsize(f.name) // 2)
  elif damage == 'empty':
    open(os.path.join(path, 'weights.npy'), 'w').close()
  elif damage == 'meta':
    with open(os.path.join(path, 'meta.json'), 'w') as f:
      f.write('{"count": ')
  else:
    with open(os.path.join(path, 'meta.json')) as f:
      meta = json.load(f)
    meta['describe']['cfg']['num_queries'] += 1
    with open(os.path.join(path, 'meta.json'), 'w') as f:
      json.dump(meta, f)
  fresh = source()
  with caplog.at_level(logging.WARNING, logger='roformer'):
    assert row_cache.read(fresh, str(tmp_path)) is fresh
    assert row_cache.read(fresh, str(tmp_path)) is fresh  # Said once in a process.
  (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
  assert path in record.getMessage() and 'Fix: delete it' in record.getMessage()


def test_a_build_that_fails_leaves_no_entry_and_no_temporary_one(tmp_path, monkeypatch):
  monkeypatch.setattr(row_cache, 'CHUNK_ROWS', 20)
  calls = []
  chunk = row_cache._build_chunk

  def fails_second(*args):
    calls.append(args)
    if len(calls) == 2:
      raise OSError('No space left on device')
    chunk(*args)
  monkeypatch.setattr(row_cache, '_build_chunk', fails_second)
  with pytest.raises(OSError):
    row_cache.build([(source(), 60)], str(tmp_path))
  fresh = source()
  assert row_cache.read(fresh, str(tmp_path)) is fresh
  assert os.listdir(tmp_path) == []


def test_a_killed_builds_temporary_entry_is_removed_and_a_running_ones_kept(tmp_path):
  """Killed: its lock file is there and free, or it has none an hour on. Running: its lock is
  held, or it has none yet (and the cleaner makes none)."""
  killed, running = tmp_path / 'a.tmp-killed', tmp_path / 'b.tmp-running'
  old, young = tmp_path / 'c.tmp-unlocked-old', tmp_path / 'd.tmp-unlocked-young'
  for path in (killed, running, old, young):
    path.mkdir()
  (killed / row_cache.LOCK).touch()
  (running / row_cache.LOCK).touch()
  os.utime(old, (time.time() - 7200,) * 2)
  with open(running / row_cache.LOCK, 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # As the build writing it holds it.
    assert row_cache.build([(source(), 30)], str(tmp_path)) == 30
    assert sorted(os.listdir(tmp_path)) == sorted([row_cache.digest(source()), running.name,
                                                   young.name])
  assert os.listdir(young) == []


def test_an_entry_another_process_put_in_place_first_is_kept(tmp_path, monkeypatch):
  run = row_cache._run

  def another_process_wins(jobs, workers):
    run(jobs, workers)
    monkeypatch.setattr(row_cache, '_run', run)
    assert row_cache.build([(source(), 40)], str(tmp_path)) == 40  # The other build.
  monkeypatch.setattr(row_cache, '_run', another_process_wins)
  assert row_cache.build([(source(), 30)], str(tmp_path)) == 30
  assert os.listdir(tmp_path) == [row_cache.digest(source())]
  assert row_cache.read(source(), str(tmp_path)).count == 40


def test_a_longer_stream_replaces_a_shorter_entry_and_a_shorter_one_is_not_built(tmp_path):
  assert row_cache.build([(source(), 30)], str(tmp_path)) == 30
  assert row_cache.build([(source(), 20), (source(), 30)], str(tmp_path)) == 0
  assert row_cache.build([(source(), 30), (source(), 50)], str(tmp_path)) == 50
  cached = row_cache.read(source(), str(tmp_path))
  assert cached.count == 50
  assert_same(cached.stacked(range(40, 50)), source().stacked(range(40, 50)))


def test_rows_hidden_in_text_have_no_streams():
  config = synthetic_config.get_config('passkey')
  config.data.synthetic.filler = 'text'
  assert row_cache.streams(config) == []
  config = synthetic_config.get_config('passkey')
  config.data.name = 'shakespeare'
  assert row_cache.streams(config) == []


def test_the_throughput_benchmark_reads_the_same_tokens_from_the_cache(tmp_path):
  """scripts/data_throughput.py's two forms for a synthetic task: the same rows, so the same
  count of tokens that are not padding (copy's rows vary in length)."""
  out = tmp_path / 'throughput.json'
  done = processes.run(
      ['scripts/data_throughput.py', '--config', 'configs/synthetic.py:copy',
       '--batches', '5', '--warmup', '2', '--out', str(out)], cwd=ROOT,
      env=processes.env(devices=1))
  assert done.returncode == 0, done.stdout + done.stderr
  built, cached = json.loads(out.read_text())
  assert (built['form'], cached['form']) == ('built', 'row cache')
  assert built['tokens'] == cached['tokens'] < 5 * 32 * 32
  assert built['made_with']['devices'] == '1 x cpu' and 'grain' in built['made_with']['packages']
  assert 'ms a batch' in done.stdout


@pytest.mark.slow  # The script's bad input runs by default (tests/test_entry_points.py).
def test_the_group_rate_script_times_a_vmapped_group_with_built_and_cached_rows(tmp_path):
  out = tmp_path / 'rate.json'
  done = processes.run(
      ['scripts/group_rate.py', '--config', 'configs/synthetic.py:copy',
       '--steps', '30', '--config.train.log_every=10', '--config.train.batch_size=8',
       '--config.train.warmup_steps=5',
       '--seeds', '0,1', '--out', str(out)], cwd=ROOT, env=processes.env(devices=1))
  assert done.returncode == 0, done.stdout + done.stderr
  built, cached = json.loads(out.read_text())
  assert (built['form'], cached['form']) == ('built', 'row cache')
  for result in (built, cached):
    assert result['intervals'] == 2 and 0 < result['low'] <= result['steps_per_s']
    assert result['made_with']['devices'] == '1 x cpu'
  assert 'group steps/s' in done.stdout
  assert f'the first {30 * 8} read from' in done.stdout  # The timed run read the cache.


@pytest.mark.parametrize('error', [errno.ENOSPC, errno.EOPNOTSUPP])
def test_a_full_disk_fails_the_build_before_any_row_and_no_fallocate_is_no_error(
    tmp_path, monkeypatch, error):
  def fallocate(fd, offset, length):
    raise OSError(error, os.strerror(error))
  monkeypatch.setattr(os, 'posix_fallocate', fallocate)
  if error == errno.ENOSPC:
    with pytest.raises(OSError, match='No space left'):
      row_cache.build([(source(), 30)], str(tmp_path))
    assert os.listdir(tmp_path) == []
  else:
    assert row_cache.build([(source(), 30)], str(tmp_path)) == 30
    assert_same(row_cache.read(source(), str(tmp_path)).stacked(range(30)),
                source().stacked(range(30)))


def test_rows_weighing_tokens_other_than_0_or_1_are_refused_not_rounded(tmp_path, monkeypatch):
  stacked = synthetic.Source.stacked

  def halved(self, indices):
    batch = stacked(self, indices)
    return {**batch, 'weights': batch['weights'] * 0.5}
  monkeypatch.setattr(synthetic.Source, 'stacked', halved)
  with pytest.raises(ValueError, match='other than 0 or 1'):
    row_cache.build([(source(), 30)], str(tmp_path))
  assert os.listdir(tmp_path) == []
