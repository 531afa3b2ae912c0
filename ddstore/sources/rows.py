"""Row ranges of big 2-D tables: ``.csv`` / ``.csv.gz`` text (no header, one row per line)
and ``.npy`` arrays, each call reading only rows ``[lo, hi)``.

- :func:`count_rows` ``(path)``: the number of rows.
- :func:`read_rows` ``(path, lo, hi, dtype=...)``: rows ``[lo, hi)`` as a numpy array.
- :func:`read_csv_rows` / :func:`read_npy_rows`: the two kinds on their own;
  :class:`CsvRowReader`: consecutive ranges of one CSV from one stream;
  :func:`line_text`: one line of a CSV as written (for messages).

What "reads only its range" costs, by kind:

- ``.npy``: the header, then the bytes of rows ``[lo, hi)`` with ``os.preadv`` straight into
  the result (no memory map, so the file's pages never count towards this process's
  memory, and no other row is read).  ``axis=1`` reads columns ``[lo, hi)`` of a 2-D array
  (e.g. ``edge_index`` ``[2, E]``): one contiguous read per row.
- ``.csv``: rows have no fixed width, so the position of row ``lo`` is only known by
  counting the line ends before it: the file is read from its start in blocks, and the
  blocks before row ``lo`` are counted (``bytes.count``) and dropped.
- ``.csv.gz``: the same, except that gzip cannot be entered in the middle: **every rank
  decompresses the stream from its start up to row ``hi``**, but keeps only the bytes of
  its own rows.  Memory stays at one block of text (``block_bytes``, 32 MB by default)
  plus the result; the time is that of decompressing up to ``hi`` (roughly 200-400 MB of
  text per second per core).

Rows are parsed by pandas' C parser one block at a time into a preallocated result (never
a Python loop over lines, never the whole file in memory).  Every row must have the same
number of comma-separated fields as the first row of the range; a row that has not, or a
value that is not a number (or not an integer, for an integer ``dtype``) is a
:class:`DDStoreValueError` naming the file and its line number.  A missing file names the
path; a row range outside the file names the allowed range.
"""
import gzip
import itertools
import math
import os
import zlib

import numpy as np

from .._checks import as_dtype, as_int
from ..errors import DDStoreIndexError, DDStoreValueError
from .base import regular_file
from .csv_lines import Column, finite_limit, parse_lines, range_text, refuse_cr_lines
from .npy import fortran_differs, npy_header

__all__ = ["count_rows", "read_rows", "read_csv_rows", "read_npy_rows", "npy_shape",
           "CsvRowReader", "first_line_fields", "line_text"]

BLOCK_BYTES = 32 << 20


def _kind(path):
    p = os.fspath(path)
    if p.endswith(".npy"):
        return "npy"
    if p.endswith(".csv.gz") or p.endswith(".csv"):
        return "csv"
    raise DDStoreValueError(f"{p}: unknown file kind; expected a name ending in .csv, "
                            f".csv.gz or .npy")


def _need_file(path):
    return regular_file(path)


def _check_bounds(path, lo, hi):
    lo, hi = as_int(lo, f"{path}: lo"), as_int(hi, f"{path}: hi")
    if lo < 0 or hi < lo:
        raise DDStoreIndexError(f"{path}: row range [{lo}, {hi}) is not a range of rows "
                                f"(need 0 <= lo <= hi)")
    return lo, hi


# ------------------------------------------------------------------------------ csv
def _open_csv(path):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _blocks(path, block_bytes):
    """Yield blocks of whole lines (each ends with a newline; a last line without one gets
    one) of the (decompressed) text of ``path``."""
    # the unfinished line carried to the next block, in pieces: a line of many blocks is
    # joined once, not copied again with every block (a 64 MB first line took 40 s)
    carry, first = [], True
    try:
        with _open_csv(path) as f:
            while True:
                data = f.read(block_bytes)
                if not data:
                    break
                if first:  # lines that end with CR alone would read as one line
                    # (the first line, or the block when it holds no line end: a CR
                    # at its end may be a CR LF cut by the block)
                    refuse_cr_lines(path, data[:data.find(b"\n") + 1] or
                                    data.rstrip(b"\r"))
                    first = False
                cut = data.rfind(b"\n") + 1
                if cut:
                    yield b"".join(carry + [data[:cut]]) if carry else data[:cut]
                    carry = [data[cut:]] if cut < len(data) else []
                else:
                    carry.append(data)
    except (OSError, EOFError, zlib.error) as exc:
        # a damaged file (EOF, zlib, a bad gzip header: no errno) or the system's refusal
        # (permissions, a directory: errno set), which is not the file's content
        guess = ("" if isinstance(exc, OSError) and exc.errno is not None else
                 "; a truncated or corrupt file?")
        raise DDStoreValueError(f"{path}: cannot be read ({type(exc).__name__}: "
                                f"{exc}){guess}") from None
    if carry:
        yield b"".join(carry) + b"\n"


def count_rows(path, block_bytes=BLOCK_BYTES):
    """The number of rows of a ``.csv`` / ``.csv.gz`` file (its lines; a last line without
    a newline counts; blank lines at the end of the file do not, as pandas skips them)
    or the first dimension of a ``.npy`` array.  A ``.csv.gz`` is decompressed from
    start to end to count (nothing is kept but the count)."""
    path = _need_file(path)
    if _kind(path) == "npy":
        return npy_shape(path)[0][0]
    return _rows(_blocks(path, block_bytes))


def _rows(blocks, lines=0):
    """The rows of the file whose ``blocks`` (of whole lines) follow its first ``lines``
    lines: the lines up to the last one that is not blank."""
    rows = lines
    for block in blocks:
        text = block.rstrip(b" \t\r\n")
        if text:
            rows = lines + text.count(b"\n") + 1
        lines += block.count(b"\n")
    return rows


def line_text(path, row, block_bytes=BLOCK_BYTES):
    """The bytes of row ``row`` (0-based: line ``row + 1``) of a ``.csv`` / ``.csv.gz``
    file without its newline, or None past the file's end; the file is read (a
    ``.csv.gz`` decompressed) from its start up to that line (for messages)."""
    at = 0
    for block in _blocks(_need_file(path), block_bytes):
        n = block.count(b"\n")
        if row < at + n:
            a = _nth_line_end(block, row - at)
            return block[a:block.find(b"\n", a)].rstrip(b"\r")
        at += n
    return None


def _nth_line_end(block, k):
    """Offset just past the ``k``-th newline of ``block`` (k >= 1), 0 for k == 0."""
    if k <= 0:
        return 0
    ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
    return int(ends[k - 1]) + 1


def _parse_block(path, chunk, n, first_line, dtype, out, finite=False,
                 told="as the first row read"):
    """Parse ``chunk`` (whole lines, ``n`` fields each) into ``out``
    (:func:`~ddstore.sources.csv_lines.parse_lines`: pandas' C parser, the first bad line
    named); with ``finite`` (a float ``dtype``), NaN, infinities and values beyond
    ``dtype``'s range are bad too."""
    integer = dtype.kind in "iub"
    want = "an integer (a literal within int64)" if integer else "a number"
    limit = None
    if finite and not integer:
        limit = finite_limit(dtype) if dtype.itemsize < 8 else None
        want = "a number that is finite" + ("" if limit is None else
                                            f" and within {dtype}'s range "
                                            f"({range_text(dtype)})")

    def bad_value(line, col, text):
        return DDStoreValueError(f"{path}, line {line}, column {col.field}: {text!r} is "
                                 f"not {want}")
    columns = [Column(j, f"column {j}", "int" if integer else "float",
                      finite=finite and not integer, limit=limit) for j in range(n)]
    values = np.column_stack(parse_lines(path, chunk, first_line, n, columns, bad_value,
                                         expected=f"expected {{n}} ({told})"))
    if integer and dtype != np.int64:
        low, high = (0, 1) if dtype.kind == "b" else (np.iinfo(dtype).min,
                                                       np.iinfo(dtype).max)
        if values.size and (values.min() < low or values.max() > high):  # (bool: 0 or 1;
            # 2 was read as True)
            i, j = (int(k) for k in np.argwhere((values < low) | (values > high))[0])
            allowed = "0 or 1" if dtype.kind == "b" else f"[{low}, {high}]"
            raise DDStoreValueError(f"{path}, line {first_line + i}, column {j}: "
                                    f"{int(values[i, j])} does not fit {dtype}; allowed: "
                                    f"{allowed}")
    out[...] = values


def first_line_fields(path):
    """The number of comma-separated fields of the first line of a ``.csv`` /
    ``.csv.gz`` file, or None for an empty file."""
    for block in _blocks(path, 1 << 16):
        line = block[:block.find(b"\n")]
        return line.count(b",") + 1
    return None


def read_csv_rows(path, lo, hi, dtype=np.float64, ncols=None, block_bytes=BLOCK_BYTES,
                  progress=None, finite=False):
    """Rows ``[lo, hi)`` of a headerless ``.csv`` / ``.csv.gz`` file as an array
    ``[hi - lo, ncols]`` of ``dtype``.

    The file is read from its start in blocks of ``block_bytes``; a ``.csv.gz`` is
    decompressed from its start up to row ``hi`` (gzip has no random access), but only the
    lines of rows ``[lo, hi)`` are kept and parsed (pandas' C parser, one block at a
    time, straight into the result).  Values are parsed as int64 for an integer
    ``dtype`` (exact) and as float64 otherwise, then cast to ``dtype`` -- the values that
    ``pandas.read_csv(path, header=None).to_numpy().astype(dtype)`` gives for these rows,
    but for the words read as NaN: "nan", "", "na", "null", "n/a" in any case, not
    pandas' others ("None", "#N/A", "-nan"...), which are refused.
    ``ncols``: the number of fields every row must have (default: as many as the first
    row read).  ``progress``: a label to show a tqdm bar over the rows passed (rank 0 of a
    long preload), or None.  ``finite``: refuse NaN, infinities and values beyond a
    float ``dtype``'s range (naming the line and column).  (To read a range in
    consecutive pieces, decompressing it once: :class:`CsvRowReader`.)
    """
    with CsvRowReader(path, block_bytes) as reader:
        return reader.read(lo, hi, dtype=dtype, ncols=ncols, progress=progress,
                           finite=finite)


class CsvRowReader:
    """Row ranges of one headerless ``.csv`` / ``.csv.gz`` file, read **in increasing
    order** from one stream kept open between calls: :meth:`read` ``(lo, hi)`` goes on
    from where the previous read stopped (the rows before ``lo`` are skipped, not
    parsed), so reading a range in consecutive pieces decompresses and scans it once; a
    range that starts before the stream's position reopens the file.  Each read returns
    what :func:`read_csv_rows` returns for its range, with the same errors.  Holds one
    block of text (``block_bytes``, default ``BLOCK_BYTES``) between reads; :meth:`close`
    (or leaving ``with``)
    ends the stream (a later read reopens it)."""

    def __init__(self, path, block_bytes=None):
        self.path = _need_file(path)
        self.block_bytes = as_int(block_bytes or BLOCK_BYTES, f"{self.path}: block_bytes",
                                  low=1)
        self._stream = None   # the generator of blocks
        self._block = None    # the block being read (not yet passed), or None
        self._nlines = 0      # its lines
        self._row = 0         # the row of its first line (of the next block if None)

    def close(self):
        if self._stream is not None:
            self._stream.close()
        self._stream, self._block, self._nlines, self._row = None, None, 0, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def count_to_end(self):
        """The file's number of rows, counted on from where the stream is (the rows
        already passed are not read again; nothing is parsed); the stream ends.  After
        reading a file's last rows, this is what says whether more follow."""
        if self._stream is None:
            return count_rows(self.path, self.block_bytes)
        ahead = [self._block] if self._block is not None else []
        total = _rows(itertools.chain(ahead, self._stream), self._row)
        self.close()
        return total

    def read(self, lo, hi, dtype=np.float64, ncols=None, progress=None, finite=False):
        """Rows ``[lo, hi)`` as ``[hi - lo, ncols]`` of ``dtype`` (see
        :func:`read_csv_rows`)."""
        path = self.path
        lo, hi = _check_bounds(path, lo, hi)
        dtype = as_dtype(dtype, f"{path}: dtype", "biuf",
                         "a number type (bool, integers, floats)")
        if ncols is not None:
            ncols = as_int(ncols, f"{path}: ncols", low=1)
        told = "as ncols says" if ncols is not None else "as the first row read"
        if self._stream is None or lo < self._row:
            self.close()
            self._stream = _blocks(path, self.block_bytes)
        out = None
        if ncols is not None:
            out = np.empty((hi - lo, int(ncols)), dtype=dtype)
        bar = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=hi, desc=str(progress), unit=" rows", unit_scale=True,
                       mininterval=1.0)
        try:
            while self._row < hi:
                if self._block is None:
                    self._block = next(self._stream, None)
                    if self._block is None:  # the end of the file
                        break
                    self._nlines = self._block.count(b"\n")
                block, nlines, row = self._block, self._nlines, self._row
                if row + nlines > lo and hi > lo:
                    a = _nth_line_end(block, lo - row) if lo > row else 0
                    take = min(hi, row + nlines) - max(lo, row)
                    b = _nth_line_end(block, hi - row) if row + nlines > hi else len(block)
                    part = block[a:b]
                    first = max(lo, row)
                    if out is None:
                        ncols = part[:part.find(b"\n")].count(b",") + 1
                        out = np.empty((hi - lo, ncols), dtype=dtype)
                    _parse_block(path, part, ncols, first + 1, dtype,
                                 out[first - lo:first - lo + take], finite, told)
                if row + nlines > hi:  # its later rows are the next read's
                    if bar is not None:
                        bar.update(hi - bar.n)
                    break
                self._row += nlines
                self._block = None
                if bar is not None:
                    bar.update(min(self._row, hi) - bar.n)
        finally:
            if bar is not None:
                bar.close()
        have = self._row + (self._nlines if self._block is not None else 0)
        if have < hi:
            raise DDStoreIndexError(f"{path}: row range [{lo}, {hi}) out of range "
                                    f"[0, {have}] (the file has {have} rows)")
        if out is None:  # lo == hi
            ncols = first_line_fields(path) or 0
            out = np.empty((0, ncols), dtype=dtype)
        return out


# ------------------------------------------------------------------------------ npy
def npy_shape(path):
    """``(shape, dtype, fortran_order, data offset)`` of a ``.npy`` file (header only)."""
    path = _need_file(path)
    with open(path, "rb") as fh:
        shape, dtype, fortran, offset = npy_header(path, fh, what=None)
        size = os.fstat(fh.fileno()).st_size
    if len(shape) == 0:
        raise DDStoreValueError(f"{path}: holds a 0-d array; rows need at least 1 "
                                f"dimension")
    need = math.prod(shape) * dtype.itemsize  # (Python ints: no wrap)
    if math.prod(shape[1:]) * dtype.itemsize >= 1 << 62:  # (even with no rows)
        raise DDStoreValueError(f"{path}: its header says shape {shape} {dtype}: rows of "
                                f"{math.prod(shape[1:])} elements are too large to read")
    if size - offset < need:
        raise DDStoreValueError(f"{path}: truncated: its header says shape {shape} "
                                f"{dtype} ({need} data bytes) but it holds "
                                f"{max(0, size - offset)}")
    return shape, dtype, fortran, offset


def _pread_into(fd, path, view, pos):
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], pos + done)
        if got <= 0:
            raise DDStoreValueError(f"{path}: truncated: read {done} of {len(view)} bytes "
                                    f"at byte {pos} (the file is shorter than its header "
                                    f"says)")
        done += got


def read_npy_rows(path, lo, hi, axis=0, dtype=None):
    """Rows ``[lo, hi)`` (``axis=0``) of a C-order ``.npy`` array, or columns ``[lo, hi)``
    (``axis=1``, a 2-D array, e.g. ``edge_index`` ``[2, E]``), read with ``os.preadv``
    straight into the result: only those bytes are read.  ``dtype``: what the file must
    hold (default: anything numeric); a file that differs raises naming both."""
    path = _need_file(path)
    shape, fdtype, fortran, offset = npy_shape(path)
    if fortran and fortran_differs(shape):
        raise DDStoreValueError(f"{path}: Fortran order; range reads need C order (save "
                                f"a C-contiguous array)")
    if fdtype.kind not in "biuf" or fdtype.fields is not None:
        raise DDStoreValueError(f"{path}: dtype {fdtype}; allowed: bool, integer or "
                                f"floating point")
    if dtype is not None and np.dtype(dtype) != fdtype:
        raise DDStoreValueError(f"{path}: holds dtype {fdtype}, expected "
                                f"{np.dtype(dtype)}")
    if axis not in (0, 1) or (axis == 1 and len(shape) != 2):
        raise DDStoreValueError(f"{path}: axis={axis!r}: allowed axis 0, or 1 for a 2-D "
                                f"array (shape {shape})")
    lo, hi = _check_bounds(path, lo, hi)
    total = shape[axis]
    if hi > total:
        what = "row" if axis == 0 else "column"
        raise DDStoreIndexError(f"{path}: {what} range [{lo}, {hi}) out of range "
                                f"[0, {total}] (shape {shape})")
    item = fdtype.itemsize  # (npy_shape refused a file shorter than its header says)
    with open(path, "rb") as fh:
        fd = fh.fileno()
        if axis == 0:
            row_bytes = math.prod(shape[1:]) * item
            out = np.empty((hi - lo,) + shape[1:], dtype=fdtype)
            if out.size:
                _pread_into(fd, path, memoryview(out.reshape(-1).view(np.uint8)),
                            offset + lo * row_bytes)
        else:
            out = np.empty((shape[0], hi - lo), dtype=fdtype)
            if out.size:
                for r in range(shape[0]):
                    _pread_into(fd, path, memoryview(out[r].view(np.uint8)),
                                offset + (r * shape[1] + lo) * item)
    return out


# ------------------------------------------------------------------------------ both
def read_rows(path, lo, hi, dtype=None, **kwargs):
    """Rows ``[lo, hi)`` of a ``.npy``, ``.csv`` or ``.csv.gz`` file (by its name): see
    :func:`read_npy_rows` and :func:`read_csv_rows` (``dtype`` for a CSV defaults to
    float64; for a ``.npy`` it is what the file must hold, default anything)."""
    path = _need_file(path)
    if _kind(path) == "npy":
        return read_npy_rows(path, lo, hi, dtype=dtype, **kwargs)
    return read_csv_rows(path, lo, hi, dtype=np.float64 if dtype is None else dtype,
                         **kwargs)
