#!/usr/bin/env bash
# Installs ddstore and everything it needs into the current Python (use a venv if you
# like): MPI from the `mpich` package on PyPI, mpi4py, torch (the CPU build where pip
# finds one: README.md), PyG, ADIOS2, then
# builds the C core against that MPI.  Idempotent, and skipped when nothing changed since
# the last install into the same Python (DDSTORE_REINSTALL=1 forces it).
# A cluster's own MPI: see docs/cluster.md, "Using your cluster's MPI".
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# torch 2.x and numpy 2 need Python >= 3.10 (CI runs 3.11)
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
    echo "ddstore needs Python >= 3.10; $("$PY" --version 2>&1) found (set PYTHON=...)" >&2
    exit 1
}
# Skip the ~20 s of pip when nothing it depends on changed since the last install into
# this interpreter: the stamp records the interpreter and a hash of requirements.txt,
# setup.py, python_bindings/ and csrc/, the imports must still work, and `ddstore` must
# resolve to this checkout (an editable install made from another copy does not count).
# DDSTORE_REINSTALL=1 forces the install.
STAMP=build/.install-stamp
want="$("$PY" -c 'import sys; print(sys.executable)') $(cat requirements.txt setup.py \
    python_bindings/* csrc/* | cksum | cut -d' ' -f1)"
if [ "${DDSTORE_REINSTALL:-0}" != 1 ] && [ -f "$STAMP" ] && \
        [ "$(cat "$STAMP")" = "$want" ] && \
        "$PY" -c 'import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None
                  for m in ("mpi4py", "torch", "torch_geometric", "adios2")))' 2>/dev/null \
        && [ -n "$(ls ddstore/_ddstore_cffi*.so 2>/dev/null)" ] \
        && [ "$(cd / && "$PY" -c 'import importlib.util as u, os
s = u.find_spec("ddstore"); print(os.path.dirname(s.origin) if s else "")' 2>/dev/null)" \
             = "$(pwd -P)/ddstore" ]
then
    exit 0
fi
"$PY" -m pip install -q --root-user-action=ignore -r requirements.txt
"$PY" -m pip install -q --root-user-action=ignore --no-build-isolation -e .
mkdir -p build && echo "$want" > "$STAMP"
