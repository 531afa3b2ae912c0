"""MPI program: ddstore.temporal.NodeMemory against a one-process brute force.

Run under mpiexec (inside ``timeout``) on 1-4 ranks.  For every width dividing the rank
count and both transports (auto; rma: every other member's rows read with MPI_Get), with
mailbox sizes 1 and 3:

- random rounds of staged writes and mails (several calls per rank, ties in ts, repeated
  nodes, ranks that stage nothing) read back byte for byte equal to
  ``ddstore.testing.temporal.ReferenceNodeMemory`` (every update applied one by one in
  (ts, rank, position) order), ``read(out=...)`` included;
- the P-rank equality: ranks stage contiguous slices of one time-ordered batch in rank
  order, and the state equals a one-process NodeMemory (over ``MPI.COMM_SELF``) that
  staged the whole batch;
- snapshot / restore (twice) and reset; post_to_neighbors;
- every error case (bad node id, wrong dtype or shape, NaN ts, NaN / inf memory or mail
  rows, integer ts outside [-2**53, 2**53], length mismatch, errors on two ranks, calls
  out of step, restore without a snapshot, constructor arguments that differ or a taken
  name) raised the same on every rank, with every stored byte unchanged and the staged
  updates dropped everywhere;
- on 1-2 ranks, both transports: a reader thread per rank, and a process forked from
  every rank (a DataLoader worker), reading every node while the ranks commit never see
  a node (or two nodes of one read) from two commits;
- non-blocking commits (``commit(wait=False)``), both transports: a sequence of batches,
  with the next batch staged and other collective calls on the store (an agreement, a
  variable added and removed) made while the background exchange runs, read back (with
  and without ``wait()``) byte for byte equal to the same sequence committed blocking and
  to the reference; a bad update, a ``wait`` that differs between ranks or is not a bool
  raise on every rank with nothing applied; a failure in the background thread is raised
  by the next calls (the lock is not left held); ``remove``, ``store.remove`` and
  ``store.free`` right after a non-blocking commit do not hang, nor does the free at
  interpreter exit of a store left with one under way; with the commit's counts
  exchanged by ``alltoall`` (the path of jobs above ``_COUNTS_IN_AGREEMENT`` rank x width
  pairs, forced) the same.
"""
import mmap
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np
from mpi4py import MPI

from _harness import check, expect_error, run_main, every_width

import ddstore  # noqa: E402
from ddstore import DDStoreIndexError, DDStoreValueError  # noqa: E402
from ddstore import temporal as tg  # noqa: E402
import ddstore.temporal.memory as tgm  # noqa: E402
from ddstore.testing.temporal import ReferenceNodeMemory  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
N, MD, AD = 29, 3, 2
# oversubscribed runs (3-4 ranks on 2 cores) make every collective slow: fewer rounds
ROUNDS = 4 if size <= 2 else 2


def same_bytes(got, exp, what):
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    ok = (got.shape == exp.shape and got.dtype == exp.dtype and
          np.array_equal(got.view(np.uint8), np.ascontiguousarray(exp).view(np.uint8)))
    if not ok:
        what += f" (got {got.dtype} {got.shape} {got.ravel()[:6]}, expected " \
                f"{exp.dtype} {exp.shape} {exp.ravel()[:6]})"
    check(ok, what)


def compare(mem, ref, tag, rng=None):
    """Every node (and a shuffled list with duplicates) read back equal to the reference."""
    rng = rng or np.random.default_rng(rank + 7)
    queries = [np.arange(N), rng.integers(0, N, 40)]
    for q in queries:
        got = mem.read(q)
        exp = ref.read(q.tolist())
        for key, e in zip(("memory", "memory_ts", "mail", "mail_ts"), exp):
            same_bytes(getattr(got, key), e, f"{tag}: {key}")
    again = mem.read(q, out=got)
    check(again is got, f"{tag}: read(out=) returned a new object")
    for key, e in zip(("memory", "memory_ts", "mail", "mail_ts"), exp):
        same_bytes(getattr(again, key), e, f"{tag}: {key} (out=)")


def random_updates(rng, dtype, most=25):
    """Every rank's staged updates for one round (drawn the same on every rank): for each
    rank a list of calls ``(kind, nodes, rows, ts)``."""
    plan = []
    for r in range(size):
        calls = []
        for kind, dim in (("write", MD), ("post", AD)):
            n = int(rng.integers(0, most))
            if size > 2 and r == 1:
                n = 0  # a rank that stages nothing
            nodes = rng.integers(0, N, n)
            nodes[: n // 3] = nodes[0] if n else 0  # repeated nodes
            ts = rng.integers(0, 6, n).astype(np.float64)  # many ties
            rows = rng.standard_normal((n, dim)).astype(dtype)
            cuts = np.sort(rng.integers(0, n + 1, 2))
            for a, b in zip([0, cuts[0], cuts[1]], [cuts[0], cuts[1], n]):
                calls.append((kind, nodes[a:b], rows[a:b], ts[a:b]))
        plan.append(calls)
    return plan


def stage(mem, calls, scalar_ts=False):
    for kind, nodes, rows, ts in calls:
        if scalar_ts and len(ts) and np.all(ts == ts[0]):
            ts = float(ts[0])  # one ts for all
        (mem.write if kind == "write" else mem.post)(nodes, rows, ts)


def as_reference(plan):
    """(writes, posts) as ``(rank, position, node, ts, row)`` lists."""
    writes, posts = [], []
    for r, calls in enumerate(plan):
        pos = {"write": 0, "post": 0}
        for kind, nodes, rows, ts in calls:
            for v, row, t in zip(nodes.tolist(), rows, ts.tolist()):
                (writes if kind == "write" else posts).append((r, pos[kind], v, t, row))
                pos[kind] += 1
    return writes, posts


def run_round(mem, ref, rng, dtype, tag):
    plan = random_updates(rng, dtype)
    stage(mem, plan[rank], scalar_ts=True)
    mem.commit()
    ref.commit(*as_reference(plan))
    check(mem.staged() == (0, 0), f"{tag}: staged after commit {mem.staged()}")
    compare(mem, ref, tag)


def check_batch_equality(mem, S, dtype, tag):
    """Contiguous slices of a time-ordered batch in rank order == one process over it."""
    with ddstore.DDStore(MPI.COMM_SELF, width=1) as solo:
        one = tg.NodeMemory(solo, "one", N, MD, AD, mailbox_size=S, dtype=dtype)
        mem.reset()
        rng = np.random.default_rng(99)
        for b in range(max(2, ROUNDS - 1)):
            B = 50
            nodes = rng.integers(0, N, B)
            ts = np.sort(rng.integers(0, 8, B)).astype(np.float64) + 10 * b
            rows = rng.standard_normal((B, MD)).astype(dtype)
            mails = rng.standard_normal((B, AD)).astype(dtype)
            lo, hi = ddstore.partition(B, size, rank)
            mem.write(nodes[lo:hi], rows[lo:hi], ts[lo:hi])
            mem.post(nodes[lo:hi], mails[lo:hi], ts[lo:hi])
            mem.commit()
            one.write(nodes, rows, ts)
            one.post(nodes, mails, ts)
            one.commit()
            a, e = mem.read(np.arange(N)), one.read(np.arange(N))
            for key in ("memory", "memory_ts", "mail", "mail_ts"):
                same_bytes(getattr(a, key), getattr(e, key).numpy(),
                           f"{tag}: P-rank batch {b} {key} == one process")


def check_neighbors(mem, ref, rng, dtype, tag):
    """post_to_neighbors == posting mail[row] to nodes[col] in the block's edge order."""
    nr = 4
    nbrs = rng.integers(0, N, 9)
    row = np.sort(rng.integers(0, nr, 9))
    block = tg.TemporalBlock(np.concatenate([rng.integers(0, N, nr), nbrs]),
                             np.zeros(nr + 9), row, np.arange(nr, nr + 9), np.arange(9),
                             np.zeros(9), np.ones(9), nr)
    mail = rng.standard_normal((nr, AD)).astype(dtype)
    ts = rng.integers(0, 3, nr).astype(np.float64) + 100
    if rank == 0:
        mem.post_to_neighbors(block, mail, ts)
    mem.commit()
    ref.commit([], [(0, i, int(nbrs[i]), float(ts[row[i]]), mail[row[i]])
                    for i in range(9)])
    compare(mem, ref, f"{tag}: post_to_neighbors")


def own_bytes(store, mem):
    """Every byte of the state's five variables (all rows, every owner), mail_count
    included: what a failed commit must leave as it was."""
    return [store.get_range(f"{mem.name}/{k}", 0, store.nrows(f"{mem.name}/{k}")).tobytes()
            for k in ("memory", "memory_ts", "mail", "mail_ts", "mail_count")]


def check_errors(store, mem, ref, dtype, tag):
    dtype = np.dtype(dtype)
    bad = size - 1
    rng = np.random.default_rng(5)
    good = np.zeros((2, MD), dtype)
    cases = [
        (DDStoreIndexError, ["write", f"node id {N} (position 1)", f"[0, {N})"],
         lambda: mem.write([0, N], good, [1.0, 2.0]), "node id too large"),
        (DDStoreIndexError, ["post", "node id -1", f"[0, {N})"],
         lambda: mem.post([-1], np.zeros((1, AD), dtype), 1.0), "negative node id"),
        (DDStoreValueError, ["write", "memory: dtype complex128 cannot be cast to this "
                             f"memory's dtype {dtype}"],
         lambda: mem.write([0, 1], np.zeros((2, MD), np.complex128), 1.0), "wrong dtype"),
        (DDStoreValueError, ["post", f"mail has dtype {dtype} shape (2, {AD + 1})",
                             f"shape (2, {AD})"],
         lambda: mem.post([0, 1], np.zeros((2, AD + 1), dtype), 1.0), "wrong mail shape"),
        (DDStoreValueError, ["write", "ts[1] = nan (node 4)", "must be finite"],
         lambda: mem.write([3, 4], good, [1.0, np.nan]), "NaN ts in write"),
        (DDStoreValueError, ["post", "ts[0] = inf"],
         lambda: mem.post([3], np.zeros((1, AD), dtype), [np.inf]), "inf ts in post"),
        (DDStoreValueError, ["write", "ts has dtype float64 shape (3,)", "needs 2"],
         lambda: mem.write([3, 4], good, [1.0, 2.0, 3.0]), "ts length"),
        (DDStoreValueError, ["write", "memory has dtype", "shape (2, 3)"],
         lambda: mem.write([3, 4], "not an array", 1.0), "not an array"),
        # NaN / inf rows, named by node, as edge weights are
        (DDStoreValueError, ["write", "row 1 (node 4) has memory value nan",
                             "memory values must be finite (1 of 2 rows hold NaN or inf)"],
         lambda: mem.write([3, 4], np.array([[1, 2, 3], [4, np.nan, 6]], dtype), 1.0),
         "NaN memory row"),
        (DDStoreValueError, ["post", "row 0 (node 6) has mail value -inf",
                             "(2 of 3 rows hold NaN or inf)"],
         lambda: mem.post([6, 7, 8], np.array([[-np.inf, 0], [0, 0], [np.inf, 1]], dtype),
                          1.0), "inf mail rows"),
        # integer times float64 cannot hold exactly (they were rounded: 2**53 + 1 -> 2**53)
        (DDStoreValueError, ["write", f"ts[1] = {2 ** 53 + 1} (node 4) is outside "
                             "[-2**53, 2**53]"],
         lambda: mem.write([3, 4], good, np.array([2 ** 53, 2 ** 53 + 1])),
         "int ts above 2**53"),
        (DDStoreValueError, ["post", f"ts[0] = {-2 ** 53 - 1} (node 2) is outside"],
         lambda: mem.post([2], np.zeros((1, AD), dtype), -2 ** 53 - 1), "int ts below"),
        (DDStoreValueError, ["post", f"ts[1] = {2 ** 64 - 1} (node 1)", "[-2**53, 2**53]"],
         lambda: mem.post([0, 1], np.zeros((2, AD), dtype),
                          np.array([0, 2 ** 64 - 1], np.uint64)), "uint64 ts"),
        (DDStoreValueError, ["write", f"ts[0] = {2 ** 70} (node 5)", "[-2**53, 2**53]"],
         lambda: mem.write([5], np.zeros((1, MD), dtype), 2 ** 70), "Python int ts"),
    ]
    for exc, fragments, stage_bad, what in cases:
        plan = random_updates(rng, dtype, most=8)
        stage(mem, plan[rank])       # good updates everywhere, all of them dropped
        if rank == bad:
            stage_bad()
        before = own_bytes(store, mem)
        expect_error(exc, [f"rank {bad}:"] + fragments, mem.commit, agree=True,
                     what=f"{tag}: {what}")
        check(mem.staged() == (0, 0), f"{tag}: {what}: staged kept {mem.staged()}")
        check(own_bytes(store, mem) == before, f"{tag}: {what}: the stored bytes changed")
        compare(mem, ref, f"{tag}: after {what}")
    if size > 1:  # two ranks with different errors: both named
        mem.write([N + 5], np.zeros((1, MD), dtype), 1.0) if rank == 0 else None
        mem.post([2], np.zeros((1, AD), dtype), np.nan) if rank == bad else None
        expect_error(DDStoreIndexError, ["rank 0:", f"node id {N + 5}", f"rank {bad}:",
                                         "is NaN"], mem.commit, agree=True,
                     what=f"{tag}: two ranks")
        compare(mem, ref, f"{tag}: after two ranks")
        # ranks in different collective calls are told, nothing applied
        mem.write([1], np.ones((1, MD), dtype), 1.0)
        expect_error(DDStoreValueError, ["out of step", "NodeMemory.commit('m')",
                                         "NodeMemory.reset('m')"],
                     mem.commit if rank == 0 else mem.reset, agree=True,
                     what=f"{tag}: out of step")
        compare(mem, ref, f"{tag}: after out of step")
        mem.commit()  # staged updates were dropped on every rank: nothing applied
        compare(mem, ref, f"{tag}: commit after out of step")
        expect_error(DDStoreValueError, ["mailbox_size differs between ranks"],
                     tg.NodeMemory, store, "x", N, MD, AD,
                     mailbox_size=2 if rank == 0 else 1, agree=True, store=store,
                     what=f"{tag}: mailbox_size differs")
    expect_error(DDStoreValueError, ["NodeMemory 'm': the store already holds"],
                 tg.NodeMemory, store, "m", N, MD, AD, agree=True, store=store,
                 what=f"{tag}: taken name")
    for kw, frag in (({"num_nodes": 0}, "num_nodes=0 must be an integer >= 1"),
                     ({"mailbox_size": 0}, "mailbox_size=0 must be an integer >= 1"),
                     ({"dtype": np.int32}, "dtype=int32; allowed: a floating-point")):
        args = dict(num_nodes=N, memory_dim=MD, mail_dim=AD)
        args.update(kw)
        expect_error(DDStoreValueError, [frag], tg.NodeMemory, store, "y", agree=True,
                     store=store, what=f"{tag}: {kw}", **args)
    fresh = tg.NodeMemory(store, "fresh", 5, 1, 1)
    expect_error(DDStoreValueError, ["restore() without a snapshot()"], fresh.restore,
                 agree=True, what=f"{tag}: restore without snapshot")
    fresh.remove()
    check(all(not v.startswith("fresh/") for v in store.variables()),
          f"{tag}: remove left {store.variables()}")


def torn_nodes(got, commits):
    """For one read of every node taken while commit number ``c`` stages, for every node,
    memory ``c`` (every value), memory_ts ``c`` and a mail ``c`` at ts ``c``: the number
    of nodes whose memory, memory_ts, mail and mail_ts are not all from one commit, and
    the set of commits the consistent nodes show."""
    mem, mts = got.memory.numpy(), got.memory_ts.numpy()
    mail, mail_ts = got.mail.numpy(), got.mail_ts.numpy()
    c = mts.astype(np.int64)
    S = mail.shape[1]
    want_mail = np.maximum(c[:, None] - np.arange(S - 1, -1, -1)[None, :], 0)
    ok = ((mts == c) & (c >= 0) & (c <= commits) &
          (mem == c[:, None]).all(axis=1) &
          (mail == want_mail[:, :, None]).all(axis=(1, 2)) &
          (mail_ts == want_mail).all(axis=1))
    return int((~ok).sum()), set(np.unique(c[ok]).tolist())


def check_concurrent_reads(transport):
    """A reader thread on every rank reads every node (its own, node-local and remote
    rows) in a loop while the main thread commits: every read sees the whole state of one
    commit (memory, memory_ts, mail, mail_ts and the ring order all from the same one),
    never a row torn between two commits."""
    NT, MDT, ADT, S, COMMITS = 3000, 8, 4, 2, 40
    tag = f"[n={size} {transport}] concurrent reads"
    with ddstore.DDStore(comm, width=size, transport=transport) as store:
        mem = tg.NodeMemory(store, "torn", NT, MDT, ADT, mailbox_size=S)
        stop = threading.Event()
        seen = {"reads": 0, "torn": 0, "mixed": 0, "states": set(), "errors": []}

        def reader():
            nodes = np.arange(NT)
            try:
                while not stop.is_set():
                    torn, states = torn_nodes(mem.read(nodes), 20 * COMMITS)
                    seen["reads"] += 1
                    seen["torn"] += torn
                    seen["mixed"] += len(states) > 1  # nodes of different commits
                    seen["states"] |= states
            except Exception as exc:  # noqa: BLE001 -- reported by the main thread
                seen["errors"].append(f"{type(exc).__name__}: {exc}")

        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)  # interleave the threads finely
        thread = threading.Thread(target=reader, name="memory-reader")
        thread.start()
        mine = np.arange(rank, NT, size)  # nodes of every owner, staged on every rank
        c = 0
        # COMMITS commits, more until every rank's reader has read 20 times (or 60 s:
        # under a heavy load the reader thread may get little CPU in 800 fast commits)
        deadline = time.monotonic() + 60
        try:
            while c < COMMITS or not comm.allreduce(
                    seen["reads"] >= 20 or time.monotonic() > deadline, op=MPI.LAND):
                c += 1
                mem.write(mine, np.full((mine.shape[0], MDT), c, np.float32), float(c))
                mem.post(mine, np.full((mine.shape[0], ADT), c, np.float32), float(c))
                mem.commit()
        finally:
            stop.set()
            thread.join()
            sys.setswitchinterval(switch)
        check(not seen["errors"], f"{tag}: the reader raised {seen['errors'][:1]}")
        # the lock hands itself to a waiting read when a commit ends: the reader is
        # never starved by the loop of commits
        check(seen["reads"] >= 20, f"{tag}: the reader read {seen['reads']} times in "
                                   f"{c} commits")
        check(seen["torn"] == 0, f"{tag}: {seen['torn']} torn node rows in "
                                 f"{seen['reads']} reads")
        check(seen["mixed"] == 0, f"{tag}: {seen['mixed']} of {seen['reads']} reads mix "
                                  f"nodes of different commits")
        torn, states = torn_nodes(mem.read(np.arange(NT)), c)
        check(torn == 0 and states == {c}, f"{tag}: final state {states}, {torn} torn")
        if rank == 0:
            print(f"{tag}: {seen['reads']} reads saw {len(seen['states'])} states",
                  flush=True)
        mem.remove()


def _reported(fd, pid):
    """What forked process ``pid`` wrote to pipe ``fd`` (the repr of a Python value), once
    it closed it; the pipe closed and the process waited for."""
    got = b""
    while True:
        part = os.read(fd, 4096)
        if not part:
            break
        got += part
    os.close(fd)
    os.waitpid(pid, 0)
    return eval(got.decode())  # noqa: S307 -- our own repr


def check_forked_reads(transport):
    """A process forked from every rank (a DataLoader worker: no MPI calls) reads every
    node in a loop while the ranks commit: its reads go to the chunks of the node's group
    members through shared memory, which the other ranks write without the forked
    process's lock, so every read is checked against the node-wide commit counts and
    must see the whole state of one commit, never nodes or rows of two."""
    NT, MDT, ADT, S, COMMITS = 3000, 8, 4, 2, 60
    tag = f"[n={size} {transport}] forked reads"
    with ddstore.DDStore(comm, width=size, transport=transport) as store:
        mem = tg.NodeMemory(store, "forked", NT, MDT, ADT, mailbox_size=S)
        if store.shm_peers == 0 and size > 1:  # (rma: the child holds its own rows only)
            nodes = np.arange(*ddstore.partition(NT, size, store.group_rank))
        else:
            nodes = np.arange(NT)
        go_r, go_w = os.pipe()
        res_r, res_w = os.pipe()
        count = np.frombuffer(mmap.mmap(-1, 8), np.int64)  # the worker's reads so far
        pid = os.fork()
        if pid == 0:  # the worker: read until the parent closes the pipe
            try:
                os.close(go_w)
                os.close(res_r)
                os.set_blocking(go_r, False)
                reads = torn = mixed = 0
                err = ""
                try:
                    while True:
                        try:
                            if os.read(go_r, 1) == b"":
                                break
                        except BlockingIOError:
                            pass
                        t, states = torn_nodes(mem.read(nodes), 20 * COMMITS)
                        reads += 1
                        count[0] = reads
                        torn += t
                        mixed += len(states) > 1
                except Exception as exc:  # noqa: BLE001 -- reported to the parent
                    err = f"{type(exc).__name__}: {exc}"
                os.write(res_w, repr((reads, torn, mixed, err)).encode())
            finally:
                os._exit(0)
        os.close(go_r)
        os.close(res_w)
        mine = np.arange(rank, NT, size)
        c = 0
        # (one rank: its rows are private memory, of which the worker holds a copy:
        # refused once the rank wrote them)
        private = comm.allreduce(store.private_rows("forked/memory"), op=MPI.LOR)
        # COMMITS commits, more until every worker has read 20 times (or 60 s: on 2
        # cores the worker competes with both ranks)
        deadline = time.monotonic() + 60
        try:
            while c < COMMITS or not private and not comm.allreduce(
                    count[0] >= 20 or time.monotonic() > deadline, op=MPI.LAND):
                c += 1
                mem.write(mine, np.full((mine.shape[0], MDT), c, np.float32), float(c))
                mem.post(mine, np.full((mine.shape[0], ADT), c, np.float32), float(c))
                mem.commit()
        finally:
            os.close(go_w)
            got = _reported(res_r, pid)
        reads, torn, mixed, err = got
        if private:
            check("wrote its rows since the fork" in err, f"{tag}: private rows read "
                                                          f"after a commit: {err!r}")
            mem.remove()
            return
        check(not err, f"{tag}: the forked reader raised {err}")
        check(reads >= 20, f"{tag}: the forked reader read {reads} times in {c} "
                           f"commits")
        check(torn == 0, f"{tag}: {torn} torn node rows in {reads} reads")
        check(mixed == 0, f"{tag}: {mixed} of {reads} reads mix nodes of different "
                          f"commits")
        if rank == 0:
            print(f"{tag}: {reads} reads in {c} commits", flush=True)
        if size > 1:
            check_worker_before_its_rank_commits(mem, nodes, c, tag)
        mem.remove()


def check_worker_before_its_rank_commits(mem, nodes, c, tag):
    """A worker of rank 0 reads while the other ranks are already in a commit that rank 0
    enters only once it has the worker's batch (a training loop waiting for its
    DataLoader): the state before that commit, at once (counted before the commit's
    round, the worker waited for a change its rank held back: a deadlock)."""
    result = None
    if rank == 0:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                tgm.FORKED_READ_WAIT = 10.0  # (a deadlock fails here, not at the timeout)
                time.sleep(0.5)  # the other ranks are in the commit by now
                try:
                    msg = repr(torn_nodes(mem.read(nodes), 20 * (c + 1)))
                except Exception as exc:  # noqa: BLE001 -- reported to the parent
                    msg = repr(f"{type(exc).__name__}: {exc}")
                os.write(w, msg.encode())
            finally:
                os._exit(0)
        os.close(w)
        result = _reported(r, pid)
    mine = np.arange(rank, mem.num_nodes, size)
    mem.write(mine, np.full((mine.shape[0], mem.memory_dim), c + 1, np.float32),
              float(c + 1))
    mem.post(mine, np.full((mine.shape[0], mem.mail_dim), c + 1, np.float32), float(c + 1))
    mem.commit()
    if rank == 0:
        check(result == (0, {c}), f"{tag}: a worker reading while the other ranks "
                                  f"commit: {result!r}, want the state of commit {c}")


def check_nonblocking(transport):
    tag = f"[n={size} w={size} {transport}] non-blocking"
    with ddstore.DDStore(comm, width=size, transport=transport) as store:
        for S, dtype in ((1, np.float32), (3, np.float64)):
            t = f"{tag} S={S}"
            a = tg.NodeMemory(store, "nb", N, MD, AD, mailbox_size=S, dtype=dtype)
            b = tg.NodeMemory(store, "bl", N, MD, AD, mailbox_size=S, dtype=dtype)
            ref = ReferenceNodeMemory(N, MD, AD, S, dtype)
            rng = np.random.default_rng(77 + S)
            plans = [random_updates(rng, dtype) for _ in range(7)]
            stage(a, plans[0][rank])
            for i in range(len(plans) - 1):
                a.commit(wait=False)
                # the next batch staged while this one is applied (for the next commit)
                stage(a, plans[i + 1][rank])
                # the main thread's collectives on store.comm during the background exchange
                with store.collective("nb-test", str(i)) as step:
                    got = step.agree(rank)
                check(got == list(range(size)), f"{t} {i}: the step's round gave {got}")
                if i % 2 == 0:
                    store.init("other", 3, (2,), np.float64)
                    store.remove("other")
                stage(b, plans[i][rank])
                b.commit()
                ref.commit(*as_reference(plans[i]))
                if i % 3 == 2:
                    a.wait()
                q = np.arange(N)
                x, y = a.read(q), b.read(q)  # a's read waits for its commit
                for key in ("memory", "memory_ts", "mail", "mail_ts"):
                    same_bytes(getattr(x, key), getattr(y, key).numpy(),
                               f"{t} batch {i}: {key} (wait=False == wait=True)")
                compare(a, ref, f"{t} batch {i}")
            check(a.staged() != (0, 0) or not sum(len(c[1]) for c in plans[-1][rank]),
                  f"{t}: the batch staged during the commit was lost")
            a.commit(wait=False)
            ref.commit(*as_reference(plans[-1]))
            compare(a, ref, f"{t}: last batch")
            # a bad update on one rank: raised on every rank, nothing applied, lock free
            bad = size - 1
            a.wait()
            before = own_bytes(store, a)
            stage(a, random_updates(rng, dtype, most=8)[rank])
            if rank == bad:
                a.write([0, N], np.zeros((2, MD), dtype), [1.0, 2.0])
            expect_error(DDStoreIndexError, [f"rank {bad}:", f"node id {N}"], a.commit,
                         wait=False, agree=True, agreed=True, what=f"{t}: bad update")
            check(own_bytes(store, a) == before, f"{t}: bad update: the bytes changed")
            compare(a, ref, f"{t}: after bad update")
            expect_error(DDStoreValueError, ["commit(wait='yes')", "True or False"],
                         a.commit, wait="yes", agree=True, what=f"{t}: wait not a bool")
            if size > 1:
                expect_error(DDStoreValueError, ["wait differs between ranks"], a.commit,
                             wait=rank == 0, agree=True, what=f"{t}: wait differs")
            compare(a, ref, f"{t}: after wait errors")
            # a failure in the background thread (injected on every rank before any MPI
            # call): kept, raised by the next calls, the lock not left held
            def boom(*args, **kwargs):
                raise RuntimeError("injected")
            a._apply = boom
            a.commit(wait=False)
            expect_error(ddstore.DDStoreStateError, ["non-blocking commit failed",
                                                     "injected"], a.read, [0],
                         what=f"{t}: read after a failed commit")
            expect_error(ddstore.DDStoreStateError, ["injected"], a.wait,
                         what=f"{t}: wait after a failed commit")
            expect_error(ddstore.DDStoreStateError, ["injected"], a.commit, agree=True,
                         agreed=True, what=f"{t}: commit after a failed commit")
            a.remove()
            # (a forked reader of chunks it shares with the ranks; of a private copy, it
            # reads the state of its fork); once per transport: the suite's time
            if S == 1:
                check_failure_on_one_rank(store, dtype, t, store.shm_peers > 0)
            # removed / freed right after a non-blocking commit: no hang, nothing left
            stage(b, random_updates(rng, dtype)[rank])
            b.commit(wait=False)
            b.remove()
            check(store.variables() == [], f"{t}: left {store.variables()}")
        c = tg.NodeMemory(store, "c", N, MD, AD)
        c.post(np.arange(N), np.ones((N, AD), np.float32), 1.0)
        c.commit(wait=False)
        store.remove("c/mail")  # waits for the commit first
        d = tg.NodeMemory(store, "d", N, MD, AD)
        d.post(np.arange(N), np.ones((N, AD), np.float32), 1.0)
        d.commit(wait=False)
    check(store.freed, f"{tag}: store not freed")


def _forked_reader(mem):
    """A process forked now that reads every node of ``mem`` when the returned function
    is called (which gives what it got: ``"read"`` or the error's text)."""
    go_r, go_w = os.pipe()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(go_w)
            os.close(r)
            os.read(go_r, 1)
            try:
                mem.read(np.arange(N))
                msg = "read"
            except Exception as exc:  # noqa: BLE001 -- reported to the parent
                msg = f"{type(exc).__name__}: {exc}"
            os.write(w, repr(msg).encode())
        finally:
            os._exit(0)
    os.close(go_r)
    os.close(w)

    def result():
        os.write(go_w, b"x")
        os.close(go_w)
        return _reported(r, pid)
    return result


def check_failure_on_one_rank(store, dtype, tag, forked_ok):
    """A commit whose apply (or the allocation of its receive buffer) fails after the
    round on one rank only (the last), blocking or not: every rank raises the same
    error naming that rank, none waits for it (the probe of the thirty-third session:
    the others hung in the background commit's barrier).  A failed apply leaves the
    state unknown, refused by every later call; a failed allocation applies nothing."""
    bad = size - 1
    for wait in (True, False):
        for where in ("_apply_writes", "_buffer"):
            t = f"{tag} wait={wait}: {where} fails on rank {bad}"
            mem = tg.NodeMemory(store, "one", N, MD, AD, dtype=dtype)
            ref = ReferenceNodeMemory(N, MD, AD, 1, dtype)
            plan = random_updates(np.random.default_rng(3), dtype)
            stage(mem, plan[rank])
            mem.commit()
            ref.commit(*as_reference(plan))
            if rank == bad:
                real = getattr(mem, where)

                def failing(*args, real=real):
                    if where == "_buffer" and args[0] != "recv":
                        return real(*args)
                    raise MemoryError("injected")
                setattr(mem, where, failing)
            mem.write(np.arange(rank, N, size), np.ones((len(range(rank, N, size)), MD),
                                                        dtype), 5.0)
            applied = where == "_apply_writes"
            child = _forked_reader(mem) if forked_ok else None
            want = [f"rank {bad}: MemoryError: injected",
                    "its state is unknown" if applied else "nothing applied"]
            if wait:
                expect_error(ddstore.DDStoreStateError, want, mem.commit, agree=True,
                             what=t)
            else:
                mem.commit(wait=False)
                expect_error(ddstore.DDStoreStateError, want, mem.wait, agree=True,
                             what=f"{t}: wait")
            if rank == bad:
                delattr(mem, where)
            if child is not None:  # forked before the commit, reads after it
                got = child()
                check(("failed while applying it (marked in 'one/commits'" in got)
                      if applied else got == "read", f"{t}: a forked reader got {got}")
            if applied or not wait:  # refused from then on, on every rank
                expect_error(ddstore.DDStoreStateError, want + ["remove it"], mem.read,
                             [0], agree=True, what=f"{t}: read after")
                expect_error(ddstore.DDStoreStateError, want, mem.commit, agree=True,
                             what=f"{t}: commit after")
            if applied:  # marked in the store: another object, and a checkpoint, refuse
                marked = ["a commit failed while applying it", "marked in 'one/commits'"]
                expect_error(ddstore.DDStoreStateError, marked, tg.NodeMemory.open, store,
                             "one", agree=True, what=f"{t}: open on the live store")
                if wait:
                    folder = comm.bcast(tempfile.mkdtemp() if rank == 0 else None)
                    expect_error(ddstore.DDStoreStateError, [
                        "objects a checkpoint may not keep", "'one' (NodeMemory)",
                        "a commit failed while applying it", "remove them first"],
                        store.save, os.path.join(folder, "ck"), agree=True,
                        what=f"{t}: save refused")
                    check(os.listdir(folder) == [], f"{t}: the refused save wrote "
                          f"{os.listdir(folder)}")
                    # the mark in the variables holds without the save's refusal (a
                    # checkpoint of an earlier version): its open refuses it
                    store.annotation("one").unsaved = None
                    store.save(os.path.join(folder, "ck"))
                    back = ddstore.DDStore.restore(os.path.join(folder, "ck"), comm)
                    expect_error(ddstore.DDStoreStateError, marked, tg.NodeMemory.open,
                                 back, "one", agree=True, what=f"{t}: open of a checkpoint")
                    back.free()
                    comm.Barrier()
                    if rank == 0:
                        shutil.rmtree(folder)
            if wait and not applied:  # nothing applied: the state before, and it goes on
                compare(mem, ref, f"{t}: nothing applied")
                run_round(mem, ref, np.random.default_rng(4), dtype, f"{t}: goes on")
            mem.remove()


def check_counts_outside_the_agreement():
    """Jobs above ``_COUNTS_IN_AGREEMENT`` rank x width pairs exchange the commit's counts
    by ``alltoall`` instead of inside the agreement: forced here (bound 0), blocking and
    non-blocking commits still equal the reference byte for byte."""
    from ddstore.temporal import memory as memory_module
    bound = memory_module._COUNTS_IN_AGREEMENT
    memory_module._COUNTS_IN_AGREEMENT = 0
    try:
        with ddstore.DDStore(comm, width=size) as store:
            tag = f"[n={size} w={size}] counts by alltoall"
            mem = tg.NodeMemory(store, "m", N, MD, AD, mailbox_size=2)
            ref = ReferenceNodeMemory(N, MD, AD, 2, np.float32)
            rng = np.random.default_rng(5)
            for i in range(3):
                run_round(mem, ref, rng, np.float32, f"{tag} round {i}")
                plan = random_updates(rng, np.float32)
                stage(mem, plan[rank])
                mem.commit(wait=False)
                ref.commit(*as_reference(plan))
                compare(mem, ref, f"{tag} non-blocking {i}")
            mem.remove()
    finally:
        memory_module._COUNTS_IN_AGREEMENT = bound


def check_snapshot_through_another_object():
    """``snapshot`` through a second object of a memory (``NodeMemory.open``) while a
    non-blocking commit of the first is under way (its apply made slow on every rank):
    the snapshot waits for it and holds the committed state whole, as ``restore`` then
    shows (it copied without the memory's lock: half of a commit, or the state before)."""
    tag = f"[n={size} w={size}] snapshot through another object"
    with ddstore.DDStore(comm, width=size) as store:
        a = tg.NodeMemory(store, "sn", N, MD, AD)
        b = tg.NodeMemory.open(store, "sn")
        ref = ReferenceNodeMemory(N, MD, AD, 1, np.float32)
        real = a._apply_writes

        def slow(*args):
            time.sleep(0.3)
            return real(*args)
        a._apply_writes = slow
        plan = random_updates(np.random.default_rng(11), np.float32)
        stage(a, plan[rank])
        a.commit(wait=False)
        ref.commit(*as_reference(plan))
        b.snapshot()
        a.wait()
        del a._apply_writes
        stage(a, random_updates(np.random.default_rng(12), np.float32)[rank])
        a.commit()  # a later state, which restore replaces with the snapshot's
        b.restore()
        compare(b, ref, f"{tag}: restored")
        compare(a, ref, f"{tag}: restored, read through the first")
        a.remove()


_LEFT = []  # a store left live with a non-blocking commit under way: freed at exit


def main():
    if size <= 2:
        for transport in ("auto", "rma"):
            check_concurrent_reads(transport)
            check_forked_reads(transport)
    # (4 ranks on 2 cores: the background exchange over auto alone, the suite's time;
    # rma at 1-3 ranks)
    for transport in ("auto", "rma") if size <= 3 else ("auto",):
        check_nonblocking(transport)
    check_counts_outside_the_agreement()
    check_snapshot_through_another_object()
    widths = every_width()
    for width in widths:
        # width 1: every rank reads only its own rows, so rma reads nothing remote
        for transport in ("auto", "rma") if width > 1 else ("auto",):
            with ddstore.DDStore(comm, width=width, transport=transport) as store:
                if transport == "rma":
                    check(store.shm_peers == 0, "rma with shm peers")
                for S, dtype in ((1, np.float32), (3, np.float64)):
                    if size > 2 and S == 1 and transport == "rma":
                        continue  # oversubscribed: mailbox 3 covers the rma path
                    tag = f"[n={size} w={width} {transport} S={S} {np.dtype(dtype)}]"
                    mem = tg.NodeMemory(store, "m", N, MD, AD, mailbox_size=S, dtype=dtype)
                    ref = ReferenceNodeMemory(N, MD, AD, S, dtype)
                    compare(mem, ref, f"{tag}: zeros")
                    lo, hi = ddstore.partition(N, width, store.group_rank)
                    per_node = MD * np.dtype(dtype).itemsize + 8 + S * (
                        AD * np.dtype(dtype).itemsize + 8) + 8
                    # (and 16 bytes of this member's commit counts)
                    check(mem.nbytes() == (hi - lo) * per_node + 16,
                          f"{tag}: nbytes {mem.nbytes()}, want {(hi - lo) * per_node + 16}")
                    rng = np.random.default_rng(1000 * width + S)
                    for i in range(ROUNDS):
                        run_round(mem, ref, rng, dtype, f"{tag} round {i}")
                    mem.snapshot()
                    check(mem.nbytes() == 2 * (hi - lo) * per_node + 16,
                          f"{tag}: snapshot nbytes")
                    kept = ref.copy()
                    for i in range(ROUNDS // 2):
                        run_round(mem, ref, rng, dtype, f"{tag} after snapshot {i}")
                    for i in range(2):  # the snapshot is kept: restored twice
                        mem.write([0], np.ones((1, MD), dtype), 1.0)  # dropped by restore
                        mem.restore()
                        ref = kept.copy()
                        compare(mem, ref, f"{tag}: restore {i}")
                        check(mem.staged() == (0, 0), f"{tag}: restore kept staged")
                        run_round(mem, ref, rng, dtype, f"{tag} after restore {i}")
                    check_neighbors(mem, ref, rng, dtype, tag)
                    if transport == "auto" and (width == size or (width == 1 and
                                                                  size <= 2)) and \
                            (size <= 2 or S == 3):
                        check_errors(store, mem, ref, dtype, tag)
                    mem.reset()
                    compare(mem, ReferenceNodeMemory(N, MD, AD, S, dtype), f"{tag}: reset")
                    check_batch_equality(mem, S, dtype, tag)
                    mem.remove()
                    check(store.variables() == [], f"{tag}: left {store.variables()}")
    comm.Barrier()
    left = ddstore.DDStore(comm, width=size)
    mem = tg.NodeMemory(left, "left", N, MD, AD)
    mem.post(np.arange(N), np.ones((N, AD), np.float32), 1.0)
    mem.commit(wait=False)
    _LEFT.append((left, mem))


run_main(main)
