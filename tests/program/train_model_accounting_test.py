"""`TrainModelAccounting` and `ClientArraysSource` in TFF's `train_model`."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from unittest import mock

from dp_accounting import dp_event
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import array_clients
from tests import script_runs
from tests import tiny_models
from tff_priv import runtime
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.aggregators import bandmf
from tff_priv.aggregators import blt
from tff_priv.aggregators import dp_ftrl
from tff_priv.aggregators import smp
from tff_priv.learning import client_metrics
from tff_priv.program import data_sources
from tff_priv.program import sampling
from tff_priv.program import train_model_accounting as tma

_SIGMA, _K, _N = 0.8, 2, 6


def _model_fn():
  return tiny_models.softmax_model_fn(
      [tf.keras.metrics.SparseCategoricalAccuracy()]
  )


def _process(metrics_aggregator=None):
  """FedAvg with Fed-SMP, and no client metrics or `metrics_aggregator`'s.

  Built once without metrics: each `initialize` draws its own secret seeds.
  """
  if metrics_aggregator is None and _BUILT:
    return _BUILT[0]
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=smp.SparsifiedSecureSumFactory(_SIGMA, 1.0, 0.5, _K),
      metrics_aggregator=(
          metrics_aggregator or client_metrics.no_client_metrics
      ),
  )
  if metrics_aggregator is None:
    _BUILT.append(process)
  return process


_BUILT = []


def _by_hand(rounds, extra=None):
  """`rounds` of the factory's event, fixed-size K of N (replace-one)."""
  ledger = ledger_lib.PrivacyLedger()
  one = [
      dp_event.SampledWithoutReplacementDpEvent(
          _N, _K, dp_event.GaussianDpEvent(_SIGMA / 2)
      )
  ]
  if extra is not None:
    one.append(
        dp_event.SampledWithoutReplacementDpEvent(
            _N, _K, dp_event.GaussianDpEvent(extra / 2)
        )
    )
  for _ in range(rounds):
    for event in one:
      ledger.record(event)
  return ledger


class _CrashError(Exception):
  pass


class TrainModelAccountingTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    runtime.set_context('simulation', program=True)

  def tearDown(self):
    runtime.set_context('simulation')  # The suite's context (conftest.py).
    super().tearDown()

  @pytest.mark.slow
  def test_charges_every_round_and_resumes_from_its_file(self):
    root = tempfile.mkdtemp()
    state_dir = os.path.join(root, 'state')
    process = _process()
    accounting = tma.TrainModelAccounting(
        root, population=_N, clients_per_round=_K
    )
    models = tff.program.MemoryReleaseManager()
    metrics = tff.program.MemoryReleaseManager()
    array_clients.train_model(
        process,
        population=_N,
        clients_per_round=_K,
        rounds=3,
        should_discard_round=accounting.should_discard_round,
        state_dir=state_dir,
        train_metrics_manager=accounting.public_metrics(metrics),
        model_output_manager=accounting.model_weights_only(models),
    )
    self.assertEqual(accounting.rounds, 3)
    self.assertTrue(os.path.exists(os.path.join(root, tma.LEDGER_FILE)))
    self.assertEqual(accounting.ledger, _by_hand(3))
    # Only the aggregator's (public) measurements, and only the model.
    for value in metrics.values().values():
      self.assertEqual(list(value), ['aggregator'])
    (released,) = models.values().values()
    self.assertIsInstance(released, tff.learning.models.ModelWeights)

    # A new program (a restart) with the same root resumes both the state and
    # the ledger: 5 rounds in all are charged, not the 2 run after resuming.
    resumed = tma.TrainModelAccounting(
        root, population=_N, clients_per_round=_K
    )
    self.assertEqual(resumed.rounds, 3)
    array_clients.train_model(
        process,
        population=_N,
        clients_per_round=_K,
        rounds=5,
        should_discard_round=resumed.should_discard_round,
        state_dir=state_dir,
    )
    self.assertEqual(resumed.rounds, 5)
    self.assertAllClose(
        resumed.epsilon(1e-5), _by_hand(5).epsilon(1e-5), rtol=1e-9
    )

  @pytest.mark.slow
  def test_an_interruption_after_the_charge_never_under_counts(self):
    # The run stops after round 3's charge, before its state is saved and
    # its metrics released: the resumed run redoes round 3 and charges it
    # again (6 charges for the 5 rounds released), never fewer.
    root = tempfile.mkdtemp()
    state_dir = os.path.join(root, 'state')
    process = _process()
    released = tff.program.MemoryReleaseManager()
    accounting = tma.TrainModelAccounting(
        root, population=_N, clients_per_round=_K
    )

    def crash_after_third(output):
      accounting.should_discard_round(output)
      if accounting.rounds == 3:
        raise _CrashError()
      return False

    with self.assertRaises(_CrashError):
      array_clients.train_model(
          process,
          population=_N,
          clients_per_round=_K,
          rounds=5,
          should_discard_round=crash_after_third,
          state_dir=state_dir,
          train_metrics_manager=released,
          accounting=accounting,
      )
    first = len(released.values())
    self.assertEqual(first, 2)
    resumed = tma.TrainModelAccounting(
        root, population=_N, clients_per_round=_K
    )
    array_clients.train_model(
        process,
        population=_N,
        clients_per_round=_K,
        rounds=5,
        should_discard_round=resumed.should_discard_round,
        state_dir=state_dir,
        train_metrics_manager=released,
    )
    self.assertEqual(sorted(released.values()), [1, 2, 3, 4, 5])
    self.assertEqual(resumed.rounds, 6)

  @pytest.mark.slow
  def test_exact_client_metrics_are_refused_before_any_release(self):
    root = tempfile.mkdtemp()
    accounting = tma.TrainModelAccounting(
        root, population=_N, clients_per_round=_K
    )
    released = tff.program.MemoryReleaseManager()
    default = tff.learning.metrics.sum_then_finalize
    with self.assertRaisesRegex(
        ValueError, r"exact metrics \[.*'loss'.*no_client_metrics"
    ):
      array_clients.train_model(
          _process(default),
          population=_N,
          clients_per_round=_K,
          rounds=2,
          should_discard_round=accounting.should_discard_round,
          train_metrics_manager=released,
      )
    self.assertEqual(released.values(), {})
    self.assertEqual(accounting.rounds, 0)
    self.assertFalse(os.path.exists(os.path.join(root, tma.LEDGER_FILE)))

  @pytest.mark.slow
  def test_debug_measurements_are_refused_before_any_release(self):
    # TFF's debug measurements release exact statistics of the clients'
    # updates (average_client_norm, std_dev_client_norm) beside a charged
    # DP round: refused at the first round, before its charge or release.
    dp = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        _SIGMA, _K, 1.0
    )
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        _model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=tff.learning.add_debug_measurements(dp),
        metrics_aggregator=client_metrics.no_client_metrics,
    )
    root = tempfile.mkdtemp()
    accounting = tma.TrainModelAccounting(
        root, population=_N, clients_per_round=_K
    )
    released = tff.program.MemoryReleaseManager()
    with self.assertRaisesRegex(ValueError, 'average_client_norm'):
      array_clients.train_model(
          process,
          population=_N,
          clients_per_round=_K,
          rounds=2,
          should_discard_round=accounting.should_discard_round,
          train_metrics_manager=accounting.public_metrics(released),
      )
    self.assertEqual(released.values(), {})
    self.assertEqual(accounting.rounds, 0)

  def test_public_metrics_refuses_debug_measurements_on_its_own(self):
    # Without should_discard_round (which refuses them first), the filter
    # refuses them too rather than drop them silently.
    accounting = tma.TrainModelAccounting(
        tempfile.mkdtemp(), population=_N, clients_per_round=_K
    )
    released = tff.program.MemoryReleaseManager()
    metrics = {'aggregator': {'average_client_norm': 0.3, 'dp': ()}}
    with self.assertRaisesRegex(ValueError, 'average_client_norm'):
      asyncio.run(accounting.public_metrics(released).release(metrics, 1))
    self.assertEqual(released.values(), {})

  @pytest.mark.slow
  def test_a_k_other_than_the_draws_is_refused_before_any_round(self):
    # TrainModelAccounting(clients_per_round=2) with train_per_round_clients
    # 5 would charge rounds of 2 where 5 were drawn (an under-count).
    root = tempfile.mkdtemp()
    accounting = tma.TrainModelAccounting(
        root, population=_N, clients_per_round=_K
    )
    released = tff.program.MemoryReleaseManager()

    def program(k, source):
      return tff.learning.programs.train_model(
          train_process=_process(),
          train_data_source=source,
          train_per_round_clients=k,
          train_total_rounds=2,
          should_discard_round=accounting.should_discard_round,
          program_state_manager=accounting.program_state_manager(),
          model_output_manager=tff.program.MemoryReleaseManager(),
          train_metrics_manager=released,
          evaluation_manager=None,
          evaluation_periodicity=1,
      )

    with self.assertRaisesRegex(
        ValueError, r'train_per_round_clients=5 .* clients_per_round=2'
    ):
      accounting.run(program(5, array_clients.source(_N)))
    with self.assertRaisesRegex(
        ValueError, r'holds 7 clients .* population of 6'
    ):
      accounting.run(program(_K, array_clients.source(7)))
    # Without run: the checked data source refuses the draw, and an
    # unchecked one is refused at the first charge.
    with self.assertRaisesRegex(
        ValueError, r'draws 5 clients .* clients_per_round=2'
    ):
      asyncio.run(program(5, accounting.data_source(array_clients.source(_N))))
    with self.assertRaisesRegex(ValueError, 'were not checked'):
      asyncio.run(program(_K, array_clients.source(_N)))
    self.assertEqual(released.values(), {})
    self.assertEqual(accounting.rounds, 0)

  @pytest.mark.slow
  def test_an_evaluation_manager_is_warned_about(self):
    accounting = tma.TrainModelAccounting(
        tempfile.mkdtemp(), population=_N, clients_per_round=_K
    )
    with mock.patch('builtins.print') as printed:
      accounting.run(
          tff.learning.programs.train_model(
              train_process=_process(),
              train_data_source=array_clients.source(_N),
              train_per_round_clients=_K,
              train_total_rounds=1,
              should_discard_round=accounting.should_discard_round,
              program_state_manager=accounting.program_state_manager(),
              model_output_manager=tff.program.MemoryReleaseManager(),
              evaluation_manager=mock.AsyncMock(),
              evaluation_periodicity=1,
          )
      )
    lines = ' '.join(str(c.args[0]) for c in printed.call_args_list)
    self.assertIn(
        "warning: train_model's evaluation_manager releases the "
        'exact metrics of its evaluation clients',
        lines,
    )
    self.assertEqual(accounting.rounds, 1)

  @pytest.mark.slow
  def test_noised_client_metrics_are_charged_and_released(self):
    metrics = client_metrics.dp_client_metrics(2.0, _K, loss_bound=5.0)
    uncharged = tma.TrainModelAccounting(
        tempfile.mkdtemp(), population=_N, clients_per_round=_K
    )
    with self.assertRaisesRegex(ValueError, 'pass its DpClientMetrics'):
      array_clients.train_model(
          _process(metrics),
          population=_N,
          clients_per_round=_K,
          rounds=1,
          should_discard_round=uncharged.should_discard_round,
      )
    accounting = tma.TrainModelAccounting(
        tempfile.mkdtemp(),
        population=_N,
        clients_per_round=_K,
        client_metrics=metrics,
    )
    released = tff.program.MemoryReleaseManager()
    array_clients.train_model(
        _process(metrics),
        population=_N,
        clients_per_round=_K,
        rounds=2,
        should_discard_round=accounting.should_discard_round,
        train_metrics_manager=accounting.public_metrics(released),
    )
    self.assertEqual(accounting.ledger, _by_hand(2, extra=2.0))
    value = released.values()[2]
    self.assertCountEqual(
        value['model_metrics'],
        [
            client_metrics.DP_LOSS,
            client_metrics.DP_ACCURACY,
            client_metrics.DP_CLIENTS,
        ],
    )

  def test_bad_arguments_fail_in_one_line(self):
    root = tempfile.mkdtemp()
    with self.assertRaisesRegex(ValueError, 'exceeds population=2'):
      tma.TrainModelAccounting(root, population=2, clients_per_round=3)
    with self.assertRaisesRegex(TypeError, 'DpClientMetrics'):
      tma.TrainModelAccounting(
          root,
          population=2,
          clients_per_round=1,
          client_metrics=client_metrics.no_client_metrics,
      )
    files_config = {
        'population': 6,
        'clients_per_round': 2,
        'client_metrics_noise_multiplier': None,
    }
    tff_priv_file = os.path.join(root, tma.LEDGER_FILE)
    with open(tff_priv_file, 'w') as f:
      json.dump(
          {
              'config': files_config,
              'rounds': 0,
              'ledger': ledger_lib.PrivacyLedger().to_json(),
          },
          f,
      )
    with self.assertRaisesRegex(ValueError, 'resume with the same arguments'):
      tma.TrainModelAccounting(root, population=6, clients_per_round=3)


_DRAWS = []  # (seed, round, clients) of each `_LoggedSampler.sample`.


class _LoggedSampler(sampling.StreamSampler):

  def sample(self, round_num):
    drawn = super().sample(round_num)
    _DRAWS.append((self.seed, round_num, tuple(drawn)))
    return drawn


def _stream_program(
    factory, accounting, source, rounds, manager=None, should_discard_round=None
):
  """train_model of FedAvg with `factory`, through `accounting`."""
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      tiny_models.softmax_model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=factory,
      metrics_aggregator=client_metrics.no_client_metrics,
  )
  return tff.learning.programs.train_model(
      train_process=process,
      train_data_source=source,
      train_per_round_clients=_K,
      train_total_rounds=rounds,
      should_discard_round=(
          should_discard_round or accounting.should_discard_round
      ),
      program_state_manager=manager or accounting.program_state_manager(),
      model_output_manager=tff.program.MemoryReleaseManager(),
      train_metrics_manager=accounting.public_metrics(
          tff.program.MemoryReleaseManager()
      ),
      evaluation_manager=None,
      evaluation_periodicity=1,
  )


def _arrays(population=_N):
  return [array_clients.client_arrays(s) for s in range(population)]


def _charged_counts(ledger):
  """Each charged round's count of its stream's event (1: a stream starts)."""
  return [event.count for event, n in ledger.entries for _ in range(n)]


@pytest.mark.slow
class StreamsInTrainModelTest(tf.test.TestCase):
  """BLT, BandMF and DP-FTRL in train_model, drawn by their samplers."""

  def setUp(self):
    super().setUp()
    runtime.set_context('simulation', program=True)

  def tearDown(self):
    runtime.set_context('simulation')
    super().tearDown()

  def test_blt_is_charged_as_in_the_own_loop_and_resumes_its_schedule(self):
    # Streams of N // K = 3 rounds ('epoch'): charged at rounds 1 and 4.
    factory = blt.BLTFactory.calibrated(
        4.0, total_rounds=5, population=_N, clients_per_round=_K
    )
    root = tempfile.mkdtemp()
    ledger_file = os.path.join(root, tma.LEDGER_FILE)
    # train_model's own uniform draw: refused before round 1, in one line.
    uniform = tma.TrainModelAccounting(
        root, population=_N, clients_per_round=_K
    )
    with self.assertRaisesRegex(
        ValueError,
        r'^BLTFactory needs its clients drawn by StreamSampler: '
        r'train_model draws K of N uniformly each round, which is not the '
        r'\(k, b\) participation it was built for [^\n]*own_loop.py$',
    ):
      uniform.run(
          _stream_program(factory, uniform, array_clients.source(_N), 5)
      )
    self.assertFalse(os.path.exists(ledger_file))

    del _DRAWS[:]
    accounting = tma.TrainModelAccounting(
        root, population=_N, clients_per_round=_K, aggregator=factory
    )

    def crash_after_second(output):
      accounting.should_discard_round(output)
      if accounting.rounds == 2:
        raise _CrashError()
      return False

    source = data_sources.ClientArraysSource(
        _arrays(), 3, sampler=_LoggedSampler(_N, _K)
    )
    with self.assertRaises(_CrashError):
      accounting.run(
          _stream_program(
              factory,
              accounting,
              source,
              5,
              should_discard_round=crash_after_second,
          )
      )
    # Resumed in a new program with a new source (a new seed): the
    # checkpointed iterator continues the first schedule at round 2 (charged,
    # not saved: run again).
    resumed = tma.TrainModelAccounting(
        root, population=_N, clients_per_round=_K, aggregator=factory
    )
    resumed.run(
        _stream_program(
            factory,
            resumed,
            data_sources.ClientArraysSource(
                _arrays(), 3, sampler=_LoggedSampler(_N, _K)
            ),
            5,
        )
    )
    seed = _DRAWS[0][0]
    schedule = sampling.StreamSampler(_N, _K, seed=seed)
    self.assertEqual(
        _DRAWS,
        [(seed, r, tuple(schedule.sample(r))) for r in (1, 2, 2, 3, 4, 5)],
    )
    self.assertEqual(resumed.rounds, 6)
    self.assertEqual(_charged_counts(resumed.ledger), [1, 0, 0, 0, 1, 0])
    self.assertEqual(resumed.ledger.neighboring_relation, 'replace_special')
    # Two streams, as the own loop charges them: the calibrated eps.
    self.assertAllClose(resumed.epsilon(1e-5), 4.0, rtol=1e-3)

  def test_bandmf_and_dp_ftrl_are_charged_as_in_the_own_loop(self):
    bands = bandmf.BandMFFactory.calibrated(
        4.0, total_rounds=4, population=_N, clients_per_round=_K, bands=2
    )
    tree = dp_ftrl.TreeRestartFactory.calibrated(
        4.0, total_rounds=3, population=_N, clients_per_round=_K
    )
    for factory, sampler, counts in (
        (bands, sampling.BandSampler(_N, _K, 2), [1, 0, 1, 0]),
        (tree, sampling.StreamSampler(_N, _K, 'epoch'), [1, 0, 0]),
    ):
      root = tempfile.mkdtemp()
      accounting = tma.TrainModelAccounting(
          root, population=_N, clients_per_round=_K, aggregator=factory
      )
      source = data_sources.ClientArraysSource(_arrays(), 3, sampler=sampler)
      # TFF's own state manager saves after the release: refused.
      with self.assertRaisesRegex(ValueError, 'must not be released twice'):
        accounting.run(
            _stream_program(
                factory,
                accounting,
                source,
                len(counts),
                manager=tff.program.FileProgramStateManager(root),
            )
        )
      accounting.run(_stream_program(factory, accounting, source, len(counts)))
      self.assertEqual(_charged_counts(accounting.ledger), counts)
      self.assertAllClose(accounting.epsilon(1e-5), 4.0, rtol=1e-3)
    # The wrong sampler for the factory: refused before round 1.
    accounting = tma.TrainModelAccounting(
        tempfile.mkdtemp(),
        population=_N,
        clients_per_round=_K,
        aggregator=bands,
    )
    with self.assertRaisesRegex(
        ValueError,
        r'BandSampler\(bands=1\) but '
        'BandMFFactory charges cycles of bands=2',
    ):
      accounting.run(
          _stream_program(
              bands,
              accounting,
              data_sources.ClientArraysSource(
                  _arrays(), 3, sampler=sampling.BandSampler(_N, _K, 1)
              ),
              4,
          )
      )
    self.assertEqual(accounting.rounds, 0)


class ScheduleCheckTest(tf.test.TestCase):
  """Which samplers draw what a stream factory's event assumes."""

  def _blt(self, rounds_per_stream, participations, min_sep):
    return blt.BLTFactory(
        1.0, 2, 1.0, [0.5], [0.5], rounds_per_stream, participations, min_sep
    )

  def test_a_sampler_meets_the_streams_it_is_checked_against(self):
    epoch = sampling.StreamSampler(12, 2, 'epoch')  # Epochs of 6 rounds.
    cyclic = sampling.StreamSampler(12, 2, 'cyclic')  # Every 6 rounds.
    ok = [
        (epoch, self._blt(6, 1, 1)),  # calibrated(participation='epoch').
        (cyclic, self._blt(6, 1, 1)),
        (cyclic, self._blt(20, 4, 6)),  # calibrated('cyclic'), T = 20.
        (epoch, self._blt(3, 1, 1)),  # Streams inside an epoch.
        (epoch, dp_ftrl.TreeRestartFactory(1.0, 2, 1.0, 6)),
        (epoch, dp_ftrl.TreeRestartFactory(1.0, 2, 1.0, 2)),
        (cyclic, dp_ftrl.TreeRestartFactory(1.0, 2, 1.0, 6)),
    ]
    for sampler, factory in ok:
      self.assertIsNone(tma._schedule_error(sampler, factory, 12, 2))
    refused = [
        # An epoch's last round and the next epoch's first are 1 apart.
        (
            epoch,
            self._blt(20, 4, 6),
            r"'epoch'\) lets a client take part 4 "
            r'times, 1 round\(s\) apart, in a BLTFactory stream of 20 rounds, '
            'whose event charges at most 4, 6 apart',
        ),
        (epoch, self._blt(4, 1, 1), 'take part 2 times'),  # Across epochs.
        (cyclic, self._blt(7, 1, 1), 'take part 2 times'),
        (
            epoch,
            dp_ftrl.TreeRestartFactory(1.0, 2, 1.0, 4),
            'TreeRestartFactory stream of 4 rounds',
        ),
        (
            sampling.StreamSampler(10, 2),
            self._blt(5, 1, 1),
            'draws 2 of 10 clients a round but this accounting charges 2 of 12',
        ),
        (
            sampling.BandSampler(12, 2, 2),
            self._blt(6, 1, 1),
            'needs its clients drawn by StreamSampler, not BandSampler',
        ),
    ]
    for sampler, factory, message in refused:
      self.assertRegex(tma._schedule_error(sampler, factory, 12, 2), message)
    bands = bandmf.BandMFFactory(1.0, 2, 1.0, [1.0, 0.5], 2 / 6)
    self.assertIsNone(
        tma._schedule_error(sampling.BandSampler(12, 2, 2), bands, 12, 2)
    )
    self.assertRegex(
        tma._schedule_error(epoch, bands, 12, 2),
        'needs its clients drawn by BandSampler',
    )
    self.assertRegex(
        tma._schedule_error(sampling.BandSampler(12, 2, 3), bands, 12, 2),
        r'BandSampler\(bands=3\) but BandMFFactory',
    )

  def test_a_sampled_source_is_refused_outside_run(self):
    accounting = tma.TrainModelAccounting(
        tempfile.mkdtemp(),
        population=_N,
        clients_per_round=_K,
        aggregator=self._blt(3, 1, 1),
    )
    source = data_sources.ClientArraysSource(
        _arrays(), 3, sampler=sampling.StreamSampler(_N, _K)
    )
    with self.assertRaisesRegex(ValueError, 'runs through accounting.run'):
      accounting.data_source(source)
    with self.assertRaisesRegex(TypeError, 'aggregator is for BLTFactory'):
      tma.TrainModelAccounting(
          tempfile.mkdtemp(),
          population=_N,
          clients_per_round=_K,
          aggregator=smp.SparsifiedSecureSumFactory(_SIGMA, 1.0, 0.5, _K),
      )


class ClientArraysSourceTest(tf.test.TestCase):

  def test_draws_k_distinct_clients_from_a_secret_seed(self):
    clients = [array_clients.client_arrays(s) for s in range(50)]
    source = data_sources.ClientArraysSource(clients, batch_size=3)
    self.assertEqual(source.population, 50)

    def draws(iterator):
      return [
          tuple(
              sorted(float(next(iter(d))[0][0, 0]) for d in iterator.select(3))
          )
          for _ in range(5)
      ]

    first, second = draws(source.iterator()), draws(source.iterator())
    self.assertTrue(all(len(set(d)) == 3 for d in first))
    # Two iterators share no seed: the chance that 5 draws of 3 of 50
    # coincide is (1 / C(50, 3))^5 < 1e-20.
    self.assertNotEqual(first, second)

  def test_a_checkpointed_iterator_continues_its_stream(self):
    clients = [array_clients.client_arrays(s) for s in range(20)]
    iterator = data_sources.ClientArraysSource(clients, 3).iterator()
    iterator.select(2)
    restored = data_sources.ClientArraysIterator.from_bytes(iterator.to_bytes())

    def firsts(it):
      return [float(next(iter(d))[0][0, 0]) for d in it.select(4)]

    self.assertEqual(firsts(iterator), firsts(restored))
    self.assertEqual(iterator.federated_type, restored.federated_type)

  def test_a_sampler_draws_its_schedule_across_checkpoints(self):
    sampler = sampling.StreamSampler(20, 4, 'cyclic')
    iterator = data_sources.ClientArraysSource(
        [array_clients.client_arrays(s) for s in range(20)], 3, sampler=sampler
    ).iterator()

    def firsts(datasets):
      return [float(next(iter(d))[0][0, 0]) for d in datasets]

    def expected(round_num):
      return [
          float(array_clients.client_arrays(i)[0][0, 0])
          for i in sampler.sample(round_num)
      ]

    self.assertEqual(firsts(iterator.select(4)), expected(1))
    restored = data_sources.ClientArraysIterator.from_bytes(iterator.to_bytes())
    self.assertEqual(restored.rounds_drawn, 1)
    self.assertEqual(restored.sampler.seed, sampler.seed)
    self.assertEqual(firsts(restored.select(4)), expected(2))
    with self.assertRaisesRegex(
        ValueError,
        r'draws by StreamSampler of clients_per_round=4: give '
        'train_per_round_clients=4',
    ):
      restored.select(3)
    # BandMF's rounds: a Poisson draw inside the round's group.
    bands = sampling.BandSampler(20, 4, 2)
    iterator = data_sources.ClientArraysSource(
        [array_clients.client_arrays(s) for s in range(20)], 3, sampler=bands
    ).iterator()
    for r in range(1, 4):
      self.assertEqual(
          firsts(iterator.select(4)),
          [
              float(array_clients.client_arrays(i)[0][0, 0])
              for i in bands.sample(r)
          ],
      )

  def test_bad_arguments_fail_in_one_line(self):
    with self.assertRaisesRegex(ValueError, 'clients is empty'):
      data_sources.ClientArraysSource([], 3)
    with self.assertRaisesRegex(
        ValueError, 'draws from 7 clients but the ' 'source holds 6'
    ):
      data_sources.ClientArraysSource(
          _arrays(), 3, sampler=sampling.StreamSampler(7, 2)
      )
    with self.assertRaisesRegex(TypeError, 'StreamSampler or BandSampler'):
      data_sources.ClientArraysSource(_arrays(), 3, sampler=object())
    source = data_sources.ClientArraysSource(
        [array_clients.client_arrays(0)], 3
    )
    with self.assertRaisesRegex(ValueError, 'lower train_per_round_clients'):
      source.iterator().select(2)


@pytest.mark.slow
class TrainModelKilledTest(tf.test.TestCase):
  """`train_model` killed (SIGKILL) at several points, then resumed."""

  def _run(self, root, kill_at=None, signal_name='SIGKILL'):
    args = [
        sys.executable,
        '-m',
        'tests.program.train_model_run',
        '--root',
        root,
        '--rounds',
        '5',
        '--signal',
        signal_name,
    ]
    if kill_at:
      args += ['--kill_at', kill_at]
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        cwd=script_runs.ROOT,
        env=script_runs.env(),
        timeout=script_runs.TIMEOUT,
        check=False,
    )

  def test_the_ledger_never_counts_fewer_rounds_than_were_released(self):
    root = tempfile.mkdtemp()
    state = os.path.join(root, 'state')
    # Killed: right after round 2's charge; right after round 3's state save
    # completes; right after round 4's metrics release. Each kill may leave
    # charged rounds whose state was not saved: the resumed run trains
    # (and charges) them again. The saves are on disk when train_model's
    # save call returns, so that is at most the one round in flight.
    over_counts, before = {}, 0
    for kill_at in ('charged:2', 'saved:3', 'released:4', None):
      result = self._run(root, kill_at)
      if kill_at:
        self.assertEqual(
            result.returncode, -signal.SIGKILL, result.stderr[-2000:]
        )
      else:
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
      with open(os.path.join(root, 'released.log')) as f:
        released = len(f.read().split())
      charged = tma.TrainModelAccounting(
          root, population=_N, clients_per_round=_K
      ).rounds
      self.assertGreaterEqual(charged, released, kill_at)
      # Every round run was charged.
      with open(os.path.join(root, 'ran.log')) as f:
        self.assertEqual(charged, len(f.read().split()), kill_at)
      saved = max(
          int(v.rsplit('_', 1)[1])
          for v in os.listdir(state)
          if v.rsplit('_', 1)[1].isdigit()
      )
      self.assertFalse([v for v in os.listdir(state) if 'temp' in v])
      over_counts[kill_at] = (charged - saved) - before
      before = charged - saved
    # Round 2 charged, not saved: once; after a save or a release: none.
    self.assertEqual(
        over_counts, {'charged:2': 1, 'saved:3': 0, 'released:4': 0, None: 0}
    )
    self.assertEqual(charged, 6)
    with open(os.path.join(root, 'released.log')) as f:
      self.assertIn('5', f.read().split())

  def test_sigint_and_sigterm_stop_in_one_line_then_resume(self):
    root = tempfile.mkdtemp()
    for signal_name, kill_at in (
        ('SIGINT', 'charged:2'),
        ('SIGTERM', 'released:3'),
    ):
      result = self._run(root, kill_at, signal_name)
      signum = signal.Signals[signal_name]
      self.assertEqual(result.returncode, 128 + signum, result.stderr[-2000:])
      # One line of its own (TF's C++ start-up lines aside).
      self.assertEqual(
          script_runs.last_line(result.stderr),
          f'train_model_run: stopped by {signal_name}; the ledger '
          f'({"2" if kill_at == "charged:2" else "4"} charged rounds) and '
          f'the program state in {root} are kept: run the same command to '
          'resume',
      )
      self.assertNotIn('Traceback', result.stderr)
      self.assertNotIn('Exception ignored', result.stderr)
      state = os.path.join(root, 'state')
      self.assertFalse([v for v in os.listdir(state) if 'temp' in v])
    result = self._run(root)
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    # Round 2 ran twice (stopped between its charge and its save): planned
    # (5 rounds) and spent (6 charged) are told apart at the end.
    self.assertRegex(
        script_runs.last_line(result.stderr),
        r'^train_model_run: epsilon \S+ spent at delta 1e-05 over 6 charged '
        r'rounds, planned \S+ for the 5 rounds trained',
    )


if __name__ == '__main__':
  tf.test.main()
