"""No privacy mechanism: TFF's weighted FedAvg, every round a non-private release."""

import dataclasses

import tensorflow_federated as tff

from tff_priv.program.mechanisms import base

NAME = 'none'
SAMPLING = 'poisson'


@dataclasses.dataclass(frozen=True)
class Config:
  """No parameters but the report's.

  Attributes:
    delta: the delta at which the (infinite) eps is reported.
  """

  delta: float = base.DEFAULT_DELTA

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    base.check_fields(self)


def build(config: Config, context: base.BuildContext) -> base.Mechanism:
  """`tff.learning.algorithms.build_weighted_fed_avg` with its client metrics."""
  process = tff.learning.algorithms.build_weighted_fed_avg(
      context.model_fn,
      client_optimizer_fn=context.client_optimizer_fn(),
      server_optimizer_fn=context.server_optimizer_fn(),
  )
  return base.Mechanism(
      NAME, config, context.sampling, process,
      base.count_parameters(context.model_fn),
      caveats=['no privacy mechanism: every round is a non-private release '
               '(eps = inf)'],
  )
