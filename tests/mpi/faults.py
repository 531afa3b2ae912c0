"""Fault injection: one rank fails while the others keep reading from the store.

Usage: timeout 120 mpiexec -n N python faults.py MODE [READ_SECONDS]

MODE is what the last rank does after 0.5 s of reading:
  clean   nothing: every rank reads for 1 s and exits normally (exit code 0)
  raise   an uncaught exception
  exit    sys.exit(3)
  osexit  os._exit(3) (no clean-up at all)
  kill    SIGKILL to itself
  raise-in-collective   an uncaught exception while the others wait in a collective
                        call (store.add) instead of reading
  raise-in-with         an uncaught exception inside `with DDStore(...)` while the others
                        go on to a collective call (remove) in the same block
  kill-in-commit, raise-in-commit   SIGKILL / an uncaught exception while the others
                        run NodeMemory.commit() after commit (the faulty rank commits
                        with them for 0.5 s first)
  end-during-commit, exit0-during-commit, exit3-during-commit, osexit0-during-commit
                        the faulty rank commits with the others for 0.5 s, then ends its
                        script (end of file, sys.exit(0), sys.exit(3), os._exit(0))
                        while they go on committing; they catch the "out of step" error
                        and end their script too (the exit-time free must not wait for
                        the rank that has gone, and the job must fail, with a message)
  end-during-barrier    the faulty rank ends its script while the others wait in a plain
                        MPI Barrier (not a ddstore call): its exit-time free must give up
                        after DDSTORE_EXIT_TIMEOUT seconds and end the job
  interrupt-in-call     a KeyboardInterrupt in a step's local part on the faulty rank,
                        uncaught: one line on every rank, code 130
  interrupt-exit-wait   the same as end-during-barrier, and the faulty rank gets a SIGINT 4 s later (Ctrl-C to
                        the rank that waits, as its report says): the job ends at once,
                        code 130
  sleep-after-exit, busy-after-exit   rank 0 computes for READ_SECONDS (time.sleep, or a
                        busy loop) after the other ranks have ended their script, then
                        checks the store and ends its own: the others wait (exit code 0)
  add-after-exit, store-after-exit   rank 0 computes 2 s while the others end their
                        script, prints "rank 0: entering <call> at <time.time()>", then
                        enters a collective call they are not in: store.add('late')
                        (its round meets their exit-time free: the agreed error), or
                        DDStore() over a duplicate of the communicator (whose round
                        cannot meet their free's: their status
                        boards tell them); the job must end within seconds, non-zero
  hold                  every rank prints "rank R: pid P holding a store" and sleeps
                        READ_SECONDS (the test sends SIGINT to mpiexec)
  agreed                every rank raises the same agreed error, uncaught (a bad width
                        given to DDStore on every rank)
The other ranks read (and check) rows for READ_SECONDS (default 60) unless the job is
ended first; the test asserts that a fault ends the whole job within seconds, with a
non-zero exit code, and that a clean run exits 0.

The one MPI test program that does not run through tests/mpi/_harness.py: what it tests is
that the store's own exception hook ends the job, which the harness would stand in for.
"""
import faulthandler
import os
import signal
import sys
import time

import numpy as np
from mpi4py import MPI

import ddstore

mode = sys.argv[1]
read_seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
if mode == "agreed-first":  # refused alike on every rank, before any store exists
    ddstore.DDStore(comm, width=size + 1)
    raise AssertionError("DDStore accepted a width larger than the communicator")
store = ddstore.DDStore(comm)
n = 1000 * size
data = np.arange(n * 8, dtype=np.int64).reshape(n, 8)
lo, hi = ddstore.partition(n, store.group_size, store.group_rank)
store.add("x", data[lo:hi])
print(f"rank {rank}: store ready", flush=True)
if mode == "raise-after-torch":  # torch's excepthook wraps ddstore's, capturing its
    from ddstore.distributed import init_torch_distributed  # output in a StringIO
    # a MASTER_ADDR that differs between ranks (one left in a job script): refused alike
    # before torch's rendezvous, which waited for the ranks that went elsewhere
    os.environ["MASTER_ADDR"] = f"127.0.0.{rank + 1}"
    try:
        init_torch_distributed(comm, backend="gloo")
    except ddstore.DDStoreValueError as exc:
        assert "MASTER_ADDR differs between ranks (rank 0: 127.0.0.1; rank 1: " \
            "127.0.0.2" in str(exc), exc
    else:
        raise AssertionError("a MASTER_ADDR differing between ranks was taken")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    init_torch_distributed(comm, backend="gloo")
if mode == "raise-after-raw-torch":  # the same through torch's own call: not re-wrapped
    import socket
    import torch.distributed as dist
    if rank == 0:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    port = comm.bcast(port if rank == 0 else None, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
faulty = rank == size - 1 and mode != "clean"
limit = 0.5 if faulty else (1.0 if mode == "clean" else read_seconds)
if mode == "raise-in-collective":
    if faulty:
        raise RuntimeError("injected failure before a collective call")
    store.add("y", data[lo:hi])  # waits for the failed rank
    raise AssertionError("store.add returned without the failed rank")
if mode == "interrupt-in-call":  # Ctrl-C in a call's local part on the faulty rank
    with store.collective("test.interrupted"):
        if faulty:
            raise KeyboardInterrupt  # agreed: a DDStoreInterrupt on every rank, uncaught
    raise AssertionError("the interrupted call returned")
if mode == "raise-in-with":
    with ddstore.DDStore(comm) as inner:
        inner.add("z", data[lo:hi])
        if faulty:  # leaving the block must not start a collective free
            raise RuntimeError("injected failure inside with DDStore")
        inner.remove("z")  # waits for the failed rank
    raise AssertionError("store.remove returned without the failed rank")
if mode in ("kill-in-commit", "raise-in-commit"):
    from ddstore.temporal import NodeMemory
    mem = NodeMemory(store, "mem", n, 4, 2)
    rng = np.random.default_rng(rank)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        nodes = rng.integers(0, n, 32)
        mem.write(nodes, rng.standard_normal((32, 4)).astype(np.float32), time.time())
        mem.post(nodes, np.ones((32, 2), np.float32), time.time())
        mem.commit()  # the others wait here for the failed rank
        assert len(mem.read(nodes)) == 32
    if not faulty:
        raise AssertionError("NodeMemory.commit kept running without the failed rank")
    print(f"rank {rank}: failing with {mode}", flush=True)
    if mode == "kill-in-commit":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("injected failure")
if mode.endswith("-during-commit"):
    from ddstore.temporal import NodeMemory
    mem = NodeMemory(store, "mem", n, 4, 2)
    rng = np.random.default_rng(rank)
    t0 = time.perf_counter()
    try:
        while time.perf_counter() - t0 < limit:
            nodes = rng.integers(0, n, 32)
            mem.write(nodes, rng.standard_normal((32, 4)).astype(np.float32), time.time())
            mem.commit()  # the others are here when the faulty rank leaves
    except ddstore.DDStoreError as exc:  # caught: this rank goes on to its own exit
        print(f"rank {rank}: commit raised {exc}", flush=True)
    if faulty:
        print(f"rank {rank}: leaving with {mode}", flush=True)
        if mode.startswith("exit0"):
            sys.exit(0)
        if mode.startswith("exit3"):
            sys.exit(3)
        if mode.startswith("osexit0"):
            os._exit(0)
    sys.exit(0)  # end of script
if mode in ("sleep-after-exit", "busy-after-exit"):
    if rank == 0:
        print(f"rank 0: computing {read_seconds:g} s", flush=True)
        t0 = time.perf_counter()
        if mode == "sleep-after-exit":
            time.sleep(read_seconds)
        while time.perf_counter() - t0 < read_seconds:
            pass
        idx = np.random.default_rng(0).integers(0, n, 64)
        assert store.get_batch("x", idx).tobytes() == data[idx].tobytes()
        print("rank 0: done computing", flush=True)
    sys.exit(0)  # end of script: the others wait at their exit-time free
if mode in ("add-after-exit", "store-after-exit"):
    other = comm.Dup()  # collective: made while every rank is here
    if rank == 0:
        time.sleep(2.0)
        call = "add('late')" if mode == "add-after-exit" else "DDStore()"
        print(f"rank 0: entering {call} at {time.time():.3f}", flush=True)
        if mode == "add-after-exit":
            store.add("late", data[lo:hi])
        else:
            ddstore.DDStore(other)
        raise AssertionError(f"{call} returned without the ranks that have exited")
    sys.exit(0)
if mode == "hold":
    print(f"rank {rank}: pid {os.getpid()} holding a store", flush=True)
    time.sleep(read_seconds)
    sys.exit(0)
if mode == "agreed":
    ddstore.DDStore(comm, width=size + 1)  # refused alike on every rank
    raise AssertionError("DDStore accepted a width larger than the communicator")
if mode in ("end-during-barrier", "interrupt-exit-wait"):
    if faulty and mode == "interrupt-exit-wait":  # Ctrl-C to this rank while it waits
        import threading
        threading.Thread(target=lambda: (time.sleep(4), os.kill(os.getpid(),
                                                              signal.SIGINT)),
                         daemon=True).start()
    if faulty:
        sys.exit(0)
    comm.Barrier()  # the faulty rank never comes: it waits at exit in the store's free
    raise AssertionError("the Barrier returned without the faulty rank")
rng = np.random.default_rng(rank)
if faulty:
    # a loop of 0.5 s that has not ended after 20 s prints every thread's stack (one
    # suite run saw this rank never leave it: where it stood is then in the output)
    faulthandler.dump_traceback_later(20)
t0 = time.perf_counter()
while time.perf_counter() - t0 < limit:
    idx = rng.integers(0, n, 64)
    assert store.get_batch("x", idx).tobytes() == data[idx].tobytes()
if faulty:
    faulthandler.cancel_dump_traceback_later()
    print(f"rank {rank}: failing with {mode}", flush=True)
    if mode in ("raise", "raise-after-torch", "raise-after-raw-torch"):
        raise RuntimeError("injected failure")
    if mode == "raise-user-stringio":  # the user's own capture: not the job's output
        import io
        sys.stderr = io.StringIO()
        sys.stderr.write("USER-PRIVATE capture\n")
        raise RuntimeError("injected failure")
    if mode == "exit":
        sys.exit(3)
    if mode == "osexit":
        os._exit(3)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit(f"unknown mode {mode!r}")
print(f"rank {rank}: done reading", flush=True)
