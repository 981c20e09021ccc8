"""On an NVIDIA GPU: the paths no XLA:CPU run compiles, against the einsum path and against the
same model on the CPU.

  JAX_PLATFORMS=cuda,cpu python -m pytest -m gpu -n 6 --dist load tests/test_gpu.py

(scripts/gpu_checks.sh runs these with the rest of the GPU checks). Skipped where JAX sees no GPU,
which is every default run: tests/conftest.py selects the CPU unless JAX_PLATFORMS says otherwise.

Float32 comparisons run at matmul precision 'highest': XLA:GPU lets float32 matmuls use TF32
(a 10-bit mantissa, about 1e-3 relative) on Ampere and later, which would hide the differences
looked for here. A bfloat16 result is judged by its error against the float32 result of the
einsum path: a fused kernel's error may be at most twice the einsum path's own in bfloat16.
"""

import jax
import jax.numpy as jnp
import kinds
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import loop
from roformer import metrics
from roformer import models
from roformer import positions
from roformer.positions import rotary
from roformer.positions import scaling


def _gpus():
  try:
    return jax.devices('gpu')
  except RuntimeError:
    return []


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _gpus(), reason='needs a GPU')]

KINDS = kinds.WITH_COMBINED
# Attention kinds beside softmax, and a hybrid layout (RoPE, then no positions, with a window).
VARIANTS = {
    'stick_breaking': {'attention': {'kind': 'stick_breaking'}},
    'favor+rope': {'attention': {'kind': 'favor'}},
    'rope,none+window': {'layer_kinds': ('rope', 'none'), 'layer_windows': (4, 0)},
}


def _config(kind='rope', dtype='float32', impl='einsum', **model):
  cfg = kinds.tiny_config(kind, d_model=64, num_heads=4, d_ff=128, dropout=0.0, dtype=dtype,
                          attention_impl=impl).model
  if kind == 'learned':
    cfg.position.learned.max_length = 64
  for name, value in model.items():
    if isinstance(value, dict):
      cfg[name].update(value)
    else:
      cfg[name] = value
  return cfg


def _batch(length=10, seed=2, packed=True):
  """Two rows of two packed documents (or of one, with `packed=False`: cuDNN's path with
  sequence lengths) and two padding slots; the loss weights are random on the documents'
  tokens and zero on padding (whose outputs no implementation defines alike)."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(5, 50, (2, length))
  first = length * 3 // 5 if packed else length - 2
  pos = np.tile(np.r_[np.arange(first), np.arange(length - first - 2), [0, 0]], (2, 1))
  seg = np.tile([1] * first + [2] * (length - first - 2) + [0, 0], (2, 1))
  weights = rng.normal(size=(2, length, 50)) * (seg > 0)[..., None]
  return tokens, pos, seg, weights.astype(np.float32)


def _forward_and_grads(cfg, batch, device):
  """Logits (float32) and the gradient of sum(logits * weights) with respect to every
  parameter, for the model `cfg` builds from seed 3, computed on `device`."""
  model = kinds.visible_positions(models.create(cfg, seed=3))
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def loss(params, rest, tokens, pos, seg, weights):
    logits = nnx.merge(graphdef, params, rest)(tokens, pos, seg).astype(jnp.float32)
    return jnp.sum(logits * weights), logits

  args = jax.device_put((params, rest) + tuple(jnp.asarray(a) for a in batch), device)
  with jax.default_matmul_precision('highest'):
    (_, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(*args)
  flat = np.concatenate([np.ravel(np.asarray(g, np.float64)) for g in jax.tree.leaves(grads)])
  return np.asarray(logits, np.float64), flat


def _relative(a, b, mask=None):
  """||a - b|| / ||b|| over the entries `mask` keeps."""
  if mask is not None:
    a, b = a[mask], b[mask]
  return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.mark.parametrize('kind', KINDS + tuple(VARIANTS))
def test_every_scheme_on_the_gpu_equals_the_cpu(kind):
  """Forward and gradient in float32 on the GPU equal XLA:CPU's (einsum path)."""
  scheme, extra = (kind, {}) if kind in KINDS else ('rope', VARIANTS[kind])
  cfg, batch = _config(scheme, **extra), _batch()
  keep = batch[2] > 0
  gpu_logits, gpu_grads = _forward_and_grads(cfg, batch, _gpus()[0])
  cpu_logits, cpu_grads = _forward_and_grads(cfg, batch, jax.devices('cpu')[0])
  assert _relative(gpu_logits, cpu_logits, keep) < 1e-5
  assert _relative(gpu_grads, cpu_grads) < 1e-4


@pytest.mark.parametrize('packed', [True, False], ids=['packed', 'one_document_per_row'])
@pytest.mark.parametrize('kind', KINDS + ('rope,none+window',))
def test_fused_attention_follows_the_einsum_path(kind, packed):
  """'xla' in float32 equals einsum; 'xla' and 'cudnn' in bfloat16 are off the float32 result
  by at most twice the einsum path's bfloat16 error (forward and gradient), for every kind
  whose attention they can run, with the mask (packed rows) and, for cuDNN, with sequence lengths
  in its causal mode (one document per row)."""
  scheme, extra = (kind, {}) if kind in KINDS else ('rope', VARIANTS[kind])
  impls = [i for i in positions.capabilities(scheme).implementations if i != 'einsum']
  if not impls:
    pytest.skip(f'{kind} runs on the einsum path only')
  batch, gpu = _batch(packed=packed), _gpus()[0]
  keep = batch[2] > 0
  ref_logits, ref_grads = _forward_and_grads(_config(scheme, **extra), batch, gpu)
  xla_logits, xla_grads = _forward_and_grads(_config(scheme, impl='xla', **extra), batch, gpu)
  assert _relative(xla_logits, ref_logits, keep) < 1e-5
  assert _relative(xla_grads, ref_grads) < 1e-4
  ein_logits, ein_grads = _forward_and_grads(_config(scheme, 'bfloat16', **extra), batch, gpu)
  floor_logits = _relative(ein_logits, ref_logits, keep)
  floor_grads = _relative(ein_grads, ref_grads)
  assert 0 < floor_logits < 0.05 and 0 < floor_grads < 0.1  # bfloat16 did run.
  for impl in impls:
    logits, grads = _forward_and_grads(_config(scheme, 'bfloat16', impl, **extra), batch, gpu)
    assert _relative(logits, ref_logits, keep) <= 2 * floor_logits + 1e-3, impl
    assert _relative(grads, ref_grads) <= 2 * floor_grads + 1e-3, impl


def test_auto_picks_cudnn_in_bfloat16_on_the_gpu():
  model = models.create(_config('rope', 'bfloat16', 'auto'), seed=0)
  assert {b.attn.impl for b in model.blocks} == {'cudnn'}
  model = models.create(_config('rope', 'float32', 'auto'), seed=0)
  assert {b.attn.impl for b in model.blocks} == {'xla'}
  # ALiBi's bias on the fused kernel, timed faster there than materialised for cuDNN.
  model = models.create(_config('alibi', 'bfloat16', 'auto'), seed=0)
  assert {b.attn.impl for b in model.blocks} == {'pallas'}


@pytest.mark.parametrize('kind', KINDS + tuple(VARIANTS))
def test_decoding_with_the_cache_equals_the_full_pass_on_the_gpu(kind):
  scheme, extra = (kind, {}) if kind in KINDS else ('rope', VARIANTS[kind])
  model = kinds.visible_positions(models.create(_config(scheme, **extra), seed=5))
  tokens = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 9)))
  with jax.default_matmul_precision('highest'):
    kinds.assert_decoding_equals_full_pass(model, tokens, (4, 1, 1, 1, 2))


@pytest.mark.parametrize('impl', ['einsum', 'cudnn'])
def test_bfloat16_decoding_stays_within_the_full_pass_error(impl):
  """In bfloat16 the cache and the full pass round differently: decoding's logits are off the
  float32 full pass by at most twice what the bfloat16 full pass is."""
  tokens = jnp.asarray(np.random.default_rng(1).integers(5, 50, (2, 12)))
  pos = jnp.broadcast_to(jnp.arange(12), (2, 12))
  ones = jnp.ones_like(tokens)
  f32 = models.create(_config('rope'), seed=5)
  bf16 = models.create(_config('rope', 'bfloat16', impl), seed=5)
  with jax.default_matmul_precision('highest'):
    ref = np.asarray(nnx.jit(lambda m: m(tokens, pos, ones))(f32), np.float64)
    full = np.asarray(nnx.jit(lambda m: m(tokens, pos, ones))(bf16).astype(jnp.float32))
    cache, steps = bf16.init_cache(2, 16), []
    step = nnx.jit(lambda m, t, p, c: m.decode(t, p, c))
    for start, size in ((0, 6), (6, 1), (7, 1), (8, 4)):
      logits, cache = step(bf16, tokens[:, start:start + size], pos[:, start:start + size], cache)
      steps.append(np.asarray(logits.astype(jnp.float32)))
  decoded = np.concatenate(steps, axis=1)
  assert _relative(decoded, ref) <= 2 * _relative(full, ref) + 1e-3


def test_block_skipping_and_the_chunked_loss_change_nothing_on_the_gpu():
  """Causal blocks (rows of 16 of 64) give the whole matrix's logits and gradients."""
  batch = _batch(length=64, seed=4)
  gpu = _gpus()[0]
  whole = _forward_and_grads(_config('rope', causal_block=0), batch, gpu)
  blocks = _forward_and_grads(_config('rope', causal_block=16), batch, gpu)
  keep = batch[2] > 0
  assert _relative(blocks[0], whole[0], keep) < 1e-6
  assert _relative(blocks[1], whole[1]) < 1e-5


def test_rope_in_bfloat16_at_32k_positions_against_float64():
  """Angles in float32, the rotation in float32, rounded to bfloat16 once: at positions up to
  32,768 the rotated vectors stay within bfloat16's own rounding plus float32's angle error
  (2^-8 relative at most, and position x 2^-24 radians)."""
  rng = np.random.default_rng(0)
  length, d = 32768, 128
  x = jnp.asarray(rng.normal(size=(1, length, 1, d)), jnp.bfloat16)
  pos = jnp.arange(length)[None]
  got = np.asarray(jax.jit(rotary.apply_rotary)(x, pos).astype(jnp.float32), np.float64)[0, :, 0]
  x64 = np.asarray(x.astype(jnp.float32), np.float64)[0, :, 0]
  theta = np.asarray(scaling.rope_frequencies(d, 10000.0), np.float64)
  angles = np.arange(length)[:, None] * theta[None]
  c, s = np.cos(angles), np.sin(angles)
  want = np.empty_like(x64)
  want[:, 0::2] = x64[:, 0::2] * c - x64[:, 1::2] * s
  want[:, 1::2] = x64[:, 1::2] * c + x64[:, 0::2] * s
  pair = np.hypot(x64[:, 0::2], x64[:, 1::2]).repeat(2, axis=1)
  err = np.abs(got - want) / np.maximum(pair, 1e-3)
  bound = 2.0 ** -8 + np.arange(length)[:, None] * 2.0 ** -24 * 2
  assert (err <= bound).all(), float((err / bound).max())


def test_training_resumes_on_the_gpu_as_if_never_stopped(tmp_path, data_dir):
  """The donated train state on the GPU: 3 steps, stop, the same command again, equals 8
  uninterrupted steps."""
  def config():
    cfg = test_config.get_config('rope')
    cfg.data.data_dir = data_dir
    cfg.model.dropout = 0.1
    cfg.train.update(steps=8, eval_every=4, checkpoint_every=4)
    return cfg

  def losses(workdir):
    records = [r for r in metrics.read_jsonl(str(workdir / 'metrics.jsonl'))
               if r['split'] == 'train']
    steps = [r['step'] for r in records]
    assert len(steps) == len(set(steps)), steps  # Each step logged once: none trained twice.
    return {r['step']: r['loss'] for r in records}

  loop.train_and_evaluate(config(), str(tmp_path / 'straight'))
  loop.train_and_evaluate(config(), str(tmp_path / 'resumed'), stop_at=3)
  assert sorted(losses(tmp_path / 'resumed')) == [1, 2, 3]  # Stopped there...
  loop.train_and_evaluate(config(), str(tmp_path / 'resumed'))  # ...and resumed, not restarted.
  straight, resumed = losses(tmp_path / 'straight'), losses(tmp_path / 'resumed')
  assert sorted(resumed) == sorted(straight) == list(range(1, 9))
  np.testing.assert_allclose([resumed[s] for s in range(4, 9)],
                             [straight[s] for s in range(4, 9)], rtol=1e-5)


@pytest.mark.parametrize('kind,attention', [
    ('alibi', 'softmax'), ('kerple', 'softmax'), ('rope+fox', 'softmax'),
    ('none', 'stick_breaking'), ('alibi', 'stick_breaking')])
def test_the_fused_kernels_compile_on_the_gpu_to_the_einsum_paths_numbers(kind, attention):
  """attention_impl='pallas' through Triton (not interpret mode), the fused bias kernel and
  stick-breaking's, with grouped key/value heads, on two rows of 200 tokens (two documents;
  blocks of 64, padded): in float32 (matmuls at 'highest', the kernels' too) the logits and
  gradients equal the einsum path's; in bfloat16 they are off the float32 result by at most
  twice the einsum path's own bfloat16 error."""
  rng = np.random.default_rng(0)
  length, first = 200, 120
  tokens = rng.integers(5, 50, (2, length))
  pos = np.tile(np.r_[np.arange(first), np.arange(length - first)], (2, 1))
  seg = np.tile(np.r_[np.ones(first), 2 * np.ones(length - first)], (2, 1)).astype(np.int32)
  batch = (tokens, pos, seg, rng.normal(size=(2, length, 50)).astype(np.float32))
  gpu = _gpus()[0]

  def run(dtype, impl):
    return _forward_and_grads(_config(kind, dtype, impl, num_kv_heads=2,
                                      attention={'kind': attention}), batch, gpu)
  ref_logits, ref_grads = run('float32', 'einsum')
  logits, grads = run('float32', 'pallas')
  assert _relative(logits, ref_logits) < 1e-5
  assert _relative(grads, ref_grads) < 1e-4
  ein_logits, ein_grads = run('bfloat16', 'einsum')
  floor_logits, floor_grads = _relative(ein_logits, ref_logits), _relative(ein_grads, ref_grads)
  assert 0 < floor_logits < 0.05 and 0 < floor_grads < 0.1  # bfloat16 did run.
  logits, grads = run('bfloat16', 'pallas')
  assert _relative(logits, ref_logits) <= 2 * floor_logits + 1e-3
  assert _relative(grads, ref_grads) <= 2 * floor_grads + 1e-3
