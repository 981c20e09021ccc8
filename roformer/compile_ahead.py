"""Evaluation programs compiled ahead of time, in a background thread, while training runs
(`config.train.compile_ahead`).

A short run (a sweep's synthetic point) spends much of its time compiling: the train step, the
validation pass, and the final evaluation's pass at each length of `eval.length_multipliers`,
one after the other on the critical path. The evaluation passes do not depend on anything the
training computes, only on the shapes and shardings of the parameters and batches, so they are
lowered and compiled (`jit(...).lower(...).compile()`) from abstract values in one background
thread as soon as the run has its state, while the main thread compiles the train step and
then trains.
`auto` compiles ahead on a GPU or TPU only: there the host's cores are free while the device
trains. On the CPU the same cores train, and the background compilation slows the train step's
own compilation and the steps by about what it saves the evaluation
(docs/performance.md, "Evaluation passes compiled ahead").

JAX keeps what a compilation produced in its in-memory cache (and in the persistent one, when
set): the evaluation's own call later finds the executable there, and pays only its tracing.

Before an evaluation runs its pass, it waits for that pass's compilation (`wait`), so a pass is
never compiled twice. A compilation that fails in the background is dropped with a debug line:
the evaluation's own call compiles it again and reports the error where it belongs.
"""

import concurrent.futures
import logging

import jax
import numpy as np

log = logging.getLogger('roformer')


def abstract(tree):
  """Shapes, dtypes and shardings of a tree of arrays, to lower a program from (the arrays
  themselves may be donated to a later step)."""
  return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
                      tree)


def batch(template: dict, placed, members: int = 0) -> dict:
  """The global device batch (abstract), laid out by the sharding `placed`, that host batches
  shaped like `template` (this process's share) make, with a leading axis of `members` when not
  0 (members.Members stacks its members' batches so)."""
  lead = (members,) if members else ()
  return {key: jax.ShapeDtypeStruct(
      (*lead, value.shape[0] * jax.process_count(), *value.shape[1:]), np.dtype(value.dtype),
      sharding=placed) for key, value in template.items()}


def enabled(setting: str) -> bool:
  """Whether config.train.compile_ahead (`auto`, `on`, `off`) compiles ahead on this backend."""
  return setting == 'on' or (setting == 'auto' and jax.default_backend() != 'cpu')


class Ahead:
  """A background thread that compiles the programs it is given, by name, in order."""

  def __init__(self, enabled: bool = True):
    self.enabled = enabled
    self._futures = {}
    self._pool = (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix='compile-ahead')
                  if enabled else None)

  def submit(self, name: str, jitted, *args) -> None:
    """Compiles `jitted` (a jax.jit function, or a sharding.on_mesh one) for abstract `args`."""
    if self.enabled and name not in self._futures:
      self._futures[name] = self._pool.submit(self._compile, name, jitted, args)

  @staticmethod
  def _compile(name, jitted, args) -> bool:
    try:
      jitted.lower(*args).compile()
      return True
    except Exception as e:  # pylint: disable=broad-except  # Its own call reports it.
      log.debug('compiling %s ahead failed (%s: %s); it compiles when it runs.', name,
                type(e).__name__, e)
      return False

  def wait(self, name: str) -> bool:
    """Waits for `name`'s compilation, if it was submitted; whether it compiled."""
    future = self._futures.get(name)
    return bool(future is not None and future.result())

  def wait_all(self) -> None:
    for name in self._futures:
      self.wait(name)

  def close(self) -> None:
    """Drops what has not started, without waiting for the compilation under way (a stop
    request's grace period is not spent on it)."""
    if self._pool is not None:
      self._pool.shutdown(wait=False, cancel_futures=True)
