"""FAVOR+ linear attention: its estimator against softmax, exact prefix sums against the
quadratic formula, RoPE in the numerator only (the RoFormer paper's eq. 19), no leaks from the
future or across packed segments, O(L) memory at L = 8192, and redraws seeded by the step."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import performer
from configs import test as test_config
from roformer import attention
from roformer import checkpoint as checkpoint_lib
from roformer import errors
from roformer import loop
from roformer import models
from roformer import positions
from roformer import resolve
from roformer import sharding
from roformer import trainer as trainer_lib
from roformer.attention_options import favor as favor_lib
from tests import kinds


def random_qkv(b=2, length=37, h=2, d=16, scale=0.5, seed=0):
  rng = np.random.default_rng(seed)
  q, k = (jnp.asarray(rng.normal(size=(b, length, h, d)) * scale, jnp.float32) for _ in '12')
  return q, k, jnp.asarray(rng.normal(size=(b, length, h, d)), jnp.float32)


def packed_segments(b=2, length=37):
  seg = np.ones((b, length), np.int32)
  seg[1, 15:], seg[1, 33:] = 2, 0  # Two documents and padding in row 1.
  return jnp.asarray(seg)


def test_estimator_approaches_softmax_as_features_grow():
  q, k, v = random_qkv()
  seg = packed_segments()
  reference, _ = attention.attend(q, k, v, attention.make_mask(seg, seg, causal=False))
  valid = np.asarray(seg > 0)
  errors_by_m = []
  favor = jax.jit(lambda projection: favor_lib.favor_attend(q, k, v, seg, projection,
                                                            causal=False))
  for m in (16, 128, 1024):
    err = [np.abs(np.asarray(favor(favor_lib.orthogonal_features(jax.random.key(s), m, 16))
                             - reference))[valid].mean() for s in range(2)]
    errors_by_m.append(np.mean(err))
  assert errors_by_m[0] > errors_by_m[1] > errors_by_m[2]
  assert errors_by_m[2] < errors_by_m[0] / 3 and errors_by_m[2] < 0.02


def test_orthogonal_feature_rows_are_unbiased():
  """With the QR signs fixed every row is an isotropic Gaussian direction (mean 0); without
  the fix, LAPACK's signs make row i lean towards -e_i."""
  draws = jax.vmap(lambda k: favor_lib.orthogonal_features(k, 8, 8))(
      jax.random.split(jax.random.key(0), 2000))
  means = np.asarray(draws).mean(0)  # [8, 8]; each entry has std ~1/sqrt(2000) = 0.022.
  assert np.abs(means).max() < 0.12, np.abs(means).max()


def test_orthogonal_features_are_orthogonal_within_blocks():
  w = np.asarray(favor_lib.orthogonal_features(jax.random.key(0), 40, 16), np.float64)
  unit = w / np.linalg.norm(w, axis=1, keepdims=True)
  np.testing.assert_allclose(unit[:16] @ unit[:16].T, np.eye(16), atol=1e-5)
  np.testing.assert_allclose(unit[16:32] @ unit[16:32].T, np.eye(16), atol=1e-5)


@pytest.mark.parametrize('causal', [True, False])
def test_prefix_sums_equal_the_quadratic_formula(causal):
  q, k, v = random_qkv()
  seg = packed_segments()
  w = favor_lib.orthogonal_features(jax.random.key(0), 32, 16)
  qf = favor_lib.positive_features(q, w, is_query=True)
  kf = favor_lib.positive_features(k, w, is_query=False, valid=seg > 0)
  assert float(jnp.abs(kf[1, 33:]).max()) == 0.0  # Padding keys contribute nothing.
  got = favor_lib.linear_sums(qf, kf, v, seg, causal=causal, chunk=8)  # 37 = 4 chunks + 5.
  s = np.asarray(seg)
  allowed = (s[:, :, None] == s[:, None, :]) & (s[:, :, None] > 0)
  if causal:
    allowed &= np.tril(np.ones((37, 37), bool))
  scores = np.einsum('bihm,bjhm->bhij', np.asarray(qf, np.float64), np.asarray(kf, np.float64))
  expected = np.einsum('bhij,bjhd->bihd', scores * allowed[:, None], np.asarray(v, np.float64))
  rows = s > 0
  # float32 sums (the bidirectional form subtracts the diagonal) against float64.
  scale = np.abs(expected).max()
  np.testing.assert_allclose(np.asarray(got)[rows], expected[rows], rtol=1e-4, atol=1e-6 * scale)


def rotation(positions, m, base=10000.0):
  """Block-diagonal R(p) [len, m, m] on interleaved pairs, float64."""
  theta = base ** (-np.arange(0, m, 2) / m)
  out = np.zeros((len(positions), m, m))
  for n, p in enumerate(positions):
    for i, t in enumerate(theta):
      c, s = np.cos(p * t), np.sin(p * t)
      out[n, 2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -s], [s, c]]
  return out


def test_rope_rotates_the_numerator_only():
  """Eq. 19 of the RoFormer paper: sum_j (R_i phi(q_i)).(R_j phi(k_j)) v_j over
  sum_j phi(q_i).phi(k_j), causal, written out in float64."""
  q, k, v = random_qkv(b=1, length=12)
  seg = jnp.ones((1, 12), jnp.int32)
  pos = jnp.arange(12)[None]
  w = favor_lib.orthogonal_features(jax.random.key(1), 8, 16)
  freqs = models.positions_lib.rope_frequencies(8, 10000.0)
  rotate = lambda qf, kf: (models.positions_lib.rotate_pairs(qf, pos, freqs),
                           models.positions_lib.rotate_pairs(kf, pos, freqs))
  got = np.asarray(favor_lib.favor_attend(q, k, v, seg, w, causal=True, rotate=rotate, chunk=4))
  qf = np.asarray(favor_lib.positive_features(q, w, is_query=True), np.float64)[0]
  kf = np.asarray(favor_lib.positive_features(k, w, is_query=False), np.float64)[0]
  r = rotation(range(12), 8)
  qr, kr = np.einsum('lab,lhb->lha', r, qf), np.einsum('lab,lhb->lha', r, kf)
  causal = np.tril(np.ones((12, 12)))
  num = np.einsum('ij,ihm,jhm,jhd->ihd', causal, qr, kr, np.asarray(v, np.float64)[0])
  den = np.einsum('ij,ihm,jhm->ih', causal, qf, kf)[..., None]
  np.testing.assert_allclose(got[0], num / den, rtol=2e-5, atol=1e-6)


def favor_model(kind='rope', rope_mode='features', **model):
  cfg = test_config.get_config(kind)
  cfg.model.update(vocab_size=64, **model)
  cfg.model.attention.update(kind='favor', num_features=16, chunk=8, rope_mode=rope_mode)
  resolve.validate(cfg)
  return models.create(cfg.model, seed=0)


@pytest.mark.parametrize('kind,mode', [
    ('rope', 'features'), pytest.param('none', 'qk', marks=pytest.mark.slow),
    pytest.param('rope', 'qk', marks=pytest.mark.slow),
    pytest.param('learned', 'qk', marks=pytest.mark.slow)])
def test_causal_favor_leaks_nothing_from_the_future_or_other_segments(kind, mode):
  model = favor_model(kind, mode)
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(5, 60, (1, 20)), jnp.int32)
  seg = jnp.asarray([[1] * 9 + [2] * 8 + [0] * 3], jnp.int32)
  pos = jnp.asarray([list(range(9)) + list(range(8)) + [0] * 3], jnp.int32)
  forward = nnx.jit(lambda m, t: m(t, pos, seg))
  base = np.asarray(forward(model, tokens))
  for t in (5, 12, 18):  # In the first document, the second, and padding.
    out = np.asarray(forward(model, tokens.at[0, t].set(int(tokens[0, t]) % 50 + 6)))
    changed = np.abs(out - base).max(-1)[0]
    assert (changed[:t] == 0).all(), t
    if t < 9:
      assert (changed[9:17] == 0).all()  # The next document does not see it either.


def test_decoding_with_the_cache_matches_the_full_pass():
  model = favor_model('rope', 'features')
  rng = np.random.default_rng(1)
  tokens = jnp.asarray(rng.integers(5, 60, (2, 6)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(6), (2, 6))
  full = np.asarray(model(tokens, pos, jnp.ones_like(tokens)))
  cache = model.init_cache(2, 6)
  decode = nnx.jit(lambda model, *args: model.decode(*args))  # One program for the 6 steps.
  steps = []
  for t in range(6):
    logits, cache = decode(model, tokens[:, t:t + 1], pos[:, t:t + 1], cache)
    steps.append(np.asarray(logits[:, 0]))
  np.testing.assert_allclose(np.stack(steps, 1), full, rtol=1e-4, atol=1e-4)


def compiled_temp_bytes(length, kind='favor'):
  """Scratch memory XLA plans for the gradient of causal attention (b 1, 4 heads of 64,
  256 features), from the compiled executable's memory analysis: nothing is allocated."""
  b, h, d, m = 1, 4, 64, 256
  shape = jax.ShapeDtypeStruct((b, length, h, d), jnp.float32)
  seg = jax.ShapeDtypeStruct((b, length), jnp.int32)
  proj = jax.ShapeDtypeStruct((m, d), jnp.float32)

  def loss(q, k, v, s, w):
    if kind == 'favor':
      return favor_lib.favor_attend(q, k, v, s, w, causal=True).sum()
    return attention.attend(q, k, v, attention.make_mask(s, s, causal=True))[0].sum()
  compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(
      shape, shape, shape, seg, proj).compile()
  return compiled.memory_analysis().temp_size_in_bytes


def test_causal_favor_memory_is_linear_in_length_at_8192():
  small, large = compiled_temp_bytes(4096), compiled_temp_bytes(8192)
  assert 1.8 < large / small < 2.2, (small, large)  # Doubling L doubles it: O(L).
  softmax = compiled_temp_bytes(8192, 'softmax')  # Holds [4, L, L] logits and probabilities.
  assert softmax > 4 * 8192 * 8192 * 4  # At least one float32 [heads, L, L].
  assert large < softmax / 4, (large, softmax)


@pytest.mark.slow  # A training run, a resume and an evaluation.
def test_redraws_follow_the_step_and_travel_with_the_checkpoint(tmp_path, data_dir):
  cfg = test_config.get_config()
  cfg.data.data_dir = data_dir
  cfg.model.attention.update(kind='favor', num_features=16, chunk=8, redraw_interval=5)
  cfg.train.update(steps=12, eval_every=12, checkpoint_every=2, max_to_keep=10)
  loop.train_and_evaluate(cfg, str(tmp_path / 'run'))
  trainer = trainer_lib.Trainer(cfg, sharding.make_mesh(cfg.mesh))
  ckpt = checkpoint_lib.Checkpointer(str(tmp_path / 'run' / 'checkpoints'))
  # After s steps the weights hold the draw of the last step taken, (s - 1) // 5.
  for step, draw in ((4, 0), (6, 1), (10, 1), (12, 2)):
    params = ckpt.restore(step, trainer.abstract_state)['params']
    model = models.create(cfg.model)
    models.nnx.update(model, params)
    assert [float(b.attn.feature_draw.value) for b in model.blocks] == [draw, draw]
  ckpt.close()
  a, b = favor_model(), favor_model()
  features = lambda model, layer: favor_lib.projection(model.blocks[layer].attn, layer)
  np.testing.assert_array_equal(features(a, 0), features(b, 0))
  b.blocks[0].attn.feature_draw.value = jnp.float32(1)
  assert not np.allclose(features(a, 0), features(b, 0))
  assert not np.allclose(features(a, 0), features(a, 1))


@pytest.mark.parametrize('kind', kinds.with_capability('linear_attention', False))
def test_bias_schemes_are_refused_with_a_reason(kind):
  cfg = performer.get_config('rope')
  cfg.model.position.kind = kind
  with pytest.raises(errors.ConfigError, match='cannot be used with attention.kind=.favor.'):
    resolve.validate(cfg)


def test_performer_config_is_valid_with_and_without_rope():
  for arg in ('rope', 'none', 'rope,features', 'sinusoidal', 'learned', 'xpos'):
    resolve.validate(performer.get_config(arg))
  for kind in ('xpos', 'none'):  # Nothing rotated the RoPE way: the setting would do nothing.
    with pytest.raises(errors.ConfigError, match=rf"position.kind='{kind}' has no such rotation "
                       r'\(kinds that have: rope\)\. Fix: .*rope_mode=qk'):
      resolve.validate(performer.get_config(f'{kind},features'))
  for kind in ('fope', 'rope_id'):  # They rotate q and k, but not as RoPE's features can.
    config = performer.get_config('rope,features')
    config.model.position.kind = kind
    with pytest.raises(errors.ConfigError, match='has no such rotation'):
      resolve.validate(config)
  yarn = performer.get_config('rope,features')
  yarn.model.position.rope.scaling.update(kind='yarn', factor=2.0, original_length=64)
  with pytest.raises(errors.ConfigError, match='rope_mode=qk'):  # Its temperature.
    resolve.validate(yarn)


def test_the_feature_rotation_is_the_schemes_own():
  """rope_mode=features rotates the random features through the scheme's hook, with its
  options: p-RoPE (keep_fraction 0.5) rotates the first half of the feature pairs by
  p * base^(-2i / num_features) and leaves the rest exactly as they are (float64 reference)."""
  cfg = performer.get_config('rope,features')
  cfg.model.position.rope.keep_fraction = 0.5
  resolve.validate(cfg)
  n = cfg.model.attention.num_features
  layer = positions.scheme('rope').Layer(cfg.model, causal=True, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(3)
  qf = jnp.asarray(rng.uniform(size=(1, 3, 2, n)), jnp.float32)
  pos = jnp.asarray([[0, 5, 40]])
  got, _ = layer.rotate_features(qf, qf, pos, pos, None)
  x = np.asarray(qf, np.float64)
  want = x.copy()
  for t, p in enumerate((0, 5, 40)):
    for i in range(n // 4):  # The kept half of the n / 2 pairs.
      a = p * 10000.0 ** (-2 * i / n)
      c, s_ = np.cos(a), np.sin(a)
      x0, x1 = x[0, t, :, 2 * i], x[0, t, :, 2 * i + 1]
      want[0, t, :, 2 * i], want[0, t, :, 2 * i + 1] = x0 * c - x1 * s_, x0 * s_ + x1 * c
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(got)[..., n // 2:], np.asarray(qf)[..., n // 2:])
