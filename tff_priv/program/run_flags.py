"""absl flags for `RunConfig` and each mechanism's parameters, from dataclasses.

`define_flags()` defines one flag per `RunConfig` field (task options and
mechanism parameters flattened) with the field's default and its docstring
description as help; `run_config()` reads them back. A
mechanism parameter's flag defaults to None ("not given"), so the mechanism's
own default applies and a parameter it does not take is refused by
`registry.config`, naming it.
"""

import dataclasses
import typing
from typing import Any

from absl import flags

from tff_priv.program import config as config_lib
from tff_priv.program import registry
from tff_priv.program import training
from tff_priv.program.registry import base
import tff_priv_tasks as tasks

# Fields that are not flags: filled from the flags of their parts.
_COMPOSITE = ('task_options', 'params')
_CHOICES = {
    'task': tasks.TASK_NAMES,
    'mechanism': registry.MECHANISMS,
    'client_optimizer': tuple(training.OPTIMIZERS),
    'server_optimizer': tuple(training.OPTIMIZERS),
    'client_metrics': training.CLIENT_METRICS,
    'evaluation_split': config_lib.EVALUATION_SPLITS,
}


def _kind(annotation) -> type:
  args = [a for a in typing.get_args(annotation) if a is not type(None)]
  return args[0] if args else annotation


def _define(name: str, kind: type, default: Any, help_text: str) -> None:
  if name in flags.FLAGS:
    return  # Several mechanisms share a parameter: one flag.
  if name in _CHOICES:
    flags.DEFINE_enum(name, default, list(_CHOICES[name]), help_text)
  elif kind is bool:
    flags.DEFINE_bool(name, default, help_text)
  elif kind is int:
    flags.DEFINE_integer(name, default, help_text)
  elif kind is float:
    flags.DEFINE_float(name, default, help_text)
  else:
    flags.DEFINE_string(name, default, help_text)


def define_flags() -> None:
  """Defines the flags of `RunConfig` and of every mechanism's parameters."""
  hints = typing.get_type_hints(training.RunConfig)
  helps = base.attribute_help(training.RunConfig)
  for field in dataclasses.fields(training.RunConfig):
    if field.name in _COMPOSITE:
      continue
    _define(
        field.name,
        _kind(hints[field.name]),
        field.default,
        helps.get(field.name, ''),
    )
  for option in training.TASK_OPTION_NAMES:
    kind = (
        str
        if option in ('model', 'partition')
        else (float if option == 'test_fraction' else int)
    )
    _define(
        option, kind, None, f'Task option {option} (task default if unset).'
    )
  # One flag per parameter name; its help says what it means to each
  # mechanism that takes it.
  kinds, helps = {}, {}
  for name in registry.MECHANISMS:
    config_class = registry.definition(name)
    hints = typing.get_type_hints(config_class)
    described = base.parameter_help(config_class)
    for field in dataclasses.fields(config_class):
      kinds[field.name] = _kind(hints[field.name])
      helps.setdefault(field.name, {}).setdefault(
          described.get(field.name, ''), []
      ).append(name)
  for parameter, meanings in helps.items():
    text = '; '.join(
        f'{", ".join(names)}: {meaning.rstrip(".")}'
        for meaning, names in meanings.items()
    )
    _define(parameter, kinds[parameter], None, text)


def run_config() -> training.RunConfig:
  """The `RunConfig` the flags give (not yet validated)."""
  values = flags.FLAGS.flag_values_dict()
  fields = {
      f.name: values[f.name]
      for f in dataclasses.fields(training.RunConfig)
      if f.name not in _COMPOSITE
  }
  return training.RunConfig(
      task_options={k: values[k] for k in training.TASK_OPTION_NAMES},
      params={
          k: values[k] for k in registry.parameter_names(values['mechanism'])
      }
      | {
          # Given for another mechanism: refused by registry.config.
          k: values[k]
          for name in registry.MECHANISMS
          for k in registry.parameter_names(name)
          if flags.FLAGS[k].present
      },
      **fields,
  )


def define_dataclass_flags(cls, defaults, prefix: str = '', skip=()) -> None:
  """One flag `<prefix><field>` per field of dataclass `cls` but `skip`.

  Each defaults to that field of the instance `defaults`, with its
  description in `cls`'s docstring Attributes as help; a tuple field is a
  list flag (`dataclass_values` parses its items).
  """
  hints = typing.get_type_hints(cls)
  helps = base.attribute_help(cls)
  for field in dataclasses.fields(cls):
    if field.name in skip:
      continue
    name, value = prefix + field.name, getattr(defaults, field.name)
    if typing.get_origin(hints[field.name]) is tuple:
      flags.DEFINE_list(name, [str(v) for v in value], helps.get(field.name))
    else:
      _define(name, _kind(hints[field.name]), value, helps.get(field.name, ''))


def dataclass_values(cls, prefix: str = '', skip=()) -> dict[str, Any]:
  """{field: value} read back from the flags of `define_dataclass_flags`.

  Raises:
    ValueError: an item of a list flag is not of its field's type (the
      message names the flag).
  """
  hints = typing.get_type_hints(cls)
  values = {}
  for field in dataclasses.fields(cls):
    if field.name in skip:
      continue
    value = flags.FLAGS[prefix + field.name].value
    if typing.get_origin(hints[field.name]) is tuple:
      item = typing.get_args(hints[field.name])[0]
      try:
        value = tuple(item(v) for v in value)
      except ValueError:
        raise ValueError(
            f'--{prefix}{field.name} must be a list of {item.__name__}, got '
            f'{",".join(value)}'
        ) from None
    values[field.name] = value
  return values
