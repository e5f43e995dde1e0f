"""Argument checks shared by tff_priv's public functions and factories.

Each check raises `ValueError` (or `TypeError` for a non-number) whose message
names the argument, so a caller learns which of several arguments was wrong.
"""

import math
import numbers


def _number(name: str, value) -> float:
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise TypeError(f'{name} must be a real number, got {value!r}')
  value = float(value)
  if math.isnan(value):
    raise ValueError(f'{name} must not be NaN')
  return value


def required(name: str, value):
  """`value`, if it is not None."""
  if value is None:
    raise ValueError(f'{name} is required')
  return value


def positive(name: str, value) -> float:
  """`value` as a float, if finite and > 0."""
  value = _number(name, value)
  if not 0 < value < math.inf:
    raise ValueError(f'{name} must be finite and > 0, got {value}')
  return value


def non_negative(name: str, value) -> float:
  """`value` as a float, if finite and >= 0."""
  value = _number(name, value)
  if not 0 <= value < math.inf:
    raise ValueError(f'{name} must be finite and >= 0, got {value}')
  return value


def open_unit(name: str, value) -> float:
  """`value` as a float, if in the open interval (0, 1) (a delta)."""
  value = _number(name, value)
  if not 0 < value < 1:
    raise ValueError(f'{name} must be in (0, 1), got {value}')
  return value


def half_open_unit(name: str, value) -> float:
  """`value` as a float, if in (0, 1] (a sampling rate, a compression ratio)."""
  value = _number(name, value)
  if not 0 < value <= 1:
    raise ValueError(f'{name} must be in (0, 1], got {value}')
  return value


def int_at_least(name: str, value, minimum: int) -> int:
  """`value` as an int, if it is an integer >= `minimum`."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise TypeError(f'{name} must be an integer, got {value!r}')
  if value < minimum:
    raise ValueError(f'{name} must be >= {minimum}, got {value}')
  return int(value)


def one_of(name: str, value, choices):
  """`value`, if it is one of `choices`."""
  if value not in choices:
    raise ValueError(f'{name} must be one of {tuple(choices)}, got {value!r}')
  return value


def population_and_k(
    population: int, clients_per_round: int
) -> tuple[int, int]:
  """(N, K): ints with 1 <= K <= N, or ValueError naming them."""
  population = int_at_least('population', population, 1)
  k = int_at_least('clients_per_round', clients_per_round, 1)
  if k > population:
    raise ValueError(f'clients_per_round={k} exceeds population={population}')
  return population, k
