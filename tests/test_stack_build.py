"""Creating a model's blocks (roformer/stack.py, `build`): under a trace each block is created in
a trace of its own, so that creation is linear in the layers, and the parameters drawn are those
of creating every block in the one trace."""

import jax
import numpy as np
import pytest
from flax import nnx

from roformer import blocks
from roformer import models
from roformer import stack
from tests import kinds


def _top_level_equations(num_layers: int) -> list:
  cfg = kinds.tiny_config('rope', num_layers=num_layers).model
  return jax.make_jaxpr(lambda key: nnx.state(models.create(cfg, seed=key)))(
      jax.random.key(0)).jaxpr.eqns


def test_a_traced_build_adds_one_equation_per_block_to_the_trace_around_it():
  # What made creation quadratic: every variable update walked the equations of its trace, and
  # each block's equations were in the model's. Now a block is one call in it.
  two, six = _top_level_equations(2), _top_level_equations(6)
  calls = lambda eqns: sum(e.primitive.name == 'jit' for e in eqns)
  assert len(six) - len(two) == calls(six) - calls(two) == 4


class _Stack(nnx.Module):

  def __init__(self, cfg, flat: bool, *, rngs: nnx.Rngs):
    def make(i, rngs):
      return blocks.Block(cfg, dtype=cfg.dtype, rngs=rngs, causal=True)
    self.blocks = (nnx.List([make(i, rngs) for i in range(cfg.num_layers)]) if flat
                   else stack.build(make, cfg.num_layers, False, rngs))
    self.after = nnx.Param(jax.random.normal(rngs.params(), (3,)))


@pytest.mark.parametrize('kind', ['rope', pytest.param('shaw', marks=pytest.mark.slow),
                                  pytest.param('fire', marks=pytest.mark.slow)])
def test_blocks_created_in_traces_of_their_own_draw_the_one_trace_bits(kind):
  cfg = kinds.tiny_config(kind, num_layers=3).model

  def params(flat):
    return jax.jit(lambda key: nnx.state(_Stack(cfg, flat, rngs=nnx.Rngs(params=key))))(
        jax.random.key(7))

  own, one = params(False), params(True)
  assert jax.tree.structure(own) == jax.tree.structure(one)
  for a, b in zip(jax.tree.leaves(own), jax.tree.leaves(one)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_an_eager_build_creates_its_blocks_without_tracing():
  # Tests and notebooks create models eagerly; a trace per block would compile each one.
  cfg = kinds.tiny_config('rope', num_layers=2).model
  seen = []

  def make(i, rngs):
    seen.append(isinstance(rngs.params.key[...], jax.core.Tracer))
    return blocks.Block(cfg, dtype=cfg.dtype, rngs=rngs)

  stack.build(make, 2, False, nnx.Rngs(params=0))
  assert seen == [False, False]
  jax.eval_shape(lambda: nnx.state(stack.build(make, 2, False, nnx.Rngs(params=0))))
  assert seen == [False, False, True, True]
