"""Hostile round on the spatiotemporal and dynamic-graph layers: each test is a case a
skeptical user found wrong, unclear or crashing (1 rank, in-process), plus one small MPI
program (tests/mpi/hostile_series.py: an overflow on one member's steps refused alike on
both ranks, nothing stored; loader orders with numpy arguments equal to
DistributedSampler's).  Every window compared byte for byte with slicing the series."""
import itertools
import json

import numpy as np
import pytest
import torch

from ddstore import DDStoreIndexError, DDStoreValueError
from ddstore import spatiotemporal as st
from ddstore.dynamic import DynamicGraph

from conftest import one_rank_store, passed_on

_names = itertools.count()
BASE = np.random.default_rng(0).standard_normal((80, 3, 2))


store = one_rank_store("module")  # one store for the module's tests


def make(store, series, horizon, **kw):
    return st.WindowDataset(store, f"h{next(_names)}", series, horizon, **kw)


def refused(store, fragments, fn, *args, cls=DDStoreValueError, **kw):
    """``fn`` raises ``cls`` naming every fragment, and leaves nothing in the store."""
    before = store.variables()
    with pytest.raises(cls) as info:
        fn(*args, **kw)
    for frag in fragments:
        assert frag in str(info.value), (frag, str(info.value))
    assert store.variables() == before
    return str(info.value)


@pytest.fixture(scope="module")
def train(store):
    return make(store, BASE, 3, standardize=False, dtype=np.float64).splits()[0]


# ------------------------------------------------------------- WindowDataset arguments
@pytest.mark.parametrize("flag,value", [("overlap", "no"), ("standardize", None),
                                        ("per_node", 1), ("halo", "False")])
def test_flags_are_bools_not_truthiness(store, flag, value):
    # before: "no" / 1 / "False" were read as True and None as False, silently
    refused(store, [f"WindowDataset: {flag} must be True or False", repr(value)],
            make, store, BASE, 2, **{flag: value})


@pytest.mark.parametrize("value", ["big", None, 0, 2.5])
def test_chunk_bytes_checked(store, value):
    # before: a bare ValueError / TypeError from int() after the first round
    refused(store, ["WindowDataset: chunk_bytes must be an integer >= 1", repr(value)],
            make, store, BASE, 2, chunk_bytes=value)


def test_dtype_not_a_dtype(store):
    refused(store, ["dtype='banana'", "allowed: float16, float32, float64"],
            make, store, BASE, 2, dtype="banana")


def test_horizon_as_0d_tensor(store):
    ds = make(store, BASE, torch.tensor(3), standardize=False, dtype=np.float64)
    assert ds.horizon == 3 and type(ds.horizon) is int
    x, y = ds.get_batch(list(range(len(ds))))
    for s in range(len(ds)):
        assert np.array_equal(x[s].numpy(), BASE[s:s + 3])
        assert np.array_equal(y[s].numpy(), BASE[s + 3:s + 6])
    refused(store, ["horizon must be an integer", "tensor(3.)"], make, store, BASE,
            torch.tensor(3.0))


# ------------------------------------------------------------- values that do not fit
@pytest.mark.parametrize("scale,dtype,where", [(1e300, np.float32, "float32"),
                                               (1e5, np.float16, "float16")])
def test_values_beyond_the_stored_dtype(store, scale, dtype, where):
    # before: stored as inf with a RuntimeWarning
    msg = refused(store, [f"does not fit the stored dtype={where}", "step ", "node ",
                          "dtype=np.float64"],
                  make, store, BASE * scale, 2, dtype=dtype, standardize=False)
    with np.errstate(over="ignore"):
        big = np.flatnonzero(~np.isfinite((BASE * scale).astype(dtype)).reshape(-1))[0]
    t, node, feat = np.unravel_index(big, BASE.shape)
    assert f"step {t}, node {node}, feature {feat}" in msg


@pytest.mark.parametrize("dtype,exact", [(np.float32, 2 ** 24), (np.float16, 2 ** 11),
                                         (np.float64, 2 ** 53)])
def test_integers_the_stored_dtype_cannot_hold_exactly(store, dtype, exact):
    # before: an int64 series stored unstandardised as float32 (the default) rounded
    # counts beyond 2**24 silently (16777217 read back as 16777216)
    series = np.arange(80 * 3 * 2, dtype=np.int64).reshape(80, 3, 2) + exact - 100
    bad = int(np.argmax(series.reshape(-1) == exact + 1))  # the first one rounded
    t, node, feat = np.unravel_index(bad, series.shape)
    wider = ", or dtype=np.float64" if dtype != np.float64 else ""
    # (2**53 + 1 is refused too: a float64 check of the magnitudes rounded it to 2**53)
    refused(store, [f"step {t}, node {node}, feature {feat} holds the integer {exact + 1}",
                    f"dtype={np.dtype(dtype).name} cannot hold exactly",
                    f"allowed: integers within +-{exact}{wider}, or standardize=True"],
            make, store, series, 2, dtype=dtype, standardize=False)
    one = np.full((80, 1, 1), exact + 1, dtype=np.int64)  # the only value, one past
    refused(store, [f"holds the integer {exact + 1}"], make, store, one, 2, dtype=dtype,
            standardize=False)
    for kw in ({"dtype": np.float64, "standardize": False}, {"dtype": dtype}) \
            if dtype != np.float64 else ({"dtype": dtype},):
        ds = make(store, series, 2, **kw)  # exact in float64; standardised: rounded
        assert len(ds) > 0
    ds = make(store, series - exact + 100, 2, dtype=dtype, standardize=False)
    x, y = ds.get_batch(list(range(len(ds))))  # integers within the range: exact
    for s in range(len(ds)):
        assert np.array_equal(x[s].numpy(), (series - exact + 100)[s:s + 2])


def test_statistics_that_overflow(store):
    # before: std = inf, and every standardised window came out all zeros
    refused(store, ["standardize", "overflows float64", "standardize=False"],
            make, store, BASE * 1e200, 2, dtype=np.float64)
    ds = make(store, BASE * 1e100, 2, dtype=np.float64)  # squares still fit
    assert np.isfinite(ds.std).all() and float(ds[0][0].abs().max()) > 0


def test_standardised_value_beyond_float64(store):
    b = np.zeros((80, 1, 1))
    b[1::2] = 1e-150
    b[75] = 1e160  # outside the training split: (x - mean) / std is inf
    text = refused(store, ["step 75, node 0, feature 0", "once standardised",
                           "allowed: values within that range"],
                   make, store, b, 2, dtype=np.float64)
    assert "standardize=True" not in text and "float64" in text, text  # (it is already)
    # float16: the wider dtype is advised, standardize=True (already on) is not
    s = np.concatenate([np.zeros((9, 2)), np.full((1, 2), 1e9)])
    text = refused(store, ["(value 1000000000.0) once standardised", "dtype=float16",
                           "allowed: values within that range, or dtype=np.float64"],
                   make, store, s, 1, split=(1, 0, 0), dtype=np.float16)
    assert "standardize=True" not in text, text
    text = refused(store, ["(value 1000000000.0) does not fit", "allowed: values within "
                           "that range, or dtype=np.float64, or standardize=True"],
                   make, store, s, 1, split=(1, 0, 0), dtype=np.float16, standardize=False)


# ------------------------------------------------------------- loaders and samplers
def _order(view, loader, epoch, seed, shuffle=True, drop_last=False):
    st.set_epoch(loader, epoch)
    got = [x for xb, _ in loader for x in xb]
    ref = torch.utils.data.DistributedSampler(range(len(view)), num_replicas=1, rank=0,
                                              shuffle=shuffle, seed=seed,
                                              drop_last=drop_last)
    ref.set_epoch(epoch)
    want = list(ref)
    assert len(got) == len(want)
    for x, i in zip(got, want):
        s = view.start + i
        assert np.array_equal(x.numpy(), BASE[s:s + 3])


def test_loader_numpy_arguments(train):
    # before: batch_size=np.int64 failed in torch's BatchSampler, seed=np.int64 at the
    # first epoch ("an integer is required")
    for kw in ({}, {"prefetch": 2}, {"device": "cpu"}):
        loader = train.loader(np.int64(4), seed=np.int64(7), **kw)
        for epoch in (0, np.int64(3)):
            _order(train, loader, int(epoch), 7)



def test_loader_seeds_beyond_torch_range_wrap(train):
    """seed + epoch is taken modulo 2**64 (as torch reads a negative seed): seed=-1 gives
    DistributedSampler's order for -1, and seed=2**64 - 1 at epoch 1 or a seed of 2**70
    no longer fails with "Overflow when unpacking long long" at iteration."""
    for kw in ({}, {"device": "cpu"}):
        _order(train, train.loader(4, seed=-1, **kw), 0, -1)
        _order(train, train.loader(4, seed=2 ** 64 - 1, **kw), 0, -1)
        loader = train.loader(4, seed=2 ** 64 - 1, **kw)
        _order(train, loader, 1, -1)  # (2**64 - 1 + 1) mod 2**64 = 0 = -1 + 1
        _order(train, train.loader(4, seed=2 ** 70 + 5, **kw), 2, 5)
        loader = train.loader(4, seed=3, **kw)
        _order(train, loader, 2 ** 64 + 4, 3 - 2 ** 64)  # (seed + epoch = 7 for torch)

@pytest.mark.parametrize("kw,fragments", [
    ({"seed": 1.5}, ["seed must be an integer", "1.5"]),
    ({"seed": "a"}, ["seed must be an integer"]),
    ({"shuffle": "yes"}, ["shuffle must be True or False"]),
    ({"drop_last": None}, ["drop_last must be True or False"]),
    ({"sampler": "batch", "shuffle": "yes"}, ["BatchShuffleSampler: shuffle must be True or False"]),
    ({"sampler": "batch", "seed": 1.5}, ["BatchShuffleSampler: seed must be an integer",
                                         "1.5"]),
])
def test_loader_bad_arguments(train, kw, fragments):
    # before: accepted; a float or str seed failed at the first epoch inside torch
    with pytest.raises(DDStoreValueError) as info:
        train.loader(4, **kw)
    for frag in fragments:
        assert frag in str(info.value)


@pytest.mark.parametrize("epoch", [-1, 1.5, True])
def test_set_epoch_checked(train, epoch):
    with pytest.raises(DDStoreValueError, match="set_epoch: epoch must be an integer >= 0"):
        st.set_epoch(train.loader(4), epoch)


@pytest.mark.parametrize("kw,fragments", [
    ({"num_replicas": 2.5}, ["num_replicas must be an integer >= 1", "2.5"]),
    ({"num_replicas": 0}, ["num_replicas must be an integer >= 1"]),
    ({"rank": "a"}, ["rank must be an integer"]),
    ({"rank": True}, ["rank must be an integer"]),
    ({"num_replicas": 2, "rank": 2}, ["rank=2 out of range [0, 2)"]),
    ({"shuffle": "no"}, ["shuffle must be True or False"]),
    ({"drop_last": 0}, ["drop_last must be True or False"]),
    ({"local": "yes"}, ["local must be True or False"]),
])
def test_batch_sampler_arguments(train, kw, fragments):
    with pytest.raises(DDStoreValueError) as info:
        st.BatchShuffleSampler(train, 3, **kw)
    for frag in fragments:
        assert frag in str(info.value)


def test_batch_sampler_needs_a_split():
    with pytest.raises(DDStoreValueError, match="split must be a WindowDataset"):
        st.BatchShuffleSampler(BASE, 3)


def test_batch_sampler_numpy_replicas(train):
    got = [list(st.BatchShuffleSampler(train, 3, num_replicas=np.int64(2),
                                       rank=np.int32(r), seed=5)) for r in (0, 1)]
    assert len(got[0]) == len(got[1])
    assert {i for b in got[0] + got[1] for i in b} == set(range(len(train)))


@pytest.mark.parametrize("features", [[0.5], ["a"], [True]])
def test_inverse_transform_features_integers(train, features):
    # before: 0.5 was truncated to feature 0; "a" a bare ValueError
    with pytest.raises(DDStoreValueError, match="features=.* must be integers in"):
        train.inverse_transform(np.zeros((2, 3, 1)), features=features)


# ------------------------------------------------------------- DynamicGraph
def test_dynamic_ranges_take_0d_tensors_and_snapshots_needs_a_sequence(store):
    edges = [np.array([[0, 1], [1, t % 3]]) for t in range(6)]
    g = DynamicGraph(store, f"g{next(_names)}", edges, checkpoint_every=2)
    try:
        # before: "start must be an integer, got tensor(2)" (snapshot() took it)
        assert [t for t, _ in g.backward(torch.tensor(4), torch.tensor(2))] == [3, 2]
        assert [t for t, _ in g.forward(torch.tensor(1), np.int64(3))] == [1, 2]
        for t, (ei, _) in g.forward(torch.tensor(0)):
            e = edges[t]
            assert np.array_equal(ei.numpy(), e[:, np.lexsort((e[0], e[1]))])
        with pytest.raises(DDStoreValueError, match="start must be an integer"):
            list(g.forward(torch.tensor(1.0)))
        # before: a bare TypeError ("'int' object is not iterable")
        with pytest.raises(DDStoreValueError, match=r"snapshots: steps must be a sequence "
                                                    r"of integers in \[0, 6\), got int"):
            g.snapshots(5)
        with pytest.raises(DDStoreIndexError, match=r"snapshots: steps\[1\]=6 out of range"):
            g.snapshots([1, 6])
    finally:
        g.free()


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2])
@pytest.mark.shared_launch("hostile_series.py", timeout=120)
def test_hostile_series_mpi(shared_launch, nprocs):
    """tests/mpi/hostile_series.py: an overflow in the steps one member stores is refused
    alike on every rank, nothing stored; loaders given numpy arguments yield
    DistributedSampler's windows in its order."""
    passed_on(shared_launch, nprocs)


# ------------------------------------------------------------- PGT JSON
def test_pgt_json_value_beyond_dtype(tmp_path):
    # before: 1e39 was stored as inf in float32 (then refused as "NaN or inf" by
    # WindowDataset, naming no cause)
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"edges": [[0, 1]], "FX": [[1.0, 2.0], [3.0, 1e39],
                                                         [5.0, 6.0], [7.0, 8.0]]}))
    with pytest.raises(DDStoreValueError, match=r"big.json: 'FX': step 1, node 1, feature 0 "
                                                r"holds 1e\+39, beyond dtype=float32"):
        st.load_pgt_json(str(path))
    s = st.load_pgt_json(str(path), dtype=np.float64)
    assert s.to_numpy()[1, 1, 0] == 1e39 and s.dtype == np.float64
    # a whole number (a count) the dtype would store as another is named, as
    # WindowDataset names one of an integer series (8469 was stored as 8472 in float16);
    # a fraction rounds as floats do, and whole numbers beyond 2**53 are floats' own
    path.write_text(json.dumps({"edges": [[0, 1]], "FX": [[1, 2], [3, 8469], [5, 6.3],
                                                         [7, 8.0]]}))
    with pytest.raises(DDStoreValueError, match=r"'FX': step 1, node 1, feature 0 holds the "
                                                r"whole number 8469, which dtype=float16 "
                                                r"cannot hold \(it would be 8472\)"):
        st.load_pgt_json(str(path), dtype=np.float16)
    s = st.load_pgt_json(str(path))
    assert s.to_numpy()[1, 1, 0] == 8469 and s.to_numpy()[2, 1, 0] == np.float32(6.3)
    path.write_text(json.dumps({"edges": [[0, 1]], "FX": [[1, 2], [3, 2.0 ** 60 + 2 ** 10],
                                                         [5, 6], [7, 8]]}))
    assert st.load_pgt_json(str(path)).to_numpy()[1, 1, 0] == np.float32(2.0 ** 60)


@pytest.mark.parametrize("dtype", ["banana", complex, np.int8])
def test_pgt_json_dtype_checked(dtype):
    # before: 'banana' a bare TypeError; complex and int8 accepted (int8 truncated)
    with pytest.raises(DDStoreValueError, match=r"load_pgt_json: dtype=.*allowed: float16, "
                                                r"float32, float64"):
        st.load_pgt_json("/nonexistent.json", dtype=dtype)


# ------------------------------------------------------------- from_arrays / Series
def test_series_arguments():
    x = np.zeros((30, 4))
    # before: accepted with 2 ids for 4 nodes (kept in the checkpoint record)
    with pytest.raises(DDStoreValueError, match=r"node_ids must hold one id per node "
                                                r"\(4\), got 2 entries"):
        st.from_arrays(x, node_ids=["a", "b"])
    assert st.from_arrays(x, node_ids=list("abcd")).node_ids == list("abcd")
    # before: a bare ValueError from numpy
    with pytest.raises(DDStoreValueError, match=r"edge_weight has dtype <U1; allowed: "
                                                r"bool, integer or floating point"):
        st.from_arrays(x, np.array([[0], [1]]), ["a"])
    # before: a bare FileNotFoundError
    with pytest.raises(DDStoreValueError, match=r"gaussian_kernel_adjacency: cannot read "
                                                r"/nonexistent.csv"):
        st.gaussian_kernel_adjacency("/nonexistent.csv", ["a"])


def test_series_reader_returning_another_block(store):
    # before: "ValueError: matmul: Input operand 1 has a mismatch..." / "ufunc 'isfinite'
    # not supported", naming neither the reader nor the block
    from ddstore.sources.series import Series
    x = np.zeros((60, 3, 1))
    for reader, got in ((lambda a, b: x[a:a + 1], "shape (1, 3, 1)"),
                        (lambda a, b: np.array([[["s"]] * 3] * (b - a)), "dtype <U1")):
        msg = refused(store, ["Series.read(", "its reader returned ndarray", got,
                              "expected a numpy array of shape"],
                      make, store, Series(x.shape, x.dtype, reader, source="mine"), 3)
        assert msg.startswith("rank 0: mine: ")
