"""RoPE-ID against its formula in float64: the frequencies' geometric spread between the fastest
period and the turns over the training length, the unrotated pairs, the distance-only logits,
and its training length taken from the run's own."""

import math

import jax.numpy as jnp
import kinds
import numpy as np
import pytest

from roformer import errors
from roformer import models
from roformer import positions
from roformer import resolve
from roformer.positions import rope_id


def test_frequencies_by_hand():
  """d = 16, half rotated: P = 4 pairs from 1 rad/token (period 2 pi) to 2 turns over 64
  tokens (4 pi / 64), geometric: ratios (pi / 16)^(1/3) between neighbours; 4 zeros."""
  got = rope_id.rope_id_frequencies(16, 0.5, 2 * math.pi, 2.0, 64)
  slow = 4 * math.pi / 64
  want = [1.0, slow ** (1 / 3), slow ** (2 / 3), slow, 0, 0, 0, 0]
  np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize('d,fraction,period,cycles,length',
                         [(64, 0.5, 2 * math.pi, 2.0, 4096), (32, 0.25, 8.0, 3.0, 100),
                          (8, 0.25, 6.0, 1.0, 50)])
def test_every_rotated_pair_turns_at_least_min_cycles_over_the_training_length(
    d, fraction, period, cycles, length):
  freqs = rope_id.rope_id_frequencies(d, fraction, period, cycles, length)
  pairs = int(fraction * d // 2)
  assert np.count_nonzero(freqs) == pairs
  turns = freqs[:pairs] * length / (2 * math.pi)
  assert turns.min() == pytest.approx(cycles if pairs > 1 else length / period)
  assert freqs[0] == pytest.approx(2 * math.pi / period)
  assert np.all(np.diff(freqs[:pairs]) <= 0)


def reference_rotation(x, pos, freqs):
  """float64: pair (x[2i], x[2i+1]) turned by angle pos * freqs[i]; x [len, heads, d]."""
  out = np.array(x, np.float64)
  for t, p in enumerate(pos):
    for i, f in enumerate(freqs):
      c, s = math.cos(p * f), math.sin(p * f)
      a, b = x[t, :, 2 * i], x[t, :, 2 * i + 1]
      out[t, :, 2 * i], out[t, :, 2 * i + 1] = a * c - b * s, a * s + b * c
  return out


def test_a_layer_rotates_as_the_formula_and_leaves_the_rest_alone():
  cfg = kinds.tiny_config('rope_id').model  # head_dim 8: 2 of 4 pairs rotate.
  cfg.position.rope_id.train_length = 32
  layer = positions.scheme('rope_id').Layer(cfg, causal=True, rngs=None)
  freqs = rope_id.rope_id_frequencies(8, 0.5, 2 * math.pi, 2.0, 32)
  rng = np.random.default_rng(0)
  q, k = (rng.normal(size=(1, 6, 4, 8)) for _ in range(2))
  pos = rng.integers(0, 200, (1, 6))
  rq, rk = layer.rotate(jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32),
                        jnp.asarray(pos), jnp.asarray(pos), None)
  np.testing.assert_allclose(np.asarray(rq[0]), reference_rotation(q[0], pos[0], freqs),
                             atol=1e-4)
  np.testing.assert_array_equal(np.asarray(rk[..., 4:]), k[..., 4:].astype(np.float32))
  logits = lambda p: np.einsum('lhd,mhd->hlm', *(np.asarray(x[0]) for x in layer.rotate(
      jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32), p, p, None)))
  base_pos = jnp.arange(6)[None]
  np.testing.assert_allclose(logits(base_pos), logits(base_pos + 1000), atol=2e-4)


def test_an_unset_training_length_takes_the_runs_and_a_model_builds_without_it():
  config = kinds.tiny_config('rope_id')
  config.data.seq_len = 40
  positions.derive(config.model, 40)
  assert config.model.position.rope_id.train_length == 40
  fresh = kinds.tiny_config('rope_id').model
  assert fresh.position.rope_id.train_length == 0
  model = models.create(fresh, seed=0)  # train_length 0: the released code's 4096.
  tokens = jnp.ones((1, 5), jnp.int32)
  assert np.isfinite(np.asarray(model(tokens, jnp.arange(5)[None], tokens))).all()
  q = np.random.default_rng(1).normal(size=(1, 5, 4, 8))
  pos = np.array([[0, 7, 300, 2000, 4095]])
  rq, _ = model.blocks[0].position.rotate(jnp.asarray(q, jnp.float32), jnp.asarray(q, jnp.float32),
                                          jnp.asarray(pos), jnp.asarray(pos), None)
  freqs = rope_id.rope_id_frequencies(8, 0.5, 2 * math.pi, 2.0, rope_id.UNSET_LENGTH)
  assert rope_id.UNSET_LENGTH == 4096
  np.testing.assert_allclose(np.asarray(rq[0]), reference_rotation(q[0], pos[0], freqs),
                             atol=1e-3)


@pytest.mark.parametrize('fields,message', [
    ({'fraction': 0.1}, 'rotates none'),
    ({'min_cycles': 10.0, 'train_length': 20}, 'faster than the fastest pair'),
])
def test_bad_options_are_refused_naming_the_field(fields, message):
  config = kinds.tiny_config('rope_id')
  config.model.position.rope_id.update(fields)
  with pytest.raises(errors.ConfigError, match=message):
    resolve.validate(config)
