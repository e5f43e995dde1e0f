"""Measures FedAvg without privacy on a task: test accuracy, seconds a round."""

import dataclasses
import time
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv import validation
from tff_priv.learning import evaluation
import tff_priv_tasks as tasks

TASK_NAMES = tasks.TASK_NAMES


@dataclasses.dataclass(frozen=True)
class Options:
  """What `measure` runs (the flags of scripts/measure_fedavg.py).

  Attributes:
    task: the task's name (`TASK_NAMES`).
    num_clients: clients of a synthetic split; None: the task's default.
    cache_dir: the data sets' cache folder.
    rounds: training rounds.
    clients_per_round: clients sampled uniformly without replacement per
      round (at most the task's training clients).
    client_learning_rate: the clients' SGD rate.
    server_learning_rate: the server's SGD rate.
    batch_size: client batch size.
    num_epochs: local epochs per round.
    seed: seed of the split, the client sampling and the model's init.
  """

  task: str = 'mnist5k'
  num_clients: Optional[int] = None
  cache_dir: Optional[str] = None
  rounds: int = 10
  clients_per_round: int = 100
  client_learning_rate: float = 0.05
  server_learning_rate: float = 1.0
  batch_size: int = 10
  num_epochs: int = 1
  seed: int = 0

  def __post_init__(self):
    validation.one_of('task', self.task, TASK_NAMES)
    validation.int_at_least('rounds', self.rounds, 1)


@dataclasses.dataclass(frozen=True)
class Result:
  """What `measure` measured.

  Attributes:
    test_metrics: the task's own metrics of the final model on the whole
      test set (TFF's federated evaluation, one client holding it).
    round_seconds: seconds of each round; the first includes TFF's tracing
      and compilation.
    eval_seconds: seconds of the evaluation.
  """

  test_metrics: dict[str, float]
  round_seconds: list[float]
  eval_seconds: float

  @property
  def mean_later_round_seconds(self) -> float:
    """Mean seconds of the rounds after the first (nan with one round)."""
    if len(self.round_seconds) < 2:
      return float('nan')
    return float(np.mean(self.round_seconds[1:]))


def measure(options: Options, out: Callable[[str], Any] = print) -> Result:
  """Trains TFF's `build_weighted_fed_avg` on the task, then evaluates it.

  Client SGD and server SGD on `tasks.get_task(options.task)`, in TFF's
  local context; prints the setting, one line per round (seconds, training
  loss) and a last `RESULT` line (`format_result`).

  Args:
    options: what to run.
    out: where the lines go (each flushed as it is printed by `print`).

  Returns:
    The `Result`.
  """
  runtime.set_context()
  tf.keras.utils.set_random_seed(options.seed)
  task_options = {}
  if options.num_clients is not None:
    task_options['num_clients'] = options.num_clients
  task = tasks.get_task(
      options.task,
      train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=options.num_epochs, batch_size=options.batch_size
      ),
      seed=options.seed,
      cache_dir=options.cache_dir,
      **task_options,
  )
  num_train_clients = len(task.datasets.train_data.client_ids)
  learning_process = tff.learning.algorithms.build_weighted_fed_avg(
      task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=options.client_learning_rate
      ),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=options.server_learning_rate
      ),
  )
  state = learning_process.initialize()
  out(
      f'task={options.task} train_clients={num_train_clients} '
      f'clients_per_round={options.clients_per_round} rounds={options.rounds} '
      f'client_lr={options.client_learning_rate} batch={options.batch_size} '
      f'epochs={options.num_epochs}'
  )
  seconds = []
  for round_num in range(options.rounds):
    clients = task.datasets.sample_train_clients(
        min(options.clients_per_round, num_train_clients),
        random_seed=options.seed * 100_003 + round_num,
    )
    start = time.monotonic()
    output = learning_process.next(state, clients)
    seconds.append(time.monotonic() - start)
    state = output.state
    train = output.metrics['client_work']['train']
    out(
        f'round {round_num + 1}: {seconds[-1]:.2f} s, train loss '
        f'{float(train["loss"]):.4f}'
    )
  start = time.monotonic()
  metrics = _evaluate(task, learning_process, state)
  result = Result(metrics, seconds, time.monotonic() - start)
  out(format_result(options.task, result))
  return result


def format_result(task: str, result: Result) -> str:
  """The `RESULT task=... test_metrics=... first_round_s=...` line."""
  return (
      f'RESULT task={task} test_metrics={result.test_metrics} '
      f'first_round_s={result.round_seconds[0]:.2f} '
      f'mean_later_round_s={result.mean_later_round_seconds:.2f} '
      f'eval_s={result.eval_seconds:.1f}'
  )


def _evaluate(task, learning_process, state) -> dict[str, float]:
  """The task's metrics of the state's model on the whole test set."""
  return evaluation.CentralEvaluation(task.model_fn)(
      learning_process.get_model_weights(state),
      task.datasets.get_centralized_test_data(),
  )
