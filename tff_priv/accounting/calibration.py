"""The smallest Gaussian noise that meets a target (eps, delta).

For the Gaussian mechanisms of UDP, Fed-SMP and DP-FedAvg: T rounds of a
(sampled) Gaussian sum with noise multiplier z (noise std / L2 sensitivity),
calibrated by `calibrate_noise_multiplier` over the ledger's own events, so
that what is calibrated is exactly what the ledger later charges.
"""

import dataclasses
from typing import Optional

import dp_accounting
from dp_accounting import dp_event

from tff_priv import validation
from tff_priv.accounting import accountants
from tff_priv.accounting import events
from tff_priv.accounting import sampling as sampling_lib

_PLD_MIN_NOISE_MULTIPLIER = 0.1


# A resumed run recalibrated to its target stops rather than run the rounds
# it has left at more than this times the planned noise (a rule of tff_priv's
# training program: such noise would make the rounds left worthless).
MAX_NOISE_INCREASE = 4.0


class BudgetSpentError(ValueError):
  """The releases already charged leave no budget for the rounds left."""


@dataclasses.dataclass(frozen=True)
class Spent:
  """What a run charged before a session calibrates the releases it has left.

  Read from the run's ledger alone (the composition of the events charged so
  far: a function of the configuration and of how many rounds were charged,
  never of the data or of who was sampled).

  Attributes:
    event: the charged releases as one DpEvent, as the analyst's ledger
      counts them (under their sampling).
    releases: how many releases that is.
    relation: the neighbouring relation the ledger counts under.
  """

  event: dp_event.DpEvent
  releases: int
  relation: str

  @classmethod
  def of(cls, spent) -> Optional['Spent']:
    """`spent` (a `PrivacyLedger`, a `Spent` or None) as a Spent; None: none."""
    if spent is None or isinstance(spent, Spent):
      return spent
    return cls.of_ledger(spent) if spent.num_releases else None

  @classmethod
  def of_ledger(cls, ledger) -> 'Spent':
    """The releases a `PrivacyLedger` holds."""
    return cls(
        ledger.dp_event(), ledger.num_releases, ledger.neighboring_relation
    )

  def as_unsampled(self) -> 'Spent':
    """The same releases read without their client sampling.

    As if one client took part in every one of them: what bounds the worst
    client's view for noise added on each client (a function of the ledger
    alone, not of who was in fact sampled).
    """
    return dataclasses.replace(self, event=events.unsampled(self.event))


def gaussian_rounds_event(
    noise_multiplier: float,
    rounds: int,
    sampling: Optional[sampling_lib.Sampling] = None,
) -> dp_event.DpEvent:
  """`rounds` identical rounds of `events.sampled_gaussian_event`."""
  rounds = validation.int_at_least('rounds', rounds, 1)
  one = events.sampled_gaussian_event(noise_multiplier, sampling)
  return one if rounds == 1 else dp_event.SelfComposedDpEvent(one, rounds)


def gaussian_epsilon(
    noise_multiplier: float,
    delta: float,
    rounds: int,
    *,
    sampling: Optional[sampling_lib.Sampling] = None,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
    accountant: str = 'rdp',
) -> float:
  """eps at `delta` of `rounds` rounds of the (sampled) Gaussian.

  The sampling is a `Sampling`, or the keyword triple of
  `PrivacyLedger.record_gaussian` (`Sampling.of`).
  """
  delta = validation.open_unit('delta', delta)
  event = gaussian_rounds_event(
      noise_multiplier,
      rounds,
      sampling_lib.Sampling.of(
          sampling,
          sampling_probability=sampling_probability,
          population=population,
          sample_size=sample_size,
      ),
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
    sampling: Optional[sampling_lib.Sampling] = None,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
    accountant: str = 'rdp',
    tol: float = 1e-4,
    min_with_unsampled: bool = False,
    spent: Optional['Spent'] = None,
) -> float:
  """The smallest noise multiplier z whose eps at target_delta is <= target.

  Returns the smallest z (within `tol`) for which the accountant's eps at
  `target_delta` is <= `target_epsilon`, using dp_accounting's
  `calibrate_dp_mechanism` (Brent's method; it guarantees the returned z does
  not exceed the target). The events are the ledger's own
  (`events.sampled_gaussian_event`), so what is calibrated is exactly what the
  ledger later charges.

  A mechanism's absolute noise std is z times its sensitivity: for UDP, sigma
  = z * 2 eta C / |D_i|; for Fed-SMP and DP-FedAvg, the std of the summed
  noise is z * C.

  Args:
    target_epsilon: > 0.
    target_delta: in (0, 1).
    rounds: number of rounds T >= 1.
    sampling: the rounds' client `Sampling` (instead of the three below).
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
    spent: what earlier rounds of the same run were charged (a resumed run's
      ledger, `Spent`): z is calibrated so that those releases composed with
      `rounds` more rounds at z meet the target; with `min_with_unsampled`,
      the unsampled composition starts from `spent.as_unsampled()`.

  Returns:
    z with eps(z) <= target_epsilon, within `tol` of the smallest such z.

  Raises:
    BudgetSpentError: `spent` alone reaches the target.
  """
  sampling = sampling_lib.Sampling.of(
      sampling,
      sampling_probability=sampling_probability,
      population=population,
      sample_size=sample_size,
  )
  key = (
      target_epsilon,
      target_delta,
      rounds,
      sampling,
      accountant,
      tol,
      min_with_unsampled,
      None if spent is None else repr(spent),
  )
  if key not in _CALIBRATED:
    if len(_CALIBRATED) >= _CACHE_SIZE:
      _CALIBRATED.pop(next(iter(_CALIBRATED)))
    _CALIBRATED[key] = _calibrate(
        target_epsilon,
        target_delta,
        rounds,
        sampling=sampling,
        accountant=accountant,
        tol=tol,
        min_with_unsampled=min_with_unsampled,
        spent=spent,
    )
  return _CALIBRATED[key]


# Calibrations done in this process, by their arguments: a pure function of
# them, and tens of accountant compositions each (dp_accounting's RDP of
# fixed-size sampling takes seconds), asked again by every build of the same
# configuration (a resume, a report, a grid's runs).
_CALIBRATED = {}
_CACHE_SIZE = 256


def _calibrate(
    target_epsilon,
    target_delta,
    rounds,
    *,
    sampling,
    accountant,
    tol,
    min_with_unsampled,
    spent,
):
  """calibrate_noise_multiplier, computed."""
  if min_with_unsampled:
    return _calibrate_smaller_of_two(
        target_epsilon,
        target_delta,
        rounds,
        sampling=sampling,
        accountant=accountant,
        tol=tol,
        spent=spent,
    )
  target_epsilon = validation.positive('target_epsilon', target_epsilon)
  target_delta = validation.open_unit('target_delta', target_delta)
  tol = validation.positive('tol', tol)
  prior = spent.event if spent is not None and spent.releases else None

  def make_event(z):
    event = gaussian_rounds_event(z, rounds, sampling)
    return event if prior is None else dp_event.ComposedDpEvent([prior, event])

  relation = accountants.relation_for(make_event(1.0)) or (
      spent.relation if prior is not None else 'add_or_remove_one'
  )
  validation.one_of('accountant', accountant, accountants.ACCOUNTANTS)
  if not accountants.make_accountant(accountant, relation).supports(
      make_event(1.0)
  ):
    raise ValueError(f'the {accountant} accountant cannot count this sampling')
  if prior is not None:
    _check_budget_left(
        prior,
        spent.releases,
        accountant,
        relation,
        target_epsilon,
        target_delta,
    )

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
  lower, upper = _pld_bracket(
      z_rdp, make_event, relation, target_epsilon, target_delta
  )
  return calibrate('pld', dp_accounting.ExplicitBracketInterval(lower, upper))


def _calibrate_smaller_of_two(
    target_epsilon, target_delta, rounds, *, sampling, accountant, tol, spent
):
  """The smaller z of the sampled and the unsampled calibrations."""
  # Either bound meets the target; with releases spent, one of them may
  # have no budget left while the other has.
  found, spent_error = [], None
  for kwargs in (
      dict(sampling=sampling, spent=spent),
      dict(spent=None if spent is None else spent.as_unsampled()),
  ):
    try:
      found.append(
          calibrate_noise_multiplier(
              target_epsilon,
              target_delta,
              rounds,
              accountant=accountant,
              tol=tol,
              **kwargs,
          )
      )
    except BudgetSpentError as e:
      spent_error = e
  if not found:
    raise spent_error
  return min(found)


def _check_budget_left(
    prior, releases, accountant, relation, target_epsilon, target_delta
):
  """Raises BudgetSpentError if the charged releases alone meet the target."""
  # The charged releases alone (the rounds left noised away entirely).
  floor = (
      accountants.make_accountant(accountant, relation)
      .compose(prior)
      .get_epsilon(target_delta)
  )
  if floor >= target_epsilon:
    raise BudgetSpentError(
        f'the {releases} releases charged already spend eps '
        f'{floor:.4g} of the target {target_epsilon:g}'
    )


def _pld_bracket(z_rdp, make_event, relation, target_epsilon, target_delta):
  """(lower, upper): a bracket of the PLD accountant's z, near the RDP z."""

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
  return lower, upper
