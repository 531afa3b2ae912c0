"""The temporal layer's hostile round, the cases that need several ranks (launched by
tests/test_hostile_temporal.py on 2 ranks):

- EdgeBatches with ``comm``: settings (batch_size, seed, shuffle_chunks, the graph) or the
  epoch that differ between ranks are refused on every rank naming the setting and each
  rank's value (ranks cut different batches: edges trained twice or never); a bad
  setting on one rank raises on every rank (no rank waits); equal settings given as
  other types (np.int64, np.bool_) agree; the batches cover the split once per epoch;
- link_prediction_metrics: a root that differs between ranks, a NaN score or a label 2
  on the last rank only, raised alike on every rank;
- a TGL directory copied per node whose ``edge_features.pt`` differs on the last rank,
  or that only rank 0 holds, refused on every rank naming the file (a mix of the two
  files' rows was stored); a directory at that path refused naming it (it was taken
  for no features), and the same files on every rank read as written.

    timeout 120 mpiexec -n 2 python tests/mpi/hostile_temporal.py
"""
import numpy as np
from mpi4py import MPI

from _harness import Cases, check, expect_error, run_main

import ddstore
from ddstore import DDStoreValueError
from ddstore import temporal as tg

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
cases = Cases()


@cases("EdgeBatches settings agreed", min_ranks=2)
def _(t):
    last = rank == size - 1
    with ddstore.DDStore(comm) as store:
        lo, hi = ddstore.partition(40, size, rank)
        src, dst = np.arange(40) % 7, (np.arange(40) * 3) % 7
        g = tg.TemporalGraph.from_arrays(store, "g", src[lo:hi], dst[lo:hi],
                                         np.arange(40)[lo:hi])
        g2 = tg.TemporalGraph.from_arrays(store, "g2", src[lo:hi], dst[lo:hi],
                                          np.arange(40)[lo:hi])
        for kw, words in ((dict(batch_size=6 if last else 4), "batch_size differs"),
                          (dict(seed=1 if last else 0), "seed differs"),
                          (dict(shuffle_chunks=not last), "shuffle_chunks differs"),
                          (dict(split="val" if last else "train"), "split differs"),
                          (dict(batch_size=0 if last else 4),
                           f"rank {size - 1}: EdgeBatches: batch_size must be an integer "
                           f">= 1, got 0")):
            args = dict(batch_size=4, chunks=2, comm=comm)
            args.update(kw)
            expect_error(DDStoreValueError, words, tg.EdgeBatches, g, agree=True,
                         agreed=True, what=f"EdgeBatches {kw}", **args)
        expect_error(DDStoreValueError, "graph differs", tg.EdgeBatches,
                     g2 if last else g, 4, comm=comm, agree=True, what="another graph")
        eb = tg.EdgeBatches(g, np.int64(4), chunks=2, comm=comm,
                            shuffle_chunks=np.bool_(True) if last else True)
        eb.set_epoch(3)
        expect_error(DDStoreValueError, "epoch differs", eb.set_epoch, 1 if last else 2,
                     agree=True, agreed=True)
        # the refused call changed no rank's epoch (the last rank's had moved to 1)
        check(comm.allgather(eb.epoch) == [3] * size,
              f"epochs after a refused set_epoch: {comm.allgather(eb.epoch)}")
        for epoch in range(3):
            eb.set_epoch(np.int64(epoch) if last else epoch)
            mine = [e for *_, e in eb]
            every = comm.allgather(mine)
            got = np.concatenate([np.concatenate([r[i] for r in every])
                                  for i in range(len(mine))])
            check(np.array_equal(np.sort(got), np.arange(40)) and
                  np.array_equal(got, np.sort(got)),
                  f"epoch {epoch}: the batches are not the split once in time order: {got}")


@cases("link_prediction_metrics agreed", min_ranks=2)
def _(t):
    last = rank == size - 1
    for kw, words in ((dict(root=1 if last else 0), "root differs"),
                      (dict(scores=[np.nan, .5] if last else [.9, .5]),
                       f"rank {size - 1}: link_prediction_metrics: scores[0] = nan"),
                      (dict(labels=[2, 0] if last else [1, 0]),
                       f"rank {size - 1}: link_prediction_metrics: labels[0] = 2.0")):
        args = dict(scores=[.9, .5], labels=[1, 0])
        args.update(kw)
        expect_error(DDStoreValueError, words, tg.link_prediction_metrics, comm,
                     agree=True, agreed=True, what=f"link_prediction_metrics {kw}", **args)
    got = tg.link_prediction_metrics(comm, [.5, .5], [1, 0])
    check(got is None if rank else got[:2] == (0.5, 0.5) and got[4] == size,
          f"metrics of tied scores: {got}")


@cases("TGL feature files the same on every rank", min_ranks=2)
def _(t):
    import os
    import shutil
    import tempfile
    import torch
    from ddstore.sources.tgl import write_tgl
    last = rank == size - 1
    src, dst, ts = np.arange(12) % 5, (np.arange(12) * 2) % 5, np.arange(12)
    feat = np.arange(24, dtype=np.float32).reshape(12, 2)
    base = tempfile.mkdtemp(prefix="ddstore-tgl-") if rank == 0 else None
    base = comm.bcast(base)
    mine = os.path.join(base, f"rank{rank}")  # a copy per rank, as one per node
    write_tgl(mine, src, dst, ts, np.zeros(12, np.int8), edge_feat=feat)
    epath = os.path.join(mine, "edge_features.pt")
    try:
        with ddstore.DDStore(comm) as store:
            g = tg.TemporalGraph.from_tgl(store, "ok", mine)
            check(np.array_equal(g.edge_features(np.arange(12)), feat),
                  "the same feature files on every rank: rows as written")
            if last:
                torch.save(torch.from_numpy(feat + 100), epath)  # same size, other rows
            comm.Barrier()
            expect_error(DDStoreValueError, [epath if rank == 0 else "edge_features.pt",
                                             "the ranks read different files, the same "
                                             "size but different bytes"],
                         tg.TemporalGraph.from_tgl, store, "mixed", mine, agree=False,
                         agreed=True, store=store, what="a feature file that differs")
            if rank:
                os.remove(epath)
            comm.Barrier()
            expect_error(DDStoreValueError, ["the ranks read different files",
                                             "no such file"],
                         tg.TemporalGraph.from_tgl, store, "one", mine, agreed=True,
                         store=store, what="a feature file on rank 0 only")
            if last:
                os.mkdir(epath)
            comm.Barrier()
            expect_error(DDStoreValueError, "edge_features.pt: ",
                         tg.TemporalGraph.from_tgl, store, "dir", mine, agreed=True,
                         store=store, what="a directory at edge_features.pt")
    finally:
        comm.Barrier()
        if rank == 0:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    run_main(cases.run)
