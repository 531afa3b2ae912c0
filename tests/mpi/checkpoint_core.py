"""Checkpoint and restart of the store itself (issue 37, items 1, 2 and 5): ``save`` on
this job's ranks at each width, ``restore`` of the widest save on every rank count from
1 to this job's (sub-communicators) at every width that divides it, and of each other
save at its own width; every byte of every variable,
record and annotation compared with what was written.  Then the refusals: a failure
injected into one rank's writes (a full disk) leaves the previous checkpoint readable
and the same error on every rank; corrupt, truncated, missing and foreign files refused
naming the file; names already in the store refused; replicas that differ refused;
a directory of other files left alone.

    timeout 300 mpiexec -n 3 python tests/mpi/checkpoint_core.py [auto|rma]
"""
import errno
import json
import os
import sys
import zlib

import numpy as np
from mpi4py import MPI

from _harness import Cases, check, expect_error, first_ranks, run_main, shared_tmpdir

import ddstore
from ddstore import DDStore, DDStoreError, DDStoreValueError, partition
from ddstore import checkpoint as ck

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
TRANSPORT = sys.argv[1] if len(sys.argv) > 1 else "auto"
cases = Cases()

# (name, dtype, row shape, global rows): scalars, zero rows, zero-size rows, odd dtypes
SPECS = [("f32", np.float32, (3, 2), 101), ("i64", np.int64, (), 257),
         ("f16", np.float16, (5,), 7), ("u8", np.uint8, (33,), 64),
         ("bool", np.bool_, (2,), 13), ("c64", np.complex64, (), 9),
         ("empty", np.float64, (4,), 0), ("zero-width", np.int32, (0,), 6),
         ("few", np.uint64, (), 1), ("with/slash", np.int16, (2, 2), 17)]


def global_rows(name, dtype, shape, n):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if np.dtype(dtype).kind == "c":
        return (rng.standard_normal((n,) + shape) +
                1j * rng.standard_normal((n,) + shape)).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, (n,) + shape).astype(dtype)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal((n,) + shape).astype(dtype)
    return rng.integers(0, 100, (n,) + shape).astype(dtype)


SAMPLES = [{"x": np.full((i % 4, 3), i, np.float32), "e": np.arange(2 * (i % 3)).
            reshape(-1, 2).astype(np.int64)} for i in range(23)]
ANN_ARRAYS = {"ptr": np.array([0, 3, 3, 50, 101], np.int64), "w": np.linspace(0, 1, 7)}


def fill(store):
    """Every variable of SPECS (this member's share), records and an annotation."""
    m, w = store.group_rank, store.width
    for name, dt, shape, n in SPECS:
        lo, hi = partition(n, w, m)
        store.add(name, global_rows(name, dt, shape, n)[lo:hi])
    lo, hi = partition(len(SAMPLES), w, m)
    store.add_records("recs", SAMPLES[lo:hi])
    store.annotate("thing", "Test", {"n": 5, "names": ["a", "b"]}, ANN_ARRAYS,
                   variables=["f32", "recs"], cuts={"f32": "ptr"})
    store.annotate("items", "Test", variables=["u8"], cuts={"u8": 8})  # 8 rows per item


def verify(store, tag, restored=True):
    """Every byte of every variable, record and the annotation."""
    want = sorted([s[0] for s in SPECS] + ["recs"])
    check(store.variables() == want, f"{tag}: variables {store.variables()}")
    for name, dt, shape, n in SPECS:
        ok = store.nrows(name) == n and store.dtype(name) == np.dtype(dt) and \
            store.row_shape(name) == shape
        check(ok, f"{tag}: {name} metadata")
        if ok and n:
            got = store.get_batch(name, np.arange(n))
            check(got.tobytes() == global_rows(name, dt, shape, n).tobytes(),
                  f"{tag}: {name} bytes differ")
    check(store.nrows("recs") == len(SAMPLES), f"{tag}: records count")
    bad = [i for i, s in enumerate(SAMPLES) if any(
        store.get_record("recs", i)[k].tobytes() != s[k].tobytes() for k in s)]
    check(not bad, f"{tag}: records {bad} differ")
    ann = store.annotation("thing", "Test")
    check(ann.meta == {"n": 5, "names": ["a", "b"]} and ann.variables == ("f32", "recs")
          and ann.cuts == {"f32": "ptr"} and all(
              ann.arrays[k].tobytes() == v.tobytes() and ann.arrays[k].dtype == v.dtype
              for k, v in ANN_ARRAYS.items()), f"{tag}: annotation {ann}")
    w = store.width
    want = [partition(8, w, g)[0] * 8 for g in range(w)] + [64]
    check(not restored or store.chunk_offsets("u8").tolist() == want,
          f"{tag}: u8 (items of 8 rows) split at {store.chunk_offsets('u8').tolist()}, "
          f"not {want}")
    check(store.annotation("items").cuts == {"u8": 8}, f"{tag}: int cuts kept")
    # a variable with cuts: every member chunk starts at an allowed cut
    starts = store.chunk_offsets("f32")
    check(not restored or set(starts.tolist()) <= set(ANN_ARRAYS["ptr"].tolist()),
          f"{tag}: f32 chunks start at {starts.tolist()}, not at its cuts")


@cases("save at each width, restore at every rank count and width")
def _(t):
    with shared_tmpdir() as tmp:
        for w in [w for w in range(1, size + 1) if size % w == 0]:
            path = os.path.join(tmp, f"w{w}")
            with DDStore(comm, width=w, transport=TRANSPORT) as s:
                fill(s)
                verify(s, f"saved w{w}", restored=False)
                m = s.save(path, block_bytes=512)  # many blocks: partial reads too
                check(m["saved_by"] == {"size": size, "width": w, "replicas": size // w},
                      f"w{w}: saved_by {m['saved_by']}")
                verify(s, f"w{w} after save", restored=False)  # the store is unchanged
            files = sorted(os.listdir(os.path.join(path, m["generation"])))
            check(files == [".ddstore-generation"] +  # the marker, then one per rank
                  [f"rank-{r:05d}.bin" for r in range(size)],
                  f"w{w}: one file per rank, got {files}")
            # the save of the widest groups is restored at every rank count and width;
            # the others at this rank count and their own width (the layouts a save
            # writes differ by width; a restore's reading does not depend on it)
            for k in range(1, size + 1) if w == size else [size]:
                sub = first_ranks(k)
                if sub is not None:
                    for w2 in [w2 for w2 in range(1, k + 1) if k % w2 == 0 and
                               (w == size or w2 == w)]:
                        with DDStore.restore(path, sub, width=w2, transport=TRANSPORT) as r:
                            verify(r, f"saved {size} ranks w{w}, restored {k} ranks w{w2}")
                    sub.Free()
                comm.Barrier()


@cases("a save replaces the previous one; the store is unchanged")
def _(t):
    with shared_tmpdir() as tmp, DDStore(comm, transport=TRANSPORT) as s:
        path = os.path.join(tmp, "ck")
        s.add("a", np.full((3, 2), rank, np.int32))
        m1 = s.save(path)
        s.update("a", np.full((3, 2), 10 + rank, np.int32))
        s.sync()
        m2 = s.save(path)
        gens = sorted(e for e in os.listdir(path) if e.startswith("g-"))
        check(gens == [m2["generation"]] and m1["generation"] != m2["generation"],
              f"old generation left: {gens}")
        with DDStore.restore(path, comm, transport=TRANSPORT) as r:
            want = np.concatenate([np.full((3, 2), 10 + q, np.int32) for q in range(size)])
            check(r.get_batch("a", np.arange(3 * size)).tobytes() == want.tobytes(),
                  "restored the second save")
        check(ck.read_manifest(path)["generation"] == m2["generation"], "manifest")


@cases("a full disk on one rank: agreed, previous checkpoint intact")
def _(t):
    with shared_tmpdir() as tmp, DDStore(comm, transport=TRANSPORT) as s:
        path = os.path.join(tmp, "ck")
        s.add("a", np.arange(40, dtype=np.int64).reshape(-1, 2)[
            slice(*partition(20, size, rank))])
        s.save(path)
        s.update("a", np.zeros((s.local_rows("a")[1] - s.local_rows("a")[0], 2), np.int64))
        s.sync()
        real = ck._Writer.write

        def full(self, data):
            raise OSError(errno.ENOSPC, "No space left on device", self.name)
        if rank == size - 1:
            ck._Writer.write = full
        try:
            expect_error(DDStoreError, [f"rank {size - 1}", "No space left on device"],
                         s.save, path, agree=True, agreed=True, store=s)
        finally:
            ck._Writer.write = real
        gens = sorted(e for e in os.listdir(path) if e.startswith("g-"))
        check(len(gens) == 1, f"the failed save's files stay: {gens}")
        with DDStore.restore(path, comm, transport=TRANSPORT) as r:
            check(r.get_batch("a", np.arange(20)).tobytes() ==
                  np.arange(40, dtype=np.int64).reshape(-1, 2).tobytes(),
                  "the previous checkpoint reads back whole")
        s.save(path)  # and the next save succeeds
        with DDStore.restore(path, comm, transport=TRANSPORT) as r:
            check(not r.get_batch("a", np.arange(20)).any(), "the retried save")


def damaged(path, how):
    """Rank 0 damages the checkpoint at ``path`` (a copy); returns the damaged file."""
    m = ck.read_manifest(path)
    comm.Barrier()  # every rank has read it before rank 0 changes anything
    if how == "manifest":
        name = os.path.join(path, ck.MANIFEST)
        if rank == 0:
            with open(name, "w") as f:
                json.dump({"format": "something-else"}, f)
        return name
    v = next(v for v in m["variables"] if v["name"] == "big")
    f_idx, offset = v["blocks"][-1][0], v["blocks"][-1][1]
    name = os.path.join(path, m["files"][f_idx])
    if rank == 0:
        if how == "flip":
            with open(name, "r+b") as f:
                f.seek(offset + 3)
                b = f.read(1)
                f.seek(offset + 3)
                f.write(bytes([b[0] ^ 0xFF]))
        elif how == "truncate":
            os.truncate(name, offset + 1)
        elif how == "missing":
            os.remove(name)
    return name


@cases("damaged, foreign and missing files refused, naming them; nothing loaded")
def _(t):
    import shutil
    with shared_tmpdir() as tmp, DDStore(comm, transport=TRANSPORT) as s:
        s.add("big", np.arange(4000, dtype=np.float64).reshape(-1, 4)[
            slice(*partition(1000, size, rank))])
        base = os.path.join(tmp, "base")
        s.save(base, block_bytes=1024)
        s.add("keep", np.ones(3))
        for how, words in (("flip", ["fails its checksum", "'big'"]),
                           ("truncate", ["is truncated"]),
                           ("missing", ["cannot be read", "No such file"]),
                           ("manifest", ["is not a ddstore checkpoint manifest"])):
            path = os.path.join(tmp, how)
            if rank == 0:
                shutil.copytree(base, path)
            comm.Barrier()
            name = damaged(path, how)
            comm.Barrier()
            with DDStore(comm, transport=TRANSPORT) as r:
                r.add("other", np.zeros(2))
                msg = expect_error(DDStoreValueError, words, r.load, path, agree=True,
                                   agreed=True, store=r, what=f"load {how}")
                check(msg is None or os.path.basename(name) in msg,
                      f"{how}: the file is not named: {msg}")
                check(not r.annotations(), f"{how}: annotations left")
        expect_error(DDStoreValueError, ["no checkpoint at", "not found"], DDStore.restore,
                     os.path.join(tmp, "nowhere"), comm, agree=True, agreed=True)
        # sized from the manifest (width="auto", memory_budget=): its read is a step of
        # its own, so a checkpoint missing or a path refused on one rank is agreed as
        # what it is (was: a hang, or the constructor's data_nbytes said to differ)
        last = size - 1
        for kw in ({"width": "auto"}, {"memory_budget": 10 ** 9}):
            mine = os.path.join(tmp, "nowhere") if rank == last else base
            expect_error(DDStoreValueError, [f"rank {last}: no checkpoint at", "not found"],
                         DDStore.restore, mine, comm, agree=True, agreed=True, **kw)
            mine = None if rank == last else base
            expect_error(DDStoreValueError, [f"rank {last}: restore: path must be a "
                                             f"directory name (str or os.PathLike), got "
                                             f"None"],
                         DDStore.restore, mine, comm, agree=True, agreed=True, **kw)
        # names already held: refused, store unchanged
        expect_error(DDStoreValueError, ["already holds ['big']"], s.load, base,
                     agree=True, agreed=True, store=s)
        s.remove("big")
        s.load(base)
        check(s.get_batch("big", np.arange(1000)).tobytes() ==
              np.arange(4000, dtype=np.float64).tobytes(), "load into a store that exists")


@cases("refusals of save: other files, bad arguments, replicas that differ")
def _(t):
    with shared_tmpdir() as tmp, DDStore(comm, transport=TRANSPORT) as s:
        s.add("a", np.arange(3))
        other = os.path.join(tmp, "mine")
        if rank == 0:
            os.makedirs(other)
            open(os.path.join(other, "thesis.tex"), "w").close()
        comm.Barrier()
        expect_error(DDStoreValueError, ["holds other files", "thesis.tex"], s.save, other,
                     agree=True, agreed=True, store=s)
        check(os.listdir(other) == ["thesis.tex"], "the user's files are left alone")
        expect_error(DDStoreValueError, ["path must be a directory name"], s.save, 42,
                     agree=True, agreed=True)
        expect_error(DDStoreValueError, ["block_bytes must be an integer >= 1, got 0"],
                     s.save, os.path.join(tmp, "x"), block_bytes=0, agree=True, agreed=True)
        for given in (0.5, 1.5, "64"):  # never truncated nor parsed (1.5 was taken as 1)
            expect_error(DDStoreValueError, [f"block_bytes must be an integer >= 1, got "
                                             f"{given!r}"],
                         s.save, os.path.join(tmp, "x"), block_bytes=given, agree=True,
                         agreed=True)
        # an annotation one rank alone holds
        if rank == 0:
            s.annotate("solo", "Test", {"x": 1}, variables=["a"])
        if size > 1:
            # named by the part that differs (was: the store's counts and a fingerprint)
            expect_error(DDStoreError, ["annotation 'solo' differs between ranks (rank 0: "
                                        "kind 'Test', meta {\"x\": 1}, arrays {}, variables "
                                        "['a'], cuts {}; rank"], s.save,
                         os.path.join(tmp, "y"), agree=True, agreed=True)
        expect_error(DDStoreValueError, ["meta must be JSON-serialisable"], s.annotate,
                     "bad", "Test", {"x": object()})
        expect_error(DDStoreValueError, ["unknown: 'nope'"], s.annotate, "bad",
                     "Test", variables=["nope"])
        # a str is not its characters, a handle not a name (either was kept: remove of
        # the variable left the annotation, save failed on JSON), cuts a dict
        expect_error(DDStoreValueError, ["variables must be a list or tuple", "'a'"],
                     s.annotate, "bad", "Test", variables="a")
        expect_error(DDStoreValueError, ["variables must name the store's variables (str)"],
                     s.annotate, "bad", "Test", variables=[s.handle("a")])
        expect_error(DDStoreValueError, ["cuts must be a dict", "got int"], s.annotate,
                     "bad", "Test", variables=["a"], cuts=2)
        expect_error(DDStoreValueError, ["no Graph 'zz'", "known: []"], s.annotation,
                     "zz", "Graph")
        expect_error(DDStoreValueError, ["rows per item (an int >= 1)"], s.annotate,
                     "bad", "Test", variables=["a"], cuts={"a": 0})
        s.annotate("gone", "Test", variables=["a"])
        check(s.unannotate("gone") and not s.unannotate("gone") and
              "gone" not in s.annotations(), "unannotate")
    if size > 1 and size % 2 == 0:
        with shared_tmpdir() as tmp, DDStore(comm, width=size // 2,
                                             transport=TRANSPORT) as s:
            s.add("b", np.full(4, s.group_rank, np.int64))
            if s.group == 1:
                s.local_view("b")[1] = 99
            s.sync()
            expect_error(DDStoreValueError, ["replicas differ", "'b'"], s.save,
                         os.path.join(tmp, "r"), agree=True, agreed=True)


@cases("removing a variable drops its annotation; a rollback too")
def _(t):
    with DDStore(comm, transport=TRANSPORT) as s:
        s.add("a", np.arange(3))
        s.add("b", np.arange(3))
        s.annotate("obj", "Test", variables=["a", "b"])
        s.remove("b")
        check(s.annotations() == [], "annotation dropped with its variable")
        try:
            with s.transaction("t"):
                s.add("c", np.arange(2))
                s.annotate("obj2", "Test", variables=["c"])
                with s.collective("test failure"):
                    raise DDStoreValueError("boom")
        except DDStoreValueError:
            pass
        check(s.annotations() == [] and s.variables() == ["a"], "rolled back")


run_main(cases.run)
