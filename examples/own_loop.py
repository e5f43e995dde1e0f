"""Each tff_priv factory in your own tff.learning loop: charged with one call, no exact client metric.

  .venv/bin/python examples/own_loop.py                 # every factory, 5 rounds each
  .venv/bin/python examples/own_loop.py smp udp         # some of them

For each factory: a `tff.learning` process with the factory as its model
aggregator and `no_client_metrics` (tff.learning's default metrics aggregator
releases the clients' exact loss, accuracy and example count), a loop that
samples clients from a secret seed, and `PrivacyLedger.record_round` charging
each round from the event the factory keeps in its state, under the
sampling that matches its guarantee (Poisson for add-or-remove-one events,
K of N for replace-one ones; LDP's pure-eps events have no known
amplification and are charged unsampled). BLT's stream (DP-FTRL) holds for
clients that take part at most once per stream: the loop draws a secret
permutation and takes the next K clients each round (no client twice in the
5-round stream), and charges the stream unsampled under its zero-out
relation (`factory.guarantee.neighboring_relation`).
"""

import sys

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv.accounting import PrivacyLedger
from tff_priv.aggregators import BLTFactory
from tff_priv.aggregators import DistortionFactory
from tff_priv.aggregators import LDPEncodeFactory
from tff_priv.aggregators import SparsifiedSecureSumFactory
from tff_priv.learning import build_udp_process
from tff_priv.learning import no_client_metrics
from tff_priv.learning import sparse_categorical_crossentropy
from tff_priv.learning import udp_sensitivity
from tff_priv.mechanisms import blt as blt_lib

ROUNDS, POPULATION, K, EXAMPLES = 5, 50, 5, 20
DELTA = 1e-5


def model_fn():
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(4,)),
      tf.keras.layers.Dense(3, activation='softmax'),
  ])
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(),
      input_spec=(tf.TensorSpec([None, 4], tf.float32),
                  tf.TensorSpec([None], tf.int32)),
  )


def fed_avg(model_aggregator):
  """Unweighted FedAvg with `model_aggregator`, releasing no client metric."""
  return tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=model_aggregator,
      metrics_aggregator=no_client_metrics,
  )


def udp():
  eta, clip = 0.5, 1.0
  sensitivity = udp_sensitivity(eta, clip, EXAMPLES)
  return build_udp_process(
      model_fn, learning_rate=eta, clip_norm=clip, sensitivity=sensitivity,
      noise_stddev=2.0 * sensitivity,
      per_example_loss=sparse_categorical_crossentropy(),
  )


def blt():
  # The BLT for one stream of ROUNDS rounds, single participation.
  strategy = blt_lib.optimize(ROUNDS)
  return fed_avg(BLTFactory(
      noise_multiplier=2.0, clients_per_round=K, clip=1.0,
      buf_decay=list(strategy.buf_decay),
      output_scale=list(strategy.output_scale), rounds_per_stream=ROUNDS))


# name -> (process, sampling): 'poisson' (q = K / N), 'fixed' (K of N),
# 'once' (each client at most once in the run, charged unsampled) or None
# (every round charged unsampled).
MECHANISMS = {
    'smp': (lambda: fed_avg(SparsifiedSecureSumFactory(
        noise_multiplier=1.0, clip=1.0, compression=0.5,
        expected_clients_per_round=K)), 'poisson'),
    'dp_fedavg': (lambda: fed_avg(
        tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
            noise_multiplier=1.0, clients_per_round=K, clip=1.0)),
                  'poisson'),
    'udp': (udp, 'fixed'),
    'distortion': (lambda: fed_avg(DistortionFactory(
        noise_stddev=0.5, parameter_variance=1e-2, clip=0.25)), 'fixed'),
    'ldp': (lambda: fed_avg(LDPEncodeFactory(
        epsilon=1.0, range_mode='fixed', center=0.0, radius=0.5)), None),
    'blt': (blt, 'once'),
}


def run(name: str, clients, sampler) -> float:
  """`ROUNDS` rounds of mechanism `name`; eps at DELTA of what was released."""
  build, sampling = MECHANISMS[name]
  process = build()
  ledger = PrivacyLedger()
  state = process.initialize()
  order = sampler.permutation(POPULATION)  # For 'once': K new clients a round.
  for t in range(ROUNDS):
    if sampling == 'poisson':
      chosen = np.flatnonzero(sampler.random(POPULATION) < K / POPULATION)
    elif sampling == 'once':
      chosen = order[t * K:(t + 1) * K]
    else:
      chosen = sampler.choice(POPULATION, size=K, replace=False)
    output = process.next(state, [clients[i] for i in chosen])
    state = output.state
    if sampling == 'poisson':
      ledger.record_round(state.aggregator,
                          sampling_probability=K / POPULATION)
    elif sampling == 'fixed':
      ledger.record_round(state.aggregator, population=POPULATION,
                          sample_size=K)
    elif sampling == 'once':
      # BLT's stream event holds under its zero-out relation (its factory's
      # `guarantee.neighboring_relation`), which its state does not name.
      ledger.record_round(state.aggregator,
                          neighboring_relation='replace_special')
    else:
      ledger.record_round(state.aggregator)
  return ledger.epsilon(DELTA)


def main(names):
  runtime.set_context()
  data_rng = np.random.default_rng(0)  # The clients' data (public here).
  clients = [
      tf.data.Dataset.from_tensor_slices((
          data_rng.normal(size=(EXAMPLES, 4)).astype(np.float32),
          data_rng.integers(0, 3, size=EXAMPLES).astype(np.int32),
      )).batch(5)
      for _ in range(POPULATION)
  ]
  sampler = np.random.default_rng()  # Secret: seeded by the OS.
  for name in names or list(MECHANISMS):
    if name not in MECHANISMS:
      sys.exit(f'own_loop.py: unknown mechanism {name!r}; one of '
               f'{", ".join(MECHANISMS)}')
    print(f'{name}: eps = {run(name, clients, sampler):.3f} at delta = '
          f'{DELTA:g} after {ROUNDS} rounds')


if __name__ == '__main__':
  main(sys.argv[1:])
