"""Console logging for the entry points: the project's own lines at INFO, libraries quieter."""

import logging
import sys

from absl import logging as absl_logging


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
