"""The pinned stack imports and is the one tff_priv is built for."""

import os
import re

import numpy as np
import tensorflow as tf


class StackTest(tf.test.TestCase):

  def test_imports_and_versions(self):
    import dp_accounting  # pylint: disable=g-import-not-at-top
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    import tensorflow_privacy  # pylint: disable=g-import-not-at-top

    import tff_priv  # pylint: disable=g-import-not-at-top

    self.assertEqual(tff.__version__, '0.87.0')
    self.assertTrue(tf.__version__.startswith('2.14.'), tf.__version__)
    self.assertEqual(tensorflow_privacy.__version__, '0.9.0')
    self.assertTrue(hasattr(dp_accounting, 'rdp'))
    self.assertEqual(
        int(np.__version__.split('.')[0]), 1, 'numpy must stay 1.x'
    )
    with open(
        os.path.join(os.path.dirname(__file__), '..', 'tff_priv', '__init__.py')
    ) as f:
      version = re.search(r"__version__ = '([^']+)'", f.read()).group(1)
    self.assertEqual(tff_priv.__version__, version)


if __name__ == '__main__':
  tf.test.main()
