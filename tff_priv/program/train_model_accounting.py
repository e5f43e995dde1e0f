"""Write-ahead privacy accounting for `tff.learning.programs.train_model`.

`train_model`'s program state cannot carry a ledger, so
`TrainModelAccounting.should_discard_round` charges each round and writes
the ledger to disk (fsync) before anything of the round is released, and a
resumed run reads it back: the ledger may count a round that released
nothing, never fewer rounds than were released. Why, and which of what
`train_model` releases is private: `TrainModelAccounting`.
"""

import asyncio
import copy
import json
import math
import os
import sys
import threading
from typing import Any, Optional

import tensorflow_federated as tff

from tff_priv import cli
from tff_priv import validation
from tff_priv.accounting import guarantees
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import wrapped_states
from tff_priv.aggregators import bandmf
from tff_priv.aggregators import blt
from tff_priv.aggregators import correlated_noise
from tff_priv.aggregators import dp_ftrl
from tff_priv.learning import client_metrics as client_metrics_lib
from tff_priv.program import data_sources
from tff_priv.program import files
from tff_priv.program import sampling
from tff_priv.program import state as state_lib

LEDGER_FILE = 'train_model_ledger.json'
_DP_METRICS = (
    client_metrics_lib.DP_LOSS,
    client_metrics_lib.DP_ACCURACY,
    client_metrics_lib.DP_CLIENTS,
)


_STREAM_FACTORIES = (
    blt.BLTFactory,
    dp_ftrl.TreeRestartFactory,
    bandmf.BandMFFactory,
)


def _needs_sampler(stream: guarantees.StateAccounting) -> str:
  return (
      f'{stream.factory} needs its clients drawn by {stream.sampler}: '
      'train_model draws K of N uniformly each round, which is not '
      f'{stream.schedule}; give train_model '
      'train_data_source=ClientArraysSource(clients, batch_size, '
      f'sampler={stream.sampler}(N, K, ...)) and TrainModelAccounting(..., '
      'aggregator=factory), or use the own loop of examples/own_loop.py'
  )


def _stream_of(state_or_type) -> Optional[guarantees.StateAccounting]:
  """The accounting of a state (class) that takes no sampling, else None."""
  declared = guarantees.declared_accounting(state_or_type)
  if declared is None or declared.takes_sampling:
    return None
  return declared


def _stream_of_type(type_spec) -> Optional[guarantees.StateAccounting]:
  """The accounting of the stream state a process state's type holds."""
  if isinstance(type_spec, tff.FederatedType):
    type_spec = type_spec.member
  if not isinstance(type_spec, tff.StructType):
    return None
  container = getattr(type_spec, 'python_container', None)
  if container is not None:
    found = _stream_of(container)
    if found is not None:
      return found
  for _, member in tff.structure.iter_elements(type_spec):
    found = _stream_of_type(member)
    if found is not None:
      return found
  return None


def _most_in_stream(
    participation: str, period: int, rounds: int
) -> tuple[int, int]:
  """(most rounds one client takes part in, least gap) in a stream.

  The streams are `rounds` long from round 1; `period` is the sampler's
  N // K: 'cyclic' draws each client every `period` rounds, 'epoch' once in
  each epoch of `period` rounds, anywhere in it (worst case: the last round
  of one epoch and the first of the next).
  """
  if participation == 'cyclic':
    return -(-rounds // period), period
  starts = range(period // math.gcd(rounds, period))  # Offsets repeat.
  most = max(
      ((s + 1) * rounds - 1) // period - (s * rounds) // period + 1
      for s in starts
  )
  return most, 1


def _schedule_error(sampler, factory, population: int, k: int) -> Optional[str]:
  """Why `sampler`'s draws are not what `factory`'s event assumes, or None."""
  name = type(factory).__name__
  n, expected = data_sources.sampler_size(sampler)
  if n != population or abs(expected - k) > 1e-9 * k:
    return (
        f'the sampler draws {expected:g} of {n} clients a round but this '
        f'accounting charges {k} of {population}: give both the same N '
        'and K'
    )
  if isinstance(factory, bandmf.BandMFFactory):
    if not isinstance(sampler, sampling.BandSampler):
      return f'{name} needs its clients drawn by BandSampler, not StreamSampler'
    if sampler.bands != factory.bands:
      return (
          f'BandSampler(bands={sampler.bands}) but {name} charges cycles '
          f'of bands={factory.bands}: draw with BandSampler(N, K, '
          'factory.bands)'
      )
    if sampler.sampling_probability > factory.sampling_probability * (1 + 1e-9):
      return (
          f'BandSampler samples q={sampler.sampling_probability:.6g} of '
          f'each group but {name} charges q='
          f'{factory.sampling_probability:.6g}: build both from the '
          'same N, K and bands'
      )
    return None
  if isinstance(sampler, sampling.BandSampler):
    return f'{name} needs its clients drawn by StreamSampler, not BandSampler'
  if isinstance(factory, blt.BLTFactory):
    rounds, at_most, apart = (
        factory.rounds_per_stream,
        factory.max_participations,
        factory.min_sep,
    )
  else:
    rounds, at_most, apart = factory.rounds_per_tree, 1, 1
  most, gap = _most_in_stream(
      sampler.participation, sampler.min_separation, rounds
  )
  if most <= at_most and (most == 1 or gap >= apart):
    return None
  return (
      f'StreamSampler(participation={sampler.participation!r}) lets a client '
      f'take part {most} times, {gap} round(s) apart, in a {name} stream of '
      f'{rounds} rounds, whose event charges at most {at_most}, {apart} '
      'apart: draw with the participation the factory was built for'
  )


def _stream_event(factory):
  """The event a stream factory charges at a stream's (cycle's) first round."""
  return factory.event()


def _same_event(a, b) -> bool:
  """Events equal up to the float32 the state carries them in."""
  return _same_event_values(
      ledger_lib.encode_event(a), ledger_lib.encode_event(b)
  )


def _same_event_values(a, b) -> bool:
  if isinstance(a, dict) and isinstance(b, dict):
    return a.keys() == b.keys() and all(
        _same_event_values(a[f], b[f]) for f in a
    )
  if isinstance(a, list) and isinstance(b, list):
    return len(a) == len(b) and all(map(_same_event_values, a, b))
  if isinstance(a, float) or isinstance(b, float):
    return math.isclose(a, b, rel_tol=1e-6)
  return a == b


def _raised_here(error: BaseException) -> bool:
  """Whether tff_priv's code raised `error` (a one-line refusal)."""
  tb = error.__traceback__
  while tb is not None and tb.tb_next is not None:
    tb = tb.tb_next
  package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  return tb is not None and os.path.abspath(
      tb.tb_frame.f_code.co_filename
  ).startswith(package + os.sep)


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
          "model_weights_only releases a learning state's model: got "
          f'{type(value).__name__}, which has no global_model_weights'
      )
    await self._release_manager.release(value.global_model_weights, key=key)


class SerialFileProgramStateManager(tff.program.FileProgramStateManager):
  """A `FileProgramStateManager` whose `save` writes the state, then returns.

  `train_model` creates each round's save (`save(...)`) right after the
  round's charge (`should_discard_round`) and awaits it in a background
  task; TFF 0.87's saves then lag the charges by up to five rounds, so a
  resumed run would redo (and charge again) up to five rounds, and
  concurrent saves race to delete the same old versions. Here the state is
  on disk when `save` returns (its coroutine is already done): a run
  stopped anywhere has saved every charged round but at most the last one,
  so a resume charges at most one round again.

  A save that fails (a full disk) leaves no temporary folder behind and
  raises `OSError` in one line; a load first removes the temporary folders a
  save cut short left.
  """

  def __init__(self, root_dir: str):
    super().__init__(root_dir)

  def save(self, program_state, version: int):  # pylint: disable=invalid-overridden-method
    """Writes `program_state` now; returns an awaitable that is done."""
    failure = []

    def write():
      try:
        asyncio.run(
            tff.program.FileProgramStateManager.save(
                self, state_lib.versioned(program_state), version
            )
        )
      except BaseException as e:  # pylint: disable=broad-except
        failure.append(e)

    # TFF's save is a coroutine: it runs to its end on an event loop of its
    # own in a thread, while this one (train_model's loop) waits.
    thread = threading.Thread(target=write, name='tff_priv-state-save')
    thread.start()
    thread.join()
    if failure:
      state_lib.remove_temporary_states(self._root_dir)
      raise state_lib.save_error(failure[0], self._root_dir)
    return _done()

  async def load_latest(self, structure):
    state_lib.remove_temporary_states(self._root_dir)
    return await super().load_latest(structure)

  async def load(self, version: int, structure):
    """The state `save` wrote (`state.versioned`), or one of tff_priv 0.2's.

    tff_priv 0.2 saved no format and its stream states as OrderedDicts
    (`correlated_noise.legacy_form`): such a checkpoint does not load into
    this version's structure, and loads into that form, converted back. A
    checkpoint that loads into neither fails with this version's error.
    """
    try:
      loaded = await super().load(version, state_lib.versioned(structure))
    except (ValueError, TypeError) as error:
      try:
        legacy = await super().load(
            version, correlated_noise.legacy_form(structure)
        )
      except (ValueError, TypeError):
        raise error from None
      return correlated_noise.from_legacy_form(structure, legacy)
    return state_lib.unversioned(loaded)


async def _done() -> None:
  return None


def _saved_rounds(state_dir: str) -> list[int]:
  """The rounds >= 1 of the program states in `state_dir` (train_model's)."""
  if not os.path.isdir(state_dir):
    return []
  rounds = []
  for entry in os.listdir(state_dir):
    prefix, _, number = entry.rpartition('_')
    if prefix == 'program_state' and number.isdigit() and int(number) >= 1:
      rounds.append(int(number))
  return rounds


class _CheckedIterator(tff.program.FederatedDataSourceIterator):
  """An iterator whose `select(k)` must draw the accounting's K.

  `_CheckedSource` makes a subclass per wrapped iterator class and
  accounting (`_inner` and `_owner`), so that `from_bytes` (a classmethod:
  TFF restores a checkpointed iterator from the class of the one it was
  given) restores the wrapped iterator and wraps it again.
  """

  _inner = None
  _owner = None

  def __init__(self, iterator, accounting):
    self._iterator, self._accounting = iterator, accounting

  @property
  def federated_type(self):
    return self._iterator.federated_type

  def select(self, k=None):
    if k != self._accounting._k:  # pylint: disable=protected-access
      raise ValueError(
          f'train_model draws {k} clients a round but its accounting charges '
          f'rounds of clients_per_round={self._accounting._k}: give both the '  # pylint: disable=protected-access
          'same K'
      )
    self._accounting._k_checked = True  # pylint: disable=protected-access
    return self._iterator.select(k)

  def to_bytes(self) -> bytes:
    return self._iterator.to_bytes()

  @classmethod
  def from_bytes(cls, buffer: bytes):
    return cls(cls._inner.from_bytes(buffer), cls._owner)

  def __deepcopy__(self, memo):
    # train_model's copies (one per checkpoint) copy the draws, not the
    # accounting they report to.
    return type(self)(copy.deepcopy(self._iterator, memo), self._accounting)

  def __eq__(self, other) -> bool:
    return (
        isinstance(other, _CheckedIterator)
        and self._iterator == other._iterator
    )


class _CheckedSource(tff.program.FederatedDataSource):
  """A data source whose iterators check each draw's size (`data_source`)."""

  def __init__(self, source, accounting):
    population = getattr(source, 'population', None)
    if isinstance(population, int) and population != accounting._population:  # pylint: disable=protected-access
      raise ValueError(
          f'the data source holds {population} clients but its accounting '
          f'charges a population of {accounting._population}: give both the '  # pylint: disable=protected-access
          'same N'
      )
    self._source, self._accounting = source, accounting

  @property
  def federated_type(self):
    return self._source.federated_type

  def iterator(self):
    inner = self._source.iterator()
    checked = type(
        'CheckedIterator',
        (_CheckedIterator,),
        {
            '_inner': type(inner),
            '_owner': self._accounting,
        },
    )
    return checked(inner, self._accounting)


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

  `BLTFactory`, `TreeRestartFactory` and `BandMFFactory` (passed as
  `aggregator`) are charged as in the own loop, their state's event without
  sampling arguments, when `run`'s data source draws round r as the event
  assumes: `ClientArraysSource(..., sampler=StreamSampler(N, K,
  participation))` (BandMF: `BandSampler(N, K, factory.bands)`). `run`
  checks the sampler against the factory's stream (k, b) / tree / bands
  before round 1; each round, before its charge, that the source drew
  round r of its schedule where the state is at round r (`rounds_done`:
  the iterator's count travels with the state in the program state, so a
  resume continues both), and that no round runs again after a later one
  was charged.

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

  Args:
    root_dir: the directory of the ledger file (`LEDGER_FILE`) and of the
      program state (`program_state_manager`), created if missing; a run
      resumed with the same `root_dir` continues its ledger.
    population: N, the clients the data source holds.
    clients_per_round: K, `train_model`'s `train_per_round_clients`.
    client_metrics: the `DpClientMetrics` the process was built with as its
      `metrics_aggregator`; None: the process must release no client metrics
      (`client_metrics.no_client_metrics`).
    aggregator: the `BLTFactory`, `TreeRestartFactory` or `BandMFFactory`
      the process was built with (its clients drawn by a sampler); None for
      the other factories.

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
      aggregator=None,
  ):
    self._population = validation.int_at_least('population', population, 1)
    self._k = validation.int_at_least('clients_per_round', clients_per_round, 1)
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
    if aggregator is not None and not isinstance(aggregator, _STREAM_FACTORIES):
      raise TypeError(
          'aggregator is for BLTFactory, TreeRestartFactory or '
          f'BandMFFactory (drawn by a sampler), got {type(aggregator).__name__}'
          ': omit it'
      )
    self._aggregator = aggregator
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
    self._last_round = 0  # The highest schedule round charged.
    self._k_checked = False
    self._frame = None  # The running train_model's, under `run`.
    self._checked_sampler = None
    self._public_aggregator_paths = frozenset()
    saved = _saved_rounds(os.path.join(root_dir, 'state'))
    if saved and not os.path.exists(self._path):
      raise ValueError(
          f'{self._path} is missing, but {root_dir}/state holds the state '
          f'of round {max(saved)}, whose rounds were charged there: restore '
          'the ledger file or use another root_dir'
      )
    if os.path.exists(self._path):
      try:
        with open(self._path) as f:
          saved = json.load(f)
        ledger = ledger_lib.PrivacyLedger.from_json(saved['ledger'])
        rounds = int(saved['rounds'])
        last_round = int(saved.get('last_round', 0))
        config = saved['config']
      except (ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f'{self._path} is damaged ({str(e).splitlines()[0][:120]}); it '
            'holds the charges of every released round and is never '
            'overwritten: restore it or use another root_dir'
        ) from None
      if config != self._config:
        raise ValueError(
            f'{self._path} was written with {saved["config"]}, not '
            f'{self._config}: resume with the same arguments or use another '
            'root_dir'
        )
      self._ledger, self._rounds = ledger, rounds
      self._last_round = last_round

  @property
  def ledger(self) -> ledger_lib.PrivacyLedger:
    """The charged releases (as on disk)."""
    return self._ledger

  @property
  def rounds(self) -> int:
    """The rounds charged, over every run in `root_dir`."""
    return self._rounds

  def data_source(
      self, source: tff.program.FederatedDataSource
  ) -> tff.program.FederatedDataSource:
    """`source`, whose draws are checked to be K clients (before any release).

    For a program that does not run through `run` (which checks
    `train_per_round_clients` itself). A source drawn by a sampler (BLT,
    DP-FTRL, BandMF) runs through `run`, which checks its schedule.
    """
    sampler = getattr(source, 'sampler', None)
    if sampler is not None:
      raise ValueError(
          f'a source drawn by {type(sampler).__name__} runs through '
          'accounting.run(train_model(...)), which checks its schedule '
          'against the factory: give train_model the source itself'
      )
    return _CheckedSource(source, self)

  def run(self, program, *, name: str = 'train_model') -> None:
    """Runs `program` to its end (`asyncio.run`), checked, stopping in one line.

    `program` is the coroutine `tff.learning.programs.train_model(...)`.
    Before it starts, its arguments are checked against this accounting
    (each a one-line ValueError): `train_per_round_clients` must be K (the
    sampling every round is charged under), a data source that knows its
    population (`population`) must hold N; a process of `BLTFactory`,
    `TreeRestartFactory` or `BandMFFactory` needs a source drawn by the
    sampler its event assumes (checked against `aggregator`) and this
    accounting's `program_state_manager()` (a round is saved before it is
    released, so no released round of a stream runs again); an
    `evaluation_manager` gets a one-line warning (its clients' exact
    metrics are released uncharged). An error tff_priv raises while the
    program runs (a refusal before a charge) is raised from here, without
    TFF's frames.

    SIGINT and SIGTERM end the program with one line saying what is kept
    (exit status 128 + the signal; everything charged is on disk, and the
    same command resumes). At the end, when the ledger charged more rounds
    than the program trained (rounds run again after interruptions), one
    line gives the planned and the spent epsilon (at delta 1e-5, or
    `delta`).

    Args:
      program: the `train_model(...)` coroutine (not started); another
        coroutine runs unchecked (then give `train_data_source=
        data_source(...)`, or its first round is refused).
      name: the program's name in its lines.
    """
    try:
      total = self._check_program(program)
    except (ValueError, TypeError) as e:
      raise e.with_traceback(None) from None  # One line: the message.
    stop = cli.OneLineStop(
        name,
        lambda: (
            f'the ledger ({self._rounds} charged rounds) and the program '
            f'state in {self._root_dir} are kept: run the same command '
            'to resume'
        ),
        # A save the signal cut short.
        lambda: state_lib.remove_temporary_states(
            os.path.join(self._root_dir, 'state')
        ),
    )
    try:
      with stop:
        asyncio.run(program)
    except Exception as e:  # pylint: disable=broad-except
      if not _raised_here(e):
        raise
      # A refusal of tff_priv's (one line: a check, a plan exceeded, a full
      # disk), raised here rather than from inside TFF's loop.
      raise e.with_traceback(None) from None
    finally:
      self._frame = None
    if total is not None:
      line = self.planned_and_spent(total)
      if line:
        print(f'{name}: {line}', file=sys.stderr)

  def planned_and_spent(
      self, total_rounds: int, delta: float = 1e-5
  ) -> Optional[str]:
    """One line if the ledger charged over `total_rounds` rounds, else None.

    Planned: the eps of the first `total_rounds` rounds' charges (what an
    uninterrupted run spends); spent: the eps of every charge.
    """
    if self._rounds <= total_rounds or not self._rounds:
      return None
    planned = ledger_lib.PrivacyLedger(self._ledger.neighboring_relation)
    if self._last_round and self._aggregator is not None:
      # A stream's rounds: its streams (cycles) are charged.
      factory = self._aggregator
      period = (
          getattr(factory, 'rounds_per_stream', None)
          or getattr(factory, 'rounds_per_tree', None)
          or factory.bands
      )
      planned.record(_stream_event(factory), -(-total_rounds // period))
    else:
      releases = [e for e, n in self._ledger.entries for _ in range(n)]
      per_round = len(releases) // self._rounds
      for event in releases[: per_round * total_rounds]:
        planned.record(event)
    return (
        f'epsilon {self.epsilon(delta):.4g} spent at delta {delta:g} over '
        f'{self._rounds} charged rounds, planned {planned.epsilon(delta):.4g} '
        f'for the {total_rounds} rounds trained (rounds run again after an '
        'interruption are charged again)'
    )

  def _check_program(self, program) -> Optional[int]:
    """Checks a `train_model` coroutine's arguments; its total rounds."""
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.learning.programs import (
        training_program_logic,
    )
    # pylint: enable=g-import-not-at-top
    if not asyncio.iscoroutine(program):
      raise TypeError(
          'run takes the coroutine train_model(...) returns (not awaited), '
          f'got {type(program).__name__}'
      )
    if program.cr_code is not training_program_logic.train_model.__code__:
      return None
    # A coroutine not started yet holds its arguments as its frame's locals.
    args = program.cr_frame.f_locals
    k = args['train_per_round_clients']
    if k != self._k:
      program.close()
      raise ValueError(
          f'train_per_round_clients={k} but this accounting charges rounds of '
          f'clients_per_round={self._k}: give both the same K'
      )
    population = getattr(args['train_data_source'], 'population', None)
    if isinstance(population, int) and population != self._population:
      program.close()
      raise ValueError(
          f'the data source holds {population} clients but this accounting '
          f'charges a population of {self._population}: give both the same N'
      )
    try:
      self._check_schedule_args(args)
    except ValueError:
      program.close()
      raise
    if args['evaluation_manager'] is not None:
      print(
          "tff_priv: warning: train_model's evaluation_manager releases the "
          'exact metrics of its evaluation clients, uncharged: use '
          'evaluation_manager=None unless they are public data',
          file=sys.stderr,
      )
    self._k_checked = True
    self._frame = program.cr_frame
    return args['train_total_rounds']

  def _check_schedule_args(self, args) -> None:
    """Refuses (before round 1) a stream factory not drawn by its sampler."""
    sampler = getattr(args['train_data_source'], 'sampler', None)
    try:
      stream = _stream_of_type(
          args['train_process'].initialize.type_signature.result
      )
    except AttributeError:
      stream = None
    error = None
    if stream is not None and sampler is None:
      error = _needs_sampler(stream)
    elif sampler is not None:
      error = self._sampler_error(sampler, stream)
      if error is None and not isinstance(
          args['program_state_manager'], SerialFileProgramStateManager
      ):
        error = (
            f"{stream.factory}'s rounds must not be released twice in one "
            'stream: give train_model program_state_manager='
            'accounting.program_state_manager(), which saves each round '
            'before its release'
        )
    if error is not None:
      raise ValueError(error)

  def _sampler_error(
      self, sampler, stream: Optional[guarantees.StateAccounting]
  ) -> Optional[str]:
    """Why the rounds drawn by `sampler` cannot be charged, or None."""
    if stream is None:
      return (
          f'the data source draws by {type(sampler).__name__}, which only '
          'a stream factory (BLT, the tree, BandMF) is charged for; this '
          'aggregator is charged under uniform sampling of K of N: give '
          'ClientArraysSource no sampler'
      )
    if type(self._aggregator).__name__ != stream.factory:
      return (
          f"the process's aggregator is a {stream.factory}: pass it as "
          'TrainModelAccounting(..., aggregator=factory), whose stream the '
          'sampler is checked against'
      )
    if self._client_metrics is not None:
      return (
          f'client_metrics are charged under uniform sampling, not '
          f"{type(sampler).__name__}'s: build the process with "
          'client_metrics.no_client_metrics'
      )
    if sampler is not self._checked_sampler:
      error = _schedule_error(
          sampler, self._aggregator, self._population, self._k
      )
      if error is not None:
        return error
      self._checked_sampler = sampler
    return None

  def epsilon(self, delta: float) -> float:
    """The analyst's eps at `delta` over every charged round."""
    return self._ledger.epsilon(delta)

  def should_discard_round(self, output) -> bool:
    """Charges `output`'s round, durably, and keeps it (returns False).

    Raises (before anything of the round is released):
      ValueError: the round's metrics carry the clients' exact training
        metrics, or noised ones without `client_metrics`; its draw of
        clients was not checked to be K (see `run`, `data_source`); its
        aggregator's measurements hold an exact client statistic
        (`wrapped_states.UnnoisedWrapperError`: TFF's debug measurements,
        a wrapper norm tracked without noise) or one tff_priv does not
        know; a stream factory's state not drawn by its sampler at its
        round (`_scheduled_round`).
      TypeError / ValueError: as `PrivacyLedger.record_round` (an aggregator
        without a DP event, ...).
    """
    if not self._k_checked:
      raise ValueError(
          'the clients drawn each round were not checked to be '
          f'clients_per_round={self._k}: run the program with '
          'accounting.run(train_model(...)), or give train_model '
          'train_data_source=accounting.data_source(source)'
      )
    train = _client_train_metrics(output.metrics)
    exact = sorted(k for k in train if k not in _DP_METRICS)
    if exact:
      raise ValueError(
          f"the process releases the clients' exact metrics {exact}: build "
          'it with metrics_aggregator=client_metrics.no_client_metrics (or '
          'a dp_client_metrics passed here as client_metrics)'
      )
    if train and self._client_metrics is None:
      raise ValueError(
          'the process releases noised client metrics: pass its '
          'DpClientMetrics as client_metrics so that they are charged'
      )
    # Which aggregator measurements may leave (refused: an exact client
    # statistic, or one tff_priv does not know), before anything is charged
    # or released.
    aggregator = output.state.aggregator
    self._public_aggregator_paths = wrapped_states.public_measurement_paths(
        aggregator,
        output.metrics.get('aggregator'),
        guarantees.factory_kind_of_state(aggregator),
    )
    drawn = self._scheduled_round(aggregator)
    round_ledger = ledger_lib.PrivacyLedger()
    if drawn is not None:
      # As in the own loop: the event holds the schedule the source drew.
      round_ledger.record_round(aggregator)
    else:
      sampling = sampling_lib.Sampling.fixed(self._population, self._k)
      round_ledger.record_round(aggregator, sampling=sampling)
      if self._client_metrics is not None:
        round_ledger.record(
            guarantees.sampled_event(
                self._client_metrics.dp_event, 'add_or_remove_one', sampling
            )
        )
    self._ledger.extend(round_ledger)
    self._rounds += 1
    self._last_round = max(self._last_round, drawn or 0)
    files.write_json(
        self._path,
        {
            'config': self._config,
            'rounds': self._rounds,
            'last_round': self._last_round,
            'ledger': self._ledger.to_json(),
        },
        durable=True,
    )
    return False

  def _scheduled_round(self, aggregator) -> Optional[int]:
    """The schedule round r the source drew for a stream state, else None.

    Raises ValueError (before the charge) unless the state is a stream
    factory's drawn by its sampler (checked against `aggregator`) at the
    state's round, and no later round was charged before.
    """
    inner = wrapped_states.unwrap(aggregator)[0]
    stream = _stream_of(inner)
    iterator = (
        None
        if self._frame is None
        else self._frame.f_locals.get('train_data_iterator')
    )
    sampler = getattr(iterator, 'sampler', None)
    if stream is None and sampler is None:
      return None
    if stream is not None and self._frame is None:
      raise ValueError(
          f"{stream.factory}'s rounds are charged through accounting.run("
          'train_model(...)), which checks the schedule its data source '
          f'draws by ({stream.sampler})'
      )
    if stream is not None and sampler is None:
      raise ValueError(_needs_sampler(stream))
    error = self._sampler_error(sampler, stream)
    if error is not None:
      raise ValueError(error)
    drawn, done = iterator.rounds_drawn, int(inner.rounds_done)
    if drawn != done:
      raise ValueError(
          f'the aggregator state is at round {done} but the data source drew '
          f'round {drawn} of its schedule: start train_model from '
          'process.initialize() (no initial_train_state) or resume it from '
          'its program state'
      )
    if drawn < self._last_round:
      raise ValueError(
          f'round {drawn} runs again after round {self._last_round} was '
          'charged: a round released before would share its stream '
          'uncharged; resume from the latest program state '
          '(accounting.program_state_manager())'
      )
    charged = guarantees.extract_dp_event(inner)
    expected = _stream_event(self._aggregator)
    if not _same_event(charged.event, expected):
      raise ValueError(
          f'the state charges {charged.event}, not the event of the '
          f'{stream.factory} given as aggregator ({expected}): pass the '
          'factory the process was built with'
      )
    return drawn

  def program_state_manager(self) -> tff.program.FileProgramStateManager:
    """A `FileProgramStateManager` in `root_dir/state`, saving one at a time."""
    return SerialFileProgramStateManager(os.path.join(self._root_dir, 'state'))

  def model_weights_only(
      self, release_manager: tff.program.ReleaseManager
  ) -> tff.program.ReleaseManager:
    """`release_manager` given only the model weights of each state released."""
    return _ModelWeightsOnly(release_manager)

  def public_metrics(
      self, release_manager: tff.program.ReleaseManager
  ) -> tff.program.ReleaseManager:
    """`release_manager` given only the round metrics a private run may release.

    Kept: the aggregator's measurements tff_priv knows to be public for the
    factory it recognised in the round's state
    (`wrapped_states.public_measurement_paths`: a tff_priv factory's, TFF's
    DP factory's query metrics, a TFF wrapper's public norm; not a
    wrapper's exact count of clients), and the noised client metrics
    (`model_metrics/dp_*`) when `client_metrics` is charged; everything else
    (another process part's measurements) is dropped. A round whose
    aggregator measurements hold an exact client statistic tff_priv cannot
    drop (TFF's debug measurements), or one it does not know, is refused by
    `should_discard_round`, before any release; debug measurements are also
    refused here (`wrapped_states.UnnoisedWrapperError`).
    """
    charged = self._client_metrics is not None

    def public(path) -> bool:
      if not path:
        return False
      if path[-1] in wrapped_states.DEBUG_MEASUREMENTS:
        # Refused, also where should_discard_round did not see the round.
        wrapped_states.check_no_debug_measurements({path[-1]: None})
      if path[0] == 'aggregator':
        return tuple(path[1:]) in self._public_aggregator_paths
      return (
          charged
          and path[0] == 'model_metrics'
          and len(path) == 2
          and path[1] in _DP_METRICS
      )

    return tff.program.FilteringReleaseManager(release_manager, public)
