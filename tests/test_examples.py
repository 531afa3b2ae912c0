"""Every example in examples/ runs with small settings on 2 ranks (1 for graph_gru.py,
which uses no MPI), under ``timeout`` in the shared jobs (conftest), and prints what it
is meant to print; the examples import only what requirements.txt installs; the numpy
ROC-AUC and average precision the link-prediction examples use
(``ddstore.temporal.metrics``) equal brute-force counts."""
import glob
import math
import os
import re
import sys

import numpy as np
import pytest

from conftest import argparse_exit
from examples_job import EXAMPLES, NPY_REFUSED, SMALL, example_output

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def floats(pattern, out):
    return [float(v) for v in re.findall(pattern, out)]


def check_hydragnn_ising(out):
    assert "validation loss fell" in out, out
    rows = [line.split() for line in out.splitlines()
            if line.strip() and line.split()[0] in {"1", "2", "3"}]
    assert len(rows) == 3 and all(len(r) == 7 for r in rows), out


def check_traffic_index_batching(out):
    maes = floats(r"val MAE ([0-9.naif]+)", out)
    assert len(maes) == 2 and all(math.isfinite(v) for v in maes), out
    assert "width 2 (partitioned)" in out and out.count("peak RSS") == 2, out


def check_dynamic_graph_forecast(out):
    maes = floats(r"val MAE ([0-9.naif]+)", out)
    assert len(maes) == 2 and all(math.isfinite(v) for v in maes), out
    assert out.count("persistence MAE") == 2 and "test MAE" in out, out
    assert "edge bytes" in out and "width 2" in out, out


def check_tgat_link_prediction(out):
    aps = floats(r"val AP ([0-9.]+)", out)
    aucs = floats(r"test AP [0-9.]+ AUC ([0-9.]+)", out)
    rnd = floats(r"random AP ([0-9.]+)", out)
    assert len(aps) == 2 and len(aucs) == 2 and len(rnd) == 2, out
    assert all(0 < v <= 1 for v in aps + aucs + rnd), out
    # the graph has the nodes asked for (--num-nodes 200), not the largest id drawn + 1
    assert "TemporalGraph('g', num_nodes=200," in out, out


def check_memory_model(out, model, baseline=True, epochs=2):
    """What tgn_link_prediction.py prints: one line per epoch, then the table of the
    last epoch (the model, TGAT unless ``baseline`` is off, random), every value a
    probability."""
    name = model.upper()
    assert len(re.findall(rf"^{name} epoch \d+: loss [0-9.]+", out, re.M)) == epochs, out
    assert "NodeMemory('memory'" in out, out
    table = {}
    for line in out.splitlines():
        row = re.match(r"^(\w+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)$", line)
        if row:
            table[row.group(1)] = [float(v) for v in row.groups()[1:]]
    want = [name] + (["TGAT"] if baseline else []) + ["random"]
    assert sorted(table) == sorted(want), out
    assert all(0 < v <= 1 for row in table.values() for v in row), out
    assert (f"{name} - TGAT on test: AP" in out) == baseline, out


def check_tgn_link_prediction(out):
    check_memory_model(out, "tgn")
    assert "TemporalGraph('g', num_nodes=200," in out, out
    assert len(re.findall(r"^TGAT epoch \d+", out, re.M)) == 2, out


def check_graphsage_large(out):
    rows = {}
    for label in ("GraphSAGE", "MLP (features only)", "majority class"):
        m = re.search(re.escape(label) + r"[^\n]*?\s([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$",
                      out, re.M)
        assert m, (label, out)
        rows[label] = [float(v) for v in m.groups()]
        assert all(0 <= v <= 1 for v in rows[label]), out
    assert out.count("epoch ") == 8 and "sampled edges/s" in out, out
    # planted structure: neighbours tell the class better than the majority class does
    assert rows["GraphSAGE"][2] > rows["majority class"][2], out


def check_graph_gru(out):
    losses = re.findall(r"GraphGRUCell: loss ([0-9.]+) -> ([0-9.]+)", out)
    assert len(losses) == 1, out
    assert all(float(b) < float(a) for a, b in losses), out


# example -> (ranks, small-settings arguments (examples_job.SMALL), check of what it printed)
CHECKS = {"hydragnn_ising.py": check_hydragnn_ising,
          "traffic_index_batching.py": check_traffic_index_batching,
          "dynamic_graph_forecast.py": check_dynamic_graph_forecast,
          "tgat_link_prediction.py": check_tgat_link_prediction,
          "tgn_link_prediction.py": check_tgn_link_prediction,
          "graphsage_large.py": check_graphsage_large,
          "graph_gru.py": check_graph_gru}
EXAMPLE_RUNS = {name: (nprocs, args, CHECKS[name]) for name, (nprocs, args) in SMALL.items()}


def test_every_example_is_run():
    found = sorted(os.path.basename(p) for p in glob.glob(os.path.join(EXAMPLES, "*.py")))
    assert found == sorted(EXAMPLE_RUNS), (found, sorted(EXAMPLE_RUNS))


@pytest.mark.mpi
@pytest.mark.parametrize("name", sorted(n for n, r in EXAMPLE_RUNS.items() if r[0] == 2))
def test_example_runs(name, tmp_path_factory):
    nprocs, args, check = EXAMPLE_RUNS[name]
    check(example_output(name, tmp_path_factory))


@pytest.mark.mpi
@pytest.mark.shared_launch("examples/graph_gru.py", *SMALL["graph_gru.py"][1], nprocs=1,
                           plain=True, timeout=300)
def test_graph_gru_example_runs(shared_launch):
    """graph_gru.py uses no MPI: one rank, a section of the 1-rank shared job (what it
    printed)."""
    assert SMALL["graph_gru.py"][0] == 1
    check_graph_gru(shared_launch)


def test_every_example_runs_in_a_test():
    """Each example runs either in the 2-rank examples' job or, on one rank, above."""
    assert {n for n, r in EXAMPLE_RUNS.items() if r[0] not in (1, 2)} == set()
    assert [n for n, r in EXAMPLE_RUNS.items() if r[0] == 1] == ["graph_gru.py"]


@pytest.mark.mpi
def test_temporal_examples_with_empty_shares(tmp_path_factory):
    """Batches of one event over two ranks: one rank's share of each batch is empty,
    and the models take it (tensors of 0 rows; they were reshaped with a -1): TGN, and
    its TGAT baseline (tgat_link_prediction's model and batch preparation)."""
    out = example_output("tgn batch 1", tmp_path_factory)
    check_memory_model(out, "tgn", epochs=1)
    assert len(re.findall(r"^TGAT epoch 0", out, re.M)) == 1, out


@pytest.mark.mpi
@pytest.mark.parametrize("model", ["jodie", "apan"])
def test_tgn_example_other_models(model, tmp_path_factory):
    """tgn_link_prediction.py's JODIE and APAN, small, without the TGAT baseline; APAN
    on a JODIE CSV (``--jodie``), JODIE on the synthetic stream at width 2."""
    out = example_output(model, tmp_path_factory)
    check_memory_model(out, model, baseline=False, epochs=1)
    if model == "apan":
        assert "JODIE file" in out, out


@pytest.mark.mpi
def test_tgn_example_pipelined_commit_gives_the_same_metrics(tmp_path_factory):
    """``--pipelined-commit`` (NodeMemory.commit(wait=False): batch i's update runs while
    batch i+1 is sampled) prints the same losses and metrics, to the digit, as the
    blocking commit: every read waits for the commit before it, at width 2 over 2
    ranks (so the background exchange crosses ranks)."""
    def metrics(out):  # the epoch lines without their timings, and the final table
        lines = [re.sub(r"batches in [0-9.]+ s \(memory reads \+ commits [0-9.]+ s\)",
                        "", line) for line in out.splitlines()
                 if re.match(r"^(TGN epoch \d+:|TGN\s|random\s)", line)]
        assert len(lines) == 4, out
        return lines
    plain = metrics(example_output("blocking commit", tmp_path_factory))
    assert metrics(example_output("pipelined commit", tmp_path_factory)) == plain


def test_examples_need_only_requirements():
    """Every module an example imports is installed by requirements.txt (or is the
    standard library, ddstore itself or a sibling example)."""
    import ast
    import importlib.metadata as md
    import sys

    def norm(name):
        return re.sub(r"[-_.]+", "-", name).lower()

    reqs = set()
    for line in open(os.path.join(ROOT, "requirements.txt")):
        line = line.split("#")[0].strip()
        if line:
            reqs.add(norm(re.split(r"[<>=!~\[ ;]", line)[0]))
    dists_of = md.packages_distributions()  # top-level module -> its distributions
    local = {"ddstore"} | {os.path.splitext(n)[0] for n in EXAMPLE_RUNS}

    def required(module):
        top = module.split(".")[0]
        return (top in sys.stdlib_module_names or top in local or
                any(norm(d) in reqs for d in dists_of.get(top, ())))

    bad = []
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*.py"))):
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods = [node.module]
            else:
                continue
            bad += [(os.path.basename(path), m) for m in mods if not required(m)]
    assert not bad, f"imported by examples but not in requirements.txt: {bad}"


def test_roc_auc_matches_pair_count():
    """The link-prediction examples' numpy ROC-AUC (``ddstore.temporal.roc_auc``) equals
    the fraction of (positive, negative) pairs ordered correctly, ties counted 1/2, on
    data with many ties; average precision equals its definition on tie-free scores."""
    from ddstore.temporal import average_precision, roc_auc
    rng = np.random.default_rng(0)
    for trial in range(50):
        n = int(rng.integers(2, 60))
        labels = rng.integers(0, 2, n).astype(np.float64)
        labels[0], labels[1] = 1, 0  # both classes present
        scores = rng.integers(0, 5 if trial % 2 else 1000, n) / 7.0  # ties when trial odd
        pos, neg = scores[labels == 1], scores[labels == 0]
        want = ((pos[:, None] > neg[None, :]).sum() +
                0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))
        assert roc_auc(labels, scores) == pytest.approx(want, abs=1e-12), trial
        distinct = rng.permutation(n).astype(np.float64)
        ranked = labels[np.argsort(-distinct)]
        want_ap = np.mean([ranked[:k + 1].mean() for k in np.flatnonzero(ranked == 1)])
        assert average_precision(labels, distinct) == pytest.approx(want_ap, abs=1e-12)
    assert roc_auc(np.array([1.0, 1.0, 0.0]), np.array([0.9, 0.5, 0.5])) == 0.75
    assert math.isnan(roc_auc(np.ones(3), np.arange(3.0)))
    assert average_precision(np.array([1, 0, 1]), np.array([0.9, 0.8, 0.1])) == \
        pytest.approx((1 + 2 / 3) / 2)


def _example(name):
    """examples/<name>.py imported as a module (examples/ first on the path, as when it
    runs), for its argument parser."""
    import importlib
    import sys
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    return importlib.import_module(name)


@pytest.mark.parametrize("name,args,words", [
    ("hydragnn_ising", ["--batch-size", "0"], "argument --batch-size: must be an integer "
                                             ">= 1, got 0"),
    ("hydragnn_ising", ["--lr", "nan"], "argument --lr: must be a number > 0, got nan"),
    ("hydragnn_ising", ["--width", "x"], "argument --width: 'x' is not an integer"),
    ("tgat_link_prediction", ["--fanouts", "10,0"], "argument --fanouts: must be an "
                                                   "integer >= 1, got 0"),
    ("tgat_link_prediction", ["--max-batches", "-1"], "argument --max-batches: must be "
                                                     "an integer >= 0, got -1"),
    ("graphsage_large", ["--fanouts", "5,x"], "argument --fanouts: 'x' is not an integer"),
    ("graphsage_large", ["--dropout", "1"], "argument --dropout: must be below 1, got 1.0"),
    ("graphsage_large", ["--classes", "1"], "argument --classes: must be an integer >= 2"),
    # (hostile round: each of these was a traceback after MPI and the store were set up)
    ("graphsage_large", ["--scale", "0"], "argument --scale: must be a number > 0 and <= "
                                          "1000, got 0"),
    ("graphsage_large", ["--scale", "nan"], "argument --scale: must be a number > 0"),
    ("graphsage_large", ["--scale", "2000"], "argument --scale: must be a number <= 1000"),
    ("graphsage_large", ["--sampler-seed", "-5"], "argument --sampler-seed: must be an "
                                                  "integer >= 0"),
    ("hydragnn_ising", ["--seed", "-1"], "argument --seed: must be an integer >= 0 and <= "
                                         "9223372036854775807, got -1"),
    ("tgat_link_prediction", ["--seed", str(2 ** 63)], "argument --seed: must be an "
                                                       "integer <= 9223372036854775807"),
    ("tgat_link_prediction", ["--num-nodes", "1"], "argument --num-nodes: must be an "
                                                   "integer >= 2, got 1"),
    ("tgn_link_prediction", ["--num-nodes", "1"], "argument --num-nodes: must be an "
                                                  "integer >= 2, got 1"),
    ("tgn_link_prediction", ["--p-repeat", "1.5"], "argument --p-repeat: must be a number "
                                                   "<= 1, got 1.5"),
    ("hydragnn_ising", ["--num-samples", str(10 ** 20)], "argument --num-samples: must be "
                                                         "an integer <= 9223372036854775807"),
    ("tgn_link_prediction", ["--partners", "-3"], "argument --partners: must be an integer "
                                                  ">= 0, got -3"),
    ("tgn_link_prediction", ["--checkpoint", "/dev/null/ck"], "argument --checkpoint: "
                                                              "/dev/null/ck: /dev/null is "
                                                              "not a directory"),
    ("hydragnn_ising", ["--checkpoint", "/dev/null"], "argument --checkpoint: /dev/null "
                                                      "exists and is not a directory"),
    # a width the job's rank count cannot have (one rank here): argparse's line, not the
    # store's traceback on every rank once the data was made
    ("hydragnn_ising", ["--width", "2"], "--width 2: width=2 out of range: allowed 1 <= "
                                         "width <= 1 (the communicator size)"),
    ("graphsage_large", ["--width", "3"], "--width 3: width=3 out of range"),
    ("tgat_link_prediction", ["--width", "2"], "--width 2: width=2 out of range"),
    ("tgn_link_prediction", ["--width", "4"], "--width 4: width=4 out of range"),
    ("traffic_index_batching", ["--width", "2"], "--width 2: width=2 out of range"),
    ("dynamic_graph_forecast", ["--width", "2"], "--width 2: width=2 out of range"),
    # options that do nothing in that combination (they were accepted silently) and an
    # empty path (it meant the built-in default)
    ("hydragnn_ising", ["--resume-epoch", "1"], "--resume-epoch needs --resume"),
    ("hydragnn_ising", ["--data-dir", "/tmp"], "--data-dir is where --source pickle or "
                                               "adios writes its files"),
    ("hydragnn_ising", ["--source", "pickle", "--data-dir", "/dev/null"],
     "argument --data-dir: /dev/null exists and is not a directory"),
    ("tgn_link_prediction", ["--mailbox", "5"], "--mailbox is for --model apan (--model "
                                                "tgn keeps one mail per node)"),
    ("tgat_link_prediction", ["--chunks", "7"], "--chunks 7 must divide --batch-size 200"),
    ("tgat_link_prediction", ["--data", ""], "argument --data: an empty path"),
    ("dynamic_graph_forecast", ["--data", ""], "argument --data: an empty path"),
    ("graphsage_large", ["--ogb", ""], "argument --ogb: an empty path"),
    ("tgn_link_prediction", ["--jodie", ""], "argument --jodie: an empty path"),
])
def test_examples_refuse_bad_options_naming_them(name, args, words, capsys):
    """The examples' options out of range end them through argparse (exit code 2, the
    option and its range named) before torch or the store is set up (``--width``
    against the job's rank count: ``ddstore.cli.check_width``); the recurrent examples'
    shared options too (graph_gru.example_parser)."""
    assert words in argparse_exit(capsys, 2, _example(name).parse_args, args)[1]
    assert _example(name).parse_args([]) is not None  # the defaults pass


@pytest.mark.parametrize("name,option,words", [
    ("hydragnn_ising", "--width WIDTH", "ranks per replica (default: all ranks)"),
    ("tgn_link_prediction", "--mailbox MAILBOX", "APAN only (default: 10)"),
    ("graphsage_large", "--width WIDTH", "ranks per replica (default all)")])
def test_example_help_says_each_default_once(name, option, words, capsys):
    """An option whose help names its default says it once ("default: all ranks
    (default: None)" before)."""
    out = " ".join(argparse_exit(capsys, 0, _example(name).parse_args, ["--help"])[0]
                   .split())
    said = out.split(f"{option} ", 1)[1].split(" --", 1)[0]
    assert said.endswith(words) and said.count("default") == 1, said


@pytest.mark.parametrize("args,words", [
    (["--epochs", "0"], "argument --epochs: must be an integer >= 1, got 0"),
    (["--hidden", "-3"], "argument --hidden: must be an integer >= 1, got -3"),
    (["--lr", "0"], "argument --lr: must be a number > 0, got 0"),
    (["--seed", "-1"], "argument --seed: must be an integer >= 0"),  # (was numpy's error)
])
def test_recurrent_examples_shared_options_refuse_bad_values(args, words, capsys):
    p = _example("graph_gru").example_parser("doc", "data", batch_size=16)
    assert words in argparse_exit(capsys, 2, p.parse_args, args)[1]


def test_graphsage_eval_sample_is_the_same_at_every_rank_count():
    """graphsage_large's evaluation sample: every ceil(n / limit)-th node of the split
    whatever the rank count (each rank strode through its own share from its start: the
    sample, and so the accuracies, changed with the rank count)."""
    import ddstore
    sample = _example("graphsage_large").eval_sample
    split = np.random.default_rng(0).permutation(10_007)
    for limit in (0, 1, 1000, 3333, 20_000):
        step = int(np.ceil(len(split) / limit)) if limit and len(split) > limit else 1
        for size in (1, 2, 3, 7):
            parts = [sample(split[slice(*ddstore.partition(len(split), size, r))],
                            len(split), limit, r, size) for r in range(size)]
            assert np.concatenate(parts).tolist() == split[::step].tolist(), (limit, size)


def test_hydragnn_lattice_beyond_memory_named_as_its_option(capsys):
    """--lattice beyond the node's memory: refused first thing, agreed over the ranks
    (each has its own node's memory), naming the option and the largest that fits (as
    "lattice size=" before, by every rank once torch and the store had started)."""
    err = argparse_exit(capsys, 2, _example("hydragnn_ising").main,
                        ["--lattice", str(10 ** 6)])[1]
    assert re.search(r"error: --lattice 1000000 \(1000000000000000000 atoms\) needs .*; "
                     r"allowed: --lattice <= \d+", err), err


def test_resume_from_what_is_not_this_examples_checkpoint(tmp_path, capsys):
    """--resume of a missing directory, of one without a training state, and of another
    example's checkpoint (a KeyError traceback before) end with a message naming it."""
    import torch
    example = _example("hydragnn_ising")
    other = tmp_path / "traffic"
    other.mkdir()
    torch.save({"epoch": 1, "label": "x", "model": {}}, other / "epoch-1.pt")
    # the traffic example's state has "args", "ranks" and "model" too (its settings then
    # failed with an AttributeError on every rank)
    traffic = tmp_path / "traffic2"
    traffic.mkdir()
    torch.save({"epoch": 3, "label": "x", "model": {}, "ranks": 2,
                "args": {"data": "pems.h5", "horizon": 12}}, traffic / "epoch-3.pt")
    # refused first thing, agreed over the ranks (each looks at its own files), exit code
    # 2 as for a bad option (it was exit code 1 after torch and the store had started)
    from mpi4py import MPI
    from ddstore.cli import check_resume
    for path, words in ((tmp_path / "none", "no such directory"),
                        (tmp_path, "no epoch-<k>.pt in it (not a directory that this "
                                   "example's --checkpoint wrote)")):
        err = argparse_exit(capsys, 2, check_resume, MPI.COMM_SELF, str(path))[1]
        assert err.count(f"error: --resume {path}: {words}") == 1, err
        err = argparse_exit(capsys, 2, example.main, ["--resume", str(path)])[1]
        assert err.count(f"error: --resume {path}: {words}") == 1, err
    err = argparse_exit(capsys, 2, example.main,
                        ["--resume", str(other), "--resume-epoch", "2"])[1]
    assert f"--resume {other}: no training state for epoch 2 (saved: [1])" in err, err
    (other / "epoch-\u00b2.pt").write_bytes(b"")  # ("²".isdigit(): not an epoch here)
    (other / "epoch-02.pt").write_bytes(b"")  # (not the name epoch 2's state is read by)
    assert check_resume(MPI.COMM_SELF, str(other)) == [1]
    for path, words in ((other, "epoch-1.pt was not written by this example's "
                                "--checkpoint"),
                        (traffic, "epoch-3.pt was not written by this example's "
                                  "--checkpoint")):
        with pytest.raises(SystemExit) as info:
            example.load_state(example.parse_args(["--resume", str(path)]), None)
        assert str(info.value) == f"--resume {path}: {words}" or \
            str(info.value).startswith(f"--resume {path}: {words}"), info.value


class _Touch:
    """Unpickled, creates a file: what a checkpoint from someone else could do."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("name,state_file", [
    ("hydragnn_ising", "epoch-1.pt"), ("traffic_index_batching", "epoch-1.pt")])
def test_resume_runs_no_code_from_the_checkpoint(tmp_path, name, state_file):
    """--resume reads the training state with torch.load(weights_only=True): tensors
    and Python values only.  A state file whose unpickling would run code is refused
    naming it, and the code does not run (weights_only=False ran it)."""
    import torch
    example = _example(name)
    marker = tmp_path / "ran"
    torch.save({"epoch": 1, "label": "x", "model": {}, "args": {}, "ranks": 1,
                "evil": _Touch(str(marker))}, tmp_path / state_file)
    with pytest.raises(SystemExit) as info:
        if name == "hydragnn_ising":
            example.load_state(example.parse_args(["--resume", str(tmp_path)]), None)
        else:
            example.load_state(example.parse_args(["--resume", str(tmp_path)]))
    assert f"{state_file} cannot be read as this example's training state" in \
        str(info.value), info.value
    assert not marker.exists()


def test_traffic_npy_data_read_by_the_checked_reader(tmp_path):
    """--data x.npy goes through ddstore's load_npy (block reads, dtype and shape
    checked): the series is the file's values; an object array is refused naming the
    file (np.load raised "Object arrays cannot be loaded", a missing file
    FileNotFoundError)."""
    import argparse
    from ddstore.errors import DDStoreValueError
    example = _example("traffic_index_batching")
    arr = np.random.default_rng(0).standard_normal((30, 4)).astype(np.float32)
    np.save(tmp_path / "s.npy", arr)
    series, label = example.read_series(argparse.Namespace(data=str(tmp_path / "s.npy"),
                                                           seed=0))
    assert label == "s.npy"
    np.testing.assert_array_equal(series.read(0, 30)[:, :, 0], arr)
    np.save(tmp_path / "o.npy", np.array([[1, None]], dtype=object), allow_pickle=True)
    for name, words in (("o.npy", "has dtype object; allowed"), ("none.npy",
                                                                 "no such file")):
        with pytest.raises(DDStoreValueError, match=f"{tmp_path / name}.*{words}"):
            example.read_series(argparse.Namespace(data=str(tmp_path / name), seed=0))


def test_cli_types():
    """ddstore.cli's argparse types: the value when in range, else argparse's error."""
    import argparse
    from ddstore.cli import at_least, int_list, output_dir, seed
    assert at_least(1)("3") == 3 and seed()("0") == 0 and at_least(0, most=9)("9") == 9
    assert at_least(0, float, above=True)("0.5") == 0.5
    assert int_list(-1)("15, 10,-1") == (15, 10, -1)
    for conv, text, words in ((at_least(1), "0", ">= 1, got 0"),
                              (at_least(0, float, above=True), "0", "> 0, got 0"),
                              (at_least(0, float), "nan", ">= 0, got nan"),
                              (at_least(1), "2.5", "'2.5' is not an integer"),
                              (int_list(1), "3,,4", "'' is not an integer"),
                              (at_least(0, most=9), "10", "must be an integer <= 9, got 10"),
                              (at_least(0, float, most=1), "inf", "finite number, got inf"),
                              (at_least(0, float, above=True), "inf", "finite number, got inf"),
                              (seed(), "-1", ">= 0 and <= 9223372036854775807, got -1"),
                              (output_dir, "", "an empty path")):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(words)):
            conv(text)


def test_a_list_starting_with_a_negative_number_is_its_options():
    """``--fanouts -1,5`` (argparse took ``-1,5`` for an option: 'expected one
    argument') is given to ``--fanouts``; after ``--`` nothing is joined, and ``--``
    itself takes nothing."""
    from ddstore.cli import ArgumentParser, int_list
    p = ArgumentParser()
    p.add_argument("--fanouts", type=int_list(-1), default="15,10,5")
    p.add_argument("--shift", type=int, default=0)
    p.add_argument("rest", nargs="*")
    for argv, fanouts, shift, rest in (
            (["--fanouts", "-1,5"], (-1, 5), 0, []),
            (["--fanouts", "-1, 2", "--shift", "-3"], (-1, 2), -3, []),
            (["--fanouts=-1,5"], (-1, 5), 0, []),
            (["--", "-1,5"], (15, 10, 5), 0, ["-1,5"]),
            (["--fanouts", "-1", "--", "--fanouts", "-1,5"], (-1,), 0,
             ["--fanouts", "-1,5"])):
        got = p.parse_args(argv)
        assert (got.fanouts, got.shift, got.rest) == (fanouts, shift, rest), argv


def test_checkpoint_directory_of_another_run_refused(tmp_path, capsys):
    """An example's --checkpoint goes into a new or empty directory, or the one it
    resumes: a directory holding another run's epochs is refused (a later --resume
    took the last epoch of either run, with the other's store)."""
    from ddstore.cli import checkpoint_conflict
    ck = tmp_path / "ck"
    assert checkpoint_conflict(str(ck), None) is None  # new
    ck.mkdir()
    assert checkpoint_conflict(str(ck), None) is None  # empty
    (ck / "epoch-2.pt").write_bytes(b"x")
    assert checkpoint_conflict(str(ck), str(ck)) is None  # going on with it
    for resume in (None, str(tmp_path)):
        assert "already holds another run's files (epoch-2.pt)" in \
            checkpoint_conflict(str(ck), resume)
    # files no run wrote: no --resume offered (it would find no epoch)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    assert checkpoint_conflict(str(other), None) == (
        f"--checkpoint {other} holds files that no run of an example wrote (notes.txt): "
        f"give a new or empty directory")

    # the examples claim their directory (collective, rank 0 looking): a directory of
    # another run refused, and of two runs started at once with one new directory (both
    # found it empty: they wrote one mixed checkpoint) the second
    from mpi4py import MPI
    from ddstore import cli
    from ddstore.cli import RUN_MARK, claim_checkpoint
    new = tmp_path / "new" / "ck"
    claim_checkpoint(MPI.COMM_SELF, str(new), None)
    assert os.listdir(new) == [RUN_MARK] and "pid" in (new / RUN_MARK).read_text()
    for resume in (None, str(tmp_path)):
        err = argparse_exit(capsys, 2, claim_checkpoint, MPI.COMM_SELF, str(new), resume)[1]
        assert f"--checkpoint {new} is claimed by another run that has saved no epoch " \
               f"yet ({new / RUN_MARK})" in err, err
    claim_checkpoint(MPI.COMM_SELF, str(new), str(new))  # going on with it: taken
    # --resume and --checkpoint of one directory that does not exist (a batch script's
    # first run): told as such, nothing made (the claim made it: "no epoch-<k>.pt in it")
    nothere = tmp_path / "nothere"
    err = argparse_exit(capsys, 2, claim_checkpoint, MPI.COMM_SELF, str(nothere),
                        str(nothere))[1]
    assert f"--resume {nothere}: no such directory" in err and not nothere.exists(), err
    # a run that saved nothing there (a refused --resume, nothing to train) gives the
    # directory back at exit: the marker, and the directory it made (a corrected command
    # was refused as "claimed by another run")
    at_exit = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli.atexit, "register", lambda fn, *a: at_exit.append((fn, a)))
        for d in ("given", "kept"):
            claim_checkpoint(MPI.COMM_SELF, str(tmp_path / d), None)
    (tmp_path / "kept" / "epoch-1.pt").write_bytes(b"x")  # saved something: kept
    for fn, a in at_exit:
        fn(*a)
    assert not (tmp_path / "given").exists() and (tmp_path / "kept" / RUN_MARK).exists()
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    err = argparse_exit(capsys, 2, claim_checkpoint, MPI.COMM_SELF, str(dangling), None)[1]
    assert f"--checkpoint {dangling}: a symbolic link to {str(tmp_path / 'nowhere')!r}, " \
           f"which does not exist\n" in err, err  # (one line, no "(ranks [0])")
    real = os.listdir
    racer = tmp_path / "race"
    with pytest.MonkeyPatch.context() as mp:  # the other run listed it empty too
        mp.setattr(os, "listdir", lambda p: [] if str(p) == str(racer) else real(p))
        claim_checkpoint(MPI.COMM_SELF, str(racer), None)
        err = argparse_exit(capsys, 2, claim_checkpoint, MPI.COMM_SELF, str(racer), None)[1]
    assert "another run claimed it as this one started" in err, err
    for example in ("hydragnn_ising", "traffic_index_batching", "tgn_link_prediction"):
        mod = _example(example)
        assert mod.claim_checkpoint is claim_checkpoint
        with pytest.MonkeyPatch.context() as mp:  # main's first step after its args
            mp.setattr(sys, "argv", [example, "--checkpoint", str(ck)])
            mp.setattr(mod, "claim_checkpoint", lambda *a, **k: (_ for _ in ()).throw(
                SystemExit(f"claimed {a[1:3]}")))
            with pytest.raises(SystemExit, match=re.escape(f"claimed ({str(ck)!r}, None)")):
                mod.main()


def test_traffic_resume_refuses_other_settings(tmp_path):
    """traffic_index_batching.py --resume with another --hidden, --lr, --horizon or
    --data: refused naming them (the horizon was taken from the checkpoint, the rate
    from the optimizer's state, the data ignored, without a word; another --hidden
    ended in a size mismatch inside load_state_dict)."""
    import torch
    mod = _example("traffic_index_batching")
    saved = mod.parse_args([])
    torch.save({"epoch": 0, "label": "synthetic", "model": {},
                "args": {k: getattr(saved, k) for k in mod.STATE_KEYS}},
               str(tmp_path / "epoch-0.pt"))
    # (--width is checked against this process's one rank when parsed: 1 here)
    same = mod.parse_args(["--resume", str(tmp_path), "--epochs", "5", "--width", "1"])
    assert "width" not in mod.STATE_KEYS  # --epochs and --width may change
    assert mod.load_state(same)["epoch"] == 0
    for extra, key in ((["--hidden", "64"], "hidden"), (["--lr", "0.5"], "lr"),
                       (["--horizon", "8"], "horizon"), (["--data", "x.npy"], "data")):
        args = mod.parse_args(["--resume", str(tmp_path)] + extra)
        with pytest.raises(SystemExit, match=f"other settings: .*--{key}: saved"):
            mod.load_state(args)


def test_tgn_resume_of_what_is_not_its_checkpoint_refused(tmp_path, capsys):
    """tgn_link_prediction.py --resume of a missing or empty directory, or of another
    example's checkpoint: argparse's one line (a traceback on every rank, then
    MPI_Abort, from the restore before)."""
    parse = _example("tgn_link_prediction").parse_args
    (tmp_path / "hydra" / "store").mkdir(parents=True)
    (tmp_path / "hydra" / "epoch-1.pt").write_bytes(b"x")
    for d, words in ((tmp_path / "none", "no such directory"),
                     (tmp_path, "no store/ and training-<epoch>.pt in it"),
                     (tmp_path / "hydra", "no store/ and training-<epoch>.pt in it")):
        err = argparse_exit(capsys, 2, parse, ["--resume", str(d)])[1]
        assert f"--resume {d}: {words}" in err, err


def test_traffic_data_file_checked_once(tmp_path, capsys):
    """traffic_index_batching.py --data of a missing file or another kind: argparse's
    one line (a traceback on every rank before)."""
    parse = _example("traffic_index_batching").parse_args
    (tmp_path / "dir.npy").mkdir()
    for data, words in ((str(tmp_path / "none.json"), "no such file"),
                        (str(tmp_path / "dir.npy"), "not a file"),
                        (str(tmp_path / "x.csv"),
                         "expected a .json, .h5 or .npy file, or chickenpox")):
        err = argparse_exit(capsys, 2, parse, ["--data", data])[1]
        assert f"--data {data}: {words}" in err, err


def test_tgn_memory_times_shifted_exactly():
    """tgn_link_prediction.py's memory timestamps are ``t - t_min + 1`` taken exactly in
    the graph's time dtype: int64 Unix nanoseconds beyond 2**53 gave [0, 0, 0, 3584]
    for ``T0 + [0, 1, 100, 3600]`` (0 is its 'never'), through a float offset."""
    from mpi4py import MPI
    from ddstore import DDStore, temporal as tg
    tgn = _example("tgn_link_prediction")
    for t0, dtype in ((1700000000000000001, np.int64), (-2 ** 63, np.int64),
                      (1.5e9, np.float64)):
        t = np.array([t0, t0 + 1, t0 + 100, t0 + 3600], dtype)
        with DDStore(MPI.COMM_SELF) as store:
            g = tg.TemporalGraph.from_arrays(store, "g", [0, 1, 2, 3], [1, 2, 3, 0], t)
            shift = tgn.time_shift(g, MPI.COMM_SELF)
            got = shift(t[::-1])
        assert got.dtype == np.float64 and got.tolist() == [3601.0, 101.0, 2.0, 1.0], \
            (t0, got)


def test_examples_name_the_horizons_range_once(tmp_path):
    """--horizon too long for the data: one message naming the largest that gives every
    split a whole window (dynamic_graph_forecast.py said ``<= 60`` from the series'
    check at 61, then ``<= 6`` and an ``overlap=True`` it has no option for at 60);
    traffic_index_batching.py also names the range with --overlap."""
    import argparse
    from ddstore import spatiotemporal as st
    dynamic = _example("dynamic_graph_forecast")
    tennis = os.path.join(ROOT, "tests", "data", "twitter_tennis_rg17.json")
    T = st.load_pgt_json(tennis).num_steps
    most = st.largest_horizon(T)
    for h in (most + 1, T // 2 + 1):
        with pytest.raises(SystemExit, match=rf"^--horizon {h}: twitter_tennis_rg17.json "
                                             rf"has {T} steps, .*--horizon <= {most} gives "
                                             rf"every split a whole window[^;]*$"):
            dynamic.load(argparse.Namespace(data=tennis, horizon=h))
    assert dynamic.load(argparse.Namespace(data=tennis, horizon=most))[3] == \
        "twitter_tennis_rg17.json"
    traffic = _example("traffic_index_batching")
    pox = os.path.join(ROOT, "tests", "data", "chickenpox.json")
    T = st.load_pgt_json(pox).num_steps
    most, pgt = (st.largest_horizon(T, overlap=o) for o in (False, True))
    with pytest.raises(SystemExit, match=rf"--horizon <= {most} gives .*; with --overlap "
                                         rf"\(PGT's split\), --horizon <= {pgt}$"):
        traffic.load_series(argparse.Namespace(data=pox, horizon=most + 1, overlap=False,
                                               seed=0))
    for overlap, h in ((False, most), (True, pgt), (False, None)):
        assert traffic.load_series(argparse.Namespace(
            data=pox, horizon=h, overlap=overlap, seed=0))[1:] == ("chickenpox.json",
                                                                    h or 4)
    # --overlap at an odd T: 47 is below the largest (48) yet leaves 'val' no window
    # (it passed the check and failed inside the dataset)
    np.save(tmp_path / "odd.npy", np.zeros((101, 3), np.float32))
    odd = str(tmp_path / "odd.npy")
    with pytest.raises(SystemExit, match=r"^--horizon 47: odd.npy has 101 steps; with --overlap the 8 "
                             r"window starts cut 70/10/20 % round to none for a split at "
                             r"this horizon \(not at 48, .*without --overlap every "
                             r"--horizon <= 5$"):
        traffic.load_series(argparse.Namespace(data=odd, horizon=47, overlap=True, seed=0))
    assert traffic.load_series(argparse.Namespace(data=odd, horizon=48, overlap=True,
                                                  seed=0))[2] == 48


def test_traffic_refuses_a_dynamic_graph_and_resumes_without_data(tmp_path):
    """traffic_index_batching.py's load_series refuses a dynamic-graph JSON (Twitter
    tennis: it trained on a graph of no edges, exit 0) naming the example for it; its
    checkpoint keeps --data by resolved path, and a resume takes --data left out or
    named from elsewhere (refused before: the file is not read on resume)."""
    import argparse
    traffic = _example("traffic_index_batching")
    tennis = os.path.join(ROOT, "tests", "data", "twitter_tennis_rg17.json")
    with pytest.raises(SystemExit, match=r"a dynamic graph \(edges per step\): see "
                                         r"examples/dynamic_graph_forecast.py"):
        traffic.read_series(argparse.Namespace(data=tennis, seed=0))
    import torch
    here = os.path.join(ROOT, "tests", "data", "chickenpox.json")
    settings = dict(horizon=4, overlap=False, hidden=8, lr=0.01, batch_size=16,
                    sampler="global", seed=0)
    state = {"epoch": 0, "label": "chickenpox.json", "model": {},
             "args": dict(settings, data=traffic.data_key(os.path.relpath(here)))}
    assert state["args"]["data"] == os.path.realpath(here)
    torch.save(state, tmp_path / "epoch-0.pt")
    for given in (None, here, os.path.relpath(here)):
        args = argparse.Namespace(resume=str(tmp_path), data=given, **settings)
        assert traffic.load_state(args)["epoch"] == 0 and args.data == here
    other = str(tmp_path / "other.json")
    with pytest.raises(SystemExit, match=r"--data: saved '.*chickenpox.json', now "
                                         r"'.*other.json'"):
        traffic.load_state(argparse.Namespace(resume=str(tmp_path), data=other,
                                              **settings))


@pytest.mark.mpi
def test_graphsage_npy_without_training_labels(tmp_path_factory):
    """graphsage_large.py --npy: a data set without a training split, without labels, or
    whose training nodes all have y < 0 is refused with one line from rank 0 (each rank
    printed its own, unprefixed, or a traceback) and exit code 1 on every rank; with one
    labelled training node the epoch's loss is the mean over every rank's batches that
    had one (it printed nan).  (The runs: the examples' job, examples_job._npy_folders.)"""
    for name, words in NPY_REFUSED.items():
        out = example_output(f"graphsage npy {name}", tmp_path_factory)
        lines = [ln for ln in out.splitlines() if words in ln]
        assert out.splitlines().count("--- exit code 1") == 2 and len(lines) == 1, out
        assert lines[0].startswith("graphsage_large.py: error: "), out
    out = example_output("graphsage npy one", tmp_path_factory)
    assert re.search(r"epoch 1: loss \d+\.\d+ \(GraphSAGE\), \d+\.\d+ \(MLP\)", out), out


def test_the_forty_second_sessions_examples_round(tmp_path, capsys, monkeypatch):
    """What a probe of the examples found: ``hydragnn_ising.py --resume D --resume-epoch 1
    --checkpoint D`` replaced epoch 2 of the run in D and kept its epoch 3 (two runs in
    one directory, which a later --resume mixes): refused; ``tgn_link_prediction.py
    --resume`` of a ``--jodie`` run refused the same file named otherwise, or left out
    (the resume reads no file), where the traffic example takes both."""
    import torch
    from mpi4py import MPI
    from ddstore.cli import claim_checkpoint
    d = tmp_path / "run"
    d.mkdir()
    for k in (1, 2, 3):
        (d / f"epoch-{k}.pt").write_bytes(b"")
    err = argparse_exit(capsys, 2, claim_checkpoint, MPI.COMM_SELF, str(d), str(d), 1)[1]
    assert err.count(f"--checkpoint {d} is the --resume directory, which holds epochs "
                     f"after --resume-epoch 1 (epoch-2.pt, epoch-3.pt); going on from "
                     f"epoch 1 there would mix two runs' epochs: give another "
                     f"--checkpoint directory") == 1, err
    for epoch in (3, None):  # the last epoch, or the default (the last): nothing after it
        claim_checkpoint(MPI.COMM_SELF, str(d), str(d), epoch)
    claim_checkpoint(MPI.COMM_SELF, str(tmp_path / "other"), str(d), 1)  # another place
    assert sorted(os.listdir(d)) == ["epoch-1.pt", "epoch-2.pt", "epoch-3.pt"]
    tgn = _example("tgn_link_prediction")
    (tmp_path / "mini.csv").write_text("x")
    monkeypatch.chdir(tmp_path)
    args = tgn.parse_args(["--jodie", "mini.csv"])
    options = {k: getattr(args, k) for k in tgn.SAME_OPTIONS}
    options["jodie"] = tgn.jodie_key("mini.csv")  # as save_checkpoint keeps it
    torch.save({"epoch": 2, "options": options}, tmp_path / "training-0002.pt")
    (tmp_path / "store").mkdir()  # (what parse_args looks for in a --resume directory)

    class Store:  # what load_training_state reads of the restored store
        def annotation(self, kind, name):
            return type("A", (), {"meta": {"epoch": 2}})()
    for given in (["--jodie", str(tmp_path / "mini.csv")], ["--jodie", "./mini.csv"], []):
        args = tgn.parse_args(given + ["--resume", str(tmp_path)])
        assert tgn.load_training_state(str(tmp_path), Store(), args)["epoch"] == 2, given
        assert args.jodie == str(tmp_path / "mini.csv")
    (tmp_path / "other.csv").write_text("y")
    args = tgn.parse_args(["--jodie", "other.csv", "--resume", str(tmp_path)])
    with pytest.raises(SystemExit, match="--jodie"):
        tgn.load_training_state(str(tmp_path), Store(), args)


@pytest.mark.mpi
def test_hydragnn_data_dir_holding_a_users_file_refused_once(tmp_path_factory):
    """``hydragnn_ising.py --source adios --data-dir D``, D holding a user's own
    ``train.bp``: the file kept, one line naming --data-dir from rank 0, exit code 1 on
    every rank (it was the same line from every rank, naming no option).  (The run: the
    examples' 2-rank job.)"""
    from examples_job import USER_FILE, job_folder
    out = example_output("hydragnn data-dir of a user", tmp_path_factory)
    user = job_folder(tmp_path_factory) / "userdata"
    assert out.splitlines().count("--- exit code 1") == 2, out
    assert out.count(f"hydragnn_ising.py: error: --data-dir {user}: writing adios files "
                     f"failed: DDStoreValueError: ") == 1, out
    assert out.count("writing adios files failed") == 1, out
    assert (user / "train.bp").read_text() == USER_FILE
