"""roformer/provenance.py: the commit of the checkout, and what a run's starts ran on."""

import subprocess

from roformer import provenance


def test_the_commit_is_this_checkouts_head_and_empty_where_git_is_missing_or_hangs(monkeypatch):
  head = subprocess.run(['git', '-C', str(provenance.ROOT), 'rev-parse', '--short', 'HEAD'],
                        capture_output=True, text=True, check=True).stdout.strip()
  assert provenance.commit().split('+')[0] == head
  for error in (FileNotFoundError(2, 'No such file or directory: git'),
                subprocess.TimeoutExpired(['git'], 30)):
    def fail(*args, error=error, **kwargs):
      raise error
    monkeypatch.setattr(subprocess, 'run', fail)
    assert provenance.commit() == ''  # A run on a node without git still trains.
