"""TFF's remote workers as one execution context (`set_context('remote')`).

TFF 0.87 has every piece (its wheel ships the C++ `worker_binary`, which
`python -m tff_priv.worker` starts on each host): one
`tff.framework.RemoteExecutor` per worker address inside an asynchronous TFF
context, and TFF's mergeable-computation context over them, which compiles a
computation into its "mergeable form" (the part up to the aggregation, a
merge, the part after), runs the first part with a slice of the clients on
each worker and merges the aggregates. `create_context` builds that context,
the engine of `runtime.set_context('remote')`. Details: docs/remote.md.
"""

import asyncio
import collections
import functools
import threading
import time
from typing import Sequence

import grpc
import tensorflow_federated as tff

# TFF 0.87 exports no public name for these.
# pylint: disable=g-direct-tensorflow-import
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.backends.native import (
    compiler as native_compiler,
)
from tensorflow_federated.python.core.backends.native import (
    mergeable_comp_compiler,
)
from tensorflow_federated.python.core.backends.test import (
    compiler as test_compiler,
)
from tensorflow_federated.python.core.environments.tensorflow_frontend import (
    tensorflow_computation,
)
from tensorflow_federated.python.core.impl.computation import computation_base
from tensorflow_federated.python.core.impl.execution_contexts import (
    mergeable_comp_execution_context as mergeable,
)
from tensorflow_federated.python.core.impl.executors import executors_errors
from tensorflow_federated.python.core.impl.types import type_conversions

from tff_priv import executors

# pylint: enable=g-direct-tensorflow-import

# TFF's own gRPC message limit for its local worker.
_GRPC_OPTIONS = [
    ('grpc.max_message_length', 2 * 1000 * 1000 * 1000),
    ('grpc.max_receive_message_length', 2 * 1000 * 1000 * 1000),
    ('grpc.max_send_message_length', 2 * 1000 * 1000 * 1000),
]
_CACHED = 128
_STUB_METHODS = (
    'get_executor',
    'create_value',
    'create_struct',
    'create_call',
    'create_selection',
    'compute',
    'dispose',
    'dispose_executor',
)


class WorkerLostError(ConnectionError):
  """A TFF worker did not answer (at start, or for `timeout` s mid-run)."""


class _BoundedStub(tff.framework.RemoteExecutorGrpcStub):
  """TFF's gRPC stub, giving up on a worker unavailable for `timeout` s.

  TFF marks an unavailable worker's error retryable and its context retries
  the whole call forever; once the worker has not completed a `compute` for
  `timeout` seconds since a call to it failed, this raises `WorkerLostError`
  instead, which the context does not retry. It is raised at TFF's next
  retry, which comes at most 30 s later (TFF's longest back-off).
  """

  def __init__(self, channel, address: str, timeout: float):
    super().__init__(channel)
    self._address = address
    self._timeout = timeout
    self._failing_since = None
    self._lock = threading.Lock()

  def call_worker(self, name: str, request):
    """TFF's stub method `name` on `request`, bounded as the class says."""
    try:
      response = getattr(super(), name)(request)
    except executors_errors.RetryableError:
      now = time.monotonic()
      with self._lock:
        if self._failing_since is None:
          self._failing_since = now
        failing = now - self._failing_since
      if failing >= self._timeout:
        raise WorkerLostError(
            f'the TFF worker at {self._address} stopped answering '
            f'(unavailable for {failing:.0f} s)'
        ) from None
      raise
    if name == 'compute':  # Progress: a result came back.
      with self._lock:
        self._failing_since = None
    return response


for _name in _STUB_METHODS:
  setattr(
      _BoundedStub,
      _name,
      functools.partialmethod(_BoundedStub.call_worker, _name),
  )


def _restore_containers(value, type_spec):
  """`value` in the Python containers `type_spec` names (attrs, namedtuples)."""
  if isinstance(type_spec, tff.FederatedType):
    if type_spec.all_equal:
      return _restore_containers(value, type_spec.member)
    return [_restore_containers(v, type_spec.member) for v in value]
  if not isinstance(type_spec, tff.StructType) or value is None:
    return value
  if not isinstance(value, structure.Struct):
    value = structure.from_container(value)
  names = [name for name, _ in structure.iter_elements(type_spec)]
  elements = [_restore_containers(v, t) for v, t in zip(value, type_spec)]
  return type_conversions.type_to_py_container(
      structure.Struct(list(zip(names, elements))), type_spec
  )


def _simulated_secure(comp):
  return test_compiler.replace_secure_intrinsics_with_bodies(comp)


def _mergeable_form(comp):
  """TFF's mergeable form of `comp`, None if TFF cannot split it."""
  try:
    return mergeable_comp_compiler.compile_to_mergeable_comp_form(
        _simulated_secure(comp)
    )
  except ValueError as e:
    if 'dependent on another' in str(e):
      return None
    raise


class _MergedContext(mergeable.MergeableCompExecutionContext):
  """TFF's mergeable context, results in the computation's own containers.

  A computation TFF cannot split (an aggregate that depends on another, e.g.
  Fed-SMP's secure client count broadcast back before the secure sum) runs
  whole on the first worker, all its clients there; so does every
  computation when there is one worker (the mergeable form's three calls
  would only add transfers: the last one sends the first slice's argument,
  its clients' data included, again).
  """

  def __init__(self, async_contexts):
    super().__init__(async_contexts)
    self._first = async_contexts[0]
    # id(comp) -> (comp, its mergeable form or its whole simulated form), the
    # latest _CACHED computations (as TFF's own compiler cache keeps).
    self._compiled = collections.OrderedDict()

  def invoke(self, comp, arg=None):
    if not isinstance(comp, computation_base.Computation):
      return super().invoke(comp, arg)
    if id(comp) not in self._compiled:
      form = _mergeable_form(comp) if self._num_subrounds > 1 else None
      self._compiled[id(comp)] = (
          comp,
          form,
          _simulated_secure(comp) if form is None else None,
      )
      if len(self._compiled) > _CACHED:
        self._compiled.popitem(last=False)
    self._compiled.move_to_end(id(comp))
    _, form, whole = self._compiled[id(comp)]
    if form is not None:
      result = super().invoke(form, arg)
    else:
      result = self._async_runner.run_coro_and_return_result(
          self._first.invoke(whole, arg)
      )
    return _restore_containers(result, comp.type_signature.result)


class _OwnLoop(tff.framework.AsyncContext):
  """A worker's asynchronous context, run on an event loop of its own.

  TFF's `RemoteExecutor` calls its gRPC stub synchronously inside its
  coroutines, so contexts sharing one event loop (the mergeable context's)
  would run the workers one after another; each on its own loop thread, they
  run at the same time.
  """

  def __init__(self, context):
    self._context = context
    self._loop = asyncio.new_event_loop()
    threading.Thread(target=self._loop.run_forever, daemon=True).start()

  async def invoke(self, comp, arg):
    return await asyncio.wrap_future(
        asyncio.run_coroutine_threadsafe(
            self._context.invoke(comp, arg), self._loop
        )
    )


class _AsyncFace(tff.framework.AsyncContext):
  """An asynchronous context (what `tff.program` awaits) over a sync one."""

  def __init__(self, context):
    self._context = context

  async def invoke(self, comp, arg):
    return await asyncio.to_thread(self._context.invoke, comp, arg)


# At start a worker that answers nothing in this long is not there: a run
# reports it at once (`timeout` is for a worker lost mid-run).
_START_TIMEOUT_SECONDS = 10.0


def _connect(address: str, timeout: float) -> grpc.Channel:
  timeout = min(timeout, _START_TIMEOUT_SECONDS)
  channel = grpc.insecure_channel(address, _GRPC_OPTIONS)
  try:
    grpc.channel_ready_future(channel).result(timeout=timeout)
  except grpc.FutureTimeoutError:
    channel.close()
    raise WorkerLostError(
        f'no TFF worker answers at {address} within {timeout:g} s (start one '
        'there with: python -m tff_priv.worker --port=PORT)'
    ) from None
  return channel


def create_context(
    workers: Sequence[str],
    *,
    default_num_clients: int = 0,
    timeout: float = 30.0,
    program: bool = False,
):
  """TFF's mergeable context over one asynchronous context per worker.

  What this adds to TFF's pieces, and why they alone do not do:

  * The workers run at the same time: each worker's context has an event loop
    thread of its own (TFF's `RemoteExecutor` calls gRPC synchronously inside
    its coroutines, which on one shared loop runs the workers in turn).
  * Secure-sum intrinsics are replaced by their plain bodies before the split,
    as the 'simulation' context does locally (TFF's test compiler): the
    mergeable compiler cannot split `federated_secure_sum*` and the worker
    binary does not run them. The values are the ones secure aggregation would
    produce; the cryptography is not run.
  * A computation TFF cannot split (one aggregate depending on another) runs
    whole on the first worker; with one worker, every computation does.
  * Results come back in the computation's own Python containers: TFF's
    mergeable context converts them with its compiled form's type, which has
    lost them, so a `tff.learning` process's state would come back as nested
    `OrderedDict`s (no `.trainable`).
  * A worker that stops answering ends the computation with `WorkerLostError`
    (a `ConnectionError`, one line naming the address) after `timeout` seconds:
    TFF's context retries unavailable workers forever.
  * `program=True`: an asynchronous face of the merged context for
    `tff.program.NativeFederatedContext` (TFF has only a synchronous mergeable
    context).

  Args:
    workers: the workers' 'host:port' addresses.
    default_num_clients: the CLIENTS cardinality of computations that take no
      client-placed argument (as TFF's local contexts set it).
    timeout: seconds to wait for a worker that stops answering before the
      computation fails, and for each worker at start (at most 10 s).
    program: wrap the context in `tff.program.NativeFederatedContext`.

  Returns:
    The context, to install with `tff.framework.set_default_context`.

  Raises:
    ValueError: `workers` is empty, a string, or has an address that is not
      'host:port'; or `timeout` <= 0.
    WorkerLostError: a worker does not answer within `timeout` (one line
      naming its address).
  """
  if isinstance(workers, str) or not workers:
    raise ValueError(
        f"workers must be a list of 'host:port' addresses, got {workers!r}"
    )
  for address in workers:
    host, _, port = str(address).rpartition(':')
    if not host or not port.isdigit():
      raise ValueError(f"a worker address is 'host:port', got {address!r}")
  if timeout <= 0:
    raise ValueError(f'timeout must be > 0, got {timeout}')
  contexts = []
  for address in workers:
    stub = _BoundedStub(_connect(address, timeout), address, timeout)

    def stack_fn(cardinalities, stub=stub):
      if cardinalities.get(tff.CLIENTS) is None:
        cardinalities[tff.CLIENTS] = default_num_clients
      executor = tff.framework.RemoteExecutor(stub)
      executor.set_cardinalities(cardinalities)
      return executor

    factory = tff.framework.ResourceManagingExecutorFactory(
        executor_stack_fn=stack_fn
    )
    executors.close_evicted(factory)
    contexts.append(
        _OwnLoop(
            tff.framework.AsyncExecutionContext(
                executor_fn=factory,
                compiler_fn=native_compiler.desugar_and_transform_to_native,
                transform_args=tensorflow_computation.transform_args,
                transform_result=tensorflow_computation.transform_result,
            )
        )
    )
  context = _MergedContext(contexts)
  if program:
    return tff.program.NativeFederatedContext(_AsyncFace(context))
  return context
