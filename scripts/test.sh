#!/usr/bin/env bash
# Installs everything (see install.sh) and runs the test suite: python -m pytest -q -ra tests
# (-ra: a summary line for every test that failed, errored or was skipped, with its reason).
# MPI cases are launched with mpiexec under `timeout` from inside the tests.
# Extra arguments go to pytest (e.g. -m "not mpi" for the fast in-process subset).
# DDSTORE_TEST_MAX_RANKS=N (default: no limit) skips, with the reason shown, every test
# that would start more than N MPI ranks: for machines too small for the 3-4 rank jobs
# (they oversubscribe the cores; on 1-2 cores they are slow but still correct).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PY=${PYTHON:-python3}
# the MPI launcher installed beside this Python comes first
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
# the whole run is bounded (DDSTORE_TEST_TIMEOUT seconds, default 2400): every MPI job
# has its own timeout, and this one catches a hang in an in-process test
exec timeout -k 30 "${DDSTORE_TEST_TIMEOUT:-2400}" \
    "$PY" -m pytest -q -ra tests "$@"   # -ra: failures, errors and skips, each with why
