"""tff_priv.cli: what a script's exit leaves behind."""

import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest

# Converts a function with autograph (TF writes its source to a temporary
# file), prints the file, and exits as the scripts do.
_CHILD = """
import json
import sys
import tensorflow as tf
from tff_priv import cli

@tf.function
def f(x):
  if x > 0:
    x = x - 1
  return x

f(tf.constant(2))
print(json.dumps([m.__file__ for n, m in sys.modules.items()
                  if n.startswith('__autograph_generated_file')]))
cli.exit_now(0)
"""


class ExitNowTest(absltest.TestCase):

  def test_exit_now_leaves_no_autograph_file(self):
    # From a file: autograph reads the function's source.
    with tempfile.NamedTemporaryFile('w', suffix='.py', delete=False) as f:
      f.write(_CHILD)
    self.addCleanup(os.remove, f.name)
    result = subprocess.run(
        [sys.executable, f.name],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'},
        check=False,
    )
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    files = json.loads(result.stdout.strip().splitlines()[-1])
    self.assertNotEmpty(files)  # Autograph converted f: the check can fail.
    self.assertEqual([f for f in files if os.path.exists(f)], [])


if __name__ == '__main__':
  absltest.main()
