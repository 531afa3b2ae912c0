"""ddstore.temporal: the MPI program tests/mpi/temporal_check.py on 1-4 ranks (every
width, both transports, against brute-force references), the synthetic stream, and
a smoke run of the benchmark (the TGAT example runs in test_examples.py)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import mpiexec_path

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_temporal_all_placements(mpirun, nprocs, tmp_path):
    out = mpirun("temporal_check.py", nprocs, str(tmp_path), timeout=180)
    assert f"0 failures on {nprocs} ranks" in out, out


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
