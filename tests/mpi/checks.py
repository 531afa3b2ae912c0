"""Run several harness programs (``tests/mpi/*.py``), or any scripts (README blocks), or
modules (``-m ddstore.bench.pyg ...``: the benchmarks' smoke runs), one after another in
one MPI job.

    timeout 600 mpiexec -n 4 python tests/mpi/checks.py core_roundtrip.py auto + graphs_roundtrip.py

Each program runs as if launched alone (``sys.argv`` = its path and arguments, module
run as ``__main__``); its ``run_main`` prints its summary line and returns (see
``_harness.run_main``).  Rank 0 prints ``=== <program> <args>`` before each, so the
output splits into one section per program (``conftest.shared_launch`` does); it prints
``--- returned`` once the program returned.  An exception in any program aborts the
whole job, as it does alone; the job exits 1 if any program failed a check.  What a program leaves alive (stores it keeps to the end on
purpose) stays alive until the job ends, as it would alone.

``--exit N PROGRAM [ARG ...]``: a script whose test expects it to end with ``sys.exit(N)``
on every rank (an example refusing its input, as every rank agreed): the job goes on,
and the script's output ends with ``--- exit code N`` (``--- exit code 0`` when it ended
successfully instead: its test fails on that line); any other exit code ends the job,
as alone.
"""
import os
import runpy
import sys
import time

import _harness

HERE = os.path.dirname(os.path.abspath(__file__))
SEPARATOR = "+"


def programs(argv):
    """``[[program, arg, ...], ...]`` from the command line, split at ``+``."""
    out, cur = [], []
    for a in argv:
        if a == SEPARATOR:
            out.append(cur)
            cur = []
        else:
            cur.append(a)
    out.append(cur)
    return [p for p in out if p]


class _Tee:
    """This rank's stdout or stderr, also written to a file (``--out``; stdout and stderr
    into the same one).  What writes to it after the program ended (a logging handler the
    program made) goes to the stream alone."""

    def __init__(self, stream, file):
        self.stream, self.file = stream, file

    def write(self, text):
        if not self.file.closed:
            self.file.write(text)
        return self.stream.write(text)

    def flush(self):
        if not self.file.closed:
            self.file.flush()
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def run_one(path, args, expect=None):
    """Run one program as ``__main__``; a program that is not a harness program (a
    README block, an example) and raises gets the harness's treatment: traceback, job
    aborted.  ``sys.exit()`` / ``sys.exit(0)`` ends the program as it would end it alone,
    successfully: the next program runs.  As alone, the program's folder is first on
    ``sys.path`` while it runs (an example imports its sibling).  ``expect``: the
    non-zero exit code the script is expected to end with (``--exit``)."""
    sys.argv = [path] + args
    first = sys.path[0]
    sys.path[0] = os.path.dirname(os.path.abspath(path))
    code = 0
    try:
        kept = runpy.run_path(path, run_name="__main__")
    except SystemExit as done:
        code, kept = (0 if done.code is None else done.code), {}
        if code != 0 and code != expect:
            _harness.abort_job(os.path.basename(path))
    except BaseException:  # noqa: BLE001 -- the job ends here, as run_main would end it
        _harness.abort_job(os.path.basename(path))
    finally:
        sys.path[0] = first
    if expect is not None:
        sys.stdout.write(f"\n--- exit code {code}\n")
        if code:  # what the process's end would have ended: its torch.distributed group
            dist = sys.modules.get("torch.distributed")
            if dist is not None and dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
    return kept


def run_module(module, args):
    """``python -m module args`` in this process (a benchmark's smoke run): as
    :func:`run_one`, the module run as ``__main__``."""
    sys.argv = [module] + args
    try:
        return runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        if done.code in (None, 0):
            return {}
        _harness.abort_job(module)
    except BaseException:  # noqa: BLE001 -- the job ends here, as alone
        _harness.abort_job(module)


def main(argv):
    """``[--out DIR] PROGRAM [ARG ...] [+ PROGRAM [ARG ...]] ...``; with ``--out``, each
    rank's stdout and stderr during program ``i`` are also written to
    ``DIR/<i>.<rank>.out`` (what every rank printed, in order, for tests that look at
    more than rank 0's lines); the file gets that name only when the program has
    returned on that rank."""
    out_dir = None
    if argv[:1] == ["--out"]:
        out_dir, argv = argv[1], argv[2:]
    _harness.combined["active"] = True
    kept = []  # each program's globals, alive to the end as in a job of its own
    real, real_err = sys.stdout, sys.stderr
    for i, (prog, *args) in enumerate(programs(argv)):
        if _harness.rank == 0:
            # on a line of its own, whatever another rank left unfinished
            sys.stdout.write(f"\n=== {' '.join([prog] + args)}\n")
            sys.stdout.flush()
        if out_dir is not None:
            done = os.path.join(out_dir, f"{i}.{_harness.rank}.out")
            part = open(done + ".part", "w")
            sys.stdout, sys.stderr = _Tee(real, part), _Tee(real_err, part)
        t0 = time.perf_counter()
        expect = None
        if prog == "--exit":  # ``--exit N PROGRAM ...``: expected to exit with N
            expect, (prog, *args) = int(args[0]), args[1:]
        if prog == "-m":  # a module (``-m ddstore.bench.pyg --scale ...``)
            kept.append(run_module(args[0], args[1:]))
        else:
            kept.append(run_one(os.path.join(HERE, prog), args, expect))
        if out_dir is not None:  # the file gets its name once the program has returned
            sys.stdout.flush()
            sys.stderr.flush()
            part.close()
            sys.stdout, sys.stderr = real, real_err
            os.replace(done + ".part", done)
        if _harness.rank == 0:  # (conftest.shared_launch: a plain script ran to its end)
            sys.stdout.write("\n--- returned\n")
            if os.environ.get("DDSTORE_TEST_TIMES"):  # slow programs
                sys.stdout.write(f"program {prog} took {time.perf_counter() - t0:.2f} s on "
                                 f"rank 0\n")
    sys.stdout.flush()
    sys.exit(1 if _harness.combined["failed"] else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
