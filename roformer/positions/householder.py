"""Data-dependent transforms between key and query: PaTH (Yang et al., NeurIPS 2025).

Each token t of a head gives a Householder-like matrix H_t = I - beta_t w_t w_t^T, with w_t a
unit vector and beta_t in (0, 2), both computed from the token; the logit of query i for key
j <= i is

  s_ij = k_j^T (H_{j+1} H_{j+2} ... H_i) q_i        (q_i . k_j when j = i),

then the usual 1/sqrt(d). Where RoPE rotates by a fixed angle per token, PaTH applies a
reflection-like map chosen by the token: the map between key and query depends on what lies
between them. Every H_t has norm at most 1 (eigenvalues 1 and 1 - beta_t), so every product
does too, and no logit grows with the distance.

How w and beta are computed (as in the paper's reference layer): w_t is a low-rank projection
of the layer's (normed) input (d_model -> `path.w_rank` -> heads x head_dim), then a causal
depthwise convolution over the last `path.conv_size` tokens, SiLU, and L2 normalisation per
head; beta_t = 2 sigmoid(v . x_t + b) per head (b = `path.beta_bias_init`, 0: beta starts at 1).

The compact form (the UT transform of products of Householder matrices). Applying the
H's to the query from the right, p_t = H_{t+1} ... H_i q_i satisfies p_{t-1} = p_t - beta_t w_t
(w_t . p_t), and s_ij = k_j . p_j. With x_it = w_t . p_t for t <= i (0 beyond),

  x_it = q_i . w_t - sum_{s > t} x_is beta_s (w_s . w_t),  i.e.  X (I + M) = R,

R_it = q_i . w_t (t <= i) and M_st = beta_s (w_s . w_t) for s > t, a unit lower triangular
system solved by blocked substitution (matmuls; see `_solve_rows`); then

  s_ij = q_i . k_j - sum_{t > j} x_it beta_t (w_t . k_j).

Everything is a [L, L] matrix per head (q.k, q.w, w.w, w.k, X): memory O(L^2 + L d), never a
d x d matrix per pair. The cost is O(L^2 d + L^3) per head (the solve and one [L, L] product);
the paper's blockwise kernel brings the L^3 down on long rows, which these lengths do not need.
The x_it are inner products of unit vectors with bounded vectors (|p_t| <= |q_i|), so the
substitution is as stable in float32 as the recurrence it solves.

Packed rows and windows need nothing more in the solve: R is masked by the attention mask, and
every t between a visible key and its query is itself visible. The convolution uses tap s of
token t only when the positions say that token t - s is s before it, so never across the start
of a packed segment: that is what this kind reads the positions for. The key/value cache holds,
per slot and head, the convolution's input (a new token's convolution reads the slots before
it) and beta (float32); the keys stay as they are cached for every scheme, and each step solves
the system for its queries over the filled slots (O(slots^2 d) per step, where rewriting the
cached keys in place, as the paper's decoder does, would be O(slots d): this codebase keeps one
key cache for every scheme). Causal only: the product runs from the key to the query.
"""

import jax
import jax.numpy as jnp

from roformer import autodiff
from roformer import specs
from roformer import variables
from roformer.positions import base


_BLOCK = 32  # Columns solved together: the substitution's matmuls are [T, B] by [B, S].


def _unit_lower_inverse(m: jax.Array) -> jax.Array:
  """(I + M)^-1 for M [..., B, B] strictly lower triangular, row by row (forward
  substitution: row i is e_i minus M[i, :i] times the rows before it)."""
  size = m.shape[-1]
  eye = jnp.eye(size, dtype=m.dtype)

  def row(i, inverse):  # M's row i is zero from column i on: only the rows before it count.
    value = eye[i] - jnp.einsum('...j,...jk->...k', m[..., i, :], inverse)
    return inverse.at[..., i, :].set(value)

  return jax.lax.fori_loop(1, size, row, jnp.broadcast_to(eye, m.shape))


def _substitute(r: jax.Array, m: jax.Array) -> jax.Array:
  """X with X (I + M) = R by blocked back substitution: the last block of columns first,
  X_J = (R_J - X_{>J} M_{>J,J}) (I + M_JJ)^-1."""
  size = m.shape[-1]
  starts = list(range(0, size, _BLOCK))
  blocks = {}
  for start in reversed(starts):
    stop = min(start + _BLOCK, size)
    rhs = r[..., start:stop]
    if stop < size:
      later = jnp.concatenate([blocks[s] for s in starts if s >= stop], axis=-1)
      rhs = rhs - jnp.einsum('...ts,...sj->...tj', later, m[..., stop:, start:stop])
    blocks[start] = jnp.einsum('...tj,...jk->...tk', rhs,
                               _unit_lower_inverse(m[..., start:stop, start:stop]))
  return jnp.concatenate([blocks[s] for s in starts], axis=-1)


@autodiff.custom_vjp('householder_solve', why='the transposed system solved by the same substitution')
def _solve_rows(r: jax.Array, m: jax.Array) -> jax.Array:
  """X with X (I + M) = R, for M strictly lower triangular: [..., T, S] from R [..., T, S] and
  M [..., S, S]. Written with matmuls rather than LAPACK's trsm, which XLA:CPU calls through
  the host BLAS: several of them running at once in one step (the forward and backward
  solves of the layers) hung the train step."""
  return _substitute(r, m)


def _solve_rows_fwd(r, m):
  x = _substitute(r, m)
  return x, (x, m)


def _solve_rows_bwd(residuals, g):
  """With A = I + M: dR = G A^-T (the transposed system, solved by reversing the order of
  both axes, which makes A^T lower triangular again) and dM = -X^T dR below the diagonal."""
  x, m = residuals
  m_t = jnp.flip(jnp.swapaxes(m, -1, -2), (-1, -2))
  dr = jnp.flip(_substitute(jnp.flip(g, -1), m_t), -1)
  size = m.shape[-1]
  lower = jnp.arange(size)[:, None] > jnp.arange(size)[None, :]
  dm = jnp.where(lower, -jnp.einsum('...ts,...tu->...su', x, dr), 0.0)
  return dr, dm


_solve_rows.defvjp(_solve_rows_fwd, _solve_rows_bwd)


def path_scores(q, k, w, beta, visible, query_slots):
  """PaTH's logits (no 1/sqrt(d), masked entries left as they come) of queries q [..., T, d]
  at key slots `query_slots` [T] over keys k, unit vectors w [..., S, d] and beta [..., S];
  `visible` [..., T, S] (bool) marks the keys each query sees, which must include every key
  between a visible key and the query."""
  f32 = lambda t: t.astype(jnp.float32)
  q, k, w, beta = f32(q), f32(k), f32(w), f32(beta)
  slots = jnp.arange(k.shape[-2])
  after = slots[:, None] > slots[None, :]  # [S, S]: slot t comes after slot j.
  r = jnp.where(visible & (slots[None, :] <= query_slots[:, None]),
                jnp.einsum('...td,...sd->...ts', q, w), 0.0)
  m = jnp.where(after, beta[..., :, None] * jnp.einsum('...sd,...td->...st', w, w), 0.0)
  x = _solve_rows(r, m)
  wk = jnp.where(after, jnp.einsum('...td,...jd->...tj', w, k), 0.0)
  return jnp.einsum('...id,...jd->...ij', q, k) - jnp.einsum('...it,...tj->...ij',
                                                             x * beta[..., None, :], wk)


def path_logits(q: jax.Array, k: jax.Array, w: jax.Array, beta: jax.Array) -> jax.Array:
  """PaTH's logits for one row: q, k, w [..., L, d] (w used as given), beta [..., L] ->
  [..., L, L] with entry (i, j) = k_j^T (H_{j+1} ... H_i) q_i for j <= i, H_t = I - beta_t
  w_t w_t^T, and -inf above the diagonal (masked); no 1/sqrt(d)."""
  length = q.shape[-2]
  causal = jnp.arange(length)[:, None] >= jnp.arange(length)[None, :]
  scores = path_scores(q, k, w, beta, causal, jnp.arange(length))
  return jnp.where(causal, scores, -jnp.inf)


def short_convolution(a: jax.Array, kernel: jax.Array, positions: jax.Array) -> jax.Array:
  """Causal depthwise convolution over the tokens of a row: a [batch, L, C], kernel [K, C]
  (tap 0 the token itself, tap s the token s slots before), positions [batch, L]. Tap s of token
  t is used only when the positions say that token t - s is s before it (positions[t] -
  positions[t - s] == s): never across the start of a packed segment (positions restart at 0
  there), and the same at any offset of the positions."""
  out = a * kernel[0]
  for s in range(1, kernel.shape[0]):
    earlier = lambda t: jnp.pad(t, ((0, 0), (s, 0)) + ((0, 0),) * (t.ndim - 2))[:, :t.shape[1]]
    adjacent = (positions - earlier(positions) == s) & (jnp.arange(a.shape[1]) >= s)
    out = out + jnp.where(adjacent[..., None], earlier(a) * kernel[s], 0.0)
  return out


class _PathLayer(base.Layer):
  """One layer's Householder directions and strengths, from the layer's input."""

  def __init__(self, model_cfg, *, causal, rngs):
    del causal
    d, heads = model_cfg.d_model, model_cfg.num_heads
    opts = model_cfg.position.path
    self.num_heads, self.head_dim = heads, base.head_dim(model_cfg)
    rank, width = opts.w_rank, heads * self.head_dim
    normal = lambda shape, fan_in: jax.random.normal(rngs.params(), shape, jnp.float32) * fan_in ** -0.5
    if rank:  # Low rank: d_model -> rank -> heads x head_dim.
      self.w_down = variables.param(normal((d, rank), d), ('embed', None), decay=True)
      self.w_up = variables.param(normal((rank, width), rank), (None, 'heads'), decay=True)
    else:
      self.w_down = None
      self.w_up = variables.param(normal((d, width), d), ('embed', 'heads'), decay=True)
    self.conv_size = opts.conv_size
    if self.conv_size:  # PyTorch's default for a depthwise convolution: U(+-1/sqrt(K)).
      bound = self.conv_size ** -0.5
      self.conv = variables.param(
          jax.random.uniform(rngs.params(), (self.conv_size, width), jnp.float32, -bound, bound),
          (None, 'heads'), decay=True)
    self.beta_kernel = variables.param(normal((d, heads), d), ('embed', None), decay=True)
    self.beta_bias = variables.param(jnp.full((heads,), opts.beta_bias_init, jnp.float32),
                                     (None,), decay=False)

  def prepare(self, x, positions, shared):
    """The convolution's input a_t ([batch, len, heads x head_dim]) and beta_t ([batch, len,
    heads]) of the new tokens, both float32."""
    del positions, shared
    x = x.astype(jnp.float32)
    a = x @ self.w_down[...] @ self.w_up[...] if self.w_down is not None else x @ self.w_up[...]
    beta = 2.0 * jax.nn.sigmoid(x @ self.beta_kernel[...] + self.beta_bias[...])
    return {'a': a, 'beta': beta}

  def directions(self, a: jax.Array, positions: jax.Array) -> jax.Array:
    """The unit vectors w_t [batch, len, heads, head_dim] from the convolution's inputs."""
    if self.conv_size:
      a = jax.nn.silu(short_convolution(a, self.conv[...], positions))
    w = a.reshape(a.shape[:2] + (self.num_heads, self.head_dim))
    return w * jax.lax.rsqrt(jnp.sum(w * w, axis=-1, keepdims=True) + 1e-6)

  def cache_state(self, batch: int, max_len: int):
    return {'a': jnp.zeros((batch, max_len, self.num_heads * self.head_dim), jnp.float32),
            'beta': jnp.zeros((batch, max_len, self.num_heads), jnp.float32)}

  def extend_cache(self, ctx, state, index):
    state = {name: jax.lax.dynamic_update_slice_in_dim(state[name], ctx[name], index, axis=1)
             for name in ('a', 'beta')}
    return {**state, 'first_slot': index}, state

  def logits(self, q, k, q_pos, k_pos, mask, ctx):
    """[batch, heads, q_len, k_len], scaled by 1/sqrt(head_dim); masked entries are left to
    the attention (they are finite)."""
    heads_first = lambda t: jnp.moveaxis(t, 2, 1)  # [b, len, h, ...] -> [b, h, len, ...].
    w = heads_first(self.directions(ctx['a'], k_pos))
    beta = jnp.transpose(ctx['beta'], (0, 2, 1))
    query_slots = ctx.get('first_slot', 0) + jnp.arange(q.shape[1])
    visible = jnp.broadcast_to(mask, mask.shape[:2] + (q.shape[1], k.shape[1]))
    scores = path_scores(heads_first(q), heads_first(k), w, beta, visible, query_slots)
    return scores * self.head_dim ** -0.5


@base.register('path')
class Path(base.PositionScheme):
  """PaTH's accumulated Householder transforms (see the module docstring): no other position
  signal; with FoX's forget gates as `path+fox`."""

  options = {'path': {
      'w_rank': specs.Int(0, default=32),
      'conv_size': specs.Int(0, 8, default=3),
      'beta_bias_init': specs.Float(-20.0, 20.0, default=0.0)}}
  capabilities = base.Capabilities(
      causal_only=True, computes_logits=True,
      logits_term='its logits apply data-dependent Householder transforms between key and query')
  causal_reason = 'the logit of key j applies the transforms of the tokens from j + 1 to the query'
  Layer = _PathLayer
