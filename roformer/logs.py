"""Console logging for the entry points: the project's own lines at INFO, libraries quieter."""

import logging
import sys

from absl import logging as absl_logging


def duration(seconds: float) -> str:
  """'1h05m' or '4m07s' for progress lines and ETAs."""
  seconds = int(max(seconds, 0))
  return f'{seconds // 3600}h{seconds // 60 % 60:02d}m' if seconds >= 3600 else (
      f'{seconds // 60}m{seconds % 60:02d}s')


class _NoTraceback(logging.Filter):
  """Keeps a library's log line and drops the traceback attached to it (orbax logs one for a
  save that failed in its background thread, which the run then reports in one line)."""

  def filter(self, record):
    record.exc_info, record.exc_text, record.stack_info = None, None, None
    return True


def setup(verbose: bool = False, tracebacks: bool = False) -> None:
  """Prints `roformer` messages to stdout; absl/orbax chatter only from WARNING up, and
  without tracebacks unless `tracebacks` (the entry points' --debug)."""
  if not verbose:
    absl_logging.set_verbosity(absl_logging.WARNING)
  if not tracebacks:
    for handler in [absl_logging.get_absl_handler()] + logging.getLogger().handlers:
      if not any(isinstance(f, _NoTraceback) for f in handler.filters):
        handler.addFilter(_NoTraceback())
  logger = logging.getLogger('roformer')
  if not logger.handlers:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter('%(asctime)s %(message)s', '%H:%M:%S'))
    logger.addHandler(handler)
  logger.setLevel(logging.INFO)
  logger.propagate = False
