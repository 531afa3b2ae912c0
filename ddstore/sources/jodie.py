"""JODIE's CSV layout (the Reddit, Wikipedia, MOOC and LastFM files of the JODIE paper,
which PyG's ``JODIEDataset`` downloads): one header line, then one interaction per line,
``user,item,timestamp,state_label,f1,f2,...`` (any number of features, the same on every
line; rows sorted by timestamp).

:func:`read_jodie_share` (collective over a store's ranks) parses only this rank's byte
range of the file (whole lines, pandas' C parser) and numbers the nodes as PyG's
``JODIEDataset.process`` does: users keep their ids, item ``i`` becomes node
``i + num_users`` with ``num_users = max(user) + 1`` over the whole file (agreed over the
ranks).  :func:`write_jodie` writes the layout (tests, examples).
"""
import collections
import os

import numpy as np

from ..errors import DDStoreValueError
from .tgl import (_check_fields, check_sorted_across_ranks, field_text, first_non_integer,
                  read_csv_chunk, read_line_share)

__all__ = ["read_jodie_share", "write_jodie", "JodieShare"]

HEADER = "user_id,item_id,timestamp,state_label,comma_separated_list_of_features"
_MAX_EXACT = 2 ** 53  # integers above this are not exact in the float64 a parser may give

JodieShare = collections.namedtuple(
    "JodieShare", "src dst t label edge_feat num_users num_items whole_times first_edge "
                  "num_edges")
JodieShare.__doc__ = """This rank's share of a JODIE file: ``src`` (users), ``dst`` (items
+ ``num_users``), ``t`` (float64, as in the file), ``label`` (int64 ``state_label``),
``edge_feat`` (float32 ``[m, F]``, None when the rows have no feature), ``num_users`` /
``num_items`` (largest id + 1 over the whole file), ``whole_times`` (every timestamp of the
file is a whole number), ``first_edge`` (global id of this share's first edge: the file's
row order) and ``num_edges`` (in the file)."""


def write_jodie(path, user, item, t, label, features=None):
    """Write a JODIE-format CSV (header, then ``user,item,timestamp,state_label,
    features...`` per line; floats written so that they read back exactly)."""
    import pandas as pd
    cols = {"user": np.asarray(user), "item": np.asarray(item), "t": np.asarray(t),
            "label": np.asarray(label)}
    feats = np.zeros((len(cols["user"]), 0)) if features is None else np.asarray(features)
    for j in range(feats.shape[1]):
        cols[f"f{j}"] = feats[:, j]
    body = pd.DataFrame(cols).to_csv(header=False, index=False)
    with open(path, "w") as f:
        f.write(HEADER + "\n" + body)


def _fields(line):
    return line.rstrip(b"\r\n").split(b",")


def _header(path):
    """(fields per row, header length in bytes, file size); raise naming the line."""
    with open(path, "rb") as f:
        first = f.readline()
        second = f.readline()
    size = os.path.getsize(path)
    if not first.endswith(b"\n"):
        raise DDStoreValueError(f"{path}, line 1: {first[:200]!r} is not a header line "
                                f"followed by data rows (JODIE files start with '{HEADER}')")
    try:
        [float(x) for x in _fields(first)]
        numeric = True
    except ValueError:
        numeric = False
    if numeric:
        raise DDStoreValueError(f"{path}, line 1: {first[:200]!r} is a data row, but a "
                                f"JODIE file starts with one header line ('{HEADER}'); "
                                f"add the header")
    if not second.strip():
        raise DDStoreValueError(f"{path}: no data rows after the header (line 2 is "
                                f"{second[:200]!r})")
    n = len(_fields(second))
    if n < 4:
        raise DDStoreValueError(f"{path}, line 2: malformed row: {n} fields, a JODIE row "
                                f"needs at least 4 (user,item,timestamp,state_label,"
                                f"features...)")
    return n, len(first), size


_ALLOWED = {0: "an integer user id >= 0", 1: "an integer item id >= 0",
            2: "a finite number", 3: "an integer label"}  # integers: integer literals
_NAMES = {0: "user", 1: "item", 2: "timestamp", 3: "state_label"}


def _bad(path, first_line, i, j, value, allowed):
    what = _NAMES.get(j, f"feature {j - 4}")
    if isinstance(value, np.generic):
        value = value.item()
    return DDStoreValueError(f"{path}, line {first_line + i}: {what} (field {j + 1}) is "
                             f"{value!r}; it must be {allowed}")


def _parse(path, chunk, n, first_line):
    """(user, item, t, label, feat) of a chunk of whole lines; ``first_line`` is the
    1-based line number of its first line.  Raises DDStoreValueError naming the line."""
    import pandas as pd
    if not chunk:
        e = np.zeros(0, dtype=np.int64)
        return e, e.copy(), np.zeros(0), e.copy(), np.zeros((0, n - 4), np.float32)
    _check_fields(path, chunk, n, first_line,
                  expected="but line 2 has {n} (every row: user,item,timestamp,state_label "
                           "and the same number of features)")
    df = read_csv_chunk(path, chunk, n, first_line)
    # ids and labels are integer literals ("1e1" or "2.0" are not, whatever a parser
    # makes of them)
    odd = first_non_integer(chunk, n, (0, 1, 3))
    cols = []
    for j in range(n):  # one pass per column, vectorised over the lines
        col = df[j]
        kind = col.dtype.kind
        if kind in "iu":
            vals = col.to_numpy()
            if kind == "u" and vals.size and int(vals.max()) > np.iinfo(np.int64).max:
                i = int(np.argmax(vals > np.iinfo(np.int64).max))
                raise _bad(path, first_line, i, j, col.iloc[i],
                           _ALLOWED.get(j, "a number") + " below 2**63")
            vals = vals.astype(np.int64) if j < 2 or j == 3 else vals.astype(np.float64)
            bad = (vals < 0) if j < 2 else np.zeros(len(vals), bool)
        else:
            vals = col.to_numpy(dtype=np.float64) if kind == "f" else \
                pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
            bad = ~np.isfinite(vals)
            if j < 2 or j == 3:
                bad |= (vals != np.round(vals)) | (np.abs(vals) >= _MAX_EXACT)
            if j < 2:
                bad |= vals < 0
            if j >= 4:
                big = np.abs(vals) > np.finfo(np.float32).max
                bad |= big
        literal = odd is not None and odd[1] == j and not bad[odd[0]]
        if literal:  # a whole number, but not written as an integer: show the text
            bad[odd[0]] = True
        if bad.any():
            i = int(np.argmax(bad))
            allowed = _ALLOWED.get(j, f"a finite number within float32's range "
                                      f"(|x| <= {np.finfo(np.float32).max:.6g})")
            value = field_text(chunk, i, j) if literal and odd[0] == i else col.iloc[i]
            raise _bad(path, first_line, i, j, value, allowed)
        cols.append(vals)
    user, item, t, label = (cols[0].astype(np.int64), cols[1].astype(np.int64),
                            cols[2].astype(np.float64), cols[3].astype(np.int64))
    feat = np.stack(cols[4:], axis=1).astype(np.float32) if n > 4 else \
        np.zeros((len(user), 0), np.float32)
    down = np.flatnonzero(np.diff(t) < 0)
    if down.size:
        i = int(down[0]) + 1
        raise DDStoreValueError(f"{path}, line {first_line + i}: timestamp {t[i]} is "
                                f"earlier than the previous row's {t[i - 1]}; a JODIE file "
                                f"must be sorted by timestamp (PyG's chronological split "
                                f"assumes it; sort it, or use from_arrays, which accepts "
                                f"any order)")
    return user, item, t, label, feat


def read_jodie_share(store, path, call=("read_jodie_share", None)):
    """Collective: this rank's share of a JODIE CSV, as a :class:`JodieShare`.

    Each rank parses only its byte range of the file (whole lines); edge ids are the row
    order of the file.  Errors (missing file, a file without a header, a malformed row, a
    value outside its range, timestamps that go back, naming the file and line) are
    raised on every rank.  ``call`` names the collective call this is the first step of
    (see :meth:`DDStore.agree`).
    """
    comm = store.comm
    rank = comm.Get_rank()
    path = str(path)
    n, chunk, counts = read_line_share(
        store, path, _header, "a JODIE CSV file: header line, then user,item,timestamp,"
        "state_label,features...", call)
    first_line, nlines = 2 + sum(counts[:rank]), counts[rank]
    error = None
    parsed = None
    try:
        parsed = _parse(path, chunk, n, first_line)
    except DDStoreValueError as exc:
        error = exc
    except MemoryError:
        error = DDStoreValueError(f"{path}, lines {first_line}-{first_line + nlines - 1}: "
                                  f"this rank's {len(chunk)} bytes do not fit in memory "
                                  f"once parsed; use more ranks")
    store.agree(error)
    user, item, t, label, feat = parsed
    ends = comm.allgather((t[0], t[-1], first_line, int(user.max()), int(item.max()),
                           bool(np.all(t == np.floor(t)))) if len(t) else None)
    check_sorted_across_ranks(path, ends, "timestamp", "a JODIE file must be sorted "
                              "by timestamp (PyG's chronological split assumes it; sort "
                              "it, or use from_arrays, which accepts any order)")
    live = [e for e in ends if e is not None]
    num_users = max(e[3] for e in live) + 1
    num_items = max(e[4] for e in live) + 1
    return JodieShare(user, item + num_users, t, label, feat if n > 4 else None,
                      num_users, num_items, all(e[5] for e in live),
                      sum(counts[:rank]), sum(counts))
