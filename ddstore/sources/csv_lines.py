"""The one CSV reader of the sources: chunks of whole lines of comma-separated numbers.

TGL's ``edges.csv`` (:mod:`~ddstore.sources.tgl`), JODIE's files
(:mod:`~ddstore.sources.jodie`) and headerless tables (:mod:`~ddstore.sources.rows`) are
all read through :func:`parse_lines`: each describes its fields with :class:`Column`
(what a field must hold) and says how to word a bad value; the reader checks every
line's field count, parses the typed columns, names the first bad line (its 1-based line
number in the file) and, where asked, checks that a column never goes back, within the
chunk and across pieces (:func:`check_sorted_across_ranks` across ranks).

The fast path parses with fixed dtypes (pandas' C parser) and checks the result with
whole-array operations; any doubt (a field count, a byte no integer literal has, a value
outside its range) re-reads the chunk as text, which locates the first bad line.

Byte ranges of a file with one header line, split over a store's ranks, are found by
:func:`line_share_range` (the round of the caller's collective step) and read whole by
:func:`read_bytes` or in pieces of whole lines by :func:`line_pieces`.  pandas is
imported where used.
"""
import io
import itertools
import re

import numpy as np

from ..errors import DDStoreValueError
from .._times import MAX_EXACT_TIME
from .base import check_same_files, file_share, regular_file

__all__ = ["Column", "parse_lines", "check_fields", "first_non_integer", "field_text",
           "int64_text_error", "read_csv_chunk", "not_text", "sorted_error",
           "check_sorted_across_ranks", "line_share_range", "line_pieces", "read_bytes",
           "count_lines", "non_integer_columns", "integer_column", "TIME_ALLOWED",
           "refuse_cr_lines", "shown_line"]

# bytes an integer field may hold besides its digits' separators (",", "\n"): a sign and
# blanks; anything else ("1e1", "2.0", "inf") makes it something other than an integer
# literal, even where a parser would read a whole number from it
_INT_TEXT = b"0123456789+- \t\r,\n"
_INT_BYTES = np.zeros(256, dtype=bool)
_INT_BYTES[list(_INT_TEXT)] = True
_INT64_MAX = 2 ** 63 - 1
_EXACT = MAX_EXACT_TIME  # float64 holds every integer within +-2**53 exactly


def finite_limit(dtype):
    """The largest float64 that a cast to the float ``dtype`` keeps finite (the
    :class:`Column` ``limit`` of a column stored as ``dtype``): a value a little above
    ``dtype``'s largest finite value rounds down to it (``3.4028235e+38``, float32's
    largest as its shortest text writes it, is just above it in float64); from halfway
    to the next power of two it rounds to inf."""
    top = np.finfo(dtype).max
    ulp = float(top) - float(np.nextafter(top, top.dtype.type(0)))  # (the top's step)
    return float(np.nextafter(float(top) + ulp / 2, 0.0))  # (exact in float64)


def range_text(dtype):
    """How a reader's message names float ``dtype``'s range."""
    return f"|x| <= {float(np.finfo(dtype).max):.10g} once rounded to {np.dtype(dtype)}"
# the texts a float column may hold for "no value" (NaN), as pandas reads them
_NA_TEXT = ("nan", "", "na", "null", "n/a")
# the same words in every case, for pandas' parser (whose own list holds more: "None",
# "#N/A", "-nan"...; the fast path and the careful one must take the same words)
_NA_WORDS = sorted({"".join(c) for w in _NA_TEXT
                    for c in itertools.product(*[(ch.lower(), ch.upper()) for ch in w])})


# what a time column allows, for the readers' messages (Column kind "time")
TIME_ALLOWED = ("a finite number; integer literals are kept exactly: within int64, and "
                "within [-2**53, 2**53] in a column that also holds non-integers (then "
                "float64)")


class Column:
    """What field ``field`` (0-based) of every line must hold, for :func:`parse_lines`.

    ``kind="int"``: an integer literal within int64 (not "2.0" or "1e1", whatever a
    parser makes of them), then ``low <= value <= high`` where given; parsed as int64.
    ``kind="float"``: a number, parsed as float64; NaN ("nan", "", "na", "null", "n/a", in
    any case; not pandas' other words, "None", "#N/A", "-nan"...) allowed unless
    ``finite`` (then inf is refused too); ``limit``: a bound on ``|value|``.
    ``kind="time"`` (a time column, :mod:`ddstore._times`): int64 when every field of
    the chunk is an integer literal (one beyond int64 is refused: it would not be kept
    exactly), else a ``"float"`` column (with ``finite`` and ``limit``) in which an
    integer literal float64 does not hold exactly (outside ``[-2**53, 2**53]``) is
    refused, as :func:`ddstore._times.as_times` refuses it.
    ``name`` and ``allowed`` are for the reader's messages."""

    __slots__ = ("field", "name", "kind", "low", "high", "finite", "limit", "allowed")

    def __init__(self, field, name, kind, allowed="", low=None, high=None, finite=False,
                 limit=None):
        if kind not in ("int", "float", "time"):
            raise ValueError(f"Column kind {kind!r}: allowed 'int', 'float' or 'time'")
        self.field, self.name, self.kind, self.allowed = int(field), name, kind, allowed
        self.low, self.high, self.finite, self.limit = low, high, bool(finite), limit


def check_fields(path, chunk, n, first_line, expected="expected {n}"):
    """Every line of ``chunk`` has ``n`` comma-separated fields, or raise naming the
    first line that has not (pandas would take a row with an extra field as one with an
    index column, and read the other columns shifted).  ``expected`` ends the message
    (``{n}`` is filled in)."""
    fields, ends = _field_counts(chunk, n)
    bad = np.flatnonzero(fields != n)
    if bad.size:
        refuse_cr_lines(path, chunk, first_line)  # rows glued by CR line ends, if so
        i = int(bad[0])
        start = int(ends[i - 1]) + 1 if i else 0
        blank = " (a blank line; blank lines at the end of a file are no rows: a range " \
            "past them is past the file's rows)" if not chunk[start:int(ends[i])].strip() \
            else ""
        raise DDStoreValueError(f"{path}, line {first_line + i}: malformed row: "
                                f"{int(fields[i])} fields, {expected.format(n=n)}{blank}")


def _field_counts(chunk, n):
    """``(fields, ends)``: the comma-separated fields of each line of ``chunk`` and where
    each line ends (one pass of numpy over the bytes).  When ``n`` (the fields expected)
    is 1, a line of only blanks, tabs or a CR counts 0 fields: it has the one field too,
    which pandas reads as NaN."""
    buf = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(buf == ord("\n"))
    if not chunk.endswith(b"\n"):
        ends = np.append(ends, len(chunk))
    commas = np.flatnonzero(buf == ord(","))
    fields = np.diff(np.searchsorted(commas, ends), prepend=0) + 1
    if n == 1:
        text = ~np.isin(buf, (32, 9, 13, 10))  # (the newline itself is no text either)
        seen = np.concatenate(([0], np.cumsum(text)))
        starts = np.concatenate(([0], ends[:-1] + 1)) if ends.size else ends
        fields[seen[ends] == seen[starts]] = 0
    return fields, ends


def _fields_alike(chunk, n):
    """Whether every line of ``chunk`` has ``n`` comma-separated fields
    (:func:`check_fields` names the first line that has not)."""
    return bool((_field_counts(chunk, n)[0] == n).all())


def first_non_integer(chunk, n, columns):
    """``(line index, column)`` of the first field of ``chunk`` (whole lines of ``n``
    comma-separated fields each, as :func:`check_fields` checked) among ``columns``
    that holds a byte no integer literal has (a ".", an "e", letters...), or None.  One
    vectorised pass over the bytes; only the odd bytes are located."""
    hits = _non_integer_fields(chunk, n)
    if hits is None:
        return None
    k = hits[np.isin(hits % n, list(columns))]
    return (int(k[0] // n), int(k[0] % n)) if k.size else None


def non_integer_columns(chunk, n):
    """The set of columns of ``chunk`` (as :func:`first_non_integer`) with some field
    holding a byte no integer literal has: one pass for every column."""
    hits = _non_integer_fields(chunk, n)
    if hits is None:
        return set()
    return {int(c) for c in np.flatnonzero(np.bincount(hits % n, minlength=n))}


def _non_integer_fields(chunk, n):
    """The flat field numbers (line * n + column), in order, of the odd bytes of
    ``chunk`` (one per odd byte), or None when it has none."""
    if not chunk.translate(None, _INT_TEXT):  # digits and separators only (C speed)
        return None
    buf = np.frombuffer(chunk, dtype=np.uint8)
    odd = np.flatnonzero(~_INT_BYTES[buf])
    # every line has n fields, so the separators (",", "\n") before a byte say its
    # line and column: the k-th separator ends field k % n of line k // n
    return np.searchsorted(np.flatnonzero((buf == ord(",")) | (buf == ord("\n"))), odd)


def integer_column(path, start, stop, n, field, piece_bytes=16 << 20):
    """Local: whether field ``field`` of every line of bytes ``[start, stop)`` of the
    file ``path`` (whole lines of ``n`` comma-separated fields) holds only the bytes of an
    integer literal (digits, a sign, blanks): the kind of a time column before it is
    parsed (:class:`Column` ``kind="time"``; "i" for :func:`ddstore._times.time_dtype`).
    The bytes are read in blocks and kept only when some byte is not one of an integer
    literal's (a file of integers: one read and one C-speed pass); then that field is
    looked at in pieces of whole lines (1 MB), stopping at the first that is not.  A line that
    has not ``n`` fields may be misread here, but the parse refuses it.  An ``OSError``
    is worded as a :class:`DDStoreValueError` naming the file."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            left = stop - start
            while left > 0:
                buf = f.read(min(piece_bytes, left))
                left -= len(buf)
                if not buf or buf.translate(None, _INT_TEXT):  # another byte: where?
                    break
            else:
                return True
        for piece, _ in line_pieces(path, start, stop, 1 << 20, 1):  # small: the first
            if first_non_integer(piece, n, [field]) is not None:       # one usually says
                return False
    except OSError as exc:
        raise DDStoreValueError(f"{path}: {exc}") from exc
    return True


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


def read_csv_chunk(path, chunk, n, first_line, usecols=None, **kwargs):
    """A chunk of whole CSV lines with ``n`` fields as a pandas DataFrame (columns
    ``0..n-1``, C parser; ``kwargs`` go to ``pandas.read_csv``); a row pandas cannot
    parse is a :class:`DDStoreValueError` naming the file and line (``first_line``: the
    chunk's first line number)."""
    import pandas as pd
    try:
        return pd.read_csv(io.BytesIO(chunk), header=None, names=list(range(n)),
                           usecols=usecols, skip_blank_lines=False, engine="c", **kwargs)
    except Exception as exc:
        if isinstance(exc, UnicodeDecodeError):
            not_text(path, chunk, first_line)
        refuse_cr_lines(path, chunk, first_line)
        msg = str(exc)
        m = re.search(r"line (\d+)", msg)
        where = f"line {first_line + int(m.group(1)) - 1}" if m else \
            f"lines {first_line}+"
        quoted = "; fields are split at every comma, quotes are not read" \
            if b'"' in chunk else ""
        raise DDStoreValueError(f"{path}, {where}: malformed row ({msg.strip()}); "
                                f"expected {n} fields{quoted}") from None


def not_text(path, chunk, first_line):
    """Raise for the first line of ``chunk`` (``first_line``: its line number) that is
    not UTF-8 text, naming the line and showing its bytes; return if every line is."""
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + chunk.count(b"\n", 0, exc.start)
        start = chunk.rfind(b"\n", 0, exc.start) + 1
        stop = chunk.find(b"\n", exc.start)
        text = chunk[start:stop if stop >= 0 else len(chunk)].rstrip(b"\r")
        raise DDStoreValueError(f"{path}, line {line}: bytes {text[:200]!r} are not UTF-8 "
                                f"text (byte {exc.start - start + 1} of the line is "
                                f"{chunk[exc.start:exc.start + 1].hex()}); a row holds "
                                f"numbers written in ASCII") from None


def shown_line(raw, limit=200):
    """A line of a file (bytes) as messages show it: its first ``limit`` characters as
    text in quotes, its line end dropped, bytes that are not UTF-8 as ``\\xNN``
    (``'user,item'``, not the bytes literal ``b'user,item\\n'``)."""
    text = raw.rstrip(b"\r\n").decode("utf-8", "backslashreplace")
    return repr(text[:limit]) + (" ..." if len(text) > limit else "")


_CR_ALONE = re.compile(rb"\r(?!\n)")


def refuse_cr_lines(path, text, first_line=1):
    """Raise naming ``path`` and the line when ``text`` (whole lines of the file, the
    first of them line ``first_line``) holds a carriage return that is not followed by
    LF (one at the very end of ``text`` included): lines that end with CR alone (old Mac
    files) read as one line; they must end with LF (or CR LF).  The readers check the
    first line (or two) before parsing, and a chunk whose rows they cannot parse before
    calling them malformed (a file whose later rows alone end with CR)."""
    m = _CR_ALONE.search(text)
    if m is not None:
        line = first_line + text.count(b"\n", 0, m.start())
        raise DDStoreValueError(f"{path}, line {line}: lines end with a carriage return "
                                f"alone (CR, old Mac text); rows must end with LF or "
                                f"CR LF (convert the file, e.g. tr '\\r' '\\n')")


def sorted_error(path, line, what, value, previous, advice):
    """The error of a row whose ``what`` (e.g. "time") goes back: line ``line``."""
    return DDStoreValueError(f"{path}, line {line}: {what} {value} is earlier than the "
                             f"previous row's {previous}; {advice}")


def check_sorted_across_ranks(path, ends, what, advice):
    """Raise if the shares' values go back across ranks: ``ends`` is every rank's
    ``(first value, last value, first line, ...)`` or None for an empty share, as a
    step's round gathered them (each share is checked in order by
    :func:`parse_lines`).  Call it after the round, inside the step: the same decision
    on every rank, agreed by the step."""
    prev = None
    for e in ends:
        if e is None:
            continue
        if prev is not None and e[0] < prev:
            raise sorted_error(path, e[2], what, e[0], prev, advice)
        prev = e[1]


def _empty(columns):
    return [np.zeros(0, dtype=np.float64 if c.kind == "float" else np.int64)
            for c in columns]


def parse_lines(path, chunk, first_line, n, columns, bad_value, expected="expected {n}",
                sort=None, after=None):
    """The arrays of ``columns`` (:class:`Column`; int64 or float64, in that order) of
    ``chunk``: whole lines of ``n`` comma-separated fields (a last line may lack its
    newline); ``first_line`` is the 1-based line number of its first line.  Fields not
    named by a column are only counted.

    Raises :class:`DDStoreValueError` naming the file and the first bad line: a line
    without ``n`` fields (``expected`` ends that message, see :func:`check_fields`), a
    value its column refuses (the message is ``bad_value(line, column, text)``, ``text``
    the field as written) or, with ``sort=(k, what, advice)``, a value of
    ``columns[k]`` smaller than the line's before it (``after``: the last value of the
    previous piece, or None)."""
    if not chunk:
        return _empty(columns)
    out = _parse_fast(chunk, n, columns)
    if out is None:
        out = _parse_careful(path, chunk, first_line, n, columns, bad_value, expected)
    if sort is not None:
        k, what, advice = sort
        t = out[k]
        if after is not None and t[0] < after:
            raise sorted_error(path, first_line, what, t[0], after, advice)
        down = np.flatnonzero(t[1:] < t[:-1])
        if down.size:
            i = int(down[0]) + 1
            raise sorted_error(path, first_line + i, what, t[i], t[i - 1], advice)
    return out


def _in_range(col, vals):
    """True when every value of the parsed column ``vals`` is one ``col`` allows."""
    if not vals.size:
        return True
    if vals.dtype.kind == "i":  # an "int" column, or a "time" one of integer literals
        return (col.low is None or int(vals.min()) >= col.low) and \
            (col.high is None or int(vals.max()) <= col.high)
    if col.finite and not np.isfinite(vals).all():
        return False
    if col.kind == "time" and (np.abs(vals) >= _EXACT).any():  # an integer literal?
        return False
    if col.limit is not None:
        with np.errstate(invalid="ignore"):
            return not bool((np.abs(vals) > col.limit).any())
    return True


def _parse_fast(chunk, n, columns):
    """The columns' arrays when every line of ``chunk`` is well formed, else None."""
    import pandas as pd
    lines = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
    if not _fields_alike(chunk, n):  # (line by line: with equal totals, a long line and a
        # short one were read as two good rows, its first fields and NaN padding)
        return None
    # the fields of integer and time columns holding bytes no integer literal has (a
    # pass over the bytes that a file of float columns only does not need)
    odd = non_integer_columns(chunk, n) if any(c.kind != "float" for c in columns) \
        else set()
    if any(c.kind == "int" and c.field in odd for c in columns):
        return None  # "1e1", "2.0": the careful path names it
    # a time column of integer literals only is int64 (one beyond int64: careful path)
    int_times = {c.field for c in columns if c.kind == "time" and c.field not in odd}
    use = sorted({c.field for c in columns})
    dtypes = {c.field: np.int64 if c.kind == "int" or c.field in int_times else np.float64
              for c in columns}
    one = len(set(dtypes.values())) == 1  # one dtype for all: given as one (a dict costs
    # pandas ~60 us a column, a Series per column ~80 more: most of a block of wide lines)
    try:
        df = pd.read_csv(io.BytesIO(chunk), header=None, names=list(range(n)),
                         usecols=use, skip_blank_lines=False, engine="c",
                         dtype=next(iter(dtypes.values())) if one else dtypes,
                         keep_default_na=False, na_values=_NA_WORDS)
    except (ValueError, TypeError, OverflowError, pd.errors.ParserError):
        return None
    if df.shape[0] != lines:
        return None
    if one:  # one array, a view of it per column
        whole = df.to_numpy()
        at = {f: j for j, f in enumerate(df.columns)}
        out = [whole[:, at[c.field]] for c in columns]
    else:
        out = [df[c.field].to_numpy() for c in columns]
    if not all(_in_range(c, v) for c, v in zip(columns, out)):
        return None
    return out


def _bad_mask(col, text):
    """(bad lines of the text column ``text``, its values): float64 for a float column,
    int64 (None when some line is bad) for an integer column; a time column is an
    integer one when every field is an integer literal, else a float one."""
    import pandas as pd
    vals = np.array(pd.to_numeric(text, errors="coerce"), dtype=np.float64)  # (a copy)
    floats = col.kind == "float" or (
        col.kind == "time" and not text.str.fullmatch(r"[+-]?[0-9]+").all())
    if floats:
        # (a column of integer literals comes back as int64: "-0" is -0.0, as a float)
        vals[(vals == 0) & text.str.lstrip().str.startswith("-").to_numpy()] = -0.0
        na = text.str.lower().isin(_NA_TEXT).to_numpy()
        bad = np.isnan(vals) & ~na
        if col.finite:
            bad |= ~np.isfinite(vals)
        if col.kind == "time":  # integer literals float64 would round
            ints = text.str.fullmatch(r"[+-]?[0-9]+").to_numpy()
            for i in np.flatnonzero(ints & (np.abs(np.nan_to_num(vals)) >= _EXACT)):
                bad[i] |= abs(int(text.iloc[i])) > _EXACT
        if col.limit is not None:
            with np.errstate(invalid="ignore"):
                bad |= np.abs(vals) > col.limit
        return bad, vals
    bad = ~np.isfinite(vals) | (vals != np.round(vals))
    bad |= text.str.contains(r"[^0-9+\-\s]", regex=True).to_numpy()
    # beyond int64 (the float64 test is coarse: the text decides)
    for i in np.flatnonzero(np.abs(np.nan_to_num(vals)) >= 2.0 ** 62):
        bad[i] |= int64_text_error(text.iloc[i]) is not None
    with np.errstate(invalid="ignore"):
        if col.low is not None:
            bad |= vals < col.low
        if col.high is not None:
            bad |= vals > col.high
    if bad.any():
        return bad, None
    return bad, text.to_numpy(dtype=str).astype(np.int64)  # exact, from the text


def _parse_careful(path, chunk, first_line, n, columns, bad_value, expected):
    """Re-read ``chunk`` as text: raise for its first bad line, or return its arrays."""
    check_fields(path, chunk, n, first_line, expected)
    lines = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
    use = sorted({c.field for c in columns})
    df = read_csv_chunk(path, chunk, n, first_line, usecols=use, dtype=str,
                        keep_default_na=False)
    if len(df) != lines:
        raise DDStoreValueError(f"{path}, lines {first_line}+: parsed {len(df)} rows, "
                                f"expected {lines} (blank lines?)")
    first, out = None, []
    for col in columns:
        text = df[col.field].str.strip()
        bad, vals = _bad_mask(col, text)
        if bad.any():
            i = int(np.argmax(bad))
            if first is None or (i, col.field) < (first[0], first[1].field):
                first = (i, col, text.iloc[i])
        out.append(vals)
    if first is not None:
        i, col, text = first
        raise bad_value(first_line + i, col, text)
    return out


def count_lines(f, a, b, block=16 << 20):
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


def _data_end(f, lo, size, block=1 << 16):
    """The end of the file's rows: ``size`` less the blank lines (only blanks, CR or
    LF) at its end, which pandas (and so PyG's readers) skip; ``lo``: the body's start."""
    end = size
    while end > lo:
        start = max(lo, end - block)
        f.seek(start)
        buf = f.read(end - start).rstrip(b" \t\r\n")
        if buf:
            last = start + len(buf)  # just past the last byte that is not blank
            f.seek(last)
            tail = f.read(size - last)
            k = tail.find(b"\n")
            return size if k < 0 else last + k + 1
        end = start
    return lo


def line_share_range(store, step, path, header, missing):
    """Collective: the first round of a reader that parses only its share of a text file
    with one header line, without reading it.  Rank ``r`` of ``size`` takes the whole
    lines that start in the ``r``-th of ``size`` equal byte ranges of the body.
    ``step``: the caller's collective step, entered and its round not yet run (the named
    step of a public call, or ``store.collective(None)``); what this function does
    before :meth:`~ddstore._collective.Step.agree` is the rest of its local part, so any
    failure on any rank (no file, a bad header, an ``OSError`` while counting) raises
    on every rank.  ``header(path)`` returns ``(info, header length in bytes, file
    size)`` or raises :class:`DDStoreValueError`; ``missing`` says what the file should
    be when it does not exist.  Blank lines at the end of the file are not rows (pandas
    skips them too); a blank line between rows is refused by the parse.  Returns ``(info,
    (start, stop), counts)``: this rank's byte range and every rank's number of lines (rank
    ``r``'s first line is ``2 + sum(counts[:r])``), counted in blocks."""
    rank, size = store.comm.Get_rank(), store.comm.Get_size()
    regular_file(path, "", f"not found ({missing})")
    try:
        info, hlen, fsize = header(path)
        with open(path, "rb") as f:
            fsize = _data_end(f, hlen, fsize)  # blank lines at the end are no rows
            body = fsize - hlen
            a = _line_start(f, hlen + body * rank // size, hlen, fsize)
            b = _line_start(f, hlen + body * (rank + 1) // size, hlen, fsize)
            nlines = count_lines(f, a, b)
            mine = file_share(path, f)
    except OSError as exc:  # worded with the file's name
        raise DDStoreValueError(f"{path}: {exc}") from exc
    # each rank parses its own byte range of the file it opened: a different file on
    # some rank (another path, a stale copy on one node) would mix two files' rows
    shares = step.agree((nlines, mine))
    check_same_files([(s[1],) for s in shares], path)
    return info, (a, b), [s[0] for s in shares]


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


def read_bytes(path, start, stop):
    """Local: bytes ``[start, stop)`` of the file ``path`` (an ``OSError`` is worded as a
    :class:`DDStoreValueError` naming the file)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(stop - start)
    except OSError as exc:
        raise DDStoreValueError(f"{path}: {exc}") from exc
