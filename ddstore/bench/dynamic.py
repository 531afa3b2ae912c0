"""Dynamic-graph benchmark: checkpoints + deltas (DynamicGraph) vs full stored snapshots.

Run (every rank works; rank 0 prints and writes ``<out>/dynamic.json``)::

    mpiexec -n 2 python -m ddstore.bench.dynamic                 # default size
    mpiexec -n 2 python -m ddstore.bench.dynamic --steps 1000    # the issue's full size

Synthetic part: ``--nodes`` (50,000) nodes, ``--edges`` (200,000) edges per step,
``--steps`` steps, ``--churn`` (1 %) of the edges replaced per step (each edge slot is
rewired every ``1/churn`` steps at its own phase, so every step changes the same share;
weights come with each rewiring).  The default is 100 steps instead of the issue's
1,000: full snapshots of 1,000 steps would take 4 GB (2 GB per rank at 2 ranks) on a
shared machine; the ratios below do not depend on the step count beyond the rounding
of the last checkpoint interval.  Steps are generated on demand (never all in memory).

Both stores hold the same canonical snapshots (sorted by ``(dst, src)``) in the same
DDStore (width ``--width``, default all ranks):

- ``full``: every snapshot as a record ``{"ei": int64 [2 E_t] (flattened edge_index),
  "w": float32 [E_t]}``; reading step ``t`` is one ``get_records_packed`` whose buffer is
  already the ``[2, E_t]`` edge_index (no further copy) -- the fastest way to get a
  snapshot out of a full copy;
- ``DynamicGraph``: checkpoints every ``k`` steps (the default rule) plus deltas.

Measured, alternating the two for ``--repeat`` rounds (best round reported; the full
copies at least twice: their spread is the control printed beside the speed ratio): bytes per
rank; forward and backward iteration over all steps (snapshots/s, edges/s; the snapshot
cache is cleared before each pass); random access p50/p99 (cache cleared before every
call: the uncached cost).  Every snapshot of the dynamic graph is compared with the full
copy once (``verified_snapshots``).

Twitter tennis part: bytes of the graph as a DynamicGraph vs a list of full PyG
snapshots (``DynamicGraphTemporalSignal``-style), and one training epoch of a small
recurrent GCN (GRU gates with ``GCNConv``, as in ``examples/dynamic_graph_forecast.py``)
with windows from :class:`~ddstore.dynamic.DynamicWindowDataset` vs from a
WindowDataset plus a list of full snapshots; and the same two reading batches of 64
windows with no model (``batch64_read_ms``, the loaders alone).
"""
import os
import platform
import time

import numpy as np

from ddstore.bench import Items, exit_on_every_rank, parser, plural, ratio, ratio_text, \
    require_files, write_report
from ddstore.cli import at_least, check_width
from ddstore.bench.memory import current_rss, peak_rss, reset_peak

MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
TENNIS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                      "data", "twitter_tennis_rg17.json")


def _args(argv, prog=None):
    p = parser("dynamic", prog, "ddstore dynamic-graph benchmark")
    p.add_argument("--nodes", type=at_least(1), default=50_000)
    p.add_argument("--edges", type=at_least(1), default=200_000, help="edges per step")
    p.add_argument("--steps", type=at_least(1), default=100,
                   help="time steps (the issue's full size is 1000)")
    p.add_argument("--churn", type=at_least(0, float, most=1.0), default=0.01,
                   help="share of edges replaced per step, in [0, 1]")
    p.add_argument("--width", type=at_least(1), default=None,
                   help="ranks per replica (default: all ranks)")
    p.add_argument("--checkpoint-every", type=at_least(1), default=None,
                   help="the synthetic graph's checkpoint_every (default: chosen by the "
                        "graph)")
    p.add_argument("--repeat", type=at_least(1), default=3, help="alternating timing rounds")
    p.add_argument("--random", type=at_least(1), default=200, help="random-access calls")
    p.add_argument("--tennis", default=None,
                   help="Twitter tennis JSON file (default: the repository's "
                        "tests/data/twitter_tennis_rg17.json, skipped if absent)")
    p.add_argument("--tennis-epochs", type=at_least(1), default=1)
    args = p.parse_args(argv)
    check_width(p, args.width)
    if args.edges > args.nodes ** 2:  # each target's sources: nodes // ceil(edges/nodes)
        p.error(f"--edges={args.edges} needs --edges <= --nodes ** 2 = {args.nodes ** 2} "
                f"(edges per step without a repeated edge)")
    from ..memory import available_memory
    need = _STEP_BYTES_PER_EDGE * args.edges  # a step's arrays, a few at a time
    if need > available_memory():  # (alike on the ranks of a node: the same machine)
        p.error(f"--edges={args.edges}: a step's arrays need about {need / 2 ** 30:.1f} GiB "
                f"({_STEP_BYTES_PER_EDGE} bytes per edge), more than the "
                f"{available_memory() / 2 ** 30:.1f} GiB available here; give fewer "
                f"--edges")
    return args


#: what generating, canonicalising and diffing one step holds per edge (the
#: generator's uint64 slots and int64 ids, the canonical keys and weights, the diffs)
_STEP_BYTES_PER_EDGE = 96


def _mix(x):
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class SyntheticSteps:
    """``edges[t]`` / ``weights[t]`` of the synthetic graph, generated on demand.

    Slot ``i`` (of ``E``) has target ``i % N`` and a source drawn from its own range of
    ``N // ceil(E / N)`` nodes (so no two slots ever give the same edge); it is rewired
    (new source and weight) every ``period = round(1 / churn)`` steps at phase
    ``hash(i) % period``.
    """

    def __init__(self, nodes, edges, steps, churn, seed):
        self.N, self.E, self.T = nodes, edges, steps
        self.period = max(1, int(round(1.0 / churn))) if churn > 0 else 0
        i = np.arange(edges, dtype=np.uint64)
        self._i = i
        self._seed = np.uint64(seed * 0x9E3779B97F4A7C15 % (1 << 64))
        self.dst = (np.arange(edges) % nodes).astype(np.int64)
        groups = -(-edges // nodes)
        self.range = nodes // groups
        self.base = (np.arange(edges) // nodes).astype(np.int64) * self.range
        self.phase = (_mix(i + self._seed) % np.uint64(max(self.period, 1))).astype(
            np.int64)

    def __len__(self):
        return self.T

    def _version(self, t):
        if not self.period:
            return np.zeros(self.E, dtype=np.uint64)
        return ((t + self.phase) // self.period).astype(np.uint64)

    def step(self, t):
        h = _mix(self._i * np.uint64(0x100000001B3) + self._version(t) *
                 np.uint64(0xD6E8FEB86659FD93) + self._seed)
        src = self.base + (h % np.uint64(self.range)).astype(np.int64)
        w = ((h >> np.uint64(40)) % np.uint64(1000)).astype(np.float32) / 10
        return np.stack([src, self.dst]), w

    def __getitem__(self, t):
        return self.step(t)[0]


def _pcts(us):
    p50, p99 = np.percentile(us, [50, 99])
    return {"p50_ms": float(p50) / 1e3, "p99_ms": float(p99) / 1e3,
            "mean_ms": float(np.mean(us)) / 1e3}


def synthetic(store, args, log):
    from ddstore.dynamic import DynamicGraph, canonical_edges
    from ddstore import partition
    gen = SyntheticSteps(args.nodes, args.edges, args.steps, args.churn, args.seed)
    T = args.steps
    comm = store.comm
    comm.Barrier()
    before = current_rss()
    reset_peak()
    t0 = time.perf_counter()
    g = DynamicGraph(store, "dyn", gen, Items(len(gen), lambda t: gen.step(t)[1]),
                     num_nodes=args.nodes, checkpoint_every=args.checkpoint_every,
                     show_progress=True)
    build_dyn = time.perf_counter() - t0
    # the build's peak above the RSS before it, per rank, against what the rank stores
    peaks = comm.allgather((peak_rss() - before, g.nbytes()))
    log(f"DynamicGraph built in {build_dyn:.1f} s: {g}; peak RSS above the start "
        f"{max(p for p, _ in peaks) / 1e6:.0f} MB on the highest rank, for "
        f"{max(n for _, n in peaks) / 1e6:.0f} MB stored")
    # full snapshots, canonical, this member's steps
    lo, hi = partition(T, store.group_size, store.group_rank)
    recs = []
    t0 = time.perf_counter()
    for t in range(lo, hi):
        ei, w = gen.step(t)
        keys, ww = canonical_edges(ei, w, args.nodes)
        bits = max(1, int(args.nodes - 1).bit_length())
        flat = np.empty(2 * keys.shape[0], dtype=np.int64)
        np.bitwise_and(keys, (1 << bits) - 1, out=flat[:keys.shape[0]])
        np.right_shift(keys, bits, out=flat[keys.shape[0]:])
        recs.append({"ei": flat, "w": ww.astype(np.float32)})
    store.add_records("full", recs)
    del recs
    build_full = time.perf_counter() - t0
    full_bytes = store.nbytes("full")
    dyn_bytes = g.nbytes()
    per_rank = comm.allgather((dyn_bytes, full_bytes))
    total_edges = int(g.num_edges().sum())

    def full_snapshot(t):
        data, _ = store.get_records_packed("full", np.array([t], dtype=np.int64))
        return data["ei"].reshape(2, -1), data["w"]

    # verification (untimed): every snapshot, forward
    import torch
    verified = 0
    for t, (ei, ew) in g.forward():
        fe, fw = full_snapshot(t)
        if not (np.array_equal(ei.numpy(), fe) and np.array_equal(ew.numpy(), fw)):
            raise RuntimeError(f"snapshot {t} differs from the full copy")
        verified += 1
    ok = comm.allreduce(verified) == verified * comm.size

    def run_dyn(order):
        g.clear_cache()
        comm.Barrier()
        t0 = time.perf_counter()
        it = g.forward() if order == "forward" else g.backward()
        for _t, (ei, ew) in it:
            pass
        return time.perf_counter() - t0

    def run_full(order):
        comm.Barrier()
        steps = range(T) if order == "forward" else range(T - 1, -1, -1)
        t0 = time.perf_counter()
        for t in steps:
            fe, fw = full_snapshot(t)
            ei, ew = torch.from_numpy(fe), torch.from_numpy(fw)
        return time.perf_counter() - t0

    timing = {}
    for order in ("forward", "backward"):
        runs_d, runs_f = [], []
        for r in range(max(2, args.repeat)):  # the full copies at least twice: control
            if r < args.repeat:
                runs_d.append(run_dyn(order))
            runs_f.append(run_full(order))
        best_d, best_f = min(runs_d), min(runs_f)
        speed = ratio(best_f, best_d, control=runs_f)
        timing[order] = {
            "dynamic_s": best_d, "full_s": best_f,
            "dynamic_snapshots_per_s": T / best_d, "full_snapshots_per_s": T / best_f,
            "dynamic_edges_per_s": total_edges / best_d,
            "full_edges_per_s": total_edges / best_f,
            "speed_ratio_dynamic_over_full": speed["ratio"], "speed_ratio": speed}
        log(f"{order:8s}: deltas {T / best_d:8.1f} snapshots/s "
            f"({total_edges / best_d / 1e6:.1f} M edges/s), full copies "
            f"{T / best_f:8.1f} snapshots/s -> {ratio_text(speed)} of the full-copy "
            f"speed")
    rng = np.random.default_rng(args.seed + store.rank)
    picks = rng.integers(0, T, args.random)
    dyn_us, full_us = np.empty(len(picks)), np.empty(len(picks))
    comm.Barrier()
    for i, t in enumerate(picks.tolist()):
        g.clear_cache()
        t0 = time.perf_counter()
        g.snapshot(t)
        dyn_us[i] = (time.perf_counter() - t0) * 1e6
        t0 = time.perf_counter()
        fe, fw = full_snapshot(t)
        full_us[i] = (time.perf_counter() - t0) * 1e6
    random_access = {"dynamic": _pcts(dyn_us), "full": _pcts(full_us)}
    rd, rf = random_access["dynamic"], random_access["full"]
    log(f"random access (uncached): deltas p50 {rd['p50_ms']:.2f} ms p99 "
        f"{rd['p99_ms']:.2f} ms; full p50 {rf['p50_ms']:.2f} ms p99 {rf['p99_ms']:.2f} ms")
    sizes = g.num_edges()
    res = {
        "nodes": args.nodes, "edges_per_step": args.edges, "steps": T,
        "churn": args.churn, "mean_edges": float(sizes.mean()),
        "mean_delta_entries": float(g.delta_entries()[1:].mean()) if T > 1 else 0.0,
        "checkpoint_every": g.checkpoint_every,
        "build_s": {"dynamic": build_dyn, "full": build_full},
        "bytes": {"deltas_and_checkpoints": int(sum(d for d, _ in per_rank)),
                  "full_snapshots": int(sum(f for _, f in per_rank)),
                  "per_rank_dynamic": [d for d, _ in per_rank],
                  "per_rank_full": [f for _, f in per_rank],
                  "materialized_pyg": g.materialized_nbytes()},
        "timing": timing, "random_access": random_access,
        "verified_snapshots": verified if ok else -1,
        "build_peak_rss_above_bytes": [int(p) for p, _ in peaks],
        "stored_bytes_per_rank": [int(n) for _, n in peaks],
    }
    b = res["bytes"]
    res["bytes"]["ratio_full_over_dynamic"] = b["full_snapshots"] / b[
        "deltas_and_checkpoints"]
    log(f"bytes: deltas+checkpoints {b['deltas_and_checkpoints'] / 2**20:.1f} MiB, full "
        f"snapshots {b['full_snapshots'] / 2**20:.1f} MiB "
        f"(full / dynamic = {b['ratio_full_over_dynamic']:.2f}x), per rank "
        f"{[round(d / 2**20, 1) for d in b['per_rank_dynamic']]} vs "
        f"{[round(f / 2**20, 1) for f in b['per_rank_full']]} MiB; k = "
        f"{g.checkpoint_every}")
    store.remove("full")
    g.free()
    return res


def _tennis_series(comm, path):
    """Collective: the Twitter tennis series from ``path`` (None if it is absent), read
    before the benchmark runs; a file that cannot be read as one ends the program on
    every rank with one line naming it (exit code 2)."""
    from ddstore import spatiotemporal as st
    if not os.path.exists(path):
        return None
    try:
        series, error = st.load_pgt_json(path), None
    except Exception as exc:  # noqa: BLE001 -- any failure to read it: named below
        series, error = None, f"--tennis {path}: {type(exc).__name__}: {exc}"
    errors = [e for e in comm.allgather(error) if e]
    if errors:
        exit_on_every_rank(errors[0])
    return series


def tennis(store, args, log, series):
    """Bytes and one training epoch: DynamicWindowDataset vs WindowDataset + full list."""
    import torch
    from ddstore import spatiotemporal as st
    from ddstore.dynamic import DynamicWindowDataset
    from torch_geometric.nn import GCNConv
    torch.manual_seed(0)
    raw = series.to_numpy().copy()
    raw[:, :, series.target_feature] = np.log1p(raw[:, :, series.target_feature])
    feats = st.from_arrays(raw)
    h, B = 4, 8
    ds = DynamicWindowDataset(store, "tt", feats, h, edges=series.edges,
                                 weights=series.weights)
    base = st.WindowDataset(store, "ttbase", feats, h)
    full = [(torch.from_numpy(e), torch.from_numpy(w)) for e, w in
            zip(series.edges, series.weights)]
    full_bytes = sum(e.numel() * 8 + w.numel() * 4 for e, w in full)
    n, f = ds.num_nodes, ds.num_features

    class Cell(torch.nn.Module):
        def __init__(self, f, hid):
            super().__init__()
            self.zr = GCNConv(f + hid, 2 * hid)
            self.c = GCNConv(f + hid, hid)
            self.out = torch.nn.Linear(hid, 1)
            self.hid = hid

        def forward(self, x, graphs):
            Bn = x.shape[0] * x.shape[2]
            H = x.new_zeros(Bn, self.hid)
            for j, (ei, ew) in enumerate(graphs):
                xj = x[:, j].reshape(Bn, -1)
                z, r = torch.sigmoid(self.zr(torch.cat([xj, H], 1), ei, ew)).chunk(2, 1)
                c = torch.tanh(self.c(torch.cat([xj, r * H], 1), ei, ew))
                H = z * H + (1 - z) * c
            return self.out(H).reshape(x.shape[0], x.shape[2])

    def batched(starts):
        out = []
        for j in range(h):
            col = [full[s + j] for s in starts]
            sizes = torch.tensor([c[0].shape[1] for c in col])
            ei = torch.cat([c[0] for c in col], 1) + torch.repeat_interleave(
                torch.arange(len(starts)) * n, sizes)
            out.append((ei, torch.cat([c[1] for c in col])))
        return out

    def epoch(source):
        model = Cell(f, 16)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        train = ds.splits()[0]
        order = np.random.default_rng(0).permutation(len(train))
        t0 = time.perf_counter()
        for i in range(0, len(order), B):
            idx = order[i:i + B]
            if source == "dynamic":
                x, y, graphs = train.get_batch(idx)
            else:
                x, y = base.splits()[0].get_batch(idx)
                graphs = batched((idx + train.start).tolist())
            pred = model(x, graphs)
            loss = torch.nn.functional.l1_loss(pred, y[:, 0, :, series.target_feature])
            opt.zero_grad()
            loss.backward()
            opt.step()
        return time.perf_counter() - t0

    def reads(source, size=64):
        """Seconds a batch of ``size`` windows takes to read, with no model (the
        loaders alone): the windows and their graphs, as one epoch in a random order."""
        train = ds.splits()[0]
        order = np.random.default_rng(0).permutation(len(train))
        ds.graph.clear_cache()
        t0 = time.perf_counter()
        for i in range(0, len(order), size):
            idx = order[i:i + size]
            if source == "dynamic":
                train.get_batch(idx)
            else:
                base.splits()[0].get_batch(idx)
                batched((idx + train.start).tolist())
        return (time.perf_counter() - t0) / -(-len(order) // size)

    times = {"dynamic": [], "full_list": []}
    batch_s = {"dynamic": [], "full_list": []}
    for _ in range(args.tennis_epochs):
        times["dynamic"].append(epoch("dynamic"))
        times["full_list"].append(epoch("full"))
    for _ in range(3):  # alternating rounds, the least of each kept
        batch_s["dynamic"].append(reads("dynamic"))
        batch_s["full_list"].append(reads("full"))
    dyn_bytes = store.comm.allreduce(ds.graph.nbytes())
    res = {"steps": ds.num_steps, "nodes": n, "edges": int(ds.graph.num_edges().sum()),
           "checkpoint_every": ds.graph.checkpoint_every,
           "bytes": {"dynamic_graph_all_ranks": int(dyn_bytes),
                     "dynamic_graph_per_rank": int(ds.graph.nbytes()),
                     "full_snapshots": int(full_bytes),
                     "materialized_pyg": ds.graph.materialized_nbytes()},
           "epoch_s": {k: min(v) for k, v in times.items()},
           "batch64_read_ms": {k: 1e3 * min(v) for k, v in batch_s.items()}}
    log(f"Twitter tennis: {res['edges']} edges over {res['steps']} steps, k = "
        f"{res['checkpoint_every']}; graph {dyn_bytes / 1024:.0f} KiB in the store (all "
        f"ranks) vs {full_bytes / 1024:.0f} KiB as full PyG snapshots (on every rank); "
        f"epoch {res['epoch_s']['dynamic']:.2f} s vs {res['epoch_s']['full_list']:.2f} s; "
        f"a batch of 64 windows read in {res['batch64_read_ms']['dynamic']:.2f} ms vs "
        f"{res['batch64_read_ms']['full_list']:.2f} ms")
    store.remove("ttbase")
    ds.free()
    return res


def main(argv=None, prog=None):
    args = _args(argv, prog)
    from mpi4py import MPI
    import torch
    torch.set_num_threads(1)
    import ddstore
    comm = MPI.COMM_WORLD
    if args.tennis is not None:  # named on the command line: it must be there
        require_files(comm, {"--tennis": args.tennis})
    else:
        args.tennis = TENNIS
    series = _tennis_series(comm, args.tennis)

    def log(msg):
        if comm.rank == 0:
            print(msg, flush=True)

    with ddstore.DDStore(comm, width=args.width) as store:
        log(f"ddstore dynamic-graph benchmark: {plural(comm.size, 'rank')}, width "
            f"{store.width}, transport {store.transport}")
        res = {"ranks": comm.size, "width": store.width, "transport": store.transport,
               "host": platform.node(), "synthetic": synthetic(store, args, log)}
        if series is not None:
            res["twitter_tennis"] = tennis(store, args, log, series)
    if comm.rank == 0:
        write_report(res, os.path.join(args.out, "dynamic.json"), args.seed)


if __name__ == "__main__":
    import sys
    from ddstore.cli import run_program
    sys.exit(run_program(main))
