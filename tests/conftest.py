"""Shared pytest helpers.

MPI cases run as separate programs under ``mpiexec``, wrapped in ``timeout`` so that a
deadlock fails the test instead of hanging CI.  A program signals success by exiting 0;
it prints what it checked, and pytest shows that output when it fails.

Every test that starts processes (an MPI job, a benchmark or example run as a program)
is marked ``@pytest.mark.mpi``; ``run_mpi`` fails a test that is not, so the fast subset
``pytest -m "not mpi" tests`` (in-process tests only) stays fast.
"""
import collections
import os
import shutil
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MPI_DIR = os.path.join(HERE, "mpi")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "mpi: starts processes (an MPI job under mpiexec, or a benchmark or "
                   "example run as a program); the fast subset is -m 'not mpi'")


_CURRENT = {"item": None}  # the test being run, for run_mpi's marker check


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


class MPIResult(collections.namedtuple("MPIResult", "returncode elapsed output cmd")):
    """What ``run_mpi(..., check=False)`` returns: exit code (124 or 137: ``timeout``
    ended it), wall seconds, combined stdout/stderr text, and the command line."""


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
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=full_env, cwd=cwd)
    result = MPIResult(proc.returncode, time.perf_counter() - t0, proc.stdout,
                       " ".join(cmd))
    if not check:
        return result
    out = result.output
    if proc.returncode in (124, 137):
        pytest.fail(f"timed out after {timeout}s (deadlock?): {result.cmd}\n{out}")
    if proc.returncode != 0:
        pytest.fail(f"exit code {proc.returncode}: {result.cmd}\n{out}")
    return out


def on_ranks(nprocs):
    """How the harness (tests/mpi/_harness.py) ends its summary line: "on 1 rank",
    "on 3 ranks"."""
    return f"on {nprocs} rank{'s' if nprocs != 1 else ''}"


@pytest.fixture
def mpirun():
    return run_mpi


@pytest.fixture
def store():
    """A one-rank store (``MPI.COMM_SELF``, width 1) for in-process tests, freed after
    the test."""
    from mpi4py import MPI
    import ddstore
    s = ddstore.DDStore(MPI.COMM_SELF, width=1)
    yield s
    s.free()
