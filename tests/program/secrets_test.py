"""What a run directory may publish: no file but the secret ones has a seed."""

import dataclasses
import json
import os
import shutil
import stat
import struct
import tempfile

from absl.testing import parameterized
import pytest
import tensorflow as tf

from tff_priv.program import config as config_lib
from tff_priv.program import layout
from tff_priv.program import registry
from tff_priv.program import training

# The smallest parameters that build each mechanism on 'digits'.
_PARAMS = {
    'none': {},
    'dp_fedavg': dict(noise_multiplier=1.0, clip=1.0),
    'dp_ftrl': dict(noise_multiplier=1.0, clip=1.0),
    'blt': dict(epsilon=8.0, clip=1.0),
    'bandmf': dict(noise_multiplier=1.0, bands=2),
    'ldp': dict(ldp_epsilon=2.0, ldp_radius=0.05),
    'udp': dict(epsilon=8.0, clip=1.0),
    'smp': dict(noise_multiplier=1.0, compression=0.2),
    'distortion': dict(noise_multiplier=0.5, parameter_variance=1e-4, rho=0.3),
}


def _config(mechanism, **changes):
  return dataclasses.replace(
      training.RunConfig(
          task='digits',
          batch_size=20,
          mechanism=mechanism,
          clients_per_round=3,
          total_rounds=2,
          eval_every=1,
          client_learning_rate=0.1,
          params=_PARAMS[mechanism],
      ),
      **changes,
  )


def _publishable_files(root):
  """Every file of the run directory outside the secret ones."""
  for name in os.listdir(root):
    if layout.is_secret(name):
      continue
    path = os.path.join(root, name)
    if os.path.isdir(path):
      for folder, _, names in os.walk(path):
        yield from (os.path.join(folder, n) for n in names)
    else:
      yield path


class _SecretsChecks(tf.test.TestCase):
  """Runs a mechanism and checks what its run directory publishes.

  Every mechanism runs 2 rounds on 'digits' with its seeds drawn from the
  operating system (as a user's run does). The seeds (`secrets.json`, mode 0600,
  and the checkpoints, mode 0700) must appear in no other file, neither as
  decimal text nor as the 8 bytes of an int64 (TensorBoard's event files and the
  models are binary), and neither must any client draw: the write-ahead ledger
  held the sampling seed before, from which every round's clients were rebuilt
  exactly.
  """

  def _run(self, mechanism, **changes):
    root = os.path.join(tempfile.mkdtemp(), 'run')
    self.addCleanup(shutil.rmtree, os.path.dirname(root), True)
    training.run(_config(mechanism, **changes), root, progress=False)
    return root

  def _check_no_seed_is_published(self, root):
    with open(layout.path(root, layout.SECRETS)) as f:
      secrets = json.load(f)
    seeds = [v for v in secrets.values() if isinstance(v, int)]
    self.assertNotEmpty(seeds)
    for seed in seeds:
      # 62 random bits: 18-19 digits, which no other value repeats by chance.
      self.assertGreater(seed, 2**40)
    patterns = [
        p
        for s in seeds
        for p in (str(s).encode(), struct.pack('<q', s), struct.pack('>q', s))
    ]
    files = list(_publishable_files(root))
    self.assertIn(layout.path(root, layout.PRIVACY), files)
    self.assertIn(layout.path(root, layout.CONFIG), files)
    for path in files:
      with open(path, 'rb') as f:
        content = f.read()
      for pattern in patterns:
        self.assertNotIn(pattern, content, f'{path} holds a seed')
    mode = stat.S_IMODE(os.stat(layout.path(root, layout.SECRETS)).st_mode)
    self.assertEqual(mode, 0o600)
    mode = stat.S_IMODE(os.stat(layout.path(root, layout.CHECKPOINTS)).st_mode)
    self.assertEqual(mode, 0o700)


class DpFedAvgSecretsTest(_SecretsChecks):

  def test_no_publishable_file_holds_a_seed(self):
    root = self._run('dp_fedavg')
    self._check_no_seed_is_published(root)

  @pytest.mark.slow
  def test_a_given_seed_is_kept_secret_and_a_resume_must_repeat_it(self):
    seed = 2**50 + 12345
    root = self._run('dp_fedavg', sampling_seed=seed)
    self._check_no_seed_is_published(root)
    with open(layout.path(root, layout.CONFIG)) as f:
      self.assertEqual(json.load(f)['sampling_seed'], config_lib.GIVEN_SEED)
    with self.assertRaisesRegex(training.ConfigError, 'another sampling_seed'):
      training.run(
          _config('dp_fedavg', sampling_seed=seed + 1), root, progress=False
      )


@pytest.mark.slow
class EveryMechanismSecretsTest(_SecretsChecks, parameterized.TestCase):

  @parameterized.parameters(
      *(m for m in registry.MECHANISMS if m != 'dp_fedavg')
  )
  def test_no_publishable_file_holds_a_seed(self, mechanism):
    self._check_no_seed_is_published(self._run(mechanism))

  def test_nor_the_canaries_seed(self):
    root = self._run('dp_fedavg', audit_canaries=2)
    with open(layout.path(root, layout.SECRETS)) as f:
      self.assertIsInstance(json.load(f)['canary_seed'], int)
    self._check_no_seed_is_published(root)


if __name__ == '__main__':
  tf.test.main()
