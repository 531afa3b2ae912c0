#!/usr/bin/env bash
# Installs ddstore and everything it needs into the current Python (use a venv if you
# like): MPI from the `mpich` package on PyPI, mpi4py, torch (CPU), PyG, ADIOS2, then
# builds the C core against that MPI.  Idempotent: quick when everything is there.
# A cluster's own MPI: see "Using your cluster's MPI" in README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# torch 2.x and numpy 2 need Python >= 3.10 (CI runs 3.11)
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
    echo "ddstore needs Python >= 3.10; $("$PY" --version 2>&1) found (set PYTHON=...)" >&2
    exit 1
}
"$PY" -m pip install -q --root-user-action=ignore -r requirements.txt
"$PY" -m pip install -q --root-user-action=ignore --no-build-isolation -e .
