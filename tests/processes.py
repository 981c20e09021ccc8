"""The environment of the entry points that tests run as subprocesses.

The tests' XLA flags (tests/conftest.py) force 8 host devices and compile at backend
optimisation level 0 (the programs are tiny and run a few steps). A subprocess that should
see another number of devices keeps the optimisation level: without it, its compilation alone
takes a few times longer.
"""

import os

FAST_COMPILE = '--xla_backend_optimization_level=0'


def xla_flags(devices: int) -> str:
  return f'--xla_force_host_platform_device_count={devices} {FAST_COMPILE}'


def env(devices: int = 1, **extra: str) -> dict[str, str]:
  """os.environ for a subprocess with `devices` host CPU devices, plus `extra`."""
  return {**os.environ, 'XLA_FLAGS': xla_flags(devices), **extra}
