"""Tests of ddstore.graphs and ddstore.sources: single-process parts here, MPI programs
(tests/mpi/graphs_*.py) launched with mpiexec under timeout."""
import json
import os
import re
import pickle
import sys

import numpy as np
import pytest

import torch  # noqa: E402
import torch_geometric  # noqa: E402,F401


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi"))
from graphs_common import (assert_batch_equal, assert_graph_equal,  # noqa: E402
                           rich_sample, tensor_sample)

import ddstore.graphs as graphs  # noqa: E402
from ddstore import DDStoreError, DDStoreIndexError, DDStoreValueError  # noqa: E402
from ddstore.sources import (AdiosSource, PickleDirSource, SequenceSource,  # noqa: E402
                             restricted_loads)
from torch_geometric.data import Batch, Data  # noqa: E402


# ---------------------------------------------------------------------- Ising
def _lattice_graph(spins, periodic=False):
    return graphs.ising_graph(np.asarray(spins).reshape((round(len(np.ravel(spins)) **
                                                              (1 / 3)),) * 3), periodic)


def test_ising_energy_by_hand_2x2x2():
    # 2x2x2 open lattice: 12 bonds (4 along each axis)
    up = np.ones((2, 2, 2), dtype=int)
    assert graphs.lattice_bonds(2).shape == (12, 2)
    assert float(graphs.ising_graph(up).y) == -12.0
    # checkerboard: every bond joins opposite spins -> +12
    i, j, k = np.indices((2, 2, 2))
    checker = np.where((i + j + k) % 2 == 0, 1, -1)
    assert float(graphs.ising_graph(checker).y) == 12.0
    # one spin flipped: its 3 bonds change from -1 to +1 -> -12 + 2 * 3 = -6
    one = up.copy()
    one[0, 0, 0] = -1
    assert float(graphs.ising_graph(one).y) == -6.0
    # one layer (z = 0) down: the 4 bonds across the layers are broken -> -12 + 8 = -4
    layer = up.copy()
    layer[:, :, 0] = -1
    assert float(graphs.ising_graph(layer).y) == -4.0


def test_ising_energy_by_hand_3x3x3_periodic_and_coupling():
    up = np.ones((3, 3, 3), dtype=int)
    # periodic 3^3: 3 * 27 = 81 bonds; open 3^3: 3 * 9 * 2 = 54 bonds
    assert float(graphs.ising_graph(up, periodic=True).y) == -81.0
    assert float(graphs.ising_graph(up).y) == -54.0
    center = up.copy()
    center[1, 1, 1] = -1  # 6 neighbours -> -54 + 12
    assert float(graphs.ising_graph(center).y) == -42.0
    corner = up.copy()
    corner[0, 0, 0] = -1  # 3 neighbours open, 6 periodic
    assert float(graphs.ising_graph(corner).y) == -48.0
    assert float(graphs.ising_graph(corner, periodic=True).y) == -81.0 + 12.0
    assert float(graphs.ising_graph(corner, coupling=-0.5).y) == 24.0
    bonds = graphs.lattice_bonds(3)
    assert graphs.ising_energy(corner.ravel(), bonds) == -48.0


def test_ising_dataset_structure_and_determinism():
    ds = graphs.ising_dataset(6, seed=4)
    d = ds[2]
    assert d.x.shape == (125, 1) and d.x.dtype == torch.float32
    assert set(d.x.unique().tolist()) <= {-1.0, 1.0}
    assert d.pos.shape == (125, 3) and d.edge_index.shape == (2, 600)
    assert d.edge_attr.shape == (600, 1) and d.y.shape == (1, 1)
    # every edge joins lattice neighbours at distance 1; both directions present
    dist = (d.pos[d.edge_index[0]] - d.pos[d.edge_index[1]]).norm(dim=1)
    assert torch.allclose(dist, torch.ones(600))
    pairs = set(map(tuple, d.edge_index.T.tolist()))
    assert all((b, a) in pairs for a, b in pairs)
    # degree: corners 3, edges 4, faces 5, interior 6
    deg = torch.bincount(d.edge_index[0], minlength=125)
    assert sorted(torch.bincount(deg).tolist()[3:]) == sorted([8, 36, 54, 27])
    # energy recomputed from the graph itself
    s = d.x.view(-1)
    energy = -(s[d.edge_index[0]] * s[d.edge_index[1]]).sum() / 2
    assert float(d.y) == float(energy)
    again = graphs.ising_dataset(6, seed=4)[2]
    assert_graph_equal(again, d, "same seed")
    other = graphs.ising_dataset(6, seed=5)[2]
    assert not torch.equal(other.x, d.x)
    for bad in (6, -7):  # (negative indices are taken: the range says so)
        with pytest.raises(DDStoreIndexError, match=rf"index {bad} out of range \[-6, 6\)"):
            ds[bad]
    assert_graph_equal(ds[-6], ds[0], "ds[-6]")
    with pytest.raises(DDStoreValueError, match="periodic"):
        graphs.ising_dataset(3, size=2, periodic=True)
    with pytest.raises(DDStoreValueError, match="n=-1"):
        graphs.ising_dataset(-1)


# ---------------------------------------------------------------------- layout, batches
def test_layout_round_trip_every_kind():
    for i in range(8):
        sample = rich_sample(i)
        layout, record = graphs.GraphLayout.of(sample)
        assert_graph_equal(layout.to_data(record), sample, f"graph {i}")
        # edge_index is stored edge-major ([E, 2]); the scalar keys as one row
        assert record["edge_index"].shape == (sample.edge_index.shape[1], 2)
        assert record["label"].shape == (1,) and record["energy"].shape == (1,)
    layout, _ = graphs.GraphLayout.of(rich_sample(0))
    records = [layout.to_record(rich_sample(i)) for i in range(8)]
    packed = {k: np.concatenate([r[k] for r in records]) for k in records[0]}
    sizes = {k: np.array([len(r[k]) for r in records]) for k in records[0]}
    for i, got in enumerate(layout.to_data_list(packed, sizes)):
        assert_graph_equal(got, rich_sample(i), f"packed graph {i}")
    assert not layout.fast  # non-tensor keys: Batch via from_data_list
    batch = graphs.collate_records(layout, packed, sizes)
    assert batch.num_graphs == 8 and torch.equal(batch.x, torch.cat(
        [rich_sample(i).x for i in range(8)]))
    # dict samples become Data
    d = {"x": np.zeros((3, 2), np.float32), "edge_index": np.zeros((2, 4), np.int64)}
    layout, rec = graphs.GraphLayout.of(d)
    assert rec["edge_index"].shape == (4, 2)
    out = layout.to_data(rec)
    assert isinstance(out, Data) and out.edge_index.shape == (2, 4)


def test_fast_collate_equals_pyg():
    samples = [tensor_sample(i) for i in range(12)]
    layout, _ = graphs.GraphLayout.of(samples[0])
    assert layout.fast
    for order in ([0, 1, 2], list(range(12)), [5, 5, 11, 0, 5], [5]):
        records = [layout.to_record(samples[i]) for i in order]
        packed = {k: np.concatenate([r[k] for r in records]) for k in records[0]}
        sizes = {k: np.array([len(r[k]) for r in records]) for k in records[0]}
        got = graphs.collate_records(layout, packed, sizes)
        want = Batch.from_data_list([samples[i] for i in order])
        assert_batch_equal(got, want, f"order {order}")
        # face is int32: incremented without changing dtype
        assert got.face.dtype == torch.int32


def test_layout_mismatch_messages():
    layout, _ = graphs.GraphLayout.of(tensor_sample(0))
    bad = tensor_sample(1)
    bad.x = bad.x.double()
    with pytest.raises(DDStoreValueError, match="key 'x'.*float64"):
        layout.to_record(bad)
    bad = tensor_sample(1)
    bad.extra = torch.zeros(2)
    with pytest.raises(DDStoreValueError, match=r"extra keys \['extra'\]"):
        layout.to_record(bad)
    with pytest.raises(DDStoreValueError, match="'s'.*str"):
        graphs.GraphLayout.of(Data(x=torch.zeros(1), s="text"))
    wide = tensor_sample(2)
    wide.x = torch.zeros(3, 9)
    with pytest.raises(DDStoreValueError, match=r"sample 2: key 'x'.*\(9,\)"):
        graphs.graph_records([tensor_sample(0), tensor_sample(1), wide])


# ---------------------------------------------------------------------- restricted pickle
class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


class _Spawn:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        import subprocess
        return (subprocess.Popen, (["touch", self.path],))


def test_restricted_unpickler_admits_data(tmp_path):
    sample = rich_sample(4)
    for proto in (2, 4, 5):
        got = restricted_loads(pickle.dumps(sample, protocol=proto))
        assert_graph_equal(got, sample, f"protocol {proto}")
    arr = np.arange(6, dtype=np.float16).reshape(2, 3)
    assert np.array_equal(restricted_loads(pickle.dumps(arr)), arr)
    assert restricted_loads(pickle.dumps(torch.float64)) is torch.float64
    t = torch.arange(10)[2:7]
    assert torch.equal(restricted_loads(pickle.dumps(t)), t)


def test_restricted_unpickler_refuses_code(tmp_path):
    marker = tmp_path / "created"
    for proto in (0, 2, 5):
        with pytest.raises(DDStoreValueError, match=r"(builtins|io)\.open.*not allowed"):
            restricted_loads(pickle.dumps(_Evil(str(marker)), protocol=proto), "evil.pkl")
    assert not marker.exists()
    with pytest.raises(DDStoreValueError, match="subprocess.Popen.*not allowed"):
        restricted_loads(pickle.dumps(_Spawn(str(marker))), "spawn.pkl")
    # a forbidden callable hidden inside an allowed container
    payload = pickle.dumps({"x": torch.zeros(2), "y": _Evil(str(marker))})
    with pytest.raises(DDStoreValueError, match="not allowed"):
        restricted_loads(payload, "nested.pkl")
    assert not marker.exists()
    # a malicious file in a PFF directory: the error names the file
    d = tmp_path / "pff"
    graphs.write_pickle_dir([tensor_sample(0), tensor_sample(1)], str(d))
    (d / "sample-00000001.pkl").write_bytes(pickle.dumps(_Evil(str(marker))))
    src = PickleDirSource(str(d))
    assert_graph_equal(src.read_one(0), tensor_sample(0), "good file")
    with pytest.raises(DDStoreValueError, match="sample-00000001.pkl.*not allowed"):
        src.read_one(1)
    assert not marker.exists()


def test_restricted_unpickler_refuses_sizes():
    """The allowed callables cannot be made to allocate what the pickle does not hold:
    bytes / bytearray / set / frozenset only from spelled-out items (``bytearray(2**40)``
    and ``set(range(2**40))`` ran the process out of memory), numpy's ``_reconstruct``
    only as numpy's pickles call it, ``numpy.ndarray`` never called.  Each payload is a
    few bytes; each is refused at once.  The same objects pickled by Python (protocols
    2-5, Python 2's names included) still load."""
    big = b"\x8a\x06\x00\x00\x00\x00\x00\x01\x85"  # the tuple (2**40,)
    payloads = {
        "bytearray() of a int": b"\x80\x04\x8c\x08builtins\x8c\tbytearray\x93" + big + b"R.",
        "bytes() of a int": b"\x80\x02c__builtin__\nbytes\n" + big + b"R.",
        "set() of a range": b"\x80\x04\x8c\x08builtins\x8c\x03set\x93\x8c\x08builtins"
                            b"\x8c\x05range\x93" + big + b"R\x85R.",
        "frozenset() of a range": b"\x80\x02c__builtin__\nfrozenset\nc__builtin__\n"
                                  b"xrange\n" + big + b"R\x85R.",
        "not callable": b"\x80\x04\x8c\x05numpy\x8c\x07ndarray\x93" + big + b"R.",
        "with (ndarray, (0,), ...) only":
            b"\x80\x04\x8c\x16numpy._core.multiarray\x8c\x0c_reconstruct\x93\x8c\x05numpy"
            b"\x8c\x07ndarray\x93" + big + b"C\x01b\x87R.",
    }
    for what, payload in payloads.items():
        with pytest.raises(DDStoreValueError) as err:
            restricted_loads(payload, "big.pkl")
        assert str(err.value).startswith("big.pkl: not a readable pickle (") and \
            what in str(err.value), (what, str(err.value))
    obj = {"b": bytearray(b"xy"), "e": b"", "by": b"abc", "s": {1, 2}, "f": frozenset([3]),
           "r": range(2, 9, 3), "a": np.asfortranarray(np.arange(6.0).reshape(2, 3))}
    for proto in (2, 3, 4, 5):
        got = restricted_loads(pickle.dumps(obj, protocol=proto))
        assert {k: v for k, v in got.items() if k != "a"} == \
            {k: v for k, v in obj.items() if k != "a"}, proto
        assert got["a"].flags.f_contiguous and np.array_equal(got["a"], obj["a"]), proto
    # a tensor repeating its storage's elements (a stride-0 view: 16 bytes of storage for
    # 2**31 x 4 values, which a copy made 32 GB) is refused; views within the storage
    # (a slice, a transpose) load as they are
    with pytest.raises(DDStoreValueError, match=r"a tensor of shape \(2147483648, 4\) over "
                                                r"a storage of 16 bytes"):
        restricted_loads(pickle.dumps({"x": torch.zeros(1, 4).expand(2 ** 31, 4)}))
    base = torch.arange(12.0).view(3, 4)
    got = restricted_loads(pickle.dumps({"s": base[1:], "t": base.t()}))
    assert torch.equal(got["s"], base[1:]) and torch.equal(got["t"], base.t())


class _ObjectState:
    """numpy's pickle of an object array of 2**20 elements whose state holds 3: numpy's
    ``__setstate__`` of it crashed the process (a segmentation fault) inside the
    restricted unpickler, whose names it only uses."""

    def __reduce__(self):  # (numpy's own _reconstruct, as an array's pickle names it)
        return (np.zeros(1).__reduce__()[0], (np.ndarray, (0,), b"b"),
                (1, (2 ** 20,), np.dtype("O"), False, [1, 2, 3]))


def test_writers_refuse_an_empty_key(tmp_path):
    """A graph key '' is refused by both writers, naming the sample and the key (it was
    written, then refused at the load by a message naming no sample)."""
    for sample in ({"": torch.ones(2, 1), "x": torch.ones(2, 1)},
                   torch_geometric.data.Data(x=torch.ones(2, 1))):
        if not isinstance(sample, dict):
            sample[""] = torch.ones(2, 1)
        for write in (graphs.write_adios, graphs.write_pickle_dir):
            with pytest.raises(DDStoreValueError, match=r"sample 0: key '' is not a "
                                                        r"non-empty str"):
                write([sample], str(tmp_path / "out"))
    assert os.listdir(tmp_path) == []


def test_restricted_unpickler_refuses_object_dtypes():
    """A dtype holding Python objects is refused wherever a pickle makes one (an array's,
    a structured dtype's field): no layer stores one, and numpy crashed on a hostile
    state; structured and string dtypes of numbers still load."""
    for obj in (_ObjectState(), np.array([1, "x"], dtype=object),
                {"x": np.zeros(3, dtype=[("a", "i4"), ("b", "O")])}):
        with pytest.raises(DDStoreValueError, match=r"o.pkl: not a readable pickle \("
                                                    r"ValueError: a numpy dtype holding "
                                                    r"Python objects \(object\)"):
            restricted_loads(pickle.dumps(obj, protocol=2), "o.pkl")
    for arr in (np.zeros(2, dtype=[("a", "i4"), ("b", "f8")]), np.array(["ab", "c"])):
        got = restricted_loads(pickle.dumps(arr))
        assert got.dtype == arr.dtype and got.tobytes() == arr.tobytes()


# ---------------------------------------------------------------------- sources
def test_pickle_dir_source_ranges(tmp_path):
    samples = [rich_sample(i) for i in range(10)]
    graphs.write_pickle_dir(samples, str(tmp_path / "p"))
    src = PickleDirSource(str(tmp_path / "p"))
    assert len(src) == 10
    got = list(src.read(3, 7))
    assert [i for i, _ in got] == [3, 4, 5, 6]
    for i, s in got:
        assert_graph_equal(s, samples[i], f"pff {i}")
    assert list(src.read(5, 5)) == []
    with pytest.raises(DDStoreIndexError, match=r"\[8, 11\)"):
        list(src.read(8, 11))
    # a directory without metadata: natural order of *.pkl
    plain = tmp_path / "plain"
    plain.mkdir()
    for i in (0, 2, 10, 1):
        with open(plain / f"mol-{i}.pkl", "wb") as f:
            pickle.dump(tensor_sample(i), f)
    src = PickleDirSource(str(plain))
    assert [os.path.basename(src.file(i)) for i in range(4)] == \
        ["mol-0.pkl", "mol-1.pkl", "mol-2.pkl", "mol-10.pkl"]
    assert_graph_equal(src.read_one(3), tensor_sample(10), "natural order")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "ddstore-pff.json").write_text("{not json")
    with pytest.raises(DDStoreValueError, match="ddstore-pff.json.*corrupt"):
        PickleDirSource(str(tmp_path / "broken"))
    with pytest.raises(DDStoreValueError, match="does not exist"):
        PickleDirSource(str(tmp_path / "nothing"))
    # metadata that does not match the files: a count of 10**12 over 10 files listed
    # 10**12 names (for ever); a pattern of a 100 MB name
    import json
    meta = tmp_path / "p" / "ddstore-pff.json"
    good = meta.read_text()
    for change, words in (({"nsamples": 10 ** 12}, r"nsamples=1000000000000 but the last "
                                                    r"sample's file .*sample-999999999999"
                                                    r"\.pkl' does not exist"),
                          ({"pattern": "s-{:0100000000d}.pkl"}, r"names a file of "
                                                                r"100000006 characters"),
                          # a smaller count dropped the later samples without a word
                          ({"nsamples": 4}, r"nsamples=4 but sample 4's file .*"
                                            r"sample-00000004\.pkl' exists too")):
        meta.write_text(json.dumps(dict(json.loads(good), **change)))
        with pytest.raises(DDStoreValueError, match=words):
            PickleDirSource(str(tmp_path / "p"))
    meta.write_text(good)
    assert len(PickleDirSource(str(tmp_path / "p"))) == 10
    # a glob for a directory whose metadata names its files (it was ignored unsaid)
    with pytest.raises(DDStoreValueError, match=r"pattern='sample-0000000\[0-2\].pkl' is "
                                                r"for a directory without ddstore-pff.json"):
        PickleDirSource(str(tmp_path / "p"), "sample-0000000[0-2].pkl")
    # an object pickled with protocol 0 or 1 (copyreg's reconstructor): told how to
    # write it (the message said only that Data is allowed)
    from ddstore.sources.pickle_dir import restricted_loads
    from torch_geometric.data import Data
    with pytest.raises(DDStoreValueError, match=r"copyreg._reconstructor, .*pickled with "
                                                r"protocol 0 or 1 .* protocol 2 or later"):
        restricted_loads(pickle.dumps(Data(x=torch.ones(2, 3)), protocol=1))


def test_adios_source_ranges(tmp_path):
    samples = [rich_sample(i) for i in range(9)]
    path = str(tmp_path / "g.bp")
    assert graphs.write_adios(samples, path) == 9
    with AdiosSource(path) as src:
        layout = graphs.GraphLayout(src.meta["layout"])
        assert len(src) == 9
        for start, stop in ((0, 9), (2, 5), (3, 4), (8, 9), (4, 4)):
            got = list(src.read(start, stop))
            assert [i for i, _ in got] == list(range(start, stop))
            for i, rec in got:
                assert_graph_equal(layout.to_data(rec), samples[i], f"cff {i}")
        # graph 3 has no nodes/edges: its rows are empty
        assert src.read_one(3)["x"].shape == (0, 3)
        # bool and float16 survive (stored as bit patterns)
        assert src.read_one(1)["mask"].dtype == np.bool_
        assert src.read_one(1)["edge_attr"].dtype == np.float16
        with pytest.raises(DDStoreIndexError, match=r"index 9 out of range \[0, 9\) in "
                                                    r"ADIOS2 file"):
            src.read_one(9)
        for bad in ("3", None, 1.5):  # (a bare TypeError for the first two before)
            with pytest.raises(DDStoreValueError, match=r"must be an integer in \[0, 9\)"):
                src.read_one(bad)
        with pytest.raises(DDStoreIndexError):
            list(src.read(5, 12))
    if os.path.isdir(path):  # BP4/BP5: an empty index was a segmentation fault in ADIOS2
        import shutil
        shutil.copytree(path, tmp_path / "noidx.bp")
        open(tmp_path / "noidx.bp" / "md.idx", "wb").close()
        with pytest.raises(DDStoreValueError, match=r"is corrupt: its index .*md.idx' is "
                                                    r"empty"):
            AdiosSource(str(tmp_path / "noidx.bp"))
    with pytest.raises(DDStoreValueError, match="empty data set"):
        graphs.write_adios([], str(tmp_path / "e.bp"))
    with pytest.raises(DDStoreValueError, match="sample 1"):
        graphs.write_adios([tensor_sample(0), rich_sample(1)], str(tmp_path / "m.bp"))
    assert not os.path.exists(tmp_path / "m.bp")  # the partial file is removed


def test_adios_records_every_byte_order(tmp_path):
    """Records of either byte order (complex and float16 are stored as reals and bit
    patterns) read back equal, value for value, with the dtype they were written with."""
    from ddstore.sources import write_records_adios
    rng = np.random.default_rng(4)
    vals = rng.standard_normal((3, 2, 2)) * 100
    for code in ("f2", "f4", "f8", "c8", "c16", "i2", "i4", "i8", "u2", "u8"):
        for order in "<>":
            dt = np.dtype(order + code)
            x = (vals + 1j * vals[::-1] if dt.kind == "c" else vals).astype(dt)
            path = str(tmp_path / f"{order == '>'}{code}.bp")
            write_records_adios([{"x": x[:1]}, {"x": x[1:]}], path)
            with AdiosSource(path) as src:
                for i, rows in ((0, x[:1]), (1, x[1:])):
                    got = src.read_one(i)["x"]
                    assert got.dtype == dt and got.tobytes() == rows.tobytes(), (dt, i)


def test_files_of_odd_samples_read_back(tmp_path):
    """A key whose rows hold no element (``x`` ``[n, 0]``) reads back from an ADIOS2
    file (reading it failed: "cannot convert float NaN to integer"); a big-endian numpy
    array is stored as its values in the machine's order (it was refused with "key 'a'
    has dtype float32, the records have >f4"); ``write_pickle_dir`` refuses, naming the
    sample, what its reader cannot load back (a torch uint16 tensor: torch's own
    ``pickle.loads`` fails on it), and leaves nothing at ``path``."""
    samples = [Data(x=torch.zeros(n, 0), pos=torch.arange(3.0 * n).view(n, 3))
               for n in (3, 2)]
    path = str(tmp_path / "zw.bp")
    assert graphs.write_adios(samples, path) == 2
    with AdiosSource(path) as src:
        layout = graphs.GraphLayout(src.meta["layout"])
        for i, rec in src.read(0, 2):
            assert_graph_equal(layout.to_data(rec), samples[i], f"zero-width {i}")
    big = Data(x=torch.ones(2, 1), a=np.arange(2, dtype=">f4"))
    layout, rec = graphs.GraphLayout.of(big)
    back = layout.to_data(rec)
    assert back.a.dtype == np.float32 and back.a.dtype.isnative
    assert back.a.tolist() == [0.0, 1.0]
    uint = [Data(x=torch.ones(2, 1)),
            Data(x=torch.ones(2, 1), u=torch.zeros(2).to(torch.uint16))]
    with pytest.raises(DDStoreValueError, match=r"sample 1 would not read back: "
                                                r"sample-00000001.pkl: not a readable pickle"):
        graphs.write_pickle_dir(uint, str(tmp_path / "pff"))
    assert not os.path.exists(tmp_path / "pff")


def test_adios_streaming_blocks(tmp_path):
    """write_records_adios streams any iterable in blocks (joined arrays): many tiny
    blocks, empty records and keys that are empty in whole blocks read back exactly;
    complex rows too (stored as pairs of reals: ADIOS2's Python reader has no complex)."""
    from ddstore.sources import write_records_adios
    rng = np.random.default_rng(3)
    recs = []
    for i in range(50):
        n = int(rng.integers(0, 4)) if i % 7 else 0
        recs.append({"a": rng.normal(size=(n, 2)).astype(np.float32),
                     "b": np.arange(i % 3 == 0, dtype=np.int64),  # 0 or 1 row
                     "m": rng.random(n) < 0.5,
                     "c": (rng.normal(size=(n, 3, 2)) + 1j * rng.normal(size=(n, 3, 2))
                           ).astype(np.complex64),
                     "z": rng.normal(size=n) - 1j * rng.normal(size=n)})
    path = str(tmp_path / "s.bp")
    assert write_records_adios((r for r in recs), path, meta={"x": 1},
                               block_bytes=40) == 50
    with AdiosSource(path) as src:
        assert len(src) == 50 and src.meta == {"x": 1}
        for start, stop in ((0, 50), (5, 23), (49, 50)):
            for i, rec in src.read(start, stop):
                for k in recs[i]:
                    assert rec[k].dtype == recs[i][k].dtype
                    assert np.array_equal(rec[k], recs[i][k]), (i, k)
    bad = recs[:10] + [dict(recs[0], a=np.zeros((1, 3), np.float32))]
    with pytest.raises(DDStoreValueError, match="record 10 key 'a'"):
        write_records_adios(iter(bad), path, block_bytes=40)
    with AdiosSource(path) as src:  # the failed write left the previous file as it was
        assert len(src) == 50 and src.meta == {"x": 1}
    assert os.listdir(tmp_path) == ["s.bp"]  # and nothing of its own
    with pytest.raises(DDStoreValueError, match="empty data set"):
        write_records_adios(iter([]), path)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(DDStoreValueError, match="cannot create the file"):
        write_records_adios(recs, str(tmp_path / "a_file" / "s.bp"))


def test_adios_writer_touches_only_its_own_files(tmp_path):
    """write_records_adios writes under a temporary name and moves the complete file
    into place: a user's directory or file at ``path`` is refused untouched, a failed
    write leaves the previous CFF file as it was, a good one replaces it."""
    from ddstore.sources import write_records_adios
    good = [{"x": np.arange(6.0).reshape(2, 3)}, {"x": np.ones((1, 3))}]
    bad = good + [{"x": np.ones((1, 4))}]  # record 2 differs
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("user data")
    (tmp_path / "file.bp").write_text("a user's file")
    for records in (good, bad):
        for path in (mine, tmp_path / "file.bp"):
            with pytest.raises(DDStoreValueError, match="exists and is not a ddstore CFF"):
                write_records_adios(records, str(path))
    assert os.listdir(mine) == ["keep.txt"] and (mine / "keep.txt").read_text() == \
        "user data" and (tmp_path / "file.bp").read_text() == "a user's file"
    empty = tmp_path / "empty.bp"
    empty.mkdir()  # nothing of anyone's in it: written
    assert write_records_adios(good, str(empty)) == 2
    with pytest.raises(DDStoreValueError, match="record 2 key 'x'"):
        write_records_adios(bad, str(empty))
    with AdiosSource(str(empty)) as src:  # the previous file, as it was
        assert len(src) == 2 and np.array_equal(src.read_one(0)["x"], good[0]["x"])
    assert write_records_adios(good[::-1], str(empty)) == 2  # replaces its own file
    with AdiosSource(str(empty)) as src:
        assert np.array_equal(src.read_one(0)["x"], good[1]["x"])
    # a file of the user's put into an earlier write's directory: refused, kept (the
    # replace removed it with the directory)
    (empty / "my-notes.txt").write_text("notes")
    with pytest.raises(DDStoreValueError, match=r"exists and is not a ddstore CFF.*also "
                                                r"holds 1 entries ADIOS2 does not write: "
                                                r"\['my-notes.txt'\]"):
        write_records_adios(good, str(empty))
    assert (empty / "my-notes.txt").read_text() == "notes"
    (empty / "my-notes.txt").unlink()
    assert sorted(os.listdir(tmp_path)) == ["empty.bp", "file.bp", "mine"]  # no leftovers
    # nor the timing report ADIOS2's reader writes into /tmp when it closes a file
    assert not os.path.exists(f"/tmp/empty.bp_{os.getpid():x}_profiling.json")


def test_writers_name_the_sample_that_failed(tmp_path, store):
    """A sample whose read raises is named by both writers (a bare KeyError before), as
    GraphDataset.from_samples names it; nothing is left on disk.  A tensor on torch's
    meta device is told as one that holds no values (it was "a dtype numpy has not")."""
    class Samples(torch.utils.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            if i == 3:
                raise KeyError("missing shard")
            return Data(x=torch.ones(2, 1) * i)
    for write, path in ((graphs.write_pickle_dir, tmp_path / "p"),
                        (graphs.write_adios, tmp_path / "a.bp")):
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"{write.__name__}({str(path)!r}): samples[3] raised KeyError: 'missing "
                f"shard' (len(samples) is 5)")):
            write(Samples(), str(path))
    assert os.listdir(tmp_path) == []
    meta = [Data(x=torch.ones(2, 1), m=torch.empty(2, 3, device="meta"))] * 2
    with pytest.raises(DDStoreValueError, match="key 'm': a tensor on torch's meta device "
                                                "holds no values"):
        graphs.GraphDataset.from_samples(store, "meta", meta, progress=False)


def test_pickle_writer_touches_only_its_own_files(tmp_path):
    """write_pickle_dir writes a new directory and moves it into place: a directory
    holding anything of the user's is refused untouched (a PFF one with one file of
    theirs too), a failed write leaves the previous data set as it was."""
    samples = [tensor_sample(0), tensor_sample(1)]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sample-00000000.pkl").write_text("the user's own file of that name")
    with pytest.raises(DDStoreValueError, match=r"^write_pickle_dir\(.*exists and is "
                                                r"not a ddstore PFF"):
        graphs.write_pickle_dir(samples, str(mine))  # (the call named: not the inner one)
    with pytest.raises(DDStoreValueError, match=r"^write_adios\(.*exists and is not a "
                                                r"ddstore CFF"):
        graphs.write_adios(samples, str(mine))
    assert os.listdir(mine) == ["sample-00000000.pkl"]
    assert (mine / "sample-00000000.pkl").read_text() == "the user's own file of that name"
    pff = tmp_path / "pff"
    assert graphs.write_pickle_dir(samples, str(pff)) == 2
    with pytest.raises(Exception):  # a sample that cannot be pickled, halfway
        graphs.write_pickle_dir([tensor_sample(2), lambda: 0, tensor_sample(3)], str(pff))
    assert_graph_equal(PickleDirSource(str(pff)).read_one(1), samples[1], "kept")
    assert graphs.write_pickle_dir(samples[::-1], str(pff)) == 2  # replaces its own
    assert_graph_equal(PickleDirSource(str(pff)).read_one(1), samples[0], "replaced")
    (pff / "notes.txt").write_text("the user's notes")
    with pytest.raises(DDStoreValueError, match="also holds 1 other entries.*notes.txt"):
        graphs.write_pickle_dir(samples, str(pff))
    assert (pff / "notes.txt").read_text() == "the user's notes"
    # an earlier write whose metadata says 10**12 samples (made by hand): refused from
    # the directory's listing at once (it built 10**12 names, for ever)
    (pff / "notes.txt").unlink()
    meta = json.loads((pff / "ddstore-pff.json").read_text())
    (pff / "ddstore-pff.json").write_text(json.dumps(dict(meta, nsamples=10 ** 12)))
    with pytest.raises(DDStoreValueError, match=r"it holds 3 entries, its ddstore-pff.json "
                                                r"says 1000000000000 samples"):
        graphs.write_pickle_dir(samples, str(pff))
    assert sorted(os.listdir(tmp_path)) == ["mine", "pff"]  # no leftovers
    # a file-name pattern that leaves the directory, names one file for every sample or
    # the metadata file: refused before anything is written (a user's file was
    # overwritten)
    from ddstore.sources import write_pickle_files
    victim = tmp_path / "victim0.pkl"
    victim.write_text("precious")
    for pattern, words in ((str(tmp_path / "victim{}.pkl"), "outside the directory"),
                           ("../escaped{}.pkl", "outside the directory"),
                           ("sub/s{}.pkl", "outside the directory"),
                           ("same.pkl", "names the same file for every sample"),
                           ("ddstore-pff.json", "outside the directory or not a file"),
                           ("s{:s}.pkl", "cannot name a sample by its number")):
        with pytest.raises(DDStoreValueError, match=rf"^write_pickle_files\(.*\): pattern="
                                                    rf".*{re.escape(words)}"):
            write_pickle_files(samples[:1] if pattern == "ddstore-pff.json" else samples,
                               str(tmp_path / "out"), pattern=pattern)
    assert victim.read_text() == "precious"
    assert sorted(os.listdir(tmp_path)) == ["mine", "pff", "victim0.pkl"]


def test_sequence_source_touches_only_range():
    seen = []

    class Lazy:
        def __len__(self):
            return 100

        def __getitem__(self, i):
            seen.append(i)
            return i

    src = SequenceSource(Lazy())
    assert [v for _, v in src.read(40, 45)] == [40, 41, 42, 43, 44]
    assert seen == [40, 41, 42, 43, 44]
    with pytest.raises(DDStoreValueError):
        SequenceSource(5)
    assert issubclass(DDStoreValueError, DDStoreError)


def test_a_source_yielding_other_indices_is_refused(store):
    """A user's Source whose ``read(lo, hi)`` leaves a sample out, yields one past the
    range or out of order is refused naming the range (its records were stored shifted:
    ``ds[3]`` was sample 4, the last graphs out of range); nothing is stored."""
    from ddstore.sources import Source

    def make(reads):
        class Bad(Source):
            def __len__(self):
                return 6

            def read_one(self, i):
                return Data(x=torch.full((2, 1), float(i)))

            def read(self, a, b):
                for i in reads(a, b):
                    yield i, self.read_one(min(i, 5))
        return Bad()
    for reads, told in ((lambda a, b: range(a, b - 1), r"stopped after 5 samples"),
                        (lambda a, b: range(a, b + 1), r"yielded index 6 where the range "
                                                       r"had ended"),
                        (lambda a, b: [0, 2, 1, 3, 4, 5], r"yielded index 2 where 1 was "
                                                          r"next")):
        with pytest.raises(DDStoreValueError, match=r"Bad\.read\(0, 6\) " + told +
                           r"; it must yield \(index, sample\) for every index of "
                           r"\[0, 6\), in order"):
            graphs.GraphDataset.from_source(store, "bad", make(reads), progress=False)
        assert store.variables() == []
    ok = graphs.GraphDataset.from_source(store, "ok", make(range), progress=False)
    assert [float(ok[i].x[0, 0]) for i in range(6)] == [0, 1, 2, 3, 4, 5]


# ---------------------------------------------------------------------- MPI programs
@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
@pytest.mark.shared_launch("graphs_roundtrip.py", timeout=180)
def test_mpi_roundtrip(shared_launch, nprocs):
    """Every source, width and transport on 1-3 ranks; on 4 ranks (two replicas of
    width 2) GraphDataset is built and read, every graph compared, in
    tests/mpi/datasets_checkpoint.py (7 s of the oversubscribed 4-rank job saved)."""
    from conftest import summary_of
    checks, failed, ranks = summary_of(shared_launch, "graphs_roundtrip")
    # 6 data sets of 24-36 graphs, each read one by one, in a batch and in an epoch
    assert checks >= 100 * nprocs and failed == 0 and ranks == nprocs, shared_launch


@pytest.mark.mpi
@pytest.mark.shared_launch("graphs_errors.py", nprocs=3, timeout=180)
def test_mpi_errors(shared_launch):
    assert "graphs_errors: 3 ranks" in shared_launch, shared_launch


# ---------------------------------------------------------------------- loaders
def test_loader_set_epoch_reaches_the_sampler(store):
    """set_epoch on the graph loader (through PrefetchLoader / DevicePrefetcher, and
    spatiotemporal.set_epoch on the plain DataLoader) reaches the DistributedSampler
    inside its BatchSampler: each epoch's batches are DistributedSampler's order of that
    epoch.  It used to stop at the BatchSampler: the same order every epoch."""
    from ddstore import spatiotemporal as st
    samples = [Data(x=torch.full((2 + i % 3, 2), float(i)),
                    edge_index=torch.zeros(2, 1, dtype=torch.int64),
                    y=torch.tensor([float(i)])) for i in range(23)]
    ds = graphs.GraphDataset.from_samples(store, "epochs", samples, progress=False)
    for prefetch, device in ((0, None), (2, None), (0, "cpu"), (2, "cpu")):
        smp = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1, seed=4)
        ld = ds.loader(4, sampler=smp, prefetch=prefetch, device=device)
        orders = []
        for epoch in (0, 1, 2):
            (ld.set_epoch if hasattr(ld, "set_epoch") else
             lambda e: st.set_epoch(ld, e))(epoch)
            assert smp.epoch == epoch, (prefetch, device)
            got = [int(v) for b in ld for v in b.y.tolist()]
            ref = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1, seed=4)
            ref.set_epoch(epoch)
            assert got == list(ref), (prefetch, device, epoch)
            orders.append(got)
        assert orders[0] != orders[1] != orders[2], (prefetch, device)


def test_shuffled_loader_same_batches_whatever_the_pipeline(store):
    """shuffle=True under one torch.manual_seed: the loader with device="cpu" (rows read
    straight into the staging), with read-ahead, or both, gives the plain loader's
    batches in its order, and leaves torch's generator where the plain loader does (the
    staged path skipped the draw a DataLoader's iterator makes: another order)."""
    samples = [Data(x=torch.full((2, 1), float(i)), edge_index=torch.zeros(2, 1,
                    dtype=torch.int64), y=torch.tensor([float(i)])) for i in range(19)]
    ds = graphs.GraphDataset.from_samples(store, "shuffled", samples, progress=False)

    def epochs(**kw):
        torch.manual_seed(123)
        ld = ds.loader(4, shuffle=True, **kw)
        got = [[int(v) for v in b.y.tolist()] for _ in range(2) for b in ld]
        return got, torch.rand(1).item()
    plain = epochs()
    assert sorted(v for b in plain[0][:5] for v in b) == list(range(19))
    for kw in (dict(device="cpu"), dict(device="cpu", prefetch=2), dict(prefetch=2),
               dict(device="cpu", pin_memory=False)):
        assert epochs(**kw) == plain, kw


def test_plain_loader_is_torchs_loader_without_its_iterator(store):
    """ds.loader(...) without other DataLoader options: a DataLoader whose epoch reads
    each batch with one get_batch (torch's iterator cost 185 us of a 1 ms batch): the
    batches, len, torch's generator after the epochs and the profiler's scopes are
    those of the loader with an option passed through (torch's own iterator)."""
    from torch.profiler import ProfilerActivity, profile
    samples = [Data(x=torch.full((1 + i % 3, 2), float(i)), y=torch.tensor([float(i)]),
                    edge_index=torch.tensor([[0], [i % (1 + i % 3)]])) for i in range(17)]
    ds = graphs.GraphDataset.from_samples(store, "plain", samples, progress=False)
    runs = []
    for kw in ({}, {"timeout": 0}):
        torch.manual_seed(5)
        ld = ds.loader(4, shuffle=True, **kw)
        assert isinstance(ld, torch.utils.data.DataLoader) and len(ld) == 5
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            got = [b for _ in range(2) for b in ld]
        scopes = sum(e.name.startswith("enumerate(DataLoader)#") for e in prof.events())
        runs.append((got, torch.rand(1).item(), scopes, type(ld).__name__))
    (mine, after, scopes, cls), (ref, ref_after, ref_scopes, ref_cls) = runs
    assert (cls, ref_cls) == ("_GraphLoader", "DataLoader")
    assert len(mine) == len(ref) == 10 and after == ref_after and scopes == ref_scopes
    for a, b in zip(mine, ref):
        assert type(a) is type(b) and a.num_graphs == b.num_graphs
        for key in ("x", "y", "edge_index", "batch", "ptr"):
            assert torch.equal(a[key], b[key]), key


def test_data_subclasses_with_their_own_batching_refused(store):
    """A Data subclass with its own __inc__ or __cat_dim__ (PyG's PairData) is refused
    naming the hook: batches here follow Data's rules, which would differ from
    Batch.from_data_list of the subclass (they were built and batched wrong); a
    subclass without them is stored; a bfloat16 tensor is refused naming the ways to
    store it."""
    class PairData(Data):
        def __inc__(self, key, value, *args, **kwargs):
            if key == "edge_index_s":
                return self.x_s.size(0)
            return super().__inc__(key, value, *args, **kwargs)

    class Tagged(Data):
        pass
    pair = PairData(x_s=torch.ones(3, 1), edge_index_s=torch.zeros(2, 1, dtype=torch.int64))
    with pytest.raises(DDStoreValueError, match=r"is a PairData, a Data subclass "
                                                r"with its own __inc__"):
        graphs.GraphDataset.from_samples(store, "pairs", [pair], progress=False)
    tagged = Tagged(x=torch.ones(2, 1), edge_index=torch.tensor([[0], [1]]))
    ds = graphs.GraphDataset.from_samples(store, "tagged", [tagged] * 2, progress=False)
    assert ds.get_batch([0, 1]).edge_index.tolist() == [[0, 2], [1, 3]]
    with pytest.raises(DDStoreValueError, match=r"key 'x': tensor dtype "
                                                r"torch.bfloat16 .*value.float\(\)"):
        graphs.GraphDataset.from_samples(store, "bf", [Data(x=torch.ones(
            2, 1, dtype=torch.bfloat16))], progress=False)
    # one Data, not a list of them (it was taken as a sequence of its keys: sample 0's
    # KeyError: 0)
    with pytest.raises(DDStoreValueError, match=r"samples must be a sequence of samples, "
                                                r"got a Tagged \(one sample: pass \[data\]\)"):
        graphs.GraphDataset.from_samples(store, "one", tagged, progress=False)
    assert "pairs" not in store and "bf" not in store and "one" not in store
    batch = Batch.from_data_list([tagged, tagged])  # a Batch is a sequence of samples
    ds = graphs.GraphDataset.from_samples(store, "fromb", batch, progress=False)
    assert len(ds) == 2 and torch.equal(ds[1].x, tagged.x)


def test_what_plain_tensors_would_batch_otherwise_is_refused(store, tmp_path):
    """A Data subclass with its own num_nodes, an EdgeIndex whose sparse size PyG takes
    as the node count, an Index whose dim_size PyG offsets a batch key by: stored as
    plain tensors and plain Data they gave other batches than Batch.from_data_list
    (the thirty-fifth session's probe), so each is refused naming what to set; one
    whose plain values batch alike is stored and batches as PyG's.  The pickle reader
    names the tensor subclass it does not make and the way out."""
    from torch_geometric import EdgeIndex
    from torch_geometric.index import Index

    class Mesh(Data):
        @property
        def num_nodes(self):
            return self.n_vertices

    ei = torch.tensor([[0, 1], [1, 0]])
    cases = [
        (Mesh(n_vertices=5, edge_index=ei), r"a Data subclass with its own num_nodes"),
        (Data(edge_index=EdgeIndex(ei, sparse_size=(10, 10)), edge_attr=torch.ones(2)),
         r"key 'edge_index' holds a EdgeIndex tensor, .* give the graph 2 nodes where "
         r"PyG counts 10: set num_nodes=10 in the sample"),
        (Data(x=torch.ones(3), cluster_batch=Index([0, 1, 1], dim_size=4)),
         r"key 'cluster_batch' .* offset by 2 where PyG offsets by 4: .*as_tensor\(\)")]
    for sample, message in cases:
        with pytest.raises(DDStoreValueError, match=message):
            graphs.GraphDataset.from_samples(store, "sub", [sample] * 2, progress=False)
        assert "sub" not in store
    alike = [Data(x=torch.ones(3, 1), edge_index=EdgeIndex(ei, sparse_size=(3, 3)))] * 2
    ds = graphs.GraphDataset.from_samples(store, "alike", alike, progress=False)
    assert ds.get_batch([0, 1]).edge_index.tolist() == \
        Batch.from_data_list(alike).edge_index.tolist()
    with open(tmp_path / "0.pkl", "wb") as f:
        pickle.dump(alike[0], f)
    with pytest.raises(DDStoreValueError, match=r"rebuilds a subclass of torch.Tensor "
                                                r"\(such as PyG's EdgeIndex and Index\)"):
        graphs.GraphDataset.from_pickle_dir(store, "pff", str(tmp_path), progress=False)


def test_transform_applied_on_every_access_as_pyg(store):
    """``transform`` (PyG's ``Dataset.transform``; the thirty-third session's probe: an
    attribute set on the dataset was silently ignored): every graph read is the
    transformed one, as a PyG ``Dataset`` with that transform gives it, through
    ``ds[i]``, ``__getitems__``, ``get_batch``, the loader (plain and staged), PyG's own
    ``DataLoader``, views and a dataset reopened by name."""
    import torch_geometric.transforms as T
    from torch_geometric.loader import DataLoader as PyGLoader
    rng = np.random.default_rng(0)
    samples = [Data(x=torch.from_numpy(rng.random((3 + i, 2), dtype=np.float32)),
                    edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([i]))
               for i in range(7)]
    tf = T.Compose([T.Constant(value=2.0), T.NormalizeFeatures()])

    def want(i):
        return tf(samples[i].clone())
    ds = graphs.GraphDataset.from_samples(store, "tf", samples, progress=False,
                                          transform=tf)
    for i in range(7):
        assert_graph_equal(ds[i], want(i), f"ds[{i}]")
    assert ds.num_node_features == 3  # (PyG's: of the first graph as read)
    for got, i in zip(ds.__getitems__([4, 0, 6]), [4, 0, 6]):
        assert_graph_equal(got, want(i), f"__getitems__ {i}")
    assert_batch_equal(ds.get_batch([2, 5]), Batch.from_data_list([want(2), want(5)]),
                       "get_batch")
    for kwargs in ({}, {"device": "cpu"}, {"prefetch": 1}):
        got = list(ds.loader(3, **kwargs))
        assert len(got) == 3, kwargs
        for b, part in zip(got, ([0, 1, 2], [3, 4, 5], [6])):
            assert_batch_equal(b, Batch.from_data_list([want(i) for i in part]),
                               f"loader {kwargs} {part}")
    for b, part in zip(PyGLoader(ds, batch_size=4), ([0, 1, 2, 3], [4, 5, 6])):
        assert_batch_equal(b, Batch.from_data_list([want(i) for i in part]),
                           f"PyG's DataLoader {part}")
    view = ds[[6, 1]]
    assert_graph_equal(view[0], want(6), "view")
    assert all(torch.equal(g.x, want(int(i)).x) for g, i in zip(*_shuffled(ds)))
    # the attribute, as PyG's: None gives the graphs as stored, another one applies
    ds.transform = None
    assert_graph_equal(ds[3], samples[3], "no transform")
    assert_batch_equal(ds.get_batch([3]), Batch.from_data_list([samples[3]]),
                       "no transform: get_batch")
    ds.transform = T.Constant(value=5.0)
    assert float(ds[3].x[0, -1]) == 5.0
    # num_classes of the graphs as read, as PyG's: a transform adding or dropping y
    ds.transform = None
    assert ds.num_classes == 7

    def add_y(g):
        g.y = torch.tensor([int(g.num_nodes)])
        return g

    def drop_y(g):
        del g.y
        return g
    ds.transform = add_y
    assert ds.num_classes == 10  # node counts 3..9
    ds.transform = drop_y
    assert ds.num_classes == 0
    back = graphs.GraphDataset.open(store, "tf", transform=tf)
    assert_graph_equal(back[4], want(4), "open(transform=)")


def _shuffled(ds):
    view, perm = ds.shuffle(return_perm=True)
    return [view[i] for i in range(len(view))], perm


def test_float_tensor_index_refused(store):
    """A 0-d float or bool tensor is not an index (tensor(3.7) was graph 3)."""
    samples = [Data(x=torch.full((2, 1), float(i))) for i in range(5)]
    ds = graphs.GraphDataset.from_samples(store, "fidx", samples, progress=False)
    for bad in (torch.tensor(3.7), torch.tensor(3.0), torch.tensor(True)):
        # an IndexError, as PyG's Dataset raises
        with pytest.raises(DDStoreIndexError, match=r"'fidx': index must be an integer, "
                                                    r"or a slice.*, got tensor\("):
            ds[bad]
    assert float(ds[torch.tensor(3, dtype=torch.int16)].x[0, 0]) == 3.0


def test_loader_refuses_the_options_it_sets(store):
    """``collate_fn``, ``batch_sampler`` and ``dataset`` passed through ``**kwargs`` are
    refused naming them (they were torch's "multiple values for keyword" TypeError);
    other DataLoader options pass through and give the same batches."""
    samples = [Data(x=torch.full((2, 2), float(i)), y=torch.tensor([float(i)]),
                    edge_index=torch.zeros(2, 1, dtype=torch.int64)) for i in range(6)]
    ds = graphs.GraphDataset.from_samples(store, "fixed", samples, progress=False)
    for kw in (dict(collate_fn=None), dict(batch_sampler=None), dict(dataset=None)):
        with pytest.raises(DDStoreValueError, match=f"{next(iter(kw))} cannot be given"):
            ds.loader(2, **kw)
    # PyG's DataLoader options: named, with the loader that takes them (torch's bare
    # "unexpected keyword argument" TypeError before)
    for kw in (dict(follow_batch=["x"]), dict(exclude_keys=["y"])):
        with pytest.raises(DDStoreValueError, match=f"{next(iter(kw))} is an option of "
                                                    f"PyG's DataLoader, not of this"):
            ds.loader(2, **kw)
    from torch_geometric.loader import DataLoader as PyGLoader
    batch = next(iter(PyGLoader(ds, 3, follow_batch=["x"])))
    assert batch.x_batch.tolist() == [0, 0, 1, 1, 2, 2]
    got = [b.y.tolist() for b in ds.loader(2, timeout=0)]
    assert got == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    # options of worker processes, which the loader never starts: named at once (torch
    # refused them at the first batch, worker_init_fn went unused)
    for kw in (dict(timeout=5), dict(prefetch_factor=2), dict(persistent_workers=True),
               dict(multiprocessing_context="fork"), dict(worker_init_fn=print)):
        with pytest.raises(DDStoreValueError, match=f"{next(iter(kw))} is an option of "
                                                    f"DataLoader's worker processes"):
            ds.loader(2, **kw)
    # a batch_size beyond the samples is one batch (none with drop_last), up to 2**63
    # (torch's BatchSampler failed in islice, or made a list of batch_size items)
    for size in (7, 2 ** 63, 2 ** 70):
        assert [b.y.tolist() for b in ds.loader(size)] == [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]
        assert list(ds.loader(size, drop_last=True)) == []
    # a sampler that grows after the loader is made: batches of batch_size, as torch's
    order = [0, 1]
    loader = ds.loader(4, sampler=order)
    assert [b.y.tolist() for b in loader] == [[0.0, 1.0]]
    order.extend([2, 3, 4, 5])
    assert [b.y.tolist() for b in loader] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0]]
    for kw in (dict(shuffle="no"), dict(drop_last=1)):
        with pytest.raises(DDStoreValueError, match=f"{next(iter(kw))} must be True or False"):
            ds.loader(2, **kw)


def test_views_as_pyg_index_select(store):
    """``ds[slice / list / tuple / range / tensor / array / mask]``, ``index_select`` and
    ``shuffle`` give views equal to PyG's ``InMemoryDataset`` of the same graphs (they
    were refused: "index must be an integer"), and views of views; reads, batches and
    loaders of a view take its positions; ``num_classes`` / ``num_node_features`` as
    PyG infers them."""
    from torch_geometric.data import Batch, InMemoryDataset

    class Ref(InMemoryDataset):
        def __init__(self, data_list):
            super().__init__(None)
            self.data, self.slices = self.collate(data_list)
    gen = torch.Generator().manual_seed(0)
    samples = [Data(x=torch.randn(i % 4 + 1, 3, generator=gen), y=torch.tensor([i % 5]),
                    edge_index=torch.zeros(2, 0, dtype=torch.long)) for i in range(23)]
    ref = Ref(samples)
    ds = graphs.GraphDataset.from_samples(store, "views", samples, progress=False)

    def same(view, want):
        assert len(view) == len(want)
        for i in range(len(want)):
            assert torch.equal(view[i].x, want[i].x) and torch.equal(view[i].y, want[i].y)
    for idx in (slice(2, 9), slice(None, 0.5), slice(-5, None), slice(None, None, -2),
                [0, 5, -1, 3], (1, 2), torch.tensor([4, 2]), np.array([7, 1]),
                torch.arange(23) % 3 == 0, np.arange(23) % 2 == 1, range(3, 12, 4)):
        view, want = ds[idx], ref[idx]
        same(view, want)
        same(view[1:], want[1:])
        same(ds.index_select(idx), want)
        whole = Batch.from_data_list([want[i] for i in range(len(want))])
        got = view.get_batch(range(len(view)))
        assert torch.equal(got.x, whole.x) and torch.equal(got.batch, whole.batch)
        assert [b.y.tolist() for b in view.loader(3)] == [
            Batch.from_data_list([want[i] for i in range(k, min(k + 3, len(want)))])
            .y.tolist() for k in range(0, len(want), 3)]
    assert (ds.num_classes, ds.num_node_features, ds.num_features) == \
        (ref.num_classes, ref.num_node_features, ref.num_features) == (5, 3, 3)
    torch.manual_seed(5)
    view, perm = ds.shuffle(return_perm=True)
    torch.manual_seed(5)
    want, wperm = ref.shuffle(return_perm=True)
    assert torch.equal(perm, wperm)
    same(view, want)
    assert "a view" in repr(view) and len(ds) == 23  # (the dataset itself unchanged)
    # a boolean mask flattened, as in PyG: [len, 1] (y > k), shorter than len
    for mask in (torch.arange(23).view(23, 1) % 3 == 0, torch.tensor([False, True]),
                 np.arange(23) % 2 == 1):
        same(ds[mask], ref[mask])
    for bad, words in ((slice(0, 5, 0), "slice step cannot be zero"),
                       ([23], r"index 23 \(position 0\) out of range \[-23, 23\)"),
                       ([True, False], r"a list of bools is ambiguous \(PyG's Dataset reads "
                                       r"it as the indices 0 and 1, numpy as a mask\)"),
                       (torch.arange(24) > 22, r"index 23 \(position 0\) out of range"),
                       ([2 ** 63], r"index 9223372036854775808 \(position 0\) out of range "
                                   r"\[-23, 23\)"),
                       ("a", "index must be an integer, or a slice, list"),
                       (slice(None, float("nan")), r"index_select: slice\(None, nan, None\): "
                                                   r"cannot convert float NaN"),
                       (slice(float("inf"), None), r"slice\(inf, None, None\): cannot "
                                                   r"convert float infinity")):
        with pytest.raises((DDStoreValueError, DDStoreIndexError), match=words):
            ds[bad]
    # indices of another type than integers or bools: an IndexError, as PyG's Dataset
    # raises (a DDStoreValueError before)
    for bad in (torch.tensor([1.5]), np.array([1.0]), [1.0], ["a"], np.array([1 + 0j])):
        for call in (lambda: ds[bad], lambda: ds.get_batch(bad),
                     lambda: ds.__getitems__(bad)):
            with pytest.raises(IndexError, match="indices must be a 1-D sequence of "
                                                 "integers"):
                call()


def test_no_progress_bar_made_where_none_is_shown(store, monkeypatch):
    """progress=False (and every rank but 0) makes no tqdm at all: a disabled tqdm
    still starts tqdm's monitor thread, which stayed after the store was freed."""
    import tqdm as tqdm_module

    def no_bar(*args, **kwargs):
        raise AssertionError("a tqdm was made with nothing to show")
    monkeypatch.setattr(tqdm_module, "tqdm", no_bar)
    samples = [Data(x=torch.full((2, 1), float(i))) for i in range(4)]
    ds = graphs.GraphDataset.from_samples(store, "quiet", samples, progress=False)
    assert float(ds[3].x[0, 0]) == 3.0
    from ddstore.dynamic import DynamicGraph
    g = DynamicGraph(store, "quietg", [np.array([[0, 1], [1, 0]])] * 3, num_nodes=2)
    assert g.num_steps == 3
