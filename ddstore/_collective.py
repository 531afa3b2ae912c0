"""The one agreement mechanism behind every collective call (see DESIGN.md, "Collective
calls: the rule").

Every collective call of every layer starts with :func:`agree` on the store's
communicator: an ``Ibarrier`` (every rank has arrived in some agreement), then one
``allgather`` of ``(call, error, extra)`` from every rank.  Because it is always the
same MPI operations with the same kind of payload, ranks that are in *different*
collective calls still meet in it, and all of them raise the same
:class:`~ddstore.errors.DDStoreValueError` naming the ranks and their calls instead of
waiting forever in mismatched MPI operations.  Then, if any rank reports an error (a
bad argument, a file it cannot read, a NaN in its share), every rank raises the same
error naming the ranks where it happened.  Only after that does anyone act.

Errors raised by this module carry ``agreed = True``: every rank of the communicator
raised the same error at the same point, so a collective clean-up afterwards (the free
that leaving ``with DDStore(...)`` runs) meets every rank.  Any other exception is local
to one rank.

An agreement normally waits as long as its peers take to arrive (a rank may compute for
hours before its next collective call).  Inside :func:`bounded` (the free at interpreter
exit, see :mod:`ddstore._lifecycle`) it waits at most a given number of seconds for the
``Ibarrier``, then calls the caller's ``on_timeout`` (which ends the job).
"""
import contextlib
import time

from .errors import DDStoreError, DDStoreValueError, as_error

__all__ = ["agree", "raise_errors", "is_agreed", "mark_agreed",
           "raised_alike", "format_ranks", "bounded", "join_bounded", "last_call"]

# what this rank is doing, for the messages of a job that is ended: the last collective
# call it agreed on, and the bound of the agreements inside ``bounded`` (or None)
_STATE = {"last": None, "bound": None}


@contextlib.contextmanager
def bounded(seconds, on_timeout, note):
    """Within this block, every agreement waits at most ``seconds`` for the other ranks
    to arrive; then ``on_timeout(seconds)`` is called (it must not return: it ends the
    job).  ``note`` (e.g. ``"exiting"``) is shown beside this rank's call when the ranks
    turn out to be in different calls."""
    previous = _STATE["bound"]
    _STATE["bound"] = (float(seconds), on_timeout, note)
    try:
        yield
    finally:
        _STATE["bound"] = previous


def join_bounded(thread):
    """``thread.join()``; inside :func:`bounded`, at most its ``seconds``, then its
    ``on_timeout`` (the job ends): a background thread waiting on a rank that has gone
    does not hold the exit forever."""
    bound = _STATE["bound"]
    if bound is None:
        thread.join()
        return
    seconds, on_timeout, _ = bound
    thread.join(seconds)
    if thread.is_alive():
        on_timeout(seconds)
        raise RuntimeError("on_timeout returned")  # pragma: no cover


def last_call():
    """A description of the last collective call this rank agreed on (or entered), e.g.
    ``"NodeMemory.commit('mem')"``, or None."""
    return _STATE["last"]


def _arrive(comm):
    """Phase one of an agreement: wait until every rank of ``comm`` is in an agreement
    (unbounded, or polled up to the deadline of :func:`bounded`)."""
    request = comm.Ibarrier()
    bound = _STATE["bound"]
    if bound is None:
        request.Wait()
        return None
    seconds, on_timeout, note = bound
    deadline = time.monotonic() + seconds
    pause = 0.001
    while not request.Test():
        if time.monotonic() >= deadline:
            on_timeout(seconds)
            raise RuntimeError("on_timeout returned")  # pragma: no cover
        time.sleep(pause)
        pause = min(2 * pause, 0.05)
    return note


def format_ranks(ranks):
    """``"rank 3"`` or ``"ranks 0, 2"``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else \
        f"ranks {', '.join(map(str, ranks))}"


def _agreed(cls, message):
    return mark_agreed(cls(message))


def mark_agreed(exc):
    """``exc``, marked as raised alike on every rank (see :func:`is_agreed`).  For an
    error that a layer raises from values every rank holds after an agreement (the
    gathered ``extra``, agreed settings, the result of a collective reduction): every
    rank raises it at the same point, so a collective clean-up (a transaction's
    rollback) meets every rank.  Never for an error decided from this rank's own
    data: agree on that first."""
    exc.agreed = True
    return exc


@contextlib.contextmanager
def raised_alike():
    """``with raised_alike():`` a block that decides only from values every rank holds
    (what an agreement gathered, agreed settings): a :class:`DDStoreError` it raises is
    raised alike on every rank, and is marked so (:func:`mark_agreed`)."""
    try:
        yield
    except DDStoreError as exc:
        raise mark_agreed(exc)


def is_agreed(exc):
    """True when ``exc`` was raised the same way on every rank by :func:`agree`."""
    return getattr(exc, "agreed", False) is True


def raise_errors(errors):
    """Raise if any of the gathered ``(class, message)`` errors (one per rank, None where
    a rank is fine) is set: one line per distinct message, naming its ranks, with the
    class of the lowest failing rank.  Every rank that gathered the same list raises the
    same error."""
    by_message = {}  # message -> ranks, in rank order
    for r, e in enumerate(errors):
        if e is not None:
            by_message.setdefault(e[1], []).append(r)
    if by_message:
        cls = next(e for e in errors if e is not None)[0]
        raise _agreed(cls, "; ".join(f"{format_ranks(ranks)}: {msg}"
                                     for msg, ranks in by_message.items()))


def _describe(call):
    if call is None:
        return "another collective"
    op, name = call
    return f"{op}()" if name is None else f"{op}({name!r})"


def _by_value(values):
    groups = {}  # repr of a value -> ranks holding it
    for r, v in enumerate(values):
        groups.setdefault(v if isinstance(v, str) else repr(v), []).append(r)
    return "; ".join(f"{format_ranks(rs)}: {v}" for v, rs in groups.items())


def _check_same(call, values):
    """Raise (the same on every rank) when the gathered ``same`` values differ."""
    if all(v == values[0] for v in values):
        return
    what = _describe(call) if call is not None else "this collective call"
    if all(isinstance(v, dict) for v in values):  # name only the settings that differ
        keys = [k for k in dict.fromkeys(k for v in values for k in v)
                if any(v.get(k) != values[0].get(k) for v in values)]
        detail = ", ".join(f"{k} differs between ranks "
                           f"({_by_value([v.get(k) for v in values])})" for k in keys)
    else:
        detail = f"settings differ between ranks ({_by_value(values)})"
    raise _agreed(DDStoreValueError, f"{what} is collective and needs the same settings "
                                     f"on every rank: {detail}")


def agree(comm, call, error=None, extra=None, same=None):
    """Collective over ``comm``: the agreement every collective call starts with.

    ``call`` is ``(operation, name)`` (name may be None) or None (a step inside a
    collective call that has already been checked).  Raises on every rank:

    - a :class:`DDStoreValueError` naming the ranks and their calls when the ranks are
      not all in the same call;
    - the error of any rank that passed one (an exception, converted by
      :func:`ddstore.errors.as_error`, or a ``(class, message)`` pair), naming its
      ranks;
    - a :class:`DDStoreValueError` when ``same`` (settings that must be equal on every
      rank, e.g. ``{"dtype": ..., "row shape": ...}``) differ, naming the ranks and
      their values (for a dict, only the entries that differ).

    Returns every rank's ``extra`` (any picklable value), in rank order: a value the
    ranks decide on together (a count, a layout, the first bad item) travels here, in
    the same round as the errors, not in a collective of its own.  Errors a caller
    raises from these values are raised alike on every rank: mark them
    (:func:`mark_agreed`, :func:`raised_alike`).
    """
    if call is not None:
        op, name = call
        call = (str(op), name if name is None or isinstance(name, str) else repr(name))
        _STATE["last"] = _describe(call)
    note = _arrive(comm)
    info = comm.allgather((call, as_error(error), extra, same, note))
    calls = [c for c, _, _, _, _ in info]
    if any(c != calls[0] for c in calls):
        by_call = {}
        for r, (c, *_, n) in enumerate(info):
            by_call.setdefault((c, n), []).append(r)
        detail = "; ".join(f"{format_ranks(rs)} called {_describe(c)}"
                           + (f" ({n})" if n else "")
                           for (c, n), rs in by_call.items())
        raise _agreed(DDStoreValueError,
                      f"collective calls out of step: every rank must make the same "
                      f"collective calls, in the same order, with the same names "
                      f"({detail})")
    raise_errors([e for _, e, _, _, _ in info])
    _check_same(calls[0], [s for _, _, _, s, _ in info])
    return [x for _, _, x, _, _ in info]
