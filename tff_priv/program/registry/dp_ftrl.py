"""DP-FTRL: TFF's tree-aggregation DP factory, the baseline a TFF user picks.

`tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation` in
`tff.learning.algorithms.build_unweighted_fed_avg` (Kairouz et al.,
"Practical and Private (Deep) Learning without Sampling or Shuffling", ICML
2021), restarted every epoch by `tff_priv.aggregators.dp_ftrl` (which owns
the DpEvent): one tree per epoch, charged under dp_accounting's
REPLACE_SPECIAL relation (`build`), no amplification by sampling. The server
adds the noise: no guarantee against it.
"""

import dataclasses
from typing import Optional

from tff_priv.aggregators import dp_ftrl
from tff_priv.program.registry import base

NAME = 'dp_ftrl'


@dataclasses.dataclass(frozen=True)
class Config:
  """DP-FTRL's parameters.

  Attributes:
    noise_multiplier: z > 0: each tree node's noise std is z C.
    epsilon: instead of noise_multiplier, the run's target eps at delta.
    delta: the delta of the target and the report.
    clip: L2 clip C of each client's update.
  """

  noise_multiplier: Optional[float] = None
  epsilon: Optional[float] = None
  delta: float = base.DEFAULT_DELTA
  clip: float = base.DEFAULT_CLIP

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    base.check_fields(self)
    if self.noise_multiplier is not None and self.epsilon is not None:
      raise ValueError(
          "give one of noise_multiplier, epsilon for mechanism 'dp_ftrl'"
      )
    if not self.noise_multiplier and self.epsilon is None:
      raise ValueError(
          "mechanism 'dp_ftrl' needs noise_multiplier > 0 or a target epsilon"
      )


def build(config: Config, context: base.BuildContext) -> base.Mechanism:
  """The restarted tree factory in unweighted FedAvg, one tree per epoch.

  Clients are drawn epoch by epoch ('epoch' sampling: each at most once per
  epoch of N // K rounds); each epoch's tree is charged
  `SingleEpochTreeAggregationDpEvent(z, N // K)` at its first round, under
  dp_accounting's REPLACE_SPECIAL relation. No amplification by sampling:
  the guarantee holds whoever is drawn. A target `epsilon` is calibrated
  exactly: the run composes ceil(T / epoch) trees, each counted by
  dp_accounting as a Gaussian of multiplier z / sqrt(S)
  (`events.tree_sensitivity_squared`). The paper's server optimizer is SGD
  (momentum optional) on the noised residual sums: the program's server
  optimizer and rate.
  """
  rounds_per_epoch = context.sampling.rounds_per_epoch
  noise_multiplier = config.noise_multiplier
  if noise_multiplier is None:
    noise_multiplier = context.stream_noise(
        rounds_per_epoch,
        lambda trees, spent: dp_ftrl.tree_noise(
            config.epsilon,
            config.delta,
            context.total_rounds,
            rounds_per_epoch,
            trees_left=trees,
            spent=spent,
        ),
    )
  factory = dp_ftrl.TreeRestartFactory(
      noise_multiplier,
      context.sampling.clients_per_round,
      config.clip,
      rounds_per_epoch,
  )
  return base.restarting_on_resume(
      NAME,
      config,
      context,
      factory,
      dp_ftrl.with_restart_forced,
      resolved={
          'noise_multiplier': noise_multiplier,
          'rounds_per_tree': rounds_per_epoch,
      },
      what='tree',
  )


DEFINITION = base.Definition(
    name=NAME,
    config=Config,
    build=build,
    sampling='epoch',
    guarantee=dp_ftrl.GUARANTEE,
)
