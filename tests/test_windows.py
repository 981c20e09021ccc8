"""Sliding-window attention per layer (config.model.layer_windows): what a query sees, the
blocks it skips, the cache, and the settings refused before compiling."""

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest

from configs import test as test_config
from roformer import attention
from roformer import errors
from roformer import models
from roformer import resolve


def test_the_window_mask_against_a_hand_table():
  want = np.array([[1, 0, 0, 0, 0, 0],  # query slot 0 (keys after it: the causal mask's job)
                   [1, 1, 0, 0, 0, 0],
                   [1, 1, 1, 0, 0, 0],
                   [0, 1, 1, 1, 0, 0],
                   [0, 0, 1, 1, 1, 0],
                   [0, 0, 0, 1, 1, 1]], bool)
  got = np.asarray(attention.window_mask(jnp.arange(6), 6, 3)) & np.tril(np.ones((6, 6), bool))
  np.testing.assert_array_equal(got, want)
  # With a cache the queries sit at their slots: slot 4 of 8 sees slots 2, 3, 4.
  np.testing.assert_array_equal(np.asarray(attention.window_mask(jnp.asarray([4]), 8, 3))[0, :5],
                                [0, 0, 1, 1, 1])


def tiny(windows, num_layers=1, kind='rope'):
  config = test_config.get_config(kind)
  config.model.update(vocab_size=50, num_layers=num_layers, layer_windows=windows)
  config.data.vocab_size = 50
  resolve.validate(config)
  return config


@pytest.mark.parametrize('kind', ['rope', 'alibi'])
def test_a_token_reaches_exactly_the_queries_whose_window_holds_it(kind):
  """One layer with a window of 3: changing token 5 changes the outputs at 5, 6 and 7 and no
  other; two layers (windows 3 then global) reach from 5 to the end."""
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (1, 12)))
  pos, seg = jnp.arange(12)[None], jnp.ones((1, 12), jnp.int32)
  for windows, layers, reached in [((3,), 1, [5, 6, 7]), ((3, 0), 2, list(range(5, 12)))]:
    model = kinds.Compiled(models.create(tiny(windows, layers, kind).model, seed=1))
    base = np.asarray(model(tokens, pos, seg))
    moved = np.abs(np.asarray(model(tokens.at[0, 5].set(4), pos, seg)) - base).max(-1)[0]
    assert np.flatnonzero(moved > 1e-6).tolist() == reached, (windows, moved)


def test_windowed_causal_blocks_equal_the_whole_matrix_and_skip_the_keys_outside():
  rng = np.random.default_rng(1)
  q, k, v = (jnp.asarray(rng.normal(size=(2, 40, 2, 8)), jnp.float32) for _ in range(3))
  seg = jnp.asarray([[1] * 40, [1] * 17 + [2] * 23])
  mask = attention.make_mask(seg, seg, causal=True) & attention.window_mask(jnp.arange(40), 40, 5)
  bias = jnp.asarray(rng.normal(size=(1, 2, 40, 40)), jnp.float32)

  def loss(f, q, k, v):
    out = f(q, k, v)
    return jnp.sum(out * jnp.cos(jnp.arange(out.size).reshape(out.shape))), out

  whole = lambda q, k, v: attention.blocked_softmax_attention(q, k, v, mask, bias)
  blocks = lambda q, k, v: attention.causal_block_attention(q, k, v, mask, bias, 8, window=5)
  (_, want), want_grads = jax.jit(jax.value_and_grad(lambda *a: loss(whole, *a), (0, 1, 2),
                                                     has_aux=True))(q, k, v)
  (_, got), got_grads = jax.jit(jax.value_and_grad(lambda *a: loss(blocks, *a), (0, 1, 2),
                                                   has_aux=True))(q, k, v)
  np.testing.assert_allclose(got, want, atol=1e-5)
  for g, w in zip(got_grads, want_grads):
    np.testing.assert_allclose(g, w, atol=1e-5)
  flops = lambda f: jax.jit(f).lower(q, k, v).compile().cost_analysis()['flops']
  plain = lambda q, k, v: attention.causal_block_attention(q, k, v, mask, bias, 8)
  # 5 blocks of 8 rows: at most 12 keys each instead of up to 40.
  assert flops(blocks) < 0.6 * flops(plain)


def test_the_cache_equals_the_full_pass_with_windows():
  model = models.create(tiny((3, 0, 2), num_layers=3).model, seed=2)
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 11)))
  kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 1, 5))
  assert [b.attn.window for b in model.blocks] == [3, 0, 2]


@pytest.mark.parametrize('field', ['layer_windows', 'layer_chunks'])
@pytest.mark.parametrize('change,match', [
    ({'type': 'mlm'}, r'FIELD=\(4, 0\) \w+ .*; model.type=.mlm. attends both ways'),
    ({'attention': {'kind': 'favor'}},
     r"FIELD=\(4, 0\) needs the attention mask: attention.kind='favor' never forms"),
    ({'FIELD': (4, -1)}, r'FIELD\[1\]'),
])
def test_bad_window_and_chunk_settings_are_refused(field, change, match):
  """Sliding windows and chunks (tests/test_chunks.py) alike: causal LMs only, with a mask."""
  config = test_config.get_config('mlm') if 'type' in change else test_config.get_config()
  config.model[field] = (4, 0)
  for key, value in change.items():
    if key == 'attention':
      config.model.attention.update(value)
    elif key != 'type':
      config.model[key.replace('FIELD', field)] = value
  with pytest.raises(errors.ConfigError, match=match.replace('FIELD', field)):
    resolve.validate(config)
