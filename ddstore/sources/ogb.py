"""OGB node-property datasets in the raw layout OGB downloads, read range-wise.

The layout (``ogbn-products``, ``ogbn-arxiv``, ``ogbn-proteins``, ``ogbn-papers100M``;
OGB's ``NodePropPredDataset`` reads the same files whole)::

    <root>/raw/edge.csv.gz            E lines "src,dst" (no header): one direction per pair
                                      for the undirected graphs (ogbn-products: OGB adds
                                      the reverse edges itself), citing -> cited (arxiv)
    <root>/raw/node-feat.csv.gz       N lines of D finite floats (optional)
    <root>/raw/node-label.csv.gz      N lines, the class (papers100M: "nan" = no label)
    <root>/raw/num-node-list.csv.gz   one line: N
    <root>/raw/num-edge-list.csv.gz   one line: E
    <root>/split/<name>/{train,valid,test}.csv.gz   node ids, one per line, each at
                                      most once (ogbn-products: "sales_ranking";
                                      ogbn-arxiv: "time")

``<root>`` is the dataset's own directory (``dataset/ogbn_products`` after
``NodePropPredDataset(name="ogbn-products")``, or the unzipped ``products/``).

:class:`OGBNodeData` opens a root (it reads the two one-line count files and the first
line of ``node-feat.csv.gz``, nothing else); its methods read one row range each
(:func:`~ddstore.sources.rows.read_csv_rows`): ``edges(lo, hi)``, ``features(lo, hi)``,
``labels(lo, hi)``, ``split(name, lo, hi)``.  Each is a gzip stream, so **a rank reading
rows [lo, hi) decompresses the file from its start up to row hi but keeps and parses only
its own rows**: no rank holds more than its range plus one block of text.  Ranges of one
file asked in increasing order continue one kept stream (the file is decompressed once,
whatever the number of pieces).  Pure I/O: no store, no MPI (the loaders in
``ddstore.pyg`` put the ranges into a store).
"""
import os

import numpy as np

from ..errors import DDStoreIndexError, DDStoreValueError
from .base import (check_file_target, check_range, replaced_file, stale_files,
                   writer_ids, written_path)
from .node_data import SPLITS, NodeDataSource
from .rows import CsvRowReader, count_rows, first_line_fields, line_text, read_csv_rows

__all__ = ["OGBNodeData", "write_ogb_node"]


def _count_file(path):
    """The single integer of a num-*-list.csv.gz (a list of one graph's count)."""
    values = read_csv_rows(path, 0, count_rows(path), dtype=np.int64)
    if values.shape[0] != 1 or values.shape[1] != 1:
        raise DDStoreValueError(f"{path}: holds {values.shape[0]} rows of "
                                f"{values.shape[1] if values.ndim == 2 else 0} values; a "
                                f"node-property dataset has one graph (one count)")
    if values[0, 0] < 0:
        raise DDStoreValueError(f"{path}: count {int(values[0, 0])} is negative")
    return int(values[0, 0])


class OGBNodeData(NodeDataSource):
    """An OGB node-property dataset directory (``root`` holds ``raw/`` and ``split/``).

    Attributes: ``num_nodes``, ``num_edges`` (lines of ``edge.csv.gz``: one direction),
    ``num_features`` (0 without ``node-feat.csv.gz``), ``split_name`` (the one directory
    under ``split/``, or ``split`` as given), ``paths`` (every file by role).
    A missing directory or file raises :class:`DDStoreValueError` naming the path.

    ``edges``, ``features`` and ``labels`` keep one decompression stream per file
    (:class:`~ddstore.sources.rows.CsvRowReader`): ranges asked in increasing order
    (a rank's range piece by piece, as ``ddstore.pyg.put_node_data`` reads it) go on
    from where the previous one stopped, so each file is decompressed once up to the
    last row asked; an earlier range restarts the file.  :meth:`close` ends the
    streams (the next read reopens its file).
    """

    def __init__(self, root, split=None):
        root = os.fspath(root)
        raw = os.path.join(root, "raw")
        if not os.path.isfile(os.path.join(raw, "edge.csv.gz")):
            raise DDStoreValueError(
                f"{root}: not an OGB node-property dataset directory: "
                f"{os.path.join(raw, 'edge.csv.gz')} not found (give the dataset's own "
                f"directory, e.g. dataset/ogbn_products, holding raw/ and split/)")
        self.root = root
        self._readers = {}  # path -> CsvRowReader
        self.paths = {name: os.path.join(raw, f"{name}.csv.gz") for name in
                      ("edge", "node-feat", "node-label", "num-node-list",
                       "num-edge-list")}
        for name in ("num-node-list", "num-edge-list"):
            if not os.path.isfile(self.paths[name]):
                raise DDStoreValueError(f"{self.paths[name]}: no such file (part of OGB's "
                                        f"raw layout)")
        self.num_nodes = _count_file(self.paths["num-node-list"])
        self.num_edges = _count_file(self.paths["num-edge-list"])
        self.num_features = 0
        if os.path.isfile(self.paths["node-feat"]):
            fields = first_line_fields(self.paths["node-feat"])
            if fields is None and self.num_nodes:  # (a file there is features: none was
                # taken as "no features", found missing at the first get_tensor)
                self._count_error(self.paths["node-feat"], "num-node-list", self.num_nodes,
                                  0)
            self.num_features = fields or 0
        self.has_labels = os.path.isfile(self.paths["node-label"])
        split_dir = os.path.join(root, "split")
        if split is None:
            names = sorted(d for d in os.listdir(split_dir)
                           if os.path.isdir(os.path.join(split_dir, d))) \
                if os.path.isdir(split_dir) else []
            if len(names) > 1:
                raise DDStoreValueError(f"{split_dir}: holds splits {names}; name one "
                                        f"(split=...)")
            split = names[0] if names else None
        self.split_name = split
        if split is not None:
            for s in SPLITS:
                p = os.path.join(split_dir, split, f"{s}.csv.gz")
                if not os.path.isfile(p):
                    raise DDStoreValueError(f"{p}: no such file (split {split!r} needs "
                                            f"train, valid and test)")
                self.paths[f"split/{s}"] = p

    def _read(self, path, lo, hi, **kwargs):
        """Rows ``[lo, hi)`` of ``path`` from its kept stream (see the class docstring).

        The file must hold as many rows as its count file says (``num-edge-list`` for
        the edges, ``num-node-list`` for the node files): a file that ends before row
        ``hi`` raises naming both files and counts, and so does one with rows after the
        count, found by the read that ends at the count (the stream then reads on to the
        file's end, where it nearly is), naming the first line past the count and
        showing it (a blank line is told as such)."""
        count = "num-edge-list" if path == self.paths["edge"] else "num-node-list"
        total = self.num_edges if count == "num-edge-list" else self.num_nodes
        check_range(path, lo, hi, total)
        reader = self._readers.get(path)
        if reader is None:
            reader = self._readers[path] = CsvRowReader(path)
        try:
            out = reader.read(lo, hi, **kwargs)
        except DDStoreIndexError:  # the file ends before row hi <= total
            reader.close()
            self._count_error(path, count, total, count_rows(path))
        if hi == total and (hi > lo or total == 0):
            self._count_error(path, count, total, reader.count_to_end())
        return out

    def _count_error(self, path, count, total, rows):
        if rows == total:
            return
        if rows < total:
            raise DDStoreValueError(
                f"{path}: holds {rows} rows, but {self.paths[count]} says {total}; the "
                f"files disagree (a truncated download, or files of two versions?)")
        text = line_text(path, total) or b""
        head = (f"{path}: holds {rows} rows, but {self.paths[count]} says {total}; line "
                f"{total + 1}, the first past the count, is")
        if not text.strip():
            raise DDStoreValueError(f"{head} blank, and rows follow it (blank lines at "
                                    f"the end of a file are skipped, not between rows)")
        raise DDStoreValueError(f"{head} {text[:200]!r}; the files disagree (a truncated "
                                f"download, or files of two versions?)")

    def close(self):
        """End the kept decompression streams (a later read reopens its file)."""
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def __repr__(self):
        return (f"OGBNodeData({self.root!r}: {self.num_nodes} nodes, {self.num_edges} "
                f"edges, {self.num_features} features, split {self.split_name!r})")

    def edges(self, lo, hi, progress=None):
        """Edges ``[lo, hi)`` of ``edge.csv.gz`` as int64 ``(src, dst)`` (one direction
        as stored).  Node ids outside ``[0, num_nodes)`` raise naming the line."""
        e = self._read(self.paths["edge"], lo, hi, dtype=np.int64, ncols=2,
                       progress=progress)
        return self.checked_edges(e[:, 0], e[:, 1], lo)

    def where(self, what, row):
        """A row's file and line (for messages): ``what`` is "edges", "features",
        "labels" or a split's name."""
        key = {"edges": "edge", "features": "node-feat", "labels": "node-label"}.get(
            what, f"split/{what}")
        return f"{self.paths[key]}, line {row + 1}"

    def features(self, lo, hi, dtype=np.float32, progress=None):
        """Node features ``[lo, hi)`` of ``node-feat.csv.gz`` as ``[hi - lo, D]``
        (float32 by default, as OGB's loaders give).  A value that is not a finite number
        within ``dtype``'s range (``nan``, ``inf``, ``1e39`` for float32) raises naming
        its line and column."""
        path = self.paths["node-feat"]
        if not self.num_features:
            said = ("no such file" if not os.path.isfile(path) else
                    "an empty file, for 0 nodes")
            raise DDStoreValueError(f"{path}: {said} (this dataset has no node "
                                    f"features)")
        return self._read(path, lo, hi, dtype=dtype, ncols=self.num_features,
                          progress=progress, finite=True)

    def labels(self, lo, hi, progress=None):
        """Node labels ``[lo, hi)`` as int64 ``[hi - lo]``; -1 where the file says "nan"
        (nodes without a label, as in ogbn-papers100M) or -1 (the store's own "no
        label", as every other loader takes it).  A label that is not an integer in
        ``[0, 2**53)`` raises (they are parsed as float64, "3.0" as papers100M writes
        them, which holds integers exactly only below 2**53)."""
        path = self.paths["node-label"]
        if not self.has_labels:
            raise DDStoreValueError(f"{path}: no such file")
        y = self._read(path, lo, hi, dtype=np.float64, ncols=1, progress=progress)[:, 0]
        known = ~np.isnan(y) & (y != -1)
        bad = known & (~np.isfinite(y) | (y != np.round(y)) | (y < 0) | (y >= 2.0 ** 53))
        if bad.any():
            i = int(np.argmax(bad))
            raise DDStoreValueError(f"{path}, line {lo + i + 1}: label {float(y[i])!r} is not a "
                                    f"class id (an integer in [0, 2**53), or nan or -1 for "
                                    f"none)")
        out = np.full(len(y), -1, dtype=np.int64)
        out[known] = y[known].astype(np.int64)
        return out

    def split_size(self, which):
        """The number of node ids in split ``which`` ("train", "valid" or "test"; the
        file is decompressed whole to count its lines)."""
        return count_rows(self._split_path(which))

    def split_ids(self, which, lo, hi):
        """Node ids ``[lo, hi)`` of split file ``which`` (see :meth:`split`)."""
        return read_csv_rows(self._split_path(which), lo, hi, dtype=np.int64, ncols=1)[:, 0]

    def _split_path(self, which):
        self.check_split(which)
        if self.split_name is None:
            raise DDStoreValueError(f"{os.path.join(self.root, 'split')}: no split "
                                    f"directory")
        return self.paths[f"split/{which}"]


def write_ogb_node(root, edge_index, x=None, y=None, splits=None, split_name="random"):
    """Write a small dataset in OGB's raw node-property layout (for tests and examples):
    ``edge_index`` ``[2, E]``, ``x`` ``[N, D]``, ``y`` ``[N]`` (nan or -1: no label),
    ``splits`` ``{"train": ids, "valid": ids, "test": ids}``, written under
    ``split/<split_name>/``.  ``N`` is taken from ``x``
    or ``y`` (else from the edges).  The same arrays write the same bytes whenever they
    are written (the gzip headers carry no time), so copies written apart compare equal
    (every rank of a job must read the same files).  The arguments are converted before
    anything is written, and each file is replaced only by a complete one
    (:func:`~ddstore.sources.base.replaced_file`); other files under ``root`` are left
    alone, and an earlier write's ``x``, ``y`` or split files that this one has none for
    are refused, not left to be read with the new edges.  Node ids (edges, splits) are
    integers >= 0."""
    import pandas as pd
    root = written_path(root, "write_ogb_node")
    raw = os.path.join(root, "raw")
    ei = np.asarray(edge_index)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise DDStoreValueError(f"write_ogb_node: edge_index must be [2, E] node ids, got "
                                f"shape {ei.shape}")
    ei = np.stack([writer_ids("write_ogb_node", f"edge_index[{i}]", row)
                   for i, row in enumerate(ei)]) if ei.size else np.zeros((2, 0), np.int64)
    n = len(x) if x is not None else len(y) if y is not None else \
        int(ei.max()) + 1 if ei.size else 0
    if splits is not None:
        if not isinstance(splits, dict) or set(splits) != set(SPLITS):
            got = sorted(splits) if isinstance(splits, dict) else type(splits).__name__
            raise DDStoreValueError(f"write_ogb_node: splits must be a dict of {list(SPLITS)} "
                                    f"node ids, got {got}")
        splits = {k: writer_ids("write_ogb_node", f"splits[{k!r}]", np.asarray(v).reshape(-1))
                  for k, v in splits.items()}
    stale_files("write_ogb_node", root,
                [os.path.join("raw", f) for f, v in (("node-feat.csv.gz", x),
                                                     ("node-label.csv.gz", y)) if v is None]
                + ([] if splits is not None else
                   [os.path.join("split", split_name, f"{k}.csv.gz") for k in SPLITS]),
                "remove them, or write to a new directory")
    files = [(raw, "edge.csv.gz", ei.T), (raw, "num-node-list.csv.gz", np.array([[n]])),
             (raw, "num-edge-list.csv.gz", np.array([[ei.shape[1]]]))]
    if x is not None:
        files.append((raw, "node-feat.csv.gz", np.asarray(x)))
    if y is not None:
        files.append((raw, "node-label.csv.gz", np.asarray(y).reshape(-1, 1)))
    if splits is not None:
        d = os.path.join(root, "split", split_name)
        files += [(d, f"{s}.csv.gz", np.asarray(splits[s], dtype=np.int64).reshape(-1, 1))
                  for s in SPLITS]
    frames = [(folder, name, pd.DataFrame(arr)) for folder, name, arr in files]
    for folder, name, _ in frames:  # every file checked before any is written
        check_file_target(os.path.join(folder, name), "write_ogb_node")
    for folder, name, frame in frames:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise DDStoreValueError(f"write_ogb_node: cannot make the directory "
                                    f"{folder!r}: {exc}") from None
        # gzip's header time fixed: the same data, the same bytes
        with replaced_file(os.path.join(folder, name), "write_ogb_node") as temporary:
            frame.to_csv(temporary, header=False, index=False,
                         compression={"method": "gzip", "mtime": 0})
