"""Benchmark of random-row batches (``get_batch``) by row size and store size, against
numpy gathering the same number of random rows from a local array.

    mpiexec -n 2 python -m ddstore.bench.gather [--mb 8,512] [--row-bytes 4,32,128,512]

For every store size (``--mb``: the variable's bytes over the group, width = all ranks,
so each rank holds ``mb / ranks``) and row size (``--row-bytes``), every rank reads
``--calls`` batches of ``--batch-size`` random global rows with ``get_batch(out=)``
(node-local rows by load, other nodes' by MPI); the control gathers as many random rows
of a local numpy array of the rank's chunk size with ``np.take(out=)``, timed twice (its
spread is printed beside the ratio).  Small rows in a store that fits the caches measure
the walk of a read per row; a store many times the caches, the memory's latency.

Reported per configuration: nanoseconds per row (median over the calls of the slowest
rank), the ratio ``get_batch / take`` with its control, printed and written as JSON to
``--out`` (default ``bench_results/gather_n<ranks>.json``).
"""
import platform
import time

import numpy as np
from mpi4py import MPI

import ddstore
from ddstore.bench import log, parser, ratio, ratio_text, report_path, write_report
from ddstore.cli import at_least, int_list


def _args(argv, prog):
    p = parser("gather", prog, __doc__.split("\n\n")[0], out=None, batch_size=4096,
               batch_help="random rows per get_batch call")
    p.add_argument("--mb", type=int_list(1), default="8,512",
                   help="comma-separated store sizes in MB (2**20 bytes) over the ranks")
    p.add_argument("--row-bytes", type=int_list(1), default="4,32,128,512",
                   help="comma-separated row sizes in bytes")
    p.add_argument("--calls", type=at_least(1), default=40,
                   help="timed calls per configuration (after 3 not timed)")
    return p.parse_args(argv)


def _median_ns_per_row(fn, calls, rows):
    for i in range(3):
        fn(i)
    times = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter()
        fn(i)
        times[i] = time.perf_counter() - t0
    return float(np.median(times)) / rows * 1e9


def bench_one(comm, store, mb, row_bytes, batch, calls, seed):
    """One configuration: ``{get_batch, take, take_control}`` in ns per row on this
    rank."""
    size, rank = comm.Get_size(), comm.Get_rank()
    total = max(size, (mb << 20) // row_bytes)
    lo, hi = ddstore.partition(total, size, rank)
    chunk = np.zeros((hi - lo, row_bytes), np.uint8)
    chunk[:, 0] = np.arange(lo, hi) % 251  # a byte to check per row
    store.add("rows", chunk)
    rng = np.random.default_rng(seed + rank)
    idx = rng.integers(0, total, (calls + 3, batch))
    local = rng.integers(0, hi - lo, (calls + 3, batch))
    out = np.empty((batch, row_bytes), np.uint8)
    store.get_batch("rows", idx[0], out=out)
    if not np.array_equal(out[:, 0], idx[0] % 251):
        raise RuntimeError(f"get_batch read wrong rows ({mb} MB, rows of {row_bytes} B)")
    comm.Barrier()
    res = {"get_batch": _median_ns_per_row(
        lambda i: store.get_batch("rows", idx[i], out=out), calls, batch)}
    for key in ("take", "take_control"):
        res[key] = _median_ns_per_row(lambda i: np.take(chunk, local[i], axis=0, out=out),
                                      calls, batch)
    store.remove("rows")
    del chunk
    comm.Barrier()
    return res


def main(argv=None, prog=None):
    args = _args(argv, prog)
    comm = MPI.COMM_WORLD
    report = {"ranks": comm.Get_size(), "batch": args.batch_size, "calls": args.calls,
              "host": platform.node(), "configs": {}}
    with ddstore.DDStore(comm) as store:
        report["shm_peers"] = store.shm_peers
        for mb in args.mb:
            for rb in args.row_bytes:
                res = bench_one(comm, store, mb, rb, args.batch_size, args.calls,
                                args.seed + 1000 * rb + mb)
                ranks = comm.gather(res, root=0)
                if comm.Get_rank() == 0:
                    worst = {k: max(r[k] for r in ranks) for k in res}
                    over = ratio(worst["get_batch"], worst["take"],
                                 control=[worst["take"], worst["take_control"]])
                    report["configs"][f"{mb}MB/{rb}B"] = {
                        "mb": mb, "row_bytes": rb, "ns_per_row": worst,
                        "get_batch_over_take": over["ratio"],
                        "get_batch_over_take_control": over, "per_rank": ranks}
                    log(comm, f"{mb:6d} MB, rows of {rb:5d} B: get_batch "
                              f"{worst['get_batch']:7.1f} ns/row, numpy take "
                              f"{worst['take']:7.1f} / {worst['take_control']:7.1f}: "
                              f"{ratio_text(over)}")
    if comm.Get_rank() == 0:
        write_report(report, report_path(args.out, "gather", report["ranks"]), args.seed)


if __name__ == "__main__":
    import sys
    from ddstore.cli import run_program
    sys.exit(run_program(main))
