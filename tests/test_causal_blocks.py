"""Causal attention without the blocks above the diagonal (config.model.causal_block) equals the
whole masked matrix: outputs and gradients, packed segments with positions restarting, every
position scheme."""

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import attention
from roformer import errors
from roformer import models
from roformer import resolve
from roformer import sharding


def _packed(batch=2, length=12, seed=0):
  """Segment ids of two packed documents per row (lengths differ by row) and a padded tail."""
  rng = np.random.default_rng(seed)
  seg = np.zeros((batch, length), np.int32)
  positions = np.zeros((batch, length), np.int32)
  for row in range(batch):
    first = int(rng.integers(3, length - 4))
    real = length - 3 * (row % 2)  # Even rows have no padding, odd rows three slots.
    seg[row, :first], seg[row, first:real] = 1, 2
    positions[row, :first] = np.arange(first)
    positions[row, first:real] = np.arange(real - first)
  return jnp.asarray(seg), jnp.asarray(positions)


def test_query_blocks_cover_the_rows_once():
  assert attention.query_blocks(12, 3) == [(0, 3), (3, 6), (6, 9), (9, 12)]
  assert attention.query_blocks(10, 4) == [(0, 3), (3, 6), (6, 10)]  # Near-equal, at most 4.
  assert attention.query_blocks(512, 128) == [(0, 128), (128, 256), (256, 384), (384, 512)]
  assert attention.query_blocks(5, 8) == [(0, 5)]
  # More batch blocks than the cap: the largest divisor of the rows within it, not one block.
  assert attention.batch_blocks(96, 12 * 2**20) == 96
  assert len(attention.query_blocks(2**20, 128)) == attention.MAX_BATCH_BLOCKS  # Bounded.


@pytest.mark.parametrize('bias_shape,rows', [  # 3 rows: 5 blocks of 2 and 3 rows.
    (None, 6), ((1, 2, 12, 12), 3), ((2, 2, 12, 12), 4), ((1, 1, 12, 12), 3)])
def test_block_skipping_equals_the_whole_masked_attention(bias_shape, rows):
  rng = np.random.default_rng(1)
  q, k, v = (jnp.asarray(rng.normal(size=(2, 12, 2, 8)), jnp.float32) for _ in range(3))
  bias = None if bias_shape is None else jnp.asarray(rng.normal(size=bias_shape), jnp.float32)
  seg, _ = _packed()
  mask = attention.make_mask(seg, seg, causal=True)
  real = np.asarray(seg > 0)
  # A loss that reads real queries only, as the model's (padding outputs are never read).
  cotangent = jnp.asarray(rng.normal(size=q.shape), jnp.float32) * (seg > 0)[:, :, None, None]

  def loss(fn, q, k, v, bias):
    return jnp.sum(fn(q, k, v, bias) * cotangent)
  whole = lambda q, k, v, b: attention.softmax_attention(q, k, v, mask, b)
  skipped = lambda q, k, v, b: attention.causal_block_attention(q, k, v, mask, b, rows)
  np.testing.assert_allclose(np.asarray(skipped(q, k, v, bias))[real],
                             np.asarray(whole(q, k, v, bias))[real], rtol=1e-5, atol=1e-6)
  argnums = (0, 1, 2) if bias is None else (0, 1, 2, 3)
  want = jax.jit(jax.grad(lambda *a: loss(whole, *a), argnums=argnums))(q, k, v, bias)
  got = jax.jit(jax.grad(lambda *a: loss(skipped, *a), argnums=argnums))(q, k, v, bias)
  for g, w in zip(got, want):  # A shared bias's gradient sums the rows in another order.
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_block_skipping_on_a_sharded_batch_moves_nothing_between_devices(eight_devices):
  """Rows on 8 devices: the same gradients as one device, and the compiled program (forward
  and backward) has no collective."""
  mesh = jax.sharding.Mesh(np.asarray(eight_devices).reshape(8, 1, 1), sharding.AXES)
  rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec('data'))
  rng = np.random.default_rng(4)
  q, k, v = (jnp.asarray(rng.normal(size=(8, 12, 2, 4)), jnp.float32) for _ in range(3))
  seg, _ = _packed(batch=8)
  mask = attention.make_mask(seg, seg, causal=True)
  def loss(q, k, v, m):
    return jnp.sum(attention.causal_block_attention(q, k, v, m, None, 4) ** 2)
  f = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))  # The loss's own sum is a collective.
  want = f(q, k, v, mask)
  sharded = [jax.device_put(x, rows) for x in (q, k, v, mask)]
  with jax.set_mesh(mesh):
    got = f(*sharded)
    hlo = f.lower(*sharded).compile().as_text()
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)
  for collective in ('all-gather', 'all-to-all', 'collective-permute', 'all-reduce'):
    assert collective not in hlo, collective


def _model(kind, model_type='causal_lm', rows=0):
  cfg = (test_config.get_config('mlm' if model_type == 'mlm' else kind)).model
  cfg.update(vocab_size=50, attention_impl='einsum', causal_block=rows)
  if model_type == 'mlm':
    cfg.position.kind = kind
  return kinds.visible_positions(models.create(cfg, seed=3))


def _loss_and_grads(model, tokens, positions, seg, weights):
  """The gradients of the parameters; other state (FoPE's fixed coefficients) held constant."""
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  def loss(p):
    logits = nnx.merge(graphdef, p, rest)(tokens, positions, seg)
    return jnp.sum(jax.nn.log_softmax(logits)[..., 7] * weights), logits
  (value, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  return value, logits, grads


def _apply(model, *args):
  """model(*args), compiled."""
  graphdef, state = nnx.split(model)
  return jax.jit(lambda s, *a: nnx.merge(graphdef, s)(*a))(state, *args)


@pytest.mark.parametrize('kind', kinds.params())
def test_a_causal_lm_with_block_skipping_equals_the_whole_matrix(kind):
  """Logits at every real position and the gradients of every parameter; packed documents whose
  positions restart, a padded tail. Shaw's value term keeps the whole matrix (it needs the
  probabilities): the option leaves it as it was."""
  seg, positions = _packed()
  tokens = jnp.asarray(np.random.default_rng(2).integers(5, 50, seg.shape))
  weights = (seg > 0).astype(jnp.float32)
  whole = _loss_and_grads(_model(kind), tokens, positions, seg, weights)
  skipped = _loss_and_grads(_model(kind, rows=3), tokens, positions, seg, weights)  # 4 blocks.
  np.testing.assert_allclose(skipped[0], whole[0], rtol=1e-5)
  real = np.asarray(seg > 0)
  np.testing.assert_allclose(np.asarray(skipped[1])[real], np.asarray(whole[1])[real],
                             rtol=1e-5, atol=1e-5)
  for g, w in zip(jax.tree.leaves(skipped[2]), jax.tree.leaves(whole[2])):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_bidirectional_attention_and_cached_decoding_ignore_the_option():
  """The masked LM's encoder attends to every key whatever causal_block says, and a causal LM
  decoding with a cache (keys past the queries' rows) keeps the whole matrix."""
  seg, positions = _packed()
  tokens = jnp.asarray(np.random.default_rng(3).integers(5, 49, seg.shape))
  whole, skipped = _model('rope', 'mlm'), _model('rope', 'mlm', rows=3)
  np.testing.assert_array_equal(np.asarray(_apply(skipped, tokens, positions, seg)),
                                np.asarray(_apply(whole, tokens, positions, seg)))
  lm, lm_skipped = _model('rope'), _model('rope', rows=3)
  row = tokens[:1, :6]
  caches = [m.init_cache(1, 8) for m in (lm, lm_skipped)]
  outs = [m.decode(row, jnp.arange(6)[None], c)[0] for m, c in zip((lm, lm_skipped), caches)]
  np.testing.assert_array_equal(np.asarray(outs[1]), np.asarray(outs[0]))


def test_causal_block_must_be_a_count():
  config = test_config.get_config('rope')
  config.model.causal_block = -1
  with pytest.raises(errors.ConfigError, match='config.model.causal_block'):
    resolve.validate(config)
