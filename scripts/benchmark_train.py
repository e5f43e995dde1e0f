r"""Runs train.py and reports its time to round 1 and its memory round by round.

Every argument after `--` goes to scripts/train.py; the resident memory of
train.py and its TFF workers is read at every round (`--rounds_shown` picks
the rounds printed; all are in --json_output).

    .venv/bin/python scripts/benchmark_train.py --rounds_shown=1,5,50 -- \
        --task=emnist_shaped --model=mlp --mechanism=dp_fedavg \
        --epsilon=8 --clients_per_round=100 --total_rounds=50 \
        --root_output_dir=/tmp/emnist_shaped_50
"""

import json
import os
import sys

from absl import app
from absl import flags

from tff_priv.benchmarks import memory

_SHOWN = flags.DEFINE_list('rounds_shown', ['1', '5'], 'Rounds printed.')
_JSON = flags.DEFINE_string('json_output', None, 'Write every figure here.')


def main(argv):
  train_args = argv[1:]
  if not train_args:
    raise app.UsageError('give train.py its flags after --')
  result = memory.train_run(
      train_args, script=os.path.join(os.path.dirname(__file__), 'train.py')
  )
  if result['returncode'] != 0:
    print(
        f'benchmark_train.py: error: train.py exited '
        f"{result['returncode']}: {result['stderr_tail'].strip()}",
        file=sys.stderr,
    )
    sys.exit(1)
  rss = result['rss_mb']
  print(
      f"time to round 1: {result['seconds_to_round_1']:.1f} s; "
      f"whole run {result['seconds']:.1f} s; {result['last_line']}"
  )
  for r in (int(x) for x in _SHOWN.value):
    if r in rss:
      print(f'round {r}: {rss[r]:,.0f} MB (train.py and its TFF workers)')
  if _JSON.value:
    with open(_JSON.value, 'w') as f:
      json.dump(result, f, indent=1)


if __name__ == '__main__':
  app.run(main)
