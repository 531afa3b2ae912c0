"""MPI program: TemporalGraph.from_jodie / from_pyg / to_pyg round trips on 1-3 ranks.

Run under mpiexec (inside ``timeout``): ``temporal_formats_check.py``.  For width 1 and
width = all ranks: a JODIE file with whole-number times (and ties) read by ``from_jodie``
equals, value for value (features bit for bit), what PyG's own ``JODIEDataset.process``
makes of the same file (run offline on a local copy), split included
(``train_val_test_split``); the edge table, features, labels and T-CSR lists read back
exactly; a file with fractional times and no features keeps its times as float64; and
``from_pyg`` -> ``to_pyg`` returns every field with its dtype (unsorted float32 times,
float64 multi-dimensional msg, float y).  Then bad input, every error raised on every
rank with nothing left in the store (a rank handed another file, or a copy of the same
size that differs, included).  Last, any exception (``OSError``, ``RuntimeError``,
``KeyError``, ``MemoryError``) raised by the parsing of one rank only, in ``from_jodie``,
``from_tgl`` and ``load_ogb``: every rank raises the same agreed error within seconds and
the store holds what it held before (issue 35: ``OSError`` in ``from_jodie`` hung).
"""
import os
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import check, comm, expect_error, rank, run_main, shared_tmpdir, size  # noqa

import ddstore  # noqa: E402
from ddstore import DDStoreMemoryError, DDStoreValueError  # noqa: E402
from ddstore import temporal as tg  # noqa: E402

FIELDS = ("src", "dst", "t", "msg", "y")


def same_tensor(a, b, what):
    import torch
    ok = a.dtype == b.dtype and a.shape == b.shape
    if ok and a.is_floating_point():  # bit for bit
        ok = torch.equal(a.contiguous().view(-1).view(torch.uint8),
                         b.contiguous().view(-1).view(torch.uint8))
    elif ok:
        ok = torch.equal(a, b)
    check(ok, f"{what}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)} differ")


def pyg_split(data, **kw):
    tr, va, te = data.train_val_test_split(**kw)
    return np.repeat(np.array([0, 1, 2], np.int8), [tr.num_events, va.num_events,
                                                    te.num_events])


def jodie_reference(path, tmp):
    """PyG's JODIEDataset.process on a copy of ``path`` (offline: the raw file is there,
    so nothing is downloaded); one copy per rank."""
    from torch_geometric.datasets import JODIEDataset
    root = os.path.join(tmp, f"pyg_{rank}_{os.path.basename(path)}")
    raw = os.path.join(root, "wikipedia", "raw")
    os.makedirs(raw, exist_ok=True)
    shutil.copy(path, os.path.join(raw, "wikipedia.csv"))
    return JODIEDataset(root, "wikipedia")[0]


def check_against(g, ref, split, tag):
    """Every value of graph ``g`` against the TemporalData ``ref`` and ``split``."""
    import torch
    d = g.to_pyg()
    for key in FIELDS:
        a, b = getattr(d, key, None), getattr(ref, key, None)
        check((a is None) == (b is None), f"{tag}: to_pyg {key}: {a is None} vs {b is None}")
        if a is not None and b is not None:
            same_tensor(a, b, f"{tag}: to_pyg {key}")
    check(np.array_equal(g.split, split), f"{tag}: split {np.bincount(g.split)} vs "
                                          f"{np.bincount(split)}")
    check(g.split_counts == dict(zip(("train", "val", "test"),
                                     np.bincount(split, minlength=3).tolist())),
          f"{tag}: split_counts {g.split_counts}")
    n = ref.num_events
    check(g.num_edges == n, f"{tag}: num_edges {g.num_edges} vs {n}")
    rng = np.random.default_rng(7)  # the same ids on every rank
    eids = rng.integers(0, n, 40)
    eids[:2] = [n - 1, 0]
    s, dd, t = g.edges(eids)
    check(np.array_equal(s, ref.src.numpy()[eids]), f"{tag}: edges src")
    check(np.array_equal(dd, ref.dst.numpy()[eids]), f"{tag}: edges dst")
    check(np.array_equal(t, ref.t.numpy()[eids].astype(np.float64)), f"{tag}: edges t")
    if getattr(ref, "msg", None) is not None and ref.msg.numel():  # ([E, 0]: none)
        got = torch.from_numpy(g.edge_features(eids))
        same_tensor(got, ref.msg[eids], f"{tag}: edge_features")
    if getattr(ref, "y", None) is not None:
        same_tensor(torch.from_numpy(g.edge_labels(eids)), ref.y[eids], f"{tag}: labels")
    # T-CSR lists: a node's edges by time, then edge id (both ends with add_reverse)
    src, dst = ref.src.numpy(), ref.dst.numpy()
    tt = ref.t.numpy().astype(np.float64)
    for v in (int(src[0]), int(dst[-1]), int(np.bincount(src).argmax())):
        mine = np.flatnonzero(src == v)
        if g.add_reverse:  # indexed at both ends; a self-loop appears twice
            mine = np.concatenate([mine, np.flatnonzero(dst == v)])
        order = np.lexsort((mine, tt[mine]))
        nbr, ts, eid = g.neighbors(v)
        check(np.array_equal(eid, mine[order]) and np.array_equal(ts, tt[mine[order]]),
              f"{tag}: neighbors({v})")
        other = np.where(src[eid] == v, dst[eid], src[eid]) if g.add_reverse else dst[eid]
        check(np.array_equal(nbr, other), f"{tag}: neighbors({v}) nbr")


def check_jodie(store, tmp, tag):
    import pandas as pd
    import torch
    from torch_geometric.data import TemporalData
    from ddstore.temporal.pyg_data import chronological_split
    whole = os.path.join(tmp, "whole.csv")
    frac = os.path.join(tmp, "frac.csv")
    ref = jodie_reference(whole, tmp)
    check(ref.num_events == 300, f"{tag}: reference has {ref.num_events} events")
    for rev in (False, True):
        g = tg.TemporalGraph.from_jodie(store, "j", whole, add_reverse=rev)
        check(g.num_users == 17 and g.num_items == 11 and g.num_nodes == 28,
              f"{tag}: users {g.num_users} items {g.num_items} nodes {g.num_nodes}")
        check(g.t_dtype == np.int64 and g.edge_feat_dim == (3,) and g.has_edge_label,
              f"{tag}: t_dtype {g.t_dtype} edge_feat_dim {g.edge_feat_dim}")
        check_against(g, ref, pyg_split(ref), f"{tag} jodie whole rev={rev}")
        # the same data through from_pyg: same graph
        p = tg.TemporalGraph.from_pyg(store, "p", ref, add_reverse=rev)
        check_against(p, ref, pyg_split(ref), f"{tag} from_pyg(JODIE) rev={rev}")
        p.remove()
        g.remove()
    # other ratios
    g = tg.TemporalGraph.from_jodie(store, "j", whole, val_ratio=0.3, test_ratio=0.05)
    check(np.array_equal(g.split, pyg_split(ref, val_ratio=0.3, test_ratio=0.05)),
          f"{tag}: split 0.3/0.05")
    g.remove()
    # fractional times, no features: float64 times as in the file (PyG would truncate)
    df = pd.read_csv(frac, skiprows=1, header=None)
    want = TemporalData(src=torch.from_numpy(df[0].to_numpy().astype(np.int64)),
                        dst=torch.from_numpy(df[1].to_numpy().astype(np.int64) +
                                             int(df[0].max()) + 1),
                        t=torch.from_numpy(df[2].to_numpy(np.float64)),
                        y=torch.from_numpy(df[3].to_numpy().astype(np.int64)),
                        msg=torch.zeros((len(df), 0)))  # (PyG's JODIEDataset: [E, 0])
    g = tg.TemporalGraph.from_jodie(store, "f", frac)
    check(g.t_dtype == np.float64 and g.edge_feat_dim is None,
          f"{tag}: fractional t_dtype {g.t_dtype}, edge_feat_dim {g.edge_feat_dim}")
    check_against(g, want, chronological_split(want.t), f"{tag} jodie fractional")
    check(np.array_equal(chronological_split(want.t), pyg_split(want)),
          f"{tag}: chronological_split is not PyG's")
    expect_error(DDStoreValueError, ("edge 0 has time 0.0128", "not a whole number"), g.to_pyg,
                 torch.long, what=f"{tag} to_pyg long of fractional times")
    g.remove()


def check_pyg(store, tag):
    import torch
    from torch_geometric.data import TemporalData
    gen = torch.Generator().manual_seed(5)
    n = 157
    data = TemporalData(src=torch.randint(0, 20, (n,), generator=gen),
                        dst=torch.randint(0, 30, (n,), generator=gen),
                        t=(torch.rand(n, generator=gen) * 50).round().float(),  # ties
                        msg=torch.randn(n, 2, 2, generator=gen, dtype=torch.float64),
                        y=torch.rand(n, generator=gen))
    # unsorted times: PyG's chronological split (by position) is refused, naming the
    # first event out of order; with the split given, the times are kept as they are
    expect_error(DDStoreValueError, ["graph 'p': data.t is not sorted", "pass split="],
                 lambda: tg.TemporalGraph.from_pyg(store, "p", data, add_reverse=True),
                 agree=True, store=store)
    g = tg.TemporalGraph.from_pyg(store, "p", data, add_reverse=True,
                                  split=pyg_split(data))
    check(g.t_dtype == np.float32, f"{tag}: from_pyg t_dtype {g.t_dtype}")
    check_against(g, data, pyg_split(data), f"{tag} from_pyg unsorted float32")
    g.remove()
    split = (np.arange(n) % 3).astype(np.int8)
    g = tg.TemporalGraph.from_pyg(store, "p", TemporalData(src=data.src, dst=data.dst,
                                                           t=data.t.long()), split=split)
    check_against(g, TemporalData(src=data.src, dst=data.dst, t=data.t.long()), split,
                  f"{tag} from_pyg given split, no msg/y")
    g.remove()


def check_errors(store, tmp, tag):
    from torch_geometric.data import TemporalData
    import torch
    whole = os.path.join(tmp, "whole.csv")
    lines = open(whole).read().splitlines()
    cases = []

    def variant(label, lineno, text, fragments):
        path = os.path.join(tmp, f"bad_{label}.csv")
        if rank == 0:
            body = list(lines)
            body[lineno - 1] = text(body[lineno - 1])
            open(path, "w").write("\n".join(body) + "\n")
        cases.append((label, path, fragments))
    last = len(lines)
    variant("extra", last - 1, lambda s: s + ",9", (f"line {last - 1}: malformed row: 8 "
                                                    f"fields, but line 2 has 7",))
    variant("short", 10, lambda s: ",".join(s.split(",")[:5]),
            ("line 10: malformed row: 5 fields, but line 2 has 7",))
    variant("label", last // 2, lambda s: ",".join(s.split(",")[:3] + ["x"] +
                                                   s.split(",")[4:]),
            (f"line {last // 2}: state_label (field 4) is 'x'", "an integer label"))
    variant("user", 40, lambda s: "2.5," + s.split(",", 1)[1],
            ("line 40: user (field 1) is 2.5", "an integer user id >= 0"))
    variant("item", 250, lambda s: ",".join([s.split(",")[0], "-3"] + s.split(",")[2:]),
            ("line 250: item (field 2) is -3", ">= 0"))
    variant("feat", 120, lambda s: s.rsplit(",", 1)[0] + ",1e999",
            ("line 120: feature 2 (field 7)", "float32's range"))
    variant("unsorted", last // 2 + 1, lambda s: ",".join(s.split(",")[:2] + ["0"] +
                                                          s.split(",")[3:]),
            (f"line {last // 2 + 1}: timestamp 0.0 is earlier", "sorted by timestamp"))
    variant("noheader", 1, lambda s: lines[1], ("line 1:", "is a data row", "header"))
    comm.Barrier()
    cases.append(("missing", os.path.join(tmp, "nope.csv"), ("nope.csv: not found",)))
    for label, path, fragments in cases:
        expect_error(DDStoreValueError, (path,) + tuple(fragments),
                     tg.TemporalGraph.from_jodie, store, "bad", path,
                     what=f"{tag} jodie {label}", agree=True, store=store)
    if size > 1:  # each rank parses its share of the file it opened: two files mixed
        other = os.path.join(tmp, "other.csv")   # (a stale copy on one node, another
        same_size = os.path.join(tmp, "same_size.csv")  # path): refused on every rank
        if rank == 0:
            open(other, "w").write("\n".join(lines[:-1]) + "\n")
            body = "\n".join(lines) + "\n"
            open(same_size, "w").write(body[:-3] + ("1" if body[-3] != "1" else "2")
                                       + body[-2:])
        comm.Barrier()
        for label, path, words in (("other file", other, " bytes (" + other),
                                   ("same size", same_size, "the same size but different "
                                                            "bytes")):
            mine = path if rank == size - 1 else whole
            expect_error(DDStoreValueError, ("the ranks read different files", words,
                                             f"rank {size - 1}: ", "must see the same "
                                             "file"),
                         tg.TemporalGraph.from_jodie, store, "bad", mine,
                         what=f"{tag} jodie {label}", agree=True, store=store)
    expect_error(DDStoreValueError, ("val_ratio + test_ratio", "<= 1"),
                 tg.TemporalGraph.from_jodie, store, "bad", whole, val_ratio=0.6,
                 test_ratio=0.5, what=f"{tag} ratios", agree=True, store=store)
    # from_pyg: no t; data that differs between ranks
    no_t = TemporalData(src=torch.tensor([0, 1]), dst=torch.tensor([1, 2]))
    expect_error(DDStoreValueError, "the TemporalData has no 't'",
                 tg.TemporalGraph.from_pyg, store, "bad", no_t, what=f"{tag} no t",
                 agree=True, store=store)
    k = 5 + (rank if size > 1 else 0)
    mine = TemporalData(src=torch.zeros(k, dtype=torch.long),
                        dst=torch.ones(k, dtype=torch.long), t=torch.arange(k))
    if size > 1:
        expect_error(DDStoreValueError, "the same on every rank",
                     tg.TemporalGraph.from_pyg, store, "bad", mine,
                     what=f"{tag} data differs", agree=True, store=store)
    huge = TemporalData(src=torch.zeros(3, dtype=torch.long),
                        dst=torch.ones(3, dtype=torch.long),
                        t=torch.tensor([0, 2 ** 63], dtype=torch.uint64)[[0, 0, 1]])
    expect_error(DDStoreValueError, ("data.t[2] = 9223372036854775808",
                                     "[-2**63, 2**63 - 1]"),
                 tg.TemporalGraph.from_pyg, store, "bad", huge, what=f"{tag} huge t",
                 agree=True, store=store)


INJECTED = (OSError(5, "Input/output error (injected)"), RuntimeError("injected bug"),
            KeyError("injected key"), MemoryError("injected: no memory"))


def injected_once(fn, exc, tag, store):
    """Call ``fn()`` with ``exc`` raised by the parsing of the last rank only (through
    the patch the caller made): every rank must raise the same agreed error, of class
    DDStoreMemoryError for a MemoryError and DDStoreValueError otherwise, naming that
    rank and the exception, within seconds; the store's variables are unchanged."""
    bad = size - 1
    cls = DDStoreMemoryError if isinstance(exc, MemoryError) else DDStoreValueError
    fragments = (f"rank {bad}: ", f"{type(exc).__name__}: {exc}")
    start = time.monotonic()
    expect_error(cls, fragments, fn, what=f"{tag}: {type(exc).__name__} on rank {bad}",
                 agree=True, agreed=True, store=store)
    took = comm.allreduce(time.monotonic() - start, op=max_op())
    check(took < 30, f"{tag}: {type(exc).__name__} on rank {bad}: took {took:.1f} s")


def max_op():
    from mpi4py import MPI
    return MPI.MAX


def check_injected(store, tmp, tag):
    """Issue 35: an exception nobody listed, raised on one rank while it parses its share
    (a file read failing on one node), is agreed in from_jodie, from_tgl and load_ogb."""
    from ddstore.pyg import load_ogb
    from ddstore.sources import jodie, ogb, tgl
    whole = os.path.join(tmp, "whole.csv")
    tgl_dir = os.path.join(tmp, "tgl")
    ogb_dir = os.path.join(tmp, "ogb")
    if rank == 0:
        rng = np.random.default_rng(11)
        m = 200
        tg.write_tgl(tgl_dir, rng.integers(0, 30, m), rng.integers(0, 30, m),
                     np.sort(rng.random(m) * 100), rng.integers(0, 3, m),
                     edge_feat=rng.standard_normal((m, 2)).astype(np.float32))
        ogb.write_ogb_node(ogb_dir, rng.integers(0, 40, (2, 300)),
                           x=rng.standard_normal((40, 3)),
                           y=rng.integers(0, 4, 40).astype(np.float64),
                           splits={"train": np.arange(30), "valid": np.arange(30, 35),
                                   "test": np.arange(35, 40)})
    comm.Barrier()
    # what parses each rank's share: the JODIE and TGL parsers, the OGB row reader
    patches = ((jodie, "_parse", "from_jodie",
                lambda: tg.TemporalGraph.from_jodie(store, "inj", whole)),
               (tgl, "_parse", "from_tgl",
                lambda: tg.TemporalGraph.from_tgl(store, "inj", tgl_dir, chunk_edges=16)),
               (ogb.OGBNodeData, "_read", "load_ogb",
                lambda: load_ogb(store, ogb_dir, name="inj", progress=False)))
    for owner, attr, call, fn in patches:
        real = getattr(owner, attr)
        for exc in INJECTED:
            def failing(*args, _exc=exc, _real=real, **kwargs):
                if rank == size - 1:
                    raise _exc
                return _real(*args, **kwargs)
            setattr(owner, attr, failing)
            try:
                injected_once(fn, exc, f"{tag} {call}", store)
            finally:
                setattr(owner, attr, real)
        # and with nothing injected, the same call succeeds and is removed
        fn()
        for v in [v for v in store.variables() if v.startswith("inj")]:
            store.remove(v)
        check(store.variables() == [], f"{tag} {call}: left {store.variables()}")


def main():
    rng = np.random.default_rng(3)
    with shared_tmpdir() as tmp:
        if rank == 0:
            m = 300
            user = rng.integers(0, 17, m)
            user[5] = 16
            item = rng.integers(0, 11, m)
            item[7] = 10
            t = np.sort(rng.integers(0, 60, m)).astype(np.float64) * 7  # ties
            feat = rng.standard_normal((m, 3)) * np.array([1, 1e-8, 1e8])
            tg.write_jodie(os.path.join(tmp, "whole.csv"), user, item, t,
                           rng.integers(0, 2, m), feat)
            tf = np.sort(rng.random(m) * 40)
            tf[10:14] = tf[10]
            tg.write_jodie(os.path.join(tmp, "frac.csv"), user, item, tf,
                           rng.integers(0, 3, m))
        comm.Barrier()
        for width in sorted({1, size}):
            tag = f"[n={size} w={width}]"
            with ddstore.DDStore(comm, width=width) as store:
                check_jodie(store, tmp, tag)
                check_pyg(store, tag)
                if width == size:
                    check_errors(store, tmp, tag)
                    check_injected(store, tmp, tag)
                check(store.variables() == [], f"{tag}: left {store.variables()}")


run_main(main)
