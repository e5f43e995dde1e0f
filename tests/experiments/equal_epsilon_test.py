"""Tests of experiments.equal_epsilon: the grid's runs and its table."""

import tensorflow as tf

from tff_priv.experiments import equal_epsilon
from tff_priv.program import runs

_SETTING = equal_epsilon.Setting(epsilons=(2.0, 8.0), seeds=(0, 1))


def _result(accuracy, epsilon):
  return runs.RunResult(
      'x',
      '/nonexistent',
      {'final_test_accuracy': accuracy, 'privacy': {'rdp_epsilon': epsilon}},
      [],
      [],
  )


class EqualEpsilonTest(tf.test.TestCase):

  def test_configs(self):
    configs = equal_epsilon.configs(_SETTING)
    methods = len(equal_epsilon.DEFAULT_METHODS)
    self.assertLen(configs, 2 * (1 + 2 * methods))  # seeds x (none + eps x m)
    fixed = configs['dp_fedavg_eps8_seed1'].validate()
    self.assertEqual((fixed.mechanism, fixed.seed), ('dp_fedavg', 1))
    self.assertEqual(
        (fixed.params.epsilon, fixed.params.delta, fixed.params.clip),
        (8.0, 1e-5, 1.0),
    )
    adaptive = configs['dp_fedavg_adaptive_c1_eps2_seed0'].validate()
    self.assertIsNone(adaptive.params.clip)
    # The adaptive clip starts at the fixed clip's value.
    self.assertEqual(
        (
            adaptive.params.adaptive_clip_quantile,
            adaptive.params.adaptive_clip_initial,
        ),
        (0.5, 1.0),
    )
    cyclic = configs['blt_cyclic_eps2_seed0'].validate()
    self.assertEqual(
        (cyclic.mechanism, cyclic.params.participation), ('blt', 'cyclic')
    )
    free = configs['none_seed0'].validate()
    self.assertEqual(
        (free.mechanism, free.total_rounds, free.clients_per_round),
        ('none', 50, 20),
    )

  def test_clip_sensitivity_methods_scale_the_settings_clip(self):
    setting = equal_epsilon.Setting(
        clip=0.5,
        epsilons=(8.0,),
        seeds=(0,),
        methods=(
            'dp_fedavg_clip_x0.25',
            'dp_fedavg_clip_x4',
            'dp_fedavg_adaptive_q90',
            'blt_epoch_clip_x0.25',
            'dp_ftrl_clip_x0.25',
            'bandmf_clip_x0.25',
        ),
    )
    configs = equal_epsilon.configs(setting)
    self.assertEqual(
        configs['dp_fedavg_clip_x0.25_eps8_seed0'].validate().params.clip, 0.125
    )
    self.assertEqual(
        configs['dp_fedavg_clip_x4_eps8_seed0'].validate().params.clip, 2.0
    )
    q90 = configs['dp_fedavg_adaptive_q90_eps8_seed0'].validate().params
    self.assertEqual(
        (q90.adaptive_clip_quantile, q90.adaptive_clip_initial), (0.9, 0.5)
    )
    for label, mechanism in [
        ('blt_epoch_clip_x0.25', 'blt'),
        ('dp_ftrl_clip_x0.25', 'dp_ftrl'),
        ('bandmf_clip_x0.25', 'bandmf'),
    ]:
      config = configs[label + '_eps8_seed0'].validate()
      self.assertEqual(
          (config.mechanism, config.params.clip), (mechanism, 0.125)
      )
    self.assertEqual(
        configs['blt_epoch_clip_x0.25_eps8_seed0']
        .validate()
        .params.participation,
        'epoch',
    )
    self.assertNotIn('dp_fedavg_clip_x4', equal_epsilon.DEFAULT_METHODS)

  def test_the_larger_population_preset(self):
    configs = equal_epsilon.configs(equal_epsilon.N1000)
    cyclic = configs['blt_cyclic_eps8_seed0'].validate()
    self.assertEqual(cyclic.task_options, {'model': 'mlp', 'num_clients': 1000})
    self.assertEqual((cyclic.total_rounds, cyclic.clients_per_round), (200, 20))
    free = configs['none_seed0'].validate()
    self.assertEqual(free.task_options['num_clients'], 1000)

  def test_unknown_method_refused(self):
    with self.assertRaisesRegex(ValueError, 'method must be one of'):
      equal_epsilon.Setting(methods=('dp_sgd',))

  def test_table_means_and_charged_epsilon(self):
    setting = equal_epsilon.Setting(
        epsilons=(8.0,), seeds=(0, 1), methods=('dp_fedavg',)
    )
    results = {
        'none_seed0': _result(0.9, 'inf'),  # As summary.json writes it.
        'dp_fedavg_eps8_seed0': _result(0.6, 7.99),
        'dp_fedavg_eps8_seed1': _result(0.8, 7.98),
    }
    lines = equal_epsilon.table(setting, results).splitlines()
    self.assertEqual(lines[2], '| none | - | 0.900 | - | 0.900 | - | - |')
    self.assertEqual(
        lines[3], '| dp_fedavg | 8 | 0.600 | 0.800 | 0.700 | 0.100 | 7.990 |'
    )


if __name__ == '__main__':
  tf.test.main()
