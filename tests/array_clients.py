"""Test helpers: clients as numpy arrays, a `tff.program` data source over them, TFF's `train_model` on it."""

import asyncio
import pickle
import tempfile

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


def client_arrays(seed):
  """One client's (features [6, 4], labels [6] in 0..2), drawn from `seed`."""
  rng = np.random.default_rng(seed)
  return (
      rng.normal(size=[6, 4]).astype(np.float32),
      rng.integers(0, 3, size=[6]).astype(np.int32),
  )


def dataset(arrays):
  """The client's `tf.data.Dataset` in batches of 3."""
  return tf.data.Dataset.from_tensor_slices(arrays).batch(3)


class ArraysIterator(tff.program.FederatedDataSourceIterator):
  """Clients' data as numpy arrays, K drawn uniformly per round.

  `train_model` deep-copies the iterator into its program state, which
  `tff.program.DatasetDataSource` cannot survive in TFF 0.87 (a
  `tf.data.Dataset` holds a graph that cannot be copied); numpy arrays can.
  """

  def __init__(self, clients, seed=0):
    self._clients = clients
    self._rng = np.random.default_rng(seed)

  @property
  def federated_type(self):
    return tff.FederatedType(
        tff.SequenceType(dataset(self._clients[0]).element_spec), tff.CLIENTS
    )

  def select(self, k):
    chosen = self._rng.choice(len(self._clients), size=k, replace=False)
    return [dataset(self._clients[i]) for i in chosen]

  def to_bytes(self):
    return pickle.dumps((self._clients, self._rng.bit_generator.state))

  @classmethod
  def from_bytes(cls, buffer):
    clients, rng_state = pickle.loads(buffer)
    iterator = cls(clients)
    iterator._rng.bit_generator.state = rng_state
    return iterator

  def __eq__(self, other):
    return self is other


class ArraysSource(tff.program.FederatedDataSource):
  """A `tff.program.FederatedDataSource` over `ArraysIterator`."""

  def __init__(self, clients):
    self._clients = clients

  @property
  def federated_type(self):
    return self.iterator().federated_type

  def iterator(self):
    return ArraysIterator(self._clients)


def train_model(process, *, population, clients_per_round, rounds,
                should_discard_round=lambda output: False):
  """`tff.learning.programs.train_model` over `population` array clients.

  Runs in the installed context (a `tff.program.NativeFederatedContext`),
  without evaluation; returns the release manager of the training metrics.
  """
  release = tff.program.MemoryReleaseManager()
  asyncio.run(
      tff.learning.programs.train_model(
          train_process=process,
          train_data_source=ArraysSource(
              [client_arrays(s) for s in range(population)]
          ),
          train_per_round_clients=clients_per_round,
          train_total_rounds=rounds,
          should_discard_round=should_discard_round,
          program_state_manager=tff.program.FileProgramStateManager(
              tempfile.mkdtemp()
          ),
          model_output_manager=tff.program.MemoryReleaseManager(),
          train_metrics_manager=release,
          evaluation_manager=None,
          evaluation_periodicity=1,
      )
  )
  return release
