"""Concurrent reads from several threads of one rank (HydraGNN's threaded loader): every
thread's rows must be byte-exact over RMA, where each read flushes the targets it
touched (that state is per call, never shared between threads), and each thread's failed
read must report its own indices (the core's error message is per thread).

Usage: timeout 120 mpiexec -n N python core_threads.py TRANSPORT
"""
import sys
import threading

import numpy as np
from mpi4py import MPI

from _harness import check, run_main

import ddstore

THREADS = 4
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
transport = sys.argv[1]


def main():
    assert MPI.Query_thread() == MPI.THREAD_MULTIPLE, "needs MPI_THREAD_MULTIPLE"
    n, row = 4000 * size, 96
    data = (np.arange(n, dtype=np.int64)[:, None] * 1000003 +
            np.arange(row // 8, dtype=np.int64)[None, :]) % 2 ** 61
    errors = []
    with ddstore.DDStore(comm, transport=transport) as store:
        lo, hi = ddstore.partition(n, store.group_size, store.group_rank)
        store.add("x", data[lo:hi])

        def reader(seed):
            rng = np.random.default_rng(seed)
            try:
                for _ in range(300):
                    idx = rng.integers(0, n, 64)
                    got = store.get_batch("x", idx)
                    if got.tobytes() != data[idx].tobytes():
                        errors.append(f"thread {seed}: batch differs")
                    i = int(rng.integers(0, n))
                    if store.get("x", i).tobytes() != data[i].tobytes():
                        errors.append(f"thread {seed}: row {i} differs")
                    s = int(rng.integers(0, n - 50))
                    if store.get_range("x", s, 50).tobytes() != data[s:s + 50].tobytes():
                        errors.append(f"thread {seed}: range from {s} differs")
                    # failing reads at the same time: each thread gets its own message (the
                    # core's message buffer is per thread)
                    bad = n + seed * 1000 + int(rng.integers(0, 1000))
                    try:
                        store.read_ranges("x", [bad], [1])
                        errors.append(f"thread {seed}: read of row {bad} did not fail")
                    except ddstore.DDStoreIndexError as exc:
                        if f"rows [{bad}, {bad + 1})" not in str(exc):
                            errors.append(f"thread {seed}: message for row {bad}: {exc}")
            except Exception as exc:  # reported below, on this rank
                errors.append(f"thread {seed}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=reader, args=(rank * 100 + t,))
                   for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        comm.Barrier()
        check(not errors, f"{transport}: {errors[:5]}")
        print(f"rank {rank}: {THREADS} threads read byte-exact over {transport}", flush=True)


run_main(main)
