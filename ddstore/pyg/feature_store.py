"""PyG's ``FeatureStore`` over a :class:`~ddstore.DDStore`: node and edge attributes striped
by row range over each group, replicated by ``width``."""
import copy

import numpy as np
import torch
from torch_geometric.data import FeatureStore as _PygFeatureStore
from torch_geometric.data import TensorAttr
from torch_geometric.data.feature_store import _FieldStatus

from .._checks import (as_indices, cast_values, check_free_names, check_indices,
                       host_tensor, integer_scalar, is_int)
from .._collective import call_name
from .._readers import ahead
from ..errors import DDStoreError, DDStoreIndexError, DDStoreStateError, DDStoreValueError
from ..placement import member_offsets
from ..build import CHUNK_BYTES, fill_rows
from ._common import (EDGES, FEATURE_KIND, annotation_name, as_edge_type, as_source,
                      call_piece, check_rows, check_storable, check_store_name, edge_var,
                      find_annotation, is_edge_type, check_recorded,
                      node_var, recorded, same_values, tiled_total,
                      torch_dtype_named, type_from_json, type_to_json, ROLLED_BACK)
from ._forks import ForkVersion

__all__ = ["FeatureStore", "TensorAttr", "UnknownAttributeError", "edge_features",
           "default_chunk_rows"]

_UNSET = _FieldStatus.UNSET


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


def _filled(attr):
    """``attr`` with every UNSET field None (PyG's own rule when a view is called or an
    attribute deleted), a copy if anything changed, and a list edge type as a tuple."""
    g = as_edge_type(attr.group_name)
    unset = [key for key in attr.__dataclass_fields__ if getattr(attr, key) is _UNSET]
    if g is attr.group_name and not unset:  # (PyG's is_set fails on numpy indices)
        return attr
    attr = copy.copy(attr)
    attr.group_name = g
    for key in unset:
        setattr(attr, key, None)
    return attr


class _Attr:
    """An attribute as this object knows it: its variable's name ``var`` and a handle
    ``h`` on that variable (reads go through it: a variable another object of the name
    put in its place is not read as this one's)."""
    __slots__ = ("group_name", "attr_name", "var", "h", "num_rows", "row_shape", "dtype",
                 "torch_dtype")

    def __init__(self, group_name, attr_name, var, h, num_rows, row_shape, dtype,
                 torch_dtype):
        self.group_name, self.attr_name, self.var, self.h = group_name, attr_name, var, h
        self.num_rows, self.row_shape = num_rows, row_shape
        self.dtype, self.torch_dtype = dtype, torch_dtype  # stored numpy dtype; torch-only

    def layout(self):
        return (self.num_rows, self.row_shape, self.dtype.str,
                None if self.torch_dtype is None else str(self.torch_dtype))


class FeatureStore(_PygFeatureStore):
    """PyG's ``torch_geometric.data.FeatureStore`` over a :class:`~ddstore.DDStore`.

    An attribute is keyed by ``(group_name, attr_name)``:

    - a **node** attribute has ``group_name`` = a node type (a str) or None (a homogeneous
      graph); row ``i`` belongs to node ``i`` of that type;
    - an **edge** attribute has ``group_name`` = an edge type ``(src, rel, dst)`` (a list
      of three str is the same type); row ``i`` belongs to edge id ``i`` of that type,
      the id the :class:`GraphStore` gives the edge (its position in the edge index as
      put) and the sampler returns in ``edge`` / the loaders in ``e_id``.  A homogeneous
      graph's edge attributes use the edge type :data:`EDGES` (``("_N", "to", "_N")``);
    - ``attr_name=None`` is a key like the others: the group's own (unnamed) tensor, as
      PyG's ``fs[group] = x`` / ``fs[group]()`` use it.

    Keys are PyG's ``TensorAttr`` (``ddstore.pyg.TensorAttr`` is PyG's class), so views
    work as in PyG: ``fs[group, name]`` and ``fs.view().group.name`` are views,
    ``fs[group, name][idx]``, ``fs[group][name][idx]``, ``fs[group, name]()`` tensors.  A
    field left UNSET in a direct call (``put_tensor``, ``get_tensor``,
    ``multi_get_tensor``, ``remove_tensor``, ``update_tensor``, ``fs[group, name] = x``)
    is None, as when PyG calls a view: ``get_tensor(group_name=None, attr_name="x")``
    reads the whole tensor.

    Layout: every attribute is one store variable (``"<name>/node/<type>/<attr>"`` or
    ``"<name>/edge/<src>__<rel>__<dst>/<attr>"``) of ``num_rows`` rows striped over each
    group (member ``g`` holds rows ``partition(num_rows, width, g)``) and replicated in
    every group.  Reads are one-sided and need nothing from the owners.  Any dtype numpy
    has; torch-only dtypes (bfloat16, float8...) are stored as their bit pattern and read
    back as the torch dtype.

    Putting is **collective** (every rank, same order, same attributes: checked, and a
    mismatch or bad input on any rank raises the same :class:`~ddstore.DDStoreError` on
    every rank with nothing added or changed):

    - ``put_tensor(x, group_name=..., attr_name=..., index=None)`` (PyG's call, also
      ``fs[group, attr] = x``): the quick path, **every rank passes the whole tensor**
      (same shape, dtype and values, checked: a 64-bit fingerprint of the tensor, one
      pass over it on every rank; ``from_pyg`` fingerprints once for all its puts) and
      keeps its own member's rows.  ``x`` is any array-like PyG accepts: a torch tensor,
      a numpy array, an ``np.memmap`` or anything with ``shape`` and row slicing; those
      last ones are read only in this member's row range.  Putting an attribute already
      held replaces its values: in place when rows, row shape and dtype are the same,
      else the attribute is put again (as ``update_tensor``, below);
    - ``put_tensor(values, ..., index=idx)`` on an attribute already held writes rows
      ``idx`` (a tensor / array / list of row ids, negatives from the end, a slice, a
      boolean mask or an int), as PyG's ``Data`` does with ``out[idx] = values``:
      ``values`` broadcast to ``[len(idx), *row_shape]`` and cast (same kind) to the
      attribute's dtype; every rank passes the same ``idx`` and ``values`` and each
      writes the rows it holds.  On an attribute **not held**, a put with an index
      creates it, as PyG's stores accept (the index names the rows): ``largest index
      + 1`` rows, or the rows declared for its group by :meth:`declare_rows` (which
      lets an attribute be filled partition by partition in any order; negatives and
      open slices then count from that end), rows never written zeros; ``values`` has
      one row per indexed row (an int index: one row), which gives the row shape.
      Later puts with an index write rows within those;
    - :meth:`put_range` ``(x, rows=(lo, hi), group_name=..., attr_name=...)``: the
      range-wise path for data that does not fit one rank: **each rank passes its own
      rows** ``[lo, hi)`` (an array, or a callable ``rows_of(a, b)`` giving them piece by
      piece); the ranks' ranges must cover ``[0, num_rows)`` exactly once (any split,
      e.g. ``partition(num_rows, size, rank)``); the variable is created at its final
      size and the rows are sent to their owners in every group, ``chunk_rows`` rows per
      rank per round (a keyword of the constructor; default
      :func:`default_chunk_rows`), received straight into the owners' chunks.

    ``remove_tensor`` is collective and returns False (on every rank) for an attribute
    not held.

    Construction is collective too (every rank, the same ``name`` and ``chunk_rows``,
    checked): a bad argument on any rank raises the same error on every rank, and so
    does a ``name`` whose feature store in the store holds anything (:meth:`open`
    reopens it; the same for a :class:`GraphStore`).  An object whose name's record
    another object of the name changed since it last wrote or read it (one made over
    its empty record, or opened) refuses its next change as out of date.

    Reading is local: ``get_tensor(group_name=..., attr_name=..., index=idx)`` (rows
    ``idx`` in request order, as torch indexing: negatives count from the end, an int
    gives one row ``[*row_shape]``, a slice or boolean mask its rows; ``index=None``
    reads the whole tensor onto this rank) and ``multi_get_tensor([...])``, which reads
    every attribute with one batched read per store variable (all indices of all
    requests for that variable together, one access epoch with one flush per owner).
    Results are CPU ``torch`` tensors.  An attribute never stored raises
    :class:`UnknownAttributeError`, a ``KeyError`` as PyG's stores raise.

    ``get_all_tensor_attrs()`` lists the node attributes and the edge attributes of
    every edge type but a homogeneous graph's (:data:`EDGES`): PyG's homogeneous loaders
    gather **every** listed attribute by the batch's node ids (their
    ``filter_custom_store``), which would give a batch edge rows of the wrong ids;
    :meth:`edge_tensor_attrs` lists every edge attribute, and :func:`edge_features`
    attaches them to loaded mini-batches by ``e_id``.
    """

    def __init__(self, store, name="pyg", chunk_rows=None):
        super().__init__(tensor_attr_cls=TensorAttr)
        with store.collective("FeatureStore", name) as step:
            check_store_name(name, "FeatureStore", store, FEATURE_KIND)
            if chunk_rows is not None and not (is_int(chunk_rows) and chunk_rows >= 1):
                raise DDStoreValueError(f"feature store {name!r}: chunk_rows="
                                        f"{chunk_rows!r} must be an integer >= 1 (rows per "
                                        f"rank per round of put_range) or None")
            step.agree(same={"chunk_rows": chunk_rows})
        self.__dict__["chunk_rows"] = None if chunk_rows is None else int(chunk_rows)
        self.__dict__["store"] = store
        self.__dict__["name"] = name
        self.__dict__["_attrs"] = {}  # (group_name, attr_name) -> _Attr
        self._track_changes()
        # the record of the name it replaces (an empty one's, or none)
        self.__dict__["_recorded"] = recorded(store, FEATURE_KIND, name)
        # group_name -> rows (declare_rows; the graph store of this name reads them
        # from the record, as the attributes' torch-only dtypes: declared_rows)
        self.__dict__["_declared"] = {}
        self.__dict__["_rolled_back"] = ""  # said with "known: none" after a rollback
        with store.transaction(f"FeatureStore {name!r}") as txn:  # (a rollback: the
            txn.on_rollback(lambda: self.__dict__.__setitem__(  # journal gives the name
                "_rolled_back", ROLLED_BACK % "FeatureStore"))  # its record of before)
            self._annotate_in_step()

    # ------------------------------------------------------------ checkpoint
    def _annotate_in_step(self):
        """Collective, a step of the call that changed the attributes: :meth:`_annotate`,
        a rank failing in it agreed, so that the call's transaction rolls back on every
        rank (whose journal gives the annotation back: a rollback's callables only set
        the attributes back and tell forked workers, :meth:`_changed`)."""
        with self.store.collective(None):
            self._annotate()

    def _annotate(self):
        """Local, alike on every rank, at the end of every collective call that changes
        the attributes or declarations: record them in the store's annotation
        ``"<name>#pyg.FeatureStore"`` (:meth:`DDStore.annotate`), what :meth:`open`
        rebuilds the feature store from after :meth:`DDStore.restore`."""
        attrs = [[type_to_json(a.group_name), a.attr_name, a.var, a.num_rows,
                  list(a.row_shape), a.dtype.str,
                  None if a.torch_dtype is None else str(a.torch_dtype)]
                 for a in self._attrs.values()]
        declared = [[type_to_json(g), n] for g, n in self._declared.items()]
        self._check_mine()
        self._changed()
        prev, mine = self._recorded, self.__dict__
        with self.store.transaction("FeatureStore record") as txn:  # (joins the call's)
            txn.on_rollback(lambda: mine.__setitem__("_recorded", prev))  # (the journal
            self.store.annotate(  # puts the annotation back: this object's again)
                annotation_name(FEATURE_KIND, self.name), FEATURE_KIND,
                {"name": self.name, "chunk_rows": self.chunk_rows, "attrs": attrs,
                 "declared": declared}, variables=[a.var for a in self._attrs.values()])
            mine["_recorded"] = recorded(self.store, FEATURE_KIND, self.name)

    # ------------------------------------------------------------ forked workers
    def _check_mine(self):
        """Local, in a step of a change: refuse it when another object of the name
        changed the record since this one wrote or read it (:func:`check_recorded`;
        in the change's first step too: a removal sets the record aside)."""
        check_recorded(self.store, FEATURE_KIND, self.name, self._recorded,
                       "FeatureStore")

    def _track_changes(self):
        """Note the process that owns this feature store (the rank) and a version of its
        attributes shared with the processes forked from it (DataLoader workers):
        :meth:`_changed` in the rank, :meth:`_check_fresh` in a worker."""
        self.__dict__["_forks"] = ForkVersion(
            "feature store", self.name,
            "an attribute was put, removed or replaced, e.g. by update_tensor with another "
            "dtype, row shape or number of rows, or rows were written in place into "
            "memory the workers do not share")

    def _changed(self):
        """In the rank, after the attributes changed: a new version."""
        self._forks.changed()

    def _check_fresh(self, what):
        """In a process forked from the rank (a DataLoader worker, persistent ones kept
        over epochs): raise :class:`DDStoreStateError` when the rank has changed the
        attributes or declarations since the fork (an attribute put, removed or
        replaced, e.g. by ``update_tensor`` with another dtype, row shape or number of
        rows).  Such a worker holds the old attribute table and the old variables'
        mappings: it would serve stale rows (or another dtype's bytes), or miss a new
        attribute.  Writes in place (``update_tensor`` of the same layout, puts with an
        index) change no version where this rank's rows are in shared memory (a group of
        several ranks on one node): the workers read the new rows there; where they are
        not (a group of one rank), the workers' copy is old and they refuse too."""
        self._forks.check(what)

    @classmethod
    def open(cls, store, name="pyg"):
        """Local: the feature store ``name`` of ``store`` as it was saved
        (:meth:`DDStore.save`), reopened from a store made by :meth:`DDStore.restore`
        (or :meth:`DDStore.load`) at any rank count and width, with no source data:
        every attribute (its rows, row shape, dtype -- torch-only dtypes included), the
        rows declared by :meth:`declare_rows` and ``chunk_rows``.  Reads give the tensors
        they gave before the save; puts, ``remove_tensor`` and the rest work as on the
        feature store that was saved.  Also works on the store that built it (another
        object over the same variables).  No communication: every rank calls it (it is
        deterministic from what every rank holds alike).  An unknown ``name`` raises a
        :class:`~ddstore.DDStoreValueError` naming the feature stores held."""
        ann = find_annotation(store, FEATURE_KIND, name, "FeatureStore.open")
        with ann.reading(f"FeatureStore.open({name!r})") as meta:
            self = cls.__new__(cls)
            _PygFeatureStore.__init__(self, tensor_attr_cls=TensorAttr)
            self.__dict__["chunk_rows"] = meta["chunk_rows"]
            self.__dict__["_rolled_back"] = ""
            self.__dict__["store"] = store
            self.__dict__["name"] = name
            attrs = {}
            for group, attr_name, var, num_rows, row_shape, dtype, tdt in meta["attrs"]:
                group, dtype = type_from_json(group), np.dtype(dtype)
                row_shape, tdt = tuple(row_shape), torch_dtype_named(tdt)
                if var not in store or store.nrows(var) != num_rows or \
                        np.dtype(store.dtype(var)) != dtype or \
                        tuple(store.row_shape(var)) != row_shape:
                    raise DDStoreValueError(
                        f"FeatureStore.open {name!r}: attribute {(group, attr_name)!r} needs "
                        f"variable {var!r} of {num_rows} rows of {row_shape} {dtype}, which "
                        f"the store does not hold")
                now = self._var_of(group, attr_name)
                if var != now:  # saved before names were escaped (docs/pyg.md): the graph
                    # store, which finds times and weights by name, would miss it
                    raise DDStoreValueError(
                        f"FeatureStore.open {name!r}: attribute {(group, attr_name)!r} was "
                        f"saved as variable {var!r}, which this version names {now!r} (a "
                        f"type or attribute name with '/', '%' or a double, leading or "
                        f"trailing underscore): put the graph again from its source")
                attrs[(group, attr_name)] = _Attr(group, attr_name, var, store.handle(var),
                                                  int(num_rows), row_shape, dtype, tdt)
            self.__dict__["_declared"] = {type_from_json(g): int(n)
                                          for g, n in meta["declared"]}
        self.__dict__["_attrs"] = attrs
        self._track_changes()
        self.__dict__["_recorded"] = ann  # (the record it was opened from)
        return self

    # ------------------------------------------------ PyG's calls, UNSET fields None
    def _cast(self, args, kwargs):
        return _filled(self._tensor_attr_cls.cast(*args, **kwargs))

    def put_tensor(self, tensor, *args, **kwargs):
        """Collective: PyG's ``put_tensor`` (see the class docstring)."""
        return self._put_tensor(tensor, self._cast(args, kwargs))

    def get_tensor(self, *args, convert_type=False, **kwargs):
        """Local: PyG's ``get_tensor`` (see the class docstring)."""
        attr = self._cast(args, kwargs)
        out = self._get_tensor(attr)
        return self._to_type(attr, out) if convert_type else out

    def multi_get_tensor(self, attrs, convert_type=False):
        """Local: PyG's ``multi_get_tensor``, one batched read per store variable."""
        attrs = [_filled(self._tensor_attr_cls.cast(a)) for a in attrs]
        out = self._multi_get_tensor(attrs)
        if convert_type:
            out = [self._to_type(a, t) for a, t in zip(attrs, out)]
        return out

    def remove_tensor(self, *args, **kwargs):
        """Collective: drop an attribute; False (on every rank) if it is not held."""
        return self._remove_tensor(self._cast(args, kwargs))

    def get_tensor_size(self, *args, **kwargs):
        """Local: the shape ``get_tensor`` would return, or None for an attribute not
        held."""
        return self._get_tensor_size(self._cast(args, kwargs))

    def update_tensor(self, tensor, *args, **kwargs):
        """Collective: PyG's ``update_tensor``, which is :meth:`put_tensor` here.  With an
        ``index``: writes those rows.  Without: the attribute's new whole value, written
        in place when rows, row shape and dtype are unchanged (all or nothing), otherwise
        the attribute is removed and put again (PyG's default): the new tensor is checked
        on every rank first, and the held rows are kept until the new ones are stored
        (until an enclosing :meth:`DDStore.transaction` commits): bad input (a dtype
        that cannot be stored, a tensor that differs between ranks, rows other than
        declared), a failed allocation or a rollback leaves the held attribute as it
        was.  Memory: the old and the new rows are both held meanwhile."""
        return self._put_tensor(tensor, self._cast(args, kwargs))

    def __setitem__(self, key, value):
        """Collective: ``fs[group, name] = x`` (``fs[group] = x``: attr_name None)."""
        self.put_tensor(value, self._tensor_attr_cls.cast(key))

    # ------------------------------------------------------------------ putting
    @staticmethod
    def _check_key(attr, what):
        g, a = attr.group_name, attr.attr_name
        if not (g is None or isinstance(g, str) or is_edge_type(g)):
            raise DDStoreValueError(f"{what}: group_name must be None, a node type (str) "
                                    f"or an edge type (src, rel, dst), got {g!r}")
        if a is not None and (not isinstance(a, str) or not a):
            raise DDStoreValueError(f"{what}: attr_name must be a non-empty str or None "
                                    f"(the group's own tensor), got {a!r}")

    def _var_of(self, group_name, attr_name):
        attr_name = "" if attr_name is None else attr_name
        if is_edge_type(group_name):
            return edge_var(self.name, group_name, attr_name)
        return node_var(self.name, group_name, attr_name)

    def _put_tensor(self, tensor, attr):
        """Collective (PyG's ``put_tensor``): every rank passes the whole tensor, or
        with an ``index`` the rows to write into an attribute already held."""
        attr = _filled(attr)
        a = self._attrs.get((attr.group_name, attr.attr_name))
        if a is None:
            return self._put(tensor, attr, None)
        return self._put_rows(tensor, attr, a)

    def _put_rows(self, tensor, attr, a):
        """Collective: write rows ``attr.index`` (None: all) of the held attribute ``a``
        from ``tensor`` (the same on every rank); each rank writes the rows it holds.
        The local part of the step (checks, and this member's rows taken from
        ``tensor``: an array-like is read there) may fail on any rank; once agreed, the
        rows are written into this rank's chunk and every rank syncs.  A whole value of
        another layout (rows, row shape, dtype) puts the attribute again after the step
        (as PyG's reference stores replace it)."""
        store = self.store
        what = f"put ({a.group_name!r}, {a.attr_name!r})"
        whole = attr.index is None or _is_all(attr.index)
        n = a.num_rows
        with store.collective("FeatureStore.put_rows",
                              repr((a.group_name, a.attr_name))) as step:
            self._check_mine()  # (another object may have replaced or removed it)
            off = member_offsets(n, store.group_size)
            mlo, mhi = int(off[store.group_rank]), int(off[store.group_rank + 1])
            at = count = None
            in_place = True
            if whole:
                arr, tdt = as_source(tensor, what)
                in_place = arr.ndim >= 1 and _layout(arr, tdt) == a.layout()
                mine = _member_rows(arr, mlo, mhi, what) if in_place and mhi > mlo \
                    else None
            else:
                idx = self._index(a, attr.index, what)
                vals = self._values(a, tensor, idx.shape[0], what)
                held = (idx >= mlo) & (idx < mhi)
                at, mine = idx[held] - mlo, vals[held]
                count = int(idx.shape[0])
            step.agree(same={"in place (the held layout)": bool(in_place),
                             "index rows": count, **same_values(
                {"values": tensor, "index": None if whole else attr.index}, what)})
        if not in_place:  # checked whole before the held rows go (_put's replacing)
            return self._put(tensor, attr, None, replacing=True)
        view = store.local_view(a.var)
        if whole:
            if mine is not None:
                view[:] = mine
        elif at.shape[0]:
            view[at] = mine
        del view
        store.sync()
        if store.private_rows(a.var):  # workers forked before hold a copy of the old
            self._changed()             # rows: refuse them (the core refuses them too)
        return True

    @staticmethod
    def _values(a, tensor, count, what):
        """``tensor`` as ``[count, *row_shape]`` rows of the attribute's stored dtype
        (broadcast as ``out[idx] = tensor`` would; cast within the same kind)."""
        if a.torch_dtype is not None:  # stored as the bit pattern of a torch dtype
            t = torch.as_tensor(tensor)
            if t.is_complex():
                raise DDStoreValueError(f"{what}: values of dtype {t.dtype} cannot be "
                                        f"written into a {a.torch_dtype} attribute")
            cast = t.to(a.torch_dtype)
            if a.torch_dtype.is_floating_point and t.dtype != a.torch_dtype:
                bad = torch.isfinite(t) & ~torch.isfinite(cast)  # (bfloat16, float8...)
                if bool(bad.any()):
                    where = tuple(int(i) for i in bad.nonzero()[0])
                    raise DDStoreValueError(
                        f"{what}: value {t[where].item()!r} at {where} does not fit the "
                        f"attribute's dtype {a.torch_dtype}; it would be stored as "
                        f"{cast[where].item()!r} ({int(bad.sum())} of {bad.numel()} values"
                        f" do not fit)")
            vals = cast.view(getattr(torch, a.dtype.name)).numpy()
        else:
            if isinstance(tensor, torch.Tensor):
                tensor = host_tensor(tensor, what).numpy()
            # as update writes: by value, one the dtype cannot hold refused (not wrapped)
            vals = cast_values(np.asarray(tensor), a.dtype, what, "the attribute's",
                               given=tensor)
        try:
            return np.broadcast_to(vals, (count,) + a.row_shape)
        except ValueError:
            raise DDStoreValueError(f"{what}: values of shape {tuple(vals.shape)} do not "
                                    f"fit {count} indexed rows of shape {a.row_shape}") \
                from None

    def _put(self, tensor, attr, rows, replacing=False, range_wise=False):
        """The collective put behind both paths; ``rows`` None: whole tensor (or, with
        ``attr.index``, the rows it names of an attribute created by this put).  Its
        first step's local part checks everything and reads what this rank needs (its
        member's rows of a whole tensor, the first piece of a callable); the round
        agrees on them and on the ranks' row ranges, then the variable is made in a
        transaction.  ``replacing`` (``update_tensor`` with another layout): the
        attribute is held; after that round its variable is set aside
        (``txn.set_aside``), removed when the transaction commits."""
        store = self.store
        what = f"put ({attr.group_name!r}, {attr.attr_name!r})"
        key = (attr.group_name, attr.attr_name)
        with store.collective("FeatureStore.put", call_name(key)) as step:
            self._check_key(attr, what)
            self._check_mine()
            if range_wise and rows is None:  # (None is a whole put's: said, not taken)
                raise DDStoreValueError(f"put_range ({attr.group_name!r}, "
                                        f"{attr.attr_name!r}): rows must be (lo, hi), this "
                                        f"rank's rows of the attribute, got None")
            if key in self._attrs and not replacing:
                check_free_names(what, f"attribute {key!r}",
                                 "remove_tensor it first (collective)")
            declared = self._declared.get(attr.group_name)
            indexed = attr.index is not None and not _is_all(attr.index)
            rows_of = first = tdt = mine = None
            lo = hi = 0
            if rows is not None and callable(tensor):
                lo, hi = check_rows(rows, None, what)
                rows_of = _checked_rows(tensor, what)
                # the first piece (one row by default) gives dtype and row shape
                arr = first = rows_of(0, min(hi - lo, self.chunk_rows or 1), None)
            else:
                arr, tdt = as_source(tensor, what)
            if indexed:  # the rows the index names; the others are zeros
                idx, total, one = _first_index(attr.index, declared, what)
                arr = _member_rows(arr, 0, arr.shape[0], what) if arr.ndim else arr
                arr = arr[None] if one else arr
            check_storable(arr, what)
            if rows is not None and rows_of is None:
                lo, hi = check_rows(rows, arr.shape[0], what)
            var = self._var_of(attr.group_name, attr.attr_name)
            if var in store and not replacing:
                raise DDStoreValueError(f"{what}: the store already holds variable {var!r}")
            same = {"attribute": key, "dtype and row shape": (
                arr.dtype.str, tuple(arr.shape[1:]), None if tdt is None else str(tdt))}
            g = store.group_rank
            if indexed:
                if arr.shape[0] != idx.shape[0]:
                    raise DDStoreValueError(
                        f"{what}: {arr.shape[0]} rows of values for an index of "
                        f"{idx.shape[0]} rows (a first put with an index takes one row "
                        f"per indexed row: its rows give the attribute's row shape)")
                same["rows (the index's)"] = (total, idx.shape[0])
                off = member_offsets(total, store.group_size)
                mine = _scattered(arr, idx, int(off[g]), int(off[g + 1]))
            elif rows is None:  # every rank keeps its member's rows of the whole tensor
                total = arr.shape[0]
                same["rows (the whole tensor on every rank)"] = total
                off = member_offsets(total, store.group_size)
                mine = _member_rows(arr, int(off[g]), int(off[g + 1]), what)
            if rows is None:  # (range-wise puts give each rank's own rows)
                same.update(same_values({"values": tensor, "index": attr.index if
                                         indexed else None}, what))
            if rows is None and declared is not None and total != declared:
                raise DDStoreValueError(_not_declared(what, attr.group_name, declared,
                                                      total))
            info = step.agree((lo, hi), same=same)
            if rows is not None:  # decided from the agreed ranges: alike everywhere
                total = tiled_total(info, what)
                if declared is not None and total != declared:
                    raise DDStoreValueError(_not_declared(what, attr.group_name,
                                                          declared, total))
        with store.transaction(f"FeatureStore.put {key!r}") as txn:
            if replacing:  # every rank's checks passed: the held rows are set aside
                self._set_aside(key, txn)
            if rows is None:
                store.add(var, mine)
                del mine
            else:
                self._fill(var, arr, rows_of, first, lo, hi, total)
            self._attrs[key] = _Attr(attr.group_name, attr.attr_name, var,
                                     store.handle(var), int(total), tuple(arr.shape[1:]),
                                     arr.dtype, tdt)

            def forget():  # a rollback (this call's or an enclosing one's) removed it
                self._attrs.pop(key, None)
                self._changed()  # (the annotation: the journal's)
            txn.on_rollback(forget)
            self._annotate_in_step()
        return True

    def declare_rows(self, counts):
        """Collective: the number of rows of the attributes of some groups, given once:
        ``counts = {group_name: rows}`` (a node type, None for a homogeneous graph's
        nodes: its number of nodes; an edge type: its number of edges).

        - A first put **with an index** of an attribute of such a group creates it with
          that many rows (rows never written read as zeros; without a declaration the
          attribute has ``largest index + 1`` rows), so that an attribute can be filled
          index by index (partition by partition) in any order; negative indices then
          count from the end.
        - Every put of an attribute of the group (whole, with an index, range-wise) must
          have that many rows: refused otherwise, naming the declaration.
        - The :class:`GraphStore` of the same store and name counts a declared node type
          among its nodes (after its edge types' sizes): a node type with no edges and
          no attributes (``HeteroData(paper=dict(num_nodes=100))``, which
          :func:`from_hetero` declares) is sampled (its seeds).  (The declarations are
          this feature store's, kept by checkpoints.)

        Every rank passes the same counts (checked).  Declaring a group again replaces
        its count; a count that an attribute of the group already held does not have
        is refused on every rank, nothing declared.  Inside a transaction that rolls
        back, the declarations are undone.  Returns None."""
        store = self.store
        what = f"declare_rows (feature store {self.name!r})"
        with store.collective("FeatureStore.declare_rows", self.name) as step:
            if not isinstance(counts, dict):
                raise DDStoreValueError(f"{what}: counts must be a dict {{group_name: "
                                        f"rows}}, got {type(counts).__name__}")
            given = {}
            for group, n in counts.items():
                group = as_edge_type(group)
                self._check_key(TensorAttr(group, None, None), what)
                if not is_int(n) or n < 0:
                    raise DDStoreValueError(f"{what}: rows of group {group!r} must be an "
                                            f"integer >= 0, got {n!r}")
                for a in self._attrs.values():
                    if a.group_name == group and a.num_rows != n:
                        raise DDStoreValueError(
                            f"{what}: group {group!r} declared with {n} rows, but its "
                            f"attribute {a.attr_name!r} holds {a.num_rows} rows")
                given[group] = int(n)
            step.agree(same={"counts": sorted((repr(g), n) for g, n in given.items())})
        table = self._declared
        before = {g: table.get(g) for g in given}
        with store.transaction(f"FeatureStore.declare_rows {self.name!r}") as txn:
            table.update(given)

            def restore():  # a rollback (this call's or an enclosing one's)
                for g, n in before.items():
                    if n is None:
                        table.pop(g, None)
                    else:
                        table[g] = n
                self._changed()  # (the annotation: the journal's)
            txn.on_rollback(restore)
            self._annotate_in_step()

    def _fill(self, var, arr, rows_of, first, lo, hi, total):
        """Collective: create ``var`` at its final size and fill this member's rows in
        place from every rank's rows ``[lo, hi)`` (the array ``arr``, or ``first`` then
        the pieces of ``rows_of``), one piece per rank per round
        (:func:`~ddstore.build.fill_rows`)."""
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
        return self._put(tensor, TensorAttr(as_edge_type(group_name), attr_name, None), rows,
                         range_wise=True)

    def _remove_tensor(self, attr):
        """Collective: drop the attribute (every rank, the same one); False if it is not
        held (on every rank).  Inside a :meth:`DDStore.transaction` its rows are freed
        when the transaction commits, and a rollback brings the attribute back."""
        store = self.store
        attr = _filled(attr)
        key = (attr.group_name, attr.attr_name)
        held = key in self._attrs
        with store.collective("FeatureStore.remove", call_name(key), same={"held": held}):
            self._check_mine()
        if not held:
            return False
        with store.transaction(f"FeatureStore.remove {key!r}") as txn:
            self._set_aside(key, txn)
            self._annotate_in_step()
        return True

    def _set_aside(self, key, txn):
        """Local, alike on every rank, inside transaction ``txn``: forget held attribute
        ``key`` and set its variable aside (``txn.set_aside``): removed when the
        outermost transaction commits (at once without an enclosing one), put back
        with the attribute if it rolls back."""
        order = {k: i for i, k in enumerate(self._attrs)}
        store, old = self.store, self._attrs.pop(key)

        def restore():  # (after what replaced it is gone and its variable back)
            self._attrs[key] = old
            for k in sorted(self._attrs, key=lambda k: order.get(k, len(order))):
                self._attrs[k] = self._attrs.pop(k)  # at its place again, as listed
            self._changed()  # (the annotation: the journal's)
        txn.set_aside([old.var], on_rollback=restore)

    # ------------------------------------------------------------------ reading
    def _unknown(self, key, what):
        known = sorted(map(repr, self._attrs))
        return f"{what}: no attribute {key!r} in feature store {self.name!r}; known: " \
               f"{', '.join(known) if known else 'none'}{self._rolled_back}"

    def _lookup(self, attr, what="get_tensor"):
        key = (as_edge_type(attr.group_name), attr.attr_name)
        self._check_fresh(what)
        a = self._attrs.get(key)
        if a is None:
            self.store.check_alive()
            self._listed(f"{what} {key!r}")  # (it may be the record's now)
            raise UnknownAttributeError(self._unknown(key, what))
        return self._held(a, what)

    def _held(self, a, what):
        """``a`` if its variable is still the store's, else the error that this object
        is out of date (its reads would be another variable's rows).  A variable an open
        transaction set aside (another object replaced or removed the attribute in it)
        is not the attribute's any more, but to a batch made ahead (docs/pyg.md)."""
        h = a.h  # (set aside, a variable goes by another name: one compare tells)
        if (h.name == a.var or ahead()) and h in self.store:
            return a
        self._out_of_date(f"{what} ({a.group_name!r}, {a.attr_name!r})",
                          f"the attribute's variable {a.var!r} was removed or replaced")

    def _out_of_date(self, what, why):
        """Raise that this object is out of date (``why``), saying what to use."""
        self.store.check_alive()
        now = (f"use FeatureStore.open(store, {self.name!r}) for one that is up to date"
               if recorded(self.store, FEATURE_KIND, self.name) is not None else
               f"the store holds no FeatureStore {self.name!r} now")
        raise DDStoreStateError(
            f"FeatureStore {self.name!r}: {what}: this object is out of date: {why} since "
            f"(by another FeatureStore of that name, made again or opened, or by "
            f"DDStore.remove, or a rollback); {now}")

    def _listed(self, what):
        """This object's attributes when they are those the store records of its name
        (checked only when the record is not the one this object last wrote or read),
        else the error that it is out of date: it would list, and a loader read, an
        attribute set another object changed since (one added, removed, or given back
        by a rollback).  Not checked in a batch made ahead (``ahead()``: it may run
        inside this object's own change, between its set-aside and its new record;
        docs/pyg.md: a change under a live read-ahead)."""
        if ahead():
            return self._attrs
        now = recorded(self.store, FEATURE_KIND, self.name)
        if now is not self._recorded:
            keys = set() if now is None else {
                (as_edge_type(type_from_json(g)), n) for g, n, *_ in now.meta["attrs"]}
            if keys != set(self._attrs):
                self._out_of_date(what, "the attributes recorded of its name changed")
        return self._attrs

    @staticmethod
    def _index(a, index, what):
        """``index`` as (None: everything) or an int64 array of rows in ``[0, n)``
        (negatives from the end, as torch indexing)."""
        if index is None:
            return None
        n = a.num_rows
        if type(index) is torch.Tensor and index.dtype == torch.int64 and \
                index.dim() == 1 and index.device.type == "cpu":
            index = index.numpy()  # (a sampler's n_id: the common case, checked below)
        elif isinstance(index, slice):
            return _slice_rows(index, n, what)
        else:
            index = _index_forms(index, n, what)
        idx = as_indices(index, what, n)
        smallest = check_indices(idx, n, what, item="index", low=-n)
        if smallest is not None and smallest < 0:
            idx = np.where(idx < 0, idx + n, idx)
        return idx

    def _read(self, a, idx):
        if idx is None:
            out = self.store.get_range(a.h, 0, a.num_rows)
        else:
            out = self.store.get_batch(a.h, idx)
        out = torch.from_numpy(out)
        return out if a.torch_dtype is None else out.view(a.torch_dtype)

    def _get_tensor(self, attr):
        """Local: rows ``attr.index`` (None: all; an int: that row alone) of the
        attribute, a CPU tensor."""
        a = self._lookup(attr)
        what = f"get_tensor ({a.group_name!r}, {a.attr_name!r})"
        index, shape = _flat_index(attr.index, what)
        out = self._read(a, self._index(a, index, what))
        return out[0] if _one_row(index) else _unflat(out, shape)

    def _multi_get_tensor(self, attrs):
        """Local: every attribute of ``attrs``, with one batched read per store variable
        (the indices of every request for it concatenated)."""
        plan = {}  # var -> [(position, attr, idx, one_row)]
        out = [None] * len(attrs)
        for pos, attr in enumerate(attrs):
            a = self._lookup(attr, "multi_get_tensor")
            what = f"multi_get_tensor ({a.group_name!r}, {a.attr_name!r})"
            index, shape = _flat_index(attr.index, what)
            idx = self._index(a, index, what)
            if idx is None:
                out[pos] = self._read(a, None)
            else:
                plan.setdefault(a.h, []).append((pos, a, idx, _one_row(index), shape))
        # one read for every variable together: one round trip per remote owner
        plan = list(plan.items())
        got = self.store.get_many([
            (var, reqs[0][2] if len(reqs) == 1 else np.concatenate([r[2] for r in reqs]))
            for var, reqs in plan])
        for (var, reqs), rows in zip(plan, got):
            a = reqs[0][1]
            rows = torch.from_numpy(rows)
            if a.torch_dtype is not None:
                rows = rows.view(a.torch_dtype)
            start = 0
            for pos, _, idx, one, shape in reqs:
                out[pos] = rows[start] if one else _unflat(rows[start:start + idx.shape[0]],
                                                           shape)
                start += idx.shape[0]
        return out

    def _get_tensor_size(self, attr):
        key = (as_edge_type(attr.group_name), attr.attr_name)
        self._check_fresh("get_tensor_size")
        a = self._attrs.get(key)
        if a is None:
            return None
        self._held(a, "get_tensor_size")
        index, shape = _flat_index(attr.index, "get_tensor_size")
        if _one_row(index):
            self._index(a, index, "get_tensor_size")
            return torch.Size(a.row_shape)  # (a torch.Size, as PyG's: get_tensor().size())
        n = a.num_rows if index is None else len(self._index(a, index, "get_tensor_size"))
        return torch.Size((tuple(shape) if shape is not None else (n,)) + a.row_shape)

    def get_all_tensor_attrs(self):
        """Every attribute (a fresh PyG ``TensorAttr`` each, its index UNSET, as PyG's
        stores list them) but a homogeneous graph's edge attributes (edge type
        :data:`EDGES`): PyG's homogeneous loaders read every listed attribute by the
        batch's node ids."""
        self._check_fresh("get_all_tensor_attrs")
        return [TensorAttr(a.group_name, a.attr_name) for a in
                self._listed("get_all_tensor_attrs").values() if a.group_name != EDGES]

    def edge_tensor_attrs(self):
        """The edge attributes (``group_name`` an edge type), :data:`EDGES` included
        (index UNSET, as :meth:`get_all_tensor_attrs`)."""
        self._check_fresh("edge_tensor_attrs")
        return [TensorAttr(a.group_name, a.attr_name) for a in
                self._listed("edge_tensor_attrs").values() if is_edge_type(a.group_name)]

    def num_rows(self, group_name, attr_name):
        """Rows of an attribute (nodes or edges of its type)."""
        return self._lookup(TensorAttr(group_name, attr_name), "num_rows").num_rows

    def __repr__(self):
        return f"FeatureStore({self.name!r}, attributes={sorted(map(repr, self._attrs))})"


def _torch_form(index, what):
    """``index`` as torch reads it where torch and numpy differ: a uint8 tensor or array
    is a mask (torch's old form of one, which ``tensor[index]`` still takes), not row
    ids 0 and 1; a tuple is refused (torch reads it as one index per dimension, where a
    list of rows was meant)."""
    if type(index) is tuple:
        raise DDStoreIndexError(f"{what}: tuple index {index!r}: torch reads a tuple as "
                                f"one index per dimension; pass the rows as a list, an "
                                f"array or a tensor")
    if isinstance(index, torch.Tensor):
        return index.bool() if index.dtype == torch.uint8 else index
    if isinstance(index, np.ndarray) and index.dtype == np.uint8:
        return index.astype(np.bool_)
    return index


def _flat_index(index, what):
    """``(index, shape)``: an integer tensor / array index of two or more dimensions
    flattened, with its shape (the rows read are then shaped ``[*shape, *row_shape]``,
    as ``tensor[index]``); any other index as given (:func:`_torch_form`), shape None."""
    index = _torch_form(index, what)
    if isinstance(index, (torch.Tensor, np.ndarray)) and index.ndim >= 2 and \
            index.dtype not in (torch.bool, np.bool_):
        return index.reshape(-1), tuple(index.shape)
    return index, None


def _unflat(rows, shape):
    return rows if shape is None else rows.reshape(tuple(shape) + tuple(rows.shape[1:]))


def _one_row(index):
    """``index`` names one row (an int, or a 0-d integer tensor / array): the result
    then has no row dimension, as ``tensor[3]``."""
    return is_int(integer_scalar(index))


def _layout(arr, torch_dtype):
    """The layout of a whole tensor ``arr`` (at least one dimension), as
    :meth:`_Attr.layout` gives a held attribute's."""
    return (arr.shape[0], tuple(arr.shape[1:]), arr.dtype.str,
            None if torch_dtype is None else str(torch_dtype))


def _member_rows(arr, lo, hi, what):
    """Rows ``[lo, hi)`` of ``arr``: of a numpy array, a view; of a :class:`LazyRows`,
    read from its source.  What reading an array-like raises (but a
    :class:`~ddstore.DDStoreError` or a ``MemoryError``) is raised as a
    :class:`~ddstore.DDStoreValueError` naming the rows; the caller's step agrees on
    it."""
    if isinstance(arr, np.ndarray):
        return arr[lo:hi]
    try:
        return arr[lo:hi]
    except (DDStoreError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 -- named here, agreed by the caller's step
        raise DDStoreValueError(f"{what}: reading rows [{lo}, {hi}) raised "
                                f"{type(exc).__name__}: {exc}") from exc


def _index_forms(index, n, what):
    """An index other than a slice or a 1-D int64 CPU tensor, as what ``as_indices``
    reads: a mask (bool tensor, array or list) as its positions, one row (an int, a 0-d
    tensor) as a list, a tensor as an array."""
    index = _torch_form(index, what)
    if isinstance(index, list) and index and all(
            isinstance(v, (bool, np.bool_)) for v in index):
        index = np.asarray(index, dtype=np.bool_)  # a mask, as torch reads such a list
    if _one_row(index):
        index = [int(index)]
    elif isinstance(index, torch.Tensor):
        if index.dtype == torch.bool:
            if index.dim() != 1 or index.numel() != n:
                raise DDStoreIndexError(f"{what}: boolean index of shape "
                                        f"{tuple(index.shape)} for {n} rows (a mask "
                                        f"is 1-D, one entry per row)")
            index = index.nonzero().view(-1)
        index = index.detach().cpu().numpy()
    elif isinstance(index, np.ndarray) and index.dtype == np.bool_:
        if index.ndim != 1 or index.size != n:
            raise DDStoreIndexError(f"{what}: boolean index of shape {index.shape} "
                                    f"for {n} rows (a mask is 1-D, one entry per row)")
        index = np.flatnonzero(index)
    return index


def _slice_rows(index, n, what):
    """The rows (int64) slice ``index`` takes of ``n``; a step 0 or a bound that is not
    an integer raises a :class:`DDStoreValueError` naming the slice."""
    try:
        if index.step == 0:
            raise ValueError
        return np.arange(*index.indices(n), dtype=np.int64)
    except (TypeError, ValueError):
        raise DDStoreValueError(f"{what}: slice index {index}: start, stop and step must "
                                f"be integers or None, the step not 0") from None


def _first_index(index, declared, what):
    """The index of a first put (the attribute is created by it): ``(rows, total,
    one)``: the indexed rows (int64, in order), the attribute's rows (``declared``,
    else the largest index + 1, or a boolean mask's length) and whether ``index`` names
    one row (the values are then that row).  Without a declaration an index cannot count
    from an end (a negative index, a slice without a stop) that the put has not yet
    given: refused, naming :meth:`FeatureStore.declare_rows`."""
    hint = ("the attribute is not held, so it has no end yet: declare its group's rows "
            "first (FeatureStore.declare_rows, collective) or put the whole tensor")
    index = _torch_form(index, what)
    if isinstance(index, slice):
        if index.step == 0:
            raise DDStoreValueError(f"{what}: slice index {index} has step 0")
        if declared is None and (index.stop is None or any(
                v is not None and v < 0 for v in (index.start, index.stop, index.step))):
            raise DDStoreValueError(f"{what}: slice index {index} counts from the end; "
                                    f"{hint}")
        n = declared if declared is not None else index.stop
        return _slice_rows(index, n, what), n, False
    mask = None
    if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
        mask = index.detach().cpu().numpy()
    elif isinstance(index, np.ndarray) and index.dtype == np.bool_:
        mask = index
    if mask is not None:
        if mask.ndim != 1 or declared is not None and mask.shape[0] != declared:
            raise DDStoreIndexError(
                f"{what}: boolean index of shape {mask.shape}; expected one entry per "
                + ("row" if declared is None else f"row of the {declared} declared"))
        return np.flatnonzero(mask).astype(np.int64), int(mask.shape[0]), False
    one = _one_row(index)
    if one:
        index = [int(index)]
    elif isinstance(index, torch.Tensor):
        index = index.detach().cpu().numpy()
    idx = as_indices(index, what)
    if declared is not None:
        check_indices(idx, declared, what, item="index", low=-declared)
        return np.where(idx < 0, idx + declared, idx), declared, one
    if idx.size and int(idx.min()) < 0:
        pos = int(np.argmax(idx < 0))
        raise DDStoreIndexError(f"{what}: index {int(idx[pos])} (position {pos}) counts "
                                f"from the end; {hint}")
    return idx, int(idx.max()) + 1 if idx.size else 0, one


def _scattered(arr, idx, lo, hi):
    """This member's rows ``[lo, hi)`` of an attribute created by a put with an index:
    zeros, but rows ``idx`` (those in the range) from ``arr`` (the values, one row per
    entry of ``idx``; a row indexed twice gets one of its values, as numpy's
    ``out[idx] = arr``)."""
    out = np.zeros((hi - lo,) + tuple(arr.shape[1:]), dtype=arr.dtype)
    held = (idx >= lo) & (idx < hi)
    if held.any():
        out[idx[held] - lo] = arr[held]
    return out


def _not_declared(what, group, declared, total):
    """The refusal of a put of ``total`` rows into a group declared with ``declared``."""
    return (f"{what}: {total} rows, but group {group!r} was declared with {declared} rows "
            f"(FeatureStore.declare_rows): every attribute of the group has that many")


def _is_all(index):
    """``index`` is ``slice(None)`` (every row, in order)."""
    return isinstance(index, slice) and index == slice(None)


def edge_features(feature_store, attr_names=None):
    """A ``transform`` for PyG's loaders that attaches edge attributes to each mini-batch
    by its ``e_id`` (PyG's remote-backend path gathers node attributes only):
    ``NeighborLoader(..., transform=edge_features(fs))``.  ``attr_names``: which edge
    attributes (default: all).  A homogeneous batch gets ``data[attr]``, a heterogeneous
    one ``data[edge_type][attr]``; every attribute is read in one
    :meth:`FeatureStore.multi_get_tensor`.  A name of ``attr_names`` that no edge type
    holds (never put, or removed) raises :class:`UnknownAttributeError` at the batch."""
    if isinstance(attr_names, str):
        attr_names = [attr_names]

    def transform(data):
        from torch_geometric.data import HeteroData
        want, where = [], []
        held = feature_store.edge_tensor_attrs()
        missing = sorted(set(attr_names or ()) - {ta.attr_name for ta in held})
        if missing:
            raise UnknownAttributeError(
                f"edge_features: no edge attribute {missing[0]!r} in feature store "
                f"{feature_store.name!r} (edge attributes held: "
                f"{sorted({ta.attr_name for ta in held})})")
        for ta in held:
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
    (``b - a`` rows; with ``first``, its dtype and row shape), anything it raises raised
    as a :class:`~ddstore.DDStoreError` (agreed by the caller's step)."""
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
