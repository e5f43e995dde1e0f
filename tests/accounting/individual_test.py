"""Tests for tff_priv.accounting.individual (per-client server-view ledgers)."""

from absl.testing import parameterized
from dp_accounting import dp_event
import numpy as np
import tensorflow as tf

from tff_priv.accounting import accountants
from tff_priv.accounting import individual


def _eps(event, count, delta):
  acc = accountants.make_accountant('rdp', 'replace_one')
  return acc.compose(dp_event.SelfComposedDpEvent(event, count)).get_epsilon(
      delta
  )


class IndividualLedgerTest(tf.test.TestCase, parameterized.TestCase):

  def test_each_client_is_charged_its_own_participations(self):
    # Clients take part in a random subset of 30 rounds: each one's eps is
    # dp_accounting's composition of its participations, no amplification.
    delta, event = 1e-5, dp_event.GaussianDpEvent(3.0)
    ledger = individual.IndividualLedger(delta)
    rng = np.random.default_rng(0)
    counts = dict.fromkeys(range(20), 0)
    for _ in range(30):
      chosen = [c for c in counts if rng.random() < 0.3]
      ledger.record(chosen, event)
      for c in chosen:
        counts[c] += 1
    for c, count in counts.items():
      expected = _eps(event, count, delta) if count else 0.0
      self.assertAllClose(ledger.epsilon(c), expected, rtol=1e-12)
      self.assertEqual(ledger.participations(c), count)
    most = max(counts.values())
    self.assertAllClose(ledger.max_epsilon(), _eps(event, most, delta))

  def test_heterogeneous_rounds(self):
    ledger = individual.IndividualLedger(1e-5)
    a, b = dp_event.GaussianDpEvent(2.0), dp_event.GaussianDpEvent(5.0)
    ledger.record(['x'], a)
    ledger.record(['x', 'y'], b)
    ledger.record(['x'], b)
    acc = accountants.make_accountant('rdp', 'replace_one')
    acc.compose(a).compose(b, 2)
    self.assertAllClose(ledger.epsilon('x'), acc.get_epsilon(1e-5))
    self.assertAllClose(ledger.epsilon('y'), _eps(b, 1, 1e-5))

  @parameterized.parameters(0.5, 2.0, 8.0)
  def test_budget_filter_never_lets_a_client_exceed_the_target(self, budget):
    delta, event = 1e-5, dp_event.GaussianDpEvent(4.0)
    ledger = individual.IndividualLedger(delta, budget_epsilon=budget)
    rng = np.random.default_rng(1)
    clients = list(range(50))
    for _ in range(200):
      sampled = [c for c in clients if rng.random() < 0.5]
      chosen = ledger.filter(sampled, event)
      ledger.record(chosen, event)
      self.assertLessEqual(ledger.max_epsilon(), budget)
    # The filter binds: every client reached the most rounds the budget
    # allows, and one more would exceed it.
    allowed = (
        max(k for k in range(1, 200) if _eps(event, k, delta) <= budget)
        if (_eps(event, 1, delta) <= budget)
        else 0
    )
    self.assertEqual(max(ledger.participations(c) for c in clients), allowed)
    self.assertGreater(ledger.num_excluded, 0)
    self.assertFalse(
        ledger.admits(0, event) and ledger.participations(0) == allowed
    )

  def test_json_round_trip(self):
    ledger = individual.IndividualLedger(1e-6, budget_epsilon=3.0)
    ledger.record(['a', 'b'], dp_event.GaussianDpEvent(2.0))
    ledger.filter(['a'], dp_event.GaussianDpEvent(0.1))
    again = individual.IndividualLedger.from_json(ledger.to_json())
    self.assertEqual(again, ledger)
    self.assertEqual(again.epsilon('a'), ledger.epsilon('a'))
    self.assertEqual(again.report(), ledger.report())

  def test_the_worst_client_is_the_worst_of_every_client(self):
    # The ledger counts clients per history (its cost does not grow with the
    # population); its worst eps and participations are those of the
    # clients one by one, also after a round trip through JSON.
    rng = np.random.default_rng(5)
    events = [dp_event.GaussianDpEvent(z) for z in (1.5, 3.0)]
    ledger = individual.IndividualLedger(1e-5)
    for r in range(30):
      drawn = rng.choice(40, 6, replace=False)
      ledger.record([f'c{i}' for i in drawn], events[r % 2 == 0 and r > 9])
    clients = [f'c{i}' for i in range(40)]
    worst = max(ledger.epsilon(c) for c in clients)
    self.assertEqual(ledger.max_epsilon(), worst)
    self.assertEqual(
        ledger.report()['max_participations'],
        max(ledger.participations(c) for c in clients),
    )
    again = individual.IndividualLedger.from_json(ledger.to_json())
    again.record(['c0'], events[0])
    ledger.record(['c0'], events[0])
    self.assertEqual(again.max_epsilon(), ledger.max_epsilon())
    self.assertEqual(again.report(), ledger.report())

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'delta'):
      individual.IndividualLedger(0.0)
    with self.assertRaisesRegex(ValueError, 'budget_epsilon'):
      individual.IndividualLedger(1e-5, budget_epsilon=-1.0)
    with self.assertRaisesRegex(TypeError, 'DpEvent'):
      individual.IndividualLedger(1e-5).record(['a'], 'gaussian')
    with self.assertRaisesRegex(ValueError, 'IndividualLedger'):
      individual.IndividualLedger.from_json('{}')


if __name__ == '__main__':
  tf.test.main()
