"""TGL's dataset layout: ``edges.csv`` (header ``,src,dst,time,ext_roll``; first column
the edge index; ``ext_roll`` 0/1/2 = train/val/test; rows sorted by time), optional
``edge_features.pt`` and ``node_features.pt`` (torch tensors, rows = edges / nodes).

:func:`read_tgl_share` (collective over a store's ranks) parses only this rank's byte
range of ``edges.csv`` (whole lines); pandas and torch are imported where used.
:func:`write_tgl` writes the layout."""
import codecs
import os
import re
import time

import numpy as np

from ..errors import DDStoreValueError
from .._checks import partition
from .._times import as_times, time_dtype
from .base import (check_file_target, check_same_files, file_share, regular_file,
                   replaced_file, stale_files, writer_columns, written_path)
from .csv_lines import TIME_ALLOWED, Column, check_sorted_across_ranks, integer_column, \
    line_pieces, line_share_range, parse_lines, refuse_cr_lines, shown_line

__all__ = ["read_tgl_share", "write_tgl", "TGLShare", "TensorRows"]

_NEED = ("src", "dst", "time", "ext_roll")
_HEADER_MAX = 1 << 20  # bytes a header line may have


def write_tgl(directory, src, dst, t, split, edge_feat=None, node_feat=None):
    """Write a TGL-format directory (used by tests and the example's ``--data``):
    ``edges.csv`` and, when given, ``edge_features.pt`` / ``node_features.pt`` in
    ``directory`` (made if needed; its other files are left alone, and a feature file
    of an earlier write that this one has none for is refused, not left to be read with
    the new edges).  ``src``, ``dst``: integer node ids >= 0; ``split``: 0, 1 or 2 per
    edge; ``edge_feat``: a row per edge.  The arguments are
    converted before anything is written, and each file is replaced only by a complete
    one (:func:`~ddstore.sources.base.replaced_file`)."""
    import pandas as pd
    import torch
    directory = written_path(directory, "write_tgl")
    cols = writer_columns("write_tgl", ids=("src", "dst", "ext_roll"), src=src, dst=dst,
                          time=t, ext_roll=split, edge_feat=edge_feat)
    if cols["ext_roll"].size and int(cols["ext_roll"].max()) > 2:
        raise DDStoreValueError(f"write_tgl: split holds {int(cols['ext_roll'].max())}; "
                                f"allowed: 0, 1 or 2 (train/val/test)")
    if node_feat is not None and np.ndim(node_feat) != 2:
        raise DDStoreValueError(f"write_tgl: node_feat must be 2-D [nodes, features], got "
                                f"shape {np.shape(node_feat)}")
    df = pd.DataFrame({k: cols[k] for k in ("src", "dst", "time", "ext_roll")})
    files = [("edges.csv", lambda p: df.to_csv(p, index=True))]
    for name, feat in (("edge_features.pt", edge_feat), ("node_features.pt", node_feat)):
        if feat is not None:
            tensor = torch.as_tensor(np.asarray(feat))
            files.append((name, lambda p, tensor=tensor: torch.save(tensor, p)))
    stale_files("write_tgl", directory, [n for n in ("edge_features.pt", "node_features.pt")
                                         if n not in dict(files)],
                "remove them, or write to a new directory")
    for name, _ in files:  # every file checked before any is written
        check_file_target(os.path.join(directory, name), "write_tgl")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise DDStoreValueError(f"write_tgl: cannot make the directory {directory!r}: "
                                f"{exc}") from None
    for name, write in files:
        with replaced_file(os.path.join(directory, name), "write_tgl") as temporary:
            write(temporary)


def _header(path):
    """(column positions, header bytes length, file size) or raise DDStoreValueError."""
    with open(path, "rb") as f:
        first = f.readline(_HEADER_MAX)
    size = os.path.getsize(path)
    if len(first) == _HEADER_MAX and not first.endswith(b"\n"):
        raise DDStoreValueError(f"{path}, line 1: no line end in the first {_HEADER_MAX} "
                                f"bytes: not a CSV header ,src,dst,time,ext_roll")
    refuse_cr_lines(path, first)
    text = first[len(codecs.BOM_UTF8):] if first.startswith(codecs.BOM_UTF8) else first
    cols = [c.strip() for c in text.decode("utf-8", "replace").rstrip("\r\n").split(",")]
    missing = [c for c in _NEED if c not in cols]
    if missing:  # (a header without a line end is a file of no edges)
        raise DDStoreValueError(f"{path}, line 1: header {shown_line(first)} must name the "
                                f"columns ,src,dst,time,ext_roll (missing {missing})")
    return cols, len(first), size


_ADVICE = ("edges.csv must be sorted by time (sort it, or use from_arrays, which accepts "
           "any order)")
_ID = "an integer node id >= 0 (an integer literal, below 2**63)"


def _columns(cols):
    """The :class:`~ddstore.sources.csv_lines.Column` of each needed field (header
    positions ``cols``), in the order of ``_NEED``."""
    return [Column(cols.index("src"), "src", "int", _ID, low=0),
            Column(cols.index("dst"), "dst", "int", _ID, low=0),
            Column(cols.index("time"), "time", "time", TIME_ALLOWED, finite=True),
            Column(cols.index("ext_roll"), "ext_roll", "int",
                   "0, 1 or 2 (train/val/test)", low=0, high=2)]


def _parse(path, chunk, cols, first_line, after=None):
    """Arrays (src, dst, t, split) of a chunk of whole lines (``t`` int64 when every
    time of the chunk is an integer literal, else float64); ``first_line`` is the
    1-based line number of its first line, ``after`` the previous piece's last time.
    Raises DDStoreValueError naming the line (:func:`~ddstore.sources.csv_lines.
    parse_lines`: the fast path, and the careful one only for a chunk in doubt)."""
    def bad_value(line, col, text):
        return DDStoreValueError(f"{path}, line {line}: column {col.name!r} is {text!r}; "
                                 f"it must be {col.allowed}")
    src, dst, t, roll = parse_lines(path, chunk, first_line, len(cols), _columns(cols),
                                    bad_value, sort=(2, "time", _ADVICE), after=after)
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


class TGLShare:
    """Collective (the constructor): this rank's share of a TGL directory, to be read in
    pieces.  Attributes: ``counts`` (every rank's number of edges), ``num_edges``,
    ``first_eid``, ``edge_feat`` / ``node_feat`` (:class:`TensorRows` or None),
    ``node_rows`` (this rank's ``(start, stop)`` of the node-feature rows),
    ``time_dtype`` (the file's times: int64 when it has rows and every time is an
    integer literal, else float64, decided by :func:`ddstore._times.time_dtype` from
    every rank's look at its share before it is parsed).
    :meth:`edge_pieces` parses the rank's byte range of ``edges.csv`` piece by piece
    (``stats``: lines parsed and seconds spent parsing, wall and CPU, on this rank);
    :meth:`ends` is what :func:`check_sorted_across_ranks` needs after it ran;
    :meth:`rewind` starts the pieces again.  Whatever fails on any rank (missing or
    malformed files, feature rows that do not match, an ``OSError``) raises the same
    error on every rank.

    ``step``: None, the constructor is a collective call of its own; or the caller's
    collective step, entered and its round not yet run (a layer's named step): the
    constructor's first round is that step's."""

    def __init__(self, store, directory, step=None):
        if step is None:
            with store.collective("TGLShare") as step:
                self._open(store, directory, step)
        else:
            self._open(store, directory, step)

    def _open(self, store, directory, step):
        rank, size = store.comm.Get_rank(), store.comm.Get_size()
        self.path = os.path.join(str(directory), "edges.csv")
        self.cols, (self._a, self._b), self.counts = line_share_range(
            store, step, self.path, _header, "a TGL dataset directory needs edges.csv")
        self.num_edges = int(sum(self.counts))
        self.first_eid = int(sum(self.counts[:rank]))
        self.first_line = 2 + self.first_eid
        self._nlines = int(self.counts[rank])
        self.edge_feat = self.node_feat = None
        self.node_rows = (0, 0)
        self.rewind()
        epath = os.path.join(str(directory), "edge_features.pt")
        npath = os.path.join(str(directory), "node_features.pt")
        with store.collective(None) as files:  # the feature files, the times' kind
            # a feature file is read when anything is at its path (a directory or a
            # FIFO there is refused by name, not taken for no features), and every rank
            # must read the same one, or none (a copy per node that differs, or that
            # one node lacks, would store a mix of two files' rows)
            marks = tuple(file_share(regular_file(p)) if os.path.lexists(p) else None
                          for p in (epath, npath))
            if marks[0] is not None:
                self.edge_feat = TensorRows(epath)
            if marks[1] is not None:
                self.node_feat = TensorRows(npath)
                self.node_rows = partition(self.node_feat.shape[0], size, rank)
            ints = integer_column(self.path, self._a, self._b, len(self.cols),
                                  self.cols.index("time"))
            # (a file without rows: float64, as it always was; no integer was seen)
            kinds = files.agree(("i" if ints and self._nlines else "f", self._nlines, None,
                                 marks))
            check_same_files([k[3] for k in kinds])
            if self.edge_feat is not None and self.edge_feat.shape[0] != self.num_edges:
                raise DDStoreValueError(f"{epath}: {self.edge_feat.shape[0]} rows, but "
                                        f"edges.csv has {self.num_edges} edge lines (the "
                                        f"lines after its header, blank ones included)")
            self.time_dtype = time_dtype(kinds, f"{self.path}: time")  # (never raises)

    def rewind(self):
        """Local: :meth:`edge_pieces` starts again from this rank's first line (the
        split counts, the ends and ``stats`` count the next pass only)."""
        self.split_counts = np.zeros(3, dtype=np.int64)
        self.stats = {"lines": 0, "parse_s": 0.0, "parse_cpu_s": 0.0}
        self._first = self._last = None

    def edge_pieces(self, chunk_edges):
        """This rank's edges in pieces of about ``chunk_edges`` lines (C parser): yields
        ``[edges [n, 2] int64, t, split int8, (edge_feat rows)]``, ``t`` of
        :attr:`time_dtype`; raises :class:`DDStoreValueError` naming the file and line of
        a bad row (or of an integer time float64 would round, in a file whose times are
        float64)."""
        nlines = self._nlines
        avg = (self._b - self._a) / nlines if nlines else 64
        done = 0
        for piece, line in line_pieces(self.path, self._a, self._b,
                                       max(1, int(avg * chunk_edges)), self.first_line):
            t0, c0 = time.perf_counter(), time.process_time()
            src, dst, t, roll = _parse(self.path, piece, self.cols, line, self._last)
            self.stats["parse_s"] += time.perf_counter() - t0
            self.stats["parse_cpu_s"] += time.process_time() - c0
            self.stats["lines"] += src.shape[0]
            del piece
            n = src.shape[0]
            if n == 0:
                continue
            t = as_times(t, self.time_dtype, lambda p, at=line: (
                f"{self.path}, line {at + p}: time (float64: not every time of the file "
                f"is an integer literal)"), copy=False)
            if self._first is None:
                self._first = t[0].item()  # (exact: a Python int for int64 times)
            self._last = t[-1].item()
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


def read_tgl_share(store, directory):
    """Collective: this rank's share of a TGL directory's edges, as
    ``(src, dst, t, split, edge_feat or None, node_feat or None)``, whole (see
    :class:`TGLShare` for reading it in pieces; ``TemporalGraph.from_tgl`` does).

    Each rank parses only its byte range of ``edges.csv`` (whole lines); edge ids are the
    row order of the file.  Whatever fails on any rank (missing or malformed file,
    naming the file and line; unsorted times; feature rows that do not match; an
    ``OSError`` or ``MemoryError`` while reading) raises the same error on every rank.
    """
    with store.collective("read_tgl_share") as step:
        share = TGLShare(store, directory, step)
        rank = store.comm.Get_rank()
        with store.collective(None) as parse:
            pieces = list(share.edge_pieces(max(1, share.counts[rank])))
            if pieces:
                cat = [np.concatenate([p[i] for p in pieces]) for i in
                       range(len(pieces[0]))]
            else:
                cat = [np.zeros((0, 2), np.int64), np.zeros(0, share.time_dtype),
                       np.zeros(0, np.int8)]
                if share.edge_feat is not None:
                    cat.append(share.edge_feat.rows(0, 0))
            del pieces
            src, dst = cat[0][:, 0].copy(), cat[0][:, 1].copy()
            nf = None
            if share.node_feat is not None:
                nf = share.node_feat.rows(*share.node_rows)
            ends = parse.agree(share.ends())
            check_sorted_across_ranks(share.path, ends, "time", _ADVICE)
    return (src, dst, cat[1], cat[2], cat[3] if share.edge_feat is not None else None, nf)
