"""PaTH, accumulated Householder transforms between key and query (kind `path`), and PaTH with
FoX's forget gates (`path+fox`): the compact form against explicit products of d x d matrices
in float64, the model's layer against the paper's recipe for w and beta, the short convolution
at segment starts, the cache, and the config checks. (Every kind's future leakage, packed rows
and cache are also checked in test_attention.py and test_decode.py, from the registry.)"""

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import attention
from roformer import errors
from roformer import models
from roformer import positions
from roformer import resolve


def paper_logits(q, k, w, beta):
  """s_ij = k_j^T (H_{j+1} H_{j+2} ... H_i) q_i with H_t = I - beta_t w_t w_t^T, each product
  formed as d x d matrices in float64 (-inf above the diagonal)."""
  q, k, w, beta = (np.asarray(t, np.float64) for t in (q, k, w, beta))
  length, d = q.shape[-2:]
  out = np.full(q.shape[:-2] + (length, length), -np.inf)
  for index in np.ndindex(q.shape[:-2]):
    for i in range(length):
      for j in range(i + 1):
        product = np.eye(d)
        for t in range(j + 1, i + 1):
          product = product @ (np.eye(d) - beta[index][t] * np.outer(w[index][t], w[index][t]))
        out[index][i, j] = k[index][j] @ product @ q[index][i]
  return out


def unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.parametrize('length', [1, 2, 7, 24])
def test_path_logits_are_the_products_of_the_householder_matrices(length):
  rng = np.random.default_rng(length)
  q, k = rng.normal(size=(2, 3, length, 6)), rng.normal(size=(2, 3, length, 6))
  w = unit(rng.normal(size=(2, 3, length, 6)))
  beta = rng.uniform(0.0, 2.0, (2, 3, length))
  beta[0, 0, ::3] = 2.0 - 1e-6  # Reflections (H orthogonal) and near-identities as well.
  beta[0, 1, ::2] = 1e-6
  got = np.asarray(positions.path_logits(*(jnp.asarray(t, jnp.float32) for t in (q, k, w, beta))))
  want = paper_logits(q, k, w, beta)
  assert got.shape == (2, 3, length, length)
  np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))  # Masked above.
  below = np.isfinite(want)
  np.testing.assert_allclose(got[below], want[below], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.diagonal(got, axis1=-2, axis2=-1), np.sum(q * k, -1), rtol=1e-5,
                             atol=1e-5)  # The identity on the diagonal.


def test_long_rows_keep_every_logit_bounded_by_the_plain_dot_products_scale():
  """Every product of H's has norm at most 1, so |s_ij| <= |q_i| |k_j| at any distance: 512
  tokens of reflections in float32 stay within it and equal the float64 products."""
  rng = np.random.default_rng(0)
  q, k, w = rng.normal(size=(512, 4)), rng.normal(size=(512, 4)), unit(rng.normal(size=(512, 4)))
  beta = rng.uniform(1.5, 2.0, 512)
  got = np.asarray(positions.path_logits(*(jnp.asarray(t, jnp.float32) for t in (q, k, w, beta))))
  bound = np.linalg.norm(q, axis=-1)[:, None] * np.linalg.norm(k, axis=-1)[None, :]
  below = np.tril(np.ones((512, 512), bool))
  assert np.all(np.abs(got[below]) <= bound[below] * (1 + 1e-4))
  # The float64 reference for the last query, by applying the H's to q from the right.
  p, want = q[-1].copy(), np.zeros(512)
  for j in range(511, -1, -1):
    want[j] = k[j] @ p
    p = p - beta[j] * w[j] * (w[j] @ p)
  np.testing.assert_allclose(got[-1], want, rtol=1e-4, atol=1e-4)


def test_the_gradients_are_those_of_the_float64_products():
  """d/d(q, k, w, beta) of sum(sin(logits)) against central differences of the explicit
  products in float64 (w as given: the directions' normalisation is the layer's)."""
  rng = np.random.default_rng(3)
  q, k, w = (rng.normal(size=(5, 3)) for _ in range(3))
  beta = rng.uniform(0.2, 1.8, 5)
  below = np.tril(np.ones((5, 5), bool))
  objective = lambda *t: np.sum(np.sin(paper_logits(*t)[below]))
  got = jax.grad(lambda *t: jnp.sum(jnp.where(below, jnp.sin(positions.path_logits(*t)), 0.0)),
                 argnums=(0, 1, 2, 3))(*(jnp.asarray(t, jnp.float32) for t in (q, k, w, beta)))
  inputs = [q, k, w, beta]
  for n, value in enumerate(inputs):
    want = np.zeros_like(value)
    for index in np.ndindex(value.shape):
      step = np.zeros_like(value)
      step[index] = 1e-6
      up = [t + step if i == n else t for i, t in enumerate(inputs)]
      down = [t - step if i == n else t for i, t in enumerate(inputs)]
      want[index] = (objective(*up) - objective(*down)) / 2e-6
    np.testing.assert_allclose(np.asarray(got[n]), want, rtol=1e-3, atol=1e-4)


def test_the_step_calls_no_lapack_kernel():
  """The triangular solve is matmuls: XLA:CPU's LAPACK trsm runs on the host BLAS, and several
  at once in one train step (each layer's forward and backward solves) hung it."""
  model = models.create(tiny('path', num_layers=2).model, seed=0)
  tokens = jnp.ones((2, 40), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(40), (2, 40))
  graphdef, params = nnx.split(model, nnx.Param)
  loss = lambda p: jnp.sum(nnx.merge(graphdef, p)(tokens, pos, jnp.ones_like(tokens)) ** 2)
  text = jax.jit(jax.grad(loss)).lower(params).as_text()
  assert 'lapack' not in text.lower() and 'trsm' not in text.lower()


def test_the_short_convolution_never_reaches_across_a_segment_start():
  """Tap s of token t reads token t - s only inside t's segment (two packed segments here)."""
  rng = np.random.default_rng(0)
  a = rng.normal(size=(1, 7, 3))
  kernel = rng.normal(size=(3, 3))
  pos = np.array([[0, 1, 2, 3, 0, 1, 2]])
  got = np.asarray(positions.short_convolution(jnp.asarray(a), jnp.asarray(kernel),
                                               jnp.asarray(pos)))
  want = np.zeros_like(a)
  for t in range(7):
    for s in range(3):
      if pos[0, t] >= s:
        want[0, t] += kernel[s] * a[0, t - s]
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def tiny(kind='path', **model):
  return kinds.tiny_config(kind, **model)


def test_the_attention_logits_of_a_path_layer_are_the_papers_recipe():
  """One layer's logits from its own parameters, against float64: w_t = normalise(SiLU(the
  causal convolution of x W_down W_up)), beta_t = 2 sigmoid(x . v + b), then the explicit
  products divided by sqrt(head_dim)."""
  config = tiny(num_layers=1)
  config.model.position.path.beta_bias_init = 0.5
  model = models.create(config.model, seed=2)
  layer = model.blocks[0].position
  length, heads, dim = 9, config.model.num_heads, config.model.d_model // config.model.num_heads
  x = jax.random.normal(jax.random.key(1), (2, length, config.model.d_model))
  q, k = (jax.random.normal(jax.random.key(s), (2, length, heads, dim)) for s in (2, 3))
  pos = jnp.broadcast_to(jnp.arange(length), (2, length))
  mask = attention.make_mask(jnp.ones((2, length), jnp.int32), jnp.ones((2, length), jnp.int32),
                             causal=True)
  got = np.asarray(layer.logits(q, k, pos, pos, mask, layer.prepare(x, pos, None)))
  f64 = lambda t: np.asarray(t, np.float64)
  a = f64(x) @ f64(layer.w_down[...]) @ f64(layer.w_up[...])
  kernel = f64(layer.conv[...])
  conv = sum(kernel[s] * np.pad(a, ((0, 0), (s, 0), (0, 0)))[:, :length] for s in range(3))
  w = unit((conv / (1 + np.exp(-conv))).reshape(2, length, heads, dim))
  beta = 2 / (1 + np.exp(-(f64(x) @ f64(layer.beta_kernel[...]) + 0.5)))
  heads_first = lambda t: np.moveaxis(f64(t), 2, 1)
  want = paper_logits(heads_first(q), heads_first(k), heads_first(w),
                      np.transpose(beta, (0, 2, 1))) / np.sqrt(dim)
  below = np.isfinite(want)
  np.testing.assert_allclose(got[below], want[below], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('kind', ['path', pytest.param('path+fox', marks=pytest.mark.slow)])
def test_the_cache_equals_the_full_pass_in_steps_of_every_size(kind):
  """Prefill 5 tokens, then 1 and 3 at a time: the cache keeps each slot's convolution input
  and beta, and every step's logits equal the full pass."""
  model = models.create(tiny(kind).model, seed=4)
  state = model.init_cache(2, 16)['layers'][0]['position']
  assert state is not None
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 12)))
  kinds.assert_decoding_equals_full_pass(model, tokens, (5, 1, 3, 3))


def test_path_plus_fox_adds_foxs_bias_to_paths_logits():
  """The combined kind's logits are PaTH's plus FoX's bias, each as its own kind gives it."""
  model = models.create(tiny('path+fox', num_layers=1).model, seed=2)
  layer = model.blocks[0].position
  path = models.create(tiny('path', num_layers=1).model, seed=2).blocks[0].position
  fox = models.create(tiny('fox', num_layers=1).model, seed=2).blocks[0].position
  nnx.update(path, nnx.state(layer.first))
  nnx.update(fox, nnx.state(layer.second))
  x = jax.random.normal(jax.random.key(1), (2, 8, 32))
  q, k = (jax.random.normal(jax.random.key(s), (2, 8, 4, 8)) for s in (2, 3))
  pos = jnp.broadcast_to(jnp.arange(8), (2, 8))
  mask = attention.make_mask(jnp.ones((2, 8), jnp.int32), jnp.ones((2, 8), jnp.int32), causal=True)
  got = layer.logits(q, k, pos, pos, mask, layer.prepare(x, pos, model.position()))
  want = (path.logits(q, k, pos, pos, mask, path.prepare(x, pos, None))
          + fox.logits_bias(q, k, pos, pos, mask, fox.prepare(x, pos, None)))
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  caps = positions.capabilities('path+fox')
  assert caps.computes_logits and caps.causal_only and not caps.rotary


def test_zero_strength_transforms_give_plain_attention_without_positions():
  """With every beta at 0 (H_t = I) PaTH's model is the model without positions."""
  path = models.create(tiny('path').model, seed=3)
  plain = models.create(tiny('none').model, seed=3)
  for block in path.blocks:
    block.position.beta_kernel.value = jnp.zeros_like(block.position.beta_kernel[...])
    block.position.beta_bias.value = jnp.full_like(block.position.beta_bias[...], -60.0)
  nnx.update(plain, nnx.state(path, nnx.Not(nnx.PathContains('position'))))
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 10)))
  pos = jnp.broadcast_to(jnp.arange(10), (2, 10))
  run = lambda model: jax.jit(lambda t, p: model(t, p, jnp.ones_like(t)))(tokens, pos)
  np.testing.assert_allclose(run(path), run(plain), atol=1e-5)


@pytest.mark.parametrize('kind,change,match', [
    ('path', {'type': 'mlm'}, 'causal attention only'),
    ('path+fox', {'type': 'mlm'}, 'causal attention only'),
    ('fox+path', {}, r'A\+B with B one of'),
    ('path', {'attention_impl': 'xla'}, 'attention_impl=einsum'),
    ('path', {'attention': {'kind': 'favor', 'num_features': 16, 'chunk': 8,
                            'redraw_interval': 0, 'rope_mode': 'qk'}}, 'favor'),
    ('path', {'position': {'path': {'conv_size': 9}}}, r'config.model.position.path.conv_size'),
])
def test_bad_settings_are_refused_naming_the_field(kind, change, match):
  config = test_config.get_config('mlm') if change.get('type') == 'mlm' else tiny()
  config.model.position.kind = kind
  config.model.update({k: v for k, v in change.items() if k != 'type'})
  with pytest.raises(errors.ConfigError, match=match):
    resolve.validate(config)
