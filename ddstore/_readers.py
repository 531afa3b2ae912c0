"""Read-ahead threads against the calls that unmap what they read.

A loader that reads ahead (:class:`ddstore.prefetch.PrefetchIter`, behind every
``prefetch=`` of :mod:`ddstore.prefetch` and :mod:`ddstore.device`) makes its batches in
a background thread while the caller's thread goes on, and the caller may free the store
(leave ``with DDStore(...)`` with a loader's iterator still alive) or remove a variable
that a batch in flight is reading.  Memory unmapped under a read is a segmentation
fault, so:

- a read-ahead thread makes each batch inside :func:`reading`;
- :meth:`DDStore.free <ddstore.DDStore.free>` and every removal of a variable run
  inside :func:`unmapping`, which waits until no batch is being made and holds new ones
  back until the memory is gone.  Those then find the store freed or the variable gone
  and raise (:class:`~ddstore.errors.DDStoreStateError`, ...), which reaches the caller
  in that batch's turn.

A transaction that removes a variable sets it aside (hidden, kept until the commit,
:mod:`ddstore._transaction`): a batch made ahead meanwhile reads it under its former
name, as it was (:func:`ahead`, the fallback of the stores' name lookups) rather than
fail by timing on some ranks; after the commit the name is unknown (the batches then
raise, as after a removal), after a rollback it is the variable again.  The caller's own
reads inside the transaction see it removed.

One gate for the process: a loader does not say which store it reads, and unmapping is
rare.  While an unmapping waits, a batch starts only if it is *nested*: asked for from
inside another batch (a :class:`~ddstore.device.DevicePrefetcher` with ``prefetch=0``
over a prefetching loader waits, inside its own batch, for the inner thread's batch;
two read-aheads over one loader are refused,
:func:`ddstore.prefetch.check_one_read_ahead`).
The wait stays bounded: the batches in flight end, each needs a bounded number of
nested ones, and no other batch starts (two loaders iterated by two threads held a
removal for as long as one of them was making a batch: tens of seconds).  At exit the
wait is bounded like a round (:func:`ddstore._collective.wait_bounded`).
"""
import contextlib
import threading

from ._collective import wait_bounded

__all__ = ["ahead", "moving_names", "reading", "resolve_ahead", "unmapping"]

_GATE = threading.Condition()
_LOCAL = threading.local()  # .depth: batches this thread is making inside reading()
_NAMES = threading.RLock()  # held while a transaction moves a name (moving_names)
# batches being made in read-ahead threads; unmapping calls open (the caller's thread)
_STATE = {"reading": 0, "unmapping": 0}


@contextlib.contextmanager
def reading(nested=False):
    """Around one batch made in a read-ahead thread: waits while an unmapping is open,
    unless ``nested`` (the batch was asked for from inside another batch, which waits
    for it: see the module docstring)."""
    with _GATE:
        _GATE.wait_for(lambda: not _STATE["unmapping"] or nested)
        _STATE["reading"] += 1
    _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1
    try:
        yield
    finally:
        _LOCAL.depth -= 1
        with _GATE:
            _STATE["reading"] -= 1
            _GATE.notify_all()


def ahead():
    """Whether this thread is making a batch ahead (inside :func:`reading`): its reads
    resolve a variable that an open transaction set aside under its former name (see
    the module docstring)."""
    return getattr(_LOCAL, "depth", 0) > 0


@contextlib.contextmanager
def moving_names():
    """Around a transaction's move of a name and its record of it (a set-aside, a put
    back): a read-ahead thread's lookup (:func:`resolve_ahead`) sees both or neither."""
    with _NAMES:
        yield


def resolve_ahead(table, name, aside_of):
    """In a read-ahead thread, after ``table`` (name -> variable or record set) had no
    ``name``: its entry under the hidden name ``aside_of(name)`` (set aside by an open
    transaction), or under ``name`` again (put back meanwhile); None if neither.  Looked
    up while no transaction moves a name."""
    with _NAMES:
        got = table.get(name)
        return got if got is not None else table.get(aside_of(name))


def _idle():
    with _GATE:
        return _GATE.wait_for(lambda: not _STATE["reading"], timeout=0.05)


@contextlib.contextmanager
def unmapping():
    """Around a call that unmaps a store's memory (the caller's thread): waits for the
    batches being made to end, and holds back new ones until the block ends."""
    with _GATE:
        _STATE["unmapping"] += 1
    try:
        wait_bounded(_idle)
        yield
    finally:
        with _GATE:
            _STATE["unmapping"] -= 1
            _GATE.notify_all()
