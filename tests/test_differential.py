"""Differential attention (attention.differential): half the heads, each the difference of two
softmax maps over values of twice the head width, against the paper's formula in float64."""

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from roformer import attention
from roformer import errors
from roformer import flops
from roformer import models
from roformer import resolve
from roformer.attention_options import differential


def _config(kind='rope', **model):
  config = kinds.tiny_config(kind, dropout=0.0, **model)
  config.model.attention.differential = True
  return config


def _softmax(x):
  x = np.exp(x - x.max(-1, keepdims=True))
  return x / x.sum(-1, keepdims=True)


def reference(q, k, v, mask, lq1, lk1, lq2, lk2, scale, layer):
  """The paper's differential heads in float64, for q, k, v [batch, L, heads, d] split as
  heads 2i, 2i + 1 = head i's (Q1, K1), (Q2, K2) and V = [v_2i, v_2i+1], and the layer's
  lambda vectors [d]: [batch, L, heads/2, 2d]."""
  init = 0.8 - 0.6 * np.exp(-0.3 * layer)  # The paper's l - 1 = layer (0-based).
  b, length, heads, d = q.shape
  out = np.zeros((b, length, heads // 2, 2 * d))
  for i in range(heads // 2):
    maps = []
    for h in (2 * i, 2 * i + 1):
      logits = np.einsum('bqd,bkd->bqk', q[:, :, h], k[:, :, h]) / np.sqrt(d)
      maps.append(_softmax(np.where(mask, logits, -1e30)))  # Padding rows: uniform.
    lam = np.exp(lq1 @ lk1) - np.exp(lq2 @ lk2) + init  # One scalar for the layer.
    values = np.concatenate([v[:, :, 2 * i], v[:, :, 2 * i + 1]], axis=-1)
    heads_out = np.einsum('bqk,bkd->bqd', maps[0] - lam * maps[1], values)
    rms = np.sqrt(np.mean(heads_out ** 2, axis=-1, keepdims=True) + 1e-5)
    out[:, :, i] = heads_out / rms * scale * (1 - init)
  return out


@pytest.mark.parametrize('layer', [0, 3])
@pytest.mark.parametrize('causal_block', [0, 2])
def test_differential_heads_equal_the_float64_formula(layer, causal_block):
  rng = np.random.default_rng(0)
  q, k, v = (rng.normal(size=(2, 6, 4, 8)) for _ in range(3))
  lq1, lk1, lq2, lk2 = (rng.normal(size=8) * 0.3 for _ in range(4))
  scale = rng.uniform(0.5, 1.5, 16)
  seg = np.array([[1] * 6, [1] * 4 + [0] * 2])
  mask = np.asarray(attention.make_mask(jnp.asarray(seg), jnp.asarray(seg), causal=True))[:, 0]
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  out, _ = attention.attend(f32(q), f32(k), differential.paired_values(f32(v)),
                            jnp.asarray(mask[:, None]), return_probs=False,
                            causal_block=causal_block)
  init = differential.lambda_init(layer)
  lam = differential.lambdas(f32(lq1), f32(lk1), f32(lq2), f32(lk2), init)
  got = np.asarray(differential.combine(out, lam, init, f32(scale)))
  want = reference(q, k, v, mask, lq1, lk1, lq2, lk2, scale, layer)
  real = seg > 0
  np.testing.assert_allclose(got[real], want[real], atol=2e-5, rtol=1e-4)


def test_a_layer_scales_by_its_own_lambda_init_and_the_scan_equals_the_loop():
  """Layer l's heads are scaled by 1 - lambda_init(l): the second layer's output projection
  sees the formula at layer 1 (not 0), in the loop and in the scanned stack alike."""
  outs = []
  for scan in (False, True):
    config = _config('none', num_layers=2, scan_layers=scan)
    model = kinds.Compiled(models.create(config.model, seed=1))
    tokens = jnp.asarray(np.random.default_rng(9).integers(5, 50, (1, 6)))
    outs.append(np.asarray(model(tokens, jnp.arange(6)[None], jnp.ones_like(tokens))))
  np.testing.assert_allclose(outs[0], outs[1], atol=1e-5)
  model = models.create(_config('none', num_layers=2).model, seed=1)
  block = model.blocks[1]
  x = jnp.asarray(np.random.default_rng(2).normal(size=(1, 5, 32)), jnp.float32)
  seg = jnp.ones((1, 5), jnp.int32)
  mask = attention.make_mask(seg, seg, causal=True)
  got, _ = block.attn(x, mask, jnp.arange(5)[None], block.position, layer=1)
  qkv = np.asarray(block.attn.qkv(x), np.float64).reshape(1, 5, 12, 8)
  params = [np.asarray(p[...], np.float64) for p in (
      block.attn.lambda_q1, block.attn.lambda_k1, block.attn.lambda_q2, block.attn.lambda_k2,
      block.attn.diff_scale)]
  heads = reference(*np.split(qkv, 3, axis=2), np.asarray(mask)[:, 0], *params, layer=1)
  want = block.attn.out(jnp.asarray(heads.reshape(1, 5, 32), jnp.float32))
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def test_lambda_init_against_hand_values():
  np.testing.assert_allclose(np.asarray(differential.lambda_init(np.arange(3))),
                             [0.2, 0.8 - 0.6 * np.exp(-0.3), 0.8 - 0.6 * np.exp(-0.6)], rtol=1e-6)


def test_the_layer_computes_the_formula_from_its_own_projections():
  """A model's first attention layer (no positions) equals its output projection applied to
  the float64 formula on the layer's own q, k, v and lambda vectors."""
  model = models.create(_config('none').model, seed=1)
  attn = model.blocks[0].attn
  x = jnp.asarray(np.random.default_rng(2).normal(size=(2, 5, 32)), jnp.float32)
  seg = jnp.ones((2, 5), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(5), (2, 5))
  mask = attention.make_mask(seg, seg, causal=True)
  got, _ = attn(x, mask, pos, model.blocks[0].position, segments=seg, layer=0)
  qkv = np.asarray(attn.qkv(x), np.float64).reshape(2, 5, 12, 8)
  q, k, v = np.split(qkv, 3, axis=2)
  params = [np.asarray(p[...], np.float64) for p in
            (attn.lambda_q1, attn.lambda_k1, attn.lambda_q2, attn.lambda_k2, attn.diff_scale)]
  heads = reference(q, k, v, np.asarray(mask)[:, 0], *params, layer=0)
  want = attn.out(jnp.asarray(heads.reshape(2, 5, 32), jnp.float32))
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def test_the_parameter_count_grows_only_by_the_lambdas_and_the_norm():
  plain = kinds.tiny_config('rope', dropout=0.0).model
  diff = _config('rope').model
  d, heads, layers = plain.d_model, plain.num_heads, plain.num_layers
  head = d // heads
  extra = layers * (4 * head + 2 * head)  # The lambda vectors and the norm's scale.
  assert models.num_parameters(diff) == models.num_parameters(plain) + extra


def test_with_rope_the_output_depends_only_on_relative_positions():
  model = models.create(_config('rope').model, seed=3)
  tokens = jnp.asarray(np.random.default_rng(4).integers(5, 50, (1, 7)))
  run = nnx.jit(lambda m, p: m(tokens, p, jnp.ones_like(tokens)))
  base = np.asarray(run(model, jnp.arange(7)[None]))
  np.testing.assert_allclose(np.asarray(run(model, 11 + jnp.arange(7)[None])), base, atol=2e-4)


@pytest.mark.parametrize('kind', ['rope'] + [pytest.param(k, marks=pytest.mark.slow)
                                             for k in ('none', 'alibi', 'pope')])
def test_decoding_a_differential_model_with_the_cache_equals_the_full_pass(kind):
  tokens = jnp.asarray(np.random.default_rng(5).integers(5, 50, (2, 9)))
  kinds.assert_decoding_equals_full_pass(models.create(_config(kind).model, seed=6), tokens,
                                         (4, 1, 1, 3))


def test_flops_count_the_values_weighted_per_map():
  plain = kinds.tiny_config('rope').model
  diff = _config('rope').model
  assert (flops.attention_flops_per_token(diff, 64, True)
          == 1.5 * flops.attention_flops_per_token(plain, 64, True))


@pytest.mark.parametrize('fields,message', [
    ({'model.num_heads': 5, 'model.d_model': 40}, 'num_heads=5 is odd'),
    ({'model.position.kind': 'shaw'}, 'add a value term'),
    ({'model.attention.kind': 'favor'}, "attention.kind='favor' has no softmax"),
    ({'model.attention_impl': 'xla'}, 'runs on the einsum path'),
])
def test_bad_pairings_are_refused_in_one_line(fields, message):
  config = _config('rope')
  kinds.set_fields(config, fields)
  with pytest.raises(errors.ConfigError, match=message) as e:
    resolve.validate(config)
  assert '\n' not in str(e.value) and 'differential' in str(e.value)


@pytest.mark.slow  # The formula tests above cover the same code; this one differentiates it.
def test_a_differential_model_trains_its_lambdas():
  model = models.create(_config('rope').model, seed=7)
  tokens = jnp.asarray(np.random.default_rng(8).integers(5, 50, (2, 8)))
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def loss(params):
    logits = nnx.merge(graphdef, params, rest)(tokens, jnp.broadcast_to(jnp.arange(8), (2, 8)),
                                                jnp.ones_like(tokens))
    return jnp.mean(jax.nn.log_softmax(logits)[..., 7])

  grads = nnx.to_flat_state(jax.grad(loss)(params))
  lam = [np.asarray(g[...]) for path, g in grads if 'lambda_q1' in path or 'lambda_k2' in path]
  assert len(lam) == 4 and all(np.abs(g).max() > 0 for g in lam)
