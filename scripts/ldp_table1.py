r"""Reproduces LDP-FL Table 1's MNIST row (Sun, Qian, Chen) on offline data.

Flags -> `tff_priv.experiments.ldp.Setting` -> a grid of training-program
runs (`tff_priv.program.grid`: one run directory per (mode, eps0, run) under
--output_dir, each with its ledger, resumable: a rerun skips finished runs
and resumes an interrupted one) -> table.md and accuracy_vs_eps.png there.
Prints the measured table beside the paper's (97.26 / 13.84 / 95.36 / 96.24 /
96.34 / 96.39 for noise-free / eps 0.1, 0.5, 1, 5, 10) and, per eps0, the
paper's per-value claim beside what the run's ledger charged.

Paper setting (the defaults): 100 IID clients, 10 rounds, client SGD lr 0.03,
McMahan CNN. The data differ: the offline mnist5k task has 5,000 MNIST digits
(4,000 train = 40 per client, 1,000 test) instead of 60,000/10,000.

  .venv/bin/python scripts/ldp_table1.py --model=mlp \
      --output_dir=results/ldp_table1/mlp
"""

import os
import sys

from tff_priv.program import command

_VERBOSE_ARGV = command.quiet_environment(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import flags

from tff_priv import cli
from tff_priv.experiments import ldp
from tff_priv.program import grid

# pylint: enable=g-import-not-at-top,g-bad-import-order

_D = ldp.Setting()
_TASK = flags.DEFINE_string('task', _D.task, 'Task (an image classifier).')
_MODEL = flags.DEFINE_string('model', _D.model, 'Model of the task.')
_CLIENTS = flags.DEFINE_integer('clients', _D.clients, 'IID clients.')
_SEED = flags.DEFINE_integer('seed', _D.seed, 'Seed of the split and init.')
_ROUNDS = flags.DEFINE_integer('rounds', _D.rounds, 'Communication rounds.')
_LR = flags.DEFINE_float(
    'client_learning_rate', _D.client_learning_rate, 'Client SGD rate.'
)
_BATCH = flags.DEFINE_integer('batch_size', _D.batch_size, 'Client batch size.')
_EPOCHS = flags.DEFINE_integer(
    'local_epochs', _D.local_epochs, 'Local epochs per round.'
)
_PER_ROUND = flags.DEFINE_integer(
    'clients_per_round', None, 'Clients per round (default all).'
)
_RUNS = flags.DEFINE_integer('runs', _D.runs, 'Runs per cell (the paper: 10).')
_EPSILONS = flags.DEFINE_list(
    'epsilons', [f'{e:g}' for e in _D.epsilons], 'eps0 values.'
)
_NOISE_FREE = flags.DEFINE_bool('noise_free', True, 'Also run noise-free.')
_MODES = flags.DEFINE_list('modes', list(_D.modes), 'weights and/or deltas.')
_WEIGHTS_RADIUS = flags.DEFINE_float(
    'weights_radius', _D.weights_radius, 'r in weights mode.'
)
_DELTAS_RADIUS = flags.DEFINE_float(
    'deltas_radius', _D.deltas_radius, 'r in deltas mode.'
)
_DELTA = flags.DEFINE_float('delta', _D.delta, 'delta of the eps reported.')
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', 'results/ldp_table1', 'Output folder (one run dir per cell).'
)
_VERBOSE = flags.DEFINE_bool('verbose', False, "TF's and the runs' logs.")
_CLI = cli.Cli('ldp_table1.py')


def _setting() -> ldp.Setting:
  try:
    return ldp.Setting(
        task=_TASK.value,
        model=_MODEL.value,
        clients=_CLIENTS.value,
        clients_per_round=_PER_ROUND.value,
        rounds=_ROUNDS.value,
        client_learning_rate=_LR.value,
        batch_size=_BATCH.value,
        local_epochs=_EPOCHS.value,
        epsilons=tuple(float(e) for e in _EPSILONS.value),
        noise_free=_NOISE_FREE.value,
        modes=tuple(_MODES.value),
        weights_radius=_WEIGHTS_RADIUS.value,
        deltas_radius=_DELTAS_RADIUS.value,
        runs=_RUNS.value,
        delta=_DELTA.value,
        seed=_SEED.value,
    )
  except ValueError as e:
    _CLI.fail(str(e))


def main(argv):
  if len(argv) > 1:
    _CLI.fail(f'unexpected arguments {argv[1:]}')
  setting = _setting()
  out = _OUTPUT_DIR.value
  results = command.main(
      'ldp_table1.py',
      lambda: grid.run(ldp.configs(setting), out),
      out,
      _VERBOSE.value,
  )
  table = ldp.table(setting, results)
  privacy = ldp.privacy_lines(setting, results)
  with open(os.path.join(out, 'table.md'), 'w') as f:
    f.write(f'Setting: {setting}\n\n{table}\n\nPrivacy:\n\n')
    f.write(''.join(f'- {line}\n' for line in privacy))
  ldp.plot(setting, results, os.path.join(out, 'accuracy_vs_eps.png'))
  print(f'{table}\n')
  print('\n'.join(privacy))
  print(
      f'\n{os.path.join(out, "table.md")}, accuracy_vs_eps.png and one run '
      'directory per cell'
  )


if __name__ == '__main__':
  _CLI.run(main)
