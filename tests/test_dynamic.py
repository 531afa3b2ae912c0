"""Dynamic graphs (DynamicGraph, DynamicWindowDataset) and the PGT JSON layouts.

The MPI program tests/mpi/st_dynamic.py checks every snapshot against brute force on 1-4
ranks; here: the loaders on every layout (real files where we have them: chickenpox,
PedalMe, Twitter tennis; small synthetic files of the real layouts for Windmill,
WikiMath, England COVID and Montevideo bus, whose real files are not available offline),
canonical_edges and the benchmark (the example runs in test_examples.py).
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import torch  # noqa: E402,F401 (a requirement: missing is a failure)

from ddstore import DDStoreValueError  # noqa: E402
from ddstore import spatiotemporal as st  # noqa: E402
from ddstore.dynamic import DynamicGraph, canonical_edges  # noqa: E402

from conftest import on_ranks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
ROOT = os.path.join(HERE, "..")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
@pytest.mark.shared_launch("st_dynamic.py", timeout=240)
def test_dynamic_graph_mpi(shared_launch, nprocs):
    """Every snapshot against brute force on 1-3 ranks, every width.  On 4 ranks (two
    replicas of width 2) dynamic graphs are read in tests/mpi/datasets_checkpoint.py,
    every step compared (8 s of the suite's oversubscribed 4-rank job saved)."""
    assert f"0 failures {on_ranks(nprocs)}" in shared_launch, shared_launch


# ------------------------------------------------------------------ loaders, real files
def test_twitter_tennis_loader():
    doc = json.load(open(os.path.join(DATA, "twitter_tennis_rg17.json")))
    s = st.load_pgt_json(os.path.join(DATA, "twitter_tennis_rg17.json"))
    assert isinstance(s, st.DynamicSeries)
    T = doc["time_periods"]
    assert s.shape == (T, 1000, 3) and s.target_feature == 2 and len(s.edges) == T
    data = s.to_numpy()
    for t in (0, 57, T - 1):
        step = doc[str(t)]
        assert np.array_equal(data[t, :, :2], np.asarray(step["X"], np.float32))
        assert np.array_equal(data[t, :, 2], np.asarray(step["y"], np.float32))
        assert np.array_equal(s.edges[t], np.asarray(step["edges"], np.int64).T)
        assert np.array_equal(s.weights[t], np.asarray(step["weights"], np.float32))
    assert s.edge_index.shape == (2, 0)  # no static graph
    assert s.node_ids[0] == "rolandgarros" and len(s.node_ids) == 1000


def test_static_real_files_unchanged():
    cp = st.load_pgt_json(os.path.join(DATA, "chickenpox.json"))
    doc = json.load(open(os.path.join(DATA, "chickenpox.json")))
    assert cp.shape == (521, 20, 1)
    assert np.array_equal(cp.to_numpy()[:, :, 0], np.asarray(doc["FX"], np.float32))
    assert np.array_equal(cp.edge_index, np.asarray(doc["edges"]).T)
    pm = st.load_pgt_json(os.path.join(DATA, "pedalme_london.json"))
    doc = json.load(open(os.path.join(DATA, "pedalme_london.json")))
    assert pm.shape == (35, 15, 1)
    assert np.array_equal(pm.edge_weight, np.asarray(doc["weights"], np.float32))


# ------------------------------------------------------------------ synthetic layouts
def _write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_windmill_layout(tmp_path):
    rng = np.random.default_rng(0)
    block = rng.random((30, 5)).round(4)
    edges = [[i, j] for i in range(5) for j in range(5)]
    weights = rng.random(25).round(3)
    path = _write(tmp_path, "windmill.json", {"block": block.tolist(), "edges": edges,
                                              "weights": weights.tolist()})
    s = st.load_pgt_json(path)
    assert s.shape == (30, 5, 1) and "block" in s.source
    assert np.array_equal(s.to_numpy()[:, :, 0], block.astype(np.float32))
    assert np.array_equal(s.edge_weight, weights.astype(np.float32))


def test_wikimath_layout(tmp_path):
    rng = np.random.default_rng(1)
    T, N = 12, 6
    y = rng.integers(0, 1000, (T, N))
    edges = [[0, 1], [1, 2], [2, 0], [5, 4]]
    doc = {"edges": edges, "weights": [1, 2, 3, 4], "time_periods": T}
    for t in range(T):
        doc[str(t)] = {"index": t, "y": y[t].tolist()}
    s = st.load_pgt_json(_write(tmp_path, "wikivital_mathematics.json", doc))
    assert type(s) is st.Series and s.shape == (T, N, 1) and s.target_feature == 0
    assert np.array_equal(s.to_numpy()[:, :, 0], y.astype(np.float32))
    assert np.array_equal(s.edge_index, np.array(edges).T)
    assert np.array_equal(s.edge_weight, [1, 2, 3, 4])
    # a time_periods below the steps held reads the first steps, as PGT does, and says so
    doc["time_periods"] = T - 3
    with pytest.warns(UserWarning, match=rf"time_periods={T - 3} reads steps '0' .. "
                                         rf"'{T - 4}'; the file also holds 3 per-step "
                                         rf"objects from '{T - 3}' to '{T - 1}'"):
        s = st.load_pgt_json(_write(tmp_path, "short.json", doc))
    assert np.array_equal(s.to_numpy()[:, :, 0], y[:T - 3].astype(np.float32))


def test_england_covid_edge_mapping_layout(tmp_path):
    rng = np.random.default_rng(2)
    T, N = 7, 5
    y = rng.integers(0, 50, (T, N))
    index, weight = {}, {}
    edges = []
    for t in range(T):
        e = [[int(a), int(b)] for a, b in rng.integers(0, N, (int(rng.integers(0, 6)), 2))]
        edges.append(e)
        index[str(t)] = e
        weight[str(t)] = [float(v) for v in rng.random(len(e)).round(3)]
    doc = {"edge_mapping": {"edge_index": index, "edge_weight": weight}, "y": y.tolist(),
           "time_periods": T}
    s = st.load_pgt_json(_write(tmp_path, "england_covid.json", doc))
    assert isinstance(s, st.DynamicSeries) and s.shape == (T, N, 1)
    assert s.target_feature == 0
    assert np.array_equal(s.to_numpy()[:, :, 0], y.astype(np.float32))
    for t in range(T):
        assert np.array_equal(s.edges[t], np.array(edges[t], np.int64).reshape(-1, 2).T)
        assert np.array_equal(s.weights[t], np.asarray(weight[str(t)], np.float32))
    # edge_mapping steps past time_periods (y as long as it says) are named as unread
    short = dict(doc, y=y[:T - 2].tolist(), time_periods=T - 2)
    with pytest.warns(UserWarning, match=r"also holds 2 steps of edge_mapping.edge_index"):
        s = st.load_pgt_json(_write(tmp_path, "short.json", short))
    assert s.shape == (T - 2, N, 1) and len(s.edges) == T - 2
    # a step whose weights are null: refused (no unit weight is made up for a step, as in
    # the steps layout), naming the step
    weight["4"] = None
    with pytest.raises(DDStoreValueError, match=r"edge_weight has no step '4' \(give "
                                                r"weights on every step or on none\)"):
        st.load_pgt_json(_write(tmp_path, "bad.json", doc))
    weight["4"] = [1.0] * len(edges[4])
    # edge_index / edge_weight that are not an object of steps: named, with the kind found
    for key, value, kind in (("edge_index", None, "NoneType"), ("edge_index", 5, "int"),
                             ("edge_index", "01", "str"), ("edge_weight", 5, "int"),
                             ("edge_weight", ["0", "1"], "list")):
        bad = {"edge_mapping": dict(doc["edge_mapping"], **{key: value}), "y": y.tolist()}
        with pytest.raises(DDStoreValueError, match=rf"edge_mapping.{key} must be an "
                                                    rf"object from each step .*got {kind}"):
            st.load_pgt_json(_write(tmp_path, "bad.json", bad))
    # a step missing from edge_mapping is named
    del index["3"]
    with pytest.raises(DDStoreValueError, match="no step '3'"):
        st.load_pgt_json(_write(tmp_path, "bad.json", doc))


def test_montevideo_nodes_links_layout(tmp_path):
    rng = np.random.default_rng(3)
    T = 9
    stops = [4117, 4118, 5902, 77]
    y = rng.integers(0, 30, (len(stops), T))
    nodes = [{"bus_stop": s, "X": {"y": y[k].tolist(), "lat": [float(k)] * T},
              "y": y[k].tolist()} for k, s in enumerate(stops)]
    links = [{"source": 4117, "target": 4118, "weight": 0.5},
             {"source": 5902, "target": 77, "weight": 1.25},
             {"source": 77, "target": 4117, "weight": 2.0}]
    s = st.load_pgt_json(_write(tmp_path, "montevideo_bus.json",
                                {"nodes": nodes, "links": links}))
    assert s.shape == (T, 4, 3) and s.feature_names == ["lat", "y", "y"]
    assert s.target_feature == 2 and s.node_ids == stops
    data = s.to_numpy()
    assert np.array_equal(data[:, :, 2], y.T.astype(np.float32))
    assert np.array_equal(data[:, :, 0], np.tile(np.arange(4.0), (T, 1)))
    assert np.array_equal(s.edge_index, [[0, 2, 3], [1, 3, 0]])
    assert np.array_equal(s.edge_weight, np.float32([0.5, 1.25, 2.0]))
    links.append({"source": 4117, "target": 999})
    with pytest.raises(DDStoreValueError, match="999"):
        st.load_pgt_json(_write(tmp_path, "bad.json", {"nodes": nodes, "links": links}))
    # a link without a target is named as such (its key was told as a node id)
    links[-1] = {"source": 4117, "weight": 1.0}
    with pytest.raises(DDStoreValueError, match="link 3 has no 'target'"):
        st.load_pgt_json(_write(tmp_path, "bad.json", {"nodes": nodes, "links": links}))


def test_unknown_layout_names_keys(tmp_path):
    with pytest.raises(DDStoreValueError, match=r"unknown layout: keys found \['foo', "
                                                r"'time_periods'\]"):
        st.load_pgt_json(_write(tmp_path, "x.json", {"foo": 1, "time_periods": 3}))
    # per-step dicts without any edges
    with pytest.raises(DDStoreValueError, match="has 'edges'"):
        st.load_pgt_json(_write(tmp_path, "y.json", {"0": {"y": [1, 2]}}))


# ------------------------------------------------------------------ canonical order
def test_canonical_edges_order_and_dedup():
    ei = np.array([[3, 0, 2, 0, 1, 3], [1, 2, 1, 2, 0, 1]])
    w = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    with pytest.raises(DDStoreValueError,
                       match=r"3 -> 1 appears 2 times \(input positions 0 and 5\)"):
        canonical_edges(ei, w, 4)
    for mode, want in (("sum", [5.0, 3.0, 7.0, 6.0]), ("last", [5.0, 3.0, 6.0, 4.0])):
        keys, ww = canonical_edges(ei, w, 4, dedup=mode)
        # sorted by (dst, src): (1->0), (2->1), (3->1), (0->2)
        assert np.array_equal(keys & 3, [1, 2, 3, 0]) and np.array_equal(keys >> 2,
                                                                          [0, 1, 1, 2])
        assert np.array_equal(ww, want)


# ------------------------------------- benchmark (the example runs in test_examples.py)
@pytest.mark.mpi
def test_benchmark_smoke(tmp_path):
    """python -m ddstore.bench.dynamic on a small synthetic graph: JSON written, the
    delta store smaller than full snapshots, every snapshot checked."""
    out = subprocess.run(
        ["timeout", "--kill-after=10", "240", sys.executable, "-m", "ddstore.bench.dynamic",
         "--nodes", "2000", "--edges", "8000", "--steps", "60", "--repeat", "1",
         "--out", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stdout
    res = json.load(open(tmp_path / "dynamic.json"))
    syn = res["synthetic"]
    assert syn["verified_snapshots"] == 60
    assert syn["bytes"]["full_snapshots"] > 5 * syn["bytes"]["deltas_and_checkpoints"]
    assert res["twitter_tennis"]["bytes"]["full_snapshots"] > 0
    # the build's memory: what the rank stores, and its peak above the start
    assert syn["stored_bytes_per_rank"] == [syn["bytes"]["deltas_and_checkpoints"]]
    assert syn["build_peak_rss_above_bytes"][0] >= 0


def test_apply_delta_in_c_against_sets():
    """dds_apply_delta (the C merge behind forward/backward) against Python sets, and a
    corrupt delta refused instead of producing a wrong snapshot."""
    from ddstore import _core
    from ddstore.errors import DDStoreStateError
    rng = np.random.default_rng(5)
    bits = 12
    for trial in range(20):
        keys = np.unique(rng.integers(0, 1 << 24, int(rng.integers(0, 300))))
        w = rng.random(keys.shape[0]).astype(np.float32)
        rm = np.sort(rng.choice(keys, int(rng.integers(0, keys.shape[0] + 1)),
                                replace=False)) if keys.size else keys[:0]
        pool = np.setdiff1d(np.unique(rng.integers(0, 1 << 24, 200)), np.setdiff1d(keys, rm))
        add = np.sort(rng.choice(pool, int(rng.integers(0, min(50, pool.size) + 1)),
                                 replace=False))
        add_w = rng.random(add.shape[0]).astype(np.float32)
        want = dict(zip(keys.tolist(), w.tolist()))
        for k in rm.tolist():
            del want[k]
        want.update(zip(add.tolist(), add_w.tolist()))
        result = np.array(sorted(want), dtype=np.int64)
        chg = np.sort(rng.choice(result, min(10, result.size), replace=False)) \
            if result.size else result
        chg_w = rng.random(chg.shape[0]).astype(np.float32)
        want.update(zip(chg.tolist(), chg_w.tolist()))
        new_k, new_w, ei = _core.apply_delta(keys, w, rm, add, add_w, chg, chg_w, bits)
        np.testing.assert_array_equal(new_k, result)
        np.testing.assert_array_equal(new_w, np.array([want[k] for k in result.tolist()],
                                                      dtype=np.float32))
        np.testing.assert_array_equal(ei[0], result & ((1 << bits) - 1))
        np.testing.assert_array_equal(ei[1], result >> bits)
        k2, w2, _ = _core.apply_delta(keys, None, rm, add, None, None, None, bits)
        assert w2 is None and np.array_equal(k2, result)
    keys = np.array([1, 5, 9], dtype=np.int64)
    for rm, add in (([4], []), ([], [5]), ([9, 10], [])):
        with pytest.raises(DDStoreStateError, match="corrupt"):
            _core.apply_delta(keys, None, np.array(rm, dtype=np.int64),
                              np.array(add, dtype=np.int64), None, None, None, bits)


# ------------------------------------------------------------------ bad input
def _store():
    import ddstore
    from mpi4py import MPI
    return ddstore.DDStore(MPI.COMM_SELF, width=1)


def test_nonfinite_weights_name_the_edge():
    """The same check as static weights (ddstore.sources.series): the edge's
    index and its source and target."""
    store = _store()
    try:
        edges = [np.array([[0, 1, 2], [1, 2, 0]]), np.array([[0, 3], [3, 1]])]
        with pytest.raises(DDStoreValueError, match=r"DynamicGraph 'g': weights\[1\]: edge 1 \(3 -> 1\) has "
                                                    r"weight nan; weights must be finite "
                                                    r"\(1 of 2 edges are NaN or inf\)"):
            DynamicGraph(store, "g", edges, [np.ones(3), np.array([1.0, np.nan])])
        # finite as given, beyond float32 as stored: the value and the range (was "inf")
        beyond = r"beyond float32 as weights are stored \(largest finite 3\.403e\+38\)"
        with pytest.raises(DDStoreValueError, match=r"DynamicGraph 'g': weights\[1\]: edge 0 \(0 -> 3\) has "
                                                    r"weight 1e\+39, " + beyond):
            DynamicGraph(store, "g", edges, [np.ones(3), np.array([1e39, 1.0])])
        with pytest.raises(DDStoreValueError, match=r"DynamicGraph 'g': weights\[0\] summed by dedup='sum': "
                                                    r"edge 0 \(0 -> 1\) has weight 6e\+38, "
                                                    + beyond):
            DynamicGraph(store, "g", [np.array([[0, 0], [1, 1]])], [np.full(2, 3e38)],
                         dedup="sum")
        with pytest.raises(DDStoreValueError, match=r"edge_weight: edge 1 \(1 -> 2\) has "
                                                    r"weight 1e\+39, beyond float32"):
            st.from_arrays(np.zeros((4, 3, 1)), edge_index=edges[0],
                           edge_weight=[1.0, 1e39, 2.0])
        assert store.variables() == []
    finally:
        store.free()


def test_bfloat16_weights_are_their_float32_values():
    """Weights given as bfloat16 tensors are stored as the float32 values they are (as
    the package reads tensors elsewhere): every snapshot equals the float32 graph's."""
    store = _store()
    try:
        rng = np.random.default_rng(3)
        edges = [torch.tensor([[0, 1, 2], [1, 2, 0]])] * 3
        w = [torch.from_numpy(rng.standard_normal(3)).to(torch.bfloat16) for _ in edges]
        a = DynamicGraph(store, "a", edges, w)
        b = DynamicGraph(store, "b", edges, [x.float() for x in w])
        for t in range(3):
            (ea, wa), (eb, wb) = a[t], b[t]
            assert torch.equal(ea, eb) and torch.equal(wa, wb), t
    finally:
        store.free()


def test_uint64_node_ids_reported_as_given():
    store = _store()
    try:
        big = 2 ** 63 + 5
        edges = [np.array([[0, big], [1, 2]], dtype=np.uint64)]
        with pytest.raises(DDStoreValueError, match=rf"DynamicGraph 'g': edges\[0\] holds node id {big} "
                                                    rf"\(row 0, edge 1\), out of range "
                                                    rf"\[0, 5\)"):
            DynamicGraph(store, "g", edges, num_nodes=5)
        with pytest.raises(DDStoreValueError, match=rf"DynamicGraph 'g': edges\[0\] holds node id {big} "
                                                    rf"\(row 0, edge 1\), out of range "
                                                    rf"\[0, {2 ** 31}\)"):
            DynamicGraph(store, "g", edges)
        assert store.variables() == []
    finally:
        store.free()


def test_step_errors_name_the_graph():
    """Every refusal of a step's edges or weights names the graph as well as the step
    (shape, dtype, an unreadable step, a lazy sequence shorter than it says, a torch
    dtype numpy lacks, a weight count, a duplicate edge)."""
    store = _store()

    class Unreadable:
        def __array__(self, *args, **kwargs):
            raise OSError("disk gone")

    class Short:  # a lazy sequence whose length says more steps than it holds
        def __len__(self):
            return 2

        def __getitem__(self, t):
            return [np.ones(2)][t]

    good = np.array([[0, 1], [1, 2]])
    cases = [
        (dict(edges=[good, np.zeros((3, 2), np.int64)]),
         r"edges\[1\] must have shape \[2, E_t\]"),
        (dict(edges=[good.astype(np.float32)]), r"edges\[0\] must hold integer node ids"),
        (dict(edges=[good, Unreadable()]), r"edges\[1\] is not an array: OSError: disk gone"),
        (dict(edges=[good, good], weights=Short()),
         r"weights\[1\] is not an array: IndexError"),
        (dict(edges=[good], weights=[torch.ones(2).to(torch.float8_e4m3fn)]),
         r"weights\[0\]: torch dtype torch.float8_e4m3fn has no numpy equivalent.*"
         r"allowed: bool, integer or floating point"),
        (dict(edges=[good], weights=[np.ones(3)]),
         r"weights\[0\] has 3 entries but edges\[0\] has 2 edges"),
        (dict(edges=[good], weights=[np.ones((2, 1))]),
         r"weights\[0\] must be a 1-D numeric array"),
        (dict(edges=[np.array([[0, 0], [1, 1]])]), r"edges\[0\]: edge 0 -> 1 appears 2 times"),
    ]
    try:
        for kwargs, msg in cases:
            with pytest.raises(DDStoreValueError, match=r"^rank 0: DynamicGraph 'g2': " + msg):
                DynamicGraph(store, "g2", **kwargs)
            assert store.variables() == []
    finally:
        store.free()


def test_show_progress_bars_say_whose_steps(capsys):
    """``show_progress=True``: two bars on rank 0 over its own steps, labelled so (at
    width 2 the bars' 60 of 120 steps looked like a graph stored in part)."""
    store = _store()
    try:
        edges = [np.array([[0, 1], [1, t % 3]]) for t in range(3)]
        DynamicGraph(store, "g", edges, show_progress=True)
        err = capsys.readouterr().err
        for label in ("deltas of 'g' (rank 0)", "storing 'g' (rank 0)"):
            assert re.search(re.escape(label) + r": 100%.* 3/3 ", err), err
    finally:
        store.free()


def test_pgt_bad_node_ids_and_ragged_y_name_the_file(tmp_path):
    ids = {"a": 0, "b": "x", "c": 2}
    path = _write(tmp_path, "chick.json", {"FX": [[1.0, 2.0, 3.0]] * 4,
                                           "edges": [[0, 1]], "node_ids": ids})
    msg = (r"load_pgt_json: .*chick.json: 'node_ids'\['b'\] = 'x' is not an integer node "
           r"index in \[0, 3\)")
    with pytest.raises(DDStoreValueError, match=msg):
        st.load_pgt_json(path)
    ids["b"] = 7
    path = _write(tmp_path, "chick.json", {"FX": [[1.0, 2.0, 3.0]] * 4,
                                           "edges": [[0, 1]], "node_ids": ids})
    with pytest.raises(DDStoreValueError, match=r"'node_ids'\['b'\] = 7 is not an integer"):
        st.load_pgt_json(path)
    doc = {"0": {"y": [1, 2, 3]}, "1": {"y": [4, 5, 6]}, "edges": [[0, 1]],
           "node_ids": {"a": 0, "b": 1.5, "c": 2}}
    with pytest.raises(DDStoreValueError, match=r"wiki.json: 'node_ids'\['b'\] = 1.5 is "
                                                r"not an integer node index in \[0, 3\)"):
        st.load_pgt_json(_write(tmp_path, "wiki.json", doc))
    doc = {"edge_mapping": {"edge_index": {"0": [[0, 1]], "1": [[0, 1]], "2": [[1, 0]]}},
           "y": [[1, 2], [3, 4], [5]], "time_periods": 3}
    with pytest.raises(DDStoreValueError, match=r"load_pgt_json: .*covid.json: 'y' must be "
                                                r"\[T, nodes\] numbers: row 2 has 1 "
                                                r"values, row 0 has 2"):
        st.load_pgt_json(_write(tmp_path, "covid.json", doc))
    doc["y"] = [[1, 2], [3, "z"], [5, 6]]
    with pytest.raises(DDStoreValueError, match=r"covid.json: 'y' must be \[T, nodes\] "
                                                r"numbers: "):
        st.load_pgt_json(_write(tmp_path, "covid.json", doc))
    # a ragged matrix of the static layouts (FX, X, block): the row named, as for 'y'
    # (was numpy's "inhomogeneous shape after 1 dimensions")
    ragged = _write(tmp_path, "chick.json", {"FX": [[1.0, 2.0]] * 3 + [[1.0]],
                                             "edges": [[0, 1]]})
    with pytest.raises(DDStoreValueError, match=r"chick.json: 'FX' is not a numeric array: "
                                                r"row 3 has 1 values, row 0 has 2$"):
        st.load_pgt_json(ragged)
    # a node id beyond the signals' nodes in a step's own graph: the file and the step
    # named (the graph's constructor named edges[1] of no file)
    doc["y"] = [[1, 2], [3, 4], [5, 6]]
    doc["edge_mapping"]["edge_index"]["1"] = [[0, 1], [1, 2]]
    with pytest.raises(DDStoreValueError, match=r"load_pgt_json: .*covid.json: edge_mapping"
                                                r".edge_index\['1'\]: pair 1 is \[1, 2\], "
                                                r"a node id out of range \[0, 2\)"):
        st.load_pgt_json(_write(tmp_path, "covid.json", doc))
    step = {"X": [[1.0], [2.0]], "y": [0.0, 1.0], "edges": [[0, 1]]}
    doc = {"time_periods": 2, "0": step, "1": dict(step, edges=[[-1, 0]])}
    with pytest.raises(DDStoreValueError, match=r"tennis.json: step '1' 'edges': pair 0 is "
                                                r"\[-1, 0\], a node id out of range"):
        st.load_pgt_json(_write(tmp_path, "tennis.json", doc))


def test_pgt_weights_on_some_steps_only_and_null_edges_refused(tmp_path):
    """Per-step weights are on every step or on none (a step without them was given
    unit weights, silently), and null edges are refused (loaded as no edges before)."""
    step = {"X": [[1.0], [2.0]], "y": [0.0, 1.0], "edges": [[0, 1]], "weights": [2.0]}
    doc = {"time_periods": 3, "0": dict(step), "1": dict(step), "2": dict(step)}
    for change in ({"weights": None}, {}):
        doc["1"] = {k: v for k, v in step.items() if k != "weights"}
        doc["1"].update(change)
        with pytest.raises(DDStoreValueError, match="tennis.json: step '1' has no "
                                                    "'weights' \\(step '0' has\\)"):
            st.load_pgt_json(_write(tmp_path, "tennis.json", doc))
    for t in "012":  # on none: unweighted
        doc[t] = {k: v for k, v in step.items() if k != "weights"}
    assert st.load_pgt_json(_write(tmp_path, "tennis.json", doc)).weights is None
    doc["2"]["edges"] = None
    with pytest.raises(DDStoreValueError, match="step '2' 'edges' is null"):
        st.load_pgt_json(_write(tmp_path, "tennis.json", doc))
    with pytest.raises(DDStoreValueError, match="'edges' is null \\(a graph with no "
                                                "edges is \\[\\]\\)"):
        st.load_pgt_json(_write(tmp_path, "chick.json", {"FX": [[1.0, 2.0]] * 4,
                                                          "edges": None}))


def test_pgt_strings_and_booleans_are_not_numbers(tmp_path):
    """A string ("12") or a boolean (true) where a number belongs is refused naming the
    array (numpy converted both: "12" -> 12.0, true -> 1); null is a missing value."""
    base = {"FX": [[1.0, 2.0, 3.0]] * 4, "edges": [[0, 1], [1, 2]], "weights": [1.0, 2.0]}
    cases = [("FX", [[1.0, "2", 3.0]] + [[1.0, 2.0, 3.0]] * 3, r"'FX' is not a numeric "
              r"array: it holds a string"),
             ("FX", [[1.0, True, 3.0]] + [[1.0, 2.0, 3.0]] * 3, r"'FX' is not a numeric "
              r"array: it holds a boolean \(true/false\)"),
             ("edges", [[0, True], [1, 2]], r"'edges' is not a list of \[source, target\] "
              r"integer pairs: it holds a boolean"),
             ("edges", [["0", 1], [1, 2]], r"'edges' is not .* it holds a string"),
             ("weights", [1.0, "2"], r"'weights' is not numeric: it holds a string")]
    for key, value, msg in cases:
        with pytest.raises(DDStoreValueError, match=r"load_pgt_json: .*chick.json: " + msg):
            st.load_pgt_json(_write(tmp_path, "chick.json", {**base, key: value}))
    step = {"X": [[1.0], [2.0]], "y": [0.0, False], "edges": [[0, 1]]}
    with pytest.raises(DDStoreValueError, match=r"step '0' 'y' is not numeric: it holds a "
                                                r"boolean"):
        st.load_pgt_json(_write(tmp_path, "tennis.json", {"0": step, "1": step}))
    s = st.load_pgt_json(_write(tmp_path, "chick.json",
                                {**base, "FX": [[1.0, None, 3.0]] * 4}))
    assert np.isnan(s.read(0, 4)[:, 1]).all() and (s.read(0, 4)[:, 0] == 1.0).all()


def test_taken_name_is_named_like_every_layer():
    """A DynamicGraph whose variables exist names them as every layer does
    (_checks.check_free_names); a plain variable too."""
    store = _store()
    try:
        store.add("g/delta", np.zeros((1, 1)))
        with pytest.raises(DDStoreValueError, match=r"DynamicGraph 'g': the store already "
                                                    r"holds variables \['g/delta'\]; "
                                                    r"remove them or pick another name"):
            DynamicGraph(store, "g", [np.array([[0], [1]])])
        with pytest.raises(DDStoreValueError, match=r"the store already holds variable "
                                                    r"'g/delta'; remove it or pick another"):
            store.add("g/delta", np.zeros((1, 1)))
        assert store.variables() == ["g/delta"]
    finally:
        store.free()


def _same_batch(a, b, what):
    """(x, y, graphs) equal: dtype, shape and bytes of every tensor, None where None."""
    assert len(a) == len(b) == 3, what
    for i in (0, 1):
        assert a[i].dtype == b[i].dtype and a[i].shape == b[i].shape, what
        assert a[i].contiguous().numpy().tobytes() == b[i].contiguous().numpy().tobytes(), \
            f"{what}: x/y {i}"
    assert len(a[2]) == len(b[2]), what
    for j, ((ei, ew), (ej, wj)) in enumerate(zip(a[2], b[2])):
        assert torch.equal(ei, ej), f"{what}: edge_index of step {j}"
        assert (ew is None) == (wj is None) and (ew is None or torch.equal(ew, wj)), \
            f"{what}: edge_weight of step {j}"


def test_window_loaders_every_path():
    """DynamicWindowDataset through every loader path gives the plain loader's batches:
    the device pipeline (device="cpu", prefetch 0 and 2; it read windows with
    _fetch(host=, into=), which the subclass refused with a TypeError), one window with
    time features or the series resident on the device (ds[i] unpacked the subclass's
    three items into two: ValueError), and the resident loader (graphs of tensor starts)."""
    from ddstore.dynamic import DynamicWindowDataset
    store = _store()
    try:
        T, n = 60, 4
        raw = np.random.default_rng(0).standard_normal((T, n, 2)).astype(np.float32)
        rng = np.random.default_rng(1)
        edges = [rng.integers(0, n, (2, 5)) for _ in range(T)]
        weighted = DynamicWindowDataset(store, "dyn_w", raw, 3, edges=edges,
                                        weights=[np.ones(5) for _ in range(T)], dedup="sum")
        _, _, wg = weighted[0]
        assert all(ei.shape == (2, 0) and ew.shape == (0,) and ew.dtype == wg[0][1].dtype
                   for ei, ew in weighted.get_batch([])[2])
        ts = np.datetime64("2024-01-01") + np.arange(T) * np.timedelta64(1, "h")
        base = DynamicWindowDataset(store, "dyn", raw, 3, edges=edges, dedup="sum",
                                    graph_steps="xy")
        train = base.splits()[0]
        for kw in ({"seed": 3}, {"sampler": "batch", "seed": 1}):
            want = list(train.loader(4, **kw))
            assert len(want) > 1
            for k in (0, 2):
                piped = train.loader(4, device="cpu", prefetch=k, **kw)
                got = list(piped)
                assert len(got) == len(want) == len(piped)
                for i, (a, b) in enumerate(zip(got, want)):
                    _same_batch(a, b, f"{kw} prefetch={k} batch {i}")
        for extra in ({"timestamps": ts, "time_features": ("tod",)},
                      {"resident": "device"}):
            name = f"dyn_{next(iter(extra))}"
            ds = DynamicWindowDataset(store, name, raw, 3, edges=edges, dedup="sum",
                                      **extra)
            for i in (0, 5, len(ds) - 1, -1):
                x, y, g = ds[i]
                bx, by, bg = ds.get_batch([i])
                _same_batch((x[None], y[None], g), (bx, by, bg), f"{name}[{i}]")
            # __getitems__: the samples ds[i] (torch's contract), each window's graphs
            # cut out of the block-diagonal batch
            idx = [5, 0, len(ds) - 1, 5]
            items = ds.__getitems__(idx)
            assert len(items) == len(idx)
            for b, i in enumerate(idx):
                _same_batch(items[b], ds[i], f"{name}.__getitems__ sample {b}")
            _same_batch(items[-1], ds[5], f"{name}.__getitems__ sample -1")
            for b, sample in zip((1, 2), items[1:3]):  # (runs found once, for all)
                _same_batch(sample, ds[idx[b]], f"{name}.__getitems__ slice {b}")
            # a list of samples (a ConcatDataset has no __getitems__): batch_collate
            # batches their graphs block-diagonally, as get_batch (torch's default
            # collate stacked them unshifted, or failed on unequal edge counts / None)
            _same_batch(st.batch_collate([ds[i] for i in idx]), ds.get_batch(idx),
                        f"{name} batch_collate of samples")
            both = torch.utils.data.ConcatDataset([ds, weighted])
            with pytest.raises(DDStoreValueError, match="step 0: weighted and "
                                                       "unweighted graphs"):
                st.batch_collate([both[0], both[len(ds)]])
            # an empty batch: no windows, and per step a graph with no edges (a bare
            # torch.cat error before)
            ex, ey, eg = ds.get_batch([])
            assert ex.shape == (0,) + tuple(x.shape) and ey.shape == (0,) + tuple(y.shape)
            assert len(eg) == len(g) and all(
                ei.shape == (2, 0) and ei.dtype == torch.int64 and ew is None
                for ei, ew in eg)  # (an unweighted graph)
            if "resident" in extra:
                tr = ds.splits()[0]
                for kw in ({"shuffle": False}, {"sampler": "batch", "shuffle": False}):
                    got = list(tr.loader(5, **kw))
                    starts = [list(range(a, min(a + 5, len(tr))))
                              for a in range(0, len(tr), 5)]
                    assert len(got) == len(starts)
                    for b, idx in zip(got, starts):
                        _same_batch(b, tr.get_batch(idx), f"{name} loader {kw}")
    finally:
        store.free()


def test_snapshot_cache_shared_by_threads():
    """Threads read one graph at once (a loader's read-ahead thread and the caller's
    loop): the snapshot cache is shared by them (it raised "OrderedDict mutated during
    iteration" when threads switched often), and every snapshot is the one read alone."""
    import sys
    import threading
    from ddstore.dynamic import DynamicGraph
    store = _store()
    interval = sys.getswitchinterval()
    try:
        T, n = 300, 6
        edges = [np.random.default_rng(t).integers(0, n, (2, 4)) for t in range(T)]
        g = DynamicGraph(store, "g", edges, dedup="sum", checkpoint_every=50)
        want = [g.snapshot(t)[0].numpy().copy() for t in range(T)]
        g.clear_cache()
        errors = []

        def reader(seed):
            rng = np.random.default_rng(seed)
            try:
                for t in rng.integers(0, T, 1500).tolist():
                    if not np.array_equal(g.snapshot(t)[0].numpy(), want[t]):
                        errors.append(f"thread {seed}: step {t} differs")
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(f"thread {seed}: {type(exc).__name__}: {exc}")

        sys.setswitchinterval(1e-6)  # threads switch often: the race shows at once
        threads = [threading.Thread(target=reader, args=(s,)) for s in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        sys.setswitchinterval(interval)
        assert errors == [], errors[:5]
    finally:
        sys.setswitchinterval(interval)
        store.free()


def test_snapshots_of_checkpoints_read_at_once_equal_each_alone(store):
    """DynamicGraph.snapshots of a graph whose every step is a checkpoint (a window
    batch of Twitter tennis): the steps not kept are read in one store read (62 reads
    of about 10 us each were half a batch), and every snapshot (edges, weights, in
    request order, repeats too) is the one read alone; the cache keeps at most
    cache_size of them, the most recent, each owning its arrays."""
    rng = np.random.default_rng(3)
    edges = [rng.integers(0, 9, (2, int(rng.integers(0, 12)))) for _ in range(40)]
    weights = [rng.random(e.shape[1]).astype(np.float32) for e in edges]
    g = DynamicGraph(store, "g", edges, weights, dedup="sum", checkpoint_every=1,
                     cache_size=4)
    want = []
    for t in range(40):
        g.clear_cache()
        ei, w = g.snapshot(t)
        want.append((ei.numpy().copy(), w.numpy().copy()))
    g.clear_cache()
    calls = []
    real = store.get_records_packed
    store.get_records_packed = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        g.snapshot(7)  # one kept: read from the cache, the others at once
        steps = [30, 7, 2, 2, 39, 0, 11, 30, 25, 8, 9]
        got = g.snapshots(steps)
        assert len(calls) == 2, calls
        for t, (ei, w) in zip(steps, got):
            assert ei.dtype == torch.int64 and w.dtype == torch.float32
            assert np.array_equal(ei.numpy(), want[t][0]), t
            assert np.array_equal(w.numpy(), want[t][1]), t
        assert len(g._cache) == 4 and all(g._cache.holds(t) for t in (11, 25, 30, 39))
        # each kept snapshot owns its own step's arrays (views of the one read kept the
        # whole read alive: cache_size bounded the snapshots, not their memory)
        assert all(s.keys.base is None and s.w.base is None for s in g._cache.snaps())
    finally:
        del store.get_records_packed
    from ddstore import DDStoreIndexError, DDStoreValueError
    for bad, cls, said in (([3, 40], DDStoreIndexError, r"steps\[1\]=40 out of range "
                                                         r"\[0, 40\)"),
                           (np.array([0, 1, -1]), DDStoreIndexError, r"steps\[2\]=-1 out"),
                           ([0, 1.5], DDStoreValueError, r"steps\[1\] must be an integer")):
        with pytest.raises(cls, match=r"DynamicGraph 'g': snapshots: " + said):
            g.snapshots(bad)
    g.free()


def test_a_samples_graphs_are_its_own(store):
    """A DynamicWindowDataset sample's graph tensors are the caller's (as PyTorch
    Geometric Temporal's fresh tensors per access): an in-place edit of one (a weight
    normalisation) changes no later read; they were the graph's cached snapshots, so the
    edit showed in every read of that step until the cache dropped it."""
    from ddstore.dynamic import DynamicWindowDataset
    T, n = 60, 4
    series = np.arange(T * n, dtype=np.float32).reshape(T, n, 1)
    edges = [np.array([[0, 1, 2], [1, 2, 3]]) for _ in range(T)]
    ds = DynamicWindowDataset(store, "own", series, horizon=2, standardize=False,
                              edges=edges, weights=[np.ones(3, np.float32)] * T)
    for sample in (ds[0], ds.get_batch([0]), next(iter(ds.loader(1, shuffle=False)))):
        ei, ew = sample[2][0]
        ei.add_(1)
        ew.mul_(5)
        assert ds[0][2][0][1].tolist() == [1.0] * 3
        assert ds.get_batch([0, 1])[2][0][0].tolist() == [[0, 1, 2, 4, 5, 6],
                                                         [1, 2, 3, 5, 6, 7]]
    ds.free()


def test_open_of_another_kind_names_the_kind(store):
    """``WindowDataset.open`` on a DynamicWindowDataset's name says what it is and how to
    reopen it (it said there was none: "known: []"); the dynamic one's own open works."""
    from ddstore.dynamic import DynamicWindowDataset
    from ddstore.spatiotemporal import WindowDataset
    series = np.arange(60 * 4, dtype=np.float32).reshape(60, 4, 1)
    ds = DynamicWindowDataset(store, "kinds", series, horizon=2,
                              edges=[np.array([[0, 1], [1, 2]])] * 60)
    with pytest.raises(DDStoreValueError, match=r"no WindowDataset 'kinds' .* known: \[\]; "
                                                r"'kinds' is a DynamicWindowDataset: reopen "
                                                r"it with DynamicWindowDataset.open\(store, "
                                                r"'kinds'\)"):
        WindowDataset.open(store, "kinds")
    from ddstore.pyg import FeatureStore  # an annotation "<name>#<kind>": its name
    from ddstore.temporal import NodeMemory
    FeatureStore(store, "fsk")
    with pytest.raises(DDStoreValueError, match=r"is a pyg.FeatureStore: reopen it with "
                                                r"FeatureStore.open\(store, 'fsk'\)"):
        NodeMemory.open(store, "fsk#pyg.FeatureStore")
    again = DynamicWindowDataset.open(store, "kinds")
    assert torch.equal(again[3][0], ds[3][0])
    ds.free()


def test_a_freed_graph_never_reads_another_built_under_its_name(store):
    """A freed DynamicGraph (and a second object opened on it, its cache warm) refuses
    every read, even after another graph is built under the same name (it used to read
    the new graph's records with its own layout: edges that exist in neither graph),
    and reports no bytes of the other's."""
    from ddstore import DDStoreStateError
    a = [np.array([[0, 1], [1, 2]]), np.array([[0], [2]]), np.array([[1], [0]]),
         np.array([[2, 2], [0, 1]])]
    g = DynamicGraph(store, "g", a, checkpoint_every=2)
    g2 = DynamicGraph.open(store, "g")
    want = [g.snapshot(t)[0].tolist() for t in range(4)]
    assert [g2.snapshot(t)[0].tolist() for t in range(4)] == want  # g2's cache warm
    g.free()
    new = DynamicGraph(store, "g", [np.array([[3], [4]])] * 4, checkpoint_every=1)
    for old in (g, g2):
        for read in (lambda: old.snapshot(0), lambda: old.snapshot(3),
                     lambda: old.snapshots([1, 2]), lambda: list(old.forward()),
                     lambda: list(old.backward())):
            with pytest.raises(DDStoreStateError, match="DynamicGraph 'g' is no longer in the store"):
                read()
        assert old.held() == [] and old.nbytes() < new.nbytes()
    assert new.snapshot(2)[0].tolist() == [[3], [4]]
    new.free()


def test_window_dataset_graph_must_be_this_stores_and_held(store, tmp_path):
    """``graph=`` is kept by name in a checkpoint: another store's graph (a graph of
    that name in this store came back after a restore, silently another graph) and a
    freed one are refused when the dataset is built, as are ``weights=`` without
    ``edges=`` (silently replaced by the series' own weights) and with ``graph=``;
    nothing is left in the store."""
    from ddstore import DDStore, DDStoreStateError
    from ddstore.dynamic import DynamicWindowDataset
    one = lambda s, d: np.array([[s], [d]], dtype=np.int64)  # noqa: E731
    X = np.arange(12 * 3, dtype=np.float32).reshape(12, 3, 1)
    other = DDStore(store.comm)
    try:
        theirs = DynamicGraph(other, "g", [one(0, 1)] * 12, num_nodes=3)
        mine = DynamicGraph(store, "g", [one(2, 2)] * 12, num_nodes=3)
        before = store.variables()
        with pytest.raises(DDStoreValueError, match=r"graph 'g' belongs to another store"):
            DynamicWindowDataset(store, "d", X, 2, graph=theirs, overlap=True)
        freed = DynamicGraph(store, "f", [one(1, 0)] * 12, num_nodes=3)
        freed.free()
        with pytest.raises(DDStoreStateError, match=r"DynamicGraph 'f' is no longer in"):
            DynamicWindowDataset(store, "d", X, 2, graph=freed, overlap=True)
        with pytest.raises(DDStoreValueError, match=r"weights= are the weights of edges=, "
                                                    r"which is not given"):
            DynamicWindowDataset(store, "d", X, 2, weights=[np.ones(1)] * 12, overlap=True)
        with pytest.raises(DDStoreValueError, match=r"give graph= or edges= \(and "
                                                    r"weights=\), not both"):
            DynamicWindowDataset(store, "d", X, 2, graph=mine, weights=[np.ones(1)] * 12,
                                 overlap=True)
        assert store.variables() == before
        ds = DynamicWindowDataset(store, "d", X, 2, graph=mine, overlap=True)
        store.save(str(tmp_path / "ck"))
        back = DDStore.restore(str(tmp_path / "ck"), store.comm)
        try:
            again = DynamicWindowDataset.open(back, "d")
            assert again[0][2][0][0].tolist() == ds[0][2][0][0].tolist() == [[2], [2]]
        finally:
            back.free()
        # its graph freed before a save: the dataset is saved, and opening it says why
        # it cannot be (its graph named)
        mine.free()
        store.save(str(tmp_path / "ck2"))
        back = DDStore.restore(str(tmp_path / "ck2"), store.comm)
        try:
            with pytest.raises(DDStoreValueError, match=r"DynamicWindowDataset 'd': its "
                                                        r"graph 'g' cannot be opened \(freed "
                                                        r"before the save\?\): no "
                                                        r"DynamicGraph 'g' in this store"):
                DynamicWindowDataset.open(back, "d")
        finally:
            back.free()
        # another graph built under its name before the save: refused by open (the
        # probe of the thirty-third session: the dataset read the other graph, with ids
        # beyond its own nodes when that one had more)
        successor = DynamicGraph(store, "g", [one(1, 2)] * 12, num_nodes=3)  # as many
        # steps and nodes
        store.save(str(tmp_path / "ck3"))
        back = DDStore.restore(str(tmp_path / "ck3"), store.comm)
        try:
            assert DynamicGraph.open(back, "g").snapshot(0)[0].tolist() == [[1], [2]]
            with pytest.raises(DDStoreValueError, match=r"DynamicWindowDataset 'd': the "
                                                        r"store's graph 'g' is not the one "
                                                        r"the dataset was built over"):
                DynamicWindowDataset.open(back, "d")
        finally:
            back.free()
        # a graph saved by a version without build ids (its annotation without one): it
        # is given one made from what was saved, so a dataset built over it still tells
        # a successor apart (the review of the thirty-third session)
        store.annotation("g").meta.pop("build_id")
        old = DynamicGraph.open(store, "g")
        assert old.build_id.startswith("saved-") and old.build_id == \
            DynamicGraph.open(store, "g").build_id != successor.build_id
        DynamicWindowDataset(store, "d2", X, 2, graph=old, overlap=True)
        old.free()
        DynamicGraph(store, "g", [one(0, 0)] * 12, num_nodes=3)
        with pytest.raises(DDStoreValueError, match=r"'d2': the store's graph 'g' is not"):
            DynamicWindowDataset.open(store, "d2")
    finally:
        other.free()
