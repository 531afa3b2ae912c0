"""The public store object, :class:`DDStore`.

A DDStore keeps datasets in the memory of the ranks of an MPI communicator.  Ranks form
groups of ``width`` consecutive ranks (``comm.size // width`` groups, called replicas);
each group holds one full copy of every variable, striped over its members.  The global
row space of a variable is the concatenation of the members' chunks in group-rank order;
any rank can read any row of that space, always from a member of its own group.

Reads are one-sided: ``get``/``get_batch``/``get_range``/``get_records`` need no action
from the owner of the rows, so ranks can read at different paces.  Calls that create or
synchronise data (``add``, ``init``, ``sync``, ``add_records``, ``free``) are collective
over the whole communicator: every rank calls them, in the same order.
"""
import atexit
import math
import numbers
import os
import socket
import sys
import time

import numpy as np

from . import _core
from ._collective import agree, is_agreed
from .errors import (DDStoreError, DDStoreIndexError, DDStoreMemoryError,
                     DDStoreStateError, DDStoreValueError)

__all__ = ["DDStore", "partition", "as_indices", "as_int", "abort_on_exception",
           "available_memory", "MEMORY_BUDGET_FRACTION"]

# default memory budget per rank: this fraction of the node's available memory, divided
# by the ranks of the communicator on that node (the rest is left for the interpreter,
# torch, batches and transient buffers)
MEMORY_BUDGET_FRACTION = 0.7

# batches up to this length given as lists of ints skip the numpy index array
_SHORT_BATCH = 16
# dtype kinds that are plain fixed-size values and can be stored as raw bytes
_STORABLE_KINDS = "biufcmM"


def partition(total, parts, index):
    """The balanced split used everywhere: ``(start, stop)`` of part ``index``.

    ``total`` items split in ``parts`` contiguous parts whose sizes differ by at most one,
    the larger parts first.  Example: ``partition(10, 3, i)`` gives (0, 4), (4, 7), (7, 10).
    """
    for label, value in (("total", total), ("parts", parts), ("index", index)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise DDStoreValueError(f"partition: {label} must be an integer, got {value!r}")
    total, parts, index = int(total), int(parts), int(index)
    if total < 0:
        raise DDStoreValueError(f"partition: total={total} must be >= 0")
    if parts < 1:
        raise DDStoreValueError(f"partition: parts={parts} must be >= 1")
    if not 0 <= index < parts:
        raise DDStoreIndexError(f"partition: index={index} out of range [0, {parts})")
    base, rem = divmod(total, parts)
    start = index * base + min(index, rem)
    return start, start + base + (1 if index < rem else 0)


def as_indices(indices, what, limit=None):
    """``indices`` (a sequence, numpy array or CPU tensor of integers) as a C-contiguous
    1-D int64 array, without a copy when it already is one; ``what`` names the caller
    in the error raised for anything else.  Values beyond the int64 range raise a
    :class:`DDStoreIndexError` that shows them as given (``limit``, if known, is named as
    the bound).  Other ranges are the caller's to check."""
    if (type(indices) is np.ndarray and indices.dtype == np.int64 and
            indices.ndim == 1 and indices.flags.c_contiguous):
        return indices  # the common case, without copies
    try:
        idx = np.asarray(indices)
    except Exception as exc:  # ragged nesting and the like
        raise DDStoreValueError(f"{what}: indices must be a 1-D sequence of integers "
                                f"({type(exc).__name__}: {exc})") from None
    if idx.size == 0:
        return np.zeros(0, dtype=np.int64)
    # integers beyond int64: numpy makes them uint64, float64 (mixed with negatives) or
    # object; look at the values as given
    if idx.ndim == 1 and (idx.dtype == np.uint64 or (
            idx.dtype.kind in "fO" and isinstance(indices, (list, tuple)))):
        values = idx.tolist() if idx.dtype == np.uint64 else list(indices)
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
               for v in values):
            values = [int(v) for v in values]
            top = np.iinfo(np.int64)
            pos = next((p for p, v in enumerate(values) if not top.min <= v <= top.max),
                       None)
            if pos is not None:
                bound = f" [0, {limit})" if limit is not None else " (beyond int64)"
                raise DDStoreIndexError(f"{what}: index {values[pos]} (position {pos}) "
                                        f"out of range{bound}")
            return np.array(values, dtype=np.int64)
    if idx.dtype.kind not in "iu" or idx.ndim != 1:
        raise DDStoreValueError(f"{what}: indices must be a 1-D sequence of integers, got "
                                f"dtype {idx.dtype} shape {idx.shape}")
    return np.ascontiguousarray(idx, dtype=np.int64)


def available_memory():
    """Bytes this node can still give to a store now: the smaller of the kernel's
    ``MemAvailable`` and the free space of ``/dev/shm`` (MPI allocates shared windows
    there), the same measure the C core checks every allocation against."""
    limit = None
    try:
        st = os.statvfs("/dev/shm")
        limit = st.f_bavail * st.f_frsize
    except OSError:  # pragma: no cover - no /dev/shm
        pass
    avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except OSError:  # pragma: no cover - not Linux
        pass
    if avail is None:
        try:
            import psutil
            avail = int(psutil.virtual_memory().available)
        except ImportError:  # pragma: no cover
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(avail if limit is None else min(limit, avail))


def _check_nbytes(nbytes, what="nbytes"):
    """(error or None, int value)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral) or nbytes < 0:
        return (DDStoreValueError, f"{what}={nbytes!r} must be an integer number of bytes "
                                   f">= 0"), None
    return None, int(nbytes)


def _check_budget(budget):
    """(error or None, float value or None)."""
    if budget is None:
        return None, None
    if (isinstance(budget, bool) or not isinstance(budget, numbers.Real)
            or not math.isfinite(budget) or budget <= 0):
        return (DDStoreValueError, f"memory_budget={budget!r} must be a positive finite "
                                   f"number of bytes per rank (or None for "
                                   f"{MEMORY_BUDGET_FRACTION} x the node's available memory "
                                   f"/ ranks on the node)"), None
    return None, float(budget)


def _memory_settings(width, data_nbytes, memory_budget, what="data_nbytes"):
    """Local checks of the memory arguments: (error, nbytes, (budget, host, available))
    where the last two are None when no data size is given."""
    from mpi4py import MPI
    if data_nbytes is None:
        if width == "auto":
            return (DDStoreValueError, "width='auto' needs data_nbytes= (the bytes of data "
                                       "that will be added), or choose a width with "
                                       "DDStore.plan(nbytes)"), None, None
        if memory_budget is not None:
            return (DDStoreValueError, f"memory_budget={memory_budget!r} needs "
                                       f"data_nbytes= (the bytes of data it is checked "
                                       f"against)"), None, None
        return None, None, None
    error, nbytes = _check_nbytes(data_nbytes, what)
    if error is None:
        error, budget = _check_budget(memory_budget)
    if error is not None:
        return error, None, None
    return None, nbytes, (budget, MPI.Get_processor_name(), available_memory())


def _gb(nbytes):
    return f"{nbytes / 1e9:.4g} GB"


def _agreed_budget(infos):
    """The memory budget per rank every rank uses: the smallest over the ranks of each
    rank's own budget (given, or the default from its node's available memory).
    ``infos``: per rank ``(budget or None, host, available bytes)``."""
    per_host = {}
    for _, host, _ in infos:
        per_host[host] = per_host.get(host, 0) + 1
    budgets = [b if b is not None else MEMORY_BUDGET_FRACTION * avail / per_host[host]
               for b, host, avail in infos]
    r = int(np.argmin(budgets))
    given = infos[r][0] is not None
    how = (f"memory_budget={_gb(budgets[r])} (given, rank {r})" if given else
           f"memory budget {_gb(budgets[r])} per rank ({MEMORY_BUDGET_FRACTION} x "
           f"{_gb(infos[r][2])} available on rank {r}'s node / {per_host[infos[r][1]]} "
           f"ranks there)")
    return budgets[r], how


def _plan_width(size, nbytes, budget, how):
    """(error or None, width): the smallest width dividing ``size`` whose per-rank share
    ``ceil(nbytes / width)`` fits ``budget``."""
    for w in range(1, size + 1):
        if size % w == 0 and -(-nbytes // w) <= budget:
            return None, w
    return (DDStoreMemoryError,
            f"{_gb(nbytes)} of data does not fit: even at width={size} (the communicator "
            f"size) each rank holds {_gb(-(-nbytes // size))}, more than the {how}; use "
            f"more ranks (or nodes), or a larger memory_budget"), None


class _Var:
    __slots__ = ("name", "vid", "dtype", "row_shape", "n_local", "nrows")

    def __init__(self, name, vid, dtype, row_shape, n_local, nrows):
        self.name, self.vid, self.dtype = name, vid, dtype
        self.row_shape, self.n_local, self.nrows = row_shape, n_local, nrows


class _Records:
    __slots__ = ("name", "keys", "fields", "offsets", "nrecords", "start", "n_local")

    def __init__(self, name, keys, fields, offsets, start, n_local):
        self.name, self.keys, self.fields = name, keys, fields
        self.offsets, self.nrecords = offsets, offsets.shape[0] - 1
        self.start, self.n_local = start, n_local


# Stores not yet freed, in creation order (the same on every rank).  Held here so that
# freeing, which is collective, never depends on when each rank's garbage collector drops
# an object: a DDStore dropped without free() keeps its memory until exit.
_LIVE_STORES = []


@atexit.register
def _free_live_stores():
    """Free live stores at a clean interpreter exit (collective, newest first, each
    through the agreement of :meth:`DDStore.free`).

    When an uncaught exception is ending this rank (and the abort hook is switched off),
    or ``python -m mpi4py`` is about to abort the job (``sys.exit(n)`` with ``n != 0``
    under it), the other ranks are not exiting with it, so a collective free would wait
    for them forever: then the windows are left to MPI_Abort / MPI_Finalize and the
    operating system instead.
    """
    if (not _LIVE_STORES or getattr(sys, "last_value", None) is not None
            or _ABORT["status"]):
        return
    from mpi4py import MPI
    if MPI.Is_finalized():
        return
    while _LIVE_STORES:
        store = _LIVE_STORES[-1]
        try:
            store.free()
        except DDStoreError as exc:  # out of step with another rank: nothing to wait for
            sys.stderr.write(f"[ddstore] rank {store.rank}: store not freed at exit: "
                             f"{exc}\n")
            if store in _LIVE_STORES:
                _LIVE_STORES.remove(store)


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
        try:
            sys.stdout.flush()
            sys.stderr.write(f"[ddstore] rank {MPI.COMM_WORLD.Get_rank()}: uncaught "
                             f"{exc_type.__name__}; aborting the MPI job (see "
                             f"ddstore.abort_on_exception)\n")
            sys.stderr.flush()
            # the launcher forwards output asynchronously and stops forwarding when the
            # job is aborted: give it a moment to pass the traceback on
            time.sleep(0.5)
        finally:
            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = _ddstore_excepthook

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


def as_int(value, what):
    """``value`` as a Python int if it is an integer (Python or numpy, not bool); a
    :class:`DDStoreValueError` naming ``what`` and the value otherwise (floats are never
    truncated)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise DDStoreValueError(f"{what} must be an integer, got {value!r}")


class DDStore:
    """A distributed in-memory data store over an MPI communicator.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm, optional
        The communicator (default ``MPI.COMM_WORLD``); it is duplicated internally.
    width : int, optional
        Ranks per group.  ``None`` (default) makes one group of all ranks (least memory:
        each rank holds ``1/size`` of the data).  Smaller widths keep ``size // width``
        replicas (more memory) and confine reads to fewer peers (less contention).
        Must divide ``comm.size``.  ``"auto"``: the smallest width that divides
        ``comm.size`` and whose per-rank share ``ceil(data_nbytes / width)`` fits the
        memory budget (see :meth:`plan`); needs ``data_nbytes``.
    transport : {"auto", "rma", "shm"}
        How rows of other members are read: ``"auto"`` reads node-local members through
        MPI-3 shared memory (plain loads, no action of the owner) and the others with
        ``MPI_Get``; ``"rma"`` always uses ``MPI_Get`` (this tests the inter-node path on
        one machine); ``"shm"`` requires every member of a group to share a node.  When
        ``transport`` is ``"auto"``, the environment variable ``DDSTORE_TRANSPORT``
        (auto/rma/shm) replaces it.
    data_nbytes : int, optional
        Bytes of data (one replica) that will be added to the store.  When given, the
        store checks up front that each rank's share at the chosen width fits the memory
        budget and raises :class:`DDStoreMemoryError` (on every rank, before anything is
        allocated) if it does not.  Required with ``width="auto"``.
    memory_budget : float, optional
        Bytes per rank the store may use (a positive number; only with ``data_nbytes``).
        Default: ``MEMORY_BUDGET_FRACTION`` (0.7) x the node's available memory
        (:func:`available_memory`) / the ranks of ``comm`` on that node.  Ranks agree on
        the smallest budget of any rank.

    Construction is collective.  Attributes: ``rank``, ``size`` (of ``comm``),
    ``width``, ``group_rank`` (0 .. width-1), ``group_size`` (= width), ``replicas``
    (number of groups), ``group`` (index of this rank's group), ``transport``,
    ``shm_peers`` (other group members this rank reads through shared memory),
    ``memory_budget`` (the agreed budget per rank in bytes, or None without
    ``data_nbytes``).

    Use it as a context manager, or call :meth:`free` (collective) when done; live stores
    are freed at interpreter exit.
    """

    def __init__(self, comm=None, width=None, transport="auto", *, data_nbytes=None,
                 memory_budget=None):
        from mpi4py import MPI
        if comm is None:
            comm = MPI.COMM_WORLD
        size = comm.Get_size()
        error, width, transport = self._check_settings(size, width, transport)
        nbytes, memory = None, None
        if error is None:
            error, nbytes, memory = _memory_settings(width, data_nbytes, memory_budget)
        # agree before raising: a rank whose arguments differ must not leave the others
        # waiting in the next collective call
        settings = agree(comm, ("DDStore", None), error, extra=memory,
                         same={"width": width, "transport": transport,
                                 "data_nbytes": nbytes})
        self.memory_budget = None
        if nbytes is not None:  # the same decision on every rank, from gathered values
            budget, how = _agreed_budget(settings)
            if width == "auto":
                err, width = _plan_width(size, nbytes, budget, how)
                if err is not None:
                    raise err[0](err[1])
            elif -(-nbytes // width) > budget:
                err, fits = _plan_width(size, nbytes, budget, how)
                hint = (f"width={fits} (or width='auto') fits" if err is None else
                        "no width fits on this many ranks")
                raise DDStoreMemoryError(
                    f"width={width}: each rank would hold {_gb(-(-nbytes // width))} of "
                    f"the {_gb(nbytes)} of data (data_nbytes={nbytes}), more than the "
                    f"{how}; {hint}")
            self.memory_budget = budget
        self._core = _core.Core(comm, width, transport)
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = size
        self.width = width
        self.transport = transport
        self.group_size = self._core.group_size
        self.group_rank = self._core.group_rank
        self.replicas = self._core.ngroups
        self.shm_peers = self._core.shm_peers
        self.group = self.rank // width
        self._group_comm = comm.Split(self.group, self.rank)
        self._read_range = self._core.range_reader()
        self._read_rows = self._core.rows_reader()
        self._vars = {}
        self._records = {}
        _LIVE_STORES.append(self)
        _install_abort_hook()

    @staticmethod
    def _check_settings(size, width, transport):
        """(error or None, width, transport) with the defaults filled in."""
        if width is None:
            width = size
        if isinstance(width, str) and width == "auto":
            pass  # resolved from data_nbytes after the ranks agree
        elif isinstance(width, bool) or not isinstance(width, (int, np.integer)):
            return (DDStoreValueError, f"width must be 'auto' or an integer in [1, {size}] "
                                       f"dividing the communicator size {size}, got "
                                       f"{width!r}"), None, transport
        else:
            width = int(width)
            if not 1 <= width <= size:
                return (DDStoreValueError, f"width={width} out of range: allowed 1 <= "
                                           f"width <= {size} (the communicator size)"), \
                    width, transport
        if width != "auto" and size % width:
            divisors = [d for d in range(1, size + 1) if size % d == 0]
            return (DDStoreValueError, f"width={width} does not divide the communicator "
                                       f"size {size}; allowed widths: {divisors}"), \
                width, transport
        if transport == "auto":
            transport = os.environ.get("DDSTORE_TRANSPORT", "auto").strip().lower() or "auto"
        if transport not in _core.TRANSPORTS:
            return (DDStoreValueError, f"transport={transport!r} is not one of "
                                       f"{sorted(_core.TRANSPORTS)} (argument or "
                                       f"DDSTORE_TRANSPORT)"), width, transport
        return None, width, transport

    @staticmethod
    def plan(nbytes, memory_budget=None, comm=None):
        """Collective over ``comm`` (default ``MPI.COMM_WORLD``): the width for
        ``nbytes`` of data (one replica) under a memory budget.

        Returns the smallest width that divides ``comm.size`` and whose per-rank share
        ``ceil(nbytes / width)`` is at most the budget: the most replicas (fewest peers
        per read) that fit.  ``memory_budget`` is bytes per rank (a positive number);
        default ``MEMORY_BUDGET_FRACTION`` (0.7) x the node's available memory (see
        :func:`available_memory`) / the ranks of ``comm`` on that node.  Every rank gets
        the same answer: the budget used is the smallest of any rank's.  Raises
        :class:`DDStoreMemoryError` on every rank when even ``width = comm.size`` does
        not fit, :class:`DDStoreValueError` for a bad ``nbytes``/``memory_budget`` on any
        rank or an ``nbytes`` that differs between ranks.  ``DDStore(comm, width="auto",
        data_nbytes=nbytes, memory_budget=...)`` applies the same rule.
        """
        from mpi4py import MPI
        if comm is None:
            comm = MPI.COMM_WORLD
        error, nb, memory = _memory_settings("auto", nbytes, memory_budget,
                                             what="nbytes")
        memories = agree(comm, ("DDStore.plan", None), error, extra=memory,
                         same={"nbytes": nb})
        budget, how = _agreed_budget(memories)
        err, width = _plan_width(comm.Get_size(), nb, budget, how)
        if err is not None:
            raise err[0](err[1])
        return width

    # ------------------------------------------------------------------ lifecycle
    def free(self):
        """Collective: release every window.  Safe to call twice; any other call on the
        store afterwards raises :class:`DDStoreStateError`.

        Checked like every collective call: a rank that calls ``free`` while another is
        in a different collective call (``add``, a dataset constructor...) raises a
        :class:`DDStoreValueError` on every rank instead of waiting, and the store stays
        as it was."""
        core = getattr(self, "_core", None)
        if core is None or not core.alive:
            return
        from mpi4py import MPI
        if not MPI.Is_finalized():
            self._agreement(("free", None))
            try:
                self._group_comm.Free()
            except Exception:  # pragma: no cover
                pass
        core.free()
        if self in _LIVE_STORES:
            _LIVE_STORES.remove(self)
        self._vars.clear()
        self._records.clear()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        """Leaving ``with DDStore(...)``: free collectively when the block ended normally
        or with an error that every rank raised together (an agreed
        :class:`DDStoreError`).  Any other exception is this rank's alone: the other
        ranks are not leaving the block, so no collective call is started; the
        exception goes on, and uncaught it ends the job (see
        :func:`abort_on_exception`)."""
        if exc is None or is_agreed(exc):
            self.free()
        return False

    @property
    def freed(self):
        return not self._core.alive

    def _alive(self):
        if not self._core.alive:
            raise DDStoreStateError("this DDStore has been freed; create a new one")

    # ------------------------------------------------------------------ agreement
    def agree(self, error=None, call=None, *, extra=None, same=None):
        """Collective: the agreement every collective call starts with, for layers built
        on the store (see :mod:`ddstore._collective`).

        ``error`` is None, an exception, or ``(exception class, message)``; if any rank
        passes one, every rank raises a :class:`DDStoreError` naming the failing ranks
        (a foreign exception becomes a :class:`DDStoreValueError`).  Layers that do local
        work inside a collective step (reading a file, filling a chunk) call this before
        the next collective call, so that a failure on one rank becomes an error on all
        ranks instead of a hang.

        ``call`` (e.g. ``("GraphDataset.from_adios", name)``) names the collective step
        this rank is in; if ranks name different steps (a different name, or calls made
        in a different order) every rank raises a :class:`DDStoreValueError` naming the
        ranks and their calls, before anything is created.  A layer's collective call
        passes its ``call`` in its first agreement; later steps of the same call pass
        None.

        ``same``: a setting that must be equal on every rank (raises naming the ranks and
        their values otherwise).  Returns every rank's ``extra``, in rank order.
        """
        return self._agreement(call, error, extra, same)

    def _agreement(self, call, error=None, extra=None, same=None):
        self._alive()
        return agree(self.comm, call, error, extra, same)

    def _var(self, name):
        self._alive()
        var = self._vars.get(name)
        if var is None:
            known = sorted(self._vars) + sorted(self._records)
            if name in self._records:
                raise DDStoreValueError(f"variable {name!r} holds records: use "
                                        f"get_records()")
            raise DDStoreValueError(f"unknown variable {name!r}; known: {known}")
        return var

    def _name_error(self, name):
        if not isinstance(name, str) or not name:
            return DDStoreValueError, f"variable name must be a non-empty str, got {name!r}"
        if name in self._vars or name in self._records:
            return DDStoreValueError, f"variable {name!r} already exists"
        return None

    @staticmethod
    def _dtype_error(name, dtype):
        if dtype.kind not in _STORABLE_KINDS or dtype.fields is not None:
            return DDStoreValueError, (
                f"variable {name!r}: dtype {dtype} cannot be stored; allowed: bool, "
                f"int8-int64, uint8-uint64, float16-float64, complex (no object, string "
                f"or structured dtypes)")
        return None

    def _create(self, name, n_local, dtype, row_shape):
        """Collective: allocate a variable whose metadata all ranks have agreed on."""
        row_bytes = int(dtype.itemsize * int(np.prod(row_shape, dtype=np.int64)))
        vid = self._core.add(name, n_local, row_bytes)
        return _Var(name, vid, dtype, tuple(row_shape), n_local, self._core.nrows(vid))

    def _agree_layout(self, op, name, error, dtype, row_shape):
        """Collective: every rank is in ``op(name)``, checks its local error, and the
        (dtype, row shape) agree."""
        self._agreement((op, name), error, same=None if dtype is None else {
            "dtype": str(dtype), "row shape": tuple(row_shape)})

    # ------------------------------------------------------------------ writing
    def add(self, name, rows):
        """Collective: add variable ``name`` with this rank's chunk ``rows``.

        ``rows`` is an array ``[n_local, *row_shape]``; ``n_local`` may differ between
        ranks and may be 0; dtype and row shape must be the same on every rank.  The
        variable's global rows (within each group) are the members' chunks concatenated in
        group-rank order.  The data is copied into the store and visible to every rank
        when ``add`` returns.
        """
        self._alive()
        error = self._name_error(name)
        arr = None
        if error is None:
            try:
                arr = rows if isinstance(rows, np.ndarray) else np.asarray(rows)
            except Exception as exc:  # ragged lists...: agree below, do not hang
                arr, error = None, (DDStoreValueError, f"variable {name!r}: rows are not "
                                                       f"an array ({exc})")
        if error is None:
            error = self._dtype_error(name, arr.dtype)
            if error is None and arr.ndim < 1:
                error = (DDStoreValueError,
                         f"variable {name!r}: rows must have at least one dimension "
                         f"[n_local, *row_shape], got a scalar")
        ok = error is None
        self._agree_layout("add", name, error, arr.dtype if ok else None,
                           arr.shape[1:] if ok else None)
        var = self._create(name, arr.shape[0], arr.dtype, arr.shape[1:])
        self._vars[name] = var
        if arr.shape[0]:
            self._core.write_local(var.vid, 0, np.ascontiguousarray(arr))
        self._core.sync()

    def init(self, name, n_local, row_shape=(), dtype=np.float32):
        """Collective: create variable ``name`` with room for ``n_local`` local rows.

        Fill it with :meth:`update` (in pieces, without a second copy), then call
        :meth:`sync` before anyone reads.  Contents are undefined until written.
        """
        self._alive()
        error = self._name_error(name)
        dt = None
        shape = None
        if error is None:
            try:
                dt = np.dtype(dtype)
                shape = tuple(as_int(s, "row_shape entry") for s in (
                    row_shape if np.iterable(row_shape) else (row_shape,)))
            except (TypeError, ValueError) as exc:
                error = (DDStoreValueError, f"variable {name!r}: bad dtype or row_shape: "
                                            f"{exc}")
        if error is None:
            error = self._dtype_error(name, dt)
        if error is None and any(s < 0 for s in shape):
            error = DDStoreValueError, f"variable {name!r}: row_shape {shape} is negative"
        if error is None and (isinstance(n_local, bool) or
                              not isinstance(n_local, (int, np.integer)) or n_local < 0):
            error = (DDStoreValueError,
                     f"variable {name!r}: n_local={n_local!r} must be an integer >= 0")
        ok = error is None
        self._agree_layout("init", name, error, dt if ok else None,
                           shape if ok else None)
        self._vars[name] = self._create(name, int(n_local), dt, shape)

    def update(self, name, rows, offset=0):
        """Local: write ``rows`` into this rank's chunk at local row ``offset``.

        Other ranks see the new rows after the next collective :meth:`sync`.  ``rows``
        must have the variable's row shape and a dtype castable to it (same kind).
        """
        var = self._var(name)
        arr = np.asarray(rows)
        if arr.shape[1:] != var.row_shape:
            raise DDStoreValueError(f"update {name!r}: rows have row shape {arr.shape[1:]},"
                                    f" the variable has {var.row_shape}")
        if arr.dtype != var.dtype:
            if not np.can_cast(arr.dtype, var.dtype, "same_kind"):
                raise DDStoreValueError(f"update {name!r}: dtype {arr.dtype} cannot be "
                                        f"cast to the variable's dtype {var.dtype}")
            arr = arr.astype(var.dtype)
        offset = as_int(offset, f"update {name!r}: offset")
        if offset < 0 or offset + arr.shape[0] > var.n_local:
            raise DDStoreIndexError(
                f"update {name!r}: rows [{offset}, {offset + arr.shape[0]}) outside the "
                f"local chunk [0, {var.n_local})")
        if arr.shape[0]:
            self._core.write_local(var.vid, offset, np.ascontiguousarray(arr))

    def sync(self):
        """Collective: make every rank's :meth:`update` writes visible to all readers."""
        self._agreement(("sync", None))
        self._core.sync()

    def remove(self, name):
        """Collective: drop variable (or records) ``name`` and free its memory; the name
        can then be added again."""
        self._alive()
        error = None
        if name not in self._vars and name not in self._records:
            error = (DDStoreValueError, f"unknown variable {name!r}; known: "
                                        f"{self.variables()}")
        self._agreement(("remove", name), error)
        if name in self._records:
            for var in self._records.pop(name).fields.values():
                self._core.remove(var.vid)
        else:
            self._core.remove(self._vars.pop(name).vid)

    # ------------------------------------------------------------------ reading
    # Every read checks its ranges before it allocates anything.  Single-row reads are
    # the hot path (code written for other systems reads one sample per call): the core
    # checks the range, Python only turns a failure into a message.
    def _check_indices(self, what, name, idx, limit):
        if idx.size:
            low, high = int(idx.min()), int(idx.max())
            if low < 0 or high >= limit:
                bad = low if low < 0 else high
                pos = int(np.flatnonzero(idx == bad)[0])
                raise DDStoreIndexError(f"{what} {name!r}: index {bad} (position {pos}) "
                                        f"out of range [0, {limit})")

    def _lookup(self, name):
        """The variable's metadata: one dict lookup on the hot path, messages otherwise."""
        try:
            return self._vars[name]
        except (KeyError, TypeError):
            return self._var(name)

    def get(self, name, index, out=None):
        """Local: global row ``index`` of variable ``name``.

        Returns a new array of the row shape (a numpy scalar for 0-d rows), or fills and
        returns ``out`` (a C-contiguous writable array of the row's shape and dtype), which
        allocates nothing.  ``index`` must be an integer in ``[0, nrows)``.
        """
        try:
            var = self._vars[name]
        except (KeyError, TypeError):
            var = self._var(name)  # raises: unknown name, records, freed store
        if type(index) is not int:
            index = as_int(index, f"get {name!r}: index")
        buf = (np.empty(var.row_shape, var.dtype) if out is None else
               self._out(var, var.row_shape, out))
        try:
            self._read_range(var.vid, index, 1, buf)
        except (DDStoreIndexError, OverflowError):
            raise DDStoreIndexError(f"get {name!r}: index {index} out of range "
                                    f"[0, {var.nrows})") from None
        return buf if (out is not None or var.row_shape) else buf[()]

    def get_batch(self, name, indices, out=None):
        """Local: rows ``indices`` of ``name``, in request order, as ``[len, *row_shape]``.

        Indices may repeat and may belong to any members of the group; every remote row
        is fetched in one access epoch with one flush per target.  ``out``, if given, must
        be a C-contiguous writable array of the right dtype and shape; it is filled and
        returned.
        """
        try:
            var = self._vars[name]
        except (KeyError, TypeError):
            var = self._var(name)  # raises: unknown name, records, freed store
        # a short list of Python ints (what per-sample code passes) goes to the core as
        # it is; anything else becomes an int64 array first
        t = type(indices)
        if (t is list or t is tuple) and 0 < len(indices) <= _SHORT_BATCH and all(
                type(i) is int for i in indices):
            buf = (np.empty((len(indices),) + var.row_shape, var.dtype) if out is None
                   else self._out(var, (len(indices),) + var.row_shape, out))
            try:
                self._read_rows(var.vid, indices, buf)
                return buf
            except (DDStoreIndexError, OverflowError):
                pass  # explained below, with the position of the bad index
        idx = as_indices(indices, f"get_batch {name!r}", var.nrows)
        n = idx.shape[0]
        out = (np.empty((n,) + var.row_shape, dtype=var.dtype) if out is None else
               self._out(var, (n,) + var.row_shape, out))
        if n:
            try:  # the core checks every index; explain a failure in user terms
                self._core.read(var.vid, idx, None, out)
            except DDStoreIndexError:
                self._check_indices("get_batch", name, idx, var.nrows)
                raise
        return out

    def get_range(self, name, start, count, out=None):
        """Local: ``count`` consecutive global rows from ``start`` (may span owners), as
        ``[count, *row_shape]``; ``out`` as in :meth:`get_batch`."""
        var = self._lookup(name)
        if type(start) is not int:
            start = as_int(start, f"get_range {name!r}: start")
        if type(count) is not int:
            count = as_int(count, f"get_range {name!r}: count")
        if count < 0:
            raise DDStoreValueError(f"get_range {name!r}: count={count} must be >= 0")
        if start < 0 or start + count > var.nrows:
            raise DDStoreIndexError(f"get_range {name!r}: rows [{start}, {start + count}) "
                                    f"out of range [0, {var.nrows})")
        shape = (count,) + var.row_shape
        out = self._alloc(var, shape, f"get_range {name!r}") if out is None else \
            self._out(var, shape, out)
        if count:
            self._read_range(var.vid, start, count, out)
        return out

    def read_ranges(self, name, starts, counts, out=None, per_row_lock=False):
        """Local: row ranges ``[starts[i], starts[i] + counts[i])`` packed in order.

        The general read that ``get_batch`` and ``get_range`` are special cases of (used
        by the graph and spatiotemporal layers).  Every range is checked (without
        overflow) before the result is allocated.  ``per_row_lock`` reads each row in its
        own lock/get/unlock epoch: the slow path, for benchmarks only (not thread-safe).
        """
        var = self._lookup(name)
        what = f"read_ranges {name!r}"
        starts = as_indices(starts, what, var.nrows)
        counts = as_indices(counts, what, var.nrows)
        if starts.shape != counts.shape:
            raise DDStoreValueError(f"{what}: {len(starts)} starts but {len(counts)} "
                                    f"counts")
        total = self._core.ranges_total(var.vid, starts, counts) if len(starts) else 0
        shape = (total,) + var.row_shape
        out = self._alloc(var, shape, what) if out is None else self._out(var, shape, out)
        if len(starts):
            self._core.read(var.vid, starts, counts, out,
                            _core.READ_PER_ROW_LOCK if per_row_lock else 0)
        return out

    @staticmethod
    def _alloc(var, shape, what):
        try:
            return np.empty(shape, dtype=var.dtype)
        except MemoryError:
            nbytes = int(np.prod(shape, dtype=np.float64)) * var.dtype.itemsize
            raise DDStoreMemoryError(f"{what}: the result ({shape[0]} rows, "
                                     f"{nbytes / 1e9:.4g} GB) cannot be allocated") from None

    def _out(self, var, shape, out):
        if not isinstance(out, np.ndarray):
            raise DDStoreValueError(f"out for {var.name!r} must be a numpy array, got "
                                    f"{type(out).__name__}")
        if out.dtype != var.dtype or out.shape != shape:
            raise DDStoreValueError(f"out for {var.name!r} has dtype {out.dtype} shape "
                                    f"{out.shape}; needs dtype {var.dtype} shape {shape}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise DDStoreValueError(f"out for {var.name!r} must be C-contiguous and "
                                    f"writable")
        return out

    # ------------------------------------------------------------------ records
    def add_records(self, name, samples):
        """Collective: add variable-size records; ``samples`` is this rank's chunk.

        Each sample is a dict of arrays with the same keys, dtypes and trailing shapes
        (on every rank) and a first dimension that varies (0 allowed).  Each key is stored
        as one raw array of the concatenated rows plus an offsets table that every rank
        keeps, so locating a record needs no communication and reading one runs no code
        (no pickle).  Ranks may hold 0 samples, but at least one rank must hold one.
        Holds one key's rows twice while copying them in; to load more than that, use
        :meth:`init_records` and fill block by block.
        """
        self._alive()
        error = self._name_error(name)
        schema = None
        if error is None:
            try:
                schema, error = _record_schema(name, samples)
            except Exception as exc:  # a sample numpy cannot read: agree, do not hang
                error = (DDStoreValueError, f"records {name!r}: {type(exc).__name__}: {exc}")
        info = self._agreement(("add_records", name), error, schema)
        schemas = [(r, s) for r, s in enumerate(info) if s is not None]
        if not schemas:
            raise DDStoreValueError(f"records {name!r}: no rank holds any sample (empty "
                                    f"data set)")
        schema = _same_schema(name, schemas)
        counts = np.array([[np.shape(s[k])[0] for k, _, _ in schema] for s in samples],
                          dtype=np.int64).reshape(len(samples), len(schema))
        self._create_records(name, schema, counts)
        for j, (key, dstr, trailing) in enumerate(schema):
            if counts[:, j].sum():
                data = np.concatenate([np.asarray(s[key]) for s in samples])
                self._write_field(self._records[name].fields[key], 0, data)
                del data
        self._core.sync()

    def init_records(self, name, schema, sizes):
        """Collective: create records ``name`` for this rank's chunk without their data:
        fill it with :meth:`update_records` (block by block, no second copy of the
        chunk), then call :meth:`sync` before anyone reads.

        ``schema`` is ``{key: (dtype, trailing_shape)}``, the same on every rank;
        ``sizes`` is ``{key: first-dimension size of each local record}`` (one integer
        sequence per key, all as long as this rank's record count, which may be 0).
        The records are then read like those of :meth:`add_records`; contents are
        undefined until written.
        """
        self._alive()
        error = self._name_error(name)
        spec, counts = None, None
        if error is None:
            spec, counts, error = _records_spec(name, schema, sizes)
        info = self._agreement(("init_records", name), error, spec)
        schema = _same_schema(name, list(enumerate(info)))
        self._create_records(name, schema, counts)

    def update_records(self, name, start, stop, data):
        """Local: write local records ``[start, stop)`` of ``name`` (numbered from 0 on
        each rank, as given to :meth:`init_records`); ``data`` is ``{key: their rows
        concatenated}``, as ``get_records_packed`` returns them.  Other ranks see them
        after the next collective :meth:`sync`."""
        rec = self._rec(name)
        start = as_int(start, f"update_records {name!r}: start")
        stop = as_int(stop, f"update_records {name!r}: stop")
        if not 0 <= start <= stop <= rec.n_local:
            raise DDStoreIndexError(f"update_records {name!r}: records [{start}, {stop}) "
                                    f"outside the local chunk [0, {rec.n_local})")
        if not isinstance(data, dict) or set(data) != set(rec.keys):
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise DDStoreValueError(f"update_records {name!r}: data must be a dict with "
                                    f"keys {sorted(rec.keys)}, got {got}")
        base = rec.offsets[rec.start]
        lo, hi = rec.offsets[rec.start + start] - base, rec.offsets[rec.start + stop] - base
        for j, key in enumerate(rec.keys):
            var = rec.fields[key]
            arr = np.asarray(data[key])
            if arr.shape != (hi[j] - lo[j],) + var.row_shape:
                raise DDStoreValueError(
                    f"update_records {name!r}: key {key!r} has shape {arr.shape}; records "
                    f"[{start}, {stop}) need {(int(hi[j] - lo[j]),) + var.row_shape}")
            if arr.dtype != var.dtype:
                raise DDStoreValueError(f"update_records {name!r}: key {key!r} has dtype "
                                        f"{arr.dtype}, the records have {var.dtype}")
            if arr.shape[0]:
                self._write_field(var, int(lo[j]), arr)

    def _create_records(self, name, schema, counts):
        """Collective: allocate the fields of agreed ``schema`` for local ``counts``
        (``[n_local, nkeys]``) and build the offsets table every rank keeps."""
        keys = [k for k, _, _ in schema]
        fields = {}
        try:
            for j, (key, dstr, trailing) in enumerate(schema):
                fields[key] = self._create(f"{name}/{key}", int(counts[:, j].sum()),
                                           np.dtype(dstr), tuple(trailing))
        except DDStoreError:  # agreed on every rank (e.g. out of memory): undo it all
            for var in fields.values():
                self._core.remove(var.vid)
            raise
        all_counts = self._group_comm.allgather(counts)
        table = np.concatenate(all_counts, axis=0)
        offsets = np.zeros((table.shape[0] + 1, len(keys)), dtype=np.int64)
        np.cumsum(table, axis=0, out=offsets[1:])
        start = sum(len(c) for c in all_counts[:self.group_rank])
        self._records[name] = _Records(name, keys, fields, offsets, start, len(counts))

    def _write_field(self, var, offset, rows):
        self._core.write_local(var.vid, offset,
                               np.ascontiguousarray(rows, dtype=var.dtype))

    def _rec(self, name):
        self._alive()
        rec = self._records.get(name)
        if rec is None:
            if name in self._vars:
                raise DDStoreValueError(f"variable {name!r} holds rows, not records: use "
                                        f"get_batch()")
            raise DDStoreValueError(f"unknown records {name!r}; known: "
                                    f"{sorted(self._records)}")
        return rec

    def record_schema(self, name):
        """``{key: (dtype, trailing_shape)}`` of a records variable."""
        rec = self._rec(name)
        return {k: (v.dtype, v.row_shape) for k, v in rec.fields.items()}

    def record_sizes(self, name, indices):
        """``{key: first-dimension sizes}`` of records ``indices`` (no communication)."""
        rec = self._rec(name)
        idx = as_indices(indices, f"record_sizes {name!r}", rec.nrecords)
        self._check_indices("record_sizes", name, idx, rec.nrecords)
        diff = rec.offsets[idx + 1] - rec.offsets[idx]
        return {k: diff[:, j] for j, k in enumerate(rec.keys)}

    def get_records_packed(self, name, indices):
        """Local: records ``indices`` as ``({key: concatenated rows}, {key: sizes})``.

        The rows of every record, in request order, concatenated per key (what a graph
        batch is built from); one batched read per key.
        """
        rec = self._rec(name)
        idx = as_indices(indices, f"get_records {name!r}", rec.nrecords)
        self._check_indices("get_records", name, idx, rec.nrecords)
        starts = rec.offsets[idx]
        sizes = rec.offsets[idx + 1] - starts
        data, size_by_key = {}, {}
        for j, key in enumerate(rec.keys):
            var = rec.fields[key]
            s = np.ascontiguousarray(starts[:, j])
            c = np.ascontiguousarray(sizes[:, j])
            out = np.empty((int(c.sum()),) + var.row_shape, dtype=var.dtype)
            if len(idx):
                self._core.read(var.vid, s, c, out)
            data[key], size_by_key[key] = out, c
        return data, size_by_key

    def get_record(self, name, index):
        """Local: record ``index`` as a dict ``{key: array}`` (one read per key, no index
        arrays: the per-sample path)."""
        try:
            rec = self._records[name]
        except (KeyError, TypeError):
            rec = self._rec(name)  # raises: unknown name, rows variable, freed store
        if type(index) is not int:
            index = as_int(index, f"get_record {name!r}: index")
        if not 0 <= index < rec.nrecords:
            raise DDStoreIndexError(f"get_record {name!r}: index {index} out of range "
                                    f"[0, {rec.nrecords})")
        first, stop = rec.offsets[index:index + 2].tolist()
        out = {}
        read = self._read_range
        for j, key in enumerate(rec.keys):
            var = rec.fields[key]
            count = stop[j] - first[j]
            arr = np.empty((count,) + var.row_shape, var.dtype)
            if count:
                read(var.vid, first[j], count, arr)
            out[key] = arr
        return out

    def get_records(self, name, indices):
        """Local: records ``indices`` as a list of dicts of arrays, in request order."""
        if type(indices) in (list, tuple) and len(indices) == 1 and \
                type(indices[0]) is int:
            try:
                return [self.get_record(name, indices[0])]
            except DDStoreIndexError:
                pass  # the message below names the position
        data, sizes = self.get_records_packed(name, indices)
        n = len(next(iter(sizes.values()))) if sizes else 0
        out = [dict() for _ in range(n)]
        for key, arr in data.items():
            for rec, part in zip(out, np.split(arr, np.cumsum(sizes[key])[:-1])):
                rec[key] = part
        return out

    # ------------------------------------------------------------------ inspection
    def nrows(self, name):
        """Global rows of a variable, or number of records of a records variable."""
        self._alive()
        if name in self._records:
            return self._records[name].nrecords
        return self._var(name).nrows

    def local_rows(self, name):
        """This rank's rows (or records) of ``name``: its ``(start, stop)`` in the group."""
        self._alive()
        if name in self._records:
            rec = self._records[name]
            return rec.start, rec.start + rec.n_local
        var = self._var(name)
        offsets = self._core.chunk_offsets(var.vid)
        return int(offsets[self.group_rank]), int(offsets[self.group_rank + 1])

    def variables(self):
        """Names of every variable (rows and records), sorted."""
        self._alive()
        return sorted(list(self._vars) + list(self._records))

    def dtype(self, name):
        return self._var(name).dtype

    def row_shape(self, name):
        return self._var(name).row_shape

    def nbytes(self):
        """Bytes this rank holds: its chunks plus the records' offset tables."""
        self._alive()
        return int(self._core.local_bytes() +
                   sum(r.offsets.nbytes for r in self._records.values()))

    def __repr__(self):
        if not self._core.alive:
            return "DDStore(freed)"
        return (f"DDStore(rank={self.rank}/{self.size}, width={self.width}, "
                f"group_rank={self.group_rank}, replicas={self.replicas}, "
                f"transport={self.transport!r}, variables={self.variables()})")


def _record_schema(name, samples):
    """(schema, error): schema is a tuple of (key, dtype.str, trailing shape) sorted by key."""
    if isinstance(samples, dict) or not hasattr(samples, "__len__"):
        return None, (DDStoreValueError, f"records {name!r}: samples must be a sequence "
                                         f"of dicts, got {type(samples).__name__}")
    schema = None
    for i, sample in enumerate(samples):
        if not isinstance(sample, dict):
            return None, (DDStoreValueError, f"records {name!r}: sample {i} is a "
                                             f"{type(sample).__name__}, not a dict")
        this = []
        for key in sorted(sample):
            arr = np.asarray(sample[key])
            if arr.ndim < 1:
                return None, (DDStoreValueError,
                              f"records {name!r}: sample {i} key {key!r} is a scalar; "
                              f"values need a first (variable) dimension")
            if arr.dtype.kind not in _STORABLE_KINDS or arr.dtype.fields is not None:
                return None, (DDStoreValueError,
                              f"records {name!r}: sample {i} key {key!r} has dtype "
                              f"{arr.dtype}, which cannot be stored")
            this.append((key, arr.dtype.str, tuple(arr.shape[1:])))
        this = tuple(this)
        if schema is None:
            schema = this
        elif this != schema:
            want, got = dict((k, (d, s)) for k, d, s in schema), dict(
                (k, (d, s)) for k, d, s in this)
            missing = sorted(set(want) - set(got))
            extra = sorted(set(got) - set(want))
            if missing or extra:
                msg = f"missing keys {missing}" if missing else ""
                msg += (", " if msg and extra else "") + (f"extra keys {extra}"
                                                         if extra else "")
            else:
                key = next(k for k in want if want[k] != got[k])
                msg = (f"key {key!r} has dtype {np.dtype(got[key][0])} trailing shape "
                       f"{got[key][1]}, sample 0 has dtype {np.dtype(want[key][0])} "
                       f"trailing shape {want[key][1]}")
            return None, (DDStoreValueError, f"records {name!r}: sample {i}: {msg}")
    return schema, None


def _same_schema(name, schemas):
    """The schema all ranks in ``[(rank, schema)]`` agree on, or an error naming two that
    differ (raised on every rank: each compares the same gathered list)."""
    for r, s in schemas:
        if s != schemas[0][1]:
            raise DDStoreValueError(f"records {name!r}: keys, dtypes or trailing shapes "
                                    f"differ between rank {schemas[0][0]} "
                                    f"({_fmt_schema(schemas[0][1])}) and rank {r} "
                                    f"({_fmt_schema(s)})")
    return schemas[0][1]


def _records_spec(name, schema, sizes):
    """(schema tuple, counts ``[n_local, nkeys]``, error) of init_records' arguments."""
    what = f"init_records {name!r}"
    if not isinstance(schema, dict) or not schema:
        return None, None, (DDStoreValueError, f"{what}: schema must be a non-empty dict "
                                               f"{{key: (dtype, trailing_shape)}}")
    spec = []
    for key in sorted(schema, key=str):
        try:
            dstr, trailing = schema[key]
            dt = np.dtype(dstr)
            trailing = tuple(as_int(t, "trailing dimension") for t in trailing)
        except (TypeError, ValueError) as exc:
            return None, None, (DDStoreValueError, f"{what}: schema[{key!r}] must be "
                                                   f"(dtype, trailing_shape): {exc}")
        if not isinstance(key, str) or dt.kind not in _STORABLE_KINDS or \
                dt.fields is not None or any(t < 0 for t in trailing):
            return None, None, (DDStoreValueError, f"{what}: schema[{key!r}] = "
                                                   f"({dt}, {trailing}) cannot be stored "
                                                   f"(str key, numeric dtype, dims >= 0)")
        spec.append((key, dt.str, trailing))
    if not isinstance(sizes, dict) or set(sizes) != set(schema):
        got = sorted(sizes, key=str) if isinstance(sizes, dict) else type(sizes).__name__
        return None, None, (DDStoreValueError, f"{what}: sizes must be a dict with the "
                                               f"schema's keys {sorted(schema, key=str)}, "
                                               f"got {got}")
    try:
        cols = [np.asarray(sizes[k]) for k, _, _ in spec]
        if any(c.ndim != 1 or (c.size and c.dtype.kind not in "iu") for c in cols):
            raise ValueError("each must be a 1-d sequence of integers")
        if len({c.size for c in cols}) > 1:
            raise ValueError(f"lengths differ: {[c.size for c in cols]}")
        counts = np.stack([c.astype(np.int64) for c in cols], axis=1) if cols[0].size \
            else np.zeros((0, len(spec)), dtype=np.int64)
        if (counts < 0).any():
            raise ValueError("a size is negative")
    except (TypeError, ValueError, OverflowError) as exc:
        return None, None, (DDStoreValueError, f"{what}: bad sizes: {exc}")
    return tuple(spec), counts, None


def _fmt_schema(schema):
    return ", ".join(f"{k}: {np.dtype(d)}{list(s)}" for k, d, s in schema)
