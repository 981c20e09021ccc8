"""RoPE's error in bfloat16 at long positions, against float64: per band of positions.

  python scripts/rope_precision.py [--length 32768] [--head_dim 128] [--out FILE.json]

Rotates random bfloat16 vectors by `roformer.positions.rotary.apply_rotary` (angles from int32
positions in float32, the rotation in float32, one rounding to bfloat16) and by the float64
formula, on JAX's default device, and reports per band of positions the largest and the mean
error of an element relative to its pair's norm, and the error of the logits q_m . k_n against
the float64 product of the same rotated vectors' exact values. For contrast, the same with the
angles computed in bfloat16 (positions above 256 are not representable there), which is what
the rotation must not do.
"""

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

# pylint: disable=wrong-import-position
import jax
import jax.numpy as jnp
import numpy as np

from roformer import cli
from roformer import files
from roformer import provenance
from roformer.positions import rotary
from roformer.positions import scaling
# pylint: enable=wrong-import-position



def _even_width(text: str) -> int:
  value = cli.positive_int(text)
  if value % 2:
    raise argparse.ArgumentTypeError(f'{text!r} is odd (pairs of dimensions rotate)')
  return value


def parser() -> cli.ArgumentParser:
  p = cli.ArgumentParser(description=cli.first_sentence(__doc__))
  p.add_argument('--length', type=cli.positive_int, default=32768,
                 help='Positions 0..length-1.')
  p.add_argument('--head_dim', type=_even_width, default=128, help='Rotated width (even).')
  p.add_argument('--out', default='', help='Write the results as JSON here.')
  return p


def float64_rotation(x: np.ndarray, theta: np.ndarray) -> np.ndarray:
  """x [length, d] (float64) rotated pair by pair (interleaved) by position x theta."""
  angles = np.arange(x.shape[0])[:, None] * theta[None]
  c, s = np.cos(angles), np.sin(angles)
  out = np.empty_like(x)
  out[:, 0::2] = x[:, 0::2] * c - x[:, 1::2] * s
  out[:, 1::2] = x[:, 1::2] * c + x[:, 0::2] * s
  return out


def bfloat16_angles(x, positions, inv_freq):
  """The rotation with its angles computed in bfloat16: the error to avoid."""
  angles = positions.astype(jnp.bfloat16)[..., None] * jnp.asarray(inv_freq, jnp.bfloat16)
  c, s = jnp.cos(angles)[..., None, :], jnp.sin(angles)[..., None, :]
  even, odd = x[..., 0::2], x[..., 1::2]
  return jnp.stack([even * c - odd * s, odd * c + even * s], axis=-1).reshape(x.shape)


def bands(length: int) -> list[tuple[int, int]]:
  edges = [0, 256, 1024, 4096, 16384, 32768, 65536, 131072]
  edges = [e for e in edges if e < length] + [length]
  return list(zip(edges[:-1], edges[1:]))


def measure(length: int, d: int, seed: int = 0) -> dict:
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(1, length, 1, d)), jnp.bfloat16)
  k = jnp.asarray(rng.normal(size=(1, 1, 1, d)), jnp.bfloat16)  # One key, at position 0.
  pos = jnp.arange(length)[None]
  theta = np.asarray(scaling.rope_frequencies(d, 10000.0), np.float64)
  x64 = np.asarray(x.astype(jnp.float32), np.float64)[0, :, 0]
  k64 = np.asarray(k.astype(jnp.float32), np.float64)[0, 0, 0]
  want = float64_rotation(x64, theta)
  want_logits = want @ k64  # k at position 0 is not rotated: q_m . k_0 depends on m alone.
  pair = np.hypot(x64[:, 0::2], x64[:, 1::2]).repeat(2, axis=1)
  out = {'device': jax.devices()[0].device_kind, 'backend': jax.default_backend(),
         'jax': jax.__version__, 'length': length, 'head_dim': d, 'bands': []}
  methods = {'float32 angles (roformer)': jax.jit(rotary.apply_rotary),
             'bfloat16 angles (avoid)': jax.jit(
                 lambda x, p: bfloat16_angles(x, p, scaling.rope_frequencies(d, 10000.0)))}
  results = {}
  for name, fn in methods.items():
    got = np.asarray(fn(x, pos).astype(jnp.float32), np.float64)[0, :, 0]
    results[name] = (np.abs(got - want) / np.maximum(pair, 1e-3), got @ k64)
  for lo, hi in bands(length):
    row = {'positions': [lo, hi]}
    for name, (err, logits) in results.items():
      logit_err = np.abs(logits[lo:hi] - want_logits[lo:hi]) / np.sqrt(d)
      row[name] = {'max_rel_element': float(err[lo:hi].max()),
                   'mean_rel_element': float(err[lo:hi].mean()),
                   'max_logit_error_over_sqrt_d': float(logit_err.max())}
    out['bands'].append(row)
  return out


def main(args):
  result = {**measure(args.length, args.head_dim), 'made_with': provenance.measurement()}
  print(f"{result['device']} ({result['backend']}, jax {result['jax']}), head_dim "
        f"{result['head_dim']}: error relative to the pair's norm (max / mean), and the largest "
        "logit error / sqrt(d) against float64")
  for row in result['bands']:
    cells = '  '.join(f"{name}: {r['max_rel_element']:.2e} / {r['mean_rel_element']:.2e}, "
                      f"{r['max_logit_error_over_sqrt_d']:.2e}"
                      for name, r in row.items() if name != 'positions')
    print(f"  {row['positions'][0]:>6}-{row['positions'][1]:<6} {cells}")
  if args.out:
    files.write_json_atomic(args.out, result)


if __name__ == '__main__':
  cli.run(main, parser())
