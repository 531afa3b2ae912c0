"""Cases of tests/mpi/temporal_check.py (run in its launch, on 1-4 ranks): the chunked
T-CSR build (ddstore.build) against the first, all-at-once build
(ddstore.testing.temporal.reference_tcsr: the same T-CSR in numpy).

For every width dividing the rank count, chunk sizes 1, 7, 64 and the default, with and
without reverse edges, on graphs with many timestamp ties, self-loops, a hub node with
more entries than a chunk and uneven shares (one rank with none on 3+ ranks): the
T-CSR's bytes (indptr, node ranges, nbr, ts, eid), the edge table, features and
samples equal the reference's (ids stored as int32, the default for these small graphs,
and read back as int64).  Then from_tgl with chunk sizes 1 and the default (edge and node
features included), once more with int64 ids forced (``ddstore.build.ID32_LIMIT``
lowered below a node id: the int32 edge table is refused at a later piece and the build
starts again with int64), and a malformed row in a later piece of the last rank's range:
every rank raises the same error and nothing is left in the store.
"""
import os

import numpy as np
from mpi4py import MPI

from _harness import check, expect_error, every_width

import ddstore  # noqa: E402
from ddstore import DDStoreValueError, build  # noqa: E402
from ddstore import temporal as tg  # noqa: E402
from ddstore.testing.temporal import (reference_lists, reference_sample,  # noqa: E402
                                      reference_tcsr)

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def equal(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    ok = a.shape == b.shape and a.dtype == b.dtype and \
        a.reshape(-1).view(np.uint8).tobytes() == b.reshape(-1).view(np.uint8).tobytes()
    check(ok, what + ("" if ok else f" ({a.shape} {a.dtype} vs {b.shape} {b.dtype}; "
                                     f"{a.reshape(-1)[:6]} vs {b.reshape(-1)[:6]})"))


def graph(seed, num_nodes, num_edges, ties):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_nodes, num_edges)
    dst = rng.integers(0, num_nodes, num_edges)
    src[::3] = 1  # hub: node 1 has more entries than any chunk
    dst[::11] = src[::11]  # self-loops
    t = rng.integers(0, ties, num_edges).astype(np.float64)
    t[::13] = -0.0  # signed zeros tie with 0.0
    return src, dst, t


def shares(total, seed):
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, total + 1, size - 1))
    bounds = np.concatenate([[0], cuts, [total]])
    if size > 2:
        bounds[2] = bounds[1]  # rank 1 has no edges
    return int(bounds[rank]), int(bounds[rank + 1])


def check_tcsr(store, g, src, dst, t, rev, width, tag):
    ip, off, nbr, ts, eid = reference_tcsr(src, dst, t, g.num_nodes, rev, width)
    equal(g.indptr, ip, f"{tag}: indptr")
    equal(g.node_offsets, off, f"{tag}: node ranges")
    total = int(ip[-1])
    ids = build.id_dtype(g.num_nodes, g.num_edges)
    for var, want in (("nbr", nbr), ("ts", ts), ("eid", eid)):
        got = store.get_range(f"{g.name}/{var}", 0, total)
        check(got.dtype == (np.float64 if var == "ts" else ids),
              f"{tag}: {var} stored as {got.dtype}")
        equal(got if var == "ts" else got.astype(np.int64), want, f"{tag}: {var}")
    lo, hi = store.local_rows(f"{g.name}/ts")
    g0 = store.group_rank
    check((lo, hi) == (int(ip[off[g0]]), int(ip[off[g0 + 1]])), f"{tag}: local rows")
    s, d, tt = g.edges(np.arange(len(src)))
    equal(s, src, f"{tag}: edges src")
    equal(d, dst, f"{tag}: edges dst")
    equal(tt, t, f"{tag}: edge_t")


def check_samples(g, src, dst, t, rev, ties, tag, cache):
    key = (tag.split()[-1], rev)
    rng = np.random.default_rng(7)
    roots = rng.integers(0, g.num_nodes, 60)
    rts = rng.integers(-1, ties + 2, 60).astype(np.float64)
    if key not in cache:
        lists = reference_lists(src, dst, t, g.num_nodes, rev)
        cache[key] = {c: reference_sample(lists, roots, rts, f, c, seed=2)
                      for c, f in (("recent", (4,)), ("uniform", (3, 2)))}
    for strategy, fanouts in (("recent", (4,)), ("uniform", (3, 2))):
        blocks = tg.TemporalSampler(g, fanouts, strategy, seed=2).sample(roots, rts)
        for li, (b, r) in enumerate(zip(blocks, cache[key][strategy])):
            for k in ("nodes", "ts", "row", "eid", "edge_ts"):
                check(np.array_equal(getattr(b, k), r[k]),
                      f"{tag}: {strategy} layer {li} {k}")


def check_arrays():
    widths = every_width()
    cache = {}
    for seed, (nn, ne, ties, chunks) in enumerate(((40, 400, 30, (64, None)),
                                                   (9, 60, 3, (1, 7)))):
        src, dst, t = graph(seed, nn, ne, ties)
        lo, hi = shares(ne, seed)
        rng = np.random.default_rng(seed + 50)
        ef = rng.standard_normal((ne, 2)).astype(np.float32)
        nf = rng.integers(-99, 99, (nn, 3)).astype(np.int16)
        split = rng.integers(0, 3, ne).astype(np.int8)
        nlo, nhi = ddstore.partition(nn, size, rank)
        for width in widths:
            with ddstore.DDStore(comm, width=width) as store:
                for rev in (False, True):
                    for chunk in chunks:
                        tag = f"[n={size} w={width} rev={rev} chunk={chunk}] g{seed}"
                        g = tg.TemporalGraph.from_arrays(
                            store, "g", src[lo:hi], dst[lo:hi], t[lo:hi],
                            edge_feat=ef[lo:hi], node_feat=nf[nlo:nhi], split=split[lo:hi],
                            add_reverse=rev, chunk_edges=chunk)
                        check_tcsr(store, g, src, dst, t, rev, width, tag)
                        eids = np.arange(ne)[::7]
                        equal(g.edge_features(eids), ef[eids], f"{tag}: edge features")
                        equal(g.node_features(np.arange(nn)), nf, f"{tag}: node features")
                        equal(g.split, split, f"{tag}: split")
                        if chunk != 7:
                            check_samples(g, src, dst, t, rev, ties, tag, cache)
                        g.remove()
                        check(store.variables() == [], f"{tag}: remove left "
                                                       f"{store.variables()}")
                expect_error(DDStoreValueError, "chunk_edges=0 must be an integer >= 1",
                             tg.TemporalGraph.from_arrays, store, "g", src[lo:hi],
                             dst[lo:hi], t[lo:hi], chunk_edges=0, what="chunk_edges=0",
                             agree=True, store=store)


def check_tgl(tmp):
    rng = np.random.default_rng(3)
    ne, nn = 90, 25
    src, dst = rng.integers(0, nn, ne), rng.integers(0, nn, ne)
    src[::4] = 2
    t = np.sort(rng.integers(0, 40, ne)).astype(np.float64)
    split = rng.integers(0, 3, ne).astype(np.int8)
    ef = rng.standard_normal((ne, 4)).astype(np.float32)
    nf = rng.standard_normal((nn, 2)).astype(np.float64)
    d = os.path.join(tmp, f"tcsr_tgl_{size}")
    bad = os.path.join(tmp, f"tcsr_tgl_bad_{size}")
    if rank == 0:
        tg.write_tgl(d, src, dst, t, split, edge_feat=ef, node_feat=nf)
        lines = open(os.path.join(d, "edges.csv")).read().splitlines()
        lines[ne - 5] = lines[ne - 5].replace(",", ",x", 2)  # in the last rank's range
        os.makedirs(bad, exist_ok=True)
        open(os.path.join(bad, "edges.csv"), "w").write("\n".join(lines) + "\n")
    comm.Barrier()
    for width in sorted({1, size}):
        with ddstore.DDStore(comm, width=width) as store:
            for chunk, limit in ((1, None), (None, None), (1, 10)):
                tag = f"[n={size} w={width} chunk={chunk} id32<={limit}] from_tgl"
                old = build.ID32_LIMIT
                build.ID32_LIMIT = old if limit is None else limit
                try:
                    g = tg.TemporalGraph.from_tgl(store, "tgl", d, add_reverse=True,
                                                  chunk_edges=chunk)
                    want = np.int64 if limit is not None else np.int32
                    check(store.dtype("tgl/edges") == want and
                          store.dtype("tgl/nbr") == want, f"{tag}: id widths "
                          f"{store.dtype('tgl/edges')} {store.dtype('tgl/nbr')}")
                    check_tcsr(store, g, src, dst, t, True, width, tag)
                finally:
                    build.ID32_LIMIT = old
                equal(g.edge_features(np.arange(ne)), ef, f"{tag}: edge features")
                equal(g.node_features(np.arange(nn)), nf, f"{tag}: node features")
                equal(g.split, split, f"{tag}: split")
                g.remove()
                expect_error(DDStoreValueError, [f"line {ne - 4}:", "must be"],
                             tg.TemporalGraph.from_tgl, store, "tgl", bad,
                             chunk_edges=chunk, what=f"{tag}: bad row", agree=True,
                             store=store)
                check(store.variables() == [], f"{tag}: left {store.variables()}")


def main(tmp):
    check_arrays()
    check_tgl(tmp)
