"""Tests for accounting.sampling: one value for a round's client sampling."""

import dataclasses

from absl.testing import absltest
import dp_accounting

from tff_priv.accounting import events
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import sampling as sampling_lib

Sampling = sampling_lib.Sampling


class SamplingTest(absltest.TestCase):

  def test_rate(self):
    self.assertEqual(Sampling.poisson(0.2).rate, 0.2)
    self.assertEqual(Sampling.fixed(50, 5).rate, 0.1)
    self.assertEqual(Sampling.none().rate, 1.0)

  def test_kinds_kwargs_and_description(self):
    self.assertEqual(Sampling.poisson(0.2).kind, 'poisson')
    self.assertEqual(Sampling.fixed(50, 5).kind, 'fixed')
    self.assertEqual(Sampling.none().kind, 'none')
    self.assertEqual(
        Sampling.poisson(0.2).kwargs(), {'sampling_probability': 0.2}
    )
    self.assertEqual(
        Sampling.fixed(50, 5).kwargs(), {'population': 50, 'sample_size': 5}
    )
    self.assertEqual(Sampling.none().kwargs(), {})
    self.assertEqual(
        Sampling.fixed(50, 5).describe(),
        {'kind': 'fixed', 'rate': 0.1, 'population': 50, 'sample_size': 5},
    )
    self.assertEqual(
        Sampling.of(**Sampling.fixed(50, 5).kwargs()), Sampling.fixed(50, 5)
    )

  def test_frozen(self):
    with self.assertRaises(dataclasses.FrozenInstanceError):
      Sampling.poisson(0.1).sampling_probability = 0.2

  def test_bad_values(self):
    cases = [
        (dict(sampling_probability=0.0), 'sampling_probability'),
        (dict(sampling_probability=1.5), 'sampling_probability'),
        (dict(population=10), 'both population and sample_size'),
        (dict(population=5, sample_size=6), 'sample_size'),
        (dict(population=0, sample_size=1), 'population'),
        (
            dict(sampling_probability=0.1, population=10, sample_size=2),
            'not both',
        ),
    ]
    for kwargs, message in cases:
      with self.assertRaisesRegex(ValueError, message):
        Sampling(**kwargs)
    with self.assertRaisesRegex(ValueError, 'not both'):
      Sampling.of(Sampling.none(), sampling_probability=0.1)

  def test_events_take_it(self):
    gaussian = dp_accounting.GaussianDpEvent(1.0)
    self.assertEqual(
        events.sampled_gaussian_event(1.0, sampling=Sampling.fixed(10, 3)),
        dp_accounting.SampledWithoutReplacementDpEvent(10, 3, gaussian),
    )
    # The public entry points take the triple too, as the same Sampling.
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(1.0, population=10, sample_size=3)
    ledger.record_gaussian(1.0, sampling=Sampling.fixed(10, 3))
    ((event, count),) = ledger.entries  # One event, recorded twice.
    self.assertEqual(
        (event, count),
        (dp_accounting.SampledWithoutReplacementDpEvent(10, 3, gaussian), 2),
    )
    with self.assertRaisesRegex(TypeError, 'Sampling'):
      events.sampled_gaussian_event(1.0, sampling={'population': 10})
    self.assertEqual(
        events.sampled_gaussian_event(1.0, sampling=Sampling.poisson(0.1)),
        dp_accounting.PoissonSampledDpEvent(0.1, gaussian),
    )
    # Every client every round: the bare event.
    for every in (Sampling.none(), Sampling.poisson(1.0), Sampling.fixed(4, 4)):
      self.assertEqual(
          events.sampled_gaussian_event(1.0, sampling=every), gaussian
      )


if __name__ == '__main__':
  absltest.main()
