"""Inputs at the edges of the samplers' ranges, found by a hostile round: settings and
fanouts beyond int64, torch times numpy cannot take as they are (bfloat16, a tensor that
requires grad), seed links whose node types the graph does not have, and times whose
range checks overflowed a narrower float (a RuntimeWarning, an error under ``-W
error``).  Each gives the samples of the plain input or a ddstore error naming it."""
import re
import warnings

import numpy as np
import pytest
import torch

from ddstore import DDStoreValueError


def _temporal(store):
    from ddstore import temporal as tg
    return tg.TemporalGraph.from_arrays(store, "g", np.array([0, 0, 1, 0]),
                                        np.array([1, 0, 2, 2]), np.array([1, 2, 3, 4]),
                                        num_nodes=3)


@pytest.mark.parametrize("setting", ["remote_fetch_max", "remote_range_factor"])
def test_temporal_remote_settings_beyond_int64_are_named(store, setting):
    """They were handed to the C handle as they were: a raw ``OverflowError``."""
    from ddstore import temporal as tg
    g = _temporal(store)
    for v in (1 << 63, 1 << 70):
        with pytest.raises(DDStoreValueError, match=rf"{setting}={v} must be an integer "
                                                    rf">= 1.*at most 2\*\*63 - 1"):
            tg.TemporalSampler(g, (2,), **{setting: v})
    ok = tg.TemporalSampler(g, (2,), **{setting: (1 << 63) - 1})  # the largest: works
    assert ok.sample([0], [9])[0].eid.tolist() == [1, 3]  # the 2 latest


@pytest.mark.parametrize("strategy", ["recent", "uniform"])
def test_temporal_fanout_beyond_int64_without_roots(store, strategy):
    """A fanout of 2**63 or more (accepted: it takes what exists) sampled nothing for no
    roots but raised ``OverflowError`` (the buffers were only sized by the degrees when
    roots times fanout exceeded the clamp, 0 roots never did)."""
    from ddstore import temporal as tg
    g = _temporal(store)
    s = tg.TemporalSampler(g, (1 << 63, 1 << 64), strategy)
    blocks = s.sample(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert [(b.num_roots, b.num_edges) for b in blocks] == [(0, 0), (0, 0)]
    b = s.sample([0], [4])[0]  # every eligible edge (strictly before 4) of node 0
    assert sorted(b.eid.tolist()) == [0, 1]


def test_temporal_torch_times_of_any_dtype_or_grad(store):
    """``ts`` as a bfloat16 tensor (numpy has no bfloat16: ``TypeError: Got unsupported
    ScalarType BFloat16``) or one that requires grad (``RuntimeError: Can't call
    numpy()``) samples as its values do."""
    from ddstore import temporal as tg
    g = _temporal(store)
    s = tg.TemporalSampler(g, (3, 2), "uniform", seed=4)
    want = s.sample([0, 1], [3, 4])
    for ts in (torch.tensor([3, 4], dtype=torch.bfloat16),
               torch.tensor([3.0, 4.0], requires_grad=True)):
        got = s.sample(torch.tensor([0, 1]), ts)
        for a, b in zip(got, want):
            assert np.array_equal(a.eid, b.eid) and np.array_equal(a.ts, b.ts)
    # a bfloat16 value is taken exactly (257 is not a bfloat16: 256 is what it holds)
    t = torch.tensor([257], dtype=torch.bfloat16)
    assert s.sample([0], t)[0].ts.tolist()[:1] == [256]


def test_pyg_seed_times_of_any_dtype_or_grad(store):
    """NeighborSampler's seed times likewise: the same draws as the plain tensor."""
    from torch_geometric.data import Data
    from ddstore import pyg as dpyg
    ei = torch.tensor([[0, 1, 2, 3, 3], [1, 1, 1, 1, 0]])
    fs, gs = dpyg.from_pyg(store, Data(x=torch.zeros(4, 1), edge_index=ei,
                                       et=torch.tensor([1, 2, 3, 5, 0])),
                           name="t", time_attr="et")

    def draw(t):
        s = dpyg.NeighborSampler(gs, [2, 1], time_attr="et", seed=3)
        out = s._sample(torch.tensor([1, 1, 0]), t)
        return out.node.tolist(), out.edge.tolist(), out.batch.tolist()

    want = draw(torch.tensor([3, 5, 0]))
    assert draw(torch.tensor([3, 5, 0], dtype=torch.bfloat16)) == want
    assert draw(torch.tensor([3.0, 5.0, 0.0], requires_grad=True)) == want
    with pytest.raises(DDStoreValueError, match=r"seed times\[0\] = 3.5 is not an "
                                                r"integer"):
        draw(torch.tensor([3.5, 5, 0], dtype=torch.bfloat16))


def test_link_seeds_of_unknown_node_type_are_named(store):
    """Seed links typed with a node type the heterogeneous graph does not have raised
    ``KeyError: 'x'`` from inside PyG's edge_sample: the loader refuses them as it is
    built, the sampler when called; a new relation between known node types is still
    sampled (PyG needs only its end types)."""
    from torch_geometric.data import HeteroData
    from torch_geometric.loader import LinkNeighborLoader
    from torch_geometric.sampler import EdgeSamplerInput
    from ddstore import pyg as dpyg
    h = HeteroData()
    h["p"].x, h["q"].x = torch.zeros(5, 1), torch.zeros(4, 1)
    h["p", "r", "q"].edge_index = torch.tensor([[0, 1, 4], [1, 2, 3]])
    fh, gh = dpyg.from_hetero(store, h, name="h")
    s = dpyg.NeighborSampler(gh, [1], seed=0)
    for et, bad in ((("x", "y", "q"), "x"), (("p", "y", "z"), "z")):
        message = re.escape(f"edge type {et!r} has node type '{bad}', unknown to graph "
                            f"store 'h'; known node types: ['p', 'q']")
        with pytest.raises(DDStoreValueError, match=message):
            LinkNeighborLoader((fh, gh), num_neighbors=[1], batch_size=2,
                               edge_label_index=(et, torch.tensor([[0], [1]])),
                               neighbor_sampler=s)
        with pytest.raises(DDStoreValueError, match=message):
            s.sample_from_edges(EdgeSamplerInput(None, torch.tensor([0]), torch.tensor([1]),
                                                 input_type=et))
    out = s.sample_from_edges(EdgeSamplerInput(None, torch.tensor([4]), torch.tensor([3]),
                                               input_type=("p", "new", "q")))
    assert out.node["p"].tolist() == [4] and out.node["q"].tolist()[0] == 3


def test_time_checks_raise_no_overflow_warning(store):
    """float16 query times (2**63 overflowed float16 in the integer check) and stored
    float64 edge times beyond float32 (the exactness probe of a float32 copy) warned
    ``RuntimeWarning: overflow encountered in cast``; the results were right."""
    from torch_geometric.data import Data
    from ddstore import pyg as dpyg
    from ddstore import temporal as tg
    g = _temporal(store)
    ei = torch.tensor([[0, 1, 2], [1, 1, 1]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = tg.TemporalSampler(g, (5,)).sample([0], np.array([3], np.float16))[0]
        assert b.eid.tolist() == [0, 1]
        fs, gs = dpyg.from_pyg(store, Data(x=torch.zeros(3, 1), edge_index=ei,
                                           et=torch.tensor([-5.0, 1e300, 0.0],
                                                           dtype=torch.float64)),
                               name="w", time_attr="et")
        out = dpyg.NeighborSampler(gs, [-1], time_attr="et", seed=0)._sample(
            torch.tensor([1]), torch.tensor([0.0], dtype=torch.float64))
        assert sorted(out.edge.tolist()) == [0, 2]


def test_num_neighbors_of_unknown_edge_types_are_named(store):
    """A dict ``num_neighbors`` with an edge type the graph lacks: PyG's own message
    ("Not all edge types specified in 'num_neighbors' exist in the graph") named none."""
    from torch_geometric.data import HeteroData
    from ddstore import pyg as dpyg
    h = HeteroData()
    h["p"].x, h["q"].x = torch.zeros(3, 1), torch.zeros(2, 1)
    h["p", "r", "q"].edge_index = torch.tensor([[0, 2], [1, 1]])
    fh, gh = dpyg.from_hetero(store, h, name="h")
    with pytest.raises(DDStoreValueError, match=re.escape(
            "num_neighbors: edge type(s) [('q', 'r', 'p'), ('x', 'y', 'z')] not in graph "
            "store 'h'; its edge types: [('p', 'r', 'q')]")):
        dpyg.NeighborSampler(gh, {("p", "r", "q"): [1], ("q", "r", "p"): [1],
                                  "x__y__z": [2]})
    s = dpyg.NeighborSampler(gh, {"p__r__q": [-1]})  # the string form is PyG's too
    assert s.fanouts(("p", "r", "q")) == [-1]


def test_time_or_weight_attr_of_no_count_is_named(store):
    """A ``time_attr`` / ``weight_attr`` whose first dimension is neither the nodes nor
    the edges was left out by from_pyg's attribute rule, and the put then said "time_attr
    'et' not found: put it first..." of an attribute the user had given."""
    from torch_geometric.data import Data, HeteroData
    from ddstore import pyg as dpyg
    d = Data(x=torch.zeros(4, 1), edge_index=torch.tensor([[0, 2, 3], [1, 1, 1]]),
             et=torch.tensor([1, 2]))
    with pytest.raises(DDStoreValueError, match=re.escape(
            "time_attr='et' has shape (2,): it is stored when its first dimension is one "
            "row per node or edge (4 nodes or 3 edges)")):
        dpyg.from_pyg(store, d, name="d", time_attr="et")
    assert store.variables() == []
    h = HeteroData()
    h["p"].x, h["q"].x = torch.zeros(3, 1), torch.zeros(2, 1)
    h["p", "r", "q"].edge_index = torch.tensor([[0, 2], [1, 1]])
    h["p", "r", "q"].w = torch.ones(5)
    with pytest.raises(DDStoreValueError, match=re.escape(
            "weight_attr='w' of edge type ('p', 'r', 'q') has shape (5,): it is stored "
            "when its first dimension is one row per edge (2 edges)")):
        dpyg.from_hetero(store, h, name="h", weight_attr="w")
    assert store.variables() == []
    h["p", "r", "q"].w = torch.ones(2)  # fixed: the same call works
    fh, gh = dpyg.from_hetero(store, h, name="h", weight_attr="w")
    assert gh.weight_attr == "w"
