"""MPI program: DataLoader workers never serve a feature store that has changed since
they were forked (issue 43, item 4).

Usage: timeout 300 mpiexec -n N python tests/mpi/pyg_workers_stale.py   (N = 1 or 2;
also run in-process on one rank by tests/test_pyg_workers_stale.py)

A ``NeighborLoader`` with ``num_workers=2`` over a node-local store (width = all ranks,
``transport="auto"``), every batch checked against the data byte for byte
(``x == data.x[n_id]``, dtype included) and made in a worker process:

- ``persistent_workers=True``, then ``update_tensor`` of ``x`` with another dtype
  (float32 -> float64, other values) in the rank: the next epoch is refused by the
  workers with :class:`DDStoreStateError` (the issue's case: before, 0 of the epoch's
  batches had the new features); so after ``remove_tensor`` of ``y``, and after a new
  attribute ``z`` is put (which the old workers would silently leave out);
- ``persistent_workers=True`` and an ``update_tensor`` of the same layout (written in
  place) and rows put with an index: at width > 1 (the rows in MPI shared memory, which
  the workers share) every batch of the next epoch has the new values; at width 1 (each
  rank's rows in private memory, of which the workers have a copy) the workers refuse;
- ``persistent_workers=False``: after the dtype change, every batch of the next epoch
  has the new features (float64, the new values);
- a loader built after the change (persistent) serves the new features;
- in the rank (``num_workers=0``) every read goes on after every change;
- the same for the graph store: after ``build_backward`` and after its edges are removed
  and others put, persistent workers refuse to sample; a loader built after the change
  samples only the new edges.
"""
import os

import torch
from mpi4py import MPI

from _harness import Cases, check, expect_error, run_main

import ddstore  # noqa: E402
from ddstore import DDStoreStateError  # noqa: E402
from ddstore import pyg as dpyg  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.loader import NeighborLoader  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
N, E, BATCH = 60, 240, 3   # 10 batches per epoch on one rank (5 on each of 2)
cases = Cases()
STALE = ["DDStoreStateError", "feature store 'st' changed after the DataLoader workers "
         "started", "update_tensor with another dtype", "recreate the DataLoader",
         "persistent_workers=False"]
GRAPH_STALE = ["DDStoreStateError", "graph store 'st' changed after the DataLoader "
               "workers started", "edges were put or removed", "recreate the DataLoader",
               "persistent_workers=False"]


def make_data():
    g = torch.Generator().manual_seed(5)
    return Data(x=torch.randn(N, 4, generator=g), y=torch.arange(N),
                edge_index=torch.randint(0, N, (2, E), generator=g))


def _pid(batch):
    batch.pid = os.getpid()
    return batch


def loader(fs, gs, workers, persistent):
    return NeighborLoader((fs, gs), num_neighbors=[2], batch_size=BATCH,
                          neighbor_sampler=dpyg.NeighborSampler(gs, [2], seed=3),
                          input_nodes=torch.arange(rank, N, size), shuffle=False,
                          num_workers=workers, persistent_workers=persistent,
                          transform=_pid)


def epoch_matches(ld, x, tag, workers=True):
    """One epoch of ``ld``: check every batch's features against ``x`` (values and
    dtype) and where it was made; the number of batches with the features of ``x``."""
    good = total = 0
    for b in ld:
        total += 1
        same = b.x.dtype == x.dtype and torch.equal(b.x, x[b.n_id])
        good += same
        check(same, f"{tag}: batch {total}: features {b.x.dtype} are not "
                    f"x[n_id] ({x.dtype})")
        check((b.pid != os.getpid()) == workers,
              f"{tag}: batch {total} made in pid {b.pid} (rank {os.getpid()})")
    check(total == len(ld) and total > 0, f"{tag}: {total} batches of {len(ld)}")
    return good, total


def release(*loaders):
    """End the loaders' persistent workers now.  PyG's loader and its persistent
    iterator form a reference cycle (the iterator holds the loader's ``filter_fn``), and
    an error re-raised from a worker makes another (the re-raising frame holds the
    exception whose traceback holds that frame, and the iterator); freed by the garbage
    collector, the cycle's queues are finalized (their feeder threads stopped) before
    the iterator's ``__del__`` sends its workers the ``None`` that ends them, so each
    worker waits out torch's 5 s join and is terminated (10 s per loader of 2 workers;
    most of this program's time before).  Shutting the iterator's workers down here
    (torch's own ``_shutdown_workers``, which ``__del__`` calls again harmlessly) ends
    them at once."""
    for ld in loaders:
        it, ld._iterator = ld._iterator, None
        if it is not None:
            it._shutdown_workers()


def started(store, data, tag):
    """The feature and graph stores 'st' of ``data`` and a loader over them with 2
    persistent workers, after one epoch checked."""
    fs, gs = dpyg.from_pyg(store, data, name="st")
    ld = loader(fs, gs, 2, True)
    epoch_matches(ld, data.x, f"{tag}, epoch 1")
    return fs, gs, ld


def refused(ld, tag):
    """The next epoch of ``ld`` is refused (its first batch), with the message."""
    expect_error(DDStoreStateError, STALE, lambda: next(iter(ld)))


@cases("persistent workers refuse a feature store changed after their fork")
def _(t):
    data = make_data()
    with ddstore.DDStore(comm, width=size) as store:
        fs, gs, ld = started(store, data, "persistent")
        x64 = data.x.double() * 3 + 1
        fs.update_tensor(x64, group_name=None, attr_name="x")  # the case
        check(fs.get_tensor(group_name=None, attr_name="x").dtype == torch.float64,
              "the rank's x is float64")
        refused(ld, "persistent, after update_tensor float32 -> float64")
        refused(ld, "persistent, again")  # and every later epoch
        # a loader built after the change serves the new features
        ld2 = loader(fs, gs, 2, True)
        epoch_matches(ld2, x64, "persistent, built after the change")
        fs.remove_tensor(group_name=None, attr_name="y")
        refused(ld2, "persistent, after remove_tensor y")
        ld3 = loader(fs, gs, 2, True)
        epoch_matches(ld3, x64, "persistent, built after remove_tensor")
        fs.put_tensor(torch.ones(N, 2), group_name=None, attr_name="z")
        refused(ld3, "persistent, after a new attribute z")
        release(ld, ld2, ld3)


@cases("persistent workers see writes in place, or refuse them")
def _(t):
    # width > 1 on one node: the rows are in MPI shared memory, which the workers share;
    # width 1 (each rank a group of its own): private memory, the workers' copy is old
    for width in sorted({size, 1}, reverse=True):
        shared = width > 1
        tag = f"in place, width {width}"
        data = make_data()
        with ddstore.DDStore(comm, width=width) as store:
            fs, gs = dpyg.from_pyg(store, data, name="st")
            ld = loader(fs, gs, 2, True)
            epoch_matches(ld, data.x, f"{tag}, epoch 1")
            newer = data.x * -2
            fs.update_tensor(newer, group_name=None, attr_name="x")  # same layout
            if not shared:
                refused(ld, f"{tag}: update_tensor in private memory")
                check("written in place" in (expect_error(
                    DDStoreStateError, STALE, lambda: next(iter(ld))) or ""),
                      f"{tag}: the refusal names the write in place")
                release(ld)
                continue
            good, total = epoch_matches(ld, newer, f"{tag}, epoch 2")
            check(good == total, f"{tag}: {good} of {total} batches new")
            rows = torch.arange(0, N, 7)
            fs.put_tensor(torch.full((rows.numel(), 4), 9.0), group_name=None,
                          attr_name="x", index=rows)
            newer[rows] = 9.0
            epoch_matches(ld, newer, f"{tag}, epoch 3 (rows put with an index)")
            release(ld)


@cases("workers forked per epoch see every change")
def _(t):
    data = make_data()
    with ddstore.DDStore(comm, width=size) as store:
        fs, gs = dpyg.from_pyg(store, data, name="st")
        ld = loader(fs, gs, 2, False)
        epoch_matches(ld, data.x, "per epoch, epoch 1")
        x64 = data.x.double() + 0.5
        fs.update_tensor(x64, group_name=None, attr_name="x")
        good, total = epoch_matches(ld, x64, "per epoch, after float32 -> float64")
        check(good == total, f"per epoch: {good} of {total} batches new")
        l0 = loader(fs, gs, 0, False)
        epoch_matches(l0, x64, "num_workers=0", workers=False)
        fs.update_tensor(data.x.half(), group_name=None, attr_name="x")
        epoch_matches(l0, data.x.half(), "num_workers=0, float16", workers=False)
        release(ld, l0)


@cases("persistent workers refuse a graph store changed after their fork")
def _(t):
    data = make_data()
    with ddstore.DDStore(comm, width=size) as store:
        fs, gs, ld = started(store, data, "graph")
        gs.build_backward()  # out-lists added: a change of the graph store
        expect_error(DDStoreStateError, GRAPH_STALE, lambda: next(iter(ld)))
        ld2 = loader(fs, gs, 2, True)
        epoch_matches(ld2, data.x, "graph, built after build_backward")
        # the edges replaced by a ring i -> i + 1: old workers refuse, new ones sample it
        (attr,) = gs.get_all_edge_attrs()
        check(gs.remove_edge_index(attr), "remove_edge_index")
        ring = torch.arange(N)
        gs.put_edge_index(torch.stack([ring, (ring + 1) % N]), edge_type=None,
                          layout="coo", size=(N, N))
        expect_error(DDStoreStateError, GRAPH_STALE, lambda: next(iter(ld2)))
        ld3 = loader(fs, gs, 2, True)
        edges = 0
        for b in ld3:
            src, dst = b.n_id[b.edge_index[0]], b.n_id[b.edge_index[1]]
            check(torch.equal(src, (dst - 1) % N),
                  f"graph, after the ring was put: sampled edges {src}->{dst} not in it")
            check(torch.equal(b.x, data.x[b.n_id]), "graph, after the ring: features")
            edges += src.numel()
        check(edges > 0, "graph, after the ring: no edge sampled")
        release(ld, ld2, ld3)


def main():
    cases.run()


if __name__ == "__main__":
    run_main(main)
