"""RoPE-ID (Wertheimer et al., ICLR 2026, arXiv 2603.18017, "Frayed RoPE and long inputs"):
high-frequency RoPE on a fraction of each head's pairs, the rest unrotated.

RoPE's lowest frequencies barely turn within the training length, so the angles a longer input
reaches on them were never seen. RoPE-ID rotates only the first P = floor(fraction * d / 2) pairs
(half of the head by default, as the paper) with frequencies spread geometrically from one turn
every `fastest_period` tokens down to `min_cycles` full turns over the training length L:

  w_j = (2 pi / r) * ((2 pi c / L) / (2 pi / r)) ^ (j / (P - 1)),   j = 0..P-1,

(r = fastest_period, c = min_cycles; w_0 = 2 pi / r, w_{P-1} = 2 pi c / L), so every rotated
pair completes at least c turns in training and no angle past L is new; the other d/2 - P pairs
are not rotated at all (frequency 0, exactly), channels that carry content at any distance. The
pairs are this project's RoPE pairs (interleaved, as `rope.layout` 'interleaved'); the paper's
pseudocode rotates the first and third quarters of the head, the same set in the half layout,
and from scratch the two are the same model.

The spacing follows the first author's released code (a geometric sweep ending at two turns over
the training length); its fastest period is a setting there, with no value stated in the paper:
the default 2 pi starts at RoPE's own fastest frequency, 1 radian a token. The code's optional
position-dependent query temperature is not part of the method described, and is left out.
"""

import math

import numpy as np

from roformer import errors
from roformer import specs
from roformer.positions import base
from roformer.positions import rotary

# The training length a model built from a config that never went through train.py (which
# writes the run's own) spreads its frequencies over: the released code's constant.
UNSET_LENGTH = 4096


def rope_id_frequencies(head_dim: int, fraction: float, fastest_period: float,
                        min_cycles: float, train_length: int) -> np.ndarray:
  """float64 [d/2]: the P rotated pairs' frequencies (module docstring), then zeros."""
  pairs = rotated_pairs(head_dim, fraction)
  fast, slow = 2 * math.pi / fastest_period, 2 * math.pi * min_cycles / train_length
  steps = np.arange(pairs) / max(pairs - 1, 1)
  out = np.zeros(head_dim // 2)
  out[:pairs] = fast * (slow / fast) ** steps
  return out


def rotated_pairs(head_dim: int, fraction: float) -> int:
  return int(fraction * head_dim // 2)


class _RopeIdLayer(base.Layer):
  """RoPE's rotation with RoPE-ID's frequencies: constants, no parameters."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal, rngs
    cfg = model_cfg.position.rope_id
    self.inv_freq = tuple(float(f) for f in rope_id_frequencies(
        base.head_dim(model_cfg), cfg.fraction, cfg.fastest_period, cfg.min_cycles,
        cfg.train_length or UNSET_LENGTH))

  def rotate(self, q, k, q_pos, k_pos, ctx):
    del ctx
    return (rotary.rotate_pairs(q, q_pos, self.inv_freq),
            rotary.rotate_pairs(k, k_pos, self.inv_freq))

  def rotates_keys_alone(self) -> bool:
    return True  # Constant frequencies.


@base.register('rope_id')
class RopeId(base.PositionScheme):
  """RoPE-ID: high frequencies on a `fraction` of the pairs, the rest unrotated (module
  docstring). Options (`config.model.position.rope_id`): `fraction` (0.5, the paper's);
  `fastest_period` r in tokens; `min_cycles` the slowest rotated pair turns over the training
  length; `train_length` (0: the positions the run trains on, written into its config when it
  starts; fixed with the model)."""

  options = {'rope_id': {
      'fraction': specs.Float(0, 1, min_open=True, default=0.5),
      'fastest_period': specs.Float(2, 1e9, default=2 * math.pi),
      'min_cycles': specs.Float(0, 1e9, min_open=True, default=2.0),
      'train_length': specs.Int(0, 2**31 - 2, default=0)}}
  capabilities = base.Capabilities(real_positions=True)
  Layer = _RopeIdLayer
  derived = ('rope_id.train_length',)  # 0: the positions the run trains on, then fixed.

  @classmethod
  def validate(cls, cfg, model_cfg, seq_len, causal):
    del seq_len, causal
    r, d = cfg.rope_id, base.head_dim(model_cfg)
    field = 'config.model.position.rope_id'
    if rotated_pairs(d, r.fraction) < 1:
      raise errors.ConfigError(
          f'{field}.fraction={r.fraction} rotates none of the {d // 2} pairs of head_dim {d} '
          f'(floor(fraction x {d // 2})). Fix: raise it (0.5, the paper\'s), or use '
          '--config.model.position.kind=none.')
    length = r.train_length or UNSET_LENGTH
    if r.min_cycles * r.fastest_period > length:
      raise errors.ConfigError(
          f'{field}.min_cycles={r.min_cycles} turns of the slowest pair over the training '
          f'length {length} are faster than the fastest pair (one turn every '
          f'fastest_period={r.fastest_period:g} tokens). Fix: lower min_cycles or '
          'fastest_period.')
