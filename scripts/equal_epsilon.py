r"""DP-FedAvg (fixed and adaptive clip), DP-FTRL, BLT and BandMF at equal eps.

BLT per epoch and cyclic. Flags -> `tff_priv.experiments.equal_epsilon.Setting`
per preset -> with --tune (the default), the tuning runs (each method at every
clip x server step of the grid, evaluated on the validation half of the test
set, seeds apart from the reported ones) and each method's best -> the
reported runs, each method at its own best, evaluated on the test half ->
`tff_priv.program.grid.run` (each run in <output_dir>/<preset>/<label>/,
charged by its own ledger) -> one Markdown table per preset
(<output_dir>/<preset>.md, and stdout; the tuning grid's scores in
<output_dir>/<preset>_tuning.md). Presets: mnist5k_mlp
and mnist5k_cnn (100 clients, K = 20, 50 rounds: 10 epochs), mnist5k_mlp_n1000
(1,000 clients of 4 examples, K = 20, 200 rounds: 4 epochs), shakespeare
(shakespeare_offline, K = 20, 40 rounds; its table gives the test loss). Run
from the repository root:

  .venv/bin/python scripts/equal_epsilon.py --presets=mnist5k_mlp \
      --output_dir=results/equal_epsilon

Started again with the same --output_dir, finished runs are read back and an
interrupted one resumes; bad flags exit 2 with one line.
"""

import dataclasses
import os
import sys

from tff_priv.program import command

_VERBOSE_ARGV = command.quiet_environment(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import flags

from tff_priv import cli
from tff_priv.experiments import equal_epsilon
from tff_priv.program import grid

# pylint: enable=g-import-not-at-top,g-bad-import-order

PRESETS = {
    'mnist5k_mlp': equal_epsilon.Setting(),
    'mnist5k_cnn': equal_epsilon.Setting(model='cnn'),
    'mnist5k_mlp_n1000': equal_epsilon.N1000,
    'shakespeare': equal_epsilon.SHAKESPEARE,
}
_PRESETS = flags.DEFINE_list(
    'presets', ['mnist5k_mlp'], f'Settings to run: {", ".join(PRESETS)}.'
)
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', 'results/equal_epsilon', 'Output folder.'
)
_EPSILONS = flags.DEFINE_list('epsilons', ['2', '8'], 'Target epsilons.')
_SEEDS = flags.DEFINE_list('seeds', ['0', '1', '2'], 'Model seeds.')
_METHODS = flags.DEFINE_list(
    'methods',
    list(equal_epsilon.DEFAULT_METHODS),
    f'Private methods: {", ".join(equal_epsilon.METHODS)}.',
)
_TUNE = flags.DEFINE_bool(
    'tune',
    True,
    "Choose each method's clip and server step on the validation half first.",
)
_CLIPS = flags.DEFINE_list(
    'tune_clips', ['0.1', '0.25', '0.5', '1'], 'The fixed clips tried.'
)
_SERVER_LRS = flags.DEFINE_list(
    'tune_server_lrs', ['0.5', '1', '2'], 'The server steps tried.'
)
_TUNE_SEEDS = flags.DEFINE_list(
    'tune_seeds', ['100'], 'Tuning seeds (apart from --seeds).'
)
_VERBOSE = flags.DEFINE_bool('verbose', False, "TF's and the runs' logs.")

_CLI = cli.Cli('equal_epsilon.py', doc=__doc__, key_modules=(__name__,))


def main(argv):
  if len(argv) > 1:
    _CLI.fail(f'unexpected arguments {argv[1:]}')
  try:
    settings = {}
    for preset in _PRESETS.value:
      if preset not in PRESETS:
        raise ValueError(
            f'unknown preset {preset!r}; one of ' f'{", ".join(PRESETS)}'
        )
      tuning = None
      if _TUNE.value:
        tuning = equal_epsilon.Tuning(
            clips=tuple(float(c) for c in _CLIPS.value),
            server_learning_rates=tuple(float(r) for r in _SERVER_LRS.value),
            seeds=tuple(int(s) for s in _TUNE_SEEDS.value),
        )
      settings[preset] = dataclasses.replace(
          PRESETS[preset],
          epsilons=tuple(float(e) for e in _EPSILONS.value),
          seeds=tuple(int(s) for s in _SEEDS.value),
          methods=tuple(_METHODS.value),
          tuning=tuning,
      )
      if tuning is not None and set(tuning.seeds) & set(settings[preset].seeds):
        raise ValueError('--tune_seeds must be apart from --seeds')
  except ValueError as e:
    _CLI.fail(str(e))
  for preset, setting in settings.items():
    root = os.path.join(_OUTPUT_DIR.value, preset)
    measure = 'loss' if setting.task.startswith('shakespeare') else 'accuracy'
    results = command.main(
        'equal_epsilon.py',
        lambda setting=setting, root=root, measure=measure: _run(
            setting, root, measure
        ),
        root,
        _VERBOSE.value,
    )
    if setting.tuning is not None:
      results, chosen, tuned = results
      grid_text = equal_epsilon.tuning_table(setting, tuned, measure)
      path = os.path.join(_OUTPUT_DIR.value, f'{preset}_tuning.md')
      with open(path, 'w') as f:
        f.write(grid_text + '\n')
    else:
      chosen = None
    text = equal_epsilon.table(setting, results, measure, chosen)
    with open(os.path.join(_OUTPUT_DIR.value, f'{preset}.md'), 'w') as f:
      f.write(text + '\n')
    print(f'## {preset}\n\n{text}\n')


def _run(setting, root, measure):
  """The preset's runs: the reported ones, after the tuning runs if any."""
  if setting.tuning is None:
    return grid.run(equal_epsilon.configs(setting), root, progress=False)
  tuned = grid.run(equal_epsilon.tuning_configs(setting), root, progress=False)
  chosen = equal_epsilon.choose(setting, tuned, measure)
  results = grid.run(
      equal_epsilon.configs(setting, chosen), root, progress=False
  )
  return results, chosen, tuned


if __name__ == '__main__':
  _CLI.run(main)
