#!/usr/bin/env bash
# The main job on its built-in default: data-parallel training of a PNA network on the
# synthetic Ising data set, served from a DDStore, on 4 MPI ranks.
# Extra arguments go to the example (see: python examples/hydragnn_ising.py --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PY=${PYTHON:-python3}
# the MPI launcher installed beside this Python comes first
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
NP=${NP:-4}
exec timeout 1800 mpiexec -n "$NP" "$PY" examples/hydragnn_ising.py "$@"
