"""relative_distances against references written pair by pair from each paper's description
(position ids of queries and keys, as the papers build them), hand-computed entries, and the
properties every remap must keep."""

import re

import numpy as np
import pytest

from roformer import errors
from roformer.positions import relative_distances


def _pairs(length, distance):
  """[length, length] float64 from distance(i, j) for j <= i, zeros above the diagonal."""
  out = np.zeros((length, length))
  for i in range(length):
    for j in range(i + 1):
      out[i, j] = distance(i, j)
  return out


def self_extend_reference(length, neighbor_window, group_size):
  """Jin et al. 2024: neighbour tokens keep their positions; outside the window, queries and
  keys use grouped positions pos // G, the queries' shifted by W - W // G so that the grouped
  distances continue from the window's edge."""
  shift = neighbor_window - neighbor_window // group_size
  def distance(i, j):
    if i - j < neighbor_window:
      return i - j
    return (i // group_size + shift) - j // group_size
  return _pairs(length, distance)


def dca_reference(length, chunk_size, local_window):
  """An et al. 2024: keys carry position ids j mod s; queries carry one id per kind of
  attention: intra-chunk i mod s, successive-chunk [s, s + 1, ..., s + w - 1, c - 1, ...] by
  their index in the chunk, inter-chunk c - 1."""
  s, c = chunk_size, chunk_size + local_window
  key_id = [j % s for j in range(length)]
  intra = [i % s for i in range(length)]
  successive = [s + i % s if i % s < local_window else c - 1 for i in range(length)]
  inter = [c - 1] * length
  def distance(i, j):
    if i // s == j // s:
      return intra[i] - key_id[j]
    if i // s == j // s + 1:
      return successive[i] - key_id[j]
    return inter[i] - key_id[j]
  return _pairs(length, distance)


def sinks_reference(length, sink_tokens, window):
  """Xiao et al. 2023: the cache keeps the first S tokens and the last W (the query among
  them) and numbers them by slot; a key not in the query's cache is not seen (NaN)."""
  out = np.zeros((length, length))
  for i in range(length):
    kept = list(range(i + 1)) if i < sink_tokens + window else (
        list(range(sink_tokens)) + list(range(i - window + 1, i + 1)))
    slot = {token: n for n, token in enumerate(kept)}
    for j in range(i + 1):
      out[i, j] = slot[i] - slot[j] if j in slot else np.nan
  return out


def test_none_is_the_plain_distance():
  got = relative_distances('none', 5)
  assert got.dtype == np.float64
  np.testing.assert_array_equal(got, np.tril(np.arange(5)[:, None] - np.arange(5)[None, :]))


def test_rerope_and_its_leaky_form_against_their_definitions():
  np.testing.assert_array_equal(relative_distances('rerope', 12, window=4),
                                _pairs(12, lambda i, j: min(i - j, 4)))
  np.testing.assert_allclose(
      relative_distances('leaky_rerope', 12, window=4, k=3.0),
      _pairs(12, lambda i, j: i - j if i - j < 4 else 4 + (i - j - 4) / 3), rtol=1e-15)
  assert relative_distances('leaky_rerope', 12, window=4, k=3.0)[11, 0] == 4 + 7 / 3  # By hand.


@pytest.mark.parametrize('length,window,group', [(10, 4, 2), (37, 8, 3), (64, 16, 4), (20, 5, 1)])
def test_self_extend_against_grouped_positions(length, window, group):
  got = relative_distances('self_extend', length, neighbor_window=window, group_size=group)
  np.testing.assert_array_equal(got, self_extend_reference(length, window, group))


def test_self_extend_by_hand():
  got = relative_distances('self_extend', 10, neighbor_window=4, group_size=2)
  # i=5, j=0: d=5 >= 4, so 5//2 - 0//2 + 4 - 4//2 = 2 + 2 = 4; i=9, j=0: 4 + 2 = 6.
  assert got[5, 0] == 4 and got[9, 0] == 6 and got[9, 6] == 3  # d=3 < 4 stays.


def test_string_shifts_the_distances_past_the_shift():
  np.testing.assert_array_equal(relative_distances('string', 16, shift=10, local_window=3),
                                _pairs(16, lambda i, j: i - j if i - j < 10 else i - j - 7))


@pytest.mark.parametrize('length,chunk,window', [(10, 4, 2), (40, 8, 4), (33, 6, 6), (24, 5, 0)])
def test_dca_against_the_papers_position_ids(length, chunk, window):
  got = relative_distances('dca', length, chunk_size=chunk, local_window=window)
  np.testing.assert_array_equal(got, dca_reference(length, chunk, window))
  below = np.tril(np.ones((length, length), bool))
  assert got[below].min() >= 0 and got[below].max() <= chunk + window - 1  # Trained distances.


@pytest.mark.parametrize('length,sinks,window', [(12, 2, 4), (30, 4, 8), (20, 0, 5), (9, 3, 8)])
def test_sinks_against_a_streaming_cache(length, sinks, window):
  got = relative_distances('sinks', length, sink_tokens=sinks, window=window)
  np.testing.assert_array_equal(got, sinks_reference(length, sinks, window))  # NaN where unseen.


def test_dca_by_hand():
  got = relative_distances('dca', 10, chunk_size=4, local_window=2)  # c = 6, top seat 5.
  assert got[6, 4] == 2  # Same chunk: 6 mod 4 - 4 mod 4.
  assert got[5, 3] == 2  # Previous chunk, 5 mod 4 = 1 < w: seat 4 + 1 = 5, key 3.
  assert got[6, 3] == 2  # Previous chunk, 6 mod 4 = 2 = w: seat c - 1 = 5, key 3.
  assert got[9, 1] == 4  # Two chunks back: seat 5, key 1.


@pytest.mark.parametrize('method,options', [
    ('rerope', {'window': 6}), ('leaky_rerope', {'window': 6, 'k': 2.0}),
    ('self_extend', {'neighbor_window': 6, 'group_size': 3}),
    ('string', {'shift': 6, 'local_window': 2}), ('dca', {'chunk_size': 6, 'local_window': 0})])
def test_every_remap_keeps_short_distances_and_never_lengthens_one(method, options):
  got, plain = relative_distances(method, 30, **options), relative_distances('none', 30)
  short = (plain < 6) & (np.arange(30)[:, None] // 6 == np.arange(30)[None, :] // 6)
  np.testing.assert_array_equal(got[short], plain[short])  # DCA: within a chunk only.
  assert (got <= plain).all() and (got >= 0).all() and not np.triu(got, 1).any()


def test_identity_settings_give_the_plain_distances():
  plain = relative_distances('none', 20)
  np.testing.assert_array_equal(relative_distances('rerope', 20, window=20), plain)
  np.testing.assert_array_equal(
      relative_distances('self_extend', 20, neighbor_window=3, group_size=1), plain)
  np.testing.assert_array_equal(relative_distances('string', 20, shift=20, local_window=5), plain)
  np.testing.assert_array_equal(relative_distances('dca', 20, chunk_size=20, local_window=0),
                                plain)


@pytest.mark.parametrize('method,options,message', [
    ('yarn', {}, r"unknown method. Fix: one of \('none'"),
    ('rerope', {}, r"missing \['window'\]"),
    ('rerope', {'window': 4, 'k': 2}, r"unknown options \['k'\]"),
    ('self_extend', {'neighbor_window': 4, 'group_size': 0}, 'group_size=0 must be an integer >= 1'),
    ('self_extend', {'neighbor_window': 4, 'group_size': 1.5}, 'group_size=1.5 must be an integer'),
    ('rerope', {'window': 0}, 'window=0 must be an integer >= 1'),
    ('leaky_rerope', {'window': 2, 'k': 0.5}, 'k=0.5 must be a number >= 1'),
    ('string', {'shift': 4, 'local_window': 4}, 'local_window=4 must be below shift=4'),
    ('dca', {'chunk_size': 0, 'local_window': 2}, 'chunk_size=0 must be an integer >= 1'),
])
def test_bad_arguments_name_the_option(method, options, message):
  with pytest.raises(errors.ConfigError, match=message):
    relative_distances(method, 8, **options)


def rope_logits_reference(q, k, distances, base=10000.0):
  """float64 q_i^T R(r_ij) k_j for one head: q_i rotated by r_ij theta (RoFormer's interleaved
  pairs), dotted with the unrotated k_j, for j <= i."""
  length, d = q.shape
  theta = base ** (-np.arange(0, d, 2) / d)
  out = np.zeros((length, length))
  for i in range(length):
    for j in range(i + 1):
      c, s = np.cos(distances[i, j] * theta), np.sin(distances[i, j] * theta)
      rotated = np.empty(d)
      rotated[0::2] = q[i, 0::2] * c - q[i, 1::2] * s
      rotated[1::2] = q[i, 1::2] * c + q[i, 0::2] * s
      out[i, j] = rotated @ k[j]
  return out


@pytest.mark.parametrize('method,options', [
    ('none', {}), ('rerope', {'window': 5}), ('leaky_rerope', {'window': 5, 'k': 4.0}),
    ('self_extend', {'neighbor_window': 6, 'group_size': 3}),
    ('string', {'shift': 9, 'local_window': 4}), ('dca', {'chunk_size': 7, 'local_window': 3}),
    ('sinks', {'sink_tokens': 3, 'window': 6})])
def test_remapped_logits_are_rope_at_the_remapped_distances(method, options):
  """The per-region rotations give, for every pair, RoPE's float64 logit at the distance
  relative_distances returns (so the regions partition the pairs and each one's positions
  differ by that distance)."""
  from roformer.positions import remapped_rope_logits, rope_frequencies  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  length, heads, d = 26, 2, 16
  q, k = rng.normal(size=(2, 1, length, heads, d))
  got = np.asarray(remapped_rope_logits(q, k, rope_frequencies(d, 10000.0), method, **options))
  distances = relative_distances(method, length, **options)
  seen = ~np.isnan(distances)
  for h in range(heads):
    want = rope_logits_reference(q[0, :, h], k[0, :, h], np.where(seen, distances, 0.0))
    np.testing.assert_allclose(got[0, h][seen], want[seen], atol=2e-5 * np.abs(want).max())


def _model(method='none', seed=5, num_layers=2, **options):
  import kinds  # pylint: disable=g-import-not-at-top
  from roformer import models  # pylint: disable=g-import-not-at-top
  cfg = kinds.tiny_config('rope', dropout=0.0, num_layers=num_layers).model
  cfg.position.rope.remap.method = method
  cfg.position.rope.remap.update(options)
  return models.create(cfg, seed=seed)


def _full(model, tokens):
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  return np.asarray(nnx.jit(lambda m, t, p: m(t, p, jnp.ones_like(t)))(model, tokens, pos))


def test_a_remap_that_moves_no_distance_leaves_the_model_unchanged():
  """ReRoPE with a window past the row and Self-Extend with groups of 1 are RoPE itself: the
  model's logits equal the plain model's (same parameters)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 14)))
  plain = _full(_model(), tokens)
  np.testing.assert_allclose(_full(_model('rerope', window=14), tokens), plain, atol=1e-5)
  np.testing.assert_allclose(
      _full(_model('self_extend', neighbor_window=2, group_size=1), tokens), plain, atol=1e-5)
  np.testing.assert_allclose(_full(_model('sinks', sink_tokens=4, window=10), tokens), plain,
                             atol=1e-5)  # 4 + 10 slots hold the whole row: nothing evicted.
  moved = _full(_model('rerope', window=3), tokens)
  np.testing.assert_allclose(moved[:, :4], plain[:, :4], atol=1e-5)  # Distances below 3 only.
  assert np.abs(moved[:, 6:] - plain[:, 6:]).max() > 1e-3


def test_a_token_the_streaming_cache_evicted_is_not_seen():
  """One layer with 2 sinks and a window of 4: the output at position 12 reads tokens 0, 1
  and 9-12 only; changing token 5 leaves it, changing a sink does not."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  model = _model('sinks', num_layers=1, sink_tokens=2, window=4)
  tokens = jnp.asarray(np.random.default_rng(2).integers(5, 50, (1, 13)))
  base = _full(model, tokens)
  np.testing.assert_array_equal(_full(model, tokens.at[0, 5].set(4))[0, 12], base[0, 12])
  assert np.abs(_full(model, tokens.at[0, 1].set(4))[0, 12] - base[0, 12]).max() > 1e-4


_REMAPS = [('rerope', {'window': 5}), ('leaky_rerope', {'window': 4, 'k': 2.0}),
           ('self_extend', {'neighbor_window': 4, 'group_size': 3}),
           ('string', {'shift': 6, 'local_window': 2}),
           ('dca', {'chunk_size': 5, 'local_window': 2}),
           ('sinks', {'sink_tokens': 2, 'window': 4})]


def _packed(model, tokens):
  """Logits of two packed documents per row (6 and 9 tokens), positions restarting."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  seg = jnp.asarray([[1] * 6 + [2] * 9] * tokens.shape[0])
  pos = jnp.asarray([list(range(6)) + list(range(9))] * tokens.shape[0])
  return np.asarray(nnx.jit(lambda m, t, p, s: m(t, p, s))(model, tokens, pos, seg))


# Each method once, with packed documents and in turn nothing more, SSMax or a window (leaky
# ReRoPE with SSMax and the sinks with a window by default, the others with -m slow).
_FIELDS = ({}, {'attention.ssmax': True}, {'layer_windows': (6, 0)})


# Dynamic scaling's frequencies follow the row's length, not a block's.
_DYNAMIC = {'position.rope.scaling.kind': 'dynamic', 'position.rope.scaling.factor': 2.0,
            'position.rope.scaling.original_length': 4}


@pytest.mark.parametrize('method,options,fields', [
    pytest.param(method, options, _FIELDS[n % 3], marks=() if n in (1, 5) else pytest.mark.slow)
    for n, (method, options) in enumerate(_REMAPS)] + [('dca', _REMAPS[4][1], _DYNAMIC)])
def test_a_remap_over_causal_blocks_of_queries_equals_the_whole_matrix(method, options, fields):
  """Queries in blocks of 4 (each over the keys up to its last row, from its window's first)
  give the logits of the whole [L, L] remapped matrix, with packed documents, SSMax's per-row
  factor, a sliding window and dynamic scaling."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import kinds  # pylint: disable=g-import-not-at-top
  from roformer import models  # pylint: disable=g-import-not-at-top
  tokens = jnp.asarray(np.random.default_rng(3).integers(5, 50, (2, 15)))
  got = {}
  for rows in (0, 4):
    cfg = kinds.tiny_config('rope', dropout=0.0, num_layers=2, causal_block=rows).model
    kinds.set_fields(cfg, fields)
    cfg.position.rope.remap.method = method
    cfg.position.rope.remap.update(options)
    got[rows] = _packed(models.create(cfg, seed=5), tokens)
  np.testing.assert_allclose(got[4], got[0], rtol=1e-5, atol=1e-5)


def test_a_remap_over_causal_blocks_holds_one_blocks_logits_at_a_time():
  """ReRoPE's two [heads, L, L] products are what a whole-matrix remap holds; over causal
  blocks of queries (four of 256 rows at L = 1024) the compiled forward pass needs less scratch
  memory than those two products alone."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import kinds  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from roformer import models  # pylint: disable=g-import-not-at-top
  tokens = jnp.ones((1, 1024), jnp.int32)
  pos = jnp.arange(1024)[None]
  temp = {}
  # causal_block=64 is a lower bound: at L = 1024 the remap takes max(64, 1024 / 4) = 256 rows.
  for name, rows in (('whole', 0), ('blocked', 64)):
    cfg = kinds.tiny_config('rope', dropout=0.0, num_layers=1, causal_block=rows).model
    cfg.position.rope.remap.update(method='rerope', window=16)
    graph, state = nnx.split(models.create(cfg, seed=0))
    forward = lambda state, t, p: nnx.merge(graph, state)(t, p, jnp.ones_like(t))
    compiled = jax.jit(forward).lower(state, tokens, pos).compile()
    temp[name] = compiled.memory_analysis().temp_size_in_bytes
  whole = 2 * cfg.num_heads * 1024 ** 2 * 4  # Two float32 products, one per region.
  assert temp['whole'] >= whole > temp['blocked'], temp


_SLOW = pytest.mark.slow  # The same code path as the default cases (regions over the cache).


@pytest.mark.parametrize('method,options', [
    ('self_extend', {'neighbor_window': 4, 'group_size': 3}),
    pytest.param('rerope', {'window': 5}, marks=_SLOW),
    pytest.param('leaky_rerope', {'window': 4, 'k': 2.0}, marks=_SLOW),
    pytest.param('string', {'shift': 6, 'local_window': 2}, marks=_SLOW),
    ('dca', {'chunk_size': 5, 'local_window': 2}), ('sinks', {'sink_tokens': 2, 'window': 4})])
def test_decoding_a_remapped_model_with_the_cache_equals_the_full_pass(method, options):
  """The cache holds keys before any rotation, so each decoding step remaps its own
  distances to every cached key as the full pass does."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import kinds  # pylint: disable=g-import-not-at-top
  tokens = jnp.asarray(np.random.default_rng(1).integers(5, 50, (2, 13)))
  kinds.assert_decoding_equals_full_pass(_model(method, **options), tokens, (5, 1, 1, 3, 1, 2),
                                         max_len=16)


@pytest.mark.parametrize('model,message', [
    ({'position.kind': 'xpos'}, 'it remaps plain RoPE'),
    ({'attention.kind': 'stick_breaking'}, "attention.kind='stick_breaking' has no softmax"),
    ({'attention.kind': 'favor'}, "attention.kind='favor' has no softmax.*distance remap"),
    ({'position.rope.rotate_values': True}, 'rotate_values rotates values'),
    ({'position.rope.remap.local_window': 9},
     r'config.model.position.rope.remap: local_window=9 must be below shift=6.*Fix: '),
    ({'attention_impl': 'xla'}, "on the einsum path, not attention_impl='xla'"),
])
def test_a_remap_the_model_cannot_take_is_refused_naming_the_field(model, message):
  import kinds  # pylint: disable=g-import-not-at-top
  from roformer import resolve  # pylint: disable=g-import-not-at-top
  cfg = kinds.tiny_config('rope')
  cfg.model.position.rope.remap.update(method='string', shift=6, local_window=2)
  kinds.set_fields(cfg.model, model)
  with pytest.raises(errors.ConfigError, match=message):
    resolve.validate(cfg)


@pytest.mark.parametrize('options,fine', [
    ({'method': 'rerope', 'window': 31}, True),  # Distances up to 31 of a 32-token training.
    ({'method': 'rerope', 'window': 32}, False),
    ({'method': 'leaky_rerope', 'window': 40}, False),
    ({'method': 'self_extend', 'neighbor_window': 32}, False),
    ({'method': 'string', 'shift': 32, 'local_window': 2}, True),
    ({'method': 'string', 'shift': 33, 'local_window': 2}, False),
    ({'method': 'dca', 'chunk_size': 30, 'local_window': 2}, True),
    ({'method': 'dca', 'chunk_size': 30, 'local_window': 3}, False),
    ({'method': 'sinks', 'sink_tokens': 4, 'window': 29}, False),
])
def test_a_window_chunk_or_shift_past_the_trained_length_is_refused(options, fine):
  """Trained at 32 tokens, a remap may keep true distances up to 31 and no further."""
  import kinds  # pylint: disable=g-import-not-at-top
  from roformer import resolve  # pylint: disable=g-import-not-at-top
  cfg = kinds.tiny_config('rope')
  cfg.model.position.rope.remap.update(options)
  if fine:
    resolve.validate(cfg)
    return
  with pytest.raises(errors.ConfigError, match=r'past the 32 positions the model was trained '
                     r'on \(config.data.seq_len=32\).*Fix: .* at most 3[12]\.') as e:
    resolve.validate(cfg)
  assert '\n' not in str(e.value)
  bound = int(re.search(r'at most (\d+)\.', str(e.value)).group(1))
  single = [name for name in ('window', 'neighbor_window', 'shift') if name in options
            and options['method'] not in ('dca', 'sinks')]  # Their bound is on a sum.
  if single:  # The fix it names is accepted.
    cfg.model.position.rope.remap[single[0]] = bound
    resolve.validate(cfg)


def test_pose_training_covers_the_remap_window_it_trained_for():
  """With PoSE's ids covering 64 positions, a window of 40 is within what was trained."""
  import kinds  # pylint: disable=g-import-not-at-top
  from roformer import resolve  # pylint: disable=g-import-not-at-top
  cfg = kinds.tiny_config('rope')
  cfg.model.position.rope.remap.update(method='rerope', window=40)
  with pytest.raises(errors.ConfigError, match='trained on'):
    resolve.validate(cfg)
  cfg.train.pose_target_length = 64
  resolve.validate(cfg)


@pytest.mark.parametrize('options,message', [
    ({'window': 32}, r"remap.window=32 is read by the remap methods rerope, leaky_rerope, "
                     r"sinks, and .*method is 'none'.*Fix: .*method=rerope, or drop it \(its "
                     r"default is 256\)"),
    ({'method': 'rerope', 'window': 8, 'group_size': 4},
     r"remap.group_size=4 is read by the remap method self_extend, and .*method is 'rerope'"),
])
def test_a_remap_option_its_method_does_not_read_is_refused(options, message):
  """An option set for another method (or with no method) would be recorded as an override
  and change nothing, so it is refused naming the methods that read it."""
  import kinds  # pylint: disable=g-import-not-at-top
  from roformer import resolve  # pylint: disable=g-import-not-at-top
  cfg = kinds.tiny_config('rope')
  cfg.model.position.rope.remap.update(options)
  with pytest.raises(errors.ConfigError, match=message):
    resolve.validate(cfg)


@pytest.mark.parametrize('trained,multiplier', [(5, 3), (7, 16), (8, 1), (16, 8), (64, 8),
                                                (100, 3), (129, 5)])
def test_fitted_remaps_keep_the_longest_rows_distances_within_the_trained_ones(trained,
                                                                               multiplier):
  """remap.fitted (the rule evaluate_extensions.sh and the passkey-extension sweep share): at
  the longest length, by the float64 definition, every method but STRING keeps each distance it
  lets RoPE see at most trained - 1 and keeps the distances within its window true (half the
  trained length; DCA's local window; the sinks' window); STRING passes the trained distances from d = T + S - W on, as its rows are meant to
  show. Each method's options pass the checks eval.py makes against the trained length."""
  import kinds  # pylint: disable=g-import-not-at-top
  from roformer import resolve  # pylint: disable=g-import-not-at-top
  from roformer.positions import remap  # pylint: disable=g-import-not-at-top
  longest = trained * multiplier
  fitted = remap.fitted(trained, longest)
  assert set(fitted) == set(remap.METHODS) - {'none'}
  plain = relative_distances('none', longest)
  for method, options in fitted.items():
    got = relative_distances(method, longest, **options)
    seen = ~np.isnan(got)
    true_below = {'dca': trained // 4 + 1, 'sinks': trained - 4}.get(method, trained // 2)
    near = plain < true_below
    np.testing.assert_array_equal(got[near], plain[near])
    if method == 'string':
      shift, window = options['shift'], options['local_window']
      past = plain >= trained + shift - window
      assert (got[past] > trained - 1).all() and (got[~past] <= trained - 1).all()
    else:
      assert got[seen].max() <= trained - 1, (method, options, got[seen].max())
    cfg = kinds.tiny_config('rope')
    cfg.data.seq_len = trained
    cfg.model.position.rope.remap.update({'method': method, **options})
    resolve.validate(cfg)


@pytest.mark.parametrize('trained,longest,says', [(4, 32, 'a trained length of 4 is too short'),
                                                  (64, 32, 'longest=32 is below')])
def test_fitted_refuses_a_length_it_cannot_size_for(trained, longest, says):
  from roformer.positions import remap  # pylint: disable=g-import-not-at-top
  with pytest.raises(errors.ConfigError, match=says):
    remap.fitted(trained, longest)


@pytest.mark.parametrize('trained,longest,half,k,groups,local,chunk,dca_local,window', [
    (256, 2048, 128, 16.0, 16, 32, 192, 64, 252),  # k = ceil(1920 / 127), G = 2048 / 128.
    (128, 2048, 64, 32.0, 32, 16, 96, 32, 124)])  # k = ceil(1984 / 63), G = 2048 / 64.
def test_fitted_gives_the_sizes_the_docs_state(trained, longest, half, k, groups, local, chunk,
                                               dca_local, window):
  """The sizes docs/hf_checkpoints.md (a model trained at 256, evaluated to 2048) and
  docs/length_generalization.md (the passkey-extension base, 128 to 2048) state, by hand from
  the rule: W = T / 2, k = ceil((N - W) / (T - 1 - W)), G = ceil(N / W), STRING's window T / 8,
  DCA's chunk and window 3T / 4 and T / 4, the sinks' window T - 4."""
  from roformer.positions import remap  # pylint: disable=g-import-not-at-top
  assert remap.fitted(trained, longest) == {
      'rerope': {'window': half}, 'leaky_rerope': {'window': half, 'k': k},
      'self_extend': {'neighbor_window': half, 'group_size': groups},
      'string': {'shift': half, 'local_window': local},
      'dca': {'chunk_size': chunk, 'local_window': dca_local},
      'sinks': {'sink_tokens': 4, 'window': window}}
