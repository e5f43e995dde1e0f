"""The shared parts of a mechanism: `MechanismConfig`, `BuildContext`."""

import dataclasses
import math
import re
from typing import Any, Callable, ClassVar, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import filters
from tff_priv.accounting import guarantees
from tff_priv.accounting import target_noise
from tff_priv.learning import canary_clients
from tff_priv.learning import client_metrics
from tff_priv.program import sampling as sampling_lib

DEFAULT_EPSILON = 8.0
DEFAULT_DELTA = 1e-5
DEFAULT_CLIP = 1.0
BYTES_PER_FLOAT32 = 4
OPTIMIZERS = {
    'sgd': tff.learning.optimizers.build_sgdm,
    'adam': tff.learning.optimizers.build_adam,
}


def fill_noise_target(
    config: Any, name: str, noise_fields: tuple[str, ...]
) -> None:
  """Checks that at most one of `noise_fields` is given; none: DEFAULT_EPSILON.

  For the `__post_init__` of a frozen config.

  Raises:
    ValueError: more than one given (the message names them).
  """
  chosen = [k for k in noise_fields if getattr(config, k) is not None]
  if len(chosen) > 1:
    raise ValueError(
        f'give at most one of {", ".join(noise_fields)} for mechanism '
        f'{name!r}, got '
        f'{", ".join(chosen)}'
    )
  if not chosen:
    object.__setattr__(config, 'epsilon', DEFAULT_EPSILON)


# The checks of the parameters several mechanisms share, by name.
_COMMON_CHECKS = {
    'epsilon': validation.positive,
    'noise_multiplier': validation.non_negative,
    'noise_stddev': validation.non_negative,
    'delta': validation.open_unit,
    'clip': validation.positive,
}


def check_fields(
    config: Any, checks: Optional[dict[str, Callable[[str, Any], Any]]] = None
) -> None:
  """Checks every given field and stores the checked value.

  A field named in `_COMMON_CHECKS` gets that check; `checks` adds the
  mechanism's own (`check(name, value) -> value`, raising ValueError or
  TypeError naming the field).
  """
  names = {f.name for f in dataclasses.fields(config)}
  every = {k: v for k, v in _COMMON_CHECKS.items() if k in names}
  every.update(checks or {})
  for name, check in every.items():
    value = getattr(config, name)
    if value is not None:
      object.__setattr__(config, name, check(name, value))


def attribute_help(cls) -> dict[str, str]:
  """{attribute: its description} from a class docstring's Attributes."""
  text = (cls.__doc__ or '').split('Attributes:', 1)[-1]
  out, name = {}, None
  for line in text.splitlines():
    match = re.match(r'^\s{2,6}(\w+): (.*)$', line)
    if match:
      name = match.group(1)
      out[name] = match.group(2)
    elif name and line.strip():
      out[name] += ' ' + line.strip()
  return out


def param(default: Any, text: str) -> Any:
  """A mechanism parameter: a dataclass field with its default and flag help."""
  return dataclasses.field(
      default=default, metadata={'help': ' '.join(text.split())}
  )


def epsilon_param() -> Any:
  """The `epsilon` parameter of a mechanism with a target: its field."""
  return param(
      None,
      "the run's target eps at delta (exclusive with the noise levels; "
      'the default when none is given).',
  )


def delta_param() -> Any:
  """The `delta` parameter of a mechanism with a target: its field."""
  return param(DEFAULT_DELTA, 'the delta of the target and the report.')


def parameter_help(cls) -> dict[str, str]:
  """{field: its help} of a dataclass whose fields are made by `param`."""
  return {f.name: f.metadata.get('help', '') for f in dataclasses.fields(cls)}


def finite(name: str, value) -> float:
  """`value` as a float, checked finite (a check of `check_fields`)."""
  value = float(value)
  if not math.isfinite(value):
    raise ValueError(f'{name} must be finite, got {value}')
  return value


@dataclasses.dataclass(frozen=True)
class Resumed:
  """What a resumed session brings to a mechanism built again (`session`).

  Attributes:
    start_round: the rounds already run (a resumed session continues after
      it): a target epsilon is calibrated for the rounds after it.
    spent: what the run's ledger has charged already (a resumed session, or
      a model restarted in a directory with charges); None: nothing. A
      target epsilon is then met by everything together
      (`calibration.Spent`: a function of the ledger alone).
    restart_stream: a resumed session restarts the stream (or tree) its
      start round falls in (rounds after the checkpoint were released and
      run again); False: it continues it (nothing was released twice).
    noise_floor: a continued stream was charged at this noise multiplier:
      its rounds left run at no less (more noise on a charged release is a
      post-processing of it).
  """

  start_round: int = 0
  spent: Optional[calibration.Spent] = None
  restart_stream: bool = True
  noise_floor: float = 0.0

  def __post_init__(self):
    validation.int_at_least('start_round', self.start_round, 0)


@dataclasses.dataclass(frozen=True)
class BuildContext:
  """What a mechanism is built for: the task's model, the loop's sampling.

  Attributes:
    model_fn: the task's `tff.learning.models.VariableModel` function.
    sampling: the run's `ClientSampling` (of the mechanism's kind).
    total_rounds: T, for calibrating a target epsilon.
    client_optimizer: 'sgd' or 'adam'.
    client_learning_rate: the clients' learning rate (UDP's eta).
    client_momentum: momentum of the clients' SGD (None: plain SGD).
    server_optimizer: 'sgd' or 'adam'.
    server_learning_rate: the server's learning rate.
    local_epochs: the passes a client makes over its data in a round (the
      client datasets already repeat them; smp's top_k public training does
      the same).
    seed: seeds smp's rand_k mask sequence and distortion's mini-batches.
    public_data: smp with mask 'top_k': D_pub (see `smp.Config.make`).
    min_client_examples: udp: returns the smallest |D_i| of the population,
      counted as the clients train on it (after `max_client_examples`; with
      canary examples, their slots included); called only by the mechanisms
      that need it: it reads every client.
    validation_data: returns server-side (x, y) arrays held out from the
      test set (`RunConfig.holdout_validation`), for a mechanism whose
      schedule is steered by a validation loss (CRD); None: there are none.
    canary_clients: build the process with canary clients
      (`tff_priv.learning.canary_clients`: its client data becomes
      `<dataset, canary>`) for the one-shot privacy estimate; a mechanism
      that cannot host them refuses (`MechanismConfig.canary_refusal`).
    mean_client_examples: returns the mean |D_i| of the population (called
      only by a weighted process's canaries: it reads every client).
    metrics_aggregator: the `metrics_aggregator` of `fed_avg` (e.g. a
      `client_metrics.DpClientMetrics`); None: `no_client_metrics`. Only a
      mechanism with `MechanismConfig.DP_CLIENT_METRICS` is built with one.
    resumed: what a resumed session brings to the build (`Resumed`; the
      default: a run's first session).
  """

  model_fn: Callable[[], tff.learning.models.VariableModel]
  sampling: sampling_lib.ClientSampling
  total_rounds: int
  client_optimizer: str = 'sgd'
  client_learning_rate: float = 0.05
  client_momentum: Optional[float] = None
  server_optimizer: str = 'sgd'
  server_learning_rate: float = 1.0
  local_epochs: int = 1
  seed: int = 0
  public_data: Optional[tf.data.Dataset] = None
  min_client_examples: Optional[Callable[[], int]] = None
  validation_data: Optional[Callable[[], tuple[Any, Any]]] = None
  canary_clients: bool = False
  mean_client_examples: Optional[Callable[[], float]] = None
  metrics_aggregator: Optional[Callable[..., Any]] = None
  resumed: Resumed = dataclasses.field(default_factory=Resumed)

  def __post_init__(self):
    validation.int_at_least('total_rounds', self.total_rounds, 1)
    validation.one_of('client_optimizer', self.client_optimizer, OPTIMIZERS)
    validation.one_of('server_optimizer', self.server_optimizer, OPTIMIZERS)
    validation.positive('client_learning_rate', self.client_learning_rate)
    validation.positive('server_learning_rate', self.server_learning_rate)
    validation.int_at_least('local_epochs', self.local_epochs, 1)
    if self.client_momentum is not None:
      validation.non_negative('client_momentum', self.client_momentum)
      if self.client_optimizer != 'sgd':
        raise ValueError(
            "client_momentum applies only to client_optimizer='sgd'"
        )

  def client_optimizer_fn(self) -> tff.learning.optimizers.Optimizer:
    if self.client_optimizer == 'sgd' and self.client_momentum:
      return tff.learning.optimizers.build_sgdm(
          self.client_learning_rate, momentum=self.client_momentum
      )
    return OPTIMIZERS[self.client_optimizer](
        learning_rate=self.client_learning_rate
    )

  def server_optimizer_fn(self) -> tff.learning.optimizers.Optimizer:
    return OPTIMIZERS[self.server_optimizer](
        learning_rate=self.server_learning_rate
    )

  def fed_avg(self, aggregator) -> tff.learning.templates.LearningProcess:
    """Unweighted FedAvg with `aggregator` and `metrics_aggregator`.

    With `canary_clients`: the same components, composed with the client
    work wrapped (`canary_clients.build_fed_avg`).
    """
    metrics_aggregator = (
        self.metrics_aggregator or client_metrics.no_client_metrics
    )
    if self.canary_clients:
      return canary_clients.build_fed_avg(
          self.model_fn,
          client_optimizer_fn=self.client_optimizer_fn(),
          server_optimizer_fn=self.server_optimizer_fn(),
          model_aggregator=tff.aggregators.as_weighted_aggregator(aggregator),
          client_weighting=tff.learning.ClientWeighting.UNIFORM,
          metrics_aggregator=metrics_aggregator,
      )
    return tff.learning.algorithms.build_unweighted_fed_avg(
        self.model_fn,
        client_optimizer_fn=self.client_optimizer_fn(),
        server_optimizer_fn=self.server_optimizer_fn(),
        model_aggregator=aggregator,
        metrics_aggregator=metrics_aggregator,
    )

  @property
  def rounds_left(self) -> int:
    """The rounds this session may run: max(1, total_rounds - start_round)."""
    return max(1, self.total_rounds - self.resumed.start_round)

  def streams_left(self, rounds_per_stream: int) -> int:
    """The streams (trees) of `rounds_per_stream` rounds still to charge.

    Those that start after `start_round`, and, when the session restarts it
    (`restart_stream`), the one `start_round` falls in (0: the session
    continues the run's last stream, already charged).
    """
    start, restart = self.resumed.start_round, self.resumed.restart_stream
    started = (
        start // rounds_per_stream
        if restart
        else -(-start // rounds_per_stream)
    )
    return max(0, math.ceil(self.total_rounds / rounds_per_stream) - started)

  def stream_noise(
      self, rounds_per_stream: int, calibrate: Callable[..., float]
  ) -> float:
    """The noise multiplier of a stream mechanism's session.

    `calibrate(streams, spent)` gives the z that meets the target over
    `streams` streams after `spent`. A resumed session calibrates its
    `streams_left` after `spent`, never below `noise_floor`; with none left
    it continues at `noise_floor`.
    """
    spent, floor = self.resumed.spent, self.resumed.noise_floor
    if spent is None:
      return calibrate(None, None)
    left = self.streams_left(rounds_per_stream)
    if not left:
      return floor
    return max(calibrate(left, spent), floor)

  def noise_multiplier(self, config: Any, local_noise: bool = False) -> float:
    """`config.noise_multiplier`, or the z that meets `config.epsilon`.

    Calibrated by `target_noise.noise_for_target` (the ledger's own events)
    over the `rounds_left` under this context's sampling, after what is
    `spent`; `local_noise`: also against the server's unamplified view
    (`min_with_unsampled`).
    """
    if config.noise_multiplier is not None:
      return config.noise_multiplier
    return target_noise.noise_for_target(
        config.epsilon,
        config.delta,
        self.rounds_left,
        self.sampling.ledger_sampling(),
        min_with_unsampled=local_noise,
        spent=self.resumed.spent,
    )


def count_parameters(model_fn) -> int:
  """d: the number of trainable scalars of the model (what a client uploads)."""
  with tf.Graph().as_default():
    model = model_fn()
    return int(
        sum(np.prod(v.shape, dtype=np.int64) for v in model.trainable_variables)
    )


def _as_is(dataset, round_num, client_index):
  del round_num, client_index
  return dataset


@dataclasses.dataclass(frozen=True)
class Loop:
  """What the training loop needs of a built mechanism beyond its process.

  Attributes:
    preprocess: `(dataset, round_num, client_index) -> dataset`, applied to
      each client's preprocessed training dataset in a round (client_index:
      the client's position in the task's list of clients).
    aggregator_state: the aggregator's part of a process state (where the
      factory keeps its DpEvent).
    is_done: for a process that may end before `total_rounds` (CRD): True
      once it has; None: it runs every round.
    on_resume: the process state to continue from when a run resumes from a
      checkpoint (DP-FTRL: its tree restarted, so that rounds run again are
      released with fresh noise); None: the loaded state as it is.
    adopt_state: `(loaded state, this process's initial state) -> state`:
      a state saved by the same mechanism built with another noise (a
      resumed run recalibrated to its budget left), carried over to this
      one's noise where the state holds it (TFF's DP aggregator keeps its
      stddev in its state); may raise ValueError (the state cannot continue
      at this noise). None: the loaded state as it is (the noise is a
      constant of the computations).
    canary_norm: built with `context.canary_clients`: the L2 norm of a canary
      client's model delta (the clip, where the clip binds: a worst-case
      client); None: built without canaries.
    canary_weight: a canary client's update weight (weighted processes only;
      unweighted ones ignore weights).
  """

  preprocess: Callable[[tf.data.Dataset, int, int], tf.data.Dataset] = _as_is
  aggregator_state: Callable[[Any], Any] = lambda state: state.aggregator
  is_done: Optional[Callable[[Any], bool]] = None
  on_resume: Optional[Callable[[Any], Any]] = None
  adopt_state: Optional[Callable[[Any, Any], Any]] = None
  canary_norm: Optional[float] = None
  canary_weight: float = 1.0


@dataclasses.dataclass
class Mechanism:
  """A built mechanism: the process to run and whom its rounds protect.

  Attributes:
    name: the mechanism's NAME.
    config: its resolved `Config`.
    sampling: the `ClientSampling` the loop must use.
    process: the `tff.learning.templates.LearningProcess`; its state's
      `aggregator` carries the DpEvent of each round.
    num_parameters: d, trainable scalars of the model.
    guarantee: the aggregation factory's `Guarantee` (None: not private).
    upload_bytes_per_client: nominal bytes one client uploads in a round (a
      public quantity: dense float32 unless the mechanism says otherwise).
    resolved: JSON-ready values the run actually uses (calibrated noise,
      sensitivity, k, ...).
    caveats: what the reported eps does not cover, in words.
    closed_form: the paper's own reading of the run at its nominal
      parameters (never instead of the ledger), or None.
    stream: the public values that fix a correlated-noise stream's
      coefficients (BLT's buffers, BandMF's bands and coefficients), kept in
      each session's entry: a resumed session whose build gives others
      restarts the stream (charged) instead of continuing it with another
      strategy; None: no stream.
    adaptive_bounds: for a mechanism whose rounds' noise is chosen from
      earlier releases (CRD): the (analyst, server) `filters.RdpBound`s every
      path keeps, reported instead of the realised composition; None: the
      rounds' events are fixed before the run.
    loop: what the training loop needs of it beyond the process (`Loop`).
  """

  name: str
  config: Any
  sampling: sampling_lib.ClientSampling
  process: tff.learning.templates.LearningProcess
  num_parameters: int
  guarantee: Optional[guarantees.Guarantee] = None
  upload_bytes_per_client: int = 0
  resolved: dict[str, Any] = dataclasses.field(default_factory=dict)
  caveats: list[str] = dataclasses.field(default_factory=list)
  closed_form: Optional[dict[str, Any]] = None
  stream: Optional[dict[str, Any]] = None
  adaptive_bounds: Optional[tuple[filters.RdpBound, filters.RdpBound]] = None
  loop: Loop = dataclasses.field(default_factory=Loop)

  def __post_init__(self):
    if not self.upload_bytes_per_client:
      self.upload_bytes_per_client = BYTES_PER_FLOAT32 * self.num_parameters


def restarting_on_resume(
    name: str,
    config: Any,
    context: BuildContext,
    factory: Any,
    restart_forced: Callable[[Any], Any],
    resolved: dict[str, Any],
    what: str,
    stream: Optional[Sequence[str]] = None,
) -> Mechanism:
  """A DP-FTRL mechanism (a noise `what` per epoch) in unweighted FedAvg.

  A resumed run restarts the `what` (`restart_forced` of the aggregator
  state: fresh noise for the rounds run again) and charges one more: the
  ledger over-counts, never under-counts. The tree of `dp_ftrl` and the
  streams of `blt` and `bandmf` share this. `stream`: the keys of
  `resolved` that fix the noise's coefficients (`Mechanism.stream`).
  """

  def on_resume(state):
    return state._replace(aggregator=restart_forced(state.aggregator))

  # A session that continues a stream charged in an earlier one draws at
  # least that noise (`Resumed.noise_floor`).

  mech = Mechanism(
      name,
      config,
      context.sampling,
      context.fed_avg(factory),
      count_parameters(context.model_fn),
      factory.guarantee,
      resolved=resolved,
      stream={k: resolved[k] for k in stream} if stream else None,
      loop=Loop(
          on_resume=on_resume,
          # At the clip: clipping leaves it whole, a worst-case client.
          canary_norm=factory.clip if context.canary_clients else None,
      ),
  )
  mech.caveats.append(
      f'a run resumed after rounds released past its checkpoint restarts '
      f'the {what} (fresh noise for the rounds run again) and charges one '
      f'more {what} (an over-count, never an under-count); resumed from the '
      f'checkpoint of its last released round, it continues the {what}'
  )
  return mech


@dataclasses.dataclass(frozen=True)
class MechanismConfig:
  """One mechanism of the training program, whole: a frozen config.

  As jax_privacy's `ExecutionPlanConfig`: a subclass is one mechanism. Its
  fields are its parameters, and so `train.py`'s flags (`param`: a default and
  the flag's help); `__post_init__` validates them (ValueError naming the
  field). Its class attributes say how its rounds are accounted, and three
  methods are the mechanism: `calibrate(context)` (what a target epsilon
  resolves to in a context, e.g. the noise multiplier), `make(context)` (the
  built `Mechanism`) and, with `REPORT_PARAMETERS`, the classmethod
  `report(params, rounds, sampling)` (what a run spends, without building
  one). The privacy charge is not the mechanism's business: every round is
  charged from the DpEvent its aggregation factory keeps in its state.

  Class attributes:
    NAME: what `--mechanism` takes.
    SAMPLING: the client sampling its rounds are accounted under (one of
      `sampling.KINDS`; `sampling_kind()` where a parameter chooses it).
    GUARANTEE: its aggregation factory's `Guarantee` with every default
      (None: not private; `guarantee()` where a parameter changes it). A
      build whose factory says otherwise is refused.
    REPORT_PARAMETERS: the fields `report` reads; None: no privacy report.
    REPORT_INPUTS: a dataclass of what a run resolves from its task (udp's
      smallest client, ldp's d), whose fields `report` reads too; None.
    CANARY_EXAMPLES: its guarantee is record-level: `audit_canaries`
      inserts canary examples, not canary clients.
    DP_CLIENT_METRICS: it may release noised client metrics
      (`RunConfig.client_metrics='dp'`: the server noises them like its
      model, so only a mechanism whose server adds the model noise takes
      them).
  """

  NAME: ClassVar[str] = ''
  SAMPLING: ClassVar[str] = 'poisson'
  GUARANTEE: ClassVar[Optional[guarantees.Guarantee]] = None
  REPORT_PARAMETERS: ClassVar[Optional[tuple[str, ...]]] = None
  REPORT_INPUTS: ClassVar[Optional[type]] = None
  CANARY_EXAMPLES: ClassVar[bool] = False
  DP_CLIENT_METRICS: ClassVar[bool] = False

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    if cls.SAMPLING not in sampling_lib.KINDS:
      raise ValueError(
          f'mechanism {cls.NAME!r}: SAMPLING must be one of '
          f'{", ".join(sampling_lib.KINDS)}, got {cls.SAMPLING!r}'
      )

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    """Checks the fields (`check_fields`); a subclass adds its own checks."""
    check_fields(self)

  def sampling_kind(self) -> str:
    """The client sampling of a run with this config."""
    return self.SAMPLING

  def guarantee(self) -> Optional[guarantees.Guarantee]:
    """The factory's guarantee with this config (None: not private)."""
    return self.GUARANTEE

  def canary_refusal(self) -> Optional[str]:
    """Why it cannot host `audit_canaries`' canary clients; None: it can."""
    return None

  def calibrate(self, context: BuildContext) -> Any:
    """What a target epsilon resolves to in `context`: the noise multiplier.

    `BuildContext.noise_multiplier` (the given one, or the z that meets the
    target over the rounds left after what is spent). A mechanism whose
    calibration gives more (a plan of streams) overrides it.
    """
    return context.noise_multiplier(self)

  def make(self, context: BuildContext) -> Mechanism:
    """The mechanism built for `context` (ValueError: it cannot run there)."""
    raise NotImplementedError(f'mechanism {self.NAME!r} defines no make()')

  @classmethod
  def report(
      cls, params: dict[str, Any], rounds: int, sampling: Any
  ) -> dict[str, Any]:
    """What a run spends, or its noise for a target (`REPORT_PARAMETERS`)."""
    raise ValueError(f'mechanism {cls.NAME!r} has no privacy report')
