"""BLT DP-FTRL: matrix-factorization noise from a Buffered Linear Toeplitz strategy.

`tff_priv.aggregators.blt.BLTFactory` in unweighted FedAvg (McMahan et al.
2024, "Hassle-free DP-FTRL for production"; docs/blt.md). Clients are drawn
epoch by epoch ('epoch' sampling: each at most once per epoch of N // K
rounds), and each epoch is one BLT stream: single participation per stream,
the BLT optimised for the epoch's rounds (`tff_priv.mechanisms.blt.optimize`,
max prefix-sum error), charged `GaussianDpEvent(z / sensitivity)` once at its
first round under dp_accounting's REPLACE_SPECIAL relation. No amplification
by sampling. The server adds the noise: no guarantee against it. A target
`epsilon` is calibrated exactly: the run composes ceil(T / n) stream
Gaussians, unsampled.
"""

import dataclasses
import math
from typing import Any, Optional

from tff_priv.accounting import reports
from tff_priv.accounting import target_noise
from tff_priv.aggregators import blt as blt_factory
from tff_priv.mechanisms import blt as blt_lib
from tff_priv.program import sampling as sampling_lib
from tff_priv.program.mechanisms import base

NAME = 'blt'
SAMPLING = 'epoch'
UNIT = 'client'
# The server adds the correlated noise.
NOISE = 'central'
# The `Config` fields `privacy_report` reads.
REPORT_PARAMETERS = ('epsilon', 'noise_multiplier', 'delta', 'num_buffers')


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
  """

  epsilon: Optional[float] = None
  noise_multiplier: Optional[float] = None
  delta: float = base.DEFAULT_DELTA
  clip: float = base.DEFAULT_CLIP
  num_buffers: Optional[int] = None

  def __post_init__(self):
    base.fill_noise_target(self, NAME, ('epsilon', 'noise_multiplier'))
    self.validate()

  def validate(self) -> None:
    base.check_fields(self)
    if self.noise_multiplier is not None and self.noise_multiplier <= 0:
      raise ValueError(
          f"mechanism 'blt' needs noise_multiplier > 0, got "
          f'{self.noise_multiplier}'
      )
    if self.num_buffers is not None and not 1 <= self.num_buffers <= 10:
      raise ValueError(
          f'num_buffers must be in 1..10, got {self.num_buffers}'
      )


def _plan(config: Config, rounds_per_stream: int, total_rounds: int,
          streams_left: Optional[int] = None, spent=None):
  """(strategy, sensitivity, streams, noise_multiplier) of a run.

  `streams_left` (default: every stream) are calibrated after `spent`
  (`calibration.Spent`, a resumed run's ledger).
  """
  strategy = blt_lib.optimize(
      rounds_per_stream, error='max', num_buffers=config.num_buffers
  )
  sensitivity = strategy.sensitivity(rounds_per_stream, 1, 1)
  streams = math.ceil(total_rounds / rounds_per_stream)
  noise_multiplier = config.noise_multiplier
  if noise_multiplier is None:
    # The run releases `streams` unsampled Gaussians of multiplier
    # z / sensitivity: z is their noise std relative to that sensitivity.
    noise_multiplier = target_noise.noise_for_target(
        config.epsilon, config.delta, streams_left or streams,
        sensitivity=sensitivity, spent=spent,
    )
  return strategy, sensitivity, streams, noise_multiplier


def privacy_report(params: dict[str, Any], rounds: int, **sampling) -> dict:
  """eps of a run's streams by every accountant, or the noise for a target.

  The run's epochs (N // K rounds, from `population` N and `sample_size` K)
  are its streams: ceil(T / epoch) unsampled Gaussians of multiplier
  noise_multiplier / sensitivity (no amplification: the sampling only sets
  the epoch). No paper closed form.

  Args:
    params: `REPORT_PARAMETERS` by name (absent: not given; `delta` given).
    rounds: T >= 1.
    **sampling: `population` and `sample_size` (needed).
  """
  if sampling.get('sampling_probability') is not None or not (
      sampling.get('population') and sampling.get('sample_size')
  ):
    raise ValueError(
        "mechanism 'blt' needs --population and --clients_per_round (its "
        'epoch sampling: one stream per epoch of N // K rounds), not a '
        'sampling rate'
    )
  epoch = sampling_lib.ClientSampling(
      SAMPLING, sampling['population'], sampling['sample_size']
  ).rounds_per_epoch
  given = dict(params)
  if given.get('epsilon') is None and given.get('noise_multiplier') is None:
    raise ValueError("mechanism 'blt' needs epsilon or noise_multiplier")
  config = Config(**given)
  strategy, sensitivity, streams, noise_multiplier = _plan(
      config, epoch, rounds
  )
  report = reports.gaussian_mechanism_report(
      NAME, delta=config.delta, rounds=streams,
      **({'epsilon': config.epsilon} if config.noise_multiplier is None
         else {'noise_stddev': noise_multiplier}),
      scale=sensitivity,
  )
  report['rounds'] = rounds
  if 'neighboring_relation' in report:
    # The sensitivity is for a client's updates replaced by zero; an
    # unsampled Gaussian's eps is the same under either relation.
    report['neighboring_relation'] = (
        blt_factory.GUARANTEE.neighboring_relation
    )
  report['blt'] = {
      'rounds_per_stream': epoch,
      'streams': streams,
      'sensitivity': sensitivity,
      'noise_multiplier': noise_multiplier,
      'buf_decay': [float(x) for x in strategy.buf_decay],
      'output_scale': [float(x) for x in strategy.output_scale],
      'note': (
          'noise_multiplier is the std of each round\'s z in units of clip; '
          'the accountants count the streams, each a Gaussian of multiplier '
          'noise_multiplier / sensitivity'
      ),
  }
  return report


def build(config: Config, context: base.BuildContext) -> base.Mechanism:
  """One BLT stream per epoch in unweighted FedAvg."""
  rounds_per_stream = context.sampling.rounds_per_epoch
  strategy, sensitivity, _, noise_multiplier = _plan(
      config, rounds_per_stream, context.total_rounds,
      context.streams_left(rounds_per_stream), context.spent,
  )
  factory = blt_factory.BLTFactory(
      noise_multiplier,
      context.sampling.clients_per_round,
      config.clip,
      list(strategy.buf_decay),
      list(strategy.output_scale),
      rounds_per_stream,
  )
  return base.restarting_on_resume(
      NAME, config, context, factory, blt_factory.with_restart_forced,
      resolved={
          'noise_multiplier': noise_multiplier,
          'rounds_per_stream': rounds_per_stream,
          'sensitivity': sensitivity,
          'buf_decay': [float(x) for x in strategy.buf_decay],
          'output_scale': [float(x) for x in strategy.output_scale],
      },
      what='stream',
  )
