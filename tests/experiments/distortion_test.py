"""Tests for tff_priv.experiments.distortion (no training runs)."""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from tff_priv.experiments import distortion
from tff_priv.program import layout
from tff_priv.program import runs
from tff_priv.program.registry import distortion as distortion_mechanism
from tff_priv_tasks import models

_SMALL = distortion.Settings(
    task='digits',
    num_clients=4,
    samples_per_client=50,
    rhos=(0.5,),
    target_tvs=(0.5,),
    epsilons=(8.0,),
    seeds=2,
    seed=3,
)
_NOISE_KEYS = ('noise_stddev', 'target_tv', 'epsilon', 'parameter_variance')


class SettingsTest(tf.test.TestCase):

  def test_rho_one_is_added_and_bad_values_named(self):
    self.assertEqual(_SMALL.validate().rhos, (1.0, 0.5))
    for field, value in (
        ('rhos', (0.0,)),
        ('target_tvs', (1.0,)),
        ('epsilons', (-1.0,)),
        ('task', 'mnist'),
        ('delta', 1.0),
        ('seeds', 0),
    ):
      with self.assertRaisesRegex(ValueError, field):
        dataclasses.replace(_SMALL, **{field: value}).validate()


class RunConfigsTest(tf.test.TestCase):

  def test_labels(self):
    self.assertEqual(
        set(distortion.run_configs(_SMALL)),
        {
            'rho1_noise_free',
            *(
                f'rho1_{level}_seed{s}'
                for level in ('tv0.5', 'eps8')
                for s in (0, 1)
            ),
            *(
                f'rho0.5_{level}_seed{s}'
                for level in ('noise_free', 'tv0.5', 'eps8')
                for s in (0, 1)
            ),
        },
    )

  def test_fields(self):
    for name, config in distortion.run_configs(_SMALL).items():
      valid = config.validate()  # The training program accepts it.
      self.assertEqual(config.mechanism, 'distortion')
      self.assertEqual(distortion_mechanism.Config.SAMPLING, 'fixed')
      self.assertEqual(config.clients_per_round, 4)  # Everyone, every round.
      self.assertEqual(config.seed, 3)  # One split, one initial model.
      self.assertEqual(
          config.task_options,
          dict(model='softmax', num_clients=4, samples_per_client=50),
      )
      self.assertEqual(config.num_epochs, 1)
      self.assertEqual(valid.params.local_steps, _SMALL.local_steps)
      self.assertEqual(valid.params.clip, _SMALL.clip)
      if name == distortion.W_LABEL:
        self.assertEqual((valid.params.rho, valid.params.noise_stddev), (1, 0))
      if '_tv0.5_' in name:
        self.assertEqual(valid.params.target_tv, 0.5)
        self.assertEqual(valid.params.parameter_variance, 3.24e-6)
      if '_eps8_' in name:
        self.assertEqual((valid.params.epsilon, valid.params.delta), (8, 1e-5))

  def test_common_batch_seeds(self):
    # Per (rho, seed), the noise levels differ in their noise only: the same
    # batch seed, rho and steps, hence the same batches (common random
    # numbers; bernoulli_sampling_test checks that the order the task
    # delivers the examples in does not matter).
    configs = distortion.run_configs(_SMALL)
    for rho in (1.0, 0.5):
      for seed in (0, 1):
        batches = set()
        for level in distortion.noise_levels(_SMALL):
          name = distortion.label(rho, level, seed)
          params = dict(configs[name].params)
          if name != distortion.W_LABEL:
            self.assertEqual(params['batch_seed'], seed)
          params['batch_seed'] = seed  # W: any seed gives full batches.
          batches.add(
              tuple(
                  sorted(
                      (k, v) for k, v in params.items() if k not in _NOISE_KEYS
                  )
              )
          )
        self.assertLen(batches, 1)


class UtilityLossTest(tf.test.TestCase):

  def test_split_from_fabricated_weights(self):
    w_star, w = np.zeros(2), np.array([1.0, 0.0])  # ||W - W*||^2 = 1.
    sampled = {
        0: np.array([1.0, 1.0]),
        1: np.array([0.0, 1.0]),
        5: np.zeros(2),
    }  # Seed 5 has no distorted run: left out.
    distorted = {0: np.array([2.0, 0.0]), 1: np.array([0.0, 2.0])}
    split = distortion.utility_loss(w_star, w, sampled, distorted)
    # Sampling: 2 - 1, 1 - 1; distortion: 4 - 2, 4 - 1; total: 3, 3.
    self.assertAllClose(split['sampling'], (0.5, 0.5))
    self.assertAllClose(split['distortion'], (2.5, 0.5))
    self.assertAllClose(split['total'], (3.0, 0.0))
    self.assertEqual(split['sq_distance'], 4.0)
    self.assertEqual(split['seeds'], 2)
    with self.assertRaisesRegex(ValueError, 'no seed'):
      distortion.utility_loss(w_star, w, {0: w}, {1: w})

  def test_table_reads_the_runs(self):
    settings = dataclasses.replace(_SMALL, target_tvs=(), seeds=2)
    root = self.get_temp_dir()
    rng = np.random.default_rng(0)
    results = {}
    for i, name in enumerate(distortion.run_configs(settings)):
      run_dir = os.path.join(root, name)
      os.makedirs(run_dir)
      np.savez(
          layout.path(run_dir, layout.FINAL_MODEL),
          trainable_0=rng.normal(size=(2, 2)),
          trainable_1=rng.normal(size=2),
      )
      summary = {
          'parameters': {
              'resolved': {
                  'noise_stddev': 0.1 * i,
                  'tv_lower': 0.01,
                  'tv_upper': 0.5,
              }
          },
          'privacy': {'rdp_epsilon': 8.0},
          'final_test_accuracy': 0.5,
      }
      results[name] = runs.RunResult(name, run_dir, summary, [], [])
    star = np.zeros(6)
    rows = distortion.table(results, settings, (star, 0.0, 0.0))
    self.assertEqual(
        [(r['rho'], r['level']) for r in rows],
        [
            (1.0, 'noise_free'),
            (1.0, 'eps8'),
            (0.5, 'noise_free'),
            (0.5, 'eps8'),
        ],
    )
    model = lambda n: distortion.flat(results[n].model())
    w = model(distortion.W_LABEL)
    self.assertEqual(rows[0]['total'], (0.0, 0.0))  # W against itself.
    self.assertEqual(rows[1]['sampling'], (0.0, 0.0))  # W_1 = W.
    expected = distortion.utility_loss(
        star,
        w,
        {s: model(f'rho0.5_noise_free_seed{s}') for s in (0, 1)},
        {s: model(f'rho0.5_eps8_seed{s}') for s in (0, 1)},
    )
    self.assertEqual(rows[3]['total'], expected['total'])
    self.assertAllClose(rows[3]['noise_stddev'], 0.1 * 5)  # Its own summary.
    text = distortion.markdown(rows, results, (star, 1e-6, 0.5))
    self.assertIn('| 0.5 | eps8 | 0.5 | [0.01, 0.5] | 8 |', text)
    distortion.plot(rows, os.path.join(root, 'p.png'))
    self.assertGreater(os.path.getsize(os.path.join(root, 'p.png')), 1000)


class ReferenceTest(tf.test.TestCase):

  def test_converges_to_a_zero_gradient(self):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 3)).astype(np.float32)
    y = rng.integers(0, 3, size=30).astype(np.int32)
    l2 = 0.05
    found = []
    for seed in (0, 1):  # Two starting points, one optimum.
      tf.keras.utils.set_random_seed(seed)
      model = models.softmax_regression((3,), 3, l2=l2)
      found.append(distortion.reference(model, x, y, 3000, 0.5))
    w_star, norm, _ = found[0]
    self.assertLess(norm, 1e-4)
    # The gradient at W*, computed here by hand: mean cross-entropy of a
    # softmax plus l2 ||kernel||^2.
    kernel, bias = w_star[:9].reshape(3, 3), w_star[9:]
    logits = x @ kernel + bias
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    residual = (p - np.eye(3)[y]) / len(y)
    gradient = np.concatenate(
        [(x.T @ residual + 2 * l2 * kernel).ravel(), residual.sum(0)]
    )
    self.assertLess(np.linalg.norm(gradient), 1e-4)
    self.assertAllClose(found[1][0], w_star, atol=1e-4)


if __name__ == '__main__':
  tf.test.main()
