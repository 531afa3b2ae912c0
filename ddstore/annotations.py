"""Annotations: what a layer built over a store records so that it can reopen its object
by name without its source data (``TemporalGraph.open(store, name)``...), kept by
:class:`Annotations`, the component of :class:`~ddstore.DDStore` that the checkpoints
save and restore (see :mod:`ddstore.checkpoint`).

Its interface: the public calls the store delegates to (documented here: ``annotate``,
``unannotate``, ``annotation``, ``annotations``); for the store, :meth:`Annotations.forget`
(a variable removed drops the annotations that name it); for the checkpoints,
:attr:`Annotations.table` (name -> :class:`Annotation`).  It calls the store only through
its public methods (``check_alive``, ``name in store``)."""
import contextlib
import json

import numpy as np

from ._checks import STORABLE_NAMES
from .errors import DDStoreError, DDStoreValueError

__all__ = ["Annotation", "Annotations", "check_object_name"]


def _unsaved_dtype(dt):
    """Why a checkpoint cannot keep an annotation array of dtype ``dt``, or None: its
    manifest names a plain dtype by numpy's string (no fields, no sub-array, some bytes
    an item), and the ranks' copies are compared byte for byte (long double's padding
    bytes differ between equal values)."""
    if dt.fields is not None or dt.subdtype is not None:
        return "a structured (record) dtype"
    if dt.itemsize == 0:
        return "items of no bytes"
    if dt.kind == "V":
        return "raw bytes (void)"
    if (dt.kind == "f" and dt.itemsize > 8) or (dt.kind == "c" and dt.itemsize > 16):
        return "numpy's long double, whose padding bytes differ between equal values"
    return None


def cut_fault(nrows, cut):
    """Why ``cut`` cannot split a variable of ``nrows`` rows (None if it can): an int,
    rows per item, must divide ``nrows``; an array of allowed chunk starts must be 1-D of
    integers rising (not strictly) from 0 to ``nrows``."""
    if isinstance(cut, int):
        return (None if nrows % cut == 0 else
                f"{cut} rows per item, but the variable has {nrows} rows")
    cut = np.asarray(cut)
    if cut.ndim != 1 or cut.dtype.kind not in "iu":
        return (f"the allowed cuts must be a 1-D array of integers, got dtype {cut.dtype} "
                f"shape {cut.shape}")
    if cut.size < 1 or cut[0] != 0 or cut[-1] != nrows or (np.diff(cut) < 0).any():
        return f"the allowed cuts must rise from 0 to the variable's {nrows} rows"
    return None


class _Fields(dict):
    """A meta dict that notes the last field read (:meth:`Annotation.reading`)."""
    last = None

    def __getitem__(self, key):
        self.last = key
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.last = key
        return super().get(key, default)


class Annotation:
    """What a layer recorded about an object it built (see :meth:`DDStore.annotate`):
    ``kind`` (str), ``meta`` (a JSON-serialisable dict), ``arrays`` (dict of numpy
    arrays, alike on every rank), ``variables`` (tuple of variable names), ``cuts``
    (dict: variable name -> name of an array in ``arrays`` of allowed chunk starts);
    ``unsaved``: None, or why :meth:`DDStore.save` refuses the store while it holds the
    object (:meth:`refuse_save`)."""
    __slots__ = ("kind", "meta", "arrays", "variables", "cuts", "unsaved")

    def __init__(self, kind, meta, arrays, variables, cuts):
        self.kind, self.meta, self.arrays = kind, meta, arrays
        self.variables, self.cuts = variables, cuts
        self.unsaved = None

    @contextlib.contextmanager
    def reading(self, what, version=None):
        """Around a layer's reading of :attr:`meta` and :attr:`arrays` (its ``open``):
        a field missing, or of another type or value than the layer writes (a
        checkpoint's manifest edited by hand, its checksum recomputed), is a
        :class:`DDStoreValueError` naming ``what`` and the field, not a bare
        ``KeyError`` or ``TypeError`` of the layer's code.  Yields :attr:`meta`, which
        notes the fields read meanwhile (:attr:`meta` reads them too).  ``version``: the
        format the layer reads, refused unless the annotation's ``'version'`` is it."""
        saved = self.meta
        if version is not None and saved.get("version") != version:
            raise DDStoreValueError(
                f"{what}: its annotation's 'version' is {saved.get('version')!r}; this "
                f"ddstore reads version {version} (a newer ddstore's checkpoint, or a "
                f"damaged one)")
        self.meta = fields = _Fields(saved)
        try:
            yield fields
        except DDStoreError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError,
                OverflowError) as exc:
            bad = (f"no field {exc.args[0]!r}" if type(exc) is KeyError and exc.args else
                   f"a field of another type or value ({type(exc).__name__}: {exc}; the "
                   f"last field read: {fields.last!r})")
            raise DDStoreValueError(f"{what}: its annotation (what its builder recorded, "
                                    f"from the checkpoint's manifest after a restore) has "
                                    f"{bad} (a damaged or hand-edited checkpoint?)") from None
        finally:
            self.meta = saved

    def refuse_save(self, why):
        """Local, alike on every rank (a layer whose object is no longer in a state a
        checkpoint may keep, e.g. a node memory whose commit failed while applying it):
        :meth:`DDStore.save` refuses the store from now on, naming the object and
        ``why`` (a str), until the object is removed."""
        self.unsaved = str(why)

    def __repr__(self):
        return (f"Annotation(kind={self.kind!r}, meta={self.meta!r}, "
                f"arrays={sorted(self.arrays)}, variables={list(self.variables)})")


def check_object_name(store, name, kind, what):
    """Refuse ``name`` for an object of ``kind`` when the store holds an object of
    another kind under it (a window dataset and a dynamic graph both named "x" own
    different variables, but one name can be reopened as one object only: the second
    annotation replaced the first, which then could not be opened).  ``what`` names the
    call in the message.  Local, alike on every rank (annotations are)."""
    if name in store.annotations():
        other = store.annotation(name)
        if other.kind != kind:
            raise DDStoreValueError(
                f"{what}: the store holds a {other.kind} named {name!r} (variables "
                f"{sorted(other.variables)}); a {kind} needs another name, or remove "
                f"those variables first")


def _str_keys(value, where):
    """The first place in ``value`` where a dict has a key that is not a str (JSON
    makes it one: ``{1: 'a', '1': 'b'}`` would keep one of the two), or None."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{where}: key {k!r} ({type(k).__name__})"
            bad = _str_keys(v, f"{where}[{k!r}]")
            if bad:
                return bad
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            bad = _str_keys(v, f"{where}[{i}]")
            if bad:
                return bad
    return None


def _json(value, what):
    """``value`` (a dict) as JSON gives it back, or raise naming what cannot be kept."""
    if not isinstance(value, dict):
        raise DDStoreValueError(f"{what} must be a dict, got {type(value).__name__}")
    bad = _str_keys(value, "meta")
    if bad:
        raise DDStoreValueError(f"{what}: the keys of its dicts must be str (JSON's), "
                                f"{bad}")
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise DDStoreValueError(f"{what} must be JSON-serialisable (dicts, lists, str, "
                                f"finite numbers, bool, None): {exc}") from None


def _keep_refusal(old, new):
    """``new`` (replacing ``old`` under one name) takes ``old``'s refusal to be saved
    when both are annotations of one kind (one object's)."""
    if old is not None and old.unsaved is not None and new.unsaved is None and \
            old.kind == new.kind:
        new.unsaved = old.unsaved


class Annotations:
    """The annotations of ``store`` (local state, made alike on every rank by the
    layers' collective calls).  ``note_undo(undo)``: the store's journal hook, called at
    every change with the callable that takes it back (recorded while a transaction is
    open, so that a rollback undoes annotations as it undoes variables)."""

    def __init__(self, store, note_undo=lambda undo: None):
        self.store = store
        self.table = {}  # object name -> Annotation
        self._note_undo = note_undo

    def put(self, name, annotation):
        """Local: set (or replace) the annotation of object ``name``; a rollback of the
        open transaction, if any, takes it back (the earlier annotation, or none).  A
        refusal to be saved (:meth:`Annotation.refuse_save`) stays with the object: an
        annotation of the same kind that replaces a refused one, or that a rollback
        puts back in its place, is refused too."""
        self._journal(name)
        _keep_refusal(self.table.get(name), annotation)
        self.table[name] = annotation

    def _journal(self, name):
        before = self.table.get(name)
        table = self.table

        def undo():  # (a rollback: what the name held before this change)
            if before is None:
                table.pop(name, None)
            else:
                _keep_refusal(table.get(name), before)
                table[name] = before
        self._note_undo(undo)

    def annotate(self, name, kind, meta=None, arrays=None, *, variables=(), cuts=None):
        """Local, made alike on every rank (a layer calls it at the end of the collective
        call that built object ``name``): record what reopening the object needs, so that
        :meth:`save` keeps it and a layer's ``open(store, name)`` finds it after
        :meth:`restore`.  ``kind``: the layer's class (str); ``meta``: a JSON-serialisable
        dict; ``arrays``: ``{key: numpy array}`` held alike by every rank (kept by
        reference, not copied); ``variables``: the store variables the object owns
        (removing any of them drops the annotation); ``cuts``: for a variable whose member
        chunks must start at certain rows, ``{variable: key of an array in arrays}``
        (allowed chunk starts, rising from 0 to its row count: a restore at another
        width splits it at the allowed cut nearest to the balanced split) or
        ``{variable: k}`` (an int: the rows are items of ``k`` rows each, split as
        :func:`~ddstore.partition` splits the items, so a variable of ``k`` rows per
        node follows the node ranges of a variable of one row per node).  An existing annotation
        of the same name and kind is replaced (a builder annotating again); one of another
        kind is refused (:func:`check_object_name`).  :meth:`save` checks that every rank
        holds the same ones."""
        self.store.check_alive()
        if not isinstance(name, str) or not name or not isinstance(kind, str) or not kind:
            raise DDStoreValueError(f"annotate: name and kind must be non-empty strings, "
                                    f"got {name!r}, {kind!r}")
        meta = _json({} if meta is None else meta, f"annotate {name!r}: meta")
        arrays = dict(arrays or {})
        for key, arr in arrays.items():
            if not isinstance(key, str) or not key or not isinstance(arr, np.ndarray) or \
                    arr.dtype.hasobject:
                raise DDStoreValueError(f"annotate {name!r}: arrays must map non-empty str "
                                        f"to numpy arrays of numbers, got {key!r}: "
                                        f"{type(arr).__name__}")
            why = _unsaved_dtype(arr.dtype)
            if why:
                raise DDStoreValueError(f"annotate {name!r}: array {key!r} of dtype "
                                        f"{arr.dtype}: {why}; allowed: numbers, booleans, "
                                        f"dates and fixed-size strings ({STORABLE_NAMES}, "
                                        f"'U', 'S')")
        if isinstance(variables, (str, bytes)) or not isinstance(variables, (list, tuple)):
            raise DDStoreValueError(f"annotate {name!r}: variables must be a list or tuple "
                                    f"of variable names, got {variables!r}")
        variables = tuple(variables)
        for v in variables:  # (names: what remove and save go by; a handle is not one)
            if not isinstance(v, str) or v not in self.store:
                raise DDStoreValueError(f"annotate {name!r}: variables must name the "
                                        f"store's variables (str); unknown: {v!r}")
        if cuts is not None and not isinstance(cuts, dict):
            raise DDStoreValueError(f"annotate {name!r}: cuts must be a dict {{variable: "
                                    f"key of an array in arrays, or rows per item (an int "
                                    f">= 1)}}, got {type(cuts).__name__}")
        cuts = dict(cuts or {})
        for v, key in cuts.items():
            per_item = isinstance(key, (int, np.integer)) and not isinstance(key, bool)
            if v not in variables or not (key in arrays if isinstance(key, str) else
                                          per_item and key >= 1):
                raise DDStoreValueError(f"annotate {name!r}: cuts must map its variables "
                                        f"to keys of its arrays or to rows per item (an "
                                        f"int >= 1), got {v!r}: {key!r}")
            if per_item:
                cuts[v] = int(key)
            # what a restore will need of them, refused now rather than at the restore
            nrows = getattr(self.store.handle(v), "nrows", None)  # (None: a record set)
            why = ("it is a record set, not a rows variable" if nrows is None else
                   cut_fault(nrows, cuts[v] if per_item else arrays[key]))
            if why:
                raise DDStoreValueError(f"annotate {name!r}: cuts[{v!r}] = {key!r}: {why}")
        check_object_name(self.store, name, kind, f"annotate {name!r}")
        # a checkpoint keeps array k of annotation n as "annotation:n:k": two pairs of one
        # such key ('a:b' + 'c', 'a' + 'b:c') would be saved as one and never restored
        mine = {f"{name}:{k}": k for k in arrays}
        for other, ann in self.table.items():
            for k in ann.arrays if other != name else ():
                if f"{other}:{k}" in mine:
                    raise DDStoreValueError(
                        f"annotate {name!r}: its array {mine[f'{other}:{k}']!r} and array "
                        f"{k!r} of annotation {other!r} would be one array of a "
                        f"checkpoint ({f'annotation:{other}:{k}'!r}); rename one")
        self.put(name, Annotation(kind, meta, arrays, variables, cuts))

    def unannotate(self, name):
        """Local, made alike on every rank: drop the annotation of object ``name`` (if
        any), e.g. when a layer's object is rolled back or removed while its variables
        stay.  Returns whether there was one."""
        self.store.check_alive()
        if self._name(name) not in self.table:
            return False
        self._journal(name)  # (a rollback brings it back)
        del self.table[name]
        return True

    def annotation(self, name, kind=None):
        """The :class:`Annotation` of object ``name`` (local).  Raises
        :class:`DDStoreValueError` naming the known ones when there is none (or it is of
        another ``kind``)."""
        self.store.check_alive()
        ann = self.table.get(self._name(name))
        if ann is None or (kind is not None and ann.kind != kind):
            known = self.annotations(kind)
            # (kinds sharing a name annotate "<name>#<kind>": the PyG stores)
            own = name[:-len(ann.kind) - 1] if ann and name.endswith("#" + ann.kind) \
                else name
            other = "" if ann is None else (f"; {name!r} is a {ann.kind}: reopen it with "
                                            f"{ann.kind.split('.')[-1]}.open(store, "
                                            f"{own!r})")
            raise DDStoreValueError(
                f"no {kind or 'object'} {name!r} in this store (restored or built); "
                f"known: {known}{other}")
        return ann

    def _name(self, name):
        """``name`` if it is a str, else a :class:`DDStoreValueError` naming it (a list is
        unhashable: refused by name, not by a ``TypeError`` of the lookup)."""
        if not isinstance(name, str):
            raise DDStoreValueError(f"unknown object {name!r:.80} (a {type(name).__name__}: "
                                    f"names are str); known: {self.annotations()}")
        return name

    def annotations(self, kind=None):
        """Names of the annotated objects (of ``kind``, if given), sorted (local)."""
        self.store.check_alive()
        return sorted(n for n, a in self.table.items()
                      if kind is None or a.kind == kind)

    def forget(self, variable):
        """Drop the annotations that name ``variable`` (being removed); returns them,
        ``{name: annotation}`` (what :meth:`put_back` takes)."""
        return {n: self.table.pop(n) for n in
                [n for n, a in self.table.items() if variable in a.variables]}

    def put_back(self, dropped):
        """Annotations dropped by :meth:`forget` again (a removal rolled back)."""
        self.table.update(dropped)
