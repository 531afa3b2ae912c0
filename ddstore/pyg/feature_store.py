"""PyG's ``FeatureStore`` over a :class:`~ddstore.DDStore`: node and edge attributes striped
by row range over each group, replicated by ``width``."""
import dataclasses

import numpy as np
import torch
from torch_geometric.data import FeatureStore as _PygFeatureStore
from torch_geometric.data import TensorAttr as _PygTensorAttr
from torch_geometric.data.feature_store import _FieldStatus

from .._checks import as_indices, check_indices, is_int, partition
from .._collective import mark_agreed
from ..errors import DDStoreError, DDStoreIndexError, DDStoreValueError
from ..placement import member_offsets
from ..temporal.build import CHUNK_BYTES, fill_rows
from ._common import (EDGES, as_numpy, call_piece, edge_var, is_edge_type, node_var,
                      piece_error, rows_error, storable_error, tiling_error)

__all__ = ["FeatureStore", "TensorAttr", "UnknownAttributeError", "edge_features",
           "default_chunk_rows"]


def default_chunk_rows(num_rows, row_bytes):
    """Rows per rank per round of a range-wise put by default: about 1/64 of the rank's
    ``num_rows`` (so that a round's piece stays a small fraction of what it puts), at
    least 4096, but never so many that one piece exceeds ``CHUNK_BYTES / 4`` (16 MB)
    (at least 1)."""
    cap = max(1, (CHUNK_BYTES // 4) // max(1, int(row_bytes)))
    want = max(4096, -(-int(num_rows) // 64))
    return int(min(cap, want))


class UnknownAttributeError(DDStoreValueError, KeyError):
    """An attribute that the feature store does not hold (also a ``KeyError``, what PyG's
    stores raise for a missing key)."""

    def __str__(self):  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclasses.dataclass
class TensorAttr(_PygTensorAttr):
    """PyG's ``TensorAttr`` with ``group_name`` and ``index`` defaulting to None (a
    homogeneous graph's node attribute; the whole tensor), so that
    ``feature_store.put_tensor(x, attr_name="x")`` is fully specified."""

    def __init__(self, group_name=None, attr_name=_FieldStatus.UNSET, index=None):
        super().__init__(group_name, attr_name, index)


class _Attr:
    __slots__ = ("group_name", "attr_name", "var", "num_rows", "row_shape")

    def __init__(self, group_name, attr_name, var, num_rows, row_shape):
        self.group_name, self.attr_name, self.var = group_name, attr_name, var
        self.num_rows, self.row_shape = num_rows, row_shape


class FeatureStore(_PygFeatureStore):
    """PyG's ``torch_geometric.data.FeatureStore`` over a :class:`~ddstore.DDStore`.

    An attribute is keyed by ``(group_name, attr_name)``:

    - a **node** attribute has ``group_name`` = a node type (a str) or None (a homogeneous
      graph); row ``i`` belongs to node ``i`` of that type;
    - an **edge** attribute has ``group_name`` = an edge type ``(src, rel, dst)``; row
      ``i`` belongs to edge id ``i`` of that type, the id the :class:`GraphStore` gives
      the edge (its position in the edge index as put) and the sampler returns in
      ``edge`` / the loaders in ``e_id``.  A homogeneous graph's edge attributes use the
      edge type :data:`EDGES` (``("_N", "to", "_N")``).

    Layout: every attribute is one store variable (``"<name>/node/<type>/<attr>"`` or
    ``"<name>/edge/<src>__<rel>__<dst>/<attr>"``) of ``num_rows`` rows striped over each
    group (member ``g`` holds rows ``partition(num_rows, width, g)``) and replicated in
    every group.  Reads are one-sided and need nothing from the owners.

    Putting is **collective** (every rank, same order, same attributes: checked, and a
    mismatch or bad input on any rank raises the same :class:`~ddstore.DDStoreError` on
    every rank with nothing added):

    - ``put_tensor(x, group_name=..., attr_name=...)`` (PyG's call, also
      ``fs[group, attr] = x``): the quick path, **every rank passes the whole tensor**
      (same shape and dtype, checked; the values must be equal too, not checked) and
      keeps its own member's rows;
    - :meth:`put_range` ``(x, rows=(lo, hi), group_name=..., attr_name=...)``: the
      range-wise path for data that does not fit one rank: **each rank passes its own
      rows** ``[lo, hi)`` (an array, or a callable ``rows_of(a, b)`` giving them piece by
      piece); the ranks' ranges must cover ``[0, num_rows)`` exactly once (any split,
      e.g. ``partition(num_rows, size, rank)``); the variable is created at its final
      size and the rows are sent to their owners in every group, ``chunk_rows`` rows per
      rank per round (a keyword of the constructor; default
      :func:`default_chunk_rows`), received straight into the owners' chunks.

    Reading is local: ``get_tensor(group_name=..., attr_name=..., index=idx)`` (rows
    ``idx`` in request order; ``index=None`` reads the whole tensor onto this rank) and
    ``multi_get_tensor([...])``, which reads every attribute with one batched read per
    store variable (all indices of all requests for that variable together, one access
    epoch with one flush per owner).  Results are CPU ``torch`` tensors.

    ``get_all_tensor_attrs()`` lists the **node** attributes (what PyG's loaders gather
    for every sampled node; they would index edge attributes by node ids otherwise);
    :meth:`edge_tensor_attrs` lists the edge attributes, and :func:`edge_features`
    attaches them to loaded mini-batches by ``e_id``.
    """

    def __init__(self, store, name="pyg", chunk_rows=None):
        super().__init__(tensor_attr_cls=TensorAttr)
        if not isinstance(name, str) or not name:
            raise DDStoreValueError(f"FeatureStore name must be a non-empty str, got "
                                    f"{name!r}")
        if chunk_rows is not None and not (is_int(chunk_rows) and chunk_rows >= 1):
            raise DDStoreValueError(f"feature store {name!r}: chunk_rows={chunk_rows!r} "
                                    f"must be an integer >= 1 (rows per rank per round of "
                                    f"put_range) or None")
        self.__dict__["chunk_rows"] = None if chunk_rows is None else int(chunk_rows)
        self.__dict__["store"] = store
        self.__dict__["name"] = name
        self.__dict__["_attrs"] = {}  # (group_name, attr_name) -> _Attr

    # ------------------------------------------------------------------ putting
    def _key_error(self, attr, what):
        g, a = attr.group_name, attr.attr_name
        if not (g is None or isinstance(g, str) or is_edge_type(g)):
            return DDStoreValueError, (f"{what}: group_name must be None, a node type (str)"
                                       f" or an edge type (src, rel, dst), got {g!r}")
        if not isinstance(a, str) or not a:
            return DDStoreValueError, f"{what}: attr_name must be a non-empty str, got {a!r}"
        if (g, a) in self._attrs:
            return DDStoreValueError, (f"{what}: attribute ({g!r}, {a!r}) is already stored;"
                                       f" remove_tensor it first (collective)")
        return None

    def _var_of(self, group_name, attr_name):
        if is_edge_type(group_name):
            return edge_var(self.name, group_name, attr_name)
        return node_var(self.name, group_name, attr_name)

    def _put(self, tensor, attr, rows):
        """The collective put behind both paths; ``rows`` None: whole tensor."""
        store = self.store
        store.check_alive()
        what = f"put ({attr.group_name!r}, {attr.attr_name!r})"
        error = self._key_error(attr, what)
        if error is None and attr.index is not None:
            error = (DDStoreValueError, f"{what}: index must be None (the whole tensor); "
                                        f"put rows of a range with put_range")
        arr = rows_of = first = None
        lo = hi = 0
        if error is None and rows is not None and callable(tensor):
            error, lo, hi = rows_error(rows, None, what)
            if error is None:
                rows_of = _checked_rows(tensor, what)
                try:  # the first piece (one row by default) gives dtype and row shape
                    first = rows_of(0, min(hi - lo, self.chunk_rows or 1), None)
                    arr = first
                except (DDStoreError, MemoryError) as exc:
                    error = piece_error(exc, what)
        elif error is None:
            arr, error = as_numpy(tensor, what)
        if error is None:
            error = storable_error(arr, what)
        if error is None and rows is not None and rows_of is None:
            error, lo, hi = rows_error(rows, arr.shape[0], what)
        ok = error is None
        var = self._var_of(attr.group_name, attr.attr_name) if ok else None
        if ok and var in store:
            error = (DDStoreValueError, f"{what}: the store already holds variable {var!r}")
            ok = False
        layout = (arr.dtype.str, tuple(arr.shape[1:])) if ok else None
        same = {"attribute": (attr.group_name, attr.attr_name), "dtype and row shape": layout}
        if rows is None:
            same["rows (the whole tensor on every rank)"] = arr.shape[0] if ok else None
        info = store.agree(error, call=("FeatureStore.put", repr((attr.group_name,
                                                                  attr.attr_name))),
                           extra=(lo, hi), same=same)
        key = (attr.group_name, attr.attr_name)
        with store.transaction(f"FeatureStore.put {key!r}") as txn:
            if rows is None:
                total = arr.shape[0]
                mlo, mhi = partition(total, store.group_size, store.group_rank)
                store.add(var, np.ascontiguousarray(arr[mlo:mhi]))
            else:
                err, total = tiling_error(info, what)
                if err is not None:  # decided from the gathered ranges: alike everywhere
                    raise mark_agreed(err[0](err[1]))
                self._fill(var, arr, rows_of, first, lo, hi, total)
            self._attrs[key] = _Attr(attr.group_name, attr.attr_name, var, int(total),
                                     tuple(arr.shape[1:]))
            # an enclosing transaction that fails later removes the variable: forget it
            txn.on_rollback(lambda: self._attrs.pop(key, None))
        return True

    def _fill(self, var, arr, rows_of, first, lo, hi, total):
        """Collective: create ``var`` at its final size and fill this member's rows in
        place from every rank's rows ``[lo, hi)`` (the array ``arr``, or ``first`` then
        the pieces of ``rows_of``), one piece per rank per round
        (:func:`~ddstore.temporal.build.fill_rows`)."""
        store = self.store
        off = member_offsets(total, store.group_size)
        g = store.group_rank
        n = hi - lo
        row_bytes = arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
        step = self.chunk_rows or default_chunk_rows(n, row_bytes)

        def pieces():
            a = 0
            if first is not None:
                yield [first]
                a = first.shape[0]
            while a < n:
                b = min(a + step, n)
                yield [arr[a:b] if rows_of is None else rows_of(a, b, first)]
                a = b
        store.init(var, int(off[g + 1] - off[g]), arr.shape[1:], arr.dtype)
        view = store.local_view(var)  # removed by _put's transaction on failure
        fill_rows(store, off, lo, pieces(), [view])
        del view
        store.sync()

    def _put_tensor(self, tensor, attr):
        """Collective (PyG's ``put_tensor``): every rank passes the whole tensor."""
        return self._put(tensor, attr, None)

    def put_range(self, tensor, rows, group_name=None, attr_name="x"):
        """Collective: store an attribute from each rank's own rows.

        ``tensor`` holds rows ``rows = (lo, hi)`` of the attribute: an array or tensor
        of ``hi - lo`` rows, or a callable ``rows_of(a, b)`` returning the **local**
        rows ``[a, b)`` (global rows ``lo + a`` to ``lo + b``) as an array or tensor of
        ``b - a`` rows, for sources that make or read rows on demand.  The callable is
        asked once for each piece, in order (``0 <= a <= b <= hi - lo``; the first piece
        is one row, or ``chunk_rows``, and ``rows_of(0, 0)`` on a rank with no rows: it
        must then return an empty ``[0, *row_shape]`` array of the dtype); every piece
        must have the first one's dtype and row shape.  Anything it raises is bad input
        like the rest: every rank raises (a :class:`~ddstore.DDStoreError` as it is,
        anything else as a :class:`~ddstore.DDStoreValueError` naming the call), and
        nothing is stored; a piece of the wrong shape or dtype raises naming what it
        returned.  An empty share is ``(lo, lo)``.

        The ranks' ranges must cover ``[0, num_rows)`` exactly once; ``num_rows`` is
        their union.  Dtype and row shape must be the same on every rank.  Every rank
        raises the same error on bad input anywhere (and nothing is stored).

        **Memory**: the variable is created at its final size and this member's rows
        are received straight into it, each rank sending ``chunk_rows`` rows per round
        (default :func:`default_chunk_rows`: about 1/64 of its rows, at most 16 MB) to
        their owners in every group: beyond what is stored, a put holds the rows passed
        in (only one piece of them, with a callable) and one round's piece.  Returns
        True.
        """
        return self._put(tensor, TensorAttr(group_name, attr_name, None), rows)

    def _remove_tensor(self, attr):
        """Collective: drop the attribute (every rank, the same one)."""
        store = self.store
        key = (attr.group_name, attr.attr_name)
        error = None
        if key not in self._attrs:
            error = (UnknownAttributeError, self._unknown(key, "remove_tensor"))
        store.agree(error, call=("FeatureStore.remove", repr(key)))
        store.remove(self._attrs.pop(key).var)
        return True

    # ------------------------------------------------------------------ reading
    def _unknown(self, key, what):
        known = sorted(map(repr, self._attrs))
        return f"{what}: no attribute {key!r} in feature store {self.name!r}; known: " \
               f"{', '.join(known) if known else 'none'}"

    def _lookup(self, attr, what="get_tensor"):
        a = self._attrs.get((attr.group_name, attr.attr_name))
        if a is None:
            self.store.check_alive()
            raise UnknownAttributeError(self._unknown((attr.group_name, attr.attr_name),
                                                      what))
        return a

    @staticmethod
    def _index(a, index, what):
        """``index`` as (None: everything) or an int64 array checked against the rows."""
        if index is None:
            return None
        if isinstance(index, slice):
            return np.arange(*index.indices(a.num_rows), dtype=np.int64)
        if is_int(index):
            index = [int(index)]
        if isinstance(index, torch.Tensor):
            if index.dtype == torch.bool:
                if index.numel() != a.num_rows:
                    raise DDStoreIndexError(f"{what}: boolean index of {index.numel()} "
                                            f"entries for {a.num_rows} rows")
                index = index.nonzero().view(-1)
            index = index.detach().cpu().numpy()
        idx = as_indices(index, what, a.num_rows)
        check_indices(idx, a.num_rows, what, item="index")
        return idx

    def _read(self, a, idx):
        if idx is None:
            out = self.store.get_range(a.var, 0, a.num_rows)
        else:
            out = self.store.get_batch(a.var, idx)
        return torch.from_numpy(out)

    def _get_tensor(self, attr):
        """Local: rows ``attr.index`` (None: all) of the attribute, a CPU tensor."""
        a = self._lookup(attr)
        what = f"get_tensor ({a.group_name!r}, {a.attr_name!r})"
        return self._read(a, self._index(a, attr.index, what))

    def _multi_get_tensor(self, attrs):
        """Local: every attribute of ``attrs``, with one batched read per store variable
        (the indices of every request for it concatenated)."""
        plan = {}  # var -> [(position, attr, idx)]
        out = [None] * len(attrs)
        for pos, attr in enumerate(attrs):
            a = self._lookup(attr, "multi_get_tensor")
            idx = self._index(a, attr.index,
                              f"multi_get_tensor ({a.group_name!r}, {a.attr_name!r})")
            if idx is None:
                out[pos] = self._read(a, None)
            else:
                plan.setdefault(a.var, []).append((pos, a, idx))
        for var, reqs in plan.items():
            a = reqs[0][1]
            if len(reqs) == 1:
                out[reqs[0][0]] = self._read(a, reqs[0][2])
                continue
            rows = self._read(a, np.concatenate([r[2] for r in reqs]))
            start = 0
            for pos, _, idx in reqs:
                out[pos] = rows[start:start + idx.shape[0]]
                start += idx.shape[0]
        return out

    def _get_tensor_size(self, attr):
        a = self._attrs.get((attr.group_name, attr.attr_name))
        if a is None:
            return None
        n = a.num_rows if attr.index is None else len(
            self._index(a, attr.index, "get_tensor_size"))
        return (n,) + a.row_shape

    def get_all_tensor_attrs(self):
        """The node attributes (see the class docstring for why not the edge ones)."""
        return [TensorAttr(a.group_name, a.attr_name, None) for a in self._attrs.values()
                if not is_edge_type(a.group_name)]

    def edge_tensor_attrs(self):
        """The edge attributes (``group_name`` an edge type)."""
        return [TensorAttr(a.group_name, a.attr_name, None) for a in self._attrs.values()
                if is_edge_type(a.group_name)]

    def num_rows(self, group_name, attr_name):
        """Rows of an attribute (nodes or edges of its type)."""
        return self._lookup(TensorAttr(group_name, attr_name), "num_rows").num_rows

    def __repr__(self):
        return f"FeatureStore({self.name!r}, attributes={sorted(map(repr, self._attrs))})"


def edge_features(feature_store, attr_names=None):
    """A ``transform`` for PyG's loaders that attaches edge attributes to each mini-batch
    by its ``e_id`` (PyG's remote-backend path gathers node attributes only):
    ``NeighborLoader(..., transform=edge_features(fs))``.  ``attr_names``: which edge
    attributes (default: all).  A homogeneous batch gets ``data[attr]``, a heterogeneous
    one ``data[edge_type][attr]``; every attribute is read in one
    :meth:`FeatureStore.multi_get_tensor`."""
    def transform(data):
        from torch_geometric.data import HeteroData
        want, where = [], []
        for ta in feature_store.edge_tensor_attrs():
            if attr_names is not None and ta.attr_name not in attr_names:
                continue
            if isinstance(data, HeteroData):
                if ta.group_name not in data.edge_types or "e_id" not in data[ta.group_name]:
                    continue
                want.append(TensorAttr(ta.group_name, ta.attr_name,
                                       data[ta.group_name].e_id))
                where.append(data[ta.group_name])
            elif ta.group_name == EDGES and "e_id" in data:
                want.append(TensorAttr(ta.group_name, ta.attr_name, data.e_id))
                where.append(data)
        for ta, dst, t in zip(want, where, feature_store.multi_get_tensor(want)):
            dst[ta.attr_name] = t
        return data
    return transform


def _checked_rows(rows_of, what):
    """``get(a, b, first)`` over a user's callable ``rows_of(a, b)``: its piece checked
    (``b - a`` rows; with ``first``, its dtype and row shape), anything it raises turned
    into a :class:`~ddstore.DDStoreError` (agreed by the caller)."""
    def get(a, b, first):
        out, arr = call_piece(rows_of, "rows_of", a, b, what)
        if arr.ndim < 1 or arr.shape[0] != b - a:
            raise DDStoreValueError(f"{what}: rows_of({a}, {b}) returned "
                                    f"{type(out).__name__} of shape {tuple(arr.shape)}; "
                                    f"expected {b - a} rows (local rows [{a}, {b}))")
        if first is not None and (arr.dtype != first.dtype or
                                  arr.shape[1:] != first.shape[1:]):
            raise DDStoreValueError(f"{what}: rows_of({a}, {b}) returned dtype {arr.dtype} "
                                    f"row shape {tuple(arr.shape[1:])}; its first piece had "
                                    f"{first.dtype} {tuple(first.shape[1:])} (every piece "
                                    f"must have the same)")
        return arr
    return get
