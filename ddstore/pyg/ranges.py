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
from ..errors import DDStoreError, DDStoreValueError
from .feature_store import FeatureStore
from .graph_store import GraphStore

__all__ = ["NodeData", "put_node_data", "load_ogb", "load_npy", "load_synthetic"]

SPLITS = ("train", "valid", "test")


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


def _local(store, what, fn, *args, call=None, **kwargs):
    """``fn(*args)`` on this rank, agreed: an error on any rank raises on every rank
    (``call``: the collective call this is the first step of, see :meth:`DDStore.agree`)."""
    out, error = None, None
    try:
        out = fn(*args, **kwargs)
    except DDStoreError as exc:
        error = exc
    except (OSError, ValueError, MemoryError) as exc:
        error = DDStoreValueError(f"{what}: {type(exc).__name__}: {exc}")
    store.agree(error, call=call)
    return out


def put_node_data(store, data, name="pyg", add_reverse=None, progress=True):
    """Collective: put the range-wise node data set ``data`` into a new
    :class:`FeatureStore` and :class:`GraphStore` named ``name``; returns a
    :class:`NodeData`.

    ``data``: an :class:`~ddstore.sources.OGBNodeData`,
    :class:`~ddstore.sources.NpyNodeData`, :class:`~ddstore.sources.SyntheticNodeGraph`
    or anything with their methods and ``num_nodes`` / ``num_edges``.  ``add_reverse``:
    add the reverse of every edge (default: ``data.undirected`` when it has one, else
    True).  ``progress``: rank 0 shows a tqdm bar per file read (CSV files are long to
    parse: ogbn-products' features are about 2 GB of text).

    Order, to keep the peak memory of each rank low: the edges first (this rank's range,
    with reverses, handed to :meth:`GraphStore.put_edge_range` and dropped), then the
    features, then the labels, then this rank's share of each split.  If any step fails
    on any rank, every rank raises the same error and what was already put is removed:
    the store holds what it held before.
    """
    comm = store.comm
    if add_reverse is None:
        add_reverse = bool(getattr(data, "undirected", True))
    has_x = bool(getattr(data, "num_features", 0))
    has_y = bool(getattr(data, "has_labels", True))
    split_name = getattr(data, "split_name", None)
    store.agree(None, call=("pyg.put_node_data", name),
                same={"data set": repr(data), "add_reverse": bool(add_reverse)})
    show = (lambda label: label) if (progress and comm.Get_rank() == 0) else \
        (lambda label: None)
    before = set(store.variables())
    try:
        return _put(store, data, name, add_reverse, has_x, has_y, split_name, show)
    except DDStoreError:
        # every rank is here (the failure was agreed): drop what was put, collectively
        for var in sorted(set(store.variables()) - before):
            store.remove(var)
        raise


def _put(store, data, name, add_reverse, has_x, has_y, split_name, show):
    comm = store.comm
    rank, size = comm.Get_rank(), comm.Get_size()
    n, e = int(data.num_nodes), int(data.num_edges)
    fs, gs = FeatureStore(store, name), GraphStore(store, name)

    # edges: this rank's range of the file, reverses interleaved (edge 2i+1 = reverse of
    # edge i), as put_edge_range's columns [lo, hi)
    elo, ehi = partition(e, size, rank)
    src, dst = _local(store, "edges", data.edges, elo, ehi, progress=show("edges"))
    if add_reverse:
        ei = np.empty((2, 2 * (ehi - elo)), dtype=np.int64)
        ei[0, 0::2], ei[1, 0::2], ei[0, 1::2], ei[1, 1::2] = src, dst, dst, src
        rows = (2 * elo, 2 * ehi)
    else:
        ei = np.stack([src, dst])
        rows = (elo, ehi)
    del src, dst
    gs.put_edge_range(ei, rows=rows, edge_type=None, size=(n, n))
    del ei

    lo, hi = partition(n, size, rank)
    num_features = 0
    if has_x:
        x = _local(store, "features", data.features, lo, hi, progress=show("features"))
        num_features = int(x.shape[1])
        fs.put_range(x, rows=(lo, hi), group_name=None, attr_name="x")
        del x
    num_classes = 0
    if has_y:
        y = _local(store, "labels", data.labels, lo, hi, progress=show("labels"))
        num_classes = int(comm.allreduce(int(y.max()) + 1 if len(y) else 0,
                                         op=_max_op()))
        fs.put_range(y, rows=(lo, hi), group_name=None, attr_name="y")
        del y
    splits, sizes = {}, {}
    if split_name is not None:
        for which in SPLITS:
            k = _local(store, f"split {which}", data.split_size, which)
            a, b = partition(int(k), size, rank)
            splits[which] = _local(store, f"split {which}", data.split, which, a, b)
            sizes[which] = int(k)
    return NodeData(fs, gs, n, 2 * e if add_reverse else e, num_features, num_classes,
                    splits, sizes)


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
    data = _local(store, "load_ogb", OGBNodeData, root, split=split,
                  call=("pyg.load_ogb", name))
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
    if directory is not None:
        data = _local(store, "load_npy", NpyNodeData.from_dir, directory,
                      call=("pyg.load_npy", name), **paths)
    else:
        data = _local(store, "load_npy", NpyNodeData, call=("pyg.load_npy", name),
                      **paths)
    return put_node_data(store, data, name=name, add_reverse=add_reverse,
                         progress=progress)


def load_synthetic(store, scale=1.0, seed=0, name="pyg", progress=False, **options):
    """Collective: :func:`put_node_data` of the ogbn-products-shaped
    :class:`~ddstore.sources.SyntheticNodeGraph` (``scale``, ``seed`` and its other
    ``options``); each rank generates only its ranges, and the graph is the same for any
    number of ranks."""
    from ..sources.synthetic_nodes import SyntheticNodeGraph
    data = _local(store, "load_synthetic", SyntheticNodeGraph, scale=scale, seed=seed,
                  call=("pyg.load_synthetic", name), **options)
    return put_node_data(store, data, name=name, add_reverse=True, progress=progress)
