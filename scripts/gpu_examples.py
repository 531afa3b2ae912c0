"""The examples on a device, for ``scripts/gpu_check.sh`` (issue 44, items 1 and 4).

1. The main job, ``examples/hydragnn_ising.py``, on ``--ranks`` ranks that share the
   device (more ranks than GPUs: ``init_torch_distributed`` chooses gloo): its printed
   losses against the same job on the CPU, equal within a float tolerance (``--rtol``,
   ``--atol`` on the 4-decimal values it prints), and its training samples/s with the
   store's pipeline (``--prefetch 2``) against without.
2. The PyG example, ``examples/graphsage_large.py`` with a seeded sampler, on 2 ranks:
   ``--prefetch 2`` against ``0`` on the device (sampled edges/s, losses).

Prints a table and writes ``OUT/examples.json``.  Exit status 1 when a run fails or a
loss of the device run differs from the CPU run (or, on the CPU, when ``--prefetch 2``
does not print exactly the losses of ``--prefetch 0``: there the runs must agree bit for
bit).  ``--small`` runs tiny settings (the suite's own check of this script, on the
CPU); ``--checkpoint-dir D`` lets the main job save its model under ``D/<run>``.

    python scripts/gpu_examples.py --device cuda --ranks 4 --out gpu_check
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

from ddstore.cli import at_least

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")

# (hydragnn_ising.py, graphsage_large.py) arguments: full size on a GPU, tiny with --small
MAIN_ARGS = ["--epochs", "2"]
MAIN_SMALL = ["--num-samples", "160", "--epochs", "2", "--batch-size", "16", "--hidden",
              "8", "--layers", "1", "--lattice", "3", "--width", "2", "--transport", "rma",
              "--quiet"]
# --batch-size 256: an epoch of about 20 batches a rank (at the default 1024, 5: too
# few for reading ahead to show anything; docs/benchmarks.md, "On a GPU")
SAGE_ARGS = ["--scale", "0.05", "--batch-size", "256", "--epochs", "2",
             "--eval-nodes", "2000", "--sampler-seed", "3"]
SAGE_SMALL = ["--scale", "0.002", "--classes", "8", "--epochs", "2", "--batch-size", "64",
              "--hidden", "16", "--fanouts", "10,5", "--eval-nodes", "500",
              "--transport", "rma", "--sampler-seed", "3"]


def run(script, nprocs, args, timeout):
    """``mpiexec -n nprocs python examples/<script> args`` under ``timeout`` seconds:
    ``(exit code, stdout and stderr, seconds)``; 124 when it ran out of time."""
    # the launcher on PATH (an offline GPU machine's, scripts/gpu_env.sh), else the one
    # pip installed beside this Python
    exe = shutil.which("mpiexec") or shutil.which("mpiexec",
                                                   path=os.path.dirname(sys.executable))
    cmd = ["timeout", "--kill-after=10", str(int(timeout)), exe, "-n", str(nprocs),
           sys.executable, os.path.join(EXAMPLES, script)] + [str(a) for a in args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=ROOT)
    return proc.returncode, proc.stdout, time.perf_counter() - t0


def main_job_rows(out):
    """hydragnn_ising.py's table: ``{"epochs": {epoch: [train loss, val loss,
    samples/s]}, "test": test loss}`` (``test`` None when not printed)."""
    epochs = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 7 and f[0].isdigit() and f[0] != "0":
            epochs[int(f[0])] = [float(f[1]), float(f[2]), float(f[3])]
    test = [float(line.split()[1]) for line in out.splitlines()
            if line.startswith("test_loss")]
    return {"epochs": epochs, "test": test[0] if test else None}


_SAGE = re.compile(r"^epoch (\d+): loss (\S+) \(GraphSAGE\), (\S+) \(MLP\); (\d+) batches "
                   r"per rank in (\S+) s, (\S+) M sampled edges/s")


def sage_rows(out):
    """graphsage_large.py's epoch lines and accuracy table: ``{"epochs": {epoch:
    [GraphSAGE loss, MLP loss, batches per rank, seconds, M sampled edges/s]}, "table":
    [the accuracy table's lines]}``."""
    epochs = {}
    for line in out.splitlines():
        m = _SAGE.match(line)
        if m:
            epochs[int(m.group(1))] = [float(m.group(2)), float(m.group(3)),
                                       int(m.group(4)), float(m.group(5)),
                                       float(m.group(6))]
    table = [line.strip() for line in out.splitlines()
             if re.match(r"^\s+(GraphSAGE|MLP|majority)", line)]
    return {"epochs": epochs, "table": table}


def loss_differences(a, b, rtol, atol, what):
    """The losses of two main-job runs (``main_job_rows``) that differ by more than
    ``atol + rtol * |b|``, as messages; a missing epoch or test loss is one too."""
    bad = []
    if sorted(a["epochs"]) != sorted(b["epochs"]) or not a["epochs"]:
        bad.append(f"{what}: epochs {sorted(a['epochs'])} against {sorted(b['epochs'])}")
    pairs = [(f"epoch {e} {name}", a["epochs"][e][i], b["epochs"][e][i])
             for e in sorted(set(a["epochs"]) & set(b["epochs"]))
             for i, name in enumerate(("train loss", "val loss"))]
    pairs.append(("test loss", a["test"], b["test"]))
    for name, x, y in pairs:
        if x is None or y is None or not abs(x - y) <= atol + rtol * abs(y):
            bad.append(f"{what}: {name} {x} against {y} (tolerance {atol} + {rtol} x)")
    return bad


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--ranks", type=at_least(1), default=4, help="ranks of the main job")
    p.add_argument("--out", default="gpu_check", help="folder for examples.json")
    p.add_argument("--small", action="store_true", help="tiny settings (a smoke run)")
    p.add_argument("--rtol", type=at_least(0, float), default=1e-3)
    p.add_argument("--atol", type=at_least(0, float), default=2e-4)
    p.add_argument("--timeout", type=at_least(1, float), default=150, help="seconds per run")
    p.add_argument("--checkpoint-dir", default=None,
                   help="the main job saves its model under DIR/<run>")
    return p.parse_args(argv)


def planned_runs(a):
    """``[(name, script, ranks, arguments)]``: the runs :func:`main` makes for the parsed
    arguments ``a`` (:func:`parse_args`), in order: the main job without and with
    ``--prefetch 2`` on ``a.device`` (on a GPU also on the CPU, the reference), then the
    PyG example likewise on 2 ranks."""
    main_args = MAIN_SMALL if a.small else MAIN_ARGS
    sage_args = SAGE_SMALL if a.small else SAGE_ARGS
    dev = ["--device", a.device]

    def hydra(name, args):
        if a.checkpoint_dir:
            args = args + ["--checkpoint", os.path.join(a.checkpoint_dir, name)]
        return name, "hydragnn_ising.py", a.ranks, args
    runs = [hydra(f"main_{a.device}", main_args + dev),
            hydra(f"main_{a.device}_prefetch2", main_args + dev + ["--prefetch", "2"])]
    if a.device != "cpu":
        runs.append(hydra("main_cpu", main_args + ["--device", "cpu"]))
    return runs + [(f"sage_{a.device}", "graphsage_large.py", 2, sage_args + dev),
                   (f"sage_{a.device}_prefetch2", "graphsage_large.py", 2,
                    sage_args + dev + ["--prefetch", "2"])]


def main(argv=None, run=run):
    """The runs of :func:`planned_runs`, compared, printed and written to
    ``OUT/examples.json``; 1 when a run failed or losses differ.  ``run(script, ranks,
    arguments, timeout)`` makes one run (default: :func:`run`, a job of its own; the
    suite passes the outputs of its shared examples job)."""
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    runs = {}      # name -> parsed output, seconds, exit code
    problems = []
    for name, script, nprocs, args in planned_runs(a):
        rc, out, secs = run(script, nprocs, args, a.timeout)
        parse = main_job_rows if script == "hydragnn_ising.py" else sage_rows
        runs[name] = {"rc": rc, "seconds": round(secs, 2), **parse(out),
                      "said": [line.strip() for line in out.splitlines()
                               if " ahead" in line or "init_torch_distributed" in line],
                      "command": f"mpiexec -n {nprocs} python examples/{script} "
                                 + " ".join(map(str, args))}
        if rc != 0:
            problems.append(f"{name}: exit code {rc}" + (" (timed out)" if rc == 124
                                                          else "") + "\n" + out[-3000:])
        print(f"   {name}: {secs:.1f} s, exit {rc}", flush=True)
    main0, main2 = runs[f"main_{a.device}"], runs[f"main_{a.device}_prefetch2"]
    if a.device == "cpu":  # the same device: --prefetch 2 trains exactly as 0
        problems += loss_differences(main2, main0, 0.0, 0.0, "main job --prefetch 2 vs 0")
    else:                  # item 1: the ranks sharing the GPU train as on the CPU
        cpu = runs["main_cpu"]
        problems += loss_differences(main0, cpu, a.rtol, a.atol,
                                     f"main job on {a.device} vs cpu")
        problems += loss_differences(main2, cpu, a.rtol, a.atol,
                                     f"main job on {a.device} --prefetch 2 vs cpu")
    sage0, sage2 = runs[f"sage_{a.device}"], runs[f"sage_{a.device}_prefetch2"]
    if a.device == "cpu" and (sage2["epochs"] and [r[:3] for r in sage2["epochs"].values()]
                              != [r[:3] for r in sage0["epochs"].values()]
                              or sage2["table"] != sage0["table"]):
        problems.append("graphsage --prefetch 2 vs 0: losses or accuracies differ")

    def rate(r, col):  # the last epoch's rate (the first pays warm-up)
        return r["epochs"][max(r["epochs"])][col] if r["epochs"] else float("nan")

    summary = {"main job samples/s, prefetch 2 / 0":
               rate(main2, 2) / rate(main0, 2) if main0["epochs"] else None,
               "graphsage M edges/s, prefetch 2 / 0":
               rate(sage2, 4) / rate(sage0, 4) if sage0["epochs"] else None}
    print(f"{'run':<28}{'last epoch rate':>16}  losses (train/val or SAGE/MLP), test")
    for name, r in runs.items():
        col = 2 if name.startswith("main") else 4
        unit = "samples/s" if col == 2 else "M edges/s"
        last = r["epochs"][max(r["epochs"])] if r["epochs"] else None
        losses = f"{last[0]:.4f} / {last[1]:.4f}" if last else "-"
        print(f"{name:<28}{rate(r, col):>10.2f} {unit:<9} {losses}"
              + (f", test {r['test']:.4f}" if r.get("test") is not None else ""))
    for k, v in summary.items():
        print(f"{k}: {v:.2f}" if v is not None else f"{k}: -")
    with open(os.path.join(a.out, "examples.json"), "w") as f:
        json.dump({"device": a.device, "ranks": a.ranks, "small": a.small,
                   "rtol": a.rtol, "atol": a.atol, "runs": runs, "summary": summary,
                   "problems": problems}, f, indent=1)
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
