"""The distributed CSC build of a :class:`~ddstore.pyg.GraphStore`: one edge type in one
layout from every rank's own COO columns, as a T-CSR keyed by destination
(:mod:`ddstore.build`), in two collective steps and a fill.

A put (or ``build_backward``) runs, inside its own step, :func:`first_pass` (checks
and the first pass over this rank's columns, giving a :class:`Plan`), agrees on the
plan's ``share()`` / ``same()`` and hands the agreed shares to :func:`decide`; after its
step it calls :func:`build`.  Each takes the graph store's state
(:class:`~ddstore.pyg._graph_state.GraphState`) explicitly; :func:`build` also takes
the per-edge attributes (:class:`~ddstore.pyg._edge_attrs.EdgeAttributes`: the time
reader, the weights) as an argument, so that this module imports neither them nor
the adapter."""
import numpy as np
from torch_geometric.data.graph_store import EdgeLayout

from .._checks import check_free_names, is_int, names_under
from ..errors import DDStoreError, DDStoreIndexError, DDStoreMemoryError, DDStoreValueError
from ..placement import balanced_offsets
from ..build import create, default_chunk_edges, fill_tcsr, id_dtype, prefault_built
from ._common import (as_numpy, call_piece, from_name_part, is_edge_type, node_var,
                      tiled_total, type_key)
from ._graph_state import Lists

__all__ = ["Plan", "first_pass", "decide", "build", "remove_lists", "as_coo", "node_offsets",
           "node_ids", "checked_columns"]

_CSC_VARS = ("nbr", "eid", "ts")
_INT64_MAX = 2 ** 63 - 1


class Plan:
    """What the first step of a CSC build learned (:func:`first_pass`, then
    :func:`decide`), handed to :func:`build`: the call
    (``what``), edge type, layout, pointer nodes as put, the stored CSC reversed (or
    None), the variables' name prefix, this rank's columns ``[lo, hi)``, the pieces
    they are read in, ``size`` (None until decided when not given), the degrees and
    the ``indptr`` (allocated once the size is known; ``deg`` None: counted in a second
    pass), the largest node ids, ``num_edges`` (decided)."""

    __slots__ = ("what", "edge_type", "layout", "ptr_nodes", "reverse_of", "prefix", "lo",
                 "hi", "size", "time_attr", "weight_attr", "piece", "deg", "indptr",
                 "max_src", "max_dst", "num_edges", "index_dtypes")

    def __init__(self, what, edge_type, layout, ptr_nodes, reverse_of, prefix, lo, hi,
                 size, time_attr, weight_attr):
        self.what, self.edge_type, self.layout = what, edge_type, layout
        self.ptr_nodes, self.reverse_of, self.prefix = ptr_nodes, reverse_of, prefix
        self.lo, self.hi, self.size = lo, hi, size
        self.time_attr, self.weight_attr = time_attr, weight_attr
        self.piece, self.deg, self.indptr = None, None, None
        self.max_src = self.max_dst = -1
        self.num_edges = None
        self.index_dtypes = None  # the dtypes of the edge index put (None: int64)

    def share(self):
        """This rank's share of the first step's round."""
        return self.lo, self.hi, self.max_src, self.max_dst

    def same(self):
        """The settings of the build that must be equal on every rank."""
        return {"size": self.size, "time_attr": self.time_attr,
                "weight_attr": self.weight_attr}


def node_attr_rows(store, name):
    """``{node type: the most rows of its stored node attributes}`` of the feature store
    ``name`` (None: the homogeneous type; an attribute first put with an index holds
    fewer rows than the nodes).  One pass over ``store.variables()``."""
    prefix = node_var(name, None, "")[:-len(type_key(None)) - 1]
    rows = {}
    for v in store.variables():
        if v.startswith(prefix):
            t = v[len(prefix):].split("/", 1)[0]
            t = None if t == type_key(None) else from_name_part(t)
            rows[t] = max(rows.get(t, 0), int(store.nrows(v)))
    return rows


def first_pass(state, columns, lo, hi, edge_type, size, what, layout=EdgeLayout.COO,
               ptr_nodes=None, reverse_of=None):
    """The rest of the local part of a build's first step, run inside the caller's
    step (named by the public call) after the caller's own checks: the edge type,
    ``size`` and the free names checked, then a first pass over this rank's COO
    columns ``[lo, hi)`` in pieces (``columns(a, b)`` returns local columns ``[a,
    b)`` as 1-D integer arrays (src, dst), raising for bad ones): node ids checked
    and their largest found, the in-degrees counted when ``size`` is given (else in
    a second pass, once the size is decided).  Raises on bad input.  Returns the
    :class:`Plan`: the caller agrees on its ``share()`` and ``same()``, hands the
    agreed shares to :func:`decide` and, after its step, calls :func:`build`.

    ``ptr_nodes``: the nodes of a CSR / CSC pointer as put (a lower bound of the
    default size).  ``reverse_of`` (stored :class:`Lists`; see ``build_backward``):
    the columns are its CSC rows reversed, column ``i`` being its CSC row ``lo +
    i``; the build makes its out-lists."""
    st = state.store
    if not (edge_type is None or is_edge_type(edge_type)):
        raise DDStoreValueError(f"{what}: edge_type must be None or (src, rel, dst) "
                                f"strings, got {edge_type!r}")
    if reverse_of is not None and (edge_type, layout) in state.reversed:
        check_free_names(what, f"out-lists of edge type {edge_type!r} in layout "
                               f"{layout.value!r}", "they are kept as built")
    if size is not None:
        size = _checked_size(size, edge_type, what)
    base = (f"{state.name}/{'csc' if reverse_of is None else 'out'}/"
            f"{type_key(edge_type)}/{layout.value}")
    held = st.variables()
    prefix = base + "/"
    if reverse_of is None and (edge_type, layout) in state.stored:
        # a replacement (PyG's stores replace a layout put again): the new lists are
        # built beside the old ones, under the first free of base, base~1, base~2...,
        # and the old ones removed only once the new ones are complete (build)
        k = 0
        while names_under(prefix[:-1], held):
            k += 1
            prefix = f"{base}~{k}/"
    check_free_names(what, names_under(prefix[:-1], held))
    plan = Plan(what, edge_type, layout, ptr_nodes, reverse_of, prefix, lo, hi, size,
                state.time_attr, state.weight_attr)
    n_local = hi - lo
    plan.piece = state.chunk_edges if state.chunk_edges is not None else \
        default_chunk_edges(n_local * st.size, st.size, 24, add_reverse=False)
    if size is not None:  # the degrees, and the indptr they become (no allocation
        # after the steps: what can fail on one rank fails in a local part)
        plan.deg, plan.indptr = _degrees(size, what)
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

def _degrees(size, what, inferred=False):
    """``(degrees, indptr)`` zeros for ``size[1]`` destination nodes, or a
    :class:`DDStoreMemoryError` naming the size (and, ``inferred``, where it came
    from) when they do not fit."""
    try:
        return np.zeros(size[1], dtype=np.int64), np.zeros(size[1] + 1, dtype=np.int64)
    except (MemoryError, ValueError):  # (numpy: "array is too big")
        whence = (" (no size given: taken from the largest node ids, or the node "
                  "attributes' rows)" if inferred else "")
        raise DDStoreMemoryError(f"{what}: size={size}{whence}: {size[1]} destination "
                                 f"nodes need {16 * size[1] + 8} bytes of degrees and "
                                 f"pointers on every rank, more than this rank can "
                                 f"allocate (is the node count right?)") from None


def decide(state, plan, infos):
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
        rows = node_attr_rows(state.store, state.name)
        ns, nd = rows.get(st_), rows.get(dt_)
        ptr_nodes = plan.ptr_nodes or 0
        ps, pd = (ptr_nodes, 0) if plan.layout == EdgeLayout.CSR else (0, ptr_nodes)
        if st_ == dt_:  # one node type at both ends (homogeneous or not): one count,
            # a stored node attribute's rows when there is one (ids beyond are refused)
            n = max(ns if ns is not None else max(max_src, max_dst) + 1, ps, pd)
            size = (n, n)
        else:
            size = (max(ns if ns is not None else max_src + 1, ps),
                    max(nd if nd is not None else max_dst + 1, pd))
    elif plan.ptr_nodes is not None:  # a pointer holds one entry per node, and one
        side, lim = (("source", size[0]) if plan.layout == EdgeLayout.CSR
                     else ("destination", size[1]))
        if plan.ptr_nodes > lim:
            raise DDStoreIndexError(f"{what}: the {plan.layout.value} pointer has "
                                    f"{plan.ptr_nodes + 1} entries, for {plan.ptr_nodes} "
                                    f"{side} nodes; size={size} allows at most {lim} "
                                    f"(at most {lim + 1} entries)")
    for label, m, lim, k in (("source", max_src, size[0], 2),
                             ("destination", max_dst, size[1], 3)):
        if m >= lim:
            r = next(r for r, i in enumerate(infos) if i[k] == m)
            raise DDStoreIndexError(f"{what}: rank {r}: {label} node {m} out of range "
                                    f"[0, {lim}) (size={size})")
    plan.size = size

def build(state, attrs, plan, columns, is_sorted=False):
    """Collective, after the first step of a build (:func:`first_pass`,
    :func:`decide`): the CSC of one edge type in one layout from this rank's COO
    columns.  A second step, when the build needs one (a ``time_attr``, a
    ``weight_attr``, or degrees not yet counted because no ``size`` was given):
    its local part reads and checks the times (``attrs.time_reader``), counts the
    degrees and checks the times in a second pass over the columns, checks the
    weights of this rank's edges; its round agrees on them.  Then one
    ``Allreduce`` of the degrees, and the variables are created and filled
    (:func:`~ddstore.build.fill_tcsr`) in a transaction.  With ``plan.reverse_of``
    the result is its out-lists (no times), whose ``eid`` are then turned from
    those CSC rows into its edge ids (and its weights, if any, gathered the same
    way)."""
    from mpi4py import MPI
    st = state.store
    what, edge_type, layout, size = plan.what, plan.edge_type, plan.layout, plan.size
    reverse_of, lo, hi, prefix = plan.reverse_of, plan.lo, plan.hi, plan.prefix
    n_local, piece = hi - lo, plan.piece
    deg, indptr = plan.deg, plan.indptr
    times = level = None
    weights = None if reverse_of is None else reverse_of.vars.get("w")
    timed = state.time_attr is not None and reverse_of is None
    weighted = state.weight_attr is not None and reverse_of is None
    if timed or weighted or deg is None:
        with st.collective(None) as step:
            if timed:
                times, level = attrs.time_reader(edge_type, lo, hi, plan.max_src, what)
            check_times = times is not None and times.check_pass
            count = deg is None
            if count:  # (the size decided from the largest ids: named as such)
                deg, indptr = _degrees(size, what, inferred=True)
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
                weights = attrs.weight_var(state.weight_attr, edge_type,
                                           plan.num_edges, what)
                if weights is not None:
                    bad = attrs.weight_scan(weights, lo, hi, piece)
            attrs.raise_bad_weight(step.agree(bad), state.weight_attr, what)
    width, g = st.group_size, st.group_rank
    st.comm.Allreduce(MPI.IN_PLACE, deg, op=MPI.SUM)
    np.cumsum(deg, out=indptr[1:])
    del deg
    node_off = balanced_offsets(indptr, width)
    num_edges = plan.num_edges
    # the T-CSR build keyed by destination (no reverse entries): the variables are
    # created at their final size and filled in place, one chunk of edges per round
    chunk = state.chunk_edges if state.chunk_edges is not None else default_chunk_edges(
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
    built = state.built(reverse_of is not None)
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
            vars_["w"] = attrs.weight_fill(prefix, weights, vars_["eid"], n_csc, chunk,
                                           what)
        if reverse_of is not None:
            attrs.rows_to_edge_ids(vars_["eid"], reverse_of.vars["eid"], n_csc, chunk,
                                   what)
        key = (edge_type, layout)
        lists = Lists(edge_type, size, num_edges, indptr, node_off, vars_,
                      state.time_attr if reverse_of is None else None, level,
                      layout, is_sorted or layout == EdgeLayout.CSC,
                      plan.ptr_nodes, node_times,
                      None if times is None else times.dtype, store=st)
        lists.index_dtypes = plan.index_dtypes
        replaced = built.get(key) if reverse_of is None else None

        def forget():  # an enclosing transaction that fails later removes the CSC
            built.pop(key, None)
            gone = reverse_of is None
            if not gone and reverse_of.dropped and state.stored.get(key) is reverse_of:
                # out-lists gone and their in-lists dropped: nothing holds the edges
                state.stored.pop(key)
                reverse_of.removed = gone = True
            if gone:
                state.choose(edge_type)
            state.changed()
        if replaced is None:
            txn.on_rollback(forget)
        else:  # a replacement, now complete (a rollback puts the old lists back)
            _set_aside(state, replaced, txn)
        built[key] = lists
        if reverse_of is None:
            state.choose(edge_type)
        # recorded, and what the sampler reads mapped now rather than one page fault per
        # first touch (in a step: a failure on one rank is agreed, the build undone)
        with st.collective(None):
            state.record()
            prefault_built(st, list(vars_.values()))
    return True


def _set_aside(state, c, txn):
    """Local, alike on every rank, in transaction ``txn``: take stored lists ``c`` and
    their out-lists (which describe the same edges) out of the state's out-lists, both
    marked removed (a sampler holding them stops), and set their variables aside
    (``txn.set_aside``: hidden, removed when the outermost transaction ends normally, at
    once when ``txn`` is the outermost).  If it rolls back, the variables come back under
    their names and then both lists come back in the state (in place of what replaced
    them), chosen and annotated again.  ``remove_edge_index``, and a replacement once
    its new lists are complete (the caller handles ``state.stored``)."""
    key = (c.edge_type, c.layout)
    out = state.reversed.pop(key, None)
    aside = [x for x in (c, out) if x is not None]

    def restore():
        for x in aside:
            x.removed = False
        state.stored[key] = c  # (in place when the key is there: the order put is kept)
        if out is not None:
            state.reversed[key] = out
        state.choose(key[0])
        state.changed()
    for x in aside:
        x.removed = True
    txn.set_aside([v for x in aside for v in x.vars.values()], on_rollback=restore)


def remove_lists(state, key):
    """Collective, after the caller's step (PyG's ``remove_edge_index``): drop stored
    layout ``key`` and its out-lists; their variables go at once, or, inside an
    enclosing transaction, when it commits (a rollback brings the layout back).  False
    (on every rank) when it was not stored."""
    c = state.stored.pop(key, None)
    if c is None:
        return False
    with state.store.transaction("GraphStore.remove") as txn:
        _set_aside(state, c, txn)
        state.choose(key[0])
        state.changed_in_step()
    return True


def as_coo(edge_index, layout, what):
    """``(src, dst, ptr_nodes, dtypes)``: the edges as int64 arrays in edge-id order
    from any of PyG's layouts, the nodes of a CSR / CSC pointer as put (COO: None), and
    the integer dtypes of the edge index's two entries as put (what ``get_edge_index``
    returns; an empty entry of another dtype: int64); raises a
    :class:`~ddstore.DDStoreValueError` for a malformed edge index."""
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
    dtypes = tuple(x.dtype.newbyteorder("=").str if x.dtype.kind in "iu"
                   else np.dtype(np.int64).str for x in (a, b))  # (read back natively)
    a, b = (node_ids(x, what).astype(np.int64, copy=False) for x in (a, b))
    if layout == EdgeLayout.COO:
        if a.shape != b.shape:
            raise DDStoreValueError(f"{what}: rows of lengths {a.shape[0]}, "
                                    f"{b.shape[0]}")
        return a, b, None, dtypes
    ptr, idx = (b, a) if layout == EdgeLayout.CSC else (a, b)
    if ptr.size == 0 or ptr[0] != 0 or ptr[-1] != idx.shape[0] or \
            np.any(np.diff(ptr) < 0):
        raise DDStoreValueError(f"{what}: the {layout.value} pointer must start at 0, "
                                f"not decrease and end at {idx.shape[0]}")
    other = np.repeat(np.arange(ptr.shape[0] - 1, dtype=np.int64), np.diff(ptr))
    ptr_nodes = ptr.shape[0] - 1
    return (idx, other, ptr_nodes, dtypes) if layout == EdgeLayout.CSC else \
        (other, idx, ptr_nodes, dtypes)


def node_offsets(indptr, chunks, width):
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


def node_ids(x, what):
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


def checked_columns(edges, what, n_local):
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
        s, d = node_ids(arr[0], what), node_ids(arr[1], what)
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
