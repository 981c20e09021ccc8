"""Multi-head attention: masks and one entry point with selectable implementations.

`impl='einsum'` is an explicit einsum/softmax path that supports every position scheme and is the
fastest on CPU. `impl='xla'` or `'cudnn'` call `jax.nn.dot_product_attention` (cuDNN flash attention
on GPU), for schemes without a value term; an additive logits bias is passed as its `bias`.
`impl='auto'` (the default) is resolved per model by `resolve`: cuDNN on a GPU with half-precision
activations (the fused bias kernel, `'pallas'`, for a scheme timed faster there),
`jax.nn.dot_product_attention` on other accelerators, einsum on CPU or where only
einsum can run the layer (a scheme's value term, Shaw's; a remap; stick-breaking attention, whose
kernels are only ever forced; some attention options).
"""

from typing import Iterable

import jax
import jax.numpy as jnp

from roformer import autodiff
from roformer import errors
from roformer import sharding

IMPLEMENTATIONS = ('auto', 'einsum', 'xla', 'cudnn', 'pallas')
# The implementations that run one-document rows with sequence lengths (`_fused`): cuDNN's
# kernels skip the masked blocks; XLA builds the same mask from the lengths, so a second path
# would only add a compiled branch (and, under a gradient, buffers for both).
LENGTHS_PATH_IMPLS = ('cudnn',)


def resolve(impl: str, *, dtype, allowed: Iterable[str] | None = None,
            backend: str | None = None, fused_first: bool = False) -> str:
  """The implementation `attend` runs for `impl` (one of IMPLEMENTATIONS). 'auto' takes the
  first of the backend's preferences that `allowed` holds (the implementations that can run
  the layer: its position scheme's, its attention kind's and its options'; None: every one):
  'einsum' on CPU; on a GPU with bfloat16/float16 activations (cuDNN's fused kernels take no
  float32) 'cudnn', then 'xla', with 'pallas' before them where `fused_first` (the scheme's
  bias was measured faster on the fused kernel than materialised for cuDNN, and the kernel
  takes the layer) and cuDNN could run the layer too (the kernel stands in for cuDNN, never
  for the einsum path: stick-breaking's kernels are not chosen);
  'xla' elsewhere (TPU); 'einsum', which runs every layer, last. Explicit choices are
  returned unchanged (the config checks refuse one the layer cannot run)."""
  if impl != 'auto':
    return impl
  backend = backend or jax.default_backend()
  if backend == 'cpu':
    preferred = ()
  elif backend in ('gpu', 'cuda', 'rocm') and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16):
    preferred = ('cudnn', 'xla')
  else:
    preferred = ('xla',)
  allowed = IMPLEMENTATIONS if allowed is None else tuple(allowed)
  if fused_first and preferred[:1] == ('cudnn',) and {'pallas', 'cudnn'} <= set(allowed):
    preferred = ('pallas',) + preferred
  return next((i for i in preferred if i in allowed), 'einsum')


def make_mask(q_segment_ids: jax.Array, k_segment_ids: jax.Array, *, causal: bool,
              q_index: jax.Array | None = None, k_index: jax.Array | None = None) -> jax.Array:
  """Boolean mask [batch, 1, q_len, k_len]: True where query i may attend to key j.

  Tokens attend only within their own packed segment (segment id 0 is padding and attends to
  nothing). With `causal`, query i sees keys j <= i, compared by sequence index (`q_index`,
  `k_index`, default arange), which for a cache is the absolute slot.
  """
  mask = (q_segment_ids[:, :, None] == k_segment_ids[:, None, :]) & (
      q_segment_ids[:, :, None] > 0)
  if causal:
    if q_index is None:
      q_index = jnp.arange(q_segment_ids.shape[1])[None]
    if k_index is None:
      k_index = jnp.arange(k_segment_ids.shape[1])[None]
    mask &= q_index[:, :, None] >= k_index[:, None, :]
  return mask[:, None]


@autodiff.custom_vjp('softmax', why='a backward that reads only the probabilities')
def softmax(logits: jax.Array) -> jax.Array:
  """Softmax over the last axis whose backward pass reads only its output p:
  grad = p * (g - sum(g * p)). (jax.nn.softmax differentiates exp, sum and divide one by one
  unless jax_softmax_custom_jvp is set, which keeps more [batch, heads, q, k] arrays alive and
  makes more passes over them.)"""
  return _softmax(logits)


def soft_capped(logits: jax.Array, cap: float) -> jax.Array:
  """Gemma 2's soft-capping: float32 cap tanh(logits / cap), so that no logit passes `cap` in
  size (the attention logits' `attention.softcap`, the output layer's `model.logits_softcap`);
  `cap` 0: the logits unchanged."""
  if not cap:
    return logits
  return jnp.tanh(logits.astype(jnp.float32) / cap) * cap


def _unnormalized(logits):
  """exp(logits - rowmax): the softmax weights before division by their row sums."""
  return jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))


def _softmax(logits):
  e = _unnormalized(logits)
  return e / jnp.sum(e, axis=-1, keepdims=True)


def scaled_logits(q: jax.Array, k: jax.Array, bias: jax.Array | None = None) -> jax.Array:
  """Float32 q k^T / sqrt(head_dim) [batch, heads, q_len, k_len], plus the bias: the logits an
  attention other than the softmax kernels reads (stick-breaking)."""
  logits = jnp.einsum('bqhd,bkhd->bhqk', q, k, preferred_element_type=jnp.float32
                      ) * q.shape[-1] ** -0.5
  return logits if bias is None else logits + bias


def expand_heads(x: jax.Array, num_heads: int) -> jax.Array:
  """Keys or values [batch, len, kv_heads, head_dim] repeated for the query heads of each
  group: [batch, len, num_heads, head_dim], head h from kv head h // (num_heads / kv_heads)."""
  groups = num_heads // x.shape[2]
  return x if groups == 1 else jnp.repeat(x, groups, axis=2)


def grouped_logits(q: jax.Array, k: jax.Array) -> jax.Array:
  """Float32 q k^T [batch, heads, q_len, k_len] for keys of as many heads as the queries, or of
  fewer (grouped-query attention: query head h reads key head h // (heads / kv_heads), as
  `expand_heads` repeats them), without repeating the keys: the queries are taken as [groups,
  heads per group], so each key head is read once for its group's queries (over a decoding
  cache, repeating them is a copy of the whole cache each step)."""
  b, q_len, h, d = q.shape
  g = k.shape[2]
  if g == h:
    return jnp.einsum('bqhd,bkhd->bhqk', q, k, preferred_element_type=jnp.float32)
  # [batch, groups, heads per group x q_len, d]: the product's rows come out in the logits'
  # order, so no pass over them reorders the [.., q_len, k_len] result.
  rows = jnp.swapaxes(q.reshape(b, q_len, g, h // g, d), 1, 3).swapaxes(1, 2)
  logits = jax.lax.dot_general(rows.reshape(b, g, h // g * q_len, d), k,
                               (((3,), (3,)), ((0, 1), (0, 2))),
                               preferred_element_type=jnp.float32)
  return logits.reshape(b, h, q_len, k.shape[1])


def grouped_values(weights: jax.Array, v: jax.Array, **kwargs) -> jax.Array:
  """weights [batch, heads, q_len, k_len] times values [batch, k_len, kv_heads, width] of as
  many heads or fewer (grouped as in `grouped_logits`): [batch, q_len, heads, width]."""
  b, h, q_len, k_len = weights.shape
  g = v.shape[2]
  if g == h:
    return jnp.einsum('bhqk,bkhd->bqhd', weights, v, **kwargs)
  out = jax.lax.dot_general(weights.reshape(b, g, h // g * q_len, k_len), v,
                            (((3,), (1,)), ((0, 1), (0, 2))), **kwargs)
  out = out.reshape(b, g, h // g, q_len, v.shape[-1])  # [batch, groups, per group, q, width]
  return jnp.transpose(out, (0, 3, 1, 2, 4)).reshape(b, q_len, h, v.shape[-1])


def _group_sum(x: jax.Array, groups: int) -> jax.Array:
  """A gradient [batch, len, heads, width] summed over each key head's group of query heads:
  [batch, len, groups, width] (the transpose of `expand_heads`)."""
  b, length, h, d = x.shape
  return x if groups == h else x.reshape(b, length, groups, h // groups, d).sum(axis=3)


def _masked_logits(q, k, mask, bias):
  """Float32 q k^T (q already scaled; k of as many heads or grouped) plus the bias; masked
  entries the most negative float."""
  logits = grouped_logits(q, k)
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  return jnp.where(mask, logits, jnp.finfo(jnp.float32).min)


def _softmax_fwd(logits):
  probs = _softmax(logits)
  return probs, probs


def _softmax_bwd(probs, grad):
  return (probs * (grad - jnp.sum(grad * probs, axis=-1, keepdims=True)),)


softmax.defvjp(_softmax_fwd, _softmax_bwd)


def _sum_to_shape(x: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """Sums x over the axes that `shape` broadcasts (the gradient of a broadcast)."""
  x = x.sum(axis=tuple(range(x.ndim - len(shape))))
  axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
  return x.sum(axis=axes, keepdims=True) if axes else x


@autodiff.custom_vjp('softmax_attention', why='one pass over the weights, flash-style row sums')
def softmax_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                      bias: jax.Array | None) -> jax.Array:
  """softmax(q k^T + bias, masked) v for already scaled q, written for fewer passes over the
  [batch, heads, q_len, k_len] arrays: the forward keeps the unnormalised weights e = exp(l - max)
  and divides the [.., head_dim] output by their sum instead of normalising e; the backward
  uses the row sums D = rowsum(do * o) (as flash attention does) instead of reducing over the
  probabilities, so it makes one elementwise pass over e and dp. Equal to the einsum/softmax
  formula (tests/test_attention.py checks values and gradients against float64)."""
  return _softmax_attention_fwd(q, k, v, mask, bias)[0]


def _softmax_attention_fwd(q, k, v, mask, bias):
  e = _unnormalized(_masked_logits(q, k, mask, bias))
  total = jnp.swapaxes(jnp.sum(e, axis=-1), 1, 2)[..., None]  # [batch, q_len, heads, 1]
  out = (grouped_values(e.astype(v.dtype), v, preferred_element_type=jnp.float32)
         / total).astype(v.dtype)
  return out, (q, k, v, mask, bias, e, total, out)


def _softmax_attention_bwd(residuals, d_out):
  q, k, v, mask, bias, e, total, out = residuals
  scaled = d_out.astype(jnp.float32) / total  # d_out / rowsum(e): [batch, q_len, heads, d].
  g = k.shape[2]  # Keys and values of grouped heads: each one's gradient summed over its group.
  d_v = _group_sum(jnp.einsum('bhqk,bqhd->bkhd', e, scaled), g).astype(v.dtype)
  d_e = grouped_logits(scaled, v)
  row = jnp.swapaxes(jnp.sum(scaled * out.astype(jnp.float32), axis=-1), 1, 2)[..., None]
  d_logits = jnp.where(mask, e * (d_e - row), 0.0)
  d_q = grouped_values(d_logits, k.astype(jnp.float32)).astype(q.dtype)
  d_k = _group_sum(jnp.einsum('bhqk,bqhd->bkhd', d_logits, q.astype(jnp.float32)),
                   g).astype(k.dtype)
  d_bias = None if bias is None else _sum_to_shape(d_logits, bias.shape).astype(bias.dtype)
  return d_q, d_k, d_v, None, d_bias


softmax_attention.defvjp(_softmax_attention_fwd, _softmax_attention_bwd)


# On CPU the einsum path attends in blocks of batch rows whose float32 [rows, heads, q_len, k_len]
# logits take at most this many bytes, so that each block's passes over its logits, weights and
# their gradients find them in the last-level cache instead of main memory (the medium
# benchmark's 8 x 8 x 512 x 512 in four blocks: 5% off the whole train step).
BLOCK_BYTES = 16 * 2**20
# The blocks are unrolled in the traced program: at most this many batch blocks (larger ones
# past it: a batch far beyond what a CPU trains) and query blocks, so that tracing stays bounded.
MAX_BATCH_BLOCKS = 64


def batch_blocks(batch: int, row_bytes: int, block_bytes: int = BLOCK_BYTES) -> int:
  """The fewest blocks, a divisor of `batch`, whose rows take at most block_bytes each (one
  row per block if a single row is larger)."""
  return next((n for n in range(1, batch + 1)
               if batch % n == 0 and batch // n * row_bytes <= block_bytes), batch)


def blocked_softmax_attention(q, k, v, mask, bias, block_bytes: int = BLOCK_BYTES):
  """softmax_attention over blocks of batch rows (see BLOCK_BYTES); the same values.

  The blocks divide the rows each device holds: block i takes rows i, i + n, i + 2n, ..., so with
  the batch sharded over devices in contiguous slices every device keeps its own rows of every
  block and blocking moves nothing between devices. A mask or bias without a batch dimension
  (size 1) is shared by the blocks. Off CPU it runs in one block (the budget is a CPU cache's)."""
  b, q_len, heads, _ = q.shape
  local_rows = b // sharding.shards('batch', b)
  n = batch_blocks(local_rows, heads * q_len * k.shape[1] * 4, block_bytes)
  if n > MAX_BATCH_BLOCKS:  # The most blocks the trace unrolls: larger ones than the budget.
    n = max(d for d in range(1, MAX_BATCH_BLOCKS + 1) if local_rows % d == 0)
  if n == 1 or jax.default_backend() != 'cpu':
    return softmax_attention(q, k, v, mask, bias)

  def rows(x, i):
    if x is None or x.shape[0] != b:
      return x
    return x.reshape((b // n, n) + x.shape[1:])[:, i]

  out = [softmax_attention(rows(q, i), rows(k, i), rows(v, i), rows(mask, i), rows(bias, i))
         for i in range(n)]
  return jnp.stack(out, axis=1).reshape(b, q_len, heads, v.shape[-1])


def query_blocks(length: int, rows: int) -> list[tuple[int, int]]:
  """[start, end) of the fewest near-equal runs of at most `rows` query rows that cover
  range(length); at most MAX_BATCH_BLOCKS runs (longer ones past 64 x rows: the runs are
  unrolled in the traced program)."""
  blocks = min(-(-length // max(rows, 1)), MAX_BATCH_BLOCKS)
  bounds = [length * i // blocks for i in range(blocks + 1)]
  return list(zip(bounds[:-1], bounds[1:]))


def _block_of(x: jax.Array | None, start: int, end: int, first: int = 0) -> jax.Array | None:
  """Rows start..end-1 and columns first..end-1 of a mask or bias [.., q_len, k_len]; an axis
  of size 1 (broadcast) is kept whole."""
  if x is None:
    return None
  if x.shape[-2] != 1:
    x = x[..., start:end, :]
  return x[..., first:end] if x.shape[-1] != 1 else x


def window_mask(query_slots: jax.Array, keys, window: int) -> jax.Array:
  """[q_len, k_len]: True where key slot j is within the `window` slots ending at the query's
  slot (i - window < j; the causal mask bounds j <= i). `keys`: k_len (slots 0..k_len - 1) or
  the key slots themselves."""
  keys = jnp.arange(keys) if isinstance(keys, int) else keys
  return keys[None, :] > query_slots[:, None] - window


def causal_block_attention(q, k, v, mask, bias, rows: int, window: int = 0):
  """`blocked_softmax_attention` of a causal self-attention, without its blocks above the
  diagonal: the queries are split into n runs of at most `rows` rows (`query_blocks`) and each
  attends only to the keys up to its last row, so the [q_len, k_len] logits, weights and their
  gradients are computed for (n + 1) / (2 n) of the pairs (5/8 with four blocks).

  Exact where the mask hides every key after the query (j > i by sequence index, as
  `make_mask(causal=True)` builds without a cache): the skipped pairs are all masked, so each
  query's softmax runs over the same visible keys with the same logits and bias (sliced from the
  full ones; a bias that depends on the mask, CoPE's, is computed from the whole mask before).
  A query that sees no key at all (padding, segment id 0) is the one exception: its output,
  an average of the values that no loss reads, covers the keys of its block instead of all.

  With a sliding `window` (the mask hides keys j <= i - window), each block also starts at the
  first key its first row sees, so no key block wholly outside the window is computed."""
  return over_causal_blocks(blocked_softmax_attention, q, k, v, mask, bias, rows, window)


def over_causal_blocks(attend_block, q, k, v, mask, bias, rows: int, window: int,
                       q_rows: tuple = (), k_rows: tuple = ()):
  """`attend_block(q, k, v, mask, bias, *q_rows, *k_rows)` for each run of at most `rows`
  queries over the keys from the first its window sees to its last row (mask and bias sliced
  alike; `q_rows` and `k_rows`, further [batch, L, ...] arrays such as positions, sliced as
  the queries and as the keys), concatenated along the queries: the block skipping shared by
  the softmax, stick-breaking and the remapped logits."""
  if q.shape[1] != k.shape[1]:
    raise ValueError(f'causal blocks need self-attention (q_len {q.shape[1]} != k_len '
                     f'{k.shape[1]}).')
  out = []
  for start, end in query_blocks(q.shape[1], rows):
    first = max(0, start - window + 1) if window else 0
    out.append(attend_block(q[:, start:end], k[:, first:end], v[:, first:end],
                            _block_of(mask, start, end, first),
                            _block_of(bias, start, end, first),
                            *(x[:, start:end] for x in q_rows),
                            *(x[:, first:end] for x in k_rows)))
  return out[0] if len(out) == 1 else jnp.concatenate(out, axis=1)


def single_document_lengths(segments: jax.Array) -> tuple[jax.Array, jax.Array]:
  """For packed segment ids [batch, L]: each row's number of tokens (int32 [batch]) and whether
  every row is one document followed by padding (ids s > 0, then 0s, at least one token).

  In that case the causal segment mask equals a kernel's causal mode with per-row sequence
  lengths, which cuDNN runs without reading an L x L mask and skipping the upper triangle. A
  row of padding only (in an evaluation's last batch) makes the batch take the mask: its
  length would be 0, a softmax over no keys, whose output the kernels do not define."""
  lengths = jnp.sum(segments > 0, axis=-1, dtype=jnp.int32)
  one = jnp.where(jnp.arange(segments.shape[-1]) < lengths[:, None], segments[:, :1], 0)
  return lengths, jnp.all(segments == one) & jnp.all(lengths > 0)


def _fused(q, k, v, mask, bias, scale, impl, segments, causal, window):
  """jax.nn.dot_product_attention; for an implementation in LENGTHS_PATH_IMPLS with `segments`
  (the mask is the segment mask, causal by index with `causal`) and no bias, sequence lengths
  (and the causal mode) where every row is one document, the mask otherwise (chosen at run
  time by lax.cond: both are compiled, one runs). With a bias, the mask always: the gradient
  of a cond keeps buffers for both paths, and for a [batch, heads, L, L] bias that doubled the
  compiled memory (a bias scheme at 124M on a GPU: 17.5 to 34.4 GiB) for a 6% shorter step."""
  width, v_width = q.shape[-1], v.shape[-1]
  if v_width != width:  # Values of another width (latent attention): zeros fill the narrower.
    widen = lambda x, n: jnp.pad(x, [(0, 0)] * 3 + [(0, n - x.shape[-1])])
    if v_width < width:
      return _fused(q, k, widen(v, width), mask, bias, scale, impl, segments, causal,
                    window)[..., :v_width]
    q, k = widen(q, v_width), widen(k, v_width)
  if bias is not None and impl == 'cudnn':  # cuDNN wants a full bias in the input dtype;
    bias = jnp.broadcast_to(  # XLA adds a float32 bias to float32 logits, like einsum.
        bias, (q.shape[0], q.shape[2], q.shape[1], k.shape[1])).astype(q.dtype)
  masked = lambda: jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=scale,
                                                implementation=impl)
  if (impl not in LENGTHS_PATH_IMPLS or segments is None or bias is not None
      or (window and not causal)):
    return masked()
  lengths, single = single_document_lengths(segments)
  by_lengths = lambda: jax.nn.dot_product_attention(
      q, k, v, scale=scale, is_causal=causal, query_seq_lengths=lengths,
      key_value_seq_lengths=lengths, local_window_size=(window - 1, 0) if window else None,
      implementation=impl)
  return jax.lax.cond(single, by_lengths, masked)


def attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *,
           bias: jax.Array | None = None, scale: float | None = None,
           impl: str = 'einsum', return_probs: bool = True, causal_block: int = 0,
           window: int = 0, segments: jax.Array | None = None, causal: bool = False
           ) -> tuple[jax.Array, jax.Array | None]:
  """Scaled dot-product attention.

  Args:
    q: [batch, q_len, heads, head_dim]; k, v: [batch, k_len, kv_heads, head_dim], kv_heads
      the heads or a divisor of them (grouped-query attention, read without repeating
      them: `grouped_logits`).
    mask: bool, broadcastable to [batch, heads, q_len, k_len].
    bias: optional float additive logits bias, broadcastable like mask.
    scale: logits scale, default 1/sqrt(head_dim).
    impl: one of IMPLEMENTATIONS ('pallas' runs the einsum path here: the self-attention layer
      calls the fused kernel of roformer/fused_bias.py itself where it applies).
    return_probs: the einsum path also returns the probabilities (a scheme with a value term
      needs them); without, it runs `softmax_attention`, which never normalises them, in
      blocks of batch rows (`blocked_softmax_attention`).
    causal_block: > 0, for the einsum path without probabilities: the mask is causal by
      sequence index (q_len == k_len, no cache), so `causal_block_attention` skips the blocks
      above the diagonal, in query blocks of at most this many rows.
    window: > 0 with causal_block or segments: the mask also hides keys j <= i - window (a
      sliding window), so the blocks skip the keys before their window too.
    segments, causal: for 'xla' and 'cudnn': the packed segment ids [batch, L] of a
      self-attention without a cache whose mask is `make_mask(segments, segments,
      causal=causal)` (and the window, when causal). Without a bias, where every row holds one
      document, cuDNN (LENGTHS_PATH_IMPLS) runs with sequence lengths (in its causal mode)
      instead of reading the mask as an additive bias. The outputs at padding queries (which no loss or later
      token reads) may differ.
  Returns:
    (output [batch, q_len, heads, head_dim], probabilities [batch, heads, q_len, k_len] for the
    einsum path with return_probs, None otherwise). Fully masked rows average the values
    instead of giving NaN.
  """
  if scale is None:
    scale = q.shape[-1] ** -0.5
  if impl == 'einsum':
    q = q * jnp.asarray(scale, q.dtype)
    if not return_probs:
      if 0 < causal_block < q.shape[1]:
        return causal_block_attention(q, k, v, mask, bias, causal_block, window), None
      return blocked_softmax_attention(q, k, v, mask, bias), None
    probs = softmax(_masked_logits(q, k, mask, bias)).astype(v.dtype)
    return grouped_values(probs, v), probs
  if impl in ('xla', 'cudnn'):
    return _fused(q, k, v, mask, bias, scale, impl, segments, causal, window), None
  if impl == 'pallas':  # The layer runs the kernel itself (fused_bias.py); here, the mask's.
    return attend(q, k, v, mask, bias=bias, scale=scale, impl='einsum',
                  return_probs=return_probs, causal_block=causal_block, window=window)
  raise errors.ConfigError(f'config.model.attention_impl={impl!r} is unknown. Fix: choose one of '
                   f'{IMPLEMENTATIONS}.')


def attend_logits(logits: jax.Array, v: jax.Array, mask: jax.Array,
                  sink: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """softmax(logits, masked) v for logits a position scheme computed itself (its `logits`
  hook: float32 [batch, heads, q_len, k_len], already scaled). Returns (output
  [batch, q_len, heads, head_dim], probabilities), as `attend`'s einsum path with probabilities;
  fully masked rows average the values. `sink` (float32 [heads]) joins each row's softmax as
  one more logit that weights no value: the weights then sum to less than 1, and a fully masked
  row weights nothing."""
  logits = jnp.where(mask, logits.astype(jnp.float32), jnp.finfo(jnp.float32).min)
  if sink is None:
    probs = softmax(logits)
  else:
    column = jnp.broadcast_to(sink.astype(jnp.float32)[None, :, None, None],
                              logits.shape[:-1] + (1,))
    probs = softmax(jnp.concatenate([logits, column], axis=-1))[..., :-1]
  probs = probs.astype(v.dtype)
  return jnp.einsum('bhqk,bkhd->bqhd', probs, v), probs


def stick_breaking_weights(logits: jax.Array, attend_current: bool = False,
                           mask: jax.Array | None = None,
                           query_slots: jax.Array | None = None) -> jax.Array:
  """Stick-breaking attention's weights (Tan et al., ICLR 2025) from logits [..., q_len, k_len]:
  beta_ij = sigmoid(z_ij) and A_ij = beta_ij prod_{j<l<i} (1 - beta_il) for keys j < i (with
  `attend_current`, keys j <= i and the product over j < l <= i). Each query takes what is left
  of a unit stick from its nearest key outwards; no softmax, no normalisation.

  Computed in log space: log A_ij = log sigmoid(z_ij) + sum_{l>j} log sigmoid(-z_il), the sum
  over the keys the query may attend to, one reverse cumulative sum per row, so that logits of
  +-60 and more give no NaN or overflow in float32 or bfloat16 (the weights are float32).
  `mask` (bool, broadcastable to the logits) removes keys that neither take nor break the stick
  (other packed segments, padding, unfilled cache slots); `query_slots` [q_len] is each query's
  key slot (default: the last q_len keys, as in a full causal pass), which decides the diagonal.
  """
  z = logits.astype(jnp.float32)
  q_len, k_len = z.shape[-2:]
  if query_slots is None:
    query_slots = k_len - q_len + jnp.arange(q_len)
  keys = jnp.arange(k_len)
  allowed = (keys[None, :] <= query_slots[:, None]) if attend_current else (
      keys[None, :] < query_slots[:, None])
  if mask is not None:
    allowed = allowed & mask
  allowed = jnp.broadcast_to(allowed, z.shape)
  log_rest = jnp.where(allowed, jax.nn.log_sigmoid(-z), 0.0)  # log(1 - beta_il)
  after = jnp.flip(jnp.cumsum(jnp.flip(log_rest, -1), axis=-1), -1) - log_rest  # l > j
  return jnp.where(allowed, jnp.exp(jax.nn.log_sigmoid(z) + after), 0.0)


def rms_norm(x: jax.Array, scale: jax.Array, eps: float = 1e-6) -> jax.Array:
  """x / rms(x) * scale over the last axis, in float32, returned in x's dtype."""
  y = x.astype(jnp.float32)
  y = y * jax.lax.rsqrt(jnp.mean(y * y, axis=-1, keepdims=True) + eps)
  return (y * scale.astype(jnp.float32)).astype(x.dtype)
