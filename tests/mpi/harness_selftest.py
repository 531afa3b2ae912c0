"""The harness itself (tests/mpi/_harness.py), no store involved.

Usage: timeout 60 mpiexec -n N python harness_selftest.py MODE   (N >= 2)

MODE:
  raise   rank 1 raises while every other rank waits in a Barrier: the job must end at
          once (non-zero, rank 1's traceback shown), not when ``timeout`` kills it
  fail    rank 1 fails a check, the others pass theirs: every rank exits non-zero
  error   expect_error on a call that raises nothing (rank 1) or the wrong type
          (the others): every rank exits non-zero
  pass    every check passes: exit 0
  none    no check at all (the program only asserts): refused, every rank exits non-zero
  mixed   like pass, but rank 1 leaves an unfinished line (no newline) on its output
          just before the summary: the summary must still be a line of its own
  cases   named cases (_harness.Cases): 'first' passes, 'second' fails a check on rank
          1, 'too big' needs more ranks than the job has (skipped), 'too small' is
          for fewer ranks than the job has (skipped), 'last' passes:
          every rank exits non-zero and the failure names 'second' alone
"""
import sys
import time

from _harness import Cases, check, comm, expect_error, rank, run_main, size

MODE = sys.argv[1]


def main():
    if MODE == "raise":
        if rank == 1:
            raise RuntimeError("injected failure on rank 1")
        comm.Barrier()  # rank 1 never comes
        raise AssertionError("the Barrier returned without rank 1")
    if MODE == "fail":
        check(rank != 1, "injected failed check on rank 1")
    elif MODE == "error":
        def bad():
            if rank != 1:
                raise KeyError("not a ValueError")
        expect_error(ValueError, "bad", bad, what="injected", agree=True)
    elif MODE == "none":
        assert comm.allreduce(1) == size  # an assert is not a counted check
    elif MODE == "mixed":
        check(comm.allreduce(1) == size, "allreduce counts every rank")
        if rank == 1:
            sys.stdout.write("rank 1 output without a newline")
            sys.stdout.flush()
            time.sleep(0.5)  # the launcher has forwarded it before rank 0's summary
    elif MODE == "pass":
        check(comm.allreduce(1) == size, "allreduce counts every rank")
        msg = expect_error(ValueError, ("bad", 3), int, "bad 3", what="int('bad 3')",
                           agree=True)
        check(msg is not None and "invalid literal" in msg, f"message returned: {msg!r}")
    elif MODE == "cases":
        cases = Cases()

        @cases("first")
        def _first(t):
            t.total = comm.allreduce(1)
            check(t.total == size, "allreduce counts every rank")

        @cases("second")
        def _second(t):
            check(rank != 1, "injected failed check on rank 1")

        @cases("too big", min_ranks=size + 1)
        def _too_big(t):
            check(False, "a case for more ranks than the job has ran")

        @cases("too small", max_ranks=size - 1)
        def _too_small(t):
            check(False, "a case for fewer ranks than the job has ran")

        @cases("last")
        def _last(t):
            check(t.total == size, "what an earlier case left is there")

        cases.run()
    else:
        raise SystemExit(f"unknown mode {MODE!r}")
    comm.Barrier()


run_main(main)
