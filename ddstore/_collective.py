"""The one mechanism behind every collective call: the collective *step* (see
docs/design.md, "Rule 1: every collective call is made of collective steps").

A rank makes its collective calls from one thread at a time: a step or a call of
several steps (a transaction, :func:`holds_interrupts`) entered by a second thread while
another thread of the process is inside one raises :class:`DDStoreStateError` at once,
before any MPI call (two threads' collectives on one communicator are not ordered by MPI:
they crashed, hung or mismatched the store's windows).

A collective call is made of steps.  Each step is written once, the same way::

    with store.collective("from_jodie", name, same={"add_reverse": add_reverse}) as step:
        share = parse_my_byte_range(path)          # the local part: may fail on one rank
        ends = step.agree(share.ends())            # the round: every rank's value
        if ends != sorted(ends):                   # decided from agreed values
            raise DDStoreValueError("not sorted")  # agreed by construction

**The local part** (before :meth:`Step.agree`, or the whole block when it never calls
it) may raise anything on any rank: *whatever it raises* (an ``OSError`` from a file, a
``KeyError``, a ``MemoryError``, a bug, a ``BaseException`` of the user's own, which
that rank then raises as it is, as a ``SystemExit`` below; not ``GeneratorExit``, which
a generator closed on one rank passes through without a round) is carried into the
step's one round, and every
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
that enclose it without another round: every rank is leaving them with it.
``SystemExit`` raised in a step's local part (``sys.exit()`` in a user's dataset while
it is read) is agreed in the round like an error: the other ranks raise an error naming
the rank and the exit's message, this rank goes on exiting, and the enclosing
transaction rolls back on every rank.  After the round it is this rank's alone and
passes through untouched: uncaught, it ends the job.

**Interrupts** (SIGINT: Ctrl-C, ``kill -INT``; in the main thread, where Python runs
signal handlers, while the handler is Python's or another Python callable).  A round is
never left halfway: from the start of a step's round to the end of its block, and in a
transaction's body between its steps, a SIGINT is only recorded (a temporary handler,
the previous one restored when the outermost step or transaction closes).  A recorded
SIGINT is agreed in the next round: every rank raises the same
:class:`DDStoreInterrupt` (a ``KeyboardInterrupt``, marked agreed, naming the
interrupted ranks), so the enclosing transaction rolls back on every rank and every
rank's ``except KeyboardInterrupt:`` runs (e.g. a save); a rank whose round meets
interrupted ranks while it is in the first step of a call made from its own ``except
KeyboardInterrupt:`` block, or of another call than theirs (its interrupt arrived in its
own code, the others' was deferred in the ``sync`` or ``save`` they waited in), waits
for them in a new round instead, which their handlers' calls meet (:func:`_meets_later`).
In a local part a SIGINT raises
``KeyboardInterrupt`` at once, as without the store, and the step agrees it in its round
like an error (the same :class:`DDStoreInterrupt` on every rank).  A SIGINT that no later
round of the call sees (it arrived during the last round's gather or after it) raises
``KeyboardInterrupt`` on that rank alone when the call ends: the call completed on every
rank.  A step made a commit point (:meth:`Step.defer_interrupts`: a save's rename)
defers SIGINT in its local part too and does not agree it in its round: it is raised
once the call has completed.  With a SIGINT handler that is not Python's own, the
handler is called then instead.

**Stores.**  A step made through a store (:meth:`DDStore.collective`) carries the store's
id, agreed in its constructor's round (the largest of the ranks' proposals from a
counter per process, so every rank names the store alike and no two stores of a rank
share one): ranks in the same call on different stores of one communicator raise an
error naming both stores (``store #1``, ``store #2``) instead of matching wrongly.

A step normally waits as long as its peers take to arrive (a rank may compute for hours
before its next collective call).  Inside :func:`bounded` (the free at interpreter exit,
see :mod:`ddstore._lifecycle`) it polls the ``Ibarrier``: between polls the caller's
``watch`` looks at what the other ranks are doing (the status board of
:mod:`ddstore._status`, which may end the job), and when a limit is set it waits at most
that many seconds, then calls the caller's ``on_timeout`` (which ends the job).

What this rank is doing is published as it changes: entering the first named step of a
call and leaving it call the hook set by :func:`set_publish_hook` as ``hook(description,
comm)`` (description None on leaving), a few local stores and no communication.
"""
import contextlib
import functools
import pickle
import signal
import sys
import threading
import time

try:  # signal's C module: signal.getsignal + signal.signal wrap it in enum conversions
    # that cost 3.9 us a pair, two pairs per collective step (0.23 us here)
    import _signal as _handlers
except ImportError:  # pragma: no cover -- another Python implementation
    _handlers = signal

from . import _core
from .errors import DDStoreError, DDStoreInterrupt, DDStoreStateError, \
    DDStoreValueError, as_error, plain_class

__all__ = ["Step", "collective", "is_agreed", "agreed_over", "format_ranks", "bounded",
           "join_bounded", "wait_bounded", "last_call", "current_call", "inject",
           "record_calls",
           "DDStoreInterrupt", "hold_interrupts", "release_interrupts", "holds_interrupts",
           "next_store_id", "set_publish_hook", "call_name", "caller_thread"]

# what this rank is doing, for the messages of a job that is ended: the last collective
# call it entered, the step it is in now (or None), and the bound of the rounds inside
# ``bounded`` (or None)
# "scope": within a call of several steps (holds_interrupts), a one-item list holding
# the description of its first named step: its later steps are told by it
_STATE = {"last": None, "current": None, "bound": None, "scope": None}
# called as hook(description, comm) whenever what this rank is doing changes (the first
# named step of a call entered, or left: description None): the status board of
# :mod:`ddstore._status`, set by :mod:`ddstore._lifecycle` (:func:`set_publish_hook`)
_PUBLISH = {"hook": None}


def set_publish_hook(hook):
    """Call ``hook(description, comm)`` whenever what this rank is doing changes (the
    first named step of a collective call entered; left: description None).  No
    communication may happen in it."""
    _PUBLISH["hook"] = hook

# test hooks: an exception to raise in the local part of a named step on this rank
# (:func:`inject`), and the set of named steps entered (:func:`record_calls`)
_TEST = {"inject": None, "seen": None, "steps": 0, "unscoped": None}
# the next store id this rank proposes (see :func:`next_store_id`)
_STORES = {"next": 1}


# SIGINT inside collective calls (the main thread only; see "Interrupts" in the module
# docstring): a stack of open contexts, "local" (a step's local part: SIGINT acts as
# without the store, and the KeyboardInterrupt is agreed in the step's round) or "defer"
# (a round, what follows it in its step, a transaction's body: SIGINT is recorded,
# ``pending``, and acted on at the next round or when the outermost context closes)
_SIG = {"stack": [], "previous": None, "installed": False, "pending": False}
_MAIN = threading.main_thread()


def _on_sigint(signum, frame):
    stack = _SIG["stack"]
    if stack and stack[-1] == "local":
        _SIG["previous"](signum, frame)  # as without the store (KeyboardInterrupt)
        return
    _SIG["pending"] = True


def _push(mode):
    """Open an interrupt context; returns its level (None outside the main thread)."""
    if threading.current_thread() is not _MAIN:
        return None
    stack = _SIG["stack"]
    if not stack:
        try:
            current = _handlers.getsignal(signal.SIGINT)
            if callable(current) and current is not _on_sigint:
                _handlers.signal(signal.SIGINT, _on_sigint)
                _SIG["previous"], _SIG["installed"] = current, True
        except (ValueError, OSError, RuntimeError):  # pragma: no cover -- a subinterpreter
            pass
    stack.append(mode)
    return len(stack)


def _set_mode(level, mode):
    if level is not None and level <= len(_SIG["stack"]):
        _SIG["stack"][level - 1] = mode


def _pop(level):
    """Close the interrupt context at ``level`` (and any left open above it); closing
    the outermost restores the previous SIGINT handler and, if a SIGINT was deferred and
    not agreed in a round since, calls that handler now (``KeyboardInterrupt`` on this
    rank, after a call that completed on every rank)."""
    if level is None:
        return
    stack = _SIG["stack"]
    del stack[level - 1:]
    if stack or not _SIG["installed"]:
        return
    previous = _SIG["previous"]
    _SIG["installed"], _SIG["previous"] = False, None
    if _handlers.getsignal(signal.SIGINT) is _on_sigint:
        _handlers.signal(signal.SIGINT, previous)
    if _SIG["pending"]:
        _SIG["pending"] = False
        previous(signal.SIGINT, None)


def interrupt_pending():
    """Whether a SIGINT arrived while deferred and no round has agreed it yet (what a
    wait that no round ends, the free at exit, acts on at once)."""
    return _SIG["pending"]


def hold_interrupts():
    """Defer SIGINT until :func:`release_interrupts` (a transaction's body: code between
    its steps is not left halfway on one rank); a SIGINT that arrives meanwhile is
    agreed in the next round, or acted on when the outermost context closes.  Returns
    the level to pass to :func:`release_interrupts`."""
    return _push("defer")


def release_interrupts(level):
    _pop(level)


def holds_interrupts(fn):
    """Decorator of a collective call whose steps are followed by more collective work
    outside a round (an MPI barrier, an exchange, the C core's setup): SIGINT is held
    over the whole call, as a transaction's body holds it, so that it is agreed in one
    of the call's rounds or raised once the call has completed on this rank; never
    between a round and that work on one rank alone, where the others would wait for it
    without a bound."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        level = hold_interrupts()
        try:  # its later steps are told by its first named step
            outer = enter_scope(what=fn.__qualname__)
        except BaseException:
            release_interrupts(level)
            raise
        try:
            return fn(*args, **kwargs)
        finally:
            leave_scope(outer)
            release_interrupts(level)  # may raise a SIGINT deferred and not agreed
    return call


# the thread making this process's collective calls, and how deep it is in them: one
# thread at a time (two threads' calls interleave their MPI collectives on one
# communicator, which MPI does not order: a crash, a hang or mismatched windows)
_CALLER = {"thread": None, "depth": 0}
_CALLER_LOCK = threading.Lock()


def _enter_call(what):
    """This thread enters a collective call (or a step or scope of one); raises
    :class:`DDStoreStateError` at once, before any MPI call, while another thread of
    this process is inside one.  Not in a process forked from a rank (its threads are
    the parent's: the step's own check refuses its collective calls)."""
    if _core.forked():
        return
    me = threading.current_thread()
    with _CALLER_LOCK:
        other = _CALLER["thread"]
        if other is not None and other is not me:
            raise DDStoreStateError(
                f"{what}: a collective call made by thread {me.name!r} while thread "
                f"{other.name!r} of this process is in {_current() or 'a collective call'}"
                f": a rank makes its collective calls from one thread at a time (MPI does "
                f"not order collectives two threads make at once); make them from one "
                f"thread, or after the other's has returned")
        _CALLER["thread"] = me
        _CALLER["depth"] += 1


def _leave_call():
    if _core.forked():
        return
    with _CALLER_LOCK:
        _CALLER["depth"] -= 1
        if _CALLER["depth"] <= 0:
            _CALLER["thread"], _CALLER["depth"] = None, 0


def caller_thread():
    """The thread of this process inside a collective call now, or None."""
    with _CALLER_LOCK:
        return _CALLER["thread"]


def enter_scope(label=None, what=None):
    """Begin a call of several steps (:func:`holds_interrupts`, a transaction): an error
    or interrupt in a later step (``op=None``) is told as in ``label``, or in the
    call's first named step.  Returns what :func:`leave_scope` restores.  Raises
    :class:`DDStoreStateError` (nothing begun; ``what``, else ``label``, names the call
    refused) while another thread of this process is in a collective call: call it
    after :func:`hold_interrupts` (a SIGINT between them would leave the scope open)
    and before anything else that :func:`leave_scope` must undo."""
    _enter_call(what or label or "a collective call")
    outer, _STATE["scope"] = _STATE["scope"], [label]
    return outer


def leave_scope(outer):
    _STATE["scope"] = outer
    _leave_call()


def _current():
    """The call this rank is in, for messages: the named step open now, else (a later
    step of a call of several steps) the call's first named step, or None."""
    if _STATE["current"] is not None:
        return _STATE["current"]
    scope = _STATE["scope"]
    return None if scope is None else scope[0]


def _take_pending():
    """Whether this rank holds a deferred SIGINT to agree in the round now (only where
    the handler it defers is Python's own, which raises ``KeyboardInterrupt``; another
    handler is called when the outermost context closes); it is consumed."""
    if _SIG["pending"] and _SIG["previous"] is signal.default_int_handler:
        _SIG["pending"] = False
        return True
    return False


def next_store_id():
    """The store id this rank proposes in a store's constructor round: the ranks agree
    on the largest proposal (:func:`take_store_id`), so that every rank names the store
    alike and no two stores this rank made share an id."""
    return _STORES["next"]


def take_store_id(agreed):
    _STORES["next"] = max(_STORES["next"], int(agreed) + 1)
    return int(agreed)


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
    if _STATE["bound"] is None:
        thread.join()
        return
    wait_bounded(lambda: (thread.join(0.05), not thread.is_alive())[1])


def wait_bounded(done):
    """Wait until ``done()`` (which may itself block a moment, e.g. a join with a
    timeout) returns true: as long as it takes, or inside :func:`bounded` polled like a
    round (see :func:`join_bounded`)."""
    bound = _STATE["bound"]
    if bound is None:
        while not done():
            pass
        return
    _poll(done, bound)


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


def record_unscoped(found):
    """Test hook: append to the list ``found`` the ``file:line`` of every later step
    (``op=None``) entered outside any call of several steps (no named step open, no
    :func:`holds_interrupts` call, no transaction), whose errors no call would name
    (None stops recording)."""
    _TEST["unscoped"] = found


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


def _text(obj, how=str):
    """``str(obj)`` (or ``how(obj)``), or ``"<str() raised X>"`` when that raises: what a
    round tells never fails because of an object's own ``__str__``/``__repr__``."""
    try:
        return how(obj)
    except Exception as failure:  # noqa: BLE001 -- any failure of user code
        return f"<{how.__name__}() raised {type(failure).__name__}>"


def _error_of(error, what):
    """:func:`~ddstore.errors.as_error` that cannot fail: an exception whose ``__str__``
    raises is told by its class name and ``"<str() raised ...>"``."""
    try:
        return as_error(error, what)
    except Exception as failure:  # noqa: BLE001 -- the exception's own __str__
        cls = type(error) if isinstance(error, DDStoreError) else plain_class(error)
        text = f"{_text(type(error).__name__)}: <str() raised " \
               f"{_text(type(failure).__name__)}>"
        return cls, text if what is None else f"{what}: {text}"


def _package_class(cls):
    """The nearest class of :mod:`ddstore.errors` above ``cls`` (one every rank can
    unpickle)."""
    for c in getattr(cls, "__mro__", ()):
        if c.__module__ == DDStoreError.__module__:
            return c
    return DDStoreError


def _payload(row, what):
    """This rank's part of a round, pickled before the round begins: a share or error
    that cannot be pickled becomes this rank's error instead of breaking the round."""
    try:
        return pickle.dumps(row, pickle.HIGHEST_PROTOCOL)
    except Exception as failure:  # noqa: BLE001 -- a user's share or exception class
        call, error, _share, _same, note, current, store = row
        reason = f"{type(failure).__name__}: {_text(failure)}"
        if error is None:
            error = (DDStoreValueError, f"{what}: this rank's part of the round cannot "
                                        f"be sent ({reason})")
        else:
            error = (_package_class(error[0]), str(error[1]))
        if call is not None and call[1] is not None:  # (the name as text, as it reads)
            call = (call[0], call_name(call[1]))
        return pickle.dumps((call, error, None, None, note, current, store),
                            pickle.HIGHEST_PROTOCOL)


class _Shown(str):
    """A step's name that is not a str (a list of names, a tuple key), as its text:
    told as ``remove(['a', 'b'])``, not as the quoted text of it."""
    __slots__ = ()

    def __repr__(self):
        return str(self)


def call_name(value):
    """``value`` (a key, an edge type, a list of names, None) as a step's name: told by
    its ``repr`` as it is, ``put(('u', 'x'))``, not as quoted text."""
    return _Shown(_text(value, repr))


def _describe(call):
    if call is None:
        return "another collective"
    op, name = call
    return f"{op}()" if name is None else f"{op}({name!r})"


def _doing(call, current, many=False):
    """What a rank (``many``: several ranks) in a round is doing, for messages:
    ``"called add('y')"``, or for a later step of a call already begun, ``"is in
    put_range('x')"`` (``"are in ..."``)."""
    if call is None and current is not None:
        return f"{'are' if many else 'is'} in {current}"
    return f"called {_describe(call)}"


def _by_value(values):
    groups = {}  # repr of a value -> ranks holding it
    for r, v in enumerate(values):
        groups.setdefault(v if isinstance(v, str) else _text(v, repr), []).append(r)
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
    message = "; ".join(f"{format_ranks(ranks)}: {msg}"
                        for msg, ranks in by_message.items())
    try:
        return cls(message)
    except Exception:  # noqa: BLE001 -- a user's subclass with another signature
        return _package_class(cls)(message)


def _store_of(store):
    return f"store #{store}" if store is not None else "no store"


def _detail(info, ranks=None, stores=False):
    """``"rank 0 called add('a'); rank 1 called add('b') (exiting)"`` for the ranks
    ``ranks`` (default: all), each with its store when ``stores``."""
    by_call = {}
    for r, (c, _e, _s, _m, n, current, store) in enumerate(info):
        if ranks is None or r in ranks:
            key = (c, n, current if c is None else None, store if stores else None)
            by_call.setdefault(key, []).append(r)
    return "; ".join(f"{format_ranks(rs)} {_doing(c, cur, len(rs) > 1)}"
                     + (f" on {_store_of(st)}" if stores else "")
                     + (f" ({n})" if n else "") for (c, n, cur, st), rs in by_call.items())


def _calls_error(info):
    calls = [i[0] for i in info]
    stores = [i[6] for i in info]
    if all(c == calls[0] for c in calls) and all(s == stores[0] for s in stores):
        return None
    if all(c == calls[0] for c in calls):  # the same call, on different stores
        return DDStoreValueError(
            f"collective calls out of step: every rank must make the same collective "
            f"calls on the same store, in the same order: "
            f"{_describe(calls[0]) if calls[0] else 'a later step of a call'} "
            f"was called on different stores of one communicator "
            f"({_detail(info, stores=True)}; a store's number is its place among the "
            f"stores made on this communicator, see DDStore.store_id)")
    differ = any(s != stores[0] for s in stores)
    return DDStoreValueError(f"collective calls out of step: every rank must make the "
                             f"same collective calls, in the same order, with the same "
                             f"names ({_detail(info, stores=differ)})")


def _meets_later(comm, info, flags, row):
    """Whether this rank, in the first step of a call, neither interrupted nor failing,
    and handling a ``KeyboardInterrupt`` of its own (the call is made from an ``except
    KeyboardInterrupt:`` block), waits for the interrupted ranks in a new round instead
    of raising their interrupt: it has had its interrupt, and this call has not begun
    anywhere.  What Ctrl-C makes of a training loop: one rank's ``KeyboardInterrupt``
    arrives in its own code and its handler calls ``save``, while another's is deferred
    in the call it was waiting in (``sync``, or the epoch's own ``save``); that rank
    raises the agreed interrupt and, in its own handler, calls ``save`` too, which this
    rank's round then meets.  So does a rank in another call than every interrupted one
    (in a program whose ranks make the same calls, only an interrupt put them there: its
    own, handled, then a ``save`` after the loop, or the free at exit after a handler's
    ``sys.exit``).  A rank in the same call, not handling an interrupt, raises it as
    every rank does (Ctrl-C sent to one rank: every handler runs)."""
    me = comm.Get_rank()
    if not any(flags) or flags[me] or row[0] is None or row[1] is not None:
        return False
    if isinstance(sys.exc_info()[1], KeyboardInterrupt):
        return True
    # in another call than every interrupted rank: in a program whose ranks make the
    # same calls, only an interrupt put them there (this rank's, handled: a save after
    # the loop, or the free at exit after a handler's sys.exit)
    return all((info[r][0], info[r][6]) != (row[0], row[6])
               for r, f in enumerate(flags) if f)


def _interrupt_error(info, flags):
    ranks = [r for r, f in enumerate(flags) if f]
    # (ranks in a later step of a call whose first step has closed: nothing to name)
    known = any(info[r][0] is not None or info[r][5] is not None for r in ranks)
    return DDStoreInterrupt(
        f"interrupted (KeyboardInterrupt: SIGINT, Ctrl-C) on {format_ranks(ranks)} "
        f"({_detail(info, ranks) if known else 'in a later step of the call'}): the "
        f"collective call stops alike on every rank, and what it had created is removed")


#: The key of a ``same=`` mapping whose value is not a setting but what to do when
#: another of its settings differs between ranks (appended to the refusal).
SAME_HINT = "(what to do)"


def _same_error(call, values):
    """The error (the same on every rank) when the gathered ``same`` values differ."""
    if all(v == values[0] for v in values):
        return None
    # (a later step of a call: the call it belongs to, the same on every rank)
    what = _describe(call) if call is not None else _current() or "this collective call"
    if all(isinstance(v, dict) for v in values):  # name only the settings that differ
        keys = [k for k in dict.fromkeys(k for v in values for k in v)
                if k != SAME_HINT and any(v.get(k) != values[0].get(k) for v in values)]
        detail = ", ".join(f"{k} differs between ranks "
                           f"({_by_value([v.get(k) for v in values])})" for k in keys)
        hint = values[0].get(SAME_HINT)
        if hint and keys:
            detail += f"; {hint}"
    else:
        detail = f"settings differ between ranks ({_by_value(values)})"
    return DDStoreValueError(f"{what} is collective and needs the same settings on every "
                             f"rank: {detail}")


def _round(comm, call, error, share, same, store=None, keep_pending=False):
    """One round (collective over ``comm``): returns every rank's ``share``, or raises,
    alike on every rank, the first of: an interrupt (a ``KeyboardInterrupt`` given as
    ``error``, or a SIGINT deferred on some rank: :class:`DDStoreInterrupt`), a rank's
    error (a rank whose local part failed meets the others in whatever round they are in
    next, so their calls may differ: the error is what matters), calls (or stores) out
    of step, ``same`` values that differ.  An error that is not a :class:`DDStoreError`
    is told with the call it happened in (``"rank 1: load_ogb('ogb'): OSError: ..."``).

    Everything this rank sends is made into text and pickled *before* the barrier (an
    exception whose ``__str__`` raises cannot break the round halfway), and the caller
    defers SIGINT while it runs (see :class:`Step`)."""
    bound = _STATE["bound"]
    what = _describe(call) if call is not None else _current()
    interrupted = isinstance(error, KeyboardInterrupt)
    row = (call, None if interrupted else _error_of(error, what), share, same,
           None if bound is None else bound[2], what if call is None else None, store)
    payload = _payload(row, what)
    while True:
        _arrive(comm)
        # a SIGINT deferred until now is agreed here (one arriving during the allgather
        # is acted on after the round, or agreed in the next)
        interrupted = (not keep_pending and _take_pending()) or interrupted
        gathered = comm.allgather((payload, interrupted))
        info = [pickle.loads(p) for p, _ in gathered]
        flags = [f for _, f in gathered]
        if not _meets_later(comm, info, flags, row):
            break
    exc = _interrupt_error(info, flags) if any(flags) else None
    if exc is None:
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
                 "_check", "_store", "_level", "_hold")

    def __init__(self, comm, op=None, name=None, same=None, check=None, store=None):
        self._comm = comm
        if op is None:
            self._call = None
        else:
            # (a str subclass as plain text: its class may be one pickle cannot send)
            self._call = (str(op), str.__str__(name) if isinstance(name, str) else
                          name if name is None else call_name(name))
        self._same, self._check, self._store = same, check, store
        self._values = None
        self._inject = None
        self._previous = None
        self._level = None
        self._hold = False

    def defer_interrupts(self):
        """Make this step a commit point (before ``with``; returns the step): a SIGINT
        on any rank during it, local part included, is neither raised there nor agreed
        in its round, but raised once the call has completed (where the call holds
        interrupts, :func:`holds_interrupts`), so that an interrupt cannot fail the
        call after what its local part did can no longer be undone (a save's rename).
        Errors the local part raises are agreed as in any step."""
        self._hold = True
        return self

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
        _enter_call(_describe(self._call) if self._call else "a collective step")
        try:
            return self._enter()
        except BaseException:
            _leave_call()
            raise

    def _enter(self):
        call = self._call
        _TEST["steps"] += 1
        if isinstance(_TEST["seen"], list):  # every step in order, None for a later one
            _TEST["seen"].append(None if call is None else call[0])
        if call is None and _STATE["current"] is None and _STATE["scope"] is None and \
                _TEST["unscoped"] is not None:
            import inspect
            where = inspect.currentframe().f_back  # (the with statement's frame)
            _TEST["unscoped"].append(f"{where.f_code.co_filename}:{where.f_lineno}")
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
            if _STATE["scope"] is not None and _STATE["scope"][0] is None:
                _STATE["scope"][0] = _STATE["current"]  # (the call's later steps)
            hook = _PUBLISH["hook"]
            if hook is not None:
                hook(_STATE["current"], self._comm)
        self._level = _push("defer" if self._hold else "local")  # closed by __exit__
        return self

    def agree(self, share=None, same=None):
        """The step's round (collective): ends its local part.  ``share``: this rank's
        contribution (any picklable value); ``same``: settings that must be equal on every
        rank (besides those given to the step).  Returns every rank's share, in rank
        order; raises alike on every rank if any rank's local part failed, the ranks are
        in different steps, or a ``same`` setting differs.  Call it at most once."""
        if self._values is not None:
            raise DDStoreError("internal: a step has one round")
        _set_mode(self._level, "defer")  # the round and what follows it: SIGINT waits
        error = None
        if self._inject is not None:
            error, self._inject = self._inject, None
            error = error() if isinstance(error, type) else error
            if self._hold and isinstance(error, KeyboardInterrupt):  # as a SIGINT here
                error, _SIG["pending"] = None, _SIG["installed"]
        if same is not None and self._same is not None:
            same = {"step": self._same, "call": same}
        elif same is None:
            same = self._same
        try:
            self._values = _round(self._comm, self._call, error, share, same,
                                  self._store, self._hold)
        except (DDStoreError, DDStoreInterrupt):
            if error is not None and not isinstance(
                    error, (Exception, KeyboardInterrupt, GeneratorExit)):
                raise _mark(error, self._comm) from None  # an injected exit: as __exit__
            raise
        return self._values

    def __exit__(self, exc_type, exc, tb):
        _set_mode(self._level, "defer")  # from here on, SIGINT waits for the round
        try:
            if exc is None:
                if self._values is None:
                    self.agree()
                return False
            if is_agreed(exc):
                return False
            interrupted = isinstance(exc, KeyboardInterrupt) and self._values is None
            # a SystemExit, or another BaseException (a test's skip, a task's
            # cancellation), in the local part: agreed, and raised as it is here
            exiting = not isinstance(exc, (Exception, KeyboardInterrupt, GeneratorExit)) \
                and self._values is None
            if not isinstance(exc, Exception) and not (interrupted or exiting):
                # a SystemExit, KeyboardInterrupt or another BaseException after the
                # round (this rank's alone), or a generator closed (each rank closes its
                # own when it drops it: no round)
                return False
            if self._values is not None:  # decided from agreed values: alike everywhere
                _mark(exc, self._comm)
                return False
            # the local part failed (or was interrupted) on this rank: the others learn
            # it in this round
            _set_mode(self._level, "defer")
            try:
                _round(self._comm, self._call, exc, None, None, self._store, self._hold)
            except (DDStoreError, DDStoreInterrupt) as agreed:
                if exiting:  # this rank exits (or is cancelled...) as it was asked to
                    # (the others raise the agreed error naming it): marked, so
                    # enclosing steps pass it on and the transaction rolls back on every
                    # rank
                    _mark(exc, self._comm)
                    return False
                raise agreed from exc
            raise DDStoreError("internal: a failed local part was agreed as fine") \
                from exc  # pragma: no cover
        finally:
            try:
                if _STATE["current"] is not None and self._previous is None and \
                        self._call is not None:
                    _STATE["current"] = None
                    hook = _PUBLISH["hook"]
                    if hook is not None:
                        hook(None, self._comm)
            finally:
                try:
                    _pop(self._level)  # may raise a SIGINT deferred and not agreed
                finally:
                    _leave_call()


def collective(comm, op, name=None, *, same=None, store=None):
    """A :class:`Step` over ``comm``, for a collective call that has no store yet
    (``DDStore(...)``, ``DDStore.plan``); layers use :meth:`DDStore.collective`.
    ``store``: the store id the step belongs to (None: none)."""
    return Step(comm, op, name, same, store=store)
