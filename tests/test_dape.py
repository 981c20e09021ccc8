"""DAPE (attention.dape): logits + bias + an MLP over each pair's logits and biases."""

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import errors
from roformer import models
from roformer import resolve
from roformer.attention_options import dape


def _gelu(x, xp=np):
  return 0.5 * x * (1 + xp.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _inputs(b=2, h=3, lq=6, lk=5, width=6, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(b, h, lq, lk)), rng.normal(size=(1, h, lq, lk)),
          rng.normal(size=(2 * h, width)), rng.normal(size=width),
          rng.normal(size=(width, h)), rng.normal(size=h))


# 2 x 5 x 6 float32 hidden values a query row: 240 bytes, so 480 bytes is 3 chunks of 2 rows
# and 240 is 6 of 1; 0 is one piece, None the backend's default.
@pytest.mark.parametrize('chunk_bytes', [0, None, 480, 240])
def test_dape_logits_against_the_formula_in_float64(chunk_bytes):
  logits, bias, w1, b1, w2, b2 = _inputs()
  got = np.asarray(dape.dape_logits(logits, bias, w1, b1, w2, b2, chunk_bytes=chunk_bytes))
  for n in range(logits.shape[0]):
    for i in range(logits.shape[2]):
      for j in range(logits.shape[3]):
        pair = np.concatenate([logits[n, :, i, j], bias[0, :, i, j]])  # The 2h values.
        f = _gelu(pair @ w1 + b1) @ w2 + b2
        want = logits[n, :, i, j] + bias[0, :, i, j] + f
        np.testing.assert_allclose(got[n, :, i, j], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('chunk_bytes,pieces', [(0, 1), (480, 3), (240, 6)])
def test_chunk_bytes_sets_how_many_pieces_of_query_rows_the_mlp_runs_over(chunk_bytes, pieces):
  inputs = _inputs()
  jaxpr = jax.make_jaxpr(lambda *a: dape.dape_logits(*a, chunk_bytes=chunk_bytes))(*inputs)
  loops = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == 'scan']
  assert [e.params['length'] for e in loops] == ([] if pieces == 1 else [pieces])


def test_chunked_dape_has_the_gradients_of_the_formula():
  """The chunks' MLP is recomputed in the backward pass: its gradients with respect to the
  logits, the bias and the MLP's parameters are those of the formula written out whole."""
  args = [jnp.asarray(x, jnp.float32) for x in _inputs(seed=1)]

  def formula(logits, bias, w1, b1, w2, b2):
    x = jnp.concatenate([logits, jnp.broadcast_to(bias, logits.shape)], axis=1)
    f = jnp.einsum('bqkw,wh->bhqk', _gelu(jnp.einsum('bcqk,cw->bqkw', x, w1) + b1, jnp), w2)
    return logits + bias + f + b2[:, None, None]

  def loss(fn):
    return lambda *a: jnp.sum(jnp.sin(fn(*a)))  # Weighs every entry differently.

  want = jax.grad(loss(formula), argnums=range(6))(*args)
  got = jax.grad(loss(lambda *a: dape.dape_logits(*a, chunk_bytes=240)),
                 argnums=range(6))(*args)
  for name, g, w in zip(('logits', 'bias', 'w1', 'b1', 'w2', 'b2'), got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-5, err_msg=name)


def _logits(model, tokens):
  pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  return np.asarray(nnx.jit(lambda m: m(tokens, pos, jnp.ones_like(tokens)))(model))


def test_an_mlp_that_outputs_zero_leaves_the_scheme_as_it_was():
  """With f's last layer zero, DAPE's logits are q.k/sqrt(d) + B: the model equals the plain
  scheme's with the same parameters (the MLP's parameters removed)."""
  cfg = kinds.tiny_config('alibi', dropout=0.0).model
  cfg.attention.dape = True
  model = models.create(cfg, seed=2)
  for block in model.blocks:
    block.attn.dape_w2[...] = jnp.zeros_like(block.attn.dape_w2[...])
  tokens = jnp.asarray(np.random.default_rng(1).integers(5, 50, (2, 11)))
  with_dape = _logits(model, tokens)
  for block in model.blocks:
    block.attn.option_fields = ()  # The same layer without DAPE.
  np.testing.assert_allclose(with_dape, _logits(model, tokens), atol=1e-5)


@pytest.mark.parametrize('kind', ['alibi', pytest.param('kerple', marks=pytest.mark.slow),
                                  pytest.param('t5', marks=pytest.mark.slow)])
def test_decoding_with_dape_and_the_cache_equals_the_full_pass(kind, monkeypatch):
  # Chunks of one query row in the full pass (decoding's steps have one or a few).
  monkeypatch.setattr(dape, 'DAPE_CHUNK_BYTES', 1)
  cfg = kinds.tiny_config(kind, dropout=0.0).model
  cfg.attention.dape = True
  tokens = jnp.asarray(np.random.default_rng(2).integers(5, 50, (2, 9)))
  kinds.assert_decoding_equals_full_pass(models.create(cfg, seed=3), tokens, (4, 1, 1, 3))


@pytest.mark.parametrize('kind,fields,message', [
    ('rope', {}, r"position kinds \['rope'\] add no bias"),
    ('alibi', {'model.attention.kind': 'stick_breaking'},
     "attention.kind='stick_breaking' has no softmax"),
    ('alibi', {'model.attention.ssmax': True}, 'ssmax scales the same logits'),
    ('alibi', {'eval.length_multipliers': (1, 1024), 'train.batch_size': 64},
     'GiB at batch 64 and the longest evaluated length 32768'),
])
def test_dape_where_it_cannot_run_is_one_error_naming_the_field(kind, fields, message):
  cfg = test_config.get_config(kind)
  cfg.model.attention.dape = True
  kinds.set_fields(cfg, fields)
  with pytest.raises(errors.ConfigError, match=message):
    resolve.validate(cfg)
