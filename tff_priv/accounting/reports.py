"""Mechanism-agnostic JSON reports of Gaussian releases by every accountant."""

from typing import Callable, Optional

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import sampling as sampling_lib


def gaussian_report(
    noise_multiplier: float,
    delta: float,
    rounds: int,
    *,
    sampling: Optional[sampling_lib.Sampling] = None,
) -> dict:
  """eps at `delta` of `rounds` sampled Gaussian rounds, by every accountant."""
  rounds = validation.int_at_least('rounds', rounds, 1)
  sampling = sampling_lib.Sampling.of(sampling)
  ledger = ledger_lib.PrivacyLedger()
  ledger.record_gaussian(noise_multiplier, sampling=sampling, count=rounds)
  result = ledger.report(delta)
  result.update(
      noise_multiplier=float(noise_multiplier),
      rounds=rounds,
      sampling_rate=sampling.rate,
      sampling={'fixed': 'fixed-size'}.get(sampling.kind, sampling.kind),
  )
  return result


def calibrate_report(
    target_epsilon: float,
    delta: float,
    rounds: int,
    *,
    sampling: Optional[sampling_lib.Sampling] = None,
) -> dict:
  """The noise multiplier each accountant needs for (target_epsilon, delta)."""
  sampling = sampling_lib.Sampling.of(sampling)
  result = {'target_epsilon': target_epsilon, 'delta': delta, 'rounds': rounds}
  result['rdp_noise_multiplier'] = calibration.calibrate_noise_multiplier(
      target_epsilon, delta, rounds, sampling=sampling
  )
  # dp_accounting 0.4.3's PLD has no fixed-size sampling.
  if sampling.kind != 'fixed':
    result['pld_noise_multiplier'] = calibration.calibrate_noise_multiplier(
        target_epsilon, delta, rounds, accountant='pld', sampling=sampling
    )
  else:
    result['pld_noise_multiplier'] = None
  return result


def gaussian_mechanism_report(
    mechanism: str,
    *,
    delta: float,
    rounds: int,
    noise_multiplier: Optional[float] = None,
    epsilon: Optional[float] = None,
    noise_stddev: Optional[float] = None,
    scale: Optional[float] = None,
    claim_for_target: Optional[
        Callable[[float, float, float, int], dict]
    ] = None,
    claim_for_noise: Optional[
        Callable[[float, float, float, float, int], Optional[dict]]
    ] = None,
    sampling: Optional[sampling_lib.Sampling] = None,
) -> dict:
  """A Gaussian mechanism's privacy over `rounds` rounds, or its target's noise.

  With `epsilon`: the noise multiplier each accountant needs
  ('calibration', with the noise std where `scale` is given). Otherwise the
  eps of every accountant at `delta` for `noise_multiplier` (or for
  `noise_stddev` / `scale`). A paper's closed form goes beside, under
  'paper', from the claim callables; 'guarantee' says in words which number
  is a guarantee.

  Args:
    mechanism: the name the report carries.
    delta: in (0, 1).
    rounds: T >= 1.
    noise_multiplier: z, the noise std over the L2 sensitivity.
    epsilon: a target eps instead of a noise level.
    noise_stddev: the absolute noise std instead of z (needs `scale`).
    scale: the L2 sensitivity z is relative to (noise std = z * scale);
      None: only z is known.
    claim_for_target: `(epsilon, delta, q, rounds) -> dict`, the paper's
      reading of a target eps (q: the sampling rate).
    claim_for_noise: `(z, rdp_epsilon, delta, q, rounds) -> dict or None`,
      the paper's reading of a noise level z > 0.
    sampling: the rounds' client `Sampling` (None: every client).

  Returns:
    A JSON-ready dict.

  Raises:
    ValueError: a bad value, or no noise level and no target (the message
      names them).
  """
  delta = validation.open_unit('delta', delta)
  rounds = validation.int_at_least('rounds', rounds, 1)
  sampling = sampling_lib.Sampling.of(sampling)
  q = sampling.rate
  out = {
      'mechanism': mechanism,
      'delta': delta,
      'rounds': rounds,
      'sampling_rate': q,
  }
  if epsilon is not None:
    epsilon = validation.positive('epsilon', epsilon)
    out['calibration'] = calibrate_report(
        epsilon, delta, rounds, sampling=sampling
    )
    if scale is not None:
      out['calibration']['rdp_noise_stddev'] = (
          out['calibration']['rdp_noise_multiplier'] * scale
      )
    if claim_for_target is not None:
      out['paper'] = claim_for_target(epsilon, delta, q, rounds)
    out['guarantee'] = (
        'the rdp/pld noise multipliers meet the target by that accountant; '
        'a paper formula is a claim, its true eps is given beside it'
    )
    return out

  if noise_stddev is not None:
    if scale is None:
      raise ValueError(
          'noise_stddev needs the sensitivity it is relative to, to give a '
          'noise multiplier'
      )
    noise_multiplier = (
        validation.non_negative('noise_stddev', noise_stddev) / scale
    )
  if noise_multiplier is None:
    raise ValueError('give noise_multiplier (or noise_stddev), or epsilon')
  out.update(
      gaussian_report(noise_multiplier, delta, rounds, sampling=sampling)
  )
  if claim_for_noise is not None and noise_multiplier > 0:
    claim = claim_for_noise(
        noise_multiplier, out['rdp_epsilon'], delta, q, rounds
    )
    if claim is not None:
      out['paper'] = claim
  out['guarantee'] = (
      'rdp_epsilon (and pld_epsilon where given) are guarantees under the '
      f"stated sampling ({out['sampling']}); paper numbers are claims"
  )
  return out


def counted_as(report: dict, rounds: int, releases: int, unit: str) -> dict:
  """`report` of `releases` composed events, read as a run of `rounds` rounds.

  For a stream mechanism whose accountants count one event per stream or
  cycle (`unit`, e.g. 'streams'): 'rounds' becomes T, 'releases' the events
  counted, and each part's own 'rounds' is renamed `unit`.
  """
  report['rounds'] = rounds
  report['releases'] = releases
  for part in report.values():
    if isinstance(part, dict) and 'rounds' in part:
      part[unit] = part.pop('rounds')
  return report
