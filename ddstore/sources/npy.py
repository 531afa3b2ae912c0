"""Raw ``.npy`` files: a series ``[T, nodes]`` or ``[T, nodes, features]`` in C order,
read lazily block by block.

:func:`load_npy` reads only the header when it opens the file; each block of time steps
``[a, b)`` is then read with ``os.preadv`` straight into a fresh array (no memory map, no
whole-file read), so a rank reads only the steps it asks for.  Returns a lazy
:class:`~ddstore.sources.series.Series`.
"""
import os

import numpy as np

from ..errors import DDStoreValueError
from .base import file_share, regular_file
from .series import Series, adjacency_to_edges, check_edges

__all__ = ["load_npy"]


def fortran_differs(shape):
    """Whether a Fortran-order array of ``shape`` lies in memory otherwise than in C
    order: when two or more axes are longer than 1 (``[T, nodes, 1]`` in Fortran
    order is not ``[T, nodes, 1]`` in C order; ``[T, 1, 1]`` is)."""
    return sum(int(d) > 1 for d in shape) > 1


def _header_3_0(fh):
    """``(shape, fortran_order, dtype)`` from a version 3.0 header (2.0's layout, its
    text in UTF-8), which numpy reads but its public ``format`` module has no reader
    of."""
    import ast
    import struct
    from numpy.lib import format as npy_format
    raw = fh.read(4)
    if len(raw) != 4:
        raise ValueError("the header's length is cut off")
    length = struct.unpack("<I", raw)[0]
    if length > 10000:  # (numpy's own bound for the other versions' headers)
        raise ValueError(f"the header's length {length} is more than the 10000 bytes "
                         f"read (as numpy's max_header_size)")
    text = fh.read(length)
    if len(text) != length:
        raise ValueError(f"the header is cut off ({len(text)} of {length} bytes)")
    header = ast.literal_eval(text.decode("utf-8"))
    if not isinstance(header, dict) or \
            sorted(header) != ["descr", "fortran_order", "shape"]:
        raise ValueError(f"the header is not a dict of descr, fortran_order and shape: "
                         f"{header!r:.200}")
    if not isinstance(header["shape"], tuple) or \
            not isinstance(header["fortran_order"], bool):
        raise ValueError(f"shape {header['shape']!r:.80} or fortran_order "
                         f"{header['fortran_order']!r:.20} of the wrong type")
    return header["shape"], header["fortran_order"], \
        npy_format.descr_to_dtype(header["descr"])


def npy_header(path, fh, what="load_npy"):
    """(shape, dtype, fortran_order, data offset) of the .npy file open as ``fh``
    (versions 1.0 to 3.0, as ``np.load`` reads them); anything else raises a
    :class:`DDStoreValueError` naming ``path`` (after ``what``: the caller, if given)."""
    from numpy.lib import format as npy_format
    head = f"{what}: " if what else ""
    try:
        version = npy_format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = npy_format.read_array_header_2_0(fh)
        elif version == (3, 0):
            shape, fortran, dtype = _header_3_0(fh)
        else:
            raise ValueError(f"unsupported .npy version {version} (1.0, 2.0 and 3.0 "
                             f"are read)")
    except Exception as exc:  # noqa: BLE001 -- a damaged header's text raises many
        # kinds (ValueError, SyntaxError, tokenize's TokenError, UnicodeDecodeError)
        raise DDStoreValueError(f"{head}{path} is not a readable .npy file: "
                                f"{type(exc).__name__}: {exc}") from None
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape):
        raise DDStoreValueError(f"{head}{path} is not a readable .npy file: its header's "
                                f"shape {shape!r} is not a tuple of integers >= 0")
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
    spath = regular_file(path, "load_npy: cannot open ", "no such file")
    try:
        fh = open(spath, "rb")
    except OSError as exc:
        raise DDStoreValueError(f"load_npy: cannot open {spath}: {exc}") from None
    try:
        file_shape, file_dtype, fortran, offset = npy_header(spath, fh)
        if shape is not None and tuple(int(s) for s in shape) != file_shape:
            raise DDStoreValueError(f"load_npy: {spath} holds shape {file_shape}, expected "
                                    f"{tuple(int(s) for s in shape)}")
        if dtype is not None and np.dtype(dtype) != file_dtype:
            raise DDStoreValueError(f"load_npy: {spath} holds dtype {file_dtype}, expected "
                                    f"{np.dtype(dtype)}")
        if fortran and fortran_differs(file_shape):
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
        files = (file_share(spath, fh),)  # agreed across ranks by the layers
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
            series.edge_index, series.edge_weight = check_edges(
                *adjacency_to_edges(adjacency, n), n, series.source)
        series.stats = stats
        series.files = files
        return series
    except BaseException:
        fh.close()
        raise
