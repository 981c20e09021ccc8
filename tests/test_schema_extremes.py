"""Every declared range is one the code honours: a field set to either end of its range is
refused with a ConfigError when the config is checked, or the train step traces (lowered, not
compiled: abstract shapes, so a huge size costs nothing). A range wider than the code accepts
would pass the checks and fail inside the first step, after the workdir is written.

The default suite takes the fields that reach the traced positions and rows; `-m slow` every
numeric field of the causal LM's test config."""

import jax
from jax._src import core as jax_core
import ml_collections
import numpy as np
import pytest

from roformer import config_args
from roformer import config_schema
from roformer import errors
from roformer import resolve
from roformer import sharding
from roformer import specs
from roformer import trainer as trainer_lib

# The fields whose values reach the jitted step's positions and row shapes. data.seq_len's
# longest (2**20 tokens) traces attention's blocks one by one, 15-35 s: with -m slow.
STEP_FIELDS = ('train.pose_target_length', 'train.pose_chunks', 'train.random_positions',
               'train.float_positions', 'train.grad_accum_steps', 'train.batch_size',
               pytest.param('data.seq_len', marks=pytest.mark.slow))


def _numeric_fields(config, prefix=''):
  for key, value in config.items():
    name = f'{prefix}{key}'
    spec = config_schema.spec_at(name) if not hasattr(value, 'items') else None
    if hasattr(value, 'items') and not isinstance(config_schema.spec_at(name), specs.Map):
      yield from _numeric_fields(value, name + '.')
    elif isinstance(spec, (specs.Int, specs.Float)) and not isinstance(value, bool):
      yield name


def _extremes(spec):
  """The ends of the spec's range (an open end nudged inside it)."""
  out = []
  for end, is_open, step in ((spec.min, getattr(spec, 'min_open', False), 1),
                             (spec.max, getattr(spec, 'max_open', False), -1)):
    if end is None:
      continue
    if is_open:
      end = end + step * (1e-6 if isinstance(spec, specs.Float) else 1)
    out.append(end)
  return out


def _traces_or_refuses(field, value):
  """Sets `field` to `value` in the test config; a ConfigError from the checks returns, else
  the train step is lowered (any exception there fails the calling test)."""
  config = config_args.load_file('configs/test.py')
  *parents, leaf = field.split('.')
  node = config
  for part in parents:
    node = node[part]
  with config.unlocked():
    node[leaf] = type(node[leaf])(value) if isinstance(node[leaf], (int, float)) else value
    config.mesh.num_devices = 1
  if field.startswith('train.pose'):  # PoSE is read with a target above seq_len only.
    with config.unlocked():
      config.train.pose_target_length = max(config.train.pose_target_length,
                                             4 * config.data.seq_len)
  try:
    config_schema.check(config)
    mesh = sharding.make_mesh(config.mesh)
    resolve.validate(config, sharding.data_parallel_size(mesh), 1)
  except errors.ConfigError:
    return
  trainer = trainer_lib.Trainer(ml_collections.ConfigDict(config.to_dict()), mesh)
  rows = config.train.batch_size // config.train.grad_accum_steps
  shapes = trainer.task.feature_shapes(1, 1)
  batch = {k: jax.ShapeDtypeStruct((rows, config.data.seq_len), np.asarray(v).dtype)
           for k, v in shapes.items()}
  trainer.train_step.lower(trainer.abstract_state, batch)


@pytest.mark.parametrize('field', STEP_FIELDS)
def test_the_ends_of_a_step_fields_range_are_refused_or_trace(field):
  for value in _extremes(config_schema.spec_at(field)):
    _traces_or_refuses(field, value)  # Any exception but a ConfigError fails the test.


def _lean_tracer_sharding(self):
  raise AttributeError(f"The 'sharding' attribute is not available on {self._error_repr()}.")


@pytest.mark.slow
@pytest.mark.parametrize('field', sorted(_numeric_fields(config_args.load_file('configs/test.py'))))
def test_the_ends_of_every_numeric_range_are_refused_or_trace(field, monkeypatch):
  """Flax probes `.sharding` of every value it assigns to a Variable, and this JAX's tracer
  builds that AttributeError's message from every equation of its trace (jax-ml/jax#40041).
  roformer/stack.py's `build` gives each block a trace of its own, so building a model is
  linear in its depth, but 1,024 layers (num_layers' end) still take seconds of those messages:
  the message is all that is left out here."""
  monkeypatch.setattr(jax_core.Tracer, 'sharding', property(_lean_tracer_sharding))
  for value in _extremes(config_schema.spec_at(field)):
    _traces_or_refuses(field, value)
