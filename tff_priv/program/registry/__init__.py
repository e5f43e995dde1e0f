"""The training program's mechanisms by name: one `MechanismConfig` each."""

import dataclasses
import typing
from typing import Any, Mapping, Optional, Union

from tff_priv import validation
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.program.registry import bandmf
from tff_priv.program.registry import base
from tff_priv.program.registry import blt
from tff_priv.program.registry import distortion
from tff_priv.program.registry import dp_fedavg
from tff_priv.program.registry import dp_ftrl
from tff_priv.program.registry import ldp
from tff_priv.program.registry import none
from tff_priv.program.registry import smp
from tff_priv.program.registry import udp

BuildContext = base.BuildContext
Resumed = base.Resumed
Mechanism = base.Mechanism
Loop = base.Loop
count_parameters = base.count_parameters

MechanismConfig = base.MechanismConfig
param = base.param

REGISTRY: dict[str, type[base.MechanismConfig]] = {}
MECHANISMS: tuple[str, ...] = ()
# The mechanisms with a privacy report (the papers' closed forms beside).
REPORTS: tuple[str, ...] = ()


def register(config_class: type[base.MechanismConfig]) -> None:
  """Adds a mechanism (its config class) to the registry (`MECHANISMS`).

  A mechanism of the user's own: `training.run` then runs it like the
  others.

  Raises:
    TypeError: not a frozen dataclass subclass of `MechanismConfig`.
    ValueError: no NAME, or its name is taken.
  """
  global MECHANISMS, REPORTS
  if not (
      isinstance(config_class, type)
      and issubclass(config_class, base.MechanismConfig)
      and dataclasses.is_dataclass(config_class)
      and config_class.__dataclass_params__.frozen
  ):
    raise TypeError(
        'register() takes a frozen dataclass subclass of '
        f'registry.MechanismConfig, got {config_class!r}'
    )
  name = config_class.NAME
  if not name:
    raise ValueError(f'{config_class.__name__} has no NAME')
  if name in REGISTRY:
    raise ValueError(f'mechanism {name!r} is already registered')
  REGISTRY[name] = config_class
  MECHANISMS = tuple(REGISTRY)
  REPORTS = tuple(
      n for n, c in REGISTRY.items() if c.REPORT_PARAMETERS is not None
  )


def unregister(name: str) -> None:
  """Removes mechanism `name` (registered by `register`) from the registry."""
  global MECHANISMS, REPORTS
  definition(name)
  del REGISTRY[name]
  MECHANISMS = tuple(REGISTRY)
  REPORTS = tuple(
      n for n, c in REGISTRY.items() if c.REPORT_PARAMETERS is not None
  )


for _module in (
    none,
    dp_fedavg,
    dp_ftrl,
    blt,
    bandmf,
    ldp,
    udp,
    smp,
    distortion,
):
  register(_module.Config)


def definition(name: str) -> type[base.MechanismConfig]:
  """Mechanism `name`'s config class (ValueError naming the choices)."""
  validation.one_of('mechanism', name, MECHANISMS)
  return REGISTRY[name]


def sampling_kind(name: str, params: Any = None) -> str:
  """The client sampling mechanism `name`'s rounds are accounted under.

  Args:
    name: one of MECHANISMS.
    params: its parameters (see `config`; None: every default), for a
      mechanism whose sampling depends on them (blt's participation).
  """
  if params is None:
    return definition(name).SAMPLING
  return config(name, params).sampling_kind()


def _guarantee(name: str, params: Any):
  # None: the class's (a config of every default may not validate: dp_ftrl
  # and distortion need a noise parameter).
  if params is None:
    return definition(name).GUARANTEE
  return config(name, params).guarantee()


def unit(name: str, params: Any = None) -> Optional[str]:
  """Whom mechanism `name`'s eps protects ('example', 'client'; None: no one).

  Read from its factory's `Guarantee` (with `params`; None: the defaults).
  """
  guarantee = _guarantee(name, params)
  return guarantee.unit if guarantee else None


def noise(name: str, params: Any = None) -> Optional[str]:
  """Who adds mechanism `name`'s noise ('local', 'secure_sum', 'central').

  None: no one.

  Args:
    name: one of MECHANISMS.
    params: its parameters (see `config`; None: every default), for a
      mechanism whose guarantee depends on them (ldp's range mode).
  """
  guarantee = _guarantee(name, params)
  return guarantee.noise if guarantee else None


def parameter_names(name: str) -> tuple[str, ...]:
  """The parameters mechanism `name` takes."""
  return tuple(f.name for f in dataclasses.fields(definition(name)))


def config(name: str, params: Union[None, Mapping[str, Any], Any] = None):
  """Mechanism `name`'s validated `Config` from `params`.

  A parameter that does not apply to the mechanism is refused, so a flag
  never silently does nothing.

  Args:
    name: one of MECHANISMS.
    params: None (every default), a mapping of parameter names to values
      (None values are "not given"), or already a config of `name`.

  Raises:
    ValueError: an unknown mechanism, a parameter that does not apply to it,
      a bad value or conflicting parameters (the message names them).
  """
  config_class = definition(name)
  if isinstance(params, config_class):
    return params
  given = {k: v for k, v in dict(params or {}).items() if v is not None}
  for key in given:
    if key not in parameter_names(name):
      raise ValueError(f'{key} does not apply to mechanism {name!r}')
  return config_class(**given)


def to_dict(mechanism_config: Any) -> dict[str, Any]:
  """The parameters of a config that are set (JSON-ready)."""
  return {
      k: v
      for k, v in dataclasses.asdict(mechanism_config).items()
      if v is not None
  }


def canary_kind(name: str) -> str:
  """What `audit_canaries` inserts for `name`: 'clients' or 'examples'.

  'examples' for a mechanism whose guarantee is record-level
  (`MechanismConfig.CANARY_EXAMPLES`): canary examples in the clients' data
  (`tff_priv.auditing.canary_examples`); else canary clients
  (`tff_priv.auditing.canaries`).
  """
  return 'examples' if definition(name).CANARY_EXAMPLES else 'clients'


def canary_refusal(name: str, params: Any = None) -> Optional[str]:
  """Why mechanism `name` with `params` takes no canaries; None: it does."""
  return config(name, params).canary_refusal()


def client_metrics_refusal(name: str) -> Optional[str]:
  """Why mechanism `name` takes no `client_metrics='dp'`; None: it does.

  The metrics' noise is added by the server. A mechanism private against the
  server (its model noise added by the clients) would lose that guarantee,
  so only the mechanisms whose server adds the model noise too take them.
  """
  if definition(name).DP_CLIENT_METRICS:
    return None
  if name == 'none':
    return (
        "client_metrics='dp' applies to private mechanisms only; 'none' "
        "releases TFF's exact client metrics"
    )
  return (
      f"client_metrics='dp' does not apply to mechanism {name!r}: the server "
      "would add the metrics' noise itself, and this mechanism is private "
      'against the server'
  )


def build(name: str, params: Any, context: base.BuildContext) -> base.Mechanism:
  """Builds mechanism `name` (see `config` for `params`) in `context`.

  The mechanisms registered here, each as name: process; the sampling its
  rounds are accounted under; the event of a round (in the factory's state):

  * none: `tff.learning.algorithms.build_weighted_fed_avg`; poisson; none
    (eps = inf).
  * dp_fedavg: TFF's DP aggregator in `build_unweighted_fed_avg`; poisson;
    Gaussian(z), central noise.
  * dp_ftrl: `aggregators.dp_ftrl.TreeRestartFactory` (TFF's tree, one per
    epoch); epoch; one tree event per epoch, central.
  * blt: `aggregators.blt.BLTFactory` (BLT matrix factorization, one stream
    per epoch); epoch; Gaussian(z / sensitivity) per stream, central.
  * bandmf: `aggregators.bandmf.BandMFFactory` (amplified banded matrix
    factorization); banded; PoissonSampled(q, Gaussian(z)) per cycle of b
    rounds, central.
  * smp: `tff_priv.learning.smp.build_fedsmp_process` (rand_k or top_k);
    poisson; Gaussian(z), client noise shares, secure sum.
  * distortion: `DistortionFactory` in `build_unweighted_fed_avg`; fixed;
    Gaussian(sigma_e / 2C) per upload, local.
  * udp: `tff_priv.learning.udp.build_udp_process` (fixed sigma); fixed;
    Gaussian(sigma / Delta) per upload, local.
  * ldp: `LDPEncodeFactory` (`tff_priv.learning.ldp`); fixed; d x
    PureEpsilon(eps0) + the range release, local.

  Raises:
    ValueError: bad parameters, or a context the mechanism cannot run in
      (sampling of another kind, an optimizer it does not take, ...).
  """
  mechanism_config = config(name, params)
  kind = mechanism_config.sampling_kind()
  if context.sampling.kind != kind:
    raise ValueError(
        f'mechanism {name!r} is accounted under {kind} sampling, got '
        f'{context.sampling.kind}'
    )
  if context.public_data is not None and not getattr(
      mechanism_config, 'public_clients', None
  ):
    # Only a mechanism with public clients (smp's top_k) trains on D_pub.
    raise ValueError("public_data applies only to smp with mask='top_k'")
  if context.canary_clients:
    refusal = canary_refusal(name, mechanism_config)
    if refusal:
      raise ValueError(refusal)
  if context.metrics_aggregator is not None:
    refusal = client_metrics_refusal(name)
    if refusal:
      raise ValueError(refusal)
  built = mechanism_config.make(context)
  declared = mechanism_config.guarantee()
  for field in ('unit', 'noise', 'neighboring_relation'):
    got = getattr(built.guarantee, field) if built.guarantee else None
    want = getattr(declared, field) if declared else None
    if got != want:
      raise ValueError(
          f'mechanism {name!r} built a guarantee of {field} {got!r}, its '
          f'definition says {want!r}'
      )
  if context.canary_clients and built.loop.canary_norm is None:
    raise ValueError(f'mechanism {name!r} did not build its canary clients')
  return built


def _report(name: str) -> type[base.MechanismConfig]:
  mechanism = definition(name)
  if mechanism.REPORT_PARAMETERS is None:
    raise ValueError(
        f'mechanism {name!r} has no privacy report; one of '
        f'{", ".join(REPORTS)}'
    )
  return mechanism


def report_fields(name: str) -> tuple[tuple[type, str], ...]:
  """(dataclass, field name) of every parameter mechanism `name`'s report reads.

  Its config fields in `REPORT_PARAMETERS`, then the fields of its
  `REPORT_INPUTS` (what a run resolves from its task), if it has one.
  """
  mechanism = _report(name)
  fields = [(mechanism, k) for k in mechanism.REPORT_PARAMETERS]
  inputs = mechanism.REPORT_INPUTS
  if inputs is not None:
    fields += [(inputs, f.name) for f in dataclasses.fields(inputs)]
  return tuple(fields)


def _kind(cls, field: str) -> type:
  annotation = typing.get_type_hints(cls)[field]
  args = [a for a in typing.get_args(annotation) if a is not type(None)]
  return args[0] if args else annotation


def report_parameters() -> dict[str, tuple[type, str]]:
  """{parameter: (its type, what it means)} over every mechanism's report.

  What `scripts/privacy.py` takes as flags. A parameter several mechanisms
  read is one entry; its text says what it means to each
  (`'smp, dp_fedavg: ...; udp: ...'`, from the docstrings of their config or
  report inputs).
  """
  kinds, meanings = {}, {}
  for name in REPORTS:
    for cls, field in report_fields(name):
      kinds[field] = _kind(cls, field)
      meanings.setdefault(field, {}).setdefault(
          base.parameter_help(cls).get(field, ''), []
      ).append(name)
  return {
      field: (
          kinds[field],
          '; '.join(
              f'{", ".join(names)}: {meaning.rstrip(".")}'
              for meaning, names in by_meaning.items()
          ),
      )
      for field, by_meaning in meanings.items()
  }


def privacy_report(
    name: str,
    *,
    rounds: int,
    sampling: Optional[sampling_lib.Sampling] = None,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
    **params,
) -> dict:
  """What a run of mechanism `name` spends, or its noise for a target eps.

  For the mechanisms with a report (`REPORTS`). Every accountant that can
  count the mechanism, with the paper's closed form beside where the paper
  has one (JSON-ready; keys name their source: `rdp_epsilon`, `pld_epsilon`,
  `paper_*`; 'guarantee' says in words which number is a guarantee).

  Args:
    name: one of REPORTS.
    rounds: T >= 1.
    sampling: the rounds' client `Sampling` (instead of the three below).
    sampling_probability: Poisson client sampling rate q.
    population: fixed-size sampling: clients sampled from.
    sample_size: fixed-size sampling: clients per round.
    **params: the parameters of its report by name (`report_parameters()`;
      None: not given); `delta` defaults to `base.DEFAULT_DELTA`. A
      parameter only other mechanisms' reports read is ignored.

  Raises:
    ValueError: an unknown mechanism or one without a report, a bad value,
      or a missing one (the message names it).
    TypeError: a parameter no mechanism's report reads.
  """
  report = _report(name)
  known = report_parameters()
  for key in params:
    if key not in known:
      raise TypeError(f'privacy_report() got an unexpected parameter {key!r}')
  read = {field for _, field in report_fields(name)}
  given = {k: v for k, v in params.items() if v is not None and k in read}
  given['delta'] = validation.open_unit(
      'delta', given.get('delta', base.DEFAULT_DELTA)
  )
  rounds = validation.int_at_least('rounds', rounds, 1)
  sampling = sampling_lib.Sampling.of(
      sampling,
      sampling_probability=sampling_probability,
      population=population,
      sample_size=sample_size,
  )
  return report.report(given, rounds, sampling)
