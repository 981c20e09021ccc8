"""roformer/host_memory.py: through an entry point, a compiled step's scratch buffer is kept
between executions instead of being faulted in again every time."""

import json
import os
import statistics
import subprocess
import sys

import pytest

from roformer import host_memory

pytestmark = pytest.mark.skipif(not host_memory.supported(),
                                reason='the setting is glibc malloc\'s; elsewhere it does nothing')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# An entry point as train.py is one: the training modules imported first, then cli.run(main).
# main runs a jitted function whose scratch buffer (a [6144, 6144] float32 intermediate,
# 144 MiB) is over every size glibc would keep by default, and counts the process's minor page
# faults during each of nine executions after three warm-up ones.
_PROGRAM = """
import json, resource
from roformer import cli, loop, trainer  # What train.py imports before cli.run.

def main(args):
  import jax, jax.numpy as jnp
  x = jnp.linspace(-1.0, 1.0, 6144 * 64, dtype=jnp.float32).reshape(6144, 64)
  step = jax.jit(lambda x: jnp.tanh(x @ x.T) @ x).lower(x).compile()
  for _ in range(3):
    step(x).block_until_ready()
  faults = []
  for _ in range(9):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step(x).block_until_ready()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
  print('RESULT ' + json.dumps({'temp_bytes': step.memory_analysis().temp_size_in_bytes,
                                'faults': faults}))

cli.run(main, cli.ArgumentParser())
"""


def _faults(reuse: bool) -> dict:
  env = dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS='')
  env[host_memory.ENV] = '1' if reuse else '0'
  out = subprocess.run([sys.executable, '-c', _PROGRAM], cwd=ROOT, env=env, check=True,
                       capture_output=True, text=True, timeout=300).stdout
  line = next(l for l in out.splitlines() if l.startswith('RESULT '))
  return json.loads(line[len('RESULT '):])


@pytest.mark.slow  # A training process measured from outside: about 10 s.
def test_an_entry_point_faults_no_scratch_page_after_the_first_steps():
  kept = _faults(reuse=True)
  pages = kept['temp_bytes'] / 4096
  assert kept['temp_bytes'] > 128 * 2**20  # Over glibc's 32 MiB mmap and 64 MiB arena limits.
  # The median: the heap still grows once where one execution's buffer is taken before the
  # previous one's is given back (they overlap by a moment), and then holds both.
  assert statistics.median(kept['faults']) < 0.01 * pages, kept


def test_without_the_setting_every_execution_faults_its_scratch_buffer_in_again():
  # The problem the module solves, and the opt-out: ROFORMER_REUSE_FREED_MEMORY=0.
  default = _faults(reuse=False)
  pages = default['temp_bytes'] / 4096
  assert statistics.median(default['faults']) > 0.9 * pages, default


def test_the_opt_out_leaves_malloc_alone(monkeypatch):
  monkeypatch.setenv(host_memory.ENV, '0')
  assert host_memory.reuse_freed_memory() is False
  assert host_memory.ENV in host_memory.unavailable()
