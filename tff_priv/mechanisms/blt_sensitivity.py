"""L2 sensitivity of a lower-triangular Toeplitz strategy matrix C.

In the matrix-factorization mechanism the released prefix sums are
A x + B z with A = B C, i.e. a post-processing of C x + z: the privacy of the
whole stream is that of one Gaussian mechanism on C x, whose L2 sensitivity
is the largest ||C u|| over the participation patterns u of one client (each
participating round's contribution has norm <= 1; rounds it skips are 0,
the "zero-out" relation, dp_accounting's REPLACE_SPECIAL).
"""

import itertools
from typing import Optional

import numpy as np

from tff_priv import validation


def true_max_participations(
    n: int, min_sep: int, max_participations: Optional[int] = None
) -> int:
  """min(k, ceil(n / b)): the participations possible in n rounds."""
  most = -(-n // min_sep)
  return most if max_participations is None else min(max_participations, most)


def check_non_negative_non_increasing(coefs) -> np.ndarray:
  """`coefs` as float64 if non-negative and non-increasing, else ValueError."""
  coefs = np.asarray(coefs, np.float64)
  if coefs.size and (not np.all(np.isfinite(coefs)) or np.min(coefs) < 0):
    raise ValueError(
        'the min-sep sensitivity bound needs non-negative Toeplitz '
        f'coefficients, found minimum {np.min(coefs)}'
    )
  if coefs.size > 1 and np.max(np.diff(coefs)) > 0:
    raise ValueError(
        'the min-sep sensitivity bound needs non-increasing Toeplitz '
        'coefficients, found an increase at index '
        f'{int(np.argmax(np.diff(coefs)))}'
    )
  return coefs


def single_participation_sensitivity(coefs, n: Optional[int] = None) -> float:
  """Largest column norm of the n x n lower-triangular Toeplitz C(coefs).

  Single participation: the largest column norm of C (jax_privacy
  `sensitivity.single_participation_sensitivity`). For a lower-triangular
  Toeplitz C of n rounds the first column is the longest: ||c_{0:n}||_2.
  """
  coefs = np.asarray(coefs, np.float64)
  n = coefs.size if n is None else n
  return float(np.linalg.norm(coefs[:n]))


def minsep_sensitivity_squared(
    coefs,
    min_sep: int = 1,
    max_participations: Optional[int] = 1,
    n: Optional[int] = None,
    check: bool = True,
) -> float:
  """Squared sensitivity under (k, b) min-sep participation.

  At most k participations, any two at least b rounds apart ("min-sep"
  participation, Choquette-Choo et al. ICML 2023 "Multi-epoch matrix
  factorization mechanisms"; "(Amplified) banded matrix factorization",
  arXiv 2306.08153): for a Toeplitz C whose coefficients are non-negative and
  non-increasing, the worst pattern is k participations exactly b apart from
  the first round, and the sensitivity is the norm of the sum of those k
  columns (jax_privacy `toeplitz.minsep_sensitivity_squared`; proved in
  arXiv 2405.13763, Theorem 2). For other C this closed form is not a bound,
  so it is refused.

  Args:
    coefs: c_0, c_1, ... of C (at least n of them); non-negative and
      non-increasing (checked unless `check=False`: the optimiser's
      parameterization guarantees it).
    min_sep: b >= 1, the minimum number of rounds between two participations
      of one client (b = 1: consecutive rounds allowed).
    max_participations: k >= 1, or None for as many as b allows.
    n: number of rounds (default len(coefs)).
    check: refuse coefficients the bound does not hold for.

  Returns:
    ||sum_{m < k'} C[:, m b]||^2, k' = min(k, ceil(n / b)).
  """
  coefs = np.asarray(coefs, np.float64)
  n = coefs.size if n is None else n
  validation.int_at_least('min_sep', min_sep, 1)
  if max_participations is not None:
    validation.int_at_least('max_participations', max_participations, 1)
  coefs = coefs[:n]
  if coefs.size < n:
    coefs = np.pad(coefs, (0, n - coefs.size))
  if check:
    check_non_negative_non_increasing(coefs)
  k = true_max_participations(n, min_sep, max_participations)
  column_sum = np.zeros(n)
  for m in range(k):
    column_sum[m * min_sep :] += coefs[: n - m * min_sep]
  return float(column_sum @ column_sum)


def minsep_sensitivity(coefs, min_sep=1, max_participations=1, n=None) -> float:
  """sqrt of `minsep_sensitivity_squared` (with the check)."""
  return float(
      np.sqrt(minsep_sensitivity_squared(coefs, min_sep, max_participations, n))
  )


def brute_force_sensitivity(
    matrix, min_sep: int = 1, max_participations: Optional[int] = None
) -> float:
  """max ||C 1_S|| over all S with |S| <= k and gaps >= b (small n only).

  The largest ||C 1_S|| over every admissible
  set S of rounds (exponential: tests only). With C >= 0 entrywise, C^T C >= 0
  and equal vectors in the participating rounds are the worst case, so this
  is the exact sensitivity (arXiv 2306.08153, eq. (5)).
  """
  matrix = np.asarray(matrix, np.float64)
  n = matrix.shape[1]
  if n > 16:
    raise ValueError(f'brute force over 2^{n} patterns refused: n <= 16')
  k = true_max_participations(n, min_sep, max_participations)
  best = 0.0
  for size in range(1, k + 1):
    for rounds in itertools.combinations(range(n), size):
      if any(b - a < min_sep for a, b in zip(rounds, rounds[1:])):
        continue
      best = max(best, float(np.linalg.norm(matrix[:, list(rounds)].sum(1))))
  return best
