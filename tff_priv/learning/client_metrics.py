"""What a private learning process releases of the clients' training metrics.

tff.learning's default `metrics_aggregator` (`sum_then_finalize`) sums the
clients' loss, accuracy and example counts without noise: exact statistics of
the round's clients. A private process that must release nothing but its
model passes `no_client_metrics` instead.
"""

import collections
from typing import Any

import tensorflow_federated as tff


def no_client_metrics(metric_finalizers: Any) -> tff.Computation:
  """A `metrics_aggregator` that releases none of the clients' metrics.

  Args:
    metric_finalizers: the model's metric finalizers (ignored).

  Returns:
    A polymorphic federated computation mapping the clients' unfinalized
    metrics to an empty structure at the server, with no aggregation.
  """
  del metric_finalizers

  @tff.federated_computation
  def aggregate(client_unfinalized_metrics):
    del client_unfinalized_metrics
    return tff.federated_value(collections.OrderedDict(), tff.SERVER)

  return aggregate
