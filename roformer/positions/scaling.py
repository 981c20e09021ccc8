"""RoPE's frequencies and their context-extension scalings (`config.model.position.rope.scaling`).

Frequencies are float64 numpy constants, never parameters: they stay out of the optimizer state
and are turned into float32 angles only where positions meet them. Two kinds follow the length
of the input, the (traced) largest position + 1 of each call: `dynamic`, whose frequencies
`dynamic_frequencies` computes in float32 at every call, and `longrope`, which chooses between
two sets of constants (`longrope_frequencies`).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from roformer import errors
from roformer import specs

KINDS = ('none', 'linear', 'ntk', 'yarn', 'llama3', 'dynamic', 'longrope')
RAMPS = ('ratio', 'index', 'index_unrounded')
# The layers a scaling applies to: every one, or those without a sliding window (model.layer_windows
# 0: Gemma 3's global layers, which transformers scales alone), the windowed ones rotating by the
# plain frequencies.
LAYERS = ('all', 'global')
# Which dimensions of q and k an attention factor multiplies: all of each head, or the rotated
# ones alone (what transformers computes: it multiplies the cosines and sines).
FACTOR_DIMS = ('all', 'rotated')
# Scalings defined relative to the length the model was trained at (eval.py fills it in).
NEEDS_ORIGINAL_LENGTH = ('yarn', 'llama3', 'dynamic', 'longrope')
# Scalings whose options are searched per model (LongRoPE's pair factors): no factor sets them
# at evaluation, so scripts/evaluate_extensions.sh offers the others (a model imported with one
# is evaluated as it is, and under the others).
PER_MODEL = ('longrope',)
# Scalings that multiply q and k by an attention factor.
TEMPERED = ('yarn', 'longrope')
# Scalings that stretch the trained context by `factor` (a continued run's factor must cover
# its new length from the source's).
STRETCHING = ('linear', 'ntk', 'yarn', 'llama3')

# `config.model.position.rope.scaling`: each option's type, range and default (rotary.py puts
# them in the config; roformer/config_schema.py checks them). Configs saved before an option
# existed read its default.
SPECS = {
    'kind': specs.Str(KINDS, default='none'),
    # The new context length over the trained one (at least 1).
    'factor': specs.Float(1, 1e6, default=1.0),
    # yarn, llama3, dynamic: the length the model was trained at (0: eval.py fills it in).
    'original_length': specs.Int(0, 2**24, default=0),
    # Which layers it scales (LAYERS).
    'layers': specs.Str(LAYERS, default='all'),
    # yarn's ramp between alpha and beta (alpha < beta), and how it is measured.
    'alpha': specs.Float(0, 1e6, min_open=True, default=1.0),
    'beta': specs.Float(0, 1e6, min_open=True, default=32.0),
    'ramp': specs.Str(RAMPS, default='ratio'),
    # yarn's and longrope's q and k multiplier (transformers' attention_factor); 0: yarn's
    # 0.1 ln(factor) + 1, longrope's sqrt(1 + ln(factor) / ln(original_length)).
    'attention_factor': specs.Float(0, 1e6, default=0.0),
    # Which dimensions it multiplies (FACTOR_DIMS): they differ where rope.fraction < 1.
    'attention_factor_dims': specs.Str(FACTOR_DIMS, default='all'),
    # llama3's wavelength band (low < high).
    'low_freq_factor': specs.Float(0, 1e6, min_open=True, default=1.0),
    'high_freq_factor': specs.Float(0, 1e6, min_open=True, default=4.0),
    # longrope's divisor of each rotated pair's frequency: up to the original length (short)
    # and beyond it (long), one per pair (Ding et al. 2024; Phi-3's searched factors).
    'short_factor': specs.Seq(specs.Float(0, 1e6, min_open=True), default=()),
    'long_factor': specs.Seq(specs.Float(0, 1e6, min_open=True), default=()),
}
DEFAULTS = specs.defaults(SPECS)
# The options that shape some kinds only, in the groups they are set in, with those kinds:
# validate refuses a group away from its defaults under any other kind, and `switched` sets it
# back.
SHAPES = ((('layers',), KINDS[1:]), (('alpha', 'beta'), ('yarn',)), (('ramp',), ('yarn',)),
          (('attention_factor',), TEMPERED), (('attention_factor_dims',), TEMPERED),
          (('low_freq_factor', 'high_freq_factor'), ('llama3',)),
          (('short_factor', 'long_factor'), ('longrope',)))
_NAMES = {'yarn': 'YaRN', 'llama3': 'llama3', 'longrope': 'LongRoPE'}


# The options a scaling keeps under another kind that reads them: they describe the model (which
# layers are scaled, which dimensions a factor multiplies), not one kind's formula.
KEPT = ('layers', 'attention_factor_dims')


def switched(scaling, kind: str) -> dict:
  """The options to set back to their defaults when `scaling` is evaluated under `kind`
  instead: those not at their default that shape other kinds only (an imported YaRN model's
  `index` ramp under `linear`, say), or that are its own kind's formula (LongRoPE's attention
  factor under YaRN, whose own is 0.1 ln s + 1). Factor, original length and `KEPT` are kept
  where the new kind reads them."""
  return {name: DEFAULTS[name] for group, owners in SHAPES for name in group
          if option(scaling, name) != DEFAULTS[name] and (
              kind not in owners or (kind != scaling.kind and name not in KEPT))}


def option(scaling, name: str):
  """`scaling.<name>`, or its default for configs saved before the option existed."""
  return scaling.get(name, DEFAULTS[name])


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
  """YaRN's growth of the attention for a stretch by `factor`: 0.1 mscale ln(factor) + 1, and 1
  where nothing is stretched (factor <= 1), as transformers' get_mscale; DeepSeek's mscale and
  mscale_all_dim are its `mscale`."""
  return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0


def rope_frequencies(head_dim: int, base: float = 10000.0) -> np.ndarray:
  """theta_i = base^(-2(i-1)/d) for i = 1..d/2 (float64 constants, not parameters)."""
  return base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def yarn_ramp(head_dim: int, base: float, scaling) -> np.ndarray:
  """YaRN's share gamma_i in [0, 1] of pair i's original frequency (1: kept, 0: divided by s).

  - `ratio` (Peng et al. 2023, eq. 18-19, the default): with r_i = L / lambda_i the number of
    rotations pair i makes over the original length L (lambda_i = 2 pi / theta_i),
    gamma_i = clip((r_i - alpha) / (beta - alpha), 0, 1). Linear in r, i.e. exponential in i.
  - `index` (the released YaRN code and Hugging Face's `_compute_yarn_parameters`, which
    checkpoints with YaRN were tuned with): the pair index at which r_i equals n rotations is
    dim(n) = d ln(L / (2 pi n)) / (2 ln base); from low = max(floor(dim(beta)), 0) to
    high = min(ceil(dim(alpha)), d - 1) (high += 0.001 if equal) gamma falls linearly in i:
    gamma_i = 1 - clip((i - low) / (high - low), 0, 1).
  - `index_unrounded`: the same from low = max(dim(beta), 0) to high = min(dim(alpha), d - 1),
    not rounded to whole pairs (transformers' `truncate: false`, gpt-oss's checkpoints).
  Each keeps the pairs that rotate more than beta times and interpolates those below alpha.
  """
  length, alpha, beta = scaling.original_length, scaling.alpha, scaling.beta
  if option(scaling, 'ramp') == 'ratio':
    ratio = length * rope_frequencies(head_dim, base) / (2 * np.pi)
    return np.clip((ratio - alpha) / (beta - alpha), 0.0, 1.0)
  dim = lambda rotations: head_dim * np.log(length / (2 * np.pi * rotations)) / (2 * np.log(base))
  low, high = dim(beta), dim(alpha)
  if option(scaling, 'ramp') == 'index':
    low, high = np.floor(low), np.ceil(high)
  low, high = max(low, 0.0), min(high, head_dim - 1.0)
  if low == high:
    high += 0.001
  return 1.0 - np.clip((np.arange(head_dim // 2) - low) / (high - low), 0.0, 1.0)


def llama3_frequencies(theta: np.ndarray, scaling) -> np.ndarray:
  """Llama 3.1's rule on wavelengths lambda = 2 pi / theta, with L the original length and
  s the factor: lambda < L / high_freq_factor keeps theta; lambda > L / low_freq_factor gives
  theta / s; in between, with smooth = (L / lambda - low_freq_factor) / (high_freq_factor -
  low_freq_factor), theta' = (1 - smooth) theta / s + smooth theta (continuous at both ends)."""
  s, length = float(scaling.factor), scaling.original_length
  low, high = option(scaling, 'low_freq_factor'), option(scaling, 'high_freq_factor')
  wavelength = 2 * np.pi / theta
  smooth = (length / wavelength - low) / (high - low)
  medium = (1 - smooth) * theta / s + smooth * theta
  return np.where(wavelength < length / high, theta,
                  np.where(wavelength > length / low, theta / s, medium))


def longrope_attention_factor(scaling) -> float:
  """LongRoPE's q and k multiplier: `attention_factor`, or sqrt(1 + ln s / ln L) with s the
  factor and L the original length (1 where s <= 1), as Phi-3 and transformers set it."""
  given, s = option(scaling, 'attention_factor'), float(scaling.factor)
  if given:
    return float(given)
  return 1.0 if s <= 1 else float(np.sqrt(1 + np.log(s) / np.log(scaling.original_length)))


def longrope_frequencies(theta: np.ndarray, scaling) -> tuple[np.ndarray, np.ndarray]:
  """LongRoPE's two sets of frequencies (short, long): theta_i divided by pair i's
  `short_factor` and `long_factor`. A call whose length (largest position + 1) exceeds the
  original length L rotates every position by the long set, any other by the short one
  (transformers' rule, made stateless: it depends on this call's positions only)."""
  short = np.asarray(option(scaling, 'short_factor'), np.float64)
  long = np.asarray(option(scaling, 'long_factor'), np.float64)
  return theta / short, theta / long


def scaled_frequencies(head_dim: int, base: float, scaling) -> tuple[np.ndarray, float]:
  """Frequencies and the q/k multiplier for RoPE context extension (`rope.scaling`).

  - linear (Chen et al. 2023, position interpolation): positions / s, i.e. theta_i / s.
  - ntk: the base becomes base * s^(d / (d - 2)).
  - yarn (Peng et al. 2023): theta_i' = (1 - gamma_i) theta_i / s + gamma_i theta_i with
    gamma from `yarn_ramp` (`ramp`: ratio or index); logits are sharpened by t^-1 with
    sqrt(1/t) = 0.1 ln(s) + 1 (or `attention_factor`), applied to both q and k.
  - llama3 (Llama 3.1): `llama3_frequencies`.
  - dynamic: the plain frequencies; `dynamic_frequencies` scales them at each call.
  - longrope (Ding et al. 2024): the short set of `longrope_frequencies` (the long one is
    chosen at each call), and `longrope_attention_factor`.
  """
  kind, s = scaling.kind, float(scaling.factor)
  theta = rope_frequencies(head_dim, base)
  if kind in ('none', 'dynamic'):
    return theta, 1.0
  if kind == 'linear':
    return theta / s, 1.0
  if kind == 'ntk':
    return rope_frequencies(head_dim, base * s ** (head_dim / (head_dim - 2))), 1.0
  if kind == 'yarn':
    gamma = yarn_ramp(head_dim, base, scaling)
    return ((1 - gamma) * theta / s + gamma * theta,
            option(scaling, 'attention_factor') or yarn_mscale(s))
  if kind == 'llama3':
    return llama3_frequencies(theta, scaling), 1.0
  if kind == 'longrope':
    return longrope_frequencies(theta, scaling)[0], longrope_attention_factor(scaling)
  raise errors.ConfigError(f'config.model.position.rope.scaling.kind={kind!r} is unknown. '
                           f'Fix: one of {KINDS}.')


def dynamic_frequencies(head_dim: int, base: float, factor: float, original_length: int,
                        length: jax.Array) -> jax.Array:
  """Dynamically scaled NTK: float32 frequencies [..., d/2] for the current `length` (integer
  [...], the largest position seen + 1). Up to the original length L the base is unchanged;
  beyond, it is ntk's base with the factor s length / L - (s - 1), which grows linearly from 1
  at L: base * (s length / L - (s - 1))^(d / (d - 2)) (the "dynamically scaled" NTK rule, as
  Hugging Face's `_compute_dynamic_ntk_parameters`, made stateless: it depends on this call's
  positions only, never on lengths seen before)."""
  s, original = float(factor), float(original_length)
  growth = jnp.maximum(s * length.astype(jnp.float32) / original - (s - 1.0), 1.0)
  log_base = np.log(base) + head_dim / (head_dim - 2) * jnp.log(growth)
  exponents = jnp.asarray(-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim, jnp.float32)
  return jnp.exp(log_base[..., None] * exponents)


def validate(sc, rotary_dim: int) -> None:
  """Checks `config.model.position.rope.scaling` for a rotation of `rotary_dim` dimensions."""
  field = 'config.model.position.rope.scaling'
  if sc.kind in ('ntk', 'dynamic') and rotary_dim <= 2:
    raise errors.ConfigError(f'rope.scaling.kind={sc.kind} needs a rotated dimension above 2 '
                             '(it scales the base by a power d/(d-2)).')
  if sc.kind in NEEDS_ORIGINAL_LENGTH and sc.original_length < 1:
    raise errors.ConfigError(
        f'rope.scaling.kind={sc.kind} needs {field}.original_length (the training length; '
        'eval.py fills it in from the workdir). Fix: set '
        f'--{field}.original_length.')
  if sc.kind == 'none' and sc.factor != DEFAULTS['factor']:
    raise errors.ConfigError(
        f'{field}.factor={sc.factor:g} is read by a scaling, but {field}.kind is \'none\', so '
        f'nothing would be scaled. Fix: --{field}.kind=linear (or ntk, yarn, llama3, dynamic, '
        f'longrope), or --{field}.factor=1.')
  for group, owners in SHAPES:
    if sc.kind not in owners and any(option(sc, n) != DEFAULTS[n] for n in group):
      given = ', '.join(f'{n}={option(sc, n)}' for n in group)
      back = ' '.join(f"--{field}.{n}={DEFAULTS[n] if DEFAULTS[n] != () else repr('()')}"
                      for n in group)
      shaped = ('a scaling' if owners == KINDS[1:] else
                ' and '.join(_NAMES[k] for k in owners) + ' only')
      raise errors.ConfigError(
          f'{field}.{" and ".join(group)} shape{"s" if len(group) == 1 else ""} {shaped}, '
          f'but the scaling kind is {sc.kind!r} (given: {given}). Fix: '
          f'--{field}.kind={owners[0]}, or {back}.')
  if sc.kind == 'yarn' and not 0 < sc.alpha < sc.beta:
    raise errors.ConfigError(f'{field} needs 0 < alpha < beta (got alpha={sc.alpha}, '
                             f'beta={sc.beta}; the ramp runs between them). Fix: change one '
                             'of them.')
  low, high = option(sc, 'low_freq_factor'), option(sc, 'high_freq_factor')
  if sc.kind == 'llama3' and not 0 < low < high:
    raise errors.ConfigError(f'{field} needs 0 < low_freq_factor < high_freq_factor (got '
                             f'{low}, {high}). Fix: change one of them.')
  if sc.kind == 'longrope':
    pairs = rotary_dim // 2
    lengths = {n: len(option(sc, n)) for n in ('short_factor', 'long_factor')}
    wrong = [f'{n} has {k}' for n, k in lengths.items() if k != pairs]
    if wrong:
      raise errors.ConfigError(
          f"{field}.kind='longrope' divides each of the {pairs} rotated pairs' frequency by its "
          f"own factor, but {' and '.join(wrong)}. Fix: --{field}.short_factor='(...)' and "
          f"--{field}.long_factor='(...)' with {pairs} numbers each.")
