"""Synthetic rows built once, in parallel, and read back by every run that trains or evaluates
on them.

A synthetic task's rows depend on the task's settings (config.data.synthetic), the split, the
run seed (training rows only) and the length, never on the model: the length sweep's fourteen
schemes train on the same rows seed by seed, and all its runs evaluate on the same rows. Built
row by row in each run's own thread, they were a sixth to a quarter of an associative-recall
step on the CPU and set the pace of a multi-key group on a GPU, whose arithmetic is well under
a millisecond of the device's (docs/performance.md). `build` makes each stream once, its chunks
spread over worker processes; `read` serves a run's batches as slices of the memory-mapped
arrays.

A stream lives in DIRECTORY/DIGEST/ (`meta.json` and four .npy arrays), DIGEST hashing what
the rows depend on plus the source of the modules that generate them and numpy's version, so
another setting, length or seed, or changed generator code, is another entry and never served.
Opening an entry also rebuilds three of its rows and compares them; an entry that fails to open
or to compare is named in one warning and its rows are built. Rows past what an entry holds are
built as without a cache, so a run never depends on one: scripts/sweep.py fills WORKDIR/.rows
before its runs start and points them to it with ROFORMER_ROW_CACHE; without the variable
nothing here is read. An entry is written in a temporary directory of its own, under a lock
that tells a later build it is still being written, and renamed into place whole.

Not grain's ArrayRecord (roformer/data/cache.py holds tokenized corpora in it): these rows are
fixed-size arrays, and a batch is one slice of them, where a record file would decode each
row.
"""

import concurrent.futures
import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import time

import numpy as np

from roformer import reliability
from roformer.data import passkey_text
from roformer.data import ruler
from roformer.data import synthetic
from roformer.data import tokenizer as tokenizer_lib

ENV = 'ROFORMER_ROW_CACHE'
FORMAT = 1
CHUNK_ROWS = 4096  # Rows a worker builds at a time: a fraction of a second for every task.
ARRAYS = ('tokens', 'lengths', 'weights', 'bucket')
LOCK = 'building.lock'  # Held by the build writing the entry (kept in it afterwards).

log = logging.getLogger('roformer')
_announced, _unused = set(), set()  # Entries read, and not read, in this process.
_SPLITS = {i: name for name, i in synthetic.SPLIT_IDS.items()}


def _code_digest() -> str:
  """Digest of what decides the rows and their layout here: the generators' modules, this one,
  and numpy's version (its random streams may change between versions)."""
  h = hashlib.sha256(np.__version__.encode())
  for path in (synthetic.__file__, ruler.__file__, tokenizer_lib.__file__, __file__):
    with open(path, 'rb') as f:
      h.update(f.read())
  return h.hexdigest()


_code = functools.cache(_code_digest)  # Taken once a process first needs it, not at import.


def describe(source: synthetic.Source) -> dict:
  """Everything the rows of `source` depend on."""
  return {'format': FORMAT, 'code': _code(), 'task': source.task, 'length': source.length,
          'key': list(source.key), 'cfg': dict(sorted(vars(source.cfg).items()))}


def digest(source: synthetic.Source) -> str:
  return hashlib.sha256(json.dumps(describe(source), sort_keys=True, default=str).encode()
                        ).hexdigest()[:24]


def _compact(features: dict, dtype) -> dict:
  """A batch's features (synthetic.make_rows) as the arrays an entry keeps: each row's tokens
  (its inputs and then its last target, zero after), its count of predictions, its weights as
  0/1 bytes and its depth bucket. Positions and segment ids follow from the count."""
  weights = features['weights']
  if not np.isin(weights, (0.0, 1.0)).all():  # The format keeps a byte per weight.
    raise ValueError('these rows weigh their tokens other than 0 or 1, which an entry cannot '
                     'hold: a change to roformer/data/row_cache.py is needed to cache them')
  lengths = features['inputs_segment_ids'].sum(axis=1).astype(np.int32)
  rows, length = features['inputs'].shape
  tokens = np.zeros((rows, length + 1), dtype)
  tokens[:, :length] = features['inputs']
  has = np.flatnonzero(lengths)
  tokens[has, lengths[has]] = features['targets'][has, lengths[has] - 1]
  return {'tokens': tokens, 'lengths': lengths,
          'weights': weights.astype(np.uint8), 'bucket': features['bucket']}


def _features(tokens, lengths, weights, bucket) -> dict:
  """The inverse of `_compact`: the arrays synthetic.make_rows returns for these rows."""
  length = weights.shape[1]
  positions = np.arange(length, dtype=np.int32)
  inside = positions < np.asarray(lengths)[:, None]
  segments = inside.astype(np.int32)
  at = np.where(inside, positions, 0).astype(np.int32)
  return {'inputs': np.where(inside, tokens[:, :length], 0).astype(np.int32),
          'targets': np.where(inside, tokens[:, 1:], 0).astype(np.int32),
          'inputs_positions': at, 'targets_positions': at.copy(),
          'inputs_segment_ids': segments, 'targets_segment_ids': segments.copy(),
          'weights': np.asarray(weights, np.float32), 'bucket': np.array(bucket, np.int32)}


def _dtype(source) -> np.dtype:
  return np.dtype(np.uint16 if source.vocab.vocab_size <= 2**16 else np.int32)


class Rows:
  """A source whose first `count` rows are read from an entry; the rest are built."""

  def __init__(self, source: synthetic.Source, directory: str, count: int):
    self.source, self.directory, self.count = source, directory, count
    self.arrays = {name: np.load(os.path.join(directory, name + '.npy'), mmap_mode='r')
                   for name in ARRAYS}

  def __len__(self) -> int:
    return len(self.source)

  def __getitem__(self, index: int) -> dict:
    return {key: value[0] for key, value in self.stacked([index]).items()}

  def stacked(self, indices) -> dict:
    indices = np.asarray(indices, np.int64)
    if not len(indices) or indices.min() < 0 or indices.max() >= self.count:
      return self.source.stacked(indices.tolist())
    first = int(indices[0])
    if np.array_equal(indices, np.arange(first, first + len(indices))):
      take = lambda a: a[first:first + len(indices)]  # One slice of the map.
    else:
      take = lambda a: a[indices]
    return _features(*(take(self.arrays[name]) for name in ARRAYS))


def read(source: synthetic.Source, directory: str | None = None):
  """`source` served from its entry under `directory` (default: $ROFORMER_ROW_CACHE) when one
  exists and its rows check out, else `source` itself. A damaged or differing entry is named
  in a warning and left unread."""
  directory = directory or os.environ.get(ENV)
  if not directory:
    return source
  path = os.path.join(directory, digest(source))
  if path in _unused:
    return source
  if not os.path.isdir(path):
    _unused.add(path)
    log.info('Rows of synthetic/%s %s at length %d: no entry in %s; built in this run.',
             source.task, _SPLITS[source.key[1]], source.length, directory)
    return source
  try:
    with open(os.path.join(path, 'meta.json'), encoding='utf-8') as f:
      meta = json.load(f)
    if meta['describe'] != json.loads(json.dumps(describe(source), default=str)):
      raise ValueError('it was written for other settings')
    rows = Rows(source, path, int(meta['count']))
    if any(len(rows.arrays[name]) != rows.count for name in ARRAYS):
      raise ValueError('its arrays hold fewer rows than meta.json says')
    checked = () if path in _announced else sorted({0, rows.count // 2, rows.count - 1})
    for index in checked:  # Spot checks against the code, once per entry and process.
      built, cached = source.stacked([index]), rows.stacked([index])
      if any(not np.array_equal(built[key], cached[key]) for key in built):
        raise ValueError(f'its row {index} differs from the one the generator builds')
  except Exception as e:  # pylint: disable=broad-except  # Any damage: the rows are built.
    _unused.add(path)
    log.warning('Row cache %s is not used (%s: %s); its rows are built instead. Fix: delete it '
                "(rm -rf '%s'); a sweep writes it again.", path, type(e).__name__, e, path)
    return source
  if path not in _announced:  # Once per process: validation opens its source every time.
    _announced.add(path)
    log.info('Rows of synthetic/%s %s at length %d: the first %d read from %s.', source.task,
             _SPLITS[source.key[1]], source.length, rows.count, path)
  return rows


@contextlib.contextmanager
def reading(directory: str | None):
  """$ROFORMER_ROW_CACHE set to `directory` (None: unset) inside the block, as it was after."""
  earlier = os.environ.pop(ENV, None)
  if directory is not None:
    os.environ[ENV] = directory
  try:
    yield
  finally:
    os.environ.pop(ENV, None)
    if earlier is not None:
      os.environ[ENV] = earlier


def entries_read() -> set:
  """The entries this process has read rows from (their paths)."""
  return set(_announced)


def _build_chunk(source: synthetic.Source, path: str, start: int, stop: int) -> None:
  """Writes rows [start, stop) of `source` into the entry's arrays at `path`."""
  arrays = {name: np.load(os.path.join(path, name + '.npy'), mmap_mode='r+') for name in ARRAYS}
  chunk = _compact(source.stacked(range(start, stop)), arrays['tokens'].dtype)
  for name in ARRAYS:
    arrays[name][start:stop] = chunk[name]
    arrays[name].flush()


def _allocate(source: synthetic.Source, path: str, count: int) -> None:
  length = source.length
  shapes = {'tokens': ((count, length + 1), _dtype(source)), 'lengths': ((count,), np.int32),
            'weights': ((count, length), np.uint8), 'bucket': ((count,), np.int32)}
  for name, (shape, dtype) in shapes.items():
    file = os.path.join(path, name + '.npy')
    np.lib.format.open_memmap(file, 'w+', dtype, shape).flush()
    # Its blocks taken now: a disk filling up is an OSError here, where writing a sparse
    # file's pages through a memory map would kill the process (SIGBUS).
    fd = os.open(file, os.O_RDWR)
    try:
      os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
    except OSError as e:
      if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
        raise  # A full disk, above all. A file system without it writes as it can.
    finally:
      os.close(fd)


def _remove_abandoned(directory: str) -> None:
  """Removes temporary entries that no build holds the lock of (a build cut short), and those
  without a lock an hour after they were made (a build cut short before it took one)."""
  for name in os.listdir(directory):
    path = os.path.join(directory, name)
    if '.tmp-' not in name:
      continue
    try:
      fd = os.open(os.path.join(path, LOCK), os.O_RDONLY)  # Never made here.
    except OSError:
      try:
        if time.time() - os.path.getmtime(path) > 3600:
          shutil.rmtree(path, ignore_errors=True)
      except OSError:
        pass  # Removed meanwhile.
      continue
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      shutil.rmtree(path, ignore_errors=True)
    except OSError:
      pass  # Its build is running.
    finally:
      os.close(fd)


def _locked(path: str):
  """An open file holding the lock of the temporary entry at `path`: taken before the file
  gets its name, so that no cleaner ever finds the name unlocked while the build runs."""
  # pylint: disable-next=consider-using-with  # The caller closes it, releasing the lock.
  lock = open(os.path.join(path, LOCK + '.new'), 'w', encoding='utf-8')
  fcntl.flock(lock, fcntl.LOCK_EX)
  os.rename(lock.name, os.path.join(path, LOCK))
  return lock


def entry_bytes(source: synthetic.Source, count: int) -> int:
  """The bytes an entry of `count` rows of `source` takes on disk (headers aside)."""
  return count * ((source.length + 1) * _dtype(source).itemsize + source.length + 8)


def distinct(streams) -> list:
  """`streams` with one (source, count) per entry: the most rows asked of each."""
  most = {}
  for source, count in streams:
    name = digest(source)
    if count > most.get(name, (None, 0))[1]:
      most[name] = (source, count)
  return list(most.values())


def missing(streams, directory: str) -> list:
  """The (source, count) of `streams` (one each, `distinct`) that `directory` holds no entry
  of `count` rows or more for."""
  return [(source, count) for source, count in distinct(streams)
          if count > _count(os.path.join(directory, digest(source)))]


def build(streams, directory: str, workers: int = 1) -> int:
  """Writes an entry under `directory` for each (source, count) in `streams` that has none
  with at least `count` rows, the first `count` rows of the source, chunks built on `workers`
  processes (1: in this one). Returns the rows built."""
  os.makedirs(directory, exist_ok=True)
  _remove_abandoned(directory)
  todo = {digest(source): (source, count) for source, count in missing(streams, directory)}
  if not todo:
    return 0
  with contextlib.ExitStack() as stack:
    paths, pending, built = {}, [], 0
    try:
      for name, (source, count) in todo.items():
        paths[name] = path = tempfile.mkdtemp(prefix=f'{name}.tmp-', dir=directory)
        stack.enter_context(_locked(path))  # Held until the entry is in place or given up.
        _allocate(source, path, count)
        pending += [(source, path, start, min(start + CHUNK_ROWS, count))
                    for start in range(0, count, CHUNK_ROWS)]
      _run(pending, workers)
      for name, (source, count) in todo.items():
        try:
          _put_in_place(paths[name], os.path.join(directory, name), source, count)
          built += count
        except OSError as e:  # The others still go in place; this one's rows get built.
          log.warning('Row cache entry %s was not put in place (%s).',
                      os.path.join(directory, name), e)
    finally:
      for path in paths.values():
        shutil.rmtree(path, ignore_errors=True)  # Whatever was not put in place.
  return built


def _run(jobs, workers: int) -> None:
  workers = min(workers, len(jobs))
  if workers <= 1:
    for job in jobs:
      _build_chunk(*job)
    return
  # Spawned, not forked: the caller may hold threads (a sweep's, JAX's) that a fork copies in
  # whatever state they are.
  with concurrent.futures.ProcessPoolExecutor(
      workers, mp_context=multiprocessing.get_context('spawn')) as pool:
    # The workers ignore Ctrl-C from their first instruction (an ignored signal stays ignored
    # across exec, and Python leaves it so): it is the caller's, which cancels what is left and
    # waits for the chunks being built, not a traceback from each worker, which imports for
    # seconds before it could set a handler. The caller ignores it too for the milliseconds
    # that starting them takes (a submit starts one while fewer than `workers` run).
    with reliability.signal_handled(signal.SIGINT, signal.SIG_IGN):
      for _ in range(workers):
        pool.submit(int)
    deferred = _DeferredSignals()
    with contextlib.ExitStack() as handlers:
      for signum in (signal.SIGINT, signal.SIGTERM):
        if callable(signal.getsignal(signum)):
          handlers.enter_context(reliability.signal_handled(
              signum, deferred.note(signal.getsignal(signum))))
      try:
        pending = {pool.submit(_build_chunk, *job) for job in jobs}
        while pending:
          done, pending = concurrent.futures.wait(
              pending, timeout=0.25, return_when=concurrent.futures.FIRST_EXCEPTION)
          deferred.deliver()
          for future in done:
            future.result()
        deferred.deliver()
      except BaseException:
        pool.shutdown(cancel_futures=True)
        raise


class _DeferredSignals:
  """SIGINT and SIGTERM noted while the rows are built and handed to their own handlers
  (KeyboardInterrupt, a sweep's stop) by `deliver`, in the loop that waits for the chunks.
  Raised where the signal lands, their exception could land inside a garbage-collection
  callback (JAX registers one), where Python prints it and drops it, so that a Ctrl-C was
  lost and the rows went on building; or inside the pool's bookkeeping."""

  def __init__(self):
    self.pending = []  # (handler, signum) in the order they came.

  def note(self, handler):
    """A handler that notes the signal for `handler`."""
    return lambda signum, frame: self.pending.append((handler, signum))

  def deliver(self) -> None:
    while self.pending:
      handler, signum = self.pending.pop(0)
      handler(signum, None)


def _put_in_place(path: str, final: str, source: synthetic.Source, count: int) -> None:
  """Renames the finished temporary entry `path` to `final`, its files on disk first; an entry
  another process put there meanwhile is kept if it holds as many rows."""
  with open(os.path.join(path, 'meta.json'), 'w', encoding='utf-8') as f:
    json.dump({'describe': describe(source), 'count': count}, f, default=str)
  os.chmod(path, 0o755)  # mkdtemp's 0700 would keep other users' runs out.
  for name in os.listdir(path):
    with open(os.path.join(path, name), 'rb') as f:
      os.fsync(f.fileno())
  if _count(final) >= count:
    return
  shutil.rmtree(final, ignore_errors=True)  # A shorter entry (readers keep their maps).
  try:
    os.rename(path, final)
  except OSError:
    if _count(final) < count:  # Not another process's entry: a real failure.
      raise


def _count(path: str) -> int:
  """Rows the entry at `path` holds (0 if there is none)."""
  try:
    with open(os.path.join(path, 'meta.json'), encoding='utf-8') as f:
      return int(json.load(f)['count'])
  except (OSError, ValueError, KeyError):
    return 0


def streams(config, eval_splits=('validation', 'test')) -> list:
  """The (source, rows) a run of `config` reads, when its data is a synthetic task in the
  task's own words: its training rows (steps x batch), the validation rows at the training
  length, and each split of `eval_splits` at every evaluation length. [] otherwise. Settings
  no row can be built with are a ConfigError (synthetic.validate), as in the run."""
  task = synthetic.task_name(config.data)
  if task is None or passkey_text.reads_text(config.data.synthetic):
    return []
  split = lambda name: synthetic.Split(config.data.synthetic, task, name)
  seq_len = config.data.seq_len
  synthetic.validate(task, config.data.synthetic, seq_len,
                     seq_len * max(config.eval.length_multipliers, default=1))
  out = [(synthetic.Source(split('train'), seq_len, config.seed),
          config.train.steps * config.train.batch_size)]
  lengths = {'validation': {seq_len}}
  for name in eval_splits:
    lengths.setdefault(name, set()).update(seq_len * m for m in config.eval.length_multipliers)
  for name, found in lengths.items():
    for length in sorted(found):
      source = synthetic.Source(split(name), length)
      out.append((source, len(source)))
  return out
