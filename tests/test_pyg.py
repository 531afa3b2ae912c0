"""ddstore.pyg (PyG's FeatureStore / GraphStore / BaseSampler over the store): the program
tests/mpi/pyg_check.py in-process on one rank and under mpiexec on 2-4 ranks (widths 1, 2
and all; both transports; brute-force k-hop neighbourhoods, fanouts, uniformity,
temporal, hetero, LinkNeighborLoader with negative sampling, bad input on every rank),
and single-process checks of the API."""

import re

import numpy as np
import pytest
import torch

from conftest import passes_in_process, widths_program_test


def test_pyg_check_one_rank():
    """The whole MPI program on one rank, in this process (width 1, both transports)."""
    passes_in_process("pyg_check", [1], more_than=500)


test_pyg_check = widths_program_test(
    "pyg_check.py", [(2, "all"), (3, "3"), (4, "2:rma")], timeout=240,
    doc="""2 ranks: widths 1 and 2 (all); 3 ranks: width 3 (all, uneven stripes); each with
    transports auto (the quick put) and rma (range-wise); 4 ranks: width 2 (two replicas
    of two members) over rma, range-wise.""")


def test_put_get_and_layout(store):
    from ddstore import pyg as dpyg
    fs = dpyg.FeatureStore(store, "f")
    x = torch.arange(12, dtype=torch.float32).view(6, 2)
    fs["n", "x"] = x
    assert fs.get_tensor_size(group_name="n", attr_name="x") == (6, 2)
    assert torch.equal(fs["n", "x", torch.tensor([5, 0])], x[[5, 0]])
    assert torch.equal(fs.get_tensor(group_name="n", attr_name="x", index=slice(1, 3)),
                       x[1:3])
    assert store.nrows("f/node/n/x") == 6
    a, b = fs.multi_get_tensor([dpyg.TensorAttr("n", "x", torch.tensor([1])),
                                dpyg.TensorAttr("n", "x", torch.tensor([2, 3]))])
    assert torch.equal(a, x[[1]]) and torch.equal(b, x[[2, 3]])
    fs.remove_tensor(group_name="n", attr_name="x")
    assert fs.get_all_tensor_attrs() == [] and "f/node/n/x" not in store


def _reference(pairs, hetero=False):
    """PyG's own in-memory GraphStore (``Data`` / ``HeteroData``) holding the same COO
    edge indices: ``pairs`` = [(edge_type, edge_index, size)]."""
    from torch_geometric.data import Data, HeteroData
    ref = HeteroData() if hetero else Data()
    for et, ei, size in pairs:
        if hetero:
            ref.put_edge_index(ei, edge_type=et, layout="coo", size=size)
        else:
            ref.put_edge_index(ei, layout="coo", size=size)
    return ref


def _same(x, y, what):
    """Byte-equal tensors (or both None), recursively through tuples and dicts."""
    if isinstance(x, dict):
        assert isinstance(y, dict) and list(x) == list(y), what
        for k in x:
            _same(x[k], y[k], f"{what}[{k}]")
    elif isinstance(x, (tuple, list)):
        assert isinstance(y, (tuple, list)) and len(x) == len(y), what
        for i, (u, v) in enumerate(zip(x, y)):
            _same(u, v, f"{what}[{i}]")
    elif x is None or y is None:
        assert x is None and y is None, what
    else:
        assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape and \
            x.numpy().tobytes() == y.numpy().tobytes(), (what, x, y)


def test_coo_comes_back_as_put(store):
    """Issue 26 item 1: COO comes back in the order put (edge id = put column), CSR /
    CSC with the permutation from that order, all byte-equal to PyG's own in-memory
    store (``Data`` as GraphStore) for the same input: the issue's example, then random
    edge orders with duplicates and self loops, homogeneous and hetero.  (The CSC order
    came back as COO with no permutation.)"""
    from ddstore import pyg as dpyg
    gs = dpyg.GraphStore(store, "g")
    ei = torch.tensor([[3, 0, 2, 1, 0], [0, 1, 0, 2, 2]])
    gs.put_edge_index(ei, edge_type=None, layout="coo", size=(4, 4))
    row, col = gs.get_edge_index(edge_type=None, layout="coo")
    _same((row, col), (ei[0], ei[1]), "issue example")
    # a (row, col) pair, PyG's EdgeTensorType, as its Data gives it back (put as one
    # [2, E] tensor or as a pair), in the dtypes put
    assert type(gs.get_edge_index(None, "coo")) is tuple
    pair = dpyg.GraphStore(store, "pair")
    pair.put_edge_index((ei[0], ei[1].int()), edge_type=None, layout="coo", size=(4, 4))
    got = pair.get_edge_index(None, "coo")
    assert type(got) is tuple and got[1].dtype == torch.int32, got
    ref = _reference([(None, ei, (4, 4))])
    for layout in ("coo", "csr", "csc"):
        _same(getattr(gs, layout)(), getattr(ref, layout)(), layout)
    # perm: the put ids of the CSC entries
    r, colptr, perm = gs.csc()
    assert perm.tolist() == [0, 2, 1, 3, 4] and r.tolist() == [3, 2, 0, 1, 0]
    g = torch.Generator().manual_seed(3)
    for trial in range(4):
        n, m = 7 + trial, 60
        ei = torch.randint(0, n, (2, m), generator=g)
        ei[1, :5] = ei[0, :5]            # self loops
        ei[:, 10:20] = ei[:, 20:30]      # duplicates
        # (chunk_edges a numpy integer, as a Python one: it went into the annotation
        # as it was, and JSON refused it)
        gs = dpyg.GraphStore(store, f"r{trial}", chunk_edges=np.int64(7 + trial))
        gs.put_edge_index(ei, edge_type=None, layout="coo", size=(n, n))
        ref = _reference([(None, ei, (n, n))])
        for layout in ("coo", "csr", "csc"):
            _same(getattr(gs, layout)(), getattr(ref, layout)(), f"{trial} {layout}")
        _same(gs.get_edge_index(None, "coo"), tuple(ei), f"{trial} get_edge_index")
        assert [(a.edge_type, a.layout.value, a.is_sorted, a.size)
                for a in gs.get_all_edge_attrs()] == [(None, "coo", False, (n, n))]
    # hetero: per edge type, against HeteroData
    pairs = [(("a", "r", "b"), torch.randint(0, 5, (2, 40), generator=g), (5, 5)),
             (("b", "s", "a"), torch.randint(0, 5, (2, 33), generator=g), (5, 5))]
    gh = dpyg.GraphStore(store, "h")
    for et, ei, size in pairs:
        gh.put_edge_index(ei, edge_type=et, layout="coo", size=size)
    ref = _reference(pairs, hetero=True)
    for layout in ("coo", "csr", "csc"):
        _same(getattr(gh, layout)(), getattr(ref, layout)(), f"hetero {layout}")
        _same(getattr(gh, layout)([("b", "s", "a")]),
              getattr(ref, layout)([("b", "s", "a")]), f"hetero {layout} one type")


def test_csr_and_csc_puts_come_back_as_given(store):
    """A CSC ``(row, colptr)`` / CSR ``(rowptr, col)`` put comes back as given (pointer
    of the given length, edge ids = entry order), other layouts are ``KeyError`` as in
    PyG's stores, and ``coo()`` / ``csr()`` / ``csc()`` equal those of PyG's reference
    store (``torch_geometric.testing.MyGraphStore``) holding the same puts."""
    from torch_geometric.testing import MyGraphStore
    from ddstore import pyg as dpyg
    et = ("a", "to", "b")
    row, colptr = torch.tensor([1, 0, 0, 1, 1]), torch.tensor([0, 2, 2, 5, 5, 5])
    rowptr, col = torch.tensor([0, 1, 1, 4, 4]), torch.tensor([2, 0, 1, 1])
    gs, ref = dpyg.GraphStore(store, "g"), MyGraphStore()
    for g in (gs, ref):
        g.put_edge_index((row, colptr), edge_type=et, layout="csc", size=(2, 5))
        g.put_edge_index((rowptr, col), edge_type=("b", "to", "a"), layout="csr",
                         size=(4, 3))
    _same(gs.get_edge_index(et, "csc"), (row, colptr), "csc as put")
    _same(gs.get_edge_index(("b", "to", "a"), "csr"), (rowptr, col), "csr as put")
    for layout in ("coo", "csr", "csc"):
        _same(getattr(gs, layout)(), getattr(ref, layout)(), layout)
    for bad in ((et, "coo"), (et, "csr"), (("b", "to", "a"), "coo"), (("x", "y", "z"),
                                                                      "csc")):
        with pytest.raises(KeyError, match="no edge type"):
            gs.get_edge_index(*bad)
    # without size: the pointer's nodes count (trailing nodes with no edges kept)
    g2 = dpyg.GraphStore(store, "g2")
    g2.put_edge_index((torch.tensor([0, 1, 1]), torch.tensor([0, 1, 3])), edge_type=None,
                      layout="csc")
    r, c = g2.get_edge_index(None, "csc")
    assert r.tolist() == [0, 1, 1] and c.tolist() == [0, 1, 3] and \
        g2.get_all_edge_attrs()[0].size == (2, 2)
    g2.put_edge_index((torch.tensor([0, 0, 2, 2, 2]), torch.tensor([1, 0])),
                      edge_type=None, layout="csr")
    rp, c = g2.get_edge_index(None, "csr")
    assert rp.tolist() == [0, 0, 2, 2, 2] and c.tolist() == [1, 0]


def test_several_layouts_of_one_edge_type(store):
    """Issue 26 item 6: ``put_edge_index`` with COO then CSR (even another graph, as
    PyG's stores allow), ``csc(store=True)``, per-layout removal: every read, the
    listing and the conversions equal PyG's reference store doing the same; a layout
    put twice is refused and nothing changes; removing a layout never put returns False;
    the sampler reads a stored CSC, else the COO, and its ``e_id`` are that layout's
    edge ids.  (A second layout was refused: "already stored".)"""
    from torch_geometric.testing import MyGraphStore
    from ddstore import DDStoreIndexError, DDStoreValueError
    from ddstore import pyg as dpyg
    et = ("a", "to", "b")
    g = torch.Generator().manual_seed(5)
    ei = torch.randint(0, 6, (2, 30), generator=g)
    other = torch.randint(0, 6, (2, 12), generator=g)     # a different graph
    order = torch.argsort(other[0], stable=True)
    rowptr = torch.zeros(7, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(other[0], minlength=6), 0)
    gs, ref = dpyg.GraphStore(store, "g"), MyGraphStore()
    for s in (gs, ref):
        s.put_edge_index(ei, edge_type=et, layout="coo", size=(6, 6))
        s.put_edge_index((rowptr, other[1][order]), edge_type=et, layout="csr",
                         size=(6, 6))
    assert [(a.edge_type, a.layout.value) for a in gs.get_all_edge_attrs()] == [
        (et, "coo"), (et, "csr")]
    _same(gs.get_edge_index(et, "coo"), tuple(ei), "coo")
    _same(gs.get_edge_index(et, "csr"), (rowptr, other[1][order]), "csr")
    for layout in ("coo", "csr", "csc"):
        _same(getattr(gs, layout)(), getattr(ref, layout)(), layout)
    before = store.variables()
    for s_ in (gs, ref):  # a layout put again replaces it, as PyG's stores do
        s_.put_edge_index(other, edge_type=et, layout="coo", size=(6, 6))
    _same(gs.get_edge_index(et, "coo"), tuple(other), "coo replaced")
    for layout in ("coo", "csr", "csc"):
        _same(getattr(gs, layout)(), getattr(ref, layout)(), f"{layout} after replacing")
    assert [(a.edge_type, a.layout.value) for a in gs.get_all_edge_attrs()] == [
        (et, "coo"), (et, "csr")]
    now = store.variables()  # the new lists beside the old names, the old ones gone
    assert sorted(now) == sorted(v.replace("/coo/", "/coo~1/") for v in before), now
    for s_ in (gs, ref):
        s_.put_edge_index(ei, edge_type=et, layout="coo", size=(6, 6))
    assert sorted(store.variables()) == sorted(before)  # the first free names again
    with pytest.raises(DDStoreValueError, match="pointer must start at 0, not decrease"):
        gs.put_edge_index((torch.tensor([0, 1]), torch.tensor([0, 2, 1, 2, 2, 2, 2])),
                          edge_type=et, layout="csc", size=(6, 6))
    # a pointer for more nodes than size names (its extra lists empty): refused
    with pytest.raises(DDStoreIndexError, match=r"csc pointer has 8 entries, for 7 "
                       r"destination nodes; size=\(6, 6\) allows at most 6"):
        gs.put_edge_index((torch.tensor([0, 1]), torch.tensor([0, 2, 2, 2, 2, 2, 2, 2])),
                          edge_type=et, layout="csc", size=(6, 6))
    assert store.variables() == before and len(gs.get_all_edge_attrs()) == 2
    _same(gs.get_edge_index(et, "coo"), tuple(ei), "coo after a failed csc put")
    assert gs.remove_edge_index(edge_type=et, layout="csc") is False
    # the sampler reads the COO (no CSC stored): e_id are COO columns
    out = dpyg.NeighborSampler(gs, [-1], seed=1)._sample({"b": torch.arange(6)})
    e = out.edge[et]
    assert sorted(e.tolist()) == list(range(30))
    assert torch.equal(out.node["a"][out.row[et]], ei[0][e])
    # csc(store=True): a third layout, the CSC of the COO (PyG converts from the COO;
    # MyGraphStore cannot read back a CSC it stored so: its key keeps is_sorted=False)
    want = ref.csc()
    _same(gs.csc(store=True), want, "csc(store=True)")
    _same(gs.csc(), ({et: want[0][et]}, {et: want[1][et]}, {et: None}), "stored csc")
    assert [a.layout.value for a in gs.get_all_edge_attrs()] == ["coo", "csr", "csc"]
    # the sampler now reads the stored CSC: e_id are its entries
    r, colptr = gs.get_edge_index(et, "csc")
    dst = torch.repeat_interleave(torch.arange(6), colptr.diff())
    out = dpyg.NeighborSampler(gs, [-1], seed=1)._sample({"b": torch.arange(6)})
    e = out.edge[et]
    assert sorted(e.tolist()) == list(range(30))
    assert torch.equal(out.node["a"][out.row[et]], r[e]) and \
        torch.equal(out.node["b"][out.col[et]], dst[e])
    # remove one layout: the others stay, as put
    for s_ in (gs, ref):
        assert s_.remove_edge_index(edge_type=et, layout="coo", size=(6, 6)) is True
    assert [a.layout.value for a in gs.get_all_edge_attrs()] == ["csr", "csc"]
    _same(gs.csr(), ref.csr(), "csr after remove")
    _same(gs.get_edge_index(et, "csc"), (want[0][et], want[1][et]), "csc after remove")
    with pytest.raises(KeyError):
        gs.get_edge_index(et, "coo")


@pytest.mark.parametrize("size,fragment", [
    ((12.7, 12.7), "size must be (num_src, num_dst) integers >= 0, got (12.7, 12.7)"),
    (("20", "20"), "size must be (num_src, num_dst) integers >= 0, got ('20', '20')"),
    ((True, True), "integers >= 0"), ((20,), "integers >= 0"), (20, "integers >= 0"),
    ((-1, -1), "integers >= 0"),
    ((20, 10), "size=(20, 10): a homogeneous graph's sources and destinations are one "
               "node set, so size must be (n, n)"),
])
def test_put_edge_index_size_checked(store, size, fragment):
    """``size`` must be integers (never truncated floats or strings) and, for a
    homogeneous graph, square (a (20, 10) size was accepted, then sampling raised a raw
    IndexError); nothing is stored, and the store is usable after."""
    import re
    import numpy as np
    from ddstore import DDStoreValueError
    from ddstore._collective import is_agreed
    from ddstore import pyg as dpyg
    gs = dpyg.GraphStore(store, "g")
    ei = torch.tensor([[0, 1, 2], [1, 2, 3]])
    with pytest.raises(DDStoreValueError, match=re.escape(fragment)) as info:
        gs.put_edge_index(ei, edge_type=None, layout="coo", size=size)
    assert is_agreed(info.value)
    assert store.variables() == [] and gs.get_all_edge_attrs() == []
    gs.put_edge_index(ei, edge_type=None, layout="coo", size=(np.int64(20), 20))
    assert gs.get_all_edge_attrs()[0].size == (20, 20)
    gs.put_edge_index(ei, edge_type=("a", "to", "b"), layout="coo", size=(20, 10))


def test_too_many_nodes_named_given_or_inferred(store):
    """Destination ids whose count the degrees cannot be allocated for: the size named,
    given or taken from the largest id (a bare "Unable to allocate 8.00 TiB" before when
    no size was given); nothing stored."""
    import re
    from ddstore import DDStoreMemoryError
    from ddstore import pyg as dpyg
    gs = dpyg.GraphStore(store, "g")
    ei = torch.tensor([[0, 1], [1, 2 ** 40]])
    for size, whence in (((2, 2 ** 40 + 1), ""), (None, " (no size given: taken from the "
                                                        "largest node ids, or the node "
                                                        "attributes' rows)")):
        with pytest.raises(DDStoreMemoryError, match=re.escape(
                f"size=(2, {2 ** 40 + 1}){whence}: {2 ** 40 + 1} destination nodes need "
                f"{16 * (2 ** 40 + 1) + 8} bytes")):
            gs.put_edge_index(ei, edge_type=("a", "r", "b"), layout="coo", size=size)
    assert store.variables() == [] and gs.get_all_edge_attrs() == []


def test_sampler_argument_errors_are_clear(store):
    """A dict ``num_neighbors`` on a homogeneous graph is refused when the sampler is
    made (the loader raised ``KeyError: None``); plain seed ids on a heterogeneous graph
    (a raw ``TypeError``) and an unknown node type ("out of range [0, 0)") name what to
    pass instead."""
    import re
    from torch_geometric.data import Data, HeteroData
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.sampler import NodeSamplerInput
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    fs, gs = dpyg.from_pyg(store, Data(x=torch.zeros(4, 1),
                                       edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]])),
                           name="homo")
    with pytest.raises(DDStoreValueError, match=r"num_neighbors: graph store 'homo' is "
                                                r"homogeneous .* a list of fanouts per hop"):
        dpyg.NeighborSampler(gs, {("_N", "to", "_N"): [2]})
    h = HeteroData()
    h["p"].x, h["q"].x = torch.zeros(4, 1), torch.zeros(3, 1)
    h["p", "r", "q"].edge_index = torch.tensor([[0, 1], [1, 2]])
    h["q", "s", "p"].edge_index = torch.tensor([[0, 2], [1, 3]])
    fh, gh = dpyg.from_hetero(store, h, name="het")
    sampler = dpyg.NeighborSampler(gh, [2])
    plain = NeighborLoader((fh, gh), num_neighbors=[2], neighbor_sampler=sampler,
                           input_nodes=torch.tensor([0, 1]), batch_size=2)
    with pytest.raises(DDStoreValueError, match=re.escape(
            "is heterogeneous (node types ['p', 'q']): seed nodes need their node type; "
            "pass input_nodes=(node_type, ids)")):
        next(iter(plain))
    with pytest.raises(DDStoreValueError, match=re.escape(
            "sample: unknown node type 'foo'; known: ['p', 'q']")):
        sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([0]),
                                                   input_type="foo"))
    with pytest.raises(DDStoreValueError, match="is homogeneous: pass the seed nodes as "
                                                "plain ids"):
        dpyg.NeighborSampler(gs, [2])._sample({"p": torch.tensor([0])})
    # the right calls work
    batch = next(iter(NeighborLoader((fh, gh), num_neighbors=[2], neighbor_sampler=sampler,
                                     input_nodes=("q", torch.tensor([1, 2])),
                                     batch_size=2)))
    assert batch["q"].n_id[:2].tolist() == [1, 2]
    # share_draws (what a loader calls before forking workers): the count checked
    for bad in (-1, None, 2 ** 63, 2.0, True):
        with pytest.raises(DDStoreValueError, match=r"share_draws: num_workers=.* must be "
                                                    r"an integer in \[0, 65536\]"):
            sampler.share_draws(bad)
    sampler.share_draws(0)
    sampler.share_draws(np.int64(2))


def test_errors_from_gathered_values_are_marked_agreed(store):
    """Errors every rank computes alike from gathered values carry the agreed mark
    (ranges that do not tile the rows, a destination beyond the size); MPI checks at 2-4
    ranks in tests/mpi/pyg_check.py, pyg_callables.py and scale_features.py."""
    import numpy as np
    from ddstore import DDStoreIndexError, DDStoreMemoryError
    from ddstore._collective import is_agreed
    from ddstore.errors import as_error
    from ddstore import pyg as dpyg
    fs = dpyg.FeatureStore(store, "f")
    with pytest.raises(DDStoreIndexError, match="leaves a gap") as info:
        fs.put_range(np.zeros((3, 2)), (2, 5), None, "x")
    assert is_agreed(info.value)
    gs = dpyg.GraphStore(store, "g")
    with pytest.raises(DDStoreIndexError, match="destination node 3 out of range") as info:
        gs.put_edge_index(torch.tensor([[0, 1], [1, 3]]), edge_type=("a", "r", "b"),
                          size=(4, 3))
    assert is_agreed(info.value)
    with pytest.raises(DDStoreIndexError, match="leaves a gap") as info:
        gs.put_edge_range(lambda a, b: np.zeros((2, b - a), int), (1, 4))
    assert is_agreed(info.value)
    assert store.variables() == []
    assert as_error(MemoryError("x"))[0] is DDStoreMemoryError


def test_sampler_output_format(store):
    """SamplerOutput fields: seeds first, hop counts, row = neighbour, col = target."""
    from torch_geometric.data import Data
    from torch_geometric.sampler import NodeSamplerInput
    from ddstore import pyg as dpyg
    ei = torch.tensor([[1, 2, 3, 3], [0, 0, 1, 2]])  # 1->0, 2->0, 3->1, 3->2
    fs, gs = dpyg.from_pyg(store, Data(x=torch.zeros(4, 1), edge_index=ei))
    s = dpyg.NeighborSampler(gs, [-1, -1])
    out = s.sample_from_nodes(NodeSamplerInput(None, torch.tensor([0])))
    assert out.node.tolist() == [0, 1, 2, 3]
    assert out.num_sampled_nodes == [1, 2, 1] and out.num_sampled_edges == [2, 2]
    assert out.row.tolist() == [1, 2, 3, 3] and out.col.tolist() == [0, 0, 1, 2]
    assert out.edge.tolist() == [0, 1, 2, 3]
    d = dpyg.NeighborSampler(gs, [-1, -1], disjoint=True)
    out = d.sample_from_nodes(NodeSamplerInput(None, torch.tensor([1, 2])))
    assert out.node.tolist() == [1, 2, 3, 3] and out.batch.tolist() == [0, 1, 0, 1]
    # a fixed seed repeats the same sequence of batches
    a = dpyg.NeighborSampler(gs, [1], seed=5)._sample(torch.tensor([0, 0, 0, 0]))
    b = dpyg.NeighborSampler(gs, [1], seed=5)._sample(torch.tensor([0, 0, 0, 0]))
    assert torch.equal(a.edge, b.edge)


def test_csc_int32_and_int64_ids_alike(store, monkeypatch):
    """``nbr`` / ``eid`` are int32 when the source nodes and edges fit
    (``ddstore.build.ID32_LIMIT``, inclusive: the one rule of every stored graph), else int64; the two layouts give the same
    edge index, edge ids and sampled subgraphs (all int64), and int32 halves the bytes."""
    import numpy as np
    from torch_geometric.sampler import NodeSamplerInput
    from ddstore import pyg as dpyg
    from ddstore import build
    g = torch.Generator().manual_seed(7)
    n, m = 40, 300
    ei = torch.stack([torch.randint(0, n, (m,), generator=g),
                      torch.randint(0, n, (m,), generator=g)])
    stores = {}
    for name, limit, ids in (("default", None, np.int32), ("at-limit", m, np.int32),
                             ("wide-e", m - 1, np.int64), ("wide-n", n - 1, np.int64)):
        if limit is not None:
            monkeypatch.setattr(build, "ID32_LIMIT", limit)
        gs = dpyg.GraphStore(store, name)
        gs.put_edge_index(ei, edge_type=None, layout="coo", size=(n, n))
        c = gs.sampled_lists(None)
        assert store.dtype(c.vars["nbr"]) == ids and store.dtype(c.vars["eid"]) == ids, name
        per_edge = np.dtype(ids).itemsize * 2
        assert gs.csc_bytes() == per_edge * m + 8 * (n + 1), name
        stores[name] = gs
    a, b = stores["default"], stores["wide-e"]
    for layout in ("coo", "csc", "csr"):
        x, y = (getattr(gs, layout)() for gs in (a, b))
        for u, v in zip(x, y):
            assert (u is None and v is None) or (
                u.dtype == v.dtype == torch.int64 and torch.equal(u, v)), layout
    assert a.edge_ids().dtype == torch.int64 and torch.equal(a.edge_ids(), b.edge_ids())
    row, col = a.get_edge_index(edge_type=None, layout="coo")
    assert torch.equal(ei[0], row) and torch.equal(ei[1], col)
    seeds = NodeSamplerInput(None, torch.tensor([0, 3, 3, 17, 39, 21]))
    for fanout, kw in (([-1, -1], {}), ([3, 2], {"seed": 11}),
                       ([4, 4], {"seed": 5, "replace": True})):
        x, y = (dpyg.NeighborSampler(gs, fanout, **kw).sample_from_nodes(seeds)
                for gs in (a, b))
        assert x.edge.numel() > 0
        for f in ("node", "row", "col", "edge"):
            u, v = getattr(x, f), getattr(y, f)
            assert u.dtype == v.dtype == torch.int64 and torch.equal(u, v), (fanout, f)
        # the sampled edges are the stored ones
        assert torch.equal(x.node[x.row], ei[0][x.edge])
        assert torch.equal(x.node[x.col], ei[1][x.edge])


def test_tcsr_place_and_sort_int32_like_int64():
    """The C build steps under the CSC (``dds_tcsr_place`` / ``dds_tcsr_sort``) give the
    same lists with int32 ids as with int64, with and without times, and sorted by a
    table of neighbour times as by their times per entry; ids that do not fit
    int32, or nbr / eid of other or mixed dtypes, raise."""
    import numpy as np
    from ddstore import _core
    from ddstore.errors import DDStoreIndexError, DDStoreValueError
    rng = np.random.default_rng(4)
    lo, hi, n = 3, 9, 200                          # this member's nodes [3, 9)
    node = rng.integers(lo, hi, n)
    entries = np.stack([node, rng.integers(0, 50, n), np.zeros(n, np.int64),
                        rng.permutation(n) + 1000], axis=1).astype(np.int64)
    t = rng.integers(0, 5, n).astype(np.float64)   # ties: ordered by edge id
    entries[:, 2] = t.view(np.int64)
    indptr = np.zeros(hi + 2, dtype=np.int64)
    indptr[lo + 1:hi + 1] = np.cumsum(np.bincount(node - lo, minlength=hi - lo))
    indptr[hi + 1:] = indptr[hi]
    for timed in (False, True):
        got = []
        for dt in (np.int64, np.int32):
            nbr, eid = np.empty(n, dt), np.empty(n, dt)
            ts = np.empty(n) if timed else None
            fill = np.zeros(hi - lo, dtype=np.int64)
            _core.tcsr_place(entries, lo, hi, indptr, fill, nbr, ts, eid)
            _core.tcsr_sort(lo, hi, indptr, nbr, ts, eid)
            got.append((nbr, eid, ts))
        (n64, e64, t64), (n32, e32, t32) = got
        assert np.array_equal(n64, n32) and np.array_equal(e64, e32)
        order = np.lexsort((entries[:, 3], t if timed else np.zeros(n), node))
        assert np.array_equal(e64, entries[order, 3])
        assert np.array_equal(n64, entries[order, 1])
        if timed:
            assert np.array_equal(t64, t32) and np.array_equal(t64, t[order])
    # by the neighbours' times (node-level time: a table by neighbour id, float32 or
    # float64, ties by edge id): the order of a sort by (table[neighbour], edge id)
    table = rng.integers(0, 7, 50).astype(np.float64)
    order = np.lexsort((entries[:, 3], table[entries[:, 1]], node))
    for tdt in (np.float64, np.float32):
        for dt in (np.int64, np.int32):
            nbr, eid = np.empty(n, dt), np.empty(n, dt)
            _core.tcsr_place(entries, lo, hi, indptr, np.zeros(hi - lo, dtype=np.int64),
                             nbr, None, eid)
            _core.tcsr_sort(lo, hi, indptr, nbr, None, eid, table.astype(tdt))
            assert np.array_equal(eid, entries[order, 3])
            assert np.array_equal(nbr, entries[order, 1])
    fill = np.zeros(hi - lo, dtype=np.int64)
    big = entries.copy()
    big[5, 3] = 2 ** 31
    with pytest.raises(DDStoreIndexError, match="not both 4-byte ids"):
        _core.tcsr_place(big, lo, hi, indptr, fill, np.empty(n, np.int32), None,
                         np.empty(n, np.int32))
    for a, b in ((np.int32, np.int64), (np.int16, np.int16), (np.uint32, np.uint32)):
        with pytest.raises(DDStoreValueError, match="must both be int32 or both int64"):
            _core.tcsr_sort(lo, hi, indptr, np.empty(n, a), None, np.empty(n, b))


def test_no_pyg_sampler_installed():
    """What the store path replaces: PyG's own NeighborLoader cannot sample here."""
    import torch_geometric.typing as t
    if t.WITH_PYG_LIB or t.WITH_TORCH_SPARSE:
        pytest.skip("a PyG sampler is installed")
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(Data(x=torch.zeros(3, 1), edge_index=torch.tensor([[0], [1]])),
                            num_neighbors=[1], batch_size=1)
    with pytest.raises(ImportError, match="pyg-lib"):
        next(iter(loader))


def test_hetero_input_nodes_type_and_none_means_every_node(store):
    """input_nodes=(node_type, None), which PyG's in-memory loader reads as every node of
    the type: the same batches over the stores as input_nodes=node_type (PyG's
    remote-backend path asked the feature store for the size of None and failed while
    the loader was built)."""
    from torch_geometric.data import HeteroData
    from torch_geometric.loader import NeighborLoader
    from ddstore import pyg as dpyg
    h = HeteroData()
    h["a"].x = torch.arange(14, dtype=torch.float32).view(7, 2)
    h["b"].x = torch.arange(5, dtype=torch.float32).view(5, 1)
    h["a", "ab", "b"].edge_index = torch.tensor([[0, 1, 2, 6, 3], [0, 0, 4, 2, 1]])
    h["b", "ba", "a"].edge_index = torch.tensor([[0, 4, 2], [5, 3, 3]])
    fs, gs = dpyg.from_hetero(store, h, name="hn")
    runs = []
    for seeds in (("b", None), "b", ["b", None]):
        loader = NeighborLoader((fs, gs), num_neighbors=[-1, -1], input_nodes=seeds,
                                batch_size=2)
        runs.append([(b["b"].n_id.tolist(), b["a"].n_id.tolist(), b["b"].batch_size,
                      b["a"].x.tolist()) for b in loader])
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) == 3
    assert [r[0][:r[2]] for r in runs[0]] == [[0, 1], [2, 3], [4]]
    # a node type of a count only (no attribute, no edge: from_hetero declares it):
    # (type, None) is its every node too (PyG's path found no size by the type's name)
    fs, gs = dpyg.from_hetero(store, HeteroData(paper=dict(num_nodes=10)), name="cn")
    got = [b["paper"].n_id.tolist() for b in NeighborLoader(
        (fs, gs), num_neighbors=[], input_nodes=("paper", None), batch_size=4)]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], got


def test_hetero_temporal_all_neighbours_against_brute_force(store):
    """Hetero + edge time (two node types, two edge types), ``[-1, -1]``: each seed's
    subgraph is exactly its typed 2-hop neighbourhood over edges not later than the
    seed's time (disjoint, as temporal sampling is), features byte-equal."""
    from torch_geometric.data import HeteroData
    from torch_geometric.loader import NeighborLoader
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(3)
    n = {"a": 19, "b": 13}
    h = HeteroData()
    for t in n:
        h[t].x = torch.randn(n[t], 3, generator=g)
    for et, m in ((("a", "ab", "b"), 60), (("b", "ba", "a"), 50)):
        h[et].edge_index = torch.stack([torch.randint(0, n[et[0]], (m,), generator=g),
                                        torch.randint(0, n[et[2]], (m,), generator=g)])
        h[et].edge_time = torch.randint(0, 20, (m,), generator=g)
    fs, gs = dpyg.from_hetero(store, h, name="ht", time_attr="edge_time")
    seeds = torch.tensor([0, 4, 4, 11])
    seed_t = torch.tensor([19, 7, 12, 0])
    loader = NeighborLoader((fs, gs), num_neighbors=[-1, -1], input_nodes=("b", seeds),
                            input_time=seed_t, time_attr="edge_time", batch_size=4,
                            neighbor_sampler=dpyg.NeighborSampler(
                                gs, [-1, -1], time_attr="edge_time", seed=1))
    b = next(iter(loader))
    got = {}
    for et in h.edge_types:
        if "e_id" not in b[et]:
            continue
        es, ed = h[et].edge_index
        e = b[et].e_id
        # the sampled edges are the stored ones, not later than their seed's time
        assert torch.equal(b[et[0]].n_id[b[et].edge_index[0]], es[e])
        assert torch.equal(b[et[2]].n_id[b[et].edge_index[1]], ed[e])
        root = b[et[2]].batch[b[et].edge_index[1]]
        assert bool((h[et].edge_time[e] <= seed_t[root]).all())
        for r, eid in zip(root.tolist(), e.tolist()):
            got.setdefault(r, []).append((et, eid))
    for i, (s, T) in enumerate(zip(seeds.tolist(), seed_t.tolist())):
        want, frontier, seen = [], [("b", s)], {("b", s)}
        for _ in range(2):
            nxt = []
            for et in h.edge_types:
                es, ed = h[et].edge_index
                for _, v in [f for f in frontier if f[0] == et[2]]:
                    for e in ((ed == v) & (h[et].edge_time <= T)).nonzero().view(-1).tolist():
                        want.append((et, e))
                        if (et[0], int(es[e])) not in seen:
                            seen.add((et[0], int(es[e])))
                            nxt.append((et[0], int(es[e])))
            frontier = nxt
        assert sorted(got.get(i, [])) == sorted(want), f"seed {i}"
    # the case is not trivial: edges were sampled, and the time rule excluded some
    ab = h["a", "ab", "b"]
    assert sum(map(len, got.values())) > 0
    assert any(bool(((ab.edge_index[1] == s) & (ab.edge_time > T)).any())
               for s, T in zip(seeds.tolist(), seed_t.tolist()))
    for t in n:
        assert torch.equal(b[t].x, h[t].x[b[t].n_id])


def test_time_sorted_coo_and_raw_graph_without_edges(store):
    """A store sorted by time (its CSC lists are not in edge-id order) still gives the
    COO back as put; a GraphStore with no edge put, beside node attributes of its
    FeatureStore, samples its seeds (homogeneous), and with neither it is refused by
    name."""
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(9)
    ei = torch.randint(0, 10, (2, 80), generator=g)
    fs = dpyg.FeatureStore(store, "t")
    fs.put_tensor(torch.randint(0, 5, (80,), generator=g), group_name=dpyg.EDGES,
                  attr_name="et")
    gs = dpyg.GraphStore(store, "t", time_attr="et")
    gs.put_edge_index(ei, edge_type=None, layout="coo", size=(10, 10))
    assert not torch.equal(gs.edge_ids(), torch.sort(gs.edge_ids()).values)
    _same(gs.get_edge_index(None, "coo"), tuple(ei), "time-sorted COO")
    _same(gs.csc(), _reference([(None, ei, (10, 10))]).csc(), "time-sorted csc()")
    fn = dpyg.FeatureStore(store, "n")
    fn.put_tensor(torch.zeros(6, 1), group_name=None, attr_name="x")
    out = dpyg.NeighborSampler(dpyg.GraphStore(store, "n"), [2, 2])._sample(
        torch.tensor([4, 1, 4]))
    assert out.node.tolist() == [4, 1, 4] and out.edge.numel() == 0 and \
        out.num_sampled_nodes == [3, 0, 0]
    with pytest.raises(DDStoreValueError, match="holds no edges and its feature store no "
                                                "node attributes"):
        dpyg.NeighborSampler(dpyg.GraphStore(store, "z"), [2])


def test_node_counts_without_sizes_hold_every_id_of_a_type(store):
    """Edge types put without ``size`` or node attributes: one node type at both ends
    gets one count (it was (3, 2) for sources 0-2 and destinations 0-1, and seed 2
    failed with numpy's IndexError), a node type's count is its largest over the edge
    types, and a node beyond one edge type's lists has no edges of that type (the next
    hop from it failed the same way)."""
    from ddstore import pyg as dpyg
    gs = dpyg.GraphStore(store, "sizes")
    ew = ("e", "w", "e")
    gs.put_edge_index(torch.tensor([[0, 2, 1, 2, 0], [1, 0, 0, 1, 1]]), edge_type=ew,
                      layout="coo")
    assert gs.get_all_edge_attrs()[0].size == (3, 3)
    smp = dpyg.NeighborSampler(gs, {ew: [-1]})
    out = smp._sample({"e": torch.tensor([2])})
    assert out.node["e"].tolist() == [2] and out.edge[ew].numel() == 0
    out = smp._sample({"e": torch.tensor([0, 1, 2])})
    assert out.node["e"].tolist() == [0, 1, 2] and sorted(out.edge[ew].tolist()) == \
        [0, 1, 2, 3, 4]
    ar, bs = ("a", "r", "b"), ("b", "s", "a")
    gs2 = dpyg.GraphStore(store, "sizes2")
    gs2.put_edge_index(torch.tensor([[0, 1], [0, 1]]), edge_type=ar, layout="coo")
    gs2.put_edge_index(torch.tensor([[3, 0], [1, 0]]), edge_type=bs, layout="coo")
    assert gs2.node_counts() == {"a": 2, "b": 4}
    smp = dpyg.NeighborSampler(gs2, {ar: [-1, -1], bs: [-1, -1]})
    out = smp._sample({"a": torch.tensor([1])})  # a1 <- b3 (edge 0); b3 has no r-edges
    assert out.node["a"].tolist() == [1] and out.node["b"].tolist() == [3]
    assert out.edge[bs].tolist() == [0] and out.edge[ar].numel() == 0
    out = smp._sample({"b": torch.tensor([3, 1])})  # b1 <- a1 (edge 1); a1 <- b3
    assert out.node["b"].tolist() == [3, 1] and out.node["a"].tolist() == [1]
    assert out.edge[ar].tolist() == [1] and out.edge[bs].tolist() == [0]
    # a stored node attribute gives the count, homogeneous or not: an id beyond its
    # rows is refused at the put (a homogeneous put grew the count past the features,
    # and the first batch failed reading them), nothing stored
    from ddstore import DDStoreIndexError, DDStoreValueError
    fs = dpyg.FeatureStore(store, "sizes3")
    fs.put_tensor(torch.zeros(20, 2), group_name=None, attr_name="x")
    gs3 = dpyg.GraphStore(store, "sizes3")
    before = store.variables()
    with pytest.raises(DDStoreIndexError, match=r"source node 24 out of range \[0, 20\) "
                                                r"\(size=\(20, 20\)\)"):
        gs3.put_edge_index(torch.tensor([[0, 24], [1, 2]]), edge_type=None, layout="coo")
    assert store.variables() == before
    # the count is the most rows of the type's attributes (one first put with an index
    # holds fewer: the first one listed was taken, and ids up to 19 were refused)
    fs.put_tensor(torch.zeros(3, 1), group_name=None, attr_name="a", index=torch.arange(3))
    gs3.put_edge_index(torch.tensor([[0, 19], [1, 2]]), edge_type=None, layout="coo")
    assert gs3.node_counts() == {None: 20}
    before = store.variables()
    # from_hetero of node types PyG cannot count: named, nothing stored (the put said
    # "size must be (num_src, num_dst) integers >= 0, got (None, None)")
    from torch_geometric.data import HeteroData
    h = HeteroData()
    h["u", "to", "v"].edge_index = torch.tensor([[0, 1], [1, 0]])
    h["v"].num_nodes = 2
    with pytest.raises(
            DDStoreValueError, match=r"from_hetero: node type 'u' has no num_nodes "
                                              r"\(no node attribute to count it from, and "
                                              r"none set\): set data\['u'\].num_nodes"):
        dpyg.from_hetero(store, h, name="uncounted")
    assert store.variables() == before


def test_size_must_be_integers_and_a_refused_replacement_keeps_the_edges(store):
    """put_edge_index / put_edge_range refuse a size that int() would truncate (2.5),
    a float that happens to be whole, a str or a bool, in every layout; a second put of
    a stored layout that is refused (a bad size, a node out of range) leaves the first
    as it was (variables and edges)."""
    import numpy as np
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    gs = dpyg.GraphStore(store, "g")
    coo = torch.tensor([[0, 1], [1, 2]])
    inputs = {"coo": coo, "csc": (torch.tensor([0, 1]), torch.tensor([0, 0, 1, 2])),
              "csr": (torch.tensor([0, 1, 2, 2]), torch.tensor([1, 2]))}
    for size in ((2.5, 3), (3, 2.5), (3.0, 3), (np.float64(3), 3), ("3", 3), (True, 3)):
        for layout, ei in inputs.items():
            with pytest.raises(DDStoreValueError, match="size must be"):
                gs.put_edge_index(ei, edge_type=("a", "r", "b"), layout=layout, size=size)
        with pytest.raises(DDStoreValueError, match="size must be"):
            gs.put_edge_range(lambda a, b: np.zeros((2, b - a), int), (0, 2),
                              edge_type=("a", "r", "b"), size=size)
    assert store.variables() == []
    gs.put_edge_index(coo, edge_type=("a", "r", "b"), layout="coo", size=(3, 3))
    held = store.variables()
    for size in ((2.5, 3), (1, 3)):  # a refused replacement keeps what was stored
        with pytest.raises((DDStoreValueError, IndexError),
                           match="size must be|out of range"):
            gs.put_edge_index(coo.flip(0), edge_type=("a", "r", "b"), layout="coo",
                              size=size)
        assert store.variables() == held
        assert torch.equal(torch.stack(list(gs.get_edge_index(("a", "r", "b"), "coo"))), coo)


def test_relabel_batches_restart_without_clearing():
    """``_core.RelabelMap.begin`` starts a new batch: the positions restart from 0 and
    keys of earlier batches are unknown, with no new table (same as a fresh map, growth
    across batches included), dense and hashed."""
    import numpy as np
    from ddstore import _core
    rng = np.random.default_rng(4)
    for dense_max in (1 << 24, 0):
        kept = _core.RelabelMap()
        for gen, sizes in enumerate(((5, 40), (3,), (300, 7, 2000), (1,), (60, 60))):
            bound = 200 if gen % 2 or dense_max else 10 ** 12
            fresh = _core.RelabelMap()
            kept.begin(bound, dense_max=dense_max)
            fresh.begin(bound, dense_max=dense_max)
            assert kept.dense == fresh.dense == (dense_max > 0)
            slots = kept.slots
            for n in sizes:
                keys = rng.integers(0, bound, n)
                for x, y in zip(kept.add(keys), fresh.add(keys)):
                    assert (x is None and y is None) or np.array_equal(x, y), (gen, n)
                assert kept.count == fresh.count
            assert kept.slots >= slots
            slots = kept.slots
            kept.reset()
            assert kept.count == 0 and kept.slots == slots  # nothing reallocated


def test_relabel_table_is_sized_by_the_keys_it_holds():
    """The hashed map gives the positions of first appearance (brute force) for calls
    far larger than its table, repeats included, and grows with the distinct keys held,
    not with the keys asked about (a disjoint temporal batch's 700 k keys fit 2**20
    slots, not 2**21)."""
    import numpy as np
    from ddstore import _core
    rng = np.random.default_rng(8)
    r = _core.RelabelMap()
    r.begin(10 ** 12, dense_max=0)
    seen = {}
    for n, span in ((10, 50), (20000, 100), (3, 10 ** 12), (5000, 3000), (70000, 60000)):
        keys = rng.integers(0, span, n)
        ids, new, _ = r.add(keys)
        want_new = []
        for k in keys.tolist():
            if k not in seen:
                seen[k] = len(seen)
                want_new.append(k)
        assert ids.tolist() == [seen[k] for k in keys.tolist()], n
        assert new.tolist() == want_new and r.count == len(seen), n
        assert r.count <= 3 * r.slots // 4 and r.slots <= max(64, 8 * len(seen)), \
            (n, r.slots, len(seen))


def test_dense_relabel_matches_the_hash_and_forgets_its_batch():
    """The dense map gives the positions and new keys of the hashed one on the same keys
    (repeated seeds, several calls, disjoint pairs); a key outside the node range is
    refused naming the range and maps nothing; after ``reset`` the dense table is clean
    (positions from 0, every key new again)."""
    import numpy as np
    from ddstore import _core
    from ddstore.errors import DDStoreValueError
    rng = np.random.default_rng(3)
    for subgraphs in (0, 3):
        dense, hashed = _core.RelabelMap(), _core.RelabelMap()
        dense.begin(500, subgraphs)
        hashed.begin(500, subgraphs, dense_max=0)
        assert dense.dense and not hashed.dense
        seeds = np.array([4, 4, 499, 0], dtype=np.int64)
        seed_subs = np.array([0, 0, 1, 2]) if subgraphs else None
        dense.seed(seeds, seed_subs)
        hashed.seed(seeds, seed_subs)
        assert dense.count == hashed.count == 4
        for n in (7, 1, 0, 300, 1200):
            keys = rng.integers(0, 500, n)
            subs = rng.integers(0, subgraphs, n) if subgraphs else None
            for x, y in zip(dense.add(keys, subs), hashed.add(keys, subs)):
                assert (x is None and y is None) or np.array_equal(x, y)
            assert dense.count == hashed.count
        ids = dense.add(np.array([4, 499]), np.array([0, 1]) if subgraphs else None)[0]
        assert ids.tolist() == [0, 2]  # a repeated seed maps to its first position
        count = dense.count
        with pytest.raises(DDStoreValueError, match=r"node 500 \(position 2\) outside "
                                                    r"\[0, 500\)"):
            dense.add(np.array([1, 2, 500]), np.zeros(3, np.int64) if subgraphs else None)
        with pytest.raises(DDStoreValueError, match=r"node -1 \(position 0\) outside"):
            dense.add(np.array([-1]), np.zeros(1, np.int64) if subgraphs else None)
        assert dense.count == count
        dense.reset()
        assert dense.count == 0
        pos, new, _ = dense.add(np.array([9, 9, 4]), np.zeros(3, np.int64) if subgraphs
                                else None)
        assert pos.tolist() == [0, 0, 1] and new.tolist() == [9, 4]


def _random_graphs(store, seed, n, m, mh):
    """Graph stores "homo" (``n`` nodes, ``m`` random edges) and "hetero" (node types
    "a": 30 and "b": 45 nodes, ``mh`` random edges a->b and b->a), from a generator
    seeded ``seed``."""
    from torch_geometric.data import Data, HeteroData
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=g)
    _, homo = dpyg.from_pyg(store, Data(x=torch.zeros(n, 1), edge_index=ei), name="homo")
    h = HeteroData()
    h["a"].x, h["b"].x = torch.zeros(30, 1), torch.zeros(45, 1)
    for s, d, ns, nd in (("a", "b", 30, 45), ("b", "a", 45, 30)):
        h[s, "to", d].edge_index = torch.stack([torch.randint(0, ns, (mh,), generator=g),
                                                torch.randint(0, nd, (mh,), generator=g)])
    _, hetero = dpyg.from_hetero(store, h, name="hetero")
    return homo, hetero


def test_dense_and_hash_relabelling_sample_alike(store, monkeypatch):
    """The sampler's dense relabelling (node types up to ``DENSE_RELABEL_MAX_NODES``)
    gives the same batches as the hash table (forced by lowering the bound), homogeneous
    and hetero, repeated seeds included; a batch that fails half-way gives its maps
    back clean, and the next batch equals a fresh sampler's."""
    from torch_geometric.sampler import NodeSamplerInput
    from ddstore import pyg as dpyg
    from ddstore.pyg import sampler as smod
    n = 60
    gs, hgs = _random_graphs(store, 2, n, 700, 300)
    homo_seeds = torch.tensor([0, 5, 5, 59, 17, 0])
    hetero_seeds = {"a": torch.tensor([1, 1, 29]), "b": torch.tensor([0, 44])}

    def batches(graph, seeds, limit, **kw):
        monkeypatch.setattr(smod, "DENSE_RELABEL_MAX_NODES", limit)
        s = dpyg.NeighborSampler(graph, [4, 3], seed=9, **kw)
        return s, [s._sample(seeds) for _ in range(3)]

    def same(x, y):
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                same(x[k], y[k])
        else:
            assert torch.equal(x, y)

    for graph, seeds in ((gs, homo_seeds), (hgs, hetero_seeds)):
        for kw in ({}, {"replace": True}, {"subgraph_type": "bidirectional"}):
            s, dense = batches(graph, seeds, 1 << 24, **kw)
            h, hashed = batches(graph, seeds, 0, **kw)
            free = [m for ms in s._maps._free.values() for m in ms]
            assert free and all(m.count == 0 and m.dense for m in free)
            assert all(m.count == 0 and not m.dense
                       for ms in h._maps._free.values() for m in ms)
            for x, y in zip(dense, hashed):
                for f in ("node", "row", "col", "edge"):
                    same(getattr(x, f), getattr(y, f))
                assert x.num_sampled_nodes == y.num_sampled_nodes
    # a batch failing in its second hop gives back clean maps (dense, and hash)
    for limit in (1 << 24, 0):
        monkeypatch.setattr(smod, "DENSE_RELABEL_MAX_NODES", limit)
        s = dpyg.NeighborSampler(gs, [4, 3], seed=9)
        s._sample(homo_seeds)  # the pool holds a map that served a batch
        real = s._hop

        def fail_second(et, hop, *a):
            if hop == 1:
                raise RuntimeError("injected")
            return real(et, hop, *a)
        s._hop = fail_second
        with pytest.raises(RuntimeError, match="injected"):
            s._sample(homo_seeds)
        (m,) = s._maps._free[(n, False)]
        assert m.count == 0 and m.dense == bool(limit)
        s._hop = real
        fresh = dpyg.NeighborSampler(gs, [4, 3], seed=9)
        fresh._sample(homo_seeds)
        s._calls = fresh._calls
        x, y = s._sample(homo_seeds), fresh._sample(homo_seeds)
        for f in ("node", "row", "col", "edge"):
            assert torch.equal(getattr(x, f), getattr(y, f)), (limit, f)
    assert s.sample_from_nodes(NodeSamplerInput(None, homo_seeds)).node.numel() > 0


def test_disjoint_sampling_over_a_node_type_beyond_int64_keys(store, monkeypatch):
    """Disjoint sampling over a node type of 2**62 nodes (ids such as 64-bit hashes):
    ``subgraph * num_nodes + node`` would wrap int64; the relabelling keys such a type
    by (node, subgraph) pairs in a hash and returns, subgraph by subgraph, exactly the
    in-neighbours a brute force finds (a node reached twice in one subgraph once, in two
    subgraphs twice), the same batch as the graph with small ids.  Forcing the hash on
    small graphs (homogeneous and hetero, repeated seeds; dense below the bound) changes
    no batch."""
    from torch_geometric.sampler import NodeSamplerInput
    from ddstore import pyg as dpyg
    from ddstore.pyg import sampler as smod
    big = 2 ** 62
    small = {big - 1: 9, 5: 5, big - 2: 8, 7: 7}
    src = [big - 1, 5, big - 2, 7, big - 1, big - 1, 5]
    dst = [0, 1, 2, 3, 0, 1, 1]
    et = ("u", "to", "v")
    outs = {}
    for label, ids, n in (("big", src, big), ("small", [small[s] for s in src], 10)):
        gs = dpyg.GraphStore(store, label)
        gs.put_edge_index(torch.tensor([ids, dst]), edge_type=et, layout="coo",
                          size=(n, 4))
        s = dpyg.NeighborSampler(gs, {et: [-1]}, disjoint=True)
        outs[label] = s.sample_from_nodes(NodeSamplerInput(
            None, torch.tensor([0, 1, 0, 3]), input_type="v"))
    big_out, small_out = outs["big"], outs["small"]
    u, b = big_out.node["u"].tolist(), big_out.batch["u"].tolist()
    seeds = [0, 1, 0, 3]
    want = {(k, s) for k, v in enumerate(seeds) for s, d in zip(src, dst) if d == v}
    assert sorted(zip(b, u)) == sorted(want)  # each (subgraph, node) once
    row, col = big_out.row[et].tolist(), big_out.col[et].tolist()
    edges = {(u[r], seeds[c], b[r], e) for r, c, e in
             zip(row, col, big_out.edge[et].tolist())}
    assert edges == {(src[e], seeds[k], k, e) for k, v in enumerate(seeds)
                     for e in range(len(src)) if dst[e] == v}
    assert [small[x] for x in u] == small_out.node["u"].tolist()
    for f in ("row", "col", "edge"):
        assert torch.equal(getattr(big_out, f)[et], getattr(small_out, f)[et])
    assert torch.equal(big_out.batch["u"], small_out.batch["u"])
    # the hash forced on small graphs: the same batches as the dense keys
    homo, hetero = _random_graphs(store, 4, 40, 300, 200)
    for graph, seed in ((homo, torch.tensor([3, 3, 17, 0, 39])),
                        (hetero, {"a": torch.tensor([1, 1, 29]),
                                  "b": torch.tensor([0, 44])})):
        runs = []
        for limit in (smod.DENSE_RELABEL_MAX_NODES, 0):
            monkeypatch.setattr(smod, "DENSE_RELABEL_MAX_NODES", limit)
            s = dpyg.NeighborSampler(graph, [3, 2], disjoint=True, seed=11)
            runs.append([s._sample(seed) for _ in range(2)])
        for x, y in zip(*runs):
            for f in ("node", "row", "col", "edge", "batch"):
                a, c = getattr(x, f), getattr(y, f)
                if isinstance(a, dict):
                    assert a.keys() == c.keys() and all(torch.equal(a[k], c[k]) for k in a)
                else:
                    assert torch.equal(a, c)
            assert x.num_sampled_nodes == y.num_sampled_nodes


def test_from_pyg_weight_attr_with_as_many_nodes_as_edges(store):
    """``weight_attr="w"`` where nodes and edges are as many: ``w`` is taken as the edge
    attribute the weights are (it was a node attribute by PyG's tie rule, and the put
    said "not found"); a weight attribute put as a node attribute by hand is refused
    saying so."""
    import numpy as np
    from torch_geometric.data import Data
    from ddstore import pyg as dpyg
    from ddstore.pyg.feature_store import UnknownAttributeError
    ei = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
    w = torch.tensor([0.5, 1.0, 2.0, 0.0, 3.0])
    fs, gs = dpyg.from_pyg(store, Data(edge_index=ei, num_nodes=5, w=w, y=torch.ones(5)),
                           name="tie", weight_attr="w")
    assert fs.get_tensor(group_name=("_N", "to", "_N"), attr_name="w",
                         index=None).tolist() == w.tolist()
    assert fs.get_tensor(group_name=None, attr_name="y", index=None).tolist() == [1] * 5
    c = gs.sampled_lists(None)
    eid = store.get_range(c.vars["eid"], 0, 5).astype(np.int64)
    assert store.get_range(c.vars["w"], 0, 5).tolist() == w[eid].tolist()
    fs2 = dpyg.FeatureStore(store, "byhand")
    fs2.put_tensor(w, group_name=None, attr_name="w", index=None)
    gs2 = dpyg.GraphStore(store, "byhand", weight_attr="w")
    with pytest.raises(UnknownAttributeError, match=re.escape(
            "weight_attr 'w' not found: put it first as an edge attribute "
            "('byhand/edge/_N__to___N/w'), one weight per edge; 'w' is stored as a node "
            "attribute ('byhand/node/_/w', 5 rows): a value with as many rows as nodes "
            "and edges is taken as a node attribute unless its name contains 'edge'")):
        gs2.put_edge_index(ei, edge_type=None, layout="coo", size=(5, 5))


def test_from_pyg_takes_a_list_edge_index(store):
    """A Python-list ``edge_index`` (PyG's ``Data`` takes one; documented as accepted)
    loads as the tensor does (it raised ``AttributeError: 'list' object has no attribute
    'shape'``)."""
    from torch_geometric.data import Data
    from ddstore import pyg as dpyg
    pairs = [[0, 1, 2, 2], [1, 2, 0, 3]]
    _, a = dpyg.from_pyg(store, Data(edge_index=pairs, num_nodes=4,
                                     edge_attr=[1.0, 2.0, 3.0, 4.0]), name="lst")
    fs, b = dpyg.from_pyg(store, Data(edge_index=torch.tensor(pairs), num_nodes=4),
                          name="ten")
    for x, y in zip(a.get_edge_index(None, "coo"), b.get_edge_index(None, "coo")):
        assert torch.equal(x, y)
    assert a.get_edge_index(None, "coo")[1].tolist() == pairs[1]
    assert store.get_range("lst/edge/_N__to___N/edge_attr", 0, 4).tolist() == \
        [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("how", ["put_edge_index", "pair", "put_edge_range", "callable"])
def test_uint64_node_id_beyond_int64_named(store, how):
    """A uint64 node id of 2**63 (beyond int64) is refused as such, naming the id and the
    range (it was cast to -2**63 and reported as a "negative node id"); uint64 ids within
    range load."""
    import numpy as np
    from ddstore import DDStoreIndexError, pyg as dpyg
    bad = np.array([[0, 2 ** 63, 1], [1, 0, 2]], dtype=np.uint64)
    good = np.array([[0, 2, 1], [1, 0, 2]], dtype=np.uint64)

    def put(gs, ei):
        if how == "put_edge_index":
            return gs.put_edge_index(ei, edge_type=None, layout="coo", size=(3, 3))
        if how == "pair":
            return gs.put_edge_index((ei[0], ei[1]), edge_type=None, layout="coo",
                                     size=(3, 3))
        if how == "put_edge_range":
            return gs.put_edge_range(ei, rows=(0, 3), size=(3, 3))
        return gs.put_edge_range(lambda a, b: ei[:, a:b], rows=(0, 3), size=(3, 3))
    with pytest.raises(DDStoreIndexError, match=re.escape(
            "node id 9223372036854775808 (uint64) is beyond int64; node ids must be in "
            "[0, num_nodes) with num_nodes <= 2**63 - 1")):
        put(dpyg.GraphStore(store, "bad"), bad)
    assert store.variables() == []
    gs = dpyg.GraphStore(store, "good")
    put(gs, good)
    assert gs.get_edge_index(None, "coo")[0].tolist() == [0, 2, 1]
