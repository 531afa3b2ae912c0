"""The file readers of ddstore.sources against hostile files (in-process): a FIFO, a
directory or a device where a file is expected is refused at once (opening a FIFO waited
forever; reading /dev/zero as JSON never ended); PyTorch Geometric Temporal JSON, PeMS
HDF5 and PFF metadata that are not what they claim are refused naming the file and the
field instead of being misread (edge lists reshaped, float ids truncated, blocks of the
wrong shape read short) or raising Python's own errors; TGL / JODIE headers with a
UTF-8 byte-order mark, no line end or CR-only line ends."""
import json
import os
import pickle
import shutil
import re

import numpy as np
import pytest

from ddstore.errors import DDStoreValueError
from ddstore.sources import (PickleDirSource, load_npy, load_pems_h5, load_pgt_json,
                             read_jodie_share, read_rows, read_tgl_share, restricted_load,
                             write_pems_h5, write_pickle_files)


def _fifo(tmp_path, name):
    path = str(tmp_path / name)
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("reader,name,prefix", [
    (load_npy, "x.npy", "load_npy: cannot open "),
    (load_pgt_json, "x.json", "load_pgt_json: cannot read "),
    (load_pems_h5, "x.h5", "load_pems_h5: cannot open "),
    (restricted_load, "x.pkl", ""),
    (lambda p: read_rows(p, 0, 1), "x.csv", ""),
])
def test_readers_refuse_what_is_not_a_regular_file(tmp_path, reader, name, prefix):
    """A FIFO (whose open waits for a writer), a directory and a character device are
    each refused before anything is opened, naming the path and what it is; a missing
    file keeps its wording."""
    fifo = _fifo(tmp_path, name)
    with pytest.raises(DDStoreValueError) as info:
        reader(fifo)
    assert str(info.value) == f"{prefix}{fifo}: is a FIFO (named pipe), not a regular file"
    folder = str(tmp_path / ("d" + name))
    os.mkdir(folder)
    with pytest.raises(DDStoreValueError, match="is a directory, not a regular file"):
        reader(folder)
    if not name.endswith(".csv"):  # (read_rows: a name must end in .csv / .npy)
        with pytest.raises(DDStoreValueError) as info:
            reader("/dev/zero")
        assert str(info.value) == f"{prefix}/dev/zero: is a character device, not a " \
                                  f"regular file"
    missing = str(tmp_path / ("no" + name))
    with pytest.raises(DDStoreValueError, match=f"{missing}: "
                       f"{'cannot read pickle' if name.endswith('pkl') else 'no such file'}"):
        reader(missing)
    link = str(tmp_path / ("link" + name))  # a symlink to a FIFO is the FIFO
    os.symlink(fifo, link)
    with pytest.raises(DDStoreValueError, match="is a FIFO"):
        reader(link)


def _json(tmp_path, doc, name="d.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("edges,words", [
    ([[0, 1, 2], [3, 4, 5]], "'edges' must be a list of [source, target] pairs (shape "
                             "[E, 2]), got shape (2, 3)"),          # was read as 3 pairs
    ([[0, 1, 2], [1, 2, 0]], "got shape (2, 3)"),                    # [2, E]: was misread
    ([[0, 1.7]], "integer pairs: pair 0 is [0.0, 1.7]"),             # was read as node 1
    ([[0, 1], [1, 10 ** 20]], "integer pairs: values of type object (an id beyond int64"),
    ([[0, "a"]], "integer pairs: it holds a string; numbers only"),
    ([[0, 1], [2]], "integer pairs: setting an array element"),
])
def test_pgt_edges_refused_not_reshaped(tmp_path, edges, words):
    path = _json(tmp_path, {"FX": [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]], "edges": edges})
    with pytest.raises(DDStoreValueError) as info:
        load_pgt_json(path)
    assert str(info.value).startswith(f"load_pgt_json: {path}: "), info.value
    assert words in str(info.value), info.value


def test_pgt_edges_exact_and_whole_floats_taken(tmp_path):
    """[E, 2] pairs are read as they are, whole floats included (the edge order kept)."""
    path = _json(tmp_path, {"FX": [[1.0, 2.0, 3.0]], "edges": [[0, 1], [2.0, 0], [1, 2]]})
    s = load_pgt_json(path)
    np.testing.assert_array_equal(s.edge_index, [[0, 2, 1], [1, 0, 2]])
    assert s.edge_index.dtype == np.int64


def test_pgt_text_and_structure_errors_named(tmp_path):
    ok = {"FX": [[1.0, 2.0], [3.0, 4.0]], "edges": [[0, 1]]}
    raw = json.dumps(ok).encode()
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + raw)  # a UTF-8 byte-order mark: the same data
    np.testing.assert_array_equal(load_pgt_json(str(bom)).to_numpy(),
                                  load_pgt_json(_json(tmp_path, ok, "ok.json")).to_numpy())
    latin = tmp_path / "latin.json"
    latin.write_bytes(raw[:-1] + b',\n "name": "caf\xe9"}')
    with pytest.raises(DDStoreValueError, match=r"latin.json, line 2: byte \d+ \(e9\) is "
                                                r"not UTF-8 text"):
        load_pgt_json(str(latin))
    deep = _json(tmp_path, "[" * 100_000 + "]" * 100_000, "deep.json")
    with pytest.raises(DDStoreValueError, match="deep.json: JSON nested too deeply"):
        load_pgt_json(deep)
    cases = [
        (dict(ok, node_ids=["a"]), "'node_ids' must be a list of the 2 nodes' ids"),
        (dict(ok, node_ids={"a": 0}), "'node_ids' names 1 of the 2 nodes; node 1 has no "
                                      "name"),
        (dict(ok, node_ids={"a": 0, "b": 0}), "'node_ids' gives index 0 to both 'a' and "
                                              "'b'"),
        ({"edge_mapping": {"edge_index": {"0": [[0, 2 ** 70]]}}, "y": [[1.0, 2.0]]},
         "edge_mapping.edge_index['0'] is not a list of [source, target] integer pairs"),
        ({"X": [[1, 2]], "edges": [[0, 1]], "weights": [10 ** 400]},
         "'weights' is not numeric"),
        ({"nodes": [{"bus_stop": 1, "y": [1.0]}], "links": [5]},
         "link 0 is 5, not an object with 'source', 'target'"),
        ({"nodes": [{"bus_stop": [1], "y": [1.0]}], "links": []},
         "node 0's id [1] is not a string or a number"),
        ({"nodes": [{"bus_stop": 1, "y": [1.0]}, {"bus_stop": 1, "y": [2.0]}],
          "links": []}, "node id 1 appears twice in 'nodes'"),
        ({"nodes": [{"bus_stop": 1, "y": [1.0], "X": 5}], "links": []},
         "node 1: 'X' is 5, not an object"),
        ({"nodes": [{"bus_stop": 1, "y": [1.0]}], "links": [{"source": [1], "target": 1}]},
         "a link's 'source' or 'target' is not a node id"),
        ({"nodes": [{"bus_stop": 1, "y": [1.0]}], "links": [{"source": 1, "target": 1,
                                                             "weight": "x"}]},
         "the links' 'weight' is not numeric"),
        # per-step keys with a gap and no time_periods: the steps after it were dropped
        ({"edges": [[0, 1]], "weights": [2.0], "0": {"y": [1, 2]}, "2": {"y": [5, 6]}},
         "step 2 is there but step 1 is not: steps are '0' .. 'T-1' without a gap"),
    ]
    for k, (doc, words) in enumerate(cases):
        path = _json(tmp_path, doc, f"c{k}.json")
        with pytest.raises(DDStoreValueError) as info:
            load_pgt_json(path)
        assert str(info.value).startswith(f"load_pgt_json: {path}: "), (k, info.value)
        assert words in str(info.value), (k, info.value)


def _h5(tmp_path, name, change):
    import h5py
    path = str(tmp_path / name)
    write_pems_h5(path, np.arange(12.0).reshape(4, 3),
                  np.arange(4).astype("datetime64[h]"), sensor_ids=[10, 11, 12])
    with h5py.File(path, "a") as fh:
        change(fh["df"])
    return path


def _replace(grp, name, data, **attrs):
    del grp[name]
    d = grp.create_dataset(name, data=data)
    for k, v in attrs.items():
        d.attrs[k] = v


@pytest.mark.parametrize("change,words", [
    (lambda g: _replace(g, "block0_values", np.ones((2, 3)), transposed=True),
     "block0_values has shape (2, 3), expected (4, 3) (4 time steps in axis1, 3 sensors"),
    (lambda g: _replace(g, "block0_values", np.ones((4, 5)), transposed=True),
     "block0_values has shape (4, 5), expected (4, 3)"),
    (lambda g: _replace(g, "block0_items", [10, 11, 99]),
     "block0_items names sensor '99', which axis0 lacks"),
    (lambda g: _replace(g, "block0_items", [10, 11]),
     "expected (4, 2)"),
    (lambda g: _replace(g, "axis0", [10, 10, 12]), "sensor '10' appears twice in axis0"),
    (lambda g: g.__delitem__("block0_values"), "no 'block0_values' (nblocks=1)"),
    (lambda g: g.attrs.__setitem__("nblocks", 2), "no 'block1_values' (nblocks=2)"),
    (lambda g: g.attrs.__setitem__("nblocks", -1), "nblocks=-1 must be a positive integer"),
    # a group where a dataset belongs (AttributeError: 'Group' object has no attribute
    # 'ndim'), and a frame of no sensor (accepted, then a ZeroDivisionError in the dataset)
    (lambda g: (g.__delitem__("axis1"), g.create_group("axis1")),
     "'axis1' is a group, not a dataset"),
    (lambda g: (g.__delitem__("block0_values"), g.create_group("block0_values")),
     "'block0_values' is a group, not a dataset"),
    (lambda g: _replace(g, "axis0", np.zeros(0, np.int64)),
     "holds no sensor (axis0 is empty); a series needs nodes >= 1"),
])
def test_pems_h5_inconsistent_frames_refused(tmp_path, change, words):
    """A frame whose blocks do not match its axes was read short or wide (a series of 4
    steps that read 2, or 5 sensors for 3), or raised KeyError / ValueError."""
    path = _h5(tmp_path, "f.h5", change)
    with pytest.raises(DDStoreValueError) as info:
        load_pems_h5(path)
    assert str(info.value).startswith(f"load_pems_h5: {path}['df']: "), info.value
    assert words in str(info.value), info.value


def test_pems_h5_bad_dtype_argument_named(tmp_path):
    """A dtype= that is no numpy dtype is the caller's argument, named as such (the file
    was blamed: "cannot be read as a pandas HDF5 frame")."""
    path = _h5(tmp_path, "ok.h5", lambda g: None)
    with pytest.raises(DDStoreValueError, match=r"load_pems_h5: dtype='foo' is not a "
                                                r"numpy dtype"):
        load_pems_h5(path, dtype="foo")


def test_pems_h5_damaged_metadata_named(tmp_path):
    """A file whose HDF5 metadata is damaged (400 bytes zeroed) is refused naming it
    (it was h5py's bare "RuntimeError: Link iteration failed")."""
    path = str(tmp_path / "bad.h5")
    write_pems_h5(path, np.ones((12, 4)), np.arange(12).astype("datetime64[h]"))
    with open(path, "r+b") as fh:
        fh.seek(600)
        fh.write(bytes(400))
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"load_pems_h5: {path} cannot be read as a pandas HDF5 frame (")):
        load_pems_h5(path)


def test_pems_h5_split_blocks_read_whole(tmp_path):
    """Two blocks that cover the sensors once each (pandas' mixed dtypes) still read every
    value in place."""
    def split(g):
        values = g["block0_values"][()]
        _replace(g, "block0_values", values[:, [2, 0]], transposed=True)
        _replace(g, "block0_items", [12, 10])
        g.create_dataset("block1_values", data=values[:, [1]].astype(np.float32))
        g["block1_values"].attrs["transposed"] = True
        g.create_dataset("block1_items", data=[11])
        g.attrs["nblocks"] = 2
    s = load_pems_h5(_h5(tmp_path, "s.h5", split))
    np.testing.assert_array_equal(s.read(0, 4)[:, :, 0], np.arange(12.0).reshape(4, 3))


def _pff(tmp_path, name, meta):
    d = tmp_path / name
    write_pickle_files([{"x": np.full(2, float(i))} for i in range(3)], str(d))
    (d / "ddstore-pff.json").write_text(json.dumps(meta))
    return str(d)


@pytest.mark.parametrize("meta,words", [
    ({"nsamples": 2.7}, "nsamples=2.7 must be an integer >= 0"),      # was 2
    ({"nsamples": True}, "nsamples=True must be an integer >= 0"),    # was 1
    ({"nsamples": 3, "pattern": "sample.pkl"},
     "pattern='sample.pkl' names the same file for every sample"),   # read one file 3x
    ({"nsamples": 1, "pattern": "/etc/x{}.pkl"}, "names '/etc/x0.pkl', outside the "
                                                 "directory"),
    ({"nsamples": 1, "pattern": "../x{}.pkl"}, "names '../x0.pkl', outside the directory"),
])
def test_pff_metadata_refused(tmp_path, meta, words):
    d = _pff(tmp_path, "p", meta)
    with pytest.raises(DDStoreValueError) as info:
        PickleDirSource(d)
    assert str(info.value).startswith(os.path.join(d, "ddstore-pff.json") + ": ")
    assert words in str(info.value), info.value
    src = PickleDirSource(_pff(tmp_path, "ok", {"nsamples": 3,
                                               "pattern": "sample-{:08d}.pkl"}))
    assert [float(s["x"][0]) for _, s in src.read(0, 3)] == [0.0, 1.0, 2.0]


def test_pff_member_that_is_a_fifo_refused(tmp_path):
    d = _pff(tmp_path, "p", {"nsamples": 3, "pattern": "sample-{:08d}.pkl"})
    member = os.path.join(d, "sample-00000002.pkl")
    os.remove(member)
    os.mkfifo(member)
    src = PickleDirSource(d)
    assert float(src.read_one(1)["x"][0]) == 1.0
    with pytest.raises(DDStoreValueError, match=f"{member}: is a FIFO"):
        src.read_one(2)
    with open(os.path.join(d, "sample-00000001.pkl"), "wb") as f:
        pickle.dump(np.ones(1), f)
    assert src.read_one(1).tolist() == [1.0]
    # without metadata (files by pattern): a match that is not a regular file (a FIFO, a
    # dangling link) is refused by name (dropped, it renumbered the samples after it)
    os.remove(os.path.join(d, "ddstore-pff.json"))
    os.symlink(os.path.join(d, "gone"), os.path.join(d, "sample-00000003.pkl"))
    with pytest.raises(DDStoreValueError, match=r"sample-00000002.pkl' matches '\*.pkl' "
                                                r"but is not a regular file .*2 such"):
        PickleDirSource(d)


HDR = b",src,dst,time,ext_roll\n"


def _tgl(tmp_path, name, body):
    d = tmp_path / name
    d.mkdir()
    (d / "edges.csv").write_bytes(body)
    return str(d)


def test_tgl_headers(store, tmp_path):
    """A UTF-8 byte-order mark before a header without the index column ("\\ufeffsrc"
    was "missing ['src']"); a header with no line end is a file of no edges (it said
    "missing []"); CR-only line ends named as such (it said "missing ['ext_roll']")."""
    body = b"1,2,10,0\n3,4,11,2\n"
    got = read_tgl_share(store, _tgl(tmp_path, "bom", b"\xef\xbb\xbfsrc,dst,time,ext_roll\n"
                                     + body))
    assert [a.tolist() for a in got[:4]] == [[1, 3], [2, 4], [10, 11], [0, 2]]
    got = read_tgl_share(store, _tgl(tmp_path, "nonl", HDR[:-1]))
    assert [a.tolist() for a in got[:4]] == [[], [], [], []]
    d = _tgl(tmp_path, "cr", (HDR + b"0,1,2,10,0\n").replace(b"\n", b"\r"))
    with pytest.raises(DDStoreValueError, match="edges.csv, line 1: lines end with a "
                                                "carriage return alone"):
        read_tgl_share(store, d)
    jodie = tmp_path / "j.csv"
    jodie.write_bytes(b"user,item,t,label\r0,1,1.0,0\r")
    with pytest.raises(DDStoreValueError, match="j.csv, line 1: lines end with a "
                                                "carriage return alone"):
        read_jodie_share(store, str(jodie))
    assert store.variables() == []


def test_adios_source_refuses_a_fifo(tmp_path):
    """A BP path that is a FIFO (ADIOS2 waited for a writer forever) or a device is
    refused naming it; a directory is still handed to ADIOS2 (BP4 / BP5 are directories)
    and one that is not a BP file set is named by ADIOS2's error."""
    from ddstore.sources import AdiosSource
    fifo = _fifo(tmp_path, "x.bp")
    with pytest.raises(DDStoreValueError) as info:
        AdiosSource(fifo)
    assert str(info.value) == f"ADIOS2 file {fifo}: is a FIFO (named pipe), not a " \
                              f"regular file"
    with pytest.raises(DDStoreValueError, match="ADIOS2 file /dev/zero: is a character "
                                                "device"):
        AdiosSource("/dev/zero")
    with pytest.raises(DDStoreValueError, match=f"ADIOS2 file '{tmp_path}' cannot be "
                                                f"opened"):
        AdiosSource(str(tmp_path))


def _hand_cff(path, x, offsets, nsamples, schema):
    """A CFF file written with ADIOS2's own API (``nsamples`` a global array of one, as
    ``adios2.Stream`` writes it; ddstore's writer keeps it in the metadata)."""
    import json
    import adios2
    with adios2.Stream(str(path), "w") as s:
        for _ in s.steps(1):
            s.write("data/x", x, list(x.shape), [0] * x.ndim, list(x.shape))
            s.write("offsets/x", offsets, list(offsets.shape), [0], list(offsets.shape))
            s.write("nsamples", np.array([nsamples], dtype=np.int64))
            s.write_attribute("ddstore/format", "ddstore-cff")
            s.write_attribute("ddstore/schema", json.dumps(schema))
    return str(path)


def test_adios_hand_written_files_are_checked_before_their_values_are_read(tmp_path):
    """A file written by other means than ddstore's writer: a cut data file is refused
    before any read (ADIOS2 waited for ever for the bytes where nsamples is an array);
    a variable stored as another type than the schema's (doubles for int64 values or
    offsets, converted on reading: x.5 truncated, offsets 7.7 read as 7) and offsets
    that do not start at 0 (every sample's rows shifted) are refused, naming them."""
    from ddstore.sources import AdiosSource
    x = np.arange(12, dtype=np.int64).reshape(6, 2)
    off = np.array([0, 2, 3, 6], dtype=np.int64)
    schema = [["x", "<i8", [2]]]
    good = _hand_cff(tmp_path / "good.bp", x, off, 3, schema)
    with AdiosSource(good) as src:
        data, sizes = src.read_packed(0, 3)
        assert data["x"].tobytes() == x.tobytes() and sizes["x"].tolist() == [2, 1, 3]
    cut = tmp_path / "cut.bp"
    shutil.copytree(good, cut)
    blob = (cut / "data.0").read_bytes()
    (cut / "data.0").write_bytes(blob[:len(blob) // 2])
    with pytest.raises(DDStoreValueError, match="is truncated or incomplete: its metadata "
                                                "declares"):
        AdiosSource(str(cut))
    for name, args, said in (
            ("f8.bp", (x + 0.5, off), "variable 'data/x' is stored as double; key 'x' of "
                                      "the schema (int64) is stored as int64_t"),
            ("off.bp", (x, off + 0.7), "variable 'offsets/x' is stored as double; an "
                                       "offsets array is stored as int32_t or int64_t"),
            ("first.bp", (x[:5], off - np.array([0, 1, 1, 1]) + [1, 0, 0, 0]),
             "variable 'offsets/x' starts at 1, not 0")):
        path = _hand_cff(tmp_path / name, *args, 3, schema)
        with pytest.raises(DDStoreValueError, match=re.escape(said)):
            AdiosSource(path)


@pytest.mark.parametrize("shape", [(10, 3, 1), (10, 1, 4), (10, 3), (10, 3, 2)])
def test_npy_in_fortran_order_refused_where_its_bytes_differ(tmp_path, shape):
    """A Fortran-order file is refused by load_npy and the row reader wherever two or
    more axes are longer than 1 ([T, nodes, 1] too: it was read as if in C order)."""
    from ddstore.sources import rows
    path = str(tmp_path / "f.npy")
    np.save(path, np.asfortranarray(np.arange(np.prod(shape), dtype=np.float32)
                                    .reshape(shape)))
    with pytest.raises(DDStoreValueError, match="Fortran order"):
        load_npy(path)
    with pytest.raises(DDStoreValueError, match="Fortran order"):
        rows.read_rows(path, 0, 1)



@pytest.mark.parametrize("shape", ["(-1, 3)", "(True, 3)", "(4, -2, 1)"])
def test_npy_header_of_an_impossible_shape_refused(tmp_path, shape):
    """A header whose shape holds a negative or boolean dimension is refused by both
    readers, naming the file (``(-1, 3)`` opened as a series of -1 steps)."""
    from ddstore.sources import rows
    text = ("{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape).encode()
    text += b" " * (64 - (10 + len(text) + 1) % 64) + b"\n"
    path = tmp_path / "h.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text
                     + bytes(64))
    msg = rf"h.npy is not a readable .npy file: its header's shape .* is not a tuple of " \
          rf"integers >= 0"
    with pytest.raises(DDStoreValueError, match=msg):
        load_npy(str(path))
    with pytest.raises(DDStoreValueError, match=msg):
        rows.read_rows(str(path), 0, 1)

@pytest.mark.parametrize("text", [b"{'descr': 'zz', ", b"{'descr': '<f4', 'shape': (3, 2, }",
                                  b"\xff\xfe{'descr'"])
def test_npy_header_cut_off_or_damaged_named_by_file(tmp_path, text):
    """A header whose text ends early or is not text (tokenize's TokenError, a
    SyntaxError, a UnicodeDecodeError) is refused naming the file, by load_npy and by
    the row reader without naming load_npy (a bare TokenError named neither)."""
    from ddstore.sources import rows
    path = tmp_path / "cut.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(text + b"\n").to_bytes(2, "little") +
                     text + b"\n" + bytes(64))
    with pytest.raises(DDStoreValueError, match=r"^load_npy: .*cut.npy is not a readable "
                                                r".npy file: \w+"):
        load_npy(str(path))
    for read in (lambda: rows.read_rows(str(path), 0, 1), lambda: rows.count_rows(str(path))):
        with pytest.raises(DDStoreValueError, match=r"^\S*cut.npy is not a readable .npy "
                                                    r"file: \w+"):
            read()


def test_npy_version_3_read_as_numpy_reads_it(tmp_path):
    """A version 3.0 file (2.0's layout, UTF-8 header text: numpy writes it for field
    names beyond latin-1, or when asked) is read as np.load reads it (it was refused as
    an unsupported version); a version beyond is refused naming the versions read."""
    from numpy.lib import format as npy_format
    a = np.arange(60, dtype=np.float32).reshape(10, 3, 2)
    path = tmp_path / "v3.npy"
    with open(path, "wb") as fh:
        npy_format.write_array(fh, a, version=(3, 0))
    assert path.read_bytes()[6:8] == b"\x03\x00"
    np.testing.assert_array_equal(load_npy(str(path)).read(0, 10), np.load(path))
    raw = bytearray(path.read_bytes())
    raw[6] = 4
    path.write_bytes(bytes(raw))
    with pytest.raises(DDStoreValueError, match=r"unsupported .npy version \(4, 0\) "
                                                r"\(1.0, 2.0 and 3.0 are read\)"):
        load_npy(str(path))
    raw[6], raw[8:12] = 3, (1 << 31).to_bytes(4, "little")  # (not read: 2 GiB of header)
    path.write_bytes(bytes(raw))
    with pytest.raises(DDStoreValueError, match=r"v3.npy is not a readable .npy file: "
                                                r"ValueError: the header's length 2147483648"):
        load_npy(str(path))


def test_npy_in_fortran_order_read_where_its_bytes_are_c_order(tmp_path):
    a = np.arange(10, dtype=np.float64).reshape(10, 1, 1)
    path = str(tmp_path / "f.npy")
    np.save(path, np.asfortranarray(a))
    np.testing.assert_array_equal(load_npy(path).read(0, 10), a)


def test_writers_replace_a_file_only_with_a_complete_one(tmp_path):
    """The writers of foreign formats (write_pems_h5, write_jodie, write_tgl,
    write_ogb_node) check their arguments before writing and write each file beside
    its path first: a failed write leaves a user's file as it was (write_pems_h5 opened
    the file before it checked ``unit``: the user's bytes were lost), a good one
    replaces it, and nothing of theirs is left beside it."""
    import ddstore.temporal as tg
    from ddstore.sources import write_ogb_node
    ts = np.arange(4).astype("datetime64[h]")
    user = tmp_path / "user.h5"
    user.write_text("precious user data")
    with pytest.raises(DDStoreValueError, match="unit='bogus'; allowed"):
        write_pems_h5(str(user), np.ones((4, 2)), ts, unit="bogus")
    with pytest.raises(DDStoreValueError, match="key='' must be a non-empty str"):
        write_pems_h5(str(user), np.ones((4, 2)), ts, key="")
    # what load_pems_h5 refuses is refused here (ids truncated, 1.5 written as 1)
    for data, ids, words in ((np.ones((4, 2)), [1.5, 2.5], "sensor_ids: ids must be"),
                             (np.ones((4, 2)), [3, 3], "sensor ids repeat (1 duplicates)"),
                             (np.ones((4, 2)), ["é", "a"], "not ASCII text"),
                             (np.ones((4, 0)), None, "with a sensor at least"),
                             (np.ones((4, 2), complex), None, "data of dtype complex128"),
                             (np.array([[{}, 1]] * 4, dtype=object), None,
                              "data of dtype object")):
        with pytest.raises(DDStoreValueError, match=re.escape(words)):
            write_pems_h5(str(user), data, ts, sensor_ids=ids)
    assert user.read_text() == "precious user data"
    write_pems_h5(str(user), np.arange(8.0).reshape(4, 2), ts)
    assert np.array_equal(np.asarray(load_pems_h5(str(user)).read(0, 4))[..., 0],
                          np.arange(8.0).reshape(4, 2))
    for writer, path in ((lambda p: write_pems_h5(p, np.ones((4, 2)), ts), "dir.h5"),
                         (lambda p: tg.write_jodie(p, [0], [0], [1], [0]), "dir.csv")):
        (tmp_path / path).mkdir()
        with pytest.raises(DDStoreValueError, match="is a directory; give a file name"):
            writer(str(tmp_path / path))
    jodie = tmp_path / "j.csv"
    jodie.write_text("a user's file")
    with pytest.raises(ValueError):  # columns of different lengths: nothing written
        tg.write_jodie(str(jodie), [0, 1], [0], [1, 2], [0, 0])
    assert jodie.read_text() == "a user's file"
    tg.write_jodie(str(jodie), [0, 1], [0, 0], [1, 2], [0, 0])
    assert jodie.read_text().splitlines()[1:] == ["0,0,1,0", "1,0,2,0"]
    tgl = tmp_path / "tgl"
    tgl.mkdir()
    (tgl / "notes.txt").write_text("mine")
    tg.write_tgl(str(tgl) + "/", [0, 1], [1, 0], [1, 2], [0, 0], edge_feat=np.ones((2, 3)))
    assert sorted(os.listdir(tgl)) == ["edge_features.pt", "edges.csv", "notes.txt"]
    # every file of a multi-file writer checked before any is written (edges.csv was
    # replaced before node_features.pt, a directory, was refused)
    edges = (tgl / "edges.csv").read_bytes()
    (tgl / "node_features.pt").mkdir()
    with pytest.raises(DDStoreValueError, match="node_features.pt' is a directory"):
        tg.write_tgl(str(tgl), [0], [1], [5], [0], edge_feat=np.ones((1, 3)),
                     node_feat=np.ones((2, 1)))
    assert (tgl / "edges.csv").read_bytes() == edges
    (tgl / "node_features.pt").rmdir()
    # an earlier write's feature file that this one has none for: refused, kept (read
    # with the new edges, it served the old features); bad arguments named, nothing
    # written (fractional ids were truncated, other lengths a pandas error)
    for args, kwargs, words in (
            (([0], [1], [5], [0]), {}, r"\['edge_features.pt'\] from an earlier write "
                                       r"would be read with the new data"),
            (([0.5], [1], [5], [0]), {}, r"src: ids must be a 1-D sequence of integers"),
            (([0, 1], [1], [5, 6], [0, 0]), {}, r"dst has 1 rows, src has 2"),
            (([0], [1], [5], [3]), {}, r"split holds 3; allowed: 0, 1 or 2"),
            (([0], [-1], [5], [0]), {}, r"dst holds -1; ids are integers >= 0"),
            (([0], [1], [5], [0]), {"edge_feat": np.ones((2, 3))},
             r"edge_feat has 2 rows, src has 1")):
        with pytest.raises(DDStoreValueError, match=words):
            tg.write_tgl(str(tgl), *args, **kwargs)
        assert (tgl / "edges.csv").read_bytes() == edges
    with pytest.raises(DDStoreValueError, match=r"write_jodie: features must be 2-D"):
        tg.write_jodie(str(jodie), [0], [0], [1], [0], features=np.ones(1))
    with pytest.raises(DDStoreValueError, match=r"write_jodie: item: ids must be"):
        tg.write_jodie(str(jodie), [0], [0.5], [1], [0])
    ogb = tmp_path / "ogb"
    write_ogb_node(str(ogb), np.array([[0, 1], [1, 0]]), x=np.ones((2, 2)), y=np.zeros(2),
                   splits={"train": [0], "valid": [1], "test": []})
    with pytest.raises(DDStoreValueError, match=r"\['raw/node-feat.csv.gz', 'split/random/"
                                                r"train.csv.gz', .* from an earlier write"):
        write_ogb_node(str(ogb), np.array([[0, 1], [1, 0]]), y=np.zeros(2))
    full = {"edge_index": np.array([[0, 1], [1, 0]]), "x": np.ones((2, 2)),
            "y": np.zeros(2), "splits": {"train": [0], "valid": [1], "test": []}}
    for kwargs, words in (
            ({"edge_index": [[0.9, 1.5], [1.7, 2.2]]}, r"edge_index\[0\]: ids must be"),
            ({"edge_index": [0, 1]}, r"edge_index must be \[2, E\] node ids, got shape "
                                     r"\(2,\)"),
            ({"splits": {"train": [0], "test": [1]}}, r"splits must be a dict of \['train', "
                                                      r"'valid', 'test'\]"),
            ({"splits": {"train": [2.99], "valid": [], "test": []}},
             r"splits\['train'\]: ids must be")):
        with pytest.raises(DDStoreValueError, match=words):
            write_ogb_node(str(ogb), **dict(full, **kwargs))
    # a replaced file keeps its permissions; a read-only one and a name ending in a
    # separator are refused (a private file came back with the umask's mode)
    os.chmod(jodie, 0o600)
    tg.write_jodie(str(jodie), [0], [0], [1], [0])
    assert (os.stat(jodie).st_mode & 0o777) == 0o600
    os.chmod(jodie, 0o400)
    if not os.access(jodie, os.W_OK):  # (root writes anything)
        with pytest.raises(DDStoreValueError, match="is read-only here"):
            tg.write_jodie(str(jodie), [0], [0], [1], [0])
    os.chmod(jodie, 0o600)
    with pytest.raises(DDStoreValueError, match=r"names a directory \(it ends in '/'\)"):
        tg.write_jodie(str(tmp_path / "b.csv") + "/", [0], [0], [1], [0])
    write_ogb_node(str(tmp_path / "ogb2") + "/", np.array([[0, 1], [1, 0]]), y=np.zeros(2))
    assert sorted(os.listdir(tmp_path)) == ["dir.csv", "dir.h5", "j.csv", "ogb", "ogb2",
                                            "tgl", "user.h5"]  # no temporaries left


@pytest.mark.parametrize("writer", ["adios", "pff"])
def test_directory_writers_take_a_trailing_separator(tmp_path, writer):
    """``"out.bp/"`` is ``"out.bp"`` (it was refused as 'exists and is not a ddstore CFF
    file', the temporary made inside the new directory); an empty path is refused."""
    from ddstore.sources import AdiosSource, write_records_adios
    recs = [{"x": np.arange(3.0)}, {"x": np.ones(2)}]
    if writer == "adios":
        def write(p):
            return write_records_adios(recs, p)
    else:
        def write(p):
            return write_pickle_files(recs, p)
    (tmp_path / "empty").mkdir()
    for path in ("new/", "empty/", "new/"):  # new, an empty directory, its own write
        assert write(str(tmp_path / path)) == 2
    assert sorted(os.listdir(tmp_path)) == ["empty", "new"]
    with pytest.raises(DDStoreValueError, match="the path is empty"):
        write("")
    if writer == "adios":  # ADIOS2's reader names its report after the last component
        with AdiosSource(str(tmp_path / "new") + "/") as src:
            assert np.array_equal(src.read_one(1)["x"], np.ones(2))
        assert not os.path.exists(f"/tmp/_{os.getpid():x}_profiling.json")
        assert not os.path.exists(f"/tmp/new_{os.getpid():x}_profiling.json")


@pytest.mark.parametrize("value", [np.array(["a", "bc"]), np.array([1, 2], "datetime64[s]"),
                                   np.array([{}, 1], dtype=object)])
def test_adios_writer_names_a_dtype_it_cannot_hold(tmp_path, value):
    from ddstore.sources import write_records_adios
    with pytest.raises(DDStoreValueError, match=r"record 0 key 'a' has dtype .*which a CFF "
                                                r"file does not hold; allowed: bool"):
        write_records_adios([{"a": value}], str(tmp_path / "s.bp"))
    assert os.listdir(tmp_path) == []


def test_pems_h5_index_beyond_memory_names_the_file(tmp_path):
    """A 5 KB frame whose (chunked, never written) time index declares 2**40 steps: a
    DDStoreMemoryError naming the file and the size (numpy's bare MemoryError named
    none)."""
    import h5py
    from ddstore import DDStoreMemoryError
    path = str(tmp_path / "huge.h5")
    with h5py.File(path, "w") as fh:
        g = fh.create_group("df")
        g.attrs["pandas_type"] = np.bytes_(b"frame")
        g.create_dataset("axis0", data=np.array([1, 2]))
        d = g.create_dataset("axis1", shape=(2 ** 40,), dtype=np.int64, chunks=(1024,))
        d.attrs["kind"] = np.bytes_(b"datetime64")
        g.create_dataset("block0_items", data=np.array([1, 2]))
        v = g.create_dataset("block0_values", shape=(2 ** 40, 2), dtype=np.float32,
                             chunks=(1024, 2))
        v.attrs["transposed"] = np.bool_(True)
    with pytest.raises(DDStoreMemoryError, match=rf"{re.escape(path)}\['df'\]: its time "
                                                 rf"index of 1099511627776 steps"):
        load_pems_h5(path)


def test_the_fortieth_sessions_reader_round(store, tmp_path):
    """Files whose values were read wrong without a word: a blank line between the rows of
    a one-column CSV (its one field: read as NaN, an OGB label as "no label"); a
    headerless JODIE file that starts with a byte-order mark (its first row taken for the
    header); PGT steps with other keys or columns than step '0' (one step's 'y' another's
    'X' column); a PGT number beyond float64 (stored as inf); HDF5 sensor ids that are
    not UTF-8 (distinct ids made one)."""
    one = tmp_path / "one.csv"
    one.write_text("1\n\n3\n")
    with pytest.raises(DDStoreValueError, match=re.escape(f"{one}, line 2: malformed row: "
                                                          f"0 fields, expected 1") +
                       r".*\(a blank line"):
        read_rows(str(one), 0, 3)
    one.write_text("1\n \r\n3\n")  # (blanks and a CR: blank too)
    with pytest.raises(DDStoreValueError, match="line 2: malformed row"):
        read_rows(str(one), 0, 3)
    one.write_text("1\n2\n3\n\n")  # (a blank line at the end: no row, as before)
    assert read_rows(str(one), 0, 3).ravel().tolist() == [1, 2, 3]
    rows = "".join(f"{k % 3},{k % 4},{k},0,{k}.5\n" for k in range(12))
    for name, text in (("plain.csv", rows), ("bom.csv", "\ufeff" + rows)):
        (tmp_path / name).write_text(text, encoding="utf-8")
        with pytest.raises(DDStoreValueError, match=r"line 1: .*0,0,0,0,0\.5' is a data "
                                                    r"row, but a JODIE file starts with one "
                                                    r"header line"):
            read_jodie_share(store, str(tmp_path / name))
    p = tmp_path / "steps.json"
    p.write_text(json.dumps({"0": {"X": [[1], [3]], "y": [5, 6]},
                             "1": {"X": [[7, 8], [9, 10]]}, "edges": [[0, 1]]}))
    with pytest.raises(DDStoreValueError, match=re.escape(
            "step '1' has 'X' of 2 column(s), step '0' 'X' of 1 column(s) and 'y' of 1 "
            "column(s): every step needs the same keys and columns")):
        load_pgt_json(str(p))
    p.write_text('{"edges": [[0, 1]], "weights": [1.0],\n "FX": [[1e400, 2], [3, 4]]}')
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{p}, line 2: the number 1e400 is beyond float64's range (it would be stored "
            f"as inf)")):
        load_pgt_json(str(p))
    p.write_text('{"edges": [[0, 1]], "weights": [1.0], "FX": [[1e300, 2], [3, 4]]}')
    assert load_pgt_json(str(p), dtype=np.float64).read(0, 1)[0, 0, 0] == 1e300

    def ids(g):
        raw = np.array([b"\xff", b"\xfe", b"c"])
        _replace(g, "axis0", raw)
        _replace(g, "block0_items", raw)
    assert load_pems_h5(_h5(tmp_path, "ids.h5", ids)).node_ids == ["\\xff", "\\xfe", "c"]


def test_the_forty_second_sessions_reader_round(store, tmp_path):
    """What a probe of the readers found: a JODIE file of whole-number times, one beyond
    int64 (1e19), took int64 times and split the edges by the wrapped value (a negative
    time); rows that alone end with CR (after an LF header) were named "malformed" with
    the field count of every row glued together; a damaged chunk of a PeMS HDF5 file
    gave h5py's bare OSError, naming neither file nor steps; a PGT weight beyond float32
    was named as "inf"."""
    from ddstore import DDStoreOSError
    from ddstore.temporal import TemporalGraph
    head = "user_id,item_id,timestamp,state_label,comma_separated_list_of_features\n"
    p = tmp_path / "big.csv"
    p.write_text(head + "".join(f"{i % 3},{i % 4},{float(i)},0,0.5\n" for i in range(19)) +
                 "1,1,1e19,0,0.5\n")
    g = TemporalGraph.from_jodie(store, "big", str(p))
    t = np.arange(20, dtype=np.float64)
    t[-1] = 1e19
    assert g.t_dtype == np.float64 and g.edge_times().tolist() == t.tolist()
    val, test = np.quantile(t, [0.70, 0.85])  # PyG's train_val_test_split
    want = np.zeros(20, np.int8)
    want[int((t <= val).sum()):] = 1
    want[int((t <= test).sum()):] = 2
    assert g.split.tolist() == want.tolist() == [0] * 14 + [1] * 3 + [2] * 3
    assert g.to_pyg().t.tolist() == t.tolist()
    g.remove()
    # CR line ends after an LF header, from line 2 or from a later line
    rows = [f"{i % 3},{i % 4},{float(i)},0,0.5,0.25" for i in range(20)]
    for name, text, line in (("cr2.csv", head + "\r".join(rows) + "\r", 2),
                             ("cr6.csv", head + "\n".join(rows[:4]) + "\n" +
                              "\r".join(rows[4:]) + "\r", 6)):
        (tmp_path / name).write_bytes(text.encode())
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"{tmp_path / name}, line {line}: lines end with a carriage return alone")):
            TemporalGraph.from_jodie(store, "cr", str(tmp_path / name))
    for name, body, line in (("tgl2", "\r".join(f"{i},{i % 3},{i % 4},{i},0"
                                                 for i in range(20)) + "\r", 2),
                             ("tgl5", "".join(f"{i},{i % 3},{i % 4},{i},0\n" for i in
                                              range(3)) +
                              "\r".join(f"{i},{i % 3},{i % 4},{i},0" for i in range(3, 9))
                              + "\r", 5)):
        d = _tgl(tmp_path, name, HDR + body.encode())
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"edges.csv, line {line}: lines end with a carriage return alone")):
            read_tgl_share(store, d)
    # CR LF throughout is read as LF, a CR LF cut by the reader's first block too
    from ddstore.sources import rows as row_files
    (tmp_path / "cut.csv").write_bytes(b"1,2\r\n3,4\r\n")
    assert row_files.count_rows(str(tmp_path / "cut.csv"), block_bytes=4) == 2
    (tmp_path / "crlf.csv").write_bytes((head + "\n".join(rows) + "\n").replace(
        "\n", "\r\n").encode())
    assert TemporalGraph.from_jodie(store, "crlf", str(tmp_path / "crlf.csv")) \
        .edge_times().tolist() == list(range(20))
    TemporalGraph.open(store, "crlf").remove()
    assert store.variables() == []
    # a damaged chunk of a compressed PeMS frame: the file and the steps named
    import h5py
    path = str(tmp_path / "damaged.h5")
    steps, sensors = 4000, 20
    values = np.random.default_rng(1).normal(size=(steps, sensors)).astype(np.float32)
    write_pems_h5(path, values, np.datetime64("2012-03-01T00:00") +
                  np.arange(steps) * np.timedelta64(5, "m"))
    with h5py.File(path, "a") as fh:
        del fh["df/block0_values"]
        v = fh["df"].create_dataset("block0_values", data=values, chunks=(500, sensors),
                                    compression="gzip")
        v.attrs["transposed"] = np.bool_(True)
        at = v.id.get_chunk_info(4).byte_offset  # steps [2000, 2500)
    raw = bytearray(open(path, "rb").read())
    raw[at + 10:at + 200] = b"\x55" * 190
    open(path, "wb").write(bytes(raw))
    series = load_pems_h5(path)
    assert np.array_equal(series.read(0, 2000)[:, :, 0], values[:2000])
    with pytest.raises(DDStoreOSError, match=re.escape(
            f"load_pems_h5: {path}['df']: reading steps [1500, 2600) failed (a damaged "
            f"file?): OSError: ")):
        series.read(1500, 2600)
    # a PGT weight that float32 cannot hold: named as written, with float32's range
    p = tmp_path / "w.json"
    p.write_text(json.dumps({"edges": [[0, 1], [1, 2], [2, 0]], "weights": [1.0, 1e39, 2.0],
                             "FX": [[1.0, 2.0, 3.0]], "y": [[1.0, 2.0, 3.0]]}))
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"load_pgt_json: {p}: 'weights': edge 1 has weight 1e+39, beyond float32 as "
            f"weights are stored (largest finite 3.403e+38)")):
        load_pgt_json(str(p))
