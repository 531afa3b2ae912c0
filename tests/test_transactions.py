"""All or nothing: ``DDStore.transaction`` and every constructor that runs in one.

The MPI program ``tests/mpi/transactions.py`` fails each constructor and loader mid-way
on 1-3 ranks (issue 25's PyG cases and ``NodeMemory(mailbox_size=2**62)`` among them),
checks that ``variables()`` is unchanged on every rank, and that the retry succeeds and
reads back byte-equal.  The in-process tests here check the transaction's own rules on
one rank."""
import contextlib
import os

import numpy as np
import pytest

from conftest import on_ranks
from ddstore import (DDStore, DDStoreError, DDStoreIndexError, DDStoreStateError,
                     DDStoreValueError)
from ddstore._collective import inject, is_agreed


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,transport", [(1, "auto"), (2, "auto"), (3, "rma")])
@pytest.mark.shared_launch("transactions.py", "{transport}", timeout=300)
def test_constructors_all_or_nothing(shared_launch, nprocs, transport):
    assert f"0 failures {on_ranks(nprocs)}" in shared_launch, shared_launch


def fail_in_step(store, message="bad input"):
    """A collective step whose local part raises: its round turns the error into the
    agreed DDStoreValueError ``"rank 0: <message>"`` (what a layer's failing step
    raises)."""
    with store.collective("test step"):
        raise DDStoreValueError(message)


def test_success_keeps_everything(store):
    with store.transaction("ok") as t:
        store.add("a", np.arange(4))
        store.init("b", 2, (3,), np.float32)
        store.add_records("r", [{"k": np.ones((2, 2))}])
        assert t.created == ["a", "b", "r"]
    assert store.variables() == ["a", "b", "r"]
    assert store.get_range("a", 0, 4).tobytes() == np.arange(4).tobytes()


def test_agreed_error_removes_newest_first_and_reraises(store):
    store.add("old", np.arange(3))
    removed = []
    drop = store._drop

    def spy(name):
        removed.append(name)
        drop(name)
    store._drop = spy
    with pytest.raises(DDStoreValueError, match="rank 0: bad input") as info:
        with store.transaction("fail"):
            store.add("a", np.arange(4))
            store.init_records("r", {"k": ("f4", (2,))}, {"k": [1, 2]})
            store.init("b", 1)
            fail_in_step(store)
    assert is_agreed(info.value)
    assert removed == ["b", "r", "a"]
    assert store.variables() == ["old"]
    store.add("a", np.arange(4))  # the names are free again
    assert store.variables() == ["a", "old"]


def test_nested_inner_failure_is_a_savepoint(store):
    with store.transaction("outer") as outer:
        store.add("o1", np.zeros(1))
        with pytest.raises(DDStoreValueError):
            with store.transaction("inner") as inner:
                store.add("i1", np.zeros(1))
                assert inner.created == ["i1"]
                fail_in_step(store)
        assert store.variables() == ["o1"]
        store.add("o2", np.zeros(1))
    assert outer.created == ["o1", "o2"]
    assert store.variables() == ["o1", "o2"]


def test_nested_failure_through_both_removes_all(store):
    with pytest.raises(DDStoreValueError):
        with store.transaction("outer"):
            store.add("o1", np.zeros(1))
            with store.transaction("inner"):
                store.add("i1", np.zeros(1))
                fail_in_step(store)
    assert store.variables() == []


def test_removed_inside_is_not_undone_and_on_rollback_runs(store):
    calls = []
    with pytest.raises(DDStoreValueError):
        with store.transaction("t") as t:
            store.add("tmp", np.zeros(1))
            store.remove("tmp")
            store.add("a", np.zeros(1))
            t.on_rollback(lambda: calls.append("forget a"))
            fail_in_step(store)
    assert calls == ["forget a"] and store.variables() == []


def test_set_aside_waits_for_the_outermost(store):
    """``set_aside`` of variables replaced under new names (a layer's rebuild): hidden
    through an inner commit, removed when the outermost transaction ends normally; a
    rollback of the inner or of the outer transaction puts them back under their names
    (and removes only what was created)."""
    store.add("old", np.arange(3))
    store.add("other", np.arange(2))
    hidden = ["old~aside1", "other~aside1"]
    # the inner transaction rolls back: they are back, then on_rollback is called
    seen = []
    with store.transaction("outer"):
        with pytest.raises(DDStoreValueError):
            with store.transaction("inner") as inner:
                store.add("new", np.arange(5))
                assert inner.set_aside(["old", "other"], on_rollback=lambda: seen.append(
                    store.variables())) == hidden
                fail_in_step(store)
        assert store.variables() == ["old", "other"]
    assert seen == [["new", "old", "other"]], seen  # (before what was created goes)
    assert store.variables() == ["old", "other"]
    # the outer one rolls back after the inner committed
    with pytest.raises(DDStoreValueError):
        with store.transaction("outer"):
            with store.transaction("inner") as inner:
                store.add("new", np.arange(5))
                inner.set_aside(["old", "other"])
            assert store.variables() == ["new"] + hidden
            fail_in_step(store)
    assert store.variables() == ["old", "other"]
    assert store.get_range("old", 0, 3).tobytes() == np.arange(3).tobytes()
    # both commit: removed when the outer ends, not before
    with store.transaction("outer"):
        with store.transaction("inner") as inner:
            store.add("new", np.arange(5))
            inner.set_aside(["old", "other"])
        assert store.variables() == ["new"] + hidden
    assert store.variables() == ["new"]
    assert store.get_range("new", 0, 5).tobytes() == np.arange(5).tobytes()


def test_set_aside_replaces_under_the_same_name(store):
    """``set_aside``: the old variable moves to a hidden name (its name free again), is
    removed when the outermost transaction commits, and comes back under its name
    (bytes as before) when this or an enclosing transaction rolls back, after what was
    created under the name is removed.  A variable created inside the same transaction
    and then set aside is removed by the rollback too, under its own name."""
    store.add("x", np.arange(3, dtype=np.int32))

    def held(values, dtype):
        assert store.variables() == ["x"] and store.dtype("x") == np.dtype(dtype)
        assert store.get_range("x", 0, len(values)).tobytes() == \
            np.asarray(values, dtype=dtype).tobytes()
    for outer in (False, True):  # the failure in the same / in an enclosing transaction
        with pytest.raises(DDStoreValueError):
            with store.transaction("outer"):
                with store.transaction("inner") as t:
                    assert t.set_aside(["x"]) == ["x~aside1"]
                    assert store.variables() == ["x~aside1"]
                    store.add("x", np.arange(5, dtype=np.float64))
                    if not outer:
                        fail_in_step(store)
                assert store.variables() == ["x", "x~aside1"]
                fail_in_step(store)
        held(range(3), np.int32)
    # nothing created under the name (an allocation that failed): back it comes
    with pytest.raises(DDStoreValueError):
        with store.transaction("t") as t:
            t.set_aside(["x"])
            fail_in_step(store)
    held(range(3), np.int32)
    # created inside the transaction, set aside, replaced: the rollback removes both
    with pytest.raises(DDStoreValueError):
        with store.transaction("t") as t:
            store.add("y", np.zeros(2))
            t.set_aside(["y"])
            store.add("y", np.ones(4))
            t.set_aside(["y"])  # twice: a second hidden name
            assert store.variables() == ["x", "y~aside1", "y~aside2"]
            store.add("y", np.ones(6))
            fail_in_step(store)
    held(range(3), np.int32)
    # commits: the old one is removed at the outermost commit, not before
    with store.transaction("outer"):
        with store.transaction("inner") as t:
            t.set_aside(["x"])
            store.add("x", np.arange(5, dtype=np.float64))
        assert store.variables() == ["x", "x~aside1"]
    held(range(5), np.float64)
    with pytest.raises(DDStoreValueError, match="unknown variable 'nope'"):
        with store.transaction("t") as t:
            t.set_aside(["nope"])
    held(range(5), np.float64)


def test_remove_inside_a_transaction_is_kept_until_the_commit(store):
    """``store.remove`` inside a transaction sets aside what the innermost transaction
    did not create (rows variables and record sets, with the annotations naming them):
    a rollback brings them back byte for byte and re-annotated, a commit frees them; a
    variable the transaction created is removed at once.  The layers' removals
    (``NodeMemory.remove``, ``TemporalGraph.remove``) likewise: after the rollback the
    same objects work as before (the memory's snapshot and staged writes too)."""
    import torch
    from ddstore.temporal import NodeMemory, TemporalGraph, TemporalSampler
    recs = [{"k": np.arange(i + 1, dtype=np.int16)} for i in range(4)]

    def fresh():
        for n in store.variables():
            store.remove(n)
        store.add("x", np.arange(6, dtype=np.float32))
        store.add_records("r", recs)
        store.annotate("obj", "test", {"a": 1}, variables=["x", "r"])
        mem = NodeMemory(store, "m", 10, 4, 3)
        mem.write(np.array([1, 7]), torch.full((2, 4), 2.5), 3.0)
        mem.commit()
        mem.snapshot()
        mem.write(np.array([2]), torch.full((1, 4), 4.0), 5.0)  # staged, not committed
        g = TemporalGraph.from_arrays(store, "g", [0, 1, 1], [1, 0, 2], [1.0, 2.0, 3.0])
        return mem, g, TemporalSampler(g, [2])

    def as_before(mem, g, sampler):
        assert store.variables() == held
        assert store.get_range("x", 0, 6).tobytes() == \
            np.arange(6, dtype=np.float32).tobytes()
        got = store.get_records("r", [0, 1, 2, 3])
        assert all(g["k"].tobytes() == r["k"].tobytes() for g, r in zip(got, recs))
        assert store.annotation("obj").meta == {"a": 1}
        for m in (mem, NodeMemory.open(store, "m")):  # the object, and reopened
            got = m.read(np.array([1, 7, 0]))
            assert got.memory[:, 0].tolist() == [2.5, 2.5, 0.0]
            assert got.memory_ts.tolist() == [3.0, 3.0, 0.0]
        assert not g.removed and [a.tolist() for a in g.edges([0, 2])] == \
            [[0, 1], [1, 2], [1.0, 3.0]]
        block, = sampler.sample(np.array([1]), np.array([9.0]))  # made before
        assert sorted(block.eid.tolist()) == [1, 2], block.eid
    mem, g, sampler = fresh()
    held = store.variables()
    for nested in (False, True):
        with pytest.raises(DDStoreValueError):
            with store.transaction("outer"):
                with store.transaction("inner") if nested else contextlib.nullcontext():
                    store.remove("x", "r")
                    mem.remove()
                    g.remove()
                    assert g.removed
                    assert "obj" not in store.annotations()
                    assert store.variables() == sorted(f"{n}~aside1" for n in held)
                    store.add("x", np.zeros(2))  # the name is free again
                    store.add("tmp", np.zeros(1))
                    store.remove("tmp")  # created here: removed at once
                    assert "tmp" not in store.variables()
                fail_in_step(store)
        as_before(mem, g, sampler)
    mem.commit()  # what was staged before the removal
    assert mem.read(np.array([2])).memory[:, 0].tolist() == [4.0]
    mem.restore()  # the snapshot taken before the removal
    assert mem.read(np.array([2])).memory[:, 0].tolist() == [0.0]
    with store.transaction("commits"):
        store.remove("x", "r")
        assert "x~aside1" in store.variables()
    assert store.variables() == [n for n in held if n not in ("r", "x")]
    assert "obj" not in store.annotations()


@pytest.mark.parametrize("exc", [ValueError, KeyboardInterrupt])
def test_a_commit_whose_step_fails_rolls_back_whole(store, exc):
    """The outermost commit removes what was set aside after one step; a failure in that step (an interrupt in its round) rolls the whole
    transaction back: the old variables are back under their names, the new gone."""
    store.add("x", np.arange(3, dtype=np.int32))
    store.add("old", np.arange(2))
    inject("transaction commit", exc("injected"))
    try:
        with pytest.raises((DDStoreError, KeyboardInterrupt),
                           match="injected|interrupted .* transaction commit"):
            with store.transaction("t") as t:
                t.set_aside(["x"])
                store.add("x", np.arange(5, dtype=np.float64))
                store.add("new", np.zeros(1))
                t.set_aside(["old"])
    finally:
        inject(None)
    assert store.variables() == ["old", "x"]
    assert store.get_range("x", 0, 3).tobytes() == np.arange(3, dtype=np.int32).tobytes()
    with store.transaction("t") as t:  # the control: without the failure it commits
        t.set_aside(["x"])
        store.add("x", np.arange(5, dtype=np.float64))
        t.set_aside(["old"])
    assert store.variables() == ["x"] and store.dtype("x") == np.float64


def test_local_exception_starts_no_collective(store, monkeypatch):
    """On a communicator of several ranks a non-agreed exception is one rank's own: the
    transaction removes nothing and starts no collective step (the job is ending through
    the abort hook), and warns naming what stays.  Simulated on one rank by the size the
    transaction looks at."""
    calls = []
    monkeypatch.setattr(store, "size", 2)
    plain = store.collective

    def spy(*args, **kwargs):
        calls.append(args)
        return plain(*args, **kwargs)
    monkeypatch.setattr(store, "collective", spy)
    for i, exc in enumerate((KeyError("local"), DDStoreValueError("not agreed"),
                             KeyboardInterrupt())):
        with pytest.raises(type(exc)), pytest.warns(
                RuntimeWarning, match=rf"transaction 'local' left by {type(exc).__name__}, "
                                      rf"an error not agreed.*stays created: \['v{i}'\]"):
            with store.transaction("local"):
                store.add(f"v{i}", np.zeros(1))
                calls.clear()  # what leaving the block starts
                raise exc
        assert calls == []
    assert store.variables() == ["v0", "v1", "v2"]
    with store.transaction("after") as t:  # the record was dropped at the exit
        assert t.created == []
    # the control: an agreed error leaving the block does start the rollback's step
    with pytest.raises(DDStoreValueError):
        with store.transaction("agreed"):
            store.add("v3", np.zeros(1))
            fail_in_step(store)
    assert calls[-1] == ("transaction rollback",) and store.variables() == ["v0", "v1",
                                                                            "v2"]


@pytest.mark.parametrize("exc", [KeyError("local"), KeyboardInterrupt(), SystemExit(3)])
def test_one_rank_any_exception_rolls_back(store, exc):
    """On one rank every exception counts as agreed (docs/store.md), the ones that are
    not an ``Exception`` too: what was made is removed, what was removed (set aside, its
    annotation dropped) is back."""
    store.add("x", np.arange(3.0))
    store.annotate("objx", "Test", {}, variables=["x"])
    with pytest.raises(type(exc)):
        with store.transaction("one"):
            store.add("a", np.zeros(1))
            store.remove("x")
            store.add("x", np.zeros(2))
            raise exc
    assert store.variables() == ["x"] and store.annotations() == ["objx"]
    assert np.array_equal(store.get_range("x", 0, 3), np.arange(3.0))


def test_a_transaction_open_is_not_entered_again(store):
    """Entering a transaction object that is open (its mark and held interrupts would be
    lost: a later rollback kept what the outer block made) is refused; after it closes
    it may be entered again."""
    t = store.transaction("build")
    with pytest.raises(DDStoreStateError, match="transaction 'build' is already open"):
        with t:
            store.add("a", np.zeros(1))
            with t:
                pass
    with t:  # closed: entered again, and an agreed failure undoes all it made
        store.add("b", np.zeros(1))
    with pytest.raises(DDStoreValueError):
        with t:
            store.add("c", np.zeros(1))
            fail_in_step(store)
    assert store.variables() == ["b"]


def test_node_memory_huge_mailbox_refused_naming_the_range(store):
    from ddstore.temporal import NodeMemory
    with pytest.raises(DDStoreValueError, match=r"mailbox_size=4611686018427387904 out "
                                                r"of range: allowed 1 <= mailbox_size <= "):
        NodeMemory(store, "m", 10, 4, 4, mailbox_size=2 ** 62)
    assert store.variables() == []
    with pytest.raises(DDStoreValueError, match="2\\*\\*63 - 1"):
        store.init("huge", 1, (2 ** 62, 4), np.float32)  # np.prod would wrap to 0
    NodeMemory(store, "m", 10, 4, 4, mailbox_size=3)
    assert len(store.variables()) == 6  # (the state's five and the commit counts)


def test_save_inside_a_transaction_is_refused(store, tmp_path):
    """A checkpoint holds committed state: ``save`` inside an open transaction (where a
    removed variable is only set aside, hidden, and a rollback may still undo what was
    made) is refused, writing nothing; after the transaction it saves what committed,
    and the restore holds that, no hidden name."""
    from mpi4py import MPI
    store.add("x", np.arange(3, dtype=np.int32))
    path = tmp_path / "ck"
    with store.transaction("t"):
        store.remove("x")
        store.add("x", np.arange(4, dtype=np.float64))
        assert store.variables() == ["x", "x~aside1"]
        with pytest.raises(DDStoreStateError, match="inside an open transaction"):
            store.save(path)
        assert not path.exists()
    store.save(path)
    with DDStore.restore(path, MPI.COMM_SELF) as back:
        assert back.variables() == ["x"]
        assert back.get_range("x", 0, 4).tobytes() == np.arange(4.0).tobytes()


def test_temporal_graph_remove_of_what_is_gone_is_refused(store):
    """``TemporalGraph.remove`` after one of its variables was removed by hand: refused
    in the call's step, naming it, the rest kept (no half removal)."""
    from ddstore.temporal import TemporalGraph
    g = TemporalGraph.from_arrays(store, "g", [0, 1, 1], [1, 0, 2], [1.0, 2.0, 3.0])
    store.remove("g/edge_t")
    rest = store.variables()
    with pytest.raises(DDStoreStateError, match=r"cannot remove: \['g/edge_t'\] no longer"):
        g.remove()
    assert store.variables() == rest and not g.removed


def test_free_inside_a_transaction_ends_it_quietly():
    """``free()`` inside a transaction that had set a variable aside: everything is
    freed, and leaving the block raises nothing (no commit of a freed store)."""
    from mpi4py import MPI
    s = DDStore(MPI.COMM_SELF, width=1)
    s.add("x", np.arange(3))
    with s.transaction("t"):
        s.remove("x")
        assert s.variables() == ["x~aside1"]
        s.free()
    assert s.freed


def test_a_layer_removed_in_a_transaction_can_be_made_again_under_its_name(store):
    """After ``NodeMemory.remove`` / ``TemporalGraph.remove`` inside a transaction the
    name is free (the old variables are hidden, not the layer's): a new object of that
    name is made.  A rollback removes the new one (its object refuses to be used, even
    though an object of its name is back) and gives the old ones back; a commit keeps
    the new ones and frees the old."""
    import torch
    from ddstore.temporal import NodeMemory, TemporalGraph

    def memory(value):
        m = NodeMemory(store, "m", 10, 4, 3)
        m.write(np.array([1]), torch.full((1, 4), value), 3.0)
        m.commit()
        return m

    def graph(t):
        return TemporalGraph.from_arrays(store, "g", [0, 1], [1, 0], [t, t + 1])
    old, g_old = memory(2.5), graph(1.0)
    held = store.variables()
    with pytest.raises(DDStoreValueError, match="later"):
        with store.transaction("t"):
            old.remove()
            g_old.remove()
            new, g_new = memory(7.0), graph(5.0)
            assert new.read(np.array([1])).memory[:, 0].tolist() == [7.0]
            assert g_new.edges([0])[2].tolist() == [5.0]
            fail_in_step(store, "later")
    assert store.variables() == held
    assert old.read(np.array([1])).memory[:, 0].tolist() == [2.5]
    assert g_old.edges([0])[2].tolist() == [1.0]
    with pytest.raises(DDStoreStateError,
                       match="rolled back with the transaction that built it"):
        new.read(np.array([1]))
    with store.transaction("t"):
        old.remove()
        g_old.remove()
        new, g_new = memory(7.0), graph(5.0)
    assert store.variables() == held  # the new ones, under the same names
    assert new.read(np.array([1])).memory[:, 0].tolist() == [7.0]
    assert g_new.edges([0])[2].tolist() == [5.0]


@pytest.mark.parametrize("resident", ["store", "device"])
def test_objects_built_in_a_rolled_back_transaction_refuse_to_read(store, resident):
    """What a rollback removed cannot be read through an object built over it: a window
    dataset (its series in the store, or copied to its device: the copy is dropped) and
    its loader refuse naming the dataset; a temporal graph's sampler refuses as after
    ``remove``; a dynamic graph serves no cached snapshot (as after ``free``).  The same name builds again afterwards and reads every window equal to
    the series."""
    from ddstore.spatiotemporal import WindowDataset
    from ddstore.dynamic import DynamicGraph
    from ddstore.temporal import TemporalGraph, TemporalSampler
    series = np.arange(20 * 3 * 2, dtype=np.float32).reshape(20, 3, 2)
    with pytest.raises(DDStoreValueError, match="later"):
        with store.transaction("t"):
            ds = WindowDataset(store, "w", series, 2, standardize=False, overlap=True,
                               device="cpu", resident=resident)
            g = TemporalGraph.from_arrays(store, "g", [0, 1], [1, 0], [1.0, 2.0])
            sampler = TemporalSampler(g, fanouts=(2,))
            assert sampler.sample([0], [5.0])[0].eid.tolist() == [0]
            dg = DynamicGraph(store, "dg", [np.array([[0, 1], [1, 2]])] * 4, num_nodes=3)
            assert dg.snapshot(2)[0].tolist() == [[0, 1], [1, 2]]  # (now cached)
            assert ds[0][0].numpy().tobytes() == series[0:2].tobytes()
            fail_in_step(store, "later")
    assert store.variables() == []
    assert ds.device_series is None  # the device copy is let go
    for read in (lambda: ds[0], lambda: next(iter(ds.loader(4, shuffle=False))),
                 lambda: ds.splits()[0][1]):
        with pytest.raises(DDStoreStateError, match="'w' was rolled back"):
            read()
    with pytest.raises(DDStoreStateError, match="graph 'g' was removed .*rollback"):
        sampler.sample([0], [5.0])
    with pytest.raises(DDStoreStateError, match="variable 'g/edges' was removed"):
        g.edges([0])
    with pytest.raises(DDStoreStateError, match="DynamicGraph 'dg' is no longer in the "
                                                "store .freed, or removed by a rollback"):
        dg.snapshot(2)  # not served from the cache of a graph that is gone
    again = WindowDataset(store, "w", series, 2, standardize=False, overlap=True,
                          device="cpu", resident=resident)
    x, y = next(iter(again.loader(20, shuffle=False)))
    assert x.numpy().tobytes() == np.stack([series[s:s + 2] for s in range(17)]).tobytes()
    assert y.numpy().tobytes() == np.stack([series[s + 2:s + 4] for s in range(17)]).tobytes()


# ---------------------------------------------------------------------------- handles
def test_handle_is_bound_to_the_variable_not_the_name(store):
    """DDStore.handle: every local read and inspection takes it in place of the name
    and gives what the name gives; removed, the variable is refused through it (a
    DDStoreStateError naming it), also once another was added under the name; set
    aside by an open transaction it still reads the variable, after a rollback too,
    and after the commit it is refused.  Rows and record sets alike."""
    rows = np.arange(24, dtype=np.float64).reshape(12, 2)
    store.add("a", rows)
    store.add_records("r", [{"x": np.full((i + 1, 3), i, np.int32)} for i in range(4)])
    a, r = store.handle("a"), store.handle("r")
    assert repr(a) == "handle('a')" and repr(r) == "handle('r')"
    assert a in store and r in store
    assert store.nbytes(a) == store.nbytes("a") and store.nbytes(r) == store.nbytes("r")
    with pytest.raises(DDStoreValueError, match=r"handle\('r'\) is a handle of records: "
                                                r"use get_records\(\)"):
        store.get(r, 0)
    with pytest.raises(DDStoreValueError, match=r"handle\('a'\) is a handle of a rows "
                                                r"variable, not records: use get_batch"):
        store.get_record(a, 0)
    other = DDStore(store.comm)
    try:
        other.add("a", rows)
        with pytest.raises(DDStoreValueError, match=r"handle\('a'\) is a handle of "
                                                    r"another store's variable"):
            other.get(a, 0)
    finally:
        other.free()
    assert store.get(a, 3).tobytes() == rows[3].tobytes()
    assert store.get_batch(a, [5, 0, 5]).tobytes() == rows[[5, 0, 5]].tobytes()
    assert store.get_range(a, 2, 7).tobytes() == rows[2:9].tobytes()
    assert store.read_ranges(a, [1, 8], [2, 3]).tobytes() == \
        rows[[1, 2, 8, 9, 10]].tobytes()
    got = store.get_many([(a, [11]), ("a", [0])])
    assert got[0].tobytes() == rows[[11]].tobytes() and got[1].tobytes() == \
        rows[[0]].tobytes()
    for fn in ("nrows", "local_rows", "chunk_offsets", "dtype", "row_shape"):
        assert np.array_equal(getattr(store, fn)(a), getattr(store, fn)("a")), fn
    assert store.local_view(a).tobytes() == store.local_view("a").tobytes()
    assert store.device_views(a, "cpu")[0].numpy().tobytes() == rows.tobytes()
    for fn in ("nrows", "local_rows", "record_schema"):
        assert getattr(store, fn)(r) == getattr(store, fn)("r"), fn
    assert store.get_record(r, 2)["x"].tobytes() == np.full((3, 3), 2, np.int32).tobytes()
    assert [g["x"].shape[0] for g in store.get_records(r, [3, 0])] == [4, 1]
    assert store.get_records_packed(r, [1, 2])[1]["x"].tolist() == [2, 3]
    assert store.record_sizes(r, [0, 3])["x"].tolist() == [1, 4]
    with pytest.raises(DDStoreValueError, match="bad input"):
        with store.transaction("set aside, rolled back"):  # removed inside: still read
            store.remove("a", "r")
            assert "a" not in store and store.get(a, 1).tobytes() == rows[1].tobytes()
            with pytest.raises(DDStoreIndexError, match=r"get handle\('a'\): index 99"):
                store.get(a, 99)  # named as the user knows it, not by its hidden name
            assert store.get_record(r, 0)["x"].shape == (1, 3)
            store.add("a", np.zeros((2, 1)))  # another 'a': the handle is not it
            assert store.get(a, 1).tobytes() == rows[1].tobytes()
            fail_in_step(store)
    assert store.get(a, 4).tobytes() == rows[4].tobytes()  # back: read as before
    assert store.get_record(r, 3)["x"].shape == (4, 3)
    with store.transaction("committed"):
        store.remove("a", "r")
        store.add("a", -rows)
        store.add_records("r", [{"x": np.zeros((1, 3), np.int32)}])
    for call in (lambda: store.get(a, 0), lambda: store.get_batch(a, [0]),
                 lambda: store.get_range(a, 0, 1), lambda: store.nrows(a),
                 lambda: store.read_ranges(a, [0], [1]), lambda: store.get_many([(a, [0])]),
                 lambda: store.device_views(a, "cpu"), lambda: store.local_rows(a)):
        with pytest.raises(DDStoreStateError, match="variable 'a' was removed from the "
                                                    "store.*added since under the name"):
            call()
    for call in (lambda: store.get_record(r, 0), lambda: store.get_records(r, [0]),
                 lambda: store.nrows(r), lambda: store.get_records_packed(r, [0])):
        with pytest.raises(DDStoreStateError, match="record set 'r' was removed"):
            call()
    assert store.get("a", 0).tobytes() == (-rows[0]).tobytes()  # the name: the new one
    assert store.handle("a") is not a and a not in store and r not in store
    with pytest.raises(DDStoreValueError, match="unknown variable 'nope'"):
        store.handle("nope")
    store.remove("a", "r")


def test_datasets_read_their_own_data_not_a_name_reused(store):
    """A window dataset and a graph dataset read the series / records they were built
    on: removed, and another added under the name, reading (an item, a batch, a loader
    with and without read-ahead) raises that it was removed instead of cutting the new
    rows with the old layout; a dataset whose series lives on the device (read without
    the store) refuses alike and lets go of its copy."""
    import torch
    from ddstore import spatiotemporal as st
    from ddstore.graphs import GraphDataset, ising_dataset
    series = np.arange(160, dtype=np.float32).reshape(40, 2, 2)
    ds = st.WindowDataset(store, "s", series, 2, standardize=False)
    res = st.WindowDataset(store, "d", series, 2, standardize=False, device="cpu",
                           resident="device")  # read without the store, refused alike
    train, rtrain = ds.splits()[0], res.splits()[0]
    loaders = [train.loader(4, shuffle=False), train.loader(4, shuffle=False, prefetch=2),
               train.loader(4, shuffle=False, device="cpu", prefetch=2),
               rtrain.loader(4, shuffle=False)]
    samples = [ising_dataset(4, size=3, seed=1)[i] for i in range(4)]
    gd = GraphDataset.from_samples(store, "g", samples, progress=False)
    assert torch.equal(gd[1].x, samples[1].x)
    store.remove("s", "g", "d")
    store.add("s", -series.reshape(40, 4))
    store.add("d", -series.reshape(40, 4))
    store.add_records("g", [{"x": np.zeros((1, 1), np.float32)}])
    for read in [lambda: ds[0], lambda: train.__getitems__([0, 1]), lambda: res[0],
                 lambda: rtrain.__getitems__([0])] + [
            (lambda lo=lo: next(iter(lo))) for lo in loaders]:
        with pytest.raises(DDStoreStateError, match="variable '[sd]' was removed"):
            read()
    assert res.device_series is None  # the device copy let go
    for read in (lambda: gd[0], lambda: gd.get_batch([0, 1]),
                 lambda: next(iter(gd.loader(2)))):
        with pytest.raises(DDStoreStateError, match="record set 'g' was removed"):
            read()
    store.remove("s", "g", "d")


def test_temporal_layers_read_their_own_data_not_a_name_reused(store):
    """A temporal graph and a node memory read the variables they were built on: one
    removed with ``store.remove`` and another added under its name, every read (and a
    sampler over the graph) raises that it was removed instead of reading the new rows
    with the old layout; the memory's ``remove`` then removes what it still holds and
    leaves the newcomer."""
    from ddstore.temporal import EdgeBatches, NodeMemory, TemporalGraph, TemporalSampler
    src, dst = np.array([0, 1, 2, 0]), np.array([1, 2, 0, 2])
    t = np.array([1.0, 2.0, 3.0, 4.0])
    g = TemporalGraph.from_arrays(store, "g", src, dst, t, edge_feat=np.ones((4, 2)),
                                  node_feat=np.ones((3, 1)), edge_label=np.arange(4))
    sampler = TemporalSampler(g, fanouts=(2,))
    mem = NodeMemory(store, "m", 3, memory_dim=2, mail_dim=2)
    assert g.neighbors(0)[0].tolist() == [1, 2] and g.edge_times([3]).tolist() == [4.0]
    assert g.edge_times().tobytes() == t.tobytes()
    assert mem.read([2]).memory.tolist() == [[0.0, 0.0]]
    for name in [n for n in store.variables()]:
        dtype, shape, n = store.dtype(name), store.row_shape(name), store.nrows(name)
        store.remove(name)
        store.add(name, np.full((n,) + shape, 7, dtype))  # the same layout, other rows
    for read in (lambda: g.neighbors(0), lambda: g.edges([0]), lambda: g.edge_split([0]),
                 lambda: g.edge_features([0]), lambda: g.edge_labels([0]),
                 lambda: g.node_features([0]), lambda: g.edge_times(), lambda: g.to_pyg(),
                 lambda: g.tcsr_bytes(), lambda: EdgeBatches(g, 2),
                 lambda: sampler.sample([0], [5.0]), lambda: TemporalSampler(g, (1,))):
        with pytest.raises(DDStoreStateError, match=r"variable 'g/[a-z_]+' (\(id \d+\) )?was "
                                                    r"removed"):
            read()
    with pytest.raises(DDStoreStateError, match=r"NodeMemory 'm' was removed from the "
                                                r"store \(missing \['m/memory'"):
        mem.read([0])
    with pytest.raises(DDStoreStateError, match="NodeMemory 'm' was removed"):
        mem.nbytes()
    with pytest.raises(DDStoreStateError, match=r"TemporalGraph 'g': cannot remove: "
                                                r"\['g/nbr'"):
        g.remove()
    held = store.variables()
    mem.remove()  # what it holds: nothing (every variable of its name is another's)
    assert store.variables() == held
    assert store.get_range("m/memory", 0, 3).tolist() == [[7.0, 7.0]] * 3  # untouched
    store.remove(*held)


def test_an_unmapping_holds_back_every_batch_but_nested_ones():
    """While a removal (ddstore._readers.unmapping) waits for the batch in flight, a
    new batch of another read-ahead thread waits for the removal (it started whenever
    another batch was being made: two loaders iterated by two threads held a removal
    for tens of seconds); a batch asked for from inside a batch (nested) starts."""
    import threading
    import time
    from ddstore._readers import reading, unmapping
    events = []
    in_flight, go_on = threading.Event(), threading.Event()

    def batch(label, nested=False, hold=None):
        with reading(nested):
            events.append(f"{label} in")
            if hold is not None:
                in_flight.set()
                hold.wait(30)
        events.append(f"{label} out")

    a = threading.Thread(target=batch, args=("a",), kwargs={"hold": go_on})
    a.start()
    assert in_flight.wait(30)

    def remove():
        with unmapping():
            events.append("removed")
    u = threading.Thread(target=remove)
    u.start()
    time.sleep(0.3)  # (the removal waits for "a")
    b = threading.Thread(target=batch, args=("b",))
    n = threading.Thread(target=batch, args=("nested",), kwargs={"nested": True})
    b.start()
    n.start()
    n.join(30)
    time.sleep(0.3)
    assert "b in" not in events and "nested out" in events, events
    go_on.set()
    for t in (a, u, b):
        t.join(30)
    assert events.index("a out") < events.index("removed") < events.index("b in"), events


def test_read_ahead_lookups_never_miss_a_set_aside_or_put_back(store):
    """A read-ahead thread (inside ddstore._readers.reading) reading by name while the
    caller sets the variable aside and rolls back, many times over with the thread
    switched every microsecond: every read succeeds (the move of a name and its record
    are one step for the thread's lookup; they used to be seen half done, 'unknown
    variable', now and then), rows and record sets alike."""
    import sys
    import threading
    from ddstore._readers import reading
    store.add("x", np.arange(4, dtype=np.int32).reshape(2, 2))
    store.add_records("r", [{"k": np.ones((1, 2), np.float32)}])
    stop, errors, reads = [], [], [0]

    def reader():
        while not stop:
            with reading():
                try:
                    assert store.get("x", 1).tolist() == [2, 3]
                    assert store.get_record("r", 0)["k"].shape == (1, 2)
                    reads[0] += 1
                except Exception as exc:  # noqa: BLE001 -- collected, then asserted
                    errors.append(repr(exc))
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(150):
            with pytest.raises(DDStoreValueError):
                with store.transaction("set aside, rolled back"):
                    store.remove("x", "r")
                    fail_in_step(store)
    finally:
        stop.append(True)
        thread.join()
        sys.setswitchinterval(old)
    assert not errors and reads[0] > 0, (len(errors), errors[:3], reads)
    store.remove("x", "r")


def test_read_ahead_reads_what_the_name_meant_last(store):
    """A name set aside twice (removed, created again, removed again in a nested
    transaction): a read-ahead thread's read by name gets the latest variable of that
    name, not the oldest (it used to mix the two within one epoch); a rollback puts
    the first back."""
    from ddstore._readers import reading
    store.add("x", np.full((2, 1), 1, np.int32))
    with pytest.raises(DDStoreValueError, match="bad input"):
        with store.transaction("outer"):
            store.remove("x")
            store.add("x", np.full((2, 1), 2, np.int32))
            with store.transaction("inner"):
                store.remove("x")
                with reading():
                    assert store.get("x", 0).tolist() == [2]
                with pytest.raises(DDStoreValueError, match="unknown variable 'x'"):
                    store.get("x", 0)  # the caller's own read: removed
            with reading():
                assert store.get("x", 0).tolist() == [2]
            fail_in_step(store)
    assert store.get("x", 0).tolist() == [1] and store.variables() == ["x"]
    store.remove("x")


def test_builders_refuse_a_name_of_another_object_before_making_anything(store):
    """A temporal graph, a node memory or a graph dataset under the name of a window
    dataset: refused before anything is made (the build ran, and only its annotation
    was refused: its variables stayed and blocked the name)."""
    import warnings
    from ddstore import spatiotemporal as st
    from ddstore import temporal as tg
    from ddstore.graphs import GraphDataset, ising_dataset
    st.WindowDataset(store, "w", np.zeros((60, 3, 1), np.float32), 2)
    before = (store.variables(), store.annotations())
    builds = {
        "TemporalGraph": lambda: tg.TemporalGraph.from_arrays(
            store, "w", np.arange(4), np.arange(1, 5), np.arange(4.0)),
        "NodeMemory": lambda: tg.NodeMemory(store, "w", 8, 2, 2),
        "GraphDataset": lambda: GraphDataset.from_samples(
            store, "w", [ising_dataset(2, size=3, seed=1)[i] for i in range(2)],
            progress=False)}
    for kind, build in builds.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # (a rollback left undone)
            with pytest.raises(DDStoreValueError, match=f"the store holds a WindowDataset "
                                                        f"named 'w'.*a {kind} needs another"):
                build()
        assert (store.variables(), store.annotations()) == before, kind


def test_failed_pyg_builders_and_pyddstore_add_leave_nothing(store):
    """from_pyg / from_hetero failing (an edge to a node that does not exist) leave no
    feature or graph store annotation (they did: open_stores then opened an object
    never built); PyDDStore.add failing after the variable was made (its readers, its
    annotation) removes the variable, and the PyDDStore does not list it."""
    from torch_geometric.data import Data, HeteroData
    import torch
    import pyddstore
    from ddstore import DDStoreMemoryError
    from ddstore import pyg as dpyg
    before = (store.variables(), store.annotations())
    bad = Data(x=torch.zeros(3, 1), edge_index=torch.tensor([[0, 1], [1, 7]]))
    with pytest.raises(DDStoreIndexError, match="node 7 out of range"):
        dpyg.from_pyg(store, bad, name="g", weight_attr=None)
    h = HeteroData()
    h["a"].x = torch.zeros(3, 1)
    h["a", "r", "a"].edge_index = torch.tensor([[0], [9]])
    with pytest.raises(DDStoreIndexError, match="node 9 out of range"):
        dpyg.from_hetero(store, h, name="h")
    assert (store.variables(), store.annotations()) == before
    pd = pyddstore.PyDDStore.__new__(pyddstore.PyDDStore)
    pd._adopt(store.comm, store)

    def no_memory(name):
        raise MemoryError("readers")
    pd._readers = no_memory
    with pytest.raises(DDStoreMemoryError, match="readers"):
        pd.add("pv", np.zeros((2, 3)))
    assert (store.variables(), store.annotations()) == before and pd.variables() == []


def test_annotations_are_journalled(store, tmp_path):
    """A rollback gives every annotation name what it held before the transaction:
    one made is dropped, one replaced or removed comes back; those a ``load`` brought
    (one naming no variable, as an empty FeatureStore's) go too, and the same load runs
    again (it was refused: the store still held that annotation)."""
    store.add("v", np.arange(4))
    store.annotate("kept", "K", {"a": 1}, variables=("v",))
    store.annotate("gone", "K", {"a": 2})
    with store.transaction("ok"):
        store.annotate("made", "K", {"a": 3})
    assert store.annotations() == ["gone", "kept", "made"]
    with pytest.raises(DDStoreValueError):
        with store.transaction("t"):
            store.annotate("new", "K")
            store.annotate("kept", "K", {"a": 9}, variables=("v",))  # replaced
            assert store.unannotate("gone")
            store.annotate("gone", "K", {"a": 8})  # removed, then made again
            fail_in_step(store)
    assert store.annotations() == ["gone", "kept", "made"]
    assert [store.annotation(n).meta for n in ("gone", "kept", "made")] == \
        [{"a": 2}, {"a": 1}, {"a": 3}]
    assert store.annotation("kept").variables == ("v",)
    path = str(tmp_path / "ck")
    store.save(path)
    for n in ("gone", "kept", "made"):
        store.unannotate(n)
    store.remove("v")
    for _ in range(2):  # rolled back, then loaded again whole
        with pytest.raises(DDStoreValueError):
            with store.transaction("outer"):
                store.load(path)
                assert store.annotations() == ["gone", "kept", "made"]
                fail_in_step(store)
        assert (store.variables(), store.annotations()) == ([], [])
    store.load(path)
    assert store.annotations() == ["gone", "kept", "made"]
    assert store.get_range("v", 0, 4).tobytes() == np.arange(4).tobytes()


def test_a_refusal_to_be_saved_stays_with_its_object(store, tmp_path):
    """``Annotation.refuse_save`` (a node memory whose commit failed while applying it)
    holds through the object's annotating again and through a rollback that puts its
    earlier annotation back (the review of the thirty-fourth session: a rollback after
    ``NodeMemory.open`` lost it, and the broken memory was saved); removing the object
    lifts it."""
    from ddstore import DDStoreStateError
    store.annotate("obj", "K", {"v": 1})
    path = str(tmp_path / "ck")
    with pytest.raises(DDStoreValueError):
        with store.transaction("t"):
            store.annotate("obj", "K", {"v": 2})  # (an open annotating again)
            store.annotation("obj").refuse_save("its state is unknown")
            fail_in_step(store)
    assert store.annotation("obj").meta == {"v": 1}
    store.annotate("obj", "K", {"v": 3})  # annotating again: still refused
    with pytest.raises(DDStoreStateError, match=r"save .*objects a checkpoint may not "
                                                r"keep: 'obj' \(K\): its state is unknown; "
                                                r"remove them first"):
        store.save(path)
    assert not os.path.exists(path)
    store.unannotate("obj")
    store.annotate("obj", "K", {"v": 4})  # another object under the name
    store.save(path)
