"""Chunked attention per layer (config.model.layer_chunks, Llama 4's local layers): a query sees
the keys of its own chunk of positions, on every implementation (the kernels take the chunks as
packed segments), over causal blocks, through the cache and a scanned stack; refused where it
cannot apply (with the windows', tests/test_windows.py)."""

import jax.numpy as jnp
import kinds
import numpy as np
import pytest

from roformer import attention
from roformer import models
from roformer import resolve
from roformer import self_attention

TOKENS = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 14)))
# Row 1 packs a second document from slot 6: its positions, and so its chunks, restart there.
SEGMENTS = jnp.asarray([[1] * 14, [1] * 6 + [2] * 8])
POSITIONS = jnp.asarray([list(range(14)), list(range(6)) + list(range(8))])


def tiny(chunks, num_layers=1, kind='rope', **model):
  config = kinds.tiny_config(kind, num_layers=num_layers, layer_chunks=chunks, dropout=0.0,
                             **model)
  resolve.validate(config)
  return config


def test_a_token_reaches_exactly_the_later_queries_of_its_chunk():
  """One layer in chunks of 4: token 5 (chunk 4-7) changes the outputs at 5, 6 and 7 alone; in
  the packed row, the second document's token at slot 9 (its position 3, chunk 0-3) those at
  slot 9 alone, and the one at slot 10 (position 4) those at 10 to 13. With a global layer
  after it, token 5 reaches the end."""
  def reached(chunks, layers, row, slot):
    model = kinds.Compiled(models.create(tiny(chunks, layers).model, seed=1))
    base = np.asarray(model(TOKENS, POSITIONS, SEGMENTS))
    moved = np.asarray(model(TOKENS.at[row, slot].set(4), POSITIONS, SEGMENTS))
    return np.flatnonzero(np.abs(moved - base).max(-1)[row] > 1e-6).tolist()
  assert reached((4,), 1, 0, 5) == [5, 6, 7]
  assert reached((4,), 1, 1, 9) == [9]
  assert reached((4,), 1, 1, 10) == [10, 11, 12, 13]
  assert reached((4, 0), 2, 0, 5) == list(range(5, 14))


def test_the_layer_is_the_formula():
  """ALiBi's bias, packed documents, chunks of 3: softmax over the keys of the same document,
  at or before the query, with the same position // 3, in float64."""
  config = tiny((3,), kind='alibi', attention_impl='einsum')
  model = models.create(config.model, seed=0)
  attn, layer = model.blocks[0].attn, model.blocks[0].position
  x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 14, config.model.d_model)),
                  jnp.float32)
  mask = attention.make_mask(SEGMENTS, SEGMENTS, causal=True)
  out = np.asarray(attn(x, mask, POSITIONS, layer, segments=SEGMENTS)[0])
  bias = kinds.scheme_bias(attn, layer, x, POSITIONS, mask)
  p = np.asarray(POSITIONS)
  chunked = np.asarray(mask) & (p[:, :, None] // 3 == p[:, None, :] // 3)[:, None]
  np.testing.assert_allclose(out, kinds.attention_formula(attn, x, chunked, bias), rtol=2e-4,
                             atol=2e-5)
  assert np.abs(kinds.attention_formula(attn, x, mask, bias) - out).max() > 1e-3


@pytest.mark.parametrize('kind,impls', [('rope', ('einsum', 'xla')),
                                        ('alibi', ('einsum', 'pallas'))])
def test_every_implementation_attends_within_the_chunks(kind, impls):
  """The kernels that take packed segments instead of the mask (XLA's, the fused bias kernel in
  interpret mode) get the documents split at their chunks: outputs and gradients equal the
  einsum path's, with a window narrower than the chunk on the second layer."""
  config = tiny((4, 6), num_layers=2, kind=kind, layer_windows=(0, 3))
  kinds.assert_implementations_agree(config.model, TOKENS, POSITIONS, SEGMENTS, impls=impls)


def test_chunk_segments_split_each_document_and_keep_padding():
  seg = jnp.asarray([[1, 1, 1, 1, 1, 2, 2, 2, 0, 0]])
  pos = jnp.asarray([[0, 1, 2, 3, 4, 0, 1, 2, 0, 0]])
  got = np.asarray(self_attention.chunk_segments(seg, pos, 2))
  np.testing.assert_array_equal(got, [[1, 1, 2, 2, 3, 4, 4, 5, 0, 0]])


def test_chunked_causal_blocks_equal_the_whole_matrix():
  got = {rows: np.asarray(models.create(tiny((5,), causal_block=rows).model, seed=2)(
      TOKENS, POSITIONS, SEGMENTS)) for rows in (0, 4)}
  np.testing.assert_allclose(got[4], got[0], rtol=1e-5, atol=1e-5)


def test_the_cache_equals_the_full_pass_across_chunk_boundaries():
  model = models.create(tiny((4, 0), num_layers=2).model, seed=3)
  kinds.assert_decoding_equals_full_pass(model, TOKENS[:, :12], (3, 1, 5, 3), max_len=12)


def test_a_scanned_stack_with_chunks_on_alternate_layers_is_the_loop():
  config = tiny((4, 0), num_layers=4)
  loop = models.create(config.model, seed=4)
  config.model.scan_layers = True
  scanned = models.create(config.model, seed=4)
  np.testing.assert_allclose(np.asarray(scanned(TOKENS, POSITIONS, SEGMENTS)),
                             np.asarray(loop(TOKENS, POSITIONS, SEGMENTS)), rtol=1e-5, atol=1e-5)


def test_the_llama4_preset_is_irope_with_chunks_norms_and_its_temperature():
  """configs/lm.py:llama4: three RoPE layers on interleaved pairs, chunked, their q and k normed
  without a scale, then a global layer without positions with the temperature."""
  from configs import lm  # pylint: disable=import-outside-toplevel
  cfg = lm.get_config('llama4')
  resolve.validate(cfg)
  model = models.create(cfg.model, seed=0)
  chunk = cfg.data.seq_len // 4
  assert [b.attn.chunk for b in model.blocks] == [chunk] * 3 + [0]
  assert [b.attn.qk_norm_on for b in model.blocks] == [True] * 3 + [False]
  assert [b.attn.temperature is not None for b in model.blocks] == [False] * 3 + [True]
  assert cfg.model.position.rope.layout == 'interleaved' and not hasattr(model.blocks[0].attn,
                                                                          'q_scale')
