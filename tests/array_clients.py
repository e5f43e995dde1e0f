"""Test helpers: clients as numpy arrays, and TFF's `train_model` over them."""

import asyncio
import tempfile

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.program import data_sources


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


def source(population):
  """A `ClientArraysSource` of `population` clients in batches of 3."""
  return data_sources.ClientArraysSource(
      [client_arrays(s) for s in range(population)], batch_size=3
  )


def train_model(
    process,
    *,
    population,
    clients_per_round,
    rounds,
    should_discard_round=lambda output: False,
    state_dir=None,
    train_metrics_manager=None,
    model_output_manager=None,
    accounting=None,
):
  """`tff.learning.programs.train_model` over `population` array clients.

  Runs in the installed context (a `tff.program.NativeFederatedContext`),
  without evaluation, with its program state in `state_dir` (a new temporary
  directory by default); returns the release manager of the training
  metrics. With a `TrainModelAccounting` (`accounting`, or the owner of
  `should_discard_round`), the source is its checked `data_source`.
  """
  release = train_metrics_manager or tff.program.MemoryReleaseManager()
  data = source(population)
  owner = accounting or getattr(should_discard_round, '__self__', None)
  if hasattr(owner, 'data_source'):
    data = owner.data_source(data)
  asyncio.run(
      tff.learning.programs.train_model(
          train_process=process,
          train_data_source=data,
          train_per_round_clients=clients_per_round,
          train_total_rounds=rounds,
          should_discard_round=should_discard_round,
          program_state_manager=tff.program.FileProgramStateManager(
              state_dir or tempfile.mkdtemp()
          ),
          model_output_manager=(
              model_output_manager or tff.program.MemoryReleaseManager()
          ),
          train_metrics_manager=release,
          evaluation_manager=None,
          evaluation_periodicity=1,
      )
  )
  return release
