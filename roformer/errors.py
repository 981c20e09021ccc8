"""The error types for problems a user can fix (entry points print them as one line, no
traceback), and how to recognise a storage failure whatever library reported it."""

import errno
import re


class ConfigError(ValueError):
  """A user-fixable problem; the message names the field (or file) and the fix."""


class TooShort(ConfigError):
  """Rows of config.data.seq_len cannot hold a task's fixed parts; `shortest` is the least
  seq_len that holds them, so that the bounds of several sources can be told as one."""

  def __init__(self, message: str, shortest: int):
    super().__init__(message)
    self.shortest = shortest


class DamagedFileError(ConfigError):
  """A file this project wrote or reads (a workdir's config or tokenizer, the data cache, an
  embedded corpus) is truncated, overwritten or missing; the message names it and the fix."""


class DataError(ConfigError):
  """A user's data file that does not read as documents (not UTF-8, not JSON, no text field,
  empty, damaged): the message names the file, the line or byte, and the fix."""


class StorageError(ConfigError):
  """A write failed on the storage itself (a full disk, a quota, a read-only file system,
  permissions); the message says what was kept and how to go on."""


# errno -> how the storage failed.
STORAGE_ERRNOS = {
    errno.ENOSPC: 'no space left on device',
    errno.EDQUOT: 'disk quota exceeded',
    errno.EROFS: 'read-only file system',
    errno.EACCES: 'permission denied',
    errno.EPERM: 'operation not permitted',
    errno.EIO: 'input/output error',
    errno.EFBIG: 'file too large',
}
# How to go on after each kind of failure (keyed like STORAGE_ERRNOS' descriptions).
_SPACE = 'free space on that disk'
_ACCESS = 'make that directory writable for this user (or give another directory)'
STORAGE_FIXES = {
    'no space left on device': _SPACE,
    'disk quota exceeded': 'free space within your quota (or raise it)',
    'read-only file system': 'remount that file system read-write (or give another directory)',
    'permission denied': _ACCESS,
    'operation not permitted': _ACCESS,
    'input/output error': 'check the disk (its logs, its health) or give another directory',
    'file too large': 'give a directory on a file system that takes large files',
}
# TensorStore (orbax's writer) reports the errno inside a ValueError's text.
_OS_ERROR_CODE = re.compile(r"os_error_code='?(\d+)")


def storage_problem(exc: BaseException | None) -> str | None:
  """How `exc`, or an exception it was raised from, failed on the storage ('no space left on
  device: /path'), or None when it is something else."""
  seen = set()
  while exc is not None and id(exc) not in seen:
    seen.add(id(exc))
    if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
      where = exc.filename or ''
      return STORAGE_ERRNOS[exc.errno] + (f': {where}' if where else '')
    code = _OS_ERROR_CODE.search(str(exc))
    if code and int(code.group(1)) in STORAGE_ERRNOS:
      path = re.search(r'"(/[^"]+)"', str(exc))
      return STORAGE_ERRNOS[int(code.group(1))] + (f': {path.group(1)}' if path else '')
    exc = exc.__cause__ or exc.__context__
  return None


def storage_fix(storage: str) -> str:
  """The fix for a failure described by `storage_problem` ('no space left on device: /p')."""
  return STORAGE_FIXES.get(storage.split(':')[0], _SPACE + ' (or make it writable)')


def read_failure(exc: BaseException, limit: int = 300) -> str:
  """`exc` of a failed checkpoint read, in one line: its type and first line, without what
  TensorStore appends for its own debugging (a pointer to its 'full details', the repr of a
  bound C++ method)."""
  text = str(exc).splitlines()[0] if str(exc) else ''
  text = re.split(r'\s*See full TensorStore details', text)[0]
  text = re.sub(r'<bound method [^>]*>?', '', text).strip().rstrip('.:')
  return f'{type(exc).__name__}: {text[:limit]}' if text else type(exc).__name__


def without_fix(exc: BaseException) -> str:
  """`exc`'s message up to its ' Fix: ...': why, for a caller that names another fix."""
  return str(exc).split(' Fix:')[0]


def fix_of(exc: BaseException) -> str:
  """The fix `exc`'s message names ('' if none), without its final period."""
  return str(exc).split(' Fix:', 1)[1].strip().rstrip('.') if ' Fix:' in str(exc) else ''
