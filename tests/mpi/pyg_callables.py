"""MPI program: the bounded range-wise puts of ddstore.pyg byte for byte.

- ``GraphStore.put_edge_range`` with a callable ``edges(a, b)`` (int32 columns, torch
  columns; ``chunk_edges`` None, 1 and 7; with and without ``size``; no time, edge-level
  and node-level time): ``indptr``, the members' node ranges and every CSC variable
  (read whole and this rank's own chunk) byte-equal to the array path's; the callable
  is asked only pieces ``0 <= a < b <= hi - lo`` of at most ``chunk_edges`` columns;
- ``FeatureStore.put_range`` with a callable ``rows_of(a, b)`` (``chunk_rows`` None, 1,
  7; row shapes ``[D]``, ``()`` and ``[2, 3]``; a rank with no rows): the stored rows
  byte-equal to ``put_range(array)`` and to ``put_tensor`` (the whole tensor on every
  rank); each piece asked once, in order;
- ``put_node_data`` (pieces of edges, features and labels; sources that make rows in
  blocks read once per block; ``add_reverse`` both ways; small ``chunk_edges`` /
  ``chunk_rows`` and edge pieces; OGB's ``.csv.gz`` streamed, each file opened once):
  CSC, features and labels byte-equal to the array path's (``put_edge_range`` of the
  interleaved int64 edges, ``put_range`` of the arrays);
- errors: a callable that raises on one rank (first pass, build rounds, a later piece)
  raises the same error on every rank with the store's variables unchanged; a callable
  returning the wrong shape or dtype raises naming what it returned.

    timeout 600 mpiexec -n 2 python tests/mpi/pyg_callables.py [width ...]
"""
import gzip
import os
import sys

import numpy as np
import torch

from _harness import (check, comm, every_width, expect_error, rank, run_main, same_array,
                      shared_tmpdir, size, widths_from)

import ddstore
from ddstore import DDStoreIndexError, DDStoreValueError, partition
from ddstore import pyg as dpyg
from ddstore.pyg import ranges

N, E = 37, 260


def csc_bytes(store, gs, edge_type=None):
    """Everything a stored edge type is: replicated arrays, whole variables, own chunks."""
    c = gs.sampled_lists(edge_type)
    out = {"indptr": c.indptr, "node_offsets": c.node_offsets}
    for k, v in sorted(c.vars.items()):
        out[k] = store.get_range(v, 0, c.num_edges)
        out[k + " (local)"] = store.local_view(v).copy()
    return out


def check_same_csc(store, got, ref, what):
    a, b = csc_bytes(store, got), csc_bytes(store, ref)
    check(sorted(a) == sorted(b), f"{what}: variables {sorted(a)} vs {sorted(b)}")
    for k in b:
        check(k in a and same_array(a[k], b[k]), f"{what}: {k} differs from the array path")


def edge_data():
    rng = np.random.default_rng(11)
    ei = rng.integers(0, N, (2, E))
    ei[1, :5] = N - 1   # the largest id present, so that size=None gives N
    edge_time = rng.integers(0, 30, E)
    node_time = rng.integers(0, 30, N)
    return ei, edge_time, node_time


def graph_store_callables(store, tag):
    ei, edge_time, node_time = edge_data()
    lo, hi = partition(E, size, (rank + 1) % size)  # any tiling, not rank order
    for ta in (None, "edge_time", "time"):
        for sized in (True, False):
            kw = {"size": (N, N)} if sized else {}
            base = f"{tag}-{ta}-{sized}"

            def with_time(name):
                fs = dpyg.FeatureStore(store, name)
                if ta == "edge_time":
                    fs.put_tensor(torch.from_numpy(edge_time), group_name=dpyg.EDGES,
                                  attr_name=ta)
                elif ta == "time":
                    fs.put_tensor(torch.from_numpy(node_time), group_name=None,
                                  attr_name=ta)
                    fs.put_tensor(torch.zeros(N, 1), group_name=None, attr_name="x")
                return fs
            rfs = with_time(base + "-ref")
            ref = dpyg.GraphStore(store, base + "-ref", time_attr=ta)
            ref.put_edge_range(ei[:, lo:hi], (lo, hi), **kw)
            for chunk in (None, 1, 7):
                for kind in ("int32", "torch"):
                    name = f"{base}-{chunk}-{kind}"
                    fs = with_time(name)
                    asked = []

                    def edges(a, b):
                        asked.append((a, b))
                        cols = ei[:, lo + a:lo + b]
                        return cols.astype(np.int32) if kind == "int32" else \
                            torch.from_numpy(cols)
                    gs = dpyg.GraphStore(store, name, time_attr=ta, chunk_edges=chunk)
                    gs.put_edge_range(edges, (lo, hi), **kw)
                    what = f"put_edge_range(callable) {name}"
                    check_same_csc(store, gs, ref, what)
                    limit = chunk if chunk is not None else hi - lo
                    check(all(0 <= a < b <= hi - lo and b - a <= limit for a, b in asked),
                          f"{what}: pieces asked {asked[:8]}...")
                    check(hi == lo or {a for a, _ in asked} >= set(range(
                        0, hi - lo, chunk or (hi - lo))), f"{what}: not every piece asked")
                    gs.remove_edge_index(edge_type=None, layout="coo")
                    for key in list(fs._attrs):
                        fs.remove_tensor(group_name=key[0], attr_name=key[1])
            ref.remove_edge_index(edge_type=None, layout="coo")
            for key in list(rfs._attrs):
                rfs.remove_tensor(group_name=key[0], attr_name=key[1])
    # hetero: sources and destinations of different types and counts
    ei_h = np.stack([ei[0] % 11, ei[1]])
    ref = dpyg.GraphStore(store, tag + "-h-ref")
    ref.put_edge_range(ei_h[:, lo:hi], (lo, hi), ("a", "r", "b"))
    gs = dpyg.GraphStore(store, tag + "-h", chunk_edges=3)
    gs.put_edge_range(lambda a, b: ei_h[:, lo + a:lo + b], (lo, hi), ("a", "r", "b"))
    check(gs.sampled_lists(("a", "r", "b")).size == (11, N), f"{tag}: hetero size")
    check_same_csc_typed(store, gs, ref, ("a", "r", "b"), f"{tag} hetero callable")
    for g in (gs, ref):
        g.remove_edge_index(edge_type=("a", "r", "b"), layout="coo")


def check_same_csc_typed(store, got, ref, et, what):
    a, b = csc_bytes(store, got, et), csc_bytes(store, ref, et)
    for k in b:
        check(k in a and same_array(a[k], b[k]), f"{what}: {k} differs from the array path")


def feature_store_callables(store, tag):
    rng = np.random.default_rng(5)
    tensors = {"x": rng.standard_normal((N, 5)).astype(np.float32),
               "y": rng.integers(-1, 9, N),
               "m": rng.standard_normal((N, 2, 3))}
    # rank 0 holds no rows (with 2+ ranks): its callable is asked rows_of(0, 0)
    if size > 1:
        lo, hi = (0, 0) if rank == 0 else partition(N, size - 1, rank - 1)
    else:
        lo, hi = 0, N
    ref = dpyg.FeatureStore(store, f"{tag}-f-ref")  # (one of a name: a second is refused)
    whole = dpyg.FeatureStore(store, f"{tag}-f-whole")
    for key, t in tensors.items():
        ref.put_range(t[lo:hi], (lo, hi), None, key)
        whole.put_tensor(t, group_name=None, attr_name=key)   # _put_tensor still works
        var_ref = ref._attrs[(None, key)].var
        for fs_ in (whole,):
            v = fs_._attrs[(None, key)].var
            check(same_array(fs_.get_tensor(group_name=None, attr_name=key), t) and
                  same_array(store.local_view(v), store.local_view(var_ref)),
                  f"{tag}: put_tensor({key}) differs from put_range(array)")
        check(same_array(ref.get_tensor(group_name=None, attr_name=key), t),
              f"{tag}: put_range(array {key}) differs from the tensor")
        for chunk in (None, 1, 7):
            for kind in ("numpy", "torch"):
                fs = dpyg.FeatureStore(store, f"{tag}-f-{chunk}-{kind}-{key}",
                                       chunk_rows=chunk)
                asked = []

                def rows_of(a, b):
                    asked.append((a, b))
                    piece = t[lo + a:lo + b]
                    return piece if kind == "numpy" else torch.from_numpy(piece)
                fs.put_range(rows_of, (lo, hi), None, key)
                what = f"{tag}: put_range(callable {key}) chunk_rows={chunk} {kind}"
                v = fs._attrs[(None, key)].var
                check(same_array(fs.get_tensor(group_name=None, attr_name=key), t) and
                      same_array(store.local_view(v), store.local_view(var_ref)),
                      f"{what}: differs from put_range(array)")
                check(fs.get_tensor_size(group_name=None, attr_name=key) == t.shape,
                      f"{what}: size")
                ends = [0] + [b for _, b in asked]
                check(all(a == ends[i] for i, (a, _) in enumerate(asked)) and
                      ends[-1] == hi - lo and (hi > lo or asked == [(0, 0)]) and
                      all(b - a <= (chunk or hi - lo) for a, b in asked),
                      f"{what}: pieces asked {asked[:8]}")
                fs.remove_tensor(group_name=None, attr_name=key)
        ref.remove_tensor(group_name=None, attr_name=key)
        whole.remove_tensor(group_name=None, attr_name=key)
    expect_error(DDStoreValueError, ["chunk_rows=0", "integer >= 1"], dpyg.FeatureStore,
                 store, "bad", chunk_rows=0)


class ArrayNodeData:
    """A range-wise node data set over arrays (the methods of OGBNodeData); ``fail``:
    ``(method, rank, call number)`` raises there; ``bad``: returns float64 there;
    ``row_block``: rows made in blocks of that many (read in whole aligned blocks)."""

    def __init__(self, ei, x, y, splits, undirected=True, fail=None, bad=None,
                 row_block=None):
        self.ei, self.x, self.y, self.splits = ei, x, y, splits
        self.num_nodes, self.num_edges = len(y), ei.shape[1]
        self.num_features = x.shape[1]
        self.split_name = "arrays"
        self.undirected = undirected
        if row_block is not None:
            self.row_block = row_block
        self.fail, self.bad, self.calls = fail, bad, {}

    def __repr__(self):
        return f"ArrayNodeData({self.num_nodes}, {self.num_edges})"

    def _call(self, what, out):
        k = self.calls[what] = self.calls.get(what, 0) + 1
        if self.fail is not None and self.fail[:2] == (what, rank) and k == self.fail[2]:
            raise OSError(f"{what}: the disk went away (call {k})")
        if self.bad is not None and self.bad[:2] == (what, rank) and k == self.bad[2]:
            return out.astype(np.float64)
        return out

    def edges(self, lo, hi, progress=None):
        return self._call("edges", self.ei[0, lo:hi]), self.ei[1, lo:hi]

    def features(self, lo, hi, progress=None):
        return self._call("features", self.x[lo:hi])

    def labels(self, lo, hi, progress=None):
        return self._call("labels", self.y[lo:hi])

    def split_size(self, which):
        return len(self.splits[which])

    def split(self, which, lo, hi):
        return self.splits[which][lo:hi]


def node_arrays(n=N, e=E, d=4, seed=3):
    rng = np.random.default_rng(seed)
    ei = rng.integers(0, n, (2, e))
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, 6, n)
    perm = rng.permutation(n)
    return ei, x, y, {"train": perm[:10], "valid": perm[10:15], "test": perm[15:]}


def put_arrays(store, name, ei, x, y, add_reverse):
    """The array path put_node_data took before: int64 interleaved edges, whole ranges."""
    fs, gs = dpyg.FeatureStore(store, name), dpyg.GraphStore(store, name)
    n, e = len(y), ei.shape[1]
    elo, ehi = partition(e, size, rank)
    if add_reverse:
        cols = np.empty((2, 2 * (ehi - elo)), dtype=np.int64)
        cols[0, 0::2], cols[1, 0::2] = ei[0, elo:ehi], ei[1, elo:ehi]
        cols[0, 1::2], cols[1, 1::2] = ei[1, elo:ehi], ei[0, elo:ehi]
        gs.put_edge_range(cols, (2 * elo, 2 * ehi), size=(n, n))
    else:
        gs.put_edge_range(ei[:, elo:ehi], (elo, ehi), size=(n, n))
    lo, hi = partition(n, size, rank)
    fs.put_range(x[lo:hi], (lo, hi), None, "x")
    fs.put_range(y[lo:hi], (lo, hi), None, "y")
    return fs, gs


def check_node_data(store, data, ref_fs, ref_gs, x, y, what):
    fs, gs = data.pyg
    check_same_csc(store, gs, ref_gs, what)
    for key, t in (("x", x), ("y", y)):
        v, rv = fs._attrs[(None, key)].var, ref_fs._attrs[(None, key)].var
        check(same_array(fs.get_tensor(group_name=None, attr_name=key), t) and
              same_array(store.local_view(v), store.local_view(rv)),
              f"{what}: {key} differs from the array path")
    check(data.num_classes == int(y.max()) + 1 and data.num_features == x.shape[1],
          f"{what}: {data.num_classes} classes, {data.num_features} features")


def drop(store, name):
    for v in [v for v in store.variables() if v.startswith(name + "/")]:
        store.remove(v)


def node_data(store, tag):
    for n, e, chunks in ((N, E, ((None, None), (7, 7), (1, 1))),
                         (2000, 9000, ((None, None), (500, 150)))):
        ei, x, y, splits = node_arrays(n, e)
        for add_reverse in (True, False):
            ref_fs, ref_gs = put_arrays(store, f"{tag}-nd-ref", ei, x, y, add_reverse)
            for block in (None, 5, 64):
                for piece in (ranges.PIECE_EDGES, 7):
                    for ce, cr in chunks:
                        if (piece == 7 or block) and (ce, cr) == (1, 1):
                            continue
                        src = ArrayNodeData(ei, x, y, splits, add_reverse, row_block=block)
                        name = f"{tag}-nd-{add_reverse}-{block}-{piece}-{ce}"
                        old, ranges.PIECE_EDGES = ranges.PIECE_EDGES, piece
                        try:
                            data = ranges.put_node_data(store, src, name=name,
                                                        progress=False, chunk_edges=ce,
                                                        chunk_rows=cr)
                        finally:
                            ranges.PIECE_EDGES = old
                        what = (f"{tag}: put_node_data n={n} reverse={add_reverse} "
                                f"row_block={block} edge pieces "
                                f"{piece} chunk_edges={ce} chunk_rows={cr}")
                        check_node_data(store, data, ref_fs, ref_gs, x, y, what)
                        reads = src.calls
                        if piece == 7 and e // size > 7:
                            check(reads.get("edges", 0) > 1, f"{what}: read {reads}")
                        if block:  # each block read once (a read may hold several)
                            nlo, nhi = partition(n, size, rank)
                            most = -(-nhi // block) - nlo // block + 1
                            check(reads.get("features", 0) <= most,
                                  f"{what}: {reads} reads of {nhi - nlo} rows in blocks "
                                  f"of {block}")
                        drop(store, name)
            drop(store, f"{tag}-nd-ref")


def ogb_streamed(store, tag):
    """put_node_data of OGB files read in small pieces (edges 7, rows 4, text blocks of
    64 bytes): byte-equal to the array path, and each file opened once."""
    from ddstore.sources import rows as R
    from ddstore.sources.ogb import OGBNodeData, write_ogb_node
    ei, x, y, splits = node_arrays(300, 1500, d=3)
    with shared_tmpdir() as tmp:
        root = os.path.join(tmp, "ogb")
        if rank == 0:
            write_ogb_node(root, ei, x, y.astype(np.float64), splits, "s")
        comm.Barrier()
        # the features as OGB's loaders give them: float64 text -> float32
        x_csv = np.loadtxt(os.path.join(root, "raw", "node-feat.csv.gz"), delimiter=",",
                           dtype=np.float64).astype(np.float32)
        ref_fs, ref_gs = put_arrays(store, f"{tag}-ogb-ref", ei, x_csv, y, True)
        src = OGBNodeData(root)
        opened, blocks, piece, block_bytes = [], R._blocks, ranges.PIECE_EDGES, R.BLOCK_BYTES

        def counting(path, block_bytes):
            opened.append(os.path.basename(path))
            return blocks(path, block_bytes)
        R._blocks, ranges.PIECE_EDGES, R.BLOCK_BYTES = counting, 7, 64
        try:
            data = ranges.put_node_data(store, src, name=f"{tag}-ogb", progress=False,
                                        chunk_edges=7, chunk_rows=4)
        finally:
            R._blocks, ranges.PIECE_EDGES, R.BLOCK_BYTES = blocks, piece, block_bytes
        what = f"{tag}: put_node_data of OGB files in pieces"
        check_node_data(store, data, ref_fs, ref_gs, x_csv, y, what)
        for f in ("edge.csv.gz", "node-feat.csv.gz", "node-label.csv.gz"):
            check(opened.count(f) == 1, f"{what}: {f} opened {opened.count(f)} times")
        check(src._readers == {}, f"{what}: streams left open")
        drop(store, f"{tag}-ogb")
        drop(store, f"{tag}-ogb-ref")
        # num-edge-list.csv.gz saying fewer or more edges than edge.csv.gz holds
        count = os.path.join(root, "raw", "num-edge-list.csv.gz")
        for claimed in (1400, 1600):
            comm.Barrier()
            if rank == 0:
                with gzip.open(count, "wt") as f:
                    f.write(f"{claimed}\n")
            comm.Barrier()
            expect_error(DDStoreValueError, [
                f"rank {size - 1}: {os.path.join(root, 'raw', 'edge.csv.gz')}: holds 1500 "
                f"rows, but {count} says {claimed}"], ranges.load_ogb, store, root,
                name=f"{tag}-ogb-bad", progress=False, agree=True, store=store,
                agreed=True, what=f"{tag}: num-edge-list says {claimed}, the file 1500")


def errors(store, tag):
    ei, edge_time, node_time = edge_data()
    lo, hi = partition(E, size, rank)
    last = size - 1
    before = store.variables()

    made = iter(range(1 << 30))  # (a graph store per put: one name is one store)

    def put_edges(edges, chunk=7, size=(N, N)):
        return dpyg.GraphStore(store, f"{tag}-bad{next(made)}", chunk_edges=chunk
                               ).put_edge_range(edges, (lo, hi), size=size)

    def raising_at(k, source, error):
        """``source`` as a piece callable that raises ``error(a)`` at its k-th call, on
        the last rank only"""
        calls = [0]

        def piece(a, b):
            calls[0] += 1
            if rank == last and calls[0] == k:
                raise error(a)
            return source(a, b)
        return piece

    def failing(k):
        return raising_at(k, lambda a, b: ei[:, lo + a:lo + b],
                          lambda a: KeyError(f"no column {a}"))
    n_local = hi - lo
    first_pass = -(-n_local // 7)
    for k, sized, when in ((1, (N, N), "the first pass"),
                           (first_pass + 1, None, "the degree pass (no size)"),
                           (first_pass + 2, (N, N), "the build rounds")):
        expect_error(DDStoreValueError, [f"rank {last}", "edge_index(", "raised KeyError",
                                         "no column"], put_edges, failing(k), size=sized,
                     agree=True, store=store, what=f"{tag}: edges callable raising in {when}")
    expect_error(DDStoreValueError, ["edge_index(0, 7) returned ndarray of shape (2, 8)",
                                     "expected [2, 7]"],
                 put_edges, lambda a, b: ei[:, lo + a:lo + b + 1], agree=True, store=store,
                 what=f"{tag}: edges of the wrong shape")
    expect_error(DDStoreValueError, ["edge_index(0, 7) returned dtype float32",
                                     "must be integers"],
                 put_edges, lambda a, b: ei[:, lo + a:lo + b].astype(np.float32),
                 agree=True, store=store, what=f"{tag}: edges of the wrong dtype")
    expect_error(DDStoreValueError, ["returned NoneType"], put_edges, lambda a, b: None,
                 agree=True, store=store, what=f"{tag}: edges callable returning None")
    expect_error(DDStoreIndexError, ["negative node id -3"], put_edges,
                 lambda a, b: np.full((2, b - a), -3 if rank == last else 0), agree=True,
                 store=store, what=f"{tag}: negative ids from a callable")
    expect_error(DDStoreIndexError, ["destination node", f"out of range [0, {N})"],
                 put_edges, lambda a, b: np.stack([np.zeros(b - a, int), np.full(b - a, N)]),
                 agree=True, store=store, agreed=True,
                 what=f"{tag}: ids out of range from a callable")

    def changing(change, k=2):
        """The rank's columns, but from the ``k``-th read of a piece on (on the last rank
        only) with ``change`` applied: a callable that is not deterministic."""
        reads = {}

        def drifting(a, b):
            reads[(a, b)] = reads.get((a, b), 0) + 1
            out = ei[:, lo + a:lo + b].copy()
            if rank == last and reads[(a, b)] >= k:
                change(out)
            return out
        return drifting

    def to_first(out):  # every destination becomes the first one
        out[1] = out[1, 0]

    def swap_sources(out):  # the same degrees, other sources: a silently wrong graph
        out[0] = (out[0] + 1) % N
    for change, chunk, sized, when in (
            (to_first, 7, (N, N), "same pieces"),
            (to_first, None, (N, N), "default pieces"),
            (swap_sources, 7, (N, N), "same pieces, same degrees"),
            (swap_sources, 7, None, "the degree pass (no size)")):
        n_last = partition(E, size, last)[1] - partition(E, size, last)[0]
        piece = "[0, 7)" if chunk == 7 else f"[0, {n_last})"
        expect_error(DDStoreValueError, [f"rank {last}", "drifting returned other columns",
                                         f"local columns {piece}",
                                         "must return the same columns every time"],
                     put_edges, changing(change), chunk=chunk, size=sized, agree=True,
                     store=store, agreed=True,
                     what=f"{tag}: an edges callable that changes ({when})")
    expect_error(DDStoreIndexError, ["rows=(5, 2)", "0 <= lo <= hi"],
                 dpyg.GraphStore(store, f"{tag}-bad").put_edge_range,
                 lambda a, b: ei[:, a:b], (5, 2), agree=True, store=store)
    check(store.variables() == before, f"{tag}: variables changed by failed edge puts")

    x = np.random.default_rng(2).standard_normal((N, 3)).astype(np.float32)
    nlo, nhi = partition(N, size, rank)

    def put_rows(rows_of, chunk=4):
        return dpyg.FeatureStore(store, f"{tag}-bad", chunk_rows=chunk).put_range(
            rows_of, (nlo, nhi), None, "x")

    def rows_failing(k):
        return raising_at(k, lambda a, b: x[nlo + a:nlo + b],
                          lambda a: RuntimeError(f"row {a} is gone"))
    for k in (1, 3):
        expect_error(DDStoreValueError, [f"rank {last}", "put (None, 'x'): rows_of(",
                                         "raised RuntimeError", "is gone"],
                     put_rows, rows_failing(k), agree=True, store=store,
                     what=f"{tag}: rows callable raising at call {k}")
    expect_error(DDStoreValueError, ["rows_of(0, 4) returned ndarray of shape (3, 3)",
                                     "expected 4 rows"],
                 put_rows, lambda a, b: x[nlo + a:nlo + b][:3], agree=True, store=store,
                 what=f"{tag}: too few rows")
    expect_error(DDStoreValueError, ["rows_of(4, 8) returned dtype float64 row shape (3,)",
                                     "first piece had float32 (3,)"],
                 put_rows, lambda a, b: x[nlo + a:nlo + b].astype(
                     np.float64 if a else np.float32), agree=True, store=store,
                 what=f"{tag}: a later piece of another dtype")
    expect_error(DDStoreValueError, ["rows_of(4, 8) returned dtype float32 row shape (2,)"],
                 put_rows, lambda a, b: x[nlo + a:nlo + b, :2 if a else 3], agree=True,
                 store=store, what=f"{tag}: a later piece of another row shape")
    if size > 1:
        expect_error(DDStoreValueError, ["dtype and row shape differs between ranks"],
                     put_rows, lambda a, b: x[nlo + a:nlo + b].astype(
                         np.float64 if rank == last else np.float32), agree=True,
                     store=store, what=f"{tag}: ranks' callables of different dtypes")
    check(store.variables() == before, f"{tag}: variables changed by failed row puts")

    # put_node_data: a read failing on one rank, late (after the CSC is stored)
    nei, nx, ny, splits = node_arrays()
    for fail, frags in ((("features", last, 3), ["features: the disk went away (call 3)"]),
                        (("labels", last, 2), ["labels: the disk went away (call 2)"]),
                        (("edges", last, 2), ["edges", "the disk went away (call 2)"])):
        src = ArrayNodeData(nei, nx, ny, splits, fail=fail)
        old, ranges.PIECE_EDGES = ranges.PIECE_EDGES, 7
        try:
            expect_error(DDStoreValueError, [f"rank {last}"] + frags, ranges.put_node_data,
                         store, src, name=f"{tag}-nd-bad", progress=False, chunk_rows=4,
                         agree=True, store=store,
                         what=f"{tag}: put_node_data with {fail} failing")
        finally:
            ranges.PIECE_EDGES = old
    src = ArrayNodeData(nei, nx, ny, splits, bad=("features", last, 2))
    expect_error(DDStoreValueError, [f"rank {last}", "returned dtype float64",
                                     "first piece had float32"],
                 ranges.put_node_data, store, src, name=f"{tag}-nd-bad", progress=False,
                 chunk_rows=4, agree=True, store=store,
                 what=f"{tag}: put_node_data with a features piece of another dtype")
    bad_ei = nei.copy()
    bad_ei[1, -1] = N + 5   # on the last rank's range
    expect_error(DDStoreValueError, [f"rank {last}", f"edge {E - 1}", f"outside [0, {N})"],
                 ranges.put_node_data, store, ArrayNodeData(bad_ei, nx, ny, splits),
                 name=f"{tag}-nd-bad", progress=False, agree=True, store=store,
                 what=f"{tag}: put_node_data with an edge out of range")
    expect_error(DDStoreValueError, ["chunk_rows=0"], ranges.put_node_data, store,
                 ArrayNodeData(nei, nx, ny, splits), name=f"{tag}-nd-bad", chunk_rows=0,
                 agree=True, store=store)
    check(store.variables() == before, f"{tag}: variables changed by failed node puts")


def main(widths=None):
    if widths is None:
        widths = every_width()
    for width in widths:
        tag = f"w{width}"
        with ddstore.DDStore(comm, width=width) as store:
            graph_store_callables(store, tag)
            feature_store_callables(store, tag)
            node_data(store, tag)
            ogb_streamed(store, tag)
            errors(store, tag)
            check(store.variables() == [], f"{tag}: left {store.variables()}")


if __name__ == "__main__":
    run_main(main, widths_from(sys.argv[1:]))
