"""Tests for aggregators.bandmf and BandSampler: noise, events, schedule."""

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import neighbours as neighbours_lib
from tff_priv import runtime
from tff_priv.accounting import guarantees
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.aggregators import bandmf
from tff_priv.aggregators import correlated_noise
from tff_priv.mechanisms import gaussian
from tff_priv.program import sampling

_TYPE = tff.TensorType(np.float32, [3])
_COEFS = [0.8, 0.5, 0.33]


def _factory(**kwargs):
  args = dict(
      noise_multiplier=1.0,
      clients_per_round=2,
      clip=1.0,
      coefs=_COEFS,
      sampling_probability=0.5,
  )
  args.update(kwargs)
  return bandmf.BandMFFactory(**args)


def _eps(event, count, relation=None):
  accountant = dp_accounting.rdp.RdpAccountant(
      **({} if relation is None else {'neighboring_relation': relation})
  )
  return accountant.compose(event, count).get_epsilon(1e-5)


class BandMFFactoryTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    runtime.set_context('simulation')

  def test_a_cycle_is_charged_whole_at_its_first_round(self):
    process = _factory(noise_multiplier=1.3).create(_TYPE)
    state = process.initialize()
    values = [np.ones(3, np.float32)]
    counts = []
    for _ in range(7):
      state = process.next(state, values).state
      counts.append(guarantees.extract_dp_event(state).count)
    self.assertEqual(counts, [1, 0, 0, 1, 0, 0, 1])
    # A forced restart starts a new cycle, charged at once.
    state = process.next(bandmf.with_restart_forced(state), values).state
    event = guarantees.extract_dp_event(state)
    self.assertEqual(event.count, 1)
    by_hand = dp_accounting.PoissonSampledDpEvent(
        0.5, dp_accounting.GaussianDpEvent(1.3)
    )
    self.assertAllClose(_eps(event.event, 3), _eps(by_hand, 3), rtol=1e-12)

  def test_noise_is_the_banded_inverse_of_the_seeded_z(self):
    # Zero inputs, a known key (tests only): round t releases
    # z C (C^{-1} zeta)_t / K, C the unit-norm banded Toeplitz matrix.
    key, n, z_mult, k = 91, 6, 1.5, 2
    process = _factory(
        noise_multiplier=z_mult, clients_per_round=k, noise_seed=key
    ).create(_TYPE)
    state = process.initialize()
    released = []
    for _ in range(n):
      output = process.next(state, [np.zeros(3, np.float32)])
      state = output.state
      released.append(np.asarray(output.result, np.float64))
    zeta = np.stack(
        [
            gaussian.add_gaussian_noise(
                tf.zeros([3]),
                1.0,
                seed=correlated_noise.round_seed(
                    key, tf.zeros([2], tf.int64), t
                ),
            ).numpy()
            for t in range(n)
        ]
    ).astype(np.float64)
    c = np.asarray(_COEFS) / np.linalg.norm(_COEFS)
    strategy = np.array(
        [
            [c[i - j] if 0 <= i - j < 3 else 0.0 for j in range(n)]
            for i in range(n)
        ]
    )
    expected = z_mult * np.linalg.solve(strategy, zeta) / k
    self.assertAllClose(np.stack(released), expected, atol=1e-5)

  def test_a_round_run_again_draws_fresh_noise(self):
    d = 20_000
    process = _factory().create(tff.TensorType(np.float32, [d]))
    zeros = [np.zeros(d, np.float32)]
    state = process.initialize()
    for _ in range(2):
      state = process.next(state, zeros).state
    original = np.asarray(process.next(state, zeros).result)
    restarted = np.asarray(
        process.next(bandmf.with_restart_forced(state), zeros).result
    )
    # corr ~ N(0, 1 / d): |corr| < 0.05 is 7 sigma.
    self.assertLess(abs(np.corrcoef(original, restarted)[0, 1]), 0.05)

  def test_near_zero_noise_gives_the_clipped_mean(self):
    process = _factory(noise_multiplier=1e-9).create(_TYPE)
    state = process.initialize()
    values = [
        np.array([3.0, 4.0, 0.0], np.float32),  # Norm 5: clipped to 1.
        np.array([np.nan, 0.0, 0.0], np.float32),  # Contributes zeros.
        np.array([0.1, 0.0, 0.2], np.float32),
    ]
    expected = (values[0] / 5.0 + values[2]) / 2.0
    for _ in range(4):
      output = process.next(state, values)
      state = output.state
      self.assertAllClose(output.result, expected, rtol=1e-5, atol=1e-7)

  def test_no_exact_statistic_in_measurements(self):
    d = 20
    rng = np.random.default_rng(4)
    values = [0.01 * rng.normal(size=d).astype(np.float32) for _ in range(3)]
    far = np.full(d, 1e3, np.float32)
    process = _factory().create(tff.TensorType(np.float32, [d]))
    run = lambda v: process.next(process.initialize(), v).measurements
    self.assertEqual(
        neighbours_lib.exact_statistic_leaves(run, values, values[:2] + [far]),
        [],
    )

  def test_calibrated_run_meets_the_target_and_the_ledger_agrees(self):
    # N = 20, K = 5, T = 7, b = 4: groups of 5 at q = 1, 2 cycles. (Poisson
    # calibration, q < 1, is the slow lane's choice test: ~3 s a target.)
    factory = bandmf.BandMFFactory.calibrated(
        3.0, total_rounds=7, population=20, clients_per_round=5, bands=4
    )
    self.assertEqual(factory.bands, 4)
    self.assertAllClose(factory.sampling_probability, 1.0)
    self.assertAllClose(_eps(factory.event(), 2), 3.0, rtol=1e-3)
    self.assertLessEqual(_eps(factory.event(), 2), 3.0 + 1e-9)
    # The ledger charges ceil(7 / 3) = 3 cycles of the state's sampled event.
    factory = _factory(noise_multiplier=1.1, sampling_probability=0.5)
    process = factory.create(_TYPE)
    state = process.initialize()
    ledger = ledger_lib.PrivacyLedger()
    for _ in range(7):
      state = process.next(state, [np.ones(3, np.float32)]).state
      ledger.record_round(state)
    by_hand = dp_accounting.PoissonSampledDpEvent(
        0.5, dp_accounting.GaussianDpEvent(1.1)
    )
    self.assertAllClose(ledger.epsilon(1e-5), _eps(by_hand, 3), rtol=1e-9)
    with self.assertRaisesRegex(ValueError, 'BandSampler'):
      ledger.record_round(state, sampling_probability=0.25)

  @pytest.mark.slow  # Four calibrations of Poisson-sampled RDP: ~15 s.
  def test_the_choice_never_loses_to_one_band(self):
    plan = bandmf.plan_bands(50, 100, 20, epsilon=8.0)
    self.assertEqual(sorted(plan.scores), [1, 2, 4, 5])
    self.assertEqual(plan.scores[plan.bands], min(plan.scores.values()))
    # b = 1 is DP-FedAvg: Poisson q = K / N, C = [1].
    one = bandmf.plan_bands(50, 100, 20, epsilon=8.0, bands=1)
    self.assertAllClose(one.coefs, [1.0])
    self.assertAllClose(one.sampling_probability, 0.2)
    self.assertEqual(one.cycles, 50)

  def test_guarantee_and_bad_arguments(self):
    factory = _factory()
    self.assertEqual(
        factory.guarantee.neighboring_relation, 'add_or_remove_one'
    )
    self.assertEqual(guarantees.guarantee_of(factory), bandmf.GUARANTEE)
    self.assertAllClose(np.linalg.norm(factory.coefs), 1.0)
    for kwargs in (
        dict(noise_multiplier=0.0),
        dict(clip=-1.0),
        dict(coefs=[0.0, 1.0]),
        dict(coefs=[]),
        dict(sampling_probability=0.0),
        dict(sampling_probability=1.5),
    ):
      with self.assertRaises(ValueError, msg=str(kwargs)):
        _factory(**kwargs)
    with self.assertRaisesRegex(ValueError, 'one of epsilon'):
      bandmf.plan_bands(10, 20, 5)


class BandSamplerTest(tf.test.TestCase):

  def test_groups_take_turns_with_poisson_draws_inside(self):
    n, k, b = 103, 5, 4  # Groups of 25; 3 clients never take part.
    sampler = sampling.BandSampler(n, k, b, seed=12)
    self.assertAllClose(sampler.sampling_probability, 5 / 25)
    rounds = 4000
    groups = [set() for _ in range(b)]
    sizes = []
    for t in range(1, rounds + 1):
      chosen = sampler.sample(t)
      sizes.append(len(chosen))
      groups[(t - 1) % b].update(chosen)
    # Each group is its own 25 clients: a client's rounds are b apart.
    for i in range(b):
      self.assertLen(groups[i], 25)
      for j in range(i):
        self.assertEmpty(groups[i] & groups[j])
    # Binomial(25, 0.2) sizes: mean 5, std 2 / sqrt(4000) = 0.032 (6 sigma).
    self.assertAllClose(np.mean(sizes), 5.0, atol=0.2)
    self.assertIn(0, sizes)  # A round may draw nobody.
    self.assertEqual(
        sampler.sample(17), sampling.BandSampler(n, k, b, seed=12).sample(17)
    )
    with self.assertRaisesRegex(ValueError, 'at most 20 bands'):
      sampling.BandSampler(n, k, 21)


if __name__ == '__main__':
  tf.test.main()
