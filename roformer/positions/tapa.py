"""TAPA, token-aware phase attention (Yu Wang et al. 2025, arXiv 2509.12635): the distance enters
the logits as a phase that the content itself sets, in place of a rotation.

Each head's query and key are split into an amplitude part (the first theta * d channels, A) and
a phase part (the rest, P), and

  logit(m, n) = (q_A . k_A / sqrt(d_A)) * cos(2 pi |m - n|^alpha * q_P . k_P / sqrt(d_P))

(the paper's eq. 12, alpha = 0.1 and theta = 0.5 in all its runs). The phase grows with the
distance only as |m - n|^alpha, and how fast is learned per pair of tokens through the query and
key projections: no parameters are added. At distance 0 the logit is the amplitude's scaled dot
product. The logits depend on the positions only through |m - n|; the paper trains no other
position signal beside it (RoPE is removed), and reports perplexity that degrades gracefully
past the training length where RoPE's explodes. It needs two products of queries and keys, so it
runs on the einsum path (as in the paper, which has no fused kernel either).
"""

import math

import jax.numpy as jnp

from roformer import errors
from roformer import specs
from roformer.positions import base


def amplitude_width(head_dim: int, amplitude_fraction: float) -> int:
  return int(round(amplitude_fraction * head_dim))


def tapa_logits(q, k, q_pos, k_pos, alpha: float, amplitude: int):
  """float32 [batch, heads, q_len, k_len]: queries and keys [batch, len, heads, d] at positions
  [batch, len]; the first `amplitude` channels the amplitude, the rest the phase."""
  q, k = q.astype(jnp.float32), k.astype(jnp.float32)
  d = q.shape[-1]
  dot = lambda a, b: jnp.einsum('bqhd,bkhd->bhqk', a, b)
  amp = dot(q[..., :amplitude], k[..., :amplitude]) / math.sqrt(amplitude)
  phase = dot(q[..., amplitude:], k[..., amplitude:]) / math.sqrt(d - amplitude)
  distance = jnp.abs(base.relative_positions(q_pos, k_pos).astype(jnp.float32))[:, None]
  return amp * jnp.cos(2 * math.pi * distance ** alpha * phase)


class _TapaLayer(base.Layer):
  """No parameters: the split and the exponent."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal, rngs
    cfg = model_cfg.position.tapa
    self.alpha = float(cfg.alpha)
    self.amplitude = amplitude_width(base.head_dim(model_cfg), cfg.amplitude_fraction)

  def logits(self, q, k, q_pos, k_pos, mask, ctx):
    del mask, ctx
    return tapa_logits(q, k, q_pos, k_pos, self.alpha, self.amplitude)


@base.register('tapa')
class Tapa(base.PositionScheme):
  """TAPA: an amplitude q_A.k_A times the cosine of a content phase grown by |m - n|^alpha
  (module docstring). Options (`config.model.position.tapa`): `alpha` (0.1) and
  `amplitude_fraction` theta of each head (0.5), the paper's."""

  options = {'tapa': {'alpha': specs.Float(0, 1, min_open=True, default=0.1),
                      'amplitude_fraction': specs.Float(0, 1, min_open=True, max_open=True,
                                                        default=0.5)}}
  capabilities = base.Capabilities(
      computes_logits=True,
      logits_term='its logits are an amplitude q_A.k_A times the cosine of a phase q_P.k_P '
                  'grown by the distance, not q.k',
      real_positions=True)
  Layer = _TapaLayer

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    del seq_len, causal
    d, theta = base.head_dim(model_cfg), cfg.tapa.amplitude_fraction
    amplitude = amplitude_width(d, theta)
    if not 1 <= amplitude < d:
      raise errors.ConfigError(
          f'config.model.position.tapa.amplitude_fraction={theta} gives {amplitude} amplitude '
          f'channels of head_dim {d}: both the amplitude and the phase need at least one. Fix: '
          '0.5 (the paper\'s), or a wider head.')
