"""The benchmarks' smoke runs on 2 ranks, in the session's scripts job
(``conftest.scripts_job`` running ``python -m ddstore.bench.<name>`` modules one after
another, with the examples and the README blocks: torch and PyG imported once per rank,
not once per run, the suite's time).  Each run writes its JSON into its own
folder; :func:`bench_output` gives what one run printed and that folder."""
from conftest import register_scripts, script_output, scripts_job

# key -> (module, arguments before --out); each run writes into <job folder>/<key>
RUNS = {
    "pyg": ("ddstore.bench.pyg", ["--scale", "0.001", "--batches", "2", "--batch-size",
                                  "64", "--transports", "auto,rma", "--options", "all"]),
    "pyg-workers": ("ddstore.bench.pyg", ["--scale", "0.001", "--batches", "2",
                                          "--batch-size", "64", "--widths", "2",
                                          "--workers", "2", "--in-memory", "skip"]),
    "temporal": ("ddstore.bench.temporal", ["--num-nodes", "300", "--num-edges", "20000",
                                            "--batch-size", "100", "--batches", "12",
                                            "--no-plot"]),
    "temporal-scale": ("ddstore.bench.temporal_scale", ["--sizes", "30000", "--batches",
                                                        "4"]),
    "checkpoint": ("ddstore.bench.checkpoint", ["--gb", "0.02", "--repeat", "1"]),
    "scale-graphs": ("ddstore.bench.scale", ["graphs", "--graphs", "600", "--check"]),
    "node-memory": ("ddstore.bench.node_memory", ["--quick"]),
    "gather": ("ddstore.bench.gather", ["--mb", "1,2", "--row-bytes", "8,256", "--calls",
                                        "3", "--batch-size", "64"]),
}
OUT_FILE = {"node-memory": "nm.json"}  # runs whose --out names a file in their folder


def _args(key, folder):
    module, args = RUNS[key]
    extra = ["--path", str(folder / "ising.bp")] if key == "scale-graphs" else []
    out = folder / OUT_FILE[key] if key in OUT_FILE else folder
    return ["-m", module] + args + extra + ["--out", str(out)]


def _runs(tmp_path_factory):
    """The job's runs (:func:`conftest.register_scripts`), each writing into its own
    folder."""
    base = _base(tmp_path_factory)
    runs = []
    for key in RUNS:
        (base / key).mkdir(parents=True, exist_ok=True)
        a = _args(key, base / key)
        runs.append((a[0], a[1:]))
    return runs, 120


def _base(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "bench-job"


register_scripts("benchmarks", _runs)


def bench_output(key, tmp_path_factory):
    """``(output, folder)``: what the run ``key`` of :data:`RUNS` printed (every rank,
    stdout and stderr) and the folder it wrote into, from the one job of all of them."""
    job = scripts_job("benchmarks", tmp_path_factory)
    return script_output(job, list(RUNS).index(key), f"python -m {RUNS[key][0]} ({key})"), \
        _base(tmp_path_factory) / key
