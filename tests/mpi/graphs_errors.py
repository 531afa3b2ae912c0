"""Bad input to the graph layer: every case is a DDStoreError raised on every rank with a
message naming the sample/file/key, never a hang or crash; the store keeps working.

Usage: timeout 300 mpiexec -n N python graphs_errors.py   (N >= 2; bad samples sit in the
last rank's chunk only, so the other ranks must learn of the error collectively).  The cases
below run in order on every rank, on one store and one shared temporary directory; the
harness reports each by name.
"""
import os
import pickle
import shutil
import sys
import types

import numpy as np
import torch
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import (Cases, check, counts, expect_error, run_main,  # noqa: E402
                      shared_tmpdir)
from graphs_common import assert_graph_equal, tensor_sample  # noqa: E402

import ddstore  # noqa: E402
import ddstore.graphs as graphs  # noqa: E402
from ddstore import DDStoreError, DDStoreIndexError, DDStoreValueError  # noqa: E402
from torch_geometric.loader import DataLoader  # noqa: E402

torch.set_num_threads(1)
comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
cases = Cases()
assert size >= 2, "run with at least 2 ranks"
N = 12
LAST = N - 1  # in the last rank's chunk
# in the last rank's chunk on 2-3 ranks, and not one of the samples every rank reads
# (the first, middle and last: compared between the ranks)
EXIT_AT = N - 2


class Evil:
    """Unpickling this runs os.system (if the unpickler allowed it)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class Failing(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        if i == LAST:
            raise RuntimeError("generator broke on purpose")
        return tensor_sample(i)


class Shards(torch.utils.data.Dataset):
    """Gives only samples [lo, hi) (this rank's chunk), as a Dataset of shards held on
    each node's own disk would; the others raise FileNotFoundError."""

    def __init__(self, lo, hi):
        self.lo, self.hi, self.refused = lo, hi, 0

    def __len__(self):
        return N

    def __getitem__(self, i):
        if not self.lo <= i < self.hi:
            self.refused += 1
            raise FileNotFoundError(f"sample {i}'s shard is on another node")
        return tensor_sample(i)


class Exiting(Failing):
    def __getitem__(self, i):
        if i == EXIT_AT:
            sys.exit(f"leaving at sample {i}")
        return tensor_sample(i)


@cases("samples of another kind on the last rank")
def _samples_of_another_kind_on_the_last_rank(t):
    store, good, name = t.store, t.good, t.name
    # keys, dtypes or trailing shapes that differ (last rank only)
    bad = list(good)
    bad[LAST] = tensor_sample(LAST)
    bad[LAST].x = bad[LAST].x.double()
    expect_error(DDStoreValueError, [f"sample {LAST}", "'x'", "float64"],
                 lambda: graphs.GraphDataset.from_samples(store, name(), bad, progress=False))
    bad[LAST] = tensor_sample(LAST)
    del bad[LAST].edge_attr
    expect_error(DDStoreValueError, [f"sample {LAST}", "missing keys ['edge_attr']"],
                 lambda: graphs.GraphDataset.from_samples(store, name(), bad, progress=False))
    bad[LAST] = tensor_sample(LAST)
    bad[LAST].x = torch.zeros(4, 5)
    expect_error(DDStoreValueError, [f"sample {LAST}", "'x'", "(5,)"],
                 lambda: graphs.GraphDataset.from_samples(store, name(), bad, progress=False))
    bad[LAST] = tensor_sample(LAST)
    bad[LAST].smiles = "CCO"
    expect_error(DDStoreValueError, [f"sample {LAST}", "'smiles'", "str"],
                 lambda: graphs.GraphDataset.from_samples(store, name(), bad, progress=False))
    # a whole rank's chunk differs from the others (each chunk is self-consistent)
    lo, hi = ddstore.partition(N, size, size - 1)
    other = [tensor_sample(i) for i in range(N)]
    for i in range(lo, hi):
        other[i].y = other[i].y.to(torch.float64)
    expect_error(DDStoreValueError, [f"sample {lo}", "'y'"],
                 lambda: graphs.GraphDataset.from_samples(store, name(), other, progress=False))
    # the odd sample is the first of the last rank's chunk: the next one is blamed by
    # the rank (which knows only its chunk), so the message names the reference too
    other = [tensor_sample(i) for i in range(N)]
    other[lo].x = other[lo].x.double()
    expect_error(DDStoreValueError, [f"sample {lo + 1}", "'x'", "float64",
                                     f"compared with sample {lo} (every sample needs "
                                     f"the keys of the others; either may be the odd "
                                     f"one)"],
                 lambda: graphs.GraphDataset.from_samples(store, name(), other, progress=False))


@cases("empty, unequal and failing data sets")
def _empty_unequal_and_failing_data_sets(t):
    store, good, name = t.store, t.good, t.name
    # ---- empty data set, ranks disagreeing on the length, a failing generator
    expect_error(DDStoreValueError, ["empty data set"],
                 lambda: graphs.GraphDataset.from_samples(store, name(), [], progress=False))
    expect_error(DDStoreValueError, ["different length"],
                 lambda: graphs.GraphDataset.from_samples(store, name(), good[:N - rank],
                                                    progress=False))
    # the same length and layout, other values on the last rank (a list made without a
    # seed): the samples every rank reads (first, middle, last) are compared, naming the
    # sample, the key and the ranks (a mix of every rank's samples was stored)
    for at in (0, N // 2, LAST):
        varied = list(good)
        if rank == size - 1:
            varied[at] = varied[at].clone()
            varied[at].y = varied[at].y + 1
        expect_error(DDStoreValueError,
                     [f"graphs 'v", f"sample {at} 'y' differs between ranks (",
                      f"{'rank 0' if size == 2 else 'ranks 0, 1'}: float32 [1, 2], fingerprint "
                      f"0x", f"; rank {size - 1}: float32 [1, 2], fingerprint 0x",
                      "every rank must pass the same samples", "the same seeds"],
                     lambda: graphs.GraphDataset.from_samples(store, name(), varied,
                                                              progress=False))
    # a key missing on the last rank's copy of a compared sample (outside its chunk: the
    # layouts agree) -> named, not a bare KeyError
    varied = list(good)
    if rank == size - 1:
        varied[0] = varied[0].clone()
        del varied[0].y
    expect_error(DDStoreValueError, ["sample 0 'y' differs between ranks (",
                                     f"; rank {size - 1}: no such key)"],
                 lambda: graphs.GraphDataset.from_samples(store, name(), varied,
                                                          progress=False))
    # a Dataset that gives only this rank's samples (shards on node-local disks): the
    # samples it cannot give are not compared; stored as given
    lo, hi = ddstore.partition(N, store.group_size, store.group_rank)
    shards = Shards(lo, hi)
    ds = graphs.GraphDataset.from_samples(store, name(), shards, progress=False)
    check(all(shards[i].y.tolist() == ds[i].y.tolist() for i in range(lo, hi)),
          "a Dataset of node-local shards stored as given")
    check(shards.refused > 0, "the shards refused the samples of other ranks")
    expect_error(DDStoreValueError,
                 [f"sample {LAST}", "RuntimeError", "generator broke on purpose"],
                 lambda: graphs.GraphDataset.from_samples(store, name(), Failing(),
                                                    progress=False))
    expect_error(DDStoreValueError, ["sample 0", "int"],
                 lambda: graphs.GraphDataset.from_samples(store, name(), [1, 2, 3],
                                                    progress=False))
    # sys.exit() in the user's dataset on the last rank: that rank exits as asked, the
    # others are told why (they met its next call, out of step, and the job aborted)
    before = store.variables()
    got = None
    try:
        graphs.GraphDataset.from_samples(store, name(), Exiting(), progress=False)
    except SystemExit as exc:
        got = ("SystemExit", str(exc))
    except DDStoreValueError as exc:
        got = ("DDStoreValueError", str(exc))
    want_text = "SystemExit: leaving at sample"
    check(got is not None and (got == ("SystemExit", f"leaving at sample {EXIT_AT}")
                               if rank == size - 1 else
                               got[0] == "DDStoreValueError" and want_text in got[1]
                               and f"rank {size - 1}" in got[1]),
          f"sys.exit in a dataset: {got}")
    check(store.variables() == before, f"sys.exit left {store.variables()}")


@cases("pickle directories")
def _pickle_directories(t):
    store, good, name, tmp = t.store, t.good, t.name, t.tmp
    marker = os.path.join(tmp, "PWNED")
    dirs = {k: os.path.join(tmp, k) for k in ("ok", "empty", "corrupt", "evil",
                                               "emptyfile", "notpickle")}
    if rank == 0:
        for k, d in dirs.items():
            if k == "empty":
                os.makedirs(d)
            else:
                graphs.write_pickle_dir(good, d)
        with open(os.path.join(dirs["corrupt"], f"sample-{LAST:08d}.pkl"), "r+b") as f:
            f.truncate(40)
        with open(os.path.join(dirs["evil"], f"sample-{LAST:08d}.pkl"), "wb") as f:
            pickle.dump(Evil(marker), f)
        open(os.path.join(dirs["emptyfile"], f"sample-{LAST:08d}.pkl"), "wb").close()
        with open(os.path.join(dirs["notpickle"], f"sample-{LAST:08d}.pkl"), "w") as f:
            f.write("this is not a pickle at all")
        os.makedirs(os.path.join(tmp, "unlisted"))
        with open(os.path.join(tmp, "unlisted", "nothing.txt"), "w") as f:
            f.write("x")
        with open(os.path.join(tmp, "raw.bp.txt"), "w") as f:
            f.write("x")
    comm.Barrier()
    missing = os.path.join(tmp, "no-such-dir")
    expect_error(DDStoreValueError, [missing, "does not exist"],
                 lambda: graphs.GraphDataset.from_pickle_dir(store, name(), missing,
                                                       progress=False))
    expect_error(DDStoreValueError, [dirs["empty"], "empty"],
                 lambda: graphs.GraphDataset.from_pickle_dir(store, name(), dirs["empty"],
                                                       progress=False))
    expect_error(DDStoreValueError, ["unlisted", "empty"],
                 lambda: graphs.GraphDataset.from_pickle_dir(
                     store, name(), os.path.join(tmp, "unlisted"), progress=False))
    bad_file = f"sample-{LAST:08d}.pkl"
    for k in ("corrupt", "emptyfile", "notpickle"):
        expect_error(DDStoreValueError,
                     [f"sample {LAST}: ", os.path.join(dirs[k], bad_file)],
                     lambda: graphs.GraphDataset.from_pickle_dir(store, name(), dirs[k],
                                                           progress=False))
    msg = expect_error(DDStoreValueError,
                       [os.path.join(dirs["evil"], bad_file), "system", "not allowed"],
                       lambda: graphs.GraphDataset.from_pickle_dir(store, name(),
                                                             dirs["evil"],
                                                             progress=False))
    comm.Barrier()
    assert not os.path.exists(marker), "the malicious pickle ran code"
    assert "nothing was executed" in msg
    # a missing file in the middle of a PFF directory (metadata says N files): named
    # when read; the last one missing: the metadata refused at once (a count of 10**12
    # over a few files listed 10**12 names)
    if rank == 0:
        os.remove(os.path.join(dirs["ok"], "sample-00000001.pkl"))
    comm.Barrier()
    expect_error(DDStoreValueError,
                 [os.path.join(dirs["ok"], "sample-00000001.pkl"), "cannot read"],
                 lambda: graphs.GraphDataset.from_pickle_dir(store, name(), dirs["ok"],
                                                       progress=False))
    comm.Barrier()
    if rank == 0:
        os.remove(os.path.join(dirs["ok"], bad_file))
    comm.Barrier()
    expect_error(DDStoreValueError,
                 [f"nsamples={LAST + 1} but the last sample's file",
                  os.path.join(dirs["ok"], bad_file), "does not exist"],
                 lambda: graphs.GraphDataset.from_pickle_dir(store, name(), dirs["ok"],
                                                       progress=False))


@cases("ADIOS2 files not written by ddstore")
def _adios2_files_not_written_by_ddstore(t):
    store, name, tmp = t.store, t.name, t.tmp
    bp_missing = os.path.join(tmp, "missing.bp")
    expect_error(DDStoreValueError, [bp_missing, "does not exist"],
                 lambda: graphs.GraphDataset.from_adios(store, name(), bp_missing,
                                                  progress=False))
    foreign, plain, junk = (os.path.join(tmp, f) for f in ("foreign.bp", "plain.bp",
                                                            "raw.bp.txt"))
    if rank == 0:
        import adios2
        with adios2.Stream(foreign, "w") as s:
            s.write("foo", np.arange(5.0), [5], [0], [5])
        from ddstore.sources import write_records_adios
        write_records_adios([{"a": np.zeros((2, 1))}] * 3, plain)
    comm.Barrier()
    expect_error(DDStoreValueError, [foreign, "missing", "ddstore/schema", "foo"],
                 lambda: graphs.GraphDataset.from_adios(store, name(), foreign,
                                                  progress=False))
    expect_error(DDStoreValueError,
                 [plain, "not written by ddstore.graphs.write_adios"],
                 lambda: graphs.GraphDataset.from_adios(store, name(), plain,
                                                  progress=False))
    expect_error(DDStoreValueError, [junk],
                 lambda: graphs.GraphDataset.from_adios(store, name(), junk,
                                                  progress=False))


@cases("ADIOS2 files truncated")
def _adios2_files_truncated(t):
    store, good, name, tmp = t.store, t.good, t.name, t.tmp
    # a truncated copy (ADIOS2 itself would wait forever for the missing bytes): cut
    # the data file by 16 bytes (BP5 may end it with up to 8 bytes that hold no
    # array data), by half, and to nothing
    whole = os.path.join(tmp, "whole.bp")
    if rank == 0:
        graphs.write_adios(good, whole)
    comm.Barrier()
    for cut in ("16", "half", "all"):
        short = os.path.join(tmp, f"short-{cut}.bp")
        if rank == 0:
            shutil.copytree(whole, short)
            data0 = os.path.join(short, "data.0")
            size0 = os.path.getsize(data0)
            with open(data0, "r+b") as f:
                f.truncate({"16": size0 - 16, "half": size0 // 2, "all": 0}[cut])
        comm.Barrier()
        expect_error(DDStoreValueError, [short, "truncated", "data.0"],
                     lambda: graphs.GraphDataset.from_adios(store, name(), short,
                                                      progress=False))
    ok = graphs.GraphDataset.from_adios(store, name(), whole, progress=False)
    for i in range(N):
        assert_graph_equal(ok[i], good[i], f"untruncated file graph {i}")
    t.whole, t.ok = whole, ok


@cases("ADIOS2 scalar key with two rows")
def _adios2_scalar_key_with_two_rows(t):
    store, good, name, tmp, whole = t.store, t.good, t.name, t.tmp, t.whole
    # a scalar key with two rows in one sample (the last rank's)
    twice = os.path.join(tmp, "twice.bp")
    if rank == 0:
        from ddstore.sources import AdiosSource, write_records_adios
        layout, recs = graphs.graph_records(good)
        recs[LAST]["t"] = np.repeat(recs[LAST]["t"], 2, axis=0)
        with AdiosSource(whole) as src:
            write_records_adios(recs, twice, meta=src.meta)
    comm.Barrier()
    expect_error(DDStoreValueError,
                 [f"sample {LAST}", twice, "'t' is a scalar", "2 rows"],
                 lambda: graphs.GraphDataset.from_adios(store, name(), twice,
                                                  progress=False))


@cases("ADIOS2 read failing in the middle of a load; block by block")
def _adios2_read_failing_mid_load(t):
    store, good, name, whole, ok = t.store, t.good, t.name, t.whole, t.ok
    # a read failing in the middle of the last rank's block-by-block load: raised
    # on every rank, no half-loaded records left, the store keeps serving
    from ddstore.graphs import dataset as dataset_module
    from ddstore.sources import AdiosSource
    plain_read = AdiosSource.read_packed

    def failing_read(self, start, stop, offsets=None):
        if rank == size - 1 and start <= LAST < stop:
            raise OSError(f"disk gone at sample {LAST}")
        return plain_read(self, start, stop, offsets)

    before = set(store.variables())
    dataset_module.LOAD_BLOCK_BYTES, AdiosSource.read_packed = 1, failing_read
    try:
        expect_error(DDStoreValueError,
                     ["'half'", "OSError", f"disk gone at sample {LAST}"],
                     lambda: graphs.GraphDataset.from_adios(store, "half", whole,
                                                            progress=False))
    finally:
        dataset_module.LOAD_BLOCK_BYTES, AdiosSource.read_packed = 64 << 20, plain_read
    assert set(store.variables()) == before, store.variables()
    for i in range(N):
        assert_graph_equal(ok[i], good[i], f"graph {i} after a failed load")
    # block by block (one sample per block) gives the same graphs as one block
    dataset_module.LOAD_BLOCK_BYTES = 1
    try:
        small = graphs.GraphDataset.from_adios(store, name(), whole, progress=False)
    finally:
        dataset_module.LOAD_BLOCK_BYTES = 64 << 20
    for i in range(N):
        assert_graph_equal(small[i], good[i], f"graph {i} loaded in 1-sample blocks")


@cases("ranks loading different names")
def _ranks_loading_different_names(t):
    store, good = t.store, t.good
    # ---- ranks loading different names: caught before anything is stored
    expect_error(DDStoreValueError,
                 ["out of step", "GraphDataset.from_samples('g0')",
                  "GraphDataset.from_samples('g1')"],
                 lambda: graphs.GraphDataset.from_samples(store, f"g{min(rank, 1)}", good,
                                                    progress=False))
    assert "g0" not in store.variables() and "g1" not in store.variables()


@cases("reads: bad indices, types and workers")
def _reads_bad_indices_types_and_workers(t):
    store, good = t.store, t.good
    # ---- reading: indices out of range, wrong types, DataLoader workers
    t.ds = ds = graphs.GraphDataset.from_samples(store, "good", good, progress=False)
    expect_error(DDStoreIndexError, [str(N), f"[{-N}, {N})"], lambda: ds[N])
    expect_error(DDStoreIndexError, [str(-N - 1), f"[{-N}, {N})"], lambda: ds[-N - 1])
    for i in (-1, -N):  # from the end, as PyG's Dataset
        a, b = ds[i], ds[N + i]
        check(all(torch.equal(a[k], b[k]) for k in b.keys()), f"ds[{i}] != ds[{N + i}]")
    expect_error(DDStoreIndexError, ["integer"], lambda: ds["a"])  # as PyG
    expect_error(DDStoreIndexError, [str(N), "position 1", f"[{-N}, {N})"],
                 lambda: ds.__getitems__([0, N]))  # negative ones count from the end
    expect_error(DDStoreIndexError, [str(N + 5)], lambda: ds.get_batch([N + 5]))
    expect_error(DDStoreValueError, ["at least one"], lambda: ds.get_batch([]))
    expect_error(DDStoreValueError, ["1-D"], lambda: ds.get_batch([[0, 1]]))
    expect_error(DDStoreValueError, ["num_workers"],
                 lambda: ds.loader(4, num_workers=2))
    expect_error(DDStoreValueError, ["batch_size"], lambda: ds.loader(0))
    it = iter(DataLoader(ds, batch_size=4, num_workers=1))
    expect_error(DDStoreValueError, ["num_workers"], lambda: next(it))
    # the worker's error, re-raised here, leaves the iterator in a reference cycle
    # (torch's re-raising frame); collected later, its worker would wait out torch's
    # 5 s join (see pyg_workers_stale.release): end it now
    it._shutdown_workers()
    expect_error(DDStoreValueError, ["'good'", "already holds variable"],
                 lambda: graphs.GraphDataset.from_samples(store, "good", good, progress=False))


@cases("a failure on the last rank while a build annotates what it made")
def _(t):
    """The last step of a build records the object (``store.annotate``): a rank failing
    there (out of memory) is agreed, and what the build made is gone on every rank (the
    others went on to the next collective call and waited there for ever, the probe of
    the thirty-third session found: GraphDataset, WindowDataset, DynamicGraph,
    NodeMemory)."""
    from ddstore import DDStoreMemoryError
    from ddstore import spatiotemporal as st
    from ddstore.dynamic import DynamicGraph
    from ddstore.temporal import NodeMemory
    store = t.store
    series = np.arange(60 * 3, dtype=np.float32).reshape(60, 3, 1)
    steps = [np.array([[0, 1], [1, 2]])] * 10
    builds = {
        "GraphDataset": lambda n: graphs.GraphDataset.from_samples(store, n, t.good,
                                                                   progress=False),
        "WindowDataset": lambda n: st.WindowDataset(store, n, series, 2),
        "DynamicGraph": lambda n: DynamicGraph(store, n, steps, num_nodes=3),
        "NodeMemory": lambda n: NodeMemory(store, n, 10, 4, 4)}
    for what, build in builds.items():
        name = t.name()
        annotate_fails(store, what, build, name)
        build(name)  # the same name again
        check(name in store.annotations(), f"{what}: not built again")


def annotate_fails(store, what, call, *args, state=lambda: None, **kwargs):
    """``call(*args, **kwargs)`` with ``store.annotate`` raising ``MemoryError`` on the last rank:
    the error agreed on every rank, and the store's variables and annotations (and
    ``state()``, a layer's own record) as they were before it."""
    from ddstore import DDStoreMemoryError
    before = (store.variables(), store.annotations(), state())
    real = store.annotate

    def failing(*args, **kwargs):
        raise MemoryError("injected in annotate")
    if rank == size - 1:
        store.annotate = failing
    try:
        expect_error(DDStoreMemoryError, [f"rank {size - 1}:", "injected in annotate"],
                     lambda: call(*args, **kwargs), agree=True,
                     what=f"{what}: annotate fails")
    finally:
        if rank == size - 1:
            del store.annotate
    after = (store.variables(), store.annotations(), state())
    check(after == before, f"{what}: left {after}, was {before}")
    check(store.annotate == real, f"{what}: annotate not restored")


@cases("a failure on the last rank while a PyG store records a change")
def _(t):
    """The PyG feature and graph stores record every change (``store.annotate``) in a
    step of the call: a rank failing there is agreed, and the call leaves the store and
    the object as they were on every rank (the others kept the change, the thirty-third
    session's probe found: construction, puts, declarations, removals, weights,
    out-lists, put_node_data)."""
    from ddstore import pyg as dpyg
    store = t.store
    name = t.name()
    annotate_fails(store, "FeatureStore()", dpyg.FeatureStore, store, name)
    fs = dpyg.FeatureStore(store, name)
    def attrs():  # the attributes held, and what the store records of them
        return (sorted(map(repr, fs.get_all_tensor_attrs())),
                store.annotation(f"{name}#pyg.FeatureStore").meta)
    x = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    annotate_fails(store, "put_tensor", fs.put_tensor, x, group_name=None, attr_name="x",
                   state=attrs)
    fs.put_tensor(x, group_name=None, attr_name="x")
    annotate_fails(store, "declare_rows", fs.declare_rows, {"other": 5}, state=attrs)
    fs.put_tensor(torch.ones(2), group_name="other", attr_name="a",  # not declared:
                  index=torch.tensor([0, 1]))                         # 2 rows, not 5
    check(fs.get_tensor_size(group_name="other", attr_name="a") == (2,),
          f"declare_rows undone: {fs.get_tensor_size(group_name='other', attr_name='a')}")
    fs.remove_tensor(group_name="other", attr_name="a")
    annotate_fails(store, "update_tensor", fs.update_tensor, x.double(), group_name=None,
                   attr_name="x", state=lambda: (
                       attrs(), fs.get_tensor(group_name=None, attr_name="x").dtype))
    annotate_fails(store, "remove_tensor", fs.remove_tensor, group_name=None,
                   attr_name="x", state=attrs)
    check(torch.equal(fs.get_tensor(group_name=None, attr_name="x"), x),
          "the feature's rows after the failed changes")
    annotate_fails(store, "GraphStore()", dpyg.GraphStore, store, name)
    gs = dpyg.GraphStore(store, name, weight_attr=None)
    def edges():  # the edge layouts held, and what the store records of them
        return (sorted(map(repr, gs.get_all_edge_attrs())),
                store.annotation(f"{name}#pyg.GraphStore").meta)
    ei = torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 0, 2]])
    put = dict(edge_type=None, layout="coo", size=(4, 4))
    annotate_fails(store, "put_edge_index", gs.put_edge_index, (ei[0], ei[1]), state=edges,
                   **put)
    gs.put_edge_index((ei[0], ei[1]), **put)
    annotate_fails(store, "build_backward", gs.build_backward, state=edges)
    fs.put_tensor(torch.ones(5), group_name=("_N", "to", "_N"), attr_name="w")  # (edges)
    annotate_fails(store, "put_edge_weights", gs.put_edge_weights, "w",
                   state=lambda: (edges(), gs.weight_attr))
    annotate_fails(store, "remove_edge_index", gs.remove_edge_index, state=edges, **put)
    got = gs.get_edge_index(**put)
    check(sorted(zip(got[0].tolist(), got[1].tolist())) ==
          sorted(zip(ei[0].tolist(), ei[1].tolist())), "the edges after the failed changes")
    fs.remove_tensor(group_name=("_N", "to", "_N"), attr_name="w")
    gs.remove_edge_index(**put)
    fs.remove_tensor(group_name=None, attr_name="x")


@cases("the store serves after the errors, and is freed")
def _the_store_serves_after_the_errors_and_is_freed(t):
    store, good, ds = t.store, t.good, t.ds
    # ---- the store still serves correct data
    for i in range(N):
        assert_graph_equal(ds[i], good[i], f"after errors graph {i}")
    again = graphs.GraphDataset.from_samples(store, "again", good, progress=False)
    for i, got in enumerate(again.__getitems__(list(range(N)))):
        assert_graph_equal(got, good[i], f"new data set after errors graph {i}")
    store.free()
    expect_error(DDStoreError, ["freed"], lambda: ds[0])


def main():
    counter = iter(range(1000))
    t = types.SimpleNamespace(store=ddstore.DDStore(comm),
                              good=[tensor_sample(i) for i in range(N)],
                              name=lambda: f"v{next(counter)}")  # a fresh name each call
    with shared_tmpdir("ddstore-err-") as t.tmp:
        cases.run(t)
    total = comm.allreduce(counts["errors"])
    if rank == 0:
        print(f"graphs_errors: {size} ranks, {total} error cases checked")


run_main(main)
