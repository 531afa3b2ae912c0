"""MPI program: the data-set layers reopen from a checkpoint (issue 37, items 2-3).

Usage: ``datasets_checkpoint.py DIR BUILD_WIDTH`` (under ``timeout`` and ``mpiexec``);
``BUILD_WIDTH`` ``-``: restore only (steps 1 and the sub-communicator of step 2).

1. When ``DIR/ck`` holds a checkpoint written by an earlier job (another rank count), it
   is restored here at every width of this job (the transports taking turns, opposite
   to those of step 2), and checked against that job's reference reads (``DIR/ref.<rank>.pkl``).
2. This job builds, at width ``BUILD_WIDTH``: a ``GraphDataset`` (PyG graphs of varying
   sizes), ``WindowDataset`` s (partitioned with halo, without halo, with time features,
   per-node statistics and the PGT split), a ``DynamicGraph`` (weighted, deltas and
   checkpoints) and a ``DynamicWindowDataset`` (its own graph, ``graph_steps="xy"``);
   takes every read (the references), saves to ``DIR/ck`` (and the references to
   ``DIR/ref.<rank>.pkl``) and restores it in this job at every width (the transports taking
   turns), and on a sub-communicator of ``size - 1`` ranks (width ``size - 1``, rma).

Each restore: every byte of every variable (rows and records) equals the original; each
layer's ``open(store, name)``: every graph sample, every window of every split
(``__getitem__`` and ``get_batch``), the statistics, every dynamic step (random
access, forward, backward), every dynamic window with its graphs; sampler batches with
the same seed equal (``DistributedSampler`` at the same rank count; the
``BatchShuffleSampler`` at the same rank count and width); ``open`` of an unknown name
and of the wrong kind refused naming the known ones; ``free`` after ``open`` drops the
layer's variables and annotations.  Exits non-zero on any failure.
"""
import glob
import os
import pickle
import sys

import numpy as np
import torch
from mpi4py import MPI

from _harness import (Cases, check, comm, every_width, expect_error, first_ranks, rank,
                      run_main, size)

torch.set_num_threads(1)

import ddstore  # noqa: E402
from ddstore import DDStoreValueError  # noqa: E402
from ddstore.dynamic import DynamicGraph, DynamicWindowDataset  # noqa: E402
from ddstore.graphs import GraphDataset  # noqa: E402
from ddstore.spatiotemporal import WindowDataset  # noqa: E402

T, N, F, H = 64, 5, 2, 3
WINDOWS = {  # name -> WindowDataset keywords
    "w_halo": {},
    "w_flat": {"halo": False},
    "w_tf": {"time_features": ("tod", "dow"), "per_node": True, "overlap": True,
             "timestamps": np.datetime64("2024-03-01T00:00", "ns")
             + np.arange(T) * np.timedelta64(5, "h")},
}


def graph_samples():
    from torch_geometric.data import Data
    rng = np.random.default_rng(7)
    out = []
    for i in range(23):
        k = int(rng.integers(1, 9))
        out.append(Data(x=torch.from_numpy(rng.standard_normal((k, 3)).astype(np.float32)),
                        edge_index=torch.from_numpy(rng.integers(0, k, (2, 2 * k))),
                        y=torch.tensor([float(i)], dtype=torch.float64),
                        pos=torch.from_numpy(rng.standard_normal((k, 2)))))
    return out


def series():
    rng = np.random.default_rng(3)
    return rng.standard_normal((T, N, F)) * [1.0, 3.0] + [0.5, -2.0]


def dynamic_edges():
    rng = np.random.default_rng(11)
    edges, weights = [], []
    for t in range(T):
        e = rng.integers(0, N, (2, int(rng.integers(0, 9))))
        edges.append(e)
        weights.append(rng.uniform(0.5, 2.0, e.shape[1]))
    return edges, weights


def np_(v):
    return None if v is None else v.numpy().copy()


def variable_bytes(store):
    """Every variable's content, as bytes: rows whole; records packed in order."""
    out = {}
    for name in store.variables():
        try:
            store.record_schema(name)
        except DDStoreValueError:
            n = store.nrows(name)
            out[name] = ("rows", store.get_range(name, 0, n).tobytes())
            continue
        data, sizes = store.get_records_packed(name, np.arange(store.nrows(name)))
        out[name] = ("records", {k: (v.dtype.str, v.shape, v.tobytes())
                                 for k, v in data.items()},
                     {k: v.tobytes() for k, v in sizes.items()})
    return out


def window_reads(ds, store, with_batches=True):
    """Every window of every split (as numpy), the statistics, sampler batches."""
    out = {"len": len(ds), "mean": ds.mean.copy(), "std": ds.std.copy(), "splits": {}}
    for split in ds.splits():
        got = {"bounds": (split.start, split.stop)}
        if len(split):
            batch = split.get_batch(np.arange(len(split)))
            got["items"] = [tuple(np_(a) if isinstance(a, torch.Tensor) else a
                                  for a in batch[:2])]
            if isinstance(ds, DynamicWindowDataset):
                got["graphs"] = [(np_(ei), np_(ew)) for ei, ew in batch[2]]
            one = split[len(split) - 1]
            got["last"] = [np_(one[0]), np_(one[1])]
            if isinstance(ds, DynamicWindowDataset):
                got["last_graphs"] = [(np_(ei), np_(ew)) for ei, ew in one[2]]
            if with_batches:
                glob = split.loader(4, sampler="global", seed=5)
                glob.sampler.set_epoch(1)
                got["global"] = [np_(b[0]) for b in glob]
                bs = split.batch_sampler(4, seed=5, local=False)
                bs.set_epoch(1)
                got["batch"] = [list(b) for b in bs]
        out["splits"][split.split_name] = got
    out["transform"] = ds.inverse_transform(np.ones((2, N, F)))
    return out


def graph_reads(ds):
    samples = []
    for i in range(len(ds)):
        d = ds[i]
        samples.append({k: (str(d[k].dtype), np_(d[k])) for k in sorted(d.keys())})
    batch = ds.get_batch(np.arange(len(ds))[::-1].copy())
    return {"samples": samples, "batch_x": np_(batch.x), "batch_ptr": np_(batch.ptr)}


def dynamic_reads(g):
    steps = [(np_(ei), np_(ew)) for ei, ew in (g.snapshot(t) for t in range(g.num_steps))]
    fwd = [(t, np_(s[0])) for t, s in g.forward(5, 40)]
    bwd = [(t, np_(s[0])) for t, s in g.backward(50, 10)]
    return {"steps": steps, "fwd": fwd, "bwd": bwd, "edges": g.num_edges(),
            "k": g.checkpoint_every}


def equal(a, b):
    """Deep equality of nested tuples / lists / dicts of numpy arrays, bit for bit."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and
                a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and \
            all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and \
            all(equal(x, y) for x, y in zip(a, b))
    return a == b


def build(store):
    """Every layer on ``store``; returns the references: each layer's reads and every
    variable's bytes."""
    g = GraphDataset.from_samples(store, "g", graph_samples(), progress=False)
    ref = {"size": store.size, "width": store.width, "graph": graph_reads(g),
           "windows": {}}
    for name, kw in WINDOWS.items():
        ds = WindowDataset(store, name, series(), H, **kw)
        ref["windows"][name] = window_reads(ds, store)
        ref["windows"][name]["layout"] = {k: v.copy() for k, v in ds.layout.items()}
    edges, weights = dynamic_edges()
    dg = DynamicGraph(store, "dyn", edges, weights, checkpoint_every=6, dedup="sum")
    ref["dynamic"] = dynamic_reads(dg)
    dw = DynamicWindowDataset(store, "dw", series(), H, edges=edges, weights=weights,
                              graph_steps="xy", checkpoint_every=4,
                              dedup="last")
    ref["dw"] = window_reads(dw, store)
    ref["bytes"] = variable_bytes(store)
    ref["annotations"] = store.annotations()
    return ref


def check_restored(r, ref, tag):
    """Every check of one restored store ``r`` against the references ``ref``."""
    same_size = r.size == ref["size"]
    same_layout = same_size and r.width == ref["width"]
    check(r.annotations() == ref["annotations"],
          f"{tag}: annotations {r.annotations()} != {ref['annotations']}")
    got = variable_bytes(r)
    check(sorted(got) == sorted(ref["bytes"]), f"{tag}: variables {sorted(got)}")
    for name, want in ref["bytes"].items():
        check(equal(got.get(name), want), f"{tag}: bytes of variable {name!r} differ")
    check(equal(graph_reads(GraphDataset.open(r, "g")), ref["graph"]),
          f"{tag}: GraphDataset samples differ")
    for name in WINDOWS:
        ds = WindowDataset.open(r, name)
        want = ref["windows"][name]
        reads = window_reads(ds, r)
        for split, w in want["splits"].items():
            g = reads["splits"][split]
            for key in ("bounds", "items", "last"):
                check(equal(g.get(key), w.get(key)), f"{tag}: {name} {split} {key} differ")
            if same_size:
                check(equal(g.get("global"), w.get("global")),
                      f"{tag}: {name} {split} DistributedSampler batches differ")
            if same_layout:
                check(equal(g.get("batch"), w.get("batch")),
                      f"{tag}: {name} {split} BatchShuffleSampler batches differ")
        for key in ("len", "mean", "std", "transform"):
            check(equal(reads[key], want[key]), f"{tag}: {name} {key} differs")
        if same_layout:  # the layout as built (pieces, members, offsets)
            check(equal({k: v for k, v in ds.layout.items()}, want["layout"]),
                  f"{tag}: {name} layout {ds.layout} != {want['layout']}")
        if r.width > 1 and ds.halo:  # each piece (a window's rows) on one member
            offs = r.chunk_offsets(name)
            lay = ds.layout
            m = lay["member"]
            check(bool(((lay["offset"] >= offs[m]) &
                        (lay["offset"] + lay["stored"] <= offs[m + 1])).all()),
                  f"{tag}: {name} a piece straddles two members: {lay} {offs}")
    dg = DynamicGraph.open(r, "dyn")
    check(equal(dynamic_reads(dg), ref["dynamic"]), f"{tag}: DynamicGraph steps differ")
    dw = DynamicWindowDataset.open(r, "dw")
    reads = window_reads(dw, r)
    for split, w in ref["dw"]["splits"].items():
        g = reads["splits"][split]
        for key in ("bounds", "items", "last", "graphs", "last_graphs"):
            check(equal(g.get(key), w.get(key)), f"{tag}: dw {split} {key} differ")
        if same_size:
            check(equal(g.get("global"), w.get("global")), f"{tag}: dw {split} global")
    # errors: unknown name, wrong kind (named, with the known ones)
    expect_error(DDStoreValueError, ["'nope'", "known: ['g']"], GraphDataset.open, r,
                 "nope", what=f"{tag}: open unknown")
    expect_error(DDStoreValueError, ["WindowDataset 'g'", "'w_flat'"],
                 WindowDataset.open, r, "g", what=f"{tag}: open wrong kind")
    expect_error(DDStoreValueError, ["DynamicGraph 'dw'", "'dw/graph'", "'dyn'"],
                 DynamicGraph.open, r, "dw", what=f"{tag}: open dynamic wrong kind")
    for cls in (GraphDataset, WindowDataset, DynamicGraph, DynamicWindowDataset):
        expect_error(DDStoreValueError, ["unknown object ['g']", "names are str"],
                     cls.open, r, ["g"], what=f"{tag}: {cls.__name__}.open of a list")
    expect_error(DDStoreValueError, ["unknown object {'g': 1}", "a dict"], r.annotation,
                 {"g": 1}, what=f"{tag}: annotation of a dict")
    expect_error(DDStoreValueError, ["unknown object ['g']"], r.unannotate, ["g"],
                 what=f"{tag}: unannotate of a list")
    # free after open: the variables and their annotations go
    dw.free()
    dg.free()
    check(r.annotations() == ["g", "w_flat", "w_halo", "w_tf"],
          f"{tag}: annotations after free {r.annotations()}")
    check(not any(v.startswith(("dw", "dyn")) for v in r.variables()),
          f"{tag}: variables after free {r.variables()}")


def restores(path, ref, what, turn):
    """Restore ``path`` at every width of this job, the transports taking turns (from
    ``turn``: the earlier job's checkpoint and this job's take opposite turns, so that
    every width is restored with both), and check each store."""
    for i, width in enumerate(every_width()):
        for transport in (("rma", "auto")[(i + turn) % 2],):
            tag = f"{what} -> {size} ranks w{width} {transport}"
            r = ddstore.DDStore.restore(path, comm, width=width, transport=transport)
            try:
                check(r.width == width and r.size == size, f"{tag}: store {r}")
                check_restored(r, ref, tag)
            finally:
                r.free()


cases = Cases()


@cases("restore an earlier job's checkpoint")
def _(t):
    path = os.path.join(t.dir, "ck")
    if not os.path.exists(os.path.join(path, "ddstore-checkpoint.json")):
        check(True, "no earlier checkpoint")
        return
    with open(ref_path(t.dir), "rb") as f:
        ref = pickle.load(f)
    t.ref, t.path = ref, path  # restore-only: the sub-communicator case takes it
    restores(path, ref, f"{ref['size']} ranks w{ref['width']}", 1)


def ref_path(directory):
    """The references this rank checks against: those its own rank wrote in the job that
    saved (its sampler batches are its own), or rank 0's when that job had fewer ranks
    (a rank count other than the saver's compares no sampler batches)."""
    mine = os.path.join(directory, f"ref.{rank}.pkl")
    return mine if os.path.exists(mine) else os.path.join(directory, "ref.0.pkl")


@cases("build, save, restore here")
def _(t):
    path = os.path.join(t.dir, "ck")
    if t.width is None:
        check(True, "restore only")
        return
    with ddstore.DDStore(comm, width=t.width, transport="auto") as store:
        ref = build(store)
        store.save(path)
    comm.Barrier()
    if rank == 0:  # an earlier job's with more ranks: not this checkpoint's
        for stale in glob.glob(os.path.join(t.dir, "ref.*.pkl")):
            if int(os.path.basename(stale).split(".")[1]) >= size:
                os.remove(stale)
    mine = os.path.join(t.dir, f"ref.{rank}.pkl")  # each rank's (its sampler batches)
    with open(mine + ".tmp", "wb") as f:
        pickle.dump(ref, f)
    os.replace(mine + ".tmp", mine)
    t.ref, t.path = ref, path
    restores(path, ref, f"{size} ranks w{t.width}", 0)


@cases("restore on fewer ranks", min_ranks=2)
def _(t):
    sub = first_ranks(size - 1)
    if sub is not None:
        tag = f"{size} ranks w{t.width} -> {sub.size} ranks w{sub.size} rma"
        r = ddstore.DDStore.restore(t.path, sub, width=sub.size, transport="rma")
        try:
            check_restored(r, t.ref, tag)
        finally:
            r.free()
            sub.Free()
    else:
        check(True, "not in the sub-communicator")
    comm.Barrier()


def main():
    import types
    t = types.SimpleNamespace(dir=sys.argv[1], width=None if sys.argv[2] == "-" else
                              int(sys.argv[2]))
    if rank == 0:
        os.makedirs(t.dir, exist_ok=True)
    comm.Barrier()
    cases.run(t)


run_main(main)
