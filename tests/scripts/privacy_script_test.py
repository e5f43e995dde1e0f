"""scripts/privacy.py: one run as a user runs it, other cases through main()."""

import json
import subprocess
import sys

import pytest
import tensorflow as tf

from tests import script_runs

pytestmark = pytest.mark.slow


def _run(*args):
  return script_runs.run('privacy.py', *args)


_JSON = (
    '--mechanism=dp_fedavg',
    '--noise_multiplier=1.0',
    '--sampling_rate=0.05',
    '--rounds=100',
    '--delta=1e-5',
    '--format=json',
)
_TARGET = (
    '--mechanism=smp',
    '--epsilon=1.0',
    '--sampling_rate=0.01',
    '--rounds=300',
    '--delta=1e-5',
    '--format=json',
)
_BAD = (
    ('--mechanism=foo', '--rounds=1'),
    ('--mechanism=smp', '--rounds=1', '--delta=1.5', '--noise_multiplier=1'),
    ('--mechanism=smp', '--rounds=0', '--noise_multiplier=1'),
    ('--mechanism=smp', '--rounds=1', '--epsilon=-1'),
    ('--mechanism=smp', '--rounds=x'),
)


class PrivacyScriptTest(tf.test.TestCase):
  """One run as a user runs it; the other cases by main() in one interpreter."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.json, cls.target, *cls.bad = script_runs.run_main(
        'privacy.py', _JSON, _TARGET, *_BAD
    )

  def test_json_names_the_accountants(self):
    result = self.json
    self.assertEqual(result.returncode, 0, result.stderr)
    report = json.loads(result.stdout)
    self.assertGreater(report['rdp_epsilon'], 0)
    self.assertGreater(report['pld_epsilon'], 0)

  def test_quiet_as_a_user_runs_it(self):
    # The environment a user has (no TF_CPP_MIN_LOG_LEVEL): no TF, TFF or
    # absl log line, and no teardown noise from TFF's default context.
    env = {
        k: v
        for k, v in script_runs.env().items()
        if k != 'TF_CPP_MIN_LOG_LEVEL'
    }
    result = subprocess.run(
        [
            sys.executable,
            script_runs.script_path('privacy.py'),
            '--mechanism=smp',
            '--epsilon=8',
            '--rounds=10',
            '--sampling_rate=0.1',
        ],
        capture_output=True,
        text=True,
        cwd=script_runs.ROOT,
        env=env,
        timeout=script_runs.TIMEOUT,
        check=False,
    )
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertEqual(result.stderr, '')
    self.assertIn('noise multiplier', result.stdout)

  def test_target_epsilon_gives_noise(self):
    result = self.target
    self.assertEqual(result.returncode, 0, result.stderr)
    report = json.loads(result.stdout)
    self.assertAllClose(
        report['calibration']['rdp_noise_multiplier'], 1.17, atol=0.01
    )
    self.assertAllClose(
        report['paper']['paper_noise_multiplier'], 2.246, atol=1e-3
    )

  def test_bad_flags_exit_2_with_one_line(self):
    for args, result in zip(_BAD, self.bad):
      self.assertEqual(result.returncode, 2, args)
      lines = [l for l in result.stderr.splitlines() if 'error' in l]
      self.assertLen(lines, 1, result.stderr)
      self.assertEqual(result.stdout, '')


if __name__ == '__main__':
  tf.test.main()
