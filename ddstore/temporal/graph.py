"""TemporalGraph: a continuous-time dynamic graph kept as a T-CSR in a DDStore.

Layout (for a graph called ``name``; ``width`` members per group, each group one replica):

- T-CSR: ``name/nbr``, ``name/ts`` (the graph's times), ``name/eid``: every node's
  neighbour list sorted by timestamp (ties in edge-id order), the lists concatenated in
  node order.  The graph's times (``time_dtype``) are int64 when it is built from
  integer times (kept exactly: Unix nanoseconds, times beyond 2**53) and float64
  otherwise; one decision for every builder (:mod:`ddstore._times`).
  ``nbr`` and ``eid`` are int32 when ``num_nodes`` and ``num_edges`` both fit
  (:func:`ddstore.build.id_dtype`: 16 bytes per entry instead of 24), else int64.  Member
  ``g`` holds the lists of the contiguous node range ``node_offsets[g:g + 2]``, chosen so
  that members hold about equal numbers of entries.
- edges by id: ``name/edges`` (``[E, 2]``: src, dst; int32 when every node id + 1 fits,
  else int64), ``name/edge_t`` (the graph's times), ``name/edge_split`` (int8: 0 train, 1 val,
  2 test), optional ``name/edge_feat`` and
  ``name/edge_label`` (one label row per edge, e.g. JODIE's ``state_label``, PyG's ``y``);
  member ``g`` holds edge ids ``partition(num_edges, width, g)``.
- optional ``name/node_feat`` by node, chunked like the T-CSR.

Replicated metadata: ``indptr`` (``num_nodes + 1`` int64: the global T-CSR row where each
node's list starts) and the chunk boundaries (``node_offsets``, ``edge_offsets``).  Edge
ids are the position of the edge in the concatenation of every rank's share in rank
order.  Whatever the stored width, every read returns int64 ids.

The edge table's ``src, dst, t`` repeat what the T-CSR holds (without ``add_reverse``,
edge ``e`` is the entry with ``eid == e`` in ``src``'s list); they are kept as a table
because reading an edge by id from the T-CSR would need an index from edge id to
T-CSR row (4 or 8 more bytes per edge) and a search of ``indptr``.
"""
import numpy as np

from ..annotations import check_object_name
from ..errors import (DDStoreIndexError, DDStoreMemoryError, DDStoreStateError,
                      DDStoreValueError)
from .._checks import (as_bool, as_dtype, as_indices, cast_in_range, check_free_names,
                       check_indices, integer_scalar, is_int, names_under, storable,
                       tensor_values)
from .._fingerprint import fingerprint
from .._times import FLOAT_TIMES, refuse_rounded_list, time_dtype, time_share
from ..memory import available_memory
from ..placement import balanced_offsets, member_offsets
from .. import build
from ..build import (check_chunk_edges, create, default_chunk_edges, degree_indptr,
                     fill_rows, fill_tcsr, id_dtype, prefault_built)

SPLITS = {"train": 0, "val": 1, "test": 2}
_T_VARS = ("nbr", "ts", "eid")


_NODE_BYTES = 24  # replicated per node on every rank: indptr, degrees, a bincount


def _size(nbytes):
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes} bytes"


def _refuse_copied_node_feat(name, info, max_id, derived):
    """Raise (from agreed values: alike on every rank) where every rank of several gave
    the same ``node_feat`` rows (equal counts and fingerprints, info[i][5] and [10]) and
    no edge reaches past one rank's rows: the whole table given on every rank where each
    rank's share was asked for, which would make a graph of ``size`` times the nodes."""
    rows, prints = [i[5] for i in info], [i[10] for i in info]
    if derived and len(info) > 1 and rows[0] > 0 and max_id < rows[0] and \
            len(set(rows)) == 1 and len(set(prints)) == 1:
        raise DDStoreValueError(
            f"graph {name!r}: every rank gave the same node_feat ({rows[0]} rows, equal "
            f"bytes) and no edge names a node beyond row {rows[0] - 1}: node_feat is each "
            f"rank's share of the rows (all ranks' rows concatenated are the nodes), not "
            f"the whole table on every rank; pass node_feat[lo:hi] with lo, hi = "
            f"ddstore.partition({rows[0]}, size, rank)")


def _check_node_memory(name, num_nodes, derived, hosts):
    """Raise :class:`DDStoreMemoryError` if the replicated node arrays of ``num_nodes``
    nodes do not fit the memory available to some rank.  ``hosts``: every rank's
    ``(processor name, bytes available on its node)``, gathered by a step's round, so
    that every rank decides the same (call it after the round, inside the step)."""
    ranks_on = {}
    for host, _ in hosts:
        ranks_on[host] = ranks_on.get(host, 0) + 1
    avail, r = min((a // ranks_on[h], r) for r, (h, a) in enumerate(hosts))
    need = _NODE_BYTES * (num_nodes + 1)
    if need > avail:
        host, node_avail = hosts[r]
        raise DDStoreMemoryError(
            f"graph {name!r}: num_nodes={num_nodes}"
            f"{' (the largest node id + 1)' if derived else ''} needs {_size(need)} per "
            f"rank for the replicated node index (indptr and degrees, {_NODE_BYTES} bytes "
            f"per node), more than the {_size(avail)} available to rank {r} "
            f"({_size(node_avail)} on its node / {ranks_on[host]} ranks there); at most "
            f"{max(0, avail // _NODE_BYTES - 1)} nodes fit")


class _WideIds(DDStoreValueError):
    """A node id of the edges parsed does not fit the int32 edge table being filled
    (:meth:`TemporalGraph.from_tgl` then builds again with int64; raised in a step's
    local part, so agreed like every error of the build: every rank raises this class)."""


def _narrow_pieces(pieces, ids):
    """``pieces`` (``[edges [n, 2] int64, ...]``) with the edges as ``ids``; raises
    :class:`_WideIds` at a piece holding a node id that does not fit."""
    for p in pieces:
        if ids != np.int64:
            e = p[0]
            if e.size and int(e.max()) + 1 > build.ID32_LIMIT:
                raise _WideIds(f"node id {int(e.max())} needs int64 ids")
            p[0] = e.astype(ids)
        yield p


def _layout(x):
    return None if x is None else (x.dtype, x.shape[1:])


def _as_array(x, what):
    """``x`` as a numpy array (torch CPU tensors included); raises
    :class:`DDStoreValueError` naming ``what`` when it is not one."""
    try:
        return np.asarray(tensor_values(x, what))  # bfloat16: float32, as from_pyg
    # what it is (a MemoryError is agreed by the step as a DDStoreMemoryError)
    except (MemoryError, DDStoreValueError):
        raise
    except Exception as exc:  # ragged lists, a GPU tensor...: worded with ``what``
        raise DDStoreValueError(f"{what} is not an array ({exc})") from exc


def _check_local(name, src, dst, t, edge_feat, node_feat, split, num_nodes,
                 edge_label=None):
    """This rank's input, validated: the arrays dict (``t`` as int64 or float64, and
    ``t_share`` its :func:`~ddstore._times.time_share` summary); raises
    :class:`DDStoreValueError` (or :class:`DDStoreIndexError` for a node id) on the first
    bad argument."""
    if not isinstance(name, str) or not name:
        raise DDStoreValueError(f"graph name must be a non-empty str, got {name!r}")
    if num_nodes is not None and (not is_int(num_nodes) or num_nodes < 1):
        raise DDStoreValueError(f"graph {name!r}: num_nodes={num_nodes!r} must be "
                                f"an integer >= 1 or None")
    out = {}
    for key, x in (("src", src), ("dst", dst), ("t", t)):
        arr = _as_array(x, f"graph {name!r}: {key}")
        if key == "t":
            refuse_rounded_list(x, arr, f"graph {name!r}: t")
        if arr.ndim != 1:
            raise DDStoreValueError(f"graph {name!r}: {key} must be 1-D, got "
                                    f"shape {arr.shape}")
        if key != "t" and arr.size and arr.dtype.kind not in "iu":
            raise DDStoreValueError(f"graph {name!r}: {key} must hold integer "
                                    f"node ids, got dtype {arr.dtype}")
        if key != "t" and arr.size and arr.dtype.kind == "u" and \
                int(arr.max()) > np.iinfo(np.int64).max:  # as given, before int64 wraps it
            pos = int(np.argmax(arr == arr.max()))
            raise DDStoreIndexError(f"graph {name!r}: {key}[{pos}] = "
                                    f"{int(arr[pos])} out of range [0, num_nodes)")
        if key == "t" and arr.size and arr.dtype.kind not in "iufO":  # O: Python ints
            raise DDStoreValueError(f"graph {name!r}: t must be real numbers, got "
                                    f"dtype {arr.dtype}")
        out[key] = arr
    m = out["src"].shape[0]
    if out["dst"].shape[0] != m or out["t"].shape[0] != m:
        raise DDStoreValueError(f"graph {name!r}: src, dst and t have lengths "
                                f"{m}, {out['dst'].shape[0]}, {out['t'].shape[0]};"
                                f" they must be equal")
    out["src"] = out["src"].astype(np.int64, copy=False)
    out["dst"] = out["dst"].astype(np.int64, copy=False)
    # integers as int64, floats as float64; the graph's dtype is decided over the ranks
    out["t"], out["t_share"] = time_share(out["t"], f"graph {name!r}: t")
    for key in ("src", "dst"):
        if m and int(out[key].min()) < 0:
            pos = int(np.argmax(out[key] < 0))
            raise DDStoreIndexError(f"graph {name!r}: {key}[{pos}] = "
                                    f"{int(out[key][pos])} is negative; node ids "
                                    f"must be in [0, num_nodes)")
        if m and num_nodes is not None and int(out[key].max()) >= num_nodes:
            pos = int(np.argmax(out[key] >= num_nodes))  # (named where it is)
            raise DDStoreIndexError(f"graph {name!r}: {key}[{pos}] = "
                                    f"{int(out[key][pos])} out of range [0, {num_nodes}) "
                                    f"(num_nodes={num_nodes})")
    bad = ~np.isfinite(out["t"])
    if bad.any():
        pos = int(np.argmax(bad))
        raise DDStoreValueError(f"graph {name!r}: t[{pos}] = {out['t'][pos]} is "
                                f"NaN or infinite; timestamps must be finite")
    if split is not None:
        arr = _as_array(split, f"graph {name!r}: split")
        if arr.ndim != 1 or arr.shape[0] != m:
            raise DDStoreValueError(f"graph {name!r}: split has shape {arr.shape},"
                                    f" needs ({m},) (one value per edge)")
        if m and arr.dtype.kind not in "iub":
            raise DDStoreValueError(f"graph {name!r}: split must hold integers "
                                    f"0/1/2, got dtype {arr.dtype}")
        badv = (arr < 0) | (arr > 2)
        if badv.any():
            pos = int(np.argmax(badv))
            raise DDStoreValueError(f"graph {name!r}: split[{pos}] = "
                                    f"{int(arr[pos])} outside 0-2 (0 train, 1 val,"
                                    f" 2 test)")
        out["split"] = arr.astype(np.int8)
    for key, x, rows in (("edge_feat", edge_feat, m), ("node_feat", node_feat, None),
                         ("edge_label", edge_label, m)):
        if x is None:
            continue
        arr = _as_array(x, f"graph {name!r}: {key}")
        if arr.ndim < 1:
            raise DDStoreValueError(f"graph {name!r}: {key} must have a first "
                                    f"(row) dimension, got a scalar")
        if not storable(arr.dtype):
            raise DDStoreValueError(f"graph {name!r}: {key} has dtype {arr.dtype},"
                                    f" which cannot be stored")
        if rows is not None and arr.shape[0] != rows:
            raise DDStoreValueError(f"graph {name!r}: {key} has {arr.shape[0]}"
                                    f" rows but this rank passes {rows} edges; "
                                    f"they must be equal")
        out[key] = arr
    return out


class TemporalGraph:
    """A temporal graph in a :class:`~ddstore.DDStore` (build it with :meth:`from_arrays`,
    :meth:`from_tgl`, :meth:`from_jodie` or :meth:`from_pyg`, all collective; reopen it
    by name from a restored store with :meth:`open`).

    Attributes: ``num_nodes``, ``num_edges``, ``indptr`` (replicated), ``split_counts``
    (``{"train": n, "val": n, "test": n}``), ``edge_feat_dim`` / ``node_feat_dim``
    (trailing shapes, None when absent), ``has_edge_label``, ``add_reverse``,
    ``time_dtype`` (the graph's times, int64 or float64: stored, compared by the
    samplers and returned by every read), ``t_dtype`` (the dtype :meth:`to_pyg` gives
    ``t``; ``time_dtype`` unless the builder says otherwise), ``num_users`` /
    ``num_items`` (graphs from
    :meth:`from_jodie`; None otherwise).  Reads are local and one-sided: :meth:`neighbors`,
    :meth:`edges`, :meth:`edge_features`, :meth:`edge_labels`, :meth:`node_features`,
    :meth:`to_pyg`; each is one batched store read per variable, results in request order,
    from any owner.
    """

    def __init__(self, store, name, num_nodes, num_edges, indptr, node_offsets, add_reverse,
                 split_counts, has_edge_feat, has_node_feat, has_edge_label=False,
                 time_dtype=FLOAT_TIMES):
        self.store, self.name = store, name
        self.num_nodes, self.num_edges = int(num_nodes), int(num_edges)
        self.indptr = indptr
        self.add_reverse = bool(add_reverse)
        self.split_counts = split_counts
        self.node_offsets = node_offsets
        self.edge_offsets = member_offsets(self.num_edges, store.group_size)
        self._has_edge_feat, self._has_node_feat = has_edge_feat, has_node_feat
        self.has_edge_label = bool(has_edge_label)
        self.time_dtype = np.dtype(time_dtype)
        self.t_dtype = self.time_dtype
        self.num_users = self.num_items = None
        self.edge_feat_dim = store.row_shape(f"{name}/edge_feat") if has_edge_feat else None
        self.node_feat_dim = store.row_shape(f"{name}/node_feat") if has_node_feat else None
        self._split = None
        self.read_stats = None  # from_tgl: lines parsed and seconds parsing, this rank
        self.removed = False  # set by remove(): samplers over the graph refuse to run
        # every read goes through handles bound to these variables (DDStore.handle): a
        # variable removed with store.remove, and another added under its name, is
        # refused rather than read with this graph's layout
        self._h = {k: store.handle(f"{name}/{k}") for k in self._keys()}

    # ------------------------------------------------------------------ building
    @classmethod
    def from_arrays(cls, store, name, src, dst, t, edge_feat=None, node_feat=None,
                    num_nodes=None, add_reverse=False, split=None, edge_label=None,
                    chunk_edges=None):
        """Collective: build a temporal graph from each rank's share of the edges.

        ``src``, ``dst`` (integer node ids), ``t`` (finite real timestamps, any order:
        the T-CSR is sorted here; integers on every rank are kept exactly as int64, else
        the graph's times are float64, which must hold every integer given exactly) and
        optional ``split`` (0 train / 1 val / 2 test per
        edge; default: every edge is train) and ``edge_feat`` (rows = this rank's edges)
        are this rank's share: any share, the global edge id of an edge being its
        position in the concatenation of all ranks' shares in rank order.  ``node_feat``
        is this rank's share of the node-feature rows in the same way (the rows of all
        ranks concatenated must be ``num_nodes``; the same rows given by every rank of
        several, where no edge reaches beyond them, are refused as a copy of the whole
        table).  ``num_nodes`` defaults to the largest node id + 1 (or the number of
        node-feature rows).  ``add_reverse=True`` also
        indexes every edge at its destination (undirected use; same edge id).
        ``edge_label`` (rows = this rank's edges, any storable dtype and row shape) is kept
        per edge and read back by :meth:`edge_labels`.

        The build holds outside the store one chunk of ``chunk_edges`` edges per rank at a
        time (default: :func:`~ddstore.build.default_chunk_edges`, about 1/64 of
        a rank's share, at most ~64 MB of buffers); every variable is allocated once in
        the store and filled in place (see :mod:`ddstore.build`).

        Every rank raises the same :class:`~ddstore.DDStoreError` on bad input on any
        rank (whatever this rank's checks raise is agreed by the call's first step,
        ``"TemporalGraph.from_arrays"``); on failure nothing of the graph is left in the
        store.
        """
        from mpi4py import MPI
        with store.collective("TemporalGraph.from_arrays", name) as step:
            arrs = _check_local(name, src, dst, t, edge_feat, node_feat, split, num_nodes,
                                edge_label)
            as_bool(add_reverse, f"graph {name!r}: add_reverse")
            check_free_names(f"graph {name!r}", names_under(name, store.variables()))
            check_object_name(store, name, cls.KIND, f"graph {name!r}")
            chunk_edges = check_chunk_edges(chunk_edges, name)

            def layout(key):
                if key not in arrs:
                    return None
                return arrs[key].dtype.str, arrs[key].shape[1:]
            info = step.agree((
                arrs["src"].shape[0],
                int(max(arrs["src"].max(initial=-1), arrs["dst"].max(initial=-1))),
                "split" in arrs, layout("edge_feat"), layout("node_feat"),
                arrs["node_feat"].shape[0] if "node_feat" in arrs else 0,
                np.bincount(arrs["split"], minlength=3).tolist() if "split" in arrs
                else None,
                (MPI.Get_processor_name(), available_memory()), layout("edge_label"),
                arrs["t_share"],
                fingerprint(arrs["node_feat"]) if "node_feat" in arrs else None),
                same={"add_reverse": bool(add_reverse),
                      "num_nodes": None if num_nodes is None else int(num_nodes),
                      "edge_feat given": edge_feat is not None,
                      "node_feat given": node_feat is not None,
                      "edge_label given": edge_label is not None,
                      "chunk_edges": chunk_edges})
            # decided from the agreed values: raised alike on every rank
            if len({i[2] for i in info}) > 1:
                raise DDStoreValueError(
                    f"graph {name!r}: split is given on some ranks only "
                    f"(ranks {[r for r, i in enumerate(info) if i[2]]})")
            for key, pos in (("edge_feat", 3), ("node_feat", 4), ("edge_label", 8)):
                if len({i[pos] for i in info}) > 1:
                    raise DDStoreValueError(
                        f"graph {name!r}: {key} dtype or row shape differs between ranks: "
                        f"{[i[pos] for i in info]}")
            time_dt = time_dtype([i[9] for i in info], f"graph {name!r}: t")
            counts = np.array([i[0] for i in info], dtype=np.int64)
            num_edges = int(counts.sum())
            max_id = max(i[1] for i in info)
            nf_rows = sum(i[5] for i in info)
            has_nf = node_feat is not None
            derived = num_nodes is None
            if derived:
                num_nodes = max(max_id + 1, nf_rows if has_nf else 0)
                if num_nodes < 1:
                    raise DDStoreValueError(
                        f"graph {name!r}: no edges and no node features on any rank "
                        f"(empty graph); pass num_nodes")
            num_nodes = int(num_nodes)
            _check_node_memory(name, num_nodes, derived, [i[7] for i in info])
            # (an id at or beyond a num_nodes given: refused in the local part, named by
            # array and position; a derived num_nodes exceeds every id)
            _refuse_copied_node_feat(name, info, max_id, derived)
            if has_nf and nf_rows != num_nodes:
                raise DDStoreValueError(
                    f"graph {name!r}: node_feat has {nf_rows} rows over all ranks "
                    f"({[i[5] for i in info]}); it needs one row per node, "
                    f"num_nodes={num_nodes}")
            if info[0][2]:
                split_counts = np.sum([i[6] for i in info], axis=0).tolist()
            else:
                split_counts = [num_edges, 0, 0]

            rank = store.rank
            m = int(counts[rank])
            s, d, tt = arrs["src"], arrs["dst"], arrs["t"]
            split_arr = arrs.get("split")
            ef, el = arrs.get("edge_feat"), arrs.get("edge_label")
            nf = arrs.get("node_feat")
            chunk = int(chunk_edges) if chunk_edges is not None else default_chunk_edges(
                num_edges, store.size, 25 + sum(
                    0 if x is None else x[:1].nbytes for x in (ef, el)), add_reverse)

            def edge_pieces():  # built in the local parts of the build's rounds
                for a in range(0, m, chunk):
                    b = min(a + chunk, m)
                    p = [np.stack([s[a:b], d[a:b]], axis=1), tt[a:b].astype(time_dt),
                         split_arr[a:b] if split_arr is not None else
                         np.zeros(b - a, dtype=np.int8)]
                    p += [x[a:b] for x in (ef, el) if x is not None]
                    yield p

            nf_first = sum(i[5] for i in info[:rank])

            def node_pieces():
                for a in range(0, nf.shape[0], chunk):
                    yield [nf[a:a + chunk]]

            def resolve(views):
                return num_nodes, split_counts
            return cls._build(store, name, num_edges, int(counts[:rank].sum()),
                              edge_pieces(), add_reverse, chunk, _layout(ef), _layout(el),
                              resolve, _layout(nf), nf_first,
                              node_pieces() if has_nf else None, id_dtype(max_id + 1),
                              time_dt)

    @classmethod
    def _build(cls, store, name, num_edges, first_eid, edge_pieces, add_reverse, chunk,
               ef_layout, el_layout, resolve, nf_layout, nf_first, node_pieces,
               edge_ids=np.int64, time_dtype=FLOAT_TIMES):
        """Collective, inside the builder's collective call (after its first step's
        round): the bounded build (see :mod:`ddstore.build`).
        ``edge_pieces``: this rank's edges from global id ``first_eid`` on, as pieces
        ``[edges [n, 2], t, split, (edge_feat), (edge_label)]`` of at most ``chunk`` rows
        (made in the local parts of the build's steps: whatever they raise is agreed);
        ``*_layout``: ``(dtype, row shape)`` or None; ``resolve(views)`` (collective,
        after the edge table is filled: its own steps, or none) returns ``(num_nodes,
        split_counts)``; ``node_pieces``: this rank's node-feature rows from node
        ``nf_first`` on, or None; ``edge_ids``: the dtype of the edge table's node ids
        (int32: :class:`_WideIds` at a piece with an id that does not fit);
        ``time_dtype``: the graph's times (int64 or float64: the pieces' ``t`` are of
        it, and so are ``edge_t`` and the T-CSR's ``ts``).  The T-CSR's
        ids are int32 when ``num_nodes`` and ``num_edges`` fit
        (:func:`~ddstore.build.id_dtype`).  On failure every variable created is
        removed, on every rank."""
        width, g = store.group_size, store.group_rank
        edge_off = member_offsets(num_edges, width)
        with store.transaction(f"TemporalGraph {name!r}") as txn:
            n_e = int(edge_off[g + 1] - edge_off[g])
            views = [create(store, f"{name}/edges", n_e, (2,), edge_ids),
                     create(store, f"{name}/edge_t", n_e, (), time_dtype),
                     create(store, f"{name}/edge_split", n_e, (), np.int8)]
            for key, lay in (("edge_feat", ef_layout), ("edge_label", el_layout)):
                if lay is not None:
                    views.append(create(store, f"{name}/{key}", n_e, lay[1], lay[0]))
            fill_rows(store, edge_off, first_eid, _narrow_pieces(edge_pieces, edge_ids),
                      views)
            num_nodes, split_counts = resolve(views)
            indptr = degree_indptr(store, views[0], num_nodes, add_reverse)
            node_off = balanced_offsets(indptr, width)
            n_t = int(indptr[node_off[g + 1]] - indptr[node_off[g]])
            ids = id_dtype(num_nodes, num_edges)
            tcsr = [create(store, f"{name}/{k}", n_t, (), dt)
                    for k, dt in zip(_T_VARS, (ids, time_dtype, ids))]
            fill_tcsr(store, n_e, lambda a, b: (views[0][a:b], views[1][a:b]),
                      int(edge_off[g]), add_reverse, indptr, node_off, tcsr, chunk)
            if nf_layout is not None:
                nfv = create(store, f"{name}/node_feat",
                             int(node_off[g + 1] - node_off[g]), nf_layout[1], nf_layout[0])
                fill_rows(store, node_off, nf_first, node_pieces, [nfv])
            store.sync()
            graph = cls(store, name, num_nodes, num_edges, indptr, node_off, add_reverse,
                        dict(zip(SPLITS, (int(c) for c in split_counts))),
                        ef_layout is not None, nf_layout is not None,
                        el_layout is not None, time_dtype)
            # an enclosing transaction that rolls back removes the graph: this object's
            # samplers then refuse, as after remove()
            txn.on_rollback(graph._rolled_back)
            # this rank's own work, in a step: what fails on one rank is agreed, and the
            # build undone on every rank (it was left, after the commit, on every rank)
            with store.collective(None):
                graph._annotate()  # every builder ends here (from_jodie / from_pyg
                # annotate again)
                # what samplers read, mapped now rather than one page fault per first touch
                prefault_built(store, [f"{name}/{k}" for k in _T_VARS])
        return graph

    @classmethod
    def from_tgl(cls, store, name, directory, add_reverse=False, chunk_edges=None):
        """Collective: build from a TGL dataset directory (``edges.csv``, optional
        ``edge_features.pt``, ``node_features.pt``; see
        :class:`~ddstore.sources.tgl.TGLShare`): each rank parses only its byte range of
        the CSV, in pieces of about ``chunk_edges`` lines (C parser), each piece sent to
        the edge table's owners before the next is read; edge ids follow the file's row
        order.  Feature rows are read in the same pieces (plain reads from the file when
        it is one uncompressed tensor, as ``torch.save`` writes it).  The transient is
        what :meth:`from_arrays` holds (one chunk), and no whole share is ever parsed
        into memory.  ``g.read_stats``: this rank's lines parsed and seconds spent
        parsing them (``parse_s`` wall, ``parse_cpu_s`` CPU).  Whatever fails on any
        rank (a bad argument, a file, a line, an ``OSError`` while reading) raises the
        same error on every rank, and nothing of the graph is left in the store.
        ``add_reverse``: as in :meth:`from_arrays` (each edge also in its destination's
        list)."""
        from ..sources.tgl import TGLShare
        with store.collective("TemporalGraph.from_tgl", name, same={
                "add_reverse": bool(add_reverse), "chunk_edges": chunk_edges}) as step:
            if not isinstance(name, str) or not name:
                raise DDStoreValueError(f"graph name must be a non-empty str, got {name!r}")
            as_bool(add_reverse, f"graph {name!r}: add_reverse")
            check_free_names(f"graph {name!r}", names_under(name, store.variables()))
            check_object_name(store, name, cls.KIND, f"graph {name!r}")
            chunk_edges = check_chunk_edges(chunk_edges, name)
            share = TGLShare(store, directory, step)  # its first round is this step's
            try:  # int32 node ids in the edge table, again with int64 if one does not fit
                return cls._from_tgl_share(store, name, share, add_reverse, chunk_edges,
                                           np.int32)
            except _WideIds:  # agreed: every rank builds again
                share.rewind()
                return cls._from_tgl_share(store, name, share, add_reverse, chunk_edges,
                                           np.int64)

    @classmethod
    def _from_tgl_share(cls, store, name, share, add_reverse, chunk_edges, edge_ids):
        from mpi4py import MPI
        from ..sources.tgl import check_sorted_across_ranks
        ef, nfr = share.edge_feat, share.node_feat
        chunk = int(chunk_edges) if chunk_edges is not None else default_chunk_edges(
            share.num_edges, store.size, 25 + (ef.row_bytes if ef else 0), add_reverse)

        def resolve(views):
            with store.collective(None) as step:
                mx = int(views[0].max(initial=-1)) if views[0].size else -1
                info = step.agree((mx, share.ends(), share.split_counts.tolist(),
                                   (MPI.Get_processor_name(), available_memory())))
                # decided from the agreed values: raised alike on every rank
                check_sorted_across_ranks(share.path, [i[1] for i in info], "time",
                                          "edges.csv must be sorted by time (sort it, or "
                                          "use from_arrays, which accepts any order)")
                max_id = max(i[0] for i in info)
                nf_rows = nfr.shape[0] if nfr is not None else 0
                num_nodes = max(max_id + 1, nf_rows)
                if num_nodes < 1:
                    raise DDStoreValueError(
                        f"graph {name!r}: {share.path} has no edges and there are no node "
                        f"features (empty graph)")
                _check_node_memory(name, num_nodes, True, [i[3] for i in info])
                if nfr is not None and nf_rows != num_nodes:
                    raise DDStoreValueError(
                        f"graph {name!r}: {nfr.path}: {nf_rows} rows, but {share.path} "
                        f"names nodes up to id {max_id} ({num_nodes} nodes); it needs one "
                        f"row per node")
                return num_nodes, np.sum([i[2] for i in info], axis=0).tolist()
        g = cls._build(store, name, share.num_edges, share.first_eid,
                       share.edge_pieces(chunk), add_reverse, chunk,
                       None if ef is None else (ef.dtype, ef.shape[1:]), None, resolve,
                       None if nfr is None else (nfr.dtype, nfr.shape[1:]),
                       share.node_rows[0],
                       share.node_pieces(chunk) if nfr is not None else None, edge_ids,
                       share.time_dtype)
        g.read_stats = dict(share.stats)
        return g

    @classmethod
    def from_jodie(cls, store, name, path, add_reverse=False, val_ratio=0.15,
                   test_ratio=0.15):
        """Collective: build from a JODIE CSV file (``user,item,timestamp,state_label,
        features...`` after one header line, rows sorted by timestamp; see
        :func:`~ddstore.sources.read_jodie_share`): each rank parses only its byte range.
        ``add_reverse`` as in :meth:`from_arrays`.

        Node ids as PyG's ``JODIEDataset`` makes them: users keep their ids, item ``i`` is
        node ``i + num_users`` (``num_users = max(user) + 1`` over the file; the graph's
        ``num_users`` / ``num_items``).  Edge ids follow the file's rows; the features are
        ``edge_feat`` (float32, none when the rows have none), ``state_label`` the edge
        labels (int64, :meth:`edge_labels`).  Timestamps are kept exactly as in the
        file: int64 when every one is an integer literal (Unix nanoseconds included),
        else float64 (the one decision of :meth:`from_arrays`); ``t_dtype`` (what
        :meth:`to_pyg` gives) is int64 when every one is a whole number within int64 (as
        in the four published files, and as PyG holds them) and float64 otherwise (PyG
        would truncate them).  The split is PyG's
        ``train_val_test_split(val_ratio, test_ratio)`` of that TemporalData.  Whatever
        fails on any rank (a bad ratio, the file, a line, an ``OSError`` or
        ``MemoryError`` while parsing) raises the same error on every rank, and nothing
        of the graph is left in the store.
        """
        from ..sources.jodie import read_share
        from .pyg_data import check_ratios, chronological_split_share
        with store.collective("TemporalGraph.from_jodie", name) as step:
            check_ratios(val_ratio, test_ratio)
            as_bool(add_reverse, f"graph {name!r}: add_reverse")
            share = read_share(store, step, path)  # its first round is this step's
            t_dtype = np.dtype(np.int64 if share.whole_times else np.float64)
            split = chronological_split_share(store.comm, share.t, t_dtype, val_ratio,
                                              test_ratio)
            with store.transaction(f"TemporalGraph.from_jodie {name!r}"):
                g = cls.from_arrays(store, name, share.src, share.dst, share.t,
                                    edge_feat=share.edge_feat, add_reverse=add_reverse,
                                    split=split, edge_label=share.label)
                with store.collective(None):  # (agreed: a failure undoes the graph)
                    g.t_dtype = t_dtype
                    g.num_users, g.num_items = share.num_users, share.num_items
                    g._annotate()  # what open() gives back: t_dtype, num_users, num_items
            return g

    @classmethod
    def from_pyg(cls, store, name, data, add_reverse=False, split=None, val_ratio=0.15,
                 test_ratio=0.15):
        """Collective: build from a ``torch_geometric.data.TemporalData`` (``src``,
        ``dst``, ``t`` required; ``msg`` becomes ``edge_feat``, ``y`` the edge labels;
        ``add_reverse`` as in :meth:`from_arrays`).

        The quick path for data that fits one rank: every rank passes the same ``data``
        and ``split`` (checked: number of events, fields, dtypes, row shapes and a 64-bit
        fingerprint of every array, see :func:`ddstore._fingerprint.same_data`: values
        that differ between ranks are refused on every rank, naming the field and the
        ranks) and keeps its share ``partition(num_events, size, rank)``; edge ``i`` is
        event ``i``.  ``split``: one
        value per event (0 train / 1 val / 2 test) or None for PyG's chronological
        ``data.train_val_test_split(val_ratio, test_ratio)``, computed as PyG does.  An
        integer ``data.t`` is kept exactly as int64, a float one as float64 (the one
        decision of :meth:`from_arrays`); ``t_dtype`` remembers ``data.t``'s dtype for
        :meth:`to_pyg`.  A bfloat16 ``t`` or ``msg`` is held as float32, which holds it
        exactly, and comes back from :meth:`to_pyg` as float32.
        """
        from .. import partition
        from .._fingerprint import same_data
        from .pyg_data import check_ratios, chronological_split, temporal_data_arrays
        with store.collective("TemporalGraph.from_pyg", name) as step:
            arrs = temporal_data_arrays(data, name)
            as_bool(add_reverse, f"graph {name!r}: add_reverse")
            n = arrs["src"].shape[0]
            layout = {k: (v.dtype.str, v.shape[1:]) for k, v in arrs.items()}
            layout["events"] = n
            layout["split given"] = split is not None
            if split is None:
                check_ratios(val_ratio, test_ratio)
                down = np.flatnonzero(np.diff(arrs["t"]) < 0)
                if down.size:  # PyG's split is by position: later events in train
                    i = int(down[0]) + 1
                    raise DDStoreValueError(
                        f"graph {name!r}: data.t is not sorted (event {i} at t="
                        f"{arrs['t'][i]} comes after t={arrs['t'][i - 1]}), and the "
                        f"chronological split (split=None, PyG's train_val_test_split) "
                        f"cuts by position: sort the events by time, or pass split=")
                split = chronological_split(data.t, val_ratio, test_ratio)
            else:
                split = _as_array(split, f"graph {name!r}: split")
                if split.ndim != 1 or split.shape[0] != n:
                    raise DDStoreValueError(f"graph {name!r}: split has shape "
                                            f"{split.shape}, needs ({n},) (one value per "
                                            f"event of data)")
            # checked whole here, so that an error names the event's index in data
            # (from_arrays checks each rank's share, by its index in the share)
            _check_local(name, arrs["src"], arrs["dst"], arrs["t"], arrs.get("msg"), None,
                         split, None, arrs.get("y"))
            sl = slice(*partition(n, store.size, store.rank))  # this rank's share
            share = [arrs["src"][sl], arrs["dst"][sl], arrs["t"][sl]]
            step.agree(same={"TemporalData (the same on every rank)": layout,
                             **same_data(arrs, what="TemporalData", hint=(
                                 "every rank must pass the same TemporalData: make it "
                                 "alike on every rank (the same seed, the same file)")),
                             **(same_data({"split": split}, what="argument")
                                if layout["split given"] else {})})
            with store.transaction(f"TemporalGraph.from_pyg {name!r}"):
                g = cls.from_arrays(store, name, *share,
                                    edge_feat=arrs["msg"][sl] if "msg" in arrs else None,
                                    add_reverse=add_reverse, split=split[sl],
                                    edge_label=arrs["y"][sl] if "y" in arrs else None)
                with store.collective(None):  # (agreed: a failure undoes the graph)
                    g.t_dtype = arrs["t"].dtype
                    g._annotate()
            return g

    # ------------------------------------------------------------------ checkpoint
    KIND = "TemporalGraph"

    def _annotate(self):
        """Local, alike on every rank (at the end of the build, inside its collective
        call): what :meth:`open` needs, kept by :meth:`DDStore.save`.  The T-CSR's three
        variables may only be cut at node boundaries (``indptr``), so that a restore at
        any width keeps every node's list whole on one member."""
        meta = {"version": 1, "num_nodes": self.num_nodes, "num_edges": self.num_edges,
                "add_reverse": self.add_reverse, "split_counts": dict(self.split_counts),
                "edge_feat": bool(self._has_edge_feat),
                "node_feat": bool(self._has_node_feat),
                "edge_label": self.has_edge_label, "time_dtype": self.time_dtype.str,
                "t_dtype": np.dtype(self.t_dtype).str,
                "num_users": None if self.num_users is None else int(self.num_users),
                "num_items": None if self.num_items is None else int(self.num_items)}
        tcsr = [f"{self.name}/{k}" for k in _T_VARS]
        self.store.annotate(self.name, self.KIND, meta, {"indptr": self.indptr},
                            variables=self._variables(),
                            cuts={v: "indptr" for v in tcsr})

    @classmethod
    def open(cls, store, name):
        """Local (no communication): the graph ``name`` of ``store`` as it was built, from
        what its builder recorded (:meth:`DDStore.annotate`) and its variables; for a
        store from :meth:`DDStore.restore` (any rank count and width) or
        :meth:`DDStore.load`, without the source data.  Every read, :meth:`to_pyg`,
        :meth:`remove` and a :class:`~ddstore.temporal.TemporalSampler` over it (same
        seed: the same samples) behave as on the graph that was saved.  The T-CSR's
        member node ranges (``node_offsets``) come from the restored chunks (cut at node
        boundaries); node features are split by node count after a restore at another
        width (reads do not depend on it).  Raises :class:`DDStoreValueError` naming the
        graphs the store holds when there is no graph ``name``."""
        ann = store.annotation(name, kind=cls.KIND)
        with ann.reading(f"TemporalGraph.open({name!r})", version=1) as meta:
            indptr = np.ascontiguousarray(ann.arrays["indptr"], dtype=np.int64)
            num_nodes, num_edges = meta.get("num_nodes"), meta.get("num_edges")
            # the annotation checked against the variables it describes (a checkpoint's
            # manifest edited by hand: num_nodes 23 -> 40 opened, then a bare IndexError)
            held = (store.nrows(f"{name}/nbr"), store.nrows(f"{name}/edges"))
            if not (is_int(num_nodes) and is_int(num_edges)) or indptr.shape != (
                    num_nodes + 1,) or int(indptr[-1]) != held[0] or num_edges != held[1]:
                end = int(indptr[-1]) if indptr.size else None
                raise DDStoreValueError(
                    f"TemporalGraph.open({name!r}): its annotation says num_nodes="
                    f"{num_nodes!r}, num_edges={num_edges!r} with an indptr of "
                    f"{indptr.shape[0]} entries ending at {end}; its variables hold "
                    f"{held[0]} neighbour entries and {held[1]} edges (a damaged "
                    f"checkpoint?)")
            starts = store.chunk_offsets(f"{name}/nbr")
            node_off = np.empty(starts.shape[0], np.int64)
            node_off[0], node_off[-1] = 0, num_nodes
            # each member's first node: its chunk starts at that node's list (a cut)
            node_off[1:-1] = np.searchsorted(indptr, starts[1:-1], side="left")
            g = cls(store, name, num_nodes, num_edges, indptr, node_off,
                    meta["add_reverse"], {k: int(v) for k, v in meta["split_counts"].items()},
                    meta["edge_feat"], meta["node_feat"], meta["edge_label"],
                    np.dtype(meta["time_dtype"]))
            g.t_dtype = np.dtype(meta["t_dtype"])
            g.num_users, g.num_items = meta["num_users"], meta["num_items"]
            g.edge_offsets = store.chunk_offsets(f"{name}/edges")
        prefault_built(store, [f"{name}/{k}" for k in _T_VARS])
        return g

    def to_pyg(self, t_dtype=None):
        """Local: the whole graph as a ``torch_geometric.data.TemporalData`` in edge-id
        order (``src``, ``dst``, ``t``, plus ``msg`` = edge features and ``y`` = edge labels
        when the graph has them; a graph of :meth:`from_jodie` always has ``msg``, float32
        ``[E, 0]`` for a file without features, as PyG's ``JODIEDataset``), read on this
        rank alone (one-sided reads from every owner; it needs the whole edge table's memory
        here).  ``t`` in ``t_dtype`` (numpy or torch dtype; default :attr:`t_dtype`, so
        int64 times come back exactly); an integer dtype requires whole-number times within
        its range; a float dtype rounds to what it holds (int64 times beyond 2**53 in
        float64), and refuses a time beyond its range (70000 in float16).  The split is
        not part of TemporalData: :attr:`split`."""
        import torch
        from torch_geometric.data import TemporalData
        dtype = self.t_dtype if t_dtype is None else as_dtype(
            t_dtype, f"to_pyg of graph {self.name!r}: t_dtype", "iuf",
            "an integer or float dtype of 1-8 bytes (numpy or torch), or None",
            (1, 2, 4, 8))
        st, e = self.store, self.num_edges
        sd = st.get_range(self._h["edges"], 0, e)
        t = st.get_range(self._h["edge_t"], 0, e)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            if t.dtype.kind == "f":  # (float(info.max) + 1: 2**bits, exactly)
                bad = (t != np.floor(t)) | (t < info.min) | (t >= float(info.max) + 1)
            else:  # int64 times: the target's range, within int64
                i64 = np.iinfo(np.int64)
                bad = (t < max(info.min, i64.min)) | (t > min(info.max, i64.max))
            if bad.any():
                i = int(np.argmax(bad))
                raise DDStoreValueError(f"to_pyg of graph {self.name!r}: edge {i} has time "
                                        f"{t[i].item()!r}, not a whole number in "
                                        f"[{info.min}, {info.max}] for t_dtype={dtype}; "
                                        f"pass t_dtype=torch.{self.time_dtype}")
        else:  # a time beyond a narrower float's range (float16's 65504) is refused
            t = cast_in_range(t, dtype, f"to_pyg of graph {self.name!r}: edge times",
                              "the t_dtype's")
        kw = dict(src=torch.from_numpy(sd[:, 0].astype(np.int64)),
                  dst=torch.from_numpy(sd[:, 1].astype(np.int64)),
                  t=torch.from_numpy(t.astype(dtype, copy=False)))
        if self._has_edge_feat:
            kw["msg"] = torch.from_numpy(st.get_range(self._h["edge_feat"], 0, e))
        elif self.num_users is not None:  # a JODIE file without features: PyG's
            kw["msg"] = torch.zeros((e, 0), dtype=torch.float32)  # JODIEDataset's [E, 0]
        if self.has_edge_label:
            kw["y"] = torch.from_numpy(st.get_range(self._h["edge_label"], 0, e))
        return TemporalData(**kw)

    def remove(self):
        """Collective: remove every variable of the graph from the store (every rank
        removes the same graph: checked in the call's one step before anything is
        removed).  Inside an enclosing transaction they are set aside until it commits;
        if it rolls back, the graph is whole again, this object included."""
        with self.store.transaction(f"TemporalGraph.remove {self.name!r}") as txn:
            names = self._variables()
            with self.store.collective("TemporalGraph.remove", self.name) as step:
                gone = [v for v, h in zip(names, self._h.values()) if h not in self.store]
                if gone:
                    raise DDStoreStateError(f"TemporalGraph {self.name!r}: cannot remove: "
                                            f"{gone} no longer in the store (removed "
                                            f"already?)")
                step.agree()
            txn.set_aside(names, on_rollback=self._put_back)
            self.removed = True

    def _put_back(self):
        self.removed = False  # (a rollback: the variables are back)

    def _rolled_back(self):
        self.removed = True  # (a rollback of the transaction that built it)

    def _keys(self):
        keys = list(_T_VARS) + ["edges", "edge_t", "edge_split"]
        for key, has in (("edge_feat", self._has_edge_feat),
                         ("node_feat", self._has_node_feat),
                         ("edge_label", self.has_edge_label)):
            if has:
                keys.append(key)
        return keys

    def _variables(self):
        return [f"{self.name}/{k}" for k in self._keys()]

    # ------------------------------------------------------------------ reads
    def _nodes(self, nids, what):
        idx = as_indices(nids, f"{what} of graph {self.name!r}", self.num_nodes, "node")
        check_indices(idx, self.num_nodes, f"{what} of graph {self.name!r}", item="node")
        return idx

    def _edges(self, eids, what):
        idx = as_indices(eids, f"{what} of graph {self.name!r}", self.num_edges, "edge id")
        check_indices(idx, self.num_edges, f"{what} of graph {self.name!r}", item="edge id")
        return idx

    def degree(self, nids=None):
        """Number of T-CSR entries of each node (all nodes when ``nids`` is None); refused,
        as every read is, once the graph was removed or the store freed (its ``indptr``
        is this process's copy, which would go on answering)."""
        if self.removed:  # (as sample refuses it; inside a transaction, set aside)
            raise DDStoreStateError(f"degree: graph {self.name!r} was removed from the "
                                    f"store (TemporalGraph.remove); build a new graph")
        if self.store.freed or self._h["nbr"] not in self.store:  # (in a forked worker:
            self.store.chunk_offsets(self._h["nbr"])  # the rank's too) raises, saying why
        if nids is None:
            return np.diff(self.indptr)
        idx = self._nodes(nids, "degree")
        return self.indptr[idx + 1] - self.indptr[idx]

    def neighbors(self, v):
        """Local: node ``v``'s list ``(nbr, ts, eid)`` in T-CSR order (time, then edge id);
        ids int64, ``ts`` of :attr:`time_dtype`."""
        if type(v) is not int:
            v = integer_scalar(v)
            if not is_int(v):
                raise DDStoreValueError(f"neighbors of graph {self.name!r}: node must be "
                                        f"an integer, got {v!r}")
            v = int(v)
        if not 0 <= v < self.num_nodes:
            self._nodes([v], "neighbors")  # raises, naming the range
        a, b = int(self.indptr[v]), int(self.indptr[v + 1])
        nbr, ts, eid = (self.store.get_range(self._h[k], a, b - a) for k in _T_VARS)
        return nbr.astype(np.int64, copy=False), ts, eid.astype(np.int64, copy=False)

    def neighbor_lists(self, nids):
        """Local: the lists of nodes ``nids`` at once, as a CSR ``(ptr, nbr, ts, eid)``:
        node ``nids[i]``'s list is ``nbr[ptr[i]:ptr[i + 1]]`` (``ts``, ``eid`` alike), in
        T-CSR order, as :meth:`neighbors` gives it; one read of the three arrays
        (:meth:`DDStore.get_many` of their ranges) where a loop of :meth:`neighbors`
        reads three times a node."""
        idx = self._nodes(nids, "neighbor_lists")
        starts = self.indptr[idx]
        counts = self.indptr[idx + 1] - starts
        ptr = np.zeros(idx.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        # the three arrays in one read (between nodes: one round trip per owner)
        nbr, ts, eid = self.store.get_many([(self._h[k], starts, counts, None)
                                            for k in _T_VARS])
        return ptr, nbr.astype(np.int64, copy=False), ts, eid.astype(np.int64, copy=False)

    def edges(self, eids):
        """Local: ``(src, dst, t)`` of edges ``eids``, in request order (ids int64, ``t``
        of :attr:`time_dtype`)."""
        idx = self._edges(eids, "edges")
        sd = self.store.get_batch(self._h["edges"], idx)
        return (sd[:, 0].astype(np.int64), sd[:, 1].astype(np.int64),
                self.store.get_batch(self._h["edge_t"], idx))

    def edge_split(self, eids):
        """Local: split (0 train, 1 val, 2 test) of edges ``eids``."""
        return self.store.get_batch(self._h["edge_split"], self._edges(eids, "edge_split"))

    def edge_times(self, eids=None):
        """Local: times of edges ``eids`` (every edge, in edge-id order, when None), of
        :attr:`time_dtype`."""
        if eids is None:
            return self.store.get_range(self._h["edge_t"], 0, self.num_edges)
        return self.store.get_batch(self._h["edge_t"], self._edges(eids, "edge_times"))

    @property
    def split(self):
        """Split of every edge (int8 array, one byte per edge, read on first use)."""
        if self._split is None:
            self._split = self.store.get_range(self._h["edge_split"], 0, self.num_edges)
        return self._split

    def edge_features(self, eids):
        """Local: edge-feature rows of ``eids``, in request order."""
        if not self._has_edge_feat:
            raise DDStoreValueError(f"graph {self.name!r} has no edge features")
        return self.store.get_batch(self._h["edge_feat"], self._edges(eids, "edge_features"))

    def edge_labels(self, eids):
        """Local: edge-label rows of ``eids`` (JODIE's ``state_label``, PyG's ``y``), in
        request order."""
        if not self.has_edge_label:
            raise DDStoreValueError(f"graph {self.name!r} has no edge labels")
        return self.store.get_batch(self._h["edge_label"], self._edges(eids, "edge_labels"))

    def node_features(self, nids):
        """Local: node-feature rows of ``nids``, in request order."""
        if not self._has_node_feat:
            raise DDStoreValueError(f"graph {self.name!r} has no node features")
        return self.store.get_batch(self._h["node_feat"], self._nodes(nids, "node_features"))

    def tcsr_bytes(self):
        """Bytes of this rank's T-CSR chunk (nbr + ts + eid) plus the replicated indptr."""
        lo, hi = self.node_offsets[self.store.group_rank:self.store.group_rank + 2]
        entry = sum(self.store.dtype(self._h[k]).itemsize for k in _T_VARS)
        return int(entry * (self.indptr[hi] - self.indptr[lo]) + self.indptr.nbytes)

    def tcsr_handle(self, fetch_whole_max=0, range_factor=0):
        """Local: a new C handle over this graph's T-CSR (``ddstore._core.TCSR``: the
        stored ``nbr`` / ``ts`` / ``eid`` with the replicated ``indptr`` and member
        ranges), what :class:`~ddstore.temporal.TemporalSampler` samples through;
        ``fetch_whole_max`` / ``range_factor`` are its remote-read settings (checked by
        the caller).  Valid while the graph's variables are stored."""
        from .._core import TCSR
        core, ids = self.store.core_ids(*(self._h[k] for k in _T_VARS))
        return TCSR(core, *ids, self.indptr, self.node_offsets, fetch_whole_max,
                    range_factor, self.time_dtype)

    def __repr__(self):
        return (f"TemporalGraph({self.name!r}, num_nodes={self.num_nodes}, "
                f"num_edges={self.num_edges}, add_reverse={self.add_reverse}, "
                f"split={self.split_counts})")
