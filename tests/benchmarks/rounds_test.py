"""Tests for tff_priv.benchmarks.rounds at tiny scale."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny_models
from tff_priv.benchmarks import rounds
from tff_priv.program import registry

pytestmark = pytest.mark.slow


def _clients(k, n=4):
  rng = np.random.default_rng(0)
  return [
      tf.data.Dataset.from_tensor_slices(
          (
              rng.normal(size=(n, 4)).astype(np.float32),
              rng.integers(0, 3, size=n).astype(np.int32),
          )
      ).batch(2)
      for _ in range(k)
  ]


class RoundsTest(tf.test.TestCase):

  def test_every_process_runs_and_is_summarized(self):
    names = (
        rounds.FEDAVG,
        rounds.TFF_DP_FEDAVG,
        rounds.UDP_PER_EXAMPLE,
    ) + registry.MECHANISMS
    entries = rounds.build_processes(
        names,
        model_fn=tiny_models.softmax_model_fn,
        num_clients=6,
        clients_per_round=3,
        learning_rate=0.1,
        min_client_examples=4,
    )
    self.assertEqual(list(entries), list(names))
    times = rounds.time_rounds(entries, _clients(3), rounds=2, warmup=1)
    self.assertEqual(set(times), set(names))
    for seconds in times.values():
      self.assertLen(seconds, 2)
      self.assertTrue(all(s > 0 for s in seconds))
    noise = rounds.noise_draw_seconds(tiny_models.softmax_model_fn, 3)
    self.assertGreater(noise, 0.0)
    rows = rounds.summarize(times, noise)
    self.assertEqual([r['name'] for r in rows], list(names))
    by_name = {r['name']: r for r in rows}
    self.assertEqual(by_name[rounds.FEDAVG]['ratio'], 1.0)
    for name, row in by_name.items():
      self.assertEqual(row['floor'] is not None, name in rounds.CLIENT_NOISE)
    self.assertLen(rounds.format_table(rows).splitlines(), len(names) + 2)

  def test_summarize(self):
    times = {
        rounds.FEDAVG: [2.0, 1.0, 3.0],
        'udp': [4.0, 5.0, 9.0],
        'smp': [3.0, 3.0, 3.0],
    }
    rows = {r['name']: r for r in rounds.summarize(times, noise_seconds=0.5)}
    self.assertAllClose(
        [rows['udp']['median_seconds'], rows['udp']['ratio']], [5.0, 2.5]
    )
    self.assertAllClose(rows[rounds.FEDAVG]['spread'], 1.0)  # (3 - 1) / 2.
    self.assertAllClose(rows['udp']['floor'], 1.25)  # (2 + 0.5) / 2.
    self.assertIsNone(rows['smp']['floor'])
    self.assertEqual(rows['smp']['spread'], 0.0)

  def test_summarize_against_another_baseline(self):
    times = {'fedavg (local)': [2.0], 'fedavg (1 worker)': [3.0]}
    rows = rounds.summarize(times, baseline='fedavg (local)')
    self.assertEqual([r['ratio'] for r in rows], [1.0, 1.5])
    self.assertIn(
        'ratio to fedavg (local)', rounds.format_table(rows, 'fedavg (local)')
    )

  def test_each_entry_runs_in_its_context(self):
    entries = rounds.build_processes(
        [rounds.FEDAVG],
        model_fn=tiny_models.softmax_model_fn,
        num_clients=6,
        clients_per_round=3,
        learning_rate=0.1,
        min_client_examples=4,
    )
    seen = []

    class Recording(tff.framework.SyncContext):
      """Records which context ran each round."""

      def __init__(self, name, inner):
        self.name, self.inner = name, inner

      def invoke(self, comp, arg):
        seen.append(self.name)
        return self.inner.invoke(comp, arg)

    inner = tff.framework.get_context_stack().current
    entries, contexts, baseline = rounds.placed(
        entries, {place: Recording(place, inner) for place in ('a', 'b')}
    )
    self.assertEqual(list(entries), ['fedavg (a)', 'fedavg (b)'])
    self.assertEqual(baseline, 'fedavg (a)')
    try:
      rounds.time_rounds(
          entries, _clients(3), rounds=1, warmup=0, contexts=contexts
      )
    finally:
      tff.framework.set_default_context(inner)
    # initialize and one round each, in its own context.
    self.assertEqual(seen, ['a', 'b', 'a', 'b'])

  def test_client_noise_is_the_local_noise_mechanisms(self):
    # CLIENT_NOISE is read from the registry's noise kinds: the mechanisms
    # whose built guarantee noises each upload on its client.
    for name in registry.MECHANISMS:
      mechanism = rounds.build_mechanism(
          name,
          model_fn=tiny_models.softmax_model_fn,
          num_clients=6,
          clients_per_round=3,
          learning_rate=0.1,
          min_client_examples=4,
      )
      local = (
          mechanism.guarantee is not None
          and mechanism.guarantee.noise == 'local'
      )
      self.assertEqual(name in rounds.CLIENT_NOISE, local, name)
    self.assertIn(rounds.UDP_PER_EXAMPLE, rounds.CLIENT_NOISE)

  def test_run_prints_a_table_per_k(self):
    lines = []
    results = rounds.run(
        rounds.Options(
            task='digits',
            clients_per_round=(2, 3),
            processes=(rounds.FEDAVG, 'smp'),
            rounds=1,
            warmup=0,
        ),
        out=lines.append,
    )
    self.assertEqual([r['clients_per_round'] for r in results], [2, 3])
    self.assertEqual(
        [row['name'] for row in results[0]['rows']], [rounds.FEDAVG, 'smp']
    )
    self.assertLen(lines, 4)  # A title and a table per K.
    self.assertIn('| smp |', lines[1])
    for row in results[0]['rows']:
      # This process and TFF's worker: at least what TensorFlow takes alone.
      self.assertGreater(row['peak_rss_mb'], 100.0)

  def test_unknown_process(self):
    with self.assertRaisesRegex(ValueError, 'process'):
      rounds.build_processes(
          ['fedsgd'],
          model_fn=tiny_models.softmax_model_fn,
          num_clients=6,
          clients_per_round=3,
          learning_rate=0.1,
          min_client_examples=4,
      )


if __name__ == '__main__':
  tf.test.main()
