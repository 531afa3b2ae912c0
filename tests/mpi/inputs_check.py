"""MPI program: inputs that differ between ranks, or that only all the ranks together
can find wrong, are refused on every rank naming what is wrong (issue 35, part 4).

- ``pyg.from_pyg`` / ``pyg.from_hetero`` / ``TemporalGraph.from_pyg`` handed data of
  the same shapes and dtypes but other values on one rank (a shuffled copy, one value
  changed, another ``split``): the same error on every rank naming the value and the
  ranks that hold each fingerprint; nothing stored; equal data (numpy on one rank,
  torch on another) loads;
- ``pyg.load_ogb`` / ``pyg.load_npy`` of a split that lists a node twice, the two rows
  read by two ranks (OGB's train: 23 ids for 20 nodes): the file and line of the repeat
  named on every rank; nothing stored;
- ``pyg.put_node_data`` of a source whose labels are not class ids (2**63 - 1: no
  ``num_classes``): refused naming the node.

    timeout 600 mpiexec -n 2 python tests/mpi/inputs_check.py
"""
import os

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
                                         "TemporalData 't' differs between ranks"],
                     TemporalGraph.from_pyg, st, "g",
                     TemporalData(src=src, dst=dst, t=times, msg=torch.ones(n, 2)),
                     agree=True, store=st)


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


if __name__ == "__main__":
    run_main(cases.run)
