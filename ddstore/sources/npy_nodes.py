"""A node-classification data set kept as ``.npy`` arrays, read range-wise.

:class:`NpyNodeData` has the range-wise methods of
:class:`~ddstore.sources.ogb.OGBNodeData` and
:class:`~ddstore.sources.synthetic_nodes.SyntheticNodeGraph` (``edges``, ``features``,
``labels``, ``split_size``, ``split``), so the same loader puts any of them into a store.
Each method reads only the bytes of its range (:func:`~ddstore.sources.rows.read_npy_rows`:
``os.preadv`` into the result, no memory map, nothing else read).

Files (``np.save`` of C-order arrays):

- ``edge_index``: ``[2, E]`` (PyG's layout: sources, destinations) or ``[E, 2]``
  (OGB's: one edge per row); integers; a ``[2, 2]`` array is read as PyG's;
- ``x``: ``[N, D]`` node features, finite (optional);
- ``y``: ``[N]`` or ``[N, 1]`` integer labels, -1 for none (optional);
- ``train`` / ``valid`` / ``test``: ``[k]`` integer node ids, each at most once
  (each optional: a loader loads the splits given).

``NpyNodeData.from_dir(directory)`` finds them by the names ``edge_index.npy``, ``x.npy``,
``y.npy``, ``train_idx.npy``, ``valid_idx.npy``, ``test_idx.npy``.
"""
import os

import numpy as np

from .._checks import as_bool
from ..errors import DDStoreValueError
from .base import check_range
from .node_data import SPLITS, NodeDataSource
from .rows import npy_shape, read_npy_rows

__all__ = ["NpyNodeData"]


class NpyNodeData(NodeDataSource):
    """Range-wise reader of a node data set in ``.npy`` files (see the module docstring).

    ``edge_index``, ``x``, ``y``, ``train``, ``valid``, ``test``: the paths of the
    ``.npy`` files (``[2, E]`` node ids, ``[N, F]`` features, ``[N]`` labels, and the
    node ids of each split); all but ``edge_index`` optional.
    ``num_nodes``: default the rows of ``x`` or ``y`` (which must agree), else given.
    ``undirected``: tells a loader to add the reverse of every edge (False by default:
    the file holds every direction it means).  Shapes and dtypes are checked here (from
    the headers); a missing file raises naming its path.
    """

    def __init__(self, edge_index, x=None, y=None, train=None, valid=None, test=None,
                 num_nodes=None, undirected=False):
        undirected = as_bool(undirected, "NpyNodeData: undirected")  # (before any file)
        self.paths = {"edge_index": os.fspath(edge_index)}
        for k, v in (("x", x), ("y", y), ("train", train), ("valid", valid),
                     ("test", test)):
            if v is not None:
                self.paths[k] = os.fspath(v)
        shapes = {}
        for k, p in self.paths.items():
            shape, dtype, _, _ = npy_shape(p)  # raises for a missing or bad file
            shapes[k] = (shape, dtype)
        eshape, edt = shapes["edge_index"]
        if len(eshape) != 2 or 2 not in eshape or edt.kind not in "iu":
            raise DDStoreValueError(f"{self.paths['edge_index']}: edge_index must be an "
                                    f"integer array [2, E] or [E, 2], got shape {eshape} "
                                    f"{edt}")
        self._edge_axis = 1 if eshape[0] == 2 else 0
        self.num_edges = eshape[1] if self._edge_axis == 1 else eshape[0]
        rows = {}
        if "x" in shapes:
            xs, xdt = shapes["x"]
            if len(xs) != 2 or xdt.kind not in "biuf":
                raise DDStoreValueError(f"{self.paths['x']}: x must be a numeric array "
                                        f"[N, D], got shape {xs} {xdt}")
            rows["x"] = xs[0]
        if "y" in shapes:
            ys, ydt = shapes["y"]
            if not (len(ys) == 1 or (len(ys) == 2 and ys[1] == 1)) or ydt.kind not in "iu":
                raise DDStoreValueError(f"{self.paths['y']}: y must be integer labels [N] "
                                        f"or [N, 1], got shape {ys} {ydt}")
            rows["y"] = ys[0]
        if len(set(rows.values())) > 1:
            raise DDStoreValueError(f"x has {rows['x']} rows but y has {rows['y']} "
                                    f"({self.paths['x']}, {self.paths['y']})")
        found = next(iter(rows.values()), None)
        if num_nodes is None and found is None:
            raise DDStoreValueError("NpyNodeData: give num_nodes (there is neither x nor y "
                                    "to take it from)")
        if num_nodes is not None and found is not None and int(num_nodes) != found:
            raise DDStoreValueError(f"NpyNodeData: num_nodes={num_nodes} but x / y have "
                                    f"{found} rows")
        self.num_nodes = int(found if num_nodes is None else num_nodes)
        self.num_features = shapes["x"][0][1] if "x" in shapes else 0
        self.has_labels = "y" in shapes
        for s in SPLITS:
            if s in shapes:
                ss, sdt = shapes[s]
                if len(ss) != 1 or sdt.kind not in "iu":
                    raise DDStoreValueError(f"{self.paths[s]}: a split must be integer "
                                            f"node ids [k], got shape {ss} {sdt}")
        # the splits given are loaded (each is optional: a data set with train and test
        # ids only has those two)
        self.split_name = "npy" if any(s in shapes for s in SPLITS) else None
        self.undirected = undirected

    @classmethod
    def from_dir(cls, directory, **kwargs):
        """The files of ``directory`` by their usual names (``edge_index.npy`` needed)."""
        d = os.fspath(directory)
        names = {"edge_index": "edge_index.npy", "x": "x.npy", "y": "y.npy",
                 "train": "train_idx.npy", "valid": "valid_idx.npy",
                 "test": "test_idx.npy"}
        if not os.path.isfile(os.path.join(d, names["edge_index"])):
            raise DDStoreValueError(f"{os.path.join(d, names['edge_index'])}: no such "
                                    f"file (an .npy node data set needs edge_index.npy)")
        found = {k: os.path.join(d, v) for k, v in names.items()
                 if os.path.isfile(os.path.join(d, v))}
        return cls(**found, **kwargs)

    def __repr__(self):
        return (f"NpyNodeData({self.paths['edge_index']!r}: {self.num_nodes} nodes, "
                f"{self.num_edges} edges, {self.num_features} features)")

    def edges(self, lo, hi, progress=None):
        """Edges ``[lo, hi)`` as int64 ``(src, dst)``; ids outside ``[0, num_nodes)``
        raise naming the edge."""
        path = self.paths["edge_index"]
        lo, hi = check_range(path, lo, hi, self.num_edges)
        e = read_npy_rows(path, lo, hi, axis=self._edge_axis)
        if self._edge_axis == 0:
            e = e.T
        return self.checked_edges(e[0], e[1], lo)

    def where(self, what, row):
        """A row's file and entry (for messages): ``what`` is "edges", "features",
        "labels" or a split's name."""
        key = {"edges": "edge_index", "features": "x", "labels": "y"}.get(what, what)
        return self.paths[key] + ("" if what == "edges" else
                                  f", {'row' if what == 'features' else 'entry'} {row}")

    def features(self, lo, hi, dtype=np.float32, progress=None):
        """Rows ``[lo, hi)`` of ``x`` as ``dtype`` (float32 by default); a NaN or
        infinity (or a value beyond ``dtype``'s range) raises naming its row and column
        (:meth:`checked_features`)."""
        if "x" not in self.paths:
            raise DDStoreValueError("NpyNodeData: no x file given")
        lo, hi = check_range(self.paths["x"], lo, hi, self.num_nodes)
        raw = read_npy_rows(self.paths["x"], lo, hi)
        with np.errstate(over="ignore"):  # beyond dtype's range: refused just below
            x = raw.astype(dtype, copy=False)
        return self.checked_features(x, lo, raw)

    def labels(self, lo, hi, progress=None):
        """Labels ``[lo, hi)`` as int64 (-1: none); a label below -1 or above
        :data:`~ddstore.sources.node_data.MAX_LABEL` raises naming its entry
        (:meth:`checked_labels`)."""
        if "y" not in self.paths:
            raise DDStoreValueError("NpyNodeData: no y file given")
        lo, hi = check_range(self.paths["y"], lo, hi, self.num_nodes)
        return self.checked_labels(read_npy_rows(self.paths["y"], lo, hi), lo)

    def has_split(self, which):
        return self.check_split(which) in self.paths

    def split_size(self, which):
        """How many node ids split ``which`` ("train", "valid", "test") holds (the rows
        of its ``.npy`` file)."""
        return npy_shape(self._split_path(which))[0][0]

    def split_ids(self, which, lo, hi):
        """Node ids ``[lo, hi)`` of split ``which`` (see :meth:`split`)."""
        return read_npy_rows(self._split_path(which), lo, hi)

    def _split_path(self, which):
        self.check_split(which)
        if which not in self.paths:
            raise DDStoreValueError(f"NpyNodeData: no {which} file given")
        return self.paths[which]
