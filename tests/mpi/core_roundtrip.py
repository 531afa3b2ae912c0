"""Round-trips through the core store: every byte read must equal what was written.

Usage: timeout 300 mpiexec -n N python core_roundtrip.py TRANSPORT [copy-threads=K]
(copy-threads=K: every read copies its local pieces in K threads, DDSTORE_COPY_THREADS=K
with DDSTORE_COPY_MIN_BYTES=1; the 1 MB rows' reads give each thread a share)
Runs every width that divides N (1, 2, N), every dtype, row shapes (), (7,), (3, 5), (40,),
1 MB rows, a rank holding 0 rows, get/get_batch/get_range/read_ranges, init+update,
and records with empty samples (added whole, or init_records + update_records);
store.prefault (own and node-local chunks, both core paths, background) changes no byte.
Leaves one store live to check the free at exit.
"""
import os
import sys

import numpy as np
from mpi4py import MPI

from _harness import bytes_equal, check, run_main, same_array

import ddstore

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
transport = sys.argv[1]
COPY_THREADS = 1
for arg in sys.argv[2:]:
    key, _, value = arg.partition("=")
    assert key == "copy-threads", arg
    COPY_THREADS = int(value)
DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
          np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64]
SHAPES = [(), (7,), (3, 5), (40,)]  # (40,): rows on both sides of 128 bytes


def same_bytes(got, want, what):
    """One check: same dtype, shape and bytes."""
    got, want = np.asarray(got), np.asarray(want)
    return check(same_array(got, want),
                 f"{what}: got {got.dtype} {got.shape}, want {want.dtype} {want.shape}"
                 + ("" if got.shape != want.shape or got.dtype != want.dtype
                    else ": bytes differ"))


def global_data(seed, n, shape, dtype):
    """The same random array on every rank; random bytes, so every bit pattern occurs."""
    rng = np.random.default_rng(seed)
    nbytes = n * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    raw = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    if dtype == np.bool_:
        raw &= 1
    return raw.view(dtype).reshape((n,) + shape)


def uneven_counts(total, parts):
    """Chunk sizes that differ between members; member 1 (if any) holds 0 rows."""
    weights = np.arange(1, parts + 1, dtype=float)
    if parts > 1:
        weights[1] = 0.0
    counts = np.floor(total * weights / weights.sum()).astype(np.int64)
    counts[-1] += total - counts.sum()
    return counts


def check_variable(store, name, data, rng):
    n = data.shape[0]
    # every owner in one batch, duplicates, random order
    idx = np.concatenate([np.arange(n), rng.integers(0, n, size=2 * n)])
    rng.shuffle(idx)
    same_bytes(store.get_batch(name, idx), data[idx], f"{name} get_batch")
    out = np.empty((len(idx),) + data.shape[1:], dtype=data.dtype)
    assert store.get_batch(name, idx, out=out) is out
    same_bytes(out, data[idx], f"{name} get_batch(out=)")
    # runs of consecutive rows across the owners' boundaries (merged into one copy),
    # backwards, and a row repeated at once
    runs = np.concatenate([np.arange(n), np.arange(n)[::-1], [n - 1, 0, 1, 1, 2]])
    same_bytes(store.get_batch(name, runs), data[runs], f"{name} get_batch(runs)")
    for i in (0, n - 1, int(rng.integers(0, n))):
        same_bytes(np.asarray(store.get(name, i)), data[i], f"{name} get({i})")
    # ranges spanning owners, including the whole variable and empty ranges
    for start, count in ((0, n), (1, n - 2), (n // 3, n // 2), (n - 1, 1), (n // 2, 0)):
        same_bytes(store.get_range(name, start, count), data[start:start + count],
                   f"{name} get_range({start}, {count})")
    starts = rng.integers(0, n - 4, size=20)
    counts = rng.integers(0, 5, size=20)
    want = np.concatenate([data[s:s + c] for s, c in zip(starts, counts)])
    same_bytes(store.read_ranges(name, starts, counts), want, f"{name} read_ranges")
    same_bytes(store.read_ranges(name, starts, counts, per_row_lock=True), want,
               f"{name} read_ranges(per_row_lock)")
    assert store.nrows(name) == n


def check_prefault(store, datas, rng):
    """store.prefault maps this rank's own chunk and those of the node-local members of
    its group (none under transport rma), in both ways of the core (madvise, one read
    per page), in the calling thread or in the background, and changes no byte."""
    from mpi4py import MPI
    names = list(datas)
    node = store.group_comm.Split_type(MPI.COMM_TYPE_SHARED, store.group_rank)
    local = set(node.allgather(store.group_rank)) if transport != "rma" else \
        {store.group_rank}
    node.Free()
    chunks = store.group_comm.allgather([store.nbytes(n) for n in names])
    want = {n: sum(chunks[g][i] for g in local) for i, n in enumerate(names)}
    own = {n: store.local_view(n).copy() for n in names}
    core, vids = store.core_ids(*names)
    for n, vid in zip(names, vids):
        check(core.prefault(vid) == want[n], f"prefault {n}: {core.prefault(vid)} bytes, "
                                             f"want {want[n]} (members {sorted(local)})")
        check(core.prefault(vid, touch=True) == want[n], f"prefault touch {n}")
        check(core.prefault(vid, peers=False) == chunks[store.group_rank][names.index(n)],
              f"prefault own {n}")
    check(store.prefault(*names) == sum(want.values()), "store.prefault total")
    t = store.prefault(*names, background=True)
    t.join()
    check(t.nbytes == sum(want.values()) and t.error is None, f"background: {t.nbytes}")
    for n in names:
        check(bytes_equal(store.local_view(n), own[n]), f"prefault changed {n}'s chunk")
        same_bytes(store.get_range(n, 0, datas[n].shape[0]), datas[n], f"{n} after prefault")
        check_variable(store, n, datas[n], rng)


def run_width(width):
    rng = np.random.default_rng(1234 + rank)
    with ddstore.DDStore(comm, width=width, transport=transport) as store:
        assert store.width == width and store.group_size == width
        assert store.replicas == size // width
        assert store.group_rank == rank % width
        if COPY_THREADS > 1:
            assert store.copy_threads == COPY_THREADS, store.copy_threads
        n = 41
        counts = uneven_counts(n, store.group_size)
        lo = int(counts[:store.group_rank].sum())
        hi = lo + int(counts[store.group_rank])
        k = 0
        datas = {}
        for dtype in DTYPES:
            for shape in SHAPES:
                data = global_data(k, n, shape, dtype)
                name = f"v{k}_{np.dtype(dtype).name}_{len(shape)}"
                store.add(name, data[lo:hi])
                assert store.local_rows(name) == (lo, hi)
                check_variable(store, name, data, rng)
                datas[name] = data
                k += 1
        # 1 MB rows
        big = global_data(99, 2 * store.group_size + 5, (1 << 20,), np.uint8)
        blo, bhi = ddstore.partition(big.shape[0], store.group_size, store.group_rank)
        store.add("big", big[blo:bhi])
        check_variable(store, "big", big, rng)
        # init + update in pieces, then sync
        data = global_data(7, 57, (4,), np.float32)
        ilo, ihi = ddstore.partition(57, store.group_size, store.group_rank)
        store.init("filled", ihi - ilo, (4,), np.float32)
        for a in range(ilo, ihi, 5):
            b = min(a + 5, ihi)
            store.update("filled", data[a:b], offset=a - ilo)
        store.sync()
        check_variable(store, "filled", data, rng)
        datas["filled"], datas["big"] = data, big
        check_prefault(store, datas, rng)
        # records: variable first dimension, empty samples included
        nrec = 23
        recs = []
        for i in range(nrec):
            r = np.random.default_rng(500 + i)
            m = 0 if i % 5 == 0 else int(r.integers(1, 9))
            recs.append({"x": r.standard_normal((m, 3)).astype(np.float32),
                         "edge_index": r.integers(0, 100, (m * 2, 2)),
                         "y": np.array([i], dtype=np.float64),
                         "empty": np.zeros((0,), dtype=np.int16)})
        rlo, rhi = ddstore.partition(nrec, store.group_size, store.group_rank)
        store.add_records("recs", recs[rlo:rhi])
        assert store.nrows("recs") == nrec
        assert store.local_rows("recs") == (rlo, rhi)
        idx = np.concatenate([np.arange(nrec), rng.integers(0, nrec, 10)])
        rng.shuffle(idx)
        got = store.get_records("recs", idx)
        assert len(got) == len(idx)
        for g, i in zip(got, idx):
            assert sorted(g) == sorted(recs[i])
            for key in recs[i]:
                same_bytes(g[key], recs[i][key], f"record {i} key {key}")
        # the per-sample paths: get_record(i) and get_records([i]) of every record
        for i in range(nrec):
            for g in (store.get_record("recs", i), store.get_records("recs", [i])[0],
                      store.get_record("recs", np.int32(i))):
                assert sorted(g) == sorted(recs[i])
                for key in recs[i]:
                    same_bytes(g[key], recs[i][key], f"single record {i} key {key}")
        # the same records created empty and filled block by block, out of order
        schema = {k: (v.dtype, v.shape[1:]) for k, v in recs[0].items()}
        mine = recs[rlo:rhi]
        store.init_records("blocks", schema,
                           {k: [r[k].shape[0] for r in mine] for k in schema})
        starts = list(range(0, len(mine), 3))[::-1]
        for a in starts:
            b = min(a + 3, len(mine))
            store.update_records("blocks", a, b, {
                k: np.concatenate([r[k] for r in mine[a:b]]) for k in schema})
        store.update_records("blocks", len(mine), len(mine),
                             {k: v[:0] for k, v in recs[0].items()})
        store.sync()
        packed, sizes = store.get_records_packed("blocks", idx)
        for k in schema:
            same_bytes(packed[k], np.concatenate([recs[i][k] for i in idx]),
                       f"init_records key {k}")
            assert sizes[k].tolist() == [recs[i][k].shape[0] for i in idx]
        store.prefault(background=True)  # remove waits for it: no page is unmapped under it
        store.remove("blocks")
        assert store.nbytes() > 0
        assert "recs" in store.variables() and "big" in store.variables()
        # remove frees the memory and the name; re-adding serves the new data
        held = store.nbytes()
        store.remove("big")
        store.remove("recs")
        assert "big" not in store.variables() and "recs" not in store.variables()
        big_bytes = (bhi - blo) * big.shape[1]
        rec_bytes = sum(v.nbytes for rec in recs[rlo:rhi] for v in rec.values())
        offsets_bytes = (nrec + 1) * len(recs[0]) * 8
        assert store.nbytes() == held - big_bytes - rec_bytes - offsets_bytes
        other = global_data(8, n, (2,), np.int16)
        store.add("big", other[lo:hi])
        check_variable(store, "big", other, rng)
        check_init_zeroed(store)
        comm.Barrier()


def check_init_zeroed(store):
    """Rows ``init`` / ``init_records`` made and nothing wrote read as zeros, also where
    the memory held a removed variable's bytes (the heap reuses a freed chunk of the same
    size where MPI gives a rank private memory: a group of one)."""
    g = store.group_rank
    for k in range(3):
        store.add("dirty", np.full((3 + g, 2), -1, dtype=np.float32))
        store.remove("dirty")
        store.init("fresh", 3 + g, (2,), np.float32)
        store.init_records("fresh_recs", {"x": (np.int64, (2,))}, {"x": [1, 2 + g]})
        store.sync()
        got = store.get_range("fresh", 0, store.nrows("fresh"))
        check(not got.view(np.uint32).any(), f"init rows not written read {got.ravel()}")
        packed, _ = store.get_records_packed("fresh_recs", range(store.nrows("fresh_recs")))
        check(not packed["x"].any(), f"init_records rows not written read {packed['x']}")
        store.remove("fresh")
        store.remove("fresh_recs")


def main():
    widths = sorted({1, 2, size} & {w for w in range(1, size + 1) if size % w == 0})
    # the copy settings for this program's stores only (a shared job runs other
    # programs in this process after it)
    env = {"DDSTORE_COPY_THREADS": str(COPY_THREADS), "DDSTORE_COPY_MIN_BYTES": "1"} \
        if COPY_THREADS > 1 else {}
    os.environ.update(env)
    try:
        for w in widths:
            run_width(w)
            if rank == 0:
                print(f"transport={transport} ranks={size} width={w} copy threads "
                      f"{COPY_THREADS}: ok", flush=True)
    finally:
        for key in env:
            del os.environ[key]

    # stores left live are freed at interpreter exit without errors, even one that rank 0
    # alone has dropped and garbage-collected (freeing never follows the collector)
    global leftover, dropped  # live until the interpreter exits
    leftover = ddstore.DDStore(comm, transport=transport)
    leftover.add("z", np.arange(rank + 1, dtype=np.int32))
    dropped = ddstore.DDStore(comm, transport=transport)
    dropped.add("z", np.arange(3, dtype=np.int8))
    if rank == 0:
        import gc
        del dropped
        gc.collect()


run_main(main)
