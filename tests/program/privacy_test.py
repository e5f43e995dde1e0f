"""Tests for program.privacy (a run's accounting for both adversaries)."""

import math

from absl.testing import parameterized
from dp_accounting import dp_event
import pytest
import tensorflow as tf

from tff_priv.accounting import accountants
from tff_priv.accounting import guarantees
from tff_priv.accounting import sampling as accounting_sampling
from tff_priv.accounting import udp as udp_accounting
from tff_priv.learning import udp
from tff_priv.program import privacy
from tff_priv.program import sampling as sampling_lib

_LOCAL = guarantees.Guarantee('example', 'local', 'replace_one')
_SECURE = guarantees.Guarantee('client', 'secure_sum', 'add_or_remove_one')
_CENTRAL = guarantees.TFF_DP_FACTORY_GUARANTEE


def _eps(event, relation, delta=1e-5):
  return (
      accountants.make_accountant('rdp', relation)
      .compose(event)
      .get_epsilon(delta)
  )


def _run(guarantee, sampling, event, rounds, budget=None, seed=0):
  run = privacy.RunPrivacy.create(
      guarantee, sampling.ledger_sampling(), 1e-5, budget
  )
  ids = [f'c{i}' for i in range(sampling.num_clients)]
  taken = dict.fromkeys(ids, 0)
  for round_num in range(1, rounds + 1):
    chosen = run.admit(sampling.sample(ids, seed, round_num), event)
    run.charge(event, chosen)
    for c in chosen:
      taken[c] += 1
  return run, taken


class RunPrivacyTest(tf.test.TestCase, parameterized.TestCase):

  def test_local_noise_server_view_is_each_clients_participations(self):
    # udp-like: fixed-size sampling, per-upload event; each client's
    # server-view eps is the unamplified composition of its own rounds.
    sampling = sampling_lib.ClientSampling('fixed', 10, 4)
    event = dp_event.GaussianDpEvent(3.0)
    run, taken = _run(_LOCAL, sampling, event, rounds=12)
    for client, count in taken.items():
      expected = (
          _eps(dp_event.SelfComposedDpEvent(event, count), 'replace_one')
          if count
          else 0.0
      )
      self.assertAllClose(run.server.epsilon(client), expected, rtol=1e-12)
    worst = max(taken.values())
    self.assertAllClose(
        run.server_epsilon(),
        _eps(dp_event.SelfComposedDpEvent(event, worst), 'replace_one'),
    )
    # The analyst's figure: the smaller of the amplified ledger and the worst
    # client (both bound the same release).
    amplified = run.analyst.epsilon(1e-5)
    self.assertAllClose(
        run.analyst_epsilon(), min(amplified, run.server_epsilon())
    )

  def test_large_sampling_rate_takes_the_unamplified_bound(self):
    # 30 of 50: dp_accounting's fixed-size sampling bound under replace-one
    # exceeds the unsampled composition, which then is the analyst's figure.
    sampling = sampling_lib.ClientSampling('fixed', 50, 30)
    event = dp_event.GaussianDpEvent(2.0)
    run, _ = _run(_LOCAL, sampling, event, rounds=20)
    self.assertLess(run.server_epsilon(), run.analyst.epsilon(1e-5))
    self.assertEqual(run.analyst_epsilon(), run.server_epsilon())

  def test_secure_sum_server_view_halves_the_multiplier(self):
    sampling = sampling_lib.ClientSampling('poisson', 20, 5)
    event = dp_event.GaussianDpEvent(4.0)
    run, taken = _run(_SECURE, sampling, event, rounds=10)
    worst = max(taken.values())
    self.assertAllClose(
        run.server_epsilon(),
        _eps(
            dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(2.0), worst),
            'replace_one',
        ),
    )
    # Both bound the released models (removing a client is replacing its
    # update by 0): the analyst's figure is the smaller.
    self.assertEqual(
        run.analyst_epsilon(),
        min(run.analyst.epsilon(1e-5), run.server_epsilon()),
    )

  def test_central_noise_has_no_server_guarantee(self):
    run = privacy.RunPrivacy.create(
        _CENTRAL, accounting_sampling.Sampling.poisson(0.1), 1e-5
    )
    self.assertIsNone(run.server)
    self.assertIsNone(run.server_epsilon())
    server = [g for g in run.report() if g['adversary'] == 'server'][0]
    self.assertEqual(server['epsilon'], 'inf')
    with self.assertRaisesRegex(ValueError, 'server budget'):
      privacy.RunPrivacy.create(
          _CENTRAL,
          accounting_sampling.Sampling.poisson(0.1),
          1e-5,
          budget_epsilon=1.0,
      )

  @parameterized.parameters(1.0, 4.0)
  def test_budget_filter_never_lets_a_client_exceed_it(self, budget):
    sampling = sampling_lib.ClientSampling('fixed', 8, 6)
    event = dp_event.GaussianDpEvent(3.0)
    run, taken = _run(_LOCAL, sampling, event, rounds=40, budget=budget)
    self.assertLessEqual(run.server_epsilon(), budget)
    self.assertGreater(run.server.num_excluded, 0)
    # Filtering changes the sampling: the analyst's figure is the worst
    # client's then.
    self.assertEqual(run.analyst_epsilon(), run.server_epsilon())
    self.assertTrue(all(run.server.epsilon(c) <= budget for c in taken))

  def test_filter_without_amplification_and_the_admitted_event(self):
    sampling = sampling_lib.ClientSampling('poisson', 8, 6)
    run, _ = _run(
        _SECURE, sampling, dp_event.GaussianDpEvent(3.0), rounds=30, budget=2.0
    )
    self.assertGreater(run.server.num_excluded, 0)
    self.assertEqual(run.analyst_epsilon(), run.server_epsilon())
    # A round must release the event its clients were admitted for.
    chosen = run.admit(['c0'], dp_event.GaussianDpEvent(3.0))
    with self.assertRaisesRegex(RuntimeError, 'admitted'):
      run.charge(dp_event.GaussianDpEvent(1.0), chosen)

  def test_report_names_unit_adversary_relation(self):
    sampling = sampling_lib.ClientSampling('fixed', 10, 4)
    run, _ = _run(_LOCAL, sampling, dp_event.GaussianDpEvent(3.0), rounds=3)
    entries = run.report()
    self.assertEqual([e['adversary'] for e in entries], ['analyst', 'server'])
    for entry in entries:
      for key in (
          'unit',
          'adversary',
          'neighboring_relation',
          'accountant',
          'epsilon',
          'delta',
          'meaning',
      ):
        self.assertIn(key, entry)
      self.assertEqual(entry['unit'], 'example')
    self.assertEqual(entries[1]['neighboring_relation'], 'replace_one')
    # Local noise: the analyst's figure may be the worst client's server
    # view, which depends on the participation the run realised.
    self.assertIn(
        'given the participation this run realised', entries[0]['accountant']
    )
    not_private = privacy.RunPrivacy.create(
        None, accounting_sampling.Sampling.none(), 1e-5
    )
    not_private.charge(None, ['a'])
    self.assertTrue(math.isinf(not_private.analyst_epsilon()))
    self.assertEqual(not_private.report()[0]['epsilon'], 'inf')

  def test_json_round_trip(self):
    sampling = sampling_lib.ClientSampling('poisson', 20, 5)
    run, _ = _run(_SECURE, sampling, dp_event.GaussianDpEvent(2.0), rounds=4)
    again = privacy.RunPrivacy.create(_SECURE, sampling.ledger_sampling(), 1e-5)
    again.restore(run.to_json())
    self.assertEqual(again.analyst, run.analyst)
    self.assertEqual(again.server, run.server)
    self.assertEqual(again.analyst_epsilon(), run.analyst_epsilon())
    wrong = privacy.RunPrivacy.create(
        _CENTRAL, sampling.ledger_sampling(), 1e-5
    )
    with self.assertRaisesRegex(ValueError, 'another mechanism'):
      wrong.restore(run.to_json())


class AdaptiveRunPrivacyTest(tf.test.TestCase):
  """A CRD run reports its schedule's bounds from round 1 on."""

  @pytest.mark.slow
  def test_reports_the_filter_on_every_round_and_path(self):
    delta, sens = 1e-5, 0.05
    sampling = sampling_lib.ClientSampling('fixed', 10, 3)
    schedule = udp.crd_schedule(
        4.0, delta, sens, 6, table_size=32, sampling=sampling.ledger_sampling()
    )
    bounds = udp_accounting.crd_bounds(schedule, sens)
    expected = min(b.epsilon(delta) for b in bounds)
    ids = [f'c{i}' for i in range(10)]
    for stalls in ((), (1, 2, 3), (5,)):
      run = privacy.RunPrivacy.create(
          _LOCAL, sampling.ledger_sampling(), delta, adaptive=bounds
      )
      state = schedule.initial_state()
      round_num = 0
      while not bool(schedule.is_done(state)):
        round_num += 1
        sigma, cost = schedule.round_noise(state)
        event = dp_event.GaussianDpEvent(float(sigma) / sens)
        chosen = run.admit(sampling.sample(ids, 0, round_num), event)
        run.charge(event, chosen)
        state = schedule.after_round(state, cost)
        if round_num in stalls:
          state = schedule.discount(state, 0.5)
        self.assertEqual(run.analyst_epsilon(), expected)
        self.assertEqual(run.server_epsilon(), bounds[1].epsilon(delta))
        self.assertLessEqual(run.analyst.epsilon(delta), expected + 1e-9)
        self.assertLessEqual(
            run.server.max_epsilon(), run.server_epsilon() + 1e-9
        )
      analyst, server = run.report()
      self.assertIn('adaptively', analyst['accountant'])
      self.assertIn('Renyi filter', analyst['accountant'])
      self.assertEqual(analyst['epsilon'], expected)
      self.assertEqual(server['epsilon'], bounds[1].epsilon(delta))
      self.assertIn('adaptively', server['accountant'])
    fixed = privacy.RunPrivacy.create(_LOCAL, sampling.ledger_sampling(), delta)
    self.assertIn('fixed before the run', fixed.report()[0]['accountant'])

  def test_a_server_budget_is_refused_with_adaptive_noise(self):
    bounds = udp_accounting.crd_bounds(
        udp.crd_schedule(4.0, 1e-5, 0.05, 8), 0.05
    )
    with self.assertRaisesRegex(ValueError, 'server_budget or crd_beta'):
      privacy.RunPrivacy.create(
          _LOCAL,
          accounting_sampling.Sampling.none(),
          1e-5,
          1.0,
          adaptive=bounds,
      )


if __name__ == '__main__':
  tf.test.main()
