#!/usr/bin/env bash
# For an offline GPU machine whose Python already holds torch (a CUDA build),
# torch-geometric, numpy, pytest and the test tools, but not MPICH, mpi4py, cffi,
# pycparser or adios2: downloads those as wheels into .whl/ (about 31 MB; git ignores
# it), here, where the package index is reachable.  Carry .whl/ with the project to the
# GPU machine; there scripts/gpu_env.sh (which scripts/gpu_check.sh sources) installs
# them and builds the C core.
# GPU_PYTHON_VERSION: the GPU machine's Python (default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p .whl
"$PY" -m pip download -q --no-deps --only-binary=:all: \
    --python-version "${GPU_PYTHON_VERSION:-3.12}" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d .whl mpich==5.0.2 mpi4py==4.1.2 cffi pycparser adios2
ls -l .whl
