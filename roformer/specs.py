"""The declared type and range of a config field: small spec classes, checked generically.

A spec says what one field may hold: `Int(1)` an integer >= 1, `Float(0, 1, max_open=True)` a
finite number in [0, 1) (every Float must be finite: a NaN or an infinity never reaches a run),
`Bool()`, `Str(choices=...)`, `Seq(Int(1))` a tuple of them, `Map(Str())` a dict of them,
`Names()` a name or a tuple of names. It does two things:

- `check(value, name)`: raises ConfigError naming the field, the value, what it must be and the
  fix; `roformer/config_schema.py` runs it on every field before anything is built.
- `parse(text, name)`: the value of a command-line override `--config.a.b=TEXT` in the spec's
  type (a type mismatch is a ConfigError; the range is checked later, with the whole config).

A spec may carry the field's default (`Int(1, default=16)`): the position schemes declare their
options that way, so that the default, the type and the range sit together in the scheme class.
"""

import ast
import copy
import difflib
import math
from typing import Any, Callable, Iterable

from absl import flags
from ml_collections.config_flags import tuple_parser

from roformer import errors

_UNSET = object()


def _flag(name: str) -> str:
  """The command-line flag that sets field `name` ('config.a.b' -> '--config.a.b')."""
  return f'--{name}' if name.startswith('config.') else name


class Spec:
  """A field's type and range; `default` is the field's default where the spec declares one.
  `reader`: the runs that read the field, where only some do (roformer/config_schema.py sets
  it); None for every run."""

  reader = None
  # The occasions ('resume', 'continue', 'evaluate': roformer/saved_config.py) on which the
  # field must equal the saved run's, and why (what the field decides of a trained run); set
  # beside the field with `kept` (roformer/config_schema.py, or the module that declares it).
  fixed_on: tuple = ()
  fixed_because = ''

  def __init__(self, default: Any = _UNSET):
    self.default = default

  @property
  def has_default(self) -> bool:
    return self.default is not _UNSET

  def describe(self) -> str:
    """What the field must be, e.g. 'an integer >= 1'."""
    raise NotImplementedError

  def type_ok(self, value) -> bool:
    raise NotImplementedError

  def range_ok(self, value) -> bool:
    del value
    return True

  def check(self, value, name: str) -> None:
    """Raises ConfigError if `value` is not of this spec's type and range."""
    if not self.type_ok(value):
      raise errors.ConfigError(
          f'{name}={value!r} is {_kind(value)}; it must be {self.describe()}. Fix: '
          f'{_flag(name)}=<{self.describe()}>.')
    if not self.range_ok(value):
      raise errors.ConfigError(f'{name}={value!r} must be {self.describe()}. Fix: '
                               f'{_flag(name)}=<{self.describe()}>.')

  def parse(self, text: str, name: str):
    """The value of `--name=text` in this spec's type (ranges are checked later)."""
    raise NotImplementedError

  def _not(self, text: str, name: str, what: str) -> errors.ConfigError:
    return errors.ConfigError(f'{_flag(name)}={text!r} is not {what}; {name} must be '
                              f'{self.describe()}. Fix: {_flag(name)}=<{self.describe()}>.')


def _kind(value) -> str:
  """'a str', 'an int', 'None' for messages."""
  if value is None:
    return 'None'
  name = type(value).__name__
  return f'{"an" if name[0] in "aeiou" else "a"} {name}'


def _num(x) -> str:
  return str(x) if isinstance(x, int) else f'{x:g}'


def _bounds(low, high, low_open=False, high_open=False, also=()) -> str:
  if low is not None and high is not None:
    text = f'in {"(" if low_open else "["}{_num(low)}, {_num(high)}{")" if high_open else "]"}'
  elif low is not None:
    text = f'{">" if low_open else ">="} {_num(low)}'
  elif high is not None:
    text = f'{"<" if high_open else "<="} {_num(high)}'
  else:
    text = ''
  if also:
    text += ', or ' + ' or '.join(str(a) for a in also)
  return text


def _in_range(value, low, high, low_open, high_open) -> bool:
  if low is not None and (value <= low if low_open else value < low):
    return False
  return not (high is not None and (value >= high if high_open else value > high))


class Int(Spec):
  """An integer (not a bool) in [min, max] (either end may be None), or one of `also` (e.g.
  -1 for 'everything')."""

  def __init__(self, min: int | None = None, max: int | None = None, *,  # pylint: disable=redefined-builtin
               also: Iterable[int] = (), default: Any = _UNSET):
    super().__init__(default)
    self.min, self.max, self.also = min, max, tuple(also)

  def describe(self) -> str:
    bounds = _bounds(self.min, self.max, also=self.also)
    return f'an integer {bounds}' if bounds else 'an integer'

  def type_ok(self, value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

  def range_ok(self, value) -> bool:
    return value in self.also or _in_range(value, self.min, self.max, False, False)

  def parse(self, text, name):
    try:
      return flags.IntegerParser().parse(text.strip())
    except (ValueError, TypeError):
      raise self._not(text, name, 'an integer') from None


class Float(Spec):
  """A finite number (an int is accepted) in the interval from min to max, each end closed
  unless `min_open`/`max_open`; None: unbounded on that side (but finite)."""

  def __init__(self, min: float | None = None, max: float | None = None, *,  # pylint: disable=redefined-builtin
               min_open: bool = False, max_open: bool = False, default: Any = _UNSET):
    super().__init__(default)
    self.min, self.max, self.min_open, self.max_open = min, max, min_open, max_open

  def describe(self) -> str:
    bounds = _bounds(self.min, self.max, self.min_open, self.max_open)
    return f'a finite number {bounds}' if bounds else 'a finite number'

  def type_ok(self, value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

  def range_ok(self, value) -> bool:
    return math.isfinite(value) and _in_range(value, self.min, self.max, self.min_open,
                                              self.max_open)

  def parse(self, text, name):
    try:
      return flags.FloatParser().parse(text.strip())
    except (ValueError, TypeError, OverflowError):
      raise self._not(text, name, 'a number') from None


class Bool(Spec):
  """True or False (on the command line: true/false, t/f, 1/0, any case)."""

  def describe(self) -> str:
    return 'true or false'

  def type_ok(self, value) -> bool:
    return isinstance(value, bool)

  def parse(self, text, name):
    try:
      return flags.BooleanParser().parse(text.strip())
    except (ValueError, TypeError):
      raise self._not(text, name, 'true or false') from None


class Str(Spec):
  """A string, one of `choices` if given (a tuple, or a function returning one, for choices
  known only once everything is imported), non-empty if `nonempty`."""

  def __init__(self, choices: Iterable[str] | Callable[[], Iterable[str]] | None = None, *,
               nonempty: bool = False, default: Any = _UNSET):
    super().__init__(default)
    self._choices, self.nonempty = choices, nonempty

  @property
  def choices(self) -> tuple[str, ...] | None:
    choices = self._choices() if callable(self._choices) else self._choices
    return None if choices is None else tuple(sorted(choices))

  def describe(self) -> str:
    if self.choices is not None:
      return f'one of {list(self.choices)}'
    return 'a non-empty string' if self.nonempty else 'a string'

  def type_ok(self, value) -> bool:
    return isinstance(value, str)

  def range_ok(self, value) -> bool:
    if self.choices is not None:
      return value in self.choices
    return bool(value.strip()) or not self.nonempty

  def check(self, value, name):
    if self.type_ok(value) and self.choices is not None and value not in self.choices:
      raise errors.ConfigError(f'{name}={value!r} is unknown. Fix: one of '
                               f'{list(self.choices)}.')
    super().check(value, name)

  def parse(self, text, name):
    del name
    return text


class Seq(Spec):
  """A tuple (or list) of items of spec `of`, with min_len..max_len items. On the command line
  a Python literal, e.g. '(1,2,4)' or "('a', 'b')" (ml_collections' tuple parser)."""

  def __init__(self, of: Spec, min_len: int = 0, max_len: int | None = None, *,
               default: Any = _UNSET):
    super().__init__(default)
    self.of, self.min_len, self.max_len = of, min_len, max_len

  def describe(self) -> str:
    if self.max_len is not None:
      count = (f'{self.min_len}' if self.min_len == self.max_len else
               f'{self.min_len} to {self.max_len}')
    else:
      count = f'at least {self.min_len}' if self.min_len else 'any number of'
    return f'a tuple of {count} items, each {self.of.describe()}'

  def type_ok(self, value) -> bool:
    return isinstance(value, (tuple, list))

  def range_ok(self, value) -> bool:
    return self.min_len <= len(value) and (self.max_len is None or len(value) <= self.max_len)

  def check(self, value, name):
    super().check(value, name)
    for i, item in enumerate(value):
      try:
        self.of.check(item, f'{name}[{i}]')
      except errors.ConfigError as e:  # Its fix names the tuple: an item has no flag.
        raise errors.ConfigError(
            f'{errors.without_fix(e)} Fix: {_flag(name)}=\'(...)\' with every item '
            f'{self.of.describe()}.') from None

  def parse(self, text, name):
    try:
      return tuple_parser.TupleParser().parse(text)
    except (ValueError, TypeError):
      raise self._not(text, name, "a tuple such as '(1,2)'") from None


class Map(Spec):
  """A dict from names to values of spec `of` (any names, e.g. renamed splits). On the command
  line a Python dict literal, or one entry at a time: --config.data.splits.validation=test."""

  def __init__(self, of: Spec, *, default: Any = _UNSET):
    super().__init__(default)
    self.of = of

  def describe(self) -> str:
    return f'a dict of names to values, each {self.of.describe()}'

  def type_ok(self, value) -> bool:
    return isinstance(value, dict) or hasattr(value, 'to_dict')

  def check(self, value, name):
    super().check(value, name)
    for key, item in (value.to_dict() if hasattr(value, 'to_dict') else value).items():
      if not isinstance(key, str) or not key:
        raise errors.ConfigError(f'{name} has the key {key!r}; keys must be non-empty names.')
      self.of.check(item, f'{name}.{key}')

  def parse(self, text, name):
    return _dict_literal(self, text, name, "{'validation': 'test'}")


class Record(Spec):
  """A dict of named fields, each held to its own spec, some of them `required` (an entry of
  config.data.mixture: its weight and the data fields it sets). On the command line a Python
  dict literal, or, for an entry that exists, one field at a time:
  --config.data.mixture.plays.weight=0.8."""

  def __init__(self, fields: dict, required: Iterable[str] = (), *, default: Any = _UNSET):
    super().__init__(default)
    self.fields, self.required = dict(fields), tuple(required)

  def describe(self) -> str:
    need = f' ({", ".join(self.required)} required)' if self.required else ''
    return f'a dict of some of the fields {", ".join(self.fields)}{need}'

  def type_ok(self, value) -> bool:
    return isinstance(value, dict) or hasattr(value, 'to_dict')

  def check(self, value, name):
    super().check(value, name)
    items = value.to_dict() if hasattr(value, 'to_dict') else value
    for key, item in items.items():
      if key not in self.fields:
        raise unknown_field(f'{name}.{key}', self.fields)
      self.fields[key].check(item, f'{name}.{key}')
    missing = [key for key in self.required if key not in items]
    if missing:
      raise errors.ConfigError(f'{name} has no {missing[0]}. Fix: {_flag(name)}.{missing[0]}='
                               f'<{self.fields[missing[0]].describe()}>.')

  def parse(self, text, name):
    return _dict_literal(self, text, name, f"{{'{next(iter(self.fields))}': ...}}")


def _dict_literal(spec: Spec, text: str, name: str, example: str) -> dict:
  """The dict that a command line's Python literal `text` holds; anything else is `spec`'s
  error for `--name`, with `example` as what to write."""
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
    value = None
  if not isinstance(value, dict):
    raise spec._not(text, name, f'a dict such as "{example}"')  # pylint: disable=protected-access
  dotted = _dotted_key(value)
  if dotted is not None:
    raise errors.ConfigError(f'{_flag(name)}: the key {dotted!r} holds a dot, which separates '
                             'fields in a config. Fix: name it without dots.')
  return value


def _dotted_key(value):
  """The first key of a (nested) dict that holds a dot, or None."""
  for key, item in value.items():
    if isinstance(key, str) and '.' in key:
      return key
    inner = _dotted_key(item) if isinstance(item, dict) else None
    if inner is not None:
      return inner
  return None


class Names(Spec):
  """A name, or a tuple of names ('' or 'none' for no name): a sharding rule's mesh axes."""

  def describe(self) -> str:
    return 'a name or a tuple of names'

  def type_ok(self, value) -> bool:
    if isinstance(value, str):
      return True
    return isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value)

  def parse(self, text, name):
    if text.strip()[:1] in ('(', '['):
      try:
        value = ast.literal_eval(text.strip())
      except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise self._not(text, name, "a tuple of names such as \"('data', 'fsdp')\"") from None
      return tuple(value) if isinstance(value, (tuple, list)) else value
    return text


class Anything(Spec):
  """Any value (the items of a sequence or dict that nobody declared)."""

  def describe(self) -> str:
    return 'any value'

  def type_ok(self, value) -> bool:
    return True

  def parse(self, text, name):
    del name
    try:
      return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
      return text


class Undeclared(Spec):
  """A field that has a default but no declared type and range (e.g. a position-scheme option
  given as a plain value): every check fails, telling the developer where to declare it."""

  def __init__(self, default: Any, where: str):
    super().__init__(default)
    self.where = where

  def describe(self) -> str:
    return 'declared'

  def type_ok(self, value) -> bool:
    return True

  def check(self, value, name):
    raise errors.ConfigError(
        f'{name} has no declared type and range. Fix (for developers): declare it as a spec '
        f'(roformer/specs.py: Int, Float, Bool, Str, ...) carrying its default in {self.where}.')

  def parse(self, text, name):
    return infer(self.default).parse(text, name)


def kept(occasions: tuple, why: str, tree):
  """`tree` (a spec, or specs and groups of specs) with every spec fixed to the saved run's on
  `occasions` ('resume', 'continue', 'evaluate'), because of `why`."""
  if isinstance(tree, dict):
    return {key: kept(occasions, why, spec) for key, spec in tree.items()}
  spec = copy.copy(tree)
  spec.fixed_on, spec.fixed_because = occasions, why
  return spec


def infer(value) -> Spec:
  """A spec of `value`'s type (no range): how an override of a field that nobody declared is
  parsed (it is then refused by the schema check, naming the field)."""
  if isinstance(value, bool):
    return Bool()
  if isinstance(value, int):
    return Int()
  if isinstance(value, float):
    return Float()
  if isinstance(value, (tuple, list)):
    return Seq(Anything())
  if isinstance(value, dict) or hasattr(value, 'to_dict'):
    return Map(Anything())
  return Str()


def defaults(tree: dict) -> dict:
  """The default values of a nested dict of specs (a plain value is its own default)."""
  return {k: defaults(v) if isinstance(v, dict) else (v.default if isinstance(v, Spec) else v)
          for k, v in tree.items()}


def _items(value):
  if hasattr(value, 'to_dict') and hasattr(value, 'items'):
    return list(value.items())
  return list(value.items()) if isinstance(value, dict) else None


def unknown_field(name: str, known: Iterable[str]) -> errors.ConfigError:
  """The error for a field nobody declared (a typo, or a new field without a spec)."""
  close = difflib.get_close_matches(name.rsplit('.', 1)[-1], list(known), n=1)
  hint = f' (did you mean {name.rsplit(".", 1)[0]}.{close[0]}?)' if close else ''
  return errors.ConfigError(
      f'{name} is not a config field{hint}. Fix: correct or remove it; a new field needs its '
      'type and range declared in roformer/config_schema.py (a position-scheme option: in its '
      "class's `defaults`).")


def check_tree(value, tree: dict, name: str, complete: bool = False) -> None:
  """Checks a nested config (ConfigDict or dict) against a nested dict of specs: every field is
  declared (a group is a dict of specs), every value holds to its spec and, if `complete`,
  every declared field is present."""
  items = _items(value)
  if items is None:
    raise errors.ConfigError(f'{name}={value!r} must be a group of fields ({sorted(tree)}). '
                             f'Fix: set its fields one by one, e.g. {_flag(name)}.FIELD=VALUE.')
  for key, item in items:
    full = f'{name}.{key}'
    spec = tree.get(key)
    if spec is None:
      raise unknown_field(full, tree)
    if isinstance(spec, dict):
      check_tree(item, spec, full, complete)
    else:
      spec.check(item, full)
  missing = sorted(set(tree) - {key for key, _ in items}) if complete else []
  if missing:
    raise errors.ConfigError(
        f'{name}.{missing[0]} is missing. Fix: build the config from configs/base.py '
        "(get_config() holds every field at its default) and change fields there, rather than "
        'removing them.')
