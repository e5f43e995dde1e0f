"""scripts/ldp_table1.py end to end on the digits task, in a subprocess."""

import json
import os
import subprocess
import sys
import tempfile

import tensorflow as tf

_SCRIPT = os.path.join(
    os.path.dirname(__file__), '..', '..', 'scripts', 'ldp_table1.py'
)


def _run(output_dir, *extra):
  return subprocess.run(
      [
          sys.executable, _SCRIPT, '--task=digits', '--model=mlp',
          '--clients=4', '--rounds=1', '--batch_size=32',
          '--epsilons=1,10', '--modes=weights,deltas',
          f'--output_dir={output_dir}', *extra,
      ],
      capture_output=True,
      text=True,
      timeout=600,
      check=False,
      env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'},
  )


class LdpTable1ScriptTest(tf.test.TestCase):

  def test_end_to_end_and_resume(self):
    out = tempfile.mkdtemp(dir=self.get_temp_dir())
    result = _run(out)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    with open(os.path.join(out, 'results.jsonl')) as f:
      records = [json.loads(line) for line in f]
    # 2 modes x (noise-free + 2 eps) x 1 run.
    self.assertLen(records, 6)
    keys = {r['key'] for r in records}
    self.assertIn('weights/eps=none/run=0', keys)
    self.assertIn('deltas/eps=10.0/run=0', keys)
    for r in records:
      self.assertBetween(r['test_accuracy'], 0.0, 1.0)
      if r['epsilon'] is None:
        self.assertNotIn('privacy', r)
        continue
      cum = r['privacy']['cumulative']
      self.assertEqual(
          cum['plain_composition_epsilon'],
          r['num_values'] * r['rounds'] * r['epsilon'],
      )
      self.assertEqual(len(r['history']), 1)
      self.assertIn('cumulative_rdp_epsilon', r['history'][0])
    # The printed table has the paper's row and one row per mode.
    self.assertIn('97.26', result.stdout)
    self.assertIn('measured, weights', result.stdout)
    self.assertIn('measured, deltas', result.stdout)
    self.assertIn('plain composition', result.stdout)
    with open(os.path.join(out, 'table.md')) as f:
      self.assertIn('96.24', f.read())
    with open(os.path.join(out, 'accuracy_vs_eps.png'), 'rb') as f:
      self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')

    # A rerun skips every finished config and appends nothing.
    again = _run(out)
    self.assertEqual(again.returncode, 0, again.stderr[-3000:])
    self.assertEqual(again.stdout.count('done already'), 6)
    with open(os.path.join(out, 'results.jsonl')) as f:
      self.assertLen(f.readlines(), 6)

  def test_bad_mode_fails(self):
    out = tempfile.mkdtemp(dir=self.get_temp_dir())
    result = _run(out, '--modes=both')
    self.assertNotEqual(result.returncode, 0)
    self.assertIn('--modes', result.stderr)


if __name__ == '__main__':
  tf.test.main()
