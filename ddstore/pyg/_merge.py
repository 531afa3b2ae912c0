"""PyG's ``SamplerOutput.merge_with`` (``replace=True``), by its rules but in
O(n log n): PyG's compares every merged node with every node (``global_to_local_node_idx``
builds an n x n mask: 12.8 GB for one 1,024-seed batch of a [10, 5]
``BidirectionalNeighborSampler``) and dedups in a Python loop (``unique_unsorted``).
Here the nodes and edges are told apart by sorting (``torch.unique``), and each is
placed where PyG places it: in the order first seen.  The outputs are PyG's, field for
field (tests/test_pyg_reference.py compares them on random outputs), for what the
samplers give: int64 ids, and in disjoint outputs every seed among the nodes."""
import copy

import torch
from torch_geometric.sampler import SamplerOutput

__all__ = ["merge_outputs"]

_INT64_MAX = torch.iinfo(torch.int64).max


def _row_ids(keys):
    """One int64 per row of the ``[n, c]`` integer ``keys``, equal for equal rows only
    (each column shifted to start at 0 and folded into the ids of the columns before it,
    compacted when the product would pass int64); None when even compacted ids cannot
    take a column."""
    lo = keys.min(dim=0).values
    spans = [int(h) - int(m) + 1 for h, m in zip(keys.max(dim=0).values, lo)]
    if max(spans) > _INT64_MAX:  # (a column's values would overflow, shifted)
        return None
    shifted = keys - lo
    ids = shifted[:, 0]
    for j, span in enumerate(spans[1:], 1):
        if (int(ids.max()) + 1) > _INT64_MAX // span:
            ids = torch.unique(ids, return_inverse=True)[1]
            if (int(ids.max()) + 1) > _INT64_MAX // span:
                return None
        ids = ids * span + shifted[:, j]
    return ids


def _first_seen(keys):
    """``(rows, where)`` for the ``[n, c]`` integer ``keys``: ``rows`` its distinct rows
    in the order first seen (what PyG's ``unique_unsorted`` returns), ``where[i]`` the
    position of row ``i`` in ``rows``."""
    n = keys.shape[0]
    if n == 0:
        return keys, torch.zeros(0, dtype=torch.long)
    ids = _row_ids(keys)
    if ids is None:  # (sorting rows is several times slower than sorting their ids)
        _, inv = torch.unique(keys, dim=0, return_inverse=True)
    else:
        inv = torch.unique(ids, return_inverse=True)[1]
    first = torch.full((int(inv.max()) + 1,), n, dtype=torch.long)
    first.scatter_reduce_(0, inv, torch.arange(n), "amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.shape[0])
    return keys[first[order]], rank[inv]


def _added(where, n_old, counts):
    """PyG's per-call counts of what a merge adds: for each call's slice of the second
    output (``counts``, in order), how many distinct entries the first output's and that
    slice hold together, less the first output's length."""
    if counts is None:
        return None
    out, at = [], n_old
    old = where[:n_old]
    for c in counts:
        both = torch.cat([old, where[at:at + c]])
        out.append(int(torch.unique(both).shape[0]) - n_old)
        at += c
    return out


def merge_outputs(first, second):
    """``first.merge_with(second)`` for two homogeneous :class:`SamplerOutput`: the
    nodes of both, each once (keyed by ``(node, seed_node)`` when both have ``batch``,
    i.e. disjoint subgraphs) in the order first seen; every edge once (keyed by its
    ends and its id) in the order first seen; ``batch`` the position of each node's
    seed; ``num_sampled_nodes`` / ``num_sampled_edges`` the first's, then what each of
    the second's calls added; ``metadata`` both.  Outputs that keep their original edges
    (``orig_row``, PyG's ``to_bidirectional(keep_orig_edges=True)``) are merged by PyG's
    own code."""
    if first.orig_row is not None or second.orig_row is not None:
        return first.merge_with(second)
    disjoint = first.batch is not None and second.batch is not None
    old, new = [first.node.view(-1, 1)], [second.node.view(-1, 1)]
    if disjoint:
        old.append(first.seed_node.view(-1, 1))
        new.append(second.seed_node.view(-1, 1))
    old, new = torch.cat(old, dim=1), torch.cat(new, dim=1)
    n_old = old.shape[0]
    nodes, where = _first_seen(torch.cat([old, new]))
    batch = None
    if disjoint:  # the position of (seed, seed) among the merged nodes
        seeds = nodes[:, 1:].expand(-1, 2)
        _, at = _first_seen(torch.cat([nodes, seeds]))
        pos = torch.full((int(at.max()) + 1 if at.numel() else 0,), -1, dtype=torch.long)
        pos[at[:nodes.shape[0]]] = torch.arange(nodes.shape[0])
        batch = pos[at[nodes.shape[0]:]]
    with_ids = first.edge is not None and second.edge is not None
    ends = [torch.stack([where[first.row], where[first.col]], dim=1),
            torch.stack([where[n_old + second.row], where[n_old + second.col]], dim=1)]
    if with_ids:
        ends = [torch.cat([e, x.view(-1, 1)], dim=1)
                for e, x in zip(ends, (first.edge, second.edge))]
    edges, e_where = _first_seen(torch.cat(ends))
    sampled_nodes = (None if first.num_sampled_nodes is None or
                     second.num_sampled_nodes is None else
                     copy.copy(first.num_sampled_nodes)
                     + _added(where, n_old, second.num_sampled_nodes))
    sampled_edges = (None if first.num_sampled_edges is None or
                     second.num_sampled_edges is None else
                     copy.copy(first.num_sampled_edges)
                     + _added(e_where, ends[0].shape[0], second.num_sampled_edges))
    return SamplerOutput(
        node=nodes[:, 0].contiguous(), row=edges[:, 0].contiguous(),
        col=edges[:, 1].contiguous(),
        edge=edges[:, 2].contiguous() if with_ids else None, batch=batch,
        num_sampled_nodes=sampled_nodes, num_sampled_edges=sampled_edges,
        metadata=[first.metadata, second.metadata])
