"""A scanned stack keeps its blocks' parameters stacked (roformer/scanned.py): the numbers are the
loop's, a layout whose layers differ scans by its period, and checkpoints keep the per-block
paths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer import models
from roformer import optim
from roformer import scanned
from roformer import sharding
from roformer import variables
from tests import kinds

TOKENS = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 12)), jnp.int32)
POS = jnp.asarray([list(range(12)), list(range(5)) + list(range(7))], jnp.int32)
SEG = jnp.asarray([[1] * 12, [1] * 5 + [2] * 7], jnp.int32)
# Kinds with a period of 2, windows of 3, bases of 2: every 6 layers repeat (lcm 6).
HYBRID = dict(layer_kinds=('rope', 'none'), layer_windows=(0, 4, 0),
              layer_rope_bases=(1e4, 1e4, 1e4, 1e6, 1e4, 1e4))
# The same three per-layer settings repeating every 2 layers: fewer layers to compile.
SHORT = dict(layer_kinds=('rope', 'none'), layer_windows=(4, 0), layer_rope_bases=(1e6, 1e4))


def _pair(num_layers, **model):
  """(loop, scanned) causal LMs of the same config and seed."""
  config = kinds.tiny_config('rope', num_layers=num_layers, **model)
  loop = models.create(config.model, seed=3)
  config.model.scan_layers = True
  return loop, models.create(config.model, seed=3)


def _flat(tree):
  return {sharding.path_str(p, keep_value=True): v
          for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


@pytest.mark.parametrize('num_layers,depth,rest', [(7, 1, 1), (13, 2, 1), (12, 2, 0)])
def test_layers_that_differ_scan_by_their_period(num_layers, depth, rest):
  """Layer i of the scanned stack is `stacked[i % 6]` at index i // 6 (or a `rest` layer past
  the whole periods), with the kind, window and base the loop's layer i has."""
  loop, scan = _pair(num_layers, **HYBRID)
  blocks = scan.blocks
  assert (blocks.period, blocks.depth, len(blocks.rest)) == (6, depth, rest)
  for i, (want, got) in enumerate(zip(loop.blocks, blocks)):
    assert type(got.position) is type(want.position), i
    assert got.attn.window == want.attn.window == (4 if i % 3 == 1 else 0), i
    if hasattr(want.position, 'heads'):
      assert got.position.heads.base == want.position.heads.base, i


def test_the_scanned_model_holds_the_loops_parameters_stacked_once():
  """The same seed draws the same numbers either way; stored stacked, the optimizer sees one
  array per parameter of a period whatever the depth, each declaring an unsplit layer axis."""
  loop, scan = _pair(13, **HYBRID)
  layout = models.layout(scan)
  got, want = _flat(layout.to_layers(nnx.state(scan), nnx.state(loop))), _flat(nnx.state(loop))
  assert got.keys() == want.keys()
  for path, value in want.items():
    np.testing.assert_array_equal(got[path], value, err_msg=path)
  deeper = _pair(25, **HYBRID)[1]
  count = lambda model: len(jax.tree.leaves(nnx.state(model, nnx.Param)))
  assert count(deeper) == count(scan) < count(loop)
  for path, variable in nnx.iter_graph(scan.blocks.stacked):
    if isinstance(variable, nnx.Param):
      axes = variables.axes(variable, str(path))
      assert axes[0] is None and variable.get_value().shape[0] == 2, path


def test_a_layout_with_windows_and_bases_scans_to_the_loops_outputs_and_gradients():
  """Outputs and every parameter's gradient (converted to the per-block layout) equal the
  loop's, dropout keys included, with rematerialisation inside the scan."""
  loop, scan = _pair(5, remat='full', dropout=0.1, **SHORT)
  assert (scan.blocks.period, scan.blocks.depth, len(scan.blocks.rest)) == (2, 2, 1)
  key = jax.random.key(5)

  def loss(model):
    out = model(TOKENS, POS, SEG, key)
    return jnp.sum(out * jnp.cos(jnp.arange(out.size).reshape(out.shape))), out

  grad = nnx.jit(nnx.value_and_grad(loss, has_aux=True))
  (_, want), want_grads = grad(loop)
  (_, got), got_grads = grad(scan)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  got_grads = _flat(models.layout(scan).to_layers(got_grads, want_grads))
  for path, value in _flat(want_grads).items():
    np.testing.assert_allclose(got_grads[path], value, rtol=1e-4, atol=1e-5, err_msg=path)


def test_decoding_a_scanned_stack_equals_its_full_pass():
  """With a cache the scanned stack runs layer by layer (slices of the stacked values)."""
  _, scan = _pair(3, **SHORT)
  kinds.assert_decoding_equals_full_pass(scan, TOKENS[:, :10], (4, 1, 5))


def test_the_layouts_paths_by_hand():
  layout = scanned.Layout({'blocks': (7, 3), 'decoder_blocks': (2, 1)})
  assert layout.layer_source('params/blocks/5/attn/qkv/kernel/value') == (
      'params/blocks/stacked/2/attn/qkv/kernel/value', 1)
  assert layout.layer_source('opt_state/0/mu/blocks/6/ln_attn/scale/value') == (
      'opt_state/0/mu/blocks/rest/0/ln_attn/scale/value', None)
  assert layout.layer_source('params/decoder_blocks/1/mlp/up/kernel') == (
      'params/decoder_blocks/stacked/0/mlp/up/kernel', 1)
  assert layout.layer_source('params/embed/embedding/value') == (
      'params/embed/embedding/value', None)
  assert layout.stacked_sources('params/blocks/stacked/1/x') == [
      'params/blocks/1/x', 'params/blocks/4/x']
  assert layout.stacked_sources('params/blocks/rest/0/x') == 'params/blocks/6/x'
  assert layout.stacked_sources('params/ln_final/scale') is None


def test_a_leading_run_of_layers_unlike_the_rest_runs_before_the_scan():
  """A mixture whose first layer is dense (DeepSeek-V3's layout) scans its 4 sparse layers with
  a period of 1 after that layer (2 blocks compiled, not 5): the loop's outputs and auxiliary
  losses, a cache as the full pass, and the per-block paths by hand (a head's layer is its own)."""
  from roformer import auxiliary  # pylint: disable=import-outside-toplevel
  config = kinds.tiny_config('rope', num_layers=5, mlp='moe', activation='silu', biases='none')
  config.model.moe.update(num_experts=4, dense_layers=(0,), dense_d_ff=24)
  loop = models.create(config.model, seed=2)
  config.model.scan_layers = True
  scan = models.create(config.model, seed=2)
  assert (scan.blocks.first, scan.blocks.period, scan.blocks.depth, len(scan.blocks.rest)) == (
      1, 1, 4, 0)
  pos, seg = jnp.broadcast_to(jnp.arange(10), (2, 10)), jnp.ones((2, 10), jnp.int32)
  with auxiliary.collecting():
    want, want_aux = auxiliary.total(lambda m: m(TOKENS[:, :10], pos, seg), loop)
    got, got_aux = auxiliary.total(lambda m: m(TOKENS[:, :10], pos, seg), scan)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got_aux, want_aux, rtol=1e-5)
  kinds.assert_decoding_equals_full_pass(scan, TOKENS[:, :10], (4, 1, 5))
  layout = models.layout(scan)
  assert layout.layer_source('params/blocks/0/mlp/up/kernel') == (
      'params/blocks/head/0/mlp/up/kernel', None)
  assert layout.layer_source('params/blocks/3/mlp/router') == (
      'params/blocks/stacked/0/mlp/router', 2)
  assert layout.stacked_sources('params/blocks/head/0/x') == 'params/blocks/0/x'
  assert layout.stacked_sources('params/blocks/stacked/0/x') == [
      f'params/blocks/{i}/x' for i in range(1, 5)]
  back = layout.to_stacked(layout.to_layers(nnx.state(scan), nnx.state(loop)), nnx.state(scan))
  for path, value in _flat(nnx.state(scan)).items():
    np.testing.assert_array_equal(_flat(back)[path], value, err_msg=path)


def test_the_optimizer_state_converts_both_ways():
  """A train state's parameters and AdamW moments go to the per-block layout and back
  unchanged."""
  loop, scan = _pair(7, **HYBRID)
  tx = optim.make_optimizer(kinds.tiny_config('rope').train)
  state = lambda model: {'params': nnx.state(model),
                         'opt_state': tx.init(variables.trainable(nnx.state(model))[0])}
  layout = models.layout(scan)
  stacked = jax.tree.map(lambda a: a + jax.random.normal(jax.random.key(1), a.shape, a.dtype)
                         if jnp.issubdtype(a.dtype, jnp.floating) else a, state(scan))
  per_block = layout.to_layers(stacked, state(loop))
  back = layout.to_stacked(per_block, stacked)
  want, got = _flat(stacked), _flat(back)
  assert want.keys() == got.keys()
  for path, value in want.items():
    np.testing.assert_array_equal(got[path], value, err_msg=path)
