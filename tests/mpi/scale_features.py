"""MPI program: width="auto" / DDStore.plan, prefetching loaders, load_npy bad input.

Run under mpiexec (inside ``timeout``) with 1-4 ranks: ``scale_features.py <tmpdir>
[fallback]``.  Checks

- ``DDStore.plan`` against a brute-force search over widths for many sizes and budgets,
  and ``DDStore(width="auto", data_nbytes=...)`` (the width, a round trip of data);
  bad budgets / sizes (on every rank, or on one rank only) raise the same error on
  every rank; a data size that fits no width raises DDStoreMemoryError; an explicit
  width whose share exceeds the budget is refused before anything is allocated;
- prefetch: WindowDataset (global and batch samplers, several epochs) and GraphDataset
  loaders yield exactly the batches of the plain loader, in the same order, at
  prefetch 1 and 3; an error while prefetching (an index out of range) surfaces in the
  caller's ``next`` at the right batch; prefetch with num_workers > 0 and bad prefetch
  values are refused; leaving a loop early is safe;
- load_npy: a file whose shape or dtype differs, a truncated file, a file truncated
  after opening (one rank only: agreed error naming the file and the block), Fortran
  order.

With ``fallback`` (run with MPI4PY_RC_THREAD_LEVEL=serialized) it checks that prefetch
over the RMA transport falls back to no prefetch with a PrefetchWarning and still yields
the right batches, and that shared-memory reads keep prefetching.
Exits non-zero on any failure.
"""
import os
import sys
import warnings

import numpy as np
from mpi4py import MPI

from _harness import check, expect_error, run_main

import torch

torch.set_num_threads(1)

import ddstore  # noqa: E402
from ddstore import DDStoreError, DDStoreIndexError, DDStoreMemoryError, DDStoreValueError  # noqa
from ddstore import spatiotemporal as st  # noqa: E402
from ddstore.prefetch import PrefetchLoader, PrefetchWarning  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
TMP = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
MODE = sys.argv[2] if len(sys.argv) > 2 else "all"


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def brute_plan(nbytes, budget):
    for w in divisors(size):
        if -(-nbytes // w) <= budget:
            return w
    return None


# --------------------------------------------------------------------- plan / auto
def test_plan():
    for nbytes in (0, 1, 999, 10 ** 6, 10 ** 6 + 1, 3 * 10 ** 6, 4 * 10 ** 6 + 7):
        for budget in (1, 10 ** 5, 250_000, 333_334, 5 * 10 ** 5, 10 ** 6, 2.5e6, 1e12):
            want = brute_plan(nbytes, budget)
            what = f"plan({nbytes}, budget={budget})"
            if want is None:
                expect_error(DDStoreMemoryError, ["does not fit", f"width={size}"],
                             lambda: ddstore.DDStore.plan(nbytes, memory_budget=budget),
                             what=what, agreed=True)
            else:
                got = ddstore.DDStore.plan(nbytes, memory_budget=budget, comm=comm)
                check(got == want, f"{what} = {got}, brute force {want}")
    # the default budget: 0.7 x available / ranks on the node; agreed on all ranks
    small = ddstore.DDStore.plan(1000)
    check(small == 1, f"plan(1000) with the default budget = {small}, expected 1")
    with ddstore.DDStore(comm, width="auto", data_nbytes=1000) as s:
        avail = ddstore.store.available_memory()
        expect = ddstore.store.MEMORY_BUDGET_FRACTION * avail / size
        check(abs(s.memory_budget - expect) < 0.05 * expect,
              f"default budget {s.memory_budget} vs 0.7 x {avail} / {size}")
        check(len(set(comm.allgather(s.memory_budget))) == 1, "budget agreed")
    expect_error(DDStoreMemoryError, ["does not fit", "memory budget"],
                 lambda: ddstore.DDStore.plan(10 ** 16), what="plan(10 PB)", agreed=True)
    # bad input, on every rank and on one rank only: every rank raises
    for bad in (0, -5, float("nan"), float("inf"), "1GB", True, [1]):
        expect_error(DDStoreValueError, ["memory_budget=", "positive"],
                     lambda: ddstore.DDStore.plan(100, memory_budget=bad),
                     what=f"plan budget {bad!r}")
        expect_error(DDStoreValueError, ["memory_budget="],
                     lambda: ddstore.DDStore(comm, width="auto", data_nbytes=100,
                                       memory_budget=bad),
                     what=f"DDStore budget {bad!r}")
    for bad in (-1, 1.5, "x", None):
        expect_error(DDStoreValueError, ["nbytes="], lambda: ddstore.DDStore.plan(bad),
                     what=f"plan nbytes {bad!r}")
    if size > 1:
        expect_error(DDStoreValueError, [f"rank {size - 1}", "memory_budget=-1"],
                     lambda: ddstore.DDStore.plan(100, memory_budget=-1 if rank == size - 1
                                            else 10 ** 6),
                     what="bad budget on one rank")
        expect_error(DDStoreValueError, ["differs"],
                     lambda: ddstore.DDStore.plan(100 + (rank == 1)),
                     what="nbytes differs")
        expect_error(DDStoreValueError, ["differ"],
                     lambda: ddstore.DDStore(comm, width="auto" if rank else 1,
                                       data_nbytes=100),
                     what="auto on some ranks only")
    expect_error(DDStoreValueError, ["data_nbytes"],
                 lambda: ddstore.DDStore(comm, width="auto"),
                 what="auto without data_nbytes")
    expect_error(DDStoreValueError, ["needs data_nbytes"],
                 lambda: ddstore.DDStore(comm, width=size, memory_budget=10 ** 9),
                 what="budget without data_nbytes")
    expect_error(DDStoreValueError, ["'auto'"],
                 lambda: ddstore.DDStore(comm, width="wide"), what="width='wide'")
    # width="auto": the planned width, and the store works
    for budget_rows in (10, 25, 100, 10 ** 6):
        rows, row_bytes = 100, 8 * 3
        nbytes = rows * row_bytes
        budget = budget_rows * row_bytes
        want = brute_plan(nbytes, budget)
        if want is None:
            expect_error(DDStoreMemoryError, ["does not fit"],
                         lambda: ddstore.DDStore(comm, width="auto", data_nbytes=nbytes,
                                           memory_budget=budget),
                         what=f"auto rows budget {budget_rows}", agreed=True)
            continue
        with ddstore.DDStore(comm, width="auto", data_nbytes=nbytes,
                             memory_budget=budget) as s:
            check(s.width == want, f"auto width {s.width}, expected {want}")
            check(s.memory_budget == budget, "memory_budget attribute")
            full = np.arange(rows * 3, dtype=np.float64).reshape(rows, 3)
            lo, hi = ddstore.partition(rows, s.group_size, s.group_rank)
            s.add("v", full[lo:hi])
            check(s.nbytes() <= budget, f"held {s.nbytes()} <= budget {budget}")
            idx = np.random.default_rng(rank).integers(0, rows, 50)
            check(np.array_equal(s.get_batch("v", idx), full[idx]), "auto store reads")
    # explicit width over the budget: refused up front, nothing created
    if size > 1:
        expect_error(DDStoreMemoryError,
                     ["width=1", f"width={brute_plan(4000, 1000) or ''}"],
                     lambda: ddstore.DDStore(comm, width=1, data_nbytes=4000, memory_budget=1000),
                     what="explicit width over budget", agreed=True)
    ok = ddstore.DDStore(comm, width=size, data_nbytes=4000, memory_budget=4000)
    check(ok.width == size, "explicit width within budget")
    ok.free()


# --------------------------------------------------------------------- prefetch
def batches_of(loader, epochs=1):
    out = []
    for e in range(epochs):
        st.set_epoch(loader, e)
        for b in loader:
            out.append(tuple(t.clone() for t in b) if isinstance(b, (tuple, list)) else b)
    return out


def same_windows(a, b):
    return len(a) == len(b) and all(torch.equal(x1, x2) and torch.equal(y1, y2)
                                    for (x1, y1), (x2, y2) in zip(a, b))


def window_dataset(store, name):
    rng = np.random.default_rng(3)
    raw = rng.standard_normal((301, 5, 2)).astype(np.float32)
    return st.WindowDataset(store, name, raw, horizon=4)


def test_prefetch_windows(transport, expect_depth):
    for width in divisors(size):
        with ddstore.DDStore(comm, width=width, transport=transport) as store:
            ds = window_dataset(store, "w")
            train = ds.splits()[0]
            for sampler in ("global", "batch"):
                plain = batches_of(train.loader(16, sampler=sampler, seed=5), epochs=2)
                for depth in (1, 3):
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        pl = train.loader(16, sampler=sampler, seed=5, prefetch=depth)
                    fallback = expect_depth == 0 and transport == "rma" and width > 1
                    want_depth = 0 if fallback else depth
                    warned = [w for w in caught if issubclass(w.category, PrefetchWarning)]
                    check(bool(warned) == fallback and all(
                        f"prefetch={depth} needs" in str(w.message) for w in warned),
                        f"{transport} w{width}: warnings "
                        f"{[str(w.message) for w in caught]}, fallback {fallback}")
                    check(isinstance(pl, PrefetchLoader) and pl.depth == want_depth,
                          f"{transport} w{width} {sampler}: depth {pl.depth}, "
                          f"expected {want_depth}")
                    check(len(pl) == len(plain) // 2, "len of prefetch loader")
                    # PrefetchLoader built directly: the same fallback (it had none)
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        direct = PrefetchLoader(train.loader(16, sampler=sampler, seed=5),
                                                depth)
                    told = [w for w in caught if issubclass(w.category, PrefetchWarning)]
                    # (named by its own argument: PrefetchLoader takes depth=)
                    check(bool(told) == fallback and direct.depth == want_depth and all(
                        str(w.message).startswith(f"PrefetchLoader: depth={depth} needs")
                        for w in told),
                          f"{transport} w{width}: PrefetchLoader(depth={depth}): depth "
                          f"{direct.depth}, warnings {[str(w.message) for w in caught]}")
                    got = batches_of(pl, epochs=2)
                    check(same_windows(got, plain), f"{transport} w{width} {sampler} "
                                                    f"prefetch={depth}: batches differ")
                    # leaving early: the iterator is dropped and waits for its reads
                    for k, _ in enumerate(pl):
                        if k == 1:
                            break
            # bad input
            expect_error(DDStoreValueError, ["prefetch=1", "num_workers=2"],
                         lambda: train.loader(8, prefetch=1, num_workers=2),
                         what="prefetch with workers")
            expect_error(DDStoreValueError, ["num_workers=1"],
                         lambda: train.loader(8, num_workers=1),
                         what="window loader workers")
            for bad in (-1, 1.5, "2", True):
                expect_error(DDStoreValueError, ["prefetch="],
                             lambda: train.loader(8, prefetch=bad),
                             what=f"prefetch={bad!r}")
            # an error in the background surfaces in next(), after the good batches
            base = torch.utils.data.DataLoader(
                train, batch_sampler=[list(range(8)), list(range(8, 16)),
                                      [0, len(train) + 3], [1]],
                collate_fn=st.batch_collate)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrefetchWarning)
                ahead = PrefetchLoader(base, 2)  # (0 where the rank falls back)
            it = iter(ahead)
            first = next(it), next(it)
            check(torch.equal(first[1][0], train.get_batch(list(range(8, 16)))[0]),
                  "batches before the error")
            expect_error(DDStoreIndexError, [str(len(train) + 3)], lambda: next(it),
                         what="prefetch error surfaces")
            if ahead.depth:  # (a plain DataLoader goes on to the next batch)
                expect_error(StopIteration, [], lambda: next(it),
                             what="iteration ends after error")
            store.remove("w")


def test_prefetch_graphs(transport, expect_depth):
    from graphs_common import tensor_sample
    from ddstore import graphs
    n = 37
    samples = [tensor_sample(i) for i in range(n)]
    for width in divisors(size):
        with ddstore.DDStore(comm, width=width, transport=transport) as store:
            ds = graphs.GraphDataset.from_samples(store, "g", samples, progress=False)
            smp = torch.utils.data.DistributedSampler(ds, num_replicas=size, rank=rank,
                                                      shuffle=True, seed=2)
            plain = list(ds.loader(5, sampler=smp))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PrefetchWarning)
                pl = ds.loader(5, sampler=smp, prefetch=2)
            got = list(pl)
            ok = len(got) == len(plain) and all(
                a.num_graphs == b.num_graphs and all(torch.equal(a[k], b[k])
                                                     for k in ("x", "edge_index", "y"))
                for a, b in zip(got, plain))
            check(ok, f"graphs {transport} w{width}: prefetched batches differ")
            order = list(smp)
            want = [ds.get_batch(order[i:i + 5]) for i in range(0, len(order), 5)]
            check(all(torch.equal(a.x, b.x) for a, b in zip(got, want)), "graph order")
            expect_error(DDStoreValueError, ["prefetch=1", "num_workers=1"],
                         lambda: ds.loader(5, prefetch=1, num_workers=1),
                         what="graphs prefetch with workers")
            it = iter(ds.loader(4, sampler=list(range(8)) + [n + 5], prefetch=1))
            first = [next(it), next(it)]
            check(first[1].num_graphs == 4, "graph batches before the error")
            expect_error(DDStoreIndexError, [str(n + 5)], lambda: next(it),
                         what="graphs prefetch error surfaces")
            store.remove("g")


# --------------------------------------------------------------------- load_npy
def test_load_npy():
    path = os.path.join(TMP, "series.npy")
    raw = np.random.default_rng(1).standard_normal((60, 4, 2)).astype(np.float32)
    if rank == 0:
        np.save(path, raw)
        np.save(os.path.join(TMP, "fortran.npy"), np.asfortranarray(raw[:, :, 0]))
        np.save(os.path.join(TMP, "two_d.npy"), raw[:, :, 0])
        with open(path, "rb") as fh:
            blob = fh.read()
        with open(os.path.join(TMP, "trunc.npy"), "wb") as fh:
            fh.write(blob[:len(blob) - 4 * 8 * 5])  # the last 5 steps missing
    comm.Barrier()
    s = st.load_npy(path, shape=(60, 4, 2), dtype=np.float32)
    check(np.array_equal(s.read(7, 31), raw[7:31]) and s.stats["bytes_read"] == 24 * 32,
          "load_npy blocks")
    s.close()
    s2 = st.load_npy(os.path.join(TMP, "two_d.npy"))
    check(s2.shape == (60, 4, 1) and np.array_equal(s2.read(0, 60)[:, :, 0], raw[:, :, 0]),
          "2-D npy")
    s2.close()
    expect_error(DDStoreValueError, ["series.npy", "(60, 4, 2)", "(60, 4, 3)"],
                 lambda: st.load_npy(path, shape=(60, 4, 3)), what="shape differs")
    expect_error(DDStoreValueError, ["float32", "float64"],
                 lambda: st.load_npy(path, dtype=np.float64), what="dtype differs")
    expect_error(DDStoreValueError, ["trunc.npy", "truncated", "from 55"],
                 lambda: st.load_npy(os.path.join(TMP, "trunc.npy")),
                 what="truncated file")
    expect_error(DDStoreValueError, ["Fortran"],
                 lambda: st.load_npy(os.path.join(TMP, "fortran.npy")),
                 what="fortran order")
    expect_error(DDStoreValueError, ["missing.npy"],
                 lambda: st.load_npy(os.path.join(TMP, "missing.npy")),
                 what="missing file")
    # a file that shrinks after opening: the block read names the file and the block;
    # in a WindowDataset every rank raises the same agreed error, nothing is left behind
    own = os.path.join(TMP, f"shrink{rank}.npy")
    np.save(own, raw)
    series = st.load_npy(own)
    if rank == size - 1:
        os.truncate(own, os.path.getsize(own) - 4 * 8 * 30)
    with ddstore.DDStore(comm, width=size) as store:
        msg = expect_error(DDStoreValueError,
                           [f"shrink{size - 1}.npy", "block of steps", "truncated"],
                           lambda: st.WindowDataset(store, "shr", series, horizon=3),
                           what="truncated after open")
        check(store.variables() == [], f"nothing left behind: {store.variables()}")
        ds = st.WindowDataset(store, "shr", raw, horizon=3)  # the store still works
        check(len(ds) == 60 - 5, "store usable after the error")
    series.close()
    del msg


def main():
    if MODE == "fallback":
        check(MPI.Query_thread() < MPI.THREAD_MULTIPLE, "fallback run needs a lower level")
        test_prefetch_windows("rma", 0)
        test_prefetch_windows("auto", None)
        test_prefetch_graphs("rma", 0)
    else:
        test_plan()
        test_load_npy()
        for transport in ("auto", "rma"):
            test_prefetch_windows(transport, None)
            test_prefetch_graphs(transport, None)


run_main(main, note=f"({MODE})")
