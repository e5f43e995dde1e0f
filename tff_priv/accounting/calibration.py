"""The smallest Gaussian noise that meets a target (eps, delta).

For the Gaussian mechanisms of UDP, Fed-SMP and DP-FedAvg: T rounds of a
(sampled) Gaussian sum with noise multiplier z (noise std / L2 sensitivity).
`calibrate_noise_multiplier` returns the smallest z (within `tol`) for which
the accountant's eps at `target_delta` is <= `target_epsilon`, using
dp_accounting's `calibrate_dp_mechanism` (Brent's method; it guarantees the
returned z does not exceed the target). The events are the ledger's own
(`events.sampled_gaussian_event`), so what is calibrated is exactly what the
ledger later charges.

A mechanism's absolute noise std is z times its sensitivity: for UDP, sigma =
z * 2 eta C / |D_i|; for Fed-SMP and DP-FedAvg, the std of the summed noise is
z * C.
"""

from typing import Optional

import dp_accounting
from dp_accounting import dp_event

from tff_priv import validation
from tff_priv.accounting import accountants
from tff_priv.accounting import events

_PLD_MIN_NOISE_MULTIPLIER = 0.1


def gaussian_rounds_event(
    noise_multiplier: float,
    rounds: int,
    *,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
) -> dp_event.DpEvent:
  """`rounds` identical rounds of `events.sampled_gaussian_event`."""
  rounds = validation.int_at_least('rounds', rounds, 1)
  one = events.sampled_gaussian_event(
      noise_multiplier,
      sampling_probability=sampling_probability,
      population=population,
      sample_size=sample_size,
  )
  return one if rounds == 1 else dp_event.SelfComposedDpEvent(one, rounds)


def gaussian_epsilon(
    noise_multiplier: float,
    delta: float,
    rounds: int,
    *,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
    accountant: str = 'rdp',
) -> float:
  """eps at `delta` of `rounds` rounds of the (sampled) Gaussian."""
  delta = validation.open_unit('delta', delta)
  event = gaussian_rounds_event(
      noise_multiplier,
      rounds,
      sampling_probability=sampling_probability,
      population=population,
      sample_size=sample_size,
  )
  relation = accountants.relation_for(event) or 'add_or_remove_one'
  acc = accountants.make_accountant(accountant, relation)
  if not acc.supports(event):
    raise ValueError(f'the {accountant} accountant cannot count {event}')
  return acc.compose(event).get_epsilon(delta)


def calibrate_noise_multiplier(
    target_epsilon: float,
    target_delta: float,
    rounds: int,
    *,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
    accountant: str = 'rdp',
    tol: float = 1e-4,
    min_with_unsampled: bool = False,
) -> float:
  """The smallest noise multiplier z whose eps at target_delta is <= target.

  Args:
    target_epsilon: > 0.
    target_delta: in (0, 1).
    rounds: number of rounds T >= 1.
    sampling_probability: Poisson client sampling rate q in (0, 1].
    population: N, for fixed-size sampling of `sample_size` of N clients.
    sample_size: K, for fixed-size sampling.
    accountant: 'rdp' or 'pld'.
    tol: absolute tolerance on z.
    min_with_unsampled: the eps to meet is the smaller of the sampled and the
      unsampled composition of `rounds` rounds. Both bound the same release
      when the noise is added on each client under replace-one adjacency; at
      large sampling rates dp_accounting's fixed-size sampling bound exceeds
      the unsampled one, and calibrating to it alone over-noises.

  Returns:
    z with eps(z) <= target_epsilon, within `tol` of the smallest such z.
  """
  if min_with_unsampled:
    sampled = calibrate_noise_multiplier(
        target_epsilon, target_delta, rounds,
        sampling_probability=sampling_probability, population=population,
        sample_size=sample_size, accountant=accountant, tol=tol,
    )
    unsampled = calibrate_noise_multiplier(
        target_epsilon, target_delta, rounds, accountant=accountant, tol=tol
    )
    return min(sampled, unsampled)
  target_epsilon = validation.positive('target_epsilon', target_epsilon)
  target_delta = validation.open_unit('target_delta', target_delta)
  tol = validation.positive('tol', tol)
  make_event = lambda z: gaussian_rounds_event(  # pylint: disable=g-long-lambda
      z,
      rounds,
      sampling_probability=sampling_probability,
      population=population,
      sample_size=sample_size,
  )
  relation = accountants.relation_for(make_event(1.0)) or 'add_or_remove_one'
  validation.one_of('accountant', accountant, accountants.ACCOUNTANTS)
  if not accountants.make_accountant(accountant, relation).supports(
      make_event(1.0)
  ):
    raise ValueError(f'the {accountant} accountant cannot count this sampling')

  def calibrate(name, bracket):
    return dp_accounting.calibrate_dp_mechanism(
        lambda: accountants.make_accountant(name, relation),
        make_event,
        target_epsilon,
        target_delta,
        bracket_interval=bracket,
        tol=tol,
    )

  # RDP is cheap at any z, so it searches up from a tiny z.
  z_rdp = calibrate('rdp', dp_accounting.LowerEndpointAndGuess(1e-3, 1.0))
  if accountant == 'rdp':
    return z_rdp
  # The PLD of a very small z needs a huge grid (tens of GB), so the PLD search
  # is bracketed near the RDP answer instead: PLD is the tighter accountant,
  # so its z is at most about z_rdp.
  def gap(z):
    acc = accountants.make_accountant('pld', relation).compose(make_event(z))
    return acc.get_epsilon(target_delta) - target_epsilon

  upper = z_rdp
  while gap(upper) > 0:
    upper *= 1.5
  lower = upper / 2
  while gap(lower) <= 0:
    if lower < _PLD_MIN_NOISE_MULTIPLIER:
      raise ValueError(
          f'target_epsilon={target_epsilon} is met by a noise multiplier below '
          f'{_PLD_MIN_NOISE_MULTIPLIER}, too small for the PLD grid; use '
          "accountant='rdp'"
      )
    upper, lower = lower, lower / 2
  return calibrate('pld', dp_accounting.ExplicitBracketInterval(lower, upper))
