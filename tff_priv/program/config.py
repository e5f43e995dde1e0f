"""A training run's configuration (`RunConfig`) and its directory's config.json.

`config.json` holds everything that determines the run's result
(`RunConfig.to_dict`). A restart whose configuration differs is refused
(`ConfigError`), as is an existing non-empty directory that is not a run
directory. Only `checkpoint_every`, `keep_checkpoints`, `progress` and
`cache_dir` (where data is read) may change between sessions; `total_rounds`
may not (with `epsilon` it sets the calibrated noise).
"""

import dataclasses
import json
import os
from typing import Any, Optional

from tff_priv import validation
from tff_priv.program import files
from tff_priv.program import layout
from tff_priv.program import registry
import tff_priv_tasks as tasks

OPTIMIZERS = registry.base.OPTIMIZERS
# Task options a run may set (the synthetic-split ones exist only for the
# tasks that have them; `tasks.get_task` rejects the others).
TASK_OPTION_NAMES = (
    'model',
    'num_clients',
    'partition',
    'samples_per_client',
    'max_clients',
    'test_fraction',
)
CLIENT_METRICS = ('none', 'dp')
# What a run with holdout_validation is evaluated on (`RunConfig`).
EVALUATION_SPLITS = ('test', 'validation')


class ConfigError(ValueError):
  """The run cannot start as configured (a usage error, not a failure)."""


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Everything that determines a run's result.

  Attributes:
    task: one of `tasks.TASK_NAMES`.
    task_options: options of `tasks.get_task` (among TASK_OPTION_NAMES).
    batch_size: client batch size.
    num_epochs: local epochs per round.
    mechanism: one of `registry.MECHANISMS`.
    params: the mechanism's parameters: a dict (None values are "not
      given") or its `Config`; `validate` makes the `Config`.
    clients_per_round: K: expected (Poisson) or exact (fixed) clients/round.
    total_rounds: T (CRD: the initial plan T_0).
    client_optimizer: 'sgd' or 'adam'.
    client_learning_rate: the clients' learning rate (UDP's eta).
    client_momentum: momentum of the clients' SGD (reset every round).
    client_lr_decay: round t's client learning rate is client_learning_rate
      x client_lr_decay^(t - 1) (a public schedule).
    max_client_examples: at most this many examples of each client
      (`ClientSpec.max_elements`).
    server_optimizer: 'sgd' or 'adam'.
    server_learning_rate: the server's learning rate.
    eval_every: evaluate the test set every this many rounds (and at the end).
    test_examples: evaluate on a fixed random subset (seeded by `seed`) of
      this many test examples; None: the whole test set.
    holdout_validation: the first half of the (subset of the) test set is
      the server's validation data (public to the server: CRD's trigger
      reads it), and the run is evaluated on the second half only.
    evaluation_split: with holdout_validation, what the run is evaluated on:
      'test' (the second half) or 'validation' (the first half, the server's:
      a tuning run's, so that the test half stays unseen until the reported
      runs).
    seed: seeds the data split, client sampling, model init, smp masks.
    server_budget: the budget filter's eps: a client whose eps against the
      server would exceed it is left out of the round (mechanisms private
      against the server only; None: no filter).
    sampling_seed: seeds who is sampled. None (default): drawn from the
      operating system at the first start. Either way it is kept only in
      the checkpoints and the owner-only `secrets.json` (config.json and the
      summary say only whether one was given), so that the published
      outputs do not tell who was sampled, as the amplification by sampling
      assumes. Given: the draws are reproducible by whoever knows it.
    audit_canaries: N > 0: estimate eps empirically from this run (Andrew et
      al., ICLR 2024): N canary clients whose model delta is a secret random
      direction at the clip join the rounds at the real clients' rate (under
      epoch sampling once per epoch, as a real client), N more are held out,
      and summary.json's privacy['empirical'] gives the one-shot estimates
      for the final model and for all iterates
      (`tff_priv.auditing.canaries`). For udp (record-level): N canary
      examples and the one-run lower bound of Steinke et al.
      (`tff_priv.auditing.canary_examples`).
    client_metrics: 'none': a private run releases no client training
      metrics (the 'none' mechanism releases TFF's exact ones); 'dp': each
      round also releases the clients' mean loss (clipped to
      client_metrics_loss_bound) and accuracy and their number, summed and
      noised by the server (`tff_priv.learning.client_metrics.DpClientMetrics`)
      and charged to the ledger with the round's model (mechanisms whose
      server adds the noise only: dp_fedavg).
    client_metrics_noise_multiplier: z of the 'dp' client metrics: noise std
      z sqrt(3) on the sum of the clients' bounded (loss / bound, accuracy,
      1) vectors; each round is charged GaussianDpEvent(z) more.
    client_metrics_loss_bound: a client's mean loss is clipped to [0, this].
  """

  task: str = 'mnist5k'
  task_options: dict[str, Any] = dataclasses.field(default_factory=dict)
  batch_size: int = 10
  num_epochs: int = 1
  mechanism: str = 'dp_fedavg'
  params: Any = None
  clients_per_round: int = 10
  total_rounds: int = 20
  client_optimizer: str = 'sgd'
  client_learning_rate: float = 0.05
  client_momentum: Optional[float] = None
  client_lr_decay: float = 1.0
  max_client_examples: Optional[int] = None
  server_optimizer: str = 'sgd'
  server_learning_rate: float = 1.0
  eval_every: int = 5
  test_examples: Optional[int] = None
  holdout_validation: bool = False
  evaluation_split: str = 'test'
  seed: int = 0
  server_budget: Optional[float] = None
  sampling_seed: Optional[int] = None
  audit_canaries: int = 0
  client_metrics: str = 'none'
  client_metrics_noise_multiplier: float = 1.0
  client_metrics_loss_bound: float = 5.0

  def validate(self) -> 'RunConfig':
    """Checks every field (without loading data); params resolved.

    Raises:
      ValueError: naming the bad field.
    """
    validation.one_of('task', self.task, tasks.TASK_NAMES)
    options = {k: v for k, v in self.task_options.items() if v is not None}
    known = tasks.task_options(self.task)
    for key in options:
      if key not in TASK_OPTION_NAMES or key not in known:
        raise ValueError(f'{key} does not apply to task {self.task!r}')
    if 'num_clients' in options:
      validation.int_at_least('num_clients', options['num_clients'], 1)
    validation.int_at_least('batch_size', self.batch_size, 1)
    validation.int_at_least('num_epochs', self.num_epochs, 1)
    validation.int_at_least('clients_per_round', self.clients_per_round, 1)
    validation.int_at_least('total_rounds', self.total_rounds, 1)
    validation.int_at_least('eval_every', self.eval_every, 1)
    validation.int_at_least('seed', self.seed, 0)
    if self.sampling_seed is not None:
      validation.int_at_least('sampling_seed', self.sampling_seed, 0)
    validation.one_of('client_optimizer', self.client_optimizer, OPTIMIZERS)
    validation.one_of('server_optimizer', self.server_optimizer, OPTIMIZERS)
    validation.positive('client_learning_rate', self.client_learning_rate)
    validation.positive('server_learning_rate', self.server_learning_rate)
    if self.client_momentum is not None:
      validation.non_negative('client_momentum', self.client_momentum)
      if self.client_optimizer != 'sgd':
        raise ValueError(
            "client_momentum applies only to client_optimizer='sgd'"
        )
    validation.half_open_unit('client_lr_decay', self.client_lr_decay)
    if self.max_client_examples is not None:
      validation.int_at_least(
          'max_client_examples', self.max_client_examples, 1
      )
    if self.test_examples is not None:
      validation.int_at_least('test_examples', self.test_examples, 1)
    validation.one_of(
        'evaluation_split', self.evaluation_split, EVALUATION_SPLITS
    )
    if self.evaluation_split == 'validation' and not self.holdout_validation:
      raise ValueError(
          "evaluation_split='validation' needs holdout_validation (the "
          'validation half is the first half of the test set)'
      )
    if self.server_budget is not None:
      validation.positive('server_budget', self.server_budget)
    params = registry.config(self.mechanism, self.params)
    if self.server_budget is not None and getattr(
        params, 'adaptive_noise', False
    ):
      raise ValueError(
          'server_budget does not apply with an adaptive noise schedule '
          '(crd_beta): the budget filter reads realised compositions, which '
          'are not guarantees when the noise follows earlier releases; drop '
          'one of them'
      )
    validation.int_at_least('audit_canaries', self.audit_canaries, 0)
    if self.audit_canaries:
      if self.audit_canaries < 2:
        raise ValueError(
            'audit_canaries must be 0 or >= 2 (a Gaussian is fit to the '
            f'canaries), got {self.audit_canaries}'
        )
      refusal = registry.canary_refusal(self.mechanism, params)
      if refusal:
        raise ValueError(refusal)
    validation.one_of('client_metrics', self.client_metrics, CLIENT_METRICS)
    validation.positive(
        'client_metrics_noise_multiplier',
        self.client_metrics_noise_multiplier,
    )
    validation.positive(
        'client_metrics_loss_bound', self.client_metrics_loss_bound
    )
    if self.client_metrics == 'dp':
      refusal = registry.client_metrics_refusal(self.mechanism)
      if refusal:
        raise ValueError(refusal)
      if self.audit_canaries:
        raise ValueError(
            "client_metrics='dp' does not apply with audit_canaries: a "
            "canary's metrics come from a real client's data"
        )
    return dataclasses.replace(self, task_options=options, params=params)

  def to_dict(self) -> dict[str, Any]:
    """JSON-ready and publishable, the mechanism's parameters under 'params'.

    A given `sampling_seed` is written as `GIVEN_SEED`: the seed itself is
    secret (`run_dir.write_secrets`).
    """
    out = dataclasses.asdict(
        dataclasses.replace(
            self,
            params=None,
            sampling_seed=None if self.sampling_seed is None else GIVEN_SEED,
        )
    )
    out['params'] = registry.to_dict(
        registry.config(self.mechanism, self.params)
    )
    return out


# What config.json and the summary hold for a given sampling_seed.
GIVEN_SEED = 'given (kept in secrets.json)'


def _with_defaults(found: dict[str, Any]) -> dict[str, Any]:
  """A config.json's content with the defaults of later versions filled in.

  A field or a mechanism parameter whose default was added after the file
  was written (smp's `mask`, 'rand_k', the only mask before; RunConfig's
  `client_lr_decay`) is then not a difference: the run resumes. Adding a
  default that changes what an older run did would need a new
  `layout.CONFIG_FORMAT` instead.
  """
  found = {
      **{
          f.name: json.loads(json.dumps(files.finite_or_str(f.default)))
          for f in dataclasses.fields(RunConfig)
          if f.name not in found
          and f.default is not dataclasses.MISSING
          and f.name != 'params'
      },
      **found,
  }
  if isinstance(found.get('sampling_seed'), int):
    # Written by a version that published the seed.
    found['sampling_seed'] = GIVEN_SEED
  mechanism, params = found.get('mechanism'), found.get('params')
  if mechanism not in registry.MECHANISMS or not isinstance(params, dict):
    return found
  try:
    resolved = registry.config(mechanism, params)
  except (TypeError, ValueError):
    return found  # Reported as a difference by the caller.
  return {
      **found,
      'params': json.loads(
          json.dumps(files.finite_or_str(registry.to_dict(resolved)))
      ),
  }


def prepare_output_dir(
    root_output_dir: str, config: RunConfig, write: bool = True
) -> bool:
  """Writes config.json in a new run directory, or checks it on a restart.

  Args:
    root_output_dir: the run directory.
    config: the validated configuration.
    write: False: only check (nothing is created).

  Returns:
    True when the directory already holds this configuration's run (resume).

  Raises:
    ConfigError: the directory holds another configuration, or is a non-empty
      directory that is not a run directory.
  """
  config_path = layout.path(root_output_dir, layout.CONFIG)
  wanted = {'format': layout.CONFIG_FORMAT, **config.to_dict()}
  wanted = json.loads(json.dumps(files.finite_or_str(wanted)))
  if os.path.exists(config_path):
    try:
      with open(config_path) as f:
        found = _with_defaults(json.load(f))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise ConfigError(
          f'{config_path} is not a readable run configuration ({e}); use '
          'another root_output_dir'
      ) from e
    if found != wanted:
      keys = sorted(
          k for k in set(found) | set(wanted) if found.get(k) != wanted.get(k)
      )
      differ = ', '.join(
          f'{k}: {found.get(k)!r} there, {wanted.get(k)!r} now' for k in keys
      )
      raise ConfigError(
          f'{root_output_dir} holds a run of another configuration ({differ});'
          ' use another root_output_dir or the same flags'
      )
    return True
  if os.path.isdir(root_output_dir) and os.listdir(root_output_dir):
    raise ConfigError(
        f'{root_output_dir} exists and is not a tff_priv run directory (no '
        f'{layout.CONFIG}); use an empty or new root_output_dir'
    )
  if write:
    os.makedirs(root_output_dir, exist_ok=True)
    files.write_json(config_path, wanted)
  return False
