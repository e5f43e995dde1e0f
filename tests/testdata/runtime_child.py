"""A child program for tests/runtime_test.py."""

import json
import os
import signal
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top

# Evaluates a federated mean through tff_priv.runtime, prints READY with its
# result, waits for one line on stdin, then ends as argv[1] says: 'exit' (normal
# exit), 'raise' (uncaught exception), 'wait' (blocks until a signal arrives),
# 'stop' (`runtime.stop_workers()`, then prints how the worker ended: its
# waitid si_code and si_status, as JSON).
# With argv[2] == 'plain' it skips tff_priv.runtime and uses the context TFF
# sets on import (the control case); with argv[2] == 'tracked' it keeps that
# context and only calls `runtime.track_workers()`; with argv[2] == 'early' it
# sets the context with `start_worker=True`; with argv[2] == 'imported' it
# only imports a tff_priv module (a user's own script, TFF's context); with
# argv[2] == 'sigint_ignored' it ignores SIGINT first, as a program started in
# the background by a script does (`cmd &`, nohup).
mode = sys.argv[1]
variant = sys.argv[2] if len(sys.argv) > 2 else 'set_context'
if variant == 'imported':
  import tff_priv.aggregators  # noqa: F401 # pylint: disable=g-import-not-at-top,unused-import
elif variant != 'plain':
  from tff_priv import runtime  # pylint: disable=g-import-not-at-top

  if variant == 'tracked':
    runtime.track_workers()
  else:
    if variant == 'sigint_ignored':
      signal.signal(signal.SIGINT, signal.SIG_IGN)
    runtime.set_context(start_worker=variant == 'early')
import tensorflow_federated as tff  # noqa: E402 # pylint: disable=g-import-not-at-top


@tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
def mean(x):
  return tff.federated_mean(x)


print(f'READY {mean([1.0, 2.0, 6.0])}', flush=True)
sys.stdin.readline()
if mode == 'raise':
  raise RuntimeError('child fails on purpose')
if mode == 'wait':
  while True:
    time.sleep(1)
if mode == 'stop':
  (worker,) = runtime.worker_pids()
  runtime.stop_workers()
  ended = os.waitid(os.P_PID, worker, os.WEXITED | os.WNOWAIT)
  print(json.dumps([ended.si_code, ended.si_status]), flush=True)
