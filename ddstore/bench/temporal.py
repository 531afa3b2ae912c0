"""Temporal neighbour sampling benchmark (ddstore.temporal).

Run::

    mpiexec -n 2 python -m ddstore.bench.temporal     # widths 1 and 2
    python -m ddstore.bench.temporal                  # one rank, width 1

A power-law stream (:func:`ddstore.temporal.synthetic_stream`, default 1 M edges on 10 k
nodes) is stored as a T-CSR with ``add_reverse=True``.  Mini-batches of ``--batch-size``
edges are taken evenly over the whole stream (rank ``r`` takes every ``size``-th of them),
each giving ``3 * batch_size`` roots (src, dst, one negative) at the edges' times; each
rank samples them on one thread.  Reported per configuration (strategy and fanouts ×
width × transport): roots/s and sampled edges/s per rank (the time of ``sample`` calls
only; mean and slowest rank; each configuration sampled twice, the second pass the
control printed beside the width ratio), the T-CSR bytes each rank holds, and the
one-sided traffic of a batch (``rma``: MPI_Get calls, round trips and bytes per batch of
``3 * batch_size`` roots, and per remote owner; :func:`ddstore.bench.traffic`).  Results are printed
and written as JSON (and a PNG) under ``--out`` (default ``bench_results/``).
"""
import os
import platform
import time

import numpy as np
from mpi4py import MPI

from ddstore.bench import log, parser, plural, ratio, ratio_text, rma_counts, traffic, \
    traffic_text, write_report
from ddstore.cli import at_least, pause
from ddstore.prefetch import MAX_PREFETCH

CONFIGS = (("recent", (10,)), ("uniform", (10,)), ("uniform", (10, 10)))


def _args(argv, prog=None):
    p = parser("temporal", prog, "ddstore temporal sampling benchmark", batch_size=600,
               widths_help="comma-separated; auto = 1 and size")
    p.add_argument("--num-nodes", type=at_least(1), default=10_000)
    p.add_argument("--num-edges", type=at_least(1), default=1_000_000)
    p.add_argument("--batches", type=at_least(1), default=200,
                   help="mini-batches sampled per configuration (over all ranks)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--lookup-calls", type=at_least(0), default=2000,
                   help="calls of neighbors(v) timed per width (and a tenth as many of "
                        "neighbor_lists of 600 nodes); 0: not measured")
    p.add_argument("--step-ms", type=pause("ms"), default=0.0,
                   help="also an epoch of uniform [10, 10] with a synthetic model step of "
                        "this many ms per batch, with and without reading ahead")
    p.add_argument("--prefetch", type=at_least(0, most=MAX_PREFETCH), default=2,
                   help="with --step-ms: batches sampled ahead in a thread")
    return p.parse_args(argv)


def _sample(sm, s, mine, batch_size, num_nodes):
    """(roots, sampled edges, seconds of ``sample`` calls) of this rank's batches."""
    roots_n = edges_n = 0
    elapsed = 0.0
    for b in mine:
        a, z = int(b) * batch_size, (int(b) + 1) * batch_size
        roots = np.concatenate([s.src[a:z], s.dst[a:z], (s.src[a:z] * 7919 + b) % num_nodes])
        ts = np.tile(s.t[a:z], 3)
        t1 = time.perf_counter()
        blocks = sm.sample(roots, ts)
        elapsed += time.perf_counter() - t1
        roots_n += len(roots)
        edges_n += sum(bl.num_edges for bl in blocks)
    return roots_n, edges_n, elapsed


class _Batches:
    """This rank's batches sampled one after the other (an iterable, for read-ahead)."""

    def __init__(self, sm, s, mine, batch_size, num_nodes):
        self.args = sm, s, mine, batch_size, num_nodes

    def __iter__(self):
        sm, s, mine, batch_size, num_nodes = self.args
        for b in mine:
            a, z = int(b) * batch_size, (int(b) + 1) * batch_size
            roots = np.concatenate([s.src[a:z], s.dst[a:z],
                                    (s.src[a:z] * 7919 + b) % num_nodes])
            yield sm.sample(roots, np.tile(s.t[a:z], 3))


def _lookups(g, args):
    """Local: µs a call of ``g.neighbors(v)`` (random nodes, the best of 3 runs of
    ``--lookup-calls`` calls) and of ``g.neighbor_lists`` of 600 random nodes (a tenth
    as many calls)."""
    rng = np.random.default_rng(args.seed)
    k = args.lookup_calls
    nodes = [int(v) for v in rng.integers(0, g.num_nodes, k)]
    many = rng.integers(0, g.num_nodes, 600)

    def best(call, n):
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            call(n)
            runs.append(time.perf_counter() - t)
        return min(runs) / n * 1e6
    return dict(neighbors_us=best(lambda n: [g.neighbors(v) for v in nodes[:n]], k),
                neighbor_lists_600_us=best(
                    lambda n: [g.neighbor_lists(many) for _ in range(n)], max(1, k // 10)))


def main(argv=None, prog=None):
    import ddstore
    from ddstore import temporal as tg
    args = _args(argv, prog)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    t0 = time.perf_counter()
    s = tg.synthetic_stream(args.num_nodes, args.num_edges, seed=args.seed)
    log(comm, f"stream: {args.num_nodes} nodes, {args.num_edges} edges, max degree "
              f"{int(np.bincount(np.concatenate([s.src, s.dst])).max())} (add_reverse), "
              f"generated in {time.perf_counter() - t0:.1f} s")
    if args.widths == "auto":
        widths = sorted({1, size})
    else:
        widths = [int(w) for w in args.widths.split(",")]
    transports = [t for t in args.transports.split(",") if t]
    # batches evenly over the stream; rank r takes every size-th one
    nb_all = args.num_edges // args.batch_size
    picks = np.linspace(0, nb_all - 1, min(args.batches, nb_all)).astype(np.int64)
    mine = picks[rank::size]
    results, lookups = [], []
    for width in widths:
        for transport in (["auto"] if width == 1 else transports):
            with ddstore.DDStore(comm, width=width, transport=transport) as store:
                lo, hi = ddstore.partition(args.num_edges, size, rank)
                comm.Barrier()
                t0 = time.perf_counter()
                g = tg.TemporalGraph.from_arrays(store, "g", s.src[lo:hi], s.dst[lo:hi],
                                                 s.t[lo:hi], add_reverse=True)
                build_s = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                tcsr = comm.allgather(g.tcsr_bytes())
                if args.lookup_calls:
                    look = _lookups(g, args)
                    lookups.append(dict(width=width, transport=transport, **look))
                    log(comm, f"width {width} {transport:4s} lookups (rank 0): "
                              f"neighbors(v) {look['neighbors_us']:.2f} us, neighbor_lists "
                              f"of 600 nodes {look['neighbor_lists_600_us']:.1f} us")
                for strategy, fanouts in CONFIGS:
                    sm = tg.TemporalSampler(g, fanouts, strategy, seed=args.seed)
                    before = rma_counts()  # only sample() reads the store in _sample
                    roots_n, edges_n, elapsed = _sample(sm, s, mine, args.batch_size,
                                                        args.num_nodes)
                    rma = traffic(comm, before, rma_counts(), len(mine), store)
                    # the control: the same batches sampled again
                    control = _sample(sm, s, mine, args.batch_size, args.num_nodes)
                    per = comm.allgather((roots_n / elapsed, edges_n / elapsed, edges_n,
                                          control[1] / control[2]))
                    res = dict(width=width, transport=transport, strategy=strategy,
                               fanouts=list(fanouts), batches=len(picks),
                               roots_per_s_per_rank=float(np.mean([p[0] for p in per])),
                               edges_per_s_per_rank=float(np.mean([p[1] for p in per])),
                               edges_per_s_slowest_rank=float(min(p[1] for p in per)),
                               edges_per_s_per_rank_control=float(np.mean([p[3]
                                                                           for p in per])),
                               sampled_edges=int(sum(p[2] for p in per)),
                               tcsr_bytes_per_rank=[int(x) for x in tcsr],
                               build_s=build_s, shm_peers=store.shm_peers, rma=rma)
                    if args.step_ms > 0 and (strategy, fanouts) == ("uniform", (10, 10)):
                        from ddstore.bench.device import read_ahead, read_ahead_text
                        res["read_ahead"] = read_ahead(
                            lambda: _Batches(sm, s, mine, args.batch_size, args.num_nodes),
                            args.step_ms, args.prefetch, store=store,
                            barrier=comm.Barrier)
                        log(comm, f"width {width} {transport} uniform [10, 10] reading "
                                  f"ahead (rank 0): {read_ahead_text(res['read_ahead'])}")
                    results.append(res)
                    log(comm, f"width {width} {transport:4s} {strategy:7s} "
                              f"{str(list(fanouts)):8s}: {res['roots_per_s_per_rank'] / 1e6:6.2f}"
                              f" M roots/s, {res['edges_per_s_per_rank'] / 1e6:6.2f} M edges/s"
                              f" per rank (slowest {res['edges_per_s_slowest_rank'] / 1e6:.2f})"
                              f"; T-CSR {max(tcsr) / 1e6:.1f} MB/rank; build {build_s:.2f} s"
                              f"; {traffic_text(rma)}")
                g.remove()
    if rank == 0:
        uni = {(r["width"], r["transport"]): r["edges_per_s_per_rank"] for r in results
               if r["strategy"] == "uniform" and r["fanouts"] == [10, 10]}
        targets = {"uniform_10_10_width1_edges_per_s": uni.get((1, "auto")),
                   "target_edges_per_s": 4e6,
                   "meets_4M": bool(uni.get((1, "auto"), 0) >= 4e6)}
        if size > 1 and (size, "auto") in uni and (1, "auto") in uni:  # both were run
            control = [r[k] for r in results if r["strategy"] == "uniform" and
                       r["fanouts"] == [10, 10] and (r["width"], r["transport"]) == (1, "auto")
                       for k in ("edges_per_s_per_rank", "edges_per_s_per_rank_control")]
            width = ratio(uni[(1, "auto")], uni[(size, "auto")], control)
            targets["width_size_over_width1"] = width["ratio"]
            targets["width_size_over_width1_control"] = width
            print(f"uniform [10, 10], edges/s per rank: width 1 over width {size}: "
                  f"{ratio_text(width)}", flush=True)
        out = dict(benchmark="temporal", ranks=size, num_nodes=args.num_nodes,
                   num_edges=args.num_edges, batch_size=args.batch_size,
                   roots_per_batch=3 * args.batch_size, host=platform.node(),
                   results=results, lookups=lookups, targets=targets)
        print(f"targets: {targets}", flush=True)
        written = write_report(out, os.path.join(args.out, f"temporal_n{size}.json"),
                               args.seed)
        if not args.no_plot:  # (beside the report: a user's file there is kept)
            _plot(results, os.path.splitext(written)[0] + ".png", size)
    return 0


def _plot(results, path, size):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = sorted({(r["width"], r["transport"]) for r in results})
    configs = [(s, tuple(f)) for s, f in CONFIGS]
    fig, ax = plt.subplots(figsize=(7, 4))
    w = 0.8 / len(labels)
    for j, lab in enumerate(labels):
        vals = [next((r["edges_per_s_per_rank"] / 1e6 for r in results
                      if (r["width"], r["transport"]) == lab and
                      (r["strategy"], tuple(r["fanouts"])) == c), 0) for c in configs]
        ax.bar(np.arange(len(configs)) + j * w, vals, w,
               label=f"width {lab[0]} {lab[1]}")
    ax.axhline(4, color="k", ls="--", lw=1, label="target 4 M/s")
    ax.set_xticks(np.arange(len(configs)) + w * (len(labels) - 1) / 2)
    ax.set_xticklabels([f"{s} {list(f)}" for s, f in configs])
    ax.set_ylabel("sampled edges / s per rank (M)")
    ax.set_title(f"temporal sampling, {plural(size, 'rank')}, one thread each")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    import sys
    from ddstore.cli import run_program
    sys.exit(run_program(main))
