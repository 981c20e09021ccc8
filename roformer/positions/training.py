"""Training positions other than 0, 1, ..., n - 1: the samplers a causal LM's training rows may
draw their positions from, declared once each and looked up here.

A sampler is a `Sampler` subclass registered under a name (`register`). It declares:
- `options`: its fields under `config.train` (roformer/config_schema.py takes them from here),
  one of them its `switch`: a value above 0 turns it on and is the range of positions it trains
  on (what a scheme's `from_source` and the remaps' checks see as the trained positions);
- `validate`: the checks of its own options against the run (after the shared ones below);
- `real`: it draws real numbers, which only kinds that declare `real_positions` read as such;
- `draw`: a training batch's positions from the step's key (folded with its own `seed`, so that
  each sampler's draws are their own stream, and dropout, which keeps the step's key as it is,
  draws what it would without the sampler);
- `evaluated`: the positions evaluation gives the model (by default the batch's own, 0..n-1);
- `label`: the options a report shows beside the scheme.

The checks every sampler shares are here (`validate`): at most one is on, only for the causal LM,
and only with a scheme that reads positions (real ones if it draws them). Adding a sampler is a
module of its own in this package and its tests.
"""

from typing import Callable

import jax
import ml_collections

from roformer import errors
from roformer.positions import registry

_SAMPLERS: dict[str, type['Sampler']] = {}


class Sampler:
  """A way of drawing training positions (module docstring); subclasses set the attributes and
  override what they need."""

  name = ''
  options: dict = {}  # {field under config.train: spec}
  switch = ''  # The option that turns it on and sets the range trained on.
  real = False  # Draws real-valued positions.
  seed = 0  # Its stream of the step's key.

  @classmethod
  def on(cls, train: ml_collections.ConfigDict) -> bool:
    return train[cls.switch] > 0

  @classmethod
  def covers(cls, train: ml_collections.ConfigDict) -> int:
    """The positions it trains on: [0, that)."""
    return int(train[cls.switch])

  @classmethod
  def validate(cls, config: ml_collections.ConfigDict) -> None:
    """Raises ConfigError naming the field and the fix for its own options."""
    del config

  @classmethod
  def draw(cls, key: jax.Array, batch: dict, train: ml_collections.ConfigDict) -> jax.Array:
    raise NotImplementedError

  @classmethod
  def evaluated(cls, batch: dict, train: ml_collections.ConfigDict) -> jax.Array:
    """The positions of an evaluation batch: its own by default."""
    del train
    return batch['inputs_positions']

  @classmethod
  def label(cls, train: dict) -> dict:
    """{option: value} a report shows for a run that used it."""
    return {name: train[name] for name in cls.options if name in train}


def register(name: str) -> Callable[[type[Sampler]], type[Sampler]]:
  def wrap(cls):
    cls.name = name
    _SAMPLERS[name] = cls
    return cls
  return wrap


def samplers() -> list[type[Sampler]]:
  return [_SAMPLERS[name] for name in sorted(_SAMPLERS)]


def options() -> dict:
  """Every sampler's fields under config.train, with their specs."""
  return {field: spec for cls in samplers() for field, spec in cls.options.items()}


def active(train: ml_collections.ConfigDict) -> type[Sampler] | None:
  """The sampler `train` turns on (validate has checked there is at most one), or None."""
  on = [cls for cls in samplers() if cls.on(train)]
  return on[0] if on else None


def covered(config: ml_collections.ConfigDict) -> list[tuple[int, str]]:
  """(positions trained on, the field that sets them) for each sampler that is on."""
  return [(cls.covers(config.train), f'config.train.{cls.switch}')
          for cls in samplers() if cls.on(config.train)]


def labels(train: dict) -> dict:
  """The options of the samplers a saved run's config.train (a dict) turned on."""
  out = {}
  for cls in samplers():
    if train.get(cls.switch):  # A config saved before a sampler existed lacks its fields.
      out.update(cls.label(train))
  return out


def validate(config: ml_collections.ConfigDict, decoder_only: bool) -> None:
  """The checks every sampler shares (`decoder_only`: the model type predicts the next token
  with one causal stack, roformer/model_types.py), then its own, then the scheme against the
  positions it will see (a learned table shorter than them)."""
  on = [cls for cls in samplers() if cls.on(config.train)]
  if not on:
    return
  m = config.model
  fields = [f'config.train.{cls.switch}={config.train[cls.switch]}' for cls in on]
  if len(on) > 1:
    raise errors.ConfigError(f'{" and ".join(fields)} both choose the training positions. '
                             'Fix: set all but one of them to 0.')
  cls, field = on[0], fields[0]
  if not decoder_only:
    raise errors.ConfigError(f'{field}: {cls.name} is offered for the causal LM (model.type is '
                             f'{m.type!r}). Fix: set it to 0.')
  caps = registry.model_scheme(m).capabilities
  if not caps.reads_positions:
    raise errors.ConfigError(
        f'{field}, but position.kind={m.position.kind!r} reads no integer positions. Fix: set '
        'it to 0, or choose a scheme that reads positions.')
  if cls.real and not caps.real_positions:
    real = [k for k in registry.kinds() if registry.capabilities(k).real_positions]
    raise errors.ConfigError(
        f'{field} draws real-valued positions, and position.kind={m.position.kind!r} does not '
        'declare that it reads positions as real numbers (Capabilities.real_positions: a '
        f'table row or a bucket needs an integer). Fix: one of {real}, or integer training '
        'positions (config.train.random_positions).')
  cls.validate(config)
  try:
    registry.validate(m, cls.covers(config.train), causal=True)
  except errors.ConfigError as e:  # Named by the field that asks for those positions.
    own = errors.fix_of(e).replace(', or shorten the sequence', '')  # The sequence is not it.
    raise errors.ConfigError(
        f'{field} trains on positions up to {cls.covers(config.train)}: {errors.without_fix(e)} '
        f'Fix: a smaller config.train.{cls.switch}' + (f', or {own}' if own else '')
        + '.') from None


def positions(batch: dict, key: jax.Array | None, train: ml_collections.ConfigDict | None):
  """The positions a causal LM reads: drawn by the active sampler while training (a key is
  given), its evaluation positions otherwise, the batch's own without a sampler."""
  cls = active(train) if train is not None else None
  if cls is None:
    return batch['inputs_positions']
  if key is None:
    return cls.evaluated(batch, train)
  return cls.draw(jax.random.fold_in(key, cls.seed), batch, train)
