"""Where a kept record came from: the commit of the checkout that made it.

Imports nothing heavy (no JAX), so that scripts/compare_torch.py's parent process, which shares
the host with the workers it times, can stamp its records too.
"""

import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]


def commit() -> str:
  """The short commit of this checkout, `+changes` where its tracked files outside docs/ differ
  from it ('' out of a git checkout)."""
  def git(*args):
    return subprocess.run(['git', '-C', str(ROOT), *args], capture_output=True, text=True,
                          check=False)
  head = git('rev-parse', '--short', 'HEAD')
  if head.returncode:
    return ''
  dirty = git('status', '--porcelain', '--untracked-files=no', '--', '.', ':!docs').stdout.strip()
  return head.stdout.strip() + ('+changes' if dirty else '')
