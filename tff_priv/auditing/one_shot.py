"""Andrew et al.'s one-shot empirical eps estimate from canary cosines.

"One-shot Empirical Privacy Estimation for Federated Learning" (Andrew,
Kairouz, Oh, Oprea, McMahan, Suriyakumar, ICLR 2024, arXiv:2302.03098):
canary clients whose update is a fixed random direction take part in
training; the cosines of the inserted canaries with the released model delta
and those of held-out canaries (never inserted) are each fit by a Gaussian,
and the estimate is the eps at delta of distinguishing the two Gaussians.
"""

import functools
import math
from typing import Sequence

import numpy as np
from scipy import optimize
from scipy import special

from tff_priv import validation


# scipy.stats.norm's cdf and sf, as they compute them (special.ndtr), without
# their argument handling: the search calls them hundreds of times per eps.
def _cdf(x, mu, std):
  return float(special.ndtr((x - mu) / std))


def _sf(x, mu, std):
  return float(special.ndtr((mu - x) / std))


def _delta_one_order(mu1, std1, mu2, std2, epsilon):
  """sup_S P1(S) - e^eps P2(S), P_i = N(mu_i, std_i^2): the hockey stick."""
  # S = {y : log p1(y) - log p2(y) > eps}, a quadratic a y^2 + b y + c > eps.
  a = 0.5 / std2**2 - 0.5 / std1**2
  b = mu1 / std1**2 - mu2 / std2**2
  c = 0.5 * (mu2 / std2) ** 2 - 0.5 * (mu1 / std1) ** 2 + math.log(std2 / std1)
  if a == 0.0:
    if b == 0.0:
      return 0.0
    t = (epsilon - c) / b
    if b > 0:  # S = {y > t}.
      p1, p2 = _sf(t, mu1, std1), _sf(t, mu2, std2)
    else:  # S = {y < t}.
      p1, p2 = _cdf(t, mu1, std1), _cdf(t, mu2, std2)
  else:
    disc = b * b - 4.0 * a * (c - epsilon)
    if disc <= 0.0:
      # The quadratic minus eps has one sign: S is empty (a < 0) or the line.
      return 0.0 if a < 0 or epsilon >= 0 else 1.0 - math.exp(epsilon)
    roots = sorted(
        [(-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)]
    )
    lo, hi = roots

    def inside(mu, std):
      return _cdf(hi, mu, std) - _cdf(lo, mu, std)

    if a > 0:  # Positive outside the roots.
      p1, p2 = 1.0 - inside(mu1, std1), 1.0 - inside(mu2, std2)
    else:
      p1, p2 = inside(mu1, std1), inside(mu2, std2)
  if p2 <= 0.0:
    return max(0.0, p1)
  # e^eps p2 in logs: it overflows for large eps; p1 <= 1 < e^eps p2 then.
  log_term = epsilon + math.log(p2)
  return 0.0 if log_term >= 0.0 else max(0.0, p1 - math.exp(log_term))


def epsilon_two_gaussians(
    mu1: float, std1: float, mu2: float, std2: float, delta: float
) -> float:
  """The eps at delta of distinguishing N(mu1, std1^2) from N(mu2, std2^2).

  The smallest eps with sup_S P(S) - e^eps Q(S) <= delta for both orders of
  P, Q (the exact privacy profile of the pair). dp_accounting covers equal
  variances only (a Gaussian mechanism), so the unequal case is written
  here, as in the authors' code: the set S where the log density ratio
  exceeds eps is bounded by the roots of a quadratic.

  Args:
    mu1: the first Gaussian's mean.
    std1: its std, > 0.
    mu2: the second Gaussian's mean.
    std2: its std, > 0.
    delta: in (0, 1).
  """
  std1 = validation.positive('std1', std1)
  std2 = validation.positive('std2', std2)
  delta = validation.open_unit('delta', delta)

  def excess(epsilon):
    return (
        max(
            _delta_one_order(mu1, std1, mu2, std2, epsilon),
            _delta_one_order(mu2, std2, mu1, std1, epsilon),
        )
        - delta
    )

  if excess(0.0) <= 0:
    return 0.0
  high = 1.0
  while excess(high) > 0:
    high *= 2.0
    if high > 1e6:
      return math.inf
  return optimize.brentq(excess, 0.0, high, xtol=1e-10)


def _fit(values, name):
  values = np.asarray(values, np.float64).ravel()
  if values.size < 2:
    raise ValueError(f'{name} needs at least 2 values, got {values.size}')
  if not np.all(np.isfinite(values)):
    raise ValueError(f'{name} must be finite')
  return float(values.mean()), float(values.std(ddof=1))


def one_shot_epsilon(
    inserted_cosines: Sequence[float],
    held_out_cosines: Sequence[float],
    delta: float,
) -> float:
  """Andrew et al.'s estimate for the final model.

  Fits N(mu, sigma^2) to the cosines of the inserted canaries with the final
  model delta and N(mu0, sigma0^2) to those of held-out canaries, and returns
  `epsilon_two_gaussians(mu0, sigma0, mu, sigma, delta)`. An estimate, not a
  bound: it has no confidence level.

  Args:
    inserted_cosines: cosines of the canaries that took part (>= 2).
    held_out_cosines: cosines of canaries that never took part (>= 2).
    delta: in (0, 1).
  """
  mu, std = _fit(inserted_cosines, 'inserted_cosines')
  mu0, std0 = _fit(held_out_cosines, 'held_out_cosines')
  if std == 0.0 or std0 == 0.0:
    # Point masses: distinct ones are perfectly distinguishable.
    return 0.0 if (mu == mu0 and std == std0) else math.inf
  return epsilon_two_gaussians(mu0, std0, mu, std, delta)


def bootstrap_interval(
    inserted_cosines: Sequence[float],
    held_out_cosines: Sequence[float],
    delta: float,
    *,
    level: float = 0.95,
    resamples: int = 400,
    seed: int = 0,
) -> tuple[float, float]:
  """A percentile bootstrap interval of `one_shot_epsilon`.

  Each resample draws the inserted and the held-out canaries with
  replacement, within their set, and recomputes the estimate; the interval
  is the (1 - level) / 2 and (1 + level) / 2 quantiles of the resamples
  (the nearest resample outward, so an infinite resample gives an infinite
  end). It says how far the estimate moves with the canaries drawn; with 20
  canaries a leak-free run's interval spans more than ten units of eps.
  `seed` is public: the interval is a function of the released cosines.

  Args:
    inserted_cosines: as `one_shot_epsilon`.
    held_out_cosines: as `one_shot_epsilon`.
    delta: as `one_shot_epsilon`.
    level: in (0, 1).
    resamples: >= 10.
    seed: the resampling seed.
  """
  level = validation.open_unit('level', level)
  resamples = validation.int_at_least('resamples', resamples, 10)
  inserted = np.asarray(inserted_cosines, np.float64).ravel()
  held_out = np.asarray(held_out_cosines, np.float64).ravel()
  one_shot_epsilon(inserted, held_out, delta)  # The arguments' checks.
  rng = np.random.default_rng(seed)
  estimates = np.array(
      [
          one_shot_epsilon(
              rng.choice(inserted, inserted.size),
              rng.choice(held_out, held_out.size),
              delta,
          )
          for _ in range(resamples)
      ]
  )
  return (
      float(np.quantile(estimates, (1 - level) / 2, method='lower')),
      float(np.quantile(estimates, (1 + level) / 2, method='higher')),
  )


@functools.lru_cache(maxsize=64)
def null_quantile(
    num_canaries: int,
    delta: float,
    quantile: float = 0.95,
    trials: int = 1000,
) -> float:
  """The `quantile` of `one_shot_epsilon` when nothing leaks.

  With no leak, the inserted and held-out cosines come from one
  distribution; the estimate is invariant under a common affine map of the
  two sets, so for Gaussian cosines its distribution depends only on the
  canary count and delta: `trials` draws of two sets of `num_canaries` iid
  N(0, 1) values (fixed seed). An estimate below this quantile cannot be told
  from a leak-free run's at that level; measured at delta = 1e-5, the 0.95
  quantile is about 36 with 10 canaries, 15 with 20, 4.4 with 100 and
  1.05 with 1000.

  Args:
    num_canaries: N >= 2 inserted and N held out.
    delta: in (0, 1).
    quantile: in (0, 1).
    trials: >= 10.
  """
  n = validation.int_at_least('num_canaries', num_canaries, 2)
  quantile = validation.open_unit('quantile', quantile)
  trials = validation.int_at_least('trials', trials, 10)
  rng = np.random.default_rng([n, trials])
  estimates = [
      one_shot_epsilon(rng.normal(size=n), rng.normal(size=n), delta)
      for _ in range(trials)
  ]
  return float(np.quantile(estimates, quantile, method='higher'))


def one_shot_epsilon_all_iterates(
    inserted_cosines: Sequence[Sequence[float]],
    held_out_cosines: Sequence[Sequence[float]],
    delta: float,
) -> float:
  """Andrew et al.'s estimate when every round's model delta is released.

  Each canary's statistic is the largest of its cosines with the rounds'
  model deltas (rows are canaries, columns rounds); the two sets of maxima are
  fit by Gaussians as in `one_shot_epsilon`.

  Args:
    inserted_cosines: [canaries, rounds] cosines of the inserted canaries.
    held_out_cosines: [canaries, rounds] cosines of the held-out canaries.
    delta: in (0, 1).
  """
  inserted = np.asarray(inserted_cosines, np.float64)
  held_out = np.asarray(held_out_cosines, np.float64)
  if inserted.ndim != 2 or held_out.ndim != 2:
    raise ValueError('cosines must be [canaries, rounds] arrays')
  if inserted.shape[1] != held_out.shape[1]:
    raise ValueError(
        f'rounds differ: {inserted.shape[1]} vs {held_out.shape[1]}'
    )
  return one_shot_epsilon(inserted.max(1), held_out.max(1), delta)


def cosines(model_delta, canaries) -> np.ndarray:
  """Cosine of a flat model delta with each row of `canaries`."""
  x = np.asarray(model_delta, np.float64).ravel()
  c = np.asarray(canaries, np.float64).reshape(-1, x.size)
  denominator = np.linalg.norm(c, axis=1) * np.linalg.norm(x)
  return (c @ x) / np.where(denominator > 0, denominator, 1.0)
