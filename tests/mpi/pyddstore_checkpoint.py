"""MPI program: checkpoint and restart of the original DDStore API (``pyddstore``).

Usage: ``pyddstore_checkpoint.py`` on 1-4 ranks (under ``timeout``).

A ``PyDDStore`` at ``ddstore_width`` size/2 (or size) gets variables by ``add`` (float32
rows of 3, int64 single values, each rank its own number of rows) and by ``init`` +
``update`` (rows of 5 int16 elements: ``disp`` 5, ``itemsize`` 2; written after the
last epoch, published by ``save``); ``save(path)``; then ``PyDDStore.restore(path,
comm, ddstore_width=w)`` at every rank count ``k`` of 1..size (the first ``k`` ranks)
and every width dividing ``k``, transports auto and rma in turn: ``variables()``,
``info()``, ``size()``, every global row by ``get`` (all rows at once and one by one
from a few starts) and ``get_batch`` give the bytes of the store that was saved.
``load`` adds a checkpoint to a store that exists and refuses one whose names it holds
(alike on every rank, the store unchanged); a variable added after a restore is saved
by the next ``save``.
"""
import time

import numpy as np
from mpi4py import MPI

import pyddstore
from ddstore import DDStoreValueError

from _harness import (Cases, check, comm, expect_error, first_ranks, rank, run_main,
                      shared_tmpdir, size)

cases = Cases()


def _rows(r):
    """Rank r's rows of each variable added (their global order is rank order)."""
    n = 3 + 2 * r
    x = (np.arange(n * 3, dtype=np.float32).reshape(n, 3) + 100 * r) / 7
    ids = np.arange(n, dtype=np.int64) * 1000 + r
    u = (np.arange((r + 1) * 5, dtype=np.int16).reshape(r + 1, 5) - 50 * r)
    return x, ids, u


def expected(width):
    """The global rows of each variable in a group of ``width`` ranks (ranks
    0..width-1 of a group contribute in order; every group holds the same rows when
    every group's ranks pass the rows of their group rank)."""
    parts = [_rows(r) for r in range(width)]
    return {"x": (np.concatenate([p[0] for p in parts]), 3, 4),
            "ids": (np.concatenate([p[1] for p in parts]), 1, 8),
            "u": (np.concatenate([p[2] for p in parts]), 5, 2)}


def idle_barrier():
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.005)


def check_store(store, want, tag, exact=True):
    if exact:
        check(store.variables() == sorted(want), f"{tag}: variables {store.variables()}")
    for name, (arr, disp, itemsize) in want.items():
        n = arr.shape[0]
        check(store.info(name) == (n, disp, itemsize),
              f"{tag}: info({name!r}) = {store.info(name)}, want {(n, disp, itemsize)}")
        check(store.size(name) == n, f"{tag}: size({name!r})")
        buf = np.zeros_like(arr)
        store.epoch_begin()
        store.get(name, buf, 0)
        check(buf.tobytes() == arr.tobytes(), f"{tag}: get {name!r} all rows")
        for start in (0, n // 2, n - 1):
            one = np.zeros_like(arr[:1])
            store.get(name, one, start)
            check(one.tobytes() == arr[start:start + 1].tobytes(),
                  f"{tag}: get {name!r} row {start}")
        idx = [n - 1, 0, n // 3, n - 1]
        batch = np.zeros((4,) + arr.shape[1:], dtype=arr.dtype)
        store.get_batch(name, batch, idx)
        check(batch.tobytes() == arr[idx].tobytes(), f"{tag}: get_batch {name!r}")
        store.epoch_end()


@cases("save, restore at every rank count and width")
def _(t):
    width = size // 2 if size % 2 == 0 and size > 1 else size
    store = pyddstore.PyDDStore(comm, ddstore_width=width)
    x, ids, u = _rows(store.store.group_rank)
    store.add("x", x)
    store.add("ids", ids)
    store.init("u", u.shape[0], 5, 2)
    store.epoch_begin()
    store.epoch_end()
    store.update("u", u, 0)  # after the epoch: published by save
    want = expected(width)
    check_store(store, {k: v for k, v in want.items() if k != "u"}, "built", exact=False)
    store.save(f"{t.tmp}/ck")
    check_store(store, want, "built, after save")
    store.free()
    t.want = want
    configs = [(k, w) for k in range(1, size + 1) for w in range(1, k + 1) if k % w == 0]
    for turn, (k, w) in enumerate(configs):
        transport = ("auto", "rma")[turn % 2]
        sub = first_ranks(k)
        if sub is not None:
            with pyddstore.PyDDStore.restore(f"{t.tmp}/ck", sub, ddstore_width=w,
                                             transport=transport) as st:
                check(st.ddstore_width == w, f"restore width {st.ddstore_width}")
                check_store(st, want, f"{size} ranks w{width} -> {k} ranks w{w} "
                                      f"{transport}")
            sub.Free()
        idle_barrier()


@cases("load into a store that exists; save after restore")
def _(t):
    with pyddstore.PyDDStore(comm) as st:
        st.add("other", np.full((2, 2), rank, dtype=np.float64))
        st.load(f"{t.tmp}/ck")
        other = np.repeat(np.arange(size, dtype=np.float64), 2 * 2).reshape(-1, 2)
        check_store(st, dict(t.want, other=(other, 2, 8)), "loaded")
        expect_error(DDStoreValueError, ["the store already holds", "'ids'", "'u'", "'x'"],
                     st.load, f"{t.tmp}/ck", agree=True, store=st.store)
        st.save(f"{t.tmp}/ck2")
    with pyddstore.PyDDStore.restore(f"{t.tmp}/ck2", comm) as st:
        check_store(st, dict(t.want, other=(other, 2, 8)), "saved after load, restored")
    expect_error(DDStoreValueError, ["no checkpoint at"], pyddstore.PyDDStore.restore,
                 f"{t.tmp}/none", comm, agree=True)


def main():
    with shared_tmpdir("ddstore-pyddck-") as tmp:
        t = type("T", (), {})()
        t.tmp = tmp
        cases.run(t)


if __name__ == "__main__":
    run_main(main)
