"""The preloader interface and the in-memory sequence source.

A *source* knows how many samples a data set has and can produce the samples of any
contiguous range ``[start, stop)`` without touching the others.  Each rank of a store
asks its source only for its own chunk (``ddstore.partition``), so no rank reads data it
will not hold.
"""
import os
import stat

import numpy as np

from .._checks import is_int
from ..errors import DDStoreIndexError, DDStoreValueError

__all__ = ["Source", "SequenceSource", "check_range", "int_bounds", "regular_file"]


def _file_kind(mode):
    """What a non-regular file is, in words (for messages)."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def regular_file(path, prefix="", missing="no such file"):
    """``path`` as a str when it names a regular file (through symlinks), else a
    :class:`DDStoreValueError` ``"<prefix><path>: <why>"``: ``missing`` when nothing is
    there, or what it is (a directory, a FIFO, a device...).  Readers call it before they
    open a file: opening a FIFO waits for a writer forever, and reading a device such as
    ``/dev/zero`` never ends."""
    p = os.fspath(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise DDStoreValueError(f"{prefix}{p}: {missing}") from None
    except OSError as exc:
        raise DDStoreValueError(f"{prefix}{p}: cannot be read ({exc.strerror or exc})") \
            from None
    if not stat.S_ISREG(mode):
        kind = _file_kind(mode)
        raise DDStoreValueError(f"{prefix}{p}: is {kind}, not a regular file"
                                if kind.startswith("a ") else f"{prefix}{p}: {kind}")
    return p


def int_bounds(what, start, stop, total):
    """``(start, stop)`` as Python ints, or a :class:`DDStoreValueError` naming ``what``,
    the bound that is not an integer (a float such as 2.5 is never truncated) and the
    range ``[0, total]`` it must lie in.  Only the type is checked here."""
    for name, value in (("start", start), ("stop", stop)):
        if not is_int(value):
            raise DDStoreValueError(f"{what}: {name}={value!r} must be an integer in "
                                    f"[0, {total}]")
    return int(start), int(stop)


def check_range(what, start, stop, total):
    """``(start, stop)`` as Python ints: a :class:`DDStoreValueError` unless both are
    integers (a float such as 2.5 is never truncated), a :class:`DDStoreIndexError`
    unless ``0 <= start <= stop <= total``; each names ``what`` and the allowed range."""
    start, stop = int_bounds(what, start, stop, total)
    if not 0 <= start <= stop <= total:
        raise DDStoreIndexError(f"{what}: row range [{start}, {stop}) out of range "
                                f"[0, {total}]")
    return start, stop


def first_outside(ids, limit):
    """Position of the first row of the int array ``ids`` (1-D, or 2-D: a row is bad when
    any of its values is) holding a value outside ``[0, limit)``; None when all are in
    range (readers name the row in their own terms: a file line, an edge)."""
    if not ids.size or (ids.min() >= 0 and ids.max() < limit):
        return None
    bad = (ids < 0) | (ids >= limit)
    return int(np.argmax(bad.any(axis=1) if bad.ndim > 1 else bad))


class Source:
    """Base class of preloader plugins.

    Subclasses implement ``__len__`` (number of samples, the same on every rank) and
    :meth:`read_one`; :meth:`read` yields ``(index, sample)`` for a row range and may be
    overridden to read a range in one go.  ``describe(index)`` names sample ``index`` in
    error messages (a file name, for file sources).
    """

    def __len__(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def read_one(self, index):  # pragma: no cover - abstract
        """Sample ``index`` (a global sample number)."""
        raise NotImplementedError

    def read(self, start, stop):
        """Yield ``(index, sample)`` for every sample in ``[start, stop)``, in order."""
        start, stop = check_range(type(self).__name__, start, stop, len(self))
        for i in range(start, stop):
            yield i, self.read_one(i)

    def describe(self, index):
        """How to name sample ``index`` in an error message."""
        return f"sample {index}"


class SequenceSource(Source):
    """Samples from an indexable sequence (a list, or a map-style Dataset that builds
    samples on access).  Only the requested indices are accessed."""

    def __init__(self, samples):
        if not hasattr(samples, "__len__") or not hasattr(samples, "__getitem__"):
            raise DDStoreValueError(f"samples must be an indexable sequence with len(), "
                                    f"got {type(samples).__name__}")
        if isinstance(samples, (str, bytes, dict)):
            raise DDStoreValueError(f"samples must be a sequence of samples, got a "
                                    f"{type(samples).__name__}")
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def read_one(self, index):
        """``samples[index]``."""
        n = len(self.samples)
        if not 0 <= index < n:
            raise DDStoreIndexError(f"sample index {index} out of range [0, {n})")
        return self.samples[index]
