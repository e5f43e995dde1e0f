"""The training program's mechanism registry: one module per mechanism, by name.

Each module defines one frozen `base.Definition` (`DEFINITION`): its name,
config class, sampling, its factory's `Guarantee` (whence the unit its eps
protects and who adds the noise), `build` and its optional abilities (a
privacy report, a canary refusal, record-level canaries, noised client
metrics). The registry reads nothing else from a module; `build` lists the
mechanisms registered here.
"""

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
Mechanism = base.Mechanism
count_parameters = base.count_parameters

Definition = base.Definition
Report = base.Report

REGISTRY: dict[str, base.Definition] = {}
MECHANISMS: tuple[str, ...] = ()
# The mechanisms with a privacy report (the papers' closed forms beside).
REPORTS: tuple[str, ...] = ()


def register(definition: base.Definition) -> None:
  """Adds a mechanism to the registry (`MECHANISMS`, `REPORTS`).

  A mechanism of the user's own: `training.run` then runs it like the
  others.

  Raises:
    TypeError: not a `Definition`.
    ValueError: its name is taken.
  """
  global MECHANISMS, REPORTS
  if not isinstance(definition, base.Definition):
    raise TypeError(
        f'register() takes a registry.Definition, got {definition!r}'
    )
  if definition.name in REGISTRY:
    raise ValueError(f'mechanism {definition.name!r} is already registered')
  REGISTRY[definition.name] = definition
  MECHANISMS = tuple(REGISTRY)
  REPORTS = tuple(n for n, d in REGISTRY.items() if d.report is not None)


def unregister(name: str) -> None:
  """Removes mechanism `name` (registered by `register`) from the registry."""
  global MECHANISMS, REPORTS
  definition(name)
  del REGISTRY[name]
  MECHANISMS = tuple(REGISTRY)
  REPORTS = tuple(n for n, d in REGISTRY.items() if d.report is not None)


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
  register(_module.DEFINITION)


def definition(name: str) -> base.Definition:
  """The definition of mechanism `name` (ValueError naming the choices)."""
  validation.one_of('mechanism', name, MECHANISMS)
  return REGISTRY[name]


def sampling_kind(name: str, params: Any = None) -> str:
  """The client sampling mechanism `name`'s rounds are accounted under.

  Args:
    name: one of MECHANISMS.
    params: its parameters (see `config`; None: every default), for a
      mechanism whose sampling depends on them (blt's participation).
  """
  mechanism = definition(name)
  if not callable(mechanism.sampling):
    return mechanism.sampling
  return mechanism.sampling_of(config(name, params))


def _guarantee(name: str, params: Any):
  mechanism = definition(name)
  if not callable(mechanism.guarantee):
    return mechanism.guarantee
  return mechanism.guarantee_of(
      None if params is None else config(name, params)
  )


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
  return tuple(f.name for f in dataclasses.fields(definition(name).config))


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
  config_class = definition(name).config
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
  (`Definition.canary_examples`): canary examples in the clients' data
  (`tff_priv.auditing.canary_examples`); else canary clients
  (`tff_priv.auditing.canaries`).
  """
  return 'examples' if definition(name).canary_examples else 'clients'


def canary_refusal(name: str, params: Any = None) -> Optional[str]:
  """Why mechanism `name` with `params` takes no canaries; None: it does."""
  refusal = definition(name).canary_refusal
  return refusal(config(name, params)) if refusal else None


def client_metrics_refusal(name: str) -> Optional[str]:
  """Why mechanism `name` takes no `client_metrics='dp'`; None: it does.

  The metrics' noise is added by the server. A mechanism private against the
  server (its model noise added by the clients) would lose that guarantee,
  so only the mechanisms whose server adds the model noise too take them.
  """
  if definition(name).dp_client_metrics:
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
  mechanism = definition(name)
  mechanism_config = config(name, params)
  kind = sampling_kind(name, mechanism_config)
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
  built = mechanism.build(mechanism_config, context)
  declared = mechanism.guarantee_of(mechanism_config)
  for field in ('unit', 'noise', 'neighboring_relation'):
    got = getattr(built.guarantee, field) if built.guarantee else None
    want = getattr(declared, field) if declared else None
    if got != want:
      raise ValueError(
          f'mechanism {name!r} built a guarantee of {field} {got!r}, its '
          f'definition says {want!r}'
      )
  if context.canary_clients and built.canary_norm is None:
    raise ValueError(f'mechanism {name!r} did not build its canary clients')
  return built


def _report(name: str) -> base.Report:
  mechanism = definition(name)
  if mechanism.report is None:
    raise ValueError(
        f'mechanism {name!r} has no privacy report; one of '
        f'{", ".join(REPORTS)}'
    )
  return mechanism.report


def report_fields(name: str) -> tuple[tuple[type, str], ...]:
  """(dataclass, field name) of every parameter mechanism `name`'s report reads.

  Its config fields in `Report.parameters`, then the fields of its
  `Report.inputs` (what a run resolves from its task), if it has one.
  """
  report = _report(name)
  fields = [(definition(name).config, k) for k in report.parameters]
  inputs = report.inputs
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
          base.attribute_help(cls).get(field, ''), []
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
  return report.compute(given, rounds, sampling)
