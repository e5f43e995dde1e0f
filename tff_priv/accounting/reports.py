"""Privacy reports per mechanism: every accountant, and the paper's claim beside.

One function per mechanism family; each returns a plain dict (JSON-ready)
whose accountant numbers come from the ledger (`ledger.py`), calibration from
`calibration.py`, and paper numbers from `closed_forms.py` / `audit.py`. Keys
name their source: `rdp_epsilon`, `pld_epsilon`, `paper_*`. `guarantee` says
in words which number is a guarantee.

Mechanisms and what their noise multiplier z means:

* dp_fedavg, smp (Fed-SMP): Gaussian sum over sampled clients, z = noise std
  of the sum / clip C, client-level (add-or-remove-one client) adjacency.
* udp: each client's upload gets N(0, sigma^2 I), sensitivity Delta of its
  update, z = sigma / Delta, record-level adjacency within the client.
* distortion: the same Gaussian release as udp with the upload clipped to norm
  C, so any two uploads differ by at most Delta = 2C: z = sigma_e / (2C).
* ldp: every value eps0-LDP, d values per round, T rounds.
"""

from typing import Optional

from tff_priv import validation
from tff_priv.accounting import audit
from tff_priv.accounting import calibration
from tff_priv.accounting import closed_forms
from tff_priv.accounting import ledger as ledger_lib

MECHANISMS = ('dp_fedavg', 'smp', 'udp', 'distortion', 'ldp')


def _sampling(sampling_probability, population, sample_size):
  return dict(
      sampling_probability=sampling_probability,
      population=population,
      sample_size=sample_size,
  )


def _rate(sampling):
  if sampling['sampling_probability'] is not None:
    return sampling['sampling_probability']
  if sampling['population'] is not None and sampling['sample_size'] is not None:
    return sampling['sample_size'] / sampling['population']
  return 1.0


def gaussian_report(
    noise_multiplier: float,
    delta: float,
    rounds: int,
    *,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
) -> dict:
  """eps at `delta` of `rounds` rounds of the sampled Gaussian, all accountants."""
  rounds = validation.int_at_least('rounds', rounds, 1)
  sampling = _sampling(sampling_probability, population, sample_size)
  ledger = ledger_lib.PrivacyLedger()
  ledger.record_gaussian(noise_multiplier, count=rounds, **sampling)
  result = ledger.report(delta)
  result.update(
      noise_multiplier=float(noise_multiplier),
      rounds=rounds,
      sampling_rate=_rate(sampling),
      sampling='fixed-size' if population is not None else (
          'poisson' if sampling_probability is not None else 'none'),
  )
  return result


def calibrate_report(
    target_epsilon: float,
    delta: float,
    rounds: int,
    *,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
) -> dict:
  """The noise multiplier each accountant needs for (target_epsilon, delta)."""
  sampling = _sampling(sampling_probability, population, sample_size)
  result = {'target_epsilon': target_epsilon, 'delta': delta, 'rounds': rounds}
  result['rdp_noise_multiplier'] = calibration.calibrate_noise_multiplier(
      target_epsilon, delta, rounds, **sampling
  )
  if population is None:  # dp_accounting 0.4.3's PLD has no fixed-size sampling.
    result['pld_noise_multiplier'] = calibration.calibrate_noise_multiplier(
        target_epsilon, delta, rounds, accountant='pld', **sampling
    )
  else:
    result['pld_noise_multiplier'] = None
  return result


def mechanism_report(
    mechanism: str,
    *,
    delta: float,
    rounds: int,
    noise_multiplier: Optional[float] = None,
    target_epsilon: Optional[float] = None,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
    sensitivity: Optional[float] = None,
    noise_stddev: Optional[float] = None,
    clip: Optional[float] = None,
    ldp_epsilon: Optional[float] = None,
    num_values: Optional[int] = None,
    num_clients: Optional[int] = None,
) -> dict:
  """The privacy of a mechanism's run, or its noise for a target eps.

  Args:
    mechanism: one of MECHANISMS.
    delta: in (0, 1).
    rounds: T >= 1.
    noise_multiplier: z (dp_fedavg, smp; udp when `noise_stddev` is not given).
    target_epsilon: instead of a noise level: report the noise that meets it.
    sampling_probability: Poisson client sampling rate q.
    population: fixed-size sampling: clients sampled from.
    sample_size: fixed-size sampling: clients per round.
    sensitivity: udp: Delta of a client's update (with noise_stddev).
    noise_stddev: udp / distortion: absolute client noise std.
    clip: distortion: the L2 clip of the upload (Delta = 2 clip).
    ldp_epsilon: ldp: eps0 per value.
    num_values: ldp: values d per client per round.
    num_clients: ldp: clients n whose reports are shuffled together.

  Returns:
    A JSON-ready dict.
  """
  validation.one_of('mechanism', mechanism, MECHANISMS)
  delta = validation.open_unit('delta', delta)
  rounds = validation.int_at_least('rounds', rounds, 1)
  sampling = _sampling(sampling_probability, population, sample_size)
  q = _rate(sampling)
  if mechanism == 'ldp':
    return _ldp_report(ldp_epsilon, num_values, num_clients, rounds, delta)

  out = {'mechanism': mechanism, 'delta': delta, 'rounds': rounds, 'sampling_rate': q}
  scale = None  # Absolute noise = z * scale, for udp / distortion.
  if mechanism == 'udp' and sensitivity is not None:
    scale = validation.positive('sensitivity', sensitivity)
  if mechanism == 'distortion':
    scale = 2 * validation.positive('clip', validation.required('clip', clip))

  if target_epsilon is not None:
    target_epsilon = validation.positive('epsilon', target_epsilon)
    out['calibration'] = calibrate_report(target_epsilon, delta, rounds, **sampling)
    if scale is not None:
      out['calibration']['rdp_noise_stddev'] = (
          out['calibration']['rdp_noise_multiplier'] * scale
      )
    if mechanism == 'udp':
      z = closed_forms.udp_theorem1_sigma(target_epsilon, delta, q, rounds, 1.0)
      check = audit.udp_theorem1_truth(target_epsilon, delta, q, rounds)
      out['paper'] = {
          'formula': 'UDP Theorem 1, eq. (10)',
          'paper_noise_multiplier': z,
          'paper_claimed_epsilon': target_epsilon,
          'true_rdp_epsilon': check.true_epsilon,
          'true_delta_at_claimed_epsilon': check.true_delta,
          'holds': check.holds,
      }
    elif mechanism == 'smp':
      check = audit.fedsmp_theorem1_truth(target_epsilon, delta, q, rounds)
      out['paper'] = {
          'formula': 'Fed-SMP Theorem 1',
          'paper_noise_multiplier': check.noise_multiplier,
          'paper_claimed_epsilon': target_epsilon,
          'true_rdp_epsilon': check.true_epsilon,
          'holds': check.holds,
      }
    out['guarantee'] = (
        'the rdp/pld noise multipliers meet the target by that accountant; '
        'a paper formula is a claim, its true eps is given beside it'
    )
    return out

  if noise_stddev is not None:
    if scale is None:
      raise ValueError(
          'noise_stddev needs sensitivity (udp) or clip (distortion) to give '
          'a noise multiplier'
      )
    noise_multiplier = validation.non_negative('noise_stddev', noise_stddev) / scale
  if noise_multiplier is None:
    raise ValueError('give noise_multiplier (or noise_stddev), or epsilon')
  out.update(gaussian_report(noise_multiplier, delta, rounds, **sampling))
  if mechanism == 'udp' and noise_multiplier > 0:
    # The eps eq. (10) claims for this noise: sigma is proportional to 1/eps,
    # so eps = sigma(eps=1) / z with Delta = 1.
    out['paper'] = {
        'formula': 'UDP Theorem 1, eq. (10) solved for eps',
        'paper_claimed_epsilon': closed_forms.udp_theorem1_sigma(
            1.0, delta, q, rounds, 1.0
        )
        / noise_multiplier,
    }
  elif mechanism == 'smp' and noise_multiplier > 0:
    out['paper'] = {
        'formula': 'Fed-SMP Theorem 1 (sufficient condition)',
        'paper_noise_multiplier_needed_for_rdp_epsilon': (
            closed_forms.fedsmp_theorem1_noise_multiplier(
                out['rdp_epsilon'], delta, q, rounds
            )
            if 0 < out['rdp_epsilon'] < float('inf')
            else None
        ),
    }
  out['guarantee'] = (
      'rdp_epsilon (and pld_epsilon where given) are guarantees under the '
      f"stated sampling ({out['sampling']}); paper numbers are claims"
  )
  return out


def _ldp_report(ldp_epsilon, num_values, num_clients, rounds, delta):
  """LDP-FL: the paper's claim, plain composition, accountants, shuffle bound."""
  eps0 = validation.positive(
      'ldp_epsilon', validation.required('ldp_epsilon', ldp_epsilon)
  )
  num_values = validation.int_at_least(
      'num_values', validation.required('num_values', num_values), 1
  )
  ledger = ledger_lib.PrivacyLedger()
  ledger.record_pure_epsilon(eps0, count=num_values * rounds)
  out = {
      'mechanism': 'ldp',
      'delta': delta,
      'rounds': rounds,
      'num_values': num_values,
      'paper_epsilon_per_value': closed_forms.ldp_per_value_epsilon(eps0),
      'plain_composition_epsilon': closed_forms.ldp_plain_composition_epsilon(
          eps0, num_values, rounds
      ),
  }
  accounted = ledger.report(delta)
  out['rdp_epsilon'] = accounted['rdp_epsilon']
  out['pld_epsilon'] = accounted['pld_epsilon']
  if accounted['unsupported']:
    out['unsupported'] = accounted['unsupported']
  if num_clients is not None:
    bound = closed_forms.ldp_shuffle_composed(
        eps0, num_clients, num_values, rounds, delta
    )
    out['shuffle_epsilon'] = bound.epsilon
    out['shuffle_applicable'] = bound.applicable
    out['shuffle_reason'] = bound.reason
  out['guarantee'] = (
      'per client: plain_composition_epsilon (pure DP), rdp_epsilon and '
      'pld_epsilon (at delta) are guarantees of local DP for all d values over '
      'T rounds; shuffle_epsilon is a guarantee only when shuffle_applicable '
      '(and only against a server that sees the shuffled messages); '
      'paper_epsilon_per_value is the paper\'s per-value claim, not a bound on '
      'what a client releases'
  )
  return out
