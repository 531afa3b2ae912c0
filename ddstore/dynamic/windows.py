"""Index-batched windows whose graph changes every step: :class:`DynamicWindowDataset`
(a :class:`~ddstore.spatiotemporal.WindowDataset` plus the snapshots of a
:class:`~ddstore.dynamic.DynamicGraph`)."""
import numpy as np
import torch

from ..errors import DDStoreValueError
from ..spatiotemporal.dataset import WindowDataset
from .graph import DynamicGraph


class _Repeat:
    """``T`` references to one static edge array (a static graph as a dynamic one)."""

    def __init__(self, value, length):
        self.value, self.length = value, length

    def __len__(self):
        return self.length

    def __getitem__(self, t):
        if not 0 <= t < self.length:
            raise IndexError(t)
        return self.value


KIND = "DynamicWindowDataset"  # the kind of its annotation (checkpoint and restart)


class DynamicWindowDataset(WindowDataset):
    """Index-batched windows of node features plus each window's graph snapshots.

    A :class:`~ddstore.spatiotemporal.WindowDataset` (same ``horizon`` and ``split``
    ratios, same splits, as-if-SWA
    standardisation, samplers, placements, ``inverse_transform``; every keyword it takes
    is accepted) whose windows also carry the snapshots of a :class:`DynamicGraph` over
    the same steps.  Construction is **collective**: it adds the series ``name`` and the
    graph ``"<name>/graph"`` (if the graph fails, the series is removed again).

    The graph comes from ``graph`` (a :class:`DynamicGraph` of this store, held, with
    ``T`` steps and the series' node count), else from ``edges`` / ``weights`` (as for
    :class:`DynamicGraph`; ``dedup``, ``checkpoint_every`` and ``cache_size`` are passed
    on), else from a :class:`~ddstore.spatiotemporal.DynamicSeries` ``series``, else from
    the series' static graph repeated every step (stored once: one checkpoint, and empty
    deltas that are never read).

    Items:

    - ``ds[i]`` -> ``(x, y, graphs)``: ``x``, ``y`` ``[h, nodes, F]`` as for
      WindowDataset, ``graphs`` a list of ``(edge_index, edge_weight)``, one per step of
      ``x`` (``graph_steps="x"``, default) or of ``x`` then ``y`` (``"xy"``).
    - ``ds.get_batch(idx)`` -> ``(x, y, graphs)`` with ``x``, ``y`` ``[B, h, nodes, F]``
      and ``graphs[j]`` the step-``j`` snapshots of the ``B`` windows batched
      block-diagonally (window ``b``'s nodes are ``b * nodes .. (b + 1) * nodes - 1``,
      PyG's batching), so a recurrent GNN runs step ``j`` on
      ``x[:, j].reshape(B * nodes, F)``.  ``ds.__getitems__(idx)`` (what a DataLoader
      calls) is a :class:`~ddstore.spatiotemporal.WindowBatch` of the windows ``ds[i]``
      read with one ``get_batch``; ``collate_fn=batch_collate`` takes that batch.

    Reopen one by name with :meth:`open` (after :meth:`DDStore.restore
    <ddstore.DDStore.restore>`: no series nor edges needed); its graph is reopened too.
    """

    _KIND = KIND

    def __init__(self, store, name, series, horizon, split=(0.7, 0.1, 0.2), *,
                 edges=None, weights=None, graph=None, graph_steps="x", dedup=None,
                 checkpoint_every=None, cache_size=None, **kwargs):
        with store.collective("DynamicWindowDataset", name) as step:
            if graph_steps not in ("x", "xy"):
                raise DDStoreValueError(f"DynamicWindowDataset {name!r}: graph_steps="
                                        f"{graph_steps!r}; allowed: 'x', 'xy'")
            if graph is not None and not isinstance(graph, DynamicGraph):
                raise DDStoreValueError(f"DynamicWindowDataset {name!r}: graph must be a "
                                        f"DynamicGraph, got {type(graph).__name__}")
            if graph is not None and (edges is not None or weights is not None):
                raise DDStoreValueError(f"DynamicWindowDataset {name!r}: give graph= or "
                                        f"edges= (and weights=), not both")
            if weights is not None and edges is None:
                raise DDStoreValueError(f"DynamicWindowDataset {name!r}: weights= are the "
                                        f"weights of edges=, which is not given")
            # what shapes every window's graphs: the same on every rank
            step.agree(same={"graph_steps": graph_steps,
                             "graph": None if graph is None else graph.name})
        # the series and the graph, or nothing: a failure removes the series too
        with store.transaction(f"DynamicWindowDataset {name!r}"):
            super().__init__(store, name, series, horizon, split, **kwargs)
            T, n = self.num_steps, self.num_nodes
            self.graph_steps = graph_steps
            self._own_graph = graph is None
            with store.collective(None):  # the graph's steps and nodes fit the series
                if graph is not None:
                    # its name is what a checkpoint keeps: the graph must be this
                    # store's, as held now (another store's, or a freed one, would be
                    # another graph, or none, once reopened)
                    if graph.store is not store:
                        raise DDStoreValueError(
                            f"DynamicWindowDataset {name!r}: graph {graph.name!r} belongs "
                            f"to another store; build it in this one")
                    graph.check_held()
                    if graph.num_steps != T or graph.num_nodes != n:
                        raise DDStoreValueError(
                            f"DynamicWindowDataset {name!r}: graph has {graph.num_steps} "
                            f"steps and {graph.num_nodes} nodes, the series {T} steps and "
                            f"{n} nodes")
                else:
                    if edges is None and hasattr(series, "edges") and \
                            hasattr(series, "weights"):
                        edges, weights = series.edges, series.weights
                    if edges is None:  # a static graph: every step the same edges
                        edges = _Repeat(self.edge_index.numpy(), T)
                        weights = _Repeat(self.edge_weight.numpy(), T)
                    if not hasattr(edges, "__len__") or len(edges) != T:
                        raise DDStoreValueError(
                            f"DynamicWindowDataset {name!r}: edges has "
                            f"{len(edges) if hasattr(edges, '__len__') else '?'} steps, "
                            f"the series {T}")
            if graph is None:
                extra = {} if cache_size is None else {"cache_size": cache_size}
                graph = DynamicGraph(store, f"{name}/graph", edges, weights, num_nodes=n,
                                     checkpoint_every=checkpoint_every, dedup=dedup,
                                     **extra)
            self.graph = graph
            # what open() needs (its graph is annotated by DynamicGraph, by name)
            self._annotate(KIND, {"graph": graph.name, "graph_build_id": graph.build_id,
                                  "graph_steps": graph_steps,
                                  "own_graph": self._own_graph},
                           variables=graph.held() if self._own_graph else ())

    def _open(self, store, name, ann, device, resident):
        super()._open(store, name, ann, device, resident)
        self.graph_steps = ann.meta["graph_steps"]
        self._own_graph = bool(ann.meta["own_graph"])
        try:
            self.graph = DynamicGraph.open(store, ann.meta["graph"])
        except DDStoreValueError as exc:  # (a shared graph freed before the save)
            raise DDStoreValueError(f"DynamicWindowDataset {name!r}: its graph "
                                    f"{ann.meta['graph']!r} cannot be opened (freed before "
                                    f"the save?): {exc}") from None
        built_on = ann.meta.get("graph_build_id")  # (None: saved by a version without it)
        if built_on is not None and built_on != self.graph.build_id:
            raise DDStoreValueError(
                f"DynamicWindowDataset {name!r}: the store's graph {self.graph.name!r} is "
                f"not the one the dataset was built over (that one was freed, and another "
                f"built under its name, before the save); build the dataset again over it")

    def _graphs(self, starts, host=False):
        """The snapshots of windows ``starts`` (int64 numpy array, or a tensor of the
        series on the device), batched per step; on :attr:`device` unless ``host``."""
        h, n = self.horizon, self.num_nodes
        span = h if self.graph_steps == "x" else 2 * h
        if isinstance(starts, torch.Tensor):
            starts = starts.cpu().numpy()
        starts = np.asarray(starts, dtype=np.int64)
        B = starts.shape[0]
        steps = starts[:, None] + np.arange(span)
        uniq = np.unique(steps)
        snaps = dict(zip(uniq.tolist(), self.graph.snapshots(uniq)))
        views = {t: s[0].numpy() for t, s in snaps.items()} if B > 1 else None
        dev = self.device
        out = []
        for j in range(span):
            at = steps[:, j].tolist()
            col = [snaps[t] for t in at]
            if B == 0:  # an empty batch: no edges (weights float32, as stored)
                ei = torch.zeros((2, 0), dtype=torch.int64)
                ew = torch.zeros(0, dtype=torch.float32) if self.graph.weighted else None
            elif B == 1:  # (copies: the graph's cached snapshot is not the caller's)
                ei, ew = col[0][0].clone(), None if col[0][1] is None else col[0][1].clone()
            else:  # (in numpy: torch's cat and repeat_interleave took 2.5x as long)
                eis = [views[t] for t in at]
                ei = np.concatenate(eis, axis=1)
                ei += np.repeat(np.arange(B, dtype=np.int64) * n, [e.shape[1] for e in eis])
                ei = torch.from_numpy(ei)
                ew = None if col[0][1] is None else torch.cat([c[1] for c in col])
            if dev.type != "cpu" and not host:
                ei = ei.to(dev, non_blocking=True)
                ew = None if ew is None else ew.to(dev, non_blocking=True)
            out.append((ei, ew))
        return out

    def _fetch(self, starts, host=False, into=None, rows=None, direct=None):
        """Windows ``starts`` -> ``(x, y, graphs)`` (see the class docstring);
        ``host``, ``into`` and ``rows`` as for :class:`WindowDataset` (the device
        pipeline's staging: the graphs stay on the host too, and the pipeline copies
        them)."""
        x, y = super()._fetch(starts, host=host, into=into, rows=rows, direct=direct)
        return x, y, self._graphs(starts, host=host)

    def _fetch_one(self, start):
        """Window ``start`` -> ``(x, y, graphs)`` (see the class docstring)."""
        x, y = super()._fetch_one(start)
        return x, y, self._graphs(np.array([start], dtype=np.int64))

    def local_bytes(self):
        """Bytes this rank stores: its share of the series plus of the graph."""
        return super().local_bytes() + self.graph.nbytes()

    def _held(self):
        """Local: the series and (if this dataset built it) its graph, as the store
        still holds them (:meth:`free` removes them in one removal)."""
        return (self.graph.held() if self._own_graph else []) + super()._held()

    def free(self):
        """Collective: remove the series and (if this dataset built it) the graph.  Safe
        to call twice."""
        super().free()
        if self._own_graph:
            self.graph.forget()

    def __repr__(self):
        return (f"DynamicWindowDataset({self.name!r}, T={self.num_steps}, nodes="
                f"{self.num_nodes}, features={self.num_features}, horizon={self.horizon}, "
                f"windows={len(self)}, width={self.store.group_size}, "
                f"graph_steps={self.graph_steps!r}, checkpoint_every="
                f"{self.graph.checkpoint_every})")
