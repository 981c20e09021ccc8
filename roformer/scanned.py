"""A stack whose blocks' parameters are stored stacked, run as one `lax.scan`
(`config.model.scan_layers`), and the conversion between that layout and the per-block one.

The blocks are built one by one, exactly as the loop builds them (same random draws, so a
scanned model and a looped one from the same seed hold the same numbers), and their states are
then stacked once, at creation. The optimizer therefore sees one array per parameter for all
the layers: the update, the gradient clipping and their compilation do not grow with depth,
and no step copies the parameters into a stack.

Layers that differ (a hybrid layout of kinds, per-layer windows, per-layer RoPE bases: any
Python attribute of a block) are handled by their period: the smallest p such that block i has
the structure of block i - p. Each scan step runs p blocks, block j of the step being layer
t*p + j, so each of the p structures keeps its own static attributes (a window stays a static
bound that the causal blocks skip by; a base stays a constant), and the stack compiles p blocks
whatever its depth. Layers past the last whole period run after the scan, one by one, and a
leading run of layers unlike the rest (a mixture's dense first layers: DeepSeek-V3's and
GLM-4.5's) runs before it, one by one (`head`): the split into those, the period and the rest
is the one that compiles the fewest blocks.

Checkpoints keep the per-block layout (`blocks/<i>/...`): `to_layers` and `to_stacked` convert
any tree whose paths are a model state's (the parameters, and the optimizer's moments that
mirror them), so `scan_layers` may change between a run and its resumption, a warm start or an
export, and every reader of a checkpoint sees one layout.
"""

import re

import jax
import jax.numpy as jnp
from flax import nnx

from roformer import auxiliary
from roformer import sharding


def _stack(blocks):
  """One module of `blocks`' shared structure whose variables hold the blocks' values stacked
  along a new leading axis (declared unsplit: the mesh never splits the layers)."""
  graphdef, first = nnx.split(blocks[0])
  states = [first] + [nnx.split(block)[1] for block in blocks[1:]]
  stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)
  return _with_axes(nnx.merge(graphdef, stacked), lambda names: (None, *names))


def _with_axes(module, change):
  """`module` with each variable's declared logical axes changed by `change`."""
  for _, variable in nnx.iter_graph(module):
    if isinstance(variable, nnx.Variable):
      names = variable.get_metadata().get('out_sharding')
      if names is not None:
        variable.set_metadata('out_sharding', change(tuple(names)))
  return module


def _period(kinds) -> int:
  n = len(kinds)
  return next(p for p in range(1, n + 1) if all(kinds[i] == kinds[i - p] for i in range(p, n)))


def _structures(blocks) -> list[int]:
  """Each block's structure as a small integer (equal for equal graphdefs), so that the periods
  compare integers, not graphs."""
  seen, kinds = [], []
  for block in blocks:
    graphdef = nnx.graphdef(block)
    index = next((i for i, g in enumerate(seen) if g == graphdef), None)
    if index is None:
      seen.append(graphdef)
      index = len(seen) - 1
    kinds.append(index)
  return kinds


def split(blocks) -> tuple[int, int]:
  """(h, p): the first h blocks run one by one, the others scan with period p (then their
  rest), h chosen to compile the fewest blocks, h + p + the rest (0 on a tie)."""
  kinds = _structures(blocks)
  n = len(kinds)
  best = None
  for h in range(n):
    p = _period(kinds[h:])
    cost = h + p + (n - h) % p
    if best is None or cost < best[0]:
      best = (cost, h, p)
  return best[1], best[2]


class ScannedBlocks(nnx.Module):
  """The blocks of one stack: `head` the first h layers (`split`), `stacked[j]` holds layers
  h + j, h + p + j, h + 2p + j, ... (whole periods), `rest` the layers after them. Iterating gives
  each layer as a block of its own (slices of the stacked values), which is how decoding with a
  cache runs it."""

  def __init__(self, blocks):
    n = len(blocks)
    h, p = split(blocks)
    self.num_layers, self.first, self.period, self.depth = n, h, p, (n - h) // p
    self.whole = h + self.depth * p  # Past the head, the layers in whole periods, scanned.
    self.head = nnx.List(blocks[:h])
    self.stacked = nnx.List([_stack(blocks[h + j:self.whole:p]) for j in range(p)])
    self.rest = nnx.List(blocks[self.whole:])

  def __len__(self) -> int:
    return self.num_layers

  def layer(self, i: int):
    """Layer `i` as a block of its own."""
    if i < self.first:
      return self.head[i]
    if i >= self.whole:
      return self.rest[i - self.whole]
    t, j = divmod(i - self.first, self.period)
    graphdef, state = nnx.split(self.stacked[j])
    return _with_axes(nnx.merge(graphdef, jax.tree.map(lambda a: a[t], state)),
                      lambda names: names[1:])

  def __iter__(self):
    return (self.layer(i) for i in range(self.num_layers))

  def run(self, shared, x, positions, mask, keys, checkpoint, extra):
    """The blocks on x without a cache: the head, one scan over the whole periods, the rest.
    `shared` is the stack's position value (a list, one per layer, for hybrid layouts);
    `keys` one dropout key (or None) per layer; `checkpoint` wraps each block's computation
    (rematerialisation) or is None."""
    p, depth, h = self.period, self.depth, self.first
    layer_shared = (lambda i: shared[i]) if isinstance(shared, list) else (lambda i: shared)

    collect = auxiliary.active()  # A block's auxiliary losses leave the scan as its output.

    def one(graphdef, state, h, key, index, block_shared):
      def apply(block):
        return block(h, mask, positions, block_shared, key, None, layer=index, **extra)[0]
      block = nnx.merge(graphdef, state)
      h, aux = auxiliary.total(apply, block) if collect else (apply(block), None)
      return sharding.constrain(h, ('batch', None, None)), aux
    if checkpoint is not None:
      one = checkpoint(one, static_argnums=(0,))

    graphdefs, states = zip(*(nnx.split(m) for m in self.stacked))

    def body(x, xs):
      step_states, step_keys, step = xs
      step_aux = []
      for j in range(p):
        key = None if step_keys is None else step_keys[j]
        x, aux = one(graphdefs[j], step_states[j], x, key, h + step * p + j,
                     layer_shared(h + j))
        step_aux += [] if aux is None else [aux]
      return x, (sum(step_aux[1:], step_aux[0]) if step_aux else None)

    aux = []
    for i in range(h):  # The head, layer by layer.
      graphdef, state = nnx.split(self.head[i])
      x, layer_aux = one(graphdef, state, x, keys[i], jnp.int32(i), layer_shared(i))
      aux += [] if layer_aux is None else [layer_aux]
    whole = self.whole
    layer_keys = None
    if keys[0] is not None:
      layer_keys = jnp.stack(keys[h:whole])
      layer_keys = layer_keys.reshape(depth, p, *layer_keys.shape[1:])
    x, scan_aux = jax.lax.scan(body, x, (states, layer_keys, jnp.arange(depth, dtype=jnp.int32)))
    aux += [] if scan_aux is None else [scan_aux.sum()]
    for i in range(whole, self.num_layers):
      graphdef, state = nnx.split(self.rest[i - whole])
      x, layer_aux = one(graphdef, state, x, keys[i], jnp.int32(i), layer_shared(i))
      aux += [] if layer_aux is None else [layer_aux]
    if aux:
      auxiliary.add(self, sum(aux[1:], aux[0]))
    return x


class Layout:
  """The correspondence between a scanned model's paths and the per-block ones. `stacks` maps
  each stack's attribute name (a model's blocks) to (its number of layers, its period, and the
  layers of its head: 0 where absent)."""

  def __init__(self, stacks: dict[str, tuple[int, ...]]):
    self.stacks = {name: (*sizes, 0)[:3] for name, sizes in stacks.items()}
    # Paths of the two layouts ('/'-joined, any prefix such as params/ or opt_state/0/mu/ kept).
    names = '|'.join(map(re.escape, self.stacks))
    self._layer = re.compile(rf'(^|.*/)({names})/(\d+)/(.*)$')
    self._scanned = re.compile(rf'(^|.*/)({names})/(head|stacked|rest)/(\d+)/(.*)$')

  def layer_source(self, path: str):
    """(scanned path, index along its stacked axis or None) holding per-block `path`."""
    found = self._layer.match(path)
    if not found:
      return path, None
    head, name, i, rest = found.group(1), found.group(2), int(found.group(3)), found.group(4)
    n, p, h = self.stacks[name]
    whole = h + (n - h) // p * p
    if i < h:
      return f'{head}{name}/head/{i}/{rest}', None
    if i < whole:
      return f'{head}{name}/stacked/{(i - h) % p}/{rest}', (i - h) // p
    return f'{head}{name}/rest/{i - whole}/{rest}', None

  def stacked_sources(self, path: str):
    """The per-block paths whose values scanned `path` holds: a list (stacked in this order),
    one path (a layer of the head or after the whole periods), or None (not a block's path)."""
    found = self._scanned.match(path)
    if not found:
      return None
    head, name, part, j, rest = found.groups()
    n, p, h = self.stacks[name]
    j = int(j)
    if part == 'head':
      return f'{head}{name}/{j}/{rest}'
    if part == 'rest':
      return f'{head}{name}/{h + (n - h) // p * p + j}/{rest}'
    return [f'{head}{name}/{h + t * p + j}/{rest}' for t in range((n - h) // p)]

  def to_layers(self, tree, target):
    """`tree` (a scanned model's state, or any tree with its paths) in the per-block layout
    whose structure `target` (abstract, per-block) gives."""
    by_path = _by_path(tree)

    def one(path, _):
      source, index = self.layer_source(_path(path))
      return by_path[source] if index is None else by_path[source][index]
    return jax.tree_util.tree_map_with_path(one, target)

  def to_stacked(self, tree, target):
    """`tree` (per-block) in the scanned layout whose structure `target` gives."""
    by_path = _by_path(tree)

    def one(path, _):
      sources = self.stacked_sources(_path(path))
      if sources is None:
        return by_path[_path(path)]
      if isinstance(sources, str):
        return by_path[sources]
      return jnp.stack([by_path[s] for s in sources])
    return jax.tree_util.tree_map_with_path(one, target)


def _path(path) -> str:
  return sharding.path_str(path, keep_value=True)


def _by_path(tree) -> dict:
  return {_path(p): v for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]}
