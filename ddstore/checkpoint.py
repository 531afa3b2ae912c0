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

**The file set** (format version 1), in directory ``path``::

    path/ddstore-checkpoint.json     the manifest (JSON): everything below is named here
    path/<generation>/rank-00000.bin one raw file per writing rank: blocks of rows

Each rank writes one file, in parallel, with no gather on one rank: the rows of its own
chunk of each variable, or (with replicas) its replica's share of that chunk, so the
``size`` ranks write ``1/size`` of one replica each.  A file is a sequence of *blocks*
(at most ``block_bytes``, 32 MiB by default, whole rows); the manifest lists, for every
variable, its blocks as ``[file, byte offset, first global row, rows, xxh64]`` and, for
every annotation array and record-size table, ``{file, offset, dtype, shape, xxh64}``.
Anyone can read a variable back with numpy alone::

    m = json.load(open(f"{path}/ddstore-checkpoint.json"))
    v = m["variables"][0]
    rows = [np.fromfile(f"{path}/{m['files'][f]}", dtype=v["dtype"], offset=off,
                        count=n * math.prod(v["row_shape"])) for f, off, r0, n, h in v["blocks"]]

**All or nothing.** A save writes its files under a new generation directory, checks
every rank's writes (a full disk on one node is agreed, raised alike everywhere, and
the new files removed), then makes the checkpoint visible by one atomic rename of the
manifest; only then are the previous generation's files removed.  A job killed at any
point leaves the previous checkpoint readable.

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
import json
import os
import shutil
import time
import uuid

import numpy as np

from . import _core
from ._checks import partition
from .errors import DDStoreError, DDStoreValueError

__all__ = ["CheckpointAPI", "Annotation", "MANIFEST", "read_manifest"]

MANIFEST = "ddstore-checkpoint.json"
FORMAT = "ddstore-checkpoint"
VERSION = 1
BLOCK_BYTES = 32 << 20
_SEED = 0x64647374  # the checksum seed of every block ("ddst")


class Annotation:
    """What a layer recorded about an object it built (see :meth:`DDStore.annotate`):
    ``kind`` (str), ``meta`` (a JSON-serialisable dict), ``arrays`` (dict of numpy
    arrays, alike on every rank), ``variables`` (tuple of variable names), ``cuts``
    (dict: variable name -> name of an array in ``arrays`` of allowed chunk starts)."""
    __slots__ = ("kind", "meta", "arrays", "variables", "cuts")

    def __init__(self, kind, meta, arrays, variables, cuts):
        self.kind, self.meta, self.arrays = kind, meta, arrays
        self.variables, self.cuts = variables, cuts

    def __repr__(self):
        return (f"Annotation(kind={self.kind!r}, meta={self.meta!r}, "
                f"arrays={sorted(self.arrays)}, variables={list(self.variables)})")


def _json(value, what):
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise DDStoreValueError(f"{what} must be JSON-serialisable (dicts, lists, str, "
                                f"finite numbers, bool, None): {exc}") from None


def _path_arg(path, op):
    """``path`` (str or os.PathLike) as a non-empty str, else refused naming ``op``."""
    path = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
    if not isinstance(path, str) or not path:
        raise DDStoreValueError(f"{op}: path must be a directory name (str or "
                                f"os.PathLike), got {path!r}")
    return path


def _checksum(buf):
    return _core.fingerprint(buf, _SEED)


def _bytes_of(arr):
    """A flat uint8 view of a C-contiguous array (empty arrays included)."""
    return arr.reshape(-1).view(np.uint8) if arr.size else np.zeros(0, np.uint8)


def read_manifest(path):
    """The manifest of the checkpoint in directory ``path`` as a dict (no MPI needed).
    Raises :class:`DDStoreValueError` naming the file when there is none or it is not a
    ddstore checkpoint of a version this release reads."""
    path = os.fspath(path)
    name = os.path.join(path, MANIFEST)
    try:
        with open(name, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        raise DDStoreValueError(f"no checkpoint at {path!r}: {MANIFEST} not found "
                                f"(DDStore.save writes it last)") from None
    except OSError as exc:
        raise DDStoreValueError(f"checkpoint {name!r} cannot be read: {exc}") from None
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise DDStoreValueError(f"checkpoint {name!r} is not JSON ({exc}): not a ddstore "
                                f"checkpoint, or damaged") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DDStoreValueError(f"{name!r} is not a ddstore checkpoint manifest "
                                f"(its 'format' is not {FORMAT!r})")
    if manifest.get("version") != VERSION:
        raise DDStoreValueError(f"checkpoint {name!r} has format version "
                                f"{manifest.get('version')!r}; this ddstore reads version "
                                f"{VERSION}")
    for key in ("generation", "files", "variables", "records", "arrays", "annotations"):
        if key not in manifest:
            raise DDStoreValueError(f"checkpoint {name!r}: the manifest has no {key!r}")
    return manifest


def _cut_bounds(nrows, width, cuts, what):
    """Chunk starts of ``width`` members for ``nrows`` rows, each at the allowed cut
    nearest to the balanced split (``cuts``: sorted, from 0 to ``nrows``)."""
    cuts = np.asarray(cuts, dtype=np.int64)
    if cuts.ndim != 1 or cuts.size < 1 or cuts[0] != 0 or cuts[-1] != nrows or \
            (cuts.size > 1 and (np.diff(cuts) < 0).any()):
        raise DDStoreValueError(f"{what}: its cuts must rise from 0 to its {nrows} rows")
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
        while done < view.nbytes:
            done += self.f.write(view[done:done + (1 << 30)])
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
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()


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


class CheckpointAPI:
    """The checkpoint calls of :class:`~ddstore.DDStore` (a mixin, like
    :class:`~ddstore.records.RecordsAPI`): :meth:`annotate`, :meth:`annotation`,
    :meth:`annotations`, :meth:`save`, :meth:`load` and :meth:`restore`."""

    # ------------------------------------------------------------------ annotations
    def annotate(self, name, kind, meta=None, arrays=None, *, variables=(), cuts=None):
        """Local, made alike on every rank (a layer calls it at the end of the collective
        call that built object ``name``): record what reopening the object needs, so that
        :meth:`save` keeps it and a layer's ``open(store, name)`` finds it after
        :meth:`restore`.  ``kind``: the layer's class (str); ``meta``: a JSON-serialisable
        dict; ``arrays``: ``{key: numpy array}`` held alike by every rank (kept by
        reference, not copied); ``variables``: the store variables the object owns
        (removing any of them drops the annotation); ``cuts``: for a variable whose member
        chunks must start at certain rows, ``{variable: key of an array in arrays}``
        (allowed chunk starts, rising from 0 to its row count: a restore at another
        width splits it at the allowed cut nearest to the balanced split) or
        ``{variable: k}`` (an int: the rows are items of ``k`` rows each, split as
        :func:`~ddstore.partition` splits the items, so a variable of ``k`` rows per
        node follows the node ranges of a variable of one row per node).  An existing annotation of the same
        name is replaced.  :meth:`save` checks that every rank holds the same ones."""
        self.check_alive()
        if not isinstance(name, str) or not name or not isinstance(kind, str) or not kind:
            raise DDStoreValueError(f"annotate: name and kind must be non-empty strings, "
                                    f"got {name!r}, {kind!r}")
        meta = _json({} if meta is None else meta, f"annotate {name!r}: meta")
        arrays = dict(arrays or {})
        for key, arr in arrays.items():
            if not isinstance(key, str) or not isinstance(arr, np.ndarray) or \
                    arr.dtype.hasobject:
                raise DDStoreValueError(f"annotate {name!r}: arrays must map str to numpy "
                                        f"arrays of numbers, got {key!r}: "
                                        f"{type(arr).__name__}")
        variables = tuple(variables)
        for v in variables:
            if v not in self:
                raise DDStoreValueError(f"annotate {name!r}: unknown variable {v!r}")
        cuts = dict(cuts or {})
        for v, key in cuts.items():
            per_item = isinstance(key, (int, np.integer)) and not isinstance(key, bool)
            if v not in variables or not (key in arrays if isinstance(key, str) else
                                          per_item and key >= 1):
                raise DDStoreValueError(f"annotate {name!r}: cuts must map its variables "
                                        f"to keys of its arrays or to rows per item (an "
                                        f"int >= 1), got {v!r}: {key!r}")
            if per_item:
                cuts[v] = int(key)
        self._annotations[name] = Annotation(kind, meta, arrays, variables, cuts)

    def unannotate(self, name):
        """Local, made alike on every rank: drop the annotation of object ``name`` (if
        any), e.g. when a layer's object is rolled back or removed while its variables
        stay.  Returns whether there was one."""
        self.check_alive()
        return self._annotations.pop(name, None) is not None

    def annotation(self, name, kind=None):
        """The :class:`Annotation` of object ``name`` (local).  Raises
        :class:`DDStoreValueError` naming the known ones when there is none (or it is of
        another ``kind``)."""
        self.check_alive()
        ann = self._annotations.get(name)
        if ann is None or (kind is not None and ann.kind != kind):
            known = self.annotations(kind)
            raise DDStoreValueError(
                f"no {kind or 'object'} {name!r} in this store (restored or built); "
                f"known: {known}")
        return ann

    def annotations(self, kind=None):
        """Names of the annotated objects (of ``kind``, if given), sorted (local)."""
        self.check_alive()
        return sorted(n for n, a in self._annotations.items()
                      if kind is None or a.kind == kind)

    def _forget_annotations(self, variable):
        for n in [n for n, a in self._annotations.items() if variable in a.variables]:
            del self._annotations[n]

    # ------------------------------------------------------------------ save
    def _entries(self):
        """Every rows variable as ``(name, var, role)``: role "rows" or a record set's
        name (its fields)."""
        out = [(n, v, "rows") for n, v in sorted(self._vars.items())]
        for rname, rec in sorted(self._records.items()):
            out += [(f"{rname}/{k}", rec.fields[k], rname) for k in rec.keys]
        return out

    def _description(self):
        """What every rank must hold alike to save: variables and annotations."""
        vars_ = [(n, str(v.dtype), list(v.row_shape), int(v.nrows), role)
                 for n, v, role in self._entries()]
        anns = []
        for n, a in sorted(self._annotations.items()):
            arrs = {k: (str(x.dtype), list(x.shape), _checksum(
                _bytes_of(np.ascontiguousarray(x)))) for k, x in sorted(a.arrays.items())}
            anns.append([n, a.kind, a.meta, arrs, list(a.variables), a.cuts])
        text = json.dumps([vars_, anns], sort_keys=True).encode()
        return f"{len(vars_)} variables, {len(anns)} annotations, xxh64 " \
               f"0x{_checksum(text):016x}"

    def save(self, path, *, block_bytes=BLOCK_BYTES):
        """Collective: write everything this store holds to directory ``path`` (created
        if needed), every rank its own part in parallel, plus one manifest; see
        :mod:`ddstore.checkpoint` for the files.  All or nothing: the new checkpoint
        becomes visible by one rename once every rank's files are written and synced;
        a failure on any rank (a full disk, a directory it cannot write) raises the same
        :class:`DDStoreError` on every rank and leaves the previous checkpoint at
        ``path`` as it was.  Refuses a ``path`` that holds other files but no checkpoint
        (it would not overwrite them).  Waits for the store's background threads (a
        layer's commit) first.  Replicas must hold the same rows (they do, unless a
        program wrote different rows into different groups: refused, naming the
        variable).  Returns the manifest (a dict).

        The rows, records and annotations stay in the store, unchanged."""
        with self.collective("save", str(path)) as step:
            path = _path_arg(path, "save")
            block_bytes = int(block_bytes)
            if block_bytes < 1:
                raise DDStoreValueError(f"save: block_bytes={block_bytes} must be >= 1")
            self._join_threads()  # a layer's background commit writes rows
            desc = self._description()
            gen = None
            if self.rank == 0:
                gen = self._prepare_dir(path)
            replica = self._replica_fingerprints() if self.replicas > 1 else None
            shares = step.agree((gen, replica), same={"store": desc,
                                                     "block_bytes": block_bytes})
            gen = shares[0][0]
            if self.replicas > 1:  # decided from agreed values: raised alike
                try:
                    self._check_replicas([s[1] for s in shares])
                except DDStoreError:
                    if self.rank == 0:
                        shutil.rmtree(os.path.join(path, gen), ignore_errors=True)
                    raise
        gen_dir = os.path.join(path, gen)
        try:
            with self.collective(None) as step:  # every rank writes its part
                mine = self._write_part(gen_dir, block_bytes)
                parts = step.agree(mine)
            with self.collective(None) as step:  # rank 0 makes it visible
                manifest = self._manifest(gen, parts)
                if self.rank == 0:
                    self._publish(path, manifest)
                step.agree()
        except BaseException:
            if self.rank == 0 and not self._published(path, gen):
                shutil.rmtree(gen_dir, ignore_errors=True)
            raise
        return manifest

    @staticmethod
    def _published(path, gen):
        """Whether the manifest at ``path`` names generation ``gen`` (then its files
        stay, even if a later part of the save failed)."""
        try:
            return read_manifest(path)["generation"] == gen
        except DDStoreError:
            return False

    def _prepare_dir(self, path):
        """Rank 0, before the round: the directory and a new generation under it."""
        if os.path.exists(path) and not os.path.isdir(path):
            raise DDStoreValueError(f"save: {path!r} exists and is not a directory")
        os.makedirs(path, exist_ok=True)
        entries = set(os.listdir(path))
        ours = ("g-", f".{MANIFEST}.")  # generations, manifests not yet renamed
        if entries and MANIFEST not in entries and not all(
                e.startswith(ours) for e in entries):
            raise DDStoreValueError(
                f"save: {path!r} holds other files ({sorted(entries)[:5]}) and no "
                f"ddstore checkpoint; give an empty or new directory")
        gen = f"g-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        os.mkdir(os.path.join(path, gen))
        return gen

    def _replica_fingerprints(self):
        """This rank's chunk of every variable, hashed (compared across replicas)."""
        out = []
        for name, var, _ in self._entries():
            view = self._core.local_view(var.vid, var.dtype, var.row_shape)
            out.append(_checksum(_bytes_of(np.ascontiguousarray(view))))
        return out

    def _check_replicas(self, prints):
        """After the round, from agreed values: member m of every group holds the same."""
        entries = self._entries()
        w = self.width
        for g in range(1, self.replicas):
            for m in range(w):
                a, b = prints[m], prints[g * w + m]
                for i, (x, y) in enumerate(zip(a, b)):
                    if x != y:
                        raise DDStoreValueError(
                            f"save: the replicas differ: variable {entries[i][0]!r} on "
                            f"rank {m} (group 0) and rank {g * w + m} (group {g}) hold "
                            f"different rows; a checkpoint keeps one replica")

    def _write_part(self, gen_dir, block_bytes):
        """This rank's file: its replica's share of its chunk of every variable, then the
        annotation arrays and record-size tables assigned to it.  Returns the entries."""
        fname = f"rank-{self.rank:05d}.bin"
        w = _Writer(os.path.join(gen_dir, fname), block_bytes)
        blocks, arrays = {}, {}
        try:
            for name, var, _ in self._entries():
                view = self._core.local_view(var.vid, var.dtype, var.row_shape)
                lo0 = int(self._core.chunk_offsets(var.vid)[self.group_rank])
                a, b = partition(view.shape[0], self.replicas, self.group)
                blocks[name] = w.rows(view[a:b], lo0 + a)
            for i, (key, arr) in enumerate(self._replicated()):
                if i % self.size == self.rank:
                    arr = np.ascontiguousarray(arr)
                    at, h = w.write(_bytes_of(arr))
                    arrays[key] = [at, str(arr.dtype), list(arr.shape), h]
        finally:
            w.close()
        return fname, blocks, arrays

    def _replicated(self):
        """Every array every rank holds alike, keyed as in the manifest."""
        out = []
        for rname, rec in sorted(self._records.items()):
            out.append((f"records:{rname}", np.diff(rec.offsets, axis=0)))
        for n, a in sorted(self._annotations.items()):
            out += [(f"annotation:{n}:{k}", x) for k, x in sorted(a.arrays.items())]
        return out

    def _manifest(self, gen, parts):
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
                   for n, rec in sorted(self._records.items())]
        anns = [{"name": n, "kind": a.kind, "meta": a.meta,
                 "arrays": sorted(a.arrays), "variables": list(a.variables),
                 "cuts": a.cuts} for n, a in sorted(self._annotations.items())]
        from ._version import __version__
        return {"format": FORMAT, "version": VERSION, "generation": gen,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "ddstore": __version__,
                "saved_by": {"size": self.size, "width": self.width,
                             "replicas": self.replicas},
                "nbytes": sum(v["nrows"] * np.dtype(v["dtype"]).itemsize *
                              int(np.prod(v["row_shape"], dtype=np.int64))
                              for v in variables),
                "files": files, "variables": variables, "records": records,
                "arrays": arrays, "annotations": anns}

    @staticmethod
    def _publish(path, manifest):
        """Rank 0: the manifest under a temporary name, synced, renamed over the old one
        (atomic), the directory synced; then the old generations removed."""
        tmp = os.path.join(path, f".{MANIFEST}.{manifest['generation']}")
        with open(tmp, "w") as f:
            json.dump(manifest, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(path, MANIFEST))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        for e in os.listdir(path):  # earlier generations, and what killed saves left
            if e.startswith("g-") and e != manifest["generation"]:
                shutil.rmtree(os.path.join(path, e), ignore_errors=True)
            elif e.startswith(f".{MANIFEST}."):
                os.remove(os.path.join(path, e))

    # ------------------------------------------------------------------ load
    def load(self, path):
        """Collective: add everything of the checkpoint at ``path`` (see :meth:`save`) to
        this store, at this store's rank count and width: rows split as
        :func:`~ddstore.partition` splits them (or at the nearest allowed cut of a
        layer's annotation), records by record.  Each rank reads only the blocks that
        overlap what it will hold and verifies their checksums.  All or nothing: a
        missing, truncated or altered file, a manifest that is not a ddstore checkpoint,
        or a variable or annotation name the store already holds is refused with a
        :class:`DDStoreValueError` naming it, alike on every rank, and the store keeps
        only what it held before.  Returns the manifest."""
        with self.collective("load", str(path)) as step:
            path = _path_arg(path, "load")
            manifest = read_manifest(path)
            names = [v["name"] for v in manifest["variables"] if not v["records"]] + \
                [r["name"] for r in manifest["records"]]
            taken = sorted(n for n in names if n in self)
            taken += sorted(a["name"] for a in manifest["annotations"]
                            if a["name"] in self._annotations)
            if taken:
                raise DDStoreValueError(f"load {path!r}: the store already holds {taken}; "
                                        f"remove them or load into another store")
            arrays = self._read_arrays(path, manifest)
            step.agree(same={"manifest generation": manifest["generation"]})
        with self.transaction(f"load {path!r}"):
            rows = self._create_from(manifest, arrays)
            with self.collective(None) as step:
                self._fill(path, manifest, rows)
                step.agree()
            self._core.sync()
            for a in manifest["annotations"]:
                self._annotations[a["name"]] = Annotation(
                    a["kind"], a["meta"],
                    {k: arrays[f"annotation:{a['name']}:{k}"] for k in a["arrays"]},
                    tuple(a["variables"]), dict(a["cuts"]))
        return manifest

    @staticmethod
    def _read_arrays(path, manifest):
        """Every replicated array of the checkpoint (every rank reads them all)."""
        out = {}
        for key, e in manifest["arrays"].items():
            name = os.path.join(path, manifest["files"][e["file"]])
            arr = np.empty(e["shape"], dtype=np.dtype(e["dtype"]))
            try:
                with open(name, "rb") as f:
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

    def _layout(self, manifest, arrays):
        """``{variable: (lo, hi)}``: the global rows this rank will hold, and for record
        sets ``{name: local sizes table}``."""
        w, m = self.width, self.group_rank
        cuts = {}
        for a in manifest["annotations"]:
            for v, key in a["cuts"].items():
                cuts[v] = key if isinstance(key, int) else \
                    arrays[f"annotation:{a['name']}:{key}"]
        rows, sizes = {}, {}
        for r in manifest["records"]:
            table = arrays[f"records:{r['name']}"]
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
                b = _cut_bounds(v["nrows"], w, cut, f"variable {v['name']!r}")
                rows[v["name"]] = (b[m], b[m + 1])
            else:
                rows[v["name"]] = partition(v["nrows"], w, m)
        return rows, sizes

    def _create_from(self, manifest, arrays):
        """Collective: the variables and record sets, empty, at this store's layout."""
        rows, sizes = self._layout(manifest, arrays)
        by_name = {v["name"]: v for v in manifest["variables"]}
        for v in manifest["variables"]:
            if not v["records"]:
                lo, hi = rows[v["name"]]
                self.init(v["name"], hi - lo, tuple(v["row_shape"]), np.dtype(v["dtype"]))
        for r in manifest["records"]:
            schema = {}
            for k in r["keys"]:
                f = by_name[f"{r['name']}/{k}"]
                schema[k] = (np.dtype(f["dtype"]), tuple(f["row_shape"]))
            table = sizes[r["name"]]
            self.init_records(r["name"], schema,
                              {k: table[:, j] for j, k in enumerate(r["keys"])})
        return rows

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
                view = self._core.local_view(var.vid, var.dtype, var.row_shape)
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
                        try:
                            files[name] = open(name, "rb")
                        except OSError as exc:
                            raise DDStoreValueError(f"checkpoint file {name!r} cannot be "
                                                    f"read: {exc}") from None
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
        finally:
            for f in files.values():
                f.close()

    def _field_or_var(self, name, records):
        if records:
            return self._records[records].fields[name[len(records) + 1:]]
        return self._vars[name]

    @classmethod
    def restore(cls, path, comm=None, width=None, transport="auto", *,
                memory_budget=None):
        """Collective: a new store over ``comm`` holding the checkpoint at ``path`` (see
        :meth:`save`), at any rank count and ``width`` (``"auto"``: the smallest width
        whose share fits the memory budget, from the checkpoint's size).  Layers reopen
        their objects from it by name (``TemporalGraph.open(store, name)``...).  On a
        refusal the new store is freed and the error raised alike on every rank."""
        from mpi4py import MPI
        comm = MPI.COMM_WORLD if comm is None else comm
        nbytes = None
        if width == "auto" or memory_budget is not None:
            try:
                nbytes = read_manifest(path)["nbytes"]
            except DDStoreError:
                nbytes = 1  # refused below, by load's agreed step
        store = cls(comm, width, transport, data_nbytes=nbytes, memory_budget=memory_budget)
        try:
            store.load(path)
        except BaseException:
            store.free()
            raise
        return store
