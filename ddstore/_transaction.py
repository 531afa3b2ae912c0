"""All or nothing: the one transaction over a store behind every operation that creates
several variables (docs/design.md, rule 2).

An operation (``from_pyg``, ``NodeMemory(...)``, a loader...) runs its collective steps
inside ``with store.transaction("from_pyg"):``.  While a transaction is open, the store
records every variable (rows or records) that its creating calls (``add``, ``init``,
``add_records``, ``init_records``) make, in creation order; a variable removed again
inside the transaction is dropped from the record.

Leaving the block:

- **normally**: everything created stays; nothing collective happens, unless the
  outermost transaction has variables to remove at its commit (below): one step decides
  it on every rank, then they are freed; if that step fails (an interrupt reaching its
  round), the whole transaction rolls back as after an agreed error.
- **with an agreed error** (:func:`~ddstore._collective.is_agreed`: raised alike on
  every rank by the agreement, so every rank is leaving the block with it): every rank
  removes, newest first, what was created since the transaction began, then the error
  goes on.  The store's ``variables()`` is what it was at the start, on every rank, and
  the same operation with fixed input can run again under the same names.  On a
  communicator of one rank every exception counts as agreed (there is no other rank to
  wait for).
- **with any other exception** (one rank's own failure: a bug, an error raised before
  the ranks agreed; a ``KeyboardInterrupt`` inside a step is agreed instead, see
  "Interrupts" in :mod:`ddstore._collective`, and rolls back like an agreed error):
  nothing collective is started, because the other ranks are not leaving the block
  with it and would never join.  The variables stay (what was set aside stays hidden),
  a ``RuntimeWarning`` names them and how to roll back (raise inside a collective step),
  the exception goes on, and uncaught it ends the whole job
  (:func:`~ddstore.abort_on_exception`).  That is why every step of an operation that
  can fail on one rank only agrees before it raises.

Annotations (:meth:`DDStore.annotate`, ``unannotate``, and those :meth:`DDStore.load`
brings) are journalled too: a rollback gives each name the annotation it had before.

Writes into variables that existed before the transaction (``update``,
``update_records``, a node memory's ``commit``) are not journalled: a rollback undoes
what was created and removed, not what was written in place.

Nesting: a transaction opened inside another joins it (one record per store).  An
agreed error leaving the inner block removes what was created since the inner block
began; if the error then leaves the outer block as well, the outer removes the rest.  So
a block that catches an operation's error and goes on keeps exactly what succeeded.

Variables that existed before the transaction are never lost: :meth:`DDStore.remove`
inside a transaction **sets aside** every variable (or record set) that the innermost
open transaction did not create: it moves to a hidden name (``"<name>~aside<k>"``,
listed by ``variables()`` until the commit), the annotations naming it go with it, and
its name is free to be created again (a layer's too: the layers' name checks skip hidden
names, ``_checks.names_under``).  When the outermost transaction ends normally,
what was set aside is removed (its memory is freed then, not at the ``remove``); a
rollback of any enclosing transaction removes what was created under the name and moves
the old variable back, with its annotations.  A variable the innermost transaction
created is removed at once (dropped from the record).  A layer that replaces a variable
under the same name, or that builds new variables under new names and drops the old ones,
calls ``txn.set_aside(names, on_rollback=restore)`` after its own round (the same,
without ``remove``'s step; ``restore()`` runs once the old variables are back under their
names).  The layers' own removals work that way (``NodeMemory.remove``,
``TemporalGraph.remove``, a graph store's ``remove_edge_index``, a feature store's
``remove_tensor``): if an enclosing transaction rolls back, the data, their annotations
and the object that removed them are as they were.

Layers that keep their own record of what they put (a ``FeatureStore``'s attributes, a
``GraphStore``'s edge types) register ``txn.on_rollback(forget)``: when a rollback
removes what was created before the registration, it calls ``forget()`` (newest first,
among the removals), so that the object does not name variables that are gone.  Objects
built over what they created do the same (a window dataset, a temporal graph, node
memory, a dynamic graph's snapshot cache): built inside a transaction that an enclosing
one rolls back, they refuse to read instead of serving copies of removed data.
"""
import warnings

from ._checks import aside_name
from ._collective import (enter_scope, hold_interrupts, is_agreed, leave_scope,
                          release_interrupts)
from ._readers import moving_names
from .errors import DDStoreStateError

__all__ = ["Transaction", "Journal"]


class _Aside:
    """A journal entry: variable (or record set) ``name`` set aside as ``aside``, with
    the ``annotations`` that named it (removed at the commit, moved back under ``name``
    with them by a rollback)."""
    __slots__ = ("name", "aside", "annotations")

    def __init__(self, name, aside, annotations):
        self.name, self.aside, self.annotations = name, aside, annotations


class Journal:
    """The record of one store's open transactions (the store owns one): what to undo,
    in order (variable names, and ``on_rollback`` callables), how deeply transactions
    are nested (``depth``; 0: none open, nothing is recorded) and where each open one
    began (``marks``).  The store gives it its local primitives: ``holds(name)``,
    ``rename(old, new)`` (a rows variable or a record set), ``forget(name)`` (drop the
    annotations naming a variable, returning them) and ``put_back(annotations)``."""
    __slots__ = ("entries", "depth", "marks", "_holds", "_rename", "_forget", "_put_back")

    def __init__(self, holds, rename, forget, put_back):
        self.entries, self.depth, self.marks = [], 0, []
        self._holds, self._rename = holds, rename
        self._forget, self._put_back = forget, put_back

    def note_created(self, name):
        """Called by the store where a variable comes into being."""
        if self.depth:
            self.entries.append(name)

    def note_undo(self, undo):
        """Called by the store's annotations at every change, with the callable that
        takes it back: recorded (a rollback calls it, newest first) while a
        transaction is open."""
        if self.depth:
            self.entries.append(undo)

    def note_removed(self, name):
        """Called by the store where a variable is removed: it is no longer the
        transaction's to undo."""
        if self.depth and name in self.entries:
            del self.entries[len(self.entries) - 1 - self.entries[::-1].index(name)]

    def renamed(self, old, new):
        """A variable recorded as created (or set aside) is now ``new``."""
        for i, e in enumerate(self.entries):
            if isinstance(e, str) and e == old:
                self.entries[i] = new
            elif isinstance(e, _Aside) and e.aside == old:
                e.aside = new

    def aside_of(self, name):
        """The hidden name under which variable (or record set) ``name`` is set aside
        by an open transaction, or None; set aside several times (removed, created
        again, removed again), the latest: what the name meant last."""
        for e in reversed(self.entries):
            if isinstance(e, _Aside) and e.name == name:
                return e.aside
        return None

    def defers(self, name):
        """Whether a removal of ``name`` now sets it aside (see the module docstring):
        a transaction is open and the innermost one did not create it."""
        return bool(self.depth) and name not in [
            e for e in self.entries[self.marks[-1]:] if isinstance(e, str)]

    def set_aside(self, name):
        """Local, alike on every rank: move variable (or record set) ``name`` to the
        first free hidden name ``"<name>~aside<k>"``, taking the annotations that name
        it; removed at the outermost commit, moved back by a rollback.  Returns the
        hidden name."""
        k = 1
        while self._holds(aside_name(name, k)):
            k += 1
        aside = aside_name(name, k)
        taken = self._forget(name)
        with moving_names():  # the move and its record, seen together by read-ahead
            self._rename(name, aside)
            self.renamed(name, aside)
            self.entries.append(_Aside(name, aside, taken))
        return aside

    def put_back(self, entry):
        """Local: undo :meth:`set_aside` (``entry``: its journal entry), once what was
        created under the name since is gone."""
        with moving_names():
            self._rename(entry.aside, entry.name)
            self.renamed(entry.aside, entry.name)
        self._put_back(entry.annotations)


class Transaction:
    """``with store.transaction(label):`` (see the module docstring).  Entering and a
    normal exit are local (no communication); only the removal after an agreed error is
    collective.  ``created``: the names created so far inside this (possibly nested)
    transaction, oldest first.  ``journal``: the store's :class:`Journal`; ``drop(name)``:
    the store's collective removal of a variable once the ranks agreed on it."""

    def __init__(self, store, label, journal, drop):
        self.store, self.label = store, str(label)
        self._journal, self._drop = journal, drop
        self._entries = None  # the journal's record while this transaction is open
        self._mark = 0
        self._held = None  # SIGINT deferred between steps (ddstore._collective)
        self._scope = None  # the scope of steps it encloses (ddstore._collective)
        self._open = False  # between __enter__ and __exit__

    def __enter__(self):
        self.store.check_alive()
        if self._open:  # (its mark and its held interrupts would be lost)
            raise DDStoreStateError(
                f"transaction {self.label!r} is already open: a transaction object is "
                f"entered once at a time; for a nested one, enter a new "
                f"store.transaction()")
        self._held = hold_interrupts()
        try:  # (refused, with nothing begun, while another thread is in a collective
            # call of this process)
            self._scope = enter_scope(self.label)  # (its later steps are told by it)
        except BaseException:
            release_interrupts(self._held)
            raise
        try:
            self._entries = self._journal.entries
            self._mark = len(self._entries)
            self._journal.depth += 1
            self._journal.marks.append(self._mark)
            self._open = True
        except BaseException:  # (nothing here raises; the scope is never left open)
            leave_scope(self._scope)
            release_interrupts(self._held)
            raise
        return self

    @property
    def created(self):
        if self._entries is None:
            return []
        return [e for e in self._entries[self._mark:] if isinstance(e, str)]

    def on_rollback(self, forget):
        """Local: call ``forget()`` if a rollback (of this transaction or of one that
        encloses it) removes what was created before this call."""
        if not callable(forget):
            raise TypeError(f"on_rollback needs a callable, got {type(forget).__name__}")
        self._entries.append(forget)

    def set_aside(self, names, on_rollback=None):
        """Local, alike on every rank (after the round that decided the replacement):
        move variables ``names`` to hidden names, so that each name can be created
        again, as a removal inside a transaction does (:meth:`DDStore.remove`, without
        its step); removed when the outermost transaction ends normally, moved back
        under their names (after what was created under them is removed) if this
        transaction or one enclosing it rolls back, and then ``on_rollback()`` is
        called (the layer takes them into its record again).  Returns the hidden
        names, in order."""
        if on_rollback is not None:  # registered first: called after they are back
            self.on_rollback(on_rollback)
        return [self._journal.set_aside(name) for name in names]

    def __exit__(self, exc_type, exc, tb):
        journal, store = self._journal, self.store
        journal.depth -= 1
        journal.marks.pop()
        try:
            # an agreed error, or an interrupt agreed in a round (a KeyboardInterrupt
            # raised alike on every rank: ddstore._collective.DDStoreInterrupt)
            # (on one rank any exception is agreed: a KeyboardInterrupt, a SystemExit)
            if exc is not None and (is_agreed(exc) or store.size == 1) \
                    and not store.freed:
                self._rollback()
            elif exc is None and journal.depth == 0 and not store.freed:
                self._commit()  # the outermost commits (free() inside: all is gone)
            elif exc is not None and journal.depth == 0 and not store.freed:
                self._left_as_is(exc)  # (an inner block's: the outermost tells)
        finally:
            if journal.depth == 0:  # the next transaction starts a new record
                journal.entries = []
            self._open = False
            leave_scope(self._scope)
            release_interrupts(self._held)  # a SIGINT no round saw: raised now
        return False

    def _left_as_is(self, exc):
        """An exception not agreed between the ranks leaves the block: nothing is
        undone (a rollback is collective, and the other ranks may not be leaving the
        block); say so, naming what stays, when there is something to undo."""
        undo = self._entries[self._mark:]
        hidden = [e for e in undo if isinstance(e, _Aside)]
        made = [e for e in undo if isinstance(e, str) and  # (made, then set aside:
                all(e != h.aside for h in hidden)]       # told once, as set aside)
        if not (made or hidden):
            return
        aside = [f"{h.name!r} (as {h.aside!r})" for h in hidden]
        warnings.warn(
            f"transaction {self.label!r} left by {type(exc).__name__}, an error not "
            f"agreed between the ranks: nothing is rolled back (a rollback is "
            f"collective, and the other ranks may not be leaving the block); stays "
            f"created: {made}; stays set aside: {aside}, hidden until removed "
            f"(store.remove on every rank).  To roll back on every rank, raise the "
            f"error inside a collective step (store.collective(...)), as every call of "
            f"the store does", RuntimeWarning, stacklevel=3)

    def _commit(self):
        """Collective (the outermost transaction ending normally): remove what was set
        aside.  One step decides it on every rank first; if that step fails (an
        interrupt in its round), the whole transaction rolls back instead and the error
        goes on: a commit happens whole or not at all.  After the step nothing can fail:
        the variables are freed."""
        store, entries = self.store, self._journal.entries
        gone = list(dict.fromkeys(  # (a hidden variable set aside again: one variable)
            e.aside for e in entries if isinstance(e, _Aside)))
        if not gone:
            return
        try:
            with store.collective("transaction commit") as step:
                missing = [n for n in gone if n not in store]
                if missing:  # (a bug: a layer's record out of step with the store)
                    raise DDStoreStateError(f"transaction {self.label!r}: cannot remove "
                                            f"{missing} at the commit: not held")
                step.agree(same={"removed at the commit": gone})
        except BaseException as exc:
            if is_agreed(exc) and not store.freed:
                self._rollback()
            raise
        for n in gone:
            self._drop(n)

    def _rollback(self):
        """Collective: remove, newest first, what this transaction created, on every
        rank.  One step first checks that every rank is rolling back (the labels may
        differ: they are names for messages, not part of the rule) and gathers what each
        created; a record that differs (a variable created on some ranks only: a bug)
        removes what every rank holds and raises a :class:`DDStoreStateError` naming the
        rest."""
        store, entries = self.store, self._entries
        undo = entries[self._mark:]
        if not any(isinstance(e, (str, _Aside)) for e in undo):
            # nothing created or set aside here: no variable to remove, so no round
            # (records are alike on every rank in the transaction, so the others skip
            # it too; and a rank the error found in another call, one out of step, is
            # not rolling back: a round would only replace the error); what was
            # registered or annotated is taken back locally, newest first
            for entry in reversed(undo):
                entry()
            del entries[self._mark:]
            return
        mine = [e for e in undo if isinstance(e, str)]
        with store.collective("transaction rollback") as step:
            names = [n for _, n in step.agree((self.label, mine))]
            back = {}  # hidden name -> the name a variable set aside has again
            for entry in reversed(undo):
                if isinstance(entry, _Aside):  # what replaced it is gone: back it goes
                    back[entry.aside] = entry.name
                    self._journal.put_back(entry)
                elif not isinstance(entry, str):
                    entry()
                elif all(entry in other for other in names):
                    self._drop(back.get(entry, entry))
            del entries[self._mark:]
            if any(other != names[0] for other in names):
                raise DDStoreStateError(
                    f"transaction {self.label!r}: ranks created different variables "
                    f"({'; '.join(f'rank {r}: {n}' for r, n in enumerate(names))}); "
                    f"removed those every rank held")
