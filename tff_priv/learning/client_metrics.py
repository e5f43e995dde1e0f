"""What a private learning process releases of the clients' training metrics.

tff.learning's default `metrics_aggregator` (`sum_then_finalize`) sums the
clients' loss, accuracy and example counts without noise: exact statistics of
the round's clients. A private process that must release nothing but its
model passes `no_client_metrics` instead; one that may release noised metrics,
charged as one more Gaussian release of the round, passes a
`DpClientMetrics` (`dp_client_metrics`).
"""

import collections
import dataclasses
import math
from typing import Any, Iterable, Optional

from dp_accounting import dp_event
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.mechanisms import clipping

LOSS_KEY = 'loss'
# The released names (keys of the finalized metrics at the server).
DP_LOSS = 'dp_loss'
DP_ACCURACY = 'dp_accuracy'
DP_CLIENTS = 'dp_clients'
# A client's bounded vector: (loss / loss_bound, accuracy, 1), each in [0, 1].
_COORDINATES = ('loss', 'accuracy', 'count')


def accuracy_key(names: Iterable[str]) -> Optional[str]:
  """The accuracy metric among `names` (None: there is none).

  'sparse_categorical_accuracy', else the first name containing 'accuracy'.
  """
  names = list(names)
  if 'sparse_categorical_accuracy' in names:
    return 'sparse_categorical_accuracy'
  candidates = [k for k in names if 'accuracy' in k]
  return candidates[0] if candidates else None


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


def _mean_pair(name: str, member_type) -> None:
  """Checks that unfinalized metric `name` is a (total, count) float pair."""
  elements = dict(tff.structure.iter_elements(member_type))
  parts = []
  if isinstance(elements.get(name), tff.StructType):
    parts = [t for _, t in tff.structure.iter_elements(elements[name])]
  if len(parts) != 2 or any(
      not isinstance(t, tff.TensorType)
      or tuple(t.shape) != ()
      or not np.issubdtype(t.dtype, np.floating)
      for t in parts
  ):
    raise ValueError(
        f'dp client metrics need the unfinalized metric {name!r} as a '
        f'(total, count) pair of float scalars (a Keras Mean), got '
        f'{elements.get(name)}'
    )


@dataclasses.dataclass(frozen=True)
class DpClientMetrics:
  """A `metrics_aggregator`: the clients' mean loss and accuracy, noised.

  Each client of a round reports its example-weighted mean training loss
  (over all its local steps), clipped to [0, `loss_bound`], its mean accuracy
  in [0, 1], and the count 1, as the vector

    v_i = (min(max(loss_i, 0), loss_bound) / loss_bound, accuracy_i, 1),

  each coordinate in [0, 1] (a client without examples reports loss and
  accuracy 0). TFF's `DifferentiallyPrivateFactory.gaussian_fixed` (a
  tensorflow_privacy `GaussianSumQuery` under a `NormalizedQuery`) clips v_i
  to the L2 norm `sensitivity` = sqrt(3) (a no-op: ||v_i|| <= sqrt(3)), sums
  over the round's clients, adds N(0, (z sqrt(3))^2) to each coordinate and
  divides by the public `clients_per_round` K, never the realised count. The
  server then releases (post-processing):

    dp_loss = loss_bound x noised sum_0 / K,
    dp_accuracy = noised sum_1 / K,
    dp_clients = noised sum_2 (the noised number of clients of the round),

  with noise std loss_bound z sqrt(3) / K, z sqrt(3) / K and z sqrt(3)
  respectively, unclamped (unbiased). Adding or removing one client moves
  the summed vector by at most sqrt(3) in L2 norm, so a round's release is
  `GaussianDpEvent(z)` for one client added or removed (`dp_event`); the
  caller composes it with the round's model release under the round's
  sampling. The noise is added where the aggregation runs: the server, so
  nothing holds against the server (as for TFF's DP-FedAvg).

  The noise comes from TFF's factory, which the computation initializes and
  runs once per call (its state holds no randomness to carry over); TFF's
  noise is not seeded.

  Attributes:
    noise_multiplier: z >= 0 (0: the exact clipped means, not private).
    clients_per_round: K > 0, the expected (public) number of clients.
    loss_bound: L > 0, the clip of a client's mean loss.
    loss_key: the unfinalized loss metric, a (total, count) pair.
    accuracy_key: the unfinalized accuracy metric, a (total, count) pair;
      None: `accuracy_key` of the model's metric names.
  """

  noise_multiplier: float
  clients_per_round: float
  loss_bound: float
  loss_key: str = LOSS_KEY
  accuracy_key: Optional[str] = None

  def __post_init__(self):
    for name in ('noise_multiplier', 'clients_per_round', 'loss_bound'):
      value = float(getattr(self, name))
      if (
          not math.isfinite(value)
          or value < 0
          or (value == 0 and name != 'noise_multiplier')
      ):
        raise ValueError(
            f'{name} must be finite and '
            f'{"non-negative" if name == "noise_multiplier" else "positive"}'
            f', got {value}'
        )
      object.__setattr__(self, name, value)

  @property
  def sensitivity(self) -> float:
    """The L2 norm of one client's vector v_i at most: sqrt(3)."""
    return math.sqrt(len(_COORDINATES))

  @property
  def dp_event(self) -> dp_event.DpEvent:
    """One round's release for one client added or removed (unsampled)."""
    return dp_event.GaussianDpEvent(self.noise_multiplier)

  def stddevs(self) -> dict[str, float]:
    """The noise std of each released value."""
    sum_std = self.noise_multiplier * self.sensitivity
    k = self.clients_per_round
    return {
        DP_LOSS: self.loss_bound * sum_std / k,
        DP_ACCURACY: sum_std / k,
        DP_CLIENTS: sum_std,
    }

  def __call__(
      self, metric_finalizers: Any, local_unfinalized_metrics_type: Any = None
  ) -> tff.Computation:
    """The `metrics_aggregator` computation (see the class docstring).

    Args:
      metric_finalizers: the model's metric finalizers (only their names
        are read: the released values are computed here).
      local_unfinalized_metrics_type: unused (as `sum_then_finalize`).

    Returns:
      A polymorphic federated computation mapping the clients' unfinalized
      metrics to OrderedDict(dp_loss, dp_accuracy, dp_clients) at the server.

    Raises:
      ValueError: (when traced) the loss or accuracy metric is missing or is
        not a (total, count) pair.
    """
    del local_unfinalized_metrics_type
    names = list(metric_finalizers) if not callable(metric_finalizers) else []
    factory = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        noise_multiplier=self.noise_multiplier,
        clients_per_round=self.clients_per_round,
        clip=self.sensitivity,
    )
    loss_bound = self.loss_bound
    k = self.clients_per_round

    @tff.federated_computation
    def aggregate(client_unfinalized_metrics):
      member = client_unfinalized_metrics.type_signature.member
      present = names or [n for n, _ in tff.structure.iter_elements(member)]
      acc_key = self.accuracy_key or accuracy_key(present)
      if acc_key is None:
        raise ValueError(
            f'dp client metrics need an accuracy metric, got {present}'
        )
      for key in (self.loss_key, acc_key):
        _mean_pair(key, member)

      @tff.tensorflow.computation(member)
      def bounded(metrics):
        loss_total, loss_count = metrics[self.loss_key]
        acc_total, acc_count = metrics[acc_key]
        loss = tf.math.divide_no_nan(loss_total, loss_count)
        accuracy = tf.math.divide_no_nan(acc_total, acc_count)
        # A client whose metrics are not finite contributes zeros (count
        # included), tff_priv's policy (`clipping.clip_l2`).
        return clipping.clip_l2(
            collections.OrderedDict(
                loss=tf.clip_by_value(loss, 0.0, loss_bound) / loss_bound,
                accuracy=tf.clip_by_value(accuracy, 0.0, 1.0),
                count=tf.ones_like(loss),
            ),
            None,
        )

      values = tff.federated_map(bounded, client_unfinalized_metrics)
      process = factory.create(bounded.type_signature.result)
      output = process.next(process.initialize(), values)

      @tff.tensorflow.computation(output.result.type_signature.member)
      def finalize(mean):
        return collections.OrderedDict(
            [
                (DP_LOSS, mean['loss'] * loss_bound),
                (DP_ACCURACY, mean['accuracy']),
                (DP_CLIENTS, mean['count'] * k),
            ]
        )

      return tff.federated_map(finalize, output.result)

    return aggregate


def dp_client_metrics(
    noise_multiplier: float,
    clients_per_round: float,
    loss_bound: float,
    **kwargs,
) -> DpClientMetrics:
  """A `DpClientMetrics` (a `metrics_aggregator`; see its docstring).

  Args:
    noise_multiplier: z >= 0: the noise std of the summed vectors / sqrt(3).
    clients_per_round: K, the expected clients of a round (public).
    loss_bound: L: a client's mean loss is clipped to [0, L].
    **kwargs: `loss_key`, `accuracy_key`.
  """
  return DpClientMetrics(
      noise_multiplier, clients_per_round, loss_bound, **kwargs
  )
