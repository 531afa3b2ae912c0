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

DDStore is the front of four components, each an object with its own state and a small
interface, which the store creates and calls (its public methods delegate to them):
:class:`~ddstore.variables.Variables` (the rows variables and their reads),
:class:`~ddstore.records.Records` (variable-size records),
:class:`~ddstore.annotations.Annotations` (what layers record to reopen by name) and
:class:`~ddstore.checkpoint.Checkpoints` (save and load).  The components call the store
only through its public methods; the store keeps the communicator, the agreement
(:meth:`DDStore.collective`), the transactions, the lifecycle and the names shared by
rows and records.  Beside it: :mod:`ddstore.memory` (memory planning),
:mod:`ddstore._lifecycle` (exit and abort), :mod:`ddstore._checks` (argument checks).
"""
import contextlib

import numpy as np

from . import _collective, _lifecycle, _transaction, checkpoint
from ._checks import as_bool, as_indices, as_int, partition
from ._collective import Step, collective, holds_interrupts, is_agreed, join_bounded
from ._lifecycle import abort_on_exception
from ._readers import unmapping
from .annotations import Annotations
from .checkpoint import BLOCK_BYTES, Checkpoints
from .errors import DDStoreStateError, DDStoreValueError
from .memory import (MEMORY_BUDGET_FRACTION, available_memory, decide_width,
                     memory_settings)
from .records import Records, RecordSet
from .settings import (PROGRESS_US, SERVE_MIN_PIECES, copy_settings,  # noqa: F401
                       env_settings, progress_interval, serve_settings, store_settings,
                       store_width)
from .variables import PrefaultThread, Variables

__all__ = ["DDStore", "partition", "as_indices", "as_int", "abort_on_exception",
           "available_memory", "MEMORY_BUDGET_FRACTION"]


def _documented_by(impl):
    """The public method below keeps the docstring of ``impl``, the component's method
    it delegates to (one text, beside the code it describes)."""
    def mark(fn):
        fn.__doc__ = impl.__doc__
        return fn
    return mark


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
    memory_budget : int or float, optional
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
    ``reads_wait`` (agreed: some rank reads a member on another node and some rank
    runs no progress agent, so a read may wait for its owner's next MPI call),
    ``memory_budget`` (the agreed budget per rank in bytes, or None without
    ``data_nbytes``), ``store_id`` (the store's number, the same on every rank, agreed
    at construction: a rank calling one store while another calls a different store of
    the same communicator raises an error naming ``store #<id>`` of each).

    The environment settings that shape collective behaviour (``DDSTORE_TRANSPORT``,
    ``DDSTORE_PROGRESS``, ``DDSTORE_PROGRESS_US``, ``DDSTORE_SERVE``,
    ``DDSTORE_SERVE_MIN_PIECES``) are read at construction and must be the same on
    every rank: a difference is refused on every rank, naming the variable, the ranks
    and their values.  ``progress`` (``"auto"``, ``"on"`` or ``"off"``; None: from
    ``DDSTORE_PROGRESS``) sets the progress agent instead of the environment (see
    :func:`~ddstore.settings.progress_interval`), agreed the same way.

    ``group_comm`` is the communicator of this rank's group (for layers that exchange
    data within a group, after their collective call's agreement).

    Use it as a context manager, or call :meth:`free` (collective) when done; live stores
    are freed at interpreter exit.
    """

    @holds_interrupts  # (the C core's setup follows the first round)
    def __init__(self, comm=None, width=None, transport="auto", *, data_nbytes=None,
                 memory_budget=None, progress=None):
        _lifecycle.install_abort_hook()  # an agreed refusal of this store: told once
        comm = _lifecycle.as_comm(comm, "DDStore")  # None: MPI.COMM_WORLD
        size = comm.Get_size()
        # the local part may fail on one rank only (bad arguments, the launch): the step
        # agrees on it before anyone raises or allocates
        with collective(comm, "DDStore") as step:
            width, transport = store_settings(size, width, transport)
            _lifecycle.check_launch()  # torchrun: each process a world of one
            nbytes, memory = memory_settings(width, data_nbytes, memory_budget)
            env = env_settings(progress)  # agreed: a rank serving otherwise hangs reads
            copy = copy_settings()  # local (a bad value is agreed as an error)
            shares = step.agree((memory, _collective.next_store_id(),
                                 _lifecycle.live_count()),
                                same={"width": width,  # transport: named with its env
                                      "transport (argument, else DDSTORE_TRANSPORT)":
                                      transport,
                                      "data_nbytes": nbytes, **env})
            settings, live = [m for m, *_ in shares], [n for *_, n in shares]
            # the store's id: the same on every rank, named by a step out of step
            self.store_id = _collective.take_store_id(max(i for _, i, _ in shares))
            self.memory_budget = None
            if nbytes is not None:  # the same decision on every rank, from agreed values
                width, self.memory_budget = decide_width(width, size, nbytes, settings)
        self._core = _lifecycle.make_core(comm, width, transport)
        try:  # the progress agent: decided per rank from its members, agreed
            with collective(comm, None) as step:
                self._core.set_copy_threads(*copy)  # checked above; local
                interval = progress_interval(self._core, env)
                serve = serve_settings(env)
                if interval:
                    self._core.start_progress(interval)
                running = step.agree((bool(interval), self._core.off_node > 0))
            self.reads_wait = any(m for _, m in running) and not all(r for r, _ in running)
            # reads by message only where every member of the group answers them (decided
            # from agreed values; turning it on allocates, so it is a step's local part)
            g = comm.Get_rank() // self._core.group_size * self._core.group_size
            with collective(comm, None):
                if serve and all(r for r, _ in running[g:g + self._core.group_size]) and \
                        self._core.off_node:
                    self._core.serve(serve)
        except BaseException:
            self._core.free()  # collective: every rank raises the agreed error
            raise
        # the status board (ddstore._status: read by a rank waiting at its exit), group
        self._board, self.group_comm = _lifecycle.store_comms(self._core, comm, width,
                                                              transport)
        self.comm, self.rank, self.size = comm, comm.Get_rank(), size
        self.width, self.transport = width, transport
        self.group_size, self.group_rank = self._core.group_size, self._core.group_rank
        self.replicas, self.shm_peers = self._core.ngroups, self._core.shm_peers
        self.group = self.rank // width
        # the components; what they create is announced through the one hook, records
        # are written through the one write (looked up when called: tests wrap them)
        self._variables = Variables(self, self._core, lambda n: self._created(n),
                                    lambda n: self._journal.aside_of(n))
        self._records = Records(self, self._variables, lambda n: self._created(n),
                                lambda *a: self._write_field(*a))
        self._annotations = Annotations(  # what layers record to reopen by name
            self, lambda undo: self._journal.note_undo(undo))
        self._journal = _transaction.Journal(  # the open transactions' record
            self.__contains__, self._rename, self._annotations.forget,
            self._annotations.put_back)
        self._checkpoints = Checkpoints(self, self._variables, self._records,
                                        self._annotations, self._join_threads,
                                        self._journal)
        # the per-row reads (the hot path) call the component directly, with no call in
        # between: these are the class's methods of the same names, bound to it
        v = self._variables
        self.get, self.get_batch, self.get_range = v.get, v.get_batch, v.get_range
        self.get_record = self._records.get_record
        self._threads = []  # background threads on the store's variables (prefault,
        # a layer's commit: track), joined before remove / free
        _lifecycle.register(self, live)

    check_width = staticmethod(store_width)

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
        comm = _lifecycle.as_comm(comm, "DDStore.plan")  # None: MPI.COMM_WORLD
        with collective(comm, "DDStore.plan") as step:
            nb, memory = memory_settings("auto", nbytes, memory_budget, what="nbytes")
            memories = step.agree(memory, same={"nbytes": nb})
            return decide_width("auto", comm.Get_size(), nb, memories)[0]

    # ------------------------------------------------------------------ lifecycle
    @holds_interrupts  # (the windows are freed after the round)
    def free(self):
        """Collective: release every window.  Safe to call twice; any other call on the
        store afterwards raises :class:`DDStoreStateError`.  Checked like every
        collective call: a rank that calls ``free`` while another is in a different
        collective call (``add``, a dataset constructor...) raises a
        :class:`DDStoreValueError` on every rank instead of waiting, and the store stays
        as it was."""
        core = getattr(self, "_core", None)
        if core is None or not core.alive:
            return
        with self._unmapping():
            from mpi4py import MPI
            if not MPI.Is_finalized():
                with self.collective("free"):
                    pass
                self._board.free()
                try:
                    self.group_comm.Free()
                except Exception:  # pragma: no cover
                    pass
            self._variables.unpin()  # page-locked chunks unlocked before they unmap
            core.free()
            _lifecycle.unregister(self)
            self._variables.clear()
            self._records.clear()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        """Leaving ``with DDStore(...)``: free collectively when the block ended normally
        or with an error that every rank raised together (an agreed :class:`DDStoreError`;
        on one rank, any).  Any other exception is this rank's alone: the other ranks are
        not leaving the block, so no collective call is started; the exception goes on,
        and uncaught it ends the job (see :func:`abort_on_exception`)."""
        if exc is None or is_agreed(exc) or self.size == 1:
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
    def copy_threads(self):
        """Threads that copy the local pieces of a read of at least
        ``DDSTORE_COPY_MIN_BYTES`` (see :func:`copy_settings`); 1: the reading thread."""
        return self._core.copy_threads if self._core.alive else 1

    @property
    def freed(self):  # (True once free() ran, or the exit freed it)
        return not self._core.alive

    def check_alive(self):
        """Raise :class:`DDStoreStateError` if the store has been freed."""
        if not self._core.alive:
            raise DDStoreStateError(self._core.freed_message())

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
        input succeeds.  A normal exit keeps everything.  Entering is local; leaving is
        collective only to remove (what the block created, or set aside at the commit).
        Any other exception is this rank's alone (the other ranks are not leaving the
        block with it): nothing collective is started, the variables stay, and the
        exception, uncaught, ends the job (:func:`abort_on_exception`).  So every step
        inside the block that can fail on one rank only is a step (:meth:`collective`).
        Transactions nest: an inner one joins the outer record; an agreed error leaving
        the inner block removes what was created since it began (the outer block may
        catch it and go on), and the outer removes the rest if the error leaves it too.
        Variables that existed before the block are never lost: one the block removes
        (:meth:`remove`) is kept under a hidden name until the outermost transaction
        commits, and a rollback brings it back.  See :mod:`ddstore._transaction`."""
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

    def _created(self, name):
        """The one place where a new variable (rows or records) is announced: the open
        transaction, if any, records it."""
        self._journal.note_created(name)

    def _write_field(self, var, offset, rows):
        """Local: ``rows`` into this rank's chunk of a record set's field at ``offset``
        (the one write of the records: :meth:`add_records`, :meth:`update_records`)."""
        self._variables.write(var, offset, rows)

    # ------------------------------------------------------------------ rows variables
    @_documented_by(Variables.add)
    def add(self, name, rows):
        return self._variables.add(name, rows)

    @_documented_by(Variables.init)
    def init(self, name, n_local, row_shape=(), dtype=np.float32):
        return self._variables.init(name, n_local, row_shape, dtype)

    @_documented_by(Variables.update)
    def update(self, name, rows, offset=0):
        return self._variables.update(name, rows, offset)

    @holds_interrupts  # (a barrier follows the round)
    def sync(self):
        """Collective: make every rank's :meth:`update` writes visible to all readers."""
        with self.collective("sync"):
            pass
        self._core.sync()

    @_documented_by(Variables.sync_windows)
    def sync_windows(self, *names):
        return self._variables.sync_windows(*names)

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

    @holds_interrupts  # (the windows are freed after the round)
    def remove(self, name, *more):
        """Collective: drop variables (or records) ``name, *more`` and free their memory;
        the names can then be added again.  All or nothing: one step checks every name
        (known, given once) before any is removed, so a layer that removes the several
        variables of one object removes them in one call.  In a :meth:`transaction`
        that did not create it, a variable is set aside instead: hidden, freed when
        the outermost one commits, back if it rolls back (:mod:`ddstore._transaction`)."""
        names = (name,) + more
        with self.collective("remove", name if not more else repr(list(names))):
            for n in names:
                if n not in self:
                    raise DDStoreValueError(f"unknown variable {n!r}; known: "
                                            f"{self.variables()}")
            if len(set(names)) != len(names):
                raise DDStoreValueError(f"remove: a variable is named twice in {names}")
        for n in names:
            if self._journal.defers(n):  # kept, hidden, until the transaction commits
                self._journal.set_aside(n)
            else:
                self._drop(n)

    def _rename(self, old, new):
        """Local: variable or record set ``old`` is ``new`` from now on (set aside)."""
        (self._records if old in self._records.table else self._variables).rename(old, new)

    def _drop(self, name):
        """Collective, after the agreement: free variable (or records) ``name``."""
        with self._unmapping():  # no thread may be reading pages that are unmapped
            if isinstance(name, str) and name in self._records.table:
                self._records.drop(name)
            else:
                self._variables.drop(name)
        self._annotations.forget(name)
        self._journal.note_removed(name)

    @_documented_by(Variables.get)
    def get(self, name, index, out=None):
        return self._variables.get(name, index, out)

    @_documented_by(Variables.get_batch)
    def get_batch(self, name, indices, out=None):
        return self._variables.get_batch(name, indices, out)

    @_documented_by(Variables.get_many)
    def get_many(self, requests):
        return self._variables.get_many(requests)

    @_documented_by(Variables.get_range)
    def get_range(self, name, start, count, out=None):
        return self._variables.get_range(name, start, count, out)

    @_documented_by(Variables.read_ranges)
    def read_ranges(self, name, starts, counts, out=None, per_row_lock=False):
        return self._variables.read_ranges(name, starts, counts, out, per_row_lock)

    # ------------------------------------------------------------------ records
    @_documented_by(Records.add_records)
    def add_records(self, name, samples):
        return self._records.add_records(name, samples)

    @_documented_by(Records.init_records)
    def init_records(self, name, schema, sizes):
        return self._records.init_records(name, schema, sizes)

    @_documented_by(Records.update_records)
    def update_records(self, name, start, stop, data):
        return self._records.update_records(name, start, stop, data)

    @_documented_by(Records.record_schema)
    def record_schema(self, name):
        return self._records.record_schema(name)

    @_documented_by(Records.record_sizes)
    def record_sizes(self, name, indices):
        return self._records.record_sizes(name, indices)

    @_documented_by(Records.get_records_packed)
    def get_records_packed(self, name, indices, alloc=None):
        return self._records.get_records_packed(name, indices, alloc)

    @_documented_by(Records.get_record)
    def get_record(self, name, index):
        return self._records.get_record(name, index)

    @_documented_by(Records.get_records)
    def get_records(self, name, indices):
        return self._records.get_records(name, indices)

    # ------------------------------------------------------------------ annotations
    @_documented_by(Annotations.annotate)
    def annotate(self, name, kind, meta=None, arrays=None, *, variables=(), cuts=None):
        return self._annotations.annotate(name, kind, meta, arrays, variables=variables,
                                          cuts=cuts)

    @_documented_by(Annotations.unannotate)
    def unannotate(self, name):
        return self._annotations.unannotate(name)

    @_documented_by(Annotations.annotation)
    def annotation(self, name, kind=None):
        return self._annotations.annotation(name, kind)

    @_documented_by(Annotations.annotations)
    def annotations(self, kind=None):
        return self._annotations.annotations(kind)

    # ------------------------------------------------------------------ checkpoints
    @_documented_by(Checkpoints.save)
    def save(self, path, *, block_bytes=BLOCK_BYTES):
        return self._checkpoints.save(path, block_bytes=block_bytes)

    @_documented_by(Checkpoints.load)
    def load(self, path):
        return self._checkpoints.load(path)

    @classmethod
    def restore(cls, path, comm=None, width=None, transport="auto", *,
                memory_budget=None, progress=None):
        """Collective: a new store holding the checkpoint at ``path`` (see :meth:`save`),
        at any rank count; ``comm``, ``width``, ``transport``, ``memory_budget`` and
        ``progress`` as in :class:`DDStore`, whose ``data_nbytes`` is the checkpoint's
        size (``width="auto"``: the smallest width whose share fits the budget).  Layers
        reopen their objects from it by name (``TemporalGraph.open(store, name)``...).
        On a refusal the new store is freed and the error raised alike on every rank."""
        return checkpoint.restore(cls, path, comm, width, transport,
                                  memory_budget=memory_budget, progress=progress)

    # ------------------------------------------------------------------ inspection
    def nrows(self, name):
        """Global rows of a variable, or number of records of a records variable."""
        if self._is_records(name):
            return self._records.rec(name).nrecords
        return self._variables.var(name).nrows

    def local_rows(self, name):
        """This rank's rows (or records) of ``name``: its ``(start, stop)`` in the group."""
        if self._is_records(name):
            rec = self._records.rec(name)
            return rec.start, rec.start + rec.n_local
        return self._variables.local_rows(name, self.group_rank)

    def _is_records(self, name):
        return type(name) is RecordSet or (isinstance(name, str) and name in self._records.table)

    def handle(self, name):
        """Local: a handle on variable (or record set) ``name``, usable in place of the
        name in every local read and inspection; bound to the variable, not the name:
        once the variable is removed, reads through it raise a DDStoreStateError, even
        if another of that name was added since (docs/store.md)."""
        if self._is_records(name):
            return self._records.rec(name)
        return self._variables.var(name)

    @_documented_by(Variables.chunk_offsets)
    def chunk_offsets(self, name):
        return self._variables.chunk_offsets(name)

    def variables(self):
        """Names of every variable (rows and records), sorted."""
        self.check_alive()
        return sorted(list(self._variables.table) + list(self._records.table))

    @_documented_by(Variables.dtype)
    def dtype(self, name):
        return self._variables.dtype(name)

    @_documented_by(Variables.row_shape)
    def row_shape(self, name):
        return self._variables.row_shape(name)

    def nbytes(self, name=None):
        """Bytes this rank holds: its chunks plus the records' offset tables; for one
        variable (rows or records) when ``name`` is given."""
        self.check_alive()
        if name is None:
            return int(self._core.local_bytes() + sum(
                r.offsets.nbytes for r in self._records.table.values()))
        if self._is_records(name):
            return self._records.nbytes(self._records.rec(name))
        return int(self._variables.nbytes(self._variables.var(name)))

    def __contains__(self, name):
        """``name in store``: a variable of that name exists (a handle: it is held)."""
        return self._variables.holds(name, self._records.table)

    @_documented_by(Variables.local_view)
    def local_view(self, name, writable=True):
        return self._variables.local_view(name, writable)

    @_documented_by(Variables.private_rows)
    def private_rows(self, name):
        return self._variables.private_rows(name)

    @_documented_by(Variables.device_views)
    def device_views(self, name, device):
        return self._variables.device_views(name, device)

    @_documented_by(Variables.fast_readers)
    def fast_readers(self, name):
        return self._variables.fast_readers(name)

    @_documented_by(Variables.core_ids)
    def core_ids(self, *names):
        return self._variables.core_ids(*names)

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
        The process's RSS grows by the peers' chunks mapped (shared pages count in each).

        Returns the bytes mapped.  ``background=True`` starts the work in a daemon thread
        (the core releases the GIL) and returns it at once: ``t.join()`` waits, then
        ``t.nbytes`` is the bytes mapped; :meth:`remove` and :meth:`free` wait for it.
        An unknown name raises :class:`DDStoreValueError` before anything is started."""
        self.check_alive()
        background = as_bool(background, "prefault: background")
        vids = []
        for name in names or self.variables():
            vids += (self._records.vids(name) if name in self._records.table else
                     [self._variables.var(name).vid])

        def run(core=self._core):
            return sum(core.prefault(v) for v in vids)
        if not background:
            return run()
        t = PrefaultThread(run)
        t.start()
        self.track(t)
        return t

    def _join_threads(self):
        """Join the background threads (prefaults, :meth:`track`), bounded at exit."""
        while self._threads:
            join_bounded(self._threads.pop())

    @contextlib.contextmanager
    def _unmapping(self):
        """Around a call that unmaps variables: the background threads joined, and the
        read-ahead threads of loaders held between two batches
        (:func:`ddstore._readers.unmapping`)."""
        self._join_threads()
        with unmapping():
            yield

    __reduce_ex__ = _lifecycle.refuse_pickle  # its rows are this process's MPI memory

    def __repr__(self):
        if not self._core.alive:
            return "DDStore(freed)"
        return (f"DDStore(rank={self.rank}/{self.size}, width={self.width}, "
                f"group_rank={self.group_rank}, replicas={self.replicas}, "
                f"transport={self.transport!r}, variables={self.variables()})")
