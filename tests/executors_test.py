"""Tests of tff_priv.executors: few kept, dropped ones closed, fresh workers."""

import asyncio
import contextlib
import io
import os
import subprocess
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

  def _total(self):
    @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
    def total(values):
      return tff.federated_sum(values)

    return total

  def _counts_and_workers(self, program=False):
    """Worker PIDs seen while `total` runs with 1, 2, ... clients."""
    # RESTART_AFTER as it is when the context is made: 2 here, for speed.
    with mock.patch.object(executors, 'RESTART_AFTER', 2):
      context = runtime.set_context(program=program, start_worker=not program)
    self.addCleanup(runtime.set_context)
    total = self._total()
    calls = 2 * (executors.KEPT + 2)
    seen = []
    # Streams without a file (TFF hands the worker sys.stdout / sys.stderr).
    self.enter_context(contextlib.redirect_stdout(io.StringIO()))
    self.enter_context(contextlib.redirect_stderr(io.StringIO()))
    for n in range(1, calls + 1):
      if program:

        async def call(n=n):
          return await total(list(range(n))).get_value()

        result = asyncio.run(call())
      else:
        result = total(list(range(n)))
      self.assertEqual(result, sum(range(n)))
      seen.append(tuple(runtime.worker_pids()))
    return context, seen

  def test_a_fresh_worker_after_restart_after_closed_executors(self):
    # Counts 1 .. KEPT are kept; every later count closes one executor. After
    # RESTART_AFTER closed ones the next new count runs on a new worker, and
    # the stopped worker is reaped (no child of ours is left a zombie).
    _, seen = self._counts_and_workers()
    self.assertTrue(all(len(pids) == 1 for pids in seen), seen)
    # start_worker keeps the count 0 as well; a restart empties the cache.
    first_restart = executors.KEPT - 1 + 2  # 0-based; RESTART_AFTER = 2
    second_restart = first_restart + executors.KEPT + 2
    changes = [i for i in range(1, len(seen)) if seen[i] != seen[i - 1]]
    self.assertEqual(changes, [first_restart, second_restart])
    children = subprocess.run(
        ['ps', '--ppid', str(os.getpid()), '-o', 'pid=,stat='],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split('\n')
    zombies = [c for c in children if c.split()[1:2] and c.split()[1][0] == 'Z']
    self.assertFalse(zombies, children)

  def test_a_program_context_keeps_its_worker(self):
    # The async context may run computations side by side: no restart.
    _, seen = self._counts_and_workers(program=True)
    self.assertLen(set(seen), 1)

  def test_restart_closes_what_it_keeps_and_swaps_the_stack_function(self):
    made, closed, restarts = [], [], []

    class Executor(tff.framework.RemoteExecutor):
      """An executor of a generation of workers, connected to none."""

      def __init__(self, generation):  # pylint: disable=super-init-not-called
        self.generation = generation

      def close(self):
        closed.append(self)

    def stack_fn(generation):
      def make(cardinalities):
        del cardinalities
        made.append(Executor(generation))
        return made[-1]

      return make

    def restart(old):
      restarts.append(old)
      return stack_fn(len(restarts))

    factory = tff.framework.ResourceManagingExecutorFactory(stack_fn(0))
    executors.close_evicted(factory, kept=2, restart=restart, restart_after=3)
    for n in range(1, 6):  # counts 3, 4, 5 close 3 executors
      factory.create_executor({tff.CLIENTS: n})
    self.assertEqual([e.generation for e in made], [0] * 5)
    self.assertLen(closed, 3)
    self.assertEmpty(restarts)
    factory.create_executor({tff.CLIENTS: 5})  # kept: no restart
    self.assertEmpty(restarts)
    new = factory.create_executor({tff.CLIENTS: 1})
    self.assertLen(restarts, 1)
    self.assertEqual(new.generation, 1)
    self.assertLen(closed, 5)  # and the two kept ones (counts 4 and 5)
    self.assertEqual(  # the new worker's executor, kept alone
        list(factory._executors.values()), [new]  # pylint: disable=protected-access
    )

  def test_a_failed_restart_keeps_the_old_stack_function(self):
    made = []

    def stack_fn(cardinalities):
      made.append(cardinalities[tff.CLIENTS])
      executor = mock.create_autospec(tff.framework.RemoteExecutor)
      return executor

    def restart(old):
      raise OSError('no worker binary')

    factory = tff.framework.ResourceManagingExecutorFactory(stack_fn)
    executors.close_evicted(factory, kept=1, restart=restart, restart_after=1)
    factory.create_executor({tff.CLIENTS: 1})
    factory.create_executor({tff.CLIENTS: 2})  # closes 1
    with self.assertLogs(level='WARNING') as logs:
      factory.create_executor({tff.CLIENTS: 3})  # restart fails
    self.assertIn('worker restart failed: no worker binary', logs.output[0])
    self.assertEqual(made, [1, 2, 3])
    self.assertEqual(factory._executors.closed, 0)  # pylint: disable=protected-access

  def test_a_factory_without_tffs_service_manager_is_refused_at_once(self):
    factory = tff.framework.ResourceManagingExecutorFactory(lambda c: None)
    with self.assertRaisesRegex(RuntimeError, 'TFF 0.87'):
      runtime._worker_restart(factory, 0)  # pylint: disable=protected-access

  def test_a_factory_without_tffs_cache_is_refused(self):
    with self.assertRaisesRegex(RuntimeError, 'TFF 0.87'):
      executors.close_evicted(object())

  def test_bad_sizes_are_refused(self):
    factory = tff.framework.ResourceManagingExecutorFactory(lambda c: None)
    with self.assertRaisesRegex(ValueError, 'kept and restart_after'):
      executors.close_evicted(factory, kept=0)
    with self.assertRaisesRegex(ValueError, 'kept and restart_after'):
      executors.close_evicted(factory, restart_after=0)


if __name__ == '__main__':
  absltest.main()
