"""Clopper-Pearson lower bounds on eps from a distinguishing test's errors.

A test guesses which of two neighbouring inputs D0, D1 produced an output;
`epsilon_lower_bound` turns one-sided Clopper-Pearson upper bounds on its
false positive and false negative rates into a lower bound on eps that holds
with probability >= 1 - alpha (Jagielski, Ullman, Oprea 2020).
"""

import dataclasses

import numpy as np
from scipy import stats

from tff_priv import validation


def clopper_pearson_upper(successes, trials: int, alpha: float):
  """One-sided Clopper-Pearson upper bound at confidence 1 - alpha.

  The exact binomial bound: the p with P[Binomial(trials, p) <= successes] =
  alpha, i.e. the 1 - alpha quantile of Beta(successes + 1, trials -
  successes); 1 when successes = trials.

  Args:
    successes: an int or an int array, 0 <= successes <= trials.
    trials: the number of Bernoulli trials, >= 1.
    alpha: the error probability, in (0, 1).
  """
  k = np.asarray(successes, dtype=np.float64)
  n = float(trials)
  with np.errstate(invalid='ignore'):
    upper = stats.beta.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1e-300))
  return np.where(k >= n, 1.0, upper)


def epsilon_lower_bound(
    false_positives,
    negatives: int,
    false_negatives,
    positives: int,
    delta: float,
    alpha: float,
):
  """The eps lower bound from a test's error counts.

  A test that guesses which of two neighbouring inputs D0, D1 produced an
  output has false positive rate FPR = P[guess D1 | D0] and false negative
  rate FNR = P[guess D0 | D1]. If the mechanism is (eps, delta)-DP for the
  pair in both orders, then 1 - FNR <= e^eps FPR + delta and
  1 - FPR <= e^eps FNR + delta (Kairouz, Oh, Viswanath 2015), so

      eps >= max(log((1 - delta - FNR) / FPR), log((1 - delta - FPR) / FNR)).

  With one-sided Clopper-Pearson upper bounds FPR_u, FNR_u, each at confidence
  1 - alpha / 2, the same formula with FPR_u, FNR_u is a lower bound on eps
  that holds with probability >= 1 - alpha (Jagielski, Ullman, Oprea 2020).

  Args:
    false_positives: outputs of D0 guessed D1 (int or int array).
    negatives: number of outputs of D0.
    false_negatives: outputs of D1 guessed D0 (int or int array).
    positives: number of outputs of D1.
    delta: the delta at which eps is bounded.
    alpha: the bound holds with probability >= 1 - alpha (alpha / 2 each for
      the FPR and the FNR bound).

  Returns:
    max(0, log((1 - delta - FNR_u) / FPR_u), log((1 - delta - FPR_u) /
    FNR_u)), a float or an array like the counts.
  """
  fpr = clopper_pearson_upper(false_positives, negatives, alpha / 2.0)
  fnr = clopper_pearson_upper(false_negatives, positives, alpha / 2.0)
  with np.errstate(divide='ignore', invalid='ignore'):
    one = np.log(1.0 - delta - fnr) - np.log(fpr)
    two = np.log(1.0 - delta - fpr) - np.log(fnr)
  bound = np.fmax(np.nan_to_num(one, nan=0.0), np.nan_to_num(two, nan=0.0))
  return np.maximum(bound, 0.0)


def max_epsilon_lower_bound(
    negatives: int, positives: int, delta: float, alpha: float
) -> float:
  """The largest bound `negatives`, `positives` outputs can show (no errors)."""
  return float(epsilon_lower_bound(0, negatives, 0, positives, delta, alpha))


@dataclasses.dataclass(frozen=True)
class ThresholdTest:
  """Guess D1 when `sign * statistic > threshold`."""

  threshold: float
  sign: float

  def errors(self, statistic0, statistic1) -> tuple[int, int]:
    """(false positives on D0's statistics, false negatives on D1's)."""
    s0 = self.sign * np.asarray(statistic0, np.float64)
    s1 = self.sign * np.asarray(statistic1, np.float64)
    return int(np.sum(s0 > self.threshold)), int(np.sum(s1 <= self.threshold))


def best_threshold_test(
    statistic0, statistic1, delta: float, alpha: float
) -> tuple[ThresholdTest, float]:
  """The threshold test with the largest eps bound on these samples.

  Tries both orientations and every threshold between sorted sample values.
  Choosing on the same samples the bound is computed from biases that bound
  upwards: use the returned test on fresh samples (`audit_aggregator` splits
  its trials in halves).

  Args:
    statistic0: the statistic on outputs of D0 (1-D).
    statistic1: the statistic on outputs of D1 (1-D).
    delta: as `epsilon_lower_bound`.
    alpha: as `epsilon_lower_bound`.

  Returns:
    (test, its eps bound on these samples).
  """
  s0 = np.asarray(statistic0, np.float64).ravel()
  s1 = np.asarray(statistic1, np.float64).ravel()
  if not (s0.size and s1.size):
    raise ValueError('best_threshold_test needs samples of both inputs')
  best, best_key = None, None
  for sign in (1.0, -1.0):
    a, b = np.sort(sign * s0), np.sort(sign * s1)
    values = np.unique(np.concatenate([a, b]))
    # Guess D1 above t: t at every sample value, and below the smallest.
    thresholds = np.concatenate([[values[0] - 1.0], values])
    fp = a.size - np.searchsorted(a, thresholds, side='right')
    fn = np.searchsorted(b, thresholds, side='right')
    eps = epsilon_lower_bound(fp, a.size, fn, b.size, delta, alpha)
    # Ties (e.g. every bound 0 on few samples) go to the most accurate test.
    accuracy = 1.0 - fp / a.size - fn / b.size
    i = int(np.lexsort((accuracy, eps))[-1])
    key = (float(eps[i]), float(accuracy[i]))
    if best_key is None or key > best_key:
      best, best_key = ThresholdTest(float(thresholds[i]), sign), key
  return best, best_key[0]


def check_delta_alpha(delta: float, alpha: float) -> tuple[float, float]:
  """(delta, alpha), each checked to lie in (0, 1)."""
  delta = validation.open_unit('delta', delta)
  alpha = validation.open_unit('alpha', alpha)
  return delta, alpha
