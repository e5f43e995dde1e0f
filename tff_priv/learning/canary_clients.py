"""Canary clients in a TFF learning process: a client whose update is given.

The one-shot privacy estimate of Andrew, Kairouz, Oh, Oprea, McMahan,
Suriyakumar ("One-shot Empirical Privacy Estimation for Federated Learning",
ICLR 2024) inserts canary clients whose update is a fixed direction instead of
the result of training. `wrap_client_work` makes any
`tff.learning.templates.ClientWorkProcess` able to host them (a real client's
data from `real_client_data`, a canary's from `canary_client_data`), and
`build_fed_avg` composes FedAvg with such a client work.
"""

import collections
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

DATASET = 'dataset'
CANARY = 'canary'


def _marker_spec(dimension: int):
  return (
      tf.TensorSpec([dimension], tf.float32),
      tf.TensorSpec([], tf.float32),
  )


def real_client_data(
    dataset: tf.data.Dataset, dimension: int
) -> collections.OrderedDict:
  """A real client's data for a wrapped client work: no canary element."""
  empty = tf.data.Dataset.from_tensors(
      (tf.zeros([dimension], tf.float32), tf.constant(0.0, tf.float32))
  ).take(0)
  return collections.OrderedDict([(DATASET, dataset), (CANARY, empty)])


def canary_client_data(
    empty_dataset: tf.data.Dataset, update: np.ndarray, weight: float
) -> collections.OrderedDict:
  """A canary client's data: no examples, and the update it uploads.

  Args:
    empty_dataset: a dataset of the real clients' element type (its elements
      are not read: `take(0)` is applied).
    update: the flat float32 update, in TFF's sign convention (the client
      work returns initial - trained weights).
    weight: the client's update weight (used by weighted aggregation only).
  """
  marker = tf.data.Dataset.from_tensors(
      (
          tf.constant(np.asarray(update, np.float32).ravel()),
          tf.constant(weight, tf.float32),
      )
  )
  return collections.OrderedDict(
      [(DATASET, empty_dataset.take(0)), (CANARY, marker)]
  )


def wrap_client_work(
    client_work: tff.learning.templates.ClientWorkProcess,
) -> tff.learning.templates.ClientWorkProcess:
  """`client_work` with canary clients.

  Compared with `client_work`:

  * its client data becomes a structure of two sequences,
    `<dataset=D*, canary=<update=float32[d], weight=float32>*>`;
  * every client runs the wrapped client work on `dataset` as before; then one
    TF computation per client (a `tff.federated_map`) returns, for a client
    whose `canary` sequence has an element, that element's update (unflattened
    into the model's trainable structure) and weight, and for any other client
    the trained result unchanged (`tf.cond` on the sequence being non-empty).

  A real client gets `real_client_data(dataset, d)` (an empty canary
  sequence): its result is exactly that of the wrapped client work. A canary
  client gets `canary_client_data(empty_dataset, update, weight)`: it trains on
  no data (its training metrics are those of zero examples, so the released
  training metrics are the real clients'), and uploads `update`.

  Why a wrapper of the client work rather than of the aggregator or the whole
  process: the aggregator sees only the update values, so it cannot tell a
  canary client from a real one without a marker travelling with the value
  (another value type for every factory); the whole process's `next` never
  exposes a client's update. The client work is the one place where a client's
  identity (its data) and its update meet, and TFF's composers
  (`tff.learning.templates.compose_learning_process`) take any client work
  whose data is a structure of sequences. The paper's own code does the same
  (a client work that branches on the client's id). The marker is a sequence
  rather than a client id so that the client computation needs no secret: the
  program computes each canary's update (from its secret seed) and hands it
  to that client only.

  Args:
    client_work: a `tff.learning.templates.ClientWorkProcess` whose data is a
      sequence and whose result is a `ClientResult` of float32 tensors.

  Returns:
    A `ClientWorkProcess` with the same state, hyperparameters and
    measurements, whose client data is `<dataset=D*, canary=M*>`.
  """
  next_type = client_work.next.type_signature
  state_type, weights_type, data_type = next_type.parameter
  result_type = next_type.result.result.member
  update_type = result_type.update
  shapes = [t.shape for t in tff.structure.flatten(update_type)]
  sizes = [int(np.prod(s)) for s in shapes]
  dimension = sum(sizes)
  marker_type = tff.SequenceType(
      tff.types.tensorflow_to_type(_marker_spec(dimension))
  )

  @tff.tensorflow.computation(result_type, marker_type)
  def swap(result, marker):
    update, weight, count = marker.reduce(
        (tf.zeros([dimension]), tf.constant(0.0), tf.constant(0, tf.int32)),
        lambda acc, x: (acc[0] + x[0], acc[1] + x[1], acc[2] + 1),
    )

    def canary():
      parts = tf.split(update, sizes)
      flat = [tf.reshape(p, s) for p, s in zip(parts, shapes)]
      return (
          tf.nest.pack_sequence_as(result.update, flat),
          weight,
      )

    new_update, new_weight = tf.cond(
        count > 0, canary, lambda: (result.update, result.update_weight)
    )
    return tff.learning.templates.ClientResult(new_update, new_weight)

  client_data_type = tff.FederatedType(
      collections.OrderedDict(
          [(DATASET, data_type.member), (CANARY, marker_type)]
      ),
      tff.CLIENTS,
  )

  @tff.federated_computation(state_type, weights_type, client_data_type)
  def next_fn(state, weights, client_data):
    output = client_work.next(state, weights, client_data[DATASET])
    result = tff.federated_map(swap, (output.result, client_data[CANARY]))
    return tff.templates.MeasuredProcessOutput(
        output.state, result, output.measurements
    )

  return tff.learning.templates.ClientWorkProcess(
      client_work.initialize,
      next_fn,
      get_hparams_fn=client_work.get_hparams,
      set_hparams_fn=client_work.set_hparams,
  )


def build_fed_avg(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    model_aggregator: tff.aggregators.WeightedAggregationFactory,
    client_weighting: tff.learning.ClientWeighting,
    metrics_aggregator=None,
) -> tff.learning.templates.LearningProcess:
  """FedAvg with canary clients: TFF's components, the client work wrapped.

  The composition of `tff.learning.algorithms.build_weighted_fed_avg` (for
  `build_unweighted_fed_avg`: `client_weighting=UNIFORM` and the unweighted
  factory through `tff.aggregators.as_weighted_aggregator`), with
  `wrap_client_work` around the model-delta client work: TFF's components
  (broadcast, model-delta client work, the aggregator, the server optimizer)
  composed here, since TFF's builders take no client work of their own.

  Args:
    model_fn: no-arg function returning a fresh
      `tff.learning.models.VariableModel`.
    client_optimizer_fn: the clients' `tff.learning.optimizers.Optimizer`.
    server_optimizer_fn: the server's `tff.learning.optimizers.Optimizer`.
    model_aggregator: a weighted aggregation factory.
    client_weighting: `tff.learning.ClientWeighting` of the real clients.
    metrics_aggregator: as in `build_weighted_fed_avg` (None: TFF's
      `sum_then_finalize`).

  Returns:
    A `tff.learning.templates.LearningProcess` whose client data is the
    wrapped client work's.
  """

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  weights_type = initial_model_weights_fn.type_signature.result
  client_work = wrap_client_work(
      tff.learning.templates.build_model_delta_client_work(
          model_fn,
          client_optimizer_fn,
          client_weighting=client_weighting,
          metrics_aggregator=metrics_aggregator,
      )
  )
  aggregator = model_aggregator.create(
      weights_type.trainable, tff.TensorType(np.float32)
  )
  return tff.learning.templates.compose_learning_process(
      initial_model_weights_fn,
      tff.learning.templates.build_broadcast_process(weights_type),
      client_work,
      aggregator,
      tff.learning.templates.build_apply_optimizer_finalizer(
          server_optimizer_fn, weights_type
      ),
  )
