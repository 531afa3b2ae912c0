"""Core store tests: MPI round-trips and bad input over 1-4 ranks, both transports."""
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import ddstore
from ddstore import partition



# The tests marked shared_launch run their program in one job per rank count with the
# other such programs (conftest.shared_launch): the fixture fails the test unless the
# program's summary line says every rank finished with 0 failed checks.
@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
@pytest.mark.parametrize("transport", ["auto", "rma"])
@pytest.mark.shared_launch("core_roundtrip.py", "{transport}")
def test_roundtrip(shared_launch, nprocs, transport):
    out = shared_launch
    assert f"transport={transport} ranks={nprocs} width=" in out, out


@pytest.mark.mpi
@pytest.mark.shared_launch("core_roundtrip.py", "shm", nprocs=2)
def test_roundtrip_shm_transport(shared_launch):
    assert "transport=shm ranks=2 width=2 copy threads 1: ok" in shared_launch, \
        shared_launch


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
@pytest.mark.shared_launch("core_roundtrip.py", "auto", "copy-threads=3")
def test_roundtrip_copy_threads(shared_launch, nprocs):
    """Every read's local pieces copied by 3 threads (DDSTORE_COPY_THREADS=3 from one
    byte on): the same bytes, every width, dtype and read path."""
    for w in {1, nprocs}:
        assert f"transport=auto ranks={nprocs} width={w} copy threads 3: ok" in \
            shared_launch, shared_launch


def test_copy_settings(monkeypatch):
    """DDSTORE_COPY_THREADS: auto (0: chosen at construction) or 1-64;
    DDSTORE_COPY_MIN_BYTES: >= 1; anything else refused, naming the variable, the value
    and the range."""
    from ddstore.settings import COPY_MIN_BYTES, copy_settings
    monkeypatch.delenv("DDSTORE_COPY_THREADS", raising=False)
    monkeypatch.delenv("DDSTORE_COPY_MIN_BYTES", raising=False)
    assert copy_settings() == (0, COPY_MIN_BYTES)
    monkeypatch.setenv("DDSTORE_COPY_THREADS", " AUTO ")
    monkeypatch.setenv("DDSTORE_COPY_MIN_BYTES", "4096")
    assert copy_settings() == (0, 4096)
    monkeypatch.setenv("DDSTORE_COPY_THREADS", "64")
    assert copy_settings()[0] == 64
    for bad in ("0", "65", "-1", "1_0", "two", "\u0663"):
        monkeypatch.setenv("DDSTORE_COPY_THREADS", bad)
        with pytest.raises(ddstore.DDStoreValueError,
                           match=r"DDSTORE_COPY_THREADS=.* must be 'auto' or an integer "
                                 r"number of threads in \[1, 64\]"):
            copy_settings()
    monkeypatch.setenv("DDSTORE_COPY_THREADS", "2")
    monkeypatch.setenv("DDSTORE_COPY_MIN_BYTES", "0")
    with pytest.raises(ddstore.DDStoreValueError, match=r"DDSTORE_COPY_MIN_BYTES='0'"):
        copy_settings()
    # the constructor reads them: a bad one refused before anything is made, a good one
    # in effect (store.copy_threads) until the store is freed
    from mpi4py import MPI
    with pytest.raises(ddstore.DDStoreValueError, match=r"DDSTORE_COPY_MIN_BYTES='0'"):
        ddstore.DDStore(MPI.COMM_SELF)
    monkeypatch.setenv("DDSTORE_COPY_MIN_BYTES", "1")
    monkeypatch.setenv("DDSTORE_COPY_THREADS", "3")
    store = ddstore.DDStore(MPI.COMM_SELF)
    assert store.copy_threads == 3
    store.free()
    assert store.copy_threads == 1


# MPICH can split one machine into "cliques" that MPI treats as separate nodes: this
# exercises transport='auto' with shared-memory and RMA peers in the same group.
SIMULATED_NODES = [{"MPIR_CVAR_NUM_CLIQUES": "2"}, {"MPIR_CVAR_ODD_EVEN_CLIQUES": "1"}]


@pytest.mark.mpi
@pytest.mark.parametrize("env", SIMULATED_NODES, ids=["blocks", "odd-even"])
def test_simulated_nodes(mpirun, env):
    # one job: the node layout, then the round-trip on it (tests/mpi/checks.py)
    out = mpirun("checks.py", 4, "core_nodes.py", "+", "core_roundtrip.py", "auto",
                 env=env)
    assert out.count("simulated nodes ok") == 4, out
    from conftest import summary_of, summary_problem
    for name in ("core_nodes", "core_roundtrip"):
        assert summary_problem(summary_of(out, name), name, 4) is None, out


@pytest.mark.mpi
def test_transport_from_environment(mpirun):
    out = mpirun("core_transport_env.py", 2, env={"DDSTORE_TRANSPORT": "rma"})
    assert "transport=rma shm_peers=0" in out


@pytest.mark.mpi
# (1-3 ranks: a rank with no rows, an odd count, both transports; 4 ranks on 2 cores
# added 9 s of the suite and no case of its own)
@pytest.mark.parametrize("nprocs,transport", [(1, "rma"), (2, "auto"), (3, "rma")])
@pytest.mark.shared_launch("core_errors.py", "{transport}")
def test_bad_input(shared_launch, nprocs, transport):
    assert "rank 0: " in shared_launch and "error cases raised as expected" in \
        shared_launch, shared_launch


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.shared_launch("core_collectives.py", timeout=120)
def test_ranks_in_different_collective_calls_are_told(shared_launch, nprocs):
    # sync / free / DDStore() / WindowDataset against another call, and `with` exits
    assert "core_collectives: " in shared_launch


def test_partition_is_balanced_and_covers_everything():
    for total in (0, 1, 7, 10, 101):
        for parts in (1, 2, 3, 4, 7):
            spans = [partition(total, parts, i) for i in range(parts)]
            assert spans[0][0] == 0 and spans[-1][1] == total
            for (a, b), (c, _) in zip(spans, spans[1:]):
                assert b == c
            sizes = [b - a for a, b in spans]
            assert max(sizes) - min(sizes) <= 1
            assert sizes == sorted(sizes, reverse=True)
    assert [partition(10, 3, i) for i in range(3)] == [(0, 4), (4, 7), (7, 10)]


@pytest.mark.parametrize("args,exc", [((5, 0, 0), ddstore.DDStoreValueError),
                                      ((-1, 2, 0), ddstore.DDStoreValueError),
                                      ((5, 2, 2), ddstore.DDStoreIndexError),
                                      ((5, 2, -1), ddstore.DDStoreIndexError),
                                      ((5.0, 2, 0), ddstore.DDStoreValueError)])
def test_partition_bad_input(args, exc):
    with pytest.raises(exc):
        partition(*args)


def test_errors_subclass_builtin_kinds():
    assert issubclass(ddstore.DDStoreIndexError, IndexError)
    assert issubclass(ddstore.DDStoreValueError, ValueError)
    assert issubclass(ddstore.DDStoreMemoryError, MemoryError)
    for cls in (ddstore.DDStoreIndexError, ddstore.DDStoreValueError,
                ddstore.DDStoreMemoryError, ddstore.DDStoreStateError):
        assert issubclass(cls, ddstore.DDStoreError)


@pytest.mark.mpi
def test_extension_loads_the_same_libmpi_as_mpi4py():
    code = (
        "from mpi4py import MPI\n"
        "import ddstore, ddstore._core as c\n"
        "s = ddstore.DDStore(MPI.COMM_SELF)\n"
        "libs = set()\n"
        "for line in open('/proc/self/maps'):\n"
        "    path = line.split()[-1]\n"
        "    if '/libmpi' in path: libs.add(path)\n"
        "print(sorted(libs))\n"
        "s.free()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    libs = eval(out.stdout.strip().splitlines()[-1])
    assert len(libs) == 1, f"more than one libmpi mapped: {libs}"


@pytest.mark.mpi
def test_demo_verifies_every_byte(mpirun):
    out = mpirun("-m", 3, "ddstore", "demo", "--rows", "5000", "--row-bytes", "100",
                 "--width", "3", "--transport", "rma")
    assert "verified every byte: OK" in out, out


@pytest.mark.mpi
def test_core_benchmark_writes_json(mpirun, tmp_path):
    import json
    path = tmp_path / "core.json"
    mpirun("-m", 2, "ddstore.bench.core", "--quick", "--out", str(path))
    report = json.loads(path.read_text())
    assert report["ranks"] == 2
    for entry in report["row_sizes"].values():
        assert set(entry["worst_rank"]) == {"a_per_row_lock", "b_batch_rma", "c_batch_shm",
                                            "d_memcpy", "d_local_gather",
                                            "a_per_row_lock_control", "d_memcpy_control"}
        assert all(r["p50_us"] > 0 for r in entry["worst_rank"].values())


def test_contains_and_read_only_local_view(store):
    """``x in store`` is False for anything that is neither a name nor a handle held
    (an object with a ``fields`` attribute raised AttributeError); ``local_view(name,
    writable=False)`` is a read-only view of this rank's rows, ``writable`` a bool."""
    import collections
    from ddstore import DDStoreValueError
    store.add("x", np.arange(6.0).reshape(3, 2))
    row = collections.namedtuple("Row", "fields")
    assert "x" in store and store.handle("x") in store
    assert row(1) not in store and None not in store and 3 not in store
    view = store.local_view("x", writable=False)
    lo, hi = store.local_rows("x")
    assert not view.flags.writeable and view.tobytes() == store.get_range(
        "x", lo, hi - lo).tobytes()
    assert store.local_view("x").flags.writeable
    with pytest.raises(DDStoreValueError, match=r"local_view\('x'\): writable must be "
                                                r"True or False, got 'False'"):
        store.local_view("x", writable="False")


@pytest.mark.mpi
def test_gather_benchmark_writes_every_configuration(tmp_path_factory):
    """python -m ddstore.bench.gather on 2 ranks: one entry per store size and row size,
    each with the store's and numpy's times and their ratio (which it is)."""
    import json
    from bench_job import bench_output
    out, folder = bench_output("gather", tmp_path_factory)
    report = json.loads((folder / "gather_n2.json").read_text())
    assert report["ranks"] == 2 and report["batch"] == 64 and report["calls"] == 3, out
    assert sorted(report["configs"]) == ["1MB/256B", "1MB/8B", "2MB/256B", "2MB/8B"], out
    for entry in report["configs"].values():
        t = entry["ns_per_row"]
        assert set(t) == {"get_batch", "take", "take_control"} and min(t.values()) > 0
        assert entry["get_batch_over_take"] == pytest.approx(t["get_batch"] / t["take"])
        assert len(entry["per_rank"]) == 2
    assert "rows of   256 B: get_batch" in out, out


def test_build_finds_mpicc_beside_python_without_path(monkeypatch):
    """A virtual environment that is not activated has pip's mpicc beside its Python but
    not on PATH (PYTHON=/venv/bin/python bash scripts/install.sh)."""
    import importlib.util
    import os
    beside = os.path.join(os.path.dirname(sys.executable), "mpicc")
    if not os.access(beside, os.X_OK):
        pytest.skip("no mpicc beside this Python (MPI not from pip's mpich)")
    monkeypatch.delenv("MPICC", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the system, not the environment
    if shutil.which("mpicc"):
        pytest.skip("an mpicc on the system PATH would hide the case")
    path = os.path.join(os.path.dirname(__file__), "..", "python_bindings",
                        "build_ddstore.py")
    spec = importlib.util.spec_from_file_location("build_ddstore_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # runs mpi_flags() at import, as setup.py does
    incs, _, libs, _ = module.mpi_flags()
    assert any(os.path.exists(os.path.join(d, "mpi.h")) for d in incs) and libs


@pytest.mark.mpi
@pytest.mark.parametrize("argv,code,text", [(["--help"], 0, "demo"),
                                            (["nope"], 2, "invalid choice: 'nope'"),
                                            ([], 2, "required: COMMAND"),
                                            (["demo", "--help"], 0, "--rows")])
def test_command_line(argv, code, text):
    proc = subprocess.run([sys.executable, "-m", "ddstore"] + argv, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert text in proc.stdout + proc.stderr


def _mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.mark.mpi
def test_row_over_2gib_every_read_path(mpirun):
    """MPI counts are int: a row > 2 GiB is read in pieces by the batched and the
    per-row-lock path (the latter once passed a negative count to MPI_Get)."""
    if _mem_available() < 8 << 30:
        pytest.skip("needs about 5 GB of free memory")
    out = mpirun("core_bigrow.py", 2, timeout=300)
    assert out.count("read byte-exact") == 2, out


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,transport", [(2, "rma"), (3, "rma"), (2, "auto")])
@pytest.mark.shared_launch("core_threads.py", "{transport}", timeout=180)
def test_reads_from_several_threads(shared_launch, nprocs, transport):
    assert "core_threads: " in shared_launch


def test_release_free_heap_returns_freed_memory():
    """ddstore.memory.release_free_heap (called after put_node_data's bulk load): heap
    memory freed by the process goes back to the kernel, so RSS falls."""
    import numpy as np
    from ddstore.bench.memory import current_rss
    from ddstore.memory import release_free_heap
    # 2000 x 64 KiB: below glibc's mmap threshold, so they live in the heap; keep every
    # other one so the freed pieces are not all at its top (what free alone gives back)
    blocks = [np.ones(8192) for _ in range(2000)]
    kept = blocks[1::2]
    del blocks
    before = current_rss()
    assert release_free_heap() is True  # this machine's libc is glibc
    after = current_rss()
    assert before - after > 20 << 20, (before, after)
    assert all(k[0] == 1.0 for k in kept)


class _OutOfMemory:
    """An array-like (and a sequence) whose every read fails as an allocation would."""

    def __len__(self):
        return 4

    def __array__(self, *args, **kwargs):
        raise MemoryError("Unable to allocate 8 EiB")

    def __getitem__(self, index):
        raise MemoryError("Unable to allocate 8 EiB")

    def __getattr__(self, name):  # a sampled block's fields
        if name.startswith("__"):
            raise AttributeError(name)
        raise MemoryError("Unable to allocate 8 EiB")


def _memory_paths():
    """(label, call(store)) of layer paths whose local work fails (a step's local part
    raising MemoryError)."""
    import numpy as np
    from ddstore.dynamic import DynamicGraph
    from ddstore.graphs import GraphDataset
    from ddstore.sources import SequenceSource
    from ddstore.temporal import NodeMemory
    from ddstore import pyg as dpyg

    def graphs(store):
        GraphDataset.from_source(store, "g", SequenceSource(_OutOfMemory()), progress=False)

    def records(store):
        store.add_records("r", [{"x": _OutOfMemory()}])

    def node_memory(store):
        mem = NodeMemory(store, "m", 10, 4, 3, mailbox_size=2)
        mem.write(np.array([1]), _OutOfMemory(), np.array([1.0]))
        mem.commit()

    def node_memory_post(store):
        mem = NodeMemory(store, "m", 10, 4, 3, mailbox_size=2)
        mem.post_to_neighbors(_OutOfMemory(), np.zeros((1, 3)), np.array([1.0]))
        mem.commit()

    def feature_rows(store):
        class Rows(_OutOfMemory):  # dtype and shape known, rows fail when read
            shape, dtype, ndim = (4, 2), np.dtype(np.float64), 2
        dpyg.FeatureStore(store, "f").put_tensor(Rows(), group_name=None, attr_name="x",
                                                 index=None)

    def edge_range(store):
        def fn(a, b):
            raise MemoryError("Unable to allocate 8 EiB")
        dpyg.GraphStore(store, "e").put_edge_range(fn, (0, 4))

    def dynamic(store):
        DynamicGraph(store, "d", [np.array([[0], [1]]), _OutOfMemory()])

    def jodie(store):  # the parse of this rank's lines runs out of memory
        import tempfile
        from ddstore.sources import jodie as jodie_source
        from ddstore.temporal import TemporalGraph

        def parse(*args):
            raise MemoryError("Unable to allocate 8 EiB")
        real = jodie_source._parse
        with tempfile.TemporaryDirectory() as tmp:
            path = f"{tmp}/j.csv"
            with open(path, "w") as f:
                f.write("user,item,timestamp,state_label,f0\n0,0,1.0,0,0.5\n")
            jodie_source._parse = parse
            try:
                TemporalGraph.from_jodie(store, "j", path)
            finally:
                jodie_source._parse = real

    return {"graphs": graphs, "records": records, "node_memory": node_memory,
            "node_memory_post": node_memory_post, "feature_rows": feature_rows,
            "edge_range": edge_range, "dynamic": dynamic, "jodie": jodie}


@pytest.mark.parametrize("path", ["graphs", "records", "node_memory", "node_memory_post",
                                  "feature_rows", "edge_range", "dynamic", "jodie"])
def test_memory_error_becomes_ddstore_memory_error(store, path):
    """A MemoryError in local work of any layer (a step's local part) is agreed on and
    raised as a DDStoreMemoryError, not a DDStoreValueError, naming the failure; nothing
    is left in the store."""
    from ddstore import DDStoreMemoryError
    from ddstore._collective import is_agreed
    with pytest.raises(DDStoreMemoryError, match="MemoryError: Unable to allocate 8 EiB") \
            as info:
        _memory_paths()[path](store)
    assert is_agreed(info.value)
    left = store.variables()  # a NodeMemory keeps its own variables, nothing else is
    assert all(v.startswith("m/") for v in left) if path.startswith("node_") else \
        left == [], left


def test_step_lets_what_is_not_an_exception_through(store, monkeypatch):
    """SystemExit in a step's local part is agreed in the step's round (the other ranks
    raise an error naming it; this rank's SystemExit leaves the step, itself, marked
    agreed so the enclosing transaction rolls back everywhere); after the round it is
    this rank's alone (no round). A KeyboardInterrupt is agreed in the step's round
    (issue 43: every rank raises the same DDStoreInterrupt, a KeyboardInterrupt, so the
    rollback runs); an Exception has its round."""
    from ddstore import _collective
    rounds = []
    plain = _collective._round
    monkeypatch.setattr(_collective, "_round",
                        lambda *a, **k: rounds.append(a[1]) or plain(*a, **k))
    exc = SystemExit(3)
    with pytest.raises(SystemExit) as info:
        with store.collective("interrupted"):
            raise exc
    assert info.value is exc and _collective.is_agreed(exc)
    assert rounds == [("interrupted", None)]
    rounds.clear()
    late = SystemExit(4)
    with pytest.raises(SystemExit) as info:
        with store.collective("after") as step:
            step.agree()
            rounds.clear()
            raise late
    assert info.value is late and not _collective.is_agreed(late)
    assert rounds == []
    stop = KeyboardInterrupt("stop")
    with pytest.raises(ddstore.DDStoreInterrupt) as info:
        with store.collective("interrupted"):
            raise stop
    assert _collective.is_agreed(info.value) and info.value.__cause__ is stop
    assert "rank 0" in str(info.value) and "interrupted()" in str(info.value)
    assert rounds == [("interrupted", None)]
    rounds.clear()
    with pytest.raises(ddstore.DDStoreValueError, match=r"^rank 0: fails\(\): OSError: gone$"):
        with store.collective("fails"):
            raise OSError("gone")
    assert rounds == [("fails", None)]
    store.add("x", [1, 2])  # the store serves on
    assert store.get_range("x", 0, 2).tolist() == [1, 2]


def test_as_error_is_the_one_conversion():
    from ddstore import DDStoreIndexError, DDStoreMemoryError, DDStoreValueError
    from ddstore.errors import as_error
    assert as_error(None) is None
    assert as_error((DDStoreValueError, "m")) == (DDStoreValueError, "m")
    assert as_error(DDStoreIndexError("i"), "w") == (DDStoreIndexError, "i")
    assert as_error(MemoryError("x"), "w") == (DDStoreMemoryError, "w: MemoryError: x")
    assert as_error(TypeError("t")) == (DDStoreValueError, "TypeError: t")
    numpy_refusal = type("_ArrayMemoryError", (MemoryError,), {})  # as numpy's
    assert as_error(numpy_refusal("no")) == (DDStoreMemoryError,
                                             "_ArrayMemoryError: no")


@pytest.mark.parametrize("block", [1, 40, 1000, 64 << 20])
def test_add_records_copies_in_blocks_every_byte(store, monkeypatch, block):
    """add_records copies each key's rows in blocks of about COPY_BLOCK_BYTES (it held a
    key's rows twice: a dynamic graph's build peaked at 2.8x what it stored): every
    record reads back byte for byte, whatever the block (smaller than one row, than one
    sample, or all of them), with samples of zero rows among them."""
    from ddstore import records
    monkeypatch.setattr(records, "COPY_BLOCK_BYTES", block)
    rng = np.random.default_rng(5)
    samples = [{"x": rng.standard_normal((i % 5, 3)).astype(np.float32),
                "k": rng.integers(0, 2 ** 40, (3 * (i % 4),)).astype(np.int64)}
               for i in range(23)]
    store.add_records(f"blocks{block}", samples)
    for i, want in enumerate(samples):
        got = store.get_record(f"blocks{block}", i)
        for key in want:
            assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape
            assert got[key].tobytes() == want[key].tobytes(), (i, key)
    store.remove(f"blocks{block}")


def test_get_records_packed_reads_into_given_arrays(store):
    """get_records_packed(..., alloc=): each key's rows read into the array alloc gives
    (a view of a staging buffer: the graph loader's pipeline), byte for byte what a read
    into new arrays gives; None from alloc means a new array; a wrong array is refused
    naming the shape and dtype needed."""
    rng = np.random.default_rng(3)
    samples = [{"x": rng.standard_normal((i % 4 + 1, 3)).astype(np.float32),
                "e": rng.integers(0, 9, (2 * (i % 3), 2)).astype(np.int64)}
               for i in range(9)]
    store.add_records("rp", samples)
    idx = np.array([4, 0, 8, 4], np.int64)
    want, want_sizes = store.get_records_packed("rp", idx)
    buffers = {}

    def alloc(shape, dtype):
        if dtype == np.int64:
            return None
        buffers[dtype.str] = np.full((100,), -1, dtype)
        return buffers[dtype.str][:int(np.prod(shape))].reshape(shape)
    got, sizes = store.get_records_packed("rp", idx, alloc)
    assert set(got) == set(want) == {"x", "e"}
    for key in want:
        assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape
        assert got[key].tobytes() == want[key].tobytes()
        assert np.array_equal(sizes[key], want_sizes[key])
    n = want["x"].size
    assert np.shares_memory(got["x"], buffers["<f4"])
    assert buffers["<f4"][:n].tobytes() == want["x"].tobytes()
    assert (buffers["<f4"][n:] == -1).all()  # nothing written past it
    with pytest.raises(ddstore.DDStoreValueError,
                       match=r"'rp': alloc\(\(8, 2\), int64\): out for 'rp/e' has dtype "
                             r"int64 shape \(2, 3\); needs dtype int64 shape \(8, 2\)"):
        store.get_records_packed("rp", idx, lambda shape, dtype: np.zeros((2, 3), dtype))
    # anything but a numpy array (a torch tensor, a list) is refused the same way
    import torch
    for wrong in (lambda shape, dtype: torch.zeros(shape), lambda shape, dtype: [0] * 8,
                  lambda shape, dtype: np.zeros(shape, dtype)[::-1] if len(shape) == 1
                  else np.zeros(shape, dtype).T):
        with pytest.raises(ddstore.DDStoreValueError, match=r"'rp': alloc\(\(\d+, \d+\), "
                           r"\w+\): out for 'rp/\w' .*(must be a numpy array|needs dtype|"
                           r"must be C-contiguous and writable)"):
            store.get_records_packed("rp", idx, wrong)
    ro = np.zeros((8, 2), np.int64)
    ro.flags.writeable = False
    with pytest.raises(ddstore.DDStoreValueError, match="must be C-contiguous and writable"):
        store.get_records_packed("rp", idx, lambda shape, dtype: ro if dtype == np.int64
                                 else None)
    assert not ro.any()  # nothing written into the refused array


def test_long_double_refused_everywhere_with_the_reason(store, tmp_path):
    """numpy's long double (float128, complex256) is refused by every layer that stores
    raw rows (a checkpoint of two replicas refused it: its padding bytes differ between
    copies of one value), naming why and what to store; float64 and complex128 are
    taken."""
    from ddstore import DDStoreValueError
    from ddstore import pyg as dpyg
    if np.dtype(np.longdouble).itemsize <= 8:
        pytest.skip("this platform's long double is float64")
    for dt in (np.longdouble, np.clongdouble):
        with pytest.raises(DDStoreValueError, match=r"cannot be stored; allowed: .* "
                                                    r"\(numpy's long double, whose padding "
                                                    r"bytes .* store float64 or complex128"):
            store.add("ld", np.zeros(3, dt))
        with pytest.raises(DDStoreValueError, match=r"has dtype (float|complex)\d+, which "
                                                    r"cannot be stored"):
            store.add_records("ldr", [{"a": np.zeros(2, dt)}])
        with pytest.raises(DDStoreValueError, match=r"schema\['a'\] = \((float|complex)\d+, "
                                                    r"\(\)\) cannot be stored \(allowed: .*"
                                                    r"float16-float64"):
            store.init_records("ldr", {"a": (dt, ())}, {"a": [1]})
        # a graph's key: refused by the graph layer naming the sample and the key (it
        # passed to init_records, naming neither), and before write_pickle_dir writes
        from ddstore import graphs
        with pytest.raises(DDStoreValueError, match=r"graphs 'ldg': sample 0: key 'x' has "
                                                    r"dtype .* cannot be stored \(allowed"):
            graphs.GraphDataset.from_samples(store, "ldg", [{"x": np.zeros(2, dt)}],
                                             progress=False)
        with pytest.raises(DDStoreValueError, match=r"write_pickle_dir.*sample 0: key 'x'"):
            graphs.write_pickle_dir([{"x": np.zeros(2, dt)}], str(tmp_path / "ld"))
        assert not (tmp_path / "ld").exists() or not any((tmp_path / "ld").iterdir())
        with pytest.raises(DDStoreValueError, match="cannot be stored"):
            dpyg.FeatureStore(store, "ldf").put_tensor(np.zeros((3, 1), dt),
                                                       group_name=None, attr_name="x")
    assert "ld" not in store and "ldr" not in store
    store.add("c128", np.zeros(2, np.complex128))
    store.remove("c128")


def test_update_refuses_values_the_dtype_cannot_hold(store):
    """``update`` casts rows of the same kind to the variable's dtype, and refuses a
    value the cast would not keep, naming it, its position and the range, the rows left
    as they were: 300 into int8 was stored as 44, 1e300 into float32 as inf.  Rounding
    (float64 -> float32), NaN and inf themselves, and values in range are written.
    Times into a finer unit whose count would leave int64 are refused alike (year 3000
    in datetime64[ns] was stored as 1830), and rows that are no array are named."""
    import warnings
    import torch
    from ddstore import DDStoreValueError
    store.add("i8", np.zeros((3, 2), np.int8))
    store.add("f4", np.zeros(3, np.float32))
    store.add("u2", np.zeros(2, np.uint16))
    store.add("ns", np.zeros(2, "datetime64[ns]"))
    store.add("dt", np.zeros(1, "timedelta64[ns]"))
    cases = [("i8", np.array([[1, 2], [300, -5]]), r"value 300 at \(1, 0\) does not fit "
              r"the variable's dtype int8 \(\[-128, 127\]\); it would be stored as 44 "
              r"\(1 of 4 values"),
             ("i8", np.array([[0, -129]]), r"value -129 at \(0, 1\)"),
             ("f4", np.array([1.0, -1e300]), r"value -1e\+300 at \(1,\) .* float32 "
              r"\(finite values up to 3.40282e\+38 in magnitude\); it would be stored "
              r"as -inf"),
             ("f4", np.array([1, 2 ** 63], np.uint64).astype(np.float64) * 1e30,
              r"value 9.223372036854776e\+48 at \(1,\)"),
             ("u2", np.array([7, 65536], np.uint64), r"value 65536 at \(1,\) .* uint16 "
              r"\(\[0, 65535\]\)"),
             # signed into unsigned: by value (Python ints [1, 2] were refused by dtype)
             ("u2", [3, -1], r"value -1 at \(1,\) .* uint16 \(\[0, 65535\]\); it would "
              r"be stored as 65535"),
             # Python ints beyond int64 (numpy makes an object array): named alike
             ("i8", [[1, 2 ** 70]], r"value 1180591620717411303424 at \(0, 1\) does not "
              r"fit the variable's dtype int8 \(\[-128, 127\]\)"),
             ("u2", [2 ** 64, -1], r"value 18446744073709551616 at \(0,\) .* uint16"),
             # ... and into a float variable: the nearest float, unless beyond every one
             ("f4", [1, 2 ** 200, 3], r"value 1.6069380442589903e\+60 at \(1,\) .* float32"),
             ("f4", [2 ** 1100, 0, 1], r"update 'f4': an integer of 1101 bits \(about "
              r"2\*\*1100\) is beyond the variable's dtype float32"),
             # ... and those numpy makes floats of ([2**63, 0] is float64): by value
             ("i8", [[2 ** 63, 0]], r"value 9223372036854775808 at \(0, 0\) does not fit "
              r"the variable's dtype int8"),
             # a finer time unit: the count would leave int64 (year 3000 in ns wrapped
             # to 1830)
             ("ns", np.array(["2000-01-01", "3000-01-01"], "datetime64[s]"),
              r"value datetime.datetime\(3000, 1, 1, 0, 0\) at \(1,\) .* datetime64\[ns\] "
              r"\(1677-09-21T00:12:43.145224193 to 2262-04-11T23:47:16.854775807\)"),
             ("dt", np.array([10 ** 12], "timedelta64[s]"), r"timedelta64\[ns\]"),
             # not rows: named (they were bare numpy / torch errors)
             ("f4", np.float32(1), r"update 'f4': rows must be an array of rows \[n\], "
              r"got a scalar"),
             ("i8", [[1, 2], [3]], r"update 'i8': rows: not an array"),
             ("f4", torch.ones(2, dtype=torch.bfloat16), r"update 'f4': rows: a torch tensor "
              r"of dtype torch.bfloat16 has no numpy dtype")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning from the cast either
        for name, rows, match in cases:
            before = store.local_view(name).copy()
            with pytest.raises(DDStoreValueError, match=match):
                store.update(name, rows)
            assert store.local_view(name).tobytes() == before.tobytes(), name
        store.update("i8", np.array([[127, -128]], np.int64), offset=2)
        store.update("f4", np.array([np.nan, -np.inf, 0.1]))
        store.update("u2", np.array([65535], np.uint64), offset=1)
        store.update("u2", [9])  # Python ints into uint16
        store.update("ns", np.array(["2262-04-11", "NaT"], "datetime64[s]"))
        store.update("dt", np.array([1500], "timedelta64[us]"))  # finer, in range
    assert store.local_view("ns").astype("datetime64[s]").tolist()[0] == \
        np.datetime64("2262-04-11", "s").tolist() and np.isnat(store.local_view("ns")[1])
    assert store.local_view("dt")[0] == np.timedelta64(1500000, "ns")
    assert store.local_view("i8")[2].tolist() == [127, -128]
    f4 = store.local_view("f4")
    assert np.isnan(f4[0]) and f4[1] == -np.inf and f4[2] == np.float32(0.1)
    assert store.local_view("u2").tolist() == [9, 65535]
    store.update("u2", np.array([2, 65534], dtype=object))  # ints in range: written
    assert store.local_view("u2").tolist() == [2, 65534]
    store.add("u8", np.zeros((1, 2), np.uint64))
    store.update("u8", [[2 ** 64 - 1, 0]])  # (numpy: float64, 2**64 rounded)
    assert store.local_view("u8").tolist() == [[2 ** 64 - 1, 0]]
    # Python ints beyond uint64 (numpy: objects) into a float variable, as numpy casts
    # them (they were refused as "dtype object"), a float among them too
    store.update("f4", [2 ** 64, 2 ** 100, 1.5])
    assert store.local_view("f4").tolist() == [2.0 ** 64, np.float32(2.0 ** 100), 1.5]
    # other objects among them are not numbers this rule takes: refused as before
    import fractions
    for odd in ([2 ** 70, fractions.Fraction(10 ** 400), 0], [2 ** 70, np.longdouble(1), 0]):
        with pytest.raises(DDStoreValueError, match="dtype object cannot be cast"):
            store.update("f4", odd)


def test_hostile_names_indices_and_records_in_process():
    """Hostile round (one process): a 0-d integer tensor is an index of get / get_range
    / get_record (refused before, while get_batch took tensors); an unhashable name is a
    DDStoreValueError (was TypeError); records without keys read back as one {} each
    (get_records returned []); a non-str key is refused as init_records refuses it (it
    was stored and then its checkpoint refused at restore); a rows variable and a record
    set's field of one full name are refused both ways (a checkpoint of the two could
    not be restored: 'nrows is 3 but its blocks hold 2 rows')."""
    import torch
    from mpi4py import MPI
    data = np.arange(24, dtype=np.int16).reshape(8, 3)
    with ddstore.DDStore(MPI.COMM_SELF) as s:
        s.add("x", data)
        assert s.get("x", torch.tensor(5)).tobytes() == data[5].tobytes()
        assert s.get("x", np.array(6)).tobytes() == data[6].tobytes()
        assert s.get_range("x", torch.tensor(2), np.int8(3)).tobytes() == \
            data[2:5].tobytes()
        for bad in (torch.tensor(1.0), torch.tensor(True), np.array(2.5)):
            with pytest.raises(ddstore.DDStoreValueError, match="index must be an integer"):
                s.get("x", bad)
        for call in (lambda: s.get(["x"], 0), lambda: s.get_batch(["x"], [0]),
                     lambda: s.get_range({"x"}, 0, 1), lambda: s.nrows(["x"])):
            with pytest.raises(ddstore.DDStoreValueError, match=r"unknown variable .*'x'"):
                call()
        # a name never made: the known ones, and why a rank may lack one another made
        with pytest.raises(ddstore.DDStoreValueError, match=re.escape(
                "unknown variable 'nope'; known: ['x'] (add and init are collective: a "
                "variable exists once every rank has made it, a rank that skipped the "
                "call has none)")):
            s.get("nope", 0)
        s.add_records("r", [{"a": np.arange(k, dtype=np.float32)} for k in range(4)])
        assert s.get_record("r", torch.tensor(3))["a"].tolist() == [0, 1, 2]
        s.add_records("empty", [{}, {}, {}])
        assert s.get_records("empty", [2, 0]) == [{}, {}]
        assert s.get_records("empty", np.array([1])) == [{}]
        with pytest.raises(ddstore.DDStoreValueError, match="has key 1; keys must be "
                                                            "non-empty str"):
            s.add_records("intkey", [{1: np.zeros(2)}])
        for key in ("", 1):  # init_records refuses what add_records refuses
            with pytest.raises(ddstore.DDStoreValueError,
                               match=r"allowed: a non-empty str key, a dtype of bool"):
                s.init_records("ikey", {key: ("f4", ())}, {key: [1]})
        with pytest.raises(ddstore.DDStoreValueError,
                           match=r"already holds a field named 'r/a' \(key 'a' of "
                                 r"records 'r'\)"):
            s.add("r/a", np.zeros(3))
        with pytest.raises(ddstore.DDStoreValueError, match="already holds a field named"):
            s.init("r/a", 3)
        s.add("q/b", np.zeros(3))
        with pytest.raises(ddstore.DDStoreValueError,
                           match=r"key 'b' makes a field named 'q/b', but the store already "
                                 r"holds variable 'q/b'"):
            s.add_records("q", [{"b": np.zeros(2)}])
        s.add_records("g", [{"b/c": np.zeros(2)}])  # field 'g/b/c'
        with pytest.raises(ddstore.DDStoreValueError,
                           match=r"key 'c' makes a field named 'g/b/c', but the store "
                                 r"already holds a field named 'g/b/c' \(of records 'g'\)"):
            s.add_records("g/b", [{"c": np.zeros(2)}])
        assert s.variables() == ["empty", "g", "q/b", "r", "x"]
        s.get_batch("x", [0])  # still serves


def test_a_name_is_found_only_once_its_rows_are_written(store):
    """Another thread that finds a name just added (``name in store``) reads the rows
    given to ``add`` / ``add_records``, never the zeros before them: the name used to be
    entered before the rows were written and synchronised (16-27 of 60 reads zeros in
    the hostile round)."""
    import sys
    import threading
    rows = np.arange(1, 20001, dtype=np.float64).reshape(-1, 4)  # no zero anywhere
    recs = [{"k": np.full((3, 2), i + 1.0)} for i in range(50)]
    bad, stop = [], []

    def reader(names):
        for name, check in names:
            while name not in store:
                if stop:
                    return
            if not check(name):
                bad.append(name)
    names = [(f"x{i}", lambda n: store.get_range(n, 0, store.nrows(n)).all())
             for i in range(40)] + [
            (f"r{i}", lambda n: all(r["k"].all() for r in store.get_records(
                n, list(range(50))))) for i in range(20)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=reader, args=(names,))
    thread.start()
    try:
        for name, _ in names:
            if name[0] == "x":
                store.add(name, rows)
            else:
                store.add_records(name, recs)
    finally:
        stop.append(True)
        thread.join()
        sys.setswitchinterval(old)
    assert not bad, bad
    store.remove(*[n for n, _ in names])


def test_stores_never_freed_are_told(caplog):
    """A store lives until free() or the job's end (freeing is collective: the garbage
    collector cannot). At 64 live stores a warning says so, once; when MPI runs out of
    communicators (about 290 stores) the error, a DDStoreMemoryError, names how many are
    alive (it was a raw MPI error, the 293rd store's core left behind); freed, stores are
    made again."""
    from mpi4py import MPI
    from ddstore import _lifecycle
    told_before = _lifecycle.many_stores()  # (other tests' stores left alive: told)
    stores, error = [], None
    try:
        with caplog.at_level("WARNING", logger="ddstore"):
            for _ in range(600):
                try:
                    stores.append(ddstore.DDStore(MPI.COMM_SELF))
                except ddstore.DDStoreMemoryError as exc:
                    error = str(exc)
                    break
    finally:
        for s in stores:
            s.free()
    warned = [r.getMessage() for r in caplog.records if "DDStores are alive" in
              r.getMessage()]
    assert told_before or (len(warned) == 1 and warned[0].startswith(
        "[ddstore] 64 DDStores are alive in this process")), warned
    assert error is not None and "DDStores are alive in this process" in error and \
        error.endswith("free() those no longer used"), error
    with ddstore.DDStore(MPI.COMM_SELF) as again:
        again.add("x", np.arange(3))
        assert again.get_range("x", 0, 3).tolist() == [0, 1, 2]


def test_bad_communicator_and_record_sizes_named(store):
    """A ``comm`` that is no communicator is a DDStoreValueError naming it (a bare
    AttributeError: 'str' object has no attribute 'Get_size'); record sizes whose sum
    leaves int64 are named as such (they wrapped to a negative row count, blamed on an
    internal ``n_local``); nothing is created."""
    from mpi4py import MPI
    from ddstore import DDStoreValueError
    for bad, shown in (("world", "str 'world'"), (3, "int 3"), (MPI.COMM_NULL, "Comm")):
        with pytest.raises(DDStoreValueError, match=r"DDStore: comm must be an mpi4py "
                                                    r"intracommunicator .* got " + shown):
            ddstore.DDStore(bad)
    with pytest.raises(DDStoreValueError, match="DDStore.plan: comm must be"):
        ddstore.DDStore.plan(10, comm="x")
    # a schema in the other byte order: stored in this machine's, as add_records stores
    # data of either (it kept '>i2', and update_records then refused data of both)
    store.init_records("be", {"x": (">i2", (2,))}, {"x": [1, 2]})
    assert store.record_schema("be")["x"][0] == np.dtype("=i2")
    rows = np.array([[1, -2], [300, 4], [-5, 6]])
    store.update_records("be", 0, 1, {"x": rows[:1].astype(">i2")})
    store.update_records("be", 1, 2, {"x": rows[1:].astype("<i2")})
    store.sync()
    assert store.get_records_packed("be", [0, 1])[0]["x"].tolist() == rows.tolist()
    store.remove("be")
    before = store.variables()
    with pytest.raises(DDStoreValueError, match=r"init_records 'O': bad sizes: "
                                                r"sizes\['a'\] add up to more than "
                                                r"2\*\*63 - 1 rows"):
        store.init_records("O", {"a": (np.int8, ())}, {"a": [2 ** 62] * 3})
    # a uint64 size beyond int64 named as given (it wrapped: 'a size is negative')
    with pytest.raises(DDStoreValueError, match=r"bad sizes: sizes\['a'\] holds "
                                                r"18446744073709551615; allowed: integers "
                                                r"in \[0, 2\*\*63 - 1\]"):
        store.init_records("O", {"a": (np.int8, ())},
                           {"a": np.array([2 ** 64 - 1], np.uint64)})
    # rows of no bytes: at most one per byte of memory (2**62 + 2**61 of them on each of
    # two ranks wrapped the group's total to a negative row count); a row shape no
    # numpy array can have, refused when made (every read raised numpy's own error)
    for n, words in ((2 ** 62, r"variable 'z': 4611686018427387904 rows of 0 bytes; "
                               r"allowed: at most \d+ \(one per byte"),):
        with pytest.raises(DDStoreValueError, match=words):
            store.init("z", n, (0,), np.float32)
    with pytest.raises(DDStoreValueError, match=r"variable 'a0': one row of shape \(0, "
                                                r"9223372036854775807, 9223372036854775807\) "
                                                r"and dtype uint8 is 0 bytes \(\d+ without "
                                                r"its zero dimensions\); allowed: at most"):
        store.init("a0", 2, (0, 2 ** 63 - 1, 2 ** 63 - 1), np.uint8)
    assert store.variables() == before


def test_the_forty_second_sessions_store_round(store):
    """What a fuzzer of the store found: a refused ``update_records`` had written the keys
    before the refused one; ``init_records`` read dtypes otherwise than ``init`` (a torch
    dtype refused, ``np.int64(7)`` taken as int64); ``get_records_packed``'s refusals
    named ``get_records``; a variable named ``'v~aside1'`` (the store's own name of what
    a transaction set aside) was named ``'v'`` in its messages."""
    import torch
    from ddstore import DDStoreIndexError, DDStoreValueError
    store.init_records("r", {"a": (np.float32, ()), "b": (np.int64, ())},
                       {"a": [3], "b": [2]})
    store.sync()
    with pytest.raises(DDStoreValueError, match=re.escape(
            "update_records 'r': key 'b' has shape (3,); records [0, 1) need (2,)")):
        store.update_records("r", 0, 1, {"a": np.array([1, 2, 3], np.float32),
                                         "b": np.array([1, 2, 3], np.int64)})
    got = store.get_record("r", 0)
    assert got["a"].tolist() == [0, 0, 0] and got["b"].tolist() == [0, 0]
    store.update_records("r", torch.tensor(0), np.int64(1),  # (0-d indices, as update's)
                         {"a": np.array([1, 2, 3], np.float32), "b": np.array([4, 5])})
    got = store.get_record("r", 0)
    assert got["a"].tolist() == [1, 2, 3] and got["b"].tolist() == [4, 5]
    with pytest.raises(DDStoreIndexError, match=re.escape(
            "get_records_packed 'r': index 5 (position 0) out of range [0, 1)")):
        store.get_records_packed("r", [5])
    with pytest.raises(DDStoreIndexError, match=re.escape(
            "get_records 'r': index 5 (position 0) out of range [0, 1)")):
        store.get_records("r", [5, 0])
    store.init_records("t", {"x": (torch.float64, (2,))}, {"x": [1]})
    assert store.record_schema("t")["x"][0] == np.float64
    for value in (np.int64(7), np.float32(0.5)):
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"init_records 'u': schema['x'] dtype={value!r} is a value, not a dtype")):
            store.init_records("u", {"x": (value, ())}, {"x": [1]})
    for call in (lambda: store.add("v~aside1", np.ones(2, np.int8)),
                 lambda: store.init("v~aside12", 2, (), np.int8)):
        with pytest.raises(DDStoreValueError, match=re.escape(
                "ends as the store's own names of what an open transaction set aside")):
            call()
    with pytest.raises(DDStoreValueError, match="none ending '~aside<digits>'"):
        store.add_records("k", [{"a~aside3": np.zeros(2)}])
    with pytest.raises(DDStoreValueError, match="no key ending '~aside<digits>'"):
        store.init_records("k", {"a~aside3": (np.int8, ())}, {"a~aside3": [1]})
    # a key UTF-8 cannot encode (a lone surrogate): refused, as such a name is
    for call in (lambda: store.add_records("k", [{"\ud800": np.zeros(2)}]),
                 lambda: store.init_records("k", {"\udc80": (np.int8, ())},
                                            {"\udc80": [1]})):
        with pytest.raises(DDStoreValueError, match="lone surrogate, which UTF-8 cannot"):
            call()
    # a name that is no str, an alloc that is no callable: named (bare TypeErrors)
    for call in (lambda: store.get_record(["r"], 0), lambda: store.get_records(["r"], [0]),
                 lambda: store.get_records_packed(["r"], [0]),
                 lambda: store.record_sizes(["r"], [0]), lambda: store.record_schema(["r"])):
        with pytest.raises(DDStoreValueError, match=re.escape(
                "unknown records ['r'] (a list: names are str); known: ['r', 't']")):
            call()
    with pytest.raises(DDStoreValueError, match=re.escape(
            "get_records_packed 'r': alloc=5 is not callable; allowed: None")):
        store.get_records_packed("r", [0], alloc=5)
    store.add("v~aside", np.ones(2, np.int8))  # (no digits: a name like any other)
    assert sorted(store.variables()) == ["r", "t", "v~aside"]
