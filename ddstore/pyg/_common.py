"""What the feature store, the graph store and the sampler share: variable names, the
conversion of tensors to numpy, and the checks of range-wise puts (the rows are placed
into the striped layout by :func:`ddstore.build.fill_rows`: each group holds
one replica; member ``g`` holds rows ``partition(num_rows, width, g)``)."""
import weakref

import numpy as np

from .._checks import STORABLE_KINDS, is_int
from ..errors import DDStoreError, DDStoreIndexError, DDStoreValueError

# the edge type under which a homogeneous graph's edge attributes are kept in the feature
# store (the GraphStore calls that edge type None, as PyG does)
EDGES = ("_N", "to", "_N")


def type_key(t):
    """A node type (None or str) or edge type (3-tuple of str) as one string."""
    if t is None:
        return "_"
    if isinstance(t, str):
        return t
    return "__".join(t)


def is_edge_type(t):
    return isinstance(t, tuple) and len(t) == 3 and all(isinstance(x, str) for x in t)


def as_edge_type(t):
    """``t`` as the store keys it: an edge type given as a list (``['a', 'to', 'b']``, as
    PyG accepts) is the tuple ``('a', 'to', 'b')``; anything else as given."""
    if type(t) is list and len(t) == 3 and all(isinstance(x, str) for x in t):
        return tuple(t)
    return t


def node_var(name, node_type, attr):
    return f"{name}/node/{type_key(node_type)}/{attr}"


def edge_var(name, edge_type, attr):
    return f"{name}/edge/{type_key(EDGES if edge_type is None else edge_type)}/{attr}"


def call_piece(fn, label, a, b, what):
    """``(out, array)``: what a user's piece source ``fn(a, b)`` returned, and it as a
    numpy array.  Anything ``fn`` raises (but a :class:`~ddstore.DDStoreError` or a
    ``MemoryError``) becomes a :class:`~ddstore.DDStoreValueError` naming ``label(a,
    b)``, as does a value that is not array-like; the caller agrees on it."""
    try:
        out = fn(a, b)
    except (DDStoreError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 -- agreed by the caller
        raise DDStoreValueError(f"{what}: {label}({a}, {b}) raised "
                                f"{type(exc).__name__}: {exc}") from exc
    arr, error = as_numpy(out, what)
    if error is not None:
        raise error[0](error[1])
    return out, arr


def as_numpy(x, what):
    """``x`` (torch tensor, numpy array or sequence) as a numpy array, or (None, error)."""
    try:
        if hasattr(x, "detach") and hasattr(x, "numpy"):
            x = x.detach().cpu()
            try:
                return x.numpy(), None
            except TypeError as exc:  # bfloat16 and the like
                return None, (DDStoreValueError, f"{what}: dtype {x.dtype} has no numpy "
                                                 f"equivalent and cannot be stored ({exc})")
        return np.asarray(x), None
    except Exception as exc:  # noqa: BLE001 -- reported, agreed by the caller
        return None, (DDStoreValueError, f"{what} is not an array ({exc})")


# torch dtypes numpy has no equivalent for, kept as their bit pattern in an integer of
# the same size (the attribute remembers the torch dtype and reads come back as it)
_BITS = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}


def bits_dtype(torch_dtype):
    """The numpy integer dtype a torch-only dtype (bfloat16, float8...) is stored as."""
    import torch
    return _BITS.get(torch.empty(0, dtype=torch_dtype).element_size())


# store -> {variable: the torch-only dtype whose bit pattern it holds}: kept by the
# feature store as it puts and removes attributes, read by whatever reads an attribute's
# values as numbers (the graph store's weights and times)
_TORCH_ONLY = weakref.WeakKeyDictionary()


def keep_torch_dtype(store, var, torch_dtype):
    """Record that store variable ``var`` holds the bit pattern of ``torch_dtype`` (None:
    it holds plain numpy values)."""
    known = _TORCH_ONLY.setdefault(store, {})
    if torch_dtype is None:
        known.pop(var, None)
    else:
        known[var] = torch_dtype


def value_dtype(store, var):
    """The numpy dtype of ``var``'s values read as numbers by :func:`as_values`: the
    variable's dtype, or float32 for the bit pattern of a torch-only float dtype
    (bfloat16 and float8 values are all exact in float32)."""
    if var in _TORCH_ONLY.get(store, {}):
        return np.dtype(np.float32)
    return np.dtype(store.dtype(var))


def as_values(store, var, raw):
    """Rows ``raw`` read from store variable ``var`` as numbers: themselves, or the
    values of the torch-only dtype whose bit pattern they hold, as float32."""
    td = _TORCH_ONLY.get(store, {}).get(var)
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

    def __getitem__(self, rows):
        if not isinstance(rows, slice):
            raise TypeError("LazyRows reads row ranges (slices) only")
        out = np.asarray(self.source[rows])
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
    """``x`` for a put: ``(rows, torch_dtype, error)``.  ``rows`` is a numpy array (a
    torch tensor's own memory; a plain ``np.ndarray`` as it is), or a :class:`LazyRows`
    for other array-likes (``np.memmap``, objects with ``shape`` and row slicing), read
    only in the row ranges the put asks for.  ``torch_dtype``: a torch dtype numpy has no
    equivalent for (bfloat16, float8...), whose bit pattern ``rows`` then holds
    (:func:`bits_dtype`); None otherwise.  ``error``: ``(class, message)`` or None."""
    import torch
    try:
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu()
            try:
                return x.numpy(), None, None
            except TypeError as exc:
                bits = bits_dtype(x.dtype)
                if bits is None or x.is_complex():
                    return None, None, (DDStoreValueError,
                                        f"{what}: dtype {x.dtype} has no numpy equivalent "
                                        f"and cannot be stored ({exc})")
                return x.view(getattr(torch, np.dtype(bits).name)).numpy(), x.dtype, None
        if type(x) is np.ndarray:
            return x, None, None
        if hasattr(x, "shape") and hasattr(x, "__getitem__") and len(x.shape) >= 1:
            return LazyRows(x), None, None
        return np.asarray(x), None, None
    except DDStoreError as exc:
        return None, None, (type(exc), str(exc))
    except Exception as exc:  # noqa: BLE001 -- reported, agreed by the caller
        return None, None, (DDStoreValueError, f"{what} is not an array ({exc})")


def storable_error(arr, what):
    if arr.dtype.kind not in STORABLE_KINDS or arr.dtype.fields is not None:
        return DDStoreValueError, (f"{what}: dtype {arr.dtype} cannot be stored (allowed: "
                                   f"bool, integer, float, complex)")
    if arr.ndim < 1:
        return DDStoreValueError, f"{what}: needs a first (row) dimension, got a scalar"
    return None


def rows_error(rows, n, what):
    """``rows`` = ``(lo, hi)`` for ``n`` local rows (None: any ``hi >= lo``, the rows of
    a callable source), checked; (None or error, lo, hi)."""
    try:
        lo, hi = rows
    except (TypeError, ValueError):
        return (DDStoreValueError, f"{what}: rows must be a pair (lo, hi), got "
                                   f"{rows!r}"), 0, 0
    if not is_int(lo) or not is_int(hi):
        return (DDStoreValueError, f"{what}: rows=({lo!r}, {hi!r}) must be integers"), 0, 0
    lo, hi = int(lo), int(hi)
    if n is None:
        if lo < 0 or hi < lo:
            return (DDStoreIndexError, f"{what}: rows=({lo}, {hi}) must satisfy "
                                       f"0 <= lo <= hi"), lo, hi
        return None, lo, hi
    if lo < 0 or hi - lo != n:
        return (DDStoreIndexError, f"{what}: rows=({lo}, {hi}) must satisfy 0 <= lo and "
                                   f"hi - lo = {n} (the rows this rank passes)"), lo, hi
    return None, lo, hi


def tiling_error(ranges, what):
    """Every rank's ``(lo, hi)``: they must tile ``[0, total)`` exactly (any order).
    Returns (error or None, total)."""
    spans = sorted((lo, hi, r) for r, (lo, hi) in enumerate(ranges) if hi > lo)
    pos = 0
    for lo, hi, r in spans:
        if lo != pos:
            kind = "overlaps rows" if lo < pos else "leaves a gap"
            return (DDStoreIndexError, f"{what}: rank {r}'s rows [{lo}, {hi}) {kind} "
                                       f"before row {pos}: the ranks' rows must together "
                                       f"cover [0, total) once each ({ranges})"), 0
        pos = hi
    return None, pos
