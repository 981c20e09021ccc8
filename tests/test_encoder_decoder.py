"""The encoder-decoder: packing isolation, causal decoding, cache equals teacher forcing."""

import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from configs import translate
from roformer import attention
from roformer import errors
from roformer import models
from roformer import resolve

KINDS = kinds.with_capability('causal_only', False)  # Both stacks: encoders too.


def model_for(kind, **fields):
  cfg = test_config.get_config(kind).model
  cfg.type, cfg.vocab_size = 'encoder_decoder', 40
  cfg.update(fields)
  return models.create(cfg, seed=4)


@nnx.jit
def _forward(model, *inputs):
  return model(*inputs)


@nnx.jit
def _decode(model, tokens, positions, cache):
  return model.decode(tokens, positions, cache)


def run(model, src, tgt, src_seg=None, tgt_seg=None, src_pos=None, tgt_pos=None):
  src, tgt = jnp.asarray(src), jnp.asarray(tgt)
  ones = lambda x: jnp.ones(x.shape, jnp.int32)
  arange = lambda x: jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape)
  return np.asarray(_forward(model, src, arange(src) if src_pos is None else jnp.asarray(src_pos),
                             ones(src) if src_seg is None else jnp.asarray(src_seg), tgt,
                             arange(tgt) if tgt_pos is None else jnp.asarray(tgt_pos),
                             ones(tgt) if tgt_seg is None else jnp.asarray(tgt_seg)))


@pytest.mark.parametrize('kind', kinds.params(KINDS))
def test_packed_pairs_equal_separate_pairs(kind):
  model = model_for(kind)
  rng = np.random.default_rng(0)
  s1, s2, t1, t2 = (rng.integers(5, 40, n) for n in (4, 6, 3, 5))
  packed = run(model, np.r_[s1, s2, 0][None], np.r_[t1, t2, 0, 0][None],
               src_seg=np.r_[[1] * 4, [2] * 6, 0][None], tgt_seg=np.r_[[1] * 3, [2] * 5, 0, 0][None],
               src_pos=np.r_[np.arange(4), np.arange(6), 0][None],
               tgt_pos=np.r_[np.arange(3), np.arange(5), 0, 0][None])
  np.testing.assert_allclose(packed[0, :3], run(model, s1[None], t1[None])[0], atol=1e-4)
  np.testing.assert_allclose(packed[0, 3:8], run(model, s2[None], t2[None])[0], atol=1e-4)


def test_decoder_is_causal_and_source_matters():
  model = model_for('rope')
  rng = np.random.default_rng(1)
  src, tgt = rng.integers(5, 40, (1, 6)), rng.integers(5, 40, (1, 7))
  base = run(model, src, tgt)
  later = tgt.copy()
  later[0, 4] = 4
  np.testing.assert_array_equal(run(model, src, later)[0, :4], base[0, :4])
  other_src = src.copy()
  other_src[0, 5] = 4  # The encoder is bidirectional: every target position sees it.
  assert np.abs(run(model, other_src, tgt)[0, 0] - base[0, 0]).max() > 1e-4


def _pair():
  """A batch of two sources of 6 tokens and two targets of 5."""
  rng = np.random.default_rng(2)
  return jnp.asarray(rng.integers(5, 40, (2, 6))), jnp.asarray(rng.integers(5, 40, (2, 5)))


def _assert_cached_decoding_equals(model, src, tgt, full):
  """Decoding `tgt` a token at a time through the cache gives the teacher-forced logits `full`."""
  seg = jnp.ones_like(src)
  memory = model.encode_source(src, jnp.broadcast_to(jnp.arange(6), (2, 6)), seg)
  cache = model.init_cache(memory, seg, max_len=8)
  for t in range(5):
    logits, cache = _decode(model, tgt[:, t:t + 1], jnp.full((2, 1), t), cache)
    np.testing.assert_allclose(np.asarray(logits)[:, 0], full[:, t], atol=1e-4)


@pytest.mark.parametrize('kind', kinds.params(KINDS))
def test_cached_decoding_equals_teacher_forcing(kind):
  model = model_for(kind)
  src, tgt = _pair()
  _assert_cached_decoding_equals(model, src, tgt, run(model, src, tgt))


@pytest.mark.parametrize('norm', ['sandwich', 'output'])
def test_output_norms_and_the_embedding_multiplier_reach_both_stacks(norm):
  """Gemma's and OLMo 2's layouts in the translation model: every branch's output norm (the
  decoder's cross-attention too) and the input embeddings' multiplier change the logits of both
  stacks, and cached decoding still equals teacher forcing."""
  model = model_for('rope', norm=norm, embedding_multiplier=3.0)
  src, tgt = _pair()
  full = run(model, src, tgt)
  for block in (model.encoder_blocks[0], model.decoder_blocks[0]):
    for name in ('ln_attn_out', 'ln_mlp_out') + (('ln_cross_out',) if block is
                                                   model.decoder_blocks[0] else ()):
      norm = getattr(block, name)
      kept = norm.scale.value
      norm.scale.value = kept * 2.0
      assert np.abs(run(model, src, tgt) - full).max() > 1e-3, name
      norm.scale.value = kept
  model.embedding_multiplier = 1.0
  assert np.abs(run(model, src, tgt) - full).max() > 1e-3
  model.embedding_multiplier = 3.0
  _assert_cached_decoding_equals(model, src, tgt, full)


def test_the_residual_multiplier_scales_every_branch_of_both_stacks():
  """model.residual_multiplier in the translation model: the decoder block is
  x + m attn(norm x), then + m cross(norm ., memory), then + m mlp(norm .), as its own
  sublayers compute it by hand; the encoder's states change with it; cached decoding still
  equals teacher forcing."""
  m = 0.5
  model = model_for('rope', residual_multiplier=m)
  src, tgt = _pair()
  seg, pos = jnp.ones_like(src), jnp.broadcast_to(jnp.arange(6), (2, 6))
  memory = model.encode_source(src, pos, seg)
  block, shared = model.decoder_blocks[0], model.decoder_position()
  x = model.embed_tokens(jnp.asarray(tgt))
  tgt_seg, tgt_pos = jnp.ones_like(x[..., 0], jnp.int32), jnp.broadcast_to(jnp.arange(5), (2, 5))
  mask = attention.make_mask(tgt_seg, tgt_seg, causal=True)
  cross_mask = attention.make_mask(tgt_seg, seg, causal=False)
  got, _ = block(x, mask, tgt_pos, shared, memory=memory, memory_mask=cross_mask)
  h = x + m * block.attn(block.ln_attn(x), mask, tgt_pos, block.position, shared)[0]
  h = h + m * block.cross(block.ln_cross(h), memory, cross_mask)
  want = h + m * block.mlp(block.ln_mlp(h))
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
  model.encoder_blocks[0].multiplier = 1.0
  assert np.abs(model.encode_source(src, pos, seg) - memory).max() > 1e-3
  model.encoder_blocks[0].multiplier = m
  _assert_cached_decoding_equals(model, src, tgt, run(model, src, tgt))


def test_a_norm_of_the_embeddings_reaches_both_stacks():
  """model.embedding_norm (BLOOM's) normalises the shared embeddings at the input of both
  stacks: its scale changes the encoder's states, and the decoder's logits from a fixed memory,
  and cached decoding still equals teacher forcing."""
  model = model_for('rope', embedding_norm=True)
  src, tgt = _pair()
  full = run(model, src, tgt)
  seg, pos = jnp.ones_like(src), jnp.broadcast_to(jnp.arange(6), (2, 6))
  memory = model.encode_source(src, pos, seg)
  tgt_seg, tgt_pos = jnp.ones_like(tgt), jnp.broadcast_to(jnp.arange(5), (2, 5))
  self_mask = attention.make_mask(tgt_seg, tgt_seg, causal=True)
  cross_mask = attention.make_mask(tgt_seg, seg, causal=False)
  decoded = lambda: np.asarray(
      model._decode(tgt, tgt_pos, self_mask, memory, cross_mask)[0])  # pylint: disable=protected-access
  from_memory = decoded()
  kept = model.embed_norm.scale.value
  model.embed_norm.scale.value = kept * 2.0
  assert np.abs(run(model, src, tgt) - full).max() > 1e-3
  assert np.abs(model.encode_source(src, pos, seg) - memory).max() > 1e-3  # The encoder's.
  assert np.abs(decoded() - from_memory).max() > 1e-3  # The decoder's, from the same memory.
  model.embed_norm.scale.value = kept
  _assert_cached_decoding_equals(model, src, tgt, full)


def test_xpos_is_refused_for_the_bidirectional_encoder():
  cfg = translate.get_config('xpos')
  with pytest.raises(errors.ConfigError, match='causal attention only'):
    resolve.validate(cfg)
