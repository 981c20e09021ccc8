"""LongRoPE (`rope.scaling.kind='longrope'`, Ding et al. 2024, Phi-3's context extension): each
rotated pair's frequency divided by its own factor, the short set up to the original length and
the long set for a call that reaches past it, q and k times an attention factor, on every
dimension or (as transformers) on the rotated ones alone."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roformer import decode
from roformer import errors
from roformer import models
from roformer import positions
from roformer import resolve
from roformer.data import tokenizer as tokenizer_lib
from roformer.tasks import translation
from tests import kinds
from tests.test_decode import cached_steps_equal_prefix_passes
from tests.test_decode import model_for
from tests.test_decode import uncached_greedy
from tests.test_schemes import HEAD_DIM
from tests.test_schemes import make
from tests.test_schemes import random_qk

SHORT, LONG = (1.0, 1.5, 2.0, 3.0), (1.0, 4.0, 9.0, 20.0)  # HEAD_DIM / 2 pairs.
ORIGINAL = 6


def longrope(**fields):
  options = {'kind': 'longrope', 'factor': 4.0, 'original_length': ORIGINAL,
             'short_factor': SHORT, 'long_factor': LONG, **fields}
  return {f'rope.scaling.{k}': v for k, v in options.items()}


def reference_logits(q, k, pos, inv_freq, factor, rotated_dims):
  """float64 q_m . k_n / sqrt(d) with the first `rotated_dims` dimensions of each (interleaved
  pairs) rotated by m theta and n theta and multiplied by `factor`, the others unchanged."""
  def rotate(x, m):
    x = np.array(x, np.float64)
    a = m * inv_freq
    even, odd = x[..., 0:rotated_dims:2].copy(), x[..., 1:rotated_dims:2].copy()
    x[..., 0:rotated_dims:2] = (even * np.cos(a) - odd * np.sin(a)) * factor
    x[..., 1:rotated_dims:2] = (even * np.sin(a) + odd * np.cos(a)) * factor
    return x
  pos = np.asarray(pos, np.float64)[..., None, None]
  qr, kr = rotate(np.asarray(q), pos), rotate(np.asarray(k), pos)
  return np.einsum('bqhd,bkhd->bhqk', qr, kr) / np.sqrt(q.shape[-1])


def config(fields: dict):
  """configs/test.py's RoPE model with the position fields given ('rope.scaling.kind': ..)."""
  cfg = kinds.tiny_config('rope')
  kinds.set_fields(cfg.model.position, fields)
  return cfg


def layer_logits(layer, q, k, pos):
  q, k = layer.rotate(q, k, pos, pos)
  return np.asarray(jnp.einsum('bqhd,bkhd->bhqk', q, k) * q.shape[-1] ** -0.5, np.float64)


def test_the_frequencies_divide_each_pair_by_its_factor_and_the_attention_factor_follows_s():
  """Short set theta_i / short_i; attention factor sqrt(1 + ln s / ln L), 1 at s = 1, and a
  given one wins."""
  theta = 10000.0 ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
  sc = lambda **f: config(longrope(**f)).model.position.rope.scaling
  freqs, factor = positions.scaled_frequencies(HEAD_DIM, 10000.0, sc())
  np.testing.assert_allclose(freqs, theta / np.asarray(SHORT), rtol=1e-12)
  assert factor == pytest.approx(np.sqrt(1 + np.log(4) / np.log(ORIGINAL)), rel=1e-12)
  assert positions.scaled_frequencies(HEAD_DIM, 10000.0, sc(factor=1.0))[1] == 1.0
  assert positions.scaled_frequencies(HEAD_DIM, 10000.0, sc(attention_factor=1.3))[1] == 1.3


@pytest.mark.parametrize('length,factors', [(ORIGINAL, SHORT), (ORIGINAL + 1, LONG)])
def test_a_call_past_the_original_length_rotates_every_position_by_the_long_factors(
    length, factors):
  """Up to L positions, the short set; one more, and every position (the first included) is
  rotated by the long set: logits against the float64 formula."""
  layer = make('rope', **longrope())
  q, k = random_qk(3, length)
  pos = jnp.broadcast_to(jnp.arange(length), (2, length))
  theta = 10000.0 ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM) / np.asarray(factors)
  factor = np.sqrt(1 + np.log(4) / np.log(ORIGINAL))
  np.testing.assert_allclose(layer_logits(layer, q, k, pos),
                             reference_logits(q, k, pos, theta, factor, HEAD_DIM), atol=2e-5)


@pytest.mark.parametrize('dims', ['all', 'rotated'])
def test_the_attention_factor_multiplies_the_dimensions_it_names(dims):
  """With half of each head rotated, 'rotated' multiplies those dimensions of q and k alone
  (transformers' rule), 'all' every dimension (this project's YaRN): the same factor on
  different logits."""
  layer = make('rope', **{'rope.fraction': 0.5,
                          **longrope(short_factor=SHORT[:2], long_factor=LONG[:2],
                                     attention_factor=1.4, attention_factor_dims=dims)})
  q, k = random_qk(4, 5)
  pos = jnp.broadcast_to(jnp.arange(5), (2, 5))
  theta = 10000.0 ** (-np.arange(0, 4, 2) / 4) / np.asarray(SHORT[:2])
  if dims == 'rotated':
    want = reference_logits(q, k, pos, theta, 1.4, 4)
  else:
    want = reference_logits(q, k, pos, theta, 1.0, 4) * 1.4 ** 2
  np.testing.assert_allclose(layer_logits(layer, q, k, pos), want, atol=2e-5)


def test_cached_decoding_equals_a_full_pass_on_either_side_of_the_original_length():
  """Keys are cached before rotation: a step rotates every cached key by the set of the current
  length, as a full pass over the prefix does (one layer: exact at every length)."""
  model = model_for('rope', 1, **{'scaling__' + k.split('.')[-1]: v
                                  for k, v in longrope().items()})
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 40, (2, 9)))
  passes = cached_steps_equal_prefix_passes(model, tokens)
  # The long set changes the logits once the prefix passes L: the check is not vacuous.
  short, long = passes[ORIGINAL - 3][:, ORIGINAL - 1], passes[ORIGINAL - 2][:, ORIGINAL - 1]
  assert np.abs(short - long).max() > 1e-3


@pytest.mark.parametrize('fields,message', [
    (longrope(long_factor=(1.0, 2.0)), r'4 rotated pairs.*long_factor has 2\. Fix:'),
    (longrope(short_factor=()), r'short_factor has 0\. Fix:'),
    ({'rope.scaling.kind': 'yarn', 'rope.scaling.factor': 2.0, 'rope.scaling.original_length': 8,
      'rope.scaling.short_factor': SHORT}, r'shapes? LongRoPE only.*Fix: .*kind=longrope'),
    ({'rope.scaling.kind': 'linear', 'rope.scaling.factor': 2.0,
      'rope.scaling.attention_factor_dims': 'rotated'}, r'YaRN and LongRoPE only'),
])
def test_bad_longrope_options_are_refused_in_one_line(fields, message):
  cfg = config(fields)
  with pytest.raises(errors.ConfigError, match=message):
    resolve.validate(cfg)


def test_favor_features_with_longrope_are_refused_for_their_temperature():
  """FAVOR+'s rotated features carry no attention factor: refused with that reason, whatever
  the factors' length (they cannot fit both the heads' pairs and the features')."""
  from configs import performer  # pylint: disable=import-outside-toplevel
  cfg = performer.get_config('rope,features')
  pairs = positions.head_dim(cfg.model) // 2
  kinds.set_fields(cfg.model.position, longrope(short_factor=(1.0,) * pairs,
                                                long_factor=(2.0,) * pairs))
  with pytest.raises(errors.ConfigError, match="kind='longrope' scales the attention "
                                               'temperature.*Fix: .*rope_mode=qk'):
    resolve.validate(cfg)


def test_scale_rope_to_length_is_refused_for_longrope():
  cfg = config(longrope())
  with pytest.raises(errors.ConfigError, match='per-pair short_factor and long_factor'):
    positions.scheme('rope').length_factor(cfg.model.position)


def test_greedy_decoding_across_the_original_length_equals_full_passes():
  """decode.generate fills a fresh cache over the prefix where it crosses L, so every token is
  the argmax of a full pass over its prefix (two layers: one cache throughout would hold the
  second layer's keys of the short set; here its tokens would agree all the same, and the beam
  tests below, of one beam too, compare scores). A row that ended before the refill stays
  ended."""
  model = model_for('rope', 2, **{'scaling__' + k.split('.')[-1]: v
                                  for k, v in longrope().items()})
  assert model.cache_breaks == (ORIGINAL,)
  prompt = jnp.asarray(np.random.default_rng(2).integers(5, 40, (2, 3)))
  want = uncached_greedy(model, prompt, 6)  # Positions 3..8, those past 6 by the long set.
  got = np.asarray(decode.generate(model, prompt, max_new_tokens=6, eos_id=-1))
  np.testing.assert_array_equal(got, want)
  eos = int(want[0, 1])  # Row 0 ends by its second token, before the refill.
  ended = np.asarray(decode.generate(model, prompt, max_new_tokens=6, eos_id=eos))
  for got_row, row in zip(ended, want.tolist()):
    cut = row.index(eos) + 1 if eos in row else 6
    np.testing.assert_array_equal(got_row, row[:cut] + [decode.PAD_ID] * (6 - cut))


def _full_pass_step(model, prompt_length: int, max_new_tokens: int):
  """A step function for decode's searches without a cache: each step a full pass over the
  prefix (its ids carried in place of a cache), so that every position rotates by the set
  its prefix's length picks. One branch per static prefix length."""
  def full_pass(n):
    def run(ids):
      tokens = ids[:, :n]
      positions = jnp.broadcast_to(jnp.arange(n), tokens.shape)
      return model(tokens, positions, jnp.ones_like(tokens))[:, -1]
    return run

  def step_fn(token, position, ids):
    ids = jax.lax.dynamic_update_slice(ids, token, (0, position[0, 0]))
    branches = [full_pass(prompt_length + 1 + i) for i in range(max_new_tokens)]
    return jax.lax.switch(position[0, 0] - prompt_length, branches, ids), ids
  return step_fn


@pytest.mark.parametrize('beam_size', [1, 3])
def test_beam_search_across_the_original_length_equals_one_driven_by_full_passes(beam_size):
  """Beam search refills the cache where it crosses L too: each beam's cache is rebuilt over
  its own prefix (decode.refilling), so the search finds the beams and scores that the same
  search over full passes finds (with one beam: the greedy row). Without the refill, the
  scores differ by about 1e-3 here."""
  model = model_for('rope', 2, **{'scaling__' + k.split('.')[-1]: v
                                  for k, v in longrope().items()})
  prompt = jnp.asarray(np.random.default_rng(2).integers(5, 40, (2, 3)))
  steps = 6  # Positions 3..8, those past 6 by the long set.
  search = lambda step_fn, first, cache, start, refills=None: decode.beam_search(
      step_fn, first, cache, start, beam_size=beam_size, max_len=steps, eos_id=-1,
      refills=refills)
  got = jax.jit(lambda: search(*decode.causal_lm_start(model, prompt, steps)))()
  ids = jnp.zeros((2, 3 + steps), jnp.int32).at[:, :3].set(prompt)
  first = model(prompt, jnp.broadcast_to(jnp.arange(3), prompt.shape), jnp.ones_like(prompt))
  want = jax.jit(lambda: search(_full_pass_step(model, 3, steps), first[:, -1], ids,
                                jnp.full((2,), 3)))()
  np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
  np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), atol=2e-5)
  generated = decode.generate(model, prompt, max_new_tokens=steps, beam_size=beam_size,
                              eos_id=-1)
  np.testing.assert_array_equal(np.asarray(generated), np.asarray(want[0])[:, 0])
  if beam_size == 1:
    np.testing.assert_array_equal(np.asarray(generated), uncached_greedy(model, prompt, steps))


def test_a_translation_beam_search_across_the_original_length_equals_one_over_full_passes():
  """The translation decoder refills each beam's cache where it crosses L as the causal LM
  does (tasks/translation.py through decode.refilling): the same beams and scores as the same
  search over teacher-forced full passes of each prefix, the source repeated per beam (no
  hypothesis ends, so that every one crosses L)."""
  cfg = config(longrope())
  cfg.model.update(type='encoder_decoder', num_layers=2)  # One cache: stale second layer.
  model = models.create(cfg.model, seed=3)
  assert model.cache_breaks == (ORIGINAL,)
  src = jnp.asarray(np.random.default_rng(5).integers(5, 50, (2, 5)))
  beams, slots = 3, 10  # The target's positions 0..9: past 6 by the long set.
  search = jax.jit(lambda: translation.beams(model, src, beams, 0.6, slots, eos_id=-1))
  got = search()
  # The refill's logits are the last position's alone, as every step's: [rows, vocab 50].
  products = re.findall(r'= f32\[([0-9,]*)\]\S* dot\(', search.lower().compile().as_text())
  logits = {p for p in products if p.endswith(',50')}
  assert logits and logits <= {'2,50', '2,1,50', '6,50', '6,1,50'}, logits

  rows = jnp.repeat(src, beams, axis=0)
  def full_pass(n):
    def run(ids):
      tgt = ids[:, :n]
      return model(rows, jnp.broadcast_to(jnp.arange(5), rows.shape), jnp.ones_like(rows), tgt,
                   jnp.broadcast_to(jnp.arange(n), tgt.shape), jnp.ones_like(tgt))[:, -1]
    return run

  def step_fn(token, position, ids):
    ids = jax.lax.dynamic_update_slice(ids, token, (0, position[0, 0]))
    return jax.lax.switch(position[0, 0] - 1, [full_pass(n) for n in range(2, slots + 1)],
                          ids), ids

  bos = jnp.full((2, 1), tokenizer_lib.BOS_ID, jnp.int32)
  first = model(src, jnp.broadcast_to(jnp.arange(5), src.shape), jnp.ones_like(src), bos,
                jnp.zeros_like(bos), jnp.ones_like(bos))[:, -1]
  ids = jnp.zeros((2, slots), jnp.int32).at[:, 0].set(tokenizer_lib.BOS_ID)
  want = jax.jit(lambda: decode.beam_search(
      step_fn, first, ids, jnp.ones((2,), jnp.int32), beam_size=beams, max_len=slots - 1,
      eos_id=-1, alpha=0.6))()
  np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
  np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), atol=2e-5)
