"""KERPLE, FIRE, CoPE, p-RoPE and the llama3/dynamic/YaRN-ramp scalings against their papers'
formulas, written out in float64 numpy (the older schemes are in test_schemes.py)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from roformer import attention
from roformer import saved_config
from roformer import positions
from tests import kinds
from tests.test_schemes import HEAD_DIM, HEADS, logits, make, model_cfg, random_qk

PACKED = jnp.asarray([[0, 1, 2, 3, 4, 5, 6], [3, 4, 0, 1, 2, 3, 4]])


def as64(x):
  return np.asarray(x, np.float64)


# ------------------------------------------------------------------------------------ KERPLE


@pytest.mark.parametrize('variant', ['log', 'power'])
def test_kerple_bias_is_the_papers_kernel(variant):
  """log: -r1 log(1 + r2 |i - j|); power: -r1 |i - j|^r2, per layer and head."""
  scheme = make('kerple', **{'kerple.variant': variant})
  layer = scheme.for_layer(1)
  r1 = np.maximum(as64(layer.r1[...]), 0.01)
  r2 = np.clip(as64(layer.r2[...]), 0.01, 2.0 if variant == 'power' else np.inf)
  got = np.asarray(layer.logits_bias(None, None, PACKED, PACKED))
  pn = np.asarray(PACKED)
  for b, h, i, j in np.ndindex(2, HEADS, 7, 7):
    d = abs(int(pn[b, i]) - int(pn[b, j]))
    want = -r1[h] * (math.log(1 + r2[h] * d) if variant == 'log' else d ** r2[h])
    assert got[b, h, i, j] == pytest.approx(want, rel=1e-5, abs=1e-6), (b, h, i, j)
  assert not np.allclose(as64(layer.r1[...]), as64(scheme.for_layer(0).r1[...]))  # Per layer.


def test_kerple_clamps_its_parameters_and_passes_the_gradient_through():
  layer = make('kerple', **{'kerple.variant': 'power'}).for_layer(0)
  layer.r1.value = jnp.asarray([-0.5, 0.3, 0.005, 1.0])
  layer.r2.value = jnp.asarray([3.0, 1.5, -1.0, 0.5])
  pos = jnp.arange(5)[None]
  bias = np.asarray(layer.logits_bias(None, None, pos, pos))[0]
  r1, r2 = [0.01, 0.3, 0.01, 1.0], [2.0, 1.5, 0.01, 0.5]
  for h in range(HEADS):
    assert bias[h, 4, 1] == pytest.approx(-r1[h] * 3 ** r2[h], rel=1e-5)
  graphdef, state = nnx.split(layer.module)
  grads = jax.grad(lambda s: nnx.merge(graphdef, s).logits_bias(None, None, pos, pos, None,
                                                                None).sum())(state)
  g1 = np.asarray(grads['r1'].value)
  # d/dr1 of -r1 sum |i-j|^r2 at the clamped r2, even for the clamped r1 of heads 0 and 2.
  distances = np.abs(np.arange(5)[:, None] - np.arange(5)[None])
  for h in range(HEADS):
    assert g1[h] == pytest.approx(-(distances ** r2[h]).sum(), rel=1e-5)
  assert np.isfinite(np.asarray(grads['r2'].value)).all()  # 0^r2 on the diagonal: no NaN.


# -------------------------------------------------------------------------------------- FIRE


def fire_numpy(layer, q_pos, k_pos, init_threshold):
  """b(i, j) = f(psi(i - j) / psi(max(L, i))), psi(x) = log(|c x| + 1), f = W2 relu(W1 x + b1)
  + b2, written out pair by pair."""
  fn = layer.bias_function
  w1, b1 = as64(fn.hidden_kernel[...])[0], as64(fn.hidden_bias[...])
  w2, b2 = as64(fn.out_kernel[...]), as64(fn.out_bias[...])
  c = float(fn.c[...])
  threshold = abs(float(fn.threshold_multiplier[...]) * init_threshold)
  psi = lambda x: math.log(abs(c * x) + 1)
  qn, kn = np.asarray(q_pos), np.asarray(k_pos)
  out = np.zeros((qn.shape[0], w2.shape[1], qn.shape[1], kn.shape[1]))
  for b, i, j in np.ndindex(qn.shape[0], qn.shape[1], kn.shape[1]):
    x = psi(int(qn[b, i]) - int(kn[b, j])) / (psi(max(threshold, int(qn[b, i]))) + 1e-6)
    out[b, :, i, j] = np.maximum(x * w1 + b1, 0.0) @ w2 + b2
  return out


def test_fire_bias_matches_the_formula():
  layer = make('fire', **{'fire.init_threshold': 3.0}).for_layer(1)
  layer.bias_function.c.value = jnp.float32(0.7)
  layer.bias_function.threshold_multiplier.value = jnp.float32(1.5)  # L = 4.5.
  got = np.asarray(layer.logits_bias(None, None, PACKED, PACKED))
  np.testing.assert_allclose(got, fire_numpy(layer, PACKED, PACKED, 3.0), rtol=1e-5, atol=1e-6)


def test_fire_pieces_give_the_mlps_values_and_gradients():
  """The bias evaluates f once per linear piece; the MLP applied to every pair's input gives the
  same values and the same gradients for every parameter, units with w1 = 0 included."""
  layer = make('fire', **{'fire.init_threshold': 3.0}).for_layer(0).module
  fn = layer.bias_function
  fn.hidden_kernel.value = fn.hidden_kernel.value.at[0, :2].set(0.0)
  fn.hidden_bias.value = fn.hidden_bias.value.at[:2].set(jnp.asarray([0.5, -0.5]))
  graphdef, state = nnx.split(layer)
  weights = jnp.asarray(np.random.default_rng(25).normal(size=(2, HEADS, 7, 7)), jnp.float32)

  def mlp_everywhere(lay):
    x, fn = lay.inputs(PACKED, PACKED), lay.bias_function
    hidden = jax.nn.relu(x[..., None] * fn.hidden_kernel[...][0] + fn.hidden_bias[...])
    out = jnp.einsum('bqkm,mh->bhqk', hidden, fn.out_kernel[...])
    return out + fn.out_bias[...][None, :, None, None]

  loss = lambda bias_fn: lambda st: jnp.sum(bias_fn(nnx.merge(graphdef, st)) * weights)
  pieces = lambda lay: lay.logits_bias(None, None, PACKED, PACKED, None, None)
  np.testing.assert_allclose(pieces(layer), mlp_everywhere(layer), rtol=1e-5, atol=1e-6)
  got = jax.jit(jax.grad(loss(pieces)))(state)
  want = jax.jit(jax.grad(loss(mlp_everywhere)))(state)
  for (path, g), (_, w) in zip(jax.tree_util.tree_flatten_with_path(got)[0],
                               jax.tree_util.tree_flatten_with_path(want)[0]):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=str(path))
  assert np.abs(np.asarray(got['bias_function']['c'].value)) > 0  # c and L get gradients through the inputs.


def test_fire_normalises_by_the_query_position_above_the_threshold():
  """Below L the normaliser is psi(L) for every query, so equal distances give equal inputs;
  above L it is psi(i), so the same distance counts for less at later queries."""
  layer = make('fire', **{'fire.init_threshold': 4.0}).for_layer(0)
  pos = jnp.arange(12)[None]
  inputs = np.asarray(layer.inputs(pos, pos))[0]
  psi = lambda x: math.log(0.1 * x + 1)
  for i in (1, 2, 3, 4):  # Below (or at) the threshold: psi(1) / psi(L).
    assert inputs[i, i - 1] == pytest.approx(psi(1) / psi(4.0), rel=1e-5)
  for i in (5, 8, 11):
    assert inputs[i, i - 1] == pytest.approx(psi(1) / psi(i), rel=1e-5)
  assert inputs[11, 0] == pytest.approx(1.0, rel=1e-5)  # The whole prefix: psi(i) / psi(i).
  bias = np.asarray(layer.logits_bias(None, None, pos, pos))[0]
  np.testing.assert_allclose(bias[:, 2, 1], bias[:, 3, 2], rtol=1e-6)
  assert not np.allclose(bias[:, 9, 8], bias[:, 11, 10])  # Not shift invariant above L.


def test_fire_is_per_layer_unless_shared_and_spared_by_weight_decay():
  per_layer, shared = make('fire'), make('fire', **{'fire.shared_across_layers': True})
  layers = model_cfg('fire').num_layers
  per_layer_state = nnx.state(nnx.List(per_layer.layers), nnx.Param)
  assert not nnx.state(per_layer.shared, nnx.Param)  # Every function in its layer.
  assert not nnx.state(nnx.List(shared.layers), nnx.Param)  # One function, in the stack's.
  np.testing.assert_array_equal(shared.for_layer(1).arrays(shared.shared())['out_kernel'],
                                shared.shared.bias_function.out_kernel[...])
  cfg = model_cfg('fire')
  n = sum(x.size for x in jax.tree.leaves(per_layer_state))
  width = cfg.position.fire.mlp_width
  assert n == layers * (2 * width + width * HEADS + HEADS + 2)  # MLP, c, L's multiplier.
  paths = ['/'.join(str(getattr(k, 'key', k)) for k in path) for path, _ in
           jax.tree_util.tree_flatten_with_path(per_layer_state)[0]]
  assert all('bias' in p for p in paths)  # The optimizer decays no path that names a bias.


# -------------------------------------------------------------------------------------- CoPE


def cope_numpy(q, k, mask, embeddings, max_position):
  """p_ij = sum_{t=j..i, t visible} sigmoid(q_i . k_t / sqrt(d)), clipped; bias q_i . e[p_ij] /
  sqrt(d) with e interpolated between floor(p) and ceil(p). Both [b, h, q, k]; NaN where
  masked."""
  qn, kn, mn = as64(q), as64(k), np.broadcast_to(np.asarray(mask), (q.shape[0], q.shape[2],
                                                                    q.shape[1], k.shape[1]))
  e, d = as64(embeddings), q.shape[-1]
  p = np.full(mn.shape, np.nan)
  bias = np.full(mn.shape, np.nan)
  for b, h, i, j in np.ndindex(*mn.shape):
    if not mn[b, h, i, j]:
      continue
    gates = [1 / (1 + math.exp(-qn[b, i, h] @ kn[b, t, h] / math.sqrt(d)))
             for t in range(j, k.shape[1]) if mn[b, h, i, t]]
    p[b, h, i, j] = pos = min(sum(gates), max_position)
    lo, hi = math.floor(pos), math.ceil(pos)
    if hi >= len(e):  # Unclipped counts (max_position inf): positions only.
      continue
    emb = (pos - lo) * e[hi] + (1 - pos + lo) * e[lo]
    bias[b, h, i, j] = qn[b, i, h] @ emb / math.sqrt(d)
  return p, bias


def cope_layer(max_position=64, seed=0):
  layer = make('cope', **{'cope.max_position': max_position}).for_layer(1)
  layer.embeddings.value = jnp.asarray(np.random.default_rng(seed).normal(
      size=layer.embeddings.shape), jnp.float32)  # The paper starts from zeros.
  return layer


def test_cope_positions_count_the_visible_gates_and_restart_per_segment():
  layer = cope_layer(max_position=3)
  q, k = random_qk(20)
  seg = jnp.asarray([[1, 1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1, 1]])
  mask = attention.make_mask(seg, seg, causal=True)
  got = np.asarray(layer.positions(q, k, mask))
  counts, _ = cope_numpy(q, k, mask, layer.embeddings[...], np.inf)
  visible = ~np.isnan(counts)
  np.testing.assert_allclose(got[visible], np.minimum(counts, 3)[visible], rtol=1e-5)
  assert (counts[visible] > 3).any() and (counts[visible] < 3).any()  # Some are clipped.
  # Keys the mask hides add no gate: changing them changes no visible position.
  k_other = k.at[0, 3:].set(5.0)
  np.testing.assert_array_equal(np.asarray(layer.positions(q, k_other, mask))[0, :, :3, :3],
                                got[0, :, :3, :3])
  # The second segment counts as if it were alone.
  alone = np.asarray(layer.positions(q[:1, 3:6], k[:1, 3:6], None))
  np.testing.assert_allclose(got[0, :, 3:6, 3:6], alone[0], rtol=1e-6)


def test_cope_bias_matches_the_formula():
  layer = cope_layer(max_position=4)
  q, k = random_qk(21)
  q = q * 2.0  # Gates away from 1/2, positions spread over fractions.
  seg = jnp.asarray([[1, 1, 1, 1, 2, 2, 2], [1, 1, 1, 1, 1, 1, 0]])
  mask = attention.make_mask(seg, seg, causal=True)
  got = np.asarray(layer.logits_bias(q, k, PACKED, PACKED, mask=mask))
  _, want = cope_numpy(q, k, mask, layer.embeddings[...], 4)
  visible = ~np.isnan(want)
  np.testing.assert_allclose(got[visible], want[visible], rtol=1e-4, atol=1e-5)
  assert got.dtype == np.float32


def test_cope_one_query_over_the_cache_equals_its_row_of_the_full_pass():
  layer = cope_layer()
  q, k = random_qk(22)
  pos = jnp.tile(jnp.arange(7)[None], (2, 1))
  full = logits(layer, q, k, pos, pos)
  for p in (0, 3, 6):  # Slots after the query are unfilled cache: masked.
    cache_mask = jnp.broadcast_to(jnp.arange(7) <= p, (2, 1, 1, 7))
    one = layer.logits_bias(q[:, p:p + 1], k, pos[:, p:p + 1], pos, mask=cache_mask)
    one = np.asarray(one) + np.einsum('bqhd,bkhd->bhqk', as64(q[:, p:p + 1]), as64(k)) / math.sqrt(
        HEAD_DIM)
    np.testing.assert_allclose(one[:, :, 0, :p + 1], full[:, :, p, :p + 1], atol=1e-5)


def _cope_scratch_bytes(length, head_dim):
  cfg = model_cfg('cope')
  cfg.d_model, cfg.num_heads = head_dim, 1
  layer = kinds.Built(cfg, causal=True, rngs=nnx.Rngs(0)).for_layer(0)
  graphdef, state = nnx.split(layer.module)

  def loss(state, q, k):
    return nnx.merge(graphdef, state).logits_bias(q, k, None, None, None, None).sum()

  x = jax.ShapeDtypeStruct((1, length, 1, head_dim), jnp.float32)
  compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(state, x, x).compile()
  return compiled.memory_analysis().temp_size_in_bytes


def test_cope_never_allocates_length_squared_times_head_dim():
  length = 512
  small, large = _cope_scratch_bytes(length, 64), _cope_scratch_bytes(length, 256)
  # An L x L x d tensor: 64 MiB at d = 64, 192 MiB more at d = 256. CoPE keeps a few L x L
  # arrays (1 MiB each), whatever d.
  assert small < length * length * 64 * 4 / 4, small
  assert large - small < length * length * 4, (small, large)


# ------------------------------------------------------------------------------------ p-RoPE


def pair_rotation(x, m, theta, first, second):
  out = np.array(x, np.float64)
  c, s = math.cos(m * theta), math.sin(m * theta)
  out[first], out[second] = c * x[first] - s * x[second], s * x[first] + c * x[second]
  return out


@pytest.mark.parametrize('layout', ['interleaved', 'half'])
def test_p_rope_rotates_the_highest_frequencies_and_leaves_the_rest_exactly(layout):
  """keep_fraction 0.5 of 4 pairs: pairs 0, 1 rotate by RoPE's theta_0, theta_1 of the whole
  head (not `fraction`'s frequencies of a narrower head); pairs 2, 3 are unchanged bit for bit."""
  layer = make('rope', **{'rope.keep_fraction': 0.5, 'rope.layout': layout})
  q, k = random_qk(23)
  q = q.astype(jnp.bfloat16)
  pos = jnp.asarray([[0, 5, 9, 40, 1000, 3, 2]] * 2)
  rq, _ = layer.rotate(q, k, pos, pos)
  half = HEAD_DIM // 2
  pairs = ([(2 * i, 2 * i + 1) for i in range(half)] if layout == 'interleaved'
           else [(i, i + half) for i in range(half)])
  theta = 10000.0 ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
  qn, got = as64(q), as64(rq)
  for b, t, h in np.ndindex(2, 7, HEADS):
    want = qn[b, t, h]
    for i in range(2):
      want = pair_rotation(want, int(pos[b, t]), theta[i], *pairs[i])
    np.testing.assert_allclose(got[b, t, h], want, atol=0.02)  # bf16 output.
  unrotated = [d for p in pairs[2:] for d in p]
  np.testing.assert_array_equal(np.asarray(rq)[..., unrotated], np.asarray(q)[..., unrotated])
  assert positions.kept_pairs(64, 0.75) == 24 and positions.kept_pairs(8, 0.3) == 1


# -------------------------------------------------------------------------------- scalings


def scaling_cfg(kind, **fields):
  return model_cfg('rope', **{'rope.scaling.kind': kind, **{f'rope.scaling.{k}': v for k, v in
                                                            fields.items()}}).position.rope.scaling


def test_llama3_frequencies_follow_the_wavelength_rule():
  d, base, s, length = 64, 10000.0, 8.0, 64
  got, mscale = positions.scaled_frequencies(d, base, scaling_cfg(
      'llama3', factor=s, original_length=length, low_freq_factor=1.0, high_freq_factor=4.0))
  regimes = set()
  for i in range(d // 2):
    theta = base ** (-2 * i / d)
    wavelength = 2 * math.pi / theta
    if wavelength < length / 4:
      want, regime = theta, 'kept'
    elif wavelength > length / 1:
      want, regime = theta / s, 'divided'
    else:
      smooth = (length / wavelength - 1) / (4 - 1)
      want, regime = (1 - smooth) * theta / s + smooth * theta, 'smoothed'
    regimes.add(regime)
    assert got[i] == pytest.approx(want, rel=1e-12), i
  assert regimes == {'kept', 'divided', 'smoothed'} and mscale == 1.0


@pytest.mark.parametrize('length', [6, 16, 17, 40])
def test_dynamic_ntk_base_grows_with_the_largest_position(length):
  d, base, s, original = 8, 10000.0, 2.0, 16
  got = np.asarray(positions.dynamic_frequencies(d, base, s, original, jnp.asarray(length)))
  grown = base * max(s * length / original - (s - 1), 1.0) ** (d / (d - 2))
  np.testing.assert_allclose(got, [grown ** (-2 * i / d) for i in range(d // 2)], rtol=2e-6)
  # Through the layer: a row whose largest position is length - 1 rotates by these.
  layer = make('rope', **{'rope.scaling.kind': 'dynamic', 'rope.scaling.factor': s,
                          'rope.scaling.original_length': original})
  q, k = random_qk(24)
  pos = jnp.asarray([[0, 1, 2, 3, 4, 5, length - 1], [0, 1, 2, 3, 4, 5, 6]])
  rq, _ = layer.rotate(q, k, pos, pos)
  want = as64(q)[0, 6, 1]
  for i in range(d // 2):
    want = pair_rotation(want, length - 1, grown ** (-2 * i / d), 2 * i, 2 * i + 1)
  np.testing.assert_allclose(np.asarray(rq)[0, 6, 1], want, atol=1e-5)
  plain = make('rope').rotate(q, k, pos, pos)[0]  # Row 1 (length 7 < 16): plain RoPE.
  np.testing.assert_allclose(np.asarray(rq)[1], np.asarray(plain)[1], atol=2e-6)


@pytest.mark.parametrize('factor,length', [(4.0, 256), (16.0, 4096)])
def test_yarn_ramps_match_their_formulas(factor, length):
  """ratio: gamma = clip((L / lambda_i - alpha) / (beta - alpha), 0, 1) (the paper); index:
  a linear ramp over pair indices between the dimensions where L / lambda equals beta and
  alpha (floor and ceil), as released YaRN checkpoints use; index_unrounded: the same between
  those dimensions unrounded (transformers' truncate=false)."""
  d, base = 64, 10000.0
  theta = base ** (-np.arange(0, d, 2) / d)
  ratio, _ = positions.scaled_frequencies(d, base, scaling_cfg(
      'yarn', factor=factor, original_length=length, ramp='ratio'))
  index, mscale = positions.scaled_frequencies(d, base, scaling_cfg(
      'yarn', factor=factor, original_length=length, ramp='index'))
  correction = lambda rotations: d * math.log(length / (rotations * 2 * math.pi)) / (
      2 * math.log(base))
  unrounded, _ = positions.scaled_frequencies(d, base, scaling_cfg(
      'yarn', factor=factor, original_length=length, ramp='index_unrounded'))
  low, high = max(math.floor(correction(32.0)), 0), min(math.ceil(correction(1.0)), d - 1)
  exact_low, exact_high = max(correction(32.0), 0), min(correction(1.0), d - 1)
  for i, t in enumerate(theta):
    r = length * t / (2 * math.pi)
    g = min(max((r - 1) / 31, 0.0), 1.0)
    assert ratio[i] == pytest.approx((1 - g) * t / factor + g * t, rel=1e-12)
    g = 1 - min(max((i - low) / (high - low), 0.0), 1.0)
    assert index[i] == pytest.approx((1 - g) * t / factor + g * t, rel=1e-12)
    g = 1 - min(max((i - exact_low) / (exact_high - exact_low), 0.0), 1.0)
    assert unrounded[i] == pytest.approx((1 - g) * t / factor + g * t, rel=1e-12)
  assert not np.allclose(ratio, index)  # Three different ramps ...
  assert not np.allclose(unrounded, index)
  assert index[0] == theta[0] and index[-1] == pytest.approx(theta[-1] / factor)  # ... ends.
  assert mscale == pytest.approx(0.1 * math.log(factor) + 1)


def test_configs_saved_before_the_new_options_still_validate_and_build():
  """A config.json written before keep_fraction, the scaling's ramp and llama3 factors, and the
  kerple/fire/cope groups existed reads their defaults (saved_config.migrate, which every read
  of a saved config runs) instead of failing."""
  for kind in ('rope', 'alibi'):
    saved = model_cfg(kind)
    with saved.unlocked():
      del saved.position['kerple'], saved.position['fire'], saved.position['cope']
      del saved.position.rope['keep_fraction']
      for name in ('ramp', 'low_freq_factor', 'high_freq_factor'):
        del saved.position.rope.scaling[name]
    cfg = saved_config.migrate({'model': saved.to_dict()}).model
    assert cfg.position.rope.keep_fraction == 1.0 and 'kerple' in cfg.position
    positions.validate(cfg, 32, True)
    scheme = kinds.Built(cfg, causal=True, rngs=nnx.Rngs(0))
    if kind == 'rope':
      q, k = random_qk(26)
      pos = jnp.tile(jnp.arange(7)[None], (2, 1))
      np.testing.assert_array_equal(scheme.rotate(q, k, pos, pos)[0],
                                    make('rope').rotate(q, k, pos, pos)[0])
