"""Spatiotemporal index-batching: loaders, windows, splits, statistics, errors (1 rank,
in-process); windows on 2, 3 and 4 ranks (tests/mpi/st_windows.py: every width dividing
the rank count, transports rma and auto, halo and multi-owner reads); a smoke run of the
benchmark (python -m ddstore.bench.spatiotemporal).

Every window is compared element for element with the materialised sliding-window
pipeline (ddstore.testing.windows).
"""
import itertools
import json
import os
import re

import numpy as np
import pytest

from conftest import ROOT, one_rank_store, passed_on

import torch  # noqa: E402
from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st_  # noqa: E402

import ddstore  # noqa: E402
from ddstore import DDStoreError, DDStoreIndexError, DDStoreValueError  # noqa: E402
from ddstore import spatiotemporal as st  # noqa: E402
from ddstore.spatiotemporal import windows as windows_mod  # noqa: E402
from ddstore.testing.windows import (algorithm1, brute_force_stats,  # noqa: E402
                                              materialize_windows, standardize_windows)

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
CHICKENPOX = os.path.join(DATA, "chickenpox.json")
PEDALME = os.path.join(DATA, "pedalme_london.json")
_names = itertools.count()


store = one_rank_store("module")  # one store for the module's tests


def make(store, series, horizon, **kw):
    return st.WindowDataset(store, f"v{next(_names)}", series, horizon, **kw)


def random_series(T=97, n=5, f=3, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((T, n, f)) * rng.uniform(0.5, 3, f) + rng.uniform(-5, 5, f)
            ).astype(dtype)


def chickenpox():
    return st.load_pgt_json(CHICKENPOX)


def check_all_windows(ds, raw):
    """Every window of every split equals the materialised one, bit for bit."""
    raw = np.asarray(raw, dtype=np.float64)
    if raw.ndim == 2:
        raw = raw[:, :, None]
    X, Y = materialize_windows(raw, ds.horizon)
    if ds.standardized:
        X = standardize_windows(X, ds.mean, ds.std, dtype=ds.dtype)
        Y = standardize_windows(Y, ds.mean, ds.std, dtype=ds.dtype)
    else:
        X, Y = X.astype(ds.dtype), Y.astype(ds.dtype)
    xb, yb = ds.get_batch(np.arange(len(ds)))
    assert xb.shape == (len(ds), ds.horizon, ds.num_nodes, ds.num_series_features)
    np.testing.assert_array_equal(xb.numpy(), X)
    np.testing.assert_array_equal(yb.numpy(), Y)
    for split in ds.splits():
        if len(split) == 0:
            continue
        idx = np.random.default_rng(1).permutation(len(split))
        xs, ys = split.get_batch(idx)
        np.testing.assert_array_equal(xs.numpy(), X[split.start + idx])
        np.testing.assert_array_equal(ys.numpy(), Y[split.start + idx])
        for i in (0, len(split) - 1, -1):
            x, y = split[i]
            j = split.start + (i % len(split))
            np.testing.assert_array_equal(x.numpy(), X[j])
            np.testing.assert_array_equal(y.numpy(), Y[j])


# ----------------------------------------------------------------------------- loaders
def test_load_chickenpox():
    s = chickenpox()
    assert s.shape == (521, 20, 1)
    assert s.edge_index.shape == (2, 102) and s.edge_weight.shape == (102,)
    assert np.all(s.edge_weight == 1)
    doc = json.load(open(CHICKENPOX))
    np.testing.assert_array_equal(s.to_numpy()[:, :, 0], np.asarray(doc["FX"], np.float32))
    np.testing.assert_array_equal(s.edge_index, np.asarray(doc["edges"]).T)
    assert s.node_ids[doc["node_ids"]["BUDAPEST"]] == "BUDAPEST"


def test_load_pedalme_and_windmill_layouts(tmp_path):
    s = st.load_pgt_json(PEDALME)
    doc = json.load(open(PEDALME))
    assert s.shape == (35, 15, 1)
    np.testing.assert_array_equal(s.edge_weight, np.asarray(doc["weights"], np.float32))
    np.testing.assert_array_equal(s.read(3, 9)[:, :, 0],
                                  np.asarray(doc["X"], np.float32)[3:9])
    # Windmill layout: block + edges + weights
    rng = np.random.default_rng(0)
    block = rng.random((40, 6)).tolist()
    edges = [[i, j] for i in range(6) for j in range(6)]
    path = tmp_path / "windmill.json"
    path.write_text(json.dumps({"block": block, "edges": edges,
                                "weights": rng.random(36).tolist()}))
    w = st.load_pgt_json(path)
    assert w.shape == (40, 6, 1) and w.edge_index.shape == (2, 36)
    np.testing.assert_array_equal(w.to_numpy()[:, :, 0], np.asarray(block, np.float32))


def test_load_pgt_json_bad(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"edges": [[0, 1]], "Y": [[1, 2]]}))
    with pytest.raises(DDStoreValueError, match="expected 'edges' and one of"):
        st.load_pgt_json(bad)
    with pytest.raises(DDStoreValueError, match="cannot read"):
        st.load_pgt_json(tmp_path / "missing.json")
    bad.write_text(json.dumps({"edges": [[0, 5]], "FX": [[1, 2], [3, 4]]}))
    with pytest.raises(DDStoreValueError, match=r"node 5, out of range \[0, 2\)"):
        st.load_pgt_json(bad)


def test_pems_h5_roundtrip(tmp_path):
    T, n = 300, 7
    rng = np.random.default_rng(3)
    data = rng.random((T, n)) * 70
    ts = np.datetime64("2017-01-01T00:00") + np.arange(T) * np.timedelta64(5, "m")
    ids = np.array([400001 + 3 * i for i in range(n)])
    path = tmp_path / "pems-bay.h5"
    st.write_pems_h5(path, data, ts, ids, key="speed")
    adj = (rng.random((n, n)) > 0.6) * rng.random((n, n))
    s = st.load_pems_h5(path, adjacency=adj)
    try:  # the file is float64: read at its own precision, not rounded to float32
        assert s.shape == (T, n, 1) and s.dtype == np.float64
        np.testing.assert_array_equal(s.timestamps, ts.astype("datetime64[ns]"))
        assert s.node_ids == ids.tolist()
        np.testing.assert_array_equal(s.read(17, 123)[:, :, 0], data[17:123])
        src, dst = np.nonzero(adj)
        np.testing.assert_array_equal(s.edge_index, np.stack([src, dst]))
        np.testing.assert_allclose(s.edge_weight, adj[src, dst].astype(np.float32))
    finally:
        s.close()
    with pytest.raises(DDStoreValueError, match="no key 'df'"):
        st.load_pems_h5(path, key="df")


@pytest.mark.parametrize("unit", [None, "ns", "us", "ms", "s"])
def test_pems_h5_time_units(tmp_path, unit):
    """pandas >= 2 writes the index as datetime64[us] / [s]; DCRNN's files are ns."""
    T = 600
    ts = np.datetime64("2017-03-06T23:00") + np.arange(T) * np.timedelta64(5, "m")
    path = tmp_path / "units.h5"
    st.write_pems_h5(path, np.arange(T * 2, dtype=np.float64).reshape(T, 2), ts, unit=unit)
    s = st.load_pems_h5(path)
    try:
        np.testing.assert_array_equal(s.timestamps.astype("datetime64[ns]"),
                                      ts.astype("datetime64[ns]"))
        assert s.timestamps[0].astype("datetime64[Y]").astype(int) + 1970 == 2017
    finally:
        s.close()
    # time features from those timestamps, against values computed by hand: 23:00 on a
    # Monday is 23/24 of the day, and each step adds 5 minutes
    tf = st.time_feature_array(s.timestamps, ("tod", "dow"), np.float64)
    minutes = (23 * 60 + 5 * np.arange(T)) % 1440
    np.testing.assert_allclose(tf[:, 0], minutes / 1440.0, rtol=0, atol=1e-12)
    day = (23 * 60 + 5 * np.arange(T)) // 1440  # 0 = Monday 2017-03-06
    np.testing.assert_array_equal(np.argmax(tf[:, 1:], axis=1), day % 7)
    assert tf.dtype == np.float64


def test_time_features_over_the_whole_datetime64_range():
    """Time of day and day of week (Monday 0) as pandas computes them, at both ends of
    ``datetime64[ns]``: within a day of its lowest value numpy's cast to days wrapped
    to 2262 (times of day 1.23-1.98, every day a Friday)."""
    import pandas as pd
    low, high = np.iinfo(np.int64).min + 1, np.iinfo(np.int64).max  # (min is NaT)
    rng = np.random.default_rng(3)
    ns = np.concatenate([low + rng.integers(0, 3 * 86_400 * 10**9, 200),
                         high - rng.integers(0, 3 * 86_400 * 10**9, 200),
                         rng.integers(low, high, 200, dtype=np.int64)])
    ts = ns.view("datetime64[ns]")
    tf = st.time_feature_array(ts, ("tod", "dow"), np.float64)
    idx = pd.DatetimeIndex(ts)
    f = {k: getattr(idx, k).values.astype(np.int64)  # pandas' fields
         for k in ("hour", "minute", "second", "microsecond", "nanosecond")}
    into = ((f["hour"] * 3600 + f["minute"] * 60 + f["second"]) * 10**9
            + f["microsecond"] * 1000 + f["nanosecond"])
    np.testing.assert_array_equal(tf[:, 0], into / 86_400e9)
    np.testing.assert_array_equal(np.argmax(tf[:, 1:], axis=1), idx.dayofweek)
    assert ((tf[:, 0] >= 0) & (tf[:, 0] < 1)).all()
    # NaT: NaN everywhere (it was taken for a real day); a time of day that rounds to 1
    # in the features' dtype stays below 1 (23:59:59.99 was 1.0 in float32)
    t = np.array(["2020-01-06T23:59:59.999999", "NaT"], dtype="datetime64[ns]")
    for dt in (np.float16, np.float32, np.float64):
        got = st.time_feature_array(t, ("tod", "dow"), dt)
        assert got.dtype == dt and 0.99 < got[0, 0] < 1 and got[0, 1] == 1
        assert np.isnan(got[1]).all()


def test_pems_h5_precision_follows_request(tmp_path):
    ts = np.datetime64("2012-03-01") + np.arange(50) * np.timedelta64(5, "m")
    data = 60 + np.random.default_rng(1).random((50, 4)) * 1e-9  # below float32 resolution
    path = tmp_path / "prec.h5"
    st.write_pems_h5(path, data, ts)
    with st.load_pems_h5(path) as s64, st.load_pems_h5(path, dtype=np.float32) as s32:
        np.testing.assert_array_equal(s64.read(0, 50)[:, :, 0], data)
        assert s32.dtype == np.float32
        np.testing.assert_array_equal(s32.read(0, 50)[:, :, 0], data.astype(np.float32))


def test_pems_h5_integer_frames_exact(tmp_path, store):
    """Integer frames keep their dtype and every value (int32 read as float32 rounded
    16,777,217; int64 as float64 rounded 2**53 + 1), and ``dtype=`` is honoured (an
    int64 request was replaced by float64) or refused naming what is allowed."""
    ts = np.datetime64("2012-03-01") + np.arange(12) * np.timedelta64(5, "m")
    for dt, big in ((np.int32, 2**24 + 1), (np.int64, 2**53 + 1), (np.uint16, 65535)):
        data = np.array([[big, 3], [5, 7]] + [[k, k + 1] for k in range(10)], dtype=dt)
        path = tmp_path / f"{np.dtype(dt).name}.h5"
        st.write_pems_h5(path, data, ts)
        for want in (None, dt, np.float64):
            with st.load_pems_h5(path, dtype=want) as s:
                got = s.read(0, 12)[:, :, 0]
                assert got.dtype == (dt if want is None else want)
                assert got.tolist() == data.astype(got.dtype).tolist()
    with st.load_pems_h5(path) as s:  # windows of an integer series: float32, exact
        x, y = st.WindowDataset(store, "h5int", s, 1, standardize=False,
                                overlap=True)[0]
        assert x.dtype == torch.float32 and x[0, :, 0].tolist() == [65535, 3]
        assert y[0, :, 0].tolist() == [5, 7]
    # an integer dtype= that cannot hold the file's values (NaN became INT_MIN, 50.7
    # became 50, int64 wrapped into int16) is refused, naming what is allowed
    for values, want, allowed in ((np.float64, np.int32, r"a floating dtype$"),
                                  (np.int64, np.int16, r"a floating dtype, or an integer "
                                                       r"one that holds int64$")):
        path = tmp_path / f"lossy_{np.dtype(values).name}.h5"
        st.write_pems_h5(path, np.ones((12, 2), dtype=values), ts)
        with pytest.raises(DDStoreValueError, match=rf"dtype={np.dtype(want).name} cannot "
                                                    rf"hold the file's "
                                                    rf"{np.dtype(values).name} values "
                                                    rf"exactly; allowed: " + allowed):
            st.load_pems_h5(path, dtype=want)
    # a narrower float dtype= that a value overflows (it became inf): named, at its place
    path = tmp_path / "wide.h5"
    wide = np.zeros((12, 2), dtype=np.int32)
    wide[5, 1] = 100_000
    st.write_pems_h5(path, wide, ts)
    with st.load_pems_h5(path, dtype=np.float16) as s:
        with pytest.raises(DDStoreValueError, match=r"value 100000 at step 5, sensor 1 is "
                                                    r"beyond dtype=float16 \(largest "
                                                    r"finite 6\.55e\+04\); give a wider "
                                                    r"dtype="):
            s.read(0, 12)
    with st.load_pems_h5(path, dtype=np.float32) as s:
        assert s.read(0, 12)[5, 1, 0] == 100_000
    with pytest.raises(DDStoreValueError, match=r"dtype=<U0; allowed: bool, integer or "
                                                r"floating"):
        st.load_pems_h5(path, dtype=str)


def test_pems_h5_distances_and_table_format(tmp_path):
    import h5py
    ts = np.datetime64("2012-03-01") + np.arange(10) * np.timedelta64(5, "m")
    path = tmp_path / "metr-la.h5"
    st.write_pems_h5(path, np.ones((10, 3)), ts, np.array([11, 12, 13]))
    csv = tmp_path / "distances.csv"
    csv.write_text("from,to,cost\n11,12,100.0\n12,13,300.0\n11,11,0.0\n99,11,5\n")
    s = st.load_pems_h5(path, distances=csv)
    d = np.array([100.0, 300.0, 0.0])
    sigma = d.std()
    want = {(0, 1): np.exp(-(100 / sigma) ** 2), (1, 2): np.exp(-(300 / sigma) ** 2),
            (0, 0): 1.0}
    got = {(int(a), int(b)): float(w) for (a, b), w in zip(s.edge_index.T, s.edge_weight)}
    want = {k: v for k, v in want.items() if v >= 0.1}
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-6)
    s.close()
    with h5py.File(path, "a") as fh:
        fh["df"].attrs["pandas_type"] = np.bytes_(b"frame_table")
    with pytest.raises(DDStoreValueError, match="table format"):
        st.load_pems_h5(path)


def test_from_arrays_layouts(store):
    base = random_series(T=40, n=6, f=2, seed=5)
    fortran = np.asfortranarray(base)
    transposed = np.ascontiguousarray(base.transpose(2, 1, 0)).transpose(2, 1, 0)
    strided = np.repeat(base, 2, axis=0)[::2]
    for arr in (base, fortran, transposed, strided, torch.from_numpy(base)):
        ds = make(store, arr, 3, standardize=False, dtype=np.float64, overlap=True)
        check_all_windows(ds, base)
    ds2 = make(store, base[:, :, 0], 3, overlap=True)  # 2-D
    assert ds2.num_series_features == 1
    check_all_windows(ds2, base[:, :, 0])



def test_read_only_inputs_are_copied_without_warnings(store):
    """A series and graph the caller cannot write (np.load(mmap_mode="r"), a cache) are
    taken without torch's non-writable warning, and the dataset's graph is a copy: a
    later change to the caller's arrays does not reach it."""
    import warnings
    base = random_series(T=30, n=4, f=1, seed=9)
    ei = np.array([[0, 1, 2, 3], [1, 2, 3, 0]], dtype=np.int64)
    ew = np.arange(1, 5, dtype=np.float32)
    for a in (base, ei, ew):
        a.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = make(store, st.from_arrays(base, ei, ew), 3, standardize=False,
                  dtype=np.float64, overlap=True)
    check_all_windows(ds, base)
    assert np.array_equal(ds.edge_index.numpy(), ei) and np.array_equal(
        ds.edge_weight.numpy(), ew)
    writable = ei.copy()
    ds2 = make(store, st.from_arrays(base, writable, ew.copy()), 3, standardize=False,
               dtype=np.float64, overlap=True)
    writable[:] = 0
    assert np.array_equal(ds2.edge_index.numpy(), ei), "the dataset's graph is the caller's array"


# ----------------------------------------------------------------------------- windows
@pytest.mark.parametrize("overlap", [False, True])
def test_windows_chickenpox(store, overlap):
    s = chickenpox()
    for h in (1, 4, 12):
        ds = make(store, s, h, overlap=overlap)
        check_all_windows(ds, s.to_numpy())
        ds_raw = make(store, s, h, overlap=overlap, standardize=False)
        check_all_windows(ds_raw, s.to_numpy())


@pytest.mark.parametrize("T,h", [(97, 1), (97, 5), (97, 24), (48, 24), (200, 7)])
def test_windows_random(store, T, h):
    raw = random_series(T=T, seed=T + h)
    for overlap, per_node in itertools.product((False, True), (False, True)):
        split = (0.7, 0.1, 0.2)
        try:
            st.split_ranges(T, h, split, overlap)
        except DDStoreValueError:  # too short for three splits: train only
            split = (1.0, 0.0, 0.0)
        ds = make(store, raw, h, split=split, overlap=overlap, per_node=per_node)
        check_all_windows(ds, raw)


def test_split_conventions():
    T, h = 100, 5
    S = T - 2 * h + 1
    b = st.split_ranges(T, h, (0.7, 0.1, 0.2), overlap=True)
    assert b == {"train": (0, round(0.7 * S)), "val": (round(0.7 * S), S - round(0.2 * S)),
                 "test": (S - round(0.2 * S), S)}
    d = st.split_ranges(T, h, (0.7, 0.1, 0.2))
    assert d == {"train": (0, 70 - 2 * h + 1), "val": (70, 80 - 2 * h + 1),
                 "test": (80, S)}
    # no window of one split touches a step of another
    steps = {k: set(range(a, bb + 2 * h - 1)) if bb > a else set() for k, (a, bb) in d.items()}
    assert not steps["train"] & steps["val"] and not steps["val"] & steps["test"]
    assert not steps["train"] & steps["test"]
    assert max(steps["train"]) < 70 and min(steps["val"]) >= 70 and max(steps["test"]) == T - 1
    # with overlap, the starts tile [0, S)
    assert b["train"][1] == b["val"][0] and b["val"][1] == b["test"][0]
    assert st.split_ranges(T, h, (1, 0, 0)) == {"train": (0, S), "val": (100, 100),
                                                "test": (100, 100)}
    assert st.split_ranges(T, h, (0.8, 0, 0.2))["val"] == (80, 80)
    # a tiny positive ratio: the message says a length that suffices at once (it searched
    # every window count up to 2 / r: minutes for 1e-9; a denormal raised OverflowError)
    for tiny, words in ((1e-9, r"T >= 2e\+09 \(enough, for a smallest ratio of 1e-09\)"),
                        (5e-324, r"T beyond 1e300 \(enough, for a smallest ratio of ")):
        with pytest.raises(DDStoreValueError, match=r"split 'val' \(ratio .*\) gets no "
                                                    r"window: .*these ratios need " + words):
            st.split_ranges(20, 2, (0.7, tiny, 0.3 - tiny), overlap=True)
    # rounding leaves nothing to a split of ratio 0 (S = 5: 2.5 and 2.5 round to 2)
    assert st.split_ranges(8, 2, (0.5, 0, 0.5), overlap=True) == {
        "train": (0, 3), "val": (3, 3), "test": (3, 5)}


@settings(max_examples=300, deadline=None)
@given(T=st_.integers(2, 400), h=st_.integers(1, 20), overlap=st_.booleans(),
       ratios=st_.lists(st_.sampled_from([0, 0, 0.05, 0.1, 0.2, 0.25, 0.5, 0.7, 1]),
                        min_size=3, max_size=3))
def test_split_zero_ratio_is_empty_and_overlap_tiles(T, h, overlap, ratios):
    """Any series and split: a split with ratio 0 holds no window; with overlap the
    three splits tile every start ``[0, S)`` in order; a split with a positive ratio
    that would get no window is refused."""
    assume(2 * h <= T and ratios[0] > 0)  # (train's ratio 0 is refused)
    split = tuple(r / sum(ratios) for r in ratios)
    try:
        b = st.split_ranges(T, h, split, overlap)
    except DDStoreValueError as e:
        assert "no complete window" in str(e) or "gets no window" in str(e)
        if overlap:  # the T it names is where every longer series is split (not T - 1)
            need = int(re.search(r"need T >= (\d+) at this horizon", str(e)).group(1))
            for t in range(need, need + 60):
                st.split_ranges(t, h, split, overlap)
            with pytest.raises(DDStoreValueError, match="gets no window"):
                st.split_ranges(need - 1, h, split, overlap)
        return
    for (a, e), r in zip(b.values(), split):
        assert (e > a) == (r > 0), (b, split)
    if overlap:
        S = T - 2 * h + 1
        assert b["train"][0] == 0 and b["test"][1] == S
        assert b["train"][1] == b["val"][0] and b["val"][1] == b["test"][0]


def test_split_helpers_refuse_what_window_dataset_refuses():
    """``split_ranges`` and ``largest_horizon`` check their arguments as
    :class:`WindowDataset` does: a horizon outside ``[1, T // 2]`` or not an integer, a
    flag that is not True or False (``"no"`` was read as True), a step count that is not
    an integer (``21.9`` was truncated); each error names the argument and the range."""
    for h in (0, -3, 26):  # (and the largest the splits take: the series' 25 is not)
        with pytest.raises(DDStoreValueError, match=rf"horizon={h} out of range: allowed "
                                                    rf"1 <= horizon <= 25 .*; horizon <= 2 "
                                                    rf"fits every split of these ratios$"):
            st.split_ranges(50, h)
    with pytest.raises(DDStoreValueError, match=r"horizon must be an integer in \[1, 25\]"):
        st.split_ranges(50, 2.5)
    for call in (lambda o: st.split_ranges(50, 2, overlap=o),
                 lambda o: st.largest_horizon(50, overlap=o)):
        for flag in ("no", 1, None):
            with pytest.raises(DDStoreValueError, match=r"overlap must be True or False"):
                call(flag)
    for steps in ("x", 21.9, -1):
        with pytest.raises(DDStoreValueError, match=r"largest_horizon: num_steps must be "
                                                    r"an integer >= 0"):
            st.largest_horizon(steps)
    with pytest.raises(DDStoreValueError, match=r"split_ranges: num_steps must be"):
        st.split_ranges(50.5, 2)
    # what was accepted stays: numpy integers and 0-d integer tensors, numpy bools
    assert st.split_ranges(np.int32(50), torch.tensor(2), overlap=np.True_) == \
        st.split_ranges(50, 2, overlap=True)
    assert st.largest_horizon(np.int64(50), overlap=False) == 2


@settings(max_examples=200, deadline=None)
@given(T=st_.integers(1, 120), overlap=st_.booleans(),
       ratios=st_.lists(st_.sampled_from([0, 0.05, 0.1, 0.2, 0.25, 0.5, 0.7, 1]),
                        min_size=3, max_size=3))
def test_largest_horizon_is_where_split_ranges_stops(T, overlap, ratios):
    """``largest_horizon`` is the largest horizon ``split_ranges`` accepts (0 when none
    does), found against every horizon tried one by one."""
    assume(ratios[0] > 0)
    split = tuple(r / sum(ratios) for r in ratios)
    accepted = []
    for h in range(1, T + 1):
        try:
            st.split_ranges(T, h, split, overlap)
            accepted.append(h)
        except DDStoreValueError:
            pass
    assert st.largest_horizon(T, split, overlap) == max(accepted, default=0)


def test_largest_horizon_with_overlap_is_bounded_work():
    """With ``overlap=True`` ``largest_horizon`` (and so ``split_ranges``' refusal, which
    names it) searches window counts, not every horizon: a series of 10^12 steps was
    a ``MemoryError`` (3.6 TiB of horizons) and 2e7 steps took seconds and 800 MB.  The
    answer equals the search over every horizon where that fits (up to 250,001 steps,
    tiny ratios included: past the bounded search, a horizon that fits)."""
    def every(T, split):
        h = np.arange(1, (T + 1) // 2 + 1, dtype=np.int64)
        S = T - 2 * h + 1
        ok = (S > 0) & windows_mod._windowed(S, windows_mod.check_ratios(split))
        return int(h[ok].max()) if ok.any() else 0
    for split in ((0.7, 0.1, 0.2), (0.5, 0.5, 0), (0.9, 0, 0.1), (0.98, 0.01, 0.01),
                  (0.999, 0.0005, 0.0005), (1, 0, 0)):
        for T in list(range(60)) + [1001, 5000, 250001]:
            assert st.largest_horizon(T, split, True) == every(T, split), (T, split)
    assert st.largest_horizon(10 ** 12, overlap=True) == 499999999997
    with pytest.raises(DDStoreValueError, match=r"horizon <= 499999999997 fits every"):
        st.split_ranges(10 ** 12, 0, overlap=True)
    tiny = (1 - 2e-6, 1e-6, 1e-6)  # 2 / r = 2e6 counts: beyond the search
    h = st.largest_horizon(2 * 10 ** 7, tiny, True)
    assert 0 < h <= every(2 * 10 ** 7, tiny)
    st.split_ranges(2 * 10 ** 7, h, tiny, True)  # fits


# ----------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("per_node", [False, True])
def test_stats_equal_brute_force(store, overlap, per_node):
    for raw in (random_series(T=400, seed=1), chickenpox().to_numpy().astype(np.float64)):
        for h in (1, 3, 12):
            ds = make(store, raw, h, overlap=overlap, per_node=per_node, chunk_bytes=1000)
            a, b = ds.split_bounds["train"]
            xw, _ = materialize_windows(raw.astype(np.float64), h, np.arange(a, b))
            mean, std = brute_force_stats(xw, per_node=per_node)
            assert ds.mean.shape == mean.shape
            np.testing.assert_allclose(ds.mean, mean, rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(ds.std, std, rtol=1e-12)
            # direct float64 definition: np.mean/np.std over the materialised windows
            axes = (0, 1) if per_node else (0, 1, 2)
            np.testing.assert_allclose(ds.std, xw.std(axis=axes), rtol=1e-12)


def test_algorithm1_equivalence(store):
    raw = random_series(T=300, n=4, f=2, seed=9)
    h = 12
    x, y, mean, std = algorithm1(raw, h, 0.7)
    ds = make(store, raw, h, overlap=True, split=(0.7, 0.1, 0.2), dtype=np.float64)
    np.testing.assert_allclose(ds.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(ds.std, std, rtol=1e-12)
    xb, yb = ds.get_batch(np.arange(len(ds)))
    np.testing.assert_allclose(xb.numpy(), x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(yb.numpy(), y, rtol=1e-12, atol=1e-12)


def test_fill_and_nonfinite_errors(store):
    raw = random_series(T=100, n=4, f=2, seed=2)
    bad = raw.copy()
    bad[7, 2, 1] = np.nan
    bad[30, 0, 0] = np.inf
    bad[31, 3, 1] = np.nan
    with pytest.raises(DDStoreValueError,
                       match=r"3 non-finite values .* first at step 7, node 2, feature 1"):
        make(store, bad, 4)
    # a series read from a file names it (the dataset's name alone did not)
    with pytest.raises(DDStoreValueError, match=r"\(from bad\.npy\) has 3 non-finite"):
        make(store, st.Series(bad.shape, bad.dtype, lambda a, b: bad[a:b],
                              source="bad.npy"), 4)
    ds = make(store, bad, 4, fill=0.0, dtype=np.float64)
    filled = np.where(np.isfinite(bad), bad, 0.0)
    check_all_windows(ds, filled)
    a, b = ds.split_bounds["train"]
    mean, std = brute_force_stats(materialize_windows(filled, 4, np.arange(a, b))[0])
    np.testing.assert_allclose(ds.mean, mean, rtol=1e-12)
    with pytest.raises(DDStoreValueError, match="fill="):
        make(store, raw, 4, fill=float("nan"))
    # the store keeps working after the errors
    check_all_windows(make(store, raw, 4), raw)


# ----------------------------------------------------------------------------- features
def test_time_features(store):
    import pandas as pd
    T, n = 2100, 3
    ts = np.datetime64("2017-05-03T22:35") + np.arange(T) * np.timedelta64(5, "m")
    raw = random_series(T=T, n=n, f=1, seed=4)
    ds = make(store, st.from_arrays(raw, timestamps=ts), 12,
              time_features=("tod", "dow"))
    assert ds.num_features == 1 + 1 + 7
    idx = pd.DatetimeIndex(ts)
    tod = ((idx.hour * 60 + idx.minute) / 1440.0).to_numpy()
    dow = np.eye(7)[idx.day_of_week]
    for s in (0, 77, 1500, len(ds) - 1):
        x, y = ds[s]
        assert x.shape == (12, n, 9)
        np.testing.assert_allclose(x[:, :, 1].numpy(), np.repeat(tod[s:s + 12, None], n, 1),
                                   atol=1e-6)
        np.testing.assert_array_equal(x[:, 0, 2:].numpy(), dow[s:s + 12])
        np.testing.assert_array_equal(y[:, 1, 2:].numpy(), dow[s + 12:s + 24])
        np.testing.assert_allclose(y[:, :, 1].numpy(),
                                   np.repeat(tod[s + 12:s + 24, None], n, 1), atol=1e-6)
    plain = make(store, raw, 12)
    xb, _ = ds.get_batch([3, 9])
    pb, _ = plain.get_batch([3, 9])
    np.testing.assert_array_equal(xb[..., :1].numpy(), pb.numpy())
    back = ds.inverse_transform(xb)  # time features pass through unchanged
    np.testing.assert_array_equal(back[..., 1:].numpy(), xb[..., 1:].numpy())
    np.testing.assert_allclose(back[..., 0].numpy(),
                               np.stack([raw[3:15, :, 0], raw[9:21, :, 0]]), rtol=1e-5,
                               atol=1e-5)
    with pytest.raises(DDStoreValueError, match="needs timestamps"):
        make(store, raw, 12, time_features="tod")
    with pytest.raises(DDStoreValueError, match="'hour' unknown"):
        make(store, st.from_arrays(raw, timestamps=ts), 12, time_features=("hour",))
    with pytest.raises(DDStoreValueError, match=r"\['tod'\] unknown"):  # (no TypeError)
        make(store, st.from_arrays(raw, timestamps=ts), 12, time_features=(["tod"],))



@pytest.mark.parametrize("stamps,message", [
    (np.arange(60), r"timestamps must be datetime64 values \(or date strings\), got "
                    r"int64 numbers, which have no unit"),
    (np.arange(60) * 1.5, r"got float64 numbers"),
    (np.where(np.arange(60) == 3, np.datetime64("NaT"),
              np.datetime64("2024-01-01T00:00") + np.arange(60) * np.timedelta64(1, "h")),
     r"timestamp of step 3 is NaT; every step needs a time"),
    (np.datetime64("2250-01-01", "D") + np.arange(60) * np.timedelta64(365, "D"), r"timestamp of step \d+ \(2\d\d\d-.*\) does not fit "
                                r"datetime64\[ns\] \(1677-09-21 to 2262-04-11"),
])
def test_timestamps_must_be_times_that_fit(store, stamps, message):
    """Numbers (read as nanoseconds), NaT (NaN time features) and dates beyond
    datetime64[ns] (wrapped by numpy to other dates) are refused naming the step; date
    strings and datetime objects are read."""
    import datetime
    raw = random_series(T=60, n=2, f=1)
    with pytest.raises(DDStoreValueError, match=message):
        make(store, st.from_arrays(raw, timestamps=stamps), 2, time_features="tod")
    with pytest.raises(DDStoreValueError, match=message):
        make(store, raw, 2, timestamps=stamps, time_features="tod")
    hours = [datetime.datetime(2024, 1, 1, h % 24) for h in range(60)]
    for given in (hours, [str(np.datetime64(h)) for h in hours]):
        ds = make(store, st.from_arrays(raw, timestamps=given), 2, time_features="tod")
        np.testing.assert_array_equal(ds.timestamps, np.asarray(hours, "datetime64[ns]"))

def test_inverse_transform(store):
    raw = random_series(T=80, n=5, f=3, seed=6)
    for per_node in (False, True):
        ds = make(store, raw, 4, per_node=per_node, dtype=np.float64)
        x, y = ds.get_batch([0, 10, 20])
        want = np.stack([raw[s + 4:s + 8] for s in (0, 10, 20)])
        np.testing.assert_allclose(ds.inverse_transform(y).numpy(), want, rtol=1e-12)
        np.testing.assert_allclose(ds.inverse_transform(y.numpy()), want, rtol=1e-12)
        train = ds.splits()[0]
        np.testing.assert_allclose(train.inverse_transform(y[..., 1:2].numpy(), features=[1]),
                                   want[..., 1:2], rtol=1e-12)
        with pytest.raises(DDStoreValueError, match="last dimension 2"):
            ds.inverse_transform(y[..., :2])
    # float16 predictions of a series whose mean and std float16 does not hold (above
    # 65504): computed wider, then float16, as numpy's path (torch's gave inf and NaN)
    big = (np.random.default_rng(7).standard_normal((80, 2, 1)) * 6e4 + 1e5
           ).astype(np.float32)
    ds = make(store, big, 4, dtype=np.float32)
    assert ds.mean.min() > 65504
    starts = list(range(0, 70, 3))
    y = ds.get_batch(starts)[1].half()
    want = np.stack([big[s + 4:s + 8] for s in starts])
    fits = np.abs(want) < 60000  # the values float16 holds
    some = y.reshape(-1, 1)[torch.from_numpy(fits.reshape(-1))]  # (per-feature: [..., F])
    via_torch, via_numpy = ds.inverse_transform(some), ds.inverse_transform(some.numpy())
    assert via_torch.dtype == torch.float16 and fits.sum() > 20
    got = via_torch.float().numpy()[:, 0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, via_numpy.astype(np.float32)[:, 0], rtol=2e-3)
    np.testing.assert_allclose(got, want[fits], rtol=2e-3, atol=64)
    # the values float16 cannot hold are refused, naming the way to have them (they were
    # inf without a word); as float32, every one
    for values in (y, y.numpy()):
        with pytest.raises(DDStoreValueError, match=r"beyond float16's range \(\+-65504\); "
                                                    r"pass float64 values"):
            ds.inverse_transform(values)
    np.testing.assert_allclose(ds.inverse_transform(y.float()).numpy(), want, rtol=2e-3,
                               atol=64)
    # refused only where the cast makes a value infinite: 65510 rounds to float16's
    # 65504 (it was refused, being above the largest float16)
    tight = make(store, (65000 + np.random.default_rng(8).standard_normal((80, 2, 1))
                         ).astype(np.float32), 4, dtype=np.float32)
    m, s = float(tight.mean.reshape(-1)[0]), float(tight.std.reshape(-1)[0])
    z = np.array([[(65510.0 - m) / s]], np.float64).astype(np.float16)  # about 510
    near = float(z[0, 0]) * s + m
    assert 65504 < near < 65520, near  # (what float16 rounds to 65504)
    assert tight.inverse_transform(z)[0, 0] == np.float16(65504)
    assert tight.inverse_transform(torch.from_numpy(z))[0, 0].item() == 65504.0


# ----------------------------------------------------------------------------- bad input
def test_bad_input(store):
    raw = random_series(T=60, n=3, f=2)
    cases = [
        (dict(horizon=0), r"horizon=0 out of range: allowed 1 <= horizon <= 30"),
        (dict(resident="dev"), r"WindowDataset\('v\d+'\): resident='dev'; allowed: None"),
        (dict(horizon=-2), r"horizon=-2 out of range"),
        (dict(horizon=31), r"horizon=31 out of range.*2\*horizon <= T = 60"),
        (dict(horizon=2.5), r"horizon must be an integer in \[1, 30\].*2.5"),
        (dict(horizon=True), r"horizon must be an integer"),
        (dict(split=(0.7, -0.1, 0.4)), r"split ratio val=-0.1 out of range \[0, 1\]"),
        (dict(split=(0.7, 0.1, 0.1)), r"sum to 0.9; they must sum to 1"),
        (dict(split=(0.7, 0.3)), r"three ratios"),
        # a set's order is not the splits' (it was taken in its own order), nor a dict's
        (dict(split={0.8, 0.15, 0.05}), r"three ratios .* list, tuple or 1-D array \(in "
                                        r"that order\), got \{"),
        (dict(split={"train": 0.7, "val": 0.1, "test": 0.2}), r"three ratios.*got \{'tr"),
        (dict(split=(0.0, 0.5, 0.5)), r"train=0.0 must be > 0"),
        (dict(split=(0.7, float("nan"), 0.3)), r"val=nan must be a finite number"),
        (dict(split=(0.9, 0.05, 0.05)), r"split 'val'.*3 steps, fewer than 2\*horizon = 6, "
                                        r"so no complete window \(horizon <= 1 fits every "
                                        r"split of these ratios\)"),
        (dict(dtype=np.int32), r"dtype=int32.*allowed: float16, float32, float64"),
        (dict(resident="gpu"), r"resident='gpu'"),
        (dict(device="bogus"), r"device='bogus' is not a torch device"),
        (dict(device="meta"), r"device='meta'; allowed: 'cpu', 'cuda' or 'cuda:N'"),
    ] + ([] if torch.cuda.is_available() else [
        (dict(device="cuda"), r"device='cuda' but CUDA is not available here"),
    ]) + ([] if np.dtype(np.longdouble).itemsize == 8 else [  # (float64 on some machines)
        # long double: no torch dtype (torch's own TypeError came out)
        (dict(dtype=np.longdouble), rf"dtype={np.dtype(np.longdouble)}; allowed: float16, "
                                    rf"float32, float64"),
    ]) + [
        (dict(fill="zero"), r"fill='zero' must be a finite number"),
        (dict(time_features="tod"), r"needs timestamps"),
    ]
    for kw, msg in cases:
        args = dict(horizon=3)
        args.update(kw)
        with pytest.raises(DDStoreError, match=msg):
            make(store, raw, **args)
    for arr, shape in ((raw[:, 0, 0], r"\(60,\)"), (raw[None], r"\(1, 60, 3, 2\)")):
        with pytest.raises(DDStoreValueError, match=rf"2-D \[T, nodes\] or 3-D.*{shape}"):
            make(store, arr, 3)
    with pytest.raises(DDStoreValueError, match="dtype <U1"):
        make(store, np.full((10, 2), "a"), 2)
    with pytest.raises(DDStoreValueError, match=r"a series of T = 1 step\(s\) is too short "
                                                r"for any window: .* T >= 2 \(horizon=1\)"):
        make(store, raw[:1], 1, split=(1, 0, 0))
    ds = make(store, raw, 3)
    train = ds.splits()[0]
    n = len(train)
    with pytest.raises(DDStoreIndexError, match=rf"index {n} \(position 0\) out of range "
                                                rf"\[-{n}, {n}\)"):
        train[n]
    with pytest.raises(IndexError, match=rf"index {-n - 1} "):
        train[-n - 1]
    with pytest.raises(DDStoreIndexError, match=rf"index {n + 5} \(position 2\)"):
        train.get_batch([0, 1, n + 5])
    with pytest.raises(DDStoreValueError, match="integers, got dtype float64"):
        train.get_batch([0.5, 1.0])
    with pytest.raises(DDStoreIndexError, match="index must be an integer"):
        train["0"]  # an IndexError, as a TensorDataset's (torch indexing)
    x, _ = train[-1]
    np.testing.assert_array_equal(x.numpy(), train[n - 1][0].numpy())


# ----------------------------------------------------------------------------- loading
def test_dataloader_and_samplers(store):
    raw = random_series(T=120, n=3, f=2, seed=8)
    ds = make(store, raw, 4, standardize=False)
    train = ds.splits()[0]
    loader = train.loader(16)
    st.set_epoch(loader, 0)
    seen = []
    for xb, yb in loader:
        assert xb.shape[1:] == (4, 3, 2) and xb.shape[0] <= 16
        seen.append(xb)
    xs = torch.cat(seen).numpy()
    X, _ = materialize_windows(raw, 4, np.arange(train.start, train.stop))
    # every start exactly once: the batches are a permutation of the training windows
    order = np.lexsort(xs.reshape(len(xs), -1).T)
    order_ref = np.lexsort(X.reshape(len(X), -1).T.astype(np.float32))
    np.testing.assert_array_equal(xs[order], X.astype(np.float32)[order_ref])

    bl = train.loader(8, sampler="batch")
    got = []
    for e in range(2):
        st.set_epoch(bl, e)
        batches = list(bl.batch_sampler)
        assert sorted(i for b in batches for i in b) == list(range(len(train)))
        for b in batches:  # consecutive starts
            assert b == list(range(b[0], b[0] + len(b)))
        got.append([b[0] for b in batches])
    assert got[0] != got[1]  # order reshuffled between epochs
    xb, yb = next(iter(bl))
    assert xb.shape[0] == 8


def test_loader_equals_torch_dataloader(store):
    """The host loader's own iterator gives torch's ``DataLoader`` batches over the same
    sampler, byte for byte, with ``len`` on loader and iterator, and draws from torch's
    global generator as torch's iterator does (a loop's random stream unchanged)."""
    raw = random_series(T=90, n=3, f=2, seed=21)
    train = make(store, raw, 4, standardize=False).splits()[0]
    for sampler, drop_last in (("global", False), ("global", True), ("batch", False)):
        loader = train.loader(7, sampler=sampler, seed=3, drop_last=drop_last)
        assert isinstance(loader, torch.utils.data.DataLoader)
        plain = torch.utils.data.DataLoader(train, batch_sampler=loader.batch_sampler,
                                            collate_fn=st.batch_collate)
        for epoch in (0, 1):
            st.set_epoch(loader, epoch)
            torch.manual_seed(5)
            it = iter(loader)
            assert len(it) == len(loader) == len(plain)
            ours = list(it)
            after = torch.rand(3)
            torch.manual_seed(5)
            ref = list(plain)
            assert torch.equal(after, torch.rand(3))
            assert len(ours) == len(ref) > 0
            for (xa, ya), (xb, yb) in zip(ours, ref):
                assert torch.equal(xa, xb) and torch.equal(ya, yb)
    # the epoch is read at the first batch, as torch's samplers read it (a set_epoch
    # between iter and next counts: the order was taken at iter)
    loader = train.loader(7, seed=3)
    plain = torch.utils.data.DataLoader(train, batch_sampler=loader.batch_sampler,
                                        collate_fn=st.batch_collate)
    ours, ref = iter(loader), iter(plain)
    st.set_epoch(loader, 7)
    assert torch.equal(next(ours)[0], next(ref)[0])
    # a collate_fn set on the loader afterwards is honoured (torch's own iterator)
    loader = train.loader(5, shuffle=False)
    loader.collate_fn = lambda batch: ("mine", len(batch))
    assert next(iter(loader)) == ("mine", 5)
    # so is a subclass's own __getitems__ (torch's batched fetch), which was skipped
    Own = type("Own", (type(train),), {"__getitems__": lambda self, idx: st.WindowBatch(
        [p + 1000 for p in self.get_batch(idx)])})
    own = Own(train.dataset, train.split_name, train.start, train.stop)
    xo, _ = next(iter(own.loader(5, shuffle=False)))
    assert torch.equal(xo, train.get_batch(range(5))[0] + 1000)
    # each next() is a profiler scope, as torch's iterator records them
    from torch.profiler import ProfilerActivity, profile
    loader = train.loader(7, shuffle=False)
    plain = torch.utils.data.DataLoader(train, batch_sampler=loader.batch_sampler,
                                        collate_fn=st.batch_collate)
    scopes = []
    for dl in (loader, plain):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in dl:
                pass
        scopes.append(sum(e.name.startswith("enumerate(DataLoader)#")
                          for e in prof.events()))
    assert scopes[0] == scopes[1] == len(loader) + 1  # (the last: StopIteration)


def test_assign_blocks_balance_and_locality():
    from ddstore.spatiotemporal.batch_sampler import assign_blocks
    rng = np.random.default_rng(0)
    for P, width, nb in ((3, 3, 17), (4, 2, 9), (4, 4, 40), (6, 3, 5), (2, 2, 1)):
        owner = np.sort(rng.integers(0, width, nb))
        for drop_last, local in itertools.product((False, True), (False, True)):
            per = assign_blocks(owner, P, width, seed=1, epoch=2, drop_last=drop_last,
                                local=local)
            M = nb // P if drop_last else -(-nb // P)
            assert all(len(p) == M for p in per)
            flat = [b for p in per for b in p]
            if drop_last:
                assert len(set(flat)) == len(flat) == M * P
            else:
                assert set(flat) == set(range(nb)) and len(flat) == M * P
            if local and not drop_last:
                # each rank holds as many of its own group rank's blocks as it can
                groups = P // width
                for r, p in enumerate(per):
                    g, q = r % width, r // width
                    own = int(np.sum(owner == g))
                    share = len(range(q, own, groups))
                    assert len({b for b in p if owner[b] == g}) == min(share, M)
            # one rank's list alone is that rank's of the whole deal
            for r in range(P):
                assert assign_blocks(owner, P, width, seed=1, epoch=2, rank=r,
                                     drop_last=drop_last, local=local) == per[r]
    # far more ranks than blocks: the undealt ranks pad alike, and the work grows with
    # the blocks (2**62 ranks were a list each, and never returned)
    owner = np.arange(10) % 2
    per = assign_blocks(owner, 22, 2, seed=3, epoch=0)
    assert sorted(b for p in per[:10] for b in p) == list(range(10))
    assert all(p == per[10] and len(p) == 1 for p in per[10:])
    per[10].append(99)  # each rank's list its own
    assert per[11] == per[12] != per[10]
    for bad in (22, -1, 2.0, "1"):
        with pytest.raises(DDStoreValueError, match=rf"assign_blocks: rank={bad!r} out of "
                                                     rf"range \[0, 22\)"):
            assign_blocks(owner, 22, 2, seed=3, epoch=0, rank=bad)
    for r in (0, 9, 21):
        assert assign_blocks(owner, 22, 2, seed=3, epoch=0, rank=r) == per[r]
    assert assign_blocks(owner, 2**62, 2, seed=3, epoch=0, rank=2**62 - 1) == per[21]
    assert assign_blocks(owner, 2**62, 2, seed=3, epoch=0, rank=0) == \
        assign_blocks(owner, 22, 2, seed=3, epoch=0, rank=0)


def test_resident_device_cpu_matches_store(store):
    raw = random_series(T=120, n=4, f=2, seed=11)
    a = make(store, raw, 5)
    b = make(store, raw, 5, resident="device")
    idx = np.random.default_rng(0).integers(0, len(a), 40)
    for (xa, ya), (xb, yb) in ((a.get_batch(idx), b.get_batch(idx)), (a[3], b[3])):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_device_windows(store):
    raw = random_series(T=200, n=6, f=2, seed=12)
    cpu = make(store, raw, 6)
    gpu = make(store, raw, 6, device="cuda")
    assert gpu.resident == "device"
    idx = np.arange(len(cpu))
    xc, yc = cpu.get_batch(idx)
    xg, yg = gpu.get_batch(idx)
    assert xg.is_cuda and yg.is_cuda
    assert torch.equal(xg.cpu(), xc) and torch.equal(yg.cpu(), yc)
    pred = gpu.inverse_transform(yg)
    assert pred.is_cuda


def test_empty_batch_dtypes_and_tensor_indices(store):
    raw = random_series(T=120, n=3, f=2, seed=13)
    for dt in (np.float16, np.float32, np.float64):
        ds = make(store, raw, 4, dtype=dt, standardize=False)
        x, y = ds.get_batch([])
        assert tuple(x.shape) == (0, 4, 3, 2) and tuple(y.shape) == (0, 4, 3, 2)
        xb, yb = ds.get_batch(torch.tensor([5, 0, 5]))
        assert xb.dtype == torch.from_numpy(np.zeros(0, dt)).dtype
        np.testing.assert_array_equal(xb.numpy(), np.stack([raw[5:9], raw[0:4],
                                                            raw[5:9]]).astype(dt))
        np.testing.assert_array_equal(yb[1].numpy(), raw[4:8].astype(dt))
        x0, _ = ds[torch.tensor(7)]
        np.testing.assert_array_equal(x0.numpy(), raw[7:11].astype(dt))


def test_nonfinite_edge_weights_refused(store, tmp_path):
    """NaN / inf static edge weights are refused wherever they come in (arrays, a PGT
    file's 'weights'), naming the edge, as DynamicGraph refuses them."""
    raw = random_series(T=40, n=3, f=1, seed=5)
    ei = np.array([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(DDStoreValueError, match=r"^array: edge_weight: edge 1 \(1 -> 2\) "
                                                r"has weight nan; weights must be finite "
                                                r"\(2 of 3 edges are NaN or inf\)$"):
        st.from_arrays(raw, ei, [1.0, np.nan, np.inf])
    # a finite float64 weight that float32 cannot hold: refused too, named as given
    with pytest.raises(DDStoreValueError, match=r"edge 2 \(2 -> 0\) has weight 1e\+300, "
                                                r"beyond float32 as weights are stored"):
        st.from_arrays(raw, ei, [1.0, 2.0, 1e300])
    path = tmp_path / "pedalme_like.json"
    path.write_text(json.dumps({"X": raw[:, :, 0].tolist(), "edges": ei.T.tolist(),
                                "weights": [1.0, 2.0, 3.0]}).replace("3.0]", "Infinity]"))
    with pytest.raises(DDStoreValueError, match=r"^pedalme_like.json\[X\]: edge_weight: "
                                                r"edge 2 \(2 -> 0\) has weight inf"):
        st.load_pgt_json(str(path))
    before = store.variables()
    with pytest.raises(DDStoreValueError, match=r"edge 0 \(0 -> 1\) has weight -inf"):
        make(store, st.from_arrays(raw, adjacency=np.array(
            [[0, -np.inf, 0], [0, 0, 1], [1, 0, 0]])), 2)
    assert store.variables() == before
    path.write_text(json.dumps({"X": raw[:, :, 0].tolist(), "edges": ei.T.tolist(),
                                "weights": [1.0, "heavy", 3.0]}))
    with pytest.raises(DDStoreValueError, match=r"^load_pgt_json: .*pedalme_like.json: "
                                                r"'weights' is not numeric"):
        st.load_pgt_json(str(path))


def test_node_ids_come_back_from_a_checkpoint_as_they_went_in(store, tmp_path):
    """Node ids survive save and restore: an array with its dtype (numbers, datetimes,
    str), a sequence as a list of equal values; ids a checkpoint could not give back
    equal are refused when the series is made (they were dropped at the save)."""
    raw = random_series(T=40, n=3, f=1, seed=2)
    kept = {"ints": np.array([7, 3, 5], np.int64), "floats": np.array([0.5, 1.5, -2.0]),
            "days": np.datetime64("2024-01-01") + np.arange(3),
            "seconds": np.array([1, 2, 3], dtype="timedelta64[s]"),
            "names": np.array(["a", "bb", "ccc"]), "labels": ["x", "y", "z"],
            "numpy ints": [np.int64(4), np.int64(5), np.int64(6)],
            "mixed": [1, "two", None], "nested": [[0, 1], [1, 0], [2, 2]]}
    made = {}
    for i, ids in enumerate(kept.values()):
        made[f"ids{i}"] = make(store, st.from_arrays(raw, node_ids=ids), 2)
    store.save(str(tmp_path / "ck"))
    back = ddstore.DDStore.restore(str(tmp_path / "ck"), store.comm)
    try:
        for (what, ids), ds in zip(kept.items(), made.values()):
            got = st.WindowDataset.open(back, ds.name).node_ids
            if isinstance(ids, np.ndarray):
                assert isinstance(got, np.ndarray) and got.dtype == ids.dtype, what
                assert np.array_equal(got, ids), what
            else:
                assert type(got) is list and got == list(ids), what
    finally:
        back.free()
    for ids, message in (([("a", 0), ("b", 1), ("c", 2)],
                          r"node_ids\[0\] = \('a', 0\) would come back from a checkpoint as "
                          r"\['a', 0\]"),
                         (np.array([1, "x", 2.5], dtype=object),
                          r"node_ids of dtype object and shape \(3,\) cannot be kept"),
                         (np.zeros((3, 1)), r"node_ids of dtype float64 and shape \(3, 1\)"),
                         ([object(), 1, 2], r"node_ids cannot be kept in a checkpoint \("
                                            r"object is not JSON\)")):
        with pytest.raises(DDStoreValueError, match=message + ".*allowed: a 1-D numpy "
                                                              "array of numbers"):
            st.from_arrays(raw, node_ids=ids)


def test_a_split_of_ratio_zero_reopens(store, tmp_path):
    """A split of ratio 0 (empty; without ``overlap`` at its first time step, ``T`` for
    the test split) reopens, in the store and from a checkpoint, every window of every
    split equal (``open`` refused it as a damaged annotation)."""
    raw = random_series(T=100, n=3, f=1, seed=4)
    made = [make(store, raw, 4, split=s, overlap=o) for s in
            ((0.7, 0.3, 0.0), (1.0, 0.0, 0.0), (0.8, 0.2, 0.0)) for o in (False, True)]
    store.save(str(tmp_path / "ck"))
    back = ddstore.DDStore.restore(str(tmp_path / "ck"), store.comm)
    try:
        for ds in made:
            for s in (store, back):
                got = st.WindowDataset.open(s, ds.name)
                assert got.split_bounds == ds.split_bounds
                for a, b in zip(ds.splits(), got.splits()):
                    assert len(a) == len(b)
                    for i in range(len(a)):
                        assert all(torch.equal(x, y) for x, y in zip(a[i], b[i])), i
    finally:
        back.free()


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3, 4])
@pytest.mark.shared_launch("st_windows.py", "{tmp}", timeout=180)
def test_windows_all_placements(shared_launch, nprocs):
    passed_on(shared_launch, nprocs)


@pytest.mark.mpi
def test_benchmark_smoke(tmp_path):
    """python -m ddstore.bench.spatiotemporal on a small series, (a), (b) and (c)."""
    import subprocess
    import sys
    out = subprocess.run(
        ["timeout", "--kill-after=10", "240", sys.executable, "-m",
         "ddstore.bench.spatiotemporal", "--steps", "3000", "--nodes", "20",
         "--epochs", "1", "--out", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stdout
    res = json.load(open(tmp_path / "spatiotemporal.json"))
    assert res["targets"]["stats_a_equal_b"] and res["materialized"]["windows_identical"]
    assert res["materialized"]["window_bytes"] == 2 * (3000 - 23) * 12 * 20 * 2 * 4
    halo, multi = res["partitioned"]
    assert halo["halo"] and not multi["halo"]
    # balanced placement: 3 splits x 2 members = 6 pieces, each but the last with a halo
    # of 2h - 1 = 23 steps, split evenly over the two ranks
    stored = [r["stored_steps"] for r in halo["per_rank"]]
    assert sum(stored) == 3000 + 5 * 23 and abs(stored[0] - stored[1]) <= 1, stored
    assert [r["stored_steps"] for r in multi["per_rank"]] == [1500, 1500]
    # the one-sided traffic of a window batch: global shuffle over rma reads the other
    # member's windows (one gathered get and one round trip per owner per batch); batch
    # counts alike on both ranks; nothing counted where every read is a load (auto, shm)
    for part in (halo, multi):
        for key in ("auto_global", "auto_batch_local", "rma_global", "rma_batch_local"):
            q = part[key + "_rma"]
            assert len(q["by_rank"]) == 2 and q["bytes_per_batch"] >= 0, (key, q)
        q = part["rma_global_rma"]
        assert q["remote_owners"] == 1 and q["gets_per_batch"] > 0, q
        assert q["round_trips_per_batch"] > 0 and q["bytes_per_batch"] > 0, q
        assert q["gets_per_owner_per_batch"] > 0, q
        assert q["round_trips_per_owner_per_batch"] > 0, q
        q = part["auto_global_rma"]
        if q["remote_owners"] == 0:  # inside a node: the peer's windows read by load
            assert q["gets_per_batch"] == 0 and q["round_trips_per_batch"] == 0, q


def test_loader_arguments_and_tensor_inputs(store):
    """Refused with a DDStoreValueError naming the argument and its range (they were
    torch's ValueError, numpy's 'expected non-negative integer' at the first batch, or
    accepted): loader batch_size 0 / 2.5 with the global sampler, the batch sampler's
    seed -1 / 1.5; a 0-d float or bool tensor as an index (tensor(2.7) was window 2).
    A bfloat16 tensor series is read as its exact float32 values (it was 'Got
    unsupported ScalarType BFloat16')."""
    raw = random_series(T=80, n=3, f=2, seed=21, dtype=np.float32)
    ds = make(store, raw, 3, standardize=False)
    train = ds.splits()[0]
    for bs in (0, 2.5, True):
        for smp in ("global", "batch"):
            with pytest.raises(DDStoreValueError, match=rf"batch_size={bs!r} must be an "
                                                        r"integer >= 1"):
                train.loader(bs, sampler=smp)
    with pytest.raises(DDStoreValueError, match=r"BatchShuffleSampler: seed must be an "
                                                r"integer, got 1.5"):
        train.loader(4, sampler="batch", seed=1.5)
    # a negative seed is its value modulo 2**64 (the package's rule, torch's too)
    assert [b[0].tolist() for b in train.loader(4, sampler="batch", seed=-1)] == \
        [b[0].tolist() for b in train.loader(4, sampler="batch", seed=(1 << 64) - 1)]
    assert len(list(train.loader(4, seed=-1))) == len(train.loader(4, seed=-1))  # torch's
    for bad in (torch.tensor(2.7), torch.tensor(2.0), torch.tensor(True)):
        with pytest.raises(DDStoreIndexError, match=r"index must be an integer or a slice, got "
                                                    r"tensor\("):
            ds[bad]
    x, _ = ds[torch.tensor(2, dtype=torch.int32)]
    np.testing.assert_array_equal(x.numpy(), raw[2:5])
    bf = torch.from_numpy(raw).to(torch.bfloat16)
    exact = bf.float().numpy()
    dbf = make(store, bf, 3, standardize=False)
    xb, yb = dbf.get_batch(np.arange(len(dbf)))
    X, Y = materialize_windows(exact.astype(np.float64), 3)
    np.testing.assert_array_equal(xb.numpy(), X.astype(np.float32))
    np.testing.assert_array_equal(yb.numpy(), Y.astype(np.float32))


def test_window_views_are_torch_datasets(store):
    """A split is a torch ``Dataset`` as torch defines one: ``__getitems__`` gives a
    sequence of the samples ``split[i]`` (it gave the stacked batch, so torch's default
    collate stacked ``(x, y)`` into one tensor [2, B, ...]); a DataLoader with the default
    collate gives ``[x, y]`` equal to ``get_batch``, ``batch_collate`` the batch as read
    (no copy); a slice is a ``Subset`` whose loader reads through ``__getitems__`` too."""
    raw = random_series(T=60, n=3, f=2, seed=5, dtype=np.float32)
    ds = make(store, raw, 3, standardize=False)
    train = ds.splits()[0]
    idx = [4, 0, -1, 4]
    xb, yb = train.get_batch(idx)
    items = train.__getitems__(idx)
    assert isinstance(items, st.WindowBatch) and len(items) == len(idx)
    for b, i in enumerate(idx):
        for got, want in zip(items[b], train[i]):
            assert torch.equal(got, want), (b, i)
    assert [torch.equal(a, w) for (a, _), w in zip(items[1:3], xb[1:3])] == [True, True]
    assert torch.equal(items[-1][1], yb[-1])
    # iterated as indexed (its own __iter__: what torch's default collate walks)
    walked = list(items)
    assert len(walked) == len(idx) and all(
        torch.equal(a, w) for (x, y), i in zip(walked, idx) for a, w in zip((x, y), train[i]))
    with pytest.raises(IndexError, match="WindowBatch index 4 out of range for 4 windows"):
        items[4]
    order = torch.utils.data.SequentialSampler(range(len(train)))
    plain = list(torch.utils.data.DataLoader(train, batch_size=5, sampler=order))
    taken = list(torch.utils.data.DataLoader(train, batch_size=5, sampler=order,
                                             collate_fn=st.batch_collate))
    assert len(plain) == len(taken) == -(-len(train) // 5)
    for k, (p, t) in enumerate(zip(plain, taken)):
        want = train.get_batch(range(5 * k, min(5 * k + 5, len(train))))
        assert isinstance(p, list) and len(p) == 2 and isinstance(t, tuple)
        for a, b, w in zip(p, t, want):
            assert torch.equal(a, w) and torch.equal(b, w)
    batch = train.__getitems__([1, 2])
    assert st.batch_collate(batch) is batch.parts  # handed on, not copied
    one = train[3]  # batch_size=None: one sample, handed on as it is (not stacked)
    assert st.batch_collate(one) is one
    (x3, y3), = itertools.islice(torch.utils.data.DataLoader(
        train, batch_size=None, sampler=[3], collate_fn=st.batch_collate), 1)
    assert torch.equal(x3, one[0]) and torch.equal(y3, one[1])
    with pytest.raises(TypeError, match="WindowBatch indices must be integers or slices, "
                                        "not float"):
        batch[1.0]
    assert torch.equal(st.batch_collate([train[1], train[2]])[0], batch.parts[0])
    # a user's (x, y, index) or (x, y, mask): torch's default collate (taken for dynamic
    # windows when batch_collate learnt them: a TypeError)
    for extra in (3, torch.ones(2, dtype=torch.bool)):
        xs, ys, es = st.batch_collate([train[1] + (extra,), train[2] + (extra,)])
        assert torch.equal(xs, batch.parts[0]) and es.shape[0] == 2
    part = train[2:9:3]
    assert isinstance(part, torch.utils.data.Subset) and list(part.indices) == [2, 5, 8]
    assert torch.equal(part[1][0], train[5][0]) and len(train[len(train):]) == 0
    (px, py), = torch.utils.data.DataLoader(part, batch_size=3, collate_fn=st.batch_collate)
    assert torch.equal(px, train.get_batch([2, 5, 8])[0]) and py.shape[0] == 3


def test_datasets_refuse_pickling_naming_why(store):
    """Pickling a window, dynamic or graph dataset (what a DataLoader's 'spawn' workers
    do) is refused naming the store and what to do (it was "cannot pickle
    '_cffi_backend.__CDataOwn' object"); so is copying the store."""
    import copy
    import pickle
    from ddstore.dynamic import DynamicWindowDataset
    from ddstore.graphs import GraphDataset, ising_dataset
    raw = random_series(T=40, n=3, f=1, seed=6, dtype=np.float32)
    held = [make(store, raw, 2),
            DynamicWindowDataset(store, f"v{next(_names)}", raw, 2,
                                 edges=[np.array([[0, 1], [1, 2]])] * 40),
            GraphDataset.from_samples(store, f"v{next(_names)}",
                                      [ising_dataset(2, size=3, seed=1)[i] for i in range(2)],
                                      progress=False)]
    words = (r"a DDStore cannot be pickled or copied, nor anything holding one .* start "
             r"them by 'fork' .* or use num_workers=0")
    for ds in held + [held[0].splits()[0]]:
        with pytest.raises(ddstore.DDStoreStateError, match=words):
            pickle.dumps(ds)
    for copier in (copy.copy, copy.deepcopy):
        with pytest.raises(ddstore.DDStoreStateError, match=words):
            copier(store)
    loader = torch.utils.data.DataLoader(held[0], batch_size=4, num_workers=1,
                                         multiprocessing_context="spawn")
    with pytest.raises(ddstore.DDStoreStateError, match=words):
        next(iter(loader))


def test_window_loader_refuses_workers_saying_what_works(store):
    """The window loader takes no workers, and says what does (``prefetch=``; a plain
    DataLoader with forked workers, which read the node's rows: it said that workers
    cannot read the store at all); such a DataLoader reads every window as the rank."""
    raw = random_series(T=80, n=3, f=2, seed=8, dtype=np.float32)
    train = make(store, raw, 3).splits()[0]
    with pytest.raises(ddstore.DDStoreValueError,
                       match=r"num_workers=2; allowed: 0\..*prefetch=.*"
                             r"multiprocessing_context='fork'.*rows this node holds"):
        train.loader(4, num_workers=2)
    loader = torch.utils.data.DataLoader(train, batch_size=4, num_workers=2,
                                         multiprocessing_context="fork",
                                         collate_fn=st.batch_collate)
    got = [b for b in loader]
    want = [train.get_batch(list(range(i, min(i + 4, len(train)))))
            for i in range(0, len(train), 4)]
    assert len(got) == len(want)
    for (gx, gy), (wx, wy) in zip(got, want):
        assert torch.equal(gx, wx) and torch.equal(gy, wy)


def test_halo_layout_rows_within_the_documented_bound():
    """docs/index-batching.md's bound on the rows a member stores with ``halo=True``
    (it said ``3·(2h−1)`` more than ``series/width``; the last member, which also owns
    the steps after each split's last window start, stores up to ``4.7·(2h−1)``), and
    every step of the series stored by some member."""
    import itertools
    from ddstore.spatiotemporal.dataset import split_ranges
    from ddstore.spatiotemporal.windows import series_layout
    worst = [0.0, 0.0]
    for T, h, w, split, overlap in itertools.product(
            (200, 999, 2016, 34272), (3, 12, 24), (2, 3, 4, 8),
            ((0.7, 0.1, 0.2), (0.6, 0.2, 0.2), (0.8, 0.1, 0.1), (1.0, 0.0, 0.0)),
            (False, True)):
        try:
            bounds = split_ranges(T, h, split, overlap)
        except ddstore.DDStoreValueError:
            continue  # a split too short for its windows
        lay = series_layout(T, h, w, True, bounds)
        extra = (lay["member_stored"] - T / w) / (2 * h - 1)
        worst = [max(worst[0], extra[:-1].max()), max(worst[1], extra[-1])]
        covered = np.zeros(T, bool)
        for lo, stored in zip(lay["lo"], lay["stored"]):
            covered[lo:lo + stored] = True
        assert covered.all(), (T, h, w, split, overlap)
    assert 2.5 < worst[0] <= 3.4 and 4 < worst[1] <= 4.7, worst
