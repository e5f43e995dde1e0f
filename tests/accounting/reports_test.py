"""Tests for tff_priv.accounting.reports."""

import json

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant
import pytest
import tensorflow as tf

from tff_priv.accounting import reports


class ReportsTest(tf.test.TestCase):

  def test_smp_report_matches_dp_accounting(self):
    report = reports.mechanism_report(
        'smp', delta=1e-5, rounds=300, noise_multiplier=1.1,
        sampling_probability=0.01,
    )
    direct = rdp_privacy_accountant.RdpAccountant().compose(
        dp_accounting.PoissonSampledDpEvent(
            0.01, dp_accounting.GaussianDpEvent(1.1)
        ),
        300,
    )
    self.assertEqual(report['rdp_epsilon'], direct.get_epsilon(1e-5))
    self.assertLess(report['pld_epsilon'], report['rdp_epsilon'])
    self.assertEqual(report['sampling'], 'poisson')
    json.dumps(report)  # JSON-ready.

  def test_udp_and_distortion_noise_units(self):
    # udp: z = sigma / Delta; distortion: z = sigma_e / (2 C).
    udp = reports.mechanism_report(
        'udp', delta=1e-3, rounds=50, noise_stddev=0.3, sensitivity=0.1
    )
    self.assertAllClose(udp['noise_multiplier'], 3.0)
    distortion = reports.mechanism_report(
        'distortion', delta=1e-3, rounds=50, noise_stddev=1.5, clip=0.5
    )
    self.assertAllClose(distortion['noise_multiplier'], 1.5)
    # The paper's eq. (10) claim for z = 3, q = 1, T = 50, delta = 1e-3:
    # sqrt(2 * 50 * ln 1000) / 3 = 8.7608.
    self.assertAllClose(udp['paper']['paper_claimed_epsilon'], 8.7608, atol=1e-4)

  @pytest.mark.slow
  def test_target_epsilon(self):
    report = reports.mechanism_report(
        'udp', delta=1e-3, rounds=200, target_epsilon=8.0, sensitivity=0.0125
    )
    z = report['calibration']['rdp_noise_multiplier']
    check = reports.gaussian_report(z, 1e-3, 200)
    self.assertLessEqual(check['rdp_epsilon'], 8.0)
    self.assertAllClose(report['calibration']['rdp_noise_stddev'], z * 0.0125)
    self.assertFalse(report['paper']['holds'])
    self.assertGreater(report['paper']['true_rdp_epsilon'], 8.0)

  def test_ldp_report(self):
    report = reports.mechanism_report(
        'ldp', delta=1e-5, rounds=10, ldp_epsilon=1.0, num_values=1_663_370,
        num_clients=100,
    )
    self.assertEqual(report['paper_epsilon_per_value'], 1.0)
    self.assertEqual(report['plain_composition_epsilon'], 16_633_700.0)
    self.assertLess(report['rdp_epsilon'], report['plain_composition_epsilon'])
    self.assertIsNone(report['pld_epsilon'])  # Too many releases for PLD.
    self.assertIn('pld', report['unsupported'])
    self.assertFalse(report['shuffle_applicable'])
    self.assertIsNone(report['shuffle_epsilon'])
    json.dumps(report)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'mechanism'):
      reports.mechanism_report('rr', delta=1e-5, rounds=1, noise_multiplier=1.0)
    with self.assertRaisesRegex(ValueError, 'delta'):
      reports.mechanism_report('smp', delta=1.0, rounds=1, noise_multiplier=1.0)
    with self.assertRaisesRegex(ValueError, 'rounds'):
      reports.mechanism_report('smp', delta=1e-5, rounds=0, noise_multiplier=1.0)
    with self.assertRaisesRegex(ValueError, 'noise_multiplier'):
      reports.mechanism_report('smp', delta=1e-5, rounds=1)
    with self.assertRaisesRegex(ValueError, 'epsilon'):
      reports.mechanism_report('smp', delta=1e-5, rounds=1, target_epsilon=0.0)
    with self.assertRaisesRegex(ValueError, 'clip'):
      reports.mechanism_report('distortion', delta=1e-5, rounds=1, noise_stddev=1.0)
    with self.assertRaisesRegex(ValueError, 'ldp_epsilon'):
      reports.mechanism_report('ldp', delta=1e-5, rounds=1, num_values=3)


if __name__ == '__main__':
  tf.test.main()
