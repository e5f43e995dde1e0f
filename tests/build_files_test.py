"""BUILD files are what scripts/build_files.py writes and Bazel would accept."""

import ast
import importlib.util
import os
import shutil
import tempfile
import unittest

try:
  import tomllib  # Python >= 3.11.
except ImportError:  # Python 3.9, 3.10: the package list is not checked.
  tomllib = None

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_DIRS = {'.venv', '.git', '__pycache__', 'build', 'dist', 'output'}
_NOT_MODULES = {'setup.py'}
_IGNORE = shutil.ignore_patterns('__pycache__', '*.pyc', 'output')
_RULES = {'py_library', 'py_test', 'py_binary', 'filegroup'}
_IGNORED_CALLS = {'load', 'licenses'}


class Target:

  def __init__(self, package, kind, attrs):
    self.package = package
    self.kind = kind
    self.name = attrs['name']
    self.srcs = [_file_path(package, s) for s in attrs.get('srcs', [])]
    self.deps = [_resolve(package, d) for d in attrs.get('deps', [])]
    self.data = [_resolve(package, d) for d in attrs.get('data', [])]
    self.visibility = attrs.get('visibility')

  @property
  def label(self):
    return f'//{self.package}:{self.name}'


def _file_path(package, src):
  if src.startswith((':', '//', '@')):
    raise ValueError(
        f'//{package}: srcs must be files of the package, got {src}'
    )
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
  targets, exported, default = [], [], ['//visibility:private']
  for stmt in tree.body:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
      raise ValueError(f'{path}:{stmt.lineno}: unsupported statement')
    call = stmt.value
    fn = call.func.id
    where = f'{path}:{stmt.lineno}'
    if fn in _IGNORED_CALLS:
      continue
    if fn == 'package':
      default = _literal(call.keywords[0].value, where)
      continue
    if fn == 'exports_files':
      exported.extend(_literal(call.args[0], where))
      continue
    if fn not in _RULES:
      raise ValueError(f'{where}: unknown rule {fn}')
    attrs = {k.arg: _literal(k.value, where) for k in call.keywords}
    targets.append(Target(package, fn, attrs))
  return targets, exported, default


def _walk():
  """Packages with a BUILD file, relative to the root (the top level is '')."""
  packages = ['']
  for dirpath, dirnames, filenames in os.walk(_ROOT):
    dirnames[:] = sorted(
        d
        for d in dirnames
        if d not in _SKIP_DIRS and not d.endswith('.egg-info')
    )
    rel = os.path.relpath(dirpath, _ROOT)
    if rel != '.' and 'BUILD' in filenames:
      packages.append(rel)
  return packages


def _generator():
  spec = importlib.util.spec_from_file_location(
      'build_files_script', os.path.join(_ROOT, 'scripts', 'build_files.py')
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _visible(target, default, package):
  """Whether `package` sees a target of visibility `target` (or `default`)."""
  for rule in target or default:
    if rule == '//visibility:public':
      return True
    where, kind = rule[2:].split(':')
    if kind == '__pkg__' and package == where:
      return True
    if kind == '__subpackages__' and (
        not where or package == where or package.startswith(where + '/')
    ):
      return True
  return False


class BuildFilesTest(unittest.TestCase):
  """Checks what `bazel build` would catch, without Bazel.

  Bazel cannot fetch its rules offline here, so instead of `bazel build` this
  reads every BUILD file (Starlark parses as Python) and checks what Bazel would
  catch: each Python file (but setup.py) in exactly one target, every label
  resolving, every own import covered by a direct dep, every dep visible.
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.generator = _generator()
    cls.packages, cls.py_files = _walk(), cls.generator.python_files()
    cls.targets, cls.files, cls.defaults = {}, set(), {}
    for package in cls.packages:
      targets, exported, cls.defaults[package] = _parse_build(package)
      cls.files.add(os.path.join(package, 'BUILD') if package else 'BUILD')
      for f in exported:
        cls.files.add(_file_path(package, f))
      for t in targets:
        assert t.label not in cls.targets, f'duplicate target {t.label}'
        cls.targets[t.label] = t
        cls.files.update(t.srcs)

  def test_build_files_are_what_the_generator_writes(self):
    self.assertEqual(
        self.generator.stale(),
        [],
        'stale BUILD files: run python scripts/build_files.py',
    )
    generated = {os.path.dirname(p) for p in self.generator.generate()}
    self.assertCountEqual(generated | {''}, self.packages)

  def test_the_generator_sees_a_new_import_and_a_new_module(self):
    # A copy of the files the generator reads, with a new module and a test
    # that imports it: both targets are written, each dep declared.
    with tempfile.TemporaryDirectory() as root:
      for name in (
          'README.md',
          'docs',
          'examples',
          'tff_priv',
          'tasks',
          'scripts',
          'tests',
      ):
        source, copy = os.path.join(_ROOT, name), os.path.join(root, name)
        if os.path.isdir(source):
          shutil.copytree(source, copy, ignore=_IGNORE)
        else:
          shutil.copy(source, copy)
      self.assertEqual(self.generator.stale(root), [])
      with open(os.path.join(root, 'tests', 'toy_mechanism.py'), 'w') as f:
        f.write('from tff_priv.accounting import ledger\n')
      with open(os.path.join(root, 'tests', 'toy_mechanism_test.py'), 'w') as f:
        f.write('from tests import toy_mechanism\n')
      self.assertEqual(self.generator.stale(root), ['tests/BUILD'])
      text = self.generator.generate(root)['tests/BUILD']
      self.assertIn(
          'py_test(\n    name = "toy_mechanism_test",\n'
          '    srcs = ["toy_mechanism_test.py"],\n'
          '    deps = [":toy_mechanism"],\n)',
          text,
      )
      self.assertIn('    deps = ["//tff_priv/accounting:ledger"],', text)

  def test_every_python_file_belongs_to_one_target(self):
    owners = {}
    for t in self.targets.values():
      for src in t.srcs:
        self.assertTrue(
            os.path.isfile(os.path.join(_ROOT, src)),
            f'{t.label}: no file {src}',
        )
        self.assertNotIn(
            src, owners, f'{src} in {owners.get(src)} and {t.label}'
        )
        owners[src] = t.label
    missing = [
        f for f in self.py_files if f not in owners and f not in _NOT_MODULES
    ]
    self.assertEqual(missing, [], 'Python files that belong to no BUILD target')

  def test_every_label_resolves(self):
    for t in self.targets.values():
      for label in t.deps:
        self.assertIn(
            label, self.targets, f'{t.label}: dep {label} does not exist'
        )
      for label in t.data:
        if label in self.targets:
          continue
        package, name = label[2:].split(':')
        path = os.path.join(package, name) if package else name
        self.assertIn(
            path, self.files, f'{t.label}: data {label} does not exist'
        )
        self.assertTrue(os.path.exists(os.path.join(_ROOT, path)))

  def test_imports_of_own_modules_are_declared(self):
    own = set(self.py_files)
    owner = {src: t.label for t in self.targets.values() for src in t.srcs}
    for t in self.targets.values():
      reachable = set(t.srcs)
      for dep in t.deps:
        reachable.update(self.targets[dep].srcs)
      for src in t.srcs:
        with open(os.path.join(_ROOT, src)) as f:
          imported_files = self.generator.imported_files(f.read(), own)
        for imported in imported_files:
          self.assertIn(
              imported,
              reachable,
              f'{t.label}: {src} imports {imported} (target '
              f'{owner.get(imported)}) without a dep on it',
          )

  def test_every_dep_is_visible_to_its_target(self):
    for t in self.targets.values():
      for label in t.deps + t.data:
        dep = self.targets.get(label)
        if dep is None or dep.package == t.package:
          continue
        self.assertTrue(
            _visible(dep.visibility, self.defaults[dep.package], t.package),
            f'{t.label}: {label} is not visible to //{t.package}',
        )

  def test_only_package_targets_and_documented_modules_are_public(self):
    public = sorted(
        t.label
        for t in self.targets.values()
        if '//visibility:public' in (t.visibility or self.defaults[t.package])
    )
    self.assertIn('//tff_priv/aggregators:aggregators', public)
    self.assertIn('//tff_priv:runtime', public)  # The README imports it.
    self.assertNotIn('//tff_priv/accounting:ledger', public)
    self.assertNotIn('//tff_priv:exports', public)
    self.assertFalse([label for label in public if label.startswith('//tests')])

  def test_tests_are_py_tests(self):
    for t in self.targets.values():
      for src in t.srcs:
        if src.endswith('_test.py'):
          self.assertEqual(t.kind, 'py_test', f'{src} is in a {t.kind}')


class PackageListTest(unittest.TestCase):
  """pyproject.toml lists its packages: one left out is missing from the wheel.

  The editable install of the clone would not show it.
  """

  def test_every_package_of_the_tree_is_listed(self):
    if tomllib is None:
      self.skipTest('tomllib needs Python 3.11')
    with open(os.path.join(_ROOT, 'pyproject.toml'), 'rb') as f:
      setup = tomllib.load(f)['tool']['setuptools']
    dirs = dict(setup['package-dir'])
    dirs['tff_priv'] = 'tff_priv'
    found = set()
    for top, path in dirs.items():
      for here, subdirs, files in os.walk(os.path.join(_ROOT, path)):
        subdirs[:] = [d for d in subdirs if d not in _SKIP_DIRS]
        if '__init__.py' in files:
          relative = os.path.relpath(here, os.path.join(_ROOT, path))
          found.add(
              top
              if relative == '.'
              else f'{top}.{relative.replace(os.sep, ".")}'
          )
    self.assertCountEqual(setup['packages'], found)


if __name__ == '__main__':
  unittest.main()
