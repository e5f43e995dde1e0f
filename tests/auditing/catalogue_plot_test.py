"""The audit table's figure: one line per row, every value on the axis."""

from absl.testing import absltest
import matplotlib

matplotlib.use('Agg')

from tff_priv.auditing import catalogue  # pylint: disable=g-import-not-at-top


def _row(mechanism, claim, bound, showable, mu_eps=None, verdict='pass'):
  return {
      'mechanism': mechanism,
      'setting': 's',
      'accounted_epsilon': claim,
      'empirical_lower_bound': bound,
      'max_showable': showable,
      'mu_epsilon_lower_bound': mu_eps,
      'claimed_mu': 1.0 if mu_eps is not None else None,
      'verdict': verdict,
  }


class FigureTest(absltest.TestCase):

  def test_rows_of_one_claim_do_not_overlap_and_all_values_show(self):
    rows = [
        _row('dp_fedavg', 6.29, 3.25, 9.17, 6.12),
        _row('udp', 6.29, 3.33, 9.17, 6.07),
        _row('ldp', 1000.0, 9.17, 9.17),
        _row('one run', 1.0, 0.0, 3.8),  # A bound of 0: at the left edge.
        _row('broken', 1.0, 2.0, 4.0, verdict='FAIL'),
    ]
    fig = catalogue.figure(rows)
    ax = fig.axes[0]
    self.assertLen(ax.get_yticks(), 5)  # One line per row.
    low, high = ax.get_xlim()
    self.assertAlmostEqual(low, 0.5)  # Half the smallest positive value.
    self.assertAlmostEqual(high, 2000.0)  # Twice the largest.
    self.assertEqual(
        [t.get_text() for t in ax.get_legend().get_texts()],
        [
            'claimed eps',
            '(eps, delta) lower bound',
            'eps of the mu lower bound (Gaussian claims)',
            'up to the largest showable eps',
        ],
    )


if __name__ == '__main__':
  absltest.main()
