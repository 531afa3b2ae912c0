"""The pipeline from the store to the device (ddstore.device.DevicePrefetcher) and the
device-resident index-batching of the window loader, on CPU (the staging logic with
device="cpu"; the CUDA path in one test that needs a GPU): batches equal byte for byte
and in order with and without the pipeline for prefetch 0, 1 and 3, staging buffers
reused, the end and errors propagated with the read-ahead thread joined, every loader of
the store (windows, graphs, PyG NeighborLoader, temporal edge batches) through it and
through PyG's own PrefetchLoader; the device order equal to DistributedSampler's; open()
honouring the resident decision; direct=True (windows copied from the store's memory,
DeviceRows) and device_views' page-locking and its undoing (a stand-in for CUDA's
runtime); tests/mpi/device_pipeline.py on 2 and 3 ranks (every
width, both transports); a smoke run of scripts/gpu_check.sh on the CPU (the
benchmark python -m ddstore.bench.device at small sizes)."""
import collections
import contextlib
import gc
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from conftest import ROOT, widths_program_test

import ddstore
from ddstore import DDStoreValueError
from ddstore import spatiotemporal as st
from ddstore.device import DevicePrefetcher, StagedReads
from ddstore.spatiotemporal import dataset as st_dataset

_names = itertools.count()
Pair = collections.namedtuple("Pair", "a b")
KS = (0, 1, 3)


def _threads():
    return [t for t in threading.enumerate() if t.name.startswith("ddstore-prefetch")]


def _same(a, b, where="batch"):
    """Equal structure, types, dtypes, shapes and bytes."""
    if isinstance(b, np.ndarray) and b.dtype.kind in "biufc":
        assert isinstance(a, torch.Tensor), f"{where}: {type(a)}"
        b = torch.from_numpy(b)
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, \
            f"{where}: {a!r} vs {b!r}"
        assert a.is_contiguous() and a.contiguous().cpu().numpy().tobytes() == \
            b.contiguous().numpy().tobytes(), where
    elif isinstance(b, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(b, dict):
        assert type(a) is type(b) and list(a) == list(b), where
        for k in b:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif hasattr(b, "stores"):  # PyG data
        assert type(a) is type(b), where
        sa, sb = a.stores, b.stores
        assert len(sa) == len(sb), where
        for x, y in zip(sa, sb):
            assert sorted(x.keys()) == sorted(y.keys()), where
            for k in y.keys():
                _same(x[k], y[k], f"{where}.{k}")
    elif isinstance(b, np.ndarray):  # not numeric: passes through unchanged
        assert a is b, where
    else:
        assert a == b, where


def _mixed_batches(n=7):
    from torch_geometric.data import Batch, Data, HeteroData
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(i)
        d = Data(x=torch.randn(3 + i, 4, generator=g),
                 edge_index=torch.randint(0, 3 + i, (2, 5 + i), generator=g), tag=f"g{i}")
        h = HeteroData()
        h["p"].x = torch.randn(i + 1, 2, generator=g)
        h["p", "r", "p"].edge_index = torch.zeros(2, i, dtype=torch.int64)
        out.append({
            "t": torch.randn(5, i + 1, generator=g),
            "strided": torch.arange(40, dtype=torch.int32).reshape(5, 8)[:, ::2],
            "pair": Pair(torch.tensor([i], dtype=torch.int16), [np.arange(i, dtype=np.int64),
                                                                 "label", None]),
            "bool": torch.rand(4, generator=g) > 0.5,
            "empty": torch.zeros(0, 3, dtype=torch.float64),
            "data": d, "batch": Batch.from_data_list([d, d]), "hetero": h,
            "words": np.array(["a", "b"]), "n": i})
    return out


@pytest.mark.parametrize("k", KS)
def test_pipeline_equal_bytes_in_order(k):
    batches = _mixed_batches()
    before = [b["data"].x.clone() for b in batches]
    pipe = DevicePrefetcher(batches, "cpu", prefetch=k)
    got = list(pipe)
    assert len(got) == len(batches) == len(pipe)
    for i, (a, b) in enumerate(zip(got, batches)):
        _same(a, b, f"batch {i}")
        # the loader's objects are not changed; the pipeline's tensors are new memory
        assert a["data"] is not b["data"] and a["data"].x.data_ptr() != b["data"].x.data_ptr()
        assert torch.equal(b["data"].x, before[i])
    assert not _threads()


@pytest.mark.parametrize("k", KS)
def test_staging_buffers_reused(k):
    """Fixed shapes: one buffer per dtype per slot (k + 2 slots), however many batches;
    growing shapes: a slot's buffer grows by 1.5x, not once per batch."""
    fixed = [(torch.full((64, 12), float(i)), torch.full((64,), i, dtype=torch.int64))
             for i in range(40)]
    pipe = DevicePrefetcher(fixed, "cpu", prefetch=k)
    for a, b in zip(pipe, fixed):
        _same(a, b)
    assert pipe.last_pool.allocations == 2 * (k + 2)
    assert pipe.last_pool.nbytes >= (k + 2) * 64 * 13 * 4
    growing = [torch.arange(100 + 10 * i, dtype=torch.float32) for i in range(60)]
    pipe = DevicePrefetcher(growing, "cpu", prefetch=k)
    for a, b in zip(pipe, growing):
        _same(a, b)
    assert pipe.last_pool.allocations <= 8 * (k + 2), pipe.last_pool.allocations


def test_staging_of_short_epochs_stops_growing():
    """Epochs of fewer batches than slots (prefetch larger than an epoch) reuse the
    same slots each epoch: each began where the last had stopped, filling slots with no
    buffer yet (a pool of 1,026 slots grew by 5 buffers an epoch, to 633 MB)."""
    batches = [torch.full((64, 12), float(i)) for i in range(5)]
    pipe = DevicePrefetcher(batches, "cpu", prefetch=1024)
    held = []
    for epoch in range(12):
        got = list(pipe)
        assert len(got) == 5 and all(torch.equal(a, b) for a, b in zip(got, batches))
        held.append((pipe.last_pool.allocations, pipe.last_pool.nbytes))
    assert held[-1] == held[0], held
    assert sum(bool(s.buffers) for s in pipe.last_pool.slots) == 5


@pytest.mark.parametrize("k", KS)
def test_batches_come_out_as_data_without_autograd_history(k):
    """A loader whose tensors require grad (a user's own): each batch comes out as a
    copy with no history, so a step's backward is its own (the staging copy recorded
    the history: slots chained every batch to the ones before, and a backward after
    2,000 batches raised 'backward through the graph a second time')."""
    sources = [torch.full((4, 3), float(i), requires_grad=True) for i in range(30)]
    weight = torch.ones(3, requires_grad=True)
    for i, batch in enumerate(DevicePrefetcher(sources, "cpu", prefetch=k)):
        assert not batch.requires_grad and batch.grad_fn is None
        assert torch.equal(batch, sources[i].detach())
        (batch * weight).sum().backward()  # the step's own graph only
    assert all(s.grad is None for s in sources) and torch.equal(weight.grad,
                                                                torch.full((3,), 4.0 * 435))


def test_container_types_kept():
    """A defaultdict keeps its factory, a list subclass its type (they came back as a
    plain dict and list), as torch's pin_memory keeps them."""
    import collections

    class Pair(list):
        pass
    batches = []
    for i in range(4):
        d = collections.defaultdict(lambda: "none")
        d["x"] = torch.full((2,), float(i))
        batches.append((d, Pair([torch.arange(3) + i, "tag"])))
    for k in (0, 2):
        for i, (d, pair) in enumerate(DevicePrefetcher(batches, "cpu", prefetch=k)):
            assert type(d) is collections.defaultdict and d["missing"] == "none"
            assert torch.equal(d["x"], batches[i][0]["x"])
            assert type(pair) is Pair and pair[1] == "tag"
            assert torch.equal(pair[0], batches[i][1][0])


class _Failing:
    def __init__(self, n, fail_at):
        self.n, self.fail_at = n, fail_at

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise KeyError(f"bad batch {i}")
            yield torch.full((3,), i)


@pytest.mark.parametrize("k", KS)
def test_end_and_errors_propagate(k):
    it = iter(DevicePrefetcher(_Failing(5, 3), "cpu", prefetch=k))
    assert [int(next(it)[0]) for _ in range(3)] == [0, 1, 2]  # batch 3's error waits
    with pytest.raises(KeyError, match="bad batch 3"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert not _threads()
    it = iter(DevicePrefetcher(_Failing(4, None), "cpu", prefetch=k))
    assert [int(b[0]) for b in it] == [0, 1, 2, 3]
    with pytest.raises(StopIteration):
        next(it)
    assert not _threads()
    for b in DevicePrefetcher(_Failing(50, None), "cpu", prefetch=k):  # leave early
        break
    del b
    import gc
    gc.collect()
    assert not _threads()
    assert list(DevicePrefetcher([], "cpu", prefetch=k)) == []


def test_leaves_torch_cannot_stage_pass_through_as_they_are():
    """A numpy leaf of a dtype torch lacks (long double) and a quantized tensor come out
    as they went in, as strings do (were: torch's TypeError, naming neither the
    pipeline nor the leaf, and an internal assertion of torch's)."""
    wide = np.arange(3, dtype=np.longdouble)
    q = torch.quantize_per_tensor(torch.arange(4.0), 0.1, 0, torch.quint8)
    for k in (0, 1):
        # an iterator over batches of no len is true, as any iterator (len raised there)
        assert bool(iter(DevicePrefetcher(iter([1]), "cpu", prefetch=k)))
        from ddstore.prefetch import PrefetchLoader
        assert bool(iter(PrefetchLoader([torch.ones(1)] * 3, k + 1)))
        (a, b, c), = list(DevicePrefetcher([(wide, q, np.arange(2))], "cpu", prefetch=k))
        assert a is wide and b is q and torch.equal(c, torch.arange(2))


def test_tensor_subclasses_keep_what_they_carry():
    """PyG's ``EdgeIndex`` (sparse size, sort order on the object) comes out an
    ``EdgeIndex`` with them, moved by its own ``to``, as through PyG's PrefetchLoader (it
    came out a plain tensor); a ``Parameter`` is staged as data."""
    from torch_geometric import EdgeIndex
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader
    graphs = [Data(x=torch.full((3, 2), float(i)), edge_index=EdgeIndex(
        torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), sparse_size=(3, 3), sort_order="row"))
        for i in range(4)]
    plain = list(DataLoader(graphs, batch_size=2))
    p = torch.nn.Parameter(torch.ones(2))
    for k in (0, 2):
        got = list(DevicePrefetcher(DataLoader(graphs, batch_size=2), "cpu", prefetch=k))
        for a, b in zip(got, plain):
            e = a.edge_index
            assert type(e) is EdgeIndex and e.sparse_size() == b.edge_index.sparse_size() \
                == (6, 6) and e.is_sorted_by_row and torch.equal(e.as_tensor(),
                                                                 b.edge_index.as_tensor())
            assert torch.equal(a.x, b.x)
        (q,), = list(DevicePrefetcher([(p,)], "cpu", prefetch=k))
        assert type(q) is torch.Tensor and not q.requires_grad and torch.equal(q, p.detach())


def test_a_batch_in_flight_does_not_hold_the_exit():
    """A script that ends while its read-ahead makes a batch that blocks (a
    ``__getitem__`` that sleeps 300 s) exits after at most ``STOP_WAIT`` seconds (set to 1
    here): the read-ahead thread is a daemon (a ThreadPoolExecutor's thread was joined
    by Python before any atexit handler, so before the store's bounded exit, and held
    the exit as long as the batch)."""
    code = (
        "import time\n"
        "from ddstore.prefetch import PrefetchIter\n"
        "def batches():\n"
        "    yield 0\n"
        "    yield 1\n"
        "    time.sleep(300)\n"
        "    yield 2\n"
        "import ddstore.prefetch\n"
        "ddstore.prefetch.STOP_WAIT = 1.0  # (10 s by default: the suite's time)\n"
        "it = PrefetchIter(batches(), 2)\n"
        "assert [next(it), next(it)] == [0, 1]\n"
        "print('leaving', flush=True)\n")
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "leaving" in out.stdout, out.stderr
    assert time.monotonic() - start < 30, time.monotonic() - start


def test_an_iterator_kept_to_the_end_ends_its_batch_before_the_exit():
    """A script that ends with a read-ahead iterator alive whose batches run torch ops
    exits 0: the exit drops the batches queued and waits for the one being made (the
    daemon thread was ended by Python inside torch's C++ frames as the interpreter
    finalised: SIGABRT, "terminate called without an active exception", in 4 of 8
    runs of this script without mpiexec, 15 of 20 under it)."""
    code = (
        "import torch\n"
        "from ddstore.prefetch import PrefetchIter\n"
        "def batches():\n"
        "    while True:\n"
        "        yield sum((torch.rand(64, 64) @ torch.rand(64, 64)).sum() for _ in range(50))\n"
        "it = PrefetchIter(batches(), 4)\n"
        "for _ in range(3):\n"
        "    next(it)\n"
        "print('leaving', flush=True)\n")
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0 and "leaving" in out.stdout, (out.returncode, out.stderr)


def test_bad_arguments():
    with pytest.raises(DDStoreValueError, match=r"prefetch=-1 must be an integer in \[0, 1024\]"):
        DevicePrefetcher([], "cpu", prefetch=-1)
    with pytest.raises(DDStoreValueError, match=r"device='nope' is not a torch device"):
        DevicePrefetcher([], "nope")
    for dev in ("meta", "xpu"):  # devices torch knows that the pipeline does not serve
        with pytest.raises(DDStoreValueError, match=rf"device='{dev}'; allowed: 'cpu', "
                                                    r"'cuda' or 'cuda:N'"):
            DevicePrefetcher([], dev)
    with pytest.raises(DDStoreValueError, match=r"prefetch=True must be an integer"):
        DevicePrefetcher([], "cpu", prefetch=True)
    if not torch.cuda.is_available():
        for dev in ("cuda", 0):  # an index is torch's CUDA device (0 was "not a device")
            with pytest.raises(DDStoreValueError, match=r"device='cuda(:0)?' but CUDA is "
                                                        r"not available"):
                DevicePrefetcher([], dev)
    else:  # one past the last GPU this process sees
        n = torch.cuda.device_count()
        with pytest.raises(DDStoreValueError, match=rf"sees {n} CUDA device\(s\); "
                                                    rf"allowed: 'cuda:0' to 'cuda:{n - 1}'"):
            DevicePrefetcher([], f"cuda:{n}")


def test_one_read_ahead_per_loader_and_its_depth_checked():
    """Two read-aheads stacked over one loader are refused (the outer one's dropped
    batches came from the inner one, whose sampler count had moved on: after a break
    the next epoch of a seeded sampler differed from the plain loader's); one over a
    wrapper that does not read ahead is taken; PrefetchLoader checks its depth as
    prefetch() does (-5, 2.9, '3' were taken, 200,000 took 15 s and 2 GB)."""
    from ddstore.prefetch import MAX_PREFETCH, PrefetchLoader, prefetch
    data = [torch.full((2,), float(i)) for i in range(5)]
    inner = prefetch(data, 2)
    for make in (lambda: DevicePrefetcher(inner, "cpu", prefetch=2),
                 lambda: prefetch(inner, 1), lambda: PrefetchLoader(inner, 3),
                 lambda: prefetch(DevicePrefetcher(data, "cpu", prefetch=1), 2)):
        with pytest.raises(DDStoreValueError, match="already reads batches ahead"):
            make()
    for ok in (DevicePrefetcher(inner, "cpu", prefetch=0), prefetch(prefetch(data, 0), 2),
               DevicePrefetcher(prefetch(data, 0), "cpu", prefetch=2)):
        assert [b.tolist() for b in ok] == [d.tolist() for d in data]
    for bad in (-5, 2.9, "3", True, MAX_PREFETCH + 1, 200_000):
        with pytest.raises(DDStoreValueError, match=r"PrefetchLoader: depth=.* must be "
                                                    r"an integer in \[0, 1024\]"):
            PrefetchLoader(data, bad)
    with pytest.raises(DDStoreValueError, match=r"prefetch: depth=2.5 must be"):
        prefetch(data, 2.5)  # (named prefetch=, the argument of loader(...))


@pytest.mark.parametrize("k", [1, 3])
def test_set_epoch_between_iter_and_first_batch_counts(store, k):
    """A set_epoch made after iter() and before the first next is the epoch of the
    batches, under read-ahead as without it (the thread took the previous epoch's order
    at iter(), so the batches kept it), for the window loader and a graph loader over a
    DistributedSampler, through PrefetchLoader and DevicePrefetcher."""
    from ddstore.graphs import GraphDataset, ising_dataset
    ds = st.WindowDataset(store, f"w{next(_names)}", _series(), 4)
    g = GraphDataset.from_samples(store, f"g{next(_names)}",
                                  [ising_dataset(22, size=3, seed=1)[i] for i in range(22)],
                                  progress=False)
    makers = (lambda **kw: ds.loader(7, seed=3, **kw),
              lambda **kw: g.loader(4, sampler=torch.utils.data.DistributedSampler(
                  range(22), num_replicas=1, rank=0, seed=1), **kw))

    def first(loader):
        st.set_epoch(loader, 0)
        it = iter(loader)
        time.sleep(0.05)  # time for a thread started at iter() to take the order
        st.set_epoch(loader, 1)
        b = next(it)
        return b[0] if isinstance(b, (tuple, list)) else b.x

    for make in makers:
        want = first(make())
        st.set_epoch(ep0 := make(), 0)
        b0 = next(iter(ep0))
        assert not torch.equal(want, b0[0] if isinstance(b0, (tuple, list)) else b0.x)
        for kw in ({"prefetch": k}, {"prefetch": k, "device": "cpu"}):
            assert torch.equal(first(make(**kw)), want), kw
        # the iterator's len, as torch's iterator has it (read ahead or not: had none)
        for kw in ({}, {"prefetch": k}, {"device": "cpu"}, {"prefetch": k, "device": "cpu"}):
            loader = make(**kw)
            it = iter(loader)
            assert len(it) == len(loader) > 1 and bool(it), kw
            assert sum(1 for _ in it) == len(loader), kw
    assert not _threads()


def test_resident_series_on_the_host_however_spelled(store):
    """A device-resident series on the host: 'cpu' and 'cpu:0' are one device (the
    loader refused the other spelling, naming them as two)."""
    series = _series()
    for dev, other in (("cpu", "cpu:0"), ("cpu:0", "cpu")):
        ds = st.WindowDataset(store, f"w{next(_names)}", series, 3, device=dev,
                              resident="device")
        got = torch.cat([x for x, _ in ds.splits()[0].loader(4, device=other)])
        want = torch.cat([x for x, _ in ds.splits()[0].loader(4)])
        assert torch.equal(got, want) and len(got) > 0


# ------------------------------------------------------------------------- windows
def _series(T=90, n=6, f=2, seed=0):
    return np.random.default_rng(seed).standard_normal((T, n, f)).astype(np.float32)


def _plain_batches(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.mark.parametrize("k", KS)
def test_window_loader_through_the_pipeline(store, k, monkeypatch):
    """loader(device="cpu", prefetch=k) reads straight into staging and gives the plain
    loader's batches, for the global and the batch sampler and with time features."""
    ts = np.datetime64("2024-01-01T00:00") + np.arange(90) * np.timedelta64(5, "m")
    ds = st.WindowDataset(store, f"w{next(_names)}", _series(), 4, timestamps=ts)
    dtf = st.WindowDataset(store, f"w{next(_names)}", _series(seed=1), 3, timestamps=ts,
                           time_features=("tod", "dow"))
    into = []
    real = StagedReads.next_into
    monkeypatch.setattr(StagedReads, "next_into",
                        lambda self, take: into.append(1) or real(self, take))
    for d in (ds, dtf):
        train = d.splits()[0]
        for kw in ({"sampler": "global", "seed": 3}, {"sampler": "batch", "seed": 2},
                   {"sampler": "global", "shuffle": False, "drop_last": True}):
            plain = train.loader(7, **kw)
            piped = train.loader(7, device="cpu", prefetch=k, **kw)
            assert isinstance(piped, DevicePrefetcher) and len(piped) == len(plain)
            pools = []
            for epoch in (0, 1):
                st.set_epoch(plain, epoch)
                st.set_epoch(piped, epoch)
                want = _plain_batches(plain)
                got = list(piped)
                assert len(got) == len(want) > 1
                for i, (a, b) in enumerate(zip(got, want)):
                    _same(a, b, f"{kw} epoch {epoch} batch {i}")
                pools.append((piped.last_pool, piped.last_pool.allocations))
            # not one buffer per batch (two dtypes with time features, some grown), and
            # the staging of epoch 0 reused by epoch 1 (it was made again every epoch)
            assert pools[0][0] is pools[1][0] and pools[0][1] <= 6 * (k + 2)
            assert pools[1][1] - pools[0][1] <= 2 * (k + 2)
    assert into  # the store read went into the staging buffers
    assert not _threads()


@pytest.mark.parametrize("k,through", [(0, "torch"), (2, "torch"), (2, "core")])
def test_window_loader_direct(store, k, through, monkeypatch):
    """direct=True: every window of this one-rank store is mapped here, so x and y are
    made on the device from the store's memory (DeviceRows, no staging read) and equal
    the plain loader's, byte for byte and in order; the dynamic windows too (their
    graphs staged); time features keep the staging path.  ``through="core"``: the
    copies are issued by dds_copy_pieces through a stand-in for cudaMemcpyAsync (one
    per window and half, host to device, the default stream)."""
    from ddstore import device as device_mod
    from ddstore.device import DeviceRows
    from ddstore.dynamic import DynamicWindowDataset
    from test_c_safety import _fake_copy
    made, staged, calls = [], [], []
    if through == "core":
        cb, fn = _fake_copy(calls)
        monkeypatch.setattr(device_mod, "copy_function", lambda device: fn)
    real_assemble, real_into = DeviceRows.assemble, StagedReads.next_into
    monkeypatch.setattr(DeviceRows, "assemble",
                        lambda self, *a: made.append(self.shape) or
                        real_assemble(self, *a))
    ts = np.datetime64("2024-01-01T00:00") + np.arange(90) * np.timedelta64(5, "m")
    ds = st.WindowDataset(store, f"w{next(_names)}", _series(), 4, halo=False)
    dtf = st.WindowDataset(store, f"w{next(_names)}", _series(seed=1), 3, timestamps=ts,
                           time_features=("tod",))
    for d, direct_leaves in ((ds, True), (dtf, False)):
        train = d.splits()[0]
        for kw in ({"sampler": "global", "seed": 3}, {"sampler": "batch", "seed": 2}):
            plain = train.loader(7, **kw)
            piped = train.loader(7, device="cpu", prefetch=k, direct=True, **kw)
            made.clear()
            want, got = _plain_batches(plain), list(piped)
            assert len(got) == len(want) > 1
            for i, (a, b) in enumerate(zip(got, want)):
                _same(a, b, f"{kw} batch {i}")
            assert len(made) == (2 * len(got) if direct_leaves else 0)
            assert all(m == (7, 4, 6, 2) for m in made[:-2])
            windows = sum(len(x) for x, _ in got)
            assert len(calls) == (2 * windows if through == "core" and direct_leaves
                                  else 0)
            assert all(c == (1, 0, 4 * 6 * 2 * 4) for c in calls)
            calls.clear()
    steps = 60
    edges = [np.array([[0, 1], [1, 2]]) if t % 2 else np.array([[2], [3]])
             for t in range(steps)]
    dyn = DynamicWindowDataset(store, f"w{next(_names)}", _series(T=steps, n=4), 3,
                               edges=edges)
    monkeypatch.setattr(StagedReads, "next_into",
                        lambda self, take: staged.append(1) or real_into(self, take))
    made.clear()
    want = list(dyn.loader(5, seed=1))
    got = list(dyn.loader(5, seed=1, device="cpu", prefetch=k, direct=True))
    assert len(got) == len(want) > 1 and len(made) == 2 * len(got) and staged
    for i, (a, b) in enumerate(zip(got, want)):
        _same(a, b, f"dynamic batch {i}")


def test_window_loader_direct_arguments(store):
    ds = st.WindowDataset(store, f"w{next(_names)}", _series(), 4)
    with pytest.raises(DDStoreValueError, match="direct=True copies windows"):
        ds.loader(4, direct=True)
    with pytest.raises(DDStoreValueError, match="direct"):
        ds.loader(4, device="cpu", direct="yes")
    dev = st.WindowDataset(store, f"w{next(_names)}", _series(), 4, device="cpu",
                           resident="device")
    with pytest.raises(DDStoreValueError, match="allowed: direct=False"):
        dev.loader(4, direct=True)


class _FakeCudart:
    """torch.cuda.cudart() for the page-locking logic without a GPU: records the
    ranges registered and unregistered; ``refuse``: the error code to answer with."""

    def __init__(self, refuse=0):
        self.refuse, self.registered, self.unregistered = refuse, [], []

    def cudaHostRegister(self, ptr, nbytes, flags):
        if not self.refuse:
            self.registered.append((ptr, nbytes, flags))
        return self.refuse

    def cudaHostUnregister(self, ptr):
        self.unregistered.append(ptr)
        return 0


def test_device_views_page_locked_until_removed(store, monkeypatch):
    """device_views on a CUDA device registers each mapped chunk once, in place (the
    view's own address and size), and undoes it, after synchronising the device, before
    the variable is removed and before the store is freed; a refused registration gives
    None (the rows then go through staging) with a warning naming the variable."""
    fake, syncs, current = _FakeCudart(), [], []
    monkeypatch.setattr(torch.cuda, "cudart", lambda: fake)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: syncs.append(d))
    monkeypatch.setattr(torch.cuda, "device",  # registered with the view's device current
                        lambda d: current.append(d) or contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cuda = torch.device("cuda", 0)
    name = f"v{next(_names)}"
    rows = np.arange(60, dtype=np.float64).reshape(20, 3)
    store.add(name, rows)
    (view,) = store.device_views(name, cuda)
    assert view.data_ptr() == store.local_view(name).ctypes.data
    assert torch.equal(view, torch.from_numpy(rows))
    assert fake.registered == [(view.data_ptr(), rows.nbytes, 1)] and current == [cuda]
    assert store.device_views(name, cuda)[0] is view and len(fake.registered) == 1
    assert store.device_views(name, "cpu")[0] is not None
    for bad, what in [("tpu", "device='tpu' is not a torch device"),
                      ("meta", "device='meta'; allowed: 'cpu', 'cuda' or 'cuda:N'")]:
        with pytest.raises(DDStoreValueError, match=re.escape(what)):
            store.device_views(name, bad)
    with pytest.raises(DDStoreValueError, match="unknown variable 'nope'"):
        store.device_views("nope", "cpu")
    store.remove(name)
    assert fake.unregistered == [view.data_ptr()] and syncs == [cuda]
    refusing = _FakeCudart(refuse=2)
    monkeypatch.setattr(torch.cuda, "cudart", lambda: refusing)
    store.add(name, rows)
    with pytest.warns(RuntimeWarning, match=f"variable {name!r}.*error 2"):
        assert store.device_views(name, cuda) == [None]
    store.remove(name)
    assert fake.unregistered == [view.data_ptr()]  # nothing more to undo


class _FakeRuntime:
    """The CUDA runtime library's handle (ddstore._pins.cuda_runtime) without a GPU:
    counts the resets of the last error."""

    def __init__(self):
        self.resets = 0

    def cudaGetLastError(self):
        self.resets += 1
        return 0


def test_handled_cuda_errors_are_reset(store, monkeypatch):
    """A CUDA runtime error we handle (a page-locking refused: staged instead; a copy
    refused: raised as ours) is reset in the runtime (cudaGetLastError), so that torch's
    check after its next kernel does not fail with it; without the runtime library
    (this CPU build) nothing is looked up in vain."""
    from ddstore import _pins, device as device_mod
    from ddstore.device import DeviceRows
    from test_c_safety import _fake_copy
    if not torch.cuda.is_available():
        assert _pins.cuda_runtime() is None and device_mod.copy_function(
            torch.device("cuda", 0)) is None
    runtime = _FakeRuntime()
    monkeypatch.setattr(_pins, "_RUNTIME", [runtime])
    monkeypatch.setattr(torch.cuda, "cudart", lambda: _FakeCudart(refuse=2))
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    name = f"v{next(_names)}"
    store.add(name, np.ones((6, 2), np.float32))
    with pytest.warns(RuntimeWarning, match="error 2"):
        assert store.device_views(name, "cuda:0") == [None]
    assert runtime.resets == 1
    store.remove(name)
    calls = []
    cb, refusing = _fake_copy(calls, refuse_at=1)
    monkeypatch.setattr(device_mod, "copy_function", lambda device: refusing)
    src = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    one = np.array([0, 3])
    leaf = DeviceRows((6, 2), torch.float32, [src], np.zeros(2, np.int64), one, one,
                      np.array([3, 3]))
    with pytest.raises(DDStoreValueError, match="refused piece 1"):
        leaf.assemble(torch.device("cpu"), None)
    assert runtime.resets == 2 and len(calls) == 1


def test_device_views_unlocked_before_free(monkeypatch):
    from mpi4py import MPI
    fake = _FakeCudart()
    monkeypatch.setattr(torch.cuda, "cudart", lambda: fake)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    s = ddstore.DDStore(MPI.COMM_SELF, width=1)
    s.add("a", np.ones((4, 2), np.float32))
    s.add("b", np.zeros((5, 2), np.int64))
    ptrs = [s.device_views(n, "cuda:0")[0].data_ptr() for n in ("a", "b")]
    s.free()
    assert sorted(fake.unregistered) == sorted(ptrs) == sorted(p for p, _, _ in
                                                               fake.registered)


def test_window_loader_cpu_default_unchanged(store):
    ds = st.WindowDataset(store, f"w{next(_names)}", _series(), 4)
    assert isinstance(ds.loader(8), torch.utils.data.DataLoader)
    assert type(ds.loader(8, prefetch=2)).__name__ == "PrefetchLoader"


@pytest.mark.parametrize("length,replicas,drop_last", [
    (0, 1, False), (1, 3, False), (10, 1, False), (10, 3, False), (10, 3, True),
    (7, 4, True), (5, 8, False), (31, 4, False), (31, 4, True), (3, 7, False)])
def test_distributed_order_equals_distributed_sampler(length, replicas, drop_last):
    data = list(range(length))
    for shuffle, seed, epoch in itertools.product((True, False), (0, 17), (0, 1, 5)):
        for rank in range(replicas):
            s = torch.utils.data.DistributedSampler(data, replicas, rank, shuffle, seed,
                                                    drop_last)
            s.set_epoch(epoch)
            got = st_dataset.distributed_order(length, replicas, rank, shuffle, seed,
                                               epoch, drop_last)
            assert got.dtype == torch.int64
            assert got.tolist() == list(s), (shuffle, seed, epoch, rank)


def _device_loaders_match(store, monkeypatch, replicas, rank, configs):
    """For each split and each ``(batch_size, loader kwargs)`` of ``configs``, built as
    rank ``rank`` of ``replicas`` (a pretend world: the samplers read store.size and
    store.rank when built): the device-resident loader gives the store-resident loader's
    batches (same windows, same order) in epochs 0 and 3, each batch's starts a slice of
    one tensor per epoch (no per-batch host ints).  Returns the device loaders."""
    series = _series(T=120)
    dev = st.WindowDataset(store, f"w{next(_names)}", series, 3, resident="device")
    host = st.WindowDataset(store, f"w{next(_names)}", series, 3)
    assert dev._dev_series is not None and host._dev_series is None
    seen, loaders = [], []
    real = type(dev)._fetch

    def spy(self, starts, *a, **kw):
        seen.append(starts)
        return real(self, starts, *a, **kw)
    for view_d, view_h in zip(dev.splits(), host.splits()):
        for b, kw in configs:
            with monkeypatch.context() as m:
                m.setattr(store, "size", replicas)
                m.setattr(store, "rank", rank)
                ld = view_d.loader(b, **kw)
                lh = view_h.loader(b, **kw)
            assert type(ld).__name__ == "_DeviceWindowBatches" and len(ld) == len(lh)
            loaders.append(ld)
            for epoch in (0, 3):
                st.set_epoch(ld, epoch)
                st.set_epoch(lh, epoch)
                want = _plain_batches(lh)
                monkeypatch.setattr(type(dev), "_fetch", spy)
                seen.clear()
                got = _plain_batches(ld)
                monkeypatch.setattr(type(dev), "_fetch", real)
                assert len(got) == len(want) == len(ld)
                for i, (x, y) in enumerate(zip(got, want)):
                    _same(x, y, f"{view_d.split_name} {kw} epoch {epoch} batch {i}")
                assert all(isinstance(t, torch.Tensor) for t in seen)
                assert len({t.untyped_storage().data_ptr() for t in seen}) <= 1
    return dev, loaders


# the windows whose rows the resident loader makes at once: the default (one group an
# epoch here) and 11 (groups of 1 or 2 batches: their seams)
ROWS_AT_ONCE = [1 << 16, 11]


@pytest.mark.parametrize("rows_at_once", ROWS_AT_ONCE)
@pytest.mark.parametrize("replicas,rank,drop_last", [(1, 0, False), (3, 2, False),
                                                     (4, 1, True)])
def test_device_resident_loader_order(store, monkeypatch, replicas, rank, drop_last,
                                      rows_at_once):
    """resident="device": the loader's batches are those of a DataLoader with
    DistributedSampler over the store-resident windows (same windows, same order), each
    batch's starts a slice of one tensor per epoch (no per-batch host ints)."""
    monkeypatch.setattr(st.dataset, "_ROWS_AT_ONCE", rows_at_once)
    configs = [(5, dict(seed=seed, shuffle=shuffle, drop_last=drop_last))
               for seed, shuffle in ((0, True), (9, True), (0, False))]
    dev, loaders = _device_loaders_match(store, monkeypatch, replicas, rank, configs)
    for ld in loaders:
        assert (ld.sampler.num_replicas, ld.sampler.rank) == (replicas, rank)
    with pytest.raises(DDStoreValueError, match=r"device='meta'; allowed: 'cpu', 'cuda'"):
        dev.loader(4, device="meta")
    # another device than the series' (a GPU's, on a GPU machine): "meta" let through
    with monkeypatch.context() as m, \
            pytest.raises(DDStoreValueError, match=r"lives on cpu \(resident='device'\)"):
        m.setattr(ddstore.device, "check_device", lambda device, what: torch.device(device))
        dev.loader(4, device="meta")
    assert type(dev.loader(4, device="cpu")).__name__ == "_DeviceWindowBatches"


@pytest.mark.parametrize("rows_at_once", ROWS_AT_ONCE)
@pytest.mark.parametrize("replicas,rank,drop_last", [(1, 0, False), (3, 2, False),
                                                     (4, 1, True)])
def test_device_resident_batch_sampler(store, monkeypatch, replicas, rank, drop_last,
                                       rows_at_once):
    """resident="device" with sampler="batch": the batches are those of the
    store-resident loader with the same BatchShuffleSampler (same blocks, same order,
    every epoch), each batch's starts a slice of one device tensor per epoch."""
    monkeypatch.setattr(st.dataset, "_ROWS_AT_ONCE", rows_at_once)
    configs = [(b, dict(sampler="batch", seed=seed, shuffle=shuffle, drop_last=drop_last))
               for seed, shuffle, b in ((0, True, 5), (9, True, 4), (0, False, 7))]
    _, loaders = _device_loaders_match(store, monkeypatch, replicas, rank, configs)
    for ld in loaders:
        assert ld.sampler is None and ld.batch_sampler.rank == rank


def test_open_keeps_the_resident_decision(store, monkeypatch):
    """open() with resident=None where the placement decides "device" (as a CUDA device
    at width 1 does) copies the series to the device: the decision is used, not the
    argument."""
    series = _series(T=80)
    name = f"w{next(_names)}"
    st.WindowDataset(store, name, series, 4)
    real = st_dataset._placement
    monkeypatch.setattr(st_dataset, "_placement",
                        lambda s, device, resident, what: (torch.device("cpu"), "device")
                        if resident is None else real(s, device, resident, what))
    ds = st.WindowDataset.open(store, name, device="cpu")
    assert ds.resident == "device" and ds._dev_series is not None
    stored = torch.from_numpy(store.get_range(name, 0, 80))
    assert torch.equal(ds._dev_series, stored)
    ref = st.WindowDataset.open(store, name, device="cpu", resident="store")
    assert ref._dev_series is None
    idx = np.arange(len(ds))
    _same(ds.get_batch(idx), ref.get_batch(idx))


# -------------------------------------------------------------- the other loaders
@pytest.mark.parametrize("k", KS)
def test_graph_loader_through_the_pipeline(store, k, monkeypatch):
    """The graph loader through the pipeline gives the plain loader's batches; its rows
    are read straight into the staging (the stored keys' tensors found there, not
    copied), except with DataLoader options, which go through the DataLoader."""
    from ddstore import device as dev_mod
    from ddstore.graphs import GraphDataset, ising_dataset
    samples = [ising_dataset(12, size=3, seed=1)[i] for i in range(12)]
    gd = GraphDataset.from_samples(store, f"g{next(_names)}", samples, progress=False)
    plain = list(gd.loader(5))
    found = []
    real = dev_mod._Slot.locate
    monkeypatch.setattr(dev_mod._Slot, "locate",
                        lambda self, t: found.append(real(self, t)) or found[-1])
    for kwargs, straight in (({}, True), ({"timeout": 0}, False)):
        found.clear()
        piped = gd.loader(5, device="cpu", prefetch=k, **kwargs)
        assert isinstance(piped, DevicePrefetcher)
        got = list(piped)
        assert len(got) == len(plain) == 3
        for i, (a, b) in enumerate(zip(got, plain)):
            _same(a, b, f"graph batch {i}")
        staged = sum(f is not None for f in found)
        # x, edge_attr, y and pos read into the staging; edge_index (offsets added,
        # transposed), batch and ptr made on the host and copied
        keys = [lay.key for lay in gd.layout.keys
                if "index" not in lay.key and not (lay.ndim and lay.cat_dim)]
        assert sorted(keys) == ["edge_attr", "pos", "x", "y"]
        assert staged == (len(keys) * len(plain) if straight else 0), (kwargs, found)


def _pyg_graph(store):
    from torch_geometric.data import Data
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(60, 5, generator=g), y=torch.arange(60),
                edge_index=torch.randint(0, 60, (2, 300), generator=g))
    return dpyg.from_pyg(store, data, name=f"p{next(_names)}")


@pytest.mark.parametrize("k", KS)
def test_pyg_neighbor_loader_through_the_pipeline(store, k):
    from torch_geometric.loader import NeighborLoader, PrefetchLoader
    from ddstore import pyg as dpyg
    fs, gs = _pyg_graph(store)

    def make():
        return NeighborLoader((fs, gs), num_neighbors=[3, 2], batch_size=16,
                              neighbor_sampler=dpyg.NeighborSampler(gs, [3, 2], seed=4),
                              input_nodes=torch.arange(60))
    plain = list(make())
    got = list(DevicePrefetcher(make(), "cpu", prefetch=k))
    theirs = list(PrefetchLoader(make(), device="cpu"))
    assert len(got) == len(plain) == len(theirs) == 4
    for i, (a, b, c) in enumerate(zip(got, plain, theirs)):
        _same(a, b, f"pyg batch {i}")
        _same(c, b, f"PyG PrefetchLoader batch {i}")


def test_pyg_prefetch_loader_over_our_loaders(store):
    """PyG's own PrefetchLoader iterates the window and graph loaders (and ours through
    ours) and gives the same batches."""
    from torch_geometric.loader import PrefetchLoader
    from ddstore.graphs import GraphDataset, ising_dataset
    ds = st.WindowDataset(store, f"w{next(_names)}", _series(), 4)
    for loader in (ds.loader(9, seed=1), ds.loader(9, seed=1, device="cpu", prefetch=2)):
        want = _plain_batches(ds.loader(9, seed=1))
        got = list(PrefetchLoader(loader, device="cpu"))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(tuple(a), b)
    gd = GraphDataset.from_samples(store, f"g{next(_names)}",
                                   [ising_dataset(6, size=3, seed=2)[i] for i in range(6)],
                                   progress=False)
    for a, b in zip(PrefetchLoader(gd.loader(4, prefetch=1), device="cpu"), gd.loader(4)):
        _same(a, b)


@pytest.mark.parametrize("k", KS)
def test_temporal_edge_batches_through_the_pipeline(store, k):
    from ddstore.temporal import EdgeBatches, TemporalGraph, synthetic_stream
    s = synthetic_stream(40, 600, seed=2)
    g = TemporalGraph.from_arrays(store, f"t{next(_names)}", s.src, s.dst, s.t)
    eb = EdgeBatches(g, 64, "train", chunks=4, negatives=2, seed=1)
    piped = eb.loader(device="cpu", prefetch=k)
    for epoch in (0, 1):
        piped.set_epoch(epoch)
        want = list(eb)
        got = list(piped)
        assert len(got) == len(want) > 3
        for i, (a, b) in enumerate(zip(got, want)):
            _same(list(a), list(b), f"epoch {epoch} edge batch {i}")
    assert eb.loader() is eb


@pytest.mark.parametrize("wrap", ["prefetch", "device"])
def test_seeded_sampler_epoch_left_early_leaves_no_trace(store, wrap):
    """A seeded ddstore NeighborSampler under read-ahead: an epoch left after 2 batches
    (``break``), then a whole epoch, gives what the plain loader gives (the draws of the
    batches made ahead and dropped are given back, :attr:`NeighborSampler.draws`),
    however far the thread had run."""
    from torch_geometric.loader import NeighborLoader
    from ddstore import pyg as dpyg
    from ddstore.prefetch import prefetch
    fs, gs = _pyg_graph(store)

    def make():
        return NeighborLoader((fs, gs), num_neighbors=[3, 2], batch_size=8,
                              neighbor_sampler=dpyg.NeighborSampler(gs, [3, 2], seed=4),
                              input_nodes=torch.arange(60))

    def two_epochs(loader):
        for i, _ in enumerate(loader):
            if i == 1:
                break
        return list(loader)
    want = two_epochs(make())
    for depth in (1, 3, 7):
        inner = make()
        loader = (prefetch(inner, depth) if wrap == "prefetch" else
                  DevicePrefetcher(inner, "cpu", prefetch=depth))
        got = two_epochs(loader)
        assert len(got) == len(want) == 8
        for i, (a, b) in enumerate(zip(got, want)):
            _same(a, b, f"depth {depth} batch {i} of the epoch after a break")
        assert inner.node_sampler.draws == 10  # 2 + 8: nothing made ahead counted
    assert not _threads()


@pytest.mark.parametrize("wrap", ["prefetch", "device"])
def test_torch_generator_draws_in_whole_epochs(store, wrap):
    """LinkNeighborLoader's negative sampling draws from torch's global generator (PyG's
    own), in the read-ahead thread: whole epochs under a loop that does not draw give
    the plain loader's batches.  After a ``break`` the generator is left where the
    thread and the loop left it (setting it back undid the loop's own draws:
    test_streams_given_back_only_where_only_dropped_batches_drew)."""
    from torch_geometric.loader import LinkNeighborLoader
    from ddstore import pyg as dpyg
    from ddstore.prefetch import prefetch
    fs, gs = _pyg_graph(store)
    labels = torch.randint(0, 60, (2, 60), generator=torch.Generator().manual_seed(1))

    def make():
        return LinkNeighborLoader((fs, gs), num_neighbors=[2, 1], batch_size=8,
                                  neighbor_sampler=dpyg.NeighborSampler(gs, [2, 1], seed=6),
                                  neg_sampling="binary", edge_label_index=(None, labels))

    def two_epochs(loader):
        torch.manual_seed(11)
        return list(loader) + list(loader)
    want = two_epochs(make())
    for depth in (1, 3):
        inner = make()
        loader = (prefetch(inner, depth) if wrap == "prefetch" else
                  DevicePrefetcher(inner, "cpu", prefetch=depth))
        got = two_epochs(loader)
        assert len(got) == len(want)
        for i, (a, b) in enumerate(zip(got, want)):
            _same(a, b, f"depth {depth} batch {i} of two whole epochs")
    assert not _threads()


@pytest.mark.parametrize("wrap", ["prefetch", "device"])
def test_streams_given_back_only_where_only_dropped_batches_drew(store, wrap):
    """What an early ``break`` gives back (:func:`ddstore.prefetch._give_back`), each
    stream alone: the loop's own draw from torch's global generator between batches is
    kept (it was undone: the generator set back to before the first batch made ahead);
    the loader's ``generator=`` is set back, also after a break at the last batch (the
    thread had run ``RandomSampler`` to its end, which draws the next permutation);
    an iterator dropped after another has run a whole epoch does not wind the sampler's
    draws back (they went 14 -> 4); a wrapper without read-ahead in between is looked
    through; a window loader through the device pipeline makes the draw of a
    ``DataLoader``'s iterator (the caller's next draw differed)."""
    from torch_geometric.loader import NeighborLoader
    from ddstore import pyg as dpyg
    from ddstore.prefetch import prefetch
    fs, gs = _pyg_graph(store)
    read_ahead = (lambda lo, k: prefetch(lo, k)) if wrap == "prefetch" else \
        (lambda lo, k: DevicePrefetcher(lo, "cpu", prefetch=k))

    def make():
        return NeighborLoader((fs, gs), num_neighbors=[2], batch_size=10,
                              neighbor_sampler=dpyg.NeighborSampler(gs, [2], seed=3),
                              input_nodes=torch.arange(60), shuffle=True,
                              generator=torch.Generator().manual_seed(5))

    def after_break(loader, stop, draw=False):
        torch.manual_seed(7)
        for i, _ in enumerate(loader):
            if draw:
                torch.rand(1)  # the loop's own draw (dropout)
            if i == stop:
                break
        return torch.rand(1).item(), [b.n_id.tolist() for b in loader]
    for stop in (1, 5):  # (5: the last of 6 batches)
        for draw in (False, True):
            inner = make()
            want = after_break(make(), stop, draw)
            assert after_break(read_ahead(inner, 2), stop, draw) == want, (stop, draw)
            inner = make()
            assert after_break(read_ahead(prefetch(inner, 0), 2), stop, draw) == want
    inner = make()
    it = iter(read_ahead(inner, 2))
    next(it)
    next(it)
    time.sleep(0.2)  # the thread made its batches ahead
    list(inner)  # a whole epoch by another iterator
    held = inner.node_sampler.draws
    assert held >= 10  # (the 4 or 5 the first iterator made, then 6)
    del it
    gc.collect()
    assert inner.node_sampler.draws == held  # not wound back
    ds = st.WindowDataset(store, f"w{next(_names)}", _series(), 4)
    train = ds.splits()[0]
    for kw in ({}, {"device": "cpu"}, {"device": "cpu", "prefetch": 2}):
        torch.manual_seed(3)
        list(train.loader(4, seed=1, **kw))
        got = torch.rand(1).item()
        assert got == _after_plain_epoch(train), kw
    assert not _threads()


@pytest.mark.parametrize("wrap", ["prefetch", "device"])
def test_shuffles_own_generator_given_back(wrap):
    """A DataLoader given ``generator=g`` whose ``RandomSampler`` has its own ``g2``:
    the read-ahead gives back ``g2`` (the one its thread draws from: the permutation a
    ``RandomSampler`` draws at its end), so the epoch after a break at the last batch is
    the plain loader's (``g``, drawn in the caller's thread at ``iter()``, was taken)."""
    from ddstore.prefetch import prefetch

    class Items(torch.utils.data.Dataset):
        def __len__(self):
            return 20

        def __getitem__(self, i):
            return torch.tensor([i])

    def after_break(read_ahead):
        g, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(9)
        loader = torch.utils.data.DataLoader(
            Items(), batch_size=5, generator=g,
            sampler=torch.utils.data.RandomSampler(Items(), generator=g2))
        loader = read_ahead(loader)
        for i, _ in enumerate(loader):
            time.sleep(0.05)  # the thread runs to the epoch's end
            if i == 3:
                break
        gc.collect()
        return [b.flatten().tolist() for b in loader]
    ahead = (lambda lo: prefetch(lo, 2)) if wrap == "prefetch" else \
        (lambda lo: DevicePrefetcher(lo, "cpu", prefetch=2))
    assert after_break(ahead) == after_break(lambda lo: lo)
    assert not _threads()


def _after_plain_epoch(train):
    torch.manual_seed(3)
    list(train.loader(4, seed=1))
    return torch.rand(1).item()


def test_loader_lifecycle_checks(store):
    """The read-ahead depth is bounded (a loader of 10 batches asked for a million is
    refused naming the range, at once); every loader refuses a prefetch that is not an
    integer (None, False, 0.0 included) with or without a device; the store behind a
    window split and temporal edge batches is found (so the thread-level fallback
    applies to them); a 0-d numpy leaf keeps its shape through the pipeline, and a
    big-endian one its values."""
    from ddstore.prefetch import MAX_PREFETCH, prefetch, store_of
    from ddstore.temporal import EdgeBatches, TemporalGraph, synthetic_stream
    ds = st.WindowDataset(store, f"w{next(_names)}", _series(), 4)
    train = ds.splits()[0]
    with pytest.raises(DDStoreValueError, match=rf"prefetch=1000000 must be an integer in "
                                                rf"\[0, {MAX_PREFETCH}\]"):
        train.loader(4, prefetch=10 ** 6)
    for bad in (MAX_PREFETCH + 1, -1):
        with pytest.raises(DDStoreValueError, match="must be an integer in"):
            prefetch(train.loader(4), bad)
        with pytest.raises(DDStoreValueError, match="must be an integer in"):
            DevicePrefetcher(train.loader(4), "cpu", prefetch=bad)
    s = synthetic_stream(20, 200, seed=2)
    g = TemporalGraph.from_arrays(store, f"t{next(_names)}", s.src, s.dst, s.t)
    eb = EdgeBatches(g, 32, "train")
    for bad in (None, False, 0.0, "", [], 1.5, "2"):
        for device in (None, "cpu"):
            with pytest.raises(DDStoreValueError, match="prefetch="):
                eb.loader(device=device, prefetch=bad)
            with pytest.raises(DDStoreValueError, match="prefetch="):
                train.loader(4, device=device, prefetch=bad)
    assert store_of(train.loader(4)) is store and store_of(eb) is store
    assert store_of(eb.loader(prefetch=1)) is store
    batches = [(np.array(7), np.arange(3, dtype=">i4"), torch.tensor(2.5))] * 2
    for k in (0, 2):
        for a, b, c in DevicePrefetcher(batches, "cpu", prefetch=k):
            assert a.shape == () and int(a) == 7 and c.shape == () and float(c) == 2.5
            assert b.tolist() == [0, 1, 2]


test_device_pipeline_mpi = widths_program_test(
    "device_pipeline.py", [(2, "all"), (3, "all")], timeout=240,
    doc="""tests/mpi/device_pipeline.py: window and graph batches through the pipeline
    (device="cpu", prefetch 0/1/3) equal the plain loaders' on 2 ranks (widths 1, 2) and
    3 ranks (widths 1, 3), transports auto and rma (reads by MPI_Get from the read-ahead
    thread), halo on and off, global and batch samplers; a variable (rows or records)
    removed under a read-ahead thread, freed, or set aside by a transaction that then
    commits or rolls back.""")


# ---------------------------------------------------------------------------- CUDA
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU (pinned staging, side stream, events)")
@pytest.mark.parametrize("k", KS)
def test_cuda_pipeline_device(store, k):
    batches = _mixed_batches()
    pipe = DevicePrefetcher(batches, "cuda", prefetch=k)
    n = 0
    for a, b in zip(pipe, batches):
        assert a["t"].is_cuda and a["data"].x.is_cuda and a["hetero"]["p"].x.is_cuda
        _same(a, b)
        n += 1
    assert n == len(batches)
    assert all(buf.is_pinned() for s in pipe.last_pool.slots for buf in s.buffers.values())
    ds = st.WindowDataset(store, f"w{next(_names)}", _series(T=200), 5, device="cuda",
                          resident="store")
    piped = ds.loader(16, seed=2, prefetch=k)
    assert isinstance(piped, DevicePrefetcher)
    plain = st.WindowDataset.open(store, ds.name, device="cpu").loader(16, seed=2)
    for (x, y), (xw, yw) in zip(piped, plain):
        assert x.is_cuda
        _same((x, y), (xw, yw))
    # direct=True: the store's chunk page-locked in place, every batch's windows DMAed
    # from it (by dds_copy_pieces where cudaMemcpyAsync is found: bench.device says)
    direct = ds.loader(16, seed=2, prefetch=k, direct=True)
    n = 0
    for (x, y), (xw, yw) in zip(direct, plain):
        assert x.is_cuda and y.is_cuda
        _same((x, y), (xw, yw))
        n += 1
    assert n == len(plain) > 1
    (view,) = store.device_views(ds.name, torch.device("cuda"))
    assert view is not None and view.is_pinned()
    dev = st.WindowDataset.open(store, ds.name, device="cuda")
    assert dev.resident == "device" and dev._dev_series.is_cuda
    for (x, y), (xw, yw) in zip(dev.loader(16, seed=2), plain):
        _same((x, y), (xw, yw))


# ------------------------------------------------------------------------ benchmark
@pytest.mark.mpi  # starts processes: the script and the benchmark as a program
def test_gpu_check_script_smoke(tmp_path):
    """scripts/gpu_check.sh without a GPU (its tests skipped here: they are this file):
    the benchmark at small sizes on the CPU, its table, its JSON and the targets table."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: run bash scripts/gpu_check.sh itself")
    env = dict(os.environ, GPU_CHECK_TESTS="0", OUT=str(tmp_path), STEP_MS="2",
               PYTHON=sys.executable)
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_check.sh")], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no CUDA device: running on the CPU with small sizes" in proc.stdout
    res = json.loads((tmp_path / "device_small.json").read_text())
    assert res["device"] == "cpu" and res["args"]["steps"] == 600
    names = [r["name"] for r in res["rows"]]
    assert names == ["resident windows", "torch gather", "store windows (pipeline)",
                     "store windows (direct)", "store windows (plain)", "pinned copy",
                     "epoch: steps alone",
                     "epoch: pipeline k=2", "epoch: direct k=2", "epoch: no pipeline"]
    for r in res["rows"]:
        assert r["per_s"] > 0 and r["seconds"] > 0 and len(r["runs"]) == 2, r
    assert set(res["ratios"]) == {"resident / gather", "store pipeline / pinned copy",
                                  "store direct / pinned copy", "store plain / pinned copy",
                                  "epoch pipeline / steps alone",
                                  "epoch direct / steps alone",
                                  "epoch no pipeline / steps alone"}
    # the epoch with steps cannot be shorter than its steps (2 ms x 8 batches)
    assert res["ratios"]["epoch pipeline / steps alone"] > 0.9
    for line in ("resident windows", "ratio resident / gather:", "== targets",
                 "resident/gather", "status 0"):
        assert line in proc.stdout, line


def test_resident_loader_draws_as_torch_and_set_epoch_finds_wrapped_samplers(store):
    """Window probe: the device-resident loader draws once from torch's generator per
    iter() as torch's DataLoader and the host loader do (it drew nothing: a loop's random
    stream changed with where the series lived), and its iterator has a len;
    st.set_epoch reaches the samplers under PyG's PrefetchLoader (it did nothing, so
    every epoch repeated one order) and refuses an object without any; local= with the
    global sampler is checked."""
    from torch_geometric.loader import PrefetchLoader
    arr = _series()
    res = st.WindowDataset(store, f"r{next(_names)}", arr, 3, resident="device").splits()[0]
    host = st.WindowDataset(store, f"h{next(_names)}", arr, 3).splits()[0]
    after = {}
    for name, loader in (("resident", res.loader(8)), ("host", host.loader(8)),
                         ("torch", torch.utils.data.DataLoader(
                             host, batch_size=8, collate_fn=st.batch_collate,
                             sampler=torch.utils.data.DistributedSampler(host, 1, 0)))):
        torch.manual_seed(0)
        it = iter(loader)
        assert len(it) == len(loader)
        list(it)
        after[name] = torch.rand(1).item()
    assert after["resident"] == after["host"] == after["torch"], after
    for sampler in ("global", "batch"):
        ref, wrapped = host.loader(8, sampler=sampler), PrefetchLoader(
            host.loader(8, sampler=sampler), device="cpu")
        st.set_epoch(ref, 1)
        st.set_epoch(wrapped, 1)
        assert all(torch.equal(a[0], b[0]) for a, b in zip(ref, wrapped)), sampler
        st.set_epoch(wrapped, 0)
        assert not all(torch.equal(a[0], b[0]) for a, b in zip(ref, wrapped)), sampler
    for bad in (None, [1]):
        with pytest.raises(DDStoreValueError, match="is not a loader: it has no sampler"):
            st.set_epoch(bad, 1)
    # a loader whose samplers need no epoch: nothing (as before); EdgeBatches and its
    # wrappers: their own set_epoch (they were refused)
    st.set_epoch(torch.utils.data.DataLoader(host, batch_size=8), 1)
    from ddstore import temporal as tg
    from ddstore.prefetch import PrefetchLoader as OurPrefetch
    g = tg.TemporalGraph.from_arrays(store, f"t{next(_names)}", np.arange(6),
                                     np.arange(1, 7), np.arange(6.0))
    eb = tg.EdgeBatches(g, 2)
    from torch_geometric.loader import PrefetchLoader as PyGPrefetch
    # under PyG's PrefetchLoader (no set_epoch of its own): the one of the loader it
    # wraps (refused as "no set_epoch", though the wrapped loader had one)
    for target in (eb, OurPrefetch(eb, 1), eb.loader("cpu"), PyGPrefetch(eb, device="cpu"),
                   PyGPrefetch(eb.loader("cpu", prefetch=1), device="cpu")):
        st.set_epoch(target, 3)
        assert eb.epoch == 3
        eb.set_epoch(0)
    with pytest.raises(DDStoreValueError, match="local"):
        host.loader(8, local="yes")
