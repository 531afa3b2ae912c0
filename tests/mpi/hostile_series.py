"""MPI program (2 ranks) of the hostile round on the spatiotemporal layer
(tests/test_hostile_series.py): a value beyond the stored dtype in steps only the last
member stores (width 2, halo) is refused with the same error on every rank, naming the
step, and nothing is stored; a statistic that overflows likewise; loaders given numpy
integers (batch size, seed, epoch) give DistributedSampler's order on every rank, for the
plain, prefetching and device='cpu' loaders; a loader's arguments or an epoch that differ
on one rank, or are bad there, raise on every rank.  Exits non-zero on any failure."""
import numpy as np
import torch
from mpi4py import MPI

from _harness import check, expect_error, run_main

torch.set_num_threads(1)

import ddstore  # noqa: E402
from ddstore import DDStoreValueError  # noqa: E402
from ddstore import spatiotemporal as st  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def main():
    base = np.random.default_rng(1).standard_normal((80, 3, 2))
    for width in (1, size):
        with ddstore.DDStore(comm, width=width) as store:
            big = base.copy()
            big[78, 2, 1] = 1e300  # in the last member's steps only (width 2)
            expect_error(DDStoreValueError, ["step 78, node 2, feature 1",
                                             "does not fit the stored dtype=float32"],
                         st.WindowDataset, store, "big", big, 2, standardize=False,
                         what=f"w{width} overflow", agree=True, store=store)
            expect_error(DDStoreValueError, ["overflows float64", "standardize=False"],
                         st.WindowDataset, store, "huge", base * 1e200, 2,
                         what=f"w{width} statistics", agree=True, store=store)
            ds = st.WindowDataset(store, "ok", base, 3, standardize=False,
                                  dtype=np.float64)
            train = ds.splits()[0]
            for kw in ({}, {"prefetch": 2}, {"device": "cpu"}):
                loader = train.loader(np.int64(4), seed=np.int64(9), **kw)
                for epoch in (np.int64(0), np.int64(2)):
                    st.set_epoch(loader, epoch)
                    got = [x.numpy() for xb, _ in loader for x in xb]
                    ref = torch.utils.data.DistributedSampler(
                        range(len(train)), num_replicas=size, rank=rank, seed=9)
                    ref.set_epoch(int(epoch))
                    want = [base[train.start + i:train.start + i + 3] for i in ref]
                    check(len(got) == len(want) and
                          all(np.array_equal(a, b) for a, b in zip(got, want)),
                          f"w{width} {kw} epoch {epoch}: not DistributedSampler's order")
            # the loader and set_epoch are collective: arguments that differ on one
            # rank (or are bad there) raise on every rank, naming them (they gave wrong
            # coverage: windows skipped and repeated, or ranks with other batch counts)
            last = rank == size - 1
            for kw, fragments in [
                    ({"seed": 1 if last else 0}, ["WindowDataset.loader(", "is collective", "seed differs between ranks (rank 0: 0; rank 1: 1)"]),
                    ({"batch_size": 3 if last else 4}, ["batch_size differs between ranks (rank 0: 4; rank 1: 3)"]),
                    ({"batch_size": 0 if last else 4}, ["batch_size=0 must be an integer"]),
                    ({"sampler": "batch", "seed": 5 if last else 6}, ["seed differs"]),
                    ({"shuffle": not last, "prefetch": 2}, ["shuffle differs"]),
                    ({"drop_last": last, "device": "cpu"}, ["drop_last differs"])]:
                kw = {"batch_size": 4, **kw}
                expect_error(DDStoreValueError, fragments, train.loader, what=f"w{width} "
                             f"loader {kw}", agree=True, store=store, **kw)
            for sampler in ("global", "batch"):  # no shuffle: the seed is unused
                got = [x for x, _ in train.loader(4, sampler=sampler, shuffle=False,
                                                  seed=rank)]
                want = [x for x, _ in train.loader(4, sampler=sampler, shuffle=False)]
                check(len(got) == len(want) and all(torch.equal(a, b) for a, b in
                                                    zip(got, want)),
                      f"w{width} {sampler}: seeds that differ without a shuffle")
            for kw in ({}, {"sampler": "batch"}, {"prefetch": 2}, {"device": "cpu"}):
                loader = train.loader(4, **kw)
                expect_error(DDStoreValueError, ["set_epoch(", "is collective", "epoch differs between ranks (rank 0: 2; rank 1: 3)"], st.set_epoch,
                             loader, 3 if last else 2, what=f"w{width} set_epoch {kw}",
                             agree=True)
                expect_error(DDStoreValueError, ["set_epoch: epoch must be an integer"],
                             st.set_epoch, loader, -1 if last else 2,
                             what=f"w{width} bad set_epoch {kw}", agree=True)
            store.remove("ok")
            check(store.variables() == [], f"left {store.variables()}")


run_main(main)
