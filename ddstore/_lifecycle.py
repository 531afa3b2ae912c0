"""Process lifecycle of stores (see docs/cluster.md, "Failure behaviour"): the registry of
live stores, freed collectively at a clean exit (waiting for peers that compute, ending
the job at once when one is in another collective call: what each rank is doing is read
from the stores' status boards, :mod:`ddstore._status`); the abort hook that ends the
whole MPI job when an exception is uncaught on one rank (an agreed error told once, by
rank 0); the warning for a process launched without ``mpiexec``; and the check that the
launch is an MPI job of the size its launcher meant."""
import atexit
import io
import logging
import os
import re
import sys
import threading
import time

from . import _collective, _core, _status
from ._checks import as_bool
from ._collective import collective
from .errors import DDStoreError, DDStoreMemoryError, DDStoreStateError, DDStoreValueError

__all__ = ["abort_on_exception", "register", "unregister", "exit_timeout",
           "check_rank_settings",
           "check_launch", "launched_alone", "single_rank_hint", "refuse_pickle"]

REPORT_EVERY = 30.0    # seconds between the lines of a rank waiting at its exit
EXIT_TIMEOUT = 600.0   # seconds the free at exit waits in all for computing peers, by
#                        default (DDSTORE_EXIT_TIMEOUT: another number, or "none")
MISMATCH_GRACE = 0.5   # seconds a peer seen in another collective call has to meet the
#                        exiting rank's round (then the agreed error names both calls)
AGREED_WAIT = 10.0     # seconds a rank other than 0 waits for rank 0 to end the job
#                        after an uncaught agreed error (rank 0 prints it)
_REAL_OS_EXIT = os._exit

# Stores not yet freed, in creation order (the same on every rank).  Held here so that
# freeing, which is collective, never depends on when each rank's garbage collector drops
# an object: a DDStore dropped without free() keeps its memory until exit.
_LIVE_STORES = []

_collective.set_publish_hook(_status.publish)  # what this rank does, on the boards


def refuse_pickle(store, protocol=None):
    """``DDStore.__reduce_ex__``: a store is neither pickled nor copied, and neither is
    what holds one (a dataset, a graph, a sampler): its rows are MPI memory of this
    process, which no other process can map from a pickle."""
    raise DDStoreStateError(
        "a DDStore cannot be pickled or copied, nor anything holding one (a dataset, a "
        "graph, a sampler): its rows are MPI memory of this process. A DataLoader whose "
        "workers start by 'spawn' or 'forkserver' pickles its dataset: start them by "
        "'fork' (multiprocessing_context='fork', where the dataset takes workers) or "
        "use num_workers=0")


def _seconds(text):
    """``text`` as a positive number of seconds, or None: plain ASCII decimal digits with
    at most one point (float() alone would also take "1_000", other scripts' digits
    ("٣"), "1e3" and "nan")."""
    value = float(text) if re.fullmatch(r"[0-9]+\.?[0-9]*|\.[0-9]+", text) else -1.0
    return value if 0 < value < float("inf") else None


def _seconds_from(var, default, meaning):
    """Environment variable ``var`` as a positive number of seconds; ``default`` when it
    is unset or (with a line on stderr saying so) not such a number."""
    text = os.environ.get(var, "").strip()
    if not text:
        return default
    value = _seconds(text)
    if value is None:
        sys.stderr.write(f"[ddstore] {var}={text!r} is not a positive number of "
                         f"seconds; {meaning}\n")
        return default
    return value


def check_rank_settings():
    """Raise a :class:`DDStoreValueError` naming it unless ``DDSTORE_EXIT_TIMEOUT`` (a
    positive number of seconds, or none), ``DDSTORE_EXIT_REPORT_SECONDS`` and the on/off
    switches (``DDSTORE_ABORT_ON_EXCEPTION``, ``DDSTORE_SHM_WATCH``: :data:`SWITCH_ON`,
    :data:`SWITCH_OFF`) are unset or well formed: run in a store's constructor, so that a
    bad value is refused at once, not found at the exit (where it can only fall back to
    the default) or taken for "on" without a word."""
    for var, none_ok in (("DDSTORE_EXIT_TIMEOUT", True),
                         ("DDSTORE_EXIT_REPORT_SECONDS", False)):
        text = os.environ.get(var, "").strip()
        if text and not (none_ok and text.lower() in NO_LIMIT) and _seconds(text) is None:
            raise DDStoreValueError(
                f"{var}={text!r} must be a positive number of seconds in plain digits "
                f"(e.g. 1800)" + (", or none (no limit; also inf, infinity, unlimited)"
                                  if none_ok else ""))
    for var in SWITCHES:  # on unless switched off; anything else is a typo
        text = os.environ.get(var, "").strip().lower()
        if text not in SWITCH_ON + SWITCH_OFF:
            raise DDStoreValueError(
                f"{var}={os.environ[var]!r} must be one of {', '.join(SWITCH_OFF)} (off) "
                f"or {', '.join(v for v in SWITCH_ON if v)} (on, the default)")


SWITCH_ON = ("", "1", "true", "yes", "on")  # the on/off environment settings' spellings
SWITCH_OFF = ("0", "false", "no", "off")
SWITCHES = ("DDSTORE_ABORT_ON_EXCEPTION", "DDSTORE_SHM_WATCH")


NO_LIMIT = ("none", "inf", "infinity", "unlimited")  # DDSTORE_EXIT_TIMEOUT: wait for ever


def exit_timeout():
    """The most seconds the free at interpreter exit waits, in all, for the other ranks
    to join it (see :func:`_free_live_stores`): ``DDSTORE_EXIT_TIMEOUT`` (a positive
    number of seconds), ``EXIT_TIMEOUT`` (10 minutes) when it is unset or not such a
    number, or None (no limit) when it is ``none`` (or ``inf``, ``unlimited``)."""
    if os.environ.get("DDSTORE_EXIT_TIMEOUT", "").strip().lower() in NO_LIMIT:
        return None
    return _seconds_from("DDSTORE_EXIT_TIMEOUT", EXIT_TIMEOUT,
                         f"waiting at most {_duration(EXIT_TIMEOUT)} (the default)")


def report_every():
    """Seconds between the lines a rank waiting at its exit prints:
    ``DDSTORE_EXIT_REPORT_SECONDS`` or 30."""
    return _seconds_from("DDSTORE_EXIT_REPORT_SECONDS", REPORT_EVERY,
                         f"using {REPORT_EVERY:g}")


def _mpich_shm_paths():
    """The paths of MPICH's node shared-memory segments that this process maps
    (``/dev/shm/mpich_shm_*``, ``mpich_vci_*``, made at ``MPI_Init``), in map order;
    empty where ``/proc/self/maps`` cannot be read (not Linux)."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:  # not Linux
        return []
    paths = []
    for line in lines:
        parts = line.split(None, 5)
        path = parts[5] if len(parts) == 6 else ""
        name = os.path.basename(path)
        if (os.path.dirname(path) == "/dev/shm" and name.startswith(SHM_PREFIXES)
                and path not in paths):
            paths.append(path)
    return paths


SHM_PREFIXES = ("mpich_shm_", "mpich_vci_")


def _release_mpich_shm():
    """Unlink the names of MPICH's node shared-memory segments that this process maps
    (:func:`_mpich_shm_paths`): MPICH unlinks them in ``MPI_Finalize``, which
    ``MPI_Abort`` skips, so every job ended by an abort (an uncaught exception, Ctrl-C)
    would leave them in ``/dev/shm``.  Called just before this process aborts: the job
    is ending, nothing opens them by name any more, and the processes that map them
    keep their mappings."""
    for path in _mpich_shm_paths():
        try:
            os.unlink(path)
        except OSError:  # another rank of the node was first
            pass


# ------------------------------------------------------------------ signals: /dev/shm
# A job ended by a signal (SIGTERM from ``scancel``, ``timeout`` or a batch system's time
# limit, to ``mpiexec`` or to one rank; SIGKILL; the process manager's kill after
# ``mpiexec`` died of SIGHUP) never reaches MPI_Finalize, and a rank blocked inside an MPI
# call (a ``comm.Barrier()``) runs no Python signal handler.  So no handler is installed
# (none of the user's, MPICH's or UCX's is replaced, and every signal keeps its action):
# instead each rank starts, with its first store, a watcher: a small shell process that
# ignores the usual signals and waits for the end of a pipe whose only writer is the
# rank; when the rank ends, however it ends, the kernel closes the pipe and the watcher
# unlinks the names the rank mapped (rm -f: nothing when MPI_Finalize has already).
_SHM_WATCH = {"pid": None}
# run by /bin/sh with the pipe's reading end as its input: the watcher (the subshell
# started in the background) reads it to its end, then removes the names it was given
# (with the options of rm given first: -f for files, -rf for a directory tree)
_SHM_WATCH_SCRIPT = (
    "exec 3<&0 </dev/null\n"
    "( exec 0<&3 3<&- >/dev/null 2>&1\n"
    "  trap '' HUP INT QUIT TERM USR1 USR2 PIPE ALRM\n"
    "  while read -r _; do :; done\n"
    "  exec rm \"$@\" ) &\n")
_WATCH_FDS = set()  # this process's watchers' pipe ends


def _close_watch_fds():
    """In a process forked from a rank (a DataLoader worker): drop the watchers' pipes,
    so that the rank's end alone is the end of each pipe."""
    for fd in list(_WATCH_FDS):
        _WATCH_FDS.discard(fd)
        try:
            os.close(fd)
        except OSError:
            pass


def _start_watcher(rm_args, name):
    """A watcher (see above; ``name`` its process's name) that runs ``rm *rm_args`` when
    this process ends, however it ends: the writing end of its pipe (closing it runs the
    ``rm`` now), or None where it cannot start."""
    if not os.access("/bin/sh", os.X_OK):
        return None
    import subprocess
    rfd, wfd = os.pipe()  # both close on exec: the rank's other children never hold it
    try:
        # the shell starts the watcher in the background and exits at once (waited for
        # here): the watcher is nobody's child here (no zombie, no os.wait() of the
        # user's reaps it), in a session of its own (a kill of the rank's process group
        # spares it) and holds no descriptor of the rank but the pipe's end
        subprocess.run(["/bin/sh", "-c", _SHM_WATCH_SCRIPT, name, *rm_args],
                       stdin=rfd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, close_fds=True,
                       start_new_session=True,  # not killed with the rank's group
                       timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        os.close(wfd)
        return None
    finally:
        os.close(rfd)
    _WATCH_FDS.add(wfd)
    if not _SHM_WATCH.get("at_fork"):
        _SHM_WATCH["at_fork"] = True
        os.register_at_fork(after_in_child=_close_watch_fds)
    return wfd


def remove_when_ended(path):
    """Local: remove the file or directory tree ``path`` (one this process makes: a
    benchmark's scratch directory, a file being written) when this process ends, however
    it ends (SIGTERM, SIGKILL, an abort): a watcher as for ``/dev/shm``.  Returns a
    function that removes it now, if it is there (and lets the watcher go)."""
    import shutil
    path = os.path.abspath(path)
    fd = _start_watcher(["-rf", "--", path], "ddstore-dir-watch")

    def remove():
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            try:
                os.remove(path)
            except OSError:
                pass
        if fd in _WATCH_FDS:
            _WATCH_FDS.discard(fd)
            os.close(fd)
    return remove


def watch_shm():
    """Start this rank's ``/dev/shm`` watcher (see above) once per process: at the first
    store, after ``MPI_Init`` has made the segments.  Returns the paths it watches (empty
    where there is nothing to watch, it runs already, or it cannot start:
    ``DDSTORE_SHM_WATCH=0`` switches it off)."""
    if _SHM_WATCH["pid"] == os.getpid() or _core.forked():
        return []
    if os.environ.get("DDSTORE_SHM_WATCH", "1").strip().lower() in SWITCH_OFF:
        return []
    paths = _mpich_shm_paths()
    if not paths:
        return []
    wfd = _start_watcher(["-f", "--", *paths], "ddstore-shm-watch")
    if wfd is None:
        return []
    _SHM_WATCH["pid"] = os.getpid()
    return paths


def _abort_job(rank, message, code=1, hint=""):
    """Print ``message`` for this rank and end the whole MPI job (never returns)."""
    from mpi4py import MPI
    try:
        _release_mpich_shm()
        sys.stdout.flush()
        sys.stderr.write(f"[ddstore] rank {rank}: {message}; aborting the MPI job{hint}\n")
        sys.stderr.flush()
        _spill_captured_stderr()
        # the launcher forwards output asynchronously and stops forwarding when the job
        # is aborted: give it a moment to pass the message (and a traceback) on
        time.sleep(0.5)
    finally:
        MPI.COMM_WORLD.Abort(code)
        _REAL_OS_EXIT(code)  # pragma: no cover -- MPI_Abort may return before the kill


def _spill_captured_stderr():
    """The abort from inside ``torch.distributed``'s ``sys.excepthook`` (set by
    ``init_process_group`` called directly after a store was made, which
    :func:`outermost_abort_hook` could not wrap: torch prints, prefixed with the rank,
    what the hook it chained, ours, writes into its ``StringIO``, once that hook returns,
    which an abort never does): what the buffer holds goes to the process's own stderr.
    A ``StringIO`` of the user's own (no such hook around ours) is left alone."""
    err, own = sys.stderr, sys.__stderr__
    hook = sys.excepthook
    if (type(err) is not io.StringIO or own is None
            or getattr(hook, "ddstore_aborts", False)
            or not getattr(hook, "__module__", "").startswith("torch.")):
        return
    try:
        text = err.getvalue()
        if text:
            own.write(text)
            own.flush()
    except Exception:  # noqa: BLE001 -- nothing more can be told: the job ends
        pass


def _duration(seconds):
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


class _ExitWatch:
    """What the free of ``store`` at interpreter exit does while it waits (the ``watch``
    and ``on_timeout`` of :func:`ddstore._collective.bounded`): every 0.1 s it reads the
    store's status board (:mod:`ddstore._status`).

    - A peer *in another collective call* of the store's communicator (not ``free``)
      can never finish it without this rank: after ``MISMATCH_GRACE`` seconds (in which
      its round usually meets this rank's, and every rank is told the agreed error) the
      job is ended, naming what each rank is doing.  So is a peer that *has left*.
    - Peers *computing* (or exiting too) are waited for, at most :func:`exit_timeout`
      seconds in all (10 minutes unless ``DDSTORE_EXIT_TIMEOUT`` says otherwise); every
      :func:`report_every` seconds one line on stderr says which ranks this one waits
      for, what they are doing, when the job will be ended and how to end it now
      (Ctrl-C, scancel) or wait longer (``DDSTORE_EXIT_TIMEOUT``).
    """

    def __init__(self, store, started, cap):
        self.store, self.started, self.cap = store, started, cap
        self.board = getattr(store, "_board", None)
        self.every = report_every()
        self.next_poll = 0.0
        self.next_report = started + self.every
        self.away_since = None

    def statuses(self):
        return None if self.board is None else self.board.poll()

    def __call__(self):
        now = time.monotonic()
        if now < self.next_poll or self.board is None:
            return
        self.next_poll = now + 0.1
        st = self.board.poll()
        me = self.store.rank
        if _collective.interrupt_pending():  # (Ctrl-C to this rank: what it was told)
            _abort_job(me, f"interrupted (SIGINT, Ctrl-C) while exiting, waiting for the "
                           f"other ranks to join the collective free at exit "
                           f"({_status.summary(st)})", code=130)
        away = [r for r, (state, desc, _) in enumerate(st) if r != me and (
            state == _status.LEFT or (state == _status.IN_CALL and desc != "free()"))]
        if not away:
            self.away_since = None
        elif self.away_since is None:
            self.away_since = now
        if away and (now - self.away_since >= MISMATCH_GRACE or
                     any(st[r][0] == _status.LEFT for r in away)):
            _abort_job(me, f"is exiting (end of script, sys.exit or os._exit(0)) while "
                           f"other ranks are inside a collective call of its "
                           f"communicator, which cannot end without it: a failed job "
                           f"({_status.summary(st)})")
        if now >= self.next_report:
            self.next_report = now + self.every
            waited = [r for r, (state, _, _) in enumerate(st) if r != me and
                      state != _status.EXITING] or [r for r in range(len(st)) if r != me]
            if self.cap is None:
                given = os.environ.get("DDSTORE_EXIT_TIMEOUT", "").strip()
                limit = (f"no time limit (DDSTORE_EXIT_TIMEOUT={given}); end the job with "
                         f"Ctrl-C or scancel")
            else:
                left = max(self.cap - (now - self.started), 0.0)
                limit = (f"the job ends in {_duration(left)} (DDSTORE_EXIT_TIMEOUT="
                         f"{self.cap:g} s in all); end it now with Ctrl-C or scancel, "
                         f"or set DDSTORE_EXIT_TIMEOUT (seconds, or none) to wait longer")
            sys.stderr.write(f"[ddstore] rank {me}: exiting; waited "
                             f"{_duration(now - self.started)} so far for "
                             f"{_collective.format_ranks(waited)} to join the collective "
                             f"free at exit ({_status.summary(st, waited)}); {limit}\n")
            sys.stderr.flush()

    def timed_out(self, _remaining):
        last = _collective.last_call()
        doing = f" (its last collective call: {last})" if last else ""
        st = self.statuses()
        what = f": {_status.summary(st)}" if st else ""
        _abort_job(self.store.rank,
                   f"exiting with a live DDStore, whose collective free at exit was not "
                   f"joined by all {self.store.size} ranks of its communicator within "
                   f"{self.cap:g} s (DDSTORE_EXIT_TIMEOUT, {_duration(EXIT_TIMEOUT)} "
                   f"by default; set it to more seconds, or none, to wait longer){what}; "
                   f"this rank ended its script{doing}")


@atexit.register
def _free_live_stores():
    """Free live stores at a clean interpreter exit (collective, newest first, each
    through the step of :meth:`DDStore.free`), waiting for the other ranks as long as
    they are computing.

    While it waits, this rank's status board says "exiting", and it reads what the
    other ranks are doing (see :class:`_ExitWatch`): peers computing outside any ddstore
    call (rank 0 writing a checkpoint for minutes) are waited for, at most
    :func:`exit_timeout` seconds in all (10 minutes by default; a peer blocked for ever
    in an MPI call of the user's, e.g. a ``comm.Barrier()`` this rank never enters,
    looks the same), with one line on stderr every 30 s naming them; a peer inside
    another collective call (which cannot end without this rank) ends the job within
    about a second, non-zero, with a message naming what each rank is doing; a peer
    whose round meets this rank's in another call gets the agreed "out of step" error,
    and this rank ends the job naming both calls.

    When an uncaught exception is ending this rank (and the abort hook is switched off),
    or ``python -m mpi4py`` is about to abort the job (``sys.exit(n)`` with ``n != 0``
    under it), the other ranks are not exiting with it, so no collective free is started:
    the boards say that this rank has left, and the windows are left to MPI_Abort /
    MPI_Finalize and the operating system instead.  A process forked from a rank (a
    DataLoader worker, ``os.fork``) frees nothing: its stores are the rank's, and it
    may make no MPI call (:func:`ddstore._core.forked`).
    """
    if not _LIVE_STORES or _core.forked():  # a forked child's exit: no MPI call
        return
    if getattr(sys, "last_value", None) is not None or _ABORT["status"]:
        _status.set_left("without the collective free at exit: an uncaught exception"
                         if _ABORT["status"] == 0 else
                         "without the collective free at exit: python -m mpi4py aborts")
        return
    from mpi4py import MPI
    if MPI.Is_finalized():
        return
    holder = _collective.caller_thread()
    if holder is not None and holder is not threading.current_thread():
        # a thread of this rank (a daemon, at exit) is inside a collective call: a free
        # from this thread would be another collective call at once
        _status.set_left(f"without the collective free at exit: its thread "
                         f"{holder.name!r} is inside a collective call")
        sys.stderr.write(f"[ddstore] rank {_LIVE_STORES[-1].rank}: the stores are not "
                         f"freed at exit: thread {holder.name!r} is inside a collective "
                         f"call ({_collective.current_call() or 'a collective call'}); "
                         f"MPI_Finalize releases them\n")
        return
    cap = exit_timeout()
    started = time.monotonic()
    _status.set_exiting("the collective free at exit")
    while _LIVE_STORES:
        store = _LIVE_STORES[-1]
        watch = _ExitWatch(store, started, cap)
        seconds = None if cap is None else max(cap - (time.monotonic() - started), 1e-3)
        try:
            with _collective.bounded(seconds, watch.timed_out, "exiting", watch):
                store.free()
        except DDStoreError as exc:  # the others are inside another collective call
            _abort_job(store.rank, f"is exiting (end of script, sys.exit or "
                                   f"os._exit(0)) while other ranks are inside a "
                                   f"collective call: a failed job: {exc}")


# ------------------------------------------------------------------ failure behaviour
# "enabled": what abort_on_exception() set, or None: DDSTORE_ABORT_ON_EXCEPTION as it is
# when it counts (set after the import, before the store: taken, as the constructor
# checked it)
_ABORT = {"enabled": None, "installed": False, "status": 0}


def aborts():
    """Whether an uncaught exception ends the job (:func:`abort_on_exception`)."""
    if _ABORT["enabled"] is not None:
        return _ABORT["enabled"]
    return os.environ.get("DDSTORE_ABORT_ON_EXCEPTION", "1").strip().lower() not in SWITCH_OFF


def abort_on_exception(enabled=True):
    """Choose what an uncaught exception on one rank does to a multi-rank job.

    ``True`` (the default; environment ``DDSTORE_ABORT_ON_EXCEPTION=0`` sets ``False``,
    read when an exception comes unless this function was called):
    once a :class:`DDStore` exists, an uncaught exception prints its traceback as usual
    and then calls ``MPI_Abort(MPI_COMM_WORLD, 1)``, which ends every rank of the job
    with a non-zero exit code, as ``python -m mpi4py`` does.  An agreed error (raised
    alike on every rank of its communicator, see :func:`ddstore._collective.is_agreed`)
    is told once: rank 0 of that communicator prints ``[ddstore] error on every rank:
    <message>``, then its traceback, and ends the job; the other ranks print nothing
    (they end the job themselves, with their traceback, if rank 0 has not within
    ``AGREED_WAIT`` seconds, e.g. because it caught the error).  Without the hook the
    other ranks would wait forever for the failed one in their next collective call (or
    in the collective free at exit).  ``False``: the interpreter exits as Python decides
    and the other ranks may hang; use it only where something else (``python -m
    mpi4py``, your own handler) ends the job.  In a process forked from a rank (a
    DataLoader worker) the hook only prints: no MPI call is made there.  Returns the
    previous setting.
    """
    enabled = as_bool(enabled, "abort_on_exception: enabled")  # ("0" is truthy: on)
    previous = aborts()
    _ABORT["enabled"] = bool(enabled)
    return previous


def as_comm(comm, what):
    """``comm`` checked: an mpi4py intracommunicator (``None``: ``MPI.COMM_WORLD``), or a
    :class:`DDStoreValueError` naming ``what`` and what was given (a string or another
    object failed with a bare ``AttributeError``).  Local: with no communicator to agree
    over, the error is this rank's; uncaught, it ends the job (the abort hook)."""
    from mpi4py import MPI
    if comm is None:
        return MPI.COMM_WORLD
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        raise DDStoreValueError(f"{what}: comm must be an mpi4py intracommunicator "
                                f"(MPI.COMM_WORLD or one split from it) or None, got "
                                f"{type(comm).__name__} {comm!r:.60}")
    return comm


def _abort_hook(previous):
    """``sys.excepthook`` that prints through ``previous``, then ends the job (see
    :func:`abort_on_exception`).  A hook of ours that another hook of ours wraps (put
    around a library's, :func:`outermost_abort_hook`) prints only: the outer one ends the
    job once the library's hook has printed."""
    def _ddstore_excepthook(exc_type, exc, tb):
        from mpi4py import MPI
        outer = sys.excepthook
        if (outer is not _ddstore_excepthook and getattr(outer, "ddstore_aborts", False)
                or not aborts() or _core.forked() or not MPI.Is_initialized()
                or MPI.Is_finalized() or MPI.COMM_WORLD.Get_size() == 1):
            previous(exc_type, exc, tb)
            return
        rank = MPI.COMM_WORLD.Get_rank()
        hint = " (see ddstore.abort_on_exception)"
        if _collective.is_agreed(exc):
            _end_agreed(previous, exc_type, exc, tb, rank, hint)
        if issubclass(exc_type, KeyboardInterrupt) and tb is not None:
            # Ctrl-C reaches every rank: where each stood, one line, not a traceback each
            import traceback
            at = traceback.extract_tb(tb)[-1]
            _abort_job(rank, f"interrupted (KeyboardInterrupt) at {at.filename}:"
                             f"{at.lineno} in {at.name}", code=130)
            return
        previous(exc_type, exc, tb)
        _abort_job(rank, f"uncaught {exc_type.__name__}", hint=hint)

    _ddstore_excepthook.ddstore_aborts = True
    return _ddstore_excepthook


def outermost_abort_hook():
    """Put the abort hook around a ``sys.excepthook`` installed after it (by
    ``torch.distributed.init_process_group``, whose hook prints what the hooks inside it
    write only once they return, which an abort never does), so that the job ends after
    every hook has printed.  Called by :func:`ddstore.distributed.init_torch_distributed`
    and by each store's construction."""
    if _ABORT["installed"] and not getattr(sys.excepthook, "ddstore_aborts", False):
        sys.excepthook = _abort_hook(sys.excepthook)


def install_abort_hook():
    """Chain ``sys.excepthook`` once (when the first store is being made, so that an
    error that refuses it is told once too): print, then abort the job.  Later stores
    put it back around a hook installed since (:func:`outermost_abort_hook`)."""
    if _ABORT["installed"]:
        outermost_abort_hook()
        return
    _ABORT["installed"] = True
    sys.excepthook = _abort_hook(sys.excepthook)

    # os._exit(0) skips atexit: the launcher would end the job with exit code 0 even when
    # the other ranks are inside a collective call.  Free as a clean exit does first.
    pid = os.getpid()

    def _ddstore_os_exit(code):
        if code == 0 and os.getpid() == pid and aborts() and _LIVE_STORES:
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
            if status:  # mpi4py aborts at exit: MPI_Finalize will not unlink them
                _release_mpich_shm()
            return record(status)
        MPI._set_abort_status = _set_abort_status


def _end_agreed(previous, exc_type, exc, tb, rank, hint):
    """End the job for an uncaught agreed error (never returns): told once, by rank 0 of
    the communicator it was agreed over (see :func:`abort_on_exception`)."""
    comm = _collective.agreed_over(exc)
    try:
        first = comm is None or comm.Get_rank() == 0
    except Exception:  # noqa: BLE001 -- a freed communicator: tell it here
        first = True
    stuck = None
    if not first:  # rank 0 tells it; the job ends when it aborts
        _release_mpich_shm()
        _status.set_left(f"uncaught {exc_type.__name__}")  # a peer at its exit ends it
        stuck = _wait_for_first(comm, AGREED_WAIT)
    interrupt = isinstance(exc, KeyboardInterrupt)  # (a DDStoreInterrupt: its message
    sys.stdout.flush()                              # says where each rank stood)
    sys.stderr.write(f"[ddstore] error on every rank: {exc}"
                     f"{'' if interrupt else _interrupted(exc)}\n")
    sys.stderr.flush()
    if not interrupt:
        previous(exc_type, exc, tb)
    if first:
        why = ""
    elif stuck is None:
        why = (f" (rank 0 of its communicator did not end the job within "
               f"{AGREED_WAIT:g} s)")
    else:
        why = (f" (rank 0 of its communicator went on past it, through a `with` block's "
               f"exit or a handler, and {stuck}, which cannot end without this rank: it "
               f"cannot end the job)")
    _abort_job(rank, f"uncaught {exc_type.__name__}, raised on every rank{why}",
               code=130 if interrupt else 1, hint=hint)


STUCK_GRACE = 2.0  # seconds rank 0 may stay in the call it was in when the error came


def _wait_for_first(comm, seconds):
    """On a rank other than 0 of ``comm`` that is ending the job for an uncaught agreed
    error (its boards say it has left): wait up to ``seconds`` for rank 0 to end it, and
    return None; or return what rank 0 does (e.g. ``"is in free()"``) as soon as a
    store's status board shows it inside a collective call of ``comm`` that it entered
    after the error (it caught the error and went on to a call, e.g. a ``free()`` in its
    clean-up, which waits for this rank for ever), or still inside the call it was in
    ``STUCK_GRACE`` seconds later: waiting longer would only delay the end.  (Rank 0
    seen in the call where the error was agreed, just after it, is not stuck: it is on
    its way to tell it.)"""
    from mpi4py import MPI
    boards = []
    for board in _status.boards():
        try:
            if board.comm is comm or _status.same_ranks(board.comm, comm):
                at = MPI.Group.Translate_ranks(comm.Get_group(), [0],
                                               board.comm.Get_group())[0]
                boards.append((board, at))
        except Exception:  # noqa: BLE001 -- a freed board or communicator
            continue
    started = time.monotonic()
    first, left = {}, set()  # per board: the first status read; boards where it left
    while time.monotonic() - started < seconds:
        for i, (board, at) in enumerate(boards):
            try:
                state, desc, _ = board.poll()[at]
            except Exception:  # noqa: BLE001 -- freed meanwhile: wait as without it
                continue
            if state == _status.UNKNOWN:
                continue
            first.setdefault(i, (state, desc))
            if state != _status.IN_CALL:
                left.add(i)
            elif (i in left or first[i] != (state, desc)
                  or time.monotonic() - started >= STUCK_GRACE):
                return _status.describe(state, desc)
        time.sleep(0.05)
    return None


def _interrupted(exc):
    """`` (raised while this rank handled a KeyboardInterrupt: ...)`` when ``exc`` was
    raised while a ``KeyboardInterrupt`` (Ctrl-C, ``kill -INT``) was being handled on
    this rank, e.g. by a clean-up's collective call that the other ranks were not in:
    the interrupt is what came first; else ``""``."""
    seen, link = set(), exc.__context__
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return (" (raised while this rank handled a KeyboardInterrupt: the interrupt "
                    "came first; reaching this rank alone (kill -INT of one process, not "
                    "of mpiexec), or leaving a call halfway here, it put the ranks in "
                    "different calls)")
        seen.add(id(link))
        link = link.__context__
    return ""


def live_count():
    """How many stores this process holds alive."""
    return len(_LIVE_STORES)


def register(store, live):
    """Note a new live store (creation order is the same on every rank), install the
    abort hook at the first one, and warn once when the process was launched without
    ``mpiexec``.  ``live``: each rank's :func:`live_count` before this store (agreed in
    its constructor): a rank whose count reaches :data:`MANY_STORES` with it is told
    once, in one line for all such ranks of the store's communicator, by the first."""
    _LIVE_STORES.append(store)
    install_abort_hook()
    watch_shm()
    _warn_if_alone()
    reach = [r for r, n in enumerate(live) if n + 1 == MANY_STORES]
    if reach and store.rank == reach[0]:  # once, at the count
        where = "" if len(live) == 1 else " (every rank of the store's communicator)" \
            if len(reach) == len(live) else \
            f" ({_collective.format_ranks(reach)} of the store's communicator)"
        logging.getLogger("ddstore").warning(
            f"[ddstore] {live_stores_text()}{where}; a store dropped without free() is not "
            f"freed by the garbage collector (freeing is collective): free() each when "
            f"done, or use `with DDStore(...) as store:`")


#: live stores in one process at which a warning says they are kept (MPI runs out of
#: communicators at about 290 stores: each holds several)
MANY_STORES = 64


def make_core(comm, width, transport):
    """Collective: a store's core (:class:`ddstore._core.Core`); its failure when many
    stores are alive says so.  A failure the core returned alike on every rank (e.g.
    ``transport='shm'`` over a group spanning nodes) is raised through a step's round,
    so it is agreed (told once, rolled back alike); one that may be this rank's alone
    (before the core's communicators exist) is raised as it is."""
    try:
        return _core.Core(comm, width, transport)
    except DDStoreError as exc:
        error, text, first = exc, str(exc), None
        agreed = getattr(exc, "core_agreed", False)
        found = re.match(r"rank (\d+): ", text) if agreed else None
        if found:  # the core's agreement names the first failing rank: the round will
            first, text = int(found[1]), text[found.end():]  # (not "ranks 0, 1: rank 0")
        if isinstance(exc, (DDStoreStateError, DDStoreMemoryError)) and many_stores():
            text = f"{text}; {live_stores_text()}: free() those no longer used"
        if text != str(exc):
            error = type(exc)(text)
        if not agreed:
            raise error from None
    with collective(comm, None):  # every rank is here, with its error
        if first is None or comm.Get_rank() == first:
            raise error from None


def store_comms(core, comm, width, transport):
    """Collective, after the core: a store's status board and its group's communicator
    (``(board, group_comm)``); when MPI cannot make them (out of communicators: alike on
    every rank, as communicators are agreed), the core is freed and the error says how
    many stores are alive."""
    from mpi4py import MPI
    board = None
    try:
        board = _status.Board(comm, shared=transport != "rma")
        return board, comm.Split(comm.Get_rank() // width, comm.Get_rank())
    except MPI.Exception as exc:
        if board is not None:
            board.free()
        core.free()
        raise DDStoreMemoryError(f"DDStore: MPI could not make the store's "
                                 f"communicators ({exc}); {live_stores_text()}: free() "
                                 f"those no longer used") from None


def many_stores():
    """Whether this process holds at least :data:`MANY_STORES` live stores."""
    return len(_LIVE_STORES) >= MANY_STORES


def live_stores_text():
    """How many stores this process holds alive, and what each keeps (messages)."""
    return (f"{len(_LIVE_STORES)} DDStores are alive in this process (each keeps its "
            f"communicators, windows and memory until free() or the end of the job)")


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


def _count(var, text):
    """The number of processes launch variable ``var`` holds; raises
    :class:`DDStoreStateError` naming it when it holds something else."""
    if not (text.isascii() and text.isdigit()):
        raise DDStoreStateError(f"{var}={text!r} in the environment is not a number of "
                                f"processes: unset it, or launch with "
                                f"`mpiexec -n N python script.py`")
    return int(text)


def check_launch(environ=None, world_size=None):
    """Raise :class:`DDStoreStateError` when the launch is not an MPI job of the size its
    launcher meant.  An MPI launcher's own variable (``PMI_SIZE``,
    ``OMPI_COMM_WORLD_SIZE``, ``MV2_COMM_WORLD_SIZE``) is trusted over torch's
    ``WORLD_SIZE`` (a leftover of an earlier ``torchrun`` in the shell): when one of them
    matches ``MPI.COMM_WORLD``, the launch is right whatever ``WORLD_SIZE`` holds.  A
    variable that is consulted and holds no count (``WORLD_SIZE=²``) is refused, named.
    The
    usual failure: ``torchrun --nproc_per_node N script.py`` starts N processes that are
    each an MPI job of one rank (they would wait forever in torch's rendezvous or train
    on disjoint stores).  ``environ`` / ``world_size`` default to ``os.environ`` and
    ``MPI.COMM_WORLD.Get_size()`` (parameters for tests)."""
    environ = os.environ if environ is None else environ
    if world_size is None:
        from mpi4py import MPI
        world_size = MPI.COMM_WORLD.Get_size()
    found = [(v, l, _count(v, t)) for v, l, t in _launch_sizes(environ)
             if v != "WORLD_SIZE"]  # the MPI launchers' own, checked first
    if any(n == world_size for _, _, n in found):  # WORLD_SIZE is not looked at
        bad = [(v, l, n) for v, l, n in found if n != world_size]
    else:
        found = [(v, l, _count(v, t)) for v, l, t in _launch_sizes(environ)]
        bad = [(v, l, n) for v, l, n in found if n != world_size]
    if not bad:
        return
    var, launcher, n = bad[0]
    agree_with = [v for v, _, c in found if c == world_size]
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


_ALONE = {"warned": False}


def _warn_if_alone():
    """Once per process, at the first store: a warning (logger ``ddstore``, which prints
    to stderr unless logging is configured otherwise) when this process is an MPI job of
    one rank that no launcher started: ``python train.py`` trains alone, silently."""
    if _ALONE["warned"]:
        return
    _ALONE["warned"] = True
    if launched_alone():
        logging.getLogger("ddstore").warning(
            f"[ddstore] {_ALONE_TEXT}, so its stores hold all the data here and it works "
            f"alone; to use N processes, {_RUN_TEXT} (told once per process)")


def alone_by_design():
    """Local: this process is a program of one process by design (a benchmark of one
    rank over ``MPI.COMM_SELF``): its stores give no launched-without-``mpiexec``
    warning."""
    _ALONE["warned"] = True


_ALONE_TEXT = "launched without `mpiexec`? this process is an MPI job of one rank"
_RUN_TEXT = "run `mpiexec -n N python script.py`"


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
        return f"; {_ALONE_TEXT}: {_RUN_TEXT}"
    return ""
