"""The examples' ``--prefetch K`` (issue 44 item 4): the training batches read ahead
through the store's pipeline to the device (``ddstore.device.DevicePrefetcher``, here
with the CPU as the device: the read-ahead thread and the reused staging buffers) train
exactly as ``--prefetch 0``: for hydragnn_ising.py the same printed losses and, after
the last epoch, the same model weights bit for bit; for graphsage_large.py (with a
seeded sampler) the same printed losses and accuracies.  The store is read with ``transport="rma"`` at width 2, so the
read-ahead thread reads the other rank's graphs with ``MPI_Get``."""
import os
import re

import pytest

from conftest import run_mpi

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
SMALL = ["--num-samples", "160", "--epochs", "2", "--batch-size", "16", "--hidden", "8",
         "--layers", "1", "--lattice", "3", "--quiet", "--device", "cpu", "--width", "2",
         "--transport", "rma"]


def losses(out):
    """Epoch -> (train loss, val loss) as printed, and the test loss line."""
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 7 and f[0].isdigit():
            rows[int(f[0])] = (f[1], f[2])
    test = [line.split()[1] for line in out.splitlines() if line.startswith("test_loss")]
    return rows, test


@pytest.mark.mpi
def test_hydragnn_prefetch_trains_as_without(tmp_path):
    import torch
    outs, states = {}, {}
    for k in (0, 2):
        ck = tmp_path / f"k{k}"
        outs[k] = run_mpi(os.path.join(EXAMPLES, "hydragnn_ising.py"), 2, *SMALL,
                          "--prefetch", k, "--checkpoint", ck, timeout=240)
        states[k] = torch.load(ck / "epoch-2.pt", weights_only=False)
    assert "training batches read 2 ahead to cpu" in outs[2], outs[2]
    assert "read 0 ahead" not in outs[0] and "ahead to" not in outs[0], outs[0]
    rows0, test0 = losses(outs[0])
    rows2, test2 = losses(outs[2])
    assert sorted(rows0) == [1, 2] and len(test0) == 1, outs[0]
    assert (rows2, test2) == (rows0, test0), (outs[0], outs[2])
    a, b = states[0]["model"], states[2]["model"]
    assert a.keys() == b.keys()
    for name, v in a.items():
        assert torch.equal(v, b[name]), name
    assert states[0]["history"] == states[2]["history"]


@pytest.mark.mpi
def test_hydragnn_prefetch_refuses_negative():
    res = run_mpi(os.path.join(EXAMPLES, "hydragnn_ising.py"), 1, "--prefetch", "-1",
                  "--quiet", check=False, timeout=120)
    assert res.returncode != 0, res.output
    assert "--prefetch -1: must be an integer >= 0" in res.output, res.output


def sage_losses(out):
    """The per-epoch loss lines and the accuracy table of graphsage_large.py."""
    lines = [re.sub(r"; \d+ batches per rank in .*$", "", line) for line in out.splitlines()
             if re.match(r"^epoch \d+: loss ", line)]
    table = [line for line in out.splitlines()
             if re.match(r"^\s+(GraphSAGE|MLP|majority)", line)]
    return lines, table


@pytest.mark.mpi
def test_graphsage_prefetch_trains_as_without():
    """graphsage_large.py with a seeded sampler: ``--prefetch 2`` (the NeighborLoader
    wrapped with DevicePrefetcher on the CPU) prints the losses and accuracies of
    ``--prefetch 0``."""
    args = ["--scale", "0.002", "--classes", "8", "--epochs", "2", "--batch-size", "64",
            "--hidden", "16", "--fanouts", "10,5", "--eval-nodes", "500",
            "--transport", "rma", "--sampler-seed", "3"]
    outs = {k: run_mpi(os.path.join(EXAMPLES, "graphsage_large.py"), 2, *args,
                       "--prefetch", k, timeout=240) for k in (0, 2)}
    assert "batches read 2 ahead (sampler seed 3)" in outs[2], outs[2]
    lines0, table0 = sage_losses(outs[0])
    assert len(lines0) == 2 and len(table0) == 3, outs[0]
    assert sage_losses(outs[2]) == (lines0, table0), (outs[0], outs[2])
