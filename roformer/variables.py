"""What every model variable declares where it is created: its logical axes and whether AdamW
decays it (as metadata on the nnx.Param), and the variable type of FAVOR+'s redraw counter.

The mesh layout (`roformer.sharding`) and the optimizer (`roformer.optim`) read these
declarations instead of matching parameter names, so a new module's weights need no rule
elsewhere: a Param created without them is refused, naming its path, when a run lays out its
state. The axes are logical names (`vocab`, `embed`, `heads`, `mlp`, or None for a dimension
that is never split) that `config.mesh.rules` maps to mesh axes.

Metadata rather than flax's `with_partitioning` defaults: the layout is applied once, by the
train state's jit shardings, so creating a model needs no mesh (`eager_sharding=False`).
"""

from typing import Callable, Sequence

import jax
from flax import nnx

Axes = Sequence[str | None]


class FeatureDraw(nnx.Variable):
  """FAVOR+'s random-feature draw index: saved with the weights (checkpoints, evaluation and
  decoding use the draw the model was trained with last), never trained, never decayed, and
  given no optimizer state. The train step sets it to step // redraw_interval."""


# The logical axes a parameter may declare (config.mesh.rules maps each to mesh axes).
PARAM_AXES = ('vocab', 'embed', 'heads', 'mlp', 'expert')


def _metadata(axes: Axes, decay: bool, sign_descent: bool = False) -> dict:
  unknown = [a for a in axes if a is not None and a not in PARAM_AXES]
  if unknown:  # A misspelt name would leave the dimension unsplit on every mesh, silently.
    raise ValueError(f'logical axis {unknown[0]!r} of a model variable is not one of '
                     f'{", ".join(PARAM_AXES)}. Fix: one of those, or None for a dimension '
                     'that is never split.')
  return {'out_sharding': tuple(axes), 'weight_decay': bool(decay), 'eager_sharding': False,
          **({'sign_descent': True} if sign_descent else {})}


def init(initializer: Callable, axes: Axes, *, decay: bool) -> Callable:
  """`initializer` (e.g. a Linear's kernel_init) whose Param declares `axes` and `decay`."""
  return nnx.with_metadata(initializer, **_metadata(axes, decay))


def param(value: jax.Array, axes: Axes, *, decay: bool, sign_descent: bool = False
          ) -> nnx.Param:
  """An nnx.Param of `value` that declares its logical `axes` (one per dimension) and whether
  AdamW decays it (matrices that multiply activations or embed ids do; norms, biases, bias
  tables and scalars do not); with `sign_descent`, the optimizer moves it by a constant step
  against its gradient's sign instead (roformer/optim.py; a mixture's choice bias)."""
  return nnx.Param(value, **_metadata(axes, decay, sign_descent))


def is_variable(x) -> bool:
  return isinstance(x, nnx.Variable)


def undeclared_error(path: str) -> ValueError:
  return ValueError(
      f'the model variable {path} declares no logical axes. Fix: create it with '
      'roformer.variables.param(value, axes, decay=...) or pass roformer.variables.init(...) as '
      "the layer's initializer, so that the mesh layout and the optimizer know it.")


def axes(variable: nnx.Variable, path: str) -> tuple:
  """The logical axes `variable` (at `path`, for the error) declared at creation."""
  names = variable.get_metadata().get('out_sharding')
  ndim = len(variable.get_value().shape)
  if names is None:
    raise undeclared_error(path)
  if len(names) != ndim:
    raise ValueError(f'the model variable {path} declares {len(names)} logical axes '
                     f'{tuple(names)} for a value of {ndim} dimensions '
                     f'{variable.get_value().shape}. '
                     'Fix: give one axis per dimension (None for one that is never split).')
  return tuple(names)


def sign_descends(variable: nnx.Variable) -> bool:
  """Whether the optimizer moves this Param by the sign of its gradient (`param`)."""
  return isinstance(variable, nnx.Param) and bool(variable.get_metadata().get('sign_descent'))


def decays(variable: nnx.Variable) -> bool:
  """Whether AdamW's weight decay applies: only to Params that declared it."""
  return isinstance(variable, nnx.Param) and bool(variable.get_metadata().get('weight_decay'))


def trainable(state: nnx.State) -> tuple[nnx.State, nnx.State]:
  """(the Params the optimizer updates, every other variable) of a model's state."""
  return nnx.split_state(state, nnx.Param, ...)


def set_feature_draw(state: nnx.State, draw) -> nnx.State:
  """`state` with every FeatureDraw set to `draw` (each element of one stored stacked, one per
  layer: roformer/scanned.py)."""
  def one(v):
    value = v.get_value()
    return v.replace(jax.numpy.broadcast_to(jax.numpy.asarray(draw, value.dtype), value.shape)
                     ) if isinstance(v, FeatureDraw) else v
  return jax.tree.map(one, state, is_leaf=is_variable)
