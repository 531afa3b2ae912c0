"""Discrete-time dynamic graphs over a :class:`~ddstore.DDStore` (STGraph's idea):
checkpoints plus per-step edge deltas as store records, snapshots rebuilt on demand
(:class:`DynamicGraph`), and index-batched windows that carry each window's snapshots
(:class:`DynamicWindowDataset`).

::

    from ddstore.dynamic import DynamicGraph, DynamicWindowDataset
    series = ddstore.spatiotemporal.load_pgt_json("twitter_tennis_rg17.json")
    graph = DynamicGraph.from_series(store, "tennis", series)   # collective
    edge_index, edge_weight = graph[t]                           # snapshot t
"""
from .graph import DynamicGraph, canonical_edges
from .windows import DynamicWindowDataset

__all__ = ["DynamicGraph", "DynamicWindowDataset", "canonical_edges"]
