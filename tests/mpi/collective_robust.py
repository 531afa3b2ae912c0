"""Nothing a rank's own code or signals do breaks a collective round halfway (issue 43,
items 5-8 and 11; docs/design.md, rule 1):

- an exception whose ``__str__`` raises, and a share that cannot be pickled, on one
  rank: every rank raises the same agreed error;
- SIGINT (a ``KeyboardInterrupt`` injected into a step, and a real SIGINT sent to
  this thread, ``signal.raise_signal``, in a local part, during a round, after the last
  round of a call, and inside ``put_range``'s callable and every step of
  ``load_synthetic``): the round completes on every rank, an interrupt seen by a
  round is raised alike on every rank as a ``KeyboardInterrupt`` and the call's
  variables are removed on every rank; one seen by no round is raised on its
  rank after a call that completed everywhere;
- two stores of one communicator called in different orders per rank: an error naming
  both stores;
- an environment setting that differs between ranks (``DDSTORE_SERVE=off`` on the last
  rank) or an integer that is not plain ASCII decimal: refused at construction naming
  the variable, the ranks and the values;
- a ``MemoryError`` while reading ``add``'s rows is told as a ``MemoryError``;
- an exception not agreed between the ranks leaving a transaction: nothing undone, and a
  warning names what stays created and set aside, and how to roll back.

    timeout 300 mpiexec -n 2 python tests/mpi/collective_robust.py
"""
import os
import signal
import threading
import time
import warnings

import numpy as np
import torch
from mpi4py import MPI

from _harness import Cases, check, expect_error, run_main, shared_tmpdir

import ddstore
from ddstore import DDStoreError, DDStoreMemoryError, DDStoreStateError, DDStoreValueError, \
    _collective
from ddstore import pyg as dpyg

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
LAST = size - 1
cases = Cases()


class BadStr(RuntimeError):
    """An exception whose ``__str__`` and ``__repr__`` raise."""

    def __str__(self):
        raise ValueError("no text")

    __repr__ = __str__


class SigintNow:
    """Injected as an exception class: making it sends this process SIGINT (during the
    step's round: the injection is made at the start of ``Step.agree``) and injects
    nothing."""

    def __new__(cls):
        signal.raise_signal(signal.SIGINT)  # to this thread: handled now
        return None


def sigint_after_gather(rounds):
    """``(real, stand-in)`` for ``_collective._round``: the stand-in counts rounds in
    ``rounds["n"]`` and sends this thread a real SIGINT just after the gather of round
    ``rounds["at"]``."""
    real_round = _collective._round

    def round_then_sigint(*args, **kwargs):
        out = real_round(*args, **kwargs)
        rounds["n"] += 1
        if rounds["n"] == rounds["at"]:
            signal.raise_signal(signal.SIGINT)  # to this thread: handled now
        return out
    return real_round, round_then_sigint


def interrupt_kinds(call, least):
    """``call()`` once, counting its steps (at least ``least``: checked) and rounds:
    the interrupts to try, ``(k, kind)``: a KeyboardInterrupt or a real SIGINT in its
    k-th step's round, and a real SIGINT after its k-th round's gather."""
    _collective.reset_steps()
    rounds = {"n": 0, "at": None}
    real_round, round_then_sigint = sigint_after_gather(rounds)
    _collective._round = round_then_sigint
    try:
        call()
    finally:
        _collective._round = real_round
    steps = _collective.steps_entered()
    check(steps >= least, f"the call entered {steps} steps")
    return [(k, "KeyboardInterrupt" if k % 2 else "SIGINT in the round")
            for k in range(1, steps + 1)] + \
        [(k, "SIGINT after the gather") for k in range(1, rounds["n"] + 1)]


def call_interrupted(call, who, k, kind):
    """``call()`` with the interrupt ``(k, kind)`` (:func:`interrupt_kinds`) on rank
    ``who``: ``(its result or None, agreed, late, what each rank raised)``: agreed,
    every rank raised the same agreed DDStoreInterrupt; late, the call completed on
    every rank and only ``who`` raised KeyboardInterrupt, after it."""
    _collective.reset_steps()
    rounds = {"n": 0, "at": None}
    real_round, round_then_sigint = sigint_after_gather(rounds)
    if rank == who and kind == "SIGINT after the gather":
        rounds["at"] = k
    elif rank == who:
        _collective.inject(k, KeyboardInterrupt() if k % 2 else SigintNow)
    got = out = None
    _collective._round = round_then_sigint
    try:
        out = call()
    except KeyboardInterrupt as exc:
        got = (type(exc).__name__, _collective.is_agreed(exc))
    except Exception as exc:  # noqa: BLE001 -- reported
        got = ("other: " + type(exc).__name__ + ": " + str(exc), False)
    finally:
        _collective.inject(None)
        _collective._round = real_round
    everyone = comm.allgather(got)
    agreed = all(g == ("DDStoreInterrupt", True) for g in everyone)
    late = all(g is None for r, g in enumerate(everyone) if r != who) and \
        everyone[who] in (None, ("KeyboardInterrupt", False))
    return out, agreed, late, everyone


def new_store():
    return ddstore.DDStore(comm)


def interrupted_alike(fn, store, what, ranks=None, before=None):
    """``fn()`` must raise a KeyboardInterrupt on every rank, the same agreed
    DDStoreInterrupt naming ``ranks`` (default: the last), and leave ``store`` as it
    was; the SIGINT handler is Python's own again."""
    before = store.variables() if before is None else before
    got = None
    try:
        fn()
    except KeyboardInterrupt as exc:
        got = (type(exc).__name__, str(exc), _collective.is_agreed(exc))
    except Exception as exc:  # noqa: BLE001 -- reported
        got = ("other: " + type(exc).__name__, str(exc), False)
    everyone = comm.allgather(got)
    check(got is not None and got[0] == "DDStoreInterrupt" and got[2],
          f"{what}: not an agreed DDStoreInterrupt: {got}")
    check(all(g == everyone[0] for g in everyone), f"{what}: ranks differ: {everyone}")
    ranks = [LAST] if ranks is None else ranks
    check(got is not None and ddstore_ranks(ranks) in got[1],
          f"{what}: the message does not name {ranks}: {got}")
    after = store.variables()
    check(after == before, f"{what}: variables {after}, before {before}")
    check(comm.allgather(after) == [after] * size, f"{what}: ranks hold different "
                                                    f"variables")
    check(signal.getsignal(signal.SIGINT) is signal.default_int_handler,
          f"{what}: the SIGINT handler is not restored: "
          f"{signal.getsignal(signal.SIGINT)}")


def ddstore_ranks(ranks):
    return _collective.format_ranks(ranks)


# ---------------------------------------------------------------- item 5
@cases("an exception whose __str__ raises, a share that cannot be sent")
def _(t):
    t.store = store = new_store()
    store.add("a", np.arange(3, dtype=np.int64).reshape(-1, 1))
    for op, fn in (("add", lambda: store.add("b", np.zeros((2, 1)))),
                   ("sync", store.sync),
                   ("remove", lambda: store.remove("a"))):
        if rank == LAST:
            _collective.inject(op, BadStr())
        expect_error(DDStoreValueError, [f"rank {LAST}", "BadStr",
                                         "<str() raised ValueError>"], fn,
                     what=f"{op} <- BadStr", agree=True, agreed=True, store=store)
    # the constructor too (no store yet)
    if rank == LAST:
        _collective.inject("DDStore", BadStr())
    expect_error(DDStoreValueError, [f"rank {LAST}", "BadStr", "<str() raised"],
                 new_store, what="DDStore <- BadStr", agree=True, agreed=True)

    def unpicklable_share():
        with store.collective("test.share") as step:
            step.agree((lambda: 0) if rank == LAST else 1)
    expect_error(DDStoreValueError, [f"rank {LAST}", "cannot be sent", "test.share"],
                 unpicklable_share, agree=True, agreed=True, store=store)
    check(store.variables() == ["a"], f"variables {store.variables()}")


# ---------------------------------------------------------------- item 6
@cases("KeyboardInterrupt injected and real SIGINT in steps")
def _(t):
    store = t.store
    before = store.variables()

    def two_adds(injected):
        with store.transaction("two adds"):
            store.add("k1", np.zeros((2, 1)))
            if rank == LAST:  # the next add's step, at the end of its local part
                _collective.inject("add", injected)
            store.add("k2", np.zeros((2, 1)))
    # injected into the second add's local part: the first is removed on every rank
    interrupted_alike(lambda: two_adds(KeyboardInterrupt()), store,
                      "KeyboardInterrupt injected into the second add")
    # a real SIGINT during the second add's round: deferred, then agreed in it
    interrupted_alike(lambda: two_adds(SigintNow), store,
                      "SIGINT during the second add's round")

    # sys.exit() in a local part (a user's dataset read by a constructor) on one rank:
    # that rank exits as asked, the others raise an agreed error naming it, and the
    # transaction rolls back on every rank (before: the others met that rank's next
    # call, out of step, and the job was aborted).  The same for a BaseException of the
    # user's own (neither an Exception nor an interrupt: a test's skip, a task's
    # cancellation), which left the call on that rank alone (the others met its next
    # call, out of step, and the ranks' stores differed)
    class Cancelled(BaseException):
        pass
    for exc in (SystemExit("leaving on purpose"), Cancelled("stop")):
        name, got = type(exc).__name__, None
        try:
            two_adds(exc)
        except type(exc) as own:
            got = (name, str(own), _collective.is_agreed(own))
        except DDStoreError as other:
            got = (type(other).__name__, str(other), _collective.is_agreed(other))
        want = (name, str(exc), True) if rank == LAST else \
            ("DDStoreValueError", f"rank {LAST}: add('k2'): {name}: {exc}", True)
        check(got == want, f"{name} in a local part: {got}, expected {want}")
        check(store.variables() == before, f"{name}: variables {store.variables()}")

    # the same heterogeneous data inserted in another order on some rank: told so (the
    # stores were filled in the data's order: out of step, naming an inner put)
    if size > 1:
        from torch_geometric.data import HeteroData
        h = HeteroData()
        for k in (["u", "v"] if rank != LAST else ["v", "u"]):
            h[k].x = torch.ones(4, 2)
        h["u", "to", "v"].edge_index = torch.tensor([[0, 1], [1, 2]])
        expect_error(DDStoreValueError, ["pyg.from_hetero('order')", "the order of the node "
                                         "types, edge types and attributes (as inserted) "
                                         "differs between ranks", "['v.x', 'u.x', "],
                     lambda: dpyg.from_hetero(store, h, name="order"),
                     what="from_hetero, another insertion order", agree=True, agreed=True,
                     store=store)
        # data that differs between ranks: the values named, then what to do about it
        from torch_geometric.data import Data
        d = Data(x=torch.full((4, 2), float(rank == LAST)),
                 edge_index=torch.tensor([[0, 1], [1, 2]]))
        expect_error(DDStoreValueError, ["data 'x' differs between ranks", "fingerprint",
                                         "; every rank must pass the same data: make it "
                                         "alike on every rank (the same seed"],
                     lambda: dpyg.from_pyg(store, d, name="differs"),
                     what="from_pyg, data differing", agree=True, agreed=True, store=store)

    # two threads of a rank in collective calls at once: the second refused at once,
    # before any MPI call (a crash, a hang or mismatched windows); the first completes
    refused = []

    def second():
        try:
            store.sync()
        except DDStoreStateError as exc:
            refused.append(str(exc))
    with store.transaction("held by the main thread"):
        other = threading.Thread(target=second, name="second")
        other.start()
        other.join(30)
    check(len(refused) == 1 and "DDStore.sync: a collective call made by thread 'second' "
          "while thread 'MainThread' of this process is in held by the main thread"
          in refused[0],
          f"a second thread's collective call: {refused}")
    other = threading.Thread(target=store.sync)  # after the first: made as any call
    other.start()
    other.join(30)
    check(not other.is_alive(), "a collective call of another thread after the first's")

    # a real SIGINT in a local part: KeyboardInterrupt at once, agreed in the round
    def in_local_part():
        with store.transaction("local"):
            store.add("k1", np.zeros((2, 1)))
            with store.collective("test.local"):
                if rank == LAST:
                    signal.raise_signal(signal.SIGINT)  # to this thread: handled now
                    for _ in range(1000):  # the handler runs at the next bytecode
                        pass
    interrupted_alike(in_local_part, store, "SIGINT in a local part")

    # a real SIGINT between two steps of a transaction: deferred, agreed at the next
    def between_steps():
        with store.transaction("between"):
            store.add("k1", np.zeros((2, 1)))
            if rank == LAST:
                signal.raise_signal(signal.SIGINT)  # to this thread: handled now
            sum(range(1000))
            store.add("k2", np.zeros((2, 1)))
    interrupted_alike(between_steps, store, "SIGINT between two steps")

    # a real SIGINT after the last round of a call: the call completes on every rank,
    # then KeyboardInterrupt on that rank alone
    got = None
    try:
        with store.collective("test.after") as step:
            step.agree()
            store.add("late", np.arange(2, dtype=np.int64).reshape(-1, 1))
            if rank == LAST:
                signal.raise_signal(signal.SIGINT)  # to this thread: handled now
            sum(range(1000))  # deferred: nothing raised here
    except KeyboardInterrupt as exc:
        got = type(exc).__name__
    check(got == ("KeyboardInterrupt" if rank == LAST else None),
          f"SIGINT after the last round: raised {got}")
    check(store.variables() == before + ["late"] and comm.allgather(store.variables())
          == [before + ["late"]] * size, f"SIGINT after the last round: variables "
                                         f"{store.variables()}")
    store.remove("late")
    check(signal.getsignal(signal.SIGINT) is signal.default_int_handler,
          "SIGINT after the last round: the handler is not restored")


@cases("Ctrl-C while rank 0 computes and the others wait in sync or save: every handler "
       "saves")
def _(t):
    """The training loop's shape (docs/store.md): Ctrl-C reaches rank 0 in its own code
    (a model step) and the others waiting in ``sync`` (or in the epoch's ``save``);
    rank 0's handler calls ``save``, whose round meets the others' round holding their
    deferred SIGINT: they raise the agreed interrupt, rank 0 (handling its own) waits
    for them, and their handlers' ``save`` meets it (it raised the interrupt inside
    rank 0's handler: no checkpoint, the job aborted)."""
    store = t.store
    store.add("kb", np.full((4, 2), float(rank)))
    for waiting in ("sync", "save"):  # (the others in sync, or in the epoch's own save)
        got = None
        with shared_tmpdir() as tmp:
            path = os.path.join(tmp, "ck")
            try:
                if rank == 0 and size > 1:
                    time.sleep(0.5)
                    raise KeyboardInterrupt  # (what Ctrl-C raises in a model step)
                if size > 1:
                    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
                # (rank 0 comes with its handler's save: the SIGINT is held until then)
                store.sync() if waiting == "sync" else store.save(path)
            except KeyboardInterrupt as exc:
                got = type(exc).__name__
                store.save(path)
            check(got == (None if size == 1 else "KeyboardInterrupt" if rank == 0
                          else "DDStoreInterrupt"),
                  f"Ctrl-C in {waiting}, then save: raised {got}")
            if size == 1 and waiting == "sync":
                continue  # (one rank: no interrupt, no save)
            with ddstore.DDStore.restore(path, comm) as back:
                check(back.get_range("kb", 0, 4 * size).tolist() ==
                      [[float(r)] * 2 for r in range(size) for _ in range(4)],
                      f"Ctrl-C in {waiting}, then save: the checkpoint")
    store.remove("kb")
    check(signal.getsignal(signal.SIGINT) is signal.default_int_handler,
          "Ctrl-C, then save: the handler is not restored")


@cases("SIGINT inside put_range and load_synthetic's steps")
def _(t):
    store = t.store
    n, width = 40, 3
    lo, hi = ddstore.partition(n, size, rank)
    rows = np.arange(n * width, dtype=np.float32).reshape(n, width)
    fs = dpyg.FeatureStore(store, "pr", chunk_rows=2)
    calls = {"n": 0}

    def rows_of(a, b):
        calls["n"] += 1
        if rank == LAST and calls["n"] == 3:  # a real SIGINT inside put_range's work
            signal.raise_signal(signal.SIGINT)  # to this thread: handled now
        return rows[lo + a:lo + b]
    interrupted_alike(lambda: fs.put_range(rows_of, (lo, hi), attr_name="x"), store,
                      "SIGINT in put_range's callable")
    check(calls["n"] >= 3, f"put_range asked {calls['n']} pieces")
    fs.put_range(rows[lo:hi], (lo, hi), attr_name="x")  # the same call succeeds
    got = fs.get_tensor(group_name=None, attr_name="x").numpy()
    check(np.array_equal(got, rows), "put_range after the interrupt: rows differ")
    fs.remove_tensor(group_name=None, attr_name="x")

    # every step of load_synthetic (put_node_data's steps), KeyboardInterrupt or a real
    # SIGINT during the round, on the last rank
    before = store.variables()
    _collective.reset_steps()
    nd = dpyg.load_synthetic(store, scale=1e-4, name="syn")
    steps = _collective.steps_entered()
    del nd
    for v in sorted(set(store.variables()) - set(before)):
        store.remove(v)
    check(steps > 5, f"load_synthetic entered {steps} steps")
    for k in sorted(set(np.linspace(1, steps, min(steps, 12)).astype(int).tolist())):
        injected = KeyboardInterrupt() if k % 2 else SigintNow
        if rank == LAST:
            _collective.inject(k, injected)
        interrupted_alike(lambda: dpyg.load_synthetic(store, scale=1e-4, name="syn"),
                          store, f"load_synthetic, step {k} <- "
                                 f"{'KeyboardInterrupt' if k % 2 else 'SIGINT'}")
        _collective.inject(None)


@cases("SIGINT in every step of restore")
def _(t):
    """Issue 43 item 11: an interrupted restore.  Every step restore enters (the new
    store's constructor, load's steps), a KeyboardInterrupt or a real SIGINT during its
    round on the last rank: either every rank raises the same agreed DDStoreInterrupt
    and no store is left alive, or (a SIGINT no round saw) the restore completed on
    every rank and the interrupted rank alone raises KeyboardInterrupt after it; never
    an out-of-step error, a hang, or a store left half-built."""
    from ddstore import _lifecycle
    store = t.store
    with shared_tmpdir() as tmp:
        path = os.path.join(tmp, "ck")
        lo, hi = ddstore.partition(30, size, rank)
        with ddstore.DDStore(comm) as src:
            src.add("r", np.arange(2 * lo, 2 * hi, dtype=np.float64).reshape(-1, 2))
            src.save(path)
        made = []
        kinds = interrupt_kinds(lambda: made.append(ddstore.DDStore.restore(path, comm)), 3)
        made.pop().free()
        for k, kind in kinds:
            lives = len(_lifecycle._LIVE_STORES)
            restored, agreed, late, everyone = call_interrupted(
                lambda: ddstore.DDStore.restore(path, comm), LAST, k, kind)
            what = f"restore, step/round {k} <- {kind}"
            check(agreed or late, f"{what}: ranks raised {everyone}")
            if restored is not None:
                check(np.array_equal(restored.get_batch("r", np.arange(30)),
                                     np.arange(60, dtype=np.float64).reshape(30, 2)),
                      f"{what}: the restored rows differ")
            # a store restored on the other ranks, but whose handle the interrupted
            # rank never got, is still alive there: free every new one alike
            while len(_lifecycle._LIVE_STORES) > lives:
                _lifecycle._LIVE_STORES[-1].free()
            check(signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                  f"{what}: the SIGINT handler is not restored")
    check(store.variables() is not None, "the case's store is still usable")


@cases("SIGINT in every step of save")
def _(t):
    """A checkpoint is the previous one or the new one, as every rank was told: a
    KeyboardInterrupt or a real SIGINT in any step of ``save`` (in its round, or after
    its gather), on rank 0 (which publishes) or the last rank, either fails the save
    with the same agreed DDStoreInterrupt on every rank and leaves the previous
    checkpoint (one generation), or (during the commit, or seen by no round) the save
    completes on every rank, the new checkpoint alone is there, and the interrupted rank
    raises KeyboardInterrupt after it.  It was published by rank 0 before the last round,
    so an interrupt agreed there failed a save that had replaced the checkpoint and
    removed the previous generation."""
    from ddstore.checkpoint import read_manifest
    lo, hi = ddstore.partition(12, size, rank)
    with shared_tmpdir() as tmp, ddstore.DDStore(comm) as src:
        path = os.path.join(tmp, "ck")
        src.add("v", np.zeros((hi - lo, 2)))
        src.save(path)
        kinds = interrupt_kinds(lambda: src.save(path), 4)
        value = 0.0
        for who in sorted({0, LAST}):
            for k, kind in kinds:
                src.update("v", np.full((hi - lo, 2), value + 1))
                src.sync()
                _, agreed, late, everyone = call_interrupted(lambda: src.save(path), who,
                                                             k, kind)
                what = f"save, rank {who}, step/round {k} <- {kind}"
                check(agreed or late, f"{what}: ranks raised {everyone}")
                if late:
                    value += 1
                gens = sorted(e for e in os.listdir(path) if e.startswith("g-"))
                check(gens == [read_manifest(path)["generation"]],
                      f"{what}: generations {gens}")
                with ddstore.DDStore.restore(path, comm) as back:
                    got_rows = back.get_batch("v", np.arange(12))
                check(np.array_equal(got_rows, np.full((12, 2), value)),
                      f"{what}: the checkpoint holds {got_rows[0]}, expected {value} "
                      f"({'completed' if late else 'failed'} save)")
                check(signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                      f"{what}: the SIGINT handler is not restored")
        check(value >= 2, f"no save completed under an interrupt ({value})")


@cases("a later step of a call is told by the call")
def _(t):
    """An error or an interrupt on one rank in any step of ``save`` names the call on
    every rank (the steps after its first were told without a name: ``rank 1:
    OSError: ...``, ``in a later step of the call``); in a transaction's later step,
    the transaction; a step of no call (after a call has ended) is named by none."""
    with shared_tmpdir() as tmp, ddstore.DDStore(comm) as store:
        path = os.path.join(tmp, "ck")
        store.add("v", np.zeros((2, 2)))
        kinds = interrupt_kinds(lambda: store.save(path), 4)
        steps = max(k for k, kind in kinds if kind != "SIGINT after the gather")
        for k in range(1, steps):  # (the last step commits: an interrupt waits for it)
            for exc in (OSError(28, "No space left on device"), KeyboardInterrupt()):
                if rank == LAST:
                    _collective.inject(k, exc)
                try:
                    store.save(path)
                    got = None
                except BaseException as err:  # noqa: BLE001 -- checked
                    got = str(err)
                finally:
                    _collective.inject(None)
                what = f"save, step {k}, {type(exc).__name__}"
                check(got is not None and f"save({path!r})" in got,
                      f"{what}: the call is not named: {got}")
                check(comm.allgather(got) == [got] * size, f"{what}: ranks differ")

        def failing_later(label):
            if label is None:
                store.sync()  # a call that has ended: it names no later step
            with store.collective(None):
                if rank == LAST:
                    raise ValueError("a planned failure")

        for label in ("mine 'x'", None):
            try:
                if label is None:
                    failing_later(None)
                else:
                    with store.transaction(label):
                        store.add("t/x", np.zeros(2))
                        failing_later(label)
                got = None
            except ddstore.DDStoreError as err:
                got = str(err)
            want = f"{ddstore_ranks([LAST])}: " + (f"{label}: " if label else "") + \
                "ValueError: a planned failure"
            check(got == want, f"transaction {label}: {got!r}, expected {want!r}")
            check("t/x" not in store.variables(), f"transaction {label}: not rolled back")


@cases("SIGINT after every round of calls that end outside a round")
def _(t):
    """A real SIGINT on the last rank just after any round's gather of a call whose
    rounds are followed by more collective work (the store's constructor: the C core's
    setup; ``free`` and ``remove``: the windows' release; ``sync``: a barrier;
    ``NodeMemory.commit`` / ``reset`` / ``restore``: an exchange and a sync;
    ``link_prediction_metrics``: a gather): it was raised as the step closed, so that
    rank left the call before that work while the others waited in it (a hang once the
    program went on with another call).  Now the call completes on every rank and the
    interrupted rank alone raises after it (or every rank raises the agreed interrupt),
    and the next ``sync`` meets on every rank."""
    from ddstore import _lifecycle
    from ddstore.temporal import NodeMemory, link_prediction_metrics
    store = t.store
    mem = NodeMemory(store, "tails", 8, 2, 2, mailbox_size=2)
    mem.snapshot()
    rounds = {"n": 0, "at": None}
    real_round, round_then_sigint = sigint_after_gather(rounds)

    def commit(wait):
        mem.write([rank], np.full((1, 2), rank + 1.0, np.float32), [float(rank + 1)])
        mem.commit(wait=wait)
        mem.wait()

    def add():
        store.add("tails_x", np.arange(4.0))
    held = []
    # (setup outside the counted rounds, the call)
    calls = {"DDStore()": (None, lambda: held.append(ddstore.DDStore(comm))),
             "free": (lambda: held.append(ddstore.DDStore(comm)), lambda: held[-1].free()),
             "sync": (None, store.sync),
             "add": (None, add),
             "remove": (add, lambda: store.remove("tails_x")),
             "commit": (None, lambda: commit(True)),
             "commit(wait=False)": (None, lambda: commit(False)),
             "reset": (None, mem.reset),
             "restore": (None, mem.restore),
             "link_prediction_metrics": (None, lambda: link_prediction_metrics(
                 comm, np.array([0.9, 0.1]), np.array([1, 0])))}
    lives = len(_lifecycle._LIVE_STORES)
    _collective._round = round_then_sigint
    try:
        for name, (setup, call) in calls.items():
            n_rounds = None
            k = 0
            while n_rounds is None or k <= n_rounds:
                if setup is not None:
                    setup()
                rounds["n"], rounds["at"] = 0, (k if rank == LAST and k else None)
                got = None
                try:
                    call()
                except KeyboardInterrupt as exc:
                    got = (type(exc).__name__, _collective.is_agreed(exc))
                if n_rounds is None:
                    n_rounds = rounds["n"]
                    check(n_rounds >= 1, f"{name}: {n_rounds} rounds")
                everyone = comm.allgather(got)
                agreed = all(g == ("DDStoreInterrupt", True) for g in everyone)
                late = all(g is None for r, g in enumerate(everyone) if r != LAST) and \
                    everyone[LAST] in (None, ("KeyboardInterrupt", False))
                check(agreed or late, f"{name}, SIGINT after round {k}: raised {everyone}")
                rounds["at"] = None
                # a store made on every rank whose handle the interrupted rank never got
                # (its constructor raised after it completed): freed alike
                while len(_lifecycle._LIVE_STORES) > lives:
                    _lifecycle._LIVE_STORES[-1].free()
                held.clear()
                if "tails_x" in store:
                    store.remove("tails_x")
                store.sync()  # meets on every rank (it hung: one rank left the call)
                check(signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                      f"{name}, round {k}: the SIGINT handler is not restored")
                k += 1
    finally:
        _collective._round = real_round
    got = mem.read(np.arange(size)).memory.numpy()
    check(np.array_equal(got, np.zeros((size, 2), np.float32)), f"memory after restore: {got}")
    mem.remove()


# ---------------------------------------------------------------- item 7
@cases("two stores called in different orders", min_ranks=2)
def _(t):
    a = t.store
    b = new_store()
    check(a.store_id != b.store_id, f"two stores with one id {a.store_id}")
    ids = comm.allgather((a.store_id, b.store_id))
    check(all(i == ids[0] for i in ids), f"store ids differ between ranks: {ids}")
    mine, other = (a, b) if rank == 0 else (b, a)
    names = [f"store #{a.store_id}", f"store #{b.store_id}"]
    expect_error(DDStoreValueError, ["out of step", "sync()", *names], mine.sync,
                 what="A.sync / B.sync", agree=True, agreed=True)
    a.add("y", np.zeros((2, 1)))
    b.add("y", np.zeros((2, 1)))
    expect_error(DDStoreValueError, ["out of step", "add('x')", *names],
                 lambda: mine.add("x", np.zeros((2, 1))), what="A.add / B.add",
                 agree=True, agreed=True, store=mine)
    expect_error(DDStoreValueError, ["out of step", "remove", *names],
                 lambda: mine.remove("y"), what="A.remove / B.remove", agree=True,
                 agreed=True, store=mine)
    check("y" in a.variables() and "y" in b.variables(),
          f"a refused remove took 'y' away: {a.variables()}, {b.variables()}")
    a.sync()  # in the same order, both work
    b.sync()
    a.remove("y")
    b.remove("y")
    b.free()


# ---------------------------------------------------------------- item 8
@cases("environment settings agreed at construction", min_ranks=2)
def _(t):
    def with_env(var, value, ranks):
        old = os.environ.get(var)
        if rank in ranks:
            os.environ[var] = value
        try:
            s = new_store()
            s.free()
        finally:
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old
    expect_error(DDStoreValueError, ["DDSTORE_SERVE differs between ranks",
                                     _collective.format_ranks(list(range(LAST))) +
                                     ": auto", f"rank {LAST}: off"],
                 with_env, "DDSTORE_SERVE", "off", [LAST], what="DDSTORE_SERVE=off",
                 agree=True, agreed=True)
    expect_error(DDStoreValueError, ["DDSTORE_SERVE_MIN_PIECES differs", "4096", "64"],
                 with_env, "DDSTORE_SERVE_MIN_PIECES", "64", [0],
                 what="DDSTORE_SERVE_MIN_PIECES=64", agree=True, agreed=True)
    expect_error(DDStoreValueError, ["transport (argument, else DDSTORE_TRANSPORT) differs",
                                     f"rank {LAST}: rma"],
                 with_env, "DDSTORE_TRANSPORT", "rma", [LAST],
                 what="DDSTORE_TRANSPORT=rma", agree=True, agreed=True)
    expect_error(DDStoreValueError, ["DDSTORE_PROGRESS differs", "off"],
                 with_env, "DDSTORE_PROGRESS", "off", [LAST],
                 what="DDSTORE_PROGRESS=off", agree=True, agreed=True)
    for bad in ("1_000", "\u0663", "+5", "0x10"):
        expect_error(DDStoreValueError, ["DDSTORE_SERVE_MIN_PIECES", repr(bad),
                                         "plain decimal digits 0-9", f"rank {LAST}"],
                     with_env, "DDSTORE_SERVE_MIN_PIECES", bad, [LAST],
                     what=f"DDSTORE_SERVE_MIN_PIECES={bad!r}", agree=True, agreed=True)
    # the same value everywhere is taken
    with_env("DDSTORE_SERVE_MIN_PIECES", "1000", list(range(size)))
    check(True, "DDSTORE_SERVE_MIN_PIECES=1000 on every rank")


# ---------------------------------------------------------------- item 11
@cases("a MemoryError reading add's rows")
def _(t):
    store = t.store

    class NoMemory:
        def __array__(self, dtype=None, copy=None):
            raise MemoryError("cannot allocate 8 EiB")
    rows = NoMemory() if rank == LAST else np.zeros((2, 1))
    msg = expect_error(DDStoreMemoryError, [f"rank {LAST}", "MemoryError",
                                            "cannot allocate 8 EiB"],
                       store.add, "m", rows, agree=True, agreed=True, store=store)
    check(msg is None or "not an array" not in msg, f"told as not an array: {msg}")
    # the copy into the store failing on one rank, after the variable was made: agreed
    # and the variable removed on every rank (the others waited in the core's sync,
    # the failing rank raised alone: a hang), inside a user's transaction too
    core = store._variables.core
    real_write = core.write_local

    def write_fails(*args):
        raise MemoryError("the copy cannot allocate")
    before = store.variables()
    for in_txn in (False, True):
        if rank == LAST:
            core.write_local = write_fails
        try:
            def add_it():
                if in_txn:
                    with store.transaction("user"):
                        store.add("kept_in_txn", np.zeros((1, 1)))
                        store.add("m", np.ones((2, 1)))
                else:
                    store.add("m", np.ones((2, 1)))
            expect_error(DDStoreMemoryError, [f"rank {LAST}", "the copy cannot allocate"],
                         add_it, agree=True, agreed=True, store=store,
                         what=f"the copy failing on one rank (transaction: {in_txn})")
        finally:
            core.write_local = real_write
        check(store.variables() == before, f"left {store.variables()}, before {before}")
    store.add("m", np.full((2, 1), rank, np.float64))
    got = store.get_batch("m", np.arange(2 * size))
    check(np.array_equal(got.ravel(), np.repeat(np.arange(size), 2)), f"m read {got}")
    store.remove("m")
    from ddstore import temporal as tg
    n = 4
    src = NoMemory() if rank == LAST else np.zeros(n, np.int64)
    msg = expect_error(DDStoreMemoryError, [f"rank {LAST}", "MemoryError",
                                            "cannot allocate 8 EiB"],
                       tg.TemporalGraph.from_arrays, store, "tgm", src,
                       np.ones(n, np.int64), np.arange(n, dtype=np.float64),
                       agree=True, agreed=True, store=store)
    check(msg is None or "not an array" not in msg, f"from_arrays: told as not an "
                                                    f"array: {msg}")
    store.free()


@cases("an error not agreed leaving a transaction: nothing undone, a warning says so",
       min_ranks=2)
def _(t):
    store = ddstore.DDStore(comm)
    store.add("kept", np.zeros((2, 1)))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            with store.transaction("plain"):
                store.remove("kept")
                store.add("new", np.ones((2, 1)))
                raise RuntimeError("every rank's own, not agreed")
        except RuntimeError:
            pass
    said = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    check(len(said) == 1 and all(f in said[0] for f in (
        "transaction 'plain' left by RuntimeError", "not agreed", "['new']",
        "'kept' (as 'kept~aside1')", "store.collective")), f"warned {said}")
    check(store.variables() == ["kept~aside1", "new"], f"variables {store.variables()}")
    # nested: told once, by the outermost; made outside and set aside inside: told once
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            with store.transaction("outer"):
                store.add("m", np.zeros((2, 1)))
                with store.transaction("inner"):
                    store.remove("m")
                    raise RuntimeError("nested, not agreed")
        except RuntimeError:
            pass
    said = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    check(len(said) == 1 and all(f in said[0] for f in (
        "transaction 'outer' left by RuntimeError", "stays created: []",
        "stays set aside: [\"'m' (as 'm~aside1')\"]", "store.remove")), f"warned {said}")
    store.free()


def main():
    cases.run()


if __name__ == "__main__":
    run_main(main)
