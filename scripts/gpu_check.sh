#!/usr/bin/env bash
# One command for the GPU checks of issue 44, on one GPU, in at most 8 minutes (each
# step under its own timeout, within a budget of BUDGET_S seconds, default 470):
#   1. the GPU tests: tests/test_device_pipeline.py (the CUDA test included) and the
#      device tests of tests/test_spatiotemporal.py;
#   2. python -m ddstore.bench.device at two shapes (PeMS-BAY: 52,116 x 325 x 2, and a
#      PeMS quarter: 26,280 x 2,790 x 2 -- 535 KB per window pair), each printing a table
#      and writing $OUT/device_<shape>.json; then the ratios of the targets side by side;
#   3. the examples on the GPU (scripts/gpu_examples.py): the main job on 4 ranks sharing
#      the GPU against the CPU (the same losses within float tolerance), its samples/s
#      and the PyG example's sampled edges/s with --prefetch 2 against 0
#      ($OUT/examples.json), in the time the budget leaves.
# Without a GPU it runs on the CPU with small sizes (what the suite checks; step 3 only
# with GPU_CHECK_EXAMPLES=1, as the suite runs it through tests/test_examples_prefetch.py).
# On an offline GPU machine: `bash scripts/gpu_wheels.sh` where the package index is
# reachable, carry .whl/ with the project, and this script sources scripts/gpu_env.sh,
# which installs those wheels and builds the C core (it does nothing without .whl/).
# Environment: PYTHON (default python3), OUT (default gpu_check), GPU_CHECK_TESTS=0 skips
# step 1, GPU_CHECK_EXAMPLES=0/1 skips/forces step 3, STEP_MS (default 20) the synthetic
# model step, BUDGET_S (default 470) the seconds for all steps.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-gpu_check}
STEP_MS=${STEP_MS:-20}
if [ -f scripts/gpu_env.sh ]; then source scripts/gpu_env.sh; fi
mkdir -p "$OUT"
start=$(date +%s)
status=0
if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  DEV=cuda
  "$PY" -c 'import torch; print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__)'
  SHAPES=("pemsbay --steps 52116 --nodes 325 --batches 300"
          "pems_quarter --steps 26280 --nodes 2790 --batches 150")
  REPEAT=3
else
  DEV=cpu
  echo "no CUDA device: running on the CPU with small sizes (a smoke run; no GPU figures)"
  SHAPES=("small --steps 600 --nodes 40 --batches 8")
  REPEAT=2
fi
if [ "${GPU_CHECK_TESTS:-1}" != 0 ]; then
  echo "== GPU tests (device $DEV)"
  # the in-process tests (the CUDA one included); the MPI ones check the same staging
  # logic with device="cpu" on several ranks and run with the suite
  DDSTORE_TEST_MAX_RANKS=2 timeout 120 "$PY" -m pytest -q -rs -m "not mpi" \
    tests/test_device_pipeline.py || status=1
  DDSTORE_TEST_MAX_RANKS=2 timeout 60 "$PY" -m pytest -q -m "not mpi" \
    tests/test_spatiotemporal.py -k "device or cuda" || { rc=$?; [ $rc = 5 ] || status=1; }
fi
for shape in "${SHAPES[@]}"; do
  set -- $shape
  name=$1; shift
  echo "== benchmark $name (device $DEV)"
  rm -f "$OUT/device_$name.json"  # (an earlier run's: never shown as this run's)
  timeout 140 "$PY" -m ddstore.bench.device --device "$DEV" "$@" --step-ms "$STEP_MS" \
    --repeat "$REPEAT" --out "$OUT/device_$name.json" 2>&1 | grep -v "launched without" \
    || status=1
done
echo "== targets (issue 44 item 4)"
"$PY" - "$OUT" <<'PYEOF' || status=1
import glob, json, os, sys
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "device_*.json"))):
    r = json.load(open(path))
    q = r["ratios"]
    rows.append((os.path.basename(path)[7:-5], r["device_name"], q["resident / gather"],
                 q["store pipeline / pinned copy"], q["store direct / pinned copy"],
                 q["store plain / pinned copy"], q["epoch pipeline / steps alone"],
                 q["epoch direct / steps alone"], q["epoch no pipeline / steps alone"]))
print(f"{'shape':<14}{'resident/gather':>16}{'store/pinned':>14}{'(direct)':>10}"
      f"{'(plain)':>9}{'epoch/steps':>13}{'(direct)':>10}{'(plain)':>9}   device")
print(f"{'target':<14}{'>= 0.9':>16}{'>= 0.5':>14}{'':>10}{'':>9}{'<= 1.1':>13}{'':>10}"
      f"{'':>9}")
for s, dev, a, b, b2, c, d, d2, e in rows:
    print(f"{s:<14}{a:>16.2f}{b:>14.2f}{b2:>10.2f}{c:>9.2f}{d:>13.2f}{d2:>10.2f}"
          f"{e:>9.2f}   {dev}")
PYEOF
examples=${GPU_CHECK_EXAMPLES:-$([ "$DEV" = cuda ] && echo 1 || echo 0)}
left=$(( ${BUDGET_S:-470} - ($(date +%s) - start) ))
if [ "$examples" = 1 ] && [ "$left" -lt 60 ]; then
  echo "== examples skipped: $left s of the budget left (BUDGET_S=${BUDGET_S:-470})"
  status=1
elif [ "$examples" = 1 ]; then
  echo "== examples on $DEV (issue 44 items 1 and 4), $left s left"
  if [ "$DEV" = cuda ]; then runs=5; small=""; else runs=4; small="--small"; fi
  timeout "$left" "$PY" scripts/gpu_examples.py --device "$DEV" --ranks 4 $small \
    --out "$OUT" --timeout $(( left / runs )) || status=1
fi
echo "== gpu_check: $(( $(date +%s) - start )) s, status $status (JSON in $OUT/)"
exit $status
