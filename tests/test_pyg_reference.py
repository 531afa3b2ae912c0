"""ddstore.pyg against PyG's own reference behaviour (in-process, one rank).

PyG's ``NeighborLoader`` / ``LinkNeighborLoader`` take the sampling options and build
their own sampler from them; given a ``neighbor_sampler`` they drop those options
silently.  Over ddstore's stores the loader now builds ddstore's sampler from its own
options (``ddstore.pyg.loader_options``), and refuses an option that differs from the
sampler it is given.  Full neighbourhoods (``-1``) are compared with PyG's in-memory
``k_hop_subgraph`` / ``subgraph`` (pyg-lib, which PyG's in-memory loader needs, is not
installed here)."""
import warnings

import numpy as np
import pytest
import torch


def _graph(store, time_attr=None):
    from torch_geometric.data import Data
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(40, 3, generator=g),
                edge_index=torch.randint(0, 40, (2, 150), generator=g),
                t=torch.randint(0, 10, (40,), generator=g))
    return data, dpyg.from_pyg(store, data, name="ref", time_attr=time_attr)


def _batches(loader):
    keys = ("n_id", "e_id", "edge_index", "x", "batch", "input_id")
    return [tuple(getattr(b, k, None) for k in keys) +
            tuple(getattr(b, k, None) for k in ("num_sampled_nodes", "num_sampled_edges"))
            for b in loader]


def _equal(a, b):
    assert len(a) == len(b) and a
    for p, q in zip(a, b):
        for u, v in zip(p, q):
            assert (u is None and v is None) or (
                torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v)


@pytest.mark.parametrize("options", [
    dict(), dict(disjoint=True), dict(subgraph_type="induced"),
    dict(subgraph_type="bidirectional"), dict(replace=True)])
def test_loader_builds_our_sampler_from_its_options(store, options):
    """NeighborLoader((fs, gs), ...) with no neighbor_sampler: PyG's call as is, the
    batches those of our sampler built with the same options (same seed: torch's)."""
    from torch_geometric.loader import NeighborLoader
    from ddstore import pyg as dpyg
    data, (fs, gs) = _graph(store)
    seeds = torch.arange(0, 40, 3)

    def run(**extra):
        torch.manual_seed(5)
        return _batches(NeighborLoader((fs, gs), num_neighbors=[3, 2], batch_size=4,
                                       input_nodes=seeds, **options, **extra))
    ours = run()
    explicit = run(neighbor_sampler=dpyg.NeighborSampler(gs, [3, 2], **options))
    _equal(ours, explicit)
    loader = NeighborLoader((fs, gs), num_neighbors=[3, 2], input_nodes=seeds, **options)
    s = loader.node_sampler
    assert isinstance(s, dpyg.NeighborSampler) and s.fanouts() == [3, 2]
    assert (s.replace, s._disjoint, s.subgraph_type) == (
        options.get("replace", False), options.get("disjoint", False),
        options.get("subgraph_type", "directional"))


def test_full_neighbourhoods_as_pyg(store):
    """-1 fanouts: the nodes of each batch are PyG's k_hop_subgraph of its seeds (in
    edges, flow source_to_target), every edge a stored edge with its e_id, x by n_id;
    induced: the edges are PyG's subgraph of those nodes; directed=False is induced
    (with PyG's deprecation warning)."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.utils import k_hop_subgraph, subgraph
    data, (fs, gs) = _graph(store)
    ei = data.edge_index
    for kw in (dict(), dict(subgraph_type="induced"), dict(directed=False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = NeighborLoader((fs, gs), num_neighbors=[-1, -1], batch_size=5,
                                    input_nodes=torch.arange(0, 40, 4), **kw)
        assert any("'directed' argument" in str(w.message) for w in caught) == \
            ("directed" in kw)
        for b in loader:
            seeds = b.n_id[:b.batch_size]
            want, _, _, _ = k_hop_subgraph(seeds, 2, ei, num_nodes=40)
            assert sorted(b.n_id.tolist()) == want.tolist()
            assert torch.equal(b.x, data.x[b.n_id])
            got = b.n_id[b.edge_index]
            assert torch.equal(got, ei[:, b.e_id])
            if kw:
                sub, _ = subgraph(b.n_id, ei, num_nodes=40)
                key = lambda e: sorted(map(tuple, e.t().tolist()))  # noqa: E731
                assert key(got) == key(sub)


def test_link_loader_builds_our_sampler(store):
    """LinkNeighborLoader((fs, gs), ...) with no neighbor_sampler and binary negatives:
    the batches those of our sampler given explicitly."""
    from torch_geometric.loader import LinkNeighborLoader
    from ddstore import pyg as dpyg
    data, (fs, gs) = _graph(store)
    label_index = (None, data.edge_index[:, :20])

    def run(**extra):
        torch.manual_seed(3)
        extra.setdefault("edge_label_index", label_index)
        extra.setdefault("num_neighbors", [2])
        return [(b.n_id, b.edge_label_index, b.edge_label, b.e_id) for b in
                LinkNeighborLoader((fs, gs), batch_size=6, neg_sampling="binary",
                                   **extra)]
    ours = run()
    explicit = run(neighbor_sampler=dpyg.NeighborSampler(gs, [2]))
    _equal(ours, explicit)
    # links and labels as a list or a numpy array: made tensors, the same batches (PyG
    # failed on them with "'list' object has no attribute 'clone'")
    labels = [float(i % 3) for i in range(20)]
    with_labels = run(edge_label=torch.tensor(labels))
    for links in (label_index[1].tolist(), label_index[1].numpy()):
        _equal(ours, run(edge_label_index=(None, links)))
        _equal(with_labels, run(edge_label_index=(None, links), edge_label=labels))
        _equal(with_labels, run(edge_label=np.array(labels)))
    from ddstore import DDStoreValueError
    with pytest.raises(DDStoreValueError, match=r"LinkNeighborLoader\(replace=True, "
                       r"neighbor_sampler=\.\.\.\): the neighbor_sampler samples with "
                       r"replace=False"):
        LinkNeighborLoader((fs, gs), num_neighbors=[2], edge_label_index=label_index,
                           replace=True, neighbor_sampler=dpyg.NeighborSampler(gs, [2]))
    # the same num_neighbors with fanouts below -1 (all neighbours, as -1) in both: taken,
    # the batches those of -1 (it was refused as "samples with num_neighbors=[-2, 2]",
    # the loader's own value)
    for fan in ([-2, 2], [-5, -3]):
        same = [-1 if k < 0 else k for k in fan]
        got = run(num_neighbors=fan, neighbor_sampler=dpyg.NeighborSampler(gs, fan))
        _equal(got, run(num_neighbors=same, neighbor_sampler=dpyg.NeighborSampler(gs, same)))
    with pytest.raises(DDStoreValueError, match=r"samples with num_neighbors=\[-2, 2\]"):
        LinkNeighborLoader((fs, gs), num_neighbors=[-2, 3], edge_label_index=label_index,
                           neighbor_sampler=dpyg.NeighborSampler(gs, [-2, 2]))
    # (None, None): every edge, in edge-id order, as PyG's in-memory loader takes None
    # over a Data (its remote-backend path raised "values expected sparse tensor layout")
    label_index = (None, data.edge_index)
    labels = torch.arange(data.edge_index.shape[1]).float()
    everything = [run(edge_label_index=(None, None), edge_label=labels),
                  run(edge_label=labels)]
    _equal(*everything)
    assert sum(b[1].shape[1] for b in everything[0]) == 2 * data.edge_index.shape[1]
    # a graph put in CSC only: its edges in edge-id order (CSC positions), each batch's
    # positive links mapped back through n_id are the edges their labels number
    order = torch.argsort(data.edge_index[1] * 40 + data.edge_index[0])
    edges = data.edge_index[:, order]
    colptr = torch.searchsorted(edges[1], torch.arange(41))
    csc = dpyg.GraphStore(store, "csc")
    csc.put_edge_index((edges[0], colptr), edge_type=None, layout="csc", size=(40, 40))
    fcsc = dpyg.FeatureStore(store, "csc")
    fcsc.put_tensor(data.x, group_name=None, attr_name="x")
    ids = torch.arange(edges.shape[1])
    seen = 0
    for b in LinkNeighborLoader((fcsc, csc), num_neighbors=[1], batch_size=16,
                                edge_label_index=(None, None), edge_label=ids):
        assert torch.equal(b.n_id[b.edge_label_index], edges[:, b.edge_label])
        seen += b.edge_label.numel()
    assert seen == edges.shape[1]
    h = dpyg.GraphStore(store, "typed")
    h.put_edge_index(edges, edge_type=("a", "r", "a"), layout="coo", size=(40, 40))
    with pytest.raises(DDStoreValueError, match=r"LinkNeighborLoader\(edge_label_index="
                                                r"\(None, None\)\): every edge of a "
                                                r"homogeneous graph, but this graph store "
                                                r"holds edge types \('a', 'r', 'a'\): "
                                                r"pass \(edge_type, None\)"):
        LinkNeighborLoader((dpyg.FeatureStore(store, "typed"), h), num_neighbors=[1],
                           edge_label_index=(None, None))
    with pytest.raises(DDStoreValueError, match=r"graph store holds no edges$"):
        LinkNeighborLoader((dpyg.FeatureStore(store, "none"), dpyg.GraphStore(
            store, "none")), num_neighbors=[1], edge_label_index=(None, None))


def test_temporal_loader_options(store):
    """time_attr and input_time given to the loader alone reach our sampler: every
    sampled node's time is not later than its seed's."""
    from torch_geometric.loader import NeighborLoader
    data, (fs, gs) = _graph(store, time_attr="t")
    seeds = torch.arange(40)
    times = torch.full((40,), 4)
    for strategy in ("uniform", "last"):
        loader = NeighborLoader((fs, gs), num_neighbors=[2, 2], batch_size=8,
                                input_nodes=seeds, input_time=times, time_attr="t",
                                temporal_strategy=strategy)
        assert loader.node_sampler.temporal_strategy == strategy
        sampled = 0
        for b in loader:
            assert b.batch is not None  # temporal: disjoint
            assert (data.t[b.n_id[b.batch_size:]] <= 4).all()
            sampled += b.n_id.numel() - b.batch_size
        assert sampled > 0


@pytest.mark.parametrize("loader_kw, sampler_kw, option", [
    (dict(num_neighbors=[2]), dict(num_neighbors=[-1]), "num_neighbors"),
    (dict(num_neighbors=[2], disjoint=True), dict(num_neighbors=[2]), "disjoint"),
    (dict(num_neighbors=[2], replace=True), dict(num_neighbors=[2]), "replace"),
    (dict(num_neighbors=[2], subgraph_type="induced"), dict(num_neighbors=[2]),
     "subgraph_type"),
    (dict(num_neighbors=[2], directed=False), dict(num_neighbors=[2]), "directed"),
    (dict(num_neighbors=[2], time_attr="t", input_time=torch.zeros(40, dtype=torch.long)),
     dict(num_neighbors=[2]), "time_attr"),
    (dict(num_neighbors=[2], temporal_strategy="last"), dict(num_neighbors=[2]),
     "temporal_strategy"),
    (dict(num_neighbors=[2], weight_attr="w"), dict(num_neighbors=[2]), "weight_attr"),
])
def test_loader_option_differing_from_sampler_refused(store, loader_kw, sampler_kw,
                                                      option):
    """An option the loader was given that its neighbor_sampler does not sample with is
    refused naming it (PyG drops it without a word); the same option passes."""
    from torch_geometric.loader import NeighborLoader
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    _, (fs, gs) = _graph(store)
    sampler = dpyg.NeighborSampler(gs, **sampler_kw)
    with pytest.raises(DDStoreValueError, match=rf"NeighborLoader\({option}=.*the "
                       rf"neighbor_sampler samples with {option}="):
        NeighborLoader((fs, gs), input_nodes=torch.arange(40), neighbor_sampler=sampler,
                       **loader_kw)
    NeighborLoader((fs, gs), input_nodes=torch.arange(40), neighbor_sampler=sampler,
                   **sampler_kw, subgraph_type="directional", disjoint=False)


def test_feature_store_indices_as_pyg_data(store):
    """get_tensor / get_tensor_size / multi_get_tensor with every index PyG's in-memory
    HeteroData takes give its tensors and sizes, a 2-D (or 3-D) integer index included
    (rows shaped as the index, as tensor[index]); a boolean mask of more than one
    dimension is refused as torch refuses it (an IndexError)."""
    from torch_geometric.data import HeteroData, TensorAttr
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(10, 3, generator=g), torch.arange(10)
    ref = HeteroData()
    ref["a"].x, ref["a"].y = x, y
    fs = dpyg.FeatureStore(store, "idx")
    fs.put_tensor(x, group_name="a", attr_name="x", index=None)
    fs.put_tensor(y, group_name="a", attr_name="y", index=None)
    for idx in (None, slice(None), slice(2, 8, 2), slice(-3, None), 4, torch.tensor(5),
                torch.tensor([3, 1, 1, 9]), [3, 1, 9], torch.tensor([-1, -10]),
                torch.arange(10) % 3 == 0, torch.tensor([], dtype=torch.long),
                torch.tensor([[1, 2], [3, 4]]), torch.tensor([[[1], [2]]])):
        for name in ("x", "y"):
            want = ref.get_tensor("a", name, idx)
            got = fs.get_tensor("a", name, idx)
            assert got.dtype == want.dtype and torch.equal(got, want), idx
            assert tuple(fs.get_tensor_size("a", name, idx)) == tuple(want.shape), idx
    attrs = [TensorAttr("a", "x", torch.tensor([[1, 2], [3, 0]])),
             TensorAttr("a", "y", torch.tensor([[0, 9, 0]])), TensorAttr("a", "x", 2),
             TensorAttr("a", "y", slice(1, 3))]
    for got, want in zip(fs.multi_get_tensor(attrs), ref.multi_get_tensor(attrs)):
        assert torch.equal(got, want)
    with pytest.raises(IndexError, match=r"boolean index of shape \(2, 5\) for 10 rows"):
        fs.get_tensor("a", "x", (torch.arange(10) % 2 == 0).view(2, 5))
    with pytest.raises(IndexError, match=r"index 10 \(position 1\) out of range"):
        fs.get_tensor("a", "x", torch.tensor([[1, 10]]))
    from ddstore import DDStoreValueError
    for bad in (slice(None, None, 0), slice(1.5, 3)):  # (were a bare ValueError, TypeError)
        for call in (lambda: fs.get_tensor("a", "x", bad),
                     lambda: fs.update_tensor(torch.zeros(1, 3), group_name="a",
                                              attr_name="x", index=bad)):
            with pytest.raises(DDStoreValueError, match=r"slice index .*: start, stop and "
                                                        r"step must be integers or None"):
                call()


def test_bidirectional_sampler_options_checked(store):
    """A BidirectionalNeighborSampler given to the loader: its options are compared as
    NeighborSampler's (the same pass; another num_neighbors or disjoint is refused)."""
    from torch_geometric.loader import NeighborLoader
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    _, (fs, gs) = _graph(store)
    gs.build_backward()
    sampler = dpyg.BidirectionalNeighborSampler(gs, [2, 1], seed=0)
    b = next(iter(NeighborLoader((fs, gs), num_neighbors=[2, 1], input_nodes=torch.arange(8),
                                 batch_size=4, neighbor_sampler=sampler, disjoint=False)))
    assert b.n_id.numel() >= 4
    for kw in (dict(num_neighbors=[2]), dict(num_neighbors=[2, 1], disjoint=True)):
        option = "disjoint" if "disjoint" in kw else "num_neighbors"
        with pytest.raises(DDStoreValueError, match=rf"NeighborLoader\({option}="):
            NeighborLoader((fs, gs), input_nodes=torch.arange(8), neighbor_sampler=sampler,
                           **kw)
    # time_attr: PyG's exception type, naming this class (the inner backward sampler
    # named sample_direction='backward', an argument the user never passed)
    from ddstore import DDStoreNotImplementedError
    g = torch.Generator().manual_seed(1)
    from torch_geometric.data import Data
    timed = Data(x=torch.randn(10, 2, generator=g), t=torch.arange(10),
                 edge_index=torch.randint(0, 10, (2, 30), generator=g))
    for gstore in (gs, dpyg.from_pyg(store, timed, name="timed", time_attr="t")[1]):
        with pytest.raises(DDStoreNotImplementedError, match=r"BidirectionalNeighborSampler"
                                                             r"\(time_attr='t'\): no "
                                                             r"temporal sampling"):
            dpyg.BidirectionalNeighborSampler(gstore, [2], time_attr="t")


# ids at both ends of int64: a column spanning more than int64 holds
WIDE = torch.tensor([-2 ** 63, -2 ** 63 + 1, -2, -1, 0, 1, 2 ** 63 - 2, 2 ** 63 - 1, 7])


def _ids(small, scale):
    """Ids in [0, 9) as they are, times ``scale``, or (``"wide"``) mapped to WIDE."""
    return WIDE[small] if scale == "wide" else small * scale


def _random_output(g, disjoint, with_ids, calls, scale=1):
    """A homogeneous SamplerOutput of random ids (repeats included, as PyG's merge
    allows them), ``calls`` sampler calls' worth of counts."""
    from torch_geometric.sampler import SamplerOutput
    n = int(torch.randint(0, 12, (1,), generator=g))
    e = int(torch.randint(0, 15, (1,), generator=g)) if n else 0
    node = torch.randint(0, 9, (n,), generator=g)
    node = _ids(node, scale)
    row, col = (torch.randint(0, max(n, 1), (e,), generator=g) for _ in range(2))

    def split(total):
        cuts = torch.sort(torch.randint(0, total + 1, (calls - 1,), generator=g)).values
        return torch.diff(torch.cat([torch.tensor([0]), cuts,
                                     torch.tensor([total])])).tolist()
    out = SamplerOutput(node=node, row=row, col=col,
                        edge=(_ids(torch.randint(0, 6, (e,), generator=g), scale)
                              if with_ids else None),
                        num_sampled_nodes=split(n), num_sampled_edges=split(e))
    if disjoint:  # the first k nodes are the seeds (each its own), as samplers give
        k = int(torch.randint(1, n + 1, (1,), generator=g)) if n else 0
        out.batch = torch.cat([torch.arange(k),
                               torch.randint(0, max(k, 1), (n - k,), generator=g)])
    return out


@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("with_ids", [True, False])
@pytest.mark.parametrize("scale", [1, 1 << 59, "wide"])  # rows int64 cannot fold
def test_merge_gives_pygs_merge_with(disjoint, with_ids, scale):
    """ddstore.pyg._merge.merge_outputs (BidirectionalNeighborSampler's merge and
    collate, by sorting) against PyG's SamplerOutput.merge_with (quadratic: 12.8 GB for
    a 1,024-seed batch), field for field, on 300 pairs of random outputs and on
    chains of three (small ids; ids near 2**62 that take the slower path; ids from
    -2**63 to 2**63 - 1, whose columns shifted to start at 0 would overflow)."""
    from ddstore.pyg._merge import merge_outputs
    g = torch.Generator().manual_seed(7)
    for trial in range(300):
        a, b, c = (_random_output(g, disjoint, with_ids, 1 + trial % 3, scale)
                   for _ in range(3))
        want = a.merge_with(b)
        got = merge_outputs(a, b)
        if want.edge is not None:  # PyG squeezes one edge id to 0-d (_merged undoes it)
            want.edge = want.edge.view(-1)
        want2, got2 = want.merge_with(c), merge_outputs(got, c)
        for w, o in ((want, got), (want2, got2)):
            for key in ("node", "row", "col", "batch"):
                x, y = getattr(w, key), getattr(o, key)
                assert (x is None and y is None) or torch.equal(x.view(-1), y), (trial, key)
            assert (w.edge is None) == (o.edge is None)
            if w.edge is not None:
                assert torch.equal(w.edge.view(-1), o.edge), trial
            assert w.num_sampled_nodes == o.num_sampled_nodes, trial
            assert w.num_sampled_edges == o.num_sampled_edges, trial
