"""A/B in one MPI job: ORNL's original DDStore (``pyddstore`` Cython extension, built by
scripts/peers/build_original_ddstore.sh into /tmp/orig-ddstore/site) against ours
(``pyddstore`` from this repository, over ``ddstore``).  A benchmark peer, never a
requirement.

    PYTHONPATH=. mpiexec -n 2 python scripts/peers/original_ddstore_ab.py
    # smoke:  ... --calls 2000 --batches 100 --rounds 1 --out /tmp/orig_ab_smoke.json

Rows of 256 B (uint8), ``--rows-per-rank`` rows on every rank (default 100k), random
global rows, every rank reading at the same time:

  single    one ``epoch_begin``, ``--calls`` single-row ``get(name, buf, start)``, one
            ``epoch_end``: per-call p50/p99 (the original: MPI_Win_lock/MPI_Get/
            MPI_Win_unlock per call, inside an MPI_Win_fence epoch);
  hydragnn  ``--batches`` batches of 32 single-row ``get``, each batch inside its own
            ``epoch_begin``/``epoch_end`` (HydraGNN's train loop: epoch_begin, the
            DataLoader's 32 ``DistDataset.get``, epoch_end): rows/s of all ranks
            (rows read by all ranks / slowest rank's wall time) and epoch pair time.

Both stores are built once and live side by side; the timed sections alternate
A B A B ... (``--rounds`` rounds, each variant once per round, same random rows for all
variants within a round, fresh rows each round).  Every row read is checked against the
bytes written (all of them, after each timed section).  Variants: ``orig`` (method=0,
MPI RMA) and ``ours-<transport>`` for each of ``--ours-transports`` (default auto,rma).
The original's module is also named ``pyddstore``: it is loaded from its file and taken
out of ``sys.modules`` again, so that ``import pyddstore`` then finds ours.
"""
import argparse
import gc
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import mpi4py
from mpi4py import MPI

ROW = 256
BATCH = 32
MAIN = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_original(site):
    """The original's extension module, imported from ``site`` without leaving it as
    ``sys.modules['pyddstore']`` (its init function is PyInit_pyddstore, so it has to be
    loaded under that name)."""
    files = [f for f in os.listdir(site) if f.startswith("pyddstore") and f.endswith(".so")]
    if not files:
        raise SystemExit(f"no pyddstore*.so in {site}: run scripts/peers/build_original_ddstore.sh")
    saved = sys.modules.pop("pyddstore", None)
    spec = importlib.util.spec_from_file_location("pyddstore", os.path.join(site, files[0]))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules.pop("pyddstore", None)
    if saved is not None:
        sys.modules["pyddstore"] = saved
    return mod


def load_ours():
    if MAIN not in sys.path:
        sys.path.insert(0, MAIN)
    import pyddstore
    import ddstore
    assert os.path.realpath(pyddstore.__file__).startswith(MAIN + "/"), pyddstore.__file__
    return pyddstore, ddstore


def pct(t_us):
    p50, p99 = np.percentile(t_us, [50, 99])
    return {"p50_us": float(p50), "p99_us": float(p99), "mean_us": float(np.mean(t_us)),
            "n": int(t_us.size)}


def single(comm, dds, idx, full):
    """One epoch of len(idx) single-row gets; per-call times (us) and whether every
    row read equals the row written."""
    calls = len(idx)
    out = np.empty((calls, 1, ROW), dtype=np.uint8)
    views = [out[i] for i in range(calls)]      # (1, ROW) C-contiguous, made untimed
    times = np.empty(calls)
    get, pc = dds.get, time.perf_counter
    comm.Barrier()
    gc.disable()
    dds.epoch_begin()
    for i in range(calls):
        t0 = pc()
        get("x", views[i], idx[i])
        times[i] = pc() - t0
    dds.epoch_end()
    gc.enable()
    ok = bool(np.array_equal(out[:, 0], full[idx]))
    return times * 1e6, ok


def hydragnn(comm, dds, bidx, full):
    """Batches of BATCH single-row gets, each in its own epoch pair."""
    nb = len(bidx)
    out = np.empty((nb, BATCH, 1, ROW), dtype=np.uint8)
    views = [[out[b, k] for k in range(BATCH)] for b in range(nb)]
    pair = np.empty(nb)
    get, pc = dds.get, time.perf_counter
    begin, end = dds.epoch_begin, dds.epoch_end
    comm.Barrier()
    gc.disable()
    t0 = pc()
    for b in range(nb):
        rows, vb = bidx[b], views[b]
        p0 = pc()
        begin()
        p1 = pc()
        for k in range(BATCH):
            get("x", vb[k], rows[k])
        p2 = pc()
        end()
        pair[b] = (p1 - p0) + (pc() - p2)
    elapsed = pc() - t0
    gc.enable()
    ok = bool(np.array_equal(out[:, :, 0].reshape(-1, ROW),
                             full[np.asarray(bidx).reshape(-1)]))
    return elapsed, pair * 1e6, ok


def git(*args):
    try:
        return subprocess.check_output(["git", *args], text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except Exception:
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--calls", type=int, default=20000, help="single gets per rank per round")
    p.add_argument("--batches", type=int, default=1000,
                   help="HydraGNN batches (of 32 gets) per rank per round")
    p.add_argument("--rounds", type=int, default=3, help="A/B rounds (each variant once)")
    p.add_argument("--rows-per-rank", type=int, default=100_000)
    p.add_argument("--ours-transports", default="auto,rma",
                   help="transports of ours to time, comma separated")
    p.add_argument("--orig-site", default=os.environ.get("ORIG_DDSTORE_SITE",
                                                         "/tmp/orig-ddstore/site"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench_results/original_ddstore_ab_n2.json")
    args = p.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    orig = load_original(args.orig_site)
    ours, ddstore = load_ours()

    # data: every rank's rows, and every rank holds a copy of all of them to check reads
    nloc = args.rows_per_rank
    total = nloc * size
    chunk = np.random.default_rng([args.seed, rank]).integers(0, 256, (nloc, ROW),
                                                              dtype=np.uint8)
    full = np.empty((total, ROW), dtype=np.uint8)
    comm.Allgather(chunk, full)

    stores = {"orig": orig.PyDDStore(comm)}                   # method=0: MPI RMA
    for tr in [t for t in args.ours_transports.split(",") if t]:
        stores[f"ours-{tr}"] = ours.PyDDStore(comm, transport=tr)
    for dds in stores.values():
        dds.add("x", chunk)
    order = list(stores)

    # warm-up: 200 gets and 5 epoch pairs on each
    wrng = np.random.default_rng([args.seed, rank, 999])
    w = np.empty((1, ROW), dtype=np.uint8)
    for name, dds in stores.items():
        comm.Barrier()
        for _ in range(5):
            dds.epoch_begin()
            for r in wrng.integers(0, total, 40).tolist():
                dds.get("x", w, r)
                assert np.array_equal(w[0], full[r]), f"{name}: warm-up bytes differ"
            dds.epoch_end()

    rounds = []
    for rnd in range(args.rounds):
        rng = np.random.default_rng([args.seed, rank, rnd])
        idx = rng.integers(0, total, args.calls).tolist()
        bidx = rng.integers(0, total, (args.batches, BATCH)).tolist()
        res = {}
        for name in order:          # A B (C) in every round: A B A B ...
            dds = stores[name]
            t_single, ok1 = single(comm, dds, idx, full)
            elapsed, pair, ok2 = hydragnn(comm, dds, bidx, full)
            res[name] = {"single": pct(t_single), "single_ok": ok1,
                         "hyd_elapsed_s": elapsed, "hyd_pair": pct(pair), "hyd_ok": ok2,
                         "t_single": t_single}
        rounds.append(res)

    for dds in stores.values():
        dds.free()

    # ---- gather and summarize (rank 0)
    per_rank = comm.gather(rounds, root=0)
    if rank != 0:
        return
    summary, table_rounds = {}, []
    for name in order:
        rr = []
        for rnd in range(args.rounds):
            ranks = [per_rank[q][rnd][name] for q in range(size)]
            worst = max(ranks, key=lambda e: e["single"]["p50_us"])
            slowest = max(e["hyd_elapsed_s"] for e in ranks)
            rr.append({
                "round": rnd,
                "single_slowest_rank": worst["single"],
                "single_per_rank": [e["single"] for e in ranks],
                "hydragnn_rows_per_s": size * args.batches * BATCH / slowest,
                "hydragnn_rows_per_s_per_rank": [args.batches * BATCH / e["hyd_elapsed_s"]
                                                 for e in ranks],
                "hydragnn_epoch_pair_per_rank": [e["hyd_pair"] for e in ranks],
                "bytes_ok": all(e["single_ok"] and e["hyd_ok"] for e in ranks),
            })
        pooled = pct(np.concatenate([per_rank[q][rnd][name]["t_single"]
                                     for q in range(size) for rnd in range(args.rounds)]))
        rows_s = np.array([r["hydragnn_rows_per_s"] for r in rr])
        pair50 = max(e["p50_us"] for r in rr for e in r["hydragnn_epoch_pair_per_rank"])
        summary[name] = {
            "single_pooled": pooled,
            "single_p50_by_round": [r["single_slowest_rank"]["p50_us"] for r in rr],
            "hydragnn_rows_per_s_median": float(np.median(rows_s)),
            "hydragnn_rows_per_s_min": float(rows_s.min()),
            "hydragnn_rows_per_s_max": float(rows_s.max()),
            "hydragnn_spread_pct": float((rows_s.max() - rows_s.min()) / np.median(rows_s)
                                         * 100),
            "hydragnn_epoch_pair_p50_us_worst": pair50,
            "bytes_ok": all(r["bytes_ok"] for r in rr),
            "rounds": rr,
        }

    print(f"\nA/B: original DDStore vs ours, {size} ranks x {nloc} rows of {ROW} B, "
          f"{args.rounds} round(s), {args.calls} single gets + {args.batches}x{BATCH} "
          f"HydraGNN gets per rank per round")
    print(f"{'variant':12s} {'single p50':>11s} {'single p99':>11s} "
          f"{'p50 by round (slowest rank)':>28s} {'hydragnn rows/s':>16s} "
          f"{'min..max':>20s} {'spread':>7s} {'pair p50':>9s}  bytes")
    for name in order:
        s = summary[name]
        byround = ",".join(f"{v:.2f}" for v in s["single_p50_by_round"])
        print(f"{name:12s} {s['single_pooled']['p50_us']:9.2f}us "
              f"{s['single_pooled']['p99_us']:9.2f}us {byround:>28s} "
              f"{s['hydragnn_rows_per_s_median']:16.0f} "
              f"{s['hydragnn_rows_per_s_min']:9.0f}..{s['hydragnn_rows_per_s_max']:<9.0f} "
              f"{s['hydragnn_spread_pct']:6.1f}% {s['hydragnn_epoch_pair_p50_us_worst']:7.2f}us"
              f"  {'ok' if s['bytes_ok'] else 'DIFFER'}")
    base = summary["orig"]
    for name in order[1:]:
        s = summary[name]
        print(f"{name} / orig: single p50 x{s['single_pooled']['p50_us'] / base['single_pooled']['p50_us']:.2f}, "
              f"hydragnn rows/s x{s['hydragnn_rows_per_s_median'] / base['hydragnn_rows_per_s_median']:.2f}")
    print("(single: pooled over ranks and rounds; hydragnn rows/s: all ranks' rows / "
          "slowest rank's time, median over rounds; pair p50: epoch_begin+epoch_end, "
          "slowest rank and round)")

    build = {}
    bi = os.path.join(os.path.dirname(os.path.abspath(args.orig_site)), "build_info.json")
    if os.path.exists(bi):
        build = json.load(open(bi))
    report = {
        "command": " ".join(sys.argv), "ranks": size, "rows_per_rank": nloc,
        "row_bytes": ROW, "batch": BATCH, "calls": args.calls, "batches": args.batches,
        "rounds": args.rounds, "order_per_round": order, "seed": args.seed,
        "host": platform.node(), "cpus": os.cpu_count(),
        "versions": {
            "original": dict(build, module=orig.__file__),
            "ours": {"path": MAIN, "commit": git("-C", MAIN, "rev-parse", "HEAD"),
                     "dirty": bool(git("-C", MAIN, "status", "--porcelain",
                                       "--untracked-files=no")),
                     "ddstore": getattr(ddstore, "__version__", None)},
            "mpi": MPI.Get_library_version().splitlines()[0].strip(),
            "mpi_full": " ".join(MPI.Get_library_version().split()),
            "mpi_thread_level": {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED:
                                 "funneled", MPI.THREAD_SERIALIZED: "serialized",
                                 MPI.THREAD_MULTIPLE: "multiple"}[MPI.Query_thread()],
            "mpi4py": mpi4py.__version__, "numpy": np.__version__,
            "python": platform.python_version(),
        },
        "summary": summary,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")
    if not all(summary[n]["bytes_ok"] for n in order):
        raise SystemExit("bytes read differ from bytes written")


if __name__ == "__main__":
    main()
