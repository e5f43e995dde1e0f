"""Amplified BandMF: banded matrix-factorization noise in cyclic groups."""

import dataclasses
from typing import Optional

from tff_priv.aggregators import bandmf
from tff_priv.program.registry import base


@dataclasses.dataclass(frozen=True)
class Config(base.MechanismConfig):
  """Amplified BandMF: banded MF noise, clients Poisson-sampled in b groups.

  `aggregators.bandmf.BandMFFactory` in unweighted FedAvg (Choquette-Choo et
  al. 2023, "(Amplified) Banded Matrix Factorization"; docs/blt.md), its
  bands, strategy and noise from `bandmf.plan_bands` (b chosen from (T, N, K,
  eps, delta) by the prefix-error model, b = 1 being DP-FedAvg, or given):
  the clients split by a secret permutation into b groups taking turns, each
  Poisson-sampled in its round at q = K / floor(N / b) ('banded' sampling);
  one `PoissonSampledDpEvent(q, GaussianDpEvent(z))` charged at the first
  round of each cycle of b rounds, under add-or-remove-one. The server adds
  the noise: no guarantee against it.
  """

  NAME = 'bandmf'
  SAMPLING = 'banded'
  GUARANTEE = bandmf.GUARANTEE
  REPORT_PARAMETERS = ('epsilon', 'noise_multiplier', 'delta', 'bands')

  epsilon: Optional[float] = base.epsilon_param()
  noise_multiplier: Optional[float] = base.param(
      None,
      'z > 0: the noise std is z C per round before the banded correlation '
      '(needs bands).',
  )
  delta: float = base.delta_param()
  clip: float = base.param(
      base.DEFAULT_CLIP, "L2 clip C of each client's update."
  )
  bands: Optional[int] = base.param(
      None,
      'b, the groups taking turns (at most N // K); None: chosen for the '
      'target by the prefix-error model among the divisors of N.',
  )

  def __post_init__(self):
    base.fill_noise_target(self, self.NAME, ('epsilon', 'noise_multiplier'))
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

  def canary_refusal(self) -> Optional[str]:
    """Canary clients join every round: not the cyclic groups of its event."""
    return (
        'audit_canaries with bandmf is not supported: canary clients join at '
        "the real clients' rate every round, not in the cyclic groups its "
        'event holds for'
    )

  def _plan(self, total_rounds, population, k) -> bandmf.BandPlan:
    return bandmf.cached_plan_bands(
        total_rounds,
        population,
        k,
        self.epsilon,
        self.noise_multiplier,
        self.delta,
        self.bands,
    )

  def calibrate(self, context: base.BuildContext) -> bandmf.BandPlan:
    """The run's `bandmf.plan_bands`: its bands, and z given or for the target.

    The bands are a function of the configuration alone: a resumed session
    draws the same groups, its z calibrated over its cycles left after what
    is spent.
    """
    population = context.sampling.num_clients
    k = context.sampling.clients_per_round
    plan = self._plan(context.total_rounds, population, k)
    if self.epsilon is None or context.resumed.spent is None:
      return plan
    noise = context.stream_noise(
        plan.bands,
        lambda cycles, spent: bandmf.plan_bands(
            context.total_rounds,
            population,
            k,
            epsilon=self.epsilon,
            delta=self.delta,
            bands=plan.bands,
            cycles_left=cycles,
            spent=spent,
        ).noise_multiplier,
    )
    return dataclasses.replace(plan, noise_multiplier=noise)

  def make(self, context: base.BuildContext) -> base.Mechanism:
    """The run's amplified BandMF in unweighted FedAvg, sampled in its bands."""
    plan = self.calibrate(context)
    factory = bandmf.BandMFFactory.from_plan(
        plan, context.sampling.clients_per_round, self.clip
    )
    mech = base.restarting_on_resume(
        self.NAME,
        self,
        context,
        factory,
        bandmf.with_restart_forced,
        resolved=bandmf.resolved(plan),
        what='cycle',
        stream=bandmf.STREAM_KEYS,
    )
    mech.sampling = dataclasses.replace(context.sampling, bands=plan.bands)
    return mech

  @classmethod
  def report(cls, params, rounds, sampling):
    """`bandmf.privacy_report` of the bands the program plans for the run.

    `sampling`: fixed-size, its `population` N and `sample_size` K needed.
    """
    if sampling.kind != 'fixed':
      raise ValueError(
          "mechanism 'bandmf' needs --population and --clients_per_round (its "
          'groups: the rate in each is K / floor(N / b)), not a sampling rate'
      )
    if params.get('epsilon') is None and params.get('noise_multiplier') is None:
      raise ValueError("mechanism 'bandmf' needs epsilon or noise_multiplier")
    config = cls(**params)
    plan = config._plan(rounds, sampling.population, sampling.sample_size)
    return bandmf.privacy_report(plan, rounds, config.delta, config.epsilon)
