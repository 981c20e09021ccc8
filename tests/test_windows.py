"""Sliding-window attention per layer (config.model.layer_windows): what a query sees, the
blocks it skips, the cache, and the settings refused before compiling."""

import re

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
import test_decode
from flax import nnx

from configs import test as test_config
from roformer import attention
from roformer import decode
from roformer import errors
from roformer import models
from roformer import resolve
from roformer import window_cache
from roformer.attention_options import base as option_base


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


def _slots_held(cache, model) -> list[int]:
  return [layer['k'].shape[2 if block.attn.cache_heads_first else 1]
          for layer, block in zip(cache['layers'], model.blocks)]


@pytest.mark.parametrize('heads_first,num_kv_heads', [(True, 2), (False, 0)])
def test_windowed_layers_decode_over_a_ring_of_their_window_as_the_full_pass(heads_first,
                                                                             num_kv_heads):
  """Windows (3, global, 2) over 16 cache slots: the windowed layers keep 3 and 2 slots, the
  global one 16, and every call's logits are the full pass's, in both cache layouts (slots
  first: cuDNN's), with grouped key/value heads, whether calls are one token (written, then
  read in place) or several, fewer or more than the window, before and after the ring wraps."""
  config = tiny((3, 0, 2), num_layers=3)
  config.model.num_kv_heads = num_kv_heads
  model = models.create(config.model, seed=2)
  for block in model.blocks:
    block.attn.cache_heads_first = heads_first
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 13)))
  for sizes in [(4, 1, 1, 5, 2), (1,) * 13, (2, 1, 3, 1, 1, 5), (13,)]:
    cache = kinds.assert_decoding_equals_full_pass(model, tokens, sizes)
    assert _slots_held(cache, model) == [3, 16, 2]


# Each reads a key through more than its own position, or computes per row: no ring.
EVERY_SLOT = {
    'alibi': {}, 'cope': {}, 'fox': {}, 'rope+fox': {},  # A bias; counts; gates; a combination.
    'rope': {'position.rope.scaling.kind': 'dynamic', 'position.rope.scaling.factor': 2.0,
             'position.rope.scaling.original_length': 4},  # Frequencies follow the row's length.
    'none': {'attention.kind': 'stick_breaking'},  # Weights of the keys in their order.
}


@pytest.mark.parametrize('kind', list(EVERY_SLOT))
def test_a_layer_that_reads_keys_by_more_than_their_position_keeps_every_slot(kind):
  """ALiBi's bias, CoPE's counts of the gates before a key, FoX's per-slot gates, a combined
  kind, dynamic NTK's frequencies, stick-breaking's order: no ring (`keys_by_position_alone`,
  `decodes_over_a_ring`); their decoding is the full pass's over every slot."""
  config = tiny((3,), kind=kind)
  for field, value in EVERY_SLOT[kind].items():
    *parents, leaf = field.split('.')
    node = config.model
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  resolve.validate(config)
  model = models.create(config.model, seed=2)
  tokens = jnp.asarray(np.random.default_rng(1).integers(5, 50, (2, 9)))
  if kind == 'rope':  # Its cache equals full passes over each prefix (tests/test_decode.py).
    assert _slots_held(model.init_cache(2, 16), model) == [16]
    return
  cache = kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 1, 3))
  assert _slots_held(cache, model) == [16]


def test_a_distance_remap_keeps_every_slot_and_plain_rope_takes_a_ring():
  config = tiny((3,))
  model = models.create(config.model, seed=2)
  assert model.blocks[0].position.keys_by_position_alone()
  assert _slots_held(model.init_cache(2, 16), model) == [3]
  config.model.position.rope.remap.method = 'rerope'
  config.model.position.rope.remap.window = 2
  resolve.validate(config)
  model = models.create(config.model, seed=2)
  assert _slots_held(model.init_cache(2, 16), model) == [16]


def _beams(model, prompt, beam_size: int, steps: int):
  """decode.generate's search (tokens [batch, beams, steps], scores), jitted here afresh: traced
  with whatever window_cache.slots is at the call."""
  @nnx.jit
  def run(model, prompt):
    start = decode.causal_lm_start(model, prompt, steps)
    return decode.beam_search(start.step_fn, start.first_logits, start.cache,
                              start.start_positions, beam_size=beam_size, max_len=steps,
                              eos_id=-1, alpha=0.6, refills=start.refills)
  return run(model, prompt)


@pytest.mark.parametrize('prompt_len', [2, 5])
def test_generation_over_a_ring_is_generation_over_every_slot(prompt_len, monkeypatch):
  """A prompt shorter than the window (copied into the ring's first slots) or longer (its last
  window kept, each key at its slot mod the window): greedy ids are those of full passes, and a
  beam search (which reorders the ring with the rest of the cache) gives the beams and scores of
  the same search over a cache of every slot."""
  model = models.create(tiny((3, 0), num_layers=2).model, seed=4)
  prompt = jnp.asarray(np.random.default_rng(2).integers(5, 50, (3, prompt_len)))
  assert _slots_held(model.init_cache(3, prompt_len + 7), model) == [3, prompt_len + 7]
  greedy = decode.generate(model, prompt, max_new_tokens=7, eos_id=-1)
  np.testing.assert_array_equal(np.asarray(greedy), test_decode.uncached_greedy(model, prompt, 7))
  tokens, scores = _beams(model, prompt, 3, 7)
  monkeypatch.setattr(window_cache, 'slots', lambda module, position, max_len: max_len)
  assert _slots_held(model.init_cache(3, prompt_len + 7), model) == [prompt_len + 7] * 2
  want_tokens, want_scores = _beams(model, prompt, 3, 7)
  np.testing.assert_array_equal(np.asarray(tokens), np.asarray(want_tokens))
  np.testing.assert_allclose(np.asarray(scores), np.asarray(want_scores), atol=1e-5)


def test_a_prompt_longer_than_the_window_attends_over_its_own_keys_alone():
  """Generation fills the prompt (10 tokens, a window of 4) into a cache of its own 10 slots
  without a ring: its logits are [10, 10], not [10, 14] over an empty ring before it."""
  model = models.create(tiny((4,)).model, seed=2)
  prompt = jnp.asarray(np.random.default_rng(3).integers(5, 50, (1, 10)))
  text = str(jax.make_jaxpr(lambda p: decode.causal_lm_start(model, p, 3).first_logits)(prompt))
  widths = set(re.findall(r'f32\[1,\d+,10,(\d+)\]', text))  # [batch, heads, queries, keys]
  assert '10' in widths and '14' not in widths, widths


@pytest.mark.parametrize('remap', ['none', 'rerope'])
def test_a_prompt_filling_its_own_cache_runs_over_causal_blocks(remap):
  """A prompt of 10 tokens fills its own cache from slot 0, so its mask is the causal one and
  its queries run over causal blocks of `model.causal_block` (4) rows as a pass without a cache
  does (each block over the keys from its window's first to its last row; a remap's over at
  most REMAP_BLOCKS blocks): its logits are the full pass's, greedy generation that of full
  passes, and no [10, 10] logits are formed (windows (4, global), two query heads a key head)."""
  config = tiny((4, 0), num_layers=2)
  config.model.update(causal_block=4, num_kv_heads=2)
  config.model.position.rope.remap.method = remap
  if remap == 'rerope':
    config.model.position.rope.remap.window = 3
  resolve.validate(config)
  model = models.create(config.model, seed=2)
  prompt = jnp.asarray(np.random.default_rng(4).integers(5, 50, (2, 10)))
  kinds.assert_decoding_equals_full_pass(model, prompt, (10,), max_len=10)  # Its own cache.
  np.testing.assert_array_equal(
      np.asarray(decode.generate(model, prompt, max_new_tokens=3, eos_id=-1)),
      test_decode.uncached_greedy(model, prompt, 3))
  text = str(jax.make_jaxpr(lambda p: decode.causal_lm_start(model, p, 3).first_logits)(prompt))
  assert not re.search(r'f32\[2,\d+,10,10\]', text)  # [batch, heads, queries, keys]


def test_a_long_prompt_runs_in_at_most_prefill_blocks_blocks():
  """A prompt of 48 tokens with causal blocks of 1 row runs in 16 blocks of 3 rows (at most
  PREFILL_BLOCKS = 16: each is its own part of a program compiled per prompt length), where a
  pass without a cache keeps blocks of 1; the logits are the full pass's."""
  config = tiny((0,))
  config.model.causal_block = 1
  model = models.create(config.model, seed=2)
  prompt = jnp.asarray(np.random.default_rng(5).integers(5, 50, (1, 48)))
  kinds.assert_decoding_equals_full_pass(model, prompt, (48,), max_len=48)
  text = str(jax.make_jaxpr(lambda p: decode.causal_lm_start(model, p, 2).first_logits)(prompt))
  # The logits of each block, [1, heads, rows, keys up to its last row] (the weighted values
  # are [1, heads, width 8, rows]; the other products have 3 axes).
  shapes = re.findall(r'f32\[1,\d+,(\d+),(\d+)\] = dot_general', text)
  rows = {int(r) for r, keys in shapes if int(r) <= int(keys)}
  assert option_base.PREFILL_BLOCKS == 16 and rows == {3}, rows


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
