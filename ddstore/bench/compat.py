"""Benchmark of ``pyddstore`` (the original DDStore API) on the original's workloads.

    mpiexec -n 2 python -m ddstore.bench.compat [--out bench_results/compat_n2.json]
    mpiexec -n 4 python -m ddstore.bench.compat

Rows of 256 B, random global rows, every rank reading concurrently:

  single   one epoch (``epoch_begin``, N random single-row ``get(name, buf, start)``,
           ``epoch_end``): per-call p50/p99 (what HydraGNN's ``DistDataset`` does per
           ``__getitem__``);
  hydragnn batches of 32 single-row ``get`` calls, each batch inside its own
           ``epoch_begin``/``epoch_end`` pair: rows/s and the pair's p50.

Each is run over shared memory (``transport="auto"``) and RMA, next to a reference read
that issues one MPI lock/get/unlock per row (``read_ranges(..., per_row_lock=True)``),
the way the original DDStore's ``get`` works; the original itself is not installed
here (its numbers measured on this machine are quoted in docs/benchmarks.md).
"""
import platform
import time

import numpy as np
from mpi4py import MPI

import pyddstore
from ddstore.bench import parser, plural, report_path, write_report
from ddstore.bench.core import percentiles

ROW = 256
BATCH = 32


def per_call(fn, calls):
    times = np.empty(calls)
    pc = time.perf_counter
    for i in range(calls):
        t0 = pc()
        fn(i)
        times[i] = pc() - t0
    return times


def run(comm, transport, rows_per_rank, calls, batches, seed=0):
    rank, size = comm.Get_rank(), comm.Get_size()
    total = rows_per_rank * size
    rng = np.random.default_rng(rank + size * seed)
    chunk = rng.integers(0, 256, (rows_per_rank, ROW), dtype=np.uint8)
    full = np.concatenate(comm.allgather(chunk))  # for checking the bytes read
    idx = rng.integers(0, total, calls).tolist()
    res = {}
    with pyddstore.PyDDStore(comm, transport=transport) as dds:
        dds.add("x", chunk)
        buf = np.empty((1, ROW), dtype=np.uint8)
        for i in range(min(200, calls)):  # warm-up
            dds.get("x", buf, idx[i])
        comm.Barrier()
        dds.epoch_begin()
        t = per_call(lambda i: dds.get("x", buf, idx[i]), calls)
        dds.epoch_end()
        res["single"] = percentiles(t * 1e6)
        # the original's per-call path: one lock/get/unlock per row
        store = dds.store
        one = np.ones(1, dtype=np.int64)
        starts = np.asarray(idx, dtype=np.int64)
        comm.Barrier()
        t = per_call(lambda i: store.read_ranges("x", starts[i:i + 1], one, out=buf,
                                                 per_row_lock=True), calls)
        res["single_lock_per_row"] = percentiles(t * 1e6)
        # HydraGNN: batches of 32 gets, each inside an epoch pair
        bidx = rng.integers(0, total, (batches, BATCH)).tolist()
        out = np.empty((BATCH, ROW), dtype=np.uint8)
        pair = np.empty(batches)
        comm.Barrier()
        t0 = time.perf_counter()
        for b, rows in enumerate(bidx):
            p0 = time.perf_counter()
            dds.epoch_begin()
            p1 = time.perf_counter()
            for k, r in enumerate(rows):
                dds.get("x", out[k:k + 1], r)
            p2 = time.perf_counter()
            dds.epoch_end()
            pair[b] = (p1 - p0) + (time.perf_counter() - p2)
        elapsed = time.perf_counter() - t0
        assert out.tobytes() == full[bidx[-1]].tobytes(), "hydragnn pattern: bytes differ"
        res["hydragnn"] = {"rows_per_s": batches * BATCH / elapsed,
                           "epoch_pair_p50_us": float(np.median(pair) * 1e6),
                           "epoch_pair_p99_us": float(np.percentile(pair, 99) * 1e6)}
        assert buf.tobytes() == full[idx[-1]].tobytes(), "single: bytes differ"
    return res


def main(argv=None, prog=None):
    p = parser("compat", prog, __doc__.split("\n\n")[0], out=None)
    p.add_argument("--calls", type=int, default=3000, help="single gets per rank")
    p.add_argument("--batches", type=int, default=400, help="HydraGNN batches")
    p.add_argument("--rows-per-rank", type=int, default=1 << 15)
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    report = {"ranks": comm.Get_size(), "row_bytes": ROW, "batch": BATCH,
              "host": platform.node(), "mpi": MPI.Get_library_version().splitlines()[0],
              "transports": {}}
    for transport in ("auto", "rma"):
        res = run(comm, transport, args.rows_per_rank, args.calls, args.batches,
                  args.seed)
        gathered = comm.gather(res, root=0)
        if comm.Get_rank() == 0:
            worst = {k: max((g[k] for g in gathered),
                            key=lambda r: r.get("p50_us", -r.get("rows_per_s", 0)))
                     for k in res}
            total_rows_s = sum(g["hydragnn"]["rows_per_s"] for g in gathered)
            report["transports"][transport] = {"per_rank": gathered, "worst_rank": worst,
                                               "hydragnn_rows_per_s_all_ranks":
                                                   total_rows_s}
    if comm.Get_rank() == 0:
        for transport, entry in report["transports"].items():
            w = entry["worst_rank"]
            print(f"pyddstore, {plural(report['ranks'], 'rank')}, {ROW} B rows, transport "
                  f"{transport} (slowest rank):")
            for k in ("single", "single_lock_per_row"):
                print(f"  {k:20s} p50 {w[k]['p50_us']:8.2f} us  p99 {w[k]['p99_us']:8.2f} us")
            h, rows_per_s = w["hydragnn"], entry["hydragnn_rows_per_s_all_ranks"]
            print(f"  hydragnn (32 gets per epoch pair): {rows_per_s:.0f} rows/s over all "
                  f"ranks; epoch pair p50 {h['epoch_pair_p50_us']:.2f} us, p99 "
                  f"{h['epoch_pair_p99_us']:.2f} us")
        write_report(report, report_path(args.out, "compat", report["ranks"]), args.seed)


if __name__ == "__main__":
    main()
