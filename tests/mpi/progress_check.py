"""Reads of a computing rank's rows do not wait for it (issue 36, item 2): the progress
agent (csrc/progress.c) answers them.  Rank 1 computes for COMPUTE seconds without an
MPI call while rank 0 reads 64-row batches of rank 1's rows; every read must finish
well before rank 1 is done (the slowest under READ_BOUND seconds), and every byte read
is the byte written.  With ``off`` as argument the agent is off and the program checks
the opposite where the network needs the target's progress (MPICH's ch4:ofi over TCP:
``between`` as second argument): a read waits for rank 1 — proof that the
check above can fail.  The thread-level refusal: a store whose rows are read over MPI
refuses MPI_THREAD_SERIALIZED with a message naming the fix, alike on every rank
(``serialized`` as argument: MPI is then initialised at that level).

    MPIR_CVAR_CH4_NETMOD=ofi MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=tcp FI_TCP_IFACE=lo \\
        timeout 120 mpiexec -n 2 python tests/mpi/progress_check.py [on|off|serialized] [between]
"""
import os
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "on"
BETWEEN = "between" in sys.argv[2:]
if MODE == "serialized":
    import mpi4py
    mpi4py.rc.thread_level = "serialized"
os.environ["DDSTORE_PROGRESS"] = "off" if MODE == "off" else "auto"

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from _harness import check, expect_error, run_main  # noqa: E402

import ddstore  # noqa: E402
from ddstore import _core  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
COMPUTE, READ_BOUND = 3.0, 1.0
N = 4096


def written(idx):
    """The rows ``idx`` as written: row i holds i * 16 + [0, 16)."""
    return (idx[:, None] * 16 + np.arange(16)).astype(np.float32)


def compute(seconds):
    """A training step's stand-in: numpy work, no MPI call."""
    a = np.ones((200, 200))
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = a @ a
        a /= a.max()


def check_pyddstore_serialized():
    """The original DDStore's users (HydraGNN's DistDataset, its demos) lower the
    thread level to "serialized" and read from a thread pool (HydraGNN's loader):
    PyDDStore is then built without the progress agent, as the original (no refusal),
    and reads from several threads take turns (MPICH asserted in MPI_Win_flush between
    nodes when two threads read at once)."""
    from concurrent.futures import ThreadPoolExecutor
    import pyddstore
    os.environ.pop("DDSTORE_PROGRESS", None)
    store = pyddstore.PyDDStore(comm, transport="rma")
    check(not store.store.progress and "DDSTORE_PROGRESS" not in os.environ,
          "PyDDStore under MPI_THREAD_SERIALIZED: no agent, the environment unchanged")
    store.add("x", written(np.arange(rank * N, (rank + 1) * N)))
    store.epoch_begin()

    def read(i):
        buf = np.zeros((1, 16), np.float32)
        store.get("x", buf, i)
        rows = np.zeros((3, 16), np.float32)
        idx = [i, (i * 7) % (N * size), 0]
        store.get_batch("x", rows, idx)
        return buf.tobytes() == written(np.array([i])).tobytes() and \
            rows.tobytes() == written(np.array(idx)).tobytes()
    with ThreadPoolExecutor(4) as pool:
        ok = list(pool.map(read, list(range(0, N * size, 7)) * 2))
    check(all(ok), f"threaded reads under MPI_THREAD_SERIALIZED: {ok.count(False)} of "
                   f"{len(ok)} differ")
    store.epoch_end()
    comm.Barrier()
    store.free()


def check_store_serialized():
    """Two plain DDStores under MPI_THREAD_SERIALIZED (the agent off) read from 4
    threads at once by every read call, each thread alternating between them: reads
    that call MPI take turns in the core, whatever their store (they crashed the
    process, 12 of 15 runs: MPICH's yaksa or RMA assertions, or SIGSEGV; with a lock per
    store, two stores crashed or hung 5 of 5), every byte as written."""
    import threading
    with ddstore.DDStore(comm, transport="rma", progress="off") as one, \
            ddstore.DDStore(comm, transport="rma", progress="off") as two:
        for st in (one, two):
            st.add("t", written(np.arange(rank * N, (rank + 1) * N)))
        bad = []

        def work(t):
            rng = np.random.default_rng(t + 10 * rank)
            for k in range(300):
                store = (one, two)[(k + t) % 2]
                idx = rng.integers(0, N * size, 64)
                a = int(idx[0])
                got = [store.get_batch("t", idx), store.get("t", a)[None],
                       store.get_range("t", a, min(5, N * size - a)),
                       store.get_many([("t", idx[:7]), ("t", idx[7:9])])[1]]
                want = [written(idx), written(idx[:1]), written(np.arange(a, min(
                    a + 5, N * size))), written(idx[7:9])]
                bad.extend(i for i, (g, w) in enumerate(zip(got, want))
                           if g.tobytes() != w.tobytes())
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not bad, f"threaded DDStore reads under MPI_THREAD_SERIALIZED: {len(bad)} "
                       f"differ")
        comm.Barrier()


def check_pyddstore_epochs():
    """HydraGNN's loop between nodes without the agent (an ``add``-only PyDDStore under
    "serialized", or with DDSTORE_PROGRESS=off): epoch_begin, rank 0 reads the last
    rank's rows, epoch_end, then the others wait for rank 0 outside MPI (torch's
    all_reduce over gloo in HydraGNN; a file here).  The last rank's epoch_end is a
    round, as the original's fence, during which MPI answers rank 0's read (rank 0 waited
    for ever, the others for it).  Epochs opened twice or closed unopened are refused
    alike on every rank, as the original's "Fence already activated"."""
    import tempfile
    import pyddstore
    store = pyddstore.PyDDStore(comm, transport="rma")
    store.add("e", written(np.arange(rank * N, (rank + 1) * N)))
    where = comm.bcast(tempfile.mkdtemp() if rank == 0 else None)
    last = size - 1
    for step in range(3):
        store.epoch_begin()
        if rank == 0:
            idx = np.array([last * N + step])
            buf = np.zeros((1, 16), np.float32)
            store.get("e", buf, int(idx[0]))
            check(buf.tobytes() == written(idx).tobytes(), f"epoch {step}: row differs")
        store.epoch_end()
        marker = os.path.join(where, str(step))
        if rank == 0:
            open(marker, "w").close()
        else:  # outside MPI, bounded: a failed check instead of a hang
            t0 = time.perf_counter()
            while not os.path.exists(marker) and time.perf_counter() - t0 < 20:
                time.sleep(0.01)
            check(os.path.exists(marker), f"epoch {step}: rank 0's read of rank {last}'s "
                                          f"rows not answered within 20 s")
    comm.Barrier()
    store.epoch_begin()
    expect_error(ddstore.DDStoreStateError, "an epoch is open already", store.epoch_begin,
                 agree=True, agreed=True)
    store.epoch_end()
    expect_error(ddstore.DDStoreStateError, "no epoch is open", store.epoch_end,
                 agree=True, agreed=True)
    store.free()


def check_flushing_rank_serves(s, threads=4):
    """Rank 1 computes while ``threads`` threads of it read rank 0's rows one-sided
    (64 rows: under DDSTORE_SERVE_MIN_PIECES), one flush after another; rank 0 reads
    5000 of rank 1's rows at a time, by message, which rank 1's agent answers.  The
    agent stood back while any thread of its rank flushed, so these reads waited until
    the readers stopped (1-15 s)."""
    import threading
    comm.Barrier()
    if rank == 1:
        stop, bad = threading.Event(), []

        def reader(k):
            g = np.random.default_rng([1, k])
            while not stop.is_set():
                idx = g.integers(0, N, 64)
                if s.get_batch("x", idx).tobytes() != written(idx).tobytes():
                    bad.append(k)
        pool = [threading.Thread(target=reader, args=(k,)) for k in range(threads)]
        for th in pool:
            th.start()
        compute(COMPUTE)
        stop.set()
        for th in pool:
            th.join()
        check(not bad, f"reader threads {sorted(set(bad))} read wrong rows")
    elif rank == 0:
        g = np.random.default_rng(1)
        lat, t0 = [], time.perf_counter()
        while time.perf_counter() - t0 < COMPUTE * 0.8:
            idx = g.integers(N, 2 * N, 5000)
            a = time.perf_counter()
            got = s.get_batch("x", idx)
            lat.append(time.perf_counter() - a)
            check(got.tobytes() == written(idx).tobytes(), "rows read by message differ")
        print(f"mode {MODE}: {len(lat)} reads by message of a rank whose {threads} threads "
              f"flush, max {max(lat) * 1e3:.0f} ms", flush=True)
        check(max(lat) < READ_BOUND, f"a read by message waited {max(lat):.2f} s while "
                                     f"the owner's threads read one-sided "
                                     f"({len(lat)} reads)")
    comm.Barrier()


def main():
    if MODE == "serialized":
        expect_error(ddstore.DDStoreValueError, ["MPI_THREAD_MULTIPLE",
                                                 "DDSTORE_PROGRESS=off"],
                     ddstore.DDStore, comm, transport="rma", agree=True, agreed=True)
        # forced on: the refusal says so (it spoke of members on other nodes)
        expect_error(ddstore.DDStoreValueError, ["the progress agent was asked for "
                                                 "(DDSTORE_PROGRESS=on or progress='on')",
                                                 "MPI_THREAD_MULTIPLE"],
                     ddstore.DDStore, comm, transport="rma", progress="on", agree=True,
                     agreed=True)
        with ddstore.DDStore(comm, transport="rma", progress="off") as s:
            check(not s.progress, "DDStore(progress='off'): no agent")
        expect_error(ddstore.DDStoreValueError, ["progress='of'", "'auto', 'on', 'off'"],
                     ddstore.DDStore, comm, transport="rma", progress="of", agree=True,
                     agreed=True)
        os.environ["DDSTORE_PROGRESS"] = "off"
        with ddstore.DDStore(comm, transport="rma") as s:
            check(not s.progress, "DDSTORE_PROGRESS=off: no agent")
        check_store_serialized()
        check_pyddstore_serialized()
        check_pyddstore_epochs()
        return
    with ddstore.DDStore(comm, width=size, transport="rma") as s:
        # auto: on where a group member is on another node (between nodes, here)
        check(s.progress == (MODE == "on" and size > 1 and BETWEEN),
              f"agent running: {s.progress} (mode {MODE}, between nodes: {BETWEEN})")
        # between nodes every member is on another: a read waits for its owner without
        # the agent (inside a node, MPI_Get needs nothing of the target)
        check(s.reads_wait == (size > 1 and BETWEEN and not s.progress),
              f"reads_wait {s.reads_wait} (agent {s.progress}, {size} ranks)")
        rows = written(np.arange(rank * N, (rank + 1) * N))
        s.add("x", rows)
        # every rank reads the others' rows first, one-sided and (between nodes) by
        # message: its own waits inside MPI, during which its agent stands back, must
        # leave the agent polling afterwards (rank 1's answers the reads below)
        rng = np.random.default_rng(rank)
        for other in range(size):
            for m in (64, 5000):
                idx = rng.integers(other * N, (other + 1) * N, m)
                check(s.get_batch("x", idx).tobytes() == written(idx).tobytes(),
                      f"{m} rows of rank {other} differ from the rows written")
        comm.Barrier()
        if rank == 1:
            compute(COMPUTE)
        elif rank == 0 and size > 1:
            lat, bad = [], 0
            rng = np.random.default_rng(0)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < COMPUTE * 0.8:
                idx = rng.integers(N, 2 * N, 64)
                a = time.perf_counter()
                got = s.get_batch("x", idx)
                lat.append(time.perf_counter() - a)
                bad += int(got.tobytes() != written(idx).tobytes())
            lat = np.array(lat)
            print(f"mode {MODE}: {len(lat)} reads, first {lat[0] * 1e6:.0f} us, p50 "
                  f"{np.percentile(lat, 50) * 1e6:.0f} us, p99 "
                  f"{np.percentile(lat, 99) * 1e6:.0f} us, max {lat.max() * 1e6:.0f} us; "
                  f"agent {_core.progress_stats()}", flush=True)
            check(bad == 0, f"{bad} reads differ from the rows written")
            if MODE == "on":
                check(lat.max() < READ_BOUND and len(lat) > 10,
                      f"a read waited {lat.max():.2f} s for the computing rank "
                      f"({len(lat)} reads)")
            elif BETWEEN:  # (the first read may still meet rank 1 leaving the barrier)
                check(lat.max() > COMPUTE * 0.5, f"without the agent the slowest read took "
                                                 f"{lat.max():.3f} s: the network did not "
                                                 f"need the target's progress")
        comm.Barrier()
        if MODE == "on" and BETWEEN and size > 1:
            check_flushing_rank_serves(s)
    if MODE == "off":  # the agent off by DDSTORE_PROGRESS, at MPI_THREAD_MULTIPLE
        check_pyddstore_epochs()


run_main(main)
