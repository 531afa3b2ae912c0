"""Sampling options of ddstore.pyg.NeighborSampler (issue 26: items 5, 8, 10, 11):
``subgraph_type`` bidirectional / induced, hetero edge types whose source type has no
time attribute, ``sample_direction``, DataLoader workers over a node-local store and
the prefetching thread.  In-process on one rank against brute force; the MPI program
tests/mpi/pyg_options.py runs the same checks on 2 ranks, both transports."""
import re

import numpy as np
import pytest
import torch

from conftest import passes_in_process, ranks_program_test


def test_pyg_options_one_rank():
    """The whole MPI program on one rank, in this process (both transports)."""
    passes_in_process("pyg_options", more_than=190)


test_pyg_options_two_ranks = ranks_program_test(
    "pyg_options.py", [2, 3], doc="2 and 3 ranks, width = ranks, transports auto and rma "
    "(every other member read by MPI_Get).")


def _graph(store):
    from torch_geometric.data import Data
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(20, 2, generator=g),
                edge_index=torch.randint(0, 20, (2, 80), generator=g))
    return dpyg.from_pyg(store, data, name="g")


def test_option_errors(store):
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    fs, gs = _graph(store)
    with pytest.raises(DDStoreValueError, match=r"subgraph_type must be one of "
                       r"\['directional', 'bidirectional', 'induced'\], got 'both'"):
        dpyg.NeighborSampler(gs, [2], subgraph_type="both")
    with pytest.raises(DDStoreValueError, match="induced.*disjoint=True"):
        dpyg.NeighborSampler(gs, [2], subgraph_type="induced", disjoint=True)
    with pytest.raises(DDStoreValueError, match="sample_direction must be 'forward' or "
                       "'backward', got 'up'"):
        dpyg.NeighborSampler(gs, [2], sample_direction="up")
    with pytest.raises(DDStoreValueError, match=r"holds no out-lists of edge type\(s\) "
                       r"None: build them first with GraphStore\.build_backward\(\)"):
        dpyg.NeighborSampler(gs, [2], sample_direction="backward")
    assert gs.build_backward() == [None]
    s = dpyg.NeighborSampler(gs, [2], sample_direction="backward", seed=1)
    out = s._sample(torch.tensor([0, 1]))
    src, dst = (x.numpy() for x in gs.get_edge_index(None, "coo"))
    assert (src[out.edge.numpy()] == out.node.numpy()[out.row.numpy()]).all()
    assert (dst[out.edge.numpy()] == out.node.numpy()[out.col.numpy()]).all()
    with pytest.raises(DDStoreValueError, match="num_neighbors must be a list of fanouts"):
        dpyg.BidirectionalNeighborSampler(gs, {("a", "r", "b"): [2]})
    from torch_geometric.sampler.base import SubgraphType
    s = dpyg.NeighborSampler(gs, [2], subgraph_type=SubgraphType.induced)
    assert s.subgraph_type == "induced"


def test_loader_seeds_checked_when_built(store):
    """Over our stores a loader with no seeds, or with per-seed values (times, labels)
    of another length than its seeds, is refused as it is built, naming the argument
    and both lengths (PyG fails with a bare ``assert``, or an IndexError at the first
    batch); the same loaders with matching lengths build and run."""
    from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
    from ddstore import DDStoreValueError
    fs, gs = _graph(store)
    label = gs.get_edge_index(None, "coo")
    label = torch.stack(list(label))[:, :10]
    for loader, kw, message in [
            (NeighborLoader, {}, r"NeighborLoader over ddstore's \(FeatureStore, "
                                 r"GraphStore\): input_nodes is required"),
            (NeighborLoader, dict(input_nodes=torch.arange(10), input_time=torch.ones(3)),
             r"NeighborLoader\(input_time=...\): 3 values for 10 seeds in input_nodes"),
            (NeighborLoader, dict(input_nodes=torch.arange(20) < 4,
                                  input_time=torch.ones(5)),
             r"5 values for 4 seeds in input_nodes"),
            (LinkNeighborLoader, dict(edge_label_index=label),
             r"edge_label_index must be \(edge_type, \[2, n\] tensor\), \(None, tensor\) "
             r"for a homogeneous graph"),
            (LinkNeighborLoader, dict(edge_label_index=(None, label), edge_label=torch.ones(3)),
             r"LinkNeighborLoader\(edge_label=...\): 3 values for 10 seeds in "
             r"edge_label_index"),
            (LinkNeighborLoader, dict(edge_label_index=(None, label),
                                      edge_label_time=torch.ones(11)),
             r"LinkNeighborLoader\(edge_label_time=...\): 11 values for 10 seeds"),
            (LinkNeighborLoader, {}, r"edge_label_index is required"),
            # a 1-D index: PyG's first batch raised a bare IndexError
            (LinkNeighborLoader, dict(edge_label_index=(None, torch.arange(50))),
             r"edge_label_index must hold a \[2, n\] tensor of source and destination "
             r"ids, got shape \[50\]"),
            (LinkNeighborLoader, dict(edge_label_index=(None, torch.zeros(3, 4).long())),
             r"got shape \[3, 4\]")] + [
            # a node type, or none, on a homogeneous graph: PyG's bare assert or TypeError
            (NeighborLoader, dict(input_nodes=seeds), r"NeighborLoader\(input_nodes=...\): "
             r".* names a node type, or no nodes, but the graph is homogeneous: give its "
             r"node ids or a boolean mask") for seeds in (
                "paper", (None, None), ("paper", torch.arange(3)), ("paper", None))]:
        with pytest.raises(DDStoreValueError, match=message):
            loader((fs, gs), num_neighbors=[2], batch_size=4, **kw)
    # (None, ids) and (None, mask) on a homogeneous graph: the ids, as a bare tensor
    for seeds in (torch.arange(4), torch.arange(20) < 4):
        batch = next(iter(NeighborLoader((fs, gs), num_neighbors=[2], batch_size=4,
                                         input_nodes=(None, seeds))))
        assert batch.input_id.tolist() == [0, 1, 2, 3]
        assert batch.n_id[:4].tolist() == [0, 1, 2, 3]
    batch = next(iter(NeighborLoader((fs, gs), num_neighbors=[2], batch_size=4,
                                     input_nodes=torch.arange(20) < 4)))
    assert batch.input_id.tolist() == [0, 1, 2, 3]
    batch = next(iter(LinkNeighborLoader((fs, gs), num_neighbors=[2], batch_size=10,
                                         edge_label_index=(None, label),
                                         edge_label=torch.arange(10.))))
    assert batch.edge_label.tolist() == [float(i) for i in range(10)]
    # labels of any dtype and trailing shape, one per link (a bool label was counted as
    # its True entries, a [n, 2] one by its last dimension), as PyG takes them
    for lab in (torch.arange(10) % 3 == 0, torch.arange(20.).view(10, 2)):
        batch = next(iter(LinkNeighborLoader((fs, gs), num_neighbors=[2], batch_size=10,
                                             edge_label_index=(None, label),
                                             edge_label=lab)))
        assert torch.equal(batch.edge_label, lab)
    # links that do not fit the graph: refused when built, naming the row and column
    for bad, message in [
            ((("a", "to", "a"), label), r"edge type \('a', 'to', 'a'\); the graph is "
                                        r"homogeneous: give \(None, \[2, n\] ids\)"),
            ((None, torch.tensor([[0, 1, 2], [3, 20, 4]])),
             r"destination id 20 \(row 1, column 1\) out of range \[0, 20\)$"),
            ((None, torch.tensor([[0, -1], [3, 4]])),
             r"source id -1 \(row 0, column 1\) out of range \[0, 20\)$")]:
        with pytest.raises(DDStoreValueError, match=r"LinkNeighborLoader\(edge_label_index="
                                                    r"\.\.\.\): " + message):
            LinkNeighborLoader((fs, gs), num_neighbors=[2], batch_size=4,
                               edge_label_index=bad)
    # float ids and seed nodes that do not fit: refused when built too (they failed at
    # the first batch naming neither argument, or at the batch holding the bad id, on
    # the rank holding it)
    with pytest.raises(DDStoreValueError, match=re.escape(
            "LinkNeighborLoader(edge_label_index=...) must hold integer node ids, got "
            "dtype torch.float32 of shape [2, 10]")):
        LinkNeighborLoader((fs, gs), num_neighbors=[2], batch_size=4,
                           edge_label_index=(None, label.float()))
    for seeds, message in [
            (torch.tensor([0, 1.5]), " must hold integer node ids, got dtype torch.float32"),
            (torch.tensor([0] * 9 + [20]), ": node id 20 (position 9) out of range [0, 20)"),
            (torch.tensor([-1]), ": node id -1 (position 0) out of range [0, 20)"),
            (torch.arange(19) < 4, ": a boolean mask of shape [19] for 20 nodes; a mask "
                                   "has one entry per node"),
            ((torch.arange(20) < 4).numpy(), ": a boolean mask must be a torch.Tensor (PyG "
                                             "reads a ndarray of bools as the node ids 0"),
            (torch.tensor([[0, 1], [2, 3]]), ": node ids of shape [2, 2]; give a 1-D"),
            (torch.tensor(3), ": node ids of shape []; give a 1-D")]:
        with pytest.raises(DDStoreValueError, match=re.escape(
                "NeighborLoader(input_nodes=...)" + message)):
            NeighborLoader((fs, gs), num_neighbors=[2], batch_size=4, input_nodes=seeds)
    # seeds as a list or a numpy array, as over in-memory data (PyG's remote path failed
    # on them with a bare assert): the batches of the same ids as a tensor
    first = [next(iter(NeighborLoader((fs, gs), num_neighbors=[2], batch_size=3,
                                      input_nodes=seeds))).n_id[:3].tolist()
             for seeds in ([4, 0, 7], np.array([4, 0, 7]), torch.tensor([4, 0, 7]))]
    assert first == [[4, 0, 7]] * 3, first
    # no seed at all, as an empty float tensor (an empty list is float64 in numpy): as PyG
    assert len(NeighborLoader((fs, gs), num_neighbors=[2], batch_size=2,
                              input_nodes=torch.tensor([]))) == 0
    # ids of any integer dtype, unsigned included (torch has no `<` for uint16-64: the
    # range check failed with its NotImplementedError)
    for dt in (torch.uint8, torch.int16, torch.uint16, torch.uint32, torch.uint64):
        batch = next(iter(NeighborLoader((fs, gs), num_neighbors=[2], batch_size=2,
                                         input_nodes=torch.tensor([3, 7], dtype=dt))))
        assert batch.n_id[:2].tolist() == [3, 7], dt
        batch = next(iter(LinkNeighborLoader((fs, gs), num_neighbors=[2], batch_size=2,
                                             edge_label_index=(None, label[:, :2].to(dt)))))
        assert torch.equal(batch.n_id[batch.edge_label_index], label[:, :2]), dt


def _hetero(with_time=False):
    """users, items and tags; user 11 isolated, an edge type without edges, reverse
    types: PyG's ToUndirected."""
    import torch_geometric.transforms as T
    from torch_geometric.data import HeteroData
    g = torch.Generator().manual_seed(0)
    d = HeteroData()
    d["user"].x = torch.randn(12, 3, generator=g)
    d["item"].x = torch.randn(10, 2, generator=g)
    d["tag"].num_nodes = 5
    d["user", "buys", "item"].edge_index = torch.stack(
        [torch.randint(0, 11, (30,), generator=g), torch.randint(0, 10, (30,), generator=g)])
    d["item", "has", "tag"].edge_index = torch.stack(
        [torch.randint(0, 10, (8,), generator=g), torch.randint(0, 5, (8,), generator=g)])
    d["tag", "describes", "user"].edge_index = torch.zeros(2, 0, dtype=torch.long)
    if with_time:
        for t, n in (("user", 12), ("item", 10), ("tag", 5)):
            d[t].time = torch.randint(0, 10, (n,), generator=g)
    return T.ToUndirected()(d)


def test_hetero_links_checked_when_built_and_numbered_as_pyg_lib(store):
    """Hetero seed links: no edge type or a relation name alone (PyG failed at the
    first batch on None, or dumped the tensor), ids beyond their node type, and
    negatives of a node-time sampler without ``edge_label_time`` (PyG's bare assert)
    are refused when the loader is built; disjoint subgraphs are numbered in the order
    of the seed types, source type first, as pyg-lib numbers them (they followed the
    store's node types: a link from items to users had them the other way round)."""
    from torch_geometric.loader import LinkNeighborLoader
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    d = _hetero()
    fs, gs = dpyg.from_hetero(store, d, name="h")
    buys = d["user", "buys", "item"].edge_index[:, :4]
    for bad, message in [
            ((None, buys), r"edge type None; the graph is heterogeneous: give "
                           r"\(edge_type, \[2, n\] ids\)"),
            (("buys", buys), r"edge type 'buys'; the graph is heterogeneous"),
            ((("user", "likes", "song"), buys), r"has node type 'song', unknown to graph store"),
            ((("user", "buys", "item"), buys + torch.tensor([[0], [6]])),
             r"destination id 1[0-5] \(row 1, column \d\) out of range \[0, 10\) of node "
             r"type 'item'")]:
        with pytest.raises(DDStoreValueError, match=message):
            LinkNeighborLoader((fs, gs), num_neighbors=[-1], batch_size=4,
                               edge_label_index=bad)
    for et in (("user", "buys", "item"), ("item", "rev_buys", "user")):
        eli = d[et].edge_index[:, :4]
        for neg, n_neg in ((None, 0), (dict(mode="binary", amount=0.5), 2),
                           (dict(mode="binary", amount=1), 4)):
            b = next(iter(LinkNeighborLoader((fs, gs), num_neighbors=[-1], batch_size=4,
                                             edge_label_index=(et, eli), disjoint=True,
                                             neg_sampling=neg)))
            n_src = n_dst = 4 + n_neg
            # pyg-lib: subgraph ids run over the sources, then the destinations; PyG
            # folds them by the number of positives
            assert b[et[0]].batch[:n_src].tolist() == (torch.arange(n_src) % 4).tolist()
            assert b[et[2]].batch[:n_dst].tolist() == \
                ((n_src + torch.arange(n_dst)) % 4).tolist()
    store.remove(*[v for v in store.variables() if v.startswith("h")])
    d = _hetero(with_time=True)
    fs, gs = dpyg.from_hetero(store, d, name="ht", time_attr="time")
    with pytest.raises(DDStoreValueError, match=r"LinkNeighborLoader\(neg_sampling=...\): "
                                                r"the sampler has node times \('time'\) .* "
                                                r"give edge_label_time"):
        LinkNeighborLoader((fs, gs), num_neighbors=[2], batch_size=4, time_attr="time",
                           edge_label_index=(("user", "buys", "item"), buys),
                           neg_sampling="binary")


def test_hetero_link_edge_type_given_as_a_pair(store):
    """``edge_label_index`` with a ``(source, destination)`` edge type, as
    ``HeteroData`` reads it: alone (all its edges), with ids, or with None, as a tuple
    or a list, the graph's only edge type between the two (the batches of the full
    triple); a pair two edge types fit, or none, is refused, naming them."""
    from torch_geometric.data import HeteroData
    from torch_geometric.loader import LinkNeighborLoader
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    d = _hetero()
    fs, gs = dpyg.from_hetero(store, d, name="h")
    et = ("user", "buys", "item")
    eli = d[et].edge_index

    def links(index):
        loader = LinkNeighborLoader((fs, gs), num_neighbors=[-1], batch_size=4,
                                    edge_label_index=index)
        return [(b[et].edge_label_index.tolist(), b["user"].n_id.tolist()) for b in loader]
    want = links((et, eli))
    assert len(want) == (eli.shape[1] + 3) // 4
    for index in [("user", "item"), (("user", "item"), eli), (("user", "item"), None),
                  (et, None), et, ["user", "item"], (["user", "item"], eli)]:
        assert links(index) == want, index
    two = HeteroData()
    two["paper"].x = torch.arange(6.).view(6, 1)
    two["paper", "cites", "paper"].edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    two["paper", "refs", "paper"].edge_index = torch.tensor([[3, 4], [4, 5]])
    fs2, gs2 = dpyg.from_hetero(store, two, name="two")
    for pair, other, how in ((("paper", "paper"), "paper", "fits 2 of its edge types"),
                             (["paper", "book"], "book", "fits none of its edge types"),
                             ((("paper", "book"), None), "book", "fits none of its edge types")):
        with pytest.raises(DDStoreValueError, match=rf"edge type \('paper', '{other}'\) "
                                                    rf"\(source, destination\) {how} "
                                                    rf"\(.*'cites'.*'refs'"):
            LinkNeighborLoader((fs2, gs2), num_neighbors=[-1], batch_size=2,
                               edge_label_index=pair)


@pytest.mark.forks_workers
def test_num_workers_over_a_node_local_store(store):
    """A DataLoader worker (forked child) samples from the inherited shared memory of a
    node-local store: the batches of num_workers=0 (same seed); the sampler cannot be
    pickled (spawn / forkserver workers), naming the fork start method and the
    prefetching thread; prefetch with workers is refused.  (tests/mpi/pyg_workers.py:
    2 ranks, the rma refusal at construction, the forked child's guard.)"""
    from torch_geometric.loader import NeighborLoader
    from ddstore import DDStoreStateError, DDStoreValueError
    from ddstore import pyg as dpyg
    from ddstore.prefetch import prefetch
    fs, gs = _graph(store)

    def batches(num_workers):
        sampler = dpyg.NeighborSampler(gs, [2, 2], seed=3)
        return [(b.n_id, b.edge_index, b.x) for b in NeighborLoader(
            (fs, gs), num_neighbors=[2, 2], input_nodes=torch.arange(20), batch_size=5,
            neighbor_sampler=sampler, num_workers=num_workers)]
    plain, forked = batches(0), batches(1)
    assert len(plain) == len(forked) == 4
    assert all(torch.equal(u, v) for p, q in zip(plain, forked) for u, v in zip(p, q))
    import pickle
    sampler = dpyg.NeighborSampler(gs, [2], seed=3)
    with pytest.raises(DDStoreStateError, match=r"cannot be pickled.*spawn.*"
                       r"multiprocessing_context='fork'.*ddstore\.prefetch\.prefetch"):
        pickle.dumps(sampler)
    with pytest.raises(DDStoreValueError, match="num_workers=2.*use num_workers=0"):
        prefetch(NeighborLoader((fs, gs), num_neighbors=[2], batch_size=5,
                                input_nodes=torch.arange(20),
                                neighbor_sampler=sampler, num_workers=2))



def test_two_shuffled_loaders_read_ahead_at_once_with_their_own_generators(store):
    """docs/pyg.md's recipe for two loaders read ahead at once (``zip``): each its own
    seeded sampler and, with ``shuffle=True``, its own ``generator=`` (torch's
    ``RandomSampler`` otherwise draws its order from the global generator in the
    read-ahead thread, and the two threads race for it: orders swapped between the
    loaders in 2 of 10 runs of the hostile round).  Then every run gives the plain
    loaders' batches."""
    from torch_geometric.loader import NeighborLoader
    from ddstore import pyg as dpyg
    from ddstore.prefetch import prefetch
    fs, gs = _graph(store)

    def loader(k, seed):
        made = NeighborLoader((fs, gs), num_neighbors=[2, 2], batch_size=4, shuffle=True,
                              input_nodes=torch.arange(20),
                              generator=torch.Generator().manual_seed(100 + seed),
                              neighbor_sampler=dpyg.NeighborSampler(gs, [2, 2], seed=seed))
        return prefetch(made, k) if k else made

    def run(k):
        torch.manual_seed(3)
        return [(a.n_id.tolist(), b.n_id.tolist())
                for a, b in zip(loader(k, 1), loader(k, 2))]
    plain = run(0)
    assert len(plain) == 5 and plain[0][0] != plain[0][1]
    for _ in range(8):
        assert run(2) == plain

def test_untimed_edge_type_put_before_its_time_is_refused(store):
    """An edge type stored without times because its source type had no time attribute
    at put; the attribute put afterwards: the sampler refuses (the lists are not sorted
    by it) instead of sampling that type without the time rule."""
    from torch_geometric.data import HeteroData
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    h = HeteroData()
    h["a"].x, h["b"].x = torch.zeros(4, 1), torch.zeros(3, 1)
    h["a"].time = torch.arange(4)
    h["a", "ab", "b"].edge_index = torch.tensor([[0, 1, 3], [0, 2, 2]])
    h["b", "ba", "a"].edge_index = torch.tensor([[0, 2], [1, 3]])
    fs, gs = dpyg.from_hetero(store, h, name="late", time_attr="time")
    s = dpyg.NeighborSampler(gs, [-1], time_attr="time")  # b has no time: fine
    assert s.is_temporal
    fs.put_tensor(torch.arange(3), group_name="b", attr_name="time")
    with pytest.raises(DDStoreValueError, match=r"edge type \('b', 'ba', 'a'\) was put "
                       r"without times but 'late/node/b/time' exists now"):
        dpyg.NeighborSampler(gs, [-1], time_attr="time")


@pytest.mark.parametrize("level", ["node", "edge"])
def test_bfloat16_times_are_read_as_their_values(store, level):
    """A time attribute stored as bfloat16 (kept as its bit pattern) sorts the lists and
    rules eligibility by its values: the batches equal those of the same times as
    float64, and node-level times are replicated as those values.  (bfloat16 weights:
    ``precisions`` in tests/mpi/pyg_weights.py.)"""
    import numpy as np
    from torch_geometric.data import Data
    from torch_geometric.sampler import NodeSamplerInput
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(3)
    n, m = 30, 200
    ei = torch.randint(0, n, (2, m), generator=g)
    # small integers and halves: exact in bfloat16; negative ones too (sign bit set)
    t = (torch.randint(-40, 40, (n if level == "node" else m,), generator=g) / 2)
    batches = []
    for name, times in (("bf", t.bfloat16()), ("f64", t.double())):
        d = Data(x=torch.zeros(n, 1), edge_index=ei, num_nodes=n)
        fs, gs = dpyg.from_pyg(store, d, name=name)  # untimed; the timed store below
        fs.put_tensor(times, group_name=None if level == "node" else dpyg.EDGES,
                      attr_name="time")
        gst = dpyg.GraphStore(store, name + "t", time_attr="time")
        fst = dpyg.FeatureStore(store, name + "t")
        fst.put_tensor(times, group_name=None if level == "node" else dpyg.EDGES,
                       attr_name="time")
        gst.put_edge_index(ei, edge_type=None, layout="coo", size=(n, n))
        c = gst.sampled_lists(None)
        if level == "node":  # exact in float32: kept as float32
            assert c.node_times.tobytes() == t.float().numpy().tobytes()
        s = dpyg.NeighborSampler(gst, [3, 2], time_attr="time", seed=11)
        o = s.sample_from_nodes(NodeSamplerInput(None, torch.arange(n).repeat(2),
                                                 (torch.arange(2 * n) % 13 - 6.0)))
        batches.append([x.numpy().tobytes() for x in (o.node, o.row, o.col, o.edge)])
        assert o.edge.numel() > 0
    assert batches[0] == batches[1]


@pytest.mark.parametrize("kind", ["small ints", "ints beyond int32", "ints beyond 2**53",
                                  "fractions"])
def test_node_times_replicated_exactly(store, kind):
    """Node-level times are replicated in the narrowest dtype that holds every one
    exactly (integer times int32 or int64, float times float32 or float64), and sample
    as the same times kept per entry (edge-level: int64 or float64).  Every sampled edge
    is no later than its seed, and hop 0 takes min(k, eligible) edges per seed, counted
    by a brute force in exact int64 (seed times 1 apart beyond 2**53, where float64
    would tie them)."""
    import numpy as np
    from torch_geometric.sampler import NodeSamplerInput
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(5)
    n, m = 40, 300
    ei = torch.randint(0, n, (2, m), generator=g)
    base = torch.randint(0, 50, (n,), generator=g)
    t = {"small ints": base, "ints beyond int32": base * 3 + 2 ** 40,
         "ints beyond 2**53": base + 2 ** 62, "fractions": base.double() / 10}[kind]
    want = {"small ints": np.int32, "ints beyond int32": np.int64,
            "ints beyond 2**53": np.int64, "fractions": np.float64}[kind]
    seeds = torch.arange(n).repeat(2)
    seed_t = t[seeds] + (torch.arange(2 * n) % 3 - 1)  # at, before and after
    etime = t[ei[0]].numpy()
    batches = []
    for level in ("node", "edge"):
        fs = dpyg.FeatureStore(store, f"x{level}")
        fs.put_tensor(t if level == "node" else t[ei[0]],
                      group_name=None if level == "node" else dpyg.EDGES, attr_name="t")
        gs = dpyg.GraphStore(store, f"x{level}", time_attr="t")
        gs.put_edge_index(ei, edge_type=None, layout="coo", size=(n, n))
        c = gs.sampled_lists(None)
        if level == "node":
            assert c.node_times.dtype == want and "ts" not in c.vars
            assert np.array_equal(c.node_times, t.numpy())
        else:
            assert store.dtype(c.vars["ts"]) == (np.float64 if kind == "fractions"
                                                 else np.int64)
        s = dpyg.NeighborSampler(gs, [4, 3], time_attr="t", seed=2)
        o = s.sample_from_nodes(NodeSamplerInput(None, seeds, seed_t))
        batches.append([x.numpy().tobytes() for x in (o.node, o.row, o.col, o.edge)])
        root = o.batch[o.col].numpy()
        assert (etime[o.edge.numpy()] <= seed_t.numpy()[root]).all()
        hop0 = o.num_sampled_edges[0]
        got = np.bincount(root[:hop0], minlength=2 * n)
        eligible = [int(((ei[1] == v) & torch.from_numpy(etime <= seed_t[i].numpy()))
                        .sum()) for i, v in enumerate(seeds.tolist())]
        assert got.tolist() == [min(4, e) for e in eligible]
    assert batches[0] == batches[1] and len(batches[0][3]) > 0


def test_node_times_shorter_than_the_sources_are_refused(store):
    """Node-level time with fewer rows than the edges' sources: refused naming the
    attribute, its rows and the largest source (found without a pass over the edges),
    nothing stored; bad times of nodes no edge leaves from are not refused."""
    from ddstore import DDStoreIndexError, DDStoreValueError
    from ddstore import pyg as dpyg
    ei = torch.tensor([[0, 9, 3, 4], [1, 2, 3, 0]])
    fs = dpyg.FeatureStore(store, "short")
    fs.put_tensor(torch.arange(5), group_name=None, attr_name="t")
    gs = dpyg.GraphStore(store, "short", time_attr="t")
    before = store.variables()
    with pytest.raises(DDStoreIndexError, match=r"node time 'short/node/_/t' has 5 rows, "
                                                r"source node 9 is out of range"):
        gs.put_edge_index(ei, edge_type=None, layout="coo", size=(10, 10))
    assert store.variables() == before
    t = torch.tensor([0.0, 1.0, float("nan"), 3.0, 4.0])  # node 2's time is NaN
    for name, sources in (("nan0", [0, 3, 4]), ("nan1", [0, 2, 4])):
        fs2 = dpyg.FeatureStore(store, name)
        fs2.put_tensor(t, group_name=None, attr_name="t")
        gs2 = dpyg.GraphStore(store, name, time_attr="t")
        put = lambda: gs2.put_edge_index(torch.tensor([sources, [1, 2, 2]]),  # noqa: E731
                                         edge_type=None, layout="coo", size=(5, 5))
        if 2 not in sources:  # no edge leaves from node 2: fine
            put()
        else:
            with pytest.raises(DDStoreValueError, match=r"time_attr 't': node 2 has time "
                                                        r"nan; times must be finite"):
                put()
    # an edge-level time: the edge named (as a weight is)
    fs3 = dpyg.FeatureStore(store, "nan2")
    fs3.put_tensor(torch.tensor([0.0, 1.0, float("inf")]), group_name=("_N", "to", "_N"),
                   attr_name="et")
    gs3 = dpyg.GraphStore(store, "nan2", time_attr="et")
    with pytest.raises(DDStoreValueError, match=r"time_attr 'et': edge 2 has time inf; "
                                                r"times must be finite"):
        gs3.put_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), edge_type=None,
                           layout="coo", size=(3, 3))


def _pyg_pairs_and_ids(row, col, edge):
    """Brute force: every (row, col) pair of the edges and their reversals, with the set
    of edge ids that give each pair."""
    ids = {}
    for r, c, e in zip(row.tolist(), col.tolist(), edge.tolist()):
        ids.setdefault((r, c), set()).add(e)
        ids.setdefault((c, r), set()).add(e)
    return ids


@pytest.mark.parametrize("seed", range(6))
def test_to_bidirectional_is_pygs(seed):
    """The C to_bidirectional gives PyG's pairs in PyG's order, every edge id one of the
    pair's own (PyG's reduce='any'), and per-hop counts cleared; hetero as PyG's rules."""
    import warnings
    import numpy as np
    from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput
    from ddstore.pyg.sampler import to_bidirectional
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    e = int(rng.integers(0, 200))
    pairs = np.unique(rng.integers(0, n, (e, 2)), axis=0)  # a sampler never repeats one
    rng.shuffle(pairs)
    row, col = torch.from_numpy(pairs[:, 0].copy()), torch.from_numpy(pairs[:, 1].copy())
    edge = torch.from_numpy(rng.permutation(10 * n + len(pairs))[:len(pairs)])
    node = torch.arange(n)
    out = SamplerOutput(node, row, col, edge, num_sampled_nodes=[1],
                        num_sampled_edges=[len(pairs)])
    ours, pygs = to_bidirectional(out), out.to_bidirectional()
    assert torch.equal(ours.row, pygs.row) and torch.equal(ours.col, pygs.col)
    assert ours.num_sampled_nodes is None and ours.num_sampled_edges is None
    ids = _pyg_pairs_and_ids(row, col, edge)
    assert set(ids) == set(zip(ours.row.tolist(), ours.col.tolist()))
    assert all(e in ids[(r, c)] for r, c, e in
               zip(ours.row.tolist(), ours.col.tolist(), ours.edge.tolist()))
    # hetero: a rev_ pair, a self type, a unique reverse, and a type without reverse
    types = [("a", "to", "b"), ("b", "rev_to", "a"), ("a", "self", "a"),
             ("b", "up", "c"), ("c", "down", "b"), ("a", "lone", "c")]
    rows, cols, edges = {}, {}, {}
    for t in types:
        k = int(rng.integers(0, 40))
        rows[t] = torch.from_numpy(rng.integers(0, 9, k))
        cols[t] = torch.from_numpy(rng.integers(0, 9, k))
        edges[t] = torch.arange(k)
    nodes = {t: torch.arange(9) for t in "abc"}
    hout = HeteroSamplerOutput(nodes, rows, cols, edges)
    with warnings.catch_warnings(record=True) as ours_warn:
        warnings.simplefilter("always")
        ours = to_bidirectional(hout)
    with warnings.catch_warnings(record=True) as pyg_warn:
        warnings.simplefilter("always")
        pygs = hout.to_bidirectional()
    assert [str(w.message) for w in ours_warn] == [str(w.message) for w in pyg_warn]
    assert len(ours_warn) == 1  # ("a", "lone", "c") has no reverse
    for t in types:
        assert torch.equal(ours.row[t], pygs.row[t]), t
        assert torch.equal(ours.col[t], pygs.col[t]), t
        assert (ours.edge[t] is None) == (pygs.edge[t] is None), t
        if ours.edge[t] is not None:
            assert torch.equal(ours.edge[t], pygs.edge[t]), t
    assert hout.row[types[0]] is rows[types[0]]  # the input is left as it was


def test_bidirectional_core_errors():
    import numpy as np
    from ddstore import DDStoreIndexError, DDStoreValueError
    from ddstore._core import bidirectional
    one = np.array([0], dtype=np.int64)
    with pytest.raises(DDStoreIndexError, match=r"outside \[0, 1\)"):
        bidirectional(one, one + 1, one, one, num_nodes=1)
    with pytest.raises(DDStoreValueError, match="both sides"):
        bidirectional(one, one, one, one, edge_id=one)
    r, c, e = bidirectional(one[:0], one[:0], one, one, one[:0], one + 7)
    assert r.tolist() == [0] and c.tolist() == [0] and e.tolist() == [7]


# ------------------------------------------- issue 38: PyG's own sampler tests, ours
def _pygs_four_people(store, how, hetero=False):
    """The graph of PyG's test_sampler_neighbor_sampler: Alice (0) -> Bob (1), Alice ->
    Carol (2), Carol -> Dave (3), with node times; hetero: PyG's person / manager
    version.  ``how``: "data" (from_pyg / from_hetero of PyG's Data) or "remote" (put
    into a FeatureStore and a GraphStore by hand, as PyG's remote case).  Returns the
    graph store, its out-lists built."""
    from torch_geometric.data import Data, HeteroData
    from ddstore import pyg as dpyg
    if not hetero:
        ei, x = torch.tensor([[0, 0, 2], [1, 2, 3]]), torch.tensor([[0], [1], [2], [3]])
        if how == "data":
            _, gs = dpyg.from_pyg(store, Data(edge_index=ei, x=x, time=x.view(-1)),
                                  name=how)
        else:
            fs, gs = dpyg.FeatureStore(store, how), dpyg.GraphStore(store, how)
            fs.put_tensor(x, group_name=None, attr_name="x", index=None)
            fs.put_tensor(x.view(-1), group_name=None, attr_name="time", index=None)
            gs.put_edge_index(ei, edge_type=None, layout="coo", size=(4, 4))
        gs.build_backward()
        return gs
    xs = {"person": torch.tensor([[1], [2], [3]]), "manager": torch.tensor([[0]])}
    eis = {("person", "works_with", "person"): torch.tensor([[1], [2]]),
           ("manager", "leads", "person"): torch.tensor([[0], [1]]),
           ("manager", "works_with", "person"): torch.tensor([[0], [0]])}
    if how == "data":
        h = HeteroData()
        for t, x in xs.items():
            h[t].x, h[t].time = x, x.view(-1)
        for et, ei in eis.items():
            h[et].edge_index = ei
        _, gs = dpyg.from_hetero(store, h, name=how)
    else:
        fs, gs = dpyg.FeatureStore(store, how), dpyg.GraphStore(store, how)
        for t, x in xs.items():
            fs.put_tensor(x, group_name=t, attr_name="x", index=None)
            fs.put_tensor(x.view(-1), group_name=t, attr_name="time", index=None)
        for et, ei in eis.items():
            gs.put_edge_index(ei, edge_type=et, layout="coo",
                              size=(len(xs[et[0]]), len(xs[et[2]])))
    gs.build_backward()
    return gs


@pytest.mark.parametrize("how", ["data", "remote"])
def test_bidirectional_sampler_gives_pygs_expected_output(store, how):
    """PyG's test_bidirectional_neighbor_sampler, data and remote: one hop from Carol,
    four hops of 2 from (Bob, Dave), and the same disjoint, give exactly (str of the
    whole SamplerOutput, as PyG compares) the outputs PyG's test expects."""
    from torch_geometric.sampler import NodeSamplerInput, SamplerOutput
    from ddstore import pyg as dpyg
    gs = _pygs_four_people(store, how)
    t = torch.tensor
    cases = [
        ([1], [2], {}, SamplerOutput(
            node=t([2, 0, 3]), row=t([1, 0]), col=t([0, 2]), edge=t([1, 2]), batch=None,
            num_sampled_nodes=[1, 1, 0, 1], num_sampled_edges=[1, 1],
            metadata=(None, None))),
        ([2, 2, 2, 2], [1, 3], {}, SamplerOutput(
            node=t([1, 3, 0, 2]), row=t([2, 3, 2]), col=t([0, 1, 3]), edge=t([0, 2, 1]),
            batch=None, num_sampled_nodes=[2, 2] + [0] * 14,
            num_sampled_edges=[2, 0, 1, 0, 0, 0, 0, 0], metadata=(None, None))),
        ([2, 2, 2, 2], [1, 3], {"disjoint": True}, SamplerOutput(
            node=t([1, 3, 0, 2, 0, 2, 1, 3]), row=t([2, 3, 4, 2, 4, 5]),
            col=t([0, 1, 3, 5, 6, 7]), edge=t([0, 2, 1, 1, 0, 2]),
            batch=t([0, 1, 0, 1, 1, 0, 1, 0]),
            num_sampled_nodes=[2, 2, 0, 0, 0, 1, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0],
            num_sampled_edges=[2, 0, 1, 1, 0, 2, 0, 0], metadata=(None, None)))]
    for fanouts, seeds, kw, want in cases:
        smp = dpyg.BidirectionalNeighborSampler(gs, fanouts, **kw)
        got = smp.sample_from_nodes(NodeSamplerInput(input_id=None, node=t(seeds)))
        assert str(got) == str(want), (fanouts, kw)


def test_bidirectional_sampler_is_pygs_loop(store):
    """Not disjoint, on a random graph with fanouts: the output equals, field by field,
    that of PyG's own hop loop (``BidirectionalNeighborSampler._sample`` of PyG 2.8)
    run over our two samplers with the same seed; disjoint with one seed: the same
    subgraph, every node of batch 0."""
    from torch_geometric.data import Data
    from torch_geometric.sampler.neighbor_sampler import \
        BidirectionalNeighborSampler as PygBidirectional
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(7)
    data = Data(x=torch.zeros(25, 1), edge_index=torch.randint(0, 25, (2, 90), generator=g))
    _, gs = dpyg.from_pyg(store, data, name="r")
    gs.build_backward()
    compared = 0
    for fanouts in ([2, 3], [-1, -1], [3, 1, 2]):
        for seeds in (torch.tensor([4]), torch.tensor([0, 9, 17]), torch.tensor([5, 5, 6])):
            ours = dpyg.BidirectionalNeighborSampler(gs, fanouts, seed=21)
            theirs = dpyg.BidirectionalNeighborSampler(gs, fanouts, seed=21)
            a = ours._sample(seeds)
            b = PygBidirectional._sample(theirs, seeds)
            for key in ("node", "row", "col", "edge"):
                assert torch.equal(getattr(a, key), getattr(b, key).view(-1)), key
            assert a.num_sampled_nodes == b.num_sampled_nodes
            assert a.num_sampled_edges == b.num_sampled_edges and a.batch is None
            compared += 1
            if seeds.numel() == 1:
                d = dpyg.BidirectionalNeighborSampler(gs, fanouts, seed=21, disjoint=True)
                c = d._sample(seeds)
                for key in ("node", "row", "col", "edge"):
                    assert torch.equal(getattr(a, key), getattr(c, key)), key
                assert torch.equal(c.batch, torch.zeros_like(c.node))
    assert compared == 9


def test_bidirectional_sampler_disjoint_against_brute_force(store):
    """disjoint=True on a random graph, repeated seeds included: with [-1, -1] each
    seed's subgraph is the brute-force ball (every edge touching each hop's frontier);
    with fanouts, each node and edge once per subgraph, edges within their subgraph
    (tests/mpi/pyg_options.py checks the same through NeighborLoader on 1-3 ranks)."""
    from torch_geometric.data import Data
    from pyg_options import disjoint_bidirectional_problems
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(8)
    data = Data(x=torch.zeros(30, 1), edge_index=torch.randint(0, 30, (2, 70), generator=g))
    _, gs = dpyg.from_pyg(store, data, name="r")
    gs.build_backward()
    src, dst = data.edge_index.tolist()
    for fanouts in ([-1, -1], [2, 2], [1, 3, 1]):
        seeds = [3, 11, 3, 20, 0]
        out = dpyg.BidirectionalNeighborSampler(gs, fanouts, disjoint=True,
                                                seed=2)._sample(torch.tensor(seeds))
        bad = disjoint_bidirectional_problems(out.node, out.row, out.col, out.edge,
                                              out.batch, src, dst, seeds, len(fanouts),
                                              exact=fanouts == [-1, -1])
        assert not bad, (fanouts, bad[:3])


@pytest.mark.parametrize("how", ["data", "remote"])
@pytest.mark.parametrize("hetero", [False, True])
def test_backward_temporal_refused_as_pyg(store, how, hetero):
    """PyG's test_neighbor_sampler_backwards_not_supported (data and remote, homogeneous
    and hetero): temporal backward sampling raises a NotImplementedError (also our
    DDStoreValueError), whatever else the store holds."""
    from ddstore import DDStoreNotImplementedError, DDStoreValueError
    from ddstore import pyg as dpyg
    gs = _pygs_four_people(store, how, hetero)
    with pytest.raises(NotImplementedError, match="PyG does not define temporal "
                                                  "backward sampling") as info:
        dpyg.NeighborSampler(gs, [1], sample_direction="backward", time_attr="time")
    assert isinstance(info.value, DDStoreNotImplementedError)
    assert isinstance(info.value, DDStoreValueError)


def test_bidirectional_refusals_are_pygs_types(store):
    """What PyG's BidirectionalNeighborSampler refuses, ours refuses with (an instance
    of) the same type: a dict of fanouts (RuntimeError), a heterogeneous graph and
    temporal sampling (NotImplementedError: time_attr, or seed times given), negative
    sampling in LinkNeighborLoader (RuntimeError, PyG's own code)."""
    from torch_geometric.loader import LinkNeighborLoader
    from torch_geometric.sampler import NodeSamplerInput
    from ddstore import pyg as dpyg
    gs = _pygs_four_people(store, "data")
    with pytest.raises(RuntimeError, match="does not define a dict"):
        dpyg.BidirectionalNeighborSampler(gs, {(None): [1]})
    with pytest.raises(NotImplementedError, match="heterogeneous"):
        dpyg.BidirectionalNeighborSampler(_pygs_four_people(store, "remote", True), [1])
    with pytest.raises(NotImplementedError, match=r"BidirectionalNeighborSampler\(time_"
                                                  r"attr='time'\): no temporal"):
        dpyg.BidirectionalNeighborSampler(dpyg.from_pyg(
            store, _time_graph(), name="tt", time_attr="time")[1], [1], time_attr="time")
    for disjoint in (False, True):
        smp = dpyg.BidirectionalNeighborSampler(gs, [1], disjoint=disjoint)
        with pytest.raises(NotImplementedError, match="does not sample temporally"):
            smp.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.tensor([2]),
                                                   time=torch.tensor([5])))
    fs = dpyg.FeatureStore.open(store, "data")
    loader = LinkNeighborLoader((fs, gs), num_neighbors=[1], batch_size=2,
                                edge_label_index=(None, torch.tensor([[0, 2], [1, 3]])),
                                neg_sampling="binary",
                                neighbor_sampler=dpyg.BidirectionalNeighborSampler(gs, [1]))
    with pytest.raises(RuntimeError, match="negative sampling"):
        next(iter(loader))


def _time_graph():
    from torch_geometric.data import Data
    return Data(x=torch.zeros(4, 1), time=torch.arange(4.),
                edge_index=torch.tensor([[0, 0, 2], [1, 2, 3]]))
