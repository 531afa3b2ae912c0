"""The one mechanism behind every collective call: the collective *step* (see
docs/design.md, "Rule 1: every collective call is made of collective steps").

A collective call is made of steps.  Each step is written once, the same way::

    with store.collective("from_jodie", name, same={"add_reverse": add_reverse}) as step:
        share = parse_my_byte_range(path)          # the local part: may fail on one rank
        ends = step.agree(share.ends())            # the round: every rank's value
        if ends != sorted(ends):                   # decided from agreed values
            raise DDStoreValueError("not sorted")  # agreed by construction

**The local part** (before :meth:`Step.agree`, or the whole block when it never calls
it) may raise anything on any rank: *whatever it raises* (an ``OSError`` from a file, a
``KeyError``, a ``MemoryError``, a bug) is carried into the step's one round, and every
rank raises the same :class:`~ddstore.errors.DDStoreError` naming the ranks and what
each raised (the failing rank's own exception is chained as its ``__cause__``).  No
layer lists the exception types it expects.

**The round** is always the same MPI operations on the store's communicator: an
``Ibarrier`` (every rank has arrived in some step), then one ``allgather`` of ``(call,
error, share, same, note)``.  So ranks that are in *different* steps still meet in it,
and every rank raises the same error naming the ranks and their calls instead of waiting
forever.  ``same`` (settings that must be equal on every rank) is checked in the round.
A step whose block does not call :meth:`Step.agree` has its round when the block ends;
``step.values`` then holds every rank's share.

**After the round** the block decides from values every rank holds: whatever it raises
there is raised alike on every rank and is marked agreed by the step (see
:func:`is_agreed`), so the enclosing transaction rolls back on every rank.  Local work
that can fail on one rank belongs in a step's local part, never after its round; and a
local part makes no raw MPI collective call (only nested steps), so that a rank that
fails early meets the others in their next round.

An agreed error (raised by the round, or by a nested step) passes through the steps
that enclose it without another round: every rank is leaving them with it.  Exceptions
that are not ``Exception`` (``KeyboardInterrupt``, ``SystemExit``) are this rank's
alone and pass through untouched: uncaught, they end the job.

A step normally waits as long as its peers take to arrive (a rank may compute for hours
before its next collective call).  Inside :func:`bounded` (the free at interpreter exit,
see :mod:`ddstore._lifecycle`) it polls the ``Ibarrier``: between polls the caller's
``watch`` looks at what the other ranks are doing (the status board of
:mod:`ddstore._status`, which may end the job), and when a limit is set it waits at most
that many seconds, then calls the caller's ``on_timeout`` (which ends the job).

What this rank is doing is published as it changes: entering the first named step of a
call and leaving it call ``_PUBLISH["hook"](description, comm)`` (description None on
leaving), a few local stores and no communication.
"""
import contextlib
import time

from . import _core
from .errors import DDStoreError, DDStoreStateError, DDStoreValueError, as_error

__all__ = ["Step", "collective", "is_agreed", "agreed_over", "format_ranks", "bounded",
           "join_bounded", "last_call", "current_call", "inject", "record_calls"]

# what this rank is doing, for the messages of a job that is ended: the last collective
# call it entered, the step it is in now (or None), and the bound of the rounds inside
# ``bounded`` (or None)
_STATE = {"last": None, "current": None, "bound": None}
# called as hook(description, comm) whenever what this rank is doing changes (the first
# named step of a call entered, or left: description None): the status board of
# :mod:`ddstore._status`, set by :mod:`ddstore._lifecycle`
_PUBLISH = {"hook": None}
# test hooks: an exception to raise in the local part of a named step on this rank
# (:func:`inject`), and the set of named steps entered (:func:`record_calls`)
_TEST = {"inject": None, "seen": None, "steps": 0}


@contextlib.contextmanager
def bounded(seconds, on_timeout, note, watch=None):
    """Within this block, every round polls for the other ranks to arrive: ``watch()``
    (if given) is called between polls (it may end the job, or return), and when
    ``seconds`` is not None, after that many seconds ``on_timeout(seconds)`` is called
    (it must not return: it ends the job).  ``note`` (e.g. ``"exiting"``) is shown beside
    this rank's call when the ranks turn out to be in different calls."""
    previous = _STATE["bound"]
    _STATE["bound"] = (None if seconds is None else float(seconds), on_timeout, note,
                       watch)
    try:
        yield
    finally:
        _STATE["bound"] = previous


def join_bounded(thread):
    """``thread.join()``; inside :func:`bounded`, polled like a round (its ``watch``
    between polls, at most its ``seconds``, then its ``on_timeout``: the job ends): a
    background thread waiting on a rank that has gone does not hold the exit forever."""
    bound = _STATE["bound"]
    if bound is None:
        thread.join()
        return
    _poll(lambda: (thread.join(0.05), not thread.is_alive())[1], bound)


def _poll(done, bound):
    """Call ``done()`` until it is true, under ``bound`` (see :func:`bounded`)."""
    seconds, on_timeout, _, watch = bound
    deadline = None if seconds is None else time.monotonic() + seconds
    pause = 0.001
    while not done():
        if deadline is not None and time.monotonic() >= deadline:
            on_timeout(seconds)
            raise RuntimeError("on_timeout returned")  # pragma: no cover
        if watch is not None:
            watch()
        time.sleep(pause)
        pause = min(2 * pause, 0.05)


def last_call():
    """A description of the last collective call this rank entered, e.g.
    ``"NodeMemory.commit('mem')"``, or None."""
    return _STATE["last"]


def current_call():
    """A description of the collective call this rank is in now, or None."""
    return _STATE["current"]


def inject(op, exc=None):
    """Test hook (this rank only): the next step of collective call ``op`` (its first,
    named step) raises ``exc`` (an exception instance or class) at the end of its local
    part, as if the local part had raised it; an int ``op`` arms the op-th step entered
    from now on, named or not (a later step of a call: a build's rounds).
    ``inject(None)`` disarms."""
    if op is None:
        _TEST["inject"] = None
    elif isinstance(op, int):  # the op-th step entered from now on, named or not
        _TEST["steps"], _TEST["inject"] = 0, (op, exc)
    else:
        _TEST["inject"] = (str(op), exc)


def steps_entered():
    """Test hook: the number of steps (named or not) this rank entered since the last
    :func:`inject` of a step number or :func:`reset_steps`."""
    return _TEST["steps"]


def reset_steps():
    _TEST["steps"] = 0


def record_calls(seen):
    """Test hook: add the operation of every named step entered to the set ``seen``, or
    append every step's (None for a later step of a call) to the list ``seen`` (None
    stops recording)."""
    _TEST["seen"] = seen


def _arrive(comm):
    """Phase one of a round: wait until every rank of ``comm`` is in a round (unbounded,
    or polled under :func:`bounded`)."""
    request = comm.Ibarrier()
    bound = _STATE["bound"]
    if bound is None:
        request.Wait()
        return None
    _poll(request.Test, bound)
    return bound[2]


def format_ranks(ranks):
    """``"rank 3"`` or ``"ranks 0, 2"``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else \
        f"ranks {', '.join(map(str, ranks))}"


def is_agreed(exc):
    """True when ``exc`` was raised alike on every rank of the communicator (by a step's
    round, or decided after it): a collective clean-up (a transaction's rollback, the
    free that leaving ``with DDStore`` runs) then meets every rank."""
    return getattr(exc, "agreed", False) is True


def agreed_over(exc):
    """The communicator over which agreed error ``exc`` was raised alike, or None."""
    return getattr(exc, "agreed_comm", None)


def _mark(exc, comm):
    exc.agreed = True
    if getattr(exc, "agreed_comm", None) is None:
        exc.agreed_comm = comm
    return exc


def _describe(call):
    if call is None:
        return "another collective"
    op, name = call
    return f"{op}()" if name is None else f"{op}({name!r})"


def _doing(call, current):
    """What a rank in a round is doing, for messages: ``"called add('y')"``, or for a
    later step of a call already begun, ``"is in put_range('x')"``."""
    if call is None and current is not None:
        return f"is in {current}"
    return f"called {_describe(call)}"


def _by_value(values):
    groups = {}  # repr of a value -> ranks holding it
    for r, v in enumerate(values):
        groups.setdefault(v if isinstance(v, str) else repr(v), []).append(r)
    return "; ".join(f"{format_ranks(rs)}: {v}" for v, rs in groups.items())


def _errors_error(errors):
    """The agreed error of the gathered ``(class, message)`` errors (one per rank, None
    where a rank is fine), or None: one line per distinct message, naming its ranks,
    with the class of the lowest failing rank."""
    by_message = {}  # message -> ranks, in rank order
    for r, e in enumerate(errors):
        if e is not None:
            by_message.setdefault(e[1], []).append(r)
    if not by_message:
        return None
    cls = next(e for e in errors if e is not None)[0]
    return cls("; ".join(f"{format_ranks(ranks)}: {msg}"
                         for msg, ranks in by_message.items()))


def _calls_error(info):
    calls = [i[0] for i in info]
    if all(c == calls[0] for c in calls):
        return None
    by_call = {}
    for r, (c, _e, _s, _m, n, current) in enumerate(info):
        by_call.setdefault((c, n, current if c is None else None), []).append(r)
    detail = "; ".join(f"{format_ranks(rs)} {_doing(c, cur)}"
                       + (f" ({n})" if n else "") for (c, n, cur), rs in by_call.items())
    return DDStoreValueError(f"collective calls out of step: every rank must make the "
                             f"same collective calls, in the same order, with the same "
                             f"names ({detail})")


def _same_error(call, values):
    """The error (the same on every rank) when the gathered ``same`` values differ."""
    if all(v == values[0] for v in values):
        return None
    what = _describe(call) if call is not None else "this collective call"
    if all(isinstance(v, dict) for v in values):  # name only the settings that differ
        keys = [k for k in dict.fromkeys(k for v in values for k in v)
                if any(v.get(k) != values[0].get(k) for v in values)]
        detail = ", ".join(f"{k} differs between ranks "
                           f"({_by_value([v.get(k) for v in values])})" for k in keys)
    else:
        detail = f"settings differ between ranks ({_by_value(values)})"
    return DDStoreValueError(f"{what} is collective and needs the same settings on every "
                             f"rank: {detail}")


def _round(comm, call, error, share, same):
    """One round (collective over ``comm``): returns every rank's ``share``, or raises,
    alike on every rank, the first of: a rank's error (a rank whose local part
    failed meets the others in whatever round they are in next, so their calls may
    differ: the error is what matters), calls out of step, ``same`` values that differ.  An error that
    is not a :class:`DDStoreError` is told with the call it happened in
    (``"rank 1: load_ogb('ogb'): OSError: ..."``)."""
    note = _arrive(comm)
    what = _describe(call) if call is not None else _STATE["current"]
    info = comm.allgather((call, as_error(error, what), share, same, note,
                           _STATE["current"] if call is None else None))
    exc = _errors_error([i[1] for i in info])
    if exc is None:
        exc = _calls_error(info)
    if exc is None:
        exc = _same_error(info[0][0], [i[3] for i in info])
    if exc is not None:
        raise _mark(exc, comm)
    return [i[2] for i in info]


class Step:
    """One step of a collective call over ``comm`` (see the module docstring).  Made by
    :meth:`DDStore.collective <ddstore.DDStore.collective>` (or :func:`collective` where
    there is no store yet); used only as ``with ... as step:``.

    ``op`` / ``name``: the call this step begins (e.g. ``"add"``, ``"x"``), checked to be
    the same on every rank; ``op=None`` for a later step of a call already begun.
    ``same``: settings that must be equal on every rank (more may be given to
    :meth:`agree`).  ``values``: every rank's share, in rank order, once the round ran.
    """
    __slots__ = ("_comm", "_call", "_same", "_values", "_inject", "_previous",
                 "_check")

    def __init__(self, comm, op=None, name=None, same=None, check=None):
        self._comm = comm
        if op is None:
            self._call = None
        else:
            self._call = (str(op), name if name is None or isinstance(name, str)
                          else repr(name))
        self._same, self._check = same, check
        self._values = None
        self._inject = None
        self._previous = None

    @property
    def values(self):
        if self._values is None:
            raise DDStoreError("internal: step.values read before the step's round")
        return self._values

    def __enter__(self):
        if _core.forked():  # no MPI call in a forked child (a DataLoader worker)
            raise DDStoreStateError(
                f"{_describe(self._call) if self._call else 'a collective call'} in a "
                f"process forked from an MPI rank (a DataLoader worker with num_workers "
                f"> 0, os.fork): collective calls need MPI, which a forked process must "
                f"not call; make it in the rank's own process")
        if self._check is not None:
            self._check()
        call = self._call
        _TEST["steps"] += 1
        if isinstance(_TEST["seen"], list):  # every step in order, None for a later one
            _TEST["seen"].append(None if call is None else call[0])
        armed = _TEST["inject"]
        if armed is not None and armed[0] == _TEST["steps"]:  # the n-th step, any step
            self._inject, _TEST["inject"] = armed[1], None
        if call is not None:
            _STATE["last"] = _describe(call)
            if isinstance(_TEST["seen"], set):
                _TEST["seen"].add(call[0])
            if armed is not None and armed[0] == call[0]:
                self._inject, _TEST["inject"] = armed[1], None
        self._previous = _STATE["current"]
        if call is not None and self._previous is None:
            _STATE["current"] = _describe(call)
            hook = _PUBLISH["hook"]
            if hook is not None:
                hook(_STATE["current"], self._comm)
        return self

    def agree(self, share=None, same=None):
        """The step's round (collective): ends its local part.  ``share``: this rank's
        contribution (any picklable value); ``same``: settings that must be equal on every
        rank (besides those given to the step).  Returns every rank's share, in rank
        order; raises alike on every rank if any rank's local part failed, the ranks are
        in different steps, or a ``same`` setting differs.  Call it at most once."""
        if self._values is not None:
            raise DDStoreError("internal: a step has one round")
        error = None
        if self._inject is not None:
            error, self._inject = self._inject, None
            error = error() if isinstance(error, type) else error
        if same is not None and self._same is not None:
            same = {"step": self._same, "call": same}
        elif same is None:
            same = self._same
        self._values = _round(self._comm, self._call, error, share, same)
        return self._values

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc is None:
                if self._values is None:
                    self.agree()
                return False
            if not isinstance(exc, Exception) or is_agreed(exc):
                return False
            if self._values is not None:  # decided from agreed values: alike everywhere
                _mark(exc, self._comm)
                return False
            # the local part failed on this rank: the others learn it in this round
            try:
                _round(self._comm, self._call, exc, None, None)
            except DDStoreError as agreed:
                raise agreed from exc
            raise DDStoreError("internal: a failed local part was agreed as fine") \
                from exc  # pragma: no cover
        finally:
            if _STATE["current"] is not None and self._previous is None and \
                    self._call is not None:
                _STATE["current"] = None
                hook = _PUBLISH["hook"]
                if hook is not None:
                    hook(None, self._comm)


def collective(comm, op, name=None, *, same=None):
    """A :class:`Step` over ``comm``, for a collective call that has no store yet
    (``DDStore(...)``, ``DDStore.plan``); layers use :meth:`DDStore.collective`."""
    return Step(comm, op, name, same)
