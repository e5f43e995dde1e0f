"""Tests of scripts/smp_experiments.py: a subprocess, then main() again."""

import json
import math
import os
import tempfile

import pytest
import tensorflow as tf

from tests import script_runs

pytestmark = pytest.mark.slow

_D = 8 * 8 * 256 + 256 + 256 * 10 + 10  # tasks.models.mlp on 8x8 digits.
_K, _ROUNDS, _EPSILON = 8, 2, 4.0
_P1 = 'Fed-SMP, p = 1 (client noise, secure sum)'


def _args(output_dir, *extra):
  return (
      '--tasks=digits',
      '--model=mlp',
      '--num_clients=40',
      '--samples_per_client=10',
      '--public_clients=4',
      f'--clients_per_round={_K}',
      f'--rounds={_ROUNDS}',
      '--local_epochs=1',
      f'--epsilon={_EPSILON}',
      '--clip=0.5',
      '--target_accuracy=0',
      '--test_examples=200',
      '--noprogress',
      f'--output_dir={output_dir}',
      *extra,
  )


def _run(output_dir, *extra):
  return script_runs.run('smp_experiments.py', *_args(output_dir, *extra))


def _main(*cases):
  """main() on each (output_dir, *extra) case, in one interpreter."""
  return script_runs.run_main(
      'smp_experiments.py', *(_args(*case) for case in cases)
  )


def _summary(run_dir):
  with open(os.path.join(run_dir, 'summary.json')) as f:
    return json.load(f)


def _every_run_rows(summary_md):
  rows = {}
  for line in summary_md.splitlines():
    cells = [c.strip() for c in line.strip('|').split('|')]
    if len(cells) == 11 and cells[0] not in ('run', '---'):
      rows[cells[0]] = cells
  return rows


class SmpExperimentsScriptTest(tf.test.TestCase):
  """scripts/smp_experiments.py end to end on the 'digits' task.

  A tiny setting (digits' 8x8 images, its MLP with d = 19,210, 40 clients of 10
  examples, 4 of them top_k's public set, K = 8 expected per round, 2 rounds,
  target eps 4; Shakespeare's char-LSTM takes longer to build than this whole
  test, and its runs are the same configurations of another task):

  * the first invocation (p = 0.1, top_k only) runs Fed-SMP at p = 1, the
    noise-free ceiling, TFF's DP-FedAvg and top_k at p = 0.1, one run directory
    each, and writes summary.md and accuracy_vs_p.png; every table row is
    checked against its run's summary.json and against what the setting implies:
    k = p d, uplink = T x K x 4 k bytes (the configured K, 32 bits per kept
    value), MB to the target 0 = round 1's uplink, eps spent within the
    calibration's tolerance below the target (every round is charged the
    calibrated sigma), inf without noise;
  * a second invocation adding rand_k runs only that run (the others are not
    touched); a third with another --rounds is refused with exit status 2 before
    anything runs; bad flags are refused the same way. The first invocation runs
    as a user runs it (a subprocess); the others call the script's main() in one
    interpreter (`script_runs.run_main`).

  The subprocesses import the repository's own code (PYTHONPATH), not an
  installed copy.
  """

  def _check_row(self, cells, summary, p):
    k = _D if p == 1.0 else round(p * _D)
    name, kept, sigma, final, best, _, _, eps, per_client, mb, to_target = cells
    del name, best
    self.assertEqual(int(kept.replace(',', '')), k)
    self.assertEqual(int(per_client.replace(',', '')), 4 * k)
    self.assertEqual(summary['uplink_bytes']['total'], _ROUNDS * _K * 4 * k)
    self.assertAllClose(float(mb), _ROUNDS * _K * 4 * k / 1e6, rtol=1e-3)
    self.assertAllClose(float(to_target), _K * 4 * k / 1e6, rtol=1e-3)
    self.assertEqual(float(final), round(summary['final_test_accuracy'], 4))
    self.assertEqual(
        float(sigma),
        round(summary['parameters']['resolved']['noise_multiplier'], 4),
    )
    self.assertEqual(
        float(eps), round(float(summary['privacy']['rdp_epsilon']), 4)
    )
    if float(sigma) == 0:
      self.assertEqual(float(eps), math.inf)
    else:
      self.assertBetween(float(eps), _EPSILON - 0.01, _EPSILON)

  def test_end_to_end_resume_and_refusals(self):
    out = tempfile.mkdtemp(dir=self.get_temp_dir())
    first = _run(out, '--compressions=0.1', '--masks=top_k')
    self.assertEqual(first.returncode, 0, first.stderr[-3000:])
    labels = {
        'digits-p1',
        'digits-noise_free',
        'digits-dp_fedavg',
        'digits-fed_smp-top_k-p0.1',
    }
    self.assertEqual(
        set(os.listdir(out)), labels | {'summary.md', 'accuracy_vs_p.png'}
    )
    with open(os.path.join(out, 'summary.md')) as f:
      summary_md = f.read()
    self.assertIn('| mask | p=0.1 | p=1 |', summary_md)
    self.assertIn('| Fed-SMP top_k |', summary_md)
    self.assertNotIn('| Fed-SMP rand_k |', summary_md)
    self.assertIn(summary_md.strip(), first.stdout)
    rows = _every_run_rows(summary_md)
    names = {
        'digits-p1': (_P1, 1.0),
        'digits-noise_free': ('no noise (clip C, p = 1)', 1.0),
        'digits-dp_fedavg': (
            "DP-FedAvg (TFF's central noise, fixed clip C)",
            1.0,
        ),
        'digits-fed_smp-top_k-p0.1': ('Fed-SMP top_k p=0.1', 0.1),
        'digits-fed_smp-rand_k-p0.1': ('Fed-SMP rand_k p=0.1', 0.1),
    }
    self.assertCountEqual(rows, [names[label][0] for label in labels])
    for label in labels:
      with self.subTest(label):
        name, p = names[label]
        self._check_row(rows[name], _summary(os.path.join(out, label)), p)
    # Same sampling rate (none held out), same calibrated sigma.
    self.assertEqual(rows[_P1][2], rows[names['digits-dp_fedavg'][0]][2])
    with open(os.path.join(out, 'accuracy_vs_p.png'), 'rb') as f:
      self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')

    # Resume: only the new run runs; the finished ones are not touched.
    before = {
        label: os.path.getmtime(os.path.join(out, label, 'summary.json'))
        for label in labels
    }
    # The second and third invocations: main() again, in one interpreter.
    second, other = _main(
        (out, '--compressions=0.1', '--masks=rand_k,top_k'),
        (out, '--compressions=0.1', f'--rounds={_ROUNDS + 1}'),
    )
    self.assertEqual(second.returncode, 0, second.stderr[-3000:])
    started = [l for l in second.stderr.splitlines() if l.startswith('[')]
    self.assertEqual(started, ['[4/5] digits-fed_smp-rand_k-p0.1'])
    for label, mtime in before.items():
      self.assertEqual(
          os.path.getmtime(os.path.join(out, label, 'summary.json')), mtime
      )
    with open(os.path.join(out, 'summary.md')) as f:
      summary_md = f.read()
    self.assertIn('| Fed-SMP rand_k |', summary_md)
    rand_k = 'digits-fed_smp-rand_k-p0.1'
    self._check_row(
        _every_run_rows(summary_md)[names[rand_k][0]],
        _summary(os.path.join(out, rand_k)),
        0.1,
    )

    # Another setting in the same output directory: refused, nothing runs.
    self.assertEqual(other.returncode, 2)
    errors = [l for l in other.stderr.splitlines() if 'error' in l]
    self.assertLen(errors, 1, other.stderr[-2000:])
    self.assertStartsWith(errors[0], 'smp_experiments.py: error: ')
    self.assertIn('total_rounds', errors[0])
    self.assertNotIn('[1/', other.stderr)
    self.assertLen(os.listdir(out), 7)

  def test_bad_flags_exit_2(self):
    out = os.path.join(tempfile.mkdtemp(dir=self.get_temp_dir()), 'out')
    cases = (
        ('--compressions=1.0', '--compressions'),
        ('--compressions=x', '--compressions'),
        ('--masks=rand_k,foo', '--masks'),
        (
            '--tasks=shakespeare_offline --shakespeare_rounds=0',
            '--shakespeare_rounds',
        ),
        ('--tasks=digits,nope', '--tasks'),
    )
    results = _main(*((out, *flag.split()) for flag, _ in cases))
    for (flag, word), result in zip(cases, results):
      with self.subTest(flag):
        self.assertEqual(result.returncode, 2, result.stderr[-2000:])
        # TFF's executor may still complain at interpreter exit (a
        # traceback of its own __del__, no line with 'error'), as for train.py.
        lines = [l for l in result.stderr.splitlines() if 'error' in l]
        self.assertLen(lines, 1, result.stderr[-2000:])
        self.assertStartsWith(lines[0], 'smp_experiments.py: error: ')
        self.assertIn(word, lines[0])
        self.assertEqual(result.stdout, '')
        self.assertFalse(os.path.exists(out))


if __name__ == '__main__':
  tf.test.main()
