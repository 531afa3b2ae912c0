"""MPI program: ddstore.temporal against brute-force references.

Run under mpiexec (inside ``timeout``) on 1-4 ranks: ``temporal_check.py <tmpdir>``.  For
every width dividing the rank count and both transports (auto: node-local lists read in
place; rma: every other member's lists fetched with one-sided reads), on random graphs
with many timestamp ties, self-loops, isolated nodes and uneven edge shares (one rank
with none): every node's T-CSR list (order and ties), features and edge table read back
exactly; ``recent`` and ``uniform`` samples equal to the reference for 1 and 2 layers
(with and without prop_time), nothing at or after a root's time; chunk scheduling
coverage; from_tgl round trip; every bad input raising the same error on every rank with
nothing left in the store; the chunked T-CSR build's bytes against the first build's
(tests/mpi/_tcsr_cases.py); the same graph stored with int32 ids (the default when they
fit) and with int64 ids (forced) giving the same bytes from every read, sampler and
EdgeBatches (check_id_widths).  Exits non-zero on any failure.
"""
import os
import sys

import numpy as np
from mpi4py import MPI

from _harness import check, expect_error, run_main, every_width
import _tcsr_cases as tcsr_cases  # noqa: E402

import ddstore  # noqa: E402
from ddstore import build  # noqa: E402
from ddstore import (DDStoreIndexError, DDStoreMemoryError,  # noqa: E402
                     DDStoreValueError)
from ddstore import temporal as tg  # noqa: E402
from ddstore.testing.temporal import reference_lists, reference_sample  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
TMP = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
REF_CACHE = {}
LISTS_CACHE = {}
TIMES = {}  # id(lists) -> per-node sorted edge times


def equal(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    ok = a.shape == b.shape and a.dtype.kind == b.dtype.kind and np.array_equal(a, b)
    if not ok:
        what += f" (shapes {a.shape} vs {b.shape}; {a[:8]} vs {b[:8]})"
    check(ok, what)


def random_graph(seed, num_nodes, num_edges, tie_range):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_nodes - 3, num_edges)  # the last 3 nodes have no out-edges
    dst = rng.integers(0, num_nodes - 2, num_edges)
    dst[::17] = src[::17]  # self-loops
    t = rng.integers(0, tie_range, num_edges).astype(np.float64)  # many ties
    split = rng.integers(0, 3, num_edges).astype(np.int8)
    ef = rng.standard_normal((num_edges, 3)).astype(np.float32)
    nf = rng.integers(-999, 999, (num_nodes, 2)).astype(np.int16)
    return src, dst, t, split, ef, nf


def shares(total, seed):
    """Uneven contiguous shares over the ranks; on 3+ ranks rank 1 has no edges."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, total + 1, size - 1))
    bounds = np.concatenate([[0], cuts, [total]])
    if size > 2:
        bounds[2] = bounds[1]  # rank 1 empty
    return int(bounds[rank]), int(bounds[rank + 1])


def check_graph(store, g, src, dst, t, split, ef, nf, add_reverse, tag):
    key = (tag.split()[-1], g.num_nodes, len(src), add_reverse)
    if key not in LISTS_CACHE:  # the same for every width and transport
        LISTS_CACHE[key] = reference_lists(src, dst, t, g.num_nodes, add_reverse)
        TIMES[id(LISTS_CACHE[key])] = [np.array([x[0] for x in lst], dtype=np.float64)
                                       for lst in LISTS_CACHE[key]]
    lists = LISTS_CACHE[key]
    equal(g.indptr, np.concatenate([[0], np.cumsum([len(x) for x in lists])]),
          f"{tag}: indptr")
    for v in range(g.num_nodes):
        nb, ts, eid = g.neighbors(v)
        equal(nb, np.array([x[2] for x in lists[v]], dtype=np.int64), f"{tag}: nbr of {v}")
        equal(ts, np.array([x[0] for x in lists[v]], dtype=np.float64), f"{tag}: ts of {v}")
        equal(eid, np.array([x[1] for x in lists[v]], dtype=np.int64), f"{tag}: eid of {v}")
    rng = np.random.default_rng(rank + 99)
    nids = np.concatenate([rng.integers(0, g.num_nodes, 30), [0, g.num_nodes - 1, 0]])
    ptr, nb, ts, eid = g.neighbor_lists(nids)  # batched: the lists of neighbors(v)
    equal(ptr, np.concatenate([[0], np.cumsum([len(lists[v]) for v in nids])]),
          f"{tag}: neighbor_lists ptr")
    equal(np.diff(ptr), g.degree(nids), f"{tag}: degree of nids")
    for name, got, col, dt in (("nbr", nb, 2, np.int64), ("ts", ts, 0, np.float64),
                               ("eid", eid, 1, np.int64)):
        equal(got, np.array([x[col] for v in nids for x in lists[v]], dtype=dt),
              f"{tag}: neighbor_lists {name}")
    eids = rng.integers(0, len(src), 50)
    eids[:3] = [len(src) - 1, 0, len(src) - 1]
    if ef is not None:
        equal(g.edge_features(eids).view(np.uint32), ef[eids].view(np.uint32),
              f"{tag}: edge features bytes")
    if nf is not None:
        nids = rng.integers(0, g.num_nodes, 40)
        equal(g.node_features(nids), nf[nids], f"{tag}: node features")
    s, d, tt = g.edges(eids)
    equal(s, src[eids], f"{tag}: edges src")
    equal(d, dst[eids], f"{tag}: edges dst")
    equal(tt, t[eids], f"{tag}: edges t")
    equal(g.split, split, f"{tag}: split")
    check(g.split_counts == dict(zip(("train", "val", "test"),
                                     np.bincount(split, minlength=3).tolist())),
          f"{tag}: split counts {g.split_counts}")
    return lists


def check_sampler(g, lists, tie_range, tag):
    rng = np.random.default_rng(1234)  # same roots on every rank
    n = 120
    roots = rng.integers(0, g.num_nodes, n)
    rts = rng.integers(-1, tie_range + 2, n).astype(np.float64)  # on edge times, before all
    rts[:5] = [tie_range + 5, -3, 0, tie_range // 2, tie_range // 2]
    for strategy in ("recent", "uniform"):
        for fanouts in ((3,), (4, 2)):
            for prop_time in (False, True):
                for epoch in (0, 3):
                    what = f"{tag}: {strategy} {fanouts} prop_time={prop_time} epoch={epoch}"
                    # epoch 3: remote lists longer than 4 entries binary-searched, and
                    # uniform draws from over k eligible read one row per draw; epoch 0:
                    # the default rule (every list fetched whole: under 1 MiB)
                    sm = tg.TemporalSampler(g, fanouts, strategy, seed=5, prop_time=prop_time,
                                            remote_fetch_max=4 if epoch else None,
                                            remote_range_factor=1 if epoch else 64)
                    sm.set_epoch(epoch)
                    blocks = sm.sample(roots, rts)
                    key = (id(lists), strategy, fanouts, prop_time, epoch)
                    if key not in REF_CACHE:  # the same for every width and transport
                        REF_CACHE[key] = reference_sample(
                            lists, roots, rts, fanouts, strategy, seed=5, epoch=epoch,
                            prop_time=prop_time)
                    ref = REF_CACHE[key]
                    check(len(blocks) == len(fanouts), f"{what}: {len(blocks)} blocks")
                    for li, (b, r) in enumerate(zip(blocks, ref)):
                        w = f"{what} layer {li}"
                        for key in ("nodes", "ts", "row", "eid", "edge_ts"):
                            equal(getattr(b, key), r[key], f"{w}: {key}")
                        nr = b.num_roots
                        equal(b.col, np.arange(nr, nr + len(b.row)), f"{w}: col")
                        equal(b.dts, b.ts[:nr][b.row] - b.edge_ts, f"{w}: dts")
                        check(bool(np.all(b.dts > 0)), f"{w}: an edge at/after its root time")
                        equal(b.edge_index, np.stack([b.col, b.row]), f"{w}: edge_index")
                        # counts: min(k, eligible) per root, eligible = strictly before
                        if epoch == 0 and not prop_time:
                            elig = np.array([np.searchsorted(TIMES[id(lists)][v], tr)
                                             for v, tr in zip(b.nodes[:nr], b.ts[:nr])])
                            cnt = np.bincount(b.row, minlength=nr)
                            equal(cnt, np.minimum(elig, fanouts[li]), f"{w}: counts")
                    again = sm.sample(roots, rts)
                    check(all(np.array_equal(a.eid, c.eid) for a, c in zip(blocks, again)),
                          f"{what}: not deterministic")
    # uniform draws really are spread over the eligible edges (node with most edges)
    v = int(np.argmax(np.diff(g.indptr)))
    deg = int(g.indptr[v + 1] - g.indptr[v])
    sm = tg.TemporalSampler(g, (5,), "uniform", seed=1)
    after = TIMES[id(lists)][v].max() + 1  # every edge of v eligible
    b = sm.sample(np.full(4000, v), np.full(4000, after, dtype=g.time_dtype))[0]
    freq = np.bincount(b.eid, minlength=g.num_edges)[np.unique(b.eid)]
    check(len(np.unique(b.eid)) == len(set(x[1] for x in lists[v])),
          f"{tag}: uniform over {deg} edges hit {len(np.unique(b.eid))} distinct")
    expect = 4000 * 5 / deg
    check(freq.min() > 0.5 * expect and freq.max() < 1.6 * expect * (2 if any(
        x[2] == v for x in lists[v]) else 1), f"{tag}: uniform frequencies {freq.min()}-"
          f"{freq.max()} vs {expect:.1f}")
    # the earliest eligible edge is returned (TGL's off-by-one is not ours)
    first = lists[v][0]
    later = [x for x in lists[v] if x[0] > first[0]]
    if later:
        r = tg.TemporalSampler(g, (deg,), "recent").sample([v], [later[0][0]])[0]
        check(first[1] in r.eid.tolist(), f"{tag}: earliest eligible edge missing")


def check_batches(g, src, t, split, tag):
    for code, name in enumerate(("train", "val", "test")):
        ids = np.flatnonzero(split == code)
        want = ids[np.argsort(t[ids], kind="stable")]
        for chunks, bs in ((1, 16), (4, 16), (3, 12)):
            eb = tg.EdgeBatches(g, bs, name, chunks=chunks, negatives=2, comm=comm, seed=3)
            shifts = set()
            for epoch in range(4):
                eb.set_epoch(epoch)
                got, sizes = [], []
                for s, d, neg, tt, eid in eb:
                    allp = comm.allgather(eid)
                    full = np.concatenate(allp)
                    got.append(full)
                    sizes.append(len(full))
                    equal(s, src[eid], f"{tag} batches src")
                    equal(tt, t[eid], f"{tag} batches t")
                    check(neg.shape == (len(eid), 2) and (neg.size == 0 or (
                        neg.min() >= 0 and neg.max() < g.num_nodes)), f"{tag} negatives")
                got = np.concatenate(got) if got else np.zeros(0, np.int64)
                equal(got, want, f"{tag} {name} chunks={chunks} epoch {epoch}: coverage")
                b = eb.boundaries()
                shift = int(b[1]) if len(b) > 1 else 0
                check(shift % (bs // chunks) == 0, f"{tag}: shift {shift} not whole chunks")
                check(all(x == bs for x in sizes[1:-1]), f"{tag}: inner batch sizes {sizes}")
                shifts.add(shift % bs)
            if chunks > 1 and len(want) > 3 * bs:
                check(len(shifts) > 1, f"{tag}: chunk shift never changed ({shifts})")


def same_bytes(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    ok = a.shape == b.shape and a.dtype == b.dtype and \
        a.reshape(-1).view(np.uint8).tobytes() == b.reshape(-1).view(np.uint8).tobytes()
    check(ok, what + ("" if ok else f" ({a.shape} {a.dtype} vs {b.shape} {b.dtype})"))


def check_id_widths(store, tag):
    """One graph built with int32 ids (the default: they fit) and with int64 ids
    (``build.ID32_LIMIT`` lowered below its node ids): the stored widths, and every read
    (neighbors, edges, to the last byte and dtype), sampler output (lists read in place,
    fetched whole, searched remotely, one row per draw) and EdgeBatches the same."""
    src, dst, t, split, ef, nf = random_graph(5, 31, 260, 9)
    lo, hi = shares(260, 5)
    rng = np.random.default_rng(77)
    roots = rng.integers(0, 31, 90)
    rts = rng.integers(-1, 12, 90).astype(np.float64)
    out = {}
    for wide in (False, True):
        old = build.ID32_LIMIT
        build.ID32_LIMIT = 8 if wide else old  # below num_nodes and the largest node id
        try:
            g = tg.TemporalGraph.from_arrays(store, "gw", src[lo:hi], dst[lo:hi], t[lo:hi],
                                             num_nodes=31, add_reverse=True,
                                             split=split[lo:hi])
        finally:
            build.ID32_LIMIT = old
        want = np.dtype(np.int64 if wide else np.int32)
        for var in ("nbr", "eid", "edges"):
            check(store.dtype(f"gw/{var}") == want, f"{tag} wide={wide}: {var} stored as "
                                                     f"{store.dtype(f'gw/{var}')}")
        res = []
        for v in range(g.num_nodes):
            res += [(f"neighbors({v}) {i}", x) for i, x in enumerate(g.neighbors(v))]
        res += [(f"edges {i}", x) for i, x in enumerate(g.edges(np.arange(260)[::-1]))]
        for strategy in ("recent", "uniform"):
            for fetch, factor in ((2048, 64), (4, 1)):
                sm = tg.TemporalSampler(g, (4, 3), strategy, seed=9, remote_fetch_max=fetch,
                                        remote_range_factor=factor)
                for li, b in enumerate(sm.sample(roots, rts)):
                    for key in ("nodes", "ts", "row", "col", "eid", "edge_ts", "dts",
                                "edge_index"):
                        res.append((f"{strategy} fetch={fetch} layer {li} {key}",
                                    getattr(b, key)))
        eb = tg.EdgeBatches(g, 16, "train", chunks=2, negatives=2, comm=comm, seed=3)
        eb.set_epoch(1)
        for bi, batch in enumerate(eb):
            res += [(f"EdgeBatches batch {bi} field {i}", x) for i, x in enumerate(batch)]
        out[wide] = res
        g.remove()
    check(len(out[False]) == len(out[True]), f"{tag}: id widths: {len(out[False])} vs "
                                             f"{len(out[True])} outputs")
    for (what, a), (_, b) in zip(out[False], out[True]):
        same_bytes(a, b, f"{tag}: int32 vs int64 ids: {what}")
        check(np.asarray(a).dtype.kind == "f" or np.asarray(a).dtype == np.int64,
              f"{tag}: {what} given as {np.asarray(a).dtype}, not int64")


def check_errors(store, tag):
    src, dst, t, split, ef, nf = random_graph(3, 20, 60, 10)
    lo, hi = shares(60, 1)
    S = slice(lo, hi)
    last = size - 1

    def build(**kw):
        args = dict(src=src[S], dst=dst[S], t=t[S], split=split[S], edge_feat=ef[S])
        args.update(kw)
        return tg.TemporalGraph.from_arrays(store, "bad", **args)

    def on(r, bad, good):
        return bad if rank == r else good
    bad_src = src[S].copy()
    if len(bad_src):
        bad_src[-1] = -4
    expect_error(DDStoreIndexError, "negative",
                 lambda: build(src=on(0, bad_src, src[S])), what=f"{tag} negative id",
                 agree=True, store=store)
    expect_error(DDStoreIndexError, "out of range [0, 5)", lambda: build(num_nodes=5),
                 what=f"{tag} id >= num_nodes", agree=True, store=store)
    huge = src[S].copy()  # on the last rank only: a replicated indptr of 24 TB
    if len(huge):
        huge[0] = 10 ** 12
    if max(comm.allgather(len(huge) if rank == last else 0)):
        expect_error(DDStoreMemoryError, "num_nodes=1000000000001 (the largest",
                     lambda: build(src=on(last, huge, src[S])),
                     what=f"{tag} absurd node id", agree=True, store=store)
    bt = t[S].copy()
    if len(bt):
        bt[0] = np.nan
    expect_error(DDStoreValueError, "NaN", lambda: build(t=on(0, bt, t[S])),
                 what=f"{tag} NaN time", agree=True, store=store)
    expect_error(DDStoreValueError, "lengths",
                 lambda: build(dst=on(last, dst[S][:-1] if hi > lo else
                                                         np.ones(1, np.int64), dst[S])),
                 what=f"{tag} lengths", agree=True, store=store)
    bs = split[S].copy()
    if len(bs):
        bs[0] = 3
    expect_error(DDStoreValueError, "outside 0-2",
                 lambda: build(split=on(0, bs, split[S])), what=f"{tag} split 3",
                 agree=True, store=store)
    expect_error(DDStoreValueError, "edge_feat",
                 lambda: build(edge_feat=on(last, ef[lo:hi + 1] if
                                                              hi < 60 else ef[lo:hi - 1],
                                                              ef[S])),
                 what=f"{tag} edge_feat rows", agree=True, store=store)
    expect_error(DDStoreValueError, (),
                 lambda: build(node_feat=nf[:3] if rank == 0 else None),
                 what=f"{tag} node_feat on one rank", agree=True, store=store)
    if size > 1:  # the whole table on every rank, where each rank's share is asked for
        expect_error(DDStoreValueError, ["every rank gave the same node_feat (20 rows",
                                         "ddstore.partition(20, size, rank)"],
                     lambda: build(node_feat=nf), what=f"{tag} node_feat copied",
                     agree=True, store=store)
    if 20 % size == 0:  # equal shares of equal bytes, edges beyond one share: accepted
        g = build(node_feat=np.zeros((20 // size,) + nf.shape[1:], nf.dtype))
        check(g.num_nodes == 20, f"{tag}: zero shares: {g.num_nodes} nodes, not 20")
        g.remove()
    # a later step fails on the last rank only (an OSError nobody listed): what was
    # added is removed, on every rank
    real_init = store.init

    def failing_init(name, *args, **kw):
        if name.endswith(fail_at):
            with store.collective(None):
                if rank == last:
                    raise OSError("injected failure")
        return real_init(name, *args, **kw)
    store.init = failing_init
    for fail_at in ("edge_split", "nbr", "node_feat"):  # after the edge table, the T-CSR
        expect_error(DDStoreValueError, [f"rank {last}: ", "OSError: injected failure"],
                     lambda: build(node_feat=nf[slice(*ddstore.partition(20, size, rank))]),
                     what=f"{tag} failure at {fail_at}", agree=True, store=store)
    del store.init
    g = build()
    expect_error(DDStoreValueError, "already holds", lambda: build(),
                 what=f"{tag} name taken", agree=True, store=store)
    for bad, cls, m in ((dict(fanouts=(0,)), DDStoreValueError, "fanouts"),
                        (dict(fanouts=()), DDStoreValueError, "fanouts"),
                        (dict(strategy="latest"), DDStoreValueError, "unknown strategy"),
                        (dict(strategy=["recent"]), DDStoreValueError,
                         "unknown strategy ['recent']"),
                        (dict(remote_fetch_max=0), DDStoreValueError,
                         "remote_fetch_max=0 must be an integer >= 1 or None"),
                        (dict(remote_fetch_max=2.5), DDStoreValueError, "remote_fetch_max"),
                        (dict(remote_range_factor=None), DDStoreValueError,
                         "remote_range_factor=None must be an integer >= 1")):
        try:
            tg.TemporalSampler(g, **bad)
            check(False, f"{tag}: {bad} accepted")
        except cls as exc:
            check(m in str(exc), f"{tag}: {bad}: {exc}")
    sm = tg.TemporalSampler(g, (2,))
    for roots, ts, cls, m in (([0, 20], [1.0, 2.0], DDStoreIndexError, "out of range"),
                              ([-1], [1.0], DDStoreIndexError, "out of range"),
                              ([0, 1], [1.0], DDStoreValueError, "same length"),
                              ([0], [np.nan], DDStoreValueError, "NaN"),
                              # an infinite root time was taken (dts all inf)
                              ([0, 1], [1.0, np.inf], DDStoreValueError,
                               "ts[1] = inf (root 1) is NaN or infinite"),
                              ([0], [-np.inf], DDStoreValueError, "must be finite")):
        try:
            sm.sample(roots, ts)
            check(False, f"{tag}: sample({roots}, {ts}) accepted")
        except cls as exc:
            check(m in str(exc), f"{tag}: sample({roots}, {ts}): {exc}")
    for kw, m in ((dict(batch_size=0), "batch_size"), (dict(batch_size=10, chunks=3),
                                                       "divide"),
                  (dict(batch_size=10, split="dev"), "split"),
                  (dict(graph="g", batch_size=10), "graph must be a TemporalGraph, got "
                                                   "str 'g'")):
        try:
            tg.EdgeBatches(**{"graph": g, **kw})
            check(False, f"{tag}: EdgeBatches {kw} accepted")
        except DDStoreValueError as exc:
            check(m in str(exc), f"{tag}: EdgeBatches {kw}: {exc}")
    g.remove()
    check(store.variables() == [], f"{tag}: remove left {store.variables()}")


def check_tgl(store, tag):
    src, dst, t, split, ef, nf = random_graph(11, 30, 150, 40)
    t = np.sort(t) + 0.25
    d = os.path.join(TMP, f"tgl_{size}")
    if rank == 0:
        tg.write_tgl(d, src, dst, t, split, edge_feat=ef, node_feat=nf)
        bad = os.path.join(TMP, f"tgl_bad_{size}")
        os.makedirs(bad, exist_ok=True)
        lines = open(os.path.join(d, "edges.csv")).read().splitlines()
        lines[101] = lines[101].rsplit(",", 1)[0] + ",7"  # ext_roll 7 on line 102
        open(os.path.join(bad, "edges.csv"), "w").write("\n".join(lines) + "\n")
        uns = os.path.join(TMP, f"tgl_unsorted_{size}")
        os.makedirs(uns, exist_ok=True)
        lines = open(os.path.join(d, "edges.csv")).read().splitlines()
        parts = lines[120].split(",")
        parts[3] = "0.0"
        lines[120] = ",".join(parts)  # time goes back on line 121
        open(os.path.join(uns, "edges.csv"), "w").write("\n".join(lines) + "\n")
        short = os.path.join(TMP, f"tgl_short_{size}")
        os.makedirs(short, exist_ok=True)
        lines = open(os.path.join(d, "edges.csv")).read().splitlines()
        lines[60] = "59,1"
        open(os.path.join(short, "edges.csv"), "w").write("\n".join(lines) + "\n")
        extra = os.path.join(TMP, f"tgl_extra_{size}")
        os.makedirs(extra, exist_ok=True)
        lines = open(os.path.join(d, "edges.csv")).read().splitlines()
        lines[90] += ",3"  # a sixth field on line 91
        open(os.path.join(extra, "edges.csv"), "w").write("\n".join(lines) + "\n")
    comm.Barrier()
    g = tg.TemporalGraph.from_tgl(store, "tgl", d, add_reverse=True)
    check(g.num_edges == 150 and g.num_nodes == 30, f"{tag}: from_tgl sizes {g}")
    check_graph(store, g, src, dst, t, split, ef, nf, True, f"{tag} from_tgl")
    g.remove()
    for fragment, folder, what in (
            ("line 102", f"tgl_bad_{size}", "bad roll"),
            ("line 121", f"tgl_unsorted_{size}", "unsorted"),
            ("line 61", f"tgl_short_{size}", "short row"),
            ("line 91: malformed row: 6 fields, expected 5", f"tgl_extra_{size}",
             "extra field"),
            ("edges.csv: not found", "no_such_dir", "missing")):
        expect_error(DDStoreValueError, fragment, lambda: tg.TemporalGraph.from_tgl(
            store, "x", os.path.join(TMP, folder)), what=f"{tag} tgl {what}", agree=True,
            store=store)


def main():
    widths = every_width()
    for width in widths:
        for transport in ("auto", "rma"):
            tag = f"[n={size} w={width} {transport}]"
            with ddstore.DDStore(comm, width=width, transport=transport) as store:
                if transport == "rma":
                    check(store.shm_peers == 0, f"{tag}: rma with shm peers")
                for seed, (nn, ne, tie, rev) in enumerate(((37, 400, 25, False),
                                                           (23, 300, 12, True))):
                    src, dst, t, split, ef, nf = random_graph(seed, nn, ne, tie)
                    lo, hi = shares(ne, seed)
                    nlo, nhi = ddstore.partition(nn, size, rank)
                    g = tg.TemporalGraph.from_arrays(
                        store, f"g{seed}", src[lo:hi], dst[lo:hi], t[lo:hi],
                        edge_feat=ef[lo:hi], node_feat=nf[nlo:nhi], add_reverse=rev,
                        split=split[lo:hi])
                    lists = check_graph(store, g, src, dst, t, split, ef, nf, rev,
                                        f"{tag} g{seed}")
                    check_sampler(g, lists, tie, f"{tag} g{seed}")
                    if seed == 0 and transport == "auto":
                        check_batches(g, src, t, split, f"{tag} g{seed}")
                    g.remove()
                check_id_widths(store, tag)
                if transport == "auto" and width == widths[-1]:
                    check_errors(store, tag)
                    check_tgl(store, tag)
    tcsr_cases.main(TMP)  # the chunked build against the first one
    comm.Barrier()


run_main(main)
