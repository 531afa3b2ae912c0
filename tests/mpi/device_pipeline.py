"""The device pipeline on several ranks (device="cpu": the staging logic): window batches
through ``loader(device="cpu", prefetch=k)`` equal, byte for byte and in order, the plain
loader's, at every width and both transports (so with reads by MPI_Get from the
read-ahead thread over ``rma``), halo on and off (straddling windows read from two
owners), for the global and the batch sampler, with ``direct=True`` too (windows copied
from the store's memory where this rank maps them: all of them at width 1 and, with a
halo, over shared memory; staged otherwise) and ``device_views`` checked against the
member's rows; graph batches through
``GraphDataset.loader(device="cpu", prefetch=k)`` likewise; a variable removed, the
store freed, or a variable set aside by a transaction, under a read-ahead thread.

Usage: timeout 240 mpiexec -n N python device_pipeline.py [WIDTHS|all]
"""
import sys

import numpy as np
import torch

from _harness import check, each_store, rank, run_main, widths_from

from ddstore import spatiotemporal as st
from ddstore.device import DevicePrefetcher, DeviceRows
from ddstore.errors import DDStoreError, DDStoreStateError, DDStoreValueError
from ddstore.prefetch import prefetch


def same(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape and
            a.contiguous().numpy().tobytes() == b.contiguous().numpy().tobytes())


class BigReads:
    """Batches that are long reads of the store (every row of ``name``, 64 KiB each,
    most of them from other members): a read-ahead thread is inside one almost always."""

    def __init__(self, store, name, n, records=False):
        self.store, self.name, self.n, self.records = store, name, n, records

    def __iter__(self):
        if self.records:  # record set of one-row records (key "x"): all of them
            ids = np.arange(self.store.nrows(self.name))
            for _ in range(self.n):
                yield self.store.get_records_packed(self.name, ids)[0]["x"]
            return
        rows = np.arange(self.store.nrows(self.name))
        for _ in range(self.n):
            yield self.store.get_batch(self.name, rows)


def drain(it, got):
    """Append the rest of iterator ``it`` to ``got``; the exception that ended it, or
    None."""
    try:
        for batch in it:
            got.append(batch)
    except Exception as exc:  # noqa: BLE001 -- its kind is the caller's check
        return exc
    return None


def unmapped_under_reads(store, tag, free):
    """The read-ahead thread reads while the caller removes the variable (``free``:
    frees the store): the removal waits for the batch in flight (no read of unmapped
    memory: this used to end the rank with a segmentation fault now and then); every
    batch handed over afterwards is whole, then the iteration raises that the variable
    is gone (or the store freed) and ends."""
    def rows(member):  # a group member's 40 rows (replicas hold the same)
        return np.broadcast_to(np.arange(member * 40, member * 40 + 40.0)[:, None],
                               (40, 8192))
    data = rows(store.group_rank).copy()
    store.add("big", data)
    want = np.concatenate([rows(m) for m in range(store.group_size)])
    for pipe in (prefetch(BigReads(store, "big", 50), 3, store=store),
                 DevicePrefetcher(BigReads(store, "big", 50), "cpu", prefetch=3)):
        if "big" not in store:
            store.add("big", data)
        it = iter(pipe)
        first = next(it)
        if free:
            store.free()
        else:
            store.remove("big")
        got = [first]
        error = drain(it, got)
        whole = all(np.asarray(b).tobytes() == want.tobytes() for b in got)
        check(whole and 1 <= len(got) <= 5, f"{tag} {type(pipe).__name__} free={free}: "
              f"{len(got)} batches, whole {whole}")
        kind = DDStoreStateError if free else DDStoreValueError
        check(isinstance(error, kind), f"{tag} {type(pipe).__name__} free={free}: "
              f"{error!r}")
        if free:
            return


def set_aside_under_reads(store, tag):
    """A transaction removes the variable a read-ahead loader reads mid-epoch (sets it
    aside): the batches made ahead meanwhile read it as it was (they used to fail with
    "unknown variable" on the ranks whose thread read then, by timing, even when the
    transaction rolled back).  Rolled back: every batch of the epoch whole.  Committed:
    the batches handed over are whole, then the iteration raises that it is gone.  Rows
    variables and record sets alike."""
    want = np.arange(store.group_size * 3 * 512, dtype=np.float64).reshape(-1, 512)
    lo = store.group_rank * 3  # (each group of replicas holds every row)
    for commit, records in ((False, False), (True, False), (False, True), (True, True)):
        for pipe in (prefetch(BigReads(store, "big", 12, records), 2, store=store),
                     DevicePrefetcher(BigReads(store, "big", 12, records), "cpu",
                                      prefetch=2)):
            if records:
                store.add_records("big", [{"x": want[i:i + 1]} for i in range(lo, lo + 3)])
            else:
                store.add("big", want[lo:lo + 3])
            it = iter(pipe)
            got = [next(it)]
            try:
                with store.transaction("replace"):
                    store.remove("big")
                    for _ in range(4):  # each taken lets the thread make one more
                        got.append(next(it))
                    if not commit:  # agreed by a step: the transaction rolls back
                        with store.collective("fails here"):
                            raise RuntimeError("roll back")
            except DDStoreError as exc:
                check(not commit and "roll back" in str(exc), f"{tag}: {exc!r}")
            what = f"{tag} {type(pipe).__name__} commit={commit} records={records}"
            check(("big" in store) != commit, f"{what}: 'big' in store: {'big' in store}")
            error = drain(it, got)
            whole = all(np.asarray(b).tobytes() == want.tobytes() for b in got)
            check(whole and (len(got) == 12 if not commit else 5 <= len(got) < 12),
                  f"{what}: {len(got)} batches, whole {whole}, {error!r}")
            check((error is None) if not commit else (
                isinstance(error, DDStoreValueError) and "'big'" in str(error)),
                f"{what}: {error!r}")
            if not commit:
                store.remove("big")


def main():
    widths = widths_from(sys.argv[1:])
    series = np.random.default_rng(5).standard_normal((150, 7, 2)).astype(np.float32)
    from ddstore.graphs import GraphDataset, ising_dataset
    samples = [ising_dataset(16, size=3, seed=3)[i] for i in range(16)]
    made = [0]  # DeviceRows leaves made on the device (direct=True)
    assemble = DeviceRows.assemble

    def counted(self, *a, **kw):
        made[0] += 1
        return assemble(self, *a, **kw)
    DeviceRows.assemble = counted
    for store, tag, transport in each_store(widths):
        for halo in (True, False):
            ds = st.WindowDataset(store, f"s{int(halo)}", series, 4, halo=halo)
            train = ds.splits()[0]
            for kw in ({"sampler": "global", "seed": 1}, {"sampler": "batch", "seed": 2}):
                for k, direct in ((0, False), (1, False), (3, False), (0, True),
                                  (3, True)):
                    plain = train.loader(6, **kw)
                    piped = train.loader(6, device="cpu", prefetch=k, direct=direct, **kw)
                    check(isinstance(piped, DevicePrefetcher), f"{tag}: {type(piped)}")
                    what = f"{tag} halo={halo} {kw} k={k} direct={direct}"
                    for epoch in (0, 1):
                        st.set_epoch(plain, epoch)
                        st.set_epoch(piped, epoch)
                        want = [(x.clone(), y.clone()) for x, y in plain]
                        made[0] = 0
                        got = list(piped)
                        check(len(got) == len(want) > 0,
                              f"{what}: {len(got)} != {len(want)}")
                        check(all(same(a, c) and same(b, d)
                                  for (a, b), (c, d) in zip(got, want)),
                              f"{what} epoch {epoch}: batches differ")
                        # every window mapped here (one rank's chunk, or the group's
                        # in shared memory, whole windows with a halo): all direct
                        every = store.width == 1 or (
                            store.shm_peers == store.group_size - 1 and halo)
                        want_made = 2 * len(got) if direct and every else None
                        check(made[0] == want_made if want_made is not None else
                              (made[0] <= 2 * len(got) and (direct or made[0] == 0)),
                              f"{what}: {made[0]} direct leaves for {len(got)} batches")
            views = store.device_views(ds.name, torch.device("cpu"))
            lo, hi = store.local_rows(ds.name)
            mine = views[store.group_rank]
            check(mine is not None and mine.shape[0] == hi - lo and same(
                mine, torch.from_numpy(store.get_range(ds.name, lo, hi - lo))),
                f"{tag}: device_views' own chunk is not the member's rows")
            mapped = store.shm_peers == store.group_size - 1  # every member, in shm
            check(all((v is not None) == (mapped or m == store.group_rank)
                      for m, v in enumerate(views)) and
                  (transport == "auto" or not mapped or store.group_size == 1),
                  f"{tag}: members mapped {[v is not None for v in views]}")
            store.remove(ds.name)
        gd = GraphDataset.from_samples(store, "g", samples, progress=False)
        sampler = torch.utils.data.DistributedSampler(gd, store.size, store.rank, seed=4)
        want = list(gd.loader(3, sampler=sampler))
        for k in (0, 2):
            got = list(gd.loader(3, sampler=sampler, device="cpu", prefetch=k))
            check(len(got) == len(want) > 0 and all(
                same(a.x, b.x) and same(a.edge_index, b.edge_index) and same(a.y, b.y)
                and same(a.batch, b.batch) for a, b in zip(got, want)),
                f"{tag} graphs k={k}: batches differ")
        store.remove("g")
        unmapped_under_reads(store, tag, free=False)
        set_aside_under_reads(store, tag)
    for store, tag, _ in each_store(widths):
        unmapped_under_reads(store, tag, free=True)
    if rank == 0:
        print("device pipeline: windows and graphs equal through the pipeline", flush=True)


run_main(main)
