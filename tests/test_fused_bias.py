"""The fused bias attention (roformer/fused_bias.py), run in Pallas' interpret mode: its outputs
against a float64 numpy formula, its gradients (inputs, the bias's parameters, the per-position
values) against autodiff of a formula written here, bfloat16 within bfloat16's error, and the
key blocks its loops visit by hand."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import test as test_config
from roformer import autodiff
from roformer import errors
from roformer import fused_bias as fb
from roformer import models
from roformer import positions
from roformer import resolve
from roformer.positions import bias as bias_lib
from tests import kinds

B, L, H, D = 2, 21, 2, 8  # 21: padded to 24 for blocks of 8.
RNG = np.random.default_rng(0)
Q, K, V, W = (RNG.normal(size=(B, L, H, D)).astype(np.float32) for _ in range(4))
POS = np.stack([np.arange(L), np.r_[np.arange(9), np.arange(12)]]).astype(np.int32)
SEG = np.stack([np.ones(L), np.r_[np.ones(9), 2 * np.ones(10), np.zeros(2)]]).astype(np.int32)
PARAMS = {'alibi': np.array([[0.5], [0.125]], np.float32),
          'kerple_log': np.array([[0.8, 0.3], [0.2, 1.5]], np.float32),
          'kerple_power': np.array([[0.8, 0.3], [0.2, 1.5]], np.float32),
          't5': RNG.normal(size=(H, 8)).astype(np.float32),
          # FIRE's MLP (1 -> 4 -> heads), c and the threshold's multiplier (L = 6 x it).
          'fire': {'hidden_kernel': RNG.normal(size=(1, 4)).astype(np.float32),
                   'hidden_bias': RNG.normal(size=(4,)).astype(np.float32),
                   'out_kernel': RNG.normal(size=(4, H)).astype(np.float32),
                   'out_bias': RNG.normal(size=(H,)).astype(np.float32),
                   'c': np.float32(0.7), 'threshold_multiplier': np.float32(1.5)},
          'separable': None}
FIRE_THRESHOLD = 6.0
ROW = RNG.normal(size=(B, H, L)).astype(np.float32)
COL = RNG.normal(size=(B, H, L)).astype(np.float32)

def t5_bucket(query_minus_key, bidirectional: bool, num_buckets: int = 8, max_distance: int = 12):
  """T5's buckets (Raffel et al. 2020, its reference code), in numpy: exact below half the
  buckets of a side, logarithmic up to max_distance, the sign a bit when bidirectional."""
  n = np.asarray(query_minus_key, np.int64)
  out = np.zeros_like(n)
  if bidirectional:
    num_buckets //= 2
    out += (n < 0) * num_buckets
    n = np.abs(n)
  else:
    n = np.maximum(n, 0)
  exact = num_buckets // 2
  with np.errstate(divide='ignore'):
    large = exact + (np.log(np.maximum(n, 1) / exact) / np.log(max_distance / exact)
                     * (num_buckets - exact)).astype(np.int64)
  return out + np.where(n < exact, n, np.minimum(large, num_buckets - 1))


class _Buckets:
  """The bucket function the kernel receives (hashable, as a scheme's is)."""

  def __init__(self, bidirectional):
    self.bidirectional = bidirectional

  def __call__(self, d):
    from roformer.positions import bias  # pylint: disable=import-outside-toplevel
    return bias.t5_buckets(-jnp.round(d).astype(jnp.int32), bidirectional=self.bidirectional,
                           num_buckets=8, max_distance=12)


T5_CAUSAL, T5_BOTH = _Buckets(False), _Buckets(True)
BIASES = {'alibi': bias_lib.ALIBI_FUSED, 'kerple_log': bias_lib.KERPLE_FUSED['log'],
          'kerple_power': bias_lib.KERPLE_FUSED['power'],
          'separable': fb.SEPARABLE, 't5': None, 'fire': None}


def bias_of(name, d, params, row, col, xp, causal=True):
  """[b, h, q, k]: the scheme's bias by its formula (d: [b, q, k] distances)."""
  if name == 'alibi':
    return -params[None, :, 0, None, None] * xp.abs(d)[:, None]
  if name == 'kerple_log':
    return -params[None, :, 0, None, None] * xp.log1p(params[None, :, 1, None, None]
                                                      * xp.abs(d)[:, None])
  if name == 'fire':  # Its MLP on every pair: f(log(1 + c|d|) / (log(1 + c max(i, L)) + eps)).
    c = xp.abs(params['c'])
    threshold = xp.abs(params['threshold_multiplier'] * FIRE_THRESHOLD)
    q_pos = xp.asarray(POS, np.float32)[:, :, None]
    x = xp.log1p(c * xp.abs(d)) / (xp.log1p(c * xp.maximum(q_pos, threshold)) + 1e-6)
    hidden = xp.maximum(x[..., None] * params['hidden_kernel'][0] + params['hidden_bias'], 0)
    return xp.moveaxis(hidden @ params['out_kernel'] + params['out_bias'], -1, 1)
  if name == 't5':
    buckets = t5_bucket(np.asarray(d), not causal)
    return np.moveaxis(params.T[buckets], -1, 1) if xp is np else jnp.moveaxis(
        params.T[jnp.asarray(buckets)], -1, 1)
  if name == 'kerple_power':  # |d|^r2, 0 at d = 0.
    a = xp.abs(d)[:, None]
    power = xp.where(a > 0, xp.power(xp.where(a > 0, a, 1.0), params[None, :, 1, None, None]),
                     0.0)
    return -params[None, :, 0, None, None] * power
  return row[..., :, None] - col[..., None, :]


def mask_of(causal, window):
  slots = np.arange(L)
  mask = (SEG[:, :, None] == SEG[:, None, :]) & (SEG[:, :, None] > 0)
  if causal:
    mask &= slots[:, None] >= slots[None, :]
  if window:
    mask &= slots[None, :] > slots[:, None] - window
  return mask[:, None]


def numpy_attention(name, causal, window):
  q, k, v = (np.swapaxes(x, 1, 2).astype(np.float64) for x in (Q, K, V))
  d = (POS[:, :, None] - POS[:, None, :]).astype(np.float64)
  params = PARAMS[name]
  if isinstance(params, dict):
    params = {k: np.float64(v) if np.ndim(v) == 0 else v.astype(np.float64)
              for k, v in params.items()}
  elif params is not None:
    params = params.astype(np.float64)
  s = q @ np.swapaxes(k, 2, 3) / np.sqrt(D) + bias_of(name, d, params, ROW, COL, np, causal)
  mask = mask_of(causal, window)
  s = np.where(mask, s, -np.inf)
  with np.errstate(invalid='ignore'):  # A padding row has no key: its output is not defined.
    p = np.exp(s - s.max(-1, keepdims=True))
    p = np.where(mask, p / p.sum(-1, keepdims=True), 0.0)
  return np.swapaxes(np.nan_to_num(p) @ v, 1, 2)


def jax_attention(q, k, v, params, row, col, name, causal, window):
  """The same formula in jnp, for autodiff."""
  qh, kh, vh = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))
  d = jnp.asarray(POS[:, :, None] - POS[:, None, :], jnp.float32)
  s = qh @ jnp.swapaxes(kh, 2, 3) / np.sqrt(D) + bias_of(name, d, params, row, col, jnp,
                                                         causal)
  mask = jnp.asarray(mask_of(causal, window))
  p = jnp.where(mask, jax.nn.softmax(jnp.where(mask, s, -1e30), axis=-1), 0.0)
  return jnp.swapaxes(p @ vh, 1, 2)


def bias_kind(name, causal):
  if name == 't5':
    return fb.bucketed(T5_CAUSAL if causal else T5_BOTH, 8)
  return BIASES[name]


def fused(q, k, v, params, row, col, name, causal, window, **kw):
  separable = BIASES[name] is not None and BIASES[name].separable
  bias = bias_kind(name, causal)
  if name == 'fire':  # What the FIRE layer hands the kernel, from its MLP's arrays.
    layer = types.SimpleNamespace(arrays=lambda ctx: params, init_threshold=FIRE_THRESHOLD)
    bias, params, _, _ = bias_lib._FireLayer.fused_bias(  # pylint: disable=protected-access
        layer, None, None)
  return fb.attend(q, k, v, jnp.asarray(POS), jnp.asarray(SEG), bias,
                   params=params, row=row if separable else None,
                   col=col if separable else None, causal=causal, window=window, block_q=8,
                   block_k=8, **kw)


CASES = [('alibi', True, 0), ('alibi', True, 5), ('kerple_log', True, 0),
         ('kerple_log', False, 0), ('kerple_power', True, 0), ('t5', True, 0), ('t5', False, 0),
         ('fire', True, 0), ('fire', True, 5), ('separable', True, 0), ('separable', True, 6)]
# The gradients of the windowed, bidirectional and power cases by default; the rest -m slow.
GRADIENT_CASES = [c if c[2] or not c[1] or c[0] == 'kerple_power' else
                  pytest.param(*c, marks=pytest.mark.slow) for c in CASES]
REAL = SEG > 0  # Padding rows attend to nothing: no output is defined for them.


@pytest.mark.parametrize('name,causal,window', CASES)
def test_the_output_is_the_float64_formulas(name, causal, window):
  got = np.asarray(fused(Q, K, V, PARAMS[name], ROW, COL, name, causal, window))
  np.testing.assert_allclose(got[REAL], numpy_attention(name, causal, window)[REAL],
                             rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize('name,causal,window', GRADIENT_CASES)
def test_the_gradients_are_autodiffs_of_the_formula(name, causal, window):
  """Of q, k, v, the bias's per-head parameters and the per-position row and column values,
  for a loss on the real rows only."""
  weight = jnp.asarray(W * REAL[:, :, None, None])
  params = (jax.tree.map(jnp.asarray, PARAMS[name]) if PARAMS[name] is not None
            else jnp.zeros((H, 1)))
  argnums = (0, 1, 2) + ((4, 5) if name == 'separable' else (3,))
  loss = lambda f: lambda *a: jnp.sum(f(*a, name, causal, window) * weight)
  args = (jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V), params, jnp.asarray(ROW),
          jnp.asarray(COL))
  got = jax.grad(loss(fused), argnums)(*args)
  want = jax.grad(loss(jax_attention), argnums)(*args)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):  # FIRE's: the MLP's arrays.
    scale = float(np.max(np.abs(np.asarray(w))))
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=2e-5 * max(scale, 1.0))


def test_bfloat16_inputs_stay_within_bfloat16s_error():
  args = [jnp.asarray(x, jnp.bfloat16) for x in (Q, K, V)]
  got = np.asarray(fused(*args, PARAMS['alibi'], ROW, COL, 'alibi', True, 0), np.float32)
  want = numpy_attention('alibi', True, 0)
  np.testing.assert_allclose(got[REAL], want[REAL], atol=4e-2)


def test_without_custom_gradients_the_plain_formulation_runs_forward_mode_too():
  """model.custom_gradients=False: the materialised formulation, which jax.jvp can follow,
  with the kernel's outputs and the formula's directional derivative (along a drawn one)."""
  args = (jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V))
  direction = jnp.asarray(np.random.default_rng(5).normal(size=Q.shape), jnp.float32)
  f = lambda q: fused(q, *args[1:], PARAMS['alibi'], ROW, COL, 'alibi', True, 0)
  formula = lambda q: jax_attention(q, *args[1:], PARAMS['alibi'], ROW, COL, 'alibi', True, 0)
  with autodiff.use(False):
    out, tangent = jax.jvp(f, (args[0],), (direction,))
  np.testing.assert_allclose(np.asarray(out)[REAL], np.asarray(f(args[0]))[REAL], atol=1e-5)
  _, want = jax.jvp(formula, (args[0],), (direction,))
  want = np.asarray(want)[REAL]
  np.testing.assert_allclose(np.asarray(tangent)[REAL], want, atol=1e-5 * np.abs(want).max())


def test_the_loops_visit_the_blocks_a_window_needs_by_hand():
  """Blocks of 8, a window of 5: query block 2 (slots 16-23) sees keys 12-23 (blocks 1, 2);
  key block 1 (slots 8-15) is seen by queries 8-19 (blocks 1, 2)."""
  blocks = lambda f, *a: [int(x) for x in f(*a)]
  cfg = fb.Static(bias_lib.ALIBI_FUSED, 1.0, True, 5, 8, 8, True)
  assert blocks(fb.key_blocks, cfg, 2, 3) == [1, 3]
  assert blocks(fb.query_blocks, cfg, 1, 3) == [1, 3]
  plain = fb.Static(bias_lib.ALIBI_FUSED, 1.0, True, 0, 8, 8, True)
  assert blocks(fb.key_blocks, plain, 0, 3) == [0, 1]
  assert blocks(fb.query_blocks, plain, 2, 3) == [2, 3]



TOKENS = jnp.asarray(RNG.integers(5, 50, (2, 12)), jnp.int32)
MODEL_POS = jnp.asarray([list(range(12)), list(range(5)) + list(range(7))], jnp.int32)
MODEL_SEG = jnp.asarray([[1] * 12, [1] * 5 + [2] * 7], jnp.int32)


@pytest.mark.parametrize('kind,fields', [
    ('rope+fox', {'num_kv_heads': 2}),  # The kernels' own cases above; these -m slow.
    ('alibi+fox', {}),  # Both biases in one tile: ALiBi's of the distance, FoX's separable.
    pytest.param('fire+fox', {}, marks=pytest.mark.slow),
    pytest.param('alibi', {'layer_windows': (4, 0)}, marks=pytest.mark.slow),
    pytest.param('kerple', {'position.kerple.variant': 'power'}, marks=pytest.mark.slow)])
def test_a_model_on_the_fused_kernel_has_the_einsum_paths_outputs_and_gradients(kind, fields):
  """attention_impl='pallas': each layer's bias comes from its scheme's `fused_bias` hook (a
  window, grouped key/value heads, a rotation before it); the loss's gradient reaches every
  parameter as on the einsum path."""
  cfg = kinds.tiny_config(kind).model
  kinds.set_fields(cfg, fields)
  kinds.assert_implementations_agree(cfg, TOKENS, MODEL_POS, MODEL_SEG)


def test_the_kinds_the_kernel_runs_are_those_with_a_fused_bias_or_no_logits_term():
  """The capability decides: every kind with a bias of its own declares the hook, or refuses
  attention_impl='pallas' in one line; a scheme that needs ssmax's scaled bias is refused."""
  runs = {k for k in positions.kinds() if 'pallas' in positions.capabilities(k).implementations}
  assert {'alibi', 'kerple', 'fox', 't5', 'rope', 'none'} <= runs
  assert not {'shaw', 'xl', 'cope'} & runs
  config = test_config.get_config('shaw')
  config.model.attention_impl = 'pallas'
  with pytest.raises(errors.ConfigError,
                     match=r"the fused kernel \(attention_impl='pallas'\) cannot do"):
    resolve.validate(config)
  config = test_config.get_config('t5')
  config.model.attention_impl = 'pallas'
  resolve.validate(config)
  config.model.position.t5.update(num_buckets=130, max_distance=4096)  # Looped over per tile.
  with pytest.raises(errors.ConfigError, match='takes at most 128'):
    resolve.validate(config)
  config = test_config.get_config('fire')
  config.model.attention_impl = 'pallas'
  config.model.position.fire.mlp_width = 65
  with pytest.raises(errors.ConfigError, match='takes at most 64 units'):
    resolve.validate(config)
  config = test_config.get_config('alibi')
  config.model.attention_impl = 'pallas'
  resolve.validate(config)
  config.model.attention.ssmax = True
  with pytest.raises(errors.ConfigError, match="does not run on attention_impl='pallas'"):
    resolve.validate(config)


@pytest.mark.parametrize('kind', kinds.by_capabilities(
    [k for k in kinds.WITH_COMBINED if 'pallas' in positions.capabilities(k).implementations]))
def test_every_kind_that_declares_the_kernel_gives_the_einsum_paths_logits_on_it(kind):
  """From the registry: each kind whose capabilities offer attention_impl='pallas' (a fused
  bias, or no logits term) computes its model's logits there as on the einsum path."""
  cfg = kinds.tiny_config(kind).model
  want = models.create(cfg, seed=1)(TOKENS, MODEL_POS, MODEL_SEG)
  cfg.attention_impl = 'pallas'
  got = models.create(cfg, seed=1)(TOKENS, MODEL_POS, MODEL_SEG)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


@pytest.mark.parametrize('bias', [bias_lib.ALIBI_FUSED, bias_lib.KERPLE_FUSED['log'],
                                  fb.SEPARABLE, bias_lib.fire_fused(4)])
def test_the_kernels_lower_for_a_gpu_through_triton(bias):
  """Lowered for CUDA from the CPU (jax.export): the forward and backward kernels go through
  Triton, whose blocks must be powers of 2 and which lowers no stack of scalars nor rounding."""
  kinds.assert_lowers_for_cuda(fb.attend, bias, 64)


def test_a_query_that_sees_no_key_outputs_zero_and_blocks_need_not_divide():
  """Padding queries give 0 (as the materialised form), and blocks of 16 and 24 rows (the
  length padded to their least common multiple, 48) give the formula's output."""
  got = np.asarray(fused(Q, K, V, PARAMS['alibi'], ROW, COL, 'alibi', True, 0))
  assert np.all(got[~REAL] == 0)
  other = np.asarray(fb.attend(Q, K, V, jnp.asarray(POS), jnp.asarray(SEG), bias_lib.ALIBI_FUSED,
                               params=PARAMS['alibi'], block_q=16, block_k=24))
  np.testing.assert_allclose(other[REAL], numpy_attention('alibi', True, 0)[REAL], rtol=1e-5,
                             atol=2e-6)
  assert np.all(other[~REAL] == 0)


def test_an_encoder_decoder_runs_both_self_attentions_on_the_kernel(monkeypatch):
  """The encoder's and the decoder's self-attention get their packed segments, so both call
  the kernel (cross-attention stays on the einsum path), with the einsum path's logits."""
  cfg = kinds.tiny_config('t5').model
  cfg.type = 'encoder_decoder'
  tokens = TOKENS, MODEL_POS, MODEL_SEG
  want = models.create(cfg, seed=1)(*tokens, *tokens)
  cfg.attention_impl = 'pallas'
  calls = []
  attend = fb.attend
  monkeypatch.setattr(fb, 'attend',
                      lambda *a, **kw: calls.append(kw['causal']) or attend(*a, **kw))
  got = models.create(cfg, seed=1)(*tokens, *tokens)
  assert sorted(set(calls)) == [False, True]
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def test_kernel_ir_lowers_each_kernel_for_cuda_and_counts_its_matmuls():
  """scripts/kernel_ir.py, on the CPU: RoPE (no bias) and ALiBi each lower to the kernel's
  forward (q k^T and p v), query-gradient (q k^T, dO v^T, dS k) and key/value-gradient
  (q k^T, dO v^T, p^T dO, dS^T q) kernels, and the bias adds no matmul."""
  from scripts import kernel_ir  # pylint: disable=g-import-not-at-top
  args = kernel_ir.parser().parse_args(['--length=128', '--d_model=64', '--num_heads=2'])
  for kind in ('rope', 'alibi'):
    kernels = kernel_ir.kernel_ir(kind, args)
    assert [name for name, _ in kernels] == ['_forward_kernel', 'dq_kernel', 'dkv_kernel'], kind
    assert [kernel_ir.counts(ir)['dots'] for _, ir in kernels] == [2, 3, 4], kind
  assert jax.default_backend() == 'cpu'  # Restored after lowering.
