"""ddstore.temporal: the MPI program tests/mpi/temporal_check.py on 1-4 ranks (every
width, both transports, against brute-force references), the synthetic stream, and
a smoke run of the benchmark (the TGAT example runs in test_examples.py); JODIE files and
PyG's TemporalData through tests/mpi/temporal_formats_check.py on 1-3 ranks (against PyG's
own JODIEDataset processing and train_val_test_split) and bad input on one rank."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import mpiexec_path, on_ranks

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_temporal_all_placements(mpirun, nprocs, tmp_path):
    out = mpirun("temporal_check.py", nprocs, str(tmp_path), timeout=180)
    assert f"0 failures {on_ranks(nprocs)}" in out, out


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_temporal_formats(mpirun, nprocs):
    """from_jodie / from_pyg / to_pyg against PyG's own JODIEDataset processing and
    train_val_test_split, every value; bad input on every rank (temporal_formats_check)."""
    out = mpirun("temporal_formats_check.py", nprocs, timeout=240)
    assert f"0 failures {on_ranks(nprocs)}" in out, out


def test_synthetic_stream():
    from ddstore import DDStoreValueError
    from ddstore.temporal import synthetic_stream
    a = synthetic_stream(500, 20_000, seed=3)
    b = synthetic_stream(500, 20_000, seed=3)
    c = synthetic_stream(500, 20_000, seed=4)
    for key in ("src", "dst", "t", "edge_feat", "split"):
        assert np.array_equal(getattr(a, key), getattr(b, key)), key
    assert not np.array_equal(a.dst, c.dst)
    assert a.src.dtype == np.int64 and a.t.dtype == np.float64
    assert a.edge_feat.shape == (20_000, 8) and a.edge_feat.dtype == np.float32
    assert np.all(np.diff(a.t) > 0)
    assert a.src.min() >= 0 and max(a.src.max(), a.dst.max()) < 500
    frac = np.bincount(a.split, minlength=3) / 20_000
    assert abs(frac[0] - 0.7) < 0.02 and abs(frac[1] - 0.15) < 0.02
    assert np.all(np.diff(a.split.astype(int)) >= 0)  # train, then val, then test in time
    deg = np.bincount(np.concatenate([a.src, a.dst]), minlength=500)
    assert deg.max() > 20 * np.median(deg)  # power-law activity
    same = (a.community[a.src] == a.community[a.dst]).mean()
    assert same > 0.7  # community structure (p_within 0.8 plus repeats)
    with pytest.raises(DDStoreValueError, match="num_nodes"):
        synthetic_stream(1, 10)


@pytest.mark.mpi
def test_benchmark_smoke(tmp_path):
    """mpiexec -n 2 python -m ddstore.bench.temporal on a small stream: widths 1 and 2,
    transports auto and rma, JSON written."""
    cmd = ["timeout", "--kill-after=10", "180", mpiexec_path(), "-n", "2", sys.executable,
           "-m", "ddstore.bench.temporal", "--num-nodes", "300", "--num-edges", "20000",
           "--batch-size", "100", "--batches", "12", "--out", str(tmp_path), "--no-plot"]
    out = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stdout
    res = json.load(open(tmp_path / "temporal_n2.json"))
    combos = {(r["width"], r["transport"], r["strategy"], tuple(r["fanouts"]))
              for r in res["results"]}
    assert len(combos) == 9, combos
    for r in res["results"]:
        assert r["sampled_edges"] > 0 and r["edges_per_s_per_rank"] > 0
        if r["width"] == 2 and r["transport"] == "rma":
            assert r["shm_peers"] == 0
    by_w = {r["width"]: r["tcsr_bytes_per_rank"] for r in res["results"]}
    assert max(by_w[2]) < max(by_w[1])  # width 2 halves (about) the T-CSR per rank


# ------------------------------------------------------------------ bad input (1 rank)
@pytest.fixture
def store():
    import ddstore
    from mpi4py import MPI
    s = ddstore.DDStore(MPI.COMM_SELF, width=1)
    yield s
    s.free()


def test_absurd_node_count_is_a_ddstore_error(store):
    """A node id of 10**12 (or num_nodes=10**12) asks for a replicated indptr of 8 TB:
    a DDStoreMemoryError saying what was asked and what fits, nothing left in the store."""
    from ddstore import DDStoreMemoryError
    from ddstore.temporal import TemporalGraph
    big = 10 ** 12
    with pytest.raises(DDStoreMemoryError,
                       match=rf"graph 'g': num_nodes={big + 1} \(the largest node id \+ 1\)"
                             rf" needs 24 TB per rank .*; at most \d+ nodes fit"):
        TemporalGraph.from_arrays(store, "g", [0, big], [1, 2], [0.0, 1.0])
    with pytest.raises(DDStoreMemoryError, match=rf"graph 'g': num_nodes={big} needs "
                                                 rf"24 TB per rank"):
        TemporalGraph.from_arrays(store, "g", [0, 1], [1, 2], [0.0, 1.0], num_nodes=big)
    assert store.variables() == []
    g = TemporalGraph.from_arrays(store, "g", [0, 1], [1, 2], [0.0, 1.0])
    assert g.num_nodes == 3


def test_uint64_node_ids_reported_as_given(store):
    from ddstore import DDStoreIndexError
    from ddstore.temporal import TemporalGraph
    big = 2 ** 63 + 5
    with pytest.raises(DDStoreIndexError, match=rf"graph 'g': dst\[1\] = {big} out of "
                                                rf"range \[0, num_nodes\)"):
        TemporalGraph.from_arrays(store, "g", np.array([0, 1], np.uint64),
                                  np.array([1, big], np.uint64), [0.0, 1.0])
    assert store.variables() == []


@pytest.mark.parametrize("strategy", ["recent", "uniform"])
def test_huge_fanouts_sample_what_exists(store, strategy):
    """Fanouts of 10**9 or 2**63 take every eligible edge (no buffer of roots x fanout):
    the same blocks as a fanout of the largest degree."""
    from ddstore.temporal import TemporalGraph, TemporalSampler
    rng = np.random.default_rng(0)
    m = 400
    g = TemporalGraph.from_arrays(store, "g", rng.integers(0, 30, m),
                                  rng.integers(0, 30, m), rng.random(m), add_reverse=True)
    roots = np.repeat(np.arange(30), 200)  # 6000 roots: 6000 x 10**9 would be 48 TB
    ts = np.full(roots.shape[0], 0.7)
    ref = TemporalSampler(g, (int(g.degree().max()),) * 2, strategy).sample(roots, ts)
    for fan in (10 ** 9, 2 ** 63):
        got = TemporalSampler(g, (fan, fan), strategy).sample(roots, ts)
        for a, b in zip(got, ref):
            for key in ("nodes", "ts", "row", "col", "eid", "edge_ts"):
                assert np.array_equal(getattr(a, key), getattr(b, key)), (fan, key)
    assert 0 < ref[0].num_edges < ref[1].num_edges
    # the premise: a fanout above every degree samples what a fanout of the largest
    # degree samples (here unclamped: 6 roots x 10**4 is a small buffer)
    few, few_ts = np.arange(0, 30, 5), np.full(6, 0.7)
    a = TemporalSampler(g, (10 ** 4,), strategy).sample(few, few_ts)[0]
    b = TemporalSampler(g, (int(g.degree().max()),), strategy).sample(few, few_ts)[0]
    assert a.num_edges > 0 and np.array_equal(a.eid, b.eid)
    assert np.array_equal(a.row, b.row)


def test_sampler_buffers_that_cannot_be_allocated(store, monkeypatch):
    from ddstore import DDStoreMemoryError
    from ddstore._core import TCSR
    from ddstore.temporal import TemporalGraph, TemporalSampler
    g = TemporalGraph.from_arrays(store, "g", [0, 1, 2], [1, 2, 0], [0.0, 1.0, 2.0])
    sampler = TemporalSampler(g, (5,))

    def no_memory(*args):
        raise MemoryError("Unable to allocate 7.28 TiB")
    monkeypatch.setattr(TCSR, "sample", no_memory)
    with pytest.raises(DDStoreMemoryError, match=r"sample of graph 'g', layer 0: fanout 5 "
                                                 r"for 2 roots needs room for 10 sampled "
                                                 r"edges .* about \d+ fit"):
        sampler.sample([0, 1], [5.0, 5.0])


def test_sampler_after_remove_names_the_graph(store):
    from ddstore import DDStoreStateError
    from ddstore.temporal import TemporalGraph, TemporalSampler
    g = TemporalGraph.from_arrays(store, "g", [0, 1, 2], [1, 2, 0], [0.0, 1.0, 2.0])
    sampler = TemporalSampler(g, (2,))
    g.remove()
    with pytest.raises(DDStoreStateError, match=r"sample: graph 'g' was removed from the "
                                                r"store"):
        sampler.sample([0], [5.0])
    TemporalGraph.from_arrays(store, "g", [0, 1, 2], [1, 2, 0], [0.0, 1.0, 2.0])
    with pytest.raises(DDStoreStateError, match=r"graph 'g' was removed"):
        sampler.sample([0], [5.0])


def test_tgl_row_with_extra_field_refused(store, tmp_path):
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    (tmp_path / "edges.csv").write_text(",src,dst,time,ext_roll\n0,0,1,1.0,0\n"
                                        "1,1,2,2.0,0,7\n2,2,0,3.0,0\n")
    with pytest.raises(DDStoreValueError, match=r"edges.csv, line 3: malformed row: 6 "
                                                r"fields, expected 5"):
        TemporalGraph.from_tgl(store, "g", str(tmp_path))
    (tmp_path / "edges.csv").write_text(",src,dst,time,ext_roll\n0,0,1,1.0,0\n"
                                        "1,1,2,2.0\n")
    with pytest.raises(DDStoreValueError, match=r"edges.csv, line 3: malformed row: 4 "
                                                r"fields, expected 5"):
        TemporalGraph.from_tgl(store, "g", str(tmp_path))
    assert store.variables() == []


# ------------------------------------------------------------------ JODIE and PyG (1 rank)
def _jodie(path, rows):
    path.write_text("user_id,item_id,timestamp,state_label,comma_separated_list_of_features"
                    "\n" + "".join(r + "\n" for r in rows))
    return str(path)


def test_jodie_small_file_and_labels(store, tmp_path):
    from ddstore.temporal import TemporalGraph
    path = _jodie(tmp_path / "j.csv", ["0,0,1.0,0,0.5,1.5", "2,1,1.0,1,0.25,-2",
                                       "1,0,4.0,0,3,4"])
    g = TemporalGraph.from_jodie(store, "j", path)
    assert (g.num_users, g.num_items, g.num_nodes, g.num_edges) == (3, 2, 5, 3)
    s, d, t = g.edges([0, 1, 2])
    assert s.tolist() == [0, 2, 1] and d.tolist() == [3, 4, 3] and t.tolist() == [1, 1, 4]
    assert g.edge_labels([2, 1]).tolist() == [0, 1]
    assert g.edge_features([1]).tolist() == [[0.25, -2.0]]
    assert g.edge_features([0]).dtype == np.float32 and g.t_dtype == np.int64
    g.remove()
    assert store.variables() == []


@pytest.mark.parametrize("rows, line, fragment", [
    (["0,0,1.0,0,0.5", "1,1,2.0,0,0.5,7", "2,0,3.0,1,0.1"], 3,
     "malformed row: 6 fields, but line 2 has 5"),
    (["0,0,1.0,0,0.5", "1,1,2.0,0", "2,0,3.0,1,0.1"], 3,
     "malformed row: 4 fields, but line 2 has 5"),
    (["0,0,1.0,0,0.5", "1,1,abc,0,0.5"], 3, "timestamp (field 3) is 'abc'; it must be a "
                                            "finite number"),
    (["0,0,1.0,0,0.5", "-1,1,2.0,0,0.5"], 3, "user (field 1) is -1; it must be an "
                                             "integer user id >= 0"),
    (["0,0,1.0,0.5,0.5"], 2, "state_label (field 4) is 0.5; it must be an integer label"),
    (["0,0,5.0,0,0.5", "1,1,2.0,0,0.5"], 3, "timestamp 2.0 is earlier than the previous "
                                            "row's 5.0"),
    (["0,0,1.0"], 2, "malformed row: 3 fields, a JODIE row needs at least 4"),
])
def test_jodie_malformed_row_names_file_and_line(store, tmp_path, rows, line, fragment):
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    path = _jodie(tmp_path / "bad.csv", rows)
    with pytest.raises(DDStoreValueError, match=re.escape(f"{path}, line {line}: {fragment}")):
        TemporalGraph.from_jodie(store, "g", path)
    assert store.variables() == []


def test_jodie_missing_file_and_no_header(store, tmp_path):
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    missing = str(tmp_path / "nope.csv")
    with pytest.raises(DDStoreValueError, match=re.escape(f"{missing}: not found")):
        TemporalGraph.from_jodie(store, "g", missing)
    (tmp_path / "h.csv").write_text("0,0,1.0,0,0.5\n1,1,2.0,0,0.5\n")
    with pytest.raises(DDStoreValueError, match=r"h.csv, line 1: .* is a data row, but a "
                                                r"JODIE file starts with one header line"):
        TemporalGraph.from_jodie(store, "g", str(tmp_path / "h.csv"))
    with pytest.raises(DDStoreValueError, match=r"no data rows after the header"):
        TemporalGraph.from_jodie(store, "g", _jodie(tmp_path / "e.csv", []))
    assert store.variables() == []


def test_from_pyg_refuses_temporal_data_without_t(store):
    import torch
    from torch_geometric.data import TemporalData
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    data = TemporalData(src=torch.tensor([0, 1]), dst=torch.tensor([1, 2]),
                        msg=torch.zeros(2, 3))
    with pytest.raises(DDStoreValueError, match=r"graph 'g': the TemporalData has no 't' "
                                                r"\(from_pyg needs src, dst and t"):
        TemporalGraph.from_pyg(store, "g", data)
    bad = TemporalData(src=torch.tensor([0, 1]), dst=torch.tensor([1, 2]),
                       t=torch.tensor([0.0, 1.0]), msg=torch.zeros(3, 4))
    with pytest.raises(DDStoreValueError, match=r"data.msg has shape \(3, 4\)"):
        TemporalGraph.from_pyg(store, "g", bad)
    ok = TemporalData(src=torch.tensor([0, 1]), dst=torch.tensor([1, 2]),
                      t=torch.tensor([0.0, 1.0]))
    with pytest.raises(DDStoreValueError, match=r"split has shape \(3,\), needs \(2,\)"):
        TemporalGraph.from_pyg(store, "g", ok, split=[0, 1, 2])
    with pytest.raises(DDStoreValueError, match=r"test_ratio=1.5 must be a number in"):
        TemporalGraph.from_pyg(store, "g", ok, test_ratio=1.5)
    assert store.variables() == []


def test_chronological_split_is_pygs():
    """Our split (one process, and the sorted-shares version that from_jodie runs over
    ranks) equals TemporalData.train_val_test_split, for integer and float times with
    ties, and several ratios."""
    import torch
    from mpi4py import MPI
    from torch_geometric.data import TemporalData
    from ddstore.temporal.pyg_data import chronological_split, chronological_split_share
    rng = np.random.default_rng(0)
    ratios = [(0.15, 0.15), (0.1, 0.2), (0.0, 0.0), (0.5, 0.5), (1 / 3, 1 / 7), (0.0, 1.0)]
    for trial in range(300):
        n = int(rng.integers(1, 80))
        if trial % 2:
            t = torch.from_numpy(np.sort(rng.random(n) * 1e3))
        else:  # integers, past float32's exact range now and then (torch compares there)
            t = torch.from_numpy(np.sort(rng.integers(0, 40, n)) + (2 ** 24 if trial % 4
                                                                    else 0))
        val, test = ratios[trial % len(ratios)]
        data = TemporalData(src=torch.zeros(n, dtype=torch.long),
                            dst=torch.zeros(n, dtype=torch.long), t=t)
        tr, va, te = data.train_val_test_split(val_ratio=val, test_ratio=test)
        want = np.repeat([0, 1, 2], [tr.num_events, va.num_events, te.num_events])
        got = chronological_split(t, val, test)
        assert np.array_equal(got, want), (trial, n, val, test)
        share = chronological_split_share(MPI.COMM_SELF, t.numpy().astype(np.float64),
                                          t.numpy().dtype, val, test)
        assert np.array_equal(share, want), (trial, n, val, test)
