"""MPI program: inputs that differ between ranks, or that only all the ranks together
can find wrong, are refused on every rank naming what is wrong (issue 35, part 4).

- ``pyg.from_pyg`` / ``pyg.from_hetero`` / ``TemporalGraph.from_pyg`` handed data of
  the same shapes and dtypes but other values on one rank (a shuffled copy, one value
  changed, another ``split``): the same error on every rank naming the value and the
  ranks that hold each fingerprint; nothing stored; equal data (numpy on one rank,
  torch on another) loads;
- ``WindowDataset`` of an in-memory series (an array, a tensor, ``from_arrays``) whose
  values, ``edge_index``, ``edge_weight``, ``timestamps`` or ``time_features`` differ
  in one element on the last rank, and ``DynamicGraph`` of in-memory ``edges`` /
  ``weights`` lists that do: the same error on every rank naming only that value and
  the ranks holding each fingerprint; nothing stored; equal data in other layouts (C,
  Fortran, torch) loads, every window and step as given; a lazy ``edges`` sequence is
  still read only for the rank's own steps;
- ``pyg.load_ogb`` / ``pyg.load_npy`` of a split that lists a node twice, the two rows
  read by two ranks (OGB's train: 23 ids for 20 nodes): the file and line of the repeat
  named on every rank; nothing stored;
- ``pyg.put_node_data`` of a source whose labels are not class ids (2**63 - 1: no
  ``num_classes``): refused naming the node;
- the file readers handed a file that differs on the last rank (another path here: a
  stale copy on one node in a real job): ``GraphDataset.from_pickle_dir`` (a sample of
  another size, one of the same size with other bytes, a directory without metadata),
  ``from_adios``, ``WindowDataset`` of ``load_npy`` / ``load_pems_h5`` /
  ``load_pgt_json`` series (other bytes, fewer steps), ``DynamicGraph.from_series``,
  ``pyg.load_ogb`` / ``load_npy``: the same error on every rank naming that rank's file
  and size, nothing stored; an identical copy (the same path for the PyG loaders, whose
  data set's repr names it) loads, every value as the file holds it.

    timeout 600 mpiexec -n 2 python tests/mpi/inputs_check.py
"""
import os
import shutil

import numpy as np
import torch

from _harness import Cases, check, comm, expect_error, rank, run_main, shared_tmpdir, size

import ddstore
from ddstore import DDStoreValueError
from ddstore import pyg as dpyg
from ddstore.sources import write_ogb_node
from ddstore.temporal import TemporalGraph

cases = Cases()


def _odd():
    """The ranks whose data differs in the cases below (rank 1), and the others."""
    return "rank 1", "rank 0" if size == 2 else "ranks 0, " + ", ".join(
        str(r) for r in range(2, size))


@cases("from_pyg: the same shapes, other values", min_ranks=2)
def _(t):
    from torch_geometric.data import Data
    g = torch.Generator().manual_seed(1)
    n, m = 30, 90
    x = torch.randn(n, 4, generator=g)
    ei = torch.randint(0, n, (2, m), generator=g)
    w = torch.rand(m, generator=g)
    with ddstore.DDStore(comm) as st:
        # equal data as numpy on one rank and torch on another: loaded
        mine = Data(x=x.numpy() if rank % 2 else x, edge_index=ei, w=w, num_nodes=n)
        fs, gs = dpyg.from_pyg(st, mine, name="ok", weight_attr="w")
        check(sorted(st.variables()) != [], "equal data was not stored")
        odd, even = _odd()
        for label, change, key in (
                ("x shuffled", lambda d: setattr(d, "x", d.x[torch.randperm(n)]), "x"),
                ("one edge", lambda d: d.edge_index.__setitem__((1, 7), 8 + (
                    d.edge_index[1, 7] == 8)), "edge_index"),
                ("one weight", lambda d: d.w.__setitem__(0, 0.5), "w")):
            data = Data(x=x.clone(), edge_index=ei.clone(), w=w.clone(), num_nodes=n)
            if rank == 1:
                change(data)
            before = st.variables()
            msg = expect_error(DDStoreValueError, [
                "pyg.from_pyg('g') is collective and needs the same settings on every "
                f"rank: data {key!r} differs between ranks (", f"{odd}: ", f"{even}: ",
                "fingerprint 0x"], dpyg.from_pyg, st, data, name="g", weight_attr="w",
                what=f"from_pyg, {label}", agree=True, store=st)
            check(msg is None or "differs" not in msg.split(f"{key!r} differs")[1],
                  f"{label}: only {key!r} named: {msg}")
            check(st.variables() == before, f"{label}: variables changed")


@cases("from_hetero: one edge type's index differs", min_ranks=2)
def _(t):
    from torch_geometric.data import HeteroData
    h = HeteroData()
    h["a"].x, h["b"].x = torch.zeros(5, 2), torch.ones(4, 2)
    ei = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]])
    h["a", "to", "b"].edge_index = ei.flip(1) if rank == 1 else ei
    with ddstore.DDStore(comm) as st:
        expect_error(DDStoreValueError, [
            "pyg.from_hetero('h') is collective", "data (('a', 'to', 'b'), 'edge_index') "
            "differs between ranks"], dpyg.from_hetero, st, h, name="h", agree=True,
            store=st)


@cases("TemporalGraph.from_pyg: another split, another time", min_ranks=2)
def _(t):
    from torch_geometric.data import TemporalData
    n = 40
    src, dst = torch.arange(n) % 7, (torch.arange(n) * 3) % 11 + 7
    tt = torch.arange(n, dtype=torch.int64)
    data = TemporalData(src=src, dst=dst, t=tt, msg=torch.ones(n, 2))
    split = np.zeros(n, np.int64)
    split[30:] = 2
    with ddstore.DDStore(comm) as st:
        g = TemporalGraph.from_pyg(st, "ok", data, split=split)
        check(g.num_edges == n, "equal data and split: not loaded")
        g.remove()
        other = split.copy()
        if rank == 1:
            other[[3, 35]] = other[[35, 3]]
        odd, even = _odd()
        expect_error(DDStoreValueError, [
            "TemporalGraph.from_pyg('g') is collective", "argument 'split' differs between "
            "ranks (", f"{odd}: int64 [{n}], fingerprint 0x", f"{even}: int64 [{n}]"],
            TemporalGraph.from_pyg, st, "g", data, split=other, agree=True, store=st)
        times = tt.clone()
        if rank == 1:
            times[5] = 6  # still sorted, the same shape and dtype
        expect_error(DDStoreValueError, ["TemporalGraph.from_pyg('g') is collective",
                                         "TemporalData 't' differs between ranks",
                                         "; every rank must pass the same TemporalData"],
                     TemporalGraph.from_pyg, st, "g",
                     TemporalData(src=src, dst=dst, t=times, msg=torch.ones(n, 2)),
                     agree=True, store=st)
        # a bad event in the last rank's share: named by its index in data (it was
        # named by its index in the share: dst[1] for event 39 on the last rank)
        bad_dst, bad_t = dst.clone(), tt.double()
        bad_dst[n - 1], bad_t[n - 2] = -2, float("nan")
        expect_error(ddstore.DDStoreIndexError, [f"dst[{n - 1}] = -2 is negative"],
                     TemporalGraph.from_pyg, st, "g",
                     TemporalData(src=src, dst=bad_dst, t=tt), agree=True, store=st)
        expect_error(DDStoreValueError, [f"t[{n - 2}] = nan is NaN or infinite"],
                     TemporalGraph.from_pyg, st, "g",
                     TemporalData(src=src, dst=dst, t=bad_t), split=split, agree=True,
                     store=st)
        check("g/edges" not in st, "a refused from_pyg left variables")


def _last():
    """The last rank (whose data differs in the cases below) and the others."""
    return f"rank {size - 1}", "rank 0" if size == 2 else "ranks 0, " + ", ".join(
        str(r) for r in range(1, size - 1))


def _only(msg, key, label):
    """``msg`` names ``key`` and no other setting as differing."""
    check(msg is None or msg.count(" differs between ranks") == 1,
          f"{label}: not only {key!r} named: {msg}")


@cases("WindowDataset: an in-memory series that differs in one value", min_ranks=2)
def _(t):
    from ddstore import spatiotemporal as sp
    T, n, f = 40, 3, 2
    data = np.random.default_rng(5).random((T, n, f), dtype=np.float32)
    ei = np.array([[0, 1, 2], [1, 2, 0]])
    ew = np.array([1.0, 0.5, 0.25], np.float32)
    ts = np.arange("2024-01-01T00:00", T, dtype="datetime64[5m]")
    last = rank == size - 1
    odd, even = _last()
    with ddstore.DDStore(comm, width=size) as st:
        # equal values in another layout or as a tensor on some ranks: loaded, each
        # window as the array holds it
        mine = (data, np.asfortranarray(data), torch.from_numpy(data))[rank % 3]
        ds = sp.WindowDataset(st, "ok", mine, 2, overlap=True, standardize=False,
                              timestamps=ts, time_features="tod")
        for i in range(len(ds)):
            x, y = ds[i]
            check(np.array_equal(x.numpy()[..., :f], data[i:i + 2]) and
                  np.array_equal(y.numpy()[..., :f], data[i + 2:i + 4]),
                  f"equal series: window {i} differs")
        other = data.copy()
        if last:
            other[17, 1, 0] += 1
        ei2, ew2, ts2 = ei.copy(), ew.copy(), ts.copy()
        if last:
            ei2[1, 2], ew2[1], ts2[9] = 1, 0.75, ts[9] + 1
        cases_ = (
            ("values", "series 'data'", f"float32 [{T}, {n}, {f}], fingerprint 0x",
             dict(series=other)),
            ("a tensor's values", "series 'data'", "fingerprint 0x",
             dict(series=torch.from_numpy(other))),
            ("edge_index", "series 'edge_index'", "int64 [2, 3], fingerprint 0x",
             dict(series=sp.from_arrays(data, ei2, ew))),
            ("edge_weight", "series 'edge_weight'", "float32 [3], fingerprint 0x",
             dict(series=sp.from_arrays(data, ei, ew2))),
            ("timestamps", "series 'timestamps'", f"datetime64[ns] [{T}], fingerprint",
             dict(series=data, timestamps=ts2, time_features="tod")),
            ("time_features", "time_features", "('tod', 'dow')",
             dict(series=data, timestamps=ts,
                  time_features=("tod", "dow") if last else "tod")))
        for label, key, shown, kw in cases_:
            series = kw.pop("series")
            msg = expect_error(DDStoreValueError, [
                "WindowDataset('w') is collective and needs the same settings on every "
                f"rank: {key} differs between ranks (", f"{odd}: ", f"{even}: ", shown],
                sp.WindowDataset, st, "w", series, 2, overlap=True, standardize=False,
                what=f"WindowDataset, {label}", agree=True, store=st, **kw)
            _only(msg, key, label)
        check(st.variables() == ["ok"], f"refused series left {st.variables()}")


@cases("DynamicGraph: in-memory steps that differ in one value", min_ranks=2)
def _(t):
    from ddstore.dynamic import DynamicGraph
    T, n = 12, 9
    rng = np.random.default_rng(6)
    edges = [rng.integers(0, n, (2, 5 + s % 3)) for s in range(T)]
    weights = [rng.random(e.shape[1], dtype=np.float32) for e in edges]
    last = rank == size - 1
    odd, even = _last()
    with ddstore.DDStore(comm, width=size) as st:
        mine = [torch.from_numpy(e) for e in edges] if rank % 2 else tuple(edges)
        g = DynamicGraph(st, "ok", mine, weights, num_nodes=n, dedup="sum")
        for s in range(T):  # every step as given (duplicates summed)
            ei, w = g.snapshot(s)
            want = {}
            for (a, b), x in zip(edges[s].T.tolist(), weights[s].tolist()):
                want[(a, b)] = want.get((a, b), 0) + x
            got = dict(zip(map(tuple, ei.numpy().T.tolist()), w.numpy().tolist()))
            check(got.keys() == want.keys() and all(
                abs(got[k] - want[k]) < 1e-6 for k in want), f"equal steps: step {s}")
        e2 = [e.copy() for e in edges]
        w2 = [w.copy() for w in weights]
        if last:
            e2[7][1, 0] = (e2[7][1, 0] + 1) % n
            w2[3][0] += 1
        for label, key, args in (("edges", "argument 'edges'", (e2, weights)),
                                 ("weights", "argument 'weights'", (edges, w2))):
            msg = expect_error(DDStoreValueError, [
                "DynamicGraph('g') is collective and needs the same settings on every "
                f"rank: {key} differs between ranks (", f"{odd}: {T} steps, fingerprint 0x",
                f"{even}: {T} steps, fingerprint 0x"], DynamicGraph, st, "g", *args,
                num_nodes=n, dedup="sum", what=f"DynamicGraph, {label}", agree=True,
                store=st)
            _only(msg, key, label)

        class Lazy:  # steps made on demand: each rank still reads only its own
            def __init__(self):
                self.seen = set()

            def __len__(self):
                return T

            def __getitem__(self, s):
                self.seen.add(s)
                return edges[s]

        lazy = Lazy()
        g2 = DynamicGraph(st, "lazy", lazy, num_nodes=n, dedup="sum")
        from ddstore._checks import partition
        lo, hi = partition(T, size, rank)
        check(lazy.seen <= set(range(max(0, lo - 1), hi)),
              f"a lazy sequence read beyond its own steps [{lo}, {hi}): {sorted(lazy.seen)}")
        check(not any(v.startswith("g/") for v in st.variables()),
              f"variables after the refusals: {st.variables()}")
        g.free()
        g2.free()


@cases("a split listing a node twice, read by two ranks", min_ranks=2)
def _(t):
    with shared_tmpdir() as tmp:
        root = os.path.join(tmp, "ogb")
        train = np.r_[np.arange(20), 3, 4, 5]  # 23 ids for 20 nodes
        if rank == 0:
            ei = np.stack([np.arange(40) % 20, (np.arange(40) * 7) % 20])
            write_ogb_node(root, ei, x=np.ones((20, 3)), y=np.arange(20) % 4,
                           splits={"train": train, "valid": [0], "test": [1]})
            os.makedirs(os.path.join(tmp, "npy"))
            np.save(os.path.join(tmp, "npy", "edge_index.npy"), ei)
            np.save(os.path.join(tmp, "npy", "y.npy"), np.arange(20) % 4)
            for s, ids in (("train", np.arange(10)), ("valid", [10, 11, 12, 10]),
                           ("test", [13])):
                np.save(os.path.join(tmp, "npy", f"{s}_idx.npy"), np.asarray(ids))
        comm.Barrier()
        with ddstore.DDStore(comm) as st:
            path = os.path.join(root, "split", "random", "train.csv.gz")
            # rank 0 reads lines 1-12, the last rank lines 21-23 (repeats of lines 4-6)
            expect_error(DDStoreValueError, [
                f"{path}, line 21: node id 3 is listed again (also at an earlier line); "
                f"a split lists each node at most once"],
                dpyg.load_ogb, st, root, progress=False, agree=True, store=st)
            npy = os.path.join(tmp, "npy", "valid_idx.npy")
            expect_error(DDStoreValueError, [
                f"{npy}, entry 3: node id 10 is listed again (also at an earlier entry)"],
                dpyg.load_npy, st, os.path.join(tmp, "npy"), progress=False, agree=True,
                store=st)
            check(st.variables() == [], "a refused load left variables")
            # without the repeats: loaded, every id once over the ranks
            if rank == 0:
                np.save(npy, np.array([10, 11, 12, 14]))
            comm.Barrier()
            d = dpyg.load_npy(st, os.path.join(tmp, "npy"), progress=False)
            got = comm.allgather(d.splits["valid"].tolist())
            check(sum(got, []) == [10, 11, 12, 14], f"valid split read as {got}")


@cases("labels that are not class ids, from any source")
def _(t):
    from ddstore.sources import SyntheticNodeGraph

    class Labels(SyntheticNodeGraph):
        def labels(self, lo, hi, progress=None):
            y = super().labels(lo, hi)
            y[(np.arange(lo, hi) == 5)] = 2 ** 63 - 1
            return y
    with ddstore.DDStore(comm) as st:
        expect_error(DDStoreValueError, [
            "put_node_data 'pyg': node 5 has label 9223372036854775807: allowed -1 (no "
            "label) or 0 <= label <= 2**63 - 2"],
            dpyg.put_node_data, st, Labels(scale=0.0005), progress=False, agree=True,
            store=st)


# ---------------------------------------------------------------- files that differ
# Each rank reads its own part of a data set from the file it opened: a rank handed
# another file (a stale copy on one node; here another path, as one job has one
# filesystem) must be refused on every rank, naming each rank's file, with nothing
# stored; a copy with the same bytes at another path loads what the file holds.

def _variants(prefix, make, changes):
    """Rank 0 writes the original with ``make(path, variant)`` and one file per
    ``changes`` entry (variant None: a byte-identical copy); returns ``{label: path}``
    (``"ok"`` the original), each path ``prefix + label``."""
    paths = {label: prefix + label for label in ("ok",) + tuple(changes)}
    if rank == 0:
        make(paths["ok"], None)
        for label, variant in changes.items():
            if variant is None:
                copy = shutil.copytree if os.path.isdir(paths["ok"]) else shutil.copy
                copy(paths["ok"], paths[label])
            else:
                make(paths[label], variant)
    comm.Barrier()
    return paths


def _refused(fn, path, st, what, original=None):
    """``fn()``, the last rank handed ``path``, the others the original: the same error
    on every rank naming the last rank's file; nothing stored.  ``original``: the
    original file, to tell whether the message says "the same size"."""
    words = ["the ranks read different files", f"rank {size - 1}: ", f"({path}",
             "bytes", "must see the same file"]
    if original is not None and os.path.getsize(original) == os.path.getsize(path):
        words.append("the same size but different bytes")
    expect_error(DDStoreValueError, words, fn, what=what, agree=True, store=st)


def _mine(paths, label):
    return paths[label] if rank == size - 1 else paths["ok"]


@cases("graphs: pickle directories and ADIOS2 files that differ", min_ranks=2)
def _(t):
    import torch_geometric.data as pyg_data
    from ddstore import graphs

    def sample(i, bump=0, rows=2):
        g = torch.Generator().manual_seed(i)
        return pyg_data.Data(x=torch.randn(rows + i % 3, 4, generator=g) + bump,
                             edge_index=torch.tensor([[0, 1], [1, 0]]))
    n = 7
    good = [sample(i) for i in range(n)]

    def make_pff(path, variant):
        data = list(good)
        if variant == "size":  # a middle sample of another size
            data[3] = sample(3, rows=5)
        elif variant == "bytes":  # the last sample, other values, the same size
            data[n - 1] = sample(n - 1, bump=1)
        graphs.write_pickle_dir(data, path)
        if variant == "nometa":  # read by its *.pkl files (HydraGNN style)
            os.remove(os.path.join(path, "ddstore-pff.json"))
            os.remove(os.path.join(path, f"sample-{n - 1:08d}.pkl"))

    def make_bp(path, variant):
        data = list(good)
        if variant == "bytes":
            data[2] = sample(2, bump=1)
        graphs.write_adios(data, path)

    with shared_tmpdir() as tmp, ddstore.DDStore(comm) as st:
        pff = _variants(os.path.join(tmp, "pff-"), make_pff,
                        {"copy": None, "size": "size", "bytes": "bytes",
                         "nometa": "nometa"})
        ps = [os.path.getsize(os.path.join(pff[k], f"sample-{n - 1:08d}.pkl"))
              for k in ("ok", "bytes")]
        check(ps[0] == ps[1], f"test setup: sample sizes {ps} differ")
        bp = _variants(os.path.join(tmp, "bp-"), make_bp, {"copy": None, "bytes": "bytes"})
        for k, label in enumerate(("size", "bytes", "nometa")):
            _refused(lambda: graphs.GraphDataset.from_pickle_dir(
                st, f"bad{k}", _mine(pff, label), progress=False), pff[label], st,
                f"pickle dir {label}")
        _refused(lambda: graphs.GraphDataset.from_adios(st, "badbp", _mine(bp, "bytes"),
                                                        progress=False),
                 bp["bytes"], st, "ADIOS2 bytes")
        for name, load, paths in (("pff", graphs.GraphDataset.from_pickle_dir, pff),
                                  ("bp", graphs.GraphDataset.from_adios, bp)):
            ds = load(st, name, _mine(paths, "copy"), progress=False)
            check(len(ds) == n, f"{name}: {len(ds)} samples")
            for i in range(n):
                got, want = ds[i], good[i]
                check(sorted(got.keys()) == sorted(want.keys()) and all(
                    got[k].dtype == want[k].dtype and torch.equal(got[k], want[k])
                    for k in want.keys()), f"{name} copy: sample {i} differs")


@cases("series: .npy, PeMS HDF5 and PGT JSON files that differ", min_ranks=2)
def _(t):
    import json
    from ddstore import spatiotemporal as sp
    from ddstore.dynamic import DynamicGraph
    T, nodes = 40, 3
    data = np.arange(T * nodes, dtype=np.float32).reshape(T, nodes) / 8

    def values(variant):
        v = data.copy()
        if "bytes" in str(variant):
            v[-1, -1] += 1
        return v[:-2] if variant == "short" else v

    def make_npy(path, variant):
        with open(path, "wb") as f:
            np.save(f, values(variant))

    def make_h5(path, variant):
        sp.write_pems_h5(path, values(variant), np.arange(
            "2024-01-01T00:00", T, dtype="datetime64[5m]")[:len(values(variant))])

    def make_json(path, variant):
        v = values(variant)
        doc = {"FX": v.tolist(), "edges": [[0, 1], [1, 2]]} if "dyn" not in str(
            variant) else {"y": v.tolist(), "edge_mapping": {"edge_index": {
                str(s): [[0, 1], [s % nodes, 2]] for s in range(T)}}}
        with open(path, "w") as f:
            json.dump(doc, f)

    with shared_tmpdir() as tmp, ddstore.DDStore(comm) as st:
        changes = {"copy": None, "bytes": "bytes", "short": "short"}
        readers = (("npy", make_npy, sp.load_npy),
                   ("h5", make_h5, sp.load_pems_h5),
                   ("json", make_json, sp.load_pgt_json))
        for kind, make, load in readers:
            paths = _variants(os.path.join(tmp, f"{kind}-"), make, changes)
            for label in ("bytes", "short"):
                with load(_mine(paths, label)) as series:
                    _refused(lambda: sp.WindowDataset(
                        st, f"bad{kind}", series, 2, overlap=True, standardize=False),
                        paths[label], st, f"{kind} {label}", paths["ok"])
            with load(_mine(paths, "copy")) as series:
                ds = sp.WindowDataset(st, kind, series, 2, overlap=True,
                                      standardize=False)
            for i in range(len(ds)):  # every window: the file's steps, byte for byte
                x, y = ds[i]
                check(np.array_equal(x.numpy()[..., 0], data[i:i + 2]) and
                      np.array_equal(y.numpy()[..., 0], data[i + 2:i + 4]),
                      f"{kind} copy: window {i} differs")
        # a dynamic graph read from a PGT file (England COVID's layout)
        paths = _variants(os.path.join(tmp, "dyn-"), make_json,
                          {"copy": "dyn", "bytes": "dyn-bytes"})
        if rank == 0:  # the original in this layout too
            make_json(paths["ok"], "dyn")
            shutil.copy(paths["ok"], paths["copy"])
        comm.Barrier()
        _refused(lambda: DynamicGraph.from_series(
            st, "baddyn", sp.load_pgt_json(_mine(paths, "bytes"))), paths["bytes"], st,
            "dynamic json bytes")
        g = DynamicGraph.from_series(st, "dyn", sp.load_pgt_json(_mine(paths, "copy")))
        for s in range(T):
            ei = g.snapshot(s)[0]
            check(sorted(map(tuple, np.asarray(ei).T.tolist())) ==
                  sorted({(0, 1), (s % nodes, 2)}), f"dynamic copy: step {s}: {ei}")
        g.free()


@cases("pyg.load_ogb / load_npy: node data files that differ", min_ranks=2)
def _(t):
    ei = np.stack([np.arange(30) % 12, (np.arange(30) * 5) % 12])
    x = np.arange(36, dtype=np.float32).reshape(12, 3) / 4
    y = np.arange(12) % 3

    def make_ogb(path, variant):
        write_ogb_node(path, ei, x=x + (variant == "bytes"), y=y, splits={
            "train": np.arange(8), "valid": [8, 9], "test": [10, 11]})

    def make_npy(path, variant):
        os.makedirs(path)
        for k, v in (("edge_index", ei), ("x", x), ("y", y)):
            if variant == "bytes" and k == "x":
                v = v.copy()
                v[-1, -1] += 1
            np.save(os.path.join(path, f"{k}.npy"), v)

    with shared_tmpdir() as tmp:
        for kind, make, load in (("ogb", make_ogb, dpyg.load_ogb),
                                 ("npy", make_npy, dpyg.load_npy)):
            paths = _variants(os.path.join(tmp, f"{kind}-"), make, {"bytes": "bytes"})
            feat = "raw/node-feat.csv.gz" if kind == "ogb" else "x.npy"
            with ddstore.DDStore(comm) as st:
                _refused(lambda: load(st, _mine(paths, "bytes"), progress=False),
                         os.path.join(paths["bytes"], feat), st, f"{kind} bytes",
                         os.path.join(paths["ok"], feat))
                # (the same path on every rank: a copy at another path is refused by
                # put_node_data's agreed repr of the data set, which names its path)
                d = load(st, paths["ok"], progress=False)
                fs = d.feature_store
                gx = fs.get_tensor(group_name=None, attr_name="x").numpy()
                gy = fs.get_tensor(group_name=None, attr_name="y").numpy().reshape(-1)
                check(gx.dtype == np.float32 and np.array_equal(gx, x) and
                      np.array_equal(gy, y), f"{kind}: x ({gx.dtype}) or y differ")
                edges = 30 * (2 if kind == "ogb" else 1)  # load_ogb adds the reverse
                check(d.num_edges == edges, f"{kind}: {d.num_edges} edges, not {edges}")


if __name__ == "__main__":
    run_main(cases.run)
