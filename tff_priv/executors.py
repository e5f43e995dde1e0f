"""TFF's executors per client count, kept few and closed when dropped.

TFF builds one executor stack on the worker for each number of clients a
computation is called with, and its `ResourceManagingExecutorFactory` keeps 10
of them in an LRU cache that drops the evicted ones without closing them: their
state stays on the worker for the life of the process. A run whose rounds draw
different numbers of clients (every Poisson-sampled mechanism) then grows the
worker's memory with every new count (about 250 MB a round at K = 100 on
emnist_shaped's MLP before this: docs/benchmarks.md). `close_evicted` makes a
factory keep `KEPT` executors and close (`RemoteExecutor.close`: the worker
disposes the executor) the ones it evicts.
"""

import cachetools

# Executors a context keeps: a round's count, the evaluation's and the
# initialisation's, and one more.
KEPT = 4


class _ClosingCache(cachetools.LRUCache):
  """An LRU cache of executors that closes the executor it evicts."""

  def popitem(self):
    key, executor = super().popitem()
    executor.close()
    return key, executor


def close_evicted(factory, kept: int = KEPT) -> None:
  """Makes TFF's `factory` keep `kept` executors and close the ones it drops.

  `factory` is a `tff.framework.ResourceManagingExecutorFactory` (TFF 0.87
  keeps its executors in the private LRU cache `_executors`, which this
  replaces; tests/executors_test.py checks it against the pinned TFF).
  """
  cache = getattr(factory, '_executors', None)
  if not isinstance(cache, cachetools.LRUCache):
    raise RuntimeError(
        'tff_priv expects the executor cache of TFF 0.87 '
        f'(ResourceManagingExecutorFactory._executors), got {type(cache)}'
    )
  closing = _ClosingCache(kept)
  for key, executor in list(cache.items()):
    closing[key] = executor
  factory._executors = closing  # pylint: disable=protected-access
