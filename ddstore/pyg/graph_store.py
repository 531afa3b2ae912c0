"""PyG's ``GraphStore`` over a :class:`~ddstore.DDStore`: every edge type held once as CSC
(sorted by destination, then by time, then by edge id), striped by destination-node
ranges over each group, replicated by ``width``.

This module is the PyG adapter: PyG's calls, ``open`` and the annotation it reads, and
the accessors the sampler uses.  The graph store's state is one
:class:`~ddstore.pyg._graph_state.GraphState`; the distributed CSC build is
:mod:`ddstore.pyg._csc_build`, the times, weights and out-lists
:mod:`ddstore.pyg._edge_attrs`."""
import dataclasses

import numpy as np
import torch
from torch_geometric.data import EdgeAttr as _PygEdgeAttr
from torch_geometric.data import GraphStore as _PygGraphStore
from torch_geometric.data.graph_store import EdgeLayout

from .. import partition
from .._collective import call_name
from ..build import check_chunk_edges
from ..errors import DDStoreValueError
from ._common import (GRAPH_KIND, annotation_name, as_edge_type, as_numpy, check_rows,
                      check_store_name, declared_rows, find_annotation,
                      same_values, type_from_json, type_key, type_to_json)
from ._csc_build import (as_coo, build, checked_columns, decide, first_pass, node_attr_rows,
                         remove_lists, node_ids, node_offsets)
from ._edge_attrs import EdgeAttributes, checked_weight_attr
from ._forks import ForkVersion
from ._graph_state import GraphState, Lists

__all__ = ["GraphStore", "EdgeAttr"]


@dataclasses.dataclass
class EdgeAttr(_PygEdgeAttr):
    """PyG's ``EdgeAttr`` with ``edge_type`` defaulting to None (a homogeneous graph) and
    ``layout`` to ``"coo"``."""

    def __init__(self, edge_type=None, layout="coo", is_sorted=False, size=None):
        super().__init__(edge_type, layout, is_sorted, size)


class GraphStore(_PygGraphStore):
    """PyG's ``torch_geometric.data.GraphStore`` over a :class:`~ddstore.DDStore`.

    Every stored edge index (an edge type -- ``None`` for a homogeneous graph, else
    ``(src, rel, dst)`` -- in one layout) is held as **CSC**: the sources of each
    destination node's incoming edges, sorted by destination, then (when the store has a
    ``time_attr``) by time, then by edge id.  Three store variables of one row per edge:
    ``<name>/csc/<type>/<layout>/nbr`` (source node; ``<layout>~1`` after a replacement,
    below), ``.../eid`` (edge id) and, with an
    edge-level time, ``.../ts`` (the edge's time: int64 for an integer time attribute,
    else float64).  ``nbr`` and
    ``eid`` are both **int32 when both fit** (``num_src_nodes <= 2**31 - 1`` and
    ``num_edges <= 2**31 - 1``: 8 bytes per edge, half of PyG's int64 ``edge_index``),
    else both int64 (16 bytes per edge); ``ts`` adds 8.  What the sampler and
    :meth:`edge_ids` return is int64 either way; :meth:`get_edge_index` returns the
    dtypes put (an int32 edge index reads back int32, as from PyG's stores).  Member
    ``g`` of every group holds the lists of a contiguous destination-node range chosen
    so that members hold about equal numbers of edges.  Replicated on every rank:
    ``indptr`` (``num_dst + 1`` int64) and the member ranges.  The edge index is never
    gathered whole on any rank, except by an explicit :meth:`get_edge_index` (and PyG's
    ``coo()`` / ``csr()`` / ``csc()`` built on it), which return whole tensors as PyG's
    own stores do.

    **Edge ids**: edge ``i`` is entry ``i`` of the edge index as put: column ``i`` of a
    COO edge index (with :meth:`put_edge_range`: the global column of the ranks'
    ranges), entry ``i`` of a CSC's ``row`` or a CSR's ``col``.  They index the edge
    attributes of the :class:`FeatureStore` and are what the sampler returns as ``e_id``.

    **Layouts, as PyG's stores keep them**: each ``(edge_type, layout)`` is stored on
    its own (``put_edge_index`` with ``coo`` and then ``csr`` stores both, even
    different graphs; ``gs.csr(store=True)`` adds the CSR of the stored COO) and
    :meth:`get_all_edge_attrs` lists each, in the order put.  ``get_edge_index(type,
    layout)`` returns exactly what was put in that layout: a COO ``(row, col)`` in the
    order put, a CSR ``(rowptr, col)`` or CSC ``(row, colptr)`` as given (the pointer of
    the length given); a layout never put raises a ``KeyError``
    (:class:`~ddstore.pyg.UnknownAttributeError`), as PyG's do.  PyG's ``coo()``,
    ``csr()`` and ``csc()`` convert from a stored layout as PyG's stores do, with the
    permutation from that layout's order (``perm``: None when the layout is stored). **A
    layout put again replaces it** (as in PyG's stores), all or nothing: the new lists
    are built beside the old ones (``<layout>~1``), which go, with their out-lists, once
    the new ones are complete and the outermost transaction ended; a sampler built
    before refuses its next batch (docs/pyg.md).  Each layout is a CSC of its own (its
    memory, as PyG's in-memory stores keep each layout's tensors).  The sampler samples,
    per edge type, the layout PyG's ``csc()`` converts from (a stored CSC, else COO,
    else CSR; for edge type ``None`` the first put, as PyG's homogeneous ``csc()``), so
    its ``e_id`` are that layout's edge ids, as PyG's ``perm`` would make them.

    **No edges**: an edge type with zero edges is stored (its ``size`` gives the node
    counts) and sampled (seeds only).

    **Time** (``time_attr``): the name of an attribute of the :class:`FeatureStore` with
    the same ``store`` and ``name``: an edge attribute of the edge type (edge-level time)
    or a node attribute of the source node type (node-level time), one value per row, put
    **before** the edges.  The CSC is then sorted by that time within every list, as
    PyG's temporal sampling requires.  An integer time attribute is kept and compared
    exactly, as int64 (Unix nanoseconds included; uint64 values beyond int64 are
    refused), a float one as float64 (:mod:`ddstore._times`).
    Edge-level time is kept per entry (``.../ts``); node-level time is not: every rank
    keeps the source type's times as one replicated array (integer times: int32 when
    every one fits, else int64; float times: float32 when float32 holds every one
    exactly, else float64: 4 or 8 bytes per source node, shared by the edge
    types of that source type; read at the put: later changes
    to the attribute are not seen, as the lists' order would not follow them), through
    which the sampler finds each list's eligible entries.
    In a heterogeneous graph, an edge type with neither (its source node type has no
    time attribute) is stored without times and sampled without a time rule: its
    neighbours are always eligible, as in PyG.

    **Weights** (``weight_attr``, for weighted sampling: ``NeighborSampler(...,
    weight_attr=...)``): the name of an edge attribute of the :class:`FeatureStore` (same
    ``store`` and ``name``), one real number per edge, put **before** the edges.  Each
    put then checks every weight (a negative, NaN or infinite one raises the same
    :class:`~ddstore.DDStoreValueError` on every rank, naming the smallest such edge id
    and its value, and nothing is stored) and keeps a copy in CSC order (``.../w``, so
    that the sampler reads a list's weights with the list): **float32** (4 more bytes
    per edge) when the attribute is float32, float16 or bfloat16 (float32 holds those
    exactly), else float64 (8 more bytes per edge).  The sampler computes in double
    either way, so the draws are those of the attribute's own values.  A hetero edge
    type without that attribute is unweighted (sampled uniformly, as PyG does); a
    homogeneous graph without it is an error.  An edge type put without weights can be
    weighted later by :meth:`put_edge_weights`.  The copy is the graph store's own: once
    the edges are put, ``fs.remove_tensor`` of the attribute frees its 4-8 bytes per edge
    when batches do not need the weights (PyG's homogeneous loaders read no edge
    attribute; :func:`~ddstore.pyg.edge_features` and heterogeneous loaders read them by
    ``e_id``), and weighted sampling, :meth:`weight_attr_of` and :meth:`build_backward`
    (whose out-lists take their weights from the copy) go on as before; only a later
    put or :meth:`put_edge_weights` needs the attribute again.

    Construction is collective (every rank, the same ``name``, ``time_attr``,
    ``weight_attr`` and ``chunk_edges``, checked: a bad or differing argument on any rank
    raises the same error on every rank).

    Putting is **collective** (checked like every collective call; bad input on any rank
    -- whatever reading it raises -- raises the same :class:`~ddstore.DDStoreError` on
    every rank and nothing is stored):

    - ``put_edge_index(edge_index, edge_type=..., layout="coo"|"csc"|"csr", size=...)``
      (PyG's call): the quick path, **every rank passes the whole edge index** (COO
      ``[2, E]``, CSC ``(row, colptr)`` or CSR ``(rowptr, col)``);
    - :meth:`put_edge_range` ``(edge_index, rows=(lo, hi), edge_type=..., size=...)``:
      the range-wise path (layout COO), **each rank passes its own COO columns**
      ``[lo, hi)`` (a ``[2, hi - lo]`` array, or a callable ``edges(a, b)`` returning
      local columns ``[a, b)`` on demand); the ranks' ranges must cover
      ``[0, num_edges)`` once.

    ``size = (num_src_nodes, num_dst_nodes)``: default, the rows of a stored node
    attribute of that type, else the largest node id + 1 (at least the nodes of a CSR /
    CSC pointer; a pointer for more nodes than a given ``size`` is refused).
    ``remove_edge_index(edge_type, layout)`` (collective) removes that
    layout and returns True, or False when it was not stored (as PyG's stores).

    **Memory**: the CSC is built like a T-CSR (:mod:`ddstore.build`, keyed by
    destination): its variables are created once at their final size and filled in
    place, each rank sending ``chunk_edges`` of its edges per round (default
    :func:`~ddstore.build.default_chunk_edges`), and every list is sorted in C.
    The edges are read in pieces of at most ``chunk_edges`` columns: a pass that checks
    them and counts the degrees (two passes without ``size``; one more with a
    ``time_attr``, to check the times), then the rounds of the build.  Beyond the edges
    passed in (nothing, with a callable), a put holds only one piece, one round's
    buffers, the degrees and the ``indptr``.
    """

    def __init__(self, store, name="pyg", time_attr=None, chunk_edges=None,
                 weight_attr=None):
        super().__init__(edge_attr_cls=EdgeAttr)
        with store.collective("GraphStore", name) as step:
            check_store_name(name, "GraphStore", store, GRAPH_KIND)
            chunk_edges = check_chunk_edges(chunk_edges, name)
            if time_attr is not None and (not isinstance(time_attr, str) or not time_attr):
                raise DDStoreValueError(f"time_attr must be None or a non-empty str, got "
                                        f"{time_attr!r}")
            weight_attr = checked_weight_attr(weight_attr)
            step.agree(same={"time_attr": time_attr, "weight_attr": weight_attr,
                             "chunk_edges": chunk_edges})
        self._setup(store, name, time_attr, weight_attr, chunk_edges)
        self._state.made_in_step()

    def _setup(self, store, name, time_attr, weight_attr, chunk_edges):
        """Local: the graph store's state (:class:`GraphState`, the lists' bookkeeping
        its parts share) and its per-edge attributes (:class:`EdgeAttributes`)."""
        self.store, self.name, self.time_attr = store, name, time_attr
        self.chunk_edges = chunk_edges
        self._state = GraphState(store, name, time_attr, weight_attr, chunk_edges,
                                 self._annotate)
        self._attrs = EdgeAttributes(self._state)
        # DataLoader workers forked before a change refuse the graph store (_forks.py)
        self._forks = ForkVersion(
            "graph store", name, "edges were put or removed, weights put or out-lists "
            "built")

    @property
    def weight_attr(self):
        """The edge attribute the lists are weighted by (None: unweighted)."""
        return self._state.weight_attr

    # ------------------------------------------------------------ checkpoint
    def _annotate(self, record=True):
        """Local, alike on every rank, at the end of every call that changes what is
        stored: record it in the annotation ``"<name>#pyg.GraphStore"`` (what
        :meth:`open` rebuilds from; ``record=False`` in rollbacks: forked workers told,
        the journal gives the annotation back), each list's ``indptr`` as an array
        and the cuts of its variables (a restore splits at list boundaries)."""
        self._forks.changed()
        if not record:
            return
        state = self._state
        arrays, cuts, variables, times = {}, {}, [], {}
        by_id = {id(t): v for v, t in state.node_times.items()}

        def entry(c, tag):
            e = {"edge_type": type_to_json(c.edge_type), "layout": c.layout.value,
                 "size": [int(x) for x in c.size], "num_edges": int(c.num_edges),
                 "vars": dict(c.vars), "time_attr": c.time_attr,
                 "time_level": c.time_level, "is_sorted": bool(c.is_sorted),
                 "ptr_nodes": None if c.ptr_nodes is None else int(c.ptr_nodes),
                 "time_dtype": None if c.time_dtype is None else np.dtype(
                     c.time_dtype).str, "dropped": bool(c.dropped),
                 "index_dtypes": None if c.index_dtypes is None else list(c.index_dtypes),
                 "indptr": None, "node_times": None}
            if c.indptr is not None:
                e["indptr"] = key = f"indptr:{tag}"
                arrays[key] = c.indptr
                for v in c.vars.values():
                    variables.append(v)
                    cuts[v] = key
            if c.node_times is not None:
                k = times.setdefault(id(c.node_times), f"node_times:{len(times)}")
                arrays[k] = c.node_times
                e["node_times"] = [k, by_id.get(id(c.node_times))]
            return e
        stored = [entry(c, f"in{i}") for i, c in enumerate(state.stored.values())]
        out = [entry(c, f"out{i}") for i, c in enumerate(state.reversed.values())]
        meta = {"name": self.name, "time_attr": self.time_attr,
                "weight_attr": self.weight_attr, "chunk_edges": self.chunk_edges,
                "stored": stored, "reversed": out}
        self.store.annotate(annotation_name(GRAPH_KIND, self.name), GRAPH_KIND, meta,
                            arrays, variables=variables, cuts=cuts)

    @classmethod
    def open(cls, store, name="pyg"):
        """Local: the graph store ``name`` of ``store`` as it was saved
        (:meth:`DDStore.save`), reopened from a store made by :meth:`DDStore.restore`
        (or :meth:`DDStore.load`) at any rank count and width, with no source data:
        every stored ``(edge type, layout)`` in the order put (sizes, pointers as put,
        ``is_sorted``), ``time_attr`` with its time-sorted lists (edge-level times per
        entry, node-level times replicated), ``weight_attr`` and the weights in CSC
        order, the out-lists of :meth:`build_backward` (in-lists dropped included) and
        ``chunk_edges``.  The lists' variables were restored split at list boundaries
        (the annotation's cuts); each member's destination-node range is derived from
        :meth:`DDStore.chunk_offsets` and the replicated ``indptr``.  A sampler over the
        opened graph store gives the batches it gave over the saved one for the same
        ``seed``; ``get_edge_index`` gives what was put.  No communication (deterministic
        from what every rank holds alike); every rank calls it.  An unknown ``name``
        raises a :class:`~ddstore.DDStoreValueError` naming the graph stores held."""
        ann = find_annotation(store, GRAPH_KIND, name, "GraphStore.open")
        with ann.reading(f"GraphStore.open({name!r})"):
            meta, arrays, self = ann.meta, ann.arrays, cls.__new__(cls)
            _PygGraphStore.__init__(self, edge_attr_cls=EdgeAttr)
            self._setup(store, name, meta["time_attr"], meta["weight_attr"],
                        meta["chunk_edges"])
            state, width = self._state, store.group_size

            def entry(e):
                edge_type, vars_ = type_from_json(e["edge_type"]), dict(e["vars"])
                indptr = node_off = times = None
                for v in vars_.values():
                    if v not in store:
                        raise DDStoreValueError(
                            f"GraphStore.open {name!r}: edge type {edge_type!r} needs "
                            f"variable {v!r}, which the store does not hold")
                under = tuple(f"{name}/{kind}/{type_key(edge_type)}/"
                              for kind in ("csc", "out"))
                old = [v for v in vars_.values() if not v.startswith(under)]
                if old:  # saved before names were escaped (docs/pyg.md): its times and
                    # weights would be looked up under names they do not have, and missed
                    raise DDStoreValueError(
                        f"GraphStore.open {name!r}: edge type {edge_type!r} was saved as "
                        f"{old[0]!r}, which this version names under {under[0]!r} (a "
                        f"type name with '/', '%' or a double, leading or trailing "
                        f"underscore): put the graph again from its source")
                if e["indptr"] is not None:
                    indptr = arrays[e["indptr"]]
                    node_off = node_offsets(indptr, store.chunk_offsets(vars_["nbr"]),
                                            width)
                if e["node_times"] is not None:
                    key, var = e["node_times"]
                    times = arrays[key]
                    if var is not None:
                        state.node_times[var] = times
                c = Lists(edge_type, tuple(e["size"]), e["num_edges"], indptr, node_off, vars_,
                         e["time_attr"], e["time_level"], EdgeLayout(e["layout"]),
                         e["is_sorted"], e["ptr_nodes"], times,
                         None if e["time_dtype"] is None else np.dtype(e["time_dtype"]), store)
                c.dropped = e["dropped"]
                dts = e.get("index_dtypes")  # (absent from older checkpoints: int64)
                c.index_dtypes = None if dts is None else tuple(dts)
                return (edge_type, c.layout), c
            for e in meta["stored"]:
                key, c = entry(e)
                state.stored[key] = c
            for e in meta["reversed"]:
                key, c = entry(e)
                state.reversed[key] = c
            for edge_type in dict.fromkeys(k[0] for k in state.stored):
                state.choose(edge_type)
        return self

    # ------------------------------------------------------------------ putting
    def _put_edge_index(self, edge_index, edge_attr):
        """Collective (PyG's ``put_edge_index``): every rank passes the whole edge index
        (the same, in the same dtypes); each keeps the columns ``partition(E, size,
        rank)`` and the CSC is built from those shares.  A layout already stored is
        replaced (see the class docstring)."""
        layout = EdgeLayout(edge_attr.layout)
        edge_type = as_edge_type(edge_attr.edge_type)
        what = f"put_edge_index ({edge_type!r}, {layout.value})"
        st = self.store
        with st.collective("GraphStore.put", call_name(edge_type)) as step:
            self._state.check_mine()
            src, dst, ptr_nodes, dtypes = as_coo(edge_index, layout, what)
            n = src.shape[0]
            lo, hi = partition(n, st.size, st.rank)

            def columns(a, b):  # views of this rank's share
                return src[lo + a:lo + b], dst[lo + a:lo + b]
            plan = first_pass(self._state, columns, lo, hi, edge_type, edge_attr.size,
                              what, layout=layout, ptr_nodes=ptr_nodes)
            decide(self._state, plan, step.agree(plan.share(), same={
                "edges (the whole edge index on every rank)": n,
                "pointer nodes": ptr_nodes, "edge index dtypes": dtypes,
                "is_sorted": bool(edge_attr.is_sorted), **plan.same(),
                **same_values({"sources": src, "destinations": dst}, what)}))
            plan.index_dtypes = dtypes
        return build(self._state, self._attrs, plan, columns,
                     is_sorted=bool(edge_attr.is_sorted))

    def put_edge_range(self, edge_index, rows, edge_type=None, size=None):
        """Collective: store an edge type from each rank's own COO columns.

        ``edge_index`` holds edge ids ``rows = (lo, hi)``: either a ``[2, hi - lo]``
        integer array (sources, destinations; read in slices, with no copy), or a
        callable ``edges(a, b)`` returning the **local** columns ``[a, b)`` (edge ids
        ``lo + a`` to ``lo + b``) as a ``[2, b - a]`` integer array or tensor, for
        sources that make or read their columns on demand: it is asked for pieces of at
        most ``chunk_edges`` columns (``0 <= a < b <= hi - lo``), each piece more than
        once (a checking pass, then the build), and must give the same columns every
        time.  Anything it raises is bad input like the rest: every rank raises (a
        :class:`~ddstore.DDStoreError` as it is, a ``MemoryError`` as a
        :class:`~ddstore.DDStoreMemoryError`, anything else as a
        :class:`~ddstore.DDStoreValueError` naming the call), and nothing is stored; a
        piece of the wrong shape or dtype raises naming what it returned.

        The ranks' ranges must cover ``[0, num_edges)`` exactly once (any split, e.g.
        ``partition(num_edges, size, rank)``).  ``size``: see the class docstring (the
        same on every rank).  Every rank raises the same error on bad input anywhere,
        and nothing is stored.  A stored COO is replaced (class docstring), read back as
        int64.  Returns True.
        """
        edge_type = as_edge_type(edge_type)
        what = f"put_edge_range ({edge_type!r})"
        with self.store.collective("GraphStore.put", call_name(edge_type)) as step:
            self._state.check_mine()
            if callable(edge_index):
                lo, hi = check_rows(rows, None, what)
                columns = checked_columns(edge_index, what, hi - lo)
            else:
                arr = as_numpy(edge_index, what)
                if arr.ndim != 2 or arr.shape[0] != 2:
                    raise DDStoreValueError(f"{what}: edge_index must have shape [2, m], "
                                            f"got {arr.shape}")
                if arr.shape[1] and arr.dtype.kind not in "iu":
                    raise DDStoreValueError(f"{what}: edge_index must hold integer node "
                                            f"ids, got dtype {arr.dtype}")
                lo, hi = check_rows(rows, arr.shape[1], what)

                def columns(a, b):  # views of the array
                    return node_ids(arr[0, a:b], what), node_ids(arr[1, a:b], what)
            plan = first_pass(self._state, columns, lo, hi, edge_type, size, what)
            decide(self._state, plan, step.agree(plan.share(), same=plan.same()))
        return build(self._state, self._attrs, plan, columns)

    def put_edge_weights(self, weight_attr, edge_type=None):
        """Collective: weight an edge type already stored, from the edge attribute
        ``weight_attr`` of the :class:`FeatureStore` (one real number per edge, put
        before this call): the weights are checked and kept in CSC order as a put with
        ``GraphStore(..., weight_attr=...)`` keeps them (see the class docstring).  A
        graph store has one ``weight_attr``: this call sets it when it has none.  Bad
        weights raise the same error on every rank and nothing changes.  Returns
        True."""
        return self._attrs.put_edge_weights(weight_attr, edge_type)

    def build_backward(self, edge_types=None, keep_in_lists=True):
        """Collective: store the **out-lists** (each source node's outgoing edges: the
        CSR) of edge types already put, which ``NeighborSampler(...,
        sample_direction="backward")`` and :class:`~ddstore.pyg.BidirectionalNeighborSampler`
        read.  ``edge_types``: None (every stored edge type), one edge type, or a list
        of them (``None`` in it: the homogeneous graph).

        For each edge type, of the layout the sampler reads (see the class docstring),
        the out-lists are the CSC of the reversed edges, built by the same collective
        build as a put (bounded memory, in chunks of ``chunk_edges``) from the stored
        CSC itself: variables ``<name>/out/<type>/<layout>/nbr`` (the destinations of a
        source's edges, sorted by destination, then edge id) and ``.../eid`` (the edge
        ids as put, what the sampler returns as ``e_id``), plus ``.../w`` when the edge
        type is weighted (so weighted backward sampling draws by the same weights; a
        later :meth:`put_edge_weights` fills it too); never times (PyG defines no
        temporal backward sampling).  The same memory as the forward lists: 8 bytes per
        edge with int32 ids, 16 with int64, plus the weights (4 or 8 bytes).

        ``keep_in_lists=False`` (a bool, the same on every rank), for jobs that sample
        only ``sample_direction="backward"``: once every out-list is built, the in-lists
        of those edge types (the sampled layout's CSC variables and its replicated
        ``indptr``) are removed, so that a rank holds the edges once, as out-lists.
        Afterwards, for those edge types: ``get_edge_index`` / PyG's ``coo()`` /
        ``csr()`` / ``csc()`` still return exactly what was put (read from the
        out-lists), as do ``num_edges``, ``get_all_edge_attrs``, ``node_counts``,
        ``has_backward`` (True) and ``weight_attr_of``; ``put_edge_weights`` weights the
        out-lists; ``remove_edge_index`` removes the out-lists; backward sampling
        (``subgraph_type`` ``"directional"`` or ``"bidirectional"``) gives the same
        batches as with the in-lists kept.  Whatever reads the in-lists is refused with
        a :class:`~ddstore.DDStoreValueError` naming the edge type and this call:
        forward sampling (``NeighborSampler``'s default, its forward half in
        :class:`~ddstore.pyg.BidirectionalNeighborSampler`, temporal sampling), and
        ``subgraph_type="induced"`` (at the sampler's construction; a sampler built
        before raises a :class:`~ddstore.DDStoreStateError` at its next batch), and
        :meth:`edge_ids` (the CSC order no longer exists).  To sample forward again,
        ``remove_edge_index`` and put the edges again.  Out-lists built before with
        ``keep_in_lists=True`` are kept and their in-lists dropped now.  The in-lists
        are removed only after every build succeeded: a failed call drops nothing.  A
        transaction enclosing this call that fails later removes the out-lists built
        here and brings back the in-lists (removed only when it commits).

        Edge types whose out-lists exist are left as they are.  An unknown edge type
        raises the same :class:`~ddstore.pyg.UnknownAttributeError` on every rank;
        a failure of any build raises on every rank and removes the out-lists this call
        built (the store's ``variables()`` is as before).  ``remove_edge_index`` of the
        layout removes its out-lists.  Returns the edge types built."""
        return self._attrs.build_backward(edge_types, keep_in_lists)

    def sampled_edge_types(self):
        """Local: the edge types the sampler samples (those with at least one stored
        layout), in the order first put; a new list on every call."""
        self._forks.check("sampled_edge_types")
        return list(self._state.sampled)

    def sampled_lists(self, edge_type, backward=False):
        """Local: the stored lists a sampler reads for ``edge_type`` (an edge type as
        given to :meth:`put_edge_index`; a list is taken as its tuple), or None when there
        are none: its **in-lists** (the CSC of the layout PyG's ``csc()`` converts from,
        see the class docstring), or with ``backward`` its **out-lists**
        (:meth:`build_backward`; None until built).

        The object returned describes the stored lists and must not be changed:
        ``vars`` (``{"nbr", "eid"[, "ts"][, "w"]}`` -> store variable names: source
        node, edge id, time, weight per CSC row), ``indptr`` (replicated int64
        ``[num_dst + 1]``: where each destination's list starts), ``node_offsets`` (the
        group members' destination-node ranges), ``time_level`` (``"edge"``, ``"node"``
        or None: no times stored), ``size``, ``num_edges``, ``layout``, ``removed``
        (True once :meth:`remove_edge_index` removed it: a sampler holding it must
        stop) and ``dropped`` (in-lists only: True once ``build_backward(
        keep_in_lists=False)`` removed them; ``vars`` is then empty, ``indptr`` /
        ``node_offsets`` None, and only the out-lists can be sampled).  The same object
        is returned until that layout is removed or another
        layout becomes the sampled one, so a sampler may cache what it builds from it
        while ``sampled_lists(et) is`` the object it cached.  In a DataLoader worker
        forked before the graph store changed, a :class:`~ddstore.DDStoreStateError`
        (the worker's copy of the lists is stale), as when another object over the
        same store and name (:meth:`open`) replaced or removed the lists."""
        self._forks.check("sample")
        c = self._state.sampled.get(as_edge_type(edge_type))
        if c is not None and backward:
            c = self._state.out_lists(c)
        return None if c is None else self._state.live(c, "sample")

    def has_backward(self, edge_type=None):
        """Local: whether the out-lists of ``edge_type`` (its sampled layout) are
        stored (:meth:`build_backward`)."""
        self._state.entry(edge_type, "has_backward")
        return self.sampled_lists(edge_type, backward=True) is not None

    def weight_attr_of(self, edge_type=None):
        """The ``weight_attr`` the lists of ``edge_type`` are weighted by, or None (no
        weights stored for it)."""
        c = self._state.entry(edge_type, "weight_attr_of")
        return self.weight_attr if "w" in self._state.holding(c).vars else None

    def _remove_edge_index(self, edge_attr):
        """Collective (PyG's): drop the layout; True, or False (every rank) if not held."""
        edge_type = as_edge_type(edge_attr.edge_type)
        key = (edge_type, EdgeLayout(edge_attr.layout))
        with self.store.collective("GraphStore.remove", call_name(key)):
            self._state.check_mine()
        return remove_lists(self._state, key)

    def _get_edge_index(self, edge_attr):
        """Local: the edge index of ``edge_attr``'s edge type in its layout **read onto
        this rank**, exactly as put: COO ``(row, col)`` in the order put, CSR
        ``(rowptr, col)``, CSC ``(row, colptr)``, each in the dtype put
        (``put_edge_range``: int64); a layout never put raises a
        :class:`~ddstore.pyg.UnknownAttributeError` (a ``KeyError``).  The sampler never
        calls it."""
        self._forks.check("get_edge_index")
        c = self._state.entry(edge_attr.edge_type, "get_edge_index", edge_attr.layout)
        if edge_attr.size is None:
            edge_attr.size = c.size  # as PyG's Data does
        src, dst = self._put_order(c)
        n = c.ptr_nodes
        if c.layout == EdgeLayout.CSR:
            src = _pointer(src, n)
        elif c.layout == EdgeLayout.CSC:
            dst = _pointer(dst, n)
        dts = c.index_dtypes or (None, None)  # the dtypes put (None: int64)
        return tuple(torch.from_numpy(x if dt is None else x.astype(dt, copy=False))
                     for x, dt in zip((src, dst), dts))

    def _put_order(self, c):
        """``(src, dst)`` int64 of a stored layout in edge-id order (the entries as put),
        read from its CSC (each list's owner the destination, ``nbr`` the source), or
        once its in-lists were dropped from its out-lists (owner the source, ``nbr`` the
        destination)."""
        lists = self._state.holding(c)
        e = c.num_edges
        nbr = self.store.get_range(lists.vars["nbr"], 0, e)
        eid = self.store.get_range(lists.vars["eid"], 0, e)
        owner = np.repeat(np.arange(lists.size[1], dtype=np.int64), np.diff(lists.indptr))
        src, dst = np.empty(e, dtype=np.int64), np.empty(e, dtype=np.int64)
        if c.dropped:
            src[eid], dst[eid] = owner, nbr
        else:
            src[eid], dst[eid] = nbr, owner
        return src, dst

    def get_all_edge_attrs(self):
        """Every stored ``(edge type, layout)`` in the order put, with ``is_sorted`` as
        put (CSC: True) and the size."""
        self._forks.check("get_all_edge_attrs")
        return [EdgeAttr(c.edge_type, c.layout, c.is_sorted, c.size)
                for c in self._state.stored.values()]

    def edge_ids(self, edge_type=None):
        """Local: the edge ids of the sampled layout of ``edge_type`` in its CSC order
        (read onto this rank; for inspection): entry ``j`` of the CSC's ``nbr`` is edge
        ``edge_ids()[j]`` of the edge index as put."""
        self._forks.check("edge_ids")
        c = self._state.entry(edge_type, "edge_ids")
        if c.dropped:
            raise self._state.dropped_error(c, "edge_ids")
        eid = self.store.get_range(c.vars["eid"], 0, c.num_edges)
        return torch.from_numpy(eid.astype(np.int64, copy=False))

    def num_edges(self, edge_type=None):
        """Local: the edges stored of ``edge_type`` (None for a homogeneous graph)."""
        return self._state.entry(edge_type, "num_edges").num_edges

    def node_counts(self):
        """``{node type: number of nodes}``: the node types of the stored edge types
        (from their sizes), then those declared by ``declare_rows`` on the
        :class:`FeatureStore` of the same ``store`` and ``name`` (``from_hetero``
        declares every node type's count), then those of node attributes put in that
        feature store (their rows) -- so a graph with no edges, even with no node
        attributes, still has its nodes (None: the homogeneous node type)."""
        sizes = {}
        for (et, _), c in self._state.stored.items():  # the largest of each type's
            s_t, d_t = (None, None) if et is None else (et[0], et[2])
            sizes[s_t] = max(sizes.get(s_t, 0), c.size[0])
            sizes[d_t] = max(sizes.get(d_t, 0), c.size[1])
        for t, n in declared_rows(self.store, self.name).items():
            if t is None or isinstance(t, str):  # node types (not edge types' rows)
                sizes.setdefault(t, n)
        for t, n in node_attr_rows(self.store, self.name).items():
            sizes.setdefault(t, n)
        return sizes

    def csc_bytes(self):
        """Bytes of this rank's lists (every stored layout's in-lists, and out-lists
        built by :meth:`build_backward`) plus the replicated indptrs and node times
        (node-level time)."""
        lists = [c for c in self._state.stored.values() if not c.dropped]
        lists += list(self._state.reversed.values())
        times = {id(c.node_times): c.node_times.nbytes for c in lists
                 if c.node_times is not None}
        return int(sum(self.store.nbytes(v) for c in lists for v in c.vars.values()) +
                   sum(c.indptr.nbytes for c in lists) + sum(times.values()))

    def __repr__(self):
        return (f"GraphStore({self.name!r}, edge_types={list(self._state.sampled)}, "
                f"layouts={[(k[0], k[1].value) for k in self._state.stored]}, "
                f"time_attr={self.time_attr!r}"
                + (f", weight_attr={self.weight_attr!r})" if self.weight_attr else ")"))


def _pointer(ids, n):
    """The CSR / CSC pointer (``n + 1`` int64) of sorted node ids ``ids`` (all < n)."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(ids, minlength=n), out=ptr[1:])
    return ptr


