#!/usr/bin/env bash
# Runs the tff_priv test suite in the .venv made by scripts/setup.sh.
#
#   bash scripts/test.sh           # the default lane: everything not marked slow or statistical
#   bash scripts/test.sh --slow    # the slow lane: only the tests marked slow or statistical
#   bash scripts/test.sh --all     # both lanes and the exhaustive tables (10^5-trial audits)
#
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k runtime -x`. Tests run on two
# processes (pytest-xdist, a test class on one process: its setUpClass runs once; `-n 0` runs
# everything in this one); the 15 slowest are listed at the end. Every lane first checks the
# style (pyink, ruff); a finding fails the lane after the tests have run.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ ! -x .venv/bin/python ] || [ ! -f .venv/.tff_priv_setup_stamp ]; then
  echo "test: no working .venv here; run setup first: bash scripts/setup.sh" >&2
  exit 2
fi
lane=(-m "not slow and not statistical and not exhaustive")
case "${1:-}" in
  --slow) shift; lane=(-m "(slow or statistical) and not exhaustive") ;;
  --all) shift; lane=() ;;
esac

# The style check on every lane, first: pyink (Google style: 2-space indents, 80 columns) and ruff,
# both configured in pyproject.toml. A finding fails the lane; the tests still run.
style=0
if [ ! -x .venv/bin/ruff ]; then
  echo "test: .venv has no ruff (it predates the style check); run setup again: bash scripts/setup.sh" >&2
  exit 2
fi
if [ -x .venv/bin/pyink ]; then
  .venv/bin/pyink --check --quiet . ||
    { style=1; echo "test: pyink would reformat the files above; run: .venv/bin/pyink ." >&2; }
else
  echo "test: the format check is skipped: pyink needs Python >= 3.10" >&2
fi
.venv/bin/ruff check --quiet . ||
  { style=1; echo "test: ruff's findings are above (.venv/bin/ruff check --fix . fixes some)" >&2; }

# TF's C++ logs (oneDNN notices, grappler) drown the test output.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
.venv/bin/python -m pytest -n "${TEST_PROCESSES:-2}" --dist loadscope --no-loadscope-reorder --durations=15 "${lane[@]}" "$@"
tests=$?
if [ "$tests" -eq 0 ] && [ "$style" -ne 0 ]; then exit 1; fi
exit "$tests"
