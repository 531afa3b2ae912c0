"""PeMS / METR-LA HDF5: a pandas DataFrame saved with ``DataFrame.to_hdf`` in pandas'
default *fixed* format (time index x sensor columns), read with h5py (PyTables is not
needed; h5py is imported only when a file is read or written).

:func:`load_pems_h5` opens such a file as a lazy
:class:`~ddstore.sources.series.Series` (blocks of time steps read on demand);
:func:`write_pems_h5` writes that layout.  pandas' *table* format is not supported.
"""
import os
import re

import numpy as np

from .._checks import as_indices
from ..errors import DDStoreError, DDStoreMemoryError, DDStoreOSError, DDStoreValueError
from .base import file_share, regular_file, replaced_file
from .series import Series, adjacency_to_edges, check_timestamps, gaussian_kernel_adjacency

__all__ = ["load_pems_h5", "write_pems_h5"]


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
    benchmarks and synthetic data; :func:`load_pems_h5` reads it back.  All or nothing:
    the arguments are checked first, and an existing file at ``path`` is replaced only
    by a complete one (:func:`~ddstore.sources.base.replaced_file`).
    """
    import h5py
    arr = np.asarray(data)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise DDStoreValueError(f"write_pems_h5: data must be 2-D [T, sensors] with a "
                                f"sensor at least, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise DDStoreValueError(f"write_pems_h5: data of dtype {arr.dtype}; a PeMS frame "
                                f"holds real numbers (bool, integers, floats)")
    ts = check_timestamps(timestamps, arr.shape[0], "write_pems_h5")
    ids = np.arange(arr.shape[1]) if sensor_ids is None else np.asarray(sensor_ids)
    if ids.shape != (arr.shape[1],):
        raise DDStoreValueError(f"write_pems_h5: {ids.shape} sensor ids for "
                                f"{arr.shape[1]} sensors")
    if ids.dtype.kind in "US":
        try:
            ids, kind = ids.astype("S"), b"string"
        except UnicodeEncodeError:
            raise DDStoreValueError("write_pems_h5: sensor ids that are not ASCII text; "
                                    "give ASCII names or integers") from None
    else:
        ids, kind = as_indices(ids, "write_pems_h5: sensor_ids", noun="id"), b"integer"
    repeats = len(ids) - len(np.unique(ids))
    if repeats:
        raise DDStoreValueError(f"write_pems_h5: sensor ids repeat ({repeats} duplicates); "
                                f"each sensor needs its own id")
    if unit is not None and unit not in _TIME_UNITS:
        raise DDStoreValueError(f"write_pems_h5: unit={unit!r}; allowed: None, "
                                f"{sorted(_TIME_UNITS)}")
    if not isinstance(key, str) or not key or "/" in key:
        raise DDStoreValueError(f"write_pems_h5: key={key!r} must be a non-empty str "
                                f"without '/' (the frame's group, 'df' or 'speed')")
    ticks = ts.astype(f"datetime64[{unit or 'ns'}]").astype(np.int64)
    tkind = b"datetime64" if unit is None else f"datetime64[{unit}]".encode()
    with replaced_file(path, "write_pems_h5") as temporary, h5py.File(temporary, "w") as fh:
        grp = fh.create_group(key)
        for name, value in (("pandas_type", b"frame"), ("pandas_version", b"0.15.2"),
                            ("encoding", b"UTF-8"), ("errors", b"strict"),
                            ("axis0_variety", b"regular"), ("axis1_variety", b"regular"),
                            ("block0_items_variety", b"regular")):
            grp.attrs[name] = np.bytes_(value)
        grp.attrs["ndim"] = np.int64(2)
        grp.attrs["nblocks"] = np.int64(1)
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
    if dtype is not None:  # the caller's argument, named as such (not the file's fault)
        try:
            dtype = np.dtype(dtype)
        except TypeError as exc:
            raise DDStoreValueError(f"load_pems_h5: dtype={dtype!r} is not a numpy dtype "
                                    f"({exc})") from None
        if dtype.kind not in "biuf":
            raise DDStoreValueError(f"load_pems_h5: dtype={dtype}; allowed: bool, "
                                    f"integer or floating point")
    path = regular_file(path, "load_pems_h5: cannot open ", "no such file")
    try:
        fh = h5py.File(path, "r")
    except OSError as exc:
        raise DDStoreValueError(f"load_pems_h5: cannot open {path}: {exc}") from None
    try:
        return _frame(fh, path, key, adjacency, distances, edge_index, edge_weight, dtype)
    except BaseException as exc:
        fh.close()
        if isinstance(exc, (OSError, RuntimeError, KeyError, TypeError, AttributeError)) \
                or type(exc) is ValueError:  # h5py's, on a damaged or foreign layout
            raise DDStoreValueError(f"load_pems_h5: {path} cannot be read as a pandas "
                                    f"HDF5 frame ({type(exc).__name__}: {exc})") from None
        raise


def _dataset(grp, name, where):
    """``grp[name]``, refused by name unless it is an HDF5 dataset."""
    import h5py
    if name not in grp:
        raise DDStoreValueError(f"{where}: no {name!r}; not a pandas fixed-format "
                                f"DataFrame")
    node = grp[name]
    if not isinstance(node, h5py.Dataset):
        raise DDStoreValueError(f"{where}: {name!r} is a {type(node).__name__.lower()}, "
                                f"not a dataset; not a pandas fixed-format DataFrame")
    return node


def _frame(fh, path, key, adjacency, distances, edge_index, edge_weight, dtype):
    """:func:`load_pems_h5` of the open file ``fh``."""
    import h5py
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
    where = f"load_pems_h5: {path}[{key!r}]"
    columns = _dataset(grp, "axis0", where)[()]
    index = _dataset(grp, "axis1", where)
    if columns.ndim != 1 or index.ndim != 1:
        raise DDStoreValueError(f"{where}: axis0 (sensors) and axis1 (time) must be "
                                f"1-D, got shapes {columns.shape} and {index.shape}")
    if not columns.shape[0]:
        raise DDStoreValueError(f"{where}: holds no sensor (axis0 is empty); a series "
                                f"needs nodes >= 1")
    num_steps = index.shape[0]
    nblocks = grp.attrs.get("nblocks", 1)
    if not isinstance(nblocks, (int, np.integer)) or not 1 <= nblocks <= 1 << 20:
        raise DDStoreValueError(f"{where}: nblocks={nblocks} must be a positive "
                                f"integer")
    blocks = []
    col_pos = {c: i for i, c in enumerate(columns.tolist())}
    if len(col_pos) != len(columns):
        dup = next(c for k, c in enumerate(columns.tolist())
                   if c in columns.tolist()[:k])
        raise DDStoreValueError(f"{where}: sensor {_h5_str(dup)!r} appears twice in "
                                f"axis0")
    covered = np.zeros(len(columns), dtype=np.int64)
    for b in range(int(nblocks)):
        for part in (f"block{b}_values", f"block{b}_items"):
            if part not in grp:
                raise DDStoreValueError(f"{where}: no {part!r} (nblocks={nblocks}); "
                                        f"not a pandas fixed-format DataFrame")
        values = _dataset(grp, f"block{b}_values", where)
        items = _dataset(grp, f"block{b}_items", where)[()].tolist()
        transposed = bool(values.attrs.get("transposed", False))
        if values.dtype.kind not in "biuf":
            raise DDStoreValueError(f"load_pems_h5: {path}[{key!r}] block {b} has dtype"
                                    f" {values.dtype}; sensor columns must be numeric")
        want = (num_steps, len(items)) if transposed else (len(items), num_steps)
        if values.shape != want:
            raise DDStoreValueError(f"{where}: block{b}_values has shape "
                                    f"{values.shape}, expected {want} ({num_steps} time "
                                    f"steps in axis1, {len(items)} sensors in "
                                    f"block{b}_items{', transposed' if transposed else ''})")
        unknown = [i for i in items if i not in col_pos]
        if unknown:
            raise DDStoreValueError(f"{where}: block{b}_items names sensor "
                                    f"{_h5_str(unknown[0])!r}, which axis0 lacks")
        pos = np.array([col_pos[i] for i in items], dtype=np.int64)
        np.add.at(covered, pos, 1)
        blocks.append((values, transposed, pos))
    if (covered != 1).any():
        k = int(np.flatnonzero(covered != 1)[0])
        raise DDStoreValueError(f"{where}: sensor {_h5_str(columns[k])!r} is in "
                                f"{int(covered[k])} blocks; each must be in one")
    num_nodes = len(columns)
    kind = _h5_str(index.attrs.get("kind", b""))
    timestamps = None
    if kind.startswith("datetime64"):
        unit = re.fullmatch(r"datetime64(?:\[(\w+)\])?", kind)
        if unit is None or (unit.group(1) or "ns") not in _TIME_UNITS:
            raise DDStoreValueError(f"load_pems_h5: {path}[{key!r}]: time index of "
                                    f"kind {kind!r}; allowed units: {_TIME_UNITS}")
        try:
            ticks = index[()].astype(np.int64)
        except MemoryError:  # (a declared size beyond memory: numpy's error named no file)
            raise DDStoreMemoryError(f"{where}: its time index of {num_steps} steps "
                                     f"({8 * num_steps} bytes) does not fit in memory "
                                     f"(a damaged file?)") from None
        timestamps = ticks.view(f"datetime64[{unit.group(1) or 'ns'}]")
    # (bytes that are not UTF-8 as \xNN: distinct ids stay distinct, "replace" made
    # every such byte one character)
    node_ids = [c.decode("utf-8", "backslashreplace") if isinstance(c, bytes) else c
                for c in columns.tolist()]
    if distances is not None:
        adjacency = gaussian_kernel_adjacency(distances, node_ids)
    if adjacency is not None:
        edge_index, edge_weight = adjacency_to_edges(adjacency, num_nodes)
    # the file's values as they are (integers stay integers: a WindowDataset converts
    # them exactly, to its own dtype), or the dtype the caller asked for: a float one
    # at its precision, an integer one only where it holds every value the file's
    # dtypes can (a float cast to it would be cut, and NaN made INT_MIN, silently)
    out_dtype = np.result_type(*[v.dtype for v, _, _ in blocks]) if dtype is None \
        else dtype
    if dtype is not None and dtype.kind != "f":
        lossy = [v.dtype for v, _, _ in blocks if not np.can_cast(v.dtype, dtype, "safe")]
        if lossy:
            also = "" if lossy[0].kind == "f" else f", or an integer one that holds " \
                f"{lossy[0]}"
            raise DDStoreValueError(f"{where}: dtype={dtype} cannot hold the file's "
                                    f"{lossy[0]} values exactly; allowed: a floating "
                                    f"dtype{also}")
    simple = (len(blocks) == 1 and blocks[0][1]
              and np.array_equal(blocks[0][2], np.arange(num_nodes)))

    # a float dtype= narrower than a block's values: a value beyond its range is
    # refused, naming it (it became inf, then a "non-finite values" refusal or fill)
    narrowed = out_dtype.kind == "f" and any(
        not np.can_cast(v.dtype, out_dtype, "safe") for v, _, _ in blocks)

    def cast(part, a, pos):
        if not narrowed:
            return part.astype(out_dtype, copy=False)
        with np.errstate(over="ignore"):
            got = part.astype(out_dtype)
        bad = np.isinf(got) & np.isfinite(part)
        if bad.any():
            t, k = np.argwhere(bad)[0]
            raise DDStoreValueError(
                f"{where}: value {part[t, k].item()!r} at step {a + t}, sensor "
                f"{node_ids[pos[k]]!r} is beyond dtype={out_dtype} (largest finite "
                f"{float(np.finfo(out_dtype).max):.4g}); give a wider dtype=")
        return got

    def reader(a, b):
        try:
            if simple:
                return cast(blocks[0][0][a:b], a, blocks[0][2])[:, :, None]
            out = np.empty((b - a, num_nodes), dtype=out_dtype)
            for values, transposed, pos in blocks:
                part = values[a:b] if transposed else values[:, a:b].T
                out[:, pos] = cast(part, a, pos)
            return out[:, :, None]
        except OSError as exc:  # (h5py's own text names neither the file nor the steps)
            if isinstance(exc, DDStoreError):
                raise
            raise DDStoreOSError(f"{where}: reading steps [{a}, {b}) failed (a damaged "
                                 f"file?): {type(exc).__name__}: {exc}") from exc

    series = Series((num_steps, num_nodes, 1), out_dtype, reader,
                    edge_index=edge_index, edge_weight=edge_weight,
                    timestamps=timestamps, node_ids=node_ids,
                    source=f"{os.path.basename(str(path))}[{key}]", close=fh.close)
    # what it was read from, agreed across ranks by the layers (the distances CSV
    # too: it makes the graph)
    series.files = (file_share(path),) + (
        (file_share(distances),) if isinstance(distances, (str, os.PathLike)) else ())
    return series
