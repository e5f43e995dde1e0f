"""Tests for tff_priv.executors: few executors kept, the dropped ones closed."""

from unittest import mock

from absl.testing import absltest
import numpy as np
import tensorflow_federated as tff

from tff_priv import executors
from tff_priv import runtime


class ExecutorsTest(absltest.TestCase):

  def test_a_context_keeps_few_executors_and_closes_the_rest(self):
    # A computation called with 1, 2, ..., 7 clients: TFF makes an executor
    # per count; the context keeps KEPT of them and closes every other one
    # (TFF's own cache kept 10 and closed none).
    context = runtime.set_context()
    self.addCleanup(runtime.set_context)

    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
    def total(values):
      return tff.federated_sum(values)

    closed = []
    real_close = tff.framework.RemoteExecutor.close

    def close(executor):
      closed.append(executor)
      real_close(executor)

    with mock.patch.object(tff.framework.RemoteExecutor, 'close', close):
      for n in range(1, 8):
        self.assertEqual(total(list(range(n))), sum(range(n)))
    cache = context.executor_factory._executors  # pylint: disable=protected-access
    self.assertLen(cache, executors.KEPT)
    self.assertLen(closed, 7 - executors.KEPT)
    self.assertEqual(total([5, 6]), 11)  # An evicted count runs again.

  def test_a_factory_without_tffs_cache_is_refused(self):
    with self.assertRaisesRegex(RuntimeError, 'TFF 0.87'):
      executors.close_evicted(object())


if __name__ == '__main__':
  absltest.main()
