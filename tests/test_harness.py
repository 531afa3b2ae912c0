"""The MPI test programs' harness (tests/mpi/_harness.py): a failure on any rank ends
the whole job promptly and non-zero, and every rank agrees on the result."""
import glob
import os

import pytest

from conftest import MPI_DIR, run_mpi

PROMPT = 30  # seconds; the job used to wait for ``timeout`` (180 s) instead


@pytest.mark.mpi
def test_exception_on_one_rank_ends_the_job_promptly():
    r = run_mpi("harness_selftest.py", 2, "raise", timeout=90, check=False)
    assert r.returncode not in (0, 124, 137), f"exit {r.returncode}:\n{r.output}"
    assert r.elapsed < PROMPT, f"took {r.elapsed:.1f}s to end:\n{r.output}"
    assert "[rank 1] RuntimeError: injected failure on rank 1" in r.output, r.output
    assert "aborting the job" in r.output, r.output
    assert "the Barrier returned" not in r.output, r.output


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["fail", "error"])
def test_failed_check_on_one_rank_fails_every_rank(mode):
    r = run_mpi("harness_selftest.py", 2, mode, timeout=90, check=False)
    assert r.returncode not in (0, 124, 137), f"exit {r.returncode}:\n{r.output}"
    assert "[rank 1] FAIL: injected" in r.output, r.output
    assert "failures on 2 ranks" in r.output and " 0 failures" not in r.output, r.output


@pytest.mark.mpi
def test_passing_checks_exit_zero():
    out = run_mpi("harness_selftest.py", 2, "pass", timeout=90)
    assert "harness_selftest: 10 checks, 0 failures on 2 ranks" in out, out


@pytest.mark.mpi
def test_several_programs_in_one_job():
    """tests/mpi/checks.py (the shared launches): each program's summary counts its own
    checks only, a failed check in one program fails the job but not the summaries of
    the others, and an exception still ends the job at once, before later programs."""
    r = run_mpi("checks.py", 2, "harness_selftest.py", "pass", "+", "harness_selftest.py",
                "fail", "+", "harness_selftest.py", "pass", timeout=90, check=False)
    assert r.returncode not in (0, 124, 137), f"exit {r.returncode}:\n{r.output}"
    lines = [ln for ln in r.output.splitlines() if ln.startswith("harness_selftest: ")]
    assert lines == ["harness_selftest: 10 checks, 0 failures on 2 ranks",
                     "harness_selftest: 2 checks, 1 failures on 2 ranks",
                     "harness_selftest: 10 checks, 0 failures on 2 ranks"], r.output
    assert r.output.count("=== harness_selftest.py ") == 3, r.output
    r = run_mpi("checks.py", 2, "harness_selftest.py", "raise", "+", "harness_selftest.py",
                "pass", timeout=90, check=False)
    assert r.returncode not in (0, 124, 137) and r.elapsed < PROMPT, r.output
    assert "=== harness_selftest.py pass" not in r.output, r.output
    out = run_mpi("checks.py", 2, "harness_selftest.py", "pass", "+",
                  "harness_selftest.py", "pass", timeout=90)
    assert out.count("harness_selftest: 10 checks, 0 failures on 2 ranks") == 2, out


@pytest.mark.mpi
def test_a_raising_script_ends_the_shared_job(tmp_path):
    """checks.py with plain scripts (the README blocks' path): one that raises on rank 1
    ends the job promptly with that rank's traceback, its output file keeps its partial
    name, and the next script never runs."""
    bad, after = tmp_path / "bad.py", tmp_path / "after.py"
    bad.write_text("from mpi4py import MPI\nprint('started', flush=True)\n"
                   "if MPI.COMM_WORLD.rank == 1:\n    raise ValueError('block broke')\n"
                   "MPI.COMM_WORLD.Barrier()\n")
    after.write_text("print('after ran')\n")
    r = run_mpi("checks.py", 2, "--out", str(tmp_path), str(bad), "+", str(after),
                timeout=90, check=False)
    assert r.returncode not in (0, 124, 137) and r.elapsed < PROMPT, r.output
    assert "[rank 1] ValueError: block broke" in r.output, r.output
    assert "after ran" not in r.output, r.output
    assert not (tmp_path / "0.1.out").exists() and (tmp_path / "0.1.out.part").exists()


def test_every_mpi_program_runs_through_the_harness():
    # faults.py is the exception: it tests the store's own abort-on-exception hook
    # (tests/test_faults.py), which the harness would otherwise stand in for
    programs = sorted(glob.glob(os.path.join(MPI_DIR, "*.py")))
    missing = []
    for path in programs:
        name = os.path.basename(path)
        if name.startswith("_") or name in ("faults.py", "graphs_common.py", "checks.py"):
            continue
        text = open(path).read()
        if "run_main(" not in text:
            missing.append(name)
    assert len(programs) > 10 and not missing, missing
