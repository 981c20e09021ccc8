"""Stick-breaking attention's Pallas kernels (roformer/fused_stick_breaking.py), run in Pallas'
interpret mode: the output against the paper's products in float64 numpy, the gradients (inputs,
a bias's parameters, per-position values) against autodiff of the einsum path's weights, bfloat16
within bfloat16's error, and a model on attention_impl='pallas' against the same model on the
einsum path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roformer import attention
from roformer import autodiff
from roformer import fused_bias as fb
from roformer import fused_stick_breaking as fsb
from roformer.positions import bias as bias_lib
from tests import kinds

B, L, H, D = 2, 21, 2, 8  # 21: padded to 24 for blocks of 8, three key blocks.
RNG = np.random.default_rng(3)
Q, K, V, W = (RNG.normal(size=(B, L, H, D)).astype(np.float32) for _ in range(4))
POS = np.stack([np.arange(L), np.r_[np.arange(9), np.arange(12)]]).astype(np.int32)
SEG = np.stack([np.ones(L), np.r_[np.ones(9), 2 * np.ones(10), np.zeros(2)]]).astype(np.int32)
SLOPES = np.array([[0.5], [0.125]], np.float32)
ROW = RNG.normal(size=(B, H, L)).astype(np.float32)
COL = RNG.normal(size=(B, H, L)).astype(np.float32)
BIASES = {'none': fb.NONE, 'alibi': bias_lib.ALIBI_FUSED, 'separable': fb.SEPARABLE}


def bias_of(name, params, row, col, xp):
  """[b, h, q, k] (or a scalar): the bias by its formula."""
  d = xp.asarray(POS[:, :, None] - POS[:, None, :], xp.float32)
  if name == 'alibi':
    return -params[None, :, 0, None, None] * xp.abs(d)[:, None]
  if name == 'separable':
    return row[..., :, None] - col[..., None, :]
  return 0.0


def visible(attend_current, window):
  """[b, 1, q, k]: the keys each query may take (same segment, earlier or itself, in the
  window)."""
  slots = np.arange(L)
  mask = (SEG[:, :, None] == SEG[:, None, :]) & (SEG[:, :, None] > 0)
  mask &= (slots[:, None] >= slots[None, :]) if attend_current else (
      slots[:, None] > slots[None, :])
  if window:
    mask &= slots[None, :] > slots[:, None] - window
  return mask[:, None]


def numpy_attention(name, attend_current, window):
  """sum_j W_ij v_j with W_ij = beta_ij prod_{j<l, l taken} (1 - beta_il): the products term
  by term, float64."""
  q, k, v = (np.swapaxes(x, 1, 2).astype(np.float64) for x in (Q, K, V))
  z = q @ np.swapaxes(k, 2, 3) / np.sqrt(D) + bias_of(name, SLOPES.astype(np.float64), ROW, COL,
                                                      np)
  beta = 1.0 / (1.0 + np.exp(-z))
  mask = np.broadcast_to(visible(attend_current, window), z.shape)
  weights = np.zeros_like(z)
  for j in range(L):
    rest = np.prod(np.where(mask[..., j + 1:], 1.0 - beta[..., j + 1:], 1.0), axis=-1)
    weights[..., j] = np.where(mask[..., j], beta[..., j] * rest, 0.0)
  return np.swapaxes(weights @ v, 1, 2)


def einsum_path(q, k, v, params, row, col, name, attend_current, window):
  """The einsum path's weights (attention.stick_breaking_weights) in jnp, for autodiff."""
  qh, kh, vh = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))
  z = qh @ jnp.swapaxes(kh, 2, 3) / np.sqrt(D) + bias_of(name, params, row, col, jnp)
  mask = attention.make_mask(jnp.asarray(SEG), jnp.asarray(SEG), causal=False)
  if window:
    mask &= attention.window_mask(jnp.arange(L), L, window)
  return jnp.swapaxes(attention.stick_breaking_weights(z, attend_current, mask) @ vh, 1, 2)


def fused(q, k, v, params, row, col, name, attend_current, window, **kw):
  separable = name == 'separable'
  return fsb.attend(q, k, v, jnp.asarray(POS), jnp.asarray(SEG), BIASES[name],
                    params=params if name == 'alibi' else None,
                    row=row if separable else None, col=col if separable else None,
                    attend_current=attend_current, window=window, block_q=8, block_k=8, **kw)


CASES = [('none', False, 0), ('none', True, 0), ('alibi', False, 5), ('separable', True, 6)]


@pytest.mark.parametrize('name,attend_current,window', CASES)
def test_the_output_is_the_papers_products(name, attend_current, window):
  """Every query, padding and a segment's first token (which take no key: 0) included."""
  got = np.asarray(fused(Q, K, V, SLOPES, ROW, COL, name, attend_current, window))
  np.testing.assert_allclose(got, numpy_attention(name, attend_current, window), rtol=1e-5,
                             atol=2e-6)


# The two biases' gradients by default (the tiles without one are the same code); all -m slow.
@pytest.mark.parametrize('name,attend_current,window', [
    pytest.param(*CASES[1], marks=pytest.mark.slow), *CASES[2:]])
def test_the_gradients_are_autodiffs_of_the_einsum_paths_weights(name, attend_current, window):
  """Of q, k, v, the bias's per-head parameters and the per-position row and column values."""
  weight = jnp.asarray(W)
  argnums = (0, 1, 2) + {'alibi': (3,), 'separable': (4, 5)}.get(name, ())
  loss = lambda f: lambda *a: jnp.sum(f(*a, name, attend_current, window) * weight)
  args = tuple(jnp.asarray(x) for x in (Q, K, V, SLOPES, ROW, COL))
  got = jax.grad(loss(fused), argnums)(*args)
  want = jax.grad(loss(einsum_path), argnums)(*args)
  for g, w in zip(got, want):
    scale = float(np.max(np.abs(np.asarray(w))))
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=2e-5 * max(scale, 1.0))


def test_long_rows_of_large_logits_keep_the_gradients_of_float64():
  """512 keys, every logit raised by 10 (each query takes nearly all of its stick from its
  nearest keys): the backward never subtracts the rows' large sums of log(1 - beta), so the
  gradients stay within float32's rounding of the float64 ones (the paper's weights, and dz by
  its formula, in numpy), where the einsum path's own error is about 1e-4."""
  length, dim, shift = 512, 16, 10.0
  rng = np.random.default_rng(5)
  q, k, v, w = (rng.normal(size=(1, length, 1, dim)) for _ in range(4))
  positions, segments = jnp.arange(length)[None], jnp.ones((1, length), jnp.int32)
  row = jnp.full((1, 1, length), shift, jnp.float32)
  f = lambda q, k, v: fsb.attend(q, k, v, positions, segments, fb.SEPARABLE, row=row,
                                 col=jnp.zeros_like(row))
  got = jax.grad(lambda *a: jnp.sum(f(*a) * jnp.asarray(w, jnp.float32)), (0, 1, 2))(
      *(jnp.asarray(x, jnp.float32) for x in (q, k, v)))
  z = q[0, :, 0] @ k[0, :, 0].T / np.sqrt(dim) + shift
  taken = np.tril(np.ones((length, length), bool), -1)
  r = np.where(taken, -np.logaddexp(0.0, z), 0.0)  # log(1 - beta)
  later = np.cumsum(r[:, ::-1], axis=1)[:, ::-1] - r
  weights = np.where(taken, np.exp(-np.logaddexp(0.0, -z) + later), 0.0)
  g = w[0, :, 0] @ v[0, :, 0].T
  gw = g * weights
  earlier = np.cumsum(gw, axis=1) - gw
  sigmoid = lambda x: 0.5 * (1.0 + np.tanh(0.5 * x))
  dz = np.where(taken, sigmoid(-z) * gw - sigmoid(z) * earlier, 0.0) / np.sqrt(dim)
  want = (dz @ k[0, :, 0], dz.T @ q[0, :, 0], weights.T @ w[0, :, 0])
  for name, a, b in zip('qkv', got, want):
    np.testing.assert_allclose(np.asarray(a)[0, :, 0], b, atol=1e-5 * np.abs(b).max(),
                               err_msg=name)


def test_bfloat16_inputs_stay_within_bfloat16s_error():
  args = [jnp.asarray(x, jnp.bfloat16) for x in (Q, K, V)]
  got = np.asarray(fused(*args, SLOPES, ROW, COL, 'alibi', False, 0), np.float32)
  np.testing.assert_allclose(got, numpy_attention('alibi', False, 0), atol=4e-2)


def test_without_custom_gradients_the_plain_formulation_runs_forward_mode_too():
  """model.custom_gradients=False: the materialised weights, which jax.jvp can follow, with
  the kernel's outputs and the einsum path's directional derivative (along a drawn one)."""
  args = (jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V))
  direction = jnp.asarray(np.random.default_rng(5).normal(size=Q.shape), jnp.float32)
  f = lambda q: fused(q, *args[1:], SLOPES, ROW, COL, 'alibi', False, 5)
  formula = lambda q: einsum_path(q, *args[1:], SLOPES, ROW, COL, 'alibi', False, 5)
  with autodiff.use(False):
    out, tangent = jax.jvp(f, (args[0],), (direction,))
  np.testing.assert_allclose(np.asarray(out), np.asarray(f(args[0])), atol=1e-5)
  _, want = jax.jvp(formula, (args[0],), (direction,))
  np.testing.assert_allclose(np.asarray(tangent), np.asarray(want),
                             atol=1e-5 * np.abs(np.asarray(want)).max())


TOKENS = jnp.asarray(RNG.integers(5, 50, (2, 12)), jnp.int32)
MODEL_POS = jnp.asarray([list(range(12)), list(range(5)) + list(range(7))], jnp.int32)
MODEL_SEG = jnp.asarray([[1] * 12, [1] * 5 + [2] * 7], jnp.int32)


@pytest.mark.parametrize('kind,fields', [
    ('none', {'num_kv_heads': 2, 'attention.attend_current': True}),  # The paper's: no positions.
    pytest.param('alibi', {'layer_windows': (4, 0)}, marks=pytest.mark.slow),
    pytest.param('fox', {}, marks=pytest.mark.slow)])
def test_a_model_on_the_kernels_has_the_einsum_paths_outputs_and_gradients(kind, fields):
  """attention.kind='stick_breaking' with attention_impl='pallas': each layer's bias from its
  scheme's `fused_bias` hook; the loss's gradient reaches every parameter as on the einsum
  path."""
  cfg = kinds.tiny_config(kind, num_layers=1).model
  cfg.attention.kind = 'stick_breaking'
  kinds.set_fields(cfg, fields)
  kinds.assert_implementations_agree(cfg, TOKENS, MODEL_POS, MODEL_SEG)


@pytest.mark.parametrize('bias', [  # The biases' tiles lower as the fused bias kernel's do.
    fb.NONE, pytest.param(bias_lib.ALIBI_FUSED, marks=pytest.mark.slow),
    pytest.param(fb.SEPARABLE, marks=pytest.mark.slow)])
def test_the_kernels_lower_for_a_gpu_through_triton(bias):
  """Lowered for CUDA from the CPU (jax.export), at three key blocks (the carried prefixes'
  blocks are then not a power of 2 long): the forward and both backward kernels go through
  Triton."""
  kinds.assert_lowers_for_cuda(fsb.attend, bias, 192)
