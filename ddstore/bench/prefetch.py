"""Prefetch benchmark: epoch time with and without ``loader(..., prefetch=1)``.

Run::

    mpiexec -n 2 python -m ddstore.bench.prefetch
    mpiexec -n 2 python -m ddstore.bench.prefetch --transport rma --repeats 5

For a WindowDataset (PeMS-BAY-like series, global sampler, batch 64) and a GraphDataset
(Ising graphs, DistributedSampler, batch 64) on a width-``size`` store, it first times one
epoch of loading alone to get the mean load time per batch ``L``, then runs epochs with a
synthetic compute step after each batch, without and with prefetch, alternating, and
reports the median epoch times and their ratio (target: prefetch <= 0.65 x without),
with the spread of the epochs without prefetch beside it (the control).

Compute steps (``--compute``):

- ``sleep`` (default): ``time.sleep(L)``, the CPU is free while "the accelerator"
  computes -- the case prefetch is for (a GPU step; the data loading runs on the CPU).
- ``cpu``: a torch matrix product loop lasting about ``L`` on one thread (it releases
  the GIL but needs a core: with one core per rank, load and compute compete for it).

Both ranks measure; results are printed by rank 0 and written to
``<out>/prefetch.json``.
"""
import os
import platform
import time

import numpy as np

from ddstore.bench import check_windows, parser, plural, ratio, ratio_text, write_report
from ddstore.cli import TRANSPORTS, at_least, names_list
from ddstore.prefetch import MAX_PREFETCH


def _args(argv, prog=None):
    p = parser("prefetch", prog, "ddstore prefetch benchmark", batch_size=64)
    p.add_argument("--steps", type=at_least(1), default=20000)
    p.add_argument("--horizon", type=at_least(1), default=12,
                   help="window length (and target length) of the series' windows")
    p.add_argument("--nodes", type=at_least(1), default=325)
    p.add_argument("--graphs", type=at_least(1), default=20000)
    p.add_argument("--transport", default="auto", choices=TRANSPORTS)
    p.add_argument("--compute", default="sleep,cpu", type=names_list(("sleep", "cpu")),
                   help="comma-separated compute steps: sleep, cpu")
    p.add_argument("--prefetch", type=at_least(0, most=MAX_PREFETCH), default=1)
    p.add_argument("--repeats", type=at_least(2), default=3,
                   help="epochs without and with prefetch, alternating (at least 2: the "
                        "spread of the epochs without is the control)")
    args = p.parse_args(argv)
    check_windows(p, args)
    return args


def _cpu_work(seconds, a):
    """torch matmuls for about ``seconds`` (one thread)."""
    import torch
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.mm(a, a)


def _epoch(comm, loader, compute, seconds, a):
    comm.Barrier()
    t0 = time.perf_counter()
    n = 0
    for _ in loader:
        n += 1
        if compute == "sleep":
            time.sleep(seconds)
        elif compute == "cpu":
            _cpu_work(seconds, a)
    dt = time.perf_counter() - t0
    return comm.allreduce(dt, op=_max()), n


def _max():
    from mpi4py import MPI
    return MPI.MAX


def _case(comm, name, make_loader, args, a):
    """Median epoch times for every compute step, without and with prefetch."""
    plain = make_loader(0)
    load_s, nb = _epoch(comm, plain, None, 0.0, a)   # warm-up: touch every page once
    load_s, nb = _epoch(comm, plain, None, 0.0, a)
    per_batch = load_s / max(nb, 1)
    out = {"batches_per_rank": nb, "load_only_epoch_s": load_s,
           "load_per_batch_s": per_batch, "compute": {}}
    pre = make_loader(args.prefetch)
    for compute in args.compute:
        times = {"without": [], "with": []}
        for _ in range(args.repeats):
            times["without"].append(_epoch(comm, plain, compute, per_batch, a)[0])
            times["with"].append(_epoch(comm, pre, compute, per_batch, a)[0])
        med = {k: float(np.median(v)) for k, v in times.items()}
        with_over_without = ratio(med["with"], med["without"], control=times["without"])
        out["compute"][compute] = {
            "epoch_s_without": med["without"], "epoch_s_with": med["with"],
            "ratio": with_over_without["ratio"], "control": with_over_without["control"],
            "spread": with_over_without["spread"], "all_without": times["without"],
            "all_with": times["with"], "ideal_ratio": max(load_s, nb * per_batch) /
            (load_s + nb * per_batch)}
        if comm.rank == 0:
            r = out["compute"][compute]
            print(f"  {name:8s} compute={compute:5s}: load {per_batch * 1e3:.2f} ms/batch x "
                  f"{nb} batches; epoch without prefetch {r['epoch_s_without']:.3f} s, "
                  f"with prefetch={args.prefetch} {r['epoch_s_with']:.3f} s: ratio "
                  f"{ratio_text(r, 3)} (ideal {r['ideal_ratio']:.2f}, target <= 0.65)",
                  flush=True)
    return out


def main(argv=None, prog=None):
    args = _args(argv, prog)
    import torch
    from mpi4py import MPI

    import ddstore
    from ddstore import graphs
    from ddstore import spatiotemporal as st
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    a = torch.randn(128, 128)
    store = ddstore.DDStore(comm, transport=args.transport)
    rng = np.random.default_rng(args.seed)
    t = np.arange(args.steps)[:, None, None]
    raw = (np.sin(2 * np.pi * t / 288) + 0.1 * rng.standard_normal(
        (args.steps, args.nodes, 2))).astype(np.float32)
    ds = st.WindowDataset(store, "series", raw, horizon=args.horizon)
    del raw
    train = ds.splits()[0]
    gds = graphs.GraphDataset.from_samples(
        store, "ising", graphs.ising_dataset(args.graphs, seed=args.seed), progress=False)
    gsampler = torch.utils.data.DistributedSampler(gds, num_replicas=comm.size,
                                                   rank=comm.rank, shuffle=True,
                                                   seed=args.seed)
    if comm.rank == 0:
        print(f"[prefetch] {plural(comm.size, 'rank')}, width {store.width} "
              f"({store.transport}), MPI thread level {MPI.Query_thread()} "
              f"(MULTIPLE={MPI.THREAD_MULTIPLE}); "
              f"series {ds.shape}, {args.graphs} Ising graphs, batch {args.batch_size}",
              flush=True)
    doc = {"benchmark": "prefetch", "ranks": comm.size, "width": store.width,
           "transport": store.transport, "prefetch": args.prefetch,
           "host": platform.node(), "cpus": os.cpu_count(), "cases": {}}
    doc["cases"]["windows"] = _case(
        comm, "windows", lambda k: train.loader(args.batch_size, sampler="global",
                                                prefetch=k), args, a)
    doc["cases"]["graphs"] = _case(
        comm, "graphs", lambda k: gds.loader(args.batch_size, sampler=gsampler,
                                             prefetch=k), args, a)
    if comm.rank == 0:
        write_report(doc, os.path.join(args.out, "prefetch.json"), args.seed)
    store.free()


if __name__ == "__main__":
    import sys
    from ddstore.cli import run_program
    sys.exit(run_program(main))
