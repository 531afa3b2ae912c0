"""Checkpoints never mixed, never half made, on several ranks (issue 43, items 1-3):
two stores saved to one path by different ranks (rank 0 ``A.save(p)``, the others
``B.save(p)``) refused on every rank with nothing written; a save refused in its first
round (different paths per rank; rank 0 saves while the others load) leaves no
generation directory, no temporary manifest, no directory; a load whose last variable
fails its checksum removes what it created on every rank; an edited manifest refused
alike on every rank naming the field and the file.

    timeout 240 mpiexec -n 2 python tests/mpi/checkpoint_trust.py
"""
import json
import os

import numpy as np
from mpi4py import MPI

from _harness import Cases, check, expect_error, run_main, shared_tmpdir

from ddstore import DDStore, DDStoreError, DDStoreValueError, partition
from ddstore import checkpoint as ck

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
cases = Cases()


def rows(n, base):
    lo, hi = partition(n, size, rank)
    return np.arange(lo, hi, dtype=np.int64) + base


@cases("two stores saved to one path by different ranks: refused, nothing written")
def _(t):
    with shared_tmpdir() as tmp, DDStore(comm) as a, DDStore(comm) as b:
        a.add("x", rows(20, 0))
        b.add("x", rows(20, 1000))  # the same names, sizes and dtypes
        p = os.path.join(tmp, "ck")
        mine = a if rank == 0 else b
        if size > 1:
            expect_error(DDStoreError, ["different stores", "store #"], mine.save, p,
                         agree=True, agreed=True, store=mine)
            check(not os.path.exists(p), f"a mixed save left {p}")
        a.save(p)  # one store on every rank: saved
        a.remove("x")
        b.remove("x")
        if size > 1:
            expect_error(DDStoreError, ["different stores", "store #"], mine.load, p,
                         agree=True, agreed=True, store=mine)
        with DDStore.restore(p, comm) as r:
            check(r.get_batch("x", np.arange(20)).tolist() == list(range(20)),
                  "the checkpoint holds A's rows only")


def leftovers(tmp):
    out = []
    for root, dirs, files in os.walk(tmp):
        out += [os.path.relpath(os.path.join(root, e), tmp) for e in dirs + files]
    return sorted(out)


@cases("a save refused in its first round leaves nothing behind")
def _(t):
    with shared_tmpdir() as tmp, DDStore(comm) as s:
        s.add("x", rows(10, 0))
        if size > 1:
            p = os.path.join(tmp, f"p{rank}")  # a path per rank
            expect_error(DDStoreError, ["out of step"], s.save, p, agree=True,
                         agreed=True, store=s)
            comm.Barrier()
            check(leftovers(tmp) == [], f"different paths left {leftovers(tmp)}")
            comm.Barrier()
            base = os.path.join(tmp, "base")
            with DDStore(comm) as other:
                other.add("y", rows(6, 0))
                other.save(base)
            before = leftovers(tmp)
            q = os.path.join(tmp, "q")
            call = (lambda: s.save(q)) if rank == 0 else (lambda: s.load(base))
            expect_error(DDStoreError, ["out of step"], call, agree=True, agreed=True,
                         store=s)
            comm.Barrier()
            check(leftovers(tmp) == before, f"save against load left "
                  f"{sorted(set(leftovers(tmp)) - set(before))}")
            comm.Barrier()  # every rank has looked before rank 0 makes d
        # a directory with a user's g- folder: refused on every rank, kept
        d = os.path.join(tmp, "d")
        if rank == 0:
            os.makedirs(os.path.join(d, "g-results"))
            with open(os.path.join(d, "g-results", "keep.txt"), "w") as f:
                f.write("keep")
        comm.Barrier()
        expect_error(DDStoreValueError, ["holds other files", "'g-results'"], s.save, d,
                     agree=True, agreed=True, store=s)
        comm.Barrier()
        check(sorted(os.listdir(d)) == ["g-results"] and
              open(os.path.join(d, "g-results", "keep.txt")).read() == "keep",
              f"the user's directory was touched: {os.listdir(d)}")


@cases("load all or nothing on every rank; an edited manifest refused alike")
def _(t):
    with shared_tmpdir() as tmp, DDStore(comm) as s:
        s.add("a", rows(30, 0))
        s.add("b", rows(30, 100).astype(np.float64))
        p = os.path.join(tmp, "ck")
        m = s.save(p)
        s.remove("a", "b")
        s.add("keep", rows(4, 0))
        v = next(v for v in m["variables"] if v["name"] == "b")
        f_idx, offset = v["blocks"][-1][0], v["blocks"][-1][1]
        comm.Barrier()
        if rank == 0:  # the last block of the last variable flipped
            with open(os.path.join(p, m["files"][f_idx]), "r+b") as f:
                f.seek(offset)
                byte = f.read(1)
                f.seek(offset)
                f.write(bytes([byte[0] ^ 1]))
        comm.Barrier()
        expect_error(DDStoreValueError, ["fails its checksum", "'b'"], s.load, p,
                     agree=True, agreed=True, store=s)
        check(s.variables() == ["keep"], f"left {s.variables()}")
        comm.Barrier()
        if rank == 0:  # an edit without its checksum
            name = os.path.join(p, ck.MANIFEST)
            raw = open(name, "rb").read()
            doc = json.loads(raw)
            doc["variables"][0]["nrows"] -= 1
            new = json.dumps(doc, separators=(",", ":")).encode()
            with open(name, "wb") as f:
                f.write(new[:19] + raw[19:35] + new[35:])
        comm.Barrier()
        expect_error(DDStoreValueError, ["fails its checksum", ck.MANIFEST], s.load, p,
                     agree=True, agreed=True, store=s)
        expect_error(DDStoreValueError, ["fails its checksum", ck.MANIFEST],
                     DDStore.restore, p, comm, agree=True, agreed=True)


run_main(cases.run)
