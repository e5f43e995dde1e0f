"""scripts/benchmark_*.py end to end at their smallest settings."""

import json
import shutil
import tempfile

import pytest
import tensorflow as tf

from tests import script_runs

pytestmark = pytest.mark.slow


class BenchmarkScriptsTest(tf.test.TestCase):
  """Each script runs in a subprocess."""

  def test_ldp(self):
    result = script_runs.run(
        'benchmark_ldp.py',
        '--flat',
        '--d=1000',
        '--encode_repeats=1',
        '--clients=2',
        '--factory_repeats=1',
        '--transport_clients=2',
    )
    self.assertEqual(result.returncode, 0, result.stderr)
    for part in (
        '[1] client encode',
        '[2] factory next',
        '[3] split and shuffle',
        'load average at end',
    ):
      self.assertIn(part, result.stdout)

  def test_smp(self):
    result = script_runs.run(
        'benchmark_smp.py',
        '--shapes=10x3,3',
        '--clients=2',
        '--compressions=0.5',
        '--secure_compressions=0.5',
        '--repeats=1',
        '--value_source=clients',
    )
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn('value_source=clients', result.stdout)
    self.assertNotIn('value_source=python', result.stdout)
    self.assertIn('smp_secure_p0.5', result.stdout)

  def test_udp(self):
    result = script_runs.run(
        'benchmark_udp.py', '--shapes=10x3,3', '--clients=2', '--repeats=1'
    )
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn('udp_unweighted', result.stdout)
    self.assertIn('floor for client-side noise', result.stdout)

  def test_rounds(self):
    result = script_runs.run(
        'benchmark_rounds.py',
        '--task=digits',
        '--clients_per_round=2',
        '--processes=fedavg,dp_fedavg',
        '--rounds=1',
        '--warmup=0',
        '--format=json',
    )
    self.assertEqual(result.returncode, 0, result.stderr)
    [run] = json.loads(result.stdout)
    self.assertEqual(run['clients_per_round'], 2)
    self.assertEqual(
        [row['name'] for row in run['rows']], ['fedavg', 'dp_fedavg']
    )

  def test_train(self):
    output = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, output)
    result = script_runs.run(
        'benchmark_train.py',
        '--rounds_shown=1,2',
        f'--json_output={output}/memory.json',
        '--',
        '--task=digits',
        '--total_rounds=2',
        f'--root_output_dir={output}/run',
    )
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertIn('time to round 1:', result.stdout)
    self.assertIn('round 2: ', result.stdout)
    with open(f'{output}/memory.json') as f:
      figures = json.load(f)
    self.assertEqual(sorted(figures['rss_mb']), ['1', '2'])
    self.assertGreater(figures['rss_mb']['1'], 100.0)


if __name__ == '__main__':
  tf.test.main()
