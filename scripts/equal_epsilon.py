r"""DP-FedAvg (fixed and adaptive clip), DP-FTRL and BLT at equal epsilon.

BLT per epoch and cyclic. Flags -> `tff_priv.experiments.equal_epsilon.Setting`
per preset -> labelled `RunConfig`s -> `tff_priv.program.grid.run` (each run in
<output_dir>/<preset>/<label>/, charged by its own ledger) -> one Markdown
table per preset (<output_dir>/<preset>.md, and stdout). Presets: mnist5k_mlp
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
      settings[preset] = dataclasses.replace(
          PRESETS[preset],
          epsilons=tuple(float(e) for e in _EPSILONS.value),
          seeds=tuple(int(s) for s in _SEEDS.value),
          methods=tuple(_METHODS.value),
      )
  except ValueError as e:
    _CLI.fail(str(e))
  for preset, setting in settings.items():
    root = os.path.join(_OUTPUT_DIR.value, preset)
    results = command.main(
        'equal_epsilon.py',
        lambda setting=setting, root=root: grid.run(
            equal_epsilon.configs(setting), root, progress=False
        ),
        root,
        _VERBOSE.value,
    )
    text = equal_epsilon.table(
        setting,
        results,
        'loss' if setting.task.startswith('shakespeare') else 'accuracy',
    )
    with open(os.path.join(_OUTPUT_DIR.value, f'{preset}.md'), 'w') as f:
      f.write(text + '\n')
    print(f'## {preset}\n\n{text}\n')


if __name__ == '__main__':
  _CLI.run(main)
