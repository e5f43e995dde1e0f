"""Tests of tff_priv.experiments.ldp: the grid's runs and its table."""

import tensorflow as tf

from tff_priv.experiments import ldp
from tff_priv.program import runs

_SETTING = ldp.Setting(
    task='digits',
    model='mlp',
    clients=4,
    epsilons=(1.0, 10.0),
    runs=2,
    weights_radius=0.2,
    deltas_radius=0.02,
)


def _result(accuracy):
  return runs.RunResult(
      'x', '/nonexistent', {'final_test_accuracy': accuracy}, [], []
  )


class LdpFlTest(tf.test.TestCase):

  def test_configs(self):
    configs = ldp.configs(_SETTING)
    self.assertLen(configs, 2 * (1 + 2 * 2))  # runs x (free + modes x eps)
    weights = configs['weights_eps10_run1'].validate()
    self.assertEqual(weights.mechanism, 'ldp')
    self.assertEqual(
        (
            weights.params.ldp_mode,
            weights.params.ldp_epsilon,
            weights.params.ldp_radius,
        ),
        ('weights', 10.0, 0.2),
    )
    self.assertEqual(weights.sampling_seed, 1)  # Run r samples with seed r.
    deltas = configs['deltas_eps1_run0'].validate()
    self.assertEqual(deltas.params.ldp_radius, 0.02)
    free = configs['noise_free_run0'].validate()
    self.assertEqual(free.mechanism, 'none')
    # Every client every round by default, as in the paper.
    self.assertEqual(deltas.clients_per_round, 4)

  def test_table_averages_the_runs(self):
    results = {
        label: _result(0.5 if label.endswith('run0') else 0.7)
        for label in ldp.configs(_SETTING)
    }
    lines = ldp.table(_SETTING, results).splitlines()
    self.assertEqual(lines[0], '| setting | noise-free | eps=1 | eps=10 |')
    self.assertEqual(
        lines[2], '| paper (MNIST, 60k, 10 runs) | 97.26 | 96.24 ' '| 96.39 |'
    )
    self.assertEqual(lines[3], '| measured, weights | 60.00 | 60.00 | 60.00 |')
    del results['deltas_eps10_run0'], results['deltas_eps10_run1']
    self.assertEqual(
        ldp.table(_SETTING, results).splitlines()[4],
        '| measured, deltas | 60.00 | 60.00 | - |',
    )

  def test_bad_setting(self):
    with self.assertRaisesRegex(ValueError, 'mode'):
      ldp.Setting(modes=('both',))
    with self.assertRaisesRegex(ValueError, 'epsilon'):
      ldp.Setting(epsilons=(0.0,))


if __name__ == '__main__':
  tf.test.main()
