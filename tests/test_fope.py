"""FoPE against its formula in float64, its clipping and initialisation, its coefficients fixed or
learned, and its clipping length taken from the run's own training length."""

import math

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from roformer import errors
from roformer import models
from roformer import positions
from roformer import resolve
from roformer import saved_config
from roformer import variables
from roformer.positions import fourier


def reference(x, pos, freqs, cos_coef, sin_coef):
  """float64 FoPE, element by element: x [len, heads, d], pos [len], coefficients [heads, D, P];
  pairs (j, j + d/2) for j < P turned by the series, the rest unchanged."""
  out = np.array(x, np.float64)
  half, pairs = x.shape[-1] // 2, cos_coef.shape[-1]
  for t, p in enumerate(pos):
    for h in range(x.shape[1]):
      for j in range(pairs):
        c = sum(cos_coef[h, i, j] * math.cos(f * p) for i, f in enumerate(freqs))
        s = sum(sin_coef[h, i, j] * math.sin(f * p) for i, f in enumerate(freqs))
        a, b = x[t, h, j], x[t, h, half + j]
        out[t, h, j], out[t, h, half + j] = a * c - b * s, b * c + a * s
  return out


@pytest.mark.parametrize('d,clip', [(16, 0), (16, 40), (32, 300)])
def test_fope_rotation_against_the_formula(d, clip):
  rng = np.random.default_rng(d + clip)
  heads, length = 3, 7
  freqs = fourier.fope_frequencies(d, 10000.0, clip)
  pairs = fourier.rotated_pairs(d, len(freqs))
  x = rng.normal(size=(length, heads, d))
  pos = rng.integers(0, 500, length)
  cos_coef, sin_coef = (rng.normal(size=(heads, len(freqs), pairs)) for _ in range(2))
  got = fourier.fope_rotate(jnp.asarray(x[None], jnp.float32), jnp.asarray(pos[None]), freqs,
                            jnp.asarray(cos_coef), jnp.asarray(sin_coef))
  np.testing.assert_allclose(np.asarray(got[0]), reference(x, pos, freqs, cos_coef, sin_coef),
                             rtol=1e-4, atol=1e-4)


def test_frequencies_below_one_turn_in_the_clipping_length_are_clipped():
  """d = 64, L = 1024: base^(-i/32) >= 2 pi / 1024 for i <= 17 (10000^(-17/32) = 0.0075,
  10000^(-18/32) = 0.0056, 2 pi / 1024 = 0.0061): 18 kept, of which 64 / 4 = 16 pairs turn."""
  freqs = fourier.fope_frequencies(64, 10000.0, 1024)
  assert len(freqs) == 18
  np.testing.assert_allclose(freqs, 10000.0 ** (-np.arange(18) / 32), rtol=1e-12)
  assert fourier.rotated_pairs(64, 18) == 16
  assert len(fourier.fope_frequencies(64, 10000.0, 0)) == 32  # 0: none clipped.
  assert fourier.rotated_pairs(8, 4) == 2


def test_with_the_step_identity_the_logits_depend_only_on_the_distance():
  """Coefficients with no noise select one frequency per pair: RoPE on those frequencies, so
  q.k depends only on m - n."""
  d, heads = 32, 2
  freqs = fourier.fope_frequencies(d, 10000.0, 64)
  pairs = fourier.rotated_pairs(d, len(freqs))
  coef = fourier.initial_coefficients(jax.random.key(0), heads, len(freqs), pairs, 0.0)
  rng = np.random.default_rng(0)
  q, k = (jnp.asarray(rng.normal(size=(1, 6, heads, d)), jnp.float32) for _ in range(2))
  logits = lambda p: jnp.einsum('blhd,bmhd->bhlm', fourier.fope_rotate(q, p, freqs, coef, coef),
                                fourier.fope_rotate(k, p, freqs, coef, coef))
  pos = jnp.arange(6)[None]
  np.testing.assert_allclose(logits(pos), logits(pos + 333), atol=2e-4)
  # And the unrotated pairs (past P) are untouched.
  out = fourier.fope_rotate(q, pos + 5, freqs, coef, coef)
  np.testing.assert_array_equal(out[..., pairs:d // 2], q[..., pairs:d // 2])
  np.testing.assert_array_equal(out[..., d // 2 + pairs:], q[..., d // 2 + pairs:])


def test_the_coefficients_start_as_the_step_identity_plus_xavier_noise():
  heads, kept, pairs, gain = 16, 18, 16, 0.3
  coef = np.asarray(fourier.initial_coefficients(jax.random.key(1), heads, kept, pairs, gain))
  eye = np.zeros((kept, pairs))
  for j in range(pairs):  # ceil(18 / 16) = 2: pair j takes frequency 2j while 2j < 18.
    if 2 * j < kept:
      eye[2 * j, j] = 1.0
  noise = coef - eye
  want = gain * math.sqrt(2.0 / (kept * pairs + heads * pairs))
  assert abs(noise.std() / want - 1) < 0.05
  assert abs(noise.mean()) < 3 * want / math.sqrt(noise.size)


@pytest.mark.parametrize('learnable', [False, True])
def test_coefficients_are_fixed_unless_learnable(learnable):
  """Fixed: a constant saved with the weights, no Param (no optimizer state, no gradient);
  learnable: Params that a gradient step moves."""
  cfg = kinds.tiny_config('fope').model
  cfg.position.fope.learnable = learnable
  model = models.create(cfg, seed=0)
  params = nnx.state(model, nnx.Param)
  names = [str(p) for p, _ in params.flat_state()]
  assert any('cos_coef' in n for n in names) == learnable
  fixed = nnx.state(model, fourier.FixedCoefficients)
  assert (len(fixed.flat_state()) == 0) == learnable
  graphdef, trained, rest = nnx.split(model, nnx.Param, ...)
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 12)))
  pos = jnp.broadcast_to(jnp.arange(12), (2, 12))

  def loss(p):
    return jnp.mean(nnx.merge(graphdef, p, rest)(tokens, pos, jnp.ones_like(tokens)) ** 2)

  grads = jax.jit(jax.grad(loss))(trained)
  coef_grads = [np.abs(np.asarray(g)).sum() for p, g in
                jax.tree_util.tree_flatten_with_path(grads)[0] if 'coef' in str(p)]
  assert (len(coef_grads) > 0 and all(g > 0 for g in coef_grads)) == learnable
  _, rest_params = variables.trainable(nnx.state(model))
  assert (len(rest_params.flat_state()) > 0) != learnable


def test_cached_decoding_equals_the_full_pass():
  cfg = kinds.tiny_config('fope').model
  cfg.position.fope.clip_length = 16
  model = kinds.visible_positions(models.create(cfg, seed=3))
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 9)))
  kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 1, 3), max_len=12)


def test_an_unset_clipping_length_takes_the_positions_the_run_trains_on():
  """registry.derive fills a 0 with the trained positions (randomized ones when larger) and
  keeps a set value; take_derived copies a saved run's value into a 0 only."""
  config = kinds.tiny_config('fope')
  config.data.seq_len = 24
  positions.derive(config.model, resolve.trained_positions(config)[0])
  assert config.model.position.fope.clip_length == 24
  config.train.random_positions = 96
  config.model.position.fope.clip_length = 0
  positions.derive(config.model, resolve.trained_positions(config)[0])
  assert config.model.position.fope.clip_length == 96
  positions.derive(config.model, 10)
  assert config.model.position.fope.clip_length == 96
  fresh = kinds.tiny_config('fope').model
  positions.take_derived(fresh, config.model)
  assert fresh.position.fope.clip_length == 96
  other = kinds.tiny_config('rope').model  # A source of another kind gives nothing.
  fresh.position.fope.clip_length = 0
  positions.take_derived(fresh, other)
  assert fresh.position.fope.clip_length == 0


def test_a_run_continued_at_a_longer_length_keeps_the_sources_clipping_and_resumes(tmp_path):
  """Trained at 32, continued at 64 with clip_length left at 0: the continuation takes the
  source's 32 (its coefficients' shape), not its own length, and resuming it with the same
  command is the same run."""
  from configs import test as test_config  # pylint: disable=import-outside-toplevel
  from roformer import loop  # pylint: disable=import-outside-toplevel

  def config(**fields):
    cfg = test_config.get_config('fope')
    cfg.mesh.num_devices = 1
    cfg.data.seq_len = 32
    cfg.train.update(steps=2, eval_every=2, checkpoint_every=1, eval_batches=1)
    cfg.eval.length_multipliers = (1,)
    cfg.update(fields)
    return cfg

  source = str(tmp_path / 'source')
  loop.train_and_evaluate(config(), source)
  assert saved_config.load(source).model.position.fope.clip_length == 32
  longer = lambda: config(init_from=source, data=dict(config().data.to_dict(), seq_len=64))
  target = str(tmp_path / 'longer')
  loop.train_and_evaluate(longer(), target, stop_at=1)
  assert saved_config.load(target).model.position.fope.clip_length == 32
  last = loop.train_and_evaluate(longer(), target)  # Resumed from step 1.
  straight = loop.train_and_evaluate(longer(), str(tmp_path / 'straight'))
  np.testing.assert_allclose(last['validation']['loss'], straight['validation']['loss'],
                             rtol=1e-6)


def test_fine_tuning_takes_the_pretrained_clipping_length(tmp_path):
  from configs import test as test_config  # pylint: disable=import-outside-toplevel
  pretrained = test_config.get_config('mlm')
  pretrained.model.position.kind = 'fope'
  pretrained.model.position.fope.clip_length = 48
  source = tmp_path / 'mlm'
  source.mkdir()
  saved_config.save(pretrained, str(source))
  tuned = test_config.get_config('classify')
  tuned.model.position.kind = 'fope'
  tuned.init_from = str(source)
  resolve.take_from_source(tuned)
  assert tuned.model.position.fope.clip_length == 48


@pytest.mark.parametrize('field,value,message', [
    ('clip_length', 5, 'clips every frequency'),
])
def test_bad_options_are_refused_naming_the_field(field, value, message):
  config = kinds.tiny_config('fope')
  config.model.position.fope[field] = value
  with pytest.raises(errors.ConfigError, match=message):
    resolve.validate(config)


def test_a_head_width_not_a_multiple_of_four_is_refused():
  config = kinds.tiny_config('fope')
  config.model.update(d_model=24, num_heads=4)  # head_dim 6.
  with pytest.raises(errors.ConfigError, match='multiple of 4'):
    resolve.validate(config)
