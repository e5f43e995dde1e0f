"""The training program's mechanisms: one module each, looked up by name.

| name | process | sampling | event of a round (in the factory's state) |
|---|---|---|---|
| none | `tff.learning.algorithms.build_weighted_fed_avg` | poisson | none (eps = inf) |
| dp_fedavg | TFF's DP aggregator in `build_unweighted_fed_avg` | poisson | Gaussian(z), central noise |
| dp_ftrl | `aggregators.dp_ftrl.TreeRestartFactory` (TFF's tree, one per epoch) | epoch | one tree event per epoch, central |
| blt | `aggregators.blt.BLTFactory` (BLT matrix factorization, one stream per epoch) | epoch | Gaussian(z / sensitivity) per stream, central |
| bandmf | `aggregators.bandmf.BandMFFactory` (amplified banded matrix factorization) | banded | PoissonSampled(q, Gaussian(z)) per cycle of b rounds, central |
| smp | `tff_priv.learning.fedsmp.build_fedsmp_process` (rand_k or top_k) | poisson | Gaussian(z), client noise shares, secure sum |
| distortion | `DistortionFactory` in `build_unweighted_fed_avg` | fixed | Gaussian(sigma_e / 2C) per upload, local |
| udp | `tff_priv.learning.crd.build_udp_process` (fixed sigma) | fixed | Gaussian(sigma / Delta) per upload, local |
| ldp | `LDPEncodeFactory` (`tff_priv.learning.ldp_fl`) | fixed | d x PureEpsilon(eps0) + the range release, local |

Each module has `NAME`, `SAMPLING`, `UNIT` (whom its eps protects, as its
factory's `Guarantee.unit` says; None: not private), `NOISE` (who adds the
noise, as its factory's `Guarantee.noise` says: 'local', 'secure_sum' or
'central'; None: not private; a module whose noise depends on its config has
`noise(config)` too), a frozen `Config` (its
parameters, their defaults, `validate()`) and `build(config, context) ->
base.Mechanism`. `config(name, params)` makes a mechanism's config from a
dict, refusing a parameter that does not apply to it (so a flag never
silently does nothing); `build(name, config, context)` builds it. A module
whose paper has closed forms to print beside the accountants (the
mechanisms of `REPORTS`) has `privacy_report(params, rounds, **sampling)`,
`REPORT_PARAMETERS` (the `Config` fields it reads) and, for what a run
resolves from its task, a `ReportInputs` dataclass: `privacy_report(name,
...)` and `report_parameters()` (what `scripts/privacy.py` takes as flags). A module whose mechanism cannot host
the canary clients of `RunConfig.audit_canaries` has `canary_refusal(config)`
(the reason in one line, or None). A module whose process may release
noised client metrics (`RunConfig.client_metrics='dp'`, the metrics noised by
the server like its model) has `DP_CLIENT_METRICS = True`.
"""

import dataclasses
import typing
from typing import Any, Mapping, Optional, Union

from tff_priv import validation
from tff_priv.program.mechanisms import bandmf
from tff_priv.program.mechanisms import base
from tff_priv.program.mechanisms import blt
from tff_priv.program.mechanisms import distortion
from tff_priv.program.mechanisms import dp_fedavg
from tff_priv.program.mechanisms import dp_ftrl
from tff_priv.program.mechanisms import ldp
from tff_priv.program.mechanisms import none
from tff_priv.program.mechanisms import smp
from tff_priv.program.mechanisms import udp

BuildContext = base.BuildContext
Mechanism = base.Mechanism
count_parameters = base.count_parameters

REGISTRY = {
    module.NAME: module
    for module in (none, dp_fedavg, dp_ftrl, blt, bandmf, ldp, udp, smp,
                   distortion)
}
MECHANISMS = tuple(REGISTRY)
# The mechanisms with a privacy report (the papers' closed forms beside).
REPORTS = tuple(
    name for name, module_ in REGISTRY.items()
    if hasattr(module_, 'privacy_report')
)


def module(name: str):
  """The module of mechanism `name` (ValueError naming the choices)."""
  validation.one_of('mechanism', name, MECHANISMS)
  return REGISTRY[name]


def sampling_kind(name: str, params: Any = None) -> str:
  """The client sampling mechanism `name`'s rounds are accounted under.

  Args:
    name: one of MECHANISMS.
    params: its parameters (see `config`; None: every default), for a module
      whose sampling depends on them (its `sampling(config)`: blt's
      participation).
  """
  mechanism_module = module(name)
  of_config = getattr(mechanism_module, 'sampling', None)
  if of_config is None:
    return mechanism_module.SAMPLING
  return of_config(config(name, params))


def unit(name: str) -> Optional[str]:
  """Whom mechanism `name`'s eps protects ('example', 'client'; None: no one)."""
  return module(name).UNIT


def noise(name: str, params: Any = None) -> Optional[str]:
  """Who adds mechanism `name`'s noise ('local', 'secure_sum', 'central'; None: no one).

  Args:
    name: one of MECHANISMS.
    params: its parameters (see `config`; None: every default), for a module
      whose noise depends on them (its `noise(config)`).
  """
  mechanism_module = module(name)
  of_config = getattr(mechanism_module, 'noise', None)
  if of_config is None:
    return mechanism_module.NOISE
  return of_config(config(name, params))


def parameter_names(name: str) -> tuple[str, ...]:
  """The parameters mechanism `name` takes."""
  return tuple(f.name for f in dataclasses.fields(module(name).Config))


def config(name: str, params: Union[None, Mapping[str, Any], Any] = None):
  """Mechanism `name`'s validated `Config` from `params`.

  Args:
    name: one of MECHANISMS.
    params: None (every default), a mapping of parameter names to values
      (None values are "not given"), or already a config of `name`.

  Raises:
    ValueError: an unknown mechanism, a parameter that does not apply to it,
      a bad value or conflicting parameters (the message names them).
  """
  config_class = module(name).Config
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
      k: v for k, v in dataclasses.asdict(mechanism_config).items()
      if v is not None
  }


def canary_kind(name: str) -> str:
  """What `audit_canaries` inserts for mechanism `name`: 'clients' or 'examples'.

  'examples' for a mechanism whose guarantee is record-level (its module
  sets CANARY_EXAMPLES): canary examples in the clients' data
  (`tff_priv.auditing.canary_examples`); else canary clients
  (`tff_priv.auditing.canaries`).
  """
  return 'examples' if getattr(module(name), 'CANARY_EXAMPLES', False) else 'clients'


def canary_refusal(name: str, params: Any = None) -> Optional[str]:
  """Why mechanism `name` with `params` takes no canaries; None: it does."""
  refusal = getattr(module(name), 'canary_refusal', None)
  return refusal(config(name, params)) if refusal else None


def client_metrics_refusal(name: str) -> Optional[str]:
  """Why mechanism `name` takes no `client_metrics='dp'`; None: it does.

  The metrics' noise is added by the server. A mechanism private against the
  server (its model noise added by the clients) would lose that guarantee,
  so only the mechanisms whose server adds the model noise too take them.
  """
  if getattr(module(name), 'DP_CLIENT_METRICS', False):
    return None
  if name == 'none':
    return (
        "client_metrics='dp' applies to private mechanisms only; 'none' "
        "releases TFF's exact client metrics"
    )
  return (
      f"client_metrics='dp' does not apply to mechanism {name!r}: the server "
      'would add the metrics\' noise itself, and this mechanism is private '
      'against the server'
  )


def build(
    name: str, params: Any, context: base.BuildContext
) -> base.Mechanism:
  """Builds mechanism `name` (see `config` for `params`) in `context`.

  Raises:
    ValueError: bad parameters, or a context the mechanism cannot run in
      (sampling of another kind, an optimizer it does not take, ...).
  """
  mechanism_module = module(name)
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
  mechanism = mechanism_module.build(mechanism_config, context)
  built_unit = mechanism.guarantee.unit if mechanism.guarantee else None
  if built_unit != mechanism_module.UNIT:
    raise ValueError(
        f'mechanism {name!r} built a guarantee of unit {built_unit!r}, its '
        f'module says UNIT = {mechanism_module.UNIT!r}'
    )
  built_noise = mechanism.guarantee.noise if mechanism.guarantee else None
  declared_noise = noise(name, mechanism_config)
  if built_noise != declared_noise:
    raise ValueError(
        f'mechanism {name!r} built a guarantee of noise {built_noise!r}, its '
        f'module says noise {declared_noise!r}'
    )
  if context.canary_clients and mechanism.canary_norm is None:
    raise ValueError(f'mechanism {name!r} did not build its canary clients')
  return mechanism


def _report_module(name: str):
  mechanism_module = module(name)
  if name not in REPORTS:
    raise ValueError(
        f'mechanism {name!r} has no privacy report; one of '
        f'{", ".join(REPORTS)}'
    )
  return mechanism_module


def report_fields(name: str) -> tuple[tuple[type, str], ...]:
  """(dataclass, field name) of every parameter mechanism `name`'s report reads.

  Its `Config` fields in `REPORT_PARAMETERS`, then the fields of its
  `ReportInputs` (what a run resolves from its task), if it has one.
  """
  mechanism_module = _report_module(name)
  fields = [(mechanism_module.Config, k)
            for k in mechanism_module.REPORT_PARAMETERS]
  inputs = getattr(mechanism_module, 'ReportInputs', None)
  if inputs is not None:
    fields += [(inputs, f.name) for f in dataclasses.fields(inputs)]
  return tuple(fields)


def _kind(cls, field: str) -> type:
  annotation = typing.get_type_hints(cls)[field]
  args = [a for a in typing.get_args(annotation) if a is not type(None)]
  return args[0] if args else annotation


def report_parameters() -> dict[str, tuple[type, str]]:
  """{parameter: (its type, what it means)} over every mechanism's report.

  A parameter several mechanisms read is one entry; its text says what it
  means to each (`'smp, dp_fedavg: ...; udp: ...'`, from the docstrings of
  their `Config` or `ReportInputs`).
  """
  kinds, meanings = {}, {}
  for name in REPORTS:
    for cls, field in report_fields(name):
      kinds[field] = _kind(cls, field)
      meanings.setdefault(field, {}).setdefault(
          base.attribute_help(cls).get(field, ''), []
      ).append(name)
  return {
      field: (kinds[field], '; '.join(
          f'{", ".join(names)}: {meaning.rstrip(".")}'
          for meaning, names in by_meaning.items()
      ))
      for field, by_meaning in meanings.items()
  }


def privacy_report(
    name: str,
    *,
    rounds: int,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
    **params,
) -> dict:
  """What a run of mechanism `name` spends, or its noise for a target eps.

  Every accountant that can count the mechanism, with the paper's closed
  form beside where the paper has one (JSON-ready; keys name their source:
  `rdp_epsilon`, `pld_epsilon`, `paper_*`; 'guarantee' says in words which
  number is a guarantee).

  Args:
    name: one of REPORTS.
    rounds: T >= 1.
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
  mechanism_module = _report_module(name)
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
  sampling = {
      k: v for k, v in (
          ('sampling_probability', sampling_probability),
          ('population', population),
          ('sample_size', sample_size),
      ) if v is not None
  }
  return mechanism_module.privacy_report(given, rounds, **sampling)
