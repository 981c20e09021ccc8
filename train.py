"""Train a model: python train.py --config configs/lm.py --workdir runs/lm [--config.a.b=v]."""

import sys

import jax
from absl import app
from absl import flags
from ml_collections import config_flags

from roformer import errors
from roformer import logs
from roformer import train_lib

_CONFIG = config_flags.DEFINE_config_file('config', 'configs/lm.py', 'Training config file.',
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints and metrics.',
                               required=True)
_DISTRIBUTED = flags.DEFINE_bool(
    'distributed', False, 'Multi-host: call jax.distributed.initialize() first (coordinator and '
    'process ids come from the cluster environment or JAX_COORDINATOR_ADDRESS etc.).')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logs.setup()
  if _DISTRIBUTED.value:
    jax.distributed.initialize()
  try:
    last = train_lib.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except errors.ConfigError as e:
    sys.exit(f'error: {e}')
  if 'preempted' in last:
    print(f'stopped by {last["preempted"]["signal"]} at step {last["preempted"]["step"]} with '
          'a checkpoint; rerun the same command to resume.')


if __name__ == '__main__':
  app.run(main)
