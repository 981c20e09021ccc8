"""Position kinds for per-kind tests. The default run covers RoPE end to end (every scheme's
math is checked on its own in test_positions/test_schemes); `python -m pytest -m slow` runs
the end-to-end checks for the others as well."""

import jax.numpy as jnp
import numpy as np
import pytest

ALL = ('none', 'sinusoidal', 'learned', 'rope', 'xpos', 'shaw', 'xl', 't5', 'alibi', 'kerple',
       'fire', 'cope')
FAST = ('rope',)


def params(kinds=ALL):
  return [k if k in FAST else pytest.param(k, marks=pytest.mark.slow) for k in kinds]


def visible_positions(model, seed: int = 0):
  """`model` with CoPE's position embeddings drawn at random: they start at zero (as in the
  paper), where CoPE's bias vanishes and a test of it would pass without checking anything."""
  rng = np.random.default_rng(seed)
  for scheme in (getattr(model, name, None) for name in ('position', 'encoder_position',
                                                          'decoder_position')):
    for layer in getattr(scheme, 'layers', ()):
      if hasattr(layer, 'embeddings'):
        layer.embeddings.value = jnp.asarray(rng.normal(size=layer.embeddings.shape), jnp.float32)
  return model
