"""Console logging for the entry points: the project's own lines at INFO, libraries quieter."""

import logging
import sys

from absl import logging as absl_logging


def duration(seconds: float) -> str:
  """'1h05m' or '4m07s' for progress lines and ETAs."""
  seconds = int(max(seconds, 0))
  return f'{seconds // 3600}h{seconds // 60 % 60:02d}m' if seconds >= 3600 else (
      f'{seconds // 60}m{seconds % 60:02d}s')


def setup(verbose: bool = False) -> None:
  """Prints `roformer` messages to stdout; absl/orbax chatter only from WARNING up."""
  if not verbose:
    absl_logging.set_verbosity(absl_logging.WARNING)
  logger = logging.getLogger('roformer')
  if not logger.handlers:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter('%(asctime)s %(message)s', '%H:%M:%S'))
    logger.addHandler(handler)
  logger.setLevel(logging.INFO)
  logger.propagate = False
