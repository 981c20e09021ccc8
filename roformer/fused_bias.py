"""Flash attention whose logits receive an additive position bias computed block by block
inside the kernel, never materialised (Pallas): `attend`.

The schemes that change attention by a bias (ALiBi, KERPLE, T5, FIRE, FoX's forget gates)
otherwise form their [batch, heads, q, k] bias and run on the masked einsum path, O(L^2) in
memory per layer. Here each (query block, key block) tile computes its bias from what the scheme
keeps per head or per position (`Bias`):

- a function of the distance d = q_pos - k_pos (and of the query position, for FIRE's
  normaliser) with parameters per head (ALiBi's slope, KERPLE's two, T5's table, FIRE's linear
  pieces), written once beside the scheme's layer and differentiated inside the backward
  kernel, its parameters' gradient summed over the tile;
- and/or row_i - col_j of per-position values, per head (FoX: the prefix sums of the log
  forget gates), whose gradients are the row and column sums of the logits' gradient.

Masks are formed per tile from the packed segment ids (0: padding), causality by slot, and a
sliding window; the causal and windowed loops visit only the key blocks a query block sees.

The kernel is written once for every backend: on the CPU it runs in Pallas' interpret mode (a
correctness check, not a fast path), on a GPU through Triton. Its backward pass is a second
pair of kernels (flash attention 2's: the key/value gradients by key block, the query gradients
by query block, both recomputing the weights from the saved log-sum-exp); with
`model.custom_gradients=False` the plain formulation (`reference`, the bias materialised)
runs instead, which autodiff differentiates in both modes.
"""

import dataclasses
import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from roformer import attention
from roformer import autodiff
from roformer import sharding

MASKED = float(jnp.finfo(jnp.float32).min)


@dataclasses.dataclass(frozen=True)
class Bias:
  """What a scheme adds to q.k * scale inside the kernel. `of_distance(params, d, q_pos)`: the
  bias [bq, bk] of float32 distances d = q_pos - k_pos (and of the query positions, [bq, 1],
  for a bias normalised by them), `params` a tuple of `num_params` scalars of the head: written
  with jnp, it is differentiated inside the backward kernel, so a scheme writes its formula
  once. `separable`: the bias also holds row_i - col_j of per-position values. The schemes'
  own are beside their layers (roformer/positions/)."""
  name: str
  num_params: int = 0
  of_distance: Callable | None = None
  separable: bool = False


@functools.lru_cache(maxsize=None)
def bucketed(buckets: Callable, num_buckets: int) -> Bias:
  """A learned value per bucket of the distance and per head (T5's table): `buckets(d)` maps
  the float distances of a tile to integer buckets in [0, num_buckets); the parameters are the
  head's column of the table. The tile's bias loops over the buckets (no gather, so that every
  backend lowers it), which is why a scheme keeps the count small on this path."""
  def of_distance(params, d, q_pos):
    del q_pos
    index = buckets(d)
    return sum(jnp.where(index == b, params[b], 0.0) for b in range(num_buckets))
  return Bias(f'table of {num_buckets} buckets', num_buckets, of_distance)


# Plain flash attention: the scheme changes q and k only, or nothing.
NONE = Bias('no bias')
SEPARABLE = Bias('row_i - col_j', separable=True)


@functools.lru_cache(maxsize=None)
def combined(first: Bias, second: Bias) -> Bias:
  """One bias of `first`'s function of the distance and `second`'s row_i - col_j, each
  computed as alone and summed in the tile (ALiBi's slopes with FoX's forget gates:
  position.kind=alibi+fox); the parameters are `first`'s, the rows and columns `second`'s."""
  assert first.of_distance is not None and not first.separable, first
  assert second.separable and second.of_distance is None, second
  return Bias(f'{first.name} + {second.name}', first.num_params, first.of_distance, True)


@functools.cache
def compiler_params():
  """On a GPU the kernels lower through Triton (this JAX's default for pallas_call is Mosaic
  GPU, whose copies these small per-head and per-row blocks do not fit). Imported when a kernel
  is first traced, not with the model."""
  from jax.experimental.pallas import triton as pltriton  # pylint: disable=g-import-not-at-top
  return pltriton.CompilerParams(num_warps=4, num_stages=2)


def triton_takes(head_dim: int) -> bool:
  """Whether the kernel's blocks through Triton take this head width: a power of 2 (each of a
  block's dimensions is one, and the head is a whole block) and at least 16 (the smallest
  inner dimension of Triton's matrix products). Interpret mode takes any."""
  return head_dim >= 16 and head_dim & (head_dim - 1) == 0


def _param_width(bias: Bias) -> int:
  """The per-head parameters' block width: a power of 2 (Triton's blocks are), at least 1."""
  return 1 << max(bias.num_params - 1, 0).bit_length()


@dataclasses.dataclass(frozen=True)
class Static:
  """What a kernel is compiled for. `diagonal`: with `causal`, a query sees its own key (a
  softmax's queries do; stick-breaking's only with attend_current)."""
  bias: Bias
  scale: float
  causal: bool
  window: int
  block_q: int
  block_k: int
  interpret: bool
  diagonal: bool = True


def tile(cfg: Static, q, k, q_slots, k_slots, q_pos, k_pos, q_seg, k_seg, params, row, col):
  """(logits with the bias, mask, distances) of one tile."""
  s = jnp.dot(q, k.T, preferred_element_type=jnp.float32) * cfg.scale
  d = q_pos[:, None] - k_pos[None, :]
  if cfg.bias.of_distance is not None:
    s = s + cfg.bias.of_distance(params, d, q_pos[:, None])
  if cfg.bias.separable:
    s = s + row[:, None] - col[None, :]
  mask = (q_seg[:, None] == k_seg[None, :]) & (q_seg[:, None] > 0)
  if cfg.causal:
    mask &= (q_slots[:, None] >= k_slots[None, :]) if cfg.diagonal else (
        q_slots[:, None] > k_slots[None, :])
  if cfg.window:
    mask &= k_slots[None, :] > q_slots[:, None] - cfg.window
  return jnp.where(mask, s, MASKED), mask, d


def key_blocks(cfg: Static, i, num_k):
  """[lo, hi): the key blocks query block i sees."""
  lo, hi = 0, num_k
  if cfg.causal:
    hi = jnp.minimum(num_k, ((i + 1) * cfg.block_q + cfg.block_k - 1) // cfg.block_k)
  if cfg.window:
    lo = jnp.maximum(0, (i * cfg.block_q - cfg.window + 1) // cfg.block_k)
  return lo, hi


def query_blocks(cfg: Static, j, num_q):
  """[lo, hi): the query blocks that see key block j."""
  lo, hi = 0, num_q
  if cfg.causal:
    lo = (j * cfg.block_k) // cfg.block_q
  if cfg.window:
    hi = jnp.minimum(num_q, ((j + 1) * cfg.block_k + cfg.window - 2) // cfg.block_q + 1)
  return lo, hi


def tile_params(cfg, params_ref):
  return tuple(params_ref[p] for p in range(cfg.bias.num_params))


def _forward_kernel(q_ref, k_ref, v_ref, q_pos_ref, k_pos_ref, q_seg_ref, k_seg_ref, params_ref,
                    row_ref, col_ref, o_ref, lse_ref, *, cfg: Static):
  i = pl.program_id(2)
  bq, bk = cfg.block_q, cfg.block_k
  q = q_ref[...]
  q_slots = i * bq + jnp.arange(bq)
  q_pos, q_seg, row = q_pos_ref[...], q_seg_ref[...], row_ref[...]
  params = tile_params(cfg, params_ref)

  def body(j, carry):
    acc, m, l = carry
    keys = pl.ds(j * bk, bk)
    s, _, _ = tile(cfg, q, k_ref[keys, :], q_slots, j * bk + jnp.arange(bk), q_pos,
                    k_pos_ref[keys], q_seg, k_seg_ref[keys], params, row, col_ref[keys])
    m_new = jnp.maximum(m, jnp.max(s, axis=1))
    correction = jnp.exp(m - m_new)
    p = jnp.exp(s - m_new[:, None])
    acc = acc * correction[:, None] + jnp.dot(p.astype(v_ref.dtype), v_ref[keys, :],
                                              preferred_element_type=jnp.float32)
    return acc, m_new, l * correction + jnp.sum(p, axis=1)

  lo, hi = key_blocks(cfg, i, k_ref.shape[0] // bk)
  init = (jnp.zeros((bq, q.shape[-1]), jnp.float32), jnp.full((bq,), MASKED, jnp.float32),
          jnp.zeros((bq,), jnp.float32))
  acc, m, l = jax.lax.fori_loop(lo, hi, body, init)
  seen = m > MASKED  # A row with no visible key (padding) outputs 0, as the plain form.
  l = jnp.where(seen, l, 1.0)
  o_ref[...] = jnp.where(seen[:, None], acc / l[:, None], 0.0).astype(o_ref.dtype)
  lse_ref[...] = m + jnp.log(l)


def _add_param_grads(cfg: Static, dparams, ds, d, q_pos, params):
  """dparams [_param_width] plus sum(ds * d bias / d param) over a tile whose logits' gradient
  is ds [bq, bk] (distances d, query positions q_pos), by autodiff of the tile's bias."""
  if not cfg.bias.num_params:
    return dparams
  grads = jax.grad(lambda p: jnp.sum(ds * cfg.bias.of_distance(p, d, q_pos[:, None])))(params)
  slot = jnp.arange(dparams.shape[0])  # Scalars into the vector by selection: no stack,
  for index, g in enumerate(grads):  # which Triton lowers for two operands only.
    dparams = dparams + jnp.where(slot == index, g, 0.0)
  return dparams


def dq_kernel(q_ref, k_ref, v_ref, q_pos_ref, k_pos_ref, q_seg_ref, k_seg_ref, params_ref,
              row_ref, col_ref, do_ref, a_ref, b_ref, dq_ref, drow_ref, dparams_ref, *,
              cfg: Static, tile_grad: Callable, per_key_block: bool = False):
  """The query gradients of one query block, visiting the key blocks it sees: dq, the rows'
  sums of the logits' gradient (a separable bias's row gradient) and the bias parameters'.
  `tile_grad(z, mask, g, a, b)` gives a tile's (weights, logits' gradient) from its logits z
  (bias and mask applied), mask, G = dO V^T and two per-row vectors of the attention's own,
  `a_ref` and `b_ref` ([rows] of the query block, or with `per_key_block` [key blocks, rows]:
  one row per key block). The attention's own part is tile_grad; the rest is shared."""
  i = pl.program_id(2)
  bq, bk = cfg.block_q, cfg.block_k
  q, do = q_ref[...], do_ref[...]
  q_slots = i * bq + jnp.arange(bq)
  q_pos, q_seg, row = q_pos_ref[...], q_seg_ref[...], row_ref[...]
  params = tile_params(cfg, params_ref)
  read = (lambda ref, j: ref[pl.ds(j, 1), :][0]) if per_key_block else (
      lambda ref, j: ref[...])

  def body(j, carry):
    dq, drow, dparams = carry
    keys = pl.ds(j * bk, bk)
    k = k_ref[keys, :]
    z, mask, d = tile(cfg, q, k, q_slots, j * bk + jnp.arange(bk), q_pos, k_pos_ref[keys], q_seg,
                      k_seg_ref[keys], params, row, col_ref[keys])
    g = jnp.dot(do, v_ref[keys, :].T, preferred_element_type=jnp.float32)
    _, ds = tile_grad(z, mask, g, read(a_ref, j), read(b_ref, j))
    dq = dq + jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32) * cfg.scale
    dparams = _add_param_grads(cfg, dparams, ds, d, q_pos, params)
    return dq, drow + jnp.sum(ds, axis=1), dparams

  lo, hi = key_blocks(cfg, i, k_ref.shape[0] // bk)
  init = (jnp.zeros(q.shape, jnp.float32), jnp.zeros((bq,), jnp.float32),
          jnp.zeros((_param_width(cfg.bias),), jnp.float32))
  dq, drow, dparams = jax.lax.fori_loop(lo, hi, body, init)
  dq_ref[...] = dq.astype(dq_ref.dtype)
  drow_ref[...] = drow
  dparams_ref[...] = dparams


def dkv_kernel(q_ref, k_ref, v_ref, q_pos_ref, k_pos_ref, q_seg_ref, k_seg_ref, params_ref,
               row_ref, col_ref, do_ref, a_ref, b_ref, dk_ref, dv_ref, dcol_ref, *,
               cfg: Static, tile_grad: Callable):
  """The key and value gradients of one key block, visiting the query blocks that see it, and
  the columns' sums of the logits' gradient; `tile_grad` as for `dq_kernel`, `a_ref` and
  `b_ref` here [length] (the key block's row of a per-key-block vector)."""
  j = pl.program_id(2)
  bq, bk = cfg.block_q, cfg.block_k
  k, v = k_ref[...], v_ref[...]
  k_slots = j * bk + jnp.arange(bk)
  k_pos, k_seg, col = k_pos_ref[...], k_seg_ref[...], col_ref[...]
  params = tile_params(cfg, params_ref)

  def body(i, carry):
    dk, dv, dcol = carry
    rows = pl.ds(i * bq, bq)
    q, do = q_ref[rows, :], do_ref[rows, :]
    z, mask, _ = tile(cfg, q, k, i * bq + jnp.arange(bq), k_slots, q_pos_ref[rows], k_pos,
                      q_seg_ref[rows], k_seg, params, row_ref[rows], col)
    g = jnp.dot(do, v.T, preferred_element_type=jnp.float32)
    w, ds = tile_grad(z, mask, g, a_ref[rows], b_ref[rows])
    dv = dv + jnp.dot(w.T.astype(do.dtype), do, preferred_element_type=jnp.float32)
    dk = dk + jnp.dot(ds.T.astype(q.dtype), q, preferred_element_type=jnp.float32) * cfg.scale
    return dk, dv, dcol + jnp.sum(ds, axis=0)

  lo, hi = query_blocks(cfg, j, q_ref.shape[0] // bq)
  init = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32),
          jnp.zeros((bk,), jnp.float32))
  dk, dv, dcol = jax.lax.fori_loop(lo, hi, body, init)
  dk_ref[...], dv_ref[...] = dk.astype(dk_ref.dtype), dv.astype(dv_ref.dtype)
  dcol_ref[...] = dcol


def _softmax_grad(z, mask, g, lse, delta):
  """Flash attention 2's tile: the weights from the saved log-sum-exp, and
  dS = P (dP - delta) with delta = sum_j dP_ij P_ij = dO . O."""
  p = jnp.where(mask, jnp.exp(z - lse[:, None]), 0.0)
  return p, p * (g - delta[:, None])


def specs(cfg: Static, length: int, head_dim: int, by_query: bool):
  """BlockSpecs over the grid (batch, head, block): the inputs of every kernel (q, k, v,
  q_pos, k_pos, q_seg, k_seg, params, row, col); the blocked side is the
  queries' (`by_query`) or the keys', the other side whole."""
  sq, sk = (cfg.block_q, length) if by_query else (length, cfg.block_k)
  at_q = (lambda b, h, i: (b, h, i, 0)) if by_query else (lambda b, h, i: (b, h, 0, 0))
  at_k = (lambda b, h, i: (b, h, 0, 0)) if by_query else (lambda b, h, i: (b, h, i, 0))
  vec_q = (lambda b, h, i: (b, h, i)) if by_query else (lambda b, h, i: (b, h, 0))
  vec_k = (lambda b, h, i: (b, h, 0)) if by_query else (lambda b, h, i: (b, h, i))
  pos_q = (lambda b, h, i: (b, i)) if by_query else (lambda b, h, i: (b, 0))
  pos_k = (lambda b, h, i: (b, 0)) if by_query else (lambda b, h, i: (b, i))
  q = pl.BlockSpec((None, None, sq, head_dim), at_q)
  k = pl.BlockSpec((None, None, sk, head_dim), at_k)
  params = pl.BlockSpec((None, _param_width(cfg.bias)), lambda b, h, i: (h, 0))
  inputs = [q, k, k, pl.BlockSpec((None, sq), pos_q), pl.BlockSpec((None, sk), pos_k),
            pl.BlockSpec((None, sq), pos_q), pl.BlockSpec((None, sk), pos_k), params,
            pl.BlockSpec((None, None, sq), vec_q), pl.BlockSpec((None, None, sk), vec_k)]
  return inputs


def _forward(cfg: Static, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  b, h, length, dh = q.shape
  inputs = specs(cfg, length, dh, by_query=True)
  return pl.pallas_call(
      functools.partial(_forward_kernel, cfg=cfg),
      grid=(b, h, length // cfg.block_q), in_specs=inputs,
      out_specs=[pl.BlockSpec((None, None, cfg.block_q, dh), lambda b, h, i: (b, h, i, 0)),
                 pl.BlockSpec((None, None, cfg.block_q), lambda b, h, i: (b, h, i))],
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((b, h, length), jnp.float32)],
      interpret=cfg.interpret, compiler_params=compiler_params())(
          q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col)


@autodiff.custom_vjp('fused_bias_attention', nondiff_argnums=(0,),
                     why='the Pallas kernel has no autodiff rule: its backward is two kernels',
                     plain=lambda cfg, *args: reference(cfg, *args))
def _attend(cfg: Static, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  return _forward(cfg, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col)[0]


def _attend_fwd(cfg, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  out, lse = _forward(cfg, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col)
  return out, (q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col, out, lse)


def backward(cfg: Static, tile_grad: Callable, inputs, g, a, b, *, a_by_query, a_by_key,
             per_key_block: bool = False):
  """The gradients of the kernels' inputs (kernel_inputs' order: q, k, v, four of positions
  and segments, params, row, col) from `dq_kernel` and `dkv_kernel` with `tile_grad`: the
  attention's per-row vectors `a` and `b` are laid out by the BlockSpecs `a_by_query` (the
  query kernel's) and `a_by_key` (the key kernel's), as `dq_kernel` describes them."""
  q, k, v, params, row, col = inputs[0], inputs[1], inputs[2], inputs[7], inputs[8], inputs[9]
  batch, h, length, dh = q.shape
  num_p = _param_width(cfg.bias)
  args = (*inputs, g, a, b)
  by_query = specs(cfg, length, dh, by_query=True)
  do_by_query = pl.BlockSpec((None, None, cfg.block_q, dh), lambda b, h, i: (b, h, i, 0))
  dq, drow, dparams = pl.pallas_call(
      functools.partial(dq_kernel, cfg=cfg, tile_grad=tile_grad, per_key_block=per_key_block),
      grid=(batch, h, length // cfg.block_q),
      in_specs=by_query + [do_by_query, a_by_query, a_by_query],
      out_specs=[do_by_query, pl.BlockSpec((None, None, cfg.block_q), lambda b, h, i: (b, h, i)),
                 pl.BlockSpec((None, None, None, num_p), lambda b, h, i: (b, h, i, 0))],
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((batch, h, length), jnp.float32),
                 jax.ShapeDtypeStruct((batch, h, length // cfg.block_q, num_p), jnp.float32)],
      interpret=cfg.interpret, compiler_params=compiler_params())(*args)
  by_key = specs(cfg, length, dh, by_query=False)
  do_whole = pl.BlockSpec((None, None, length, dh), lambda b, h, j: (b, h, 0, 0))
  by_block = pl.BlockSpec((None, None, cfg.block_k, dh), lambda b, h, j: (b, h, j, 0))
  dk, dv, dcol = pl.pallas_call(
      functools.partial(dkv_kernel, cfg=cfg, tile_grad=tile_grad),
      grid=(batch, h, length // cfg.block_k),
      in_specs=by_key + [do_whole, a_by_key, a_by_key],
      out_specs=[by_block, by_block,
                 pl.BlockSpec((None, None, cfg.block_k), lambda b, h, j: (b, h, j))],
      out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype),
                 jax.ShapeDtypeStruct((batch, h, length), jnp.float32)],
      interpret=cfg.interpret, compiler_params=compiler_params())(*args)
  dparams = jnp.sum(dparams, axis=(0, 2)).astype(params.dtype)
  return (dq, dk, dv, None, None, None, None, dparams, drow.astype(row.dtype),
          (-dcol).astype(col.dtype))


def _attend_bwd(cfg, residuals, g):
  *inputs, out, lse = residuals
  delta = jnp.sum(g.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
  return backward(cfg, _softmax_grad, inputs, g, lse, delta,
                  a_by_query=pl.BlockSpec((None, None, cfg.block_q), lambda b, h, i: (b, h, i)),
                  a_by_key=pl.BlockSpec((None, None, out.shape[2]), lambda b, h, j: (b, h, 0)))


_attend.defvjp(_attend_fwd, _attend_bwd)


def materialised_logits(cfg: Static, q, k, q_pos, k_pos, q_seg, k_seg, params, row, col,
                        causal: bool):
  """(logits with the bias [batch, heads, q, k] float32, the mask of segments, causality by
  index when `causal`, and the window): what the kernels compute tile by tile, whole, in their
  layout ([batch, heads, length, head_dim])."""
  length = q.shape[2]
  s = jnp.einsum('bhqd,bhkd->bhqk', q, k, preferred_element_type=jnp.float32) * cfg.scale
  d = q_pos[:, None, :, None] - k_pos[:, None, None, :]
  if cfg.bias.of_distance is not None:
    per_head = [cfg.bias.of_distance(tuple(params[hh, p] for p in range(cfg.bias.num_params)),
                                     d[:, 0], q_pos[:, :, None]) for hh in range(q.shape[1])]
    s = s + jnp.stack(per_head, axis=1)
  if cfg.bias.separable:
    s = s + row[..., :, None] - col[..., None, :]
  mask = attention.make_mask(q_seg, k_seg, causal=causal)
  if cfg.window:
    mask &= attention.window_mask(jnp.arange(length), length, cfg.window)
  return s, mask


def reference(cfg: Static, q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col):
  """The same attention with the bias and the mask materialised: what runs when custom
  gradients are off."""
  s, mask = materialised_logits(cfg, q, k, q_pos, k_pos, q_seg, k_seg, params, row, col,
                                cfg.causal)
  s = jnp.where(mask, s, MASKED)
  p = jnp.where(mask, jax.nn.softmax(s, axis=-1), 0.0)
  return jnp.einsum('bhqk,bhkd->bhqd', p.astype(v.dtype), v).astype(q.dtype)


def kernel_inputs(q, k, v, positions, segments, bias: Bias, params, row, col, block: int):
  """The kernels' arguments (q, k, v, q_pos, k_pos, q_seg, k_seg, params, row, col) from an
  `attend`'s: heads first, the length padded to a multiple of `block` (padding is segment 0),
  positions as float32, the parameters padded to `_param_width`, zeros for absent rows and
  columns."""
  b, length, h, _ = q.shape
  padded = -(-length // block) * block
  heads_first = lambda x: jnp.swapaxes(x, 1, 2)
  pad = lambda x, axis: jnp.pad(x, [(0, padded - length) if a == axis else (0, 0)
                                    for a in range(x.ndim)])
  q, k, v = (pad(heads_first(x), 2) for x in (q, k, v))
  positions = pad(positions.astype(jnp.float32), 1)
  segments = pad(segments.astype(jnp.int32), 1)
  if params is None:
    params = jnp.zeros((h, 1), jnp.float32)
  params = jnp.pad(params.astype(jnp.float32),
                   ((0, 0), (0, _param_width(bias) - params.shape[1])))
  zeros = jnp.zeros((b, h, padded), jnp.float32)
  row = zeros if row is None else pad(row.astype(jnp.float32), 2)
  col = zeros if col is None else pad(col.astype(jnp.float32), 2)
  return q, k, v, positions, positions, segments, segments, params, row, col


# The logical axes of the kernels' arguments (kernel_inputs) and of their output: rows and heads
# are split as the mesh splits the attention's activations, the rest whole.
_KERNEL_AXES = ((('batch', 'act_heads', None, None),) * 3 + (('batch', None),) * 4
                + (('act_heads', None),) + (('batch', 'act_heads', None),) * 2)


def run_kernel(kernel, cfg: Static, args, length: int):
  """`kernel(cfg, *args)` on each shard of the active mesh (rows and heads), as
  [batch, length, heads, head_dim]."""
  out = sharding.per_shard(functools.partial(kernel, cfg), args, _KERNEL_AXES, _KERNEL_AXES[0])
  return _kernel_output(out, length)


def _kernel_output(out, length: int):
  """A kernel's output [batch, heads, padded, head_dim] as [batch, length, heads, head_dim]."""
  return jnp.swapaxes(out[:, :, :length], 1, 2)


def attend(q, k, v, positions, segments, bias: Bias, *, params=None, row=None, col=None,
           causal: bool = True, window: int = 0, scale: float | None = None,
           block_q: int = 64, block_k: int = 64, interpret: bool | None = None):
  """Softmax attention of q [batch, len, heads, head_dim] over k, v of the same shape (the
  key/value heads already repeated for their queries) with `bias` computed per tile, as
  [batch, len, heads, head_dim]. `positions`, `segments`: [batch, len] (segment 0: padding);
  `params`: [heads, bias.num_params]; `row`, `col`: [batch, heads, len] (bias.separable);
  the positions may be real numbers (the bias reads their differences as float32);
  `window` > 0: query i sees keys i - window + 1 .. i. The length is padded to a multiple of
  the blocks' least common multiple (padding is segment 0; a query that sees no key, such as
  padding, gets 0). `interpret`: Pallas' interpret mode (default: on the CPU)."""
  if interpret is None:
    interpret = jax.default_backend() == 'cpu'
  cfg = Static(bias, float(q.shape[-1] ** -0.5 if scale is None else scale), causal,
               int(window), block_q, block_k, interpret)
  args = kernel_inputs(q, k, v, positions, segments, bias, params, row, col,
                       math.lcm(block_q, block_k))
  return run_kernel(_attend, cfg, args, q.shape[1])
