"""DP-FTRL: TFF's tree-aggregation DP factory, restarted every epoch."""

import dataclasses
from typing import Optional

from tff_priv.aggregators import dp_ftrl
from tff_priv.program.registry import base


@dataclasses.dataclass(frozen=True)
class Config(base.MechanismConfig):
  """DP-FTRL (Kairouz et al., ICML 2021), the baseline a TFF user picks.

  `tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation` in
  unweighted FedAvg, restarted every epoch by `aggregators.dp_ftrl` (which
  owns the DpEvent): clients are drawn epoch by epoch ('epoch' sampling: each
  at most once per epoch of N // K rounds) and each epoch's tree is charged
  `SingleEpochTreeAggregationDpEvent(z, N // K)` at its first round, under
  REPLACE_SPECIAL, no amplification by sampling. The server adds the noise:
  no guarantee against it. The paper's server optimizer is SGD (momentum
  optional) on the noised residual sums: the program's server optimizer.
  """

  NAME = "dp_ftrl"
  SAMPLING = "epoch"
  GUARANTEE = dp_ftrl.GUARANTEE

  noise_multiplier: Optional[float] = base.param(
      None, "z > 0: each tree node's noise std is z C."
  )
  epsilon: Optional[float] = base.param(
      None, "instead of noise_multiplier, the run's target eps at delta."
  )
  delta: float = base.delta_param()
  clip: float = base.param(
      base.DEFAULT_CLIP, "L2 clip C of each client's update."
  )

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

  def calibrate(self, context: base.BuildContext) -> float:
    """z: given, or exact for the target over the ceil(T / epoch) trees.

    dp_accounting counts each tree as a Gaussian of multiplier z / sqrt(S)
    (`events.tree_sensitivity_squared`); a resumed session, the trees left.
    """
    if self.noise_multiplier is not None:
      return self.noise_multiplier
    rounds_per_epoch = context.sampling.rounds_per_epoch
    return context.stream_noise(
        rounds_per_epoch,
        lambda trees, spent: dp_ftrl.tree_noise(
            self.epsilon,
            self.delta,
            context.total_rounds,
            rounds_per_epoch,
            trees_left=trees,
            spent=spent,
        ),
    )

  def make(self, context: base.BuildContext) -> base.Mechanism:
    """The restarted tree factory in unweighted FedAvg, one tree per epoch."""
    noise_multiplier = self.calibrate(context)
    rounds_per_epoch = context.sampling.rounds_per_epoch
    factory = dp_ftrl.TreeRestartFactory(
        noise_multiplier,
        context.sampling.clients_per_round,
        self.clip,
        rounds_per_epoch,
    )
    return base.restarting_on_resume(
        self.NAME,
        self,
        context,
        factory,
        dp_ftrl.with_restart_forced,
        resolved={
            "noise_multiplier": noise_multiplier,
            "rounds_per_tree": rounds_per_epoch,
        },
        what="tree",
    )
