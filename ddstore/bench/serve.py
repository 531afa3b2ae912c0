"""Reads between nodes by message against one-sided gets (issue 36, item 3): the time of
a ``get_batch`` of ``m`` random rows of another rank, the store's message path
(``csrc/serve.c``, the default between nodes) against ``DDSTORE_SERVE=off`` (an indexed
``MPI_Get``), in the same job; the message path is taken at every size here
(``DDSTORE_SERVE_MIN_PIECES=1``), to show where the default threshold belongs.

Run (2 ranks; between nodes: MPICH's network module over TCP on the loopback)::

    MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=tcp FI_TCP_IFACE=lo \\
        mpiexec -n 2 python -m ddstore.bench.serve

Each rank holds ``--rows`` rows of ``--row-bytes`` bytes.  Three patterns: ``one``
(rank 0 reads rank 1's rows while rank 1 waits in a barrier), ``both`` (both ranks read
each other's rows at once: a data-parallel loader) and ``computing`` (rank 0 reads for up
to ``--compute-s`` seconds while rank 1 computes on one thread without any MPI call, so
its progress agent answers).  For each size of ``--sizes`` (rows per read) and each path
the p50 and p90 of ``--reads`` reads are reported, the paths alternated ABAB
``--repeat`` times (a fresh store each), every row read compared with the row written.
Written to ``<out>/serve_n2.json``.
"""
import os
import time

import numpy as np
from mpi4py import MPI

from ddstore.bench import exit_on_every_rank, log, parser, write_report
from ddstore.cli import at_least, int_list, names_list, pause

PATHS = {"message": "auto", "one-sided": "off"}


def _args(argv=None, prog=None):
    p = parser("serve", prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=at_least(1), default=100_000, help="rows per rank")
    p.add_argument("--row-bytes", type=at_least(1), default=400,
                   help="bytes per row (400: 100 float32 features)")
    p.add_argument("--sizes", type=int_list(1), default="16,100,1000,10000,50000",
                   help="rows per read, comma-separated")
    p.add_argument("--reads", type=at_least(1), default=20, help="timed reads per size")
    p.add_argument("--patterns", default=("one", "both", "computing"),
                   type=names_list(("one", "both", "computing")),
                   help="comma-separated patterns to run (default: one,both,computing): "
                        "rank 0 reads rank 1's rows while rank 1 waits, both read each "
                        "other's at once, rank 0 reads while rank 1 computes")
    p.add_argument("--repeat", type=at_least(1), default=2)
    p.add_argument("--compute-s", type=pause("s"), default=1.0,
                   help="the computing pattern: seconds rank 0 reads while rank 1 "
                        "computes (rank 1 computes 0.3 s longer), per size and path")
    return p.parse_args(argv)


def _compute(seconds):
    """A training step's stand-in for ``seconds``: torch products on one thread (the
    rank's share of the cores, as in :mod:`ddstore.bench.progress`), no MPI call."""
    import torch
    torch.set_num_threads(1)
    a = torch.ones((200, 200), dtype=torch.float64)
    b = torch.full((200, 200), 1.0 / 200, dtype=torch.float64)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = a @ b


def _one(comm, args, path, pattern, sizes, rng):
    """A fresh store on ``path``; returns {size: [seconds of each read]} on readers."""
    import ddstore
    rank = comm.Get_rank()
    os.environ["DDSTORE_SERVE"] = PATHS[path]
    # the message path at every size (the default leaves reads of fewer than
    # ddstore.store.SERVE_MIN_PIECES pieces one-sided: this benchmark is how it was set)
    os.environ["DDSTORE_SERVE_MIN_PIECES"] = "1"
    out = {}
    with ddstore.DDStore(comm, width=2) as store:
        if path == "message" and not store.serving:  # (alike on every rank)
            exit_on_every_rank("the store does not read by message here: run between "
                               "nodes (see the module's docstring)", code=1)
        mine = np.random.default_rng([args.seed, rank]).integers(
            0, 256, (args.rows, args.row_bytes), dtype=np.uint8)
        store.add("x", mine)
        theirs = np.random.default_rng([args.seed, 1 - rank]).integers(
            0, 256, (args.rows, args.row_bytes), dtype=np.uint8)
        lo = (1 - rank) * args.rows
        reader = rank == 0 or pattern == "both"
        for m in sizes:
            idx = rng.integers(0, args.rows, m)
            buf = np.empty((m, args.row_bytes), np.uint8)
            times = []
            comm.Barrier()
            if pattern == "computing" and rank == 1:
                _compute(args.compute_s + 0.3)
            elif reader:
                # while rank 1 computes: at most --compute-s seconds of reads
                start = time.perf_counter()
                if pattern == "computing":
                    time.sleep(0.05)  # rank 1 is computing by now
                for _ in range(args.reads):
                    t0 = time.perf_counter()
                    store.get_batch("x", lo + idx, out=buf)
                    times.append(time.perf_counter() - t0)
                    if pattern == "computing" and t0 - start > args.compute_s:
                        break
                if not np.array_equal(buf, theirs[idx]):
                    raise AssertionError(f"rank {rank}: rows read differ from those "
                                         f"written ({path}, {pattern}, {m} rows)")
            comm.Barrier()
            if reader:
                out[m] = times
    return out


def main(argv=None, prog=None):
    args = _args(argv, prog)
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        exit_on_every_rank(f"runs on 2 ranks (mpiexec -n 2), not {comm.Get_size()}")
    sizes = list(args.sizes)
    patterns = list(args.patterns)
    rng = np.random.default_rng(args.seed)
    results = {}
    for pattern in patterns:
        for r in range(args.repeat):
            order = list(PATHS) if r % 2 == 0 else list(PATHS)[::-1]
            for path in order:
                got = _one(comm, args, path, pattern, sizes, rng)
                for m, t in got.items():
                    results.setdefault(pattern, {}).setdefault(path, {}).setdefault(
                        str(m), []).append(t)
    report = {"rows_per_rank": args.rows, "row_bytes": args.row_bytes,
              "reads": args.reads, "repeat": args.repeat, "results": {}}
    if comm.Get_rank() == 0:
        for pattern, by_path in results.items():
            log(comm, f"{pattern}: rank 0's get_batch of m random rows of rank 1, "
                      f"{args.row_bytes} B each (p50 ms per read, each repetition; MB/s)")
            for m in sizes:
                line = [f"  m={m:>6}"]
                for path in PATHS:
                    reps = by_path[path][str(m)]
                    p50 = [float(np.median(t)) for t in reps]
                    p90 = [float(np.percentile(t, 90)) for t in reps]
                    mbs = [m * args.row_bytes / x / 1e6 for x in p50]
                    report["results"].setdefault(pattern, {}).setdefault(path, {})[
                        str(m)] = {"p50_s": p50, "p90_s": p90, "mb_per_s": mbs}
                    line.append(f"{path} " + " / ".join(f"{x * 1e3:.3f}" for x in p50)
                                + f" ms ({' / '.join(f'{x:.0f}' for x in mbs)} MB/s)")
                line.append("ratio " + " / ".join(
                    f"{b / a:.2f}x" for a, b in zip(
                        report["results"][pattern]["message"][str(m)]["p50_s"],
                        report["results"][pattern]["one-sided"][str(m)]["p50_s"])))
                log(comm, "; ".join(line))
        write_report(report, os.path.join(args.out, "serve_n2.json"), args.seed)


if __name__ == "__main__":
    import sys
    from ddstore.cli import run_program
    sys.exit(run_program(main))
