"""The examples' ``--prefetch K`` (issue 44 item 4), through ``scripts/gpu_examples.py``
(what ``scripts/gpu_check.sh`` runs on a GPU) on the CPU with its ``--small`` settings:
the training batches read ahead through the store's pipeline to the device
(``ddstore.device.DevicePrefetcher``, here with the CPU as the device: the read-ahead
thread and the reused staging buffers) train exactly as ``--prefetch 0``: for
hydragnn_ising.py the same printed losses and, after the last epoch, the same model
weights bit for bit; for graphsage_large.py (with a seeded sampler) the same printed
losses and accuracies.  The store is read with ``transport="rma"`` at width 2, so the
read-ahead thread reads the other rank's graphs with ``MPI_Get``.  The script's runs are
made in the examples' shared 2-rank job (tests/examples_job.py: the script's
``planned_runs``, each a job of its own on a GPU machine) and its ``main`` compares them;
the script's loss comparison is checked to catch a difference."""
import json
import math
import os

import pytest

from conftest import ROOT, run_mpi
from examples_job import example_output, gpu_examples, gpu_examples_argv, job_folder

EXAMPLES = os.path.join(ROOT, "examples")


@pytest.mark.mpi
def test_examples_prefetch_train_as_without(tmp_path_factory):
    import torch
    g = gpu_examples()
    tmp = job_folder(tmp_path_factory)
    argv = gpu_examples_argv(tmp)
    by_run = {(script, tuple(args)): name for name, script, _, args
              in g.planned_runs(g.parse_args(argv))}
    made = []

    def from_job(script, nprocs, args, timeout):  # (the job fails the test if it failed)
        made.append(by_run[script, tuple(args)])
        return 0, example_output(f"gpu_examples {made[-1]}", tmp_path_factory), math.nan
    rc = g.main(argv, run=from_job)
    res = json.loads((tmp / "gpu-examples" / "examples.json").read_text())
    assert rc == 0 and not res["problems"], res["problems"]
    assert made == list(res["runs"]), made  # every planned run, in order
    ck = tmp / "gpu-examples"
    runs = res["runs"]
    assert sorted(runs) == ["main_cpu", "main_cpu_prefetch2", "sage_cpu",
                            "sage_cpu_prefetch2"], sorted(runs)
    main0, main2 = runs["main_cpu"], runs["main_cpu_prefetch2"]
    assert "training batches read 2 ahead to cpu" in " ".join(main2["said"]), main2
    assert not any("ahead to" in s for s in main0["said"]), main0
    assert sorted(main0["epochs"]) == ["1", "2"] and main0["test"] is not None, main0
    assert [r[:2] for r in main2["epochs"].values()] == \
        [r[:2] for r in main0["epochs"].values()] and main2["test"] == main0["test"]
    states = {k: torch.load(ck / name / "epoch-2.pt", weights_only=False)
              for k, name in ((0, "main_cpu"), (2, "main_cpu_prefetch2"))}
    a, b = states[0]["model"], states[2]["model"]
    assert a.keys() == b.keys()
    for name, v in a.items():
        assert torch.equal(v, b[name]), name
    assert states[0]["history"] == states[2]["history"]
    sage0, sage2 = runs["sage_cpu"], runs["sage_cpu_prefetch2"]
    assert any("batches read 2 ahead (sampler seed 3)" in s for s in sage2["said"]), sage2
    assert len(sage0["epochs"]) == 2 and len(sage0["table"]) == 3, sage0
    assert [r[:3] for r in sage2["epochs"].values()] == \
        [r[:3] for r in sage0["epochs"].values()] and sage2["table"] == sage0["table"]
    assert set(res["summary"]) == {"main job samples/s, prefetch 2 / 0",
                                   "graphsage M edges/s, prefetch 2 / 0"}
    assert all(v > 0 for v in res["summary"].values()), res["summary"]


@pytest.mark.mpi
def test_gpu_examples_launches_an_example_on_its_ranks():
    """The script's own launcher (what its runs use on a GPU machine; the suite makes
    them in its shared job): ``mpiexec -n 2`` of an example, its output and exit code
    (graph_gru.py checks itself on each process it runs on and says so: one line per
    rank; the examples' --help is printed by rank 0 only)."""
    rc, out, secs = gpu_examples().run("graph_gru.py", 2, [], 60)
    assert rc == 0 and out.count("GraphGRUCell: loss") == 2 and secs > 0, (rc, out)


def test_gpu_examples_loss_comparison_catches_a_difference():
    g = gpu_examples()
    out = ("ranks 2, width 2\n    1     0.2605    0.0345      596.3        32.8       "
           "188.3    5.37\n    2     0.1000    0.0300      600.0        30.0       "
           "150.0    5.00\ntest_loss 0.0290 (MSE)\n")
    a = g.main_job_rows(out)
    assert a == {"epochs": {1: [0.2605, 0.0345, 596.3], 2: [0.1, 0.03, 600.0]},
                 "test": 0.029}
    assert g.loss_differences(a, a, 0.0, 0.0, "same") == []
    b = g.main_job_rows(out.replace("0.0300", "0.0302"))
    assert g.loss_differences(b, a, 1e-3, 2e-4, "x") == []          # within 2e-4
    c = g.main_job_rows(out.replace("0.0300", "0.0310"))
    bad = g.loss_differences(c, a, 1e-3, 2e-4, "x")
    assert len(bad) == 1 and "epoch 2 val loss 0.031 against 0.03" in bad[0], bad
    d = g.main_job_rows(out.replace("test_loss", "no test"))
    assert any("test loss None" in m for m in g.loss_differences(d, a, 1, 1, "x"))
    assert g.loss_differences(g.main_job_rows(""), g.main_job_rows(""), 1, 1, "x")
    line = ("epoch 1: loss 3.1000 (GraphSAGE), 2.9000 (MLP); 12 batches per rank in "
            "1.5 s, 0.42 M sampled edges/s over 2 ranks")
    assert g.sage_rows(line)["epochs"] == {1: [3.1, 2.9, 12, 1.5, 0.42]}


@pytest.mark.mpi
def test_hydragnn_prefetch_refuses_negative():
    res = run_mpi(os.path.join(EXAMPLES, "hydragnn_ising.py"), 2, "--prefetch", "-1",
                  "--quiet", check=False, timeout=120)
    assert res.returncode != 0, res.output
    assert "argument --prefetch: must be an integer >= 0 and <= 1024, got -1" in \
        res.output, res.output
    assert res.output.count("usage: hydragnn_ising.py") == 1, res.output  # rank 0 only
