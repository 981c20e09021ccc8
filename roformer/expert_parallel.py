"""The ragged mixture of experts split over devices by its experts (expert parallelism), each
device computing its own experts' (token, expert) pairs alone.

With `config.mesh.rules.expert` naming mesh axes (e.g. fsdp), each device holds E/n of every
mixture's experts. Left to XLA's partitioner, the ragged computation (roformer/moe.py: pairs sorted
by expert, `jax.lax.ragged_dot`) gathers every (token, expert) pair of the global batch on every
device and sums [pairs, d_model] over all of them: memory and traffic that grow with the whole
batch, across the data axis too. Here it runs per device (`jax.shard_map`), as GShard's dispatch
does within an expert group:
1. the tokens, their chosen experts and weights are gathered over the expert axes that also split
   the batch (the expert group: the devices that hold the other experts of these tokens);
2. each device sorts the group's pairs by expert, its own experts' first, and multiplies those
   rows alone by its experts' matrices (`ragged_dot`, the other pairs past the groups' sizes);
3. the weighted rows are added back to their tokens, and the group's partial sums are summed and
   split back to each device's own tokens (`psum_scatter`); over expert axes that do not split the
   batch, and over a mesh axis that splits the experts' hidden width, they are summed (`psum`).
The result equals the unsplit computation's, and the compiled program holds no [pairs of the
batch, d_model] sum over every device (both checked in tests/test_sharding.py).

Where the mesh splits d_model inside the experts' matrices, they are gathered over it (as FSDP
gathers a weight); a mesh axis that splits both the tokens and the hidden width leaves the width
whole here.
"""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from roformer import sharding


def plan(num_experts: int, tokens: jax.Array, width: int) -> dict | None:
  """The mesh axes of the split computation for `tokens` [T, d] and experts of hidden `width`,
  or None where the experts are whole on each device (or no multi-device mesh is active)."""
  expert_spec = sharding.active_spec(('expert', 'embed', 'mlp'), (num_experts, tokens.shape[-1],
                                                                  width))
  if expert_spec is None or not sharding.spec_axes(expert_spec[0]):
    return None
  experts = sharding.spec_axes(expert_spec[0])
  token_axes = sharding.spec_axes(sharding.active_spec(('batch', None), tokens.shape)[0])
  hidden = tuple(a for a in sharding.spec_axes(expert_spec[2]) if a not in token_axes)
  return {'experts': experts, 'tokens': token_axes, 'hidden': hidden,
          'group': tuple(a for a in token_axes if a in experts),
          'summed': tuple(a for a in experts if a not in token_axes) + hidden}


def _index(axes: tuple[str, ...]) -> jax.Array:
  """This device's position along `axes` taken together, in PartitionSpec order."""
  index = jnp.int32(0)
  for axis in axes:
    index = index * jax.lax.axis_size(axis) + jax.lax.axis_index(axis)
  return index


def run(local_fn, layout: dict, tokens, chosen, weights, params: dict) -> jax.Array:
  """local_fn(tokens, chosen, weights, params, first) on each device, where `first` is the index
  of the device's first expert and `params` its experts' arrays ({name: [E, ...]} with names
  'gate', 'up' [E, d, f], 'down' [E, f, d], and optionally 'gate_bias', 'up_bias' [E, f] and
  'down_bias' [E, d]); returns the float32 outputs [T, d] laid out as the tokens are."""
  experts, hidden = layout['experts'], layout['hidden'] or None
  rows = P(layout['tokens'] or None, None)
  specs = {'gate': P(experts, None, hidden), 'up': P(experts, None, hidden),
           'down': P(experts, hidden, None), 'gate_bias': P(experts, hidden),
           'up_bias': P(experts, hidden), 'down_bias': P(experts, None)}
  group, summed = layout['group'], layout['summed']

  def body(tokens, chosen, weights, params):
    if group:
      gather = lambda a: jax.lax.all_gather(a, group, axis=0, tiled=True)
      tokens, chosen, weights = gather(tokens), gather(chosen), gather(weights)
    if summed:  # Said explicitly: left to shard_map, the tokens' and weights' gradients were
      # not summed over these axes where the mesh split the tokens over others (JAX 0.10.2).
      tokens, weights = (jax.lax.pcast(a, summed, to='varying') for a in (tokens, weights))
    local = params['gate'].shape[0]
    if 'down_bias' in params and layout['hidden']:  # Added once, not once per width shard.
      params = {**params, 'down_bias': params['down_bias'] * (
          _index(layout['hidden']) == 0).astype(params['down_bias'].dtype)}
    out = local_fn(tokens, chosen, weights, params, _index(layout['experts']) * local)
    if summed:
      out = jax.lax.psum(out, summed)
    if group:
      out = jax.lax.psum_scatter(out, group, scatter_dimension=0, tiled=True)
    return out

  in_specs = (rows, rows, rows, {name: specs[name] for name in params})
  return jax.shard_map(body, in_specs=in_specs, out_specs=rows)(tokens, chosen, weights, params)

