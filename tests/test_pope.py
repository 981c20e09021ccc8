"""PoPE against its formula in float64, its relative-position property, and its phases' clamp
and initialisation."""

import math

import jax.numpy as jnp
import kinds
import numpy as np
import pytest

from roformer import models
from roformer.positions import pope_frequencies, pope_logits


def reference(q, k, q_pos, k_pos, theta, delta):
  """float64 sum_c softplus(q_tc) softplus(k_sc) cos((s - t) theta_c + delta_c), pair by pair,
  for one head: q [Lq, d], k [Lk, d], delta [d]."""
  softplus = lambda x: np.log1p(np.exp(x))
  out = np.zeros((len(q), len(k)))
  for a, t in enumerate(q_pos):
    for b, s in enumerate(k_pos):
      out[a, b] = np.sum(softplus(q[a]) * softplus(k[b]) * np.cos((s - t) * theta + delta))
  return out


@pytest.mark.parametrize('lq,lk,d', [(5, 5, 8), (3, 11, 16), (1, 20, 6)])
def test_pope_logits_against_the_formula(lq, lk, d):
  rng = np.random.default_rng(lq + lk)
  heads = 2
  q, k = rng.normal(size=(heads, lq, d)), rng.normal(size=(heads, lk, d))
  q_pos, k_pos = rng.integers(0, 300, lq), rng.integers(0, 300, lk)
  theta = pope_frequencies(d, 10000.0)
  delta = rng.uniform(-2 * math.pi, 0, (heads, 1, d))
  got = np.asarray(pope_logits(q, k, q_pos, k_pos, theta, delta))
  for h in range(heads):
    want = reference(q[h], k[h], q_pos, k_pos, theta, delta[h, 0])
    np.testing.assert_allclose(got[h], want, rtol=2e-4, atol=2e-4 * np.abs(want).max())


def test_the_frequencies_are_one_per_dimension():
  np.testing.assert_allclose(pope_frequencies(4, 10000.0), [1.0, 0.1, 0.01, 0.001], rtol=1e-12)
  assert len(pope_frequencies(6, 100.0)) == 6


def test_logits_depend_only_on_the_distance():
  rng = np.random.default_rng(1)
  q, k = rng.normal(size=(1, 6, 8)), rng.normal(size=(1, 6, 8))
  theta, delta = pope_frequencies(8, 10000.0), rng.uniform(-6, 0, (1, 1, 8))
  pos = np.arange(6)
  a = np.asarray(pope_logits(q, k, pos, pos, theta, delta))
  b = np.asarray(pope_logits(q, k, pos + 1000, pos + 1000, theta, delta))
  np.testing.assert_allclose(a, b, atol=2e-3)


@pytest.mark.parametrize('init', ['zero', 'uniform'])
def test_phases_start_as_asked_and_are_clamped_where_used(init):
  cfg = kinds.tiny_config('pope').model
  cfg.position.pope.delta_init = init
  model = models.create(cfg, seed=0)
  delta = np.asarray(model.blocks[0].position.phase_bias[...])
  if init == 'zero':
    assert (delta == 0).all()
  else:
    assert (delta <= 0).all() and (delta >= -2 * math.pi).all() and delta.std() > 1.0
  layer = model.blocks[0].position
  q = jnp.asarray(np.random.default_rng(2).normal(size=(1, 4, cfg.num_heads, 8)), jnp.float32)
  pos = jnp.arange(4)[None]
  layer.phase_bias[...] = jnp.full_like(layer.phase_bias[...], 5.0)  # Above 0: used as 0.
  above = layer.logits(q, q, pos, pos, None, None)
  layer.phase_bias[...] = jnp.zeros_like(layer.phase_bias[...])
  np.testing.assert_allclose(np.asarray(above), np.asarray(layer.logits(q, q, pos, pos, None,
                                                                          None)))
