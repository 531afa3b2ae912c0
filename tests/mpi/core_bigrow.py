"""One row larger than 2 GiB (MPI counts are int) read over RMA by every path: the
batched read and the per-row-lock read (which once passed a negative count to MPI_Get).

Usage: timeout 300 mpiexec -n 2 python core_bigrow.py    (needs about 5 GB of memory)
"""
import numpy as np
from mpi4py import MPI

from _harness import check, run_main

import ddstore

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
ROW = (1 << 31) + 4096  # bytes: just over 2 GiB
WORDS = ROW // 8
PIECE = 1 << 24  # words per piece when filling and checking


def pattern(a, b):
    """Words a..b of the row: a different value in every word (no overflow below 2^33
    words), so a piece read into the wrong place differs; a multiply, not a modulo: the
    pattern is made three times over 2 GiB."""
    return np.arange(a, b, dtype=np.int64) * 2654435761


def main():
    with ddstore.DDStore(comm, transport="rma") as store:
        # the last rank holds the one row; the others hold nothing and read it remotely
        holder = comm.Get_size() - 1
        store.init("big", 1 if rank == holder else 0, (WORDS,), np.int64)
        if rank == holder:  # written in place: no second 2 GiB copy
            chunk = store.local_view("big")
            for a in range(0, WORDS, PIECE):
                chunk[0, a:a + PIECE] = pattern(a, min(WORDS, a + PIECE))
            del chunk
        store.sync()
        if rank != holder:
            out = np.empty((1, WORDS), dtype=np.int64)
            for per_row_lock in (False, True):
                out[:] = -1
                store.read_ranges("big", [0], [1], out=out, per_row_lock=per_row_lock)
                for a in range(0, WORDS, PIECE):
                    b = min(WORDS, a + PIECE)
                    check(np.array_equal(out[0, a:b], pattern(a, b)),
                          f"per_row_lock={per_row_lock}: words [{a}, {b}) differ")
                print(f"rank {rank}: row of {ROW} bytes read byte-exact, "
                      f"per_row_lock={per_row_lock}", flush=True)
        comm.Barrier()


run_main(main)
