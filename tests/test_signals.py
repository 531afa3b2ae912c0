"""How a job ends (issue 43, items 9 and 10): the wait at exit for a peer is bounded by
default and says how to end or extend it; a job ended by a signal (SIGTERM from scancel
or a time limit, to mpiexec or to one rank, SIGHUP, SIGKILL, Ctrl-C) leaves nothing in
/dev/shm: checked in a private /dev/shm (``unshare -rm`` and a tmpfs), so that every
name there is this job's."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import MPI_DIR, mpiexec_path, require_mpi_marker, run_mpi

from ddstore import _lifecycle

PROMPT = 60  # seconds: generous for a loaded machine, far below the jobs' 120 s


# ------------------------------------------------------------------ item 9: the exit wait
def test_exit_wait_is_bounded_by_default(monkeypatch):
    monkeypatch.delenv("DDSTORE_EXIT_TIMEOUT", raising=False)
    monkeypatch.delenv("DDSTORE_EXIT_REPORT_SECONDS", raising=False)
    assert _lifecycle.exit_timeout() == 600.0
    assert _lifecycle.report_every() == 30.0
    monkeypatch.setenv("DDSTORE_EXIT_TIMEOUT", "7.5")
    assert _lifecycle.exit_timeout() == 7.5
    for text in ("none", "None", " inf ", "unlimited"):
        monkeypatch.setenv("DDSTORE_EXIT_TIMEOUT", text)
        assert _lifecycle.exit_timeout() is None, text


@pytest.mark.parametrize("text", ["-3", "0", "1_000", "\u0663", "1e3", "nan", "+5", "0x10",
                                  "5 s"])
def test_bad_exit_timeout_keeps_the_default_bound(monkeypatch, capfd, text):
    """Only plain decimal seconds are taken (float() alone would take 1_000, Arabic-Indic
    digits, exponents and nan): anything else keeps the default bound, said on stderr."""
    monkeypatch.setenv("DDSTORE_EXIT_TIMEOUT", text)
    assert _lifecycle.exit_timeout() == 600.0
    err = capfd.readouterr().err
    assert f"DDSTORE_EXIT_TIMEOUT={text!r} is not a positive number of seconds" in err, err
    assert "waiting at most 10 min (the default)" in err, err
    # a store's constructor refuses it at once (it was found only at the exit)
    from ddstore.errors import DDStoreValueError
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"DDSTORE_EXIT_TIMEOUT={text.strip()!r} must be a positive number of seconds in "
            f"plain digits (e.g. 1800), or none (no limit; also inf, infinity, "
            f"unlimited)")):
        _lifecycle.check_rank_settings()
    monkeypatch.setenv("DDSTORE_EXIT_TIMEOUT", "none")
    monkeypatch.setenv("DDSTORE_EXIT_REPORT_SECONDS", text)
    with pytest.raises(DDStoreValueError, match="DDSTORE_EXIT_REPORT_SECONDS="):
        _lifecycle.check_rank_settings()


@pytest.mark.parametrize("var", ["DDSTORE_ABORT_ON_EXCEPTION", "DDSTORE_SHM_WATCH"])
def test_on_off_switches_refuse_other_words(monkeypatch, var):
    """The on/off settings took any word but four for "on" (``=disabled`` left the abort
    on without a word): the constructor's check refuses it, naming both spellings."""
    from ddstore.errors import DDStoreValueError
    for text in ("0", "OFF", " no ", "false", "1", "on", "Yes", "true", ""):
        monkeypatch.setenv(var, text)
        _lifecycle.check_rank_settings()
    for text in ("disabled", "maybe", "2", "enable"):
        monkeypatch.setenv(var, text)
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"{var}={text!r} must be one of 0, false, no, off (off) or 1, true, yes, "
                f"on (on, the default)")):
            _lifecycle.check_rank_settings()


def test_abort_switch_is_where_the_docs_and_messages_say():
    """``ddstore.abort_on_exception`` (named by every abort line and the docs) exists and
    switches the abort; DDSTORE_PREFAULT takes the switches' words for on and off."""
    import ddstore
    from ddstore import settings
    assert ddstore.abort_on_exception is _lifecycle.abort_on_exception
    before = _lifecycle._ABORT["enabled"]
    try:
        ddstore.abort_on_exception(False)
        assert _lifecycle.aborts() is False
        assert ddstore.abort_on_exception(True) is False
        assert _lifecycle.aborts() is True
        # the environment's switch, read when it counts (set after the import, before
        # the store, as the constructor checked it: it was read at the import alone)
        _lifecycle._ABORT["enabled"] = None
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DDSTORE_ABORT_ON_EXCEPTION", "off")
            assert _lifecycle.aborts() is False
            mp.setenv("DDSTORE_ABORT_ON_EXCEPTION", "1")
            assert _lifecycle.aborts() is True
    finally:
        _lifecycle._ABORT["enabled"] = before
    for text, mode in (("true", "sync"), ("YES", "sync"), ("false", "off"), ("", "sync"),
                       ("background", "background")):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DDSTORE_PREFAULT", text)
            assert settings.prefault_mode() == mode


def test_exit_timeout_takes_plain_decimals(monkeypatch):
    for text, value in (("12", 12.0), ("0.5", 0.5), (".5", 0.5), ("3.", 3.0)):
        monkeypatch.setenv("DDSTORE_EXIT_TIMEOUT", text)
        assert _lifecycle.exit_timeout() == value, text


@pytest.mark.mpi
def test_exit_wait_for_a_rank_blocked_in_a_barrier_ends():
    """Rank 0 waits in a plain comm.Barrier() that rank 1 never enters (rank 1 ends its
    script): rank 1's free at exit sees rank 0 "computing", says every period whom it
    waits for and how to end or extend the wait, and ends the job at the bound (here 6 s
    through DDSTORE_EXIT_TIMEOUT; 10 minutes by default).  Before: it waited for ever."""
    env = {"DDSTORE_EXIT_TIMEOUT": "6", "DDSTORE_EXIT_REPORT_SECONDS": "2"}
    r = run_mpi("faults.py", 2, "end-during-barrier", 120, timeout=150, env=env,
                check=False)
    out = r.output
    assert r.returncode not in (0, 124, 137), f"exit code {r.returncode}:\n{out}"
    assert 6 <= r.elapsed < PROMPT, f"job took {r.elapsed:.1f}s to end:\n{out}"
    reports = re.findall(r"\[ddstore\] rank 1: exiting; waited (\d+) s so far for rank 0 "
                         r"to join the collective free at exit \(rank 0 is computing "
                         r"outside any ddstore call\); the job ends in (\d+) s "
                         r"\(DDSTORE_EXIT_TIMEOUT=6 s in all\); end it now with Ctrl-C "
                         r"or scancel, or set DDSTORE_EXIT_TIMEOUT \(seconds, or none\) "
                         r"to wait longer", out)
    assert len(reports) >= 2, out
    assert all(int(w) + int(left) in (5, 6, 7) for w, left in reports), reports
    assert "was not joined by all 2 ranks of its communicator within 6 s" in out, out
    assert "10 min by default; set it to more seconds, or none, to wait longer" in out
    assert "aborting the MPI job" in out, out


@pytest.mark.mpi
def test_ctrl_c_to_the_rank_waiting_at_exit_ends_the_job():
    """The exit wait's report says "end it now with Ctrl-C": a SIGINT to that rank ends
    the job at once, code 130, saying why (it was recorded and acted on only when the
    other rank came: an "Exception ignored in atexit" on both ranks and exit code 0)."""
    env = {"DDSTORE_EXIT_TIMEOUT": "60", "DDSTORE_EXIT_REPORT_SECONDS": "2"}
    r = run_mpi("faults.py", 2, "interrupt-exit-wait", 120, timeout=150, env=env,
                check=False)
    out = r.output
    assert r.returncode == 130, f"exit code {r.returncode}:\n{out}"
    assert r.elapsed < 30, f"job took {r.elapsed:.1f}s to end:\n{out}"
    assert "[ddstore] rank 1: interrupted (SIGINT, Ctrl-C) while exiting, waiting for the " \
           "other ranks to join the collective free at exit (rank 0 is computing" in out, out
    assert "Exception ignored" not in out, out


@pytest.mark.mpi
def test_an_uncaught_agreed_interrupt_ends_the_job_as_ctrl_c_does():
    """A Ctrl-C inside a collective call, uncaught (agreed: a DDStoreInterrupt on every
    rank): one line, code 130, as an interrupt outside a call (it was told with a
    traceback, code 1, and "the call it left halfway ... put the ranks out of step",
    though every rank was in the call)."""
    r = run_mpi("faults.py", 2, "interrupt-in-call", 120, timeout=150, check=False)
    out = r.output
    assert r.returncode == 130, f"exit code {r.returncode}:\n{out}"
    assert "[ddstore] error on every rank: interrupted (KeyboardInterrupt: SIGINT, " \
           "Ctrl-C) on rank 1 (rank 1 called test.interrupted())" in out, out
    assert "out of step" not in out and "Traceback" not in out, out


# ------------------------------------------------------------------ item 10: signals
def _private_shm():
    """Why a private /dev/shm cannot be made here, or None when it can."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    p = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return f"unshare -rm + mount of a tmpfs on /dev/shm refused: {p.stderr.strip()}"
    return None


NO_PRIVATE_SHM = _private_shm()


def signal_job(target, signame, mode="hold", env=None):
    """tests/mpi/signals_check.py's driver in a private /dev/shm: its result dict."""
    require_mpi_marker()
    if NO_PRIVATE_SHM:
        pytest.skip(NO_PRIVATE_SHM)
    cmd = ["timeout", "--kill-after=10", "150", "unshare", "-rm", "sh", "-c",
           'mount -t tmpfs tmpfs /dev/shm && exec "$@"', "sh", sys.executable,
           os.path.join(MPI_DIR, "signals_check.py"), "drive", mpiexec_path(), target,
           signame, mode]
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"driver failed ({p.returncode}):\n{p.stdout}\n" \
                                        f"{p.stderr}"
    result = json.loads(lines[-1][len("RESULT "):])
    assert "error" not in result, result
    # the job had MPICH's node segment: what the test looks for was there to leave
    assert any(n.startswith("mpich_shm_") for n in result["before"]), result
    return result


def check_clean_end(r):
    out = r["output"]
    assert r["rc"] != 0, out
    assert r["seconds"] < PROMPT, f"{r['seconds']:.1f} s:\n{out}"
    assert "the signal did not end the job" not in out, out
    assert r["after"] == [], f"left in /dev/shm: {r['after']}\n{out}"
    assert r["watchers"] == [], f"watchers left: {r['watchers']}\n{out}"


@pytest.mark.mpi
@pytest.mark.parametrize("target,signame,mode", [
    ("mpiexec", "TERM", "hold"),     # scancel, timeout, a batch system's time limit
    ("rank", "TERM", "hold"),        # one rank
    ("mpiexec", "TERM", "barrier"),  # a rank blocked inside MPI
    ("rank", "KILL", "hold"),        # the OOM killer; no handler could run
    ("mpiexec", "HUP", "hold"),      # mpiexec dies; its proxy SIGKILLs the ranks
    ("mpiexec", "INT", "hold"),      # Ctrl-C: KeyboardInterrupt, the abort hook
])
def test_signal_leaves_nothing_in_dev_shm(target, signame, mode):
    r = signal_job(target, signame, mode)
    check_clean_end(r)
    if signame == "INT":  # SIGINT is still a KeyboardInterrupt in the ranks
        assert "KeyboardInterrupt" in r["output"], r["output"]


@pytest.mark.mpi
def test_without_the_watcher_sigterm_leaves_the_segment():
    """The control: with the watcher switched off (DDSTORE_SHM_WATCH=0) the same SIGTERM
    leaves MPICH's node segment (what the cases above would see if it came back)."""
    r = signal_job("mpiexec", "TERM", env={"DDSTORE_SHM_WATCH": "0"})
    assert r["rc"] != 0, r["output"]
    assert any(n.startswith("mpich_shm_") for n in r["after"]), r


# ------------------------------------------------------------------ item 11: interrupt
@pytest.mark.mpi
def test_interrupted_cleanup_ends_promptly_naming_the_interrupt():
    """What an interrupted DDStore.restore did: a KeyboardInterrupt on rank 1 alone, whose
    clean-up frees the store while rank 0 is in the operation's next call; both get the
    agreed "out of step" error, rank 0 catches it and frees too (waiting for rank 1 for
    ever).  Rank 1 sees rank 0 in free() on the status board and ends the job at once
    (before: after AGREED_WAIT = 10 s), and the report says the interrupt came first
    (before: only the out-of-step message)."""
    r = run_mpi("signals_check.py", 2, "rank", "interrupted-cleanup", timeout=120,
                check=False)
    out = r.output
    assert r.returncode not in (0, 124, 137), f"exit code {r.returncode}:\n{out}"
    assert "(rank 0 called add('y'); rank 1 called free()) (raised while this rank " \
           "handled a KeyboardInterrupt: the interrupt came first" in out, out
    assert "[ddstore] rank 1: uncaught DDStoreValueError, raised on every rank (rank 0 " \
           "of its communicator went on past it, through a `with` block's exit or a " \
           "handler, and is in free(), which cannot end without this rank: it cannot " \
           "end the job)" in out, out
    assert "did not end the job within" not in out, out
    assert r.elapsed < PROMPT, f"{r.elapsed:.1f} s:\n{out}"
