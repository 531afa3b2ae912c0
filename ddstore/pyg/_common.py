"""What the feature store, the graph store and the sampler share: variable names, the
conversion of tensors to numpy, and the checks of range-wise puts (the rows are placed
into the striped layout by :func:`ddstore.build.fill_rows`: each group holds
one replica; member ``g`` holds rows ``partition(num_rows, width, g)``)."""
import contextlib
import contextvars
import re

import numpy as np

from .._checks import host_tensor, is_int, native_order, storable
from .._fingerprint import same_data
from ..errors import DDStoreError, DDStoreIndexError, DDStoreStateError, DDStoreValueError

# the edge type under which a homogeneous graph's edge attributes are kept in the feature
# store (the GraphStore calls that edge type None, as PyG does)
EDGES = ("_N", "to", "_N")


# a name part kept as it is: no "%" or "/", underscores single and inside (what nearly
# every PyG type and attribute is called: "paper", "rev_writes", "edge_attr")
_PLAIN = re.compile(r"[^%/_]+(?:_[^%/_]+)*")
_EDGES_KEY = "_N__to___N"  # EDGES' part of the names, as it always was


def name_part(text):
    """``text`` (a node type, an edge type's part, an attribute) as one part of a
    variable name, so that distinct keys never share a variable: kept as it is when
    plain (:data:`_PLAIN`), else ``%``, ``/`` and ``_`` written ``%25``, ``%2F``,
    ``%5F`` (``"a/b"``, ``"a__b"``, ``"_"`` and ``""`` shared names with ``("a", "b")``,
    ``("a", "b")`` joined, ``None``, ...); :func:`from_name_part` reads it back."""
    if _PLAIN.fullmatch(text):
        return text
    if not text:
        return "%E"
    return text.replace("%", "%25").replace("/", "%2F").replace("_", "%5F")


def from_name_part(part):
    """The text :func:`name_part` wrote as ``part``."""
    if "%" not in part:
        return part
    if part == "%E":
        return ""
    return part.replace("%5F", "_").replace("%2F", "/").replace("%25", "%")


def type_key(t):
    """A node type (None or str) or edge type (3-tuple of str) as one string, a
    different one for each (:func:`name_part`)."""
    if t is None:
        return "_"
    if isinstance(t, str):
        return name_part(t)
    if t == EDGES:
        return _EDGES_KEY
    return "__".join(name_part(x) for x in t)


def is_edge_type(t):
    return isinstance(t, tuple) and len(t) == 3 and all(isinstance(x, str) for x in t)


def as_edge_type(t):
    """``t`` as the store keys it: an edge type given as a list (``['a', 'to', 'b']``, as
    PyG accepts) is the tuple ``('a', 'to', 'b')``; anything else as given."""
    if type(t) is list and len(t) == 3 and all(isinstance(x, str) for x in t):
        return tuple(t)
    return t


def node_var(name, node_type, attr):
    """The variable of node attribute ``attr`` ("": the group's own tensor)."""
    return f"{name}/node/{type_key(node_type)}/{name_part(attr) if attr else ''}"


def edge_var(name, edge_type, attr):
    """The variable of edge attribute ``attr`` ("": the group's own tensor)."""
    return (f"{name}/edge/{type_key(EDGES if edge_type is None else edge_type)}/"
            f"{name_part(attr) if attr else ''}")


_AGREED = contextvars.ContextVar("ddstore_pyg_values_agreed", default=False)


@contextlib.contextmanager
def values_agreed():
    """Inside: the values the caller already held every rank to (one round of
    :func:`~ddstore._fingerprint.same_data` over all of them, as ``from_pyg`` does) are
    not fingerprinted again by the puts it makes (:func:`same_values`)."""
    token = _AGREED.set(True)
    try:
        yield
    finally:
        _AGREED.reset(token)


def same_values(values, what):
    """``same=`` settings of a put's step that hold every rank to the same values
    (every rank passes the whole tensor or edge index: values that differ would store a
    silent mix of every rank's share): :func:`~ddstore._fingerprint.same_data`, or
    nothing inside :func:`values_agreed`."""
    return {} if _AGREED.get() else same_data(values, what)


def call_piece(fn, label, a, b, what):
    """``(out, array)``: what a user's piece source ``fn(a, b)`` returned, and it as a
    numpy array.  Anything ``fn`` raises (but a :class:`~ddstore.DDStoreError` or a
    ``MemoryError``) is raised as a :class:`~ddstore.DDStoreValueError` naming ``label(a,
    b)``, as is a value that is not array-like; the caller's collective step agrees on
    it."""
    try:
        out = fn(a, b)
    except (DDStoreError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 -- named here, agreed by the caller's step
        raise DDStoreValueError(f"{what}: {label}({a}, {b}) raised "
                                f"{type(exc).__name__}: {exc}") from exc
    return out, as_numpy(out, what)


def as_numpy(x, what):
    """``x`` (torch tensor, numpy array or sequence) as a numpy array; raises a
    :class:`~ddstore.DDStoreValueError` naming ``what`` when it is not one (a
    ``MemoryError`` goes on as it is)."""
    try:
        if hasattr(x, "detach") and hasattr(x, "numpy"):
            x = host_tensor(x, what)
            try:
                return x.numpy()
            except TypeError as exc:  # bfloat16 and the like
                raise DDStoreValueError(f"{what}: dtype {x.dtype} has no numpy equivalent "
                                        f"and cannot be stored ({exc})") from exc
        return np.asarray(x)
    except (DDStoreError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 -- named here, agreed by the caller's step
        raise DDStoreValueError(f"{what} is not an array ({exc})") from exc


# torch dtypes numpy has no equivalent for, kept as their bit pattern in an integer of
# the same size (the attribute remembers the torch dtype and reads come back as it)
_BITS = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}


def bits_dtype(torch_dtype):
    """The numpy integer dtype a torch-only dtype (bfloat16, float8...) is stored as."""
    import torch
    return _BITS.get(torch.empty(0, dtype=torch_dtype).element_size())


def feature_record(store, name):
    """The record (annotation meta) of the feature store ``name`` in ``store`` now, or
    None: what the graph store of that name reads of it (declared rows, attributes'
    torch-only dtypes), alike on every rank, kept by checkpoints and transactions."""
    ann = recorded(store, FEATURE_KIND, name)
    return None if ann is None else ann.meta


def declared_rows(store, name):
    """The ``{group_name: rows}`` declared on the feature store ``name`` of ``store``
    (:meth:`FeatureStore.declare_rows`; empty when none)."""
    meta = feature_record(store, name)
    return {} if meta is None else {type_from_json(g): int(n) for g, n in meta["declared"]}


def torch_dtype_of(store, var):
    """The torch-only dtype (bfloat16, float8...) whose bit pattern the feature store's
    attribute variable ``var`` holds, or None (plain numpy values, or no attribute)."""
    meta = feature_record(store, var.split("/", 1)[0])
    for row in () if meta is None else meta["attrs"]:
        if row[2] == var:
            return torch_dtype_named(row[6])
    return None


def value_dtype(store, var):
    """The numpy dtype of ``var``'s values read as numbers by :func:`as_values`: the
    variable's dtype, or float32 for the bit pattern of a torch-only float dtype
    (bfloat16 and float8 values are all exact in float32)."""
    if torch_dtype_of(store, var) is not None:
        return np.dtype(np.float32)
    return np.dtype(store.dtype(var))


def as_values(store, var, raw):
    """Rows ``raw`` read from store variable ``var`` as numbers: themselves, or the
    values of the torch-only dtype whose bit pattern they hold, as float32."""
    td = torch_dtype_of(store, var)
    if td is None:
        return raw
    import torch
    return torch.from_numpy(np.ascontiguousarray(raw)).view(td).to(torch.float32).numpy()


class LazyRows:
    """An array-like that is not a numpy array or torch tensor (a subclass of
    ``np.ndarray`` such as ``np.memmap``, or anything with ``shape`` and row slicing),
    read **row range by row range**: ``rows[a:b]`` reads ``source[a:b]`` only, never the
    whole source.  Has ``shape``, ``ndim`` and ``dtype`` (from ``source.dtype`` or, if
    that is not a numpy dtype, from its first row)."""

    __slots__ = ("source", "shape", "ndim", "dtype")

    def __init__(self, source):
        self.source = source
        self.shape = tuple(int(s) for s in source.shape)
        self.ndim = len(self.shape)
        try:
            self.dtype = np.dtype(source.dtype)
        except Exception:  # noqa: BLE001 -- a torch dtype and the like: look at a row
            self.dtype = np.asarray(source[0:min(1, self.shape[0])]).dtype \
                if self.ndim else np.asarray(source).dtype
        self.dtype = self.dtype.newbyteorder("=")  # (rows come back in this order)

    def __getitem__(self, rows):
        if not isinstance(rows, slice):
            raise TypeError("LazyRows reads row ranges (slices) only")
        out = native_order(np.asarray(self.source[rows]))
        if out.dtype != self.dtype:
            raise DDStoreValueError(f"rows {rows.start}:{rows.stop} of the array-like came "
                                    f"back as dtype {out.dtype}, its first rows as "
                                    f"{self.dtype}")
        return out


def is_array_like(x):
    """What a put accepts as a whole array: a torch tensor, a numpy array (memmaps
    included), or anything with ``shape`` and ``__array__`` (or ``__getitem__``)."""
    import torch
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return True
    return hasattr(x, "shape") and (hasattr(x, "__array__") or hasattr(x, "__getitem__"))


def as_source(x, what):
    """``x`` for a put: ``(rows, torch_dtype)``.  ``rows`` is a numpy array (a torch
    tensor's own memory; a plain ``np.ndarray`` as it is), or a :class:`LazyRows` for
    other array-likes (``np.memmap``, objects with ``shape`` and row slicing), read only
    in the row ranges the put asks for.  ``torch_dtype``: a torch dtype numpy has no
    equivalent for (bfloat16, float8...), whose bit pattern ``rows`` then holds
    (:func:`bits_dtype`); None otherwise.  Raises a :class:`~ddstore.DDStoreValueError`
    naming ``what`` when ``x`` is not an array (a ``MemoryError`` as it is)."""
    import torch
    try:
        if isinstance(x, torch.Tensor):
            x = host_tensor(x, what)
            try:
                return x.numpy(), None
            except TypeError as exc:
                bits = bits_dtype(x.dtype)
                if bits is None or x.is_complex():
                    raise DDStoreValueError(f"{what}: dtype {x.dtype} has no numpy "
                                            f"equivalent and cannot be stored ({exc})") \
                        from exc
                return x.view(getattr(torch, np.dtype(bits).name)).numpy(), x.dtype
        if type(x) is np.ndarray:
            return native_order(x), None  # (stored, and read by torch, in this order)
        if hasattr(x, "shape") and hasattr(x, "__getitem__") and len(x.shape) >= 1:
            return LazyRows(x), None
        return np.asarray(x), None
    except (DDStoreError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 -- named here, agreed by the caller's step
        raise DDStoreValueError(f"{what} is not an array ({exc})") from exc


def check_storable(arr, what):
    """Raise a :class:`~ddstore.DDStoreValueError` unless ``arr`` (an array or
    :class:`LazyRows`) has a storable dtype and a first (row) dimension."""
    if not storable(arr.dtype) or arr.dtype.kind in "mM":  # (torch has no datetimes)
        raise DDStoreValueError(f"{what}: dtype {arr.dtype} cannot be stored (allowed: "
                                f"bool, integer, float, complex; a datetime64 or "
                                f"timedelta64 as its integers: .view('int64'))")
    if arr.ndim < 1:
        raise DDStoreValueError(f"{what}: needs a first (row) dimension, got a scalar")


def check_rows(rows, n, what):
    """``rows`` = ``(lo, hi)`` for ``n`` local rows (None: any ``hi >= lo``, the rows of
    a callable source), checked: returns ``(lo, hi)`` as ints, or raises."""
    try:
        lo, hi = rows
    except (TypeError, ValueError):
        raise DDStoreValueError(f"{what}: rows must be a pair (lo, hi), got "
                                f"{rows!r}") from None
    if not is_int(lo) or not is_int(hi):
        raise DDStoreValueError(f"{what}: rows=({lo!r}, {hi!r}) must be integers")
    lo, hi = int(lo), int(hi)
    if n is None:
        if lo < 0 or hi < lo:
            raise DDStoreIndexError(f"{what}: rows=({lo}, {hi}) must satisfy "
                                    f"0 <= lo <= hi")
        return lo, hi
    if lo < 0 or hi - lo != n:
        raise DDStoreIndexError(f"{what}: rows=({lo}, {hi}) must satisfy 0 <= lo and "
                                f"hi - lo = {n} (the rows this rank passes)")
    return lo, hi


def tiled_total(ranges, what):
    """Every rank's ``(lo, hi)`` (agreed, in rank order): they must tile ``[0, total)``
    exactly (any order).  Returns ``total``; raises a :class:`~ddstore.DDStoreIndexError`
    naming the first rank whose rows overlap or leave a gap (the same on every rank,
    decided from the agreed ranges)."""
    spans = sorted((lo, hi, r) for r, (lo, hi) in enumerate(ranges) if hi > lo)
    pos = 0
    for lo, hi, r in spans:
        if lo != pos:
            kind = "overlaps rows" if lo < pos else "leaves a gap"
            raise DDStoreIndexError(f"{what}: rank {r}'s rows [{lo}, {hi}) {kind} before "
                                    f"row {pos}: the ranks' rows must together cover "
                                    f"[0, total) once each ({ranges})")
        pos = hi
    return pos


# ------------------------------------------------------------ checkpoint and restart
# A feature store and a graph store record what reopening them needs in an annotation
# of the store (DDStore.annotate), kept by DDStore.save and brought back by restore:
# FeatureStore.open / GraphStore.open rebuild them by name, with no source data.
FEATURE_KIND, GRAPH_KIND = "pyg.FeatureStore", "pyg.GraphStore"


# what a feature or graph store made in a transaction that rolled back says of itself
ROLLED_BACK = (" (this %s object was rolled back with the transaction it was made in: "
               "make it again)")


def check_store_name(name, what, store, kind):
    """A new feature or graph store's ``name`` (``what``: its class; ``kind``: its
    annotation's): a non-empty str without ``/`` (its variables are ``<name>/node/...``,
    ``<name>/csc/...``: a store named ``g/node/a`` had its variables taken for store
    ``g``'s, and made its node counts), not the name of one ``store`` holds already
    that holds anything (it replaced that one's record of its attributes or edges and
    declared node counts: the first could no longer be sampled by node type, nor be
    reopened whole after a restore).  Over an empty record (a store whose first put
    failed, made again) it is made, and the earlier object refuses its next change
    (:func:`check_recorded`)."""
    if not isinstance(name, str) or not name or "/" in name:
        raise DDStoreValueError(f"{what} name must be a non-empty str without '/', got "
                                f"{name!r}")
    held = recorded(store, kind, name)
    if held is not None and any(held.meta.get(k)
                                for k in ("attrs", "declared", "stored", "reversed")):
        raise DDStoreValueError(f"{what} {name!r}: this store holds one of that name "
                                f"already, not empty: reopen it with {what}.open(store, "
                                f"{name!r}) (ddstore.pyg.open_stores for both), or choose "
                                f"another name")


def annotation_name(kind, name):
    """The annotation of the ``kind`` object named ``name`` (the two stores of one name
    are two objects): ``"<name>#<kind>"``."""
    return f"{name}#{kind}"


def type_to_json(t):
    """A node or edge type (None, str, 3-tuple) as JSON (an edge type as a list)."""
    return list(t) if isinstance(t, tuple) else t


def type_from_json(t):
    return tuple(t) if isinstance(t, list) else t


def torch_dtype_named(text):
    """The torch dtype ``str(dtype)`` names (``"torch.bfloat16"``), or None for None."""
    if text is None:
        return None
    import torch
    return getattr(torch, text.split(".", 1)[1])


def find_annotation(store, kind, name, what):
    """The annotation of the ``kind`` object ``name`` of ``store``; a
    :class:`~ddstore.DDStoreValueError` naming the known names of that kind (and what
    else the name is) when there is none."""
    from ..errors import DDStoreValueError
    store.check_alive()
    if not isinstance(name, str) or not name:
        raise DDStoreValueError(f"{what}: name must be a non-empty str, got {name!r}")
    suffix = "#" + kind
    try:
        return store.annotation(annotation_name(kind, name), kind)
    except DDStoreValueError:
        pass
    known = [n[:-len(suffix)] for n in store.annotations(kind) if n.endswith(suffix)]
    other = sorted({store.annotation(a).kind for a in store.annotations()
                    if a == name or a.startswith(name + "#")} - {kind})
    hint = f"; {name!r} names a {' and a '.join(other)} there, not a {kind}" \
        if other else ""
    raise DDStoreValueError(f"{what}: no {kind} {name!r} in this store (restored or "
                            f"built); known {kind} names: {known}{hint}")


def recorded(store, kind, name):
    """The annotation (an object) that the ``kind`` store ``name`` has in ``store`` now,
    or None: what a feature or graph store object notes as the record it last wrote or
    read (local, alike on every rank)."""
    try:  # (one lookup; listing every annotation to test the name sorted them all)
        return store.annotation(annotation_name(kind, name))
    except DDStoreValueError:  # none of that name
        return None


def check_recorded(store, kind, name, mine, what):
    """Refuse a change through a feature or graph store object whose name's record is
    not ``mine`` (the one it last wrote or read) any more: another object of the name
    (made over its empty record, or opened) changed it since, and a record written from
    this object's state would drop that object's changes (the thirty-fourth session's
    review: two objects of one name replaced each other's record).  Raised in a step of
    the change, so it is agreed and the change rolled back.  No record at all passes: a
    removal in the call set it aside with its variables (the change's first step
    checked it)."""
    now = recorded(store, kind, name)
    if now is not None and now is not mine:
        raise DDStoreStateError(
            f"{what} {name!r}: this object is out of date: another {what} of that name "
            f"(made again, or opened) changed what the store records of it since; use "
            f"that one, or {what}.open(store, {name!r}) for one that is up to date")
