"""Your own tff.learning loop on TFF workers: two started here, on loopback.

  .venv/bin/python examples/remote_workers.py

Starts two workers on this machine (`python -m tff_priv.worker --port=P`;
on other hosts you start them there and list 'host:port'), runs 3 rounds of
Fed-SMP with the clients of each round split over the workers
(`runtime.set_context('remote', workers=...)`), charges the ledger, and
stops the workers. The workers listen on every interface of their host: keep
them on a private network or behind a firewall (docs/remote.md).
"""

import sys

from tff_priv import cli

cli.quiet(sys.argv)  # TF's logs off (before TF loads); --verbose keeps them.

# pylint: disable=g-import-not-at-top,g-bad-import-order
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv import worker
from tff_priv.accounting import PrivacyLedger
from tff_priv.aggregators import SparsifiedSecureSumFactory
from tff_priv.learning import no_client_metrics

# pylint: enable=g-import-not-at-top,g-bad-import-order

ROUNDS, POPULATION, Q = 3, 20, 0.25


def model_fn():
  keras_model = tf.keras.Sequential(
      [
          tf.keras.layers.InputLayer(input_shape=(4,)),
          tf.keras.layers.Dense(3, activation='softmax'),
      ]
  )
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(),
      input_spec=(
          tf.TensorSpec([None, 4], tf.float32),
          tf.TensorSpec([None], tf.int32),
      ),
  )


def main() -> None:
  workers = [worker.Launched(), worker.Launched()]
  try:
    runtime.set_context(
        'remote', workers=[w.address for w in workers], timeout=30
    )
    rng = np.random.default_rng(0)  # The clients' data (public here).
    clients = [
        tf.data.Dataset.from_tensor_slices(
            (
                rng.normal(size=(20, 4)).astype(np.float32),
                rng.integers(0, 3, size=20).astype(np.int32),
            )
        ).batch(5)
        for _ in range(POPULATION)
    ]
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=SparsifiedSecureSumFactory(
            noise_multiplier=1.0,
            clip=1.0,
            compression=0.5,
            expected_clients_per_round=POPULATION * Q,
            secure=False,
        ),
        metrics_aggregator=no_client_metrics,
    )
    sampler = np.random.default_rng()  # Secret: seeded by the OS.
    ledger = PrivacyLedger()
    state = process.initialize()
    for _ in range(ROUNDS):
      chosen = np.flatnonzero(sampler.random(POPULATION) < Q)
      state = process.next(state, [clients[i] for i in chosen]).state
      ledger.record_round(state.aggregator, sampling_probability=Q)
    print(
        f'eps = {ledger.epsilon(1e-5):.3f} at delta = 1e-5 after '
        f'{ledger.num_releases} rounds on {len(workers)} workers'
    )
  finally:
    for w in workers:
      w.stop()


if __name__ == '__main__':
  # Ctrl-C or SIGTERM: one line; the workers started here end with it.
  with cli.OneLineStop(
      'remote_workers.py', lambda: 'the workers it started stop with it'
  ):
    main()
