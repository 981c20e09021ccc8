"""Decoding with a key/value cache equals decoding without one; beam search finds the best;
sampling follows its filtered distribution and is greedy where it should be."""

import functools
import itertools
import re

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx
from scipy import stats

from configs import test as test_config
from roformer import decode
from roformer import errors
from roformer import models

KINDS = kinds.WITH_COMBINED  # From the registry.


def model_for(kind, num_layers=None, num_kv_heads=0, **rope):
  cfg = test_config.get_config(kind).model
  cfg.vocab_size = 40
  cfg.num_layers = num_layers or cfg.num_layers
  cfg.num_kv_heads = num_kv_heads
  if kind == 'learned':
    cfg.position.learned.max_length = 64
  for name, value in rope.items():  # E.g. scaling__kind='dynamic': rope.scaling.kind.
    *parents, leaf = name.split('__')
    node = cfg.position.rope
    for parent in parents:
      node = node[parent]
    node[leaf] = value
  return kinds.visible_positions(models.create(cfg, seed=5))


@nnx.jit
def _forward(model, tokens, positions, segments):
  return model(tokens, positions, segments)


@nnx.jit
def _decode(model, tokens, positions, cache):
  return model.decode(tokens, positions, cache)


# Multi-query attention for every kind is a repeat behind -m slow, but for a kind of each family
# (rotary, bias, none).
_MQA = {'rope', 'alibi', 'none'}


def _kinds_and_heads():
  """(kind, num_kv_heads) of every kind `by_capabilities` runs, its marks kept: one key/value
  head per query head, and multi-query attention (slow but for `_MQA`); two query heads a
  key/value head for RoPE and ALiBi."""
  out = []
  for param in kinds.by_capabilities(KINDS):
    kind, marks = (param.values[0], list(param.marks)) if hasattr(param, 'values') else (param, [])
    out.append(pytest.param(kind, 0, marks=marks, id=f'{kind}-0'))
    out.append(pytest.param(kind, 1, id=f'{kind}-1',
                            marks=marks + ([] if kind in _MQA else [pytest.mark.slow])))
  # Two query heads a key/value head: the grouped step's reshaped heads (rotated keys, a bias).
  return out + [pytest.param(kind, 2, id=f'{kind}-2') for kind in ('rope', 'alibi')]


@pytest.mark.parametrize('kind,num_kv_heads', _kinds_and_heads())
def test_cached_logits_equal_full_forward(kind, num_kv_heads):
  """Prefill 4 tokens, then feed one token at a time: each step's logits equal the logits of
  a full forward pass over the whole prefix (positions from the cache index), with one
  key/value head per query head and with one for all four (multi-query: the grouping's extreme;
  two per group train in test_scheme_interface.py); the cache holds the key/value heads only."""
  model = model_for(kind, num_kv_heads=num_kv_heads)
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 40, (2, 9)))
  positions = jnp.broadcast_to(jnp.arange(9), (2, 9))
  full = np.asarray(_forward(model, tokens, positions, jnp.ones_like(tokens)))
  cache = model.init_cache(2, 12)
  logits, cache = _decode(model, tokens[:, :4], positions[:, :4], cache)
  np.testing.assert_allclose(np.asarray(logits), full[:, :4], atol=1e-4)
  for t in range(4, 9):
    logits, cache = _decode(model, tokens[:, t:t + 1], positions[:, t:t + 1], cache)
    np.testing.assert_allclose(np.asarray(logits)[:, 0], full[:, t], atol=1e-4)
  assert int(cache['index']) == 9
  assert cache['layers'][0]['k'].shape[1] == (num_kv_heads or 4)  # [batch, heads, slots, d]


def _rotated64(x, positions, base: float, layout: str):
  """RoPE's rotation of x [..., slots, d] by positions [slots] in float64: pairs (2i, 2i + 1)
  ('interleaved') or (i, i + d/2) ('half') turned by position x base^(-2i/d)."""
  d = x.shape[-1]
  angle = positions[:, None] * base ** (-np.arange(0, d, 2) / d)
  cos, sin = np.cos(angle), np.sin(angle)
  if layout == 'half':
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
  a, b = x[..., 0::2], x[..., 1::2]
  return np.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(x.shape)


def _first_layer_keys(model, tokens, first: int) -> np.ndarray:
  """Layer 0's cached keys [batch, kv_heads, slots, d] after `first` tokens at once and the
  rest one at a time."""
  n = tokens.shape[1]
  positions = jnp.broadcast_to(jnp.arange(n), tokens.shape)
  cache = model.init_cache(tokens.shape[0], n + 2)
  _, cache = _decode(model, tokens[:, :first], positions[:, :first], cache)
  for t in range(first, n):
    _, cache = _decode(model, tokens[:, t:t + 1], positions[:, t:t + 1], cache)
  return np.asarray(cache['layers'][0]['k'], np.float64)[:, :, :n]


def test_rope_caches_each_key_rotated_once_by_its_own_position():
  """RoPE turns a key by its own position alone, so the cache keeps it rotated as it is
  written (a step then reads the cache in place); dynamic NTK's frequencies follow the row's
  length, so its cache keeps the keys as projected and each step rotates them all. The two
  models have the same weights, so their first layer's cached keys differ by RoPE's rotation of
  each slot (float64 formula), in both layouts."""
  tokens = jnp.asarray(np.random.default_rng(3).integers(5, 40, (2, 7)))
  for layout in ('interleaved', 'half'):
    dynamic = {'scaling__kind': 'dynamic', 'scaling__factor': 2.0,
               'scaling__original_length': 64, 'layout': layout}  # Its base does not move.
    raw = _first_layer_keys(model_for('rope', num_kv_heads=2, **dynamic), tokens, 4)
    cached = _first_layer_keys(model_for('rope', num_kv_heads=2, layout=layout), tokens, 4)
    np.testing.assert_allclose(cached, _rotated64(raw, np.arange(7.0), 10000.0, layout),
                               atol=1e-5)
    assert np.abs(cached - raw).max() > 0.1


def _decoding_step_shapes(model, batch: int, slots: int, op: str = '') -> set[tuple[int, ...]]:
  """The shapes of the arrays (of operation `op`, or all) in the compiled program of one
  decoding step over a cache of `slots`, `slots - 1` of them filled."""
  graphdef, state = nnx.split(model)
  step = jax.jit(lambda state, tokens, positions, cache: nnx.merge(graphdef, state).decode(
      tokens, positions, cache))
  cache = model.init_cache(batch, slots)
  cache['index'] = jnp.int32(slots - 1)
  token = jnp.ones((batch, 1), jnp.int32)
  text = step.lower(state, token, token * (slots - 1), cache).compile().as_text()
  found = re.findall(r'= [a-z0-9]+\[([0-9,]*)\]\S* ' + (re.escape(op) if op else '[a-z-]+') +
                     r'\(', text)
  return {tuple(int(n) for n in dims.split(',')) for dims in found if dims}


def test_a_grouped_rope_decoding_step_neither_rotates_nor_repeats_the_cached_keys():
  """The compiled step of RoPE with 2 key/value heads for 4 query heads computes no cosine over
  the cache's slots and no array of the keys repeated per query head ([batch, slots, 4, d]
  in any order): each step reads the cache as written. Dynamic NTK, whose keys are cached
  unrotated, does both (so the check sees them where they are)."""
  batch, slots, width = 3, 24, 8
  repeated = sorted((batch, slots, 4, width))
  for rope, rotates_cache in (({}, False),
                              ({'scaling__kind': 'dynamic', 'scaling__factor': 2.0,
                                'scaling__original_length': 64}, True)):
    model = model_for('rope', num_kv_heads=2, **rope)
    cosines = _decoding_step_shapes(model, batch, slots, 'cosine')
    assert any(slots in shape for shape in cosines) == rotates_cache, cosines
    shapes = _decoding_step_shapes(model, batch, slots)
    assert any(sorted(shape) == repeated for shape in shapes) == rotates_cache


@pytest.mark.parametrize('num_kv_heads', [0, 2])
def test_a_cache_kept_slots_first_for_cudnns_kernels_decodes_as_the_full_pass(num_kv_heads):
  """A layer on cuDNN's kernels keeps its cache as [batch, slots, kv_heads, width], the layout
  those kernels take (`cache_heads_first` off; no GPU here, so the attribute is set on the
  einsum path's layers): the same decoding, over a cache of the other layout."""
  model = model_for('rope', num_kv_heads=num_kv_heads)
  for block in model.blocks:
    block.attn.cache_heads_first = False
  cache = kinds.assert_decoding_equals_full_pass(
      model, jnp.asarray(np.random.default_rng(4).integers(5, 40, (2, 9))), (4, 1, 4))
  assert cache['layers'][0]['k'].shape == (2, 16, num_kv_heads or 4, 8)


ROPE_VARIANTS = {
    'p_rope': {'keep_fraction': 0.5},
    'llama3': {'scaling__kind': 'llama3', 'scaling__factor': 4.0, 'scaling__original_length': 4},
    'yarn_index': {'scaling__kind': 'yarn', 'scaling__factor': 4.0,
                   'scaling__original_length': 4, 'scaling__ramp': 'index'},
}


@pytest.mark.parametrize('variant', [pytest.param(v, marks=pytest.mark.slow)
                                     for v in ROPE_VARIANTS])
def test_cached_logits_equal_full_forward_for_rope_variants(variant):
  model = model_for('rope', **ROPE_VARIANTS[variant])
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 40, (2, 9)))
  positions = jnp.broadcast_to(jnp.arange(9), (2, 9))
  full = np.asarray(_forward(model, tokens, positions, jnp.ones_like(tokens)))
  cache = model.init_cache(2, 12)
  logits, cache = _decode(model, tokens[:, :4], positions[:, :4], cache)
  for t in range(4, 9):
    logits, cache = _decode(model, tokens[:, t:t + 1], positions[:, t:t + 1], cache)
    np.testing.assert_allclose(np.asarray(logits)[:, 0], full[:, t], atol=1e-4)


@pytest.mark.parametrize('num_layers,original_length', [(1, 3), (2, 9)])
def test_dynamic_ntk_cached_step_equals_a_full_pass_over_the_same_prefix(num_layers,
                                                                         original_length):
  """Keys are cached before rotation, so each step rotates every cached key with the base of
  the current length, as a full pass over the prefix does. Exact for one layer at any length,
  and for any depth up to the original length (the base does not move). Beyond it, a deeper
  layer's cached keys come from hidden states computed at shorter lengths (smaller bases),
  which a full pass recomputes: there a cache cannot equal the full pass."""
  model = model_for('rope', num_layers, scaling__kind='dynamic', scaling__factor=2.0,
                    scaling__original_length=original_length)
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 40, (2, 9)))
  prefix = cached_steps_equal_prefix_passes(model, tokens)[-1]
  positions = jnp.broadcast_to(jnp.arange(9), (2, 9))
  plain = _forward(model_for('rope', num_layers), tokens, positions, jnp.ones_like(tokens))
  assert (original_length < 9) == (np.abs(prefix - np.asarray(plain)).max() > 1e-3)  # Scaled.


def cached_steps_equal_prefix_passes(model, tokens, first: int = 2) -> list[np.ndarray]:
  """Decodes `tokens` [batch, n] through the cache (`first` at once, then one at a time) and
  checks each step's logits against a full pass over the prefix so far; returns those full
  passes' logits [batch, n, vocab], one per step."""
  n = tokens.shape[1]
  positions = jnp.broadcast_to(jnp.arange(n), tokens.shape)
  cache = model.init_cache(tokens.shape[0], n + 3)
  logits, cache = _decode(model, tokens[:, :first], positions[:, :first], cache)
  passes = []
  for t in range(first, n):
    logits, cache = _decode(model, tokens[:, t:t + 1], positions[:, t:t + 1], cache)
    # The prefix 0..t alone, padded to one shape (padding: position 0, segment 0, masked).
    in_prefix = jnp.arange(n) <= t
    prefix = np.asarray(_forward(model, tokens, jnp.where(in_prefix, positions, 0),
                                 jnp.broadcast_to(in_prefix, tokens.shape).astype(jnp.int32)))
    np.testing.assert_allclose(np.asarray(logits)[:, 0], prefix[:, t], atol=1e-4)
    passes.append(prefix)
  return passes


def uncached_greedy(model, prompt, steps):
  tokens = np.asarray(prompt)
  for _ in range(steps):
    n = tokens.shape[1]
    logits = _forward(model, jnp.asarray(tokens), jnp.broadcast_to(jnp.arange(n), tokens.shape),
                      jnp.ones(tokens.shape, jnp.int32))
    tokens = np.concatenate([tokens, np.asarray(jnp.argmax(logits[:, -1], -1))[:, None]], 1)
  return tokens[:, prompt.shape[1]:]


@pytest.mark.parametrize('kind', kinds.params())
def test_generate_with_cache_equals_without(kind):
  model = model_for(kind)
  prompt = jnp.asarray(np.random.default_rng(1).integers(5, 40, (2, 5)))
  got = decode.generate(model, prompt, max_new_tokens=6, eos_id=-1)  # No early stop.
  np.testing.assert_array_equal(np.asarray(got), uncached_greedy(model, prompt, 6))


# A toy model whose next-token distribution depends on the whole history through its cache
# (state = running sum of tokens mod V), so the beam search must reorder the cache correctly.
V, EOS = 5, 1
TABLE = np.log(np.random.default_rng(3).dirichlet(np.ones(V) * 0.7, size=V))


def toy_step(token, position, cache):
  del position
  state = (cache['state'] + token[:, 0] * 3 + 1) % V
  return jnp.asarray(TABLE, jnp.float32)[state], {'state': state, 'index': cache['index']}


def toy_start(batch):
  cache = {'state': jnp.zeros((batch,), jnp.int32), 'index': jnp.int32(0)}
  return jnp.asarray(TABLE[[0] * batch], jnp.float32), cache


def brute_force_best(max_len, alpha):
  """Every EOS-terminated sequence up to max_len, scored log P / lp(length)."""
  best = (-np.inf, None)
  for n in range(1, max_len + 1):
    for seq in itertools.product(range(V), repeat=n):
      if seq[-1] != EOS or EOS in seq[:-1]:
        continue
      state, logp = 0, 0.0
      for t in seq:
        logp += TABLE[state, t]
        state = (state + t * 3 + 1) % V
      best = max(best, (logp / ((5 + n) / 6) ** alpha, seq))
  return best


@pytest.mark.parametrize('alpha', [0.0, 0.6, 2.0])
def test_wide_beam_search_is_exact(alpha):
  max_len = 4
  first, cache = toy_start(2)
  tokens, scores = decode.beam_search(toy_step, first, cache, jnp.zeros(2, jnp.int32),
                                      beam_size=V ** (max_len - 1), max_len=max_len,
                                      eos_id=EOS, alpha=alpha)
  score, seq = brute_force_best(max_len, alpha)
  for row in range(2):
    assert float(scores[row, 0]) == pytest.approx(score, rel=1e-5)
    assert tuple(np.asarray(tokens)[row, 0, :len(seq)]) == seq
    assert not np.asarray(tokens)[row, 0, len(seq):].any()  # PAD after EOS.
  assert np.all(np.diff(np.asarray(scores), axis=1) <= 1e-6)  # Best first.


def test_beam_of_one_is_greedy():
  first, cache = toy_start(3)
  greedy = decode.greedy_search(toy_step, first, cache, jnp.zeros(3, jnp.int32), max_len=4,
                                eos_id=-1)
  beam, _ = decode.beam_search(toy_step, first, cache, jnp.zeros(3, jnp.int32), beam_size=1,
                               max_len=4, eos_id=-1)
  np.testing.assert_array_equal(np.asarray(beam)[:, 0], np.asarray(greedy))


def test_gnmt_length_penalty():
  assert decode.length_penalty(1.0, 0.6) == pytest.approx(1.0)
  assert decode.length_penalty(7.0, 1.0) == pytest.approx(2.0)
  assert decode.length_penalty(10.0, 0.0) == 1.0


@pytest.mark.parametrize('beam_size,alpha', [(2, 0.6), (3, 0.0), (4, 1.5)])
def test_early_stopping_changes_nothing(beam_size, alpha):
  first, cache = toy_start(4)
  run = lambda early: decode.beam_search(toy_step, first, cache, jnp.zeros(4, jnp.int32),
                                         beam_size=beam_size, max_len=12, eos_id=EOS,
                                         alpha=alpha, early_stop=early)
  (tokens, scores), (full_tokens, full_scores) = run(True), run(False)
  np.testing.assert_array_equal(np.asarray(tokens), np.asarray(full_tokens))
  np.testing.assert_allclose(np.asarray(scores), np.asarray(full_scores), rtol=1e-6)


# Sampling (decode.sample, decode.filter_logits, generate's temperature/top_k/top_p/seed).


@functools.partial(jax.jit, static_argnames=('step_fn', 'max_len', 'top_k', 'use_top_p'))
def _sample_jit(first, cache, key, temperature, top_p, *, step_fn, max_len, top_k=0,
                use_top_p=False):
  """decode.sample from position 0, jitted; temperature and top_p traced."""
  return decode.sample(step_fn, first, cache, jnp.zeros(first.shape[0], jnp.int32), key=key,
                       max_len=max_len, eos_id=-1, temperature=temperature, top_k=top_k,
                       top_p=top_p if use_top_p else None)


def fixed_step(token, position, cache):
  """Next-token logits that ignore the input: each row's own, kept in the cache."""
  del token, position
  return cache['logits'], cache


def test_a_refill_step_runs_at_its_step_and_a_search_that_ended_before_it_is_unchanged():
  """decode's searches run the step function that `refills` names at that step alone: rows that
  have not ended take what it returns from then on; where every row ended before it, the
  tokens are what they are without it, whatever it returns."""
  def logits_for(tokens):  # [rows] -> [rows, 10], each row's token the argmax.
    return jax.nn.one_hot(jnp.asarray(tokens), 10) * 5.0

  def refill(token, position, cache):
    del token, position
    return jnp.where(cache['nan'], jnp.nan, logits_for([7, 7])), {
        **cache, 'logits': logits_for([8, 8])}

  def run(first, nan, refills, eos_id=1):
    cache = {'logits': logits_for(first), 'nan': jnp.asarray(nan)}
    return np.asarray(jax.jit(lambda: decode.greedy_search(
        fixed_step, logits_for(first), cache, jnp.zeros(2, jnp.int32), max_len=6, eos_id=eos_id,
        refills=refills))())

  np.testing.assert_array_equal(run([3, 4], False, {2: refill}),
                                [[3, 3, 3, 7, 8, 8], [4, 4, 4, 7, 8, 8]])
  np.testing.assert_array_equal(run([1, 1], True, {2: refill}), run([1, 1], True, None))
  np.testing.assert_array_equal(run([1, 1], True, {2: refill}), [[1, 0, 0, 0, 0, 0]] * 2)
  np.testing.assert_array_equal(run([1, 4], False, {2: refill}),  # Row 0 ended: it stays so.
                                [[1, 0, 0, 0, 0, 0], [4, 4, 4, 7, 8, 8]])


def test_a_beam_search_settled_before_its_refills_is_unchanged_by_them():
  """A beam search that settles (its early stop) before two refills: the first runs anyway,
  and whatever it returns (NaN here), the second is skipped, so nothing it computed is read."""
  logits = jnp.log(jnp.asarray([[0.01, 0.6, 0.38, 0.01]]))  # EOS (1) 0.6: settled by step 2.

  def step(token, position, cache):
    del position
    return jnp.broadcast_to(logits, (token.shape[0], 4)), cache

  def nan_step(token, position, cache):
    del position
    return jnp.full((token.shape[0], 4), jnp.nan), cache

  def run(refills):
    return jax.jit(lambda: decode.beam_search(
        step, logits, {'x': jnp.zeros((1, 1))}, jnp.zeros(1, jnp.int32), beam_size=2,
        max_len=8, eos_id=1, alpha=0.0, refills=refills))()

  want = run(None)
  for refills in ({5: nan_step}, {5: nan_step, 6: step}, {6: nan_step, 7: step}):
    got = run(refills)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))


# The model tests share one prompt shape and length, so each program compiles once.
def _prompt(seed, rows=3, same=False):
  tokens = np.random.default_rng(seed).integers(5, 40, (1 if same else rows, 5))
  return jnp.asarray(np.repeat(tokens, rows, axis=0) if same else tokens)


@functools.partial(nnx.jit, static_argnames=('steps',))
def _sample_model(model, prompt, key, temperature, steps):
  step_fn, first, cache, start, _ = decode.causal_lm_start(model, prompt, steps)
  return decode.sample(step_fn, first, cache, start, key=key, max_len=steps, eos_id=-1,
                       temperature=temperature)


def test_the_prefill_computes_the_output_layer_at_the_last_token_alone():
  """A prompt's pass through the cache gives the full pass's logits at its last token, and the
  compiled generation holds no [batch, prompt, vocab] logits (over a long prompt and a large
  vocabulary, gigabytes that nothing reads), nor the prompt's queries against the whole cache
  (they attend over the prompt's own keys: decode.causal_lm_start)."""
  cfg = test_config.get_config('llama').model  # An untied output layer, as Llama's.
  cfg.vocab_size = 40
  model = models.create(cfg, seed=5)
  prompt = jnp.asarray(np.random.default_rng(5).integers(5, 40, (2, 11)))
  first, start = nnx.jit(lambda m, p: decode.causal_lm_start(m, p, 3)[1::2])(model, prompt)
  full = _forward(model, prompt, jnp.broadcast_to(jnp.arange(11), (2, 11)), jnp.ones_like(prompt))
  np.testing.assert_allclose(np.asarray(first), np.asarray(full)[:, -1], atol=1e-5)
  np.testing.assert_array_equal(np.asarray(start), [11, 11])
  graphdef, state = nnx.split(model)
  text = decode._generate.lower(graphdef, state, prompt, 3, 1, 0.0, -1).compile().as_text()
  products = set(re.findall(r'= f32\[([0-9,]*)\]\S* dot\(', text))
  logits = {p for p in products if p.endswith(',40')}  # [2, 11, 40] may be [22, 40].
  assert logits and logits <= {'2,1,40', '2,40'}, logits
  # Over the cache's 11 + 3 slots, a decoding step's one query per row and head alone (the
  # heads may be grouped as [batch, kv_heads, queries, slots]).
  spans = [[int(n) for n in p.split(',')] for p in products if '14' in p.split(',')]
  assert spans and all(np.prod(p) <= 2 * cfg.num_heads * 14 for p in spans), spans


def test_sampling_at_temperature_zero_is_greedy():
  """A traced temperature of 0 takes the argmax: the same tokens as generate's greedy search
  (itself checked against decoding without a cache above)."""
  model, prompt = model_for('rope'), _prompt(4)
  got = _sample_model(model, prompt, jax.random.key(0), jnp.float32(0.0), 6)
  greedy = decode.generate(model, prompt, max_new_tokens=6, eos_id=-1)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(greedy))


@pytest.mark.parametrize('temperature,top_k,top_p', [(0.7, 1, 1.0), (3.0, 1, 1.0),
                                                     (3.0, 0, 1e-6)])
def test_top_k_one_or_a_tiny_nucleus_is_greedy(temperature, top_k, top_p):
  """Keeping one token (top_k=1, or a nucleus smaller than the top token) leaves no choice: on
  the toy model whose distribution follows the history, sampling equals greedy search."""
  first, cache = toy_start(64)
  greedy = decode.greedy_search(toy_step, first, cache, jnp.zeros(64, jnp.int32), max_len=6,
                                eos_id=-1)
  run = lambda **kw: np.asarray(_sample_jit(first, cache, jax.random.key(11),
                                            jnp.float32(temperature), jnp.float32(top_p),
                                            step_fn=toy_step, max_len=6, **kw))
  np.testing.assert_array_equal(run(top_k=top_k, use_top_p=top_p < 1), np.asarray(greedy))
  assert (run() != np.asarray(greedy)).any()  # Unfiltered, the samples do vary.


def test_a_seed_repeats_its_samples_and_another_seed_differs():
  """On a random model (nearly uniform over 40 tokens), 3 rows x 6 tokens of one prompt: the
  same seed gives the same tokens, another seed and another row different ones."""
  model, prompt = model_for('rope'), _prompt(6, same=True)
  run = lambda seed: np.asarray(decode.generate(model, prompt, max_new_tokens=6, eos_id=-1,
                                                temperature=1.0, top_p=0.99, seed=seed))
  first = run(0)
  np.testing.assert_array_equal(run(0), first)
  np.testing.assert_array_equal(run(jax.random.key(0)), first)  # An int seed is key(seed).
  assert (run(1) != first).any()
  assert len({tuple(row) for row in first}) == 3  # Rows of one prompt draw their own tokens.


def test_changing_the_seed_temperature_or_top_p_does_not_recompile():
  model, prompt = model_for('rope'), _prompt(7)
  run = lambda **kw: decode.generate(model, prompt, max_new_tokens=6, eos_id=-1, **kw)
  run(temperature=1.0, top_p=0.9, seed=0)
  compiled = decode._sample._cache_size()  # pylint: disable=protected-access
  run(temperature=0.5, top_p=0.8, seed=1)
  run(temperature=2.0, top_p=0.5, seed=jax.random.key(9))
  assert decode._sample._cache_size() == compiled  # pylint: disable=protected-access


def test_sampling_refuses_bad_settings_and_beam_search():
  model = model_for('rope')
  prompt = jnp.ones((1, 3), jnp.int32)
  for kw, match in [({'temperature': -0.5}, 'temperature=-0.5 must be >= 0'),
                    ({'top_k': -1}, 'top_k=-1 must be >= 0'),
                    ({'top_p': 0.0}, r'top_p=0.0 must be in \(0, 1\]'),
                    ({'top_p': 1.5}, r'top_p=1.5 must be in \(0, 1\]'),
                    ({'max_new_tokens': 0}, 'max_new_tokens=0 must be >= 1'),
                    ({'temperature': 1.0, 'beam_size': 2}, 'choose one')]:
    with pytest.raises(errors.ConfigError, match=match):
      decode.generate(model, prompt, **{'max_new_tokens': 3, **kw})


def _softmax64(logits):
  z = np.asarray(logits, np.float64)
  z = np.exp(z - z.max(-1, keepdims=True))
  return z / z.sum(-1, keepdims=True)


def kept_numpy(logits, temperature=1.0, top_k=0, top_p=1.0):
  """The tokens sampling may emit, in float64 numpy: the top_k most likely (ties to the lower
  id), then the fewest most likely of those whose renormalised probability reaches top_p."""
  z = np.asarray(logits, np.float64) / temperature
  order = np.argsort(-z, kind='stable')[:top_k or None]
  if top_p < 1.0:
    cumulative = np.cumsum(_softmax64(z[order]))
    order = order[:int(np.argmax(cumulative >= top_p)) + 1]
  keep = np.zeros(z.shape, bool)
  keep[order] = True
  return keep


@pytest.mark.parametrize('probs,top_p,kept', [
    ([0.5, 0.3, 0.15, 0.05], 0.8, [1, 1, 0, 0]),  # 0.5 + 0.3 reaches 0.8 exactly.
    ([0.5, 0.3, 0.15, 0.05], 0.81, [1, 1, 1, 0]),
    ([0.5, 0.3, 0.15, 0.05], 0.5, [1, 0, 0, 0]),
    ([0.5, 0.3, 0.15, 0.05], 1e-9, [1, 0, 0, 0]),  # Never empty.
    ([0.05, 0.3, 0.5, 0.15], 0.8, [0, 1, 1, 0]),  # Not sorted by id.
    ([0.25, 0.25, 0.25, 0.25], 0.5, [1, 1, 0, 0]),  # Ties: lower ids first.
    ([0.5, 0.3, 0.15, 0.05], 1.0, [1, 1, 1, 1]),
])
def test_top_p_keeps_the_smallest_set_reaching_p(probs, top_p, kept):
  filtered = np.asarray(decode.filter_logits(jnp.log(jnp.asarray(probs)), top_p=top_p))
  np.testing.assert_array_equal(np.isfinite(filtered), np.asarray(kept, bool))
  np.testing.assert_allclose(filtered[np.isfinite(filtered)],
                             np.log(np.asarray(probs))[np.asarray(kept, bool)], rtol=1e-6)


def test_top_k_and_temperature_filter_examples():
  logits = jnp.asarray([[1.0, 3.0, 2.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
  np.testing.assert_array_equal(np.asarray(decode.filter_logits(logits, top_k=2)),
                                [[-np.inf, 3.0, 2.0, -np.inf], [1.0, 1.0, -np.inf, -np.inf]])
  np.testing.assert_array_equal(np.asarray(decode.filter_logits(logits, top_k=1))[1],
                                [1.0, -np.inf, -np.inf, -np.inf])  # Like argmax.
  np.testing.assert_allclose(np.asarray(decode.filter_logits(logits, temperature=2.0)),
                             np.asarray(logits) / 2)
  np.testing.assert_array_equal(np.asarray(decode.filter_logits(logits, top_k=4)), logits)
  # Top-p applies to the distribution left by top-k: [.4, .3] renormalised is [4/7, 3/7], so
  # p=0.5 keeps one token, where top-p alone would keep two.
  probs = jnp.log(jnp.asarray([0.1, 0.4, 0.2, 0.3]))
  assert np.isfinite(np.asarray(decode.filter_logits(probs, top_k=2, top_p=0.5))).sum() == 1
  assert np.isfinite(np.asarray(decode.filter_logits(probs, top_p=0.5))).sum() == 2


FIXED_PROBS = np.asarray([0.35, 0.25, 0.2, 0.1, 0.07, 0.03])


@pytest.mark.parametrize('temperature', [1.0, 2.0, 0.5])
def test_samples_follow_the_tempered_distribution(temperature):
  """4,000 rows x 5 steps from fixed logits: a chi-square goodness-of-fit test against
  softmax(logits / temperature) in float64; consecutive steps draw independently (step keys
  differ: equal neighbours as often as sum p^2)."""
  rows, steps = 4000, 5
  logits = jnp.tile(jnp.log(jnp.asarray(FIXED_PROBS, jnp.float32)), (rows, 1))
  tokens = np.asarray(_sample_jit(logits, {'logits': logits}, jax.random.key(2021),
                                  jnp.float32(temperature), jnp.float32(1.0),
                                  step_fn=fixed_step, max_len=steps))
  expected = _softmax64(np.log(FIXED_PROBS) / temperature)
  counts = np.bincount(tokens.ravel(), minlength=len(FIXED_PROBS))
  assert counts.sum() == rows * steps
  assert stats.chisquare(counts, expected * rows * steps).pvalue > 0.001
  same = int((tokens[:, 0] == tokens[:, 1]).sum())
  assert stats.binomtest(same, rows, float((expected ** 2).sum())).pvalue > 0.001


@pytest.mark.parametrize('temperature,top_k,top_p', [(1.0, 3, 1.0), (1.0, 0, 0.7),
                                                     (1.5, 5, 0.6), (0.8, 0, 0.9)])
def test_top_k_and_top_p_never_leave_the_kept_set(temperature, top_k, top_p):
  """Random logits per row (8 distributions x 500 rows x 4 steps): every sampled token is in
  the kept set computed in numpy, every kept token likely enough to appear does, and within
  the set the counts fit the renormalised distribution."""
  base = np.random.default_rng(8).normal(0.0, 2.0, (8, 12)).astype(np.float32)
  repeats, steps = 500, 4
  logits = jnp.asarray(np.repeat(base, repeats, axis=0))
  tokens = np.asarray(_sample_jit(logits, {'logits': logits}, jax.random.key(3),
                                  jnp.float32(temperature), jnp.float32(top_p),
                                  step_fn=fixed_step, max_len=steps, top_k=top_k,
                                  use_top_p=top_p < 1.0))
  for d in range(len(base)):
    keep = kept_numpy(base[d], temperature, top_k, top_p)
    counts = np.bincount(tokens[d * repeats:(d + 1) * repeats].ravel(), minlength=12)
    assert not counts[~keep].any(), (d, counts, keep)
    probs = _softmax64(np.where(keep, base[d] / temperature, -np.inf))
    n = repeats * steps
    assert (counts[probs * n > 30] > 0).all()
    if keep.sum() > 1:
      pooled = probs[keep] * n >= 5  # Cells with enough expected counts; the rest pooled.
      obs = np.append(counts[keep][pooled], counts[keep][~pooled].sum())
      exp = np.append(probs[keep][pooled] * n, probs[keep][~pooled].sum() * n)
      obs, exp = obs[exp > 0], exp[exp > 0]
      assert stats.chisquare(obs, exp).pvalue > 0.001, (d, counts, probs)
