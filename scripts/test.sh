#!/usr/bin/env bash
# Installs everything (see install.sh) and runs the test suite: python -m pytest -q -rs tests
# (-rs prints the reason of every skipped test).
# MPI cases are launched with mpiexec under `timeout` from inside the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PY=${PYTHON:-python3}
# the MPI launcher installed beside this Python comes first
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
exec "$PY" -m pytest -q -rs tests "$@"   # -rs: the reason of every skip
