"""runtime's 'remote' context over loopback tff_priv.worker processes."""

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import array_clients
from tests import procfs
from tests import remote_workers
from tests import tiny_models
from tff_priv import remote
from tff_priv import runtime
from tff_priv import worker
from tff_priv.aggregators import smp

pytestmark = pytest.mark.slow

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _client_data(num_clients):
  return [
      array_clients.dataset(array_clients.client_arrays(s))
      for s in range(num_clients)
  ]


def _fed_avg(aggregator=None):
  return tff.learning.algorithms.build_unweighted_fed_avg(
      tiny_models.softmax_model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=aggregator,
  )


def _two_rounds(process, data, state=None):
  if state is None:
    state = process.initialize()
  for _ in range(2):
    output = process.next(state, data)
    state = output.state
  return state, output.metrics


class RemoteContextTest(tf.test.TestCase):
  """Two loopback workers, checked against the local simulation context.

  Two workers: TFF's mergeable context splits the clients of a computation
  across them. Checked against the local 'simulation' context on the same
  inputs: a federated_mean, a secure sum, a `tff.learning` process without noise
  (the same model to float tolerance, its state in its own classes), Fed-SMP
  (whose client count and sum cannot be split: it runs on the first worker), and
  TFF's `train_model` program over `program=True`.
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workers = [remote_workers.Worker(), remote_workers.Worker()]
    cls.addresses = [w.address for w in cls.workers]

  @classmethod
  def tearDownClass(cls):
    runtime.set_context('simulation')  # The suite's context (conftest.py).
    survivors = [p for w in cls.workers for p in w.stop()]
    assert not survivors, f'worker processes left behind: {survivors}'
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    runtime.set_context('remote', workers=self.addresses, timeout=20)

  def test_the_workers_run_their_clients_at_the_same_time(self):
    # TFF's RemoteExecutor calls gRPC synchronously: on one shared event loop
    # the second worker would start when the first is done.
    @tff.tensorflow.computation(np.float64)
    def busy(seconds):
      start = tf.timestamp()
      end = tf.while_loop(
          lambda now: now - start < seconds,
          lambda now: [tf.timestamp()],
          [start],
      )
      return tf.stack([start, tf.reshape(end, [])])

    @tff.federated_computation(tff.FederatedType(np.float64, tff.CLIENTS))
    def spans(seconds):
      return tff.federated_map(busy, seconds)

    (start_a, end_a), (start_b, end_b) = spans([1.0, 1.0])
    self.assertLess(max(start_a, start_b), min(end_a, end_b))

  def test_federated_mean_and_secure_sum_over_two_workers(self):
    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def mean(values):
      return tff.federated_mean(values)

    self.assertAllClose(mean([1.0, 2.0, 3.0, 6.0]), 3.0)

    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
    def secure_sum(values):
      return tff.federated_secure_sum_bitwidth(values, 8)

    self.assertEqual(secure_sum([1, 2, 3, 4, 5]), 15)

  def test_noise_free_training_matches_the_local_run(self):
    data = _client_data(5)
    dp = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        noise_multiplier=0.0, clients_per_round=5, clip=0.5
    )
    # Split across two workers; whole on one worker.
    for aggregator, workers in (
        (None, self.addresses),
        (dp, self.addresses),
        (dp, self.addresses[:1]),
    ):
      with self.subTest(
          aggregator=type(aggregator).__name__, workers=len(workers)
      ):
        # The same initial model (Keras initializers are unseeded).
        initial = _fed_avg(aggregator).initialize()
        runtime.set_context('remote', workers=workers, timeout=20)
        state, metrics = _two_rounds(_fed_avg(aggregator), data, initial)
        # The process's own classes, not OrderedDicts.
        self.assertIsInstance(
            state, tff.learning.templates.LearningAlgorithmState
        )
        self.assertIsInstance(
            state.global_model_weights, tff.learning.models.ModelWeights
        )
        runtime.set_context('simulation')
        local_state, local_metrics = _two_rounds(
            _fed_avg(aggregator), data, initial
        )
        self.assertAllClose(
            state.global_model_weights.trainable,
            local_state.global_model_weights.trainable,
            rtol=1e-5,
            atol=1e-6,
        )
        self.assertAllClose(
            metrics['client_work'], local_metrics['client_work']
        )

  def test_fed_smp_secure_runs_whole_on_one_worker(self):
    # The client count is securely summed and broadcast before the secure sum
    # of the uploads: two aggregation stages, which TFF cannot split.
    process = _fed_avg(
        smp.SparsifiedSecureSumFactory(0.5, 1.0, 0.5, 5, mask_seed=1)
    )
    state, _ = _two_rounds(process, _client_data(5))
    self.assertIsInstance(state, tff.learning.templates.LearningAlgorithmState)
    self.assertEqual(int(state.aggregator.round_num), 2)
    self.assertAllEqual(
        [np.all(np.isfinite(w)) for w in state.global_model_weights.trainable],
        [True, True],
    )

  def test_train_model_program_over_the_workers(self):
    runtime.set_context(
        'remote', workers=self.addresses, timeout=20, program=True
    )
    release = array_clients.train_model(
        _fed_avg(), population=6, clients_per_round=4, rounds=2
    )
    self.assertLen(release.values(), 2)


class WorkerFaultsTest(tf.test.TestCase):

  def tearDown(self):
    runtime.set_context('simulation')
    super().tearDown()

  def test_unreachable_worker_is_one_line_naming_the_address(self):
    port = remote_workers.free_port()
    with self.assertRaises(ConnectionError) as raised:
      runtime.set_context('remote', workers=[f'localhost:{port}'], timeout=1)
    self.assertIsInstance(raised.exception, remote.WorkerLostError)
    self.assertIn(f'localhost:{port}', str(raised.exception))
    self.assertNotIn('\n', str(raised.exception))

  def test_a_worker_lost_mid_run_fails_within_the_timeout(self):
    workers = [remote_workers.Worker(), remote_workers.Worker()]
    try:
      runtime.set_context(
          'remote', workers=[w.address for w in workers], timeout=3
      )
      process = _fed_avg()
      state = process.initialize()
      data = _client_data(4)
      state = process.next(state, data).state
      workers[1].kill_worker_binary()
      start = time.monotonic()
      with self.assertRaises(remote.WorkerLostError) as raised:
        process.next(state, data)
      # Raised at TFF's first retry after the timeout (its back-off is at
      # most 30 s); the deadline only checks that it ends, not how fast.
      self.assertLess(time.monotonic() - start, 600, 'a lost worker hung')
      self.assertIn(workers[1].address, str(raised.exception))
      self.assertNotIn('\n', str(raised.exception))
    finally:
      survivors = [p for w in workers for p in w.stop()]
    self.assertEqual(survivors, [])

  def test_the_launcher_stops_its_worker(self):
    # SIGTERM: the launcher stops the worker and exits 0.
    worker = remote_workers.Worker()
    self.assertEqual(worker.stop(), [])
    self.assertEqual(worker.proc.returncode, 0)
    # SIGKILL of the launcher: the kernel kills the worker (parent death).
    worker = remote_workers.Worker()
    worker.proc.kill()
    worker.proc.wait()
    worker.proc.stdout.close()
    self.assertEqual(procfs.wait_gone(worker.processes, 10), [])

  def test_a_port_in_use_and_a_worker_that_ends_by_itself(self):
    with socket.socket() as other:
      other.bind(('127.0.0.1', 0))
      other.listen()
      # TFF's worker would exit 0 there, and the port would look ready.
      with self.assertRaisesRegex(RuntimeError, 'is in use'):
        worker.Launched(other.getsockname()[1])
    launched = remote_workers.Worker()
    launched.kill_worker_binary()
    self.assertEqual(launched.proc.wait(timeout=30), 128 + signal.SIGKILL)
    self.assertEqual(launched.stop(), [])

  def test_the_launcher_refuses_bad_usage_in_one_line(self):
    for args in ([], ['--port=8000', 'extra']):
      proc = subprocess.run(
          [sys.executable, '-m', 'tff_priv.worker', *args],
          capture_output=True,
          text=True,
          timeout=60,
          env=dict(os.environ, PYTHONPATH=_ROOT),
          check=False,
      )
      self.assertEqual(proc.returncode, 2, proc.stderr)
      self.assertLen(proc.stderr.strip().splitlines(), 1, proc.stderr)
      self.assertStartsWith(proc.stderr, 'tff_priv.worker: ')

  def test_bad_arguments(self):
    with self.assertRaises(ValueError):
      runtime.set_context('remote')
    with self.assertRaises(ValueError):
      runtime.set_context('remote', workers='localhost:1')
    with self.assertRaises(ValueError):
      runtime.set_context('simulation', workers=['localhost:1'])
    with self.assertRaises(ValueError):
      runtime.set_context('remote', workers=['localhost:1'], timeout=0)
    with self.assertRaises(ValueError):
      runtime.set_context('remote', workers=['localhost'])


if __name__ == '__main__':
  tf.test.main()
