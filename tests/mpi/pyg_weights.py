"""MPI program: weighted neighbour sampling of ddstore.pyg (``GraphStore(weight_attr=...)``,
``NeighborSampler(weight_attr=...)``) against the exact laws, on 1-3 ranks.

Run under mpiexec (inside ``timeout``) on 1-3 ranks (``pyg_weights.py [width ...]``), or
imported and run in-process on one rank (tests/test_pyg_weights.py).  For every width
dividing the rank count (or those named) and both transports (auto, and rma: every
other member's rows and weights read with MPI_Get), the graph put by the quick path
(``from_pyg``) with auto and range-wise (``put_range`` / ``put_edge_range``) with rma:

- the laws, by chi-square at fixed seeds (0.999 quantiles), for a list held by the
  first member and one held by the last (local and remote at width > 1): with
  replacement the draws' counts against ``k * T * w / sum(w)``; without replacement the
  drawn 2-subsets' counts against their exact probabilities under successive draws
  without replacement in proportion to the weights left, enumerated by brute force;
- zero weights, pyg-lib's rule: never drawn with replacement; without, ``k = -1`` and
  ``k >=`` a list's length take the whole list, each edge once, and a list with fewer
  than ``k`` positive weights takes them all and fills up with zero-weight edges (in
  every batch of ``NeighborLoader`` too);
- temporal (edge-level time) + weighted: only eligible (``t <= seed time``) positive
  edges, with the law among the eligible ones (chi-square, both modes);
- hetero + weighted: the weighted edge type follows its law, the type without the
  attribute is sampled uniformly (chi-square);
- bad weights (NaN, negative, infinite) refused at put on every rank, naming the edge
  id and its value, with the store's variables unchanged; a homogeneous graph without
  the attribute, a sampler whose ``weight_attr`` is not the graph store's, and
  ``temporal_strategy="last"`` with weights, refused;
- ``put_edge_weights`` on a graph put without weights: the same laws;
- the weights kept in CSC order (and in the out-lists) as float32 for float32 and
  float16 attributes, float64 otherwise (dtype checked); their draws byte for byte
  those of the same values stored as float64, forward and backward, with and without
  replacement; bad float32 weights refused naming the edge;
- the weights held once: the edge attribute removed (``fs.remove_tensor``) once the
  edges are put, weighted batches (forward, and backward with out-lists built after the
  removal, from the CSC copy) byte for byte those drawn before; the attribute's variable
  gone; ``edge_features`` naming it refused.
"""
import itertools

import numpy as np
import torch
from mpi4py import MPI

from _harness import check, each_store, expect_error, run_main, widths_from

from ddstore import DDStoreValueError, partition  # noqa: E402
from ddstore import pyg as dpyg  # noqa: E402
from ddstore.pyg._common import edge_var  # noqa: E402
from torch_geometric.data import Data, HeteroData  # noqa: E402
from torch_geometric.loader import NeighborLoader  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
N, E = 30, 200
# the weighted list of nodes 0 and N - 1: edges 0-5 and 6-11 from sources 10-15
W0 = [1.0, 0.0, 2.0, 3.0, 0.5, 4.0]
T0 = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # edge times of those lists
CHI2_999 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 9: 27.877}
TRIALS = 3000


def make_graph():
    g = torch.Generator().manual_seed(5)
    src = torch.randint(0, N, (E,), generator=g)
    dst = torch.randint(1, N - 1, (E,), generator=g)
    w = torch.rand(E, generator=g, dtype=torch.float64) * 3
    w[torch.rand(E, generator=g) < 0.3] = 0.0
    t = torch.randint(0, 20, (E,), generator=g).double()
    for first, node in ((0, 0), (6, N - 1)):
        src[first:first + 6] = torch.arange(10, 16)
        dst[first:first + 6] = node
        w[first:first + 6] = torch.tensor(W0, dtype=torch.float64)
        t[first:first + 6] = torch.tensor(T0, dtype=torch.float64)
    return Data(x=torch.randn(N, 3, generator=g), edge_index=torch.stack([src, dst]),
                edge_weight=w, edge_time=t, num_nodes=N)


def put(store, data, name, rangewise, time_attr=None, weights=None):
    """The graph with weights ``weights`` (default: the data's), quick or range-wise."""
    w = data.edge_weight if weights is None else weights
    if not rangewise:
        d = data.clone()
        d.edge_weight = w
        return dpyg.from_pyg(store, d, name=name, time_attr=time_attr,
                             weight_attr="edge_weight")
    fs = dpyg.FeatureStore(store, name)
    gs = dpyg.GraphStore(store, name, time_attr=time_attr, weight_attr="edge_weight")
    with store.transaction(f"put {name}"):  # all or nothing, as from_pyg
        lo, hi = partition(N, size, rank)
        fs.put_range(data.x[lo:hi], (lo, hi), None, "x")
        lo, hi = partition(E, size, (rank + 1) % size)  # any tiling, not rank order
        fs.put_range(w[lo:hi], (lo, hi), dpyg.EDGES, "edge_weight")
        fs.put_range(data.edge_time[lo:hi], (lo, hi), dpyg.EDGES, "edge_time")
        gs.put_edge_range(data.edge_index[:, lo:hi], (lo, hi), None, size=(N, N))
    return fs, gs


def chi2(counts, expected):
    counts, expected = np.asarray(counts, float), np.asarray(expected, float)
    return float(((counts - expected) ** 2 / expected).sum())


def subset_law(weights, k):
    """Brute force: {sorted index k-tuple: probability} of k successive draws without
    replacement, each in proportion to the weights left (positive weights only)."""
    law = {}
    idx = [i for i, w in enumerate(weights) if w > 0]
    for order in itertools.permutations(idx, k):
        p, left = 1.0, sum(weights)
        for i in order:
            p *= weights[i] / left
            left -= weights[i]
        key = tuple(sorted(order))
        law[key] = law.get(key, 0.0) + p
    return law


def check_law(edges, base, weights, k, replace, what):
    """``edges``: [TRIALS, k] edge ids drawn from the list of edges ``base + i``
    (weights ``weights``): chi-square against the law."""
    pos = edges - base
    check(bool(((pos >= 0) & (pos < len(weights))).all()), f"{what}: edge off the list")
    pos = pos.clip(0, len(weights) - 1)
    w = np.asarray(weights)
    check(bool((w[pos] > 0).all()), f"{what}: a zero-weight edge was drawn")
    if replace:
        counts = np.bincount(pos.reshape(-1), minlength=len(w))[w > 0]
        exp = pos.size * w[w > 0] / w.sum()
        df = int((w > 0).sum()) - 1
    else:
        law = subset_law(list(w), k)
        keys = sorted(law)
        got = {}
        for r in np.sort(pos, axis=1):
            got[tuple(r.tolist())] = got.get(tuple(r.tolist()), 0) + 1
        check(set(got) <= set(keys) and all(len(set(r)) == k for r in pos.tolist()),
              f"{what}: a repeated or impossible subset {sorted(set(got) - set(keys))}")
        counts = [got.get(key, 0) for key in keys]
        exp = [pos.shape[0] * law[key] for key in keys]
        df = len(keys) - 1
    stat = chi2(counts, exp)
    check(stat < CHI2_999[df], f"{what}: chi2 {stat:.2f} >= {CHI2_999[df]} (df {df}); "
                               f"counts {[int(c) for c in counts]}, expected "
                               f"{[round(float(e), 1) for e in exp]}")


def laws(gs, tag):
    for node, base in ((0, 0), (N - 1, 6)):
        for replace in (False, True):
            s = dpyg.NeighborSampler(gs, [2], replace=replace, seed=11 + node,
                                     weight_attr="edge_weight")
            out = s._sample(torch.full((TRIALS,), node, dtype=torch.long))
            what = f"{tag} law node {node} replace={replace}"
            check(out.edge.numel() == 2 * TRIALS, f"{what}: {out.edge.numel()} edges")
            if out.edge.numel() == 2 * TRIALS:
                check_law(out.edge.numpy().reshape(TRIALS, 2), base, W0, 2, replace, what)


def zeros_and_all(data, fs, gs, tag):
    src, dst = data.edge_index
    w = data.edge_weight
    positive = {v: sorted(((dst == v) & (w > 0)).nonzero().view(-1).tolist())
                for v in range(N)}
    listed = {v: sorted((dst == v).nonzero().view(-1).tolist()) for v in range(N)}
    for k in (-1, 50, 6, 5, 3):
        s = dpyg.NeighborSampler(gs, [k], seed=3, weight_attr="edge_weight")
        out = s._sample(torch.arange(N))
        got = {v: [] for v in range(N)}
        for e, c in zip(out.edge.tolist(), out.col.tolist()):
            got[int(out.node[c])].append(e)
        for v in range(N):
            g = sorted(got[v])
            if k < 0 or len(listed[v]) <= k:
                check(g == listed[v], f"{tag} k={k} node {v}: {g} != its whole list "
                                      f"{listed[v]}")
            else:  # k distinct of its list; every positive one when they are <= k
                check(len(set(g)) == k and set(g) <= set(listed[v]) and (
                    set(positive[v]) <= set(g) if len(positive[v]) <= k else
                    set(g) <= set(positive[v])), f"{tag} k={k} node {v}: {g}")
    for replace in (False, True):
        s = dpyg.NeighborSampler(gs, [4, 3], replace=replace, seed=4,
                                 weight_attr="edge_weight")
        loader = NeighborLoader((fs, gs), num_neighbors=[4, 3], input_nodes=torch.arange(N),
                                batch_size=7, neighbor_sampler=s)
        drawn = 0
        for b in loader:
            what = f"{tag} loader replace={replace}"
            e = b.e_id
            drawn += e.numel()
            check(torch.equal(b.n_id[b.edge_index[0]], src[e]) and
                  torch.equal(b.n_id[b.edge_index[1]], dst[e]), f"{what}: wrong edges")
            ne = b.num_sampled_edges[0]
            tgt, took_e = b.edge_index[1][:ne], e[:ne]
            for v in range(b.num_sampled_nodes[0]):  # each seed's first hop
                node, mine = int(b.n_id[v]), took_e[tgt == v]
                n_pos, n_all = len(positive[node]), len(listed[node])
                if replace:  # k draws among the positive weights, never a zero
                    ok = mine.numel() == (4 if n_pos else 0) and bool((w[mine] > 0).all())
                else:  # min(k, list) distinct; a zero only once the positives are in
                    ok = (mine.numel() == min(4, n_all) == len(set(mine.tolist())) and
                          (bool((w[mine] > 0).all()) or
                           set(positive[node]) <= set(mine.tolist())))
                check(ok, f"{what}: seed {node} took edges {mine.tolist()} (weights "
                          f"{w[mine].tolist()}; {n_pos} positive of {n_all})")
        check(drawn > 0, f"{tag}: nothing drawn")


def temporal(store, data, tag, rangewise):
    fs, gs = put(store, data, f"t{tag}", rangewise, time_attr="edge_time")
    src, dst = data.edge_index
    w, t = data.edge_weight, data.edge_time
    seed_t = 3.0  # node 0's eligible entries: edges 0-3, weights 1, 0, 2, 3
    for replace in (False, True):
        s = dpyg.NeighborSampler(gs, [2], replace=replace, seed=21, time_attr="edge_time",
                                 weight_attr="edge_weight")
        out = s._sample(torch.zeros(TRIALS, dtype=torch.long),
                        seed_time=torch.full((TRIALS,), seed_t))
        what = f"{tag} temporal law replace={replace}"
        check(out.edge.numel() == 2 * TRIALS, f"{what}: {out.edge.numel()} edges")
        if out.edge.numel() == 2 * TRIALS:
            check_law(out.edge.numpy().reshape(TRIALS, 2), 0, W0[:4], 2, replace, what)
    # every list: -1 takes exactly the eligible edges, zero weights included
    seeds = torch.arange(N)
    times = torch.randint(0, 20, (N,), generator=torch.Generator().manual_seed(2)).double()
    s = dpyg.NeighborSampler(gs, [-1], seed=5, time_attr="edge_time",
                             weight_attr="edge_weight")
    out = s._sample(seeds, seed_time=times)
    for i in range(N):
        want = sorted(((dst == i) & (t <= times[i])).nonzero().view(-1).tolist())
        got = sorted(out.edge[out.node[out.col] == i].tolist()) if out.edge.numel() else []
        check(got == want, f"{tag} temporal -1 seed {i}: {got} != {want}")
    expect_error(DDStoreValueError, ["temporal_strategy='last'"], dpyg.NeighborSampler,
                 gs, [2], time_attr="edge_time", temporal_strategy="last",
                 weight_attr="edge_weight")


def hetero(store, tag, rangewise):
    g = torch.Generator().manual_seed(9)
    na, nb, m = 20, 12, 60
    h = HeteroData()
    h["a"].x = torch.randn(na, 2, generator=g)
    h["b"].x = torch.randn(nb, 2, generator=g)
    ab = torch.stack([torch.randint(0, na, (m,), generator=g),
                      torch.randint(1, nb, (m,), generator=g)])
    ab[:, :6] = torch.stack([torch.arange(6), torch.zeros(6, dtype=torch.long)])
    wab = torch.rand(m, generator=g, dtype=torch.float64)
    wab[:6] = torch.tensor(W0, dtype=torch.float64)
    bb = torch.stack([torch.randint(0, nb, (40,), generator=g),
                      torch.randint(1, nb, (40,), generator=g)])
    bb[:, :5] = torch.stack([torch.arange(1, 6), torch.zeros(5, dtype=torch.long)])
    h["a", "ab", "b"].edge_index, h["a", "ab", "b"].edge_weight = ab, wab
    h["b", "bb", "b"].edge_index = bb
    name = f"h{tag}"
    if not rangewise:
        fs, gs = dpyg.from_hetero(store, h, name=name, weight_attr="edge_weight")
    else:
        fs = dpyg.FeatureStore(store, name)
        gs = dpyg.GraphStore(store, name, weight_attr="edge_weight")
        lo, hi = partition(m, size, rank)
        fs.put_range(wab[lo:hi], (lo, hi), ("a", "ab", "b"), "edge_weight")
        for et in h.edge_types:
            n = h[et].edge_index.shape[1]
            lo, hi = partition(n, size, rank)
            gs.put_edge_range(h[et].edge_index[:, lo:hi], (lo, hi), et, size=(
                h[et[0]].num_nodes, h[et[2]].num_nodes))
    check(gs.weight_attr_of(("a", "ab", "b")) == "edge_weight" and
          gs.weight_attr_of(("b", "bb", "b")) is None, f"{tag} hetero: weighted types")
    for replace in (False, True):
        s = dpyg.NeighborSampler(gs, [2], replace=replace, seed=31,
                                 weight_attr="edge_weight")
        out = s._sample({"b": torch.zeros(TRIALS, dtype=torch.long)})
        what = f"{tag} hetero replace={replace}"
        e = out.edge[("a", "ab", "b")]
        check(e.numel() == 2 * TRIALS, f"{what}: {e.numel()} weighted edges")
        if e.numel() == 2 * TRIALS:
            check_law(e.numpy().reshape(TRIALS, 2), 0, W0, 2, replace, what + " ab")
        e = out.edge[("b", "bb", "b")]
        check(e.numel() == 2 * TRIALS, f"{what}: {e.numel()} unweighted edges")
        if e.numel() == 2 * TRIALS:  # uniform over the 5 edges
            check_law(e.numpy().reshape(TRIALS, 2), 0, [1.0] * 5, 2, replace, what + " bb")


def errors(store, data, tag):
    before = store.variables()
    for bad_eid, value, text in ((17, float("nan"), "nan"), (5, -2.5, "-2.5"),
                                 (E - 1, float("inf"), "inf")):
        w = data.edge_weight.clone()
        w[bad_eid] = value
        w[bad_eid + 1 if bad_eid + 1 < E else 0] = -1.0 if text == "nan" else 1.0
        # NaN at 17 and -1 at 18: the smallest bad edge id is named
        for rangewise in (False, True):
            name = f"bad{tag}{int(rangewise)}"

            def attempt():
                put(store, data, name, rangewise, weights=w)
            expect_error(DDStoreValueError, [f"edge {bad_eid} has weight", text],
                         attempt, agree=True, store=store, agreed=True,
                         what=f"{tag} weight {value} rangewise={rangewise}")
    # the attribute missing on a homogeneous graph
    gs = dpyg.GraphStore(store, f"miss{tag}", weight_attr="nope")
    expect_error(dpyg.UnknownAttributeError, ["weight_attr 'nope' not found"],
                 gs.put_edge_index, data.edge_index, edge_type=None, layout="coo",
                 size=(N, N), agree=True, store=store, agreed=True)
    check(store.variables() == before, f"{tag}: failed puts left variables")


def late(store, data, tag):
    """``put_edge_weights`` on a graph put without weights: the same laws; refused for
    an unknown attribute (nothing changes) and a second time."""
    fs, gs = dpyg.from_pyg(store, data, name=f"late{tag}")
    before = store.variables()
    expect_error(dpyg.UnknownAttributeError, ["'nope' not found"], gs.put_edge_weights,
                 "nope", agree=True, store=store, agreed=True)
    check(gs.weight_attr is None, f"{tag} late: weight_attr set by a failed call")
    gs.put_edge_weights("edge_weight")
    check(gs.weight_attr_of(None) == "edge_weight", f"{tag} late: not weighted")
    laws(gs, f"{tag} late")
    expect_error(DDStoreValueError, ["already weighted"], gs.put_edge_weights,
                 "edge_weight", agree=True, what=f"{tag} late twice")
    check(len(store.variables()) == len(before) + 1, f"{tag} late: variables")


def _draws(gs, seeds, directions, seed, deep):
    """Bytes of weighted draws of ``gs`` from ``seeds`` (fanouts ``[2]``, ``[3]`` with
    replacement, ``[-1]`` and two hops ``deep``; every direction of ``directions``) at
    sampler seed ``seed``."""
    out = []
    for direction in directions:
        for nn, replace in (([2], False), ([3], True), ([-1], False), (deep, False)):
            s = dpyg.NeighborSampler(gs, nn, replace=replace, seed=seed,
                                     weight_attr="edge_weight", sample_direction=direction)
            o = s._sample(seeds)
            out.append(b"".join(x.numpy().tobytes() for x in (o.node, o.row, o.col,
                                                               o.edge)))
    return out


def precisions(store, data, tag, rangewise):
    """The weights kept in CSC order (and in the out-lists) in the attribute's own
    precision: float32 for float32, float16 and bfloat16 attributes (bfloat16 stored as
    its bit pattern, read as its values), float64 for float64 and integer ones; the
    draws byte for byte those of the same values as float64 (with and
    without replacement, fanouts and all, forward and backward, every node seeding);
    bad float32 weights refused naming the edge."""
    w32 = data.edge_weight.float()
    w16 = data.edge_weight.half()
    wint = (data.edge_weight * 4).round().long()
    wb16 = data.edge_weight.bfloat16()  # stored as its bit pattern (int16)
    cases = (("f32", w32, np.float32), ("f32as64", w32.double(), np.float64),
             ("f16", w16, np.float32), ("f16as64", w16.double(), np.float64),
             ("bf16", wb16, np.float32), ("bf16as64", wb16.double(), np.float64),
             ("i64", wint, np.float64), ("i64as64", wint.double(), np.float64))
    drawn = {}
    for label, w, want in cases:
        name = f"prec{tag}{label}"
        fs, gs = put(store, data, name, rangewise, weights=w)
        gs.build_backward()
        for lists in (gs.sampled_lists(None), gs.sampled_lists(None, backward=True)):
            got = store.dtype(lists.vars["w"])
            check(got == want, f"{tag} {label}: weights kept as {got}, expected "
                               f"{np.dtype(want)}")
        drawn[label] = _draws(gs, torch.arange(N).repeat(3), ("forward", "backward"),
                              4, [5, 2])
    for label in ("f32", "f16", "bf16", "i64"):
        check(drawn[label] == drawn[label + "as64"], f"{tag} {label}: draws differ from "
                                                     f"the same values as float64")
    w = w32.clone()
    w[9] = -0.5
    expect_error(DDStoreValueError, ["edge 9 has weight", "-0.5"], put, store, data,
                 f"prec{tag}bad", rangewise, weights=w, agree=True, store=store,
                 agreed=True, what=f"{tag} float32 weight -0.5")
    w[9] = float("nan")
    expect_error(DDStoreValueError, ["edge 9 has weight", "nan"], put, store, data,
                 f"prec{tag}bad", rangewise, weights=w, agree=True, store=store,
                 agreed=True, what=f"{tag} float32 weight NaN")
    w = wb16.clone()  # the value is checked, not its bit pattern (-16384 as int16)
    w[9] = -2.0
    expect_error(DDStoreValueError, ["edge 9 has weight -2.0;"], put, store, data,
                 f"prec{tag}bad", rangewise, weights=w, agree=True, store=store,
                 agreed=True, what=f"{tag} bfloat16 weight -2.0")


def held_once(store, data, tag, rangewise):
    """The weights held once: the edge attribute removed after the put (the sampler reads
    only the CSC copy); the same draws as before, forward and backward (out-lists built
    after the removal take their weights from the CSC copy); the loader still samples;
    ``edge_features`` naming the removed attribute refused."""
    seeds = torch.arange(N).repeat(2)
    fs, gs = put(store, data, f"once{tag}", rangewise)
    before = _draws(gs, seeds, ("forward",), 8, [4, 2])
    _, ref_gs = put(store, data, f"onceref{tag}", rangewise)
    ref_gs.build_backward()
    ref = _draws(ref_gs, seeds, ("forward", "backward"), 8, [4, 2])
    var = edge_var(f"once{tag}", None, "edge_weight")
    check(var in store.variables(), f"{tag} held once: {var} not among the variables "
                                    f"{sorted(store.variables())}")
    check(fs.remove_tensor(group_name=dpyg.EDGES, attr_name="edge_weight") is True,
          f"{tag} held once: remove_tensor did not remove the attribute")
    check(var not in store.variables(), f"{tag} held once: {var} still held")
    check(gs.weight_attr_of(None) == "edge_weight", f"{tag} held once: no longer weighted")
    check(_draws(gs, seeds, ("forward",), 8, [4, 2]) == before,
          f"{tag} held once: forward draws changed by the removal")
    gs.build_backward()
    check(store.dtype(gs.sampled_lists(None, backward=True).vars["w"]) == np.float64,
          f"{tag} held once: out-list weights not float64")
    check(_draws(gs, seeds, ("forward", "backward"), 8, [4, 2]) == ref,
          f"{tag} held once: draws differ from those of a store keeping the attribute")
    s = dpyg.NeighborSampler(gs, [3, 2], seed=4, weight_attr="edge_weight")
    loader = NeighborLoader((fs, gs), num_neighbors=[3, 2], input_nodes=torch.arange(N),
                            batch_size=9, neighbor_sampler=s,
                            transform=dpyg.edge_features(fs, ["edge_weight"]))
    expect_error(dpyg.UnknownAttributeError, ["'edge_weight'", "no edge attribute"],
                 lambda: next(iter(loader)), what=f"{tag} held once: edge_features")
    loader.transform = None
    src, dst = data.edge_index
    w = data.edge_weight
    drawn = 0
    for b in loader:  # (what zero weights may be drawn: zeros_and_all)
        drawn += int((w[b.e_id] > 0).sum())
        check(torch.equal(b.n_id[b.edge_index[0]], src[b.e_id]) and
              torch.equal(b.n_id[b.edge_index[1]], dst[b.e_id]),
              f"{tag} held once: a batch with wrong edges")
    check(drawn > 0, f"{tag} held once: no positive-weight edge drawn")
    gs.remove_edge_index(edge_type=None, layout="coo")
    ref_gs.remove_edge_index(edge_type=None, layout="coo")


def main(widths=None):
    data = make_graph()
    for store, tag, transport in each_store(widths):
        rangewise = transport == "rma"
        fs, gs = put(store, data, "g", rangewise)
        check(gs.weight_attr_of(None) == "edge_weight", f"{tag}: not weighted")
        laws(gs, tag)
        zeros_and_all(data, fs, gs, tag)
        expect_error(DDStoreValueError, ["weight_attr='other'"],
                     dpyg.NeighborSampler, gs, [2], weight_attr="other")
        late(store, data, tag)
        temporal(store, data, tag, rangewise)
        hetero(store, tag, rangewise)
        errors(store, data, tag)
        precisions(store, data, tag, rangewise)
        held_once(store, data, tag, rangewise)
        x = fs.get_tensor(group_name=None, attr_name="x")
        check(torch.equal(x, data.x), f"{tag}: x changed")


if __name__ == "__main__":
    import sys
    run_main(main, widths_from(sys.argv[1:]))
