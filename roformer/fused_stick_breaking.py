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
There is no normalisation and no running maximum (every weight is at most 1). The rows' totals
of r are kept for the backward pass.

Backward: with G = dO V^T, the logits' gradient is

  dz_ij = sigmoid(-z_ij) G_ij W_ij - sigmoid(z_ij) sum_{m<j} G_im W_im

on the keys a query takes (the first term through its own weight, the second through the
weights of the earlier keys, whose sticks key j broke). The query-gradient kernel visits key
blocks from the first, carrying each row's prefix of r (the weights are total - prefix) and of
G W, and writes both at each key block's start ([batch, heads, key blocks, length]: O(L^2 /
block) memory) for the key-gradient kernel, which then visits the query blocks of a key block
without carrying anything. Masks, windows, positions, grouped heads and the bias are those of
roformer/fused_bias.py; on the CPU the kernels run in Pallas' interpret mode.
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


def _tile_weights(cfg, q, k, q_slots, k_slots, q_pos, k_pos, q_seg, k_seg, params, row, col,
                  later):
  """(z, mask, distances, r, weights) of one tile, given each row's sum of r over the keys after
  the tile (`later` [bq])."""
  z, mask, d = fb.tile(cfg, q, k, q_slots, k_slots, q_pos, k_pos, q_seg, k_seg, params, row, col)
  r = jnp.where(mask, jax.nn.log_sigmoid(-z), 0.0)
  after = _sums(r, _triangle(cfg.block_k, jnp.greater))  # sum over the tile's keys l > j
  w = jnp.where(mask, jnp.exp(jax.nn.log_sigmoid(z) + later[:, None] + after), 0.0)
  return z, mask, d, r, w


def _forward_kernel(q_ref, k_ref, v_ref, q_pos_ref, k_pos_ref, q_seg_ref, k_seg_ref, params_ref,
                    row_ref, col_ref, o_ref, total_ref, *, cfg: fb.Static):
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
    _, _, _, r, w = _tile_weights(cfg, q, k_ref[keys, :], q_slots, j * bk + jnp.arange(bk),
                                  q_pos, k_pos_ref[keys], q_seg, k_seg_ref[keys], params, row,
                                  col_ref[keys], later)
    acc = acc + jnp.dot(w.astype(v_ref.dtype), v_ref[keys, :],
                        preferred_element_type=jnp.float32)
    return acc, later + jnp.sum(r, axis=1)

  init = (jnp.zeros((bq, q.shape[-1]), jnp.float32), jnp.zeros((bq,), jnp.float32))
  acc, total = jax.lax.fori_loop(0, hi - lo, body, init)
  o_ref[...] = acc.astype(o_ref.dtype)
  total_ref[...] = total


def _logits_grad(z, mask, w, g, taken):
  """dz of a tile: G W and the prefix of G W over the row's earlier keys (`taken` [bq]: the
  sum before the tile); returns (dz, G W)."""
  gw = g * w
  before = taken[:, None] + _sums(gw, _triangle(gw.shape[1], jnp.less))  # keys m < j
  dz = jnp.where(mask, jax.nn.sigmoid(-z) * gw - jax.nn.sigmoid(z) * before, 0.0)
  return dz, gw


def _dq_kernel(q_ref, k_ref, v_ref, q_pos_ref, k_pos_ref, q_seg_ref, k_seg_ref, params_ref,
               row_ref, col_ref, do_ref, total_ref, dq_ref, drow_ref, dparams_ref, prefix_ref,
               taken_ref, *, cfg: fb.Static):
  i = pl.program_id(2)
  bq, bk = cfg.block_q, cfg.block_k
  q, do = q_ref[...], do_ref[...]
  q_slots = i * bq + jnp.arange(bq)
  q_pos, q_seg, row, total = q_pos_ref[...], q_seg_ref[...], row_ref[...], total_ref[...]
  params = fb.tile_params(cfg, params_ref)
  upto = _triangle(bk, jnp.less_equal)

  def body(j, carry):
    dq, drow, dparams, prefix, taken = carry
    prefix_ref[pl.ds(j, 1), :] = prefix[None]  # What the key-gradient kernel starts from.
    taken_ref[pl.ds(j, 1), :] = taken[None]
    keys = pl.ds(j * bk, bk)
    k = k_ref[keys, :]
    z, mask, d = fb.tile(cfg, q, k, q_slots, j * bk + jnp.arange(bk), q_pos, k_pos_ref[keys],
                         q_seg, k_seg_ref[keys], params, row, col_ref[keys])
    r = jnp.where(mask, jax.nn.log_sigmoid(-z), 0.0)
    later = total[:, None] - prefix[:, None] - _sums(r, upto)  # sum over keys l > j
    w = jnp.where(mask, jnp.exp(jax.nn.log_sigmoid(z) + later), 0.0)
    g = jnp.dot(do, v_ref[keys, :].T, preferred_element_type=jnp.float32)
    dz, gw = _logits_grad(z, mask, w, g, taken)
    dq = dq + jnp.dot(dz.astype(k.dtype), k, preferred_element_type=jnp.float32) * cfg.scale
    dparams = fb.add_param_grads(cfg, dparams, dz, d, q_pos, params)
    return (dq, drow + jnp.sum(dz, axis=1), dparams, prefix + jnp.sum(r, axis=1),
            taken + jnp.sum(gw, axis=1))

  lo, hi = fb.key_blocks(cfg, i, k_ref.shape[0] // bk)
  zeros = jnp.zeros((bq,), jnp.float32)
  init = (jnp.zeros(q.shape, jnp.float32), zeros, jnp.zeros((fb.param_width(cfg.bias),),
                                                            jnp.float32), zeros, zeros)
  dq, drow, dparams, _, _ = jax.lax.fori_loop(lo, hi, body, init)
  dq_ref[...] = dq.astype(dq_ref.dtype)
  drow_ref[...] = drow
  dparams_ref[...] = dparams


def _dkv_kernel(q_ref, k_ref, v_ref, q_pos_ref, k_pos_ref, q_seg_ref, k_seg_ref, params_ref,
                row_ref, col_ref, do_ref, total_ref, prefix_ref, taken_ref, dk_ref, dv_ref,
                dcol_ref, *, cfg: fb.Static):
  j = pl.program_id(2)
  bq, bk = cfg.block_q, cfg.block_k
  k, v = k_ref[...], v_ref[...]
  k_slots = j * bk + jnp.arange(bk)
  k_pos, k_seg, col = k_pos_ref[...], k_seg_ref[...], col_ref[...]
  params = fb.tile_params(cfg, params_ref)
  upto = _triangle(bk, jnp.less_equal)

  def body(i, carry):
    dk, dv, dcol = carry
    rows = pl.ds(i * bq, bq)
    q, do = q_ref[rows, :], do_ref[rows, :]
    z, mask, _ = fb.tile(cfg, q, k, i * bq + jnp.arange(bq), k_slots, q_pos_ref[rows], k_pos,
                         q_seg_ref[rows], k_seg, params, row_ref[rows], col)
    r = jnp.where(mask, jax.nn.log_sigmoid(-z), 0.0)
    later = (total_ref[rows] - prefix_ref[rows])[:, None] - _sums(r, upto)
    w = jnp.where(mask, jnp.exp(jax.nn.log_sigmoid(z) + later), 0.0)
    dv = dv + jnp.dot(w.T.astype(do.dtype), do, preferred_element_type=jnp.float32)
    g = jnp.dot(do, v.T, preferred_element_type=jnp.float32)
    dz, _ = _logits_grad(z, mask, w, g, taken_ref[rows])
    dk = dk + jnp.dot(dz.T.astype(q.dtype), q, preferred_element_type=jnp.float32) * cfg.scale
    return dk, dv, dcol + jnp.sum(dz, axis=0)

  lo, hi = fb.query_blocks(cfg, j, q_ref.shape[0] // bq)
  init = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32),
          jnp.zeros((bk,), jnp.float32))
  dk, dv, dcol = jax.lax.fori_loop(lo, hi, body, init)
  dk_ref[...], dv_ref[...] = dk.astype(dk_ref.dtype), dv.astype(dv_ref.dtype)
  dcol_ref[...] = dcol


def _forward(cfg: fb.Static, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  b, h, length, dh = q.shape
  inputs, _ = fb.specs(cfg, length, dh, by_query=True)
  return pl.pallas_call(
      functools.partial(_forward_kernel, cfg=cfg),
      grid=(b, h, length // cfg.block_q), in_specs=inputs,
      out_specs=[pl.BlockSpec((None, None, cfg.block_q, dh), lambda b, h, i: (b, h, i, 0)),
                 pl.BlockSpec((None, None, cfg.block_q), lambda b, h, i: (b, h, i))],
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((b, h, length), jnp.float32)],
      interpret=cfg.interpret, compiler_params=fb.compiler_params())(
          q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col)


def reference(cfg: fb.Static, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  """The same attention with the logits materialised [batch, heads, q, k] (the kernels'
  layout), the weights by `attention.stick_breaking_weights`: what runs with custom gradients
  off."""
  length = q.shape[2]
  s = jnp.einsum('bhqd,bhkd->bhqk', q, k, preferred_element_type=jnp.float32) * cfg.scale
  d = q_pos[:, None, :, None] - k_pos[:, None, None, :]
  if cfg.bias.of_distance is not None:
    per_head = [cfg.bias.of_distance(tuple(params[hh, p] for p in range(cfg.bias.num_params)),
                                     d[:, 0], q_pos[:, :, None]) for hh in range(q.shape[1])]
    s = s + jnp.stack(per_head, axis=1)
  if cfg.bias.separable:
    s = s + row[..., :, None] - col[..., None, :]
  mask = attention.make_mask(q_seg, k_seg, causal=False)
  if cfg.window:
    mask &= attention.window_mask(jnp.arange(length), length, cfg.window)
  w = attention.stick_breaking_weights(s, cfg.diagonal, mask)
  return jnp.einsum('bhqk,bhkd->bhqd', w.astype(v.dtype), v).astype(q.dtype)


@autodiff.custom_vjp('fused_stick_breaking', nondiff_argnums=(0,),
                     why='the Pallas kernel has no autodiff rule: its backward is two kernels',
                     plain=lambda cfg, *args: reference(cfg, *args))
def _attend(cfg: fb.Static, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  return _forward(cfg, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col)[0]


def _attend_fwd(cfg, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  out, total = _forward(cfg, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col)
  return out, (q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col, total)


def _attend_bwd(cfg, residuals, g):
  q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col, total = residuals
  b, h, length, dh = q.shape
  num_k = length // cfg.block_k
  num_p = fb.param_width(cfg.bias)
  args = (q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col, g, total)
  inputs, _ = fb.specs(cfg, length, dh, by_query=True)
  per_query = lambda b, h, i: (b, h, i)
  carried = pl.BlockSpec((None, None, num_k, cfg.block_q), lambda b, h, i: (b, h, 0, i))
  dq, drow, dparams, prefix, taken = pl.pallas_call(
      functools.partial(_dq_kernel, cfg=cfg), grid=(b, h, length // cfg.block_q),
      in_specs=inputs + [pl.BlockSpec((None, None, cfg.block_q, dh),
                                      lambda b, h, i: (b, h, i, 0)),
                         pl.BlockSpec((None, None, cfg.block_q), per_query)],
      out_specs=[pl.BlockSpec((None, None, cfg.block_q, dh), lambda b, h, i: (b, h, i, 0)),
                 pl.BlockSpec((None, None, cfg.block_q), per_query),
                 pl.BlockSpec((None, None, None, num_p), lambda b, h, i: (b, h, i, 0)),
                 carried, carried],
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((b, h, length), jnp.float32),
                 jax.ShapeDtypeStruct((b, h, length // cfg.block_q, num_p), jnp.float32),
                 jax.ShapeDtypeStruct((b, h, num_k, length), jnp.float32),
                 jax.ShapeDtypeStruct((b, h, num_k, length), jnp.float32)],
      interpret=cfg.interpret, compiler_params=fb.compiler_params())(*args)
  inputs, _ = fb.specs(cfg, length, dh, by_query=False)
  whole_vec = pl.BlockSpec((None, None, length), lambda b, h, j: (b, h, 0))
  at_key_block = pl.BlockSpec((None, None, None, length), lambda b, h, j: (b, h, j, 0))
  dk, dv, dcol = pl.pallas_call(
      functools.partial(_dkv_kernel, cfg=cfg), grid=(b, h, num_k),
      in_specs=inputs + [pl.BlockSpec((None, None, length, dh), lambda b, h, j: (b, h, 0, 0)),
                         whole_vec, at_key_block, at_key_block],
      out_specs=[pl.BlockSpec((None, None, cfg.block_k, dh), lambda b, h, j: (b, h, j, 0)),
                 pl.BlockSpec((None, None, cfg.block_k, dh), lambda b, h, j: (b, h, j, 0)),
                 pl.BlockSpec((None, None, cfg.block_k), lambda b, h, j: (b, h, j))],
      out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype),
                 jax.ShapeDtypeStruct((b, h, length), jnp.float32)],
      interpret=cfg.interpret, compiler_params=fb.compiler_params())(*args, prefix, taken)
  dparams = jnp.sum(dparams, axis=(0, 2)).astype(params.dtype)
  return (dq, dk, dv, None, None, None, None, dparams, drow.astype(row.dtype),
          (-dcol).astype(col.dtype))


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
