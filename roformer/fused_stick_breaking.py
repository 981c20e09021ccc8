"""Stick-breaking attention (Tan et al., ICLR 2025) as Pallas kernels whose weights are computed
tile by tile and never materialised: `attend`, O(L) memory in the forward pass instead of the
einsum path's [batch, heads, L, L] per layer.

For logits z (q.k * scale plus the scheme's bias, as roformer/fused_bias.py computes them per
tile), query i takes from key j < i (j <= i with `attend_current`) the weight

  W_ij = sigmoid(z_ij) prod_{j<l<i} (1 - sigmoid(z_il)),
  log W_ij = log sigmoid(z_ij) + sum_{l>j} r_il,  r_il = log sigmoid(-z_il) on the keys it takes.

Forward: each query block visits its key blocks from the nearest (the diagonal) outwards and
carries, per row, the sum of r over the keys already visited (all of them later than the tile's
keys); a tile adds the sum over its own later keys with one [block, block] triangular matmul.
There is no normalisation and no running maximum (every weight is at most 1).

Backward: with G = dO V^T, the logits' gradient is

  dz_ij = sigmoid(-z_ij) G_ij W_ij - sigmoid(z_ij) sum_{m<j} G_im W_im

on the keys a query takes (the first term through its own weight, the second through the
weights of the earlier keys, whose sticks key j broke). It is three kernels. The first visits
the key blocks as the forward pass does, from the diagonal outwards, and writes per row and key
block the sum of r over the keys after the block and the block's sum of G W ([batch, heads, key
blocks, length] each: O(L^2 / block) memory); a running sum over the blocks gives each row's
sum of G W before every block. The query gradients (per query block) and the key and value
gradients (per key block) then read both and carry nothing. No sum is subtracted from another:
on long rows or large logits the sums of r reach thousands, and a weight near the diagonal
computed as exp(total - prefix) would keep only the rounding of the total; the sum of G W
before a key, computed as delta_i - the sum from the key on (flash attention's delta), loses
the gradients where the weights are concentrated. Masks, windows, positions, grouped heads and
the bias are those of roformer/fused_bias.py; on the CPU the kernels run in Pallas' interpret
mode.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from roformer import attention
from roformer import autodiff
from roformer import fused_bias as fb


def _triangle(size: int, relation) -> jax.Array:
  """[size, size] float32: 1 where relation(row l, column j) holds."""
  rows, cols = jnp.arange(size)[:, None], jnp.arange(size)[None, :]
  return relation(rows, cols).astype(jnp.float32)


def _sums(x, triangle):
  """Row sums of x [bq, bk] over the keys `triangle` [bk, bk] selects for each column, in full
  float32 (the sums reach exp(); a tensor-core float32 would round them to 10 bits)."""
  return jnp.dot(x, triangle, preferred_element_type=jnp.float32,
                 precision=jax.lax.Precision.HIGHEST)


def _weights(z, mask, later):
  """(r, weights) of a tile's logits z, given each row's sum of r over the keys after the tile
  (`later` [bq])."""
  r = jnp.where(mask, jax.nn.log_sigmoid(-z), 0.0)
  after = _sums(r, _triangle(z.shape[1], jnp.greater))  # sum over the tile's keys l > j
  return r, jnp.where(mask, jnp.exp(jax.nn.log_sigmoid(z) + later[:, None] + after), 0.0)


def _tile_weights(cfg, q, k, q_slots, k_slots, q_pos, k_pos, q_seg, k_seg, params, row, col,
                  later):
  """(r, weights) of one tile."""
  z, mask, _ = fb.tile(cfg, q, k, q_slots, k_slots, q_pos, k_pos, q_seg, k_seg, params, row, col)
  return _weights(z, mask, later)


def _forward_kernel(q_ref, k_ref, v_ref, q_pos_ref, k_pos_ref, q_seg_ref, k_seg_ref, params_ref,
                    row_ref, col_ref, o_ref, *, cfg: fb.Static):
  i = pl.program_id(2)
  bq, bk = cfg.block_q, cfg.block_k
  q = q_ref[...]
  q_slots = i * bq + jnp.arange(bq)
  q_pos, q_seg, row = q_pos_ref[...], q_seg_ref[...], row_ref[...]
  params = fb.tile_params(cfg, params_ref)
  lo, hi = fb.key_blocks(cfg, i, k_ref.shape[0] // bk)

  def body(n, carry):
    acc, later = carry
    j = hi - 1 - n  # Nearest key block first.
    keys = pl.ds(j * bk, bk)
    r, w = _tile_weights(cfg, q, k_ref[keys, :], q_slots, j * bk + jnp.arange(bk),
                                  q_pos, k_pos_ref[keys], q_seg, k_seg_ref[keys], params, row,
                                  col_ref[keys], later)
    acc = acc + jnp.dot(w.astype(v_ref.dtype), v_ref[keys, :],
                        preferred_element_type=jnp.float32)
    return acc, later + jnp.sum(r, axis=1)

  init = (jnp.zeros((bq, q.shape[-1]), jnp.float32), jnp.zeros((bq,), jnp.float32))
  acc, _ = jax.lax.fori_loop(0, hi - lo, body, init)
  o_ref[...] = acc.astype(o_ref.dtype)


def _tile_grad(z, mask, g, later, before):
  """(weights, dz) of a tile, given each row's sums of r over the keys after the tile and of
  G W over the keys before it (`later`, `before` [bq]); for roformer/fused_bias.py's
  `dq_kernel` and `dkv_kernel`."""
  _, w = _weights(z, mask, later)
  gw = g * w
  earlier = before[:, None] + _sums(gw, _triangle(gw.shape[1], jnp.less))  # keys m < j
  return w, jnp.where(mask, jax.nn.sigmoid(-z) * gw - jax.nn.sigmoid(z) * earlier, 0.0)


def _stats_kernel(q_ref, k_ref, v_ref, q_pos_ref, k_pos_ref, q_seg_ref, k_seg_ref, params_ref,
                  row_ref, col_ref, do_ref, later_ref, sums_ref, *, cfg: fb.Static):
  """Per row and key block: the sum of r over the keys after the block (carried from the
  diagonal outwards, as the forward pass does) and the block's sum of G W; zeros for the
  blocks the row does not see."""
  i = pl.program_id(2)
  bq, bk = cfg.block_q, cfg.block_k
  q, do = q_ref[...], do_ref[...]
  q_slots = i * bq + jnp.arange(bq)
  q_pos, q_seg, row = q_pos_ref[...], q_seg_ref[...], row_ref[...]
  params = fb.tile_params(cfg, params_ref)
  num_k = k_ref.shape[0] // bk
  lo, hi = fb.key_blocks(cfg, i, num_k)
  zeros = jnp.zeros((1, bq), jnp.float32)

  def unseen(j, _):
    later_ref[pl.ds(j, 1), :] = zeros
    sums_ref[pl.ds(j, 1), :] = zeros

  jax.lax.fori_loop(0, lo, unseen, None)
  jax.lax.fori_loop(hi, num_k, unseen, None)

  def body(n, later):
    j = hi - 1 - n
    later_ref[pl.ds(j, 1), :] = later[None]
    keys = pl.ds(j * bk, bk)
    r, w = _tile_weights(cfg, q, k_ref[keys, :], q_slots, j * bk + jnp.arange(bk),
                                  q_pos, k_pos_ref[keys], q_seg, k_seg_ref[keys], params, row,
                                  col_ref[keys], later)
    g = jnp.dot(do, v_ref[keys, :].T, preferred_element_type=jnp.float32)
    sums_ref[pl.ds(j, 1), :] = jnp.sum(g * w, axis=1)[None]
    return later + jnp.sum(r, axis=1)

  jax.lax.fori_loop(0, hi - lo, body, jnp.zeros((bq,), jnp.float32))


def _forward(cfg: fb.Static, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  b, h, length, dh = q.shape
  inputs = fb.specs(cfg, length, dh, by_query=True)
  return pl.pallas_call(
      functools.partial(_forward_kernel, cfg=cfg),
      grid=(b, h, length // cfg.block_q), in_specs=inputs,
      out_specs=pl.BlockSpec((None, None, cfg.block_q, dh), lambda b, h, i: (b, h, i, 0)),
      out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
      interpret=cfg.interpret, compiler_params=fb.compiler_params())(
          q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col)


def reference(cfg: fb.Static, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  """The same attention with the logits materialised [batch, heads, q, k] (the kernels'
  layout), the weights by `attention.stick_breaking_weights`: what runs with custom gradients
  off."""
  s, mask = fb.materialised_logits(cfg, q, k, q_pos, k_pos, q_seg, k_seg, params, row, col,
                                   causal=False)  # The weights take the causal keys.
  w = attention.stick_breaking_weights(s, cfg.diagonal, mask)
  return jnp.einsum('bhqk,bhkd->bhqd', w.astype(v.dtype), v).astype(q.dtype)


@autodiff.custom_vjp('fused_stick_breaking', nondiff_argnums=(0,),
                     why='the Pallas kernel has no autodiff rule: its backward is three kernels',
                     plain=lambda cfg, *args: reference(cfg, *args))
def _attend(cfg: fb.Static, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  return _forward(cfg, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col)


def _attend_fwd(cfg, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  out = _forward(cfg, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col)
  return out, (q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col)


def _attend_bwd(cfg, residuals, g):
  b, h, length, dh = residuals[0].shape
  num_k = length // cfg.block_k
  args = (*residuals, g)
  by_query = fb.specs(cfg, length, dh, by_query=True)
  by_query.append(pl.BlockSpec((None, None, cfg.block_q, dh), lambda b, h, i: (b, h, i, 0)))
  per_row = pl.BlockSpec((None, None, num_k, cfg.block_q), lambda b, h, i: (b, h, 0, i))
  blocks_by_rows = jax.ShapeDtypeStruct((b, h, num_k, length), jnp.float32)
  later, sums = pl.pallas_call(
      functools.partial(_stats_kernel, cfg=cfg), grid=(b, h, length // cfg.block_q),
      in_specs=by_query, out_specs=[per_row, per_row], out_shape=[blocks_by_rows] * 2,
      interpret=cfg.interpret, compiler_params=fb.compiler_params())(*args)
  # Each row's sum of G W over the key blocks before each one: an exclusive running sum.
  before = jnp.concatenate([jnp.zeros_like(sums[:, :, :1]),
                            jnp.cumsum(sums, axis=2)[:, :, :-1]], axis=2)
  return fb.backward(cfg, _tile_grad, residuals, g, later, before, a_by_query=per_row,
                     a_by_key=pl.BlockSpec((None, None, None, length),
                                           lambda b, h, j: (b, h, j, 0)),
                     per_key_block=True)


_attend.defvjp(_attend_fwd, _attend_bwd)


def attend(q, k, v, positions, segments, bias: fb.Bias, *, params=None, row=None, col=None,
           attend_current: bool = False, window: int = 0, scale: float | None = None,
           block_q: int = 64, block_k: int = 64, interpret: bool | None = None):
  """Causal stick-breaking attention of q [batch, len, heads, head_dim] over k, v of the same
  shape, with `bias` computed per tile as roformer/fused_bias.py's `attend` takes it (the same
  arguments; `attend_current`: a query may take its own key). Returns [batch, len, heads,
  head_dim]; a query that takes no key (the first of a segment, padding) gets 0."""
  if interpret is None:
    interpret = jax.default_backend() == 'cpu'
  cfg = fb.Static(bias, float(q.shape[-1] ** -0.5 if scale is None else scale), True,
                  int(window), block_q, block_k, interpret, diagonal=attend_current)
  args = fb.kernel_inputs(q, k, v, positions, segments, bias, params, row, col,
                          math.lcm(block_q, block_k))
  return fb.run_kernel(_attend, cfg, args, q.shape[1])
