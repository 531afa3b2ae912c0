"""TGL's dataset layout: ``edges.csv`` (header ``,src,dst,time,ext_roll``; first column
the edge index; ``ext_roll`` 0/1/2 = train/val/test; rows sorted by time), optional
``edge_features.pt`` and ``node_features.pt`` (torch tensors, rows = edges / nodes).

:func:`read_tgl_share` (collective over a store's ranks) parses only this rank's byte
range of ``edges.csv`` (whole lines); pandas and torch are imported where used.
:func:`write_tgl` writes the layout."""
import io
import os
import re
import time

import numpy as np

from ..errors import DDStoreValueError
from .._checks import partition
from .._collective import mark_agreed

__all__ = ["read_tgl_share", "write_tgl", "TGLShare", "TensorRows"]

_NEED = ("src", "dst", "time", "ext_roll")


def write_tgl(directory, src, dst, t, split, edge_feat=None, node_feat=None):
    """Write a TGL-format directory (used by tests and the example's ``--data``)."""
    import pandas as pd
    import torch
    os.makedirs(directory, exist_ok=True)
    df = pd.DataFrame({"src": np.asarray(src), "dst": np.asarray(dst),
                       "time": np.asarray(t), "ext_roll": np.asarray(split)})
    df.to_csv(os.path.join(directory, "edges.csv"), index=True)
    if edge_feat is not None:
        torch.save(torch.as_tensor(np.asarray(edge_feat)),
                   os.path.join(directory, "edge_features.pt"))
    if node_feat is not None:
        torch.save(torch.as_tensor(np.asarray(node_feat)),
                   os.path.join(directory, "node_features.pt"))


def _line_start(f, pos, lo, size):
    """First position >= pos where a line begins (lines start at ``lo``)."""
    if pos <= lo:
        return lo
    if pos >= size:
        return size
    f.seek(pos - 1)
    at = pos - 1
    while True:
        block = f.read(1 << 16)
        if not block:
            return size
        k = block.find(b"\n")
        if k >= 0:
            return at + k + 1
        at += len(block)


def _header(path):
    """(column positions, header bytes length, file size) or raise DDStoreValueError."""
    with open(path, "rb") as f:
        first = f.readline()
    size = os.path.getsize(path)
    cols = [c.strip() for c in first.decode("utf-8", "replace").rstrip("\r\n").split(",")]
    missing = [c for c in _NEED if c not in cols]
    if not first.endswith(b"\n") or missing:
        raise DDStoreValueError(f"{path}, line 1: header {first[:200]!r} must name the "
                                f"columns ,src,dst,time,ext_roll (missing {missing})")
    return cols, len(first), size


def _check_fields(path, chunk, n, first_line, expected="expected {n}"):
    """Every line of ``chunk`` has ``n`` comma-separated fields (as the header), or
    raise naming the first line that has not (pandas would take a row with an extra
    field as one with an index column, and read the other columns shifted)."""
    buf = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(buf == ord("\n"))
    if not chunk.endswith(b"\n"):
        ends = np.append(ends, len(chunk))
    commas = np.flatnonzero(buf == ord(","))
    fields = np.diff(np.searchsorted(commas, ends), prepend=0) + 1
    bad = np.flatnonzero(fields != n)
    if bad.size:
        i = int(bad[0])
        raise DDStoreValueError(f"{path}, line {first_line + i}: malformed row: "
                                f"{int(fields[i])} fields, {expected.format(n=n)}")


# bytes an integer field may hold besides its digits' separators (",", "\n"): a sign and
# blanks; anything else ("1e1", "2.0", "inf") makes it something other than an integer
# literal, even where a parser would read a whole number from it
_INT_BYTES = np.zeros(256, dtype=bool)
_INT_TEXT = b"0123456789+- \t\r,\n"
_INT_BYTES[list(_INT_TEXT)] = True
_INT64_MAX = 2 ** 63 - 1


def first_non_integer(chunk, n, columns):
    """``(line index, column)`` of the first field of ``chunk`` (whole lines of ``n``
    comma-separated fields each, as :func:`_check_fields` checked) among ``columns``
    that holds a byte no integer literal has (a ".", an "e", letters...), or None.  One
    vectorised pass over the bytes; only the odd bytes are located."""
    if not chunk.translate(None, _INT_TEXT):  # digits and separators only (C speed)
        return None
    buf = np.frombuffer(chunk, dtype=np.uint8)
    odd = np.flatnonzero(~_INT_BYTES[buf])
    # every line has n fields, so the separators (",", "\n") before a byte say its
    # line and column: the k-th separator ends field k % n of line k // n
    k = np.searchsorted(np.flatnonzero((buf == ord(",")) | (buf == ord("\n"))), odd)
    hit = np.flatnonzero(np.isin(k % n, list(columns)))
    if not hit.size:
        return None
    return int(k[hit[0]] // n), int(k[hit[0]] % n)


def field_text(chunk, i, c):
    """The text of field ``c`` of line ``i`` of ``chunk``, as written (for messages)."""
    line = chunk.split(b"\n", i + 1)[i]
    return line.rstrip(b"\r").split(b",")[c].decode("utf-8", "replace").strip()


def int64_text_error(text):
    """None when ``text`` is an integer literal within int64, else what is wrong."""
    try:
        v = int(text)
    except ValueError:
        return "not an integer literal"
    if not -_INT64_MAX - 1 <= v <= _INT64_MAX:
        return "beyond the int64 range"
    return None


def _parse(path, chunk, cols, first_line):
    """Arrays (src, dst, t, split) of a chunk of whole lines; ``first_line`` is the
    1-based line number of its first line.  Raises DDStoreValueError naming the line.

    The fast path parses with fixed dtypes and checks the result with whole-array
    operations; any doubt (a field count, a value that is not a number, a check that
    fails) re-parses the chunk the careful way, which names the first bad line."""
    fast = _parse_fast(chunk, cols)
    return fast if fast is not None else _parse_careful(path, chunk, cols, first_line)


def _parse_fast(chunk, cols):
    """(src, dst, t, split) when every line of ``chunk`` is well formed, else None."""
    import pandas as pd
    n = len(cols)
    lines = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
    if not chunk or chunk.count(b",") != (n - 1) * lines:
        return None
    use = [cols.index(c) for c in _NEED]
    if first_non_integer(chunk, n, (use[0], use[1], use[3])) is not None:
        return None  # "1e1", "2.0": the careful path names it
    try:
        df = pd.read_csv(io.BytesIO(chunk), header=None, names=list(range(n)), usecols=use,
                         skip_blank_lines=False, engine="c",
                         dtype={use[0]: np.int64, use[1]: np.int64, use[2]: np.float64,
                                use[3]: np.int64})
    except (ValueError, TypeError, OverflowError, pd.errors.ParserError):
        return None
    if df.shape[0] != lines:
        return None
    src, dst, t, roll = (df[u].to_numpy() for u in use)
    if lines and (int(src.min()) < 0 or int(dst.min()) < 0 or int(roll.min()) < 0 or
                  int(roll.max()) > 2 or not np.isfinite(t).all() or
                  (lines > 1 and bool((t[1:] < t[:-1]).any()))):
        return None
    return src, dst, t, roll.astype(np.int8)


def _parse_careful(path, chunk, cols, first_line):
    import pandas as pd
    n = len(cols)
    if not chunk:
        e = np.zeros(0, dtype=np.int64)
        return e, e.copy(), np.zeros(0), np.zeros(0, dtype=np.int8)
    _check_fields(path, chunk, n, first_line)
    df = read_csv_chunk(path, chunk, n, first_line, usecols=[cols.index(c) for c in _NEED])
    allowed = {"time": "a finite number", "ext_roll": "0, 1 or 2 (train/val/test)",
               "src": "an integer node id >= 0 (an integer literal, below 2**63)",
               "dst": "an integer node id >= 0 (an integer literal, below 2**63)"}
    ints = [cols.index(c) for c in ("src", "dst", "ext_roll")]
    first_odd = first_non_integer(chunk, n, ints)

    def bad_value(i, c):
        return DDStoreValueError(f"{path}, line {first_line + i}: column {c!r} is "
                                 f"{field_text(chunk, i, cols.index(c))!r}; it must be "
                                 f"{allowed[c]}")
    out = []
    for c in _NEED:
        col = df[cols.index(c)]
        vals = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(vals)
        if c != "time":
            bad |= vals != np.round(vals)
            # beyond int64 (the float64 test is coarse: the text decides)
            big = np.flatnonzero(np.abs(vals) >= 2.0 ** 62)
            for i in big:
                if int64_text_error(field_text(chunk, int(i), cols.index(c))):
                    bad[i] = True
        if c == "ext_roll":
            bad |= (vals < 0) | (vals > 2)
        if c in ("src", "dst"):
            bad |= vals < 0
        if first_odd is not None and first_odd[1] == cols.index(c):
            bad[first_odd[0]] = True
        if bad.any():
            raise bad_value(int(np.argmax(bad)), c)
        if c == "time":
            out.append(vals)
        else:
            out.append(pd.to_numeric(col).to_numpy().astype(np.int64))
    src, dst, t, roll = out
    down = np.flatnonzero(np.diff(t) < 0)
    if down.size:
        i = int(down[0]) + 1
        raise DDStoreValueError(f"{path}, line {first_line + i}: time {t[i]} is earlier "
                                f"than the previous row's {t[i - 1]}; edges.csv must be "
                                f"sorted by time (sort it, or use from_arrays, which "
                                f"accepts any order)")
    return src, dst, t, roll.astype(np.int8)


class TensorRows:
    """Rows of a tensor saved with ``torch.save`` (``edge_features.pt``), read in pieces:
    ``shape``, ``dtype`` (numpy) and ``rows(start, stop)``.  The file is opened with
    ``torch.load(mmap=True)`` (nothing read whole); when the tensor is one contiguous,
    uncompressed storage of the archive (what ``torch.save`` of a tensor writes), rows are
    read from the file with plain reads (the page cache holds them, not this process);
    otherwise they are copied from the memory map."""

    def __init__(self, path):
        import torch
        self.path = path
        try:
            x = torch.load(path, mmap=True, weights_only=True)
        except Exception as exc:
            raise DDStoreValueError(f"{path}: cannot be read as a torch tensor "
                                    f"({type(exc).__name__}: {exc})") from None
        if not isinstance(x, torch.Tensor) or x.ndim < 1:
            raise DDStoreValueError(f"{path}: holds {type(x).__name__}, not a tensor with a "
                                    f"first (row) dimension")
        try:
            self.dtype = x[:0].numpy().dtype
        except Exception as exc:
            raise DDStoreValueError(f"{path}: dtype {x.dtype} has no numpy equivalent "
                                    f"({exc})") from None
        self._x = x
        self.shape = tuple(x.shape)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        self._offset = self._data_offset()

    def _data_offset(self):
        """Byte offset of the tensor's data in the file, or None (use the memory map)."""
        import zipfile
        x = self._x
        nbytes = self.shape[0] * self.row_bytes
        if not x.is_contiguous() or x.storage_offset() != 0 or nbytes == 0 or \
                x.untyped_storage().nbytes() != nbytes:
            return None
        try:
            with zipfile.ZipFile(self.path) as z:
                data = [i for i in z.infolist() if re.search(r"/data/\d+$", i.filename)]
                if len(data) != 1 or data[0].compress_type != zipfile.ZIP_STORED or \
                        data[0].file_size != nbytes:
                    return None
                info = data[0]
            with open(self.path, "rb") as f:
                f.seek(info.header_offset)
                head = f.read(30)
                if head[:4] != b"PK\x03\x04":
                    return None
                off = info.header_offset + 30 + int.from_bytes(head[26:28], "little") + \
                    int.from_bytes(head[28:30], "little")
                f.seek(off)
                first = f.read(self.row_bytes)
            if first != x[:1].numpy().tobytes():  # not where we think: use the map
                return None
            return off
        except (OSError, zipfile.BadZipFile, ValueError):
            return None

    def rows(self, start, stop):
        """Rows ``[start, stop)`` as a numpy array (a copy)."""
        n = max(0, stop - start)
        if self._offset is None or n == 0:
            return self._x[start:stop].numpy().copy()
        with open(self.path, "rb") as f:
            f.seek(self._offset + start * self.row_bytes)
            buf = f.read(n * self.row_bytes)
        if len(buf) != n * self.row_bytes:
            raise DDStoreValueError(f"{self.path}: ends before row {stop}")
        return np.frombuffer(buf, dtype=self.dtype).reshape((n,) + self.shape[1:])


def read_csv_chunk(path, chunk, n, first_line, usecols=None):
    """A chunk of whole CSV lines with ``n`` fields as a pandas DataFrame (columns
    ``0..n-1``, C parser); a row pandas cannot parse is a :class:`DDStoreValueError`
    naming the file and line (``first_line``: the chunk's first line number)."""
    import pandas as pd
    try:
        return pd.read_csv(io.BytesIO(chunk), header=None, names=list(range(n)),
                           usecols=usecols, skip_blank_lines=False, engine="c")
    except Exception as exc:
        msg = str(exc)
        m = re.search(r"line (\d+)", msg)
        where = f"line {first_line + int(m.group(1)) - 1}" if m else \
            f"lines {first_line}+"
        raise DDStoreValueError(f"{path}, {where}: malformed row ({msg.strip()}); "
                                f"expected {n} fields") from None


def _count_lines(f, a, b, block=16 << 20):
    """Lines in bytes [a, b) of an open file (a last line without a newline counts)."""
    f.seek(a)
    n, left, last = 0, b - a, b""
    while left > 0:
        buf = f.read(min(block, left))
        if not buf:
            break
        n += buf.count(b"\n")
        left -= len(buf)
        last = buf[-1:]
    return n + (1 if b > a and last != b"\n" else 0)


def line_share_range(store, path, header, missing, call):
    """Collective: the first step of a reader that parses only its share of a text file
    with one header line, without reading it.  Rank ``r`` of ``size`` takes the whole
    lines that start in the ``r``-th of ``size`` equal byte ranges of the body.
    ``header(path)`` returns ``(info, header length in bytes, file size)`` or raises
    :class:`DDStoreValueError`; ``missing`` says what the file should be when it does not
    exist.  A failure on any rank raises on every rank (``call`` names the collective
    call, see :meth:`DDStore.agree`).  Returns ``(info, (start, stop), counts)``: this
    rank's byte range and every rank's number of lines (rank ``r``'s first line is
    ``2 + sum(counts[:r])``), counted in blocks."""
    rank, size = store.comm.Get_rank(), store.comm.Get_size()
    error, info, a, b, nlines = None, None, 0, 0, 0
    try:
        if not os.path.isfile(path):
            raise DDStoreValueError(f"{path}: not found ({missing})")
        info, hlen, fsize = header(path)
        body = fsize - hlen
        with open(path, "rb") as f:
            a = _line_start(f, hlen + body * rank // size, hlen, fsize)
            b = _line_start(f, hlen + body * (rank + 1) // size, hlen, fsize)
            nlines = _count_lines(f, a, b)
    except DDStoreValueError as exc:
        error = exc
    except OSError as exc:
        error = DDStoreValueError(f"{path}: {exc}")
    counts = store.agree(error, call=call, extra=nlines)
    return info, (a, b), counts


def line_pieces(path, start, stop, piece_bytes, first_line):
    """This rank's bytes ``[start, stop)`` of whole lines in pieces of whole lines of
    about ``piece_bytes`` (at least one line each): yields ``(bytes, first line
    number)``."""
    piece_bytes = max(1, int(piece_bytes))
    line = first_line
    with open(path, "rb") as f:
        f.seek(start)
        at, carry = start, b""
        while at < stop or carry:
            buf = f.read(min(piece_bytes, stop - at)) if at < stop else b""
            at += len(buf)
            if not buf and at < stop:  # the file shrank under us
                raise DDStoreValueError(f"{path}: ends at byte {at}, expected {stop}")
            buf = carry + buf if carry else buf
            cut = buf.rfind(b"\n") + 1 if at < stop else len(buf)
            if cut == 0:  # no whole line yet: read on
                carry = buf
                continue
            piece, carry = buf[:cut], buf[cut:]
            yield piece, line
            line += piece.count(b"\n")


def read_line_share(store, path, header, missing, call):
    """Collective: :func:`line_share_range`, then this rank's bytes read whole.  Returns
    ``(info, chunk, counts)``."""
    info, (a, b), counts = line_share_range(store, path, header, missing, call)
    error, chunk = None, b""
    try:
        with open(path, "rb") as f:
            f.seek(a)
            chunk = f.read(b - a)
    except OSError as exc:
        error = DDStoreValueError(f"{path}: {exc}")
    store.agree(error)
    return info, chunk, counts


def check_sorted_across_ranks(path, ends, what, advice):
    """Raise on every rank if the shares' times go back across ranks: ``ends`` is every
    rank's ``(first time, last time, first line, ...)`` or None for an empty share (each
    share is checked in order by its reader)."""
    prev = None
    for e in ends:
        if e is None:
            continue
        if prev is not None and e[0] < prev:
            raise mark_agreed(DDStoreValueError(f"{path}, line {e[2]}: {what} {e[0]} is "
                                                  f"earlier than the previous row's "
                                                  f"{prev}; {advice}"))
        prev = e[1]


class TGLShare:
    """Collective (the constructor): this rank's share of a TGL directory, to be read in
    pieces.  Attributes: ``counts`` (every rank's number of edges), ``num_edges``,
    ``first_eid``, ``edge_feat`` / ``node_feat`` (:class:`TensorRows` or None),
    ``node_rows`` (this rank's ``(start, stop)`` of the node-feature rows).
    :meth:`edge_pieces` parses the rank's byte range of ``edges.csv`` piece by piece
    (``stats``: lines parsed and seconds spent parsing, wall and CPU, on this rank);
    :meth:`ends` is what :func:`check_sorted_across_ranks` needs after it ran.  Errors
    (missing or malformed files, feature rows that do not match) raise on every rank."""

    def __init__(self, store, directory, call=("read_tgl_share", None)):
        comm = store.comm
        rank, size = comm.Get_rank(), comm.Get_size()
        self.path = os.path.join(str(directory), "edges.csv")
        self.cols, (self._a, self._b), self.counts = line_share_range(
            store, self.path, _header, "a TGL dataset directory needs edges.csv", call)
        self.num_edges = int(sum(self.counts))
        self.first_eid = int(sum(self.counts[:rank]))
        self.first_line = 2 + self.first_eid
        self._nlines = int(self.counts[rank])
        self.edge_feat = self.node_feat = None
        self.node_rows = (0, 0)
        self.split_counts = np.zeros(3, dtype=np.int64)
        self.stats = {"lines": 0, "parse_s": 0.0, "parse_cpu_s": 0.0}
        self._first = self._last = None
        error = None
        epath = os.path.join(str(directory), "edge_features.pt")
        npath = os.path.join(str(directory), "node_features.pt")
        try:
            if os.path.isfile(epath):
                self.edge_feat = TensorRows(epath)
                if self.edge_feat.shape[0] != self.num_edges:
                    raise DDStoreValueError(f"{epath}: {self.edge_feat.shape[0]} rows, but "
                                            f"edges.csv has {self.num_edges} edges")
            if os.path.isfile(npath):
                self.node_feat = TensorRows(npath)
                self.node_rows = partition(self.node_feat.shape[0], size, rank)
        except DDStoreValueError as exc:
            error = exc
        store.agree(error)

    def edge_pieces(self, chunk_edges):
        """This rank's edges in pieces of about ``chunk_edges`` lines (C parser): yields
        ``[edges [n, 2] int64, t float64, split int8, (edge_feat rows)]``; raises
        :class:`DDStoreValueError` naming the file and line of a bad row."""
        nlines = self._nlines
        avg = (self._b - self._a) / nlines if nlines else 64
        done = 0
        for piece, line in line_pieces(self.path, self._a, self._b,
                                       max(1, int(avg * chunk_edges)), self.first_line):
            t0, c0 = time.perf_counter(), time.process_time()
            src, dst, t, roll = _parse(self.path, piece, self.cols, line)
            self.stats["parse_s"] += time.perf_counter() - t0
            self.stats["parse_cpu_s"] += time.process_time() - c0
            self.stats["lines"] += src.shape[0]
            del piece
            n = src.shape[0]
            if n == 0:
                continue
            if self._last is not None and t[0] < self._last:
                raise DDStoreValueError(
                    f"{self.path}, line {line}: time {t[0]} is earlier than the previous "
                    f"row's {self._last}; edges.csv must be sorted by time (sort it, or use "
                    f"from_arrays, which accepts any order)")
            if self._first is None:
                self._first = float(t[0])
            self._last = float(t[-1])
            self.split_counts += np.bincount(roll, minlength=3)
            out = [np.stack([src, dst], axis=1), t, roll]
            if self.edge_feat is not None:
                e0 = self.first_eid + done
                out.append(self.edge_feat.rows(e0, e0 + n))
            done += n
            yield out

    def ends(self):
        """``(first time, last time, first line)`` of the rows parsed, or None."""
        return None if self._first is None else (self._first, self._last, self.first_line)

    def node_pieces(self, chunk):
        lo, hi = self.node_rows
        for a in range(lo, hi, chunk):
            yield [self.node_feat.rows(a, min(a + chunk, hi))]


def read_tgl_share(store, directory, call=("read_tgl_share", None)):
    """Collective: this rank's share of a TGL directory's edges, as
    ``(src, dst, t, split, edge_feat or None, node_feat or None)``, whole (see
    :class:`TGLShare` for reading it in pieces; ``TemporalGraph.from_tgl`` does).

    Each rank parses only its byte range of ``edges.csv`` (whole lines); edge ids are the
    row order of the file.  Errors (missing or malformed file, naming the file and line;
    unsorted times; feature rows that do not match) are raised on every rank.  ``call``
    names the collective call this is the first step of (see :meth:`DDStore.agree`).
    """
    share = TGLShare(store, directory, call)
    rank = store.comm.Get_rank()
    error, pieces = None, []
    try:
        pieces = list(share.edge_pieces(max(1, share.counts[rank])))
    except DDStoreValueError as exc:
        error = exc
    ends = store.agree(error, extra=share.ends())
    check_sorted_across_ranks(share.path, ends, "time", "edges.csv must be sorted by time "
                              "(sort it, or use from_arrays, which accepts any order)")
    if pieces:
        cat = [np.concatenate([p[i] for p in pieces]) for i in range(len(pieces[0]))]
    else:
        cat = [np.zeros((0, 2), np.int64), np.zeros(0), np.zeros(0, np.int8)]
        if share.edge_feat is not None:
            cat.append(share.edge_feat.rows(0, 0))
    nf = None
    error = None
    try:
        if share.node_feat is not None:
            nf = share.node_feat.rows(*share.node_rows)
    except DDStoreValueError as exc:
        error = exc
    store.agree(error)
    return (cat[0][:, 0].copy(), cat[0][:, 1].copy(), cat[1], cat[2],
            cat[3] if share.edge_feat is not None else None, nf)
