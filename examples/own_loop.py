"""Each tff_priv factory in your own tff.learning loop, charged with one call.

  .venv/bin/python examples/own_loop.py           # every factory, 5 rounds each
  .venv/bin/python examples/own_loop.py smp udp   # some of them

No exact client metric is released. For each factory: a `tff.learning`
process with the factory as its model aggregator and `no_client_metrics`
(tff.learning's default metrics aggregator releases the clients' exact loss,
accuracy and example count), a loop that samples clients from a secret seed,
and `PrivacyLedger.record_round` charging each round from the event the
factory keeps in its state, under the sampling that matches its guarantee
(Poisson for add-or-remove-one events, K of N for replace-one ones; LDP's
pure-eps events have no known amplification and are charged unsampled).
BLT's stream (DP-FTRL) holds only for its participation schedule and claims
no amplification: the loop draws its clients with `StreamSampler` (here
'cyclic': a secret permutation's groups of K take turns), the factory is
calibrated to eps = 4 for that schedule (`BLTFactory.calibrated`), and each
round is charged with `record_round(state)` and no sampling argument.
Amplified BandMF (`BandMFFactory.calibrated`, eps = 4) draws with
`BandSampler`: a secret partition into the factory's b groups, round t
Poisson-sampling group (t - 1) mod b; its state's event holds that sampling,
so it too is charged with `record_round(state)`. Each line gives the eps
spent and the accuracy of the final model on held-out examples.
"""

import functools
import sys

from tff_priv import cli

cli.quiet(sys.argv)  # TF's logs off (before TF loads); --verbose keeps them.

# pylint: disable=g-import-not-at-top,g-bad-import-order
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv.accounting import PrivacyLedger
from tff_priv.aggregators import BandMFFactory
from tff_priv.aggregators import BLTFactory
from tff_priv.aggregators import DistortionFactory
from tff_priv.aggregators import LDPEncodeFactory
from tff_priv.aggregators import SparsifiedSecureSumFactory
from tff_priv.learning import build_udp_process
from tff_priv.learning import no_client_metrics
from tff_priv.learning import sparse_categorical_crossentropy
from tff_priv.learning import udp_sensitivity
from tff_priv.program import BandSampler
from tff_priv.program import StreamSampler

# pylint: enable=g-import-not-at-top,g-bad-import-order

ROUNDS, POPULATION, K, EXAMPLES = 5, 50, 5, 20
DELTA = 1e-5
BLT_EPSILON = 4.0
BANDMF_EPSILON = 4.0
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
      model_fn,
      learning_rate=eta,
      clip_norm=clip,
      sensitivity=sensitivity,
      noise_stddev=2.0 * sensitivity,
      per_example_loss=sparse_categorical_crossentropy(),
  )


def blt():
  # One stream of ROUNDS rounds for StreamSampler's 'cyclic' schedule,
  # calibrated to BLT_EPSILON.
  return fed_avg(
      BLTFactory.calibrated(
          BLT_EPSILON,
          total_rounds=ROUNDS,
          population=POPULATION,
          clients_per_round=K,
          participation='cyclic',
          delta=DELTA,
      )
  )


@functools.lru_cache(maxsize=None)
def bandmf_factory():
  # Its bands b chosen for ROUNDS, N, K and BANDMF_EPSILON
  # (`aggregators.bandmf.plan_bands`); BandSampler draws for that b.
  return BandMFFactory.calibrated(
      BANDMF_EPSILON,
      total_rounds=ROUNDS,
      population=POPULATION,
      clients_per_round=K,
      delta=DELTA,
  )


# name -> (process, sampling): 'poisson' (q = K / N), 'fixed' (K of N),
# 'stream' (StreamSampler, charged unsampled), 'bands' (BandSampler, the
# state's event holds the sampling) or None (every round charged unsampled).
MECHANISMS = {
    'smp': (
        lambda: fed_avg(
            SparsifiedSecureSumFactory(
                noise_multiplier=1.0,
                clip=1.0,
                compression=0.5,
                expected_clients_per_round=K,
            )
        ),
        'poisson',
    ),
    'dp_fedavg': (
        lambda: fed_avg(
            tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
                noise_multiplier=1.0, clients_per_round=K, clip=1.0
            )
        ),
        'poisson',
    ),
    # Adaptive clipping (Andrew et al.): the event TFF keeps in the state is
    # the value's Gaussian composed with the clipped count's. Its count noise
    # (std 1 here) must exceed z / 2; TFF's default 0.05 K is for large K.
    'dp_fedavg_adaptive': (
        lambda: fed_avg(
            tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
                noise_multiplier=1.0,
                clients_per_round=K,
                clipped_count_stddev=1.0,
            )
        ),
        'poisson',
    ),
    'udp': (udp, 'fixed'),
    'distortion': (
        lambda: fed_avg(
            DistortionFactory(
                noise_stddev=0.5, parameter_variance=1e-2, clip=0.25
            )
        ),
        'fixed',
    ),
    'ldp': (
        lambda: fed_avg(
            LDPEncodeFactory(
                epsilon=1.0, range_mode='fixed', center=0.0, radius=0.5
            )
        ),
        None,
    ),
    'blt': (blt, 'stream'),
    'bandmf': (lambda: fed_avg(bandmf_factory()), 'bands'),
}


def accuracy(process, state, test) -> float:
  """The released model's accuracy on held-out (public) examples."""
  model = tf.keras.Sequential(
      [
          tf.keras.layers.InputLayer(input_shape=(4,)),
          tf.keras.layers.Dense(3, activation='softmax'),
      ]
  )
  process.get_model_weights(state).assign_weights_to(model)
  x, y = test
  return float(np.mean(np.argmax(model.predict(x, verbose=0), -1) == y))


def run(name: str, clients, sampler, test) -> tuple[float, float]:
  """`ROUNDS` rounds of `name`: (eps at DELTA of the releases, accuracy)."""
  build, sampling = MECHANISMS[name]
  process = build()
  ledger = PrivacyLedger()
  state = process.initialize()
  # A secret permutation; rounds past the plan are refused, as by the
  # calibrated factories.
  streams = StreamSampler(POPULATION, K, 'cyclic', total_rounds=ROUNDS)
  if sampling == 'bands':
    groups = BandSampler(
        POPULATION, K, bandmf_factory().bands, total_rounds=ROUNDS
    )
  for t in range(ROUNDS):
    if sampling == 'poisson':
      chosen = np.flatnonzero(sampler.random(POPULATION) < K / POPULATION)
    elif sampling == 'stream':
      chosen = streams.sample(t + 1)
    elif sampling == 'bands':
      chosen = groups.sample(t + 1)
    else:
      chosen = sampler.choice(POPULATION, size=K, replace=False)
    output = process.next(state, [clients[i] for i in chosen])
    state = output.state
    # The round's whole output: the ledger also refuses exact client
    # statistics among its measurements (TFF's debug measurements).
    if sampling == 'poisson':
      ledger.record_round(output, sampling_probability=K / POPULATION)
    elif sampling == 'fixed':
      ledger.record_round(output, population=POPULATION, sample_size=K)
    else:
      # A stream's state is known (BLT: its zero-out relation, no
      # amplification; BandMF: its event holds its sampling), LDP's events
      # have no known amplification: no sampling arguments.
      ledger.record_round(output)
  return ledger.epsilon(DELTA), accuracy(process, state, test)


def main(names):
  runtime.set_context()
  data_rng = np.random.default_rng(0)  # The clients' data (public here).

  def examples(n):
    x = data_rng.normal(size=(n, 4)).astype(np.float32)
    return x, np.argmax(x @ _LABEL_MAP, axis=1).astype(np.int32)

  clients = [
      tf.data.Dataset.from_tensor_slices(examples(EXAMPLES)).batch(5)
      for _ in range(POPULATION)
  ]
  test = examples(600)
  sampler = np.random.default_rng()  # Secret: seeded by the OS.
  for name in names or list(MECHANISMS):
    if name not in MECHANISMS:
      sys.exit(
          f'own_loop.py: unknown mechanism {name!r}; one of '
          f'{", ".join(MECHANISMS)}'
      )
    eps, acc = run(name, clients, sampler, test)
    print(
        f'{name}: eps = {eps:.3f} at delta = {DELTA:g} after {ROUNDS} '
        f'rounds, accuracy {acc:.3f} on {len(test[1])} held-out examples'
    )


if __name__ == '__main__':
  # Ctrl-C or SIGTERM: one line (no traceback from each of TFF's threads).
  with cli.OneLineStop(
      'own_loop.py', lambda: 'nothing is kept (its ledgers are in memory)'
  ):
    main(sys.argv[1:])
