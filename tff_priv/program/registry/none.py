"""No mechanism: TFF's weighted FedAvg, every round a non-private release."""

import dataclasses

import tensorflow_federated as tff

from tff_priv.learning import canary_clients
from tff_priv.program.registry import base

NAME = 'none'


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


# No clip to scale a canary to: a canary's model delta has this nominal norm.
CANARY_NORM = 1.0


def build(config: Config, context: base.BuildContext) -> base.Mechanism:
  """`tff.learning.algorithms.build_weighted_fed_avg` with its client metrics.

  With canary clients: the same components (`canary_clients.build_fed_avg`);
  a canary's model delta has norm `CANARY_NORM` and its weight is the mean
  number of examples of a client (a statistic of the clients' data: this
  mechanism protects nothing), so that it counts as a typical client.
  """
  if context.canary_clients:
    process = canary_clients.build_fed_avg(
        context.model_fn,
        client_optimizer_fn=context.client_optimizer_fn(),
        server_optimizer_fn=context.server_optimizer_fn(),
        model_aggregator=tff.aggregators.MeanFactory(),
        client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
    )
  else:
    process = tff.learning.algorithms.build_weighted_fed_avg(
        context.model_fn,
        client_optimizer_fn=context.client_optimizer_fn(),
        server_optimizer_fn=context.server_optimizer_fn(),
    )
  mech = base.Mechanism(
      NAME,
      config,
      context.sampling,
      process,
      base.count_parameters(context.model_fn),
      caveats=[
          'no privacy mechanism: every round is a non-private release '
          '(eps = inf)'
      ],
  )
  if context.canary_clients:
    mech.canary_norm = CANARY_NORM
    mech.canary_weight = float(context.mean_client_examples())
  return mech


DEFINITION = base.Definition(
    name=NAME, config=Config, build=build, sampling='poisson', guarantee=None
)
