"""A training run's parts called at fixed points: evaluation, the canary audits.

In the style of pfl-research's callbacks: the loop calls every hook at the
same points of a round and knows nothing of what a hook does. A hook never
touches the sampling or the ledger: what it adds to a round (canary clients,
canary examples) is part of the audited run; what it evaluates on the server's
public data is released with the round, after the round is charged; what it
reports at the end goes in summary.json's privacy['empirical'].
"""

import functools
from typing import Any, Callable, Optional

import numpy as np

from tff_priv.auditing import canaries as canaries_lib
from tff_priv.auditing import canary_examples as canary_examples_lib
from tff_priv.learning import canary_clients
from tff_priv.learning import evaluation
from tff_priv.program import model_io


class RunHook:
  """A part of a run called at fixed points of each round (all optional)."""

  def client_dataset(self, dataset, client_index: int):
    """A sampled client's dataset before the mechanism's preprocessing."""
    del client_index
    return dataset

  def round_data(self, data: list, round_num: int) -> list:
    """The round's client datasets, just before `process.next`."""
    del round_num
    return data

  def before_round(self, model_weights: Callable[[], Any]) -> None:
    """`model_weights()`: the model the round starts from (a round that runs).

    Read only when a hook calls it: each read moves the learning state
    through TFF's executor.
    """

  def after_round(self, model_weights: Callable[[], Any]) -> None:
    """`model_weights()`: the model the round released (a round that ran)."""

  def evaluate(
      self, round_num: int, model_weights: Callable[[], Any], last: bool
  ) -> Optional[dict[str, float]]:
    """Metrics of round `round_num`'s model on public data, released with it.

    Called after the round is charged. `model_weights()` gives the model;
    `last`: the run's last round. None: nothing this round.
    """
    del round_num, model_weights, last
    return None

  def summary(
      self,
      initial_model_path: str,
      final_weights,
      delta: float,
      accounted_epsilon: float,
  ) -> Optional[dict[str, Any]]:
    """privacy['empirical'] of the summary; None: nothing to report."""
    del initial_model_path, final_weights, delta, accounted_epsilon
    return None


class Evaluation(RunHook):
  """The released model on the server's test data, every `every` rounds.

  Evaluated every `every` rounds and at the last. The test data are the
  server's, none of the clients': the metrics are a function of the
  released model and public data, and charge nothing.
  """

  def __init__(self, model_fn: Callable[[], Any], test_data, every: int):
    self._model_fn = model_fn
    self._test_data = test_data
    self._every = every

  @functools.cached_property
  def _evaluate(self):
    # The server's data need no federated computation: `build_fed_eval`'s
    # numbers in plain TF, without its 3-5 s of tracing at every start.
    return evaluation.CentralEvaluation(self._model_fn)

  def evaluate(self, round_num, model_weights, last):
    if round_num % self._every and not last:
      return None
    return self._evaluate(model_weights(), self._test_data)


class CanaryClients(RunHook):
  """Andrew et al.'s canary clients and their one-shot estimate.

  Inserted canaries join each round that runs at the real clients' rate,
  drawn on top of the real clients (never instead of one); each canary's
  largest cosine with a round's model delta is kept (`max_cosines`, in the
  program state) for the all-iterates estimate.

  Args:
    canaries: the run's `canaries.Canaries`.
    mechanism: the built mechanism (`num_parameters`, `canary_norm`,
      `canary_weight`).
    template_fn: a client dataset of the clients' element type, for a round
      whose draw is empty (a canary reads none of it).
    max_cosines: [2N] each canary's largest cosine so far (-1: none yet).
  """

  def __init__(
      self,
      canaries,
      mechanism,
      template_fn: Callable[[], Any],
      max_cosines: np.ndarray,
  ):
    self.canaries = canaries
    self._mechanism = mechanism
    self._template_fn = template_fn
    self.max_cosines = np.asarray(max_cosines, np.float64)
    self._before = None

  def round_data(self, data, round_num):
    # A canary's TFF update is initial - trained weights: -norm c_j moves
    # the model towards +c_j.
    d = self._mechanism.num_parameters
    template = data[0] if data else self._template_fn()
    return [canary_clients.real_client_data(x, d) for x in data] + [
        canary_clients.canary_client_data(
            template,
            -self._mechanism.loop.canary_norm * self.canaries.direction(j),
            self._mechanism.loop.canary_weight,
        )
        for j in self.canaries.participants(round_num)
    ]

  def before_round(self, model_weights):
    self._before = model_io.flat(model_weights())

  def after_round(self, model_weights):
    self.max_cosines = np.maximum(
        self.max_cosines,
        self.canaries.cosines(model_io.flat(model_weights()) - self._before),
    )

  def summary(
      self, initial_model_path, final_weights, delta, accounted_epsilon
  ):
    final_delta = model_io.flat(final_weights) - model_io.read_flat(
        initial_model_path
    )
    return canaries_lib.estimate(
        self.canaries.cosines(final_delta),
        self.max_cosines,
        self.canaries.num_inserted,
        delta,
        accounted_epsilon,
    )


class CanaryExamples(RunHook):
  """Steinke et al.'s canary examples and their one-run lower bound.

  Each canary sits in a fixed slot of one client's data, holding the canary
  with probability 1/2 (secret) and a blank record otherwise: the same |D_i|
  either way. The charge's sensitivity 2 eta C / min |D_i| counts real
  examples only, an upper bound on the true one.

  Args:
    canary_examples: the run's `canary_examples.CanaryExamples`.
    model_fn: the task's model function (the canaries' losses).
    batch_size: the clients' batch size.
  """

  def __init__(self, canary_examples, model_fn, batch_size: int):
    self._canary_examples = canary_examples
    self._model_fn = model_fn
    self._batch_size = batch_size

  def client_dataset(self, dataset, client_index):
    return self._canary_examples.add_to(dataset, client_index, self._batch_size)

  def summary(
      self, initial_model_path, final_weights, delta, accounted_epsilon
  ):
    return canary_examples_lib.audit(
        self._canary_examples.scores(
            canary_examples_lib.model_loss_fn(self._model_fn),
            model_io.read_model(initial_model_path),
            (list(final_weights.trainable), list(final_weights.non_trainable)),
        ),
        self._canary_examples.included,
        delta,
        accounted_epsilon,
    )


def of_run(config, setup, mechanism, state) -> list[RunHook]:
  """A session's hooks: evaluation, and the canary audit of `audit_canaries`.

  Args:
    config: the run's `RunConfig`.
    setup: the run's `setup.Setup`.
    mechanism: the session's built mechanism.
    state: the `ProgramState` the session starts from (its canary seed and
      cosines so far).

  Returns:
    The hooks, in the order the loop calls them.
  """
  hooks = [Evaluation(setup.task.model_fn, setup.test_data, config.eval_every)]
  n, datasets = config.audit_canaries, setup.task.datasets
  if setup.canary_kind == 'examples':
    # Record-level: canary examples in the clients' data (Steinke et al.).
    shape, num_classes, dtype = canary_examples_lib.model_shape(
        setup.task.model_fn
    )
    examples = canary_examples_lib.CanaryExamples(
        state.canary_seed, n, len(setup.client_ids), shape, num_classes, dtype
    )
    hooks.append(
        CanaryExamples(examples, setup.task.model_fn, config.batch_size)
    )
  if setup.canary_kind != 'clients':
    return hooks
  # Inserted canaries join each round at the real clients' rate q = K / N
  # (Andrew et al.'s code samples them with the real clients); under epoch
  # sampling once per epoch, as a real client (DP-FTRL's trees and BLT's
  # streams hold for clients at most once per epoch).
  sampling = setup.sampling
  epoch = sampling.rounds_per_epoch if sampling.kind == 'epoch' else None
  hooks.append(
      CanaryClients(
          canaries_lib.Canaries(
              state.canary_seed,
              n,
              mechanism.num_parameters,
              sampling.rate,
              rounds_per_epoch=epoch,
          ),
          mechanism,
          lambda: datasets.train_preprocess_fn(
              datasets.train_data.create_tf_dataset_for_client(
                  setup.client_ids[0]
              )
          ),
          state.canary_max_cosines,
      )
  )
  return hooks
