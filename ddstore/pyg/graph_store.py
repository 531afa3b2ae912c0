"""PyG's ``GraphStore`` over a :class:`~ddstore.DDStore`: every edge type held once as CSC
(sorted by destination, then by time, then by edge id), striped by destination-node
ranges over each group, replicated by ``width``."""
import dataclasses

import numpy as np
import torch
from torch_geometric.data import EdgeAttr as _PygEdgeAttr
from torch_geometric.data import GraphStore as _PygGraphStore
from torch_geometric.data.graph_store import EdgeLayout

from .. import partition
from .._times import as_times, time_dtype_of
from .._checks import as_bool, check_free_names, is_int, \
    names_under
from ..errors import DDStoreError, DDStoreIndexError, DDStoreValueError
from ..placement import balanced_offsets
from ..build import (check_chunk_edges, create, default_chunk_edges, fill_tcsr, id_dtype,
                     prefault_built)
from ._common import (GRAPH_KIND, annotation_name, as_edge_type, as_numpy, as_values,
                      call_piece, check_rows, declared_rows, edge_var, find_annotation,
                      forget_annotation, is_edge_type, node_var, tiled_total, type_key,
                      type_from_json, type_to_json, value_dtype)
from .feature_store import UnknownAttributeError

__all__ = ["GraphStore", "EdgeAttr"]

_CSC_VARS = ("nbr", "eid", "ts")
_INT64_MAX = 2 ** 63 - 1


@dataclasses.dataclass
class EdgeAttr(_PygEdgeAttr):
    """PyG's ``EdgeAttr`` with ``edge_type`` defaulting to None (a homogeneous graph) and
    ``layout`` to ``"coo"``."""

    def __init__(self, edge_type=None, layout="coo", is_sorted=False, size=None):
        super().__init__(edge_type, layout, is_sorted, size)


class _CSC:
    """One stored layout of an edge type: its variables and the replicated ``indptr``
    (global CSC row where each destination's list starts) and ``node_offsets``
    (destination-node range of each group member); ``layout`` / ``is_sorted`` as put,
    and ``ptr_nodes`` (CSR / CSC puts: the nodes of the pointer as put, else None).
    ``dropped``: True once ``build_backward(keep_in_lists=False)`` removed these lists'
    variables (``vars`` empty, ``indptr`` / ``node_offsets`` None): only the edge type's
    bookkeeping is left, and its out-lists hold the edges."""

    def __init__(self, edge_type, size, num_edges, indptr, node_offsets, vars_, time_attr,
                 time_level, layout=EdgeLayout.COO, is_sorted=False, ptr_nodes=None,
                 node_times=None, time_dtype=None):
        self.edge_type, self.size, self.num_edges = edge_type, size, num_edges
        self.indptr, self.node_offsets, self.vars = indptr, node_offsets, vars_
        self.time_attr, self.time_level = time_attr, time_level
        self.node_times = node_times  # node-level time: the sources' times, replicated
        self.time_dtype = time_dtype  # the times' (int64, float64), None without times
        self.layout, self.is_sorted, self.ptr_nodes = layout, is_sorted, ptr_nodes
        self.removed = False
        self.dropped = False


class _Plan:
    """What the first step of a CSC build learned (:meth:`GraphStore._first_pass`, then
    :meth:`GraphStore._decide`), handed to :meth:`GraphStore._build`: the call
    (``what``), edge type, layout, pointer nodes as put, the stored CSC reversed (or
    None), the variables' name prefix, this rank's columns ``[lo, hi)``, the pieces
    they are read in, ``size`` (None until decided when not given), the degrees and
    the ``indptr`` (allocated once the size is known; ``deg`` None: counted in a second
    pass), the largest node ids, ``num_edges`` (decided)."""

    __slots__ = ("what", "edge_type", "layout", "ptr_nodes", "reverse_of", "prefix", "lo",
                 "hi", "size", "time_attr", "weight_attr", "piece", "deg", "indptr",
                 "max_src", "max_dst", "num_edges")

    def __init__(self, what, edge_type, layout, ptr_nodes, reverse_of, prefix, lo, hi,
                 size, time_attr, weight_attr):
        self.what, self.edge_type, self.layout = what, edge_type, layout
        self.ptr_nodes, self.reverse_of, self.prefix = ptr_nodes, reverse_of, prefix
        self.lo, self.hi, self.size = lo, hi, size
        self.time_attr, self.weight_attr = time_attr, weight_attr
        self.piece, self.deg, self.indptr = None, None, None
        self.max_src = self.max_dst = -1
        self.num_edges = None

    def share(self):
        """This rank's share of the first step's round."""
        return self.lo, self.hi, self.max_src, self.max_dst

    def same(self):
        """The settings of the build that must be equal on every rank."""
        return {"size": self.size, "time_attr": self.time_attr,
                "weight_attr": self.weight_attr}


class GraphStore(_PygGraphStore):
    """PyG's ``torch_geometric.data.GraphStore`` over a :class:`~ddstore.DDStore`.

    Every stored edge index (an edge type -- ``None`` for a homogeneous graph, else
    ``(src, rel, dst)`` -- in one layout) is held as **CSC**: the sources of each
    destination node's incoming edges, sorted by destination, then (when the store has a
    ``time_attr``) by time, then by edge id.  Three store variables of one row per edge:
    ``<name>/csc/<type>/<layout>/nbr`` (source node), ``.../eid`` (edge id) and, with an
    edge-level time, ``.../ts`` (the edge's time: int64 for an integer time attribute,
    else float64).  ``nbr`` and
    ``eid`` are both **int32 when both fit** (``num_src_nodes <= 2**31 - 1`` and
    ``num_edges <= 2**31 - 1``: 8 bytes per edge, half of PyG's int64 ``edge_index``),
    else both int64 (16 bytes per edge); ``ts`` adds 8.  What they return
    (:meth:`get_edge_index`, :meth:`edge_ids`, the sampler) is int64 either way.  Member
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

    **Layouts, as PyG's stores keep them**: each ``(edge_type, layout)`` is stored on its
    own (``put_edge_index`` with ``coo`` and then ``csr`` stores both, even different
    graphs; ``gs.csr(store=True)`` adds the CSR of the stored COO) and
    :meth:`get_all_edge_attrs` lists each, in the order put.  ``get_edge_index(type,
    layout)`` returns exactly what was put in that layout: a COO ``(row, col)`` in the
    order put, a CSR ``(rowptr, col)`` or CSC ``(row, colptr)`` as given (the pointer of
    the length given); a layout never put raises a ``KeyError``
    (:class:`~ddstore.pyg.UnknownAttributeError`), as PyG's do.  PyG's ``coo()``,
    ``csr()`` and ``csc()`` convert from a stored layout as PyG's stores do, with the
    permutation from that layout's order (``perm``: None when the layout is stored).
    A second put of a layout already stored is refused (``remove_edge_index`` it
    first).  Each layout is a CSC of its own (its memory, as PyG's in-memory stores keep
    each layout's tensors).  The sampler samples, per edge type, the layout PyG's
    ``csc()`` converts from (a stored CSC, else COO, else CSR; for edge type ``None``
    the first put, as PyG's homogeneous ``csc()``), so its ``e_id`` are that layout's
    edge ids, as PyG's ``perm`` would make them.

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
    CSC pointer).  ``remove_edge_index(edge_type, layout)`` (collective) removes that
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
            if not isinstance(name, str) or not name:
                raise DDStoreValueError(f"GraphStore name must be a non-empty str, got "
                                        f"{name!r}")
            check_chunk_edges(chunk_edges, name)
            if time_attr is not None and (not isinstance(time_attr, str) or not time_attr):
                raise DDStoreValueError(f"time_attr must be None or a non-empty str, got "
                                        f"{time_attr!r}")
            weight_attr = _checked_weight_attr(weight_attr)
            step.agree(same={"time_attr": time_attr, "weight_attr": weight_attr,
                             "chunk_edges": chunk_edges})
        self.store, self.name, self.time_attr = store, name, time_attr
        self.weight_attr = weight_attr
        self.chunk_edges = chunk_edges
        self._stored = {}  # (edge type, EdgeLayout) -> _CSC, in the order put
        self._csc = {}  # edge type -> the _CSC the sampler reads (see _choose)
        self._reversed = {}  # (edge type, EdgeLayout) -> its out-lists (build_backward)
        self._node_times = {}  # node-time variable -> its replicated times
        with store.transaction(f"GraphStore {name!r}") as txn:
            self._annotate()
            txn.on_rollback(lambda: forget_annotation(store, GRAPH_KIND, name))

    # ------------------------------------------------------------ checkpoint
    def _annotate(self):
        """Local, alike on every rank, at the end of every collective call that changes
        what is stored (puts, weights, out-lists, removals; and in their rollbacks):
        record it in the store's annotation ``"<name>#pyg.GraphStore"``
        (:meth:`DDStore.annotate`), what :meth:`open` rebuilds the graph store from.
        The replicated ``indptr`` of every stored list is an array of the annotation and
        the cuts of its variables (a restore splits them at list boundaries: each
        destination's list whole on one member); node-level times too."""
        arrays, cuts, variables, times = {}, {}, [], {}
        by_id = {id(t): v for v, t in self._node_times.items()}

        def entry(c, tag):
            e = {"edge_type": type_to_json(c.edge_type), "layout": c.layout.value,
                 "size": [int(x) for x in c.size], "num_edges": int(c.num_edges),
                 "vars": dict(c.vars), "time_attr": c.time_attr,
                 "time_level": c.time_level, "is_sorted": bool(c.is_sorted),
                 "ptr_nodes": None if c.ptr_nodes is None else int(c.ptr_nodes),
                 "time_dtype": None if c.time_dtype is None else np.dtype(
                     c.time_dtype).str, "dropped": bool(c.dropped),
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
        stored = [entry(c, f"in{i}") for i, c in enumerate(self._stored.values())]
        out = [entry(c, f"out{i}") for i, c in enumerate(self._reversed.values())]
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
        meta, arrays = ann.meta, ann.arrays
        self = cls.__new__(cls)
        _PygGraphStore.__init__(self, edge_attr_cls=EdgeAttr)
        self.store, self.name, self.time_attr = store, name, meta["time_attr"]
        self.weight_attr, self.chunk_edges = meta["weight_attr"], meta["chunk_edges"]
        self._stored, self._csc, self._reversed, self._node_times = {}, {}, {}, {}
        width = store.group_size

        def entry(e):
            edge_type, vars_ = type_from_json(e["edge_type"]), dict(e["vars"])
            indptr = node_off = times = None
            for v in vars_.values():
                if v not in store:
                    raise DDStoreValueError(
                        f"GraphStore.open {name!r}: edge type {edge_type!r} needs "
                        f"variable {v!r}, which the store does not hold")
            if e["indptr"] is not None:
                indptr = arrays[e["indptr"]]
                node_off = _node_offsets(indptr, store.chunk_offsets(vars_["nbr"]),
                                         width)
            if e["node_times"] is not None:
                key, var = e["node_times"]
                times = arrays[key]
                if var is not None:
                    self._node_times[var] = times
            c = _CSC(edge_type, tuple(e["size"]), e["num_edges"], indptr, node_off, vars_,
                     e["time_attr"], e["time_level"], EdgeLayout(e["layout"]),
                     e["is_sorted"], e["ptr_nodes"], times,
                     None if e["time_dtype"] is None else np.dtype(e["time_dtype"]))
            c.dropped = e["dropped"]
            return (edge_type, c.layout), c
        for e in meta["stored"]:
            key, c = entry(e)
            self._stored[key] = c
        for e in meta["reversed"]:
            key, c = entry(e)
            self._reversed[key] = c
        for edge_type in dict.fromkeys(k[0] for k in self._stored):
            self._choose(edge_type)
        return self

    # ------------------------------------------------------------------ putting
    def _put_edge_index(self, edge_index, edge_attr):
        """Collective (PyG's ``put_edge_index``): every rank passes the whole edge index;
        each keeps the columns ``partition(E, size, rank)`` and the CSC is built from
        those shares."""
        layout = EdgeLayout(edge_attr.layout)
        edge_type = as_edge_type(edge_attr.edge_type)
        what = f"put_edge_index ({edge_type!r}, {layout.value})"
        st = self.store
        with st.collective("GraphStore.put", repr(edge_type)) as step:
            src, dst, ptr_nodes = self._as_coo(edge_index, layout, what)
            n = src.shape[0]
            lo, hi = partition(n, st.size, st.rank)

            def columns(a, b):  # views of this rank's share
                return src[lo + a:lo + b], dst[lo + a:lo + b]
            plan = self._first_pass(columns, lo, hi, edge_type, edge_attr.size, what,
                                    layout=layout, ptr_nodes=ptr_nodes)
            self._decide(plan, step.agree(plan.share(), same={
                "edges (the whole edge index on every rank)": n,
                "pointer nodes": ptr_nodes, **plan.same()}))
        return self._build(plan, columns, is_sorted=bool(edge_attr.is_sorted))

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
        and nothing is stored.  Returns True.
        """
        edge_type = as_edge_type(edge_type)
        what = f"put_edge_range ({edge_type!r})"
        with self.store.collective("GraphStore.put", repr(edge_type)) as step:
            if callable(edge_index):
                lo, hi = check_rows(rows, None, what)
                columns = _checked_columns(edge_index, what, hi - lo)
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
                    return _ids(arr[0, a:b], what), _ids(arr[1, a:b], what)
            plan = self._first_pass(columns, lo, hi, edge_type, size, what)
            self._decide(plan, step.agree(plan.share(), same=plan.same()))
        return self._build(plan, columns)

    @staticmethod
    def _as_coo(edge_index, layout, what):
        """``(src, dst, ptr_nodes)``: the edges as int64 arrays in edge-id order from
        any of PyG's layouts, and the nodes of a CSR / CSC pointer as put (COO: None);
        raises a :class:`~ddstore.DDStoreValueError` for a malformed edge index."""
        layout = EdgeLayout(layout)
        if layout == EdgeLayout.COO and not isinstance(edge_index, (tuple, list)):
            arr = as_numpy(edge_index, what)
            if arr.ndim != 2 or arr.shape[0] != 2:
                raise DDStoreValueError(f"{what}: a COO edge_index must have shape [2, E], "
                                        f"got {arr.shape}")
            a, b = arr[0], arr[1]
        else:
            if not isinstance(edge_index, (tuple, list)) or len(edge_index) != 2:
                raise DDStoreValueError(f"{what}: edge_index must be a pair of 1-D tensors")
            a, b = (as_numpy(x, what) for x in edge_index)
        for x in (a, b):
            if x.ndim != 1 or (x.size and x.dtype.kind not in "iu"):
                raise DDStoreValueError(f"{what}: edge_index entries must be 1-D integer "
                                        f"arrays, got dtype {x.dtype} shape {x.shape}")
        a, b = (_ids(x, what).astype(np.int64, copy=False) for x in (a, b))
        if layout == EdgeLayout.COO:
            if a.shape != b.shape:
                raise DDStoreValueError(f"{what}: rows of lengths {a.shape[0]}, "
                                        f"{b.shape[0]}")
            return a, b, None
        ptr, idx = (b, a) if layout == EdgeLayout.CSC else (a, b)
        if ptr.size == 0 or ptr[0] != 0 or ptr[-1] != idx.shape[0] or \
                np.any(np.diff(ptr) < 0):
            raise DDStoreValueError(f"{what}: the {layout.value} pointer must start at 0, "
                                    f"not decrease and end at {idx.shape[0]}")
        other = np.repeat(np.arange(ptr.shape[0] - 1, dtype=np.int64), np.diff(ptr))
        ptr_nodes = ptr.shape[0] - 1
        return (idx, other, ptr_nodes) if layout == EdgeLayout.CSC else \
            (other, idx, ptr_nodes)

    def _node_count(self, node_type):
        """Rows of any stored node attribute of ``node_type`` (None: none stored)."""
        prefix = node_var(self.name, node_type, "")
        for v in self.store.variables():
            if v.startswith(prefix):
                return int(self.store.nrows(v))
        return None

    def _time_reader(self, edge_type, lo, hi, max_src, what):
        """Local (a step's local part): ``(times, level)``: ``times(a, b, src)`` checks
        the times of local edges ``[a, b)`` (``src``: their sources; raising a
        :class:`~ddstore.DDStoreError`) and, edge-level, returns them from the feature
        store as ``times.dtype`` (int64 for an integer attribute, else float64); ``level``
        is "edge" or "node" (both None: a hetero edge type whose source type has no time
        attribute).  Node-level, nothing is returned: the build sorts through
        ``times.node_times`` (the source type's times, replicated).
        ``times.check_pass``: whether a pass over the edges must check their times
        before the build (node-level time: only when some node's time is not a finite
        time of ``times.dtype``; a source beyond the node times is found from
        ``max_src``, the largest source of every rank's edges).  Raises when the time
        attribute is missing, ambiguous, malformed or too short."""
        st, name, t = self.store, self.name, self.time_attr
        evar = edge_var(name, edge_type, t)
        nvar = node_var(name, None if edge_type is None else edge_type[0], t)
        has_e, has_n = evar in st, nvar in st
        if has_e and has_n:
            raise DDStoreValueError(f"{what}: time_attr {t!r} is both an edge attribute "
                                    f"({evar!r}) and a node attribute ({nvar!r}); keep one")
        if not has_e and not has_n and edge_type is not None:
            # PyG's rule: a source node type without the time attribute is always
            # eligible; the edge type is stored (and sampled) without times
            return None, None
        if not has_e and not has_n:
            raise UnknownAttributeError(f"{what}: time_attr {t!r} not found: put it first "
                                        f"as an edge attribute of the edge type ({evar!r}) "
                                        f"or a node attribute of the source type "
                                        f"({nvar!r})")
        var = evar if has_e else nvar
        if st.row_shape(var) not in ((), (1,)) or value_dtype(st, var).kind not in "iuf":
            raise DDStoreValueError(f"{what}: time_attr {t!r} must hold one real number "
                                    f"per row, got dtype {st.dtype(var)} row shape "
                                    f"{st.row_shape(var)}")
        nrows = st.nrows(var)
        if has_e and hi > nrows:
            raise DDStoreIndexError(f"{what}: edge time {var!r} has {nrows} rows, fewer "
                                    f"than the edges [{lo}, {hi})")

        tdt = time_dtype_of(value_dtype(st, var))  # int64 for integers, else float64

        def checked(raw):
            raw = as_values(st, var, raw)
            ts = as_times(raw.reshape(-1), tdt, f"{what}: time_attr {t!r}", copy=False)
            if ts.size and not np.isfinite(ts).all():
                raise DDStoreValueError(f"{what}: time_attr {t!r} holds NaN or infinite "
                                        f"values")
            return ts
        if has_e:
            def times(a, b, src):
                return checked(st.get_range(var, lo + a, b - a))
            times.check_pass, times.dtype = True, tdt
            return times, "edge"
        if max_src >= nrows:
            raise DDStoreIndexError(f"{what}: node time {var!r} has {nrows} rows, source "
                                    f"node {max_src} is out of range")
        # node-level: the source type's times, replicated (what the sampler searches
        # through each entry's source; no time per entry is stored); a time its dtype
        # does not hold exactly, NaN or infinite is refused when an edge's source has it
        node_times, bad = self._replicated_times(var, tdt)

        def times(a, b, src):
            if bad.size:
                hit = np.unique(src[np.isin(src, bad)])
                if hit.size:
                    checked(st.get_batch(var, hit.astype(np.int64)))
        times.node_times, times.check_pass, times.dtype = node_times, bool(bad.size), tdt
        return times, "node"

    def _replicated_times(self, var, tdt):
        """``(times, bad)``: node-time variable ``var`` read whole onto this rank (in
        pieces), as times of ``tdt`` (:func:`~ddstore._times.time_dtype_of` its dtype):
        integers as int32 when every one fits, else int64; floats as float32 when every
        time is exactly a float32 (float32 and float16 attributes...), else float64; and
        the sorted ids of the nodes whose time is not a finite time of ``tdt`` (uint64
        values beyond int64, NaN, infinities).  The same array as an earlier call's when
        equal (edge types with one source type share it)."""
        st = self.store
        n = int(st.nrows(var))
        out = np.empty(n, dtype=tdt)
        bad = []
        step = 1 << 20
        for a in range(0, n, step):
            raw = as_values(st, var, st.get_range(var, a, min(step, n - a))).reshape(-1)
            if tdt.kind == "i":  # beyond int64 (uint64 only): refused if an edge uses it
                wrong = raw > np.iinfo(np.int64).max if raw.dtype == np.uint64 else \
                    np.zeros(raw.shape[0], bool)
                out[a:a + raw.shape[0]] = np.where(wrong, 0, raw)
            else:
                out[a:a + raw.shape[0]] = raw
                wrong = ~np.isfinite(out[a:a + raw.shape[0]])
            bad.append(a + np.flatnonzero(wrong))
        bad = np.concatenate(bad) if bad else np.zeros(0, np.int64)
        narrow = out.astype(np.int32 if tdt.kind == "i" else np.float32)
        if np.array_equal(narrow, out, equal_nan=tdt.kind == "f"):  # every time exact
            out = narrow
        del narrow
        old = self._node_times.get(var)
        if old is not None and np.array_equal(old, out, equal_nan=True):
            out = old
        self._node_times[var] = out
        return out, bad

    def _first_pass(self, columns, lo, hi, edge_type, size, what, layout=EdgeLayout.COO,
                    ptr_nodes=None, reverse_of=None):
        """The rest of the local part of a build's first step, run inside the caller's
        step (named by the public call) after the caller's own checks: the edge type,
        ``size`` and the free names checked, then a first pass over this rank's COO
        columns ``[lo, hi)`` in pieces (``columns(a, b)`` returns local columns ``[a,
        b)`` as 1-D integer arrays (src, dst), raising for bad ones): node ids checked
        and their largest found, the in-degrees counted when ``size`` is given (else in
        a second pass, once the size is decided).  Raises on bad input.  Returns the
        :class:`_Plan`: the caller agrees on its ``share()`` and ``same()``, hands the
        agreed shares to :meth:`_decide` and, after its step, calls :meth:`_build`.

        ``ptr_nodes``: the nodes of a CSR / CSC pointer as put (a lower bound of the
        default size).  ``reverse_of`` (a stored ``_CSC``; see :meth:`build_backward`):
        the columns are its CSC rows reversed, column ``i`` being its CSC row ``lo +
        i``; the build makes its out-lists."""
        st = self.store
        if not (edge_type is None or is_edge_type(edge_type)):
            raise DDStoreValueError(f"{what}: edge_type must be None or (src, rel, dst) "
                                    f"strings, got {edge_type!r}")
        built = self._stored if reverse_of is None else self._reversed
        if (edge_type, layout) in built:
            check_free_names(what, f"edge type {edge_type!r} in layout {layout.value!r}",
                             f"remove_edge_index(edge_type, layout={layout.value!r}) it "
                             f"first (collective)")
        if size is not None:
            size = _checked_size(size, edge_type, what)
        prefix = (f"{self.name}/{'csc' if reverse_of is None else 'out'}/"
                  f"{type_key(edge_type)}/{layout.value}/")
        check_free_names(what, names_under(prefix[:-1], st.variables()))
        plan = _Plan(what, edge_type, layout, ptr_nodes, reverse_of, prefix, lo, hi, size,
                     self.time_attr, self.weight_attr)
        n_local = hi - lo
        plan.piece = self.chunk_edges if self.chunk_edges is not None else \
            default_chunk_edges(n_local * st.size, st.size, 24, add_reverse=False)
        if size is not None:  # the degrees, and the indptr they become (no allocation
            # after the steps: what can fail on one rank fails in a local part)
            plan.deg = np.zeros(size[1], dtype=np.int64)
            plan.indptr = np.zeros(size[1] + 1, dtype=np.int64)
        for a in range(0, n_local, plan.piece):
            s, d = columns(a, min(a + plan.piece, n_local))
            if not s.size:
                continue
            least = min(int(s.min()), int(d.min()))
            if least < 0:
                raise DDStoreIndexError(f"{what}: negative node id {least}")
            plan.max_src = max(plan.max_src, int(s.max()))
            plan.max_dst = max(plan.max_dst, int(d.max()))
            if plan.deg is not None and plan.max_dst < size[1]:
                _count(plan.deg, d)
            else:  # out of range: raised by _decide on every rank
                plan.deg = None
        return plan

    def _decide(self, plan, infos):
        """After the round of a build's first step (``infos``: every rank's
        ``plan.share()``), decided alike on every rank: the ranks' columns tile
        ``[0, num_edges)``, the size (default: see the class docstring), every node id
        within it.  Raises (inside the step, so agreed) otherwise."""
        what, edge_type, size = plan.what, plan.edge_type, plan.size
        plan.num_edges = tiled_total([i[:2] for i in infos], what)
        max_src, max_dst = max(i[2] for i in infos), max(i[3] for i in infos)
        plan.max_src = max_src
        st_, dt_ = (None, None) if edge_type is None else (edge_type[0], edge_type[2])
        if size is None:
            ns, nd = self._node_count(st_), self._node_count(dt_)
            ptr_nodes = plan.ptr_nodes or 0
            ps, pd = (ptr_nodes, 0) if plan.layout == EdgeLayout.CSR else (0, ptr_nodes)
            if edge_type is None:
                n = max(ns or 0, max_src + 1, max_dst + 1, ps, pd)
                size = (n, n)
            else:
                size = (max(ns if ns is not None else max_src + 1, ps),
                        max(nd if nd is not None else max_dst + 1, pd))
        for label, m, lim, k in (("source", max_src, size[0], 2),
                                 ("destination", max_dst, size[1], 3)):
            if m >= lim:
                r = next(r for r, i in enumerate(infos) if i[k] == m)
                raise DDStoreIndexError(f"{what}: rank {r}: {label} node {m} out of range "
                                        f"[0, {lim}) (size={size})")
        plan.size = size

    def _build(self, plan, columns, is_sorted=False):
        """Collective, after the first step of a build (:meth:`_first_pass`,
        :meth:`_decide`): the CSC of one edge type in one layout from this rank's COO
        columns.  A second step, when the build needs one (a ``time_attr``, a
        ``weight_attr``, or degrees not yet counted because no ``size`` was given):
        its local part reads and checks the times (:meth:`_time_reader`), counts the
        degrees and checks the times in a second pass over the columns, checks the
        weights of this rank's edges; its round agrees on them.  Then one
        ``Allreduce`` of the degrees, and the variables are created and filled
        (:func:`~ddstore.build.fill_tcsr`) in a transaction.  With ``plan.reverse_of``
        the result is its out-lists (no times), whose ``eid`` are then turned from
        those CSC rows into its edge ids (and its weights, if any, gathered the same
        way)."""
        from mpi4py import MPI
        st = self.store
        what, edge_type, layout, size = plan.what, plan.edge_type, plan.layout, plan.size
        reverse_of, lo, hi, prefix = plan.reverse_of, plan.lo, plan.hi, plan.prefix
        n_local, piece = hi - lo, plan.piece
        deg, indptr = plan.deg, plan.indptr
        times = level = None
        weights = None if reverse_of is None else reverse_of.vars.get("w")
        timed = self.time_attr is not None and reverse_of is None
        weighted = self.weight_attr is not None and reverse_of is None
        if timed or weighted or deg is None:
            with st.collective(None) as step:
                if timed:
                    times, level = self._time_reader(edge_type, lo, hi, plan.max_src, what)
                check_times = times is not None and times.check_pass
                count = deg is None
                if count:
                    deg = np.zeros(size[1], dtype=np.int64)
                    indptr = np.zeros(size[1] + 1, dtype=np.int64)
                if count or check_times:
                    for a in range(0, n_local, piece):
                        b = min(a + piece, n_local)
                        s, d = columns(a, b)
                        if count:
                            if d.size and (int(d.min()) < 0 or int(d.max()) >= size[1]):
                                raise DDStoreValueError(f"{what}: edge_index gave other "
                                                        f"columns [{a}, {b}) than in the "
                                                        f"first pass")
                            _count(deg, d)
                        if check_times:
                            times(a, b, s)
                bad = None
                if weighted:
                    weights = self._weight_var(self.weight_attr, edge_type,
                                               plan.num_edges, what)
                    if weights is not None:
                        bad = self._weight_scan(weights, lo, hi, piece)
                _raise_bad_weight(step.agree(bad), self.weight_attr, what)
        width, g = st.group_size, st.group_rank
        st.comm.Allreduce(MPI.IN_PLACE, deg, op=MPI.SUM)
        np.cumsum(deg, out=indptr[1:])
        del deg
        node_off = balanced_offsets(indptr, width)
        num_edges = plan.num_edges
        # the T-CSR build keyed by destination (no reverse entries): the variables are
        # created at their final size and filled in place, one chunk of edges per round
        chunk = self.chunk_edges if self.chunk_edges is not None else default_chunk_edges(
            num_edges, st.size, 24, add_reverse=False)
        n_csc = int(indptr[node_off[g + 1]] - indptr[node_off[g]])
        # the variables kept: a time per entry only for edge-level time (node-level:
        # the lists are sorted by their sources' times, read by the sort and the sampler
        # from the replicated node times; no array of times per entry, even to sort)
        names = _CSC_VARS if level == "edge" else _CSC_VARS[:2]
        node_times = getattr(times, "node_times", None)

        # edge-level times travel with the edges; node-level ones are the sort's table
        per_entry = times if level == "edge" else None

        def rows(a, b):  # (destination, source) pairs of local edges [a, b) and times
            pairs = np.empty((b - a, 2), dtype=np.int64)
            if a == b:
                return pairs, None if per_entry is None else np.zeros(0, per_entry.dtype)
            try:
                s, d = columns(a, b)
                pairs[:, 0], pairs[:, 1] = d, s
                return pairs, None if per_entry is None else per_entry(a, b, s)
            except (DDStoreError, MemoryError):
                raise
            except Exception as exc:  # noqa: BLE001 -- named here, agreed by fill_tcsr
                raise DDStoreValueError(f"{what}: local edges [{a}, {b}): "
                                        f"{type(exc).__name__}: {exc}") from exc
        # node and edge ids as int32 when both fit (see the class docstring)
        ids = id_dtype(size[0], num_edges)  # the one rule (ddstore.build.ID32_LIMIT)
        built = self._stored if reverse_of is None else self._reversed
        with st.transaction(f"GraphStore.put {edge_type!r}") as txn:
            views = {k: create(st, prefix + k, n_csc, (), times.dtype if k == "ts" else ids)
                     for k in names}
            fill_tcsr(st, hi - lo, rows, lo, False, indptr, node_off,
                      (views["nbr"], views.get("ts"), views["eid"]), chunk,
                      every_group=True, nbr_time=node_times)
            del views
            st.sync()
            vars_ = {k: prefix + k for k in names}
            if weights is not None:  # (reversed: gathered at the CSC rows it names)
                vars_["w"] = self._weight_fill(prefix, weights, vars_["eid"], n_csc, chunk,
                                               what)
            if reverse_of is not None:
                self._rows_to_edge_ids(vars_["eid"], reverse_of.vars["eid"], n_csc, chunk,
                                       what)
            key = (edge_type, layout)
            built[key] = _CSC(edge_type, size, num_edges, indptr, node_off, vars_,
                              self.time_attr if reverse_of is None else None, level,
                              layout, is_sorted or layout == EdgeLayout.CSC,
                              plan.ptr_nodes, node_times,
                              None if times is None else times.dtype)
            if reverse_of is None:
                self._choose(edge_type)
            self._annotate()

            def forget():  # an enclosing transaction that fails later removes the CSC
                built.pop(key, None)
                gone = reverse_of is None
                if not gone and reverse_of.dropped and self._stored.get(key) is reverse_of:
                    # out-lists gone and their in-lists dropped: nothing holds the edges
                    self._stored.pop(key)
                    reverse_of.removed = gone = True
                if gone:
                    self._choose(edge_type)
                self._annotate()
            txn.on_rollback(forget)
        # what the sampler reads, mapped now rather than one page fault per first touch
        prefault_built(st, list(vars_.values()))
        return True

    # ------------------------------------------------------------------ edge weights
    def _weight_var(self, w, edge_type, num_edges, what, required=False):
        """Local (a step's local part): the name of the edge attribute ``w`` of
        ``edge_type`` holding its weights, checked (one real number per edge, at least
        ``num_edges`` rows), or None when ``w`` is None or a hetero edge type lacks it
        (sampled uniformly, as PyG does) and not ``required``.  Raises otherwise."""
        st = self.store
        if w is None:
            return None
        var = edge_var(self.name, edge_type, w)
        if var not in st:  # the same on every rank (variables are collective)
            if edge_type is not None and not required:
                return None
            node = node_var(self.name, None if edge_type is None else edge_type[0], w)
            why = "" if node not in st else (
                f"; {w!r} is stored as a node attribute ({node!r}, {st.nrows(node)} rows): "
                f"a value with as many rows as nodes and edges is taken as a node "
                f"attribute unless its name contains 'edge' (PyG's rule); put it with "
                f"group_name=<the edge type> (from_pyg does so for its weight_attr)")
            raise UnknownAttributeError(
                f"{what}: weight_attr {w!r} not found: put it first as an edge attribute "
                f"({var!r}), one weight per edge{why}")
        if st.row_shape(var) not in ((), (1,)) or value_dtype(st, var).kind not in "iuf":
            raise DDStoreValueError(
                f"{what}: weight_attr {w!r} must hold one real number per edge, got dtype "
                f"{st.dtype(var)} row shape {st.row_shape(var)}")
        if st.nrows(var) < num_edges:
            raise DDStoreIndexError(
                f"{what}: weight_attr {w!r} ({var!r}) has {st.nrows(var)} rows, fewer than "
                f"the {num_edges} edges")
        return var

    def _weight_scan(self, var, lo, hi, piece):
        """Local (a step's local part): the weights of edges ``[lo, hi)`` of edge
        attribute ``var`` read in pieces of ``piece``: ``(edge id, weight)`` of the
        first negative, NaN or infinite one, or None.  The caller agrees on it and hands
        every rank's to :func:`_raise_bad_weight`."""
        st = self.store
        for a in range(lo, hi, piece):
            b = min(a + piece, hi)
            x = as_values(st, var, st.get_range(var, a, b - a)).reshape(-1).astype(
                np.float64)
            wrong = ~(np.isfinite(x) & (x >= 0))
            if wrong.any():
                p = int(np.argmax(wrong))
                return a + p, float(x[p])
        return None

    def _weight_fill(self, prefix, weights, eid_name, n_csc, chunk, what):
        """Collective step of a put, inside its transaction: the weight column
        ``<prefix>w`` (one per CSC row, in CSC order, so that the sampler reads a list's
        weights with the list: :func:`_weight_dtype` of the attribute), this rank's
        chunk gathered from the edge attribute ``weights`` by the chunk's edge ids, in
        pieces of ``chunk`` rows.  Returns its name."""
        st = self.store
        view = create(st, prefix + "w", n_csc, (), _weight_dtype(value_dtype(st, weights)))
        self._fill_by_ids(view, weights, st.local_view(eid_name), chunk, what)
        return prefix + "w"

    def _fill_by_ids(self, view, source, ids, chunk, what):
        """Collective: ``view[i] = source[ids[i]]`` (``view`` and ``ids`` this rank's
        rows, ``source`` a store variable read one-sidedly) in pieces of ``chunk``;
        ``ids`` may be ``view`` itself.  The gather is the local part of a step: a
        failure on any rank is agreed; then every rank syncs."""
        st = self.store
        with st.collective(None):
            for a in range(0, view.shape[0], chunk):
                b = min(a + chunk, view.shape[0])
                view[a:b] = as_values(st, source, st.get_batch(
                    source, ids[a:b].astype(np.int64))).reshape(-1)
        del view, ids
        st.sync()

    def put_edge_weights(self, weight_attr, edge_type=None):
        """Collective: weight an edge type already stored, from the edge attribute
        ``weight_attr`` of the :class:`FeatureStore` (one real number per edge, put
        before this call): the weights are checked and kept in CSC order as a put with
        ``GraphStore(..., weight_attr=...)`` keeps them (see the class docstring).  A
        graph store has one ``weight_attr``: this call sets it when it has none.  Bad
        weights raise the same error on every rank and nothing changes.  Returns
        True."""
        st = self.store
        what = f"put_edge_weights ({edge_type!r})"
        with st.collective("GraphStore.put_edge_weights", repr(edge_type),
                           same={"weight_attr": weight_attr}) as step:
            _checked_weight_attr(weight_attr)
            if weight_attr is None:
                raise DDStoreValueError(f"{what}: weight_attr must be a non-empty str")
            c = self._entry(edge_type, what)
            if self.weight_attr not in (None, weight_attr):
                raise DDStoreValueError(f"{what}: graph store {self.name!r} is weighted by "
                                        f"{self.weight_attr!r}, not {weight_attr!r} (one "
                                        f"weight_attr per graph store)")
            if "w" in self._lists_holding(c).vars:
                raise DDStoreValueError(f"{what}: edge type {edge_type!r} is already "
                                        f"weighted by {self.weight_attr!r}")
            var = self._weight_var(weight_attr, c.edge_type, c.num_edges, what,
                                   required=True)
            lo, hi = partition(c.num_edges, st.size, st.rank)
            piece = self.chunk_edges or default_chunk_edges(c.num_edges, st.size, 24,
                                                            add_reverse=False)
            _raise_bad_weight(step.agree(self._weight_scan(var, lo, hi, piece)),
                              weight_attr, what)
        previous, self.weight_attr = self.weight_attr, weight_attr
        try:
            with st.transaction(f"GraphStore.put_edge_weights {edge_type!r}") as txn:
                # a rollback (newest first) annotates last, from the state then
                txn.on_rollback(self._annotate)
                txn.on_rollback(lambda: setattr(self, "weight_attr", previous))
                if not c.dropped:  # (dropped in-lists: only the out-lists are weighted)
                    n_csc = st.local_view(c.vars["eid"]).shape[0]
                    c.vars["w"] = self._weight_fill(c.vars["nbr"][:-len("nbr")], var,
                                                    c.vars["eid"], n_csc, piece, what)
                    txn.on_rollback(lambda: c.vars.pop("w", None))
                r = self._reversed.get((c.edge_type, c.layout))
                if r is not None:  # its out-lists: weights gathered by their edge ids
                    n_out = st.local_view(r.vars["eid"]).shape[0]
                    r.vars["w"] = self._weight_fill(r.vars["nbr"][:-len("nbr")], var,
                                                    r.vars["eid"], n_out, piece, what)
                    txn.on_rollback(lambda: r.vars.pop("w", None))
                self._annotate()
        except BaseException:
            self.weight_attr = previous
            raise
        return True

    # ------------------------------------------------------------------ out-lists
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
        here but cannot bring back the in-lists: the edge type is then gone.

        Edge types whose out-lists exist are left as they are.  An unknown edge type
        raises the same :class:`~ddstore.pyg.UnknownAttributeError` on every rank;
        a failure of any build raises on every rank and removes the out-lists this call
        built (the store's ``variables()`` is as before).  ``remove_edge_index`` of the
        layout removes its out-lists.  Returns the edge types built."""
        st = self.store
        what = "build_backward"
        with st.collective("GraphStore.build_backward", repr(edge_types)) as step:
            keep_in_lists = as_bool(keep_in_lists, f"{what}: keep_in_lists")
            if edge_types is None:
                types = list(self._csc)
            elif is_edge_type(as_edge_type(edge_types)):
                types = [as_edge_type(edge_types)]
            elif isinstance(edge_types, (list, tuple)):
                types = [as_edge_type(t) for t in edge_types]
            else:
                raise DDStoreValueError(f"{what}: edge_types must be None, an edge type or "
                                        f"a list of edge types, got {edge_types!r}")
            todo, drop = [], []
            for et in dict.fromkeys(types):
                c = self._entry(et, what)
                if (et, c.layout) not in self._reversed:
                    todo.append((et, c))
                if not keep_in_lists and not c.dropped:
                    drop.append(c)
            step.agree(same={"keep_in_lists": keep_in_lists})
        with st.transaction("GraphStore.build_backward"):
            for et, c in todo:  # each the build of a put, from the stored CSC's rows
                lo, hi = partition(c.num_edges, st.size, st.rank)
                columns = self._reversed_columns(c, lo)
                with st.collective(None) as step:
                    plan = self._first_pass(columns, lo, hi, et, (c.size[1], c.size[0]),
                                            f"{what} ({et!r})", layout=c.layout,
                                            reverse_of=c)
                    self._decide(plan, step.agree(plan.share(), same=plan.same()))
                self._build(plan, columns)
        gone = [v for c in drop for v in c.vars.values()]
        if gone:  # every build succeeded: the in-lists go (keep_in_lists=False), at once
            st.remove(*gone)
        for c in drop:
            c.vars, c.indptr, c.node_offsets, c.dropped = {}, None, None, True
        self._annotate()
        return [et for et, _ in todo]

    def _dropped_error(self, c, what):
        """The error of a call that reads the in-lists of ``c``, which
        ``build_backward(keep_in_lists=False)`` removed."""
        return DDStoreValueError(
            f"{what}: graph store {self.name!r} holds no in-lists of edge type "
            f"{c.edge_type!r} (layout {c.layout.value!r}): build_backward(keep_in_lists="
            f"False) dropped them and kept only its out-lists; sample it with "
            f"sample_direction='backward', or remove_edge_index and put it again to "
            f"read its in-lists")

    def _reversed_columns(self, c, lo):
        """``columns(a, b)`` of the reversed edges of stored CSC ``c``: local column
        ``i`` is its CSC row ``lo + i`` as ``(destination, source)``, read in pieces."""
        st, nbr, indptr = self.store, c.vars["nbr"], c.indptr

        def columns(a, b):
            src = st.get_range(nbr, lo + a, b - a).reshape(-1).astype(np.int64)
            dst = np.searchsorted(indptr, np.arange(lo + a, lo + b, dtype=np.int64),
                                  side="right") - 1
            return dst, src
        return columns

    def _rows_to_edge_ids(self, eid_name, of_eid, n_csc, chunk, what):
        """Collective step of :meth:`build_backward`: this rank's chunk of ``eid_name``
        holds CSC rows of the forward lists; replace them by the edge ids those rows
        hold (``of_eid``), in pieces of ``chunk``."""
        view = self.store.local_view(eid_name)
        self._fill_by_ids(view, of_eid, view, chunk, what)

    def sampled_edge_types(self):
        """Local: the edge types the sampler samples (those with at least one stored
        layout), in the order first put; a new list on every call."""
        return list(self._csc)

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
        while ``sampled_lists(et) is`` the object it cached."""
        edge_type = as_edge_type(edge_type)
        c = self._csc.get(edge_type)
        if c is None or not backward:
            return c
        return self._reversed.get((edge_type, c.layout))

    def has_backward(self, edge_type=None):
        """Local: whether the out-lists of ``edge_type`` (its sampled layout) are
        stored (:meth:`build_backward`)."""
        self._entry(edge_type, "has_backward")
        return self.sampled_lists(edge_type, backward=True) is not None

    def weight_attr_of(self, edge_type=None):
        """The ``weight_attr`` the lists of ``edge_type`` are weighted by, or None (no
        weights stored for it)."""
        c = self._entry(edge_type, "weight_attr_of")
        return self.weight_attr if "w" in self._lists_holding(c).vars else None

    def _lists_holding(self, c):
        """The lists of stored layout ``c`` that hold its edges (and weights): its
        in-lists, or its out-lists once the in-lists were dropped
        (``build_backward(keep_in_lists=False)``)."""
        return self._reversed[(c.edge_type, c.layout)] if c.dropped else c

    # ------------------------------------------------------------------ the rest
    def _choose(self, edge_type):
        """Set ``_csc[edge_type]``, the layout the sampler reads: the one PyG's ``csc()``
        converts from (a stored CSC, else COO, else CSR; for edge type None, whose
        ``csc()`` PyG takes from its first edge attribute, the first put)."""
        have = [k[1] for k in self._stored if k[0] == edge_type]
        if not have:
            self._csc.pop(edge_type, None)
            return
        if edge_type is not None:
            have = sorted(have, key=[EdgeLayout.CSC, EdgeLayout.COO, EdgeLayout.CSR].index)
        self._csc[edge_type] = self._stored[(edge_type, have[0])]

    def _entry(self, edge_type, what, layout=None):
        """The sampled CSC of ``edge_type`` (``layout`` None) or its stored ``layout``;
        a :class:`~ddstore.pyg.UnknownAttributeError` (a ``KeyError``) naming what is
        stored when there is none."""
        edge_type = as_edge_type(edge_type)
        c = self._csc.get(edge_type) if layout is None else self._stored.get(
            (edge_type, EdgeLayout(layout)))
        if c is None:
            self.store.check_alive()
            known = [f"({k[0]!r}, {k[1].value!r})" for k in self._stored]
            which = f"edge type {edge_type!r}" + (
                "" if layout is None else f" in layout {EdgeLayout(layout).value!r}")
            raise UnknownAttributeError(f"{what}: no {which} in graph store {self.name!r}; "
                                        f"stored (edge type, layout): "
                                        f"{', '.join(known) if known else 'none'}")
        return c

    def _remove_edge_index(self, edge_attr):
        """Collective (PyG's ``remove_edge_index(edge_type, layout)``): drop that layout
        of the edge type; True, or False (on every rank) when it was not stored."""
        edge_type = as_edge_type(edge_attr.edge_type)
        key = (edge_type, EdgeLayout(edge_attr.layout))
        with self.store.collective("GraphStore.remove", repr(key)):
            pass
        c = self._stored.pop(key, None)
        if c is None:
            return False
        self._choose(edge_type)
        gone = [x for x in (c, self._reversed.pop(key, None)) if x is not None]
        names = [v for x in gone for v in x.vars.values()]  # with its out-lists
        if names:
            self.store.remove(*names)
        for x in gone:
            x.removed = True
        self._annotate()
        return True

    def _get_edge_index(self, edge_attr):
        """Local: the edge index of ``edge_attr``'s edge type in its layout **read onto
        this rank**, exactly as put: COO ``(row, col)`` in the order put, CSR
        ``(rowptr, col)``, CSC ``(row, colptr)``; a layout never put raises a
        :class:`~ddstore.pyg.UnknownAttributeError` (a ``KeyError``).  The sampler never
        calls it."""
        c = self._entry(edge_attr.edge_type, "get_edge_index", edge_attr.layout)
        if edge_attr.size is None:
            edge_attr.size = c.size  # as PyG's Data does
        src, dst = self._put_order(c)
        if c.layout == EdgeLayout.COO:
            return torch.from_numpy(src), torch.from_numpy(dst)
        n = c.ptr_nodes
        if c.layout == EdgeLayout.CSR:
            return torch.from_numpy(_pointer(src, n)), torch.from_numpy(dst)
        return torch.from_numpy(src), torch.from_numpy(_pointer(dst, n))

    def _put_order(self, c):
        """``(src, dst)`` int64 of a stored layout in edge-id order (the entries as put),
        read from its CSC (each list's owner the destination, ``nbr`` the source), or
        once its in-lists were dropped from its out-lists (owner the source, ``nbr`` the
        destination)."""
        lists = self._lists_holding(c)
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
        return [EdgeAttr(c.edge_type, c.layout, c.is_sorted, c.size)
                for c in self._stored.values()]

    def edge_ids(self, edge_type=None):
        """Local: the edge ids of the sampled layout of ``edge_type`` in its CSC order
        (read onto this rank; for inspection): entry ``j`` of the CSC's ``nbr`` is edge
        ``edge_ids()[j]`` of the edge index as put."""
        c = self._entry(edge_type, "edge_ids")
        if c.dropped:
            raise self._dropped_error(c, "edge_ids")
        eid = self.store.get_range(c.vars["eid"], 0, c.num_edges)
        return torch.from_numpy(eid.astype(np.int64, copy=False))

    def num_edges(self, edge_type=None):
        return self._entry(edge_type, "num_edges").num_edges

    def node_counts(self):
        """``{node type: number of nodes}``: the node types of the stored edge types
        (from their sizes), then those declared by ``declare_rows`` on the
        :class:`FeatureStore` of the same ``store`` and ``name`` (``from_hetero``
        declares every node type's count), then those of node attributes put in that
        feature store (their rows) -- so a graph with no edges, even with no node
        attributes, still has its nodes (None: the homogeneous node type)."""
        sizes = {}
        for (et, _), c in self._stored.items():
            s_t, d_t = (None, None) if et is None else (et[0], et[2])
            sizes.setdefault(s_t, c.size[0])
            sizes.setdefault(d_t, c.size[1])
        for t, n in declared_rows(self.store, self.name).items():
            if t is None or isinstance(t, str):  # node types (not edge types' rows)
                sizes.setdefault(t, n)
        prefix = node_var(self.name, None, "")[:-len(type_key(None)) - 1]
        for v in self.store.variables():
            if v.startswith(prefix):
                t = v[len(prefix):].split("/", 1)[0]
                t = None if t == type_key(None) else t
                if t not in sizes:
                    sizes[t] = int(self.store.nrows(v))
        return sizes

    def csc_bytes(self):
        """Bytes of this rank's lists (every stored layout's in-lists, and out-lists
        built by :meth:`build_backward`) plus the replicated indptrs and node times
        (node-level time)."""
        lists = [c for c in self._stored.values() if not c.dropped]
        lists += list(self._reversed.values())
        times = {id(c.node_times): c.node_times.nbytes for c in lists
                 if c.node_times is not None}
        return int(sum(self.store.nbytes(v) for c in lists for v in c.vars.values()) +
                   sum(c.indptr.nbytes for c in lists) + sum(times.values()))

    def __repr__(self):
        return (f"GraphStore({self.name!r}, edge_types={list(self._csc)}, "
                f"layouts={[(k[0], k[1].value) for k in self._stored]}, "
                f"time_attr={self.time_attr!r}"
                + (f", weight_attr={self.weight_attr!r})" if self.weight_attr else ")"))


def _node_offsets(indptr, chunks, width):
    """The destination-node range of each group member (``width + 1`` int64) of lists
    with replicated ``indptr`` whose member chunks start at global rows ``chunks``
    (:meth:`DDStore.chunk_offsets`; each a list boundary, as a restore splits them at
    the annotation's cuts): member ``m`` holds the lists of nodes ``[off[m], off[m +
    1])``, the first node of each range the first whose list starts at its chunk."""
    n = indptr.shape[0] - 1
    off = np.empty(width + 1, dtype=np.int64)
    off[0], off[width] = 0, n
    if width > 1:
        off[1:width] = np.searchsorted(indptr, np.asarray(chunks[1:width], np.int64),
                                       side="left")
    if (indptr[off] != np.asarray(chunks, np.int64)).any():
        raise DDStoreValueError(f"GraphStore.open: the lists' chunks (rows {list(chunks)}) "
                                f"do not start at list boundaries")
    return off


def _checked_weight_attr(weight_attr):
    if weight_attr is not None and (not isinstance(weight_attr, str) or not weight_attr):
        raise DDStoreValueError(f"weight_attr must be None or a non-empty str, got "
                                f"{weight_attr!r}")
    return weight_attr


def _weight_dtype(dtype):
    """The dtype of the weights kept in CSC order for an edge attribute of values of
    ``dtype`` (:func:`value_dtype`: a bfloat16 attribute's are float32):
    float32 for float32 and float16 (float32 holds each of their values exactly, so the
    sampler's doubles are those of the attribute), float64 for anything else (float64
    itself, and integers, which float32 may round)."""
    return np.dtype(np.float32) if np.dtype(dtype) in (np.float32, np.float16) \
        else np.dtype(np.float64)


def _pointer(ids, n):
    """The CSR / CSC pointer (``n + 1`` int64) of sorted node ids ``ids`` (all < n)."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(ids, minlength=n), out=ptr[1:])
    return ptr


def _checked_size(size, edge_type, what):
    """``size`` checked as ``(num_src, num_dst)`` integers (Python or numpy; never
    truncated floats or strings) >= 0, and as ``(n, n)`` for a homogeneous graph
    (``edge_type`` None), whose sources and destinations are one node set, as in PyG's
    ``Data``; returned as a pair of ints, or raises."""
    try:
        num_src, num_dst = size
    except (TypeError, ValueError):
        num_src = num_dst = None
    if not (is_int(num_src) and is_int(num_dst)) or min(num_src, num_dst) < 0:
        raise DDStoreValueError(f"{what}: size must be (num_src, num_dst) integers >= 0, "
                                f"got {size!r}")
    if edge_type is None and num_src != num_dst:
        raise DDStoreValueError(f"{what}: size={size!r}: a homogeneous graph's sources "
                                f"and destinations are one node set, so size must be "
                                f"(n, n) (for two node types, put a (src, rel, dst) edge "
                                f"type)")
    return int(num_src), int(num_dst)


def _raise_bad_weight(found, w, what):
    """After the round of a step that scanned weights (``found``: every rank's
    :meth:`GraphStore._weight_scan`): raise, alike on every rank, a
    :class:`~ddstore.DDStoreValueError` naming the smallest edge id with a bad weight
    and its value, if any rank found one."""
    found = [x for x in found if x is not None]
    if found:
        eid, value = min(found)
        raise DDStoreValueError(f"{what}: weight_attr {w!r}: edge {eid} has weight "
                                f"{value!r}; weights must be finite and >= 0")


def _ids(x, what):
    """Node ids as numpy can count and compare them: uint64 as int64, where an id beyond
    int64 (which the cast would make negative) raises naming it and the range."""
    if x.dtype.kind != "u" or x.dtype.itemsize < 8:
        return x
    if x.size and int(x.max()) > _INT64_MAX:
        v = int(x[np.argmax(x > np.uint64(_INT64_MAX))])
        raise DDStoreIndexError(f"{what}: node id {v} (uint64) is beyond int64; node ids "
                                f"must be in [0, num_nodes) with num_nodes <= 2**63 - 1")
    return x.astype(np.int64)


def _count(deg, d):
    """``deg[v] +=`` the occurrences of ``v`` in ``d`` (ids known to be in range)."""
    if 4 * d.shape[0] >= deg.shape[0]:
        deg += np.bincount(d, minlength=deg.shape[0])
    else:  # a small piece: no temporary of the degrees' size
        np.add.at(deg, d, 1)


_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F),
        np.uint64(0x165667B19E3779F9))


def _fingerprint(a, s, d):
    """A 64-bit sum over the edges of local columns ``[a, a + len(s))`` of a hash of
    (column, source, destination): the sum over any split of a range into pieces is the
    same, and a changed, moved or swapped edge changes it (but for 2**-64)."""
    h = s.astype(np.uint64) * _MIX[0]
    h ^= d.astype(np.uint64) * _MIX[1]
    h += np.arange(a, a + s.shape[0], dtype=np.uint64) * _MIX[2]
    h ^= h >> np.uint64(31)
    h *= _MIX[0]
    return int(h.sum(dtype=np.uint64))


def _checked_columns(edges, what, n_local):
    """``columns(a, b)`` over a user's callable ``edges(a, b)``: its piece checked (a
    ``[2, b - a]`` integer array or tensor), anything it raises raised as a
    :class:`~ddstore.DDStoreError` (agreed by the caller's step).

    The build reads the ``n_local`` columns more than once (a pass that checks and
    counts, then the rounds that place them); every later read must give the columns
    of the first pass.  A later read of a piece read before is compared with it; a
    later pass in pieces of other sizes is compared as a whole at its last piece (a
    fingerprint of every column, :func:`_fingerprint`).  A difference raises a
    :class:`~ddstore.DDStoreValueError` naming the callable and the columns, before
    they are placed."""
    name = getattr(edges, "__qualname__", None) or type(edges).__name__
    first = {}          # (a, b) -> fingerprint, from the first pass
    state = {"first pass": True, "total": 0, "running": 0}

    def changed(a, b):
        return DDStoreValueError(
            f"{what}: the edge_index callable {name} returned other columns for local "
            f"columns [{a}, {b}) than when it was first asked for them; it is asked for "
            f"every piece more than once (a pass that counts the degrees, then the build "
            f"that places the edges) and must return the same columns every time")

    def columns(a, b):
        out, arr = call_piece(edges, "edge_index", a, b, what)
        if arr.shape != (2, b - a):
            raise DDStoreValueError(f"{what}: edge_index({a}, {b}) returned "
                                    f"{type(out).__name__} of shape {tuple(arr.shape)}; "
                                    f"expected [2, {b - a}] (the sources and destinations "
                                    f"of local columns [{a}, {b}))")
        if arr.size and arr.dtype.kind not in "iu":
            raise DDStoreValueError(f"{what}: edge_index({a}, {b}) returned dtype "
                                    f"{arr.dtype}; node ids must be integers")
        s, d = _ids(arr[0], what), _ids(arr[1], what)
        fp = _fingerprint(a, s, d)
        if state["first pass"]:
            first[(a, b)] = fp
            state["total"] = (state["total"] + fp) & ((1 << 64) - 1)
            state["first pass"] = b < n_local
            return s, d
        if a == 0:
            state["running"] = 0
        state["running"] = (state["running"] + fp) & ((1 << 64) - 1)
        if first.get((a, b), fp) != fp:
            raise changed(a, b)
        if b == n_local and state["running"] != state["total"]:
            raise changed(0, n_local)
        return s, d
    return columns
