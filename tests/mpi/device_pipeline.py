"""The device pipeline on several ranks (device="cpu": the staging logic): window batches
through ``loader(device="cpu", prefetch=k)`` equal, byte for byte and in order, the plain
loader's, at every width and both transports (so with reads by MPI_Get from the
read-ahead thread over ``rma``), halo on and off (straddling windows read from two
owners), for the global and the batch sampler; graph batches through
``GraphDataset.loader(device="cpu", prefetch=k)`` likewise.

Usage: timeout 240 mpiexec -n N python device_pipeline.py [WIDTHS|all]
"""
import sys

import numpy as np
import torch

from _harness import check, each_store, rank, run_main, widths_from

from ddstore import spatiotemporal as st
from ddstore.device import DevicePrefetcher


def same(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape and
            a.contiguous().numpy().tobytes() == b.contiguous().numpy().tobytes())


def main():
    widths = widths_from(sys.argv[1:])
    series = np.random.default_rng(5).standard_normal((150, 7, 2)).astype(np.float32)
    from ddstore.graphs import GraphDataset, ising_dataset
    samples = [ising_dataset(16, size=3, seed=3)[i] for i in range(16)]
    for store, tag, _ in each_store(widths):
        for halo in (True, False):
            ds = st.WindowDataset(store, f"s{int(halo)}", series, 4, halo=halo)
            train = ds.splits()[0]
            for kw in ({"sampler": "global", "seed": 1}, {"sampler": "batch", "seed": 2}):
                for k in (0, 1, 3):
                    plain = train.loader(6, **kw)
                    piped = train.loader(6, device="cpu", prefetch=k, **kw)
                    check(isinstance(piped, DevicePrefetcher), f"{tag}: {type(piped)}")
                    for epoch in (0, 1):
                        st.set_epoch(plain, epoch)
                        st.set_epoch(piped, epoch)
                        want = [(x.clone(), y.clone()) for x, y in plain]
                        got = list(piped)
                        check(len(got) == len(want) > 0,
                              f"{tag} halo={halo} {kw} k={k}: {len(got)} != {len(want)}")
                        check(all(same(a, c) and same(b, d)
                                  for (a, b), (c, d) in zip(got, want)),
                              f"{tag} halo={halo} {kw} k={k} epoch {epoch}: batches differ")
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
    if rank == 0:
        print("device pipeline: windows and graphs equal through the pipeline", flush=True)


run_main(main)
