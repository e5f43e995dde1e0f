"""A `train_model` run with `TrainModelAccounting`, killed where told."""

import argparse
import os
import signal

import tensorflow_federated as tff

from tests import array_clients
from tests import tiny_models
from tff_priv import runtime
from tff_priv.aggregators import smp
from tff_priv.learning import client_metrics
from tff_priv.program import train_model_accounting as tma


def _append(path, line):
  with open(path, 'a') as f:
    f.write(f'{line}\n')
    f.flush()
    os.fsync(f.fileno())


_SIGNAL = [signal.SIGKILL]


def _kill_if(kill_at, point, round_num):
  if kill_at == f'{point}:{round_num}':
    os.kill(os.getpid(), _SIGNAL[0])


class _LoggedRelease(tff.program.ReleaseManager):

  def __init__(self, root, kill_at):
    self._root, self._kill_at = root, kill_at

  async def release(self, value, key=None):
    del value
    _append(os.path.join(self._root, 'released.log'), key)
    _kill_if(self._kill_at, 'released', key)


class _KilledStateManager(tma.SerialFileProgramStateManager):

  def __init__(self, root_dir, kill_at):
    super().__init__(root_dir)
    self._kill_at = kill_at

  def save(self, program_state, version):
    done = super().save(program_state, version)  # On disk when it returns.
    _kill_if(self._kill_at, 'saved', version)
    return done


def main():
  """Runs the command below (a test helper).

    python -m tests.program.train_model_run --root DIR --rounds R
        [--kill_at charged:N | saved:N | released:N] [--signal SIGINT]

  Runs (or resumes) R rounds of Fed-SMP in `train_model` over 6 array clients, 2
  a round, with its state and ledger under DIR, through
  `TrainModelAccounting.run`. Appends each round that ran to DIR/ran.log (before
  its charge) and each release of training metrics to DIR/released.log
  (fsync'd), and sends itself SIGKILL (or `--signal`) right after round N's
  charge, state save or metrics release.
  """
  parser = argparse.ArgumentParser()
  parser.add_argument('--root', required=True)
  parser.add_argument('--rounds', type=int, required=True)
  parser.add_argument('--kill_at')
  parser.add_argument('--signal', default='SIGKILL')
  args = parser.parse_args()
  _SIGNAL[0] = signal.Signals[args.signal]
  runtime.set_context('simulation', program=True)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      tiny_models.softmax_model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=smp.SparsifiedSecureSumFactory(0.8, 1.0, 0.5, 2),
      metrics_aggregator=client_metrics.no_client_metrics,
  )
  accounting = tma.TrainModelAccounting(
      args.root, population=6, clients_per_round=2
  )

  def should_discard_round(output):
    _append(os.path.join(args.root, 'ran.log'), accounting.rounds + 1)
    discard = accounting.should_discard_round(output)
    _kill_if(args.kill_at, 'charged', accounting.rounds)
    return discard

  accounting.run(
      tff.learning.programs.train_model(
          train_process=process,
          train_data_source=accounting.data_source(array_clients.source(6)),
          train_per_round_clients=2,
          train_total_rounds=args.rounds,
          should_discard_round=should_discard_round,
          program_state_manager=_KilledStateManager(
              os.path.join(args.root, 'state'), args.kill_at
          ),
          model_output_manager=tff.program.MemoryReleaseManager(),
          train_metrics_manager=_LoggedRelease(args.root, args.kill_at),
          evaluation_manager=None,
          evaluation_periodicity=1,
      ),
      name='train_model_run',
  )


if __name__ == '__main__':
  main()
