"""Times whole `process.next` rounds of FedAvg, DP-FedAvg and tff_priv's mechanisms.

`build_processes` builds, on one task's model, plain
`tff.learning.algorithms.build_unweighted_fed_avg`, TFF's DP-FedAvg
(`DifferentiallyPrivateFactory.gaussian_fixed`) and tff_priv's mechanisms as
the training program builds them (`tff_priv.program.mechanisms.build`);
`time_rounds` runs them round-robin on the same clients, so that all see the
same machine load; `summarize` gives medians, spreads and ratios to FedAvg,
beside the floor of client-side noise (`noise_draw_seconds`).
"""

import collections
import statistics
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.learning import client_metrics
from tff_priv.learning import crd
from tff_priv.learning import udp_client_work
from tff_priv.mechanisms import gaussian
from tff_priv.program import mechanisms
from tff_priv.program import sampling as sampling_lib

FEDAVG = 'fedavg'
TFF_DP_FEDAVG = 'tff_dp_fedavg'
# UDP with the reference per-example clipping, beside mechanisms.build's udp.
UDP_PER_EXAMPLE = 'udp_per_example'
# Mechanisms whose noise (or randomised encoding) is drawn on every client:
# K x d random draws per round are part of their cost by definition.
CLIENT_NOISE = ('distortion', 'ldp', 'udp', UDP_PER_EXAMPLE)
# Benchmark parameters: the noise level does not change the cost of a round.
NOISE_MULTIPLIER = 1.0
CLIP = 1.0
PARAMETER_VARIANCE = 1e-4


class Entry:
  """A process to time and how its clients' data is prepared."""

  def __init__(self, process, preprocess: Callable[..., Any]):
    self.process = process
    self.preprocess = preprocess


def build_mechanism(
    name: str,
    *,
    model_fn: Callable[[], tff.learning.models.VariableModel],
    num_clients: int,
    clients_per_round: int,
    learning_rate: float,
    min_client_examples: int,
) -> mechanisms.Mechanism:
  """tff_priv mechanism `name` as the training program builds it (one call).

  Gaussian mechanisms get noise_multiplier = `NOISE_MULTIPLIER` (no
  calibration), dp_fedavg the fixed clip `CLIP` (TFF's adaptive clipping
  cannot reach that noise with few clients), distortion a given parameter
  variance; everything else is the mechanism's default.
  """
  given = mechanisms.parameter_names(name)
  params = {}
  if 'noise_multiplier' in given:
    params['noise_multiplier'] = NOISE_MULTIPLIER
  if name == 'dp_fedavg':
    params['clip'] = CLIP
  if 'parameter_variance' in given:
    params['parameter_variance'] = PARAMETER_VARIANCE
  sampling = sampling_lib.ClientSampling(
      mechanisms.sampling_kind(name), num_clients, clients_per_round
  )
  return mechanisms.build(
      name,
      params,
      mechanisms.BuildContext(
          model_fn=model_fn,
          sampling=sampling,
          total_rounds=100,
          client_learning_rate=learning_rate,
          min_client_examples=lambda: min_client_examples,
      ),
  )


def build_processes(
    names: Sequence[str],
    *,
    model_fn: Callable[[], tff.learning.models.VariableModel],
    num_clients: int,
    clients_per_round: int,
    learning_rate: float,
    min_client_examples: int,
) -> dict[str, Entry]:
  """The processes `names` (FEDAVG, TFF_DP_FEDAVG, UDP_PER_EXAMPLE, or a mechanism).

  Args:
    names: what to build; FEDAVG, the baseline of the ratios, is always
      built first.
    model_fn: the task's model function.
    num_clients: N, the population (for the mechanisms' sampling).
    clients_per_round: K.
    learning_rate: the clients' learning rate (SGD; UDP's eta).
    min_client_examples: the smallest |D_i| (UDP's sensitivity).

  Returns:
    An ordered dict name -> `Entry`.
  """
  known = (FEDAVG, TFF_DP_FEDAVG, UDP_PER_EXAMPLE) + mechanisms.MECHANISMS
  for name in names:
    validation.one_of('process', name, known)
  sgd = tff.learning.optimizers.build_sgdm
  fed_avg = lambda aggregator: tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=sgd(learning_rate),
      server_optimizer_fn=sgd(1.0),
      model_aggregator=aggregator,
      metrics_aggregator=client_metrics.no_client_metrics,
  )
  identity = lambda dataset, round_num, client_index: dataset
  entries = collections.OrderedDict()
  entries[FEDAVG] = Entry(fed_avg(tff.aggregators.UnweightedMeanFactory()), identity)
  kwargs = dict(
      model_fn=model_fn,
      num_clients=num_clients,
      clients_per_round=clients_per_round,
      learning_rate=learning_rate,
      min_client_examples=min_client_examples,
  )
  for name in names:
    if name == FEDAVG:
      continue
    if name == TFF_DP_FEDAVG:
      factory = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
          NOISE_MULTIPLIER, clients_per_round, CLIP
      )
      entries[name] = Entry(fed_avg(factory), identity)
    elif name == UDP_PER_EXAMPLE:
      # mechanisms.build's udp with clipping='per_example': same noise and
      # sensitivity as the built mechanism.
      udp = build_mechanism('udp', **kwargs)
      resolved = udp.resolved
      process = crd.build_udp_process(
          model_fn,
          learning_rate=learning_rate,
          clip_norm=udp.config.clip,
          per_example_loss=udp_client_work.sparse_categorical_crossentropy(),
          sensitivity=resolved['sensitivity'],
          noise_stddev=resolved['noise_stddev'],
          clipping='per_example',
      )
      entries[name] = Entry(process, identity)
    else:
      mechanism = build_mechanism(name, **kwargs)
      entries[name] = Entry(mechanism.process, mechanism.preprocess)
  return entries


def time_rounds(
    entries: dict[str, Entry],
    client_datasets: Sequence[tf.data.Dataset],
    *,
    rounds: int,
    warmup: int = 1,
    contexts: Optional[Mapping[str, Any]] = None,
) -> dict[str, list[float]]:
  """Seconds of `rounds` calls of `process.next` per entry, after `warmup`.

  The entries are run round-robin (one round of each, then again), so that
  a change of the machine's load hits all of them alike.

  Args:
    entries: name -> what to time.
    client_datasets: the clients of every round.
    rounds: timed rounds per entry.
    warmup: untimed rounds first.
    contexts: name -> the TFF execution context its rounds run in (installed
      before each of them); None: all in the current one.

  Returns:
    name -> the `rounds` timed durations, in order.
  """
  rounds = validation.int_at_least('rounds', rounds, 1)
  warmup = validation.int_at_least('warmup', warmup, 0)
  contexts = contexts or {}
  states = {}
  for name, entry in entries.items():
    if name in contexts:
      tff.framework.set_default_context(contexts[name])
    states[name] = entry.process.initialize()
  data = {
      name: [e.preprocess(d, 1, i) for i, d in enumerate(client_datasets)]
      for name, e in entries.items()
  }
  times = collections.defaultdict(list)
  for i in range(warmup + rounds):
    for name, entry in entries.items():
      if name in contexts:
        tff.framework.set_default_context(contexts[name])
      start = time.perf_counter()
      states[name] = entry.process.next(states[name], data[name]).state
      if i >= warmup:
        times[name].append(time.perf_counter() - start)
  return dict(times)


def placed(
    entries: dict[str, Entry], contexts: Mapping[str, Any]
) -> tuple[dict[str, Entry], dict[str, Any], str]:
  """Every entry in every context: 'name (place)' -> entry, -> context, and the baseline.

  The baseline of the ratios is FEDAVG in the first context.
  """
  placed_entries, where = {}, {}
  for name, entry in entries.items():
    for place, context in contexts.items():
      placed_entries[f'{name} ({place})'] = entry
      where[f'{name} ({place})'] = context
  return placed_entries, where, f'{FEDAVG} ({next(iter(contexts))})'


def noise_draw_seconds(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    clients: int,
    repeats: int = 3,
) -> float:
  """Median seconds of K x d standard normal draws added to d-sized updates.

  One `tf.function` adds N(0, 1) noise to an update shaped as the model's
  trainable weights, called K times: the client-side noise of a round with
  no TFF in it.
  """
  with tf.Graph().as_default():
    shapes = [v.shape for v in model_fn().trainable_variables]
  update = [tf.zeros(s) for s in shapes]
  draw = tf.function(lambda u: gaussian.add_gaussian_noise(u, 1.0))
  draw(update)  # Trace.
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(clients):
      draw(update)
    seconds.append(time.perf_counter() - start)
  return statistics.median(seconds)


def summarize(
    times: dict[str, list[float]],
    noise_seconds: Optional[float] = None,
    baseline: str = FEDAVG,
) -> list[dict[str, Any]]:
  """Rows name, median, spread, ratio to `baseline`'s median and the noise floor.

  spread is (max - min) / median of a process's rounds. For the mechanisms
  of `CLIENT_NOISE`, floor = (median of the baseline + `noise_seconds`) /
  median of the baseline, the ratio the K x d draws alone would give.
  """
  base = statistics.median(times[baseline])
  rows = []
  for name, seconds in times.items():
    median = statistics.median(seconds)
    row = dict(
        name=name,
        median_seconds=median,
        spread=(max(seconds) - min(seconds)) / median,
        ratio=median / base,
        floor=None,
    )
    if noise_seconds is not None and name in CLIENT_NOISE:
      row['floor'] = (base + noise_seconds) / base
    rows.append(row)
  return rows


def format_table(
    rows: Sequence[dict[str, Any]], baseline: str = FEDAVG
) -> str:
  """A Markdown table of `summarize`'s rows."""
  lines = [
      f'| process | median s | spread | ratio to {baseline} | client-noise '
      'floor |',
      '|---|---|---|---|---|',
  ]
  for r in rows:
    floor = '' if r['floor'] is None else f'{r["floor"]:.2f}x'
    lines.append(
        f'| {r["name"]} | {r["median_seconds"]:.3f} | {r["spread"]:.0%} | '
        f'{r["ratio"]:.2f}x | {floor} |'
    )
  return '\n'.join(lines)
