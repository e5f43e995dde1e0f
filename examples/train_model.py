"""A tff_priv factory in TFF's `train_model`, with write-ahead accounting.

  .venv/bin/python examples/train_model.py [ROOT_DIR]

Interrupt it and run it again (ROOT_DIR's default:
output/example_train_model). Fed-SMP at eps = 8 (delta = 1e-5) over 20
rounds of 10 of 100 clients. `TrainModelAccounting` is `train_model`'s
`should_discard_round`: it charges each round and writes the ledger to
ROOT_DIR before anything of the round is released, and reads it back when
the same command runs again (after an interruption too), so the ledger never
counts fewer rounds than were released (and at most one more per
interruption). Ctrl-C stops it in one line. The process releases no client
metric; the model output is the model alone (the learning state also holds
the aggregator's state), and the training metrics pass the release filter of
a private run.
"""

import sys

from tff_priv import cli

cli.quiet(sys.argv)  # TF's logs off (before TF loads); --verbose keeps them.

# pylint: disable=g-import-not-at-top,g-bad-import-order
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv.accounting import calibrate_noise_multiplier
from tff_priv.aggregators import SparsifiedSecureSumFactory
from tff_priv.learning import no_client_metrics
from tff_priv.program import ClientArraysSource
from tff_priv.program import TrainModelAccounting

# pylint: enable=g-import-not-at-top,g-bad-import-order

ROUNDS, POPULATION, K = 20, 100, 10
# The task: 3 classes, the label the argmax of a fixed linear map of 4
# features (learnable, so that accuracy moves).
_LABEL_MAP = np.random.default_rng(1).normal(size=(4, 3))


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


def examples(rng, n):
  x = rng.normal(size=(n, 4)).astype(np.float32)
  return x, np.argmax(x @ _LABEL_MAP, axis=1).astype(np.int32)


def accuracy(weights, test) -> float:
  """The released model's accuracy on held-out (public) examples."""
  model = tf.keras.Sequential(
      [
          tf.keras.layers.InputLayer(input_shape=(4,)),
          tf.keras.layers.Dense(3, activation='softmax'),
      ]
  )
  weights.assign_weights_to(model)
  x, y = test
  return float(np.mean(np.argmax(model.predict(x, verbose=0), -1) == y))


def main(root_dir: str) -> None:
  rng = np.random.default_rng(0)  # The clients' data (public here).
  clients = [examples(rng, 20) for _ in range(POPULATION)]
  test = examples(rng, 600)
  # train_model draws exactly K of N clients a round: fixed-size sampling,
  # accounted under replace-one, where Fed-SMP's sum moves by 2C, so the
  # factory's noise multiplier is twice the calibrated one.
  z = 2 * calibrate_noise_multiplier(
      8.0, 1e-5, ROUNDS, population=POPULATION, sample_size=K
  )
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=SparsifiedSecureSumFactory(
          noise_multiplier=z,
          clip=1.0,
          compression=0.1,
          expected_clients_per_round=K,
      ),
      metrics_aggregator=no_client_metrics,
  )
  runtime.set_context(program=True)  # A tff.program.NativeFederatedContext.
  accounting = TrainModelAccounting(
      root_dir, population=POPULATION, clients_per_round=K
  )
  models = tff.program.MemoryReleaseManager()
  # run: asyncio.run with the program's arguments checked against the
  # accounting (K, N), one line on Ctrl-C / SIGTERM, and planned vs spent.
  accounting.run(
      tff.learning.programs.train_model(
          train_process=process,
          train_data_source=ClientArraysSource(clients, batch_size=5),
          train_per_round_clients=K,
          train_total_rounds=ROUNDS,
          should_discard_round=accounting.should_discard_round,
          program_state_manager=accounting.program_state_manager(),
          model_output_manager=accounting.model_weights_only(models),
          train_metrics_manager=accounting.public_metrics(
              tff.program.LoggingReleaseManager()
          ),
          evaluation_manager=None,  # It would release exact client metrics.
          evaluation_periodicity=1,
      ),
      name='train_model.py',
  )
  released = models.values()
  line = (
      f'eps = {accounting.epsilon(1e-5):.3f} at delta = 1e-5 after '
      f'{accounting.rounds} charged rounds ({root_dir})'
  )
  if released:  # The model train_model released last (none when resumed
    # after the end: nothing ran).
    last = released[max(released, key=lambda k: int(k.rsplit('_', 1)[1]))]
    line += f'; accuracy {accuracy(last, test):.3f} on 600 held-out examples'
  print(line)


if __name__ == '__main__':
  main(sys.argv[1] if len(sys.argv) > 1 else 'output/example_train_model')
