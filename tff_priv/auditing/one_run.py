"""Steinke, Nasr, Jagielski's eps lower bound from one run with m canaries.

"Privacy Auditing with One (1) Training Run" (NeurIPS 2023,
arXiv:2305.08846): m canaries each enter the training data independently with
probability 1/2; after one run the auditor guesses in or out for r of them
(abstaining on the rest) and v guesses are right. Their main theorem turns v
into a lower bound on eps.
"""

import math

from scipy import optimize
from scipy import stats

from tff_priv import validation


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
  m = validation.int_at_least('m', m, 1)
  r = validation.int_at_least('r', r, 0)
  v = validation.int_at_least('v', v, 0)
  if not v <= r <= m:
    raise ValueError(f'need 0 <= v <= r <= m, got v={v}, r={r}, m={m}')
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

  Args:
    m, r, v, delta: as `p_value`.
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
