"""Whether two schemes' seeds differ: the three measures every generated comparison states.

For one task, length and measure, each scheme is a handful of runs that differ only in their
seed. A difference between two schemes is reported with:
- `apart`: every seed of one is above every seed of the other (the seed ranges do not overlap);
- a bootstrap interval (95%) of the difference of the means, each scheme's seeds resampled on
  their own, with a fixed seed so that a report regenerates to the same digits;
- the exact two-sided Mann-Whitney U test: the share of all ways of splitting the pooled values
  into groups of the two sizes whose U is as far from its centre as the one observed.

A pair *separates* when it is apart; the interval and the p-value say how strongly. With n and m
seeds the smallest p the exact test can give is 2 / C(n+m, n) (`smallest_p`): 0.1 at 3 against 3,
so no 3-seed comparison reaches 0.05 however far apart; 0.008 at 5 against 5.

Why not scipy: it is not otherwise a dependency, and its exact Mann-Whitney distribution assumes
no ties, where accuracies tie often (1.000 once a task is learned). Enumerating every split is
exact with ties, and at sweep sizes (C(10, 5) = 252 splits) it takes microseconds.
"""

import dataclasses
import itertools
import math

import numpy as np

LEVEL = 0.95
RESAMPLES = 10_000
SEED = 0
# Splits enumerated exactly up to this many; above it, RESAMPLES random splits (seeded).
EXACT_LIMIT = 200_000


@dataclasses.dataclass(frozen=True)
class Comparison:
  """`a` against `b` (values per seed): the difference of means a - b, its bootstrap interval,
  U (pairs a > b, ties counting a half), the two-sided p and whether it is exact, and
  whether every seed of one is above every seed of the other."""
  difference: float
  interval: tuple[float, float]
  u: float
  p: float
  exact: bool
  apart: bool


def u_statistic(a, b) -> float:
  """Mann-Whitney U of `a`: pairs (x in a, y in b) with x > y, ties counting a half."""
  a, b = np.asarray(a, np.float64)[:, None], np.asarray(b, np.float64)[None, :]
  return float(np.sum(a > b) + 0.5 * np.sum(a == b))


def mann_whitney(a, b, limit: int = EXACT_LIMIT) -> tuple[float, float, bool]:
  """(U of `a`, two-sided p, exact?): p is the share of the splits of the pooled values into
  len(a) and len(b) whose U is at least as far from len(a) * len(b) / 2 as the observed one."""
  pooled = np.concatenate([np.asarray(a, np.float64), np.asarray(b, np.float64)])
  n, total = len(a), len(pooled)
  # beats[i, j]: pooled value i against j (1 above, 0.5 tied).
  beats = (pooled[:, None] > pooled[None, :]) + 0.5 * (pooled[:, None] == pooled[None, :])
  exact = math.comb(total, n) <= limit
  if exact:
    chosen = np.zeros((math.comb(total, n), total), bool)
    for row, members in enumerate(itertools.combinations(range(total), n)):
      chosen[row, list(members)] = True
  else:
    rng = np.random.default_rng(SEED)
    chosen = np.argsort(rng.random((RESAMPLES, total)), axis=1) < n
  mask = chosen.astype(np.float64)
  u = np.einsum('ci,ij,cj->c', mask, beats, 1.0 - mask)
  observed = u_statistic(a, b)
  centre = n * (total - n) / 2
  p = float(np.mean(np.abs(u - centre) >= abs(observed - centre) - 1e-9))
  return observed, p, exact


def smallest_p(n: int, m: int) -> float:
  """The smallest two-sided p of the exact test with n and m seeds (no ties)."""
  return min(1.0, 2 / math.comb(n + m, n))


def bootstrap_interval(a, b, level: float = LEVEL, resamples: int = RESAMPLES,
                       seed: int = SEED) -> tuple[float, float]:
  """The percentile bootstrap interval of mean(a) - mean(b), each group resampled with
  replacement on its own."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  rng = np.random.default_rng(seed)
  means = lambda x: x[rng.integers(0, len(x), (resamples, len(x)))].mean(axis=1)
  differences = means(a) - means(b)
  tail = (1 - level) / 2
  low, high = np.quantile(differences, [tail, 1 - tail])
  return float(low), float(high)


def compare(a, b) -> Comparison:
  """Every measure of `a` against `b` (each at least one value)."""
  u, p, exact = mann_whitney(a, b)
  return Comparison(difference=float(np.mean(a) - np.mean(b)), interval=bootstrap_interval(a, b),
                    u=u, p=p, exact=exact, apart=min(a) > max(b) or min(b) > max(a))
