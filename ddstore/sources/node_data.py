"""What the range-wise node data sets share: :class:`NodeDataSource`, the base of
:class:`~ddstore.sources.ogb.OGBNodeData` (OGB's CSV files),
:class:`~ddstore.sources.npy_nodes.NpyNodeData` (``.npy`` arrays) and
:class:`~ddstore.sources.synthetic_nodes.SyntheticNodeGraph` (generated).

A node data set answers, each for one range at a time: ``edges(lo, hi)`` (int64
``(src, dst)``), ``features(lo, hi)``, ``labels(lo, hi)``, ``split_size(which)`` and
``split(which, lo, hi)`` (node ids of ``"train"``, ``"valid"`` or ``"test"``), with the
attributes ``num_nodes``, ``num_edges``, ``num_features``, ``has_labels`` and
``split_name`` (None without splits).  ``ddstore.pyg.put_node_data`` puts any of them
into a store.  Pure I/O: no store, no MPI.
"""
import numpy as np

from ..errors import DDStoreValueError
from .base import first_outside

__all__ = ["NodeDataSource", "SPLITS"]

SPLITS = ("train", "valid", "test")


class NodeDataSource:
    """Base of the node data sets (see the module docstring).  A subclass reads: it
    implements ``edges``, ``features``, ``labels``, ``split_size`` and
    :meth:`split_ids` (the raw ids of a split range); the base checks the split's name
    and the ids' range (:meth:`split`, :meth:`checked_edges`), naming the place
    :meth:`where` gives.  The attributes (``num_nodes``...) are the subclass's to set
    (the base gives no defaults: ``put_node_data`` reads a missing ``has_labels`` as
    True)."""

    def where(self, what, row):
        """How a message names row ``row`` (0-based) of ``what`` (``"edges"`` or a
        split's name): a file and line, an entry..."""
        return f"{type(self).__name__}: {what} row {row}"

    def check_split(self, which):
        """``which`` if it names a split, else a :class:`DDStoreValueError`."""
        if which not in SPLITS:
            raise DDStoreValueError(f"split {which!r}: allowed {list(SPLITS)}")
        return which

    def split_ids(self, which, lo, hi):  # pragma: no cover - abstract
        """Node ids ``[lo, hi)`` of split ``which`` (checked by :meth:`split`)."""
        raise NotImplementedError

    def split(self, which, lo, hi):
        """Node ids ``[lo, hi)`` of split ``which`` ("train", "valid" or "test") as
        int64; an id outside ``[0, num_nodes)`` raises naming its place."""
        ids = np.asarray(self.split_ids(self.check_split(which), lo, hi), dtype=np.int64)
        i = first_outside(ids, self.num_nodes)
        if i is not None:
            raise DDStoreValueError(f"{self.where(which, lo + i)}: node id {int(ids[i])} "
                                    f"outside [0, {self.num_nodes})")
        return ids

    def checked_edges(self, src, dst, lo):
        """``(src, dst)`` (edges ``lo, lo + 1, ...``) as contiguous int64, or a
        :class:`DDStoreValueError` naming the first edge with a node outside
        ``[0, num_nodes)``."""
        src = np.ascontiguousarray(src, dtype=np.int64)
        dst = np.ascontiguousarray(dst, dtype=np.int64)
        bad = [i for i in (first_outside(src, self.num_nodes),
                           first_outside(dst, self.num_nodes)) if i is not None]
        if bad:
            i = min(bad)
            raise DDStoreValueError(f"{self.where('edges', lo + i)}: edge {lo + i} "
                                    f"({int(src[i])}, {int(dst[i])}) names a node outside "
                                    f"[0, {self.num_nodes})")
        return src, dst
