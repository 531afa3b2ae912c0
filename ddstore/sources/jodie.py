"""JODIE's CSV layout (the Reddit, Wikipedia, MOOC and LastFM files of the JODIE paper,
which PyG's ``JODIEDataset`` downloads): one header line, then one interaction per line,
``user,item,timestamp,state_label,f1,f2,...`` (any number of features, the same on every
line; rows sorted by timestamp).

:func:`read_jodie_share` (collective over a store's ranks; :func:`read_share` inside a
collective call already begun) parses only this rank's byte range of the file (whole
lines, pandas' C parser) and numbers the nodes as PyG's ``JODIEDataset.process`` does:
users keep their ids, item ``i`` becomes node ``i + num_users`` with ``num_users =
max(user) + 1`` over the whole file (gathered by a step's round).  :func:`write_jodie`
writes the layout (tests, examples).
"""
import codecs
import collections
import os

import numpy as np

from .._times import not_int64
from ..errors import DDStoreMemoryError, DDStoreValueError
from .base import replaced_file, writer_columns
from .csv_lines import (TIME_ALLOWED, Column, check_sorted_across_ranks, finite_limit,
                        line_share_range, parse_lines, range_text, read_bytes,
                        refuse_cr_lines, shown_line)

__all__ = ["read_jodie_share", "write_jodie", "JodieShare"]

HEADER = "user_id,item_id,timestamp,state_label,comma_separated_list_of_features"

JodieShare = collections.namedtuple(
    "JodieShare", "src dst t label edge_feat num_users num_items whole_times first_edge "
                  "num_edges")
JodieShare.__doc__ = """This rank's share of a JODIE file: ``src`` (users), ``dst`` (items
+ ``num_users``), ``t`` (as in the file: int64 when every timestamp of the share is an
integer literal, else float64; ``TemporalGraph.from_jodie`` decides the graph's dtype over
the ranks), ``label`` (int64 ``state_label``),
``edge_feat`` (float32 ``[m, F]``, None when the rows have no feature), ``num_users`` /
``num_items`` (largest id + 1 over the whole file), ``whole_times`` (every timestamp of the
file is a whole number within int64), ``first_edge`` (global id of this share's first
edge: the file's row order) and ``num_edges`` (in the file)."""


def write_jodie(path, user, item, t, label, features=None):
    """Write a JODIE-format CSV (header, then ``user,item,timestamp,state_label,
    features...`` per line; floats written so that they read back exactly): ``user``,
    ``item`` integer ids >= 0, one value of each argument per edge (``features``: a
    row per edge).  All or
    nothing: an existing file at ``path`` is replaced only by a complete one
    (:func:`~ddstore.sources.base.replaced_file`)."""
    import pandas as pd
    cols = writer_columns("write_jodie", ids=("user", "item"), user=user, item=item, t=t,
                          label=label, features=features)
    feats = cols.pop("features")
    if feats is None:
        feats = np.zeros((len(cols["user"]), 0))
    elif feats.ndim != 2:
        raise DDStoreValueError(f"write_jodie: features must be 2-D [edges, features], "
                                f"got shape {feats.shape}")
    for j in range(feats.shape[1]):
        cols[f"f{j}"] = feats[:, j]
    body = pd.DataFrame(cols).to_csv(header=False, index=False)
    with replaced_file(path, "write_jodie") as temporary, open(temporary, "w") as f:
        f.write(HEADER + "\n" + body)


def _fields(line):
    return line.rstrip(b"\r\n").split(b",")


def _header(path):
    """(fields per row, header length in bytes, file size); raise naming the line."""
    with open(path, "rb") as f:  # (at most 1 MB a line: a file without line ends is
        first = f.readline(1 << 20)   # refused below, not read whole)
        second = f.readline(1 << 20)
    size = os.path.getsize(path)
    # (the header and the first row: the row gives the number of fields; a second line
    # cut at the limit is checked up to its cut)
    refuse_cr_lines(path, first + (second if second.endswith(b"\n") else
                                   second.rstrip(b"\r")))
    if not first.endswith(b"\n"):
        raise DDStoreValueError(f"{path}, line 1: {shown_line(first)} is not a header line "
                                f"followed by data rows (JODIE files start with '{HEADER}')")
    try:  # (after a BOM: a UTF-8 file's first row of numbers is still one)
        [float(x) for x in _fields(first[len(codecs.BOM_UTF8):] if first.startswith(
            codecs.BOM_UTF8) else first)]
        numeric = True
    except ValueError:
        numeric = False
    if numeric:
        raise DDStoreValueError(f"{path}, line 1: {shown_line(first)} is a data row, but a "
                                f"JODIE file starts with one header line ('{HEADER}'); "
                                f"add the header")
    if not second.strip():
        raise DDStoreValueError(f"{path}: no data rows after the header (line 2 is "
                                f"{shown_line(second)})")
    n = len(_fields(second))
    if n < 4:
        raise DDStoreValueError(f"{path}, line 2: malformed row: {n} fields, a JODIE row "
                                f"needs at least 4 (user,item,timestamp,state_label,"
                                f"features...)")
    return n, len(first), size


_ADVICE = ("a JODIE file must be sorted by timestamp (PyG's chronological split assumes "
           "it; sort it, or use from_arrays, which accepts any order)")
_F32_LIMIT = finite_limit(np.float32)  # (features are stored as float32)
_MAX_NODES = 2 ** 63 - 1  # users and items numbered as one int64 node id space


def _columns(n):
    """The :class:`~ddstore.sources.csv_lines.Column` of each of the ``n`` fields."""
    return [Column(0, "user", "int", "an integer user id >= 0", low=0),
            Column(1, "item", "int", "an integer item id >= 0", low=0),
            Column(2, "timestamp", "time", TIME_ALLOWED, finite=True),
            Column(3, "state_label", "int", "an integer label")] + \
        [Column(j, f"feature {j - 4}", "float", f"a finite number within float32's range "
                f"({range_text(np.float32)})", finite=True, limit=_F32_LIMIT)
         for j in range(4, n)]


def _shown(col, text):
    """A bad field as a message shows it: the number it reads as, or the text where the
    number would hide what is wrong ("2.0" for an id: a whole number, but no integer
    literal; "1_0" or non-ASCII digits, which Python's ``int`` and ``float`` read as
    numbers but the file's parser does not)."""
    if "_" in text or not text.isascii():
        return text
    try:
        return int(text)
    except ValueError:
        pass
    try:
        v = float(text)
    except ValueError:
        return text
    if col.kind == "int" and np.isfinite(v) and v == round(v):
        return text
    return v


def _parse(path, chunk, n, first_line):
    """(user, item, t, label, feat) of a chunk of whole lines; ``first_line`` is the
    1-based line number of its first line.  Raises DDStoreValueError naming the line
    (:func:`~ddstore.sources.csv_lines.parse_lines`)."""
    def bad_value(line, col, text):
        value = _shown(col, text)
        allowed = col.allowed
        if col.kind == "int" and isinstance(value, int) and value >= 2 ** 63:
            allowed += " below 2**63"
        return DDStoreValueError(f"{path}, line {line}: {col.name} (field "
                                 f"{col.field + 1}) is {value!r}; it must be {allowed}")
    cols = parse_lines(path, chunk, first_line, n, _columns(n), bad_value,
                       expected="but line 2 has {n} (every row: user,item,timestamp,"
                                "state_label and the same number of features)",
                       sort=(2, "timestamp", _ADVICE))
    user, item, t, label = cols[:4]
    feat = np.stack(cols[4:], axis=1).astype(np.float32) if n > 4 else \
        np.zeros((len(user), 0), np.float32)
    return user, item, t, label, feat


def check_num_nodes(path, ends):
    """``(num_users, num_items)`` from the shares' ``ends`` (every non-empty share's
    ``(.., largest user, largest item, .., line of that user, line of that item)``, as
    the round gathered them), or a :class:`DDStoreValueError` naming the file and the
    line of the largest user id when the nodes would not be int64: item ``i`` becomes
    node ``i + num_users``, so ``num_users + num_items`` (the largest user id + the
    largest item id + 2) must be at most ``2**63 - 1``."""
    user = max(ends, key=lambda e: e[3])  # the first rank holding the largest
    item = max(ends, key=lambda e: e[4])
    num_users, num_items = user[3] + 1, item[4] + 1
    if num_users + num_items > _MAX_NODES:
        raise DDStoreValueError(
            f"{path}, line {user[6]}: user id {user[3]} with item id {item[4]} (line "
            f"{item[7]}) makes {num_users + num_items} nodes, beyond int64: JODIE numbers "
            f"item i as node i + num_users (num_users = the largest user id + 1), so the "
            f"largest user id + the largest item id must be at most 2**63 - 3")
    return num_users, num_items


def read_jodie_share(store, path):
    """Collective: this rank's share of a JODIE CSV, as a :class:`JodieShare`.

    Each rank parses only its byte range of the file (whole lines); edge ids are the row
    order of the file.  Whatever fails on any rank (missing file, a file without a
    header, a malformed row, a value outside its range, timestamps that go back, naming
    the file and line; an ``OSError`` or ``MemoryError`` while reading) raises the same
    error on every rank.
    """
    with store.collective("read_jodie_share") as step:
        return read_share(store, step, path)


def read_share(store, step, path):
    """:func:`read_jodie_share` inside a collective call already begun: ``step`` is the
    caller's step, entered and its round not yet run; the reader's first round is that
    step's (:func:`~ddstore.sources.csv_lines.line_share_range`), its parse one more
    step (``store.collective(None)``)."""
    rank = store.comm.Get_rank()
    path = str(path)
    n, (a, b), counts = line_share_range(
        store, step, path, _header, "a JODIE CSV file: header line, then user,item,"
        "timestamp,state_label,features...")
    first_line, nlines = 2 + sum(counts[:rank]), counts[rank]
    with store.collective(None) as parse:
        chunk = read_bytes(path, a, b)
        try:
            user, item, t, label, feat = _parse(path, chunk, n, first_line)
        except MemoryError as exc:  # the message says what did not fit, and the remedy
            raise DDStoreMemoryError(
                f"{path}, lines {first_line}-{first_line + nlines - 1}: this rank's "
                f"{len(chunk)} bytes do not fit in memory once parsed; use more ranks: "
                f"MemoryError: {exc}") from exc
        dst = np.empty_like(item)  # items as nodes, filled once num_users is agreed
        extra = None
        if len(t):  # this share's ends, for the checks across ranks
            u, i = int(np.argmax(user)), int(np.argmax(item))
            extra = (t[0], t[-1], first_line, int(user[u]), int(item[i]),
                     t.dtype.kind == "i" or not bool(not_int64(t).any()),
                     first_line + u, first_line + i)
        ends = parse.agree(extra)  # the one decision: every rank's ends
        check_sorted_across_ranks(path, ends, "timestamp", _ADVICE)
        live = [e for e in ends if e is not None]
        num_users, num_items = check_num_nodes(path, live)
        np.add(item, num_users, out=dst)  # after the round: nothing that can fail
    return JodieShare(user, dst, t, label, feat if n > 4 else None,
                      num_users, num_items, all(e[5] for e in live),
                      sum(counts[:rank]), sum(counts))
