"""Splits a labelled data set over simulated clients (pure numpy).

Every function takes the example labels (or the number of examples) and a
seed, and returns one int64 index array per client: client `i` holds the
examples `indices[i]`. The result is a deterministic function of the
arguments (the seed drives one `np.random.default_rng`), and no example is
given to two clients. The partitions are `iid`, `label_shards` and
`dirichlet` (`partition` picks one by name); `stratified_holdout` splits off a
test set with the same class mix.
"""

from collections.abc import Sequence
from typing import Optional

import numpy as np

PARTITIONS = ('iid', 'shards', 'dirichlet')


def _check_positive_int(name: str, value) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise TypeError(f'{name} must be an int, got {type(value).__name__}')
  if value <= 0:
    raise ValueError(f'{name} must be positive, got {value}')
  return int(value)


def _check_labels(labels) -> np.ndarray:
  labels = np.asarray(labels)
  if labels.ndim != 1 or labels.size == 0:
    raise ValueError(
        f'labels must be a non-empty 1-D array, got shape {labels.shape}'
    )
  if not np.issubdtype(labels.dtype, np.integer):
    raise TypeError(f'labels must be integers, got dtype {labels.dtype}')
  return labels


def _class_pools(labels: np.ndarray, rng: np.random.Generator):
  """Classes present and, per class, its example indices in random order."""
  classes = np.unique(labels)
  pools = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
  return classes, pools


def iid(
    num_examples: int,
    num_clients: int,
    seed: int,
    samples_per_client: Optional[int] = None,
) -> list[np.ndarray]:
  """A random permutation of the examples cut into `num_clients` parts.

  LDP-FL's "IID equal split". Without `samples_per_client` every example is
  assigned, the part sizes differ by at most one.

  Args:
    num_examples: how many examples there are.
    num_clients: number of parts.
    seed: seed of the permutation.
    samples_per_client: part size; `None` assigns every example (sizes differ
      by at most one). `num_clients * samples_per_client` must not exceed
      `num_examples`.

  Returns:
    `num_clients` int64 index arrays.
  """
  num_examples = _check_positive_int('num_examples', num_examples)
  num_clients = _check_positive_int('num_clients', num_clients)
  if num_clients > num_examples:
    raise ValueError(
        f'num_clients ({num_clients}) exceeds the number of examples '
        f'({num_examples})'
    )
  order = np.random.default_rng(seed).permutation(num_examples)
  if samples_per_client is None:
    return [a.astype(np.int64) for a in np.array_split(order, num_clients)]
  samples_per_client = _check_positive_int(
      'samples_per_client', samples_per_client
  )
  if num_clients * samples_per_client > num_examples:
    raise ValueError(
        f'samples_per_client ({samples_per_client}) x num_clients '
        f'({num_clients}) exceeds the number of examples ({num_examples})'
    )
  used = order[: num_clients * samples_per_client].astype(np.int64)
  return list(used.reshape(num_clients, samples_per_client))


def assign_classes(
    num_classes: int,
    num_clients: int,
    classes_per_client: int,
    rng: np.random.Generator,
) -> list[np.ndarray]:
  """Random distinct classes per client, each class used equally often.

  Class c is held by u_c clients, u_c in {floor(S / C), ceil(S / C)} with
  S = num_clients * classes_per_client (which classes get the extra one is
  random). Clients are filled one by one; a client must take every class
  whose remaining count equals the number of clients still to fill, and draws
  the rest uniformly among the classes with room left. This keeps the
  assignment feasible at every step (remaining counts never exceed the
  clients left, and at least `classes_per_client` classes have room), so it
  never fails.

  Args:
    num_classes: C.
    num_clients: N.
    classes_per_client: k, 1 <= k <= C.
    rng: the random generator.

  Returns:
    N sorted arrays of k distinct class positions in [0, C).
  """
  total = num_clients * classes_per_client
  remaining = np.full(num_classes, total // num_classes)
  remaining[rng.permutation(num_classes)[: total % num_classes]] += 1
  assignment = []
  for left in range(num_clients, 0, -1):
    forced = np.flatnonzero(remaining == left)
    optional = np.flatnonzero((remaining > 0) & (remaining < left))
    extra = rng.choice(
        optional, size=classes_per_client - forced.size, replace=False
    )
    chosen = np.sort(np.concatenate([forced, extra]))
    remaining[chosen] -= 1
    assignment.append(chosen)
  return assignment


def label_shards(
    labels: Sequence[int],
    num_clients: int,
    classes_per_client: int,
    seed: int,
    samples_per_client: Optional[int] = None,
) -> list[np.ndarray]:
  """Each client holds `classes_per_client` distinct classes in equal amounts.

  UDP's "each MT has four kinds of digits with the same amount"; the
  pathological non-IID split of McMahan et al. 2017 with distinct classes per
  client. Each class is held by `u_c = num_clients * classes_per_client / C`
  clients (+-1), the classes of a client are drawn at random under that
  constraint, so clients differ in their sets of classes. (With
  num_clients * classes_per_client < C some classes are held by no client and
  their examples are left out.)

  Args:
    labels: 1-D integer labels.
    num_clients: N.
    classes_per_client: k distinct classes per client, at most the number of
      classes present.
    seed: the seed.
    samples_per_client: m, a multiple of k: every client gets exactly m / k
      examples of each of its classes. `None`: each class's examples are
      split as evenly as possible over the clients that hold it (every
      example is assigned; a client's amounts differ by the class sizes).

  Returns:
    N int64 index arrays.
  """
  labels = _check_labels(labels)
  num_clients = _check_positive_int('num_clients', num_clients)
  classes_per_client = _check_positive_int(
      'classes_per_client', classes_per_client
  )
  rng = np.random.default_rng(seed)
  classes, pools = _class_pools(labels, rng)
  if classes_per_client > classes.size:
    raise ValueError(
        f'classes_per_client ({classes_per_client}) exceeds the number of '
        f'classes ({classes.size})'
    )
  per_class = None
  if samples_per_client is not None:
    samples_per_client = _check_positive_int(
        'samples_per_client', samples_per_client
    )
    if samples_per_client % classes_per_client:
      raise ValueError(
          f'samples_per_client ({samples_per_client}) must be a multiple of '
          f'classes_per_client ({classes_per_client})'
      )
    per_class = samples_per_client // classes_per_client
  assignment = assign_classes(
      classes.size, num_clients, classes_per_client, rng
  )
  holders = [[] for _ in classes]
  for client, chosen in enumerate(assignment):
    for c in chosen:
      holders[c].append(client)
  parts = [[] for _ in range(num_clients)]
  for c, clients in enumerate(holders):
    if not clients:
      continue
    pool = pools[c]
    if per_class is None:
      if pool.size < len(clients):
        raise ValueError(
            f'class {classes[c]} has {pool.size} examples for '
            f'{len(clients)} clients; use fewer num_clients'
        )
      chunks = np.array_split(pool, len(clients))
    else:
      if pool.size < per_class * len(clients):
        raise ValueError(
            f'samples_per_client ({samples_per_client}) is too large: class '
            f'{classes[c]} has {pool.size} examples, {len(clients)} clients '
            f'need {per_class} each'
        )
      chunks = np.split(pool[: per_class * len(clients)], len(clients))
    for client, chunk in zip(clients, chunks):
      parts[client].append(chunk)
  return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


def _largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
  """Non-negative integers proportional to `weights` that sum to `total`."""
  raw = weights / weights.sum() * total
  counts = np.floor(raw).astype(np.int64)
  short = total - counts.sum()
  counts[np.argsort(-(raw - counts), kind='stable')[:short]] += 1
  return counts


def dirichlet(
    labels: Sequence[int],
    num_clients: int,
    alpha: float,
    seed: int,
    samples_per_client: Optional[int] = None,
    min_samples_per_client: int = 1,
    max_attempts: int = 100,
) -> list[np.ndarray]:
  """Label skew drawn from a Dirichlet(alpha) prior.

  Without `samples_per_client` (Yurochkin et al. 2019, Wang et al. 2020): for
  each class c, p_c ~ Dir(alpha 1_N) and the examples of class c are cut in
  proportions p_c over the N clients, so every example is assigned and the
  client sizes vary. With `samples_per_client = m` (Hsu, Qi, Brown 2019):
  client i draws q_i ~ Dir(alpha p), p the class frequencies, and takes
  round(m q_i) examples of each class (largest remainder, so exactly m).
  Smaller alpha means more skew; alpha -> inf gives the IID class mix.

  Args:
    labels: 1-D integer labels.
    num_clients: N.
    alpha: Dirichlet concentration, > 0.
    seed: the seed.
    samples_per_client: `None` for the per-class split of every example, or m
      for the per-client mix of exactly m examples.
    min_samples_per_client: per-class split only: draws that leave a client
      with fewer examples are redrawn (the usual practice, Wang et al. 2020).
    max_attempts: redraws before giving up with a ValueError.

  Returns:
    N int64 index arrays.
  """
  labels = _check_labels(labels)
  num_clients = _check_positive_int('num_clients', num_clients)
  if isinstance(alpha, bool) or not isinstance(
      alpha, (int, float, np.floating, np.integer)
  ):
    raise TypeError(f'alpha must be a number, got {type(alpha).__name__}')
  if not np.isfinite(alpha) or alpha <= 0:
    raise ValueError(f'alpha must be positive and finite, got {alpha}')
  rng = np.random.default_rng(seed)
  classes, pools = _class_pools(labels, rng)

  if samples_per_client is not None:
    return _dirichlet_mix(
        classes, pools, num_clients, alpha, rng, samples_per_client
    )

  min_samples_per_client = _check_positive_int(
      'min_samples_per_client', min_samples_per_client
  )
  if num_clients * min_samples_per_client > labels.size:
    raise ValueError(
        f'num_clients ({num_clients}) x min_samples_per_client '
        f'({min_samples_per_client}) exceeds the number of examples '
        f'({labels.size})'
    )
  for _ in range(max_attempts):
    parts = [[] for _ in range(num_clients)]
    for pool in pools:
      proportions = rng.dirichlet(np.full(num_clients, float(alpha)))
      cuts = np.cumsum(_largest_remainder(proportions, pool.size))[:-1]
      for client, chunk in enumerate(np.split(pool, cuts)):
        parts[client].append(chunk)
    result = [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
    if min(r.size for r in result) >= min_samples_per_client:
      return result
  raise ValueError(
      f'no Dirichlet(alpha={alpha}) draw in {max_attempts} attempts gave every '
      f'one of {num_clients} clients at least {min_samples_per_client} '
      'examples; raise alpha or lower num_clients'
  )


def _dirichlet_mix(classes, pools, num_clients, alpha, rng, samples_per_client):
  """`dirichlet` with `samples_per_client`: m examples in a drawn class mix."""
  m = _check_positive_int('samples_per_client', samples_per_client)
  prior = np.array([p.size for p in pools], dtype=np.float64)
  prior /= prior.sum()
  counts = np.stack(
      [
          _largest_remainder(rng.dirichlet(alpha * prior), m)
          for _ in range(num_clients)
      ]
  )
  demand = counts.sum(axis=0)
  for c, pool in enumerate(pools):
    if demand[c] > pool.size:
      raise ValueError(
          f'samples_per_client ({m}) x num_clients ({num_clients}) is too '
          f'large for alpha={alpha}: class {classes[c]} is asked for '
          f'{demand[c]} examples and has {pool.size}'
      )
  starts = np.concatenate(
      [np.zeros((1, classes.size), np.int64), np.cumsum(counts, axis=0)]
  )
  return [
      np.sort(
          np.concatenate(
              [
                  pools[c][starts[i, c] : starts[i + 1, c]]
                  for c in range(classes.size)
              ]
          )
      ).astype(np.int64)
      for i in range(num_clients)
  ]


def stratified_holdout(
    labels: Sequence[int], test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
  """Splits off round(test_fraction * n_c) random examples of every class c.

  Args:
    labels: 1-D integer labels.
    test_fraction: in (0, 1).
    seed: the seed.

  Returns:
    (train indices, test indices), sorted int64 arrays that partition
    range(len(labels)).
  """
  labels = _check_labels(labels)
  if not 0.0 < float(test_fraction) < 1.0:
    raise ValueError(f'test_fraction must be in (0, 1), got {test_fraction}')
  rng = np.random.default_rng(seed)
  _, pools = _class_pools(labels, rng)
  test = [p[: int(round(test_fraction * p.size))] for p in pools]
  train = [p[int(round(test_fraction * p.size)) :] for p in pools]
  return (
      np.sort(np.concatenate(train)).astype(np.int64),
      np.sort(np.concatenate(test)).astype(np.int64),
  )


def partition(
    labels: Sequence[int],
    num_clients: int,
    seed: int,
    method: str = 'iid',
    samples_per_client: Optional[int] = None,
    classes_per_client: int = 2,
    alpha: float = 0.5,
) -> list[np.ndarray]:
  """Dispatches to `iid`, `label_shards` or `dirichlet` by `method`."""
  if method not in PARTITIONS:
    raise ValueError(f'partition must be one of {PARTITIONS}, got {method!r}')
  labels = _check_labels(labels)
  if method == 'iid':
    return iid(labels.size, num_clients, seed, samples_per_client)
  if method == 'shards':
    return label_shards(
        labels, num_clients, classes_per_client, seed, samples_per_client
    )
  return dirichlet(labels, num_clients, alpha, seed, samples_per_client)
