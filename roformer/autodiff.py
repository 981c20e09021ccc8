"""The hand-written backward passes, and the switch that turns them off.

A few functions on the core path carry a backward pass written by hand (`jax.custom_vjp`),
each because autodiff's own was measured slower or larger on a device (the reason is in each
function's docstring, the measurements in docs/performance.md). A custom VJP has a cost
besides its upkeep: it has no forward-mode rule, so `jax.jvp`, `jax.jacfwd` and
Hessian-vector products fail through it. So every such function is declared here, through
`custom_vjp`, rather than with `jax.custom_vjp` directly:

- `REGISTRY` lists them all, with the backends on which the hand-written pass is kept (where
  it measured faster; elsewhere the function is differentiated by autodiff);
- `model.custom_gradients=False` (a model's `custom_gradients`) runs every one of them as
  the plain function that autodiff differentiates, in both modes; the outputs are the same
  function, the gradients equal to rounding (tests/test_autodiff.py).

The switch is read while a program is traced, from a context variable that the model's
forward methods (`applying`) and the train step set from the model's `custom_gradients`, inside
the function being traced. A program is therefore traced with its model's own setting, which is
a static attribute of the model's graph: jit keys its cache on it. `use` and `only` are entered
the same way, inside the function that jit traces (jit does not key its cache on a context
variable, so a trace cached outside one would be reused inside it); `only(names)` keeps some
of them, which scripts/custom_gradients.py uses to measure each alone.

The backward passes stay beside their functions' math (attention.py, losses.py, ...), where a
change to one is seen next to the other.
"""

import contextlib
import contextvars
import dataclasses
import functools
from typing import Callable, Iterator

import jax

# None: every registered custom VJP may apply; otherwise the names that may.
_ENABLED: contextvars.ContextVar = contextvars.ContextVar('custom_gradients', default=None)


@dataclasses.dataclass(frozen=True)
class Declared:
  """One hand-written backward pass: where it is, and on which backends it is kept."""
  name: str
  module: str
  function: str  # Its name in the module (and in a traced program's custom_vjp_call).
  backends: tuple[str, ...] | None  # None: every backend.
  why: str


REGISTRY: dict[str, Declared] = {}


def enabled(name: str) -> bool:
  """Whether `name`'s hand-written backward applies in the program being traced now: the
  switch allows it and it is kept on this backend."""
  allowed = _ENABLED.get()
  if allowed is not None and name not in allowed:
    return False
  backends = REGISTRY[name].backends
  return backends is None or _backend() in backends


def _backend() -> str:
  backend = jax.default_backend()
  return 'gpu' if backend in ('cuda', 'rocm') else backend


@contextlib.contextmanager
def _set(allowed: frozenset | None) -> Iterator[None]:
  token = _ENABLED.set(allowed)
  try:
    yield
  finally:
    _ENABLED.reset(token)


def use(custom_gradients: bool):
  """Inside: every custom VJP off (False: plain autodiff), or as the enclosing setting (True).
  Turning them on never re-enables what an enclosing `only` or `use(False)` turned off."""
  return _set(frozenset() if not custom_gradients else _ENABLED.get())


def only(names) -> contextlib.AbstractContextManager:
  """Inside: only the custom VJPs in `names` may apply (scripts measure each alone)."""
  unknown = sorted(set(names) - set(REGISTRY))
  if unknown:
    raise ValueError(f'unknown custom gradients {unknown}; known: {sorted(REGISTRY)}')
  return _set(frozenset(names))


def applying(method: Callable) -> Callable:
  """Decorates a model's forward method: it runs under the model's `custom_gradients`."""
  @functools.wraps(method)
  def wrapped(self, *args, **kwargs):
    with use(self.custom_gradients):
      return method(self, *args, **kwargs)
  return wrapped


def custom_vjp(name: str, *, why: str, nondiff_argnums: tuple[int, ...] = (),
               backends: tuple[str, ...] | None = None,
               plain: Callable | None = None) -> Callable:
  """`jax.custom_vjp` for a function of positional arguments, registered as `name`: the
  decorated function differentiates with the backward given to its `defvjp` where `enabled`,
  and is the plain function, differentiated by autodiff (forward mode included), elsewhere.
  `backends`: where the hand-written pass is kept ('cpu', 'gpu', 'tpu'; None: all). `plain`:
  the same function written so that autodiff can differentiate it, for a function that cannot
  be (a kernel); by default the decorated function itself."""
  def decorate(fun: Callable) -> Callable:
    if name in REGISTRY:
      raise ValueError(f'custom gradient {name!r} is declared twice')
    REGISTRY[name] = Declared(name, fun.__module__, fun.__name__, backends, why)
    custom = jax.custom_vjp(fun, nondiff_argnums=nondiff_argnums)

    @functools.wraps(fun)
    def call(*args):
      return (custom if enabled(name) else plain or fun)(*args)

    call.defvjp = custom.defvjp
    return call
  return decorate
