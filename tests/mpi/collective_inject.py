"""Every collective entry point of the package, found in the code, fails alike when its
local part raises on one rank (issue 35; docs/design.md, rule 1).

The entry points are not a hand-kept list: :func:`named_steps` reads the package's
source (AST) for every step that begins a collective call (``<x>.collective("<op>",
...)`` and ``collective(comm, "<op>", ...)``) and collects the ``op`` strings.  The
drivers below call the package's public API in small settings; a first pass runs every
driver with :func:`ddstore._collective.record_calls` on and checks that together they
enter every named step found in the code (an entry point nobody drives fails this
program, naming it).  Then, for each op, exceptions of these types (:func:`exceptions_for`): on 1-2 ranks
``KeyboardInterrupt`` (raised on every rank as the same agreed ``DDStoreInterrupt``,
issue 43), an exception whose ``__str__`` raises (told by its class name), and one of
``OSError``, ``RuntimeError``, ``KeyError``, ``ValueError``, ``MemoryError`` in turn
(the round handles every ``Exception`` alike; each type meets ops of every layer); on
more ranks one of all seven, in turn, into every other op.  For each, one rank (the last for some
injections, rank 0 for the others) arms :func:`ddstore._collective.inject` for that op
and the driver that reaches it runs again on a fresh store: every rank must raise the
same error (type and message, marked agreed, naming the failing rank and the injected
text), within seconds, and the store must hold exactly the variables it held before the
public call that failed.  ``--every-step`` injects into the k-th step of each driver,
named or not, then an interrupt into every step of a save: a step that holds interrupts
ends the call on every rank and then raises it on its rank alone, which every rank is
told (:class:`Held`) before the driver goes on, so the ranks stay in step.

    timeout 900 mpiexec -n 2 python tests/mpi/collective_inject.py [auto|rma] [OP ...]
"""
import ast
import os
import pathlib
import re
import sys
import time

import numpy as np
from mpi4py import MPI

from _harness import check, run_main, shared_tmpdir
from transactions import node_arrays, temporal_arrays

import ddstore
from ddstore import _collective, _lifecycle

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
LAST = size - 1
ROOT = pathlib.Path(ddstore.__file__).resolve().parent


class BadStr(RuntimeError):
    """An exception whose ``__str__`` (and ``__repr__``) raises (issue 43, item 5): told
    as its class name and ``<str() raised ...>``, never breaking the round."""

    def __str__(self):
        raise ValueError("no text")

    __repr__ = __str__


# KeyboardInterrupt (issue 43, item 6): agreed like an error, raised on every rank as
# the same DDStoreInterrupt (a KeyboardInterrupt), the call undone
PLAIN = (OSError, RuntimeError, KeyError, ValueError, MemoryError)
EXCEPTIONS = PLAIN + (BadStr, KeyboardInterrupt)
SECONDS = 30.0
# named steps that are not entry points a user calls, with the reason
NOT_ENTRY_POINTS = {
    "transaction rollback": "the clean-up of a call that failed, not a call; its local "
                            "part only lists names",
}  # one injected failure, from the driver's start to every rank's raise


# ---------------------------------------------------------------- the entry points
def named_steps():
    """``{op: [file:line, ...]}`` of every named step in the package's source (read on
    rank 0, told to the others: a second of CPU per rank on 2 shared cores)."""
    if MPI.Is_initialized() and not MPI.Is_finalized() and comm.Get_size() > 1:
        return comm.bcast(_named_steps() if rank == 0 else None)
    return _named_steps()


def _named_steps():
    found = {}
    files = sorted(ROOT.rglob("*.py")) + [ROOT.parent / "pyddstore.py"]
    for path in files:
        if not path.exists() or path.name == "_collective.py":
            continue
        text = path.read_text()
        if not re.search(r"\bcollective\s*\(", text):  # (parsing every file: seconds)
            continue
        tree = ast.parse(text, str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            is_method = isinstance(f, ast.Attribute) and f.attr == "collective"
            is_func = isinstance(f, ast.Name) and f.id == "collective"
            args = node.args[1:] if is_func else node.args
            if not (is_method or is_func) or not args:
                continue
            op = args[0]
            if isinstance(op, ast.Constant) and op.value is None:
                continue  # a later step of a call already begun
            where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
            if not (isinstance(op, ast.Constant) and isinstance(op.value, str)):
                found.setdefault("<not a string literal>", []).append(where)
                continue
            found.setdefault(op.value, []).append(where)
    return found


# ---------------------------------------------------------------- drivers
class Held(Exception):
    """Raised on every rank by :class:`Calls` when an interrupt was held to the end of a
    call on some rank: the call completed everywhere, and the interrupt came after it,
    on that rank alone (what a step that holds interrupts does with a SIGINT)."""


class Calls:
    """``calls(fn, *args)``: one public call of a driver; on an exception it notes
    the store's variables from before the call (what the failure must leave).  A
    ``KeyboardInterrupt`` that no round agreed (held by a step to the call's end, then
    raised on its rank only) is told to every rank after the call, as :class:`Held`:
    the driver stops there on every rank, not on that one alone."""

    def __init__(self, store):
        self.store = store

    def __call__(self, fn, *args, **kwargs):
        before = self.store.variables() if self.store is not None and \
            not self.store.freed else None
        held, error, result = False, None, None
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 -- raised below, after the gather
            if isinstance(exc, KeyboardInterrupt) and not _collective.is_agreed(exc):
                held = True  # (raised after the call, on this rank only)
            else:
                error = exc
                if not hasattr(exc, "_variables_before"):
                    exc._variables_before = before
        # every rank, whatever its call did (a rank that raised alone gathers too)
        ranks = [r for r, h in enumerate(comm.allgather(held)) if h]
        if error is not None:
            raise error
        if ranks:
            raise Held(f"an interrupt held to the end of {getattr(fn, '__name__', fn)} "
                       f"on rank(s) {ranks}")
        return result


def share(total):
    return ddstore.partition(total, size, rank)


def drive_core(store, calls, tmp):
    calls(store.add, "a", np.arange(3 * (rank + 1), dtype=np.int64).reshape(-1, 1))
    calls(store.init, "b", 2, (3,), np.float32)
    store.update("b", np.ones((2, 3), np.float32))
    calls(store.sync)
    calls(store.add_records, "r", [{"k": np.ones((rank + 1, 2), np.float32)}])
    calls(store.init_records, "r2", {"k": ("f4", (2,))}, {"k": [1, 2]})
    calls(store.remove, "b")

    def rolled_back():
        with store.transaction("t"):
            store.add("t/a", np.zeros(2, np.int8))
            with store.collective("test.fail"):
                raise ValueError("a planned failure")
    try:
        calls(rolled_back)
    except ddstore.DDStoreValueError as exc:
        if "planned" not in str(exc):
            raise


def drive_plan(store, calls, tmp):
    calls(ddstore.DDStore.plan, 10 ** 6, memory_budget=10 ** 9, comm=store.comm)


def drive_distributed(store, calls, tmp):
    import torch.distributed as dist
    from ddstore.distributed import init_torch_distributed
    if dist.is_initialized():
        dist.destroy_process_group()
    calls(init_torch_distributed, store.comm)
    dist.destroy_process_group()


def drive_graphs(store, calls, tmp):
    import torch
    from torch_geometric.data import Data
    from ddstore.graphs import GraphDataset
    samples = [Data(x=torch.full((i % 3 + 1, 2), float(i)),
                    edge_index=torch.zeros((2, i % 2), dtype=torch.int64))
               for i in range(7)]
    calls(GraphDataset.from_samples, store, "gd", samples, progress=False)
    from ddstore.graphs import write_adios, write_pickle_dir
    from ddstore.sources import SequenceSource
    pff, bp = os.path.join(tmp, "pff"), os.path.join(tmp, "graphs.bp")
    if rank == 0 and not os.path.exists(bp):
        write_pickle_dir(samples, pff)
        write_adios(samples, bp)
    comm.Barrier()
    calls(GraphDataset.from_source, store, "gs", SequenceSource(samples), progress=False)
    calls(GraphDataset.from_pickle_dir, store, "gp", pff, progress=False)
    calls(GraphDataset.from_adios, store, "ga", bp, progress=False)


def drive_series(store, calls, tmp):
    from ddstore.spatiotemporal import WindowDataset
    from ddstore.spatiotemporal import set_epoch as st_set_epoch
    T, n, f, h = 40, 3, 2, 2
    series = np.arange(T * n * f, dtype=np.float32).reshape(T, n, f)
    ds = calls(WindowDataset, store, "win", series, h, standardize=True)
    train = ds.splits()[0]
    for sampler in ("global", "batch"):  # the loaders and their epochs: agreed
        loader = calls(train.loader, 4, sampler=sampler, seed=3)
        calls(st_set_epoch, loader, 1)


def drive_dynamic(store, calls, tmp):
    from ddstore.dynamic import DynamicGraph, DynamicWindowDataset
    rng = np.random.default_rng(4)
    T, n = 40, 10  # every split of the window dataset holds a window of horizon 2
    edges = [rng.integers(0, n, (2, 6 + s % 5)).astype(np.int64) for s in range(T)]
    weights = [rng.random(e.shape[1]).astype(np.float32) for e in edges]
    calls(DynamicGraph, store, "dyn", edges, weights, num_nodes=n, checkpoint_every=4,
          dedup="last")
    series = np.arange(T * n * 2, dtype=np.float32).reshape(T, n, 2)
    ds = calls(DynamicWindowDataset, store, "dwin", series, 2, edges=edges,
               weights=weights, standardize=False, dedup="last")
    calls(ds.free)
    import types
    dyn = types.SimpleNamespace(edges=edges, weights=weights, num_nodes=n)
    g = calls(DynamicGraph.from_series, store, "dser", dyn, dedup="last")
    calls(g.free)


def drive_temporal(store, calls, tmp):
    from ddstore import temporal as tg
    src, dst, t, ef, nf, split = temporal_arrays()
    lo, hi = share(len(src))
    nlo, nhi = share(len(nf))
    g = calls(tg.TemporalGraph.from_arrays, store, "tg", src[lo:hi], dst[lo:hi],
              t[lo:hi], edge_feat=ef[lo:hi], node_feat=nf[nlo:nhi], split=split[lo:hi])
    mem = calls(tg.NodeMemory, store, "mem", g.num_nodes, 4, 3, mailbox_size=2)
    ids = np.arange(rank, g.num_nodes, size)
    mem.write(ids, np.ones((len(ids), 4), np.float32), 5.0)
    mem.post(ids, np.ones((len(ids), 3), np.float32), 6.0)
    calls(mem.commit)
    if rank == 0 and not os.path.exists(os.path.join(tmp, "tgl")):
        tg.write_tgl(os.path.join(tmp, "tgl"), src, dst, t, split, edge_feat=ef,
                     node_feat=nf)
        tg.write_jodie(os.path.join(tmp, "jodie.csv"), src % 5, dst % 7, t, split % 2,
                       ef)
    comm.Barrier()
    calls(mem.snapshot)
    calls(mem.reset)
    calls(mem.restore)
    calls(mem.remove)
    calls(tg.TemporalGraph.from_tgl, store, "tgl", os.path.join(tmp, "tgl"))
    calls(tg.TemporalGraph.from_jodie, store, "jodie", os.path.join(tmp, "jodie.csv"))
    calls(tg.read_tgl_share, store, os.path.join(tmp, "tgl"))
    calls(tg.read_jodie_share, store, os.path.join(tmp, "jodie.csv"))
    from ddstore.sources.tgl import TGLShare
    calls(TGLShare, store, os.path.join(tmp, "tgl"))
    eb = calls(tg.EdgeBatches, g, 4, comm=store.comm)
    calls(eb.set_epoch, 1)
    calls(g.remove)


def drive_temporal_pyg(store, calls, tmp):
    import torch
    from torch_geometric.data import TemporalData
    from ddstore import temporal as tg
    src, dst, t, ef, nf, split = temporal_arrays()
    data = TemporalData(src=torch.from_numpy(src), dst=torch.from_numpy(dst),
                        t=torch.from_numpy(t.astype(np.int64)),
                        msg=torch.from_numpy(ef))
    g = calls(tg.TemporalGraph.from_pyg, store, "tp", data)
    calls(tg.link_prediction_metrics, store.comm, np.array([0.9, 0.1]), np.array([1, 0]))
    del g


def drive_pyg(store, calls, tmp):
    import torch
    from torch_geometric.data import Data, HeteroData
    from ddstore import pyg as dpyg
    n, e = 12, 40
    g = torch.Generator().manual_seed(5)
    data = Data(x=torch.randn(n, 3, generator=g), y=torch.randint(0, 4, (n,), generator=g),
                edge_index=torch.randint(0, n, (2, e), generator=g),
                edge_attr=torch.randn(e, 2, generator=g),
                edge_time=torch.arange(e, dtype=torch.float64) / 4)
    fs, gs = calls(dpyg.from_pyg, store, data, name="pyg", time_attr="edge_time")
    calls(gs.build_backward)
    fs2, gs2 = dpyg.FeatureStore(store, "own"), dpyg.GraphStore(store, "own")
    calls(fs2.put_tensor, data.x, group_name=None, attr_name="x")
    calls(gs2.put_edge_index, data.edge_index, edge_type=None, layout="coo",
          size=(n, n))
    calls(fs2.put_tensor, torch.zeros(2, 3), group_name=None, attr_name="x",
          index=torch.tensor([0, 5]))
    calls(fs2.update_tensor, data.x, group_name=None, attr_name="x")
    calls(fs2.put_tensor, torch.rand(e, generator=g), group_name=dpyg.EDGES,
          attr_name="w")
    calls(gs2.put_edge_weights, "w")
    calls(fs2.remove_tensor, group_name=None, attr_name="x")
    calls(gs2.remove_edge_index, edge_type=None, layout="coo")
    h = HeteroData()
    h["a"].x, h["b"].x = torch.randn(4, 2, generator=g), torch.randn(3, 2, generator=g)
    h["a", "r", "b"].edge_index = torch.tensor([[0, 1, 3], [1, 2, 0]])
    calls(dpyg.from_hetero, store, h, name="het")


def drive_pyg_loaders(store, calls, tmp):
    from ddstore import pyg as dpyg
    ei, x, y, splits = node_arrays()
    d, o = os.path.join(tmp, "npy"), os.path.join(tmp, "ogb")
    if rank == 0 and not os.path.exists(d):
        from ddstore.sources.ogb import write_ogb_node
        os.makedirs(d)
        for k, v in (("edge_index", ei), ("x", x), ("y", y),
                     ("train_idx", splits["train"]), ("valid_idx", splits["valid"]),
                     ("test_idx", splits["test"])):
            np.save(os.path.join(d, f"{k}.npy"), v)
        write_ogb_node(o, ei, x=x, y=y, splits=splits)
    comm.Barrier()
    calls(dpyg.load_npy, store, d, name="npy", progress=False)
    calls(dpyg.load_ogb, store, o, name="ogb", add_reverse=False, progress=False)
    calls(dpyg.load_synthetic, store, scale=1e-4, name="syn")


def drive_pyddstore(store, calls, tmp):
    import pyddstore
    dds = calls(pyddstore.PyDDStore, store.comm)
    calls = Calls(dds.store)  # what a failure must leave: the variables of dds's store
    calls(dds.add, "p", np.arange(4 * (rank + 1), dtype=np.float32).reshape(-1, 2))
    calls(dds.init, "q", 2, 2, 4)
    calls(dds.sync)
    calls(dds.epoch_begin)
    calls(dds.epoch_end)
    calls(dds.free)


def drive_checkpoint(store, calls, tmp):
    path = os.path.join(tmp, "ck")
    calls(store.add, "c", np.arange(4 * (rank + 1), dtype=np.float32).reshape(-1, 2))
    calls(store.add_records, "cr", [{"k": np.ones((rank + 1, 2), np.float32)}])
    store.annotate("cobj", "Test", {"n": 1}, {"a": np.arange(3)}, variables=["c"])
    calls(store.save, path)
    calls(store.remove, "c", "cr")
    calls(store.load, path)
    r = calls(ddstore.DDStore.restore, path, store.comm)
    calls(r.free)
    # sized from the manifest: its read is a step of its own ("DDStore.restore")
    r = calls(ddstore.DDStore.restore, path, store.comm, width="auto")
    calls(r.free)


def drive_save(store, calls, tmp):
    calls(store.add, "s", np.arange(4 * (rank + 1), dtype=np.float32).reshape(-1, 2))
    calls(store.save, os.path.join(tmp, "held"))


HELD = [0]  # injected interrupts that a step held to the end of its call


def drive_temporal_checkpoint(store, calls, tmp):
    from ddstore import temporal as tg
    path = os.path.join(tmp, "tck")
    src, dst, t, ef, nf, split = temporal_arrays()
    lo, hi = share(len(src))
    g = calls(tg.TemporalGraph.from_arrays, store, "tg", src[lo:hi], dst[lo:hi],
              t[lo:hi], edge_feat=ef[lo:hi])
    mem = calls(tg.NodeMemory, store, "mem", g.num_nodes, 4, 3, mailbox_size=3)
    calls(store.save, path)
    r = calls(ddstore.DDStore.restore, path, store.comm)
    calls = Calls(r)  # what a failure must leave: the variables of the restored store
    calls(tg.TemporalGraph.open, r, "tg")
    m = calls(tg.NodeMemory.open, r, "mem")  # its mailbox laid out again (3 rows a node)
    calls(m.remove)
    calls(r.free)
    mem.remove()


DRIVERS = [("core", drive_core), ("checkpoint", drive_checkpoint),
           ("temporal-checkpoint", drive_temporal_checkpoint), ("plan", drive_plan), ("graphs", drive_graphs),
           ("series", drive_series), ("dynamic", drive_dynamic),
           ("temporal", drive_temporal), ("temporal-pyg", drive_temporal_pyg),
           ("pyg", drive_pyg), ("pyg-loaders", drive_pyg_loaders),
           ("pyddstore", drive_pyddstore), ("distributed", drive_distributed)]


def run_driver(fn, tmp, transport):
    """Run driver ``fn`` on a fresh store (created and freed through ``calls``, so that
    the constructor and the free are entry points too).  A store left alive by a
    failure is the caller's to inspect and free (:func:`free_new`)."""
    calls = Calls(None)
    store = calls(ddstore.DDStore, comm, transport=transport)
    calls.store = store
    fn(store, calls, tmp)
    calls(store.free)


def free_new(lives):
    """Collective: free the stores created since ``len(_LIVE_STORES)`` was ``lives``;
    returns the variables the newest held (None if there was none)."""
    held = None
    for store in reversed(_lifecycle._LIVE_STORES[lives:]):
        if held is None:
            held = store.variables()
        store.free()
    return held


# ---------------------------------------------------------------- the checks
def coverage(found, transport, tmp):
    """Every named step in the code is entered by some driver: ``{op: driver}``."""
    reached, unscoped = {}, {}
    for label, fn in DRIVERS:
        seen, loose = set(), []
        _collective.record_calls(seen)
        _collective.record_unscoped(loose)
        lives = len(_lifecycle._LIVE_STORES)
        try:
            run_driver(fn, tmp, transport)
        finally:
            _collective.record_calls(None)
            _collective.record_unscoped(None)
            free_new(lives)
        for op in seen:
            reached.setdefault(op, label)
        for where in loose:
            unscoped.setdefault(os.path.relpath(where, ROOT.parent), label)
    # a later step outside any call of several steps: its error would be told without
    # the call's name (a call's steps are in a holds_interrupts function or a transaction)
    check(not unscoped, f"later steps (op=None) outside any call, {{site: driver}}: "
                        f"{unscoped}")
    check("<not a string literal>" not in found,
          f"steps whose op is not a string literal: {found.get('<not a string literal>')}")
    missing = sorted(op for op in found if op not in reached and
                     op != "<not a string literal>" and op not in NOT_ENTRY_POINTS)
    check(not missing, f"named steps no driver reaches (add a driver): "
                       f"{[(op, found[op]) for op in missing]}")
    return {op: label for op, label in reached.items()
            if op in found and op not in NOT_ENTRY_POINTS}


def inject_one(op, label, exc_type, victim, transport, tmp):
    fn = dict(DRIVERS + [("save", drive_save)])[label]
    lives = len(_lifecycle._LIVE_STORES)
    text = f"injected {exc_type.__name__} into " + (
        f"step {op}" if isinstance(op, int) else op)
    if rank == victim:
        _collective.inject(op, exc_type(text))
    start = time.monotonic()
    got, before, after = None, None, None
    try:
        run_driver(fn, tmp, transport)
    except (ddstore.DDStoreError, _collective.DDStoreInterrupt) as exc:
        got = (type(exc).__name__, str(exc), _collective.is_agreed(exc))
        before = getattr(exc, "_variables_before", None)
    except Held as exc:  # a step that holds interrupts: the call ended, then the raise
        got = ("Held", str(exc), True)
        HELD[0] += 1
    except KeyboardInterrupt as exc:
        got = ("not a DDStoreInterrupt: " + type(exc).__name__, str(exc), False)
    except Exception as exc:  # noqa: BLE001 -- reported below
        got = ("not a DDStoreError: " + type(exc).__name__, str(exc), False)
    finally:
        _collective.inject(None)
        after = free_new(lives)  # a store left alive by the failure
    elapsed = comm.allreduce(time.monotonic() - start, op=MPI.MAX)
    what = f"{op} <- {exc_type.__name__} on rank {victim} ({label})"
    everyone = comm.allgather(got)
    if not check(got is not None, f"{what}: nothing raised"):
        return
    check(all(g == everyone[0] for g in everyone), f"{what}: ranks raised differently: "
                                                   f"{everyone}")
    check(got[2], f"{what}: not marked agreed: {got}")
    if exc_type is KeyboardInterrupt:  # the same interrupt on every rank, or one held
        # by its step to the call's end (the call completed on every rank)
        told = got[0] == "DDStoreInterrupt" and "interrupted" in got[1] or \
            got[0] == "Held" and f"rank(s) [{victim}]" in got[1]
    elif exc_type is BadStr:  # its class, and that its text could not be had
        told = "BadStr: <str() raised ValueError>" in got[1]
    else:
        told = text in got[1]
    check(told and (f"rank {victim}" in got[1] or got[0] == "Held"),
          f"{what}: the message does not name the rank and the failure: {got[1]!r}")
    check(after is None or before is None or after == before,
          f"{what}: the store holds {after}, before the call it held {before}")
    check(elapsed < SECONDS, f"{what}: took {elapsed:.1f} s")


def every_step(transport, tmp, most=40):
    """The hostile round: for each driver, the number of steps it enters (named or not:
    a build's later rounds included), then a failure injected into the k-th of them for
    up to ``most`` positions k spread over the run, the exception type and the failing
    rank changing with k: every rank raises the same agreed error, and the store holds
    what it held before the public call that failed."""
    total = 0
    for label, fn in DRIVERS:
        lives = len(_lifecycle._LIVE_STORES)
        _collective.reset_steps()
        order = []
        _collective.record_calls(order)
        try:
            run_driver(fn, tmp, transport)
        finally:
            _collective.record_calls(None)
            free_new(lives)
        n = _collective.steps_entered()
        counts = comm.allgather(n)
        check(len(set(counts)) == 1, f"{label}: ranks entered different numbers of "
                                     f"steps: {counts}")
        ks = sorted(set(np.linspace(1, n, min(most, n)).astype(int).tolist()) -
                    {k for k, op in enumerate(order, 1) if op in NOT_ENTRY_POINTS or
                     (op or "").startswith("test.")})  # a driver's own planned failure
        for k in ks:
            exc_type = EXCEPTIONS[k % len(EXCEPTIONS)]
            victim = LAST if k % 2 else 0
            inject_one(k, label, exc_type, victim, transport, tmp)
        total += len(ks)
        if rank == 0:
            print(f"every step: {label}: {n} steps, injected into {len(ks)}", flush=True)
    # an interrupt into every step of a save: the steps that hold interrupts end the call
    # on every rank, then raise it on its rank (Held), the others agree it at once
    held = HELD[0]
    lives = len(_lifecycle._LIVE_STORES)
    _collective.reset_steps()
    try:
        run_driver(drive_save, tmp, transport)
    finally:
        free_new(lives)
    for k in range(1, _collective.steps_entered() + 1):
        inject_one(k, "save", KeyboardInterrupt, LAST, transport, tmp)
    check(HELD[0] > held, "no step of a save held an interrupt to the call's end (the "
                          "case this round checks)")
    return total


def main(transport="auto", *only):
    if only and only[0] == "--every-step":
        with shared_tmpdir() as tmp:
            total = every_step(transport, tmp, *(int(m) for m in only[1:2]))
        if rank == 0:
            print(f"every step: {total} injections", flush=True)
        return
    found = named_steps()
    with shared_tmpdir() as tmp:
        reached = coverage(found, transport, tmp)
        ops = sorted(op for op in reached if not only or op in only)
        if rank == 0:
            print(f"{len(found)} named steps in the code, {len(reached)} reached by the "
                  f"drivers; injecting into {len(ops)}", flush=True)
        for i, op in enumerate(ops):
            if size > 2 and i % 2:  # (every op on 1-2 ranks: exceptions_for)
                continue
            for j, exc_type in enumerate(exceptions_for(i)):
                victim = LAST if (i + j) % 2 == 0 else 0
                inject_one(op, reached[op], exc_type, victim, transport, tmp)


def exceptions_for(i):
    """The exception types injected into the ``i``-th op.  On 1-2 ranks the two the
    round must survive on every entry point (issue 43: an interrupt, a ``__str__`` that
    raises) and one plain ``Exception`` type in turn (the round treats them alike; the
    turn makes every type meet ops of every layer).  On more ranks (which add who fails
    and who waits, not how an exception is told) one of all seven per op, in turn, into
    every other op (the suite's time: each injection reruns the op's whole driver, and
    3 ranks share 2 cores; the even ops meet all seven types and both failing ranks)."""
    if size <= 2:
        return [KeyboardInterrupt, BadStr, PLAIN[i % len(PLAIN)]]
    return [EXCEPTIONS[i % len(EXCEPTIONS)]]


if __name__ == "__main__":
    run_main(main, *sys.argv[1:])
