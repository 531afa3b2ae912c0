"""The rows variables of one store and their reads: :class:`Variables`, the component of
:class:`~ddstore.DDStore` that owns the table of variables (name -> :class:`Var`), creates
and removes them in the core, writes this rank's chunk and reads any row of the group.

Its interface to the store (the store calls it; it calls the store only through the
store's public methods: :meth:`~ddstore.DDStore.check_alive`,
:meth:`~ddstore.DDStore.collective`, ``name in store`` and
:meth:`~ddstore.DDStore.variables`):

- the public calls the store delegates to, documented here: ``add``, ``init``,
  ``update``, ``sync_windows``, ``get``, ``get_batch``, ``get_many``, ``get_range``,
  ``read_ranges``, ``chunk_offsets``, ``dtype``, ``row_shape``, ``local_view``,
  ``fast_readers``, ``core_ids``;
- for the other components (records, checkpoints): :attr:`table`, :attr:`core`,
  :meth:`var` (a checked lookup), :meth:`check_name`, :meth:`create`, :meth:`write`,
  :meth:`remove`, :meth:`drop`, :meth:`sync_all`.

Every read checks its ranges before it allocates anything.  Single-row reads are the
hot path (code written for other systems reads one sample per call): the core checks the
range, Python only turns a failure into a message.
"""
import bisect
import functools
import itertools
import math
import os
import threading
import weakref

import numpy as np

from . import _core
from ._pins import HostPins
from ._readers import ahead, resolve_ahead
from ._checks import (ASIDE, MAX_ROW_DIMS, STORABLE_NAMES, storable, as_array, as_bool,
                      as_dtype, as_indices, as_int, cast_values, check_free_names,
                      check_indices, check_name_text, integer_scalar, is_index_array,
                      is_aside, is_int, removed_error, shown_name)
from .errors import DDStoreError, DDStoreIndexError, DDStoreMemoryError, DDStoreValueError

__all__ = ["Var", "Variables", "PrefaultThread", "MAX_ROW_BYTES", "SHORT_BATCH"]

# batches up to this length given as lists of ints skip the numpy index array
SHORT_BATCH = 16
MAX_ROW_BYTES = 2 ** 63 - 1  # one row's bytes must fit the core's int64


_SERIALS = itertools.count(1)


def check_handle(handle, table, serial, kind):
    """``handle`` (a :class:`Var` or a record set, of kind ``kind`` for messages) if it
    is live in ``table`` of the store numbered ``serial``, else the error saying why."""
    if table.get(handle.name) is handle:
        return handle
    if handle.owner != serial:
        raise DDStoreValueError(f"{handle!r} is a handle of another store's {kind} "
                                f"(DDStore.handle of this store gives this store's)")
    raise removed_error(kind, handle.name)


class Var:
    """One rows variable (or one field of a record set): its core id ``vid``, ``dtype``,
    ``row_shape``, this rank's ``n_local`` rows, the group's ``nrows``, and ``mapped``
    (``(chunk starts, member views or None)``, filled by :meth:`Variables.mapped`)."""
    __slots__ = ("name", "vid", "dtype", "row_shape", "n_local", "nrows", "mapped",
                 "owner", "label", "__weakref__")

    def __init__(self, name, vid, dtype, row_shape, n_local, nrows, owner):
        self.name, self.vid, self.dtype = name, vid, dtype
        self.row_shape, self.n_local, self.nrows = row_shape, n_local, nrows
        self.mapped = None
        self.owner = owner  # the serial of the Variables that made it (handles)
        # how messages name it: the name its user gave (a transaction's set-aside name
        # never shows), made once: every read's message text formats it
        self.label = f"handle({shown_name(name)!r})"

    def __repr__(self):  # as a handle (DDStore.handle) is named in messages
        return self.label


# the variables whose chunks this process has views of (Variables.mapped)
_VIEWED = weakref.WeakSet()


def _after_fork():
    """In a process just forked from a rank (a DataLoader worker): drop the views, so
    that its reads go through the core, which refuses a variable that the rank removed
    after the fork (or a store it freed): the views would go on reading the old rows;
    and ``name in store`` asks the core too (:meth:`Variables.holds` becomes
    ``holds_in_child``: nothing more is asked in a process that was not forked)."""
    for var in list(_VIEWED):
        var.mapped = None
    _VIEWED.clear()
    Variables.holds = Variables.holds_in_child


os.register_at_fork(after_in_child=_after_fork)


class PrefaultThread(threading.Thread):
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


class Variables:
    """The rows variables of ``store`` over its core handle ``core``; ``created(name)``
    announces each new variable (the store's open transaction records it);
    ``aside_of(name)``: the hidden name of variable (or record set) ``name`` set aside by
    an open transaction, or None (what a read-ahead thread reads under the name:
    :mod:`ddstore._readers`)."""

    def __init__(self, store, core, created, aside_of):
        self.store, self.core, self.created = store, core, created
        self.aside_of = aside_of
        self.serial = next(_SERIALS)  # which store a handle belongs to
        self.table = {}  # name -> Var
        self.pins = HostPins()  # chunks page-locked in place (device_views)
        self.read_range = core.range_reader()
        self.read_rows = core.rows_reader()

    # ------------------------------------------------------------------ the table
    def var(self, name):
        """The variable ``name``, checked: the store alive, the name a rows variable
        (else a :class:`DDStoreValueError` naming the known ones).  Called where a dict
        lookup failed: its error is raised without the lookup's ``KeyError`` as context."""
        try:
            return self._var(name)
        except DDStoreError as exc:
            raise exc from None

    def _var(self, name):
        self.store.check_alive()
        if type(name) is Var:  # a handle (DDStore.handle): that variable, or refused
            return check_handle(name, self.table, self.serial, "variable")
        if hasattr(name, "nrecords") and hasattr(name, "fields"):  # a record set's
            raise DDStoreValueError(f"{name!r} is a handle of records: use get_records()")
        if not isinstance(name, str):  # a list is unhashable: named, not a TypeError
            raise DDStoreValueError(f"unknown variable {name!r:.80} (a "
                                    f"{type(name).__name__}: names are str); known: "
                                    f"{self.store.variables()}")
        var = self.table.get(name)
        if var is None and ahead():  # set aside by an open transaction: still readable
            var = resolve_ahead(self.table, name, self.aside_of)
        if var is None:
            others = sorted(n for n in self.store.variables() if n not in self.table)
            if name in others:  # a name the store holds that is not rows: records
                raise DDStoreValueError(f"variable {name!r} holds records: use "
                                        f"get_records()")
            known = sorted(self.table) + others
            raise DDStoreValueError(f"unknown variable {name!r}; known: {known} (add and "
                                    f"init are collective: a variable exists once every "
                                    f"rank has made it, a rank that skipped the call has "
                                    f"none)")
        return var

    def lookup(self, name):
        """The variable's metadata: one dict lookup on the hot path, messages otherwise
        (and handles, :meth:`var`)."""
        if type(name) is Var and self.table.get(name.name) is name:
            return name  # a live handle, without an exception's cost
        try:
            return self.table[name]
        except (KeyError, TypeError):
            return self.var(name)

    def holds_in_rank(self, name, records):
        """``name in store``: ``name`` a handle held (a :class:`Var` of :attr:`table`, a
        record set of ``records``) or the name of a variable or record set."""
        if type(name) is Var:
            return self.table.get(name.name) is name
        if isinstance(name, str):
            return name in self.table or name in records
        key = getattr(name, "name", None)  # a record set's handle, or anything else
        return isinstance(key, str) and records.get(key) is name

    def holds_in_child(self, name, records):
        """:meth:`holds` in a process forked from the rank: also not removed by the rank
        since the fork, nor the store freed, which this process's copy of the tables
        cannot tell (the core's flags, ``dds_held``)."""
        if not self.holds_in_rank(name, records):
            return False
        held = name if not isinstance(name, str) else (self.table.get(name) or
                                                       records.get(name))
        fields = (held,) if type(held) is Var else held.fields.values()
        return all(self.core.held(var.vid) for var in fields)

    holds = holds_in_rank  # (holds_in_child in a forked process: _after_fork)

    def check_name(self, name):
        """A new variable's (or record set's) name: a non-empty str the store does not
        hold yet."""
        if not isinstance(name, str) or not name:
            raise DDStoreValueError(f"variable name must be a non-empty str, got {name!r}")
        check_name_text(name, "variable name")
        if is_aside(name):  # (shown without the suffix in messages, hidden from lists)
            raise DDStoreValueError(f"variable name {name!r} ends as the store's own names "
                                    f"of what an open transaction set aside do "
                                    f"('<name>{ASIDE}<digits>'); pick another name")
        if name in self.store:
            check_free_names(None, f"variable {name!r}", "remove it or pick another name")
        field = self.record_field(name)
        if field is not None:
            check_free_names(None, f"a field named {name!r} (key {field[1]!r} of records "
                             f"{field[0]!r})", "pick another name")

    def record_field(self, name):
        """``(record set, key)`` when ``name`` is the full name (``"<records>/<key>"``)
        of a field of a record set of the store, else None: a rows variable of that name
        would stand beside the field in a checkpoint, which could not be restored."""
        store = self.store
        for i, c in enumerate(name):
            if c == "/" and name[:i] in store and name[:i] not in self.table and \
                    name[i + 1:] in store.record_schema(name[:i]):
                return name[:i], name[i + 1:]
        return None

    @staticmethod
    def check_dtype(name, dtype):
        if not storable(dtype):
            why = ("numpy's long double, whose padding bytes replicas of one value do not "
                   "share: store float64 or complex128" if dtype.kind in "fc" and
                   dtype.fields is None else "no object, string or structured dtypes")
            raise DDStoreValueError(
                f"variable {name!r}: dtype {dtype} cannot be stored; allowed: "
                f"{STORABLE_NAMES} ({why})")

    def check_groups(self, name, counts):
        """Refuse, from every rank's agreed local row ``counts``, groups that would hold
        different totals: each replica group holds the same global rows (its members
        add their chunks of them), else reads, lengths and samplers differ between
        groups.  Raised alike (agreed values)."""
        w = self.core.group_size
        totals = [sum(counts[g:g + w]) for g in range(0, len(counts), w)]
        if len(set(totals)) > 1:
            told = "; ".join(f"group {g} (ranks {g * w}-{g * w + w - 1}): {t}"
                             for g, t in enumerate(totals[:4]))
            raise DDStoreValueError(
                f"variable {name!r}: the replica groups add different rows ({told}"
                f"{'; ...' if len(totals) > 4 else ''}); with width={w} on "
                f"{len(counts)} ranks each group of {w} holds the same global rows (its "
                f"members' chunks of them, e.g. ddstore.partition(n, width, group_rank))")

    def create(self, name, n_local, dtype, row_shape, zeroed=False):
        """Collective, after a step's round: allocate a variable whose metadata (dtype,
        row shape) all ranks have agreed on (not entered in :attr:`table`); ``zeroed``:
        its rows read as zeros until written (for those filled in pieces).  A row too
        large is decided from the agreed metadata, in exact integers; the core agrees on
        its own failures (memory...)."""
        if len(row_shape) > MAX_ROW_DIMS:
            raise DDStoreValueError(
                f"variable {name!r}: a row shape of {len(row_shape)} dimensions; allowed: "
                f"at most {MAX_ROW_DIMS} (numpy's {MAX_ROW_DIMS + 1}, less the rows' own)")
        row_bytes = int(dtype.itemsize) * math.prod(int(s) for s in row_shape)
        # (numpy's own bound, which a row of no bytes passes: its nonzero dimensions'
        # product times the item size; (0, 2**63 - 1, 2**63 - 1) is no array's shape)
        array_bytes = int(dtype.itemsize) * math.prod(int(s) for s in row_shape if s)
        if max(row_bytes, array_bytes) > MAX_ROW_BYTES:
            raise DDStoreValueError(
                f"variable {name!r}: one row of shape {tuple(row_shape)} and dtype "
                f"{dtype} is {row_bytes} bytes"
                f"{f' ({array_bytes} without its zero dimensions)' if not row_bytes else ''}"
                f"; allowed: at most 2**63 - 1")
        vid = self.core.add(name, n_local, row_bytes)
        if zeroed:
            self.core.zero_private(vid)
        return Var(name, vid, dtype, tuple(row_shape), n_local, self.core.nrows(vid),
                   self.serial)

    def write(self, var, offset, rows):
        """Local: ``rows`` into this rank's chunk of ``var`` at local row ``offset``; rows
        of another trailing shape are refused (the core copies whole rows of ``var``)."""
        rows = np.ascontiguousarray(rows, dtype=var.dtype)
        if rows.shape[1:] != tuple(var.row_shape):
            raise DDStoreValueError(f"{var.name!r}: rows of shape {tuple(rows.shape[1:])} "
                                    f"written, the variable's rows have shape "
                                    f"{tuple(var.row_shape)}")
        self.core.write_local(var.vid, offset, rows)

    def remove(self, var):
        """Collective: free ``var``'s memory in the core (its page-locked views first)."""
        self.pins.release(var.vid)
        self.core.remove(var.vid)

    def drop(self, name):
        """Collective, after the agreement: remove rows variable ``name``."""
        self.remove(self.table.pop(name))

    def rename(self, old, new):
        """Local, alike on every rank (a transaction setting a variable aside): rows
        variable ``old`` is named ``new`` (a free name) from now on."""
        var = self.var(old)
        del self.table[old]
        var.name = new
        self.table[new] = var

    def sync_all(self):
        """Collective, after a step: make every rank's writes visible (the core's sync)."""
        self.core.sync()

    def clear(self):
        """Forget every variable (the store is freed; :meth:`unpin` came before)."""
        self.table.clear()

    def unpin(self):
        """Undo every page-locking of :meth:`device_views`: before the core frees."""
        self.pins.release()

    def nbytes(self, var):
        """Bytes of this rank's chunk of ``var``."""
        return var.n_local * var.dtype.itemsize * int(np.prod(var.row_shape, dtype=np.int64))

    # ------------------------------------------------------------------ writing
    def add(self, name, rows):
        """Collective: add variable ``name`` with this rank's chunk ``rows``.

        ``rows`` is an array ``[n_local, *row_shape]``; ``n_local`` may differ between
        ranks and may be 0; dtype and row shape must be the same on every rank.  The
        variable's global rows (within each group) are the members' chunks concatenated in
        group-rank order.  The data is copied into the store and visible to every rank
        when ``add`` returns.
        """
        # (a transaction: a copy that fails on one rank after the variable is made is
        # agreed, and the variable removed on every rank)
        with self.store.transaction(f"add {name!r}"):
            with self.store.collective("add", name) as step:
                self.check_name(name)
                arr = as_array(rows, f"variable {name!r}: rows")
                self.check_dtype(name, arr.dtype)
                if arr.ndim < 1:
                    raise DDStoreValueError(f"variable {name!r}: rows must have at least "
                                            f"one dimension [n_local, *row_shape], got a "
                                            f"scalar")
                arr = np.ascontiguousarray(arr)  # (its memory: agreed before any is made)
                counts = step.agree(arr.shape[0], same={"dtype": str(arr.dtype),
                                                        "row shape": arr.shape[1:]})
                self.check_groups(name, counts)
                var = self.create(name, arr.shape[0], arr.dtype, arr.shape[1:])
            try:
                with self.store.collective(None):  # the copy, agreed
                    if arr.shape[0]:
                        self.core.write_local(var.vid, 0, arr)
                self.core.sync()
            finally:
                # entered once every rank's rows are written and synchronised: another
                # thread of this process that finds the name reads them, never the
                # zeros before them (on a failure, entered all the same: the
                # transaction then removes it, as any variable created)
                self.table[name] = var
                self.created(name)

    def init(self, name, n_local, row_shape=(), dtype=np.float32):
        """Collective: create variable ``name`` with room for ``n_local`` local rows,
        each of shape ``row_shape`` (a tuple of integers >= 0, or one integer) and
        ``dtype`` (a numpy or torch dtype of :data:`~ddstore._checks.STORABLE_NAMES`).

        Fill it with :meth:`update` (in pieces, without a second copy), then call
        :meth:`sync` before anyone reads.  Rows not written read as zeros.
        """
        with self.store.collective("init", name) as step:
            self.check_name(name)
            # (any kind: check_dtype words the refusal of those not stored)
            dt = as_dtype(dtype, f"variable {name!r}: dtype", "biufcmMOSUV",
                          STORABLE_NAMES)  # ('>f4': float32)
            try:
                shape = tuple(as_int(s, "row_shape entry") for s in (
                    row_shape if np.iterable(row_shape) else (row_shape,)))
            except (TypeError, ValueError) as exc:
                raise DDStoreValueError(f"variable {name!r}: bad row_shape: "
                                        f"{exc}") from exc
            self.check_dtype(name, dt)
            if any(s < 0 for s in shape):
                raise DDStoreValueError(f"variable {name!r}: row_shape {shape} is negative")
            if not is_int(n_local) or not 0 <= n_local <= MAX_ROW_BYTES:
                raise DDStoreValueError(f"variable {name!r}: n_local={n_local!r} must be "
                                        f"an integer in [0, 2**63 - 1]")
            counts = step.agree(int(n_local), same={"dtype": str(dt), "row shape": shape})
            self.check_groups(name, counts)
            self.table[name] = self.create(name, int(n_local), dt, shape, zeroed=True)
            self.created(name)

    def update(self, name, rows, offset=0):
        """Local: write ``rows`` into this rank's chunk at local row ``offset``.

        Other ranks see the new rows after the next collective :meth:`sync`.  ``rows``
        must have the variable's row shape and a dtype castable to it (same kind, or
        any integer into an integer variable); a value the variable's dtype cannot hold
        (300 into int8, -1 into uint8, 1e300 into float32) is refused, naming it, and
        nothing is written.
        """
        var = self.var(name)
        arr = as_array(rows, f"update {name!r}: rows")
        if arr.ndim == 0:
            shape = ", ".join(["n"] + [str(d) for d in var.row_shape])
            raise DDStoreValueError(f"update {name!r}: rows must be an array of rows "
                                    f"[{shape}], got a scalar {arr!r:.60}")
        if arr.shape[1:] != var.row_shape:
            raise DDStoreValueError(f"update {name!r}: rows have row shape {arr.shape[1:]},"
                                    f" the variable has {var.row_shape}")
        if arr.dtype != var.dtype:  # (equal: nothing to cast or check)
            arr = cast_values(arr, var.dtype, f"update {name!r}", given=rows)
        offset = as_int(integer_scalar(offset), f"update {name!r}: offset")
        if offset < 0 or offset + arr.shape[0] > var.n_local:
            raise DDStoreIndexError(
                f"update {name!r}: rows [{offset}, {offset + arr.shape[0]}) outside the "
                f"local chunk [0, {var.n_local})")
        if arr.shape[0]:
            self.core.write_local(var.vid, offset, np.ascontiguousarray(arr))

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
        ids = [self.var(n).vid for n in names]
        self.core.sync_windows(ids)

    # ------------------------------------------------------------------ reading
    def get(self, name, index, out=None):
        """Local: global row ``index`` of variable ``name``.

        Returns a new array of the row shape (a numpy scalar for 0-d rows), or fills and
        returns ``out`` (a C-contiguous writable array of the row's shape and dtype), which
        allocates nothing.  ``index`` must be an integer in ``[0, nrows)``.
        """
        if type(name) is Var and self.table.get(name.name) is name:
            var = name  # a live handle (lookup's test, inline: the per-sample path)
        else:
            try:
                var = self.table[name]
            except (KeyError, TypeError):
                var = self.var(name)  # raises: unknown name, records, freed store
        if type(index) is not int:  # numpy ints (as fast as ints), 0-d integer tensors
            index = int(index) if isinstance(index, np.integer) else \
                as_int(integer_scalar(index), f"get {name!r}: index")
        if out is None and 0 <= index < var.nrows:
            # the hot path: a row this process maps (its own chunk, a node-local
            # member's) is copied by numpy, without a call into the core.  What
            # mapped_rows does, inline: the call and the slice cost 0.6 -> 0.85 us
            starts, views = var.mapped or self.mapped(var)
            m = bisect.bisect_right(starts, index) - 1
            view = views[m]
            if view is not None:
                return view[index - starts[m]].copy()
        buf = (np.empty(var.row_shape, var.dtype) if out is None else
               self.out(var, var.row_shape, out))
        try:
            self.read_range(var.vid, index, 1, buf)
        except (DDStoreIndexError, OverflowError):
            raise DDStoreIndexError(f"get {name!r}: index {index} out of range "
                                    f"[0, {var.nrows})") from None
        return buf if (out is not None or var.row_shape) else buf[()]

    def mapped_rows(self, var, start, count):
        """A view of global rows ``[start, start + count)`` of ``var`` (in range, count
        >= 1) when they lie in one chunk this process maps (its own, a node-local
        member's), else None: the reads that numpy copies without a call into the
        core."""
        starts, views = var.mapped or self.mapped(var)
        m = bisect.bisect_right(starts, start) - 1
        view = views[m]
        if view is None or start + count > starts[m + 1]:
            return None
        return view[start - starts[m]:start - starts[m] + count]

    def mapped(self, var):
        """``(chunk starts, views)`` of ``var``, kept on it: where each member's chunk
        starts (a list of ``width + 1`` ints) and a numpy view of the chunks this process
        maps (None for members read with MPI_Get, and for every member in a process
        forked from the rank: its reads go through the core, which refuses what the
        rank removed after the fork)."""
        starts = [int(x) for x in self.core.chunk_offsets(var.vid)]
        forked = _core.forked()
        views = [None if forked else self.core.member_view(var.vid, m, var.dtype,
                                                           var.row_shape)
                 for m in range(self.core.group_size)]
        var.mapped = (starts, views)
        _VIEWED.add(var)
        return var.mapped

    def get_batch(self, name, indices, out=None):
        """Local: rows ``indices`` of ``name``, in request order, as ``[len, *row_shape]``.

        Indices may repeat and may belong to any members of the group; every remote row
        is fetched in one access epoch with one flush per target.  ``out``, if given, must
        be a C-contiguous writable array of the right dtype and shape; it is filled and
        returned.
        """
        if type(name) is Var and self.table.get(name.name) is name:
            var = name  # a live handle (lookup's test, inline: the per-sample path)
        else:
            try:
                var = self.table[name]
            except (KeyError, TypeError):
                var = self.var(name)  # raises: unknown name, records, freed store
        # a short list of Python ints (what per-sample code passes) goes to the core as
        # it is; anything else becomes an int64 array first
        t = type(indices)
        if out is None and (t is list or t is tuple) and len(indices) == 1:
            i = indices[0]
            if type(i) is int and 0 <= i < var.nrows:
                rows = self.mapped_rows(var, i, 1)  # as get does
                if rows is not None:
                    return rows.copy()
        if (t is list or t is tuple) and 0 < len(indices) <= SHORT_BATCH and all(
                type(i) is int for i in indices):
            buf = (np.empty((len(indices),) + var.row_shape, var.dtype) if out is None
                   else self.out(var, (len(indices),) + var.row_shape, out))
            try:
                self.read_rows(var.vid, indices, buf)
                return buf
            except (DDStoreIndexError, OverflowError):
                pass  # explained below, with the position of the bad index
        idx = as_indices(indices, f"get_batch {name!r}", var.nrows)
        n = idx.shape[0]
        out = (np.empty((n,) + var.row_shape, dtype=var.dtype) if out is None else
               self.out(var, (n,) + var.row_shape, out))
        if n:
            try:  # the core checks every index; explain a failure in user terms
                self.core.read(var.vid, idx, None, out)
            except DDStoreIndexError as exc:
                failed = exc  # (explained below, outside the handler: one error shown)
            else:
                return out
            check_indices(idx, var.nrows, f"get_batch {name!r}")
            raise failed
        return out

    def get_many(self, requests):
        """Local: several reads made as one, ``requests`` a sequence of ``(name,
        indices)`` or ``(name, indices, out)`` (rows as :meth:`get_batch` reads them;
        ``out`` as it takes it, or None) and ``(name, starts, counts, out)`` (row ranges
        as :meth:`read_ranges` reads them); returns the arrays in request order.

        Every request is checked before anything is read; then the remote rows of all
        of them are fetched together: one round trip per remote owner for the whole
        call instead of one per request (the features and labels of a batch's nodes),
        and between nodes one request message per owner (docs/cluster.md)."""
        if isinstance(requests, (str, bytes, dict)) or not hasattr(requests, "__iter__"):
            raise DDStoreValueError(f"get_many: requests must be a sequence of (name, "
                                    f"indices) pairs, got {type(requests).__name__}")
        plan = []
        for i, request in enumerate(requests):
            if (isinstance(request, (str, bytes)) or not hasattr(request, "__len__")
                    or len(request) not in (2, 3, 4)):
                raise DDStoreValueError(f"get_many: request {i} must be a (name, indices) "
                                        f"pair, a (name, indices, out) triple or (name, "
                                        f"starts, counts, out), got {request!r:.80}")
            name = request[0]
            try:
                var = self.lookup(name)
            except DDStoreError as exc:  # (which request's: the message names the name)
                raise type(exc)(f"get_many (request {i}): {exc}") from None
            if len(request) == 4:
                _, starts, counts, out = request
                starts, counts, n = self.ranges(var, starts, counts,
                                                f"get_many {name!r} (request {i})")
            else:
                _, starts, out = request if len(request) == 3 else (*request, None)
                counts = None
                if not is_index_array(starts):
                    starts = as_indices(starts, f"get_many {name!r} (request {i})",
                                        var.nrows)
                n = starts.shape[0]
            shape = (n,) + var.row_shape
            if out is None:
                out = np.empty(shape, dtype=var.dtype)
            else:
                try:
                    out = self.out(var, shape, out)
                except DDStoreValueError as exc:  # (which request's: two may read 'x')
                    raise DDStoreValueError(f"get_many (request {i}): {exc}") from None
            plan.append((var, starts, counts, out))
        try:  # the core checks every index; explain a failure in user terms
            self.core.read_many([(var.vid, starts, counts, out)
                                 for var, starts, counts, out in plan])
        except DDStoreIndexError as exc:
            failed = exc  # (explained below, outside the handler: one error shown)
        except DDStoreValueError as exc:  # (outputs that overlap: the request numbers)
            raise DDStoreValueError(str(exc).replace("dds_read_many", "get_many", 1)) \
                from None
        else:
            return [out for _, _, _, out in plan]
        for i, (var, idx, counts, _) in enumerate(plan):
            if counts is None:  # (ranges were checked whole by ranges())
                check_indices(idx, var.nrows, f"get_many {var.name!r} (request {i})")
        raise failed

    def ranges(self, var, starts, counts, what):
        """``(starts, counts, total rows)`` of row ranges of ``var`` as int64 arrays,
        every range checked (without overflow), or raise naming ``what``."""
        starts = as_indices(starts, what, var.nrows)
        counts = as_indices(counts, what, var.nrows + 1, noun="count")
        if starts.shape != counts.shape:
            raise DDStoreValueError(f"{what}: {len(starts)} starts but {len(counts)} "
                                    f"counts")
        try:
            total = self.core.ranges_total(var.vid, starts, counts) if len(starts) else 0
        except (DDStoreIndexError, DDStoreValueError) as exc:  # the core's: name the call
            raise type(exc)(f"{what}: {exc}") from None
        return starts, counts, total

    def get_range(self, name, start, count, out=None):
        """Local: ``count`` consecutive global rows from ``start`` (may span owners), as
        ``[count, *row_shape]``; ``out`` as in :meth:`get_batch`."""
        var = self.lookup(name)
        if out is None and type(start) is int and type(count) is int and count > 0 and \
                0 <= start and start + count <= var.nrows:
            rows = self.mapped_rows(var, start, count)  # as get does
            if rows is not None:
                return rows.copy()
        if type(start) is not int:
            start = as_int(integer_scalar(start), f"get_range {name!r}: start")
        if type(count) is not int:
            count = as_int(integer_scalar(count), f"get_range {name!r}: count")
        if count < 0:
            raise DDStoreValueError(f"get_range {name!r}: count={count} must be >= 0")
        if start < 0 or start + count > var.nrows:
            raise DDStoreIndexError(f"get_range {name!r}: rows [{start}, {start + count}) "
                                    f"out of range [0, {var.nrows})")
        shape = (count,) + var.row_shape
        out = self.alloc(var, shape, f"get_range {name!r}") if out is None else \
            self.out(var, shape, out)
        if count:
            self.read_range(var.vid, start, count, out)
        return out

    def read_ranges(self, name, starts, counts, out=None, per_row_lock=False):
        """Local: row ranges ``[starts[i], starts[i] + counts[i])`` packed in order.

        The general read that ``get_batch`` and ``get_range`` are special cases of (used
        by the graph and spatiotemporal layers).  Every range is checked (without
        overflow) before the result is allocated; ``out``, if given, is filled instead
        (as :meth:`get_batch`'s).  ``per_row_lock`` reads each row in its
        own lock/get/unlock epoch: the slow path, for benchmarks only (not thread-safe).
        """
        var = self.lookup(name)
        what = f"read_ranges {name!r}"
        if per_row_lock is not False:
            per_row_lock = as_bool(per_row_lock, f"{what}: per_row_lock")
        starts, counts, total = self.ranges(var, starts, counts, what)
        shape = (total,) + var.row_shape
        out = self.alloc(var, shape, what) if out is None else self.out(var, shape, out)
        if len(starts):
            self.core.read(var.vid, starts, counts, out,
                           _core.READ_PER_ROW_LOCK if per_row_lock else 0)
        return out

    @staticmethod
    def alloc(var, shape, what):
        try:
            return np.empty(shape, dtype=var.dtype)
        except MemoryError:
            nbytes = int(np.prod(shape, dtype=np.float64)) * var.dtype.itemsize
            raise DDStoreMemoryError(f"{what}: the result ({shape[0]} rows, "
                                     f"{nbytes / 1e9:.4g} GB) cannot be allocated") from None

    @staticmethod
    def out(var, shape, out):
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
    def local_rows(self, name, group_rank):
        """This rank's rows of ``name``: its ``(start, stop)`` in the group."""
        offsets = self.core.chunk_offsets(self.var(name).vid)
        return int(offsets[group_rank]), int(offsets[group_rank + 1])

    def chunk_offsets(self, name):
        """Global row where each member's chunk of rows variable ``name`` starts, and its
        row count last (``int64[width + 1]``; local, no communication)."""
        return self.core.chunk_offsets(self.var(name).vid)

    def dtype(self, name):
        """Local: the numpy dtype of rows variable ``name`` (as stored: native order)."""
        return self.var(name).dtype

    def row_shape(self, name):
        """Local: the shape of one row of ``name`` (a tuple; ``()`` for scalar rows)."""
        return self.var(name).row_shape

    def private_rows(self, name):
        """Local: whether this rank's chunk of rows variable ``name`` lies in private
        memory (a rank with no node-local member: width 1, or alone on its node), where
        a process forked before keeps a copy of the rows as they were (docs/store.md,
        its paragraph on forks); False where the chunk is shared memory or holds no
        rows."""
        return self.core.private_rows(self.var(name).vid)

    def local_view(self, name, writable=True):
        """A writable numpy view of this rank's own chunk of rows variable ``name``
        (``[n_local, *row_shape]``, no copy), for layers that scatter rows into their own
        chunk (what :meth:`update` does, without the per-call checks); other ranks see
        the writes after the next collective :meth:`sync`.  It counts as a write for
        processes forked from the rank (docs/store.md, its paragraph on forks);
        ``writable=False`` gives a read-only view that does not.  Valid until the
        variable is removed or the store freed."""
        var = self.var(name)
        if as_bool(writable, f"local_view({name!r}): writable"):
            return self.core.local_view(var.vid, var.dtype, var.row_shape)
        view = self.core.member_view(var.vid, self.core.group_rank, var.dtype,
                                     var.row_shape)
        view.flags.writeable = False
        return view

    def device_views(self, name, device):
        """Local: per group member, a CPU tensor over that member's chunk of rows
        variable ``name`` (``[rows, *row_shape]``, no copy) that a copy to ``device``
        reads where it lies, or None for a member this process does not map (its rows
        are read with MPI_Get).  On a CUDA ``device`` each chunk is page-locked in place
        once (``cudaHostRegister``), so ``dev_tensor.copy_(view[a:b], non_blocking=True)``
        is a DMA with no host copy; a chunk CUDA refuses is None (warned once).  For
        layers that copy rows to a device without staging them (the window loader's
        ``direct=True``).  Valid until the variable is removed or the store freed: the
        page-locking is undone then, after the devices' work is done."""
        from .device import check_device
        var = self.var(name)
        device = check_device(device, f"device_views({name!r})")
        core, store = self.core, self.store
        members = (core.member_view(var.vid, m, var.dtype, var.row_shape)
                   for m in range(store.group_size))
        return self.pins.views(var.vid, name, members, device)

    def fast_readers(self, name):
        """The unchecked hot path of rows variable ``name``, for layers that check their
        own arguments (e.g. :mod:`pyddstore`): ``(read_range, read_rows)`` where
        ``read_range(start, count, out)`` reads rows ``[start, start + count)`` and
        ``read_rows(indices, out)`` the rows of a list of Python ints.  ``out`` is a
        writable C-contiguous buffer of at least that many rows; the core checks the
        range (raising :class:`DDStoreIndexError`) and that ``out`` holds the rows (a
        smaller or read-only one raises :class:`DDStoreValueError`; nothing is written
        past its end); nothing else is checked.  Valid until the variable is removed."""
        var = self.var(name)
        return (functools.partial(self.read_range, var.vid),
                functools.partial(self.read_rows, var.vid))

    def core_ids(self, *names):
        """For layers that build C handles over stored rows variables (the samplers'
        ``ddstore._core.CSC`` / ``TCSR``): ``(core, ids)``, this store's core handle and
        the core ids of variables ``names``, in order.  An unknown name raises a
        :class:`DDStoreValueError` naming the known ones; nothing else is checked.  Ids
        are valid until their variable is removed or the store freed."""
        ids = [self.var(n).vid for n in names]
        return self.core, ids
