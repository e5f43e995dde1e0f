"""Shared pytest fixtures: the TFF execution context every test runs in."""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import pytest  # pylint: disable=g-import-not-at-top

from tff_priv import runtime  # pylint: disable=g-import-not-at-top


@pytest.fixture(scope='session', autouse=True)
def tff_runtime():
  """TFF's simulation context for the session; its worker stopped at the end."""
  runtime.set_context('simulation')
  yield
  runtime.stop_workers()


# The heaviest test classes (or modules) of the slow lane, in seconds as
# measured (`scripts/test.sh --slow --durations=0`, summed per class): run
# first, so that the two processes of `--dist loadscope` end together rather
# than one waiting on a long class started last. Only the order depends on
# these numbers; scripts/test.sh keeps it (`--no-loadscope-reorder`: xdist
# would otherwise sort the classes by their number of tests).
_HEAVY_SCOPES = {
    'tests/readme_test.py::ReadmeTest': 329,
    'tests/program/resume_test.py::ResumeTest': 252,
    'tests/program/canary_audit_test.py::CanaryAuditTest': 153,
    'tests/examples_test.py::ExamplesTest': 142,
    'tests/scripts/audit_script_test.py::AuditScriptTest': 129,
    'tests/scripts/train_remote_test.py::TrainRemoteTest': 128,
    'tests/scripts/train_faults_test.py::TrainFaultsTest': 119,
    'tests/runtime_test.py::RuntimeTest': 104,
    'tests/program/train_model_accounting_test.py::TrainModelKilledTest': 93,
    'tests/scripts/train_script_test.py::TrainScriptTest': 88,
    'tests/auditing/aggregator_audit_test.py::AggregatorAuditTest': 87,
    'tests/scripts/benchmark_scripts_test.py::BenchmarkScriptsTest': 84,
    'tests/program/canary_audit_test.py::CanaryExamplesRunTest': 83,
    'tests/scripts/utility_loss_script_test.py::UtilityLossScriptTest': 82,
    'tests/scripts/smp_experiments_script_test.py::SmpExperimentsScriptTest': (
        74
    ),
    'tests/packaging_test.py::WheelTest': 70,
    'tests/scripts/train_script_test.py::InProcessRunsTest': 69,
    'tests/program/training_test.py::RunTest': 68,
    'tests/program/train_model_accounting_test.py::TrainModelAccountingTest': (
        67
    ),
    'tests/benchmarks/rounds_test.py::RoundsTest': 65,
}


def _scope(nodeid: str) -> str:
  """The scope `--dist loadscope` keeps on one process: class, else module."""
  parts = nodeid.split('::')
  return '::'.join(parts[:2]) if len(parts) > 2 else parts[0]


def pytest_collection_modifyitems(items):
  """Heaviest scopes first (`_HEAVY_SCOPES`), the rest in collection order."""

  def weight(item):
    scope = _scope(item.nodeid)
    return _HEAVY_SCOPES.get(scope, _HEAVY_SCOPES.get(scope.split('::')[0], 0))

  items.sort(key=lambda item: -weight(item))  # Stable: a class stays whole.
