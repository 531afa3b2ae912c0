"""MPI program: DynamicGraph against brute force on 1-4 ranks, every width.

Run under mpiexec (inside ``timeout``): ``st_dynamic.py``.  Random dynamic graphs with 0 %,
1 %, 50 % and 100 % churn (with weight changes, self-loops, shuffled input order), empty
snapshots (first, middle, last), unweighted and torch input, dedup, and the real Twitter
tennis graph: every snapshot equal to the brute-force canonical one (edges and weights,
(dst, src) order) by random access, forward and backward iteration (whole and partial
ranges), for checkpoints at both ends, in the middle, every step, at the start only and
the default; sizes; every bad input named in the issue raised as the same DDStoreError on
every rank, leaving nothing in the store.  Exits non-zero on any failure.
"""
import functools
import json
import os
import time
import sys

import numpy as np
import torch
from mpi4py import MPI

from _harness import check, expect_error, run_main, every_width

torch.set_num_threads(1)

import ddstore  # noqa: E402
from ddstore import DDStoreIndexError, DDStoreValueError  # noqa: E402
from ddstore import spatiotemporal as st  # noqa: E402
from ddstore.dynamic import DynamicGraph, DynamicWindowDataset  # noqa: E402
from ddstore.dynamic import graph as graph_module  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
CHICKENPOX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                          "chickenpox.json")
TENNIS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                      "twitter_tennis_rg17.json")


def reference(edges, weights, dedup=None):
    """Brute force: each step's edges as a dict (src, dst) -> weight, then sorted by
    (dst, src)."""
    out = []
    for t in range(len(edges)):
        e = np.asarray(edges[t]).reshape(2, -1) if np.asarray(edges[t]).size else \
            np.zeros((2, 0), np.int64)
        w = None if weights is None else np.asarray(weights[t], dtype=np.float64)
        d = {}
        for i in range(e.shape[1]):
            k = (int(e[0, i]), int(e[1, i]))
            wi = 1.0 if w is None else float(w[i])
            if dedup == "sum":
                d[k] = d.get(k, 0.0) + wi
            else:
                d[k] = wi
        keys = sorted(d, key=lambda sd: (sd[1], sd[0]))
        ei = np.array(keys, dtype=np.int64).reshape(-1, 2).T
        ew = None if weights is None else np.array([d[k] for k in keys], np.float32)
        out.append((ei, ew))
    return out


def same(got, want, what):
    ei, ew = got
    rei, rew = want
    ok = (isinstance(ei, torch.Tensor) and ei.dtype == torch.int64 and
          tuple(ei.shape) == rei.shape and np.array_equal(ei.numpy(), rei))
    if rew is None:
        ok = ok and ew is None
    else:
        ok = ok and isinstance(ew, torch.Tensor) and ew.dtype == torch.float32 and \
            np.array_equal(ew.numpy(), rew)
    check(ok, what)


def random_graph(seed, N, E, T, churn, wchurn, empty=(), unweighted=False):
    rng = np.random.default_rng(seed)
    cur = {}
    while len(cur) < E:
        cur[(int(rng.integers(N)), int(rng.integers(N)))] = float(rng.integers(1, 50))
    edges, weights = [], []
    for t in range(T):
        if t:
            keys = list(cur)
            n = int(round(churn * len(keys)))
            for i in rng.choice(len(keys), n, replace=False):
                del cur[keys[i]]
            while len(cur) < E:
                k = (int(rng.integers(N)), int(rng.integers(N)))
                if k not in cur:
                    cur[k] = float(rng.integers(1, 50))
            keys = list(cur)
            for i in rng.choice(len(keys), int(round(wchurn * len(keys))), replace=False):
                cur[keys[i]] += 0.5
        if t in empty:
            edges.append(np.zeros((2, 0), np.int64) if t % 2 else [])
            weights.append(np.zeros(0))
            continue
        items = list(cur.items())
        perm = rng.permutation(len(items))  # input order must not matter
        e = np.array([items[i][0] for i in perm], dtype=np.int64).reshape(-1, 2).T
        edges.append(e.astype(np.int32) if t % 3 == 0 else e)
        weights.append(np.array([items[i][1] for i in perm]))
    return edges, (None if unweighted else weights)


def cases():
    T = 40
    out = []
    for churn in (0.0, 0.01, 0.5, 1.0):
        e, w = random_graph(int(churn * 100) + 1, 30, 150, T, churn,
                            0.0 if churn == 0 else 0.02)
        out.append((f"churn{int(churn * 100)}", e, w, 30))
    e, w = random_graph(5, 20, 40, 25, 0.2, 0.1, empty=(0, 9, 10, 24))
    out.append(("empty_steps", e, w, 20))
    e, w = random_graph(6, 25, 60, 30, 0.1, 0.0, unweighted=True)
    out.append(("unweighted_torch", [torch.from_numpy(np.asarray(x, np.int64)) for x in e],
                None, None))
    e, w = random_graph(7, 10, 20, 3, 0.5, 0.0)
    out.append(("three_steps", e, w, 10))
    out.append(("one_step", e[:1], w[:1], 10))
    return out


def all_equal(g, ref, label, rng):
    T = len(ref)
    for t in rng.permutation(T).tolist():  # random access, rank-dependent order
        same(g.snapshot(t), ref[t], f"{label}: snapshot({t})")
    steps = [t for t, _ in g.forward()]
    check(steps == list(range(T)), f"{label}: forward steps {steps}")
    for t, snap in g.forward():
        same(snap, ref[t], f"{label}: forward {t}")
    for t, snap in g.backward():
        same(snap, ref[t], f"{label}: backward {t}")
    steps = [t for t, _ in g.backward()]
    check(steps == list(range(T - 1, -1, -1)), f"{label}: backward steps {steps}")
    a = int(rng.integers(0, T))
    b = int(rng.integers(a, T + 1))
    got = list(g.forward(a, b))
    check([t for t, _ in got] == list(range(a, b)), f"{label}: forward({a}, {b}) steps")
    for t, snap in got:
        same(snap, ref[t], f"{label}: forward({a}, {b}) {t}")
    got = list(g.backward(b, a))
    check([t for t, _ in got] == list(range(b - 1, a - 1, -1)),
          f"{label}: backward({b}, {a}) steps")
    for t, snap in got:
        same(snap, ref[t], f"{label}: backward({b}, {a}) {t}")
    picks = rng.integers(0, T, 7).tolist()
    for t, snap in zip(picks, g.snapshots(picks)):
        same(snap, ref[t], f"{label}: snapshots {t}")
    check(len(g._cache) <= g.cache_size, f"{label}: cache holds {len(g._cache)}")
    check(np.array_equal(g.num_edges(), [r[0].shape[1] for r in ref]),
          f"{label}: num_edges")
    check(g.materialized_nbytes() == sum(r[0].shape[1] for r in ref) *
          (20 if ref[0][1] is not None or g.weighted else 16), f"{label}: materialized")


DEFAULT_KEEP = graph_module.KEEP_BYTES


def errors(store):
    before = store.variables()
    N = 10
    good = [np.array([[0, 1], [1, 2]]), np.array([[2, 3], [3, 4]]), np.array([[4], [5]]),
            np.array([[5, 6, 7], [6, 7, 8]])]
    gw = [np.ones(e.shape[1]) for e in good]
    last = len(good) - 1

    def bad(t, value):
        lst = list(good)
        lst[t] = value
        return lst

    expect_error(DDStoreValueError, ("edges[3]", f"{N}", f"[0, {N})"),
                 lambda: DynamicGraph(store, "e", bad(last, np.array([[0], [N]])),
                                      gw[:3] + [np.ones(1)], num_nodes=N),
                 what="node out of range", agree=True)
    expect_error(DDStoreValueError, ("edges[1]", "-1"),
                 lambda: DynamicGraph(store, "e", bad(1, np.array([[-1],
                 [0]])), None), what="negative node", agree=True)
    expect_error(DDStoreValueError, ("edges[2]", "[2, E_t]", "(3, 2)"),
                 lambda: DynamicGraph(store, "e", bad(2, np.zeros((3, 2),
                 np.int64)), None, num_nodes=N), what="wrong shape",
                 agree=True)
    expect_error(DDStoreValueError, ("edges[2]", "float64"),
                 lambda: DynamicGraph(store, "e", bad(2, np.zeros((2, 2))),
                 None, num_nodes=N), what="float edges", agree=True)
    w = list(gw)
    w[last] = np.ones(2)
    expect_error(DDStoreValueError, ("weights[3]", "2 entries", "3 edges"),
                 lambda: DynamicGraph(store, "e", good, w, num_nodes=N),
                 what="weights length", agree=True)
    w = list(gw)
    w[1] = np.array([1.0, np.nan])
    expect_error(DDStoreValueError, ("weights[1]", "NaN"),
                 lambda: DynamicGraph(store, "e", good, w, num_nodes=N),
                 what="NaN weight", agree=True)
    expect_error(DDStoreValueError,
                 ("edges[3]", "5 -> 6",
                                                                "dedup"),
                 lambda: DynamicGraph(store, "e", bad(last, np.array(
                     [[5, 6, 5], [6, 7, 6]])), None, num_nodes=N),
                 what="duplicates", agree=True)
    expect_error(DDStoreValueError, ("dedup",),
                 lambda: DynamicGraph(store, "e", good, None, dedup="max"),
                 what="bad dedup", agree=True)
    expect_error(DDStoreValueError, ("2 weight arrays", "4 steps"),
                 lambda: DynamicGraph(store, "e", good, gw[:2]), what="steps mismatch",
                 agree=True)
    expect_error(DDStoreValueError, ("checkpoint_every",),
                 lambda: DynamicGraph(store, "e", good, None,
                 checkpoint_every=0), what="checkpoint_every",
                 agree=True)
    expect_error(DDStoreValueError, ("checkpoint_every",),
                 lambda: DynamicGraph(
                     store, "e", good, None, checkpoint_every=1 + rank % 2) if size > 1 else
                     DynamicGraph(store, "e", good, None, checkpoint_every=-1),
                 what="differs between ranks", agree=True)
    if size > 1:  # kept in the annotation, which save needs alike on every rank
        expect_error(DDStoreValueError, ("cache_size", "differs between ranks"),
                     lambda: DynamicGraph(store, "e", good, None, cache_size=1 + rank),
                     what="cache_size differs between ranks", agree=True)
    check(store.variables() == before, f"errors left variables {store.variables()}")
    # a name taken by another variable: nothing of the new graph is left behind
    store.add_records("taken/ckpt", [{"a": np.zeros(1)}] if store.group_rank == 0 else [])
    expect_error(DDStoreValueError, ("taken/ckpt",),
                 lambda: DynamicGraph(store, "taken", good, None), what="name taken",
                 agree=True)
    check("taken/delta" not in store.variables(), "half-built graph left in the store")
    store.remove("taken/ckpt")
    # an edges sequence that fails on one rank only (a lazy reader)

    class Flaky:
        def __len__(self):
            return len(good)

        def __getitem__(self, t):
            if rank == size - 1 and t == last:
                raise OSError("disk gone")
            return good[t]
    expect_error(DDStoreValueError, (f"rank {size - 1}", "disk gone"),
                 lambda: DynamicGraph(store, "e", Flaky(), None,
                 num_nodes=N), what="reader fails on one rank",
                 agree=True)
    check(store.variables() == before, f"errors left variables {store.variables()}")

    # a sequence that gives other edges when the build reads a step again (the steps
    # beyond KEEP_BYTES are made twice), on one rank only
    # (fewer edges, or as many others: the edges reversed)
    class Changing:
        def __init__(self, change):
            self.seen, self.change = set(), change

        def __len__(self):
            return len(good)

        def __getitem__(self, t):
            t = t % len(good)
            again = t in self.seen
            self.seen.add(t)
            changed = again and rank == size - 1 and t == last
            return self.change(good[t]) if changed else good[t]
    keep, graph_module.KEEP_BYTES = graph_module.KEEP_BYTES, 0
    try:
        for how, change in (("fewer", lambda e: e[:, :1]), ("reversed", lambda e: e[::-1])):
            expect_error(DDStoreValueError, (f"rank {size - 1}", "edges[3] (or weights[3]) "
                                             "gave other values when read a second time"),
                         lambda: DynamicGraph(store, "e", Changing(change), None,
                                              num_nodes=N, checkpoint_every=1),
                         what=f"steps changing between reads ({how})", agree=True,
                         store=store)
    finally:
        graph_module.KEEP_BYTES = keep
    # a lazy step read otherwise the first time (no num_nodes: the node count's read is
    # the owner's first): its owner stores its later reads, and the next rank of the
    # group reads it once for the delta of its own first step: refused on every rank
    # when the two differ (one step was stored two ways); alone in its group, a rank
    # stores the steps as the build's passes read them
    class FirstReadOther:
        def __init__(self):
            self.seen = set()

        def __len__(self):
            return len(good)

        def __getitem__(self, t):
            first = t not in self.seen
            self.seen.add(t)
            return good[t][::-1] if first else good[t]  # (the same ids: they fit)
    if store.group_size > 1:
        b = -(-len(good) // store.group_size) - 1  # the last step of group rank 0
        expect_error(DDStoreValueError, (f"edges[{b}] (or weights[{b}]) gave other values "
                                         f"on rank 1 than on rank 0",),
                     lambda: DynamicGraph(store, "e", FirstReadOther(), None),
                     what="a step read otherwise by two ranks", agree=True, store=store)
    else:
        g = DynamicGraph(store, "e", FirstReadOther(), None)
        for t, ref in enumerate(reference(good, None)):
            same(g.snapshot(t), ref, f"first reads other, alone: step {t}")
        g.free()
    check(store.variables() == before, f"errors left variables {store.variables()}")
    g = DynamicGraph(store, "ok", good, gw, num_nodes=N, checkpoint_every=2)
    expect_error(DDStoreIndexError, ("t=4", "[0, 4)"), lambda: g.snapshot(len(good)),
                 what="t too large", agree=True)
    expect_error(DDStoreIndexError, ("t=-1",), lambda: g.snapshot(-1),
                 what="t negative", agree=True)
    # g[t] as a sequence reads it: from the end, a slice a list (PGT's signals index so)
    for i, t in ((-1, last), (-len(good), 0)):
        check(torch.equal(g[i][0], g.snapshot(t)[0]), f"g[{i}] is not snapshot {t}")
    check([e.tolist() for e, _ in g[1:3]] == [g.snapshot(t)[0].tolist() for t in (1, 2)]
          and g[3:1] == [], "g[1:3] is not snapshots 1 and 2")
    for bad_slice in (slice(None, None, 0), slice(1.5, None)):
        expect_error(DDStoreValueError, (f"slice {bad_slice}", "allowed"),
                     lambda: g[bad_slice], what=f"g[{bad_slice}]", agree=True)
    expect_error(DDStoreIndexError, ("t=-5", "[-4, 4)"), lambda: g[-5],
                 what="g[t] before the first", agree=True)
    expect_error(DDStoreValueError, (), lambda: g.snapshot(1.5), what="t not int",
                 agree=True)
    expect_error(DDStoreIndexError, ("[2, 9)", "4"), lambda: list(g.forward(2, 9)),
                 what="forward range", agree=True)
    expect_error(DDStoreIndexError, (), lambda: list(g.backward(3, -1)),
                 what="backward range", agree=True)
    same(g.snapshot(3), reference(good, gw)[3], "store usable after errors")
    g.free()
    check(store.variables() == before, "free left variables")


@functools.lru_cache(maxsize=None)
def load_pgt(path):
    """``st.load_pgt_json(path)``, parsed once per process (the JSON parse is most of a
    width's time here); its arrays are made read-only so no check can change what the
    next one compares against."""
    series = st.load_pgt_json(path)
    data = series.to_numpy()  # a view of the array the series holds
    while isinstance(data.base, np.ndarray):
        data = data.base
    for a in ([data, series.edge_index, series.edge_weight]
              + list(getattr(series, "edges", ())) + list(getattr(series, "weights", ()))):
        if isinstance(a, np.ndarray):
            a.setflags(write=False)
    return series


@functools.lru_cache(maxsize=None)
def tennis_graph():
    """The tennis file's graphs (edges, weights per step), parsed once per process;
    read-only (see :func:`load_pgt`)."""
    with open(TENNIS) as fh:
        doc = json.load(fh)
    edges, weights = [], []
    for t in range(doc["time_periods"]):
        e = np.array(doc[str(t)]["edges"], dtype=np.int64).reshape(-1, 2).T
        edges.append(e)
        weights.append(np.array(doc[str(t)]["weights"], dtype=np.float64))
    for a in edges + weights:
        a.setflags(write=False)
    return tuple(edges), tuple(weights)


def tensors_equal(a, b, what):
    check(a.shape == b.shape and torch.equal(a, b), what)


def batched_reference(ref, steps, n):
    """Block-diagonal batch of the snapshots ``steps`` (window b's nodes offset b*n)."""
    ei = np.concatenate([ref[t][0] + b * n for b, t in enumerate(steps)], axis=1)
    ew = None if ref[steps[0]][1] is None else np.concatenate([ref[t][1] for t in steps])
    return ei, ew


def windows(store, width, rng):
    """DynamicWindowDataset: x, y as WindowDataset's, graphs as brute force, static
    reduction, samplers, errors (nothing left behind)."""
    e, w = random_graph(11, 12, 30, 70, 0.1, 0.05, empty=(20,))
    ref = reference(e, w)
    T, n, h = 70, 12, 3
    data = np.random.default_rng(12).standard_normal((T, n, 2)) * [1.0, 4.0] + [0.5, -2.0]
    series = st.from_arrays(data)
    for overlap, per_node, gsteps in ((False, False, "x"), (True, True, "xy")):
        label = f"w{width}/windows/overlap={overlap}/{gsteps}"
        ds = DynamicWindowDataset(store, "dw", series, h, edges=e, weights=w,
                                  overlap=overlap, per_node=per_node, graph_steps=gsteps,
                                  checkpoint_every=4)
        base = st.WindowDataset(store, "base", series, h, overlap=overlap,
                                per_node=per_node)
        check(np.array_equal(ds.mean, base.mean) and np.array_equal(ds.std, base.std),
              f"{label}: statistics differ from WindowDataset")
        span = h if gsteps == "x" else 2 * h
        for split, bsplit in zip(ds.splits(), base.splits()):
            check((split.start, split.stop) == (bsplit.start, bsplit.stop),
                  f"{label}: {split.split_name} bounds")
            if len(split) == 0:
                continue
            for i in rng.choice(len(split), min(4, len(split)), replace=False).tolist():
                x, y, graphs = split[i]
                bx, by = bsplit[i]
                tensors_equal(x, bx, f"{label}: {split.split_name}[{i}] x")
                tensors_equal(y, by, f"{label}: {split.split_name}[{i}] y")
                check(len(graphs) == span, f"{label}: {len(graphs)} graphs")
                s0 = split.start + i
                for j, g in enumerate(graphs):
                    same(g, ref[s0 + j], f"{label}: {split.split_name}[{i}] graph {j}")
            idx = rng.integers(0, len(split), 5)
            x, y, graphs = split.get_batch(idx)
            bx, by = bsplit.get_batch(idx)
            tensors_equal(x, bx, f"{label}: batch x")
            tensors_equal(y, by, f"{label}: batch y")
            starts = (idx + split.start).tolist()
            for j, g in enumerate(graphs):
                same(g, batched_reference(ref, [s + j for s in starts], n),
                     f"{label}: {split.split_name} batch graph {j}")
            pred = torch.randn(3, n, 2)
            tensors_equal(split.inverse_transform(pred), bsplit.inverse_transform(pred),
                          f"{label}: inverse_transform")
        # loaders: the batches are the sampler's windows
        train = ds.splits()[0]
        for kind in ("global", "batch"):
            loader = train.loader(4, sampler=kind, seed=3)
            st.set_epoch(loader, 1)
            got = list(loader)
            order = list(loader.batch_sampler) if kind == "batch" else None
            if kind == "global":
                idx = list(loader.sampler)
                order = [idx[i:i + 4] for i in range(0, len(idx), 4)]
            check(len(got) == len(order), f"{label}: {kind} loader batches")
            for (x, y, graphs), b in zip(got, order):
                ex, ey, eg = train.get_batch(b)
                tensors_equal(x, ex, f"{label}: {kind} loader x")
                for g1, g2 in zip(graphs, eg):
                    check(torch.equal(g1[0], g2[0]) and torch.equal(g1[1], g2[1]),
                          f"{label}: {kind} loader graphs")
        check(ds.local_bytes() == base.local_bytes() + ds.graph.nbytes(),
              f"{label}: local_bytes")
        store.remove("base")
        ds.free()
    # a static graph reduces to WindowDataset (+ the same graph every step, stored once)
    cp = load_pgt(CHICKENPOX)
    ds = DynamicWindowDataset(store, "cp", cp, 4)
    base = st.WindowDataset(store, "cpbase", cp, 4)
    sref = reference([cp.edge_index], [cp.edge_weight])[0]
    check(ds.graph.checkpoint_every == cp.num_steps and ds.graph.nbytes() * 10 <
          ds.graph.materialized_nbytes(),
          f"w{width}/static: k={ds.graph.checkpoint_every} bytes={ds.graph.nbytes()}")
    idx = rng.integers(0, len(ds), 6)
    x, y, graphs = ds.get_batch(idx)
    bx, by = base.get_batch(idx)
    tensors_equal(x, bx, f"w{width}/static x")
    tensors_equal(y, by, f"w{width}/static y")
    for g in graphs:
        same(g, batched_reference({0: sref}, [0] * 6, cp.num_nodes), f"w{width}/static g")
    store.remove("cpbase")
    ds.free()
    # Twitter tennis through the loader: features [X, y], graphs the file's
    tt = load_pgt(TENNIS)
    te, tw = tennis_graph()
    tref = reference(te, tw)
    ds = DynamicWindowDataset(store, "tt", tt, 2, standardize=False)
    for s0 in rng.integers(0, len(ds), 3).tolist():
        x, y, graphs = ds[s0]
        for j, g in enumerate(graphs):
            same(g, tref[s0 + j], f"w{width}/tennis window {s0} graph {j}")
    ds.free()
    # errors: agreed, nothing left behind
    before = store.variables()
    expect_error(DDStoreValueError, ("horizon=36", "35"),
                 lambda: DynamicWindowDataset(
                     store, "bad", series, 36, edges=e, weights=w),
                 what="horizon too long", agree=True)
    expect_error(DDStoreValueError, ("69", "70"),
                 lambda: DynamicWindowDataset(
                     store, "bad", series, 3, edges=e[:-1], weights=w[:-1]),
                 what="edges steps", agree=True)
    bad_e = list(e)
    bad_e[T - 1] = np.array([[0], [n]])
    expect_error(DDStoreValueError, (f"[0, {n})",),
                 lambda: DynamicWindowDataset(
                     store, "bad", series, 3, edges=bad_e, weights=None),
                 what="node beyond the series", agree=True)
    expect_error(DDStoreValueError, ("graph_steps",),
                 lambda: DynamicWindowDataset(
                     store, "bad", series, 3, edges=e, graph_steps="y"),
                 what="graph_steps", agree=True)
    if size > 1:  # each rank would batch other graphs per window (caught at save only)
        expect_error(DDStoreValueError, ("graph_steps differs between ranks",
                                         "rank 0: x;", ": xy)"),
                     lambda: DynamicWindowDataset(
                         store, "bad", series, 3, edges=e,
                         graph_steps="x" if rank == 0 else "xy"),
                     what="graph_steps differs", agree=True)
    # one name, one object: a dynamic graph beside a window dataset of its name (other
    # variables) replaced the dataset's annotation, which then could not be reopened
    plain = st.WindowDataset(store, "one", series, 3)
    expect_error(DDStoreValueError, ("DynamicGraph 'one'", "holds a WindowDataset named "
                                     "'one'", "needs another name"),
                 lambda: DynamicGraph(store, "one", e, w), what="name of another object",
                 agree=True)
    dwd = DynamicWindowDataset(store, "two", series, 3, edges=e)
    expect_error(DDStoreValueError, ("DynamicWindowDataset 'two/graph'", "holds a "
                                     "DynamicGraph named 'two/graph'"),
                 lambda: DynamicWindowDataset(store, "two/graph", series, 3, edges=e),
                 what="name of its graph", agree=True)
    check(st.WindowDataset.open(store, "one").horizon == 3, "the first object reopens")
    check(DynamicWindowDataset.open(store, "two").graph.name == "two/graph",
          "the dataset's graph reopens")
    store.remove("one")  # (its series: the annotation goes with it)
    dwd.free()
    g = DynamicGraph(store, "g9", e[:10], w[:10])
    expect_error(DDStoreValueError, ("10 steps", "70 steps"),
                 lambda: DynamicWindowDataset(
                     store, "bad", series, 3, graph=g), what="graph mismatch",
                 agree=True)
    g.free()
    check(store.variables() == before, f"dataset errors left {store.variables()}")


T_START = time.time()


def main():
    widths = every_width()
    # 1 and 2 ranks run every configuration at every width.  3 and 4 ranks oversubscribe
    # the CI machine (and every graph creates store windows, collectively): they run
    # everything at width == size (partitioned over all ranks) and a subset at the
    # other widths (1 = replicated, and 2 at 4 ranks).
    rng = np.random.default_rng(100 + rank)
    all_cases = cases()
    refs = {name: reference(e, w) for name, e, w, _ in all_cases}
    for width in widths:
        full = size <= 2 or width == size
        transports = ("rma", "auto") if width > 1 and full else ("auto",)
        for transport in transports:
            with ddstore.DDStore(comm, width=width, transport=transport) as store:
                for name, e, w, N in all_cases:
                    if not full and name not in ("churn1", "churn100", "empty_steps"):
                        continue
                    T = len(e)
                    ks = {None, 1, max(1, T - 1), 7, T} if size <= 2 else \
                        {None, max(1, T - 1), 7}
                    for i, k in enumerate(sorted(ks, key=str)):
                        if transport == "rma" and k is not None:
                            continue  # the rma path: fewer configurations
                        if not full and k not in (None, max(1, T - 1)):
                            continue
                        # the build keeps every step between its passes, none, or the
                        # first few (the others made again when stored)
                        keep = (DEFAULT_KEEP, 0, 3000)[(i + len(name)) % 3]
                        label = f"w{width}/{transport}/{name}/k={k}/keep={keep}"
                        graph_module.KEEP_BYTES = keep
                        g = DynamicGraph(store, "g", e, w, num_nodes=N, checkpoint_every=k,
                                         cache_size=3)
                        graph_module.KEEP_BYTES = DEFAULT_KEEP
                        all_equal(g, refs[name], label, rng)
                        if k == max(1, T - 1) and T > 2:
                            check(list(g._ckpt_steps) == [0, T - 1],
                                  f"{label}: checkpoints {list(g._ckpt_steps)} not at ends")
                        # bytes: each group's members together hold the whole graph once
                        total = comm.allreduce(g.nbytes()) // store.replicas
                        check(total == comm.bcast(total), f"{label}: nbytes")
                        if name == "churn1" and k is None:
                            check(g.checkpoint_every > 5, f"{label}: default k = "
                                                          f"{g.checkpoint_every}")
                            check(total * 3 < g.materialized_nbytes(),
                                  f"{label}: {total} bytes vs materialised "
                                  f"{g.materialized_nbytes()}")
                        if name == "churn100" and k is None:
                            check(g.checkpoint_every == 1 and not g.has_deltas,
                                  f"{label}: default k = {g.checkpoint_every}")
                        if name == "churn0" and k is None:
                            check(g.checkpoint_every == T, f"{label}: static k")
                        g.free()
                if transport == "rma":
                    continue
                # dedup
                rngd = np.random.default_rng(3)
                e = [rngd.integers(0, 4, (2, 30)) for _ in range(6)]
                w = [rngd.integers(1, 9, 30).astype(np.float64) for _ in range(6)]
                for mode in ("sum", "last"):
                    g = DynamicGraph(store, "d", e, w, dedup=mode, checkpoint_every=2)
                    all_equal(g, reference(e, w, mode), f"w{width}/dedup={mode}", rng)
                    g.free()
                # Twitter tennis
                te, tw = tennis_graph()
                tref = reference(te, tw)
                for k in ((None, 5) if full else (5,)):
                    g = DynamicGraph(store, "tennis", te, tw, checkpoint_every=k)
                    check(g.num_nodes == 1000, f"tennis num_nodes {g.num_nodes}")
                    all_equal(g, tref, f"w{width}/{transport}/tennis/k={k}", rng)
                    g.free()
                t0 = time.time()
                if full:
                    errors(store)
                t1 = time.time()
                if full or width == 1:
                    windows(store, width, rng)
                if os.environ.get("ST_DYNAMIC_TIMES") and rank == 0:
                    print(f"width {width}: errors {t1 - t0:.1f}s windows "
                          f"{time.time() - t1:.1f}s, at {time.time() - T_START:.1f}s",
                          flush=True)
                check(store.variables() == [], f"left {store.variables()}")


run_main(main)
