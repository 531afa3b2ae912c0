"""Sampling options of ddstore.pyg.NeighborSampler (issue 26: items 5, 8, 10, 11):
``subgraph_type`` bidirectional / induced, hetero edge types whose source type has no
time attribute, ``sample_direction``, DataLoader workers refused and the prefetching
thread that replaces them.  In-process on one rank against brute force; the MPI program
tests/mpi/pyg_options.py runs the same checks on 2 ranks, both transports."""
import pytest
import torch

from conftest import passed_on, passes_in_process


def test_pyg_options_one_rank():
    """The whole MPI program on one rank, in this process (both transports)."""
    passes_in_process("pyg_options", more_than=190)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2])
@pytest.mark.shared_launch("pyg_options.py", timeout=240)
def test_pyg_options_two_ranks(shared_launch, nprocs):
    """2 ranks, width 2, transports auto and rma (every other member read by MPI_Get)."""
    passed_on(shared_launch, nprocs)


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


def test_num_workers_refused_with_the_supported_way(store):
    """A DataLoader worker (forked child) that samples raises at its first batch, naming
    num_workers and the prefetching thread; the parent's loader still works after."""
    from torch_geometric.loader import NeighborLoader
    from ddstore import DDStoreStateError
    from ddstore import pyg as dpyg
    fs, gs = _graph(store)
    sampler = dpyg.NeighborSampler(gs, [2, 2], seed=3)
    loader = NeighborLoader((fs, gs), num_neighbors=[2, 2], input_nodes=torch.arange(20),
                            batch_size=5, neighbor_sampler=sampler, num_workers=1)
    with pytest.raises(DDStoreStateError, match=r"(?s)forked process.*num_workers > 0.*"
                       r"ddstore\.prefetch\.prefetch\(loader, depth=2\)"):
        next(iter(loader))
    loader = NeighborLoader((fs, gs), num_neighbors=[2, 2], input_nodes=torch.arange(20),
                            batch_size=5, neighbor_sampler=sampler)
    assert next(iter(loader)).n_id.numel() >= 5
    import pickle
    with pytest.raises(DDStoreStateError, match="cannot be pickled.*num_workers > 0"):
        pickle.dumps(sampler)
    from ddstore import DDStoreValueError
    from ddstore.prefetch import prefetch
    with pytest.raises(DDStoreValueError, match="num_workers=2.*use num_workers=0"):
        prefetch(NeighborLoader((fs, gs), num_neighbors=[2], batch_size=5,
                                input_nodes=torch.arange(20),
                                neighbor_sampler=sampler, num_workers=2))


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
