"""RoPE's frequencies and their context-extension scalings (`config.model.position.rope.scaling`).

Frequencies are float64 numpy constants, never parameters: they stay out of the optimizer state
and are turned into float32 angles only where positions meet them."""

import numpy as np

from roformer import errors
from roformer import specs

KINDS = ('none', 'linear', 'ntk', 'yarn')

# `config.model.position.rope.scaling`: each option's type, range and default.
SPECS = {
    'kind': specs.Str(KINDS, default='none'),
    # The new context length over the trained one (at least 1).
    'factor': specs.Float(1, 1e6, default=1.0),
    # yarn: the length the model was trained at (0: eval.py fills in the workdir's).
    'original_length': specs.Int(0, 2**24, default=0),
    # yarn's ramp, in rotations over original_length: alpha < beta.
    'alpha': specs.Float(0, 1e6, min_open=True, default=1.0),
    'beta': specs.Float(0, 1e6, min_open=True, default=32.0),
}


def rope_frequencies(head_dim: int, base: float = 10000.0) -> np.ndarray:
  """theta_i = base^(-2(i-1)/d) for i = 1..d/2 (float64 constants, not parameters)."""
  return base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def scaled_frequencies(head_dim: int, base: float, scaling) -> tuple[np.ndarray, float]:
  """Frequencies and the q/k multiplier for RoPE context extension (`rope.scaling`).

  - linear (Chen et al. 2023, position interpolation): positions / s, i.e. theta_i / s.
  - ntk: the base becomes base * s^(d / (d - 2)).
  - yarn (Peng et al. 2023): with r_i = original_length / (2 pi / theta_i) and the ramp
    g(r) = clip((r - alpha) / (beta - alpha), 0, 1), theta_i' = (1 - g) theta_i / s + g theta_i;
    logits are sharpened by t^-1 with sqrt(1/t) = 0.1 ln(s) + 1, applied to both q and k.
  """
  kind, s = scaling.kind, float(scaling.factor)
  if kind == 'none':
    return rope_frequencies(head_dim, base), 1.0
  if kind == 'linear':
    return rope_frequencies(head_dim, base) / s, 1.0
  if kind == 'ntk':
    return rope_frequencies(head_dim, base * s ** (head_dim / (head_dim - 2))), 1.0
  if kind == 'yarn':
    theta = rope_frequencies(head_dim, base)
    ratio = scaling.original_length * theta / (2 * np.pi)
    ramp = np.clip((ratio - scaling.alpha) / (scaling.beta - scaling.alpha), 0.0, 1.0)
    return (1 - ramp) * theta / s + ramp * theta, 0.1 * np.log(s) + 1.0
  raise errors.ConfigError(f'config.model.position.rope.scaling.kind={kind!r} is unknown. '
                           "Fix: one of 'none', 'linear', 'ntk', 'yarn'.")


def validate(sc, rotary_dim: int) -> None:
  """Checks `config.model.position.rope.scaling` for a rotation of `rotary_dim` dimensions."""
  if sc.kind == 'ntk' and rotary_dim <= 2:
    raise errors.ConfigError('rope.scaling.kind=ntk needs a rotated dimension above 2 (it '
                             'scales the base by factor^(d/(d-2))).')
  if sc.kind == 'yarn':
    if sc.original_length < 1:
      raise errors.ConfigError(
          'rope.scaling.kind=yarn needs config.model.position.rope.scaling.original_length '
          '(the training length; eval.py fills it in from the workdir).')
    if not sc.alpha < sc.beta:
      raise errors.ConfigError(
          f'config.model.position.rope.scaling.alpha={sc.alpha} must be below beta={sc.beta} '
          '(the ramp between them). Fix: change one of them.')
