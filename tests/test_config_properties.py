"""A property of every config in configs/: whatever overrides a user gives (values of the right
type, wrong types, negative, zero, huge, NaN, infinity, empty strings), the config either
passes its checks and its model, optimizer and shardings build, or a ConfigError is raised
before anything is built or compiled; never another exception.

The default suite draws a small budget per config file, derandomized (the same examples on
every run); `python -m pytest -m slow tests/test_config_properties.py` draws many more at
random.
"""

import contextlib
import math
import os
import signal

import hypothesis
import ml_collections
import pytest
from hypothesis import strategies as st

from roformer import config_args
from roformer import config_schema
from roformer import errors
from roformer import resolve
from roformer import sharding
from roformer import specs
from roformer import trainer as trainer_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, 'configs'))
                 if name.endswith('.py') and name not in ('__init__.py', 'base.py'))
# The files whose get_config needs an argument: the one each is loaded with here.
ARGUMENTS = {'continued': os.path.join(REPO, 'tests', 'data', 'legacy_layout', 'shaw')}
SMALL = 64  # Right-type integers stay at most this (or the field's minimum): tiny models.


def _load(name: str):
  """configs/NAME.py's config (with its argument from ARGUMENTS, if it needs one)."""
  spec = os.path.join(REPO, 'configs', f'{name}.py')
  return config_args.load_file(f'{spec}:{ARGUMENTS[name]}' if name in ARGUMENTS else spec)

# Values that are wrong for most fields: other types, signs, zero, huge, non-finite, empty.
HOSTILE = st.sampled_from([
    0, -1, -7, 2**31, 2**63, 10**30, 0.0, -0.5, 1.5, 1e308, -1e-300, math.nan, math.inf,
    -math.inf, '', '   ', 'x', 'nan', True, False, None, (), (0,), (-1, 2), {}, {'a': 1}])
ANYTHING = st.one_of(HOSTILE, st.integers(), st.floats(), st.text(max_size=4),
                     st.lists(st.integers(-2, 3), max_size=3).map(tuple))


def _leaves(node, prefix=''):
  """Dotted names of every field of a config; dict-valued fields (data.splits, mesh.rules)
  count as one field."""
  for key, value in node.items():
    name = f'{prefix}{key}'
    if hasattr(value, 'items') and not isinstance(config_schema.spec_at(name), specs.Map):
      yield from _leaves(value, name + '.')
    else:
      yield name


def _right(spec):
  """Values of the spec's type, mostly inside its range (tiny sizes)."""
  if isinstance(spec, specs.Int):
    low = spec.min if spec.min is not None else -SMALL
    high = max(low, min(spec.max if spec.max is not None else SMALL, SMALL))
    return st.one_of(st.integers(low, high), st.sampled_from(spec.also or (low,)))
  if isinstance(spec, specs.Float):
    low = spec.min if spec.min is not None else -1e6
    high = spec.max if spec.max is not None else 1e6
    return st.floats(low, high, exclude_min=spec.min_open, exclude_max=spec.max_open)
  if isinstance(spec, specs.Bool):
    return st.booleans()
  if isinstance(spec, specs.Str):
    return st.sampled_from(spec.choices) if spec.choices else st.text(max_size=6)
  if isinstance(spec, specs.Seq):
    return st.lists(_right(spec.of), min_size=spec.min_len,
                    max_size=spec.max_len or 3).map(tuple)
  if isinstance(spec, specs.Map):
    return st.dictionaries(st.sampled_from(['train', 'validation', 'test']), _right(spec.of),
                           max_size=2)
  if isinstance(spec, specs.Names):
    return st.sampled_from(['data', 'fsdp', 'tensor', '', ('data', 'fsdp')])
  return st.nothing()


@st.composite
def overrides(draw, config):
  """1 to 3 (field, value, as command-line text or set in a config file) of `config`."""
  fields = sorted(_leaves(config))
  chosen = []
  for _ in range(draw(st.integers(1, 3))):
    field = draw(st.sampled_from(fields))
    value = draw(st.one_of(_right(config_schema.spec_at(field)), ANYTHING))
    if (field == 'model.num_layers' and isinstance(value, int) and not isinstance(value, bool)
        and SMALL < value <= config_schema.spec_at(field).max):
      # Accepted, and built as 64 layers are: what is checked does not depend on the depth, and
      # building hundreds of layers takes seconds per example (1,024: 17 s).
      value = SMALL
    chosen.append((field, value, draw(st.booleans())))
  return chosen


def _apply(config, field, value, as_text):
  if as_text:  # --config.FIELD=TEXT, as train.py and eval.py read it.
    text = value if isinstance(value, str) else repr(value)
    config_args.override(config, field, text)
    return
  *parents, leaf = field.split('.')  # As a config file would set it.
  node = config
  for part in parents:
    node = node[part]
  with config.unlocked(), config.ignore_type():
    node[leaf] = value


def check_property(name: str, drawn) -> None:
  """The invariant for one config file and one draw of overrides."""
  config = _load(name)
  with config.unlocked():
    config.mesh.num_devices = 1  # What a test machine has; the draws may change it.
  try:
    for field, value, as_text in drawn:
      _apply(config, field, value, as_text)
    config_schema.check(config)  # What train.py and eval.py check first, before the mesh.
    mesh = sharding.make_mesh(config.mesh)
    resolve.validate(config, sharding.data_parallel_size(mesh), 1)
  except errors.ConfigError:
    return  # Refused before anything was built.
  # Accepted: the model, optimizer and shardings build (abstractly: nothing is compiled).
  trainer_lib.Trainer(ml_collections.ConfigDict(config.to_dict()), mesh)


def _settings(examples: int, derandomize: bool):
  return hypothesis.settings(max_examples=examples, deadline=None, derandomize=derandomize,
                             database=None, print_blob=True,
                             suppress_health_check=list(hypothesis.HealthCheck))


# An example that checks and builds a config takes well under a second; one that takes minutes
# would keep a user waiting as long before the run starts or is refused.
EXAMPLE_SECONDS = 60


class _TooSlow(BaseException):
  """An example over EXAMPLE_SECONDS: a BaseException, so that no `except Exception` on the
  way takes it for the code's own error, and hypothesis stops at once rather than shrinking."""


@contextlib.contextmanager
def _at_most(seconds: int, drawn):
  """Raises _TooSlow (naming `drawn`) where the block runs longer than `seconds` (SIGALRM:
  Python code is interrupted at once, a long call into C when it returns)."""
  def late(*_):
    raise _TooSlow(f'{drawn} took over {seconds} s to check and build')
  previous = signal.signal(signal.SIGALRM, late)
  signal.alarm(seconds)
  try:
    yield
  finally:
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _draw(name: str, examples: int, derandomize: bool) -> None:
  """check_property on `examples` draws of overrides for configs/NAME.py, each within
  EXAMPLE_SECONDS."""
  @_settings(examples=examples, derandomize=derandomize)
  @hypothesis.given(overrides(_load(name)))
  def prop(drawn):
    with _at_most(EXAMPLE_SECONDS, drawn):
      check_property(name, drawn)
  prop()


@pytest.mark.parametrize('name', CONFIGS)
def test_any_overrides_validate_and_build_or_raise_config_error(name):
  _draw(name, examples=6, derandomize=True)


@pytest.mark.slow
@pytest.mark.parametrize('name', CONFIGS)
def test_any_overrides_validate_and_build_or_raise_config_error_thoroughly(name):
  _draw(name, examples=300, derandomize=False)


@pytest.mark.parametrize('field, meant', [
    ('train.setps', 'config.train.steps'),  # Misspelt in its own group.
    ('train.init_from', 'config.init_from'),  # In another group: found by its exact name.
    ('model.seq_len', 'config.data.seq_len'),
    ('data.position.kind', 'config.model.position'),
    ('model.batch_size', 'config.eval.batch_size or config.train.batch_size')])  # Not vocab_size.
def test_a_field_not_where_it_is_given_names_the_one_meant(field, meant):
  with pytest.raises(errors.ConfigError, match=rf'no field .* \(did you mean {meant}\?\)'):
    config_args.load('configs/lm.py', [(field, '1')])
