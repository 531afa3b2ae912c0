"""Shared pytest helpers.

MPI cases run as separate programs under ``mpiexec``, wrapped in ``timeout`` so that a
deadlock fails the test instead of hanging CI.  A program signals success by exiting 0;
it prints what it checked, and pytest shows that output when it fails.
"""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MPI_DIR = os.path.join(HERE, "mpi")


def mpiexec_path():
    """The mpiexec beside this Python (pip's mpich installs it there), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.access(here, os.X_OK) else (shutil.which("mpiexec") or
                                                  shutil.which("mpirun"))
    if exe is None:
        pytest.fail("mpiexec not found: install the 'mpich' package (pip install mpich)")
    return exe


def run_mpi(script, nprocs, *args, timeout=240, env=None, cwd=None):
    """Run ``tests/mpi/<script>`` on ``nprocs`` ranks; fail on a non-zero exit or timeout.

    ``script`` may also be an absolute path, or ``"-m"`` with the module name as the
    first of ``args``; ``cwd`` is the working directory of the job (default: pytest's).
    Returns the combined stdout/stderr text.
    """
    if script == "-m":
        target = ["-m"]
    else:
        target = [script if os.path.isabs(script) else os.path.join(MPI_DIR, script)]
    cmd = ["timeout", "--kill-after=10", str(timeout), mpiexec_path(), "-n", str(nprocs),
           sys.executable] + target + [str(a) for a in args]
    full_env = dict(os.environ)
    full_env.setdefault("OMP_NUM_THREADS", "1")
    if env:
        full_env.update(env)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=full_env, cwd=cwd)
    out = proc.stdout
    if proc.returncode in (124, 137):
        pytest.fail(f"timed out after {timeout}s (deadlock?): {' '.join(cmd)}\n{out}")
    if proc.returncode != 0:
        pytest.fail(f"exit code {proc.returncode}: {' '.join(cmd)}\n{out}")
    return out


@pytest.fixture
def mpirun():
    return run_mpi
