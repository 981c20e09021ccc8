"""The block's components (roformer/layers.py, blocks.py, self_attention.py) against their
formulas: RMSNorm, the gated MLP, grouped-query attention, the parallel residual, the biases of
each family, the untied output layer and the initialisations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import lm
from configs import test as test_config
from roformer import errors
from roformer import layers
from roformer import models
from roformer import resolve
from roformer import tasks

TOKENS = jnp.asarray(np.random.default_rng(0).integers(5, 60, (2, 10)), jnp.int32)
POS = jnp.broadcast_to(jnp.arange(10), (2, 10))


def _model_cfg(**fields):
  cfg = test_config.get_config().model
  cfg.vocab_size = 64
  cfg.update(fields)
  return cfg


def _params(module) -> dict:
  return nnx.state(module, nnx.Param).to_pure_dict()


@pytest.mark.parametrize('kind,centred,scaled,bias', [
    ('rms_norm', False, True, False), ('layer_norm', True, True, True),
    ('layer_norm_unbiased', True, True, False), ('layer_norm_nonparametric', True, False, False)])
def test_each_norm_matches_its_float64_formula(kind, centred, scaled, bias):
  """RMSNorm (Llama's: no centring, no bias), LayerNorm, MPT's LayerNorm without a bias, and
  OLMo 1's without a scale or a bias."""
  cfg = _model_cfg(normalization=kind, layer_norm_eps=1e-5)
  norm = layers.norm(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(1)
  scale, shift = rng.normal(size=32) if scaled else 1.0, rng.normal(size=32) if bias else 0.0
  if scaled:
    norm.scale.value = jnp.asarray(scale, jnp.float32)
  if bias:
    norm.bias.value = jnp.asarray(shift, jnp.float32)
  x = np.random.default_rng(2).normal(size=(3, 32)) * 3 + 1
  y = x - x.mean(-1, keepdims=True) if centred else x
  want = y / np.sqrt(np.mean(y * y, -1, keepdims=True) + 1e-5) * scale + shift
  np.testing.assert_allclose(np.asarray(norm(jnp.asarray(x, jnp.float32))), want, rtol=1e-5,
                             atol=1e-6)
  assert set(_params(norm)) == {name for name, has in (('scale', scaled), ('bias', bias)) if has}


def test_gated_mlp_is_down_of_silu_gate_times_up():
  cfg = _model_cfg(mlp='gated', activation='silu', biases='none')
  mlp = layers.mlp(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0))
  p = {k: np.asarray(v['kernel'], np.float64) for k, v in _params(mlp).items()}
  assert set(p) == {'gate', 'up', 'down'} and p['gate'].shape == (32, 64)
  x = np.random.default_rng(3).normal(size=(2, 5, 32))
  gate = x @ p['gate']
  want = (gate / (1 + np.exp(-gate)) * (x @ p['up'])) @ p['down']
  np.testing.assert_allclose(np.asarray(mlp(jnp.asarray(x, jnp.float32))), want, rtol=2e-5,
                             atol=1e-6)


@pytest.mark.parametrize('biases,want', [
    ('all', {'qkv', 'out', 'up', 'down'}), ('attention', {'qkv', 'out'}), ('qkv', {'qkv'}),
    ('mlp', {'up', 'down'}), ('none', set())])
def test_each_bias_setting_gives_exactly_its_layers_a_bias(biases, want):
  model = models.create(_model_cfg(biases=biases), seed=0)
  block = _params(model.blocks[0])
  have = {name for group in ('attn', 'mlp') for name, p in block[group].items()
          if isinstance(p, dict) and 'bias' in p}
  assert have == want


def _kv_expanded(gqa_params: dict, num_heads: int, num_kv: int, head_dim: int) -> dict:
  """The multi-head model's qkv kernel and bias equal to a grouped one's: each key/value head's
  columns repeated for the query heads of its group."""
  out = {}
  for name, array in gqa_params.items():
    a = np.asarray(array)
    q, k, v = np.split(a, [num_heads * head_dim, (num_heads + num_kv) * head_dim], axis=-1)
    grow = lambda t: np.repeat(t.reshape(t.shape[:-1] + (num_kv, head_dim)),
                               num_heads // num_kv, axis=-2).reshape(t.shape[:-1] + (-1,))
    out[name] = np.concatenate([q, grow(k), grow(v)], axis=-1)
  return out


@pytest.mark.parametrize('num_kv_heads', [1, 2])
def test_grouped_query_attention_is_multi_head_attention_with_shared_keys(num_kv_heads):
  """A model with num_kv_heads key/value heads computes what the multi-head model computes
  when each query head's key and value projections are those of its group's head."""
  gqa = models.create(_model_cfg(num_kv_heads=num_kv_heads), seed=0)
  mha = models.create(_model_cfg(), seed=1)
  params = _params(gqa)
  for block in params['blocks'].values():
    assert block['attn']['qkv']['kernel'].shape == (32, (4 + 2 * num_kv_heads) * 8)
    block['attn']['qkv'] = _kv_expanded(block['attn']['qkv'], 4, num_kv_heads, 8)
  nnx.update(mha, nnx.State(params))
  np.testing.assert_allclose(np.asarray(gqa(TOKENS, POS, jnp.ones_like(TOKENS))),
                             np.asarray(mha(TOKENS, POS, jnp.ones_like(TOKENS))), atol=2e-5)


@pytest.mark.parametrize('residual', ['parallel', 'parallel_shared'])
def test_parallel_residual_adds_both_branches_of_the_blocks_input(residual):
  """GPT-NeoX's two norms, or one shared by both branches (Phi-2, GPT-J), whose block then has
  no second norm; each norm's scale drawn away from 1, so that the two would differ."""
  cfg = _model_cfg(residual=residual, num_layers=1)
  model = models.create(cfg, seed=0)
  block = model.blocks[0]
  norms = ('ln_attn',) if residual == 'parallel_shared' else ('ln_attn', 'ln_mlp')
  assert {n for n in _params(block) if n.startswith('ln_')} == set(norms)
  for i, name in enumerate(norms):
    getattr(block, name).scale.value = 1 + 0.5 * jax.random.normal(jax.random.key(i), (32,))
  x = jax.random.normal(jax.random.key(0), (2, 10, 32))
  mask = jnp.tril(jnp.ones((10, 10), bool))[None, None]
  got, _ = block(x, mask, POS, model.position())
  attn, _ = block.attn(block.ln_attn(x), mask, POS, block.position, model.position())
  want = x + attn + block.mlp(getattr(block, norms[-1])(x))
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


@pytest.mark.parametrize('residual,norm', [('sequential', 'pre'), ('sequential', 'sandwich'),
                                           ('sequential', 'post'), ('parallel', 'pre'),
                                           ('parallel_shared', 'pre')])
def test_the_residual_multiplier_scales_each_branchs_output_before_its_sum(residual, norm):
  """model.residual_multiplier (Granite's): x + m f(x) for each branch f, as the block's own
  sublayers compute it by hand; for a post-norm block, norm(x + m f(x))."""
  m = 0.3
  cfg = _model_cfg(residual=residual, norm=norm, num_layers=1, residual_multiplier=m)
  model = models.create(cfg, seed=0)
  block = model.blocks[0]
  x = jax.random.normal(jax.random.key(0), (2, 10, 32))
  mask = jnp.tril(jnp.ones((10, 10), bool))[None, None]
  got, _ = block(x, mask, POS, model.position())
  attn = lambda h: block.attn(h, mask, POS, block.position, model.position())[0]
  if residual != 'sequential':
    h = block.ln_attn(x)
    want = x + m * attn(h) + m * block.mlp(h if residual == 'parallel_shared' else
                                           block.ln_mlp(x))
  elif norm == 'post':
    h = block.ln_attn(x + m * attn(x))
    want = block.ln_mlp(h + m * block.mlp(h))
  else:
    out = (lambda name, y: getattr(block, f'ln_{name}_out')(y)) if norm == 'sandwich' else (
        lambda name, y: y)
    h = x + m * out('attn', attn(block.ln_attn(x)))
    want = h + m * out('mlp', block.mlp(block.ln_mlp(h)))
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
  unscaled, _ = models.create(_model_cfg(residual=residual, norm=norm, num_layers=1),
                              seed=0).blocks[0](x, mask, POS, model.position())
  assert np.abs(np.asarray(unscaled) - np.asarray(got)).max() > 1e-2


@pytest.mark.parametrize('output_bias,multiplier', [(False, 1.0), (True, 1.0), (True, 0.25)])
def test_untied_output_layer_has_its_own_matrix_and_the_chunked_loss_reads_it(output_bias,
                                                                             multiplier):
  """With `model.output_bias` (Phi's), the layer adds its own bias, drawn away from 0 here, and
  with `model.logits_multiplier` (Cohere's logit_scale) the product is scaled before the bias, in
  the full logits and in the chunked loss."""
  cfg = _model_cfg(tie_embeddings=False, init='normal', output_bias=output_bias,
                   logits_multiplier=multiplier)
  model = models.create(cfg, seed=0)
  assert model.unembed.shape == (64, 32) and hasattr(model, 'output_bias') == output_bias
  bias = np.zeros(64)
  if output_bias:
    bias = np.random.default_rng(5).normal(size=64)
    model.output_bias.value = jnp.asarray(bias, jnp.float32)
  hidden = model.hidden(TOKENS, POS, jnp.ones_like(TOKENS))
  want = (np.asarray(hidden, np.float64) @ np.asarray(model.unembed[...], np.float64).T
          * multiplier + bias)
  logits = np.asarray(model(TOKENS, POS, jnp.ones_like(TOKENS)))
  np.testing.assert_allclose(logits, want, rtol=1e-4, atol=1e-5)
  # The training loss (chunked through the output layer) equals the full logits' loss.
  config = test_config.get_config()
  config.model = cfg
  config.model.loss_chunk = 4
  batch = {'inputs': TOKENS, 'targets': jnp.roll(TOKENS, -1, 1), 'inputs_positions': POS,
           'inputs_segment_ids': jnp.ones_like(TOKENS), 'targets_segment_ids': jnp.ones_like(TOKENS)}
  sums = tasks.for_config(config).sums(model, batch)
  logp = np.asarray(jax.nn.log_softmax(jnp.asarray(want), -1))
  nll = -np.take_along_axis(logp, np.asarray(batch['targets'])[..., None], -1)
  np.testing.assert_allclose(float(sums['loss_sum']) / float(sums['weight']), nll.mean(),
                             rtol=1e-5)


def test_tied_output_scale_follows_the_initialisation_times_the_multiplier():
  assert models.create(_model_cfg(), seed=0).logits_scale == pytest.approx(32 ** -0.5)
  assert models.create(_model_cfg(init='normal'), seed=0).logits_scale == 1.0
  scaled = models.create(_model_cfg(logits_multiplier=0.5), seed=0)
  assert (scaled.tied_scale, scaled.logits_scale) == pytest.approx((32 ** -0.5, 0.5 * 32 ** -0.5))


def test_normal_initialisation_draws_each_weight_at_its_std():
  cfg = lm.get_config('llama').model
  cfg.update(vocab_size=4096, num_layers=8)
  model = models.create(cfg, seed=0)
  p = _params(model)
  std = cfg.init_std
  np.testing.assert_allclose(np.std(p['embed']['embedding']), std, rtol=0.02)
  np.testing.assert_allclose(np.std(p['unembed']), std, rtol=0.02)
  block = p['blocks'][0]
  np.testing.assert_allclose(np.std(block['mlp']['up']['kernel']), std, rtol=0.02)
  np.testing.assert_allclose(np.std(block['mlp']['down']['kernel']), std / 4, rtol=0.02)
  np.testing.assert_allclose(np.std(block['attn']['out']['kernel']), std / 4, rtol=0.05)


@pytest.mark.parametrize('fields,message', [
    ({'num_kv_heads': 3}, 'num_kv_heads=3 must divide config.model.num_heads=4'),
    ({'num_kv_heads': 8}, 'num_kv_heads=8 must divide'),
    ({'residual': 'parallel', 'norm': 'post'}, "residual='parallel'"),
    ({'residual': 'parallel_shared', 'norm': 'sandwich'}, "residual='parallel_shared'"),
    ({'type': 'mlm', 'output_bias': True},
     r"config.model.output_bias=True is read only by causal LMs .model.type .causal_lm.., "
     r"and this run .model.type=.mlm."),
    ({'init_std': 0.05}, "init_std=0.05 sets the std of init='normal'"),
    ({'type': 'mlm', 'norm': 'post', 'embedding_norm': True},
     "embedding_norm normalises the embeddings, which norm='post' already does"),
    ({'type': 'mlm', 'tokenizer': 'hf:/models/x'},
     "a pretrained model's own tokenizer.*Fix: causal LMs .model.type=causal_lm."),
])
def test_bad_block_settings_are_named(fields, message):
  config = test_config.get_config('mlm' if fields.get('type') == 'mlm' else 'rope')
  fields = dict(fields)
  if 'tokenizer' in fields:
    config.data.tokenizer = fields.pop('tokenizer')
  config.model.update(fields)
  with pytest.raises(errors.ConfigError, match=message):
    resolve.validate(config)
