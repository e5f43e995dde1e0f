"""Tests for accounting.target_noise: the one calibration entry point."""

from absl.testing import absltest
import pytest

from tff_priv.accounting import calibration
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import target_noise

Sampling = sampling_lib.Sampling


class NoiseForTargetTest(absltest.TestCase):

  def test_paper_calibration_is_eq10(self):
    self.assertAlmostEqual(
        target_noise.noise_for_target(
            8.0,
            1e-3,
            100,
            Sampling.poisson(0.6),
            sensitivity=0.1,
            calibration='paper',
        ),
        0.359889,
        delta=1e-6,
    )

  @pytest.mark.slow
  def test_tight_is_the_calibrated_multiplier_times_the_sensitivity(self):
    sampling = Sampling.fixed(10, 3)
    z = calibration.calibrate_noise_multiplier(
        4.0, 1e-5, 5, population=10, sample_size=3, min_with_unsampled=True
    )
    self.assertEqual(
        target_noise.noise_for_target(
            4.0, 1e-5, 5, sampling, min_with_unsampled=True
        ),
        z,
    )
    self.assertEqual(
        target_noise.noise_for_target(
            4.0, 1e-5, 5, sampling, sensitivity=0.25, min_with_unsampled=True
        ),
        z * 0.25,
    )

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'calibration'):
      target_noise.noise_for_target(1.0, 1e-5, 5, calibration='moments')
    with self.assertRaisesRegex(ValueError, 'sensitivity'):
      target_noise.noise_for_target(1.0, 1e-5, 5, sensitivity=0.0)


if __name__ == '__main__':
  absltest.main()
