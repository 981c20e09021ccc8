"""Checks of the data cache under config.data.data_dir: a dataset built in the ArrayRecord
format (`NAME/VERSION/`: dataset_info.json, features.json and the shards of each split) and
the tokenizers trained beside it.

TFDS builds a dataset in a temporary directory and renames it into place, so a build cut short
leaves no cache; what these checks catch is a cache damaged afterwards (a shard truncated or
deleted, a copy cut short, a disk error) and a version directory without its dataset_info.json
(a build or copy interrupted outside TFDS), which TFDS would take as built and then serve with
no splits. Each is a DamagedFileError naming the file and the directory to delete: the next run
builds the dataset again (an embedded corpus from its package, a TFDS dataset from its
download). Nothing here deletes or rewrites anything.

The checks are cheap: each shard's first and last record are read once when the sources are
opened (a truncated ArrayRecord file fails on any read; a missing one on opening), and every
later read goes through `CheckedSource`, which turns a read failure of the ArrayRecord reader
(a damaged block in the middle of a shard) into the same error.

`check_can_download` refuses, at once, a TFDS dataset that must be downloaded on a machine that
cannot resolve a host name: TFDS's downloader would otherwise retry each file for minutes and
end on a connection error.

`exclusive` is the lock under which a dataset, a converted corpus or a tokenizer is built once
by runs started together.
"""

import contextlib
import fcntl
import os
import socket

from array_record.python import array_record_data_source

from roformer import errors


# The host of TFDS's own copies of prepared datasets, the first place its downloader tries.
PROBE_HOST = 'storage.googleapis.com'
_PROXY_VARIABLES = ('https_proxy', 'HTTPS_PROXY', 'http_proxy', 'HTTP_PROXY', 'all_proxy',
                    'ALL_PROXY')


def check_can_download(name: str, directory: str) -> None:
  """Refuses the download of TFDS dataset `name` into `directory` where this machine resolves
  no host name (no network). Behind a proxy, which resolves names itself, nothing is checked."""
  if any(os.environ.get(v) for v in _PROXY_VARIABLES):
    return
  try:
    socket.getaddrinfo(PROBE_HOST, 443)
  except OSError as e:
    raise errors.ConfigError(
        f'config.data.name={name!r} is not prepared in {directory} and TFDS must download it, '
        f'but this machine has no network ({PROBE_HOST}: {e.strerror or e}). Fix: run the same '
        f'command once on a machine with a network and copy {directory} here (same '
        'config.data.data_dir), or use an embedded dataset or your own files '
        '(config.data.files).') from None


def rebuild_fix(directory: str, embedded: bool) -> str:
  """How to rebuild a damaged dataset directory."""
  how = ('it is built again from the installed corpus' if embedded else
         'TFDS downloads and prepares it again')
  return (f"delete {directory} (rm -rf '{directory}'); the next run rebuilds it ({how}); "
          'its tokenizer is kept')


def damaged(directory: str, embedded: bool, what: str) -> errors.DamagedFileError:
  return errors.DamagedFileError(f'the data cache {directory} is damaged: {what}. Fix: '
                                 f'{rebuild_fix(directory, embedded)}.')


def check_not_half_written(directory: str, embedded: bool) -> None:
  """A version directory that exists without its dataset_info.json: TFDS would reuse it as
  built (and find no splits), so it is named instead."""
  if os.path.isdir(directory) and not os.path.exists(
      os.path.join(directory, 'dataset_info.json')):
    raise damaged(directory, embedded, 'it has no dataset_info.json (a build or a copy cut '
                  'short)')


def check_shards(builder, embedded: bool) -> None:
  """Every shard of every split that dataset_info.json lists exists, opens, holds the number
  of records it lists, and its first and last records read back."""
  directory = str(builder.data_dir)
  if not os.path.exists(os.path.join(directory, 'dataset_info.json')):
    return  # Not built here (e.g. TFDS's mock data in tests): nothing to check.
  for split, info in builder.info.splits.items():
    for path, expected in zip(info.filepaths, info.shard_lengths):
      path = str(path)
      if not os.path.exists(path):
        raise damaged(directory, embedded, f'{path} is missing (split {split})')
      try:
        shard = array_record_data_source.ArrayRecordDataSource([path])
        count = len(shard)
        if count != expected:
          raise damaged(directory, embedded, f'{path} holds {count} records, dataset_info.json '
                        f'lists {expected}')
        if count:
          shard[0], shard[count - 1]  # pylint: disable=expression-not-assigned
      except errors.DamagedFileError:
        raise
      except (RuntimeError, OSError, ValueError) as e:
        raise damaged(directory, embedded, f'{path} cannot be read ({first_line(e)})') from None


def first_line(e: BaseException) -> str:
  """The first line of an exception's message (its type's name if it has none), for the
  one-line errors that name a file."""
  text = str(e).strip().splitlines()
  return text[0][:300] if text else type(e).__name__


class RecordFile:
  """One ArrayRecord file this project wrote (a converted corpus's split, a token-cache
  split), read at random, each record through `decode`; a file that does not open or a record
  that does not read is the DamagedFileError `damaged(reason)` returns."""

  def __init__(self, path: str, decode, damaged):
    self.path, self._decode, self._damaged = path, decode, damaged
    try:
      self._records = array_record_data_source.ArrayRecordDataSource([path])
    except (RuntimeError, OSError, ValueError) as e:
      raise damaged(first_line(e)) from None

  def __len__(self):
    return len(self._records)

  def __getitem__(self, index):
    try:
      return self._decode(self._records[index])
    except RuntimeError as e:
      raise self._damaged(first_line(e)) from None

  def __getitems__(self, indices, *args):
    try:
      return [self._decode(r) for r in self._records.__getitems__(indices, *args)]
    except RuntimeError as e:
      raise self._damaged(first_line(e)) from None


class CheckedSource:
  """A random-access source whose read failures (RuntimeError from the ArrayRecord reader)
  are DamagedFileErrors naming the dataset directory and the fix."""

  def __init__(self, source, directory: str, embedded: bool, split: str = ''):
    self._source, self._directory, self._embedded = source, directory, embedded
    self._split = split
    self.identity = f'{directory}:{split}'  # Which split of which build (the token cache's key).

  def __len__(self):
    return len(self._source)

  def _error(self, e) -> errors.DamagedFileError:
    return damaged(self._directory, self._embedded, f'a record of split {self._split or "?"} '
                   f'cannot be read ({first_line(e)})')

  def __getitem__(self, key):
    try:
      return self._source[key]
    except RuntimeError as e:
      raise self._error(e) from None

  def __getitems__(self, keys, *args):
    read_many = getattr(self._source, '__getitems__', None)
    if read_many is None:
      return [self[k] for k in keys]
    try:
      return read_many(keys, *args)
    except RuntimeError as e:
      raise self._error(e) from None

  def __getattr__(self, name):  # Anything else of the TFDS source (its dataset_info, ...).
    if name.startswith('_'):
      raise AttributeError(name)
    return getattr(self._source, name)


@contextlib.contextmanager
def exclusive(lock_path: str | os.PathLike):
  """Holds an exclusive `flock` on lock_path (created with its directory) while the block runs:
  runs started together (a parallel sweep, test workers) build what they share once; the
  others wait, then find it built. The kernel releases it however the holder exits."""
  os.makedirs(os.path.dirname(os.path.abspath(lock_path)), exist_ok=True)
  with open(lock_path, 'w', encoding='utf-8') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    yield
