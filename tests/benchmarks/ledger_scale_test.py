"""Tests for tff_priv.benchmarks.ledger_scale at a small population."""

from absl.testing import absltest

from tff_priv.benchmarks import ledger_scale


class LedgerScaleTest(absltest.TestCase):

  def test_a_small_run_charges_and_filters(self):
    # z = 2 a participation and a budget of 4 at delta 1e-5 admit a client a
    # few times; 50 rounds of 20 of 100 clients (10 each on average) make
    # the filter bind.
    result = ledger_scale.run(
        100,
        20,
        50,
        noise_multiplier=2.0,
        budget_epsilon=4.0,
        checkpoint_every=10,
    )
    self.assertEqual(result['clients_charged'], 100)
    self.assertLessEqual(result['max_epsilon'], 4.0)
    self.assertGreater(result['clients_excluded_by_budget'], 0)
    self.assertGreater(result['json_mb'], 0.0)
    self.assertGreater(result['seconds'], 0.0)

  def test_more_per_round_than_clients_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'per_round'):
      ledger_scale.run(10, 11, 1)


if __name__ == '__main__':
  absltest.main()
