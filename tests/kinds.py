"""Position kinds for per-kind tests. The default run covers RoPE end to end (every scheme's
math is checked on its own in test_positions/test_schemes); `python -m pytest -m slow` runs
the end-to-end checks for the others as well."""

import pytest

ALL = ('none', 'sinusoidal', 'learned', 'rope', 'xpos', 'shaw', 'xl', 't5', 'alibi')
FAST = ('rope',)


def params(kinds=ALL):
  return [k if k in FAST else pytest.param(k, marks=pytest.mark.slow) for k in kinds]
