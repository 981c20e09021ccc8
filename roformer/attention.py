"""Multi-head attention: masks and one entry point with selectable implementations.

`impl='einsum'` is an explicit einsum/softmax path that supports every position scheme and is the
fastest on CPU. `impl='xla'` or `'cudnn'` call `jax.nn.dot_product_attention` (cuDNN flash attention
on GPU), for schemes without a value term; an additive logits bias is passed as its `bias`.
`impl='auto'` (the default) is resolved per model by `resolve`: cuDNN on a GPU with half-precision
activations, `jax.nn.dot_product_attention` on other accelerators, einsum on CPU or when the
scheme adds a value term (Shaw).
"""

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


def resolve(impl: str, *, dtype, einsum_only: bool = False, backend: str | None = None) -> str:
  """The implementation `attend` runs for `impl` (one of IMPLEMENTATIONS): 'auto' becomes
  'einsum' for a scheme only the einsum path can run (a value term needs the probabilities, a
  scheme may compute the logits itself) and on CPU, 'cudnn' on a
  GPU with bfloat16/float16 activations (cuDNN's fused kernels take no float32), and 'xla'
  otherwise (float32 on GPU, TPU). Explicit choices are returned unchanged."""
  if impl != 'auto':
    return impl
  backend = backend or jax.default_backend()
  if einsum_only or backend == 'cpu':
    return 'einsum'
  if backend in ('gpu', 'cuda', 'rocm') and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16):
    return 'cudnn'
  return 'xla'


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


def _masked_logits(q, k, mask, bias):
  """Float32 q k^T (q already scaled) plus the bias; masked entries the most negative float."""
  logits = jnp.einsum('bqhd,bkhd->bhqk', q, k, preferred_element_type=jnp.float32)
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
  out = (jnp.einsum('bhqk,bkhd->bqhd', e.astype(v.dtype), v,
                    preferred_element_type=jnp.float32) / total).astype(v.dtype)
  return out, (q, k, v, mask, bias, e, total, out)


def _softmax_attention_bwd(residuals, d_out):
  q, k, v, mask, bias, e, total, out = residuals
  scaled = d_out.astype(jnp.float32) / total  # d_out / rowsum(e): [batch, q_len, heads, d].
  d_v = jnp.einsum('bhqk,bqhd->bkhd', e, scaled).astype(v.dtype)
  d_e = jnp.einsum('bqhd,bkhd->bhqk', scaled, v, preferred_element_type=jnp.float32)
  row = jnp.swapaxes(jnp.sum(scaled * out.astype(jnp.float32), axis=-1), 1, 2)[..., None]
  d_logits = jnp.where(mask, e * (d_e - row), 0.0)
  d_q = jnp.einsum('bhqk,bkhd->bqhd', d_logits, k.astype(jnp.float32)).astype(q.dtype)
  d_k = jnp.einsum('bhqk,bqhd->bkhd', d_logits, q.astype(jnp.float32)).astype(k.dtype)
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


def window_mask(query_slots: jax.Array, k_len: int, window: int) -> jax.Array:
  """[q_len, k_len]: True where key slot j is within the `window` slots ending at the query's
  slot (i - window < j; the causal mask bounds j <= i)."""
  return jnp.arange(k_len)[None, :] > query_slots[:, None] - window


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
  return _over_causal_blocks(blocked_softmax_attention, q, k, v, mask, bias, rows, window)


def _over_causal_blocks(attend_block, q, k, v, mask, bias, rows: int, window: int):
  """`attend_block(q, k, v, mask, bias)` for each run of at most `rows` queries over the keys
  from the first its window sees to its last row (mask and bias sliced alike), concatenated
  along the queries: the block skipping shared by the softmax and stick-breaking."""
  if q.shape[1] != k.shape[1]:
    raise ValueError(f'causal blocks need self-attention (q_len {q.shape[1]} != k_len '
                     f'{k.shape[1]}).')
  out = []
  for start, end in query_blocks(q.shape[1], rows):
    first = max(0, start - window + 1) if window else 0
    out.append(attend_block(q[:, start:end], k[:, first:end], v[:, first:end],
                            _block_of(mask, start, end, first),
                            _block_of(bias, start, end, first)))
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
    q: [batch, q_len, heads, head_dim]; k, v: [batch, k_len, heads, head_dim].
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
    return jnp.einsum('bhqk,bkhd->bqhd', probs, v), probs
  if impl in ('xla', 'cudnn'):
    return _fused(q, k, v, mask, bias, scale, impl, segments, causal, window), None
  if impl == 'pallas':  # The layer runs the kernel itself (fused_bias.py); here, the mask's.
    return attend(q, k, v, mask, bias=bias, scale=scale, impl='einsum',
                  return_probs=return_probs, causal_block=causal_block, window=window)
  raise errors.ConfigError(f'config.model.attention_impl={impl!r} is unknown. Fix: choose one of '
                   f'{IMPLEMENTATIONS}.')


# On CPU DAPE's MLP runs over chunks of query rows whose [rows, batch, k_len, width] hidden layer
# takes at most this many bytes, recomputed in the backward pass, so that its passes stay in
# cache (docs/performance.md: the variable-tracking step 1.6x faster with the layout change, its
# memory 582 -> 210 MiB). Off CPU it runs in one piece.
DAPE_CHUNK_BYTES = 2**20


def dape_logits(logits: jax.Array, bias: jax.Array, w1, b1, w2, b2,
                chunk_bytes: int | None = None) -> jax.Array:
  """DAPE's logits: logits + bias + f([logits; bias]) for logits [batch, heads, q, k] (scaled)
  and a bias broadcastable to them, f a two-layer MLP over each (query, key) pair's 2 x heads
  values: gelu(x w1 + b1) w2 + b2 with w1 [2 heads, width] and w2 [width, heads]. Float32; the
  mask is applied after, by the softmax.

  The pairs are laid out [q, batch, k, 2 heads] so that both layers are plain matmuls over the
  last axis (contracting the heads axis in place made XLA transpose the width-sized hidden
  layer), and on CPU they go through the MLP in chunks of query rows (DAPE_CHUNK_BYTES,
  or `chunk_bytes` on any backend; 0: one piece); the batch axis, which a mesh shards, is not
  split."""
  logits = logits.astype(jnp.float32)
  bias = jnp.broadcast_to(bias.astype(jnp.float32), logits.shape)
  b, h, q_len, k_len = logits.shape
  width = w1.shape[-1]
  pairs = jnp.transpose(jnp.concatenate([logits, bias], axis=1), (2, 0, 3, 1))  # [q, b, k, 2h]

  def mlp(x):
    return jax.nn.gelu(x @ w1 + b1) @ w2 + b2

  if chunk_bytes is None:
    chunk_bytes = DAPE_CHUNK_BYTES if jax.default_backend() == 'cpu' else 0
  local_rows = b // sharding.shards('batch', b)
  n = 1 if not chunk_bytes else batch_blocks(q_len, local_rows * k_len * width * 4,
                                              chunk_bytes)
  if n == 1:
    f = mlp(pairs)
  else:
    chunks = pairs.reshape(n, q_len // n, b, k_len, 2 * h)
    f = jax.lax.map(jax.checkpoint(mlp), chunks).reshape(q_len, b, k_len, h)
  return logits + bias + jnp.transpose(f, (1, 3, 0, 2))


def attend_logits(logits: jax.Array, v: jax.Array, mask: jax.Array
                  ) -> tuple[jax.Array, jax.Array]:
  """softmax(logits, masked) v for logits a position scheme computed itself (its `logits`
  hook: float32 [batch, heads, q_len, k_len], already scaled). Returns (output
  [batch, q_len, heads, head_dim], probabilities), as `attend`'s einsum path with probabilities;
  fully masked rows average the values."""
  logits = jnp.where(mask, logits.astype(jnp.float32), jnp.finfo(jnp.float32).min)
  probs = softmax(logits).astype(v.dtype)
  return jnp.einsum('bhqk,bkhd->bqhd', probs, v), probs


# --------------------------------------------------------------------- stick-breaking


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


def stick_breaking_attend(logits: jax.Array, v: jax.Array, mask: jax.Array, *,
                          attend_current: bool, query_slots: jax.Array | None = None
                          ) -> tuple[jax.Array, jax.Array]:
  """sum_j A_ij v_j with A the stick-breaking weights of `logits` [batch, heads, q_len, k_len]
  (scaled, biases added); what is left of the stick (1 - sum_j A_ij) weighs no value. Returns
  (output [batch, q_len, heads, head_dim], the weights) as `attend_logits` does."""
  weights = stick_breaking_weights(logits, attend_current, mask, query_slots).astype(v.dtype)
  return jnp.einsum('bhqk,bkhd->bqhd', weights, v), weights


def stick_breaking(q, k, v, mask, bias, *, attend_current: bool, causal_block: int = 0,
                   window: int = 0, query_slots: jax.Array | None = None
                   ) -> tuple[jax.Array, jax.Array | None]:
  """`stick_breaking_attend` of q.k/sqrt(d) + bias, as `attend` is for the softmax: with
  0 < `causal_block` < q_len (a causal self-attention without a cache), without the blocks
  above the diagonal; each run of at most `causal_block` queries computes its logits, weights
  and weighted values over the keys up to its last row only (from the first key its window
  sees, with a sliding `window`). Exact: a key after the query, like any masked key, neither
  takes nor breaks its stick. `query_slots` (the queries' cache slots) is for the whole
  matrix: the blocks are a full causal pass, slots 0..q_len-1. Returns (output [batch, q_len,
  heads, head_dim], the weights, or None from the blocks)."""
  if 0 < causal_block < q.shape[1]:
    block = lambda q, k, v, mask, bias: stick_breaking_attend(
        scaled_logits(q, k, bias), v, mask, attend_current=attend_current)[0]
    return _over_causal_blocks(block, q, k, v, mask, bias, causal_block, window), None
  return stick_breaking_attend(scaled_logits(q, k, bias), v, mask,
                               attend_current=attend_current, query_slots=query_slots)


# ------------------------------------------------------------------------------ FAVOR+


def orthogonal_features(key: jax.Array, num_features: int, dim: int) -> jax.Array:
  """FAVOR+'s random projection [num_features, dim]: blocks of dim orthogonal rows (QR of a
  Gaussian matrix), each row rescaled to the norm of an independent Gaussian vector, so every
  row is marginally N(0, I) while rows within a block stay exactly orthogonal."""
  blocks = -(-num_features // dim)
  keys = jax.random.split(key, blocks + 1)
  rows = []
  for k in keys[:-1]:
    q, r = jnp.linalg.qr(jax.random.normal(k, (dim, dim), jnp.float32))
    rows.append((q * jnp.sign(jnp.diag(r))).T)  # Signs fixed: Haar-distributed, unbiased.
  norms = jnp.linalg.norm(jax.random.normal(keys[-1], (num_features, dim), jnp.float32), axis=1)
  return jnp.concatenate(rows)[:num_features] * norms[:, None]


SHIFT_CAP = 40.0  # exp(40) ~ 2e17 and exp(-40) ~ 4e-18: far from float32's limits.


def positive_features(x: jax.Array, projection: jax.Array, *, is_query: bool,
                      valid: jax.Array | None = None) -> jax.Array:
  """Positive random features with E[phi(q).phi(k)] = exp(q.k / sqrt(d)) (times a per-query
  constant), for x = input * d^-1/4 and rows w_r of the projection:

    keys:    phi(k)_r = exp(w_r.k - |k|^2/2 - s_r) / sqrt(m)
    queries: phi(q)_r = exp(w_r.q - |q|^2/2 + s_r - c_q) / sqrt(m)

  The s_r moved from keys to queries cancels in phi(q).phi(k), and c_q (the max over r of
  the query's exponents) cancels between numerator and denominator, so a key's features depend
  on that key alone: unlike a max over all keys, nothing about future keys reaches a causal
  prefix sum. Only the part of |w_r|^2/2 above SHIFT_CAP moves (s_r = max(|w_r|^2/2 - cap, 0)),
  so key exponents stay <= cap (no overflow) and typical ones >= -cap (no underflow, even at
  head_dim 128 where |w_r|^2/2 reaches ~90). Rows where `valid` is False (padding
  keys) become exactly 0 (phi(0) is not 0).
  x: [batch, len, heads, d] -> float32 [batch, len, heads, m]."""
  d = x.shape[-1]
  x = x.astype(jnp.float32) * d ** -0.25
  exponent = jnp.einsum('blhd,md->blhm', x, projection) - 0.5 * jnp.sum(
      x * x, axis=-1, keepdims=True)
  shift = jnp.maximum(0.5 * jnp.sum(projection * projection, axis=-1) - SHIFT_CAP, 0.0)
  if is_query:
    exponent = exponent + shift
    exponent = exponent - jax.lax.stop_gradient(jnp.max(exponent, axis=-1, keepdims=True))
  else:
    exponent = exponent - shift
  phi = jnp.exp(exponent) * projection.shape[0] ** -0.5  # No additive eps: it would bias
  # the many tiny key features; an all-zero denominator is guarded where it is divided.
  return phi if valid is None else jnp.where(valid[:, :, None, None], phi, 0.0)


def causal_linear_sums(qf, kf, v, segment_ids, chunk: int = 128):
  """sum_{j <= i, same segment} (qf_i . kf_j) v_j for every i, in O(L) memory: a scan over
  chunks carries the running sums of kf_j v_j^T [m, d] of the segment that reaches the chunk
  boundary; inside a chunk a masked [chunk, chunk] product does the rest. Packed segments must
  be contiguous runs (as packing makes them). qf, kf: [b, L, h, m]; v: [b, L, h, d];
  segment_ids: [b, L]. Returns float32 [b, L, h, d]."""
  b, length, h, m = qf.shape
  d = v.shape[-1]
  pad = -length % chunk
  if pad:
    widen = lambda x: jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
    qf, kf, v, segment_ids = widen(qf), widen(kf), widen(v), widen(segment_ids)
  n = qf.shape[1] // chunk
  split = lambda x: jnp.moveaxis(x.reshape((b, n, chunk) + x.shape[2:]), 1, 0)
  causal = jnp.tril(jnp.ones((chunk, chunk), bool))

  def step(carry, xs):
    state, carried = carry  # [b, h, m, d], [b]
    q_c, k_c, v_c, s_c = xs
    continues = (s_c == carried[:, None]).astype(jnp.float32)  # [b, c]
    earlier = jnp.einsum('bchm,bhmd->bchd', q_c, state) * continues[:, :, None, None]
    within = jnp.einsum('bihm,bjhm->bhij', q_c, k_c)
    within = jnp.where(causal & (s_c[:, :, None] == s_c[:, None, :])[:, None], within, 0.0)
    out = earlier + jnp.einsum('bhij,bjhd->bihd', within, v_c.astype(jnp.float32))
    last = s_c[:, -1]
    in_last = (s_c == last[:, None]).astype(jnp.float32)
    chunk_state = jnp.einsum('bjhm,bjhd,bj->bhmd', k_c, v_c.astype(jnp.float32), in_last)
    keep = (last == carried)[:, None, None, None]
    return (jnp.where(keep, state + chunk_state, chunk_state), last), out

  init = (jnp.zeros((b, h, m, d), jnp.float32), jnp.full((b,), -1, segment_ids.dtype))
  _, out = jax.lax.scan(step, init, (split(qf), split(kf), split(v), split(segment_ids)))
  return jnp.moveaxis(out, 0, 1).reshape(b, n * chunk, h, d)[:, :length]


def linear_sums(qf, kf, v, segment_ids, *, causal: bool, chunk: int = 128):
  """Causal sums, or bidirectional ones (every j of i's segment) as a forward pass plus a
  backward pass without the diagonal, each O(L) in memory."""
  forward = causal_linear_sums(qf, kf, v, segment_ids, chunk)
  if causal:
    return forward
  flip = lambda x: jnp.flip(x, axis=1)
  backward = flip(causal_linear_sums(flip(qf), flip(kf), flip(v), flip(segment_ids), chunk))
  diagonal = jnp.einsum('blhm,blhm->blh', qf, kf)[..., None] * v.astype(jnp.float32)
  return forward + backward - diagonal


def favor_attend(q, k, v, segment_ids, projection, *, causal: bool, rotate=None,
                 chunk: int = 128) -> jax.Array:
  """FAVOR+ attention (Choromanski et al. 2021): D^-1 (phi(Q) (phi(K)^T V)), with the sums
  restricted to each query's segment (and to j <= i when causal). `rotate(x)` rotates feature
  vectors by their positions for RoPE as the RoFormer paper does it: in the numerator only, the
  denominator keeps the unrotated (positive) features. q, k, v: [b, L, h, d]."""
  valid = segment_ids > 0
  qf = positive_features(q, projection, is_query=True)
  kf = positive_features(k, projection, is_query=False, valid=valid)
  ones = jnp.ones(v.shape[:-1] + (1,), jnp.float32)
  if rotate is None:
    sums = linear_sums(qf, kf, jnp.concatenate([v.astype(jnp.float32), ones], -1),
                       segment_ids, causal=causal, chunk=chunk)
    numerator, denominator = sums[..., :-1], sums[..., -1:]
  else:
    qr, kr = rotate(qf, kf)
    numerator = linear_sums(qr, kr, v, segment_ids, causal=causal, chunk=chunk)
    denominator = linear_sums(qf, kf, ones, segment_ids, causal=causal, chunk=chunk)
  out = numerator / jnp.where(denominator > 0, denominator, 1.0)
  return jnp.where(valid[:, :, None, None], out, 0.0).astype(v.dtype)


def favor_attend_masked(q, k, v, mask, projection, *, rotate=None) -> jax.Array:
  """FAVOR+ with an explicit boolean mask [b, 1, q_len, k_len]: the same estimator as
  `favor_attend`, for a few queries over a key/value cache (decoding), where the q_len x k_len
  products are small."""
  valid = mask.any(axis=(1, 2))  # Keys some query may see: [b, k_len].
  qf = positive_features(q, projection, is_query=True)
  kf = positive_features(k, projection, is_query=False, valid=valid)
  weights = jnp.einsum('bqhm,bkhm->bhqk', qf, kf) * mask
  denominator = weights.sum(-1)  # [b, h, q]
  if rotate is not None:
    qf, kf = rotate(qf, kf)
    weights = jnp.einsum('bqhm,bkhm->bhqk', qf, kf) * mask
  numerator = jnp.einsum('bhqk,bkhd->bqhd', weights, v.astype(jnp.float32))
  denominator = jnp.moveaxis(denominator, 1, 2)[..., None]
  return (numerator / jnp.where(denominator > 0, denominator, 1.0)).astype(v.dtype)


def rms_norm(x: jax.Array, scale: jax.Array, eps: float = 1e-6) -> jax.Array:
  """x / rms(x) * scale over the last axis, in float32, returned in x's dtype."""
  y = x.astype(jnp.float32)
  y = y * jax.lax.rsqrt(jnp.mean(y * y, axis=-1, keepdims=True) + eps)
  return (y * scale.astype(jnp.float32)).astype(x.dtype)


def nope_temperature(positions: jax.Array, floor: int, scale: float) -> jax.Array:
  """Llama 4's query temperature at integer `positions`: 1 + scale log(floor((p + 1) / floor)
  + 1), float32 (exactly 1 below `floor`)."""
  p = positions.astype(jnp.float32)
  return 1.0 + scale * jnp.log(jnp.floor((p + 1.0) / floor) + 1.0)


def ssmax_factor(scale: jax.Array, mask: jax.Array) -> jax.Array:
  """Scalable-Softmax's factor s_h log n_i [batch or 1, heads, q_len]: n_i is the number of keys
  query i may see (its row of the mask), s_h the head's learned scale."""
  n = jnp.sum(mask, axis=-1, dtype=jnp.float32)  # [batch or 1, 1 or heads, q_len]
  return scale.astype(jnp.float32)[None, :, None] * jnp.log(jnp.maximum(n, 1.0))
