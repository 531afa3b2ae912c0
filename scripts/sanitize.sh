#!/usr/bin/env bash
# The C core under AddressSanitizer and UndefinedBehaviorSanitizer: builds a sanitized
# copy of the extension into build/asan (DDSTORE_SANITIZE=1 python_bindings/build_ddstore.py),
# beside a view of the package whose every other file is the source tree's own, then runs
# over it the fast in-process subset (pytest -m "not mpi") and the 2-rank MPI programs of
# the core, the samplers (PyG with its options, and temporal), dynamic graphs, node
# memory, checkpoint / restore, and between nodes the progress agent and the reads by
# message (csrc/serve.c).  Any report fails
# the run: UBSan halts on the first error, ASan always does.
# Leak detection is off (MPI and Python keep memory to exit by design).  Python is not
# instrumented, so the ASan runtime is preloaded.  Run by .ci/run after the README's test
# command (scripts/test.sh), which installs what this needs.  Arguments are passed to both
# pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
OUT=$ROOT/build/asan
start=$(date +%s)

rm -rf "$OUT"
mkdir -p "$OUT/ddstore"
DDSTORE_SANITIZE=1 "$PY" python_bindings/build_ddstore.py "$OUT" > "$OUT/build.log" 2>&1 \
    || { cat "$OUT/build.log"; exit 1; }
# the package as it is in the tree, but for the compiled module
for f in "$ROOT"/ddstore/*; do
    case "$(basename "$f")" in
        _ddstore_cffi*|__pycache__) ;;
        *) ln -s "$f" "$OUT/ddstore/" ;;
    esac
done
# and the rest of the tree beside it (tests find README.md, examples/ from the package)
for f in "$ROOT"/* ; do
    case "$(basename "$f")" in
        ddstore|build) ;;
        # a name the build made in $OUT already (its objects go to $OUT/<the source's
        # absolute path>, e.g. $OUT/work/... for a tree under /work) is left as it is
        *) [ -e "$OUT/$(basename "$f")" ] || ln -s "$f" "$OUT/" ;;
    esac
done

CC=${CC:-gcc}
ASAN_LIB=$("$CC" -print-file-name=libasan.so)
[ -e "$ASAN_LIB" ] || { echo "sanitize.sh: $CC has no libasan.so" >&2; exit 1; }
# libstdc++ too: ASan intercepts __cxa_throw, and finds the real one only if libstdc++ is
# loaded with it (torch, loaded later, throws C++ exceptions)
export LD_PRELOAD="$ASAN_LIB $("$CC" -print-file-name=libstdc++.so.6)"
# allocator_may_return_null: a huge malloc returns NULL, as without ASan (the core's
# out-of-memory paths are tested); reports also go to build/asan/report.<pid>, printed
# below, because pytest captures the stderr of an in-process test that aborts
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:log_path=$OUT/report
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$OUT/report
reports() {
    local rc=$?
    if ls "$OUT"/report.* > /dev/null 2>&1; then
        echo "sanitize.sh: sanitizer output:" >&2
        cat "$OUT"/report.* >&2
        # warnings (a huge allocation refused) are not failures; errors are
        if grep -qE "ERROR: |runtime error|CHECK failed" "$OUT"/report.*; then rc=1; fi
    fi
    [ $rc -eq 0 ] || echo "sanitize.sh: FAILED" >&2
    exit $rc
}
trap reports EXIT
export PYTHONPATH=$OUT
# pytest runs from build/asan: `python -m` puts the working directory first on sys.path,
# and the tree's own ./ddstore must not shadow the sanitized one
cd "$OUT"
"$PY" -c 'import ddstore._core as c, sys
so = c.lib.__file__ if hasattr(c.lib, "__file__") else sys.modules["ddstore._ddstore_cffi"].__file__
assert so.startswith(sys.argv[1]), so
print("sanitize.sh: testing", so)' "$OUT"

# test_release_free_heap_returns_freed_memory measures glibc's heap, which ASan replaces;
# the tests marked forks_workers fork DataLoader workers from the pytest process, whose
# torch threads and the preloaded ASan runtime deadlock the forked child (seen twice: it
# hung the run; the workers run unsanitized in the main suite).  Each pytest run is
# bounded (SANITIZE_TIMEOUT seconds, default 900): a hang fails the job, named, instead
# of running into CI's own limit.
LIMIT=${SANITIZE_TIMEOUT:-900}
bounded() {
    local rc=0
    timeout -k 30 "$LIMIT" "$@" || rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        echo "sanitize.sh: a pytest run passed its limit of $LIMIT s (a hang): $*" >&2
    fi
    return $rc
}
bounded "$PY" -m pytest -q -ra -p no:cacheprovider -m "not mpi and not forks_workers" \
    "$ROOT/tests" "$@" -k "not test_release_free_heap_returns_freed_memory"
bounded "$PY" -m pytest -q -ra -p no:cacheprovider -m mpi "$@" \
    "$ROOT/tests/test_core.py::test_roundtrip[auto-2]" \
    "$ROOT/tests/test_core.py::test_roundtrip[rma-2]" \
    "$ROOT/tests/test_core.py::test_roundtrip_copy_threads[2]" \
    "$ROOT/tests/test_core.py::test_bad_input[2-auto]" \
    "$ROOT/tests/test_pyg.py::test_pyg_check[2-all]" \
    "$ROOT/tests/test_pyg_options.py::test_pyg_options_two_ranks[2]" \
    "$ROOT/tests/test_temporal.py::test_temporal_all_placements[2]" \
    "$ROOT/tests/test_dynamic.py::test_dynamic_graph_mpi[2]" \
    "$ROOT/tests/test_temporal.py::test_node_memory_all_placements[2]" \
    "$ROOT/tests/test_checkpoint.py::test_checkpoint_core[2-auto]" \
    "$ROOT/tests/test_between_nodes.py::test_progress_agent[on]" \
    "$ROOT/tests/test_between_nodes.py::test_reads_by_message[3-on-1]"
echo "sanitize.sh: ASan + UBSan run passed in $(( $(date +%s) - start )) s"
