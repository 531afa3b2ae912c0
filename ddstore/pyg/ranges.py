"""The range-wise path: a node-classification graph too big for one rank, put into a
:class:`FeatureStore` and a :class:`GraphStore` with every rank reading (or generating)
only its own ranges.  No rank holds the whole graph, its features or its labels at any
point: rank ``r`` of ``P`` reads edges ``partition(E, P, r)`` and nodes
``partition(N, P, r)``, and :meth:`GraphStore.put_edge_range` /
:meth:`FeatureStore.put_range` send each row to the group members that hold it.

- :func:`put_node_data` ``(store, data)``: any range-wise reader with the methods of
  :class:`~ddstore.sources.OGBNodeData` (``edges``, ``features``, ``labels``,
  ``split_size``, ``split``);
- :func:`load_ogb` ``(store, root)``: an OGB node-property dataset in its raw layout
  (``raw/edge.csv.gz``, ``node-feat.csv.gz``, ``node-label.csv.gz``,
  ``split/<name>/{train,valid,test}.csv.gz``);
- :func:`load_npy` ``(store, directory)``: ``.npy`` arrays (``edge_index.npy``, ``x.npy``,
  ``y.npy``, ``{train,valid,test}_idx.npy``);
- :func:`load_synthetic` ``(store, scale=1.0)``: the ogbn-products-shaped
  :class:`~ddstore.sources.SyntheticNodeGraph` (2.45 M nodes, 61.9 M undirected edges,
  100 features, 47 classes at ``scale=1``), each rank generating its ranges.

All are collective (every rank calls them, in the same order, with the same name and
data set); a read that fails on one rank (a missing file, a malformed line of its range)
raises the same error on every rank.  They return a :class:`NodeData`.

What is stored, under ``name`` (default ``"pyg"``): node attributes ``x`` (float32
``[N, D]``) and ``y`` (int64 ``[N]``, -1 for no label) of the homogeneous node type
(``group_name=None``), and the edge index of edge type ``None`` as CSC.  With
``add_reverse`` (the default for OGB and the synthetic graph, whose files hold one
direction per undirected pair) the reverse of every edge is added, edge ``2 i`` being
edge ``i`` of the file and ``2 i + 1`` its reverse (OGB's own ``add_inverse_edge``
order), so edge ids do not depend on the number of ranks.
"""
import collections

import numpy as np

from .. import partition
from .._checks import is_int
from ..errors import DDStoreValueError
from ..memory import release_free_heap
from ..sources.base import check_same_files, first_outside
from ..sources.node_data import MAX_LABEL, first_marked, id_bitmap
from ..build import check_chunk_edges
from ._common import annotation_name, find_annotation
from .feature_store import FeatureStore
from .graph_store import GraphStore

__all__ = ["NodeData", "put_node_data", "load_ogb", "load_npy", "load_synthetic"]

SPLITS = ("train", "valid", "test")
_KIND = "pyg.NodeData"  # the annotation of put_node_data's counts (NodeData.open)


class NodeData(collections.namedtuple(
        "NodeData", "feature_store graph_store num_nodes num_edges num_features "
                    "num_classes splits split_sizes")):
    """What the loaders return: the two stores; the counts (``num_edges``: directed edges
    stored, reverse edges included); ``num_classes`` (largest label + 1); ``splits``:
    this rank's share of each split's node ids (``partition(k, P, rank)`` of split file
    order; ``{}`` without splits) and ``split_sizes`` their global sizes.

    ``feature_store, graph_store = data[:2]`` is PyG's ``data=(feature_store,
    graph_store)``."""

    @property
    def pyg(self):
        """``(feature_store, graph_store)``, PyG's remote-backend ``data``."""
        return self.feature_store, self.graph_store

    @classmethod
    def open(cls, store, name="pyg"):
        """Local: the :class:`NodeData` that :func:`put_node_data` (or
        :func:`load_ogb`, :func:`load_npy`, :func:`load_synthetic`) returned under
        ``name`` before :meth:`DDStore.save`, reopened from a store made by
        :meth:`DDStore.restore` at any rank count and width, with no source data: the
        two stores (:func:`~ddstore.pyg.open_stores`), ``num_nodes``, ``num_edges``,
        ``num_features``, ``num_classes`` and ``split_sizes``.  ``splits`` (each rank's
        share of the split files' node ids) is not in the store: it is ``{}``; read the
        shares again from the data set (``data.split(which, lo, hi)`` with ``lo, hi =
        partition(split_sizes[which], size, rank)``).  No communication."""
        from .loading import open_stores
        ann = find_annotation(store, _KIND, name, "NodeData.open")
        m = ann.meta
        fs, gs = open_stores(store, name)
        return cls(fs, gs, m["num_nodes"], m["num_edges"], m["num_features"],
                   m["num_classes"], {}, dict(m["split_sizes"]))


def put_node_data(store, data, name="pyg", add_reverse=None, progress=True,
                  chunk_edges=None, chunk_rows=None):
    """Collective: put the range-wise node data set ``data`` into a new
    :class:`FeatureStore` and :class:`GraphStore` named ``name``; returns a
    :class:`NodeData`.

    ``data``: an :class:`~ddstore.sources.OGBNodeData`,
    :class:`~ddstore.sources.NpyNodeData`, :class:`~ddstore.sources.SyntheticNodeGraph`
    or anything with their methods and ``num_nodes`` / ``num_edges``.  ``add_reverse``:
    add the reverse of every edge (default: ``data.undirected`` when it has one, else
    True).  ``progress``: rank 0 shows a tqdm bar per file read (CSV files are long to
    parse: ogbn-products' features are about 2 GB of text), over the rows it reads
    itself (each rank reads its share; the label says so).  ``chunk_edges`` /
    ``chunk_rows``: the pieces of the puts (see :class:`GraphStore` and
    :meth:`FeatureStore.put_range`; default: theirs).

    Order and memory, to keep the peak memory of each rank low:

    1. the edges: this rank's range of the file (``partition(num_edges, P, rank)``),
       held as int32 (int64 when ``num_nodes >= 2**31``), read in pieces of about one
       million edges; :meth:`GraphStore.put_edge_range` is handed a callable that makes
       any piece of the interleaved (edge, reverse) columns on demand (edge ``2 i + 1``
       is the reverse of edge ``i``), so that no array of the directed edges is ever
       made; the range is dropped once the CSC is built;
    2. the features, then the labels: :meth:`FeatureStore.put_range` reads this rank's
       rows (``partition(num_nodes, P, rank)``) piece by piece through a callable, and
       each piece goes straight to its owners' chunks; a label other than -1 (none) or
       a class id in ``[0, 2**63 - 2]`` is refused (:func:`check_labels`);
    3. this rank's share of each split; a node listed twice is refused naming the row
       of the repeat (the data set's file and line), found across the ranks' shares
       too: each rank marks its ids in a bitmap of ``num_nodes`` bits, and an exclusive
       prefix OR of the bitmaps over the ranks holds the ids of the ranks before it
       (``num_nodes / 8`` bytes per rank, freed after each split).

    Every source is read piece by piece, in increasing order: the ``.csv.gz`` files of
    :class:`~ddstore.sources.OGBNodeData`, which gzip cannot enter in the middle, are
    **streamed** (it keeps one decompression stream per file, so each is decompressed
    once up to this rank's last row, never once per piece; :meth:`close` ends them at
    the end), and a source that makes rows in blocks (``row_block`` / ``edge_block``,
    as :class:`~ddstore.sources.SyntheticNodeGraph`) is read in whole aligned blocks.
    Beyond what is stored, a rank holds its edges (4 or 8 bytes per id) while the CSC is
    built, then one piece and one block at a time.

    If any step fails on any rank, every rank raises the same error and what was already
    put is removed (:meth:`DDStore.transaction`): the store holds what it held before.
    """
    comm = store.comm
    try:
        with store.collective("pyg.put_node_data", name) as step:
            if add_reverse is None:
                add_reverse = bool(getattr(data, "undirected", True))
            has_x = bool(getattr(data, "num_features", 0))
            has_y = bool(getattr(data, "has_labels", True))
            split_name = getattr(data, "split_name", None)
            chunk_edges = check_chunk_edges(chunk_edges, name)
            if chunk_rows is not None and not (is_int(chunk_rows) and chunk_rows >= 1):
                raise DDStoreValueError(f"put_node_data {name!r}: chunk_rows="
                                        f"{chunk_rows!r} must be an integer >= 1 or None")
            marks = data.file_marks() if callable(getattr(data, "file_marks", None)) \
                else None
            # each rank reads its own ranges of the files it opened: the same files on
            # every rank (a stale copy on one node would mix two data sets)
            check_same_files(step.agree(marks, same={
                "data set": repr(data), "add_reverse": bool(add_reverse),
                "chunk_edges": chunk_edges, "chunk_rows": chunk_rows}))
        # rank 0's bars count the rows it reads itself: its share, said so
        share = "" if comm.Get_size() == 1 else f" (rank 0's share of {comm.Get_size()})"
        show = (lambda label: label + share) if (progress and comm.Get_rank() == 0) else \
            (lambda label: None)
        with store.transaction(f"pyg.put_node_data {name!r}"):
            return _put(store, data, name, add_reverse, has_x, has_y, split_name, show,
                        chunk_edges, chunk_rows)
    finally:
        close = getattr(data, "close", None)  # OGBNodeData's kept streams
        if callable(close):
            close()


PIECE_EDGES = 1 << 20  # edges per read of a range-wise source (16 MB of int64 pairs)


def read_edges(data, lo, hi, num_nodes, label):
    """This rank's edges ``[lo, hi)`` as (src, dst) int32 (int64 from 2**31 nodes), read
    in increasing pieces of ``data.edge_block`` (default ``PIECE_EDGES``; aligned to
    multiples of it).  Ids outside ``[0, num_nodes)`` raise (they could not be
    narrowed)."""
    dtype = np.int32 if num_nodes < 2 ** 31 else np.int64

    def check(s, d, a):
        bad = [i for i in (first_outside(s, num_nodes), first_outside(d, num_nodes))
               if i is not None]
        if bad:
            i = min(bad)
            raise DDStoreValueError(f"edge {a + i} ({int(s[i])}, {int(d[i])}) names a node "
                                    f"outside [0, {num_nodes})")

    piece = int(getattr(data, "edge_block", 0) or 0) or PIECE_EDGES
    src, dst = np.empty(hi - lo, dtype=dtype), np.empty(hi - lo, dtype=dtype)
    bar = _bar(label, hi - lo)
    a = lo
    while a < hi:
        b = min((a // piece + 1) * piece, hi)
        s, d = data.edges(a, b)
        check(s, d, a)
        src[a - lo:b - lo], dst[a - lo:b - lo] = s, d
        bar(b - a)
        a = b
    return src, dst


def _bar(label, total):
    """``advance(n)`` of a tqdm bar over ``total`` rows read piece by piece (rank 0 with
    ``progress``; closed when full), or of nothing."""
    if not label or total <= 0:
        return lambda n: None
    from tqdm import tqdm
    bar = tqdm(total=total, desc=str(label), unit=" rows", unit_scale=True,
               mininterval=1.0)

    def advance(n):
        bar.update(n)
        if bar.n >= total:
            bar.close()
    return advance


def edge_columns(src, dst, add_reverse):
    """``edges(a, b)``: columns ``[a, b)`` of the edges, with ``add_reverse`` their
    reverses interleaved (column ``2 i`` = edge ``i``, column ``2 i + 1`` = its
    reverse)."""
    if not add_reverse:
        return lambda a, b: np.stack([src[a:b], dst[a:b]])

    def edges(a, b):
        i, j = a // 2, (b + 1) // 2
        out = np.empty((2, 2 * (j - i)), dtype=src.dtype)
        out[0, 0::2], out[1, 0::2] = src[i:j], dst[i:j]
        out[0, 1::2], out[1, 1::2] = dst[i:j], src[i:j]
        return out[:, a - 2 * i:b - 2 * i]
    return edges


def _rows_of(data, what, lo, hi, label):
    """``rows_of(a, b)``: rows ``[lo + a, lo + b)`` of ``data.<what>``, read piece by
    piece (as :meth:`FeatureStore.put_range` asks them: in increasing order); from a
    source that makes rows in blocks (``data.row_block``), in whole aligned blocks, the
    last one kept for the next pieces."""
    source, bar = getattr(data, what), _bar(label, hi - lo)

    def read(a, b):
        out = source(a, b)
        bar(b - a)
        return out
    block = int(getattr(data, "row_block", 0) or 0)
    if block < 1:
        return lambda a, b: read(lo + a, lo + b)
    last = [0, 0, None]  # global rows [first, end) read last (end: a block's end), rows

    def rows_of(a, b):
        a, b = lo + a, lo + b
        first, end, rows = last
        if b <= a or (first <= a and b <= end):
            return read(a, b) if b <= a else rows[a - first:b - first]
        # read on to the end of the block holding row b - 1, each block only once: the
        # piece's rows already read are kept (a copy of at most the piece), the old
        # block dropped before the read
        head = rows[a - first:].copy() if first <= a < end else None
        start = end if head is not None else a
        end = min(hi, -(-b // block) * block)
        last[:] = 0, 0, None
        rows = read(start, end)
        last[:] = start, end, rows
        return rows[:b - start] if head is None else \
            np.concatenate([head, rows[:b - start]])
    return rows_of


def _put(store, data, name, add_reverse, has_x, has_y, split_name, show, chunk_edges,
         chunk_rows):
    comm = store.comm
    rank, size = comm.Get_rank(), comm.Get_size()
    n, e = int(data.num_nodes), int(data.num_edges)
    fs = FeatureStore(store, name, chunk_rows=chunk_rows)
    gs = GraphStore(store, name, chunk_edges=chunk_edges)

    # edges: this rank's range of the file, narrowed; put_edge_range's columns [lo, hi)
    # are made from it piece by piece, reverses interleaved (edge 2i+1 = reverse of i)
    elo, ehi = partition(e, size, rank)
    with store.collective(None):  # this rank's range of the file (may fail here only)
        src, dst = read_edges(data, elo, ehi, n, show("edges"))
    edges = edge_columns(src, dst, add_reverse)
    del src, dst
    gs.put_edge_range(edges, rows=(2 * elo, 2 * ehi) if add_reverse else (elo, ehi),
                      edge_type=None, size=(n, n))
    del edges  # the last reference to this rank's edges

    lo, hi = partition(n, size, rank)
    num_features = 0
    if has_x:
        x = _rows_of(data, "features", lo, hi, show("features"))
        fs.put_range(x, rows=(lo, hi), group_name=None, attr_name="x")
        del x
        num_features = int(fs.get_tensor_size(group_name=None, attr_name="x")[1])
    num_classes = 0
    if has_y:
        y = _rows_of(data, "labels", lo, hi, show("labels"))
        top = [-1]

        def labels(a, b):
            out = y(a, b)
            if len(out):
                check_labels(out, lo + a, name)
                top[0] = max(top[0], int(np.max(out)))
            return out
        fs.put_range(labels, rows=(lo, hi), group_name=None, attr_name="y")
        del y
        num_classes = int(comm.allreduce(top[0] + 1, op=_max_op()))
    splits, sizes = {}, {}
    if split_name is not None:
        from mpi4py import MPI
        has = getattr(data, "has_split", None)  # (a source without it: every split)
        for which in [w for w in SPLITS if has is None or has(w)]:  # (alike everywhere:
            # the files are agreed)
            with store.collective(None) as step:  # its size, and this rank's share
                k = int(data.split_size(which))
                a, b = partition(k, size, rank)
                ids = data.split(which, a, b)
                bits = id_bitmap(n)  # this rank's ids, a node listed twice refused
                _check_repeats(data, which, ids, a, bits, n, mark=True)
                step.agree(same={f"{which} split size": k})
            # the ids of the ranks before this one (an exclusive prefix OR), against
            # which this rank's are checked: a node listed on two ranks' rows
            comm.Exscan(MPI.IN_PLACE, bits, op=MPI.BOR)
            with store.collective(None):
                if rank > 0:
                    _check_repeats(data, which, ids, a, bits, n, mark=False)
            del bits
            splits[which], sizes[which] = ids, k
    release_free_heap()  # the pieces freed above, back to the kernel
    # (joins the caller's; a rank failing in the step: agreed, rolled back, the journal
    # taking the annotation back)
    with store.transaction(f"pyg.put_node_data {name!r}"), store.collective(None):
        store.annotate(annotation_name(_KIND, name), _KIND, {
            "num_nodes": n, "num_edges": 2 * e if add_reverse else e,
            "num_features": num_features, "num_classes": num_classes,
            "split_sizes": {k: int(v) for k, v in sizes.items()}})
    return NodeData(fs, gs, n, 2 * e if add_reverse else e, num_features, num_classes,
                    splits, sizes)


def check_labels(y, row, name):
    """Integer labels ``y`` (rows ``row, row + 1, ...`` of the data set) are -1 (none) or
    class ids in ``[0, MAX_LABEL]``, or a :class:`DDStoreValueError` names the first that
    is not (the readers of ``ddstore.sources`` name its file and line first; this is the
    check of any other source)."""
    if y.dtype.kind not in "iu":
        return
    low, high = int(np.min(y)), int(np.max(y))
    if low < -1 or high > MAX_LABEL:
        i = int(np.argmax((y < -1) | (y > MAX_LABEL)))
        raise DDStoreValueError(f"put_node_data {name!r}: node {row + i} has label "
                                f"{int(y[i])}: allowed -1 (no label) or 0 <= label <= "
                                f"2**63 - 2 (num_classes, the largest label + 1, must be "
                                f"an int64)")


def _check_repeats(data, which, ids, a, bits, n, mark):
    """Local: with ``mark``, set the bits of this rank's ``ids`` (rows ``a, a + 1, ...`` of
    split ``which``) in ``bits`` and refuse an id listed twice among them; without, refuse
    an id whose bit is set (listed by an earlier rank).  The error names the row as
    the data set does (``data.repeated_error``: file and line), else by its number."""
    j = first_marked(bits, ids, n, mark=mark)
    if j is None:
        return
    first = a + int(np.flatnonzero(ids[:j] == ids[j])[0]) if mark else None
    repeated = getattr(data, "repeated_error", None)
    if callable(repeated):
        raise repeated(which, a + j, int(ids[j]), first)
    raise DDStoreValueError(f"split {which!r}, row {a + j}: node id {int(ids[j])} is listed "
                            f"again (also at "
                            f"{'an earlier row' if first is None else f'row {first}'}); a "
                            f"split lists each node at most once")


def _max_op():
    from mpi4py import MPI
    return MPI.MAX


def load_ogb(store, root, name="pyg", split=None, add_reverse=True, progress=True):
    """Collective: :func:`put_node_data` of the OGB node-property dataset in ``root``
    (its own directory, holding ``raw/`` and ``split/``; see
    :class:`~ddstore.sources.OGBNodeData`).  ``add_reverse=True`` (default) stores both
    directions of every edge, as OGB does for ogbn-products (for ogbn-arxiv, whose
    citations are directed, it makes the graph undirected as PyG's GraphSAGE examples
    do; pass False to keep the file's directions).

    Every rank decompresses each ``.csv.gz`` from its start up to the end of its own rows
    (gzip has no random access) and parses only its rows."""
    from ..sources.ogb import OGBNodeData
    with store.collective("pyg.load_ogb", name) as step:
        data = OGBNodeData(root, split=split)
        # the files first (put_node_data agrees them after the data set's repr), so
        # that other files are named, each rank's path and size
        check_same_files(step.agree(data.file_marks()))
    return put_node_data(store, data, name=name, add_reverse=add_reverse,
                         progress=progress)


def load_npy(store, directory=None, name="pyg", add_reverse=False, progress=True,
             **paths):
    """Collective: :func:`put_node_data` of a node data set in ``.npy`` files: those of
    ``directory`` by their usual names (``edge_index.npy``, ``x.npy``, ``y.npy``,
    ``train_idx.npy``, ``valid_idx.npy``, ``test_idx.npy``), or the paths given as
    ``edge_index=``, ``x=``, ``y=``, ``train=``, ``valid=``, ``test=`` (see
    :class:`~ddstore.sources.NpyNodeData`).  Each rank reads only its ranges' bytes.
    ``add_reverse`` (False by default: ``edge_index`` as PyG keeps it holds every
    direction)."""
    from ..sources.npy_nodes import NpyNodeData
    with store.collective("pyg.load_npy", name) as step:
        data = NpyNodeData.from_dir(directory, **paths) if directory is not None else \
            NpyNodeData(**paths)
        check_same_files(step.agree(data.file_marks()))  # as in load_ogb
    return put_node_data(store, data, name=name, add_reverse=add_reverse,
                         progress=progress)


def load_synthetic(store, scale=1.0, seed=0, name="pyg", progress=False, **options):
    """Collective: :func:`put_node_data` of the ogbn-products-shaped
    :class:`~ddstore.sources.SyntheticNodeGraph` (``scale``, ``seed`` and its other
    ``options``); each rank generates only its ranges, and the graph is the same for any
    number of ranks."""
    from ..sources.synthetic_nodes import SyntheticNodeGraph
    with store.collective("pyg.load_synthetic", name):
        data = SyntheticNodeGraph(scale=scale, seed=seed, **options)
    return put_node_data(store, data, name=name, add_reverse=True, progress=progress)
