"""Memory safety of the C core (issue 25, item 9) and fanouts beyond every degree in the
PyG sampler (item 6), in-process on one rank.

Every C entry point that writes an output is given the output's capacity and refuses to
go past it: each test here hands the core a buffer with a guard region behind the
capacity it states, and checks the error, its message and that the guard is untouched
(before the capacities existed, these calls wrote into the guard).
"""
import os
import re

import numpy as np
import pytest
import torch

from ddstore import _core
from ddstore._core import ffi, lib
from ddstore.errors import (DDStoreIndexError, DDStoreMemoryError, DDStoreStateError,
                            DDStoreValueError)

GUARD = 64                    # elements of guard behind every stated capacity
SENTINEL = -0x5A5A5A5A5A5A5A5A


def guarded(cap, dtype=np.int64):
    """An array of ``cap + GUARD`` sentinel elements: the core is told ``cap``."""
    buf = np.empty(cap + GUARD, dtype=dtype)
    buf.view(np.uint8)[:] = 0xA5
    return buf


def intact(buf, cap):
    """The guard behind ``cap`` holds its sentinel bytes (nothing was written past)."""
    return bool((buf[cap:].view(np.uint8) == 0xA5).all())


def p64(arr):
    return ffi.from_buffer("int64_t[]", arr)


def message():
    return ffi.string(lib.dds_last_error()).decode()


@pytest.fixture
def core():
    from mpi4py import MPI
    c = _core.Core(MPI.COMM_SELF, 1, "auto")
    yield c
    c.free()


def _var(core, name, values):
    values = np.ascontiguousarray(values)
    vid = core.add(name, values.shape[0], values.nbytes // max(values.shape[0], 1))
    core.write_local(vid, 0, values)
    return vid


# a graph of 3 nodes as a T-CSR / CSC: lists of node 0 (3 entries), 1 (2), 2 (none)
INDPTR = np.array([0, 3, 5, 5], dtype=np.int64)
NBR = np.array([1, 2, 0, 0, 2], dtype=np.int64)
TS = np.array([1.0, 2.0, 3.0, 1.0, 2.0])
EID = np.arange(5, dtype=np.int64)


@pytest.fixture
def tcsr(core):
    g = _core.TCSR(core, _var(core, "nbr", NBR), _var(core, "ts", TS),
                   _var(core, "eid", EID), INDPTR, np.array([0, 3], dtype=np.int64))
    core.sync()
    return g


# ------------------------------------------------------------------ reads
def test_read_refuses_an_output_too_small(core):
    vid = _var(core, "rows", np.arange(40, dtype=np.int64).reshape(10, 4))
    core.sync()
    starts = np.array([0, 3, 7], dtype=np.int64)
    counts = np.array([2, 3, 3], dtype=np.int64)       # 8 rows of 32 bytes
    for cap in (0, 1, 31, 8 * 32 - 1):                  # bytes
        out = guarded(cap, np.uint8)
        rc = lib.dds_read(core._handle[0], vid, p64(starts), p64(counts), 3,
                          ffi.from_buffer(out), cap, 0)
        assert rc == lib.DDS_EINVAL and "the output holds %d" % cap in message()
        assert intact(out, 0)                           # nothing written at all
        one = guarded(cap, np.uint8)
        rc = lib.dds_read_range(core._handle[0], vid, 2, 8, ffi.from_buffer(one), cap)
        assert rc == lib.DDS_EINVAL and intact(one, 0)
    out = guarded(8 * 32, np.uint8)
    assert lib.dds_read(core._handle[0], vid, p64(starts), p64(counts), 3,
                        ffi.from_buffer(out), 8 * 32, 0) == lib.DDS_OK
    assert intact(out, 8 * 32)
    want = np.arange(40).reshape(10, 4)[[0, 1, 3, 4, 5, 7, 8, 9]]
    assert np.array_equal(out[:8 * 32].view(np.int64).reshape(8, 4), want)
    # the Python wrappers state the real size of the array they are given
    with pytest.raises(DDStoreValueError, match="the output holds 224"):
        core.read(vid, starts, counts, np.empty((7, 4), np.int64))
    with pytest.raises(DDStoreValueError, match="writable"):
        core.read(vid, starts, counts, bytes(256))
    read_range, read_rows = core.range_reader(), core.rows_reader()
    with pytest.raises(DDStoreValueError, match="the output holds 64"):
        read_range(vid, 0, 3, np.empty((2, 4), np.int64))
    with pytest.raises(DDStoreValueError, match="the output holds 32"):
        read_rows(vid, [4, 5], np.empty((1, 4), np.int64))
    with pytest.raises(DDStoreValueError, match="writable"):
        read_rows(vid, [4], bytes(32))
    got = np.empty((2, 4), np.int64)
    read_rows(vid, [9, 0], got)
    assert np.array_equal(got, np.arange(40).reshape(10, 4)[[9, 0]])
    offsets = guarded(1)
    assert lib.dds_chunk_offsets(core._handle[0], vid, p64(offsets), 1) == lib.DDS_EINVAL
    assert intact(offsets, 0)


def test_fast_readers_check_out(store):
    """``DDStore.fast_readers``: an ``out`` smaller than the rows, or read-only, is a
    DDStoreValueError, not a write past its end."""
    store.add("a", np.arange(24, dtype=np.float32).reshape(6, 4))
    read_range, read_rows = store.fast_readers("a")
    big = guarded(12, np.float32)
    with pytest.raises(DDStoreValueError, match="holds 48"):
        read_range(0, 4, big[:12])                        # 3 rows' room for 4
    assert intact(big, 12)
    with pytest.raises(DDStoreValueError):
        read_rows([1, 2, 3], big[:8])
    assert intact(big, 8)
    with pytest.raises(DDStoreValueError, match="writable"):
        read_range(0, 1, np.zeros(4, np.float32).tobytes())
    out = np.empty((2, 4), np.float32)
    read_rows([5, 0], out)
    assert np.array_equal(out, np.arange(24, dtype=np.float32).reshape(6, 4)[[5, 0]])
    # a range whose end passes int64: its true end (it was printed through a double:
    # 2**63 for both, a two-row range shown as one row)
    for start, count, end in ((3, 2 ** 63 - 1, 2 ** 63 + 2), (2 ** 63 - 1, 2, 2 ** 63 + 1)):
        with pytest.raises(DDStoreIndexError, match=rf"rows \[{start}, {end}\) \(range 0\) "
                                                    rf"out of range \[0, 6\)"):
            store.read_ranges("a", [start], [count])


# ------------------------------------------------------------------ samplers
def test_temporal_sample_refuses_an_output_too_small(core, tcsr):
    roots = np.array([0, 1, 0], dtype=np.int64)
    rts = np.array([10.0, 10.0, 2.5])                   # takes 3, 2 and 2 entries
    for cap in (0, 6):
        outs = [guarded(cap) for _ in range(3)] + [guarded(cap, np.float64)]
        count = ffi.new("int64_t *")
        rc = lib.dds_temporal_sample(core._handle[0], tcsr._c, p64(roots),
                                     ffi.from_buffer("double[]", rts), 3, 5,
                                     lib.DDS_SAMPLE_RECENT, 1, 0, 0, cap,
                                     *(p64(o) for o in outs[:3]),
                                     ffi.from_buffer("double[]", outs[3]), count)
        assert rc == lib.DDS_EINVAL and "7 edges taken" in message(), message()
        assert count[0] == 0 and all(intact(o, 0) for o in outs)
    # the wrapper sizes the outputs by min(k, degree): a huge k allocates nothing more
    row, nbr, eid, ets = tcsr.sample(roots, rts, 2 ** 62, lib.DDS_SAMPLE_UNIFORM, 1, 0, 0)
    assert row.tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert nbr.tolist() == [1, 2, 0, 0, 2, 1, 2] and eid.tolist() == [0, 1, 2, 3, 4, 0, 1]


def test_temporal_sample_int64_times(core):
    """A T-CSR of int64 times (time_type DDS_TIME_I64) compares them exactly: times 1
    apart beyond 2**53 and negative ones, root times of the same dtype only (float64
    ones are refused before the core); the edge times come back as int64, into outputs
    of the capacity stated; a time_type that is none is refused."""
    big = 2 ** 62
    ts = np.array([big + 1, big + 2, big + 3, -big - 1, -big], np.int64)
    g = _core.TCSR(core, _var(core, "nbr", NBR), _var(core, "ts", ts),
                   _var(core, "eid", EID), INDPTR, np.array([0, 3], dtype=np.int64),
                   time_dtype=np.int64)
    core.sync()
    roots = np.array([0, 0, 1, 1, 2], dtype=np.int64)
    rts = np.array([big + 3, big + 2, -big, -big + 1, big], np.int64)
    row, nbr, eid, ets = g.sample(roots, rts, 10, lib.DDS_SAMPLE_RECENT, 0, 0, 0)
    assert row.tolist() == [0, 0, 1, 2, 3, 3] and eid.tolist() == [0, 1, 0, 3, 3, 4]
    assert ets.dtype == np.int64 and ets.tolist() == [big + 1, big + 2, big + 1, -big - 1,
                                                      -big - 1, -big]
    with pytest.raises(DDStoreValueError, match="root_ts: times of dtype float64"):
        g.sample(roots, rts.astype(np.float64), 10, lib.DDS_SAMPLE_RECENT, 0, 0, 0)
    outs = [guarded(3) for _ in range(4)]
    count = ffi.new("int64_t *")
    rc = lib.dds_temporal_sample(core._handle[0], g._c, p64(roots), p64(rts), 5, 10,
                                 lib.DDS_SAMPLE_RECENT, 0, 0, 0, 3,
                                 *(p64(o) for o in outs), count)
    assert rc == lib.DDS_EINVAL and "6 edges taken" in message()
    assert count[0] == 0 and all(intact(o, 0) for o in outs)
    g._c.time_type = 9
    rc = lib.dds_temporal_sample(core._handle[0], g._c, p64(roots), p64(rts), 5, 10,
                                 lib.DDS_SAMPLE_RECENT, 0, 0, 0, 3,
                                 *(p64(o) for o in outs), count)
    assert rc == lib.DDS_EINVAL and "time_type=9 is not a dds_time_type" in message()
    # the PyG sampler over the same lists, times <= the node's, as int64
    csc = _core.CSC(core, g._c.nbr_var, g._c.eid_var, g._c.ts_var, INDPTR,
                    np.array([0, 3], dtype=np.int64), time_dtype=np.int64)
    row, nbr, eid = csc.sample(roots, rts, -1, 0, 0, 9)
    assert row.tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3] and \
        eid.tolist() == [0, 1, 2, 0, 1, 3, 4, 3, 4]


def _csc(core):
    return _core.CSC(core, _var(core, "cn", NBR), _var(core, "ce", EID), None, INDPTR,
                     np.array([0, 3], dtype=np.int64))


def test_neighbor_sample_capacity_and_huge_k(core):
    csc = _csc(core)
    core.sync()
    nodes = np.array([0, 1, 2, 0], dtype=np.int64)
    full = ([0, 0, 0, 1, 1, 3, 3, 3], [1, 2, 0, 0, 2, 1, 2, 0], [0, 1, 2, 3, 4, 0, 1, 2])
    for k in (-1, 3, 2 ** 31 - 1, 10 ** 12, 2 ** 62, 2 ** 63 - 1):
        row, nbr, eid = csc.sample(nodes, None, k, 0, 7, 8)
        assert (row.tolist(), nbr.tolist(), eid.tolist()) == full, k
    for k, cap in ((-1, 7), (2 ** 62, 7), (2, 5)):     # k=2 takes 2 + 2 + 2
        outs = [guarded(cap) for _ in range(3)]
        count = ffi.new("int64_t *")
        rc = lib.dds_neighbor_sample(core._handle[0], csc._c, p64(nodes), ffi.NULL, 4, k,
                                     0, 7, cap, *(p64(o) for o in outs), count)
        assert rc == lib.DDS_EINVAL and "output capacity %d" % cap in message()
        assert count[0] == 0 and all(intact(o, 0) for o in outs)
    # with replacement: k draws per node with edges; their number overflowing is refused
    row, nbr, eid = csc.sample(nodes, None, 5, _core.NEIGHBOR_REPLACE, 7, 15)
    assert row.tolist() == [0] * 5 + [1] * 5 + [3] * 5
    assert all(NBR[e] == v for e, v in zip(eid, nbr))
    outs = [guarded(4) for _ in range(3)]
    count = ffi.new("int64_t *")
    rc = lib.dds_neighbor_sample(core._handle[0], csc._c, p64(nodes), ffi.NULL, 4,
                                 2 ** 62, lib.DDS_NEIGHBOR_REPLACE, 7, 4,
                                 *(p64(o) for o in outs), count)
    assert rc == lib.DDS_ENOMEM and "more than 2^63" in message()
    assert all(intact(o, 0) for o in outs)
    with pytest.raises(DDStoreMemoryError, match="do not fit in memory"):
        csc.sample(nodes, None, 2 ** 40, _core.NEIGHBOR_REPLACE, 7, 3 * 2 ** 40)


# ------------------------------------------------------------------ T-CSR build
def test_tcsr_pack_place_sort_refuse_small_outputs():
    edges = np.array([[0, 1], [1, 2], [2, 0]], dtype=np.int64)
    offs = np.array([0, 2, 3], dtype=np.int64)
    counts = np.zeros(2, np.int64)
    for cap in (0, 5):                                  # 6 entries with reverse
        out = guarded(4 * cap)
        rc = lib.dds_tcsr_pack(p64(edges), ffi.NULL, 0, 3, 1, p64(offs), 2, p64(counts),
                               p64(out), cap)
        assert rc == lib.DDS_EINVAL and "6 entries" in message() and intact(out, 0)
    with pytest.raises(DDStoreValueError, match="capacity of 2"):
        _core.tcsr_pack(edges, None, 0, True, offs, np.empty((2, 4), np.int64), counts)
    # place: entries of nodes [0, 2) into a chunk of 3 rows told as 2
    entries = np.array([[0, 5, 0, 10], [1, 6, 0, 11], [0, 7, 0, 12]], dtype=np.int64)
    indptr = np.array([0, 2, 3, 3], dtype=np.int64)
    nbr, eid = guarded(2), guarded(2)
    fill = np.zeros(2, np.int64)
    rc = lib.dds_tcsr_place(p64(entries), 3, 0, 2, p64(indptr), p64(fill), p64(nbr),
                            ffi.NULL, p64(eid), 2, 8)
    assert rc == lib.DDS_EINVAL and "outside the chunk's 2 rows" in message()
    assert intact(nbr, 2) and intact(eid, 2)
    with pytest.raises(DDStoreValueError, match="chunk's 2 rows"):
        _core.tcsr_place(entries, 0, 2, indptr, np.zeros(2, np.int64),
                         np.empty(2, np.int64), np.empty(3), np.empty(3, np.int64))
    rc = lib.dds_tcsr_sort(0, 2, p64(indptr), p64(nbr), ffi.NULL, p64(eid), 2, 8,
                           lib.DDS_TIME_F64, ffi.NULL, 0, 0, ffi.NULL, 0)
    assert rc == lib.DDS_EINVAL and "not inside the chunk's 2 rows" in message()


def test_tcsr_sort_by_neighbour_time_checks_before_moving():
    """Sorting by a table of neighbour times: a list longer than the scratch (EINVAL),
    a neighbour outside the table (ERANGE), the table with per-entry times too or of
    another width or a time type that is none (EINVAL): refused before any entry moves;
    the scratch is never written past the length it was told."""
    indptr = np.array([0, 3, 5], dtype=np.int64)
    nbr0 = np.array([4, 1, 0, 3, 2], dtype=np.int64)
    eid0 = np.arange(10, 15, dtype=np.int64)
    table = np.array([1.0, 2.0, 3.0, 4.0, 5.0])  # both lists out of order
    p = ffi.from_buffer
    f64 = lib.DDS_TIME_F64
    for scratch_len, tab_len, ts, t_bytes, ttype, rc_want, text in (
            (2, 5, None, 8, f64, lib.DDS_EINVAL, "more than the scratch's 2"),
            (3, 4, None, 8, f64, lib.DDS_ERANGE, "outside the 4 neighbour times"),
            (3, 5, np.zeros(5), 8, f64, lib.DDS_EINVAL, "needs ts NULL"),
            (3, 5, None, 2, f64, lib.DDS_EINVAL, "4- or 8-byte times"),
            (3, 5, None, 8, 7, lib.DDS_EINVAL, "time_type=7 is not a dds_time_type")):
        nbr, eid, scratch = nbr0.copy(), eid0.copy(), guarded(scratch_len)
        rc = lib.dds_tcsr_sort(0, 2, p64(indptr), p64(nbr), ffi.NULL if ts is None else
                               p("double[]", ts), p64(eid), 5, 8, ttype, p(table),
                               tab_len, t_bytes, p64(scratch), scratch_len)
        assert rc == rc_want and text in message(), (rc, message())
        assert np.array_equal(nbr, nbr0) and np.array_equal(eid, eid0)
        assert intact(scratch, scratch_len)
    with pytest.raises(DDStoreValueError, match="nbr_time must be a C-contiguous 1-d "
                                                "float32, float64, int32 or int64"):
        _core.tcsr_sort(0, 2, indptr, nbr0.copy(), None, eid0.copy(),
                        table.astype(np.int16))
    nbr, eid, scratch = nbr0.copy(), eid0.copy(), guarded(3)
    assert lib.dds_tcsr_sort(0, 2, p64(indptr), p64(nbr), ffi.NULL, p64(eid), 5, 8, f64,
                             p(table), 5, 8, p64(scratch), 3) == lib.DDS_OK
    assert nbr.tolist() == [0, 1, 4, 2, 3] and eid.tolist() == [12, 11, 10, 14, 13]
    assert intact(scratch, 3)
    # int64 (and int32) neighbour times beyond 2**53 sort exactly, as do int64 times per
    # entry, and doubles with -0.0 == 0.0 and negative values
    # (as doubles, node 0's three would tie and stay in edge-id order: 4, 1, 0)
    big = np.array([2 ** 62 + 4, 2 ** 62 + 6, -2 ** 62, 2 ** 62 + 1, 2 ** 62 + 5], np.int64)
    nbr, eid = nbr0.copy(), eid0.copy()
    _core.tcsr_sort(0, 2, indptr, nbr, None, eid, big)
    assert nbr.tolist() == [0, 4, 1, 2, 3] and eid.tolist() == [12, 10, 11, 14, 13]
    nbr, eid = nbr0.copy(), eid0.copy()
    _core.tcsr_sort(0, 2, indptr, nbr, None, eid, np.array([3, 1, 2, -7, 9], np.int32))
    assert nbr.tolist() == [1, 0, 4, 3, 2]
    ts = np.array([2 ** 62 + 1, 2 ** 62, -2 ** 62 - 1, 9007199254740993, 9007199254740992],
                  np.int64)
    nbr, eid = nbr0.copy(), eid0.copy()
    _core.tcsr_sort(0, 2, indptr, nbr, ts, eid)
    assert ts.tolist() == [-2 ** 62 - 1, 2 ** 62, 2 ** 62 + 1, 9007199254740992,
                           9007199254740993] and eid.tolist() == [12, 11, 10, 14, 13]
    ts = np.array([0.0, -0.0, -1.5, 2.0, -np.inf])
    nbr, eid = nbr0.copy(), eid0.copy()
    _core.tcsr_sort(0, 2, indptr, nbr, ts, eid)  # -0.0 == 0.0: ties in edge id order
    assert ts[:3].tolist() == [-1.5, 0.0, -0.0] and eid.tolist() == [12, 10, 11, 14, 13]



def test_arrays_of_another_dtype_are_refused_before_the_core():
    """An input array reaches the core only with its C type's dtype: float32 times (or
    int32 edges) would be read as doubles (int64s) of other values and beyond the end."""
    edges = np.array([[0, 1], [1, 2], [2, 0]], dtype=np.int64)
    offs = np.array([0, 2, 3], dtype=np.int64)
    out, counts = np.empty((6, 4), np.int64), np.zeros(2, np.int64)
    with pytest.raises(DDStoreValueError, match="tcsr_pack: t: times of dtype float32; "
                                                "times are kept as int64"):
        _core.tcsr_pack(edges, np.zeros(3, np.float32), 0, True, offs, out, counts)
    with pytest.raises(DDStoreValueError, match=r"expected a C-contiguous float64 array "
                                                r"of shape \(3,\)"):
        _core.tcsr_pack(edges, np.zeros(2), 0, True, offs, out, counts)  # t too short
    with pytest.raises(DDStoreValueError, match="dtype int32 passed to the core as int64"):
        _core.tcsr_pack(edges.astype(np.int32), None, 0, True, offs, out, counts)
    _core.tcsr_pack(edges, np.zeros(3), 0, True, offs, out, counts)  # the right dtypes
    assert counts.tolist() == [4, 2]

def _unaligned(a):
    """``a``'s values in an array whose data starts one byte past an aligned address."""
    b = np.frombuffer(b"\0" + np.ascontiguousarray(a).tobytes(), dtype=a.dtype, offset=1)
    assert not b.flags.aligned and b.flags.c_contiguous
    return b


def test_unaligned_inputs_reach_the_core_aligned(store):
    """Index, root and time arrays whose data numpy left unaligned (np.frombuffer at an
    odd offset) give what aligned ones give: the core reads them through int64_t /
    double pointers, which UBSan stopped at as a misaligned load (sanitize.sh runs this
    test under it)."""
    from ddstore import temporal as tg
    rows = np.arange(24, dtype=np.float64).reshape(8, 3)
    store.add("unaligned", rows)
    idx = np.array([5, 0, 7, 5], dtype=np.int64)
    assert np.array_equal(store.get_batch("unaligned", _unaligned(idx)), rows[idx])
    starts, counts = np.array([1, 6], np.int64), np.array([3, 2], np.int64)
    got = store.read_ranges("unaligned", _unaligned(starts), _unaligned(counts))
    assert np.array_equal(got, np.concatenate([rows[1:4], rows[6:8]]))
    (many,) = store.get_many([("unaligned", _unaligned(idx))])
    assert np.array_equal(many, rows[idx])
    g = tg.TemporalGraph.from_arrays(store, "unaligned_g", np.array([0, 1, 2, 0]),
                                     np.array([1, 2, 0, 2]), np.array([1., 2., 3., 4.]),
                                     num_nodes=3)
    sampler = tg.TemporalSampler(g, fanouts=(2,), strategy="recent")
    roots, ts = np.array([0, 1, 2], np.int64), np.array([5.0, 2.5, 3.5])
    want = sampler.sample(roots, ts)[0]
    for r, t in ((_unaligned(roots), ts), (roots, _unaligned(ts))):
        got = sampler.sample(r, t)[0]
        assert np.array_equal(got.eid, want.eid) and np.array_equal(got.nodes, want.nodes)
    mem = tg.NodeMemory(store, "unaligned_m", 3, memory_dim=2, mail_dim=2)
    nodes = _unaligned(np.array([2, 0], np.int64))
    mem.write(nodes, _unaligned(np.array([1, 2, 3, 4], np.float32)).reshape(2, 2),
              _unaligned(np.array([1.0, 2.0])))
    mem.commit()
    assert mem.read(nodes).memory.tolist() == [[1.0, 2.0], [3.0, 4.0]]


# ------------------------------------------------------------------ dynamic graphs
def test_apply_delta_never_writes_past_the_result():
    """A removed key missing from the snapshot and larger than every kept key: the
    merge keeps all of them, one more than planned; it used to write that one past
    out_keys and notice the mismatch after the loop."""
    keys = np.array([1, 5, 9], dtype=np.int64)
    for rm, add in (([10], []), ([9, 10], []), ([0], [3]), ([4], []), ([], [5]),
                    ([1, 5, 9, 11], [])):
        rm, add = np.array(rm, np.int64), np.array(add, np.int64)
        size = max(0, 3 - rm.shape[0] + add.shape[0])
        outs = [guarded(size) for _ in range(3)] + [guarded(size, np.float32)]
        w = np.ones(3, np.float32)
        n_out = ffi.new("int64_t *")
        rc = lib.dds_apply_delta(p64(keys), ffi.from_buffer("float[]", w), 3,
                                 p64(rm) if rm.size else ffi.NULL, rm.shape[0],
                                 p64(add) if add.size else ffi.NULL, ffi.NULL,
                                 add.shape[0], ffi.NULL, ffi.NULL, 0, 12, size,
                                 p64(outs[0]), ffi.from_buffer("float[]", outs[3]),
                                 p64(outs[1]), p64(outs[2]),
                                 n_out)
        assert rc == lib.DDS_EINVAL and message().startswith("apply_delta: "), message()
        assert n_out[0] == 0
        assert all(intact(o, size) for o in outs), (rm, add)
        with pytest.raises(DDStoreStateError, match="corrupt") as err:
            _core.apply_delta(keys, None, rm, add, None, None, None, 12)
        assert "apply_delta:" in str(err.value)
    with pytest.raises(DDStoreStateError, match="removed key 10 .position 0. is not in"):
        _core.apply_delta(keys, None, np.array([10], np.int64), None, None, None, None, 12)
    with pytest.raises(DDStoreValueError, match="add_w must hold 1 weights"):
        _core.apply_delta(keys, np.ones(3, np.float32), None, np.array([2], np.int64),
                          np.ones(0, np.float32), None, None, 12)
    # every error return sets its message (bits and sizes included)
    n_out = ffi.new("int64_t *")
    for args, text in (((0, 3), "bits=0 out of range"),
                       ((63, 3), "bits=63 out of range"),
                       ((12, -1), "cap=-1 must be >= 0"),
                       ((12, 2), "capacity 2 cannot hold the 3 keys")):
        out = guarded(3)
        rc = lib.dds_apply_delta(p64(keys), ffi.NULL, 3, ffi.NULL, 0, ffi.NULL, ffi.NULL,
                                 0, ffi.NULL, ffi.NULL, 0, args[0], args[1], p64(out),
                                 ffi.NULL, ffi.NULL, ffi.NULL, n_out)
        assert rc == lib.DDS_EINVAL and text in message(), (args, message())
        assert intact(out, 0)


def test_relabel_sizes_checked():
    """The relabelling map (csrc/relabel.c): outputs below the keys asked about, a key
    outside the node range or the subgraphs, subgraphs missing for a disjoint map:
    refused before anything is written or mapped; dense and hashed alike."""
    n_new = ffi.new("int64_t *")
    keys = np.arange(4, dtype=np.int64)
    for dense_max in (1 << 24, 0):
        m = _core.RelabelMap()
        m.begin(10, 0, 0, dense_max)
        assert m.dense == (dense_max > 0)
        outs = [guarded(3) for _ in range(3)]
        rc = lib.dds_relabel_add(m._m, p64(keys), ffi.NULL, 4, 3, *(p64(o) for o in outs),
                                 n_new)
        assert rc == lib.DDS_EINVAL and "at most the output capacity 3" in message()
        assert n_new[0] == 0 and all(intact(o, 0) for o in outs) and m.count == 0
        for bad, text in ((np.array([1, 10, 2], np.int64), "node 10 (position 1) outside "
                                                             "[0, 10)"),
                          (np.array([1, -3], np.int64), "node -3 (position 1) outside")):
            outs = [guarded(bad.shape[0]) for _ in range(3)]
            rc = lib.dds_relabel_add(m._m, p64(bad), ffi.NULL, bad.shape[0], bad.shape[0],
                                     *(p64(o) for o in outs), n_new)
            assert rc == lib.DDS_EINVAL and text in message(), message()
            assert all(intact(o, 0) for o in outs) and m.count == 0
        m.begin(10, 2, 0, dense_max)  # disjoint: subgraphs [0, 2)
        outs = [guarded(2) for _ in range(3)]
        rc = lib.dds_relabel_add(m._m, p64(keys[:2]), p64(np.array([0, 2], np.int64)), 2,
                                 2, *(p64(o) for o in outs), n_new)
        assert rc == lib.DDS_EINVAL and "subgraph 2 (position 1) outside [0, 2)" in \
            message() and m.count == 0 and all(intact(o, 0) for o in outs)
        rc = lib.dds_relabel_add(m._m, p64(keys[:2]), ffi.NULL, 2, 2,
                                 *(p64(o) for o in outs), n_new)
        assert rc == lib.DDS_EINVAL and "subgraphs missing" in message() and m.count == 0
        rc = lib.dds_relabel_begin(m._m, -1, 0, 0, dense_max)
        assert rc == lib.DDS_EINVAL and "num_nodes=-1" in message()


def test_neighbor_hop_capacity(core):
    """dds_neighbor_hop (one hop sampled and relabelled): outputs smaller than the hop
    are refused, nothing written to any of its five outputs, nothing added to the map;
    with room, the outputs stop at the count."""
    csc = _csc(core)
    core.sync()
    nodes = np.array([0, 1, 2, 0], dtype=np.int64)
    pos = np.array([5, 6, 7, 8], dtype=np.int64)
    sub = np.array([0, 1, 2, 3], dtype=np.int64)
    count, n_new = ffi.new("int64_t *"), ffi.new("int64_t *")
    for disjoint in (False, True):
        m = _core.RelabelMap()
        m.begin(3, 4 if disjoint else 0)
        for k, cap in ((-1, 7), (2, 5)):  # 8 entries; 6
            outs = [guarded(cap) for _ in range(5)]
            rc = lib.dds_neighbor_hop(core._handle[0], csc._c, -1, p64(nodes), p64(pos),
                                      p64(sub) if disjoint else ffi.NULL, ffi.NULL, 4, k, 0,
                                      7, m._m, cap, *(p64(o) for o in outs[:4]),
                                      p64(outs[4]) if disjoint else ffi.NULL, count, n_new)
            assert rc == lib.DDS_EINVAL and "output capacity %d" % cap in message()
            assert count[0] == 0 and n_new[0] == 0 and m.count == 0
            assert all(intact(o, 0) for o in outs)
        outs = [guarded(8) for _ in range(5)]
        rc = lib.dds_neighbor_hop(core._handle[0], csc._c, -1, p64(nodes), p64(pos),
                                  p64(sub) if disjoint else ffi.NULL, ffi.NULL, 4, -1, 0, 7,
                                  m._m, 8, *(p64(o) for o in outs[:4]),
                                  p64(outs[4]) if disjoint else ffi.NULL, count, n_new)
        assert rc == lib.DDS_OK and count[0] == 8
        # lists: node 0 -> 1, 2, 0; node 1 -> 0, 2; node 2 none
        assert outs[0][:8].tolist() == [5, 5, 5, 6, 6, 8, 8, 8]
        want_new = [1, 2, 0, 0, 2, 1, 2, 0] if disjoint else [1, 2, 0]
        assert n_new[0] == len(want_new) == m.count
        assert outs[3][:n_new[0]].tolist() == want_new
        assert outs[1][:8].tolist() == (list(range(8)) if disjoint else
                                        [0, 1, 2, 2, 1, 0, 1, 2])
        if disjoint:
            assert outs[4][:8].tolist() == [0, 0, 0, 1, 1, 3, 3, 3]
        assert all(intact(o, 8) for o in outs)
        assert all(intact(o, n_new[0]) for o in outs[3:4])


# ------------------------------------------------------------------ PyG fanouts
def _graph(store):
    from torch_geometric.data import Data
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(3)
    n, m = 30, 300
    ei = torch.stack([torch.randint(0, n, (m,), generator=g),
                      torch.randint(0, n, (m,), generator=g)])
    fs, gs = dpyg.from_pyg(store, Data(x=torch.zeros(n, 1), edge_index=ei))
    return ei, gs


@pytest.mark.parametrize("k", [2 ** 31 - 1, 10 ** 12, 2 ** 62, 2 ** 63 - 1, 2 ** 64])
def test_fanout_beyond_every_degree_takes_the_whole_neighbourhood(store, k):
    """replace=False with k above every degree: two hops take every edge into the seeds
    and into their sources (brute force over the edge index), as k=-1 does."""
    from torch_geometric.sampler import NodeSamplerInput
    from ddstore import pyg as dpyg
    ei, gs = _graph(store)
    seeds = torch.tensor([0, 7, 29])
    out = dpyg.NeighborSampler(gs, [k, k], seed=1).sample_from_nodes(
        NodeSamplerInput(None, seeds))
    src, dst = ei.tolist()
    hop1 = sorted(e for e in range(len(src)) if dst[e] in set(seeds.tolist()))
    new1 = {src[e] for e in hop1} - set(seeds.tolist())
    hop2 = sorted(e for e in range(len(src)) if dst[e] in new1)
    e1 = out.num_sampled_edges[0]
    assert sorted(out.edge[:e1].tolist()) == hop1 and e1 == len(hop1)
    assert sorted(out.edge[e1:].tolist()) == hop2
    assert torch.equal(out.node[out.row], ei[0][out.edge])
    assert torch.equal(out.node[out.col], ei[1][out.edge])
    ref = dpyg.NeighborSampler(gs, [-1, -1], seed=1).sample_from_nodes(
        NodeSamplerInput(None, seeds))
    for f in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(out, f), getattr(ref, f)), f


@pytest.mark.parametrize("k", [2 ** 20 + 1, 2 ** 31 - 1, 10 ** 12, 2 ** 62, 2 ** 64])
def test_fanout_with_replacement_is_bounded(store, k):
    from ddstore import pyg as dpyg
    from ddstore.pyg.sampler import MAX_FANOUT_WITH_REPLACEMENT
    _, gs = _graph(store)
    with pytest.raises(DDStoreValueError, match=f"k must be <= "
                                                f"{MAX_FANOUT_WITH_REPLACEMENT}"):
        dpyg.NeighborSampler(gs, [2, k], replace=True)
    dpyg.NeighborSampler(gs, [2, MAX_FANOUT_WITH_REPLACEMENT], replace=True)


def test_fanout_with_replacement_within_the_bound(store):
    from torch_geometric.sampler import NodeSamplerInput
    from ddstore import pyg as dpyg
    ei, gs = _graph(store)
    seeds = torch.tensor([0, 7, 29])
    k = 5000
    out = dpyg.NeighborSampler(gs, [k], replace=True, seed=2).sample_from_nodes(
        NodeSamplerInput(None, seeds))
    deg = torch.bincount(ei[1], minlength=30)[seeds]
    assert out.num_sampled_edges == [k * int((deg > 0).sum())]
    assert torch.equal(out.node[out.row], ei[0][out.edge])
    assert torch.equal(out.node[out.col], ei[1][out.edge])


def test_prefault_changes_no_byte_and_refuses_unknown_flags(core):
    """dds_prefault (madvise and the one-read-per-page fallback) maps the chunk and
    leaves every byte; unknown flags and variables are refused, nothing touched."""
    data = np.random.default_rng(3).integers(0, 256, (3 * 4096 + 17, 3), dtype=np.uint8)
    vid = _var(core, "raw", data)
    for flags in (lib.DDS_PREFAULT_OWN, lib.DDS_PREFAULT_OWN | lib.DDS_PREFAULT_PEERS,
                  lib.DDS_PREFAULT_OWN | lib.DDS_PREFAULT_TOUCH, lib.DDS_PREFAULT_PEERS, 0):
        out = ffi.new("int64_t *", -1)
        assert lib.dds_prefault(core._handle[0], vid, flags, out) == lib.DDS_OK
        assert out[0] == (data.nbytes if flags & lib.DDS_PREFAULT_OWN else 0)
        assert lib.dds_prefault(core._handle[0], vid, flags, ffi.NULL) == lib.DDS_OK
    assert core.local_view(vid, np.uint8, (3,)).tobytes() == data.tobytes()
    out = ffi.new("int64_t *", -1)
    assert lib.dds_prefault(core._handle[0], vid, 8, out) == lib.DDS_EINVAL
    assert "prefault flags 8" in message() and out[0] == -1
    assert lib.dds_prefault(core._handle[0], vid + 1, 1, out) == lib.DDS_ESTATE
    assert out[0] == -1
    empty = core.add("empty", 0, 8)
    assert core.prefault(empty) == 0 and core.prefault(empty, touch=True) == 0


def test_sync_windows_checks_every_id_first(core, store):
    """dds_sync_windows: a negative count, a NULL list and an unknown id are refused
    before any window is synced; valid ids (and none) succeed; the bytes stay as they
    are.  store.sync_windows names an unknown variable."""
    data = np.arange(12, dtype=np.uint8).reshape(4, 3)
    vid = _var(core, "raw", data)
    h = core._handle[0]
    ids = ffi.new("int[]", [vid, vid + 1])
    assert lib.dds_sync_windows(h, ids, 1) == lib.DDS_OK
    assert lib.dds_sync_windows(h, ffi.NULL, 0) == lib.DDS_OK
    assert lib.dds_sync_windows(h, ids, 2) == lib.DDS_ESTATE
    assert f"unknown variable id {vid + 1}" in message()
    gone = _var(core, "gone/rows", data)  # a reader that outlived its variable
    core.remove(gone)
    assert lib.dds_sync_windows(h, ffi.new("int[]", [gone]), 1) == lib.DDS_ESTATE
    assert f"variable 'gone/rows' (id {gone}) was removed" in message()
    assert lib.dds_remove(h, gone) == lib.DDS_ESTATE and "'gone/rows'" in message()
    assert lib.dds_sync_windows(h, ids, -1) == lib.DDS_EINVAL and "n = -1" in message()
    assert lib.dds_sync_windows(h, ffi.NULL, 1) == lib.DDS_EINVAL
    core.sync_windows([vid])
    assert core.local_view(vid, np.uint8, (3,)).tobytes() == data.tobytes()
    store.init("x", 3, (2,), np.float64)
    store.sync_windows("x")
    store.sync_windows()
    with pytest.raises(DDStoreValueError, match="unknown variable 'y'"):
        store.sync_windows("y")


def test_sample_out_of_memory_message_does_not_depend_on_the_machine(core, monkeypatch):
    """Issue 44 item 7: on a machine that overcommits (or has the memory), the outputs of
    a huge sample are allocated and the core's own allocation fails instead; the error
    must be the same DDStoreMemoryError either way.  The outputs here are address space
    only (MAP_NORESERVE, never touched), as a large-memory machine would give them."""
    import mmap
    maps = []

    def reserved_only(cap, n=3):
        out = []
        for _ in range(n):
            m = mmap.mmap(-1, max(cap, 1) * 8, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                          | getattr(mmap, "MAP_NORESERVE", 0x4000))  # Linux
            maps.append(m)
            out.append(np.frombuffer(m, dtype=np.int64, count=cap))
        return out

    csc = _csc(core)
    core.sync()
    nodes = np.array([0, 1, 2, 0], dtype=np.int64)
    monkeypatch.setattr(_core.CSC, "_outputs", staticmethod(reserved_only))
    try:
        with pytest.raises(DDStoreMemoryError, match="do not fit in memory"):
            csc.sample(nodes, None, 2 ** 40, _core.NEIGHBOR_REPLACE, 7, 3 * 2 ** 40)
    except (OSError, OverflowError, ValueError) as exc:  # no 72 TiB of address space here
        pytest.skip(f"the address space for the outputs could not be reserved: {exc}")


def test_copy_threads_arguments(core):
    """dds_set_copy_threads: threads in [0, 64] (0 chooses 1 to 8 from the CPUs this
    process may use over the node's ranks), min_bytes >= 1; refused otherwise, the
    setting in effect unchanged."""
    assert core.copy_threads == 1  # until set
    mine, online = os.sched_getaffinity(0), os.cpu_count()
    chosen = core.set_copy_threads(0, 1 << 22)
    if len(mine) == online:  # unbound, the only rank of its store on the node
        assert chosen == max(1, min(8, online)), chosen
    # bound (as a batch system binds a task): the CPUs of its binding
    os.sched_setaffinity(0, {min(mine)})
    try:
        assert core.set_copy_threads(0, 1 << 22) == 1
    finally:
        os.sched_setaffinity(0, mine)
    assert core.set_copy_threads(5, 1) == 5
    for threads, min_bytes, text in [(-1, 1, "copy threads=-1: allowed 0 (choose) to 64"),
                                     (65, 1, "copy threads=65: allowed 0 (choose) to 64"),
                                     (2, 0, "copy min_bytes=0 must be >= 1")]:
        with pytest.raises(DDStoreValueError, match=re.escape(text)):
            core.set_copy_threads(threads, min_bytes)
        assert core.copy_threads == 5
    # a read whose local pieces are shared among 5 threads: the same bytes
    rows = np.random.default_rng(3).integers(0, 256, (64, 1 << 16), dtype=np.uint8)
    vid = _var(core, "rows", rows)
    starts = np.array([60, 0, 17, 3, 40], dtype=np.int64)
    counts = np.array([4, 17, 1, 30, 0], dtype=np.int64)
    out = np.empty((counts.sum(), rows.shape[1]), dtype=np.uint8)
    core.read(vid, starts, counts, out)
    assert np.array_equal(out, np.concatenate([rows[a:a + c] for a, c in zip(starts, counts)]))


def _fake_copy(calls, refuse_at=None):
    """A copy function with cudaMemcpyAsync's signature, made with ctypes (its address
    for dds_copy_pieces): copies with memmove and records (kind, stream); refuses (code
    7) the piece numbered ``refuse_at``.  Returns ``(callback, address)``."""
    import ctypes
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)

    def copy(dst, src, n, kind, stream):
        if refuse_at is not None and len(calls) == refuse_at:
            return 7
        calls.append((kind, stream or 0, n))
        ctypes.memmove(dst, src, n)
        return 0
    cb = proto(copy)
    return cb, ctypes.cast(cb, ctypes.c_void_p).value


def test_copy_pieces_bounds_and_refusals():
    """dds_copy_pieces: every piece is checked against the destination's size (and for
    null addresses and negative sizes) before any is issued; the pieces land where they
    are asked to, with kind and stream passed through; a refused copy stops the loop and
    is named, the pieces before it issued."""
    src = np.arange(32, dtype=np.int64)
    dst = np.full(16, -1, dtype=np.int64)
    calls = []
    cb, fn = _fake_copy(calls)
    base, out = src.ctypes.data, dst.ctypes.data
    n = _core.copy_pieces(fn, out, dst.nbytes, [64, 0, 120], [base, base + 80, base],
                          [56, 64, 0], 1, 99)
    assert n == 3 and calls == [(1, 99, 56), (1, 99, 64)]
    assert dst.tolist() == list(range(10, 18)) + list(range(7)) + [-1]
    for off, nb, what in [(72, 64, "piece 1 writes bytes [72, 72 + 64) of a destination "
                           "of 128"), (-8, 8, "piece 1 writes bytes [-8"),
                          (128, 1, "piece 1 writes bytes [128, 128 + 1)")]:
        calls.clear()
        with pytest.raises(DDStoreIndexError, match=re.escape(what)):
            _core.copy_pieces(fn, out, dst.nbytes, [0, off], [base, base], [8, nb], 1, 0)
        assert calls == []  # nothing issued
    for args, what in [((fn, out, 128, [0], [0], [8]), "piece 0 has 8 bytes from "
                        "address 0"),
                       ((fn, out, 128, [0], [base], [-1]), "piece 0 has -1 bytes"),
                       ((0, out, 128, [0], [base], [8]), "null copy function"),
                       ((fn, 0, 128, [0], [base], [8]), "null destination"),
                       ((fn, out, -1, [0], [base], [8]), "destination of -1 bytes"),
                       ((fn, out, 128, [0, 8], [base], [8]), "2 offsets, 1 sources"),
                       # the arrays' kind, shape and range, the scalars' type and range
                       ((fn, out, 128, [0, 8], np.zeros((2, 0), np.uint64), [8, 8]),
                        "src must be a 1-D integer array, got uint64 of shape (2, 0)"),
                       ((fn, out, 128, [0.5], [base], [8]), "dst_off must be a 1-D "
                        "integer array, got float64"),
                       ((fn, out, 128, 0, [base], [8]), "dst_off must be a 1-D"),
                       ((fn, out, 128, [0], [-8], [8]), "src holds a negative address"),
                       ((fn, out, 128, [0], [base], np.array([1 << 63], np.uint64)),
                        "nbytes holds a value >= 2**63"),
                       ((None, out, 128, [0], [base], [8]), "fn=None is not an integer"),
                       ((fn, float(out), 128, [0], [base], [8]), "is not an integer"),
                       ((fn, -1, 128, [0], [base], [8]), "dst=-1; allowed: [0, 2**64)"),
                       ((fn, out, 1 << 64, [0], [base], [8]), "dst_bytes must be an int64"),
                       ((fn, out, 128, [0], [base], ["a"]), "nbytes must be a 1-D")]:
        with pytest.raises(DDStoreValueError, match=re.escape(what)):
            _core.copy_pieces(*args, 1, 0)
    for kind, stream in [(1 << 40, 0), (1, -1)]:
        with pytest.raises(DDStoreValueError, match="kind=|stream=-1"):
            _core.copy_pieces(fn, out, 128, [0], [base], [8], kind, stream)
    assert _core.copy_pieces(0, 0, 0, [], [], [], 1, 0) == 0  # no piece: nothing needed
    calls.clear()
    cb2, refusing = _fake_copy(calls, refuse_at=2)
    with pytest.raises(DDStoreValueError, match=re.escape(
            "refused piece 2 of 4 (8 bytes): code 7")):
        _core.copy_pieces(refusing, out, dst.nbytes, [0, 8, 16, 24], [base] * 4, [8] * 4,
                          1, 0)
    assert len(calls) == 2
