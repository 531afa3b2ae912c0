"""ddstore.pyg.ranges on P ranks: load_ogb, load_npy and load_synthetic put exactly what
the files (or the generator) hold -- features and labels byte-equal, every edge and its
reverse under the right edge id, the splits' shares tiling the split files -- whatever P
and the width; a bad line in one rank's range raises the same error on every rank and
leaves the store as it was.

    timeout 600 mpiexec -n 2 python tests/mpi/pyg_ranges.py [width]
"""
import os
import sys

import numpy as np

from _harness import check, comm, expect_error, rank, run_main, shared_tmpdir

import ddstore
from ddstore.errors import DDStoreValueError
from ddstore.pyg import load_npy, load_ogb, load_synthetic
from ddstore.sources.ogb import write_ogb_node
from ddstore.sources.synthetic_nodes import SyntheticNodeGraph


def stored(data):
    """Everything the stores hold, read onto this rank: x, y, and {edge id: (src, dst)}."""
    fs, gs = data.pyg
    x = fs.get_tensor(group_name=None, attr_name="x").numpy() if data.num_features else None
    y = fs.get_tensor(group_name=None, attr_name="y").numpy().reshape(-1)
    row, col = gs.get_edge_index(edge_type=None, layout="coo")  # in the order put
    eid = np.sort(gs.edge_ids(None).numpy())
    return x, y, eid, row.numpy(), col.numpy()


def check_graph(label, data, x, y, src, dst, add_reverse, splits):
    sx, sy, eid, row, col = stored(data)
    if x is not None:
        check(sx.dtype == np.float32 and sx.tobytes() == x.astype(np.float32).tobytes(),
              f"{label}: x differs")
    check(sy.tolist() == y.tolist(), f"{label}: y differs")
    e = len(src)
    if add_reverse:
        want_row = np.empty(2 * e, dtype=np.int64)
        want_col = np.empty(2 * e, dtype=np.int64)
        want_row[0::2], want_col[0::2], want_row[1::2], want_col[1::2] = src, dst, dst, src
    else:
        want_row, want_col = src, dst
    check(eid.tolist() == list(range(len(want_row))), f"{label}: edge ids {eid[:10]}...")
    check(np.array_equal(row, want_row) and np.array_equal(col, want_col),
          f"{label}: edges differ")
    check(data.num_edges == len(want_row) and data.num_nodes == len(y),
          f"{label}: counts {data.num_nodes}, {data.num_edges}")
    check(data.num_classes == int(y.max()) + 1, f"{label}: {data.num_classes} classes")
    for which, ids in splits.items():
        got = np.concatenate(comm.allgather(data.splits[which]))
        check(np.array_equal(got, ids) and data.split_sizes[which] == len(ids),
              f"{label}: split {which}")


def main(width):
    rng = np.random.default_rng(7)
    n, e = 150, 700
    ei = rng.integers(0, n, (2, e))
    x = rng.standard_normal((n, 4)).astype(np.float32)
    y = rng.integers(0, 6, n)
    perm = rng.permutation(n)
    splits = {"train": perm[:40], "valid": perm[40:60], "test": perm[60:]}
    with shared_tmpdir() as tmp, ddstore.DDStore(comm, width=width) as store:
        root, npy, bad = (os.path.join(tmp, d) for d in ("ogbn_toy", "npy", "bad"))
        if rank == 0:
            write_ogb_node(root, ei, x, y.astype(np.float64), splits, "sales_ranking")
            os.makedirs(npy)
            np.save(os.path.join(npy, "edge_index.npy"), ei)
            np.save(os.path.join(npy, "x.npy"), x)
            np.save(os.path.join(npy, "y.npy"), y)
            for s, ids in splits.items():
                np.save(os.path.join(npy, f"{s}_idx.npy"), ids)
            write_ogb_node(bad, ei, x, y.astype(np.float64), splits)
            # a malformed line near the end of node-feat: in the last rank's range
            path = os.path.join(bad, "raw", "node-feat.csv.gz")
            import gzip
            lines = gzip.open(path, "rt").read().splitlines()
            lines[n - 3] = "1.0,2.0,oops,4.0"
            with gzip.open(path, "wt") as f:
                f.write("\n".join(lines) + "\n")
        comm.Barrier()
        # x from the CSV goes through float64 text -> float32, as OGB's loaders do
        x_csv = np.loadtxt(os.path.join(root, "raw", "node-feat.csv.gz"), delimiter=",",
                           dtype=np.float64).astype(np.float32) if rank == 0 else None
        x_csv = comm.bcast(x_csv)

        data = load_ogb(store, root, name="ogb", progress=False)
        check_graph("load_ogb", data, x_csv, y, ei[0], ei[1], True, splits)
        import contextlib
        import io
        err = io.StringIO()
        with contextlib.redirect_stderr(err):  # (tqdm's bars, on rank 0 only)
            data = load_npy(store, npy, name="npy", progress=True)
        check_graph("load_npy", data, x, y, ei[0], ei[1], False, splits)
        share = " (rank 0's share of %d)" % comm.size if comm.size > 1 else ""
        bars = err.getvalue()
        check(all(f"{what}{share}:" in bars for what in ("edges", "features", "labels"))
              if rank == 0 else bars == "", f"progress bars: {bars!r}")
        data = load_npy(store, name="npy2", add_reverse=True, progress=False,
                        edge_index=os.path.join(npy, "edge_index.npy"),
                        y=os.path.join(npy, "y.npy"))
        check(data.num_features == 0 and data.splits == {}, "load_npy without x / splits")
        check_graph("load_npy (paths, reversed)", data, None, y, ei[0], ei[1], True, {})

        g = SyntheticNodeGraph(scale=0.0004, seed=3)  # 980 nodes, 24744 edges
        data = load_synthetic(store, scale=0.0004, seed=3, name="syn")
        s, d = g.edges(0, g.num_edges)
        check_graph("load_synthetic", data, g.features(0, g.num_nodes),
                    g.labels(0, g.num_nodes), s, d, True,
                    {w: g.split(w, 0, g.split_size(w)) for w in ("train", "valid", "test")})

        before = store.variables()
        expect_error(DDStoreValueError, ["node-feat.csv.gz, line", f"{n - 2}", "column 2",
                                         "'oops' is not a number"],
                     load_ogb, store, bad, name="bad", progress=False, agree=True,
                     store=store, what="malformed line on the last rank")
        check(store.variables() == before, "the failed load left variables behind")
        expect_error(DDStoreValueError, ["raw/edge.csv.gz not found"], load_ogb, store,
                     os.path.join(tmp, "nowhere"), name="none", agree=True, store=store)


if __name__ == "__main__":
    w = sys.argv[1] if len(sys.argv) > 1 else None
    run_main(main, None if w in (None, "all") else int(w))
