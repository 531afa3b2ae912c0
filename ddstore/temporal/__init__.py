"""Continuous-time temporal graphs over a :class:`~ddstore.DDStore` (TGL's data model).

A stream of timestamped interactions is kept as a **T-CSR** in the store (every node's
neighbours sorted by time, chunked by node range over each group, replicated by
``width``), sampled where it lives by a C loop that never looks into the future, and
iterated in time-ordered batches with TGL's random chunk scheduling; memory-based models
(TGN, JODIE, APAN) keep their per-node memory and mailbox in a :class:`NodeMemory`::

    from mpi4py import MPI
    import ddstore
    from ddstore import temporal as tg

    s = tg.synthetic_stream(10_000, 1_000_000, seed=0)
    with ddstore.DDStore(MPI.COMM_WORLD, width=2) as store:
        lo, hi = ddstore.partition(s.num_edges, store.size, store.rank)
        g = tg.TemporalGraph.from_arrays(store, "g", s.src[lo:hi], s.dst[lo:hi],
                                         s.t[lo:hi], edge_feat=s.edge_feat[lo:hi],
                                         split=s.split[lo:hi], add_reverse=True)
        sampler = tg.TemporalSampler(g, fanouts=(10, 10), strategy="uniform")
        for src, dst, neg, t, eid in tg.EdgeBatches(g, 600, chunks=4, comm=store.comm):
            roots = np.concatenate([src, dst, neg[:, 0]])
            blocks = sampler.sample(roots, np.tile(t, 3))
"""
from .batches import EdgeBatches
from .graph import SPLITS, TemporalGraph
from .memory import MemoryBatch, NodeMemory
from .metrics import average_precision, link_prediction_metrics, roc_auc
from .neighbor_sampler import TemporalBlock, TemporalSampler
from .synthetic import Stream, synthetic_stream
from ..sources import read_jodie_share, read_tgl_share, write_jodie, write_tgl

__all__ = ["TemporalGraph", "TemporalSampler", "TemporalBlock", "EdgeBatches",
           "synthetic_stream", "Stream", "write_tgl", "read_tgl_share", "write_jodie",
           "read_jodie_share", "SPLITS", "NodeMemory", "MemoryBatch", "average_precision",
           "roc_auc", "link_prediction_metrics"]
