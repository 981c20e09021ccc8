"""Position schemes against independent float64 numpy formulas."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from roformer import errors
from roformer import positions
from tests import kinds


def rotation_matrix(m: int, d: int, base: float = 10000.0) -> np.ndarray:
  """The RoFormer paper's block-diagonal R(m) (eq. 15), written out in float64."""
  r = np.zeros((d, d))
  for i in range(1, d // 2 + 1):
    theta = base ** (-2 * (i - 1) / d)
    c, s = np.cos(m * theta), np.sin(m * theta)
    r[2 * i - 2:2 * i, 2 * i - 2:2 * i] = [[c, -s], [s, c]]
  return r


@pytest.mark.parametrize('base', [10000.0, 500.0])
def test_apply_rotary_equals_block_diagonal_matrix(base):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 7, 3, 8))  # [batch, seq, heads, head_dim]
  pos = rng.integers(0, 3000, size=(2, 7))
  got = np.asarray(positions.apply_rotary(jnp.asarray(x, jnp.float32), jnp.asarray(pos), base))
  want = np.einsum('bsij,bshj->bshi',
                   np.stack([[rotation_matrix(m, 8, base) for m in row] for row in pos]), x)
  # float32 angles: |m * theta| * eps(float32) bounds the angle error (~2e-4 rad at m = 3000).
  np.testing.assert_allclose(got, want, atol=4 * 3000 * 6e-8 * np.abs(x).max())
  small = np.asarray(positions.apply_rotary(jnp.asarray(x, jnp.float32), jnp.asarray(pos % 16),
                                            base))
  want_small = np.einsum('bsij,bshj->bshi', np.stack(
      [[rotation_matrix(m, 8, base) for m in row] for row in pos % 16]), x)
  np.testing.assert_allclose(small, want_small, atol=1e-5)


@pytest.mark.parametrize('scaled', [False, True])
def test_angles_are_evaluated_once_per_position_not_per_element(scaled):
  """In the compiled forward and backward passes, no cosine or sine sits in a loop over the
  [batch, seq, heads, head_dim] elements (XLA:CPU fused them there, evaluating both for every
  element of every head); xPos's scale likewise stays out of it."""
  x = jnp.ones((2, 16, 4, 8))
  pos = jnp.tile(jnp.arange(16), (2, 1))

  def loss(y, pos):
    s = jnp.exp(pos[..., None] * jnp.full(4, 0.01)) if scaled else None
    return (positions.rotate_pairs(y, pos, positions.rope_frequencies(8), scale=s) ** 2).sum()

  hlo = jax.jit(jax.grad(loss)).lower(x, pos).compile().as_text()
  computations = hlo.split('\n\n')
  transcendental = [c for c in computations if any(
      f' {op}(' in c for op in ('cosine', 'sine', 'exponential'))]
  assert transcendental  # Sanity: the angles and the scale are there ...
  for c in transcendental:  # ... each on [batch, seq, d/2] arrays, no wider.
    assert 'f32[2,16,4,8]' not in c and 'f32[2,16,4,4' not in c, c


@pytest.mark.parametrize('layout', ['interleaved', 'half'])
def test_rotation_gradient_is_the_transposed_matrix(layout):
  """rotate_pairs' backward (the rotation by -m) against R(m)^T g in float64; the `half`
  layout is the paper's matrix with the dimensions permuted (pair i = (i, i + d/2))."""
  rng = np.random.default_rng(1)
  x = rng.normal(size=(2, 5, 3, 8)).astype(np.float32)
  g = rng.normal(size=x.shape)
  pos = rng.integers(0, 64, size=(2, 5))
  perm = np.arange(8) if layout == 'interleaved' else np.stack(
      [np.arange(4), np.arange(4) + 4], -1).reshape(-1)  # paper index -> layout index
  inv_freq = positions.rope_frequencies(8)
  _, vjp = jax.vjp(lambda y: positions.rotate_pairs(y, jnp.asarray(pos), inv_freq, layout),
                   jnp.asarray(x))
  got = np.asarray(vjp(jnp.asarray(g, jnp.float32))[0])
  mats = np.zeros((2, 5, 8, 8))
  for b, row in enumerate(pos):
    for s, m in enumerate(row):
      mats[b, s][np.ix_(perm, perm)] = rotation_matrix(m, 8)
  np.testing.assert_allclose(got, np.einsum('bsji,bshj->bshi', mats, g), atol=2e-5)
  forward = np.asarray(positions.rotate_pairs(jnp.asarray(x), jnp.asarray(pos), inv_freq,
                                              layout))
  np.testing.assert_allclose(forward, np.einsum('bsij,bshj->bshi', mats, x), atol=2e-5)


def test_rope_frequencies_match_paper():
  d = 16
  want = [10000.0 ** (-2 * (i - 1) / d) for i in range(1, d // 2 + 1)]
  np.testing.assert_allclose(positions.rope_frequencies(d), want, rtol=1e-12)
  assert positions.rope_frequencies(d)[0] == 1.0  # theta_1 = 1: the exponent is not off by 2.


def test_rope_logits_depend_only_on_relative_position():
  rng = np.random.default_rng(1)
  q = jnp.asarray(rng.normal(size=(1, 6, 2, 16)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(1, 6, 2, 16)), jnp.float32)
  pos = jnp.arange(6)[None]

  def logits(shift):
    qr = positions.apply_rotary(q, pos + shift)
    kr = positions.apply_rotary(k, pos + shift)
    return np.asarray(jnp.einsum('bqhd,bkhd->bhqk', qr, kr))

  base = logits(0)
  for shift in (1, 17, 1000):
    np.testing.assert_allclose(logits(shift), base, atol=2e-4)
  # And q_m . k_n = q^T R(n - m) k with the explicit matrix.
  qn, kn = np.asarray(q, np.float64), np.asarray(k, np.float64)
  for m, n in [(0, 5), (4, 1), (3, 3)]:
    want = qn[0, m, 0] @ rotation_matrix(n - m, 16) @ kn[0, n, 0]
    assert abs(base[0, 0, m, n] - want) < 1e-4


def test_rope_angles_exact_for_bf16_inputs():
  """Angles come from int positions in float32: a bf16 input at position 3001 is rotated by
  3001 * theta, not by bf16(3001) = 3008 * theta."""
  x = jnp.ones((1, 1, 1, 2), jnp.bfloat16)
  got = np.asarray(positions.apply_rotary(x, jnp.array([[3001]])), np.float64)[0, 0, 0]
  want = rotation_matrix(3001, 2) @ np.ones(2)
  np.testing.assert_allclose(got, want, atol=1e-2)


def test_sinusoidal_table_matches_vaswani_formula():
  d, pos = 12, np.arange(50)
  want = np.zeros((50, d))
  for p in pos:
    for i in range(d):
      k = i // 2
      angle = p / 10000.0 ** (2 * k / d)
      want[p, i] = np.sin(angle) if i % 2 == 0 else np.cos(angle)
  got = np.asarray(positions.sinusoidal_table(jnp.asarray(pos), d))
  np.testing.assert_allclose(got, want, atol=2e-5)


def test_registry_has_foundation_kinds():
  assert {'none', 'sinusoidal', 'learned', 'rope'} <= set(positions.kinds())


def test_rope_has_no_parameters_and_learned_does():
  from flax import nnx
  from configs import test as test_config
  cfg = test_config.get_config().model
  for kind, n_params in (('rope', 0), ('sinusoidal', 0), ('none', 0),
                         ('learned', cfg.position.learned.max_length * cfg.d_model)):
    cfg.position.kind = kind
    scheme = kinds.Built(cfg, causal=True, rngs=nnx.Rngs(0))
    leaves = jax.tree.leaves(nnx.state(scheme, nnx.Param))
    assert sum(x.size for x in leaves) == n_params, kind


def test_a_misspelt_kind_is_refused_with_the_closest_kind_named():
  with pytest.raises(errors.ConfigError, match=r"kind='alibbi' is not a known position scheme "
                     r"\(did you mean 'alibi'\?\)\. Fix: choose one of"):
    positions.scheme('alibbi')
  with pytest.raises(errors.ConfigError, match=r"\(did you mean 'rope\+fox'\?\)"):
    positions.scheme('rope+fx')
  with pytest.raises(errors.ConfigError, match=r"kind='zzzz' is not a known position scheme\. "):
    positions.scheme('zzzz')


@pytest.mark.parametrize('kind,message', [
    ('none+fox', r"'none' gives no position signal for the bias to add to: fox alone is that "
                 r'model\. Fix: .*A another kind than none'),
    ('fox+fox', r"'fox' is itself a bias only: fox alone is its bias"),
    ('rope+alibi', r"only \['fox'\] can be added to another kind \(B in A\+B\), not 'alibi'"),
    ('nope', r"did you mean 'none'\? NoPE is position.kind=none"),
    ('stick_breaking', r'stick_breaking is a value of config.model.attention.kind: '
                       r'--config.model.attention.kind=stick_breaking'),
    ('rope,none', r"a list of them is a tuple, --config.model.layer_kinds=\"\('rope','none'\)\""),
])
def test_a_kind_meant_otherwise_is_refused_saying_what_was_meant(kind, message):
  """Two known kinds that do not combine say why; NoPE's name, an attention kind and a list
  typed where one kind goes each name the field that was meant."""
  with pytest.raises(errors.ConfigError, match=message):
    positions.scheme(kind)


def test_a_sequence_past_the_learned_table_is_told_to_shorten_first():
  """A fine-tune of a learned-position encoder past its table was told to raise max_length,
  then refused for changing the pretrained table: shortening comes first, and raising the
  table is for a new model."""
  with pytest.raises(errors.ConfigError, match=r'Fix: shorten the sequence to at most 16 \(a '
                     r'model that starts from a trained one, config.init_from, keeps its '
                     r'table\), or, for a new model, raise .*max_length to at least 32\.'):
    positions.scheme('learned').validate(
        ml_collections.ConfigDict({'learned': {'max_length': 16, 'per_layer': False}}), None, 32,
        True)
