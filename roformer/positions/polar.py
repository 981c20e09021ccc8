"""PoPE, polar coordinate position embeddings (Gopalakrishnan et al. 2025, arXiv 2509.10534):
content sets each frequency's magnitude and position alone its phase.

For a head of width d, d frequencies theta_c = base^(-c/d), c = 0..d-1 (one per dimension, not
one per pair as in RoPE), magnitudes softplus(q) and softplus(k), and a learned phase delta per
head and frequency, clamped to [-2 pi, 0]:

  logit(t, s) = sum_c softplus(q_tc) softplus(k_sc) cos((s - t) theta_c + delta_c)

then scaled by 1/sqrt(d) like every other logit. With cos((s - t) theta + delta) =
cos(s theta + delta) cos(t theta) + sin(s theta + delta) sin(t theta), the logits are one real
matmul of the query features mu_q [cos t theta, sin t theta] with the key features
mu_k [cos(s theta + delta), sin(s theta + delta)] (width 2d): no complex dtype, and a key's
features depend on that key alone, so decoding with the cache (which holds the raw keys)
equals the full pass.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from roformer import specs
from roformer import variables
from roformer.positions import base


def pope_frequencies(d: int, base_: float) -> np.ndarray:
  """theta_c = base^(-c/d) for c = 0..d-1 (float64)."""
  return base_ ** (-np.arange(d) / d)


def pope_logits(q: jax.Array, k: jax.Array, q_pos, k_pos, theta, delta) -> jax.Array:
  """PoPE's unscaled logits: q [..., Lq, d], k [..., Lk, d], positions q_pos [Lq] and k_pos
  [Lk] (or broadcastable to [..., Lq] and [..., Lk]), theta [d], delta broadcastable to k's
  shape (per head: [heads, 1, d]; used as given, not clamped) -> float32 [..., Lq, Lk]."""
  theta = jnp.asarray(theta, jnp.float32)
  tq = jnp.asarray(q_pos).astype(jnp.float32)[..., None] * theta
  tk = jnp.asarray(k_pos).astype(jnp.float32)[..., None] * theta + jnp.asarray(delta, jnp.float32)
  mq, mk = jax.nn.softplus(q.astype(jnp.float32)), jax.nn.softplus(k.astype(jnp.float32))
  qf = jnp.concatenate([mq * jnp.cos(tq), mq * jnp.sin(tq)], axis=-1)
  kf = jnp.concatenate([mk * jnp.cos(tk), mk * jnp.sin(tk)], axis=-1)
  return jnp.einsum('...qc,...kc->...qk', qf, kf)


class _PolarLayer(base.Layer):
  """One layer's phases delta (`phase_bias`, [heads, d]: a bias of the phase, so no weight
  decay), clamped to [-2 pi, 0] where they are used."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    heads, d = model_cfg.num_heads, base.head_dim(model_cfg)
    cfg = model_cfg.position.pope
    self.theta = tuple(float(f) for f in pope_frequencies(d, cfg.base))  # Constants.
    if cfg.delta_init == 'uniform':
      delta = jax.random.uniform(rngs.params(), (heads, d), jnp.float32, -2 * math.pi, 0.0)
    else:
      delta = jnp.zeros((heads, d), jnp.float32)
    self.phase_bias = variables.param(delta, (None, None), decay=False)
    self.scale = d ** -0.5

  def logits(self, q, k, q_pos, k_pos, mask, ctx):
    """[batch, heads, q_len, k_len] float32, scaled; from queries and keys [batch, len, heads,
    d] at each row's positions [batch, len]."""
    del mask, ctx
    delta = jnp.clip(self.phase_bias[...], -2 * math.pi, 0.0)[:, None, :]  # [heads, 1, d]
    logits = pope_logits(jnp.swapaxes(q, 1, 2), jnp.swapaxes(k, 1, 2), q_pos[:, None, :],
                         k_pos[:, None, :], self.theta, delta)
    return logits * self.scale


@base.register('pope')
class Polar(base.PositionScheme):
  """PoPE: softplus magnitudes from the content, phases from the position (module docstring).
  Options (`config.model.position.pope`): `base` of the d frequencies; `delta_init` 'zero'
  (the paper's default) or 'uniform' in [-2 pi, 0]."""

  options = {'pope': {'base': specs.Float(1, 1e12, min_open=True, default=10000.0),
                      'delta_init': specs.Str(('zero', 'uniform'), default='zero')}}
  capabilities = base.Capabilities(
      computes_logits=True, real_positions=True,
      logits_term="its logits are content magnitudes times position phases, not q.k")
  Layer = _PolarLayer
