"""Lazy package exports: a package's public names, imported on first use.

PEP 562 module `__getattr__`, so that `from tff_priv.accounting import
PrivacyLedger` works while `import tff_priv.<package>` imports nothing heavy
until a name is used (`import tff_priv` imports no TensorFlow).
"""

import importlib
from typing import Callable, Mapping, Union

# name -> module, or name -> (module, attribute) for a renamed export.
Exports = Mapping[str, Union[str, tuple[str, str]]]


def lazy(package: str, exports: Exports) -> tuple[Callable, Callable]:
  """(`__getattr__`, `__dir__`) for `package`'s module namespace."""

  def __getattr__(name):  # noqa: N807 (PEP 562)  # pylint: disable=invalid-name
    target = exports.get(name)
    if target is None:
      raise AttributeError(f'module {package!r} has no attribute {name!r}')
    module, attribute = (target, name) if isinstance(target, str) else target
    value = getattr(importlib.import_module(module), attribute)
    setattr(importlib.import_module(package), name, value)
    return value

  def __dir__():  # noqa: N807 (PEP 562)  # pylint: disable=invalid-name
    return sorted(set(vars(importlib.import_module(package))) | set(exports))

  return __getattr__, __dir__
