"""Gemma 2's logit soft-capping and query scale: `attention.softcap` (each attention logit l ->
c tanh(l / c)), `attention.logit_scale` (q.k / sqrt(logit_scale_dim) in place of sqrt(head_dim))
and `model.logits_softcap` (the output logits capped), each against its formula in float64, on
every path that forms the logits (the scheme's bias, a scheme that computes its own logits, a
distance remap, the cache), and the chunked cross-entropy against the whole one."""

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from roformer import attention
from roformer import attention_options
from roformer import errors
from roformer import losses
from roformer import models
from roformer import resolve
from roformer import tasks


def _layer_inputs(config, seed, length=12):
  return kinds.layer_inputs(models.create(config.model, seed=0), seed, length)


_bias = kinds.scheme_bias


@pytest.mark.parametrize('softcap,logit_scale,ssmax,impl', [
    (True, False, False, 'einsum'), (False, True, False, 'xla'), (True, True, True, 'einsum'),
    (True, True, False, 'auto')])
def test_the_layer_is_the_formula(softcap, logit_scale, ssmax, impl):
  """ALiBi's bias and packed segments; a cap of 0.4 that moves most logits, and a scale width
  of 5 for heads 8 wide. Each option changes the output: the formula without it is another."""
  config = kinds.tiny_config('alibi', num_layers=1, attention_impl=impl)
  config.model.attention.update(softcap=softcap, logit_scale=logit_scale, ssmax=ssmax)
  config.model.attention.update({**({'softcap_value': 0.4} if softcap else {}),
                                 **({'logit_scale_dim': 5} if logit_scale else {})})
  resolve.validate(config)
  attn, layer, x, pos, mask = _layer_inputs(config, seed=0)
  assert attn.head_dim == 8
  out = np.asarray(attn(x, mask, pos, layer)[0])
  bias = _bias(attn, layer, x, pos, mask)
  settings = {'softcap': 0.4 if softcap else None, 'scale_dim': 5 if logit_scale else None,
              'ssmax': ssmax}
  want = kinds.attention_formula(attn, x, mask, bias, **settings)
  np.testing.assert_allclose(out, want, rtol=2e-4, atol=2e-5)
  for field in ('softcap', 'scale_dim'):
    if settings[field]:
      other = kinds.attention_formula(attn, x, mask, bias, **{**settings, field: None})
      assert np.abs(other - want).max() > 1e-3


def test_a_scheme_that_computes_its_own_logits_is_capped_after_them():
  """PoPE forms its logits itself: the layer is softmax(c tanh(logits / c)) over them, its
  values and the output projection, written out in float64 from the scheme's logits."""
  config = kinds.tiny_config('pope', num_layers=1, attention_impl='einsum')
  config.model.attention.update(softcap=True, softcap_value=0.3)
  resolve.validate(config)
  attn, layer, x, pos, mask = _layer_inputs(config, seed=1, length=9)
  q, k, v = kinds.float64_qkv(attn, x)
  logits = layer.logits(jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32), pos, pos,
                        mask, layer.prepare(x, pos, None))
  want = kinds.float64_softmax_layer(attn, logits, v, mask, softcap=0.3)
  np.testing.assert_allclose(np.asarray(attn(x, mask, pos, layer)[0]), want, rtol=2e-4,
                             atol=2e-5)


def test_dapes_logits_are_capped_after_its_mlp():
  """DAPE forms the logits (q.k/sqrt(d) + ALiBi's bias + its MLP over both): the layer is
  softmax(c tanh(logits / c)) over them, written out in float64 from DAPE's logits."""
  config = kinds.tiny_config('alibi', num_layers=1, attention_impl='einsum')
  config.model.attention.update(dape=True, softcap=True, softcap_value=0.3)
  resolve.validate(config)
  attn, layer, x, pos, mask = _layer_inputs(config, seed=4, length=9)
  q, k, v = kinds.float64_qkv(attn, x)
  scaled = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(attn.head_dim)
  logits = attention_options.OPTIONS['dape'].logits(
      attn, jnp.asarray(scaled, jnp.float32),
      jnp.asarray(_bias(attn, layer, x, pos, mask), jnp.float32))
  out = np.asarray(attn(x, mask, pos, layer)[0])
  layer_of = lambda cap: kinds.float64_softmax_layer(attn, logits, v, mask, softcap=cap)
  np.testing.assert_allclose(out, layer_of(0.3), rtol=2e-4, atol=2e-5)
  # The cap binds: a cap too wide to touch the logits gives another output.
  assert np.abs(out - layer_of(1e6)).max() > 1e-3


def _lm(kind='rope', seed=4, num_layers=2, **fields):
  config = kinds.tiny_config(kind, dropout=0.0, num_layers=num_layers)
  attention_fields = {k: v for k, v in fields.items() if k in config.model.attention}
  config.model.attention.update(attention_fields)
  config.model.update({k: v for k, v in fields.items() if k not in attention_fields})
  resolve.validate(config)
  return config, models.create(config.model, seed=seed)


def _full(model, tokens):
  pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  return np.asarray(_forward(model, tokens, pos, jnp.ones_like(tokens)))


@nnx.jit
def _forward(model, tokens, pos, segments):
  return model(tokens, pos, segments)


def test_a_remap_that_moves_no_distance_keeps_the_capped_model():
  """ReRoPE with a window past the row is RoPE itself: with the cap on, the remap's path (which
  forms RoPE's logits itself, whole or over causal blocks of 4 queries) gives the plain path's
  logits, and a cap that binds changes them."""
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 14)))
  capped = dict(softcap=True, softcap_value=0.2)
  config, plain = _lm(**capped)
  for rows in (0, 4):  # The remap's whole matrix, and its causal blocks.
    config.model.update(causal_block=rows)
    config.model.position.rope.remap.update(method='rerope', window=14)
    resolve.validate(config)
    remapped = models.create(config.model, seed=4)
    np.testing.assert_allclose(_full(remapped, tokens), _full(plain, tokens), atol=1e-5)
  _, uncapped = _lm()
  assert np.abs(_full(uncapped, tokens) - _full(plain, tokens)).max() > 1e-3


def test_capped_attention_over_causal_blocks_equals_the_whole_matrix():
  """Queries in blocks of 4 (each over the keys up to its last row, from its window's first),
  with packed documents and a 5-token window: the logits of the whole [L, L] capped matrix."""
  tokens = jnp.asarray(np.random.default_rng(7).integers(5, 50, (2, 15)))
  segments = jnp.asarray([[1] * 15, [1] * 6 + [2] * 9])
  pos = jnp.asarray([list(range(15)), list(range(6)) + list(range(9))])
  got = {}
  for rows in (0, 4):
    _, model = _lm(softcap=True, softcap_value=0.3, causal_block=rows, layer_windows=(5, 0))
    got[rows] = np.asarray(_forward(model, tokens, pos, segments))
  np.testing.assert_allclose(got[4], got[0], rtol=1e-5, atol=1e-5)


def test_capped_attention_over_causal_blocks_holds_one_blocks_logits_at_a_time():
  """The whole capped matrix holds its [heads, L, L] logits; over causal blocks of 64 queries at
  L = 1024, the compiled forward pass needs less scratch memory than those logits alone."""
  tokens, pos = jnp.ones((1, 1024), jnp.int32), jnp.arange(1024)[None]
  temp = {}
  for rows in (0, 64):
    config, model = _lm(softcap=True, causal_block=rows, num_layers=1)
    graph, state = nnx.split(model)
    forward = lambda state, t, p: nnx.merge(graph, state)(t, p, jnp.ones_like(t))
    compiled = jax.jit(forward).lower(state, tokens, pos).compile()
    temp[rows] = compiled.memory_analysis().temp_size_in_bytes
  logits = config.model.num_heads * 1024 ** 2 * 4
  assert temp[0] >= logits > temp[64], temp


def test_the_cache_equals_the_full_pass_with_every_cap():
  _, model = _lm(softcap=True, softcap_value=0.5, logit_scale=True, logit_scale_dim=3,
                 logits_softcap=1.5)
  tokens = jnp.asarray(np.random.default_rng(1).integers(5, 50, (2, 10)))
  kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 5), max_len=12)


def test_the_output_logits_are_the_uncapped_ones_through_tanh():
  """The same parameters with model.logits_softcap 0 and 1.5: c tanh(l / c) of the first's
  logits in float64, for the causal LM and the masked LM (whose output bias is added first)."""
  tokens = jnp.asarray(np.random.default_rng(2).integers(5, 50, (2, 9)))
  _, raw = _lm()
  _, capped = _lm(logits_softcap=1.5)
  want = 1.5 * np.tanh(np.asarray(_full(raw, tokens), np.float64) / 1.5)
  np.testing.assert_allclose(_full(capped, tokens), want, rtol=1e-5, atol=1e-6)
  assert np.abs(_full(raw, tokens)).max() > 3  # The cap binds.
  hidden = jnp.asarray(np.random.default_rng(3).normal(size=(2, 9, 32)), jnp.float32)
  bias = np.linspace(-2.0, 2.0, 50)
  config = kinds.tiny_config('rope', type='mlm', logits_softcap=1.5)
  model = models.create(config.model, seed=0)
  model.output_bias.value = jnp.asarray(bias, jnp.float32)
  # The tied output layer's own logits (no bias, no cap) plus the bias, through tanh.
  raw = np.asarray(model.embed.attend(model.transform(hidden)), np.float64) * model.logits_scale
  np.testing.assert_allclose(model.predict(hidden), 1.5 * np.tanh((raw + bias) / 1.5),
                             rtol=1e-5, atol=1e-6)
  assert np.abs(raw + bias).max() > 1.5  # The cap binds.


def _reference_sums(hidden, embedding, targets, weights, scale, cap, smoothing, bias=0.0):
  logits = np.asarray(hidden, np.float64) @ np.asarray(embedding, np.float64).T * scale + bias
  logits = cap * np.tanh(logits / cap)
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  ce = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
  objective = (1 - smoothing) * ce - smoothing * logp.mean(-1)
  return (objective * weights).sum(), (ce * weights).sum()


@pytest.mark.parametrize('smoothing,with_bias', [(0.0, False), (0.1, True)])
def test_the_chunked_loss_of_capped_logits_and_its_gradients(smoothing, with_bias):
  """Chunks of 4 over 10 positions (the last padded): the sums against float64, and the
  gradients against plain autodiff of the whole [tokens, vocabulary] formula."""
  rng = np.random.default_rng(5)
  hidden = jnp.asarray(rng.normal(size=(2, 10, 8)), jnp.float32)
  embedding = jnp.asarray(rng.normal(size=(11, 8)), jnp.float32)
  bias = jnp.asarray(rng.normal(size=(11,)), jnp.float32) if with_bias else None
  targets = jnp.asarray(rng.integers(0, 11, (2, 10)), jnp.int32)
  weights = jnp.asarray(rng.integers(0, 2, (2, 10)), jnp.float32)
  scale, cap = 0.7, 1.5

  def chunked(hidden, embedding, bias):
    sums = losses.chunked_token_sums(hidden, embedding, targets, weights, scale=scale,
                                     label_smoothing=smoothing, chunk=4, bias=bias, softcap=cap)
    return sums['objective_sum'] + 2 * sums['loss_sum'], sums

  def whole(hidden, embedding, bias):
    logits = attention.soft_capped(hidden @ embedding.T * scale + (0.0 if bias is None else bias),
                               cap)
    sums = tasks.base.token_sums(logits, targets, weights, smoothing)
    return sums['objective_sum'] + 2 * sums['loss_sum'], sums

  (_, sums), grads = jax.value_and_grad(chunked, argnums=(0, 1, 2), has_aux=True)(
      hidden, embedding, bias)
  want = _reference_sums(hidden, embedding, np.asarray(targets), np.asarray(weights), scale,
                         cap, smoothing, 0.0 if bias is None else np.asarray(bias, np.float64))
  np.testing.assert_allclose([sums['objective_sum'], sums['loss_sum']], want, rtol=1e-5)
  (_, whole_sums), want_grads = jax.value_and_grad(whole, argnums=(0, 1, 2), has_aux=True)(
      hidden, embedding, bias)
  assert sums['correct'] == whole_sums['correct']
  for got, expected in zip(grads, want_grads):
    if expected is not None:
      np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_the_task_passes_the_cap_to_the_chunked_loss():
  """A causal LM's loss in chunks of 4 equals its loss from the whole logits."""
  config, model = _lm(logits_softcap=1.2, loss_chunk=4)
  tokens = np.random.default_rng(6).integers(5, 50, (2, 11)).astype(np.int32)
  batch = {'inputs': tokens[:, :-1], 'targets': tokens[:, 1:]}
  ones = np.ones_like(batch['inputs'])
  batch.update(inputs_segment_ids=ones, targets_segment_ids=ones,
               inputs_positions=np.cumsum(ones, 1) - 1, targets_positions=np.cumsum(ones, 1) - 1)
  batch = {k: jnp.asarray(v) for k, v in batch.items()}
  task = tasks.for_config(config)
  assert task.loss_chunk == 4
  chunked = task.sums(model, batch)
  whole = task.logits_and_sums(model, batch)[1]
  for name in ('loss_sum', 'correct'):
    np.testing.assert_allclose(chunked[name], whole[name], rtol=1e-5)


def test_the_masked_lm_passes_the_cap_and_its_bias_to_the_chunked_loss():
  """A masked LM with an output bias and a cap that binds: its loss in chunks of 4 positions
  equals its loss from the whole logits (the same masks: an evaluation's fixed key)."""
  from configs import test as test_config  # pylint: disable=g-import-not-at-top
  sums = {}
  for chunk, cap in ((0, 0.8), (4, 0.8), (4, 0.0)):
    config = test_config.get_config('mlm')
    config.model.update(vocab_size=50, logits_softcap=cap, loss_chunk=chunk, dropout=0.0)
    config.data.update(vocab_size=50, max_predictions=0)
    resolve.validate(config)
    model = models.create(config.model, seed=2)
    model.output_bias.value = jnp.linspace(-2.0, 2.0, 50)
    tokens = np.random.default_rng(8).integers(5, 49, (2, 16)).astype(np.int32)
    ones = np.ones_like(tokens)
    batch = {'inputs': jnp.asarray(tokens), 'inputs_segment_ids': jnp.asarray(ones),
             'inputs_positions': jnp.asarray(np.cumsum(ones, 1) - 1)}
    sums[chunk, cap] = tasks.for_config(config).sums(model, batch)
  assert sums[4, 0.8]['weight'] > 0
  for name in ('loss_sum', 'correct', 'weight'):
    np.testing.assert_allclose(sums[4, 0.8][name], sums[0, 0.8][name], rtol=1e-5)
  # The cap binds: without it the same chunks give another loss.
  assert abs(float(sums[4, 0.0]['loss_sum']) - float(sums[4, 0.8]['loss_sum'])) > 1e-3


def test_the_softcap_runs_on_the_einsum_path_only():
  config = kinds.tiny_config('rope', attention_impl='xla')
  config.model.attention.update(softcap=True)
  with pytest.raises(errors.ConfigError, match='attention.softcap=True.*einsum path'):
    resolve.validate(config)


def test_a_classifier_refuses_the_output_cap():
  from configs import classify  # pylint: disable=g-import-not-at-top
  config = classify.get_config()
  config.model.logits_softcap = 30.0
  with pytest.raises(errors.ConfigError, match="logits_softcap=30.0 is read only by models "
                     "with outputs over the vocabulary.*model.type='classifier'"):
    resolve.validate(config)
