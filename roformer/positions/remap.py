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
| `sinks` (Xiao et al. 2023) | `sink_tokens` S, `window` W | d below W; min(i, S + W - 1) - j for a sink j < S; other keys unseen |

Dual Chunk Attention seats key j at j mod s. The query i sits at i mod s for a key in its own
chunk, at min(s + (i mod s), c - 1) for a key in the chunk before (c = s + w, the trained
length: the first w queries of a chunk keep their true distance to the previous chunk's tail),
and at c - 1 for a key in any older chunk. Every distance it gives lies in [0, c - 1].

Attention sinks (StreamingLLM) keep the first S tokens and the last W in a cache and number the
keys by their slot in it: a query past S + W - 1 tokens sits at slot S + W - 1, so the window's
distances are true and a sink j is S + W - 1 - j away. Keys that are neither sinks nor in the
window are not seen: relative_distances gives NaN there, and `visible` says which pairs are.

The matrices are float64 [length, length] with zeros above the diagonal (keys after the
query), computed with numpy: they are small, exact, and the attention converts what it needs.

Every method is piecewise a difference of positions: in each region of (i, j) the distance is
p(i) - p'(j) for a query position p and a key position p' (`regions`). RoPE's logits under a
remap are therefore one rotation of the queries and one of the keys per region, the regions'
logits selected by their masks before one softmax (`remapped_logits`): two passes for
ReRoPE, Self-Extend and STRING, three for DCA, instead of a rotation per (i, j) pair.
"""

import jax
import jax.numpy as jnp
import numpy as np

from roformer import errors
from roformer import specs

# method -> the options it reads.
OPTIONS = {
    'none': (),
    'rerope': ('window',),
    'leaky_rerope': ('window', 'k'),
    'self_extend': ('neighbor_window', 'group_size'),
    'string': ('shift', 'local_window'),
    'dca': ('chunk_size', 'local_window'),
    'sinks': ('sink_tokens', 'window'),
}
METHODS = tuple(OPTIONS)
# Each option's type, range and default, declared once: rotary.py puts them under
# config.model.position.rope.remap, and `check` holds a call's options to their lower ends.
SPECS = {
    'method': specs.Str(METHODS, default='none'),
    'window': specs.Int(1, 2**30, default=256),  # rerope, leaky_rerope, sinks
    'k': specs.Float(1, 1e9, default=16.0),  # leaky_rerope
    'neighbor_window': specs.Int(1, 2**30, default=256),  # self_extend
    'group_size': specs.Int(1, 2**30, default=8),  # self_extend
    'shift': specs.Int(1, 2**30, default=256),  # string
    'local_window': specs.Int(0, 2**30, default=32),  # string, dca
    'chunk_size': specs.Int(1, 2**30, default=256),  # dca
    'sink_tokens': specs.Int(0, 2**30, default=4),  # sinks (with window)
}


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
  for name in wanted:
    value, spec = options[name], SPECS[name]
    low, integer = spec.min, isinstance(spec, specs.Int)
    if (integer and (isinstance(value, bool) or value != int(value))) or not value >= low:
      kind = 'an integer' if integer else 'a number'
      raise errors.ConfigError(f'{where}: {name}={value!r} must be {kind} >= {low}.')
  if method == 'string' and options['local_window'] >= options['shift']:
    raise errors.ConfigError(
        f"{where}: local_window={options['local_window']} must be below shift="
        f"{options['shift']}: distances from the shift on become d - shift + local_window, "
        'which must be smaller than d.')


def longest_kept(method: str, options: dict) -> tuple[str, int, int] | None:
  """(the options in words, their value, how many positions more than it they need): a
  method's window, chunk or shift sets the distances it lets RoPE see at their own value, which
  the model must have been trained on for the method to mean what it says (a window w reaches
  distance w, so it needs w + 1 trained positions; DCA's chunk plus local window and the sinks
  plus window are lengths, so they need as many). None for `none`."""
  o = options
  needs = {
      'rerope': lambda: ('window', o['window'], 1),
      'leaky_rerope': lambda: ('window', o['window'], 1),
      'self_extend': lambda: ('neighbor_window', o['neighbor_window'], 1),
      'string': lambda: ('shift', o['shift'], 0),
      'dca': lambda: ('chunk_size + local_window', o['chunk_size'] + o['local_window'], 0),
      'sinks': lambda: ('sink_tokens + window', o['sink_tokens'] + o['window'], 0),
  }
  return needs[method]() if method in needs else None


def fitted(trained: int, longest: int) -> dict[str, dict]:
  """Each method's options for a model trained at `trained` positions and evaluated up to
  `longest`, the one rule that scripts/evaluate_extensions.sh and
  configs/sweeps/passkey_extension.py both use, so that their rows are the same methods:

  - ReRoPE, leaky ReRoPE and Self-Extend keep the true distances below half the trained length
    (W); leaky ReRoPE's slope k = ceil((N - W) / (T - 1 - W)) and Self-Extend's groups
    G = ceil(N / W) are large enough for the longest row's distances to stay below T
    (W + (N - 1 - W) / k < T - 1, and floor((N - 1) / G) <= W - 1);
  - DCA's chunk and local window fill the trained length (T - T // 4 and T // 4);
  - the sinks keep 4 tokens and a window of the rest of the trained length;
  - STRING shifts at half with a local window of an eighth. Its distances d - S + W pass the
    trained ones from d = T + S - W on (about 1.4 T): the method reuses trained distances, it
    does not bound them, and its rows show what follows.

  Raises ConfigError for a trained length below 5 (the sinks' 4 tokens leave no window) or a
  longest length below it."""
  if not isinstance(trained, (int, np.integer)) or trained < 5:
    raise errors.ConfigError(f'remap.fitted: a trained length of {trained!r} is too short to '
                             'size the remaps (4 sink tokens and a window of at least 1 need 5 '
                             'positions). Fix: set each remap option yourself.')
  if longest < trained:
    raise errors.ConfigError(f'remap.fitted: longest={longest} is below the trained length '
                             f'{trained}. Fix: give the longest length evaluated.')
  half = trained // 2
  return {
      'rerope': {'window': half},
      'leaky_rerope': {'window': half, 'k': float(-(-(longest - half) // (trained - 1 - half)))},
      'self_extend': {'neighbor_window': half, 'group_size': -(-longest // half)},
      'string': {'shift': half, 'local_window': trained // 8},
      'dca': {'chunk_size': trained - trained // 4, 'local_window': trained // 4},
      'sinks': {'sink_tokens': 4, 'window': trained - 4},
  }


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
  elif method == 'sinks':
    sinks, w = int(options['sink_tokens']), int(options['window'])
    out = np.where(d < w, d, np.where(j < sinks, np.minimum(i, sinks + w - 1) - j, np.nan))
  else:  # dca
    s, w = int(options['chunk_size']), int(options['local_window'])
    top = s + w - 1
    chunk_i, chunk_j = i // s, j // s
    seat = np.where(chunk_j == chunk_i, i % s,
                    np.where(chunk_j == chunk_i - 1, np.minimum(s + i % s, top), top))
    out = (seat - j % s).astype(np.float64)
  return np.where(j <= i, out, 0.0)


def regions(method: str, q_pos, k_pos, **options) -> list[tuple[jax.Array, jax.Array,
                                                                jax.Array]]:
  """(query positions [..., Lq], key positions [..., Lk], mask [..., Lq, Lk]) per region of
  `method` for integer positions q_pos [..., Lq] and k_pos [..., Lk] (a row's own positions:
  packed documents restart theirs): within a region's mask the distance of relative_distances
  is q[i] - k[j]; the masks partition the pairs whose key is not after the query (the caller's
  mask removes the rest). Positions are float32 (Leaky ReRoPE's are fractional)."""
  check(method, 1, options)
  qp, kp = jnp.asarray(q_pos).astype(jnp.float32), jnp.asarray(k_pos).astype(jnp.float32)
  i, j = qp[..., :, None], kp[..., None, :]
  d = i - j
  if method == 'none':
    return [(qp, kp, d >= 0)]
  if method in ('rerope', 'leaky_rerope'):
    w = float(options['window'])
    if method == 'rerope':  # Every distance from w on is w: the query at w, the key at 0.
      far = (jnp.full_like(qp, w), jnp.zeros_like(kp))
    else:
      k = float(options['k'])
      far = (qp / k + w - w / k, kp / k)
    return [(qp, kp, (d >= 0) & (d < w)), (*far, d >= w)]
  if method == 'self_extend':
    w, g = int(options['neighbor_window']), int(options['group_size'])
    return [(qp, kp, (d >= 0) & (d < w)),
            (jnp.floor(qp / g) + (w - w // g), jnp.floor(kp / g), d >= w)]
  if method == 'string':
    s, w = float(options['shift']), float(options['local_window'])
    return [(qp, kp, (d >= 0) & (d < s)), (qp - s + w, kp, d >= s)]
  if method == 'sinks':  # Keys in neither region are not seen (`visible`).
    sinks, w = int(options['sink_tokens']), int(options['window'])
    return [(qp, kp, (d >= 0) & (d < w)),
            (jnp.minimum(qp, float(sinks + w - 1)), kp, (d >= w) & (j < sinks))]
  s, w = int(options['chunk_size']), int(options['local_window'])
  top = float(s + w - 1)
  chunk_i, chunk_j = jnp.floor(i / s), jnp.floor(j / s)
  within_q, within_k = jnp.mod(qp, s), jnp.mod(kp, s)
  return [(within_q, within_k, (d >= 0) & (chunk_j == chunk_i)),
          (jnp.minimum(s + within_q, top), within_k, chunk_j == chunk_i - 1),
          (jnp.full_like(qp, top), within_k, chunk_j < chunk_i - 1)]


def visible(method: str, q_pos, k_pos, **options) -> jax.Array | None:
  """Bool [..., Lq, Lk]: the pairs `method` lets a query see (the union of its regions), or
  None when it hides none (every method but `sinks`)."""
  if method != 'sinks':
    return None
  masks = [m for _, _, m in regions(method, q_pos, k_pos, **options)]
  return masks[0] | masks[1]


def remapped_logits(q: jax.Array, k: jax.Array, q_pos, k_pos, rotate, method: str, /,
                    **options) -> jax.Array:
  """q_i^T R(r_ij) k_j for queries [batch, Lq, heads, d] and keys [batch, Lk, heads, d] at
  positions q_pos [batch, Lq] and k_pos [batch, Lk], with r the distance of `method`:
  float32 [batch, heads, Lq, Lk], unscaled, 0 where no region holds (keys after the query,
  keys `visible` hides).
  `rotate(x, positions)` is RoPE's rotation of x at (float) positions. One rotation of q and k
  per region, the regions' products selected by their masks. The arguments before the options
  are positional (Leaky ReRoPE's option `k` is not the keys)."""
  out = jnp.zeros((q.shape[0], q.shape[2], q.shape[1], k.shape[1]), jnp.float32)
  for region_q, region_k, mask in regions(method, q_pos, k_pos, **options):
    qr = rotate(q, region_q).astype(jnp.float32)
    kr = rotate(k, region_k).astype(jnp.float32)
    logits = jnp.einsum('bihd,bjhd->bhij', qr, kr)
    out = jnp.where(mask[:, None], logits, out)
  return out


def options_of(cfg) -> dict:
  """The options `cfg` (config.model.position.rope.remap) gives its method."""
  return {name: cfg[name] for name in OPTIONS[cfg.method]}


def unread(cfg, field: str = 'config.model.position.rope.remap') -> list[tuple[str, str]]:
  """(option, why) of each option that `cfg`'s method does not read, set away from its
  default: it would be recorded as an override and change nothing."""
  out = []
  for name, spec in SPECS.items():
    if name != 'method' and name not in OPTIONS[cfg.method] and cfg[name] != spec.default:
      readers = [m for m, read in OPTIONS.items() if name in read]
      out.append((name, f'{field}.{name}={cfg[name]} is read by the remap '
                        f'method{"s" * (len(readers) > 1)} {", ".join(readers)}, and '
                        f'{field}.method is {cfg.method!r}, so it would change nothing. Fix: '
                        f'--{field}.method={readers[0]}, or drop it (its default is '
                        f'{spec.default}).'))
  return out
