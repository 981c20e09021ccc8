"""Write the module index of docs/layout.md from the modules' own docstrings (or check it).

  python scripts/module_index.py           # rewrite the block in docs/layout.md
  python scripts/module_index.py --check   # exit 1 if it differs

Each entry point, package module and script is listed with the first sentence of its
docstring, so that the index says what the code says and cannot go stale.
"""

import ast
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from roformer import cli  # pylint: disable=wrong-import-position
from roformer import files  # pylint: disable=wrong-import-position

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / 'docs' / 'layout.md'
GROUPS = (('Entry points', ('*.py',)), ('roformer/', ('roformer/*.py',)),
          ('roformer/positions/', ('roformer/positions/*.py',)),
          ('roformer/attention_options/', ('roformer/attention_options/*.py',)),
          ('roformer/tasks/', ('roformer/tasks/*.py',)),
          ('roformer/data/', ('roformer/data/*.py',)), ('configs/', ('configs/*.py',)),
          ('configs/sweeps/', ('configs/sweeps/*.py',)), ('scripts/', ('scripts/*.py',
                                                                      'scripts/*.sh')))
BLOCK = re.compile(r'(<!-- modules: generated -->\n).*?(<!-- end of modules -->)', re.S)


def summary(path: pathlib.Path) -> str:
  """The first sentence of a module's docstring (a shell script's first comment line)."""
  text = path.read_text(encoding='utf-8')
  if path.suffix == '.sh':
    lines = [l[1:].strip() for l in text.splitlines()[1:] if l.startswith('#')]
    doc = ' '.join(lines[:3])
  else:
    doc = ast.get_docstring(ast.parse(text)) or ''
  first = ' '.join(doc.split('\n\n')[0].split())
  match = re.match(r'(.+?\.)(\s|$)', first)
  return (match.group(1) if match else first) or '(no docstring)'


# Packages whose __init__.py holds the registry itself, listed beside their modules.
REGISTRY_PACKAGES = ('positions', 'attention_options', 'tasks')


def index() -> str:
  lines = []
  for title, patterns in GROUPS:
    files = sorted({p for pattern in patterns for p in ROOT.glob(pattern)
                    if p.name != '__init__.py' or p.parent.name in REGISTRY_PACKAGES})
    lines += [f'**{title}**', '']
    lines += [f'- `{p.relative_to(ROOT)}`: {summary(p)}' for p in files]
    lines.append('')
  return '\n'.join(lines)


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
  parser.add_argument('--check', action='store_true', help='Change nothing; exit 1 if stale.')
  args = parser.parse_args(argv)
  text = PAGE.read_text(encoding='utf-8')
  new = BLOCK.sub(lambda m: m.group(1) + index() + m.group(2), text)
  if args.check:
    if new != text:
      print(f'error: {PAGE.relative_to(ROOT)} is stale. Fix: python scripts/module_index.py',
            file=sys.stderr)
      return 1
    return 0
  files.write_text_atomic(str(PAGE), new)
  print(f'wrote {PAGE.relative_to(ROOT)}')
  return 0


if __name__ == '__main__':
  sys.exit(cli.guard(main)())
