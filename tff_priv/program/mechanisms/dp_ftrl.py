"""DP-FTRL: TFF's tree-aggregation DP factory, the baseline a TFF user picks.

`tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation` in
`tff.learning.algorithms.build_unweighted_fed_avg` (Kairouz et al.,
"Practical and Private (Deep) Learning without Sampling or Shuffling", ICML
2021), restarted every epoch by `tff_priv.aggregators.dp_ftrl` (which owns
the DpEvent). Clients are drawn epoch by epoch ('epoch' sampling: each at
most once per epoch of N // K rounds); each epoch's tree is charged
`SingleEpochTreeAggregationDpEvent(z, N // K)` at its first round, under
dp_accounting's REPLACE_SPECIAL relation. No amplification by sampling: the
guarantee holds whoever is drawn. The server adds the noise: no guarantee
against it. The paper's server optimizer is SGD (momentum optional) on the
noised residual sums: the program's server optimizer and rate.
"""

import dataclasses
from typing import Optional

from tff_priv.aggregators import dp_ftrl
from tff_priv.program.mechanisms import base

NAME = 'dp_ftrl'
SAMPLING = 'epoch'
UNIT = 'client'
# The server adds each tree node's noise.
NOISE = 'central'


@dataclasses.dataclass(frozen=True)
class Config:
  """DP-FTRL's parameters.

  Attributes:
    noise_multiplier: z > 0: each tree node's noise std is z C.
    delta: the delta of the report.
    clip: L2 clip C of each client's update.
  """

  noise_multiplier: Optional[float] = None
  delta: float = base.DEFAULT_DELTA
  clip: float = base.DEFAULT_CLIP

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    base.check_fields(self)
    if not self.noise_multiplier:
      raise ValueError(
          "mechanism 'dp_ftrl' needs noise_multiplier > 0 (a target epsilon "
          'is not calibrated for tree aggregation)'
      )


def canary_refusal(config: Config) -> Optional[str]:
  """No canary clients: they would join trees beyond once per epoch."""
  del config
  return (
      "audit_canaries does not apply to mechanism 'dp_ftrl': its guarantee "
      'needs each client at most once per tree, which canary clients drawn '
      'every round would break'
  )


def build(config: Config, context: base.BuildContext) -> base.Mechanism:
  """The restarted tree factory in unweighted FedAvg, one tree per epoch."""
  rounds_per_epoch = context.sampling.rounds_per_epoch
  factory = dp_ftrl.TreeRestartFactory(
      config.noise_multiplier,
      context.sampling.clients_per_round,
      config.clip,
      rounds_per_epoch,
  )
  return base.restarting_on_resume(
      NAME, config, context, factory, dp_ftrl.with_restart_forced,
      resolved={
          'noise_multiplier': config.noise_multiplier,
          'rounds_per_tree': rounds_per_epoch,
      },
      what='tree',
  )
