"""Amplified BandMF: banded matrix-factorization noise, cyclic Poisson groups.

`tff_priv.aggregators.bandmf.BandMFFactory` in unweighted FedAvg
(Choquette-Choo et al. 2023, "(Amplified) Banded Matrix Factorization";
docs/blt.md): the clients split by a secret permutation into b groups taking
turns, each Poisson-sampled in its round at q = K / floor(N / b) ('banded'
sampling); one `PoissonSampledDpEvent(q, GaussianDpEvent(z))` charged at the
first round of each cycle of b rounds, under add-or-remove-one. The server
adds the noise: no guarantee against it.
"""

import dataclasses
import functools
from typing import Any, Optional

from tff_priv.accounting import reports
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.aggregators import bandmf as bandmf_factory
from tff_priv.program.registry import base

NAME = 'bandmf'
REPORT_PARAMETERS = ('epsilon', 'noise_multiplier', 'delta', 'bands')


@dataclasses.dataclass(frozen=True)
class Config:
  """Amplified BandMF's parameters.

  Attributes:
    epsilon: the run's target eps at delta (exclusive with
      noise_multiplier; default when neither is given).
    noise_multiplier: z > 0: the noise std is z C per round before the
      banded correlation (needs bands).
    delta: the delta of the target and the report.
    clip: L2 clip C of each client's update.
    bands: b, the groups taking turns (at most N // K); None: chosen for the
      target by the prefix-error model among the divisors of N.
  """

  epsilon: Optional[float] = None
  noise_multiplier: Optional[float] = None
  delta: float = base.DEFAULT_DELTA
  clip: float = base.DEFAULT_CLIP
  bands: Optional[int] = None

  def __post_init__(self):
    base.fill_noise_target(self, NAME, ('epsilon', 'noise_multiplier'))
    self.validate()

  def validate(self) -> None:
    base.check_fields(self, {})
    if self.noise_multiplier is not None and self.noise_multiplier <= 0:
      raise ValueError(
          f"mechanism 'bandmf' needs noise_multiplier > 0, got "
          f'{self.noise_multiplier}'
      )
    if self.bands is not None and self.bands < 1:
      raise ValueError(f'bands must be >= 1, got {self.bands}')
    if self.noise_multiplier is not None and self.bands is None:
      raise ValueError(
          "mechanism 'bandmf' chooses bands for a target epsilon; with "
          'noise_multiplier give bands too'
      )


def canary_refusal(config: Config) -> Optional[str]:
  """Canary clients join every round: not the cyclic groups of its event."""
  del config
  return (
      'audit_canaries with bandmf is not supported: canary clients join at '
      "the real clients' rate every round, not in the cyclic groups its "
      'event holds for'
  )


@functools.lru_cache(maxsize=16)
def _plan(total_rounds, population, k, epsilon, noise_multiplier, delta, bands):
  # Cached: a resumed run plans twice (the bands, then its noise left);
  # each candidate's calibration takes seconds.
  return bandmf_factory.plan_bands(
      total_rounds,
      population,
      k,
      epsilon=epsilon,
      noise_multiplier=noise_multiplier,
      delta=delta,
      bands=bands,
  )


def privacy_report(
    params: dict[str, Any], rounds: int, sampling: sampling_lib.Sampling
) -> dict:
  """eps of a run's cycles by every accountant, or the noise for a target.

  The run (T = `rounds`, N = `population`, K = `sample_size`) plans its
  bands as the program does; its releases are the ceil(T / b) cycles, each
  a Poisson-sampled Gaussian (q = K / floor(N / b), multiplier z) under
  add-or-remove-one. No paper closed form. `rounds` in the report is T;
  `bandmf.cycles` the releases the accountants count.

  Args:
    params: `REPORT_PARAMETERS` by name (absent: not given; `delta` given).
    rounds: T >= 1.
    sampling: fixed-size, `population` and `sample_size` (needed).
  """
  if sampling.kind != 'fixed':
    raise ValueError(
        "mechanism 'bandmf' needs --population and --clients_per_round (its "
        'groups: the rate in each is K / floor(N / b)), not a sampling rate'
    )
  given = dict(params)
  if given.get('epsilon') is None and given.get('noise_multiplier') is None:
    raise ValueError("mechanism 'bandmf' needs epsilon or noise_multiplier")
  config = Config(**given)
  target = config.epsilon if config.noise_multiplier is None else None
  plan = _plan(
      rounds,
      sampling.population,
      sampling.sample_size,
      target,
      config.noise_multiplier,
      config.delta,
      config.bands,
  )
  report = reports.gaussian_mechanism_report(
      NAME,
      delta=config.delta,
      rounds=plan.cycles,
      **(
          {'epsilon': target}
          if target is not None
          else {'noise_multiplier': plan.noise_multiplier}
      ),
      sampling=sampling_lib.Sampling.poisson(plan.sampling_probability),
  )
  reports.counted_as(report, rounds, plan.cycles, 'cycles')
  report['neighboring_relation'] = bandmf_factory.GUARANTEE.neighboring_relation
  report['bandmf'] = {
      **_resolved(plan),
      'note': (
          'rounds is T; the accountants count the cycles of b rounds, '
          'each a Poisson-sampled Gaussian of multiplier '
          'noise_multiplier'
      ),
  }
  return report


def _resolved(plan) -> dict[str, Any]:
  return {
      'noise_multiplier': plan.noise_multiplier,
      'bands': plan.bands,
      'sampling_probability': plan.sampling_probability,
      'cycles': plan.cycles,
      'coefs': [float(c) for c in plan.coefs],
      'scores': {str(b): s for b, s in plan.scores.items()},
  }


def build(config: Config, context: base.BuildContext) -> base.Mechanism:
  """The run's amplified BandMF in unweighted FedAvg.

  Its bands, strategy and noise come from `bandmf.plan_bands`: b is chosen
  from (T, N, K, eps, delta) by the prefix-error model (b = 1 is DP-FedAvg),
  or given (`bands`).
  """
  population = context.sampling.num_clients
  k = context.sampling.clients_per_round
  target = config.epsilon if config.noise_multiplier is None else None
  # The bands are a function of the configuration alone: a resumed session
  # draws the same groups.
  plan = _plan(
      context.total_rounds,
      population,
      k,
      target,
      config.noise_multiplier,
      config.delta,
      config.bands,
  )
  if target is not None and context.spent is not None:
    noise = context.stream_noise(
        plan.bands,
        lambda cycles, spent: bandmf_factory.plan_bands(
            context.total_rounds,
            population,
            k,
            epsilon=target,
            delta=config.delta,
            bands=plan.bands,
            cycles_left=cycles,
            spent=spent,
        ).noise_multiplier,
    )
    plan = dataclasses.replace(plan, noise_multiplier=noise)
  factory = bandmf_factory.BandMFFactory.from_plan(plan, k, config.clip)
  mech = base.restarting_on_resume(
      NAME,
      config,
      context,
      factory,
      bandmf_factory.with_restart_forced,
      resolved=_resolved(plan),
      what='cycle',
      stream=('bands', 'sampling_probability', 'coefs'),
  )
  mech.sampling = dataclasses.replace(context.sampling, bands=plan.bands)
  return mech


DEFINITION = base.Definition(
    name=NAME,
    config=Config,
    build=build,
    sampling='banded',
    # The server adds the correlated noise.
    guarantee=bandmf_factory.GUARANTEE,
    report=base.Report(privacy_report, REPORT_PARAMETERS),
    canary_refusal=canary_refusal,
)
