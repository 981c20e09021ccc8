"""Masks leak nothing; packing is equivalent to separate sequences; implementations agree."""

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest

from configs import test as test_config
from roformer import attention
from roformer import errors
from roformer import models
from roformer import sharding

KINDS = kinds.WITH_COMBINED  # From the registry.
NO_VALUE_TERM = [k for k in KINDS if k != 'shaw']


def model_for(kind, impl='einsum'):
  cfg = test_config.get_config(kind).model
  cfg.vocab_size = 50
  cfg.attention_impl = impl
  return kinds.Compiled(kinds.visible_positions(models.create(cfg, seed=3)))


def test_make_mask_against_hand_table():
  seg = jnp.array([[1, 1, 2, 2, 0]])
  want = np.array([[1, 0, 0, 0, 0],
                   [1, 1, 0, 0, 0],
                   [0, 0, 1, 0, 0],
                   [0, 0, 1, 1, 0],
                   [0, 0, 0, 0, 0]], bool)
  np.testing.assert_array_equal(np.asarray(attention.make_mask(seg, seg, causal=True))[0, 0], want)
  bidir = np.asarray(attention.make_mask(seg, seg, causal=False))[0, 0]
  assert bidir[0, 1] and bidir[3, 2] and not bidir[1, 2] and not bidir[4].any()


@pytest.mark.parametrize('kind', kinds.by_capabilities(KINDS))
def test_causal_lm_future_tokens_do_not_leak(kind):
  model = model_for(kind)
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(5, 50, (1, 12)))
  pos, seg = jnp.arange(12)[None], jnp.ones((1, 12), jnp.int32)
  base = np.asarray(model(tokens, pos, seg))
  changed = np.asarray(model(tokens.at[0, 8].set(4), pos, seg))
  np.testing.assert_array_equal(changed[0, :8], base[0, :8])
  assert np.abs(changed[0, 8:] - base[0, 8:]).max() > 1e-4  # The change is visible after.


@pytest.mark.parametrize('kind', kinds.by_capabilities(KINDS))
def test_packed_documents_equal_separate_documents(kind):
  """Two documents packed into one row (positions restart, segment ids differ) give the same
  logits as each document alone: nothing crosses segments and positions are per document."""
  model = model_for(kind)
  rng = np.random.default_rng(1)
  a, b = rng.integers(5, 50, 5), rng.integers(5, 50, 7)
  packed = jnp.asarray(np.concatenate([a, b, [0, 0]])[None])
  pos = jnp.asarray(np.concatenate([np.arange(5), np.arange(7), [0, 0]])[None])
  seg = jnp.asarray(np.array([1] * 5 + [2] * 7 + [0, 0])[None])
  out = np.asarray(model(packed, pos, seg))
  alone_b = np.asarray(model(jnp.asarray(b[None]), jnp.arange(7)[None], jnp.ones((1, 7), int)))
  alone_a = np.asarray(model(jnp.asarray(a[None]), jnp.arange(5)[None], jnp.ones((1, 5), int)))
  np.testing.assert_allclose(out[0, 5:12], alone_b[0], atol=1e-4)
  np.testing.assert_allclose(out[0, :5], alone_a[0], atol=1e-4)


@pytest.mark.parametrize('kind', kinds.by_capabilities(NO_VALUE_TERM))
def test_einsum_and_xla_attention_agree(kind):
  einsum_model, xla_model = model_for(kind, 'einsum'), model_for(kind, 'xla')
  rng = np.random.default_rng(2)
  tokens = jnp.asarray(rng.integers(5, 50, (2, 10)))
  pos = jnp.asarray(np.tile(np.r_[np.arange(6), np.arange(2), [0, 0]], (2, 1)))
  seg = jnp.asarray(np.tile([1] * 6 + [2] * 2 + [0, 0], (2, 1)))  # Two padding slots.
  np.testing.assert_allclose(np.asarray(einsum_model(tokens, pos, seg)),
                             np.asarray(xla_model(tokens, pos, seg)), atol=1e-4)


def test_attend_implementations_agree_with_bias_and_padding():
  rng = np.random.default_rng(4)
  q, k, v = (jnp.asarray(rng.normal(size=(2, 6, 2, 8)), jnp.float32) for _ in range(3))
  bias = jnp.asarray(rng.normal(size=(1, 2, 6, 6)), jnp.float32)
  seg = jnp.asarray([[1, 1, 1, 2, 0, 0], [1, 1, 1, 1, 1, 1]])
  mask = attention.make_mask(seg, seg, causal=True)
  ein, _ = attention.attend(q, k, v, mask, bias=bias, impl='einsum')
  xla, _ = attention.attend(q, k, v, mask, bias=bias, impl='xla')
  np.testing.assert_allclose(np.asarray(ein), np.asarray(xla), atol=1e-5)
  assert np.isfinite(np.asarray(ein)).all()  # Fully masked (padding) rows give no NaN.


@pytest.mark.parametrize('backend,dtype,allowed,fused_first,want', [
    ('cpu', jnp.bfloat16, None, False, 'einsum'),
    ('gpu', jnp.bfloat16, None, False, 'cudnn'),
    ('gpu', jnp.float16, None, False, 'cudnn'),
    ('gpu', jnp.float32, None, False, 'xla'),  # cuDNN's fused attention takes no float32.
    ('gpu', jnp.bfloat16, {'einsum'}, False, 'einsum'),  # Shaw needs the probabilities.
    ('gpu', jnp.bfloat16, {'einsum', 'xla'}, False, 'xla'),  # The next preference it can run.
    # The kernel only for a scheme measured faster on it, and only where cuDNN would run.
    ('gpu', jnp.bfloat16, {'einsum', 'pallas'}, False, 'einsum'),
    ('gpu', jnp.bfloat16, None, True, 'pallas'),
    ('gpu', jnp.float16, {'einsum', 'cudnn', 'pallas'}, True, 'pallas'),
    ('gpu', jnp.bfloat16, {'einsum', 'xla', 'cudnn'}, True, 'cudnn'),  # A switch not on it.
    ('gpu', jnp.bfloat16, {'einsum', 'pallas'}, True, 'einsum'),  # Stick-breaking's kernels.
    ('gpu', jnp.float32, None, True, 'xla'),
    ('cpu', jnp.bfloat16, None, True, 'einsum'),
    ('tpu', jnp.bfloat16, None, True, 'xla'),
    ('tpu', jnp.bfloat16, None, False, 'xla'),
    ('tpu', jnp.bfloat16, {'einsum', 'cudnn'}, False, 'einsum'),
])
def test_auto_takes_the_backends_first_preference_the_layer_can_run(backend, dtype, allowed,
                                                                     fused_first, want):
  assert attention.resolve('auto', dtype=dtype, allowed=allowed, backend=backend,
                           fused_first=fused_first) == want
  assert attention.resolve('einsum', dtype=dtype, backend=backend,
                           fused_first=fused_first) == 'einsum'


def test_default_model_uses_the_resolved_implementation():
  cfg = test_config.get_config('shaw').model
  assert cfg.attention_impl == 'auto'
  model = models.create(cfg, seed=0)
  assert {b.attn.impl for b in model.blocks} == {'einsum'}  # On this CPU, and for Shaw anywhere.


@pytest.mark.parametrize('kind,attention_fields,want', [
    ('rope', {}, 'cudnn'),
    ('shaw', {}, 'einsum'),  # A value term.
    ('rope', {'dape': True}, 'einsum'),  # An option that only einsum runs.
    ('none', {'kind': 'stick_breaking'}, 'einsum'),  # Its kernels are forced, never chosen.
    # The fused bias kernel where it was measured faster than cuDNN with the bias materialised.
    ('alibi', {}, 'pallas'),
    ('fox', {}, 'pallas'),
    ('rope+fox', {}, 'pallas'),
    ('kerple', {}, 'cudnn'),  # Not measured: cuDNN stays.
    ('t5', {}, 'cudnn'),
    ('alibi', {'ssmax': True}, 'cudnn'),  # The kernel adds its bias unscaled.
    ('alibi', {'kind': 'stick_breaking'}, 'einsum'),  # Its kernels are forced, never chosen.
])
def test_on_a_gpu_auto_gives_each_layer_an_implementation_it_can_run(
    monkeypatch, kind, attention_fields, want):
  monkeypatch.setattr(jax, 'default_backend', lambda: 'gpu')
  cfg = test_config.get_config(kind).model
  cfg.update(dtype='bfloat16', d_model=64)  # Heads of 16, which the fused kernel takes.
  cfg.attention.update(attention_fields)
  model = models.create(cfg, seed=0)
  assert {b.attn.impl for b in model.blocks} == {want}
  # Decoding with a cache, which the kernel does not take, runs what auto chose before it.
  assert {b.attn.unfused_impl for b in model.blocks} == {'cudnn' if want == 'pallas' else want}


@pytest.mark.parametrize('d_model,want', [(64, 'pallas'), (128, 'pallas'), (32, 'cudnn'),
                                           (48, 'cudnn'), (96, 'cudnn')])
def test_on_a_gpu_auto_takes_the_fused_kernel_only_at_head_widths_triton_takes(
    monkeypatch, d_model, want):
  """Four heads of d_model / 4: the kernel where a head is a power of 2 and at least 16 wide
  (Triton's blocks), cuDNN for heads of 8, 12 and 24."""
  monkeypatch.setattr(jax, 'default_backend', lambda: 'gpu')
  cfg = test_config.get_config('alibi').model
  cfg.update(dtype='bfloat16', d_model=d_model, num_heads=4)
  model = models.create(cfg, seed=0)
  assert {b.attn.impl for b in model.blocks} == {want}


@pytest.mark.parametrize('kind,attention_fields', [('alibi', {}),
                                                    ('alibi', {'kind': 'stick_breaking'})])
def test_on_a_gpu_pallas_forced_at_a_head_width_triton_cannot_take_is_one_error(
    monkeypatch, kind, attention_fields):
  """attention_impl=pallas with heads of 12 (48 / 4) is refused as the model is built, naming
  the fields and the fix, instead of Triton failing to compile; heads of 16 are built."""
  monkeypatch.setattr(jax, 'default_backend', lambda: 'gpu')
  cfg = test_config.get_config(kind).model
  cfg.update(dtype='bfloat16', d_model=48, num_heads=4, attention_impl='pallas')
  cfg.attention.update(attention_fields)
  with pytest.raises(errors.ConfigError, match=r'model.attention_impl=pallas .* the heads are '
                     r'12 wide\. Fix: attention_impl=auto'):
    models.create(cfg, seed=0)
  cfg.update(d_model=64)
  assert {b.attn.impl for b in models.create(cfg, seed=0).blocks} == {'pallas'}


def test_on_a_gpu_without_the_hand_written_gradients_auto_keeps_cudnn(monkeypatch):
  """model.custom_gradients=False runs the fused kernel's plain form (the bias materialised),
  which was not what was timed faster."""
  monkeypatch.setattr(jax, 'default_backend', lambda: 'gpu')
  cfg = test_config.get_config('alibi').model
  cfg.update(dtype='bfloat16', d_model=64, custom_gradients=False)
  model = models.create(cfg, seed=0)
  assert {b.attn.impl for b in model.blocks} == {'cudnn'}


def test_on_a_gpu_auto_chooses_per_layer_in_a_hybrid(monkeypatch):
  """Each layer's own scheme decides: ALiBi's layers on the fused kernel, RoPE's on cuDNN."""
  monkeypatch.setattr(jax, 'default_backend', lambda: 'gpu')
  cfg = test_config.get_config('rope').model
  cfg.update(dtype='bfloat16', d_model=64, num_layers=3, layer_kinds=('alibi', 'rope', 'alibi'))
  model = models.create(cfg, seed=0)
  assert [b.attn.impl for b in model.blocks] == ['pallas', 'cudnn', 'pallas']


def test_attend_matches_numpy_softmax_attention():
  rng = np.random.default_rng(3)
  q, k, v = (rng.normal(size=(1, 4, 2, 8)) for _ in range(3))
  bias = rng.normal(size=(1, 2, 4, 4))
  mask = np.tril(np.ones((4, 4), bool))[None, None]
  out, _ = attention.attend(*(jnp.asarray(x, jnp.float32) for x in (q, k, v)), jnp.asarray(mask),
                            bias=jnp.asarray(bias, jnp.float32))
  logits = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(8) + bias
  logits = np.where(mask, logits, -np.inf)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  np.testing.assert_allclose(np.asarray(out), np.einsum('bhqk,bkhd->bqhd', probs, v), atol=1e-5)


def test_softmax_and_its_gradient_against_float64():
  rng = np.random.default_rng(6)
  x = rng.normal(size=(2, 3, 5, 7)) * 4
  x[0, 0, 0] = np.finfo(np.float32).min  # A fully masked row: uniform, finite.
  g = rng.normal(size=x.shape)
  p = np.exp(x - x.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  out, vjp = jax.vjp(attention.softmax, jnp.asarray(x, jnp.float32))
  np.testing.assert_allclose(np.asarray(out), p, atol=1e-6)
  (grad,) = vjp(jnp.asarray(g, jnp.float32))
  # d/dx_j sum_i g_i p_i = p_j (g_j - sum_i g_i p_i).
  np.testing.assert_allclose(np.asarray(grad), p * (g - (g * p).sum(-1, keepdims=True)),
                             atol=1e-5)


@pytest.mark.parametrize('blocks', [1, 2, 4])
@pytest.mark.parametrize('bias_shape', [None, (1, 2, 6, 6), (4, 2, 6, 6), (1, 1, 6, 6)])
def test_softmax_attention_and_its_gradients_against_float64(bias_shape, blocks):
  """The attention core, whole and in blocks of batch rows (rows i, i + n, .. per block)."""
  rng = np.random.default_rng(8)
  q, k, v, d_out = (rng.normal(size=(4, 6, 2, 4)) for _ in range(4))
  bias = None if bias_shape is None else rng.normal(size=bias_shape)
  seg = np.asarray([[1, 1, 1, 2, 0, 0], [1, 1, 1, 1, 1, 1],  # Padding: fully masked rows.
                    [1, 2, 2, 2, 2, 0], [1, 1, 2, 2, 3, 3]])
  mask = np.asarray(attention.make_mask(jnp.asarray(seg), jnp.asarray(seg), causal=True))
  # float64 reference: l = q k^T + bias, p = softmax over allowed keys, o = p v.
  logits = np.einsum('bqhd,bkhd->bhqk', q, k) + (0 if bias is None else bias)
  logits = np.where(mask, logits, -1e30)
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  o = np.einsum('bhqk,bkhd->bqhd', p, v)
  d_p = np.einsum('bqhd,bkhd->bhqk', d_out, v)
  d_l = np.where(mask, p * (d_p - (d_p * p).sum(-1, keepdims=True)), 0)
  want = {'q': np.einsum('bhqk,bkhd->bqhd', d_l, k), 'k': np.einsum('bhqk,bqhd->bkhd', d_l, q),
          'v': np.einsum('bhqk,bqhd->bkhd', p, d_out)}
  if bias is not None:
    want['bias'] = d_l.sum(axis=tuple(i for i, n in enumerate(bias_shape) if n == 1),
                           keepdims=True)
  f32 = lambda x: None if x is None else jnp.asarray(x, jnp.float32)
  block_bytes = 4 // blocks * (2 * 6 * 6 * 4)  # Rows per block x one row's float32 logits.
  assert attention.batch_blocks(4, 2 * 6 * 6 * 4, block_bytes) == blocks
  out, vjp = jax.vjp(lambda q, k, v, b: attention.blocked_softmax_attention(
      q, k, v, jnp.asarray(mask), b, block_bytes), f32(q), f32(k), f32(v), f32(bias))
  np.testing.assert_allclose(np.asarray(out), o, atol=1e-5)
  got = dict(zip(('q', 'k', 'v', 'bias'), vjp(f32(d_out))))
  for name, value in want.items():
    np.testing.assert_allclose(np.asarray(got[name]), value, atol=1e-4, err_msg=name)


@pytest.mark.parametrize('kv_heads', [1, 2])
@pytest.mark.parametrize('impl,probs,causal_block', [('einsum', False, 0), ('einsum', True, 0),
                                                     ('einsum', False, 2), ('xla', False, 0)])
def test_grouped_keys_attend_as_their_heads_repeated_with_summed_gradients(kv_heads, impl, probs,
                                                                           causal_block):
  """Keys and values of fewer heads than the queries (query head h reads key head
  h // (heads / kv_heads)) give the attention of those heads repeated, and each key or value
  head's gradient is the sum over its group's query heads (float64 formula), on every path
  `attend` runs: the hand-written backward, the probabilities, causal blocks and XLA's kernel."""
  rng = np.random.default_rng(9)
  heads = 4
  q, d_out = (rng.normal(size=(3, 6, heads, 4)) for _ in range(2))
  k, v = (rng.normal(size=(3, 6, kv_heads, 4)) for _ in range(2))
  bias = rng.normal(size=(3, heads, 6, 6))
  seg = np.asarray([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 1, 1], [1, 2, 2, 3, 3, 3]])
  mask = np.asarray(attention.make_mask(jnp.asarray(seg), jnp.asarray(seg), causal=True))
  rep = lambda x: np.repeat(x, heads // kv_heads, axis=2)
  group = lambda x: x.reshape(3, 6, kv_heads, heads // kv_heads, 4).sum(axis=3)
  logits = np.where(mask, np.einsum('bqhd,bkhd->bhqk', q, rep(k)) / 2 + bias, -1e30)
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  d_p = np.einsum('bqhd,bkhd->bhqk', d_out, rep(v))
  d_l = np.where(mask, p * (d_p - (d_p * p).sum(-1, keepdims=True)), 0) / 2
  want = {'out': np.einsum('bhqk,bkhd->bqhd', p, rep(v)),
          'q': np.einsum('bhqk,bkhd->bqhd', d_l, rep(k)),
          'k': group(np.einsum('bhqk,bqhd->bkhd', d_l, q)),
          'v': group(np.einsum('bhqk,bqhd->bkhd', p, d_out))}
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  out, vjp = jax.vjp(jax.jit(lambda q, k, v: attention.attend(
      q, k, v, jnp.asarray(mask), bias=f32(bias), impl=impl, return_probs=probs,
      causal_block=causal_block)[0]), f32(q), f32(k), f32(v))
  got = dict(zip(('q', 'k', 'v'), vjp(f32(d_out))), out=out)
  for name, value in want.items():
    np.testing.assert_allclose(np.asarray(got[name]), value, atol=1e-4, err_msg=name)


def test_batch_blocks_are_the_fewest_that_fit():
  assert attention.batch_blocks(8, 4 * 2**20, 16 * 2**20) == 2
  assert attention.batch_blocks(6, 10, 30) == 2  # Three rows of 10 bytes per block.
  assert attention.batch_blocks(5, 10, 30) == 5  # No divisor of 5 fits: a row per block.
  assert attention.batch_blocks(4, 100, 50) == 4  # A row larger than the budget: still one.
  assert attention.batch_blocks(8, 10, 16 * 2**20) == 1


@pytest.mark.parametrize('batch,blocks', [(16, 2), (8, 1)])
def test_blocks_of_a_sharded_batch_stay_on_their_devices(batch, blocks, eight_devices):
  """Eight devices holding 2 rows each (two blocks of one row per device: rows i, i + 2, ..) or
  1 row each (one block, though the whole batch would make 8): the same output as one device,
  and the compiled program moves nothing between devices."""
  mesh = jax.sharding.Mesh(np.asarray(eight_devices).reshape(8, 1, 1), sharding.AXES)
  rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec('data'))
  rng = np.random.default_rng(2)
  q, k, v = (jnp.asarray(rng.normal(size=(batch, 8, 2, 4)), jnp.float32) for _ in range(3))
  seg = jnp.asarray(rng.integers(1, 3, size=(batch, 8)))
  mask = attention.make_mask(seg, seg, causal=False)
  block_bytes = 2 * 8 * 8 * 4  # One row per block.
  assert attention.batch_blocks(batch // 8, block_bytes, block_bytes) == blocks
  f = jax.jit(lambda q, k, v, m: attention.blocked_softmax_attention(q, k, v, m, None,
                                                                     block_bytes))
  sharded = [jax.device_put(x, rows) for x in (q, k, v, mask)]
  with jax.set_mesh(mesh):
    got = f(*sharded)
    hlo = f.lower(*sharded).compile().as_text()
  np.testing.assert_allclose(np.asarray(got),
                             np.asarray(attention.softmax_attention(q, k, v, mask, None)),
                             atol=1e-6)
  for collective in ('all-gather', 'all-to-all', 'collective-permute', 'all-reduce'):
    assert collective not in hlo, collective


@pytest.mark.parametrize('segments,lengths,single', [
    ([[1, 1, 1, 0], [2, 2, 2, 2]], [3, 4], True),  # One document each, padding at the end.
    ([[1, 1, 2, 0], [1, 1, 1, 1]], [3, 4], False),  # Two documents in a row.
    ([[1, 0, 1, 0], [1, 1, 1, 1]], [2, 4], False),  # Padding inside a row.
    ([[0, 0, 0, 0], [1, 1, 1, 1]], [0, 4], False),  # A row of padding only.
])
def test_single_document_rows_against_hand_table(segments, lengths, single):
  got_lengths, got_single = attention.single_document_lengths(jnp.asarray(segments))
  np.testing.assert_array_equal(np.asarray(got_lengths), lengths)
  assert bool(got_single) == single


def numpy_attention(q, k, v, mask):
  """float64 softmax attention, [batch, L, heads, d] inputs, [batch, 1, L, L] mask."""
  logits = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(q.shape[-1])
  logits = np.where(mask, logits, -1e30)  # Fully masked (padding) rows: uniform, not NaN.
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  return np.einsum('bhqk,bkhd->bqhd', probs / probs.sum(-1, keepdims=True), v)


@pytest.mark.parametrize('causal,window,rows', [
    (True, 3, 'one document each'), (False, 0, 'one document each'), (True, 0, 'packed'),
    *[pytest.param(*case, marks=pytest.mark.slow) for case in (
        (True, 0, 'one document each'), (True, 3, 'packed'), (False, 0, 'packed'))]])
def test_fused_attention_with_segments_equals_float64_on_every_real_query(causal, window, rows,
                                                                          monkeypatch):
  """The lengths path (one document per row) and the mask path (packed rows) both give the
  float64 attention of the segment mask at every query that is not padding (the lengths path
  is cuDNN's; XLA runs it here, on the CPU)."""
  monkeypatch.setattr(attention, 'LENGTHS_PATH_IMPLS', ('xla', 'cudnn'))
  rng = np.random.default_rng(5)
  q, k, v = (rng.normal(size=(2, 8, 2, 4)) for _ in range(3))
  seg = np.asarray([[1] * 6 + [0] * 2, [3] * 8] if rows == 'one document each'
                   else [[1] * 3 + [2] * 3 + [0] * 2, [3] * 8])
  mask = np.asarray(attention.make_mask(jnp.asarray(seg), jnp.asarray(seg), causal=causal))
  if window:
    i = np.arange(8)
    mask = mask & (i[:, None] - i[None, :] < window)
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  out, _ = attention.attend(f32(q), f32(k), f32(v), jnp.asarray(mask), impl='xla',
                            segments=jnp.asarray(seg), causal=causal, window=window)
  real = seg > 0
  np.testing.assert_allclose(np.asarray(out)[real], numpy_attention(q, k, v, mask)[real],
                             atol=1e-5)


def test_fused_attention_chooses_the_lengths_path_at_run_time_without_a_bias(monkeypatch):
  """With segments and no bias, one program holds both paths (lax.cond on the rows' layout);
  without segments, or with a bias (whose cond would keep both paths' buffers), the mask. Only
  for the implementations whose kernels gain from the lengths (cuDNN): XLA gets the mask."""
  x = jnp.zeros((1, 4, 1, 4))
  seg = jnp.ones((1, 4), jnp.int32)
  mask = attention.make_mask(seg, seg, causal=True)
  run = lambda s=None, b=None: attention.attend(x, x, x, mask, bias=b, impl='xla', segments=s,
                                                causal=True)[0]
  # A fresh function each time: make_jaxpr caches its trace per function.
  assert 'cond' not in str(jax.make_jaxpr(lambda s: run(s))(seg))
  monkeypatch.setattr(attention, 'LENGTHS_PATH_IMPLS', ('xla', 'cudnn'))
  assert 'cond' in str(jax.make_jaxpr(run)(seg))
  assert 'cond' not in str(jax.make_jaxpr(run)())
  assert 'cond' not in str(jax.make_jaxpr(run)(seg, jnp.zeros((1, 1, 4, 4))))
