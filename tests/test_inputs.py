"""The checks of a user's input at memory speed (csrc/checks.c, ddstore._fingerprint):
the 64-bit fingerprint that holds the ranks of a collective call to the same data, and
the bitmap that finds an id listed twice, in-process; and the program
tests/mpi/inputs_check.py on 2 and 3 ranks (data that differs between ranks refused
naming the ranks, a split's repeat found across ranks, labels that are not class ids,
a rank handed a file that differs for every file reader of the graph, series and PyG
layers, a WindowDataset or DynamicGraph handed in-memory data that differs)."""
import re

import numpy as np
import pytest

from conftest import passed_on

from ddstore import _core
from ddstore._fingerprint import fingerprint, same_data
from ddstore.errors import DDStoreIndexError


def _bytes(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


# XXH64 values from the xxHash specification's reference implementation
_KNOWN = [(b"", 0, 0xEF46DB3751D8E999), (b"a", 0, 0xD24EC4F1A98C6E5B),
          (b"abc", 0, 0x44BC2CF5AD770999),
          (b"Nobody inspects the spammish repetition", 0, 0xFBCEA83C8A378BF1)]


@pytest.mark.parametrize("data, seed, want", _KNOWN)
def test_fingerprint_is_xxh64(data, seed, want):
    assert _core.fingerprint(data, seed) == want


def test_fingerprint_equals_the_reference_at_every_length():
    """Every length through the stripe loop, the 8-, 4- and 1-byte tails, with seeds
    around 0 and 2**64: equal to the xxhash package's XXH64 (in requirements.txt)."""
    import xxhash
    for n in list(range(0, 70)) + [255, 256, 1000, 4097]:
        data = _bytes(n, n)
        for seed in (0, 1, 2 ** 63, 2 ** 64 - 1):
            assert _core.fingerprint(data, seed) == xxhash.xxh64_intdigest(data, seed), \
                (n, seed)
    a = np.arange(1000, dtype=np.int64)  # a numpy buffer: its bytes
    assert _core.fingerprint(a) == xxhash.xxh64_intdigest(a.tobytes())
    assert _core.fingerprint(a, -1) == xxhash.xxh64_intdigest(a.tobytes(), 2 ** 64 - 1)


def test_fingerprint_of_values():
    """Arrays that differ in one byte, in the order of two values, in dtype or in shape
    have different fingerprints; the same values as numpy, torch or a list the same."""
    import torch
    a = np.arange(100_000, dtype=np.int64)
    base = fingerprint(a)
    assert fingerprint(a.copy()) == base == fingerprint(torch.arange(100_000))
    b = a.copy()
    b[[10, 99_990]] = b[[99_990, 10]]  # two values swapped
    c = a.copy()
    c.view(np.uint8)[123_457] ^= 1  # one bit
    others = [fingerprint(x) for x in (b, c, a.reshape(1000, 100), a.view(np.float64),
                                       a.astype(np.int32), a[:-1], a[::-1])]
    assert base not in others and len(set(others)) == len(others)
    assert fingerprint([1, 2, 3]) == fingerprint(np.array([1, 2, 3]))
    assert fingerprint(a[::2]) == fingerprint(np.ascontiguousarray(a[::2]))
    assert fingerprint(None) == fingerprint(None) != fingerprint(np.zeros(0))
    bf = torch.arange(6, dtype=torch.bfloat16)  # no numpy dtype: its bytes and its name
    assert fingerprint(bf) == fingerprint(bf.clone()) != \
        fingerprint(bf.view(torch.int16))
    obj = np.array([{"a": 1}, "x"], dtype=object)
    assert fingerprint(obj) == fingerprint(obj.copy()) != \
        fingerprint(np.array([{"a": 2}, "x"], dtype=object))


def test_fingerprint_of_a_memmap_is_what_it_maps(tmp_path):
    """A memmap is described (file, position, strides, shape, dtype), not read: views of
    other rows or columns differ even where the bytes are equal, and changing the file's
    bytes keeps the fingerprint."""
    path = tmp_path / "m.dat"
    m = np.memmap(path, dtype=np.float32, mode="w+", shape=(1000, 3))
    assert fingerprint(m[10:20]) == fingerprint(m[10:20])
    assert len({fingerprint(v) for v in (m, m[10:20], m[20:30], m[:, 0], m[:, 1])}) == 5
    before = fingerprint(m[10:20])
    m[10:20] = 7.0
    assert fingerprint(m[10:20]) == before
    assert fingerprint(np.array(m[10:20])) != before  # a copy: its bytes
    assert fingerprint(np.memmap(path, dtype=np.float32, mode="r", shape=(1000, 3))) == \
        fingerprint(m)


def test_same_data_settings():
    same = same_data({"x": np.zeros((3, 2), np.float32), "edge_index": None},
                     what="data")
    assert list(same) == ["data 'x'", "data 'edge_index'"]
    assert same["data 'x'"] == \
        f"float32 [3, 2], fingerprint 0x{fingerprint(np.zeros((3, 2), np.float32)):016x}"
    assert same["data 'edge_index'"].startswith("None [], fingerprint 0x")
    assert same == same_data({"x": np.zeros((3, 2), np.float32), "edge_index": None})
    assert same != same_data({"x": np.ones((3, 2), np.float32), "edge_index": None})
    # dtypes numpy lacks: the tensor's shape shown (not its bytes'), every bit hashed
    import torch
    half = torch.arange(8, dtype=torch.bfloat16).reshape(4, 2)
    shown = same_data({"x": half})["data 'x'"]
    assert shown.startswith("torch.bfloat16 [4, 2], fingerprint 0x"), shown
    flipped = half.clone()
    flipped.view(torch.int16)[3, 1] ^= 1  # the lowest bit of the last value
    assert same_data({"x": flipped}) != same_data({"x": half})


def test_mark_ids():
    """The bitmap: the first id listed twice (within the call, or already marked), a test
    without marking, and an id outside the bitmap refused naming its position."""
    n = 1000
    bits = np.zeros((n + 63) // 64, dtype=np.uint64)
    assert _core.mark_ids(bits, np.array([5, 999, 0, 64]), n) is None
    assert _core.mark_ids(bits, np.array([1, 2, 999]), n) == 2  # marked before
    assert _core.mark_ids(bits, np.array([7, 8, 7]), n) == 2  # twice in this call
    assert _core.mark_ids(bits, np.array([3, 4, 64]), n, mark=False) == 2
    assert _core.mark_ids(bits, np.array([3, 4]), n, mark=False) is None
    assert _core.mark_ids(bits, np.array([3, 4]), n, mark=False) is None  # not marked
    assert _core.mark_ids(bits, np.zeros(0, np.int64), n) is None
    with pytest.raises(DDStoreIndexError, match=r"id 1000 at position 1 is outside "
                                                r"\[0, 1000\)"):
        _core.mark_ids(bits, np.array([10, 1000]), n)
    with pytest.raises(DDStoreIndexError, match=r"id -1 at position 0"):
        _core.mark_ids(bits, np.array([-1]), n)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.shared_launch("inputs_check.py", timeout=240)
def test_inputs_check(shared_launch, nprocs):
    """from_pyg / from_hetero / TemporalGraph.from_pyg handed other values of the same
    shapes on one rank, a split repeating a node on another rank's rows (OGB, .npy), a
    source's label 2**63 - 1, a file that differs on the last rank (every reader), a
    WindowDataset's series / graph / timestamps or a DynamicGraph's edges / weights
    that differ in one element on the last rank: refused on every rank, naming what and
    where; nothing stored; the same data loads byte for byte."""
    passed_on(shared_launch, nprocs)


def test_check_functions_refuse_bad_sizes_in_c():
    """The C entry points themselves (no Python check before them): a negative size, or
    no buffer for a positive one, is DDS_EINVAL with a message, nothing read or
    written."""
    from ddstore._core import ffi, lib
    out = ffi.new("uint64_t *", 7)
    assert lib.dds_fingerprint(ffi.NULL, 5, 0, out) == lib.DDS_EINVAL and out[0] == 7
    assert lib.dds_fingerprint(ffi.NULL, -1, 0, out) == lib.DDS_EINVAL
    assert "nbytes=-1 must be >= 0" in ffi.string(lib.dds_last_error()).decode()
    assert lib.dds_fingerprint(ffi.NULL, 0, 0, out) == lib.DDS_OK and \
        out[0] == 0xEF46DB3751D8E999
    first = ffi.new("int64_t *", 3)
    bits = np.zeros(1, np.uint64)
    ids = np.array([1, 2], np.int64)
    for nbits, n, b in ((-1, 2, bits), (64, -1, bits), (64, 2, None)):
        rc = lib.dds_mark_ids(ffi.NULL if b is None else ffi.from_buffer("uint64_t[]", b),
                              nbits, ffi.from_buffer("int64_t[]", ids), n, 1, first)
        assert rc == lib.DDS_EINVAL and first[0] == -1 and not bits.any()


def test_a_tensor_given_for_one_integer(store):
    """One rule (``_checks.integer_scalar``) wherever one integer is asked for: a 0-d
    integer tensor or array stands for its value; a 0-d float, bool or complex one is
    refused, never truncated (``DynamicGraph.snapshot(tensor(1.7))`` used to read step
    1; ``TemporalGraph.neighbors(tensor(1))`` was refused)."""
    import torch
    from ddstore import DDStoreValueError
    from ddstore._checks import integer_scalar
    from ddstore.dynamic import DynamicGraph
    from ddstore.temporal import TemporalGraph
    for v, want in ((torch.tensor(3), 3), (torch.tensor(3, dtype=torch.uint8), 3),
                    (np.array(4), 4), (np.array(4, np.uint16), 4)):
        got = integer_scalar(v)
        assert type(got) is int and got == want, (v, got)
    for v in (torch.tensor(2.7), torch.tensor(True), torch.tensor(1 + 2j), np.array(4.5),
              np.array(True), torch.tensor([1]), np.int64(5), 6, "6", None):
        assert integer_scalar(v) is v
    g = TemporalGraph.from_arrays(store, "t", [0, 1, 1], [1, 0, 2], [1.0, 2.0, 3.0])
    for a, b in zip(g.neighbors(torch.tensor(1)), g.neighbors(1)):
        assert a.tolist() == b.tolist()
    with pytest.raises(DDStoreValueError, match="node must be an integer"):
        g.neighbors(torch.tensor(1.0))
    ptr, nbr, ts, eid = g.neighbor_lists(torch.tensor([1, 0, 1]))  # the batched form
    assert ptr.tolist() == [0, 2, 3, 5] and nbr.tolist() == [0, 2, 1, 0, 2]
    assert ts.tolist() == [2.0, 3.0, 1.0, 2.0, 3.0] and g.degree([2, 1]).tolist() == [0, 2]
    with pytest.raises(DDStoreIndexError, match=r"neighbor_lists of graph 't'.*3.*"
                                                r"out of range \[0, 3\)"):
        g.neighbor_lists([0, 3])
    edges = [np.array([[0, 1], [1, 2]]), np.array([[0, 2, 1], [2, 1, 0]])]
    d = DynamicGraph(store, "d", edges)
    for a, b in zip(d.snapshot(torch.tensor(1)), d.snapshot(1)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    for bad in (torch.tensor(1.7), torch.tensor(True)):
        with pytest.raises(DDStoreValueError, match="t must be an integer"):
            d.snapshot(bad)


def test_one_rule_for_seeds(store):
    """Every seed argument is any integer taken modulo 2**64 (as torch's manual_seed
    reads a negative seed): -1 gives what 2**64 - 1 gives, in every layer that draws;
    a float or a string is refused naming the call."""
    from ddstore import DDStoreValueError
    from ddstore._checks import as_seed
    from ddstore.temporal import (EdgeBatches, TemporalGraph, TemporalSampler,
                                  synthetic_stream)
    big = (1 << 64) - 1
    assert as_seed(np.int8(-1), "s") == big and as_seed(5, "s") == 5
    for bad in (1.0, "3", True, None):
        with pytest.raises(DDStoreValueError, match=r"^s must be an integer, got"):
            as_seed(bad, "s")
    a = synthetic_stream(30, 80, seed=-1, partners=2)
    b = synthetic_stream(30, 80, seed=big, partners=2)
    assert all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("src", "dst", "t"))
    g = TemporalGraph.from_arrays(store, "g", a.src, a.dst, a.t,
                                  split=np.zeros(80, np.int64))
    e1, e2 = EdgeBatches(g, 8, seed=-1), EdgeBatches(g, 8, seed=big)
    for e in (e1, e2):
        e.set_epoch(3)
    assert e1.shift() == e2.shift()
    s1, s2 = TemporalSampler(g, (4,), "uniform", seed=-1), \
        TemporalSampler(g, (4,), "uniform", seed=big)
    q, t = np.arange(10), np.full(10, 1e9)
    b1, b2 = s1.sample(q, t)[0], s2.sample(q, t)[0]
    assert np.array_equal(b1.nodes, b2.nodes) and np.array_equal(b1.col, b2.col)
    with pytest.raises(DDStoreValueError, match="TemporalSampler: seed must be an integer"):
        TemporalSampler(g, (4,), "uniform", seed=0.5)
    g.remove()


def test_one_rule_for_flags(store):
    """Every True/False argument follows ``_checks.as_bool``: a bool (Python or numpy),
    nothing read by its truth (``background='no'`` started a thread, ``replace='no'``
    sampled with replacement, ``abort_on_exception('0')`` turned the abort on)."""
    import torch
    from torch_geometric.data import Data
    import ddstore
    from ddstore import DDStoreValueError, graphs, pyg as dpyg
    from ddstore.dynamic import DynamicGraph
    from ddstore.sources import NpyNodeData
    store.add("flags", np.arange(12, dtype=np.int64).reshape(6, 2))
    fs, gs = dpyg.from_pyg(store, Data(x=torch.zeros(4, 1), edge_index=torch.tensor(
        [[0, 1, 2], [1, 2, 3]])), name="flagsg")
    samples = [Data(x=torch.zeros(2, 1), edge_index=torch.zeros(2, 0, dtype=torch.long))]
    edges = [np.array([[0], [1]])]
    for bad in ("no", 0, None, "0"):
        for call, what in (
                (lambda: store.prefault("flags", background=bad), "prefault: background"),
                (lambda: store.read_ranges("flags", [0], [2], per_row_lock=bad),
                 "read_ranges 'flags': per_row_lock"),
                (lambda: ddstore.abort_on_exception(bad), "abort_on_exception: enabled"),
                (lambda: dpyg.NeighborSampler(gs, [2], replace=bad),
                 "NeighborSampler: replace"),
                (lambda: dpyg.NeighborSampler(gs, [2], disjoint=bad),
                 "NeighborSampler: disjoint"),
                (lambda: NpyNodeData("e.npy", undirected=bad), "NpyNodeData: undirected"),
                (lambda: DynamicGraph(store, "fd", edges, show_progress=bad),
                 "DynamicGraph 'fd': show_progress"),
                (lambda: graphs.GraphDataset.from_samples(store, "fg", samples,
                                                          progress=bad),
                 "graphs 'fg': progress")):
            with pytest.raises(DDStoreValueError, match=f"{what} must be True or False, "
                                                        f"got {bad!r}"):
                call()
    assert store.variables() == ["flags"] + sorted(
        v for v in store.variables() if v.startswith("flagsg"))
    assert store.read_ranges("flags", [1], [2], per_row_lock=np.True_).tolist() == \
        [[2, 3], [4, 5]]
    assert store.prefault("flags", background=np.False_) >= 0
    previous = ddstore.abort_on_exception(np.False_)
    assert ddstore.abort_on_exception(previous) is False
    assert dpyg.NeighborSampler(gs, [2], replace=np.True_).replace is True


def test_generators_and_helpers_name_their_arguments(store):
    """The data generators and window helpers refuse what they cannot make, naming the
    argument and its range (they raised numpy's or Python's own errors, truncated a
    float seed, returned nonsense for num_windows(3.5, 1), or failed at first use)."""
    from ddstore import DDStoreMemoryError, DDStoreValueError, graphs as gr
    from ddstore import spatiotemporal as st
    from ddstore.sources.synthetic_nodes import SyntheticNodeGraph
    from ddstore.temporal import synthetic_stream
    assert st.num_windows(10, 2) == 7 and st.num_windows(np.int64(4), 2) == 1
    for args, text in (((3.5, 1), "num_steps must be an integer >= 0, got 3.5"),
                       ((float("nan"), 2), "num_steps must be an integer"),
                       ((10, -3), "horizon=-3 out of range: allowed 1 <= horizon <= 5"),
                       ((10, 6), "horizon=6 out of range")):
        with pytest.raises(DDStoreValueError, match=re.escape(text)):
            st.num_windows(*args)
    cases = [(lambda: gr.lattice_bonds(3.0), DDStoreValueError, "size=3.0 must be an "
                                                                 "integer >= 1"),
             (lambda: gr.ising_dataset(2, size="3"), DDStoreValueError, "size='3'"),
             (lambda: gr.ising_dataset(2, size=2 ** 40), DDStoreMemoryError,
              "of memory available on this node; allowed: lattice size <= "),
             (lambda: gr.ising_dataset(2, seed=3.7), DDStoreValueError,
              "ising_dataset: seed must be an integer, got 3.7"),
             (lambda: gr.ising_dataset(2, periodic="no"), DDStoreValueError,
              "periodic must be True or False"),
             (lambda: gr.ising_dataset(2, coupling="1"), DDStoreValueError,
              "coupling='1' must be a finite real number"),
             (lambda: synthetic_stream(2 ** 63, 50), DDStoreMemoryError,
              "synthetic_stream(num_nodes=9223372036854775808"),
             (lambda: synthetic_stream(50, 50, edge_dim=2 ** 63), DDStoreMemoryError,
              "allowed: num_edges x (96 + 16 x edge_dim)"),
             (lambda: synthetic_stream(50, 50, communities=51), DDStoreValueError,
              "communities=51 must be an integer in [1, num_nodes=50]"),
             (lambda: SyntheticNodeGraph(num_classes=2 ** 63), DDStoreMemoryError,
              "allowed: num_classes x (4 x num_features + 32) bytes"),
             (lambda: SyntheticNodeGraph(num_features=2 ** 63), DDStoreMemoryError,
              "num_features=9223372036854775808"),
             (lambda: store.init("v", 2, (), "3"), DDStoreValueError,
              "dtype='3' is not a dtype"),
             (lambda: store.init("v", 2, (), np.int64(7)), DDStoreValueError,
              "dtype=np.int64(7) is a value, not a dtype")]
    for call, cls, text in cases:
        with pytest.raises(cls, match=re.escape(text)):
            call()
    assert "v" not in store
    # the largest lattice named is exact (a float cube root of 1000 is 9.999...)
    import ddstore.memory
    from ddstore.graphs import ising
    for atoms, largest in ((1000, 10), (999, 9), (10 ** 18, 10 ** 6)):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ddstore.memory, "available_memory",
                       lambda shared=True, n=atoms: n * ising.BYTES_PER_ATOM)
            ising.check_lattice_fits(largest)
            with pytest.raises(DDStoreMemoryError, match=re.escape(
                    f"--lattice {largest + 1} ({(largest + 1) ** 3} atoms) needs ") +
                    f".*; allowed: --lattice <= {largest}$"):
                ising.check_lattice_fits(largest + 1, name="--lattice ")
    # the values that were right still are: a negative seed by the rule, numpy numbers
    assert gr.IsingDataset(2, seed=-1)[1].y.item() == \
        gr.ising_dataset(2, seed=2 ** 64 - 1)[1].y.item()
    assert gr.lattice_bonds(np.int64(3)).shape == (54, 2)
    assert SyntheticNodeGraph(scale=np.int64(3)).num_nodes == \
        SyntheticNodeGraph(scale=3).num_nodes


def test_one_rule_for_dtype_arguments():
    """as_dtype: numpy dtypes, what numpy takes for one, torch dtypes; refused naming
    the argument, the value and what is allowed; every layer that takes a dtype argument
    uses it (load_pgt_json, WindowDataset, NodeMemory, TemporalGraph.to_pyg)."""
    import torch
    from ddstore import DDStoreValueError
    from ddstore._checks import as_dtype
    assert as_dtype(torch.float16, "d", "f", "floats") == np.float16
    assert as_dtype("float32", "d", "f", "floats") == np.float32
    assert as_dtype(np.int32, "d", "iu", "ints") == np.int32
    with pytest.raises(DDStoreValueError, match=r"^d='banana' is not a dtype \(.*\); "
                                                r"allowed: floats$"):
        as_dtype("banana", "d", "f", "floats")
    with pytest.raises(DDStoreValueError, match=r"^d=int64; allowed: floats$"):
        as_dtype(torch.int64, "d", "f", "floats")
    with pytest.raises(DDStoreValueError, match=r"^d=\[\('a', '<i4'\)\]; allowed: ints$"):
        as_dtype([("a", "i4")], "d", "iu", "ints")  # structured: no
    from ddstore import sources
    with pytest.raises(DDStoreValueError, match=r"^load_pgt_json: dtype=int8; allowed: "
                                                r"float16, float32, float64$"):
        sources.load_pgt_json("/nonexistent.json", dtype=torch.int8)


def test_malformed_requests_and_dtypes_numpy_has_not(store):
    """``get_many`` with anything but ``(name, indices)`` pairs, ``read_ranges`` with a
    count beyond int64 or not an integer, and a torch tensor of a dtype numpy has not
    (bfloat16, float8) given to ``add`` / ``add_records`` each raise a DDStoreError
    that names what was wrong and what is allowed (were: bare unpack errors, "index ...
    out of range" for a count, torch's "unsupported ScalarType"); nothing is added."""
    import torch
    from ddstore import DDStoreIndexError, DDStoreValueError
    store.add("x", np.arange(16, dtype=np.int16).reshape(8, 2))
    for bad, said in (([("x",)], "request 0 must be a (name, indices) pair"),
                      ([("x", [0]), ("x", [0], [1], None, 1)],
                       "request 1 must be a (name, indices) pair, a (name, indices, out) "
                       "triple or (name, starts, counts, out)"),
                      ([None], "request 0 must be"),
                      ("x", "requests must be a sequence of (name, indices) pairs, got str"),
                      (5, "got int")):
        with pytest.raises(DDStoreValueError, match=re.escape(said)):
            store.get_many(bad)
    assert [a.tolist() for a in store.get_many([("x", [7]), ("x", [])])] == [[[14, 15]], []]
    with pytest.raises(DDStoreValueError, match=r"^get_many \(request 1\): unknown "
                                                r"variable 'nope'"):
        store.get_many([("x", [7]), ("nope", [0])])
    # an out of the wrong shape, dtype or kind refused before anything is read
    mine = np.zeros((2, 2), np.int16)
    for out, said in ((np.zeros((3, 2), np.int16), "get_many (request 1): out for 'x' has "
                                                   "dtype int16 shape (3, 2); needs dtype "
                                                   "int16 shape (2, 2)"),
                      (np.zeros((2, 2), np.int32), "has dtype int32 shape (2, 2)"),
                      (np.zeros((2, 2), np.int16)[:, ::-1], "must be C-contiguous"),
                      ([[0, 0], [0, 0]], "must be a numpy array, got list")):
        with pytest.raises(DDStoreValueError, match=re.escape(said)):
            store.get_many([("x", [1, 2], mine), ("x", [3, 4], out)])
        assert not mine.any()
    got = store.get_many([("x", [1, 2], mine), ("x", [3], None)])
    assert got[0] is mine and mine.tolist() == [[2, 3], [4, 5]] and got[1].tolist() == [[6, 7]]
    # ranges as read_ranges reads them, beside rows, in one call; refused as it refuses
    ranged = np.zeros((5, 2), np.int16)
    got = store.get_many([("x", [6, 2], [1, 4], ranged), ("x", [0]), ("x", [2], [0], None)])
    assert got[0] is ranged and ranged.tobytes() == store.read_ranges("x", [6, 2],
                                                                      [1, 4]).tobytes()
    assert got[1].tolist() == [[0, 1]] and got[2].shape == (0, 2)
    with pytest.raises(DDStoreIndexError, match=re.escape(
            "get_many 'x' (request 1): variable 'x': rows [6, 10) (range 1) out of range")):
        store.get_many([("x", [0]), ("x", [0, 6], [1, 4], None)])
    with pytest.raises(DDStoreValueError, match=re.escape("get_many 'x' (request 0): 2 "
                                                          "starts but 1 counts")):
        store.get_many([("x", [0, 1], [1], None)])
    with pytest.raises(DDStoreValueError, match=re.escape("needs dtype int16 shape (5, 2)")):
        store.get_many([("x", [6, 2], [1, 4], mine)])
    # buffers that overlap: two outputs refused (which rows stay depends on where they
    # live); an output that is another request's indices or counts read with the values
    # they had at the call (they were read after the first request wrote: a hang on
    # 10**12 indices, a heap overflow on a count of 6 into a buffer of 2 rows)
    mine[:] = 0
    with pytest.raises(DDStoreValueError, match=re.escape(
            "get_many: the outputs of requests 0 and 2 overlap (give each request its own "
            "output)")):
        store.get_many([("x", [1], mine[:1]), ("x", []),
                        ("x", [2], mine.reshape(-1)[1:3].reshape(1, 2))])
    assert not mine.any()
    store.add("ids", np.array([[10 ** 12], [6]]))
    idx = np.array([[1], [0]])
    got = store.get_many([("ids", [0, 1], idx), ("x", idx.reshape(-1))])
    assert idx.tolist() == [[10 ** 12], [6]] and got[1].tolist() == [[2, 3], [0, 1]]
    counts = np.array([[2]])
    two = np.zeros((2, 2), np.int16)
    got = store.get_many([("ids", [1], counts), ("x", [0], counts.reshape(-1), two)])
    assert counts.tolist() == [[6]] and two.tolist() == [[0, 1], [2, 3]]
    store.remove("ids")
    # an output in the variable's own rows (a view of the store's memory, read while it
    # is written: row 0 was copied into row 1 after it had been overwritten)
    own = store.local_view("x")
    before = own.copy()
    with pytest.raises(DDStoreValueError, match=re.escape(
            "variable 'x': the output (request 0) lies in the variable's own rows")):
        store.get_batch("x", [2, 0, 1], out=own[0:3])
    assert np.array_equal(own, before)
    # an index out of range named with its request (two requests of one variable could
    # not be told apart)
    with pytest.raises(DDStoreIndexError, match=re.escape("get_many 'x' (request 1): index 13 "
                                                          "(position 0) out of range")):
        store.get_many([("x", [1, 2]), ("x", [13])])
    for count in ([2 ** 64 - 1], np.array([2 ** 63], np.uint64)):
        with pytest.raises(DDStoreIndexError, match=r"read_ranges 'x': count \d+ \(position "
                                                    r"0\) out of range \[0, 9\)"):
            store.read_ranges("x", [0], count)
    with pytest.raises(DDStoreValueError, match="counts must be a 1-D sequence of integers"):
        store.read_ranges("x", [0], [1.5])
    # the core's range checks name the call too (they named only the variable)
    with pytest.raises(DDStoreIndexError, match=re.escape(
            "read_ranges 'x': variable 'x': rows [6, 10) (range 1) out of range [0, 8)")):
        store.read_ranges("x", [0, 6], [1, 4])
    with pytest.raises(DDStoreValueError, match=re.escape("read_ranges 'x': variable 'x': "
                                                          "count -1 (range 0) must be")):
        store.read_ranges("x", [0], [-1])
    assert store.read_ranges("x", [0], [8]).tobytes() == store.get_range("x", 0, 8).tobytes()
    for dt in (torch.bfloat16, torch.float8_e4m3fn):
        t = torch.ones(3, 2, dtype=dt)
        with pytest.raises(DDStoreValueError, match=rf"variable 'b': rows: a torch tensor of "
                                                    rf"dtype {dt} has no numpy dtype.*allowed "
                                                    rf"dtypes: bool, int8-int64"):
            store.add("b", t)
        with pytest.raises(DDStoreValueError, match=rf"records 'r': sample 0 key 'v': a torch "
                                                    rf"tensor of dtype {dt}"):
            store.add_records("r", [{"v": t}])
    store.add("b", torch.ones(3, 2, dtype=torch.bfloat16).view(torch.int16))  # its bits
    assert store.get_range("b", 0, 3).view(np.uint16).tolist() == [[0x3F80] * 2] * 3
    # a tensor that requires grad is stored as its values (was refused as "float32 has
    # no numpy dtype", x.float() too); arrays of different shapes are told add_records
    g = torch.arange(8.0).reshape(4, 2).requires_grad_()
    store.add("g", g)
    store.add_records("gr", [{"v": g}, {"v": g[:1]}])
    assert store.get_range("g", 0, 4).tolist() == g.tolist()
    assert store.get_records("gr", [1])[0]["v"].tolist() == [[0.0, 1.0]]
    with pytest.raises(DDStoreValueError, match=r"variable 'h': rows: not an array .*"
                                                r"store them with add_records"):
        store.add("h", [np.zeros((3, 2)), np.zeros((5, 2))])
    with pytest.raises(DDStoreValueError, match=r"records 'hr': sample 0 key 'v' has dtype "
                                                r"<U3, which cannot be stored"):
        store.add_records("hr", [{"v": "abc"}])
    # another byte order, torch's lazy negation and conjugation: stored as their values,
    # in this machine's order (a '>i8' variable was read back big-endian: torch refused
    # it; a negated view was "float32 has no numpy dtype")
    store.add("be", np.arange(4, dtype=">i8").reshape(2, 2))
    store.init("bi", 2, (2,), ">f4")
    store.add("neg", torch.arange(3.0)._neg_view())
    store.add("conj", torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64).conj())
    assert store.get_range("be", 0, 2).dtype == np.int64 and \
        store.get_range("be", 0, 2).tolist() == [[0, 1], [2, 3]]
    assert store.get_range("bi", 0, 2).dtype == np.float32
    assert store.get_range("neg", 0, 3).tolist() == [0.0, -1.0, -2.0]
    assert store.get_range("conj", 0, 2).tolist() == [1 - 2j, 3 + 1j]
    store.remove("g", "gr", "be", "bi", "neg", "conj")
    assert store.variables() == ["b", "x"]


def test_every_layer_takes_tensor_values_as_the_store_does(store):
    """Torch's lazy negation and conjugation (``z.conj()``, ``z.conj().imag``) are taken
    as their values by every layer, as ``DDStore.add`` takes them (the feature store,
    windows, graph samples and node memory refused them with torch's own error, or as
    "float32 has no numpy dtype"); a sparse tensor is refused naming its layout (it was
    "float32 has no numpy dtype"); node memory rows in Fortran order (a transposed view)
    or another byte order are taken as their values (numpy's "the last axis must be
    contiguous" at commit, or refused as the wrong dtype)."""
    import torch
    from torch_geometric.data import Data
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    from ddstore import spatiotemporal as st
    from ddstore import temporal as tg
    from ddstore.graphs import GraphDataset
    real = torch.arange(120.0).reshape(40, 3)
    z = torch.complex(real, -real)
    neg = z.conj().imag  # is_neg(): the values of real
    assert neg.is_neg() and z.conj().is_conj()
    fs = dpyg.FeatureStore(store, name="fs")
    fs.put_tensor(neg, group_name=None, attr_name="n")
    fs.put_tensor(z.conj(), group_name=None, attr_name="c")
    assert torch.equal(fs.get_tensor(group_name=None, attr_name="n"), real)
    assert torch.equal(fs.get_tensor(group_name=None, attr_name="c"), z.conj().resolve_conj())
    w = st.WindowDataset(store, "w", neg.reshape(40, 3, 1), horizon=2, standardize=False)
    x, y = w[0][:2]
    assert torch.equal(x.reshape(2, 3), real[:2]) and torch.equal(y.reshape(2, 3), real[2:4])
    g = GraphDataset.from_samples(store, "g", [Data(x=neg[:4])], progress=False)
    assert torch.equal(g[0].x, real[:4])
    mem = tg.NodeMemory(store, "mem", 10, memory_dim=3, mail_dim=2)
    nodes = np.array([1, 2, 5, 7])
    for rows in (neg[:4], real[:4].T.contiguous().T, np.asfortranarray(real[:4].numpy()),
                 real[:4].numpy().astype(">f4")):
        mem.reset()
        mem.write(nodes, rows, 1.0)
        mem.commit()
        assert torch.equal(mem.read(nodes).memory, real[:4]), type(rows)
    with pytest.raises(DDStoreValueError, match=r"rows: a torch.sparse_coo tensor \(sparse\); "
                                                r"give x.to_dense\(\)"):
        store.add("s", torch.eye(3).to_sparse())
    with pytest.raises(DDStoreValueError, match=r"rows: a nested tensor \(samples of different "
                                                r"shapes\); store it padded"):
        store.add("s", torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)]))
    with pytest.raises(DDStoreValueError, match=r"sparse"):
        fs.put_tensor(torch.eye(3).to_sparse(), group_name=None, attr_name="s")
    for name in ("fs", "w", "g"):
        store.remove(*[v for v in store.variables() if v.startswith(name)])
    mem.remove()


def test_errors_of_a_failed_lookup_carry_no_key_error():
    """A read after free() or of an unknown name says so alone: the dictionary lookup's
    ``KeyError`` is not shown before it ("During handling of the above exception...")."""
    from mpi4py import MPI
    import ddstore
    from ddstore import DDStoreStateError, DDStoreValueError
    s = ddstore.DDStore(MPI.COMM_SELF)
    s.add("x", np.ones((3, 2)))
    for call, error in ((lambda: s.get("nope", 0), DDStoreValueError),
                        (lambda: s.get_batch("nope", [0]), DDStoreValueError)):
        with pytest.raises(error) as info:
            call()
        assert info.value.__context__ is None or info.value.__suppress_context__
    s.free()
    for call in (lambda: s.get("x", 0), lambda: s.get_batch("x", [0]),
                 lambda: s.get_range("x", 0, 1)):
        with pytest.raises(DDStoreStateError, match="freed") as info:
            call()
        assert info.value.__suppress_context__ and info.value.__cause__ is None
