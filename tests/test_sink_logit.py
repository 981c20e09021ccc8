"""A sink logit per head (`attention.sink_logit`, gpt-oss): each row's softmax takes one more
logit that weights no value. Against its formula in float64 on every path that forms the
logits (the scheme's bias, a scheme that computes its own logits, a distance remap, causal
blocks, the cache), its gradient against the derivative written out, and its parameter."""

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from roformer import attention
from roformer import models
from roformer import resolve
from roformer import variables

SINKS = np.array([-1.5, 0.0, 0.8, 2.5])  # One per head of configs/test.py (4 heads).


def _layer(kind, seed=0, length=12, **attention_fields):
  config = kinds.tiny_config(kind, num_layers=1, attention_impl='einsum')
  config.model.attention.update(sink_logit=True, **attention_fields)
  resolve.validate(config)
  attn, layer, x, pos, mask = kinds.layer_inputs(models.create(config.model, seed=0), seed,
                                                 length)
  if hasattr(attn, 'sink'):
    attn.sink.value = jnp.asarray(SINKS, jnp.float32)
  return attn, layer, x, pos, mask


_bias = kinds.scheme_bias


@pytest.mark.parametrize('kind', ['alibi', 'none'])
def test_the_layer_is_the_formula(kind):
  """ALiBi's bias with packed segments, and no position signal: each head's softmax has
  exp(s_h) more in its denominator; without it the formula gives another output."""
  attn, layer, x, pos, mask = _layer(kind)
  out = np.asarray(attn(x, mask, pos, layer)[0])
  bias = _bias(attn, layer, x, pos, mask) if kind == 'alibi' else 0.0
  want = kinds.attention_formula(attn, x, mask, bias, sink=SINKS)
  np.testing.assert_allclose(out, want, rtol=2e-4, atol=2e-5)
  assert np.abs(kinds.attention_formula(attn, x, mask, bias) - want).max() > 1e-3


def test_a_fixed_sink_is_no_parameter_and_is_its_value():
  """sink_logit_learned=False: no parameter (nothing to train or decay), and every head's
  sink is sink_logit_init (at 0: softmax plus one)."""
  attn, layer, x, pos, mask = _layer('alibi', sink_logit_learned=False, sink_logit_init=0.6)
  assert not hasattr(attn, 'sink')
  want = kinds.attention_formula(attn, x, mask, _bias(attn, layer, x, pos, mask),
                                 sink=np.full(4, 0.6))
  np.testing.assert_allclose(np.asarray(attn(x, mask, pos, layer)[0]), want, rtol=2e-4,
                             atol=2e-5)


def test_a_learned_sink_is_an_undecayed_parameter_per_head():
  attn, *_ = _layer('rope', sink_logit_init=-0.25)
  model = models.create(kinds.tiny_config('rope').model, seed=0)  # Without it.
  assert attn.sink.value.shape == (4,)
  assert not variables.decays(attn.sink) and variables.axes(attn.sink, 'sink') == (None,)
  assert not hasattr(model.blocks[0].attn, 'sink')


def test_a_scheme_that_computes_its_own_logits_takes_the_sink():
  """PoPE forms its logits itself: the layer is the softmax with the sinks over them."""
  attn, layer, x, pos, mask = _layer('pope', seed=1, length=9)
  q, k, v = kinds.float64_qkv(attn, x)
  logits = layer.logits(jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32), pos, pos,
                        mask, layer.prepare(x, pos, None))
  want = kinds.float64_softmax_layer(attn, logits, v, mask, sink=SINKS)
  np.testing.assert_allclose(np.asarray(attn(x, mask, pos, layer)[0]), want, rtol=2e-4,
                             atol=2e-5)


def test_the_sinks_gradient_is_the_derivative_written_out():
  """d/ds_h of sum(G * out), out = sum_j w_j v_j with w_j = e^l_j / (e^s_h + sum e^l): each
  weight's derivative is -w_j p_h (p_h = e^s_h / that sum, the sink's own weight), so the
  gradient is -sum over rows of p_h (G . out) for head h."""
  rng = np.random.default_rng(3)
  logits = rng.normal(size=(2, 3, 5, 6)) * 2
  v, g = rng.normal(size=(2, 6, 3, 4)), rng.normal(size=(2, 5, 3, 4))
  mask = np.tril(np.ones((5, 6), bool), 1)[None, None]
  sink = np.array([-1.0, 0.5, 3.0])

  def loss(s):
    out, _ = attention.attend_logits(jnp.asarray(logits, jnp.float32), jnp.asarray(v, jnp.float32),
                                     jnp.asarray(mask), s)
    return jnp.sum(out * g)

  grad = np.asarray(jax.grad(loss)(jnp.asarray(sink, jnp.float32)))
  masked = np.where(mask, logits, -np.inf)
  top = np.maximum(masked.max(-1, keepdims=True), sink[None, :, None, None])
  total = np.exp(masked - top).sum(-1, keepdims=True) + np.exp(sink[None, :, None, None] - top)
  weights = np.exp(masked - top) / total
  p_sink = (np.exp(sink[None, :, None, None] - top) / total)[..., 0]  # [b, h, q]
  out = np.einsum('bhqk,bkhd->bqhd', weights, v)
  want = -np.einsum('bhq,bqhd,bqhd->h', p_sink, out, g)
  np.testing.assert_allclose(grad, want, rtol=1e-4, atol=1e-6)
  assert np.abs(want).min() > 1e-3


def _lm(seed=4, **fields):
  config = kinds.tiny_config('rope', dropout=0.0, num_layers=2)
  attention_fields = {k: v for k, v in fields.items() if k in config.model.attention}
  config.model.attention.update(attention_fields)
  config.model.update({k: v for k, v in fields.items() if k not in attention_fields})
  resolve.validate(config)
  model = models.create(config.model, seed=seed)
  for block in model.blocks if config.model.attention.sink_logit else ():
    block.attn.sink.value = jnp.asarray(SINKS, jnp.float32)
  return config, model


def _full(model, tokens, pos=None, segments=None):
  pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape) if pos is None else pos
  return np.asarray(_forward(model, tokens, pos,
                             jnp.ones_like(tokens) if segments is None else segments))


@nnx.jit
def _forward(model, tokens, pos, segments):
  return model(tokens, pos, segments)


def test_a_remap_that_moves_no_distance_keeps_the_sinks():
  """ReRoPE with a window past the row is RoPE itself: the remap's path (whole, or over causal
  blocks of 4 queries) gives the plain path's logits with the sinks, which differ without
  them."""
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 14)))
  config, plain = _lm(sink_logit=True)
  for rows in (0, 4):
    config.model.update(causal_block=rows)
    config.model.position.rope.remap.update(method='rerope', window=14)
    resolve.validate(config)
    remapped = models.create(config.model, seed=4)
    for block in remapped.blocks:
      block.attn.sink.value = jnp.asarray(SINKS, jnp.float32)
    np.testing.assert_allclose(_full(remapped, tokens), _full(plain, tokens), atol=1e-5)
  _, without = _lm()
  assert np.abs(_full(without, tokens) - _full(plain, tokens)).max() > 1e-3


def test_attention_over_causal_blocks_equals_the_whole_matrix():
  """Queries in blocks of 4 with packed documents and a 5-token window on the first layer."""
  tokens = jnp.asarray(np.random.default_rng(7).integers(5, 50, (2, 15)))
  segments = jnp.asarray([[1] * 15, [1] * 6 + [2] * 9])
  pos = jnp.asarray([list(range(15)), list(range(6)) + list(range(9))])
  got = {rows: _full(_lm(sink_logit=True, causal_block=rows, layer_windows=(5, 0))[1], tokens,
                     pos, segments) for rows in (0, 4)}
  np.testing.assert_allclose(got[4], got[0], rtol=1e-5, atol=1e-5)


def test_the_cache_equals_the_full_pass():
  _, model = _lm(sink_logit=True)
  tokens = jnp.asarray(np.random.default_rng(1).integers(5, 50, (2, 10)))
  kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 5), max_len=12)


def test_training_moves_the_sinks():
  """One gradient of the LM's loss reaches every layer's sinks."""
  _, model = _lm(sink_logit=True)
  tokens = jnp.asarray(np.random.default_rng(2).integers(5, 50, (2, 10)))

  def loss(model):
    return jnp.mean(jax.nn.logsumexp(model(tokens, jnp.broadcast_to(jnp.arange(10), (2, 10)),
                                           jnp.ones_like(tokens)), -1))
  grads = jax.tree_util.tree_flatten_with_path(nnx.grad(loss)(model))[0]
  sinks = [np.asarray(g) for path, g in grads if 'sink' in jax.tree_util.keystr(path)]
  assert len(sinks) == 2 and all(np.abs(g).min() > 0 for g in sinks)


def test_the_gpt_oss_preset_has_sinks_alternate_windows_and_attention_biases():
  from configs import lm  # pylint: disable=import-outside-toplevel
  cfg = lm.get_config('gpt_oss')
  resolve.validate(cfg)
  model = models.create(cfg.model, seed=0)
  window = cfg.data.seq_len // 4
  assert [b.attn.window for b in model.blocks] == [window, 0] * (cfg.model.num_layers // 2)
  assert all(b.attn.sink.value.shape == (cfg.model.num_heads,) for b in model.blocks)
  assert model.blocks[0].attn.out.bias is not None
