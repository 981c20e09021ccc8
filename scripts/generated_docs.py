"""Write the blocks of the docs that the code generates (or check them).

  python scripts/generated_docs.py           # rewrite every stale block
  python scripts/generated_docs.py --check   # exit 1 naming each stale block

Each block lies between `<!-- NAME: generated -->` and its end marker, and is what the code
says now: the README's list of position kinds, docs/positions.md's capability and attention
options tables (the registries' declarations), docs/configs_and_data.md's table of what may
change (roformer/saved_config.py), and docs/layout.md's module index (each entry point, package
module and script with the first sentence of its docstring). A new scheme, option or module
makes a block stale; this script rewrites it, and tests/test_docs.py fails until it has.
"""

import ast
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import errors  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position

ROOT = pathlib.Path(__file__).resolve().parents[1]
GROUPS = (('Entry points', ('*.py',)), ('roformer/', ('roformer/*.py',)),
          ('roformer/positions/', ('roformer/positions/*.py',)),
          ('roformer/attention_options/', ('roformer/attention_options/*.py',)),
          ('roformer/tasks/', ('roformer/tasks/*.py',)),
          ('roformer/data/', ('roformer/data/*.py',)), ('configs/', ('configs/*.py',)),
          ('configs/sweeps/', ('configs/sweeps/*.py',)), ('scripts/', ('scripts/*.py',
                                                                      'scripts/*.sh')))


def summary(path: pathlib.Path) -> str:
  """The first sentence of a module's docstring (a shell script's first comment paragraph)."""
  text = path.read_text(encoding='utf-8')
  if path.suffix == '.sh':
    lines = []
    for line in text.splitlines()[1:]:  # After the #! line, up to the first '#' alone.
      if not line.startswith('#') or not line[1:].strip():
        break
      lines.append(line[1:].strip())
    doc = ' '.join(lines)
  else:
    doc = ast.get_docstring(ast.parse(text)) or ''
  return cli.first_sentence(doc) or '(no docstring)'


# Packages whose __init__.py holds the registry itself, listed beside their modules.
REGISTRY_PACKAGES = ('positions', 'attention_options', 'tasks')


def index() -> str:
  lines = []
  for title, patterns in GROUPS:
    found = sorted({p for pattern in patterns for p in ROOT.glob(pattern)
                    if p.name != '__init__.py' or p.parent.name in REGISTRY_PACKAGES})
    lines += [f'**{title}**', '']
    lines += [f'- `{p.relative_to(ROOT)}`: {summary(p)}' for p in found]
    lines.append('')
  return '\n'.join(lines)


def _kinds() -> str:
  from roformer import positions  # pylint: disable=import-outside-toplevel
  return positions.kinds_line()


def _capabilities() -> str:
  from roformer import positions  # pylint: disable=import-outside-toplevel
  return positions.capability_table()


def _attention_options() -> str:
  from roformer import attention_options  # pylint: disable=import-outside-toplevel
  return attention_options.table()


def _config_changes() -> str:
  from roformer import saved_config  # pylint: disable=import-outside-toplevel
  return saved_config.table()


# (page, start marker, end marker, what goes between them).
BLOCKS = (
    ('README.md', '<!-- kinds: generated -->\n', '\n<!-- end of kinds -->', _kinds),
    ('docs/positions.md', '<!-- capability table: generated -->\n',
     '\n<!-- end of capability table -->', _capabilities),
    ('docs/positions.md', '<!-- attention options table: generated -->\n',
     '\n<!-- end of attention options table -->', _attention_options),
    ('docs/configs_and_data.md', '<!-- config changes: generated -->\n',
     '\n<!-- end of config changes -->', _config_changes),
    ('docs/layout.md', '<!-- modules: generated -->\n', '<!-- end of modules -->', index),
)


def shown(page: str, start: str, end: str) -> str:
  """What `page` holds between the markers."""
  text = (ROOT / page).read_text(encoding='utf-8')
  if start not in text or end not in text.split(start, 1)[1]:
    raise errors.ConfigError(f'{page} lacks the markers {start.strip()} ... {end.strip()}. '
                             'Fix: put them back around the block.')
  return text.split(start, 1)[1].split(end, 1)[0]


def stale() -> list[tuple[str, str, str, str]]:
  """(page, start, end, the block as it should be) of each block that differs."""
  out = []
  for page, start, end, make in BLOCKS:
    block = make()
    if shown(page, start, end) != block:
      out.append((page, start, end, block))
  return out


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  parser.add_argument('--check', action='store_true', help='Change nothing; exit 1 if stale.')
  args = parser.parse_args(argv)
  found = stale()
  if args.check:
    for page, start, _, _ in found:
      print(f'error: the {start.strip()} block of {page} is stale. Fix: python '
            'scripts/generated_docs.py', file=sys.stderr)
    return 1 if found else 0
  for page, start, end, block in found:
    text = (ROOT / page).read_text(encoding='utf-8')
    before, rest = text.split(start, 1)
    files.write_text_atomic(str(ROOT / page), before + start + block + end + rest.split(end, 1)[1])
    print(f'wrote the {start.strip()} block of {page}')
  if not found:
    print('every generated block is current')
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
