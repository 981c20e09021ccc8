"""The device mesh and how arrays are laid out on it.

The mesh always has the three named axes `data`, `fsdp` and `tensor` (size 1 when unused) so that
partition annotations resolve on any mesh. Batches are split along (`data`, `fsdp`).

Parameters carry logical axis names, declared where each is created (`roformer.variables`):
`vocab`, `embed`, `heads`, `mlp`, `expert`, or None. Activations get logical names at block
boundaries and inside attention and the MLP (`batch`, `act_heads`, `act_mlp`, `act_expert`). The rules in
`config.mesh.rules` map each logical name to a mesh axis (or none), so one config field set
chooses the layout:

  data parallel (pmap's layout)  mesh data=N                  every parameter replicated
  FSDP (ZeRO-3)                  mesh fsdp=N  (embed -> fsdp)  parameters and optimizer state
                                                              split along d_model, gathered
                                                              by XLA per use
  tensor parallel                mesh tensor=N (heads, mlp, vocab -> tensor)
                                                              attention projections, MLP columns
                                                              and the vocabulary split (the
                                                              fused qkv columns in contiguous
                                                              blocks, not yet per head as in
                                                              Megatron: XLA regroups q/k/v)

and any product of them (e.g. data=2, fsdp=2, tensor=2). A mixture of experts' weights carry
`expert` on their experts' axis and its hidden activations `act_expert`, both whole by default;
`--config.mesh.rules.expert=fsdp --config.mesh.rules.act_expert=fsdp` splits the experts over
the fsdp devices instead of d_model (expert parallelism): each holds its experts' weights and
optimizer state, and the dense computation runs each device's experts on the tokens of its
data shard, gathered over fsdp (GShard's dispatch as XLA partitions it); the ragged one runs per
device (roformer/expert_parallel.py). The optimizer state follows its
parameters. A dimension that its mesh axis does not divide stays whole (e.g. an odd vocabulary).
"""

import contextvars
import difflib
import math

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from roformer import errors
from roformer import variables

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
    raise errors.ConfigError(
        f'config.mesh: {" and ".join(f"{a}" for a, s in zip(AXES, sizes) if s == -1)} are '
        'each -1, and one axis at most may take the devices the others leave. Fix: give all '
        'but one of them a size.')
  known = math.prod(s for s in sizes if s != -1)
  fixed = ', '.join(f'config.mesh.{a}={s}' for a, s in zip(AXES, sizes) if s != -1)
  if -1 in sizes:
    if num_devices % known:
      raise errors.ConfigError(
          f'config.mesh: {num_devices} devices are not divisible by the fixed axes ({fixed}: '
          f'{known}). Fix: fixed sizes whose product divides {num_devices}.')
    sizes[sizes.index(-1)] = num_devices // known
  if math.prod(sizes) != num_devices:
    raise errors.ConfigError(
        f'config.mesh {dict(zip(AXES, sizes))} needs {math.prod(sizes)} devices but '
        f'{num_devices} are available. Fix: one axis at -1 and the others\' product dividing '
        f'{num_devices}, e.g. --config.mesh.data=-1 --config.mesh.fsdp=1 --config.mesh.tensor=1.')
  return tuple(sizes)


def make_mesh(mesh_cfg, devices=None) -> Mesh:
  """A mesh over `devices` (default: the first config.mesh.num_devices, -1 for all)."""
  if devices is None:
    devices = jax.devices()
    n = int(mesh_cfg.num_devices)
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
  """Global device arrays from this process's share of a batch (numpy), in one call: on one
  process a single transfer of every array, a third faster than one call per array."""
  return jax.make_array_from_process_local_data(batch_sharding(mesh), dict(batch))


# Default config.mesh.rules: logical axis -> mesh axis (or a list of them, or None).
DEFAULT_RULES = {
    'batch': ['data', 'fsdp'],
    'vocab': 'tensor',
    'embed': 'fsdp',
    'heads': 'tensor',
    'mlp': 'tensor',
    'act_heads': 'tensor',
    'act_mlp': 'tensor',
    'expert': '',  # A mixture's experts: whole unless split (expert parallelism, below).
    'act_expert': '',
}


def _mesh_axes(name, rules):
  axes = rules.get(name) if name else None
  if axes in (None, '', 'none', 'None'):
    return ()
  return tuple(axes) if isinstance(axes, (list, tuple)) else (axes,)


def rules_from_config(mesh_cfg) -> dict:
  """config.mesh.rules ({logical axis: mesh axis, list of them, or '' for none}), checked."""
  rules = dict(DEFAULT_RULES)
  given = mesh_cfg.get('rules')
  if given is not None:
    given = given.to_dict() if hasattr(given, 'to_dict') else dict(given)
    for name in given:
      if name not in DEFAULT_RULES:  # A rule no array reads: its axis would stay as it was.
        close = difflib.get_close_matches(name, list(DEFAULT_RULES), n=1)
        raise errors.ConfigError(
            f'config.mesh.rules.{name} is not a logical axis of the model'
            + (f' (did you mean {close[0]!r}?)' if close else '')
            + f'. Fix: one of {", ".join(DEFAULT_RULES)}.')
    rules.update(given)
  for name, axes in rules.items():
    bad = [a for a in _mesh_axes(name, rules) if a not in AXES]
    if bad:
      raise errors.ConfigError(f'config.mesh.rules.{name}={axes!r} names {bad}, not a mesh axis. '
                               f"Fix: use {list(AXES)}, a list of them, or '' (not split).")
  return rules


class on_mesh:  # pylint: disable=invalid-name
  """A jitted function called (and lowered) with `mesh` set and `rules` in effect, so the
  activations' logical axes resolve against them when it is traced."""

  def __init__(self, mesh: Mesh, fn, rules=None):
    self.mesh, self.fn, self.rules = mesh, fn, dict(rules or DEFAULT_RULES)

  def _run(self, fn, *args, **kwargs):
    token = _ACTIVE_RULES.set(self.rules)
    try:
      with jax.set_mesh(self.mesh):
        return fn(*args, **kwargs)
    finally:
      _ACTIVE_RULES.reset(token)

  def __call__(self, *args, **kwargs):
    return self._run(self.fn, *args, **kwargs)

  def lower(self, *args, **kwargs):
    return self._run(self.fn.lower, *args, **kwargs)


def spec_for(names, shape, rules, mesh: Mesh) -> P:
  """PartitionSpec of logical `names`; a dimension its mesh axes do not divide stays whole,
  and a mesh axis is used once per array."""
  used, out = set(), []
  for name, size in zip(names, shape):
    axes = tuple(a for a in _mesh_axes(name, rules) if a not in used and mesh.shape[a] > 1)
    if axes and size % math.prod(mesh.shape[a] for a in axes) == 0:
      used.update(axes)
      out.append(axes[0] if len(axes) == 1 else axes)
    else:
      out.append(None)
  return P(*out)


def path_str(path, *, keep_value: bool = False) -> str:
  """'blocks/0/mlp/up/kernel' for a pytree path: dict keys, sequence indices and attribute names
  alike, so a saved tree's metadata and a live state give the same strings. An nnx Variable's
  trailing `value` is dropped unless `keep_value`."""
  parts = [str(getattr(k, 'key', getattr(k, 'idx', getattr(k, 'name', k)))) for k in path]
  if parts and parts[-1] == 'value' and not keep_value:
    parts = parts[:-1]
  return '/'.join(parts)


def declared_axes(abstract_variables) -> dict[str, tuple]:
  """{path: logical axes} of a model state's variables, as each declared them at creation;
  a ValueError names the first one that declared none."""
  out = {}
  for path, var in jax.tree_util.tree_flatten_with_path(
      abstract_variables, is_leaf=variables.is_variable)[0]:
    name = path_str(path)
    if not variables.is_variable(var):
      raise variables.undeclared_error(name)
    out[name] = variables.axes(var, name)
  return out


def param_shardings(abstract_variables, mesh: Mesh, rules) -> object:
  """NamedShardings for a model state's (abstract) variables, from their declared logical axes
  and the rules."""
  axes = declared_axes(abstract_variables)
  def one(path, leaf):
    return NamedSharding(mesh, spec_for(axes[path_str(path)], leaf.shape, rules, mesh))
  return jax.tree_util.tree_map_with_path(one, abstract_variables)


def state_shardings(abstract_state: dict, mesh: Mesh, rules) -> dict:
  """Shardings of {'params', 'opt_state', 'step'}: every optimizer subtree shaped like the
  trainable parameters (Adam's moments) is laid out like them; other leaves are replicated."""
  by_variable = param_shardings(abstract_state['params'], mesh, rules)
  by_param, _ = variables.trainable(by_variable)
  structure = jax.tree.structure(by_param)
  like_params = lambda node: jax.tree.structure(node) == structure  # pylint: disable=g-long-lambda
  opt = jax.tree.map(lambda node: by_param if like_params(node) else replicated(mesh),
                     abstract_state['opt_state'], is_leaf=like_params)
  return {'params': by_variable, 'opt_state': opt,
          **{k: replicated(mesh) for k in abstract_state if k not in ('params', 'opt_state')}}


_ACTIVE_RULES = contextvars.ContextVar('logical_axis_rules', default=DEFAULT_RULES)


def _active_mesh():
  """The multi-device data/fsdp/tensor mesh set by `jax.set_mesh`, or None."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or math.prod(mesh.shape.values()) == 1 or set(mesh.axis_names) != set(AXES):
    return None
  return mesh


def active_spec(names, shape) -> P | None:
  """The PartitionSpec that the active mesh and rules give an array of logical axes `names`
  and `shape`, or None without a multi-device mesh."""
  mesh = _active_mesh()
  return None if mesh is None else spec_for(names, shape, _ACTIVE_RULES.get(), mesh)


def spec_axes(entry) -> tuple[str, ...]:
  """The mesh axes of one entry of a PartitionSpec (None, an axis, or a tuple of them)."""
  return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


def shards(name: str, size: int) -> int:
  """Into how many pieces the active mesh and rules split a dimension of `size` whose logical
  axis is `name` (1 without a multi-device mesh)."""
  spec = active_spec((name,), (size,))
  if spec is None:
    return 1
  mesh = _active_mesh()
  return math.prod(mesh.shape[a] for a in spec_axes(spec[0]))


def constrain(x, names):
  """Lays an activation out by its logical axis names when a multi-device mesh is active
  (`jax.set_mesh`); a no-op otherwise."""
  spec = active_spec(names, x.shape)
  return x if spec is None else jax.lax.with_sharding_constraint(x, spec)


def per_shard(fn, args, names, out_names):
  """fn(*args) run on each device's shard of the active mesh (`jax.shard_map`), every argument
  laid out by its logical axis names (`names`: one tuple per argument, `out_names` for the
  output, shaped like the first argument), where a multi-device mesh is active; fn(*args)
  otherwise. For a kernel XLA cannot split (a Pallas call), which it would otherwise run whole
  on gathered inputs: fn must compute each shard from that shard alone (per row and head).

  Each logical name is resolved once, on the first argument, whose names must include every
  other argument's: every array is then split along the same mesh axes (per array, a rule
  could otherwise give the heads of one array a mesh axis that another's rows took)."""
  mesh = _active_mesh()
  if mesh is None:
    return fn(*args)
  first = spec_for(names[0], args[0].shape, _ACTIVE_RULES.get(), mesh)
  resolved = dict(zip(names[0], first))
  spec = lambda logical: P(*(resolved[n] if n else None for n in logical))
  in_specs = tuple(spec(n) for n in names)
  out_specs = spec(out_names)
  # Pallas' outputs carry no varying-axes annotation, so the shard_map does not check them.
  return jax.shard_map(fn, in_specs=in_specs, out_specs=out_specs, check_vma=False)(*args)
