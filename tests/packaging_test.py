"""The wheel from the clone runs the quickstart and the commands outside it."""

import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from absl.testing import absltest
import pytest

from tests import readme_snippets

pytestmark = pytest.mark.slow

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args, cwd, timeout=900):
  return subprocess.run(
      args,
      cwd=cwd,
      capture_output=True,
      text=True,
      timeout=timeout,
      env={k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
      | {'TF_CPP_MIN_LOG_LEVEL': '3'},
      check=False,
  )


class WheelTest(absltest.TestCase):
  """The wheel, built from the clone and installed outside it."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    # Built from a copy: setuptools writes build/ and tff_priv.egg-info into
    # the tree it builds, which would change the clone under the tests that
    # run beside this one (an egg-info on their path, files for the walks).
    source = os.path.join(cls.tmp, 'source')
    shutil.copytree(
        _ROOT,
        source,
        ignore=shutil.ignore_patterns(
            '.venv',
            '.git',
            'build',
            'dist',
            'output',
            '*.egg-info',
            '__pycache__',
            '.pytest_cache',
        ),
    )
    built = _run(
        [
            sys.executable,
            '-m',
            'pip',
            'wheel',
            '--no-deps',
            '--no-build-isolation',
            '--quiet',
            '-w',
            cls.tmp,
            source,
        ],
        cwd=cls.tmp,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (cls.wheel,) = glob.glob(os.path.join(cls.tmp, 'tff_priv-*.whl'))
    # A fresh venv that sees the stack of this one (.venv's site-packages on
    # its path, without .venv's .pth files: not the editable tff_priv), and
    # the wheel installed into it without dependencies.
    venv = os.path.join(cls.tmp, 'venv')
    made = _run(
        [sys.executable, '-m', 'venv', '--without-pip', venv], cwd=cls.tmp
    )
    assert made.returncode == 0, made.stderr
    cls.python = os.path.join(venv, 'bin', 'python')
    site = _run(
        [
            cls.python,
            '-c',
            'import sysconfig; ' "print(sysconfig.get_paths()['purelib'])",
        ],
        cwd=cls.tmp,
    )
    with open(os.path.join(site.stdout.strip(), 'stack.pth'), 'w') as f:
      f.write(sysconfig.get_paths()['purelib'] + '\n')
    installed = _run(
        [
            cls.python,
            '-m',
            'pip',
            'install',
            '--no-deps',
            '--no-index',
            '--quiet',
            cls.wheel,
        ],
        cwd=cls.tmp,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    cls.bin = os.path.join(venv, 'bin')

  def test_the_wheel_holds_the_license_types_and_commands(self):
    listing = _run(
        [sys.executable, '-m', 'zipfile', '-l', self.wheel], cwd=self.tmp
    ).stdout
    for name in (
        'tff_priv/py.typed',
        'LICENSE',
        'tff_priv_scripts/train.py',
        'tff_priv/program/training.py',
        'tff_priv_tasks/registry.py',
    ):
      self.assertIn(name, listing)
    # No top-level package of a common name: the repository's tasks/ is
    # installed as tff_priv_tasks.
    top = {
        line.split()[0].split('/')[0]
        for line in listing.splitlines()[1:]
        if line.strip() and '/' in line.split()[0]
    }
    self.assertNotIn('tasks', top)
    self.assertNotIn('scripts', top)

  def test_imports_come_from_the_wheel_not_the_clone(self):
    # A user's own tasks.py beside their program changes nothing.
    user = os.path.join(self.tmp, 'user')
    os.makedirs(user, exist_ok=True)
    with open(os.path.join(user, 'tasks.py'), 'w') as f:
      f.write('TASK_NAMES = "a user\'s own module"\n')
    found = _run(
        [
            self.python,
            '-c',
            'import tff_priv, tff_priv_tasks; '
            'from tff_priv.program import config; '
            'print(tff_priv.__file__, tff_priv_tasks.__file__, '
            'config.tasks.__file__)',
        ],
        cwd=user,
    )
    self.assertEqual(found.returncode, 0, found.stderr[-2000:])
    for path in found.stdout.split():
      self.assertTrue(path.startswith(self.tmp), path)
      self.assertNotIn('/user/', path)

  def test_the_training_command_runs_from_outside_the_clone(self):
    helped = _run(
        [os.path.join(self.bin, 'tff-priv-train'), '--help'], cwd=self.tmp
    )
    self.assertEqual(helped.returncode, 0, helped.stderr[-2000:])
    # The script's docstring and its flags, the mechanisms' too (not only
    # with --helpfull).
    for shown in (
        'Trains a task',
        '--mechanism',
        '--compression',
        'tff-priv-train --mechanism=smp',
    ):
      self.assertIn(shown, helped.stdout)
    # Its usage lines name the command, not the clone's script.
    self.assertNotIn('scripts/train.py', helped.stdout)
    self.assertNotIn('Exception ignored', helped.stderr)
    bad = _run(
        [os.path.join(self.bin, 'tff-priv-train'), '--mechanism=nope'],
        cwd=self.tmp,
    )
    self.assertEqual(bad.returncode, 2)
    for command, shown in (
        ('tff-priv-plot', '--run_dirs'),
        ('tff-priv-privacy', '--mechanism'),
        ('tff-priv-audit', '--trials'),
    ):
      helped = _run([os.path.join(self.bin, command), '--help'], cwd=self.tmp)
      self.assertEqual(helped.returncode, 0, helped.stderr[-2000:])
      self.assertIn(shown, helped.stdout)
      script = f"scripts/{command.rsplit('-', 1)[1]}.py"
      self.assertNotIn(script, helped.stdout)  # Usage names the command.
    # The privacy calculator answers from the installed package.
    report = _run(
        [
            os.path.join(self.bin, 'tff-priv-privacy'),
            '--mechanism=blt',
            '--epsilon=2',
            '--population=100',
            '--clients_per_round=10',
            '--rounds=30',
            '--format=json',
        ],
        cwd=self.tmp,
    )
    self.assertEqual(report.returncode, 0, report.stderr[-2000:])
    self.assertEqual(json.loads(report.stdout)['blt']['streams'], 3)

  def test_the_readme_quickstart_runs_on_the_installed_wheel(self):
    claimed = readme_snippets.claimed_after('## Quickstart')
    path = os.path.join(self.tmp, 'quickstart.py')
    with open(path, 'w') as f:
      f.write(readme_snippets.quickstart_code())
    result = _run([self.python, path], cwd=self.tmp)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertEqual(result.stdout.strip().splitlines()[-1], claimed)


if __name__ == '__main__':
  absltest.main()
