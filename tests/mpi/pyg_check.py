"""MPI program: ddstore.pyg (FeatureStore, GraphStore, NeighborSampler) against brute force.

Run under mpiexec (inside ``timeout``) on 1-4 ranks (``pyg_check.py [width ...]``), or
imported and run in-process on one rank (tests/test_pyg.py).  For every width dividing
the rank count (or those named) and both transports (auto; rma: every other member's rows read with MPI_Get), the
graphs put by the quick path (``from_pyg`` / ``from_hetero``: the whole data on every
rank) with transport auto and range-wise (``put_range`` / ``put_edge_range``: each rank
its own rows) with rma:

- ``num_neighbors=[-1, -1]``: every seed batch of PyG's ``NeighborLoader`` equals the
  brute-force 2-hop in-neighbourhood (same node and edge-id multisets, per hop), node and
  edge features byte-equal, ``edge_index`` the stored edges;
- fanouts [3, 2] without replacement: no edge twice per target, ``min(deg, k)`` per
  target, every neighbour from the true list; with replacement ``k`` draws each;
- uniformity: 3000 independent draws (k=3 of a 10-edge list, with and without
  replacement): chi-square statistic below the 0.999 quantile (fixed seed);
- temporal (edge-level and node-level time, ``uniform`` and ``last``): no neighbour later
  than its seed; with -1 each seed's subgraph equals the brute-force eligible 2-hop;
  ``last`` takes the latest eligible entries;
- hetero (two node types, two edge types): -1 against brute force, features byte-equal;
- ``LinkNeighborLoader`` with binary and triplet negative sampling;
- the CSC built with ``chunk_edges`` 1 and 7 byte-equal to the default build and to
  the reference sort (destination, time, edge id), without and with times;
- edge order: a COO comes back as put, ``coo()`` / ``csr()`` / ``csc()`` as PyG's
  ``Data`` store's, a CSR beside it as given, link labels on their own edges, ``e_id``
  the put ids; graphs with no edges (homogeneous, no edge types, an empty edge type,
  a hetero graph of node counts alone in ``LinkNeighborLoader``) sampled as their seeds;
- the C sampler under the sampler (``dds_neighbor_sample``, int32 and int64 ids): ``k = 0``
  takes nothing with every flag, and ``k = 1`` with ``LAST`` the last entry of every
  list, for lists held by every member (other members' by MPI_Get with rma);
- bad input (unknown attribute, index out of range, wrong dtype, ranks putting different
  attributes or dtypes, overlapping ranges, node ids out of range, seeds out of range, a
  time_attr the graph is not sorted by) raising the same error on every rank for
  collective calls, with the store's variables unchanged.
"""
import numpy as np
import torch
from mpi4py import MPI

from _harness import check, each_store, expect_error, run_main, same_array, widths_from
from _graphs import two_type_graph

from ddstore import DDStoreIndexError, DDStoreValueError, partition  # noqa: E402
from ddstore import _core  # noqa: E402
from ddstore import pyg as dpyg  # noqa: E402
from ddstore.placement import balanced_offsets  # noqa: E402
from torch_geometric.data import Data, HeteroData  # noqa: E402
from torch_geometric.loader import LinkNeighborLoader, NeighborLoader  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
N, E = 40, 240
CHI2_999_DF9 = 27.877  # 0.999 quantile of chi-square with 9 degrees of freedom


def make_graph():
    g = torch.Generator().manual_seed(7)
    src = torch.randint(0, N, (E,), generator=g)
    dst = torch.randint(0, N, (E,), generator=g)
    # node 0: exactly 10 in-edges from distinct sources (the uniformity test)
    dst[dst == 0] = 1
    dst[:10] = 0
    src[:10] = torch.arange(10, 20)
    t = torch.randint(0, 50, (E,), generator=g)
    data = Data(x=torch.randn(N, 5, generator=g), y=torch.arange(N),
                edge_index=torch.stack([src, dst]),
                edge_attr=torch.randn(E, 3, generator=g).double(), edge_time=t,
                time=torch.randint(0, 50, (N,), generator=g))
    return data


def put_rangewise(store, data, name, time_attr=None):
    fs = dpyg.FeatureStore(store, name)
    gs = dpyg.GraphStore(store, name, time_attr=time_attr)
    lo, hi = partition(N, size, rank)
    for key in ("x", "y", "time"):
        fs.put_range(data[key][lo:hi], (lo, hi), None, key)
    lo, hi = partition(E, size, (rank + 1) % size)  # any tiling, not rank order
    for key in ("edge_attr", "edge_time"):
        fs.put_range(data[key][lo:hi], (lo, hi), dpyg.EDGES, key)
    gs.put_edge_range(data.edge_index[:, lo:hi], (lo, hi), None, size=(N, N))
    return fs, gs


def khop(src, dst, seeds, hops, ok=None):
    """Brute force: per hop, the sorted edge ids into the previous hop's new nodes (an
    edge once per occurrence of its target in that hop), and the set of nodes reached.
    ``ok``: a boolean mask of the edges that may be taken."""
    src, dst = np.asarray(src), np.asarray(dst)
    seen = np.zeros(N, dtype=bool)
    frontier = np.asarray(seeds, dtype=np.int64)
    seen[frontier] = True
    out = []
    for _ in range(hops):
        mult = np.bincount(frontier, minlength=N)
        take = mult[dst] > 0 if ok is None else (mult[dst] > 0) & ok
        eids = np.flatnonzero(take)
        eids = np.repeat(eids, mult[dst[eids]])
        out.append(sorted(eids.tolist()))
        new = np.unique(src[eids])
        new = new[~seen[new]]
        seen[new] = True
        frontier = new
    return out, set(np.flatnonzero(seen).tolist())


def check_batch_edges(b, data, what):
    src, dst = data.edge_index
    check(torch.equal(b.n_id[b.edge_index[0]], src[b.e_id]) and
          torch.equal(b.n_id[b.edge_index[1]], dst[b.e_id]),
          f"{what}: edge_index is not the stored edges of e_id")
    check(same_array(b.x, data.x[b.n_id]) and same_array(b.y, data.y[b.n_id]),
          f"{what}: node features differ")
    if "edge_attr" in b:
        check(same_array(b.edge_attr, data.edge_attr[b.e_id]), f"{what}: edge features")


def homogeneous(store, data, fs, gs, tag):
    src, dst = data.edge_index
    # -1: the exact 2-hop neighbourhood of every seed batch
    sampler = dpyg.NeighborSampler(gs, [-1, -1], seed=1)
    loader = NeighborLoader((fs, gs), num_neighbors=[-1, -1],
                            input_nodes=torch.arange(N), batch_size=9, shuffle=False,
                            neighbor_sampler=sampler, transform=dpyg.edge_features(fs))
    for i, b in enumerate(loader):
        seeds = list(range(9 * i, min(N, 9 * i + 9)))
        hops, seen = khop(src, dst, seeds, 2)
        what = f"{tag} -1 batch {i}"
        ne = b.num_sampled_edges
        got = [sorted(b.e_id[:ne[0]].tolist()), sorted(b.e_id[ne[0]:].tolist())]
        check(got == hops, f"{what}: edge ids differ from the 2-hop brute force")
        check(set(b.n_id.tolist()) == seen and len(b.n_id) == len(seen),
              f"{what}: nodes differ")
        check(b.n_id[:len(seeds)].tolist() == seeds, f"{what}: seeds not first")
        check_batch_edges(b, data, what)
    # fanouts without / with replacement
    deg = torch.bincount(dst, minlength=N)
    for replace in (False, True):
        s = dpyg.NeighborSampler(gs, [3, 2], replace=replace, seed=2)
        loader = NeighborLoader((fs, gs), num_neighbors=[3, 2], input_nodes=torch.arange(N),
                                batch_size=13, neighbor_sampler=s)
        for b in loader:
            what = f"{tag} fanout replace={replace}"
            check_batch_edges(b, data, what)
            ne, nn = b.num_sampled_edges, b.num_sampled_nodes
            targets = b.n_id[b.edge_index[1]]
            for hop, (k, e0, e1) in enumerate(((3, 0, ne[0]), (2, ne[0], ne[0] + ne[1]))):
                lo = sum(nn[:hop])
                for v in range(lo, lo + nn[hop]):
                    mine = b.e_id[e0:e1][b.edge_index[1][e0:e1] == v]
                    d = int(deg[b.n_id[v]])
                    want = (k if d else 0) if replace else min(d, k)
                    check(len(mine) == want, f"{what}: node {int(b.n_id[v])} hop {hop} "
                                             f"got {len(mine)} edges, expected {want}")
                    if not replace:
                        check(len(set(mine.tolist())) == len(mine), f"{what}: duplicate")
            check(bool((dst[b.e_id] == targets).all()), f"{what}: wrong list")
    # uniformity: 3000 independent draws from node 0's 10 in-edges
    for replace in (False, True):
        s = dpyg.NeighborSampler(gs, [3], replace=replace, seed=3)
        out = s._sample(torch.zeros(3000, dtype=torch.long))
        counts = np.bincount(out.edge.numpy(), minlength=10)
        exp = 3000 * 3 / 10
        chi2 = float(((counts - exp) ** 2 / exp).sum())
        check(len(out.edge) == 9000 and counts[10:].sum() == 0 and
              chi2 < CHI2_999_DF9, f"{tag} uniformity replace={replace}: counts {counts}"
                                   f" chi2 {chi2:.2f}")
        if not replace:
            per = out.edge.view(3000, 3)
            check(all(len(set(r.tolist())) == 3 for r in per), f"{tag}: repeats")
    # LinkNeighborLoader with negative sampling
    for mode in ("binary", "triplet"):
        ll = LinkNeighborLoader((fs, gs), num_neighbors=[2, 2],
                                edge_label_index=(None, data.edge_index[:, :30]),
                                batch_size=10, neighbor_sampler=dpyg.NeighborSampler(
                                    gs, [2, 2], seed=4), neg_sampling=mode)
        for i, b in enumerate(ll):
            what = f"{tag} link {mode} batch {i}"
            check_batch_edges(b, data, what)
            pos = data.edge_index[:, 10 * i:10 * i + 10]
            if mode == "binary":
                check(b.edge_label_index.shape == (2, 20) and
                      b.edge_label.tolist() == [1.0] * 10 + [0.0] * 10,
                      f"{what}: labels {b.edge_label}")
                check(torch.equal(b.n_id[b.edge_label_index[:, :10]], pos), f"{what}: pos")
            else:
                check(torch.equal(b.n_id[b.src_index], pos[0]) and
                      torch.equal(b.n_id[b.dst_pos_index], pos[1]) and
                      b.dst_neg_index.shape == (10,), f"{what}: triplet indices")


def temporal(store, data, tag, level, strategy, fs, gs):
    src, dst = data.edge_index
    time_attr = "edge_time" if level == "edge" else "time"
    etime = data.edge_time if level == "edge" else data.time[src]
    seeds = torch.arange(0, N, 3)
    seed_t = torch.randint(0, 50, (len(seeds),), generator=torch.Generator().manual_seed(5))
    k = [-1, -1] if strategy == "all" else [2, 2]
    s = dpyg.NeighborSampler(gs, k, time_attr=time_attr, seed=6,
                             replace=strategy == "last_replace",
                             temporal_strategy="uniform" if strategy in ("all", "uniform")
                             else "last")
    loader = NeighborLoader((fs, gs), num_neighbors=k, input_nodes=seeds,
                            input_time=seed_t, time_attr=time_attr, batch_size=len(seeds),
                            neighbor_sampler=s)
    b = next(iter(loader))
    what = f"{tag} temporal {level} {strategy}"
    check_batch_edges(b, data, what)
    root = b.batch[b.edge_index[1]]
    check(bool((etime[b.e_id] <= seed_t[root]).all()), f"{what}: a neighbour is later "
                                                       f"than its seed")
    for i in range(len(seeds)):
        T = int(seed_t[i])
        mine = b.e_id[root == i]
        if strategy == "all":
            hops, _ = khop(src, dst, [int(seeds[i])], 2, ok=(etime <= T).numpy())
            check(sorted(mine.tolist()) == sorted(hops[0] + hops[1]),
                  f"{what}: seed {i} subgraph differs from the brute force")
        elif strategy == "last":
            tgt = b.n_id[b.edge_index[1]][root == i]
            for v in set(tgt.tolist()):
                el = np.flatnonzero(((dst == v) & (etime <= T)).numpy())
                el = el[np.lexsort((el, etime.numpy()[el]))].tolist()
                got = sorted(mine[tgt == v].tolist())
                # a node can be a target at both hops of one subgraph only once (disjoint)
                check(got == sorted(el[-2:]), f"{what}: node {v} took {got}, latest "
                                              f"eligible {el[-2:]}")
        elif strategy == "last_replace":  # k draws among the k latest (as pyg-lib)
            tgt = b.n_id[b.edge_index[1]][root == i]
            for v in set(tgt.tolist()):
                el = np.flatnonzero(((dst == v) & (etime <= T)).numpy())
                el = el[np.lexsort((el, etime.numpy()[el]))].tolist()
                got = mine[tgt == v].tolist()
                check(len(got) == 2 and set(got) <= set(el[-2:]),
                      f"{what}: node {v} drew {got}, not 2 among the latest {el[-2:]}")


def hetero(store, tag, rangewise):
    g = torch.Generator().manual_seed(11)
    na, nb = 23, 17
    h = HeteroData()
    h["a"].x = torch.randn(na, 4, generator=g)
    h["b"].x = torch.randint(0, 100, (nb, 2), generator=g)
    h["a", "ab", "b"].edge_index = torch.stack([torch.randint(0, na, (90,), generator=g),
                                                torch.randint(0, nb, (90,), generator=g)])
    h["b", "ba", "a"].edge_index = torch.stack([torch.randint(0, nb, (70,), generator=g),
                                                torch.randint(0, na, (70,), generator=g)])
    h["a", "ab", "b"].w = torch.randn(90, generator=g)
    name = f"h{tag}"
    if not rangewise:
        fs, gs = dpyg.from_hetero(store, h, name=name)
    else:
        fs, gs = dpyg.FeatureStore(store, name), dpyg.GraphStore(store, name)
        for t, n in (("a", na), ("b", nb)):
            lo, hi = partition(n, size, rank)
            fs.put_range(h[t].x[lo:hi], (lo, hi), t, "x")
        for et in h.edge_types:
            m = h[et].edge_index.shape[1]
            lo, hi = partition(m, size, rank)
            gs.put_edge_range(h[et].edge_index[:, lo:hi], (lo, hi), et)
        lo, hi = partition(90, size, rank)
        fs.put_range(h["a", "ab", "b"].w[lo:hi], (lo, hi), ("a", "ab", "b"), "w")
    s = dpyg.NeighborSampler(gs, [-1, -1], seed=8)
    seeds = torch.tensor([0, 5, 9, 5 + size])
    loader = NeighborLoader((fs, gs), num_neighbors=[-1, -1], input_nodes=("b", seeds),
                            batch_size=4, neighbor_sampler=s,
                            transform=dpyg.edge_features(fs))
    b = next(iter(loader))
    what = f"{tag} hetero"
    # brute force over typed nodes
    seen = {("b", int(v)) for v in seeds}
    frontier = [("b", int(v)) for v in seeds]
    want = {et: [] for et in h.edge_types}
    for _ in range(2):
        new = []
        for et in h.edge_types:
            es, ed = h[et].edge_index
            for v in [f[1] for f in frontier if f[0] == et[2]]:
                for e in (ed == v).nonzero().view(-1).tolist():
                    want[et].append(e)
                    key = (et[0], int(es[e]))
                    if key not in seen:
                        seen.add(key)
                        new.append(key)
        frontier = new
    for et in h.edge_types:
        got = b[et].e_id if "e_id" in b[et] else torch.zeros(0, dtype=torch.long)
        check(sorted(got.tolist()) == sorted(want[et]), f"{what} {et}: edge ids differ")
        es, ed = h[et].edge_index
        if got.numel():
            check(torch.equal(b[et[0]].n_id[b[et].edge_index[0]], es[got]) and
                  torch.equal(b[et[2]].n_id[b[et].edge_index[1]], ed[got]),
                  f"{what} {et}: edges")
    for t in ("a", "b"):
        check({(t, v) for v in b[t].n_id.tolist()} == {x for x in seen if x[0] == t},
              f"{what}: nodes of {t}")
        check(same_array(b[t].x, h[t].x[b[t].n_id]), f"{what}: features of {t}")
    et = ("a", "ab", "b")
    check(same_array(b[et].w, h[et].w[b[et].e_id]), f"{what}: edge features")


def errors(store, data, fs, gs, tag):
    before = store.variables()
    # wrong dtype on one rank only / everywhere, different attributes per rank
    bad = data.x.double() if rank == size - 1 else data.x
    if size > 1:
        expect_error(DDStoreValueError, ["dtype", f"rank {size - 1}"], fs.put_tensor, bad,
                     group_name=None, attr_name="z", agree=True, store=store,
                     what="dtype differs between ranks")
        expect_error(DDStoreValueError, ["collective calls out of step"], fs.put_tensor,
                     data.x, group_name=None, attr_name=f"p{rank}", agree=True,
                     store=store, what="different attributes per rank")
        lo, hi = (0, 5) if rank < 2 else partition(N, size, rank)
        expect_error(DDStoreIndexError, ["cover"], fs.put_range, data.x[lo:hi], (lo, hi),
                     None, "ov", agree=True, store=store, what="overlapping ranges", agreed=True)
    expect_error(DDStoreValueError, ["dtype <U1", "cannot be stored"], fs.put_tensor,
                 np.array(["a"] * N), group_name=None, attr_name="s", agree=True,
                 store=store, what="string dtype")
    # a whole put over a held attribute of another layout puts it again (PyG's reference
    # store replaces it), and back
    for value in (data.x.double(), data.x):
        check(fs.put_tensor(value, group_name=None, attr_name="x") is True, "put again")
        got = fs.get_tensor(group_name=None, attr_name="x")
        check(got.dtype == value.dtype and torch.equal(got, value),
              f"a whole put of another layout: {got.dtype} {tuple(got.shape)}")
    expect_error(DDStoreIndexError, ["destination node", "out of range [0, 5)"],
                 gs.put_edge_index, data.edge_index, edge_type=("a", "r", "b"),
                 layout="coo", size=(N, 5), agree=True, store=store, agreed=True)
    expect_error(DDStoreValueError, ["integer node ids"], gs.put_edge_range,
                 data.edge_index[:, :3].float(), (3 * rank, 3 * rank + 3), ("a", "f", "b"),
                 agree=True, store=store)
    # local reads
    expect_error(dpyg.UnknownAttributeError, ["no attribute", "'nope'", "known"],
                 fs.get_tensor, group_name=None, attr_name="nope", also=KeyError)
    expect_error(DDStoreIndexError, [f"index {N} (position 1) out of range [-{N}, {N})"],
                 fs.get_tensor, group_name=None, attr_name="x", index=torch.tensor([0, N]))
    s = dpyg.NeighborSampler(gs, [2])
    expect_error(DDStoreIndexError, [f"out of range [0, {N})"], s._sample,
                 torch.tensor([1, N + 3]))
    expect_error(DDStoreValueError, ["sorted by"], dpyg.NeighborSampler, gs, [2],
                 time_attr="edge_time")
    expect_error(DDStoreValueError, ["num_neighbors", "a list of integers"],
                 dpyg.NeighborSampler, gs, [1.5])
    # any negative fanout is all, as pyg-lib reads it (-2 was refused)
    check(dpyg.NeighborSampler(gs, [-2, -7]).fanouts() == [-1, -1], f"{tag}: -2 not all")
    check(store.variables() == before, f"{tag}: variables changed by failed calls")
    # nothing lost: the stored data is still right
    check(same_array(fs.get_tensor(group_name=None, attr_name="x"), data.x),
          f"{tag}: x changed")


def chunked(store, data, tag, rangewise):
    """The CSC built with ``chunk_edges`` 1 and 7 (many rounds) is byte-equal to the
    default chunk's build and to the reference: ``indptr``, the members' node ranges and
    the ``nbr`` / ``eid`` / ``ts`` arrays sorted by (destination, time, edge id), for no
    time, edge-level and node-level time (``nbr`` / ``eid`` int32: this graph's ids fit;
    node-level time keeps no ``ts``, but the replicated node times)."""
    src, dst = data.edge_index[0].numpy(), data.edge_index[1].numpy()
    eid = np.arange(E, dtype=np.int64)
    indptr = np.zeros(N + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=N), out=indptr[1:])
    for ta in (None, "edge_time", "time"):
        if ta is None:
            t, order = None, np.lexsort((eid, dst))
        else:
            t = (data.edge_time.numpy() if ta == "edge_time" else
                 data.time.numpy()[src])  # integer times: kept as int64
            order = np.lexsort((eid, t, dst))
        ref = [indptr, balanced_offsets(indptr, store.group_size),
               src[order].astype(np.int32), eid[order].astype(np.int32)]
        ref += [t[order]] if ta == "edge_time" else []  # node-level: no time per entry
        for chunk in (None, 1, 7):
            name = f"chunk-{ta}-{chunk}"
            fs = dpyg.FeatureStore(store, name)
            gs = dpyg.GraphStore(store, name, time_attr=ta, chunk_edges=chunk)
            if ta == "edge_time":
                fs.put_tensor(data.edge_time, group_name=dpyg.EDGES, attr_name=ta)
            elif ta == "time":
                fs.put_tensor(data.time, group_name=None, attr_name=ta)
            if rangewise:
                lo, hi = partition(E, size, (rank + 1) % size)
                gs.put_edge_range(data.edge_index[:, lo:hi], (lo, hi), None, size=(N, N))
            else:
                gs.put_edge_index(data.edge_index, edge_type=None, size=(N, N))
            c = gs.sampled_lists(None)
            got = [c.indptr, c.node_offsets] + [store.get_range(c.vars[k], 0, E)
                                                for k in ("nbr", "eid", "ts") if k in c.vars]
            what = f"{tag} chunk_edges={chunk} time_attr={ta}"
            check(len(got) == len(ref), f"{what}: variables {sorted(c.vars)}")
            for label, a, b in zip(("indptr", "node_offsets", "nbr", "eid", "ts"), got, ref):
                check(same_array(a, b), f"{what}: {label} differs from the reference")
            # node-level time: the sources' times replicated instead
            check((c.node_times is None) == (ta != "time"), f"{what}: node times kept")
            if ta == "time":  # small integers: int32 holds them, so kept as int32
                check(same_array(c.node_times, data.time.numpy().astype(np.int32)),
                      f"{what}: node times differ from the attribute's, as int32")
            gs.remove_edge_index(edge_type=None, layout="coo")
    expect_error(DDStoreValueError, ["chunk_edges=0"], dpyg.GraphStore, store, "bad",
                 chunk_edges=0)


def orders(store, tag, rangewise):
    """Issue 26 items 1 and 6: a COO comes back in the order put (random order,
    duplicates, self loops; put whole or range-wise), byte-equal; ``coo()`` / ``csr()`` /
    ``csc()`` (with ``perm``) equal PyG's own ``Data`` store's; a CSR put beside it comes
    back as given; ``LinkNeighborLoader(edge_label_index=(et, None), edge_label=f(src,
    dst))`` gives every seed edge its own label, and sampled ``e_id`` are put-order ids."""
    g = torch.Generator().manual_seed(21)
    n, m = 13, 150
    ei = torch.randint(0, n, (2, m), generator=g)
    ei[1, :9] = ei[0, :9]              # self loops
    ei[:, 40:60] = ei[:, 60:80]        # duplicates
    name = f"ord{tag}"
    gs = dpyg.GraphStore(store, name)
    if rangewise:
        lo, hi = partition(m, size, (rank + 1) % size)
        gs.put_edge_range(ei[:, lo:hi], (lo, hi), None, size=(n, n))
    else:
        gs.put_edge_index(ei, edge_type=None, layout="coo", size=(n, n))
    row, col = gs.get_edge_index(None, "coo")
    check(same_array(torch.stack([row, col]).numpy(), ei.numpy()),
          f"{tag}: COO not as put")
    ref = Data()
    ref.put_edge_index(ei, layout="coo", size=(n, n))
    for layout in ("coo", "csr", "csc"):
        a, b = getattr(gs, layout)(), getattr(ref, layout)()
        check(all((x is None and y is None) or same_array(x.numpy(), y.numpy())
                  for x, y in zip(a, b)), f"{tag}: {layout}() differs from PyG's Data")
    # a second layout (another graph) beside it, as PyG's stores allow
    other = torch.randint(0, n, (2, 20), generator=g)
    order = torch.argsort(other[0], stable=True)
    rowptr = torch.zeros(n + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(other[0], minlength=n), 0)
    gs.put_edge_index((rowptr, other[1][order]), edge_type=None, layout="csr",
                      size=(n, n))
    rp, c = gs.get_edge_index(None, "csr")
    check(same_array(rp.numpy(), rowptr.numpy()) and same_array(c.numpy(),
                                                                other[1][order].numpy()),
          f"{tag}: CSR not as put")
    check([a.layout.value for a in gs.get_all_edge_attrs()] == ["coo", "csr"],
          f"{tag}: layouts {gs.get_all_edge_attrs()}")
    check(same_array(gs.get_edge_index(None, "coo")[0].numpy(), ei[0].numpy()),
          f"{tag}: COO changed by the CSR put")
    expect_error(KeyError, ["no edge type None in layout 'csc'"], gs.get_edge_index, None,
                 "csc")
    # sampled e_id (the COO, the first put) are put columns
    out = dpyg.NeighborSampler(gs, [-1, 3], seed=9)._sample(torch.arange(n))
    check(torch.equal(out.node[out.row], ei[0][out.edge]) and
          torch.equal(out.node[out.col], ei[1][out.edge]), f"{tag}: e_id not put ids")
    # link labels: hetero, edge_label_index=(et, None), label = f(src, dst)
    et = ("a", "r", "b")
    h = two_type_graph(g, 9, 11, 70, et)
    h["b", "s", "a"].edge_index = torch.randint(0, 9, (2, 30), generator=g)
    fs, hs = dpyg.from_hetero(store, h, name=f"lab{tag}")
    src, dst = h[et].edge_index
    label = (src * 100 + dst).float()
    ll = LinkNeighborLoader((fs, hs), num_neighbors=[2, 2], edge_label_index=(et, None),
                            edge_label=label, batch_size=16, shuffle=True,
                            neighbor_sampler=dpyg.NeighborSampler(hs, [2, 2], seed=3))
    seen = []
    for i, b in enumerate(ll):
        s_ = b["a"].n_id[b[et].edge_label_index[0]]
        d_ = b["b"].n_id[b[et].edge_label_index[1]]
        check(torch.equal(b[et].edge_label, (s_ * 100 + d_).float()),
              f"{tag} link batch {i}: labels belong to other edges")
        check(torch.equal(s_, src[b[et].input_id]) and torch.equal(d_, dst[b[et].input_id]),
              f"{tag} link batch {i}: input_id is not the seed edge")
        for t in h.edge_types:
            if "e_id" in b[t] and b[t].e_id.numel():
                es, ed = h[t].edge_index
                check(torch.equal(b[t[0]].n_id[b[t].edge_index[0]], es[b[t].e_id]) and
                      torch.equal(b[t[2]].n_id[b[t].edge_index[1]], ed[b[t].e_id]),
                      f"{tag} link batch {i} {t}: e_id not the put edges")
        seen += b[et].input_id.tolist()
    check(sorted(seen) == list(range(70)), f"{tag}: link seeds {sorted(seen)[:5]}...")


def empty_graphs(store, tag):
    """Issue 26 item 4: a graph with no edges (``Data(num_nodes, x)``), a hetero graph
    with no edge types, and an empty edge type beside a non-empty one are stored and
    sampled, as PyG's in-memory loader does: batches of the seeds (and, beside, the
    non-empty type's neighbours against brute force); a hetero graph of node counts
    alone (``HeteroData(paper=dict(num_nodes=100))``) in ``LinkNeighborLoader``."""
    g = torch.Generator().manual_seed(31)
    x = torch.randn(30, 3, generator=g)
    fs, gs = dpyg.from_pyg(store, Data(x=x, num_nodes=30), name=f"e0{tag}")
    check(gs.num_edges(None) == 0 and gs.get_all_edge_attrs()[0].size == (30, 30),
          f"{tag}: empty graph stored as {gs.get_all_edge_attrs()}")
    loader = NeighborLoader((fs, gs), num_neighbors=[3, 2], input_nodes=torch.arange(30),
                            batch_size=7, neighbor_sampler=dpyg.NeighborSampler(gs, [3, 2]))
    for i, b in enumerate(loader):
        seeds = torch.arange(7 * i, min(30, 7 * i + 7))
        check(torch.equal(b.n_id, seeds) and b.edge_index.shape == (2, 0) and
              same_array(b.x.numpy(), x[seeds].numpy()),
              f"{tag} empty graph batch {i}: {b}")
    # hetero with no edge types
    h = HeteroData()
    h["a"].x = torch.randn(8, 2, generator=g)
    h["b"].x = torch.randn(5, 2, generator=g)
    fh, gh = dpyg.from_hetero(store, h, name=f"e1{tag}")
    check(gh.get_all_edge_attrs() == [], f"{tag}: edge attrs {gh.get_all_edge_attrs()}")
    loader = NeighborLoader((fh, gh), num_neighbors=[2], input_nodes=("b", torch.arange(5)),
                            batch_size=3, neighbor_sampler=dpyg.NeighborSampler(gh, [2]))
    for i, b in enumerate(loader):
        seeds = torch.arange(3 * i, min(5, 3 * i + 3))
        check(torch.equal(b["b"].n_id, seeds) and b["a"].n_id.numel() == 0 and
              same_array(b["b"].x.numpy(), h["b"].x[seeds].numpy()),
              f"{tag} no edge types batch {i}: {b}")
    # an empty edge type beside a non-empty one
    h["a", "r", "b"].edge_index = torch.stack([torch.randint(0, 8, (25,), generator=g),
                                               torch.randint(0, 5, (25,), generator=g)])
    h["b", "s", "a"].edge_index = torch.zeros((2, 0), dtype=torch.long)
    fh, gh = dpyg.from_hetero(store, h, name=f"e2{tag}")
    loader = NeighborLoader((fh, gh), num_neighbors=[-1, -1],
                            input_nodes=("b", torch.arange(5)), batch_size=5,
                            neighbor_sampler=dpyg.NeighborSampler(gh, [-1, -1]))
    b = next(iter(loader))
    es, ed = h["a", "r", "b"].edge_index
    got = b["a", "r", "b"].e_id
    check(sorted(got.tolist()) == list(range(25)) and
          torch.equal(b["a"].n_id[b["a", "r", "b"].edge_index[0]], es[got]) and
          torch.equal(b["b"].n_id[b["a", "r", "b"].edge_index[1]], ed[got]),
          f"{tag}: the non-empty edge type beside an empty one")
    check(b["b", "s", "a"].edge_index.shape == (2, 0), f"{tag}: edges of the empty type")
    check(set(b["a"].n_id.tolist()) == set(es.tolist()), f"{tag}: nodes of a")
    # issue 38 item 2: node counts alone (no edges, no attributes), as PyG's
    # test_hetero_link_neighbor_loader_no_edges: LinkNeighborLoader over them
    fp, gp = dpyg.from_hetero(store, HeteroData(paper=dict(num_nodes=100)),
                              name=f"e3{tag}")
    check(gp.node_counts() == {"paper": 100}, f"{tag}: node counts {gp.node_counts()}")
    label = torch.randint(0, 100, (2, 100), generator=g)
    loader = LinkNeighborLoader((fp, gp), num_neighbors=[], batch_size=20,
                                edge_label_index=(("paper", "paper"), label),
                                neighbor_sampler=dpyg.NeighborSampler(gp, []))
    seen = []
    for i, b in enumerate(loader):
        ids, eli = b["paper", "paper"].input_id, b["paper", "paper"].edge_label_index
        check(ids.numel() == 20 and eli.shape == (2, 20) and
              b["paper"].num_nodes == eli.unique().numel() == b["paper"].n_id.numel() and
              torch.equal(b["paper"].n_id[eli], label[:, ids]) and len(b) == 4,
              f"{tag} node counts alone: link batch {i}: {b}")
        seen += ids.tolist()
    check(sorted(seen) == list(range(100)), f"{tag} node counts alone: link seeds")


def c_zero_fanout(width, transport, tag):
    """dds_neighbor_sample, below the sampler (which never asks for k = 0): k = 0 takes
    nothing with every flag, and k = 1 with LAST the last entry of each list, for all
    nodes, whose lists are spread over the group's members (read with MPI_Get from
    other members under rma).  Before the fix, LAST with k = 0 queued an empty read per
    node held by another member into a buffer sized by what is taken (one slot): a heap
    overflow that aborted the process."""
    n_nodes, per = 64, 3
    indptr = np.arange(0, per * (n_nodes + 1), per, dtype=np.int64)
    node_off = np.linspace(0, n_nodes, width + 1).astype(np.int64)
    src = (np.arange(per * n_nodes, dtype=np.int64) * 7) % n_nodes
    core = _core.Core(comm, width, transport)
    try:
        g = core.group_rank
        lo, hi = indptr[node_off[g]], indptr[node_off[g + 1]]
        for dt in (np.int64, np.int32):
            nbr = core.add(f"nbr{dt.__name__}", int(hi - lo), dt().itemsize)
            eid = core.add(f"eid{dt.__name__}", int(hi - lo), dt().itemsize)
            core.write_local(nbr, 0, np.ascontiguousarray(src[lo:hi].astype(dt)))
            core.write_local(eid, 0, np.arange(lo, hi, dtype=dt))
            core.sync()
            csc = _core.CSC(core, nbr, eid, None, indptr, node_off)
            nodes = np.arange(n_nodes, dtype=np.int64)
            for flags in (0, _core.NEIGHBOR_REPLACE, _core.NEIGHBOR_LAST):
                row, _, _ = csc.sample(nodes, None, 0, flags, 5, 16)
                check(row.shape[0] == 0, f"{tag} C k=0 flags={flags} {dt.__name__}: "
                                         f"{row.shape[0]} taken")
            row, got_nbr, got_eid = csc.sample(nodes, None, 1, _core.NEIGHBOR_LAST, 5,
                                               n_nodes)
            last = indptr[1:] - 1
            check(np.array_equal(row, nodes) and np.array_equal(got_eid, last) and
                  np.array_equal(got_nbr, src[last]),
                  f"{tag} C k=1 LAST {dt.__name__}: not the last entry of every list")
    finally:
        core.free()


def c_temporal_pieces(width, transport, tag):
    """dds_neighbor_sample with times, below the sampler: the times of lists held by
    other members are read in pieces (at most 32768 entries and 1024 lists each; a
    longer list alone), or searched where they lie (the rule of csrc/sampling.h;
    fetch_whole_max 8: lists over 8 entries; 2^40: none; the default here: none, see
    c_search_budget; the same draws all three ways), and the scattered picks of one
    list as the span that holds them.
    Over 3,000 lists (some of 40,000 entries, some empty) queried at times before their
    first entry (nothing eligible), after their last (the whole list), on a tie and in
    between: LAST takes exactly the latest eligible entries (brute force); uniform draws
    (with and without replacement) and all neighbours take only eligible entries,
    distinct without replacement, and equal byte for byte what width 1 (every list read
    in place) takes for the same seed; weighted draws (float32 weights, 30 % of them 0,
    read in the same pieces) likewise, only positive eligible entries.  Both time
    levels: a time per entry (``ts``), and
    node-level time (no ``ts``: each entry's time is its source node's, from the
    replicated node times; ids int64 there, so both id widths are searched); a source
    beyond the node times is refused naming it."""
    rng = np.random.default_rng(17)
    n_nodes = 3000
    deg = rng.integers(0, 40, n_nodes)
    deg[[5, 2500]] = 40000  # longer than a piece of times
    deg[7] = 0
    indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    total = int(indptr[-1])
    node_time = rng.integers(0, 100, n_nodes).astype(np.float64)
    nodes = np.concatenate([np.arange(n_nodes), rng.permutation(n_nodes),
                            np.arange(n_nodes)]).astype(np.int64)
    q_ts = np.concatenate([np.full(n_nodes, -1.0), np.full(n_nodes, 99.0),
                           rng.integers(0, 100, n_nodes).astype(np.float64)])
    k = 5
    cases = [(k, 0), (k, _core.NEIGHBOR_REPLACE), (k, _core.NEIGHBOR_LAST), (-1, 0)]
    wcases = [(k, 0), (k, _core.NEIGHBOR_REPLACE), (-1, 0)]
    weight = rng.random(int(deg.sum()), dtype=np.float32) * 2  # 30 % of them 0
    weight[rng.random(weight.shape[0]) < 0.3] = 0
    positive = np.concatenate([[0], np.cumsum(weight > 0)])  # positive weights before
    list_of = np.repeat(np.arange(n_nodes), deg)  # each entry's list

    def draw(w, level, src, ts, nbr_time=None, fw=0):  # nbr_time short: refused
        node_off = np.linspace(0, n_nodes, w + 1).astype(np.int64)
        core = _core.Core(comm, w, transport)
        out = []
        try:
            g = core.group_rank
            lo, hi = indptr[node_off[g]], indptr[node_off[g + 1]]
            ib = 4 if level == "edge" else 8
            nbr = core.add("nbr", int(hi - lo), ib)
            eid = core.add("eid", int(hi - lo), 8)
            core.write_local(nbr, 0, np.ascontiguousarray(src[lo:hi].astype(f"i{ib}")))
            core.write_local(eid, 0, np.arange(lo, hi, dtype=np.int64))
            tv = None
            if level == "edge":
                tv = core.add("ts", int(hi - lo), 8)
                core.write_local(tv, 0, np.ascontiguousarray(ts[lo:hi]))
            core.sync()
            csc = _core.CSC(core, nbr, eid, tv, indptr, node_off,
                            node_time if nbr_time is None else nbr_time, fetch_whole_max=fw)
            if nbr_time is not None and len(nbr_time) < n_nodes:  # sources beyond: refused
                return expect_error(DDStoreIndexError, ["has no time", "[0, 2999)"],
                                    csc.sample, nodes, q_ts, k, 0, 9, k * len(nodes))
            for kk, flags in cases if not fw else cases[:3:2]:  # fw: the cuts' check
                cap = int(cut.sum()) if kk < 0 else kk * len(nodes)
                out.append(tuple(a.copy() for a in csc.sample(nodes, q_ts, kk, flags, 9,
                                                              cap)))
            if fw:
                return out
            # weighted, the weights of remote lists read in the same pieces
            wv = core.add("w", int(hi - lo), 4)
            core.write_local(wv, 0, np.ascontiguousarray(weight[lo:hi]))
            core.sync()
            for kk, flags in wcases:
                cap = int(cut.sum()) if kk < 0 else kk * len(nodes)
                out.append(tuple(a.copy() for a in csc.sample_weighted(
                    wv, nodes, q_ts, kk, flags, 9, cap)))
        finally:
            core.free()
        return out

    for level in ("edge", "node"):
        src = rng.integers(0, n_nodes, total).astype(np.int64)
        if level == "edge":  # each list's times sorted
            ts = rng.integers(0, 100, total)
            ts = ts[np.lexsort((ts, list_of))].astype(np.float64)
        else:  # each list sorted by its sources' times (ties by position, as stored)
            order = np.lexsort((np.arange(total), node_time[src], list_of))
            src = src[order]
            ts = node_time[src]
        # per query: the entries of its list at or before its time (times are integers
        # in [0, 100), queries in [-1, 99]: list v's entries are v * 1000 + time, sorted)
        cut = np.searchsorted(list_of * 1000 + ts, nodes * 1000 + q_ts,
                              side="right") - indptr[nodes]
        got = draw(width, level, src, ts)
        ref = draw(1, level, src, ts) if width > 1 else None
        # where other members' lists are all remote: the cuts made all three ways
        for fw in (8, 1 << 40) if width > 1 and transport == "rma" else ():
            other = draw(width, level, src, ts, fw=fw)  # uniform and LAST draws
            check(all(np.array_equal(a, b) for x, y in zip(got[:3:2], other)
                      for a, b in zip(x, y)),
                  f"{tag} C temporal pieces ({level}-level): fetch_whole_max={fw} draws "
                  f"otherwise than the default rule")
        if level == "node":  # the node times as float32 (exact here): the same draws
            narrow = draw(width, level, src, ts, node_time.astype(np.float32))
            check(all(np.array_equal(a, b) for x, y in zip(got, narrow)
                      for a, b in zip(x, y)), f"{tag} C temporal pieces: float32 node "
                                              f"times draw otherwise than float64 ones")
        for c, ((kk, flags), (row, nb, ei)) in enumerate(zip(cases + wcases, got)):
            weighted = c >= len(cases)
            what = (f"{tag} C temporal pieces ({level}-level{', weighted' * weighted}) "
                    f"k={kk} flags={flags}")
            pos = cut
            if weighted:  # the eligible entries of positive weight
                pos = positive[indptr[nodes] + cut] - positive[indptr[nodes]]
            # pyg-lib's rule: -1 (or k >= the eligible, without replacement) takes them
            # all, zero weights included; with replacement only positive ones are drawn;
            # without, a zero weight only once every positive one is in
            take = cut if kk < 0 else (np.where(pos > 0, kk, 0)
                                       if flags == _core.NEIGHBOR_REPLACE
                                       else np.minimum(cut, kk))
            zeros_ok = True
            if weighted and flags == _core.NEIGHBOR_REPLACE:
                zeros_ok = bool((weight[ei] > 0).all())
            elif weighted:
                zeros_ok = np.array_equal(np.bincount(row[weight[ei] > 0],
                                                      minlength=len(nodes)),
                                          np.minimum(pos, take))
            ok = (np.array_equal(row, np.repeat(np.arange(len(nodes)), take)) and
                  np.array_equal(nb, src[ei]) and
                  bool((ei >= indptr[nodes[row]]).all()) and
                  bool((ei < indptr[nodes[row]] + cut[row]).all()) and zeros_ok)
            check(ok, f"{what}: rows, ids or eligibility differ from the brute force")
            if ok and flags == _core.NEIGHBOR_LAST:  # each query's last take[i] entries
                ends = np.repeat(indptr[nodes] + cut, take)
                want = ends - take.repeat(take) + (np.arange(len(ends)) -
                                                   np.repeat(np.cumsum(take) - take, take))
                check(np.array_equal(ei, want), f"{what}: not the latest eligible entries")
            if ok and flags == 0:  # (row, entry) pairs distinct
                pairs = np.unique(row * total + ei).shape[0]
                check(pairs == len(row), f"{what}: a list drew an entry twice")
            if ref is not None:
                check(all(np.array_equal(a, b) for a, b in zip(got[c], ref[c])),
                      f"{what}: differs from width 1 (every list read in place)")
        if level == "node":
            src[indptr[5]] = n_nodes - 1  # a source with no time (the array is short)
            draw(width, level, src, ts, nbr_time=node_time[:-1])


def c_search_budget(width, transport, tag):
    """The default rule of csrc/sampling.h's remote cuts for the neighbour sampler: a
    call's lists of other members over 65,536 entries are read (their times, in pieces)
    while they hold at most 1 MiB in all, else searched where they lie.  Four lists of
    70,000 entries, two held by each member of a width-2 group read over MPI_Get: a
    call asking for one remote long list reads it (560 KB), a call asking for both
    searches them (1.12 MB); either way the cut equals the brute force (LAST takes the
    latest eligible entries), with a time per entry and node-level, and the draws equal
    those with every list read (fetch_whole_max 2^40)."""
    if width < 2 or transport != "rma":
        return
    rng = np.random.default_rng(23)
    n_nodes, long_len = 8, 70000
    deg = np.array([long_len, long_len, 3, 3, long_len, long_len, 3, 3])
    indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    node_off = np.array([0, 4, 8] + [8] * (width - 2), dtype=np.int64)
    node_time = np.arange(n_nodes * 1000, dtype=np.float64)  # source v's time: v
    total = int(indptr[-1])
    src = np.concatenate([np.sort(rng.integers(0, n_nodes * 1000, d)) for d in deg])
    ts = src.astype(np.float64)  # per entry: the same times, sorted in every list
    for level in ("edge", "node"):
        core = _core.Core(comm, width, transport)
        try:
            g = core.group_rank
            remote = [4, 5] if g == 0 else [0, 1]  # long lists of another member
            calls = [np.array(remote[:1] + [2, 3], np.int64),
                     np.array(remote + [6], np.int64)]
            lo, hi = int(indptr[node_off[g]]), int(indptr[node_off[g + 1]])
            nbr = core.add("nbr", hi - lo, 8)
            eid = core.add("eid", hi - lo, 8)
            core.write_local(nbr, 0, np.ascontiguousarray(src[lo:hi]))
            core.write_local(eid, 0, np.arange(lo, hi, dtype=np.int64))
            tv = None
            if level == "edge":
                tv = core.add("ts", hi - lo, 8)
                core.write_local(tv, 0, np.ascontiguousarray(ts[lo:hi]))
            core.sync()
            for nodes in calls:
                q_ts = rng.integers(0, n_nodes * 1000, len(nodes)).astype(np.float64)
                cut = np.array([np.searchsorted(ts[indptr[v]:indptr[v + 1]], t, "right")
                                for v, t in zip(nodes, q_ts)], dtype=np.int64)
                draws = []
                for fw in (0, 1 << 40):
                    csc = _core.CSC(core, nbr, eid, tv, indptr, node_off,
                                    None if level == "edge" else node_time,
                                    fetch_whole_max=fw)
                    draws.append([csc.sample(nodes, q_ts, 5, flags, 3, 5 * len(nodes))
                                  for flags in (_core.NEIGHBOR_LAST, 0)])
                row, _, ei = draws[0][0]
                take = np.minimum(cut, 5)
                want = np.concatenate([np.arange(indptr[v] + c - t, indptr[v] + c)
                                       for v, c, t in zip(nodes, cut, take)])
                what = (f"{tag} C search budget ({level}-level, "
                        f"{int(np.isin(nodes, remote).sum())} remote long lists)")
                check(np.array_equal(row, np.repeat(np.arange(len(nodes)), take)) and
                      np.array_equal(ei, want), f"{what}: not the latest eligible entries")
                check(all(np.array_equal(a, b) for x, y in zip(*draws)
                          for a, b in zip(x, y)),
                      f"{what}: draws differ from every list read")
        finally:
            core.free()


def main(widths=None, transports=("auto", "rma")):
    """Every case for each width (default: every width dividing the rank count; the
    command line may name some) and both transports (``<width>:<transport>`` on the
    command line: that one; the quick put goes with auto, the range-wise one with
    rma)."""
    data = make_graph()
    for store, tag, transport in each_store(widths, transports):
        rangewise = transport == "rma"
        if rangewise:
            fs, gs = put_rangewise(store, data, "g")
        else:
            fs, gs = dpyg.from_pyg(store, data, name="g")
        homogeneous(store, data, fs, gs, tag)
        errors(store, data, fs, gs, tag)
        for level in ("edge", "node"):
            ta = "edge_time" if level == "edge" else "time"
            name = f"t{level}"
            if rangewise:
                tfs, tgs = put_rangewise(store, data, name, time_attr=ta)
            else:
                tfs, tgs = dpyg.from_pyg(store, data, name=name, time_attr=ta)
            for strategy in ("all", "uniform", "last", "last_replace"):
                temporal(store, data, tag, level, strategy, tfs, tgs)
        hetero(store, tag, rangewise)
        chunked(store, data, tag, rangewise)
        orders(store, tag, rangewise)
        empty_graphs(store, tag)
        c_zero_fanout(store.width, transport, tag)
        c_temporal_pieces(store.width, transport, tag)
        c_search_budget(store.width, transport, tag)


if __name__ == "__main__":
    import sys
    argv, only = sys.argv[1:], ("auto", "rma")
    if argv and ":" in argv[0]:  # "2:rma": width 2, that transport only
        width, transport = argv[0].split(":")
        argv, only = [width], (transport,)
    run_main(main, widths_from(argv), only)
