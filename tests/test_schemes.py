"""Every position scheme against its paper's formula, written out in float64 numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import test as test_config
from roformer import errors
from roformer import positions
from tests import kinds

HEADS, HEAD_DIM = 4, 8
RELATIVE = ['shaw', 'xl', 't5', 'alibi', 'kerple', 'rope', 'xpos']


def model_cfg(kind, **fields):
  cfg = test_config.get_config(kind).model
  for dotted, value in fields.items():
    node = cfg.position
    *parents, leaf = dotted.split('.')
    for p in parents:
      node = node[p]
    node[leaf] = value
  return cfg


def make(kind, causal=True, **fields):
  return kinds.Built(model_cfg(kind, **fields), causal=causal, rngs=nnx.Rngs(7))


def logits(layer, q, k, q_pos, k_pos):
  """The attention logits a layer's hooks produce: (rotated) q . k / sqrt(d) + bias."""
  q, k = layer.rotate(q, k, q_pos, k_pos)
  out = jnp.einsum('bqhd,bkhd->bhqk', q, k) * q.shape[-1] ** -0.5
  bias = layer.logits_bias(q, k, q_pos, k_pos)
  return np.asarray(out if bias is None else out + bias, np.float64)


def random_qk(seed=0, length=7):
  rng = np.random.default_rng(seed)
  return (jnp.asarray(rng.normal(size=(2, length, HEADS, HEAD_DIM)), jnp.float32)
          for _ in range(2))


@pytest.mark.parametrize('kind', RELATIVE)
@pytest.mark.parametrize('causal', [True, False])
def test_logits_depend_only_on_relative_position(kind, causal):
  if kind == 'xpos' and not causal:
    pytest.skip('xpos is causal only')
  layer = make(kind, causal).for_layer(0)
  q, k = random_qk()
  pos = jnp.tile(jnp.arange(7)[None], (2, 1))
  base = logits(layer, q, k, pos, pos)
  for shift in (3, 200):
    np.testing.assert_allclose(logits(layer, q, k, pos + shift, pos + shift), base,
                               atol=2e-4, rtol=1e-4)


def test_shaw_matches_paper():
  """e_ij = q_i . (k_j + a^K_{clip(j-i)}) / sqrt(d); z_i = sum_j p_ij (v_j + a^V_{clip(j-i)})."""
  layer = make('shaw', **{'shaw.max_distance': 2}).for_layer(1)
  ak, av = np.asarray(layer.keys[...], np.float64), np.asarray(layer.values[...], np.float64)
  q, k = random_qk(1)
  pos = jnp.asarray([[0, 1, 2, 3, 4, 5, 6], [3, 4, 0, 1, 2, 3, 4]])
  qn, kn, pn = np.asarray(q, np.float64), np.asarray(k, np.float64), np.asarray(pos)
  rel = lambda b, i, j: int(np.clip(pn[b, j] - pn[b, i], -2, 2)) + 2
  want = np.zeros((2, HEADS, 7, 7))
  for b, h, i, j in np.ndindex(2, HEADS, 7, 7):
    want[b, h, i, j] = qn[b, i, h] @ (kn[b, j, h] + ak[rel(b, i, j)]) / np.sqrt(HEAD_DIM)
  np.testing.assert_allclose(logits(layer, q, k, pos, pos), want, atol=1e-4)

  probs = np.random.default_rng(2).dirichlet(np.ones(7), size=(2, HEADS, 7))
  got = np.asarray(layer.value_term(jnp.asarray(probs, jnp.float32), pos, pos))
  want_v = np.zeros((2, 7, HEADS, HEAD_DIM))
  for b, h, i, j in np.ndindex(2, HEADS, 7, 7):
    want_v[b, i, h] += probs[b, h, i, j] * av[rel(b, i, j)]
  np.testing.assert_allclose(got, want_v, atol=1e-5)


def test_shaw_tables_are_per_layer_and_shared_across_heads():
  scheme = make('shaw', **{'shaw.max_distance': 3})
  cfg = model_cfg('shaw')
  assert len(scheme.layers) == cfg.num_layers
  assert scheme.for_layer(0).keys.shape == (7, HEAD_DIM)  # 2k+1 rows, no head axis.
  assert not np.allclose(scheme.for_layer(0).keys[...], scheme.for_layer(1).keys[...])


def _shaw_scratch_bytes(length, head_dim):
  """Compiled scratch memory of Shaw's logits bias and value term, forward and backward."""
  cfg = model_cfg('shaw')
  cfg.d_model, cfg.num_heads = head_dim, 1
  layer = kinds.Built(cfg, causal=True, rngs=nnx.Rngs(0)).for_layer(0)
  graphdef, state = nnx.split(layer.module)

  def loss(state, q, k, probs, pos):
    lay = kinds.View(nnx.merge(graphdef, state), None)
    return lay.logits_bias(q, k, pos, pos).sum() + lay.value_term(probs, pos, pos).sum()

  x = jax.ShapeDtypeStruct((1, length, 1, head_dim), jnp.float32)
  probs = jax.ShapeDtypeStruct((1, 1, length, length), jnp.float32)
  pos = jax.ShapeDtypeStruct((1, length), jnp.int32)
  compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 3))).lower(state, x, x, probs, pos).compile()
  return compiled.memory_analysis().temp_size_in_bytes


def test_shaw_never_allocates_length_squared_times_head_dim():
  length = 512
  small, large = _shaw_scratch_bytes(length, 64), _shaw_scratch_bytes(length, 256)
  # An L x L x d tensor would be 64 MiB at d = 64 and grow by 192 MiB from d = 64 to 256;
  # the scratch stays a few L x L tensors (1 MiB each) and barely depends on d.
  assert small < length * length * 64 * 4 / 4, small
  assert large - small < length * length * 4, (small, large)


def test_xl_matches_the_four_term_formula():
  """A_ij = q_i.k_j + q_i.W_R R_{i-j} + u.k_j + v.W_R R_{i-j} (Dai et al. 2019, eq. 3)."""
  scheme = make('xl')
  layer = scheme.for_layer(1)
  w_r = np.asarray(scheme.layers[1].w_r[...], np.float64)  # [d_model, heads, head_dim]
  u = np.asarray(scheme.shared.u_bias[...], np.float64)
  v = np.asarray(scheme.shared.v_bias[...], np.float64)
  d_model = w_r.shape[0]
  q, k = random_qk(3)
  pos = jnp.asarray([[0, 1, 2, 3, 0, 1, 2], [0, 1, 2, 3, 4, 5, 6]])
  qn, kn, pn = np.asarray(q, np.float64), np.asarray(k, np.float64), np.asarray(pos)

  def r(distance):
    out = np.zeros(d_model)
    for c in range(0, d_model, 2):
      angle = distance / 10000.0 ** (c / d_model)
      out[c], out[c + 1] = np.sin(angle), np.cos(angle)
    return out

  want = np.zeros((2, HEADS, 7, 7))
  for b, h, i, j in np.ndindex(2, HEADS, 7, 7):
    wr = r(pn[b, i] - pn[b, j]) @ w_r[:, h]
    want[b, h, i, j] = (qn[b, i, h] @ kn[b, j, h] + qn[b, i, h] @ wr + u[h] @ kn[b, j, h]
                        + v[h] @ wr) / np.sqrt(HEAD_DIM)
  np.testing.assert_allclose(logits(layer, q, k, pos, pos), want, atol=1e-4)


def test_xl_bias_is_global_and_projection_per_layer():
  scheme = make('xl')
  assert set(nnx.state(scheme.shared, nnx.Param)) == {'u_bias', 'v_bias'}  # One u, v.
  for layer in scheme.layers:
    assert set(nnx.state(layer, nnx.Param)) == {'w_r'}
  assert not np.allclose(scheme.layers[0].w_r[...], scheme.layers[1].w_r[...])


# Relative position (key - query) -> bucket, by hand from T5's definition: e.g. causal, 32
# buckets, distance 64: 16 exact buckets, then 16 + floor(16 * ln(64/16) / ln(128/16)) = 26.
T5_BIDIRECTIONAL = {0: 0, -1: 1, -7: 7, -8: 8, -15: 9, -16: 10, -32: 12, -64: 14, -127: 15,
                    -128: 15, -5000: 15, 1: 17, 7: 23, 8: 24, 16: 26, 128: 31, 900: 31}
T5_CAUSAL = {0: 0, -1: 1, -15: 15, -16: 16, -32: 21, -64: 26, -127: 31, -128: 31, -1000: 31,
             3: 0, 50: 0}


@pytest.mark.parametrize('bidirectional,table', [(True, T5_BIDIRECTIONAL), (False, T5_CAUSAL)])
def test_t5_buckets_against_hand_table(bidirectional, table):
  rel = jnp.asarray(list(table))
  got = positions.t5_buckets(rel, bidirectional=bidirectional, num_buckets=32, max_distance=128)
  assert dict(zip(table, np.asarray(got).tolist())) == table


def test_t5_bias_table_shared_across_layers_by_default():
  shared, separate = make('t5'), make('t5', **{'t5.shared_across_layers': False})
  assert set(nnx.state(shared.shared, nnx.Param)) == {'bias_table'}
  assert not any(nnx.state(layer, nnx.Param) for layer in shared.layers)
  assert not nnx.state(separate.shared, nnx.Param)
  assert all(set(nnx.state(layer, nnx.Param)) == {'bias_table'} for layer in separate.layers)
  layer = shared.for_layer(1)
  q, k = random_qk(4)
  pos = jnp.tile(jnp.arange(7)[None], (2, 1))
  bias = np.asarray(layer.logits_bias(q, k, pos, pos))
  table = np.asarray(shared.shared.bias_table[...])
  buckets = np.asarray(positions.t5_buckets(
      jnp.arange(7)[None, :] - jnp.arange(7)[:, None], bidirectional=False, num_buckets=32,
      max_distance=128))
  np.testing.assert_allclose(bias, np.broadcast_to(table[buckets].transpose(2, 0, 1)[None],
                                                   bias.shape), atol=1e-7)


def test_alibi_slopes_match_the_paper():
  np.testing.assert_allclose(positions.alibi_slopes(8), [2.0 ** -i for i in range(1, 9)])
  twelve = [2.0 ** -i for i in range(1, 9)] + [2.0 ** -(i + 0.5) for i in range(0, 4)]
  np.testing.assert_allclose(positions.alibi_slopes(12), twelve)
  np.testing.assert_allclose(positions.alibi_slopes(16), [2.0 ** (-i / 2) for i in range(1, 17)])


def test_alibi_bias_is_minus_slope_times_distance():
  layer = make('alibi').for_layer(0)
  pos = jnp.arange(5)[None]
  bias = np.asarray(layer.logits_bias(None, None, pos, pos))[0]
  slopes = positions.alibi_slopes(HEADS)
  for h, i, j in np.ndindex(HEADS, 5, 5):
    assert bias[h, i, j] == pytest.approx(-slopes[h] * abs(i - j))


def rotation(m, d, theta):
  r = np.zeros((d, d))
  for i in range(d // 2):
    c, s = np.cos(m * theta[i]), np.sin(m * theta[i])
    r[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -s], [s, c]]
  return r


def test_rope_fraction_rotates_only_the_first_dimensions():
  layer = make('rope', **{'rope.fraction': 0.5})
  q, k = random_qk(5)
  pos = jnp.asarray([[0, 1, 2, 3, 4, 5, 6]] * 2) * 37
  rq, _ = layer.rotate(q, k, pos, pos)
  theta = 10000.0 ** (-np.arange(0, 4, 2) / 4)  # Frequencies of the 4 rotated dimensions.
  qn = np.asarray(q, np.float64)
  for i in range(7):
    want = rotation(37 * i, 4, theta) @ qn[0, i, 1, :4]
    np.testing.assert_allclose(np.asarray(rq)[0, i, 1, :4], want, atol=1e-4)
  np.testing.assert_array_equal(np.asarray(rq)[..., 4:], np.asarray(q)[..., 4:])


def test_rope_half_layout_pairs_i_with_i_plus_half():
  layer = make('rope', **{'rope.layout': 'half'})
  q, k = random_qk(6)
  pos = jnp.asarray([[5, 9, 0, 1, 2, 3, 4]] * 2)
  rq, _ = layer.rotate(q, k, pos, pos)
  theta = 10000.0 ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
  x, m = np.asarray(q, np.float64)[0, 1, 2], 9
  half = HEAD_DIM // 2
  want = np.concatenate([x[:half] * np.cos(m * theta) - x[half:] * np.sin(m * theta),
                         x[:half] * np.sin(m * theta) + x[half:] * np.cos(m * theta)])
  np.testing.assert_allclose(np.asarray(rq)[0, 1, 2], want, atol=1e-5)
  # The same rotation as the interleaved layout applied to the de-interleaved vector.
  inter = make('rope').rotate(q, k, pos, pos)[0]
  perm = np.stack([np.arange(half), np.arange(half) + half], -1).reshape(-1)
  # The same rotation as the paper's R(m) applied to the de-interleaved vector (float64).
  qn, pn = np.asarray(q, np.float64), np.asarray(pos)
  want_perm = np.stack([[np.einsum('ij,hj->hi', rotation(pn[b, t], HEAD_DIM, theta),
                                   qn[b, t][:, perm]) for t in range(7)] for b in range(2)])
  np.testing.assert_allclose(np.asarray(rq)[..., perm], want_perm, atol=1e-5)
  assert not np.allclose(np.asarray(inter), np.asarray(rq))  # Not a silent default.


def test_rope_rotate_values():
  plain, rotated = make('rope'), make('rope', **{'rope.rotate_values': True})
  v, _ = random_qk(7)
  pos = jnp.asarray([[0, 1, 2, 3, 4, 5, 6]] * 2)
  np.testing.assert_array_equal(np.asarray(plain.rotate_value(v, pos)), np.asarray(v))
  theta = 10000.0 ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
  want = np.einsum('bsij,bshj->bshi', np.stack([[rotation(m, HEAD_DIM, theta) for m in row]
                                                for row in np.asarray(pos)]),
                   np.asarray(v, np.float64))
  np.testing.assert_allclose(np.asarray(rotated.rotate_value(v, pos)), want, atol=1e-5)


@pytest.mark.parametrize('factor', [2.0, 8.0])
def test_scaling_frequencies_match_their_formulas(factor):
  d, base, length = 64, 10000.0, 256
  theta = base ** (-np.arange(0, d, 2) / d)
  sc = lambda kind: model_cfg('rope', **{'rope.scaling.kind': kind, 'rope.scaling.factor': factor,
                                         'rope.scaling.original_length': length}).position.rope.scaling
  lin, m1 = positions.scaled_frequencies(d, base, sc('linear'))
  np.testing.assert_allclose(lin, theta / factor, rtol=1e-12)
  ntk, m2 = positions.scaled_frequencies(d, base, sc('ntk'))
  np.testing.assert_allclose(ntk, (base * factor ** (d / (d - 2))) ** (-np.arange(0, d, 2) / d),
                             rtol=1e-12)
  assert ntk[0] == 1.0 and ntk[-1] == pytest.approx(theta[-1] / factor)  # Lowest freq / s.
  yarn, m3 = positions.scaled_frequencies(d, base, sc('yarn'))
  want = []
  for t in theta:
    r = length / (2 * np.pi / t)  # Rotations of this pair within the trained length.
    g = 0.0 if r < 1 else 1.0 if r > 32 else (r - 1) / 31
    want.append((1 - g) * t / factor + g * t)
  np.testing.assert_allclose(yarn, want, rtol=1e-12)
  assert (m1, m2) == (1.0, 1.0) and m3 == pytest.approx(0.1 * np.log(factor) + 1)


def test_linear_scaling_is_position_interpolation():
  layer = make('rope', **{'rope.scaling.kind': 'linear', 'rope.scaling.factor': 4.0})
  q, k = random_qk(8)
  pos = jnp.asarray([[0, 4, 8, 12, 16, 20, 24]] * 2)
  theta = 10000.0 ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
  rq, _ = layer.rotate(q, k, pos, pos)
  for i in range(7):  # Position 4i behaves as position i.
    want = rotation(i, HEAD_DIM, theta) @ np.asarray(q, np.float64)[1, i, 0]
    np.testing.assert_allclose(np.asarray(rq)[1, i, 0], want, atol=1e-5)


def test_yarn_temperature_scales_logits():
  plain = make('rope')
  yarn = make('rope', **{'rope.scaling.kind': 'yarn', 'rope.scaling.factor': 1.0,
                         'rope.scaling.original_length': 32})
  q, k = random_qk(9)
  pos = jnp.asarray([[0, 1, 2, 3, 4, 5, 6]] * 2)
  np.testing.assert_allclose(logits(yarn, q, k, pos, pos), logits(plain, q, k, pos, pos),
                             atol=1e-5)  # s = 1: no change at all.
  yarn4 = make('rope', **{'rope.scaling.kind': 'yarn', 'rope.scaling.factor': 4.0,
                          'rope.scaling.original_length': 32})
  q4, k4 = yarn4.rotate(q, k, pos, pos)
  norm = lambda x: np.linalg.norm(np.asarray(x), axis=-1)
  np.testing.assert_allclose(norm(q4), norm(q) * (0.1 * np.log(4) + 1), rtol=1e-5)


def test_xpos_matches_its_formula():
  """q_n . k_m = sum_i zeta_i^((n-m)/B) (R(n) q)_i . (R(m) k)_i over pairs i."""
  layer = make('xpos', **{'xpos.scale_base': 16.0})
  q, k = random_qk(10)
  pos = jnp.asarray([[0, 1, 2, 3, 4, 5, 6]] * 2) + 3
  got = logits(layer, q, k, pos, pos)
  theta = 10000.0 ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
  zeta = (np.arange(0, HEAD_DIM, 2) / HEAD_DIM + 0.4) / 1.4
  qn, kn = np.asarray(q, np.float64), np.asarray(k, np.float64)
  for n, m in [(6, 2), (3, 3), (1, 5)]:
    rq = rotation(n + 3, HEAD_DIM, theta) @ qn[0, n, 1]
    rk = rotation(m + 3, HEAD_DIM, theta) @ kn[0, m, 1]
    want = sum(zeta[i] ** ((n - m) / 16.0) * (rq[2 * i] * rk[2 * i] + rq[2 * i + 1] * rk[2 * i + 1])
               for i in range(HEAD_DIM // 2)) / np.sqrt(HEAD_DIM)
    assert got[0, 1, n, m] == pytest.approx(want, abs=1e-4)


def test_position_constants_are_not_parameters():
  for kind in ('rope', 'xpos', 'alibi', 'sinusoidal', 'none'):
    assert not jax.tree.leaves(nnx.state(make(kind), nnx.Param)), kind
  for fields in ({'rope.keep_fraction': 0.5}, {'rope.scaling.kind': 'dynamic',
                                               'rope.scaling.original_length': 16}):
    assert not jax.tree.leaves(nnx.state(make('rope', **fields), nnx.Param)), fields
  assert jax.tree.leaves(nnx.state(make('t5'), nnx.Param))


def test_bias_is_float32_for_bfloat16_activations():
  for kind in ('t5', 'alibi', 'xl', 'shaw', 'kerple', 'fire', 'cope'):
    layer = make(kind).for_layer(0)
    q, k = (x.astype(jnp.bfloat16) for x in random_qk(11))
    pos = jnp.tile(jnp.arange(7)[None], (2, 1)) + 3000
    assert layer.logits_bias(q, k, pos, pos).dtype == jnp.float32, kind


BAD = [
    ('rope', {'rope.fraction': 0.375}, True, 'rotated dimension is 3'),
    ('rope', {'rope.scaling.kind': 'linear', 'rope.scaling.factor': 0.5}, True, 'factor=0.5'),
    ('rope', {'rope.scaling.kind': 'yarn', 'rope.scaling.factor': 2.0}, True, 'original_length'),
    ('rope', {'rope.layout': 'neox'}, True, 'rope.layout'),
    ('xpos', {}, False, 'causal attention only'),
    ('rope', {'alibi': {'x': 1}}, True, 'position.alibi is changed'),
    ('rope', {'t5.num_buckets': 64}, True, 'position.t5 is changed'),
    ('alibi', {'shaw.max_distance': 4}, True, 'position.shaw is changed'),
    ('shaw', {'shaw.max_distance': 0}, True, 'max_distance=0'),
    ('t5', {'t5.max_distance': 0}, True, 'max_distance=0'),
    ('t5', {'t5.num_buckets': 2}, False, 'buckets per side'),
    ('rope', {'rope.fraction': 0.25, 'rope.scaling.kind': 'ntk', 'rope.scaling.factor': 2.0},
     True, 'above 2'),
    ('xpos', {'xpos.scale_base': 1.0}, True, 'beyond float32 range'),
    ('rope', {'rope.keep_fraction': 0.0}, True, 'keep_fraction=0.0'),
    ('rope', {'rope.keep_fraction': 0.2}, True, 'keeps none of the 4'),  # floor(0.2 x 4) = 0.
    ('rope', {'rope.scaling.kind': 'llama3', 'rope.scaling.factor': 8.0}, True,
     'original_length'),
    ('rope', {'rope.scaling.kind': 'llama3', 'rope.scaling.original_length': 16,
              'rope.scaling.low_freq_factor': 4.0, 'rope.scaling.high_freq_factor': 1.0}, True,
     'low_freq_factor < high_freq_factor'),
    ('rope', {'rope.scaling.kind': 'linear', 'rope.scaling.high_freq_factor': 8.0}, True,
     'shape llama3 only'),
    ('rope', {'rope.scaling.kind': 'dynamic', 'rope.scaling.factor': 2.0}, True,
     'original_length'),
    ('rope', {'rope.fraction': 0.25, 'rope.scaling.kind': 'dynamic',
              'rope.scaling.original_length': 16}, True, 'above 2'),
    ('rope', {'rope.scaling.kind': 'yarn', 'rope.scaling.original_length': 16,
              'rope.scaling.ramp': 'cosine'}, True, "ramp='cosine' is unknown"),
    ('rope', {'rope.scaling.kind': 'ntk', 'rope.scaling.ramp': 'index'}, True,
     'shapes YaRN only'),
    ('kerple', {'kerple.variant': 'sqrt'}, True, 'kerple.variant'),
    ('fire', {}, False, 'causal attention only'),
    ('fire', {'fire.mlp_width': 0}, True, 'fire.mlp_width=0'),
    ('fire', {'fire.init_c': -0.1}, True, 'fire.init_c=-0.1 must be a finite number'),
    ('cope', {}, False, 'causal attention only'),
    ('cope', {'cope.max_position': 0}, True, 'cope.max_position=0'),
    ('rope', {'kerple.variant': 'power'}, True, 'position.kerple is changed'),
    ('alibi', {'fire.mlp_width': 8}, True, 'position.fire is changed'),
    ('kerple', {'cope.max_position': 8}, True, 'position.cope is changed'),
]


def test_a_partial_rotation_of_an_even_dimension_is_accepted():
  cfg = model_cfg('rope')
  with cfg.unlocked():
    cfg.position.rope.fraction = 0.25  # 8 * 0.25 = 2 rotated dimensions: one pair.
  positions.validate(cfg, 32, True)


@pytest.mark.parametrize('kind,fields,causal,message', BAD)
def test_bad_position_options(kind, fields, causal, message):
  cfg = model_cfg(kind)
  with cfg.unlocked():
    for dotted, value in fields.items():
      node = cfg.position
      *parents, leaf = dotted.split('.')
      for p in parents:
        node = node[p]
      node[leaf] = value
  if message == 'beyond float32 range':
    positions.validate(cfg, 32, causal)  # exp(32/2 * 1.25 / 1) = exp(20): fine at L = 32.
    with pytest.raises(errors.ConfigError, match=message):
      positions.validate(cfg, 256, causal)
    return
  with pytest.raises(errors.ConfigError, match=message):
    positions.validate(cfg, 32, causal)


def test_shaw_refuses_dot_product_attention():
  cfg = model_cfg('shaw')
  cfg.attention_impl = 'xla'
  with pytest.raises(errors.ConfigError, match='attention_impl=einsum'):
    positions.validate(cfg, 32, True)


def test_learned_per_layer_adds_one_table_at_each_layer_input():
  scheme = make('learned', **{'learned.per_layer': True, 'learned.max_length': 40})
  layers = model_cfg('learned').num_layers
  assert len(scheme.layers) == layers and not nnx.state(scheme.shared, nnx.Param)
  x = jnp.zeros((1, 3, model_cfg('learned').d_model))
  pos = jnp.asarray([[0, 5, 39]])
  np.testing.assert_array_equal(np.asarray(scheme.embed(x, pos)), 0.0)  # Nothing at the bottom.
  for i in range(layers):
    table = np.asarray(scheme.layers[i].table[...])
    np.testing.assert_allclose(np.asarray(scheme.for_layer(i).layer_input(x, pos))[0],
                               table[[0, 5, 39]])
  single = make('learned', **{'learned.max_length': 40})
  assert set(nnx.state(single.shared, nnx.Param)) == {'table'}
  assert not any(nnx.state(layer, nnx.Param) for layer in single.layers)


@pytest.mark.parametrize('kind', RELATIVE + ['learned', 'sinusoidal', 'fire'])
def test_one_query_against_all_keys_matches_full_attention(kind):
  """Decoding: a single query at position p against keys 0..p (q_len != k_len) gives the row p
  of full self-attention logits."""
  layer = make(kind).for_layer(1)
  q, k = random_qk(12)
  pos = jnp.tile(jnp.arange(7)[None], (2, 1))
  full = logits(layer, q, k, pos, pos)
  for p in (0, 4, 6):
    one = logits(layer, q[:, p:p + 1], k[:, :p + 1], pos[:, p:p + 1], pos[:, :p + 1])
    np.testing.assert_allclose(one[:, :, 0], full[:, :, p, :p + 1], atol=2e-4, rtol=1e-4)


def test_xpos_stays_finite_and_relative_at_long_positions():
  layer = make('xpos', **{'xpos.scale_base': 512.0})
  q, k = random_qk(13)
  pos = jnp.tile(jnp.arange(7)[None], (2, 1))
  base = logits(layer, q, k, pos, pos)
  far = logits(layer, q, k, pos + 60000, pos + 60000)  # zeta^(-60000/512) alone overflows.
  assert np.isfinite(far).all()
  np.testing.assert_allclose(far, base, rtol=2e-3, atol=2e-2)  # float32 angles at 6e4.


def test_xpos_applies_the_yarn_temperature():
  plain = make('xpos')
  yarn = make('xpos', **{'rope.scaling.kind': 'yarn', 'rope.scaling.factor': 4.0,
                         'rope.scaling.original_length': 1 << 20})  # All pairs extrapolate.
  q, k = random_qk(14)
  pos = jnp.tile(jnp.arange(7)[None], (2, 1))
  np.testing.assert_allclose(logits(yarn, q, k, pos, pos),
                             logits(plain, q, k, pos, pos) * (0.1 * np.log(4) + 1) ** 2,
                             rtol=1e-4, atol=1e-5)


def test_a_scaling_evaluated_under_another_kind_keeps_only_what_that_kind_reads():
  """scaling.switched: a model's own scaling with every option of its kind moved off its
  default (an imported YaRN's index ramp and attention factor, llama3's band, LongRoPE's pair
  factors) validates under each other kind once the options that kind does not read go back
  to their defaults, and keeps its factor, its original length and what describes the model
  (which dimensions an attention factor multiplies) where the new kind reads it; an attention
  factor is one kind's formula (YaRN's 0.1 ln s + 1, LongRoPE's own), and goes back too.
  LongRoPE itself needs its pair factors given."""
  from roformer import resolve  # pylint: disable=import-outside-toplevel
  from roformer.positions import scaling  # pylint: disable=import-outside-toplevel
  tempered = {'attention_factor': 1.2, 'attention_factor_dims': 'rotated'}
  own_options = {'yarn': {'alpha': 2.0, 'beta': 16.0, 'ramp': 'index', **tempered},
                 'llama3': {'low_freq_factor': 2.0, 'high_freq_factor': 8.0},
                 'longrope': {'short_factor': (1.0, 1.5, 2.0, 3.0),
                              'long_factor': (1.0, 4.0, 9.0, 20.0), **tempered},
                 'linear': {}, 'ntk': {}, 'dynamic': {}}
  for own, moved in own_options.items():
    for kind in own_options:
      cfg = kinds.tiny_config('rope')
      sc = cfg.model.position.rope.scaling
      sc.update(kind=own, factor=4.0, original_length=cfg.data.seq_len, **moved)
      reset = scaling.switched(sc, kind)
      assert reset == {k: scaling.DEFAULTS[k] for k in moved if k not in own_options[kind] or (
          kind != own and k not in scaling.KEPT)}, (own, kind)
      sc.update(kind=kind, **reset)
      if kind == 'longrope' and own != 'longrope':  # It needs its own pair factors.
        with pytest.raises(errors.ConfigError, match='short_factor has 0'):
          resolve.validate(cfg)
        continue
      resolve.validate(cfg)  # Refused before, for a moved option its new kind does not read.
      assert (sc.factor, sc.original_length) == (4.0, cfg.data.seq_len)
