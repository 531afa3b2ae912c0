"""Times: the dtype a temporal graph keeps its times in, and exact conversions to it.

A graph's times (its T-CSR ``ts``, its edge table's ``edge_t``, what the samplers compare
and return, what :meth:`~ddstore.temporal.TemporalGraph.to_pyg` gives back) are **int64
when every time it is built from is an integer** -- an integer dtype, Python ints, a CSV
column whose every field is an integer literal -- and float64 otherwise.  Integers are
kept exactly (Unix nanoseconds, times beyond 2**53, negative ones); floats stay floats.
The C core compares either type as numbers of that type (``csrc/times.h``).

One path for every builder (``TemporalGraph.from_arrays``, ``from_pyg``, the JODIE and TGL
readers): each rank checks its times with :func:`time_share` (local: raises for what no
graph keeps) and hands its summary to the call's round; :func:`time_dtype` decides from
every rank's summary (so every rank decides the same); :func:`as_times` converts a piece
to the decided dtype.  Elsewhere (query times of a sampler, node memory timestamps)
:func:`as_times` takes values to the dtype already decided, refusing any value it would
change.
"""
import numbers

import numpy as np

from ._checks import as_dtype, tensor_values
from .errors import DDStoreValueError

__all__ = ["INT_TIMES", "FLOAT_TIMES", "MAX_EXACT_TIME", "as_time_dtype", "time_share",
           "time_dtype", "time_dtype_of", "as_times", "not_int64"]

INT_TIMES = np.dtype(np.int64)
FLOAT_TIMES = np.dtype(np.float64)
# float64 holds every integer in [-2**53, 2**53] exactly, and not every one beyond
# (2**53 + 1 becomes 2**53)
MAX_EXACT_TIME = 2 ** 53
_I64 = np.iinfo(np.int64)
_BEYOND_INT64 = "is outside [-2**63, 2**63 - 1], the integer times the store keeps (int64)"


def as_time_dtype(dtype, what):
    """``dtype`` (what :func:`~ddstore._checks.as_dtype` takes: a torch dtype too) as
    the numpy dtype of times (int64 or float64, the C core's ``dds_time_type``s);
    anything else raises :class:`DDStoreValueError` naming ``what``."""
    dt = as_dtype(dtype, what, "iuf", "int64 or float64")
    if dt not in (INT_TIMES, FLOAT_TIMES):
        raise DDStoreValueError(f"{what}: times of dtype {dt}; times are kept as int64 "
                                f"(integers, exactly) or float64")
    return dt


def time_dtype_of(dtype):
    """The dtype times of numpy dtype ``dtype`` are kept in, when all of them have it (a
    stored attribute, a CSV column parsed whole): :func:`time_dtype` of that one kind,
    int64 for integers and float64 otherwise."""
    return time_dtype([("i" if np.dtype(dtype).kind in "iu" else "f", 1, None)], "")


def _array(values, what):
    """``values`` as a numpy array of real numbers: integers (any integer dtype, Python
    ints numpy keeps as objects) or floats; anything else raises."""
    arr = np.asarray(tensor_values(values, what if isinstance(what, str) else "times"))
    if arr.dtype.kind == "O":  # Python ints numpy could not fit in (u)int64
        flat = arr.reshape(-1).tolist()
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                   for v in flat):
            if all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in flat):
                _refuse_big_ints(flat, arr.shape, what)  # (with fractions)
            raise DDStoreValueError(f"{what} must hold real numbers, got dtype object")
    elif arr.dtype.kind not in "iuf":
        raise DDStoreValueError(f"{what} must hold real numbers, got dtype {arr.dtype}")
    else:
        refuse_rounded_list(values, arr, what)
    return arr


def refuse_rounded_list(given, arr, what):
    """Raise :class:`DDStoreValueError` when ``arr`` is numpy's float64 array of a list
    ``given`` of ints and fractions whose ints beyond 2**53 it rounded (2**53 + 1 became
    2**53, which no later check can see), naming the first; nothing for anything else."""
    if arr.dtype.kind != "f" or not isinstance(given, (list, tuple)) or not arr.size:
        return
    _refuse_big_ints(np.array(given, dtype=object).reshape(-1).tolist(), arr.shape, what)


def _refuse_big_ints(flat, shape, what):
    """Raise :class:`DDStoreValueError` naming the first Python integer of ``flat`` (the
    values of a list, of ``shape``) that numpy's array of the list could not hold
    exactly: in a list of integers alone (float64 only when one is beyond int64) one
    beyond int64, in a list with fractions one beyond 2**53 (float64 would round it)."""
    ints = [isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in flat]
    if all(ints):
        bad, text = [not _I64.min <= int(v) <= _I64.max for v in flat], _BEYOND_INT64
    else:
        bad = [i and abs(int(v)) > MAX_EXACT_TIME for i, v in zip(ints, flat)]
        text = ("is an integer beyond 2**53 in a list with fractions, which numpy makes "
                "float64 (it would round); give such times as an int64 array")
    _refuse(np.array(flat, dtype=object).reshape(shape), np.array(bad, bool), what, None,
            text)


def _where(arr, flat_pos, what, where):
    """The name of flat position ``flat_pos`` of ``arr``: ``what[i, j]``, or
    ``what(flat_pos)`` when ``what`` is callable (e.g. a file's line), and ``where``'s
    text to show after the value."""
    extra = where(flat_pos) if where is not None else ""
    if callable(what):
        return what(flat_pos), extra
    pos = np.unravel_index(flat_pos, arr.shape) if arr.ndim != 1 else (flat_pos,)
    at = ", ".join(str(int(i)) for i in pos)
    return f"{what}[{at}]", extra


def _refuse(arr, bad, what, where, text, shown=int):
    """Raise :class:`DDStoreValueError` for the first position of ``arr`` where ``bad``
    (flat) is set: ``"<its name> = <its value><where's text> <text>"``."""
    if bad.any():
        p = int(np.argmax(bad))
        name, extra = _where(arr, p, what, where)
        raise DDStoreValueError(f"{name} = {shown(arr.reshape(-1)[p])}{extra} {text}")


def _int64(arr, what, where=None):
    """An integer array (or Python ints) as int64, refusing values beyond int64."""
    flat = arr.reshape(-1)
    if arr.dtype.kind == "O":
        bad = np.array([not _I64.min <= int(v) <= _I64.max for v in flat.tolist()], bool)
    elif arr.dtype.kind == "u" and arr.dtype.itemsize == 8:
        bad = flat > np.uint64(_I64.max)
    else:
        bad = np.zeros(0, bool)
    _refuse(arr, bad, what, where, _BEYOND_INT64)
    return arr.astype(np.int64)



def time_share(values, what):
    """Local: this rank's times checked, ``(times, summary)``.  ``times``: integers as
    int64 (a value beyond int64 raises), floats as float64 (NaN and infinities are the
    caller's to refuse); anything else raises :class:`DDStoreValueError` naming
    ``what``.  ``summary``, what the ranks agree on before :func:`time_dtype` decides:
    ``(kind, count, inexact)``, ``kind`` "i" or "f", ``count`` the number of times and
    ``inexact`` the first integer float64 would round, as ``(position, value)``, or
    None."""
    arr = _array(values, what)
    if arr.dtype.kind == "f":
        return arr.astype(np.float64), ("f", int(arr.size), None)
    out = _int64(arr, what)
    flat = out.reshape(-1)
    big = (flat > MAX_EXACT_TIME) | (flat < -MAX_EXACT_TIME)
    p = int(np.argmax(big)) if big.any() else None
    return out, ("i", int(out.size), None if p is None else (p, int(flat[p])))


def time_dtype(summaries, what):
    """The one decision of the dtype a graph's times are kept in, from every rank's
    :func:`time_share` summary (rank order; a reader of text passes ``(kind, count,
    None)``, kind "i" for a column of integer literals): int64 when every rank that has
    times has integers (every rank, when none has any), else float64.  Called with
    agreed values, so every rank decides alike; raises :class:`DDStoreValueError` when
    float64 is decided but some rank's integers include one float64 would round, naming
    ``what[position]``, the value, its rank and a rank with float times."""
    votes = [s[0] for s in summaries if s[1]] or [s[0] for s in summaries]
    if votes and all(k == "i" for k in votes):
        return INT_TIMES
    floats = [r for r, s in enumerate(summaries) if s[0] == "f" and s[1]]
    for r, s in enumerate(summaries):
        if s[0] == "i" and s[2] is not None:
            raise DDStoreValueError(
                f"{what}[{s[2][0]}] = {s[2][1]} on rank {r} is an integer outside "
                f"[-2**53, 2**53] (beyond which float64 does not hold every integer), and "
                f"rank {floats[0]} gives float "
                f"times, so the graph keeps float64 times: give integer times on every "
                f"rank (kept exactly as int64), or floats everywhere")
    return FLOAT_TIMES


def not_int64(floats):
    """Where the float array ``floats`` holds a value int64 times cannot keep exactly:
    one that is not a whole number (NaN, inf included) or is outside int64 (``1e19`` is
    whole, but would wrap to a negative time)."""
    with np.errstate(invalid="ignore", over="ignore"):  # float16: 2**63 is inf there
        return ~(floats == np.floor(floats)) | (floats < -2.0 ** 63) | (floats >= 2.0 ** 63)


def as_times(values, dtype, what, where=None, copy=True):
    """``values`` (real numbers, any shape) as ``dtype`` (int64 or float64), exactly, or
    a :class:`DDStoreValueError` naming the first value that would change, its position
    (``what[i]``, or ``what(i)`` when ``what`` is callable; ``where(i)``, if given,
    returns text shown after the value, e.g. ``" (node 7)"``) and the range:

    - to float64: floats as they are; integers only within ``[-2**53, 2**53]``;
    - to int64: integers within int64; floats only when whole (and within int64).

    NaN and infinities are the caller's to refuse (to float64 they pass; to int64 they
    are not whole).  ``copy=False`` returns an input of ``dtype`` itself."""
    dtype = np.dtype(dtype)
    arr = _array(values, what)
    flat = arr.reshape(-1)
    if dtype == FLOAT_TIMES:
        if arr.dtype.kind == "f" or not arr.size:
            return arr.astype(np.float64, copy=copy)
        if arr.dtype.kind == "O":
            big = np.array([abs(int(v)) > MAX_EXACT_TIME for v in flat.tolist()], bool)
        else:
            big = flat > MAX_EXACT_TIME
            if arr.dtype.kind == "i":
                big |= flat < -MAX_EXACT_TIME
        _refuse(arr, big, what, where, "is outside [-2**53, 2**53], the integers the "
                                       "store's float64 times hold exactly")
        return arr.astype(np.float64)
    as_time_dtype(dtype, what if isinstance(what, str) else "times")
    if arr.dtype.kind != "f":
        return _int64(arr, what, where) if arr.dtype != INT_TIMES or copy else arr
    bad = not_int64(flat)
    _refuse(arr, bad, what, where, "is not an integer within int64; these times are int64 "
                                   "(kept exactly): give integer times",
            shown=lambda v: repr(float(v)))
    return arr.astype(np.int64)
