"""Runs that differ only in their seed, trained by one program.

A sweep's seeds of one setting build the same model and compile the same step; only the initial
parameters, the data order and the dropout keys differ, and the step takes its dropout seed as
an argument (`trainer.SeededStep`). `Members` holds such runs' train states and advances them
together, one compilation for all:

- vmapped: one `jax.vmap` step over the stacked states and batches, a single launch per step
  for every member (what keeps an accelerator busy with models this small), and the same for
  each validation batch (`eval_sums`, through evaluate.group_validation);
- one by one: the same compiled step called for each member in turn.

`vmapped=None` chooses: vmapped on accelerators, one by one on the CPU, where XLA runs a
batched matmul slower than the same matmuls one after the other and a step of these sizes keeps
to one core either way (docs/performance.md has the measurement). Either way each member's
numbers are those of its run on its own, to float rounding.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from roformer import compile_ahead
from roformer import sharding
from roformer import trainer as trainer_lib


def _stacked(shardings):
  """The shardings of the same arrays with a leading member axis (never split)."""
  return jax.tree.map(lambda s: NamedSharding(s.mesh, P(None, *s.spec)), shardings)


class Members:
  """The train states of runs that share `trainer` (their configs differ only in the seed),
  `seeds` their dropout seeds. `step(host_batches)` advances every member that has not
  `failed` with its own batch; `state(i)` is member i's train state as a run of its own has it
  (what its checkpoint saves)."""

  def __init__(self, trainer: trainer_lib.Trainer, seeds, states: list, vmapped=None):
    self.trainer, self.seeds = trainer, [int(s) for s in seeds]
    self.vmapped = (jax.default_backend() != 'cpu') if vmapped is None else bool(vmapped)
    self.failed = [False] * len(self.seeds)
    mesh = trainer.mesh
    if not self.vmapped or len(self.seeds) == 1:
      self.vmapped, self.states = False, list(states)
      return
    self._state_shardings = _stacked(trainer.state_shardings)
    self._batch_sharding = NamedSharding(mesh, P(None, sharding.BATCH_AXES))
    stack = lambda *trees: jax.tree.map(lambda *x: jnp.stack(x), *trees)
    self.stacked = jax.jit(stack, out_shardings=self._state_shardings)(*states)
    # Member i's state, laid out as a run of its own lays it out (one program for every i).
    self._take = jax.jit(lambda stacked, i: jax.tree.map(lambda x: x[i], stacked),
                         out_shardings=trainer.state_shardings)
    rules = sharding.rules_from_config(trainer.config.mesh)
    self._eval = sharding.on_mesh(mesh, rules=rules, fn=jax.jit(
        jax.vmap(trainer.eval_fn),
        in_shardings=(_stacked(trainer.state_shardings['params']), self._batch_sharding),
        out_shardings=sharding.replicated(mesh)))
    step = jax.vmap(trainer.step_fn)
    self._step = sharding.on_mesh(mesh, rules=rules, fn=jax.jit(
            step, in_shardings=(self._state_shardings, self._batch_sharding,
                                sharding.replicated(mesh)),
            out_shardings=(self._state_shardings, sharding.replicated(mesh)),
            donate_argnums=0))
    self._seeds = np.asarray(self.seeds, np.int32)

  def __len__(self) -> int:
    return len(self.seeds)

  def step(self, host_batches: list[dict]):
    """One optimizer update of every member; the metrics on the device (split them with
    `split` once fetched)."""
    if not self.vmapped:
      out = []
      for i, batch in enumerate(host_batches):
        if self.failed[i]:
          out.append(None)
          continue
        self.states[i], metrics = self.trainer.train_step(
            self.states[i], sharding.put_batch(batch, self.trainer.mesh), self.seeds[i])
        out.append(metrics)
      return out
    self.stacked, metrics = self._step(self.stacked, self._put(host_batches), self._seeds)
    return metrics

  def eval_sums(self, host_batches: list[dict]):
    """Every member's evaluation sums (the task's `eval_sums`) of its own batch, in one launch
    for the group (vmapped groups only); on the device, with a leading member axis."""
    return self._eval(self.stacked['params'], self._put(host_batches))

  def eval_program(self, template: dict):
    """(the jitted pass `eval_sums` calls, its abstract arguments) for host batches shaped like
    `template`: what roformer/compile_ahead.py compiles before the first validation."""
    return self._eval, (compile_ahead.abstract(self.stacked['params']),
                        compile_ahead.batch(template, self._batch_sharding, len(self)))

  def _put(self, host_batches: list[dict]) -> dict:
    """The members' batches stacked on a leading member axis, in one transfer of every array."""
    return jax.make_array_from_process_local_data(
        self._batch_sharding, {k: np.stack([b[k] for b in host_batches]) for k in host_batches[0]})

  def split(self, fetched) -> list[dict | None]:
    """Per member, the host metrics of one fetched `step` result (None for a failed member
    stepped one by one)."""
    if not self.vmapped:
      return list(fetched)
    return [{k: v[i] for k, v in fetched.items()} for i in range(len(self.seeds))]

  def state(self, i: int) -> dict:
    if not self.vmapped:
      return self.states[i]
    return self._take(self.stacked, np.int32(i))

  def params(self, i: int):
    return self.state(i)['params']
