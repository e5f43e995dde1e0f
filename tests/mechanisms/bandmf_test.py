"""Tests for mechanisms.bandmf: the banded strategy and its optimiser."""

import numpy as np
import tensorflow as tf

from tff_priv.mechanisms import bandmf


def _toeplitz(coefs, n):
  c = np.zeros(n)
  m = min(len(coefs), n)
  c[:m] = coefs[:m]
  return np.array(
      [[c[i - j] if i >= j else 0.0 for j in range(n)] for i in range(n)]
  )


class BandMFMathTest(tf.test.TestCase):

  def test_inverse_and_loss_equal_the_dense_matrices(self):
    coefs = np.array([0.8, 0.5, 0.3])
    n = 9
    c = _toeplitz(coefs, n)
    c_inv = np.linalg.inv(c)
    self.assertAllClose(
        bandmf.inverse_coefs(coefs, n), c_inv[:, 0], rtol=1e-12, atol=1e-12
    )
    b = np.tril(np.ones((n, n))) @ c_inv
    self.assertAllClose(
        bandmf.prefix_variances(coefs, n), np.sum(b * b, axis=1), rtol=1e-12
    )
    # The loss: mean prefix variance x the columns' largest norm^2.
    self.assertAllClose(
        bandmf.loss(coefs, n),
        np.mean(np.sum(b * b, axis=1)) * np.max(np.sum(c * c, axis=0)),
        rtol=1e-12,
    )

  def test_optimum_matches_jax_privacy(self):
    # jax_privacy's `toeplitz.optimize_banded_toeplitz(n, bands)` and
    # `toeplitz.loss(c, n)` (mean reduction), run on the same (n, b): its
    # losses and first coefficients.
    reference = {
        (50, 2): (14.05963191052472, [0.81579, 0.57834]),
        (50, 5): (7.538440981617509, [0.70849, 0.44115, 0.36269, 0.31347]),
        (200, 4): (28.471484999678346, [0.64801, 0.4925, 0.43589, 0.38409]),
        (200, 10): (14.53354490773655, [0.59049, 0.37407, 0.31902, 0.28945]),
        (1000, 8): (69.74992959831259, [0.5005, 0.38679, 0.35633, 0.33805]),
    }
    for (n, b), (loss, first) in reference.items():
      with self.subTest(n=n, bands=b):
        coefs = bandmf.optimize(n, b)
        self.assertLen(coefs, b)
        self.assertAllClose(np.linalg.norm(coefs), 1.0, rtol=1e-12)
        self.assertAllClose(bandmf.loss(coefs, n), loss, rtol=1e-6)
        self.assertAllClose(coefs[:4], first, atol=2e-5)

  def test_one_band_is_the_identity_and_more_bands_never_lose(self):
    self.assertAllClose(bandmf.optimize(30, 1), [1.0])
    losses = [bandmf.loss(bandmf.optimize(60, b), 60) for b in (1, 2, 3, 6)]
    self.assertAllClose(losses[0], np.mean(np.arange(1, 61)))
    for more, fewer in zip(losses[1:], losses):
      self.assertLess(more, fewer)

  def test_candidate_bands(self):
    # Divisors of N up to N // K (a group of N / b must hold K) and T.
    self.assertEqual(bandmf.candidate_bands(100, 20, 50), [1, 2, 4, 5])
    self.assertEqual(bandmf.candidate_bands(1000, 20, 10), [1, 2, 4, 5, 8, 10])
    self.assertEqual(bandmf.candidate_bands(7, 5, 10), [1])
    with self.assertRaisesRegex(ValueError, 'bands=6 exceeds'):
      bandmf.band_choice(10, 100, 20, 6)
    with self.assertRaisesRegex(ValueError, 'bands=4 exceeds total_rounds=3'):
      bandmf.band_choice(3, 100, 20, 4)
    choice = bandmf.band_choice(10, 100, 20, 4)
    self.assertEqual(
        (choice.sampling_probability, choice.participations), (20 / 25, 3)
    )


if __name__ == '__main__':
  tf.test.main()
