"""Tests for accounting.reports: Gaussian releases by every accountant."""

import json

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant
import tensorflow as tf

from tff_priv.accounting import reports
from tff_priv.accounting import sampling as sampling_lib


class ReportsTest(tf.test.TestCase):

  def test_gaussian_report_matches_dp_accounting(self):
    report = reports.gaussian_report(
        1.1, 1e-5, 300, sampling=sampling_lib.Sampling.poisson(0.01)
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

  def test_noise_stddev_over_its_scale(self):
    report = reports.gaussian_mechanism_report(
        'm', delta=1e-3, rounds=50, noise_stddev=0.3, scale=0.1
    )
    self.assertEqual(report['mechanism'], 'm')
    self.assertAllClose(report['noise_multiplier'], 3.0)
    self.assertNotIn('paper', report)

  def test_claims_beside_the_accountants(self):
    seen = []

    def for_noise(z, rdp_epsilon, delta, q, rounds):
      seen.append((z, rdp_epsilon, delta, q, rounds))
      return {'formula': 'f'}

    report = reports.gaussian_mechanism_report(
        'm',
        delta=1e-5,
        rounds=10,
        noise_multiplier=2.0,
        sampling=sampling_lib.Sampling.poisson(0.5),
        claim_for_noise=for_noise,
    )
    self.assertEqual(report['paper'], {'formula': 'f'})
    self.assertEqual(seen, [(2.0, report['rdp_epsilon'], 1e-5, 0.5, 10)])
    # No claim for a noise-free release.
    free = reports.gaussian_mechanism_report(
        'm',
        delta=1e-5,
        rounds=10,
        noise_multiplier=0.0,
        claim_for_noise=for_noise,
    )
    self.assertNotIn('paper', free)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'delta'):
      reports.gaussian_mechanism_report(
          'm', delta=1.0, rounds=1, noise_multiplier=1.0
      )
    with self.assertRaisesRegex(ValueError, 'rounds'):
      reports.gaussian_mechanism_report(
          'm', delta=1e-5, rounds=0, noise_multiplier=1.0
      )
    with self.assertRaisesRegex(ValueError, 'noise_multiplier'):
      reports.gaussian_mechanism_report('m', delta=1e-5, rounds=1)
    with self.assertRaisesRegex(ValueError, 'epsilon'):
      reports.gaussian_mechanism_report('m', delta=1e-5, rounds=1, epsilon=0.0)
    with self.assertRaisesRegex(ValueError, 'sensitivity'):
      reports.gaussian_mechanism_report(
          'm', delta=1e-5, rounds=1, noise_stddev=1.0
      )


if __name__ == '__main__':
  tf.test.main()
