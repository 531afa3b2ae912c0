"""How a PyG ``Data`` sample maps to a store record, and back.

A record is a dict of numpy arrays whose first dimension varies between samples.  Each
key of a graph is stored with its PyG concatenation dimension (``Data.__cat_dim__``:
``-1`` for ``edge_index``-like keys, ``0`` otherwise) moved to the front, so that
``edge_index`` ``[2, E]`` is stored as ``[E, 2]``; 0-d values (graph-level scalars,
Python numbers) are stored as one row.  A :class:`GraphLayout` remembers, per key, what
the value was (torch tensor, numpy array, numpy scalar, Python number), its number of
dimensions and concatenation dimension, so that reading restores the same type, dtype and
shape.

:func:`collate_records` builds a PyG ``Batch`` straight from the packed rows of a whole
mini-batch (what ``DDStore.get_records_packed`` returns), without building one ``Data``
per graph; it equals ``Batch.from_data_list`` of the same graphs.
"""
import copy

import numpy as np
import torch

from .._checks import host_tensor, storable
from .._pyg_seams import new_data_batch, set_batch_tables
from ..errors import DDStoreValueError

__all__ = ["GraphLayout", "KeyLayout", "collate_records"]

_KINDS = ("tensor", "ndarray", "npscalar", "int", "float", "bool")
# keys PyG reads the number of nodes from, in its own order of preference
_NODE_KEYS = ("x", "feat", "pos", "batch", "node_type", "n_id", "tf")
_STORABLE = "biufc"


class KeyLayout(tuple):
    """``(key, kind, ndim, cat_dim, dtype, trailing)`` of one key: ``trailing`` is the
    stored row shape (after the concatenation dimension moved to the front)."""
    __slots__ = ()

    def __new__(cls, key, kind, ndim, cat_dim, dtype, trailing):
        return super().__new__(cls, (str(key), str(kind), int(ndim),
                                     None if cat_dim is None else int(cat_dim),
                                     np.dtype(dtype).str, tuple(int(t) for t in trailing)))

    key = property(lambda self: self[0])
    kind = property(lambda self: self[1])
    ndim = property(lambda self: self[2])
    cat_dim = property(lambda self: self[3])
    dtype = property(lambda self: np.dtype(self[4]))
    trailing = property(lambda self: self[5])

    def describe(self):
        """The key's kind, dtype, ndim and stored row shape, as errors name them."""
        return (f"{self.kind} dtype {self.dtype} ndim {self.ndim} "
                f"stored row shape {self.trailing}")


def _items(sample):
    """``(key, value)`` pairs of a Data or dict sample, in insertion order."""
    from torch_geometric.data import Data
    if isinstance(sample, Data):
        cls = type(sample)
        for hook in ("__inc__", "__cat_dim__", "num_nodes"):
            if getattr(cls, hook) is not getattr(Data, hook):
                raise DDStoreValueError(
                    f"is a {cls.__name__}, a Data subclass with its own {hook}: batches "
                    f"here follow Data's rules (keys with 'index' in the name incremented "
                    f"by the node count, concatenated on their last dimension; the rest "
                    f"on the first), which would give other batches than "
                    f"Batch.from_data_list of {cls.__name__}; store plain Data samples "
                    f"whose keys Data's rules batch as you need")
        items = list(sample.to_dict().items())
        for k, _ in items:
            _check_key(k)
        _check_plain(sample, items)
        return sample, items
    if isinstance(sample, dict):
        data = Data()
        for k, v in sample.items():
            _check_key(k)
            data[k] = v
        items = list(sample.items())
        _check_plain(data, items)
        return data, items
    raise DDStoreValueError(f"is a {type(sample).__name__}; expected a "
                            f"torch_geometric.data.Data or a dict of arrays")


def _check_key(key):
    """A graph's key is a non-empty str (a key '' was written, then refused at the load
    by a message naming no sample)."""
    if not isinstance(key, str) or not key:
        raise DDStoreValueError(f"key {key!r} is not a non-empty str (keys name the "
                                f"graph's values, e.g. 'x', 'edge_index')")


def _check_plain(data, items):
    """A value that is a subclass of ``torch.Tensor`` (PyG's ``EdgeIndex``, ``Index``) is
    stored as the plain tensor of its values: refuse it where what the subclass carries
    besides them changes the batches ``Batch.from_data_list`` makes of ``data`` (an
    ``EdgeIndex``'s sparse size taken as the node count, an ``Index``'s ``dim_size`` as
    a ``batch`` key's increment)."""
    subclassed = [(k, v) for k, v in items if isinstance(v, torch.Tensor) and
                  type(v) not in (torch.Tensor, torch.nn.Parameter)]
    if not subclassed:
        return
    plain = copy.copy(data)
    for k, v in subclassed:  # (as_subclass keeps EdgeIndex: its values, as stored)
        try:
            plain[k] = torch.from_numpy(host_tensor(v, f"key {k!r}").numpy())
        except (TypeError, RuntimeError):  # a dtype numpy lacks: refused by the store's
            return                         # own check, naming the key and the way out
    counted, plain_counted = data.num_nodes, plain.num_nodes  # (counted once)
    for k, v in subclassed:
        what = f"key {k!r} holds a {type(v).__name__} tensor, stored as the plain values"
        if counted != plain_counted:
            raise DDStoreValueError(
                f"{what}, which would give the graph {plain_counted} nodes where PyG "
                f"counts {counted}: set num_nodes={counted} in the sample")
        if data.__inc__(k, v) != plain.__inc__(k, plain[k]):
            raise DDStoreValueError(
                f"{what}, which batches would offset by {plain.__inc__(k, plain[k])} "
                f"where PyG offsets by {data.__inc__(k, v)}: store a plain tensor "
                f"(value.as_tensor()) if that offset is what you mean")


def _to_record_value(data, key, value):
    """(stored array, KeyLayout) of one value."""
    if isinstance(value, torch.Tensor):
        kind = "tensor"
        if value.is_sparse or value.layout != torch.strided:
            raise DDStoreValueError(f"key {key!r} is a sparse tensor (not supported)")
        try:
            arr = host_tensor(value, f"key {key!r}").numpy()
        except (TypeError, RuntimeError) as exc:
            raise DDStoreValueError(f"key {key!r}: tensor dtype {value.dtype} cannot be "
                                    f"stored ({exc}): numpy has no such dtype; store "
                                    f"value.float() (bfloat16 and float8 values are exact "
                                    f"in float32), or its bits (value.view(torch.int16) "
                                    f"for 2 bytes, torch.uint8 for 1)") from None
    elif isinstance(value, np.ndarray):
        kind, arr = "ndarray", value
    elif isinstance(value, np.generic):
        kind, arr = "npscalar", np.asarray(value)
    elif isinstance(value, bool):
        kind, arr = "bool", np.asarray(value, dtype=np.bool_)
    elif isinstance(value, int):
        kind = "int"
        if not -2 ** 63 <= value < 2 ** 63:
            raise DDStoreValueError(f"key {key!r}: int {value} does not fit in int64")
        arr = np.asarray(value, dtype=np.int64)
    elif isinstance(value, float):
        kind, arr = "float", np.asarray(value, dtype=np.float64)
    else:
        raise DDStoreValueError(f"key {key!r} has type {type(value).__name__}; storable "
                                f"values are torch tensors, numpy arrays and scalars, "
                                f"and Python int/float/bool")
    if arr.dtype.kind not in _STORABLE or not storable(arr.dtype):  # (long double too)
        raise DDStoreValueError(f"key {key!r} has dtype {arr.dtype}, which cannot be "
                                f"stored (allowed: bool, integers, float16-float64, "
                                f"complex64-complex128)")
    if not arr.dtype.isnative:  # a big-endian array: its values, in this machine's order
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.ndim == 0:
        return arr.reshape(1), KeyLayout(key, kind, 0, None, arr.dtype, ())
    cat_dim = data.__cat_dim__(key, value) if kind in ("tensor", "ndarray") else 0
    if not isinstance(cat_dim, (int, np.integer)):
        raise DDStoreValueError(f"key {key!r}: concatenation dimension {cat_dim!r} is "
                                f"not supported")
    cat_dim = int(cat_dim) % arr.ndim
    stored = np.moveaxis(arr, cat_dim, 0) if cat_dim else arr
    return (np.ascontiguousarray(stored),
            KeyLayout(key, kind, arr.ndim, cat_dim, arr.dtype, stored.shape[1:]))


class GraphLayout:
    """The per-key layout of a graph data set (the same for every sample).

    Build one with :meth:`of` from a sample; :meth:`to_record` checks a sample against
    it and converts it; :meth:`to_data` converts a record back into a ``Data``.
    """

    def __init__(self, keys):
        self.keys = tuple(KeyLayout(*k) for k in keys)
        if not self.keys:
            raise DDStoreValueError("a graph sample needs at least one key")
        self.by_key = {k.key: k for k in self.keys}
        self._plan_collate()

    @classmethod
    def of(cls, sample):
        """``(layout, record)`` of one sample."""
        data, items = _items(sample)
        record, keys = {}, []
        for key, value in items:
            record[key], lay = _to_record_value(data, key, value)
            keys.append(lay)
        return cls(keys), record

    def to_list(self):
        """JSON-able form (``GraphLayout(layout.to_list())`` rebuilds it)."""
        return [[k.key, k.kind, k.ndim, k.cat_dim, k[4], list(k.trailing)]
                for k in self.keys]

    def __eq__(self, other):
        return isinstance(other, GraphLayout) and self.keys == other.keys

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self.keys)

    def difference(self, other):
        """A message saying how ``other`` differs from this layout (None if equal)."""
        mine, theirs = self.by_key, other.by_key
        missing = [k for k in mine if k not in theirs]
        extra = [k for k in theirs if k not in mine]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing keys {missing}")
            if extra:
                parts.append(f"extra keys {extra}")
            return ", ".join(parts)
        for key, lay in mine.items():
            if theirs[key] != lay:
                return (f"key {key!r} is {theirs[key].describe()}, expected "
                        f"{lay.describe()}")
        return None

    def to_record(self, sample, reference=None):
        """Check ``sample`` against this layout and return its record.  Raises
        :class:`DDStoreValueError` naming the key that differs (and, given, the sample
        ``reference`` the layout was taken from: it may be the odd one)."""
        layout, record = GraphLayout.of(sample)
        if layout.keys != self.keys:
            if set(layout.by_key) == set(self.by_key) and layout.difference(self) is None:
                return record  # same keys, other insertion order
            raise DDStoreValueError(self.difference(layout) + (
                "" if reference is None else f" compared with sample {reference} (every "
                f"sample needs the keys of the others; either may be the odd one)"))
        return record

    def check_record(self, record):
        """Check a stored-layout record (as read from a CFF file) against the layout."""
        if set(record) != set(self.by_key):
            raise DDStoreValueError(f"keys {sorted(record)}, expected "
                                    f"{sorted(self.by_key)}")
        for key, arr in record.items():
            lay = self.by_key[key]
            if arr.dtype != lay.dtype or arr.shape[1:] != lay.trailing:
                raise DDStoreValueError(f"key {key!r} has dtype {arr.dtype} row shape "
                                        f"{arr.shape[1:]}, expected {lay.dtype} "
                                        f"{lay.trailing}")
            if lay.ndim == 0 and arr.shape[0] != 1:
                raise DDStoreValueError(f"key {key!r} is a scalar but has "
                                        f"{arr.shape[0]} rows")
        return record

    # ------------------------------------------------------------------ reading
    def value(self, key, rows):
        """The original value of ``key`` from its stored rows."""
        lay = self.by_key[key]
        if lay.ndim == 0:
            arr = rows.reshape(())
        elif lay.cat_dim:
            arr = np.ascontiguousarray(np.moveaxis(rows, 0, lay.cat_dim))
        else:
            arr = rows
        if lay.kind == "tensor":
            # (np.ascontiguousarray would turn a 0-d array into 1-d)
            return torch.from_numpy(arr if arr.flags.c_contiguous else arr.copy())
        if lay.kind == "ndarray":
            return arr
        if lay.kind == "npscalar":
            return arr[()]
        return arr.item()

    def to_data(self, record):
        """A ``torch_geometric.data.Data`` from a record."""
        from torch_geometric.data import Data
        data = Data()
        for lay in self.keys:
            _set(data, lay.key, self.value(lay.key, record[lay.key]))
        return data

    def to_data_list(self, packed, sizes):
        """``Data`` objects from packed rows (``{key: rows of every record}``) and
        per-record sizes: what ``DDStore.get_records_packed`` returns."""
        from torch_geometric.data import Data
        n = len(next(iter(sizes.values())))
        columns = []
        for lay in self.keys:
            rows, counts = packed[lay.key], np.asarray(sizes[lay.key]).tolist()
            if lay.kind == "tensor" and lay.ndim:
                if lay.cat_dim:  # moved once, in numpy (torch's movedim + contiguous of
                    # an [E, 2] int64 array per graph cost 4-7x more), then cut
                    moved = torch.from_numpy(np.ascontiguousarray(
                        np.moveaxis(rows, 0, lay.cat_dim)))
                    parts = [p.contiguous() for p in
                             torch.split(moved, counts, dim=lay.cat_dim)]
                else:
                    parts = torch.split(torch.from_numpy(rows), counts)
            elif lay.kind == "tensor":
                parts = list(torch.from_numpy(rows).unbind(0))
            else:
                bounds = np.cumsum(counts)[:-1]
                parts = [self.value(lay.key, r) for r in np.split(rows, bounds)]
            columns.append((lay.key, parts))
        out = []
        for i in range(n):
            data = Data()
            for key, parts in columns:
                _set(data, key, parts[i])
            out.append(data)
        return out

    def split_packed(self, packed, sizes):
        """Records (dicts of row views) from packed rows and per-record sizes."""
        n = len(next(iter(sizes.values())))
        bounds = {k: np.concatenate([[0], np.cumsum(sizes[k])]) for k in packed}
        return [{k: packed[k][bounds[k][i]:bounds[k][i + 1]] for k in packed}
                for i in range(n)]

    # ------------------------------------------------------------------ batching
    def _plan_collate(self):
        """Decide whether :func:`collate_records` can build batches directly."""
        self.node_key = None
        self.fast = all(k.kind == "tensor" for k in self.keys)
        for lay in self.keys:
            if lay.key in _NODE_KEYS and lay.ndim >= 1 and self.node_key is None:
                self.node_key = lay.key
            if lay.key in ("num_nodes", "ptr") or "batch" in lay.key:
                self.fast = False
            if ("index" in lay.key or lay.key == "face") and lay.dtype.kind not in "iu":
                self.fast = False
        if self.node_key is None:
            self.fast = False


def _set(data, key, value):
    """``data[key] = value``; straight into the storage's mapping when PyG has one (a
    fresh ``Data`` has no cached properties to invalidate, and this is 3x faster)."""
    mapping = getattr(data._store, "_mapping", None)
    if isinstance(mapping, dict):
        mapping[key] = value
    else:  # pragma: no cover - other PyG versions
        data[key] = value


def _exclusive_cumsum(counts):
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def collate_records(layout, packed, sizes):
    """A PyG ``Batch`` of the records whose rows are ``packed`` (``{key: rows of every
    record, in order}``) with per-record row counts ``sizes`` (``{key: counts}``).

    Equal to ``Batch.from_data_list([layout.to_data(r) for r in records])`` (the same
    attributes, ``batch``/``ptr`` vectors and slice/increment tables), but built with one
    concatenation-free pass: the rows are already concatenated.  Layouts this fast path
    does not cover (non-tensor values, no node-count key, ``*batch*`` keys) fall back to
    ``Batch.from_data_list``.
    """
    from torch_geometric.data import Batch
    if not layout.fast:
        return Batch.from_data_list(layout.to_data_list(packed, sizes))
    num_nodes = np.asarray(sizes[layout.node_key], dtype=np.int64)
    ngraphs = len(num_nodes)
    node_start = _exclusive_cumsum(num_nodes)
    out = new_data_batch()
    slice_dict, inc_dict = {}, {}
    zeros = torch.zeros(ngraphs, dtype=torch.int64)
    for lay in layout.keys:
        rows = packed[lay.key]
        counts = np.asarray(sizes[lay.key], dtype=np.int64)
        # the rows in PyG's layout (the concatenation dimension moved from first to
        # cat_dim) and an index's node offsets added, in one numpy pass into a new array
        # (two passes before, the second torch's movedim + contiguous: 4x slower)
        ax = lay.cat_dim if lay.ndim and lay.cat_dim else 0
        moved = np.moveaxis(rows, 0, ax) if ax else rows
        if "index" in lay.key or lay.key == "face":
            inc = np.repeat(node_start[:-1], counts).astype(rows.dtype, copy=False)
            shape = [1] * rows.ndim
            shape[ax] = -1
            value = np.add(moved, inc.reshape(shape), out=np.empty(moved.shape, rows.dtype))
            inc_dict[lay.key] = torch.from_numpy(node_start[:-1].copy())
        else:
            value = np.ascontiguousarray(moved) if ax else rows
            inc_dict[lay.key] = zeros
        out[lay.key] = torch.from_numpy(value)
        slice_dict[lay.key] = torch.from_numpy(_exclusive_cumsum(counts))
    out.batch = torch.from_numpy(np.repeat(np.arange(ngraphs, dtype=np.int64), num_nodes))
    out.ptr = torch.from_numpy(node_start)
    return set_batch_tables(out, ngraphs, slice_dict, inc_dict)
