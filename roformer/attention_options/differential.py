"""Differential attention (`attention.differential`): each head the difference of two softmax
maps (Ye et al., ICLR 2025, "Differential Transformer", arXiv 2410.05258).

A differential head subtracts two softmax maps over the same values:

  head_i = (1 - lambda_init) RMSNorm((softmax(Q1 K1^T / sqrt(d))
                                      - lambda softmax(Q2 K2^T / sqrt(d))) V)

with Q1, Q2, K1, K2 of width d (the model's head width), V of width 2d, and one learned scalar
per layer, lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init from four vectors of width d
(shared by the layer's heads, as in the paper's code), lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))
for layer l (1-based). As in the paper, a layer with `num_heads` heads of width d has
num_heads / 2 differential heads: the projections keep their shapes, heads 2i and 2i + 1 of the
usual split give head i's two maps, and their values together are its V. Only the lambda
vectors (4d) and the norm's scale (2d, shared by the heads) are added per layer.

Each of the num_heads maps runs as an ordinary attention head (every position scheme's hooks,
the key/value cache, causal blocks) whose values are its differential head's V; `combine` then
takes the difference. Weighting the values once per map costs 2 x 2d per key and token instead
of the paper's 2d once per differential head (which needs the maps before the values, i.e. the
probabilities), so that the memory-efficient softmax paths run it unchanged; `roformer/flops.py`
counts what runs.
"""

import jax
import jax.numpy as jnp

from roformer import attention
from roformer import errors
from roformer import variables
from roformer.attention_options import base

LAMBDA_STD = 0.1  # The lambda vectors' initial normal standard deviation (the paper's code).


def lambda_init(layer) -> jax.Array:
  """0.8 - 0.6 exp(-0.3 layer) for the 0-based `layer` (the paper's l - 1): 0.2 at the first."""
  return 0.8 - 0.6 * jnp.exp(-0.3 * jnp.asarray(layer, jnp.float32))


def lambdas(lq1: jax.Array, lk1: jax.Array, lq2: jax.Array, lk2: jax.Array, init) -> jax.Array:
  """The layer's lambda from its vectors [d] (or one lambda per row of [n, d] vectors):
  float32, a scalar (or [n])."""
  dot = lambda a, b: jnp.sum(a.astype(jnp.float32) * b.astype(jnp.float32), axis=-1)
  return jnp.exp(dot(lq1, lk1)) - jnp.exp(dot(lq2, lk2)) + init


def paired_values(v: jax.Array) -> jax.Array:
  """[batch, len, heads, d] -> [batch, len, heads, 2d]: heads 2i and 2i + 1 both get the
  concatenation of their values, differential head i's V."""
  b, length, heads, d = v.shape
  pairs = v.reshape(b, length, heads // 2, 2 * d)
  return jnp.repeat(pairs, 2, axis=2)


def combine(out: jax.Array, lam: jax.Array, init, scale: jax.Array) -> jax.Array:
  """The maps' outputs [batch, len, heads, 2d] (even heads: softmax(Q1 K1^T) V, odd:
  softmax(Q2 K2^T) V) -> the differential heads [batch, len, heads / 2, 2d]: their difference
  with weight lambda (a scalar, or [heads / 2]), RMS-normed per head (`scale` [2d]) and times
  1 - lambda_init."""
  first, second = out[:, :, 0::2].astype(jnp.float32), out[:, :, 1::2].astype(jnp.float32)
  diff = first - jnp.asarray(lam, jnp.float32)[..., None] * second
  return (attention.rms_norm(diff, scale, eps=1e-5) * (1.0 - init)).astype(out.dtype)


@base.register
class Differential(base.AttentionOption):
  field = 'differential'
  paper = 'Ye et al. 2025'
  about = 'each head the difference of two maps'
  needs = ('softmax',)
  einsum_only = True
  positions_need = 'no value term'
  no_single_map = "each head's weights are the difference of two maps, not one attention map"

  def positions(self, model_cfg) -> str:
    values = [k for k, c in base.layer_caps(model_cfg).items() if c.value_term]
    return (f'position kinds {values} add a value term of the head width to each map output'
            if values else '')

  def validate(self, config, model_cfg, att) -> None:
    if model_cfg.num_heads % 2:
      raise errors.ConfigError(
          f'config.model.attention.differential=True: num_heads={model_cfg.num_heads} is odd '
          '(its heads pair up into num_heads / 2 differential heads). Fix: an even num_heads '
          '(and d_model a multiple of it), or --config.model.attention.differential=False.')

  def attention_flops(self, model_cfg, seq_len: int, causal: bool) -> float:
    """Values of twice the head width weighted once per map: 2 L 2d, not 2 L d."""
    return base.scores_flops(model_cfg, seq_len, causal) / 2

  def init(self, module, cfg, att, caps, rngs, dtype) -> None:
    init = lambda: jax.random.normal(rngs.params(), (module.head_dim,),
                                     jnp.float32) * LAMBDA_STD
    module.lambda_q1, module.lambda_k1, module.lambda_q2, module.lambda_k2 = (
        variables.param(init(), (None,), decay=False) for _ in range(4))
    module.diff_scale = variables.param(jnp.ones((2 * module.head_dim,), jnp.float32), (None,),
                                        decay=False)

  def values(self, module, v):
    return paired_values(v)  # Each map weights its differential head's values.

  def outputs(self, module, out, x, layer):
    init = lambda_init(layer)
    lam = lambdas(module.lambda_q1[...], module.lambda_k1[...], module.lambda_q2[...],
                  module.lambda_k2[...], init)
    return combine(out, lam, init, module.diff_scale[...])
