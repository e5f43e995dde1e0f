"""No mechanism: TFF's weighted FedAvg, every round a non-private release."""

import dataclasses

import tensorflow_federated as tff

from tff_priv.learning import canary_clients
from tff_priv.program.registry import base

# No clip to scale a canary to: a canary's model delta has this nominal norm.
CANARY_NORM = 1.0


@dataclasses.dataclass(frozen=True)
class Config(base.MechanismConfig):
  """No mechanism: `tff.learning.algorithms.build_weighted_fed_avg`.

  Every round is a non-private release (eps = inf); its only parameter is
  the report's delta. TFF's client metrics are released as they are.
  """

  NAME = 'none'
  SAMPLING = 'poisson'
  GUARANTEE = None  # Not private.

  delta: float = base.param(
      base.DEFAULT_DELTA, 'the delta at which the (infinite) eps is reported.'
  )

  def make(self, context: base.BuildContext) -> base.Mechanism:
    """TFF's weighted FedAvg with its client metrics.

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
        self.NAME,
        self,
        context.sampling,
        process,
        base.count_parameters(context.model_fn),
        caveats=[
            'no privacy mechanism: every round is a non-private release '
            '(eps = inf)'
        ],
    )
    if context.canary_clients:
      mech.loop = base.Loop(
          canary_norm=CANARY_NORM,
          canary_weight=float(context.mean_client_examples()),
      )
    return mech
