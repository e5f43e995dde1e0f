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
