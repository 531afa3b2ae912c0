"""TGL's dataset layout: ``edges.csv`` (header ``,src,dst,time,ext_roll``; first column
the edge index; ``ext_roll`` 0/1/2 = train/val/test; rows sorted by time), optional
``edge_features.pt`` and ``node_features.pt`` (torch tensors, rows = edges / nodes).

:func:`read_tgl_share` (collective over a store's ranks) parses only this rank's byte
range of ``edges.csv`` (whole lines); pandas and torch are imported where used.
:func:`write_tgl` writes the layout."""
import io
import os
import re

import numpy as np

from ..errors import DDStoreValueError
from .._checks import partition

__all__ = ["read_tgl_share", "write_tgl"]

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


def _parse(path, chunk, cols, first_line):
    """Arrays (src, dst, t, split) of a chunk of whole lines; ``first_line`` is the
    1-based line number of its first line.  Raises DDStoreValueError naming the line."""
    import pandas as pd
    n = len(cols)
    if not chunk:
        e = np.zeros(0, dtype=np.int64)
        return e, e.copy(), np.zeros(0), np.zeros(0, dtype=np.int8)
    _check_fields(path, chunk, n, first_line)
    df = read_csv_chunk(path, chunk, n, first_line, usecols=[cols.index(c) for c in _NEED])
    out = []
    for c in _NEED:
        col = df[cols.index(c)]
        vals = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(vals)
        if c != "time":
            bad |= vals != np.round(vals)
        if c == "ext_roll":
            bad |= (vals < 0) | (vals > 2)
        if c in ("src", "dst"):
            bad |= vals < 0
        if bad.any():
            i = int(np.argmax(bad))
            allowed = {"time": "a finite number", "ext_roll": "0, 1 or 2 (train/val/test)",
                       "src": "an integer node id >= 0",
                       "dst": "an integer node id >= 0"}[c]
            raise DDStoreValueError(f"{path}, line {first_line + i}: column {c!r} is "
                                    f"{col.iloc[i]!r}; it must be {allowed}")
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


def _load_rows(path, start, stop, total_what):
    """Rows [start, stop) of a torch tensor file (memory-mapped), as numpy."""
    import torch
    try:
        x = torch.load(path, mmap=True, weights_only=True)
    except Exception as exc:
        raise DDStoreValueError(f"{path}: cannot be read as a torch tensor "
                                f"({type(exc).__name__}: {exc})") from None
    if not isinstance(x, torch.Tensor) or x.ndim < 1:
        raise DDStoreValueError(f"{path}: holds {type(x).__name__}, not a tensor with a "
                                f"first (row) dimension")
    if total_what is not None and x.shape[0] != total_what[0]:
        raise DDStoreValueError(f"{path}: {x.shape[0]} rows, but {total_what[1]}")
    return x[start:stop].numpy().copy(), x.shape[0]


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


def read_line_share(store, path, header, missing, call):
    """Collective: the first step of a reader that parses only its share of a text file
    with one header line.  Rank ``r`` of ``size`` reads the whole lines that start in the
    ``r``-th of ``size`` equal byte ranges of the body.  ``header(path)`` returns
    ``(info, header length in bytes, file size)`` or raises :class:`DDStoreValueError`;
    ``missing`` says what the file should be when it does not exist.  A failure on any
    rank raises on every rank (``call`` names the collective call, see
    :meth:`DDStore.agree`).  Returns ``(info, chunk, counts)``: this rank's bytes and
    every rank's number of lines (rank ``r``'s first line is ``2 + sum(counts[:r])``)."""
    rank, size = store.comm.Get_rank(), store.comm.Get_size()
    error, info, chunk, nlines = None, None, b"", 0
    try:
        if not os.path.isfile(path):
            raise DDStoreValueError(f"{path}: not found ({missing})")
        info, hlen, fsize = header(path)
        body = fsize - hlen
        with open(path, "rb") as f:
            a = _line_start(f, hlen + body * rank // size, hlen, fsize)
            b = _line_start(f, hlen + body * (rank + 1) // size, hlen, fsize)
            f.seek(a)
            chunk = f.read(b - a)
        nlines = chunk.count(b"\n") + (1 if chunk and not chunk.endswith(b"\n") else 0)
    except DDStoreValueError as exc:
        error = exc
    except OSError as exc:
        error = DDStoreValueError(f"{path}: {exc}")
    store.agree(error, call=call)
    return info, chunk, store.comm.allgather(nlines)


def check_sorted_across_ranks(path, ends, what, advice):
    """Raise on every rank if the shares' times go back across ranks: ``ends`` is every
    rank's ``(first time, last time, first line, ...)`` or None for an empty share (each
    share is checked in order by its reader)."""
    prev = None
    for e in ends:
        if e is None:
            continue
        if prev is not None and e[0] < prev:
            raise DDStoreValueError(f"{path}, line {e[2]}: {what} {e[0]} is earlier than "
                                    f"the previous row's {prev}; {advice}")
        prev = e[1]


def read_tgl_share(store, directory, call=("read_tgl_share", None)):
    """Collective: this rank's share of a TGL directory's edges, as
    ``(src, dst, t, split, edge_feat or None, node_feat or None)``.

    Each rank parses only its byte range of ``edges.csv`` (whole lines); edge ids are the
    row order of the file.  Errors (missing or malformed file, naming the file and line;
    unsorted times; feature rows that do not match) are raised on every rank.  ``call``
    names the collective call this is the first step of (see :meth:`DDStore.agree`).
    """
    comm = store.comm
    rank, size = comm.Get_rank(), comm.Get_size()
    path = os.path.join(str(directory), "edges.csv")
    cols, chunk, counts = read_line_share(
        store, path, _header, "a TGL dataset directory needs edges.csv", call)
    first_line = 2 + sum(counts[:rank])
    error = None
    arrays = None
    try:
        arrays = _parse(path, chunk, cols, first_line)
    except DDStoreValueError as exc:
        error = exc
    store.agree(error)
    src, dst, t, roll = arrays
    ends = comm.allgather((t[0], t[-1], first_line) if len(t) else None)
    check_sorted_across_ranks(path, ends, "time", "edges.csv must be sorted by time "
                              "(sort it, or use from_arrays, which accepts any order)")
    total = sum(counts)
    e0 = sum(counts[:rank])
    ef = nf = None
    epath = os.path.join(str(directory), "edge_features.pt")
    npath = os.path.join(str(directory), "node_features.pt")
    try:
        if os.path.isfile(epath):
            ef, _ = _load_rows(epath, e0, e0 + len(src),
                               (total, f"edges.csv has {total} edges"))
        if os.path.isfile(npath):
            _, rows = _load_rows(npath, 0, 0, None)
            lo, hi = partition(rows, size, rank)
            nf, _ = _load_rows(npath, lo, hi, None)
    except DDStoreValueError as exc:
        error = exc
    store.agree(error)
    return src, dst, t, roll, ef, nf
