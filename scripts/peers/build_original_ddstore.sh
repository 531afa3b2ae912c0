#!/bin/bash
# Build ORNL's original DDStore (pyddstore Cython extension) into /tmp/orig-ddstore/site,
# beside (not inside) the Python environment that runs ddstore (VENV, default: the one
# `python` is in).  Arg 1: a git dir of ORNL/DDStore (a clone of
# https://github.com/ORNL/DDStore; its .git, or a bare mirror).  A benchmark peer for
# scripts/peers/original_ddstore_ab.py, never a requirement.  Needs apt-get (Debian's
# libfabric-dev headers, unpacked, not installed) and pip (Cython, kept outside VENV).
set -euo pipefail
GIT=${1:?usage: build_original_ddstore.sh <git dir of ORNL/DDStore>}
O=/tmp/orig-ddstore
VENV=${VENV:-$(python3 -c "import sys; print(sys.prefix)")}
export PATH=$VENV/bin:$PATH
rm -rf $O/src $O/build $O/site; mkdir -p $O/src $O/site $O/debs $O/libfabric/lib/pkgconfig
git --git-dir=$GIT archive HEAD | tar -x -C $O/src
# libfabric: its headers are needed to compile (src/common.cxx, method=1); headers from
# Debian's libfabric-dev (unpacked, not installed), library = the MPICH wheel's own
# libfabric.so.1 (the one libmpi.so.12 already loads)
(cd $O/debs && { ls libfabric-dev_*.deb >/dev/null 2>&1 || apt-get download libfabric-dev; } \
   && rm -rf x && dpkg -x libfabric-dev_*.deb x)
rm -rf $O/libfabric/include; cp -r $O/debs/x/usr/include $O/libfabric/include
ln -sf $VENV/lib/mpich/libfabric.so.1 $O/libfabric/lib/libfabric.so
cat > $O/libfabric/lib/pkgconfig/libfabric.pc <<PC
prefix=$O/libfabric
libdir=\${prefix}/lib
includedir=\${prefix}/include
Name: libfabric
Description: Debian libfabric-dev headers + MPICH wheel's libfabric.so.1
Version: 1.17.0
Libs: -L\${libdir} -lfabric
Cflags: -I\${includedir}
PC
# Cython only for the build, outside the venv
[ -d $O/buildtools/Cython ] || pip install --target $O/buildtools Cython
cd $O/src
PYTHONPATH=$O/buildtools PKG_CONFIG_PATH=$O/libfabric/lib/pkgconfig \
  CC=mpicc CXX=mpicxx LDSHARED="mpicxx -shared" LDFLAGS="-Wl,-rpath,$VENV/lib/mpich" \
  python setup.py build_ext --build-lib $O/site --build-temp $O/build
python - "$GIT" <<PY
import json, subprocess, sys
git = sys.argv[1]
commit = subprocess.check_output(["git", "--git-dir", git, "rev-parse", "HEAD"], text=True).strip()
date = subprocess.check_output(["git", "--git-dir", git, "log", "-1", "--format=%cI"], text=True).strip()
cy = open("$O/src/src/pyddstore.cpp").readline().strip()
json.dump({"repo": "github.com/ORNL/DDStore", "commit": commit, "commit_date": date,
           "cython": cy, "libfabric_headers": "Debian libfabric-dev 1.17.0-3",
           "libfabric_lib": "$VENV/lib/mpich/libfabric.so.1",
           "compiler": "mpicxx (MPICH wheel, $VENV/bin)"},
          open("$O/build_info.json", "w"), indent=2)
PY
cat $O/build_info.json
