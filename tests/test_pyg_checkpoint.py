"""Checkpoint and restart of ddstore.pyg's feature and graph stores and of pyddstore
(issue 37, item 3): MPI programs tests/mpi/pyg_checkpoint.py and
tests/mpi/pyddstore_checkpoint.py.  Each builds on every rank, saves, and restores at
every rank count from 1 to the job's (sub-communicators of its first ranks) and every
width dividing it, transports auto and rma in turn; pyg_checkpoint also builds on one
rank and restores on more."""
import re

import pytest

from conftest import passed_on, passes_in_process


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [4])  # restores on 1-4 ranks (sub-communicators)
@pytest.mark.shared_launch("pyg_checkpoint.py", timeout=300)
def test_pyg_checkpoint(shared_launch, nprocs):
    """Every variable's bytes, every get_tensor / get_edge_index, and NeighborLoader's
    batches for the same seed (uniform, temporal at node and edge level, weighted,
    backward, bidirectional, hetero, dropped in-lists) equal after restore; puts and
    removals after open; unknown names and the other kind refused."""
    passed_on(shared_launch, nprocs)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 4])
@pytest.mark.shared_launch("pyddstore_checkpoint.py", timeout=120)
def test_pyddstore_checkpoint(shared_launch, nprocs):
    """PyDDStore.save / restore / load: every row's bytes, info and size equal."""
    passed_on(shared_launch, nprocs)


def test_pyddstore_checkpoint_one_rank():
    passes_in_process("pyddstore_checkpoint", more_than=100)


def test_open_in_process(store, tmp_path):
    """One rank: from_pyg's stores reopened by open_stores after save / restore read
    the same; an unknown name names the known ones."""
    import torch
    from mpi4py import MPI
    from torch_geometric.data import Data
    import ddstore
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(12, 2, generator=g),
                edge_index=torch.randint(0, 12, (2, 40), generator=g))
    fs, gs = dpyg.from_pyg(store, data, name="g")
    store.save(str(tmp_path / "ck"))
    batch = dpyg.NeighborSampler(gs, [2, 2], seed=3)._sample(torch.arange(6))
    with ddstore.DDStore.restore(str(tmp_path / "ck"), MPI.COMM_SELF, width=1) as st:
        fs2, gs2 = dpyg.open_stores(st, "g")
        assert torch.equal(fs2.get_tensor(group_name=None, attr_name="x"), data.x)
        ei = gs2.get_edge_index(None, "coo")
        assert torch.equal(torch.stack(list(ei)), data.edge_index)
        out = dpyg.NeighborSampler(gs2, [2, 2], seed=3)._sample(torch.arange(6))
        assert torch.equal(out.node, batch.node) and torch.equal(out.edge, batch.edge)
        with pytest.raises(ddstore.DDStoreValueError, match=r"known pyg.GraphStore "
                           r"names: \['g'\]"):
            dpyg.GraphStore.open(st, "nope")


def test_a_second_object_replacing_the_edges_is_named(store):
    """Two GraphStore objects over one store and name (the second from open): once the
    second replaces or removes an edge type, the first's get_edge_index and its
    sampler's batches raise a DDStoreStateError naming the edge type and the way out
    (it read the removed variable's internal name); the second reads the new edges."""
    import torch
    from torch_geometric.data import Data
    import ddstore
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(1)
    data = Data(x=torch.randn(20, 2, generator=g),
                edge_index=torch.randint(0, 20, (2, 60), generator=g))
    fs, gs = dpyg.from_pyg(store, data, name="two")
    sampler = dpyg.NeighborSampler(gs, [2, 2], seed=0)
    sampler._sample(torch.arange(4))  # its C handle is built and cached
    gs2 = dpyg.GraphStore.open(store, "two")
    new = torch.randint(0, 20, (2, 30), generator=g)
    gs2.put_edge_index(new, gs2.get_all_edge_attrs()[0])
    assert torch.equal(torch.stack(list(gs2.get_edge_index(None, "coo"))), new)
    msg = (r"{}: the edges of edge type None \(layout 'coo'\) in graph store 'two' were "
           r"replaced or removed by another GraphStore object .*GraphStore.open\(store, "
           r"'two'\)")
    with pytest.raises(ddstore.DDStoreStateError, match=msg.format("get_edge_index")):
        gs.get_edge_index(None, "coo")
    with pytest.raises(ddstore.DDStoreStateError, match=msg.format("sample")):
        sampler._sample(torch.arange(4))
    # read ahead by a thread too (it named the variable the C handle had read)
    from torch_geometric.loader import NeighborLoader
    from ddstore.prefetch import prefetch
    ahead = prefetch(NeighborLoader((fs, gs), num_neighbors=[2, 2], batch_size=4,
                                    input_nodes=torch.arange(8), neighbor_sampler=sampler),
                     2)
    with pytest.raises(ddstore.DDStoreStateError, match=msg.format("sample")):
        next(iter(ahead))
    assert gs2.remove_edge_index(None, "coo")
    with pytest.raises(ddstore.DDStoreStateError, match=msg.format("num_edges")):
        gs.num_edges()
    assert dpyg.GraphStore.open(store, "two").get_all_edge_attrs() == []
    # the names reused: a third object puts the edge type again, under the first's
    # variable names (the check is by variable, not by name: the first read the old count)
    gs3 = dpyg.GraphStore.open(store, "two")
    gs3.put_edge_index(new, gs.get_all_edge_attrs()[0])
    assert "two/csc/_/coo/nbr" in store.variables()
    for call, what in ((gs.num_edges, "num_edges"), (lambda: sampler._sample(
            torch.arange(4)), "sample")):
        with pytest.raises(ddstore.DDStoreStateError, match=msg.format(what)):
            call()


def test_checkpoint_with_names_written_before_escaping_refused(store, tmp_path,
                                                               monkeypatch):
    """A checkpoint saved when names were not escaped (a node type ``_x``, an edge type
    ``("a", "b__c", "d")`` with weights): reopening refuses it, naming the attribute and
    both names (the stores reopened, and the graph store then looked its weights up under
    the new name, missed them and sampled the type uniformly); plain names reopen."""
    import re
    import torch
    from mpi4py import MPI
    from torch_geometric.data import HeteroData
    import ddstore
    from ddstore import pyg as dpyg
    from ddstore.pyg import _common
    h = HeteroData()
    h["_x"].x, h["a"].x, h["d"].x = torch.zeros(2, 1), torch.zeros(3, 1), torch.zeros(2, 1)
    h["a", "b__c", "d"].edge_index = torch.tensor([[0, 1, 2], [0, 1, 1]])
    h["a", "b__c", "d"].w = torch.tensor([1.0, 0.0, 2.0])
    with monkeypatch.context() as mp:  # the names as they were written before
        mp.setattr(_common, "name_part", lambda text: text)
        dpyg.from_hetero(store, h, name="old", weight_attr="w")
    dpyg.from_hetero(store, h, name="new", weight_attr="w")
    store.save(str(tmp_path / "ck"))
    with ddstore.DDStore.restore(str(tmp_path / "ck"), MPI.COMM_SELF, width=1) as st:
        with pytest.raises(ddstore.DDStoreValueError, match=re.escape(
                "FeatureStore.open 'old': attribute ('_x', 'x') was saved as variable "
                "'old/node/_x/x', which this version names 'old/node/%5Fx/x'")):
            dpyg.FeatureStore.open(st, "old")
        with pytest.raises(ddstore.DDStoreValueError, match=re.escape(
                "GraphStore.open 'old': edge type ('a', 'b__c', 'd') was saved as "
                "'old/csc/a__b__c__d/coo/nbr', which this version names under "
                "'old/csc/a__b%5F%5Fc__d/'")):
            dpyg.GraphStore.open(st, "old")
        fs, gs = dpyg.open_stores(st, "new")
        assert gs.weight_attr_of(("a", "b__c", "d")) == "w"
        assert torch.equal(fs.get_tensor(("a", "b__c", "d"), "w"), h["a", "b__c", "d"].w)


def test_graph_store_opened_alone_reads_the_feature_record(store, tmp_path):
    """A GraphStore reopened without its FeatureStore (``GraphStore.open`` alone, after
    a restore) reads what the feature store of its name records: a bfloat16 edge
    attribute's values as weights (it read their bit patterns as numbers) and the rows
    declared by ``declare_rows`` as node counts."""
    import numpy as np
    import torch
    from mpi4py import MPI
    from torch_geometric.data import Data
    import ddstore
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(0)
    n, m = 20, 60
    data = Data(x=torch.randn(n, 2, generator=g),
                edge_index=torch.randint(0, n, (2, m), generator=g))
    wb = (torch.rand(m, generator=g) * 4 + 0.5).to(torch.bfloat16)
    fs, gs = dpyg.from_pyg(store, data, name="bf")
    fs.put_tensor(wb, group_name=dpyg.EDGES, attr_name="wb")
    fs.declare_rows({"lonely": 7})
    store.save(str(tmp_path / "ck"))
    # a weighted sampler before the weights: refused, naming the call that adds them
    # (it named only the graph store's rebuild)
    with pytest.raises(ddstore.DDStoreValueError, match=re.escape(
            "call gs.put_edge_weights('wb') on this graph store")):
        dpyg.NeighborSampler(gs, [2], weight_attr="wb")
    gs.put_edge_weights("wb")
    assert dpyg.NeighborSampler(gs, [2], weight_attr="wb") is not None
    live = store.get_range("bf/csc/_/coo/w", 0, m).copy()
    assert sorted(live.tolist()) == sorted(wb.float().tolist())  # values, not bits
    with ddstore.DDStore.restore(str(tmp_path / "ck"), MPI.COMM_SELF, width=1) as st:
        gs2 = dpyg.GraphStore.open(st, "bf")
        assert gs2.node_counts()["lonely"] == 7
        gs2.put_edge_weights("wb")
        assert np.array_equal(st.get_range("bf/csc/_/coo/w", 0, m), live)
