"""Spatiotemporal windows on 2, 3 and 4 ranks: every width dividing the rank count
(1..4), transports rma and auto, halo and multi-owner reads (tests/mpi/st_windows.py)."""
import pytest

from conftest import on_ranks


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3, 4])
@pytest.mark.shared_launch("st_windows.py", "{tmp}", timeout=180)
def test_windows_all_placements(shared_launch, nprocs):
    assert f"0 failures {on_ranks(nprocs)}" in shared_launch, shared_launch


@pytest.mark.mpi
def test_benchmark_smoke(tmp_path):
    """python -m ddstore.bench.spatiotemporal on a small series, (a), (b) and (c)."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out = subprocess.run(
        ["timeout", "--kill-after=10", "240", sys.executable, "-m",
         "ddstore.bench.spatiotemporal", "--steps", "3000", "--nodes", "20",
         "--epochs", "1", "--out", str(tmp_path)], cwd=root, stdout=subprocess.PIPE,
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
