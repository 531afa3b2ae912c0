"""Process lifecycle of stores: the registry of live stores (freed collectively at a
clean exit, each wait bounded), the abort hook that ends the whole MPI job when an
exception is uncaught on one rank, and the check that the launch is an MPI job of the
size its launcher meant (see README, "Failure behaviour")."""
import atexit
import os
import sys
import time

from . import _collective
from .errors import DDStoreError, DDStoreStateError

__all__ = ["abort_on_exception", "register", "unregister", "exit_timeout",
           "check_launch", "launched_alone", "single_rank_hint"]

EXIT_TIMEOUT = 10.0  # seconds; environment DDSTORE_EXIT_TIMEOUT
_REAL_OS_EXIT = os._exit

# Stores not yet freed, in creation order (the same on every rank).  Held here so that
# freeing, which is collective, never depends on when each rank's garbage collector drops
# an object: a DDStore dropped without free() keeps its memory until exit.
_LIVE_STORES = []


def exit_timeout():
    """Seconds the free at interpreter exit waits for the other ranks to join it:
    ``DDSTORE_EXIT_TIMEOUT`` (a positive number) or 10."""
    text = os.environ.get("DDSTORE_EXIT_TIMEOUT", "").strip()
    try:
        value = float(text) if text else EXIT_TIMEOUT
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        sys.stderr.write(f"[ddstore] DDSTORE_EXIT_TIMEOUT={text!r} is not a positive "
                         f"number of seconds; using {EXIT_TIMEOUT:g}\n")
        value = EXIT_TIMEOUT
    return value


def _abort_job(rank, message, code=1, hint=""):
    """Print ``message`` for this rank and end the whole MPI job (never returns)."""
    from mpi4py import MPI
    try:
        sys.stdout.flush()
        sys.stderr.write(f"[ddstore] rank {rank}: {message}; aborting the MPI job{hint}\n")
        sys.stderr.flush()
        # the launcher forwards output asynchronously and stops forwarding when the job
        # is aborted: give it a moment to pass the message (and a traceback) on
        time.sleep(0.5)
    finally:
        MPI.COMM_WORLD.Abort(code)
        _REAL_OS_EXIT(code)  # pragma: no cover -- MPI_Abort may return before the kill


@atexit.register
def _free_live_stores():
    """Free live stores at a clean interpreter exit (collective, newest first, each
    through the agreement of :meth:`DDStore.free`), every wait bounded.

    The other ranks must join each free within :func:`exit_timeout` seconds, and must be
    freeing too: a rank that ends its script (end of file, ``sys.exit(n)``) while
    another is inside a collective call, or still running after that time, is a failed
    job, so the job is aborted (non-zero exit code) with a message naming what the ranks
    were doing, instead of leaving the others waiting for a rank that has gone.

    When an uncaught exception is ending this rank (and the abort hook is switched off),
    or ``python -m mpi4py`` is about to abort the job (``sys.exit(n)`` with ``n != 0``
    under it), the other ranks are not exiting with it, so no collective free is started:
    the windows are left to MPI_Abort / MPI_Finalize and the operating system instead.
    """
    if (not _LIVE_STORES or getattr(sys, "last_value", None) is not None
            or _ABORT["status"]):
        return
    from mpi4py import MPI
    if MPI.Is_finalized():
        return
    seconds = exit_timeout()
    while _LIVE_STORES:
        store = _LIVE_STORES[-1]
        last = _collective.last_call()
        doing = f" (its last collective call: {last})" if last else ""

        def timed_out(waited, store=store):
            _abort_job(store.rank, f"exiting with a live DDStore, whose collective free "
                                   f"at exit was not joined by all {store.size} ranks of "
                                   f"its communicator within {waited:g} s "
                                   f"(DDSTORE_EXIT_TIMEOUT): the others are still "
                                   f"running or waiting in a call that is not a ddstore "
                                   f"collective call; this rank ended its script{doing}")
        try:
            with _collective.bounded(seconds, timed_out, "exiting"):
                store.free()
        except DDStoreError as exc:  # the others are inside another collective call
            _abort_job(store.rank, f"is exiting (end of script, sys.exit or "
                                   f"os._exit(0)) while other ranks are inside a "
                                   f"collective call: a failed job: {exc}")


# ------------------------------------------------------------------ failure behaviour
_ABORT = {"enabled": os.environ.get("DDSTORE_ABORT_ON_EXCEPTION", "1").strip().lower()
          not in ("0", "false", "no", "off"), "installed": False, "status": 0}


def abort_on_exception(enabled=True):
    """Choose what an uncaught exception on one rank does to a multi-rank job.

    ``True`` (the default; environment ``DDSTORE_ABORT_ON_EXCEPTION=0`` sets ``False``):
    once a :class:`DDStore` exists, an uncaught exception prints its traceback as usual
    and then calls ``MPI_Abort(MPI_COMM_WORLD, 1)``, which ends every rank of the job
    with a non-zero exit code, as ``python -m mpi4py`` does.  Without it the other ranks
    would wait forever for the failed one in their next collective call (or in the
    collective free at exit).  ``False``: the interpreter exits as Python decides and
    the other ranks may hang; use it only where something else (``python -m mpi4py``,
    your own handler) ends the job.  Returns the previous setting.
    """
    previous = _ABORT["enabled"]
    _ABORT["enabled"] = bool(enabled)
    return previous


def _install_abort_hook():
    """Chain ``sys.excepthook`` once (at the first store): print, then abort the job."""
    if _ABORT["installed"]:
        return
    _ABORT["installed"] = True
    previous = sys.excepthook

    def _ddstore_excepthook(exc_type, exc, tb):
        previous(exc_type, exc, tb)
        if not _ABORT["enabled"]:
            return
        from mpi4py import MPI
        if (not MPI.Is_initialized() or MPI.Is_finalized() or
                MPI.COMM_WORLD.Get_size() == 1):
            return
        _abort_job(MPI.COMM_WORLD.Get_rank(), f"uncaught {exc_type.__name__}",
                   hint=" (see ddstore.abort_on_exception)")

    sys.excepthook = _ddstore_excepthook

    # os._exit(0) skips atexit: the launcher would end the job with exit code 0 even when
    # the other ranks are inside a collective call.  Free as a clean exit does first.
    pid = os.getpid()

    def _ddstore_os_exit(code):
        if code == 0 and os.getpid() == pid and _ABORT["enabled"] and _LIVE_STORES:
            _free_live_stores()
        _REAL_OS_EXIT(code)

    os._exit = _ddstore_os_exit

    # ``python -m mpi4py`` records a non-zero exit status (sys.exit(n), an exception)
    # and aborts in its own exit handler: note it, so that the collective free at exit
    # does not run first and wait for ranks that are not exiting.
    from mpi4py import MPI
    record = getattr(MPI, "_set_abort_status", None)
    if record is not None:
        def _set_abort_status(status):
            _ABORT["status"] = status
            return record(status)
        MPI._set_abort_status = _set_abort_status


def register(store):
    """Note a new live store (creation order is the same on every rank) and install the
    abort hook at the first one."""
    _LIVE_STORES.append(store)
    _install_abort_hook()


def unregister(store):
    if store in _LIVE_STORES:
        _LIVE_STORES.remove(store)


# ------------------------------------------------------------------ launch size
# Variables in which a launcher states how many processes it started, and the launcher.
# Each is set only by its launcher, for every process it starts, to the size of the job
# (MPICH's and Intel MPI's mpiexec set PMI_SIZE to its -n; srun's PMI does too).
# SLURM_NTASKS is not one of them: an allocation's task count may exceed a job step's.
LAUNCH_SIZE_VARIABLES = (
    ("WORLD_SIZE", "torchrun / torch.distributed.launch"),
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpiexec"),
    ("PMI_SIZE", "an MPICH-style process manager (mpiexec, srun)"),
    ("MV2_COMM_WORLD_SIZE", "MVAPICH's launcher"),
)


def _launch_sizes(environ):
    """``[(variable, launcher, text)]`` of the launch-size variables set in ``environ``."""
    return [(var, launcher, environ[var].strip()) for var, launcher in
            LAUNCH_SIZE_VARIABLES if environ.get(var, "").strip()]


def check_launch(environ=None, world_size=None):
    """Raise :class:`DDStoreStateError` when the launch is not an MPI job of the size its
    launcher meant.  An MPI launcher's own variable (``PMI_SIZE``,
    ``OMPI_COMM_WORLD_SIZE``, ``MV2_COMM_WORLD_SIZE``) is trusted over torch's
    ``WORLD_SIZE`` (a leftover of an earlier ``torchrun`` in the shell): when one of them
    matches ``MPI.COMM_WORLD``, the launch is right whatever ``WORLD_SIZE`` says.  The
    usual failure: ``torchrun --nproc_per_node N script.py`` starts N processes that are
    each an MPI job of one rank (they would wait forever in torch's rendezvous or train
    on disjoint stores).  ``environ`` / ``world_size`` default to ``os.environ`` and
    ``MPI.COMM_WORLD.Get_size()`` (parameters for tests)."""
    environ = os.environ if environ is None else environ
    if world_size is None:
        from mpi4py import MPI
        world_size = MPI.COMM_WORLD.Get_size()
    found = _launch_sizes(environ)
    for var, _, text in found:
        if not (text.isascii() and text.isdigit()):
            raise DDStoreStateError(f"{var}={text!r} in the environment is not a number of "
                                    f"processes: unset it, or launch with "
                                    f"`mpiexec -n N python script.py`")
    mpi = [(v, l, int(t)) for v, l, t in found if v != "WORLD_SIZE"]
    if any(n == world_size for _, _, n in mpi):
        bad = [(v, l, n) for v, l, n in mpi if n != world_size]
    else:
        bad = [(v, l, int(t)) for v, l, t in found if int(t) != world_size]
    if not bad:
        return
    var, launcher, n = bad[0]
    agree_with = [v for v, _, t in found if int(t) == world_size]
    trusted = (f" ({', '.join(agree_with)} agree with the MPI world)" if agree_with
               else "")
    raise DDStoreStateError(
        f"this process belongs to a job of {n} processes ({var}={n}, set by {launcher}) "
        f"but its MPI world (MPI.COMM_WORLD) has {world_size} "
        f"rank{'s' if world_size != 1 else ''}{trusted}: the processes were not started "
        f"as one MPI job.  ddstore needs every process in one MPI job: launch with "
        f"`mpiexec -n {n} python script.py` (torch.distributed is started over MPI by "
        f"ddstore.distributed.init_torch_distributed), not torchrun"
        + (f"; if {var} is a leftover in your shell, unset it" if var == "WORLD_SIZE"
           else ""))


def launched_alone(environ=None, world_size=None):
    """True when this process is an MPI world of one rank that no launcher started
    (``python script.py`` instead of ``mpiexec -n N python script.py``)."""
    environ = os.environ if environ is None else environ
    if world_size is None:
        from mpi4py import MPI
        world_size = MPI.COMM_WORLD.Get_size()
    return world_size == 1 and not _launch_sizes(environ)


def single_rank_hint(size):
    """A hint for messages about a communicator of ``size`` ranks: launched without
    ``mpiexec``?"""
    if size == 1 and launched_alone():
        return ("; launched without `mpiexec`? this process is an MPI job of one rank: "
                "run `mpiexec -n N python script.py`")
    return ""
