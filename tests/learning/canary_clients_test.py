"""Tests of tff_priv.learning.canary_clients in a TFF learning process."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.learning import canary_clients
import tff_priv_tasks as tasks

_K = 2.0
_CLIP = 1.0


def _flat(process, state):
  return np.concatenate(
      [np.ravel(w) for w in process.get_model_weights(state).trainable]
  )


class CanaryClientsTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_real_clients_unchanged_and_a_canary_uploads_its_update(self):
    # No shuffling: the two processes below must see the same batches. An
    # unseeded shuffle draws its order from TF's global seed and the count of
    # random ops made before it, so it changed with the tests run before.
    spec = tff.simulation.baselines.ClientSpec(
        num_epochs=1, batch_size=20, shuffle_buffer_size=1
    )
    task = tasks.get_task('digits', train_client_spec=spec, seed=0)
    factory = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        0.0, _K, _CLIP
    )
    sgd = tff.learning.optimizers.build_sgdm
    wrapped = canary_clients.build_fed_avg(
        task.model_fn,
        client_optimizer_fn=sgd(0.1),
        server_optimizer_fn=sgd(1.0),
        model_aggregator=tff.aggregators.as_weighted_aggregator(factory),
        client_weighting=tff.learning.ClientWeighting.UNIFORM,
    )
    plain = tff.learning.algorithms.build_unweighted_fed_avg(
        task.model_fn,
        client_optimizer_fn=sgd(0.1),
        server_optimizer_fn=sgd(1.0),
        model_aggregator=factory,
    )
    data = task.datasets.train_data
    datasets = [
        task.datasets.train_preprocess_fn(data.create_tf_dataset_for_client(c))
        for c in data.client_ids[:2]
    ]
    state = plain.initialize()
    before = _flat(plain, state)
    d = before.size
    self.assertEqual(wrapped.get_hparams(state), plain.get_hparams(state))

    # Real clients: exactly TFF's own FedAvg round (noise 0).
    expected = _flat(plain, plain.next(state, datasets).state)
    got = _flat(
        wrapped,
        wrapped.next(
            state,
            [canary_clients.real_client_data(x, d) for x in datasets],
        ).state,
    )
    np.testing.assert_allclose(got, expected, atol=1e-6)

    # With a canary: the model moves by (its update) / K on top, clipped at C.
    c = np.random.default_rng(0).standard_normal(d)
    c /= np.linalg.norm(c)
    with_canary = _flat(
        wrapped,
        wrapped.next(
            state,
            [canary_clients.real_client_data(x, d) for x in datasets]
            + [canary_clients.canary_client_data(datasets[0], -c, 1.0)],
        ).state,
    )
    np.testing.assert_allclose(with_canary - got, c / _K, atol=1e-6)
    # Scaled past the clip, it is clipped to C like any client.
    only_canary = _flat(
        wrapped,
        wrapped.next(
            state, [canary_clients.canary_client_data(datasets[0], -5 * c, 1.0)]
        ).state,
    )
    np.testing.assert_allclose(only_canary - before, _CLIP * c / _K, atol=1e-6)


if __name__ == '__main__':
  tf.test.main()
