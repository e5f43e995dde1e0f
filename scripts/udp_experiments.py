r"""UDP experiments (Wei et al. Sec. VI, scaled to this machine).

Fixed-T UDP, grid-optimal T, CRD. Flags -> `tff_priv.experiments.udp.Setting`
-> a grid of training-program runs (`tff_priv.program.grid`: one run directory
per run under --output_dir, each with its ledger; a rerun skips finished runs
and resumes an interrupted one) -> summary.md and udp_loss_vs_rounds.png there.

For each target eps, clients per round K and calibration: fixed-T UDP for
every T in --grid (the grid-optimal T is the best; its compute is the sum of
the grid's rounds) and CRD (Algorithm 2) from T_0 = --initial_rounds. Each
run's noise meets the target for an analyst who sees the released models
(the smaller of the eps amplified by sampling K of U and the eps against the
server); the table gives both eps the ledger charged.

  .venv/bin/python scripts/udp_experiments.py --output_dir=results/udp
"""

import os
import sys

from tff_priv.program import command

_VERBOSE_ARGV = command.quiet_environment(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import flags

from tff_priv import cli
from tff_priv.experiments import udp
from tff_priv.program import grid

# pylint: enable=g-import-not-at-top,g-bad-import-order

_D = udp.Setting()
_EPSILONS = flags.DEFINE_list(
    'epsilons', [f'{e:g}' for e in _D.epsilons], 'Target eps values.'
)
_DELTA = flags.DEFINE_float('delta', _D.delta, 'Target delta.')
_CALIBRATIONS = flags.DEFINE_list(
    'calibrations', list(_D.calibrations), 'Noise calibrations to run.'
)
_TASK = flags.DEFINE_string('task', _D.task, 'Task (synthetic split).')
_MODEL = flags.DEFINE_string('model', _D.model, 'Model of the task.')
_CLIENTS = flags.DEFINE_integer('clients', _D.clients, 'U, number of clients.')
_SAMPLES = flags.DEFINE_integer(
    'samples_per_client', _D.samples_per_client, '|D_i|.'
)
_CLIENTS_PER_ROUND = flags.DEFINE_list(
    'clients_per_round', [str(k) for k in _D.clients_per_round], 'K values.'
)
_LEARNING_RATE = flags.DEFINE_float(
    'learning_rate', _D.learning_rate, 'Client step eta.'
)
_CLIP = flags.DEFINE_float('clip', _D.clip, 'Per-example gradient clip C.')
_GRID = flags.DEFINE_list(
    'grid', [str(t) for t in _D.rounds_grid], 'T values of the grid.'
)
_INITIAL_ROUNDS = flags.DEFINE_integer(
    'initial_rounds', _D.initial_rounds, 'CRD T_0.'
)
_BETA = flags.DEFINE_float('beta', _D.beta, 'CRD discount factor.')
_ZETA = flags.DEFINE_float('zeta', _D.zeta, 'CRD improvement threshold.')
_CRD = flags.DEFINE_bool('crd', _D.crd, 'Also run CRD for each configuration.')
_SEED = flags.DEFINE_integer('seed', _D.seed, 'Seed of split, init, sampling.')
_OUTPUT_DIR = flags.DEFINE_string('output_dir', 'results/udp', 'Output folder.')
_VERBOSE = flags.DEFINE_bool('verbose', False, "TF's and the runs' logs.")
_CLI = cli.Cli('udp_experiments.py')


def _setting() -> udp.Setting:
  try:
    return udp.Setting(
        task=_TASK.value,
        model=_MODEL.value,
        clients=_CLIENTS.value,
        samples_per_client=_SAMPLES.value,
        epsilons=tuple(float(e) for e in _EPSILONS.value),
        delta=_DELTA.value,
        clients_per_round=tuple(int(k) for k in _CLIENTS_PER_ROUND.value),
        calibrations=tuple(_CALIBRATIONS.value),
        learning_rate=_LEARNING_RATE.value,
        clip=_CLIP.value,
        rounds_grid=tuple(int(t) for t in _GRID.value),
        crd=_CRD.value,
        initial_rounds=_INITIAL_ROUNDS.value,
        beta=_BETA.value,
        zeta=_ZETA.value,
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
      'udp_experiments.py',
      lambda: grid.run(udp.configs(setting), out),
      out,
      _VERBOSE.value,
  )
  table = udp.table(setting, results)
  with open(os.path.join(out, 'summary.md'), 'w') as f:
    f.write(f'Setting: {setting}\n\n{table}\n')
  udp.plot(setting, results, os.path.join(out, 'udp_loss_vs_rounds.png'))
  print(table)
  print(
      f'\n{os.path.join(out, "summary.md")}, udp_loss_vs_rounds.png and one '
      'run directory per run'
  )


if __name__ == '__main__':
  _CLI.run(main)
