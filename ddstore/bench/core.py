"""Benchmark of the core read paths (run under mpiexec; every rank reads concurrently).

    mpiexec -n 2 python -m ddstore.bench.core [--out bench_results/core_n2.json]

For rows of 256 B and 64 KB and random global indices, per rank:

  (a) ``per_row_lock``  one row per call, each in its own lock/get/unlock epoch (RMA),
                        the way the original DDStore reads;
  (b) ``batch_rma``     ``get_batch`` of 128 rows over MPI_Get (one epoch, one flush);
  (c) ``batch_shm``     ``get_batch`` of 128 rows over node-local shared memory;
  (d) ``memcpy``        one contiguous copy of the same bytes as a batch, single core
                        (the physical limit), and ``local_gather``: the same 128 random
                        rows gathered from a local array with numpy (no store).

Single rows (``get``, ``get(out=)``, ``get_range(i, 1)``, ``get_batch([i])``, one row
per call, shm and RMA) are timed per call against numpy reading one row of a local array.

Reported: microseconds per row (p50/p95/p99 over calls; a batch's time is divided by its
rows) and MB/s, written to JSON.  Ratios are taken within one run on the same machine,
each with its control: the denominator's path (``..._control``) timed a second time,
whose spread from the first is printed beside the ratio.
"""
import platform
import time

import numpy as np
from mpi4py import MPI

import ddstore
from ddstore.bench import parser, plural, ratio, ratio_text, report_path, write_report
from ddstore.cli import at_least

BATCH = 128


def percentiles(per_row_us):
    p50, p95, p99 = np.percentile(per_row_us, [50, 95, 99])
    return {"p50_us": float(p50), "p95_us": float(p95), "p99_us": float(p99),
            "mean_us": float(np.mean(per_row_us))}


def timed(fn, calls, rows_per_call, row_bytes):
    times = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter()
        fn(i)
        times[i] = time.perf_counter() - t0
    per_row = times / rows_per_call * 1e6
    res = percentiles(per_row)
    res["MB_per_s"] = float(rows_per_call * row_bytes * calls / times.sum() / 1e6)
    res["calls"] = calls
    return res


def bench_row_size(comm, row_bytes, rows_per_rank, calls_single, calls_batch, seed):
    size, rank = comm.Get_size(), comm.Get_rank()
    total = rows_per_rank * size
    rng = np.random.default_rng(seed + rank)
    lo, hi = ddstore.partition(total, size, rank)
    chunk = np.random.default_rng(rank).integers(0, 256, (hi - lo, row_bytes),
                                                 dtype=np.uint8)
    results = {}
    for transport in ("rma", "auto"):
        with ddstore.DDStore(comm, transport=transport) as store:
            store.add("rows", chunk)
            if transport == "rma":
                idx = rng.integers(0, total, calls_single)
                one = np.ones(1, dtype=np.int64)
                # warm up, then (a): one row per call, lock/get/unlock per row
                for i in range(min(50, calls_single)):
                    store.read_ranges("rows", idx[i:i + 1], one, per_row_lock=True)
                comm.Barrier()
                for key in ("a_per_row_lock", "a_per_row_lock_control"):
                    results[key] = timed(
                        lambda i: store.read_ranges("rows", idx[i:i + 1], one,
                                                    per_row_lock=True),
                        calls_single, 1, row_bytes)
            key = "b_batch_rma" if transport == "rma" else "c_batch_shm"
            batches = rng.integers(0, total, (calls_batch, BATCH))
            out = np.empty((BATCH, row_bytes), dtype=np.uint8)
            for i in range(min(20, calls_batch)):
                store.get_batch("rows", batches[i], out=out)
            comm.Barrier()
            results[key] = timed(lambda i: store.get_batch("rows", batches[i], out=out),
                                 calls_batch, BATCH, row_bytes)
            results[key]["shm_peers"] = store.shm_peers
            comm.Barrier()
    # (d) the physical limit: one contiguous memcpy of a batch's bytes, and a gather
    src = np.random.default_rng(1).integers(0, 256, (max(rows_per_rank, 4 * BATCH),
                                                     row_bytes), dtype=np.uint8)
    dst = np.empty((BATCH, row_bytes), dtype=np.uint8)
    flat_src, flat_dst = src.reshape(-1), dst.reshape(-1)
    nbytes = BATCH * row_bytes
    offs = rng.integers(0, src.size - nbytes, calls_batch)
    for key in ("d_memcpy", "d_memcpy_control"):
        results[key] = timed(
            lambda i: np.copyto(flat_dst, flat_src[offs[i]:offs[i] + nbytes]),
            calls_batch, BATCH, row_bytes)
    local_idx = rng.integers(0, src.shape[0], (calls_batch, BATCH))
    results["d_local_gather"] = timed(
        lambda i: np.take(src, local_idx[i], axis=0, out=dst), calls_batch, BATCH,
        row_bytes)
    return results


def bench_single_rows(comm, row_bytes, rows_per_rank, calls, seed):
    """Per-call latency of the single-row paths that per-sample code calls, against a
    numpy read of one row from a local array (fancy index ``src[[i]]`` and ``src[i]``
    copied): the floor for "one row, new array" in Python."""
    size, rank = comm.Get_size(), comm.Get_rank()
    total = rows_per_rank * size
    lo, hi = ddstore.partition(total, size, rank)
    chunk = np.random.default_rng(rank).integers(0, 256, (hi - lo, row_bytes),
                                                 dtype=np.uint8)
    idx = np.random.default_rng(seed + rank).integers(0, total, calls).tolist()
    results = {}
    for transport in ("auto", "rma"):
        with ddstore.DDStore(comm, transport=transport) as store:
            store.add("rows", chunk)
            out = np.empty(row_bytes, dtype=np.uint8)
            paths = {"get": lambda i: store.get("rows", idx[i]),
                     "get_out": lambda i: store.get("rows", idx[i], out=out),
                     "get_range_1": lambda i: store.get_range("rows", idx[i], 1),
                     "get_batch_1": lambda i: store.get_batch("rows", [idx[i]])}
            for name, fn in paths.items():
                for i in range(min(200, calls)):
                    fn(i)
                comm.Barrier()
                results[f"{name}_{'shm' if transport == 'auto' else 'rma'}"] = timed(
                    fn, calls, 1, row_bytes)
            comm.Barrier()
    src = np.random.default_rng(1).integers(0, 256, (rows_per_rank, row_bytes),
                                            dtype=np.uint8)
    local = [i % rows_per_rank for i in idx]
    for key in ("numpy_fancy_index", "numpy_fancy_index_control"):
        results[key] = timed(lambda i: src[[local[i]]], calls, 1, row_bytes)
    results["numpy_row_copy"] = timed(lambda i: src[local[i]].copy(), calls, 1, row_bytes)
    return results


def summarise(res):
    """The ratios of one row size, each with its control (:func:`ddstore.bench.ratio`)."""
    a, b = res["a_per_row_lock"], res["b_batch_rma"]
    c, d = res["c_batch_shm"], res["d_memcpy"]
    a_runs = [res[k]["p50_us"] for k in ("a_per_row_lock", "a_per_row_lock_control")]
    b_vs_a = ratio(a["p50_us"], b["p50_us"], control=a_runs)
    c_of_d = ratio(c["MB_per_s"], d["MB_per_s"], control=[
        res[k]["MB_per_s"] for k in ("d_memcpy", "d_memcpy_control")])
    return {"b_vs_a_speedup_p50": b_vs_a["ratio"], "b_vs_a_speedup_p50_control": b_vs_a,
            "b_vs_a_speedup_mean": a["mean_us"] / b["mean_us"],
            "c_bandwidth_fraction_of_memcpy": c_of_d["ratio"],
            "c_bandwidth_fraction_of_memcpy_control": c_of_d,
            "c_p99_ms_per_batch": c["p99_us"] * BATCH / 1e3}


def main(argv=None, prog=None):
    p = parser("core", prog, __doc__.split("\n\n")[0], out=None)
    p.add_argument("--calls-single", type=at_least(1), default=4000)
    p.add_argument("--calls-batch", type=at_least(1), default=400)
    p.add_argument("--quick", action="store_true",
                   help="few calls (smoke test): 200 single, 40 batches, where those "
                        "options are not given")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    if args.quick:  # its counts as defaults: an option given explicitly keeps its value
        p.set_defaults(calls_single=200, calls_batch=40)
        args = p.parse_args(argv)
    report = {"ranks": comm.Get_size(), "batch": BATCH, "host": platform.node(),
              "mpi": MPI.Get_library_version().splitlines()[0], "row_sizes": {}}
    report["single_row"] = {}
    for row_bytes, rows_per_rank in ((256, 1 << 16), (64 << 10, 1024)):
        res = bench_single_rows(comm, row_bytes, rows_per_rank, args.calls_single,
                                seed=row_bytes + 1 + args.seed)
        gathered = comm.gather(res, root=0)
        if comm.Get_rank() == 0:
            worst = {k: max((g[k] for g in gathered), key=lambda r: r["p50_us"])
                     for k in res}
            over = ratio(worst["get_shm"]["p50_us"], worst["numpy_fancy_index"]["p50_us"],
                         control=[worst[k]["p50_us"] for k in (
                             "numpy_fancy_index", "numpy_fancy_index_control")])
            report["single_row"][str(row_bytes)] = {
                "per_rank": gathered, "worst_rank": worst,
                "get_shm_p50_over_numpy_fancy_index": over["ratio"],
                "get_shm_p50_over_numpy_fancy_index_control": over}
    for row_bytes, rows_per_rank in ((256, 1 << 16), (64 << 10, 1024)):
        res = bench_row_size(comm, row_bytes, rows_per_rank, args.calls_single,
                             args.calls_batch, seed=row_bytes + args.seed)
        gathered = comm.gather(res, root=0)
        if comm.Get_rank() == 0:
            # per rank results, and the slowest rank's numbers as the headline
            worst = {k: max((g[k] for g in gathered), key=lambda r: r["p50_us"])
                     for k in res}
            report["row_sizes"][str(row_bytes)] = {"per_rank": gathered, "worst_rank": worst,
                                                   "summary": summarise(worst)}
    # the "shm" rows are transport auto's: through MPI where no rank shares this node
    # (between nodes, MPIR_CVAR_NOLOCAL=1); said, and kept in the report
    peers = min(g["c_batch_shm"]["shm_peers"] for e in report["row_sizes"].values()
                for g in e["per_rank"]) if comm.Get_rank() == 0 else None
    if comm.Get_rank() == 0:
        report["shm_rows_read_through"] = "shared memory" if peers or comm.size == 1 \
            else "MPI (no rank shares a node with another: the 'shm' rows are transport " \
            "auto's reads)"
        if report["shm_rows_read_through"] != "shared memory":
            print(f"note: {report['shm_rows_read_through']}")
        for rb, entry in report["single_row"].items():
            print(f"single rows of {int(rb)} B, {plural(report['ranks'], 'rank')}, one row "
                  f"per call (slowest rank, us per call):")
            for k, r in entry["worst_rank"].items():
                print(f"  {k:18s} p50 {r['p50_us']:8.3f}  p99 {r['p99_us']:8.3f}")
            print(f"  get (shm) p50 / numpy fancy-index p50 = "
                  f"{ratio_text(entry['get_shm_p50_over_numpy_fancy_index_control'])}")
        for rb, entry in report["row_sizes"].items():
            print(f"rows of {int(rb)} B, {plural(report['ranks'], 'rank')}, batch {BATCH} "
                  f"(the rank slowest at p50; its MB/s over all its calls):")
            for k, r in entry["worst_rank"].items():
                print(f"  {k:16s} p50 {r['p50_us']:9.3f} us/row  p95 {r['p95_us']:9.3f}  "
                      f"p99 {r['p99_us']:9.3f}  {r['MB_per_s']:10.1f} MB/s")
            s = entry["summary"]
            bw = s["c_bandwidth_fraction_of_memcpy_control"]
            print(f"  (b) vs (a): {ratio_text(s['b_vs_a_speedup_p50_control'], 1)} fewer "
                  f"us/row at p50 ({s['b_vs_a_speedup_mean']:.1f}x mean); (c) bandwidth = "
                  f"{100 * bw['ratio']:.0f}% of memcpy (control spread "
                  f"{100 * bw['spread']:.0f} %); (c) p99 per batch "
                  f"{s['c_p99_ms_per_batch']:.3f} ms")
        write_report(report, report_path(args.out, "core", report["ranks"]), args.seed)


if __name__ == "__main__":
    import sys
    from ddstore.cli import run_program
    sys.exit(run_program(main))
