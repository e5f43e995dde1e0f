"""Tests of tff_priv.experiments.udp: the grid's runs and its table."""

import tensorflow as tf

from tff_priv.experiments import udp
from tff_priv.program import runs

_SETTING = udp.Setting(
    epsilons=(8.0,),
    clients_per_round=(3,),
    calibrations=('tight',),
    rounds_grid=(2, 4),
    initial_rounds=5,
)


def _result(label, loss, accuracy, rounds_run, analyst=1.0, server=2.0):
  return runs.RunResult(
      label=label,
      run_dir='/nonexistent',
      summary={
          'final_test_metrics': {'loss': loss},
          'final_test_accuracy': accuracy,
          'rounds_run': rounds_run,
          'privacy': {
              'guarantees': [
                  {'adversary': 'analyst', 'epsilon': analyst},
                  {'adversary': 'server', 'epsilon': server},
              ]
          },
      },
      train_rows=[],
      eval_rows=[],
  )


class UdpCrdTest(tf.test.TestCase):

  def test_configs(self):
    configs = udp.configs(_SETTING)
    self.assertEqual(
        list(configs),
        ['eps8_K3_tight_T2', 'eps8_K3_tight_T4', 'eps8_K3_tight_crd'],
    )
    for config in configs.values():
      valid = config.validate()
      self.assertEqual(valid.mechanism, 'udp')
      self.assertEqual(valid.params.epsilon, 8.0)
      self.assertEqual(valid.params.udp_calibration, 'tight')
      # Every run is tested on the same half of the test set.
      self.assertTrue(valid.holdout_validation)
      self.assertEqual(valid.clients_per_round, 3)
    self.assertEqual(configs['eps8_K3_tight_T4'].total_rounds, 4)
    crd = configs['eps8_K3_tight_crd'].validate()
    self.assertEqual(crd.total_rounds, 5)
    self.assertEqual(
        (crd.params.crd_beta, crd.params.crd_zeta),
        (_SETTING.beta, _SETTING.zeta),
    )
    self.assertIsNone(configs['eps8_K3_tight_T2'].validate().params.crd_beta)

  def test_table_picks_the_grid_optimal_rounds(self):
    results = {
        'eps8_K3_tight_T2': _result('a', 2.0, 0.5, 2),
        'eps8_K3_tight_T4': _result('b', 1.5, 0.6, 4, analyst=3.0),
        'eps8_K3_tight_crd': _result('c', 1.7, 0.55, 3),
    }
    row = udp.table(_SETTING, results).splitlines()[-1]
    self.assertEqual(
        row,
        '| 8 | 3 | tight | 2: 2.00, 4: 1.50 | T=4 (1.500, 0.600, 3.00, 2.00) '
        '| 6 | 3 (1.700, 0.550, 1.00, 2.00) |',
    )

  def test_bad_setting(self):
    with self.assertRaisesRegex(ValueError, 'calibration'):
      udp.Setting(calibrations=('loose',))
    with self.assertRaisesRegex(ValueError, 'rounds'):
      udp.Setting(rounds_grid=(0,))


if __name__ == '__main__':
  tf.test.main()
