"""Signals and /dev/shm: a job ended by a signal leaves nothing of MPICH's or ours there.

Usage (the driver, run in a private /dev/shm by tests/test_signals.py)::

    unshare -rm sh -c 'mount -t tmpfs tmpfs /dev/shm && exec "$@"' sh \\
        python tests/mpi/signals_check.py drive MPIEXEC TARGET SIGNAL MODE

TARGET is ``mpiexec`` or ``rank`` (the signal goes to the last rank), SIGNAL a name
(``TERM``, ``HUP``, ``KILL``, ``INT``), MODE what the ranks do when it arrives:

  hold      every rank holds a store (with a variable) and sleeps
  barrier   the same, but rank 0 then waits in a plain ``comm.Barrier()`` that the others
            never enter (blocked inside MPI: no Python signal handler can run there)

``python signals_check.py rank interrupted-cleanup`` (2 ranks, no driver, no signal): a
KeyboardInterrupt on rank 1 alone whose clean-up calls ``store.free()`` while rank 0 is in
another call (``add``); rank 0 catches the agreed "out of step" error and frees too; the
job must end promptly (not after AGREED_WAIT), the report naming the interrupt.

The driver starts ``mpiexec -n 2 python signals_check.py rank MODE`` (each rank prints
``rank R: pid P holding a store`` once its store exists), sends the signal once both
ranks hold one, waits for the job to end (60 s at most), then for up to 5 s for
``/dev/shm`` to empty and the ranks' watchers to go, and prints one line ``RESULT
<json>``: ``rc``, ``seconds`` (signal to end of job), ``before`` (the names in
/dev/shm just before the signal), ``after`` (what is left), ``watchers`` (ddstore's
watcher processes left) and ``output`` (the job's).

Like tests/mpi/faults.py this program does not run through tests/mpi/_harness.py: what
it tests is how the job ends, which the harness would stand in for.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time


def rank_main(mode):
    import numpy as np
    from mpi4py import MPI

    import ddstore
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    store = ddstore.DDStore(comm)
    store.add("x", np.full((64, 8), rank, dtype=np.float64))
    if mode == "interrupted-cleanup":
        # what an interrupted DDStore.restore did (issue 43 item 11): a KeyboardInterrupt
        # on rank 1 alone between two collective calls of one operation; its clean-up
        # frees the store (collective) while rank 0 is in the operation's next call: the
        # agreed "out of step" error; rank 0 catches it and frees too (its clean-up),
        # rank 1's is uncaught
        if rank == 1:
            try:
                raise KeyboardInterrupt
            except BaseException:
                store.free()  # the agreed "out of step" error, uncaught here
                raise
        try:
            store.add("y", np.zeros((4, 2)))
        except ddstore.DDStoreValueError:
            print(f"rank {rank}: out of step, freeing", flush=True)
            store.free()  # waits for rank 1 for ever: rank 1 must end the job
            raise
        raise AssertionError("no error")
    print(f"rank {rank}: pid {os.getpid()} holding a store", flush=True)
    if mode == "barrier" and rank == 0:
        comm.Barrier()  # the others never come: blocked inside MPI
    time.sleep(120)
    print(f"rank {rank}: the signal did not end the job", flush=True)


def watchers(names):
    """Processes of ddstore's /dev/shm watcher still running for one of the files
    ``names`` (their pids; other jobs on the machine have theirs)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"ddstore-shm-watch" in cmd and any(n.encode() in cmd for n in names):
            found.append(int(pid))
    return found


def drive(mpiexec, target, signame, mode):
    signum = getattr(signal, "SIG" + signame)
    cmd = [mpiexec, "-n", "2", sys.executable, os.path.abspath(__file__), "rank", mode]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    lines, pids = [], {}
    deadline = time.monotonic() + 90
    while len(pids) < 2:
        line = proc.stdout.readline()
        if not line or time.monotonic() > deadline:
            proc.kill()
            print("RESULT " + json.dumps({"error": "no store held", "output":
                                          "".join(lines) + proc.stdout.read()}))
            return
        lines.append(line)
        # the ranks' lines may run into each other: read them from the text so far
        for r, pid in re.findall(r"rank (\d+): pid (\d+) holding a store",
                                 "".join(lines)):
            pids[int(r)] = int(pid)
    time.sleep(0.5)  # the last rank may still be on its way to sleep/Barrier
    before = sorted(os.listdir("/dev/shm"))
    t0 = time.monotonic()
    os.kill(proc.pid if target == "mpiexec" else pids[1], signum)
    try:
        out = proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0] + "\n[driver] the job did not end within 60 s\n"
    seconds = time.monotonic() - t0
    end = time.monotonic() + 5
    while (os.listdir("/dev/shm") or watchers(before)) and time.monotonic() < end:
        time.sleep(0.05)
    print("RESULT " + json.dumps({
        "rc": proc.returncode, "seconds": seconds, "before": before,
        "after": sorted(os.listdir("/dev/shm")), "watchers": watchers(before),
        "output": "".join(lines) + out}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "drive":
        drive(*sys.argv[2:6])
    else:
        rank_main(sys.argv[2])
