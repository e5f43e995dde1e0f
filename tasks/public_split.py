"""A public set held out of a task's clients (Fed-SMP's D_pub for top_k).

`hold_out_public_clients(task, num_public)` splits the task's training
clients into the first `num_public` (the public set, which the server may read
and which no sampling ever draws) and the rest (the private population, over
which the privacy is accounted). The public clients' data get no protection:
the eps of a run covers the private clients only.
"""

from typing import Any

import tensorflow as tf


def hold_out_public_clients(
    task: Any, num_public: int
) -> tuple[tf.data.Dataset, list[str]]:
  """The first `num_public` training clients of `task` as a public set.

  The public set is the concatenation, in client order, of the public
  clients' datasets, each preprocessed by the task's `train_preprocess_fn`
  exactly as a sampled client's data is: the same per-client limit
  (`ClientSpec.max_elements`), shuffle, batching and repeated local epochs. So
  training on D_pub is training on those clients one after another as
  clients, and a batch never mixes two clients.

  Args:
    task: a `tff.simulation.baselines.BaselineTask` (e.g. `tasks.get_task`).
    num_public: how many clients (the first ones of `train_data.client_ids`)
      form the public set; at least 1, and fewer than the task's clients.

  Returns:
    (public_data, private_ids): the public clients' preprocessed datasets
    concatenated in client order, and the ids of the remaining clients in
    their order.

  Raises:
    TypeError: `num_public` is not an integer.
    ValueError: `num_public` < 1, or it leaves no private client.
  """
  if isinstance(num_public, bool) or not isinstance(num_public, int):
    raise TypeError(f'num_public must be an integer, got {num_public!r}')
  train = task.datasets.train_data
  ids = list(train.client_ids)
  if num_public < 1:
    raise ValueError(f'num_public must be >= 1, got {num_public}')
  if num_public >= len(ids):
    raise ValueError(
        f'public_clients ({num_public}) must leave private clients: the task '
        f'has {len(ids)}'
    )
  preprocess = task.datasets.train_preprocess_fn
  datasets = [
      preprocess(train.create_tf_dataset_for_client(c))
      for c in ids[:num_public]
  ]
  public = datasets[0]
  for dataset in datasets[1:]:
    public = public.concatenate(dataset)
  return public, ids[num_public:]
