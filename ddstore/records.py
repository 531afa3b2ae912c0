"""Variable-size records (graphs, deltas): each key one raw array of concatenated rows
plus an offsets table that every rank keeps, so locating a record needs no communication
and reading one runs no code.  :class:`Records` is the component of
:class:`~ddstore.DDStore` that owns the record sets (name -> :class:`RecordSet`).

Its interface: the public records calls the store delegates to (documented here:
``add_records``, ``init_records``, ``update_records``, ``record_schema``,
``record_sizes``, ``get_records_packed``, ``get_record``, ``get_records``); for the
store and the checkpoints, :attr:`Records.table`, :meth:`Records.drop`,
:meth:`Records.vids` and :meth:`Records.nbytes`.  It calls the store only through its
public methods and attributes (``collective``, ``transaction``, ``check_alive``,
``group_comm``, ``group_rank``) and creates each field as a rows variable of the store's
:class:`~ddstore.variables.Variables` (not entered in its table)."""
import numpy as np

from ._checks import (STORABLE_NAMES, storable, as_array, as_dtype, as_indices, as_int,
                      check_indices, check_name_text, integer_scalar, is_aside,
                      sample_at, shown_name)
from ._fingerprint import fingerprint
from ._readers import ahead, resolve_ahead
from .errors import DDStoreError, DDStoreIndexError, DDStoreValueError
from .variables import Var, check_handle

__all__ = ["Records", "RecordSet", "COPY_BLOCK_BYTES"]

COPY_BLOCK_BYTES = 64 << 20  # rows add_records concatenates at a time, per key


class RecordSet:
    """One record set: its ``keys``, a field (:class:`~ddstore.variables.Var`) per key,
    the ``offsets`` table every rank keeps (``[nrecords + 1, nkeys]``), this rank's
    first record ``start`` and its ``n_local`` records."""
    __slots__ = ("name", "keys", "fields", "offsets", "nrecords", "start", "n_local",
                 "owner", "label")

    def __init__(self, name, keys, fields, offsets, start, n_local, owner):
        self.name, self.keys, self.fields = name, keys, fields
        self.offsets, self.nrecords = offsets, offsets.shape[0] - 1
        self.start, self.n_local = start, n_local
        self.owner = owner  # the serial of the store's Variables (handles)
        # how messages name it: the name its user gave (a transaction's set-aside name
        # never shows), made once: every read's message text formats it
        self.label = f"handle({shown_name(name)!r})"

    def __repr__(self):  # as a handle (DDStore.handle) is named in messages
        return self.label


class Records:
    """The record sets of ``store``; their fields are rows variables created through
    ``variables`` (the store's :class:`~ddstore.variables.Variables`); ``created(name)``
    announces each new record set (the store's open transaction records it) and
    ``write(var, offset, rows)`` writes rows into this rank's chunk of a field."""

    def __init__(self, store, variables, created, write):
        self.store, self.variables, self.created = store, variables, created
        self.write = write
        self.table = {}  # name -> RecordSet

    def drop(self, name):
        """Collective, after the agreement: remove record set ``name``."""
        for var in self.table.pop(name).fields.values():
            self.variables.remove(var)

    def rename(self, old, new):
        """Local, alike on every rank (a removal inside a transaction setting the
        record set aside): record set ``old`` is named ``new`` from now on."""
        rec = self.table.pop(old)
        rec.name = new
        for key, var in rec.fields.items():
            var.name = f"{new}/{key}"
        self.table[new] = rec

    def vids(self, name):
        """The core ids of the fields of record set ``name``."""
        return [v.vid for v in self.table[name].fields.values()]

    def nbytes(self, rec):
        """Bytes this rank holds of record set ``rec``: its offsets table and fields."""
        return int(rec.offsets.nbytes + sum(self.variables.nbytes(v)
                                            for v in rec.fields.values()))

    def clear(self):
        self.table.clear()

    def add_records(self, name, samples):
        """Collective: add variable-size records; ``samples`` is this rank's chunk.

        Each sample is a dict of arrays with the same keys, dtypes and trailing shapes
        (on every rank) and a first dimension that varies (0 allowed).  Each key is stored
        as one raw array of the concatenated rows plus an offsets table that every rank
        keeps, so locating a record needs no communication and reading one runs no code
        (no pickle).  Ranks may hold 0 samples, but at least one rank must hold one.
        Each sample is read twice, ``samples[i]``: once for the schema and row counts,
        once to be copied, in blocks of samples of about :data:`COPY_BLOCK_BYTES` (one
        block held at once, not a key's rows twice); to load more than the samples can
        hold at once, use :meth:`init_records` and fill block by block.
        """
        with self.store.collective("add_records", name) as step:
            self.variables.check_name(name)
            try:
                schema, counts = _record_schema(name, samples)
            except (DDStoreError, MemoryError):  # a MemoryError: agreed as one by the step
                raise
            except Exception as exc:  # a sample numpy cannot read
                raise DDStoreValueError(f"records {name!r}: {type(exc).__name__}: "
                                        f"{exc}") from exc
            info = step.agree(schema)
            schemas = [(r, s) for r, s in enumerate(info) if s is not None]
            if not schemas:
                raise DDStoreValueError(f"records {name!r}: no rank holds any sample "
                                        f"(empty data set)")
            schema = _same_schema(name, schemas)
            self.check_fields(name, schema)
            # (each sample's rows per key, in the schema's key order: read in the step,
            # with the schema; read again only to be copied, below)
            counts = counts.reshape(len(samples), len(schema))  # (no sample: 0 x keys)
        with self.store.transaction(f"add_records {name!r}"):
            # found by name once every rank's records are written and synchronised (a
            # thread of this process reading it meanwhile would read zeros); entered
            # whatever happens, so that a failure's rollback removes it
            rec = self.create(name, schema, counts, enter=False)
            try:
                self._same_in_groups(rec)
                # a copy that fails on one rank (memory): agreed, then undone everywhere
                with self.store.collective(None):
                    self._copy_samples(name, {k: rec.fields[k] for k, _, _ in schema},
                                       samples, counts)
                self.variables.sync_all()
            finally:
                self.table[name] = rec

    def _copy_samples(self, name, fields, samples, counts):
        """Local: every key's rows of ``samples`` (``counts[i, j]`` rows of key ``j`` in
        sample ``i``), in order, into this rank's chunk of the key's variable
        (``fields``: ``{key: variable}`` in the schema's key order), the samples of
        about :data:`COPY_BLOCK_BYTES` at a time, each read once more (its second and
        last read: the first gave the schema); a sample read again must give what its
        first read gave (its rows, dtype and trailing shape: a Dataset that crops at
        random is refused, naming it)."""
        row = np.array([max(1, v.dtype.itemsize * int(np.prod(v.row_shape, dtype=np.int64)))
                        for v in fields.values()], dtype=np.int64)
        ends = np.cumsum(counts @ row)  # bytes up to each sample's end
        at = [0] * len(fields)  # rows written so far, per key
        first = 0
        while first < len(samples):
            # the samples whose bytes end within a block of this one's start (one at least)
            start = int(ends[first - 1]) if first else 0
            last = max(first + 1, int(np.searchsorted(ends, start + COPY_BLOCK_BYTES,
                                                      side="right")))
            read = [self._again(name, samples, i, fields, counts[i])
                    for i in range(first, last)]
            for j, var in enumerate(fields.values()):
                rows = int(counts[first:last, j].sum())
                if rows:
                    data = np.concatenate([arrays[j] for arrays in read])
                    self.write(var, at[j], data)
                    at[j] += rows
                    del data
            del read
            first = last

    @staticmethod
    def _again(name, samples, i, fields, rows):
        """``samples[i]`` read (once) for the copy: its arrays in ``fields``' key order,
        refused unless each has the ``rows``, dtype and trailing shape its first read
        had."""
        sample = samples[i]
        out = []
        for (key, var), n in zip(fields.items(), rows):
            what = f"records {name!r}: sample {i} key {key!r}"
            if not isinstance(sample, dict) or key not in sample:
                raise DDStoreValueError(f"{what}: read again to be copied, the sample is "
                                        f"a {type(sample).__name__} without the key; "
                                        f"{_SAME}")
            arr = as_array(sample[key], what)
            if arr.dtype != var.dtype or arr.shape != (n, *var.row_shape):
                raise DDStoreValueError(
                    f"{what} gave dtype {arr.dtype} shape {tuple(arr.shape)} when read "
                    f"again to be copied, dtype {var.dtype} shape "
                    f"{(int(n), *var.row_shape)} the first time; {_SAME}")
            out.append(arr)
        return out

    def init_records(self, name, schema, sizes):
        """Collective: create records ``name`` for this rank's chunk without their data:
        fill it with :meth:`update_records` (block by block, no second copy of the
        chunk), then call :meth:`sync` before anyone reads.

        ``schema`` is ``{key: (dtype, trailing_shape)}``, the same on every rank;
        ``sizes`` is ``{key: first-dimension size of each local record}`` (one integer
        sequence per key, all as long as this rank's record count, which may be 0).
        The records are then read like those of :meth:`add_records`; rows not written
        read as zeros.
        """
        with self.store.collective("init_records", name) as step:
            self.variables.check_name(name)
            spec, counts = _records_spec(name, schema, sizes)
            info = step.agree(spec)
            schema = _same_schema(name, list(enumerate(info)))
            self.check_fields(name, schema)
        with self.store.transaction(f"init_records {name!r}"):  # (the groups' check)
            self._same_in_groups(self.create(name, schema, counts, zeroed=True))

    def update_records(self, name, start, stop, data):
        """Local: write local records ``[start, stop)`` of ``name`` (numbered from 0 on
        each rank, as given to :meth:`init_records`); ``data`` is ``{key: their rows
        concatenated}``, as ``get_records_packed`` returns them.  Other ranks see them
        after the next collective :meth:`sync`."""
        rec = self.rec(name)
        start = as_int(integer_scalar(start), f"update_records {name!r}: start")
        stop = as_int(integer_scalar(stop), f"update_records {name!r}: stop")
        if not 0 <= start <= stop <= rec.n_local:
            raise DDStoreIndexError(f"update_records {name!r}: records [{start}, {stop}) "
                                    f"outside the local chunk [0, {rec.n_local})")
        if not isinstance(data, dict) or set(data) != set(rec.keys):
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise DDStoreValueError(f"update_records {name!r}: data must be a dict with "
                                    f"keys {sorted(rec.keys)}, got {got}")
        base = rec.offsets[rec.start]
        lo, hi = rec.offsets[rec.start + start] - base, rec.offsets[rec.start + stop] - base
        arrays = []  # every key checked before any is written: a refusal writes nothing
        for j, key in enumerate(rec.keys):
            var = rec.fields[key]
            arr = as_array(data[key], f"update_records {name!r}: key {key!r}")
            if arr.shape != (hi[j] - lo[j],) + var.row_shape:
                raise DDStoreValueError(
                    f"update_records {name!r}: key {key!r} has shape {arr.shape}; records "
                    f"[{start}, {stop}) need {(int(hi[j] - lo[j]),) + var.row_shape}")
            if arr.dtype != var.dtype:
                raise DDStoreValueError(f"update_records {name!r}: key {key!r} has dtype "
                                        f"{arr.dtype}, the records have {var.dtype}")
            arrays.append((var, int(lo[j]), arr))
        for var, at, arr in arrays:
            if arr.shape[0]:
                self.write(var, at, arr)

    def _same_in_groups(self, rec):
        """Collective, inside the transaction that made ``rec``: refuse replica groups
        whose records differ (their count, or a record's sizes: the group's offsets
        table, which each of its members holds whole, compared by an XXH64
        fingerprint): each group holds the same records, its members' chunks of them (a
        group whose chunks add up to other records read other rows for the same record,
        and a save kept one group's layout).  Raised alike (agreed values); nothing to
        compare (no round) with one group."""
        if self.store.replicas == 1:
            return
        with self.store.collective(None) as step:  # (raised inside: agreed)
            shares = step.agree((rec.nrecords, fingerprint(rec.offsets)))
            self._refuse_other_groups(rec, shares)

    def _refuse_other_groups(self, rec, shares):
        w = self.store.group_size
        for g in range(1, len(shares) // w):
            (n, fp), (n0, fp0) = shares[g * w], shares[0]
            if (n, fp) != (n0, fp0):
                what = (f"{n} records against {n0}" if n != n0 else
                        f"the same count ({n}), but records of other sizes "
                        f"(offsets fingerprint 0x{fp:016x} against 0x{fp0:016x})")
                raise DDStoreValueError(
                    f"records {rec.name!r}: the replica groups hold different records "
                    f"(group {g}, ranks {g * w}-{g * w + w - 1}: {what} in group 0); "
                    f"with width={w} on {len(shares)} ranks each group of {w} holds the "
                    f"same records (its members' chunks of them, e.g. "
                    f"ddstore.partition(n, width, group_rank))")

    def check_fields(self, name, schema):
        """Refuse (from the agreed ``schema``) a record set whose fields' full names
        (``"<name>/<key>"``) are already a variable's or another record set's field's:
        the two would be one name in a checkpoint, which could then not be restored."""
        fields = {f"{r}/{k}": r for r, rec in self.table.items() for k in rec.keys}
        for key, _, _ in schema:
            full = f"{name}/{key}"
            if full in self.store or full in fields:
                held = (f"variable {full!r}" if full in self.store else
                        f"a field named {full!r} (of records {fields[full]!r})")
                raise DDStoreValueError(f"records {name!r}: key {key!r} makes a field "
                                        f"named {full!r}, but the store already holds "
                                        f"{held}; pick another name or key")

    def create(self, name, schema, counts, enter=True, zeroed=False):
        """Collective: allocate the fields of agreed ``schema`` for local ``counts``
        (``[n_local, nkeys]``) and build the offsets table every rank keeps; returns the
        record set, entered in :attr:`table` unless ``enter`` is False (the caller enters
        it once its records are written, and whatever happens: a rollback removes it by
        name); ``zeroed`` as :meth:`Variables.create`'s."""
        keys = [k for k, _, _ in schema]
        fields = {}
        try:
            for j, (key, dstr, trailing) in enumerate(schema):
                fields[key] = self.variables.create(f"{name}/{key}", int(counts[:, j].sum()),
                                                    np.dtype(dstr), tuple(trailing), zeroed)
        except Exception:  # alike on every rank (e.g. out of memory): undo it all
            for var in fields.values():
                self.variables.remove(var)
            raise
        all_counts = self.store.group_comm.allgather(counts)
        table = np.concatenate(all_counts, axis=0)
        offsets = np.zeros((table.shape[0] + 1, len(keys)), dtype=np.int64)
        np.cumsum(table, axis=0, out=offsets[1:])
        start = sum(len(c) for c in all_counts[:self.store.group_rank])
        rec = RecordSet(name, keys, fields, offsets, start, len(counts),
                        self.variables.serial)
        if enter:
            self.table[name] = rec
        self.created(name)
        return rec

    def rec(self, name):
        """Record set ``name``, checked: the store alive, the name a record set (else a
        :class:`DDStoreValueError` naming the known ones)."""
        self.store.check_alive()
        if type(name) is RecordSet:  # a handle (DDStore.handle): that set, or refused
            return check_handle(name, self.table, self.variables.serial, "record set")
        if type(name) is Var:
            raise DDStoreValueError(f"{name!r} is a handle of a rows variable, not "
                                    f"records: use get_batch()")
        if not isinstance(name, str):  # a list is unhashable: named, not a TypeError
            raise DDStoreValueError(f"unknown records {name!r:.80} (a "
                                    f"{type(name).__name__}: names are str); known: "
                                    f"{sorted(self.table)}")
        rec = self.table.get(name)
        if rec is None and ahead():  # set aside by an open transaction: still readable
            rec = resolve_ahead(self.table, name, self.variables.aside_of)
        if rec is None:
            if name in self.variables.table:
                raise DDStoreValueError(f"variable {name!r} holds rows, not records: use "
                                        f"get_batch()")
            raise DDStoreValueError(f"unknown records {name!r}; known: "
                                    f"{sorted(self.table)}")
        return rec

    def record_schema(self, name):
        """``{key: (dtype, trailing_shape)}`` of a records variable."""
        rec = self.rec(name)
        return {k: (v.dtype, v.row_shape) for k, v in rec.fields.items()}

    def record_sizes(self, name, indices):
        """``{key: first-dimension sizes}`` of records ``indices`` (no communication)."""
        rec = self.rec(name)
        idx = as_indices(indices, f"record_sizes {name!r}", rec.nrecords)
        check_indices(idx, rec.nrecords, f"record_sizes {name!r}")
        diff = rec.offsets[idx + 1] - rec.offsets[idx]
        return {k: diff[:, j] for j, k in enumerate(rec.keys)}

    def get_records_packed(self, name, indices, alloc=None):
        """Local: records ``indices`` as ``({key: concatenated rows}, {key: sizes})``.

        The rows of every record, in request order, concatenated per key (what a graph
        batch is built from); one batched read per key.  ``alloc``: None (new arrays),
        or a callable ``alloc(shape, dtype)`` returning a writable C-contiguous numpy
        array of that shape and dtype (or None for a new one) that the rows of a key are
        read into: e.g. a view of a reused, pinned staging buffer.
        """
        return self._packed(name, indices, alloc, "get_records_packed")

    def _packed(self, name, indices, alloc, call):
        """:meth:`get_records_packed`, its messages naming ``call``."""
        rec = self.rec(name)
        idx = as_indices(indices, f"{call} {name!r}", rec.nrecords)
        check_indices(idx, rec.nrecords, f"{call} {name!r}")
        starts = rec.offsets[idx]
        sizes = rec.offsets[idx + 1] - starts
        if alloc is not None and not callable(alloc):
            raise DDStoreValueError(f"{call} {name!r}: alloc={alloc!r:.60} is not callable; "
                                    f"allowed: None (new arrays) or alloc(shape, dtype) "
                                    f"returning the array to fill")
        data, size_by_key = {}, {}
        for j, key in enumerate(rec.keys):
            var = rec.fields[key]
            s = np.ascontiguousarray(starts[:, j])
            c = np.ascontiguousarray(sizes[:, j])
            shape = (int(c.sum()),) + var.row_shape
            out = alloc(shape, var.dtype) if alloc is not None else None
            if out is None:
                out = np.empty(shape, dtype=var.dtype)
            else:  # the one check of an output array (Variables.out)
                try:
                    self.variables.out(var, shape, out)
                except DDStoreValueError as exc:
                    raise DDStoreValueError(f"get_records_packed {name!r}: "
                                            f"alloc({shape}, {var.dtype}): {exc}") from None
            if len(idx):
                self.variables.core.read(var.vid, s, c, out)
            data[key], size_by_key[key] = out, c
        return data, size_by_key

    def get_record(self, name, index):
        """Local: record ``index`` as a dict ``{key: array}`` (one read per key, no index
        arrays: the per-sample path)."""
        if type(name) is RecordSet and self.table.get(name.name) is name:
            rec = name  # a live handle
        else:
            try:
                rec = self.table[name]
            except (KeyError, TypeError):
                rec = self.rec(name)  # raises: unknown name, rows variable, freed store
        if type(index) is not int:
            index = as_int(integer_scalar(index), f"get_record {name!r}: index")
        if not 0 <= index < rec.nrecords:
            raise DDStoreIndexError(f"get_record {name!r}: index {index} out of range "
                                    f"[0, {rec.nrecords})")
        first, stop = rec.offsets[index:index + 2].tolist()
        out = {}
        read = self.variables.read_range
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
        data, sizes = self._packed(name, indices, None, "get_records")
        n = len(next(iter(sizes.values()))) if sizes else len(as_indices(
            indices, f"get_records {name!r}", self.rec(name).nrecords))
        out = [dict() for _ in range(n)]  # records with no keys are {} each
        for key, arr in data.items():
            for rec, part in zip(out, np.split(arr, np.cumsum(sizes[key])[:-1])):
                rec[key] = part
        return out


#: what a sample whose second read differs from its first is told
_SAME = ("the samples must give the same arrays each time they are read (a random "
         "transform belongs after the store)")


def _record_schema(name, samples):
    """``(schema, counts)``: the schema, a tuple of (key, dtype.str, trailing shape)
    sorted by key (None without samples), and each sample's first dimension per key in
    that order (int64 ``[samples, keys]``), from one read of every sample,
    ``samples[i]`` for ``i`` in ``range(len(samples))``; raises
    :class:`DDStoreValueError` naming the first bad sample."""
    if isinstance(samples, dict) or not hasattr(samples, "__len__"):
        raise DDStoreValueError(f"records {name!r}: samples must be a sequence "
                                f"of dicts, got {type(samples).__name__}")
    schema, counts = None, np.zeros((0, 0), dtype=np.int64)
    n = len(samples)
    for i in range(n):  # by index, as the copy reads them (a map-style torch Dataset)
        sample = sample_at(samples, i, f"records {name!r}")
        if not isinstance(sample, dict):
            raise DDStoreValueError(f"records {name!r}: sample {i} is a "
                                    f"{type(sample).__name__}, not a dict")
        this, rows = [], []
        for key in sorted(sample, key=str):
            if not isinstance(key, str) or not key or is_aside(key):
                raise DDStoreValueError(f"records {name!r}: sample {i} has key {key!r}; "
                                        f"keys must be non-empty str, none ending "
                                        f"'~aside<digits>' (as init_records')")
            check_name_text(key, f"records {name!r}: sample {i} key")
            arr = as_array(sample[key], f"records {name!r}: sample {i} key {key!r}")
            if not storable(arr.dtype):
                raise DDStoreValueError(f"records {name!r}: sample {i} key {key!r} has dtype "
                                        f"{arr.dtype}, which cannot be stored; allowed: "
                                        f"{STORABLE_NAMES}")
            if arr.ndim < 1:
                raise DDStoreValueError(f"records {name!r}: sample {i} key {key!r} is a scalar; "
                                        f"values need a first (variable) dimension")
            this.append((key, arr.dtype.str, tuple(arr.shape[1:])))
            rows.append(arr.shape[0])
        this = tuple(this)
        if schema is None:
            schema = this
            counts = np.empty((len(samples), len(this)), dtype=np.int64)
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
            raise DDStoreValueError(f"records {name!r}: sample {i}: {msg}")
        counts[i] = rows
    return schema, counts


def _same_schema(name, schemas):
    """The schema all ranks in ``[(rank, schema)]`` agree on, or an error naming two that
    differ (raised on every rank: each compares the same gathered list)."""
    for r, s in schemas:
        if s != schemas[0][1]:
            raise DDStoreValueError(
                f"records {name!r}: keys, dtypes or trailing shapes differ between rank "
                f"{schemas[0][0]} ({_fmt_schema(schemas[0][1])}) and rank {r} "
                f"({_fmt_schema(s)})")
    return schemas[0][1]


def _records_spec(name, schema, sizes):
    """(schema tuple, counts ``[n_local, nkeys]``) of init_records' arguments; raises
    :class:`DDStoreValueError`."""
    what = f"init_records {name!r}"
    if not isinstance(schema, dict) or not schema:
        raise DDStoreValueError(f"{what}: schema must be a non-empty dict "
                                f"{{key: (dtype, trailing_shape)}}")
    spec = []
    for key in sorted(schema, key=str):
        try:
            dstr, trailing = schema[key]
            trailing = tuple(as_int(t, "trailing dimension") for t in trailing)
        except (TypeError, ValueError) as exc:
            raise DDStoreValueError(f"{what}: schema[{key!r}] must be "
                                    f"(dtype, trailing_shape): {exc}")
        # the package's dtype rule (init's: a torch dtype taken, a numpy value refused),
        # in this machine's byte order, as add and add_records store their data
        # (update_records' data comes to it: as_array)
        dt = as_dtype(dstr, f"{what}: schema[{key!r}] dtype", "biufcmMOSUV",
                      STORABLE_NAMES)
        if not isinstance(key, str) or not key or not storable(dt) or \
                any(t < 0 for t in trailing) or is_aside(key):
            raise DDStoreValueError(f"{what}: schema[{key!r}] = "
                                    f"({dt}, {trailing}) cannot be stored "
                                    f"(allowed: a non-empty str key, a dtype of "
                                    f"{STORABLE_NAMES}, dims >= 0; no key ending "
                                    f"'~aside<digits>', the store's own)")
        check_name_text(key, f"{what}: schema key")
        spec.append((key, dt.str, trailing))
    if not isinstance(sizes, dict) or set(sizes) != set(schema):
        got = sorted(sizes, key=str) if isinstance(sizes, dict) else type(sizes).__name__
        raise DDStoreValueError(f"{what}: sizes must be a dict with the "
                                f"schema's keys {sorted(schema, key=str)}, "
                                f"got {got}")
    try:
        cols = [np.asarray(sizes[k]) for k, _, _ in spec]
        if any(c.ndim != 1 or (c.size and c.dtype.kind not in "iu") for c in cols):
            raise ValueError("each must be a 1-d sequence of integers")
        if len({c.size for c in cols}) > 1:
            raise ValueError(f"lengths differ: {[c.size for c in cols]}")
        for (k, _, _), c in zip(spec, cols):  # (uint64 beyond int64 wrapped to negative)
            if c.size and c.dtype.kind == "u" and int(c.max()) > 2 ** 63 - 1:
                raise ValueError(f"sizes[{k!r}] holds {int(c.max())}; allowed: integers "
                                 f"in [0, 2**63 - 1]")
        counts = np.stack([c.astype(np.int64) for c in cols], axis=1) if cols[0].size \
            else np.zeros((0, len(spec)), dtype=np.int64)
        if (counts < 0).any():
            raise ValueError("a size is negative")
        # the rows of a key: the sum of its sizes, within int64 (it wrapped to a
        # negative row count, blamed on an internal n_local)
        big = [k for (k, _, _), c in zip(spec, counts.T)  # (exact sums only where
               if c.size and int(c.max()) > (2 ** 63 - 1) // c.size  # they could wrap)
               and sum(c.tolist()) > 2 ** 63 - 1]
        if big:
            raise ValueError(f"sizes[{big[0]!r}] add up to more than 2**63 - 1 rows")
    except (TypeError, ValueError, OverflowError) as exc:
        raise DDStoreValueError(f"{what}: bad sizes: {exc}") from exc
    return tuple(spec), counts


def _fmt_schema(schema):
    return ", ".join(f"{k}: {np.dtype(d)}{list(s)}" for k, d, s in schema)
