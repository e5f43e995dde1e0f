"""Each tff_priv factory (and TFF's DP-FedAvg) passes the audit at its claim."""

from absl.testing import absltest
import pytest

from tff_priv.auditing import catalogue

pytestmark = pytest.mark.statistical

_ALPHA = 1e-7


class CatalogueTest(absltest.TestCase):
  """Each audit could fail; an honest row fails with probability <= 1e-7.

  z = 3 (one round: eps ~ 1.3 at delta 1e-5) and LDP-FL at eps0 = 1 on one value
  keep every claim below the largest bound the evaluation trials can show at
  alpha = 1e-7 (1.7), so each audit could fail: a factory with half its claimed
  noise (eps ~ 2.9) could show up to that. The factories' noise comes from the
  operating system (it is not seeded), so each honest row fails with probability
  <= alpha = 1e-7: at most 8e-7 for the eight rows of a run.
  """

  def test_every_factory_passes_at_its_own_claim(self):
    settings = catalogue.quickstart_settings(
        20, noise_multiplier=3.0, ldp_epsilon=1.0
    )
    settings = [
        s
        for s in settings
        if not (s.mechanism.startswith('ldp') and s.dimension != 1)
    ]
    rows = catalogue.audit_table(settings, trials=200, seed=0, alpha=_ALPHA)
    self.assertLen(rows, 8)
    for setting, result in rows:
      with self.subTest(setting.mechanism):
        self.assertEqual(result.alpha, _ALPHA)
        self.assertLess(result.claimed_epsilon, result.max_epsilon_lower_bound)
        result.raise_if_failed()
    table = catalogue.format_table(rows)
    self.assertIn('| ldp (LDPEncodeFactory) | eps0=1, r=0.01, d=1', table)
    self.assertIn('| blt (BLTFactory) |', table)
    self.assertIn('| bandmf (BandMFFactory) |', table)
    self.assertIn('| dp_fedavg adaptive (TFF gaussian_adaptive) |', table)
    self.assertLen(catalogue.format_table(rows, 'json').split('"verdict"'), 9)


if __name__ == '__main__':
  absltest.main()
