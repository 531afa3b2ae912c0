"""Argument checks shared by every layer: integers, index arrays, ranges, the balanced
split.  One place for each check, so that every layer words its errors the same way.
(Times have a module of their own: :mod:`ddstore._times`.)"""
import numbers
import sys

import numpy as np

from .errors import DDStoreError, DDStoreIndexError, DDStoreStateError, DDStoreValueError

__all__ = ["partition", "as_indices", "as_int", "is_int", "check_indices", "check_free_names",
           "names_under", "aside_name", "is_aside", "STORABLE_KINDS", "STORABLE_NAMES",
           "as_array", "storable", "native_order", "host_tensor"]

# dtype kinds that are plain fixed-size values and can be stored as raw bytes
STORABLE_KINDS = "biufcmM"
STORABLE_NAMES = ("bool, int8-int64, uint8-uint64, float16-float64, complex64-complex128, "
                  "datetime64, timedelta64")


def _numpy_max_ndim():
    """The most dimensions a numpy array may have (64 with numpy 2, 32 before)."""
    n = 32
    while n < 4096:
        try:
            np.empty((0,) * (n + 1))
        except ValueError:
            return n
        n += 1
    return n


# a row's dimensions: a batch of rows has one more, within numpy's bound
MAX_ROW_DIMS = _numpy_max_ndim() - 1


def c_label(name, most=150):
    """How the core names variable ``name`` in its messages (it keeps 159 bytes, and a
    C string ends at a NUL): its characters as ``repr`` writes them (a NUL as ``\\x00``,
    a lone surrogate escaped), UTF-8, cut at a character's end with ``...`` past
    ``most`` bytes."""
    text = repr(shown_name(name))[1:-1]
    data = text.encode("utf-8")
    if len(data) > most:
        data = data[:most - 3].decode("utf-8", "ignore").encode("utf-8") + b"..."
    return data


def check_name_text(name, what):
    """Refuse a ``name`` that is no text UTF-8 can hold (a lone surrogate, which
    ``os.fsdecode`` makes of undecodable bytes): messages, checkpoints and the core
    write names as UTF-8."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DDStoreValueError(
            f"{what} {name!r}: character {exc.start} ({name[exc.start]!r}) is a lone "
            f"surrogate, which UTF-8 cannot encode; allowed: any str UTF-8 encodes "
            f"(no code point in [U+D800, U+DFFF] alone)") from None


def storable(dtype):
    """Whether rows of numpy ``dtype`` can be stored as raw bytes: a kind of
    :data:`STORABLE_KINDS` without fields, and not numpy's long double (``float128``,
    ``complex256``: 10 bytes of value in 16, whose padding numpy leaves as it finds it,
    so two replicas of the same values hold different bytes and a checkpoint, which
    compares them, refuses them)."""
    return (dtype.kind in STORABLE_KINDS and dtype.fields is None
            and not (dtype.kind == "f" and dtype.itemsize > 8)
            and not (dtype.kind == "c" and dtype.itemsize > 16))


def host_tensor(x, what):
    """A torch tensor's values as a tensor numpy can read: detached, on the CPU, any
    lazy negation or conjugation (``z.conj()``, ``z.conj().imag``) resolved.  A sparse,
    nested or other non-dense tensor raises a :class:`DDStoreValueError` naming
    ``what``, its layout and the conversion that stores it."""
    import torch  # (imported already: x is one of its tensors)
    if x.layout is not torch.strided or x.is_nested:
        if x.is_nested:
            how = ("a nested tensor (samples of different shapes); store it padded "
                   "(torch.nested.to_padded_tensor), or its samples as records "
                   "(add_records)")
        elif x.is_sparse or "sparse" in str(x.layout):
            how = f"a {x.layout} tensor (sparse); give x.to_dense()"
        else:
            how = f"a {x.layout} tensor (not a dense, strided one); give x.to_dense()"
        raise DDStoreValueError(f"{what}: {how}")
    if x.is_meta:  # (numpy's refusal of it read as a dtype numpy has not)
        raise DDStoreValueError(f"{what}: a tensor on torch's meta device holds no values "
                                f"(only a shape and a dtype); give one that holds them")
    if x.requires_grad:
        x = x.detach()
    if not x.is_cpu:
        x = x.cpu()
    return x.resolve_neg().resolve_conj() if x.is_neg() or x.is_conj() else x


def as_array(x, what):
    """``np.asarray(x)`` in this machine's byte order (a torch tensor as its values:
    detached, on the CPU, negation and conjugation resolved); anything that cannot be one
    raises a :class:`DDStoreValueError` naming ``what`` (a torch tensor of a dtype numpy
    has not, such as bfloat16 or float8, with the conversions that store it), a
    ``MemoryError`` stays what it is."""
    if isinstance(x, np.ndarray):
        return native_order(x)
    torch_tensor = type(x).__module__.startswith("torch") and hasattr(x, "detach")
    if torch_tensor:
        # its values: the store keeps no graph, lives in host memory, and numpy takes
        # no lazy negation or conjugation
        x = host_tensor(x, what)
    try:
        arr = np.asarray(x)
        return native_order(arr)
    except MemoryError:
        raise
    except Exception as exc:  # ragged lists, torch dtypes without numpy ones...
        dtype = getattr(x, "dtype", None)
        if torch_tensor and dtype is not None:
            raise DDStoreValueError(
                f"{what}: a torch tensor of dtype {dtype} has no numpy dtype, so it cannot "
                f"be stored as it is; store x.float() (values), or its bits "
                f"(x.view(torch.int16) for 2 bytes, torch.uint8 for 1); allowed dtypes: "
                f"{STORABLE_NAMES}") from None
        hint = ("; arrays of different shapes are samples of their own: store them with "
                "add_records (one record per sample), or a GraphDataset"
                if isinstance(x, (list, tuple)) else "")
        raise DDStoreValueError(f"{what}: not an array ({type(exc).__name__}: "
                                f"{exc}){hint}") from exc



def native_order(arr):
    """``arr``, or its values in this machine's byte order where it is in the other
    (what a stored variable holds, and all torch reads)."""
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


def partition(total, parts, index):
    """The balanced split used everywhere: ``(start, stop)`` of part ``index``.

    ``total`` items split in ``parts`` contiguous parts whose sizes differ by at most one,
    the larger parts first.  Example: ``partition(10, 3, i)`` gives (0, 4), (4, 7), (7, 10).
    """
    for label, value in (("total", total), ("parts", parts), ("index", index)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise DDStoreValueError(f"partition: {label} must be an integer, got {value!r}")
    total, parts, index = int(total), int(parts), int(index)
    if total < 0:
        raise DDStoreValueError(f"partition: total={total} must be >= 0")
    if parts < 1:
        raise DDStoreValueError(f"partition: parts={parts} must be >= 1")
    if not 0 <= index < parts:
        raise DDStoreIndexError(f"partition: index={index} out of range [0, {parts})")
    base, rem = divmod(total, parts)
    start = index * base + min(index, rem)
    return start, start + base + (1 if index < rem else 0)


def is_index_array(x):
    """Whether ``x`` is already what :func:`as_indices` returns (a C-contiguous 1-D int64
    numpy array): the test a hot path makes before it builds an error's wording."""
    return (type(x) is np.ndarray and x.dtype == np.int64 and x.ndim == 1 and
            x.flags.c_contiguous)


def as_indices(indices, what, limit=None, noun="index", low=0):
    """``indices`` (a sequence, numpy array or CPU tensor of integers) as a C-contiguous
    1-D int64 array, without a copy when it already is one; ``what`` names the caller in
    the error raised for anything else.  Values beyond the int64 range raise a
    :class:`DDStoreIndexError` that shows them as given (``[low, limit)``, if ``limit``
    is known, is named as the range).  Other ranges are the caller's to check.  ``noun``:
    what one value is, in messages (``"count"`` for row counts)."""
    if (type(indices) is np.ndarray and indices.dtype == np.int64 and
            indices.ndim == 1 and indices.flags.c_contiguous):
        return indices  # the common case, without copies (is_index_array, inline)
    plural = "indices" if noun == "index" else noun + "s"
    try:
        idx = np.asarray(indices)
    except Exception as exc:  # ragged nesting and the like
        raise DDStoreValueError(f"{what}: {plural} must be a 1-D sequence of integers "
                                f"({type(exc).__name__}: {exc})") from None
    if idx.size == 0:
        return np.zeros(0, dtype=np.int64)
    # integers beyond int64: numpy makes them uint64, float64 (mixed with negatives) or
    # object; look at the values as given
    if idx.ndim == 1 and (idx.dtype == np.uint64 or (
            idx.dtype.kind in "fO" and isinstance(indices, (list, tuple)))):
        values = idx.tolist() if idx.dtype == np.uint64 else list(indices)
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
               for v in values):
            values = [int(v) for v in values]
            top = np.iinfo(np.int64)
            pos = next((p for p, v in enumerate(values) if not top.min <= v <= top.max),
                       None)
            if pos is not None:
                bound = f" [{low}, {limit})" if limit is not None else " (beyond int64)"
                raise DDStoreIndexError(f"{what}: {noun} {values[pos]} (position {pos}) "
                                        f"out of range{bound}")
            return np.array(values, dtype=np.int64)
    if idx.dtype.kind not in "iu" or idx.ndim != 1:
        raise DDStoreValueError(f"{what}: {plural} must be a 1-D sequence of integers, "
                                f"got dtype {idx.dtype} shape {idx.shape}")
    return np.ascontiguousarray(idx, dtype=np.int64)


def sample_at(samples, i, what):
    """``samples[i]`` of a user's sequence (a map-style Dataset builds it on access): an
    exception it raises, but the package's own and ``MemoryError``, becomes a
    :class:`DDStoreValueError` naming ``what`` and the sample (the one rule of the
    readers of samples: records, graph writers)."""
    try:
        return samples[i]
    except (DDStoreError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 -- whatever the user's sequence raises
        raise DDStoreValueError(f"{what}: samples[{i}] raised {type(exc).__name__}: {exc} "
                                f"(len(samples) is {len(samples)})") from exc


def is_int(value):
    """True for an integer (Python or numpy), False for anything else, bools included."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def tensor_values(values, what):
    """A torch tensor as a numpy array of the same values, whatever its device or
    ``requires_grad`` (no copy on the host where possible; bfloat16, which numpy lacks,
    widened to float32, which holds each of its values exactly; a dtype numpy cannot hold
    refused naming ``what``); anything else returned as it is."""
    if not (hasattr(values, "detach") and hasattr(values, "numpy")):
        return values
    values = host_tensor(values, what)
    if str(values.dtype) == "torch.bfloat16":
        values = values.float()
    try:
        return values.numpy()
    except TypeError as exc:
        raise DDStoreValueError(f"{what}: torch dtype {values.dtype} has no numpy "
                                f"equivalent ({exc}); allowed: bool, integer or floating "
                                f"point (bfloat16 included)") from None


def integer_scalar(value):
    """``value`` as a Python int when it is a 0-d integer tensor or array (torch or numpy;
    not bool, float or complex: ``tensor(2.7)`` is never read as 2); anything else
    unchanged, for :func:`is_int` to judge.  The one rule for a tensor given where one
    integer is asked for (an index, a time step, a node)."""
    if getattr(value, "ndim", None) != 0 or isinstance(value, numbers.Number):
        return value
    dtype = value.dtype
    kind = getattr(dtype, "kind", None)  # numpy's; torch dtypes have none
    if kind is not None:
        return int(value) if kind in "iu" else value
    if dtype.is_floating_point or dtype.is_complex or str(dtype) == "torch.bool":
        return value
    return int(value)


def as_int(value, what, low=None):
    """``value`` as a Python int if it is an integer (Python or numpy, not bool) and, when
    ``low`` is given, ``>= low``; a :class:`DDStoreValueError` naming ``what``, the range
    and the value otherwise (floats are never truncated)."""
    if is_int(value) and (low is None or value >= low):
        return int(value)
    bound = "" if low is None else f" >= {low}"
    raise DDStoreValueError(f"{what} must be an integer{bound}, got {value!r}")


def as_dtype(value, what, kinds, allowed, sizes=None):
    """The package's one rule for a dtype argument: a numpy dtype or what numpy takes for
    one (a type, a string such as ``"float32"``), or a torch dtype (as the numpy dtype
    of its tensors), whose kind is one of ``kinds`` (numpy's kind letters, e.g. ``"f"``)
    and, if ``sizes`` is given, whose item size in bytes is one of them (``(2, 4, 8)``:
    no long double, which torch has no dtype for), returned as a numpy dtype in the
    machine's byte order (``">f4"`` is float32: torch takes no other, and data in
    another order is converted as it is stored); a :class:`DDStoreValueError` naming
    ``what``, the value and ``allowed`` (the words for the dtypes taken) otherwise (a
    numpy value such as ``np.int64(7)``, which numpy reads as its dtype, included)."""
    if isinstance(value, (np.generic, np.ndarray)):
        raise DDStoreValueError(f"{what}={value!r} is a value, not a dtype (give its "
                                f"dtype: .dtype); allowed: {allowed}")
    try:
        if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
            import torch
            dt = torch.empty(0, dtype=value).numpy().dtype
        else:
            dt = np.dtype(value)
    except (TypeError, ValueError) as exc:
        raise DDStoreValueError(f"{what}={value!r} is not a dtype ({exc}); allowed: "
                                f"{allowed}") from None
    if dt.kind not in kinds or dt.fields is not None or \
            (sizes is not None and dt.itemsize not in sizes):
        raise DDStoreValueError(f"{what}={dt}; allowed: {allowed}")
    return dt if dt.isnative else dt.newbyteorder("=")


SEED_MASK = (1 << 64) - 1  # a seed is taken modulo 2**64


def as_seed(value, what):
    """The package's one rule for a random seed: an integer (Python or numpy, not bool)
    of any sign, taken modulo ``2**64`` (as torch's ``manual_seed`` reads a negative
    one), so every generator gets a non-negative 64-bit value; a
    :class:`DDStoreValueError` naming ``what`` and the value otherwise."""
    return as_int(value, what) & SEED_MASK


def as_bool(value, what):
    """``value`` as a Python bool if it is one (Python or numpy); a
    :class:`DDStoreValueError` naming ``what`` and the value otherwise (no truthiness:
    ``0``, ``"no"`` or ``None`` are refused, not read as False)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise DDStoreValueError(f"{what} must be True or False, got {value!r}")


def check_free_names(what, taken, remedy="remove them or pick another name"):
    """The one "name already taken" check of every layer: raises
    ``DDStoreValueError("<what>: the store already holds <taken>; <remedy>")`` unless
    ``taken`` is empty.  ``taken``: the variable names already held (a list, e.g.
    :func:`names_under`), or a description of one thing held (e.g. ``"attribute ('paper',
    'x')"``); ``what`` names the call or object (None: no prefix); ``remedy`` says how to
    free the name."""
    if not taken:
        return
    held = f"variables {taken}" if isinstance(taken, list) else taken
    raise DDStoreValueError(f"{'' if what is None else f'{what}: '}the store already "
                            f"holds {held}; {remedy}")


ASIDE = "~aside"  # a variable set aside by an open transaction: "<name>~aside<k>"


def aside_name(name, k):
    """The hidden name of variable ``name`` set aside by a transaction
    (:meth:`ddstore._transaction.Transaction.set_aside`), ``k`` >= 1."""
    return f"{name}{ASIDE}{k}"


def is_aside(name):
    """Whether ``name`` is such a hidden name (:func:`aside_name`)."""
    head, sep, k = name.rpartition(ASIDE)
    return bool(sep and head and k.isdigit())


def shown_name(name):
    """``name`` without the hidden suffixes of set-asides (:func:`aside_name`): the name
    a user gave, for messages."""
    while is_aside(name):
        name = name.rpartition(ASIDE)[0]
    return name


def removed_error(kind, name):
    """The error of a read through a handle (:meth:`DDStore.handle
    <ddstore.DDStore.handle>`, what a dataset reads through) whose ``kind`` ("variable",
    "records") ``name`` was removed since."""
    name = shown_name(name)
    return DDStoreStateError(
        f"{kind} {name!r} was removed from the store: what was made to read it (a "
        f"dataset, a loader, a handle from DDStore.handle) reads it no more; a {kind} "
        f"added since under the name {name!r} is another one (make or open the reader "
        f"again to read that one)")


def names_under(name, variables):
    """The names among ``variables`` (a store's) that lie under ``name/``: the
    variables a layer object called ``name`` creates; not those an open transaction
    set aside (hidden, freed when it commits: the name is free again)."""
    return [v for v in variables if v.startswith(f"{name}/") and not is_aside(v)]


def check_indices(idx, limit, what, item="index", low=0, detail=""):
    """The one range check of index arrays: raise a :class:`DDStoreIndexError` naming the
    extreme value of the int64 array ``idx`` outside ``[low, limit)`` and its first
    position, e.g. ``"get_batch 'x': index 12 (position 3) out of range [0, 10)"``
    (``what`` names the call, ``item`` the kind of index, ``detail`` is appended).
    Returns the smallest index (None for none)."""
    if not idx.size:
        return None
    if idx.size <= 32 and idx.ndim == 1:  # a few values: Python's min and max over the
        values = idx.tolist()             # list take 0.3 us where two reductions take 3-5
        smallest, largest = min(values), max(values)
    else:
        smallest, largest = int(idx.min()), int(idx.max())
    if smallest < low or largest >= limit:
        bad = smallest if smallest < low else largest
        pos = int(np.flatnonzero(idx == bad)[0])
        raise DDStoreIndexError(f"{what}: {item} {bad} (position {pos}) out of range "
                                f"[{low}, {limit}){detail}")
    return smallest


def big_ints(arr, dtype, what, holder="the variable's", fallback=None):
    """``arr`` of numpy dtype object (Python integers, some beyond int64: ``[2**70]``)
    cast to integer ``dtype`` when every element is an integer in its range; else raises
    a :class:`DDStoreValueError` naming the first integer outside it (its value, position
    and the range), or returns ``fallback`` (default ``arr``) when it holds something
    other than integers (the caller refuses or casts that)."""
    if not all(is_int(v) for v in arr.flat):
        return arr if fallback is None else fallback
    info = np.iinfo(dtype)
    for pos in np.ndindex(arr.shape):
        v = int(arr[pos])
        if not info.min <= v <= info.max:
            raise DDStoreValueError(f"{what}: value {v} at {pos} does not fit {holder} "
                                    f"dtype {dtype} ([{info.min}, {info.max}])")
    return arr.astype(dtype)


def cast_values(arr, dtype, what, holder="the variable's", given=None):
    """``arr`` (values ``given`` as the user passed them: a list keeps Python ints that
    numpy made floats) cast to ``dtype`` by value, as :meth:`DDStore.update` writes: of
    the same dtype as they are; within a kind as numpy's ``'same_kind'`` (int64 into
    int8, float64 into float32, not float into int); any integer into an integer dtype
    (signed into unsigned too: ``[1, 2]`` into uint8); every value in range
    (:func:`cast_in_range`), else a :class:`DDStoreValueError` naming what was wrong
    and what is allowed."""
    if dtype.kind in "iu" and (arr.dtype == object or (
            arr.dtype.kind == "f" and isinstance(given, (list, tuple)))):
        # Python ints beyond int64: numpy makes floats of [2**63, 0] (rounded),
        # objects of [2**64]; taken as the integers they are
        exact = arr if arr.dtype == object else np.array(given, dtype=object)
        if exact.shape == arr.shape:
            arr = big_ints(exact, dtype, what, holder, fallback=arr)
    elif dtype.kind in "fc" and arr.dtype == object and all(
            type(v) in (int, float) for v in arr.flat):  # (Python ints beyond uint64
        arr = _ints_as_floats(arr, dtype, what, holder)    # make objects of a list)
    if arr.dtype == dtype:
        return arr
    if not (np.can_cast(arr.dtype, dtype, "same_kind") or
            (arr.dtype.kind in "iu" and dtype.kind in "iu")):
        raise DDStoreValueError(
            f"{what}: dtype {arr.dtype} cannot be cast to {holder} dtype {dtype}; allowed: "
            f"rows of dtype {dtype} or of a dtype numpy casts to it within its kind "
            f"('same_kind': e.g. int64 into int8, float64 into float32, not float into "
            f"int), or any integer into an integer dtype, every value in its range")
    return cast_in_range(arr, dtype, what, holder)


def _ints_as_floats(arr, dtype, what, holder):
    """An object array of Python ints and floats (ints beyond uint64 among them) as
    float64 (complex128 for a complex ``dtype``): each int the nearest float64, then
    cast to ``dtype`` as any float64 is (float32: rounded a second time); one beyond
    every float is named."""
    try:
        return arr.astype(np.float64 if dtype.kind == "f" else np.complex128)
    except OverflowError:  # (a Python int compared with a Python float: exactly)
        bad = next(v for v in arr.flat if abs(v) > sys.float_info.max)
        raise DDStoreValueError(
            f"{what}: an integer of {abs(bad).bit_length()} bits (about 2**"
            f"{abs(bad).bit_length() - 1}) is beyond {holder} dtype {dtype} (largest "
            f"finite {float(np.finfo(dtype).max):.4g}); allowed: values within it") from None


def cast_in_range(arr, dtype, what, holder="the variable's"):
    """``arr`` cast to ``dtype`` (of its kind, or a float from an integer), refusing a
    value the cast would not keep: an integer outside ``dtype``'s range (it would wrap:
    300 into int8 is 44) or a finite number that would become infinite (1e300 into
    float32), or a time that would leave int64 in a finer unit (year 3000 in
    ``datetime64[ns]``).  Rounding to the nearer float, or truncation to a coarser time
    unit, is kept: that is what the variable holds.  One pass over ``arr``, and only when
    the cast is not safe for every value.  ``holder`` names whose dtype it is in the
    message."""
    with np.errstate(over="ignore", invalid="ignore"):  # found and named below
        out = arr.astype(dtype)
    if dtype.kind in "mM" and arr.dtype != dtype:
        # to a finer unit (numpy calls it safe) a count can leave int64 and wrap: the
        # way back must give every value; to a coarser one it truncates (kept, as
        # rounding is) and cannot overflow
        if not np.can_cast(arr.dtype, dtype, "safe"):
            return out
        bad = out.astype(arr.dtype) != arr
        if arr.dtype.kind in "mM":
            bad &= ~np.isnat(arr)
        ends = np.array([np.iinfo(np.int64).min + 1, np.iinfo(np.int64).max]).view(dtype)
        allowed = f"{ends[0]} to {ends[1]}"  # (int64's least is NaT)
    elif np.can_cast(arr.dtype, dtype, "safe"):
        return out
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        bad = (arr < info.min) | (arr > info.max)
        allowed = f"[{info.min}, {info.max}]"
    else:
        bad = np.isfinite(arr) & ~np.isfinite(out)
        allowed = f"finite values up to {np.finfo(dtype).max:g} in magnitude"
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DDStoreValueError(
            f"{what}: value {arr[where].item()!r} at {where} does not fit {holder} "
            f"dtype {dtype} ({allowed}); it would be stored as {out[where].item()!r} "
            f"({int(bad.sum())} of {bad.size} values do not fit)")
    return out
