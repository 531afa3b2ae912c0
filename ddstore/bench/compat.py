"""Benchmark of ``pyddstore`` (the original DDStore API) on the original's workloads.

    mpiexec -n 2 python -m ddstore.bench.compat [--out bench_results/compat_n2.json]
    mpiexec -n 4 python -m ddstore.bench.compat

Rows of 256 B, random global rows, every rank reading concurrently:

  single   one epoch (``epoch_begin``, N random single-row ``get(name, buf, start)``,
           ``epoch_end``): per-call p50/p99 (what HydraGNN's ``DistDataset`` does per
           ``__getitem__``);
  hydragnn batches of 32 single-row ``get`` calls, each batch inside its own
           ``epoch_begin``/``epoch_end`` pair: rows/s and the pair's p50.

With ``--step-ms MS`` (issue 44 item 5), also the HydraGNN-style loop over the adapter's
batched reads, reading ahead: an epoch (``epoch_begin`` ... ``epoch_end``) of batches of
``--graph-batch`` random global "graphs" (rows of ``--graph-bytes``, about an Ising
graph's packed size), each batch one ``get_batch`` call, against a synthetic model step
of ``MS`` per batch, with ``--prefetch K`` batches read ahead in a thread
(:func:`ddstore.bench.device.read_ahead`: read time per batch, the steps alone, the
epoch read ahead against them, target <= 1.1x, and the overlap).

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
from ddstore.cli import at_least, pause, transports_text
from ddstore.prefetch import MAX_PREFETCH
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


def read_ahead_graphs(comm, dds, args, rng):
    """The HydraGNN-style loop over ``get_batch`` against a ``--step-ms`` step, with
    ``--prefetch`` batches read ahead (see the module notes); the bytes of every batch
    are checked on the first pass."""
    from ddstore.bench.device import read_ahead
    rank, size = comm.Get_rank(), comm.Get_size()
    n, nbytes, gb = args.graphs_per_rank, args.graph_bytes, args.graph_batch
    graphs = np.random.default_rng([args.seed, rank, 7]).integers(
        0, 256, (n, nbytes), dtype=np.uint8)
    full = np.concatenate(comm.allgather(graphs))
    dds.add("graphs", graphs)
    idx = rng.integers(0, n * size, (args.read_ahead_batches, gb))

    def batches():
        for rows in idx:
            out = np.empty((gb, nbytes), dtype=np.uint8)
            dds.get_batch("graphs", out, rows)
            yield out

    for rows, out in zip(idx, batches()):  # warm-up, and every byte checked
        assert out.tobytes() == full[rows].tobytes(), "get_batch: bytes differ"
    dds.epoch_begin()  # collective: outside the read-ahead thread
    res = read_ahead(batches, args.step_ms, args.prefetch, store=dds.store,
                     barrier=comm.Barrier)
    dds.epoch_end()
    res.update(graph_bytes=nbytes, graph_batch=gb)
    return res


def run(comm, transport, rows_per_rank, calls, batches, seed=0, args=None):
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
        if args is not None and args.step_ms > 0:
            res["read_ahead"] = read_ahead_graphs(comm, dds, args, rng)
    return res


def main(argv=None, prog=None):
    p = parser("compat", prog, __doc__.split("\n\n")[0], out=None)
    p.add_argument("--calls", type=at_least(1), default=3000, help="single gets per rank")
    p.add_argument("--batches", type=at_least(1), default=400, help="HydraGNN batches")
    p.add_argument("--rows-per-rank", type=at_least(1), default=1 << 15)
    p.add_argument("--transports", default="auto,rma", type=transports_text,
                   help="transports to run")
    p.add_argument("--step-ms", type=pause("ms"), default=0.0,
                   help="also the HydraGNN-style loop over get_batch reading ahead "
                        "against a synthetic step of this many ms per batch (0: skip)")
    p.add_argument("--prefetch", type=at_least(0, most=MAX_PREFETCH), default=2,
                   help="with --step-ms: batches read ahead in a thread")
    p.add_argument("--graph-bytes", type=at_least(1), default=12800,
                   help="with --step-ms: bytes per graph (a row)")
    p.add_argument("--graph-batch", type=at_least(1), default=32,
                   help="with --step-ms: graphs per batch (one get_batch call)")
    p.add_argument("--graphs-per-rank", type=at_least(1), default=2048,
                   help="with --step-ms: graphs each rank adds")
    p.add_argument("--read-ahead-batches", type=at_least(1), default=40,
                   help="with --step-ms: batches per epoch")
    args = p.parse_args(argv)
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if (args.step_ms < 0 or args.prefetch < 0 or min(args.graph_bytes, args.graph_batch,
                                                       args.graphs_per_rank,
                                                       args.read_ahead_batches) < 1
            or not transports or set(transports) - {"auto", "rma", "shm"}):
        p.error("--step-ms and --prefetch must be >= 0, --graph-bytes, --graph-batch, "
                "--graphs-per-rank and --read-ahead-batches >= 1, --transports of "
                "auto, rma, shm")
    comm = MPI.COMM_WORLD
    report = {"ranks": comm.Get_size(), "row_bytes": ROW, "batch": BATCH,
              "host": platform.node(), "mpi": MPI.Get_library_version().splitlines()[0],
              "transports": {}}
    report["step_ms"], report["prefetch"] = args.step_ms, args.prefetch
    for transport in transports:
        res = run(comm, transport, args.rows_per_rank, args.calls, args.batches,
                  args.seed, args)
        gathered = comm.gather(res, root=0)
        if comm.Get_rank() == 0:
            worst = {k: max((g[k] for g in gathered),
                            key=lambda r: r.get("p50_us", -r.get("rows_per_s", 0)))
                     for k in res if k != "read_ahead"}
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
            if "read_ahead" in entry["per_rank"][0]:
                from ddstore.bench.device import read_ahead_text
                r = entry["per_rank"][0]["read_ahead"]
                print(f"  hydragnn loop over get_batch ({r['graph_batch']} graphs of "
                      f"{r['graph_bytes']} B a batch) reading ahead (rank 0): "
                      f"{read_ahead_text(r)}")
        write_report(report, report_path(args.out, "compat", report["ranks"]), args.seed)


if __name__ == "__main__":
    import sys
    from ddstore.cli import run_program
    sys.exit(run_program(main))
