"""Lower bounds from one run with m canaries: Steinke et al.'s and the f-DP one.

m canaries each enter the training data independently with probability 1/2;
after one run the auditor guesses in or out for r of them (abstaining on the
rest) and v guesses are right. `epsilon_lower_bound` (Steinke, Nasr,
Jagielski) refutes "(eps, delta)-DP"; `fdp_mu_lower_bound` and
`fdp_epsilon_lower_bound` (Mahloujifar, Melis, Chaudhuri) refute "mu-GDP".
"""

import math

from scipy import optimize
from scipy import stats

from tff_priv import validation
from tff_priv.auditing import tradeoff


def _counts(m: int, r: int, v: int) -> tuple[int, int, int]:
  """(m, r, v) checked: 0 <= v <= r <= m, m >= 1."""
  m = validation.int_at_least('m', m, 1)
  r = validation.int_at_least('r', r, 0)
  v = validation.int_at_least('v', v, 0)
  if not v <= r <= m:
    raise ValueError(f'need 0 <= v <= r <= m, got v={v}, r={r}, m={m}')
  return m, r, v


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
  """P[>= v correct of r guesses] under the null "the run is (eps, delta)-DP".

  Steinke, Nasr, Jagielski 2023, main theorem, (eps, delta) case: with
  f(v) = P[Binomial(r, q) >= v], q = e^eps / (1 + e^eps),

      P[W >= v] <= f(v) + 2 m delta max_{i = 1..v} (f(v - i) - f(v)) / i,

  computed as in their reference code (the max over i > v adds nothing: those
  terms are (1 - f(v)) / i <= the term at i = v).

  Args:
    m: canaries, each included with probability 1/2.
    r: guesses made (abstentions excluded), 0 <= r <= m.
    v: correct guesses, 0 <= v <= r.
    epsilon: eps >= 0 of the null.
    delta: delta in [0, 1] of the null.
  """
  m, r, v = _counts(m, r, v)
  epsilon = validation.non_negative('epsilon', epsilon)
  if not 0 <= delta <= 1:
    raise ValueError(f'delta must be in [0, 1], got {delta}')
  q = 1.0 / (1.0 + math.exp(-epsilon))
  tail = stats.binom.sf(v - 1, r, q)  # f(v) = P[Binomial(r, q) >= v].
  worst, running = 0.0, 0.0  # running = f(v - i) - f(v).
  for i in range(1, v + 1):
    running += stats.binom.pmf(v - i, r, q)
    worst = max(worst, running / i)
  return min(1.0, tail + 2.0 * m * delta * worst)


def epsilon_lower_bound(
    m: int, r: int, v: int, delta: float, alpha: float = 0.05
) -> float:
  """The largest eps the null "(eps, delta)-DP" is rejected at at level alpha.

  The bound is sup {eps : p_value(m, r, v, eps, delta) < alpha} (0 if none):
  with probability >= 1 - alpha over the canaries' inclusion and the run, it
  does not exceed the run's true eps. p_value increases with eps (a larger
  eps makes v correct guesses likelier), so the boundary is found by root
  finding on eps.

  Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run"
  (NeurIPS 2023, arXiv:2305.08846), main theorem: refutes "(eps, delta)-DP".

  Args:
    m: as `p_value`.
    r: as `p_value`.
    v: as `p_value`.
    delta: as `p_value`.
    alpha: in (0, 1), one minus the confidence.
  """
  alpha = validation.open_unit('alpha', alpha)
  if p_value(m, r, v, 0.0, delta) >= alpha:
    return 0.0
  high = 1.0
  while p_value(m, r, v, high, delta) < alpha:
    high *= 2.0
    if high > 1e4:
      return math.inf
  return optimize.brentq(
      lambda e: p_value(m, r, v, e, delta) - alpha, 0.0, high, xtol=1e-9
  )


def _fdp_gap(m: int, r: int, v: int, mu: float, alpha: float) -> float:
  """> 0 when v correct of r guesses refute mu-GDP at level alpha.

  Mahloujifar et al.'s recursion for the curve f = G_mu, whose inverse
  blow-up is x -> Phi(Phi^-1(x) - mu): starting from the scaled counts
  r' = alpha v / m (right) and h = alpha (r - v) / m (wrong), it raises h to
  what the curve forces given r' and r' by what the next wrong guess could
  have been, for i = v - 1 .. 0; the claim is refuted when r' + h still
  exceeds r / m.
  """
  right = alpha * v / m
  wrong = alpha * (r - v) / m
  for i in range(v - 1, -1, -1):
    raised = max(wrong, float(stats.norm.cdf(stats.norm.ppf(right) - mu)))
    if raised == wrong:
      break  # Neither changes again.
    right = min(right + (i / (r - i)) * (raised - wrong), 1.0)
    wrong = raised
  return right + wrong - r / m


def fdp_mu_lower_bound(m: int, r: int, v: int, alpha: float = 0.05) -> float:
  """The largest mu whose mu-GDP claim v correct of r guesses refute (0: none).

  With probability >= 1 - alpha over the canaries' inclusion and the run, a
  mu-GDP run does not give a bound above its mu (Mahloujifar et al.,
  `_fdp_gap`). The gap decreases in mu, so the boundary is a root.

  Mahloujifar, Melis, Chaudhuri, "Auditing f-Differential Privacy in One Run"
  (arXiv:2410.22235), the recursion of its `audit_rh_with_cap` for the
  Gaussian trade-off curve G_mu (as jax_privacy's
  `auditing._epsilon_one_run_fdp`, parameterized here by mu): refutes
  "mu-GDP". A whole trade-off curve constrains the guesses more than one
  (eps, delta) point, so at equal (m, r, v) it refutes more; the price is its
  premise: its eps (the eps at delta of G_mu, `tradeoff`; see
  `fdp_epsilon_lower_bound`) bounds the eps of a run only if the run's
  trade-off curve is Gaussian (a Gaussian mechanism, or many compositions of
  sampled Gaussians, close to it by the central limit theorem of Dong, Roth
  and Su).

  Args:
    m: canaries (0 <= v <= r <= m).
    r: guesses.
    v: correct guesses.
    alpha: in (0, 1), one minus the confidence.
  """
  m, r, v = _counts(m, r, v)
  alpha = validation.open_unit('alpha', alpha)
  if r == 0 or _fdp_gap(m, r, v, 0.0, alpha) <= 0:
    return 0.0
  high = 1.0
  while _fdp_gap(m, r, v, high, alpha) > 0:
    high *= 2.0
    if high > 64:
      return math.inf
  return optimize.brentq(
      lambda mu: _fdp_gap(m, r, v, mu, alpha), 0.0, high, xtol=1e-9
  )


def fdp_epsilon_lower_bound(
    m: int, r: int, v: int, delta: float, alpha: float = 0.05
) -> float:
  """The eps at delta of the mu-GDP curve `fdp_mu_lower_bound` refutes.

  A lower bound on the run's eps only if its trade-off curve is Gaussian
  (see `fdp_mu_lower_bound`); otherwise it refutes the claim "mu-GDP" only.
  """
  mu = fdp_mu_lower_bound(m, r, v, alpha)
  if math.isinf(mu):
    return math.inf
  return tradeoff.gdp_epsilon(mu, validation.open_unit('delta', delta))
