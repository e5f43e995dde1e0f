"""CentralEvaluation against TFF's federated evaluation of the same data."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.learning import evaluation
import tff_priv_tasks as tasks


def _weights(model, seed):
  """The initial weights plus N(0, 0.05^2) noise: a trained-like model."""
  rng = np.random.default_rng(seed)
  return tf.nest.map_structure(
      lambda v: v.numpy()
      + 0.05 * rng.standard_normal(v.shape).astype(v.dtype.as_numpy_dtype),
      tff.learning.models.ModelWeights.from_model(model),
  )


class CentralEvaluationTest(tf.test.TestCase):

  def _check(self, name, rtol):
    task = tasks.get_task(
        name,
        train_client_spec=tff.simulation.baselines.ClientSpec(
            num_epochs=1, batch_size=20
        ),
        seed=0,
    )
    test_data = task.datasets.get_centralized_test_data()
    federated = tff.learning.algorithms.build_fed_eval(task.model_fn)
    central = evaluation.CentralEvaluation(task.model_fn)
    model = task.model_fn()
    # Two models, then the first again: nothing of a call leaks into the next.
    for seed in (0, 1, 0):
      weights = _weights(model, seed)
      state = federated.set_model_weights(federated.initialize(), weights)
      expected = federated.next(state, [test_data]).metrics['client_work'][
          'eval'
      ]['current_round_metrics']
      got = central(weights, test_data)
      self.assertEqual(set(got), set(expected))
      self.assertTrue(all(type(v) is float for v in got.values()))  # pylint: disable=unidiomatic-typecheck
      for key, value in expected.items():
        self.assertAllClose(got[key], float(value), rtol=rtol, atol=0)

  # Up to round-off, not to the bit: TF may split a reduction differently
  # from one run to the next (a loaded machine once gave a digits loss of
  # 2.433434009552002 against TFF's 2.433434247970581, 1e-7 apart).
  @pytest.mark.slow  # Builds TFF's evaluation: 5 s, the default lane's most.
  def test_digits_up_to_round_off(self):
    self._check('digits', rtol=1e-6)

  @pytest.mark.slow
  def test_mnist5k_up_to_round_off(self):
    self._check('mnist5k', rtol=1e-6)


if __name__ == '__main__':
  tf.test.main()
