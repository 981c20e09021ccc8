"""The package's modules import one another without a circle, counting imports inside
functions too (a deferred import is a circle all the same: the two modules cannot be read, or
changed, one without the other)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _graph() -> dict[str, set[str]]:
  modules = {}
  for path in (ROOT / 'roformer').rglob('*.py'):
    name = '.'.join(path.relative_to(ROOT).with_suffix('').parts).removesuffix('.__init__')
    modules[name] = path
  graph = {name: set() for name in modules}
  for name, path in modules.items():
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
      if isinstance(node, ast.ImportFrom) and node.module:
        for alias in node.names:
          target = f'{node.module}.{alias.name}'
          target = target if target in modules else node.module
          if target in modules and target != name:
            graph[name].add(target)
      elif isinstance(node, ast.Import):
        graph[name].update(a.name for a in node.names if a.name in modules and a.name != name)
  return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
  """One circle of imports (its modules in order), or None."""
  state, path = {}, []

  def visit(node):
    state[node] = 'open'
    path.append(node)
    for target in sorted(graph[node]):
      if state.get(target) == 'open':
        return path[path.index(target):] + [target]
      if target not in state:
        found = visit(target)
        if found:
          return found
    state[node] = 'done'
    path.pop()
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node)
      if found:
        return found
  return None


def test_the_package_has_no_import_circle():
  assert _circle(_graph()) is None


def test_a_circle_is_found():
  """The check finds a circle where there is one, deferred import or not."""
  graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': set()}
  assert _circle(graph) == ['a', 'b', 'c', 'a']
  assert _circle({'a': {'b'}, 'b': set()}) is None
  assert _graph()['roformer.models']  # The graph sees the package's imports.
