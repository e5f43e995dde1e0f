"""The small scripts/train.py runs the script tests share."""

from tff_priv.program import sampling

NUM_CLIENTS = 10  # The 'digits' task.
K = 3
COMMON = (
    '--task=digits',
    f'--clients_per_round={K}',
    '--batch_size=20',
    '--client_learning_rate=0.1',
    '--eval_every=1',
    '--noprogress',
    # Reproducible draws for the tests' checks (by default the sampling seed
    # is secret).
    '--sampling_seed=0',
)


def _smp_seed():
  """A seed whose Poisson draws give clients in rounds 1, 3, 4, 5, none in 2."""
  draw = sampling.ClientSampling('poisson', NUM_CLIENTS, K)
  for seed in range(100_000):
    sizes = [len(draw.sample_indices(seed, r)) for r in range(1, 6)]
    if sizes[1] == 0 and all(sizes[r] for r in (0, 2, 3, 4)):
      return seed
  raise AssertionError('no such seed')


SMP_SEED = _smp_seed()
PUBLIC_CLIENTS = 2
SMP_ROUNDS = 5
# The runs are on 'digits', 3 clients a round. `MECHANISM_FLAGS` holds one
# 2-round run per mechanism (smp with both masks); the smp run's seed makes its
# Poisson draws give clients in rounds 1, 3, 4, 5 and none in round 2.
MECHANISM_FLAGS = {
    'none': (),
    'dp_fedavg': ('--noise_multiplier=0.5', '--clip=1.0'),
    'dp_ftrl': ('--noise_multiplier=1.0', '--clip=1.0'),
    'distortion': (
        '--noise_multiplier=0.5',
        '--parameter_variance=1e-4',
        '--rho=0.3',
    ),
    'udp': ('--epsilon=8', '--clip=1.0'),
    'ldp': ('--ldp_epsilon=2', '--ldp_radius=0.05'),
    # Also train_script_test's kill configuration and uninterrupted reference.
    # The later --eval_every and --total_rounds win over COMMON's and the 2.
    'smp': (
        '--noise_multiplier=0.8',
        '--compression=0.2',
        f'--sampling_seed={SMP_SEED}',
        f'--total_rounds={SMP_ROUNDS}',
        f'--eval_every={SMP_ROUNDS}',
    ),
    # Fed-SMP's top_k mask: 2 public clients held out, K of the other 8.
    'smp_top_k': (
        '--noise_multiplier=0.8',
        '--compression=0.01',
        '--mask=top_k',
        f'--public_clients={PUBLIC_CLIENTS}',
    ),
}
# Runs of another name than their mechanism.
RUN_MECHANISM = {'smp_top_k': 'smp'}
