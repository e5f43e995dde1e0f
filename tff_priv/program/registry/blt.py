"""BLT DP-FTRL: Buffered Linear Toeplitz matrix-factorization noise.

`tff_priv.aggregators.blt.BLTFactory` in unweighted FedAvg (McMahan et al.
2024, "Hassle-free DP-FTRL for production"; docs/blt.md), a stream per epoch
or one cyclic stream (`build`). Each stream is charged `GaussianDpEvent(z /
sensitivity)` once, at its first round, under dp_accounting's REPLACE_SPECIAL
relation (a client's updates replaced by zero). No amplification by sampling.
The server adds the noise: no guarantee against it.
"""

import dataclasses
from typing import Any, Optional

from tff_priv import validation
from tff_priv.accounting import reports
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.aggregators import blt as blt_factory
from tff_priv.program.registry import base

NAME = 'blt'
# The `Config` fields `privacy_report` reads.
REPORT_PARAMETERS = (
    'epsilon',
    'noise_multiplier',
    'delta',
    'num_buffers',
    'participation',
)


@dataclasses.dataclass(frozen=True)
class Config:
  """BLT DP-FTRL's parameters.

  Attributes:
    epsilon: the run's target eps at delta (exclusive with
      noise_multiplier; default when neither is given).
    noise_multiplier: z > 0: z_t's std is z C per round.
    delta: the delta of the target and the report.
    clip: L2 clip C of each client's update.
    num_buffers: the BLT's buffers (None: chosen by the optimiser, at most
      5).
    participation: 'epoch' (a stream per epoch of N // K rounds, each
      client at most once in it) or 'cyclic' (one stream for the run, each
      client every N // K rounds).
  """

  epsilon: Optional[float] = None
  noise_multiplier: Optional[float] = None
  delta: float = base.DEFAULT_DELTA
  clip: float = base.DEFAULT_CLIP
  num_buffers: Optional[int] = None
  participation: str = 'epoch'

  def __post_init__(self):
    base.fill_noise_target(self, NAME, ('epsilon', 'noise_multiplier'))
    self.validate()

  def validate(self) -> None:
    base.check_fields(
        self,
        {
            'participation': lambda name, value: validation.one_of(
                name, value, blt_factory.PARTICIPATIONS
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


def canary_refusal(config: Config) -> Optional[str]:
  """Canary clients join once per epoch: not the cyclic schedule."""
  if config.participation == 'cyclic':
    return (
        "audit_canaries with blt's participation='cyclic' is not supported: "
        'canary clients join once per epoch at a random round, not every '
        "N // K rounds as the stream's (k, b) guarantee needs"
    )
  return None


def sampling(config: Config) -> str:
  """The client sampling of `config`'s participation ('epoch', 'cyclic')."""
  return config.participation


def _plan(
    config: Config,
    total_rounds: int,
    population: int,
    k: int,
    streams_left: Optional[int] = None,
    spent=None,
):
  return blt_factory.plan_streams(
      total_rounds,
      population,
      k,
      participation=config.participation,
      epsilon=config.epsilon if config.noise_multiplier is None else None,
      noise_multiplier=config.noise_multiplier,
      delta=config.delta,
      num_buffers=config.num_buffers,
      streams_left=streams_left,
      spent=spent,
  )


def privacy_report(
    params: dict[str, Any], rounds: int, sampling: sampling_lib.Sampling
) -> dict:
  """eps of a run's streams by every accountant, or the noise for a target.

  The run's streams (a stream per epoch of N // K rounds, or one stream of
  T rounds with each client every N // K rounds; `population` N and
  `sample_size` K) are unsampled Gaussians of multiplier noise_multiplier /
  sensitivity (no amplification: the sampling only sets the schedule). No
  paper closed form. `rounds` in the report is T; `blt.streams` the
  releases the accountants count.

  Args:
    params: `REPORT_PARAMETERS` by name (absent: not given; `delta` given).
    rounds: T >= 1.
    sampling: fixed-size, `population` and `sample_size` (needed).
  """
  if sampling.kind != 'fixed':
    raise ValueError(
        "mechanism 'blt' needs --population and --clients_per_round (its "
        'schedule: N // K rounds per epoch or between participations), not '
        'a sampling rate'
    )
  given = dict(params)
  if given.get('epsilon') is None and given.get('noise_multiplier') is None:
    raise ValueError("mechanism 'blt' needs epsilon or noise_multiplier")
  config = Config(**given)
  plan = _plan(config, rounds, sampling.population, sampling.sample_size)
  report = reports.gaussian_mechanism_report(
      NAME,
      delta=config.delta,
      rounds=plan.streams,
      **(
          {'epsilon': config.epsilon}
          if config.noise_multiplier is None
          else {'noise_stddev': plan.noise_multiplier}
      ),
      scale=plan.sensitivity,
  )
  # The accountants' releases are the streams, not the rounds.
  reports.counted_as(report, rounds, plan.streams, 'streams')
  if 'neighboring_relation' in report:
    # The sensitivity is for a client's updates replaced by zero; an
    # unsampled Gaussian's eps is the same under either relation.
    report['neighboring_relation'] = blt_factory.GUARANTEE.neighboring_relation
  report['blt'] = {
      **_resolved(plan),
      'streams': plan.streams,
      'note': (
          'rounds is T; the accountants count the streams, each a Gaussian '
          'of multiplier noise_multiplier / sensitivity (noise_multiplier is '
          "the std of each round's z in units of clip)"
      ),
  }
  return report


def _resolved(plan) -> dict[str, Any]:
  return {
      'participation': plan.participation,
      'noise_multiplier': plan.noise_multiplier,
      'rounds_per_stream': plan.rounds_per_stream,
      'max_participations': plan.max_participations,
      'min_sep': plan.min_sep,
      'sensitivity': plan.sensitivity,
      'buf_decay': [float(x) for x in plan.strategy.buf_decay],
      'output_scale': [float(x) for x in plan.strategy.output_scale],
  }


def build(config: Config, context: base.BuildContext) -> base.Mechanism:
  """The run's BLT streams in unweighted FedAvg.

  Its streams, strategy and noise come from `blt.plan_streams`:

  * participation 'epoch' ('epoch' sampling): a stream per epoch of
    b = N // K rounds, each client at most once in it, the BLT optimised for
    b rounds;
  * participation 'cyclic' ('cyclic' sampling): one stream for the whole
    run, a secret permutation's b = N // K groups of K taking turns, each
    client every b rounds (k = ceil(T / b) times), the BLT optimised for
    (T, k, b) and its (k, b) sensitivity (Choquette-Choo et al. 2023).

  A target `epsilon` is calibrated exactly over the run's unsampled stream
  Gaussians.
  """
  population = context.sampling.num_clients
  k = context.sampling.clients_per_round
  rounds_per_stream = (
      population // k
      if config.participation == 'epoch'
      else context.total_rounds
  )
  plan = _plan(config, context.total_rounds, population, k)
  if config.noise_multiplier is None and context.spent is not None:
    noise = context.stream_noise(
        rounds_per_stream,
        lambda streams, spent: _plan(
            config, context.total_rounds, population, k, streams, spent
        ).noise_multiplier,
    )
    plan = dataclasses.replace(plan, noise_multiplier=noise)
  factory = blt_factory.BLTFactory.from_plan(plan, k, config.clip)
  return base.restarting_on_resume(
      NAME,
      config,
      context,
      factory,
      blt_factory.with_restart_forced,
      resolved=_resolved(plan),
      what='stream',
      stream=(
          'participation',
          'rounds_per_stream',
          'max_participations',
          'min_sep',
          'sensitivity',
          'buf_decay',
          'output_scale',
      ),
  )


DEFINITION = base.Definition(
    name=NAME,
    config=Config,
    build=build,
    sampling=sampling,
    # The server adds the correlated noise.
    guarantee=blt_factory.GUARANTEE,
    report=base.Report(privacy_report, REPORT_PARAMETERS),
    canary_refusal=canary_refusal,
)
