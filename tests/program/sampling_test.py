"""Tests of tff_priv.program.sampling: the draws and what the ledger is told."""

from absl.testing import parameterized
from dp_accounting import dp_event
import numpy as np
import tensorflow as tf

from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import sampling as accounting_sampling
from tff_priv.program import sampling


class ClientSamplingTest(tf.test.TestCase, parameterized.TestCase):

  def test_poisson_count_matches_rate(self):
    # Counts are Binomial(N, q): mean Nq, variance Nq(1-q). Over R rounds the
    # mean count has standard error sqrt(Nq(1-q)/R); tolerance 5 of them.
    n, k, rounds = 1000, 100, 400
    s = sampling.ClientSampling('poisson', n, k)
    counts = [len(s.sample_indices(7, r)) for r in range(1, rounds + 1)]
    q = k / n
    se = np.sqrt(n * q * (1 - q) / rounds)
    self.assertAllClose(np.mean(counts), k, atol=5 * se)
    # Variance too: the sample variance of R draws has relative standard error
    # about sqrt(2 / R) (0.07); tolerance 5 of them.
    self.assertAllClose(
        np.var(counts), n * q * (1 - q), rtol=5 * np.sqrt(2 / rounds)
    )

  def test_poisson_can_draw_nobody(self):
    s = sampling.ClientSampling('poisson', 10, 1)  # P(empty) = 0.9^10 = 0.35.
    sizes = [len(s.sample_indices(0, r)) for r in range(1, 50)]
    self.assertIn(0, sizes)
    self.assertGreater(max(sizes), 0)

  def test_fixed_draws_exactly_k_distinct_sorted(self):
    s = sampling.ClientSampling('fixed', 20, 7)
    for r in range(1, 30):
      idx = s.sample_indices(3, r)
      self.assertLen(idx, 7)
      self.assertLen(set(idx.tolist()), 7)
      self.assertAllEqual(idx, np.sort(idx))
      self.assertTrue(np.all((idx >= 0) & (idx < 20)))

  def test_fixed_is_uniform_over_clients(self):
    # Each client is picked with probability K/N per round: its count over R
    # rounds is Binomial(R, K/N); tolerance 5 standard deviations per client.
    n, k, rounds = 10, 3, 2000
    s = sampling.ClientSampling('fixed', n, k)
    counts = np.zeros(n)
    for r in range(1, rounds + 1):
      counts[s.sample_indices(1, r)] += 1
    p = k / n
    self.assertAllClose(
        counts, np.full(n, rounds * p), atol=5 * np.sqrt(rounds * p * (1 - p))
    )

  def test_epoch_draws_each_client_at_most_once_per_epoch(self):
    s = sampling.ClientSampling('epoch', 23, 5)
    self.assertEqual(s.rounds_per_epoch, 4)
    self.assertEqual(s.ledger_sampling().kind, 'none')
    epochs = []
    for epoch in range(3):
      drawn = [s.sample_indices(7, 4 * epoch + r) for r in range(1, 5)]
      for d in drawn:
        self.assertLen(d, 5)
      joined = np.concatenate(drawn)
      self.assertLen(np.unique(joined), 20)  # Nobody twice in an epoch.
      epochs.append(joined)
    # A fresh permutation per epoch: another order and other left-overs.
    self.assertNotAllEqual(epochs[0], epochs[1])

  @parameterized.parameters('poisson', 'fixed', 'epoch')
  def test_draw_depends_only_on_seed_and_round(self, kind):
    s = sampling.ClientSampling(kind, 50, 10)
    again = sampling.ClientSampling(kind, 50, 10)
    self.assertAllEqual(s.sample_indices(5, 3), again.sample_indices(5, 3))
    # Rounds and seeds give different draws (50 choose 10 is large).
    self.assertNotAllEqual(s.sample_indices(5, 3), s.sample_indices(5, 4))
    self.assertNotAllEqual(s.sample_indices(5, 3), s.sample_indices(6, 3))

  def test_stream_sampler_cyclic_is_the_planned_k_b_schedule(self):
    n, k, rounds = 23, 5, 13  # b = 4 groups of 5; 3 clients never drawn.
    sampler = sampling.StreamSampler(n, k, 'cyclic', seed=11)
    self.assertEqual(
        (sampler.participation, sampler.min_separation), ('cyclic', 4)
    )
    drawn = [sampler.sample(t) for t in range(1, rounds + 1)]
    for t, clients in enumerate(drawn, start=1):
      self.assertLen(clients, k)
      self.assertEqual(clients, sorted(clients))
      if t > 4:
        self.assertEqual(clients, drawn[t - 5])  # Group (t - 1) mod b.
    groups = np.concatenate(drawn[:4])
    self.assertLen(np.unique(groups), 20)  # b disjoint groups.
    rounds_of = {}
    for t, clients in enumerate(drawn, start=1):
      for c in clients:
        rounds_of.setdefault(c, []).append(t)
    # Each client exactly b rounds apart, at most ceil(T / b) = 4 times: the
    # (k, b) the cyclic stream's sensitivity is computed for.
    for times in rounds_of.values():
      self.assertTrue(all(b - a == 4 for a, b in zip(times, times[1:])))
      self.assertLessEqual(len(times), 4)
    # The seed alone gives the draw; without one it comes from the OS.
    again = sampling.StreamSampler(n, k, 'cyclic', seed=sampler.seed)
    self.assertEqual(again.sample(7), sampler.sample(7))
    fresh = [sampling.StreamSampler(n, k, 'cyclic').seed for _ in range(3)]
    self.assertLen(set(fresh), 3)

  def test_stream_sampler_epoch_draws_each_client_once_per_epoch(self):
    sampler = sampling.StreamSampler(23, 5, 'epoch', seed=3)
    for epoch in range(3):
      joined = np.concatenate(
          [sampler.sample(4 * epoch + r) for r in range(1, 5)]
      )
      self.assertLen(np.unique(joined), 20)
    with self.assertRaisesRegex(ValueError, 'participation must be one of'):
      sampling.StreamSampler(23, 5, 'poisson')

  def test_sample_maps_indices_to_ids(self):
    ids = [f'c{i}' for i in range(6)]
    s = sampling.ClientSampling('fixed', 6, 2)
    self.assertEqual(
        s.sample(ids, 0, 1), [ids[i] for i in s.sample_indices(0, 1)]
    )

  def test_all_clients_when_k_equals_n(self):
    self.assertAllEqual(
        sampling.ClientSampling('poisson', 5, 5).sample_indices(0, 1),
        np.arange(5),
    )
    self.assertAllEqual(
        sampling.ClientSampling('fixed', 5, 5).sample_indices(0, 1),
        np.arange(5),
    )

  def test_ledger_events_match_the_draw(self):
    poisson = sampling.ClientSampling('poisson', 100, 5)
    fixed = sampling.ClientSampling('fixed', 100, 5)
    self.assertEqual(poisson.rate, 0.05)
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(1.0, sampling=poisson.ledger_sampling())
    ((event, _),) = ledger.entries
    self.assertIsInstance(event, dp_event.PoissonSampledDpEvent)
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(1.0, sampling=fixed.ledger_sampling())
    ((event, _),) = ledger.entries
    self.assertIsInstance(event, dp_event.SampledWithoutReplacementDpEvent)
    self.assertEqual(poisson.describe()['model'], 'poisson')
    self.assertEqual(fixed.describe()['clients_per_round'], 5)

  def test_ledger_sampling_is_the_accounting_value(self):
    self.assertEqual(
        sampling.ClientSampling('poisson', 100, 5).ledger_sampling(),
        accounting_sampling.Sampling.poisson(0.05),
    )
    self.assertEqual(
        sampling.ClientSampling('fixed', 100, 5).ledger_sampling(),
        accounting_sampling.Sampling.fixed(100, 5),
    )
    self.assertEqual(
        sampling.ClientSampling('epoch', 100, 5).ledger_sampling(),
        accounting_sampling.Sampling.none(),
    )
    # BandMF's event holds its sampling: nothing more to amplify.
    self.assertEqual(
        sampling.ClientSampling('banded', 100, 5, bands=4).ledger_sampling(),
        accounting_sampling.Sampling.none(),
    )

  def test_a_round_run_again_draws_fresh_coins(self):
    # Attempt >= 1 (a released round run again): independent coins for the
    # sampled kinds, the same permutations for the schedules.
    for kind, k in (('poisson', 100), ('fixed', 100), ('banded', 50)):
      s = sampling.ClientSampling(
          kind, 1000, k, bands=4 if kind == 'banded' else 1
      )
      first = s.sample_indices(3, 5)
      self.assertAllEqual(first, s.sample_indices(3, 5, attempt=0))
      again = s.sample_indices(3, 5, attempt=1)
      self.assertNotEqual(first.tolist(), again.tolist(), kind)
      self.assertNotEqual(
          again.tolist(), s.sample_indices(3, 5, attempt=2).tolist(), kind
      )
    banded = sampling.ClientSampling('banded', 1000, 50, bands=4)
    drawn = set()
    for attempt in range(20):
      drawn |= set(banded.sample_indices(3, 5, attempt=attempt).tolist())
    # Round 5 is group 0's (as round 1): the first 250 of the permutation.
    group_0 = np.random.default_rng([3, 0x42414E44]).permutation(1000)[:250]
    self.assertLessEqual(drawn, set(group_0.tolist()))
    self.assertGreater(len(drawn), 200)
    for kind in ('epoch', 'cyclic'):
      s = sampling.ClientSampling(kind, 100, 10)
      self.assertAllEqual(
          s.sample_indices(3, 5), s.sample_indices(3, 5, attempt=1)
      )
    own = sampling.BandSampler(1000, 50, 4, seed=3)
    self.assertEqual(
        own.sample(5, attempt=1),
        banded.sample_indices(3, 5, attempt=1).tolist(),
    )

  def test_banded_is_the_band_samplers_schedule(self):
    # The program's draw is BandSampler's: b groups of floor(N / b) taking
    # turns, rate q = K / floor(N / b) inside, each client's rounds b apart.
    s = sampling.ClientSampling('banded', 103, 5, bands=4)
    self.assertAllClose(s.rate, 5 / 25)
    self.assertEqual(s.participations(10), 3)
    self.assertEqual(s.describe()['bands'], 4)
    own = sampling.BandSampler(103, 5, 4, seed=9)
    rounds_of = {}
    for t in range(1, 41):
      drawn = s.sample_indices(9, t).tolist()
      self.assertEqual(drawn, own.sample(t))
      for client in drawn:
        rounds_of.setdefault(client, []).append(t)
    for rounds in rounds_of.values():
      self.assertEqual({r % 4 for r in rounds}, {rounds[0] % 4})
    with self.assertRaisesRegex(ValueError, "only to 'banded'"):
      sampling.ClientSampling('poisson', 100, 5, bands=2)
    with self.assertRaisesRegex(ValueError, 'at most 20 bands'):
      sampling.ClientSampling('banded', 100, 5, bands=21)

  @parameterized.named_parameters(
      ('kind', dict(kind='uniform'), ValueError, 'kind'),
      ('num_clients_zero', dict(num_clients=0), ValueError, 'num_clients'),
      ('num_clients_float', dict(num_clients=4.0), TypeError, 'num_clients'),
      ('k_zero', dict(clients_per_round=0), ValueError, 'clients_per_round'),
      (
          'k_above_n',
          dict(clients_per_round=11),
          ValueError,
          'clients_per_round',
      ),
  )
  def test_bad_construction(self, change, error, message):
    kwargs = dict(kind='poisson', num_clients=10, clients_per_round=3)
    kwargs.update(change)
    with self.assertRaisesRegex(error, message):
      sampling.ClientSampling(**kwargs)

  def test_bad_draw_arguments(self):
    s = sampling.ClientSampling('fixed', 4, 2)
    with self.assertRaisesRegex(ValueError, 'seed'):
      s.sample_indices(-1, 1)
    with self.assertRaisesRegex(ValueError, 'round_num'):
      s.sample_indices(0, 0)
    with self.assertRaisesRegex(ValueError, 'client ids'):
      s.sample(['a', 'b', 'c'], 0, 1)


if __name__ == '__main__':
  tf.test.main()
