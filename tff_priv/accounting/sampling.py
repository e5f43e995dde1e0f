"""The client sampling a round is accounted under, as one value: `Sampling`."""

import dataclasses
from typing import Optional

from tff_priv import validation

KINDS = ('poisson', 'fixed', 'none')


@dataclasses.dataclass(frozen=True)
class Sampling:
  """How a round's clients were sampled, as the accountants count it.

  At most one description: `sampling_probability` (Poisson sampling with rate
  q: each client joins independently, counted under add-or-remove-one
  adjacency), or `population` and `sample_size` (fixed-size sampling of K of
  N clients without replacement, counted under replace-one adjacency).
  Neither: every client takes part in every round (no amplification). Make
  one with `Sampling.poisson(q)`, `Sampling.fixed(N, K)` or `Sampling.none()`
  (or `Sampling.of(...)` from the keyword triple the ledger takes); the
  fields are checked on construction.

  Attributes:
    sampling_probability: Poisson sampling rate q in (0, 1].
    population: number of clients N sampled from (fixed-size sampling).
    sample_size: number of clients K sampled per round (fixed-size sampling),
      at most N.
  """

  sampling_probability: Optional[float] = None
  population: Optional[int] = None
  sample_size: Optional[int] = None

  def __post_init__(self):
    fixed = self.population is not None or self.sample_size is not None
    if self.sampling_probability is not None and fixed:
      raise ValueError(
          'give either sampling_probability (Poisson sampling) or '
          'population and sample_size (fixed-size sampling), not both'
      )
    if self.sampling_probability is not None:
      object.__setattr__(
          self,
          'sampling_probability',
          validation.half_open_unit(
              'sampling_probability', self.sampling_probability
          ),
      )
    elif fixed:
      if self.population is None or self.sample_size is None:
        raise ValueError(
            'fixed-size sampling needs both population and sample_size'
        )
      population = validation.int_at_least('population', self.population, 1)
      sample_size = validation.int_at_least('sample_size', self.sample_size, 1)
      if sample_size > population:
        raise ValueError(
            f'sample_size ({sample_size}) must be <= population '
            f'({population})'
        )
      object.__setattr__(self, 'population', population)
      object.__setattr__(self, 'sample_size', sample_size)

  @classmethod
  def poisson(cls, sampling_probability: float) -> 'Sampling':
    """Poisson sampling: each client joins a round with probability q."""
    return cls(sampling_probability=sampling_probability)

  @classmethod
  def fixed(cls, population: int, sample_size: int) -> 'Sampling':
    """Fixed-size sampling: `sample_size` of `population` clients a round."""
    return cls(population=population, sample_size=sample_size)

  @classmethod
  def none(cls) -> 'Sampling':
    """No sampling: every client takes part in every round."""
    return cls()

  @classmethod
  def of(
      cls,
      sampling: Optional['Sampling'] = None,
      *,
      sampling_probability: Optional[float] = None,
      population: Optional[int] = None,
      sample_size: Optional[int] = None,
  ) -> 'Sampling':
    """`sampling`, or the `Sampling` of the keyword triple (not both).

    For the functions that take either a `sampling=` value or the keyword
    triple of `PrivacyLedger.record_gaussian`.

    Raises:
      ValueError: both given, or a bad triple (the message names it).
    """
    triple = (sampling_probability, population, sample_size)
    if sampling is None:
      return cls(*triple)
    if not isinstance(sampling, Sampling):
      raise TypeError(f'sampling must be a Sampling, got {sampling!r}')
    if any(v is not None for v in triple):
      raise ValueError(
          'give either sampling or sampling_probability / population / '
          'sample_size, not both'
      )
    return sampling

  @property
  def kind(self) -> str:
    """'poisson', 'fixed' or 'none'."""
    if self.sampling_probability is not None:
      return 'poisson'
    return 'none' if self.population is None else 'fixed'

  @property
  def rate(self) -> float:
    """q: the Poisson rate, K / N of fixed-size sampling, 1 without sampling."""
    if self.sampling_probability is not None:
      return self.sampling_probability
    if self.population is not None:
      return self.sample_size / self.population
    return 1.0

  def kwargs(self) -> dict:
    """The given fields of the triple, as `record_gaussian` takes them."""
    return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

  def describe(self) -> dict:
    """A JSON-ready description: the kind, the rate and the given fields."""
    return {'kind': self.kind, 'rate': self.rate, **self.kwargs()}
