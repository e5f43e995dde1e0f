"""Write-ahead privacy accounting for `tff.learning.programs.train_model`.

`train_model` (TFF 0.87) runs `process.next`, then calls
`should_discard_round(output)`, then saves the program state and releases the
round's training metrics (and, every tenth and the last round, the whole
learning state to `model_output_manager`). Its program state is fixed
(`ProgramState(state, round_number, next_evaluation_timestamp_seconds,
data_iterator)`) and cannot carry a ledger: a ledger kept in memory starts
from zero on resume and counts only the rounds after the checkpoint.

`TrainModelAccounting.should_discard_round` charges the round and writes the
ledger to disk (fsync) before it returns, so before anything of the round is
released; on resume the ledger is read back. A crash between the charge and
the state save makes the resumed run redo (and charge again) that round: the
ledger may count a round that released nothing, never fewer rounds than were
released.

What `train_model` releases, and what is private with a tff_priv process:

- training metrics (`train_metrics_manager`): `model_metrics/...` are the
  clients' training metrics from the process's `metrics_aggregator`: exact
  with tff.learning's default (refused here), none with
  `client_metrics.no_client_metrics`, noised with a `DpClientMetrics` passed
  as `client_metrics` (then charged). The aggregator's measurements of
  tff_priv's factories and TFF's DP factory are public or part of their
  event. `public_metrics(manager)` releases only those.
- model output (`model_output_manager`): the whole learning state, which
  holds more than the model (DP-FTRL's tree state holds its noise).
  `model_weights_only(manager)` releases `global_model_weights` alone, a
  post-processing of the charged releases.
- evaluation (`evaluation_manager`): exact metrics of the evaluation clients,
  which no tff_priv mechanism noises; pass `evaluation_manager=None` and
  evaluate the released model on public data.
"""

import asyncio
import json
import os
from typing import Any, Optional

import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import guarantees
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.learning import client_metrics as client_metrics_lib
from tff_priv.program import files

LEDGER_FILE = 'train_model_ledger.json'
_DP_METRICS = (client_metrics_lib.DP_LOSS, client_metrics_lib.DP_ACCURACY,
               client_metrics_lib.DP_CLIENTS)


def _client_train_metrics(metrics) -> dict[str, Any]:
  try:
    return dict(metrics['client_work']['train'])
  except (KeyError, TypeError):
    return {}


class _ModelWeightsOnly(tff.program.ReleaseManager):
  """Releases the `global_model_weights` of each learning state it is given."""

  def __init__(self, release_manager: tff.program.ReleaseManager):
    self._release_manager = release_manager

  async def release(self, value, key=None) -> None:
    if not hasattr(value, 'global_model_weights'):
      raise TypeError(
          'model_weights_only releases a learning state\'s model: got '
          f'{type(value).__name__}, which has no global_model_weights'
      )
    await self._release_manager.release(value.global_model_weights, key=key)


class SerialFileProgramStateManager(tff.program.FileProgramStateManager):
  """A `FileProgramStateManager` whose saves run one at a time.

  `train_model` saves each round's state in a background task; TFF 0.87's
  saves, run concurrently, each remove the versions beyond `keep_total` and
  race to delete the same directory (`NotFoundError` tracebacks on stderr).
  """

  def __init__(self, root_dir: str):
    super().__init__(root_dir)
    self._lock = None

  async def save(self, program_state, version: int) -> None:
    if self._lock is None:
      self._lock = asyncio.Lock()
    async with self._lock:
      await super().save(program_state, version)


class TrainModelAccounting:
  """The ledger of a `train_model` run, charged and written before each release.

  Use it as `train_model`'s `should_discard_round`, with a process whose
  aggregator is a tff_priv factory or TFF's DP factory:

    accounting = TrainModelAccounting(root_dir, population=N,
                                      clients_per_round=K)
    await tff.learning.programs.train_model(
        ..., train_per_round_clients=K,
        should_discard_round=accounting.should_discard_round,
        program_state_manager=accounting.program_state_manager(),
        model_output_manager=accounting.model_weights_only(manager),
        train_metrics_manager=accounting.public_metrics(manager),
        evaluation_manager=None, ...)
    accounting.epsilon(1e-5)

  Each round is charged as the aggregator state's event under fixed-size
  sampling of K of N (replace-one, the sampling of `train_model`'s
  `select(K)`; `data_sources.ClientArraysSource` draws it from a secret
  seed), plus the `client_metrics` event under the same sampling when given.
  Unit: the client (for the client-level factories; the state's event names
  it); adversary: an analyst who sees the released models and metrics.

  Args:
    root_dir: the directory of the ledger file (`LEDGER_FILE`) and of the
      program state (`program_state_manager`), created if missing; a run
      resumed with the same `root_dir` continues its ledger.
    population: N, the clients the data source holds.
    clients_per_round: K, `train_model`'s `train_per_round_clients`.
    client_metrics: the `DpClientMetrics` the process was built with as its
      `metrics_aggregator`; None: the process must release no client metrics
      (`client_metrics.no_client_metrics`).

  Raises:
    ValueError: K outside 1..N; a ledger in `root_dir` written with another
      N, K or client metrics.
  """

  def __init__(
      self,
      root_dir: str,
      *,
      population: int,
      clients_per_round: int,
      client_metrics: Optional[client_metrics_lib.DpClientMetrics] = None,
  ):
    self._population = validation.int_at_least('population', population, 1)
    self._k = validation.int_at_least('clients_per_round', clients_per_round,
                                      1)
    if self._k > self._population:
      raise ValueError(
          f'clients_per_round={self._k} exceeds population={self._population}'
      )
    if client_metrics is not None and not isinstance(
        client_metrics, client_metrics_lib.DpClientMetrics
    ):
      raise TypeError(
          'client_metrics must be the DpClientMetrics the process was built '
          f'with, got {type(client_metrics).__name__}'
      )
    self._client_metrics = client_metrics
    self._config = {
        'population': self._population,
        'clients_per_round': self._k,
        'client_metrics_noise_multiplier': (
            None if client_metrics is None else client_metrics.noise_multiplier
        ),
    }
    os.makedirs(root_dir, exist_ok=True)
    self._root_dir = root_dir
    self._path = os.path.join(root_dir, LEDGER_FILE)
    self._ledger = ledger_lib.PrivacyLedger()
    self._rounds = 0
    if os.path.exists(self._path):
      with open(self._path) as f:
        saved = json.load(f)
      if saved['config'] != self._config:
        raise ValueError(
            f'{self._path} was written with {saved["config"]}, not '
            f'{self._config}: resume with the same arguments or use another '
            'root_dir'
        )
      self._ledger = ledger_lib.PrivacyLedger.from_json(saved['ledger'])
      self._rounds = saved['rounds']

  @property
  def ledger(self) -> ledger_lib.PrivacyLedger:
    """The charged releases (as on disk)."""
    return self._ledger

  @property
  def rounds(self) -> int:
    """The rounds charged, over every run in `root_dir`."""
    return self._rounds

  def epsilon(self, delta: float) -> float:
    """The analyst's eps at `delta` over every charged round."""
    return self._ledger.epsilon(delta)

  def should_discard_round(self, output) -> bool:
    """Charges `output`'s round, durably, and keeps it (returns False).

    Raises (before anything of the round is released):
      ValueError: the round's metrics carry the clients' exact training
        metrics, or noised ones without `client_metrics`.
      TypeError / ValueError: as `PrivacyLedger.record_round` (an aggregator
        without a DP event, ...).
    """
    train = _client_train_metrics(output.metrics)
    exact = sorted(k for k in train if k not in _DP_METRICS)
    if exact:
      raise ValueError(
          f'the process releases the clients\' exact metrics {exact}: build '
          'it with metrics_aggregator=client_metrics.no_client_metrics (or '
          'a dp_client_metrics passed here as client_metrics)'
      )
    if train and self._client_metrics is None:
      raise ValueError(
          'the process releases noised client metrics: pass its '
          'DpClientMetrics as client_metrics so that they are charged'
      )
    round_ledger = ledger_lib.PrivacyLedger()
    round_ledger.record_round(
        output.state.aggregator, population=self._population,
        sample_size=self._k,
    )
    if self._client_metrics is not None:
      round_ledger.record(
          guarantees.sampled_event(
              self._client_metrics.dp_event, 'add_or_remove_one',
              population=self._population, sample_size=self._k,
          )
      )
    self._ledger.extend(round_ledger)
    self._rounds += 1
    files.write_json(
        self._path,
        {
            'config': self._config,
            'rounds': self._rounds,
            'ledger': self._ledger.to_json(),
        },
        durable=True,
    )
    return False

  def program_state_manager(self) -> tff.program.FileProgramStateManager:
    """A `FileProgramStateManager` in `root_dir/state`, saving one at a time."""
    return SerialFileProgramStateManager(
        os.path.join(self._root_dir, 'state')
    )

  def model_weights_only(
      self, release_manager: tff.program.ReleaseManager
  ) -> tff.program.ReleaseManager:
    """`release_manager` given only the model weights of each state released."""
    return _ModelWeightsOnly(release_manager)

  def public_metrics(
      self, release_manager: tff.program.ReleaseManager
  ) -> tff.program.ReleaseManager:
    """`release_manager` given only the round metrics a private run may release.

    Kept: the aggregator's measurements, and the noised client metrics
    (`model_metrics/dp_*`) when `client_metrics` is charged; everything else
    (another process part's measurements) is dropped.
    """
    charged = self._client_metrics is not None

    def public(path) -> bool:
      if not path:
        return False
      if path[0] == 'aggregator':
        return True
      return (charged and path[0] == 'model_metrics' and len(path) == 2
              and path[1] in _DP_METRICS)

    return tff.program.FilteringReleaseManager(release_manager, public)
