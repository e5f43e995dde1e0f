"""Every benchmark's timing harness: round-robin, median ratios, step costs."""

import dataclasses
import gc
import statistics
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import tensorflow as tf

from tff_priv import validation
from tff_priv.mechanisms import gaussian


def round_robin(
    calls: Mapping[str, Callable[[], Any]],
    repeats: int,
    *,
    warmup: int = 1,
    before: Optional[Mapping[str, Callable[[], Any]]] = None,
) -> dict[str, list[float]]:
  """Seconds of each call, timed side by side in one run.

  The calls run round-robin (each once, in order, then again), so that a
  change of the machine's load hits all of them alike: the ratios of one run
  are what to compare. The first `warmup` rounds (tracing, compilation, a
  worker's start) are run the same way, untimed.

  Args:
    calls: name -> a call without arguments; only the call is timed (a call
      that keeps a state updates it itself).
    repeats: timed rounds: calls of each.
    warmup: untimed rounds first.
    before: name -> an untimed call made before each call of that name (e.g.
      installing the TFF context it runs in).

  Returns:
    name -> the `repeats` durations in seconds, in order, in the order of
    `calls`.
  """
  repeats = validation.int_at_least('repeats', repeats, 1)
  warmup = validation.int_at_least('warmup', warmup, 0)
  before = before or {}
  times = {name: [] for name in calls}
  for i in range(warmup + repeats):
    for name, call in calls.items():
      if name in before:
        before[name]()
      start = time.perf_counter()
      call()
      if i >= warmup:
        times[name].append(time.perf_counter() - start)
  return times


def median(seconds: Sequence[float]) -> float:
  """The median of timed durations."""
  return statistics.median(seconds)


def ratio(seconds: Sequence[float], baseline: Sequence[float]) -> float:
  """median(seconds) / median(baseline): the ratio a benchmark reports."""
  return statistics.median(seconds) / statistics.median(baseline)


def spread(seconds: Sequence[float]) -> float:
  """(max - min) / median of timed durations."""
  return (max(seconds) - min(seconds)) / statistics.median(seconds)


def floor(baseline_seconds: float, extra_seconds: float) -> float:
  """(baseline + extra) / baseline: the ratio `extra` alone would give.

  E.g. the baseline's median round and the median of the client noise draws
  timed alone: the ratio a mechanism noising every upload on its client cannot
  go below by much.
  """
  return (baseline_seconds + extra_seconds) / baseline_seconds


def noise_draws(
    updates: Sequence[Sequence[tf.Tensor]], stddev: float
) -> Callable[[], None]:
  """A call adding N(0, stddev^2) noise to each of `updates` in turn (traced).

  One `tf.function` (`gaussian.add_gaussian_noise`) called once per update:
  the client-side noise of a round of len(updates) clients, with no TFF in
  it. It is traced here, so that a first call is not compilation.
  """
  draw = tf.function(lambda u: gaussian.add_gaussian_noise(u, stddev))
  draw(list(updates[0]))  # Trace.

  def draw_all():
    for update in updates:
      draw(list(update))

  return draw_all


def format_seconds(seconds: Sequence[float]) -> str:
  """'median ... ms (min ..., max ...)' of timed durations."""
  return (
      f'median {statistics.median(seconds) * 1e3:9.2f} ms '
      f'(min {min(seconds) * 1e3:.2f}, max {max(seconds) * 1e3:.2f})'
  )


def parse_shapes(text: str) -> list[list[int]]:
  """Tensor shapes from 'AxB,C,...' (dims joined by x, tensors by commas)."""
  return [[int(x) for x in s.split('x')] for s in text.split(',')]


@dataclasses.dataclass(frozen=True)
class StepCost:
  """What one step cost: wall and CPU seconds, peak memory.

  Attributes:
    wall: wall-clock seconds.
    cpu: CPU seconds of this process (under load, the better measure of the
      work of a one-thread step).
    peak_gb: peak RSS of the process during the step, in GB (nan where the
      kernel does not tell).
  """

  wall: float
  cpu: float
  peak_gb: float


def timed_step(fn: Callable[[], Any]) -> tuple[Any, StepCost]:
  """Runs `fn` once: its result and its `StepCost`.

  Garbage is collected and the peak RSS reset first (Linux, where the kernel
  allows it), so that the peak is the step's.
  """
  gc.collect()
  _reset_peak_memory()
  wall, cpu = time.perf_counter(), time.process_time()
  result = fn()
  cost = StepCost(
      time.perf_counter() - wall, time.process_time() - cpu, _peak_memory_gb()
  )
  return result, cost


def _reset_peak_memory():
  """Resets the peak RSS of this process (Linux), if the kernel allows it."""
  try:
    with open('/proc/self/clear_refs', 'w') as f:
      f.write('5')
  except OSError:
    pass


def _peak_memory_gb():
  """Peak RSS (VmHWM) since the last reset, in GB; nan where unknown."""
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('VmHWM:'):
          return int(line.split()[1]) * 1024 / 1e9
  except OSError:
    pass
  return float('nan')
