"""What a factory's round guarantees, to whom: the DpEvent in its state, read.

Every tff_priv aggregation factory keeps in its state the `dp_accounting`
`DpEvent` of the release its last `next` made, as TFF's
`DifferentiallyPrivateFactory` does; `extract_dp_event` reads it back, and the
factory's `Guarantee` says whom that event protects: the analyst who sees the
released models, and the server.
"""

import dataclasses
from typing import Any, Optional

import attr
from dp_accounting import dp_event
import numpy as np

from tff_priv import validation
from tff_priv.accounting import accountants
from tff_priv.accounting import events
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import wrapped_states

UNITS = ('example', 'client', 'value')
NOISE_PLACEMENTS = ('local', 'secure_sum', 'central')


class ExtractingDpEventFromInitialStateError(ValueError):
  """The state came from `initialize()`: its DpEvent is a placeholder."""


@dataclasses.dataclass(frozen=True)
class Guarantee:
  """Whom a factory's round event protects, and how.

  A factory says whom its round event protects: the unit ('example' of a
  client's data, 'client', or one reported 'value'), where the noise is added,
  and the neighbouring relation of the event. Two adversaries follow from it:

  * the analyst, who sees only the released models: the round's event under
    the round's client sampling, composed over rounds (amplification by
    sampling);
  * the server, which picks the clients and sees what reaches it: each upload
    for noise added on the client ('local'), the securely summed noisy
    aggregate for noise that clients add before a secure sum ('secure_sum'),
    the clients' raw updates when it adds the noise itself ('central'). It
    knows who took part, so no amplification: a client is charged, under
    replace-one adjacency, for the rounds it took part in
    (`server_view_event`; `tff_priv.accounting.individual`).

  Attributes:
    unit: 'example' (one example of one client's data), 'client' (all of one
      client's data) or 'value' (one reported scalar).
    noise: 'local' (each upload is noised on the client: the server sees
      noisy uploads), 'secure_sum' (clients add shares of the noise and the
      server sees only their secure sum) or 'central' (the server adds the
      noise to the clients' raw updates).
    neighboring_relation: the relation under which the round's `dp_event`
      holds: 'add_or_remove_one' or 'replace_one' (of the unit).
    description: one sentence a summary can print.
  """

  unit: str
  noise: str
  neighboring_relation: str
  description: str = ''

  def __post_init__(self):
    validation.one_of('unit', self.unit, UNITS)
    validation.one_of('noise', self.noise, NOISE_PLACEMENTS)
    validation.one_of(
        'neighboring_relation', self.neighboring_relation, accountants.RELATIONS
    )

  def server_view_event(self, event: dp_event.DpEvent) -> dp_event.DpEvent:
    """The event one participating unit is charged against the server.

    Under replace-one adjacency and without sampling: 'local' and
    'secure_sum' charge the round's event (with every Gaussian noise
    multiplier halved when the event holds under add-or-remove-one: replacing
    a unit moves a clipped sum by twice the clip); 'central' is not private
    against the server that adds the noise (`NonPrivateDpEvent`).
    """
    if self.noise == 'central':
      return dp_event.NonPrivateDpEvent()
    if self.neighboring_relation == 'replace_one':
      return event
    return _halve_gaussians(event)


def _halve_gaussians(event: dp_event.DpEvent) -> dp_event.DpEvent:
  if isinstance(event, dp_event.GaussianDpEvent):
    return dp_event.GaussianDpEvent(event.noise_multiplier / 2.0)
  if isinstance(event, dp_event.SelfComposedDpEvent):
    return dp_event.SelfComposedDpEvent(
        _halve_gaussians(event.event), event.count
    )
  if isinstance(event, dp_event.ComposedDpEvent):
    return dp_event.ComposedDpEvent([_halve_gaussians(e) for e in event.events])
  if isinstance(
      event,
      (dp_event.NoOpDpEvent, dp_event.NonPrivateDpEvent),
  ):
    return event
  raise ValueError(
      f'no replace-one reading of {event} under add-or-remove-one is known'
  )


COORDINATEWISE = ('central_sum', 'single_client')


@dataclasses.dataclass(frozen=True)
class AuditSpec:
  """What an auditor may take from a factory: its public clip and shape.

  A factory's `audit_spec()` returns one; `tff_priv.auditing`'s
  `audit_aggregator` reads nothing else of the factory (for TFF's
  `DifferentiallyPrivateFactory`, which has no such method, it reads TFF's
  query).

  Attributes:
    clip: the public L2 clip of one client's value (None: none binds). The
      default canary has this norm, the client it replaces its negation.
    coordinatewise: how one call on B blocks of d values gives B independent
      trials under the factory's own relation (the auditor's vectorised
      path): 'central_sum' (coordinate j of the release is coordinate j of
      the clipped clients' sum plus noise drawn for j alone), 'single_client'
      (one client's upload, noised per coordinate with nothing coupling
      them), or None (one trial per call).
    value_range: (center, radius) of a factory that encodes every value in
      the public range [center - radius, center + radius]: the default canary
      sits at center + radius, the client it replaces at center - radius.
  """

  clip: Optional[float] = None
  coordinatewise: Optional[str] = None
  value_range: Optional[tuple[float, float]] = None

  def __post_init__(self):
    if self.coordinatewise is not None:
      validation.one_of('coordinatewise', self.coordinatewise, COORDINATEWISE)
    if self.coordinatewise == 'central_sum' and self.clip is None:
      raise ValueError("coordinatewise='central_sum' needs the clip")


# TFF's DifferentiallyPrivateFactory: the server clips and noises the sum of
# the clients' raw updates (add-or-remove-one client, sensitivity = clip).
TFF_DP_FACTORY_GUARANTEE = Guarantee(
    unit='client',
    noise='central',
    neighboring_relation='add_or_remove_one',
    description=(
        "TFF's DP-FedAvg: the server clips each client's update and adds "
        'Gaussian noise to their sum; an analyst who sees the models is '
        'protected, the server sees the raw updates'
    ),
)


def _field(state: Any, name: str):
  if isinstance(state, dict):
    return state[name]
  return getattr(state, name)


SAMPLINGS = ('caller', 'schedule', 'own')


@dataclasses.dataclass(frozen=True)
class StateAccounting:
  """What a factory's state type tells the ledger, the auditor and the loops.

  The one protocol between a factory and the lower layers: a factory's state
  class (a NamedTuple with the fields `dp_event` and `is_init_state`, see
  `extract_dp_event`) carries one as its class attribute `accounting`, and
  the ledger, the auditor and the training loops read it from the state. None
  of them knows a factory by name: a factory of the user's own is charged as
  tff_priv's are. A state that declares one has every measurement of its
  factory released as public (`factory_kind_of_state` 'tff_priv'): they must
  be functions of its arguments and the round, as tff_priv's are (checked on
  neighbouring inputs). TFF's `DifferentiallyPrivateFactory`, whose state
  class cannot declare itself, is read as `TFF_DP_STATE_ACCOUNTING`.

  Attributes:
    factory: the factory's class name (messages name it, and
      `TrainModelAccounting` checks its `aggregator=` against it).
    relation: the neighbouring relation the state's events hold under (the
      factory's `guarantee.neighboring_relation`).
    noise: where the noise is added ('local', 'secure_sum', 'central'; the
      guarantee's `noise`, and for a state class two factories share, the one
      that admits less). A TFF wrapper's noised norm (a Gaussian the server
      adds, add-or-remove-one) is charged only around a 'central',
      add-or-remove-one state of sampling 'caller'.
    sampling: how a round is charged. 'caller': the ledger wraps the round's
      event in the client sampling the caller passes; 'schedule': the event
      holds for each client under the participation schedule the factory was
      built for, whoever is sampled (no sampling arguments); 'own': the event
      already holds its client sampling (no sampling arguments).
    sampler: for 'schedule' and 'own', the `tff_priv.program` data source
      class that draws the clients as the event assumes.
    schedule: for 'schedule' and 'own', what that draw is (one phrase, for
      messages).
  """

  factory: str
  relation: str
  noise: str
  sampling: str = 'caller'
  sampler: str = ''
  schedule: str = ''

  def __post_init__(self):
    validation.one_of('relation', self.relation, accountants.RELATIONS)
    validation.one_of('noise', self.noise, NOISE_PLACEMENTS)
    validation.one_of('sampling', self.sampling, SAMPLINGS)
    if self.sampling != 'caller' and not (self.sampler and self.schedule):
      raise ValueError(
          f'sampling={self.sampling!r} needs sampler= and schedule='
      )

  @property
  def takes_sampling(self) -> bool:
    """Whether the ledger wraps the round's event in the caller's sampling."""
    return self.sampling == 'caller'


TFF_DP_STATE_ACCOUNTING = StateAccounting(
    factory="TFF's DifferentiallyPrivateFactory",
    relation=TFF_DP_FACTORY_GUARANTEE.neighboring_relation,
    noise=TFF_DP_FACTORY_GUARANTEE.noise,
)


def _is_tff_dp_class(cls: type) -> bool:
  return cls.__name__ == 'DPAggregatorState' and cls.__module__.startswith(
      'tensorflow_federated'
  )


def declared_accounting(state_or_type: Any) -> Optional[StateAccounting]:
  """The `StateAccounting` a state (or its class) declares, else None.

  TFF's `DifferentiallyPrivateFactory` state reads as
  `TFF_DP_STATE_ACCOUNTING`. No wrapper is seen through (`accounting_of`).
  """
  cls = (
      state_or_type if isinstance(state_or_type, type) else type(state_or_type)
  )
  found = getattr(cls, 'accounting', None)
  if isinstance(found, StateAccounting):
    return found
  if _is_tff_dp_class(cls):
    return TFF_DP_STATE_ACCOUNTING
  return None


def accounting_of(aggregator_state: Any) -> StateAccounting:
  """The `StateAccounting` of the state inside TFF's wrappers.

  Raises:
    TypeError: the state declares none (the message says what is needed).
    wrapped_states.UnnoisedWrapperError: a wrapper tracks its norm without
      noise.
  """
  inner, _ = wrapped_states.unwrap(aggregator_state)
  found = declared_accounting(inner)
  if found is None:
    cls = type(inner)
    raise TypeError(
        f'unknown aggregator state {cls.__module__}.{cls.__name__}: tff_priv '
        "charges the state of TFF's DifferentiallyPrivateFactory and a state "
        'whose class declares its accounting (a tff_priv.accounting.'
        "StateAccounting as its class attribute `accounting`, as tff_priv's "
        'do), also inside tff.aggregators.zeroing_factory / clipping_factory '
        'with a public norm; for a state of your own factory that declares '
        "none, pass its neighboring_relation (its factory's guarantee)"
    )
  return found


def factory_kind_of_state(aggregator_state: Any) -> str:
  """'tff_priv' or 'tff_dp': whose state this is (inside TFF's wrappers).

  'tff_dp' is TFF's DifferentiallyPrivateFactory; 'tff_priv' any state that
  declares its `StateAccounting` (every measurement public).

  Raises:
    TypeError: a state that declares no accounting.
    wrapped_states.UnnoisedWrapperError: a wrapper tracks its norm without
      noise.
  """
  found = accounting_of(aggregator_state)
  return 'tff_dp' if found is TFF_DP_STATE_ACCOUNTING else 'tff_priv'


def relation_of_state(aggregator_state: Any) -> str:
  """The neighbouring relation of the event in a state (inside wrappers)."""
  return accounting_of(aggregator_state).relation


def extract_dp_event(
    aggregator_state: Any, *, allow_initial_state: bool = False
) -> dp_event.DpEvent:
  """The DpEvent of the release that produced `aggregator_state`.

  Every tff_priv aggregation factory keeps, as TFF's
  `DifferentiallyPrivateFactory` does (`DPAggregatorState`), the
  `dp_accounting.DpEvent` of the release its last `next` made in its state:
  two fields, `dp_event` (the event's `to_named_tuple()` form, tensors inside
  the TFF state) and `is_init_state` (True in the state `initialize` returns,
  whose event is a placeholder). `extract_dp_event` reads it back for
  tff_priv's factories and TFF's own. The event covers one round for one unit;
  client sampling is not in it: the caller wraps it in the sampling of the
  round (`PrivacyLedger.record_round`).

  Args:
    aggregator_state: the state returned by `next` of a process created by a
      tff_priv factory (`LDPEncodeFactory`, `GaussianUDPFactory`,
      `SparsifiedSecureSumFactory`, `DistortionFactory`) or by TFF's
      `tff.aggregators.DifferentiallyPrivateFactory` (read with TFF's own
      `extract_dp_event_from_state`). In a `tff.learning` process this is
      `state.aggregator`.
    allow_initial_state: also read `initialize()`'s event, which for these
      factories is the event their first round will release (used to plan a
      round before it runs).

  Returns:
    A `dp_accounting.DpEvent` with plain Python numbers, without client
    sampling. Only the event classes of `events.EVENT_CLASSES` are built.

  Raises:
    ExtractingDpEventFromInitialStateError: the state is `initialize()`'s
      (and `allow_initial_state` is False).
    TypeError: the state carries no DpEvent, or one of an unknown class.
  """
  aggregator_state, extras = wrapped_states.unwrap(aggregator_state)
  if extras:
    event = extract_dp_event(
        aggregator_state, allow_initial_state=allow_initial_state
    )
    return dp_event.ComposedDpEvent([event, *extras])
  try:
    named = _field(aggregator_state, 'dp_event')
    is_init = _field(aggregator_state, 'is_init_state')
  except (AttributeError, KeyError, TypeError) as e:
    raise TypeError(
        'aggregator_state carries no DpEvent (no dp_event / is_init_state '
        'fields): pass the state returned by next() of a tff_priv factory or '
        f"of TFF's DifferentiallyPrivateFactory, got {type(aggregator_state)}"
    ) from e
  if bool(is_init) and not allow_initial_state:
    raise ExtractingDpEventFromInitialStateError(
        'the state comes from initialize(), whose DpEvent is a placeholder; '
        'pass a state returned by next()'
    )
  if _is_tff_dp_class(type(aggregator_state)) and not bool(is_init):
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.aggregators import differential_privacy
    # TFF's own reader, checked against ours (which whitelists the classes).
    theirs = differential_privacy.extract_dp_event_from_state(aggregator_state)
    ours = _from_named_tuple(named)
    if plain_event(theirs) != ours:
      raise TypeError(f'TFF reads {theirs} from this state, tff_priv {ours}')
    return ours
  return _from_named_tuple(named)


def _text(value) -> str:
  return value.decode() if isinstance(value, bytes) else str(value)


def _from_named_tuple(named) -> dp_event.DpEvent:
  """A DpEvent from its `to_named_tuple()` form, whitelisted classes only."""
  name = _text(named.class_name)
  cls = events.EVENT_CLASSES.get(name)
  if cls is None or cls.__module__ != _text(named.module_name):
    raise TypeError(
        f'the state names the event class {_text(named.module_name)}.{name}, '
        'which tff_priv does not read'
    )

  def value(v):
    if hasattr(v, '_fields') and hasattr(v, 'class_name'):
      return _from_named_tuple(v)
    if isinstance(v, (list, tuple)):
      return [value(x) for x in v]
    return plain_event(v)

  return cls(
      **{f.name: value(getattr(named, f.name)) for f in attr.fields(cls)}
  )


def plain_event(value):
  """`value` with numpy scalars as Python numbers (JSON-ready, comparable)."""
  if isinstance(value, dp_event.DpEvent):
    return type(value)(
        **{
            f.name: plain_event(getattr(value, f.name))
            for f in attr.fields(type(value))
        }
    )
  if isinstance(value, (list, tuple)):
    return [plain_event(v) for v in value]
  if isinstance(value, np.integer):
    return int(value)
  if isinstance(value, np.floating):
    return float(value)
  if isinstance(value, np.ndarray) and value.ndim == 0:
    return value.item()
  return value


def sampled_event(
    event: dp_event.DpEvent,
    neighboring_relation: str,
    sampling: Optional[sampling_lib.Sampling] = None,
) -> dp_event.DpEvent:
  """A factory's round event under the round's client sampling.

  Poisson sampling is accounted under add-or-remove-one adjacency, fixed-size
  sampling under replace-one; the event is read in the relation the sampling
  needs: an add-or-remove-one Gaussian sum reads as Gaussian(z / 2) under
  replace-one (replacing a unit moves the sum by twice its clip), and a
  replace-one event has no add-or-remove-one reading (a client's noisy upload
  present or absent is not bounded by its local noise).

  Args:
    event: the factory's event of one round (`extract_dp_event`).
    neighboring_relation: the relation `event` holds under
      (`factory.guarantee.neighboring_relation`).
    sampling: the round's `Sampling` (None: every client takes part).

  Raises:
    ValueError: Poisson sampling of a replace-one event.
  """
  validation.one_of(
      'neighboring_relation', neighboring_relation, accountants.RELATIONS
  )
  sampling = sampling_lib.Sampling.of(sampling)
  if sampling.kind == 'poisson' and sampling.sampling_probability < 1:
    if neighboring_relation == 'replace_one':
      raise ValueError(
          'this event holds under replace-one adjacency (noise on each '
          "client's upload): its amplification needs fixed-size sampling "
          '(population=N, sample_size=K), not Poisson sampling'
      )
  elif sampling.kind == 'fixed' and neighboring_relation == 'add_or_remove_one':
    event = _halve_gaussians(event)
  return events.sampled_event(event, sampling)


def guarantee_of(factory: Any) -> Optional[Guarantee]:
  """The `Guarantee` of a tff_priv factory or of TFF's DP factory, else None."""
  guarantee = getattr(factory, 'guarantee', None)
  if isinstance(guarantee, Guarantee):
    return guarantee
  cls = type(factory)
  if (
      cls.__name__ == 'DifferentiallyPrivateFactory'
      and cls.__module__.startswith('tensorflow_federated')
  ):
    return TFF_DP_FACTORY_GUARANTEE
  return None


def past_plan(state: Any) -> Optional[tuple[int, int]]:
  """(rounds_done, planned_rounds) of a plan in `state` that is exceeded.

  Looks through mappings, named tuples and attrs classes for one that has
  both fields (a calibrated factory's state, or its inner factory's).
  """
  names = ('rounds_done', 'planned_rounds')
  if isinstance(state, dict):
    fields = state if all(n in state for n in names) else None
    children = list(state.values())
  elif hasattr(state, '_asdict'):
    fields = state._asdict() if all(hasattr(state, n) for n in names) else None
    children = list(state)
  elif hasattr(state, '__attrs_attrs__'):
    children = [getattr(state, a.name) for a in state.__attrs_attrs__]
    fields = None
  elif isinstance(state, (list, tuple)):
    fields, children = None, list(state)
  else:
    return None
  if fields is not None:
    done, plan = int(np.asarray(fields[names[0]])), int(
        np.asarray(fields[names[1]])
    )
    if plan > 0 and done > plan:
      return done, plan
  for child in children:
    found = past_plan(child)
    if found is not None:
      return found
  return None
