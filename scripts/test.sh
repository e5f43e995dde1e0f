#!/usr/bin/env bash
# Runs the whole tff_priv test suite in the .venv made by scripts/setup.sh.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k runtime -x`.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ ! -x .venv/bin/python ] || [ ! -f .venv/.tff_priv_setup_stamp ]; then
  echo "test: no working .venv here; run setup first: bash scripts/setup.sh" >&2
  exit 2
fi
# TF's C++ logs (oneDNN notices, grappler) drown the test output.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec .venv/bin/python -m pytest "$@"
