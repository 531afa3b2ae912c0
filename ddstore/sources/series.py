"""The lazy series every series reader returns: :class:`Series`, a series of graph
signals ``[T, nodes, features]`` on one static graph, and :func:`from_arrays`, the reader
of in-memory arrays.

A Series never has to hold the whole series in memory: :meth:`Series.read` returns any
block of consecutive time steps, so :class:`~ddstore.spatiotemporal.WindowDataset` copies
a series into the store block by block (and, in partitioned mode, each rank reads only
its own block).  In-memory arrays are read as views; the file readers (``.npy`` in
:mod:`.npy`, PeMS HDF5 in :mod:`.hdf5`, PGT JSON in :mod:`.pgt`) build a Series over a
block reader of their own.

Also here, the checks every series reader shares: the graph (``edge_index`` int64
``[2, E]``, finite float32 ``edge_weight``, :func:`check_finite_weights`) and the
timestamps (``datetime64[ns]``), and the graph builders :func:`adjacency_to_edges` (dense
adjacency) and :func:`gaussian_kernel_adjacency` (DCRNN's road distances).

Arrays (:func:`from_arrays`): numpy arrays or torch tensors ``[T, nodes]`` or
``[T, nodes, features]``, in any memory layout.  Only numpy is imported here; torch is
looked at only when an array is converted.
"""
import json
import os

import numpy as np

from .._checks import tensor_values
from ..errors import DDStoreValueError
from .base import int_bounds

__all__ = ["Series", "from_arrays", "adjacency_to_edges", "gaussian_kernel_adjacency",
           "check_finite_weights", "check_series_array", "check_edges", "check_timestamps"]


def _as_array(data, what):
    """numpy view (no copy where possible) of an array-like or a torch tensor."""
    data = tensor_values(data, what)
    if isinstance(data, np.ndarray):
        return data
    try:
        return np.asarray(data)
    except (TypeError, ValueError) as exc:
        raise DDStoreValueError(f"{what} cannot be converted to an array: {exc}") from None


def check_series_array(arr, what="series"):
    """``arr`` (2-D ``[T, nodes]`` or 3-D ``[T, nodes, features]``, numeric) as a 3-D
    view, or raise :class:`DDStoreValueError` naming ``what`` and what it must be."""
    if arr.ndim not in (2, 3):
        raise DDStoreValueError(
            f"{what} must be 2-D [T, nodes] or 3-D [T, nodes, features], got {arr.ndim}-D "
            f"shape {tuple(arr.shape)}")
    if arr.dtype.kind not in "biuf":
        raise DDStoreValueError(
            f"{what} has dtype {arr.dtype}; allowed: bool, integer or floating point")
    if arr.ndim == 2:
        arr = arr[:, :, None]  # a view: [T, nodes, 1]
    if 0 in arr.shape[1:]:
        raise DDStoreValueError(f"{what} has shape {tuple(arr.shape)}: nodes and features "
                                f"must be >= 1")
    return arr


def check_edges(edge_index, edge_weight, num_nodes, what):
    """The graph of a series checked, or its default: ``(edge_index, edge_weight)`` as
    int64 ``[2, E]`` (``[E, 2]`` is transposed; ids in ``[0, num_nodes)``) and finite
    float32 ``[E]`` (ones when None); a :class:`DDStoreValueError` naming ``what``
    otherwise."""
    if edge_index is None:
        ei = np.zeros((2, 0), dtype=np.int64)
    else:
        ei = _as_array(edge_index, f"{what}: edge_index")
        if ei.ndim != 2 or 2 not in ei.shape:
            raise DDStoreValueError(f"{what}: edge_index must have shape [2, E] (or [E, 2]),"
                                    f" got {tuple(ei.shape)}")
        if ei.shape[0] != 2:
            ei = ei.T
        if ei.dtype.kind not in "iu":
            raise DDStoreValueError(f"{what}: edge_index must be integers, got {ei.dtype}")
        ei = np.ascontiguousarray(ei, dtype=np.int64)
        if ei.size and (ei.min() < 0 or ei.max() >= num_nodes):
            bad = int(ei.min()) if ei.min() < 0 else int(ei.max())
            raise DDStoreValueError(f"{what}: edge_index holds node {bad}, out of range "
                                    f"[0, {num_nodes})")
    if edge_weight is None:
        ew = np.ones(ei.shape[1], dtype=np.float32)
    else:
        given = _as_array(edge_weight, f"{what}: edge_weight")
        if given.dtype.kind not in "biuf":
            raise DDStoreValueError(f"{what}: edge_weight has dtype {given.dtype}; "
                                    f"allowed: bool, integer or floating point numbers")
        given = given.reshape(-1)
        with np.errstate(over="ignore"):  # beyond float32: inf, refused below
            ew = np.ascontiguousarray(given, dtype=np.float32)
        if ew.shape[0] != ei.shape[1]:
            raise DDStoreValueError(f"{what}: edge_weight has {ew.shape[0]} entries, "
                                    f"edge_index has {ei.shape[1]} edges")
        check_finite_weights(ew, ei, f"{what}: edge_weight", given)
    return ei, ew


def check_finite_weights(weights, edge_index, what, given=None):
    """Raise :class:`DDStoreValueError` if ``weights`` (``[E]``, as they will be stored)
    holds a NaN or inf, naming the first such edge (its index, source and target) and how
    many there are; ``given``: the weights before they were converted to the stored
    dtype, so that a finite value beyond its range is named as given, with the range.
    The one check of edge weights: static graphs (:class:`Series`) and
    :class:`~ddstore.dynamic.DynamicGraph` steps both use it."""
    bad = ~np.isfinite(weights)
    if bad.any():
        i = int(np.argmax(bad))
        edge = f"{what}: edge {i} ({int(edge_index[0, i])} -> {int(edge_index[1, i])})"
        if given is not None and np.isfinite(given[i]):
            top = float(np.finfo(weights.dtype).max)
            raise DDStoreValueError(f"{edge} has weight {float(given[i]):.6g}, beyond "
                                    f"{weights.dtype} as weights are stored (largest "
                                    f"finite {top:.4g})")
        raise DDStoreValueError(f"{edge} has weight {weights[i]}; weights must be finite "
                                f"({int(bad.sum())} of {bad.shape[0]} edges are NaN or inf)")


_NODE_IDS = ("a 1-D numpy array of numbers, datetimes or str, or a sequence of values "
             "that JSON gives back equal (str, int, float, bool, None, numpy scalars of "
             "these, and lists of them)")


def _json_scalar(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def encode_node_ids(node_ids, what):
    """``(meta, array)``: ``node_ids`` as a checkpoint keeps them (``meta`` JSON, and an
    array or None), from which :func:`decode_node_ids` gives back equal ids: an array
    of the same dtype, or a list.  Raises :class:`DDStoreValueError` naming ``what``
    for ids that would not come back equal (they are refused when the series is made,
    not dropped when it is saved)."""
    if node_ids is None:
        return None, None
    if isinstance(node_ids, np.ndarray):
        kind = node_ids.dtype.kind if node_ids.ndim == 1 else None
        if kind is not None and kind in "biuf":
            return "array", node_ids
        if kind is not None and kind in "Mm":  # (as int64, with their unit)
            return {"array": node_ids.dtype.str}, node_ids.view(np.int64)
        if kind == "U":
            return {"list": node_ids.tolist(), "dtype": node_ids.dtype.str}, None
        raise DDStoreValueError(f"{what}: node_ids of dtype {node_ids.dtype} and shape "
                                f"{node_ids.shape} cannot be kept in a checkpoint; "
                                f"allowed: {_NODE_IDS}")
    try:
        items = list(node_ids)
        back = json.loads(json.dumps(items, default=_json_scalar))
        bad = next((i for i, (a, b) in enumerate(zip(items, back)) if a != b), None)
    except (TypeError, ValueError) as exc:
        raise DDStoreValueError(f"{what}: node_ids cannot be kept in a checkpoint "
                                f"({exc}); allowed: {_NODE_IDS}") from None
    if bad is not None:
        raise DDStoreValueError(f"{what}: node_ids[{bad}] = {items[bad]!r} would come back "
                                f"from a checkpoint as {back[bad]!r}; allowed: {_NODE_IDS}")
    return back, None


def decode_node_ids(meta, array):
    """The node ids :func:`encode_node_ids` kept as ``(meta, array)``."""
    if isinstance(meta, dict):
        if "array" in meta:
            return array.view(np.dtype(meta["array"]))
        return np.array(meta["list"], dtype=np.dtype(meta["dtype"]))
    return array if meta == "array" else meta


def check_timestamps(timestamps, num_steps, what):
    """``timestamps`` (None, or one per time step: datetime64 values, date strings or
    ``datetime`` objects) as ``datetime64[ns]`` ``[num_steps]``, or raise
    :class:`DDStoreValueError` naming ``what``: numbers are refused (they have no unit;
    they were read as nanoseconds), as are NaT (a step without a time: its time features
    would be NaN) and times that ``datetime64[ns]`` cannot hold (before 1677-09-21 or
    after 2262-04-11, or finer than a nanosecond: numpy wraps them silently)."""
    if timestamps is None:
        return None
    ts = np.asarray(timestamps)
    if ts.dtype.kind in "biufc":
        raise DDStoreValueError(f"{what}: timestamps must be datetime64 values (or date "
                                f"strings), got {ts.dtype} numbers, which have no unit: "
                                f"convert them, e.g. np.asarray(t, 'datetime64[s]') for "
                                f"seconds since 1970")
    if ts.dtype.kind != "M":
        try:  # (the unit follows the strings / objects)
            ts = ts.astype("datetime64")
        except (TypeError, ValueError) as exc:
            raise DDStoreValueError(f"{what}: timestamps must be datetime64 values: "
                                    f"{exc}") from None
    ts = ts.reshape(-1)
    if ts.shape[0] != num_steps:
        raise DDStoreValueError(f"{what}: {ts.shape[0]} timestamps for {num_steps} time "
                                f"steps")
    if np.isnat(ts).any():
        raise DDStoreValueError(f"{what}: timestamp of step "
                                f"{int(np.flatnonzero(np.isnat(ts))[0])} is NaT; every step "
                                f"needs a time")
    ns = ts.astype("datetime64[ns]")
    bad = ns.astype(ts.dtype) != ts
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DDStoreValueError(f"{what}: timestamp of step {i} ({ts[i]}) does not fit "
                                f"datetime64[ns] (1677-09-21 to 2262-04-11, to the "
                                f"nanosecond)")
    return ns

class Series:
    """A series of graph signals ``[T, nodes, features]`` on one static graph.

    Attributes: ``shape`` (always 3-D; a 2-D input gets one feature), ``dtype``,
    ``num_steps``, ``num_nodes``, ``num_features``, ``edge_index`` (int64 ``[2, E]``),
    ``edge_weight`` (float32 ``[E]``), ``timestamps`` (``datetime64[ns]`` ``[T]`` or
    None), ``node_ids`` (labels or None), ``source`` (where it came from), ``files``
    (what a file reader read it from: :func:`~ddstore.sources.base.file_share` entries,
    which the layers that store a series agree across ranks; None for arrays).

    :meth:`read` returns time steps ``[start, stop)``; the whole series is never copied.
    """

    def __init__(self, shape, dtype, reader, *, edge_index=None, edge_weight=None,
                 timestamps=None, node_ids=None, source=None, close=None):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._reader = reader
        self._close = close
        self.num_steps, self.num_nodes, self.num_features = self.shape
        if min(self.shape) < 0 or 0 in self.shape[1:]:  # (any reader's shape)
            raise DDStoreValueError(f"{source or 'series'} has shape {self.shape}: steps "
                                    f"must be >= 0, nodes and features >= 1")
        self.source = source
        self.files = None
        self.edge_index, self.edge_weight = check_edges(edge_index, edge_weight,
                                                   self.num_nodes, source or "series")
        self.timestamps = check_timestamps(timestamps, self.num_steps, source or "series")
        if node_ids is not None and (not hasattr(node_ids, "__len__") or
                                     len(node_ids) != self.num_nodes):
            got = f"{len(node_ids)} entries" if hasattr(node_ids, "__len__") else \
                type(node_ids).__name__
            raise DDStoreValueError(f"{source or 'series'}: node_ids must hold one id per "
                                    f"node ({self.num_nodes}), got {got}")
        encode_node_ids(node_ids, source or "series")  # (refused now, not at a save)
        self.node_ids = node_ids

    def read(self, start, stop):
        """Time steps ``[start, stop)`` as an array ``[stop - start, nodes, features]``.

        For an in-memory series this is a view (any memory layout); for a file it is a
        fresh array read from the file.
        """
        start, stop = int_bounds("Series.read", start, stop, self.num_steps)
        if not 0 <= start <= stop <= self.num_steps:
            raise DDStoreValueError(f"Series.read: steps [{start}, {stop}) out of range "
                                    f"[0, {self.num_steps}]")
        block = self._reader(start, stop)
        # a reader of one's own that returns another block is named here, not by the
        # arithmetic it would break later (a matmul, an isfinite)
        want = (stop - start,) + self.shape[1:]
        shape = tuple(getattr(block, "shape", ()))
        kind = getattr(getattr(block, "dtype", None), "kind", None)
        if shape != want or kind is None or kind not in "biuf":
            raise DDStoreValueError(
                f"{self.source or 'series'}: Series.read({start}, {stop}): its reader "
                f"returned {type(block).__name__} shape {shape} dtype "
                f"{getattr(block, 'dtype', None)}; expected a numpy array of shape {want} "
                f"(steps, nodes, features) of bool, integer or floating point")
        return block

    def to_numpy(self):
        """The whole series as one array (reads a file completely)."""
        return self.read(0, self.num_steps)

    def close(self):
        """Release the file behind a lazy series (nothing for an in-memory one)."""
        if self._close is not None:
            self._close()
            self._close = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __len__(self):
        return self.num_steps

    def __repr__(self):
        return (f"Series(shape={self.shape}, dtype={self.dtype}, edges="
                f"{self.edge_index.shape[1]}, timestamps="
                f"{'yes' if self.timestamps is not None else 'no'}, source={self.source!r})")


def from_arrays(data, edge_index=None, edge_weight=None, *, adjacency=None,
                timestamps=None, node_ids=None):
    """A :class:`Series` over an array ``[T, nodes]`` or ``[T, nodes, features]``.

    ``data`` is a numpy array, a torch tensor or anything ``np.asarray`` accepts, in any
    memory layout (C, Fortran, transposed or strided views); it is not copied.  The graph
    is ``edge_index`` (``[2, E]`` or ``[E, 2]``) with ``edge_weight`` (default ones), or
    a dense ``adjacency`` ``[nodes, nodes]`` (non-zeros become weighted edges), or no
    edges.  ``timestamps`` (``[T]`` datetime64) enables time-of-day / day-of-week features.
    """
    arr = check_series_array(_as_array(data, "series"))
    if adjacency is not None:
        if edge_index is not None:
            raise DDStoreValueError("from_arrays: give either edge_index or adjacency, "
                                    "not both")
        edge_index, edge_weight = adjacency_to_edges(adjacency, arr.shape[1])
    return Series(arr.shape, arr.dtype, lambda a, b: arr[a:b], edge_index=edge_index,
                  edge_weight=edge_weight, timestamps=timestamps, node_ids=node_ids,
                  source="array")


def adjacency_to_edges(adjacency, num_nodes=None):
    """Dense ``[n, n]`` adjacency -> (``edge_index`` int64 ``[2, E]``, ``edge_weight``).

    Every non-zero entry ``A[i, j]`` becomes an edge ``i -> j`` with weight ``A[i, j]``.
    """
    adj = _as_array(adjacency, "adjacency")
    if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
        raise DDStoreValueError(f"adjacency must be square [nodes, nodes], got shape "
                                f"{tuple(adj.shape)}")
    if num_nodes is not None and adj.shape[0] != num_nodes:
        raise DDStoreValueError(f"adjacency is {adj.shape[0]} x {adj.shape[0]} but the "
                                f"series has {num_nodes} nodes")
    src, dst = np.nonzero(adj)
    return (np.stack([src, dst]).astype(np.int64),
            np.asarray(adj[src, dst], dtype=np.float32))


def gaussian_kernel_adjacency(distances, sensor_ids, normalized_k=0.1):
    """DCRNN's road-graph adjacency from pairwise road distances.

    ``distances``: a path to a CSV with columns ``from, to, cost`` (DCRNN's
    ``distances_la_2012.csv`` / ``distances_bay_2017.csv``) or an array of such rows.
    ``W[i, j] = exp(-(d_ij / sigma)^2)`` with ``sigma`` the standard deviation of the
    finite distances; entries below ``normalized_k`` are set to 0.  Returns ``[n, n]``
    float32 in the order of ``sensor_ids``.
    """
    if isinstance(distances, (str, os.PathLike)):
        try:
            rows = np.genfromtxt(distances, delimiter=",", names=True, dtype=None,
                                 encoding="utf-8")
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise DDStoreValueError(f"gaussian_kernel_adjacency: cannot read {distances} "
                                    f"as a CSV from,to,cost: {type(exc).__name__}: "
                                    f"{exc}") from None
        names = rows.dtype.names
        if names is None or len(names) < 3:
            raise DDStoreValueError(f"{distances}: expected CSV columns from,to,cost, got "
                                    f"{names}")
        frm, to, cost = (rows[names[0]], rows[names[1]],
                         rows[names[2]].astype(np.float64))
    else:
        rows = np.asarray(distances)
        if rows.ndim != 2 or rows.shape[1] != 3:
            raise DDStoreValueError(f"distances must be rows (from, to, cost), got shape "
                                    f"{rows.shape}")
        frm, to, cost = rows[:, 0], rows[:, 1], rows[:, 2].astype(np.float64)
    ids = [str(s) for s in sensor_ids]
    index = {s: i for i, s in enumerate(ids)}
    n = len(ids)
    dist = np.full((n, n), np.inf)
    for f, t, c in zip(frm, to, cost):
        i, j = index.get(str(f)), index.get(str(t))
        if i is not None and j is not None:
            dist[i, j] = c
    finite = dist[np.isfinite(dist)]
    if finite.size == 0:
        raise DDStoreValueError("distances: no row connects two of the given sensors")
    sigma = finite.std() or 1.0
    adj = np.exp(-np.square(dist / sigma))
    adj[adj < normalized_k] = 0.0
    return adj.astype(np.float32)
