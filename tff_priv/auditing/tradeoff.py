"""Gaussian-DP (mu) lower bounds from a distinguishing test's errors.

A mechanism is mu-GDP (Dong, Roth, Su, "Gaussian Differential Privacy", JRSS-B
2022) when every test of one neighbouring input against the other has
FNR >= G_mu(FPR) = Phi(Phi^-1(1 - FPR) - mu). `mu_lower_bound` turns a test's
errors into a lower bound on mu, the powerful test of a Gaussian claim, and
`decide` chooses and bounds both of an audit's tests.
"""

import dataclasses
import math
from typing import Callable

import dp_accounting
import numpy as np
from scipy import optimize
from scipy import stats

from tff_priv.auditing import bounds


def mu_lower_bound(
    false_positives,
    negatives: int,
    false_negatives,
    positives: int,
    alpha: float,
):
  """max(0, Phi^-1(1 - FPR_u) - Phi^-1(FNR_u)); arrays allowed.

  A mechanism is mu-GDP (Dong, Roth, Su, "Gaussian Differential Privacy",
  JRSS-B 2022) when every test of one neighbouring input against the other
  has FNR >= G_mu(FPR) = Phi(Phi^-1(1 - FPR) - mu): the trade-off curve of
  N(0, 1) against N(mu, 1). The Gaussian mechanism of noise multiplier z is
  exactly (1 / z)-GDP, so its claim is a whole trade-off curve, not one
  (eps, delta) point. A test with FPR_u >= FPR and FNR_u >= FNR (one-sided
  Clopper-Pearson upper bounds, alpha / 2 each) gives

      mu_lb = Phi^-1(1 - FPR_u) - Phi^-1(FNR_u),

  and a mu-GDP mechanism has mu >= mu_lb with probability >= 1 - alpha (G_mu
  is decreasing in FPR and in mu). Near the middle of the curve
  (FPR, FNR ~ 0.3) a few thousand trials pin mu to a few hundredths, where the
  (eps, delta) bound of `bounds` at delta = 1e-5 needs FPR ~ 1e-5 and so
  ~10^6 trials: the mu bound is the powerful test of a Gaussian claim. Read
  at delta (`gdp_epsilon`), it is the eps of a mechanism whose trade-off
  curve is G_mu_lb: a lower bound on the true eps at delta only when the
  mechanism's curve is Gaussian (a claim of GaussianDpEvent(z) is), so
  `audit_aggregator` judges other claims by their own curve
  (`violates_profile`).

  Args:
    false_positives: outputs of D0 guessed D1 (int or int array).
    negatives: number of outputs of D0.
    false_negatives: outputs of D1 guessed D0 (int or int array).
    positives: number of outputs of D1.
    alpha: the bound holds with probability >= 1 - alpha (alpha / 2 each for
      FPR_u and FNR_u).
  """
  fpr = bounds.clopper_pearson_upper(false_positives, negatives, alpha / 2.0)
  fnr = bounds.clopper_pearson_upper(false_negatives, positives, alpha / 2.0)
  mu = stats.norm.isf(fpr) - stats.norm.ppf(fnr)
  return np.maximum(np.nan_to_num(mu, nan=0.0, neginf=0.0), 0.0)


def max_mu_lower_bound(negatives: int, positives: int, alpha: float) -> float:
  """The largest mu bound `negatives` and `positives` outputs can show."""
  return float(mu_lower_bound(0, negatives, 0, positives, alpha))


def best_mu_threshold_test(
    statistic0, statistic1, alpha: float
) -> tuple[bounds.ThresholdTest, float]:
  """The threshold test with the largest mu bound on these samples.

  Every threshold between sorted sample values, both orientations (as
  `bounds.best_threshold_test`, whose choice favours the tails where the
  (eps, delta) bound lives; this one favours the middle of the curve). Use
  the returned test on fresh samples.
  """
  s0 = np.asarray(statistic0, np.float64).ravel()
  s1 = np.asarray(statistic1, np.float64).ravel()
  if not (s0.size and s1.size):
    raise ValueError('best_mu_threshold_test needs samples of both inputs')
  best, best_mu = None, -1.0
  for sign in (1.0, -1.0):
    a, b = np.sort(sign * s0), np.sort(sign * s1)
    # Every sample value of either input: fp only drops at a's values and fn
    # only rises at b's, so the best test sits at one of them (b's alone
    # miss it when the inputs are separated, e.g. constant statistics).
    thresholds = np.concatenate(
        [[min(a[0], b[0]) - 1.0], np.unique(np.concatenate([a, b]))]
    )
    fp = a.size - np.searchsorted(a, thresholds, side='right')
    fn = np.searchsorted(b, thresholds, side='right')
    mu = mu_lower_bound(fp, a.size, fn, b.size, alpha)
    i = int(np.argmax(mu))
    if mu[i] > best_mu:
      best, best_mu = bounds.ThresholdTest(float(thresholds[i]), sign), float(
          mu[i]
      )
  return best, best_mu


def _gaussian_delta(mu: float, epsilon: float) -> float:
  """delta(eps) of mu-GDP: dp_accounting's exact Gaussian privacy loss."""
  loss = dp_accounting.pld.privacy_loss_mechanism.GaussianPrivacyLoss(
      standard_deviation=1.0 / mu, sensitivity=1.0
  )
  return float(loss.get_delta_for_epsilon(epsilon))


def gdp_epsilon(mu: float, delta: float) -> float:
  """The eps at `delta` of a mu-GDP mechanism (the Gaussian of z = 1 / mu)."""
  if not mu > 0:
    return 0.0
  if _gaussian_delta(mu, 0.0) <= delta:
    return 0.0
  # dp_accounting's connected delta is exact; its eps search is what
  # GaussianPrivacyLoss.get_epsilon_for_delta would do, without discretisation.
  hi = 1.0
  while _gaussian_delta(mu, hi) > delta:
    hi *= 2.0
  return float(
      optimize.brentq(
          lambda e: _gaussian_delta(mu, e) - delta, 0.0, hi, xtol=1e-10
      )
  )


def gdp_mu(epsilon: float, delta: float) -> float:
  """The mu whose GDP curve has eps `epsilon` at `delta` (gdp_epsilon^-1)."""
  if not epsilon > 0:
    return 0.0
  hi = 1.0
  while gdp_epsilon(hi, delta) < epsilon:
    hi *= 2.0
  return float(
      optimize.brentq(
          lambda m: gdp_epsilon(m, delta) - epsilon, 1e-9, hi, xtol=1e-10
      )
  )


def violates_profile(
    fpr_upper: float,
    fnr_upper: float,
    deltas_of: Callable[[np.ndarray], np.ndarray],
    epsilons=None,
) -> bool:
  """True when (FPR_u, FNR_u) lies below the claim's trade-off curve.

  The claim is (eps, delta(eps))-DP for every eps, its privacy profile given
  on a sorted grid of eps at once by `deltas_of` (one pass of a PLD, see
  `profile_of`); it forbids 1 - FNR > e^eps FPR + delta(eps) and
  1 - FPR > e^eps FNR + delta(eps). Checking a grid of eps is sound (each
  violation found is one) and loses only the gap between grid points. Only
  the eps where a side can be positive are read: none when
  FPR_u + FNR_u >= 1 (as after a handful of trials).
  """
  if epsilons is None:
    epsilons = np.concatenate(
        [np.linspace(0.0, 10.0, 201), np.linspace(10.5, 40.0, 60)]
    )
  epsilons = np.asarray(epsilons, np.float64)
  if fpr_upper + fnr_upper >= 1.0:
    return False  # Both sides <= 1 - FPR_u - FNR_u <= 0 <= delta(eps).

  def beyond(rate, other):  # The eps from which 1 - other - e^eps rate <= 0.
    return math.inf if rate == 0.0 else math.log((1.0 - other) / rate)

  limit = max(beyond(fpr_upper, fnr_upper), beyond(fnr_upper, fpr_upper))
  epsilons = epsilons[epsilons < limit]
  if not epsilons.size:
    return False
  slack = np.broadcast_to(
      np.asarray(deltas_of(epsilons), np.float64), epsilons.shape
  )
  growth = np.exp(epsilons)
  return bool(
      np.any(1.0 - fnr_upper - growth * fpr_upper > slack)
      or np.any(1.0 - fpr_upper - growth * fnr_upper > slack)
  )


def profile_of(accountant) -> Callable[[np.ndarray], np.ndarray]:
  """The privacy profile eps -> delta(eps) of a dp_accounting accountant.

  A `PLDAccountant` reads a whole sorted grid in one pass: its `get_delta`
  hands its argument to `PrivacyLossDistribution.get_delta_for_epsilon`,
  which takes a sorted sequence (one call per grid point scanned the PLD
  261 times, a minute for a composed adaptive-clipping claim). Any other
  accountant is read one eps at a time.
  """
  if isinstance(accountant, dp_accounting.pld.PLDAccountant):
    return accountant.get_delta
  return np.vectorize(accountant.get_delta, otypes=[np.float64])


@dataclasses.dataclass(frozen=True)
class Decision:
  """Both bounds of one audit, each from its own held-out threshold test.

  Attributes:
    epsilon_lower_bound: the (eps, delta) Clopper-Pearson bound
      (`bounds.epsilon_lower_bound` at alpha / 2).
    epsilon_statistic: the candidate statistic that bound reads.
    false_positives, false_negatives: that test's errors on the held-out runs.
    mu_lower_bound: the GDP bound (`mu_lower_bound` at alpha / 2).
    mu_statistic: the candidate statistic the mu bound reads.
    mu_false_positives, mu_false_negatives: its errors on the held-out runs.
    mu_fpr_upper, mu_fnr_upper: their Clopper-Pearson upper bounds (alpha / 4
      each): the point of the trade-off plane the mu test shows.
    evaluation_trials: held-out runs per set.
  """

  epsilon_lower_bound: float
  epsilon_statistic: str
  false_positives: int
  false_negatives: int
  mu_lower_bound: float
  mu_statistic: str
  mu_false_positives: int
  mu_false_negatives: int
  mu_fpr_upper: float
  mu_fnr_upper: float
  evaluation_trials: int


def decide(candidates, choose, held, delta: float, alpha: float) -> Decision:
  """Chooses both tests on the `choose` runs and bounds them on the `held` runs.

  Args:
    candidates: [(name, statistic0, statistic1)], each statistic a 1-D array
      over all runs of one set (0: without the canary, 1: with it).
    choose: {0: indices, 1: indices} of the runs that choose the test.
    held: {0: indices, 1: indices} of the held-out runs (the same count per
      set).
    delta: the eps bound is at delta.
    alpha: each bound holds with probability >= 1 - alpha / 2, so both
      together with >= 1 - alpha.
  """
  n = len(held[0])
  if len(held[1]) != n:
    raise ValueError('decide needs as many held-out runs in both sets')
  best_eps, best_mu = None, None
  for name, s0, s1 in candidates:
    a, b = np.asarray(s0)[choose[0]], np.asarray(s1)[choose[1]]
    test, eps = bounds.best_threshold_test(a, b, delta, alpha / 2.0)
    if best_eps is None or eps > best_eps[0]:
      best_eps = (eps, name, s0, s1, test)
    test, mu = best_mu_threshold_test(a, b, alpha / 2.0)
    if best_mu is None or mu > best_mu[0]:
      best_mu = (mu, name, s0, s1, test)
  _, eps_name, s0, s1, test = best_eps
  fp, fn = test.errors(np.asarray(s0)[held[0]], np.asarray(s1)[held[1]])
  eps_lb = float(bounds.epsilon_lower_bound(fp, n, fn, n, delta, alpha / 2.0))
  _, mu_name, s0, s1, test = best_mu
  mfp, mfn = test.errors(np.asarray(s0)[held[0]], np.asarray(s1)[held[1]])
  return Decision(
      epsilon_lower_bound=eps_lb,
      epsilon_statistic=eps_name,
      false_positives=fp,
      false_negatives=fn,
      mu_lower_bound=float(mu_lower_bound(mfp, n, mfn, n, alpha / 2.0)),
      mu_statistic=mu_name,
      mu_false_positives=mfp,
      mu_false_negatives=mfn,
      mu_fpr_upper=float(bounds.clopper_pearson_upper(mfp, n, alpha / 4.0)),
      mu_fnr_upper=float(bounds.clopper_pearson_upper(mfn, n, alpha / 4.0)),
      evaluation_trials=n,
  )


def split(trials: int, selection_fraction: float, rng) -> tuple[dict, dict]:
  """(choose, held) run indices per set: a random `selection_fraction` picks."""
  chosen = min(max(int(round(selection_fraction * trials)), 1), trials - 1)
  order = {w: rng.permutation(trials) for w in (0, 1)}
  return (
      {w: order[w][:chosen] for w in (0, 1)},
      {w: order[w][chosen:] for w in (0, 1)},
  )
