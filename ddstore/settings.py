"""The environment settings that shape a store's collective behaviour (the progress
agent, reads by message), read and checked in the constructor's local part and agreed in
its round: :func:`env_settings`, :func:`progress_interval`, :func:`serve_settings`.
(``ddstore.store`` re-exports them.)"""
import os

from . import _core, _lifecycle
from ._checks import is_int
from .errors import DDStoreValueError

__all__ = ["env_settings", "progress_interval", "serve_settings", "copy_settings",
           "prefault_mode",
           "PROGRESS_US", "SERVE_MIN_PIECES", "COPY_MIN_BYTES", "MAX_COPY_THREADS"]

PROGRESS_US = 200  # the progress agent's default period (docs/cluster.md: how chosen)


_PROGRESS = ("auto", "on", "off")  # the progress agent's settings, the default first


def _env_choice(name, choices):
    """Environment variable ``name``: one of ``choices`` (case-insensitive; unset or
    empty: the first), else a :class:`DDStoreValueError` naming them."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower() or choices[0]
    if value not in choices:  # (the value as set: what the user looks for)
        raise DDStoreValueError(f"{name}={raw!r} is not one of {', '.join(choices)} "
                                f"(case and spaces around it ignored)")
    return value


def _env_int(name, default, most, what):
    """Environment variable ``name``: an integer in ``[1, most]`` written in plain ASCII
    decimal digits (unset or empty: ``default``), else a :class:`DDStoreValueError`
    naming the range and the form (``int()`` alone would take ``1_000`` and other
    scripts' digits such as ``٣``)."""
    raw = os.environ.get(name, "")
    text = raw.strip()
    if not text:
        value = default
    elif not (text.isascii() and text.isdigit()):
        value = -1
    else:
        value = int(text)
    if not 1 <= value <= most:
        raise DDStoreValueError(f"{name}={raw!r} must be {what} in [1, {most}], "
                                f"written in plain decimal digits 0-9 (spaces around "
                                f"them are ignored; no sign, underscore or other "
                                f"digits)")
    return value


PREFAULT_ENV = "DDSTORE_PREFAULT"
# the on/off switches' words (:data:`ddstore._lifecycle.SWITCH_ON` / ``SWITCH_OFF``) too
_PREFAULT_MODES = {**dict.fromkeys(_lifecycle.SWITCH_ON, "sync"),
                   **dict.fromkeys(_lifecycle.SWITCH_OFF, "off"),
                   "sync": "sync", "background": "background"}


def prefault_mode(strict=True):
    """How a graph build maps what it made (``ddstore.build.prefault_built``): the
    environment variable ``DDSTORE_PREFAULT``: ``sync`` (default; also ``1``, ``on``,
    ``true``, ``yes``), ``background``, or ``off`` (also ``0``, ``no``, ``false``).
    Another value is a :class:`DDStoreValueError` naming them (the store's constructor
    checks it), or with ``strict=False`` a warning and ``sync`` (a build that has made
    its graph: set after the store was made)."""
    raw = os.environ.get(PREFAULT_ENV, "").strip().lower()
    mode = _PREFAULT_MODES.get(raw)
    if mode is None:
        message = (f"{PREFAULT_ENV}={os.environ[PREFAULT_ENV]!r} is not one of sync (also "
                   f"1, on, true, yes; the default), background, off (also 0, no, false)")
        if strict:
            raise DDStoreValueError(message)
        import warnings
        warnings.warn(f"{message}: using sync", stacklevel=3)
        mode = "sync"
    return mode


def env_settings(progress=None):
    """The environment settings that shape a store's collective behaviour, read (and
    checked) in the constructor's local part and agreed in its round (``same=``: a
    difference between ranks is refused naming the variable, the ranks and the
    values): ``DDSTORE_PROGRESS``, ``DDSTORE_PROGRESS_US``, ``DDSTORE_SERVE``,
    ``DDSTORE_SERVE_MIN_PIECES`` (``DDSTORE_TRANSPORT`` is agreed as ``transport``).
    ``progress``: the constructor's argument, which takes the place of
    ``DDSTORE_PROGRESS`` unless None."""
    _lifecycle.check_rank_settings()  # (this rank's own, checked here: refused at once)
    prefault_mode()
    if progress is None:
        progress = _env_choice("DDSTORE_PROGRESS", _PROGRESS)
    elif progress not in _PROGRESS:
        raise DDStoreValueError(f"progress={progress!r} is not one of "
                                f"{', '.join(map(repr, _PROGRESS))} or None (None: from "
                                f"DDSTORE_PROGRESS)")
    return {"DDSTORE_PROGRESS": progress,
            "DDSTORE_PROGRESS_US": _env_int("DDSTORE_PROGRESS_US", PROGRESS_US,
                                            1_000_000,
                                            "an integer number of microseconds"),
            "DDSTORE_SERVE": _env_choice("DDSTORE_SERVE", ("auto", "off")),
            "DDSTORE_SERVE_MIN_PIECES": _env_int("DDSTORE_SERVE_MIN_PIECES",
                                                 SERVE_MIN_PIECES, 2 ** 62,
                                                 "an integer")}


def progress_interval(core, settings=None):
    """The progress agent's period in microseconds for a store over ``core``, or 0 for
    none.  ``DDSTORE_PROGRESS``: ``auto`` (default: on when a member of this rank's
    group is on another node, as ``MPI_Comm_split_type`` sees nodes: between nodes, or
    with MPICH's ``MPIR_CVAR_NOLOCAL=1``; off inside a node, where MPI reads by shared
    memory or the kernel's process-to-process copy and needs no action of the target,
    even with ``transport="rma"``), ``on`` or ``off`` (networks whose RMA needs no action
    of the target, e.g. RDMA reads: reads of a computing rank then never wait anyway);
    ``DDSTORE_PROGRESS_US``:
    the period (default :data:`PROGRESS_US`).  The agent needs ``MPI_THREAD_MULTIPLE``;
    a lower thread level is refused (local part of the constructor's step)."""
    settings = env_settings() if settings is None else settings
    mode, us = settings["DDSTORE_PROGRESS"], settings["DDSTORE_PROGRESS_US"]
    remote = core.off_node
    if mode == "off" or (mode == "auto" and remote == 0):
        return 0
    from mpi4py import MPI
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        why = (f"this rank's rows are read by {remote} group member(s) on other nodes"
               if mode == "auto" else "the progress agent was asked for "
               "(DDSTORE_PROGRESS=on or progress='on')")
        raise DDStoreValueError(
            f"{why}; the "
            f"progress agent (a thread that lets MPI answer reads of this rank while it "
            f"computes) needs MPI_THREAD_MULTIPLE, but MPI was initialised with thread "
            f"level {MPI.Query_thread()} (< {MPI.THREAD_MULTIPLE}); initialise MPI with "
            f"THREAD_MULTIPLE (mpi4py's default: do not lower mpi4py.rc.thread_level), or "
            f"set DDSTORE_PROGRESS=off or DDStore(progress='off') (then reads of a "
            f"computing rank wait for its next "
            f"MPI call on networks without hardware RMA)")
    return us


SERVE_MIN_PIECES = 4096  # reads by message from this many pieces (docs/cluster.md)


def serve_settings(settings=None):
    """The message path's setting: the least number of pieces (rows or runs of rows) a
    read asks of one member on another node for it to go by message (answered by that
    member's progress agent, which packs the rows), or 0 for never.  ``DDSTORE_SERVE``:
    ``auto`` (default: on wherever the progress agent runs on every member of the
    group) or ``off`` (one-sided gets only: the comparison in docs/cluster.md);
    ``DDSTORE_SERVE_MIN_PIECES``: the threshold (default :data:`SERVE_MIN_PIECES`;
    fewer pieces stay one-sided gets)."""
    settings = env_settings() if settings is None else settings
    mode, pieces = settings["DDSTORE_SERVE"], settings["DDSTORE_SERVE_MIN_PIECES"]
    return 0 if mode == "off" else pieces


COPY_MIN_BYTES = 4 << 20  # reads from this size copy their local pieces in threads
MAX_COPY_THREADS = _core.lib.DDS_MAX_COPY_THREADS  # the C core's bound


def copy_settings():
    """``(threads, min_bytes)``: how a read copies its local pieces (plain loads from this
    rank's memory or a node-local member's), read from the environment in the
    constructor's local part (a bad value is that rank's error, agreed).
    ``DDSTORE_COPY_THREADS``: ``auto`` (default, 0 here: from 1 to 8, the CPUs this
    process is bound to, or, unbound, the node's CPUs divided by the store's ranks on
    it) or an integer in [1, 64] (1:
    every piece copied by the reading thread, as before); ``DDSTORE_COPY_MIN_BYTES``:
    the least output of one read for its copies to be shared among the threads (default
    :data:`COPY_MIN_BYTES`), whose pieces must also average a 1024th of it (4 KiB:
    smaller ones, rows gathered at random, are copied faster by one thread).  A local
    setting: ranks may differ (nothing collective
    depends on it)."""
    text = os.environ.get("DDSTORE_COPY_THREADS", "").strip().lower()
    if text in ("", "auto"):
        threads = 0
    else:
        threads = _env_int("DDSTORE_COPY_THREADS", 1, MAX_COPY_THREADS,
                           "'auto' or an integer number of threads")
    return threads, _env_int("DDSTORE_COPY_MIN_BYTES", COPY_MIN_BYTES, 2 ** 62,
                             "an integer number of bytes")


def store_width(width, size):
    """``width`` as a store over ``size`` ranks takes it (``None``: ``size``, one
    replica; ``"auto"`` kept, resolved at construction), or ``DDStoreValueError``
    naming the widths allowed: the constructor's own check (``DDStore.check_width``),
    for a program to check its command line before it builds anything
    (``ddstore.cli.check_width``).  ``size``: an integer >= 1."""
    if not is_int(size) or size < 1:
        raise DDStoreValueError(f"size must be an integer >= 1 (the number of ranks the "
                                f"store would span), got {size!r}")
    if width is None:
        width = size
    if isinstance(width, str) and width == "auto":
        return width  # resolved from data_nbytes after the ranks agree
    if not is_int(width):
        raise DDStoreValueError(f"width must be None (one group of all ranks), 'auto' or "
                                f"an integer in [1, {size}] dividing the communicator "
                                f"size {size}, got {width!r}")
    width = int(width)
    if not 1 <= width <= size:
        raise DDStoreValueError(f"width={width} out of range: allowed 1 <= width <= {size} "
                                f"(the communicator size){_lifecycle.single_rank_hint(size)}")
    if size % width:
        divisors = [d for d in range(1, size + 1) if size % d == 0]
        raise DDStoreValueError(f"width={width} does not divide the communicator size "
                                f"{size}; allowed widths: {divisors}")
    return width


def store_settings(size, width, transport):
    """A store's ``(width, transport)`` over ``size`` ranks with the defaults filled in
    (the transport from ``DDSTORE_TRANSPORT`` where ``"auto"``); raises on a bad one."""
    width = store_width(width, size)
    if transport == "auto":
        raw = os.environ.get("DDSTORE_TRANSPORT", "")
        transport = raw.strip().lower() or "auto"
        if transport not in _core.TRANSPORTS:
            raise DDStoreValueError(f"DDSTORE_TRANSPORT={raw!r} is not one of "
                                    f"{sorted(_core.TRANSPORTS)} (case and spaces around "
                                    f"it ignored)")
    if not isinstance(transport, str) or transport not in _core.TRANSPORTS:
        raise DDStoreValueError(f"transport={transport!r} is not one of "
                                f"{sorted(_core.TRANSPORTS)} ('auto': from "
                                f"DDSTORE_TRANSPORT)")
    return width, transport
