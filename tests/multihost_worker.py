"""One process of a multi-process training step, for tests/test_multihost.py.

  python tests/multihost_worker.py OUT.json PROCESS_ID NUM_PROCESSES PORT DATA FSDP TENSOR

Trains the tiny causal LM (configs/test.py, dropout 0.1) for a few steps on a fixed global
batch over a (DATA, FSDP, TENSOR) mesh of every process's devices. Each process hands
`sharding.put_batch` only the rows its devices hold, as a data loader on that host would.
Process 0 writes the losses, the gradient norms and the final parameters (gathered) to OUT.json.
The test runs `run` in its own process for the reference.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=wrong-import-position
import jax
import numpy as np
from jax.experimental import multihost_utils

from configs import test as test_config
from roformer import sharding
from roformer import trainer as trainer_lib
from tests.test_step import _batch

STEPS = 3
BATCH = 8


def run(mesh_shape: tuple[int, int, int], devices=None) -> dict:
  """Trains STEPS steps on this process's share of the fixed batch over a mesh of `devices`
  (default: every process's); returns the losses, gradient norms and the gathered parameters."""
  cfg = test_config.get_config()
  cfg.model.dropout = 0.1  # Dropout masks must not depend on how the batch is split.
  cfg.mesh.update(dict(zip(('data', 'fsdp', 'tensor'), mesh_shape)))
  cfg.train.batch_size = BATCH
  mesh = sharding.make_mesh(cfg.mesh, devices)
  trainer = trainer_lib.Trainer(cfg, mesh)

  batch = _batch(cfg, seed=7)  # Packed rows of two documents, one with padding.
  # The rows this process's devices hold, in order: its share of the global batch.
  index_map = sharding.batch_sharding(mesh).addressable_devices_indices_map(
      batch['inputs'].shape)
  rows = sorted({r for index in index_map.values() for r in range(BATCH)[index[0]]})
  local = {k: v[rows] for k, v in batch.items()}

  state = trainer.init_state()
  losses, grad_norms = [], []
  for _ in range(STEPS):
    state, metrics = trainer.train_step(state, sharding.put_batch(local, mesh))
    losses.append(float(metrics['loss']))
    grad_norms.append(float(metrics['grad_norm']))
  params = multihost_utils.process_allgather(state['params'], tiled=True)
  return {'processes': jax.process_count(), 'devices': mesh.devices.size, 'local_rows': rows,
          'losses': losses, 'grad_norms': grad_norms,
          'params': {jax.tree_util.keystr(p): np.asarray(v).tolist()
                     for p, v in jax.tree_util.tree_leaves_with_path(params)}}


def main(out, process_id, num_processes, port, *mesh_shape):
  jax.distributed.initialize(f'localhost:{port}', num_processes, process_id)
  result = run(mesh_shape)
  if process_id == 0:
    with open(out, 'w', encoding='utf-8') as f:
      json.dump(result, f)


if __name__ == '__main__':
  main(sys.argv[1], *map(int, sys.argv[2:]))
