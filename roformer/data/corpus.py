"""Your own text files as a dataset: `config.data.name='files'`.

`config.data.files` is one glob or several (comma-separated; `**` descends into folders):

  .txt, .md                     one document per file
  .jsonl, .jsonl.gz, .json.gz   one JSON object per line, its text under config.data.text_key
  .parquet                      one document per row, column config.data.text_key

Splits: `config.data.validation_files` and `config.data.test_files` give those splits their own
globs. Without them, validation and test are carved out of `files` by a stable hash of each
document's text (`data.validation_fraction`, `data.test_fraction`): a document lands in the
same split whichever file holds it and wherever the folder is, so an exact duplicate never sits
in train and test at once.

The documents are converted once, streaming (one document in memory at a time), into one
ArrayRecord file per split under DATA_DIR/files/KEY/, where KEY hashes every matched file's
path, size and modification time and the settings that decide what a split holds: a changed
file gets a new key, so the corpus is converted again, and an unchanged one is read from the
cache. A conversion writes KEY.partial/ and renames it to KEY/ at the end, under a lock: a
conversion cut short (a kill, a full disk, a bad document) leaves no KEY/ for a run to read,
and the next run removes the partial directory and converts again.

Not a TFDS builder: a builder is a module per dataset, and what TFDS adds (downloads,
versions) has no use for local files; the ArrayRecord writer and reader are the ones TFDS uses.
"""

import contextlib
import dataclasses
import glob
import gzip
import hashlib
import json
import os
import shutil
import time
import zlib
from typing import Iterator

from array_record.python import array_record_module

from roformer import errors
from roformer import files as files_lib
from roformer.data import cache

NAME = 'files'  # config.data.name.
SPLITS = ('train', 'validation', 'test')
FORMATS = {'.txt': 'text', '.md': 'text', '.jsonl': 'json_lines', '.jsonl.gz': 'json_lines',
           '.json.gz': 'json_lines', '.parquet': 'parquet'}
_LAYOUT = 1  # Bumped when the cache's layout changes: every key changes with it.
_SKIP_FLAG = '--config.data.skip_bad_documents=True'


def is_files(data_cfg) -> bool:
  return data_cfg.name == NAME


def _format(path: str) -> str:
  for suffix in sorted(FORMATS, key=len, reverse=True):
    if path.lower().endswith(suffix):
      return FORMATS[suffix]
  raise errors.ConfigError(
      f'{path}: its format is not known from its name (one of {", ".join(FORMATS)}). Fix: '
      'rename it, or narrow the glob in config.data.files so that it matches only documents.')


GLOB_FIELDS = ('files', 'validation_files', 'test_files')


def absolute(globs: str) -> str:
  """The comma-separated `globs` with each relative one read from the current directory (and
  `~` expanded), so that a saved run names its files wherever it is evaluated or resumed."""
  patterns = [g.strip() for g in globs.split(',')]
  return ','.join(os.path.abspath(os.path.expanduser(p)) if p else p for p in patterns)


def make_absolute(data_cfg, saved=None) -> None:
  """config.data's globs of your own files, and its mixture entries', made absolute in place
  (a run started with `--config.data.files=docs/*.txt` saves the directory it was started in);
  with `saved` (a saved run's config.data), the globs equal to its own stay as saved."""
  def groups(cfg):
    mixture = cfg.get('mixture') or {}
    return [(None, cfg)] + [(name, entry) for name, entry in mixture.items()
                            if hasattr(entry, 'get')]
  kept = dict(groups(saved)) if saved is not None else {}
  for name, group in groups(data_cfg):
    for field in GLOB_FIELDS:
      value = group.get(field)
      if value and not (name in kept and kept[name].get(field) == value):
        group[field] = absolute(value)


def matched(globs: str, field: str) -> list[str]:
  """The files (absolute paths, sorted per glob, each once) that the comma-separated `globs`
  of config.data.`field` match; a glob that matches no file is an error naming it."""
  patterns = [g.strip() for g in globs.split(',') if g.strip()]
  if not patterns:
    raise errors.ConfigError(f"config.data.{field} names no files. Fix: give a glob, e.g. "
                             f"--config.data.{field}='DIR/*.jsonl.gz' (several: comma-separated).")
  paths = {}
  for pattern in patterns:
    found = sorted(os.path.abspath(p) for p in glob.glob(os.path.expanduser(pattern),
                                                         recursive=True) if os.path.isfile(p))
    if not found and os.path.isdir(os.path.expanduser(pattern)):
      raise errors.ConfigError(
          f'config.data.{field}: {pattern!r} is a directory. Fix: a glob of its documents, '
          f"e.g. --config.data.{field}='{pattern.rstrip('/')}/**/*.txt' (or .jsonl, ...).")
    if not found:
      relative = '' if os.path.isabs(os.path.expanduser(pattern)) else (
          ' A relative glob is read from the current directory (a run saves it made absolute '
          'from the directory it started in; one saved before, as given): run from that '
          'directory, or give the glob as an absolute path.')
      raise errors.ConfigError(
          f'config.data.{field}: {pattern!r} matches no file (from {os.getcwd()}). Fix: check '
          f'the path, or quote the glob so that the shell does not expand it.{relative}')
    for path in found:
      _format(path)
      paths.setdefault(path, None)
  return list(paths)


@dataclasses.dataclass(frozen=True)
class Plan:
  """What the conversion reads: the files of each split ('' holds the files whose documents
  are carved into the three splits by hash) and the settings that decide the splits."""
  files: dict[str, tuple[str, ...]]
  text_key: str
  validation_fraction: float
  test_fraction: float
  skip_bad_documents: bool

  def key(self) -> str:
    """A hash of everything a converted split depends on: each file's path, size and
    modification time, and the settings."""
    stamp = {split: [(p, os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths]
             for split, paths in self.files.items()}
    text = json.dumps([_LAYOUT, stamp, self.text_key, self.validation_fraction,
                       self.test_fraction, self.skip_bad_documents], sort_keys=True)
    return hashlib.sha256(text.encode('utf-8')).hexdigest()[:20]


def plan(data_cfg) -> Plan:
  """The files and settings of config.data (no file is read but for its size and time)."""
  own = {split: data_cfg[f'{split}_files'] for split in SPLITS[1:]}
  if any(own.values()) and not all(own.values()):
    missing = [f'config.data.{s}_files' for s, g in own.items() if not g]
    raise errors.ConfigError(
        f'{" and ".join(missing)} is empty while another split has its own files. Fix: give '
        'each of validation_files and test_files a glob, or neither (then both are carved out '
        'of config.data.files by hash).')
  files = {}
  for split, globs in own.items():
    if globs:
      files[split] = tuple(matched(globs, f'{split}_files'))
  if files and set(files['validation']) & set(files['test']):
    both = sorted(set(files['validation']) & set(files['test']))
    raise errors.ConfigError(
        f'{both[0]} is matched by both config.data.validation_files and test_files. Fix: give '
        'the two splits globs that match different files.')
  held_out = set(files.get('validation', ())) | set(files.get('test', ()))
  # Files that a split of their own matches are not trained on, whatever data.files matches.
  train = tuple(p for p in matched(data_cfg.files, 'files') if p not in held_out)
  if not train:
    raise errors.ConfigError('every file config.data.files matches is a validation or test '
                             'file. Fix: give config.data.files the training files.')
  files = {'train' if files else '': train, **files}
  carved = '' in files
  return Plan(files, data_cfg.text_key,
              float(data_cfg.validation_fraction) if carved else 0.0,
              float(data_cfg.test_fraction) if carved else 0.0,
              bool(data_cfg.skip_bad_documents))


def carve(text: str, validation_fraction: float, test_fraction: float) -> str:
  """The split of a document of the carved files: a uniform draw from the hash of its text."""
  digest = hashlib.blake2b(text.encode('utf-8', 'surrogatepass'), digest_size=8).digest()
  u = int.from_bytes(digest, 'big') / 2.0**64
  if u < test_fraction:
    return 'test'
  return 'validation' if u < test_fraction + validation_fraction else 'train'


class _Skipped(Exception):
  """A document that is not UTF-8, skipped under config.data.skip_bad_documents."""


def _decode(data: bytes, where: str, offset: int, skip: bool) -> str:
  try:
    return data.decode('utf-8')
  except UnicodeDecodeError as e:
    if skip:
      raise _Skipped() from None
    raise errors.DataError(
        f'{where} is not UTF-8 text (byte 0x{data[e.start]:02x} at byte offset {offset + e.start}'
        f' of the file). Fix: convert the file to UTF-8, or skip such documents with '
        f'{_SKIP_FLAG}.') from None


def documents(path: str, text_key: str, skip_bad: bool = False,
              skipped: list | None = None,
              nulls: list | None = None) -> Iterator[tuple[str, int]]:
  """(text, bytes of the file read so far) for each document of `path`, one at a time. A file
  with no document, a line that is not a JSON object holding a string under `text_key`, a
  parquet file that does not read or has no such column: a DataError naming the file (and line)
  and the fix. A document that is not UTF-8 is such an error too, or with `skip_bad` skipped
  and counted in `skipped`. A parquet row whose text is null (a column of web text often has
  some) holds no document: it is left out and named in `nulls`."""
  kind, count, skipped = _format(path), 0, skipped if skipped is not None else []
  nulls = nulls if nulls is not None else []
  before = len(skipped)
  if kind == 'text':
    with open(path, 'rb') as f:
      data = f.read()  # One document: the pipeline holds it whole anyway.
    if data:
      try:
        yield _decode(data, path, 0, skip_bad), len(data)
        count += 1
      except _Skipped:
        skipped.append(path)
  elif kind == 'json_lines':
    with open(path, 'rb') as raw:
      with (gzip.GzipFile(fileobj=raw) if path.lower().endswith('.gz') else
            contextlib.nullcontext(raw)) as f:
        offset = 0
        for number, line in enumerate(_lines(f, path), 1):
          where = f'{path} line {number}'
          if line.strip():
            try:
              text = _json_text(_decode(line, where, offset, skip_bad), where, text_key,
                                skip_bad)
            except _Skipped:
              skipped.append(where)
            else:
              count += 1
              yield text, raw.tell()
          offset += len(line)
  else:
    for text, done in _parquet(path, text_key, skip_bad, skipped, nulls):
      count += 1
      yield text, done
  if not count and len(skipped) == before:
    what = {'text': 'an empty file', 'json_lines': 'no line but blank ones',
            'parquet': 'no row'}[kind]
    raise errors.DataError(f'{path} holds no document ({what}). Fix: delete it, or narrow '
                           'the glob so that it does not match it.')


def _lines(f, path: str) -> Iterator[bytes]:
  try:
    yield from f
  except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
    raise errors.DataError(f'{path} cannot be read ({type(e).__name__}: {e}). Fix: replace it '
                           'with a complete copy, or narrow the glob so that it does not match '
                           'it.') from None


def _json_text(line: str, where: str, text_key: str, skip: bool = False) -> str:
  try:
    record = json.loads(line)
  except json.JSONDecodeError as e:
    raise errors.DataError(f'{where} is not JSON ({e.msg}; column {e.colno}). Fix: repair '
                           'or remove that line (each line of a .jsonl file is one JSON '
                           'object).') from None
  if not isinstance(record, dict) or text_key not in record:
    keys = sorted(record) if isinstance(record, dict) else type(record).__name__
    raise errors.DataError(f'{where} has no {text_key!r} (it holds {keys}). Fix: set '
                           '--config.data.text_key to the field holding the text, or fix the '
                           'line.')
  text = record[text_key]
  if not isinstance(text, str):
    raise errors.DataError(f'{where}: {text_key!r} holds a value of type {type(text).__name__}, '
                           'not a string. Fix: point --config.data.text_key at the text.')
  try:
    text.encode('utf-8')
  except UnicodeEncodeError as e:  # A lone surrogate escaped in the JSON (\ud83d).
    if skip:
      raise _Skipped() from None
    raise errors.DataError(
        f'{where} is not UTF-8 text (a lone surrogate {text[e.start]!r} at character '
        f'{e.start} of {text_key!r}). Fix: repair that line, or skip such documents with '
        f'{_SKIP_FLAG}.') from None
  return text


def _parquet(path: str, text_key: str, skip_bad: bool, skipped: list,
             nulls: list) -> Iterator[tuple[str, int]]:
  import pyarrow  # pylint: disable=g-import-not-at-top  # Only runs on parquet files need it.
  from pyarrow import parquet  # pylint: disable=g-import-not-at-top
  fix = ('replace it with a complete copy, or narrow the glob so that it does not match it')
  try:
    table = parquet.ParquetFile(path)
    names = table.schema_arrow.names
    if text_key not in names:
      raise errors.DataError(f'{path} has no column {text_key!r} (columns: {names}). Fix: set '
                             '--config.data.text_key to the column holding the text.')
    size, rows, done = os.path.getsize(path), max(table.metadata.num_rows, 1), 0
    for batch in table.iter_batches(batch_size=256, columns=[text_key]):
      for number, value in enumerate(batch.column(0).to_pylist(), done + 1):
        where = f'{path} row {number}'
        if isinstance(value, bytes):
          try:
            value = _decode(value, where, 0, skip_bad)
          except _Skipped:
            skipped.append(where)
            continue
        if value is None:
          nulls.append(where)
          continue
        if not isinstance(value, str):
          raise errors.DataError(f'{where}: column {text_key!r} holds {type(value).__name__}, '
                                 'not text. Fix: point --config.data.text_key at the text.')
        yield value, size * number // rows
      done += batch.num_rows
  except (pyarrow.ArrowException, OSError) as e:
    raise errors.DataError(f'{path} is not a readable parquet file ({cache.first_line(e)}). Fix: '
                           f'{fix}.') from None


def _progress(total_bytes: int, files: int):
  """tqdm's bar (documents, bytes, ETA) on a terminal; nothing in a log file."""
  import tqdm  # pylint: disable=g-import-not-at-top
  return tqdm.tqdm(total=total_bytes, unit='B', unit_scale=True, unit_divisor=1024,
                   desc=f'converting {files} files', disable=None, mininterval=0.5)


def convert(p: Plan, directory: str, log=None) -> dict:
  """Writes each split's documents, in file order, to directory/SPLIT.array_record (the
  directory must not exist) and returns the counts written to its info.json."""
  os.makedirs(directory)
  writers = {s: array_record_module.ArrayRecordWriter(os.path.join(directory, f'{s}.array_record'),
                                                      'group_size:1') for s in SPLITS
             if s in p.files or '' in p.files}
  counts = {s: 0 for s in writers}
  digests = {s: hashlib.sha256() for s in writers}  # Of each split's documents, in order.
  skipped: list[str] = []
  nulls: list[str] = []  # Parquet rows whose text is null.
  paths = [(split, path) for split, group in p.files.items() for path in group]
  total = sum(os.path.getsize(path) for _, path in paths)
  started, done_bytes = time.time(), 0
  bar = _progress(total, len(paths))
  try:
    for split, path in paths:
      read = 0
      for text, read_now in documents(path, p.text_key, p.skip_bad_documents, skipped,
                                      nulls):
        target = split or carve(text, p.validation_fraction, p.test_fraction)
        record = text.encode('utf-8', 'surrogatepass')
        writers[target].write(record)
        digests[target].update(len(record).to_bytes(8, 'little') + record)
        counts[target] += 1
        bar.update(read_now - read)
        read = read_now
        bar.set_postfix(documents=sum(counts.values()), refresh=False)
      bar.update(os.path.getsize(path) - read)
      done_bytes += os.path.getsize(path)
  finally:
    bar.close()
    for writer in writers.values():
      writer.close()
  info = {'documents': counts, 'bytes': done_bytes, 'skipped': len(skipped),
          'digests': {split: d.hexdigest()[:20] for split, d in digests.items()},
          'skipped_first': skipped[:20], 'null_rows': len(nulls),
          'null_rows_first': nulls[:20], 'seconds': round(time.time() - started, 3),
          'files': {s or 'carved': list(g) for s, g in p.files.items()},
          'text_key': p.text_key, 'validation_fraction': p.validation_fraction,
          'test_fraction': p.test_fraction}
  with open(os.path.join(directory, 'info.json'), 'w', encoding='utf-8') as f:
    json.dump(info, f, indent=1)
  if log:
    log.info('Converted %d documents (%s) from %d files in %.1f s%s.', sum(counts.values()),
             ', '.join(f'{s} {n}' for s, n in counts.items()), len(paths), info['seconds'],
             (f'; skipped {len(skipped)} that are not UTF-8' if skipped else '')
             + (f'; left out {len(nulls)} parquet rows whose text is null (first: {nulls[0]})'
                if nulls else ''))
  return info


def root(data_dir: str) -> str:
  return os.path.join(data_dir, NAME)


def prepare(data_cfg, data_dir: str, log=None) -> str:
  """The converted corpus of config.data (converted now if no run has converted these files
  with these settings): its directory DATA_DIR/files/KEY."""
  p = plan(data_cfg)
  key = p.key()
  directory = os.path.join(root(data_dir), key)
  if os.path.exists(os.path.join(directory, 'info.json')):
    return directory
  with cache.exclusive(os.path.join(root(data_dir), f'.{key}.lock')):
    if os.path.exists(os.path.join(directory, 'info.json')):
      return directory  # Converted by a run that held the lock first.
    partial = directory + '.partial'
    shutil.rmtree(partial, ignore_errors=True)  # A conversion cut short: start again.
    try:
      convert(p, partial, log)
      shutil.rmtree(directory, ignore_errors=True)  # One left without its info.json.
      os.replace(partial, directory)
    except BaseException:
      shutil.rmtree(partial, ignore_errors=True)
      raise
  return directory


class Source(cache.RecordFile):
  """A split of a converted corpus: random access to {text_key: document}."""

  def __init__(self, directory: str, split: str, text_key: str):
    path = os.path.join(directory, f'{split}.array_record')
    self.identity = path  # The directory is the files' key.
    super().__init__(
        path, lambda record: {text_key: record.decode('utf-8', 'surrogatepass')},
        lambda reason: errors.DamagedFileError(
            f'the converted corpus {directory} is damaged: {path} cannot be read ({reason}). '
            f"Fix: delete it (rm -rf '{directory}'); the next run converts the files again."))


def load_sources(data_cfg, data_dir: str, splits, log=None) -> dict[str, Source]:
  """The converted corpus's `splits` (converted now if needed); a split asked for that got no
  document is an error saying how to give it some."""
  directory = prepare(data_cfg, data_dir, log)
  sources = {split: Source(directory, split, data_cfg.text_key) for split in splits}
  for split, source in sources.items():
    if not len(source):
      if split == 'train':
        how = 'lower config.data.validation_fraction and test_fraction, or add documents'
      elif data_cfg[f'{split}_files']:
        how = f'give config.data.{split}_files documents'
      else:
        how = (f'raise config.data.{split}_fraction (now {data_cfg[f"{split}_fraction"]}) or '
               'add documents')
      raise errors.DataError(f'the {split} split of config.data.files has no document '
                             f'({directory}/info.json counts each split). Fix: {how}.')
  return sources


def cache_key(data_cfg) -> str:
  """The key of config.data's converted corpus (for the tokenizer trained on it)."""
  return plan(data_cfg).key()


def content(data_cfg, data_dir: str, split: str) -> str:
  """What a converted split holds: its number of documents and a hash of them in order (the
  same text gives the same hash wherever its files were copied to, whatever their modification
  times). A corpus converted before the hashes were kept is hashed here, from its records."""
  directory = prepare(data_cfg, data_dir)
  path = os.path.join(directory, 'info.json')
  info = files_lib.read_json(path, f"delete the converted corpus (rm -rf '{directory}'); the next "
                               'run converts the files again')
  digest = info.get('digests', {}).get(split)
  source = Source(directory, split, data_cfg.text_key)
  if digest is None:
    hashed = hashlib.sha256()
    for i in range(len(source)):
      record = source[i][data_cfg.text_key].encode('utf-8', 'surrogatepass')
      hashed.update(len(record).to_bytes(8, 'little') + record)
    digest = hashed.hexdigest()[:20]
  return f'{len(source)} documents, sha256 {digest}'

