#!/usr/bin/env bash
# One-command setup: creates .venv in the repository root and installs the pinned tff_priv stack,
# the package itself (editable) and the test tools. Running it again is quick and changes nothing
# while requirements*.txt, setup.py and pyproject.toml are unchanged.
#
#   bash scripts/setup.sh            # uses python3.11 (or python3) from PATH
#   PYTHON=/path/to/python3.10 bash scripts/setup.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="$root/.venv"
stamp="$venv/.tff_priv_setup_stamp"

pick_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
  for candidate in python3.11 python3.10 python3.9 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then echo "$candidate"; return; fi
  done
  echo "setup: no python3 found on PATH; install Python 3.9-3.11 or set PYTHON" >&2
  exit 1
}

want="$(cat requirements.txt requirements-nodeps.txt setup.py pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup: .venv is up to date (nothing to do)"
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  py="$(pick_python)"
  if ! "$py" -c 'import sys; sys.exit(0 if (3, 9) <= sys.version_info[:2] < (3, 12) else 1)'; then
    echo "setup: $py is Python $("$py" -c 'import platform; print(platform.python_version())');" \
         "TensorFlow Federated 0.87 needs Python >=3.9,<3.12 (set PYTHON=...)" >&2
    exit 1
  fi
  echo "setup: creating $venv with $py"
  "$py" -m venv "$venv"
fi

pip_install() {
  # Drops pip's notices about configured local index folders that do not exist on this machine.
  "$venv/bin/python" -m pip --disable-pip-version-check --no-input install --quiet "$@" \
    2> >(grep -v "^WARNING: Location '" >&2)
}
pip_install --upgrade 'pip>=23.2' 'setuptools>=68' wheel
echo "setup: installing the pinned stack (first run downloads about 2.5 GB)"
pip_install -r requirements.txt
pip_install --no-deps -r requirements-nodeps.txt
pip_install --no-deps --no-build-isolation -e .
"$venv/bin/python" -c 'import tff_priv, tensorflow_federated, tensorflow_privacy, dp_accounting' \
  2>/dev/null || {
  echo "setup: the stack installed but does not import; see the error below" >&2
  "$venv/bin/python" -c 'import tff_priv, tensorflow_federated, tensorflow_privacy, dp_accounting'
  exit 1
}
echo "$want" > "$stamp"
echo "setup: done; run the tests with: bash scripts/test.sh"
