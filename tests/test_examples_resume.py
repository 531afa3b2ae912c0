"""Checkpoint and restart of the examples (issue 37, item 4): a run stopped after an
epoch and resumed (``--checkpoint DIR`` / ``--resume DIR``, at another width) prints,
and saves, what the run that never stopped does, to the bit.

- ``examples/hydragnn_ising.py``: resumed from epoch 1, the same printed losses and,
  after the last epoch, the same model weights, optimizer state and loss history; the
  resumed run restores the store at width 1 instead of 2 and reopens the graph datasets
  by name (``GraphDataset.open``), generating no sample;
- ``examples/traffic_index_batching.py`` (width 2, batch-level shuffle): resumed after
  epoch 0, the same training and validation MAE for epochs 1 and 2;
- ``examples/tgn_link_prediction.py``: TGN resumed at width 1 for the second epoch, the
  same epoch lines, table, model, optimizer state, losses and metrics; APAN (a mailbox
  of 4 mails) checkpointed on 2 ranks and resumed on 1.

The 2-rank runs are part of the examples' one job (tests/examples_job.py)."""
import os
import re

import pytest

from conftest import run_mpi
from examples_job import APAN, EXAMPLES, HYDRA_EVAL, example_output, job_folder

TGN = os.path.join(EXAMPLES, "tgn_link_prediction.py")


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
def test_hydragnn_resume_is_exact(tmp_path_factory):
    import torch
    out_full = example_output("hydragnn whole", tmp_path_factory)
    out_res = example_output("hydragnn resumed", tmp_path_factory)
    full = job_folder(tmp_path_factory) / "hydra-whole"
    half = job_folder(tmp_path_factory) / "hydra-resumed"
    assert "resumed from" in out_res and "after epoch 1" in out_res, out_res
    # (the data came from the checkpoint, not from --source)
    assert ", source the checkpoint;" in out_res and ", source memory;" in out_full, out_res
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
    # (the run claimed its directory: the marker first, host, pid and start time)
    assert sorted(os.listdir(half)) == [".ddstore-run", "epoch-2.pt", "epoch-3.pt", "store"]


@pytest.mark.mpi
def test_traffic_resume_is_exact(tmp_path_factory):
    """A run of 3 epochs against one stopped after epoch 0 and resumed: the same MAE
    lines for epochs 1 and 2."""
    def maes(out):
        return [line.split("(")[0] for line in out.splitlines()
                if line.startswith("epoch ")]
    whole = maes(example_output("traffic whole", tmp_path_factory))
    first = maes(example_output("traffic first", tmp_path_factory))
    out_res = example_output("traffic resumed", tmp_path_factory)
    res = maes(out_res)
    assert "resumed from" in out_res and len(whole) == 3 and len(res) == 2, (whole, out_res)
    assert first == whole[:1] and res == whole[1:], (whole, first, out_res)
    idle = example_output("traffic idle", tmp_path_factory)
    assert "after epoch 0" in idle and not maes(idle), idle
    assert ("--epochs 1 trains no further: nothing to train (give --epochs above 1 to "
            "go on)") in idle, idle
    layout = "resuming a run of 2 rank(s) at width 2 on 2 at width 1: the mini-batches"
    assert layout in idle and "resuming a run" not in out_res, (idle, out_res)


def printed(out, model="TGN"):
    """The epoch lines without their timings, and the final table."""
    lines = [re.sub(r"batches in [0-9.]+ s \(memory reads \+ commits [0-9.]+ s\)", "",
                    line) for line in out.splitlines()
             if re.match(rf"^({model} epoch \d+:|{model}\s|random\s)", line)]
    return lines


def state(directory):
    """The last training state a run saved (model, optimizer, every epoch's losses and
    metrics at full precision)."""
    import torch
    names = sorted(n for n in os.listdir(directory) if n.startswith("training-"))
    assert len(names) == 1, names
    return torch.load(os.path.join(directory, names[0]), weights_only=False)


def same_state(a, b):
    import torch

    def flat(x):
        if isinstance(x, dict):
            return [(k, v) for key in sorted(x, key=str) for k, v in flat_at(key, x[key])]
        if isinstance(x, (list, tuple)):
            return [(k, v) for i, y in enumerate(x) for k, v in flat_at(i, y)]
        return [((), x)]

    def flat_at(key, x):
        return [((key,) + k, v) for k, v in flat(x)]
    fa, fb = flat(a), flat(b)
    assert [k for k, _ in fa] == [k for k, _ in fb]
    for (k, x), (_, y) in zip(fa, fb):
        if torch.is_tensor(x):
            assert x.dtype == y.dtype and torch.equal(x, y), k  # bit for bit
        else:
            assert x == y, k


@pytest.mark.mpi
def test_tgn_example_resumed_prints_what_the_uninterrupted_run_prints(tmp_path_factory):
    """TGN on 2 ranks at width 2: 2 epochs in one run, against 1 epoch, stopped, then
    resumed at width 1 for the second: the same epoch lines and table (to the printed
    digit), and the same model, optimizer state, losses and metrics (saved by
    ``--checkpoint``: compared bit for bit).  (On 3 ranks the same holds, thanks to the
    example's rank-order gradient sum; checked by hand, too slow for 2 cores.)"""
    out = example_output("tgn whole", tmp_path_factory)
    first = example_output("tgn first", tmp_path_factory)
    assert printed(first)[:1] == printed(out)[:1], (first, out)
    resumed = example_output("tgn resumed", tmp_path_factory)
    assert "resumed from" in resumed and "TGN epoch 0" not in resumed, resumed
    assert printed(first)[:1] + printed(resumed) == printed(out), (first, resumed, out)
    assert len(printed(out)) == 4, out
    whole, part = (job_folder(tmp_path_factory) / d for d in ("tgn-whole", "tgn-part"))
    same_state(state(whole), state(part))
    assert [h["epoch"] for h in state(whole)["history"]] == [0, 1]
    assert sorted(os.listdir(whole)) == [".ddstore-run", "store", "training-0001.pt"]


@pytest.mark.mpi
def test_apan_example_resumes_on_another_rank_count(tmp_path_factory):
    """APAN (a mailbox of 4 mails per node) checkpointed on 2 ranks at width 2, resumed
    on 1 rank: the graph and memory reopen from the store, training goes on from the
    next epoch."""
    example_output("apan first", tmp_path_factory)
    ck = str(job_folder(tmp_path_factory) / "apan")
    out = run_mpi(TGN, 1, *APAN, "--epochs", "2", "--resume", ck, timeout=300)
    assert "over 1 rank, width 1" in out and "mailbox_size=4" in out, out
    assert len(printed(out, "APAN")) == 3 and "APAN epoch 1:" in out, out
    assert "APAN epoch 0" not in out, out


@pytest.mark.mpi
@pytest.mark.shared_launch("examples/hydragnn_ising.py", *HYDRA_EVAL, nprocs=1, plain=True,
                           timeout=300)
def test_hydragnn_evaluation_counts_each_graph_once(shared_launch, tmp_path_factory):
    """The HydraGNN example's validation and test losses are means over each graph of the
    split once, the same at every rank count: DistributedSampler pads a split to a
    multiple of the ranks, and its mean counted some graphs twice (41 validation graphs
    of 410: 1.1375 at 1 rank, 1.1192 at 2 and 3).  (1 rank: the 1-rank shared job; 2:
    the examples' job.)"""
    def losses(out):
        found = re.findall(r"^\s+0\s+-\s+([0-9.]+) .*before training|^test_loss ([0-9.]+)",
                           out, re.M)
        assert len(found) == 2, out
        return found
    two = example_output("hydragnn eval 410", tmp_path_factory)
    assert losses(shared_launch) == losses(two)
    # a split of fewer graphs than ranks (1 validation and 1 test graph of 10): a rank
    # with none evaluates nothing (DDP's forward in evaluation waited for it: a hang)
    out = example_output("hydragnn eval 10", tmp_path_factory)
    assert re.search(r"^test_loss [0-9.]+ ", out, re.M), out
