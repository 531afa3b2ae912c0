"""Instructions per single-row read through the C core, counted by callgrind: a
measure of the read path's per-call cost that the machine's noise does not move.

    python scripts/callgrind_read.py [TREE ...]

For each TREE (a checkout whose ``ddstore/`` holds a built extension, e.g. a
``git worktree`` built with ``python python_bindings/build_ddstore.py``; default: the
installed package), runs ``valgrind --tool=callgrind`` over one rank reading 200,000
random rows of 64 float32 one at a time (``fast_readers``' ``read_range``, seed 0) and
prints the instructions per call inclusive of ``dds_read_range`` (the C core) and of
the cffi wrapper around it (the core plus argument conversion).  Needs valgrind.
"""
import os
import re
import subprocess
import sys
import tempfile

READS = 200_000
PROGRAM = f"""
import numpy as np
import ddstore
from mpi4py import MPI
s = ddstore.DDStore(MPI.COMM_WORLD)
s.add("x", np.zeros((100000, 64), np.float32))
read, _ = s.fast_readers("x")
buf = np.empty((1, 64), np.float32)
for i in np.random.default_rng(0).integers(0, 100000, {READS}).tolist():
    read(i, 1, buf)
s.free()
"""


def count(tree):
    env = dict(os.environ, DDSTORE_SHM_WATCH="0")
    if tree:
        env["PYTHONPATH"] = tree
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.%p")
        subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes",
                        f"--callgrind-out-file={out}", sys.executable, "-c", PROGRAM],
                       env=env, check=True, capture_output=True, cwd=d)
        main = max((os.path.join(d, f) for f in os.listdir(d)), key=os.path.getsize)
        text = subprocess.run(["callgrind_annotate", "--inclusive=yes", main],
                              capture_output=True, text=True, check=True).stdout
    found = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s.*:(_cffi_f_dds_read_range|dds_read_range)\b", line)
        if m and m.group(2) not in found:
            found[m.group(2)] = int(m.group(1).replace(",", "")) / READS
    return found


if __name__ == "__main__":
    for tree in sys.argv[1:] or [""]:
        f = count(tree)
        print(f"{tree or 'installed'}: {f.get('dds_read_range', float('nan')):.0f} "
              f"instructions per read_range in the core, "
              f"{f.get('_cffi_f_dds_read_range', float('nan')):.0f} with the cffi wrapper")
