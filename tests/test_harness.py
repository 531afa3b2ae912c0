"""The MPI test programs' harness (tests/mpi/_harness.py): a failure on any rank ends
the whole job promptly and non-zero, and every rank agrees on the result."""
import glob
import os

import pytest

from conftest import MPI_DIR, failed_cases, run_mpi, summary_of, summary_problem

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


@pytest.mark.mpi
def test_shared_scripts_run_as_alone(tmp_path):
    """checks.py runs each plain script as if alone (what the examples' shared job needs):
    its folder first on sys.path while it runs (a sibling module imports), sys.exit() and
    sys.exit(0) end it successfully and the next one runs, stdout and stderr both reach
    its output file; sys.exit(3) ends the job with a non-zero code, the next script not
    run."""
    sub = tmp_path / "ex"
    sub.mkdir()
    (sub / "sibling.py").write_text("VALUE = 41\n")
    (sub / "uses_sibling.py").write_text(
        "import sys\nimport sibling\nprint('sibling', sibling.VALUE + 1)\n"
        "print('to stderr', file=sys.stderr)\nsys.exit()\n")
    (sub / "exit0.py").write_text("import sys\nprint('exit0 ran')\nsys.exit(0)\n")
    (sub / "exit3.py").write_text("import sys\nsys.exit(3)\n")
    (sub / "after.py").write_text("print('after ran')\n")
    out = tmp_path / "out"
    out.mkdir()
    r = run_mpi("checks.py", 2, "--out", str(out), str(sub / "uses_sibling.py"), "+",
                str(sub / "exit0.py"), "+", str(sub / "exit3.py"), "+",
                str(sub / "after.py"), timeout=90, check=False)
    for rank in (0, 1):
        first = (out / f"0.{rank}.out").read_text()
        assert "sibling 42" in first and "to stderr" in first, (first, r.output)
        assert "exit0 ran" in (out / f"1.{rank}.out").read_text(), r.output
    assert r.returncode not in (0, 124, 137) and r.elapsed < PROMPT, r.output
    assert "after ran" not in r.output and not (out / "3.0.out").exists(), r.output


@pytest.mark.mpi
def test_program_that_checks_nothing_fails():
    """A program whose conditions are all asserts (or counted by itself) ran 0 checks:
    it proves nothing, so the job fails (before: it exited 0 and its test passed)."""
    r = run_mpi("harness_selftest.py", 2, "none", timeout=90, check=False)
    assert r.returncode not in (0, 124, 137), f"exit {r.returncode}:\n{r.output}"
    assert "FAIL: harness_selftest ran 0 checks" in r.output, r.output
    assert summary_problem(summary_of(r.output, "harness_selftest"), "harness_selftest",
                           2) == "it ran 0 checks", r.output
    # in a shared job too: the job fails, and the program's own verdict is "0 checks"
    r = run_mpi("checks.py", 2, "harness_selftest.py", "none", "+", "harness_selftest.py",
                "pass", timeout=90, check=False)
    assert r.returncode not in (0, 124, 137), f"exit {r.returncode}:\n{r.output}"
    assert summary_of(r.output.split("=== harness_selftest.py pass")[0],
                      "harness_selftest") == (0, 1, 2), r.output


@pytest.mark.mpi
def test_summary_is_a_line_of_its_own():
    """Rank 1 leaves an unfinished line just before rank 0's summary (as a rank's block
    buffer flushed mid-line once did: '...as expectedcore_errors: 458 checks, ...'): the
    summary still starts a line of its own, after every rank's output."""
    r = run_mpi("harness_selftest.py", 2, "mixed", timeout=90, check=False)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.output}"
    assert "harness_selftest: 2 checks, 0 failures on 2 ranks" in r.output.splitlines(), \
        r.output
    assert "rank 1 output without a newline" in r.output, r.output


@pytest.mark.mpi
def test_a_failed_case_is_named_in_the_test_failure():
    """Named cases (_harness.Cases): one line per case with its checks and failures, a
    failed check printed with its case, a case for more ranks or for fewer skipped, and
    the pytest failure of the job names the failed case (and no other) on its first
    line."""
    with pytest.raises(pytest.fail.Exception) as failed:
        run_mpi("harness_selftest.py", 2, "cases", timeout=90)
    text = str(failed.value)
    first, out = text.split("\n", 1)
    assert first.startswith("exit code 1, failed case(s) 'second': "), first
    lines = out.splitlines()
    assert "case 'first': 2 checks, 0 failures" in lines, out
    assert "case 'second': 2 checks, 1 failures FAILED" in lines, out
    assert "case 'too big': skipped (needs 3 ranks)" in lines, out
    assert "case 'too small': skipped (run on up to 1 ranks)" in lines, out
    assert "case 'last': 2 checks, 0 failures" in lines, out
    assert "[rank 1] FAIL (case 'second'): injected failed check on rank 1" in lines, out
    assert failed_cases(out, "harness_selftest") == ["second"], out
    assert summary_of(out, "harness_selftest") == (6, 1, 2), out


def test_summary_matcher_finds_mixed_lines_and_refuses_what_proves_nothing():
    """conftest.summary_of finds a summary anywhere in a line (another rank's output
    before it on the line); summary_problem passes only checks > 0, 0 failures, the
    right rank count, and says why anything else fails."""
    mixed = ("[rank 1] error raised as expectedcore_errors: 458 checks, 0 failures on 2 "
             "ranks\nmore output\n")
    assert summary_of(mixed, "core_errors") == (458, 0, 2)
    assert summary_problem(summary_of(mixed, "core_errors"), "core_errors", 2) is None
    assert summary_of(mixed, "core_roundtrip") is None
    assert "no summary line" in summary_problem(None, "core_errors", 2)
    one = "x: 3 checks, 0 failures on 1 rank (all)\n"
    assert summary_of(one, "x") == (3, 0, 1)
    assert summary_problem((0, 0, 2), "x", 2) == "it ran 0 checks"
    assert summary_problem((5, 1, 2), "x", 2) == "1 failed checks"
    assert summary_problem((5, 0, 3), "x", 2) == "the summary is for 3 ranks"
    # the last summary counts (a program's section holds one; never an earlier one)
    two = "x: 5 checks, 0 failures on 2 ranks\nx: 5 checks, 2 failures on 2 ranks\n"
    assert summary_problem(summary_of(two, "x"), "x", 2) == "2 failed checks"


def test_max_ranks_skips_larger_launches(monkeypatch):
    """DDSTORE_TEST_MAX_RANKS caps the ranks a test may start (scripts/test.sh header):
    larger ones are skipped with the reason, never run or passed."""
    import conftest
    monkeypatch.setenv("DDSTORE_TEST_MAX_RANKS", "2")
    assert conftest._over_max_ranks(2) is None
    assert conftest._over_max_ranks(3) == "needs 3 ranks, more than DDSTORE_TEST_MAX_RANKS=2"
    monkeypatch.delenv("DDSTORE_TEST_MAX_RANKS")
    assert conftest._over_max_ranks(64) is None
    monkeypatch.setenv("DDSTORE_TEST_MAX_RANKS", "two")
    with pytest.raises(pytest.UsageError, match="DDSTORE_TEST_MAX_RANKS"):
        conftest.max_ranks()


def test_every_mpi_program_runs_through_the_harness():
    # faults.py and signals_check.py are the exceptions: they test how the job ends (the
    # store's own abort-on-exception hook, tests/test_faults.py; a signal and what it
    # leaves in /dev/shm, tests/test_signals.py), which the harness would stand in for
    programs = sorted(glob.glob(os.path.join(MPI_DIR, "*.py")))
    missing = []
    for path in programs:
        name = os.path.basename(path)
        if name.startswith("_") or name in ("faults.py", "signals_check.py",
                                            "graphs_common.py", "checks.py"):
            continue
        text = open(path).read()
        if "run_main(" not in text:
            missing.append(name)
    assert len(programs) > 10 and not missing, missing
