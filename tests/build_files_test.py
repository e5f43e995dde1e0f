"""Checks the Bazel BUILD files against the source tree.

Bazel cannot fetch its rules offline on the development machines, so instead
of `bazel test` this test reads every BUILD file (Starlark is a subset of
Python syntax) and checks what a Bazel build would catch:

* every Python file of the tree belongs to exactly one target (as a src), except
  setup.py, which is packaging, not a module;
* every label in `deps` and `data` names a target or an exported/source file
  that exists;
* every import of one of the repository's own modules is covered: the imported
  file is a src of the importing target or of one of its direct deps.
"""

import ast
import os
import unittest

try:
  import tomllib  # Python >= 3.11.
except ImportError:  # Python 3.9, 3.10: the package list is not checked.
  tomllib = None

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_DIRS = {'.venv', '.git', '__pycache__', 'build', 'dist', 'output'}
_NOT_MODULES = {'setup.py'}
_RULES = {'py_library', 'py_test', 'py_binary', 'filegroup'}
_IGNORED_CALLS = {'load', 'package', 'licenses'}


class Target:

  def __init__(self, package, kind, attrs):
    self.package = package
    self.kind = kind
    self.name = attrs['name']
    self.srcs = [_file_path(package, s) for s in attrs.get('srcs', [])]
    self.deps = [_resolve(package, d) for d in attrs.get('deps', [])]
    self.data = [_resolve(package, d) for d in attrs.get('data', [])]

  @property
  def label(self):
    return f'//{self.package}:{self.name}'


def _file_path(package, src):
  if src.startswith((':', '//', '@')):
    raise ValueError(f'//{package}: srcs must be files of the package, got {src}')
  return os.path.join(package, src) if package else src


def _resolve(package, label):
  """Canonical '//pkg:name' of a label written in `package`."""
  if label.startswith('@'):
    raise ValueError(
        f'//{package}: external label {label}: third-party packages come from '
        'the environment, as in TFF'
    )
  if label.startswith(':'):
    return f'//{package}{label}'
  if label.startswith('//'):
    if ':' in label:
      return label
    return f'{label}:{label.rsplit("/", 1)[-1]}'
  return f'//{package}:{label}'


def _literal(node, where):
  try:
    return ast.literal_eval(node)
  except ValueError as e:
    raise ValueError(f'{where}: only literal attributes are supported') from e


def _parse_build(package):
  path = os.path.join(_ROOT, package, 'BUILD')
  with open(path) as f:
    tree = ast.parse(f.read(), filename=path)
  targets, exported = [], []
  for stmt in tree.body:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
      raise ValueError(f'{path}:{stmt.lineno}: unsupported statement')
    call = stmt.value
    fn = call.func.id
    where = f'{path}:{stmt.lineno}'
    if fn in _IGNORED_CALLS:
      continue
    if fn == 'exports_files':
      exported.extend(_literal(call.args[0], where))
      continue
    if fn not in _RULES:
      raise ValueError(f'{where}: unknown rule {fn}')
    attrs = {k.arg: _literal(k.value, where) for k in call.keywords}
    targets.append(Target(package, fn, attrs))
  return targets, exported


def _walk():
  """(packages with a BUILD file, every .py file), relative to the root."""
  packages, py_files = [], []
  for dirpath, dirnames, filenames in os.walk(_ROOT):
    dirnames[:] = sorted(
        d for d in dirnames if d not in _SKIP_DIRS and not d.endswith('.egg-info')
    )
    rel = os.path.relpath(dirpath, _ROOT)
    rel = '' if rel == '.' else rel
    if 'BUILD' in filenames:
      packages.append(rel)
    py_files.extend(
        os.path.join(rel, f) if rel else f
        for f in filenames
        if f.endswith('.py')
    )
  return packages, sorted(py_files)


def _imported_files(path, own_files):
  """Repository files imported by the Python file at `path`."""
  with open(os.path.join(_ROOT, path)) as f:
    tree = ast.parse(f.read(), filename=path)

  def module_file(dotted):
    base = dotted.replace('.', '/')
    if base.split('/')[0] == 'tff_priv_tasks':  # Installed name of tasks/.
      base = 'tasks' + base[len('tff_priv_tasks'):]
    for candidate in (base + '.py', base + '/__init__.py'):
      if candidate in own_files:
        return candidate
    return None

  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        found.add(module_file(alias.name))
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      for alias in node.names:
        sub = module_file(f'{node.module}.{alias.name}')
        found.add(sub or module_file(node.module))
  found.discard(None)
  return found


class BuildFilesTest(unittest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.packages, cls.py_files = _walk()
    cls.targets, cls.files = {}, set()
    for package in cls.packages:
      targets, exported = _parse_build(package)
      cls.files.add(os.path.join(package, 'BUILD') if package else 'BUILD')
      for f in exported:
        cls.files.add(_file_path(package, f))
      for t in targets:
        assert t.label not in cls.targets, f'duplicate target {t.label}'
        cls.targets[t.label] = t
        cls.files.update(t.srcs)

  def test_layout_has_build_files(self):
    for package in ('', 'tff_priv', 'tests'):
      self.assertIn(package, self.packages)

  def test_every_python_file_belongs_to_one_target(self):
    owners = {}
    for t in self.targets.values():
      for src in t.srcs:
        self.assertTrue(
            os.path.isfile(os.path.join(_ROOT, src)), f'{t.label}: no file {src}'
        )
        self.assertNotIn(src, owners, f'{src} in {owners.get(src)} and {t.label}')
        owners[src] = t.label
    missing = [
        f for f in self.py_files if f not in owners and f not in _NOT_MODULES
    ]
    self.assertEqual(missing, [], 'Python files that belong to no BUILD target')

  def test_every_label_resolves(self):
    for t in self.targets.values():
      for label in t.deps:
        self.assertIn(label, self.targets, f'{t.label}: dep {label} does not exist')
      for label in t.data:
        if label in self.targets:
          continue
        package, name = label[2:].split(':')
        path = os.path.join(package, name) if package else name
        self.assertIn(path, self.files, f'{t.label}: data {label} does not exist')
        self.assertTrue(os.path.exists(os.path.join(_ROOT, path)))

  def test_imports_of_own_modules_are_declared(self):
    own = set(self.py_files)
    owner = {src: t.label for t in self.targets.values() for src in t.srcs}
    for t in self.targets.values():
      reachable = set(t.srcs)
      for dep in t.deps:
        reachable.update(self.targets[dep].srcs)
      for src in t.srcs:
        for imported in _imported_files(src, own):
          self.assertIn(
              imported,
              reachable,
              f'{t.label}: {src} imports {imported} (target '
              f'{owner.get(imported)}) without a dep on it',
          )

  def test_tests_are_py_tests(self):
    for t in self.targets.values():
      for src in t.srcs:
        if src.endswith('_test.py'):
          self.assertEqual(t.kind, 'py_test', f'{src} is in a {t.kind}')


class PackageListTest(unittest.TestCase):
  """pyproject.toml lists its packages: a package it leaves out is missing
  from the wheel (the editable install of the clone would not show it)."""

  def test_every_package_of_the_tree_is_listed(self):
    if tomllib is None:
      self.skipTest('tomllib needs Python 3.11')
    with open(os.path.join(_ROOT, 'pyproject.toml'), 'rb') as f:
      setup = tomllib.load(f)['tool']['setuptools']
    dirs = {name: path for name, path in setup['package-dir'].items()}
    dirs['tff_priv'] = 'tff_priv'
    found = set()
    for top, path in dirs.items():
      for here, subdirs, files in os.walk(os.path.join(_ROOT, path)):
        subdirs[:] = [d for d in subdirs if d not in _SKIP_DIRS]
        if '__init__.py' in files:
          relative = os.path.relpath(here, os.path.join(_ROOT, path))
          found.add(top if relative == '.'
                    else f'{top}.{relative.replace(os.sep, ".")}')
    self.assertCountEqual(setup['packages'], found)


if __name__ == '__main__':
  unittest.main()
