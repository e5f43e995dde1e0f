"""What a paper's closed-form noise really guarantees, by the accountant.

A closed form prescribes noise for a target (eps, delta). Here that noise goes
back into dp_accounting's accountant with the paper's own sampling model, and
both readings come out: the eps actually spent at the target delta, and the
delta actually reached at the target eps. A claim holds when the true eps is
<= the target (equivalently the true delta <= the target).

* UDP Theorem 1 (eq. 10) is derived with the moments accountant of the
  Poisson-subsampled Gaussian (eq. 14, mixture 1 - q + q e^...), so it is
  checked against `PoissonSampledDpEvent(q, GaussianDpEvent(sigma/Delta))`
  over T rounds. It is optimistic: at delta = 1e-3, q = 1, T = 200 its sigma
  gives delta ~ 6.4e-3 at eps 8 and ~ 0.035 at eps 12.
* Fed-SMP Theorem 1 is checked against the same event (the paper reports its
  eps from an RDP accountant with Poisson sampling); it is conservative.
"""

import dataclasses

from tff_priv.accounting import accountants
from tff_priv.accounting import calibration
from tff_priv.accounting import closed_forms


@dataclasses.dataclass(frozen=True)
class ClaimCheck:
  """A closed form's claim beside the accountant's truth.

  Attributes:
    formula: which closed form.
    noise_multiplier: the noise it prescribes, over the sensitivity.
    claimed_epsilon: the target eps it claims to meet.
    claimed_delta: the target delta it claims to meet.
    true_epsilon: the accountant's eps at claimed_delta.
    true_delta: the accountant's delta at claimed_epsilon.
    accountant: which accountant gave the truth.
    holds: true_epsilon <= claimed_epsilon.
  """

  formula: str
  noise_multiplier: float
  claimed_epsilon: float
  claimed_delta: float
  true_epsilon: float
  true_delta: float
  accountant: str
  holds: bool


def _check(formula, z, epsilon, delta, q, rounds, accountant):
  event = calibration.gaussian_rounds_event(
      z, rounds, sampling_probability=q
  )
  composed = accountants.make_accountant(
      accountant, 'add_or_remove_one'
  ).compose(event)
  true_eps = composed.get_epsilon(delta)
  return ClaimCheck(
      formula=formula,
      noise_multiplier=z,
      claimed_epsilon=epsilon,
      claimed_delta=delta,
      true_epsilon=float(true_eps),
      true_delta=float(composed.get_delta(epsilon)),
      accountant=accountant,
      holds=bool(true_eps <= epsilon),
  )


def udp_theorem1_truth(
    epsilon: float,
    delta: float,
    sampling_probability: float,
    rounds: int,
    accountant: str = 'rdp',
) -> ClaimCheck:
  """UDP eq. (10)'s sigma/Delta for (eps, delta, q, T), read by the accountant."""
  z = closed_forms.udp_theorem1_sigma(
      epsilon, delta, sampling_probability, rounds, sensitivity=1.0
  )
  return _check(
      'UDP Theorem 1 (eq. 10)',
      z,
      epsilon,
      delta,
      sampling_probability,
      rounds,
      accountant,
  )


def fedsmp_theorem1_truth(
    epsilon: float,
    delta: float,
    sampling_probability: float,
    rounds: int,
    accountant: str = 'rdp',
) -> ClaimCheck:
  """Fed-SMP Theorem 1's noise multiplier, read by the accountant."""
  z = closed_forms.fedsmp_theorem1_noise_multiplier(
      epsilon, delta, sampling_probability, rounds
  )
  return _check(
      'Fed-SMP Theorem 1',
      z,
      epsilon,
      delta,
      sampling_probability,
      rounds,
      accountant,
  )
