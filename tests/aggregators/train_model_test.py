"""tff_priv factories in TFF's own training program, `train_model`."""

from dp_accounting import dp_event
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import array_clients
from tests import tiny_models
from tff_priv import runtime
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.aggregators import smp


class TrainModelTest(tf.test.TestCase):
  """In `tff.learning.programs.train_model`, the ledger charged each round.

  A user composes a tff_priv factory into a `tff.learning` process, runs it with
  TFF's program logic in the `tff.program.NativeFederatedContext` that
  `tff_priv.runtime.set_context(program=True)` installs, and charges the ledger
  from the aggregator state of each round with one call.
  """

  def tearDown(self):
    runtime.set_context('simulation')  # The suite's context (conftest.py).
    super().tearDown()

  @pytest.mark.slow
  def test_three_rounds_of_train_model_charge_the_ledger(self):
    runtime.set_context('simulation', program=True)
    sigma, clients_per_round, population = 0.8, 2, 6
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        tiny_models.softmax_model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=smp.SparsifiedSecureSumFactory(
            sigma, 1.0, 0.5, clients_per_round, mask_seed=1
        ),
    )
    ledger = ledger_lib.PrivacyLedger()

    def charge(output):
      # The one line a user's loop needs: the factory's event, the sampling.
      ledger.record_round(
          output.state.aggregator,
          population=population,
          sample_size=clients_per_round,
      )
      return False  # Keep every round.

    release = array_clients.train_model(
        process,
        population=population,
        clients_per_round=clients_per_round,
        rounds=3,
        should_discard_round=charge,
    )
    self.assertLen(release.values(), 3)
    self.assertEqual(ledger.num_releases, 3)
    # Fixed-size sampling is accounted under replace-one: the sum of clipped
    # updates moves by 2C, so the factory's Gaussian(sigma) reads as
    # Gaussian(sigma / 2).
    by_hand = ledger_lib.PrivacyLedger()
    by_hand.record(
        dp_event.SelfComposedDpEvent(
            dp_event.SampledWithoutReplacementDpEvent(
                population,
                clients_per_round,
                dp_event.GaussianDpEvent(sigma / 2),
            ),
            3,
        )
    )
    self.assertAllClose(ledger.epsilon(1e-5), by_hand.epsilon(1e-5), rtol=1e-6)

  def test_secure_factory_in_the_native_context_fails_in_one_line(self):
    runtime.set_context('native')
    factory = smp.SparsifiedSecureSumFactory(1.0, 1.0, 0.5, 2, secure=True)
    with self.assertRaisesRegex(RuntimeError, "set_context\\('simulation'\\)"):
      factory.create(tff.TensorType(np.float32, [4]))
    # Without secure aggregation it runs there.
    plain = smp.SparsifiedSecureSumFactory(1.0, 1.0, 0.5, 2, secure=False)
    process = plain.create(tff.TensorType(np.float32, [4]))
    output = process.next(process.initialize(), [np.ones(4, np.float32)] * 2)
    self.assertEqual(output.result.shape, (4,))


if __name__ == '__main__':
  tf.test.main()
