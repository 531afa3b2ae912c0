"""The public store object, :class:`DDStore`: construction, the rows API, inspection.

A DDStore keeps datasets in the memory of the ranks of an MPI communicator.  Ranks form
groups of ``width`` consecutive ranks (``comm.size // width`` groups, called replicas);
each group holds one full copy of every variable, striped over its members.  The global
row space of a variable is the concatenation of the members' chunks in group-rank order;
any rank can read any row of that space, always from a member of its own group.

Reads are one-sided: ``get``/``get_batch``/``get_range``/``get_records`` need no action
from the owner of the rows, so ranks can read at different paces.  Calls that create or
synchronise data (``add``, ``init``, ``sync``, ``add_records``, ``free``) are collective
over the whole communicator: every rank calls them, in the same order, and each passes
through the one agreement of :mod:`ddstore._collective` first.

Beside it: :mod:`ddstore.records` (variable-size records), :mod:`ddstore.memory` (memory
planning), :mod:`ddstore._lifecycle` (exit and abort), :mod:`ddstore._checks` (argument
checks).
"""
import bisect
import functools
import math
import os
import threading

import numpy as np

from . import _core, _lifecycle, _status, _transaction
from ._checks import (STORABLE_KINDS, as_indices, as_int, check_free_names, check_indices,
                      is_int, partition)
from . import _collective
from ._collective import Step, collective, is_agreed, join_bounded
from ._lifecycle import abort_on_exception
from .errors import DDStoreError, DDStoreIndexError, DDStoreMemoryError, \
    DDStoreStateError, DDStoreValueError
from .memory import (MEMORY_BUDGET_FRACTION, agreed_budget, available_memory, gb,
                     memory_settings, plan_width)
from .checkpoint import CheckpointAPI
from .records import RecordsAPI

__all__ = ["DDStore", "partition", "as_indices", "as_int", "abort_on_exception",
           "available_memory", "MEMORY_BUDGET_FRACTION"]

# batches up to this length given as lists of ints skip the numpy index array
_SHORT_BATCH = 16
_MAX_ROW_BYTES = 2 ** 63 - 1  # one row's bytes must fit the core's int64


PROGRESS_US = 200  # the progress agent's default period (docs/cluster.md: how chosen)


def _env_choice(name, choices):
    """Environment variable ``name``: one of ``choices`` (case-insensitive; unset or
    empty: the first), else a :class:`DDStoreValueError` naming them."""
    value = os.environ.get(name, "").strip().lower() or choices[0]
    if value not in choices:
        raise DDStoreValueError(f"{name}={value!r} is not one of {', '.join(choices)}")
    return value


def _env_int(name, default, most, what):
    """Environment variable ``name``: an integer in ``[1, most]`` written in plain ASCII
    decimal digits (unset or empty: ``default``), else a :class:`DDStoreValueError`
    naming the range and the form (``int()`` alone would take ``1_000`` and other
    scripts' digits such as ``٣``)."""
    text = os.environ.get(name, "").strip()
    if not text:
        value = default
    elif not (text.isascii() and text.isdigit()):
        value = -1
    else:
        value = int(text)
    if not 1 <= value <= most:
        raise DDStoreValueError(f"{name}={text!r} must be {what} in [1, {most}], "
                                f"written in plain decimal digits 0-9 (no sign, "
                                f"underscore, spaces or other digits)")
    return value


def env_settings():
    """The environment settings that shape a store's collective behaviour, read (and
    checked) in the constructor's local part and agreed in its round (``same=``: a
    difference between ranks is refused naming the variable, the ranks and the
    values): ``DDSTORE_PROGRESS``, ``DDSTORE_PROGRESS_US``, ``DDSTORE_SERVE``,
    ``DDSTORE_SERVE_MIN_PIECES`` (``DDSTORE_TRANSPORT`` is agreed as ``transport``)."""
    return {"DDSTORE_PROGRESS": _env_choice("DDSTORE_PROGRESS", ("auto", "on", "off")),
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
        raise DDStoreValueError(
            f"this rank's rows are read by {remote} group member(s) on other nodes, and its "
            f"progress agent (a thread that lets MPI answer those reads while the rank "
            f"computes) needs MPI_THREAD_MULTIPLE, but MPI was initialised with thread "
            f"level {MPI.Query_thread()} (< {MPI.THREAD_MULTIPLE}); initialise MPI with "
            f"THREAD_MULTIPLE (mpi4py's default: do not lower mpi4py.rc.thread_level), or "
            f"set DDSTORE_PROGRESS=off (then reads of a computing rank wait for its next "
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


class _Var:
    __slots__ = ("name", "vid", "dtype", "row_shape", "n_local", "nrows", "mapped")

    def __init__(self, name, vid, dtype, row_shape, n_local, nrows):
        self.name, self.vid, self.dtype = name, vid, dtype
        self.row_shape, self.n_local, self.nrows = row_shape, n_local, nrows
        self.mapped = None  # (chunk starts, member views or None): DDStore._mapped


class _PrefaultThread(threading.Thread):
    """:meth:`DDStore.prefault` in the background: ``nbytes`` (bytes mapped) once joined,
    ``error`` the exception if it failed (it cannot on a live variable)."""

    def __init__(self, run):
        super().__init__(name="ddstore-prefault", daemon=True)
        self._run, self.nbytes, self.error = run, None, None

    def run(self):
        try:
            self.nbytes = self._run()
        except Exception as exc:  # noqa: BLE001 -- kept for the caller; advisory work
            self.error = exc


class DDStore(RecordsAPI, CheckpointAPI):
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

    Notes
    -----
    Construction is collective.  Attributes: ``rank``, ``size`` (of ``comm``),
    ``width``, ``group_rank`` (0 .. width-1), ``group_size`` (= width), ``replicas``
    (number of groups), ``group`` (index of this rank's group), ``transport``,
    ``shm_peers`` (other group members this rank reads through shared memory),
    ``memory_budget`` (the agreed budget per rank in bytes, or None without
    ``data_nbytes``), ``store_id`` (the store's number, the same on every rank, agreed
    at construction: a rank calling one store while another calls a different store of
    the same communicator raises an error naming ``store #<id>`` of each).

    The environment settings that shape collective behaviour (``DDSTORE_TRANSPORT``,
    ``DDSTORE_PROGRESS``, ``DDSTORE_PROGRESS_US``, ``DDSTORE_SERVE``,
    ``DDSTORE_SERVE_MIN_PIECES``) are read at construction and must be the same on
    every rank: a difference is refused on every rank, naming the variable, the ranks
    and their values.

    ``group_comm`` is the communicator of this rank's group (for layers that exchange
    data within a group, after their collective call's agreement).

    Use it as a context manager, or call :meth:`free` (collective) when done; live stores
    are freed at interpreter exit.
    """

    def __init__(self, comm=None, width=None, transport="auto", *, data_nbytes=None,
                 memory_budget=None):
        from mpi4py import MPI
        if comm is None:
            comm = MPI.COMM_WORLD
        size = comm.Get_size()
        _lifecycle.install_abort_hook()  # an agreed refusal of this store: told once
        # the local part may fail on one rank only (bad arguments, the launch): the step
        # agrees on it before anyone raises or allocates
        with collective(comm, "DDStore") as step:
            width, transport = self._check_settings(size, width, transport)
            _lifecycle.check_launch()  # torchrun: each process a world of one
            nbytes, memory = memory_settings(width, data_nbytes, memory_budget)
            env = env_settings()  # agreed: a rank that serves differently hangs reads
            shares = step.agree((memory, _collective.next_store_id()),
                                same={"width": width, "transport": transport,
                                      "data_nbytes": nbytes, **env})
            settings = [m for m, _ in shares]
            # the store's id: the same on every rank, named by a step out of step
            self.store_id = _collective.take_store_id(max(i for _, i in shares))
            self.memory_budget = None
            if nbytes is not None:  # the same decision on every rank, from agreed values
                budget, how = agreed_budget(settings)
                if width == "auto":
                    width = plan_width(size, nbytes, budget, how)
                elif -(-nbytes // width) > budget:
                    try:
                        hint = f"width={plan_width(size, nbytes, budget, how)} " \
                               f"(or width='auto') fits"
                    except DDStoreMemoryError:
                        hint = "no width fits on this many ranks"
                    raise DDStoreMemoryError(
                        f"width={width}: each rank would hold {gb(-(-nbytes // width))} "
                        f"of the {gb(nbytes)} of data (data_nbytes={nbytes}), more than "
                        f"the {how}; {hint}")
                self.memory_budget = budget
        self._core = _core.Core(comm, width, transport)
        try:  # the progress agent: decided per rank from its members, agreed
            with collective(comm, None) as step:
                interval = progress_interval(self._core, env)
                serve = serve_settings(env)
                if interval:
                    self._core.start_progress(interval)
                running = step.agree(bool(interval))
            # reads by message only where every member of the group answers them (decided
            # from agreed values; turning it on allocates, so it is a step's local part)
            g = comm.Get_rank() // self._core.group_size * self._core.group_size
            with collective(comm, None):
                if serve and all(running[g:g + self._core.group_size]) and \
                        self._core.off_node:
                    self._core.serve(serve)
        except BaseException:
            self._core.free()  # collective: every rank raises the agreed error
            raise
        # what each rank is doing, read by a rank waiting at its exit (ddstore._status)
        self._board = _status.Board(comm, shared=transport != "rma")
        self._journal = _transaction.Journal()  # the open transactions' record
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
        self.group_comm = comm.Split(self.group, self.rank)
        self._read_range = self._core.range_reader()
        self._read_rows = self._core.rows_reader()
        self._vars = {}
        self._records = {}
        self._annotations = {}  # what layers recorded to reopen by name (checkpoint)
        self._threads = []  # background threads on the store's variables (prefault,
        # a layer's commit: track), joined before remove / free
        _lifecycle.register(self)

    @staticmethod
    def _check_settings(size, width, transport):
        """``(width, transport)`` with the defaults filled in; raises on a bad one."""
        if width is None:
            width = size
        if isinstance(width, str) and width == "auto":
            pass  # resolved from data_nbytes after the ranks agree
        elif not is_int(width):
            raise DDStoreValueError(f"width must be 'auto' or an integer in [1, {size}] "
                                    f"dividing the communicator size {size}, got "
                                    f"{width!r}")
        else:
            width = int(width)
            if not 1 <= width <= size:
                raise DDStoreValueError(f"width={width} out of range: allowed 1 <= width "
                                        f"<= {size} (the communicator size)"
                                        f"{_lifecycle.single_rank_hint(size)}")
        if width != "auto" and size % width:
            divisors = [d for d in range(1, size + 1) if size % d == 0]
            raise DDStoreValueError(f"width={width} does not divide the communicator "
                                    f"size {size}; allowed widths: {divisors}")
        if transport == "auto":
            transport = os.environ.get("DDSTORE_TRANSPORT", "auto").strip().lower() or "auto"
        if transport not in _core.TRANSPORTS:
            raise DDStoreValueError(f"transport={transport!r} is not one of "
                                    f"{sorted(_core.TRANSPORTS)} (argument or "
                                    f"DDSTORE_TRANSPORT)")
        return width, transport

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
        with collective(comm, "DDStore.plan") as step:
            nb, memory = memory_settings("auto", nbytes, memory_budget, what="nbytes")
            memories = step.agree(memory, same={"nbytes": nb})
            budget, how = agreed_budget(memories)
            return plan_width(comm.Get_size(), nb, budget, how)

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
        self._join_threads()
        from mpi4py import MPI
        if not MPI.Is_finalized():
            with self.collective("free"):
                pass
            self._board.free()
            try:
                self.group_comm.Free()
            except Exception:  # pragma: no cover
                pass
        core.free()
        _lifecycle.unregister(self)
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
    def progress(self):
        """Whether this rank runs the store's progress agent: a thread that lets MPI
        answer other ranks' reads of this rank's rows while it computes (see
        :func:`progress_interval` and docs/cluster.md, "Between nodes: reads of a
        computing rank")."""
        return self._core.alive and self._core.progress

    @property
    def serving(self):
        """Whether this rank reads the rows of group members on other nodes by message
        (from :func:`serve_settings`' number of pieces on): the member's progress agent
        packs them into one reply.  On wherever every member of the group runs its
        agent, unless ``DDSTORE_SERVE=off`` (docs/cluster.md, "Between nodes: reads by
        message")."""
        return self._core.alive and self._core.serving

    @property
    def freed(self):
        return not self._core.alive

    def check_alive(self):
        """Raise :class:`DDStoreStateError` if the store has been freed."""
        if not self._core.alive:
            raise DDStoreStateError("this DDStore has been freed; create a new one")

    # ------------------------------------------------------------------ all or nothing
    def transaction(self, label="transaction"):
        """All or nothing for an operation that creates several variables:
        ``with store.transaction("from_pyg"): ...``.

        While the block runs, every variable the store creates (:meth:`add`,
        :meth:`init`, :meth:`add_records`, :meth:`init_records`) is recorded.  If the
        block raises an error that every rank raised together (an agreed
        :class:`DDStoreError`, see :meth:`collective`; on one rank, any exception), every
        rank removes what the block created, newest first, and the error goes on: the
        store's :meth:`variables` is what it was before, and the same call with fixed
        input succeeds.  A normal exit keeps everything.  Entering and leaving are local;
        only the removal is collective.

        Any other exception is this rank's alone (the other ranks are not leaving the
        block with it): nothing collective is started, the variables stay, and the
        exception, uncaught, ends the job (:func:`abort_on_exception`).  So every step
        inside the block that can fail on one rank only is a step (:meth:`collective`).

        Transactions nest: an inner one joins the outer record; an agreed error leaving
        the inner block removes what was created since it began (the outer block may
        catch it and go on), and the outer removes the rest if the error leaves it too.
        Variables that existed before the block are never removed (nor brought back if
        the block removed them).  See :mod:`ddstore._transaction`.
        """
        return _transaction.Transaction(self, label, self._journal, self._drop)

    # ------------------------------------------------------------------ collective steps
    def collective(self, op, name=None, *, same=None):
        """A step of a collective call over this store's communicator, the one mechanism
        of every collective call (see :mod:`ddstore._collective`)::

            with store.collective("MyLayer.build", name, same={"k": k}) as step:
                part = read_my_share(path)       # may raise anything on one rank
                counts = step.agree(len(part))   # every rank's value, in rank order
                if sum(counts) == 0:             # decided from agreed values
                    raise DDStoreValueError("empty")

        Whatever the local part (the block before :meth:`Step.agree
        <ddstore._collective.Step.agree>`, or the whole block) raises on any rank, every
        rank raises the same :class:`DDStoreError` naming the ranks and what each raised;
        ranks in different steps (another call, another ``name``, another order) raise an
        error naming them, and so do ``same`` settings that differ.  What the block raises
        after the round is raised alike on every rank, so the enclosing
        :meth:`transaction` rolls back everywhere.  ``op=None``: a later step of a call
        already begun.  A step carries the store's :attr:`store_id`: ranks in the same
        call on different stores of one communicator raise an error naming both."""
        return Step(self.comm, op, name, same, self.check_alive, self.store_id)

    def _var(self, name):
        self.check_alive()
        var = self._vars.get(name)
        if var is None:
            known = sorted(self._vars) + sorted(self._records)
            if name in self._records:
                raise DDStoreValueError(f"variable {name!r} holds records: use "
                                        f"get_records()")
            raise DDStoreValueError(f"unknown variable {name!r}; known: {known}")
        return var

    def _check_name(self, name):
        if not isinstance(name, str) or not name:
            raise DDStoreValueError(f"variable name must be a non-empty str, got {name!r}")
        if name in self._vars or name in self._records:
            check_free_names(None, f"variable {name!r}", "remove it or pick another name")

    @staticmethod
    def _check_dtype(name, dtype):
        if dtype.kind not in STORABLE_KINDS or dtype.fields is not None:
            raise DDStoreValueError(
                f"variable {name!r}: dtype {dtype} cannot be stored; allowed: bool, "
                f"int8-int64, uint8-uint64, float16-float64, complex (no object, string "
                f"or structured dtypes)")

    @staticmethod
    def _row_bytes(dtype, row_shape):
        return int(dtype.itemsize) * math.prod(int(s) for s in row_shape)

    def _create(self, name, n_local, dtype, row_shape):
        """Collective, after a step's round: allocate a variable whose metadata (dtype,
        row shape) all ranks have agreed on.  A row too large is decided from the agreed
        metadata, in exact integers; the core agrees on its own failures (memory...)."""
        row_bytes = self._row_bytes(dtype, row_shape)
        if row_bytes > _MAX_ROW_BYTES:
            raise DDStoreValueError(
                f"variable {name!r}: one row of shape {tuple(row_shape)} and dtype "
                f"{dtype} is {row_bytes} bytes; allowed: at most 2**63 - 1")
        vid = self._core.add(name, n_local, row_bytes)
        return _Var(name, vid, dtype, tuple(row_shape), n_local, self._core.nrows(vid))

    def _created(self, name):
        """The one place where a new variable (rows or records) is announced: the open
        transaction, if any, records it."""
        self._journal.note_created(name)

    # ------------------------------------------------------------------ writing
    def add(self, name, rows):
        """Collective: add variable ``name`` with this rank's chunk ``rows``.

        ``rows`` is an array ``[n_local, *row_shape]``; ``n_local`` may differ between
        ranks and may be 0; dtype and row shape must be the same on every rank.  The
        variable's global rows (within each group) are the members' chunks concatenated in
        group-rank order.  The data is copied into the store and visible to every rank
        when ``add`` returns.
        """
        with self.collective("add", name) as step:
            self._check_name(name)
            try:
                arr = rows if isinstance(rows, np.ndarray) else np.asarray(rows)
            except MemoryError:  # what it is: agreed as a DDStoreMemoryError
                raise
            except Exception as exc:  # ragged lists...
                raise DDStoreValueError(f"variable {name!r}: rows are not an array "
                                        f"({exc})") from exc
            self._check_dtype(name, arr.dtype)
            if arr.ndim < 1:
                raise DDStoreValueError(f"variable {name!r}: rows must have at least one "
                                        f"dimension [n_local, *row_shape], got a scalar")
            step.agree(same={"dtype": str(arr.dtype), "row shape": arr.shape[1:]})
            var = self._create(name, arr.shape[0], arr.dtype, arr.shape[1:])
            self._vars[name] = var
            self._created(name)
            if arr.shape[0]:
                self._core.write_local(var.vid, 0, np.ascontiguousarray(arr))
            self._core.sync()

    def init(self, name, n_local, row_shape=(), dtype=np.float32):
        """Collective: create variable ``name`` with room for ``n_local`` local rows.

        Fill it with :meth:`update` (in pieces, without a second copy), then call
        :meth:`sync` before anyone reads.  Contents are undefined until written.
        """
        with self.collective("init", name) as step:
            self._check_name(name)
            try:
                dt = np.dtype(dtype)
                shape = tuple(as_int(s, "row_shape entry") for s in (
                    row_shape if np.iterable(row_shape) else (row_shape,)))
            except (TypeError, ValueError) as exc:
                raise DDStoreValueError(f"variable {name!r}: bad dtype or row_shape: "
                                        f"{exc}") from exc
            self._check_dtype(name, dt)
            if any(s < 0 for s in shape):
                raise DDStoreValueError(f"variable {name!r}: row_shape {shape} is negative")
            if not is_int(n_local) or n_local < 0:
                raise DDStoreValueError(f"variable {name!r}: n_local={n_local!r} must be "
                                        f"an integer >= 0")
            step.agree(same={"dtype": str(dt), "row shape": shape})
            self._vars[name] = self._create(name, int(n_local), dt, shape)
            self._created(name)

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
        with self.collective("sync"):
            pass
        self._core.sync()

    def sync_windows(self, *names):
        """Local (no other rank involved): ``MPI_Win_sync`` of the windows of variables
        ``names`` (rows variables), the local half of :meth:`sync`, for a layer that
        runs its own barrier on its own communicator (a duplicate of :attr:`comm`, e.g.
        in a background thread: :meth:`sync` itself is collective on :attr:`comm`).
        Guarantees: this rank's writes to its own chunks of those variables (``update``,
        ``local_view``) made before the call are visible to other ranks that call it
        after a barrier this rank has entered after the call; after that barrier, calling
        it again makes the other ranks' writes made before their call visible to this
        rank's reads.  ``sync_windows(...); barrier; sync_windows(...)`` on every rank is
        what :meth:`sync` does for every variable.  An unknown name raises
        :class:`DDStoreValueError`, nothing synced.  May run in another thread while
        this one makes other calls on the store, except removing one of those
        variables or freeing the store."""
        ids = [self._var(n).vid for n in names]
        self._core.sync_windows(ids)

    def track(self, thread):
        """Local: ``thread`` (a started :class:`threading.Thread` that uses this store's
        variables, e.g. a layer's background commit) is joined before any variable is
        removed (:meth:`remove`, a rollback) and before the store is freed, as
        ``prefault(background=True)`` threads are.  The join waits as long as the
        thread runs; inside the free at interpreter exit it is watched as that free's
        wait is (the job ends at once, with a message, when a peer is in another
        collective call, or after ``DDSTORE_EXIT_TIMEOUT`` seconds when that is set; see
        :func:`ddstore._collective.bounded`)."""
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)

    def remove(self, name, *more):
        """Collective: drop variables (or records) ``name, *more`` and free their memory;
        the names can then be added again.  All or nothing: one step checks every name
        (known, given once) before any is removed, so a layer that removes the several
        variables of one object removes them in one call."""
        names = (name,) + more
        with self.collective("remove", name if not more else repr(list(names))):
            for n in names:
                if n not in self._vars and n not in self._records:
                    raise DDStoreValueError(f"unknown variable {n!r}; known: "
                                            f"{self.variables()}")
            if len(set(names)) != len(names):
                raise DDStoreValueError(f"remove: a variable is named twice in {names}")
        for n in names:
            self._drop(n)

    def _drop(self, name):
        """Collective, after the agreement: free variable (or records) ``name``."""
        self._join_threads()  # no thread may be reading pages that are unmapped
        if name in self._records:
            for var in self._records.pop(name).fields.values():
                self._core.remove(var.vid)
        else:
            self._core.remove(self._vars.pop(name).vid)
        self._forget_annotations(name)
        self._journal.note_removed(name)

    # ------------------------------------------------------------------ reading
    # Every read checks its ranges before it allocates anything.  Single-row reads are
    # the hot path (code written for other systems reads one sample per call): the core
    # checks the range, Python only turns a failure into a message.
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
        if out is None and type(index) is int and 0 <= index < var.nrows:
            # the hot path: a row this process maps (its own chunk, a node-local
            # member's) is copied by numpy, without a call into the core.  What
            # _mapped_rows does, inline: the call and the slice cost 0.6 -> 0.85 us
            starts, views = var.mapped or self._mapped(var)
            m = bisect.bisect_right(starts, index) - 1
            view = views[m]
            if view is not None:
                return view[index - starts[m]].copy()
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

    def _mapped_rows(self, var, start, count):
        """A view of global rows ``[start, start + count)`` of ``var`` (in range, count
        >= 1) when they lie in one chunk this process maps (its own, a node-local
        member's), else None: the reads that numpy copies without a call into the
        core."""
        starts, views = var.mapped or self._mapped(var)
        m = bisect.bisect_right(starts, start) - 1
        view = views[m]
        if view is None or start + count > starts[m + 1]:
            return None
        return view[start - starts[m]:start - starts[m] + count]

    def _mapped(self, var):
        """``(chunk starts, views)`` of ``var``, kept on it: where each member's chunk
        starts (a list of ``width + 1`` ints) and a numpy view of the chunks this process
        maps (None for members read with MPI_Get)."""
        starts = [int(x) for x in self._core.chunk_offsets(var.vid)]
        views = [self._core.member_view(var.vid, m, var.dtype, var.row_shape)
                 for m in range(self.group_size)]
        var.mapped = (starts, views)
        return var.mapped

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
        if out is None and (t is list or t is tuple) and len(indices) == 1:
            i = indices[0]
            if type(i) is int and 0 <= i < var.nrows:
                rows = self._mapped_rows(var, i, 1)  # as get does
                if rows is not None:
                    return rows.copy()
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
                check_indices(idx, var.nrows, f"get_batch {name!r}")
                raise
        return out

    def get_many(self, requests):
        """Local: several :meth:`get_batch` reads made as one, ``requests`` a sequence of
        ``(name, indices)``; returns the arrays in request order.

        Every request is checked before anything is read; then the remote rows of all
        of them are fetched together: one round trip per remote owner for the whole
        call instead of one per request (the features and labels of a batch's nodes),
        and between nodes one request message per owner (docs/cluster.md)."""
        plan, outs = [], []
        for name, indices in requests:
            var = self._lookup(name)
            idx = as_indices(indices, f"get_many {name!r}", var.nrows)
            out = np.empty((idx.shape[0],) + var.row_shape, dtype=var.dtype)
            plan.append((var, idx, out))
            outs.append(out)
        try:  # the core checks every index; explain a failure in user terms
            self._core.read_many([(var.vid, idx, None, out) for var, idx, out in plan
                                  if idx.shape[0]])
        except DDStoreIndexError:
            for var, idx, _ in plan:
                check_indices(idx, var.nrows, f"get_many {var.name!r}")
            raise
        return outs

    def get_range(self, name, start, count, out=None):
        """Local: ``count`` consecutive global rows from ``start`` (may span owners), as
        ``[count, *row_shape]``; ``out`` as in :meth:`get_batch`."""
        var = self._lookup(name)
        if out is None and type(start) is int and type(count) is int and count > 0 and \
                0 <= start and start + count <= var.nrows:
            rows = self._mapped_rows(var, start, count)  # as get does
            if rows is not None:
                return rows.copy()
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

    # ------------------------------------------------------------------ inspection
    def nrows(self, name):
        """Global rows of a variable, or number of records of a records variable."""
        self.check_alive()
        if name in self._records:
            return self._records[name].nrecords
        return self._var(name).nrows

    def local_rows(self, name):
        """This rank's rows (or records) of ``name``: its ``(start, stop)`` in the group."""
        self.check_alive()
        if name in self._records:
            rec = self._records[name]
            return rec.start, rec.start + rec.n_local
        var = self._var(name)
        offsets = self._core.chunk_offsets(var.vid)
        return int(offsets[self.group_rank]), int(offsets[self.group_rank + 1])

    def chunk_offsets(self, name):
        """Global row where each member's chunk of rows variable ``name`` starts, and its
        row count last (``int64[width + 1]``; local, no communication)."""
        return self._core.chunk_offsets(self._var(name).vid)

    def variables(self):
        """Names of every variable (rows and records), sorted."""
        self.check_alive()
        return sorted(list(self._vars) + list(self._records))

    def dtype(self, name):
        return self._var(name).dtype

    def row_shape(self, name):
        return self._var(name).row_shape

    def nbytes(self, name=None):
        """Bytes this rank holds: its chunks plus the records' offset tables; for one
        variable (rows or records) when ``name`` is given."""
        self.check_alive()
        if name is None:
            return int(self._core.local_bytes() +
                       sum(r.offsets.nbytes for r in self._records.values()))
        rec = self._records.get(name)
        fields = [self._var(name)] if rec is None else rec.fields.values()
        return int((0 if rec is None else rec.offsets.nbytes) + sum(
            v.n_local * v.dtype.itemsize * int(np.prod(v.row_shape, dtype=np.int64))
            for v in fields))

    def __contains__(self, name):
        """``name in store``: a variable (rows or records) of that name exists."""
        return name in self._vars or name in self._records

    def local_view(self, name):
        """A writable numpy view of this rank's own chunk of rows variable ``name``
        (``[n_local, *row_shape]``, no copy), for layers that scatter rows into their own
        chunk (what :meth:`update` does, without the per-call checks); other ranks see
        the writes after the next collective :meth:`sync`.  Valid until the variable is
        removed or the store freed."""
        var = self._var(name)
        return self._core.local_view(var.vid, var.dtype, var.row_shape)

    def fast_readers(self, name):
        """The unchecked hot path of rows variable ``name``, for layers that check their
        own arguments (e.g. :mod:`pyddstore`): ``(read_range, read_rows)`` where
        ``read_range(start, count, out)`` reads rows ``[start, start + count)`` and
        ``read_rows(indices, out)`` the rows of a list of Python ints.  ``out`` is a
        writable C-contiguous buffer of at least that many rows; the core checks the
        range (raising :class:`DDStoreIndexError`) and that ``out`` holds the rows (a
        smaller or read-only one raises :class:`DDStoreValueError`; nothing is written
        past its end); nothing else is checked.  Valid until the variable is removed."""
        var = self._var(name)
        return (functools.partial(self._read_range, var.vid),
                functools.partial(self._read_rows, var.vid))

    def core_ids(self, *names):
        """For layers that build C handles over stored rows variables (the samplers'
        ``ddstore._core.CSC`` / ``TCSR``): ``(core, ids)``, this store's core handle and
        the core ids of variables ``names``, in order.  An unknown name raises a
        :class:`DDStoreValueError` naming the known ones; nothing else is checked.  Ids
        are valid until their variable is removed or the store freed."""
        ids = [self._var(n).vid for n in names]
        return self._core, ids

    def prefault(self, *names, background=False):
        """Local: map the pages of variables ``names`` (rows or records; every variable
        when none is named) into this process, so that reading a row never pays a page
        fault on first touch.  The chunks mapped are the ones this rank reads by plain
        loads: its own, and those of the members of its group on the same node (shared
        memory; with ``transport="rma"`` there are none).  A sampler's first pass over a
        multi-GB chunk otherwise pays one fault per page touched; the temporal and PyG
        graph builds call this on what they sample (see
        :func:`ddstore.build.prefault_built`).

        Reads only: every byte stays as it is, nothing is allocated (the pages are held
        by their owner; only this process's page tables grow, about 2 MB per GB mapped),
        and no other rank is involved.  Uses ``madvise(MADV_POPULATE_READ)`` (Linux >=
        5.14), else reads one byte per page; what the system refuses is not an error.
        Note that the resident size (RSS) of the process grows by the peers' chunks
        mapped: shared pages are counted in every process that maps them.

        Returns the bytes mapped.  ``background=True`` starts the work in a daemon thread
        (the core releases the GIL) and returns it at once: ``t.join()`` waits, then
        ``t.nbytes`` is the bytes mapped; :meth:`remove` and :meth:`free` wait for it.
        An unknown name raises :class:`DDStoreValueError` before anything is started."""
        self.check_alive()
        vids = []
        for name in names or self.variables():
            rec = self._records.get(name)
            vids += ([v.vid for v in rec.fields.values()] if rec is not None else
                     [self._var(name).vid])
        core = self._core

        def run():
            return sum(core.prefault(v) for v in vids)
        if not background:
            return run()
        t = _PrefaultThread(run)
        t.start()
        self.track(t)
        return t

    def _join_threads(self):
        """Join the background threads (prefaults, :meth:`track`), bounded at exit."""
        while self._threads:
            join_bounded(self._threads.pop())

    def __repr__(self):
        if not self._core.alive:
            return "DDStore(freed)"
        return (f"DDStore(rank={self.rank}/{self.size}, width={self.width}, "
                f"group_rank={self.group_rank}, replicas={self.replicas}, "
                f"transport={self.transport!r}, variables={self.variables()})")
