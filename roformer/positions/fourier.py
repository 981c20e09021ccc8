"""FoPE, Fourier position embedding (Hua et al., ICML 2025, arXiv 2412.17739): each rotated pair
of a head turns by a Fourier series of RoPE's frequencies instead of by one of them, and the
frequencies too low to complete a period within the training length are clipped to zero.

RoPE's frequencies for a head of width d are w_i = base^(-2i/d), i = 0..d/2 - 1. FoPE drops
those below 2 pi / L (`clip_length` L, the positions trained on: a frequency whose period is
longer than L is never seen through a whole turn, and extrapolates badly), keeping the D highest.
The first P = min(D, d/4) pairs of the head (pair j: dimensions j and j + d/2, GPT-NeoX's
layout, as the released code) are then rotated by the per-head series

  c_hj(t) = sum_i C_hij cos(w_i t),    s_hj(t) = sum_i S_hij sin(w_i t),
  (x_j, x_{j+d/2}) -> (x_j c_hj(t) - x_{j+d/2} s_hj(t),  x_{j+d/2} c_hj(t) + x_j s_hj(t)),

with C and S of shape [heads, D, P], and the remaining pairs, the clipped frequencies, take the
zero frequency: c = 1, s = 0, unrotated. Queries and keys use the same series at their own
positions. With C = S = a selection of one frequency per pair it is RoPE on those frequencies;
the other coefficients mix in the rest, so a pair is no longer a pure rotation and q.k no longer
depends on m - n alone (the paper's point: attention's periodic extension is spread over many
frequencies rather than broken by one).

C and S start as the "step identity" (pair j takes frequency j * ceil(D / P)) plus Gaussian noise
of std gain * sqrt(2 / (fan_in + fan_out)), with torch's fans of a [heads, D, P] tensor
(fan_in D P, fan_out heads P; the released code's `xavier_normal_`, gain 0.3 in its small
models). The released code keeps them fixed by default (`fourier_learnable` False): so does
`learnable` here, where they are a constant drawn at initialisation and saved with the weights.
The released code pads the unrotated pairs with 1 for the sine as well as the cosine, which maps
(x_j, x_{j+d/2}) to (x_j - x_{j+d/2}, x_j + x_{j+d/2}): also position-independent, but twice the
dot product; the zero frequency's (1, 0) is used here.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from roformer import errors
from roformer import specs
from roformer import variables
from roformer.positions import base


def fope_frequencies(head_dim: int, base_: float, clip_length: int) -> np.ndarray:
  """RoPE's frequencies base^(-2i/d) (float64) at or above 2 pi / clip_length, highest first;
  all of them with clip_length 0."""
  freqs = base_ ** (-np.arange(0, head_dim, 2) / head_dim)
  return freqs[freqs >= 2 * math.pi / clip_length] if clip_length else freqs


def rotated_pairs(head_dim: int, kept: int) -> int:
  """P: the pairs the series rotate, min(D, d/4) as in the released code."""
  return min(kept, head_dim // 4)


def initial_coefficients(key: jax.Array, heads: int, kept: int, pairs: int,
                         gain: float) -> jax.Array:
  """float32 [heads, kept, pairs]: the step identity plus Gaussian noise (module docstring)."""
  step = math.ceil(kept / pairs)
  eye = np.zeros((kept, pairs), np.float32)
  j = np.arange(pairs)
  j = j[j * step < kept]
  eye[j * step, j] = 1.0
  std = gain * math.sqrt(2.0 / (kept * pairs + heads * pairs))
  return jnp.asarray(eye) + std * jax.random.normal(key, (heads, kept, pairs), jnp.float32)


def fope_rotate(x: jax.Array, positions: jax.Array, freqs, cos_coef: jax.Array,
                sin_coef: jax.Array) -> jax.Array:
  """x [batch, len, heads, d] at integer positions [batch, len] turned by the series of `freqs`
  [D] with coefficients [heads, D, P] (module docstring); float32 inside, x's dtype out."""
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(freqs, jnp.float32)
  series = lambda basis, coef: jnp.einsum('bli,hij->blhj', basis, coef.astype(jnp.float32),
                                          precision=jax.lax.Precision.HIGHEST)
  c, s = series(jnp.cos(angles), cos_coef), series(jnp.sin(angles), sin_coef)
  half = x.shape[-1] // 2
  pairs = c.shape[-1]
  xf = x.astype(jnp.float32)
  x1, x2 = xf[..., :pairs], xf[..., half:half + pairs]
  out = xf.at[..., :pairs].set(x1 * c - x2 * s).at[..., half:half + pairs].set(x2 * c + x1 * s)
  return out.astype(x.dtype)


class FixedCoefficients(nnx.Variable):
  """FoPE's coefficients when they are not learned: drawn at initialisation, saved with the
  weights, never trained and given no optimizer state."""


class _FourierLayer(base.Layer):
  """One layer's coefficients C and S ([heads, D, P]; Params when `learnable`, not decayed)."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    cfg, d = model_cfg.position.fope, base.head_dim(model_cfg)
    self.freqs = tuple(float(f) for f in fope_frequencies(d, cfg.base, cfg.clip_length))
    kept = len(self.freqs)
    pairs = rotated_pairs(d, kept)
    draw = lambda: initial_coefficients(rngs.params(), model_cfg.num_heads, kept, pairs,
                                        cfg.init_gain)
    axes = (None, None, None)
    if cfg.learnable:
      self.cos_coef = variables.param(draw(), axes, decay=False)
      self.sin_coef = variables.param(draw(), axes, decay=False)
    else:
      self.cos_coef = FixedCoefficients(draw(), out_sharding=axes, eager_sharding=False)
      self.sin_coef = FixedCoefficients(draw(), out_sharding=axes, eager_sharding=False)

  def rotate(self, q, k, q_pos, k_pos, ctx):
    del ctx
    turn = lambda x, p: fope_rotate(x, p, self.freqs, self.cos_coef[...], self.sin_coef[...])
    return turn(q, q_pos), turn(k, k_pos)


@base.register('fope')
class Fourier(base.PositionScheme):
  """FoPE: each rotated pair turns by a Fourier series of RoPE's frequencies, the frequencies
  below 2 pi / clip_length clipped (module docstring). Options (`config.model.position.fope`):
  `base`; `clip_length` (0: the positions the run trains on, written into its config when it
  starts; fixed with the model); `init_gain` of the coefficients' noise; `learnable`
  coefficients (the released code's default: fixed)."""

  options = {'fope': {
      'base': specs.Float(1, 1e12, min_open=True, default=10000.0),
      'clip_length': specs.Int(0, 2**31 - 2, default=0),
      'init_gain': specs.Float(0, 10, default=0.3),
      'learnable': specs.Bool(default=False)}}
  capabilities = base.Capabilities(real_positions=True)
  Layer = _FourierLayer
  derived = ('fope.clip_length',)  # 0: the positions the run trains on, then fixed.

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    del seq_len, causal
    f, d = cfg.fope, base.head_dim(model_cfg)
    field = 'config.model.position.fope'
    if d % 4:
      raise errors.ConfigError(
          f'fope rotates pairs (j, j + d/2) of the first d/4, but head_dim {d} is not a '
          'multiple of 4. Fix: change --config.model.head_dim (or d_model / num_heads).')
    if not len(fope_frequencies(d, f.base, f.clip_length)):
      raise errors.ConfigError(
          f'{field}.clip_length={f.clip_length} clips every frequency (they are at most 1, '
          f'and clipped below 2 pi / clip_length). Fix: at least 7 (0: the training length).')
