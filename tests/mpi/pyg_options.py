"""MPI program: the sampling options of ddstore.pyg.NeighborSampler against brute force.

Run under mpiexec (inside ``timeout``) on 1-3 ranks, or in-process on one rank
(tests/test_pyg_options.py).  Width = all ranks, transports auto and rma (every other
member's lists read with MPI_Get):

- ``subgraph_type="bidirectional"``: with ``[-1, -1]`` the edge set of every batch is the
  brute-force 2-hop edge set plus its reverse (homogeneous; hetero by PyG's pairing of
  ``(a, r, b)`` with the unique ``(b, r', a)``), no pair twice; with fanouts the same
  draws as ``directional`` (same seed) plus their reverse;
- ``subgraph_type="induced"``: the sampled nodes are those of ``directional`` (same
  seed) and the edges exactly every stored edge between them, once each (homogeneous and
  hetero, repeated seeds), features byte-equal; its one C call (dds_induced_edges)
  byte for byte the Python path it replaced and the ordered brute force, for random node
  sets with repeats, lists of other members read one per batched read and more, the
  dense source map and the table, and its refusals;
- hetero temporal where one node type has no time attribute (PyG's rule: its nodes are
  always eligible): each seed's subgraph with ``[-1, -1]`` equals the brute force;
- ``ddstore.prefetch.prefetch(loader)``: the same batches in the same order as the
  plain loader (same seed), homogeneous and hetero;
- ``sample_direction="backward"`` over ``gs.build_backward()``'s out-lists: every drawn
  edge is a stored edge ``(u -> v)`` with ``u`` the node drawn for (``row``) and ``v``
  the neighbour (``col``), ``e_id`` the id as put, ``min(k, outdeg)`` distinct per node
  and hop, ``[-1, -1]`` exactly the brute-force out-BFS (homogeneous, hetero with a dict
  of fanouts), weighted (``[-1]`` takes every edge, with replacement zero weights
  never drawn, also after ``put_edge_weights``),
  features byte-equal; refusals (no out-lists, temporal); ``build_backward`` all or
  nothing (a failure on one rank in its last edge type leaves ``variables()`` as before);
  any exception reading the stored rows on one rank (OSError, RuntimeError, KeyError,
  MemoryError) agreed: the same error on every rank, nothing built;
- ``build_backward(keep_in_lists=False)``: the in-lists' variables removed, the
  backward batches byte-equal to those with the in-lists kept (uniform, weighted at put
  and by ``put_edge_weights``, bidirectional, hetero with one edge type dropped), COO /
  CSR / CSC as put, forward / induced / temporal / ``BidirectionalNeighborSampler`` /
  ``edge_ids`` refused, ``keep_in_lists`` checked and agreed, a failed build drops
  nothing, a failing enclosing transaction removes the out-lists and brings the
  in-lists back (same batches), a committing one drops them at its end;
- ``BidirectionalNeighborSampler`` (PyG's class over ours): ``[-1, -1]`` takes exactly
  every edge touching each hop's frontier, each once; ``disjoint=True`` (repeated seeds
  too): each seed's subgraph that ball, its nodes and edges once each, edges within
  their subgraph; with fanouts the same structure.
"""
import contextlib

import numpy as np
import torch
from mpi4py import MPI

from _harness import check, expect_error, run_main

import ddstore  # noqa: E402
from ddstore import pyg as dpyg  # noqa: E402
from ddstore.prefetch import prefetch  # noqa: E402
from ddstore.pyg._common import edge_var  # noqa: E402
from torch_geometric.data import Data, HeteroData  # noqa: E402
from torch_geometric.loader import LinkNeighborLoader, NeighborLoader  # noqa: E402
from torch_geometric.sampler import NodeSamplerInput  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
N, E = 36, 160
NT = {"a": 17, "b": 11}
ETS = ((("a", "ab", "b"), 50), (("b", "ba", "a"), 40), (("a", "aa", "a"), 45))


def make_homo():
    g = torch.Generator().manual_seed(11)
    return Data(x=torch.randn(N, 3, generator=g),
                edge_index=torch.randint(0, N, (2, E), generator=g))


def make_hetero(times=False):
    g = torch.Generator().manual_seed(12)
    h = HeteroData()
    for t, n in NT.items():
        h[t].x = torch.randn(n, 2, generator=g)
    if times:  # node-level time on "a" only: edge type ("b", "ba", "a") has none
        h["a"].time = torch.randint(0, 20, (NT["a"],), generator=g)
    for et, m in ETS:
        h[et].edge_index = torch.stack([torch.randint(0, NT[et[0]], (m,), generator=g),
                                        torch.randint(0, NT[et[2]], (m,), generator=g)])
    return h


def pairs_of(b, et=None):
    """The batch's edges of ``et`` as global (src, dst) pairs, in order."""
    s = b if et is None else b[et]
    st = b.n_id if et is None else b[et[0]].n_id
    dt = b.n_id if et is None else b[et[2]].n_id
    return list(zip(st[s.edge_index[0]].tolist(), dt[s.edge_index[1]].tolist()))


def hetero_khop(h, seeds, seed_type, hops, ok=None, backward=False):
    """Brute force, non-disjoint: per edge type the set of edge ids taken into each
    hop's new nodes, and the nodes reached per type.  A hop takes the frontier's
    in-edges (their sources are new), or with ``backward`` its out-edges (their
    destinations); ``ok(edge_type, e)``: whether edge ``e`` may be taken."""
    seen = {t: set() for t in NT}
    seen[seed_type] = set(seeds)
    frontier = {t: set() for t in NT}
    frontier[seed_type] = set(seeds)
    taken = {et: set() for et, _ in ETS}
    for _ in range(hops):
        new = {t: set() for t in NT}
        for et, _ in ETS:
            src, dst = h[et].edge_index.tolist()
            # (the frontier's end, the other end) of each edge, and their node types
            ends, near, far = ((zip(src, dst), et[0], et[2]) if backward else
                               (zip(dst, src), et[2], et[0]))
            for e, (v, u) in enumerate(ends):
                if v in frontier[near] and (ok is None or ok(et, e)):
                    taken[et].add(e)
                    if u not in seen[far]:
                        new[far].add(u)
        for t in NT:
            seen[t] |= new[t]
        frontier = new
    return taken, seen


def homo_bidirectional(fs, gs, data, tag):
    src, dst = data.edge_index.tolist()
    seeds = torch.tensor([3, 9, 9, 30])
    for nn in ([-1, -1], [2, 3]):
        outs = {}
        for sub in ("directional", "bidirectional"):
            smp = dpyg.NeighborSampler(gs, nn, seed=4, subgraph_type=sub)
            outs[sub] = next(iter(NeighborLoader((fs, gs), num_neighbors=nn,
                                                 input_nodes=seeds, batch_size=4,
                                                 neighbor_sampler=smp)))
        d, b = outs["directional"], outs["bidirectional"]
        what = f"{tag} homo bidirectional {nn}"
        # PyG's rule on local indices (a repeated seed has two positions)
        loc = set(zip(d.edge_index[0].tolist(), d.edge_index[1].tolist()))
        want_loc = loc | {(v, u) for u, v in loc}
        got_loc = list(zip(b.edge_index[0].tolist(), b.edge_index[1].tolist()))
        check(set(got_loc) == want_loc and len(got_loc) == len(want_loc),
              f"{what}: edges {sorted(got_loc)} != directional + reversed "
              f"{sorted(want_loc)}")
        dp, got = set(pairs_of(d)), pairs_of(b)
        check(torch.equal(b.n_id, d.n_id), f"{what}: nodes differ from directional")
        check(all((src[e], dst[e]) in ((u, v), (v, u)) for (u, v), e in
                  zip(got, b.e_id.tolist())), f"{what}: e_id is not the edge or its reverse")
        check(torch.equal(b.x, data.x[b.n_id]), f"{what}: features differ")
        if nn == [-1, -1]:
            taken = set()
            frontier, seen = set(seeds.tolist()), set(seeds.tolist())
            for _ in range(2):
                ids = [e for e in range(E) if dst[e] in frontier]
                taken |= {(src[e], dst[e]) for e in ids}
                frontier = {src[e] for e in ids} - seen
                seen |= frontier
            check(dp == taken, f"{what}: directional edges differ from brute force")
            check(set(got) == taken | {(v, u) for u, v in taken},
                  f"{what}: bidirectional edges differ from brute force")


def homo_induced(fs, gs, data, tag):
    src, dst = data.edge_index.tolist()
    for seeds in (torch.tensor([1, 5, 5, 20, 33]), torch.arange(N)):
        outs = {}
        for sub in ("directional", "induced"):
            smp = dpyg.NeighborSampler(gs, [3, 2], seed=8, subgraph_type=sub)
            outs[sub] = next(iter(NeighborLoader((fs, gs), num_neighbors=[3, 2],
                                                 input_nodes=seeds, batch_size=len(seeds),
                                                 neighbor_sampler=smp)))
        d, b = outs["directional"], outs["induced"]
        what = f"{tag} homo induced seeds {len(seeds)}"
        check(torch.equal(b.n_id, d.n_id), f"{what}: nodes differ from directional")
        nodes = set(b.n_id.tolist())
        want = sorted(e for e in range(E) if src[e] in nodes and dst[e] in nodes)
        check(sorted(b.e_id.tolist()) == want, f"{what}: edge ids {sorted(b.e_id.tolist())} "
                                               f"!= brute force {want}")
        check(pairs_of(b) == [(src[e], dst[e]) for e in b.e_id.tolist()],
              f"{what}: edge_index is not the stored edges of e_id")
        first = {}
        for i, v in enumerate(b.n_id.tolist()):
            first.setdefault(v, i)
        check(all(first[b.n_id[i].item()] == i for i in b.edge_index.view(-1).tolist()),
              f"{what}: an edge names a repeated seed's later position")
        check(torch.equal(b.x, data.x[b.n_id]), f"{what}: features differ")
        # no per-hop counts, as PyG's induced path (nodes were kept, edges dropped)
        check("num_sampled_nodes" not in b and "num_sampled_edges" not in b,
              f"{what}: per-hop counts {sorted(k for k in b.keys() if 'sampled' in k)}")
    # LinkNeighborLoader: the same induced rule around seed links
    smp = dpyg.NeighborSampler(gs, [2], seed=2, subgraph_type="induced")
    b = next(iter(LinkNeighborLoader((fs, gs), num_neighbors=[2], batch_size=6,
                                     edge_label_index=(None, data.edge_index[:, :6]),
                                     neighbor_sampler=smp)))
    nodes = set(b.n_id.tolist())
    want = sorted(e for e in range(E) if src[e] in nodes and dst[e] in nodes)
    check(sorted(b.e_id.tolist()) == want, f"{tag} link induced: edges differ")
    check(pairs_of(b) == [(src[e], dst[e]) for e in b.e_id.tolist()],
          f"{tag} link induced: edge_index is not the stored edges")


def python_induced(smp, et, dst_nodes, src_nodes):
    """The Python path that dds_induced_edges replaced (every destination's whole list
    read by the C sampler with k=-1, filtered in numpy): the reference, byte for byte."""
    empty = np.zeros(0, dtype=np.int64)
    if dst_nodes.shape[0] == 0 or src_nodes.shape[0] == 0:
        return empty, empty, empty
    c, handle = smp._handle(et)
    src_ids, src_first = np.unique(src_nodes, return_index=True)
    _, dst_first = np.unique(dst_nodes, return_index=True)
    dst_pos = np.sort(dst_first)
    dst = np.ascontiguousarray(dst_nodes[dst_pos])
    cap = int((c.indptr[dst + 1] - c.indptr[dst]).sum())
    if not cap:
        return empty, empty, empty
    r, nbr, eid = handle.sample(dst, None, -1, 0, 0, cap)
    at = np.minimum(np.searchsorted(src_ids, nbr), src_ids.shape[0] - 1)
    hit = src_ids[at] == nbr
    return src_first[at[hit]], dst_pos[r[hit]], eid[hit]


def brute_induced(src, dst, dst_nodes, src_nodes):
    """Brute force from the edge list: for each destination's first occurrence, in
    order, its edges by edge id (the stored order of untimed lists) whose source is in
    ``src_nodes``: (source's first position, destination's position, edge id)."""
    sfirst, out = {}, []
    for i, v in enumerate(src_nodes.tolist()):
        sfirst.setdefault(v, i)
    seen = set()
    for i, v in enumerate(dst_nodes.tolist()):
        if v in seen:
            continue
        seen.add(v)
        out += [(sfirst[src[e]], i, e) for e in range(len(dst))
                if dst[e] == v and src[e] in sfirst]
    return out


def induced_core(gs, data, hgs, h, tag):
    """dds_induced_edges (the induced sampler's one C call) against the Python path it
    replaced and the brute force, byte for byte: homogeneous and every hetero edge type,
    node sets with repeats, empty ones, one lists' worth, all nodes; lists of other
    members fetched one list per read, a few per read and all in one; the dense map and
    the table (a source bound too large for a dense map); its refusals."""
    import ddstore.pyg.sampler as sampler_mod
    rng = np.random.default_rng(5 + size)
    cases = [(None, data.edge_index.tolist(), N, N)] + [
        (et, h[et].edge_index.tolist(), NT[et[0]], NT[et[2]]) for et, _ in ETS]
    chunk0 = sampler_mod.INDUCED_CHUNK_ENTRIES
    try:
        for chunk in (1, 7, chunk0):
            sampler_mod.INDUCED_CHUNK_ENTRIES = chunk
            for et, (src, dst), ns, nd in cases:
                smp = dpyg.NeighborSampler(gs if et is None else hgs, [2], seed=1,
                                           subgraph_type="induced")
                sets = [(np.arange(nd), np.arange(ns)), (np.zeros(0, np.int64),
                                                         np.arange(ns)),
                        (np.arange(nd), np.zeros(0, np.int64))]
                for _ in range(4):
                    sets.append((rng.integers(0, nd, int(rng.integers(1, 2 * nd))),
                                 rng.integers(0, ns, int(rng.integers(1, 2 * ns)))))
                for dn, sn in sets:
                    dn, sn = dn.astype(np.int64), sn.astype(np.int64)
                    if et is None or et[0] == et[2]:  # one node set: the same array
                        sn = dn if dn.shape[0] else sn
                    what = f"{tag} induced core {et} chunk {chunk} n {len(dn)}/{len(sn)}"
                    got = smp._induced_edges(et, dn, sn)
                    want = python_induced(smp, et, dn, sn)
                    check(all(g.dtype == np.int64 and np.array_equal(g, w)
                              for g, w in zip(got, want)),
                          f"{what}: {[g.tolist() for g in got]} != the Python path "
                          f"{[w.tolist() for w in want]}")
                    brute = brute_induced(src, dst, dn, sn) if len(dn) and len(sn) else []
                    check(list(zip(*(g.tolist() for g in got))) == brute,
                          f"{what}: differs from the brute force {brute}")
                    if len(dn) and len(sn):  # the table instead of the dense map
                        _, handle = smp._handle(et)
                        big = handle.induced(np.ascontiguousarray(dn), np.ascontiguousarray(
                            sn), 1 << 30, chunk)
                        check(all(np.array_equal(g, w) for g, w in zip(big, want)),
                              f"{what}: the table differs from the dense map")
    finally:
        sampler_mod.INDUCED_CHUNK_ENTRIES = chunk0
    smp = dpyg.NeighborSampler(gs, [2], subgraph_type="induced")
    _, handle = smp._handle(None)
    nodes = np.arange(N, dtype=np.int64)
    expect_error(ddstore.DDStoreIndexError, "source node 36 (position 2) out of range "
                 "[0, 36)", handle.induced, nodes, np.array([1, 2, N], np.int64), N, 4,
                 what=f"{tag} induced core: source out of range")
    expect_error(ddstore.DDStoreIndexError, "node -1 (position 0) out of range [0, 36)",
                 handle.induced, np.array([-1], np.int64), nodes, N, 4,
                 what=f"{tag} induced core: destination out of range")
    busy = int(np.argmax(np.diff(gs.sampled_lists(None).indptr)))
    expect_error(ddstore.DDStoreIndexError, ("holds source node", "outside [0, 1)"),
                 handle.induced, np.array([busy], np.int64), np.zeros(1, np.int64), 1, 4,
                 what=f"{tag} induced core: a stored source beyond num_src")
    expect_error(ddstore.DDStoreValueError, "chunk=0 >= 1", handle.induced, nodes, nodes,
                 N, 0, what=f"{tag} induced core: chunk 0")


def hetero_options(fs, gs, h, tag):
    seeds = [0, 4, 9]  # distinct: a repeated seed's positions are apart (homo case)
    nn = {et: [-1, -1] for et, _ in ETS}
    outs = {}
    for sub in ("directional", "bidirectional"):
        smp = dpyg.NeighborSampler(gs, nn, seed=1, subgraph_type=sub)
        outs[sub] = next(iter(NeighborLoader((fs, gs), num_neighbors=nn, batch_size=3,
                                             input_nodes=("b", torch.tensor(seeds)),
                                             neighbor_sampler=smp)))
    d, b = outs["directional"], outs["bidirectional"]
    taken, seen = hetero_khop(h, set(seeds), "b", 2)
    dp = {}
    for et, _ in ETS:
        src, dst = h[et].edge_index.tolist()
        dp[et] = {(src[e], dst[e]) for e in taken[et]}
        check(set(pairs_of(d, et)) == dp[et], f"{tag} hetero directional {et}: edges")
    for t in NT:
        check(set(b[t].n_id.tolist()) == seen[t], f"{tag} hetero bidirectional: nodes {t}")
        check(torch.equal(b[t].x, h[t].x[b[t].n_id]), f"{tag} hetero: features {t}")
    rev = lambda ps: {(v, u) for u, v in ps}  # noqa: E731
    ab, ba, aa = (et for et, _ in ETS)
    want = {ab: dp[ab] | rev(dp[ba]), ba: dp[ba] | rev(dp[ab]), aa: dp[aa] | rev(dp[aa])}
    for et in want:
        got = pairs_of(b, et)
        check(set(got) == want[et] and len(got) == len(want[et]),
              f"{tag} hetero bidirectional {et}: {sorted(got)} != {sorted(want[et])}")
    # induced: every stored edge of every type between the sampled nodes
    nn = {et: [2, 2] for et, _ in ETS}
    outs = {}
    for sub in ("directional", "induced"):
        smp = dpyg.NeighborSampler(gs, nn, seed=6, subgraph_type=sub)
        outs[sub] = next(iter(NeighborLoader((fs, gs), num_neighbors=nn, batch_size=4,
                                             input_nodes=("a", torch.tensor([2, 2, 7, 16])),
                                             neighbor_sampler=smp)))
    d, b = outs["directional"], outs["induced"]
    for t in NT:
        check(torch.equal(b[t].n_id, d[t].n_id), f"{tag} hetero induced: nodes {t}")
        check("num_sampled_nodes" not in b[t], f"{tag} hetero induced: per-hop counts")
    for et, m in ETS:
        src, dst = h[et].edge_index.tolist()
        ns, nd = set(b[et[0]].n_id.tolist()), set(b[et[2]].n_id.tolist())
        want = sorted(e for e in range(m) if src[e] in ns and dst[e] in nd)
        got = b[et].e_id.tolist() if "e_id" in b[et] else []
        check(sorted(got) == want, f"{tag} hetero induced {et}: {sorted(got)} != {want}")
        check(pairs_of(b, et) == [(src[e], dst[e]) for e in got],
              f"{tag} hetero induced {et}: edge_index is not the stored edges")


def hetero_partly_timed(store, h, tag):
    """Node-level time on "a" only: ("b", "ba", "a") is stored without times and its
    edges are always eligible (PyG's rule); the others need time[src] <= seed time."""
    fs, gs = dpyg.from_hetero(store, h, name="pt", time_attr="time")
    seeds = torch.tensor([0, 3, 3, 10])
    seed_t = torch.tensor([19, 5, 12, 0])
    for sub in ("directional", "bidirectional"):
        smp = dpyg.NeighborSampler(gs, [-1, -1], time_attr="time", seed=2,
                                   subgraph_type=sub)
        b = next(iter(NeighborLoader((fs, gs), num_neighbors=[-1, -1], batch_size=4,
                                     input_nodes=("b", seeds), input_time=seed_t,
                                     time_attr="time", neighbor_sampler=smp)))
        if sub == "bidirectional":  # nodes as directional, edges made bidirectional
            check(all(torch.equal(b[t].n_id, keep[t]) for t in NT),
                  f"{tag} partly timed bidirectional: nodes differ")
            continue
        keep = {t: b[t].n_id for t in NT}
        got = {}
        for et, _ in ETS:
            if "e_id" not in b[et]:
                continue
            src, dst = h[et].edge_index
            e = b[et].e_id
            check(torch.equal(b[et[0]].n_id[b[et].edge_index[0]], src[e]) and
                  torch.equal(b[et[2]].n_id[b[et].edge_index[1]], dst[e]),
                  f"{tag} partly timed {et}: edge_index is not the stored edges")
            root = b[et[2]].batch[b[et].edge_index[1]]
            for r, eid in zip(root.tolist(), e.tolist()):
                got.setdefault(r, []).append((et, eid))
        time_a = h["a"].time
        untimed_taken = 0
        for i, (s, T) in enumerate(zip(seeds.tolist(), seed_t.tolist())):
            def ok(et, e, T=T):
                return et[0] != "a" or int(time_a[h[et].edge_index[0, e]]) <= T
            want, frontier, seen = [], [("b", s)], {("b", s)}
            for _ in range(2):
                nxt = []
                for et, _ in ETS:
                    es, ed = h[et].edge_index.tolist()
                    for _, v in [f for f in frontier if f[0] == et[2]]:
                        for e in range(len(es)):
                            if ed[e] == v and ok(et, e):
                                want.append((et, e))
                                untimed_taken += et[0] == "b"
                                if (et[0], es[e]) not in seen:
                                    seen.add((et[0], es[e]))
                                    nxt.append((et[0], es[e]))
                frontier = nxt
            check(sorted(got.get(i, [])) == sorted(want),
                  f"{tag} partly timed seed {i}: subgraph differs from brute force")
        check(untimed_taken > 0, f"{tag} partly timed: the case took no untimed edge")
        for t in NT:
            check(torch.equal(b[t].x, h[t].x[b[t].n_id]), f"{tag} partly timed: x {t}")


def same_batches(xs, ys):
    if len(xs) != len(ys):
        return False
    for a, b in zip(xs, ys):
        sa, sb = a.to_dict(), b.to_dict()
        if sa.keys() != sb.keys():
            return False
        for k in sa:
            va, vb = sa[k], sb[k]
            if isinstance(va, torch.Tensor):
                if va.dtype != vb.dtype or va.shape != vb.shape or \
                        va.numpy().tobytes() != vb.numpy().tobytes():
                    return False
            elif va != vb:
                return False
    return True


def prefetched(fs, gs, data, h, hfs, hgs, tag):
    for seed in (5, None):
        runs = []
        for wrap in (False, True):
            torch.manual_seed(0)
            smp = dpyg.NeighborSampler(gs, [3, 2], seed=seed)
            loader = NeighborLoader((fs, gs), num_neighbors=[3, 2], batch_size=7,
                                    input_nodes=torch.arange(N), shuffle=True,
                                    neighbor_sampler=smp)
            runs.append(list(prefetch(loader, 2) if wrap else loader))
        check(len(runs[0]) == 6 and same_batches(runs[0], runs[1]),
              f"{tag} prefetch seed={seed}: batches differ from the plain loader")
    runs = []
    for wrap in (False, True):
        torch.manual_seed(1)
        smp = dpyg.NeighborSampler(hgs, [2, 2], seed=3, subgraph_type="induced")
        loader = NeighborLoader((hfs, hgs), num_neighbors=[2, 2], batch_size=4,
                                input_nodes=("a", torch.arange(NT["a"])), shuffle=True,
                                neighbor_sampler=smp)
        runs.append([b.to_homogeneous() for b in (prefetch(loader, 3) if wrap else loader)])
    check(len(runs[0]) == 5 and same_batches(runs[0], runs[1]),
          f"{tag} prefetch hetero: batches differ from the plain loader")


def backward_batch(gs, fs, nn, seeds, **kw):
    smp = dpyg.NeighborSampler(gs, nn, sample_direction="backward", **kw)
    return next(iter(NeighborLoader((fs, gs), num_neighbors=nn, input_nodes=seeds,
                                    batch_size=len(seeds[1] if isinstance(seeds, tuple)
                                                   else seeds),
                                    neighbor_sampler=smp)))


def homo_backward(store, data, tag):
    """Homogeneous backward sampling against brute force (out-edges)."""
    src, dst = data.edge_index.tolist()
    fs, gs = dpyg.from_pyg(store, data, name="bw")
    expect_error(ddstore.DDStoreValueError, ("holds no out-lists of edge type(s) None",
                                             "gs.build_backward()"),
                 dpyg.NeighborSampler, gs, [2], sample_direction="backward",
                 what=f"{tag} backward without out-lists")
    check(gs.build_backward() == [None] and gs.has_backward(), f"{tag} build_backward")
    check(gs.build_backward() == [], f"{tag} build_backward again: nothing to build")
    outdeg = [src.count(u) for u in range(N)]
    seeds = torch.tensor([3, 9, 9, 30])
    for nn in ([3, 2], [-1, -1], [1, 4]):
        b = backward_batch(gs, fs, nn, seeds, seed=5)
        what = f"{tag} homo backward {nn}"
        e = b.e_id
        check(torch.equal(b.n_id[b.edge_index[0]], data.edge_index[0][e]) and
              torch.equal(b.n_id[b.edge_index[1]], data.edge_index[1][e]),
              f"{what}: (n_id[row], n_id[col]) is not the stored edge of e_id")
        check(b.x.numpy().tobytes() == data.x[b.n_id].numpy().tobytes(),
              f"{what}: features differ")
        # per hop: each frontier position draws min(k, outdeg) distinct out-edges
        lo_n, lo_e, ok = 0, 0, True
        for hop, (k, m) in enumerate(zip(nn, b.num_sampled_edges)):
            n_front = b.num_sampled_nodes[hop]
            rows = b.edge_index[0, lo_e:lo_e + m].tolist()
            eids = e[lo_e:lo_e + m].tolist()
            for pos in range(lo_n, lo_n + n_front):
                mine = [x for r, x in zip(rows, eids) if r == pos]
                u = int(b.n_id[pos])
                want = outdeg[u] if k < 0 else min(k, outdeg[u])
                ok &= len(mine) == want and len(set(mine)) == want and \
                    all(src[x] == u for x in mine)
            ok &= all(lo_n <= r < lo_n + n_front for r in rows)
            lo_n, lo_e = lo_n + n_front, lo_e + m
        check(ok, f"{what}: not min(k, outdeg) distinct out-edges per frontier node")
        if nn == [-1, -1]:
            taken, frontier, seen = set(), set(seeds.tolist()), set(seeds.tolist())
            for _ in range(2):
                ids = {x for x in range(E) if src[x] in frontier}
                taken |= ids
                frontier = {dst[x] for x in ids} - seen
                seen |= frontier
            check(set(e.tolist()) == taken and set(b.n_id.tolist()) == seen,
                  f"{what}: edges/nodes differ from the brute-force out-BFS")
    # weighted, with weights at put and put_edge_weights: [-1, -1] takes every out-edge
    # (pyg-lib's rule: the weights play no part); with replacement never one of weight 0
    w = (torch.arange(E) % 3).double()  # every third edge weight 0
    for late in (False, True):
        name = f"bww{int(late)}"
        wfs = dpyg.FeatureStore(store, name)
        wfs.put_tensor(data.x, group_name=None, attr_name="x")
        wfs.put_tensor(w, group_name=dpyg.EDGES, attr_name="w")
        wgs = dpyg.GraphStore(store, name, weight_attr=None if late else "w")
        wgs.put_edge_index(data.edge_index, edge_type=None, layout="coo", size=(N, N))
        wgs.build_backward()
        if late:
            wgs.put_edge_weights("w")
        b = backward_batch(wgs, wfs, [-1, -1], seeds, weight_attr="w", seed=3)
        what = f"{tag} weighted backward (weights {'after' if late else 'at put'})"
        ids = b.e_id.tolist()
        reach = {}
        for positive in (False, True):  # the 2-hop out-BFS, over the positive edges or all
            taken, frontier, seen = set(), set(seeds.tolist()), set(seeds.tolist())
            for _ in range(2):
                got = {x for x in range(E) if src[x] in frontier and
                       (w[x] > 0 or not positive)}
                taken |= got
                frontier = {dst[x] for x in got} - seen
                seen |= frontier
            reach[positive] = taken
        check(set(ids) == reach[False], f"{what}: [-1, -1] edges differ from brute force")
        r = backward_batch(wgs, wfs, [3, 3], seeds, weight_attr="w", seed=3, replace=True)
        ids = set(r.e_id.tolist())
        check(ids and all(int(w[x]) != 0 for x in ids) and ids <= reach[True],
              f"{what}: with replacement, a zero weight drawn or an edge off the "
              f"positive-weight BFS")
        before = store.variables()
        wgs.remove_edge_index(None, "coo")
        gone = set(before) - set(store.variables())
        check(gone == {v for v in before if v.startswith(f"{name}/csc/") or
                       v.startswith(f"{name}/out/")} and any("/out/" in v for v in gone),
              f"{what}: remove_edge_index left out-lists: {sorted(gone)}")
    # BidirectionalNeighborSampler: PyG's class over ours
    smp = dpyg.BidirectionalNeighborSampler(gs, [-1, -1], seed=1)
    b = next(iter(NeighborLoader((fs, gs), num_neighbors=[-1, -1], batch_size=3,
                                 input_nodes=torch.tensor([0, 5, 7]),
                                 neighbor_sampler=smp)))
    seen, frontier, taken = {0, 5, 7}, {0, 5, 7}, set()
    for _ in range(2):
        es = {x for x in range(E) if src[x] in frontier or dst[x] in frontier}
        taken |= es
        frontier = {y for x in es for y in (src[x], dst[x])} - seen
        seen |= frontier
    ids = b.e_id.tolist()
    check(sorted(ids) == sorted(taken), f"{tag} BidirectionalNeighborSampler [-1, -1]: "
                                        f"edges differ from brute force (each once)")
    check(sorted(b.n_id.tolist()) == sorted(seen), f"{tag} BidirectionalNeighborSampler: "
                                                   f"nodes differ")
    check(torch.equal(b.n_id[b.edge_index[0]], data.edge_index[0][b.e_id]) and
          torch.equal(b.n_id[b.edge_index[1]], data.edge_index[1][b.e_id]),
          f"{tag} BidirectionalNeighborSampler: edge_index is not the stored edges")
    check(b.x.numpy().tobytes() == data.x[b.n_id].numpy().tobytes(),
          f"{tag} BidirectionalNeighborSampler: features differ")
    b = next(iter(NeighborLoader((fs, gs), num_neighbors=[2, 2], batch_size=3,
                                 input_nodes=torch.tensor([0, 5, 7]), neighbor_sampler=
                                 dpyg.BidirectionalNeighborSampler(gs, [2, 2], seed=1))))
    check(set(b.e_id.tolist()) <= taken and torch.equal(
        b.n_id[b.edge_index[0]], data.edge_index[0][b.e_id]),
        f"{tag} BidirectionalNeighborSampler [2, 2]: not stored edges of the 2-hop ball")
    # disjoint (issue 38 item 3): every seed's own subgraph, repeated seeds apart
    seeds = torch.tensor([0, 5, 7, 5])
    for nn in ([-1, -1], [2, 2]):
        smp = dpyg.BidirectionalNeighborSampler(gs, nn, disjoint=True, seed=1)
        b = next(iter(NeighborLoader((fs, gs), num_neighbors=nn, batch_size=4,
                                     input_nodes=seeds, neighbor_sampler=smp)))
        bad = disjoint_bidirectional_problems(
            b.n_id, b.edge_index[0], b.edge_index[1], b.e_id, b.batch, src, dst,
            seeds.tolist(), 2, exact=nn == [-1, -1])
        check(not bad, f"{tag} BidirectionalNeighborSampler {nn} disjoint: {bad[:3]}")
        check(b.x.numpy().tobytes() == data.x[b.n_id].numpy().tobytes(),
              f"{tag} BidirectionalNeighborSampler {nn} disjoint: features differ")


def disjoint_bidirectional_problems(node, row, col, edge, batch, src, dst, seeds, hops,
                                    exact=True):
    """What is wrong with a disjoint ``BidirectionalNeighborSampler`` output (``node``,
    ``row``, ``col``, ``edge``, ``batch`` tensors) for the graph ``src -> dst`` (lists)
    and ``seeds``: each seed's subgraph ``g`` starts at position ``g`` with its seed,
    holds each node once, every edge once, between nodes of its own subgraph with the
    stored ends; ``exact`` (fanouts -1): subgraph ``g`` is the brute force's: every edge
    touching each hop's frontier (in- or out-edge), its nodes the ball they reach."""
    node, row, col = node.tolist(), row.tolist(), col.tolist()
    edge, batch = edge.tolist(), batch.tolist()
    bad = []
    if batch[:len(seeds)] != list(range(len(seeds))) or node[:len(seeds)] != seeds:
        bad.append(f"seeds not first: {node[:len(seeds)]} {batch[:len(seeds)]}")
    nodes = [(g, v) for g, v in zip(batch, node)]
    if len(set(nodes)) != len(nodes):
        bad.append("a node twice in one subgraph")
    edges = []
    for r, c, e in zip(row, col, edge):
        if batch[r] != batch[c] or (node[r], node[c]) != (src[e], dst[e]):
            bad.append(f"edge {e}: ({node[r]}, {node[c]}) of subgraphs {batch[r]}, "
                       f"{batch[c]}")
        edges.append((batch[r], e))
    if len(set(edges)) != len(edges):
        bad.append("an edge twice in one subgraph")
    for g, s in enumerate(seeds) if exact else ():
        seen, frontier, taken = {s}, {s}, set()
        for _ in range(hops):
            es = {x for x in range(len(src)) if src[x] in frontier or dst[x] in frontier}
            taken |= es
            frontier = {y for x in es for y in (src[x], dst[x])} - seen
            seen |= frontier
        got_nodes = {v for h, v in nodes if h == g}
        got_edges = {e for h, e in edges if h == g}
        if got_nodes != seen or got_edges != taken:
            bad.append(f"subgraph {g} (seed {s}): nodes {sorted(got_nodes)} edges "
                       f"{sorted(got_edges)}, brute force {sorted(seen)} {sorted(taken)}")
    return bad


@contextlib.contextmanager
def reads_fail_on(store, fails, error=None, on=0):
    """Within: ``store.get_range`` of the variables ``fails(name)`` selects raises on rank
    ``on`` only (a failure of one rank in the middle of a collective build): the
    exception ``error()`` makes (default: a DDStoreIndexError "injected read
    failure")."""
    real = store.get_range

    def failing(name, *a, **k):
        if fails(name):
            raise (error or (lambda: ddstore.DDStoreIndexError("injected read failure")))()
        return real(name, *a, **k)
    if rank == on:
        store.get_range = failing
    try:
        yield
    finally:
        if rank == on:
            del store.get_range


def backward_read_failures(store, data, tag):
    """Issue 35: ``gs.build_backward()`` where reading the reversed columns (the stored
    in-lists' rows) raises on one rank only -- an OSError, a RuntimeError, a KeyError, a
    MemoryError, any exception, not a list of types (an OSError there hung the other
    ranks): every rank raises the same agreed error naming the failing rank and what it
    raised (DDStoreMemoryError for the MemoryError), the failing rank's exception is its
    ``__cause__``, ``store.variables()`` is what it was before, nothing is built; then
    the same call succeeds."""
    fs, gs = dpyg.from_pyg(store, data, name="brf")
    on = size - 1  # the last rank (rank 0 too, on one rank)
    for make, cls in ((lambda: OSError(5, "Input/output error"), ddstore.DDStoreValueError),
                      (lambda: RuntimeError("reader thread died"), ddstore.DDStoreValueError),
                      (lambda: KeyError("brf/csc/_/coo/nbr"), ddstore.DDStoreValueError),
                      (lambda: MemoryError("Unable to allocate 8 EiB"),
                       ddstore.DDStoreMemoryError)):
        exc = make()
        what = f"{tag} build_backward, {type(exc).__name__} on rank {on} reading its rows"
        raised = []

        def build():
            try:
                return gs.build_backward()
            except Exception as e:
                raised.append(e)
                raise
        with reads_fail_on(store, lambda name: name.startswith("brf/csc/") and
                                 name.endswith("/nbr"), make, on=on):
            expect_error(cls, [f"rank {on}: ", f"{type(exc).__name__}: {exc}"], build,
                         agree=True, agreed=True, store=store, what=what)
        if rank == on and raised:
            check(type(raised[0].__cause__) is type(exc) and
                  str(raised[0].__cause__) == str(exc),
                  f"{what}: the local exception is not the cause: "
                  f"{raised[0].__cause__!r}")
        check(not gs.has_backward(), f"{what}: out-lists left")
    check(gs.build_backward() == [None] and gs.has_backward(),
          f"{tag} build_backward after the injected failures")


def hetero_backward(store, h, tag):
    fs, gs = dpyg.from_hetero(store, h, name="hbw")
    # all or nothing: the last edge type's build fails on rank 0 only
    aa = ETS[2][0]
    with reads_fail_on(store, lambda name: "/csc/" in name and "aa" in name and
                             name.endswith("/nbr")):
        expect_error(ddstore.DDStoreError, "injected read failure", gs.build_backward,
                     agree=True, store=store, what=f"{tag} build_backward failing")
    check(not any(gs.has_backward(et) for et, _ in ETS),
          f"{tag} build_backward failed but some out-lists remain")
    expect_error(dpyg.UnknownAttributeError, "no edge type ('a', 'zz', 'b')",
                 gs.build_backward, [ETS[0][0], ("a", "zz", "b")], agree=True,
                 store=store, what=f"{tag} build_backward unknown type")
    check(gs.build_backward([ETS[0][0]]) == [ETS[0][0]] and
          gs.build_backward() == [ETS[1][0], aa], f"{tag} build_backward by type")
    nn = {et: [-1, -1] for et, _ in ETS}
    nn[ETS[1][0]] = [0, 0]  # keyed by the stored edge types, as PyG's getter
    seeds = [2, 7, 16]  # distinct (a repeated seed draws once per position)
    b = backward_batch(gs, fs, nn, ("a", torch.tensor(seeds)), seed=2)
    taken, seen = hetero_khop(h, seeds, "a", 2, ok=lambda et, e: nn[et][0] != 0,
                              backward=True)
    for et, _ in ETS:
        got = b[et].e_id if "e_id" in b[et] else torch.zeros(0, dtype=torch.long)
        check(set(got.tolist()) == taken[et] and len(got) == len(taken[et]),
              f"{tag} hetero backward {et}: edges differ from brute force")
        if len(got):
            check(torch.equal(b[et[0]].n_id[b[et].edge_index[0]], h[et].edge_index[0][got])
                  and torch.equal(b[et[2]].n_id[b[et].edge_index[1]],
                                  h[et].edge_index[1][got]),
                  f"{tag} hetero backward {et}: edge_index is not the stored edges")
    for t in NT:
        check(set(b[t].n_id.tolist()) == seen[t] and
              b[t].x.numpy().tobytes() == h[t].x[b[t].n_id].numpy().tobytes(),
              f"{tag} hetero backward: nodes/features of {t}")
    # fanouts: min(k, outdeg) per source node, any direction of the batch orientation
    b = backward_batch(gs, fs, {et: [2] for et, _ in ETS}, ("a", torch.tensor(seeds)),
                       seed=9)
    for et in (ETS[0][0], aa):
        src = h[et].edge_index[0].tolist()
        rows = b[et].edge_index[0].tolist()
        ok = all(rows.count(p) == min(2, src.count(int(b["a"].n_id[p])))
                 for p in range(len(seeds)))
        check(ok, f"{tag} hetero backward {et}: not min(2, outdeg) per seed")
    expect_error(ddstore.DDStoreValueError,
                 "homogeneous graphs only", dpyg.BidirectionalNeighborSampler, gs, [2],
                 what=f"{tag} bidirectional sampler hetero")
    tfs, tgs = dpyg.from_hetero(store, make_hetero(times=True), name="hbwt",
                                time_attr="time")
    tgs.build_backward()
    expect_error(ddstore.DDStoreValueError, "PyG does not define temporal backward",
                 dpyg.NeighborSampler, tgs, [2], time_attr="time",
                 sample_direction="backward", also=NotImplementedError,
                 what=f"{tag} temporal backward")
    check(dpyg.NeighborSampler(tgs, [2], sample_direction="backward").sample_direction
          == "backward", f"{tag} backward without time on a temporal store")


def put_weighted(store, data, name, w, at_put=True, **kw):
    fs = dpyg.FeatureStore(store, name)
    fs.put_tensor(data.x, group_name=None, attr_name="x")
    fs.put_tensor(w, group_name=dpyg.EDGES, attr_name="w")
    gs = dpyg.GraphStore(store, name, weight_attr="w" if at_put else None)
    gs.put_edge_index(data.edge_index, edge_type=None, layout="coo", size=(N, N))
    return fs, gs


def backward_alone(store, data, h, tag):
    """``build_backward(keep_in_lists=False)``: the in-lists' variables gone, the
    out-lists alone giving the same backward batches (byte for byte, also weighted,
    bidirectional, hetero) and the edge index as put; whatever reads in-lists refused;
    its argument agreed; a failed build drops nothing."""
    kfs, kgs = dpyg.from_pyg(store, data, name="bk")  # in-lists kept: the reference
    kgs.build_backward()
    fs, gs = dpyg.from_pyg(store, data, name="bd")
    old = dpyg.NeighborSampler(gs, [2], seed=1)  # built before the drop
    # argument checks, agreed: nothing built, nothing dropped
    before = store.variables()
    expect_error(ddstore.DDStoreValueError, "keep_in_lists must be True or False, got 0",
                 gs.build_backward, keep_in_lists=0, agree=True, agreed=True,
                 store=store, what=f"{tag} keep_in_lists not a bool")
    if size > 1:
        expect_error(ddstore.DDStoreValueError, "keep_in_lists", gs.build_backward,
                     keep_in_lists=rank == 0, agree=True, agreed=True, store=store,
                     what=f"{tag} keep_in_lists differs between ranks")
    # a failure on one rank in the build: nothing dropped, forward sampling still works
    with reads_fail_on(store, lambda name: name.startswith("bd/csc/") and
                             name.endswith("/nbr")):
        expect_error(ddstore.DDStoreError, "injected read failure", gs.build_backward,
                     keep_in_lists=False, agree=True, store=store,
                     what=f"{tag} build_backward(keep_in_lists=False) failing")
    check(store.variables() == before and not gs.has_backward() and
          not gs.sampled_lists(None).dropped, f"{tag} failed drop: state changed")
    check(next(iter(NeighborLoader((fs, gs), num_neighbors=[2], batch_size=3,
                                   input_nodes=torch.tensor([1, 2, 3]),
                                   neighbor_sampler=dpyg.NeighborSampler(gs, [2])))
               ).e_id.numel() > 0, f"{tag} failed drop: forward sampling broken")
    check(gs.build_backward(keep_in_lists=False) == [None] and gs.has_backward(),
          f"{tag} build_backward(keep_in_lists=False)")
    after = store.variables()
    check(not any(v.startswith("bd/csc/") for v in after) and
          {v for v in after if v.startswith("bd/out/")} ==
          {"bd/out/_/coo/nbr", "bd/out/_/coo/eid"} and
          set(before) - set(after) == {"bd/csc/_/coo/nbr", "bd/csc/_/coo/eid"},
          f"{tag} keep_in_lists=False: variables {after}")
    out_bytes = sum(store.nbytes(v) for v in after if v.startswith("bd/out/")) + \
        gs.sampled_lists(None, backward=True).indptr.nbytes
    check(gs.csc_bytes() == out_bytes and gs.build_backward(keep_in_lists=False) == [],
          f"{tag} keep_in_lists=False: bytes {gs.csc_bytes()} are not the out-lists' "
          f"{out_bytes}, or built again")
    # PyG's interface, as put
    ei = gs.get_edge_index(None, "coo")
    check(ei[0].numpy().tobytes() == data.edge_index[0].numpy().tobytes() and
          ei[1].numpy().tobytes() == data.edge_index[1].numpy().tobytes(),
          f"{tag} dropped in-lists: COO is not the edge index as put")
    for conv in ("coo", "csr", "csc"):
        got, want = getattr(gs, conv)(), getattr(kgs, conv)()
        check(all((g is None and w is None) or (g.dtype == w.dtype and g.numpy().tobytes()
                                                 == w.numpy().tobytes())
                  for g, w in zip(got, want)),
              f"{tag} dropped in-lists: {conv}() differs from the kept store's")
    check(gs.num_edges() == E and gs.node_counts() == kgs.node_counts() and
          [(a.edge_type, a.layout, a.size) for a in gs.get_all_edge_attrs()] ==
          [(a.edge_type, a.layout, a.size) for a in kgs.get_all_edge_attrs()],
          f"{tag} dropped in-lists: num_edges / node_counts / edge attrs")
    # backward batches byte-equal to the kept store's
    seeds = torch.tensor([3, 9, 9, 30, 0])
    for nn, sub in (([3, 2], "directional"), ([-1, -1], "directional"),
                    ([2, 4], "bidirectional")):
        got, want = (backward_batch(g, f, nn, seeds, seed=7, subgraph_type=sub)
                     for g, f in ((gs, fs), (kgs, kfs)))
        check(same_batches([got], [want]), f"{tag} dropped in-lists: backward {nn} {sub} "
                                           f"batch differs from the in-lists kept")
    # refused: whatever reads the in-lists
    frag = ("holds none of edge type(s) None", "build_backward(keep_in_lists=False)",
            "sample_direction='backward'")
    expect_error(ddstore.DDStoreValueError, frag + ("sample_direction='forward'",),
                 dpyg.NeighborSampler, gs, [2], what=f"{tag} dropped: forward refused")
    expect_error(ddstore.DDStoreValueError, frag + ("subgraph_type='induced'",),
                 dpyg.NeighborSampler, gs, [2], sample_direction="backward",
                 subgraph_type="induced", what=f"{tag} dropped: induced refused")
    expect_error(ddstore.DDStoreValueError, frag + ("BidirectionalNeighborSampler",),
                 dpyg.BidirectionalNeighborSampler, gs, [2],
                 what=f"{tag} dropped: BidirectionalNeighborSampler refused")
    expect_error(ddstore.DDStoreStateError, ("in-lists of edge type None were dropped",
                                             "keep_in_lists=False"),
                 old._sample, torch.tensor([1, 2]),
                 what=f"{tag} dropped: a sampler built before")
    expect_error(ddstore.DDStoreValueError, ("edge_ids", "keep_in_lists=False"),
                 gs.edge_ids, what=f"{tag} dropped: edge_ids")
    # weights: put after the drop (out-lists only) and at put, as the kept store's
    w = (torch.arange(E) % 3).float()
    for at_put in (True, False):
        name = f"bdw{int(at_put)}"
        refs = put_weighted(store, data, name + "k", w)
        refs[1].build_backward()
        wfs, wgs = put_weighted(store, data, name, w, at_put=at_put)
        wgs.build_backward(keep_in_lists=False)
        if not at_put:
            wgs.put_edge_weights("w")
        mine = {v for v in store.variables() if v.startswith(name + "/")}
        check(mine == {edge_var(name, None, "w"), f"{name}/node/_/x"} | {
            f"{name}/out/_/coo/{k}" for k in ("nbr", "eid", "w")},
              f"{tag} dropped weighted ({at_put}): variables {sorted(mine)}")
        check(wgs.weight_attr_of() == "w", f"{tag} dropped weighted: weight_attr_of")
        got, want = (backward_batch(g, f, [-1, 2], seeds, seed=3, weight_attr="w")
                     for f, g in ((wfs, wgs), refs))
        check(same_batches([got], [want]), f"{tag} dropped weighted ({at_put}): batch "
                                           f"differs from the in-lists kept")
        expect_error(ddstore.DDStoreValueError, "already weighted", wgs.put_edge_weights,
                     "w", agree=True, store=store, what=f"{tag} dropped: weighted twice")
        check(wgs.remove_edge_index(None, "coo") and not any(
            v.startswith(f"{name}/out/") for v in store.variables()),
            f"{tag} dropped: remove_edge_index left out-lists")
    # hetero: one edge type's in-lists dropped, the others kept
    hfs, hgs = dpyg.from_hetero(store, h, name="hbd")
    rfs, rgs = dpyg.from_hetero(store, h, name="hbk")
    rgs.build_backward()
    ab = ETS[0][0]
    check(hgs.build_backward(ab, keep_in_lists=False) == [ab] and
          hgs.build_backward() == [et for et, _ in ETS[1:]],
          f"{tag} hetero: build_backward by type")
    check([v for v in store.variables() if v.startswith("hbd/csc/")] ==
          [v for v in store.variables() if v.startswith("hbd/csc/") and "ab" not in v]
          and sum("hbd/csc/" in v for v in store.variables()) == 4,
          f"{tag} hetero: the in-lists of {ab} only should be gone")
    nn = {et: [-1, 2] for et, _ in ETS}
    got, want = (backward_batch(g, f, nn, ("a", torch.tensor([2, 7, 16])), seed=2)
                 for f, g in ((hfs, hgs), (rfs, rgs)))
    check(same_batches([got.to_homogeneous()], [want.to_homogeneous()]),
          f"{tag} hetero dropped: backward batch differs from the in-lists kept")
    src, dst = hgs.get_edge_index(ab, "coo")
    check(torch.equal(src, h[ab].edge_index[0]) and torch.equal(dst, h[ab].edge_index[1]),
          f"{tag} hetero dropped: COO of {ab} not as put")
    expect_error(ddstore.DDStoreValueError, (f"edge type(s) {ab!r}", "keep_in_lists=False"),
                 dpyg.NeighborSampler, hgs, nn, what=f"{tag} hetero dropped: forward")
    # temporal (forward) sampling reads in-lists: refused
    tfs, tgs = dpyg.from_hetero(store, make_hetero(times=True), name="tbd",
                                time_attr="time")
    tgs.build_backward(keep_in_lists=False)
    expect_error(ddstore.DDStoreValueError, ("sample_direction='forward'",
                                             "keep_in_lists=False"),
                 dpyg.NeighborSampler, tgs, [2], time_attr="time",
                 what=f"{tag} dropped: temporal refused")
    check(not any(v.startswith("tbd/csc/") for v in store.variables()),
          f"{tag} temporal dropped: in-lists (with times) left")
    # an enclosing transaction that fails afterwards: the out-lists go and the in-lists
    # come back (removed only at the commit), the graph as before
    efs, egs = dpyg.from_pyg(store, data, name="be")
    before, attrs = store.variables(), egs.get_all_edge_attrs()
    seeds = torch.arange(0, N, 5)
    want = dpyg.NeighborSampler(egs, [3, 2], seed=8).sample_from_nodes(
        NodeSamplerInput(input_id=None, node=seeds))

    def fails_after():
        with store.transaction("test"):
            egs.build_backward(keep_in_lists=False)
            with store.collective(None):  # a later step that fails on every rank
                raise ddstore.DDStoreValueError("later failure")
    expect_error(ddstore.DDStoreValueError, "later failure", fails_after, agree=True,
                 what=f"{tag} enclosing transaction fails")
    check(store.variables() == before and egs.get_all_edge_attrs() == attrs and
          egs.sampled_edge_types() == [None] and not egs.has_backward(None),
          f"{tag} enclosing rollback: {store.variables()}, {egs.get_all_edge_attrs()}")
    got = dpyg.NeighborSampler(egs, [3, 2], seed=8).sample_from_nodes(
        NodeSamplerInput(input_id=None, node=seeds))
    check(all(torch.equal(getattr(got, k), getattr(want, k))
              for k in ("node", "row", "col", "edge")),
          f"{tag} enclosing rollback: the in-lists sample as before")
    with store.transaction("test"):  # committed: the in-lists go at its end
        egs.build_backward(keep_in_lists=False)
        check(any(v.startswith("be/csc/") for v in store.variables()),
              f"{tag} in-lists removed before the commit")
    check(not any(v.startswith("be/csc/") for v in store.variables()) and
          egs.has_backward(None), f"{tag} committed: {store.variables()}")


def main():
    data, h = make_homo(), make_hetero()
    for transport in ("auto", "rma"):
        tag = f"n{size}-{transport}"
        with ddstore.DDStore(comm, width=size, transport=transport) as store:
            fs, gs = dpyg.from_pyg(store, data, name="g")
            homo_bidirectional(fs, gs, data, tag)
            homo_induced(fs, gs, data, tag)
            hfs, hgs = dpyg.from_hetero(store, h, name="h")
            induced_core(gs, data, hgs, h, tag)
            hetero_options(hfs, hgs, h, tag)
            hetero_partly_timed(store, make_hetero(times=True), tag)
            prefetched(fs, gs, data, h, hfs, hgs, tag)
            homo_backward(store, data, tag)
            backward_read_failures(store, data, tag)
            hetero_backward(store, h, tag)
            backward_alone(store, data, h, tag)


if __name__ == "__main__":
    run_main(main)
