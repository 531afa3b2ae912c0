"""The node-data sources of ddstore.sources and the range-wise readers below them:
rows (.csv, .csv.gz, .npy), ogb (OGB's raw node-property layout), synthetic_nodes and
npy_nodes, in-process on small files written here: every range equals the same rows of
the whole file read by pandas / numpy, byte for byte; only the range's rows are parsed;
bad input is a clear error."""
import gzip
import os
import re

import numpy as np
import pandas as pd
import pytest

from ddstore.errors import DDStoreIndexError, DDStoreValueError
from ddstore.sources import rows as R
from ddstore.sources.ogb import OGBNodeData, write_ogb_node


def write_csv(path, arr, fmt=None, last_newline=True):
    text = pd.DataFrame(arr).to_csv(header=False, index=False, float_format=fmt)
    if not last_newline:
        text = text.rstrip("\n")
    data = text.encode()
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)
    return str(path)


RANGES = [(0, 0), (0, 1), (0, 257), (3, 4), (5, 200), (100, 101), (256, 257), (17, 17),
          (256, 256), (0, 100)]


@pytest.mark.parametrize("suffix,last_newline", [(".csv", False), (".csv.gz", True)])
def test_csv_ranges_equal_pandas_whole_file(tmp_path, suffix, last_newline):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((257, 7)) * 10.0 ** rng.integers(-8, 8, (257, 7))
    path = write_csv(tmp_path / f"x{suffix}", x, last_newline=last_newline)
    whole = pd.read_csv(path, header=None).to_numpy()
    assert R.count_rows(path) == 257
    # many blocks, a few, one
    for block, dtype in ((64, np.float64), (1000, np.float32), (1 << 20, np.float64)):
        for lo, hi in RANGES:
            got = R.read_rows(path, lo, hi, dtype=dtype, block_bytes=block)
            want = whole[lo:hi].astype(dtype)
            assert got.dtype == dtype and got.shape == (hi - lo, 7), (lo, hi)
            assert got.tobytes() == want.tobytes(), (block, lo, hi, dtype)


def test_csv_lines_longer_than_many_blocks(tmp_path):
    """Lines of many blocks (a node-feat file of 6,000 features per row: about 75 KB a
    line, the first read in blocks of 64 KiB for its field count; blocks of 1,000
    bytes) are carried whole from block to block: every value read equals numpy's (such
    a line was copied again with every block: a 64 MB line took 40 s)."""
    x = np.random.default_rng(2).standard_normal((3, 6000)).astype(np.float32)
    path = write_csv(tmp_path / "wide.csv.gz", x)
    assert R.first_line_fields(path) == 6000
    for block in (1 << 16, 1000):
        got = R.read_csv_rows(path, 0, 3, dtype=np.float32, block_bytes=block)
        assert got.tobytes() == x.tobytes(), block


def test_csv_integers_exact(tmp_path):
    rng = np.random.default_rng(1)
    e = rng.integers(0, 2 ** 62, (300, 2))
    path = write_csv(tmp_path / "edge.csv.gz", e)
    whole = pd.read_csv(path, header=None).to_numpy()
    assert whole.dtype == np.int64
    for lo, hi in [(0, 300), (7, 123), (299, 300)]:
        got = R.read_csv_rows(path, lo, hi, dtype=np.int64, block_bytes=100)
        assert got.tobytes() == whole[lo:hi].tobytes()
    small = write_csv(tmp_path / "small.csv", np.arange(20).reshape(10, 2))
    assert R.read_csv_rows(small, 2, 5, dtype=np.int32).tolist() == \
        [[4, 5], [6, 7], [8, 9]]


def test_csv_parses_only_its_rows(tmp_path, monkeypatch):
    path = write_csv(tmp_path / "x.csv.gz", np.arange(3000.0).reshape(1000, 3))
    parsed = []
    real = R._parse_block

    def spy(path_, chunk, n, first_line, dtype, out, *rest):
        parsed.append((first_line, chunk.count(b"\n")))
        return real(path_, chunk, n, first_line, dtype, out, *rest)

    monkeypatch.setattr(R, "_parse_block", spy)
    got = R.read_csv_rows(path, 400, 450, block_bytes=256)
    assert got[0].tolist() == [1200.0, 1201.0, 1202.0] and len(got) == 50
    assert sum(n for _, n in parsed) == 50 and parsed[0][0] == 401  # 1-based lines


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_csv_reader_streams_consecutive_pieces(tmp_path, monkeypatch, suffix):
    """CsvRowReader: consecutive pieces (of any sizes, across text blocks) equal the
    whole range byte for byte and open the file once; a piece before the stream's
    position reopens it; a range past the end names the file's rows."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((301, 3))
    path = write_csv(tmp_path / f"x{suffix}", x)
    whole = pd.read_csv(path, header=None).to_numpy()
    opened = []
    real = R._blocks

    def counting(path_, block_bytes):
        opened.append(path_)
        return real(path_, block_bytes)

    monkeypatch.setattr(R, "_blocks", counting)
    for block in (64, 1000, 1 << 20):
        for lo, hi, step in ((0, 301, 1), (5, 290, 7), (40, 301, 100), (0, 301, 301)):
            del opened[:]
            with R.CsvRowReader(path, block_bytes=block) as reader:
                cuts = list(range(lo, hi, step)) + [hi]
                got = [reader.read(a, b, dtype=np.float32) for a, b in zip(cuts, cuts[1:])]
                got = np.concatenate(got) if got else np.zeros((0, 3), np.float32)
                assert got.tobytes() == whole[lo:hi].astype(np.float32).tobytes(), \
                    (block, lo, hi, step)
                assert len(opened) == 1, (block, lo, hi, step, len(opened))
                assert reader.read(hi, hi, ncols=3).shape == (0, 3) and len(opened) == 1
                # back to an earlier row: read again from the file start (or from the
                # text block kept, where it still holds that row)
                assert reader.read(2, 4).tobytes() == whole[2:4].tobytes()
                assert len(opened) in (1, 2)
                with pytest.raises(DDStoreIndexError, match=r"\[0, 301\] \(the file has "
                                                            r"301 rows\)"):
                    reader.read(300, 305)
    # OGBNodeData: its range read in pieces is its range read whole, each file opened once
    rng = np.random.default_rng(6)
    ei = rng.integers(0, 50, (2, 400))
    feats = rng.standard_normal((50, 4)).astype(np.float32)
    root = str(tmp_path / "ogb")
    write_ogb_node(root, ei, feats, rng.integers(0, 5, 50).astype(np.float64))
    data = OGBNodeData(root)
    want_e, want_x, want_y = data.edges(30, 390), data.features(3, 47), data.labels(3, 47)
    data.close()
    del opened[:]
    got_e = [data.edges(a, min(a + 11, 390)) for a in range(30, 390, 11)]
    got_x = [data.features(a, min(a + 4, 47)) for a in range(3, 47, 4)]
    got_y = [data.labels(a, min(a + 5, 47)) for a in range(3, 47, 5)]
    for i in (0, 1):
        assert np.concatenate([g[i] for g in got_e]).tobytes() == want_e[i].tobytes()
    assert np.concatenate(got_x).tobytes() == want_x.tobytes()
    assert np.concatenate(got_y).tobytes() == want_y.tobytes()
    assert sorted(os.path.basename(p) for p in opened) == \
        ["edge.csv.gz", "node-feat.csv.gz", "node-label.csv.gz"]
    data.close()
    assert data._readers == {}


def test_csv_errors(tmp_path, monkeypatch):
    # a long line and a short one (equal comma totals): read as rows [3, 4] and [6, nan]
    for name in ("shift.csv", "shift.csv.gz"):
        shift = tmp_path / name
        data = b"1,2\n3,4,5\n6\n"
        shift.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        with pytest.raises(DDStoreValueError, match=r"line 2: malformed row: 3 fields, "
                                                    r"expected 2"):
            R.read_rows(str(shift), 0, 3)
    flags = tmp_path / "flags.csv"  # bool rows: 0 or 1 (2 was read as True)
    flags.write_text("1,0\n0,1\n1,2\n")
    assert R.read_csv_rows(str(flags), 0, 2, dtype=np.bool_).tolist() == [[True, False],
                                                                         [False, True]]
    with pytest.raises(DDStoreValueError, match=r"flags.csv, line 3, column 1: 2 does not "
                                                r"fit bool; allowed: 0 or 1"):
        R.read_csv_rows(str(flags), 0, 3, dtype=np.bool_)
    path = write_csv(tmp_path / "x.csv.gz", np.arange(30.0).reshape(10, 3))
    missing = str(tmp_path / "nope.csv.gz")
    with pytest.raises(DDStoreValueError, match=f"{missing}: no such file"):
        R.read_rows(missing, 0, 1)
    with pytest.raises(DDStoreValueError, match="no such file"):
        R.count_rows(missing)
    # a relative path: the message says relative to what (a README block run elsewhere)
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"nope.csv.gz: no such file (relative to the working directory "
                f"{os.getcwd()})")):
            R.count_rows("nope.csv.gz")
    finally:
        os.chdir(here)
    with pytest.raises(DDStoreIndexError,
                       match=r"row range \[5, 11\) out of range \[0, 10\]"):
        R.read_rows(path, 5, 11)
    with pytest.raises(DDStoreIndexError, match=r"\[4, 2\)"):
        R.read_rows(path, 4, 2)
    with pytest.raises(DDStoreIndexError, match=r"\[-1, 2\)"):
        R.read_rows(path, -1, 2)
    with pytest.raises(DDStoreValueError, match="lo must be an integer"):
        R.read_rows(path, 1.0, 2)
    with pytest.raises(DDStoreValueError, match="unknown file kind"):
        R.read_rows(write_csv(tmp_path / "x.txt", np.zeros((1, 1))), 0, 1)
    with pytest.raises(DDStoreValueError, match="dtype=object; allowed: a number type"):
        R.read_csv_rows(path, 0, 1, dtype=object)
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,3\n4,5,6\n7,8\n9,10,11\n")
    with pytest.raises(DDStoreValueError, match=r"bad.csv, line 3: malformed row: 2 "
                                                r"fields, expected 3"):
        R.read_csv_rows(str(bad), 0, 4)
    assert R.read_csv_rows(str(bad), 0, 2).tolist() == [[1, 2, 3], [4, 5, 6]]
    quoted = tmp_path / "quoted.csv"  # a quoted field holding a comma: said why
    quoted.write_text('"1,000",1\n')
    with pytest.raises(DDStoreValueError, match=r"quoted.csv, .*malformed row .*; fields "
                                                r"are split at every comma, quotes are "
                                                r"not read$"):
        R.read_csv_rows(str(quoted), 0, 1)
    word = tmp_path / "word.csv.gz"
    with gzip.open(word, "wb") as f:
        f.write(b"1,2\n3,4\n5,x5\n")
    with pytest.raises(DDStoreValueError, match=r"word.csv.gz, line 3, column 1: 'x5' is "
                                                r"not a number"):
        R.read_csv_rows(str(word), 1, 3)
    frac = tmp_path / "frac.csv"
    frac.write_text("1,2\n3,4.5\n")
    with pytest.raises(DDStoreValueError, match=r"line 2, column 1: '4.5' is not an "
                                                r"integer"):
        R.read_csv_rows(str(frac), 0, 2, dtype=np.int64)
    with pytest.raises(DDStoreValueError, match=re.escape(
            "line 2, column 0: 300 does not fit int8; allowed: [-128, 127]")):
        R.read_csv_rows(str(write_csv(tmp_path / "i.csv", [[1, 2], [300, 4]])), 0, 2,
                        dtype=np.int8)
    with pytest.raises(DDStoreValueError, match=re.escape(
            "line 1, column 1: 2 does not fit bool; allowed: 0 or 1")):
        R.read_csv_rows(str(tmp_path / "i.csv"), 0, 2, dtype=np.bool_)
    with pytest.raises(DDStoreValueError, match=r"expected 5 \(as ncols says\)"):
        R.read_csv_rows(path, 0, 2, ncols=5)
    # arguments of another kind: named, with what is allowed (were Python's own errors)
    for kwargs, words in (({"ncols": -1}, "ncols must be an integer >= 1, got -1"),
                          ({"ncols": 2.5}, "ncols must be an integer >= 1, got 2.5"),
                          ({"dtype": "junk"}, "dtype='junk' is not a dtype"),
                          ({"dtype": "U3"}, "dtype=<U3; allowed: a number type"),
                          ({"block_bytes": "x"}, "block_bytes must be an integer >= 1"),
                          ({"block_bytes": -1}, "block_bytes must be an integer >= 1")):
        with pytest.raises(DDStoreValueError, match=re.escape(words)):
            R.read_csv_rows(path, 0, 2, **kwargs)
    trunc = tmp_path / "trunc.csv.gz"
    trunc.write_bytes(open(path, "rb").read()[:-12])
    with pytest.raises(DDStoreValueError, match=r"trunc.csv.gz: cannot be read \(.*\); a "
                                                r"truncated or corrupt file\?$"):
        R.read_csv_rows(str(trunc), 0, 10)
    # the system's refusal (permissions: this suite may run as root, so the refusal is
    # made by the opener) is not the file's damage: no guess about its content
    def refused(path):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(R, "_open_csv", refused)
    with pytest.raises(DDStoreValueError, match=r"cannot be read \(PermissionError: .*"
                                                r"Permission denied.*\)$"):
        R.read_csv_rows(path, 0, 2)
    monkeypatch.undo()
    # lines ending with CR alone (old Mac text) read as one line, then "malformed row
    # (Too many columns specified ...)"; CR LF is read as LF
    cr = tmp_path / "cr.csv"
    cr.write_bytes(b"1,2\r3,4\r")
    for call in (lambda: R.count_rows(str(cr)), lambda: R.read_csv_rows(str(cr), 0, 1)):
        with pytest.raises(DDStoreValueError, match=r"cr.csv, line 1: lines end with a "
                                                    r"carriage return alone"):
            call()
    cr.write_bytes(b"1,2\r\n3,4\r\n")
    assert R.count_rows(str(cr)) == 2 and R.read_csv_rows(str(cr), 0, 2).tolist() == \
        [[1, 2], [3, 4]]


@pytest.mark.parametrize("text", ["2.0", "1e1", "inf", "-inf", "9223372036854775808",
                                  "18446744073709551615", "-9223372036854775809", "0x10"])
def test_csv_integer_columns_take_integer_literals_only(tmp_path, text):
    """An integer column refuses what pandas would read as a whole number ("2.0",
    "1e1") or wrap ("inf" as -2**63, 2**64 - 1 as -1), naming the file, the line and the
    text as written; int64's own limits are accepted."""
    for suffix in (".csv", ".csv.gz"):
        path = tmp_path / f"ints{suffix}"
        body = f"1,2\n-9223372036854775808,9223372036854775807\n3,{text}\n4,5\n"
        with (gzip.open(path, "wt") if suffix == ".csv.gz" else open(path, "w")) as f:
            f.write(body)
        assert R.read_csv_rows(str(path), 0, 2, dtype=np.int64).tolist() == \
            [[1, 2], [-2 ** 63, 2 ** 63 - 1]]
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"ints{suffix}, line 3, column 1: {text!r} is not an integer")):
            R.read_csv_rows(str(path), 0, 4, dtype=np.int64)


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_trailing_blank_lines_are_not_rows(tmp_path, suffix):
    """Blank lines at the end are no rows, as pandas reads the file, so
    ``read_rows(p, 0, count_rows(p))`` reads every row (it refused the first blank line
    as malformed); a blank line between rows still counts (and is refused by the
    read); a file of blank lines has no rows."""
    for text, rows in (("1,2\n3,4\n\n", 2), ("1,2\n3,4\n \r\n\t\n\n", 2), ("1,2\n3,4", 2),
                       ("1,2\n\n3,4\n\n", 3), ("\n\n", 0), ("", 0)):
        path = str(tmp_path / f"t{suffix}")
        with (gzip.open if suffix.endswith("gz") else open)(path, "wb") as f:
            f.write(text.encode())
        for block in (2, 4, 1 << 20):  # the blank tail spread over several blocks
            assert R.count_rows(path, block) == rows, (text, block)
        if rows and "\n\n3" not in text:
            assert len(pd.read_csv(path, header=None)) == rows
            assert R.read_rows(path, 0, rows).tolist() == [[1, 2], [3, 4]]
            if text.endswith("\n\n"):  # a range into the blank tail: said as such
                with pytest.raises(DDStoreValueError, match=r"line 3: malformed row: .* "
                                                            r"\(a blank line; blank lines "
                                                            r"at the end of a file are no "
                                                            r"rows"):
                    R.read_rows(path, 0, rows + 1)


def test_npy_rows_and_columns(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((50, 4, 3)).astype(np.float32)
    path = str(tmp_path / "x.npy")
    np.save(path, x)
    assert R.count_rows(path) == 50
    for lo, hi in [(0, 0), (0, 50), (3, 17), (49, 50)]:
        got = R.read_rows(path, lo, hi)
        assert got.dtype == np.float32 and got.tobytes() == x[lo:hi].tobytes()
    ei = rng.integers(0, 50, (2, 40))
    epath = str(tmp_path / "edge_index.npy")
    np.save(epath, ei)
    for lo, hi in [(0, 40), (5, 9), (40, 40)]:
        got = R.read_npy_rows(epath, lo, hi, axis=1)
        assert got.tobytes() == np.ascontiguousarray(ei[:, lo:hi]).tobytes()
    with pytest.raises(DDStoreIndexError, match=r"column range \[30, 41\) out of range "
                                                r"\[0, 40\]"):
        R.read_npy_rows(epath, 30, 41, axis=1)
    with pytest.raises(DDStoreIndexError, match=r"row range \[0, 51\) out of range "
                                                r"\[0, 50\]"):
        R.read_rows(path, 0, 51)
    with pytest.raises(DDStoreValueError, match="holds dtype float32, expected float64"):
        R.read_rows(path, 0, 1, dtype=np.float64)
    with pytest.raises(DDStoreValueError, match="axis=1"):
        R.read_npy_rows(path, 0, 1, axis=1)
    np.save(tmp_path / "f.npy", np.asfortranarray(np.zeros((4, 3))))
    with pytest.raises(DDStoreValueError, match="Fortran order"):
        R.read_rows(str(tmp_path / "f.npy"), 0, 1)
    short = tmp_path / "short.npy"
    short.write_bytes(open(path, "rb").read()[:-10])
    with pytest.raises(DDStoreValueError, match="short.npy: truncated"):
        R.read_rows(str(short), 0, 1)
    # a header whose element count wraps int64 (2**61 x 8: np.prod gave 0, so 4 rows
    # passed for 2**61), refused by the row count too
    from numpy.lib import format as npformat
    huge = tmp_path / "huge.npy"
    with open(huge, "wb") as fh:
        npformat.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False,
                                             "shape": (2 ** 61, 8)})
        fh.write(np.zeros((4, 8)).tobytes())
    wide = tmp_path / "wide.npy"  # no rows, but rows no one can hold: named, not numpy's
    with open(wide, "wb") as fh:
        npformat.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False,
                                             "shape": (0, 2 ** 63)})
    with pytest.raises(DDStoreValueError, match=r"wide.npy: its header says shape .* rows "
                                                r"of 9223372036854775808 elements are too "
                                                r"large to read"):
        R.read_npy_rows(str(wide), 0, 0)
    for call in (lambda: R.read_rows(str(huge), 0, 4), lambda: R.count_rows(str(huge))):
        with pytest.raises(DDStoreValueError, match=r"huge.npy: truncated: its header says "
                                                    r"shape \(2305843009213693952, 8\) "
                                                    r"float64 \(147573952589676412928 data "
                                                    r"bytes\) but it holds 256"):
            call()
    with pytest.raises(DDStoreValueError, match=f"{tmp_path / 'no.npy'}: no such file"):
        R.read_rows(str(tmp_path / "no.npy"), 0, 1)


def small_ogb(tmp_path, n=120, e=500, d=5, nan_labels=False):
    rng = np.random.default_rng(3)
    ei = rng.integers(0, n, (2, e))
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, 7, n).astype(np.float64)
    if nan_labels:
        y[::4] = np.nan
    perm = rng.permutation(n)
    splits = {"train": perm[:30], "valid": perm[30:50], "test": perm[50:]}
    root = tmp_path / "ogbn_toy"
    write_ogb_node(root, ei, x, y, splits, split_name="sales_ranking")
    return str(root), ei, x, y, splits


def test_ogb_layout_ranges(tmp_path):
    root, ei, x, y, splits = small_ogb(tmp_path, nan_labels=True)
    ds = OGBNodeData(root)
    assert (ds.num_nodes, ds.num_edges, ds.num_features, ds.split_name) == \
        (120, 500, 5, "sales_ranking")
    raw = os.path.join(root, "raw")
    whole_e = pd.read_csv(os.path.join(raw, "edge.csv.gz"), header=None).to_numpy()
    whole_x = pd.read_csv(os.path.join(raw, "node-feat.csv.gz"),
                          header=None).to_numpy().astype(np.float32)
    assert np.array_equal(whole_e, ei.T)
    for lo, hi in [(0, 500), (0, 250), (250, 500), (17, 18)]:
        src, dst = ds.edges(lo, hi)
        assert src.tobytes() == whole_e[lo:hi, 0].tobytes()
        assert dst.tobytes() == whole_e[lo:hi, 1].tobytes()
    for lo, hi in [(0, 120), (0, 60), (60, 120), (5, 5)]:
        assert ds.features(lo, hi).tobytes() == whole_x[lo:hi].tobytes()
        lab = ds.labels(lo, hi)
        want = np.where(np.isnan(y[lo:hi]), -1, np.nan_to_num(y[lo:hi])).astype(np.int64)
        assert lab.tobytes() == want.tobytes()
    for s in ("train", "valid", "test"):
        k = ds.split_size(s)
        assert k == len(splits[s])
        assert np.array_equal(np.concatenate([ds.split(s, 0, k // 2),
                                              ds.split(s, k // 2, k)]), splits[s])
    refuses_past_the_end(ds, 120, 499, 501, names=("node-feat.csv.gz", "edge.csv.gz"))


def refuses_past_the_end(src, num_nodes, lo, hi, names):
    """A node-data source refuses the feature rows ``[0, num_nodes + 1)``, the edge rows
    ``[lo, hi)`` and the split 'val', each with an error naming what was asked and the
    allowed range (``names``: how the messages name the features and the edges)."""
    features, edges = (re.escape(n) for n in names)
    with pytest.raises(DDStoreIndexError, match=rf"{features}: row range "
                                                rf"\[0, {num_nodes + 1}\) out of "
                                                rf"range \[0, {num_nodes}\]"):
        src.features(0, num_nodes + 1)
    with pytest.raises(DDStoreIndexError, match=rf"{edges}: row range \[{lo}, {hi}\)"):
        src.edges(lo, hi)
    with pytest.raises(DDStoreValueError, match="split 'val': allowed"):
        src.split("val", 0, 1)


def test_ogb_writer_writes_the_same_bytes_for_the_same_data(tmp_path):
    """write_ogb_node's gzip files carry no write time in their headers (bytes 4-7, the
    MTIME field, zero): two copies of one data set written seconds apart are equal byte
    for byte, as a job whose ranks must read the same files needs (a copy written
    across a second's boundary was refused as another file)."""
    ei = np.array([[0, 1, 2], [1, 2, 0]])
    splits = {"train": [0], "valid": [1], "test": [2]}
    for d in ("a", "b"):
        write_ogb_node(tmp_path / d, ei, x=np.ones((3, 2)), y=np.arange(3), splits=splits)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.gz"))
    assert len(files) == 8, files
    for f in files:
        a, b = (tmp_path / "a" / f).read_bytes(), (tmp_path / "b" / f).read_bytes()
        assert a[4:8] == bytes(4) and a == b, f
        assert gzip.decompress(a) == gzip.decompress(b)


def test_ogb_errors(tmp_path):
    with pytest.raises(DDStoreValueError, match="not an OGB node-property dataset "
                                                "directory"):
        OGBNodeData(tmp_path)
    root, ei, x, y, splits = small_ogb(tmp_path)
    os.remove(os.path.join(root, "split", "sales_ranking", "valid.csv.gz"))
    with pytest.raises(DDStoreValueError, match="valid.csv.gz: no such file"):
        OGBNodeData(root)
    os.makedirs(os.path.join(root, "split", "other"))
    with pytest.raises(DDStoreValueError, match=r"holds splits \['other', "
                                                r"'sales_ranking'\]; name one"):
        OGBNodeData(root)
    bad = tmp_path / "bad"
    ei2 = ei.copy()
    ei2[1, 7] = 120  # a node id == num_nodes
    write_ogb_node(bad, ei2, x, y)
    ds = OGBNodeData(bad)
    assert ds.split_name is None
    with pytest.raises(DDStoreValueError, match=r"edge.csv.gz, line 8: edge .* names a "
                                                r"node outside \[0, 120\)"):
        ds.edges(0, 500)
    ds.edges(0, 7)  # the lines before it are fine
    frac = tmp_path / "frac"
    yy = y.copy()
    yy[3] = 2.5
    write_ogb_node(frac, ei, x, yy)
    with pytest.raises(DDStoreValueError, match=r"node-label.csv.gz, line 4: label 2.5 is "
                                                r"not a class id"):
        OGBNodeData(frac).labels(0, 120)
    # a feature file that is there but empty (0 bytes, or a gzip of no lines): refused
    # as the label file is (it was taken for "no features")
    import gzip
    feat = os.path.join(str(frac), "raw", "node-feat.csv.gz")
    for blob in (b"", gzip.compress(b"")):
        with open(feat, "wb") as f:
            f.write(blob)
        with pytest.raises(DDStoreValueError, match=r"node-feat.csv.gz: holds 0 rows, but "
                                                    r".*num-node-list.csv.gz says 120"):
            OGBNodeData(frac)
    os.remove(os.path.join(str(frac), "raw", "num-node-list.csv.gz"))
    with pytest.raises(DDStoreValueError, match="num-node-list.csv.gz: no such file"):
        OGBNodeData(frac)


@pytest.mark.parametrize("label", ["inf", "-inf", "1e30", "9223372036854775808",
                                   "9007199254740993", "-2", "-1.5"])
def test_ogb_label_beyond_int64_refused(tmp_path, label):
    """A label that is not finite or not below 2**53 is refused naming file and line
    (inf was stored as -9223372036854775808; 2**53 + 1 was read as 2**53)."""
    root, ei, x, y, splits = small_ogb(tmp_path)
    path = os.path.join(root, "raw", "node-label.csv.gz")
    lines = [f"{int(v)}" for v in y]
    lines[5] = label
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    ds = OGBNodeData(root)
    assert ds.labels(0, 5).tolist() == y[:5].astype(np.int64).tolist()
    with pytest.raises(DDStoreValueError, match=r"node-label.csv.gz, line 6: label .* is "
                                                r"not a class id \(an integer in \[0, "
                                                r"2\*\*53\), or nan or -1 for none\)"):
        ds.labels(0, 120)


def test_ogb_labels_minus_one_and_nan_are_none(tmp_path):
    """-1 (every loader's "no label", what write_ogb_node wrote and the reader refused)
    and nan both read as -1."""
    root, ei, x, y, splits = small_ogb(tmp_path)
    y = y.astype(np.float64)
    y[3], y[7] = -1, np.nan
    write_ogb_node(str(tmp_path / "again"), ei, x, y, splits)
    got = OGBNodeData(str(tmp_path / "again")).labels(0, len(y))
    want = y.copy()
    want[7] = -1
    assert got.tolist() == want.astype(np.int64).tolist()


@pytest.mark.parametrize("role,count_file,attr,read", [
    ("edge", "num-edge-list", "num_edges", lambda ds, lo, hi: ds.edges(lo, hi)),
    ("node-feat", "num-node-list", "num_nodes", lambda ds, lo, hi: ds.features(lo, hi)),
    ("node-label", "num-node-list", "num_nodes", lambda ds, lo, hi: ds.labels(lo, hi)),
])
@pytest.mark.parametrize("claimed", [100, 119, 121, 140])
def test_ogb_count_files_must_match_the_files(tmp_path, role, count_file, attr, read,
                                              claimed):
    """``num-edge-list.csv.gz`` / ``num-node-list.csv.gz`` saying fewer or more rows than
    the file holds is refused, naming both files and both counts: by the read that ends
    at the count (more rows) or that passes the file's end (fewer); read in pieces too."""
    root, ei, x, y, splits = small_ogb(tmp_path, n=120, e=120)
    with gzip.open(os.path.join(root, "raw", f"{count_file}.csv.gz"), "wt") as f:
        f.write(f"{claimed}\n")
    path = os.path.join(root, "raw", f"{role}.csv.gz")
    if role != "edge":  # keep the edges within the claimed nodes
        with gzip.open(os.path.join(root, "raw", "edge.csv.gz"), "wt") as f:
            f.write("0,1\n" * 120)
        with gzip.open(os.path.join(root, "raw", "num-edge-list.csv.gz"), "wt") as f:
            f.write("120\n")
    ds = OGBNodeData(root)
    assert getattr(ds, attr) == claimed
    msg = re.escape(f"{path}: holds 120 rows, but "
                    f"{os.path.join(root, 'raw', count_file)}.csv.gz says {claimed}")
    for pieces in ([(0, claimed)], [(0, 50), (50, 90), (90, claimed)]):
        with pytest.raises(DDStoreValueError, match=msg):
            for lo, hi in pieces:
                read(ds, lo, hi)
        ds.close()
    read(ds, 0, 50)  # rows before the end are read as they are


def test_synthetic_graph_is_the_same_for_any_ranges():
    """Per-block seeds: any split of the ranges (as on any number of ranks) gives the
    same graph; the planted structure is there."""
    from ddstore.sources.synthetic_nodes import EDGE_BLOCK, NODE_BLOCK, SyntheticNodeGraph
    g = SyntheticNodeGraph(scale=0.06, seed=5)  # 146,942 nodes, 3.7 M edges: 4 blocks
    n, e = g.num_nodes, g.num_edges
    assert (n, e, g.num_features, g.num_classes) == (146942, 3711548, 100, 47)
    assert n > 2 * NODE_BLOCK and e > 3 * EDGE_BLOCK
    x, y = g.features(0, n), g.labels(0, n)
    assert x.dtype == np.float32 and x.shape == (n, 100) and y.dtype == np.int64
    for cuts in ([0, 1, NODE_BLOCK + 3, n], [0, n // 3, 2 * n // 3, n]):
        parts = [g.features(a, b) for a, b in zip(cuts[:-1], cuts[1:])]
        assert np.concatenate(parts).tobytes() == x.tobytes()
    cuts = [0, EDGE_BLOCK - 1, EDGE_BLOCK + 1, 3 * EDGE_BLOCK + 7, e]
    parts = [g.edges(a, b) for a, b in zip(cuts[:-1], cuts[1:])]
    src, dst = (np.concatenate([p[k] for p in parts]) for k in (0, 1))
    s1, d1 = g.edges(0, e)
    assert np.array_equal(src, s1) and np.array_equal(dst, d1)
    assert src.min() >= 0 and src.max() < n and dst.min() >= 0 and dst.max() < n
    # structure: Zipf-like classes, homophilous edges, informative but noisy features
    counts = np.bincount(y, minlength=47)
    assert counts.min() >= 1 and 0.2 < counts.max() / n < 0.35
    assert 0.8 < (y[src] == y[dst]).mean() < 0.86
    order = np.argsort(y, kind="stable")
    means = np.add.reduceat(x[order], np.r_[0, np.cumsum(counts)[:-1]]) / counts[:, None]
    err = np.abs(means - g.means).max(axis=1)  # class means planted, within 6 sd
    assert (err < 6 * g.noise / np.sqrt(counts)).all(), err
    # splits: a partition of the nodes, 8 % / 1.6 % / 90.4 %
    ids = [g.split(s, 0, g.split_size(s)) for s in ("train", "valid", "test")]
    assert [len(i) for i in ids] == [11755, 2351, 132836]
    assert np.array_equal(np.sort(np.concatenate(ids)), np.arange(n))
    k = g.split_size("train")
    assert np.array_equal(np.concatenate([g.split("train", 0, 7), g.split("train", 7, k)]),
                          ids[0])
    # another seed, another graph; the same seed, the same graph
    assert not np.array_equal(SyntheticNodeGraph(scale=0.06, seed=6).labels(0, 100), y[:100])
    assert SyntheticNodeGraph(scale=0.06, seed=5).features(500, 510).tobytes() == \
        x[500:510].tobytes()


def test_synthetic_graph_errors():
    from ddstore.sources.synthetic_nodes import SyntheticNodeGraph
    g = SyntheticNodeGraph(scale=0.001)
    assert (g.num_nodes, g.num_edges) == (2449, 61859)
    refuses_past_the_end(g, 2449, 61859, 61860, names=("features", "edges"))
    with pytest.raises(DDStoreValueError, match="scale=0 must be a number in"):
        SyntheticNodeGraph(scale=0)
    with pytest.raises(DDStoreValueError, match=r"homophily=2 must be a finite number in "
                                                r"\[0, 1\]"):
        SyntheticNodeGraph(scale=0.001, homophily=2)
    # NaN and inf went through (non-finite features, one node with half the edges);
    # a float seed or feature count was truncated
    for kw, words in ((dict(noise=float("nan")), "noise=nan must be a finite number >= 0"),
                      (dict(degree_skew=float("inf")), "degree_skew=inf must be a finite"),
                      (dict(seed=1.5), "seed must be an integer, got 1.5"),
                      (dict(num_features=2.7), "num_features must be an integer >= 1")):
        with pytest.raises(DDStoreValueError, match=re.escape(words)):
            SyntheticNodeGraph(scale=0.001, **kw)
    assert SyntheticNodeGraph(scale=0.001, seed=-1).seed == 2 ** 64 - 1  # (as_seed's rule)


def test_npy_node_data(tmp_path):
    from ddstore.sources.npy_nodes import NpyNodeData
    rng = np.random.default_rng(4)
    n, e = 90, 400
    ei = rng.integers(0, n, (2, e))
    x = rng.standard_normal((n, 6)).astype(np.float64)
    y = rng.integers(0, 5, n).astype(np.int32)
    np.save(tmp_path / "edge_index.npy", ei)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    for s, ids in (("train", np.arange(10)), ("valid", np.arange(10, 20)),
                   ("test", np.arange(20, 90))):
        np.save(tmp_path / f"{s}_idx.npy", ids)
    ds = NpyNodeData.from_dir(tmp_path)
    assert (ds.num_nodes, ds.num_edges, ds.num_features, ds.split_name) == (90, 400, 6,
                                                                            "npy")
    s, d = ds.edges(13, 77)
    assert np.array_equal(s, ei[0, 13:77]) and np.array_equal(d, ei[1, 13:77])
    assert ds.features(5, 9).tobytes() == x[5:9].astype(np.float32).tobytes()
    assert ds.labels(0, 90).tolist() == y.tolist()
    assert ds.split("test", 3, 5).tolist() == [23, 24] and ds.split_size("valid") == 10
    np.save(tmp_path / "e2.npy", ei.T.copy())  # [E, 2], OGB's orientation
    s2, d2 = NpyNodeData(tmp_path / "e2.npy", num_nodes=n).edges(0, 400)
    assert np.array_equal(s2, ei[0]) and np.array_equal(d2, ei[1])
    with pytest.raises(DDStoreValueError, match="x has 90 rows but y has 89"):
        np.save(tmp_path / "y89.npy", y[:89])
        NpyNodeData(tmp_path / "edge_index.npy", x=tmp_path / "x.npy",
                    y=tmp_path / "y89.npy")
    with pytest.raises(DDStoreValueError, match="nope.npy: no such file"):
        NpyNodeData(tmp_path / "edge_index.npy", x=tmp_path / "nope.npy")
    with pytest.raises(DDStoreIndexError, match=r"x.npy: row range \[0, 91\) out of range "
                                                r"\[0, 90\]"):
        ds.features(0, 91)
    ei[1, 3] = 90
    np.save(tmp_path / "bad.npy", ei)
    with pytest.raises(DDStoreValueError, match=r"edge 3 \(.*\) names a node outside "
                                                r"\[0, 90\)"):
        NpyNodeData(tmp_path / "bad.npy", num_nodes=90).edges(0, 400)


def test_npy_splits_each_optional(tmp_path, store):
    """load_npy with train and test ids but no valid_idx.npy loads those two splits
    (all three were dropped, without a word, when one was missing); with none, none."""
    from ddstore import pyg as dpyg
    n = 30
    np.save(tmp_path / "edge_index.npy", np.stack([np.arange(n), (np.arange(n) + 1) % n]))
    np.save(tmp_path / "y.npy", np.arange(n) % 3)
    np.save(tmp_path / "train_idx.npy", np.arange(0, 20))
    np.save(tmp_path / "test_idx.npy", np.arange(25, 30))
    data = dpyg.load_npy(store, tmp_path, name="two")
    assert sorted(data.splits) == ["test", "train"]
    assert data.splits["train"].tolist() == list(range(20))
    assert data.splits["test"].tolist() == list(range(25, 30))
    for f in ("train_idx.npy", "test_idx.npy"):
        os.remove(tmp_path / f)
    assert dpyg.load_npy(store, tmp_path, name="none").splits == {}



def test_ogb_node_count_beyond_memory_refused_by_name(tmp_path, store):
    """A count file of 4e18 nodes is refused where the graph's per-node arrays are made,
    naming the count and the bytes it needs (numpy's bare "array is too big" before);
    nothing is left in the store."""
    from ddstore import pyg as dpyg
    from ddstore.errors import DDStoreMemoryError
    root, ei, x, y, splits = small_ogb(tmp_path)
    with gzip.open(os.path.join(root, "raw", "num-node-list.csv.gz"), "wt") as f:
        f.write("4000000000000000000\n")
    before = store.variables()
    with pytest.raises(DDStoreMemoryError, match=r"4000000000000000000 destination nodes "
                                                 r"need 64000000000000000008 bytes .*\(is "
                                                 r"the node count right\?\)"):
        dpyg.load_ogb(store, root, name="huge", progress=False)
    assert store.variables() == before

def test_row_bounds_must_be_integers(tmp_path):
    """A float row bound (2.5) is refused naming the call, the bound and its allowed
    range, never truncated to 2 (``check_range`` took ``int()`` of it); an integral float
    (2.0) too: integers only, as everywhere (``_checks.is_int``)."""
    from ddstore.sources import SequenceSource
    from ddstore.sources.npy_nodes import NpyNodeData
    from ddstore.sources.series import from_arrays
    from ddstore.sources.synthetic_nodes import SyntheticNodeGraph
    g = SyntheticNodeGraph(scale=0.001)
    for bound in (2.5, 2.0, True, "2"):
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"SyntheticNodeGraph.features: stop={bound!r} must be an integer in "
                f"[0, {g.num_nodes}]")):
            g.features(0, bound)
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"SyntheticNodeGraph.edges: start=2.5 must be an integer in [0, {g.num_edges}]")):
        g.edges(2.5, 10)
    with pytest.raises(DDStoreValueError, match=re.escape(
            "SyntheticNodeGraph.split('train'): start=0.5 must be an integer in [0, ")):
        g.split("train", 0.5, 3)
    assert g.edges(np.int64(2), np.int32(4))[0].shape == (2,)  # numpy integers are fine
    np.save(tmp_path / "edge_index.npy", np.array([[0, 1], [1, 0]]))
    np.save(tmp_path / "x.npy", np.zeros((2, 3)))
    nd = NpyNodeData.from_dir(tmp_path)
    with pytest.raises(DDStoreValueError, match=r"x.npy: stop=1.5 must be an integer in "
                                                r"\[0, 2\]"):
        nd.features(0, 1.5)
    with pytest.raises(DDStoreValueError, match=r"SequenceSource: stop=2.5 must be an "
                                                r"integer in \[0, 3\]"):
        list(SequenceSource([1, 2, 3]).read(0, 2.5))
    with pytest.raises(DDStoreValueError, match=r"Series.read: stop=1.5 must be an "
                                                r"integer in \[0, 4\]"):
        from_arrays(np.zeros((4, 2))).read(0, 1.5)
    with pytest.raises(DDStoreValueError, match="hi must be an integer, got 2.5"):
        R.read_csv_rows(write_csv(tmp_path / "r.csv", np.zeros((3, 2))), 0, 2.5)


def test_node_data_sets_share_split_and_edge_checks(tmp_path):
    """The three node data sets answer ``split`` the same way (one base): an unknown
    split name is refused by each, and ids outside ``[0, num_nodes)`` are named with
    their file and row."""
    from ddstore.sources.node_data import NodeDataSource
    from ddstore.sources.npy_nodes import NpyNodeData
    from ddstore.sources.synthetic_nodes import SyntheticNodeGraph
    np.save(tmp_path / "edge_index.npy", np.array([[0, 1, 2], [1, 2, 0]]))
    np.save(tmp_path / "train_idx.npy", np.array([0, 1, 7]))
    for s in ("valid", "test"):
        np.save(tmp_path / f"{s}_idx.npy", np.array([2]))
    root = tmp_path / "ogb"
    write_ogb_node(root, np.array([[0, 1, 2], [1, 2, 0]]), y=np.array([0.0, 1.0, 1.0]),
                   splits={"train": [0, 1, 7], "valid": [2], "test": [2]})
    sets = [NpyNodeData.from_dir(tmp_path, num_nodes=3), OGBNodeData(str(root)),
            SyntheticNodeGraph(scale=0.001)]
    for ds in sets:
        assert isinstance(ds, NodeDataSource)
        with pytest.raises(DDStoreValueError, match=re.escape(
                "split 'val': allowed ['train', 'valid', 'test']")):
            ds.split("val", 0, 1)
    with pytest.raises(DDStoreValueError, match=r"train_idx.npy, entry 2: node id 7 "
                                                r"outside \[0, 3\)"):
        sets[0].split("train", 1, 3)
    with pytest.raises(DDStoreValueError, match=r"train.csv.gz, line 3: node id 7 "
                                                r"outside \[0, 3\)"):
        sets[1].split("train", 0, 3)
    assert sets[0].split("train", 0, 2).tolist() == sets[1].split("train", 0, 2).tolist() \
        == [0, 1]


# ------------------------------------------------------------ inputs refused (issue 35)
def _npy_set(tmp_path, n=20, x=None, y=None, train=None):
    np.save(tmp_path / "edge_index.npy", np.array([[0, 1, 2], [1, 2, 0]]))
    np.save(tmp_path / "x.npy", np.ones((n, 3), np.float32) if x is None else x)
    np.save(tmp_path / "y.npy", np.zeros(n, np.int64) if y is None else y)
    np.save(tmp_path / "train_idx.npy", np.arange(5) if train is None else train)
    np.save(tmp_path / "valid_idx.npy", np.array([5]))
    np.save(tmp_path / "test_idx.npy", np.array([6]))
    from ddstore.sources.npy_nodes import NpyNodeData
    return NpyNodeData.from_dir(tmp_path)


@pytest.mark.parametrize("value, shown, text", [
    (np.nan, "nan", ""), (np.inf, "inf", "inf"), (-np.inf, "-inf", "-inf"),
    (1e39, "1e+39", "1e+39")])
def test_node_features_must_be_finite(tmp_path, value, shown, text):
    """A NaN or infinite node feature (or one beyond float32's range, infinite once
    cast) is refused by the .npy and the OGB reader, naming the file, the row / line and
    the column, as the JODIE reader refuses its edge features (a CSV field shown as
    written: pandas writes NaN as nothing); the rows before it and a float64 read of a
    large finite value load."""
    x = np.ones((20, 3))
    x[7, 2] = value
    ds = _npy_set(tmp_path, x=x)
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{tmp_path / 'x.npy'}, row 7, column 2: {shown} is not a finite number "
            f"within float32's range (|x| <= 3.402823466e+38 once rounded to float32); node "
            f"features must be finite")):
        ds.features(0, 20)
    assert ds.features(0, 7).tobytes() == np.ones((7, 3), np.float32).tobytes()
    if np.isfinite(value):
        assert ds.features(7, 8, dtype=np.float64)[0, 2] == value
    root = tmp_path / "ogb"
    write_ogb_node(root, np.array([[0, 1], [1, 0]]), x=x, y=np.zeros(20))
    feat = os.path.join(root, "raw", "node-feat.csv.gz")
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{feat}, line 8, column 2: '{text}' is not a number that is finite and "
            f"within float32's range (|x| <= 3.402823466e+38 once rounded to float32)")):
        OGBNodeData(root).features(0, 20)
    assert OGBNodeData(root).features(0, 7).tobytes() == \
        np.ones((7, 3), np.float32).tobytes()


def test_a_value_is_read_alike_whatever_else_its_block_holds(tmp_path):
    """The same text gives the same value, or the same refusal, whether its block takes
    the fast path (pandas over the block) or the careful one (a field a parser refuses
    elsewhere in it, here a no-break space): "-0" kept its sign only on the fast path,
    and pandas' own NaN words ("None", "#N/A", "-nan") were NaN only there."""
    path = str(tmp_path / "t.csv")
    for other in ("1", "\xa01"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"-0,NaN\n{other},2\n")
        got = R.read_csv_rows(path, 0, 2)  # (the careful path strips the no-break space)
        assert np.signbit(got[0, 0]) and got[0, 0] == 0 and np.isnan(got[0, 1]), other
        assert got[1].tolist() == [1, 2], other
        for word in ("None", "#N/A", "-nan"):
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"-0,{word}\n{other},2\n")
            with pytest.raises(DDStoreValueError, match=re.escape(
                    f"line 1, column 1: {word!r} is not a number")):
                R.read_csv_rows(path, 0, 2)


def test_float_ranges_end_where_the_cast_overflows(tmp_path):
    """float32's largest values, as ``write_ogb_node`` writes them (``3.4028235e+38``,
    just above float32's max in float64), load exactly (they were refused as beyond
    float32's range); the first value whose cast is infinite is refused, for float32 and
    float16 alike."""
    top = np.finfo(np.float32).max
    x = np.array([[1.0, top], [-top, 0.5]], dtype=np.float32)
    write_ogb_node(tmp_path / "ogb", np.array([[0], [1]]), x=x)
    assert OGBNodeData(tmp_path / "ogb").features(0, 2).tobytes() == x.tobytes()
    path = str(tmp_path / "h.csv")
    for dtype, fits, over in ((np.float16, "65519.99", "65520"),
                              (np.float32, "3.4028235677973362e+38",
                               "3.4028235677973366e+38")):
        with open(path, "w") as f:
            f.write(f"1,{fits}\n-{fits},2\n")
        got = R.read_csv_rows(path, 0, 2, dtype=dtype, finite=True)
        assert got.tolist() == [[1, np.finfo(dtype).max], [-np.finfo(dtype).max, 2]]
        with open(path, "w") as f:
            f.write(f"1,2\n-{over},2\n")
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"line 2, column 0: '-{over}' is not a number that is finite and within "
                f"{np.dtype(dtype)}'s range")):
            R.read_csv_rows(path, 0, 2, dtype=dtype, finite=True)


@pytest.mark.parametrize("dtype, value", [(np.int64, 2 ** 63 - 1), (np.int64, -2),
                                          (np.int8, -5), (np.uint64, 2 ** 63),
                                          (np.uint64, 2 ** 64 - 1)])
def test_npy_labels_must_be_class_ids(tmp_path, dtype, value):
    """A label is -1 (none) or a class id in [0, 2**63 - 2]: 2**63 - 1 (num_classes
    would be 2**63), another negative one, or a uint64 beyond int64 (-1 once cast) is
    refused naming the file and entry; the limits themselves load."""
    y = np.zeros(20, dtype)
    y[5] = value
    ds = _npy_set(tmp_path, y=y)
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{tmp_path / 'y.npy'}, entry 5: label {value} is not a class id: allowed -1 "
            f"(no label) or 0 <= label <= 2**63 - 2")):
        ds.labels(0, 20)
    assert ds.labels(0, 5).tolist() == [0] * 5
    ok = np.array([-1, 0, 2 ** 63 - 2], np.int64)
    np.save(tmp_path / "y.npy", np.resize(ok, 20))
    assert ds.labels(0, 3).tolist() == ok.tolist()


def test_split_files_with_repeated_ids_refused(tmp_path):
    """A split that lists a node twice (train: 23 ids for 20 nodes) is refused naming the
    file, the line of the repeat and the line listed first, by the OGB and the .npy
    reader; a range without the repeat loads."""
    root = tmp_path / "ogb"
    train = np.r_[np.arange(20), 3, 4, 5]
    write_ogb_node(root, np.array([[0, 1], [1, 0]]), y=np.zeros(20),
                   splits={"train": train, "valid": [1], "test": [2]})
    ds = OGBNodeData(root)
    path = os.path.join(root, "split", "random", "train.csv.gz")
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{path}, line 21: node id 3 is listed again (also at line 4); a split lists "
            f"each node at most once")):
        ds.split("train", 0, ds.split_size("train"))
    assert ds.split("train", 0, 20).tolist() == list(range(20))
    assert ds.split("train", 10, 23).tolist() == list(range(10, 20)) + [3, 4, 5]
    nd = _npy_set(tmp_path / "n" if os.makedirs(tmp_path / "n") is None else None,
                  train=np.array([9, 1, 2, 9]))
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{tmp_path / 'n' / 'train_idx.npy'}, entry 3: node id 9 is listed again "
            f"(also at entry 0)")):
        nd.split("train", 0, 4)


def test_ogb_rows_past_the_count_named_by_line(tmp_path):
    """Rows past the count of an OGB edge file: the first line past the count is named,
    told as blank when it is (the message said only "holds 122 rows, but num-edge-list
    says 120"), a row shown; any range short of the end loads.  Blank lines at the end
    of the file are no rows (pandas, OGB's own reader, skips them)."""
    root = tmp_path / "ogb"
    ei = np.stack([np.arange(120) % 20, (np.arange(120) * 7) % 20])
    write_ogb_node(root, ei, y=np.zeros(20))
    path = os.path.join(root, "raw", "edge.csv.gz")
    with gzip.open(path, "rb") as f:
        text = f.read()
    with gzip.open(path, "wb") as f:
        f.write(text + b"\n \n")
    assert OGBNodeData(root).edges(60, 120)[1].tolist() == ei[1, 60:].tolist()
    with gzip.open(path, "wb") as f:
        f.write(text + b"\n7,8\n")
    ds = OGBNodeData(root)
    counts = os.path.join(root, "raw", "num-edge-list.csv.gz")
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{path}: holds 122 rows, but {counts} says 120; line 121, the first past the "
            f"count, is blank, and rows follow it (blank lines at the end of a file are "
            f"skipped, not between rows)")):
        ds.edges(60, 120)
    assert R.line_text(path, 119) == b"19,13" and R.line_text(path, 120) == b"" and \
        R.line_text(path, 122) is None
    assert ds.edges(0, 119)[0].tolist() == (np.arange(119) % 20).tolist()
    with gzip.open(path, "wb") as f:
        f.write(text + b"5,6\n")
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{path}: holds 121 rows, but {counts} says 120; line 121, the first past the "
            f"count, is b'5,6'; the files disagree")):
        OGBNodeData(root).edges(0, 120)


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_csv_bytes_that_are_not_text_named_by_line(tmp_path, suffix):
    """Bytes ``ff fe`` on line 27 are named by that line (not "lines 1+", the start of
    the range read), with the bytes shown; read from anywhere before it."""
    rows = "".join(f"{i},{i + 1}\n" for i in range(26)).encode() + b"26,27\xff\xfe\n" + \
        b"28,29\n"
    path = tmp_path / f"b{suffix}"
    with (gzip.open(path, "wb") if suffix == ".csv.gz" else open(path, "wb")) as f:
        f.write(rows)
    for lo in (0, 20, 26):
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"{path}, line 27: bytes b'26,27\\xff\\xfe' are not UTF-8 text (byte 6 of "
                f"the line is ff)")):
            R.read_csv_rows(str(path), lo, 28, dtype=np.int64)
    assert R.read_csv_rows(str(path), 0, 26, dtype=np.int64)[-1].tolist() == [25, 26]


def test_unsigned_ids_beyond_int64_named_as_in_the_file(tmp_path):
    """uint64 node ids >= 2**63 (edges, a split) are refused naming the value in the file
    (it was told as the int64 it wraps to: node id -1)."""
    from ddstore.sources import NpyNodeData
    np.save(tmp_path / "edge_index.npy", np.array([[0, 2 ** 64 - 2], [1, 2]], np.uint64))
    np.save(tmp_path / "y.npy", np.zeros(3, dtype=np.int64))
    np.save(tmp_path / "train_idx.npy", np.array([0, 2 ** 64 - 1], dtype=np.uint64))
    ds = NpyNodeData.from_dir(str(tmp_path))
    with pytest.raises(DDStoreValueError, match=r"edge 1 \(18446744073709551614, 2\) names "
                                                r"a node outside \[0, 3\)"):
        ds.edges(0, 2)
    with pytest.raises(DDStoreValueError, match=r"entry 1: node id 18446744073709551615 "
                                                r"outside \[0, 3\)"):
        ds.split("train", 0, 2)
