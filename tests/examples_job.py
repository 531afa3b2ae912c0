"""The examples' small runs on 2 ranks, in the session's scripts job, with the benchmarks
and the README blocks (``conftest.scripts_job``: torch and PyG imported once per rank,
not once per run, the suite's time): every example's small
settings (:data:`SMALL`, checked by tests/test_examples.py), the memory models' runs,
the checkpoint / resume runs of tests/test_examples_resume.py (a run that writes a
checkpoint comes before the run that resumes from it), and the runs of
``scripts/gpu_examples.py --device cpu --small`` (tests/test_examples_prefetch.py).
:func:`example_output` gives what one run printed; :func:`job_folder` where the runs
write."""
import importlib.util
import os

import numpy as np

from conftest import ROOT, register_scripts, script_output, scripts_job

EXAMPLES = os.path.join(ROOT, "examples")

# example -> (ranks, small-settings arguments)
SMALL = {
    "hydragnn_ising.py": (2, ["--num-samples", "600", "--epochs", "3", "--source", "adios",
                              "--quiet"]),
    "traffic_index_batching.py": (2, ["--width", "2", "--sampler", "batch", "--epochs", "2",
                                      "--batch-size", "64", "--hidden", "8"]),
    "dynamic_graph_forecast.py": (2, ["--epochs", "2", "--hidden", "8", "--width", "2"]),
    "tgat_link_prediction.py": (2, ["--num-nodes", "200", "--num-edges", "4000",
                                    "--epochs", "2", "--max-batches", "4", "--batch-size",
                                    "100", "--chunks", "4", "--width", "1", "--strategy",
                                    "recent", "--hidden", "16"]),
    "tgn_link_prediction.py": (2, ["--num-nodes", "200", "--num-edges", "4000", "--epochs",
                                   "2", "--max-batches", "4", "--batch-size", "100",
                                   "--width", "1", "--hidden", "16", "--memory-dim", "16"]),
    "graphsage_large.py": (2, ["--scale", "0.002", "--classes", "8", "--epochs", "8",
                               "--batch-size", "64", "--hidden", "32", "--fanouts", "10,5",
                               "--eval-nodes", "1000"]),
    # the GRU cell shared by the two recurrent examples; run as a script it checks itself
    # (no store, no MPI: one rank)
    "graph_gru.py": (1, []),
}
MEMORY_MODEL_ARGS = ["--baseline", "none", "--max-batches", "4", "--batch-size", "100",
                     "--hidden", "16", "--memory-dim", "16"]
PIPELINED_ARGS = ["--model", "tgn", "--baseline", "none", "--epochs", "2", "--max-batches",
                  "6", "--batch-size", "100", "--hidden", "16", "--memory-dim", "16",
                  "--num-nodes", "200", "--num-edges", "2000", "--width", "2"]
# the resume runs (tests/test_examples_resume.py)
HYDRAGNN = ["--num-samples", "160", "--epochs", "3", "--batch-size", "16", "--hidden", "8",
            "--layers", "1", "--lattice", "3", "--quiet"]
TRAFFIC = ["--width", "2", "--sampler", "batch", "--batch-size", "64", "--hidden", "8"]
TEMPORAL = ["--baseline", "none", "--max-batches", "3", "--batch-size", "100", "--hidden",
            "16", "--memory-dim", "16", "--num-nodes", "200", "--num-edges", "1500"]
APAN = TEMPORAL + ["--model", "apan", "--mailbox", "4"]
# the HydraGNN example's evaluation before training: 41 validation graphs of 410
HYDRA_EVAL = ["--epochs", "0", "--num-samples", "410", "--quiet"]




def gpu_examples():
    """scripts/gpu_examples.py (what scripts/gpu_check.sh runs on a GPU) as a module."""
    spec = importlib.util.spec_from_file_location(
        "gpu_examples", os.path.join(ROOT, "scripts", "gpu_examples.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gpu_examples_argv(tmp):
    """The command line of scripts/gpu_examples.py whose runs the job makes: on the CPU,
    small, the main job on 2 ranks saving its model under ``tmp/gpu-examples``."""
    return ["--device", "cpu", "--small", "--ranks", "2", "--checkpoint-dir",
            str(tmp / "gpu-examples"), "--out", str(tmp / "gpu-examples")]


def job_folder(tmp_path_factory):
    """The folder the job's runs write to (checkpoints, the JODIE file APAN reads)."""
    tmp = tmp_path_factory.getbasetemp() / "examples-job"
    tmp.mkdir(exist_ok=True)
    return tmp


def two_rank_runs(tmp):
    """{key: (example, arguments[, exit code])} of every run of the job, in order
    (``tmp``: see :func:`job_folder`); a run with an exit code is expected to end with
    it on every rank."""
    runs = {name: (name, args) for name, (nprocs, args) in SMALL.items() if nprocs == 2}
    runs["jodie"] = ("tgn_link_prediction.py",
                     ["--model", "jodie", "--epochs", "1"] + MEMORY_MODEL_ARGS
                     + ["--num-nodes", "200", "--num-edges", "2000", "--width", "2"])
    runs["apan"] = ("tgn_link_prediction.py",
                    ["--model", "apan", "--epochs", "1"] + MEMORY_MODEL_ARGS
                    + ["--jodie", str(tmp / "mini.csv"), "--width", "1", "--mailbox", "4"])
    # batches of one event over two ranks: a rank's share of a batch is empty (the
    # models' reshapes of empty tensors crashed); the TGAT baseline runs tgat's code
    runs["tgn batch 1"] = ("tgn_link_prediction.py",
                           ["--num-nodes", "100", "--num-edges", "1000", "--epochs", "1",
                            "--max-batches", "3", "--batch-size", "1", "--hidden", "16",
                            "--memory-dim", "16", "--width", "2"])
    runs["blocking commit"] = ("tgn_link_prediction.py", PIPELINED_ARGS)
    runs["pipelined commit"] = ("tgn_link_prediction.py",
                                PIPELINED_ARGS + ["--pipelined-commit"])
    hydra, traffic, tgn = ("hydragnn_ising.py", "traffic_index_batching.py",
                           "tgn_link_prediction.py")
    runs["hydragnn whole"] = (hydra, HYDRAGNN + ["--width", "2", "--checkpoint",
                                                 str(tmp / "hydra-whole")])
    runs["hydragnn resumed"] = (hydra, HYDRAGNN + [
        "--width", "1", "--resume", str(tmp / "hydra-whole"), "--resume-epoch", "1",
        "--checkpoint", str(tmp / "hydra-resumed")])
    runs["traffic whole"] = (traffic, TRAFFIC + ["--epochs", "3"])
    runs["traffic first"] = (traffic, TRAFFIC + ["--epochs", "1", "--checkpoint",
                                                 str(tmp / "traffic")])
    runs["traffic resumed"] = (traffic, TRAFFIC + ["--epochs", "3", "--resume",
                                                   str(tmp / "traffic")])
    # a run sent again after it finished: nothing to train, said, and ends as usual
    # (at width 1: the batch sampler's blocks, and so the losses, change: said)
    runs["traffic idle"] = (traffic, TRAFFIC + ["--epochs", "1", "--width", "1", "--resume",
                                                str(tmp / "traffic")])
    runs["tgn whole"] = (tgn, TEMPORAL + ["--width", "2", "--epochs", "2", "--checkpoint",
                                          str(tmp / "tgn-whole")])
    runs["tgn first"] = (tgn, TEMPORAL + ["--width", "2", "--epochs", "1", "--checkpoint",
                                          str(tmp / "tgn-part")])
    runs["tgn resumed"] = (tgn, TEMPORAL + ["--width", "1", "--epochs", "2", "--resume",
                                            str(tmp / "tgn-part"), "--checkpoint",
                                            str(tmp / "tgn-part")])
    runs["apan first"] = (tgn, APAN + ["--width", "2", "--epochs", "1", "--checkpoint",
                                       str(tmp / "apan")])
    g = gpu_examples()
    for name, script, nprocs, args in g.planned_runs(g.parse_args(gpu_examples_argv(tmp))):
        assert nprocs == 2, (name, nprocs)  # (the job's rank count)
        runs[f"gpu_examples {name}"] = (script, args)
    # the HydraGNN example's evaluation on 2 ranks (its 1-rank twin: the 1-rank shared
    # job): 41 validation graphs of 410; a split of fewer graphs than ranks
    runs["hydragnn eval 410"] = (hydra, HYDRA_EVAL)
    runs["hydragnn eval 10"] = (hydra, ["--num-samples", "10", "--epochs", "1",
                                        "--batch-size", "4", "--quiet"])
    # --data-dir holding a user's own train.bp: refused (exit 1), one line, file kept
    user = tmp / "userdata"
    if str(user) not in _MADE:  # (once: a file the run removed is not made again)
        user.mkdir(exist_ok=True)
        (user / "train.bp").write_text(USER_FILE)
        _MADE.add(str(user))
    runs["hydragnn data-dir of a user"] = (hydra, ["--num-samples", "40", "--epochs", "1",
                                                   "--quiet", "--source", "adios",
                                                   "--data-dir", str(user)], 1)
    # graphsage_large.py --npy on folders without what training needs: refused (exit 1
    # on every rank), then one labelled training node (written by :func:`_npy_folders`)
    for name in NPY_REFUSED:
        runs[f"graphsage npy {name}"] = ("graphsage_large.py",
                                         ["--npy", str(tmp / f"npy-{name}"), "--epochs", "1"],
                                         1)
    # an example's --data that every rank opens and refuses (tests/test_cli.py)
    for name, (script, data, _) in DATA_REFUSED.items():
        runs[name] = (script, ["--data", data(tmp), "--epochs", "1"], 1)
    runs["graphsage npy one"] = ("graphsage_large.py", ["--npy", str(tmp / "npy-one"),
                                                        "--epochs", "1", "--batch-size", "16"])
    return runs


USER_FILE = "a user's own file\n"  # (in the --data-dir of a run: kept as it is)
_MADE = set()
# an example's --data refused on every rank: {run: (example, path of tmp, what it says)}
DATA_REFUSED = {
    "traffic bad npy": ("traffic_index_batching.py", lambda tmp: str(tmp / "bad.npy"),
                        "is not a readable .npy file"),
    "dynamic static data": ("dynamic_graph_forecast.py",
                            lambda tmp: os.path.join(ROOT, "tests", "data", "chickenpox.json"),
                            "not a dynamic graph (static graph: see "
                            "examples/traffic_index_batching.py)")}
# graphsage_large.py --npy folders refused, with what its one line says
NPY_REFUSED = {"notrain": "has no training split", "noy": "has no labels",
               "yneg": "no node of the training split has a label"}


def _npy_folders(tmp):
    """The --npy folders of the graphsage runs: 120 nodes, 600 edges both ways, 8
    features, 3 classes, splits 80/20/20; ``notrain`` without train_idx.npy, ``noy``
    without y.npy, ``yneg`` with every label -1, ``one`` with one labelled training
    node."""
    rng = np.random.default_rng(0)
    n = 120
    ei = rng.integers(0, n, (2, 600))
    one = rng.integers(0, 3, n)
    one[1:80] = -1
    for name, over in (("notrain", dict(train_idx=None)), ("noy", dict(y=None)),
                       ("yneg", dict(y=np.full(n, -1))), ("one", dict(y=one))):
        d = tmp / f"npy-{name}"
        d.mkdir(exist_ok=True)
        files = dict(edge_index=np.concatenate([ei, ei[::-1]], 1),
                     x=rng.standard_normal((n, 8)).astype(np.float32),
                     y=rng.integers(0, 3, n), train_idx=np.arange(80),
                     valid_idx=np.arange(80, 100), test_idx=np.arange(100, n))
        files.update(over)
        for k, v in files.items():
            if v is not None:
                np.save(d / f"{k}.npy", v)


def _runs(tmp_path_factory):
    """The job's runs (:func:`conftest.register_scripts`), with the JODIE file APAN
    reads."""
    tmp = job_folder(tmp_path_factory)
    path = tmp / "mini.csv"
    if not path.exists():  # APAN on a JODIE CSV (--jodie): a small one
        from ddstore import temporal as tg
        s = tg.synthetic_stream(200, 1500, seed=1, partners=3)
        tg.write_jodie(str(path), s.src % 80, s.dst % 120,
                       np.floor(s.t * 10).astype(np.int64), np.zeros(s.num_edges, np.int64),
                       s.edge_feat)
    _npy_folders(tmp)
    (tmp / "bad.npy").write_bytes(b"not an npy file")
    runs = two_rank_runs(tmp)
    # a bound per run that a hang cannot stretch to the suite's own (each takes seconds);
    # a run expected to exit non-zero on every rank: checks.py's --exit
    out = []
    for example, args, *code in runs.values():
        path = os.path.join(EXAMPLES, example)
        out.append(("--exit", [str(code[0]), path] + args) if code else (path, args))
    return out, 90


register_scripts("examples", _runs)


def example_output(key, tmp_path_factory):
    """What the 2-rank run ``key`` of :func:`two_rank_runs` printed (every rank, stdout
    and stderr), from the one job of all of them."""
    runs = two_rank_runs(job_folder(tmp_path_factory))
    job = scripts_job("examples", tmp_path_factory)
    return script_output(job, list(runs).index(key), f"{runs[key][0]} ({key})")
