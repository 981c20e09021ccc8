"""Multi-head latent attention (roformer/latent_attention.py) against its formula written out in
float64 as DeepSeek's class lays it out (the rotary dimensions last in each head), its relative
property, its cache, its kernels, its FLOPs and its refusals."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer import errors
from roformer import flops
from roformer import latent_attention
from roformer import models
from roformer import resolve
from tests import kinds

HEAD, ROPE, VALUE = 12, 4, 6


def _config(kind='rope', q_rank=12, layout='half', value=VALUE, **model):
  config = kinds.tiny_config(kind, num_layers=2, head_dim=HEAD, biases='none', init='normal',
                             init_std=0.3, **model)
  config.model.mla.update(kv_rank=16, q_rank=q_rank, rope_dim=ROPE, v_head_dim=value)
  if kind == 'rope':
    config.model.position.rope.update(fraction=ROPE / HEAD, layout=layout)
  resolve.validate(config)
  return config


def _rotate(x, pos, layout):
  """RoPE on x [..., len, p] at positions pos [len]: pairs (i, i + p/2) or (2i, 2i + 1) at
  frequency 10000^(-2i/p), in float64."""
  p = x.shape[-1]
  angle = pos[:, None] * 10000.0 ** (-np.arange(0, p, 2) / p)
  cos, sin = np.cos(angle), np.sin(angle)
  a, b = (x[..., :p // 2], x[..., p // 2:]) if layout == 'half' else (x[..., 0::2],
                                                                       x[..., 1::2])
  ra, rb = a * cos - b * sin, b * cos + a * sin
  if layout == 'half':
    return np.concatenate([ra, rb], -1)
  return np.stack([ra, rb], -1).reshape(x.shape)


def _float64(attn, x, pos, mask, layout):
  """DeepSeek's MLA in float64: q = RMSNorm(x W_qa) W_qb per head [q_C | q_R], the latent
  [c | k_R] = x W_a, [k_C | v] = RMSNorm(c) W_b per head, RoPE on q_R and the shared k_R, logits
  (q_C.k_C + q_R.k_R) / sqrt(head_dim) under the mask, then the output projection."""
  p = attn.projections
  w = lambda m: np.asarray(m.kernel[...], np.float64)
  rms = lambda v, s: v / np.sqrt((v ** 2).mean(-1, keepdims=True) + 1e-6) * np.asarray(
      s.scale[...], np.float64)
  x = np.asarray(x, np.float64)
  b, length, _ = x.shape
  h, nope = attn.num_heads, HEAD - ROPE
  q = (rms(x @ w(p.q_a), p.q_norm) @ w(p.q_b) if p.q_rank else x @ w(p.q)).reshape(
      b, length, h, HEAD)
  a = x @ w(p.kv_a)
  latent, k_rope = a[..., :16], a[..., 16:]
  kv = (rms(latent, p.kv_norm) @ w(p.kv_b)).reshape(b, length, h, -1)
  k_own, v = kv[..., :nope], kv[..., nope:]
  out = np.zeros((b, length, h, v.shape[-1]))
  for row in range(b):
    positions = np.asarray(pos[row], np.float64)
    q_rot = _rotate(q[row, :, :, nope:].transpose(1, 0, 2), positions, layout)  # [h, len, p]
    k_rot = _rotate(k_rope[row], positions, layout)  # [len, p], every head's.
    logits = (np.einsum('qhd,khd->hqk', q[row, :, :, :nope], k_own[row])
              + np.einsum('hqd,kd->hqk', q_rot, k_rot)) / np.sqrt(HEAD)
    logits = np.where(np.asarray(mask[row]), logits, -np.inf)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out[row] = np.einsum('hqk,khd->qhd', probs, v[row])
  return out.reshape(b, length, -1) @ w(attn.out)


@pytest.mark.parametrize('q_rank,layout', [(12, 'half'), (0, 'interleaved')])
def test_latent_attention_is_its_formula_in_float64(q_rank, layout):
  """With a query latent or one query projection, RoPE on halves or on interleaved pairs (of
  the decoupled dimensions alone), over packed rows."""
  model = models.create(_config(q_rank=q_rank, layout=layout).model, seed=1)
  attn, layer, x, pos, mask = kinds.layer_inputs(model, seed=2)
  out, _ = attn(x, mask, pos, layer, model.position())
  np.testing.assert_allclose(out, _float64(attn, x, pos, mask, layout), rtol=2e-5, atol=2e-5)


def test_latent_attention_logits_depend_only_on_relative_positions():
  """Shifting every position by 37 leaves the outputs as they were: RoPE on the decoupled key
  dimensions keeps q.k a function of m - n."""
  model = models.create(_config().model, seed=3)
  attn, layer, x, pos, mask = kinds.layer_inputs(model, seed=4)
  np.testing.assert_allclose(attn(x, mask, pos + 37, layer, model.position())[0],
                             attn(x, mask, pos, layer, model.position())[0], rtol=1e-4,
                             atol=1e-5)


@pytest.mark.parametrize('kind,q_rank', [('rope', 12), ('rope', 0), ('alibi', 12)])
def test_latent_attention_decodes_with_its_cache_as_its_full_pass(kind, q_rank):
  """The cache holds each head's keys (head_dim wide) and values (v_head_dim wide)."""
  model = models.create(_config(kind, q_rank=q_rank).model, seed=5)
  tokens = jnp.asarray(np.random.default_rng(6).integers(5, 50, (2, 9)), jnp.int32)
  cache = kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 4))
  assert cache['layers'][0]['k'].shape[-1] == HEAD and cache['layers'][0]['v'].shape[-1] == VALUE


@pytest.mark.parametrize('kind', kinds.by_capabilities(kinds.with_capability('latent_cache')
                                                     + ('rope+fox',)))
def test_the_latent_cache_keeps_rope_dim_plus_kv_rank_numbers_and_decodes_as_the_full_pass(kind):
  """Every kind that declares the absorbed form (the first of each set of equal capabilities
  by default, the others under -m slow) computes its heads' logits (the full pass runs the
  plain form): one key head of [k_R | c] (4 + 16) and no values of their own, where the
  heads' cache keeps 3 x (12 + 6) numbers a token."""
  config = _config(kind.split('+')[0])
  config.model.position.kind = kind
  config.model.mla.cache = 'latent'
  resolve.validate(config)
  model = models.create(config.model, seed=5)
  tokens = jnp.asarray(np.random.default_rng(6).integers(5, 50, (2, 9)), jnp.int32)
  cache = kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 4), atol=2e-5)
  assert [{k: v.shape for k, v in layer.items() if k != 'position'}
          for layer in cache['layers']] == [{'k': (2, 1, 16, ROPE + 16)}] * 2


def test_the_latent_cache_under_yarn_its_softmax_scale_a_remap_and_a_window():
  """DeepSeek-V3's imported settings (YaRN's attention factor on the rotated dimensions, the
  softmax scale), Self-Extend's remapped distances and a sliding window, in the absorbed form:
  the plain form's logits, with the queries' scale set for the wider heads."""
  config = _config(layer_windows=(5, 0))
  config.model.position.rope.scaling.update(kind='yarn', factor=4.0, original_length=4,
                                            attention_factor_dims='rotated')
  config.model.position.rope.remap.update(method='self_extend', group_size=2, neighbor_window=3)
  config.model.attention.update(softmax_scale=True, softmax_scale_value=0.4)
  config.model.mla.cache = 'latent'
  resolve.validate(config)
  model = models.create(config.model, seed=7)
  tokens = jnp.asarray(np.random.default_rng(8).integers(5, 50, (2, 11)), jnp.int32)
  kinds.assert_decoding_equals_full_pass(model, tokens, (6, 1, 1, 3), atol=2e-5)


def test_the_latent_cache_under_yarn_with_its_factor_on_every_dimension():
  """YaRN's attention factor on every dimension of q and k (its 'all'): the absorbed form's
  values are the latent as projected, never scaled with the key that carries it, so the cached
  key is rotated at each step rather than as it is written."""
  config = _config()
  config.model.position.rope.scaling.update(kind='yarn', factor=4.0, original_length=4,
                                            attention_factor_dims='all')
  config.model.mla.cache = 'latent'
  resolve.validate(config)
  model = models.create(config.model, seed=7)
  tokens = jnp.asarray(np.random.default_rng(8).integers(5, 50, (2, 9)), jnp.int32)
  kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 4), atol=2e-5)


def test_the_latent_cache_decodes_on_xlas_kernel_which_stands_in_for_cudnns():
  """The absorbed form's one key head and narrower values through jax.nn.dot_product_attention
  (XLA's implementation): the full pass's logits. Its heads (rope_dim + kv_rank wide, 576 in
  DeepSeek-V3) are wider than cuDNN's flash kernels take, so a layer on cuDNN decodes the latent
  cache on XLA's kernel (the attribute: no GPU here)."""
  config = _config(attention_impl='xla')
  config.model.mla.cache = 'latent'
  resolve.validate(config)
  model = models.create(config.model, seed=5)
  tokens = jnp.asarray(np.random.default_rng(6).integers(5, 50, (2, 9)), jnp.int32)
  kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 4), atol=2e-5)
  config.model.attention_impl = 'cudnn'
  attn = nnx.eval_shape(lambda: models.create(config.model, seed=5)).blocks[0].attn
  assert (attn.unfused_impl, attn.cache_impl) == ('cudnn', 'xla')
  config.model.mla.cache = 'heads'
  attn = nnx.eval_shape(lambda: models.create(config.model, seed=5)).blocks[0].attn
  assert attn.cache_impl == 'cudnn'


@pytest.mark.parametrize('value', [VALUE, 2 * HEAD])
def test_xla_attention_takes_values_narrower_or_wider_than_the_keys(value):
  """jax.nn.dot_product_attention with the narrower of q/k and v widened by zeros: the einsum
  path's outputs, and its gradients with respect to every parameter (through the attention)."""
  config = _config(value=value)
  tokens = jnp.asarray(np.random.default_rng(7).integers(5, 50, (2, 8)), jnp.int32)
  pos, seg = jnp.broadcast_to(jnp.arange(8), (2, 8)), jnp.ones((2, 8), jnp.int32)

  def run(impl):
    config.model.attention_impl = impl
    graphdef, params = nnx.split(models.create(config.model, seed=8))
    logits = lambda p: nnx.merge(graphdef, p)(tokens, pos, seg)
    grads = jax.jit(jax.grad(lambda p: jnp.sum(jnp.tanh(logits(p)))))(params)
    return jax.jit(logits)(params), jax.tree.leaves(grads)
  (einsum, g_einsum), (xla, g_xla) = run('einsum'), run('xla')
  np.testing.assert_allclose(xla, einsum, rtol=1e-4, atol=1e-5)
  for g_x, g_e in zip(g_xla, g_einsum):  # Within 1e-4 of each leaf's largest (float32 sums).
    np.testing.assert_allclose(g_x, g_e, rtol=0, atol=1e-4 * float(np.abs(g_e).max()) + 1e-9)


def test_flops_count_the_latent_projections_and_the_values_width():
  cfg = _config().model
  d, h = cfg.d_model, cfg.num_heads
  projections = (2 * 12 * (d + h * HEAD) + 2 * d * (16 + ROPE)
                 + 2 * 16 * h * (HEAD - ROPE + VALUE) + 2 * h * VALUE * d)
  scores = 2 * 10 * h * (HEAD + VALUE) / 2  # Causal, 10 positions.
  assert latent_attention.projection_flops(cfg) == projections
  cfg.mlp = 'plain'
  plain_mlp = 2 * 2 * d * cfg.d_ff
  assert flops.layer_flops_per_token(cfg, 10, True) == projections + scores + plain_mlp


@pytest.mark.parametrize('fields,named', [
    ({'mla.rope_dim': 3}, 'config.model.mla.rope_dim=3 is not an even number'),
    ({'mla.rope_dim': HEAD}, f'config.model.mla.rope_dim={HEAD} is not an even number below'),
    ({'position.rope.fraction': 0.5}, 'config.model.position.rope.fraction=0.5 rotates 6 '
                                      'dimensions of each head, where multi-head latent'),
    ({'num_kv_heads': 2}, 'config.model.num_kv_heads=2: MLA gives every head'),
    ({'biases': 'attention'}, "config.model.biases='attention' gives attention biases"),
    ({'attention.output_gate': True}, 'config.model.attention.output_gate, which acts on the '
                                      'values'),
    ({'attention.differential': True}, 'config.model.attention.differential, which acts'),
    ({'mla.kv_rank': 0}, 'config.model.mla.q_rank'),
    ({'mla.rope_dim': 0}, 'config.model.mla.rope_dim=0 gives no key dimensions'),
    ({'position.rope.rotate_values': True}, 'which the rotated values'),
    ({'attention_impl': 'pallas'}, "which the attention_impl='pallas'"),
    ({'position.kind': 'shaw'}, "which the position kind 'shaw'"),
    ({'mla.cache': 'latent', 'position.kind': 'cope'},
     "config.model.mla.cache='latent' decodes in MLA's absorbed form (wider query heads, one "
     "key head, the latent as values), where the position kind 'cope'"),
    ({'mla.cache': 'latent', 'attention.qk_norm': True}, 'where the attention.qk_norm, which '
                                                         "acts on each head's keys"),
    ({'mla.cache': 'latent', 'mla.v_head_dim': 0, 'position.rope.rotate_values': True},
     'where the rotated values')])
def test_bad_latent_attention_is_refused_naming_the_field(fields, named):
  """Before anything is built: among them the schemes and kernels that take values as wide as
  the keys (here 6 against 12), and RoPE without shared key dimensions to rotate."""
  config = _config()
  kinds.set_fields(config.model, fields)
  with pytest.raises(errors.ConfigError, match=re.escape(named)):
    resolve.validate(config)


def test_the_deepseek_preset_is_latent_attention_with_a_dense_first_layer_and_its_mixture():
  """configs/lm.py:deepseek: every layer's attention from its latents, RoPE on the rope_dim
  shared dimensions, the first layer's MLP dense and three times an expert's width, the others
  DeepSeek-V3's mixture, the dense layer running before a scan of the others
  (tests/test_scanned.py checks that layout's outputs)."""
  from configs import lm  # pylint: disable=import-outside-toplevel
  from roformer import layers  # pylint: disable=import-outside-toplevel
  from roformer import moe  # pylint: disable=import-outside-toplevel
  cfg = lm.get_config('deepseek')
  cfg.model.update(d_model=64, num_layers=3, vocab_size=50)
  cfg.model.mla.update(kv_rank=16, q_rank=24, rope_dim=4)
  resolve.validate(cfg)
  model = models.create(cfg.model, seed=0)
  assert all(b.attn.latent for b in model.blocks)
  assert model.blocks[0].attn.projections.kv_a.kernel.shape == (64, 16 + 4)
  assert isinstance(model.blocks[0].mlp, layers.GatedMLP)
  assert model.blocks[0].mlp.gate.kernel.shape[-1] == 3 * cfg.model.d_ff
  assert all(isinstance(b.mlp, moe.MixtureOfExperts) for b in model.blocks[1:])
  cfg.model.scan_layers = True
  scanned = nnx.eval_shape(lambda: models.create(cfg.model, seed=0))
  assert (scanned.blocks.first, scanned.blocks.period) == (1, 1)
