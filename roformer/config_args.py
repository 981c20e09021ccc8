"""What the command line says about the config: the config file (`--config FILE[:ARG]`) and the
field overrides (`--config.a.b=VALUE`, which roformer/cli.py takes out of the command line), as
train.py, eval.py and the scripts read them.

Each override's text becomes a value of the field's declared type (roformer/config_schema.py;
a field nobody declared: the type of its current value), so `--config.model.d_model=wide` or an
override of a field that does not exist is a ConfigError naming the flag, never a traceback.
Ranges are checked afterwards with the whole config (resolve.validate). The same functions
serve the tests, which apply overrides exactly as the command line does.
"""

import difflib
import importlib.util
import os
import re
from typing import Iterable

import ml_collections

from roformer import cli
from roformer import config_schema
from roformer import errors
from roformer import specs

# The repository, where configs/ is: the relative paths of the docs are read from it.
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def load_file(spec: str) -> ml_collections.ConfigDict:
  """The config of `FILE[:ARG]`: FILE's get_config(ARG) (get_config() without ':'). Raises
  ConfigError naming the file when it is missing, does not import, has no get_config, or
  get_config fails or returns something other than a ConfigDict."""
  path, sep, arg = (spec or '').partition(':')
  if not path.strip():
    raise errors.ConfigError('--config is empty. Fix: give a config file, e.g. --config '
                             'configs/lm.py (optionally FILE:ARG, e.g. configs/lm.py:alibi).')
  if not os.path.isfile(path):
    what = 'is a directory' if os.path.isdir(path) else 'does not exist'
    here = os.path.join(REPO, path)  # A relative path from outside the repository.
    hint = (f' (a relative path is read from the current directory, {os.getcwd()}: did you '
            f'mean {here}?)' if not os.path.isabs(path) and os.path.isfile(here)
            and os.path.abspath(path) != here else '')
    raise errors.ConfigError(f'--config={spec}: {path} {what}{hint}. Fix: give a config file '
                             'such as configs/lm.py (the files are in configs/; optionally '
                             'FILE:ARG).')
  if not path.endswith('.py'):
    raise errors.ConfigError(f'--config={spec}: {path} is not a Python file. Fix: give a .py '
                             'file that defines get_config(arg), such as configs/lm.py.')
  name = 'config_file_' + re.sub(r'\W', '_', os.path.abspath(path))
  try:
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
  except Exception as e:  # pylint: disable=broad-except  # Any error of the file's own code.
    raise errors.ConfigError(f'--config={spec}: {path} cannot be loaded ({_one_line(e)}). Fix: '
                             'correct the file (--debug shows the traceback).') from e
  get_config = getattr(module, 'get_config', None)
  if not callable(get_config):
    raise errors.ConfigError(f'--config={spec}: {path} has no get_config() function. Fix: '
                             'define get_config(arg) returning an ml_collections.ConfigDict, as '
                             'configs/lm.py does.')
  try:
    config = get_config(arg) if sep else get_config()
  except (errors.ConfigError, ValueError) as e:  # A bad ARG: the file's own message.
    raise errors.ConfigError(f'--config={spec}: {e}') from e
  except Exception as e:  # pylint: disable=broad-except
    call = f'get_config({arg!r})' if sep else 'get_config()'
    raise errors.ConfigError(f'--config={spec}: {path}\'s {call} failed ({_one_line(e)}). Fix: '
                             'correct the file or its argument (--debug shows the traceback).'
                             ) from e
  if not isinstance(config, ml_collections.ConfigDict):
    raise errors.ConfigError(f'--config={spec}: {path}\'s get_config returned '
                             f'{type(config).__name__}, not an ml_collections.ConfigDict. Fix: '
                             'return the config (a missing `return`?).')
  return config


def _one_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return f'{type(e).__name__}: {text[0][:300]}' if text else type(e).__name__


def override(config: ml_collections.ConfigDict, field: str, text: str | None,
             schema: dict | None = None) -> None:
  """Sets the dotted `field` of `config` from the text of `--config.FIELD=TEXT` (None: a bare
  flag, true for a boolean). Raises ConfigError naming the flag if the field does not exist or
  the text is not of its type. A dict field (data.splits, mesh.rules) also takes one entry at
  a time: --config.data.splits.validation=test. `schema`: config_schema.schema(), if built
  already."""
  flag = f'--config.{field}'
  parts = field.split('.')
  if not all(parts):
    raise errors.ConfigError(f'{flag}: {field!r} is not a field name. Fix: --config.a.b=VALUE.')
  node, tree = config, schema or config_schema.schema()
  for depth, part in enumerate(parts[:-1]):
    if (isinstance(tree, specs.Map) and isinstance(tree.of, specs.Record)
        and part not in node):  # A field of a dict field's entry that is not there yet.
      where, have = '.'.join(parts[:depth]), sorted(node.keys())
      raise errors.ConfigError(
          f'{flag}: config.{where} has no entry {part!r} ('
          + (f'its entries: {", ".join(have)}' if have else 'it has none')
          + f'). Fix: give the entry whole, e.g. --config.{where}.{part}="{{\'{parts[depth + 1]}\''
          f': VALUE}}", then its fields one by one.')
    _must_have(node, part, parts[:depth], flag, config)
    if not hasattr(node[part], 'keys'):
      raise errors.ConfigError(f'{flag}: config.{".".join(parts[:depth + 1])} is a value, not a '
                               'group of fields. Fix: drop the part after it.')
    node, tree = node[part], _inner(tree, part)
  leaf = parts[-1]
  if isinstance(tree, specs.Map):  # An entry of a dict field, new or not.
    spec = tree.of
  elif isinstance(tree, specs.Record):  # A field of an entry that exists, set or not yet.
    spec = tree.fields.get(leaf)
    if spec is None:
      raise specs.unknown_field(f'config.{field}', tree.fields)
  else:
    _must_have(node, leaf, parts[:-1], flag, config)
    spec = tree.get(leaf) if isinstance(tree, dict) else None
  current = node.get(leaf)
  if isinstance(spec, dict) or (spec is None and hasattr(current, 'keys')):
    example = next(iter(current.keys()), 'FIELD') if hasattr(current, 'keys') else 'FIELD'
    raise errors.ConfigError(f'{flag}: config.{field} is a group of fields. Fix: set its fields '
                             f'one by one, e.g. {flag}.{example}=VALUE.')
  spec = spec or specs.infer(current)
  if text is None:
    if not isinstance(spec, specs.Bool):
      raise errors.ConfigError(f'{flag} needs a value. Fix: {flag}=<{spec.describe()}>.')
    value = True
  else:
    value = spec.parse(text, f'config.{field}')
  with node.unlocked(), node.ignore_type():  # Not the whole config's: each walks its tree.
    node[leaf] = value


def _inner(tree, part: str):
  """The spec or group of specs of field `part` inside `tree` (None where nobody declared it):
  a group's field, a dict field's entry, a record's field."""
  if isinstance(tree, dict):
    return tree.get(part)
  if isinstance(tree, specs.Map):
    return tree.of
  if isinstance(tree, specs.Record):
    return tree.fields.get(part)
  return None


def _fields_named(node, name: str, prefix: str = 'config', tree=...) -> list[str]:
  """The dotted paths of every field called `name` in the config `node`; not the entries of a
  dict field (mesh.rules.batch is a rule, not a field)."""
  found, tree = [], config_schema.schema() if tree is ... else tree
  for key, value in node.items():
    inner = _inner(tree, key)
    if key == name:
      found.append(f'{prefix}.{key}')
    if hasattr(value, 'keys') and not isinstance(inner, specs.Map):
      found += _fields_named(value, name, f'{prefix}.{key}', inner)
  return found


def _must_have(node, part: str, parents: list[str], flag: str, root=None) -> None:
  if part in node:
    return
  where = '.'.join(['config'] + parents)
  # The field by that exact name in other groups, else a close name in this one.
  close = (_fields_named(root, part)[:3] if root is not None else []) or [
      f'{where}.{c}' for c in difflib.get_close_matches(part, list(node.keys()), n=1)]
  hint = f' (did you mean {" or ".join(close)}?)' if close else ''
  raise errors.ConfigError(f'{flag}: {where} has no field {part!r}{hint}. Fix: check the name '
                           'against configs/base.py and the config file.')


def apply(config: ml_collections.ConfigDict, overrides: Iterable[cli.Override]
          ) -> ml_collections.ConfigDict:
  """`config` with every override set, in order (a later one of a field wins)."""
  schema = config_schema.schema()  # Once: it is built on each call.
  for field, text in overrides:
    override(config, field, text, schema)
  return config


def refuse_set_from_data(overrides: Iterable[cli.Override]) -> None:
  """A run's command line may not set model.vocab_size: training sets it from the tokenizer
  (workdir.setup_data), so the value given would be saved and then ignored. (Scripts that
  build a model without data, such as scripts/init_loss.py, take it.)"""
  for field, _ in overrides:
    if field == 'model.vocab_size':
      raise errors.ConfigError(
          '--config.model.vocab_size: a run\'s vocabulary is set from its tokenizer, never by '
          'hand. Fix: drop it; size a tokenizer trained on the data with '
          '--config.data.vocab_size, or name another with --config.data.tokenizer.')


def load(spec: str, overrides: Iterable[cli.Override] = ()) -> ml_collections.ConfigDict:
  """The config of `--config SPEC` with the `--config.*` overrides applied."""
  return apply(load_file(spec), overrides)
