"""A model's metrics on the server's data, as `build_fed_eval` gives them."""

from typing import Any, Callable

import tensorflow as tf
import tensorflow_federated as tff


class CentralEvaluation:
  """The finalized metrics of a `VariableModel` on one dataset, in plain TF.

  `tff.learning.algorithms.build_fed_eval(model_fn)` run on the single client
  `[dataset]` computes the same numbers (it sums one client's unfinalized
  metrics, then finalizes them), up to float32 round-off where its sums run
  in another order, but building it traces a
  federated computation: 3-5 s at every start of a run, more than a test
  run's rounds. Data the server holds needs no federated computation, so this
  runs the model's own `forward_pass`, `report_local_unfinalized_metrics`
  and `metric_finalizers` in this process: the model is built and traced
  once, at the first call.

  Args:
    model_fn: the task's no-argument `tff.learning.models.VariableModel`
      function.
  """

  def __init__(self, model_fn: Callable[[], Any]):
    self._model_fn = model_fn
    self._model = None
    self._forward = None

  def _build(self):
    self._model = self._model_fn()
    model = self._model

    @tf.function
    def forward(dataset):
      for batch in dataset:
        model.forward_pass(batch, training=False)

    self._forward = forward

  def __call__(
      self, model_weights: tff.learning.models.ModelWeights, dataset
  ) -> dict[str, float]:
    """The metrics of `model_weights` on `dataset` (a batched tf.data)."""
    if self._model is None:
      self._build()
    model = self._model
    model_weights.assign_weights_to(model)
    model.reset_metrics()
    self._forward(dataset)
    unfinalized = model.report_local_unfinalized_metrics()
    finalizers = model.metric_finalizers()
    # TFF's Keras finalizers are tf.functions that make a Keras metric: called
    # eagerly as written (`python_function`), not traced twice.
    return {
        name: float(
            getattr(finalizer, 'python_function', finalizer)(unfinalized[name])
        )
        for name, finalizer in finalizers.items()
    }
