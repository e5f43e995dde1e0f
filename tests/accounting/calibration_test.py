"""Tests for tff_priv.accounting.calibration: round trips through the ledger."""

from absl.testing import parameterized
import pytest
import tensorflow as tf

from tff_priv.accounting import calibration
from tff_priv.accounting import ledger as ledger_lib


class CalibrationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('fedsmp_paper', 1.0, 1e-5, 300, dict(sampling_probability=0.01)),
      ('dp_fedavg', 2.0, 1e-5, 100, dict(sampling_probability=0.05)),
      ('udp_all_clients', 8.0, 1e-3, 200, {}),
      ('udp_fixed_size', 4.0, 1e-3, 50, dict(population=50, sample_size=30)),
      ('small_eps', 0.3, 1e-6, 20, dict(sampling_probability=0.1)),
  )
  @pytest.mark.slow
  def test_rdp_round_trip(self, eps, delta, rounds, sampling):
    z = calibration.calibrate_noise_multiplier(eps, delta, rounds, **sampling)
    # The same noise, charged round by round to a ledger.
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(z, count=rounds, **sampling)
    spent = ledger.epsilon(delta)
    self.assertLessEqual(spent, eps)
    self.assertGreaterEqual(spent, 0.99 * eps)  # Within 1%: the smallest z.
    self.assertEqual(
        spent, calibration.gaussian_epsilon(z, delta, rounds, **sampling)
    )

  @pytest.mark.slow
  def test_pld_round_trip_and_pld_needs_less_noise(self):
    sampling = dict(sampling_probability=0.1)
    z_pld = calibration.calibrate_noise_multiplier(
        2.0, 1e-5, 20, accountant='pld', **sampling
    )
    z_rdp = calibration.calibrate_noise_multiplier(2.0, 1e-5, 20, **sampling)
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(z_pld, count=20, **sampling)
    spent = ledger.epsilon(1e-5, accountant='pld')
    self.assertLessEqual(spent, 2.0)
    self.assertGreaterEqual(spent, 0.99 * 2.0)
    self.assertLess(z_pld, z_rdp)

  def test_more_rounds_need_more_noise(self):
    zs = [
        calibration.calibrate_noise_multiplier(
            1.0, 1e-5, t, sampling_probability=0.01
        )
        for t in (10, 100, 1000)
    ]
    self.assertLess(zs[0], zs[1])
    self.assertLess(zs[1], zs[2])

  @pytest.mark.slow
  def test_rounds_left_after_spent_releases_meet_the_target(self):
    self._check_rounds_left(dict(sampling_probability=0.1), local=False)

  @pytest.mark.slow
  def test_local_noise_rounds_left_meet_the_smaller_bound(self):
    # dp_accounting's fixed-size sampling RDP is slow (~30 s here).
    self._check_rounds_left(dict(population=50, sample_size=10), local=True)

  def _check_rounds_left(self, sampling, local):
    # 6 rounds charged at the planned z (of a 10-round plan), 2 of them to
    # run again: the 6 rounds left share what the first 6 left.
    planned = calibration.calibrate_noise_multiplier(
        4.0, 1e-5, 10, min_with_unsampled=local, **sampling
    )
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(planned, count=6, **sampling)
    spent = calibration.Spent.of_ledger(ledger)
    z = calibration.calibrate_noise_multiplier(
        4.0, 1e-5, 6, min_with_unsampled=local, spent=spent, **sampling
    )
    self.assertGreater(z, planned)

    def eps(z_left, read_unsampled=False):
      whole = ledger_lib.PrivacyLedger()
      whole.extend(ledger)
      whole.record_gaussian(z_left, count=6, **sampling)
      if read_unsampled:  # Each client in every round: no sampling.
        whole = ledger_lib.PrivacyLedger()
        whole.record_gaussian(planned, count=6)
        whole.record_gaussian(z_left, count=6)
      return whole.epsilon(1e-5)

    met = min(eps(z), eps(z, True)) if local else eps(z)
    self.assertBetween(met, 3.99, 4.0)
    # The smallest such z (the calibration's tolerance).
    under = min(eps(z - 2e-4), eps(z - 2e-4, True)) if local else eps(z - 2e-4)
    self.assertGreater(under, 4.0)

  def test_a_spent_budget_is_one_error(self):
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(0.5, count=20, sampling_probability=0.5)
    with self.assertRaisesRegex(
        calibration.BudgetSpentError, r'20 releases charged already spend eps'
    ):
      calibration.calibrate_noise_multiplier(
          1.0,
          1e-5,
          5,
          sampling_probability=0.5,
          spent=calibration.Spent.of_ledger(ledger),
      )

  def test_bad_arguments(self):
    cases = [
        (dict(target_epsilon=0.0), 'target_epsilon'),
        (dict(target_epsilon=-1.0), 'target_epsilon'),
        (dict(target_delta=0.0), 'target_delta'),
        (dict(target_delta=1.0), 'target_delta'),
        (dict(rounds=0), 'rounds'),
        (dict(sampling_probability=0.0), 'sampling_probability'),
        (dict(sampling_probability=1.2), 'sampling_probability'),
        (dict(accountant='moments'), 'accountant'),
    ]
    base = dict(target_epsilon=1.0, target_delta=1e-5, rounds=10)
    for override, name in cases:
      with self.assertRaisesRegex(ValueError, name):
        calibration.calibrate_noise_multiplier(**{**base, **override})
    with self.assertRaisesRegex(ValueError, 'noise_multiplier'):
      calibration.gaussian_epsilon(-0.5, 1e-5, 10)


if __name__ == '__main__':
  tf.test.main()
