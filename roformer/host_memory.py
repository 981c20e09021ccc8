"""Keep the host memory that XLA:CPU frees after a step for the next one (Linux, glibc).

XLA:CPU allocates every execution's scratch buffer (the temporaries of the whole train step:
92 MiB for the small causal LM of `scripts/benchmark.py`, 1.9 GiB for the medium one) with
`posix_memalign` when the step starts and frees it when the step ends. glibc's malloc serves a
block that large with a fresh `mmap` (blocks over M_MMAP_THRESHOLD, at most 32 MiB, always; a
worker thread's arena holds at most 64 MiB) and gives it back with `munmap`, so every step
faults its whole scratch buffer in again, one zero-filled 4 KiB page at a time: 25,600 minor
page faults per small step and 506,000 per medium step, 10-15% of the step's CPU time on a
2-core host.

`reuse_freed_memory()` sets glibc's malloc so that such blocks come from the main heap and stay
there after they are freed: once the heap has grown to hold them (the first few steps), a step
faults no page at all:

- M_ARENA_MAX = 1: every thread allocates from the main arena, which grows with `brk` and has no
  size limit (the per-thread arenas cannot hold a block over 64 MiB and map it instead);
- M_MMAP_MAX = 0: no block is served by its own `mmap`;
- M_TRIM_THRESHOLD = -1: the top of the heap is never returned to the system.

What it costs: the process keeps the most heap it ever used (the system gets it back when the
process ends), and its threads share one arena's lock, which makes XLA's compilation slower
(the small causal step's 2.4-3.4 s became 3.1-4.7 s in turns on 2 cores): a run pays it back
after some tens of steps, a run of a handful of steps does not (the test suite turns it off for
the entry points it starts). It must run before JAX starts its CPU client (the client's threads
pick their arena when they first allocate), which is why the entry points call it first, in
`cli.run`. glibc's tunables (`GLIBC_TUNABLES`) do the same but are read only when a process
starts; `mallopt` works from within. Set ROFORMER_REUSE_FREED_MEMORY=0 to leave malloc as it is.
"""

import ctypes
import ctypes.util
import os
import platform

# mallopt's parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8

ENV = 'ROFORMER_REUSE_FREED_MEMORY'
_applied = False


def applied() -> bool:
  """Whether `reuse_freed_memory` has set malloc in this process."""
  return _applied


def supported() -> bool:
  """Whether this process's malloc is glibc's (Linux), the one the settings are for."""
  return platform.system() == 'Linux' and platform.libc_ver()[0] == 'glibc'


def unavailable() -> str | None:
  """Why `reuse_freed_memory` would do nothing here, or None if it can set malloc."""
  if os.environ.get(ENV, '1') == '0':
    return f'{ENV}=0 turns it off'
  if not supported():
    return 'it sets glibc\'s malloc, and this process does not run on Linux with glibc'
  return None


def reuse_freed_memory() -> bool:
  """Sets glibc's malloc as the module docstring says; True if it did. Does nothing (False) off
  Linux/glibc or with ROFORMER_REUSE_FREED_MEMORY=0 (`unavailable` says which)."""
  if unavailable():
    return False
  try:
    libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6')
    mallopt = libc.mallopt
  except (OSError, AttributeError):
    return False
  mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
  mallopt.restype = ctypes.c_int
  global _applied
  # mallopt returns 1 on success; each setting is independent of the others.
  _applied = all([mallopt(param, value) == 1 for param, value in (
      (M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1))])
  return _applied
