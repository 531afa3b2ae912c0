"""MPI program: property tests (hypothesis) of the samplers, the T-CSR build, the dynamic
graph's delta merge, node-memory commits and the readers, against brute force.

Each property is a function ``prop_*(stores, ex)`` of one generated example ``ex`` (drawn
by the strategy of the same name in ``STRATEGIES``) that raises ``AssertionError`` naming
what differs, and removes from the store whatever it created.  ``stores`` is a list of
stores over the same communicator (the example picks one: several widths and transports
on 2 ranks, one ``COMM_SELF`` store in pytest's process).

- in pytest's process (tests/test_properties.py, one rank): hypothesis draws and shrinks
  as usual (profile ``ci``);
- under mpiexec (``timeout 600 mpiexec -n 2 python properties.py [max_examples]``, 1-2
  ranks): every rank draws the SAME examples (``derandomize=True``, no database, the same
  settings and code, and the same modules of the project imported: hypothesis draws
  constants from the local modules loaded, so a module imported on rank 0 alone, say
  for its logging, shifts rank 0's draws), so the collective calls inside a property
  stay in step; each example's digest is compared over
  the ranks first (a divergence aborts the job).  A failure is not shrunk (shrinking on
  one rank would leave the others behind): the first failing example of each property is
  reported (``repr``) as a failed check, and generation goes on with the next examples.

Generated inputs reach the corners on purpose: equal timestamps (a few distinct times per
graph), nodes without edges, hubs, self-loops, duplicate edges, zero-edge graphs, times
negative and up to +-2**53 (and -0.0), node ids up to 2**31 - 1 where the layer supports
them (dynamic graphs, the readers), the pyg CSC's int32 / int64 id switch, empty shares.
"""
import contextlib
import hashlib
import os
import pickle
import shutil
import sys
import tempfile

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mpi4py import MPI

from _harness import check, counts, run_main, same_array

import ddstore  # noqa: E402
from ddstore.testing.temporal import (ReferenceNodeMemory, reference_lists,  # noqa: E402
                                      reference_sample)

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

# ------------------------------------------------------------------ settings profiles
_COMMON = dict(deadline=None, database=None, print_blob=False,
               suppress_health_check=list(HealthCheck))
# pytest, one rank: random examples, shrunk on failure
settings.register_profile("ci", max_examples=40, **_COMMON)
settings.register_profile("thorough", max_examples=400, **_COMMON)
# MPI, every rank: the same examples on every rank, never shrunk
settings.register_profile("mpi", max_examples=20, derandomize=True,
                          phases=[Phase.explicit, Phase.generate], **_COMMON)

F53 = float(2 ** 53)
EXTREME_TIMES = [0.0, -0.0, 1.0, -1.0, F53, -F53, F53 - 1, -(F53 - 1), 0.5, 5e-324,
                 -5e-324, 1e-300, 2.0 ** 52 + 0.5]


def digest(obj):
    return hashlib.sha1(pickle.dumps(obj, protocol=4)).hexdigest()


@contextlib.contextmanager
def cleanup(store):
    """Remove every variable created inside the block (collective: every rank creates
    the same ones), whether the block raised or not."""
    before = set(store.variables())
    try:
        yield
    finally:
        for v in sorted(set(store.variables()) - before):
            store.remove(v)


def same_bytes(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert same_array(a, b), \
        f"{what}: got {a.dtype}{a.shape} {a.ravel()[:12]!r}, expected {b.dtype}{b.shape} " \
        f"{b.ravel()[:12]!r}"


def share(n, cut):
    """This rank's contiguous share of ``n`` items: ``cut`` (sorted fractions, one per
    rank boundary) picks uneven, possibly empty shares; the same on every rank."""
    bounds = [0] + [min(n, int(round(c * n))) for c in cut[:size - 1]] + [n]
    bounds = np.maximum.accumulate(bounds)
    return int(bounds[rank]), int(bounds[rank + 1])


times = st.one_of(st.sampled_from(EXTREME_TIMES),
                  st.integers(-2 ** 53, 2 ** 53).map(float),
                  st.floats(-F53, F53, allow_nan=False, allow_infinity=False))
cuts = st.lists(st.floats(0, 1), min_size=3, max_size=3).map(sorted)


# ------------------------------------------------------------------ temporal graphs
@st.composite
def temporal_examples(draw):
    """A temporal graph (ties, hubs, self-loops, nodes without edges, maybe no edge at
    all), how it is built, and sampler queries."""
    n = draw(st.integers(1, 12))
    m = draw(st.integers(0, 40))
    pool = draw(st.lists(times, min_size=1, max_size=4))  # few distinct times: ties
    hub = draw(st.integers(0, n - 1))
    node = st.one_of(st.integers(0, n - 1), st.just(hub))
    src = draw(st.lists(node, min_size=m, max_size=m))
    dst = draw(st.lists(node, min_size=m, max_size=m))
    t = [pool[i] for i in draw(st.lists(st.integers(0, len(pool) - 1), min_size=m,
                                        max_size=m))]
    top = max(src + dst, default=-1) + 1
    num_nodes = draw(st.one_of(st.none(), st.integers(max(top, 1), max(top, 1) + 3))) \
        if m else draw(st.integers(1, 5))
    roots = draw(st.lists(st.integers(0, (num_nodes or top) - 1), min_size=0, max_size=8))
    # query times: the graph's times (ties with the roots' edges), next to them, extremes
    near = st.sampled_from(pool).flatmap(lambda x: st.sampled_from(
        [x, float(np.nextafter(x, np.inf)), float(np.nextafter(x, -np.inf))]))
    rts = draw(st.lists(st.one_of(near, times), min_size=len(roots), max_size=len(roots)))
    fan = st.one_of(st.integers(1, 5), st.sampled_from([2 ** 31 - 1, 2 ** 62]))
    return dict(
        src=src, dst=dst, t=t, num_nodes=num_nodes, roots=roots, rts=rts,
        add_reverse=draw(st.booleans()), feat=draw(st.booleans()),
        chunk_edges=draw(st.sampled_from([None, 1, 2, 7])), cut=draw(cuts),
        fanouts=draw(st.lists(fan, min_size=1, max_size=3)),
        strategy=draw(st.sampled_from(["recent", "uniform"])),
        prop_time=draw(st.booleans()), seed=draw(st.integers(0, 2 ** 64 - 1)),
        epoch=draw(st.integers(0, 3)), store=draw(st.integers(0, 7)),
        # how lists of other members are read (rma / width 2): whole, or binary-searched
        # remotely with range reads or one row per draw
        remote=draw(st.sampled_from([(2048, 64), (1, 1), (1, 64), (3, 1)])),
        bad_root=draw(st.sampled_from([-1, -2 ** 63, 2 ** 31 - 1, 2 ** 31, 2 ** 63 - 1,
                                       None])))


def prop_temporal(stores, ex):
    """T-CSR build (every edge once, lists sorted by (time, edge id), features by id) and
    the temporal sampler (every field equal to the brute force, nothing at or after a
    root's time) of one generated graph."""
    from ddstore import temporal as tg
    store = stores[ex["store"] % len(stores)]
    src = np.array(ex["src"], np.int64)
    dst = np.array(ex["dst"], np.int64)
    t = np.array(ex["t"], np.float64)
    m = src.shape[0]
    feat = (np.arange(m * 2, dtype=np.int16).reshape(m, 2) * 7 - 3) if ex["feat"] else None
    lo, hi = share(m, ex["cut"])
    with cleanup(store):
        g = tg.TemporalGraph.from_arrays(
            store, "pt", src[lo:hi], dst[lo:hi], t[lo:hi],
            edge_feat=None if feat is None else feat[lo:hi], num_nodes=ex["num_nodes"],
            add_reverse=ex["add_reverse"], chunk_edges=ex["chunk_edges"])
        n = g.num_nodes
        assert n == (ex["num_nodes"] or int(max(src.max(), dst.max())) + 1), n
        assert g.num_edges == m
        lists = reference_lists(src, dst, t, n, ex["add_reverse"])
        same_bytes(g.indptr, np.concatenate([[0], np.cumsum([len(x) for x in lists])])
                   .astype(np.int64), "indptr")
        seen = []
        for v in range(n):
            nb, ts, eid = g.neighbors(v)
            same_bytes(nb, np.array([x[2] for x in lists[v]], np.int64), f"nbr of {v}")
            same_bytes(ts, np.array([x[0] for x in lists[v]], np.float64), f"ts of {v}")
            same_bytes(eid, np.array([x[1] for x in lists[v]], np.int64), f"eid of {v}")
            assert all(ts[i] < ts[i + 1] or (ts[i] == ts[i + 1] and eid[i] <= eid[i + 1])
                       for i in range(len(ts) - 1)), f"list of {v} not sorted"
            seen.append(eid)
        seen = np.sort(np.concatenate(seen)) if seen else np.zeros(0, np.int64)
        want = np.repeat(np.arange(m), 2 if ex["add_reverse"] else 1)
        same_bytes(seen, want.astype(np.int64), "every edge once (twice with reverse)")
        if m:
            ids = np.arange(m)[::-1]
            s2, d2, t2 = g.edges(ids)
            same_bytes(s2, src[ids], "edges: src")
            same_bytes(d2, dst[ids], "edges: dst")
            same_bytes(t2, t[ids], "edges: t")
            if feat is not None:
                same_bytes(g.edge_features(ids), feat[ids], "edge features")

        sampler = tg.TemporalSampler(g, ex["fanouts"], ex["strategy"], seed=ex["seed"],
                                     prop_time=ex["prop_time"],
                                     remote_fetch_max=ex["remote"][0],
                                     remote_range_factor=ex["remote"][1])
        sampler.set_epoch(ex["epoch"])
        roots = np.array(ex["roots"], np.int64)
        rts = np.array(ex["rts"], np.float64)
        bad = n if ex["bad_root"] is None else ex["bad_root"]  # beyond the last node
        try:
            sampler.sample(np.append(roots, bad), np.append(rts, 0.0))
        except ddstore.DDStoreIndexError as exc:
            assert str(bad) in str(exc) and f"[0, {n})" in str(exc), exc
        else:
            raise AssertionError(f"root {bad} of {n} nodes: nothing raised")
        blocks = sampler.sample(roots, rts)
        ref = reference_sample(lists, roots, rts, ex["fanouts"], ex["strategy"],
                               ex["seed"], ex["epoch"], ex["prop_time"])
        assert len(blocks) == len(ref)
        for layer, (b, r) in enumerate(zip(blocks, ref)):
            for key in ("nodes", "ts", "row", "eid", "edge_ts"):
                same_bytes(getattr(b, key), r[key], f"layer {layer}: {key}")
            nr = b.num_roots
            same_bytes(b.col, np.arange(nr, nr + len(b.eid), dtype=np.int64),
                       f"layer {layer}: col")
            root_t = b.ts[b.row]
            assert np.all(b.edge_ts < root_t), f"layer {layer}: an edge at or after its " \
                                               f"root's time"
            assert np.all(b.dts > 0), f"layer {layer}: dts not > 0"
            # the exact eligible sets: every sampled edge is eligible, and a root with at
            # most k eligible edges gets all of them (recent: the k latest otherwise)
            k = ex["fanouts"][layer]
            for i in range(nr):
                v, tr = int(b.nodes[i]), float(b.ts[i])
                elig = [x for x in lists[v] if x[0] < tr]
                got = [(float(b.edge_ts[j]), int(b.eid[j]), int(b.nodes[b.col[j]]))
                       for j in np.flatnonzero(b.row == i)]
                assert set(got) <= set(elig), f"layer {layer} root {i}: not eligible"
                if len(elig) <= k or ex["strategy"] == "recent":
                    assert got == elig[max(0, len(elig) - k):], \
                        f"layer {layer} root {i}: {got} != eligible {elig} (k={k})"
                else:
                    assert len(got) == k


# ------------------------------------------------------------------ pyg
@st.composite
def pyg_examples(draw):
    n = draw(st.integers(1, 10))
    e = draw(st.integers(0, 30))
    hub = draw(st.integers(0, n - 1))
    node = st.one_of(st.integers(0, n - 1), st.just(hub))
    src = draw(st.lists(node, min_size=e, max_size=e))
    dst = draw(st.lists(node, min_size=e, max_size=e))
    seeds = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=6))  # repeats too
    hops = draw(st.integers(1, 3))
    replace = draw(st.booleans())
    # without replacement a fanout far above every degree takes what exists (min(k, deg));
    # with replacement k draws are made, so k stays small there
    fan = st.one_of(st.integers(-1, 4), st.just(50)) if replace else st.one_of(
        st.integers(-1, 4), st.just(50), st.sampled_from([2 ** 31 - 1, 2 ** 62, 2 ** 63 - 1]))
    temporal = draw(st.booleans())
    etime = draw(st.lists(st.sampled_from([-F53, -3.0, 0.0, 1.0, 2.0, F53]), min_size=e,
                          max_size=e))
    stime = draw(st.lists(st.sampled_from([-F53, -3.0, 0.0, 1.0, 2.0, F53]),
                          min_size=len(seeds), max_size=len(seeds)))
    return dict(n=n, src=src, dst=dst, seeds=seeds,
                fanouts=draw(st.lists(fan, min_size=hops, max_size=hops)),
                replace=replace, disjoint=draw(st.booleans()),
                temporal=temporal, strategy=draw(st.sampled_from(["uniform", "last"])),
                etime=etime, stime=stime, xdtype=draw(st.sampled_from(
                    ["float32", "float64", "int64", "int8"])),
                xseed=draw(st.integers(0, 2 ** 32 - 1)), seed=draw(st.integers(0, 2 ** 62)),
                id32=draw(st.sampled_from([None, 0])), store=draw(st.integers(0, 7)))


def _features(n, dtype, seed):
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n, 3 * np.dtype(dtype).itemsize), dtype=np.uint8)
    x = raw.view(dtype).reshape(n, 3).copy()
    if x.dtype.kind == "f":
        x[~np.isfinite(x)] = -0.0  # every other bit pattern as drawn, -0.0 included
    return x


def prop_pyg(stores, ex):
    """from_pyg + NeighborSampler: every sampled edge is a stored edge (by id), seeds kept
    as given (repeats included), the fanout per target (min(k, deg) distinct, or k draws
    with replacement, or all with -1), exact -1 neighbourhoods, temporal sampling never
    later than the seed's time, features byte-equal."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.sampler import NodeSamplerInput
    from ddstore import pyg as dpyg
    from ddstore import build  # ID32_LIMIT: the id width rule of every stored graph
    store = stores[ex["store"] % len(stores)]
    n = ex["n"]
    src = np.array(ex["src"], np.int64)
    dst = np.array(ex["dst"], np.int64)
    e = src.shape[0]
    x = _features(n, ex["xdtype"], ex["xseed"])
    ea = _features(e, "float64", ex["xseed"] + 1)
    etime = torch.tensor(ex["etime"], dtype=torch.float64).reshape(e)
    data = Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(np.stack([src, dst])),
                edge_attr=torch.from_numpy(ea), edge_time=etime, num_nodes=n)
    old = build.ID32_LIMIT
    if ex["id32"] is not None:
        build.ID32_LIMIT = ex["id32"]  # the int64 CSC (ids beyond int32)
    try:
        with cleanup(store):
            fs, gs = dpyg.from_pyg(store, data, name="pp",
                                   time_attr="edge_time" if ex["temporal"] else None)
            same_bytes(fs.get_tensor(None, "x").numpy(), x, "x read whole")
            same_bytes(fs.get_tensor(dpyg.EDGES, "edge_attr").numpy(), ea,
                       "edge_attr read whole")
            sampler = dpyg.NeighborSampler(
                gs, ex["fanouts"], replace=ex["replace"], disjoint=ex["disjoint"],
                temporal_strategy=ex["strategy"],
                time_attr="edge_time" if ex["temporal"] else None, seed=ex["seed"])
            seeds = torch.tensor(ex["seeds"], dtype=torch.long)
            stime = torch.tensor(ex["stime"], dtype=torch.float64)
            out = sampler.sample_from_nodes(NodeSamplerInput(
                None, seeds, time=stime if ex["temporal"] else None))
            _check_pyg_output(ex, out, src, dst, np.asarray(ex["etime"]), sampler.disjoint)
            node = out.node.numpy()
            same_bytes(fs.get_tensor(None, "x", index=out.node).numpy(), x[node],
                       "x of the sampled nodes")
            same_bytes(fs.get_tensor(dpyg.EDGES, "edge_attr", index=out.edge).numpy(),
                       ea[out.edge.numpy()], "edge_attr of the sampled edges")
    finally:
        build.ID32_LIMIT = old


def _check_pyg_output(ex, out, src, dst, etime, disjoint):
    n, seeds = ex["n"], np.array(ex["seeds"], np.int64)
    node, row, col = out.node.numpy(), out.row.numpy(), out.col.numpy()
    edge = out.edge.numpy()
    batch = out.batch.numpy() if disjoint else None
    ns = len(seeds)
    same_bytes(node[:ns], seeds, "seeds first, as given")
    assert sum(out.num_sampled_nodes) == len(node), "num_sampled_nodes"
    assert sum(out.num_sampled_edges) == len(edge) == len(row) == len(col)
    if len(edge):
        assert np.all((0 <= edge) & (edge < len(src))), "edge id out of range"
        same_bytes(node[row], src[edge], "row is the edge's source")
        same_bytes(node[col], dst[edge], "col is the edge's target")
    if not disjoint:
        assert len(np.unique(node[ns:])) == len(node) - ns and \
            not set(node[ns:]) & set(seeds.tolist()), "a node twice outside the seeds"
    else:
        same_bytes(batch[:ns], np.arange(ns, dtype=np.int64), "seed subgraphs")
        assert np.all(batch[row] == batch[col]), "an edge across subgraphs"
        keys = batch[ns:] * n + node[ns:]
        assert len(np.unique(keys)) == len(keys), "a node twice in one subgraph"
    seed_t = np.array(ex["stime"], np.float64)
    if ex["temporal"] and len(edge):
        assert np.all(etime[edge] <= seed_t[batch[col]]), "an edge later than its seed"
    # per hop: each target position of the frontier draws per the fanout ("last": the
    # k latest eligible entries; with replace, k draws among them, as pyg-lib)
    last = ex["temporal"] and ex["strategy"] == "last"
    first, e0 = 0, 0
    hop_nodes = list(out.num_sampled_nodes)
    for hop, k in enumerate(ex["fanouts"]):
        cnt = hop_nodes[hop]
        frontier = np.arange(first, first + cnt)
        ne = out.num_sampled_edges[hop]
        r, c, ed = row[e0:e0 + ne], col[e0:e0 + ne], edge[e0:e0 + ne]
        assert np.all(np.isin(c, frontier)), f"hop {hop}: a target outside the frontier"
        assert np.all(r < first + cnt + hop_nodes[hop + 1]), \
            f"hop {hop}: a neighbour placed after this hop's new nodes"
        for p in frontier:
            v = node[p]
            cand = np.flatnonzero(dst == v)
            if ex["temporal"]:
                cand = cand[etime[cand] <= seed_t[batch[p]]]
            mine = ed[c == p]
            assert np.all(np.isin(mine, cand)), f"hop {hop}: edge not into {v} / too late"
            deg = len(cand)
            if k == 0:
                want = 0
            elif k < 0:
                want = deg
            elif ex["replace"]:
                want = k if deg else 0
            else:
                want = min(k, deg)
            assert len(mine) == want, f"hop {hop} target {p} (node {v}): {len(mine)} " \
                                      f"edges, expected {want} (k={k}, deg={deg})"
            if not ex["replace"] or k < 0:
                assert len(np.unique(mine)) == len(mine), f"hop {hop}: an edge twice"
                if k < 0 or deg <= k:
                    same_bytes(np.sort(mine), np.sort(cand), f"hop {hop}: all of {v}")
            if last and 0 < k < deg:
                cut = np.sort(etime[cand])[-k]
                assert np.all(etime[mine] >= cut), f"hop {hop}: 'last' not the latest"
        first += cnt
        e0 += ne


# ------------------------------------------------------------------ dynamic graphs
@st.composite
def dynamic_examples(draw):
    big = draw(st.booleans())
    if big:  # ids near the 2**31 limit (the key packs dst << 31 | src)
        ids = [0, 1, 2 ** 30, 2 ** 31 - 2, 2 ** 31 - 1]
    else:
        ids = list(range(draw(st.integers(1, 6))))
    T = draw(st.integers(1, 7))
    dedup = draw(st.sampled_from([None, "sum", "last"]))
    weighted = draw(st.booleans())
    wval = st.one_of(st.integers(-8, 8).map(lambda v: v / 4.0),
                     st.sampled_from([0.0, -0.0, 3.0e38, -3.0e38, 1e-45, 1.5]))
    base = draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)),
                         max_size=8))
    steps, weights = [], []
    for _ in range(T):
        # mostly the previous step's edges with a few changes (deltas), sometimes anew
        if draw(st.booleans()):
            cur = list(steps[-1]) if steps else list(base)
            drop = draw(st.sets(st.integers(0, max(0, len(cur) - 1)), max_size=3))
            cur = [p for i, p in enumerate(cur) if i not in drop]
            cur += draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)),
                                 max_size=3))
        else:
            cur = draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)),
                                max_size=8))
        if dedup is None:
            cur = list(dict.fromkeys(cur))
        steps.append(cur)
        weights.append(draw(st.lists(wval, min_size=len(cur), max_size=len(cur))))
    top = max((max(p) for s in steps for p in s), default=0) + 1
    return dict(steps=steps, weights=weights if weighted else None, dedup=dedup,
                num_nodes=draw(st.sampled_from([None, top, min(top + 5, 2 ** 31)])),
                checkpoint_every=draw(st.sampled_from([None, 1, 2, 3, T])),
                cache_size=draw(st.integers(1, 3)),
                order=draw(st.lists(st.integers(0, T - 1), max_size=8)),
                store=draw(st.integers(0, 7)))


def _brute_snapshot(edges, w, dedup):
    """Step's snapshot as a dict {(src, dst): float64 weight} (input order, dedup)."""
    out = {}
    for i, p in enumerate(edges):
        wi = 1.0 if w is None else float(w[i])
        if p in out and dedup == "sum":
            out[p] = out[p] + wi
        else:
            out[p] = wi
    return out


def prop_dynamic(stores, ex):
    """DynamicGraph: every snapshot (random access, forward, backward, snapshots()) equals
    the brute-force set of the step's edges with their float32 weights, byte for byte, in
    (dst, src) order."""
    from ddstore.dynamic import DynamicGraph
    store = stores[ex["store"] % len(stores)]
    T = len(ex["steps"])
    edges = [np.array(s, np.int64).reshape(-1, 2).T.copy() for s in ex["steps"]]
    weights = None if ex["weights"] is None else [np.array(w, np.float64)
                                                  for w in ex["weights"]]
    want = []
    for t in range(T):
        snap = _brute_snapshot(ex["steps"][t], ex["weights"] and ex["weights"][t],
                               ex["dedup"])
        keys = sorted(snap, key=lambda p: (p[1], p[0]))
        ei = np.array(keys, np.int64).reshape(-1, 2).T
        with np.errstate(over="ignore"):
            w = np.array([snap[k] for k in keys], np.float64).astype(np.float32)
        want.append((ei, w if weights is not None else None))
    with cleanup(store):
        try:
            g = DynamicGraph(store, "pd", edges, weights, num_nodes=ex["num_nodes"],
                             checkpoint_every=ex["checkpoint_every"], dedup=ex["dedup"],
                             cache_size=ex["cache_size"])
        except ddstore.DDStoreValueError as exc:
            # summed duplicates beyond float32 are refused (not stored as inf)
            assert "inf" in str(exc) or "finite" in str(exc), exc
            assert any(not np.all(np.isfinite(w)) for _, w in want if w is not None), exc
            return
        assert all(np.all(np.isfinite(w)) for _, w in want if w is not None), \
            "a summed weight beyond float32 was stored as inf"

        def same(t, got, how):
            ei, w = got
            same_bytes(ei.numpy(), want[t][0], f"{how} step {t}: edge_index")
            if want[t][1] is None:
                assert w is None, f"{how} step {t}: weights of an unweighted graph"
            else:
                same_bytes(w.numpy(), want[t][1], f"{how} step {t}: weights")
        for t in ex["order"]:
            same(t, g[t], "g[t]")
        for t, got in g.forward():
            same(t, got, "forward")
        g.clear_cache()
        for t, got in g.backward():
            same(t, got, "backward")
        for t, got in zip(ex["order"], g.snapshots(ex["order"])):
            same(t, got, "snapshots")
        same_bytes(g.num_edges(), np.array([w[0].shape[1] for w in want], np.int64),
                   "num_edges")
        g.free()


# ------------------------------------------------------------------ node memory
@st.composite
def memory_examples(draw):
    n = draw(st.integers(1, 8))
    md, ad = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    S = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    pool = draw(st.lists(times, min_size=1, max_size=3))  # ties in time
    upd = st.tuples(st.sampled_from(["write", "post"]), st.integers(0, 3),  # rank
                    st.integers(0, n - 1), st.sampled_from(pool),
                    st.integers(0, 2 ** 32 - 1),  # row seed
                    st.booleans())  # flush: end of one staging call
    commits = draw(st.lists(st.lists(upd, max_size=12), min_size=1, max_size=3))
    return dict(n=n, md=md, ad=ad, S=S, dtype=dtype, commits=commits,
                int_ts=draw(st.booleans()), store=draw(st.integers(0, 7)))


def prop_memory(stores, ex):
    """NodeMemory: after every commit, the state (memory, memory_ts, mailboxes) is that of
    the brute force applying every update in (ts, rank, position) order, byte for byte."""
    from ddstore.temporal import NodeMemory
    store = stores[ex["store"] % len(stores)]
    dt = np.dtype(ex["dtype"])
    ref = ReferenceNodeMemory(ex["n"], ex["md"], ex["ad"], ex["S"], dt)
    with cleanup(store):
        mem = NodeMemory(store, "pm", ex["n"], ex["md"], ex["ad"], ex["S"], dt)
        for c, updates in enumerate(ex["commits"]):
            writes, posts, pending = [], [], {"write": [], "post": []}

            def flush(op):
                if not pending[op]:
                    return
                nodes = np.array([p[0] for p in pending[op]], np.int64)
                rows = np.array([p[2] for p in pending[op]], dt)
                ts = np.array([p[1] for p in pending[op]], np.float64)
                if ex["int_ts"] and np.all(ts == np.floor(ts)) and \
                        not np.any(np.signbit(ts)[ts == 0]):  # int64 has no -0
                    ts = ts.astype(np.int64)
                (mem.write if op == "write" else mem.post)(nodes, rows, ts)
                pending[op] = []
            for op, r, node, ts, rs, end in updates:
                r %= size
                dim = ex["md"] if op == "write" else ex["ad"]
                row = (np.random.default_rng(rs).integers(-999, 999, dim) / 8).astype(dt)
                if rs % 5 == 0:
                    row[0] = -0.0
                (writes if op == "write" else posts).append((r, 0, node, ts, row))
                if r == rank:
                    pending[op].append((node, ts, row))
                    if end:
                        flush(op)
            flush("write")
            flush("post")
            # positions are per rank: renumber the brute force's by rank
            for lst in (writes, posts):
                per = {}
                for i, u in enumerate(lst):
                    lst[i] = (u[0], per.setdefault(u[0], [0])[0], *u[2:])
                    per[u[0]][0] += 1
            mem.commit()
            ref.commit(writes, posts)
            got = mem.read(np.arange(ex["n"]))
            want = ref.read(range(ex["n"]))
            for key, w in zip(("memory", "memory_ts", "mail", "mail_ts"), want):
                same_bytes(getattr(got, key).numpy(), w, f"commit {c}: {key}")
        mem.remove()


# ------------------------------------------------------------------ readers
@st.composite
def tgl_examples(draw):
    m = draw(st.integers(0, 20))
    ids = st.one_of(st.integers(0, 20), st.sampled_from([2 ** 31 - 1, 2 ** 31, 2 ** 53,
                                                         2 ** 63 - 1]))
    t = sorted(draw(st.lists(times, min_size=m, max_size=m)))
    return dict(src=draw(st.lists(ids, min_size=m, max_size=m)),
                dst=draw(st.lists(ids, min_size=m, max_size=m)), t=t,
                split=draw(st.lists(st.integers(0, 2), min_size=m, max_size=m)),
                feat=draw(st.sampled_from([None, 1, 3])), fseed=draw(st.integers(0, 99)),
                nodes=draw(st.sampled_from([None, 1, 5])))


@contextlib.contextmanager
def shared_dir():
    tmp = comm.bcast(tempfile.mkdtemp(prefix="ddstore-prop-") if rank == 0 else None)
    try:
        yield tmp
    finally:
        comm.Barrier()
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)


def _gather_cat(arrs):
    parts = comm.allgather(arrs)
    return [np.concatenate([p[i] for p in parts]) for i in range(len(arrs))]


def prop_tgl(stores, ex):
    """write_tgl then read_tgl_share on every rank: the shares concatenated in rank order
    are what was written, byte for byte (ids, times, splits, feature rows)."""
    from ddstore.temporal import read_tgl_share, write_tgl
    m = len(ex["src"])
    src, dst = np.array(ex["src"], np.int64), np.array(ex["dst"], np.int64)
    t, split = np.array(ex["t"], np.float64), np.array(ex["split"], np.int8)
    ef = None if ex["feat"] is None else \
        _features(m, "float32", ex["fseed"])[:, :ex["feat"]]
    nf = None if ex["nodes"] is None else _features(ex["nodes"], "float64", ex["fseed"])
    with shared_dir() as tmp:
        if rank == 0:
            write_tgl(tmp, src, dst, t, split, ef, nf)
        comm.Barrier()
        s, d, tt, sp, e2, n2 = read_tgl_share(stores[0], tmp)
        got = _gather_cat([s, d, tt, sp])
        for key, a, b in zip(("src", "dst", "t", "split"), got, (src, dst, t, split)):
            same_bytes(a, b, f"tgl {key}")
        if ef is not None:
            same_bytes(_gather_cat([e2])[0], ef, "tgl edge_feat")
        else:
            assert e2 is None
        if nf is not None:
            same_bytes(_gather_cat([n2])[0], nf, "tgl node_feat")


@st.composite
def jodie_examples(draw):
    m = draw(st.integers(1, 20))
    ids = st.one_of(st.integers(0, 9), st.sampled_from([1000, 2 ** 20]))
    t = sorted(draw(st.lists(st.one_of(times, st.integers(-10, 10).map(float)),
                             min_size=m, max_size=m)))
    return dict(user=draw(st.lists(ids, min_size=m, max_size=m)),
                item=draw(st.lists(ids, min_size=m, max_size=m)), t=t,
                label=draw(st.lists(st.integers(0, 1), min_size=m, max_size=m)),
                feat=draw(st.sampled_from([0, 1, 4])), fseed=draw(st.integers(0, 99)))


def prop_jodie(stores, ex):
    """write_jodie then read_jodie_share: the shares concatenated are the file, with
    PyG's numbering (item + num_users), times exact, features float32 byte-equal."""
    from ddstore.temporal import read_jodie_share, write_jodie
    user = np.array(ex["user"], np.int64)
    item = np.array(ex["item"], np.int64)
    t, label = np.array(ex["t"], np.float64), np.array(ex["label"], np.int64)
    feat = _features(len(user), "float32", ex["fseed"])[:, :ex["feat"]] if ex["feat"] \
        else None
    with shared_dir() as tmp:
        path = os.path.join(tmp, "j.csv")
        if rank == 0:
            write_jodie(path, user, item, t, label, feat)
        comm.Barrier()
        sh = read_jodie_share(stores[0], path)
        nu, ni = int(user.max()) + 1, int(item.max()) + 1
        assert (sh.num_users, sh.num_items) == (nu, ni), (sh.num_users, sh.num_items)
        got = _gather_cat([sh.src, sh.dst, sh.t, sh.label])
        for key, a, b in zip(("user", "item", "t", "label"), got,
                             (user, item + nu, t, label)):
            same_bytes(a, b, f"jodie {key}")
        assert sh.whole_times == bool(np.all(t == np.floor(t)))
        if feat is None:
            assert sh.edge_feat is None
        else:
            same_bytes(_gather_cat([sh.edge_feat])[0], feat, "jodie features")


@st.composite
def npy_examples(draw):
    dtype = draw(st.sampled_from(["bool", "int8", "uint16", "int32", "int64", "float16",
                                  "float32", "float64"]))
    shape = draw(st.one_of(st.tuples(st.integers(0, 9), st.integers(1, 4)),
                           st.tuples(st.integers(0, 9), st.integers(1, 3),
                                     st.integers(1, 3))))
    a = draw(st.integers(0, shape[0]))
    b = draw(st.integers(a, shape[0]))
    return dict(dtype=dtype, shape=shape, a=a, b=b, seed=draw(st.integers(0, 99)))


def prop_npy(stores, ex):
    """np.save then load_npy(...).read(a, b) and read_npy_rows: the bytes written."""
    from ddstore.sources import load_npy, read_npy_rows
    dt = np.dtype(ex["dtype"])
    count = int(np.prod(ex["shape"]))
    raw = np.random.default_rng(ex["seed"]).integers(0, 256, count * dt.itemsize,
                                                     dtype=np.uint8)
    arr = raw.view(np.uint8 if dt == bool else dt).reshape(ex["shape"])
    if dt == bool:
        arr = (arr & 1).astype(bool)
    a, b = ex["a"], ex["b"]
    with shared_dir() as tmp:
        path = os.path.join(tmp, "a.npy")
        if rank == 0:
            np.save(path, arr)
        comm.Barrier()
        s = load_npy(path)
        try:
            got = s.read(a, b)
        finally:
            s.close()
        want = arr[a:b] if arr.ndim == 3 else arr[a:b, :, None]
        same_bytes(got, want, f"load_npy read({a}, {b})")
        same_bytes(read_npy_rows(path, a, b), arr[a:b], f"read_npy_rows({a}, {b})")
        if arr.ndim == 2:
            c = min(b, arr.shape[1])
            lo = min(a, c)
            same_bytes(read_npy_rows(path, lo, c, axis=1), arr[:, lo:c],
                       f"read_npy_rows axis=1 ({lo}, {c})")


# ------------------------------------------------------------------ transactions
_TXN_NAMES = ["a", "b", "c"]
_txn_op = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(_TXN_NAMES), st.integers(1, 4),
              st.sampled_from(["int32", "float64"])),
    st.tuples(st.just("remove"), st.sampled_from(_TXN_NAMES)))
_txn_block = st.recursive(
    st.lists(_txn_op, max_size=4),
    lambda inner: st.lists(st.one_of(_txn_op, st.tuples(st.just("txn"), inner,
                                                        st.booleans())), max_size=4),
    max_leaves=16)


@st.composite
def transaction_examples(draw):
    return dict(ops=draw(_txn_block), store=draw(st.integers(0, 7)))


def prop_transactions(stores, ex):
    """Transactions nested at any depth, each committing or failing in a later step,
    over adds and removals of a few names (a removal inside a transaction sets aside,
    a name freed that way is added again): after every operation the visible variables
    (not those set aside) are those of a model that undoes a failed block whole, each
    byte equal; after the outermost block nothing hidden is left."""
    from ddstore._checks import is_aside
    store = stores[ex["store"] % len(stores)]
    model, serial = {}, [0]

    def agrees(where):
        visible = [v for v in store.variables() if not is_aside(v)]
        assert visible == sorted(model), \
            f"{where}: {store.variables()}, model {sorted(model)}"
        for name, want in model.items():
            got = store.get_range(name, 0, store.nrows(name))
            same_bytes(got, np.concatenate([want] * store.group_size),  # (each member's)
                       f"{where}: {name}")

    def run(ops, depth):
        for op in ops:
            if op[0] == "add" and op[1] not in model:
                serial[0] += 1
                rows = (np.arange(op[2]) + 10 * serial[0]).astype(op[3])
                store.add(op[1], rows)
                model[op[1]] = rows
            elif op[0] == "remove" and op[1] in model:
                store.remove(op[1])
                del model[op[1]]
            elif op[0] == "txn":
                before = dict(model)
                try:
                    with store.transaction(f"depth {depth}"):
                        run(op[1], depth + 1)
                        if op[2]:
                            with store.collective("property step"):
                                raise ddstore.DDStoreValueError("later failure")
                except ddstore.DDStoreValueError as exc:
                    assert op[2] and "later failure" in str(exc), exc
                    model.clear()
                    model.update(before)
            agrees(f"after {op[0]} at depth {depth}")
    try:
        # every name held first: the blocks' removals meet variables made before them
        run([("add", n, 1 + i, "int32") for i, n in enumerate(_TXN_NAMES)] + ex["ops"], 0)
        assert not any(is_aside(v) for v in store.variables()), store.variables()
    finally:
        for v in store.variables():
            store.remove(v)


PROPERTIES = [  # (name, strategy, property)
    ("temporal", temporal_examples(), prop_temporal),
    ("pyg", pyg_examples(), prop_pyg),
    ("dynamic", dynamic_examples(), prop_dynamic),
    ("memory", memory_examples(), prop_memory),
    ("tgl", tgl_examples(), prop_tgl),
    ("jodie", jodie_examples(), prop_jodie),
    ("npy", npy_examples(), prop_npy),
    ("transactions", transaction_examples(), prop_transactions),
]


# ------------------------------------------------------------------ MPI driver
def run_in_step(name, strategy, prop, stores, max_examples):
    """Run ``prop`` over derandomized examples on every rank in step; returns
    ``(examples run, first failing example or None)``."""
    state = {"n": 0, "fail": None}

    @settings(settings.get_profile("mpi"), max_examples=max_examples)
    @given(ex=strategy)
    def run(ex):
        ds = comm.allgather(digest(ex))
        if len(set(ds)) != 1:
            raise RuntimeError(f"{name}: ranks drew different examples ({ds}); the "
                               f"strategies must not depend on the rank")
        state["n"] += 1
        err = None
        try:
            prop(stores, ex)
        except Exception as exc:  # noqa: BLE001 -- reported with its example
            err = f"{type(exc).__name__}: {exc}"
        errs = comm.allgather(err)
        if any(errs) and state["fail"] is None:
            state["fail"] = (ex, errs)
    run.__name__ = f"prop_{name}"
    run()
    return state["n"], state["fail"]


def main(max_examples=20, only=None):
    stores = [ddstore.DDStore(comm, width=w, transport=tr)
              for w in sorted({1, size}) for tr in ("auto", "rma")]
    for name, strategy, prop in PROPERTIES:
        if only and name not in only:
            continue
        n, fail = run_in_step(name, strategy, prop, stores, max_examples)
        check(n > 0, f"{name}: no example ran")
        counts["checks"] += n  # each example: one check (its failures: one below)
        if fail is not None:
            ex, errs = fail
            first = next(e for e in errs if e)
            check(False, f"{name}: failing example (not shrunk) {ex!r}\n  "
                         f"{[f'rank {r}: {e}' for r, e in enumerate(errs) if e]}\n  "
                         f"{first}")
        if rank == 0:
            print(f"  {name}: {n} examples on {size} rank(s), "
                  f"{'FAILED' if fail else 'all held'}", flush=True)
        for s in stores:
            check(s.variables() == [], f"{name}: left {s.variables()} in the store")
    for s in stores:
        s.free()


if __name__ == "__main__":
    args = sys.argv[1:]
    run_main(main, int(args[0]) if args else 20, args[1:] or None)
