"""One process of a vmapped group of two seeds (loop.train_seeds) trained over every process's
devices, for tests/test_multihost.py.

  python tests/multihost_group.py ROOT PROCESS_ID NUM_PROCESSES PORT

Trains tests/test_members.py's tiny copy task at seeds 0 and 1 as one vmapped group into
ROOT/seed=0 and ROOT/seed=1 (metrics, validations, checkpoints and eval_results.json, written
by process 0), every validation through evaluate.group_validation (validating member by member
fails). With NUM_PROCESSES 1 it runs alone, without jax.distributed: the reference.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=wrong-import-position
import jax

from roformer import evaluate
from roformer import loop
from tests.test_members import tiny


def _one_member_validation(*args, **kwargs):
  raise AssertionError('validated member by member: the group path was not taken')


def main(root, process_id, num_processes, port):
  if num_processes > 1:
    jax.distributed.initialize(f'localhost:{port}', num_processes, process_id)
  config = tiny('rope')
  config.mesh.num_devices = -1  # Every process's devices.
  config.train.eval_batches = 2  # Two launches and a sum of the group's validation.
  evaluate.validation = _one_member_validation  # Each validation is the group's.
  loop.train_seeds(config, os.path.join(root, 'seed={seed}'), [0, 1],
                   eval_splits=('validation',), vmapped=True)


if __name__ == '__main__':
  main(sys.argv[1], *map(int, sys.argv[2:]))
