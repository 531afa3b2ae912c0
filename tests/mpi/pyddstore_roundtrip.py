"""The pyddstore compatibility API: round-trips and errors, every width dividing N.

Usage: timeout 300 mpiexec -n N python pyddstore_roundtrip.py
Each group (of ddstore_width ranks) adds a full copy of every variable, rank chunks of
uneven sizes (one member holds 0 rows where possible); every rank reads every row back
with get (single rows and ranges spanning owners) and get_batch and compares the bytes.
init/update/epoch_begin/epoch_end fill a variable in pieces, as HydraGNN does.
"""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import pyddstore as dds  # noqa: E402
from _harness import check, expect_error, run_main  # noqa: E402
from ddstore import DDStoreError, DDStoreIndexError, DDStoreValueError  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size


def chunk_sizes(total, parts):
    sizes = np.array([total // parts] * parts)
    sizes[-1] += total - sizes.sum()
    if parts > 2:  # one member holds nothing
        sizes[-1] += sizes[1]
        sizes[1] = 0
    return sizes


def same(got, want, what):
    """One check: same dtype, shape and bytes."""
    return check(got.dtype == want.dtype and got.shape == want.shape and
                 got.tobytes() == want.tobytes(), f"{what}: dtype, shape or bytes differ")


def run(width, transport):
    store = dds.PyDDStore(comm, ddstore_width=width, transport=transport)
    w = store.ddstore_width
    grank = rank % w
    rng = np.random.default_rng(11)
    cases = {"f32": rng.standard_normal((37, 4)).astype(np.float32),
             "i64": rng.integers(-2 ** 62, 2 ** 62, (29,)),
             "u8": rng.integers(0, 255, (41, 3, 2)).astype(np.uint8),
             "f64": rng.standard_normal((23, 5)),
             "i32": rng.integers(-100, 100, (19, 7)).astype(np.int32),
             "b": rng.random((17, 2)) < 0.5}
    for name, full in cases.items():
        sizes = chunk_sizes(len(full), w)
        lo = int(sizes[:grank].sum())
        store.add(name, full[lo:lo + sizes[grank]])
    store.epoch_begin()
    for name, full in cases.items():
        assert store.size(name) == len(full)
        assert store.info(name)[0] == len(full)
        for i in range(len(full)):
            buf = np.zeros((1,) + full.shape[1:], dtype=full.dtype)
            store.get(name, buf, i)
            same(buf, full[i:i + 1], f"{name} row {i}")
        buf = np.zeros_like(full)
        store.get(name, buf, 0)  # spans every owner
        same(buf, full, f"{name} all rows")
        for start in (1, len(full) // 2 - 1):
            buf = np.zeros((len(full) // 2,) + full.shape[1:], dtype=full.dtype)
            store.get(name, buf, start)
            same(buf, full[start:start + len(buf)], f"{name} rows from {start}")
        idx = rng.integers(0, len(full), 25)
        buf = np.zeros((25,) + full.shape[1:], dtype=full.dtype)
        store.get_batch(name, buf, idx)
        same(buf, full[idx], f"{name} get_batch")
    store.epoch_end()
    # HydraGNN-style: init, update in pieces, then an epoch makes the rows visible
    total = 50
    full = np.arange(total * 3, dtype=np.float64).reshape(total, 3) * 1.5
    sizes = chunk_sizes(total, w)
    lo = int(sizes[:grank].sum())
    store.init("filled", int(sizes[grank]), 3, 8)
    mine = full[lo:lo + sizes[grank]]
    half = len(mine) // 2
    store.update("filled", mine[:half], 0)
    store.update("filled", mine[half:], half)
    store.epoch_begin()
    buf = np.zeros_like(full)
    store.get("filled", buf, 0)
    same(buf, full, "init/update")
    store.epoch_end()
    # torch tensors are accepted as buffers
    import torch
    t = torch.zeros(5, 4)
    store.get("f32", t, 3)
    same(t.numpy(), cases["f32"][3:8], "torch buffer")
    # errors
    expect_error(DDStoreIndexError, ["[36, 38)", "[0, 37)"],
                 lambda: store.get("f32", np.zeros((2, 4), np.float32), 36),
                 also=DDStoreError)
    expect_error(DDStoreIndexError, [],
                 lambda: store.get("f32", np.zeros((2, 4), np.float32), -1),
                 also=DDStoreError)
    # what the original raised: code that catches ValueError keeps working
    for start in (36, -1, 10 ** 20):
        expect_error(ValueError, [f"[{start}, {start + 2})"],
                     lambda: store.get("f32", np.zeros((2, 4), np.float32), start),
                     also=DDStoreError)
    expect_error(ValueError, ["37"],
                 lambda: store.get_batch("f32", np.zeros((1, 4), np.float32), [37]),
                 also=DDStoreError)
    # a numpy integer start is checked as the integer it is (uint8(255) + 1 wrapped to
    # 0 and passed the check; uint64(2**64 - 1) gave a bare OverflowError)
    for start, count in ((np.uint8(255), 1), (np.int8(120), 10), (np.int16(32767), 2),
                         (np.int64(2 ** 63 - 1), 1), (np.uint64(2 ** 64 - 1), 1)):
        expect_error(ValueError, [f"[{int(start)}, {int(start) + count})", "[0, 37)"],
                     lambda: store.get("f32", np.zeros((count, 4), np.float32), start),
                     also=DDStoreError)
    # zero rows of another width: refused whatever the type of start (it was taken
    # with a Python int start, refused with a numpy one)
    for start in (1, np.int64(1)):
        expect_error(ValueError, ["rows have 5 elements", "rows of 4 elements"],
                     lambda: store.get("f32", np.zeros((0, 5), np.float32), start),
                     also=DDStoreError)
    # an argument of another type: a TypeError too, as the original's typed signature
    expect_error(TypeError, ["start must be an integer"],
                 lambda: store.get("f32", np.zeros((2, 4), np.float32), 1.5),
                 also=DDStoreValueError)
    # writes after the data was published: visible to every reader after sync()
    lo_r, hi_r = store.store.local_rows("filled")
    comm.Barrier()  # every rank has read the old rows (the test's own ordering)
    if hi_r > lo_r:
        store.update("filled", np.full((1, 3), 7.0 + comm.rank), 0)
    store.sync()
    members = comm.allgather((store.store.group, lo_r, hi_r))
    for r, (g, a, b) in enumerate(members):
        if g == store.store.group and b > a:
            row = np.zeros((1, 3))
            store.get("filled", row, a)
            same(row, np.full((1, 3), 7.0 + r), "update after publish, then sync")
    # the original's pattern: update, then epoch_begin (its MPI_Win_fence) publishes:
    # with an init variable in the store every epoch_begin synchronises, so the last
    # rank's late write is what every rank reads after it
    comm.Barrier()  # every rank has read the rows above (the test's own ordering)
    if comm.rank == comm.size - 1:
        time.sleep(0.3)
    if hi_r > lo_r:
        store.update("filled", np.full((1, 3), 70.0 + comm.rank), 0)
    store.epoch_begin()
    for r, (g, a, b) in enumerate(members):
        if g == store.store.group and b > a:
            row = np.zeros((1, 3))
            store.get("filled", row, a)
            same(row, np.full((1, 3), 70.0 + r), "update, then epoch_begin (a fence)")
    store.epoch_end()
    # epoch_end is a fence too: rank 0's update made after it never reaches a read of
    # rank 0's row that a later rank of its group makes late in the epoch it closed
    g0, a0, b0 = members[0]
    late = max(r for r, (g, _, _) in enumerate(members) if g == g0)
    store.epoch_begin()
    if comm.rank == late and late > 0 and b0 > a0:
        time.sleep(0.3)
        row = np.zeros((1, 3))
        store.get("filled", row, a0)
        same(row, np.full((1, 3), 70.0), "a read late in the epoch (epoch_end a fence)")
    store.epoch_end()
    if comm.rank == 0 and hi_r > lo_r:
        store.update("filled", np.full((1, 3), -99.0), 0)  # the next epoch's
    store.epoch_begin()
    if comm.rank == late and late > 0 and b0 > a0:
        row = np.zeros((1, 3))
        store.get("filled", row, a0)
        same(row, np.full((1, 3), -99.0), "the next epoch reads the update")
    store.epoch_end()
    if comm.rank == 0 and hi_r > lo_r:
        store.update("filled", np.full((1, 3), 70.0), 0)  # as it was, for what follows
    store.epoch_begin()
    store.epoch_end()
    if comm.size > 1:  # a rank in another call is told which call this was
        expect_error(DDStoreValueError, ["rank 0 called PyDDStore.epoch_begin()",
                                         "called PyDDStore.add('late')"],
                     lambda: store.epoch_begin() if comm.rank == 0 else
                     store.add("late", np.zeros((1, 3))), agree=True, also=DDStoreError)
    expect_error(DDStoreValueError, ["4 elements of 8 bytes", "4 elements of 4 bytes"],
                 lambda: store.get("f32", np.zeros((2, 4), np.float64), 0),
                 also=DDStoreError)
    expect_error(DDStoreValueError, ["3 elements"],
                 lambda: store.get("f32", np.zeros((2, 3), np.float32), 0),
                 also=DDStoreError)
    expect_error(DDStoreValueError, ["'nope'"],
                 lambda: store.get("nope", np.zeros(2), 0), also=DDStoreError)
    expect_error(DDStoreValueError, ["contiguous"],
                 lambda: store.get("f32", np.zeros((4, 2), np.float32).T, 0),
                 also=DDStoreError)
    expect_error(TypeError, ["numpy array"],
                 lambda: store.get("f32", [1, 2], 0), also=DDStoreValueError)
    expect_error(DDStoreValueError, ["2 rows but 1 indices"],
                 lambda: store.get_batch("f32", np.zeros((2, 4), np.float32), [0]),
                 also=DDStoreError)
    expect_error(DDStoreIndexError, ["37"],
                 lambda: store.get_batch("f32", np.zeros((1, 4), np.float32), [37]),
                 also=DDStoreError)
    expect_error(DDStoreIndexError, [],
                 lambda: store.update("filled", np.zeros((1, 3)), int(sizes[grank])),
                 also=DDStoreError)
    expect_error(DDStoreValueError, ["nrows=-1"], lambda: store.init("bad", -1, 3),
                 also=DDStoreError)
    expect_error(DDStoreValueError, ["already holds variable"],
                 lambda: store.add("f32", cases["f32"]), also=DDStoreError)
    # bad input on the last rank only: every rank raises, none is left waiting
    last = comm.size - 1
    expect_error(DDStoreValueError, ["nrows=-1", f"rank {last}"],
                 lambda: store.init("bad1", -1 if comm.rank == last else 3, 3),
                 also=DDStoreError)
    expect_error(DDStoreValueError, [f"rank {last}"],
                 lambda: store.add("bad2", [1, 2] if comm.rank == last else np.zeros(2)),
                 also=DDStoreError)
    # a row count beyond int64 on one rank (it hung: the others allocated collectively
    # while that rank failed converting it), a name of another type on every rank
    expect_error(DDStoreValueError, ["nrows=9223372036854775808", "[0, 2**63 - 1]",
                                     f"rank {last}"],
                 lambda: store.init("bad3", 2 ** 63 if comm.rank == last else 3, 3),
                 also=DDStoreError)
    expect_error(TypeError, ["a variable's name is a str, got int 7"],
                 lambda: store.add(7, np.zeros(2)), also=DDStoreValueError)

    # a str subclass pickle cannot send (a class made in a function), on the last rank
    # only: a name as its text (it hung: that rank's part of the round failed to pickle
    # and it left the round)
    def local_name(text):
        class Name(str):
            pass
        return Name(text)
    store.add(local_name("sub") if comm.rank == last else "sub", cases["f32"])
    buf = np.zeros_like(cases["f32"])
    store.get("sub", buf, 0)
    same(buf, cases["f32"], "a variable named by a str subclass")
    # numpy's long double: its padding bytes differ between replicas of one value (a
    # checkpoint refused them as different rows); refused, as the store's own add does
    longd = np.arange(6, dtype=np.longdouble).reshape(3, 2)
    for call in (lambda: store.add("ld", longd), lambda: store.update("f32", longd, 0)):
        expect_error(DDStoreValueError, ["float128", "long double", "padding"], call,
                     also=DDStoreError)
    # rows of the same bytes but other elements on one rank (2 x float32 / 1 x float64,
    # a rank with no rows given as float32): refused on every rank, as the original
    # refused a disp that differs; nothing created
    if comm.size > 1:
        other = np.zeros((0, 8), np.float32) if comm.rank == last else np.zeros((2, 4))
        expect_error(DDStoreValueError, ["disp", "itemsize", "differs"],
                     lambda: store.add("mixed", other), also=DDStoreError)
        expect_error(DDStoreValueError, ["disp", "itemsize", "differs"],
                     lambda: store.init("mixed", 2, 8 if comm.rank == last else 4,
                                        4 if comm.rank == last else 8), also=DDStoreError)
        check("mixed" not in store.variables() and "mixed" not in store.store,
              "a refused add / init left the variable")
    # the store still serves after the errors
    buf = np.zeros_like(cases["u8"])
    store.get("u8", buf, 0)
    same(buf, cases["u8"], "after errors")
    store.free()
    store.free()  # twice is fine
    expect_error(DDStoreError, ["freed"], lambda: store.get("u8", buf, 0),
                 also=DDStoreError)



def main():
    expect_error(DDStoreValueError, ["method=1"], lambda: dds.PyDDStore(comm, method=1),
                 also=DDStoreError)
    # on one rank only: agreed, raised on every rank naming it (the others waited in
    # the constructor's first round for ever)
    last = size - 1
    expect_error(DDStoreValueError, [f"rank {last}: PyDDStore: method=1 is not available"],
                 lambda: dds.PyDDStore(comm, method=int(rank == last)), agree=True,
                 agreed=True, what="method=1 on the last rank")
    expect_error(dds.PyDDStoreTypeError, [f"rank {last}: PyDDStore: handshake_dir must "
                                          f"be a str"],
                 lambda: dds.PyDDStore(comm, n_core=-int(rank == last)), agree=True,
                 agreed=True, what="n_core=-1 on the last rank")
    widths = sorted({1, 2 if size % 2 == 0 else 1, size})
    for width in widths:
        run(width, "auto")
    if size > 1:
        run(size, "rma")


run_main(main)
