"""Graph round-trips through all three sources, every width, both transports.

Usage: timeout 300 mpiexec -n N python graphs_roundtrip.py
For each source (in-memory samples, PFF directory, CFF ADIOS2 file) and each width that
divides N, every rank reads every graph back (one at a time, in random batches with
duplicates, as Batches) and compares it key by key with the original.  A DataLoader epoch
under DistributedSampler must see every graph exactly once over all ranks, each equal to
its original.  Also checks that from_samples touches only the rank's own chunk.
"""
import os
import sys

import numpy as np
import torch
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import check, run_main, shared_tmpdir  # noqa: E402
from graphs_common import (assert_batch_equal, assert_graph_equal,  # noqa: E402
                           rich_sample, tensor_sample)

import ddstore  # noqa: E402
import ddstore.graphs as graphs  # noqa: E402
from ddstore.errors import DDStoreIndexError  # noqa: E402
from torch_geometric.data import Batch  # noqa: E402
from torch_geometric.loader import DataLoader  # noqa: E402

torch.set_num_threads(1)
comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
N_RICH, N_TENSOR = 24, 36  # 36 divides evenly over 1..4 ranks
rich = [rich_sample(i) for i in range(N_RICH)]
tens = [tensor_sample(i) for i in range(N_TENSOR)]


def same_graphs(compare, got, want, what):
    """One check: ``compare`` (an ``assert_*_equal`` of graphs_common) finds ``got`` equal
    to ``want``; a difference is a failed check with its message."""
    try:
        compare(got, want, what)
    except AssertionError as exc:
        return check(False, str(exc))
    return check(True, what)


class Recording(torch.utils.data.Dataset):
    """A map-style dataset that records which indices were accessed."""

    def __init__(self, samples):
        self.samples, self.seen = samples, []

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        self.seen.append(int(i))
        return self.samples[i]


def check_all(ds, originals, tag):
    """Every graph, one at a time and in batches, equals its original."""
    if not check(len(ds) == len(originals), f"{tag}: len {len(ds)} != {len(originals)}"):
        return
    for i, want in enumerate(originals):
        same_graphs(assert_graph_equal, ds[i], want, f"{tag} graph {i}")
    rng = np.random.default_rng(7 + rank)
    idx = rng.integers(0, len(originals), 40)
    idx[:3] = [0, 0, len(originals) - 1]  # duplicates and the last one
    idx[3:5] = [-1, -len(originals)]  # counted from the end, as ds[-1]
    for i, got in zip(idx, ds.__getitems__(idx)):
        same_graphs(assert_graph_equal, got, originals[i], f"{tag} __getitems__ graph {i}")
    n = len(originals)
    for bad in ([n], [0, -n - 1]):
        try:
            ds.__getitems__(bad)
            check(False, f"{tag}: __getitems__({bad}) did not raise")
        except DDStoreIndexError as exc:
            check(f"out of range [{-n}, {n})" in str(exc), f"{tag}: {exc}")
    batch = ds.get_batch(idx)
    check(batch.num_graphs == len(idx), f"{tag}: get_batch num_graphs {batch.num_graphs}")
    if ds.layout.fast:
        ref = Batch.from_data_list([originals[i] for i in idx])
        same_graphs(assert_batch_equal, batch, ref, f"{tag} get_batch")
        # PyG's own to_data_list turns 0-d tensors into [1]; compare with its reference
        for i, got, want in zip(idx, batch.to_data_list(), ref.to_data_list()):
            same_graphs(assert_graph_equal, got, want, f"{tag} batch.to_data_list graph {i}")
    else:
        check(torch.equal(batch.x, torch.cat([originals[i].x for i in idx])),
              f"{tag} get_batch: x differs")
        check(torch.equal(batch.gid, torch.cat([originals[i].gid for i in idx])),
              f"{tag} get_batch: gid differs")


def check_epoch(ds, originals, tag, loader_kind):
    """A DataLoader epoch under DistributedSampler: every graph exactly once overall."""
    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=size, rank=rank,
                                                  shuffle=True, seed=3)
    sampler.set_epoch(2)
    if loader_kind == "pyg":
        loader = DataLoader(ds, batch_size=5, sampler=sampler)
    else:
        loader = ds.loader(5, sampler=sampler)
    seen = []
    for batch in loader:
        for got in batch.to_data_list():
            gid = int(got.gid[0])
            seen.append(gid)
            want = originals[gid]
            for key in ("x", "edge_index", "y"):
                check(torch.equal(got[key], want[key]), f"{tag}: graph {gid} {key}")
    everyone = sorted(sum(comm.allgather(seen), []))
    check(everyone == list(range(len(originals))),
          f"{tag} {loader_kind}: epoch saw {everyone}")


def main():
    with shared_tmpdir("ddstore-test-") as tmp:
        if rank == 0:
            graphs.write_pickle_dir(rich, os.path.join(tmp, "pff"))
            graphs.write_adios(rich, os.path.join(tmp, "rich.bp"))
            graphs.write_adios(tens, os.path.join(tmp, "tens.bp"))
        comm.Barrier()
        widths = sorted({1, 2 if size % 2 == 0 else 1, size})
        for transport in ("auto", "rma"):
            for width in widths:
                if transport == "rma" and width == 1:
                    continue  # width 1 never reads remotely
                with ddstore.DDStore(comm, width=width, transport=transport) as store:
                    tag = f"n{size} w{width} {transport}"
                    rec = Recording(rich)
                    ds = graphs.GraphDataset.from_samples(store, "rich", rec,
                                                          progress=False)
                    lo, hi = ddstore.partition(N_RICH, store.group_size,
                                               store.group_rank)
                    # its chunk, and on several ranks the first, middle and last samples
                    # (compared between the ranks)
                    compared = {0, N_RICH // 2, N_RICH - 1} if size > 1 else set()
                    assert sorted(set(rec.seen)) == sorted(set(range(lo, hi)) | compared), \
                        f"{tag}: from_samples touched {rec.seen}, chunk [{lo}, {hi})"
                    check_all(ds, rich, f"{tag} samples")
                    pff = graphs.GraphDataset.from_pickle_dir(
                        store, "pff", os.path.join(tmp, "pff"), progress=False)
                    check_all(pff, rich, f"{tag} pff")
                    cff = graphs.GraphDataset.from_adios(
                        store, "cff", os.path.join(tmp, "rich.bp"), progress=False)
                    check_all(cff, rich, f"{tag} cff")
                    tds = graphs.GraphDataset.from_samples(store, "tens", tens,
                                                           progress=False)
                    assert tds.layout.fast
                    check_all(tds, tens, f"{tag} tensor samples")
                    tcff = graphs.GraphDataset.from_adios(
                        store, "tcff", os.path.join(tmp, "tens.bp"), progress=False)
                    check_all(tcff, tens, f"{tag} tensor cff")
                    check_epoch(tds, tens, tag, "pyg")
                    check_epoch(tcff, tens, tag, "store")
                    # an Ising data set, as the main job uses it
                    ising = graphs.ising_dataset(12, seed=5)
                    ids = graphs.GraphDataset.from_samples(store, "ising", ising,
                                                           progress=False)
                    check_all(ids, [ising[i] for i in range(12)], f"{tag} ising")


run_main(main)
