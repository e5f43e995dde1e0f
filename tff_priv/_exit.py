"""A quiet exit after TFF: its contexts finalized before module teardown."""

import atexit
import gc
import sys

_CONTEXT_STACK = 'tensorflow_federated.python.core.impl.context_stack'


def _finalize_tff_contexts() -> None:
  """Drops TFF's default context and collects it, while modules are intact.

  TFF 0.87 makes a default execution context at import whose executor
  factory's `ServiceManager.__del__` reads `subprocess.Popen` and calls
  `os.kill` through its module's globals. Left to interpreter teardown, the
  context (in a reference cycle) is finalized after those globals are cleared
  and Python prints "Exception ignored in ... ServiceManager.__del__" at the
  exit of any program that imported TFF through tff_priv. TFF has no hook for
  this; a no-op unless TFF's context stack was imported.
  """
  stack_impl = sys.modules.get(f'{_CONTEXT_STACK}.context_stack_impl')
  error_context = sys.modules.get(f'{_CONTEXT_STACK}.runtime_error_context')
  if stack_impl is None or error_context is None:
    return
  stack_impl.context_stack.set_default_context(
      error_context.RuntimeErrorContext()
  )
  # A collection costs ~0.3 s with TF loaded: once, here.
  gc.collect()


# Registered when `tff_priv` is imported, so it runs after every atexit hook
# registered later (they run last-in first-out), `tff_priv.runtime`'s included.
atexit.register(_finalize_tff_contexts)
