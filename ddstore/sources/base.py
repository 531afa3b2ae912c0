"""The preloader interface and the in-memory sequence source.

A *source* knows how many samples a data set has and can produce the samples of any
contiguous range ``[start, stop)`` without touching the others.  Each rank of a store
asks its source only for its own chunk (``ddstore.partition``), so no rank reads data it
will not hold.

Also here, the one check that the ranks read the same files (:func:`file_share`,
:func:`check_same_files`): each rank reads its own part of a data set from the file it
opens, so a rank handed another file (another path, a relative path resolved from
another directory, a stale copy on one node) would mix two data sets into one.  Each
reader tells, in the round of the collective step that loads its data, what it opened
(:func:`file_share`: the absolute path, the size and a CRC-32 of the first and last 64
KiB, never the whole file), and the layer raises alike on every rank unless every rank
saw the same bytes (:func:`check_same_files`).
"""
import contextlib
import os
import shutil
import stat
import zlib

import numpy as np

from .. import _lifecycle
from .._checks import as_indices, is_int
from ..errors import DDStoreIndexError, DDStoreValueError

__all__ = ["Source", "SequenceSource", "check_range", "int_bounds", "regular_file",
           "file_mark", "files_mark", "file_share", "check_same_files", "MARK_BYTES",
           "check_replaceable", "written_in_place", "written_path", "replaced_file",
           "check_file_target", "check_index"]

#: bytes at each end of a file that its mark covers (:func:`file_mark`)
MARK_BYTES = 64 << 10
#: a directory of at most this many files has every file's size and ends marked (an
#: ADIOS2 BP directory); a longer one (one file per sample) this many files' sizes
#: and its first and last file's ends
_MARK_ALL_FILES = 16


def _file_kind(mode):
    """What a non-regular file is, in words (for messages)."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def _working_directory():
    try:
        return f"the working directory {os.getcwd()}"
    except OSError:  # (removed since the process entered it)
        return "a working directory that no longer exists"


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
        where = "" if os.path.isabs(p) else f" (relative to {_working_directory()})"
        raise DDStoreValueError(f"{prefix}{p}: {missing}{where}") from None
    except OSError as exc:
        raise DDStoreValueError(f"{prefix}{p}: cannot be read ({exc.strerror or exc})") \
            from None
    if not stat.S_ISREG(mode):
        kind = _file_kind(mode)
        raise DDStoreValueError(f"{prefix}{p}: is {kind}, not a regular file"
                                if kind.startswith("a ") else f"{prefix}{p}: {kind}")
    return p


def _ends_crc(f, size):
    """CRC-32 of the first and last :data:`MARK_BYTES` of the open binary file ``f``."""
    f.seek(0)
    head = f.read(MARK_BYTES)
    f.seek(max(0, size - MARK_BYTES))
    return zlib.crc32(f.read(MARK_BYTES), zlib.crc32(head))


def _dir_files(path):
    """The regular files of directory ``path``, by sorted name."""
    with os.scandir(path) as entries:
        names = sorted(e.name for e in entries if e.is_file())
    return [os.path.join(path, n) for n in names]


def file_mark(path, f=None):
    """``(size, crc)``: what says cheaply whether two ranks read the same file -- its
    size in bytes and a CRC-32 of its first and last :data:`MARK_BYTES` (a gzip file
    ends with the CRC of all it holds).  ``f``: the file already open (binary, seekable:
    what the reader reads; an ``io.BytesIO`` of bytes read whole), else ``path`` is
    opened (a regular file: the caller checked it with :func:`regular_file`).  A
    directory: :func:`files_mark` of its regular files, by sorted name (an ``OSError``
    propagates: the caller words it or its step agrees it)."""
    if f is None:
        p = os.fspath(path)
        if os.path.isdir(p):
            return files_mark(_dir_files(p))[:2]
        with open(p, "rb") as fh:
            return file_mark(p, fh)
    try:
        size = os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, ValueError):  # not a real file (io.BytesIO)
        size = f.seek(0, os.SEEK_END)
    return int(size), _ends_crc(f, size)


def files_mark(paths):
    """``(total bytes, crc, count)`` of the files ``paths`` (in the order given): a CRC-32
    over all their base names (no I/O), over the sizes of at most
    :data:`_MARK_ALL_FILES` of them (all when there are no more; else the first, the last
    and evenly spaced ones between: every rank stats the same few files, never the
    million samples of a data set on a parallel file system) and over the ends of those
    (of the first and last only, when there are more: two reads of 64 KiB each).
    ``total`` is the bytes of the files stated.  A file that cannot be read is marked as
    such (size -1), not raised: the reader that opens it names it in its own words."""
    crc, total, paths = 0, 0, list(paths)
    n = len(paths)
    for p in paths:
        crc = zlib.crc32(os.path.basename(p).encode("utf-8", "surrogateescape") + b"\0",
                         crc)
    k = min(n, _MARK_ALL_FILES)
    picks = sorted({(i * (n - 1)) // max(k - 1, 1) for i in range(k)})
    regular = {}
    for i in picks:
        try:
            st = os.stat(paths[i])
            size = st.st_size if stat.S_ISREG(st.st_mode) else -2
        except OSError:
            size = -1
        total += max(size, 0)
        regular[i] = size >= 0
        crc = zlib.crc32(f"{i}\0{size}\n".encode(), crc)
    for i in (picks if n <= _MARK_ALL_FILES else sorted({0, n - 1})):
        try:  # (never opened unless a regular file: a FIFO would wait for a writer)
            end = file_mark(paths[i])[1] if regular[i] else 1 << 32
        except OSError:
            end = 1 << 32
        crc = zlib.crc32(end.to_bytes(5, "little"), crc)
    return total, crc, n


def file_share(path, f=None, files=None):
    """What a rank tells the others, in the round of the step that loads a data set, of
    the file (or directory) ``path`` it read: ``(absolute path, size, crc, count)``, for
    :func:`check_same_files`.  ``f``: the file open (see :func:`file_mark`); ``files``:
    the files of directory ``path`` that the reader reads (default every regular file in
    it); ``count`` is None for a file, the number of files for a directory."""
    p = os.fspath(path)
    if files is not None:
        size, crc, count = files_mark(files)
    elif f is None and os.path.isdir(p):
        size, crc, count = files_mark(_dir_files(p))
    else:
        (size, crc), count = file_mark(p, f), None
    return os.path.abspath(p), size, crc, count


def _told(entry):
    """How a rank's file is named in :func:`check_same_files`' message."""
    if entry is None:
        return "no such file"
    where, size, _, count = entry
    if count is None:
        return f"{size} bytes"
    files = f"{count} file{'s' if count != 1 else ''}"
    return f"{size} bytes in {files}" if count <= _MARK_ALL_FILES else \
        f"{files} ({size} bytes in the {_MARK_ALL_FILES} compared)"


def check_same_files(shares, path=None):
    """Raise :class:`DDStoreValueError` (alike on every rank: call it with what a round
    gathered) unless every rank read the same files.  ``shares``: every rank's share in
    rank order, each None (a rank that read no file: data in memory; not compared) or a
    sequence of :func:`file_share` entries, one per file the reader read (None for a
    file that rank did not find).  The message names the first file that differs and,
    per group of ranks, its size and path; ``path`` (what the caller was given) leads
    it when every rank opened the same absolute path."""
    seen = [(r, tuple(s)) for r, s in enumerate(shares) if s is not None]
    if not seen:
        return
    width = max(len(s) for _, s in seen)
    for k in range(width):
        got = [(r, s[k] if k < len(s) else None) for r, s in seen]
        groups = {}
        for r, e in got:
            groups.setdefault(None if e is None else e[1:], []).append((r, e))
        if len(groups) == 1:
            continue
        parts = []
        for ranks in groups.values():
            names = sorted({e[0] for _, e in ranks if e is not None})
            parts.append(f"rank{'s' if len(ranks) > 1 else ''} "
                         f"{','.join(str(r) for r, _ in ranks)}: {_told(ranks[0][1])}"
                         + (f" ({', '.join(names)})" if len(names) == 1 else ""))
        sizes = {key[0] if key is not None else None for key in groups}
        why = "" if len(sizes) > 1 else ", the same size but different bytes"
        wheres = {e[0] for _, e in got if e is not None}
        first = path if path is not None and len(wheres) == 1 else \
            next(e[0] for _, e in got if e is not None)
        raise DDStoreValueError(f"{first}: the ranks read different files{why} "
                                f"({'; '.join(parts)}); each rank reads its own share of "
                                f"one data set, so every rank must see the same file (a "
                                f"copy on each node must be identical)")


def written_path(path, what):
    """``path`` as a writer takes it: a str without trailing separators (``"out.bp/"``
    is ``"out.bp"``: the temporary name beside it must not land inside it); an empty
    path or one that is not a path is a :class:`DDStoreValueError`."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise DDStoreValueError(f"{what}: the path must be a str or os.PathLike, got "
                                f"{type(path).__name__}") from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    stripped = path.rstrip(os.sep) or path[:1]  # ("/" stays "/")
    if not stripped:
        raise DDStoreValueError(f"{what}: the path is empty; give a file or directory name")
    return stripped


def check_replaceable(path, what, kind, is_own):
    """The one rule of the writers of files (``write_records_adios``,
    ``write_pickle_files``): they never remove or overwrite what they did not write.
    Raise a :class:`DDStoreValueError` unless ``path`` is new, an empty directory, or
    ``kind`` (``is_own(path)`` returns: a file or directory of an earlier write)."""
    if not os.path.lexists(path) or (os.path.isdir(path) and not os.path.islink(path)
                                     and not os.listdir(path)):
        return  # new, or an empty directory (nothing of anyone's in it)
    if os.path.islink(path):
        raise DDStoreValueError(f"{what}: {path!r} is a symbolic link; give a new path")
    try:
        is_own(path)
    except Exception as exc:
        found = "directory" if os.path.isdir(path) else "file"
        raise DDStoreValueError(
            f"{what}: {path!r} exists and is not a {kind} (an existing {found} is "
            f"replaced only when it is one); give a new path, or remove it yourself "
            f"({type(exc).__name__}: {exc})") from None


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


@contextlib.contextmanager
def written_in_place(path, what, kind, is_own):
    """Write a file or directory at ``path`` all or nothing, touching nothing else::

        with written_in_place(path, what, "ddstore CFF file", is_cff) as temporary:
            write_everything_to(temporary)

    ``path`` is checked first (:func:`check_replaceable`); the block writes under a
    temporary name beside it (``<path>.writing-<pid>``), which is removed if the block
    raises and otherwise moved to ``path``, replacing an earlier write (or an empty
    directory) only then.  A failure at any point leaves ``path`` as it was."""
    path = written_path(path, what)
    check_replaceable(path, what, kind, is_own)
    temporary = f"{path}.writing-{os.getpid()}"
    old = None
    try:
        yield temporary
        if os.path.lexists(path):
            check_replaceable(path, what, kind, is_own)  # (it may have changed since)
            old = f"{path}.replaced-{os.getpid()}"
            os.rename(path, old)
        os.rename(temporary, path)
    except BaseException as exc:
        if old is not None and not os.path.lexists(path):
            os.rename(old, path)  # the earlier write back in place
            old = None
        _remove(temporary)
        if isinstance(exc, OSError):
            raise DDStoreValueError(f"{what}: {exc}") from None
        raise
    finally:
        if old is not None:
            _remove(old)


def check_file_target(path, what):
    """``path`` (as :func:`written_path` gives it) where a writer may put a file: a
    :class:`DDStoreValueError` for a path ending in a separator (a directory's), an
    existing directory or symbolic link, or a file this process may not write (as
    ``open(path, "w")`` would refuse it).  Writers of several files check every target
    first, so that a refusal leaves all of them as they were."""
    given = os.fsdecode(os.fspath(path)) if not isinstance(path, str) else path
    if given.endswith(os.sep) and given.strip(os.sep):
        raise DDStoreValueError(f"{what}: {given!r} names a directory (it ends in "
                                f"{os.sep!r}); give a file name")
    path = written_path(path, what)
    if os.path.islink(path) or os.path.isdir(path):
        found = "symbolic link" if os.path.islink(path) else "directory"
        raise DDStoreValueError(f"{what}: {path!r} is a {found}; give a file name "
                                f"(an existing file is replaced)")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise DDStoreValueError(f"{what}: {path!r} is read-only here; make it writable "
                                f"or give another name")
    return path


@contextlib.contextmanager
def replaced_file(path, what):
    """Write one file of a foreign format (a CSV, an HDF5 file) all or nothing::

        with replaced_file(path, "write_jodie") as temporary:
            write_the_file(temporary)

    The block writes a file of ``path``'s own name in a directory made beside it
    (``<path>.writing-<pid>/``: formats that record their file's name, as ``torch.save``
    does, write the same bytes as to ``path``); if it raises, that directory is removed
    and ``path`` is as it was; otherwise the file is moved onto ``path``, replacing an
    existing file as ``numpy.save`` or ``DataFrame.to_csv`` would, keeping its
    permissions (:func:`check_file_target` refuses what ``path`` cannot be before
    anything is written; a hard link to the old file keeps the old contents).  Check the
    arguments before the block: nothing is written for bad input.  A process ended by
    a signal while it writes (SIGTERM from ``timeout`` or a batch system) leaves no
    ``.writing-`` directory either (a watcher removes it)."""
    path = check_file_target(path, what)
    folder = f"{path}.writing-{os.getpid()}"
    try:
        os.mkdir(folder)
    except OSError as exc:
        raise DDStoreValueError(f"{what}: cannot write beside {path!r}: {exc}") from None
    forget = _lifecycle.remove_when_ended(folder)
    try:
        temporary = os.path.join(folder, os.path.basename(path))
        yield temporary
        if os.path.exists(path):  # the replaced file's permissions kept (not the umask's)
            shutil.copymode(path, temporary)
        os.replace(temporary, path)
    except BaseException as exc:
        if isinstance(exc, OSError):
            raise DDStoreValueError(f"{what}: {exc}") from None
        raise
    finally:
        forget()  # (the folder removed, and its watcher let go)


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


def check_index(what, index, total):
    """Sample ``index`` as a Python int: a :class:`DDStoreValueError` unless an integer,
    a :class:`DDStoreIndexError` unless in ``[0, total)``; each names ``what`` (the
    one check of every source's ``read_one``)."""
    if not is_int(index):
        raise DDStoreValueError(f"sample index {index!r} must be an integer in [0, "
                                f"{total}){what}")
    if not 0 <= index < total:
        raise DDStoreIndexError(f"sample index {index} out of range [0, {total}){what}")
    return int(index)


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

    def file_marks(self):
        """What this rank read its samples from, for :func:`check_same_files` (a tuple
        of :func:`file_share` entries), or None for samples not read from files (the
        default)."""
        return None


class SequenceSource(Source):
    """Samples from an indexable sequence (a list, or a map-style Dataset that builds
    samples on access).  Only the requested indices are accessed."""

    def __init__(self, samples):
        if not hasattr(samples, "__len__") or not hasattr(samples, "__getitem__"):
            raise DDStoreValueError(f"samples must be an indexable sequence with len(), "
                                    f"got {type(samples).__name__}")
        # (one PyG Data has a len and items too: its keys; taken, it failed as sample 0's
        # KeyError: 0)
        names = {c.__name__ for c in type(samples).__mro__}
        one_graph = "BaseData" in names and "Batch" not in names  # (a Batch is a list)
        if isinstance(samples, (str, bytes, dict)) or one_graph:
            raise DDStoreValueError(f"samples must be a sequence of samples, got a "
                                    f"{type(samples).__name__}"
                                    f"{' (one sample: pass [data])' if one_graph else ''}")
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def read_one(self, index):
        """``samples[index]``."""
        return self.samples[check_index("", index, len(self.samples))]


# ---------------------------------------------------------------- writers' arguments
def writer_columns(call, ids=(), **columns):
    """The writer ``call``'s per-edge (or per-row) arguments as numpy arrays of one
    length, checked before anything is written: each 1-D (a 2-D one, features, by its
    rows), every one as long as the first; those named in ``ids`` integers >= 0 (a
    fractional id was truncated, ``1.5`` written as ``1``).  Raises
    :class:`DDStoreValueError` naming the argument, its shape and the rule."""
    out, length = {}, None
    for name, value in columns.items():
        if value is None:
            out[name] = None
            continue
        arr = writer_ids(call, name, value) if name in ids else np.asarray(value)
        if name not in ids and (arr.ndim == 0 or arr.ndim > 2 or
                                arr.dtype.kind not in "biuf"):
            raise DDStoreValueError(f"{call}: {name} must be a 1-D (or, for features, "
                                    f"2-D) array of numbers, got dtype {arr.dtype} shape "
                                    f"{arr.shape}")
        if length is None:
            length = len(arr)
        elif len(arr) != length:
            first = next(iter(columns))
            raise DDStoreValueError(f"{call}: {name} has {len(arr)} rows, {first} has "
                                    f"{length}; every argument has one row per item")
        out[name] = arr
    return out


def writer_ids(call, name, value):
    """The writer ``call``'s argument ``name``: 1-D integer ids >= 0 as int64, or a
    :class:`DDStoreValueError` naming it (a fractional id was truncated)."""
    arr = as_indices(value, f"{call}: {name}", noun="id")
    if arr.size and int(arr.min()) < 0:
        raise DDStoreValueError(f"{call}: {name} holds {int(arr.min())}; ids are integers "
                                f">= 0")
    return arr


def stale_files(call, directory, names, remedy):
    """Refuse a write into ``directory`` that would leave ``names`` (paths under it: an
    earlier write's optional files this one does not write) next to its new files: a
    reader would take them with the new data.  Nothing of the user's is removed; the
    error names them and ``remedy``."""
    found = [n for n in names if os.path.lexists(os.path.join(directory, n))]
    if found:
        raise DDStoreValueError(f"{call}({directory!r}): {found} from an earlier write "
                                f"would be read with the new data, which has none; "
                                f"{remedy} (nothing was written)")
