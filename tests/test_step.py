"""The train step's performance options: gradient accumulation, rematerialisation, bfloat16, and
the initial state's one program for every seed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import models
from roformer import sharding
from roformer import stack
from roformer import steps
from roformer import tasks
from roformer import trainer as trainer_lib


def _batch(config, seed=0):
  """A packed causal-LM batch of random tokens, two documents per row."""
  rng = np.random.default_rng(seed)
  b, length = config.train.batch_size, config.data.seq_len
  tokens = rng.integers(5, config.model.vocab_size, (b, length)).astype(np.int32)
  half = length // 2
  segments = np.concatenate([np.ones((b, half)), 2 * np.ones((b, length - half))], 1)
  segments[1, -5:] = 0  # Some padding.
  positions = np.concatenate([np.arange(half), np.arange(length - half)])[None].repeat(b, 0)
  return {'inputs': tokens, 'targets': np.roll(tokens, -1, 1),
          'inputs_segment_ids': segments.astype(np.int32),
          'targets_segment_ids': segments.astype(np.int32),
          'inputs_positions': positions.astype(np.int32),
          'targets_positions': positions.astype(np.int32)}


def _step(config, batch, num_devices=1):
  config.mesh.num_devices = num_devices
  mesh = sharding.make_mesh(config.mesh)
  trainer = trainer_lib.Trainer(config, mesh)
  state = trainer.init_state()
  state, metrics = trainer.train_step(state, sharding.put_batch(batch, mesh))
  return jax.device_get(state['params'].to_pure_dict()), jax.device_get(metrics), trainer


@pytest.fixture
def lm_config():
  config = test_config.get_config('rope')
  config.model.vocab_size = 64
  config.data.vocab_size = 64
  config.train.warmup_steps = 0
  return config


def _close(a, b, rtol=2e-5, atol=1e-5):
  """Parameters after one Adam step. Its first update is about lr * sign(g) (3e-3 here), so
  where a gradient is near 0 rounding moves it slightly: atol is 1/300 of an update."""
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def test_gradient_accumulation_equals_the_whole_batch(lm_config):
  batch = _batch(lm_config)
  whole_params, whole, _ = _step(lm_config, batch)
  lm_config.train.grad_accum_steps = 4
  accum_params, accum, _ = _step(lm_config, batch)
  for name in ('loss', 'accuracy', 'grad_norm', 'tokens'):
    np.testing.assert_allclose(accum[name], whole[name], rtol=1e-5)
  _close(accum_params, whole_params)


@pytest.mark.slow
def test_gradient_accumulation_on_a_data_parallel_mesh_equals_the_whole_batch(lm_config):
  """Micro-batches split each device's rows: the same update on a 4-device mesh."""
  batch = _batch(lm_config)
  whole_params, whole, _ = _step(lm_config, batch)
  lm_config.train.grad_accum_steps = 2  # 4 rows per micro-batch, one per device.
  mesh_params, mesh_metrics, _ = _step(lm_config, batch, num_devices=4)
  np.testing.assert_allclose(mesh_metrics['loss'], whole['loss'], rtol=1e-5)
  _close(mesh_params, whole_params)


def test_micro_batches_take_strided_rows():
  x = jnp.arange(8)[:, None] * 10 + jnp.arange(3)[None]
  micro = steps.micro_batches({'x': x}, 2)['x']
  assert micro.shape == (2, 4, 3)
  np.testing.assert_array_equal(micro[0][:, 0], [0, 20, 40, 60])
  np.testing.assert_array_equal(micro[1][:, 0], [10, 30, 50, 70])


@pytest.mark.parametrize('policy', [
    pytest.param('full', marks=pytest.mark.slow), pytest.param('dots', marks=pytest.mark.slow),
    pytest.param('dots_no_batch', marks=pytest.mark.slow)])
def test_remat_gives_the_same_step(lm_config, policy):
  batch = _batch(lm_config)
  plain_params, plain, _ = _step(lm_config, batch)
  lm_config.model.remat = policy
  remat_params, remat, _ = _step(lm_config, batch)
  np.testing.assert_allclose(remat['loss'], plain['loss'], rtol=1e-6)
  np.testing.assert_allclose(remat['grad_norm'], plain['grad_norm'], rtol=1e-5)
  _close(remat_params, plain_params)


def _remat_equations(config) -> list:
  """The rematerialised regions (jax.checkpoint equations) of the train step's jaxpr."""
  mesh = sharding.make_mesh(config.mesh)
  trainer = trainer_lib.Trainer(config, mesh)
  with jax.set_mesh(mesh):  # The jitted step itself (on_mesh sets the mesh outside traces).
    jaxpr = jax.make_jaxpr(trainer.train_step.fn)(trainer.abstract_state, _batch(config),
                                                   np.int32(1))
  found = []

  def walk(jpr):
    for eqn in jpr.eqns:
      if eqn.primitive.name in ('checkpoint', 'remat2', 'remat'):
        found.append(eqn)
      for value in eqn.params.values():
        inner = getattr(value, 'jaxpr', value)
        if hasattr(inner, 'eqns'):
          walk(inner)
  walk(jaxpr.jaxpr)
  return found


@pytest.mark.parametrize('policy', ['none', 'full', 'dots_no_batch'])
def test_remat_wraps_every_block_with_its_policy(lm_config, policy):
  """XLA:CPU folds the recomputation away (same FLOPs and memory plan with or without it), so
  the saving shows on GPU/TPU only; here the step is checked to carry one rematerialised region
  per block with the configured policy, for XLA to honour."""
  lm_config.mesh.num_devices = 1
  lm_config.model.remat = policy
  found = _remat_equations(lm_config)
  if policy == 'none':
    assert not found
    return
  assert len(found) == lm_config.model.num_layers
  assert all(e.params['policy'] is stack.REMAT_POLICIES[policy] for e in found)


def test_bfloat16_activations_keep_float32_parameters_and_loss(lm_config):
  batch = _batch(lm_config)
  f32_params, f32, _ = _step(lm_config, batch)
  lm_config.model.dtype = 'bfloat16'
  params, metrics, trainer = _step(lm_config, batch)
  assert {np.asarray(p).dtype for p in jax.tree.leaves(params)} == {np.dtype('float32')}
  state = trainer.abstract_state
  assert {np.dtype(a.dtype) for a in jax.tree.leaves(state['opt_state'])} <= {
      np.dtype('float32'), np.dtype('int32')}
  assert np.asarray(metrics['loss']).dtype == np.float32
  # The same step within bfloat16 rounding (8 bits of mantissa).
  np.testing.assert_allclose(metrics['loss'], f32['loss'], rtol=2e-2)
  assert abs(float(metrics['loss']) - float(f32['loss'])) > 0  # Really computed in bf16.


@pytest.mark.parametrize('smoothing', [0.0, 0.1])
def test_cross_entropy_and_its_gradient_match_float64(smoothing):
  """tasks.cross_entropy's hand-written backward against a float64 numpy formula and central
  differences of it, with per-token weights on both outputs."""
  rng = np.random.default_rng(0)
  logits = (3 * rng.normal(size=(3, 5, 11))).astype(np.float32)
  targets = rng.integers(0, 11, (3, 5))
  w_ce, w_obj = rng.random((3, 5)), rng.random((3, 5))

  def reference(x):
    x = x.astype(np.float64)
    logp = x - x.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    ce = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
    return (ce * w_ce).sum() + (((1 - smoothing) * ce - smoothing * logp.mean(-1)) * w_obj).sum()

  def loss(x):
    ce, objective = tasks.cross_entropy(x, jnp.asarray(targets), smoothing)
    return (ce * w_ce).sum() + (objective * w_obj).sum()

  value, grad = jax.value_and_grad(loss)(jnp.asarray(logits))
  np.testing.assert_allclose(float(value), reference(logits), rtol=1e-6)
  numeric = np.zeros(logits.shape)
  x64 = logits.astype(np.float64)
  for i in np.ndindex(logits.shape):
    step = np.zeros(logits.shape)
    step[i] = 1e-6
    numeric[i] = (reference(x64 + step) - reference(x64 - step)) / 2e-6
  np.testing.assert_allclose(np.asarray(grad), numeric, atol=2e-6)


def test_a_nonfinite_step_leaves_the_state_as_it_was(lm_config):
  """The update happens in a branch taken only when the loss and gradient norm are finite."""
  mesh = sharding.make_mesh(lm_config.mesh)
  trainer = trainer_lib.Trainer(lm_config, mesh)
  state = trainer.init_state()
  batch = sharding.put_batch(_batch(lm_config), mesh)
  state, _ = trainer.train_step(state, batch)  # Adam moments that are not zero.
  params = state['params'].to_pure_dict()
  params['embed']['embedding'] = params['embed']['embedding'].at[0, 0].set(jnp.nan)
  state['params'].replace_by_pure_dict(params)
  before = jax.device_get(state)
  after, metrics = trainer.train_step(state, batch)
  assert int(metrics['nonfinite']) == 1 and not np.isfinite(float(metrics['loss']))
  assert int(after['step']) == int(before['step']) + 1
  for old, new in zip(jax.tree.leaves((before['params'], before['opt_state'])),
                      jax.tree.leaves((after['params'], after['opt_state']))):
    np.testing.assert_array_equal(np.asarray(old), np.asarray(new))


def test_initial_states_of_several_seeds_share_one_program_and_draw_each_seeds_parameters(
    lm_config):
  """init_state compiles once for any number of seeds (the key is an argument), and each
  state's parameters are the ones a program with the seed built in draws."""
  mesh = sharding.make_mesh(lm_config.mesh)
  trainer = trainer_lib.Trainer(lm_config, mesh)
  states = [trainer.init_state(seed) for seed in (0, 1, 7)]
  assert trainer._init._cache_size() == 1  # pylint: disable=protected-access
  for seed, state in zip((0, 1, 7), states):
    # The draws the program made before the key became an argument (the seed a constant).
    want = jax.jit(lambda seed=seed: nnx.state(models.create(lm_config.model, seed=seed)))()
    want = want.to_pure_dict()
    got = jax.device_get(state['params'].to_pure_dict())
    jax.tree.map(np.testing.assert_array_equal, got, jax.device_get(want))
    assert int(state['step']) == 0
  first, second = (jax.tree.leaves(s['params']) for s in states[:2])
  assert any(not np.array_equal(a, b) for a, b in zip(first, second))
