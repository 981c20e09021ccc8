"""roformer/separations.py against hand-computed values: the exact Mann-Whitney p from counting
splits by hand (with ties), the bootstrap interval's invariants, and `apart`."""

import itertools
import math

import numpy as np
import pytest

from roformer import separations


def test_u_counts_the_pairs_above_with_ties_as_halves():
  assert separations.u_statistic([3, 5], [1, 4, 5]) == 1 + (2 + 0.5) == 3.5
  assert separations.u_statistic([1, 2], [3, 4]) == 0


@pytest.mark.parametrize('n', [3, 4, 5])
def test_seeds_wholly_apart_give_the_smallest_p_the_seed_counts_allow(n):
  """U = n*n is reached by one split in C(2n, n), and U = 0 by one more: p = 2 / C(2n, n)
  (0.1 at 3 seeds, 2/70 at 4, 2/252 at 5)."""
  a, b = np.arange(n) + 10.0, np.arange(n) * 1.0
  u, p, exact = separations.mann_whitney(a, b)
  assert exact and u == n * n
  assert p == pytest.approx(2 / math.comb(2 * n, n)) == separations.smallest_p(n, n)
  assert separations.smallest_p(3, 3) == pytest.approx(0.1)


def test_one_pair_out_of_order_at_four_seeds_is_p_4_over_70():
  """n = m = 4, U = 15 of 16: U >= 15 for 2 of the 70 splits (16 and 15), and by symmetry
  U <= 1 for 2 more."""
  u, p, _ = separations.mann_whitney([2, 5, 6, 7], [1, 3, 0, -1])
  assert u == 15 and p == pytest.approx(4 / 70)


def test_ties_are_counted_exactly():
  """Pooled 0, 1, 1, 1, 1, 1 in groups of 3: a group holding the 0 has U = 3, one without has
  U = 6; both are 1.5 from the centre 4.5, so every split is as extreme: p = 1."""
  assert separations.mann_whitney([0, 1, 1], [1, 1, 1])[1:] == (1.0, True)
  assert separations.mann_whitney([1, 1, 1], [1, 1, 1])[1] == 1.0


def test_the_exact_p_equals_a_brute_force_count_over_label_permutations():
  rng = np.random.default_rng(3)
  a, b = rng.integers(0, 4, 4) / 4, rng.integers(0, 4, 3) / 4  # Ties likely.
  pooled = np.r_[a, b]
  centre = len(a) * len(b) / 2
  dev = lambda x, y: abs(sum((p > q) + 0.5 * (p == q) for p in x for q in y) - centre)
  splits = [(pooled[list(s)], np.delete(pooled, list(s)))
            for s in itertools.combinations(range(7), 4)]
  expected = np.mean([dev(x, y) >= dev(a, b) for x, y in splits])
  assert separations.mann_whitney(a, b)[1] == pytest.approx(expected)


def test_many_seeds_fall_back_to_seeded_random_splits_close_to_the_exact_p():
  a, b = np.arange(6.0), np.arange(6.0) + 2.5
  exact = separations.mann_whitney(a, b)
  sampled = separations.mann_whitney(a, b, limit=10)
  assert exact[2] and not sampled[2]
  assert sampled[1] == pytest.approx(exact[1], abs=0.02)
  assert separations.mann_whitney(a, b, limit=10) == sampled  # Seeded.


def test_the_bootstrap_interval_holds_the_difference_and_collapses_without_spread():
  a, b = [0.9, 0.7, 0.8], [0.2, 0.4, 0.3]
  low, high = separations.bootstrap_interval(a, b)
  assert 0.3 <= low < 0.5 < high <= 0.7  # Resampled means lie within each group's range.
  assert separations.bootstrap_interval(a, b) == (low, high)  # Seeded.
  assert separations.bootstrap_interval([1.0] * 3, [0.25] * 5) == (0.75, 0.75)
  low, high = separations.bootstrap_interval([0.0, 1.0], [0.0, 1.0])
  assert low < 0 < high and low == pytest.approx(-high)


def test_compare_names_apart_only_when_the_seed_ranges_do_not_meet():
  found = separations.compare([0.5, 0.6], [0.1, 0.2])
  assert found.apart and found.difference == pytest.approx(0.4) and found.p == pytest.approx(1 / 3)
  assert separations.compare([0.1, 0.2], [0.5, 0.6]).apart  # Either way round.
  assert not separations.compare([0.5, 0.6], [0.2, 0.5]).apart  # They meet at 0.5.
