"""What the range-wise node data sets share: :class:`NodeDataSource`, the base of
:class:`~ddstore.sources.ogb.OGBNodeData` (OGB's CSV files),
:class:`~ddstore.sources.npy_nodes.NpyNodeData` (``.npy`` arrays) and
:class:`~ddstore.sources.synthetic_nodes.SyntheticNodeGraph` (generated).

A node data set answers, each for one range at a time: ``edges(lo, hi)`` (int64
``(src, dst)``), ``features(lo, hi)``, ``labels(lo, hi)``, ``split_size(which)`` and
``split(which, lo, hi)`` (node ids of ``"train"``, ``"valid"`` or ``"test"``), with the
attributes ``num_nodes``, ``num_edges``, ``num_features``, ``has_labels`` and
``split_name`` (None without splits), and optionally ``has_split(which)`` (False for
a split it lacks; without it, every split is read).  ``ddstore.pyg.put_node_data`` puts
any of them into a store.  Pure I/O: no store, no MPI.  What every reader refuses, naming the file
and row: a node id outside ``[0, num_nodes)``, a split listing a node twice within the
range read (:func:`id_bitmap` / :func:`first_marked` let a loader check ranges read by
several ranks against each other), a label other than -1 or a class id up to
:data:`MAX_LABEL`, a feature that is NaN or infinite.
"""
import os

import numpy as np

from .. import _core
from ..errors import DDStoreValueError
from .base import file_share, first_outside
from .csv_lines import range_text

__all__ = ["NodeDataSource", "SPLITS", "MAX_LABEL", "first_non_finite", "id_bitmap",
           "first_marked"]

SPLITS = ("train", "valid", "test")
#: The largest class id a label may be: ``num_classes`` (the largest label + 1) is then
#: still an int64.  -1 means "no label"; any other negative label is refused.
MAX_LABEL = 2 ** 63 - 2


def first_non_finite(x):
    """The flat position of the first NaN or infinity of the float array ``x``, or None
    (an integer or empty array: None).  One pass (a float64 sum) when every value is
    finite, a second to locate a bad one."""
    if x.dtype.kind not in "fc" or not x.size:
        return None
    with np.errstate(all="ignore"):
        if np.isfinite(np.sum(x, dtype=np.complex128 if x.dtype.kind == "c" else
                              np.float64)):
            return None  # a NaN or infinity would make the sum one
    flat = x.reshape(-1)
    bad = ~np.isfinite(flat)
    if not bad.any():  # finite values whose sum overflowed
        return None
    return int(np.argmax(bad))


def id_bitmap(num_nodes):
    """An empty bitmap of ``num_nodes`` bits (uint64 words) for :func:`first_marked`."""
    return np.zeros((int(num_nodes) + 63) // 64, dtype=np.uint64)


def first_marked(bits, ids, num_nodes, mark=True):
    """With ``mark``: set the bits of ``ids`` (int64 in ``[0, num_nodes)``) in ``bits``
    and return the position of the first id whose bit was set already (by an earlier id
    of ``ids``, or before the call), or None; without ``mark``: the position of the
    first id whose bit is set, or None.  One pass in C (``dds_mark_ids``)."""
    return _core.mark_ids(bits, ids, num_nodes, mark=mark)


class NodeDataSource:
    """Base of the node data sets (see the module docstring).  A subclass reads: it
    implements ``edges``, ``features``, ``labels``, ``split_size`` and
    :meth:`split_ids` (the raw ids of a split range); the base checks the split's name,
    the ids' range and repeats (:meth:`split`, :meth:`checked_edges`), and offers the
    checks of labels (-1 or a class id, :meth:`checked_labels`) and features (finite,
    :meth:`checked_features`), each naming the place :meth:`where` gives.  The attributes
    (``num_nodes``...) are the subclass's to set (the base gives no defaults:
    ``put_node_data`` reads a missing ``has_labels`` as True)."""

    def where(self, what, row):
        """How a message names row ``row`` (0-based) of ``what`` (``"edges"`` or a
        split's name): a file and line, an entry..."""
        return f"{type(self).__name__}: {what} row {row}"

    def file_marks(self):
        """What this rank reads, for :func:`~ddstore.sources.base.check_same_files`: a
        :func:`~ddstore.sources.base.file_share` entry per file of ``paths`` (by role,
        sorted; None where no file is), computed once; None for a data set without
        files (no ``paths``).  ``ddstore.pyg``'s loaders agree it across ranks, so that a
        rank handed other files (a stale copy on one node) is refused."""
        paths = getattr(self, "paths", None)
        if not isinstance(paths, dict):
            return None
        marks = getattr(self, "_file_marks", None)
        if marks is None:
            marks = self._file_marks = tuple(
                file_share(paths[k]) if os.path.isfile(paths[k]) else None
                for k in sorted(paths))
        return marks

    def check_split(self, which):
        """``which`` if it names a split, else a :class:`DDStoreValueError`."""
        if which not in SPLITS:
            raise DDStoreValueError(f"split {which!r}: allowed {list(SPLITS)}")
        return which

    def has_split(self, which):
        """Whether the data set holds split ``which`` (every split, unless a subclass
        says otherwise: a loader loads those it has)."""
        return self.check_split(which) in SPLITS

    def split_ids(self, which, lo, hi):  # pragma: no cover - abstract
        """Node ids ``[lo, hi)`` of split ``which`` (checked by :meth:`split`)."""
        raise NotImplementedError

    def split(self, which, lo, hi):
        """Node ids ``[lo, hi)`` of split ``which`` ("train", "valid" or "test") as
        int64; an id outside ``[0, num_nodes)``, or one listed twice within the range,
        raises naming its place (:meth:`repeated_error`; a loader reading the split in
        ranges over several ranks checks the ranges against each other)."""
        raw = np.asarray(self.split_ids(self.check_split(which), lo, hi))
        i = _beyond_int64(raw)
        if i is None:
            ids = raw.astype(np.int64, copy=False)
            i = first_outside(ids, self.num_nodes)
        if i is not None:
            raise DDStoreValueError(f"{self.where(which, lo + i)}: node id {int(raw[i])} "
                                    f"outside [0, {self.num_nodes})")
        j = first_marked(id_bitmap(self.num_nodes), ids, self.num_nodes)
        if j is not None:
            first = lo + int(np.flatnonzero(ids[:j] == ids[j])[0])
            raise self.repeated_error(which, lo + j, int(ids[j]), first)
        return ids

    def repeated_error(self, which, row, node, first=None):
        """The error of node id ``node`` listed again at row ``row`` of split ``which``
        (``first``: the row that lists it first, when known)."""
        also = self.where(which, row if first is None else first).rsplit(", ", 1)[-1]
        if first is None:  # "line 21" -> "an earlier line"
            also = f"an earlier {also.split(' ')[0]}"
        return DDStoreValueError(f"{self.where(which, row)}: node id {node} is listed "
                                 f"again (also at {also}); a split lists each node at "
                                 f"most once")

    def checked_labels(self, y, lo):
        """Labels ``y`` (rows ``lo, lo + 1, ...``; any integer dtype) as int64, or a
        :class:`DDStoreValueError` naming the first that is not -1 (no label) or a class
        id in ``[0, MAX_LABEL]`` (so that ``num_classes`` is an int64)."""
        y = np.asarray(y).reshape(-1)
        if not y.size:
            return y.astype(np.int64)
        low, high = int(y.min()), int(y.max())
        if low < -1 or high > MAX_LABEL:
            bad = y < -1 if y.dtype.kind == "i" else np.zeros(y.shape, dtype=bool)
            if y.dtype.itemsize >= 8:
                bad |= y > y.dtype.type(MAX_LABEL)
            i = int(np.argmax(bad))
            raise DDStoreValueError(
                f"{self.where('labels', lo + i)}: label {int(y[i])} is not a class id: "
                f"allowed -1 (no label) or 0 <= label <= 2**63 - 2 (num_classes, the "
                f"largest label + 1, must be an int64)")
        return y.astype(np.int64, copy=False)

    def checked_features(self, x, lo, raw=None):
        """Features ``x`` (rows ``lo, lo + 1, ...``), or a :class:`DDStoreValueError`
        naming the row and column of the first NaN or infinity: node features must be
        finite (as the JODIE reader's edge features).  ``raw``: the values before a cast
        to ``x``'s dtype, shown in the message (a value beyond float32's range is
        infinite once cast)."""
        k = first_non_finite(x)
        if k is None:
            return x
        cols = int(np.prod(x.shape[1:], dtype=np.int64)) if x.ndim > 1 else 1
        i, j = divmod(k, cols)
        value = (raw if raw is not None else x).reshape(-1)[k].item()
        raise DDStoreValueError(
            f"{self.where('features', lo + i)}, column {j}: {value!r} is not a finite "
            f"number within {x.dtype}'s range ({range_text(x.dtype)}); node features "
            f"must be finite")

    def checked_edges(self, src, dst, lo):
        """``(src, dst)`` (edges ``lo, lo + 1, ...``) as contiguous int64, or a
        :class:`DDStoreValueError` naming the first edge with a node outside
        ``[0, num_nodes)``."""
        src_in, dst_in = np.asarray(src), np.asarray(dst)
        bad = [i for i in (_beyond_int64(src_in), _beyond_int64(dst_in)) if i is not None]
        if not bad:
            src = np.ascontiguousarray(src_in, dtype=np.int64)
            dst = np.ascontiguousarray(dst_in, dtype=np.int64)
            bad = [i for i in (first_outside(src, self.num_nodes),
                               first_outside(dst, self.num_nodes)) if i is not None]
        if bad:
            i = min(bad)
            raise DDStoreValueError(f"{self.where('edges', lo + i)}: edge {lo + i} "
                                    f"({int(src_in[i])}, {int(dst_in[i])}) names a node "
                                    f"outside [0, {self.num_nodes})")
        return src, dst


def _beyond_int64(values):
    """The position of the first unsigned id beyond int64 in ``values`` (an array), or
    None: such an id is named as it is in the file, not as int64 wraps it (2**64 - 1 was
    told as node id -1)."""
    if values.dtype != np.uint64 or not values.size:
        return None
    over = values > np.uint64(np.iinfo(np.int64).max)
    return int(np.argmax(over)) if over.any() else None
