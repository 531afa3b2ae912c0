"""Run several harness programs (``tests/mpi/*.py``) one after another in one MPI job.

    mpiexec -n 4 python tests/mpi/checks.py core_roundtrip.py auto + graphs_roundtrip.py

Each program runs as if launched alone (``sys.argv`` = its path and arguments, module
run as ``__main__``); its ``run_main`` prints its summary line and returns (see
``_harness.run_main``).  Rank 0 prints ``=== <program> <args>`` before each, so the
output splits into one section per program (``conftest.shared_launch`` does).  An
exception in any program aborts the whole job, as it does alone; the job exits 1 if any
program failed a check.  What a program leaves alive (stores it keeps to the end on
purpose) stays alive until the job ends, as it would alone.
"""
import os
import runpy
import sys

import _harness

HERE = os.path.dirname(os.path.abspath(__file__))
SEPARATOR = "+"


def programs(argv):
    """``[[program, arg, ...], ...]`` from the command line, split at ``+``."""
    out, cur = [], []
    for a in argv:
        if a == SEPARATOR:
            out.append(cur)
            cur = []
        else:
            cur.append(a)
    out.append(cur)
    return [p for p in out if p]


def main(argv):
    _harness.combined["active"] = True
    kept = []  # each program's globals, alive to the end as in a job of its own
    for prog, *args in programs(argv):
        if _harness.rank == 0:
            print(f"=== {' '.join([prog] + args)}", flush=True)
        sys.argv = [os.path.join(HERE, prog)] + args
        kept.append(runpy.run_path(sys.argv[0], run_name="__main__"))
    sys.stdout.flush()
    sys.exit(1 if _harness.combined["failed"] else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
