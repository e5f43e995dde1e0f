"""Tests for aggregators.blt: noise, events, NaN clients, neighbours."""

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import neighbours as neighbours_lib
from tff_priv import runtime
from tff_priv.accounting import guarantees
from tff_priv.aggregators import blt
from tff_priv.mechanisms import blt as blt_lib
from tff_priv.mechanisms import blt_sensitivity
from tff_priv.mechanisms import gaussian

_TYPE = tff.TensorType(np.float32, [3])
_THETA = [0.98885972, 0.7729885]
_OMEGA = [0.14602768, 0.32354102]


def _factory(**kwargs):
  args = dict(
      noise_multiplier=1.0,
      clients_per_round=2,
      clip=1.0,
      buf_decay=_THETA,
      output_scale=_OMEGA,
      rounds_per_stream=4,
  )
  args.update(kwargs)
  return blt.BLTFactory(**args)


class BLTFactoryTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    runtime.set_context('simulation')

  def test_a_stream_is_charged_whole_at_its_first_round(self):
    factory = _factory(noise_multiplier=1.3, max_participations=2, min_sep=2)
    process = factory.create(_TYPE)
    state = process.initialize()
    # By hand: C's columns 0 and 2 summed, over 4 rounds.
    c = blt_lib.BLT(np.array(_THETA), np.array(_OMEGA)).materialize(4)
    sensitivity = np.linalg.norm(c[:, 0] + c[:, 2])
    by_hand = dp_accounting.GaussianDpEvent(1.3 / sensitivity)
    values = [np.ones(3, np.float32), np.zeros(3, np.float32)]
    counts = []
    for _ in range(6):
      state = process.next(state, values).state
      event = guarantees.extract_dp_event(state)
      counts.append(event.count)
    self.assertEqual(counts, [1, 0, 0, 0, 1, 0])
    state = process.next(blt.with_restart_forced(state), values).state
    event = guarantees.extract_dp_event(state)
    self.assertEqual(event.count, 1)
    self.assertAllClose(
        event.event.noise_multiplier, by_hand.noise_multiplier, rtol=1e-6
    )

    def eps(e):
      accountant = dp_accounting.rdp.RdpAccountant(
          neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
      )
      return accountant.compose(e).get_epsilon(1e-5)

    self.assertAllClose(eps(event), eps(by_hand), rtol=1e-5)
    self.assertAllClose(eps(factory.event()), eps(by_hand), rtol=1e-12)

  def test_noise_is_the_streaming_inverse_of_the_seeded_z(self):
    # Zero inputs, a known key (tests only): round t releases
    # z C (C^{-1} zeta)_t / K, zeta_t drawn from the documented round seed.
    key, n, z_mult, k = 77, 5, 1.5, 2
    process = _factory(
        noise_multiplier=z_mult,
        clients_per_round=k,
        rounds_per_stream=n,
        noise_seed=key,
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
                seed=blt.round_seed(key, tf.zeros([2], tf.int64), t),
            ).numpy()
            for t in range(n)
        ]
    ).astype(np.float64)
    strategy = blt_lib.BLT(np.array(_THETA), np.array(_OMEGA))
    expected = z_mult * np.linalg.solve(strategy.materialize(n), zeta) / k
    self.assertAllClose(np.stack(released), expected, atol=1e-5)

  def test_a_round_run_again_in_the_same_process_draws_fresh_noise(self):
    # A user's loop restores a saved state and runs round 3 again (forced
    # restart, or not): the release must not repeat round 3's noise, or
    # the two releases and the stream's earlier ones give its clipped sums
    # without noise. Zero updates: a release is its noise alone.
    d = 20_000
    process = _factory(rounds_per_stream=10).create(
        tff.TensorType(np.float32, [d])
    )
    zeros = [np.zeros(d, np.float32)]
    state = process.initialize()
    for _ in range(2):
      state = process.next(state, zeros).state
    saved = state
    original = np.asarray(process.next(saved, zeros).result)
    # A forced restart: a new stream, independent of the original release
    # (corr ~ N(0, 1 / d): |corr| < 0.05 is 7 sigma).
    restarted = np.asarray(
        process.next(blt.with_restart_forced(saved), zeros).result
    )
    self.assertLess(abs(np.corrcoef(original, restarted)[0, 1]), 0.05)
    # Run again without a restart: the buffers (rounds 1-2's noise) are the
    # same, round 3's z is fresh, so the two releases differ by
    # z C (z_3 - z'_3) / K (C's diagonal is 1): std sqrt(2) x 0.5, not 0.
    rerun = np.asarray(process.next(saved, zeros).result)
    self.assertAllClose(np.std(original - rerun), np.sqrt(2) * 0.5, rtol=0.03)

  def test_every_build_and_initialize_draws_fresh_noise(self):
    zeros = [np.zeros(3, np.float32)]
    factory = _factory()
    one, other = factory.create(_TYPE), factory.create(_TYPE)
    first = lambda p: np.asarray(p.next(p.initialize(), zeros).result)
    releases = [first(one), first(one), first(other)]
    for i in range(3):
      for j in range(i):
        self.assertFalse(np.allclose(releases[i], releases[j]), (i, j))

  def test_nan_client_gives_a_finite_aggregate(self):
    process = _factory().create(_TYPE)
    values = [
        np.array([np.nan, 1.0, 0.0], np.float32),
        np.array([np.inf, 0.0, 0.0], np.float32),
        np.array([0.5, 0.0, 0.0], np.float32),
    ]
    output = process.next(process.initialize(), values)
    self.assertTrue(np.all(np.isfinite(output.result)))

  def test_near_zero_noise_gives_the_clipped_mean(self):
    process = _factory(noise_multiplier=1e-9).create(_TYPE)
    state = process.initialize()
    values = [
        np.array([3.0, 4.0, 0.0], np.float32),  # Norm 5: clipped to 1.
        np.array([0.1, 0.0, 0.2], np.float32),
    ]
    expected = (values[0] / 5.0 + values[1]) / 2.0
    for _ in range(3):
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

  def test_calibrated_streams_meet_the_target(self):
    # N = 20, K = 5: b = 4. 'cyclic': one stream of 10 rounds, each client
    # k = 3 times, 4 rounds apart; 'epoch': 3 streams of 4 rounds, once each.
    for participation, streams, pattern in (
        ('cyclic', 1, (10, 3, 4)),
        ('epoch', 3, (4, 1, 1)),
    ):
      with self.subTest(participation):
        factory = blt.BLTFactory.calibrated(
            4.0,
            total_rounds=10,
            population=20,
            clients_per_round=5,
            participation=participation,
        )
        n, k, b = pattern
        self.assertEqual(factory.rounds_per_stream, n)
        # The sensitivity is C's for that pattern (every pattern tried).
        self.assertAllClose(
            factory.sensitivity,
            blt_sensitivity.brute_force_sensitivity(
                factory.blt.materialize(n), b, k
            ),
        )
        accountant = dp_accounting.rdp.RdpAccountant(
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
        )
        accountant.compose(factory.event(), streams)
        self.assertAllClose(accountant.get_epsilon(1e-5), 4.0, rtol=1e-3)
        self.assertLessEqual(accountant.get_epsilon(1e-5), 4.0 + 1e-9)

  def test_guarantee_and_bad_arguments(self):
    factory = _factory()
    self.assertEqual(factory.guarantee.neighboring_relation, 'replace_special')
    self.assertEqual(factory.guarantee.noise, 'central')
    self.assertEqual(guarantees.guarantee_of(factory), blt.GUARANTEE)
    for kwargs in (
        dict(noise_multiplier=0.0),
        dict(clip=-1.0),
        dict(rounds_per_stream=0),
        dict(min_sep=0),
        dict(buf_decay=[0.9], output_scale=[1.5]),  # Increasing C.
        dict(buf_decay=[1.1], output_scale=[0.1]),
    ):
      with self.assertRaises(ValueError, msg=str(kwargs)):
        _factory(**kwargs)


if __name__ == '__main__':
  tf.test.main()
