"""A `tff.program.FederatedDataSource` over clients held as numpy arrays."""

import pickle
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation


def _client_dataset(arrays, batch_size: int) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensor_slices(arrays).batch(batch_size)


class ClientArraysIterator(tff.program.FederatedDataSourceIterator):
  """Draws K of the clients uniformly without replacement per `select(K)`.

  The draw comes from a generator seeded by the operating system's randomness
  (`np.random.default_rng()`), so who was sampled cannot be derived from
  anything a run releases; its state travels only in the program state
  (`to_bytes`, the checkpoint), so a resumed run continues the same stream.
  `tff.learning.programs.train_model` deep-copies the iterator into every
  checkpoint; numpy arrays survive that (TFF 0.87's `DatasetDataSource`, whose
  datasets hold a graph, does not).
  """

  def __init__(self, clients: Sequence[Any], batch_size: int,
               rng: Optional[np.random.Generator] = None):
    self._clients = list(clients)
    self._batch_size = batch_size
    self._rng = rng if rng is not None else np.random.default_rng()

  @property
  def federated_type(self) -> tff.FederatedType:
    element = _client_dataset(self._clients[0], self._batch_size).element_spec
    return tff.FederatedType(
        tff.SequenceType(tff.types.tensorflow_to_type(element)), tff.CLIENTS
    )

  def select(self, k: Optional[int] = None) -> list[tf.data.Dataset]:
    k = validation.int_at_least('k', k, 1)
    if k > len(self._clients):
      raise ValueError(
          f'select(k={k}) asks for more clients than the {len(self._clients)} '
          'this source holds: lower train_per_round_clients'
      )
    chosen = self._rng.choice(len(self._clients), size=k, replace=False)
    return [_client_dataset(self._clients[i], self._batch_size)
            for i in chosen]

  def to_bytes(self) -> bytes:
    return pickle.dumps(
        (self._clients, self._batch_size, self._rng.bit_generator.state)
    )

  @classmethod
  def from_bytes(cls, buffer: bytes) -> 'ClientArraysIterator':
    clients, batch_size, rng_state = pickle.loads(buffer)
    rng = np.random.default_rng()
    rng.bit_generator.state = rng_state
    return cls(clients, batch_size, rng)

  def __eq__(self, other) -> bool:
    return self is other


class ClientArraysSource(tff.program.FederatedDataSource):
  """Clients' examples as numpy arrays, for `tff.program` and `train_model`.

  Each client is a structure of arrays whose leading axis is its examples
  (`(features, labels)` or a dict), served as a `tf.data.Dataset` in batches
  of `batch_size`. Rounds draw clients with `ClientArraysIterator` (uniform,
  fixed size, from a secret seed): fixed-size sampling of K of N, which
  `TrainModelAccounting` charges. The arrays are pickled into every
  checkpoint, so this suits populations that fit in memory.

  Args:
    clients: one structure of arrays per client (N >= 1, all of one
      structure and dtype).
    batch_size: examples per batch.
  """

  def __init__(self, clients: Sequence[Any], batch_size: int):
    if not clients:
      raise ValueError('clients is empty: pass one structure of arrays per '
                       'client')
    self._clients = list(clients)
    self._batch_size = validation.int_at_least('batch_size', batch_size, 1)

  @property
  def population(self) -> int:
    """N, the number of clients."""
    return len(self._clients)

  @property
  def federated_type(self) -> tff.FederatedType:
    return self.iterator().federated_type

  def iterator(self) -> ClientArraysIterator:
    return ClientArraysIterator(self._clients, self._batch_size)
