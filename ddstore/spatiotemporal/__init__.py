"""Index-batched spatiotemporal windows over a :class:`~ddstore.DDStore`.

PGT-I's index-batching: a series of graph signals ``[T, nodes, features]`` on a static
graph is kept **once** (in the store, standardised), together with the valid window
starts ``s in [0, T - 2h + 1)``; the sequence-to-sequence windows
``x = series[s : s+h]``, ``y = series[s+h : s+2h]`` are cut on demand, a whole
mini-batch per store read.  Materialising every window would cost ``2h`` times the series.

::

    from mpi4py import MPI
    import ddstore
    from ddstore import spatiotemporal as st

    series = st.load_pgt_json("chickenpox.json")          # or from_arrays / load_pems_h5
    with ddstore.DDStore(MPI.COMM_WORLD, width=1) as store:  # width=1: replicated
        ds = st.WindowDataset(store, "cases", series, horizon=4, split=(0.7, 0.1, 0.2))
        train, val, test = ds.splits()      # default: disjoint in time (overlap=False)
        x, y = train[0]                     # [h, nodes, features] each
        loader = train.loader(32)           # DistributedSampler + batched reads
        for epoch in range(10):
            st.set_epoch(loader, epoch)
            for xb, yb in loader:           # [B, h, nodes, features]
                ...
        pred_original_units = ds.inverse_transform(pred)

Placements: ``width == 1`` replicated (no communication); ``width > 1`` partitioned (time
steps striped over the group, halo of ``2h - 1`` steps by default); ``device=`` for
windows gathered on a GPU.  :class:`BatchShuffleSampler` shuffles batches of consecutive
starts; ``torch.utils.data.DistributedSampler`` shuffles samples globally.
"""
from .dataset import (WindowBatch, WindowDataset, WindowSplit, batch_collate, set_epoch,
                      time_feature_array)
from ..sources import (DynamicSeries, Series, adjacency_to_edges, from_arrays,
                       gaussian_kernel_adjacency, load_npy, load_pems_h5, load_pgt_json,
                       write_pems_h5)
from .batch_sampler import BatchShuffleSampler
from .windows import largest_horizon, num_windows, split_ranges, window_weights

__all__ = ["WindowDataset", "WindowSplit", "BatchShuffleSampler", "Series", "from_arrays",
           "load_pgt_json", "load_pems_h5", "load_npy", "write_pems_h5", "adjacency_to_edges",
           "gaussian_kernel_adjacency", "time_feature_array", "batch_collate", "set_epoch",
           "split_ranges", "num_windows", "window_weights", "largest_horizon"]
__all__ += ["DynamicSeries", "WindowBatch"]
