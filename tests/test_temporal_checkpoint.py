"""Checkpoint and restart of the temporal layers (issue 37).

``tests/mpi/temporal_checkpoint.py`` saves every temporal builder's graph and node
memories (mailbox 1 and 3) and restores them on 1-4 ranks at every width, both
transports, comparing every byte, every read and the samplers' batches (see its
docstring); ``examples/tgn_link_prediction.py`` stopped after an epoch and resumed
(``--checkpoint`` / ``--resume``) prints, and saves, what the run that never stopped
does, to the bit."""
import os
import re

import pytest

from conftest import ROOT, on_ranks, run_mpi

EXAMPLE = os.path.join(ROOT, "examples", "tgn_link_prediction.py")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,transport,width", [(1, "auto", 1), (2, "rma", 1),
                                                    (3, "rma", 3), (4, "auto", 2)])
@pytest.mark.shared_launch("temporal_checkpoint.py", "{transport}", "{width}", timeout=300)
def test_temporal_checkpoint(shared_launch, nprocs, transport, width):
    assert f"0 failures {on_ranks(nprocs)}" in shared_launch, shared_launch


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


SMALL = ["--baseline", "none", "--max-batches", "3", "--batch-size", "100", "--hidden",
         "16", "--memory-dim", "16", "--num-nodes", "200", "--num-edges", "1500"]


@pytest.mark.mpi
def test_tgn_example_resumed_prints_what_the_uninterrupted_run_prints(tmp_path):
    """TGN on 2 ranks at width 2: 2 epochs in one run, against 1 epoch, stopped, then
    resumed at width 1 for the second: the same epoch lines and table (to the printed
    digit), and the same model, optimizer state, losses and metrics (saved by
    ``--checkpoint``: compared bit for bit).  (On 3 ranks the same holds, thanks to the
    example's rank-order gradient sum; checked by hand, too slow for 2 cores.)"""
    whole, part = str(tmp_path / "whole"), str(tmp_path / "part")
    out = run_mpi(EXAMPLE, 2, *SMALL, "--width", "2", "--epochs", "2", "--checkpoint",
                  whole, timeout=300)
    first = run_mpi(EXAMPLE, 2, *SMALL, "--width", "2", "--epochs", "1", "--checkpoint",
                    part, timeout=300)
    assert printed(first)[:1] == printed(out)[:1], (first, out)
    resumed = run_mpi(EXAMPLE, 2, *SMALL, "--width", "1", "--epochs", "2", "--resume",
                      part, "--checkpoint", part, timeout=300)
    assert "resumed from" in resumed and "TGN epoch 0" not in resumed, resumed
    assert printed(first)[:1] + printed(resumed) == printed(out), (first, resumed, out)
    assert len(printed(out)) == 4, out
    same_state(state(whole), state(part))
    assert [h["epoch"] for h in state(whole)["history"]] == [0, 1]
    assert sorted(os.listdir(whole)) == ["store", "training-0001.pt"]


@pytest.mark.mpi
def test_apan_example_resumes_on_another_rank_count(tmp_path):
    """APAN (a mailbox of 4 mails per node) checkpointed on 2 ranks at width 2, resumed
    on 1 rank: the graph and memory reopen from the store, training goes on from the
    next epoch."""
    ck = str(tmp_path / "ck")
    args = SMALL + ["--model", "apan", "--mailbox", "4"]
    run_mpi(EXAMPLE, 2, *args, "--width", "2", "--epochs", "1", "--checkpoint", ck,
            timeout=300)
    out = run_mpi(EXAMPLE, 1, *args, "--epochs", "2", "--resume", ck, timeout=300)
    assert "over 1 ranks, width 1" in out and "mailbox_size=4" in out, out
    assert len(printed(out, "APAN")) == 3 and "APAN epoch 1:" in out, out
    assert "APAN epoch 0" not in out, out
