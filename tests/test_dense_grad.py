"""The dense layers' product with its weight gradient as one 2-D product (roformer/dense_grad.py):
the same gradients as autodiff of lax.dot_general, in both orientations, and in the models."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer import dense_grad
from roformer import models
from configs import synthetic as synthetic_config

DENSE = (((2,), (0,)), ((), ()))  # [b, s, d_in] x [d_in, d_out].


def _inputs(d_in, d_out, seed=0, shape=(3, 5)):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=shape + (d_in,)), rng.normal(size=(d_in, d_out)),
          rng.normal(size=shape + (d_out,)))


@pytest.mark.parametrize('d_in, d_out', [(4, 12), (12, 4), (6, 6)])
@pytest.mark.parametrize('on_cpu', [False, True])
def test_weight_grad_is_x_transposed_times_g_in_either_orientation(d_in, d_out, on_cpu):
  """Both orientations (the CPU's transposed one for d_in > d_out) give x^T g of float64."""
  x, _, g = _inputs(d_in, d_out)
  x2, g2 = x.reshape(-1, d_in), g.reshape(-1, d_out)
  got = dense_grad.weight_grad(jnp.asarray(x2, jnp.float32), jnp.asarray(g2, jnp.float32),
                               on_cpu=on_cpu)
  assert got.shape == (d_in, d_out) and got.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(got), x2.T @ g2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('d_in, d_out', [(8, 24), (24, 8)])
def test_gradients_are_autodiffs_of_the_plain_product(d_in, d_out):
  """Value, input gradient and weight gradient against lax.dot_general under autodiff and
  against float64: y = x W, dx = g W^T, dW = sum over tokens of x^T g."""
  x, w, g = _inputs(d_in, d_out)
  x32, w32, g32 = (jnp.asarray(a, jnp.float32) for a in (x, w, g))
  ours = lambda x, w: dense_grad.dot_general(x, w, DENSE)
  plain = lambda x, w: jax.lax.dot_general(x, w, DENSE)
  y, vjp = jax.vjp(ours, x32, w32)
  y_ref, vjp_ref = jax.vjp(plain, x32, w32)
  np.testing.assert_array_equal(np.asarray(y), np.asarray(y_ref))
  for got, want, exact in zip(vjp(g32), vjp_ref(g32), (x @ w, g @ w.T, np.einsum(
      'bsi,bso->io', x, g))[1:]):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got), exact, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(np.asarray(y), x @ w, rtol=1e-5, atol=1e-5)


def test_gradients_keep_their_primals_dtypes():
  """In bfloat16 (as a model in that dtype computes), the gradients are bfloat16 like x and W,
  and close to float64's."""
  x, w, g = _inputs(8, 16)
  xb, wb, gb = (jnp.asarray(a, jnp.bfloat16) for a in (x, w, g))
  _, vjp = jax.vjp(lambda x, w: dense_grad.dot_general(x, w, DENSE), xb, wb)
  dx, dw = vjp(gb)
  assert dx.dtype == dw.dtype == jnp.bfloat16
  _, vjp_ref = jax.vjp(lambda x, w: jax.lax.dot_general(x, w, DENSE), xb, wb)
  for got, want in zip((dx, dw), vjp_ref(gb)):
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=1e-2, atol=1e-2)
  np.testing.assert_allclose(np.asarray(dw, np.float64), np.einsum('bsi,bso->io', x, g),
                             rtol=0.05, atol=0.1)


def test_a_float32_cotangent_of_a_bfloat16_product_is_not_rounded_first():
  """With preferred_element_type=float32 on bfloat16 inputs, the weight gradient multiplies the
  float32 cotangent as it is, as autodiff does (then rounds to the weight's dtype)."""
  x, w, g = _inputs(8, 16, seed=4)
  xb, wb = jnp.asarray(x, jnp.bfloat16), jnp.asarray(w, jnp.bfloat16)
  g32 = jnp.asarray(g, jnp.float32) * 1.001  # Not representable in bfloat16.
  ours = lambda x, w: dense_grad.dot_general(x, w, DENSE, preferred_element_type=jnp.float32)
  plain = lambda x, w: jax.lax.dot_general(x, w, DENSE, preferred_element_type=jnp.float32)
  (dx, dw), (dx_ref, dw_ref) = (jax.vjp(f, xb, wb)[1](g32) for f in (ours, plain))
  assert dw.dtype == dw_ref.dtype and dx.dtype == dx_ref.dtype
  np.testing.assert_array_equal(np.asarray(dw, np.float32), np.asarray(dw_ref, np.float32))
  np.testing.assert_array_equal(np.asarray(dx, np.float32), np.asarray(dx_ref, np.float32))


def test_other_products_are_lax_dot_generals_own():
  """A product with batch axes is not a dense layer's: it is computed as lax.dot_general."""
  rng = np.random.default_rng(1)
  a, b = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((2, 3, 4), (2, 4, 5)))
  numbers = (((2,), (1,)), ((0,), (0,)))
  np.testing.assert_array_equal(np.asarray(dense_grad.dot_general(a, b, numbers)),
                                np.asarray(jax.lax.dot_general(a, b, numbers)))


def _dots(jaxpr):
  """(operand ranks, contracting axes) of every dot_general in a jaxpr and its sub-jaxprs."""
  found = []
  for e in jaxpr.eqns:
    if e.primitive.name == 'dot_general':
      found.append(([v.aval.ndim for v in e.invars], e.params['dimension_numbers'][0]))
    for value in e.params.values():
      for sub in value if isinstance(value, (tuple, list)) else [value]:
        inner = getattr(sub, 'jaxpr', sub)
        if hasattr(inner, 'eqns'):
          found += _dots(inner)
  return found


def test_the_weight_gradient_is_one_product_over_the_flattened_tokens():
  """What makes it fast: the backward pass's weight gradient is a single dot_general of 2-D
  operands contracting their first axis (the tokens), not autodiff's 3-D contraction."""
  x, w, g = (jnp.asarray(a, jnp.float32) for a in _inputs(8, 24))
  _, vjp = jax.vjp(lambda x, w: dense_grad.dot_general(x, w, DENSE), x, w)
  dots = _dots(jax.make_jaxpr(vjp)(g).jaxpr)
  assert ([2, 2], ((0,), (0,))) in dots and len(dots) == 2  # dW, and dx = g W^T.
  assert ([3, 2], ((2,), (1,))) in dots


def test_on_the_cpu_a_wider_input_gets_the_transposed_product_behind_a_barrier():
  """d_in > d_out: (g2^T x2)^T, the product with fewer result rows, kept from being folded
  back by an optimization barrier; elsewhere the plain x2^T g2."""
  x2, g2 = (jnp.asarray(a, jnp.float32) for a in (np.ones((6, 24)), np.ones((6, 8))))
  cpu = jax.make_jaxpr(lambda x, g: dense_grad.weight_grad(x, g, on_cpu=True))(x2, g2).jaxpr
  other = jax.make_jaxpr(lambda x, g: dense_grad.weight_grad(x, g, on_cpu=False))(x2, g2).jaxpr
  names = lambda jaxpr: [e.primitive.name for e in jaxpr.eqns]
  assert 'optimization_barrier' in names(cpu) and 'transpose' in names(cpu)
  assert [e.outvars[0].aval.shape for e in cpu.eqns if e.primitive.name == 'dot_general'] == [
      (8, 24)]
  assert 'optimization_barrier' not in names(other)
  assert [e.outvars[0].aval.shape for e in other.eqns if e.primitive.name == 'dot_general'] == [
      (24, 8)]


def test_every_dense_layer_of_a_model_gets_the_same_gradients_as_autodiff():
  """The passkey model's loss gradient with its dense layers on dense_grad.dot_general equals
  the same model's with lax.dot_general, leaf by leaf."""
  cfg = synthetic_config.get_config('passkey')
  cfg.model.update(num_layers=1, d_model=16, num_heads=2, d_ff=32, vocab_size=40)
  model = models.create(cfg.model, seed=0)
  linears = [m for _, m in nnx.iter_graph(model) if isinstance(m, nnx.Linear)]
  assert linears and all(m.dot_general is dense_grad.dot_general for m in linears)
  tokens = jnp.asarray(np.random.default_rng(2).integers(0, 40, (2, 12)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(12), (2, 12))
  segments = jnp.ones((2, 12), jnp.int32)

  @nnx.jit
  def grads(model):
    loss = lambda m: jnp.sum(jnp.tanh(m(tokens, positions, segments)))
    return nnx.state(nnx.grad(loss)(model), nnx.Param)

  ours = grads(model)
  for m in linears:
    m.dot_general = jax.lax.dot_general
  theirs = grads(model)
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
