"""Total variation between Gaussians, and distortion calibrated by it.

Parameter distortion (Zhang, Chen, Yang, "Towards Achieving Near-optimal
Utility for Privacy-Preserving Federated Learning via Data Generation and
Parameter Distortion") uploads W~ = W + N(0, sigma_e^2 I). Its utility loss is
bounded by constants times TV(P~, P), the total variation between the
distributions of the distorted and the original parameter, and its Bayesian
privacy leakage is bounded below by a decreasing function of the same TV. The
paper's formulas were lost from the text we have; what follows is REBUILT from
the standard results it cites, and says so (`tv_bounds`, `noise_for_tv`).
"""

import math

from scipy import stats

from tff_priv import validation

LOWER_CONSTANT = 1 / 100  # Devroye, Mehrabian, Reddad 2018, Thm 1.1.
UPPER_CONSTANT = 3 / 2
BOUNDS = ('upper', 'lower')


def tv_shifted_means(mean_distance: float, stddev: float) -> float:
  """Exact TV between two Gaussians of one covariance s^2 I.

  Exact for equal covariances s^2 I and shifted means (a standard identity: the
  TV of two Gaussians with one covariance is that of their 1-D projection on
  the mean difference): TV = 2 Phi(||mu_1 - mu_2|| / (2 s)) - 1.
  """
  mean_distance = validation.non_negative('mean_distance', mean_distance)
  stddev = validation.positive('stddev', stddev)
  return 2 * stats.norm.cdf(mean_distance / (2 * stddev)) - 1


def _ratio(noise_stddev, parameter_variance, dimension):
  return math.sqrt(dimension) * noise_stddev**2 / parameter_variance


def tv_bounds(
    noise_stddev: float, parameter_variance: float, dimension: int
) -> tuple[float, float]:
  """(lower, upper) bounds on TV(N(mu, s^2 I), N(mu, (s^2 + s_e^2) I)), REBUILT.

  REBUILT from Devroye, Mehrabian, Reddad (2018), "The total variation distance
  between high-dimensional Gaussians", Theorem 1.1: for positive definite
  Sigma_1, Sigma_2 and equal means, with lambda_1..lambda_m the eigenvalues of
  Sigma_1^{-1} Sigma_2 - I,

    1/100 <= TV(N(mu, Sigma_1), N(mu, Sigma_2))
             / min(1, sqrt(sum_i lambda_i^2)) <= 3/2.

  For the isotropic case here, Sigma_1 = sigma^2 I (the parameter's own spread,
  per coordinate), Sigma_2 = (sigma^2 + sigma_e^2) I, every lambda_i equals
  sigma_e^2 / sigma^2, so with r = sqrt(m) sigma_e^2 / sigma^2 over m
  coordinates:

    (1/100) min(1, r) <= TV <= (3/2) min(1, r).

  (TV never exceeds 1, so the upper bound is min(1, (3/2) min(1, r)).)

  Args:
    noise_stddev: sigma_e >= 0, the distortion.
    parameter_variance: sigma^2 > 0, the parameter's variance per coordinate.
    dimension: m >= 1 coordinates.

  Returns:
    (lower, upper) with lower <= TV <= upper, from DMR 2018 Thm 1.1.
  """
  noise_stddev = validation.non_negative('noise_stddev', noise_stddev)
  parameter_variance = validation.positive(
      'parameter_variance', parameter_variance
  )
  dimension = validation.int_at_least('dimension', dimension, 1)
  r = min(1.0, _ratio(noise_stddev, parameter_variance, dimension))
  return LOWER_CONSTANT * r, min(1.0, UPPER_CONSTANT * r)


def noise_for_tv(
    target_tv: float,
    parameter_variance: float,
    dimension: int,
    bound: str = 'upper',
) -> float:
  """sigma_e whose TV bound equals `target_tv` (REBUILT, DMR 2018 Thm 1.1).

  Args:
    target_tv: in (0, 1).
    parameter_variance: sigma^2 > 0 per coordinate.
    dimension: m >= 1.
    bound: 'upper': the largest sigma_e with TV <= target (the distortion, and
      with it the utility loss, is at most this); 'lower': the smallest sigma_e
      with TV >= target (at least this much distortion). The lower bound never
      exceeds 1/100, so 'lower' needs target_tv <= 0.01.

  Returns:
    sigma_e >= 0.
  """
  target_tv = validation.open_unit('target_tv', target_tv)
  parameter_variance = validation.positive(
      'parameter_variance', parameter_variance
  )
  dimension = validation.int_at_least('dimension', dimension, 1)
  validation.one_of('bound', bound, BOUNDS)
  if bound == 'upper':
    # target < 1 < 3/2, so r = target / (3/2) < 1 and min(1, r) = r. A hair
    # less noise, so that rounding never puts the bound above the target.
    r = target_tv / UPPER_CONSTANT * (1 - 1e-12)
  else:
    if target_tv > LOWER_CONSTANT:
      raise ValueError(
          f'target_tv={target_tv} > {LOWER_CONSTANT}: the DMR lower bound '
          '(1/100) min(1, r) cannot certify a TV above 1/100'
      )
    r = min(1.0, target_tv / LOWER_CONSTANT * (1 + 1e-12))
  return math.sqrt(r * parameter_variance / math.sqrt(dimension))
