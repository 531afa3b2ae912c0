"""Checkpoint and restart of the HydraGNN example (issue 37, item 4), and of the traffic
example (last test):
``examples/hydragnn_ising.py --checkpoint DIR`` then ``--resume DIR`` from epoch 1
continues exactly as the run that never stopped: the same printed losses, and after the
last epoch the same model weights, optimizer state and loss history, bit for bit.  The
resumed run restores the store at another width (1 instead of 2) and reopens the graph
datasets by name (``GraphDataset.open``), generating no sample."""
import os

import pytest

from conftest import run_mpi

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "hydragnn_ising.py")
SMALL = ["--num-samples", "160", "--epochs", "3", "--batch-size", "16", "--hidden", "8",
         "--layers", "1", "--lattice", "3", "--quiet"]


def losses(out):
    """Epoch -> (train loss, val loss) as printed, and the test loss line."""
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 7 and f[0].isdigit() and f[0] != "0":
            rows[int(f[0])] = (f[1], f[2])
    test = [line.split()[1] for line in out.splitlines() if line.startswith("test_loss")]
    return rows, test


@pytest.mark.mpi
def test_hydragnn_resume_is_exact(tmp_path):
    import torch
    full, half = tmp_path / "full", tmp_path / "resumed"
    out_full = run_mpi(EXAMPLE, 2, *SMALL, "--width", "2", "--checkpoint", full,
                       timeout=240)
    out_res = run_mpi(EXAMPLE, 2, *SMALL, "--width", "1", "--resume", full,
                      "--resume-epoch", "1", "--checkpoint", half, timeout=240)
    assert "resumed from" in out_res and "after epoch 1" in out_res, out_res
    rows_full, test_full = losses(out_full)
    rows_res, test_res = losses(out_res)
    assert sorted(rows_full) == [1, 2, 3] and sorted(rows_res) == [2, 3], (out_full,
                                                                           out_res)
    assert rows_res == {k: rows_full[k] for k in (2, 3)}, (out_full, out_res)
    assert test_res == test_full and len(test_full) == 1, (out_full, out_res)
    a = torch.load(full / "epoch-3.pt", weights_only=False)
    b = torch.load(half / "epoch-3.pt", weights_only=False)
    assert a["history"] == b["history"] and (a["mean"], a["std"]) == (b["mean"], b["std"])
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys() and all(
        torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i]), "optimizer state"
    assert torch.equal(a["torch_rng"], b["torch_rng"])
    assert sorted(os.listdir(half)) == ["epoch-2.pt", "epoch-3.pt", "store"]


@pytest.mark.mpi
def test_traffic_resume_is_exact(tmp_path):
    """examples/traffic_index_batching.py (width 2, batch-level shuffle): a run resumed
    after epoch 0 (the later epochs' states removed, as if the job had stopped there)
    prints the same training and validation MAE for epochs 1 and 2."""
    name = os.path.join(ROOT, "examples", "traffic_index_batching.py")
    args = ["--width", "2", "--sampler", "batch", "--epochs", "3", "--batch-size", "64",
            "--hidden", "8"]
    out_full = run_mpi(name, 2, *args, "--checkpoint", tmp_path, timeout=240)
    for k in (1, 2):
        os.remove(tmp_path / f"epoch-{k}.pt")
    out_res = run_mpi(name, 2, *args, "--resume", tmp_path, timeout=240)

    def maes(out):
        return [line.split("(")[0] for line in out.splitlines()
                if line.startswith("epoch ")]
    full, res = maes(out_full), maes(out_res)
    assert "resumed from" in out_res and len(full) == 3 and len(res) == 2, (out_full,
                                                                            out_res)
    assert res == full[1:], (out_full, out_res)
