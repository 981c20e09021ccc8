"""The position-scheme interface: what a kind declares is what the stack, the config checks and
the checkpoints rely on, and nothing outside roformer/positions/ names a kind."""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import attention
from roformer import errors
from roformer import models
from roformer import positions
from roformer import config_checks
from roformer import saved_config
from roformer import sharding
from roformer import trainer as trainer_lib
from roformer.positions import base
from tests import kinds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGACY = os.path.join(ROOT, 'tests', 'data', 'legacy_layout')
TOKENS = jnp.asarray(np.random.default_rng(0).integers(1, 64, (2, 12)), jnp.int32)
POS = jnp.asarray([list(range(12)), list(range(5)) + list(range(7))], jnp.int32)
SEG = jnp.asarray([[1] * 12, [1] * 5 + [2] * 7], jnp.int32)


def tiny(kind, model_type='causal_lm', **model):
  config = test_config.get_config(kind)
  config.model.vocab_size = config.data.vocab_size = 64
  config.model.type = model_type
  config.model.update(model)
  return config


def call(model, model_type):
  if model_type == 'encoder_decoder':
    return model(TOKENS, POS, SEG, TOKENS, POS, SEG)
  return model(TOKENS, POS, SEG)


def test_no_kind_name_is_tested_outside_the_positions_package():
  """The stack, the checks and the warm start ask capabilities: no registered kind's name is a
  string literal in roformer/ outside roformer/positions/ ('none' is also a value of other
  fields, so for it only a comparison with a position kind counts)."""
  named = [k for k in positions.kinds() if k != 'none']
  literal = re.compile(r"""['"](%s)['"]""" % '|'.join(named))
  compared = re.compile(r"position\.kind\s*(==|!=|in|not in)")
  found = []
  for folder, _, files in os.walk(os.path.join(ROOT, 'roformer')):
    if os.path.basename(folder) == 'positions':
      continue
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(folder, name)
        with open(path, encoding='utf-8') as f:
          for n, line in enumerate(f, 1):
            if literal.search(line) or compared.search(line):
              found.append(f'{os.path.relpath(path, ROOT)}:{n}: {line.strip()}')
  assert not found, found


@pytest.mark.parametrize('kind', kinds.ALL)
def test_every_kinds_blocks_are_alike(kind):
  """Each block owns its position module and every block of a stack has one structure (the
  condition for scanning the stack)."""
  model = models.create(tiny(kind).model, seed=0)
  graphs = [nnx.split(block)[0] for block in model.blocks]
  assert all(g == graphs[0] for g in graphs[1:])
  assert all(isinstance(block.position, positions.scheme(kind).Layer) for block in model.blocks)


@pytest.mark.parametrize('kind,model_type,remat', [
    # Per-layer and shared parameters, full remat; two stacks. The rest with -m slow.
    ('xl', 'causal_lm', 'full'), ('t5', 'encoder_decoder', 'none'),
    pytest.param('rope', 'causal_lm', 'none', marks=pytest.mark.slow),
    pytest.param('fire', 'causal_lm', 'dots', marks=pytest.mark.slow),
    pytest.param('learned', 'mlm', 'none', marks=pytest.mark.slow)])
def test_the_scanned_stack_gives_the_loops_outputs_and_gradients(kind, model_type, remat):
  """config.model.scan_layers builds the same parameters stored stacked and runs the same
  computation: outputs and every parameter's gradient agree with the loop's (converted to the
  per-block layout), with each remat policy inside the scan."""
  config = tiny(kind, 'causal_lm' if model_type == 'mlm' else model_type, remat=remat)
  if model_type == 'mlm':
    config = test_config.get_config('mlm,roformer')
    config.model.update(vocab_size=64, remat=remat)
    config.model.position.kind = 'learned'
  config.model.position.kind = kind
  if kind == 'learned':
    config.model.position.learned.per_layer = True
  scanned_cfg = models.per_block_config(config.model)
  scanned_cfg.scan_layers = True

  def loss(model):
    out = call(model, model_type)
    return jnp.sum(out * jnp.cos(jnp.arange(out.size).reshape(out.shape))), out

  grad = nnx.jit(nnx.value_and_grad(loss, has_aux=True))
  loop, scan = models.create(config.model, seed=0), models.create(scanned_cfg, seed=0)
  (_, want), want_grads = grad(loop)
  (_, got), got_grads = grad(scan)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  got_grads = models.layout(scan).to_layers(got_grads, want_grads)
  flat = lambda tree: {sharding.path_str(p): v for p, v in
                       jax.tree_util.tree_flatten_with_path(tree)[0]}
  want_flat, got_flat = flat(want_grads), flat(got_grads)
  for path, w in want_flat.items():
    np.testing.assert_allclose(got_flat[path], w, rtol=1e-4, atol=1e-5, err_msg=path)


def test_a_scheme_may_compute_the_logits_itself():
  """A kind whose `logits` hook returns q.k/sqrt(d) plus ALiBi's bias gives ALiBi's model:
  the hook replaces q.k, the stack needs no change, and the einsum path is chosen for it."""

  class _Layer(positions.Layer):

    def __init__(self, model_cfg, *, causal, rngs):
      self.alibi = positions.scheme('alibi').Layer(model_cfg, causal=causal, rngs=rngs)

    def logits(self, q, k, q_pos, k_pos, mask, ctx):
      qk = jnp.einsum('bqhd,bkhd->bhqk', q, k, preferred_element_type=jnp.float32)
      return qk * q.shape[-1] ** -0.5 + self.alibi.logits_bias(q, k, q_pos, k_pos, mask, ctx)

  class _Scheme(positions.PositionScheme):
    capabilities = positions.Capabilities(computes_logits=True)
    Layer = _Layer

  base.register('test_logits_alibi')(_Scheme)
  try:
    config = tiny('alibi')
    want = models.create(config.model, seed=0)(TOKENS, POS, SEG)
    config.model.position.kind = 'test_logits_alibi'
    model = models.create(config.model, seed=0)
    assert model.blocks[0].attn.impl == 'einsum'
    np.testing.assert_allclose(model(TOKENS, POS, SEG), want, rtol=1e-5, atol=1e-5)
    config.model.attention_impl = 'xla'
    with pytest.raises(errors.ConfigError, match='attention_impl=einsum'):
      positions.validate(config.model, 12, True)
  finally:
    del base._REGISTRY['test_logits_alibi']  # pylint: disable=protected-access


@pytest.mark.parametrize('capability, hooks', [
    ('rotary', 'rotate'), ('logits_term', 'logits_bias or logits'),
    ('computes_logits', 'logits'), ('value_term', 'value_term'), ('fused_bias', 'fused_bias')])
def test_a_capability_declared_without_its_hook_is_refused_at_registration(capability, hooks):
  """A layer that leaves the capability's hook at its default would run as if the capability
  were absent (a fused kernel with no bias, say): registering it fails, naming the hook, and
  leaves the registry as it was. So does causal_only without the reason its error gives."""
  value = 'its logits gain a term' if capability == 'logits_term' else True

  class _Scheme(positions.PositionScheme):
    capabilities = positions.Capabilities(**{capability: value})

  before = positions.kinds()
  with pytest.raises(TypeError, match=rf'declares Capabilities\({capability}=...\), but its '
                     rf'Layer \(Layer\) does not override {hooks}\. Fix: write the hook'):
    base.register('test_no_hook')(_Scheme)

  class _Causal(positions.PositionScheme):
    capabilities = positions.Capabilities(causal_only=True)

  with pytest.raises(TypeError, match='declares causal_only without causal_reason'):
    base.register('test_no_reason')(_Causal)
  assert positions.kinds() == before


def test_the_capabilities_decide_the_config_checks():
  """Each refusal follows a declared capability: encoders refuse the causal-only kinds, FAVOR+
  the kinds that add to the logits, random positions the kinds that read none."""
  for kind in kinds.ALL:
    caps = positions.capabilities(kind)
    config = tiny(kind)
    if caps.causal_only:
      with pytest.raises(errors.ConfigError, match='causal attention only'):
        positions.validate(config.model, 32, causal=False)
    else:
      positions.validate(config.model, 32, causal=False)
    config.model.attention.update({'kind': 'favor', 'num_features': 16, 'chunk': 8,
                                   'redraw_interval': 0, 'rope_mode': 'qk'})
    if caps.linear_attention:
      config_checks._validate_attention(config, config.model)  # pylint: disable=protected-access
    else:
      with pytest.raises(errors.ConfigError, match="cannot be used with attention.kind='favor'"):
        config_checks._validate_attention(config, config.model)  # pylint: disable=protected-access


@pytest.mark.parametrize('kind', kinds.ALL)
def test_each_declared_capability_is_what_the_kind_does(kind):
  """The declarations against behaviour: a kind adds to the logits (logits_term) exactly when
  its layers return a bias or compute the logits (`computes_logits`: then they differ from
  q.k/sqrt(d)), has a value term exactly when they return one, rotates exactly when
  `rotary` (by RoPE's options) or when its layer has a rotation of its own (FoPE), and its
  model's outputs change when the positions are doubled (every distance
  changes, the tokens and segments do not) exactly when it reads positions."""
  caps = positions.capabilities(kind)
  config = tiny(kind)
  built = kinds.Built(config.model, causal=True, rngs=nnx.Rngs(3))
  layer = built.for_layer(0)
  rng = np.random.default_rng(5)
  q, k = (jnp.asarray(rng.normal(size=(2, 12, 4, 8)), jnp.float32) for _ in range(2))
  bias = layer.logits_bias(q, k, POS, POS)
  assert (bias is not None or caps.computes_logits) == bool(caps.logits_term)
  if caps.computes_logits:
    mask = np.asarray(attention.make_mask(SEG, SEG, causal=True))
    plain = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(8)
    own = np.asarray(layer.logits(q, k, POS, POS, jnp.asarray(mask)))
    assert not np.allclose(np.broadcast_to(mask, own.shape) * (own - plain), 0.0, atol=1e-3)
  probs = jax.nn.softmax(jnp.asarray(rng.normal(size=(2, 4, 12, 12)), jnp.float32))
  assert (layer.value_term(probs, POS, POS) is not None) == caps.value_term
  rotated, _ = layer.rotate(q, k, POS, POS)
  own_rotation = type(built.layers[0]).rotate is not positions.Layer.rotate
  assert (not np.allclose(rotated, q)) == (caps.rotary or own_rotation)
  assert own_rotation or not caps.rotary
  if caps.bias_only:  # Only a bias: another kind may add it (kind 'A+B').
    x = jnp.asarray(rng.normal(size=(2, 12, config.model.d_model)), jnp.float32)
    assert caps.logits_term and not (caps.rotary or caps.value_term or caps.computes_logits)
    np.testing.assert_array_equal(rotated, q)
    np.testing.assert_array_equal(built.embed(x, POS), x)
    np.testing.assert_array_equal(layer.layer_input(x, POS), x)
  model = kinds.Compiled(kinds.visible_positions(models.create(config.model, seed=0)))
  moved = not np.allclose(model(TOKENS, POS, SEG), model(TOKENS, 2 * POS, SEG), atol=1e-6)
  assert moved == caps.reads_positions


@pytest.mark.parametrize('kind', kinds.params(  # One of each way of reading them by default.
    [k for k in kinds.WITH_COMBINED if positions.capabilities(k).real_positions],
    fast=('rope', 'alibi', 'sinusoidal', 'tapa')))
def test_kinds_that_read_real_positions_mean_by_them_what_integers_do(kind):
  """A kind that declares `real_positions` gives the same outputs for integer positions given as
  floats, finite ones for fractional positions, and different ones when they are stretched by
  1.5 or nudged by a fraction that flooring would drop (its positions are read as numbers, not
  floored to indices). Every other kind that reads
  positions is refused real ones by the training-position check (tests/test_float_sampling.py)."""
  caps = positions.capabilities(kind)
  model = kinds.Compiled(kinds.visible_positions(models.create(tiny(kind).model, seed=0)))
  as_ints = np.asarray(model(TOKENS, POS, SEG))
  np.testing.assert_allclose(model(TOKENS, POS.astype(jnp.float32), SEG), as_ints, atol=1e-5)
  stretched = np.asarray(model(TOKENS, POS.astype(jnp.float32) * 1.5 + 0.25, SEG))
  assert np.isfinite(stretched).all()
  # A third of a step on every other position: floored, the positions would be the integers.
  nudged = np.asarray(model(TOKENS, POS.astype(jnp.float32) + 0.3 * (POS % 2), SEG))
  if caps.reads_positions:
    assert not np.allclose(stretched, as_ints, atol=1e-6)
    assert not np.allclose(nudged, as_ints, atol=1e-6)


@pytest.mark.parametrize('name', sorted(os.listdir(LEGACY)) if os.path.isdir(LEGACY) else [])
def test_checkpoints_of_the_earlier_layout_restore(name):
  """Checkpoints written when every per-layer position parameter lived in one module beside the
  blocks (tests/data/legacy_layout, written by that code with its model's outputs on a fixed
  input) restore into the blocks' position modules and give the same outputs."""
  workdir = os.path.join(LEGACY, name)
  config = saved_config.load(workdir)
  mesh = sharding.make_mesh(config.mesh, devices=jax.devices()[:1])
  trainer = trainer_lib.Trainer(config, mesh)
  params = trainer_lib.restore_params(trainer, workdir, 6)
  model = nnx.merge(trainer.graphdef, params)
  want = np.load(os.path.join(workdir, 'logits.npy'))
  np.testing.assert_allclose(call(model, config.model.type), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('kind', kinds.ALL)
def test_every_kind_trains_end_to_end_at_a_tiny_size_with_grouped_query_attention(kind):
  """Every registered kind (from the registry, not a hand-written list) builds a causal LM with
  two key/value heads for its four query heads, each 12 wide in a 32-wide model
  (`model.head_dim`: an inner width of 48), whose loss on packed rows is finite, has a finite
  gradient for every parameter, and falls after a few gradient steps on the same batch. The
  stack is stored stacked and runs scanned, which also needs the kind's blocks to be alike
  (the loop against the scan: the test above)."""
  config = tiny(kind, num_kv_heads=2, head_dim=12, scan_layers=True)
  model = models.create(config.model, seed=0)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)  # rest: constants (FoPE's).
  targets = jnp.roll(TOKENS, -1, axis=1)

  def loss(params):
    logp = jax.nn.log_softmax(nnx.merge(graphdef, params, rest)(TOKENS, POS, SEG))
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))

  step = jax.jit(jax.value_and_grad(loss))
  first, grads = step(params)
  assert np.isfinite(float(first))
  assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))
  p = params
  for _ in range(3):
    p = jax.tree.map(lambda w, g: w - 0.5 * g, p, grads)
    value, grads = step(p)
  assert float(value) < float(first), kind
