"""What each model variable declares where it is created (roformer.variables): its logical axes
for the mesh layout, whether AdamW decays it, and FAVOR+'s draw as a variable nobody trains."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import models
from roformer import optim
from roformer import sharding
from roformer import trainer as trainer_lib
from roformer import variables
from tests import kinds

MODEL_TYPES = ('causal_lm', 'mlm', 'classifier', 'encoder_decoder')


def abstract_state(kind='rope', model_type='causal_lm', **model):
  cfg = test_config.get_config(kind).model
  cfg.update(type=model_type, vocab_size=50, **model)
  if model_type == 'classifier':
    cfg.update(num_classes=3, type_vocab_size=2)
  return nnx.state(nnx.eval_shape(lambda: models.create(cfg, seed=0)))


def flat(state):
  return {sharding.path_str(path): v for path, v in jax.tree_util.tree_flatten_with_path(
      state, is_leaf=variables.is_variable)[0]}


@pytest.mark.parametrize('kind', kinds.ALL)
def test_every_variable_of_every_kind_declares_one_axis_per_dimension(kind):
  for model_type in MODEL_TYPES:
    if model_type != 'causal_lm' and kinds.positions.capabilities(kind).causal_only:
      continue
    for path, var in flat(abstract_state(kind, model_type)).items():
      assert variables.is_variable(var), path
      assert len(variables.axes(var, path)) == var.get_value().ndim, path
      assert set(variables.axes(var, path)) <= {None, 'vocab', 'embed', 'heads', 'mlp'}, path


def test_the_projections_are_laid_out_by_their_declared_axes():
  """Megatron's layout: the fused qkv and the MLP's up projection split by their outputs, the
  attention's and the MLP's output projections by their inputs, the vocabulary by its rows."""
  axes = sharding.declared_axes(abstract_state('rope', 'encoder_decoder'))
  assert axes['encoder_blocks/0/attn/qkv/kernel'] == ('embed', 'heads')
  assert axes['encoder_blocks/0/attn/qkv/bias'] == ('heads',)
  assert axes['decoder_blocks/1/cross/kv/kernel'] == ('embed', 'heads')
  assert axes['decoder_blocks/1/cross/out/kernel'] == ('heads', 'embed')
  assert axes['encoder_blocks/0/mlp/up/kernel'] == ('embed', 'mlp')
  assert axes['encoder_blocks/0/mlp/down/kernel'] == ('mlp', 'embed')
  assert axes['embed/embedding'] == ('vocab', 'embed')
  assert axes['encoder_blocks/0/ln_attn/scale'] == (None,)
  assert sharding.declared_axes(abstract_state('rope', 'mlm'))['output_bias'] == ('vocab',)
  mesh = jax.sharding.AbstractMesh((1, 2, 4), sharding.AXES)
  shardings = sharding.param_shardings(abstract_state('learned'), mesh, sharding.DEFAULT_RULES)
  spec = {sharding.path_str(p): s.spec
          for p, s in jax.tree_util.tree_flatten_with_path(shardings)[0]}
  assert spec['blocks/0/attn/qkv/kernel'] == jax.P('fsdp', 'tensor')
  assert spec['position/table'] == jax.P(None, None)


def test_a_variable_that_declares_no_axes_is_refused_by_name():
  class Bare(nnx.Module):
    def __init__(self):
      self.inner = nnx.Dict(table=nnx.Param(jnp.zeros((4, 2))))
  state = nnx.state(Bare())
  with pytest.raises(ValueError, match='inner/table declares no logical axes'):
    sharding.param_shardings(state, jax.sharding.AbstractMesh((1, 1, 1), sharding.AXES), {})
  wrong = nnx.state(nnx.Dict(w=variables.param(jnp.zeros((4, 2)), ('embed',), decay=True)))
  with pytest.raises(ValueError, match=r"w declares 1 logical axes \('embed',\) for a value of "
                     r'2 dimensions \(4, 2\)\. Fix: give one axis per dimension'):
    sharding.declared_axes(wrong)


def test_a_misspelt_logical_axis_is_refused_where_the_variable_is_made():
  with pytest.raises(ValueError, match="logical axis 'head' of a model variable is not one of "
                     'vocab, embed, heads, mlp'):
    variables.param(jnp.zeros((4,)), ('head',), decay=False)
  with pytest.raises(ValueError, match="logical axis 'emb' "):
    variables.init(nnx.initializers.zeros, ('emb', None), decay=True)
  assert set(variables.PARAM_AXES) <= set(sharding.DEFAULT_RULES)  # Each has a default rule.


def _decayed(state) -> dict[str, bool]:
  """Which Params one AdamW update with zero gradients moves (only the decay can)."""
  params, _ = variables.trainable(state)
  tc = test_config.get_config().train
  tc.update(weight_decay=0.5, learning_rate=1e-3, warmup_steps=0, grad_clip=1e9)
  tx = optim.make_optimizer(tc)
  params = jax.tree.map(lambda a: jnp.ones(a.shape, a.dtype), params)

  @jax.jit  # One program instead of one per operation and shape.
  def update(params):
    zero = jax.tree.map(jnp.zeros_like, params)
    return tx.update(zero, tx.init(params), params)[0]

  updates = update(params)
  return {sharding.path_str(p): bool(np.any(u != 0))
          for p, u in jax.tree_util.tree_flatten_with_path(updates)[0]}


@pytest.mark.parametrize('kind', kinds.ALL)
def test_weight_decay_moves_exactly_the_declared_matrices(kind):
  """Decay spares norms, biases, bias functions and tables (T5's, FIRE's, Transformer-XL's u and
  v) and scalars, and reaches every other matrix: the set a path rule chose before the
  declarations."""
  state = abstract_state(kind)
  decayed = _decayed(state)
  declared = {k: variables.decays(v) for k, v in flat(variables.trainable(state)[0]).items()}
  assert decayed == declared
  earlier_rule = {k: len(v.get_value().shape) >= 2 and 'bias' not in k
                  for k, v in flat(variables.trainable(state)[0]).items()}
  assert declared == earlier_rule
  assert decayed['embed/embedding'] and decayed['blocks/0/attn/qkv/kernel']
  assert not decayed['blocks/0/attn/qkv/bias'] and not decayed['blocks/0/ln_attn/scale']


def test_the_feature_draw_has_no_optimizer_state_and_is_not_counted():
  config = test_config.get_config()
  config.model.attention.update(kind='favor', num_features=16, chunk=8, redraw_interval=5)
  trainer = trainer_lib.Trainer(config, sharding.make_mesh(config.mesh))
  state = trainer.abstract_state
  paths = lambda tree: [sharding.path_str(p) for p, _ in
                        jax.tree_util.tree_flatten_with_path(tree)[0]]
  draws = [p for p in paths(state['params']) if p.endswith('feature_draw')]
  assert draws == ['blocks/0/attn/feature_draw', 'blocks/1/attn/feature_draw']
  assert not any('feature_draw' in p for p in paths(state['opt_state']))
  params, rest = variables.trainable(state['params'])
  assert paths(rest) == draws
  assert trainer.num_params() == sum(np.prod(a.shape) for a in jax.tree.leaves(params))
  assert trainer.num_params() == models.num_parameters(config.model)
