"""Tests of experiments.smp: the runs of a setting, the tables, the plot."""

import dataclasses
import math
import os
import tempfile

from absl.testing import absltest

from tff_priv.experiments import smp
from tff_priv.program import runs

_SETTING = smp.Setting(
    task='digits',
    model='mlp',
    num_clients=40,
    public_clients=4,
    clients_per_round=8,
    rounds=3,
    local_epochs=1,
    compressions=(0.1, 0.05),
    epsilon=4.0,
    max_client_examples=7,
    test_examples=200,
    target_accuracy=0.5,
)


def _result(
    label,
    *,
    accuracies,
    round_bytes,
    kept=None,
    sigma=1.0,
    eps=4.0,
    per_client=100,
    d=1000,
):
  """A finished run as runs.read would give it, with made-up numbers."""
  rounds = range(1, len(accuracies) + 1)
  return runs.RunResult(
      label=label,
      run_dir='/nowhere',
      summary={
          'final_test_accuracy': accuracies[-1],
          'best_test_accuracy': max(accuracies),
          'parameters': {
              'num_parameters': d,
              'resolved': {
                  'noise_multiplier': sigma,
                  **({} if kept is None else {'kept_coordinates': kept}),
              },
          },
          'privacy': {'rdp_epsilon': eps},
          'uplink_bytes': {
              'total': sum(round_bytes),
              'per_client_per_round': per_client,
          },
      },
      train_rows=[
          {'round': float(r), 'uplink_bytes': float(b)}
          for r, b in zip(rounds, round_bytes)
      ],
      eval_rows=[
          {'round': float(r), 'test_accuracy': a, 'test_loss': 2.0 - a}
          for r, a in zip(rounds, accuracies)
      ],
  )


class ConfigsTest(absltest.TestCase):

  def test_labels_and_mechanisms(self):
    configs = smp.configs(_SETTING)
    self.assertEqual(
        list(configs),
        [
            'digits-p1',
            'digits-noise_free',
            'digits-dp_fedavg',
            'digits-fed_smp-rand_k-p0.1',
            'digits-fed_smp-top_k-p0.1',
            'digits-fed_smp-rand_k-p0.05',
            'digits-fed_smp-top_k-p0.05',
        ],
    )
    p1 = configs['digits-p1'].params
    self.assertEqual(configs['digits-p1'].mechanism, 'smp')
    self.assertEqual(
        (p1.compression, p1.mask, p1.epsilon, p1.clip),
        (1.0, 'rand_k', 4.0, _SETTING.clip),
    )
    self.assertIsNone(p1.public_clients)
    free = configs['digits-noise_free'].params
    self.assertEqual((free.noise_multiplier, free.compression), (0.0, 1.0))
    self.assertIsNone(free.epsilon)
    dp = configs['digits-dp_fedavg']
    self.assertEqual(dp.mechanism, 'dp_fedavg')
    self.assertEqual((dp.params.epsilon, dp.params.clip), (4.0, _SETTING.clip))
    top = configs['digits-fed_smp-top_k-p0.05'].params
    self.assertEqual(
        (top.mask, top.compression, top.public_clients), ('top_k', 0.05, 4)
    )
    self.assertIsNone(
        configs['digits-fed_smp-rand_k-p0.05'].params.public_clients
    )

  def test_shared_fields(self):
    for label, config in smp.configs(_SETTING).items():
      with self.subTest(label):
        self.assertEqual(config.task, 'digits')
        self.assertEqual(
            config.task_options,
            {
                'model': 'mlp',
                'num_clients': 40,
                'samples_per_client': 10,
                'partition': 'iid',
            },
        )
        self.assertEqual(
            (
                config.total_rounds,
                config.clients_per_round,
                config.num_epochs,
                config.client_learning_rate,
                config.client_momentum,
                config.client_lr_decay,
                config.max_client_examples,
                config.test_examples,
                config.eval_every,
                config.seed,
                config.sampling_seed,
                config.params.delta,
            ),
            (3, 8, 1, 0.1, 0.5, 0.99, 7, 200, 1, 0, None, 1e-5),
        )

  def test_optional_runs_and_shakespeare(self):
    only = dataclasses.replace(
        _SETTING,
        noise_free=False,
        dp_fedavg=False,
        masks=('top_k',),
        compressions=(0.1,),
    )
    self.assertEqual(
        list(smp.configs(only)), ['digits-p1', 'digits-fed_smp-top_k-p0.1']
    )
    configs = smp.configs(smp.SHAKESPEARE)
    self.assertEqual(
        list(configs),
        [
            'shakespeare_offline-p1',
            'shakespeare_offline-noise_free',
            'shakespeare_offline-fed_smp-top_k-p0.1',
        ],
    )
    config = configs['shakespeare_offline-fed_smp-top_k-p0.1']
    self.assertEqual(config.task_options, {})
    self.assertIsNone(config.client_momentum)  # momentum 0: plain SGD.
    self.assertEqual(
        (
            config.max_client_examples,
            config.test_examples,
            config.params.epsilon,
        ),
        (5, 1000, 8.0),
    )

  def test_bad_setting_names_the_field(self):
    for change, field in (
        ({'compressions': (1.0,)}, 'compressions'),
        ({'masks': ('rand_k', 'foo')}, 'masks'),
        ({'rounds': 0}, 'rounds'),
        ({'lr_decay': 0.0}, 'lr_decay'),
        ({'public_clients': 0}, 'public_clients'),
    ):
      with self.subTest(field):
        with self.assertRaisesRegex(ValueError, f'^{field} '):
          smp.configs(dataclasses.replace(_SETTING, **change))
    with self.assertRaises(ValueError):  # The program's own check.
      smp.configs(dataclasses.replace(_SETTING, task='nope'))


class TablesTest(absltest.TestCase):

  def test_uplink_and_accuracies(self):
    r = _result(
        'x',
        accuracies=[0.1, 0.4, 0.6, 0.5, 0.7, 0.9, 0.8],
        round_bytes=[1e6, 2e6, 3e6, 0, 0, 0, 1e6],
    )
    self.assertEqual(
        smp.cumulative_uplink_mb(r),
        {1: 1.0, 2: 3.0, 3: 6.0, 4: 6.0, 5: 6.0, 6: 6.0, 7: 7.0},
    )
    self.assertEqual(smp.mb_to_target(r, 0.5), 6.0)  # Round 3.
    self.assertEqual(smp.mb_to_target(r, 0.1), 1.0)
    self.assertIsNone(smp.mb_to_target(r, 0.95))
    self.assertAlmostEqual(
        smp.tail_accuracy(r), (0.6 + 0.5 + 0.7 + 0.9 + 0.8) / 5
    )

  def test_markdown(self):
    s = dataclasses.replace(_SETTING, compressions=(0.1,), noise_free=False)
    results = {
        'digits-p1': _result(
            'digits-p1',
            accuracies=[0.3, 0.4],
            round_bytes=[8e6, 8e6],
            eps=3.9993,
        ),
        'digits-dp_fedavg': _result(
            'digits-dp_fedavg',
            accuracies=[0.5, 0.6],
            round_bytes=[8e6, 8e6],
            eps=3.9993,
        ),
        'digits-fed_smp-top_k-p0.1': _result(
            'x',
            accuracies=[0.2, 0.55],
            round_bytes=[8e5, 8e5],
            kept=100,
            sigma=0.95,
            eps=4.0,
            per_client=400,
        ),
        # rand_k p = 0.1 has not run yet.
    }
    lines = smp.task_markdown(s, results)
    self.assertEqual(lines[0], '## digits')
    self.assertIn('| mask | p=0.1 | p=1 |', lines)
    self.assertIn('| Fed-SMP rand_k | - | 0.400 (0.400) |', lines)
    self.assertIn('| Fed-SMP top_k | 0.550 (0.550) | 0.400 (0.400) |', lines)
    rows = [l for l in lines if l.startswith('| ') and l.count('|') == 12]
    self.assertEqual(
        [r.split(' | ')[0] for r in rows[1:]],
        [
            f'| {smp.P1_NAME}',
            f'| {smp.DP_FEDAVG_NAME}',
            '| Fed-SMP top_k p=0.1',
        ],
    )
    self.assertEqual(
        rows[3],
        '| Fed-SMP top_k p=0.1 | 100 | 0.9500 | 0.5500 | 0.5500 | '
        '0.3750 | 1.450 | 4.0000 | 400 | 1.6 | 1.6 |',
    )
    self.assertTrue(rows[1].endswith('| 16 | not reached |'))
    self.assertTrue(rows[2].endswith('| 16 | 8 |'))  # 0.5 >= 0.5 in round 1.
    self.assertIn('| 1,000 |', rows[1])  # k = d without kept_coordinates.
    text = smp.summary_markdown([s, smp.SHAKESPEARE], results)
    self.assertIn('## shakespeare_offline\n\nNo finished runs.', text)

  def test_infinite_epsilon_and_plot(self):
    s = dataclasses.replace(
        _SETTING, compressions=(0.1,), masks=('rand_k',), dp_fedavg=False
    )
    results = {
        run.label: _result(
            run.label,
            accuracies=[0.2, 0.3],
            round_bytes=[1e6, 1e6],
            eps=math.inf,
            sigma=0.0,
        )
        for run in smp.runs(s)
    }
    free = [
        l
        for l in smp.task_markdown(s, results)
        if l.startswith(f'| {smp.NOISE_FREE_NAME}')
    ]
    self.assertIn('| inf |', free[0])
    path = os.path.join(tempfile.mkdtemp(), 'plot.png')
    smp.plot([s], results, path)
    with open(path, 'rb') as f:
      self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')


if __name__ == '__main__':
  absltest.main()
