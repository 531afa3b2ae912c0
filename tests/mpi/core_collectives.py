"""Ranks in different collective calls: every one of them raises the same
DDStoreValueError naming the ranks and their calls (no hang), and the store keeps what
it held.  Covers sync, free, the free of ``with DDStore``, the constructor and a layer's
constructor (WindowDataset after a failed local load_npy).

Usage: timeout 120 mpiexec -n N python core_collectives.py   (N >= 2)
"""
import os
import shutil
import tempfile

import numpy as np
from mpi4py import MPI

from _harness import check, expect_error, run_main

import ddstore  # noqa: E402
from ddstore import DDStoreValueError  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
others = "rank 1" if size == 2 else f"ranks {', '.join(map(str, range(1, size)))}"
n = 40 * size
data = np.arange(n * 3, dtype=np.float64).reshape(n, 3)


def main():
    assert size >= 2, "needs at least 2 ranks"
    store = ddstore.DDStore(comm)
    lo, hi = ddstore.partition(n, store.group_size, store.group_rank)
    store.add("x", data[lo:hi])

    def intact(label):
        check(store.variables() == ["x"], f"{label}: variables {store.variables()}")
        idx = np.random.default_rng(rank).integers(0, n, 50)
        check(store.get_batch("x", idx).tobytes() == data[idx].tobytes(),
              f"{label}: rows read back")

    def expect(label, fragments, fn):
        expect_error(DDStoreValueError, fragments, fn, what=label, agree=True)

    # sync on rank 0 while the others add: both told, nothing created
    expect("sync vs add", ["out of step", "rank 0 called sync()",
                           f"{others} called add('y')"],
           lambda: store.sync() if rank == 0 else store.add("y", data[lo:hi]))
    intact("after sync vs add")

    # free on rank 0 while the others add: rank 0's store is not freed
    expect("free vs add", ["out of step", "rank 0 called free()", "add('y')"],
           lambda: store.free() if rank == 0 else store.add("y", data[lo:hi]))
    check(not store.freed, "free() out of step freed the store")
    intact("after free vs add")

    # a second store's constructor on rank 0 while the others remove
    expect("DDStore vs remove", ["out of step", "rank 0 called DDStore()", "remove('x')"],
           lambda: ddstore.DDStore(comm) if rank == 0 else store.remove("x"))
    intact("after DDStore vs remove")

    # a layer's remove (a transaction) on the last rank while the others commit node
    # memory: the error names those two calls (the rollback, with nothing to undo, took
    # a round that met the others' next call, and its error replaced this one)
    from ddstore import temporal as tg
    g = tg.TemporalGraph.from_arrays(store, "g", np.array([0]), np.array([1]),
                                     np.array([1]))
    m = tg.NodeMemory(store, "m", 10, 2, 2)
    expect("commit vs a layer's remove", ["out of step", "called NodeMemory.commit('m')",
                                          "called TemporalGraph.remove('g')"],
           lambda: g.remove() if rank == size - 1 else m.commit())
    check(not g.removed, "the graph was removed on one rank")
    g.remove()
    m.remove()
    intact("after commit vs a layer's remove")

    # one rank's local load_npy fails (truncated local copy); it catches the error and
    # goes on to free() while the others build a WindowDataset: all are told, nothing
    # is left
    import ddstore.spatiotemporal as st  # torch: only after the core cases

    tmp = tempfile.mkdtemp(prefix=f"ddstore-coll{rank}-")
    try:
        own = os.path.join(tmp, "series.npy")
        # 60 steps: every split holds a window of horizon 3, so the others'
        # WindowDataset fails only because rank 0 is elsewhere (a local error of theirs
        # would be told first)
        series = np.random.default_rng(0).standard_normal((60, 4, 2)).astype(np.float32)
        np.save(own, series)
        if rank == 0:
            os.truncate(own, os.path.getsize(own) - 4 * 8 * 5)

        def npy_then_collective():
            try:
                s = st.load_npy(own)
            except DDStoreValueError as exc:
                check(rank == 0 and "truncated" in str(exc), f"load_npy error: {exc}")
                store.free()  # what a user who catches the error does next
                raise AssertionError("free() returned while the others build a "
                                     "WindowDataset")
            st.WindowDataset(store, "w", s, horizon=3)

        # (the others are in WindowDataset's first round, the agreement of the files
        # the series was read from: a step of a call already begun)
        expect("load_npy failure then free vs WindowDataset",
               ["out of step", "rank 0 called free()",
                f"{others} {'are' if size > 2 else 'is'} in WindowDataset('w')"],
               npy_then_collective)
        check(not store.freed, "free() vs WindowDataset freed the store")
        intact("after free vs WindowDataset")
    finally:  # this rank's own directory (its "local copy"), never left in /tmp
        shutil.rmtree(tmp, ignore_errors=True)

    # an error every rank raises together (agreed) leaving `with DDStore`: the store is
    # freed collectively on the way out
    inner = []

    def agreed_in_with():
        with ddstore.DDStore(comm) as s:
            inner.append(s)
            s.add("a", np.zeros((2, 2), dtype=np.float32 if rank == 0 else np.float64))

    expect("agreed error leaves with", ["add('a')", "dtype differs"], agreed_in_with)
    check(inner[0].freed, "an agreed error leaving `with` did not free the store")

    # an exception of this rank's own leaving `with DDStore` starts no collective call:
    # the store stays live (here every rank raises one and catches it, so the ranks can
    # then free it together)
    local = []
    try:
        with ddstore.DDStore(comm) as s:
            local.append(s)
            raise KeyError(f"local failure on rank {rank}")
    except KeyError:
        pass
    check(not local[0].freed, "a local exception leaving `with` ran the collective free")
    local[0].free()
    check(local[0].freed, "free() after a local exception")

    # the warning at 64 live stores: one line for the job, from the first rank that
    # reaches the count with a store, naming the ranks that do.  The ranks first hold as
    # many stores each (stores over COMM_SELF: the programs run before this one in the
    # same process may have left some alive)
    import logging
    from ddstore import _lifecycle
    told = []

    class Keep(logging.Handler):
        def emit(self, record):
            if "DDStores are alive" in record.getMessage():
                told.append(record.getMessage())

    def count_with(extra, more):
        """Hold ``extra`` stores over COMM_SELF, then make stores over ``comm`` until
        ``more`` are held; what was told meanwhile."""
        told.clear()
        keep = Keep()
        logging.getLogger("ddstore").addHandler(keep)
        own, many = [], []
        try:
            own = [ddstore.DDStore(MPI.COMM_SELF) for _ in range(extra)]
            while len(many) < more:
                many.append(ddstore.DDStore(comm))
        finally:
            for s in reversed(many + own):
                s.free()
            logging.getLogger("ddstore").removeHandler(keep)
        return list(told)

    most = max(comm.allgather(_lifecycle.live_count()))
    check(most < _lifecycle.MANY_STORES - 1, f"{most} stores alive before the check")
    level = most - _lifecycle.live_count()  # (each rank then holds `most`)
    got = count_with(level, _lifecycle.MANY_STORES - most)
    check(len(got) == (1 if rank == 0 else 0) and all(
        t.startswith(f"[ddstore] {_lifecycle.MANY_STORES} DDStores are alive") and
        "(every rank of the store's communicator)" in t for t in got),
        f"the warning at {_lifecycle.MANY_STORES} stores, on rank {rank}: {got}")
    # a rank that reaches the count alone (one store more) is told too, by itself
    got = count_with(level + int(rank == size - 1), _lifecycle.MANY_STORES - most - 1)
    check(len(got) == (1 if rank == size - 1 else 0) and all(
        f"(rank {size - 1} of the store's communicator)" in t for t in got),
        f"the warning at a count one rank reaches, on rank {rank}: {got}")
    store.free()


run_main(main)
