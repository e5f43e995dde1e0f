"""TFF's executors per client count: kept few, closed when dropped.

TFF builds one executor stack on the worker for each number of clients a
computation is called with, and its `ResourceManagingExecutorFactory` drops
the ones it evicts without closing them, so a run whose rounds draw different
numbers of clients grows the worker's memory with every new count.
`close_evicted` makes a factory keep `KEPT` executors and close the ones it
evicts, and, given a `restart`, start a fresh worker now and then.
"""

from absl import logging
import cachetools

# Executors a context keeps: a round's count, the evaluation's and the
# initialisation's, and one more.
KEPT = 4
# Closed executors after which a restartable factory starts a fresh worker:
# a new worker costs about a second; a closed executor leaves 30-50 MB behind.
RESTART_AFTER = 8


class _ClosingCache(cachetools.LRUCache):
  """An LRU cache of executors that closes, and counts, what it evicts."""

  def __init__(self, maxsize):
    super().__init__(maxsize)
    self.closed = 0

  def popitem(self):
    key, executor = super().popitem()
    executor.close()
    self.closed += 1
    return key, executor


def close_evicted(
    factory,
    kept: int = KEPT,
    *,
    restart=None,
    restart_after: int | None = None,
) -> None:
  """Makes TFF's `factory` keep `kept` executors and close the ones it drops.

  TFF's `ResourceManagingExecutorFactory` keeps 10 executors in an LRU cache
  that drops the evicted ones without closing them: their state stays on the
  worker for the life of the process. A run whose rounds draw different
  numbers of clients (every Poisson-sampled mechanism) then grows the worker's
  memory with every new count (about 250 MB a round at K = 100 on
  emnist_shaped's MLP: docs/benchmarks.md). Here the factory keeps `kept`
  executors and closes (`RemoteExecutor.close`: the worker disposes the
  executor) the ones it evicts.

  A closed executor still leaves part of its memory on TFF's worker (30-50 MB
  a new count there). Given a `restart` function, `close_evicted` also starts
  a fresh worker once `restart_after` executors have been closed: at the next
  new count it closes every executor it keeps and asks `restart` for a new
  executor stack function (a new worker) in place of the old one. Between two
  computations no state lives on the worker (a synchronous context returns
  Python values), so nothing is lost; a computation running at that moment on
  another executor of the same factory would be, which is why only contexts
  that run one computation at a time are given a `restart`
  (`tff_priv.runtime`).

  `factory` is a `tff.framework.ResourceManagingExecutorFactory` (TFF 0.87
  keeps its executors in the private LRU cache `_executors`, which this
  replaces, and makes them with `_executor_stack_fn`, which `restart` wraps;
  tests/executors_test.py checks both against the pinned TFF).

  Args:
    factory: the factory to change, in place.
    kept: how many executors (client counts) it keeps.
    restart: None, or a function that takes the factory's executor stack
      function, stops the worker it uses and returns a fresh one.
    restart_after: with `restart`: closed executors after which the next new
      client count starts on a fresh worker, every kept executor closed
      (None: `RESTART_AFTER` as it is at this call).

  Raises:
    RuntimeError: `factory` is not TFF 0.87's factory.
    ValueError: `kept` or `restart_after` is below 1.
  """
  cache = getattr(factory, '_executors', None)
  if not isinstance(cache, cachetools.LRUCache) or not callable(
      getattr(factory, '_executor_stack_fn', None)
  ):
    raise RuntimeError(
        "tff_priv expects TFF 0.87's ResourceManagingExecutorFactory (its "
        f'_executors cache and _executor_stack_fn), got {type(factory)}'
    )
  if restart_after is None:
    restart_after = RESTART_AFTER
  if kept < 1 or restart_after < 1:
    raise ValueError(
        f'kept and restart_after must be >= 1, got {kept}, {restart_after}'
    )
  closing = _ClosingCache(kept)
  for key, executor in list(cache.items()):
    closing[key] = executor
  factory._executors = closing  # pylint: disable=protected-access
  if restart is None:
    return
  # A list, not the factory: the wrapper must not hold the factory (a
  # reference cycle would leave the context to the cyclic GC).
  current = [factory._executor_stack_fn]  # pylint: disable=protected-access

  def executor_stack_fn(cardinalities):
    # Called by the factory for a client count it does not keep, before the
    # new executor enters the cache.
    if closing.closed >= restart_after:
      try:
        closing.clear()  # Closes every kept executor (popitem).
      finally:
        closing.closed = 0
      try:
        current[0] = restart(current[0])
      except Exception as e:  # pylint: disable=broad-except
        # The old function still works: TFF's service manager starts a new
        # worker itself if the old one was stopped.
        logging.warning('tff_priv.executors: worker restart failed: %s', e)
    return current[0](cardinalities)

  factory._executor_stack_fn = executor_stack_fn  # pylint: disable=protected-access
