"""Every code block of README.md and of docs/*.md runs as written.

- ```python blocks: each is saved as a file and run from the repository root with
  ``mpiexec -n 2`` (under ``timeout``, through ``conftest.run_mpi``); the test checks the
  exit code and a line the block prints (``PYTHON_EXPECT``, keyed by the file and the
  heading of the section the block is in, so one section holds at most one block).
- ```bash blocks: every command line is run with ``bash -c`` from the repository root
  (under ``timeout``), the interpreter's own directory first on ``PATH``, and must print
  what ``BASH_EXPECT`` names, unless ``BASH_SKIP`` names it with the reason (installs,
  commands that change the installation, long jobs whose small versions run in
  test_examples.py or the benchmark smoke tests).
- ```text blocks are shown, never run: output, the layout, commands for a script of your
  own or a cluster.  Any other fence (or a bare ```) is an error, so a new block is run
  unless someone marks it on purpose.

A new file in docs/ is picked up by itself.  The README stays a front door (at most
``README_MAX_LINES`` lines), and every relative link of these files names a file and a
heading that exist; so does every file and heading that the code, scripts and tests
cite (``docs/cluster.md, "Failure behaviour"``).

The README's sample outputs are checked against a run where they are exact
(``SAMPLES``: the demo's store line, the main job's header and first epochs; times and
rates masked), and the data sizes its comments state against the loaders
(``DATA_COMMENTS``).
"""
import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import register_scripts, run_mpi, scripts_job

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
README_MAX_LINES = 300
FENCES = {"python", "bash", "text"}


def doc_files():
    """README.md, then every docs/*.md, as paths relative to the repository root."""
    return ["README.md"] + sorted(os.path.relpath(p, ROOT)
                                  for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))


# "file: section heading" -> a regular expression the block's output must match
PYTHON_EXPECT = {
    "README.md: The store":
        r"rank 1: holds rows \[500, 1000\), read row 567 = \[1701\. 1702\. 1703\.\]",
    "README.md: Index-batching: windows of a series, cut on demand":
        r"rank 1: 358 training windows; x \(19, 4, 20, 1\), y \(19, 4, 20, 1\)",
    "README.md: Dynamic graphs: checkpoints plus deltas":
        r"rank 1: step 57 has 78 edges, 40839 over 120 steps",
    "README.md: Temporal graphs and node memory":
        r"rank 1: \d+ neighbours sampled in the last batch; memory sum 13144",
    "README.md: Checkpoint and restart: long jobs":
        r"rank 1: restored \['x'\] at width 1",
    "README.md: PyG: FeatureStore, GraphStore and NeighborLoader":
        r"rank 1: 4 batches; the first has \d+ nodes, \d+ edges",
    'docs/cluster.md: `width="auto"` and the memory budget':
        r"width [12] \([12] replicas\) for 800000 bytes; budget [0-9.]+ GB per rank",
    "docs/store.md: Records: samples of different sizes":
        r"rank 1: sample 0 z = \[2 2\]; \[5, 2\] rows; sizes \[2, 0, 5\]",
    "docs/hydragnn.md: Graph samples (HydraGNN)":
        r"rank 1: 2 batches of 16 graphs, 2000 atoms",
    "docs/hydragnn.md: Compatibility: `pyddstore` (the original DDStore API)":
        r"rank 0: x rows 100, 101 come from rank 1; y\[50\] = 11\.0",
    "docs/index-batching.md: Spatiotemporal series: index-batching":
        r"rank 1: 358 training windows, x \(4, 20, 1\), last batch \(\d+, 4, 20, 1\)",
    "docs/index-batching.md: Series from a CSV file":
        r"rank 1: 2016 steps x 6 sensors; 1388 training windows, x \(12, 6, 2\)",
    "docs/dynamic-graphs.md: Dynamic graphs: checkpoints plus deltas":
        r"rank 1: snapshot 57 has 78 edges; \d+ bytes here vs 816780 as full snapshots",
    "docs/temporal-graphs.md: Temporal graphs":
        r"rank 1: node 42 has \d+ temporal neighbours; last batch: \d+ edges",
    "docs/temporal-graphs.md: Node memory: training state for TGN, JODIE and APAN":
        r"rank 1: 726 nodes have mail; memory checksum -?[0-9.]+; 120016 bytes here",
    "docs/temporal-graphs.md: Checkpoint and restart":
        r"rank 1: restored at width 1: 5000 edges, the same samples: True; every node's "
        r"mail: True",
    "docs/troubleshooting.md: A job that seems to hang":
        r"rank 1: collective calls out of step: every rank must make the same collective "
        r"calls, in the same order, with the same names \(rank 0 called add\('a'\); "
        r"rank 1 called add\('b'\)\)",
    "docs/pyg.md: PyG's loaders over the store (`ddstore.pyg`)":
        r"rank 1: 4 batches, the last \d+ nodes and \d+ edges; \d+ CSC bytes here",
    "docs/pyg.md: DataLoader workers (`num_workers > 0`)":
        r"rank 1: 4 batches from 2 workers, the same as num_workers=0",
}

# bash command (as written, without its trailing comment) -> what it must print
BASH_EXPECT = {
    "mpiexec -n 4 python -m ddstore demo": r"verified every byte: OK",
    "mpiexec -n 2 python tests/mpi/core_roundtrip.py auto":
        r"core_roundtrip: [1-9]\d* checks, 0 failures on 2 ranks",
    "mpiexec --version": r"HYDRA build details",
}

# bash commands not run here, and why (commands of README.md and docs/*.md alike)
BASH_SKIP = {
    "export PATH=$(dirname $(python -c 'import sys; print(sys.executable)')):$PATH":
        "changes the PATH of the user's own shell (every command here runs in a shell of "
        "its own, with MPICH's mpiexec on its PATH; the next line, run, checks it)",
    "bash scripts/run.sh": "installs, then the full main job (4 ranks, ~40 s); the main "
                           "job runs small in test_examples.py",
    "bash scripts/test.sh": "installs, then runs this test suite",
    "pip uninstall -y mpich mpi4py": "changes the installation (cluster MPI set-up)",
    "MPICC=$(which mpicc) pip install --no-binary mpi4py --no-cache-dir mpi4py":
        "changes the installation (cluster MPI set-up)",
    "MPICC=$(which mpicc) pip install --no-build-isolation -e .":
        "changes the installation (cluster MPI set-up)",
    "mpiexec -n 2 python examples/traffic_index_batching.py":
        "long job (45-75 s); runs small in test_examples.py",
    "mpiexec -n 2 python examples/traffic_index_batching.py --width 2 --sampler batch":
        "long job; runs small in test_examples.py",
    "mpiexec -n 2 python examples/traffic_index_batching.py --data chickenpox":
        "long job (20 epochs)",
    "mpiexec -n 2 python examples/dynamic_graph_forecast.py":
        "long job (20 epochs); runs small in test_examples.py",
    "mpiexec -n 2 python examples/dynamic_graph_forecast.py --width 2":
        "long job (20 epochs); runs small in test_examples.py",
    "mpiexec -n 2 python examples/tgat_link_prediction.py":
        "long job (~1 min); runs small in test_examples.py",
    "mpiexec -n 2 python examples/tgat_link_prediction.py --width 1 --strategy recent "
    "--chunks 4": "long job (~1 min); runs small in test_examples.py",
    "mpiexec -n 2 python examples/tgn_link_prediction.py":
        "long job (~2 min: TGN, then TGAT); runs small in test_examples.py",
    "mpiexec -n 2 python examples/tgn_link_prediction.py --model jodie --baseline none":
        "long job (~40 s); runs small in test_examples.py",
    "mpiexec -n 2 python examples/tgn_link_prediction.py --model apan --baseline none":
        "long job (~40 s); runs small in test_examples.py",
    "mpiexec -n 2 python examples/tgn_link_prediction.py --epochs 2 --checkpoint CK":
        "long job; runs small in test_examples_resume.py",
    "mpiexec -n 2 python examples/tgn_link_prediction.py --epochs 3 --resume CK --width 1":
        "long job; runs small in test_examples_resume.py",
    "mpiexec -n 2 python -m ddstore.bench.core": "benchmark (long job)",
    # the benchmark list: full runs take minutes each; their small versions run in
    # the benchmark smoke tests of test_core, test_graphs, test_spatiotemporal,
    # test_temporal, test_dynamic and test_scale
    "mpiexec -n 2 python -m ddstore.bench.compat": "benchmark (long job)",
    "mpiexec -n 2 python -m ddstore.bench.gather": "benchmark (about a minute, 1 GB); "
                                                   "smoke test in test_core.py",
    "mpiexec -n 2 python -m ddstore.bench.graphs": "benchmark (long job)",
    "python -m ddstore.bench.spatiotemporal": "benchmark (long job)",
    "mpiexec -n 2 python -m ddstore.bench.temporal": "benchmark (long job)",
    "mpiexec -n 2 python -m ddstore.bench.dynamic": "benchmark (long job)",
    "mpiexec -n 2 python -m ddstore.bench.scale series": "benchmark (long job, ~10 GB)",
    "mpiexec -n 2 python -m ddstore.bench.prefetch": "benchmark (long job)",
    # between nodes, reading ahead (benchmarks.md; $BN: MPICH's network module on the
    # loopback): the --step-ms / --prefetch options run small in the benchmarks' smoke
    # tests
    "env $BN mpiexec -n 2 python -m ddstore.bench.pyg --scale 0.05 --batches 10 "
    "--in-memory skip      --transports auto --prefetch 2 --step-ms 400":
        "benchmark between nodes (long job)",
    "env $BN mpiexec -n 2 python -m ddstore.bench.temporal --num-nodes 20000 "
    "--num-edges 200000      --batches 40 --widths 2 --transports auto --step-ms 150 "
    "--prefetch 2 --no-plot": "benchmark between nodes (long job)",
    "env $BN mpiexec -n 2 python -m ddstore.bench.compat --calls 2000 --batches 100      "
    "--transports auto --step-ms 50 --prefetch 2 --read-ahead-batches 40":
        "benchmark between nodes (long job)",
    "env $BN python -m ddstore.bench.spatiotemporal --steps 5000 --epochs 2 --step-ms 30"
    "      --prefetch 2": "benchmark between nodes (long job)",
    "mpiexec -n 2 python -m ddstore.bench.node_memory": "benchmark (long job)",
    "mpiexec -n 2 python -m ddstore.bench.pyg": "benchmark (long job, ~3 GB per rank "
                                                "at full size); smoke test in "
                                                "test_pyg_ranges.py",
    "mpiexec -n 2 python -m ddstore.bench.progress": "benchmark (about a minute); its "
                                                     "check runs in test_between_nodes.py",
    "mpiexec -n 2 python -m ddstore.bench.serve": "benchmark (a few minutes, between "
                                                  "nodes); smoke test in "
                                                  "test_between_nodes.py",
    "mpiexec -n 2 python -m ddstore.bench.checkpoint": "benchmark (1 GB of rows); smoke "
                                                       "test in test_checkpoint.py",
    "mpiexec -n 2 python examples/graphsage_large.py":
        "long job (ogbn-products-sized graph); runs small in test_examples.py",
    "mpiexec -n 2 python examples/graphsage_large.py --scale 0.02 --epochs 5":
        "long job (~30 s); runs small in test_examples.py",
    "mpiexec -n 2 python -m ddstore.bench.temporal_scale --scale gdelt":
        "benchmark (long job, ~20 GB of memory; smoke-tested in test_temporal.py)",
    "mpiexec -n 2 python -m ddstore bench-core --quick":
        "the same program as test_core.py::test_core_benchmark_writes_json runs",
}


def readme_blocks(text=None, path="README.md"):
    """[(fence, heading, code, line number)] of every fenced block of a markdown file
    (``path`` relative to the repository root; ``text`` instead of reading it)."""
    lines = (open(os.path.join(ROOT, path)).read() if text is None else text).splitlines()
    blocks, heading, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            fence, start, body = line[3:].strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            assert i < len(lines), f"{path}:{start}: unclosed ``` block"
            blocks.append((fence, heading, "\n".join(body) + "\n", start))
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()
        i += 1
    return blocks


def doc_blocks():
    """[(file, fence, heading, code, line number)] of every block of every doc file."""
    return [(path, *block) for path in doc_files() for block in readme_blocks(path=path)]


def bash_commands(code):
    """The command lines of a bash block (continuations joined), trailing comments cut."""
    out, pending = [], ""
    for line in code.splitlines():
        line = pending + line
        pending = ""
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        command = re.sub(r"(^|\s)#.*$", "", line).strip()  # no '#' inside these commands
        if command:
            out.append(command)
    return out


def python_blocks():
    """[("file: heading", code, "file:line")] of every python block."""
    return [(f"{path}: {heading}", code, f"{path}:{line}")
            for path, fence, heading, code, line in doc_blocks() if fence == "python"]


def all_bash_commands():
    return [(command, f"{path}:{line}") for path, fence, _, code, line in doc_blocks()
            if fence == "bash" for command in bash_commands(code)]


def test_fences_are_known():
    bad = [(where, fence) for path, fence, _, _, line in doc_blocks()
           if fence not in FENCES for where in [f"{path}:{line}"]]
    assert not bad, f"blocks with a fence other than {sorted(FENCES)}: {bad}"


def test_expectations_name_existing_blocks():
    headings = [heading for heading, _, _ in python_blocks()]
    assert sorted(headings) == sorted(PYTHON_EXPECT), \
        "each ```python block needs one PYTHON_EXPECT entry keyed by 'file: heading'"
    commands = [command for command, _ in all_bash_commands()]
    assert len(set(commands)) == len(commands), commands
    assert not set(BASH_SKIP) & set(BASH_EXPECT)
    stale = (set(BASH_SKIP) | set(BASH_EXPECT)) - set(commands)
    assert not stale, f"BASH_SKIP / BASH_EXPECT name commands in no doc file: {stale}"
    unlisted = set(commands) - set(BASH_SKIP) - set(BASH_EXPECT)
    assert not unlisted, f"doc commands with no expected output: {unlisted}"


def test_readme_is_a_front_door():
    """README.md stays short: the rest lives in docs/, which has its index."""
    with open(README) as f:
        n = len(f.read().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES})"
    assert "docs/README.md" in doc_files()


def slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped except '-' and
    '_', each space a '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_name_existing_files_and_headings():
    """Every relative link [text](path#anchor) in README.md and docs/*.md names a file of
    the repository and, with an anchor, a heading of that file."""
    bad = []
    for path in doc_files():
        with open(os.path.join(ROOT, path)) as f:
            text = f.read()
        prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target):
                continue                                   # http:, https:, mailto:
            file, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(ROOT, os.path.dirname(path), file)) \
                if file else os.path.join(ROOT, path)
            if not os.path.exists(full):
                bad.append(f"{path}: {target} (no file)")
            elif anchor and full.endswith(".md"):
                with open(full) as f:
                    body = re.sub(r"^```.*?^```", "", f.read(), flags=re.S | re.M)
                anchors = {slug(line.lstrip("#")) for line in body.splitlines()
                           if line.startswith("#")}
                if anchor not in anchors:
                    bad.append(f"{path}: {target} (no such heading)")
    assert not bad, "broken links:\n" + "\n".join(bad)


def run_python_block(code, tmp_path, nprocs=2):
    script = tmp_path / "block.py"
    script.write_text(code)
    return run_mpi(str(script), nprocs, timeout=300, cwd=ROOT)


def _block_runs(tmp_path_factory):
    """Every ```python block of README.md and docs/*.md, each saved as its own file
    (:func:`conftest.register_scripts`)."""
    folder = tmp_path_factory.getbasetemp() / "readme-blocks"
    folder.mkdir(exist_ok=True)
    runs = []
    for i, (_, code, _) in enumerate(python_blocks()):
        script = folder / f"block{i}.py"
        script.write_text(code)
        runs.append((script, []))
    return runs, 300


register_scripts("readme", _block_runs)


def blocks_job(tmp_path_factory):
    """The ```python blocks run as ``__main__`` one after another from the repository
    root, in the session's 2-rank scripts job (conftest.scripts_job: torch and PyG
    imported once, not once per block; a block that raises ends the job).  Returns
    (result, {"file: heading": what every rank printed})."""
    result, outs = scripts_job("readme", tmp_path_factory)
    return result, {heading: out for (heading, _, _), out in zip(python_blocks(), outs)
                    if out is not None}


@pytest.mark.mpi
@pytest.mark.parametrize("heading", sorted(PYTHON_EXPECT))
def test_python_block(heading, tmp_path_factory):
    (code, line), = [(c, n) for h, c, n in python_blocks() if h == heading]
    result, outs = blocks_job(tmp_path_factory)
    out = outs.get(heading)
    assert out is not None, (f"{line}: the block did not run to its end (exit "
                             f"{result.returncode}):\n{result.output}")
    assert re.search(PYTHON_EXPECT[heading], out), f"{line}:\n{out}"


def run_bash(command, timeout=300):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(["timeout", "--kill-after=10", str(timeout), "bash", "-c",
                           command], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout


_BASH_RUNS = {}  # command -> (exit code, output): one run shared by the tests below


def bash_run(command):
    """``run_bash(command)``, run once per session."""
    if command not in _BASH_RUNS:
        _BASH_RUNS[command] = run_bash(command)
    return _BASH_RUNS[command]


@pytest.mark.mpi
@pytest.mark.parametrize("command", sorted(BASH_EXPECT))
def test_bash_command(command):
    rc, out = bash_run(command)
    assert rc == 0, f"exit code {rc}: {command}\n{out}"
    assert re.search(BASH_EXPECT[command], out), f"{command}\n{out}"


@pytest.mark.mpi
def test_the_runners_fail_on_a_failing_block(tmp_path):
    """What these tests use to run a block reports a failure: a block that raises on one
    rank, and a command that exits non-zero."""
    with pytest.raises(pytest.fail.Exception, match="exit code|timed out"):
        run_python_block("from mpi4py import MPI\n"
                         "assert MPI.COMM_WORLD.rank == 0, 'fails on rank 1'\n", tmp_path)
    assert run_bash("python -c 'raise SystemExit(3)'")[0] == 3
    blocks = readme_blocks("# A\n```python\nx = 1\n```\n## B\n```bash\nls \\\n  -l  # c\n"
                           "```\n")
    assert [(f, h) for f, h, _, _ in blocks] == [("python", "A"), ("bash", "B")]
    assert bash_commands(blocks[1][2]) == ["ls    -l"]


# README's sample outputs, checked against a run where they are exact: the first words of
# a ```text block of README.md -> (how many of its lines are compared, the command that
# prints them: a README bash command (its run is shared with test_bash_command) or
# (nprocs, script, *args) run in the shared job of that rank count (conftest's
# shared_launch, plain=True), the measured parts of a line: (regular
# expression, replacement) applied to both sides before they are compared).
MEASURED_DEMO = [(r"filled in [0-9.]+ s", "filled in <s>"), (r"\d+ rows/s", "<rows/s>"),
                 (r"[0-9.]+ MB/s", "<MB/s>"), (r"(p\d\d) [0-9.]+ us", r"\1 <us>")]
MEASURED_MAIN_JOB = [(r"preload [0-9.]+ s", "preload <s>"),
                     # an epoch line: epoch, train and val loss are exact; samples/s,
                     # load latencies and time are measured
                     (r"^(\s*\d+\s+\S+\s+\S+)\s.*$", r"\1 <measured>")]
MAIN_JOB = (4, "examples/hydragnn_ising.py", "--epochs", "1", "--quiet")  # ranks, command
SAMPLES = {
    "[ddstore] store:": (3, "mpiexec -n 4 python -m ddstore demo", MEASURED_DEMO),
    "ranks 4, width 4": (4, MAIN_JOB, MEASURED_MAIN_JOB),
}

# a comment of a README python block stating a data set's size -> (file, the size as
# the shape's first two entries)
DATA_COMMENTS = {
    r'load_pgt_json\("tests/data/chickenpox.json"\)\s*# (\d+) weeks x (\d+) counties':
        "tests/data/chickenpox.json",
    r'load_pgt_json\("tests/data/twitter_tennis_rg17.json"\)\s*# (\d+) hourly graphs':
        "tests/data/twitter_tennis_rg17.json",
}


def readme_sample(first_words):
    """The lines of README.md's ```text block that starts with ``first_words``."""
    found = [code.splitlines() for fence, _, code, _ in readme_blocks()
             if fence == "text" and code.startswith(first_words)]
    assert len(found) == 1, f"README.md has {len(found)} text blocks starting " \
                            f"{first_words!r}"
    return found[0]


def masked(line, measured):
    for pattern, replacement in measured:
        line = re.sub(pattern, replacement, line)
    return " ".join(line.split())


def sample_mismatches(sample, output, measured):
    """The lines of ``sample`` (masked) that are not lines of ``output`` (masked)."""
    printed = {masked(line, measured) for line in output.splitlines()}
    return [line for line in sample if masked(line, measured) not in printed]


def test_sample_check_catches_a_difference():
    out = ("[ddstore] store: 4 ranks, width 4 (1 replica), transport auto; 10 rows; "
           "filled in 0.31 s\n")
    same = "[ddstore] store: 4 ranks, width 4 (1 replica), transport auto; 10 rows; " \
           "filled in 0.17 s"
    assert sample_mismatches([same], out, MEASURED_DEMO) == []
    wrong = same.replace("replica)", "replicas)")
    assert sample_mismatches([wrong], out, MEASURED_DEMO) == [wrong]
    epoch = "    1     0.2605    0.0345      596.3        32.8       188.3    5.37"
    assert sample_mismatches([epoch], epoch.replace("596.3", "200.5"),
                             MEASURED_MAIN_JOB) == []
    assert sample_mismatches([epoch], epoch.replace("0.0345", "0.0346"),
                             MEASURED_MAIN_JOB) == [epoch]


def check_sample(first_words, out):
    """README.md's sample block starting ``first_words`` against ``out``, what its command
    printed."""
    n, command, measured = SAMPLES[first_words]
    sample = [line for line in readme_sample(first_words)[:n] if line.strip() != "..."]
    bad = sample_mismatches(sample, out, measured)
    assert not bad, (f"README.md's sample lines not printed by {command} (times and rates "
                     f"masked):\n" + "\n".join(bad) + f"\n--- output:\n{out}")


@pytest.mark.mpi
def test_readme_demo_sample_output():
    command = SAMPLES["[ddstore] store:"][1]
    rc, out = bash_run(command)
    assert rc == 0, f"exit code {rc}: {command}\n{out}"
    check_sample("[ddstore] store:", out)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [MAIN_JOB[0]])
@pytest.mark.shared_launch(*MAIN_JOB[1:], timeout=900, plain=True)
def test_readme_main_job_sample_output(shared_launch, nprocs):
    """The main job's header and first epochs, from its run in the shared job of its rank
    count (tests/mpi/checks.py: the same script, arguments and ranks as alone)."""
    check_sample("ranks 4, width 4", shared_launch)


def test_readme_data_comments_match_the_loaders():
    from ddstore.sources import load_pgt_json
    with open(README) as f:
        text = f.read()
    for pattern, path in DATA_COMMENTS.items():
        m = re.search(pattern, text)
        assert m, f"README.md: no comment matching {pattern}"
        stated = tuple(int(g) for g in m.groups())
        shape = tuple(load_pgt_json(os.path.join(ROOT, path)).shape[:len(stated)])
        assert stated == shape, f"README.md says {stated} for {path}; the loader gives {shape}"


def cited_docs():
    """[(file:line, cited file, heading or None)] of every reference to README.md or
    docs/*.md in the code, scripts and tests: ``docs/x.md, "Heading"``, ``"Heading" in
    docs/x.md``, ``docs/x.md, rule N`` or a bare file name."""
    files = [os.path.join(ROOT, p) for p in (".ci/run", "setup.py", "pyddstore.py")]
    for folder, exts in (("ddstore", (".py",)), ("scripts", (".sh",)),
                         ("tests", (".py",)), ("examples", (".py",)),
                         ("csrc", (".c", ".h")), ("python_bindings", (".py",))):
        for base, _, names in os.walk(os.path.join(ROOT, folder)):
            files += [os.path.join(base, n) for n in names if n.endswith(exts)]
    doc = r"(README(?:\.md)?|docs/[\w-]+\.md)"
    out = []
    for path in files:
        if os.path.abspath(path) == os.path.abspath(__file__) or not os.path.exists(path):
            continue
        with open(path, errors="replace") as f:
            for number, line in enumerate(f, 1):
                where = f"{os.path.relpath(path, ROOT)}:{number}"
                if re.search(r"\bDESIGN\.md", line):
                    out.append((where, "DESIGN.md", None))
                for m in re.finditer(doc + r'(?:,? \\?"([^"\\]+)\\?"|,? rule (\d+))?',
                                     line):
                    heading = m.group(2) or (m.group(3) and f"Rule {m.group(3)}:")
                    out.append((where, re.sub(r"^README$", "README.md", m.group(1)),
                                heading))
                for m in re.finditer(r'"([^"]+)" in ' + doc, line):
                    out.append((where, re.sub(r"^README$", "README.md", m.group(2)),
                                m.group(1)))
    return out


def test_code_cites_existing_docs():
    """Every doc file the code, scripts and tests cite exists, with the heading they name
    (``rule N``: the heading that starts ``Rule N:``)."""
    bad, cited = [], cited_docs()
    for where, path, heading in cited:
        full = os.path.join(ROOT, path)
        if not os.path.exists(full):
            bad.append(f"{where}: {path} (no such file)")
            continue
        if heading is None:
            continue
        with open(full) as f:
            body = re.sub(r"^```.*?^```", "", f.read(), flags=re.S | re.M)
        headings = [line.lstrip("#").strip() for line in body.splitlines()
                    if line.startswith("#")]
        if not any(h == heading or (heading.startswith("Rule ") and h.startswith(heading))
                   for h in headings):
            bad.append(f"{where}: {path}, {heading!r} (no such heading)")
    assert len(cited) >= 5, cited
    assert not bad, "stale references to the docs:\n" + "\n".join(bad)
