"""The device mesh and how arrays are laid out on it.

The mesh always has the three named axes `data`, `fsdp` and `tensor` (size 1 when unused) so that
partition annotations resolve on any mesh. Batches are split along (`data`, `fsdp`); parameters
and optimizer state are replicated for now.
"""

import math

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from roformer import errors

AXES = ('data', 'fsdp', 'tensor')
BATCH_AXES = ('data', 'fsdp')


def mesh_shape(mesh_cfg, num_devices: int) -> tuple[int, ...]:
  """Resolves -1 in the configured axis sizes; raises a clear error on a mismatch."""
  sizes = [int(mesh_cfg[a]) for a in AXES]
  for axis, size in zip(AXES, sizes):
    if size == 0 or size < -1:
      raise errors.ConfigError(f'config.mesh.{axis}={size} must be a positive size or -1 (all remaining '
                       'devices).')
  if sizes.count(-1) > 1:
    raise errors.ConfigError('config.mesh: at most one axis may be -1.')
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if num_devices % known:
      raise errors.ConfigError(f'config.mesh: {num_devices} devices are not divisible by the fixed axes '
                       f'(product {known}). Fix: change config.mesh.fsdp / config.mesh.tensor.')
    sizes[sizes.index(-1)] = num_devices // known
  if math.prod(sizes) != num_devices:
    raise errors.ConfigError(f'config.mesh {dict(zip(AXES, sizes))} needs {math.prod(sizes)} devices but '
                     f'{num_devices} are available. Fix: set one axis to -1.')
  return tuple(sizes)


def make_mesh(mesh_cfg, devices=None) -> Mesh:
  """A mesh over `devices` (default: the first config.mesh.num_devices, -1 for all)."""
  if devices is None:
    devices = jax.devices()
    n = int(mesh_cfg.get('num_devices', -1))
    if n > 0 and jax.process_count() > 1:
      raise errors.ConfigError('config.mesh.num_devices selects devices on one host only. Fix: '
                               'keep it -1 for multi-host runs.')
    if n > len(devices) or n == 0 or n < -1:
      raise errors.ConfigError(f'config.mesh.num_devices={n} but {len(devices)} devices exist. '
                               'Fix: use -1 (all) or a number up to that.')
    devices = devices[:n] if n > 0 else devices
  shape = mesh_shape(mesh_cfg, len(devices))
  return Mesh(np.asarray(devices).reshape(shape), AXES)


def data_parallel_size(mesh: Mesh) -> int:
  return math.prod(mesh.shape[a] for a in BATCH_AXES)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def put_batch(batch: dict, mesh: Mesh) -> dict:
  """Global device arrays from this process's share of a batch (numpy)."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}
