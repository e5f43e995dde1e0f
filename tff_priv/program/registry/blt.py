"""BLT DP-FTRL: Buffered Linear Toeplitz matrix-factorization noise."""

import dataclasses
from typing import Optional

from tff_priv import validation
from tff_priv.aggregators import blt
from tff_priv.program.registry import base


@dataclasses.dataclass(frozen=True)
class Config(base.MechanismConfig):
  """BLT DP-FTRL (McMahan et al. 2024, "Hassle-free DP-FTRL for production").

  `aggregators.blt.BLTFactory` in unweighted FedAvg (docs/blt.md), its
  streams, strategy and noise from `blt.plan_streams`: a stream per epoch of
  b = N // K rounds, or one cyclic stream in which a secret permutation's b
  groups of K take turns (the BLT optimised for (T, k, b) and its (k, b)
  sensitivity, Choquette-Choo et al. 2023). Each stream is charged
  `GaussianDpEvent(z / sensitivity)` once, at its first round, under
  REPLACE_SPECIAL (a client's updates replaced by zero); no amplification by
  sampling. The server adds the noise: no guarantee against it.
  """

  NAME = 'blt'
  SAMPLING = 'epoch'
  GUARANTEE = blt.GUARANTEE
  REPORT_PARAMETERS = (
      'epsilon',
      'noise_multiplier',
      'delta',
      'num_buffers',
      'participation',
  )

  epsilon: Optional[float] = base.epsilon_param()
  noise_multiplier: Optional[float] = base.param(
      None, "z > 0: z_t's std is z C per round."
  )
  delta: float = base.delta_param()
  clip: float = base.param(
      base.DEFAULT_CLIP, "L2 clip C of each client's update."
  )
  num_buffers: Optional[int] = base.param(
      None, "the BLT's buffers (None: chosen by the optimiser, at most 5)."
  )
  participation: str = base.param(
      'epoch',
      "'epoch' (a stream per epoch of N // K rounds, each client at most "
      "once in it) or 'cyclic' (one stream for the run, each client every "
      'N // K rounds).',
  )

  def __post_init__(self):
    base.fill_noise_target(self, self.NAME, ('epsilon', 'noise_multiplier'))
    self.validate()

  def validate(self) -> None:
    base.check_fields(
        self,
        {
            'participation': lambda name, value: validation.one_of(
                name, value, blt.PARTICIPATIONS
            ),
        },
    )
    if self.noise_multiplier is not None and self.noise_multiplier <= 0:
      raise ValueError(
          f"mechanism 'blt' needs noise_multiplier > 0, got "
          f'{self.noise_multiplier}'
      )
    if self.num_buffers is not None and not 1 <= self.num_buffers <= 10:
      raise ValueError(f'num_buffers must be in 1..10, got {self.num_buffers}')

  def sampling_kind(self) -> str:
    """Its participation's sampling ('epoch', 'cyclic')."""
    return self.participation

  def canary_refusal(self) -> Optional[str]:
    """Canary clients join once per epoch: not the cyclic schedule."""
    if self.participation == 'cyclic':
      return (
          "audit_canaries with blt's participation='cyclic' is not supported: "
          'canary clients join once per epoch at a random round, not every '
          "N // K rounds as the stream's (k, b) guarantee needs"
      )
    return None

  def _plan(self, total_rounds, population, k, streams_left=None, spent=None):
    return blt.plan_streams(
        total_rounds,
        population,
        k,
        participation=self.participation,
        epsilon=self.epsilon,
        noise_multiplier=self.noise_multiplier,
        delta=self.delta,
        num_buffers=self.num_buffers,
        streams_left=streams_left,
        spent=spent,
    )

  def calibrate(self, context: base.BuildContext) -> blt.StreamPlan:
    """The run's `blt.plan_streams`: z given, or exact for the target.

    Over the run's unsampled stream Gaussians; a resumed session's, over its
    streams left after what is spent.
    """
    population = context.sampling.num_clients
    k = context.sampling.clients_per_round
    plan = self._plan(context.total_rounds, population, k)
    if self.noise_multiplier is not None or context.resumed.spent is None:
      return plan
    noise = context.stream_noise(
        plan.rounds_per_stream,
        lambda streams, spent: self._plan(
            context.total_rounds, population, k, streams, spent
        ).noise_multiplier,
    )
    return dataclasses.replace(plan, noise_multiplier=noise)

  def make(self, context: base.BuildContext) -> base.Mechanism:
    """The run's BLT streams in unweighted FedAvg."""
    plan = self.calibrate(context)
    factory = blt.BLTFactory.from_plan(
        plan, context.sampling.clients_per_round, self.clip
    )
    return base.restarting_on_resume(
        self.NAME,
        self,
        context,
        factory,
        blt.with_restart_forced,
        resolved=blt.resolved(plan),
        what='stream',
        stream=blt.STREAM_KEYS,
    )

  @classmethod
  def report(cls, params, rounds, sampling):
    """`blt.privacy_report` of the run's plan (fixed-size `sampling`)."""
    if sampling.kind != 'fixed':
      raise ValueError(
          "mechanism 'blt' needs --population and --clients_per_round (its "
          'schedule: N // K rounds per epoch or between participations), not '
          'a sampling rate'
      )
    if params.get('epsilon') is None and params.get('noise_multiplier') is None:
      raise ValueError("mechanism 'blt' needs epsilon or noise_multiplier")
    config = cls(**params)
    plan = config._plan(rounds, sampling.population, sampling.sample_size)
    return blt.privacy_report(plan, rounds, config.delta, config.epsilon)
