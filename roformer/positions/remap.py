"""Position remaps for running a RoPE model beyond its trained length without training: the
relative distance each method lets RoPE see between query i and key j <= i, defined once here
for the attention that applies them, the tests and the docs.

With d = i - j:

| method | options | distance |
|---|---|---|
| `none` | | d |
| `rerope` (Su 2023) | `window` w | min(d, w) |
| `leaky_rerope` (Su 2023) | `window` w, `k` | d below w, w + (d - w) / k from w on |
| `self_extend` (Jin et al. 2024) | `neighbor_window` W, `group_size` G | d below W, floor(i/G) - floor(j/G) + W - floor(W/G) from W on |
| `string` (An et al. 2025) | `shift` S, `local_window` W | d below S, d - S + W from S on |
| `dca` (An et al. 2024) | `chunk_size` s, `local_window` w | the query's seat minus the key's, below |

Dual Chunk Attention seats key j at j mod s. The query i sits at i mod s for a key in its own
chunk, at min(s + (i mod s), c - 1) for a key in the chunk before (c = s + w, the trained
length: the first w queries of a chunk keep their true distance to the previous chunk's tail),
and at c - 1 for a key in any older chunk. Every distance it gives lies in [0, c - 1].

The matrices are float64 [length, length] with zeros above the diagonal (keys after the
query), computed with numpy: they are small, exact, and the attention converts what it needs.

Every method is piecewise a difference of positions: in each region of (i, j) the distance is
p(i) - p'(j) for a query position p and a key position p' (`regions`). RoPE's logits under a
remap are therefore one rotation of the queries and one of the keys per region, the regions'
logits selected by their masks before one softmax (`remapped_rope_logits`): two passes for
ReRoPE, Self-Extend and STRING, three for DCA, instead of a rotation per (i, j) pair.
"""

import jax
import jax.numpy as jnp
import numpy as np

from roformer import errors
from roformer.positions import rotary

# method -> {option: (smallest value, whether it must be an integer)}
OPTIONS = {
    'none': {},
    'rerope': {'window': (1, True)},
    'leaky_rerope': {'window': (1, True), 'k': (1.0, False)},
    'self_extend': {'neighbor_window': (1, True), 'group_size': (1, True)},
    'string': {'shift': (1, True), 'local_window': (0, True)},
    'dca': {'chunk_size': (1, True), 'local_window': (0, True)},
}
METHODS = tuple(OPTIONS)


def check(method: str, length: int, options: dict) -> None:
  """Raises ConfigError naming the method's option and the fix for an unknown method, a
  missing, unknown or out-of-range option, or a STRING shift that moves distances up."""
  where = f'relative_distances(method={method!r})'
  if method not in OPTIONS:
    raise errors.ConfigError(f'{where}: unknown method. Fix: one of {METHODS}.')
  if not isinstance(length, (int, np.integer)) or length < 1:
    raise errors.ConfigError(f'{where}: length={length!r} must be a positive integer.')
  wanted = OPTIONS[method]
  unknown, missing = sorted(set(options) - set(wanted)), sorted(set(wanted) - set(options))
  if unknown or missing:
    raise errors.ConfigError(
        f'{where}: ' + (f'unknown options {unknown}' if unknown else f'missing {missing}') +
        f'. Fix: give exactly {sorted(wanted) or "no options"}.')
  for name, (low, integer) in wanted.items():
    value = options[name]
    if (integer and (isinstance(value, bool) or value != int(value))) or not value >= low:
      kind = 'an integer' if integer else 'a number'
      raise errors.ConfigError(f'{where}: {name}={value!r} must be {kind} >= {low}.')
  if method == 'string' and options['local_window'] >= options['shift']:
    raise errors.ConfigError(
        f"{where}: local_window={options['local_window']} must be below shift="
        f"{options['shift']}: distances from the shift on become d - shift + local_window, "
        'which must be smaller than d.')


def relative_distances(method: str, length: int, **options) -> np.ndarray:
  """The [length, length] float64 matrix of the relative distance RoPE sees between query i
  (row) and key j <= i (column) under `method` (see the module's table); 0 above the diagonal.
  Bad arguments raise ConfigError naming the option."""
  check(method, length, options)
  i = np.arange(length)[:, None]
  j = np.arange(length)[None, :]
  d = (i - j).astype(np.float64)
  if method == 'none':
    out = d
  elif method == 'rerope':
    out = np.minimum(d, options['window'])
  elif method == 'leaky_rerope':
    w, k = options['window'], float(options['k'])
    out = np.where(d < w, d, w + (d - w) / k)
  elif method == 'self_extend':
    w, g = int(options['neighbor_window']), int(options['group_size'])
    out = np.where(d < w, d, (i // g - j // g + w - w // g).astype(np.float64))
  elif method == 'string':
    s, w = options['shift'], options['local_window']
    out = np.where(d < s, d, d - s + w)
  else:  # dca
    s, w = int(options['chunk_size']), int(options['local_window'])
    top = s + w - 1
    chunk_i, chunk_j = i // s, j // s
    seat = np.where(chunk_j == chunk_i, i % s,
                    np.where(chunk_j == chunk_i - 1, np.minimum(s + i % s, top), top))
    out = (seat - j % s).astype(np.float64)
  return np.where(j <= i, out, 0.0)


def regions(method: str, length: int, **options) -> list[tuple[np.ndarray, np.ndarray,
                                                                 np.ndarray]]:
  """(query positions [length], key positions [length], mask [length, length]) per region of
  `method`: within a region's mask the distance of relative_distances is q_pos[i] - k_pos[j];
  the masks partition the pairs j <= i. Positions are float64 (Leaky ReRoPE's are fractional)."""
  check(method, length, options)
  pos = np.arange(length, dtype=np.float64)
  i, j = np.arange(length)[:, None], np.arange(length)[None, :]
  d, causal = i - j, j <= i
  if method == 'none':
    return [(pos, pos, causal)]
  if method in ('rerope', 'leaky_rerope'):
    w = options['window']
    k = float(options.get('k', np.inf))  # ReRoPE: every distance from w on is w.
    far_q = np.full(length, float(w)) if k == np.inf else pos / k + w - w / k
    far_k = np.zeros(length) if k == np.inf else pos / k
    return [(pos, pos, causal & (d < w)), (far_q, far_k, causal & (d >= w))]
  if method == 'self_extend':
    w, g = int(options['neighbor_window']), int(options['group_size'])
    grouped = np.floor(pos / g)
    return [(pos, pos, causal & (d < w)), (grouped + w - w // g, grouped, causal & (d >= w))]
  if method == 'string':
    s, w = options['shift'], options['local_window']
    return [(pos, pos, causal & (d < s)), (pos - s + w, pos, causal & (d >= s))]
  s, w = int(options['chunk_size']), int(options['local_window'])
  top, within = s + w - 1, pos % s
  chunk_i, chunk_j = i // s, j // s
  return [(within, within, causal & (chunk_j == chunk_i)),
          (np.minimum(s + within, top), within, causal & (chunk_j == chunk_i - 1)),
          (np.full(length, float(top)), within, causal & (chunk_j < chunk_i - 1))]


def remapped_rope_logits(q: jax.Array, k: jax.Array, inv_freq, method: str, /,
                         layout: str = 'interleaved', **options) -> jax.Array:
  """RoPE logits q_i^T R(r_ij) k_j at the distances r of relative_distances(method, ...), for
  queries and keys [batch, length, heads, d] (the same length: a full pass) and RoPE's
  frequencies `inv_freq` [d/2]: float32 [batch, heads, length, length], unscaled, 0 above the
  diagonal. One rotation of q and k per region (`regions`), the regions' products selected by
  their masks. The arguments before `layout` are positional (Leaky ReRoPE's option `k` is
  not the keys)."""
  length = q.shape[1]
  out = jnp.zeros((q.shape[0], q.shape[2], length, length), jnp.float32)
  for q_pos, k_pos, mask in regions(method, length, **options):
    qr = rotary.rotate_pairs(q.astype(jnp.float32), jnp.asarray(q_pos, jnp.float32), inv_freq,
                             layout)
    kr = rotary.rotate_pairs(k.astype(jnp.float32), jnp.asarray(k_pos, jnp.float32), inv_freq,
                             layout)
    logits = jnp.einsum('bihd,bjhd->bhij', qr, kr)
    out = jnp.where(jnp.asarray(mask), logits, out)
  return out
