"""The dense layers' product, with its weight gradient written as one 2-D product.

A dense layer computes y = x W for x [..., d_in] and W [d_in, d_out]. Its weight gradient is
dW = x^T g, a product that contracts every leading axis of x and of g (tokens). Left to
autodiff, XLA:CPU (jax 0.10) gives that product to Eigen in a layout it runs slowly: at the
synthetic tasks' shapes (2,048 tokens, d_model 64, d_ff 256) it transposed g into a copy and
ran x^T g^T at 27 GFLOP/s, where the same product in the plain form x2^T g2 (x2, g2: the
tokens flattened into one axis) runs at 80-90 GFLOP/s. The eight weight gradients of its two blocks took
15 ms of the 45 ms passkey step (docs/performance.md).

`dot_general` is given to every `nnx.Linear` (layers.dense). Its forward is lax.dot_general's,
and its backward computes the same two products autodiff would, in the plain form: the input
gradient g W^T, and the weight gradient from the flattened tokens. Eigen's product with a
transposed left side runs faster when the result has fewer rows than columns ([64, 256]: 0.8 ms
against 1.3 ms for [256, 64] at 2,048 tokens), so on the CPU a weight gradient with d_in >
d_out is computed as (g2^T x2)^T, behind an optimization barrier that keeps XLA from folding
the transpose back into the product. The values are those of autodiff's products: the same
sums of the same terms (the tests compare them with a float64 reference and with autodiff).

A custom VJP has no forward-mode rule: jax.jvp, jacfwd and hessian through a dense layer raise
JAX's "can't apply forward-mode autodiff (jvp) to a custom_vjp function". A layer written as the
plain 2-D product of the flattened tokens (x2 W, reshaped back) gets the same weight gradient from
autodiff alone and keeps forward mode; without the orientation above it measured 3-6% slower on
the recall and passkey steps (the same on copy). So the custom VJP is declared for the CPU only
(roformer/autodiff.py; docs/performance.md has what turning it off costs), and
`model.custom_gradients=False` turns it off where forward mode is wanted.
"""

import jax
import jax.numpy as jnp

from roformer import autodiff


def _plain(dimension_numbers, lhs_ndim: int) -> bool:
  """Whether the product is a dense layer's: the last axis of x against the first of W."""
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  return (tuple(lhs_contract) == (lhs_ndim - 1,) and tuple(rhs_contract) == (0,)
          and not lhs_batch and not rhs_batch)


def _forward(x, w, precision, preferred_element_type):
  return jax.lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())), precision=precision,
                             preferred_element_type=preferred_element_type)


def weight_grad(x2: jax.Array, g2: jax.Array, precision=None, *,
                on_cpu: bool | None = None) -> jax.Array:
  """x2^T g2 for x2 [tokens, d_in] and g2 [tokens, d_out], in x2's dtype: the orientation that
  XLA:CPU runs fastest (the module docstring)."""
  on_cpu = jax.default_backend() == 'cpu' if on_cpu is None else on_cpu
  contract = (((0,), (0,)), ((), ()))
  if on_cpu and x2.shape[1] > g2.shape[1]:
    transposed = jax.lax.dot_general(g2, x2, contract, precision=precision,
                                     preferred_element_type=x2.dtype)
    return jax.lax.optimization_barrier(transposed).T
  return jax.lax.dot_general(x2, g2, contract, precision=precision,
                             preferred_element_type=x2.dtype)


@autodiff.custom_vjp('dense', nondiff_argnums=(2, 3), backends=('cpu',),
                     why='the weight gradient as one 2-D product, in the orientation XLA:CPU runs fastest')
def _dense(x, w, precision, preferred_element_type):
  return _forward(x, w, precision, preferred_element_type)


def _dense_fwd(x, w, precision, preferred_element_type):
  return _forward(x, w, precision, preferred_element_type), (x, w)


def _dense_bwd(precision, preferred_element_type, residuals, g):
  del preferred_element_type  # The gradients take their primals' dtypes.
  x, w = residuals
  # Products in the wider of the cotangent's and the inputs' dtypes (a float32 cotangent of a
  # bfloat16 product with preferred_element_type=float32 is not rounded first), cast back after.
  dtype = jnp.promote_types(g.dtype, x.dtype)
  g, x, w_wide = g.astype(dtype), x.astype(dtype), w.astype(dtype)
  dx = jax.lax.dot_general(g, w_wide, (((g.ndim - 1,), (1,)), ((), ())), precision=precision,
                           preferred_element_type=dtype)
  dw = weight_grad(x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1]), precision)
  return dx.astype(residuals[0].dtype), dw.astype(w.dtype)


_dense.defvjp(_dense_fwd, _dense_bwd)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                out_sharding=None):
  """lax.dot_general's signature, as nnx.Linear calls it; a dense layer's product (the last
  axis of `lhs` against the first of `rhs`, no batch axes, no output sharding) gets the
  backward above, any other product lax.dot_general's own."""
  if out_sharding is not None or not _plain(dimension_numbers, lhs.ndim):
    return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                               preferred_element_type=preferred_element_type,
                               out_sharding=out_sharding)
  return _dense(lhs, rhs, precision, preferred_element_type)
