"""The environment of the entry points that tests run as subprocesses.

The tests' XLA flags (tests/conftest.py) force 8 host devices and make compilation cheap, since
the programs are tiny and run a few steps, so compiling them is most of the suite's time:
backend optimisation level 0, and XLA:CPU's older elemental emitter for fusions instead of its
MLIR fusion emitters (`--xla_cpu_use_fusion_emitters=false`: about half the backend compile
time of a tiny train step, 1.4-1.9 s -> 0.8 s), and its code generated as one LLVM module
instead of split into parts for a thread pool (`--xla_cpu_parallel_codegen_split_count=1`: the
two pytest-xdist workers already keep both cores busy, and the parts cost more than they save;
tests/test_decode.py alone in 66 s instead of 82, the imported checkpoints' logits in 35 s
instead of 42). A subprocess that should see another number of devices keeps these flags:
without them, its compilation alone takes a few times longer.
"""

import os

FAST_COMPILE = ('--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false '
                '--xla_cpu_parallel_codegen_split_count=1')


def xla_flags(devices: int) -> str:
  return f'--xla_force_host_platform_device_count={devices} {FAST_COMPILE}'


def env(devices: int = 1, **extra: str) -> dict[str, str]:
  """os.environ for a subprocess with `devices` host CPU devices, plus `extra`."""
  return {**os.environ, 'XLA_FLAGS': xla_flags(devices), **extra}
