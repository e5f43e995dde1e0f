"""Pass thresholds of statistical tests, from the exact binomial."""

from scipy import stats


def allowed_failures(n: int, rate: float, false_alarm: float) -> int:
  """The least t with P(Binomial(n, rate) > t) <= false_alarm.

  A test that repeats a check n times (seeds, trials, audits) and allows some of
  them to fail states two rates: the rate at which an honest check fails (an
  alpha-level bound exceeds the truth with probability <= alpha) and the
  probability that the test fails an honest implementation (its false-alarm
  rate). `allowed_failures` turns the two into the threshold; `repeats_for`
  gives the smallest n at which a stated power is reached.
  """
  for t in range(n + 1):
    if stats.binom.sf(t, n, rate) <= false_alarm:
      return t
  return n


def repeats_for(
    power_rate: float,
    power: float,
    rate: float,
    false_alarm: float,
    most: int = 10_000,
) -> int:
  """The least n at which the `allowed_failures` test flags a flaw with `power`.

  A flawed check fails at `power_rate` (> rate); an honest one at `rate`.
  The test allows `allowed_failures(n, rate, false_alarm)` failures of n and
  fails the flawed one with probability >= `power`.
  """
  for n in range(1, most + 1):
    t = allowed_failures(n, rate, false_alarm)
    if stats.binom.sf(t, n, power_rate) >= power:
      return n
  raise ValueError(f'no n <= {most} reaches power {power}')
