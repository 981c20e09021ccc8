"""Decoding with a key/value cache equals decoding without one; beam search finds the best."""

import itertools

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import decode
from roformer import models

KINDS = ['none', 'sinusoidal', 'learned', 'rope', 'xpos', 'shaw', 'xl', 't5', 'alibi', 'kerple',
         'fire', 'cope']


def model_for(kind, num_layers=None, **rope):
  cfg = test_config.get_config(kind).model
  cfg.vocab_size = 40
  cfg.num_layers = num_layers or cfg.num_layers
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


@pytest.mark.parametrize('kind', KINDS)
def test_cached_logits_equal_full_forward(kind):
  """Prefill 4 tokens, then feed one token at a time: each step's logits equal the logits of
  a full forward pass over the whole prefix (positions from the cache index)."""
  model = model_for(kind)
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
  positions = jnp.broadcast_to(jnp.arange(9), (2, 9))
  cache = model.init_cache(2, 12)
  logits, cache = _decode(model, tokens[:, :2], positions[:, :2], cache)
  for t in range(2, 9):
    logits, cache = _decode(model, tokens[:, t:t + 1], positions[:, t:t + 1], cache)
    # The prefix 0..t alone, padded to one shape (padding: position 0, segment 0, masked).
    in_prefix = jnp.arange(9) <= t
    prefix = np.asarray(_forward(model, tokens, jnp.where(in_prefix, positions, 0),
                                 jnp.broadcast_to(in_prefix, tokens.shape).astype(jnp.int32)))
    np.testing.assert_allclose(np.asarray(logits)[:, 0], prefix[:, t], atol=1e-4)
  plain = _forward(model_for('rope', num_layers), tokens, positions, jnp.ones_like(tokens))
  assert (original_length < 9) == (np.abs(prefix - np.asarray(plain)).max() > 1e-3)  # Scaled.


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
