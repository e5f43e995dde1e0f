"""Times whole `process.next` rounds of FedAvg, DP-FedAvg and the mechanisms."""

import collections
import dataclasses
import functools
import json
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import remote
from tff_priv import runtime
from tff_priv import validation
from tff_priv import worker
from tff_priv.benchmarks import harness
from tff_priv.benchmarks import memory
from tff_priv.learning import client_metrics
from tff_priv.learning import udp as udp_learning
from tff_priv.learning import udp_client_work
from tff_priv.program import registry
from tff_priv.program import sampling as sampling_lib
import tff_priv_tasks as tasks

FEDAVG = 'fedavg'
TFF_DP_FEDAVG = 'tff_dp_fedavg'
# UDP with the reference per-example clipping, beside registry.build's udp.
UDP_PER_EXAMPLE = 'udp_per_example'
# The mechanism UDP_PER_EXAMPLE re-clips (its module's NAME in the registry).
_UDP = 'udp'
# BLT with one cyclic stream (--participation=cyclic), beside the registry's
# blt (a stream per epoch).
BLT_CYCLIC = 'blt_cyclic'
# Every process `build_processes` knows, FEDAVG (the baseline) first.
PROCESSES = (
    (FEDAVG, TFF_DP_FEDAVG)
    + registry.MECHANISMS
    + (UDP_PER_EXAMPLE, BLT_CYCLIC)
)
# The processes whose noise (or randomised encoding) is drawn on every client,
# each upload noised alone: the registry's local-noise mechanisms
# (`Guarantee.noise == 'local'`) and UDP_PER_EXAMPLE. K x d random draws per
# round are part of their cost by definition.
CLIENT_NOISE = tuple(
    n for n in registry.MECHANISMS if registry.noise(n) == 'local'
) + (UDP_PER_EXAMPLE,)
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
    extra: Optional[Mapping[str, Any]] = None,
) -> registry.Mechanism:
  """tff_priv mechanism `name` as the training program builds it (one call).

  Gaussian mechanisms get noise_multiplier = `NOISE_MULTIPLIER` (no
  calibration), every mechanism with a clip the fixed clip `CLIP` (the
  default clip of all but dp_fedavg, whose default is TFF's adaptive
  clipping, which cannot reach that noise with few clients), distortion a
  given parameter variance, bandmf its most bands (N // K); everything else
  is the mechanism's default.
  """
  given = registry.parameter_names(name)
  params = {}
  if 'noise_multiplier' in given:
    params['noise_multiplier'] = NOISE_MULTIPLIER
  if 'clip' in given:
    params['clip'] = CLIP
  if 'parameter_variance' in given:
    params['parameter_variance'] = PARAMETER_VARIANCE
  if 'bands' in given:
    # bandmf at a given noise: its most bands, N // K (its largest window).
    params['bands'] = num_clients // clients_per_round
  params.update(extra or {})
  sampling = sampling_lib.ClientSampling(
      registry.sampling_kind(name, params), num_clients, clients_per_round
  )
  return registry.build(
      name,
      params,
      registry.BuildContext(
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
  """The processes `names`: FEDAVG, TFF_DP_FEDAVG, UDP_PER_EXAMPLE, mechanisms.

  Args:
    names: what to build (FEDAVG, TFF_DP_FEDAVG, UDP_PER_EXAMPLE, or a
      mechanism); FEDAVG, the baseline of the ratios, is always built
      first.
    model_fn: the task's model function.
    num_clients: N, the population (for the mechanisms' sampling).
    clients_per_round: K.
    learning_rate: the clients' learning rate (SGD; UDP's eta).
    min_client_examples: the smallest |D_i| (UDP's sensitivity).

  Returns:
    An ordered dict name -> `Entry`.
  """
  for name in names:
    validation.one_of('process', name, PROCESSES)
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
  entries[FEDAVG] = Entry(
      fed_avg(tff.aggregators.UnweightedMeanFactory()), identity
  )
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
      # registry.build's udp with clipping='per_example': same noise and
      # sensitivity as the built mechanism.
      udp = build_mechanism(_UDP, **kwargs)
      resolved = udp.resolved
      process = udp_learning.build_udp_process(
          model_fn,
          learning_rate=learning_rate,
          clip_norm=udp.config.clip,
          per_example_loss=udp_client_work.sparse_categorical_crossentropy(),
          sensitivity=resolved['sensitivity'],
          noise_stddev=resolved['noise_stddev'],
          clipping='per_example',
      )
      entries[name] = Entry(process, identity)
    elif name == BLT_CYCLIC:
      mechanism = build_mechanism(
          'blt', extra={'participation': 'cyclic'}, **kwargs
      )
      entries[name] = Entry(mechanism.process, mechanism.loop.preprocess)
    else:
      mechanism = build_mechanism(name, **kwargs)
      entries[name] = Entry(mechanism.process, mechanism.loop.preprocess)
  return entries


def time_rounds(
    entries: dict[str, Entry],
    client_datasets: Sequence[tf.data.Dataset],
    *,
    rounds: int,
    warmup: int = 1,
    contexts: Optional[Mapping[str, Any]] = None,
    sampler: Optional[memory.Sampler] = None,
) -> dict[str, list[float]]:
  """Seconds of `rounds` calls of `process.next` per entry, after `warmup`.

  The entries are run round-robin (`harness.round_robin`: one round of each,
  then again), so that a change of the machine's load hits all of them alike.

  Args:
    entries: name -> what to time.
    client_datasets: the clients of every round.
    rounds: timed rounds per entry.
    warmup: untimed rounds first.
    contexts: name -> the TFF execution context its rounds run in (installed
      before each of them, untimed); None: all in the current one.
    sampler: if given, labelled with an entry's name (untimed) before each of
      its rounds: its `peaks` are then each entry's peak memory.

  Returns:
    name -> the `rounds` timed durations, in order.
  """
  rounds = validation.int_at_least('rounds', rounds, 1)
  warmup = validation.int_at_least('warmup', warmup, 0)
  contexts = contexts or {}

  def before(name):
    if name in contexts:
      tff.framework.set_default_context(contexts[name])
    if sampler is not None:
      sampler.label = name

  states = {}
  for name, entry in entries.items():
    before(name)
    states[name] = entry.process.initialize()
  data = {
      name: [e.preprocess(d, 1, i) for i, d in enumerate(client_datasets)]
      for name, e in entries.items()
  }

  def next_round(name):
    states[name] = entries[name].process.next(states[name], data[name]).state

  return harness.round_robin(
      {name: functools.partial(next_round, name) for name in entries},
      rounds,
      warmup=warmup,
      before={name: functools.partial(before, name) for name in entries},
  )


def placed(
    entries: dict[str, Entry], contexts: Mapping[str, Any]
) -> tuple[dict[str, Entry], dict[str, Any], str]:
  """Every entry in every context, by 'name (place)'; and the baseline.

  Returns ('name (place)' -> entry, 'name (place)' -> context, the
  baseline's name). The baseline of the ratios is FEDAVG in the first context.
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
  trainable weights, called K times (`harness.noise_draws`): the client-side
  noise of a round with no TFF in it.
  """
  with tf.Graph().as_default():
    shapes = [v.shape for v in model_fn().trainable_variables]
  update = [tf.zeros(s) for s in shapes]
  draws = harness.noise_draws([update] * clients, 1.0)
  times = harness.round_robin({'draws': draws}, repeats, warmup=0)
  return harness.median(times['draws'])


def summarize(
    times: dict[str, list[float]],
    noise_seconds: Optional[float] = None,
    baseline: str = FEDAVG,
) -> list[dict[str, Any]]:
  """Rows: name, median, spread, ratio to `baseline`'s median, noise floor.

  spread is (max - min) / median of a process's rounds. For the mechanisms
  of `CLIENT_NOISE`, floor = (median of the baseline + `noise_seconds`) /
  median of the baseline, the ratio the K x d draws alone would give.
  """
  base = harness.median(times[baseline])
  rows = []
  for name, seconds in times.items():
    row = dict(
        name=name,
        median_seconds=harness.median(seconds),
        spread=harness.spread(seconds),
        ratio=harness.ratio(seconds, times[baseline]),
        floor=None,
    )
    if noise_seconds is not None and name in CLIENT_NOISE:
      row['floor'] = harness.floor(base, noise_seconds)
    rows.append(row)
  return rows


def format_table(rows: Sequence[dict[str, Any]], baseline: str = FEDAVG) -> str:
  """A Markdown table of `summarize`'s rows."""
  lines = [
      f'| process | median s | spread | ratio to {baseline} | client-noise '
      'floor | peak MB |',
      '|---|---|---|---|---|---|',
  ]
  for r in rows:
    floor = '' if r['floor'] is None else f'{r["floor"]:.2f}x'
    peak = r.get('peak_rss_mb')
    lines.append(
        f'| {r["name"]} | {r["median_seconds"]:.3f} | {r["spread"]:.0%} | '
        f'{r["ratio"]:.2f}x | {floor} | '
        f'{"" if peak is None else f"{peak:,.0f}"} |'
    )
  return '\n'.join(lines)


@dataclasses.dataclass(frozen=True)
class Options:
  """What `run` times, on which task (the flags of scripts/benchmark_rounds.py).

  Attributes:
    task: the task's name (`tasks.TASK_NAMES`).
    model: the task's model option (e.g. 'cnn', 'mlp'); None: its default.
    batch_size: client batch size.
    num_epochs: client epochs.
    seed: seed of the client split.
    clients_per_round: the K values, each timed in its own table, on the
      task's first K clients.
    processes: what to time, among `PROCESSES`.
    learning_rate: the clients' SGD rate.
    rounds: timed rounds per process.
    warmup: untimed rounds first.
    loopback_workers: also time each process over this many TFF workers
      started on this machine (e.g. (1, 2, 3)), the ratios to the local run.
    format: 'table' (one Markdown table per K, printed as it is done) or
      'json' (every K's results, printed at the end).
  """

  task: str = 'mnist5k'
  model: Optional[str] = None
  batch_size: int = 10
  num_epochs: int = 1
  seed: int = 0
  clients_per_round: Sequence[int] = (20,)
  processes: Sequence[str] = PROCESSES
  learning_rate: float = 0.1
  rounds: int = 4
  warmup: int = 1
  loopback_workers: Sequence[int] = ()
  format: str = 'table'

  def __post_init__(self):
    validation.one_of('format', self.format, ('table', 'json'))


def run(
    options: Options, out: Callable[[str], Any] = print
) -> list[dict[str, Any]]:
  """Times `options.processes` on every K of `options`, in TFF's local context.

  With `loopback_workers`, each process is also timed over the first N of
  max(loopback_workers) TFF workers started here (`python -m
  tff_priv.worker`, through `remote.create_context`), the baseline being
  FEDAVG in the local context; the workers are stopped at the end.

  Args:
    options: what to time.
    out: where the text goes (one call per table or JSON document).

  Returns:
    One dict per K: task, model, d, clients_per_round, rounds,
    noise_draw_seconds, rows (`summarize`) and seconds (name -> durations).
  """
  local = runtime.set_context()
  launched = [
      worker.Launched() for _ in range(max(options.loopback_workers, default=0))
  ]
  try:
    contexts = {}
    if launched:
      contexts = {'local': local}
      for n in options.loopback_workers:
        contexts[f'{n} worker' + ('s' if n > 1 else '')] = (
            remote.create_context([w.address for w in launched[:n]])
        )
    results = _benchmark(options, contexts, out)
  finally:
    tff.framework.set_default_context(local)
    for w in launched:
      w.stop()
  if options.format == 'json':
    out(json.dumps(results, indent=1))
  return results


def _benchmark(options, contexts, out):
  """Times every K; with `contexts`, each process in each of them."""
  task_options = {} if options.model is None else {'model': options.model}
  task = tasks.get_task(
      options.task,
      train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=options.num_epochs, batch_size=options.batch_size
      ),
      seed=options.seed,
      **task_options,
  )
  train = task.datasets.train_data
  with tf.Graph().as_default():
    d = int(sum(np.prod(v.shape) for v in task.model_fn().trainable_variables))
  results = []
  for k in options.clients_per_round:
    client_ids = train.client_ids[:k]
    datasets = [
        task.datasets.train_preprocess_fn(train.create_tf_dataset_for_client(c))
        for c in client_ids
    ]
    min_examples = min(
        int(train.create_tf_dataset_for_client(c).reduce(0, lambda n, _: n + 1))
        for c in client_ids
    )
    entries = build_processes(
        options.processes,
        model_fn=task.model_fn,
        num_clients=len(train.client_ids),
        clients_per_round=k,
        learning_rate=options.learning_rate,
        min_client_examples=min_examples,
    )
    baseline, where = FEDAVG, {}
    if contexts:
      entries, where, baseline = placed(entries, contexts)
    with memory.Sampler() as sampler:
      times = time_rounds(
          entries,
          datasets,
          rounds=options.rounds,
          warmup=options.warmup,
          contexts=where,
          sampler=sampler,
      )
    noise = noise_draw_seconds(task.model_fn, k)
    rows = summarize(times, noise, baseline)
    for row in rows:
      row['peak_rss_mb'] = sampler.peaks.get(row['name'])
    results.append(
        dict(
            task=options.task,
            model=task_options.get('model'),
            d=d,
            clients_per_round=k,
            rounds=options.rounds,
            noise_draw_seconds=noise,
            rows=rows,
            seconds=dict(times),
        )
    )
    if options.format == 'table':
      out(
          f'\n{options.task}, d = {d:,}, K = {k}, medians of {options.rounds} '
          f'rounds after {options.warmup} warm-up; K x d normal draws: '
          f'{noise:.3f} s'
      )
      out(format_table(rows, baseline))
  return results
