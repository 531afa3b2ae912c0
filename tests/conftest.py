"""Shared pytest helpers; how a test id leads to the MPI program it runs.

From a test id to its program.  Every MPI test names its program in ``tests/mpi/`` in
one of two ways, both visible in the test's own source:

- ``run_mpi("<prog>.py", nprocs, *args)`` (or the ``mpirun`` fixture) runs
  ``tests/mpi/<prog>.py`` alone: ``timeout --kill-after=10 <timeout> mpiexec -n
  <nprocs> python tests/mpi/<prog>.py <args>``.  On failure the message starts with that
  command line.
- ``@pytest.mark.shared_launch("<prog>.py", *args)`` with an ``nprocs`` parameter: the
  program runs as one section of a job that runs every selected shared-launch program of
  that rank count (``tests/mpi/checks.py``, to pay start-up once); the test gets (and
  is judged on) its program's section only, and its failure message names the program,
  its arguments, the rank count and the failed cases.  ``{name}`` in args is the test's
  parameter ``name`` (``{tmp}``: a fresh directory; ``{across}``: one directory for the
  whole session, shared by the jobs of every rank count, which run in increasing rank
  count: a job reads what the jobs of fewer ranks wrote).  E.g.
  ``tests/test_core.py::test_bad_input[2-auto]`` is
  ``@pytest.mark.shared_launch("core_errors.py", "{transport}")`` with nprocs=2,
  transport=auto.

To rerun one program by hand, alone, as the test ran it (from the repository root, with
``PYTHONPATH=.``)::

    timeout 300 mpiexec -n 2 python tests/mpi/core_errors.py auto

Always under ``timeout``: a deadlock then ends instead of hanging.  Every program's
docstring gives its ``Usage:`` line.  A program prints one line per failed check
(``[rank 1] FAIL (case 'bad widths'): ...``), one line per named case (``case 'bad
widths': 14 checks, 0 failures``, see ``tests/mpi/_harness.py``) and its summary
(``core_errors: 458 checks, 0 failures on 2 ranks``); it exits 0 only when every rank
passed every check.

Every test that starts processes (an MPI job, a benchmark or example run as a program)
is marked ``@pytest.mark.mpi``; ``run_mpi`` fails a test that is not, so the fast subset
``pytest -m "not mpi" tests`` (in-process tests only) stays fast.  Several programs also
run in-process on one rank (``run_in_process``: their ``main()`` in the pytest process).

``DDSTORE_TEST_MAX_RANKS=N`` (default: no limit) skips, with the reason, every test that
would start more than N ranks (its ``nprocs`` parameter, or a ``run_mpi`` call), for
machines too small to oversubscribe 3-4 ranks; the skip says how many ranks it needed.
"""
import collections
import os
import re
import resource
import shutil
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MPI_DIR = os.path.join(HERE, "mpi")
ROOT = os.path.dirname(HERE)  # the repository root
if MPI_DIR not in sys.path:  # the tests import the programs' builders (tests/mpi/_graphs.py)
    sys.path.insert(0, MPI_DIR)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "mpi: starts an MPI job under mpiexec, or a benchmark or example run "
                   "as a program (a plain Python child, a signal's or a fork's, does not "
                   "count); the faster subset is -m 'not mpi'")
    config.addinivalue_line(
        "markers", "shared_launch(program, *args, timeout=240, plain=False): the test's "
                   "MPI program runs in one job with the other selected programs of the "
                   "same rank count (tests/mpi/checks.py); args are formatted with the "
                   "test's parameters, {tmp} and {across}; plain=True: a script, not a harness "
                   "program (an example: judged by the test on its output)")
    config.addinivalue_line(
        "markers", "forks_workers: forks DataLoader worker processes from the pytest "
                   "process (left out under the preloaded ASan runtime, which deadlocks "
                   "a child forked while torch's threads run: scripts/sanitize.sh)")


_CURRENT = {"item": None}  # the test being run, for run_mpi's marker check


def max_ranks():
    """``DDSTORE_TEST_MAX_RANKS`` as an int, or None (no limit)."""
    text = os.environ.get("DDSTORE_TEST_MAX_RANKS", "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise pytest.UsageError(f"DDSTORE_TEST_MAX_RANKS={text!r}: expected a positive "
                                f"integer (the most ranks a test may start)")
    return int(text)


def _over_max_ranks(nprocs):
    """The skip reason when ``nprocs`` ranks exceed DDSTORE_TEST_MAX_RANKS, else None."""
    limit = max_ranks()
    if limit is not None and int(nprocs) > limit:
        return f"needs {nprocs} ranks, more than DDSTORE_TEST_MAX_RANKS={limit}"
    return None


@pytest.fixture(autouse=True)
def _current_test(request):
    _CURRENT["item"] = request.node
    yield
    _CURRENT["item"] = None


def require_mpi_marker():
    """Fail the running test unless it is marked ``mpi`` (called by whatever starts
    processes)."""
    item = _CURRENT["item"]
    if item is not None and item.get_closest_marker("mpi") is None:
        pytest.fail(f"{item.nodeid} starts processes but is not marked "
                    f"@pytest.mark.mpi (the fast subset -m 'not mpi' must start none)")


def mpiexec_path():
    """The mpiexec beside this Python (pip's mpich installs it there), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.access(here, os.X_OK) else (shutil.which("mpiexec") or
                                                  shutil.which("mpirun"))
    if exe is None:
        pytest.fail("mpiexec not found: install the 'mpich' package (pip install mpich)")
    return exe


class MPIResult(collections.namedtuple("MPIResult",
                                       "returncode elapsed output cmd shm shm_left",
                                       defaults=(frozenset(), frozenset()))):
    """What ``run_mpi(..., check=False)`` returns: exit code (124 or 137: ``timeout``
    ended it), wall seconds, combined stdout/stderr text, the command line, the MPICH
    shared-memory files this job's processes mapped (:class:`JobShm`), and those of them
    still in ``/dev/shm`` when it ended (before ``run_mpi`` removed them: see
    :func:`remove_job_shm`)."""


SHM_DIR = "/dev/shm"
# MPICH's node shared-memory segments made at MPI_Init (named by the job), unlinked in
# MPI_Finalize; its windows' segments (mpich_shar_tmp*) are unlinked as soon as made
SHM_PREFIXES = ("mpich_shm_", "mpich_vci_")


def mpich_shm_files():
    """The names of MPICH's shared-memory files in ``/dev/shm`` (empty where there is
    none)."""
    try:
        return {f for f in os.listdir(SHM_DIR) if f.startswith(SHM_PREFIXES)}
    except OSError:
        return set()


def shm_mapped_by(pids=None):
    """The MPICH shared-memory files (still named in ``/dev/shm``) that the processes
    ``pids`` map now (every process when None)."""
    mapped = set()
    if pids is None:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    parts = line.split(None, 5)
                    path = parts[5].strip() if len(parts) == 6 else ""
                    name = os.path.basename(path)
                    if os.path.dirname(path) == SHM_DIR and name.startswith(SHM_PREFIXES):
                        mapped.add(name)
        except OSError:  # the process ended, or is not ours to read
            continue
    return mapped


def descendants(root):
    """``root`` and every process below it (by parent pid, read from ``/proc``)."""
    children = collections.defaultdict(list)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = stat[stat.rindex(")") + 2:].split()[1]  # after "(comm) state"
        children[int(ppid)].append(int(pid))
    found, todo = [], [int(root)]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _started(pid):
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat`` field
    22), or None when it has ended (or is a zombie): with the pid, names one process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


class JobShm:
    """The MPICH shared-memory files that one job's processes map, sampled every 0.2 s
    from ``/proc`` while it runs (a thread): its ranks map their node's segment from
    ``MPI_Init`` until they end, so a job of more than a moment is always seen.  Only
    these files are the job's: other jobs on the machine make their own files in the
    same ``/dev/shm`` at any time.  ``with JobShm(proc.pid) as shm: ...``; then
    ``shm.seen``, and ``shm.leftover()``: the job's processes still alive."""

    def __init__(self, root):
        import threading
        self.root, self.seen, self.procs = root, set(), set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while True:
            pids = descendants(self.root)
            self.procs |= {(p, _started(p)) for p in pids if p != self.root}
            self.seen |= shm_mapped_by(pids)
            if self._stop.wait(0.2):
                return

    def leftover(self, grace=2.0):
        """The job's ranks (the processes below its root running this Python; not the
        ranks' /dev/shm watchers, which end by themselves once their rank has ended)
        still alive ``grace`` seconds after its root ended."""
        python = os.path.realpath(sys.executable)

        def alive():
            out = []
            for p, t in self.procs:
                try:
                    ours = os.path.realpath(f"/proc/{p}/exe") == python
                except OSError:
                    continue
                if ours and t is not None and _started(p) == t:
                    out.append(p)
            return sorted(out)
        deadline = time.monotonic() + grace
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        return alive()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False


def job_shm_left(names):
    """Which of a job's MPICH shared-memory files (``names``) are still in
    ``/dev/shm``."""
    return set(names) & mpich_shm_files()


def remove_job_shm(names, wait=5.0):
    """Remove the job's MPICH shared-memory files ``names`` still in ``/dev/shm`` once no
    process maps them (waiting up to ``wait`` seconds for the ranks of a killed job to
    go): MPICH unlinks them when its ranks end normally (and ddstore before it aborts a
    job), but ranks that are killed (a timeout, SIGKILL, a rank's ``os._exit``) leave
    them, 1-3 MB each, for as long as the machine runs.  Files of other jobs are never
    touched.  Nothing to do (no wait) after a normal end."""
    deadline = time.monotonic() + wait
    while True:
        left = job_shm_left(names)
        if not left:
            return
        for name in left - shm_mapped_by():
            try:
                os.unlink(os.path.join(SHM_DIR, name))
            except OSError:
                pass
        if time.monotonic() > deadline:
            return
        time.sleep(0.1)


def _children_cpu():
    """CPU seconds (user + system) of this process's ended and waited-for descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_mpi(script, nprocs, *args, timeout=240, env=None, runner=(), check=True,
            cwd=None):
    """Run ``tests/mpi/<script>`` on ``nprocs`` ranks under ``timeout``.

    ``script`` may also be an absolute path, or ``"-m"`` with the module name as the
    first of ``args``.  ``runner``: arguments put between the interpreter and the script
    (e.g. ``("-m", "mpi4py")``); ``cwd`` is the working directory of the job (default:
    pytest's).  With ``check=True`` (the default) a non-zero exit or a
    timeout fails the test and the combined stdout/stderr text is returned; with
    ``check=False`` an :class:`MPIResult` is returned whatever the exit code.
    """
    require_mpi_marker()
    reason = _over_max_ranks(nprocs)
    if reason is not None:
        pytest.skip(reason)
    if script == "-m":
        target = ["-m"]
    else:
        target = [script if os.path.isabs(script) else os.path.join(MPI_DIR, script)]
    cmd = ["timeout", "--kill-after=10", str(timeout), mpiexec_path(), "-n", str(nprocs),
           sys.executable] + list(runner) + target + [str(a) for a in args]
    full_env = dict(os.environ)
    full_env.setdefault("OMP_NUM_THREADS", "1")
    if env:
        full_env.update(env)
    t0 = time.perf_counter()
    cpu0 = _children_cpu()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=full_env, cwd=cwd)
    try:
        with JobShm(proc.pid) as shm:
            output = proc.communicate()[0]
    finally:
        if proc.poll() is None:  # interrupted: end the job
            proc.kill()
            proc.wait()
    _end_leftovers(shm.leftover(), cmd)
    left = job_shm_left(shm.seen)
    remove_job_shm(shm.seen)
    result = MPIResult(proc.returncode, time.perf_counter() - t0, output,
                       " ".join(cmd), frozenset(shm.seen), frozenset(left))
    if os.environ.get("DDSTORE_TEST_LAUNCH_LOG"):  # where the suite's time goes
        with open(os.environ["DDSTORE_TEST_LAUNCH_LOG"], "a") as f:
            f.write(f"{result.elapsed:.2f}\t{_children_cpu() - cpu0:.2f}\t{nprocs}\t"
                    f"{os.environ.get('PYTEST_CURRENT_TEST', '').split(' ')[0]}\t"
                    f"{' '.join(cmd[5:])}\n")
    if not check:
        return result
    out = result.output
    if result.returncode in (124, 137):
        pytest.fail(f"timed out after {timeout}s (deadlock?): {result.cmd}\n{out}")
    if result.returncode != 0:
        name = os.path.splitext(os.path.basename(str(target[-1] if script != "-m" else
                                                     args[0])))[0]
        cases = failed_cases(out, name)
        pytest.fail(f"exit code {result.returncode}"
                    + (f", failed case(s) {', '.join(map(repr, cases))}" if cases else "")
                    + f": {result.cmd}\n{out}")
    return out


def _end_leftovers(pids, cmd):
    """Kill a job's ranks still alive after its ``mpiexec`` ended (seen once, under load:
    a rank of an aborted job left spinning in ``MPI_Barrier`` for 17 minutes, a core
    taken from every later test), and say so as a warning in pytest's summary."""
    import signal
    import warnings
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if pids:
        warnings.warn(f"{len(pids)} process(es) of a job were alive after its mpiexec "
                      f"ended, killed (pids {pids}): {' '.join(cmd)}")


def on_ranks(nprocs):
    """How the harness (tests/mpi/_harness.py) ends its summary line: "on 1 rank",
    "on 3 ranks"."""
    return f"on {nprocs} rank{'s' if nprocs != 1 else ''}"


def argparse_exit(capsys, code, call, *args):
    """``call(*args)`` must end the way argparse ends a program (``SystemExit`` with
    ``code``: 0 after ``--help``, 2 for a refused option); returns ``(stdout, stderr)``
    of what it printed."""
    with pytest.raises(SystemExit) as info:
        call(*args)
    assert info.value.code == code, (info.value.code, code)
    captured = capsys.readouterr()
    return captured.out, captured.err


def run_in_process(module, *args):
    """Run the MPI program ``tests/mpi/<module>.py``'s ``main(*args)`` in this process
    (one rank, ``COMM_WORLD`` of size 1) with the harness's counts reset; returns
    ``(checks, failures)`` of that run."""
    import importlib
    if MPI_DIR not in sys.path:
        sys.path.insert(0, MPI_DIR)
    import _harness
    del _harness.failures[:]
    del _harness.failed_case_names[:]
    _harness.counts.update(checks=0, errors=0)
    importlib.import_module(module).main(*args)
    return _harness.counts["checks"], list(_harness.failures)


def passes_in_process(module, *args, more_than):
    """Run ``tests/mpi/<module>.py``'s ``main(*args)`` in this process
    (:func:`run_in_process`); fail the test unless it ran more than ``more_than`` checks
    and none failed."""
    checks, failures = run_in_process(module, *args)
    assert checks > more_than, f"{module}: {checks} checks, expected more than {more_than}"
    assert not failures, failures


def passed_on(section, nprocs, note=""):
    """Fail the test unless a program's output (a ``shared_launch`` section, or
    ``run_mpi``'s) has the summary ``0 failures on <nprocs> rank(s)``, then ``note``."""
    want = f"0 failures {on_ranks(nprocs)}" + (f" {note}" if note else "")
    assert want in section, f"{want!r} not in:\n{section}"


def widths_program_test(program, params, timeout=240, doc=None):
    """The test of a program ``tests/mpi/<program>`` that takes the store widths to run
    as its argument: one test per ``(nprocs, widths)`` of ``params`` (``widths``: "all",
    or the widths, "1 2"), each the program's section of the shared job of ``nprocs``
    ranks (``shared_launch``), passing when it says ``0 failures on <nprocs> ranks``.
    A test module assigns it to its test's name: ``test_x = widths_program_test(...)``.
    """
    @pytest.mark.mpi
    @pytest.mark.parametrize("nprocs,widths", params)
    @pytest.mark.shared_launch(program, "{widths}", timeout=timeout)
    def test(shared_launch, nprocs, widths):
        passed_on(shared_launch, nprocs)
    test.__doc__ = doc
    return test


def ranks_program_test(program, nprocs, timeout=240, doc=None):
    """The test of a program ``tests/mpi/<program>`` that takes no argument: one test
    per rank count of ``nprocs``, each the program's section of the shared job of that
    many ranks, passing when it says ``0 failures on <n> ranks``; as
    :func:`widths_program_test` (``test_x = ranks_program_test(...)``)."""
    @pytest.mark.mpi
    @pytest.mark.parametrize("nprocs", nprocs)
    @pytest.mark.shared_launch(program, timeout=timeout)
    def test(shared_launch, nprocs):
        passed_on(shared_launch, nprocs)
    test.__doc__ = doc
    return test


@pytest.fixture
def mpirun():
    return run_mpi


def one_rank_store(scope="function"):
    """The ``store`` fixture at ``scope``: a one-rank store (``MPI.COMM_SELF``, width 1)
    for in-process tests, freed after the test (or the module: ``store =
    one_rank_store("module")`` in a test module)."""
    @pytest.fixture(scope=scope, name="store")
    def fixture():
        from mpi4py import MPI
        import ddstore
        s = ddstore.DDStore(MPI.COMM_SELF, width=1)
        yield s
        s.free()
    return fixture


store = one_rank_store()


# ---------------------------------------------------------------- shared launches
# Most MPI programs check one layer each at 1-4 ranks.  Started one by one, every job
# pays the interpreter, torch and MPI start-up on every rank (3-8 s a launch on a 2-core
# machine, oversubscribed at 3-4 ranks) -- minutes over the suite.  A test marked
# ``@pytest.mark.shared_launch(program, *args)`` instead gets its program's section of
# one job per rank count that runs every selected such program (tests/mpi/checks.py), in
# the order pytest collected them.  Each test still passes or fails on its own section.
# ``plain=True`` marks a script that is not a harness program (an example, given by its
# path from the repository root): its section is what rank 0 printed while it ran, the
# test judges it; it must have returned (an exception in it ends the job).


def _shared_spec(item):
    """(nprocs, program, args, timeout, plain) of a shared-launch test item, or None."""
    m = item.get_closest_marker("shared_launch")
    if m is None:
        return None
    params = dict(getattr(getattr(item, "callspec", None), "params", {}))
    nprocs = params.get("nprocs", m.kwargs.get("nprocs"))
    if nprocs is None:
        raise pytest.UsageError(f"{item.nodeid}: shared_launch needs an nprocs parameter")
    program, *args = m.args
    args = tuple(str(a).format(tmp="{tmp}", across="{across}", **params) for a in args)
    plain = bool(m.kwargs.get("plain", False))
    if plain:  # (checks.py runs the others from tests/mpi)
        program = os.path.join(ROOT, program)
    return int(nprocs), program, args, int(m.kwargs.get("timeout", 240)), plain


def pytest_collection_modifyitems(session, config, items):
    plan = collections.OrderedDict()
    for item in items:
        params = dict(getattr(getattr(item, "callspec", None), "params", {}))
        reason = _over_max_ranks(params["nprocs"]) if "nprocs" in params else None
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
            continue
        spec = _shared_spec(item)
        if spec is not None:
            runs = plan.setdefault(spec[0], [])
            if spec[1:] not in runs:
                runs.append(spec[1:])
    config._shared_plan = plan
    config._shared_done = {}


RETURNED = "--- returned"  # what tests/mpi/checks.py prints on rank 0 after a program


def _command(program, args, tmp, across):
    """A program's part of the shared job's command line (``{tmp}`` and ``{across}``
    filled in), which is also what rank 0 prints after ``=== `` before running it."""
    return [program] + [a.replace("{tmp}", tmp).replace("{across}", across) for a in args]


def shared_job_ran(config, nprocs, program):
    """Whether this session's shared job of ``nprocs`` ranks has run ``program`` (a test
    reading what another rank count's section wrote into ``{across}``)."""
    done = getattr(config, "_shared_done", {}).get(nprocs)
    return done is not None and any(k.split(" ")[0] == program for k in done[1])


def _run_shared_job(runs, nprocs, tmp_path_factory):
    """Run the shared job of ``nprocs`` ranks (every program of ``runs``); returns
    ``(result, {key: section}, keys, runs)``."""
    tmp = str(tmp_path_factory.mktemp(f"shared{nprocs}"))
    across = str(tmp_path_factory.getbasetemp() / "shared-across")
    os.makedirs(across, exist_ok=True)
    cmd, keys = [], []
    for i, (prog, a, _t, _p) in enumerate(runs):
        sub = os.path.join(tmp, f"{i}")
        os.makedirs(sub, exist_ok=True)
        part = _command(prog, a, sub, across)
        cmd += (["+"] if cmd else []) + part
        keys.append(" ".join(part))
    result = run_mpi("checks.py", nprocs, *cmd, timeout=sum(r[2] for r in runs),
                     check=False)
    sections, cur = {}, None
    for line in result.output.splitlines():
        if line.startswith("=== "):
            cur = line[4:]
            sections[cur] = []
        elif cur is not None:
            sections[cur].append(line)
    return (result, {k: "\n".join(sections[k]) for k in keys if k in sections}, keys,
            runs)


@pytest.fixture
def shared_launch(request, tmp_path_factory):
    """Run (once per rank count, for every test that asks) the job of all selected
    shared-launch programs of this test's rank count; return this program's section of
    the output (what rank 0 printed from its ``=== program args`` line to the next).
    Fails the test when its program failed a check, did not run (an earlier program of
    the job aborted it), or the job timed out."""
    nprocs, program, args, timeout, plain = _shared_spec(request.node)
    config = request.config
    done = config._shared_done
    # the jobs of fewer ranks first ({across}: a later job reads what they wrote)
    for n in sorted(config._shared_plan):
        if n <= nprocs and n not in done:
            done[n] = _run_shared_job(config._shared_plan[n], n, tmp_path_factory)
    result, sections, keys, runs = done[nprocs]
    key = keys[runs.index((program, args, timeout, plain))]
    head = f"shared job of {nprocs} rank(s): {result.cmd}"
    if key not in sections:
        pytest.fail(f"{program} did not run: an earlier program of the shared job ended "
                    f"it (exit code {result.returncode}).\n{head}\n{result.output}")
    out = sections[key]
    if plain:  # checks.py's line once the script returned on rank 0
        if RETURNED not in out.splitlines():
            pytest.fail(f"{program} {' '.join(args)} did not run to its end on {nprocs} "
                        f"rank(s) (exit code {result.returncode}).\n{head}\n"
                        f"{result.output}")
        return out
    name = os.path.splitext(program)[0]
    summary = summary_of(out, name)
    if result.returncode in (124, 137) and summary is None:
        pytest.fail(f"timed out (deadlock?) in {program}\n{head}\n{result.output}")
    problem = summary_problem(summary, name, nprocs)
    if problem is not None:
        cases = failed_cases(out, name)
        if cases:
            problem += f" in case(s) {', '.join(map(repr, cases))}"
        pytest.fail(f"{program} {' '.join(args)} failed on {nprocs} rank(s): {problem}\n"
                    f"{head}\n{out if summary else result.output}")
    return out


_SCRIPT_SETS = {}  # key -> builder(tmp_path_factory) -> (runs, seconds per run)
_SCRIPTS_RAN = {}   # key -> (MPIResult, [output of each script of the set or None])


def register_scripts(key, builder):
    """Add a set of plain scripts (README blocks, examples, benchmarks: not harness
    programs) to the session's 2-rank scripts job (:func:`scripts_job`).  ``builder
    (tmp_path_factory)`` returns ``(runs, seconds)``: ``runs`` ``[(script path or
    "-m", [arg, ...]), ...]`` in the order they must run (a run that writes a checkpoint
    before the one that resumes from it), ``seconds`` the bound on each.  Called when the
    module that owns the set is imported (at collection, for the modules collected)."""
    _SCRIPT_SETS[key] = builder


def scripts_job(key, tmp_path_factory):
    """Run every registered set of scripts not run yet (:func:`register_scripts`; at the
    first call of a session: every set of the collected modules) one after another as
    ``__main__`` in one ``mpiexec -n 2`` job from the repository root
    (tests/mpi/checks.py ``--out``): torch and PyG are imported once per rank, not once
    per script or per set.  Returns ``(result, outs)`` of set ``key``: ``outs[i]`` is
    what every rank wrote to stdout and stderr during its script ``i``, rank by rank, or
    None when it did not run to its end (a script that raises or exits non-zero ends
    the job: the scripts after it, of every set, do not run either)."""
    if key not in _SCRIPTS_RAN:
        if key not in _SCRIPT_SETS:
            raise pytest.UsageError(f"scripts_job: no set {key!r} (register_scripts)")
        tmp = tmp_path_factory.mktemp("scripts")
        cmd, plan, seconds = ["--out", str(tmp)], [], 0
        names = [name for name in _SCRIPT_SETS if name not in _SCRIPTS_RAN]
        for name in names:
            runs, each = _SCRIPT_SETS[name](tmp_path_factory)
            for script, args in runs:
                cmd += (["+"] if plan else []) + [str(script)] + [str(a) for a in args]
                plan.append(name)
            seconds += each * len(runs)
        result = run_mpi("checks.py", 2, *cmd, timeout=seconds, cwd=ROOT, check=False)
        outs = {name: [] for name in names}
        for i, name in enumerate(plan):
            files = [tmp / f"{i}.{r}.out" for r in range(2)]
            outs[name].append("".join(f.read_text() for f in files)
                              if all(f.exists() for f in files) else None)
        for name in names:
            _SCRIPTS_RAN[name] = (result, outs[name])
    return _SCRIPTS_RAN[key]


def script_output(job, i, what):
    """Script ``i``'s output from :func:`scripts_job`'s ``job``; fails the test, with the
    job's output, when the script did not run to its end."""
    result, outs = job
    if outs[i] is None:
        pytest.fail(f"{what} did not run to its end in the shared job (exit code "
                    f"{result.returncode}): {result.cmd}\n{result.output}")
    return outs[i]


def summary_of(text, name):
    """``(checks, failures, ranks)`` of the last summary line that program ``name``'s
    harness printed in ``text`` (``<name>: <n> checks, <m> failures on <k> rank(s)``),
    found anywhere in a line (another rank's unfinished output may precede it), or None.
    """
    found = re.findall(rf"{re.escape(name)}: (\d+) checks, (\d+) failures on (\d+) "
                       rf"ranks?\b", text)
    return tuple(int(v) for v in found[-1]) if found else None


def failed_cases(text, name):
    """The names of the cases that program ``name`` reported failed in ``text`` (the
    harness's ``<name>: failed cases: 'a', 'b'`` line, the last one), or ``[]``."""
    import ast
    found = re.findall(rf"{re.escape(name)}: failed cases: (.*)$", text, re.M)
    if not found:
        return []
    return list(ast.literal_eval(f"[{found[-1]}]"))


def summary_problem(summary, name, nprocs):
    """Why a program's summary (from :func:`summary_of`) is not a pass on ``nprocs``
    ranks, or None when it is one: no summary, no check run, a failure, another rank
    count."""
    if summary is None:
        return f"no summary line '{name}: N checks, M failures on ...' found"
    checks, failed, ranks = summary
    if checks == 0:
        return "it ran 0 checks"
    if failed:
        return f"{failed} failed checks"
    if ranks != nprocs:
        return f"the summary is for {ranks} ranks"
    return None
