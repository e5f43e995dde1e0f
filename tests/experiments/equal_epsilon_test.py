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


_TUNED = equal_epsilon.Setting(
    epsilons=(8.0,),
    seeds=(0,),
    methods=('dp_fedavg', 'dp_fedavg_adaptive'),
    tuning=equal_epsilon.Tuning(
        clips=(0.25, 1.0), server_learning_rates=(0.5, 1.0), seeds=(100, 101)
    ),
)


def _scored(value, measure='accuracy'):
  key = 'final_test_accuracy' if measure == 'accuracy' else 'final_test_metrics'
  summary = {'privacy': {'rdp_epsilon': 7.9}}
  summary[key] = value if measure == 'accuracy' else {'loss': value}
  return runs.RunResult('x', '/nonexistent', summary, [], [])


class TuningTest(tf.test.TestCase):

  def test_the_grid_runs_on_the_validation_half(self):
    configs = equal_epsilon.tuning_configs(_TUNED)
    # dp_fedavg: 2 clips x 2 steps; adaptive: 2 steps; each for 2 seeds.
    self.assertLen(configs, 2 * (4 + 2))
    run = configs['tune_dp_fedavg_eps8_clip0.25_slr0.5_seed101'].validate()
    self.assertEqual(
        (run.params.clip, run.server_learning_rate, run.seed),
        (0.25, 0.5, 101),
    )
    self.assertEqual(
        (run.holdout_validation, run.evaluation_split), (True, 'validation')
    )
    adaptive = configs['tune_dp_fedavg_adaptive_eps8_slr1_seed100'].validate()
    self.assertIsNone(adaptive.params.clip)
    with self.assertRaisesRegex(ValueError, 'no tuning grid'):
      equal_epsilon.tuning_configs(_SETTING)

  def test_each_method_takes_its_best_mean_and_is_reported_at_it(self):
    results = {}
    for label in equal_epsilon.tuning_configs(_TUNED):
      results[label] = _scored(0.5)
    for seed, value in ((100, 0.9), (101, 0.7)):  # Mean 0.8: the best.
      results[f'tune_dp_fedavg_eps8_clip1_slr0.5_seed{seed}'] = _scored(value)
    # A single better seed does not win on its mean (0.95 and 0.6).
    results['tune_dp_fedavg_eps8_clip0.25_slr1_seed100'] = _scored(0.95)
    results['tune_dp_fedavg_eps8_clip0.25_slr1_seed101'] = _scored(0.6)
    chosen = equal_epsilon.choose(_TUNED, results)
    self.assertEqual(
        chosen[('dp_fedavg', 8.0)], equal_epsilon.Choice(1.0, 0.5, 0.8)
    )
    # A tie goes to the first of the grid: the smaller step.
    self.assertEqual(
        chosen[('dp_fedavg_adaptive', 8.0)],
        equal_epsilon.Choice(None, 0.5, 0.5),
    )
    reported = equal_epsilon.configs(_TUNED, chosen)
    # A tuned run's label names its choice: another choice, another run.
    self.assertIn('dp_fedavg_adaptive_eps8_slr0.5_seed0', reported)
    fixed = reported['dp_fedavg_eps8_clip1_slr0.5_seed0'].validate()
    self.assertEqual(
        (fixed.params.clip, fixed.server_learning_rate), (1.0, 0.5)
    )
    self.assertEqual(
        (fixed.holdout_validation, fixed.evaluation_split), (True, 'test')
    )
    # The non-private run is tested on the same half.
    self.assertTrue(reported['none_seed0'].validate().holdout_validation)
    results['dp_fedavg_eps8_clip1_slr0.5_seed0'] = _scored(0.75)
    lines = equal_epsilon.table(_TUNED, results, chosen=chosen).splitlines()
    self.assertTrue(lines[0].startswith('| method | eps | clip | server lr |'))
    self.assertTrue(
        lines[3].startswith('| dp_fedavg | 8 | 1 | 0.5 |'), lines[3]
    )
    self.assertIn('| dp_fedavg_adaptive | 8 | adaptive | 0.5 |', lines[4])
    grid = equal_epsilon.tuning_table(_TUNED, results).splitlines()
    self.assertIn('| dp_fedavg | 8 | 1 | **0.800** | 0.500 |', grid)

  def test_a_loss_is_tuned_down_and_a_missing_cell_is_refused(self):
    results = {
        label: _scored(3.0, 'loss')
        for label in equal_epsilon.tuning_configs(_TUNED)
    }
    for seed in (100, 101):
      results[f'tune_dp_fedavg_eps8_clip0.25_slr1_seed{seed}'] = _scored(
          2.5, 'loss'
      )
    chosen = equal_epsilon.choose(_TUNED, results, 'loss')
    self.assertEqual(
        chosen[('dp_fedavg', 8.0)], equal_epsilon.Choice(0.25, 1.0, 2.5)
    )
    del results['tune_dp_fedavg_adaptive_eps8_slr0.5_seed100']
    del results['tune_dp_fedavg_adaptive_eps8_slr1_seed101']
    with self.assertRaisesRegex(ValueError, 'no tuning run of dp_fedavg_adapt'):
      equal_epsilon.choose(_TUNED, results, 'loss')

  def test_a_bad_grid_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'clips must not be empty'):
      equal_epsilon.Tuning(clips=())
    with self.assertRaisesRegex(ValueError, 'server_learning_rate'):
      equal_epsilon.Tuning(server_learning_rates=(0.0,))


if __name__ == '__main__':
  tf.test.main()
