"""FoX, the Forgetting Transformer's forget gates (kind `fox`), and a bias-only kind added to
another (`rope+fox`): the bias against the paper's sum written in float64, the model's
attention against the same formula, the cache, and the config checks."""

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import errors
from roformer import models
from roformer import positions
from roformer import resolve


def paper_bias(log_f: np.ndarray) -> np.ndarray:
  """D_ij = sum_{l=j+1..i} log f_l for j <= i (an empty sum on the diagonal), -inf above it:
  the sum as the paper writes it, term by term in float64."""
  log_f = np.asarray(log_f, np.float64)
  length = log_f.shape[-1]
  out = np.full(log_f.shape + (length,), -np.inf)
  for i in range(length):
    for j in range(i + 1):
      total = np.zeros(log_f.shape[:-1])
      for l in range(j + 1, i + 1):
        total = total + log_f[..., l]
      out[..., i, j] = total
  return out


@pytest.mark.parametrize('length', [1, 2, 7, 40])
def test_forgetting_bias_is_the_sum_of_the_log_gates_between_key_and_query(length):
  rng = np.random.default_rng(length)
  log_f = np.log(rng.uniform(0.05, 1.0, (2, 3, length)))
  got = np.asarray(positions.forgetting_bias(jnp.asarray(log_f, jnp.float32)))
  want = paper_bias(log_f)
  assert got.shape == (2, 3, length, length)
  np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))  # Masked above.
  below = np.isfinite(want)
  np.testing.assert_allclose(got[below], want[below], rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(np.diagonal(got, axis1=-2, axis2=-1), 0.0)


def tiny(kind='fox', **model):
  return kinds.tiny_config(kind, **model)


def test_the_attention_of_a_fox_layer_is_the_papers_formula():
  """One FoX layer's bias D from the paper's sum in float64 over log sigmoid(w.x + b), and its
  output: softmax(q.k / sqrt(d) + D) over the model's own queries, keys and values."""
  config = tiny('fox', num_layers=1)
  config.model.position.fox.gate_bias_init = 1.5
  model = models.create(config.model, seed=2)
  layer = model.blocks[0].position
  x = jax.random.normal(jax.random.key(1), (2, 9, config.model.d_model))
  ctx = layer.prepare(x, None, None)
  q, k = (jax.random.normal(jax.random.key(s), (2, 9, 4, 8)) for s in (2, 3))
  bias = np.asarray(layer.logits_bias(q, k, None, None, None, ctx))  # [b, h, q, k]
  z = (np.asarray(x, np.float64) @ np.asarray(layer.gate_kernel[...], np.float64)
       + np.asarray(layer.gate_bias[...], np.float64))
  log_f = -np.log1p(np.exp(-z))  # log sigmoid, [b, len, heads]
  want = paper_bias(np.transpose(log_f, (0, 2, 1)))
  below = np.isfinite(want)
  np.testing.assert_allclose(bias[below], want[below], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(layer.gate_bias[...]), 1.5)  # fox.gate_bias_init.
  # The layer's output: softmax(q.k/sqrt(d) + D) v through the output projection.
  attn, pos = model.blocks[0].attn, jnp.broadcast_to(jnp.arange(9), (2, 9))
  mask = jnp.tril(jnp.ones((9, 9), bool))[None, None]
  out, _ = attn(x, mask, pos, layer)
  np.testing.assert_allclose(np.asarray(out), kinds.attention_formula(attn, x, mask, want),
                             rtol=2e-4, atol=2e-5)


def test_rope_plus_fox_rotates_like_rope_and_adds_foxs_bias():
  """The combined kind's layer is RoPE's rotation and FoX's bias, each as its own kind gives it,
  with FoX's parameters and RoPE's options under their own names."""
  config = tiny('rope+fox', num_layers=1)
  model = models.create(config.model, seed=2)
  layer = model.blocks[0].position
  fox = models.create(tiny('fox', num_layers=1).model, seed=2).blocks[0].position
  rope = models.create(tiny('rope', num_layers=1).model, seed=2).blocks[0].position
  nnx.update(fox, nnx.state(layer.second))
  x = jax.random.normal(jax.random.key(1), (2, 9, config.model.d_model))
  q, k = (jax.random.normal(jax.random.key(s), (2, 9, 4, 8)) for s in (2, 3))
  pos = jnp.broadcast_to(jnp.arange(9), (2, 9))
  ctx = layer.prepare(x, pos, model.position())
  got_q, got_k = layer.rotate(q, k, pos, pos, ctx)
  want_q, want_k = rope.rotate(q, k, pos, pos, rope.prepare(x, pos, None))
  np.testing.assert_array_equal(got_q, want_q)
  np.testing.assert_array_equal(got_k, want_k)
  np.testing.assert_array_equal(layer.logits_bias(q, k, pos, pos, None, ctx),
                                fox.logits_bias(q, k, pos, pos, None, fox.prepare(x, pos, None)))
  assert positions.scheme('rope+fox').fields() == ('rope', 'fox')
  caps = positions.capabilities('rope+fox')
  assert caps.rotary and caps.causal_only and caps.logits_term and not caps.bias_only


@pytest.mark.parametrize('kind', ['fox', 'rope+fox'])
def test_the_cache_continues_the_gates_sums_across_calls(kind):
  """Prefill 5 tokens, then decode 1 and 3 at a time: every step's logits equal the full pass
  over the same prefix (the cache keeps each slot's cumulative gate sum)."""
  config = tiny(kind)
  config.model.position.fox.gate_bias_init = 0.5
  model = models.create(config.model, seed=4)
  assert model.init_cache(2, 16)['layers'][0]['position'] is not None
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 12)))
  kinds.assert_decoding_equals_full_pass(model, tokens, (5, 1, 3, 3))


def test_gates_that_never_close_give_the_scheme_without_fox():
  """With every gate at 1 (log f = 0) the bias vanishes: rope+fox gives rope's logits."""
  combined = models.create(tiny('rope+fox').model, seed=4)
  rope = models.create(tiny('rope').model, seed=4)
  for block, plain in zip(combined.blocks, rope.blocks):
    block.position.second.gate_kernel.value = jnp.zeros_like(block.position.second.gate_kernel[...])
    block.position.second.gate_bias.value = jnp.full_like(block.position.second.gate_bias[...], 30.0)
    nnx.update(plain, nnx.state(block, nnx.Not(nnx.PathContains('position'))))
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 10)))
  pos = jnp.broadcast_to(jnp.arange(10), (2, 10))
  nnx.update(rope, nnx.state(combined, nnx.Not(nnx.PathContains('position'))))
  np.testing.assert_allclose(combined(tokens, pos, jnp.ones_like(tokens)),
                             rope(tokens, pos, jnp.ones_like(tokens)), atol=1e-5)


@pytest.mark.parametrize('kind,change,match', [
    ('fox', {'type': 'mlm'}, 'causal attention only'),
    ('rope+fox', {'type': 'mlm'}, 'causal attention only'),
    ('fox+rope', {}, r'A\+B with B one of \[.*fox'),
    ('fox+fox', {}, 'is itself a bias only'),
    ('rope+fox', {'attention': {'kind': 'favor', 'num_features': 16, 'chunk': 8,
                                'redraw_interval': 0, 'rope_mode': 'qk'}}, 'favor'),
])
def test_bad_settings_are_refused_naming_the_field(kind, change, match):
  config = tiny()
  if change.get('type') == 'mlm':
    config = test_config.get_config('mlm')
  config.model.position.kind = kind
  config.model.update({k: v for k, v in change.items() if k != 'type'})
  with pytest.raises(errors.ConfigError, match=match):
    resolve.validate(config)


def test_options_of_a_combined_kinds_parts_are_its_own():
  """rope+fox reads rope's and fox's options; another kind's changed options are refused."""
  config = tiny('rope+fox')
  config.model.position.rope.base = 500.0
  config.model.position.fox.gate_bias_init = 2.0
  resolve.validate(config)
  config = tiny('rope+fox')
  config.model.position.t5.num_buckets = 8
  with pytest.raises(errors.ConfigError, match='config.model.position.t5'):
    resolve.validate(config)
