"""64-bit fingerprints of the data a rank was handed, so that a collective call that
every rank must make with the same data (``ddstore.pyg.from_pyg``,
``TemporalGraph.from_pyg``...) can refuse, naming the ranks, data that differs between
ranks in values only (the same shapes and dtypes would otherwise store a silent mix of
every rank's share).

:func:`fingerprint` hashes an array's dtype, shape and bytes with XXH64 in C
(:func:`ddstore._core.fingerprint`: one pass over the memory, about 10 GB/s per core, the
GIL released); :func:`same_data` gives the fingerprints of named values as ``same=``
settings of a collective step (see :meth:`DDStore.collective
<ddstore.DDStore.collective>`): values that differ are refused on every rank by the
step's round, naming the value and which ranks hold which fingerprint.

An ``np.memmap`` is fingerprinted by what it maps (file, position, strides, shape and
dtype), not by its bytes: the loaders read a memory-mapped array range-wise (each rank
only its rows), and hashing it whole would read the whole file on every rank.  For the
same reason any other array-like that is read range-wise (an h5py dataset, a zarr array:
``shape``, ``dtype`` and row slicing, neither a numpy array nor a tensor) is fingerprinted
by its type, dtype and shape only.
"""
import mmap

import numpy as np

from . import _core
from ._collective import SAME_HINT
from ._checks import host_tensor

__all__ = ["fingerprint", "same_data"]

_NONE = 0x6E6F6E65  # the fingerprint of None (no value given)


def _header_seed(kind, dtype, shape, seed):
    """The seed the bytes are hashed with: what they are (``kind``, dtype, shape), so
    that equal bytes of other shapes or dtypes differ."""
    head = f"{kind}|{dtype}|{tuple(int(s) for s in shape)}".encode()
    return _core.fingerprint(head, seed)


def _as_numpy(value):
    """``(array, dtype name)`` of ``value``: a numpy array as it is (a memmap stays one),
    a torch tensor's own memory where it can be (on the CPU; a dtype numpy lacks taken
    as its bytes under its torch name), anything else through ``np.asarray``."""
    if isinstance(value, np.ndarray):  # np.memmap kept as it is
        return value, value.dtype.str
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        import torch
        t = host_tensor(value, "fingerprint")
        try:
            arr = t.numpy()
        except TypeError:  # bfloat16, float8...: its bytes, under its torch name (seen
            # as integers of its size, so that the shape shown is the tensor's)
            same = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
            return t.contiguous().view(same[t.element_size()]).numpy(), str(t.dtype)
        return arr, arr.dtype.str
    arr = np.asarray(value)
    return arr, arr.dtype.str


def _lazy(value):
    """True for an array-like that is neither a numpy array, a torch tensor nor a
    sequence (an h5py dataset, a zarr array, a reader of rows): it has ``shape``,
    ``dtype`` and row slicing, and reading it whole on every rank is what range-wise
    loading avoids."""
    if isinstance(value, (np.ndarray, list, tuple)) or hasattr(value, "detach"):
        return False
    try:
        np.dtype(getattr(value, "dtype"))
        len(getattr(value, "shape"))
    except (AttributeError, TypeError):
        return False
    return hasattr(value, "__getitem__")


def _memmap_key(arr):
    """What a memmap view maps: ``(file, byte position of its first element)``, or None
    when that cannot be told (its bytes are hashed then)."""
    mm = getattr(arr, "_mmap", None)
    name = getattr(arr, "filename", None)
    if not isinstance(mm, mmap.mmap) or name is None or mm.closed:
        return None
    try:
        base = np.frombuffer(mm, dtype=np.uint8).ctypes.data
    except (TypeError, ValueError, BufferError):
        return None
    start = int(arr.offset) - int(arr.offset) % mmap.ALLOCATIONGRANULARITY
    return str(name), start + (arr.ctypes.data - base)


def _digest(value, seed):
    """``(fingerprint, dtype name, shape)`` of ``value`` (see :func:`fingerprint`)."""
    if value is None:
        return _core.fingerprint(b"None", seed ^ _NONE), "None", ()
    if _lazy(value):  # read range-wise by the loaders: described, not read
        dtype, shape = np.dtype(value.dtype), tuple(int(s) for s in value.shape)
        kind = f"lazy {type(value).__module__}.{type(value).__qualname__}"
        return (_core.fingerprint(kind.encode(), _header_seed("lazy", dtype.str, shape,
                                                              seed)),
                f"{type(value).__name__} {dtype.name}", shape)
    arr, dtype = _as_numpy(value)
    shape = tuple(int(s) for s in arr.shape)
    shown = dtype if dtype.startswith("torch.") else arr.dtype.name
    if isinstance(arr, np.memmap):
        where = _memmap_key(arr)
        if where is not None:
            text = f"{where}|{arr.strides}".encode()
            return (_core.fingerprint(text, _header_seed("memmap", dtype, shape, seed)),
                    f"memmap {shown}", shape)
    if arr.dtype.hasobject:
        return (_core.fingerprint(repr(arr.tolist()).encode(),
                                  _header_seed("object", dtype, shape, seed)), shown, shape)
    arr = np.ascontiguousarray(arr)
    return (_core.fingerprint(arr.reshape(-1).view(np.uint8),
                              _header_seed("array", dtype, shape, seed)), shown, shape)


def fingerprint(value, seed=0):
    """A 64-bit fingerprint (an int in ``[0, 2**64)``) of ``value``: a numpy array, a
    torch tensor (its CPU copy), a list or tuple of numbers (as ``np.asarray`` makes it),
    or None.  Arrays that differ in dtype, shape or any byte have different fingerprints
    (but for a chance of about 2**-64).  A non-contiguous array is copied first; an
    ``np.memmap`` or another range-wise array-like is described, not read (see the
    module docstring); an object array is hashed through its ``repr``."""
    return _digest(value, seed)[0]


def same_data(values, what="data", hint=None):
    """``same=`` settings of a collective step (see :meth:`DDStore.collective
    <ddstore.DDStore.collective>`) that hold every rank to the same data: for each
    ``key, value`` of the mapping ``values``, ``"<what> '<key>'"`` maps to ``"<dtype>
    <shape>, fingerprint 0x<16 hex digits>"`` (see :func:`fingerprint`).  The step's
    round then names the values that differ and which ranks hold what, and ``hint``
    (what to do about it), if given."""
    out = {} if hint is None else {SAME_HINT: hint}
    for key, value in values.items():
        fp, dtype, shape = _digest(value, 0)
        out[f"{what} {key!r}"] = f"{dtype} {list(shape)}, fingerprint 0x{fp:016x}"
    return out
