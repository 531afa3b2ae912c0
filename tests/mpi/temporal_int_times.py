"""MPI program: integer times kept exactly, end to end, on 1-3 ranks.

Run under mpiexec (inside ``timeout``): ``temporal_int_times.py``.  Times that float64
would merge or round -- around 2**53 (9007199254740993 and its neighbours), around 2**62
(2**62 + 3 i, with ties) and negative (-2**62 - i), Unix nanoseconds (1700000000000000001
+ 3 i) -- through every builder: ``from_arrays`` (every rank its share), ``from_jodie``
(a small CSV), ``from_tgl`` (a small ``edges.csv``) and ``from_pyg``; for every width and
both transports.  Checked against a brute force in exact Python ints
(``ddstore.testing.temporal``): the graph's ``time_dtype`` (int64), every T-CSR list,
the edge table, ``to_pyg().t``, ``recent`` and ``uniform`` samples over two layers
(``ts``, ``edge_ts``, ``dts``), ``EdgeBatches``' times, and ``NodeMemory(ts_dtype=int64)``
commits ordered by times 1 apart near 2**62 (a float64 tie) across ranks.  Float times
stay float64 (the same graphs with float times, and a JODIE file with a fractional time).
Mixed input is decided alike on every rank: integers on one rank and floats on another
give float64 when the integers fit it exactly, else an error naming the rank and the
value; a float time column with an integer literal float64 would round is refused naming
the file and line.
"""
import os

import numpy as np

from _harness import Cases, check, comm, each_store, expect_error, rank, run_main, size
from _harness import shared_tmpdir

import ddstore  # noqa: E402
from ddstore import DDStoreValueError  # noqa: E402
from ddstore import temporal as tg  # noqa: E402
from ddstore.sources.tgl import write_tgl  # noqa: E402
from ddstore.testing.temporal import (ReferenceNodeMemory, reference_lists,  # noqa: E402
                                      reference_sample)

B62, B53 = 2 ** 62, 2 ** 53
NS = 1700000000000000001  # Unix nanoseconds: float64 holds multiples of 256 only
FAMILIES = {  # name -> the time of edge i of E (distinct to float64 only as integers)
    "near 2**53": lambda i: 9007199254740993 + (i * 7) % 11 - 5,
    "near 2**62": lambda i: B62 + 3 * ((i * 5) % 17),
    "negative": lambda i: -B62 - (i * 3) % 13,
    "ns": lambda i: NS + 3 * (i // 2),
}
cases = Cases()


def equal(a, b, what):
    """Same dtype kind, shape and every value (exact)."""
    a, b = np.asarray(a), np.asarray(b)
    ok = a.dtype.kind == b.dtype.kind and a.shape == b.shape and np.array_equal(a, b)
    check(ok, f"{what}: {a.dtype}{a.shape} {a[:4].tolist()} vs {b.dtype}{b.shape} "
              f"{b[:4].tolist()}")


def graph_edges(seed, n, e, family):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    t = np.array([FAMILIES[family](i) for i in range(e)], np.int64)
    return src, dst, t


def my_share(e):
    """This rank's edges: uneven, the last rank's share empty on 3 ranks."""
    cut = [0] + [e * (r + 1) // (size + 1) for r in range(size - 1)] + [e]
    return cut[rank], cut[rank + 1]


def check_graph(g, src, dst, t, rev, tag):
    """Lists, edge table, to_pyg and samples of ``g`` against the brute force."""
    check(g.time_dtype == t.dtype, f"{tag}: time_dtype {g.time_dtype}, given {t.dtype}")
    lists = reference_lists(src, dst, t, g.num_nodes, rev)
    for v in range(g.num_nodes):
        nbr, ts, eid = g.neighbors(v)
        ref = lists[v]
        equal(ts, np.array([x[0] for x in ref], t.dtype), f"{tag}: node {v} ts")
        equal(eid, np.array([x[1] for x in ref], np.int64), f"{tag}: node {v} eid")
        equal(nbr, np.array([x[2] for x in ref], np.int64), f"{tag}: node {v} nbr")
    eids = np.arange(g.num_edges)[::-1].copy()
    equal(g.edges(eids)[2], t[eids], f"{tag}: edge table t")
    pt = g.to_pyg().t.numpy()
    equal(pt, t, f"{tag}: to_pyg().t")
    rng = np.random.default_rng(11)
    roots = rng.integers(0, g.num_nodes, 25)
    rts = t[rng.integers(0, t.shape[0], 25)] + rng.integers(-1, 2, 25)  # at, before, after
    for strategy in ("recent", "uniform"):
        for prop in (False, True):
            sm = tg.TemporalSampler(g, (3, 2), strategy, seed=4, prop_time=prop,
                                    remote_fetch_max=2)  # long remote lists searched
            got = sm.sample(roots, rts)
            ref = reference_sample(lists, roots, rts, (3, 2), strategy, seed=4,
                                   prop_time=prop)
            for layer, (b, r) in enumerate(zip(got, ref)):
                what = f"{tag} {strategy} prop_time={prop} layer {layer}"
                for key in ("nodes", "ts", "row", "eid", "edge_ts"):
                    equal(getattr(b, key), r[key], f"{what}: {key}")
                exact = [x - y for x, y in zip(b.ts[b.row].tolist(), b.edge_ts.tolist())]
                equal(b.dts, np.array(exact, t.dtype), f"{what}: dts")  # (Python ints)
                check(all(d > 0 for d in exact), f"{what}: an edge not before its root")


@cases("from_arrays")
def _(c):
    for store, tag, transport in each_store():
        for k, (family, rev) in enumerate((("near 2**53", False), ("near 2**62", True),
                                           ("negative", True), ("ns", False))):
            src, dst, t = graph_edges(k, 9, 90, family)
            a, b = my_share(t.shape[0])
            g = tg.TemporalGraph.from_arrays(store, "g", src[a:b], dst[a:b], t[a:b],
                                             add_reverse=rev)
            check_graph(g, src, dst, t, rev, f"{tag} {family}")
            if transport == "auto" and family == "ns":
                batches = tg.EdgeBatches(g, 16)
                got = np.concatenate([x[3] for x in batches])
                equal(got, np.sort(t, kind="stable"), f"{tag}: EdgeBatches t")
            g.remove()
        # float times stay float64 (the same edges and times as floats)
        src, dst, t = graph_edges(5, 9, 90, "near 2**53")
        tf = (t - 9007199254740993).astype(np.float64) / 4
        a, b = my_share(t.shape[0])
        g = tg.TemporalGraph.from_arrays(store, "f", src[a:b], dst[a:b], tf[a:b])
        check_graph(g, src, dst, tf, False, f"{tag} float")
        g.remove()


@cases("mixed integer and float shares", min_ranks=2)
def _(c):
    with ddstore.DDStore(comm) as store:
        mine = np.array([1.5, 2.5]) if rank == 1 else np.array([3, 2 ** 53], np.int64)
        g = tg.TemporalGraph.from_arrays(store, "m", [0, 1], [1, 0], mine)
        check(g.time_dtype == np.float64, f"mixed: time_dtype {g.time_dtype}")
        want = np.concatenate([np.array([3, 2 ** 53], np.float64)] * (size - 1))
        want = np.insert(want, 2, [1.5, 2.5])
        equal(g.edges(np.arange(2 * size))[2], want, "mixed: float64 times")
        g.remove()
        mine = np.array([1.5, 2.5]) if rank == 1 else np.array([3, B53 + 1], np.int64)
        expect_error(DDStoreValueError, ("graph 'm': t[1] = 9007199254740993 on rank 0",
                                         "rank 1 gives float times", "[-2**53, 2**53]"),
                     tg.TemporalGraph.from_arrays, store, "m", [0, 1], [1, 0], mine,
                     what="mixed: an integer float64 would round", agree=True, store=store)


def write_files(tmp):
    """Rank 0 writes the JODIE and TGL files of the readers' cases."""
    n = 12
    user, item = np.arange(n) % 3, np.arange(n) % 4
    times = {"ns": [NS + 3 * i for i in range(n)],
             "neg": [-B62 - 12 + i for i in range(n)]}
    if rank == 0:
        for key, ts in times.items():
            with open(os.path.join(tmp, f"{key}.csv"), "w") as f:
                f.write("user_id,item_id,timestamp,state_label,features\n")
                f.writelines(f"{u},{i},{t},{t % 2},0.25\n" for u, i, t in zip(user, item,
                                                                              ts))
            write_tgl(os.path.join(tmp, f"tgl_{key}"), user, item + 3, ts, np.zeros(n, int))
        with open(os.path.join(tmp, "frac.csv"), "w") as f:
            f.write("user_id,item_id,timestamp,state_label\n0,0,1,0\n1,1,2.5,0\n2,0,3,0\n")
        os.makedirs(os.path.join(tmp, "tgl_round"))
        with open(os.path.join(tmp, "tgl_round", "edges.csv"), "w") as f:
            f.write(",src,dst,time,ext_roll\n0,0,1,1.5,0\n1,1,2,9007199254740993,0\n"
                    "2,2,0,9007199254740995,0\n")
    comm.Barrier()
    return user, item, times


@cases("readers")
def _(c):
    import torch
    from torch_geometric.data import TemporalData
    with shared_tmpdir() as tmp:
        user, item, times = write_files(tmp)
        for store, tag, transport in each_store(transports=("auto",)):
            for key, ts in times.items():
                t = np.array(ts, np.int64)
                g = tg.TemporalGraph.from_jodie(store, "j", os.path.join(tmp, f"{key}.csv"))
                check(g.t_dtype == np.int64, f"{tag} jodie {key}: t_dtype {g.t_dtype}")
                check_graph(g, user, item + 3, t, False, f"{tag} jodie {key}")
                g.remove()
                g = tg.TemporalGraph.from_tgl(store, "t", os.path.join(tmp, f"tgl_{key}"))
                check_graph(g, user, item + 3, t, False, f"{tag} tgl {key}")
                g.remove()
                data = TemporalData(src=torch.from_numpy(user), dst=torch.from_numpy(item + 3),
                                    t=torch.from_numpy(t))
                g = tg.TemporalGraph.from_pyg(store, "p", data)
                check_graph(g, user, item + 3, t, False, f"{tag} pyg {key}")
                g.remove()
            g = tg.TemporalGraph.from_jodie(store, "f", os.path.join(tmp, "frac.csv"))
            check(g.time_dtype == np.float64 and g.t_dtype == np.float64,
                  f"{tag}: a fractional time: {g.time_dtype}, {g.t_dtype}")
            equal(g.edges([0, 1, 2])[2], np.array([1.0, 2.5, 3.0]), f"{tag}: float times")
            g.remove()
            expect_error(DDStoreValueError, ("tgl_round/edges.csv, line 3",
                                             "9007199254740993", "[-2**53, 2**53]"),
                         tg.TemporalGraph.from_tgl, store, "r",
                         os.path.join(tmp, "tgl_round"), what=f"{tag}: float64 would round",
                         agree=True, store=store)


@cases("node memory")
def _(c):
    n, md, ad, S = 7, 2, 3, 3
    for store, tag, transport in each_store():
        m = tg.NodeMemory(store, "mem", n, md, ad, S, ts_dtype=np.int64)
        ref = ReferenceNodeMemory(n, md, ad, S, ts_dtype=np.int64)
        for step in range(3):
            writes, posts = [], []
            for r in range(size):  # every rank's updates, known to every rank
                g = np.random.default_rng(100 * step + r)
                k = 6
                nodes = g.integers(0, n, k)
                # times 1 apart near 2**62 (one float64 value), later ranks earlier
                ts = B62 + 10 * step + (size - r) + g.integers(0, 3, k)
                rows = g.standard_normal((k, md)).astype(np.float32)
                mails = g.standard_normal((k, ad)).astype(np.float32)
                writes += [(r, p, int(v), int(x), rows[p]) for p, (v, x) in
                           enumerate(zip(nodes, ts))]
                posts += [(r, p, int(v), int(x), mails[p]) for p, (v, x) in
                          enumerate(zip(nodes, ts))]
                if r == rank:
                    m.write(nodes, rows, ts)
                    m.post(nodes, mails, ts)
            m.commit()
            ref.commit(writes, posts)
            got = m.read(np.arange(n))
            want = ref.read(range(n))
            for key, w in zip(("memory", "memory_ts", "mail", "mail_ts"), want):
                equal(getattr(got, key).numpy(), w, f"{tag} step {step}: {key}")
        m.write([1], np.zeros((1, md), np.float32), np.array([0.5]))
        expect_error(DDStoreValueError, "ts[0] = 0.5 (node 1) is not an integer within int64",
                     m.commit, what=f"{tag}: a fractional time in an int64 memory",
                     agree=True)
        m.remove()


run_main(cases.run)
