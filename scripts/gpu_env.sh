# Sourced by scripts/gpu_check.sh (bash), in the project root.  Where .whl/ holds the
# wheels of scripts/gpu_wheels.sh (an offline GPU machine): installs them under
# GPU_PREFIX (default /tmp/ddstore-gpu; `--prefix`, as MPICH's bin/ and lib/ are data
# files that `--target` would drop), puts that prefix first on PATH, PYTHONPATH and
# LD_LIBRARY_PATH with the project on PYTHONPATH, and builds the C core in place when
# it is not built.  Without .whl/ it does nothing: the machine is set up as the README
# says (scripts/install.sh).
if ls .whl/*.whl >/dev/null 2>&1; then
  _pfx=${GPU_PREFIX:-/tmp/ddstore-gpu}
  _py=${PYTHON:-python3}
  if [ ! -d "$_pfx" ]; then
    "$_py" -m pip install -q --ignore-installed --no-index --no-deps --no-compile \
      --no-cache-dir --prefix "$_pfx" .whl/*.whl 2>&1 | grep -v WARN
  fi
  _sp=$(ls -d "$_pfx"/lib/python3*/site-packages | head -1)
  export PYTHONPATH="$_sp:$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
  export PATH="$_pfx/bin:$PATH"
  export LD_LIBRARY_PATH="$_pfx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PYTHONUNBUFFERED=1
  if ! ls ddstore/_ddstore_cffi*.so >/dev/null 2>&1 || \
      ! "$_py" -c "import ddstore" >/dev/null 2>&1; then
    echo "gpu_env.sh: building the C core in place (log: $_pfx/build.log)"
    "$_py" setup.py -q build_ext --inplace > "$_pfx/build.log" 2>&1 || \
      { tail -20 "$_pfx/build.log"; echo "gpu_env.sh: the build failed" >&2; }
  fi
  unset _pfx _py _sp
fi
