"""TAPA against its formula in float64, its dependence on |m - n| alone, and a model that decodes
with the cache as it runs in full."""

import math

import jax.numpy as jnp
import kinds
import numpy as np
import pytest

from roformer import errors
from roformer import models
from roformer import resolve
from roformer.positions import tapa


def reference(q, k, q_pos, k_pos, alpha, amplitude):
  """float64, pair by pair: q [Lq, d], k [Lk, d] of one head."""
  d = q.shape[-1]
  out = np.zeros((len(q), len(k)))
  for a, m in enumerate(q_pos):
    for b, n in enumerate(k_pos):
      amp = q[a, :amplitude] @ k[b, :amplitude] / math.sqrt(amplitude)
      phase = q[a, amplitude:] @ k[b, amplitude:] / math.sqrt(d - amplitude)
      out[a, b] = amp * math.cos(2 * math.pi * abs(m - n) ** alpha * phase)
  return out


@pytest.mark.parametrize('d,alpha,amplitude', [(8, 0.1, 4), (16, 0.5, 4), (6, 1.0, 5)])
def test_tapa_logits_against_the_formula(d, alpha, amplitude):
  rng = np.random.default_rng(d)
  heads, lq, lk = 2, 5, 7
  q, k = rng.normal(size=(1, lq, heads, d)), rng.normal(size=(1, lk, heads, d))
  q_pos, k_pos = rng.integers(0, 300, (1, lq)), rng.integers(0, 300, (1, lk))
  got = np.asarray(tapa.tapa_logits(jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32),
                                    jnp.asarray(q_pos), jnp.asarray(k_pos), alpha, amplitude))
  for h in range(heads):
    want = reference(q[0, :, h], k[0, :, h], q_pos[0], k_pos[0], alpha, amplitude)
    np.testing.assert_allclose(got[0, h], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_at_distance_zero_the_logit_is_the_amplitudes_dot_product():
  rng = np.random.default_rng(1)
  q = jnp.asarray(rng.normal(size=(1, 3, 1, 8)), jnp.float32)
  pos = jnp.zeros((1, 3), jnp.int32)
  got = np.asarray(tapa.tapa_logits(q, q, pos, pos, 0.1, 4))[0, 0]
  want = np.einsum('ld,md->lm', q[0, :, 0, :4], q[0, :, 0, :4]) / 2.0
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_logits_depend_only_on_the_absolute_distance():
  rng = np.random.default_rng(2)
  q, k = (jnp.asarray(rng.normal(size=(1, 6, 2, 8)), jnp.float32) for _ in range(2))
  pos = jnp.arange(6)[None]
  at = lambda p: np.asarray(tapa.tapa_logits(q, k, p, p, 0.1, 4))
  np.testing.assert_allclose(at(pos), at(pos + 5000), rtol=1e-4, atol=1e-4)
  # Reflected positions turn every m - n into n - m: the same |m - n|, the same logits.
  np.testing.assert_allclose(at(pos), at(100 - pos), rtol=1e-4, atol=1e-4)


def test_cached_decoding_equals_the_full_pass():
  model = kinds.visible_positions(models.create(kinds.tiny_config('tapa').model, seed=4))
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 9)))
  kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 1, 3), max_len=12)


def test_a_split_that_leaves_either_part_empty_is_refused():
  config = kinds.tiny_config('tapa')
  config.model.position.tapa.amplitude_fraction = 0.05  # head_dim 8: 0 amplitude channels.
  with pytest.raises(errors.ConfigError, match='amplitude_fraction'):
    resolve.validate(config)
