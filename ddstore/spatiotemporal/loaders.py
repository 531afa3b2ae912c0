"""Loaders: a spatiotemporal series ``[T, nodes, features]`` plus its static graph.

Every loader returns a :class:`Series`.  A Series never has to hold the whole series in
memory: :meth:`Series.read` returns any block of consecutive time steps, so
:class:`~ddstore.spatiotemporal.WindowDataset` copies a series into the store block by
block (and, in partitioned mode, each rank reads only its own block).  In-memory arrays
are read as views; HDF5 files are read lazily, one block at a time.

Supported inputs:

- PyTorch Geometric Temporal JSON (:func:`load_pgt_json`): ``FX`` (chickenpox),
  ``X`` + ``weights`` (PedalMe), ``block`` + ``weights`` (Windmill), each with ``edges``.
  Also per-step dicts ``"0", "1", ...`` with a static ``edges`` (WikiMath) or with each
  step's own ``edges`` (Twitter tennis), ``edge_mapping`` (England COVID) and
  ``nodes`` + ``links`` (Montevideo bus); the dynamic ones give a :class:`DynamicSeries`.
- Arrays (:func:`from_arrays`): numpy arrays or torch tensors ``[T, nodes]`` or
  ``[T, nodes, features]``, in any memory layout.
- Raw ``.npy`` files (:func:`load_npy`): ``[T, nodes]`` or ``[T, nodes, features]``,
  C order, read block by block with ``os.preadv`` (no memory map, no whole-file read).
- PeMS / METR-LA HDF5 (:func:`load_pems_h5`): a pandas DataFrame saved with
  ``DataFrame.to_hdf`` in pandas' default *fixed* format (time index x sensor columns),
  read with h5py (PyTables is not needed).  :func:`write_pems_h5` writes that layout.
  pandas' *table* format is not supported.
"""
import json
import os
import re

import numpy as np

from ..errors import DDStoreValueError

__all__ = ["Series", "from_arrays", "load_pgt_json", "load_pems_h5", "write_pems_h5",
           "adjacency_to_edges", "gaussian_kernel_adjacency", "load_npy"]


def _as_array(data, what):
    """numpy view (no copy where possible) of an array-like or a torch tensor."""
    try:
        import torch
        if isinstance(data, torch.Tensor):
            data = data.detach()
            if data.device.type != "cpu":
                data = data.cpu()
            return data.numpy()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(data, np.ndarray):
        return data
    try:
        return np.asarray(data)
    except (TypeError, ValueError) as exc:
        raise DDStoreValueError(f"{what} cannot be converted to an array: {exc}") from None


def _check_series_array(arr, what="series"):
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


def _edges(edge_index, edge_weight, num_nodes, what):
    """Validate / default the graph: int64 ``[2, E]`` and float32 ``[E]``."""
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
        with np.errstate(over="ignore"):  # beyond float32: inf, refused below
            ew = np.ascontiguousarray(_as_array(edge_weight, f"{what}: edge_weight"),
                                      dtype=np.float32).reshape(-1)
        if ew.shape[0] != ei.shape[1]:
            raise DDStoreValueError(f"{what}: edge_weight has {ew.shape[0]} entries, "
                                    f"edge_index has {ei.shape[1]} edges")
        check_finite_weights(ew, ei, f"{what}: edge_weight")
    return ei, ew


def check_finite_weights(weights, edge_index, what):
    """Raise :class:`DDStoreValueError` if ``weights`` (``[E]``, as they will be stored)
    holds a NaN or inf, naming the first such edge (its index, source and target) and how
    many there are.  The one check of edge weights: static graphs (:class:`Series`) and
    :class:`~ddstore.dynamic.DynamicGraph` steps both use it."""
    bad = ~np.isfinite(weights)
    if bad.any():
        i = int(np.argmax(bad))
        raise DDStoreValueError(f"{what}: edge {i} ({int(edge_index[0, i])} -> "
                                f"{int(edge_index[1, i])}) has weight {weights[i]}; weights "
                                f"must be finite ({int(bad.sum())} of {bad.shape[0]} edges "
                                f"are NaN or inf)")


def _timestamps(timestamps, num_steps, what):
    if timestamps is None:
        return None
    ts = np.asarray(timestamps)
    if ts.dtype.kind != "M":
        try:
            ts = ts.astype("datetime64[ns]")
        except (TypeError, ValueError) as exc:
            raise DDStoreValueError(f"{what}: timestamps must be datetime64 values: "
                                    f"{exc}") from None
    ts = ts.astype("datetime64[ns]").reshape(-1)
    if ts.shape[0] != num_steps:
        raise DDStoreValueError(f"{what}: {ts.shape[0]} timestamps for {num_steps} time "
                                f"steps")
    return ts


class Series:
    """A series of graph signals ``[T, nodes, features]`` on one static graph.

    Attributes: ``shape`` (always 3-D; a 2-D input gets one feature), ``dtype``,
    ``num_steps``, ``num_nodes``, ``num_features``, ``edge_index`` (int64 ``[2, E]``),
    ``edge_weight`` (float32 ``[E]``), ``timestamps`` (``datetime64[ns]`` ``[T]`` or
    None), ``node_ids`` (labels or None), ``source`` (where it came from).

    :meth:`read` returns time steps ``[start, stop)``; the whole series is never copied.
    """

    def __init__(self, shape, dtype, reader, *, edge_index=None, edge_weight=None,
                 timestamps=None, node_ids=None, source=None, close=None):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._reader = reader
        self._close = close
        self.num_steps, self.num_nodes, self.num_features = self.shape
        self.source = source
        self.edge_index, self.edge_weight = _edges(edge_index, edge_weight,
                                                   self.num_nodes, source or "series")
        self.timestamps = _timestamps(timestamps, self.num_steps, source or "series")
        self.node_ids = node_ids

    def read(self, start, stop):
        """Time steps ``[start, stop)`` as an array ``[stop - start, nodes, features]``.

        For an in-memory series this is a view (any memory layout); for a file it is a
        fresh array read from the file.
        """
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.num_steps:
            raise DDStoreValueError(f"Series.read: steps [{start}, {stop}) out of range "
                                    f"[0, {self.num_steps}]")
        return self._reader(start, stop)

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
    arr = _check_series_array(_as_array(data, "series"))
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
        rows = np.genfromtxt(distances, delimiter=",", names=True, dtype=None,
                             encoding="utf-8")
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


# --------------------------------------------------------------------------- PGT JSON
_PGT_LAYOUTS = (("FX", None), ("X", "weights"), ("block", "weights"))


def load_pgt_json(path, dtype=np.float32):
    """Load a PyTorch Geometric Temporal JSON data set as a :class:`Series`.

    Layouts (chosen by the keys present): ``FX`` ``[T, nodes]`` with ``edges`` (chickenpox;
    unit edge weights); ``X`` ``[T, nodes]`` with ``edges`` and ``weights`` (PedalMe);
    ``block`` ``[T, nodes]`` with ``edges`` and ``weights`` (Windmill).  The series gets
    one feature: ``[T, nodes, 1]``; ``node_ids`` comes from the file when present.

    Further layouts (``target_feature`` names the column holding the file's ``y``):
    per-step dicts ``"0" .. "T-1"`` (``time_periods``) with ``y`` (and/or ``X``) and a
    top-level ``edges`` / ``weights`` (WikiMath) -> :class:`Series`; per-step dicts that
    carry their own ``edges`` / ``weights`` plus ``X`` / ``y`` (Twitter tennis) and
    ``edge_mapping.edge_index[t]`` / ``edge_mapping.edge_weight[t]`` with ``y`` ``[T,
    nodes]`` (England COVID) -> :class:`DynamicSeries` (features ``[X..., y]``);
    ``nodes`` (``bus_stop``, ``X`` variables, ``y``) with ``links`` (``source``,
    ``target``, ``weight``) (Montevideo bus) -> :class:`Series` with the ``X`` variables
    (sorted by name) and then ``y`` as features.  Any other layout raises an error that
    names the keys found.
    """
    try:
        with open(path, "r", encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise DDStoreValueError(f"load_pgt_json: cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise DDStoreValueError(f"load_pgt_json: {path} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise DDStoreValueError(f"load_pgt_json: {path} holds a {type(doc).__name__}, "
                                f"expected an object")
    other = _load_pgt_other_layouts(doc, path, dtype)  # dynamic, per-step, nodes/links
    if other is not None:
        return other
    key = next((k for k, _ in _PGT_LAYOUTS if k in doc), None)
    if key is None or "edges" not in doc:
        raise DDStoreValueError(
            f"load_pgt_json: {path} has keys {sorted(doc)}; expected 'edges' and one of "
            f"'FX' (chickenpox), 'X' + 'weights' (PedalMe), 'block' + 'weights' (Windmill)")
    try:
        data = np.asarray(doc[key], dtype=np.float64)
        edges = np.asarray(doc["edges"], dtype=np.int64).reshape(-1, 2)
    except (TypeError, ValueError) as exc:
        raise DDStoreValueError(f"load_pgt_json: {path}: {key!r} or 'edges' is not a "
                                f"numeric array: {exc}") from None
    data = np.ascontiguousarray(_check_series_array(data, f"{path}: {key!r}"), dtype=dtype)
    weights = _pgt_weights(doc.get("weights"), edges.shape[0], path, "'weights'")
    node_ids = _pgt_node_ids(doc, data.shape[1], path)
    return Series(data.shape, data.dtype, lambda a, b: data[a:b], edge_index=edges.T,
                  edge_weight=weights, node_ids=node_ids,
                  source=f"{os.path.basename(str(path))}[{key}]")


# --------------------------------------------------------------------------- PeMS HDF5
def _h5_str(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.shape == ():
        return _h5_str(value[()])
    return str(value)


_TIME_UNITS = ("s", "ms", "us", "ns")


def write_pems_h5(path, data, timestamps, sensor_ids=None, key="df", unit=None):
    """Write ``data`` ``[T, sensors]`` as a pandas *fixed*-format DataFrame with h5py.

    The layout of METR-LA's ``metr-la.h5`` (key ``df``) and PeMS-BAY's ``pems-bay.h5``
    (key ``speed``): group ``key`` with ``axis0`` (sensor ids), ``axis1`` (the time
    index as int64), ``block0_items`` and ``block0_values`` ``[T, sensors]``
    (``transposed``).  ``unit`` None writes the index as DCRNN's files have it
    (nanoseconds, ``kind="datetime64"``); ``"s"``, ``"ms"``, ``"us"`` or ``"ns"`` as pandas
    >= 2 writes a non-nanosecond index (``kind="datetime64[us]"``...).  For tests,
    benchmarks and synthetic data; :func:`load_pems_h5` reads it back.
    """
    import h5py
    arr = np.asarray(data)
    if arr.ndim != 2:
        raise DDStoreValueError(f"write_pems_h5: data must be 2-D [T, sensors], got shape "
                                f"{arr.shape}")
    ts = _timestamps(timestamps, arr.shape[0], "write_pems_h5")
    ids = np.arange(arr.shape[1]) if sensor_ids is None else np.asarray(sensor_ids)
    if ids.shape != (arr.shape[1],):
        raise DDStoreValueError(f"write_pems_h5: {ids.shape} sensor ids for "
                                f"{arr.shape[1]} sensors")
    if ids.dtype.kind in "US":
        ids, kind = ids.astype("S"), b"string"
    else:
        ids, kind = ids.astype(np.int64), b"integer"
    with h5py.File(path, "w") as fh:
        grp = fh.create_group(key)
        for name, value in (("pandas_type", b"frame"), ("pandas_version", b"0.15.2"),
                            ("encoding", b"UTF-8"), ("errors", b"strict"),
                            ("axis0_variety", b"regular"), ("axis1_variety", b"regular"),
                            ("block0_items_variety", b"regular")):
            grp.attrs[name] = np.bytes_(value)
        grp.attrs["ndim"] = np.int64(2)
        grp.attrs["nblocks"] = np.int64(1)
        if unit is not None and unit not in _TIME_UNITS:
            raise DDStoreValueError(f"write_pems_h5: unit={unit!r}; allowed: None, "
                                    f"{sorted(_TIME_UNITS)}")
        ticks = ts.astype(f"datetime64[{unit or 'ns'}]").astype(np.int64)
        tkind = b"datetime64" if unit is None else f"datetime64[{unit}]".encode()
        for name, values, k in (("axis0", ids, kind),
                                ("axis1", ticks, tkind),
                                ("block0_items", ids, kind)):
            dset = grp.create_dataset(name, data=values)
            dset.attrs["kind"] = np.bytes_(k)
            dset.attrs["name"] = np.bytes_(b"N.")
        dset = grp.create_dataset("block0_values", data=arr)
        dset.attrs["transposed"] = np.bool_(True)


def load_pems_h5(path, key=None, *, adjacency=None, distances=None, edge_index=None,
                 edge_weight=None, dtype=None):
    """Open a PeMS / METR-LA HDF5 file (pandas fixed-format frame) as a lazy :class:`Series`.

    The frame's index is time, its columns are sensors; the series is
    ``[T, sensors, 1]`` with ``timestamps`` from the index (so time-of-day / day-of-week
    features work) and ``node_ids`` from the columns.  ``key`` is the frame's group
    (``df`` for METR-LA, ``speed`` for PeMS-BAY); by default the only frame in the file.
    Blocks of time steps are read from the file on demand (the file stays open until
    :meth:`Series.close`).  Graph: ``adjacency`` ``[n, n]`` (e.g. DCRNN's ``adj_mx``),
    or ``distances`` (DCRNN's distance CSV, see :func:`gaussian_kernel_adjacency`), or
    ``edge_index``/``edge_weight``; none gives a graph without edges.

    The time index is read in the unit the file records (``kind`` ``datetime64`` is
    nanoseconds, as in DCRNN's files; pandas >= 2 writes ``datetime64[us]`` or ``[s]``).
    Values keep the file's precision unless ``dtype`` asks for another (statistics are
    computed in float64 from what is read, so a float64 file is not rounded first).
    """
    import h5py
    try:
        fh = h5py.File(path, "r")
    except OSError as exc:
        raise DDStoreValueError(f"load_pems_h5: cannot open {path}: {exc}") from None
    try:
        frames = [k for k in fh if isinstance(fh[k], h5py.Group)
                  and _h5_str(fh[k].attrs.get("pandas_type", b"")) in ("frame", "frame_table")]
        if key is None:
            if len(frames) != 1:
                raise DDStoreValueError(f"load_pems_h5: {path} holds frames {frames}; pass "
                                        f"key= to choose one")
            key = frames[0]
        if key not in fh:
            raise DDStoreValueError(f"load_pems_h5: {path} has no key {key!r}; frames: "
                                    f"{frames}")
        grp = fh[key]
        ptype = _h5_str(grp.attrs.get("pandas_type", b""))
        if ptype == "frame_table":
            raise DDStoreValueError(f"load_pems_h5: {path}[{key!r}] is in pandas' table "
                                    f"format; only the fixed format (DataFrame.to_hdf "
                                    f"default) is supported")
        if ptype != "frame" or "axis0" not in grp or "axis1" not in grp:
            raise DDStoreValueError(f"load_pems_h5: {path}[{key!r}] is not a pandas "
                                    f"fixed-format DataFrame (pandas_type={ptype!r})")
        columns = grp["axis0"][()]
        index = grp["axis1"]
        num_steps = index.shape[0]
        nblocks = int(grp.attrs.get("nblocks", 1))
        blocks = []
        col_pos = {c: i for i, c in enumerate(columns.tolist())}
        for b in range(nblocks):
            values = grp[f"block{b}_values"]
            items = grp[f"block{b}_items"][()].tolist()
            transposed = bool(values.attrs.get("transposed", False))
            if values.dtype.kind not in "biuf":
                raise DDStoreValueError(f"load_pems_h5: {path}[{key!r}] block {b} has dtype"
                                        f" {values.dtype}; sensor columns must be numeric")
            pos = np.array([col_pos[i] for i in items], dtype=np.int64)
            blocks.append((values, transposed, pos))
        num_nodes = len(columns)
        kind = _h5_str(index.attrs.get("kind", b""))
        timestamps = None
        if kind.startswith("datetime64"):
            unit = re.fullmatch(r"datetime64(?:\[(\w+)\])?", kind)
            if unit is None or (unit.group(1) or "ns") not in _TIME_UNITS:
                raise DDStoreValueError(f"load_pems_h5: {path}[{key!r}]: time index of "
                                        f"kind {kind!r}; allowed units: {_TIME_UNITS}")
            ticks = index[()].astype(np.int64)
            timestamps = ticks.view(f"datetime64[{unit.group(1) or 'ns'}]")
        node_ids = [_h5_str(c) if isinstance(c, bytes) else c for c in columns.tolist()]
        if distances is not None:
            adjacency = gaussian_kernel_adjacency(distances, node_ids)
        if adjacency is not None:
            edge_index, edge_weight = adjacency_to_edges(adjacency, num_nodes)
        out_dtype = np.result_type(*[v.dtype for v, _, _ in blocks]) if dtype is None \
            else np.dtype(dtype)
        if out_dtype.kind != "f":
            out_dtype = np.dtype(np.float64 if out_dtype.itemsize > 4 else np.float32)
        simple = (len(blocks) == 1 and blocks[0][1]
                  and np.array_equal(blocks[0][2], np.arange(num_nodes)))

        def reader(a, b):
            if simple:
                return blocks[0][0][a:b].astype(out_dtype, copy=False)[:, :, None]
            out = np.empty((b - a, num_nodes), dtype=out_dtype)
            for values, transposed, pos in blocks:
                part = values[a:b] if transposed else values[:, a:b].T
                out[:, pos] = part
            return out[:, :, None]

        return Series((num_steps, num_nodes, 1), out_dtype, reader, edge_index=edge_index,
                      edge_weight=edge_weight, timestamps=timestamps, node_ids=node_ids,
                      source=f"{os.path.basename(str(path))}[{key}]", close=fh.close)
    except BaseException:
        fh.close()
        raise


# --------------------------------------------------------------------------- raw .npy
def _npy_header(path, fh):
    """(shape, dtype, fortran_order, data offset) of the .npy file open as ``fh``."""
    from numpy.lib import format as npy_format
    try:
        version = npy_format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = npy_format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, OSError) as exc:
        raise DDStoreValueError(f"load_npy: {path} is not a readable .npy file: {exc}") \
            from None
    return tuple(int(s) for s in shape), np.dtype(dtype), bool(fortran), fh.tell()


def load_npy(path, *, shape=None, dtype=None, edge_index=None, edge_weight=None,
             adjacency=None, timestamps=None, node_ids=None):
    """Open a raw ``.npy`` file ``[T, nodes]`` or ``[T, nodes, features]`` as a lazy
    :class:`Series`.

    Only the header is read here.  :meth:`Series.read` reads time steps ``[a, b)`` with
    ``os.preadv`` straight into a fresh array (no memory map, so the pages of the file
    never count towards this process's memory, and no whole-file read): in a partitioned
    :class:`~ddstore.spatiotemporal.WindowDataset` each rank reads only its own steps plus
    the halo.  The file must be in C order (what ``np.save`` writes for a C array).

    ``shape`` / ``dtype``, when given, are what the caller expects (``shape`` 2-D or
    3-D as stored); a file that differs raises :class:`DDStoreValueError` naming both.
    A file shorter than its header says raises here, naming the file and the first
    missing step; a block read that comes up short (the file shrank after opening)
    raises naming the file and the block.  The series records ``bytes_read`` (bytes read
    from the file so far by this process) in ``series.stats``.  Graph and timestamps as
    for :func:`from_arrays`.
    """
    spath = os.fspath(path)
    try:
        fh = open(spath, "rb")
    except OSError as exc:
        raise DDStoreValueError(f"load_npy: cannot open {spath}: {exc}") from None
    try:
        file_shape, file_dtype, fortran, offset = _npy_header(spath, fh)
        if shape is not None and tuple(int(s) for s in shape) != file_shape:
            raise DDStoreValueError(f"load_npy: {spath} holds shape {file_shape}, expected "
                                    f"{tuple(int(s) for s in shape)}")
        if dtype is not None and np.dtype(dtype) != file_dtype:
            raise DDStoreValueError(f"load_npy: {spath} holds dtype {file_dtype}, expected "
                                    f"{np.dtype(dtype)}")
        if fortran and len(file_shape) > 1 and min(file_shape) > 1:
            raise DDStoreValueError(f"load_npy: {spath} is in Fortran order; block reads "
                                    f"need C order (save a C-contiguous array)")
        if len(file_shape) not in (2, 3):
            raise DDStoreValueError(f"load_npy: {spath} holds shape {file_shape}; a series "
                                    f"must be 2-D [T, nodes] or 3-D [T, nodes, features]")
        if file_dtype.kind not in "biuf" or file_dtype.fields is not None:
            raise DDStoreValueError(f"load_npy: {spath} has dtype {file_dtype}; allowed: "
                                    f"bool, integer or floating point")
        T = file_shape[0]
        n = file_shape[1]
        f = file_shape[2] if len(file_shape) == 3 else 1
        if n == 0 or f == 0:
            raise DDStoreValueError(f"load_npy: {spath} has shape {file_shape}: nodes and "
                                    f"features must be >= 1")
        step_bytes = n * f * file_dtype.itemsize
        size = os.fstat(fh.fileno()).st_size
        have = max(0, size - offset)
        if have < T * step_bytes:
            raise DDStoreValueError(
                f"load_npy: {spath} is truncated: its header says shape {file_shape} "
                f"{file_dtype} ({T * step_bytes} data bytes) but it holds {have}; steps "
                f"from {have // step_bytes} on (of {T}) are missing")
        fd = fh.fileno()
        stats = {"bytes_read": 0}

        def reader(a, b):
            out = np.empty((b - a, n, f), dtype=file_dtype)
            view = memoryview(out.reshape(-1).view(np.uint8))
            want, pos, done = (b - a) * step_bytes, offset + a * step_bytes, 0
            while done < want:
                got = os.preadv(fd, [view[done:]], pos + done)
                if got <= 0:
                    raise DDStoreValueError(
                        f"load_npy: {spath}: block of steps [{a}, {b}) is truncated: read "
                        f"{done} of {want} bytes at byte {pos} (the file is shorter than "
                        f"its header says)")
                done += got
            stats["bytes_read"] += want
            return out

        series = Series((T, n, f), file_dtype, reader, edge_index=edge_index,
                        edge_weight=edge_weight, timestamps=timestamps, node_ids=node_ids,
                        source=os.path.basename(spath), close=fh.close)
        if adjacency is not None:
            if edge_index is not None:
                raise DDStoreValueError("load_npy: give either edge_index or adjacency, "
                                        "not both")
            series.edge_index, series.edge_weight = _edges(
                *adjacency_to_edges(adjacency, n), n, series.source)
        series.stats = stats
        return series
    except BaseException:
        fh.close()
        raise


# --------------------------------------------------------------------------- PGT JSON:
# the layouts beyond FX / X / block (per-step dicts, dynamic edges, nodes/links)
__all__ += ["DynamicSeries"]


class DynamicSeries(Series):
    """A :class:`Series` whose graph changes every step (a discrete-time dynamic graph).

    Besides the node signals ``[T, nodes, features]`` (read with :meth:`Series.read`) it
    carries ``edges`` (``T`` int64 arrays ``[2, E_t]``, row 0 source, row 1 target) and
    ``weights`` (``T`` float32 arrays ``[E_t]``, or None), ready for
    :meth:`ddstore.dynamic.DynamicGraph.from_series`; its static ``edge_index`` is empty.
    ``target_feature`` is the feature column holding the file's target ``y`` (None when
    the file has none).
    """

    def __init__(self, data, edges, weights, *, target_feature=None, node_ids=None,
                 source=None):
        super().__init__(data.shape, data.dtype, lambda a, b: data[a:b], node_ids=node_ids,
                         source=source)
        self.edges, self.weights = edges, weights
        self.target_feature = target_feature

    def __repr__(self):
        return (f"DynamicSeries(shape={self.shape}, dtype={self.dtype}, steps with edges="
                f"{len(self.edges)}, edges={sum(e.shape[1] for e in self.edges)} in all, "
                f"source={self.source!r})")


_PGT_KNOWN = ("expected 'edges' and one of 'FX' (chickenpox), 'X' + 'weights' (PedalMe), "
              "'block' + 'weights' (Windmill), per-step '0', '1', ... with 'y' "
              "(WikiMath); or 'edge_mapping' + 'y' + 'time_periods' (England COVID); or "
              "per-step '0', '1', ... with their own 'edges', 'weights', 'X', 'y' "
              "(Twitter tennis); or 'nodes' + 'links' (Montevideo bus)")


def _pgt_error(path, msg):
    return DDStoreValueError(f"load_pgt_json: {path}: {msg}")


def _pgt_num_steps(doc, path):
    """Steps of a per-step layout: ``time_periods`` or the run of keys '0', '1', ..."""
    if "time_periods" in doc:
        T = doc["time_periods"]
        if isinstance(T, bool) or not isinstance(T, int) or T < 1:
            raise _pgt_error(path, f"time_periods={T!r} must be a positive integer")
        return T
    T = 0
    while str(T) in doc:
        T += 1
    return T


def _pgt_pairs(pairs, path, what):
    """``[[src, dst], ...]`` (or ``[]``) -> int64 ``[2, E]``."""
    try:
        arr = np.asarray(pairs if pairs is not None else [], dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise _pgt_error(path, f"{what} is not a list of [source, target] integer pairs: "
                               f"{exc}") from None
    if arr.size == 0:
        return np.zeros((2, 0), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise _pgt_error(path, f"{what} must be [source, target] pairs, got shape "
                               f"{arr.shape}")
    return np.ascontiguousarray(arr.T)


def _pgt_weights(values, num_edges, path, what):
    if values is None:
        return None
    try:
        with np.errstate(over="ignore"):  # beyond float32: inf, refused with the edge
            w = np.asarray(values, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise _pgt_error(path, f"{what} is not numeric: {exc}") from None
    if w.shape[0] != num_edges:
        raise _pgt_error(path, f"{what} has {w.shape[0]} entries for {num_edges} edges")
    return w


def _pgt_node_values(value, num_nodes, path, what):
    """A per-step node array ``[N]`` or ``[N, F]`` -> float64 ``[N, F]``."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise _pgt_error(path, f"{what} is not numeric: {exc}") from None
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or (num_nodes is not None and arr.shape[0] != num_nodes):
        raise _pgt_error(path, f"{what} has shape {arr.shape}; expected [{num_nodes}] or "
                               f"[{num_nodes}, features]")
    return arr


def _pgt_node_ids(doc, num_nodes, path):
    """The file's ``node_ids``: a list as given, or a ``name -> index`` object turned
    into the list of names by index (an index that is not an integer in
    ``[0, num_nodes)`` raises)."""
    ids = doc.get("node_ids")
    if isinstance(ids, dict):  # name -> id
        names = [None] * num_nodes
        for name, i in ids.items():
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_nodes:
                raise _pgt_error(path, f"'node_ids'[{name!r}] = {i!r} is not an integer "
                                       f"node index in [0, {num_nodes})")
            names[i] = name
        return names
    return ids


def _pgt_matrix(value, path, what):
    """A ``[T, nodes]`` list of lists of numbers -> float64 array, or raise naming the
    first row whose length differs."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        why = str(exc)
        if isinstance(value, list) and value and all(isinstance(r, list) for r in value):
            lens = [len(r) for r in value]
            t = next((t for t, n in enumerate(lens) if n != lens[0]), None)
            if t is not None:
                why = f"row {t} has {lens[t]} values, row 0 has {lens[0]}"
        raise _pgt_error(path, f"{what} must be [T, nodes] numbers: {why}") from None
    if arr.ndim != 2:
        raise _pgt_error(path, f"{what} must be [T, nodes], got shape {arr.shape}")
    return arr


def _load_pgt_other_layouts(doc, path, dtype):
    """The PGT layouts beyond ``FX`` / ``X`` / ``block``: a Series, a DynamicSeries, or
    None for the layouts :func:`load_pgt_json` reads itself; an unknown layout raises."""
    if "edges" in doc and any(k in doc for k, _ in _PGT_LAYOUTS):
        return None
    name = os.path.basename(str(path))
    if "edge_mapping" in doc:  # England COVID: per-step mobility graphs, y [T, N]
        mapping = doc["edge_mapping"]
        if not isinstance(mapping, dict) or "edge_index" not in mapping:
            got = sorted(mapping) if isinstance(mapping, dict) else repr(mapping)
            raise _pgt_error(path, f"edge_mapping must hold 'edge_index' (and "
                                   f"'edge_weight'), got {got}")
        if "y" not in doc:
            raise _pgt_error(path, f"edge_mapping layout needs 'y' [T, nodes]; keys found: "
                                   f"{sorted(doc)}")
        y = _pgt_matrix(doc["y"], path, "'y'")
        T = _pgt_num_steps(doc, path) if "time_periods" in doc else y.shape[0]
        if y.shape[0] != T:
            raise _pgt_error(path, f"'y' has {y.shape[0]} steps, time_periods={T}")
        index, weight = mapping["edge_index"], mapping.get("edge_weight")
        edges, weights = [], None if weight is None else []
        for t in range(T):
            if str(t) not in index:
                raise _pgt_error(path, f"edge_mapping.edge_index has no step '{t}' (of "
                                       f"{T} time periods)")
            e = _pgt_pairs(index[str(t)], path, f"edge_mapping.edge_index['{t}']")
            edges.append(e)
            if weights is not None:
                if str(t) not in weight:
                    raise _pgt_error(path, f"edge_mapping.edge_weight has no step '{t}'")
                weights.append(_pgt_weights(weight[str(t)], e.shape[1], path,
                                            f"edge_mapping.edge_weight['{t}']"))
        data = np.ascontiguousarray(y[:, :, None], dtype=dtype)
        return DynamicSeries(data, edges, weights, target_feature=0,
                             node_ids=_pgt_node_ids(doc, data.shape[1], path),
                             source=f"{name}[edge_mapping]")
    if "0" in doc and isinstance(doc["0"], dict):  # per-step dicts
        T = _pgt_num_steps(doc, path)
        steps = []
        for t in range(T):
            step = doc.get(str(t))
            if not isinstance(step, dict):
                raise _pgt_error(path, f"step '{t}' (of {T} time periods) is missing or "
                                       f"not an object")
            steps.append(step)
        dynamic = "edges" in steps[0]
        if not dynamic and "edges" not in doc:
            raise _pgt_error(path, f"per-step layout without edges: neither step '0' (keys "
                                   f"{sorted(steps[0])}) nor the top level (keys "
                                   f"{sorted(doc)[:12]}) has 'edges'")
        cols, target, num_nodes = [], None, None
        for t, step in enumerate(steps):
            parts = []
            for key in ("X", "y"):
                if key in step:
                    arr = _pgt_node_values(step[key], num_nodes, path,
                                           f"step '{t}' {key!r}")
                    num_nodes = arr.shape[0]
                    if t == 0 and key == "y":
                        target = sum(p.shape[1] for p in parts)
                    parts.append(arr)
            if not parts:
                raise _pgt_error(path, f"step '{t}' has neither 'X' nor 'y' (keys "
                                       f"{sorted(step)})")
            cols.append(np.concatenate(parts, axis=1))
        if len({c.shape for c in cols}) != 1:
            raise _pgt_error(path, f"steps have different node/feature shapes "
                                   f"{sorted({c.shape for c in cols})}")
        data = np.ascontiguousarray(np.stack(cols), dtype=dtype)
        node_ids = _pgt_node_ids(doc, data.shape[1], path)
        if dynamic:  # Twitter tennis: the edges of every step
            edges, weights = [], []
            for t, step in enumerate(steps):
                if "edges" not in step:
                    raise _pgt_error(path, f"step '{t}' has no 'edges' (step '0' has)")
                e = _pgt_pairs(step["edges"], path, f"step '{t}' 'edges'")
                edges.append(e)
                w = _pgt_weights(step.get("weights"), e.shape[1], path,
                                 f"step '{t}' 'weights'")
                weights.append(np.ones(e.shape[1], np.float32) if w is None else w)
            if all(step.get("weights") is None for step in steps):
                weights = None
            return DynamicSeries(data, edges, weights, target_feature=target,
                                 node_ids=node_ids, source=f"{name}[steps]")
        e = _pgt_pairs(doc["edges"], path, "'edges'")
        series = Series(data.shape, data.dtype, lambda a, b: data[a:b], edge_index=e,
                        edge_weight=_pgt_weights(doc.get("weights"), e.shape[1], path,
                                                 "'weights'"),
                        node_ids=node_ids, source=f"{name}[steps]")
        series.target_feature = target
        return series
    if "nodes" in doc and "links" in doc:  # Montevideo bus: node records + link records
        nodes, links = doc["nodes"], doc["links"]
        if not isinstance(nodes, list) or not nodes or not isinstance(links, list):
            raise _pgt_error(path, "'nodes' must be a non-empty list and 'links' a list")
        ids = [n.get("bus_stop", n.get("id", i)) if isinstance(n, dict) else None
               for i, n in enumerate(nodes)]
        if any(i is None for i in ids):
            raise _pgt_error(path, "every entry of 'nodes' must be an object")
        pos = {i: k for k, i in enumerate(ids)}
        try:
            src = [pos[d["source"]] for d in links]
            dst = [pos[d["target"]] for d in links]
        except KeyError as exc:
            raise _pgt_error(path, f"a link refers to node {exc.args[0]!r}, which is not "
                                   f"in 'nodes' (or lacks 'source'/'target')") from None
        w = [d.get("weight", 1.0) for d in links]
        feats = sorted(nodes[0]["X"]) if isinstance(nodes[0].get("X"), dict) else []
        cols = []
        for k, n in enumerate(nodes):
            X = n.get("X") or {}
            if sorted(X) != feats:
                raise _pgt_error(path, f"node {ids[k]!r} has X variables {sorted(X)}, node "
                                       f"{ids[0]!r} has {feats}")
            if "y" not in n:
                raise _pgt_error(path, f"node {ids[k]!r} has no 'y' (keys {sorted(n)})")
            cols.append([X[f] for f in feats] + [n["y"]])
        try:
            arr = np.asarray(cols, dtype=np.float64)  # [N, F, T]
        except (TypeError, ValueError) as exc:
            raise _pgt_error(path, f"node series are not numeric or differ in length: "
                                   f"{exc}") from None
        if arr.ndim != 3:
            raise _pgt_error(path, f"node series must be lists of numbers of one length, "
                                   f"got shape {arr.shape}")
        data = np.ascontiguousarray(arr.transpose(2, 0, 1), dtype=dtype)
        series = Series(data.shape, data.dtype, lambda a, b: data[a:b],
                        edge_index=np.array([src, dst], dtype=np.int64).reshape(2, -1),
                        edge_weight=np.asarray(w, dtype=np.float32), node_ids=ids,
                        source=f"{name}[nodes/links]")
        series.target_feature = data.shape[2] - 1
        series.feature_names = feats + ["y"]
        return series
    raise _pgt_error(path, f"unknown layout: keys found {sorted(doc)[:20]}"
                           f"{' ...' if len(doc) > 20 else ''}; {_PGT_KNOWN}")
