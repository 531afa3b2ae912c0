"""Graph loading benchmark: DDStore vs PFF vs CFF vs an in-memory list (no model).

Run::

    mpiexec -n 2 python -m ddstore.bench.graphs            # comparison + widths 1, 2
    mpiexec -n 4 python -m ddstore.bench.graphs --sweep-only   # widths 1, 2, 4

One epoch of Ising graphs (global shuffle with ``DistributedSampler``, batch 128 per
rank) is loaded, and nothing else is done with the batches.  For each method it reports
samples/s over all ranks (graphs of the epoch / slowest rank's time) and the per-graph
load latency p50/p95/p99: the time to fetch and collate a mini-batch divided by its
graphs, over every rank's batches.

Methods:

- ``store``: ``GraphDataset.loader`` (one batched read per mini-batch, ``Batch`` built
  from the packed rows);
- ``store_control``: the ``store`` epoch again, the control: the spread of the two is
  printed beside every ratio, so that a change can be told from noise;
- ``store_pyg``: the same store through ``torch_geometric.loader.DataLoader``
  (``__getitems__`` gives ``Data`` objects, PyG collates them);
- ``store_per_sample``: a Dataset with only ``__getitem__`` (``dataset[i]`` per graph)
  batched by PyG's DataLoader: how HydraGNN reads;
- ``store_single``: ``dataset[i]`` one graph at a time (one read per graph);
- ``pff``: one pickle file per sample (restricted unpickler) + PyG DataLoader;
- ``cff``: per-sample reads from one ADIOS2 file + PyG DataLoader;
- ``list``: a plain in-memory Python list of ``Data`` + PyG DataLoader (the limit).

Results are printed and written as JSON and a latency-CDF PNG under ``--out``
(default ``bench_results/``).
"""
import os
import platform
import sys
import time

import numpy as np
from mpi4py import MPI

from ddstore.bench import (Items, exit_on_every_rank, parser, plural, ratio, ratio_text,
                           scratch_dir, write_report)
from ddstore.errors import DDStoreError
from ddstore.cli import at_least


def _args(argv, prog=None):
    p = parser("graphs", prog, "ddstore graph loading benchmark", batch_size=128,
               widths_help="comma-separated widths for the sweep; auto = 1, 2, 4 that "
                           "divide the number of ranks")
    p.add_argument("--num-graphs", type=at_least(1), default=4096)
    p.add_argument("--single", type=at_least(0), default=512,
                   help="graphs per rank for the one-graph-at-a-time store reads")
    p.add_argument("--sweep-only", action="store_true",
                   help="only the store width sweep (no files, no baselines)")
    p.add_argument("--workdir", default=None,
                   help="directory for the PFF/CFF files (default: a temporary one)")
    p.add_argument("--no-plot", action="store_true")
    return p.parse_args(argv)


def _stats(comm, name, graphs, seconds, latencies):
    """Gather one method's numbers on rank 0 (None elsewhere)."""
    total = comm.allreduce(graphs)
    slowest = comm.allreduce(seconds, op=MPI.MAX)
    lat = comm.gather(np.asarray(latencies, dtype=np.float64), root=0)
    if comm.rank != 0:
        return None
    lat_us = np.concatenate(lat) * 1e6
    p50, p95, p99 = np.percentile(lat_us, [50, 95, 99]) if lat_us.size else (0, 0, 0)
    return {"method": name, "graphs": int(total), "seconds": float(slowest),
            "samples_per_s": float(total / slowest) if slowest > 0 else 0.0,
            "p50_us": float(p50), "p95_us": float(p95), "p99_us": float(p99),
            "latencies_us": lat_us}


def _epoch(comm, loader):
    """Time one pass over ``loader``: (graphs, seconds, per-graph latencies)."""
    from ddstore.graphs import timed_batches
    comm.Barrier()
    graphs, lat = 0, []
    t_start = time.perf_counter()
    for batch, seconds in timed_batches(loader):
        n = batch.num_graphs
        lat.append(seconds / n)
        graphs += n
    return graphs, time.perf_counter() - t_start, lat


def _sampler(torch, dataset, comm, seed):
    s = torch.utils.data.DistributedSampler(dataset, num_replicas=comm.size,
                                            rank=comm.rank, shuffle=True, seed=seed)
    s.set_epoch(1)
    return s


def _store_methods(comm, torch, graphs, ddstore, full, args, width, transport,
                   extra=True):
    """Measure the store with ``width``/``transport``; returns a list of results."""
    from torch_geometric.loader import DataLoader
    out = []
    with ddstore.DDStore(comm, width=width, transport=transport) as store:
        ds = graphs.GraphDataset.from_samples(store, "bench", full, progress=False)
        tag = f"w{store.width}_{store.transport}"
        sampler = _sampler(torch, ds, comm, args.seed)
        loader = ds.loader(args.batch_size, sampler=sampler)
        for i, _ in enumerate(loader):  # warm-up: a few batches
            if i == 2:
                break
        res = _stats(comm, "store", *_epoch(comm, loader))
        out.append((tag, res))
        if extra:
            # the control: the same epoch again (its spread is printed beside the ratios)
            out.append((tag, _stats(comm, "store_control", *_epoch(comm, loader))))
            loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler)
            out.append((tag, _stats(comm, "store_pyg", *_epoch(comm, loader))))
            # HydraGNN's way: a Dataset with only __getitem__ (one ds[i] per sample),
            # batched by PyG's DataLoader
            loader = DataLoader(Items(len(ds), ds.__getitem__), batch_size=args.batch_size,
                                sampler=sampler)
            out.append((tag, _stats(comm, "store_per_sample", *_epoch(comm, loader))))
            idx = list(sampler)[:args.single]
            comm.Barrier()
            lat = []
            t_start = time.perf_counter()
            for i in idx:
                t0 = time.perf_counter()
                ds[i]
                lat.append(time.perf_counter() - t0)
            out.append((tag, _stats(comm, "store_single", len(idx),
                                    time.perf_counter() - t_start, lat)))
        held = comm.gather(store.nbytes(), root=0)
    for _, res in out:
        if res is not None:
            res.update(width=width or comm.size, transport=transport, bytes_per_rank=held)
    return out


def main(argv=None, prog=None):
    args = _args(argv, prog)
    import torch
    torch.set_num_threads(1)
    from torch_geometric.loader import DataLoader

    import ddstore
    import ddstore.graphs as graphs
    from ddstore.sources import AdiosSource, PickleDirSource

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    full = graphs.ising_dataset(args.num_graphs, seed=args.seed)
    results, sweep = [], []
    say = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    say(f"graph loading benchmark: {plural(size, 'rank')}, {args.num_graphs} Ising graphs "
        f"(125 atoms, 600 edges), batch {args.batch_size} per rank, global shuffle")

    if not args.sweep_only:
        for _, res in _store_methods(comm, torch, graphs, ddstore, full, args, None,
                                     "auto"):
            results.append(res)
        # in-memory list: every rank holds every graph (the limit)
        mem = [full[i] for i in range(len(full))]
        loader = DataLoader(mem, batch_size=args.batch_size,
                            sampler=_sampler(torch, mem, comm, args.seed))
        results.append(_stats(comm, "list", *_epoch(comm, loader)))
        del mem
        with scratch_dir(comm, "ddstore-bench-", args.workdir) as workdir:
            pff_dir, cff_path = os.path.join(workdir, "pff"), os.path.join(workdir,
                                                                           "ising.bp")
            failed = None
            if rank == 0:
                try:
                    t0 = time.perf_counter()
                    graphs.write_pickle_dir(full, pff_dir)
                    t1 = time.perf_counter()
                    graphs.write_adios(full, cff_path)
                    say(f"wrote PFF ({t1 - t0:.1f} s) and CFF "
                        f"({time.perf_counter() - t1:.1f} s) under {workdir}")
                except (OSError, DDStoreError) as exc:  # told by every rank's exit
                    failed = f"--workdir {workdir}: {exc}"
            failed = comm.bcast(failed, root=0)  # (the others wait for rank 0's files)
            if failed is not None:
                exit_on_every_rank(failed, 1)
            pff_source = PickleDirSource(pff_dir)  # PFF: one restricted-unpickled file
            pff = Items(len(pff_source), lambda i: pff_source.read_one(int(i)))
            loader = DataLoader(pff, batch_size=args.batch_size,
                                sampler=_sampler(torch, pff, comm, args.seed))
            results.append(_stats(comm, "pff", *_epoch(comm, loader)))
            with AdiosSource(cff_path) as src:
                layout = graphs.GraphLayout(src.meta["layout"])
                # CFF: each sample read from the ADIOS2 file on its own
                cff = Items(len(src), lambda i: layout.to_data(src.read_one(int(i))))
                loader = DataLoader(cff, batch_size=args.batch_size,
                                    sampler=_sampler(torch, cff, comm, args.seed))
                results.append(_stats(comm, "cff", *_epoch(comm, loader)))

    widths = ([w for w in (1, 2, 4) if w <= size and size % w == 0]
              if args.widths == "auto" else [int(w) for w in args.widths.split(",")])
    for transport in [t.strip() for t in args.transports.split(",") if t.strip()]:
        for w in widths:
            for _, res in _store_methods(comm, torch, graphs, ddstore, full, args, w,
                                         transport, extra=False):
                if res is not None:
                    res["method"] = f"store_w{w}_{transport}"
                    sweep.append(res)

    if rank != 0:
        return 0
    by = {r["method"]: r for r in results}
    print(f"\n{'method':<22}{'samples/s':>12}{'p50 us/graph':>14}{'p95':>10}{'p99':>10}"
          f"{'graphs':>8}")
    for r in results + sweep:
        print(f"{r['method']:<22}{r['samples_per_s']:>12.0f}{r['p50_us']:>14.2f}"
              f"{r['p95_us']:>10.2f}{r['p99_us']:>10.2f}{r['graphs']:>8}")
    ratios = {}
    if "store" in by:
        control = [by[m]["samples_per_s"] for m in ("store", "store_control") if m in by]
        for method, base, target in (("store", "pff", 10.0), ("store", "cff", 10.0),
                                     ("store", "list", 0.5), ("store_pyg", "list", 0.5)):
            if method in by and base in by and by[base]["samples_per_s"] > 0:
                ratios[f"{method}_vs_{base}"] = dict(ratio(
                    by[method]["samples_per_s"], by[base]["samples_per_s"], control),
                    target=target)
        print()
        for key, v in ratios.items():
            ok = "meets" if v["ratio"] >= v["target"] else "MISSES"
            print(f"{key}: {ratio_text(v)} (target >= {v['target']}x: {ok})")
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"graphs_n{size}" + ("_sweep" if args.sweep_only
                                                       else ""))
    doc = {"benchmark": "ddstore.bench.graphs", "ranks": size,
           "num_graphs": args.num_graphs, "batch_size": args.batch_size,
           "host": platform.node(), "cpus": os.cpu_count(),
           "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "results": [{k: v for k, v in r.items() if k != "latencies_us"}
                       for r in results],
           "width_sweep": [{k: v for k, v in r.items() if k != "latencies_us"}
                           for r in sweep],
           "ratios": ratios}
    print()
    stem = os.path.splitext(write_report(doc, stem + ".json", args.seed))[0]
    if not args.no_plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for r in results + sweep:
                lat = np.sort(r["latencies_us"])
                if lat.size:
                    ax.step(lat, np.arange(1, lat.size + 1) / lat.size, where="post",
                            label=r["method"])
            ax.set_xscale("log")
            ax.set_xlabel("per-graph load latency (us, batch time / graphs)")
            ax.set_ylabel("fraction of batches")
            ax.set_title(f"Ising graphs, {plural(size, 'rank')}, batch {args.batch_size}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(stem + ".png", dpi=120)
            print(f" and {stem}.png", end="")
        except Exception as exc:  # pragma: no cover - plotting is optional
            print(f" (no plot: {exc})", end="")
    print()
    return 0


if __name__ == "__main__":
    from ddstore.cli import run_program
    sys.exit(run_program(main))
