"""Stick-breaking attention (config.model.attention.kind='stick_breaking'): the weights against
the paper's product written out in float64, at extreme logits, in the model (no future leakage,
the cache), and the checks that refuse it where it has no meaning."""

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
from roformer import resolve


def paper_weights(z: np.ndarray, attend_current: bool) -> np.ndarray:
  """A_ij = beta_ij prod_{j<l<i} (1 - beta_il), keys j < i (j <= i and l <= i with
  attend_current), beta = sigmoid(z): the products term by term in float64."""
  z = np.asarray(z, np.float64)
  beta = 1.0 / (1.0 + np.exp(-z))
  length = z.shape[-1]
  out = np.zeros_like(z)
  for i in range(length):
    last = i if attend_current else i - 1
    for j in range(last + 1):
      weight = beta[..., i, j]
      for l in range(j + 1, last + 1):
        weight = weight * (1.0 - beta[..., i, l])
      out[..., i, j] = weight
  return out


@pytest.mark.parametrize('attend_current', [False, True])
@pytest.mark.parametrize('length', [1, 3, 9])
def test_the_weights_are_the_papers_products(length, attend_current):
  z = np.random.default_rng(length).normal(0, 2, (2, 3, length, length))
  got = np.asarray(attention.stick_breaking_weights(jnp.asarray(z, jnp.float32), attend_current))
  np.testing.assert_allclose(got, paper_weights(z, attend_current), rtol=1e-5, atol=1e-6)
  assert (got.sum(-1) <= 1 + 1e-6).all()  # A stick: what is left weighs nothing.


@pytest.mark.parametrize('attend_current', [False, True])
def test_the_gradient_is_the_papers_products_differentiated(attend_current):
  """The gradient against central differences of the float64 products, with a mask that
  removes some keys."""
  rng = np.random.default_rng(7)
  z = rng.normal(0, 2, (2, 6, 6))
  g = rng.normal(size=z.shape)
  mask = rng.uniform(size=(6, 6)) > 0.25

  def reference(z):
    return np.sum(g * np.where(mask, paper_weights(np.where(mask, z, -np.inf),
                                                   attend_current), 0.0))

  got = np.asarray(jax.grad(lambda z: jnp.sum(jnp.asarray(g, jnp.float32) * (
      attention.stick_breaking_weights(z, attend_current, jnp.asarray(mask)))))(
          jnp.asarray(z, jnp.float32)))
  want, eps = np.zeros_like(z), 1e-6
  for index in np.ndindex(z.shape):
    step = np.zeros_like(z)
    step[index] = eps
    want[index] = (reference(z + step) - reference(z - step)) / (2 * eps)
  np.testing.assert_allclose(got, want, atol=2e-5)


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_extreme_logits_give_finite_weights_and_gradients(dtype):
  """Logits of +-60 (and 1e4): no NaN or inf in the weights or their gradient; a key with a
  logit of +60 takes the whole stick, so every key before it gets nothing."""
  z = jnp.asarray(np.random.default_rng(0).choice([-60.0, 60.0, -1e4, 1e4, 0.5], (2, 7, 7)), dtype)
  for attend_current in (False, True):
    weights = attention.stick_breaking_weights(z, attend_current)
    grad = jax.grad(lambda z: jnp.sum(attention.stick_breaking_weights(z, attend_current)
                                      * jnp.arange(7.0)))(z)
    assert np.isfinite(np.asarray(weights)).all() and np.isfinite(np.asarray(grad, np.float32)).all()
  row = jnp.asarray([[-60.0, 0.0, 60.0, -60.0]], jnp.float32)
  weights = np.asarray(attention.stick_breaking_weights(
      jnp.broadcast_to(row, (4, 4)), attend_current=True))[3]
  np.testing.assert_allclose(weights, [0.0, 0.0, 1.0, 0.0], atol=1e-12)


def test_masked_keys_neither_take_nor_break_the_stick():
  """A key the mask hides (another packed segment) changes nothing for the keys around it:
  the weights equal those of the row without that key."""
  z = np.random.default_rng(3).normal(0, 2, (6, 6)).astype(np.float32)
  mask = np.ones((6, 6), bool)
  mask[:, 2] = False
  got = np.asarray(attention.stick_breaking_weights(jnp.asarray(z), False, jnp.asarray(mask)))
  keep = [0, 1, 3, 4, 5]
  want = paper_weights(z[np.ix_(keep, keep)], False)
  np.testing.assert_allclose(got[np.ix_(keep, keep)], want, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(got[:, 2], 0.0)


def tiny(kind='none', attend_current=False):
  config = kinds.tiny_config(kind)
  config.model.attention.update(kind='stick_breaking', attend_current=attend_current)
  return config


@pytest.mark.parametrize('kind,attend_current', [('none', False), ('rope', True)])
def test_the_model_leaks_no_future_token_and_its_cache_equals_the_full_pass(kind,
                                                                            attend_current):
  config = tiny(kind, attend_current)
  resolve.validate(config)
  model = kinds.Compiled(models.create(config.model, seed=1))
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(5, 50, (2, 11)))
  pos = jnp.broadcast_to(jnp.arange(11), (2, 11))
  full = np.asarray(model(tokens, pos, jnp.ones_like(tokens)))
  changed = np.asarray(model(tokens.at[:, 7].set(4), pos, jnp.ones_like(tokens)))
  np.testing.assert_array_equal(changed[:, :7], full[:, :7])
  assert np.abs(changed[:, 7:] - full[:, 7:]).max() > 1e-4
  kinds.assert_decoding_equals_full_pass(model.model, tokens, (4, 1, 3, 3))


@pytest.mark.parametrize('causal_block', [0, 2, pytest.param(4, marks=pytest.mark.slow)])
def test_the_layer_is_the_formula_on_its_own_logits(causal_block):
  """One layer's output: the stick-breaking weights (float64 reference) of its q.k/sqrt(d)
  times its values, whole or in causal blocks of queries."""
  config = tiny('none')
  config.model.update(num_layers=1, causal_block=causal_block)
  model = models.create(config.model, seed=1)
  attn = model.blocks[0].attn
  x = jax.random.normal(jax.random.key(0), (1, 6, config.model.d_model))
  mask = attention.make_mask(jnp.ones((1, 6), jnp.int32), jnp.ones((1, 6), jnp.int32),
                             causal=True)
  pos = jnp.arange(6)[None]
  out, _ = attn(x, mask, pos, model.blocks[0].position)
  heads, dim = attn.num_heads, attn.head_dim
  q, k, v = np.split(np.asarray(attn.qkv(x), np.float64).reshape(1, 6, 3 * heads, dim), 3, axis=2)
  z = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(dim)
  mixed = np.einsum('bhqk,bkhd->bqhd', paper_weights(z, False), v).reshape(1, 6, -1)
  want = mixed @ np.asarray(attn.out.kernel[...], np.float64) + np.asarray(attn.out.bias[...])
  np.testing.assert_allclose(np.asarray(out), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('kind,fields', [
    pytest.param('none', {'model.attention.attend_current': True}, marks=pytest.mark.slow),
    pytest.param('alibi', {}, marks=pytest.mark.slow),
    ('rope', {'model.layer_kinds': ('rope', 'none'), 'model.layer_windows': (3, 0)}),
])
def test_causal_blocks_change_neither_outputs_nor_gradients(kind, fields):
  """Blocks of 3 query rows (their keys up to the block's last row, from the window's first)
  give the whole matrix's logits and gradients, packed documents and padding included."""
  results = []
  for causal_block in (0, 3):
    config = tiny(kind)
    kinds.set_fields(config, {**fields, 'model.causal_block': causal_block})
    resolve.validate(config)
    model = models.create(config.model, seed=2)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    rng = np.random.default_rng(3)
    tokens = jnp.asarray(rng.integers(5, 50, (2, 10)))
    pos = jnp.asarray(np.tile(np.r_[np.arange(6), np.arange(2), [0, 0]], (2, 1)))
    seg = jnp.asarray(np.tile([1] * 6 + [2] * 2 + [0, 0], (2, 1)))
    weights = jnp.asarray(rng.normal(size=(2, 10, 50)) * (np.asarray(seg) > 0)[..., None],
                          jnp.float32)

    def loss(params):
      logits = nnx.merge(graphdef, params, rest)(tokens, pos, seg)
      return jnp.sum(logits * weights), logits

    (_, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    results.append((np.asarray(logits)[np.asarray(seg) > 0],
                    [np.asarray(g) for g in jax.tree.leaves(grads)]))
  (whole, whole_grads), (blocks, block_grads) = results
  np.testing.assert_allclose(blocks, whole, atol=1e-5)
  for a, b in zip(block_grads, whole_grads):
    np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize('change,match', [
    ({'type': 'mlm'}, "is for causal LMs, not model.type='mlm'"),
    ({'attention_impl': 'xla'}, 'einsum/pallas path'),
])
def test_stick_breaking_is_refused_where_it_has_no_meaning(change, match):
  config = test_config.get_config('mlm') if change.get('type') else tiny()
  config.model.attention.kind = 'stick_breaking'
  config.model.update({k: v for k, v in change.items() if k != 'type'})
  with pytest.raises(errors.ConfigError, match=match):
    resolve.validate(config)
