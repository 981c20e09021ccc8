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
"""

import numpy as np

from roformer import errors

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
