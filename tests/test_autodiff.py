"""The hand-written backward passes and their switch (roformer/autodiff.py): with
`model.custom_gradients=False` the model is differentiated by autodiff alone, to the same
gradients, and forward mode works through it."""

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import autodiff
from roformer import models
from roformer import tasks

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _config(arg: str, **model):
  config = test_config.get_config(arg)
  config.data.seq_len = 16
  config.model.update({'vocab_size': 64, 'num_layers': 2, 'd_model': 16, 'num_heads': 2,
                       'd_ff': 32, **model})
  return config


def _batch(config, seed=0):
  rng = np.random.default_rng(seed)
  b, length = 2, config.data.seq_len
  tokens = rng.integers(5, config.model.vocab_size, (b, length)).astype(np.int32)
  segments = np.ones((b, length), np.int32)
  segments[1, length // 2:] = 2  # Two documents in the second row.
  segments[1, -2:] = 0  # And padding.
  positions = np.where(np.arange(length) < length // 2, np.arange(length),
                       np.arange(length) - length // 2)[None].repeat(b, 0)
  positions[0] = np.arange(length)
  return {'inputs': tokens, 'targets': np.roll(tokens, -1, 1), 'inputs_segment_ids': segments,
           'targets_segment_ids': segments, 'inputs_positions': positions.astype(np.int32),
           'targets_positions': positions.astype(np.int32)}


def _objective(config):
  """(f, params): the train objective as a function of the trainable parameters, run as the
  train step runs it (under the model's own setting), and the model's parameters."""
  task = tasks.for_config(config)
  graphdef, params, rest = nnx.split(models.create(config.model, seed=0), nnx.Param, ...)
  batch = jax.tree.map(jnp.asarray, _batch(config))

  def f(params):
    model = nnx.merge(graphdef, params, rest)
    with autodiff.use(model.custom_gradients):
      return task.sums(model, batch, None, 0.1)['objective_sum']
  return f, params


# Each configuration reaches some of the hand-written passes (named beside it).
CASES = {
    'rope, chunked loss': (('rope',), {'loss_chunk': 4},
                           {'dense', 'rotation', 'softmax_attention', 'chunked_loss'}),
    'rope, whole logits': (('rope',), {'loss_chunk': 0}, {'cross_entropy'}),
    'shaw (probabilities)': (('shaw',), {'loss_chunk': 0}, {'softmax'}),
    'path': (('path',), {'loss_chunk': 0}, {'householder_solve', 'softmax'}),
    'masked LM': (('mlm,rope',), {}, {'cross_entropy'}),
}


def _custom_calls(f, params) -> set[str]:
  """The hand-written passes in f's program, by their registered names (traced afresh: the
  switch is read while tracing, and make_jaxpr caches a function's trace)."""
  names = {d.function: d.name for d in autodiff.REGISTRY.values()}
  program = str(jax.make_jaxpr(lambda p: f(p))(params))
  called = re.findall(r'custom_vjp_call\[\s*name=(\w+)', program)
  return {names[c] for c in called}


@pytest.mark.parametrize('case', CASES)
def test_both_settings_give_the_same_gradients(case):
  args, fields, reached = CASES[case]
  on, params = _objective(_config(*args, **fields))
  off, _ = _objective(_config(*args, custom_gradients=False, **fields))
  # The switch decides: the hand-written passes are in the program with it on, none with it off.
  assert reached <= _custom_calls(on, params)
  assert not _custom_calls(off, params)
  with autodiff.only(set(autodiff.REGISTRY) - reached):
    assert not reached & _custom_calls(on, params)
  value_on, grads_on = jax.jit(jax.value_and_grad(on))(params)
  value_off, grads_off = jax.jit(jax.value_and_grad(off))(params)
  np.testing.assert_allclose(value_on, value_off, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(grads_on), jax.tree.leaves(grads_off)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-6)


@pytest.mark.parametrize('case,hvp', [('rope, chunked loss', True), ('path', False),
                                      ('masked LM', False)])
def test_forward_mode_works_with_the_switch_off(case, hvp):
  """jax.jvp gives the directional derivative <grad f, v> that reverse mode gives, and a
  Hessian-vector product by forward-over-reverse equals reverse-over-reverse's (one layer: the
  second order's program is the slow part)."""
  args, fields, _ = CASES[case]
  f, params = _objective(_config(*args, custom_gradients=False, num_layers=1, **fields))
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(1), len(leaves))
  v = jax.tree.unflatten(treedef, [jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])
  dot = lambda a, b: sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
  _, tangent = jax.jit(lambda p, t: jax.jvp(f, (p,), (t,)))(params, v)
  np.testing.assert_allclose(tangent, dot(jax.jit(jax.grad(f))(params), v), rtol=1e-4)
  if not hvp:
    return
  _, hvp_forward = jax.jit(lambda p, t: jax.jvp(jax.grad(f), (p,), (t,)))(params, v)
  hvp_reverse = jax.jit(jax.grad(lambda p: dot(jax.grad(f)(p), v)))(params)
  for a, b in zip(jax.tree.leaves(hvp_forward), jax.tree.leaves(hvp_reverse)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-3, atol=1e-5)


def test_forward_mode_fails_through_the_hand_written_passes():
  """What the switch is for: with it on, jax.jvp raises JAX's custom_vjp error."""
  f, params = _objective(_config('rope', loss_chunk=4))
  with pytest.raises(TypeError, match='custom_vjp'):
    jax.jvp(f, (params,), (params,))


def test_a_model_applies_its_own_setting_without_the_step():
  """A model called directly (a notebook, hf.load) runs under its config's setting: jax.jvp
  through the forward of a model built with custom_gradients=False works with no context."""
  config = _config('rope', custom_gradients=False)
  model = models.create(config.model, seed=0)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  batch = _batch(config)
  logits = lambda p: nnx.merge(graphdef, p, rest)(
      batch['inputs'], batch['inputs_positions'], batch['inputs_segment_ids'])
  out, tangent = jax.jvp(logits, (params,), (params,))
  assert out.shape == tangent.shape and np.isfinite(np.asarray(tangent)).all()


def test_every_custom_vjp_is_declared_through_the_registry():
  """No module of the package calls jax.custom_vjp itself: each goes through
  autodiff.custom_vjp, so the switch reaches every one."""
  direct = [str(p.relative_to(ROOT)) for p in (ROOT / 'roformer').rglob('*.py')
            if p.name != 'autodiff.py' and 'jax.custom_vjp' in p.read_text()]
  assert not direct
  declared = {d.name for d in autodiff.REGISTRY.values()}
  assert declared == {'dense', 'softmax', 'softmax_attention', 'rotation',
                      'chunked_loss', 'cross_entropy', 'householder_solve',
                      'fused_bias_attention', 'fused_stick_breaking'}


def test_a_pass_applies_only_on_the_backends_it_is_kept_on(monkeypatch):
  """The dense layers' pass is kept on the CPU only (its reason is XLA:CPU's layout); the
  others on every backend."""
  assert autodiff.REGISTRY['dense'].backends == ('cpu',)
  monkeypatch.setattr(autodiff, '_backend', lambda: 'gpu')
  assert not autodiff.enabled('dense') and autodiff.enabled('softmax_attention')
  monkeypatch.setattr(autodiff, '_backend', lambda: 'cpu')
  assert autodiff.enabled('dense')


def test_only_refuses_an_unknown_name():
  with pytest.raises(ValueError, match='unknown custom gradients'):
    autodiff.only({'no_such_gradient'})
