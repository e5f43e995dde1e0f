"""A run's model files: a model's weights as named arrays in one `.npz`."""

import os
from typing import Sequence

import numpy as np


def flat(weights) -> np.ndarray:
  """A model's trainable weights as one float64 vector (the update's order)."""
  return np.concatenate(
      [np.ravel(np.asarray(w, np.float64)) for w in weights.trainable]
  )


def write_model(path: str, weights) -> None:
  """Writes `weights` (`.trainable`, `.non_trainable`) atomically.

  The file holds `trainable_<i>` and `non_trainable_<i>` arrays.
  """
  arrays = {
      f'{part}_{i}': np.asarray(w)
      for part, values in (
          ('trainable', weights.trainable),
          ('non_trainable', weights.non_trainable),
      )
      for i, w in enumerate(values)
  }
  tmp = f'{path}.tmp{os.getpid()}.npz'
  np.savez(tmp, **arrays)
  os.replace(tmp, path)


def _part(arrays, part: str) -> list[np.ndarray]:
  count = sum(1 for k in arrays.files if k.startswith(f'{part}_'))
  return [arrays[f'{part}_{i}'] for i in range(count)]


def read_model(path: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """(trainable, non_trainable) arrays of a model `write_model` wrote."""
  with np.load(path) as arrays:
    return _part(arrays, 'trainable'), _part(arrays, 'non_trainable')


def read_flat(path: str) -> np.ndarray:
  """`flat` of a model `write_model` wrote."""
  trainable, _ = read_model(path)
  return _concat(trainable)


def _concat(arrays: Sequence[np.ndarray]) -> np.ndarray:
  return np.concatenate([np.ravel(a.astype(np.float64)) for a in arrays])
