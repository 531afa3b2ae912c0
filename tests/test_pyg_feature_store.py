"""ddstore.pyg.FeatureStore against PyG's own in-memory semantics (issue 26, items 2, 3, 7):
every call made on our store and on a reference FeatureStore subclass backed by a dict
(torch indexing, as PyG's ``Data`` does it), results compared byte for byte; PyG's
views and TensorAttr; from_pyg / from_hetero storing exactly the per-node and per-edge
values (memmaps and other array-likes read range-wise).  The same at 2 ranks:
tests/mpi/pyg_features.py (shared launch)."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data, FeatureStore as PygFeatureStore
from torch_geometric.data import TensorAttr as PygTensorAttr
from torch_geometric.data.feature_store import AttrView

from _graphs import two_type_graph
from conftest import passes_in_process, widths_program_test


class RefStore(PygFeatureStore):
    """PyG's contract in memory: a dict of tensors; put with an index writes those rows
    of a held tensor (``out[index] = tensor``, as ``Data._put_tensor``)."""

    def __init__(self):
        super().__init__()
        self.d = {}

    @staticmethod
    def key(attr):
        g = tuple(attr.group_name) if isinstance(attr.group_name, list) else attr.group_name
        return g, attr.attr_name

    def _put_tensor(self, tensor, attr):
        if attr.index is None or (isinstance(attr.index, slice) and
                                  attr.index == slice(None)):
            self.d[self.key(attr)] = torch.as_tensor(tensor).clone()
        else:
            t = self.d[self.key(attr)]
            t[attr.index] = torch.as_tensor(tensor).to(t.dtype)
        return True

    def _get_tensor(self, attr):
        t = self.d.get(self.key(attr))
        if t is None:
            raise KeyError(f"no {attr}")
        return t if attr.index is None else t[attr.index]

    def _remove_tensor(self, attr):
        return self.d.pop(self.key(attr), None) is not None

    def _get_tensor_size(self, attr):
        return self._get_tensor(attr).size()

    def get_all_tensor_attrs(self):  # index UNSET, as PyG's Data / HeteroData list them
        return [PygTensorAttr(g, a) for g, a in self.d]


def same(a, b):
    """Byte-equal tensors (dtype, shape and every byte)."""
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype in (torch.bfloat16, torch.float16):
        a, b = a.view(torch.int16), b.view(torch.int16)
    return a.contiguous().numpy().tobytes() == b.contiguous().numpy().tobytes()


def both(fs, ref, call, *args, **kwargs):
    """The same call on both stores: equal results (or both KeyError)."""
    out = []
    for s in (fs, ref):
        try:
            out.append(getattr(s, call)(*args, **kwargs))
        except KeyError:
            out.append(KeyError)
    return out


@pytest.fixture
def fs(store):
    from ddstore import pyg as dpyg
    return dpyg.FeatureStore(store, "f")


def test_tensor_attr_is_pygs(fs):
    """ddstore.pyg.TensorAttr is PyG's (equal, same defaults); fs.view().x is a view."""
    from ddstore import pyg as dpyg
    assert dpyg.TensorAttr("a", "x", None) == PygTensorAttr("a", "x", None)
    assert dpyg.TensorAttr() == PygTensorAttr()
    fs["g", "x"] = torch.arange(6.).view(3, 2)
    assert isinstance(fs.view().x, AttrView)
    assert isinstance(fs["g", "x"], AttrView) and isinstance(fs["g"], AttrView)
    ref = RefStore()
    ref["g", "x", None] = torch.arange(6.).view(3, 2)
    for get in (lambda s: s.view().g.x[:], lambda s: s["g"]["x"][torch.tensor([2, 0])],
                lambda s: s["g", "x"][-1], lambda s: s["g", "x"](),
                lambda s: s.view(group_name="g").x[1]):
        assert same(get(fs), get(ref))
    with pytest.raises(AttributeError):
        fs.view(group_name="g", index=None).x.g


@pytest.mark.parametrize("index", [
    None, slice(None), slice(1, 4), slice(-3, None), slice(None, None, 2), 3, -1, -5,
    torch.tensor(2), np.int64(4), [0, -1, 2, -2], torch.tensor([4, 0, 4, -3]),
    np.array([1, -1]), torch.tensor([], dtype=torch.long),
    torch.tensor([True, False, True, False, True]),
    np.array([False, True, False, True, False]), [True, False, False, True, True]])
def test_get_as_torch_indexing(fs, index):
    """get_tensor / multi_get_tensor with every index form PyG's stores take: the same
    bytes and shape as torch indexing (an int gives [F], negatives from the end)."""
    ref = RefStore()
    x = torch.arange(15, dtype=torch.float64).view(5, 3)
    y = torch.arange(5, dtype=torch.int32) * 7
    for s in (fs, ref):
        s.put_tensor(x, "n", "x", None)
        s.put_tensor(y, "n", "y", None)
    # PyG's base class cannot take a numpy array index (its is_set compares arrays):
    # the reference then indexes its tensors with the same index as a torch tensor
    tidx = torch.from_numpy(index) if isinstance(index, np.ndarray) else index
    a, b = fs.get_tensor("n", "x", index), ref.get_tensor("n", "x", tidx)
    assert same(a, b), (a, b)
    got = fs.multi_get_tensor([PygTensorAttr("n", "x", index), PygTensorAttr("n", "y", index),
                               PygTensorAttr("n", "x", index)])
    want = ref.multi_get_tensor([PygTensorAttr("n", "x", tidx),
                                 PygTensorAttr("n", "y", tidx),
                                 PygTensorAttr("n", "x", tidx)])
    assert all(same(g, w) for g, w in zip(got, want))
    size = fs.get_tensor_size("n", "x", index)
    assert type(size) is torch.Size and size == b.shape  # PyG's: get_tensor().size()


def test_uint8_masks_and_tuples_as_torch_reads_them(fs):
    """A uint8 index (tensor or numpy array) is a mask, as torch reads it (not the rows 0
    and 1: they were read silently), in reads, sizes, indexed puts and a first put; a
    tuple index is refused, named (torch reads one index per dimension)."""
    from ddstore import DDStoreIndexError
    x = torch.arange(15, dtype=torch.float64).view(5, 3)
    fs.put_tensor(x, "n", "x", None)
    m = [0, 1, 1, 0, 1]
    mask = torch.tensor(m, dtype=torch.bool)
    for index in (torch.tensor(m, dtype=torch.uint8), np.array(m, np.uint8)):
        assert same(fs.get_tensor("n", "x", index), x[mask])
        assert same(fs.multi_get_tensor([PygTensorAttr("n", "x", index)])[0], x[mask])
        assert fs.get_tensor_size("n", "x", index) == (3, 3)
    fs.put_tensor(torch.full((3, 3), -1.0, dtype=torch.float64), "n", "x",
                  index=torch.tensor(m, dtype=torch.uint8))
    want = x.clone()
    want[mask] = -1
    assert same(fs.get_tensor("n", "x", None), want)
    fs.put_tensor(torch.ones(3, 2), "n", "z", index=np.array(m, np.uint8))  # a first put
    assert same(fs.get_tensor("n", "z", None), mask[:, None].float().expand(5, 2))
    for call in (lambda: fs.get_tensor("n", "x", (1, 2)),
                 lambda: fs.put_tensor(torch.ones(2, 3), "n", "x", index=(1, 2)),
                 lambda: fs.put_tensor(torch.ones(2, 3), "n", "w", index=(1, 2))):
        with pytest.raises(DDStoreIndexError, match=r"tuple index \(1, 2\): torch reads "
                                                    r"a tuple as one index per dimension"):
            call()
    assert same(fs.get_tensor("n", "x", None), want)


def test_put_with_index_updates_rows(fs):
    """put_tensor with an index writes those rows of a held attribute (values broadcast
    and cast as ``out[idx] = v``); whole puts with index None / slice(None); a whole put
    of the same layout replaces in place, of another layout puts the attribute again (as
    PyG's reference store); values that do not fit: refused, nothing changed (an index
    on an attribute not held creates it: test_first_put_with_index)."""
    from ddstore import DDStoreValueError, DDStoreIndexError
    ref = RefStore()
    x = torch.arange(24, dtype=torch.float32).view(8, 3)
    steps = [(x, dict(index=None)),
             (torch.full((2, 3), -1.0), dict(index=torch.tensor([6, -8]))),
             (torch.tensor(5.0), dict(index=slice(5, None))),               # broadcast
             (torch.tensor([[1, 2, 3]], dtype=torch.int64), dict(index=[2])),  # cast
             (torch.full((3,), 4.5), dict(index=3)),
             (torch.ones(4, 3) * 2, dict(index=torch.tensor([True, False] * 4))),
             (x.flip(0), dict(index=slice(None)))]
    for value, kw in steps:
        for s in (fs, ref):
            assert s.put_tensor(value, "n", "x", **kw) is True
        assert same(fs.get_tensor("n", "x", None), ref.get_tensor("n", "x", None)), kw
    assert same(fs.get_tensor("n", "x", None), x.flip(0))
    for value in (x[:5].double(), x.flip(0)):  # another layout, then the first again
        for s in (fs, ref):
            assert s.put_tensor(value, "n", "x", None) is True
        assert same(fs.get_tensor("n", "x", None), ref.get_tensor("n", "x", None))
        assert fs.get_tensor("n", "x", None).dtype == value.dtype
    before = fs.get_tensor("n", "x", None)
    with pytest.raises(DDStoreValueError, match="cannot be cast"):
        fs.put_tensor(torch.ones(1, 3, dtype=torch.complex64), "n", "x", index=[0])
    with pytest.raises(DDStoreValueError, match="do not fit 2 indexed rows"):
        fs.put_tensor(torch.ones(3, 3), "n", "x", index=[0, 1])
    with pytest.raises(DDStoreIndexError, match=r"index 8 \(position 1\) out of range"):
        fs.put_tensor(torch.ones(2, 3), "n", "x", index=[0, 8])
    assert same(fs.get_tensor("n", "x", None), before)
    assert [a.attr_name for a in fs.get_all_tensor_attrs()] == ["x"]
    # update_tensor: in place with the same layout, remove + put otherwise (PyG's)
    # (PyG's default update_tensor with an index removes the tensor, then fails to put
    # rows of it: ours writes the rows, what put_tensor with that index does)
    for s in (fs, ref):
        s.update_tensor(x[:5].double(), "n", "x", None)
    fs.update_tensor(torch.zeros(2, 3, dtype=torch.float64), "n", "x", index=[0, 4])
    ref.put_tensor(torch.zeros(2, 3, dtype=torch.float64), "n", "x", index=[0, 4])
    fs.update_tensor(torch.ones(5, 3, dtype=torch.float64), "n", "x", None)  # in place
    ref.update_tensor(torch.ones(5, 3, dtype=torch.float64), "n", "x", None)
    assert same(fs.get_tensor("n", "x", None), ref.get_tensor("n", "x", None))


def test_indexed_puts_refuse_values_the_dtype_cannot_hold(fs):
    """An indexed put (put_tensor / update_tensor / ``fs[...] = v``) of a value the
    attribute's dtype cannot hold (an int64 id beyond int32, 300 into int8, 1e300 into
    float32 or bfloat16) is refused naming the value and its position, nothing written
    (it used to wrap: 2**32 + 5 stored as 5); values that fit are cast as before."""
    from ddstore import DDStoreValueError
    fs.put_tensor(torch.zeros(4, dtype=torch.int32), "g", "ids", None)
    fs.put_tensor(torch.zeros(4, dtype=torch.int8), "g", "small", None)
    fs.put_tensor(torch.zeros(2), "g", "f", None)
    fs.put_tensor(torch.zeros(2, dtype=torch.bfloat16), "g", "b", None)
    with pytest.raises(DDStoreValueError, match=r"value 4294967301 at \(0,\) does not fit "
                                                r"the attribute's dtype int32 .*stored as 5"):
        fs.update_tensor(torch.tensor([2**32 + 5]), "g", "ids", index=torch.tensor([3]))
    with pytest.raises(DDStoreValueError, match=r"value 300 at \(1,\) does not fit the "
                                                r"attribute's dtype int8 \(\[-128, 127\]\)"):
        fs["g", "small", torch.tensor([0, 1])] = torch.tensor([3, 300])
    with pytest.raises(DDStoreValueError, match="value 1e\\+300 at .*float32"):
        fs.put_tensor(torch.tensor([1e300], dtype=torch.float64), "g", "f", index=[1])
    with pytest.raises(DDStoreValueError, match=r"value 1e\+300 at \(0,\) does not fit the "
                                                r"attribute's dtype torch.bfloat16"):
        fs.put_tensor(torch.tensor([1e300], dtype=torch.float64), "g", "b", index=[1])
    for attr, dtype in (("ids", torch.int32), ("small", torch.int8)):
        assert same(fs.get_tensor("g", attr, None), torch.zeros(4, dtype=dtype))
    assert same(fs.get_tensor("g", "f", None), torch.zeros(2))
    assert same(fs.get_tensor("g", "b", None), torch.zeros(2, dtype=torch.bfloat16))
    fs.put_tensor(torch.tensor([2**31 - 1, -2**31]), "g", "ids", index=[0, 3])  # they fit
    fs.put_tensor(torch.tensor([1e30], dtype=torch.float64), "g", "b", index=[0])
    assert fs.get_tensor("g", "ids", None).tolist() == [2**31 - 1, 0, 0, -2**31]
    assert fs.get_tensor("g", "b", None)[0].item() == torch.tensor(1e30).bfloat16().item()


def test_bfloat16_round_trip(fs, store):
    """bfloat16 (no numpy dtype) is stored as its bit pattern and read back as bfloat16:
    every byte, whole, by index and row puts."""
    ref = RefStore()
    g = torch.Generator().manual_seed(3)
    b = torch.randn(9, 4, generator=g).bfloat16()
    b[0, 0] = float("nan")
    b[1, 1] = float("-inf")
    for s in (fs, ref):
        s.put_tensor(b, "n", "b", None)
        s.put_tensor(torch.tensor([1.5, -2.25, 3.0, 0.0]), "n", "b", index=[-1])
    for index in (None, 3, torch.tensor([8, 0, 2])):
        a, r = both(fs, ref, "get_tensor", "n", "b", index)
        assert a.dtype == torch.bfloat16 and same(a, r)
    assert store.dtype("f/node/n/b") == np.int16
    assert fs.get_tensor_size("n", "b", None) == (9, 4)


def test_group_keys_edge_types_and_missing(fs):
    """attr_name=None is the group's own tensor (fs[group] = x; fs[group]()); edge types
    given as lists are the tuples; hetero edge attributes are listed; a missing
    attribute: KeyError on get, False on remove, None size."""
    ref = RefStore()
    t = torch.arange(6).view(3, 2)
    et = ("a", "to", "b")
    fs["A"] = t  # PyG's own __setitem__ asserts a fully specified key; ours fills None
    ref.put_tensor(t, "A", None, None)
    w = torch.arange(5, dtype=torch.float16)
    for s in (fs, ref):
        s.put_tensor(w, list(et), "w", None)
    assert same(fs["A"](), ref["A"]()) and same(fs.get_tensor("A", None, None), t)
    for group in (et, list(et)):
        a, r = both(fs, ref, "get_tensor", group, "w", torch.tensor([-1, 0]))
        assert same(a, r)
        got = fs.multi_get_tensor([PygTensorAttr(group, "w", [1, 2])])
        assert same(got[0], w[[1, 2]])
    assert sorted(map(repr, fs.get_all_tensor_attrs())) == sorted(
        map(repr, ref.get_all_tensor_attrs()))
    assert both(fs, ref, "get_tensor", "A", "nope", None) == [KeyError, KeyError]
    assert both(fs, ref, "get_tensor", "zz", None, None) == [KeyError, KeyError]
    assert both(fs, ref, "remove_tensor", "zz", "x", None) == [False, False]
    assert fs.get_tensor_size("zz", "x") is None
    assert both(fs, ref, "remove_tensor", list(et), "w", None) == [True, True]
    assert both(fs, ref, "get_tensor", et, "w", None) == [KeyError, KeyError]
    del fs["A"]
    with pytest.raises(KeyError):
        fs["A"]()


def test_keys_that_shared_a_variable_are_apart(fs, store):
    """Distinct keys are distinct variables, as in PyG's stores: node type None and
    ``"_"``, ``("a/b", "c")`` and ``("a", "b/c")``, edge types ``("a__b", "c", "d")``
    and ``("a", "b__c", "d")`` shared one (the second put refused naming a variable the
    user never made; a graph store found another edge type's weights by that name and
    sampled with them); usual names keep their variables (checkpoints of them open)."""
    from ddstore import pyg as dpyg
    from ddstore.pyg._common import from_name_part, name_part, node_var, type_key
    ref = RefStore()
    keys = [(None, "x"), ("_", "x"), ("a/b", "c"), ("a", "b/c"), ("a", "%2F"),
            (("a__b", "c", "d"), "w"), (("a", "b__c", "d"), "w"), (("a_", "_b", "c"), "w"),
            (("a", "__b", "c"), "w"), ("p", "_x"), ("p", "x_"), (("x__y", "z", "d"), "w")]
    for i, (g, a) in enumerate(keys):
        t = torch.full((3, 2), float(i))
        for st in (fs, ref):
            st.put_tensor(t, g, a, None)
    for g, a in keys:
        assert same(fs.get_tensor(g, a, None), ref.get_tensor(g, a, None)), (g, a)
    assert sorted(map(repr, fs.get_all_tensor_attrs())) == sorted(
        map(repr, ref.get_all_tensor_attrs()))
    for text in ("", "_", "a__b", "%", "%25", "a/b", "_N", "x_", "rev_writes", "%E"):
        assert from_name_part(name_part(text)) == text
    assert type_key(("paper", "rev_writes", "author")) == "paper__rev_writes__author"
    assert node_var("f", "paper", "edge_attr") == "f/node/paper/edge_attr"  # (unchanged)
    # the graph store's weights by edge type, not by a name another type shares
    gs = dpyg.GraphStore(store, "f", weight_attr="w")
    gs.put_edge_index(torch.tensor([[0, 1, 2], [0, 0, 0]]), edge_type=("x", "y__z", "d"),
                      layout="coo", size=(3, 1))
    assert gs.weight_attr_of(("x", "y__z", "d")) is None


def test_store_names_refuse_a_slash(store):
    """A feature store named ``g/node/a`` held variables that graph store ``g`` took for
    its own node attributes (its inferred size and node counts became theirs): a store
    name is refused with a ``/``, on both kinds, nothing made."""
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    for cls in (dpyg.FeatureStore, dpyg.GraphStore):
        for bad in ("g/node/a", "", 3):
            with pytest.raises(DDStoreValueError, match=rf"{cls.__name__} name must be a "
                                                        rf"non-empty str without '/', got "):
                cls(store, bad)
    assert store.variables() == [] and store.annotations() == []
    fs = dpyg.FeatureStore(store, "g")  # and a plain name is not taken by another's
    fs.put_tensor(torch.zeros(3, 1), group_name="a", attr_name="x", index=None)
    gs = dpyg.GraphStore(store, "g")
    gs.put_edge_index(torch.tensor([[0, 1], [1, 2]]), edge_type=("a", "r", "a"),
                      layout="coo")
    assert gs.node_counts() == {"a": 3}


def test_a_second_store_of_a_name_in_use_is_refused(store, tmp_path):
    """A second FeatureStore / GraphStore under a name already in use (the default
    "pyg" twice) replaced the first's record: its declared node counts (a loader seeded
    on a node type then refused it) and what a restore reopens (both reopened empty
    though every variable was saved).  Now refused, naming how to reopen it; the
    first works on, and is reopened whole after a restore.  One made over an empty
    record (a store whose first put failed, made again) is made, and then the earlier
    object refuses its next change (two objects of one name replaced each other's
    record, the session's review found), as does one opened before another's change."""
    from torch_geometric.data import HeteroData
    from ddstore import DDStore, DDStoreValueError
    from ddstore import pyg as dpyg
    h = HeteroData()
    h["author"].x = torch.arange(8.).view(4, 2)
    h["paper"].num_nodes = 6
    h["author", "writes", "paper"].edge_index = torch.tensor([[0, 1, 3], [5, 0, 2]])
    fs, gs = dpyg.from_hetero(store, h)
    before = (store.variables(), store.annotations(), gs.node_counts())
    for cls in (dpyg.FeatureStore, dpyg.GraphStore):
        with pytest.raises(DDStoreValueError, match=rf"{cls.__name__} 'pyg': this store "
                                                    rf"holds one of that name already, "
                                                    rf"not empty: reopen it with "
                                                    rf"{cls.__name__}.open\(store, 'pyg'\)"):
            cls(store)
    assert (store.variables(), store.annotations(), gs.node_counts()) == before
    assert gs.node_counts() == {"author": 4, "paper": 6}
    from ddstore import DDStoreStateError
    old = (dpyg.FeatureStore(store, "e"), dpyg.GraphStore(store, "e"))
    new = (dpyg.FeatureStore(store, "e"), dpyg.GraphStore(store, "e"))  # over empty ones
    before = (store.variables(), store.annotations())
    ab = torch.tensor([[0, 1], [1, 2]])
    changes = [lambda fs, gs: fs.put_tensor(torch.ones(3), group_name=None, attr_name="x"),
               lambda fs, gs: gs.put_edge_index(ab, edge_type=None, layout="coo",
                                                size=(3, 3))]
    for change in changes:
        with pytest.raises(DDStoreStateError, match=r"Store 'e': this object is out of "
                                                    r"date: another .*Store of that name"):
            change(*old)
        assert (store.variables(), store.annotations()) == before  # (rolled back)
    for change in changes:
        change(*new)
    opened = dpyg.FeatureStore.open(store, "e")
    new[0].put_tensor(torch.zeros(2), group_name=None, attr_name="y")
    for _ in range(2):  # (a refused change leaves it out of date: refused again)
        with pytest.raises(DDStoreStateError, match="FeatureStore 'e': this object is out "):
            opened.remove_tensor(group_name=None, attr_name="x")
    writes = [  # in place, into an attribute it holds (another's replacement may differ)
        lambda: opened.put_tensor(torch.full((3,), 5.), group_name=None, attr_name="x"),
        lambda: opened.put_tensor(torch.full((1,), 5.), group_name=None, attr_name="x",
                                  index=torch.tensor([2])),
        lambda: opened.update_tensor(torch.full((3,), 5.), group_name=None, attr_name="x")]
    for write in writes:
        with pytest.raises(DDStoreStateError, match="FeatureStore 'e': this object is out "):
            write()
    assert new[0].get_tensor(group_name=None, attr_name="x").tolist() == [1., 1., 1.]
    # an attribute another object replaced: this one's reads and sizes are refused
    # (they read the new variable's first rows as if of the old layout, and
    # get_tensor_size answered the old shape); an attribute left alone still reads
    stale = dpyg.FeatureStore.open(store, "e")
    new[0].update_tensor(torch.arange(8).view(4, 2), group_name=None, attr_name="x")
    reads = [lambda: stale.get_tensor(group_name=None, attr_name="x"),
             lambda: stale.get_tensor(group_name=None, attr_name="x", index=[0, 1]),
             lambda: stale.multi_get_tensor([PygTensorAttr(None, "y", None),
                                             PygTensorAttr(None, "x", None)]),
             lambda: stale.get_tensor_size(group_name=None, attr_name="x")]
    for read in reads:
        with pytest.raises(DDStoreStateError, match=r"FeatureStore 'e': .*\(None, 'x'\): "
                                                    r"this object is out of date: the "
                                                    r"attribute's variable 'e/node/_/x' "
                                                    r"was removed or replaced since"):
            read()
    assert stale.get_tensor(group_name=None, attr_name="y").tolist() == [0., 0.]
    assert stale.get_tensor_size(group_name=None, attr_name="y") == (2,)
    assert new[0].get_tensor_size(group_name=None, attr_name="x") == (4, 2)
    new[0].update_tensor(torch.ones(3), group_name=None, attr_name="x")
    # inside a transaction: an object opened before reads no set-aside rows (it read
    # the old ones), one opened in it is out of date after a rollback (it listed no x,
    # so a loader over it would have left x out), and a GraphStore opened before is
    # refused as out of date (it named a hidden variable)
    x0 = torch.arange(12.).view(6, 2)
    changer = dpyg.FeatureStore(store, "tx")
    changer.put_tensor(x0, group_name=None, attr_name="x")
    before = dpyg.FeatureStore.open(store, "tx")
    with store.transaction("t"):
        changer.update_tensor(x0.double() * 10, group_name=None, attr_name="x")
        assert changer.get_tensor(group_name=None, attr_name="x")[1].tolist() == [20., 30.]
        with pytest.raises(DDStoreStateError, match=r"FeatureStore 'tx': get_tensor "
                                                    r"\(None, 'x'\): this object is out "
                                                    r"of date"):
            before.get_tensor(group_name=None, attr_name="x")
    with pytest.raises(DDStoreValueError, match="boom"):
        with store.transaction("t"):
            changer.remove_tensor(group_name=None, attr_name="x")
            inside = dpyg.FeatureStore.open(store, "tx")
            assert inside.get_all_tensor_attrs() == []
            with store.collective("fail"):
                raise DDStoreValueError("boom")
    assert changer.get_tensor(group_name=None, attr_name="x")[1].tolist() == [20., 30.]
    for call in (inside.get_all_tensor_attrs,
                 lambda: inside.get_tensor(group_name=None, attr_name="x")):
        with pytest.raises(DDStoreStateError, match=r"FeatureStore 'tx': .*this object is "
                                                    r"out of date: the attributes recorded "
                                                    r"of its name changed since"):
            call()
    assert [a.attr_name for a in dpyg.FeatureStore.open(store, "tx").get_all_tensor_attrs()
            ] == ["x"]
    g_changer = dpyg.GraphStore(store, "tx")
    g_changer.put_edge_index(ab, edge_type=None, layout="coo", size=(3, 3))
    g_before = dpyg.GraphStore.open(store, "tx")
    with store.transaction("t"):
        g_changer.put_edge_index(ab.flip(0), edge_type=None, layout="coo", size=(3, 3))
        with pytest.raises(DDStoreStateError, match=r"get_edge_index: the edges of edge "
                                                    r"type None \(layout 'coo'\) in graph "
                                                    r"store 'tx' were replaced or removed"):
            g_before.get_edge_index(edge_type=None, layout="coo")
    # a batch made ahead while this object replaces its own attribute (between the
    # set-aside and its new record) lists what it holds, as a change under a live
    # read-ahead is documented; it was refused as made out of date by another object
    from ddstore import _readers
    seen = []
    real_add = store.add

    def add(name, *args, **kwargs):
        with _readers.reading():  # (what a prefetch thread's batch does at this moment)
            seen.append(sorted(a.attr_name for a in changer.get_all_tensor_attrs()))
        return real_add(name, *args, **kwargs)
    changer.put_tensor(torch.ones(6), group_name=None, attr_name="y")
    store.add = add
    try:
        with store.transaction("t"):
            changer.update_tensor(torch.ones(6, 3), group_name=None, attr_name="x")
    finally:
        del store.add
    assert seen == [["y"]], seen
    assert sorted(a.attr_name for a in changer.get_all_tensor_attrs()) == ["x", "y"]
    lone = dpyg.FeatureStore(store, "lone")  # its variable removed under it: its record
    lone.put_tensor(torch.ones(2), group_name=None, attr_name="v")  # goes too, and the
    store.remove("lone/node/_/v")  # message does not send the user to open it
    with pytest.raises(DDStoreStateError, match=r"'lone/node/_/v' was removed or replaced "
                                                r"since .*; the store holds no FeatureStore "
                                                r"'lone' now$"):
        lone.get_tensor(group_name=None, attr_name="v")
    with store.transaction("t"):  # changes of its own, then rolled back: up to date
        new[0].put_tensor(torch.zeros(2), group_name=None, attr_name="z")
        new[1].build_backward()
    with pytest.raises(DDStoreValueError):
        with store.transaction("t"):
            new[0].remove_tensor(group_name=None, attr_name="z")
            new[1].put_edge_index(ab, edge_type=("a", "r", "a"), layout="coo", size=(3, 3))
            with store.collective("fail"):
                raise DDStoreValueError("fail")
    new[0].remove_tensor(group_name=None, attr_name="z")
    new[1].remove_edge_index(edge_type=None, layout="coo")
    assert sorted(a.attr_name for a in dpyg.FeatureStore.open(
        store, "e").get_all_tensor_attrs()) == ["x", "y"]
    assert dpyg.GraphStore.open(store, "e").get_all_edge_attrs() == []
    # objects built in a transaction that rolled back, their name built again: refused
    data = Data(x=torch.arange(6.).view(3, 2), edge_index=ab)
    with pytest.raises(DDStoreValueError, match="rolled back"):
        with store.transaction("t"):
            gone = dpyg.from_pyg(store, data, name="np")
            with store.collective("fail"):
                raise DDStoreValueError("rolled back")
    fs_np, gs_np = dpyg.from_pyg(store, data, name="np")
    with pytest.raises(DDStoreStateError, match="FeatureStore 'np': this object is out "):
        gone[0].put_tensor(torch.ones(3), group_name=None, attr_name="zz")
    with pytest.raises(DDStoreStateError, match="GraphStore 'np': this object is out "):
        gone[1].put_edge_index(ab, edge_type=("a", "to", "a"), layout="coo", size=(3, 3))
    assert [a.attr_name for a in dpyg.FeatureStore.open(store, "np").get_all_tensor_attrs()
            ] == ["x"]
    store.save(str(tmp_path / "ck"))
    with DDStore.restore(str(tmp_path / "ck"), store.comm) as back:
        fs2, gs2 = dpyg.open_stores(back)
        assert sorted(map(repr, fs2.get_all_tensor_attrs())) == \
            sorted(map(repr, fs.get_all_tensor_attrs()))
        assert gs2.node_counts() == {"author": 4, "paper": 6}
        assert [tuple(t) for t in gs2.get_edge_index(
            edge_type=("author", "writes", "paper"), layout="coo")] == \
            [tuple(t) for t in gs.get_edge_index(edge_type=("author", "writes", "paper"),
                                                 layout="coo")]


def test_homogeneous_edge_attributes_not_listed_for_loaders(store):
    """A homogeneous graph's edge attributes (EDGES) stay out of get_all_tensor_attrs:
    PyG's homogeneous loader reads every listed attribute by node ids; the batch gets
    them by e_id through edge_features."""
    from ddstore import pyg as dpyg
    data = Data(x=torch.randn(6, 2), edge_index=torch.tensor([[0, 1, 2, 3, 4, 5, 0],
                                                                [1, 2, 3, 4, 5, 0, 2]]),
                edge_attr=torch.arange(7.))
    fs, gs = dpyg.from_pyg(store, data)
    assert [(a.group_name, a.attr_name) for a in fs.get_all_tensor_attrs()] == [(None, "x")]
    assert [(a.group_name, a.attr_name) for a in fs.edge_tensor_attrs()] == [
        (dpyg.EDGES, "edge_attr")]


def test_listed_attributes_as_pygs_stores_list_them(store):
    """get_all_tensor_attrs() lists what PyG's HeteroData lists for the same node
    attributes: equal TensorAttrs, index UNSET (as PyG's loaders expect to fill it)."""
    from torch_geometric.data import HeteroData
    from torch_geometric.data.feature_store import _FieldStatus
    from ddstore import pyg as dpyg
    h = HeteroData()
    h["a"].x = torch.randn(4, 2)
    h["a"].y = torch.arange(4)
    h["b"].x = torch.randn(3, 5)
    fs, _ = dpyg.from_hetero(store, h, name="listed")
    ours, pygs = fs.get_all_tensor_attrs(), h.get_all_tensor_attrs()
    assert sorted(ours, key=repr) == sorted(pygs, key=repr), (ours, pygs)
    assert all(a.index is _FieldStatus.UNSET for a in ours + fs.edge_tensor_attrs())
    for a in ours:  # what PyG's loaders do with them: set the index, then read
        a.index = torch.tensor([0, 2])
        assert same(fs.get_tensor(a), h[a.group_name][a.attr_name][[0, 2]])


class RowSpy:
    """An array-like (shape, dtype, row slicing) that records what is read and refuses
    to be read whole."""

    def __init__(self, arr):
        self.arr, self.reads = arr, []
        self.shape, self.dtype = arr.shape, arr.dtype

    def __getitem__(self, key):
        assert isinstance(key, slice), key
        self.reads.append((key.start, key.stop))
        return self.arr[key]

    def __len__(self):
        return len(self.arr)

    def __array__(self, *args, **kwargs):
        raise AssertionError("read whole")


def test_from_pyg_memmap_and_array_likes(store, tmp_path):
    """from_pyg stores an np.memmap x (it was silently skipped) and any array-like
    (read by row slices, never whole); numpy arrays and lists of node length too; a
    value that cannot be stored is refused naming it, with nothing left in the store."""
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    n = 11
    mm = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="w+", shape=(n, 3))
    mm[:] = np.random.default_rng(0).standard_normal((n, 3))
    spy = RowSpy(np.arange(n * 2, dtype=np.int16).reshape(n, 2))
    ei = torch.tensor([[0, 1, 2, 10], [1, 2, 3, 0]])
    data = Data(x=mm, s=spy, yn=np.arange(n), lst=list(range(n)), edge_index=ei,
                num_nodes=n, title="graph", scalar=torch.tensor(3.0))
    fs, gs = dpyg.from_pyg(store, data, name="m")
    assert spy.reads == [(0, n)]  # one rank, width 1: its range is every row
    assert same(fs.get_tensor(None, "x", None), torch.from_numpy(np.array(mm)))
    assert same(fs.get_tensor(None, "s", None), torch.from_numpy(spy.arr))
    assert same(fs.get_tensor(None, "yn", None), torch.arange(n))
    assert same(fs.get_tensor(None, "lst", None), torch.arange(n))
    assert sorted(a.attr_name for a in fs.get_all_tensor_attrs()) == ["lst", "s", "x", "yn"]
    before = store.variables()
    bad = Data(x=torch.randn(n, 2), names=np.array(["v"] * n), edge_index=ei, num_nodes=n)
    with pytest.raises(DDStoreValueError, match="'names'.*cannot be stored"):
        dpyg.from_pyg(store, bad, name="bad")
    assert store.variables() == before


def test_hetero_edge_label_index_not_an_edge_attribute(store):
    """from_hetero keeps only per-edge values (first dimension = the type's edges) as
    edge attributes: edge_label_index [2, L] and an edge_label of L labels are not; the
    edge_features transform then works (it failed with 'index ... out of range [0, 2)')."""
    from torch_geometric.loader import NeighborLoader
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(5)
    et = ("a", "to", "b")
    h = two_type_graph(g, 7, 5, 20, et)
    h[et].w = torch.randn(20, 3, generator=g)
    h[et].edge_label_index = torch.randint(0, 5, (2, 4), generator=g)
    h[et].edge_label = torch.ones(4)
    fs, gs = dpyg.from_hetero(store, h, name="h")
    assert sorted((str(a.group_name), a.attr_name) for a in fs.get_all_tensor_attrs()) == [
        ("('a', 'to', 'b')", "w"), ("a", "x"), ("b", "x")]
    s = dpyg.NeighborSampler(gs, [-1])
    loader = NeighborLoader((fs, gs), num_neighbors=[-1], input_nodes=("b", torch.arange(5)),
                            batch_size=5, neighbor_sampler=s,
                            transform=dpyg.edge_features(fs))
    b = next(iter(loader))
    assert b[et].e_id.numel() == 20
    assert same(b[et].w, h[et].w[b[et].e_id])
    # attr_names: one name as a str or a list; a name no edge type holds is refused
    for names in ("w", ["w"]):
        b = dpyg.edge_features(fs, names)(next(iter(loader)))
        assert same(b[et].w, h[et].w[b[et].e_id])
    with pytest.raises(dpyg.UnknownAttributeError, match="no edge attribute 'v' in "
                                                          "feature store 'h'"):
        dpyg.edge_features(fs, ["w", "v"])(next(iter(loader)))


def test_mpi_program_one_rank():
    """tests/mpi/pyg_features.py on one rank, in this process."""
    passes_in_process("pyg_features", [1], more_than=20)


test_mpi_program = widths_program_test(
    "pyg_features.py", [(2, "all")], timeout=180,
    doc="""2 ranks, widths 1 and 2, both transports: memmap put range-wise (a spy sees only
    the rank's own rows read), bfloat16 round trip, row puts, hetero edge_label_index
    not stored and edge_features working.""")


# ------------------------------------------------------------ issue 38, item 1
def test_pygs_own_feature_store_calls(fs):
    """What PyG's test_feature_store asks of a store, asked of ours: a first put with an
    index (rows given by it), reads by index, update to another shape, removal (then a
    KeyError), views (equality, repr), every indexing form, the group's own tensor,
    deletion by ``del``."""
    t = torch.tensor([[0., 0, 0], [1, 1, 1], [2, 2, 2]])
    idx = torch.tensor([0, 1, 2])
    key = PygTensorAttr("A", "feat", idx)
    assert fs.put_tensor(t, key) is True
    assert same(fs.get_tensor(key), t)
    assert same(fs.get_tensor("A", "feat", index=torch.tensor([2, 0])), t[[2, 0]])
    assert fs.update_tensor(torch.tensor([0, 2]), "A", "feat", None) is True
    assert same(fs.get_tensor("A", "feat", None), torch.tensor([0, 2]))
    assert fs.remove_tensor("A", "feat", None) is True
    with pytest.raises(KeyError):
        fs.get_tensor(key)
    view = fs.view(group_name="A")
    view.attr_name = "feat"
    view["index"] = idx
    assert view == AttrView(fs, PygTensorAttr("A", "feat", idx))
    assert (view == 0) is False
    assert repr(view) == ("AttrView(store=FeatureStore('f', attributes=[]), attr=TensorAttr("
                          "group_name='A', attr_name='feat', index=tensor([0, 1, 2])))")
    fs["A", "feat", idx] = t  # a first put with an index again, by __setitem__
    for got in (fs["A", "feat", idx], fs["A", "feat", None], fs["A", "feat", :],
                fs["A"]["feat"][:], fs["A"].feat[:], fs.view().A.feat[:]):
        assert same(got, t)
    with pytest.raises(AttributeError):
        fs.view(group_name="A", index=None).feat.A
    assert fs["A"] == fs.view(PygTensorAttr(group_name="A"))
    assert fs["A"].feat == fs.view(PygTensorAttr(group_name="A", attr_name="feat"))
    fs["A"] = t * 2
    assert isinstance(fs["A"], AttrView) and same(fs["A"](), t * 2)
    del fs["A", "feat", idx]
    with pytest.raises(KeyError):
        fs["A", "feat", idx]
    del fs["A"]
    with pytest.raises(KeyError):
        fs["A"]()
    assert fs.get_all_tensor_attrs() == []


def test_pygs_own_calls_with_a_tensor_attr_of_its_own(store):
    """PyG's test_feature_store_override: a TensorAttr subclass without group_name
    (always None), so keys are ``(attr_name, index)``; a first put with an index by
    ``fs[name, index] = x``, then views and reads without a group."""
    from dataclasses import dataclass
    from torch_geometric.data.feature_store import _FieldStatus
    from ddstore import pyg as dpyg

    @dataclass
    class NoGroupAttr(PygTensorAttr):
        def __init__(self, attr_name=_FieldStatus.UNSET, index=_FieldStatus.UNSET):
            super().__init__(None, attr_name, index)

    class NoGroupStore(dpyg.FeatureStore):
        def __init__(self, store):
            super().__init__(store, "nogroup")
            self._tensor_attr_cls = NoGroupAttr

    fs = NoGroupStore(store)
    t = torch.tensor([[0., 0, 0], [1, 1, 1], [2, 2, 2]])
    idx = torch.tensor([0, 1, 2])
    fs["feat", idx] = t
    assert isinstance(fs["feat"], AttrView)
    for got in (fs["feat", idx], fs["feat"][idx], fs["feat"][:], fs["feat", :],
                fs.get_tensor("feat", None)):
        assert same(got, t)
    assert [(a.group_name, a.attr_name) for a in fs.get_all_tensor_attrs()] == [
        (None, "feat")]


def test_first_put_with_index(fs):
    """A first put with an index creates the attribute: ``largest index + 1`` rows,
    rows never written zeros (every index form: list, tensor, int, slice with a stop,
    boolean mask; bfloat16 too); later puts with an index write rows within them; what
    cannot be sized (a negative index, a slice without a stop) or does not fit is
    refused naming the way out, nothing created."""
    from ddstore import DDStoreIndexError, DDStoreValueError
    cases = [("list", [4, 1], torch.tensor([[1., 2], [3, 4]]), 5),
             ("tensor", torch.tensor([2, 0, 2]), torch.arange(6).view(3, 2), 3),
             ("int", 3, torch.tensor([7., 8.]), 4),
             ("slice", slice(1, 6, 2), torch.ones(3, 2, dtype=torch.float64), 6),
             ("mask", torch.tensor([False, True, False, True]), torch.full((2, 2), 9.), 4),
             ("numpy", np.array([6]), torch.ones(1, 2).bfloat16(), 7),
             ("empty", torch.tensor([], dtype=torch.long), torch.ones(0, 2), 0)]
    for name, index, x, rows in cases:
        want = torch.zeros((rows, 2), dtype=x.dtype)
        want[index] = x
        assert fs.put_tensor(x, "n", name, index=index) is True
        assert fs.num_rows("n", name) == rows
        assert same(fs.get_tensor("n", name, None), want), name
    fs.put_tensor(torch.tensor([[5., 5]]), "n", "list", index=[0])  # rows now held
    assert same(fs.get_tensor("n", "list", None), torch.tensor(
        [[5., 5], [3, 4], [0, 0], [0, 0], [1, 2]]))
    names, before = fs.store.variables(), fs.get_tensor("n", "list", None)
    with pytest.raises(DDStoreIndexError, match=r"index 5 \(position 0\) out of range "
                                                r"\[-5, 5\)"):
        fs.put_tensor(torch.ones(1, 2), "n", "list", index=[5])
    for index, match in ((-1, r"index -1 \(position 0\) counts from the end; the "
                               r"attribute is not held.*declare_rows"),
                         ([0, -2], "index -2 \\(position 1\\) counts from the end"),
                         (slice(2, None), r"slice index slice\(2, None, None\) counts "
                                          r"from the end.*declare_rows")):
        with pytest.raises((DDStoreIndexError, DDStoreValueError), match=match):
            fs.put_tensor(torch.ones(2), "n", "new", index=index)
    with pytest.raises(DDStoreValueError, match=r"3 rows of values for an index of 2 rows"):
        fs.put_tensor(torch.ones(3, 2), "n", "new", index=[0, 1])
    assert fs.store.variables() == names and same(fs.get_tensor("n", "list", None), before)


def test_declared_rows(fs, store):
    """declare_rows: a first put with an index has the declared rows (partition by
    partition, in any order; negatives and open slices count from the declared end);
    every whole or range-wise put of the group must have that many rows; a declaration
    that a held attribute contradicts is refused; a transaction that rolls back undoes
    it; the graph store counts a declared node type among its nodes (those of the
    feature store last made under its name)."""
    from ddstore import DDStoreIndexError, DDStoreValueError
    from ddstore import pyg as dpyg
    fs.declare_rows({"p": 10, ("a", "r", "b"): 3})
    x = torch.arange(20.).view(10, 2)
    for part in (torch.arange(6, 10), torch.arange(0, 3)):  # partitions, out of order
        fs.put_tensor(x[part], "p", "x", index=part)
    want = x.clone()
    want[3:6] = 0
    assert same(fs.get_tensor("p", "x", None), want)
    fs.put_tensor(torch.tensor([1, 2]), "p", "y", index=[-1, -10])
    assert same(fs.get_tensor("p", "y", None), torch.tensor([2, 0, 0, 0, 0, 0, 0, 0, 0, 1]))
    fs.put_tensor(torch.tensor([7, 7]), "p", "z", index=slice(8, None))
    assert same(fs.get_tensor("p", "z", None), torch.tensor([0] * 8 + [7, 7]))
    with pytest.raises(DDStoreIndexError, match=r"index 10 \(position 0\) out of range "
                                                r"\[-10, 10\)"):
        fs.put_tensor(torch.ones(1), "p", "w", index=[10])
    for call in (lambda: fs.put_tensor(torch.ones(9), "p", "w", None),
                 lambda: fs.put_range(torch.ones(4), rows=(0, 4), group_name=("a", "r", "b"),
                                      attr_name="w")):
        with pytest.raises(DDStoreValueError, match=r"declared with (10|3) rows"):
            call()
    fs.put_range(torch.ones(3), rows=(0, 3), group_name=("a", "r", "b"), attr_name="w")
    with pytest.raises(DDStoreValueError, match=r"put_range \('p', 'v'\): rows must be "
                                                r"\(lo, hi\), this rank's rows of the "
                                                r"attribute, got None"):
        fs.put_range(torch.ones(10), rows=None, group_name="p", attr_name="v")
    with pytest.raises(DDStoreValueError, match="group 'p' declared with 11 rows, but its "
                                                "attribute 'x' holds 10 rows"):
        fs.declare_rows({"p": 11, "q": 4})
    with pytest.raises(DDStoreValueError, match=r"rows of group 'q' must be an integer"):
        fs.declare_rows({"q": -1})
    with pytest.raises(DDStoreValueError, match="counts must be a dict"):
        fs.declare_rows([("q", 4)])
    with pytest.raises(DDStoreValueError, match="3 rows of values for an index of 2 rows"):
        with store.transaction("t"):
            fs.declare_rows({"q": 4, "p": 10})
            fs.put_tensor(torch.ones(3), "q", "x", index=[0, 1])  # 3 values, 2 rows
    fs.put_tensor(torch.ones(2), "q", "x", index=[0, 1])  # 'q' undeclared again: 2 rows
    assert fs.num_rows("q", "x") == 2
    gs = dpyg.GraphStore(store, "f")
    assert gs.node_counts() == {"p": 10, "q": 2}
    fs.declare_rows({"r": 6})
    assert gs.node_counts() == {"p": 10, "q": 2, "r": 6}
    # another feature store under the name would replace these declarations: refused
    with pytest.raises(DDStoreValueError, match="FeatureStore 'f': this store holds one"):
        dpyg.FeatureStore(store, "f")
    assert gs.node_counts() == {"p": 10, "q": 2, "r": 6}


def test_a_rollback_keeps_the_attributes_in_their_order(store):
    """A removal or a replacement of an attribute that is not the last, undone by a
    rollback: the attribute is back at its place in get_all_tensor_attrs and in the
    annotation a checkpoint keeps (it came back last)."""
    from ddstore import pyg as dpyg
    fs = dpyg.FeatureStore(store, "order")
    for name in ("x", "y", "z"):
        fs.put_tensor(torch.zeros(4, 2), group_name=None, attr_name=name, index=None)
    want = [a.attr_name for a in fs.get_all_tensor_attrs()]
    meta = store.annotation("order#pyg.FeatureStore").meta["attrs"]
    assert want == ["x", "y", "z"]
    for change in (lambda: fs.remove_tensor(group_name=None, attr_name="y"),
                   lambda: fs.update_tensor(torch.ones(4, 3), group_name=None,
                                            attr_name="y", index=None)):
        with pytest.raises(RuntimeError, match="undo"):
            with store.transaction("t"):
                change()
                raise RuntimeError("undo")
        assert [a.attr_name for a in fs.get_all_tensor_attrs()] == want
        assert store.annotation("order#pyg.FeatureStore").meta["attrs"] == meta
        assert fs.get_tensor(group_name=None, attr_name="y", index=None).shape == (4, 2)


def test_byte_order_datetimes_and_integer_values(store):
    """Big-endian numpy input is stored and recorded by its values in this machine's
    order (an attribute put from '>f8' was recorded as '>f8', so FeatureStore.open
    refused the store; a '>i8' edge index was read back through torch's refusal of the
    byte order); datetime64 / timedelta64 attributes, which torch cannot read, are
    refused at the put naming the way out; an indexed put writes any integers into an
    integer attribute by value, as DDStore.update does (int64 into uint8 was refused)."""
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    fs, gs = dpyg.FeatureStore(store, "be"), dpyg.GraphStore(store, "be")
    x = np.arange(8, dtype=">f8").reshape(4, 2)
    fs.put_tensor(x, group_name=None, attr_name="x")
    fs.put_tensor(np.arange(4, dtype=">i2"), group_name=None, attr_name="y",
                  index=np.arange(4, dtype=">i8"))
    ei = np.array([[0, 1, 2, 3], [1, 2, 3, 0]], dtype=">i8")
    gs.put_edge_index(ei, edge_type=None, layout="coo", size=(4, 4))
    for f in (fs, dpyg.FeatureStore.open(store, "be")):
        got = f.get_tensor(group_name=None, attr_name="x")
        assert got.dtype == torch.float64 and got.numpy().tolist() == x.tolist()
        assert f.get_tensor(group_name=None, attr_name="y").tolist() == [0, 1, 2, 3]
    src, dst = dpyg.GraphStore.open(store, "be").get_edge_index(None, "coo")
    assert src.dtype == torch.int64 and [src.tolist(), dst.tolist()] == ei.tolist()
    for dt in ("datetime64[s]", "timedelta64[ms]"):
        with pytest.raises(DDStoreValueError, match=rf"dtype {dt[:-4]}.* cannot be "
                                                    rf"stored .*\.view\('int64'\)"):
            fs.put_tensor(np.arange(4).astype(dt), group_name=None, attr_name="when")
    fs.put_tensor(torch.zeros(4, 2, dtype=torch.uint8), group_name=None, attr_name="u")
    for value in (torch.tensor([[1, 2]]), np.array([[1, 2]]), [[1, 2]],
                  torch.tensor([[1, 2]], dtype=torch.int16)):
        fs.put_tensor(value, group_name=None, attr_name="u", index=[1])
        assert fs.get_tensor(group_name=None, attr_name="u")[1].tolist() == [1, 2]
    with pytest.raises(DDStoreValueError, match=r"value -1 at \(0, 1\) does not fit the "
                                                r"attribute's dtype uint8 \(\[0, 255\]\)"):
        fs.put_tensor([[1, -1]], group_name=None, attr_name="u", index=[2])
    with pytest.raises(DDStoreValueError, match="dtype float32 cannot be cast to the "
                                                "attribute's dtype uint8; allowed"):
        fs.put_tensor(torch.ones(1, 2), group_name=None, attr_name="u", index=[2])
