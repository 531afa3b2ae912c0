"""The command line (python -m ddstore, ddstore/__main__.py) and the benchmarks' own."""
import ast
import os
import re
import sys
import time

import numpy as np
import pytest
import torch

import ddstore.bench
from ddstore import __main__ as cli
from conftest import ROOT, argparse_exit, run_mpi

BENCH_DIR = os.path.dirname(os.path.abspath(ddstore.bench.__file__))
BENCH_GUIDE = os.path.join(os.path.dirname(BENCH_DIR), "..", "docs", "benchmarks.md")


def bench_modules_with_main():
    """Every module of ddstore/bench/ that defines a main() (read, not imported)."""
    names = []
    for fname in sorted(os.listdir(BENCH_DIR)):
        if fname.endswith(".py") and not fname.startswith("_"):
            tree = ast.parse(open(os.path.join(BENCH_DIR, fname)).read())
            if any(isinstance(node, ast.FunctionDef) and node.name == "main"
                   for node in tree.body):
                names.append(fname[:-3])
    return names


MODULES = bench_modules_with_main()


def help_text(capsys, fn, argv):
    return argparse_exit(capsys, 0, fn, argv)[0]


def test_every_benchmark_is_a_command(capsys):
    assert len(MODULES) >= 8 and "memory" not in MODULES, MODULES
    out = help_text(capsys, cli.main, ["--help"])
    assert out.startswith("usage: python -m ddstore "), out
    for name in MODULES:
        command = "bench-" + name.replace("_", "-")  # (dashes: one spelling for all)
        assert re.search(rf"^\s+{command}\s", out, re.M), f"{command} not listed:\n{out}"
        assert f"ddstore.bench.{name}" in out.replace("\n", " ").replace("  ", ""), name
    commands = [c for c in cli.COMMANDS if c.startswith("bench-")]
    assert sorted(commands) == sorted("bench-" + m.replace("_", "-") for m in MODULES)
    assert all("_" not in c for c in cli.COMMANDS)


def test_a_benchmark_command_is_taken_in_its_modules_spelling(capsys):
    """bench-node-memory is also bench-node_memory (the module's name): one program, its
    usage line naming the dashed command."""
    for given in ("bench-node-memory", "bench-node_memory", "bench-temporal_scale"):
        out = help_text(capsys, cli.main, [given, "--help"])
        assert out.startswith(f"usage: python -m ddstore {given.replace('_', '-')} "), out


def test_benchmark_guide_names_every_benchmark_module():
    section = open(BENCH_GUIDE).read()
    for name in MODULES:
        assert f"python -m ddstore.bench.{name}" in section, name
    assert "python -m ddstore bench-" in section and "python -m ddstore --help" in section


@pytest.mark.parametrize("name", MODULES)
def test_help_shows_the_program_name(capsys, name):
    command = "bench-" + name.replace("_", "-")
    out = help_text(capsys, cli.main, [command, "--help"])
    assert out.startswith(f"usage: python -m ddstore {command} "), out
    module = __import__(f"ddstore.bench.{name}", fromlist=["main"])
    out = help_text(capsys, module.main, ["--help"])
    assert out.startswith(f"usage: python -m ddstore.bench.{name} "), out


def test_bench_helper_module_says_what_it_is():
    """``python -m ddstore.bench.memory`` (a helper, not a benchmark) printed nothing and
    ended with 0; it says what it is and where the benchmarks are."""
    import subprocess
    import sys
    for args, code in ((["--help"], 0), ([], 2)):
        r = subprocess.run([sys.executable, "-m", "ddstore.bench.memory"] + args,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == code and "is a helper of the benchmarks" in r.stderr and \
            "python -m ddstore --help" in r.stderr, (args, r)


@pytest.mark.mpi
def test_one_process_benchmark_gives_no_launcher_warning(tmp_path):
    """``python -m ddstore.bench.device`` is one process by design: it says nothing of
    being launched without ``mpiexec`` (it did, the thirty-third session's probe found),
    and writes its figures."""
    import json
    import subprocess
    out = tmp_path / "device.json"
    r = subprocess.run([sys.executable, "-m", "ddstore.bench.device", "--steps", "400",
                        "--nodes", "10", "--batches", "2", "--repeat", "1", "--step-ms",
                        "0", "--out", str(out)], capture_output=True, text=True,
                       timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r
    assert "mpiexec" not in r.stderr + r.stdout, r
    assert json.loads(out.read_text())["rows"], out.read_text()[:500]


def test_demo_help_shows_the_program_name(capsys):
    out = help_text(capsys, cli.main, ["demo", "--help"])
    assert out.startswith("usage: python -m ddstore demo "), out
    text = " ".join(out.split())  # every option says what it is and its default
    for words in ("--rows ROWS global rows (default: 200000)",
                  "--batch BATCH rows per get_batch call", "(default: 128)",
                  "(default: all the ranks, one replica)", "(default: auto)"):
        assert words in text, (words, text)


def test_run_child_ends_the_childs_group_on_a_signal(tmp_path):
    """A benchmark driver killed by SIGTERM (``timeout``, ``scancel``) while its child
    runs ends the child's whole group (``timeout`` and what runs under it) and runs its
    own ``finally`` blocks: the child ran on alone for up to 600 s, and the driver's
    temporary directory stayed in /tmp.  It says so (it ended without a word).  The
    group gets SIGINT first (a rank then finalizes MPI, removing its shared memory),
    which this shell's background sleep ignores, then SIGTERM."""
    import signal
    import subprocess
    import sys
    import time
    marker = tmp_path / "workdir"
    code = ("import os, sys; from ddstore.bench import run_child\n"
            "os.mkdir(sys.argv[1])\n"
            "try:\n"
            "    run_child(['timeout', '600', 'sh', '-c', 'sleep ' + '313.25 & wait'])\n"
            "finally:\n"
            "    os.rmdir(sys.argv[1])\n")
    # (the driver's own command line must not hold the words looked for)
    # (a driver's start, its imports, took over 60 s under the sanitizers' run on a
    # loaded machine once: the child started after the test had given up, and stayed)
    driver = subprocess.Popen([sys.executable, "-c", code, str(marker)],
                              stderr=subprocess.PIPE, text=True)
    if not _started(driver, "sleep 313.25"):
        pytest.fail(f"the child never started in {START_S} s")
    driver.send_signal(signal.SIGTERM)
    assert driver.wait(30) == 128 + signal.SIGTERM
    assert "[ddstore] SIGTERM received: ending the benchmark's run" in driver.stderr.read()
    deadline = time.time() + 15
    while time.time() < deadline and _running("sleep 313.25"):
        time.sleep(0.1)
    assert not _running("sleep 313.25"), "the child's group outlived the driver"
    assert not marker.exists(), "the driver's finally did not run"
    # the group's leader gone while another of its processes still holds the output
    # (run_child still waiting): that one is ended too (it was left running)
    code = ("from ddstore.bench import run_child\n"
            "run_child(['sh', '-c', 'sleep ' + '313.5 & exit 0'], grace_s=2)\n")
    driver = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL)
    if not _started(driver, "sleep 313.5"):
        pytest.fail(f"the child never started in {START_S} s")
    time.sleep(0.5)  # (its leader has exited)
    driver.send_signal(signal.SIGTERM)
    assert driver.wait(30) == 128 + signal.SIGTERM
    deadline = time.time() + 15
    while time.time() < deadline and _running("sleep 313.5"):
        time.sleep(0.1)
    assert not _running("sleep 313.5"), "a process of the child's group was left"


START_S = 240  # how long a driver (a Python that imports ddstore.bench) may take to start


def _started(driver, words):
    """Whether a process whose command line holds ``words`` ran within :data:`START_S`
    of ``driver``'s start; if none did, ``driver`` is ended (:func:`_end`).  Seen once
    is enough: a second look, as the test had, could miss it while the shell that
    starts it exits and its child execs (a process's command line reads empty then)."""
    deadline = time.time() + START_S
    while time.time() < deadline:
        if _running(words):
            return True
        time.sleep(0.1)
    _end(driver, words)
    return False


def _end(driver, words):
    """A test giving up: end ``driver`` and any process whose command line holds
    ``words`` (a child started late must not outlive the test)."""
    import signal
    driver.kill()
    driver.wait(30)
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if words.encode() in f.read().replace(b"\0", b" "):
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _running(words):
    """Whether a process whose command line holds ``words`` runs (read from /proc)."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if words.encode() in f.read().replace(b"\0", b" "):
                    return True
        except OSError:
            continue
    return False


def test_plural():
    assert ddstore.bench.plural(1, "replica") == "1 replica"
    assert ddstore.bench.plural(0, "rank") == "0 ranks"
    assert ddstore.bench.plural(2, "rank") == "2 ranks"


def test_ratio_carries_its_control():
    """A benchmark's ratio states the spread of its control (one side measured again in
    the same job): max / min - 1 of the control's runs, printed beside the ratio."""
    from ddstore.bench import ratio, ratio_text, spread
    entry = ratio(3.0, 2.0, control=[2.0, 2.5])
    assert entry == {"ratio": 1.5, "control": [2.0, 2.5], "spread": 0.25}
    assert ratio_text(entry) == "1.50x (control spread 25 %)"
    assert spread([4.0]) == 0.0 and spread([1.0, 3.0, 2.0]) == 2.0


def test_report_path_takes_a_file_or_a_directory():
    """The benchmarks whose ``--out`` is a JSON path (compat, core, node_memory, device)
    also take a directory, as the others do, so one ``--out DIR`` serves a series of
    them (a directory given to them used to be written as the report file, and the next
    benchmark's ``makedirs`` of it aborted the job)."""
    from ddstore.bench import report_path
    assert report_path(None, "core", 2) == os.path.join("bench_results", "core_n2.json")
    assert report_path("x/run1", "compat", 4) == os.path.join("x/run1", "compat_n4.json")
    assert report_path("x/mine.json", "core", 2) == "x/mine.json"


def test_report_states_command_seed_and_versions(tmp_path):
    """Every benchmark JSON (write_report, their one writer) states the command, the seed
    and the versions of python, numpy, torch, PyG, mpi4py and the MPI library."""
    import json
    import platform

    import numpy as np
    path = tmp_path / "r.json"
    ddstore.bench.write_report({"x": np.float32(1.5)}, str(path), 7)
    report = json.loads(path.read_text())
    assert report["x"] == 1.5 and report["seed"] == 7
    assert isinstance(report["command"], str) and report["command"].startswith("python ")
    v = report["versions"]
    assert v["python"] == platform.python_version() and v["numpy"] == np.__version__
    assert {"torch", "torch_geometric", "mpi4py", "mpi"} <= set(v)


@pytest.mark.mpi
def test_demo_on_one_rank_says_one_replica():
    out = run_mpi("-m", 1, "ddstore", "demo", "--rows", "1000", "--row-bytes", "16",
                  timeout=60)
    assert "store: 1 rank, width 1 (1 replica)," in out, out
    assert "verified every byte: OK" in out, out


@pytest.mark.mpi
def test_help_under_mpiexec_is_printed_once():
    out = run_mpi("-m", 2, "ddstore", "--help", timeout=60)
    assert out.count("usage: python -m ddstore") == 1, out


@pytest.mark.mpi
def test_missing_input_file_is_reported_once(tmp_path):
    missing = str(tmp_path / "no_such_file.json")
    r = run_mpi("-m", 2, "ddstore", "bench-dynamic", "--tennis", missing, timeout=60,
                check=False)
    assert r.returncode == 2, f"exit {r.returncode}:\n{r.output}"
    assert r.output.count(missing) == 1, r.output
    assert f"error: --tennis: no such file or directory: {missing}" in r.output, r.output
    assert r.elapsed < 30, f"took {r.elapsed:.1f}s:\n{r.output}"


@pytest.mark.mpi
def test_example_data_refused_once(tmp_path_factory):
    """An example's --data that every rank opens and refuses (a .npy that is not one,
    a static graph given to the dynamic example): one line from rank 0, exit code 1
    on every rank (it was one line per rank, two of them run together on one line).
    (The runs: the examples' 2-rank job, examples_job.DATA_REFUSED.)"""
    from examples_job import DATA_REFUSED, example_output
    for name, (script, _, words) in DATA_REFUSED.items():
        out = example_output(name, tmp_path_factory)
        assert out.splitlines().count("--- exit code 1") == 2, out
        assert out.count(words) == 1 and f"{script}: error: " in out, out


def test_tennis_file_that_cannot_be_read_ends_before_the_run(tmp_path, capsys):
    """bench-dynamic reads --tennis before the synthetic part: a file that is not JSON,
    JSON of no known layout, or a directory ends it at once with one line naming it
    (exit code 2), not a traceback and MPI_Abort after the benchmark ran."""
    from mpi4py import MPI
    from ddstore.bench import dynamic
    (tmp_path / "bad.json").write_text("not json")
    (tmp_path / "mine.json").write_text('{"a": 1}')
    for path, words in ((tmp_path / "bad.json", "is not valid JSON"),
                        (tmp_path / "mine.json", "unknown layout"),
                        (tmp_path, "is a directory")):
        with pytest.raises(SystemExit) as info:
            dynamic._tennis_series(MPI.COMM_SELF, str(path))
        err = capsys.readouterr().err
        assert info.value.code == 2 and f"error: --tennis {path}: " in err and \
            words in err, err
    assert dynamic._tennis_series(MPI.COMM_SELF, str(tmp_path / "absent.json")) is None


@pytest.mark.mpi
def test_bad_option_under_mpiexec_is_reported_once():
    r = run_mpi("-m", 2, "ddstore", "bench-core", "--no-such-option", timeout=60,
                check=False)
    assert r.returncode == 2, f"exit {r.returncode}:\n{r.output}"
    assert r.output.count("unrecognized arguments: --no-such-option") == 1, r.output


@pytest.mark.parametrize("args,words", [
    (["--rows", "-5"], "argument --rows: must be an integer >= 1, got -5"),
    (["--row-bytes", "0", "--batch", "0"], "argument --row-bytes: must be an integer >= 1, "
                                           "got 0"),
    (["--width", "3"], "width=3 out of range: allowed 1 <= width <= 1"),
    # more than the node has: was a MemoryError (an abort of the job) or numpy's
    # "Maximum allowed size exceeded"
    (["--rows", "10", "--row-bytes", str(10 ** 15)], "--rows 10 --row-bytes "
                                                     "1000000000000000: the demo's ranks "
                                                     "would need about"),
    (["--rows", str(10 ** 17)], "more than it has available; use fewer rows or bytes"),
    (["--rows", str(10 ** 23)], "argument --rows: must be an integer <= 922337203685477"),
])
def test_demo_refuses_bad_options_naming_them(args, words, capsys):
    """In process (one rank): the demo's bad sizes and a width the job cannot have end
    it with exit code 2 and one line naming them, not a traceback."""
    from ddstore.__main__ import main
    assert words in argparse_exit(capsys, 2, main, ["demo"] + args)[1]


@pytest.mark.mpi
def test_demo_width_refused_once_under_mpiexec():
    r = run_mpi("-m", 2, "ddstore", "demo", "--width", "3", timeout=60, check=False)
    assert r.returncode == 2, f"exit {r.returncode}:\n{r.output}"
    assert r.output.count("width=3 out of range: allowed 1 <= width <= 2") == 1, r.output
    # argparse's form, as every example and benchmark says it (no program, no option)
    assert "python -m ddstore demo: error: --width 3: width=3" in r.output, r.output
    assert "Traceback" not in r.output, r.output


@pytest.mark.parametrize("command,args,words", [
    ("bench-compat", ["--calls", "0"], "argument --calls: must be an integer >= 1, got 0"),
    ("bench-compat", ["--step-ms", "1e30"], "argument --step-ms: must be a number <= "
                                            "3600000"),
    ("bench-compat", ["--transports", "abc"], "argument --transports: 'abc': "
                                              "comma-separated transports"),
    ("bench-dynamic", ["--steps", "0"], "argument --steps: must be an integer >= 1"),
    ("bench-dynamic", ["--nodes", "3", "--edges", "10"],
     "--edges=10 needs --edges <= --nodes ** 2 = 9"),
    ("bench-dynamic", ["--churn", "2"], "argument --churn: must be a number <= 1.0"),
    ("bench-dynamic", ["--seed", "-1"], "argument --seed: must be an integer >= 0"),
    ("bench-pyg", ["--seed", "1.5"], "argument --seed: '1.5' is not an integer"),
    # one spelling of a number, as in the environment variables (int() took both)
    ("bench-serve", ["--rows", "1_000"], "argument --rows: '1_000' is not an integer "
                                         "(digits 0-9; no underscores)"),
    ("bench-serve", ["--rows", "\u0663"], "argument --rows: '\u0663' is not an integer"),
    ("bench-checkpoint", ["--gb", "0_1"], "argument --gb: '0_1' is not a number"),
    ("bench-checkpoint", ["--dir", ""], "argument --dir: an empty path"),
    ("bench-checkpoint", ["--dir", __file__], "exists and is not a directory"),
    ("bench-dynamic", ["--nodes", "10000000", "--edges", str(10 ** 14)],
     "a step's arrays need about 8940696.7 GiB (96 bytes per edge), more than the"),
    ("bench-node-memory", ["--batches", "0"], "argument --batches: must be an integer >= 1"),
    ("bench-prefetch", ["--graphs", "0"], "argument --graphs: must be an integer >= 1"),
    ("bench-checkpoint", ["--gb", "0"], "argument --gb: must be a number > 0, got 0"),
    ("bench-serve", ["--rows", "-1"], "argument --rows: must be an integer >= 1, got -1"),
    ("bench-core", ["--calls-batch", "0"], "argument --calls-batch: must be an integer >= 1"),
    ("bench-graphs", ["--num-graphs", "x"], "argument --num-graphs: 'x' is not an integer"),
    ("bench-progress", ["--reads-per-s", "-1"], "argument --reads-per-s: must be a number >= 0"),
    ("bench-serve", ["--patterns", "one,bogus"], "argument --patterns: 'one,bogus': "
                                                 "comma-separated names, each one of one, "
                                                 "both, computing"),
    ("bench-temporal-scale", ["--csv-dir", __file__], "exists and is not a directory"),
    ("bench-scale", ["series", "--seed", "-1"], "argument --seed: must be an integer >= 0"),
    ("bench-temporal-scale", ["--batches", "0"], "argument --batches: must be an integer >= 1"),
    ("bench-pyg", ["--batches", "0"], "argument --batches: must be an integer >= 1, got 0"),
    ("bench-pyg", ["--alone", "--prefetch", "0,2"], "--alone times each option's loader by "
                                                    "itself: no prefetch depths"),
    ("bench-spatiotemporal", ["--step-ms", "-1"], "argument --step-ms: must be a number "
                                                  ">= 0"),
    ("bench-spatiotemporal", ["--epochs", "0"], "argument --epochs: must be an integer >= 1"),
    ("bench-spatiotemporal", ["--steps", "20"], "--steps 20: must be more than 2 x "
                                                "--horizon = 24"),
    ("bench-temporal", ["--prefetch", "-1"], "argument --prefetch: must be an integer >= 0"),
    ("bench-temporal", ["--batches", "0"], "argument --batches: must be an integer >= 1"),
    ("bench-device", ["--device", "meta"], "device='meta'; allowed: 'cpu', 'cuda' or "
                                           "'cuda:N'"),
    ("bench-device", ["--device", "tpu"], "device='tpu' is not a torch device"),
    ("bench-device", ["--device", "cpu", "--steps", "5"], "--steps 5: must be more than 2 "
                                                          "x --horizon = 24"),
    ("bench-device", ["--device", "cpu", "--steps", "100"],  # a window in every split
     "--steps 100 with --horizon 12: split 'val' (ratio 0.1) gets time steps [70, 80)"),
    ("bench-spatiotemporal", ["--steps", "30"], "--steps 30 with --horizon 12: split "
                                                "'train' (ratio 0.7)"),
    ("bench-device", ["--batches", "0"], "argument --batches: must be an integer >= 1"),
    ("bench-device", ["--step-ms", "-1"], "argument --step-ms: must be a number >= 0"),
    ("bench-device", ["--repeat", "0", "--prefetch", "-2"], "argument --repeat: must be an "
                                                            "integer >= 1, got 0"),
    # a count beyond int64 (numpy's own error or MPI_Abort on every rank, it was)
    ("bench-core", ["--calls-single", str(10 ** 20)], "argument --calls-single: must be an "
                                                      "integer <= 9223372036854775807"),
    ("bench-temporal", ["--num-edges", str(2 ** 63)], "argument --num-edges: must be an "
                                                      "integer <= 9223372036854775807"),
])
def test_benchmarks_refuse_sizes_out_of_range(command, args, words, capsys):
    """Every benchmark's sizes and rates go through ddstore.cli's types: a zero or
    negative one is argparse's error naming it (exit code 2), before anything runs; they
    used to end in an IndexError, a ZeroDivisionError or a store error deep inside."""
    from ddstore.__main__ import main
    assert words in argparse_exit(capsys, 2, main, [command] + args)[1]


def test_help_formatter_states_every_default():
    """``ddstore.cli.HelpFormatter`` (the examples' and benchmarks' ``--help``): an option
    without a help text still says its default, one whose help names its default says
    it once, flags and ``-h`` are left alone; every example and benchmark parser uses it
    (read from the sources: no example is imported)."""
    import argparse
    from ddstore.cli import HelpFormatter
    p = argparse.ArgumentParser(prog="x", formatter_class=HelpFormatter)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--data", default=None, help="a file (default: the bundled one)")
    p.add_argument("--lr", type=float, default=0.01, help="step size")
    p.add_argument("--quiet", action="store_true")
    text = " ".join(p.format_help().split())
    assert "--epochs EPOCHS (default: 20)" in text
    assert "--data DATA a file (default: the bundled one)" in text
    assert text.count("(default") == 3 and "--lr LR step size (default: 0.01)" in text
    assert text.endswith("--quiet")  # a flag: no default to say
    root = os.path.join(os.path.dirname(BENCH_DIR), "..")
    sources = [os.path.join(root, "examples", f) for f in os.listdir(
        os.path.join(root, "examples")) if f.endswith(".py")]
    sources += [os.path.join(BENCH_DIR, f) for f in os.listdir(BENCH_DIR)
                if f.endswith(".py")]
    for path in sources:
        src = open(path).read()
        assert set(re.findall(r"formatter_class=(\w+)", src)) <= {"HelpFormatter"}, path
        if "ArgumentParser(" in src:
            assert "formatter_class=HelpFormatter" in src, path


def test_check_width_is_the_stores_rule_said_by_argparse(capsys):
    """ddstore.cli.check_width: the width a store over ``size`` ranks takes (None: all of
    them; 'auto' kept), else argparse's error (exit code 2) naming --width and the widths
    allowed, the constructor's own message (DDStore.check_width)."""
    import argparse
    from ddstore import DDStore, DDStoreValueError
    from ddstore.cli import check_width
    p = argparse.ArgumentParser(prog="x")
    assert check_width(p, None, 4) == 4 and check_width(p, 2, 4) == 2
    assert check_width(p, "auto", 4) == "auto" and check_width(p, 6, 6) == 6
    for width, words in ((3, "--width 3: width=3 does not divide the communicator size 4; "
                              "allowed widths: [1, 2, 4]"),
                         (8, "--width 8: width=8 out of range: allowed 1 <= width <= 4"),
                         (0, "--width 0: width=0 out of range")):
        assert words in argparse_exit(capsys, 2, check_width, p, width, 4)[1]
        with pytest.raises(DDStoreValueError, match=words.split(": ", 1)[1][:20]):
            DDStore.check_width(width, 4)
    for width in ("2", 2.0, True):  # every width allowed named, None (the default) too
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"width must be None (one group of all ranks), 'auto' or an integer in "
                f"[1, 4] dividing the communicator size 4, got {width!r}")):
            DDStore.check_width(width, 4)
    for size in ("4", 0, True, None, 2.0):  # (a str was a TypeError, 0 "<= width <= 0")
        with pytest.raises(DDStoreValueError, match=r"size must be an integer >= 1 \(the "
                                                    r"number of ranks"):
            DDStore.check_width(2, size)


@pytest.mark.parametrize("module,args,words", [
    # a directory --out: a name ending in .json was made a directory of that name
    ("temporal", ["--out", "x.json"], "argument --out: x.json names a file: this --out is "
                                      "the directory the report is written in"),
    ("dynamic", ["--out", "/dev/null"], "argument --out: /dev/null exists and is not a "
                                        "directory"),
    # a JSON path or a directory: its directory must be one that can be made and written
    ("node_memory", ["--out", "/dev/null/nm.json"], "argument --out: /dev/null/nm.json: "
                                                    "/dev/null exists and is not a directory"),
    ("core", ["--out", "/dev/null/x"], "argument --out: /dev/null/x: /dev/null is not a "
                                       "directory"),
    # where os.access says yes but nothing can be made (root passes it everywhere): the
    # report failed at the end of the run
    ("core", ["--out", "/proc/ddstore_probe"], "argument --out: /proc/ddstore_probe: "
                                               "nothing can be created in /proc"),
])
def test_benchmark_out_refused_before_the_run(module, args, words, capsys):
    """A benchmark's unusable --out ends it through argparse (exit code 2) before it
    measures anything, instead of when the report is written at its end."""
    import importlib
    mod = importlib.import_module(f"ddstore.bench.{module}")
    parse = getattr(mod, "_args", None) or (lambda a: mod.main(a))
    assert words in argparse_exit(capsys, 2, parse, args)[1]


def test_benchmark_out_accepts_a_new_path(tmp_path):
    from ddstore.cli import report_dir, report_target
    assert report_dir(str(tmp_path / "new" / "dir")) == str(tmp_path / "new" / "dir")
    assert report_target(str(tmp_path / "a" / "r.json")) == str(tmp_path / "a" / "r.json")
    assert report_target(str(tmp_path)) == str(tmp_path)
    assert not (tmp_path / "new").exists() and not (tmp_path / "a").exists()  # made later


def test_node_memory_quick_keeps_explicit_sizes():
    """bench.node_memory --quick: its tiny sizes are defaults; an option given keeps its
    value (it was overwritten)."""
    from ddstore.bench import node_memory
    a = node_memory._args(["--quick"])
    assert (a.num_nodes, a.batches, a.warmup, a.batch_size) == (2000, 8, 2, 60)
    a = node_memory._args(["--quick", "--num-nodes", "500", "--batch-size", "7"])
    assert (a.num_nodes, a.batches, a.warmup, a.batch_size) == (500, 8, 2, 7)
    a = node_memory._args([])
    assert (a.num_nodes, a.batches) == (100_000, 40)


def test_core_quick_keeps_explicit_counts(monkeypatch):
    """bench.core --quick: its counts are defaults; an option given keeps its value (it
    was overwritten: --quick --calls-single N ran 200 calls and said nothing)."""
    from ddstore.bench import core
    seen = []

    def stop(comm, row_bytes, rows, calls, seed):
        seen.append(calls)
        raise SystemExit(0)
    monkeypatch.setattr(core, "bench_single_rows", stop)
    for args, calls in ((["--quick"], 200), (["--quick", "--calls-single", "7"], 7),
                        ([], 4000)):
        with pytest.raises(SystemExit):
            core.main(args)
    assert seen == [200, 7, 4000]


def test_program_name_is_the_command_as_typed(monkeypatch):
    """One-line errors name the program as the user started it (they said
    '__main__.py: rank 0:' for python -m ddstore COMMAND)."""
    import ddstore
    import ddstore.cli as names
    package = os.path.dirname(ddstore.__file__)
    monkeypatch.setattr(names, "_PROGRAM", [])
    for argv0, name in ((os.path.join(package, "bench", "core.py"), "python -m "
                         "ddstore.bench.core"),
                        (os.path.join(package, "__main__.py"), "python -m ddstore"),
                        ("/home/u/examples/hydragnn_ising.py", "hydragnn_ising.py")):
        monkeypatch.setattr(sys, "argv", [argv0])
        assert names.program_name() == name
    names.set_program("python -m ddstore bench-core")
    assert names.program_name() == "python -m ddstore bench-core"


def test_run_program_ends_a_memory_error_with_one_line(capsys):
    """ddstore.cli.run_program (the examples' entry): sizes beyond memory end the
    program with one line naming the rank and what could not be had, exit code 1,
    instead of a traceback from every rank; other outcomes pass through."""
    from ddstore.cli import run_program

    def too_big():
        raise MemoryError("Unable to allocate 7.28 TiB for an array with shape (10**12,)")
    assert run_program(too_big) == 1
    err = capsys.readouterr().err
    assert "rank 0: out of memory: Unable to allocate 7.28 TiB" in err, err
    assert "ask for smaller ones" in err and "Traceback" not in err, err
    assert run_program(lambda a: a, 3) == 3 and run_program(lambda: None) is None
    with pytest.raises(ValueError):  # anything else is the program's own
        run_program(int, "x")
    with pytest.raises(RuntimeError):
        run_program(torch.zeros(2).view, 3)
    import math
    for fn, arg in ((math.exp, 1000), (np.zeros, -5)):  # a program's own: a traceback
        with pytest.raises((OverflowError, ValueError)):
            run_program(fn, arg)
    # sizes beyond any array (numpy's and torch's errors for a count of 2**62): as
    # beyond memory (they were a traceback and MPI_Abort on every rank)
    for fn, args, words in ((np.empty, ((2 ** 62, 4),), "out of memory: array is too big"),
                            (np.empty, (2 ** 63,), "out of memory: Maximum allowed"),
                            (torch.empty, (2 ** 62, 2), "out of memory: Storage size"),
                            (np.int64, (2 ** 64,), "out of memory: Python int")):
        assert run_program(fn, *args) == 1
        err = capsys.readouterr().err
        assert words in err and "ask for smaller ones" in err, err
    # what the user asked for, refused by the store (a missing file, a horizon longer
    # than the series, --device cuda without one): one line too (it was a traceback
    # from every rank)
    from ddstore import DDStoreValueError

    def refused():
        raise DDStoreValueError("horizon=1000 out of range: allowed 1 <= horizon <= 260")
    assert run_program(refused) == 1
    err = capsys.readouterr().err
    assert "rank 0: error: horizon=1000 out of range" in err and "Traceback" not in err


def test_agree_exit_ends_every_rank_with_one_line(capsys):
    """ddstore.cli.agree_exit (the examples' --resume checks): nothing when no rank has
    a message; else rank 0 prints each message once and every rank exits (the refusal
    was printed once per rank)."""
    from mpi4py import MPI
    from ddstore.cli import agree_exit
    assert agree_exit(MPI.COMM_SELF, None) is None
    with pytest.raises(SystemExit) as info:
        agree_exit(MPI.COMM_SELF, "--resume x: no such directory")
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("error: --resume x: no such directory") == 1, err


def test_agreed_call_returns_or_ends_every_rank_with_one_line(capsys):
    """ddstore.cli.agreed_call (an example's per-rank file reads): the result when no
    rank refuses; a DDStoreError or a SystemExit with a message ends the program with
    rank 0's one line."""
    from mpi4py import MPI
    from ddstore import DDStoreValueError
    from ddstore.cli import agreed_call
    assert agreed_call(MPI.COMM_SELF, lambda a, b: (a, b), 1, 2) == (1, 2)

    def refuse(exc):
        raise exc
    for exc, words in ((DDStoreValueError("load_npy: x.npy is truncated"),
                        "error: load_npy: x.npy is truncated"),
                       (SystemExit("--resume ck: no such directory"),
                        "error: --resume ck: no such directory")):
        with pytest.raises(SystemExit) as info:
            agreed_call(MPI.COMM_SELF, refuse, exc)
        assert info.value.code == 1
        assert capsys.readouterr().err.count(words) == 1


def test_nothing_to_train_names_the_epochs():
    """ddstore.cli.nothing_to_train (a resumed example whose checkpoint already holds
    the last epoch it would train): a line naming the epoch done and --epochs; None
    while an epoch is left (the examples count epochs 0- or 1-based: ``last``)."""
    from ddstore.cli import nothing_to_train
    assert nothing_to_train("ck", 2, 4, 3) is None       # epoch 3 left (0-based)
    assert nothing_to_train("ck", 3, 4, 4) is None       # epoch 4 left (1-based)
    # the least --epochs that trains on: epoch 5 done, 0-based, needs --epochs 7 (the
    # line said 'above 4', the --epochs given)
    for done, epochs, last, above in ((3, 4, 3, 4), (5, 4, 3, 6), (4, 4, 4, 4),
                                      (6, 2, 2, 6)):
        assert nothing_to_train("ck", done, epochs, last) == (
            f"--resume ck: epoch {done} is done and --epochs {epochs} trains no further:"
            f" nothing to train (give --epochs above {above} to go on)")


@pytest.mark.parametrize("module,args,words", [
    # each ended in a traceback from every rank (and MPI_Abort), some after the data
    # was made; --transports bogus at width 1 was ignored without a word
    ("temporal", ["--widths", "x"], "argument --widths: 'x' is not an integer"),
    ("temporal", ["--widths", "1,,2"], "argument --widths: '1,,2': comma-separated"),
    ("temporal", ["--widths", "3"], "--widths 3: width=3 out of range: allowed 1 <= "
                                    "width <= 1"),
    ("temporal", ["--widths", "1", "--transports", "bogus"],
     "argument --transports: 'bogus': comma-separated transports, each one of auto, "
     "rma, shm"),
    ("graphs", ["--sweep-only", "--widths", "2"], "--widths 2: width=2 out of range"),
    ("pyg", ["--fanouts", "x"], "argument --fanouts: 'x' is not an integer"),
    ("pyg", ["--widths", "2"], "--widths 2: width=2 out of range"),
    ("scale", ["series", "--width", "x"], "argument --width: 'x' is not an integer"),
    ("scale", ["series", "--width", "3"], "--width 3: width=3 out of range"),
    ("scale", ["series", "--transport", "bogus"], "argument --transport: invalid choice"),
    ("scale", ["graphs", "--width", "2"], "--width 2: width=2 out of range"),
    ("scale", ["series", "--width", "1", "--steps", "200"],
     "--steps 200 (x --scale 1.0) with --horizon 12: split 'val' (ratio 0.1) gets time "
     "steps [140, 160) = 20 steps, fewer than 2*horizon = 24"),
    # a simulated step beyond time_t ended in time.sleep's OverflowError and MPI_Abort
    # (or slept for ever); the others were refused after the data was made, or never
    ("node_memory", ["--sampling-ms", "1e23"], "argument --sampling-ms: must be a number "
                                               "<= 3600000"),
    ("serve", ["--compute-s", "1e9"], "argument --compute-s: must be a number <= 3600"),
    ("dynamic", ["--random", "0"], "argument --random: must be an integer >= 1, got 0"),
    ("prefetch", ["--compute", "abc"], "argument --compute: 'abc': comma-separated names, "
                                       "each one of sleep, cpu"),
    ("prefetch", ["--transport", "abc"], "argument --transport: invalid choice: 'abc'"),
    ("prefetch", ["--repeats", "1"], "argument --repeats: must be an integer >= 2, got 1"),
    ("prefetch", ["--steps", "200"], "--steps 200 with --horizon 12: split 'val'"),
    ("pyg", ["--prefetch", str(10 ** 23)], "argument --prefetch: must be an integer <= 1024"),
    ("pyg", ["--workers", str(10 ** 23)], "argument --workers: must be an integer <= 256"),
])
def test_benchmark_options_checked_when_parsed(module, args, words, capsys):
    """Benchmarks' widths, transports, fan-outs and series sizes: argparse's error
    (exit code 2, said once by rank 0) before anything is made (one rank here)."""
    import importlib
    mod = importlib.import_module(f"ddstore.bench.{module}")
    assert words in argparse_exit(capsys, 2, mod._args, args)[1]
    mod._args(["series", "--width", "1"] if module == "scale" else [])  # defaults pass


def test_a_report_never_replaces_a_users_file(tmp_path, capsys):
    """A benchmark's --out naming a file that is not an earlier report is refused when
    parsed (it was overwritten); write_report, whose file names in a directory --out
    are fixed, keeps such a file and writes beside it; an earlier report is replaced."""
    import json
    from ddstore.bench import write_report
    from ddstore.bench import core
    mine = tmp_path / "user.json"
    mine.write_text('{"mine": 1}')
    err = argparse_exit(capsys, 2, core.main, ["--quick", "--out", str(mine)])[1]
    assert f"argument --out: {mine} exists and is not a benchmark's report (kept)" in err
    assert mine.read_text() == '{"mine": 1}'
    assert write_report({"a": 1}, str(mine), 0) == str(tmp_path / "user.1.json")
    assert mine.read_text() == '{"mine": 1}'
    beside = tmp_path / "user.1.json"
    assert json.loads(beside.read_text())["a"] == 1
    assert f"the report goes to {beside}" in capsys.readouterr().out
    write_report({"a": 2}, str(beside), 0)  # an earlier report: replaced
    assert json.loads(beside.read_text())["a"] == 2 and not (tmp_path / "user.2.json").exists()
    from ddstore.cli import report_target
    assert report_target(str(beside)) == str(beside)


def test_scratch_directories_go_however_the_job_ends(tmp_path, capsys):
    """A benchmark's scratch directory (bench.scratch_dir) is removed at a normal end,
    at once on an exception (a Ctrl-C's KeyboardInterrupt: a barrier there hung the job),
    and by a watcher when the process is killed by SIGTERM (it stayed: up to 2 x --gb
    of checkpoint per timed-out job); a directory given is the user's, never removed.
    The series file a benchmark writes goes the same way, and --scale is bounded."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from mpi4py import MPI
    from ddstore.bench import checkpoint, progress, scratch_dir
    made = []
    for end in ("normal", "interrupt"):
        try:
            with scratch_dir(MPI.COMM_SELF, "ddstore-test-") as path:
                made.append(path)
                open(os.path.join(path, "f"), "w").close()
                if end == "interrupt":
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            pass
    assert len(made) == 2 and not any(os.path.exists(p) for p in made)
    with scratch_dir(MPI.COMM_SELF, "x", str(tmp_path)) as path:
        assert path == str(tmp_path)
    assert tmp_path.is_dir()
    # killed inside the block: the watcher removes the directory and a file in writing
    code = ("import os, signal, sys; from mpi4py import MPI; from ddstore import _lifecycle;"
            "from ddstore.bench import scratch_dir\n"
            "with scratch_dir(MPI.COMM_SELF, 'ddstore-test-') as p:\n"
            "    f = os.path.join(sys.argv[1], 'series.npy.writing-1')\n"
            "    open(f, 'w').close(); _lifecycle.remove_when_ended(f)\n"
            "    print(p, flush=True); os.kill(os.getpid(), signal.SIGTERM)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    scratch = proc.stdout.split()[0]
    deadline = time.time() + 30
    while time.time() < deadline and (os.path.exists(scratch) or
                                      (tmp_path / "series.npy.writing-1").exists()):
        time.sleep(0.1)
    assert not os.path.exists(scratch) and not (tmp_path / "series.npy.writing-1").exists()
    for main, argv, words in ((checkpoint.main, ["--scale", "1e30"], "--scale: must be a number "
                                                                     "<= 1000"),
                              (progress.main, ["--repeat", "1"], "must be an integer >= 2")):
        assert words in argparse_exit(capsys, 2, main, argv)[1]


def test_log_lines_carry_the_prefix_once():
    """The command line's log format adds '[ddstore] ' only where a message lacks it
    (the launch warning has it: it was printed '[ddstore] [ddstore] launched ...')."""
    import logging
    from ddstore.__main__ import _Prefixed

    def record(msg):
        return logging.LogRecord("ddstore", logging.WARNING, __file__, 1, msg, None, None)
    assert _Prefixed().format(record("[ddstore] launched")) == "[ddstore] launched"
    assert _Prefixed().format(record("store: 1 rank")) == "[ddstore] store: 1 rank"


def test_options_are_not_abbreviated(capsys):
    """An option is taken whole: ``--checkpoint`` given to a program that has only
    ``--checkpoint-every`` was taken for it ("argument --checkpoint-every: 'ck' is not
    an integer")."""
    p = cli.ArgumentParser(prog="x")
    p.add_argument("--checkpoint-every", type=int, default=None)
    err = argparse_exit(capsys, 2, p.parse_args, ["--checkpoint", "ck"])[1]
    assert "unrecognized arguments: --checkpoint ck" in err, err
    assert p.parse_args(["--checkpoint-every", "3"]).checkpoint_every == 3

def test_other_settings_names_each_option_as_given():
    """ddstore.cli.other_settings (a resumed example whose checkpoint was made with
    other options): each differing option named as on the command line with both values,
    an unset one as "unset" (the line showed a dict of destinations with None);
    None when all agree."""
    import argparse

    from ddstore.cli import other_settings
    args = argparse.Namespace(batch_size=64, data=None, lr=0.01)
    assert other_settings("ck", {"batch_size": 64, "data": None}, args) is None
    line = other_settings("ck", {"batch_size": 32, "data": "x.npy", "lr": 0.01}, args)
    assert line == ("--resume ck: the checkpoint was made with other settings: "
                    "--batch-size: saved 32, now 64; --data: saved 'x.npy', now unset "
                    "(give the saved ones to go on with it)")


@pytest.mark.parametrize("module", ["serve", "progress"])
def test_two_rank_benchmarks_refuse_other_rank_counts_once(module, capsys):
    """bench.serve and bench.progress need 2 ranks: on any other count the one line of a
    refused option, exit code 2 (each rank printed it, exit code 1, no program name)."""
    import importlib
    mod = importlib.import_module(f"ddstore.bench.{module}")
    err = argparse_exit(capsys, 2, mod.main, [])[1]
    lines = err.strip().splitlines()  # (the program is pytest's here)
    assert len(lines) == 1 and lines[0].endswith(": error: runs on 2 ranks (mpiexec -n 2), "
                                                 "not 1"), err
