"""Auxiliary training losses that a layer adds to the objective (a mixture of experts' load
balance and router z-loss: roformer/moe.py).

A layer calls `add(self, value)` with a scalar already times its coefficient. While a train step
traces its loss inside `collecting()`, the value is sown (`nnx.Module.sow`) as an
`AuxiliaryLoss`, and `total` returns the sum of every value sown during the call; outside
(evaluation, generation, export) nothing is recorded and the model computes the same outputs.
The train step adds the total, per real target token, to the loss sums it differentiates
(roformer/steps.py), and logs it as `auxiliary_loss`; the evaluation loss never includes it.

A scanned stack (roformer/scanned.py) cannot let its blocks sow from inside `lax.scan`: it
collects each block's values as the scan's output and adds their sum itself.
"""

import contextlib
import contextvars
from typing import Callable, Iterator

import jax.numpy as jnp
from flax import nnx

_COLLECTING: contextvars.ContextVar = contextvars.ContextVar('auxiliary_losses', default=False)


class AuxiliaryLoss(nnx.Intermediate):
  """A scalar that a layer adds to the training objective."""


@contextlib.contextmanager
def collecting() -> Iterator[None]:
  """Records the values `add` is given while a train step's loss is traced."""
  token = _COLLECTING.set(True)
  try:
    yield
  finally:
    _COLLECTING.reset(token)


def active() -> bool:
  return _COLLECTING.get()


def add(module: nnx.Module, value) -> None:
  """Adds the scalar `value` to the objective of the train step being traced, if any."""
  if active():
    module.sow(AuxiliaryLoss, 'auxiliary_loss', jnp.asarray(value, jnp.float32))


def total(fn: Callable, module: nnx.Module, *args, **kwargs):
  """(fn(module, *args, **kwargs), the sum of the values sown during it: a float32 scalar, or
  None where nothing was, which a model without auxiliary losses tells while it is traced)."""
  out, sown = nnx.capture(fn, AuxiliaryLoss)(module, *args, **kwargs)
  values = [v for _, leaf in nnx.to_flat_state(sown) for v in leaf.get_value()]
  return out, (sum(values[1:], values[0]) if values else None)
