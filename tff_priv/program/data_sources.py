"""A `tff.program.FederatedDataSource` over clients held as numpy arrays."""

import pickle
from typing import Any, Optional, Sequence, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.program import sampling

Sampler = Union[sampling.StreamSampler, sampling.BandSampler]


def sampler_size(sampler: Sampler) -> tuple[int, float]:
  """(N, K) of a `StreamSampler` or `BandSampler` (K: BandSampler's mean)."""
  if isinstance(sampler, sampling.BandSampler):
    return (
        sampler.population,
        sampler.sampling_probability * sampler.group_size,
    )
  return sampler.population, sampler.clients_per_round


def _client_dataset(arrays, batch_size: int) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensor_slices(arrays).batch(batch_size)


class ClientArraysIterator(tff.program.FederatedDataSourceIterator):
  """Draws K of the clients uniformly without replacement per `select(K)`.

  The draw comes from a generator seeded by the operating system's randomness
  (`np.random.default_rng()`), so who was sampled cannot be derived from
  anything a run releases; its state travels only in the program state
  (`to_bytes`, the checkpoint), so a resumed run continues the same stream.
  With a `sampler`, the r-th `select` draws round r of its schedule
  (`sampler.sample(r)`); `rounds_drawn` (r) travels with it in the program
  state, beside the learning state of the same round.
  `tff.learning.programs.train_model` deep-copies the iterator into every
  checkpoint; numpy arrays survive that (TFF 0.87's `DatasetDataSource`, whose
  datasets hold a graph, does not).
  """

  def __init__(
      self,
      clients: Sequence[Any],
      batch_size: int,
      rng: Optional[np.random.Generator] = None,
      sampler: Optional[Sampler] = None,
      rounds_drawn: int = 0,
  ):
    self._clients = list(clients)
    self._batch_size = batch_size
    self._rng = rng if rng is not None else np.random.default_rng()
    self._sampler = sampler
    self._rounds_drawn = rounds_drawn

  @property
  def sampler(self) -> Optional[Sampler]:
    """The schedule the rounds are drawn by (None: uniform K of N)."""
    return self._sampler

  @property
  def rounds_drawn(self) -> int:
    """The `select` calls so far: the round of the last draw."""
    return self._rounds_drawn

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
    if self._sampler is None:
      chosen = self._rng.choice(len(self._clients), size=k, replace=False)
    else:
      expected = sampler_size(self._sampler)[1]
      if abs(k - expected) > 1e-9 * expected:
        raise ValueError(
            f'select(k={k}) but this source draws by '
            f'{type(self._sampler).__name__} of clients_per_round='
            f'{expected:g}: give train_per_round_clients={expected:g}'
        )
      chosen = self._sampler.sample(self._rounds_drawn + 1)
    self._rounds_drawn += 1
    return [_client_dataset(self._clients[i], self._batch_size) for i in chosen]

  def to_bytes(self) -> bytes:
    # The sampler's seed is secret: it is in the checkpoint only.
    return pickle.dumps(
        (
            self._clients,
            self._batch_size,
            self._rng.bit_generator.state,
            self._sampler,
            self._rounds_drawn,
        )
    )

  @classmethod
  def from_bytes(cls, buffer: bytes) -> 'ClientArraysIterator':
    clients, batch_size, rng_state, *schedule = pickle.loads(buffer)
    rng = np.random.default_rng()
    rng.bit_generator.state = rng_state
    return cls(clients, batch_size, rng, *schedule)

  def __eq__(self, other) -> bool:
    return self is other


class ClientArraysSource(tff.program.FederatedDataSource):
  """Clients' examples as numpy arrays, for `tff.program` and `train_model`.

  Each client is a structure of arrays whose leading axis is its examples
  (`(features, labels)` or a dict), served as a `tf.data.Dataset` in batches
  of `batch_size`. Rounds draw clients with `ClientArraysIterator` (uniform,
  fixed size, from a secret seed): fixed-size sampling of K of N, which
  `TrainModelAccounting` charges; with `sampler`, round r draws
  `sampler.sample(r)` (the stream of `BLTFactory` or `TreeRestartFactory`,
  BandMF's cycles), which it charges as the own loop does. The arrays (and
  the sampler, with its secret seed) are pickled into every checkpoint, so
  this suits populations that fit in memory.

  Args:
    clients: one structure of arrays per client (N >= 1, all of one
      structure and dtype).
    batch_size: examples per batch.
    sampler: None (uniform), or a `tff_priv.program.StreamSampler` /
      `BandSampler` of N = len(clients).
  """

  def __init__(
      self,
      clients: Sequence[Any],
      batch_size: int,
      sampler: Optional[Sampler] = None,
  ):
    if not clients:
      raise ValueError(
          'clients is empty: pass one structure of arrays per ' 'client'
      )
    self._clients = list(clients)
    self._batch_size = validation.int_at_least('batch_size', batch_size, 1)
    if sampler is not None:
      if not isinstance(
          sampler, (sampling.StreamSampler, sampling.BandSampler)
      ):
        raise TypeError(
            'sampler must be a tff_priv.program.StreamSampler or '
            f'BandSampler, got {type(sampler).__name__}'
        )
      if sampler_size(sampler)[0] != len(self._clients):
        raise ValueError(
            f'the sampler draws from {sampler_size(sampler)[0]} clients but '
            f'the source holds {len(self._clients)}: give both the same N'
        )
    self._sampler = sampler

  @property
  def population(self) -> int:
    """N, the number of clients."""
    return len(self._clients)

  @property
  def sampler(self) -> Optional[Sampler]:
    """The schedule rounds are drawn by (None: uniform K of N)."""
    return self._sampler

  @property
  def federated_type(self) -> tff.FederatedType:
    return self.iterator().federated_type

  def iterator(self) -> ClientArraysIterator:
    return ClientArraysIterator(
        self._clients, self._batch_size, sampler=self._sampler
    )
