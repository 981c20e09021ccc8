"""Position kinds for per-kind tests. The default run covers one scheme of each mechanism
(rotation, value term, logits bias); `python -m pytest -m slow` runs the others as well."""

import pytest

ALL = ('none', 'sinusoidal', 'learned', 'rope', 'xpos', 'shaw', 'xl', 't5', 'alibi')
FAST = ('rope', 'shaw', 't5')


def params(kinds=ALL):
  return [k if k in FAST else pytest.param(k, marks=pytest.mark.slow) for k in kinds]
