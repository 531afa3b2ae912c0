"""CFF: one ADIOS2 BP file holding every sample, per key concatenated, plus offsets.

Layout written by :func:`write_records_adios` (``ddstore.graphs.write_adios`` uses it)::

    attribute  ddstore/format    "ddstore-cff"
    attribute  ddstore/schema    JSON [[key, numpy dtype str, trailing shape], ...]
    attribute  ddstore/meta      JSON object, free for the writer (the graph layout)
    variable   nsamples          int64 scalar N
    variable   data/<key>        [total rows of key, *trailing]  every sample's rows, in order
    variable   offsets/<key>     int64 [N + 1]   sample i's rows: offsets[i] .. offsets[i+1]

bool and float16 (which ADIOS2 cannot store) are stored as uint8/uint16 bit patterns and
viewed back on reading.  A key whose samples all have 0 rows has no ``data/<key>``.
A rank reads only its range: ``offsets[start:stop+1]`` and the rows between.  The
writer streams blocks (``data/<key>`` and ``offsets/<key>`` are ADIOS2 joined arrays,
BP5); readers see plain global arrays.

The writer never removes or overwrites what it did not write: the file is written
under a temporary name beside ``path`` (``<path>.writing-<pid>``, removed if the write
fails) and moved to ``path`` once complete; an existing ``path`` is replaced only when
it is a CFF file (a previous write), and anything else there is refused up front.
"""
import itertools
import json
import math
import os
import re

import numpy as np

from ..errors import DDStoreValueError
from .base import (Source, check_index, check_range, file_share, regular_file,
                   written_in_place, written_path)

__all__ = ["AdiosSource", "write_records_adios"]

_FORMAT = "ddstore-cff"
_VIEW_AS = {"b": np.uint8, "f2": np.uint16}
# bytes per element of ADIOS2's type names
_ADIOS_ITEMSIZE = {"int8_t": 1, "uint8_t": 1, "char": 1, "int16_t": 2, "uint16_t": 2,
                   "int32_t": 4, "uint32_t": 4, "float": 4, "int64_t": 8, "uint64_t": 8,
                   "double": 8, "float complex": 8, "double complex": 16,
                   "long double": 16}


# the ADIOS2 type names a numpy dtype (as stored: _storage_view) is written as
_ADIOS_TYPES = {"i1": {"int8_t", "char"}, "u1": {"uint8_t", "char"}, "i2": {"int16_t"},
                "u2": {"uint16_t"}, "i4": {"int32_t"}, "u4": {"uint32_t"},
                "i8": {"int64_t"}, "u8": {"uint64_t"}, "f4": {"float"}, "f8": {"double"}}
_OFFSET_TYPES = {"int64_t", "uint64_t", "int32_t", "uint32_t"}


def _import_adios2():
    try:
        import adios2
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise DDStoreValueError("ADIOS2 files need the 'adios2' package "
                                "(pip install adios2)") from exc
    return adios2


def _storage_view(arr):
    """``arr`` as ADIOS2 stores it: bools as bytes, float16 as uint16, complex as pairs
    of reals in a last axis of 2 (ADIOS2's Python reader has no complex types)."""
    if arr.dtype.kind == "c":
        arr = np.ascontiguousarray(arr)
        return arr[..., None].view(arr.real.dtype)
    key = "b" if arr.dtype.kind == "b" else arr.dtype.str[1:]
    view = _VIEW_AS.get(key)
    return arr.view(view) if view is not None else arr


def _stored_trailing(dtype, trailing):
    """The trailing shape of ``data/<key>`` in the file for rows of ``dtype`` and
    ``trailing`` (a complex value is stored as two reals: one more axis of 2)."""
    return tuple(trailing) + ((2,) if dtype.kind == "c" else ())


def write_records_adios(records, path, meta=None, block_bytes=64 << 20, progress=False,
                        total=None, call="write_records_adios"):
    """Write ``records`` (dicts of arrays with the same keys, dtypes and trailing shapes;
    the first dimension varies) to the BP file ``path``, streaming.

    ``records`` may be any iterable (a list, a lazy sequence, a generator): records are
    gathered into blocks of about ``block_bytes`` and each block is written to disk before
    the next is read, so writing holds one block in memory, not the data set (per key,
    ``data/<key>`` is an ADIOS2 joined array that grows block by block).  ``meta`` is any
    JSON-serialisable object stored with the file (``AdiosSource.meta``).  A record that
    differs from record 0 raises :class:`DDStoreValueError` naming it, and the partial
    file is removed.  ``progress=True`` shows a bar (``total``: the record count, where
    ``records`` has no ``len``).  Local (not collective): call it on one rank.  Returns
    the number of records.

    ``path`` must be new, an empty directory or a CFF file of an earlier write (replaced
    only once the new file is complete); any other file or directory there is refused,
    untouched.  ``call``: the name errors give the call (a layer's writer passes its
    own).
    """
    adios2 = _import_adios2()
    path = written_path(path, call)
    what = f"{call}({path!r})"
    it = iter(records)
    try:
        first = next(it)
    except StopIteration:
        raise DDStoreValueError(f"{what}: no records (empty data set)") from None
    if not isinstance(first, dict) or not first:
        raise DDStoreValueError(f"{what}: record 0 must be a non-empty dict of arrays")
    schema = [(k, np.asarray(v).dtype.str, list(np.asarray(v).shape[1:]))
              for k, v in first.items()]
    for key, dstr, _ in schema:
        if np.asarray(first[key]).ndim < 1:
            raise DDStoreValueError(f"{what}: record 0 key {key!r} is a scalar; values "
                                    f"need a first (variable) dimension")
        dt = np.dtype(dstr)
        if dt.kind not in "biufc" or (dt.kind == "f" and dt.itemsize > 8) or \
                (dt.kind == "c" and dt.itemsize > 16):  # (ADIOS2 has no long double)
            raise DDStoreValueError(f"{what}: record 0 key {key!r} has dtype "
                                    f"{dt}, which a CFF file does not hold; allowed: "
                                    f"bool, integers, float16/32/64, complex64/128")
    with written_in_place(path, what, "ddstore CFF file", _is_cff) as temporary:
        try:
            writer = _BlockWriter(adios2, temporary, schema, block_bytes)
        except Exception as exc:
            raise DDStoreValueError(f"{what}: cannot create the file: "
                                    f"{_short(exc)}") from None
        from ..cli import progress_bar
        if total is None and hasattr(records, "__len__"):
            total = len(records)
        n = 0
        try:
            with progress_bar(progress, desc=f"writing {os.path.basename(path)}",
                              unit="record", total=total) as bar:
                for rec in itertools.chain([first], it):
                    writer.add(_checked(rec, schema, n, what))
                    n += 1
                    bar.update(1)
            writer.finish(n, meta)
        except BaseException:
            writer.close()
            raise
    return n


def _checked(rec, schema, i, what):
    """``rec`` as ``[array per schema key]`` after checking it against record 0."""
    if not isinstance(rec, dict) or len(rec) != len(schema) or \
            any(k not in rec for k, _, _ in schema):
        keys = sorted(rec) if isinstance(rec, dict) else type(rec).__name__
        raise DDStoreValueError(f"{what}: record {i} has keys {keys}, record 0 has "
                                f"{sorted(k for k, _, _ in schema)}")
    out = []
    for key, dstr, trailing in schema:
        arr = np.asarray(rec[key])
        if arr.dtype.str != dstr or list(arr.shape[1:]) != trailing or arr.ndim < 1:
            raise DDStoreValueError(
                f"{what}: record {i} key {key!r} has dtype {arr.dtype} shape "
                f"{tuple(arr.shape)}, record 0 has {np.dtype(dstr)} rows of "
                f"{tuple(trailing)}")
        out.append(arr)
    return out


# what ADIOS2 (BP4, BP5) writes into a BP directory: subfiles data.N, metadata and
# its index, the writer's profile
_BP_ENTRY = re.compile(r"(data|md|mmd)\.\d+|md\.idx|profiling\.json|\.bpversion")


def _is_cff(path):
    """Raise unless ``path`` is a CFF file (what :func:`write_records_adios` wrote) and,
    as a BP directory, holds nothing but what ADIOS2 writes into one (a file of the
    user's in it would go with it when a write replaces it)."""
    if os.path.isdir(path):
        other = sorted(e for e in os.listdir(path) if not _BP_ENTRY.fullmatch(e))
        if other:
            raise ValueError(f"it also holds {len(other)} entries ADIOS2 does not write: "
                             f"{other[:3]}")
    AdiosSource(path).close()


def _remove_reader_profile(path):
    """Remove the timing report that ADIOS2's BP5 reader (2.10 to 2.12 at least) writes,
    unasked and whatever its ``Profile`` parameter says, when it closes a file:
    ``/tmp/<file name>_<reader's pid in hex>_profiling.json``.  Only this process's report
    on this file's name is removed; a read from the store leaves nothing behind."""
    name = os.path.basename(path)
    report = f"/tmp/{name}_{os.getpid():x}_profiling.json"
    try:
        if os.path.isfile(report) and not os.path.islink(report):
            os.remove(report)
    except OSError:  # pragma: no cover - another user's file, or gone already
        pass


class _BlockWriter:
    """Writes a CFF file block by block: per key, the rows (``data/<key>``) and the
    per-record end offsets (``offsets/<key>``, after a leading 0) are ADIOS2 joined
    arrays (BP5), so neither the record count nor the row totals are needed up front;
    each block is flushed to disk (``PerformDataWrite``) before the next is gathered."""

    def __init__(self, adios2, path, schema, block_bytes=64 << 20):
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        self.path, self.schema, self.block_bytes = path, schema, int(block_bytes)
        self._adios2 = adios2
        self._adios = adios2.Adios()
        self._io = self._adios.declare_io("ddstore-cff-writer")
        self._io.set_engine("BP5")
        self._engine = self._io.open(path, adios2.bindings.Mode.Write)
        self._engine.begin_step()
        self._vars = {}
        self._pending, self._pending_bytes = [], 0
        self._ends = [0] * len(schema)  # rows written so far, per key
        for j in range(len(schema)):
            self._put(self._var("offsets", j, np.int64, []), np.zeros(1, dtype=np.int64))

    def _var(self, kind, j, dtype, trailing):
        name = f"{kind}/{self.schema[j][0]}"
        var = self._vars.get(name)
        if var is None:
            probe = np.zeros((1,) + tuple(trailing), dtype=dtype)
            shape = [self._adios2.JoinedDim] + list(trailing)
            var = self._io.define_variable(name, probe, shape, [],
                                           [1] + list(trailing))
            self._vars[name] = var
        return var

    def _put(self, var, arr):
        var.set_selection([[], list(arr.shape)])
        self._engine.put(var, arr, self._adios2.bindings.Mode.Sync)

    def add(self, arrays):
        self._pending.append(arrays)
        self._pending_bytes += sum(a.nbytes for a in arrays) + 8 * len(arrays)
        if self._pending_bytes >= self.block_bytes:
            self.flush()

    def flush(self):
        if not self._pending:
            return
        for j, (key, dstr, trailing) in enumerate(self.schema):
            parts = [rec[j] for rec in self._pending]
            counts = np.fromiter((p.shape[0] for p in parts), np.int64, len(parts))
            ends = self._ends[j] + np.cumsum(counts)
            self._put(self._var("offsets", j, np.int64, []), ends)
            if ends[-1] > self._ends[j]:
                data = np.ascontiguousarray(_storage_view(np.concatenate(parts)))
                self._put(self._var("data", j, data.dtype, data.shape[1:]), data)
            self._ends[j] = int(ends[-1])
        self._engine.perform_data_write()
        self._pending, self._pending_bytes = [], 0

    def finish(self, n, meta):
        self.flush()
        count = self._io.define_variable("nsamples", np.array([n], dtype=np.int64))
        self._engine.put(count, np.array([n], dtype=np.int64), self._adios2.bindings.Mode.Sync)
        self._io.define_attribute("ddstore/format", _FORMAT)
        self._io.define_attribute("ddstore/schema", json.dumps(self.schema))
        self._io.define_attribute("ddstore/meta", json.dumps(meta))
        self._engine.end_step()
        self._engine.close()
        self._engine = None

    def close(self):
        """Close the engine (after an error: the partial file is then removed by
        :func:`~ddstore.sources.base.written_in_place`)."""
        if self._engine is not None:
            try:
                self._engine.end_step()
                self._engine.close()
            except Exception:  # pragma: no cover - best effort
                pass
            self._engine = None


class AdiosSource(Source):
    """Records stored in one ADIOS2 BP file (CFF), read a row range at a time.

    ``meta`` is the writer's metadata; ``schema`` is ``[(key, dtype, trailing)]``.
    :meth:`read` issues two ADIOS2 reads per key for a whole range; :meth:`read_one`
    reads one sample (the per-sample baseline of the benchmarks).  Close it (or use it as
    a context manager) to release the file.
    """

    def __init__(self, path):
        adios2 = _import_adios2()
        # (without a trailing separator: ADIOS2 names its reader's report in /tmp after
        # the last component, removed at close)
        given = os.fsdecode(os.fspath(path))
        self.path = given.rstrip(os.sep) or given
        if not os.path.exists(self.path):
            raise DDStoreValueError(f"ADIOS2 file {self.path!r} does not exist")
        if not os.path.isdir(self.path):  # a BP4/BP5 directory, or a BP3 file
            regular_file(self.path, "ADIOS2 file ")  # (a FIFO: ADIOS2 waited forever)
        else:  # an empty index: ADIOS2 reads it without a check (a segmentation fault)
            index = os.path.join(self.path, "md.idx")
            if os.path.isfile(index) and os.path.getsize(index) == 0:
                raise DDStoreValueError(f"ADIOS2 file {self.path!r} is corrupt: its index "
                                        f"{index!r} is empty (the writer did not finish?)")
        try:
            self._reader = adios2.FileReader(self.path)
            variables = self._reader.available_variables()
            attributes = self._reader.available_attributes()
        except Exception as exc:
            raise DDStoreValueError(f"ADIOS2 file {self.path!r} cannot be opened: "
                                    f"{_short(exc)}") from None
        try:
            if "ddstore/schema" not in attributes or "nsamples" not in variables:
                missing = [n for n, where in (("ddstore/schema", attributes),
                                              ("nsamples", variables)) if n not in where]
                raise DDStoreValueError(
                    f"ADIOS2 file {self.path!r} is not a ddstore CFF file: missing "
                    f"{missing} (expected attribute ddstore/schema, variables nsamples, "
                    f"data/<key>, offsets/<key>); found variables {sorted(variables)}")
            self._check_sizes(variables)  # (before any read: one of a cut file waits)
            try:
                schema = json.loads(self._reader.read_attribute("ddstore/schema"))
                self.schema = [(str(k), np.dtype(d), tuple(int(s) for s in t))
                               for k, d, t in schema]
                self.meta = (json.loads(self._reader.read_attribute("ddstore/meta"))
                             if "ddstore/meta" in attributes else None)
                self._n = int(np.asarray(self._reader.read("nsamples")).reshape(-1)[0])
            except DDStoreValueError:
                raise
            except Exception as exc:
                raise DDStoreValueError(f"ADIOS2 file {self.path!r}: corrupt ddstore "
                                        f"metadata ({_short(exc)})") from None
            self._total = {}
            for key, dtype, trailing in self.schema:
                off_name = f"offsets/{key}"
                if off_name not in variables:
                    raise DDStoreValueError(f"ADIOS2 file {self.path!r}: missing variable "
                                            f"{off_name!r} for key {key!r}")
                shape = _shape(variables[off_name])
                if shape != (self._n + 1,):
                    raise DDStoreValueError(
                        f"ADIOS2 file {self.path!r}: variable {off_name!r} has shape "
                        f"{shape}, expected ({self._n + 1},)")
                self._check_type(variables, off_name, _OFFSET_TYPES, "an offsets array")
                first = self._read(off_name, [0], [1])[0]
                if first != 0:  # (every sample's rows would be shifted by it)
                    raise DDStoreValueError(
                        f"ADIOS2 file {self.path!r}: variable {off_name!r} starts at "
                        f"{first}, not 0 (the first sample's rows begin at row 0)")
                last = self._read(off_name, [self._n], [1])[0]
                self._total[key] = int(last)
                data_name = f"data/{key}"
                if last and data_name not in variables:
                    raise DDStoreValueError(f"ADIOS2 file {self.path!r}: missing variable "
                                            f"{data_name!r} for key {key!r}")
                if data_name in variables:  # the type the schema's dtype is stored as
                    stored = np.dtype(_VIEW_AS.get("b" if dtype.kind == "b" else
                                                   dtype.str[1:], dtype))
                    stored = stored if dtype.kind != "c" else np.dtype(dtype.char.lower())
                    self._check_type(variables, data_name,
                                     _ADIOS_TYPES.get(stored.str[1:], ()),
                                     f"key {key!r} of the schema ({dtype})")
                if last:
                    dshape = _shape(variables[data_name])
                    expected = (int(last),) + _stored_trailing(dtype, trailing)
                    if dshape != expected:
                        raise DDStoreValueError(
                            f"ADIOS2 file {self.path!r}: variable {data_name!r} has shape "
                            f"{dshape}, expected {expected}")
            if self._n <= 0:
                raise DDStoreValueError(f"ADIOS2 file {self.path!r} holds no samples "
                                        f"(empty data set)")
        except Exception:
            self.close()
            raise

    def _check_type(self, variables, name, allowed, what):
        """Refuse variable ``name`` stored as a type not in ``allowed`` (ADIOS2's type
        names; a value of another type was converted on reading: 7.7 offsets read as
        7, x.5 values of an integer key truncated)."""
        kind = str(variables[name].get("Type", "")).strip()
        if kind not in allowed:
            raise DDStoreValueError(f"ADIOS2 file {self.path!r}: variable {name!r} is "
                                    f"stored as {kind or 'an unknown type'}; {what} is "
                                    f"stored as {' or '.join(sorted(allowed)) or 'none'}")

    def _check_sizes(self, variables):
        """Refuse a truncated file before ADIOS2 reads from it (ADIOS2 waits forever for
        bytes that a short data file does not hold).  The metadata promises every
        variable's global shape; a CFF file is written uncompressed, so its data files
        (``data.*``) must hold at least the bytes of every array it declares.  (BP5 may
        end a data file with a few bytes that hold no array data, so a cut of only those
        passes; it also reads correctly.)"""
        if not os.path.isdir(self.path):
            return  # not a BP4/BP5 directory: nothing to compare
        promised = 0
        for name, info in variables.items():
            shape = _shape(info)
            if not shape:
                continue  # scalars live in the metadata
            itemsize = _ADIOS_ITEMSIZE.get(str(info.get("Type", "")).strip())
            if itemsize is None:
                continue
            promised += math.prod(int(n) for n in shape) * itemsize
        files = sorted(f for f in os.listdir(self.path) if re.fullmatch(r"data\.\d+", f))
        held = sum(os.path.getsize(os.path.join(self.path, f)) for f in files)
        if held < promised:
            raise DDStoreValueError(
                f"ADIOS2 file {self.path!r} is truncated or incomplete: its metadata "
                f"declares {promised} bytes of array data, but its data files "
                f"({', '.join(files) or 'none'}) hold {held} bytes; re-write or re-copy it")

    def close(self):
        """Release the file."""
        reader = getattr(self, "_reader", None)
        if reader is not None:
            self._reader = None
            try:
                reader.close()
            except Exception:  # pragma: no cover
                pass
            _remove_reader_profile(self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        self.close()

    def __len__(self):
        return self._n

    def describe(self, index):
        return f"sample {index} of ADIOS2 file {self.path!r}"

    def file_marks(self):
        """The file's mark (a BP4/BP5 directory: every file in it, names, sizes and
        ends, but ``profiling.json``, whose timings differ between two writes of the
        same data; see :func:`~ddstore.sources.base.file_share`), so that ranks handed
        different files (a stale copy on one node) are refused."""
        if not os.path.isdir(self.path):
            return (file_share(self.path),)
        files = sorted(e.path for e in os.scandir(self.path)
                       if e.is_file() and e.name != "profiling.json")
        return (file_share(self.path, files=files),)

    def _read(self, name, start, count):
        if self._reader is None:
            raise DDStoreValueError(f"ADIOS2 file {self.path!r} is closed")
        try:
            return np.asarray(self._reader.read(name, start, count))
        except Exception as exc:
            raise DDStoreValueError(f"ADIOS2 file {self.path!r}: reading {name!r} "
                                    f"start={start} count={count} failed: "
                                    f"{_short(exc)}") from None

    def read_offsets(self, start, stop):
        """``{key: int64 offsets[start:stop + 1]}``: sample ``i``'s rows of ``key`` are
        ``offsets[i - start]`` to ``offsets[i - start + 1]`` (one small read per key;
        checked for corruption)."""
        start, stop = check_range(f"ADIOS2 file {self.path!r}", start, stop, self._n)
        out = {}
        for key, _, _ in self.schema:
            if stop == start:
                offsets = np.zeros(1, dtype=np.int64)
            else:
                offsets = self._read(f"offsets/{key}", [start], [stop - start + 1])
                offsets = offsets.astype(np.int64, copy=False)
            if (np.diff(offsets) < 0).any() or offsets[0] < 0 or \
                    offsets[-1] > self._total[key]:
                raise DDStoreValueError(f"ADIOS2 file {self.path!r}: corrupt offsets for "
                                        f"key {key!r} in samples [{start}, {stop})")
            out[key] = offsets
        return out

    def read_packed(self, start, stop, offsets=None):
        """Rows of samples ``[start, stop)`` as ``({key: concatenated rows},
        {key: per-sample row counts})``: two ADIOS2 reads per key (one if ``offsets``,
        what :meth:`read_offsets` returns for this range, is given)."""
        if offsets is None:
            offsets = self.read_offsets(start, stop)
        data, sizes = {}, {}
        for key, dtype, trailing in self.schema:
            off = offsets[key]
            lo, hi = int(off[0]), int(off[-1])
            stored = _stored_trailing(dtype, trailing)
            if hi > lo and 0 not in stored:  # (rows of no element: nothing to read)
                raw = self._read(f"data/{key}", [lo] + [0] * len(stored),
                                 [hi - lo] + list(stored))
                # the file holds values in this machine's byte order (ADIOS2 writes a
                # big-endian array's values): reinterpret as the native twin of the
                # recorded dtype, then convert (a '>c16' or '>f2' viewed straight away
                # would read swapped bytes)
                view = _VIEW_AS.get("b" if dtype.kind == "b" else dtype.str[1:])
                native = dtype.newbyteorder("=")
                if view is not None or dtype.kind == "c":
                    arr = np.ascontiguousarray(raw).view(native)
                else:
                    arr = raw.astype(native, copy=False)
                arr = arr.astype(dtype, copy=False)
                arr = arr.reshape((hi - lo,) + trailing)
            else:
                arr = np.zeros((hi - lo,) + trailing, dtype=dtype)
            data[key], sizes[key] = arr, np.diff(off)
        return data, sizes

    def read(self, start, stop):
        """Yield ``(index, {key: rows})`` for samples ``[start, stop)`` (one range read
        per key)."""
        data, sizes = self.read_packed(start, stop)
        bounds = {k: np.concatenate([[0], np.cumsum(c)]) for k, c in sizes.items()}
        for i in range(stop - start):
            yield start + i, {k: data[k][bounds[k][i]:bounds[k][i + 1]] for k in data}

    def read_one(self, index):
        """Sample ``index`` as ``{key: rows}`` (per-sample ADIOS2 reads)."""
        index = check_index(f" in ADIOS2 file {self.path!r}", index, self._n)
        data, _ = self.read_packed(index, index + 1)
        return data


def _shape(info):
    text = str(info.get("Shape", "")).strip()
    return tuple(int(s) for s in text.split(",")) if text else ()


def _short(exc):
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    text = " ".join(text.split())
    return text[:300] or type(exc).__name__
