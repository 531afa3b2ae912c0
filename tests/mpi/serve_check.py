"""Reads by message between nodes (issue 36, item 3: csrc/serve.c): every byte read
through the message path equals the byte written, across widths, dtypes and row sizes,
replies longer than one part (4 MiB) and pieces straddling parts, several variables in
one ``get_many`` call, repeated and unsorted indices, ranges spanning owners, two
threads of each rank reading at once, and a rank computing (no MPI call) while the
others read it (its agent answers).  Run between nodes (MPICH's network module): with
``DDSTORE_SERVE_MIN_PIECES=1`` every remote read goes by message; with ``off``
(``DDSTORE_SERVE=off``) none does, and the same checks hold over one-sided gets.

    MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=tcp FI_TCP_IFACE=lo \\
        DDSTORE_SERVE_MIN_PIECES=1 timeout 300 mpiexec -n 3 python tests/mpi/serve_check.py [on|off]
"""
import os
import sys
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "on"
os.environ["DDSTORE_SERVE"] = "off" if MODE == "off" else "auto"
# every member on a "node" of its own (MPICH's network module); inside a node no
# member is on another node and nothing goes by message
BETWEEN = os.environ.get("MPIR_CVAR_NOLOCAL", "0") not in ("", "0")

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from _harness import Cases, check, every_width, run_main  # noqa: E402

import ddstore  # noqa: E402
from ddstore import _core  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
cases = Cases()
# (name, dtype, row shape, rows per rank): odd row sizes, 0-byte rows, rows of 4 KiB
VARIABLES = [("f32", np.float32, (100,), 3000), ("u8x3", np.uint8, (3,), 5000),
             ("i64", np.int64, (), 7001), ("c16", np.complex128, (2, 128), 600),
             ("empty", np.float32, (0,), 50)]


def rows_of(name, dtype, shape, n, r):
    """Rank r's rows of a variable: distinct everywhere (a row's bytes name it)."""
    g = np.random.default_rng([sum(name.encode()), r])
    return (g.integers(0, 250, size=(n,) + shape).astype(dtype) if
            np.issubdtype(dtype, np.integer) else
            (g.random((n,) + shape) * 1000).astype(dtype))


def whole(name, dtype, shape, n, width, group):
    """The global rows of a group: its members' rows in member order."""
    return np.concatenate([rows_of(name, dtype, shape, n, group * width + m)
                           for m in range(width)])


@cases("round trips by message")
def _(t):
    for width in every_width():
        with ddstore.DDStore(comm, width=width) as s:
            remote = width > 1 and BETWEEN
            check(s.serving == (MODE == "on" and remote),
                  f"w{width}: serving {s.serving} (mode {MODE})")
            group = rank // width
            want = {}
            for name, dtype, shape, n in VARIABLES:
                s.add(name, rows_of(name, dtype, shape, n, rank))
                want[name] = whole(name, dtype, shape, n, width, group)
            before = _core.serve_stats()
            g = np.random.default_rng(rank)
            for name, _, _, _ in VARIABLES:
                w = want[name]
                N = w.shape[0]
                for m in (1, 5, 40, 3000, 20000):
                    idx = g.integers(0, N, m)
                    got = s.get_batch(name, idx)
                    check(np.array_equal(got, w[idx]),
                          f"w{width} {name}: get_batch of {m} rows")
                if name == "f32":  # 400-byte rows: over 4 MiB from each owner, rows
                    idx = g.integers(0, N, 40000)  # straddling the reply's parts
                    check(np.array_equal(s.get_batch(name, idx), w[idx]),
                          f"w{width} {name}: get_batch of 40000 rows")
                starts = g.integers(0, N, 30)
                counts = np.minimum(g.integers(0, 2 * N // width + 2, 30), N - starts)
                got = s.read_ranges(name, starts, counts)
                check(np.array_equal(got, np.concatenate(
                    [w[a:a + c] for a, c in zip(starts, counts)])),
                      f"w{width} {name}: read_ranges across owners")
                check(np.array_equal(s.get_range(name, 0, N), w),
                      f"w{width} {name}: get_range of every row")
            # several variables in one call: pieces of each in one request per owner
            reqs = [(name, g.integers(0, want[name].shape[0], 2500))
                    for name, _, _, _ in VARIABLES]
            got = s.get_many(reqs)
            for (name, idx), rows in zip(reqs, got):
                check(np.array_equal(rows, want[name][idx]),
                      f"w{width} {name}: get_many")
            # the same into the caller's buffers (what NodeMemory.read passes), one of
            # them left to the call: filled in place, every byte as read alone
            outs = [np.full_like(rows, 7) for rows in got]
            filled = s.get_many([(name, idx, out if k else None)
                                 for k, ((name, idx), out) in enumerate(zip(reqs, outs))])
            for k, ((name, idx), rows) in enumerate(zip(reqs, filled)):
                check((rows is outs[k]) == (k > 0) and
                      rows.tobytes() == want[name][idx].tobytes(),
                      f"w{width} {name}: get_many into out")
            # row ranges across owners beside rows, in the same call (NodeMemory's mail)
            reqs = []
            for name, _, _, _ in VARIABLES:
                N = want[name].shape[0]
                starts = g.integers(0, N, 30)
                counts = np.minimum(g.integers(0, 2 * N // width + 2, 30), N - starts)
                reqs += [(name, starts, counts, None), (name, g.integers(0, N, 50))]
            for (name, *r), rows in zip(reqs, s.get_many(reqs)):
                w = want[name]
                ref = (w[r[0]] if len(r) == 1 else
                       np.concatenate([w[a:a + c] for a, c in zip(r[0], r[1])]))
                check(rows.tobytes() == ref.tobytes(), f"w{width} {name}: get_many ranges")
            sent = _core.serve_stats()["sent"] - before["sent"]
            check((sent > 0) == (MODE == "on" and remote),
                  f"w{width}: {sent} request messages sent (mode {MODE})")
            t.last = (s, want)
            comm.Barrier()


def one_group_store():
    """A store of one group holding VARIABLES[0]: (store, its name, the global rows,
    rows per rank)."""
    s = ddstore.DDStore(comm, width=size)
    name, dtype, shape, n = VARIABLES[0]
    s.add(name, rows_of(name, dtype, shape, n, rank))
    return s, name, whole(name, dtype, shape, n, size, 0), n


@cases("two threads read at once", min_ranks=2)
def _(t):
    s, name, w, _ = one_group_store()
    with s:
        bad = []

        def reader(seed):
            g = np.random.default_rng([rank, seed])
            for _ in range(40):
                idx = g.integers(0, w.shape[0], int(g.integers(1, 5000)))
                if not np.array_equal(s.get_batch(name, idx), w[idx]):
                    bad.append(seed)
        threads = [threading.Thread(target=reader, args=(k,)) for k in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        check(not bad, f"threads {sorted(set(bad))} read wrong rows")
        comm.Barrier()


@cases("a computing rank is read through its agent", min_ranks=2)
def _(t):
    s, name, w, n = one_group_store()
    with s:
        comm.Barrier()
        if rank == size - 1:  # computes for 2 s without an MPI call
            a = np.ones((200, 200))
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 2.0:
                a = a @ a
                a /= a.max()
            check(True, "computed")
        else:
            lo = (size - 1) * n
            g = np.random.default_rng(rank)
            slowest = 0.0
            for _ in range(20):
                idx = lo + g.integers(0, n, 500)
                t0 = time.perf_counter()
                got = s.get_batch(name, idx)
                slowest = max(slowest, time.perf_counter() - t0)
                check(np.array_equal(got, w[idx]), "rows of the computing rank")
            # the agent answers within its period; 1 s leaves room for a loaded machine
            check(slowest < 1.0, f"slowest read of a computing rank took {slowest:.3f} s")
        comm.Barrier()


run_main(cases.run, note=f"(mode {MODE})")
