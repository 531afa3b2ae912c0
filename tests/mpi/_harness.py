"""The one harness of the MPI test programs (``tests/mpi/*.py``).

Every program puts its work in a ``main()`` and ends with ``run_main(main)``:

- an exception on any rank prints its traceback (with the rank) and calls
  ``MPI.COMM_WORLD.Abort(1)``, so the job ends within seconds instead of leaving the
  other ranks waiting in a collective call until ``timeout`` kills them;
- after ``main()`` returns on every rank, the ranks allreduce their number of failed
  checks, rank 0 prints the summary, and every rank exits 1 if any rank failed a check
  (0 otherwise): all ranks agree on the result.  A program that ran no check at all
  (every condition an ``assert``, or a count of its own) fails: a check is counted only
  through :func:`check` / :func:`expect_error`.
- the summary is one line written by rank 0 alone, after every rank has flushed its
  output, and it starts on a line of its own (a leading newline), so that another rank's
  unfinished line cannot run into it (``conftest.summary_of`` reads it).

Several programs can run in one job (``tests/mpi/checks.py``, which saves each launch's
start-up: the interpreter, torch and MPI on every rank): ``run_main`` then prints the
program's summary and returns instead of exiting, and the runner exits once all have run.

``check(cond, what)`` records a failed check and goes on (the summary fails the job);
``expect_error(exc_type, fragments, fn, *args)`` checks that a call raises the right
exception with the right message.  Neither aborts: a program that must stop at a failed
condition raises (``assert``), and ``run_main`` ends the job.

A long program splits its ``main`` into named cases (:class:`Cases`): functions run one
after another, in the same order on every rank (they make collective calls), each
reported by name.  A failed check is printed with its case (``[rank 1] FAIL (case 'bad
widths'): ...``), rank 0 prints one line per case (``case 'bad widths': 14 checks, 0
failures``) and, before the summary, ``<name>: failed cases: 'bad widths'`` when any
failed (``conftest.failed_cases`` reads it into the pytest failure); an exception
names its case in the traceback's heading.
"""
import contextlib
import os
import shutil
import sys
import tempfile
import time
import traceback
import types

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

failures = []        # what failed on this rank
counts = {"checks": 0, "errors": 0}  # checks run, of which expect_error cases
current = {"case": None}  # the name of the case running now (Cases.run), or None
failed_case_names = []    # the cases of this program that failed (rank 0 prints them)


def first_ranks(k):
    """Collective over COMM_WORLD: a communicator of its first ``k`` ranks (in rank
    order) on those ranks, None on the others (a job restoring a checkpoint on fewer
    ranks); the caller frees it."""
    sub = comm.Split(0 if rank < k else MPI.UNDEFINED, rank)
    return None if sub == MPI.COMM_NULL else sub


def every_width():
    """The widths a store of this job can have: every divisor of the rank count."""
    return [w for w in range(1, size + 1) if size % w == 0]


def widths_from(argv):
    """The widths a program's command line names (``2 3``), or None for every width
    (no argument, or ``all``): what :func:`each_store` takes."""
    return None if list(argv) in ([], ["all"]) else [int(w) for w in argv]


def each_store(widths=None, transports=("auto", "rma")):
    """Yield ``(store, tag, transport)`` for each width of ``widths`` (default:
    :func:`every_width`) and each transport: a fresh ``DDStore(comm, width, transport)``,
    freed when the loop goes on, and ``tag`` = ``w<width>-<transport>`` for messages."""
    import ddstore
    for width in every_width() if widths is None else widths:
        for transport in transports:
            with ddstore.DDStore(comm, width=width, transport=transport) as store:
                yield store, f"w{width}-{transport}", transport


def check(cond, what):
    """Record ``what`` as a failure on this rank if ``cond`` is false; return ``cond``."""
    counts["checks"] += 1
    if not cond:
        where = f" (case {current['case']!r})" if current["case"] is not None else ""
        failures.append(f"{current['case']}: {what}" if where else what)
        print(f"[rank {rank}] FAIL{where}: {what}", flush=True)
    return bool(cond)


def bytes_equal(a, b):
    """Whether arrays ``a`` and ``b`` hold the same bytes (as ``a.tobytes() ==
    b.tobytes()``, without the two copies: compared eight bytes at a time, the tail one by
    one; 10-15x faster on the 1 MB rows of the round-trips).  Shapes and dtypes are the
    caller's to compare (:func:`same_array` compares all three)."""
    import numpy as np
    a = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    b = np.ascontiguousarray(b).reshape(-1).view(np.uint8)
    if a.size != b.size:
        return False
    n8 = a.size - a.size % 8
    return bool(np.array_equal(a[:n8].view(np.uint64), b[:n8].view(np.uint64))
                and np.array_equal(a[n8:], b[n8:]))


def _typed_array(x):
    """``(dtype name, numpy array)`` of an array, a torch tensor (bfloat16 included: its
    bits as int16, its name kept) or anything ``np.asarray`` takes."""
    import numpy as np
    if type(x).__module__.split(".")[0] == "torch":  # no torch import for numpy callers
        import torch
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            return "bfloat16", x.view(torch.int16).numpy()
        x = x.numpy()
    x = np.asarray(x)
    return x.dtype.name, x


def same_array(a, b):
    """Whether ``a`` and ``b`` (numpy arrays or torch tensors, mixed alike) have the same
    dtype, shape and bytes: what a round-trip check compares (-0.0 is not 0.0; a NaN
    equals the same NaN)."""
    (ta, a), (tb, b) = _typed_array(a), _typed_array(b)
    return ta == tb and a.shape == b.shape and bytes_equal(a, b)


class Cases:
    """The named cases of one program, in the order they are declared::

        cases = Cases()

        @cases("bad widths")
        def _(t):
            ...

        run_main(cases.run)

    ``run(t=None)`` calls every case with one shared namespace ``t`` (a fresh
    ``types.SimpleNamespace`` by default) in which a case leaves what later cases use
    (a store, its data).  The cases are collective: every rank runs all of them in the
    same order.  ``@cases(name, min_ranks=2)``: a case that needs several ranks is
    skipped (and said so) in a smaller job; ``max_ranks=2``: a case whose every check
    the smaller jobs make, and which costs seconds more on ranks that share the cores, is
    skipped (and said so) in a larger one.  After each case the ranks add up its checks and failures and rank 0
    prints ``case '<name>': <n> checks, <m> failures``; a case that failed is also
    listed by :func:`run_main` before the summary.  A case that ran no check is
    refused (a failure of that case), as a program that ran none is."""

    def __init__(self):
        self.items = []

    def __call__(self, name, min_ranks=1, max_ranks=None):
        if any(name == n for n, _, _, _ in self.items):
            raise ValueError(f"two cases named {name!r}")

        def register(fn):
            self.items.append((name, fn, min_ranks, max_ranks))
            return fn
        return register

    def run(self, t=None):
        t = types.SimpleNamespace() if t is None else t
        for name, fn, min_ranks, max_ranks in self.items:
            if size < min_ranks or (max_ranks is not None and size > max_ranks):
                if rank == 0:
                    print(f"case {name!r}: skipped (" + (
                        f"needs {min_ranks} ranks" if size < min_ranks else
                        f"run on up to {max_ranks} ranks") + ")", flush=True)
                continue
            checks0, failed0 = counts["checks"], len(failures)
            current["case"] = name
            t0 = time.perf_counter()
            fn(t)  # an exception goes on to run_main, which names the case
            took = time.perf_counter() - t0
            current["case"] = None
            nchecks = comm.allreduce(counts["checks"] - checks0)
            nfail = comm.allreduce(len(failures) - failed0)
            if nchecks == 0:  # proves nothing: refused, as a program without checks is
                if rank == 0:
                    failures.append(f"{name}: ran 0 checks")
                    print(f"[rank 0] FAIL (case {name!r}): ran 0 checks", flush=True)
                nfail += 1
            if nfail:
                failed_case_names.append(name)
            sys.stdout.flush()
            comm.Barrier()  # the case's own lines are out before its verdict
            if rank == 0:
                sys.stdout.write(f"\ncase {name!r}: {nchecks} checks, {nfail} failures"
                                 + (" FAILED" if nfail else "") + "\n")
                if os.environ.get("DDSTORE_TEST_TIMES"):  # to find the slow cases
                    sys.stdout.write(f"case {name!r} took {took:.2f} s on rank 0\n")
                sys.stdout.flush()


def expect_error(exc_type, fragments, fn, *args, what=None, agree=False, store=None,
                 also=None, agreed=False, **kwargs):
    """Call ``fn(*args, **kwargs)``: it must raise ``exc_type`` whose message contains
    every one of ``fragments`` (one string, or a sequence of anything ``str()`` turns
    into the text to find).  Each way it can fail is a failed :func:`check`.

    ``agree=True``: the call is collective, so every rank must raise the same exception
    type with the same message (checked by an ``allgather``; every rank must call this).
    ``store``: its ``variables()`` must be the same after the failed call as before.
    ``also``: a second class the exception must be an instance of (e.g. ``ValueError``
    and the package's ``DDStoreError``).  ``agreed=True``: the exception must carry the
    mark of an error raised alike on every rank (``ddstore._collective.is_agreed``).
    Returns the message, or ``None`` if the right exception was not raised.
    """
    if isinstance(fragments, str):
        fragments = (fragments,)
    label = what or getattr(fn, "__name__", repr(fn))
    before = store.variables() if store is not None else None
    counts["errors"] += 1
    got = msg = None
    try:
        fn(*args, **kwargs)
    except exc_type as exc:
        msg = str(exc)
        got = (type(exc).__name__, msg)
        if also is not None:
            check(isinstance(exc, also), f"{label}: {type(exc).__name__} is not a "
                                         f"{also.__name__}: {msg}")
        if agreed:
            from ddstore._collective import is_agreed
            check(is_agreed(exc), f"{label}: not marked agreed: {msg}")
        for frag in fragments:
            check(str(frag) in msg, f"{label}: {str(frag)!r} not in the message {msg!r}")
    except Exception as exc:  # noqa: BLE001 -- reported as a failed check
        got = ("other", f"{type(exc).__name__}: {exc}")
        check(False, f"{label}: raised {type(exc).__name__}: {exc}, expected "
                     f"{exc_type.__name__}")
    else:
        check(False, f"{label}: nothing raised, expected {exc_type.__name__}")
    if agree:
        everyone = comm.allgather(got)
        check(all(g == everyone[0] for g in everyone),
              f"{label}: ranks differ: {everyone}")
    if store is not None:
        after = store.variables()
        check(after == before, f"{label}: left variables {after} (before: {before})")
    return msg


@contextlib.contextmanager
def shared_tmpdir(prefix="ddstore-test-"):
    """Collective: a temporary directory made by rank 0 and used by every rank; rank 0
    removes it once every rank is done.  On an exception it is removed at once and the
    exception goes on to :func:`run_main` (no Barrier: the other ranks may be anywhere,
    and the job is ending)."""
    tmp = comm.bcast(tempfile.mkdtemp(prefix=prefix) if rank == 0 else None)
    try:
        yield tmp
    except BaseException:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    comm.Barrier()
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)


combined = {"active": False, "failed": 0}  # set by checks.py: several programs, one job


def abort_job(name):
    """In an ``except`` block: print the exception's traceback, each line tagged with
    this rank, and end the whole job (never returns)."""
    text = traceback.format_exc()
    if current["case"] is not None:
        name = f"{name}, case {current['case']!r}"
    sys.stdout.flush()
    sys.stderr.write(f"[rank {rank}] {name}: uncaught exception, aborting the job:\n"
                     + "".join(f"[rank {rank}] {line}\n" for line in
                               text.rstrip("\n").split("\n")))
    sys.stderr.flush()
    # give the process manager a moment to forward the traceback: MPI_Abort ends the
    # job at once, and Hydra can drop what this rank wrote just before (seen once in
    # CI: the job ended without the traceback)
    time.sleep(0.3)
    comm.Abort(1)
    os._exit(1)  # MPI_Abort may return before the process manager ends this one


def run_main(main, *args, name=None, note=""):
    """Run ``main(*args)`` on every rank; abort the job at the first exception of any
    rank; then agree on the result, print ``<name>: <n> checks, <m> failures on <size>
    ranks <note>`` on rank 0 and exit, 1 on every rank if any rank failed a check, else 0
    (never returns).  Under ``checks.py`` (``combined["active"]``) it returns after the
    summary, adding the failures to ``combined["failed"]``."""
    name = name or os.path.splitext(os.path.basename(sys.argv[0]))[0]
    del failures[:]  # this program's checks only (several may run in one job)
    del failed_case_names[:]
    counts.update(checks=0, errors=0)
    current["case"] = None
    try:
        main(*args)
    except BaseException:  # noqa: BLE001 -- SystemExit and KeyboardInterrupt included
        abort_job(name)
    sys.stdout.flush()
    sys.stderr.flush()
    nfail = comm.allreduce(len(failures))
    nchecks = comm.allreduce(counts["checks"])
    if nchecks == 0:  # a program that checked nothing proves nothing: refused
        nfail += 1
        if rank == 0:
            print(f"\n[rank 0] FAIL: {name} ran 0 checks (count them through check() "
                  f"or expect_error())", flush=True)
    comm.Barrier()  # every rank's own output is written before the summary
    if rank == 0 and failed_case_names:
        sys.stdout.write(f"\n{name}: failed cases: "
                         + ", ".join(repr(c) for c in failed_case_names) + "\n")
    if rank == 0:  # one write, on a line of its own
        sys.stdout.write(f"\n{name}: {nchecks} checks, {nfail} failures on {size} "
                         f"rank{'s' if size != 1 else ''}" + (f" {note}" if note else "")
                         + "\n")
    sys.stdout.flush()
    if combined["active"]:
        combined["failed"] += nfail
        return
    sys.exit(1 if nfail else 0)
