"""Console logging for the entry points: the project's own lines at INFO, libraries quieter."""

import collections
import contextlib
import logging
import os
import sys
import time

from absl import logging as absl_logging


def duration(seconds: float) -> str:
  """'1h05m' or '4m07s' for progress lines and ETAs."""
  seconds = int(max(seconds, 0))
  return f'{seconds // 3600}h{seconds // 60 % 60:02d}m' if seconds >= 3600 else (
      f'{seconds // 60}m{seconds % 60:02d}s')


def process_age() -> float | None:
  """Seconds since this process started (Linux /proc; None elsewhere): its start-up time, Python
  and library imports included, when read at the start of a run."""
  try:
    with open('/proc/self/stat', encoding='ascii') as f:
      started = int(f.read().rsplit(')', 1)[1].split()[19]) / os.sysconf('SC_CLK_TCK')
    with open('/proc/uptime', encoding='ascii') as f:
      return float(f.read().split()[0]) - started
  except (OSError, ValueError, IndexError):
    return None


class Phases:
  """Wall time per phase of a run (`with phases('steps'): ...`), for the line that says where a
  run's time went."""

  def __init__(self):
    self.seconds = collections.Counter()

  @contextlib.contextmanager
  def __call__(self, name: str):
    start = time.perf_counter()
    try:
      yield
    finally:
      self.seconds[name] += time.perf_counter() - start

  def line(self) -> str:
    return ', '.join(f'{name} {seconds:.1f} s' for name, seconds in self.seconds.items())


class _NoTraceback(logging.Filter):
  """Keeps a library's log line and drops the traceback attached to it (orbax logs one for a
  save that failed in its background thread, which the run then reports in one line)."""

  def filter(self, record):
    record.exc_info, record.exc_text, record.stack_info = None, None, None
    return True


class _NoBuildNotice(logging.Filter):
  """Drops TFDS's warning that a dataset's version folder has no dataset_info.json, which it
  logs while a dataset that is not built yet is opened (the first run on a data directory),
  just before it builds it: a notice about its own next step, not a problem of the user's. A
  cache left half-built is caught by roformer/data/cache.py, which names the fix."""

  def filter(self, record):
    return 'has no dataset_info.json' not in record.getMessage()


def setup(verbose: bool = False, tracebacks: bool = False) -> None:
  """Prints `roformer` messages to stdout; absl/orbax chatter only from WARNING up, and
  without tracebacks unless `tracebacks` (the entry points' --debug)."""
  if not verbose:
    absl_logging.set_verbosity(absl_logging.WARNING)
  handlers = [absl_logging.get_absl_handler()] + logging.getLogger().handlers
  for kind in (_NoBuildNotice,) + (() if tracebacks else (_NoTraceback,)):
    for handler in handlers:
      if not any(isinstance(f, kind) for f in handler.filters):
        handler.addFilter(kind())
  logger = logging.getLogger('roformer')
  if not logger.handlers:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter('%(asctime)s %(message)s', '%H:%M:%S'))
    logger.addHandler(handler)
  logger.setLevel(logging.INFO)
  logger.propagate = False
