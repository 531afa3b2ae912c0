"""Checkpoint and restart: :meth:`DDStore.save` writes everything a store holds to a
directory, in parallel, all or nothing; :meth:`DDStore.restore` (or :meth:`DDStore.load`
into a store that exists) brings it back at any rank count and width.

**What is saved.** Every rows variable and record set (names, dtypes, row shapes, rows),
and every *annotation*: what a layer built over the store records so that it can reopen
by name without its source data (``TemporalGraph.open(store, name)``...).  An annotation
(:meth:`DDStore.annotate`) is a kind, a JSON-serialisable ``meta`` dict, named numpy
arrays that every rank holds alike (a T-CSR's ``indptr``), the variables it describes
(removing any of them drops the annotation) and, for variables whose chunks must start
at certain rows (each node's list whole on one member), the array of allowed cuts.

**The file set** (format version 2), in directory ``path``::

    path/ddstore-checkpoint.json     the manifest (JSON): everything below is named here
    path/<generation>/.ddstore-generation  the marker, written first: {"format":
                                     "ddstore-checkpoint-generation", "checkpoint": id,
                                     "generation": name}
    path/<generation>/rank-00000.bin one raw file per writing rank: blocks of rows

**The manifest's checksum.**  The manifest file starts with ``{"manifest_xxh64":"``
(19 bytes) and 16 lowercase hex digits: the XXH64, seed ``0x64647374`` (the seed of
every block's checksum), of the file's bytes with those 16 digits replaced by 16 ASCII
``0`` (:func:`manifest_checksum`).  ``checkpoint`` is the directory's id (a 32-digit hex
string kept from save to save), the one its generations' markers hold.  Reading
(:func:`read_manifest`) refuses, naming the file and the field, a manifest that is not
a regular file of at most ``MAX_MANIFEST_BYTES``, fails its checksum, or has a field of
the wrong type or range; ``load`` then checks (rank 0) that the blocks and arrays tile
every data file exactly.  Version 1 (no checksum, no marker) is read with every field
checked; a save into its directory replaces it.

Each rank writes one file, in parallel, with no gather on one rank: the rows of its own
chunk of each variable, or (with replicas) its replica's share of that chunk, so the
``size`` ranks write ``1/size`` of one replica each.  A file is a sequence of *blocks*
(at most ``block_bytes``, 32 MiB by default, whole rows); the manifest lists, for every
variable, its blocks as ``[file, byte offset, first global row, rows, xxh64]`` and, for
every annotation array and record-size table, ``{file, offset, dtype, shape, xxh64}``.
Anyone can read a variable back with numpy alone::

    raw = open(f"{path}/ddstore-checkpoint.json", "rb").read()
    assert xxhash.xxh64_intdigest(raw[:19] + b"0" * 16 + raw[35:],
                                  seed=0x64647374) == int(raw[19:35], 16)
    m = json.loads(raw)
    v = m["variables"][0]
    rows = [np.fromfile(f"{path}/{m['files'][f]}", dtype=v["dtype"], offset=off,
                        count=n * math.prod(v["row_shape"])) for f, off, r0, n, h in v["blocks"]]

**All or nothing.** A save writes its files under a new generation directory, checks
every rank's writes (a full disk on one node is agreed, raised alike everywhere, and
the new files removed) and the manifest written aside, then, in a last step that an
interrupt cannot fail (:meth:`~ddstore._collective.Step.defer_interrupts`), makes the
checkpoint visible by one atomic rename of the manifest; only then are the previous
generations removed: those marked with this checkpoint's id holding nothing but the
files a save writes, nothing else.  A directory holding anything the store did not
write (a file inside a generation too) is refused before anything is written, naming
the entries.  A job killed at any point
leaves the previous checkpoint readable.

**Restore at any rank count and width.** Rows are split as :func:`~ddstore.partition`
splits them (or at the nearest allowed cut), records by record; each rank reads only the
blocks that overlap the rows it will hold, verifies each block's XXH64, and copies the
rows in place.  A missing, truncated or altered file, a manifest that is not one of
ours, or a name already in the store is refused (:class:`~ddstore.DDStoreValueError`
naming the file or block), alike on every rank, and nothing of the checkpoint stays in
the store.

Why this format and not ADIOS2's BP5: the files are plain bytes any tool reads with an
offset (numpy, ``dd``), one file per rank keeps a parallel file system's metadata load at
one create per rank, the manifest names every block's checksum, and the pip wheel of
ADIOS2 is serial (no MPI), which would make one rank write everything.
"""
import errno
import json
import math
import os
import re
import shutil
import stat
import time
import uuid

import numpy as np

from . import _collective, _core, _lifecycle
from ._checks import MAX_ROW_DIMS, as_int, partition
from ._collective import collective
from .annotations import Annotation, cut_fault
from .errors import DDStoreError, DDStoreStateError, DDStoreValueError

__all__ = ["Checkpoints", "Annotation", "MANIFEST", "read_manifest", "manifest_checksum"]

MANIFEST = "ddstore-checkpoint.json"
FORMAT = "ddstore-checkpoint"
VERSION = 2
BLOCK_BYTES = 32 << 20
_SEED = 0x64647374  # the checksum seed of every block ("ddst")


def _path_arg(path, op):
    """``path`` (str or os.PathLike) as a non-empty str, else refused naming ``op``."""
    path = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
    if not isinstance(path, str) or not path:
        raise DDStoreValueError(f"{op}: path must be a directory name (str or "
                                f"os.PathLike), got {path!r}")
    if "\0" in path:  # (no file name holds one: os calls raise ValueError)
        raise DDStoreValueError(f"{op}: path {path!r} holds a NUL character; allowed: a "
                                f"directory name without one")
    return path


def _checksum(buf):
    return _core.fingerprint(buf, _SEED)


def _bytes_of(arr):
    """A flat uint8 view of a C-contiguous array (empty arrays included)."""
    return arr.reshape(-1).view(np.uint8) if arr.size else np.zeros(0, np.uint8)


_PREFIX = b'{"manifest_xxh64":"'  # how a version-2 manifest starts: its checksum first
_DIGITS = slice(len(_PREFIX), len(_PREFIX) + 16)  # the 16 hex digits of the checksum
MAX_MANIFEST_BYTES = 256 << 20  # a manifest larger than this is refused unread
_MARKER = ".ddstore-generation"  # in each generation directory, written first
_MARKER_FORMAT = "ddstore-checkpoint-generation"
_GEN_NAME = re.compile(r"g-[A-Za-z0-9_-]{1,100}\Z")
_FILE_NAME = re.compile(r"rank-[0-9]{5,}\.bin\Z")
_CHECKPOINT_ID = re.compile(r"[0-9a-f]{32}\Z")  # (uuid4().hex)
# a generation of ours being removed is first renamed to this prefix and its name (its
# marker removed last): a save killed while removing it leaves a name the next save
# knows as its own, whatever of it was left, an empty directory included
_REMOVING = ".ddstore-removing-"
_INT64 = 1 << 63


def manifest_checksum(raw):
    """The XXH64 (seed ``0x64647374``) of the manifest file's bytes ``raw`` with the 16
    hex digits of its ``manifest_xxh64`` value (bytes 19 to 34, the file starts with
    ``{"manifest_xxh64":"``) replaced by 16 ASCII zeros: what that value states."""
    raw = bytes(raw)
    return _checksum(raw[:_DIGITS.start] + b"0" * 16 + raw[_DIGITS.stop:])


def _open_regular(name, what="checkpoint file"):
    """``name`` opened for reading (binary) if it is a regular file, without waiting on
    it (a FIFO is refused, not read); its ``(file, size)``."""
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise DDStoreValueError(f"{what} {name!r} cannot be read: {exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DDStoreValueError(f"{what} {name!r} is not a regular file (a "
                                    f"{_kind(st.st_mode)}): refused unread")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def _kind(mode):
    for test, word in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symbolic link")):
        if test(mode):
            return word
    return "special file"


def read_manifest(path):
    """The manifest of the checkpoint in directory ``path`` as a dict (no MPI needed),
    its checksum verified and every field checked (types, ranges, consistency of the
    blocks with the rows they hold).  Raises :class:`DDStoreValueError` naming the file
    (and the field) when there is none, it is not a regular file of at most
    ``MAX_MANIFEST_BYTES``, fails its checksum, or is not a ddstore checkpoint of a
    version this release reads (1 or 2; version 1, written before the manifest had a
    checksum, is read with every field checked)."""
    path = os.fspath(path)
    name = os.path.join(path, MANIFEST)
    if not os.path.lexists(name):
        raise DDStoreValueError(f"no checkpoint at {path!r}: {MANIFEST} not found "
                                f"(DDStore.save writes it last)")
    f, size = _open_regular(name, "checkpoint manifest")
    with f:
        if size > MAX_MANIFEST_BYTES:
            raise DDStoreValueError(f"checkpoint manifest {name!r} has {size} bytes, more "
                                    f"than the {MAX_MANIFEST_BYTES} a manifest may have: "
                                    f"not a ddstore checkpoint, or damaged")
        try:
            raw = f.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            raise DDStoreValueError(f"checkpoint {name!r} cannot be read: {exc}") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise DDStoreValueError(f"checkpoint manifest {name!r} has more than "
                                f"{MAX_MANIFEST_BYTES} bytes: refused")
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise DDStoreValueError(f"checkpoint {name!r} is not JSON ({exc}): not a ddstore "
                                f"checkpoint, or damaged") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DDStoreValueError(f"{name!r} is not a ddstore checkpoint manifest "
                                f"(its 'format' is not {FORMAT!r})")
    version = manifest.get("version")
    if type(version) is not int or version not in (1, VERSION):
        raise DDStoreValueError(f"checkpoint {name!r} has format version "
                                f"{version!r}; this ddstore reads versions 1 and "
                                f"{VERSION}")
    if version < 2 and (raw.startswith(_PREFIX) or "manifest_xxh64" in manifest or
                        "checkpoint" in manifest):
        raise DDStoreValueError(
            f"checkpoint {name!r}: field version: it says 1, but the manifest has "
            f"fields version 1 never had (manifest_xxh64, checkpoint): its version was "
            f"altered, which would skip the checksum; nothing loaded")
    if version >= 2:
        stated = raw[_DIGITS].decode("ascii", "replace")
        if not raw.startswith(_PREFIX) or raw[_DIGITS.stop:_DIGITS.stop + 1] != b'"' or \
                not re.fullmatch(r"[0-9a-f]{16}", stated):
            raise DDStoreValueError(
                f"checkpoint {name!r}: field manifest_xxh64: a version-{version} "
                f"manifest starts with its checksum ({_PREFIX.decode()}<16 hex "
                f"digits>\"); this one does not (rewritten by another tool, or damaged)")
        actual = manifest_checksum(raw)
        if int(stated, 16) != actual:
            raise DDStoreValueError(
                f"checkpoint {name!r}: the manifest fails its checksum (field "
                f"manifest_xxh64 states {stated}, its bytes hash to {actual:016x}): "
                f"altered or damaged after ddstore wrote it; nothing loaded")
    _validate(manifest, name)
    return manifest


def _field_error(name, field, problem):
    return DDStoreValueError(f"checkpoint {name!r}: field {field} {problem}")


class _Fields:
    """Type and range checks of a manifest's fields, each error naming field and file."""

    def __init__(self, name):
        self.name = name

    def fail(self, field, problem):
        raise _field_error(self.name, field, problem)

    def get(self, obj, key, field):
        if not isinstance(obj, dict) or key not in obj:
            self.fail(field, "is missing")
        return obj[key]

    def int(self, v, field, lo=0, hi=_INT64 - 1):
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            self.fail(field, f"must be an integer in [{lo}, {hi}], got {v!r:.80}")
        return v

    def str(self, v, field, pattern=None):
        if not isinstance(v, str) or not v or (pattern and not pattern.match(v)):
            self.fail(field, f"must be a non-empty string"
                      f"{'' if pattern is None else ' matching ' + pattern.pattern}, "
                      f"got {v!r:.80}")
        return v

    def list(self, v, field):
        if not isinstance(v, list):
            self.fail(field, f"must be a list, got {type(v).__name__}")
        return v

    def dict(self, v, field):
        if not isinstance(v, dict):
            self.fail(field, f"must be an object (dict), got {type(v).__name__}")
        return v

    def dtype(self, v, field):
        self.str(v, field)
        try:
            dt = np.dtype(v)
        except (TypeError, ValueError, SyntaxError):
            dt = None
        if dt is None or dt.hasobject or dt.fields is not None or dt.subdtype is not None \
                or dt.itemsize == 0 or dt.str != v:
            self.fail(field, f"must be a numpy dtype string as numpy writes it "
                      f"(e.g. '<f8', '<i8', '|u1'), got {v!r:.80}")
        return dt

    def shape(self, v, field, most=MAX_ROW_DIMS + 1):
        self.list(v, field)
        if len(v) > most:  # (an array's: numpy's bound; a row's: one less, its batch's)
            self.fail(field, f"has {len(v)} dimensions, at most {most} are allowed")
        n = 1
        for i, d in enumerate(v):
            n *= self.int(d, f"{field}[{i}]")
            if n >= _INT64:
                self.fail(field, f"{v} holds more than 2**63 items")
        return tuple(v), n


def _validate(m, name):
    """Every field of manifest ``m`` (from file ``name``) checked: types, ranges, names
    unique and known, every variable's blocks covering its rows once, in order."""
    c = _Fields(name)
    gen = c.str(c.get(m, "generation", "generation"), "generation", _GEN_NAME)
    if m["version"] >= 2:
        c.str(c.get(m, "checkpoint", "checkpoint"), "checkpoint",
              _CHECKPOINT_ID)
    files = c.list(c.get(m, "files", "files"), "files")
    if not files:
        c.fail("files", "is empty (a save writes one file per rank)")
    for i, f in enumerate(files):
        if not isinstance(f, str) or "/" not in f or f.split("/", 1)[0] != gen or \
                not _FILE_NAME.match(f.split("/", 1)[1]):
            c.fail(f"files[{i}]", f"must be '{gen}/rank-NNNNN.bin', got {f!r:.80}")
    sb = c.dict(c.get(m, "saved_by", "saved_by"), "saved_by")
    for k in ("size", "width", "replicas"):
        c.int(c.get(sb, k, f"saved_by.{k}"), f"saved_by.{k}", 1)
    nfiles = len(files)
    records = c.list(c.get(m, "records", "records"), "records")
    record_keys = {}
    for i, r in enumerate(records):
        f = f"records[{i}]"
        rname = c.str(c.get(r, "name", f + ".name"), f + ".name")
        if rname in record_keys:
            c.fail(f + ".name", f"repeats record set {rname!r}")
        keys = c.list(c.get(r, "keys", f + ".keys"), f + ".keys")
        for j, k in enumerate(keys):
            c.str(k, f"{f}.keys[{j}]")
        if not keys or len(set(keys)) != len(keys):
            c.fail(f + ".keys", f"must be distinct field names, at least one: {keys!r:.80}")
        record_keys[rname] = keys
    variables = c.list(c.get(m, "variables", "variables"), "variables")
    seen, total = {}, 0
    for i, v in enumerate(variables):
        f = f"variables[{i}]"
        vname = c.str(c.get(v, "name", f + ".name"), f + ".name")
        f = f"variables[{i}] ({vname!r})"
        if vname in seen:
            c.fail(f + ".name", "repeats a variable name")
        dt = c.dtype(c.get(v, "dtype", f + ".dtype"), f + ".dtype")
        _, per_row = c.shape(c.get(v, "row_shape", f + ".row_shape"), f + ".row_shape",
                             MAX_ROW_DIMS)
        nrows = c.int(c.get(v, "nrows", f + ".nrows"), f + ".nrows")
        rec = c.get(v, "records", f + ".records")
        if rec is not None:
            c.str(rec, f + ".records")
            if rec not in record_keys or not vname.startswith(rec + "/") or \
                    vname[len(rec) + 1:] not in record_keys[rec]:
                c.fail(f + ".records", f"names record set {rec!r}, which does not list "
                       f"this variable as one of its fields")
        elif vname in record_keys:
            c.fail(f + ".name", "is also the name of a record set")
        row_bytes = per_row * dt.itemsize
        if nrows * row_bytes >= _INT64:
            c.fail(f + ".nrows", f"{nrows} rows of {row_bytes} bytes exceed 2**63 bytes")
        total += nrows * row_bytes
        blocks = c.list(c.get(v, "blocks", f + ".blocks"), f + ".blocks")
        row = 0
        for j, b in enumerate(blocks):
            fb = f"{f}.blocks[{j}]"
            if not isinstance(b, list) or len(b) != 5:
                c.fail(fb, f"must be [file, offset, first row, rows, xxh64], got {b!r:.80}")
            c.int(b[0], fb + "[0] (file)", 0, nfiles - 1)
            c.int(b[1], fb + "[1] (offset)")
            c.int(b[2], fb + "[2] (first row)")
            c.int(b[3], fb + "[3] (rows)")
            c.int(b[4], fb + "[4] (xxh64)", 0, (1 << 64) - 1)
            if b[2] != row:
                c.fail(fb + "[2] (first row)", f"is {b[2]}: the blocks, in order, must "
                       f"cover the rows once; row {row} was expected")
            row += b[3]
        if row != nrows:
            c.fail(f + ".nrows", f"is {nrows} but its blocks hold {row} rows")
        seen[vname] = v
    for rname, keys in record_keys.items():
        for k in keys:
            if f"{rname}/{k}" not in seen:
                c.fail("records", f"record set {rname!r} has no variable {rname}/{k!r}")
    nbytes = c.int(c.get(m, "nbytes", "nbytes"), "nbytes")
    if nbytes != total:
        c.fail("nbytes", f"is {nbytes} but the variables hold {total} bytes")
    arrays = c.dict(c.get(m, "arrays", "arrays"), "arrays")
    for key, e in arrays.items():
        f = f"arrays[{key!r}]"
        c.dict(e, f)
        c.int(c.get(e, "file", f + ".file"), f + ".file", 0, nfiles - 1)
        c.int(c.get(e, "offset", f + ".offset"), f + ".offset")
        dt = c.dtype(c.get(e, "dtype", f + ".dtype"), f + ".dtype")
        _, n = c.shape(c.get(e, "shape", f + ".shape"), f + ".shape")
        if n * dt.itemsize >= _INT64:
            c.fail(f + ".shape", "exceeds 2**63 bytes")
        c.int(c.get(e, "xxh64", f + ".xxh64"), f + ".xxh64", 0, (1 << 64) - 1)
    for rname, keys in record_keys.items():
        e = arrays.get(f"records:{rname}")
        if e is None:
            c.fail("arrays", f"has no 'records:{rname}' (the record sizes of {rname!r})")
        if np.dtype(e["dtype"]) != np.int64 or len(e["shape"]) != 2 or \
                e["shape"][1] != len(keys):
            c.fail(f"arrays['records:{rname}']", f"must be int64 of shape [records, "
                   f"{len(keys)}], got {e['dtype']} {e['shape']}")
    anns = c.list(c.get(m, "annotations", "annotations"), "annotations")
    ann_names = set()
    for i, a in enumerate(anns):
        f = f"annotations[{i}]"
        aname = c.str(c.get(a, "name", f + ".name"), f + ".name")
        f = f"annotations[{i}] ({aname!r})"
        if aname in ann_names:
            c.fail(f + ".name", "repeats an annotation name")
        ann_names.add(aname)
        c.str(c.get(a, "kind", f + ".kind"), f + ".kind")
        c.dict(c.get(a, "meta", f + ".meta"), f + ".meta")
        keys = c.list(c.get(a, "arrays", f + ".arrays"), f + ".arrays")
        for j, k in enumerate(keys):
            c.str(k, f"{f}.arrays[{j}]")
            if f"annotation:{aname}:{k}" not in arrays:
                c.fail(f"{f}.arrays[{j}]", f"names array {k!r}, which the manifest's "
                       f"'arrays' lacks ('annotation:{aname}:{k}')")
        avars = c.list(c.get(a, "variables", f + ".variables"), f + ".variables")
        for j, vn in enumerate(avars):
            c.str(vn, f"{f}.variables[{j}]")
            if vn not in seen and vn not in record_keys:
                c.fail(f"{f}.variables[{j}]", f"names {vn!r}, which is not a variable or "
                       f"record set of the checkpoint")
        cuts = c.dict(c.get(a, "cuts", f + ".cuts"), f + ".cuts")
        for vn, key in cuts.items():
            if vn not in avars or vn not in seen or seen[vn]["records"]:
                c.fail(f"{f}.cuts", f"names {vn!r}, not a rows variable of the annotation")
            if isinstance(key, str):
                e = arrays.get(f"annotation:{aname}:{key}")
                if key not in keys or e is None or len(e["shape"]) != 1 or \
                        np.dtype(e["dtype"]).kind not in "iu":
                    c.fail(f"{f}.cuts[{vn!r}]", f"names {key!r}, which must be one of "
                           f"its arrays, 1-D of integers")
            else:
                c.int(key, f"{f}.cuts[{vn!r}]", 1)
                if seen[vn]["nrows"] % key:
                    c.fail(f"{f}.cuts[{vn!r}]", f"is {key} rows per item, but "
                           f"{vn!r} has {seen[vn]['nrows']} rows")


def _check_extents(path, m):
    """Every byte of every file the manifest names is accounted for once: per file the
    blocks and arrays, by offset, follow one another from 0 to the file's end (so the
    dtypes, row shapes and row counts agree with the files' sizes).  Stats every file:
    rank 0 does it, in load's first step."""
    name = os.path.join(path, MANIFEST)
    if m["version"] < 2 and os.path.lexists(os.path.join(path, m["generation"], _MARKER)):
        raise DDStoreValueError(  # (a version-1 save wrote no marker: see read_manifest)
            f"checkpoint {name!r}: field version: it says 1, but its generation holds "
            f"{_MARKER!r}, which only a version-2 save writes: its version was altered, "
            f"which would skip the checksum; nothing loaded")
    extents = [[] for _ in m["files"]]
    for i, v in enumerate(m["variables"]):
        row_bytes = np.dtype(v["dtype"]).itemsize * math.prod(v["row_shape"])
        for j, (f, off, _r0, n, _h) in enumerate(v["blocks"]):
            extents[f].append((off, n * row_bytes,
                               f"variables[{i}] ({v['name']!r}).blocks[{j}]"))
    for key, e in m["arrays"].items():
        extents[e["file"]].append((e["offset"], np.dtype(e["dtype"]).itemsize *
                                   math.prod(e["shape"]), f"arrays[{key!r}]"))
    for f, ext in enumerate(extents):
        fname = os.path.join(path, m["files"][f])
        try:
            st = os.stat(fname)
        except OSError as exc:
            raise DDStoreValueError(f"checkpoint file {fname!r} cannot be read: "
                                    f"{exc}") from None
        if not stat.S_ISREG(st.st_mode):
            raise DDStoreValueError(f"checkpoint file {fname!r} is not a regular file "
                                    f"(a {_kind(st.st_mode)})")
        at, prev = 0, None
        for off, nb, field in sorted(ext, key=lambda x: (x[0], x[1])):
            if off != at:
                where = f"{prev} ends at byte {at}" if prev else "the file starts at 0"
                raise _field_error(name, field, f"starts at byte {off} of "
                                   f"{m['files'][f]!r}, but {where}: a dtype, row shape "
                                   f"or row count that does not match the data")
            at, prev = at + nb, field
        if at != st.st_size:
            what = "is truncated" if at > st.st_size else "is longer"
            raise DDStoreValueError(f"checkpoint file {fname!r} {what}: it has "
                                    f"{st.st_size} bytes, the manifest {name!r} accounts "
                                    f"for {at}")


def _same_store(ids, what):
    """Raised alike (from agreed values) when the ranks of one save or load name
    different stores (rank 0 ``A.save(p)`` while rank 1 ``B.save(p)``): ``ids``, every
    rank's ``store_id`` (agreed at construction, the same on every rank for one
    store)."""
    if any(i != ids[0] for i in ids):
        groups = {}
        for r, i in enumerate(ids):
            groups.setdefault(i, []).append(r)
        detail = "; ".join(f"{'rank' if len(rs) == 1 else 'ranks'} "
                           f"{', '.join(map(str, rs))}: store #{i}"
                           for i, rs in groups.items())
        raise DDStoreValueError(f"{what}: the ranks called it on different stores "
                                f"({detail}); every rank must save or load the same "
                                f"store, or the checkpoint would mix them")


def _cut_bounds(nrows, width, cuts, what):
    """Chunk starts of ``width`` members for ``nrows`` rows, each at the allowed cut
    nearest to the balanced split (``cuts``: sorted, from 0 to ``nrows``)."""
    why = cut_fault(nrows, cuts)
    if why:
        raise DDStoreValueError(f"{what}: {why}")
    cuts = np.asarray(cuts).astype(np.int64)
    bounds = [0]
    for m in range(1, width):
        target = partition(nrows, width, m)[0]
        k = int(np.searchsorted(cuts, target))
        k = min(k, cuts.size - 1)
        if k > 0 and target - cuts[k - 1] <= cuts[k] - target:
            k -= 1
        bounds.append(max(int(cuts[k]), bounds[-1]))
    bounds.append(nrows)
    return bounds


def _named(exc, name):
    """OSError ``exc`` (a full disk, a quota...) with the file it concerns named: what
    ``write`` raises names none ("No space left on device")."""
    if isinstance(exc, OSError) and exc.errno is not None and not exc.filename:
        out = OSError(exc.errno, exc.strerror or os.strerror(exc.errno), name)
        out.__cause__ = exc
        return out
    return exc


class _Writer:
    """One rank's part file: blocks appended, each checksummed."""

    def __init__(self, name, block_bytes):
        self.name, self.block = name, block_bytes
        self.f = open(name, "wb", buffering=0)
        self.offset = 0

    def write(self, data):
        """Append bytes ``data`` (a uint8 array); returns ``(offset, xxh64)``."""
        at, view = self.offset, memoryview(data)
        done = 0
        try:
            while done < view.nbytes:
                done += self.f.write(view[done:done + (1 << 30)])
        except OSError as exc:
            raise _named(exc, self.name) from None
        self.offset += view.nbytes
        return at, _checksum(data)

    def rows(self, arr, row0):
        """Append rows ``arr`` (global rows from ``row0``) as blocks; their entries."""
        out = []
        row_bytes = arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
        step = max(1, self.block // max(row_bytes, 1))
        for lo in range(0, arr.shape[0], step):
            part = np.ascontiguousarray(arr[lo:lo + step])
            at, h = self.write(_bytes_of(part))
            out.append([at, row0 + lo, int(part.shape[0]), h])
        return out

    def close(self):
        try:
            self.f.flush()
            os.fsync(self.f.fileno())
        except OSError as exc:
            raise _named(exc, self.name) from None
        finally:
            self.f.close()


def _write_synced(name, data, exclusive=False):
    """Write bytes ``data`` to a new file ``name``, synced; on a failure the file is
    removed and the ``OSError`` names it."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(name, flags, 0o666)
    try:
        view, done = memoryview(data), 0
        while done < len(view):
            done += os.write(fd, view[done:])
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        _remove_quietly(name)
        raise _named(exc, name) from None
    os.close(fd)


def _remove_quietly(name):
    try:
        os.remove(name)
    except (OSError, ValueError):  # (ValueError: a name os cannot pass, a NUL in it)
        pass


def _read_small_json(name, limit=1 << 16):
    """The JSON in regular file ``name`` (not followed if a link) of at most ``limit``
    bytes, or None (whatever is wrong with it)."""
    try:
        st = os.lstat(name)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        f, _ = _open_regular(name)
        with f:
            return json.loads(f.read(limit + 1))
    except (OSError, ValueError, DDStoreError):
        return None


class _Directory:
    """Rank 0's view of a save's target directory: what in it the checkpoint wrote
    (ours: the manifest, generation directories marked with this checkpoint's id,
    manifests not yet renamed of those generations, and a version-1 checkpoint's
    generation, which had no marker) and what it did not.  :meth:`check` (before the
    save's first round, writing nothing) refuses a directory holding anything not ours;
    :meth:`create` makes the new generation, its marker first; :meth:`clean` (after the
    rename) removes the other generations that are ours and nothing else."""

    def __init__(self, path):
        self.path = path
        self.gen = f"g-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self.cid = None      # this checkpoint's id (kept from save to save)
        self.legacy = None   # the generation a version-1 manifest names
        self.made = []      # the directories this save made, the deepest first
        self.made_gen = False
        self.lock = None    # the directory's descriptor, flock'ed by this save

    def claim(self):
        """Hold the directory for this save (an exclusive ``flock`` on it, until
        :meth:`release`): a second save to the same path at the same time, from another
        job or store, is refused, not left to remove this one's published generation
        as an earlier one of its own (both said they saved, and no checkpoint was
        left).  The lock ends with the process, so a killed save leaves none; on a file
        system without ``flock`` the save goes on unclaimed, as before."""
        import fcntl
        if self.lock is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return  # (not there yet: made, then claimed, by create)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DDStoreValueError(
                f"save: another save is writing to {self.path!r} now (another job, or "
                f"another store of this one); save to another path, or one after the "
                f"other") from None
        except OSError:  # no flock here (ENOLCK, EOPNOTSUPP...): unclaimed
            os.close(fd)
            return
        self.lock = fd

    def release(self):
        """Let go of the directory (:meth:`claim`)."""
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None

    def _marker_id(self, entry, gen=None):
        """The checkpoint id in directory ``entry``'s marker, which must name generation
        ``gen`` (default ``entry``; a generation being removed keeps its own name
        there), or None."""
        full = os.path.join(self.path, entry)
        try:
            if not stat.S_ISDIR(os.lstat(full).st_mode):
                return None
        except OSError:
            return None
        m = _read_small_json(os.path.join(full, _MARKER), 4096)
        if isinstance(m, dict) and m.get("format") == _MARKER_FORMAT and \
                m.get("generation") == (gen or entry) and \
                isinstance(m.get("checkpoint"), str):
            return m["checkpoint"]
        return None

    def _strays(self, entry, marked):
        """What generation directory ``entry`` holds that a save did not write (a
        ``marked`` one: its marker and rank files; a version-1 one: rank files), as
        ``entry/name`` paths; None when it cannot be listed."""
        full = os.path.join(self.path, entry)
        try:
            return [f"{entry}/{e}" for e in sorted(os.listdir(full))
                    if not ((_FILE_NAME.match(e) or (marked and e == _MARKER)) and
                            stat.S_ISREG(os.lstat(os.path.join(full, e)).st_mode))]
        except OSError:
            return None

    def _ours(self, entry, markers):
        """Whether ``entry`` (a name in the directory) is what saves of this
        checkpoint wrote, and holds nothing else (a generation with a user's file in it
        is not ours: :meth:`clean` would remove the file)."""
        if entry == MANIFEST:
            return True
        if entry.startswith(_REMOVING):
            return self._being_removed(entry)
        if entry.startswith("g-"):
            marked = markers.get(entry) is not None and markers[entry] == self.cid
            try:
                if not (marked or entry == self.legacy) or \
                        not stat.S_ISDIR(os.lstat(os.path.join(self.path, entry)).st_mode):
                    return False
            except OSError:
                return False
            return self._strays(entry, marked) == []
        tmp = f".{MANIFEST}."
        if entry.startswith(tmp):
            gen = entry[len(tmp):]
            if gen.startswith("g-") and (gen == self.gen or self._ours(gen, markers)):
                return True
            m = _read_small_json(os.path.join(self.path, entry), MAX_MANIFEST_BYTES)
            return isinstance(m, dict) and m.get("format") == FORMAT and \
                m.get("checkpoint") == self.cid and self.cid is not None
        return False

    def _removing_id(self, entry):
        """The checkpoint id of the marker left in ``entry``, a generation a save was
        removing (:meth:`_remove_generation`), or None."""
        return self._marker_id(entry, entry[len(_REMOVING):])

    def _being_removed(self, entry):
        """Whether ``entry`` is a generation that a save of this checkpoint was removing
        (:meth:`_remove_generation`; only a save makes that name): a directory holding
        rank files and, if its marker is left, a marker with this checkpoint's id (a
        version-1 generation has none), or nothing."""
        gen, full = entry[len(_REMOVING):], os.path.join(self.path, entry)
        try:
            if not (_GEN_NAME.match(gen) and stat.S_ISDIR(os.lstat(full).st_mode)):
                return False
            marked = os.path.lexists(os.path.join(full, _MARKER))
        except OSError:
            return False
        if marked and self._removing_id(entry) != self.cid:
            return False
        return self._strays(entry, marked) == []

    def _remove_generation(self, entry):
        """Remove generation directory ``entry`` of ours: renamed first (to
        :data:`_REMOVING` and its name, unless it has that name already), its rank files
        removed, then its marker, then the directory."""
        full = os.path.join(self.path, entry)
        if not entry.startswith(_REMOVING):
            aside = os.path.join(self.path, _REMOVING + entry)
            try:
                os.rename(full, aside)
            except OSError:
                return
            full = aside
        try:
            names = sorted(os.listdir(full), key=lambda e: e == _MARKER)  # marker last
        except OSError:
            return
        for e in names:
            _remove_quietly(os.path.join(full, e))
        try:
            os.rmdir(full)
        except OSError:
            pass

    def _scan(self):
        entries = sorted(os.listdir(self.path))
        markers = {e: self._marker_id(e) for e in entries if e.startswith("g-")}
        return entries, markers

    def check(self):
        path = self.path
        if os.path.lexists(path) and not os.path.isdir(path):
            raise DDStoreValueError(f"save: {path!r} exists and is not a directory")
        if not os.path.isdir(path):
            above = os.path.dirname(os.path.abspath(path))
            while not os.path.lexists(above):
                above = os.path.dirname(above)
            if not os.path.isdir(above):
                raise DDStoreValueError(f"save: {path!r} cannot be made: {above!r} is a "
                                        f"file, not a directory")
            self.cid = uuid.uuid4().hex
            return
        self.claim()  # (before anything in it is read: another save's is not taken over)
        entries, markers = self._scan()
        if MANIFEST in entries:
            try:
                m = read_manifest(path)
            except DDStoreError as exc:
                raise DDStoreValueError(
                    f"save: {path!r} holds a {MANIFEST} that is not a checkpoint this "
                    f"ddstore reads ({exc}); ddstore removes only what it wrote: move it "
                    f"away or give an empty or new directory") from None
            self.cid = m.get("checkpoint")
            if m["version"] == 1:
                self.legacy = m["generation"]
        else:  # a first save that was killed: its generations carry one id
            ids = {i for i in list(markers.values()) + [
                self._removing_id(e) for e in entries if e.startswith(_REMOVING)]
                if i is not None and _CHECKPOINT_ID.match(i)}
            self.cid = ids.pop() if len(ids) == 1 else None
        if self.cid is None:
            self.cid = uuid.uuid4().hex
        foreign = []
        for e in entries:
            if not self._ours(e, markers):  # (inside a generation of ours: its strays)
                mine = e.startswith("g-") and markers.get(e) == self.cid
                foreign += (self._strays(e, True) or [e]) if mine else [e]
        if foreign:
            raise DDStoreValueError(
                f"save: {path!r} holds other files that ddstore did not write "
                f"({', '.join(repr(e) for e in foreign[:5])}"
                f"{', ...' if len(foreign) > 5 else ''}; a generation of ours holds "
                f"{_MARKER!r} with this checkpoint's id); ddstore removes only what it "
                f"wrote, so it refuses the directory: give an empty or new directory, "
                f"or move them away")

    def create(self):
        """The generation directory, then at once its marker (so that a save killed
        at any later point leaves a directory the next save knows as ours)."""
        # as os.makedirs makes them, from the path as given ('a/b/c/..' needs a/b/c)
        missing, above = [], self.path.rstrip(os.sep) or os.sep
        while above not in ("", os.sep) and not os.path.lexists(above):
            missing.append(above)
            above = os.path.dirname(above)
        for d in reversed(missing):
            try:
                os.mkdir(d)
                self.made.insert(0, d)
            except FileExistsError:
                pass
        self.claim()  # (a new path: claimed once made)
        gen_dir = os.path.join(self.path, self.gen)
        os.mkdir(gen_dir)
        self.made_gen = True
        marker = {"format": _MARKER_FORMAT, "checkpoint": self.cid, "generation": self.gen}
        _write_synced(os.path.join(gen_dir, _MARKER), json.dumps(marker).encode(),
                      exclusive=True)

    def discard(self):
        """After a failed save (rank 0): its generation and temporary manifest, unless
        the manifest names it, and the directory if the save made it and it is empty."""
        gen_dir = os.path.join(self.path, self.gen)
        _remove_quietly(os.path.join(self.path, f".{MANIFEST}.{self.gen}"))
        marker = self._marker_id(self.gen) if self.made_gen else None
        if self.made_gen and not _published(self.path, self.gen) and \
                marker in (self.cid, None):
            if marker is None:  # (made, its marker not written)
                shutil.rmtree(gen_dir, ignore_errors=True)
            else:
                self._remove_generation(self.gen)
        for d in self.made:  # the deepest first, each only if empty
            try:
                os.rmdir(d)
            except OSError:
                break

    def clean(self):
        """After the rename (rank 0): the earlier generations of this checkpoint and
        what killed saves of it left; whatever else is there stays."""
        try:
            entries, markers = self._scan()
        except OSError:
            return
        for e in entries:
            if e in (MANIFEST, self.gen) or not self._ours(e, markers):
                continue
            if e.startswith(("g-", _REMOVING)):
                self._remove_generation(e)
            else:
                _remove_quietly(os.path.join(self.path, e))


def _published(path, gen):
    """Whether the manifest at ``path`` names generation ``gen`` (then its files stay,
    even if a later part of the save failed)."""
    try:
        return read_manifest(path)["generation"] == gen
    except DDStoreError:
        return False


def _read_exact(f, name, offset, view):
    """Fill memoryview ``view`` from file ``f`` at ``offset`` (refusing a short file)."""
    f.seek(offset)
    done = 0
    while done < view.nbytes:
        n = f.readinto(view[done:])
        if not n:
            raise DDStoreValueError(f"checkpoint file {name!r} is truncated: {view.nbytes} "
                                    f"bytes at offset {offset} were expected, the file "
                                    f"ends after {offset + done}")
        done += n


class Checkpoints:
    """The checkpoints of ``store``, the component of :class:`~ddstore.DDStore` behind
    :meth:`~ddstore.DDStore.save` and :meth:`~ddstore.DDStore.load` (documented here).
    It reads and fills the other components through their interfaces: ``variables``
    (:class:`~ddstore.variables.Variables`: the rows variables and the core), ``records``
    (:class:`~ddstore.records.Records`) and ``annotations``
    (:class:`~ddstore.annotations.Annotations`); ``join_threads()`` waits for the
    store's background threads.  Of the store it calls only public methods and
    attributes (``collective``, ``transaction``, ``init``, ``init_records``, ``in``,
    ``rank``, ``size``, ``width``, ``replicas``, ``group``, ``group_rank``,
    ``store_id``)."""

    def __init__(self, store, variables, records, annotations, join_threads, journal):
        self.store, self.variables = store, variables
        self.records, self.annotations = records, annotations
        self.join_threads, self.journal = join_threads, journal

    # ------------------------------------------------------------------ save
    def _entries(self):
        """Every rows variable as ``(name, var, role)``: role "rows" or a record set's
        name (its fields)."""
        out = [(n, v, "rows") for n, v in sorted(self.variables.table.items())]
        for rname, rec in sorted(self.records.table.items()):
            out += [(f"{rname}/{k}", rec.fields[k], rname) for k in rec.keys]
        return out

    def _description(self):
        """What every rank must hold alike to save, by part: ``{"variables": ...,
        "annotation 'n'": ...}``, so that a difference is named by its part (the
        variables by their count and a fingerprint; an annotation by its kind, meta,
        arrays' dtypes, shapes and fingerprints, variables and cuts)."""
        vars_ = [(n, str(v.dtype), list(v.row_shape), int(v.nrows), role)
                 for n, v, role in self._entries()]
        text = json.dumps(vars_, sort_keys=True).encode()
        desc = {"variables": f"{len(vars_)} variables (names, dtypes, row shapes, rows), "
                             f"xxh64 0x{_checksum(text):016x}"}
        for n, a in sorted(self.annotations.table.items()):
            arrs = ", ".join(f"{k!r}: {x.dtype}{list(x.shape)} xxh64 0x"
                             f"{_checksum(_bytes_of(np.ascontiguousarray(x))):016x}"
                             for k, x in sorted(a.arrays.items()))
            meta = json.dumps(a.meta, sort_keys=True)
            if len(meta) > 80:
                meta = f"xxh64 0x{_checksum(meta.encode()):016x}"
            desc[f"annotation {n!r}"] = (f"kind {a.kind!r}, meta {meta}, arrays {{{arrs}}}, "
                                         f"variables {list(a.variables)}, cuts {a.cuts}")
        return desc

    @_collective.holds_interrupts  # (its steps are several; the last one commits)
    def save(self, path, *, block_bytes=BLOCK_BYTES):
        """Collective: write everything this store holds to directory ``path`` (created
        if needed), every rank its own part in parallel, plus one manifest; see
        :mod:`ddstore.checkpoint` for the files.  All or nothing: the new checkpoint
        becomes visible by one rename once every rank's files are written and synced;
        a failure on any rank (a full disk, a directory it cannot write) raises the same
        :class:`DDStoreError` on every rank and leaves the previous checkpoint at
        ``path`` as it was, its own new files removed.  Removes only what it wrote (the
        earlier generations marked with this checkpoint's id): a ``path`` holding
        anything else is refused before anything is written, naming the entries.  Ranks
        calling it on different stores are refused (it would mix them), and so is a
        call inside an open transaction (:meth:`DDStore.transaction`: a checkpoint holds
        committed state).  Waits for the store's background threads (a layer's commit)
        first.  Replicas must hold the same rows (they do, unless a
        program wrote different rows into different groups: refused, naming the
        variable).  Returns the manifest (a dict).

        The rows, records and annotations stay in the store, unchanged.  ``block_bytes``:
        how much of a variable each rank writes at a time (an integer >= 1; the default,
        :data:`BLOCK_BYTES`, 32 MiB)."""
        held = []  # rank 0: the target directory, released (claim) whatever happens
        try:
            return self._save(path, block_bytes, held)
        finally:
            for directory in held:
                directory.release()

    def _save(self, path, block_bytes, held):
        """:meth:`save`; rank 0's :class:`_Directory` is appended to ``held``."""
        directory = None  # rank 0: the target directory, what in it is ours
        with self.store.collective("save", str(path)) as step:
            path = _path_arg(path, "save")
            block_bytes = as_int(block_bytes, "save: block_bytes", 1)  # (never truncated)
            self.join_threads()  # a layer's background commit writes rows
            if self.journal.depth:  # (what a rollback may undo; what is set aside)
                raise DDStoreStateError(
                    f"save {path!r}: called inside an open transaction; a checkpoint "
                    f"holds committed state only: save after the transaction ends")
            bad = [f"{n!r} ({a.kind}): {a.unsaved}" for n, a in
                   sorted(self.annotations.table.items()) if a.unsaved is not None]
            if bad:
                raise DDStoreStateError(f"save {path!r}: the store holds objects a "
                                        f"checkpoint may not keep: {'; '.join(bad)}; "
                                        f"remove them first")
            desc = self._description()
            plan = None
            if self.store.rank == 0:  # checked, nothing written: a refusal leaves no trace
                directory = _Directory(path)
                held.append(directory)
                directory.check()
                plan = (directory.gen, directory.cid)
            replica = self._replica_fingerprints() if self.store.replicas > 1 else None
            shares = step.agree((plan, replica, getattr(self.store, "store_id", None)),
                                same={**desc, "block_bytes": block_bytes})
            _same_store([s[2] for s in shares], f"save {path!r}")
            gen, cid = shares[0][0]
            if self.store.replicas > 1:  # decided from agreed values: raised alike
                self._check_replicas([s[1] for s in shares])
        gen_dir = os.path.join(path, gen)
        try:
            with self.store.collective(None):  # rank 0: the generation, its marker first
                if self.store.rank == 0:
                    directory.create()
            with self.store.collective(None) as step:  # every rank writes its part
                mine = self._write_part(gen_dir, block_bytes)
                parts = step.agree(mine)
            with self.store.collective(None) as step:  # rank 0: the manifest, aside
                manifest = self._manifest(gen, cid, parts)
                if self.store.rank == 0:
                    self._write_manifest(path, manifest)
                manifest["manifest_xxh64"] = step.agree(manifest["manifest_xxh64"])[0]
            # the commit: rank 0 renames the manifest into place, then removes the
            # earlier generations (only those of ours); an interrupt now waits for the
            # end of the call (it cannot fail a save that is published)
            with self.store.collective(None).defer_interrupts():
                if self.store.rank == 0:
                    self._publish(path, gen)
                    directory.clean()
        except BaseException:
            if self.store.rank == 0:
                directory.discard()
            raise
        return manifest

    def _replica_fingerprints(self):
        """This rank's chunk of every variable, hashed (compared across replicas)."""
        out = []
        for name, var, _ in self._entries():
            view = self.variables.core.local_view(var.vid, var.dtype, var.row_shape)
            out.append(_checksum(_bytes_of(np.ascontiguousarray(view))))
        return out

    def _check_replicas(self, prints):
        """After the round, from agreed values: member m of every group holds the same."""
        entries = self._entries()
        w = self.store.width
        for g in range(1, self.store.replicas):
            for m in range(w):
                a, b = prints[m], prints[g * w + m]
                for i, (x, y) in enumerate(zip(a, b)):
                    if x != y:
                        raise DDStoreValueError(
                            f"save: the replicas differ: variable {entries[i][0]!r} on "
                            f"rank {m} (group 0) and rank {g * w + m} (group {g}) hold "
                            f"different rows; a checkpoint keeps one replica (rows "
                            f"that init made and no update wrote hold whatever the "
                            f"memory held: write every row on every replica)")

    def _write_part(self, gen_dir, block_bytes):
        """This rank's file: its replica's share of its chunk of every variable, then the
        annotation arrays and record-size tables assigned to it.  Returns the entries."""
        fname = f"rank-{self.store.rank:05d}.bin"
        w = _Writer(os.path.join(gen_dir, fname), block_bytes)
        blocks, arrays = {}, {}
        try:
            for name, var, _ in self._entries():
                view = self.variables.core.local_view(var.vid, var.dtype, var.row_shape)
                lo0 = int(self.variables.core.chunk_offsets(var.vid)[self.store.group_rank])
                a, b = partition(view.shape[0], self.store.replicas, self.store.group)
                blocks[name] = w.rows(view[a:b], lo0 + a)
            for i, (key, arr) in enumerate(self._replicated()):
                if i % self.store.size == self.store.rank:
                    # (its shape kept: ascontiguousarray makes a 0-d array 1-d)
                    arr = np.ascontiguousarray(arr).reshape(np.shape(arr))
                    at, h = w.write(_bytes_of(arr))
                    arrays[key] = [at, str(arr.dtype), list(arr.shape), h]
        finally:
            w.close()
        return fname, blocks, arrays

    def _replicated(self):
        """Every array every rank holds alike, keyed as in the manifest."""
        out = []
        for rname, rec in sorted(self.records.table.items()):
            out.append((f"records:{rname}", np.diff(rec.offsets, axis=0)))
        for n, a in sorted(self.annotations.table.items()):
            out += [(f"annotation:{n}:{k}", x) for k, x in sorted(a.arrays.items())]
        return out

    def _manifest(self, gen, cid, parts):
        files = [f"{gen}/{p[0]}" for p in parts]
        variables = []
        for name, var, role in self._entries():
            blocks = [[r, *b] for r, p in enumerate(parts) for b in p[1][name]]
            blocks.sort(key=lambda b: b[2])
            variables.append({"name": name, "dtype": var.dtype.str,
                              "row_shape": list(var.row_shape), "nrows": int(var.nrows),
                              "records": None if role == "rows" else role,
                              "blocks": blocks})
        arrays = {}
        for r, p in enumerate(parts):
            for key, (at, dt, shape, h) in p[2].items():
                arrays[key] = {"file": r, "offset": at, "dtype": np.dtype(dt).str,
                               "shape": shape, "xxh64": h}
        records = [{"name": n, "keys": list(rec.keys)}
                   for n, rec in sorted(self.records.table.items())]
        anns = [{"name": n, "kind": a.kind, "meta": a.meta,
                 "arrays": sorted(a.arrays), "variables": list(a.variables),
                 "cuts": a.cuts} for n, a in sorted(self.annotations.table.items())]
        from ._version import __version__
        return {"manifest_xxh64": "0" * 16,  # first: see manifest_checksum
                "format": FORMAT, "version": VERSION, "checkpoint": cid, "generation": gen,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "ddstore": __version__,
                "saved_by": {"size": self.store.size, "width": self.store.width,
                             "replicas": self.store.replicas},
                "nbytes": sum(v["nrows"] * np.dtype(v["dtype"]).itemsize *
                              int(np.prod(v["row_shape"], dtype=np.int64))
                              for v in variables),
                "files": files, "variables": variables, "records": records,
                "arrays": arrays, "annotations": anns}

    @staticmethod
    def _write_manifest(path, manifest):
        """Rank 0: the manifest (its checksum first, see :func:`manifest_checksum`,
        which is set in ``manifest``) under a temporary name, synced."""
        raw = json.dumps(manifest, separators=(",", ":"), allow_nan=False).encode()
        if not raw.startswith(_PREFIX):  # pragma: no cover
            raise DDStoreError("internal: the manifest does not start with its checksum")
        raw = raw[:_DIGITS.start] + b"%016x" % manifest_checksum(raw) + raw[_DIGITS.stop:]
        _write_synced(os.path.join(path, f".{MANIFEST}.{manifest['generation']}"), raw)
        manifest["manifest_xxh64"] = raw[_DIGITS].decode()

    @staticmethod
    def _publish(path, gen):
        """Rank 0: the temporary manifest of generation ``gen`` renamed over the old one
        (atomic), then the directory synced.  A failed rename removes the temporary
        file and names it (the previous checkpoint stays); a failed sync after it says
        that the new checkpoint is in place."""
        tmp = os.path.join(path, f".{MANIFEST}.{gen}")
        try:
            os.replace(tmp, os.path.join(path, MANIFEST))
        except OSError as exc:
            _remove_quietly(tmp)
            raise _named(exc, tmp) from None
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise DDStoreError(
                f"save {path!r}: the new checkpoint is in place (generation {gen!r}: its "
                f"manifest was renamed into place), but syncing the directory failed "
                f"({exc}), so a crash of the machine may still lose it; the earlier "
                f"generations are kept") from None

    # ------------------------------------------------------------------ load
    @_collective.holds_interrupts  # (its steps are several)
    def load(self, path):
        """Collective: add everything of the checkpoint at ``path`` (see :meth:`save`) to
        this store, at this store's rank count and width: rows split as
        :func:`~ddstore.partition` splits them (or at the nearest allowed cut of a
        layer's annotation), records by record.  Each rank reads only the blocks that
        overlap what it will hold and verifies their checksums.  All or nothing: a
        missing, truncated or altered file, a manifest that is not a ddstore checkpoint,
        or a variable or annotation name the store already holds is refused with a
        :class:`DDStoreValueError` naming it, alike on every rank, and the store keeps
        only what it held before.  A SIGINT on one rank is held over the whole call (its
        steps are several): it is agreed in the next round, or raised once the call has
        completed on every rank, never between two of its steps on that rank alone.
        Returns the manifest."""
        with self.store.collective("load", str(path)) as step:
            path = _path_arg(path, "load")
            manifest = read_manifest(path)  # checksum and every field checked
            if self.store.rank == 0:  # every byte of every file accounted for (sizes)
                _check_extents(path, manifest)
            names = [v["name"] for v in manifest["variables"] if not v["records"]] + \
                [r["name"] for r in manifest["records"]]
            # a record set's fields ('<records>/<key>') are names too, both ways
            fields = {f"{r}/{k}" for r, rec in self.records.table.items() for k in rec.keys}
            taken = sorted({n for n in names if n in self.store} |
                           {v["name"] for v in manifest["variables"]
                            if v["name"] in fields or (v["records"] and
                                                       v["name"] in self.store)})
            taken += sorted(a["name"] for a in manifest["annotations"]
                            if a["name"] in self.annotations.table)
            if taken:
                raise DDStoreValueError(f"load {path!r}: the store already holds {taken}; "
                                        f"remove them or load into another store")
            ids = step.agree(getattr(self.store, "store_id", None), same={
                "manifest": (manifest["generation"], manifest.get("manifest_xxh64"))})
            _same_store(ids, f"load {path!r}")
        with self.store.collective(None):  # the replicated arrays, checked; this rank's rows
            arrays = self._read_arrays(path, manifest)
            rows, sizes = self._layout(manifest, arrays, path)
        with self.store.transaction(f"load {path!r}"):  # all or nothing: a failure removes
            self._create_from(manifest, rows, sizes)  # what this call created
            with self.store.collective(None) as step:
                self._fill(path, manifest, rows)
                step.agree()
            self.variables.core.sync()
            for a in manifest["annotations"]:
                self.annotations.put(a["name"], Annotation(
                    a["kind"], a["meta"],
                    {k: arrays[f"annotation:{a['name']}:{k}"] for k in a["arrays"]},
                    tuple(a["variables"]), dict(a["cuts"])))
        return manifest

    @staticmethod
    def _read_arrays(path, manifest):
        """Every replicated array of the checkpoint (every rank reads them all)."""
        out = {}
        for key, e in manifest["arrays"].items():
            name = os.path.join(path, manifest["files"][e["file"]])
            arr = np.empty(e["shape"], dtype=np.dtype(e["dtype"]))
            f, _ = _open_regular(name)
            try:
                with f:
                    _read_exact(f, name, e["offset"], memoryview(_bytes_of(arr)))
            except OSError as exc:
                raise DDStoreValueError(f"checkpoint file {name!r} cannot be read: "
                                        f"{exc}") from None
            if _checksum(_bytes_of(arr)) != e["xxh64"]:
                raise DDStoreValueError(f"checkpoint file {name!r}: array {key!r} at "
                                        f"offset {e['offset']} fails its checksum "
                                        f"(altered or damaged)")
            out[key] = arr
        return out

    def _layout(self, manifest, arrays, path=""):
        """``{variable: (lo, hi)}``: the global rows this rank will hold, and for record
        sets ``{name: local sizes table}``."""
        w, m = self.store.width, self.store.group_rank
        cuts = {}
        for a in manifest["annotations"]:
            for v, key in a["cuts"].items():
                cuts[v] = key if isinstance(key, int) else \
                    arrays[f"annotation:{a['name']}:{key}"]
        rows, sizes = {}, {}
        by_name = {v["name"]: v for v in manifest["variables"]}
        for r in manifest["records"]:
            table = arrays[f"records:{r['name']}"]
            fields = [by_name[f"{r['name']}/{k}"]["nrows"] for k in r["keys"]]
            if (table < 0).any() or table.sum(axis=0).tolist() != fields:
                raise DDStoreValueError(
                    f"checkpoint {os.path.join(path, MANIFEST)!r}: field "
                    f"arrays['records:{r['name']}']: the record sizes of "
                    f"{r['name']!r} must be >= 0 and add up to its fields' rows {fields}")
            offsets = np.zeros((table.shape[0] + 1, table.shape[1]), np.int64)
            np.cumsum(table, axis=0, out=offsets[1:])
            lo, hi = partition(table.shape[0], w, m)
            sizes[r["name"]] = table[lo:hi]
            for j, k in enumerate(r["keys"]):
                rows[f"{r['name']}/{k}"] = (int(offsets[lo, j]), int(offsets[hi, j]))
        for v in manifest["variables"]:
            if v["records"]:
                continue
            cut = cuts.get(v["name"])
            if isinstance(cut, int):
                if v["nrows"] % cut:
                    raise DDStoreValueError(f"checkpoint: variable {v['name']!r} has "
                                            f"{v['nrows']} rows, not items of {cut} rows")
                lo, hi = partition(v["nrows"] // cut, w, m)
                rows[v["name"]] = (lo * cut, hi * cut)
            elif cut is not None:
                b = _cut_bounds(v["nrows"], w, cut, f"checkpoint "
                                f"{os.path.join(path, MANIFEST)!r}: variable {v['name']!r}")
                rows[v["name"]] = (b[m], b[m + 1])
            else:
                rows[v["name"]] = partition(v["nrows"], w, m)
        return rows, sizes

    def _create_from(self, manifest, rows, sizes):
        """Collective: the variables and record sets, empty, at this store's layout
        (from :meth:`_layout`)."""
        by_name = {v["name"]: v for v in manifest["variables"]}
        for v in manifest["variables"]:
            if not v["records"]:
                lo, hi = rows[v["name"]]
                self.store.init(v["name"], hi - lo, tuple(v["row_shape"]), np.dtype(v["dtype"]))
        for r in manifest["records"]:
            schema = {}
            for k in r["keys"]:
                f = by_name[f"{r['name']}/{k}"]
                schema[k] = (np.dtype(f["dtype"]), tuple(f["row_shape"]))
            table = sizes[r["name"]]
            self.store.init_records(r["name"], schema,
                              {k: table[:, j] for j, k in enumerate(r["keys"])})
        return None

    def _fill(self, path, manifest, rows):
        """This rank's rows of every variable (``rows``: their global ranges, from
        :meth:`_layout`), from the blocks that overlap them."""
        files = {}
        try:
            for v in manifest["variables"]:
                lo, hi = rows[v["name"]]
                if hi <= lo:
                    continue
                var = self._field_or_var(v["name"], v["records"])
                view = self.variables.core.local_view(var.vid, var.dtype, var.row_shape)
                row_bytes = var.dtype.itemsize * int(np.prod(var.row_shape, dtype=np.int64))
                flat = view.reshape(view.shape[0], -1).view(np.uint8) if row_bytes else None
                covered = 0
                for f_idx, offset, r0, n, h in v["blocks"]:
                    a, b = max(lo, r0), min(hi, r0 + n)
                    if a >= b:
                        continue
                    covered += b - a
                    if not row_bytes:
                        continue
                    name = os.path.join(path, manifest["files"][f_idx])
                    if name not in files:
                        files[name] = _open_regular(name)[0]
                    direct = a == r0 and b == r0 + n  # the whole block: into place
                    dst = flat[a - lo:b - lo].reshape(-1) if direct else \
                        np.empty(n * row_bytes, np.uint8)
                    _read_exact(files[name], name, offset, memoryview(dst))
                    if _checksum(dst) != h:
                        raise DDStoreValueError(
                            f"checkpoint file {name!r}: the block of variable "
                            f"{v['name']!r} at offset {offset} (rows {r0}..{r0 + n - 1}) "
                            f"fails its checksum (altered or damaged)")
                    if not direct:
                        flat[a - lo:b - lo] = dst.reshape(n, row_bytes)[a - r0:b - r0]
                if covered != hi - lo:
                    raise DDStoreValueError(f"checkpoint: the blocks of variable "
                                            f"{v['name']!r} do not cover rows [{lo}, {hi})")
                if row_bytes and not np.dtype(v["dtype"]).isnative and var.dtype.isnative:
                    view.byteswap(inplace=True)  # saved in the other order: init made it
                    # this machine's (a variable saved before stores held native dtypes)
        finally:
            for f in files.values():
                f.close()

    def _field_or_var(self, name, records):
        if records:
            return self.records.table[records].fields[name[len(records) + 1:]]
        return self.variables.table[name]


CheckpointAPI = Checkpoints  # the name of the mixin it replaces (tests patch it)


def restore(cls, path, comm=None, width=None, transport="auto", *, memory_budget=None,
            progress=None):
    """:meth:`DDStore.restore <ddstore.DDStore.restore>` (``cls``: the store class): a
    new store sized from the manifest when asked, then :meth:`load`; freed on a
    refusal."""
    # a refusal with no communicator to agree over ends the job, as the constructor's
    _lifecycle.install_abort_hook()
    comm = _lifecycle.as_comm(comm, "DDStore.restore")  # None: MPI.COMM_WORLD
    nbytes = None
    # held over the constructor and load together: a SIGINT after the constructor's last
    # round is agreed in load's first, not raised on one rank between the two calls
    level = _collective.hold_interrupts()
    store = None
    try:
        if width == "auto" or memory_budget is not None:
            # the store is sized from the manifest: read in a step of its own, so that a
            # path refused or a checkpoint missing on one rank is agreed as what it is
            with collective(comm, "DDStore.restore", str(path)):
                nbytes = read_manifest(_path_arg(path, "restore"))["nbytes"]
        store = cls(comm, width, transport, data_nbytes=nbytes,
                    memory_budget=memory_budget, progress=progress)
        store.load(path)
    except BaseException as exc:
        if store is not None and _collective.is_agreed(exc):  # alike everywhere: free()
            store.free()                                       # meets every rank
        raise
    finally:
        _collective.release_interrupts(level)
    return store
