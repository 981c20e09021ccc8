"""The chunked output layer and cross-entropy (roformer/losses.py) equal the whole-logits ones."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import errors
from roformer import losses
from roformer import models
from roformer import resolve
from roformer import sharding
from roformer import tasks


def _inputs(dtype=jnp.float32, seed=0, batch=3, length=10, d=16, vocab=37):
  rng = np.random.default_rng(seed)
  hidden = jnp.asarray(rng.normal(size=(batch, length, d)), dtype)
  embedding = jnp.asarray(rng.normal(size=(vocab, d)), jnp.float32)
  targets = jnp.asarray(rng.integers(0, vocab, (batch, length)), jnp.int32)
  weights = jnp.asarray(rng.random((batch, length)) > 0.3, jnp.float32)  # Padding: weight 0.
  return hidden, embedding, targets, weights


def _whole(hidden, embedding, targets, weights, scale, smoothing, bias=None):
  """What the model and task compute without chunks: the tied logits (plus the masked LM's
  output bias, if any), then token_sums."""
  logits = (jnp.dot(hidden, embedding.astype(hidden.dtype).T) * jnp.asarray(scale, hidden.dtype))
  logits = logits.astype(jnp.float32)
  return tasks.token_sums(logits if bias is None else logits + bias, targets, weights, smoothing)


def _objective(sums):
  """A combination that gives both differentiable sums a cotangent."""
  return 0.7 * sums['objective_sum'] + 0.2 * sums['loss_sum'] + 0.0 * sums['correct']


# 3: L padded; 16: one chunk wider than L. Two cases cover every value; -m slow crosses them.
@pytest.mark.parametrize('chunk,smoothing,with_bias', [
    (3, 0.1, True), (16, 0.0, False)] + [
        pytest.param(c, s, b, marks=pytest.mark.slow) for c in (3, 16) for s in (0.0, 0.1)
        for b in (False, True) if (c, s, b) not in ((3, 0.1, True), (16, 0.0, False))])
def test_chunked_cross_entropy_equals_the_whole_one(chunk, smoothing, with_bias):
  hidden, embedding, targets, weights = _inputs()
  bias = jnp.asarray(np.random.default_rng(5).normal(size=embedding.shape[0]), jnp.float32)
  bias = bias if with_bias else None
  scale = 16 ** -0.5
  whole = lambda h, e, b: _whole(h, e, targets, weights, scale, smoothing, b)
  chunked = lambda h, e, b: losses.chunked_token_sums(h, e, targets, weights, scale=scale,
                                                      label_smoothing=smoothing, chunk=chunk,
                                                      bias=b)
  whole, chunked = jax.jit(whole), jax.jit(chunked)
  want, got = whole(hidden, embedding, bias), chunked(hidden, embedding, bias)
  assert set(got) == set(want)
  for name in want:
    np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=name)
  args = (hidden, embedding, bias)
  argnums = (0, 1, 2) if with_bias else (0, 1)
  want_grads = jax.jit(jax.grad(lambda *a: _objective(whole(*a)), argnums=argnums))(*args)
  got_grads = jax.jit(jax.grad(lambda *a: _objective(chunked(*a)), argnums=argnums))(*args)
  for want_grad, got_grad in zip(want_grads, got_grads):
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-5, atol=1e-6)
  # Padding positions get no gradient.
  np.testing.assert_array_equal(np.asarray(got_grads[0])[np.asarray(weights) == 0], 0.0)


def test_a_target_tied_for_the_largest_logit_counts_as_right():
  """`correct` is "the target's logit is the largest" (no argmax pass): with two identical
  embedding rows the logits of ids 1 and 2 tie for the largest, and either as the target is
  right, where argmax == target would credit id 1 only; any other target is wrong."""
  embedding = jnp.asarray([[0.0, 0.0], [1.0, 2.0], [1.0, 2.0], [-1.0, 0.5]], jnp.float32)
  hidden = jnp.asarray([[[1.0, 1.0]] * 4], jnp.float32)  # Logits 0, 3, 3, -0.5.
  targets = jnp.asarray([[1, 2, 0, 3]], jnp.int32)
  weights = jnp.ones((1, 4), jnp.float32)
  sums = losses.chunked_token_sums(hidden, embedding, targets, weights, scale=1.0, chunk=2)
  assert float(sums['correct']) == 2.0


def test_every_path_counts_a_tied_target_as_right():
  """One accuracy: the whole-logits sums (tasks.token_sums) and the chunked ones credit the same
  tokens on logits with ties (hand-computed: logits 0, 3, 3, -0.5 for every position, so targets
  1 and 2 are right, 0 and 3 wrong), whichever index an argmax would return."""
  embedding = jnp.asarray([[0.0, 0.0], [1.0, 2.0], [1.0, 2.0], [-1.0, 0.5]], jnp.float32)
  hidden = jnp.asarray([[[1.0, 1.0]] * 4], jnp.float32)
  targets = jnp.asarray([[2, 1, 0, 3]], jnp.int32)
  weights = jnp.ones((1, 4), jnp.float32)
  logits = jnp.einsum('bld,vd->blv', hidden, embedding)
  whole = tasks.token_sums(logits, targets, weights)
  chunked = losses.chunked_token_sums(hidden, embedding, targets, weights, scale=1.0, chunk=2)
  assert float(whole['correct']) == float(chunked['correct']) == 2.0
  np.testing.assert_array_equal(losses.target_is_top(logits, targets), [[True, True, False, False]])


def test_chunked_cross_entropy_in_bfloat16_follows_the_whole_one():
  """With bfloat16 activations the logits are bfloat16 products in both (the chunked layer
  scales the embedding instead of the logits); sums and gradients agree to bfloat16's
  precision."""
  hidden, embedding, targets, weights = _inputs(jnp.bfloat16, seed=1)
  whole = lambda h, e: _objective(_whole(h, e, targets, weights, 0.25, 0.0))
  chunked = lambda h, e: _objective(losses.chunked_token_sums(h, e, targets, weights,
                                                              scale=0.25, chunk=4))
  np.testing.assert_allclose(chunked(hidden, embedding), whole(hidden, embedding), rtol=1e-3)
  got = jax.grad(chunked, argnums=(0, 1))(hidden, embedding)
  want = jax.grad(whole, argnums=(0, 1))(hidden, embedding)
  assert got[0].dtype == jnp.bfloat16 and got[1].dtype == jnp.float32
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), rtol=2e-2,
                               atol=2e-3)


def test_the_causal_lm_task_with_a_chunked_loss_equals_the_whole_logits_one():
  """The task's sums and their gradients over every parameter, on packed rows (two documents
  per row, positions restarting) with padding and label smoothing."""
  config = test_config.get_config('rope')
  config.model.vocab_size = config.data.vocab_size = 64
  rng = np.random.default_rng(0)
  b, length = 4, config.data.seq_len
  tokens = rng.integers(5, 64, (b, length)).astype(np.int32)
  segments = np.repeat([[1] * 20 + [2] * (length - 20)], b, 0)
  segments[1, -5:] = 0
  positions = np.concatenate([np.arange(20), np.arange(length - 20)])[None].repeat(b, 0)
  batch = {'inputs': tokens, 'targets': np.roll(tokens, -1, 1), 'inputs_segment_ids': segments,
           'targets_segment_ids': segments, 'inputs_positions': positions,
           'targets_positions': positions}
  model = models.create(config.model, seed=0)
  graphdef, params = nnx.split(model, nnx.Param)
  results = []
  for chunk in (0, 5):  # 5: 32 positions in 7 chunks, the last one padded.
    task = tasks.LanguageModeling(loss_chunk=chunk)
    def objective(p, task=task):
      sums = task.sums(nnx.merge(graphdef, p), batch, label_smoothing=0.1)
      return _objective(sums), sums
    results.append(jax.jit(jax.grad(objective, has_aux=True))(params))
  (whole_grads, whole), (chunked_grads, chunked) = results
  for name in whole:
    np.testing.assert_allclose(chunked[name], whole[name], rtol=1e-5, err_msg=name)
  for x, y in zip(jax.tree.leaves(chunked_grads), jax.tree.leaves(whole_grads)):
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)


def test_a_chunk_as_long_as_the_row_or_longer_computes_the_whole_logits():
  """A chunk shorter than the row chunks; one as long or longer would be a loop of one step or
  pad the row, so the task takes the whole-logits path: the very program of loss_chunk=0."""
  assert [tasks.chunks(chunk, 16) for chunk in (0, 8, 15, 16, 32)] == [
      False, True, True, False, False]
  config = test_config.get_config('rope')
  config.model.vocab_size = 64
  rng = np.random.default_rng(1)
  tokens = rng.integers(5, 64, (2, 16)).astype(np.int32)
  ones, positions = np.ones((2, 16), np.int32), np.arange(16, dtype=np.int32)[None].repeat(2, 0)
  batch = {'inputs': tokens, 'targets': np.roll(tokens, -1, 1), 'inputs_segment_ids': ones,
           'targets_segment_ids': ones, 'inputs_positions': positions,
           'targets_positions': positions}
  model = models.create(config.model, seed=0)
  sums = {chunk: jax.jit(lambda b, chunk=chunk: tasks.LanguageModeling(loss_chunk=chunk).sums(
      model, b))(batch) for chunk in (0, 16, 32)}
  for chunk in (16, 32):
    for name, value in sums[0].items():
      assert np.asarray(sums[chunk][name]) == np.asarray(value), (chunk, name)


def _loop_bodies(hlo: str) -> list[str]:
  """The text of every while loop's body computation in compiled HLO."""
  names = set(re.findall(r'while\(.*?body=%?([\w.\-]+)', hlo))
  return [c for c in re.split(r'\n(?=\S)', hlo) if c.split(' ', 1)[0].lstrip('%') in names]


@pytest.mark.usefixtures('eight_devices')
def test_on_a_sharded_batch_the_embedding_gradient_crosses_devices_once():
  """Batch rows on 8 devices: the same sums and gradients as one device, and the embedding's
  gradient is summed per device inside the loop and across devices once after it."""
  hidden, embedding, targets, weights = _inputs(batch=8, length=12)
  mesh = sharding.make_mesh(test_config.get_config().mesh)
  assert mesh.devices.size == 8
  def grads(h, e, t, w):
    sums = losses.chunked_token_sums(h, e, t, w, scale=0.25, chunk=4)
    return jax.grad(lambda h, e: _objective(losses.chunked_token_sums(
        h, e, t, w, scale=0.25, chunk=4)), argnums=(0, 1))(h, e), sums
  batch = sharding.batch_sharding(mesh)
  step = sharding.on_mesh(mesh, fn=jax.jit(grads, in_shardings=(
      batch, sharding.replicated(mesh), batch, batch)))
  got = step(hidden, embedding, targets, weights)
  want = jax.jit(grads)(hidden, embedding, targets, weights)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
  hlo = step.lower(hidden, embedding, targets, weights).compile().as_text()
  bodies = _loop_bodies(hlo)
  assert bodies and not any('all-reduce' in body for body in bodies)
  assert 'all-reduce' in hlo


def test_loss_chunk_must_be_a_count():
  config = test_config.get_config('rope')
  config.model.loss_chunk = -1
  with pytest.raises(errors.ConfigError, match='config.model.loss_chunk'):
    resolve.validate(config)
