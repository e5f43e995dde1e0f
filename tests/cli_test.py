"""tff_priv.cli: what a script's exit leaves behind."""

import gc
import json
import os
import subprocess
import sys
import tempfile
import types

from absl.testing import absltest

from tff_priv import cli

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

  def test_a_finalizer_that_imports_during_the_cleanup_is_harmless(self):
    # CI's failure: a garbage collection inside the listing of `sys.modules`
    # ran a finalizer that imported. A collection on every allocation, with a
    # callback that adds and removes a module, makes it happen every time.
    fd, path = tempfile.mkstemp(suffix='.py')
    os.close(fd)
    generated = types.ModuleType('__autograph_generated_file_cli_test')
    generated.__file__ = path
    sys.modules[generated.__name__] = generated
    self.addCleanup(sys.modules.pop, generated.__name__, None)
    collections = []

    def import_on_collection(phase, info):
      del info
      if phase == 'start':
        collections.append(1)
        sys.modules['_cli_test_%d' % (len(collections) % 2)] = generated
        sys.modules.pop('_cli_test_%d' % ((len(collections) + 1) % 2), None)

    threshold = gc.get_threshold()
    gc.callbacks.append(import_on_collection)
    gc.set_threshold(1)
    try:
      cli._remove_autograph_files()  # pylint: disable=protected-access
    finally:
      gc.set_threshold(*threshold)
      gc.callbacks.remove(import_on_collection)
      for name in ('_cli_test_0', '_cli_test_1'):
        sys.modules.pop(name, None)
    self.assertNotEmpty(collections)  # The finalizer ran: the test can fail.
    self.assertFalse(os.path.exists(path))


if __name__ == '__main__':
  absltest.main()
