"""What a run is built from, before its directory is touched: `build`."""

import dataclasses
import functools
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.auditing import canary_examples as canary_examples_lib
from tff_priv.learning import client_metrics as client_metrics_lib
from tff_priv.program import config as config_lib
from tff_priv.program import progress as progress_lib
from tff_priv.program import registry
from tff_priv.program import sampling as sampling_lib
import tff_priv_tasks as tasks

RunConfig = config_lib.RunConfig
ConfigError = config_lib.ConfigError
_EVAL_BATCH = 256


def _task(config: RunConfig, cache_dir: Optional[str]):
  spec = tff.simulation.baselines.ClientSpec(
      num_epochs=config.num_epochs,
      batch_size=config.batch_size,
      max_elements=config.max_client_examples,
  )
  kwargs = {}
  if cache_dir is not None and config.task not in tasks.OFFLINE_TASK_NAMES:
    kwargs['cache_dir'] = cache_dir
  try:
    return tasks.get_task(
        config.task,
        train_client_spec=spec,
        seed=config.seed,
        **kwargs,
        **config.task_options,
    )
  except (ValueError, TypeError, tasks.DatasetUnavailableError) as e:
    raise ConfigError(str(e)) from e


def test_arrays(task, config: RunConfig) -> tuple[np.ndarray, np.ndarray]:
  """The centralized test set as arrays; a fixed random subset if asked."""
  batches = list(task.datasets.get_centralized_test_data().as_numpy_iterator())
  x, y = (np.concatenate(parts) for parts in zip(*batches))
  if config.test_examples is not None and config.test_examples < len(y):
    # The same subset for every run of the same seed.
    picked = np.sort(
        np.random.default_rng(config.seed).permutation(len(y))[
            : config.test_examples
        ]
    )
    x, y = x[picked], y[picked]
  return x, y


def _num_examples(dataset: tf.data.Dataset) -> int:
  n = int(dataset.cardinality())
  if n >= 0:
    return n
  return int(dataset.reduce(np.int64(0), lambda count, _: count + 1))


@dataclasses.dataclass(frozen=True)
class Setup:
  """What a run is built from (before its directory is touched).

  Attributes:
    task: the task (`tff_priv_tasks.get_task`).
    client_ids: the clients that may be sampled (smp's public ones held out).
    client_index: each client's position in the task's list of clients.
    sampling: the mechanism's `ClientSampling` ('banded' with its bands).
    mechanism: the built `registry.Mechanism` (of the run's first session).
    dp_metrics: the 'dp' client metrics' aggregator, or None.
    canary_kind: what `audit_canaries` inserts: None, 'clients', 'examples'.
    test_data: the evaluation data, batched.
    context: the mechanism's `BuildContext` (a session rebuilds it).
  """

  task: Any
  client_ids: list
  client_index: dict
  sampling: sampling_lib.ClientSampling
  mechanism: Any
  dp_metrics: Any
  canary_kind: Optional[str]
  test_data: tf.data.Dataset
  context: Any = None


def _hold_out_public_clients(config: RunConfig, task, client_ids: list):
  """(public data or None, the clients that may be sampled)."""
  public_data = None
  public_clients = getattr(config.params, 'public_clients', None)
  if public_clients:
    # smp top_k: the first public_clients clients are D_pub, never sampled.
    try:
      public_data, client_ids = tasks.hold_out_public_clients(
          task, public_clients
      )
    except ValueError as e:
      raise ConfigError(str(e)) from e
  return public_data, client_ids


def _dp_metrics(config: RunConfig):
  """The 'dp' client metrics' aggregator, or None."""
  dp_metrics = None
  if config.client_metrics == 'dp':
    dp_metrics = client_metrics_lib.dp_client_metrics(
        config.client_metrics_noise_multiplier,
        config.clients_per_round,
        config.client_metrics_loss_bound,
    )
  return dp_metrics


def _client_examples(
    config: RunConfig, train_data, client_ids, client_index, canary_slots
):
  """`client_examples(c)`: |D_i| of one round, the examples c trains on."""

  def client_examples(c):
    """|D_i| of one round: the examples client c trains on.

    TFF's preprocessing repeats the client's examples num_epochs times and
    then takes at most max_client_examples (`ClientSpec.max_elements`); the
    canary examples' slots come after that and are part of the audited run's
    data.
    """
    n = _num_examples(train_data.create_tf_dataset_for_client(c))
    n *= config.num_epochs
    if config.max_client_examples is not None:
      n = min(n, config.max_client_examples)
    return n + canary_examples_lib.num_slots(
        canary_slots, len(client_ids), client_index[c]
    )

  return client_examples


def build(
    config: RunConfig, cache_dir: Optional[str], progress: bool = False
) -> Setup:
  """The task, the client sampling and the mechanism, or a ConfigError."""
  tf.keras.utils.set_random_seed(config.seed)
  task = _task(config, cache_dir)
  train_data = task.datasets.train_data
  client_ids = list(train_data.client_ids)
  public_data, client_ids = _hold_out_public_clients(config, task, client_ids)
  client_index = {c: i for i, c in enumerate(train_data.client_ids)}
  test_x, test_y = test_arrays(task, config)
  half = len(test_y) // 2
  # The server's half, bound now: test_x and test_y are the other half below.
  server_half = (test_x[:half], test_y[:half])
  dp_metrics = _dp_metrics(config)
  # What audit_canaries inserts: None, 'clients' or 'examples'.
  canary_kind = (
      registry.canary_kind(config.mechanism) if config.audit_canaries else None
  )
  canary_slots = config.audit_canaries if canary_kind == 'examples' else 0
  client_examples = _client_examples(
      config, train_data, client_ids, client_index, canary_slots
  )
  try:
    sampling = sampling_lib.ClientSampling(
        registry.sampling_kind(config.mechanism, config.params),
        len(client_ids),
        config.clients_per_round,
    )
    context = registry.BuildContext(
        model_fn=task.model_fn,
        sampling=sampling,
        total_rounds=config.total_rounds,
        client_optimizer=config.client_optimizer,
        client_learning_rate=config.client_learning_rate,
        client_momentum=config.client_momentum,
        server_optimizer=config.server_optimizer,
        server_learning_rate=config.server_learning_rate,
        local_epochs=config.num_epochs,
        seed=config.seed,
        public_data=public_data,
        min_client_examples=functools.cache(
            lambda: min(client_examples(c) for c in client_ids)
        ),
        validation_data=(
            (lambda: server_half) if config.holdout_validation else None
        ),
        canary_clients=canary_kind == 'clients',
        mean_client_examples=functools.cache(
            lambda: float(np.mean([client_examples(c) for c in client_ids]))
        ),
        metrics_aggregator=dp_metrics,
    )
    progress_lib.building(progress, config.mechanism)
    mechanism = registry.build(config.mechanism, config.params, context)
    if config.client_lr_decay != 1.0 and mechanism.process.get_hparams is None:
      raise ValueError(
          f'client_lr_decay does not apply to mechanism {config.mechanism!r}'
          ' (its process has no learning-rate hyperparameter)'
      )
  except ValueError as e:
    raise ConfigError(str(e)) from e
  if config.holdout_validation:
    # The first half of the test set is the server's: test on the rest (a
    # tuning run evaluates on the server's half).
    if config.evaluation_split == 'validation':
      test_x, test_y = server_half
    else:
      test_x, test_y = test_x[half:], test_y[half:]
  if dp_metrics is not None:
    mechanism.caveats.append(
        "client_metrics='dp': every round also charges the noised client "
        f'metrics, GaussianDpEvent({dp_metrics.noise_multiplier:g}); a target '
        "epsilon calibrates the model's noise only, so the reported epsilon "
        'exceeds it'
    )
  return Setup(
      # The mechanism's sampling: 'banded' with the bands it chose.
      task,
      client_ids,
      client_index,
      mechanism.sampling,
      mechanism,
      dp_metrics,
      canary_kind,
      tf.data.Dataset.from_tensor_slices((test_x, test_y)).batch(_EVAL_BATCH),
      context,
  )
