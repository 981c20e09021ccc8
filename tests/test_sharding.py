"""Logical axes on parameters and activations, mapped to the data/fsdp/tensor mesh by rules."""

import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import errors
from roformer import models
from roformer import moe
from roformer import sharding
from roformer import trainer as trainer_lib
from tests import kinds
from tests.test_step import _batch

MESHES = {
    'fsdp': {'data': 1, 'fsdp': 8},
    'tensor': {'data': 1, 'tensor': 8},
    'data2_fsdp2_tensor2': {'data': 2, 'fsdp': 2, 'tensor': 2},
}


def test_a_dimension_the_mesh_axis_does_not_divide_stays_whole():
  mesh = jax.sharding.AbstractMesh((1, 2, 4), sharding.AXES)
  rules = sharding.DEFAULT_RULES
  assert sharding.spec_for(('vocab', 'embed'), (4096, 64), rules, mesh) == jax.P('tensor', 'fsdp')
  assert sharding.spec_for(('vocab', 'embed'), (4097, 64), rules, mesh) == jax.P(None, 'fsdp')
  # A mesh axis serves one dimension of an array only.
  assert sharding.spec_for(('heads', 'mlp'), (8, 8), rules, mesh) == jax.P('tensor', None)
  assert sharding.spec_for(('batch', None), (8, 3), rules, mesh) == jax.P('fsdp', None)


def test_an_evaluation_on_fewer_devices_than_trained_takes_the_default_mesh(caplog):
  """eval.py on a run trained over 16 devices, here 8: the saved mesh cannot be made, and as
  it decides how the model is computed, not what, the default mesh (data parallel over every
  device) takes its place with a warning; a mesh given on the command line stays as given."""
  from roformer import resolve  # pylint: disable=import-outside-toplevel
  saved = test_config.get_config()
  saved.mesh.update(data=4, fsdp=4, tensor=1)
  config = ml_collections.ConfigDict(saved.to_dict())
  resolve._fit_saved_mesh(config, saved)  # pylint: disable=protected-access
  assert (config.mesh.data, config.mesh.fsdp, config.mesh.tensor) == (-1, 1, 1)
  assert sharding.make_mesh(config.mesh).shape['data'] == len(jax.devices())
  assert 'needs 16 devices but 8 are available): evaluating on the default mesh' in caplog.text
  given = ml_collections.ConfigDict(saved.to_dict())
  given.mesh.fsdp = 2  # The user's own: checked as given.
  resolve._fit_saved_mesh(given, saved)  # pylint: disable=protected-access
  assert (given.mesh.data, given.mesh.fsdp) == (4, 2)


def test_rules_naming_a_missing_mesh_axis_are_refused():
  cfg = test_config.get_config()
  cfg.mesh.rules.mlp = 'model'
  with pytest.raises(errors.ConfigError, match="config.mesh.rules.mlp='model'"):
    sharding.rules_from_config(cfg.mesh)
  cfg.mesh.rules.mlp = ''  # Not split.
  assert sharding.rules_from_config(cfg.mesh)['mlp'] == ''


def _losses(config, mesh_fields: dict, steps: int = 3):
  config = ml_collections.ConfigDict(config.to_dict())
  config.mesh.update({'data': -1, 'fsdp': 1, 'tensor': 1, 'num_devices': -1, **mesh_fields})
  mesh = sharding.make_mesh(config.mesh)
  trainer = trainer_lib.Trainer(config, mesh)
  state = trainer.init_state()
  batch = sharding.put_batch(_batch(config), mesh)
  losses = []
  for _ in range(steps):
    state, metrics = trainer.train_step(state, batch)
    losses.append(float(metrics['loss']))
  return losses, state


@pytest.mark.parametrize('layout', [  # The mixed mesh has both; each alone under -m slow.
    pytest.param('fsdp', marks=pytest.mark.slow), pytest.param('tensor', marks=pytest.mark.slow),
    'data2_fsdp2_tensor2'])
def test_fsdp_and_tensor_parallel_train_like_one_device(layout):
  config = test_config.get_config('rope')
  config.model.vocab_size = config.data.vocab_size = 64
  reference, _ = _losses(config, {'num_devices': 1})
  losses, state = _losses(config, MESHES[layout])
  np.testing.assert_allclose(losses, reference, rtol=2e-6)
  fsdp, tensor = MESHES[layout].get('fsdp', 1) > 1, MESHES[layout].get('tensor', 1) > 1
  params = state['params']
  up = params['blocks'][0]['mlp']['up']['kernel'][...].sharding.spec
  qkv = params['blocks'][1]['attn']['qkv']['kernel'][...].sharding.spec
  assert up == jax.P('fsdp' if fsdp else None, 'tensor' if tensor else None)
  assert qkv == up
  # Adam's moments are laid out like their parameters.
  moments = [leaf for leaf in jax.tree.leaves(state['opt_state']) if leaf.shape == (32, 64)]
  assert moments and all(m.sharding.spec == up for m in moments)
  # Each device holds its share only.
  shard = params['blocks'][0]['mlp']['up']['kernel'][...].addressable_shards[0].data
  assert shard.shape == (32 // (8 if fsdp and not tensor else 2 if fsdp else 1),
                         64 // (8 if tensor and not fsdp else 2 if tensor else 1))


@pytest.mark.parametrize('impl', ['dense', 'ragged'])
def test_experts_split_over_devices_train_like_one_device(impl):
  """Expert parallelism (config.mesh.rules.expert and act_expert on fsdp): each fsdp device
  holds half the 4 experts of every mixture, whole in d_model and split over tensor in their
  width, with their Adam moments; three steps give one device's losses."""
  config = test_config.get_config('mixtral')
  config.model.vocab_size = config.data.vocab_size = 64
  config.model.moe.update(num_experts=4, impl=impl)
  reference, _ = _losses(config, {'num_devices': 1})
  config.mesh.rules.update(expert='fsdp', act_expert='fsdp')
  losses, state = _losses(config, MESHES['data2_fsdp2_tensor2'])
  np.testing.assert_allclose(losses, reference, rtol=2e-6)
  gate = state['params']['blocks'][0]['mlp']['gate'][...]
  assert gate.sharding.spec == jax.P('fsdp', None, 'tensor')
  e, d, f = gate.shape
  assert gate.addressable_shards[0].data.shape == (e // 2, d, f // 2)
  moments = [leaf for leaf in jax.tree.leaves(state['opt_state']) if leaf.shape == gate.shape]
  assert moments and all(m.sharding.spec == gate.sharding.spec for m in moments)


# The ragged mixture's split computations (roformer/expert_parallel.py), each a layout of the
# data 2 x fsdp 2 x tensor 2 mesh.
RAGGED_LAYOUTS = {
    # Mixtral's experts over fsdp, which splits the batch: gathered within the fsdp group and
    # scattered back; their width over tensor: summed.
    'over_fsdp': ({}, {'expert': 'fsdp'}),
    # gpt-oss's (biases, the clamped SwiGLU): each token's down-projection bias is added once,
    # not once per width shard.
    'biased_over_fsdp': ({'moe.biases': True, 'moe.swiglu_limit': 0.5}, {'expert': 'fsdp'}),
    # Llama 4's (one expert a token, its weight on the input) over tensor, an axis that does not
    # split the batch: the devices' partial sums are summed, not scattered.
    'weighted_inputs_over_tensor': ({'moe.router': 'sigmoid', 'moe.weight_inputs': True,
                                     'moe.renormalize': False, 'moe.experts_per_token': 1},
                                    {'expert': 'tensor'}),
    # Over tensor with their width over fsdp, which splits the batch too: the width is gathered
    # (whole in each device's matrices), not summed across other tokens.
    'width_over_a_batch_axis': ({'moe.biases': True},
                                {'expert': 'tensor', 'mlp': 'fsdp', 'act_mlp': 'fsdp'}),
    # One expert a device, over data and fsdp together: the whole batch is the group.
    'over_two_axes': ({}, {'expert': ['data', 'fsdp']}),
    # 15 tokens, which the 4 data x fsdp devices do not divide (as a decoding step's may not):
    # whole on every device, each device's experts summed.
    'indivisible_tokens': ({'moe.biases': True}, {'expert': 'fsdp'}),
}


@pytest.mark.parametrize('name', RAGGED_LAYOUTS)
def test_ragged_experts_split_over_devices_give_one_devices_outputs_and_gradients(name):
  """The mixture alone, its biases drawn at random (they start at zero): its outputs and the
  gradients of every parameter and of its input equal the unsplit computation's. (Three Adam
  steps would not show a gradient off by a constant factor: the first step takes its sign.)"""
  fields, rules = RAGGED_LAYOUTS[name]
  config = test_config.get_config('mixtral')
  config.model.moe.update(num_experts=4, impl='ragged')
  kinds.set_fields(config.model, fields)
  mixture = moe.MixtureOfExperts(config.model, dtype=jnp.float32, rngs=nnx.Rngs(0),
                                 std=lambda d, residual: 0.3, activation=jax.nn.silu)
  graphdef, params = nnx.split(mixture)
  rng = np.random.default_rng(1)
  params = jax.tree_util.tree_map_with_path(
      lambda path, a: jnp.asarray(rng.normal(0, 0.5, a.shape), a.dtype) if sharding.path_str(
          path).endswith('_bias') else a, params)
  rows = (3, 5) if name == 'indivisible_tokens' else (8, 16)
  x = jnp.asarray(rng.normal(size=(*rows, config.model.d_model)), jnp.float32)
  value_and_grad = jax.jit(jax.value_and_grad(
      lambda p, x: jnp.sum(jnp.sin(nnx.merge(graphdef, p)(x))), argnums=(0, 1)))
  reference = value_and_grad(params, x)
  config.mesh.update(num_devices=-1, **MESHES['data2_fsdp2_tensor2'])
  rules = {**sharding.rules_from_config(config.mesh), 'act_expert': rules['expert'], **rules}
  split = sharding.on_mesh(sharding.make_mesh(config.mesh), value_and_grad, rules)(params, x)
  for (path, want), got in zip(jax.tree_util.tree_flatten_with_path(reference)[0],
                               jax.tree.leaves(split)):
    want, got = np.asarray(want), np.asarray(got)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max(),
                               err_msg=sharding.path_str(path))


def test_split_ragged_experts_gather_their_groups_tokens_alone_and_scatter_the_sums_back():
  """With the 4 experts over fsdp (data 2 x fsdp 2 x tensor 2), the compiled ragged step
  gathers each fsdp group's tokens (half the batch) and scatters the summed outputs back to
  each device's quarter; it never sums the (token, expert) pairs of the whole batch over every
  device, which XLA's partitioner did with the ragged computation left to it."""
  config = test_config.get_config('mixtral')
  config.model.vocab_size = config.data.vocab_size = 64
  config.model.moe.update(num_experts=4, impl='ragged')
  config.mesh.rules.update(expert='fsdp', act_expert='fsdp')
  config = ml_collections.ConfigDict(config.to_dict())
  config.mesh.update({'num_devices': -1, **MESHES['data2_fsdp2_tensor2']})
  mesh = sharding.make_mesh(config.mesh)
  trainer = trainer_lib.Trainer(config, mesh)
  state = trainer.abstract_state
  batch = sharding.put_batch(_batch(config), mesh)
  text = trainer.train_step.lower(state, batch).compile().as_text()
  tokens, d = config.train.batch_size * config.data.seq_len, config.model.d_model
  pairs = tokens * config.model.moe.experts_per_token
  collective = lambda op: set(re.findall(rf'= f32\[(\d+),{d}\]\S* {op}(?:-start)?\(', text))
  assert str(tokens // 2) in collective('all-gather')
  assert str(tokens // 4) in collective('reduce-scatter')
  assert not {str(pairs), str(tokens)} & (collective('all-reduce') | collective('all-gather'))


@pytest.mark.slow  # The mixed mesh above runs by default; this adds the 2025 schemes.
def test_the_data_dependent_schemes_windows_and_hybrids_train_like_one_device():
  """PaTH with FoX's gates in one layer, windowed RoPE in the other, stick-breaking attention
  and QK-norm: their parameters (w, beta, the gates, the norms' scales) are laid out by their
  declared axes, and three steps on the mixed 8-device mesh give one device's losses."""
  config = test_config.get_config('rope')
  config.model.vocab_size = config.data.vocab_size = 64
  config.model.update(layer_kinds=('path+fox', 'rope'), layer_windows=(0, 8))
  config.model.attention.update(kind='stick_breaking', qk_norm=True)
  reference, _ = _losses(config, {'num_devices': 1})
  losses, state = _losses(config, MESHES['data2_fsdp2_tensor2'])
  np.testing.assert_allclose(losses, reference, rtol=2e-6)
  position = state['params']['blocks'][0]['position']
  assert position['first']['w_up'][...].sharding.spec == jax.P(None, 'tensor')
  assert position['first']['beta_kernel'][...].sharding.spec == jax.P('fsdp', None)


@pytest.mark.slow  # The causal LM's mixed mesh above runs by default.
def test_masked_lm_gathers_per_device_and_trains_like_one_device():
  config = test_config.get_config('mlm')
  config.model.vocab_size = config.data.vocab_size = 64
  features = ('inputs', 'inputs_segment_ids', 'inputs_positions')
  def losses(mesh_fields):
    config.mesh.update({'data': -1, 'fsdp': 1, 'tensor': 1, 'num_devices': -1, **mesh_fields})
    mesh = sharding.make_mesh(config.mesh)
    trainer = trainer_lib.Trainer(config, mesh)
    state = trainer.init_state()
    batch = sharding.put_batch({k: v for k, v in _batch(config).items() if k in features}, mesh)
    with jax.set_mesh(mesh):  # Rows split over data x fsdp = 4: four blocks of 2 rows.
      assert sharding.shards('batch', 8) == (4 if mesh.devices.size == 8 else 1)
    out = []
    for _ in range(3):
      state, metrics = trainer.train_step(state, batch)
      out.append(float(metrics['loss']))
    return out
  np.testing.assert_allclose(losses(MESHES['data2_fsdp2_tensor2']), losses({'num_devices': 1}),
                             rtol=2e-6)


@pytest.mark.parametrize('kind,attention', [
    ('kerple', 'softmax'), pytest.param('alibi', 'stick_breaking', marks=pytest.mark.slow)])
def test_the_fused_kernels_run_per_shard_with_one_devices_gradients(kind, attention,
                                                                    eight_devices):
  """attention_impl='pallas' on the mixed mesh: each device runs the kernel on its rows and
  heads (a manual computation in the program, no gathered inputs), and every parameter's
  gradient is one device's (KERPLE's per-head parameters, split by head, take the gradient
  of every row)."""
  del eight_devices
  cfg = test_config.get_config(kind).model
  cfg.update(vocab_size=64, attention_impl='pallas', num_layers=1)
  cfg.attention.kind = attention
  rng = np.random.default_rng(0)
  tokens = jax.numpy.asarray(rng.integers(5, 60, (8, 16)), jax.numpy.int32)
  pos = jax.numpy.broadcast_to(jax.numpy.arange(16), (8, 16))
  seg = jax.numpy.asarray(np.repeat([[1] * 10 + [2] * 6], 8, axis=0), jax.numpy.int32)

  def grads():
    model = models.create(cfg, seed=1)

    def loss(model):
      out = model(tokens, pos, seg)
      return jax.numpy.sum(out * jax.numpy.cos(jax.numpy.arange(out.size).reshape(out.shape)))
    return nnx.state(nnx.grad(loss)(model))

  mesh = jax.make_mesh((2, 2, 2), sharding.AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3)
  sharded = sharding.on_mesh(mesh, jax.jit(grads))
  assert 'manual_computation' in sharded.lower().as_text()
  for got, want in zip(jax.tree.leaves(sharded()), jax.tree.leaves(grads())):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want),
                               atol=2e-5 * max(float(np.max(np.abs(want))), 1.0))


@pytest.mark.parametrize('rules', [{'batch': ['data', 'fsdp', 'tensor']},
                                   {'act_heads': ['tensor', 'fsdp']}])
def test_the_fused_kernel_splits_every_argument_alike_whatever_the_rules(rules, eight_devices):
  """Rules under which the rows take the mesh axis the heads would take, or the heads two
  axes: every argument (the per-head parameters too) is split along the same axes, so the
  kernel's output on the mesh is one device's."""
  del eight_devices
  from roformer import fused_bias  # pylint: disable=import-outside-toplevel
  from roformer.positions import bias as bias_lib  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(1)
  q, k, v = (jax.numpy.asarray(rng.normal(size=(8, 16, 4, 8)), jax.numpy.float32)
             for _ in range(3))
  positions = jax.numpy.broadcast_to(jax.numpy.arange(16), (8, 16))
  segments = jax.numpy.ones((8, 16), jax.numpy.int32)
  slopes = jax.numpy.asarray([[0.5], [0.25], [0.125], [0.0625]], jax.numpy.float32)
  attend = lambda: fused_bias.attend(q, k, v, positions, segments, bias_lib.ALIBI_FUSED,
                                     params=slopes, block_q=8, block_k=8)
  mesh = jax.make_mesh((2, 2, 2), sharding.AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3)
  on_mesh = sharding.on_mesh(mesh, jax.jit(attend), {**sharding.DEFAULT_RULES, **rules})
  np.testing.assert_allclose(np.asarray(on_mesh()), np.asarray(attend()), atol=1e-6)
