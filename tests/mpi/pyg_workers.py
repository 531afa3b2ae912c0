"""MPI program: PyG loaders with DataLoader worker processes (``num_workers > 0``) over
ddstore.pyg (issue 38, item 5).

Run under mpiexec (inside ``timeout``) on 1-2 ranks, or in-process on one rank
(tests/test_pyg_workers.py).  Width = all ranks (and 1 on 2 ranks):

- node-local stores (``transport="auto"`` on one node, and ``"shm"``): a
  ``NeighborLoader`` with ``num_workers=2`` (and 3) gives the batches of
  ``num_workers=0`` batch for batch (same sampler seed, same order: ``n_id``,
  ``edge_index``, ``e_id``, ``x``, ``y``), over two epochs, with ``shuffle=True`` (same
  torch seed), homogeneous and heterogeneous; each batch made in a worker process (its
  pid); ``LinkNeighborLoader`` (seed edges) and ``BidirectionalNeighborSampler`` the
  same; the loader's seed count after the epochs is the rank's own;
- ``transport="rma"``: the loader is refused at construction (``NeighborLoader``,
  ``LinkNeighborLoader``, ``BidirectionalNeighborSampler``) naming the transport and
  ``ddstore.prefetch.prefetch(loader, depth=2)``; ``num_workers=0`` is accepted;
  ``num_workers`` set after construction is refused at the worker's first batch, before
  any read (the same message);
- start methods ``spawn`` / ``forkserver``: refused at construction, naming ``fork``;
- the child-side guard, in a process forked from the rank (``os.fork``): a read of
  another member's rows under ``"rma"`` raises :class:`DDStoreStateError` ("needs MPI,
  and this process was forked") instead of calling ``MPI_Get``, and so do a collective
  call (``store.add``: the step's guard), the core's collectives called directly
  (``dds_add``, ``dds_sync``) and a per-row-lock read; the free at exit does nothing
  there and ``dds_free`` releases the child's copy without MPI (the rank's store works
  on); under a node-local store the child reads the other member's rows by load, equal
  to the parent's; a child that outlives the rank's remove of a variable (another added
  under its name) or free of the store is refused its reads (get, get_batch,
  get_range), not served the old rows.
"""
import gc
import os
import pickle

import numpy as np
import torch
from mpi4py import MPI

from _harness import Cases, check, expect_error, run_main

import ddstore  # noqa: E402
from ddstore import DDStoreStateError, DDStoreValueError  # noqa: E402
from ddstore import pyg as dpyg  # noqa: E402
from ddstore.pyg.workers import sync  # noqa: E402
from torch_geometric.data import Data, HeteroData  # noqa: E402
from torch_geometric.loader import LinkNeighborLoader, NeighborLoader  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
N, E = 60, 300
PREFETCH = "ddstore.prefetch.prefetch(loader, depth=2)"
cases = Cases()


def make_homo():
    g = torch.Generator().manual_seed(1)
    return Data(x=torch.randn(N, 3, generator=g), y=torch.arange(N),
                edge_index=torch.randint(0, N, (2, E), generator=g))


def make_hetero():
    g = torch.Generator().manual_seed(2)
    h = HeteroData()
    h["a"].x = torch.randn(30, 2, generator=g)
    h["b"].x = torch.randn(20, 2, generator=g)
    h["a", "ab", "b"].edge_index = torch.stack([torch.randint(0, 30, (90,), generator=g),
                                                torch.randint(0, 20, (90,), generator=g)])
    h["b", "ba", "a"].edge_index = torch.stack([torch.randint(0, 20, (70,), generator=g),
                                                torch.randint(0, 30, (70,), generator=g)])
    return h


def _pid(batch):
    """A transform: the process that made the batch (a worker's, with workers)."""
    batch.pid = torch.tensor([os.getpid()])
    return batch


def _homo_fields(b):
    return [b.n_id, b.edge_index, b.e_id, b.x, b.y]


def _hetero_fields(b):
    out = []
    for t in ("a", "b"):
        out += [b[t].n_id, b[t].x]
    for et in (("a", "ab", "b"), ("b", "ba", "a")):
        out += [b[et].edge_index, b[et].e_id]
    return out


def _epochs(make_loader, fields, epochs=2):
    """Every batch of ``epochs`` epochs of a new loader: (fields, pid) per batch, the
    torch seed set before each epoch (shuffle draws from it); and the loader."""
    loader = make_loader()
    out = []
    for epoch in range(epochs):
        torch.manual_seed(100 + epoch)
        out.append([([f.clone() for f in fields(b)], int(b.pid[0])) for b in loader])
    return out, loader


def _same(a, b, tag):
    """Epochs ``a`` (num_workers=0) and ``b`` (workers) batch for batch."""
    check(len(a) == len(b) and all(len(x) == len(y) for x, y in zip(a, b)),
          f"{tag}: batch counts differ: {[len(x) for x in a]} vs {[len(y) for y in b]}")
    for e, (x, y) in enumerate(zip(a, b)):
        bad = [i for i, (p, q) in enumerate(zip(x, y)) if len(p[0]) != len(q[0]) or not all(
            torch.equal(u, v) for u, v in zip(p[0], q[0]))]
        check(not bad, f"{tag}: epoch {e}: batches {bad} differ from num_workers=0")
    me = os.getpid()
    check(all(p[1] == me for x in a for p in x), f"{tag}: num_workers=0 made a batch "
                                                 f"outside this process")
    check(all(q[1] != me for y in b for q in y), f"{tag}: a batch with workers was made "
                                                 f"in the rank's own process")


def _seeds():
    return torch.arange(rank, N, size)


def node_loaders(store, tag):
    data = make_homo()
    fs, gs = dpyg.from_pyg(store, data, name="g")
    for workers, shuffle in ((2, False), (2, True), (3, False)):
        def make(nw, shuffle=shuffle):
            def loader():
                s = dpyg.NeighborSampler(gs, [3, 2], seed=7)
                return NeighborLoader((fs, gs), num_neighbors=[3, 2], batch_size=4,
                                      input_nodes=_seeds(), shuffle=shuffle,
                                      neighbor_sampler=s, num_workers=nw,
                                      transform=_pid)
            return loader
        plain, l0 = _epochs(make(0), _homo_fields)
        forked, l2 = _epochs(make(workers), _homo_fields)
        sub = f"{tag} NeighborLoader workers={workers} shuffle={shuffle}"
        _same(plain, forked, sub)
        sync(l2.node_sampler)  # what the rank's next draw (or fork) does
        check(l2.node_sampler._calls == l0.node_sampler._calls == 2 * len(l0),
              f"{sub}: the rank's count after the epochs {l2.node_sampler._calls}, "
              f"num_workers=0: {l0.node_sampler._calls}")
        for epoch in plain:  # the features are the data's
            check(all(torch.equal(p[0][3], data.x[p[0][0]]) for p in epoch),
                  f"{sub}: x is not data.x[n_id]")
    # the rank's own loader goes on where the workers left off: the 3rd epoch alike
    s0, s2 = dpyg.NeighborSampler(gs, [3, 2], seed=9), dpyg.NeighborSampler(gs, [3, 2],
                                                                            seed=9)
    l0 = NeighborLoader((fs, gs), num_neighbors=[3, 2], batch_size=5, input_nodes=_seeds(),
                        neighbor_sampler=s0, transform=_pid)
    l2 = NeighborLoader((fs, gs), num_neighbors=[3, 2], batch_size=5, input_nodes=_seeds(),
                        neighbor_sampler=s2, num_workers=2, transform=_pid)
    list(l0)
    list(l2)
    l2b = NeighborLoader((fs, gs), num_neighbors=[3, 2], batch_size=5,
                         input_nodes=_seeds(), neighbor_sampler=s2, transform=_pid)
    a, b = [_homo_fields(x) for x in l0], [_homo_fields(x) for x in l2b]
    check(len(a) == len(b) and all(all(torch.equal(u, v) for u, v in zip(p, q))
                                   for p, q in zip(a, b)),
          f"{tag}: after an epoch with workers, the rank's own batches differ from "
          f"those after an epoch without")


def hetero_loader(store, tag):
    h = make_hetero()
    hfs, hgs = dpyg.from_hetero(store, h, name="h")

    def make(nw):
        def loader():
            s = dpyg.NeighborSampler(hgs, [2, 2], seed=11)
            return NeighborLoader((hfs, hgs), num_neighbors=[2, 2], batch_size=3,
                                  input_nodes=("a", torch.arange(rank, 30, size)),
                                  neighbor_sampler=s, num_workers=nw, transform=_pid)
        return loader
    plain, _ = _epochs(make(0), _hetero_fields)
    forked, _ = _epochs(make(2), _hetero_fields)
    _same(plain, forked, f"{tag} hetero NeighborLoader workers=2")


def link_loaders(store, tag):
    data = make_homo()
    fs, gs = dpyg.from_pyg(store, data, name="gl")
    label = data.edge_index[:, rank::size][:, :40]

    def make(nw):
        def loader():
            s = dpyg.NeighborSampler(gs, [2, 2], seed=13)
            return LinkNeighborLoader((fs, gs), num_neighbors=[2, 2], batch_size=6,
                                      edge_label_index=(None, label), neighbor_sampler=s,
                                      num_workers=nw, transform=_pid)
        return loader

    def fields(b):
        return _homo_fields(b)[:4] + [b.edge_label_index]
    plain, _ = _epochs(make(0), fields)
    forked, _ = _epochs(make(2), fields)
    _same(plain, forked, f"{tag} LinkNeighborLoader workers=2")
    # negative sampling draws from torch's generator (seeded per worker): it runs
    l2 = LinkNeighborLoader((fs, gs), num_neighbors=[2], batch_size=6,
                            edge_label_index=(None, label), neg_sampling="binary",
                            neighbor_sampler=dpyg.NeighborSampler(gs, [2], seed=1),
                            num_workers=2)
    sizes = [int(b.edge_label.numel()) for b in l2]
    check(sizes and all(s == 12 for s in sizes[:-1]),
          f"{tag}: binary negatives from workers: label sizes {sizes}")


def bidirectional(store, tag):
    data = make_homo()
    fs, gs = dpyg.from_pyg(store, data, name="gb")
    gs.build_backward()

    def make(nw):
        def loader():
            s = dpyg.BidirectionalNeighborSampler(gs, [2, 2], seed=17)
            return NeighborLoader((fs, gs), num_neighbors=[2, 2], batch_size=4,
                                  input_nodes=_seeds(), neighbor_sampler=s,
                                  num_workers=nw, transform=_pid)
        return loader
    plain, _ = _epochs(make(0), lambda b: [b.n_id, b.edge_index, b.x])
    forked, _ = _epochs(make(2), lambda b: [b.n_id, b.edge_index, b.x])
    _same(plain, forked, f"{tag} BidirectionalNeighborSampler workers=2")


def refusals(store, tag):
    """``store``: transport rma (its reads need MPI)."""
    data = make_homo()
    fs, gs = dpyg.from_pyg(store, data, name="gr")
    s = dpyg.NeighborSampler(gs, [2], seed=1)
    want = ["num_workers=2", "transport='rma'", "must make no MPI call", PREFETCH]
    expect_error(DDStoreValueError, ["NeighborLoader"] + want, NeighborLoader, (fs, gs),
                 num_neighbors=[2], batch_size=4, input_nodes=_seeds(), neighbor_sampler=s,
                 num_workers=2, what=f"{tag} NeighborLoader rma")
    expect_error(DDStoreValueError, ["LinkNeighborLoader"] + want, LinkNeighborLoader,
                 (fs, gs), num_neighbors=[2], batch_size=4,
                 edge_label_index=(None, data.edge_index[:, :8]), neighbor_sampler=s,
                 num_workers=2, what=f"{tag} LinkNeighborLoader rma")
    gs.build_backward()
    expect_error(DDStoreValueError, want, NeighborLoader, (fs, gs), num_neighbors=[2],
                 batch_size=4, input_nodes=_seeds(), num_workers=2,
                 neighbor_sampler=dpyg.BidirectionalNeighborSampler(gs, [2]),
                 what=f"{tag} BidirectionalNeighborSampler rma")
    # without workers: accepted, and it samples
    loader = NeighborLoader((fs, gs), num_neighbors=[2], batch_size=4, input_nodes=_seeds(),
                            neighbor_sampler=s)
    check(next(iter(loader)).n_id.numel() >= 4, f"{tag}: num_workers=0 over rma")
    # num_workers set after construction: the worker refuses before any read
    loader.num_workers, loader.prefetch_factor = 2, 2
    it = iter(loader)
    msg = expect_error(DDStoreStateError, ["forked from this rank", "transport='rma'",
                                           PREFETCH], lambda: next(it),
                       what=f"{tag} workers set after construction")
    check(msg is None or "DataLoader worker process" in msg,
          f"{tag}: not raised from a worker: {msg}")
    # its workers ended now: left in the exception's frames to the garbage collector,
    # the iterator's queues are finalized before its __del__ tells the workers to end,
    # and each waits out torch's 5 s join (10 s of this program before)
    it._shutdown_workers()
    del it
    gc.collect()


def start_methods(store, tag):
    data = make_homo()
    fs, gs = dpyg.from_pyg(store, data, name="gm")
    s = dpyg.NeighborSampler(gs, [2], seed=1)
    for method in ("spawn", "forkserver"):
        expect_error(DDStoreValueError, [f"start method is {method!r}",
                                         "multiprocessing_context='fork'", PREFETCH],
                     NeighborLoader, (fs, gs), num_neighbors=[2], batch_size=4,
                     input_nodes=_seeds(), neighbor_sampler=s, num_workers=2,
                     multiprocessing_context=method, what=f"{tag} {method}")
    loader = NeighborLoader((fs, gs), num_neighbors=[2], batch_size=4, input_nodes=_seeds(),
                            neighbor_sampler=s, num_workers=2,
                            multiprocessing_context="fork")
    check(len(list(loader)) == len(loader), f"{tag}: multiprocessing_context='fork'")
    expect_error(DDStoreStateError, ["cannot be pickled", "multiprocessing_context='fork'",
                                     PREFETCH], pickle.dumps, s, what=f"{tag} pickle")


def _in_child(fn):
    """Run ``fn()`` in a process forked from this rank; returns what it returned, or
    ``("raised", class name, message)``.  The child ends by os._exit (no exit hooks).
    The caller runs ``gc.collect()`` before its first fork (a loader's iterator left to
    the collector would be collected, and complain: not its parent, in the child): once,
    not per fork (0.17 s each with torch and PyG loaded)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no MPI call here
        os.close(r)
        try:
            out = ("returned", fn())
        except BaseException as exc:  # noqa: BLE001 -- reported to the parent
            out = ("raised", type(exc).__name__, str(exc))
        try:
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(got)


def child_guard(store, tag, transport):
    from ddstore import _core
    gc.collect()  # no loader is made below: once for every _in_child here
    n, g = 8 * store.group_size, store.group_rank
    store.add("v", np.arange(8 * g, 8 * g + 8, dtype=np.int64).reshape(8, 1) * 10)
    other = [i for i in range(n) if i // 8 != store.group_rank]  # other members' rows
    mine = list(range(8 * g, 8 * g + 8))
    check(not _core.forked(), f"{tag}: the rank itself counts as forked")
    got = _in_child(lambda: (_core.forked(), store.get_batch("v", mine).ravel().tolist()))
    check(got == ("returned", (True, [10 * i for i in mine])),
          f"{tag}: a forked child reading its own rows: {got}")
    got = _in_child(lambda: store.add("w", np.zeros(4, np.float32)))
    check(got[0] == "raised" and got[1] == "DDStoreStateError" and
          "add('w') in a process forked from an MPI rank" in got[2],
          f"{tag}: a collective call in a forked child: {got}")
    for call in ("sync", "add"):
        def direct(call=call):
            core = store._core
            return core.sync() if call == "sync" else core.add("z", 1, 8)
        got = _in_child(direct)
        check(got[0] == "raised" and got[1] == "DDStoreStateError" and
              "needs MPI, and this process was forked from an MPI rank" in got[2],
              f"{tag}: the core's {call} in a forked child: {got}")
    # the exit of a forked child frees nothing (no collective free at exit), and the
    # core's free there releases the child's copy without MPI
    from ddstore import _lifecycle
    got = _in_child(lambda: (_lifecycle._free_live_stores(), store.freed))
    check(got == ("returned", (None, False)), f"{tag}: the free at exit in a forked "
                                              f"child: {got}")
    got = _in_child(lambda: (store._core.free(), store._core.alive))
    check(got == ("returned", (None, False)), f"{tag}: dds_free in a forked child: {got}")
    got = _in_child(lambda: store.read_ranges("v", [0], [n], per_row_lock=True)
                    .ravel().tolist())
    if transport == "rma":
        check(got[0] == "raised" and got[1] == "DDStoreStateError" and
              "a read with DDS_READ_PER_ROW_LOCK needs MPI" in got[2],
              f"{tag}: a per-row-lock read in a forked child: {got}")
    else:  # no MPI window: the flag reads by load
        check(got == ("returned", [10 * i for i in range(n)]),
              f"{tag}: a per-row-lock read by load in a forked child: {got}")
    if other:
        got = _in_child(lambda: store.get_batch("v", other).ravel().tolist())
        if transport == "rma":
            check(got[0] == "raised" and got[1] == "DDStoreStateError" and
                  "(not in this node's shared memory: MPI_Get) needs MPI, and this "
                  "process was forked" in got[2],
                  f"{tag}: an MPI_Get in a forked child was not refused: {got}")
        else:
            check(got == ("returned", [10 * i for i in other]),
                  f"{tag}: a forked child reading node-local members' rows: {got}")
    # the parent goes on: reads and collective calls work
    check(store.get_batch("v", list(range(n))).ravel().tolist() == [10 * i for i in
                                                                   range(n)],
          f"{tag}: the rank's own read after the children")
    store.remove("v")


@cases("node-local stores: workers give the batches of num_workers=0")
def _(t):
    # every loader at width = ranks over shared memory; the node loaders also at width
    # 1 and with transport="shm" (the same reads by load: the same path in the workers)
    runs = [(size, "auto", True), (size, "shm", False)] + ([(1, "auto", False)]
                                                           if size > 1 else [])
    for width, transport, every in runs:
        with ddstore.DDStore(comm, width=width, transport=transport) as store:
            tag = f"w{width}-{transport}"
            check(store.shm_peers == store.group_size - 1, f"{tag}: not node-local")
            node_loaders(store, tag)
            if every:
                hetero_loader(store, tag)
                link_loaders(store, tag)
                bidirectional(store, tag)


@cases("rma: refused at construction, and by the worker when set later")
def _(t):
    with ddstore.DDStore(comm, width=size, transport="rma") as store:
        refusals(store, f"w{size}-rma")


@cases("start methods other than fork refused")
def _(t):
    with ddstore.DDStore(comm, width=size) as store:
        start_methods(store, f"w{size}-auto")


@cases("workers set after a loader built without: refused, not repeating draws")
def _(t):
    """Over shared memory a loader built with num_workers=0 and given workers after:
    each worker counted its sampler's draws on its own, so the workers repeated each
    other's keys and every epoch the first one's (no error); the worker refuses."""
    with ddstore.DDStore(comm, width=size) as store:
        fs, gs = dpyg.from_pyg(store, make_homo(), name="late")
        loader = NeighborLoader((fs, gs), num_neighbors=[2], batch_size=4,
                                input_nodes=_seeds(),
                                neighbor_sampler=dpyg.NeighborSampler(gs, [2], seed=1))
        loader.num_workers, loader.prefetch_factor = 2, 2
        it = iter(loader)
        expect_error(DDStoreStateError, ["DataLoader worker", "a seeded sampler's loader "
                                         "was built with fewer workers (0); set "
                                         "num_workers when building the NeighborLoader"],
                     lambda: next(it), what=f"w{size}: workers set after construction")
        it._shutdown_workers()  # (as in refusals)
        del it
        gc.collect()
        # unseeded (torch's generator, which the DataLoader seeds per worker): taken
        loader = NeighborLoader((fs, gs), num_neighbors=[2], batch_size=4,
                                input_nodes=_seeds(),
                                neighbor_sampler=dpyg.NeighborSampler(gs, [2]))
        loader.num_workers, loader.prefetch_factor = 2, 2
        got = [b.n_id.numel() for b in loader]
        check(len(got) == len(loader) and min(got) >= 1,
              f"w{size}: unseeded sampler with workers set after: {got}")


def _outliving_child(reads, then):
    """Fork a child that runs ``reads()`` (filling its views of the chunks), waits while
    the parent runs ``then()``, and runs ``reads()`` again: what a persistent DataLoader
    worker meets.  Returns the child's two results, each ``("returned", value)`` or
    ``("raised", class name, message)``."""
    def attempt():
        try:
            return ("returned", reads())
        except BaseException as exc:  # noqa: BLE001 -- reported to the parent
            return ("raised", type(exc).__name__, str(exc))
    go_r, go_w = os.pipe()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no MPI call here
        os.close(r)
        os.close(go_w)
        try:
            first = attempt()
            os.write(w, b"1")  # the parent may change the store now
            os.read(go_r, 1)
            os.write(w, pickle.dumps((first, attempt())))
        finally:
            os._exit(0)
    os.close(w)
    os.close(go_r)
    with os.fdopen(r, "rb") as f:
        f.read(1)
        then()
        os.write(go_w, b"1")
        os.close(go_w)
        got = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(got)


def outlived(tag):
    """A child forked before the rank removed a variable (and added another under its
    name) or freed the store is refused its reads, by every read path (the one-row get
    copies node-local rows by numpy views in the rank; not in a child), instead of
    reading the old rows."""
    gc.collect()
    with ddstore.DDStore(comm, width=size) as store:
        n, g = 4 * store.group_size, store.group_rank
        store.add("v", np.arange(4 * g, 4 * g + 4, dtype=np.int64) * 10)
        reads = (lambda: int(store.get("v", n - 1)),
                 lambda: store.get_batch("v", list(range(n))).tolist(),
                 lambda: store.get_range("v", 0, n).tolist())

        def renew():
            store.remove("v")
            store.add("v", np.full(4, -1, np.int64))
        for i, read in enumerate(reads):
            first, second = _outliving_child(read, renew)
            check(first[0] == "returned", f"{tag}: read {i} in the child: {first}")
            check(second[0] == "raised" and second[1] == "DDStoreStateError" and
                  "variable 'v' (id" in second[2] and "was removed by the rank this "
                  "process was forked from" in second[2],
                  f"{tag}: read {i} in a child after the rank's remove: {second}")
        store.add("u", np.arange(4, dtype=np.int64))
        first, second = _outliving_child(lambda: int(store.get("u", 0)), store.free)
    check(first == ("returned", 0) and second[0] == "raised" and
          "store has been freed by the rank this process was forked from" in second[2],
          f"{tag}: a read in a child after the rank's free: {first} {second}")
    # rows the rank rewrites (update, then sync): seen where the chunks are shared
    # memory (node-local members), refused where the rank's chunk is private (a rank
    # with no node-local member: MPI gives it private memory, and the child's copy-on-
    # write copy went on giving the old rows); a variable not written reads on
    for width in sorted({1, size}):
        with ddstore.DDStore(comm, width=width) as store:
            n = 4 * width
            store.add("a", np.arange(4, dtype=np.int64))
            store.add("b", np.arange(4, dtype=np.int64))

            def rewrite():
                store.update("a", np.arange(4, dtype=np.int64) + 100)
                store.sync()
            first, second = _outliving_child(
                lambda: store.get_range("a", 0, n).tolist(), rewrite)
            new = [100 + i % 4 for i in range(n)]
            if store.shm_peers:
                check(second == ("returned", new), f"{tag} w{width}: a child after the "
                                                   f"rank's update (shared): {second}")
            else:
                check(second[0] == "raised" and "wrote its rows since the fork" in second[2]
                      and "variable 'a'" in second[2],
                      f"{tag} w{width}: a child after the rank's update (private): {second}")
            first, second = _outliving_child(
                lambda: store.get_range("b", 0, n).tolist(), rewrite)
            check(second == ("returned", [i % 4 for i in range(n)]),
                  f"{tag} w{width}: a variable the rank did not write, in a child: {second}")


@cases("the forked child's guard: no MPI call")
def _(t):
    for transport in ("auto", "rma"):
        with ddstore.DDStore(comm, width=size, transport=transport) as store:
            child_guard(store, f"w{size}-{transport}", transport)
    outlived(f"w{size}")


def main():
    cases.run()


if __name__ == "__main__":
    run_main(main)
