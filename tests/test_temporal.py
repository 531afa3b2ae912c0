"""ddstore.temporal: the MPI program tests/mpi/temporal_check.py on 1-4 ranks (every
width, both transports, against brute-force references), integer times kept exactly
(tests/mpi/temporal_int_times.py on 1-3 ranks), the synthetic stream, and
a smoke run of the benchmark (the TGAT example runs in test_examples.py); JODIE files and
PyG's TemporalData through tests/mpi/temporal_formats_check.py on 1-3 ranks (against PyG's
own JODIEDataset processing and train_val_test_split) and bad input on one rank."""
import json
import re
import threading

import numpy as np
import pytest

from bench_job import bench_output
from conftest import passed_on


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
@pytest.mark.shared_launch("temporal_check.py", "{tmp}", timeout=180)
def test_temporal_all_placements(shared_launch, nprocs):
    passed_on(shared_launch, nprocs)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
@pytest.mark.shared_launch("temporal_formats_check.py", timeout=240)
def test_temporal_formats(shared_launch, nprocs):
    """from_jodie / from_pyg / to_pyg against PyG's own JODIEDataset processing and
    train_val_test_split, every value; bad input on every rank (temporal_formats_check)."""
    passed_on(shared_launch, nprocs)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
@pytest.mark.shared_launch("temporal_int_times.py", timeout=300)
def test_integer_times_end_to_end(shared_launch, nprocs):
    """Integer times (around 2**53, 2**62, negative, Unix nanoseconds) through
    from_arrays / from_jodie / from_tgl / from_pyg, the sampler, EdgeBatches and
    NodeMemory, every width and transport, against a brute force in exact ints; float
    times unchanged; mixed shares decided alike (tests/mpi/temporal_int_times.py)."""
    passed_on(shared_launch, nprocs)


def test_synthetic_stream():
    from ddstore import DDStoreValueError
    from ddstore.temporal import synthetic_stream
    a = synthetic_stream(500, 20_000, seed=3)
    b = synthetic_stream(500, 20_000, seed=3)
    c = synthetic_stream(500, 20_000, seed=4)
    for key in ("src", "dst", "t", "edge_feat", "split"):
        assert np.array_equal(getattr(a, key), getattr(b, key)), key
    assert not np.array_equal(a.dst, c.dst)
    assert a.src.dtype == np.int64 and a.t.dtype == np.float64
    assert a.edge_feat.shape == (20_000, 8) and a.edge_feat.dtype == np.float32
    assert np.all(np.diff(a.t) > 0)
    assert a.src.min() >= 0 and max(a.src.max(), a.dst.max()) < 500
    frac = np.bincount(a.split, minlength=3) / 20_000
    assert abs(frac[0] - 0.7) < 0.02 and abs(frac[1] - 0.15) < 0.02
    assert np.all(np.diff(a.split.astype(int)) >= 0)  # train, then val, then test in time
    deg = np.bincount(np.concatenate([a.src, a.dst]), minlength=500)
    assert deg.max() > 20 * np.median(deg)  # power-law activity
    same = (a.community[a.src] == a.community[a.dst]).mean()
    assert same > 0.7  # community structure (p_within 0.8 plus repeats)
    with pytest.raises(DDStoreValueError, match="num_nodes"):
        synthetic_stream(1, 10)
    # partners=k: every repeating edge goes to one of its source's k own partners
    assert all(np.array_equal(getattr(a, k), getattr(synthetic_stream(
        500, 20_000, seed=3, partners=0), k)) for k in ("src", "dst", "t", "edge_feat"))
    p = synthetic_stream(500, 20_000, seed=3, p_repeat=1.0, partners=3)
    per_src = [np.unique(p.dst[p.src == v]).size for v in np.unique(p.src)]
    assert max(per_src) <= 3 and np.mean(per_src) > 2, np.mean(per_src)
    assert np.array_equal(p.src, a.src) and np.all(np.diff(p.t) > 0)
    mix = synthetic_stream(500, 20_000, seed=3, p_repeat=0.5, partners=3)
    same = mix.dst == p.dst  # the partner draws are those of p where an edge repeats
    assert 0.45 < same.mean() < 0.6, same.mean()
    with pytest.raises(DDStoreValueError, match="partners"):
        synthetic_stream(10, 10, partners=-1)


@pytest.mark.mpi
def test_benchmark_smoke(tmp_path_factory):
    """mpiexec -n 2 python -m ddstore.bench.temporal on a small stream: widths 1 and 2,
    transports auto and rma, JSON written with the one-sided traffic per batch (some
    over rma at width 2, none at width 1)."""
    out, tmp_path = bench_output("temporal", tmp_path_factory)
    res = json.load(open(tmp_path / "temporal_n2.json"))
    combos = {(r["width"], r["transport"], r["strategy"], tuple(r["fanouts"]))
              for r in res["results"]}
    assert len(combos) == 9, combos
    # the lookups' fixed costs, one entry per (width, transport) built
    assert {(q["width"], q["transport"]) for q in res["lookups"]} == {
        (r["width"], r["transport"]) for r in res["results"]}
    assert all(q["neighbors_us"] > 0 and q["neighbor_lists_600_us"] > 0
               for q in res["lookups"]), res["lookups"]
    for r in res["results"]:
        assert r["sampled_edges"] > 0 and r["edges_per_s_per_rank"] > 0
        q = r["rma"]
        assert len(q["by_rank"]) == 2 and q["gets_per_batch"] >= 0, q
        if r["width"] == 2 and r["transport"] == "rma":
            assert r["shm_peers"] == 0 and q["remote_owners"] == 1, q
            assert q["gets_per_batch"] > 0 and q["round_trips_per_batch"] > 0, q
            assert q["bytes_per_batch"] > 0 and q["gets_per_owner_per_batch"] > 0, q
            assert q["round_trips_per_owner_per_batch"] > 0, q
        if r["width"] == 1:
            assert q["remote_owners"] == 0 and q["gets_per_batch"] == 0, q
    assert "network per batch:" in out, out
    by_w = {r["width"]: r["tcsr_bytes_per_rank"] for r in res["results"]}
    assert max(by_w[2]) < max(by_w[1])  # width 2 halves (about) the T-CSR per rank


@pytest.mark.mpi
def test_scale_benchmark_smoke(tmp_path_factory):
    """mpiexec -n 2 python -m ddstore.bench.temporal_scale --quick: the bounded build from
    arrays and from a range-wise written edges.csv give the same T-CSR; the store holds
    its share of the T-CSR plus the edge table, and the peak is measured per rank."""
    out, tmp_path = bench_output("temporal-scale", tmp_path_factory)
    assert "same T-CSR as from arrays: True" in out, out
    res = json.load(open(tmp_path / "temporal_scale_n2.json"))["results"][0]
    whole = res["arrays"]["tcsr_bytes_whole"]
    assert whole == 24 * 2 * 30000
    # the store holds the T-CSR (int32 ids: 16 B per entry, 2 entries per edge) and the
    # edge table (int32 src, dst, float64 t, int8 split: 17 B per edge), once over the
    # two ranks (49 B per edge; 73 with int64 ids)
    assert sum(p["store_bytes"] for p in res["arrays"]["per_rank"]) == 30000 * (32 + 17)
    assert all(p["peak_above"] > 0 for p in res["arrays"]["per_rank"])
    assert res["tgl"]["same_tcsr_as_arrays"] is True
    assert all(v["edges_per_s_per_rank"] > 0 for v in res["sampling"].values())
    # cold, warm (the same batches again) and prefaulted (a fresh build mapped first:
    # each rank's half of the T-CSR and its node-local peer's, the whole of it)
    for way in ("sampling_warm", "sampling_prefaulted"):
        assert sorted(res[way]) == sorted(res["sampling"]), res
        assert all(v["edges_per_s_per_rank"] > 0 for v in res[way].values())
    narrow = 16 * 2 * 30000  # int32 nbr and eid, float64 ts: 16 B per entry
    assert res["prefault_bytes_per_rank"] == [narrow, narrow], res


@pytest.mark.mpi
def test_node_memory_benchmark_smoke(tmp_path_factory):
    """mpiexec -n 2 python -m ddstore.bench.node_memory --quick: NodeMemory vs TGL's
    MailBox in torch, mailbox 1 and 10, JSON written with positive times."""
    out, folder = bench_output("node-memory", tmp_path_factory)
    path = folder / "nm.json"
    assert "ours/torch" in out, out
    res = json.load(open(path))
    assert res["benchmark"] == "node_memory" and res["ranks"] == 2, res
    assert res["mail_dim"] == 2 * res["memory_dim"] + 172
    assert [r["mailbox_size"] for r in res["results"]] == [1, 10]
    for r in res["results"]:
        for key in ("read", "write_post", "commit", "total"):
            assert r["ms_per_batch"][key] > 0, r
        for key in ("read", "update", "total"):
            assert r["torch_ms_per_batch"][key] > 0, r
        assert r["ratio_ours_over_torch"] > 0 and r["width"] == 2
        # each rank holds state / width: its own node range, nothing of the other's
        assert r["nbytes_per_rank"] == r["nbytes_formula_per_rank"], r
        assert sum(r["nbytes_per_rank"]) == \
            r["state_bytes_per_node"] * res["num_nodes"] + 16 * len(r["nbytes_per_rank"])
        big = r["big"]
        assert big["bytes_per_rank"] == big["state_bytes"] // 2 + big["batch_bytes_per_rank"]
    assert res["targets"]["nbytes_is_state_over_width"] is True


# ------------------------------------------------------------------ bad input (1 rank)
def test_absurd_node_count_is_a_ddstore_error(store):
    """A node id of 10**12 (or num_nodes=10**12) asks for a replicated indptr of 8 TB:
    a DDStoreMemoryError saying what was asked and what fits, nothing left in the store."""
    from ddstore import DDStoreMemoryError
    from ddstore.temporal import TemporalGraph
    big = 10 ** 12
    with pytest.raises(DDStoreMemoryError,
                       match=rf"graph 'g': num_nodes={big + 1} \(the largest node id \+ 1\)"
                             rf" needs 24 TB per rank .*; at most \d+ nodes fit"):
        TemporalGraph.from_arrays(store, "g", [0, big], [1, 2], [0.0, 1.0])
    with pytest.raises(DDStoreMemoryError, match=rf"graph 'g': num_nodes={big} needs "
                                                 rf"24 TB per rank"):
        TemporalGraph.from_arrays(store, "g", [0, 1], [1, 2], [0.0, 1.0], num_nodes=big)
    assert store.variables() == []
    g = TemporalGraph.from_arrays(store, "g", [0, 1], [1, 2], [0.0, 1.0])
    assert g.num_nodes == 3


def test_uint64_node_ids_reported_as_given(store):
    from ddstore import DDStoreIndexError
    from ddstore.temporal import TemporalGraph
    big = 2 ** 63 + 5
    with pytest.raises(DDStoreIndexError, match=rf"graph 'g': dst\[1\] = {big} out of "
                                                rf"range \[0, num_nodes\)"):
        TemporalGraph.from_arrays(store, "g", np.array([0, 1], np.uint64),
                                  np.array([1, big], np.uint64), [0.0, 1.0])
    assert store.variables() == []
    # an id at or beyond a num_nodes given: named by array and position (the largest
    # id of the rank was named, without where it was)
    with pytest.raises(DDStoreIndexError, match=r"graph 'g': dst\[1\] = 7 out of range "
                                                r"\[0, 2\) \(num_nodes=2\)"):
        TemporalGraph.from_arrays(store, "g", [0, 1, 1], [1, 7, 0], [1, 2, 3], num_nodes=2)
    assert store.variables() == []


def test_integer_times_are_kept_exactly(store):
    """Integer times are int64 end to end (2**53 + 1 used to become 2**53): the edge
    table, the T-CSR lists and to_pyg; float times stay float64.  A float graph refuses
    query times it would round, an int64 graph query times that are not whole."""
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph, TemporalSampler
    t = np.array([2 ** 53 + 1, -2 ** 62 - 1, 2 ** 62 + 3, 9007199254740993], np.int64)
    g = TemporalGraph.from_arrays(store, "g", [0, 1, 2, 0], [1, 0, 0, 2], t)
    assert g.time_dtype == np.int64 and g.t_dtype == np.int64
    got = g.edges([0, 1, 2, 3])[2]
    assert got.dtype == np.int64 and got.tolist() == t.tolist()
    assert g.neighbors(0)[1].tolist() == [2 ** 53 + 1, 9007199254740993]
    assert g.to_pyg().t.tolist() == t.tolist()
    with pytest.raises(DDStoreValueError, match=r"sample: ts\[0\] = 1.5 is not an integer "
                                                r"within int64"):
        TemporalSampler(g, (2,)).sample([0], [1.5])
    f = TemporalGraph.from_arrays(store, "f", [0, 1], [1, 0], np.array([0.5, 2 ** 60]))
    assert f.time_dtype == np.float64 and f.edges([0, 1])[2].tolist() == [0.5, 2.0 ** 60]
    with pytest.raises(DDStoreValueError, match=r"sample: ts\[1\] = 9007199254740993 is "
                                                r"outside \[-2\*\*53, 2\*\*53\]"):
        TemporalSampler(f, (2,)).sample([0, 1], [1, 2 ** 53 + 1])
    # Python ints beyond int64 (numpy makes an object array of them): named with the
    # range, as 2**63 was (they were "ts must be a 1-D array of real times, dtype object")
    for graph, ts, rng in ((g, [3, -2 ** 63 - 1], r"-2\*\*63, 2\*\*63 - 1"),
                           (g, [2 ** 70, 1], r"-2\*\*63, 2\*\*63 - 1"),
                           (f, [0, 2 ** 70], r"-2\*\*53, 2\*\*53")):
        at = 1 if ts[1] != 1 else 0
        with pytest.raises(DDStoreValueError, match=rf"sample: ts\[{at}\] = {ts[at]} is "
                                                    rf"outside \[{rng}\]"):
            TemporalSampler(graph, (2,)).sample([0, 1], ts)
    for bad in (np.array([2 ** 63], np.uint64), [0, 2 ** 64]):
        with pytest.raises(DDStoreValueError, match=r"graph 'h': t\[\d\] = \d+ is outside "
                                                    r"\[-2\*\*63, 2\*\*63 - 1\]"):
            TemporalGraph.from_arrays(store, "h", [0] * len(bad), [1] * len(bad), bad)
    assert sorted(store.variables()) == sorted(g._variables() + f._variables())


def test_int64_dts_beyond_int64_is_refused(store):
    """dts of int64 times is exact; a root and an edge more than 2**63 apart would wrap,
    and are refused naming both times."""
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph, TemporalSampler
    g = TemporalGraph.from_arrays(store, "g", [0, 0], [1, 1],
                                  np.array([-2 ** 62 - 5, 2 ** 62], np.int64))
    s = TemporalSampler(g, (2,))
    blk = s.sample([0], [-2 ** 62 + 7])[0]
    assert blk.dts.dtype == np.int64 and blk.dts.tolist() == [12]
    with pytest.raises(DDStoreValueError, match=r"root time 4611686018427387905 minus edge "
                                                r"time -4611686018427387909 is "
                                                r"9223372036854775814, beyond int64"):
        s.sample([0], [2 ** 62 + 1])


@pytest.mark.parametrize("strategy", ["recent", "uniform"])
def test_huge_fanouts_sample_what_exists(store, strategy):
    """Fanouts of 10**9 or 2**63 take every eligible edge (no buffer of roots x fanout):
    the same blocks as a fanout of the largest degree."""
    from ddstore.temporal import TemporalGraph, TemporalSampler
    rng = np.random.default_rng(0)
    m = 400
    g = TemporalGraph.from_arrays(store, "g", rng.integers(0, 30, m),
                                  rng.integers(0, 30, m), rng.random(m), add_reverse=True)
    roots = np.repeat(np.arange(30), 200)  # 6000 roots: 6000 x 10**9 would be 48 TB
    ts = np.full(roots.shape[0], 0.7)
    ref = TemporalSampler(g, (int(g.degree().max()),) * 2, strategy).sample(roots, ts)
    for fan in (10 ** 9, 2 ** 63):
        got = TemporalSampler(g, (fan, fan), strategy).sample(roots, ts)
        for a, b in zip(got, ref):
            for key in ("nodes", "ts", "row", "col", "eid", "edge_ts"):
                assert np.array_equal(getattr(a, key), getattr(b, key)), (fan, key)
    assert 0 < ref[0].num_edges < ref[1].num_edges
    # the premise: a fanout above every degree samples what a fanout of the largest
    # degree samples (here unclamped: 6 roots x 10**4 is a small buffer)
    few, few_ts = np.arange(0, 30, 5), np.full(6, 0.7)
    a = TemporalSampler(g, (10 ** 4,), strategy).sample(few, few_ts)[0]
    b = TemporalSampler(g, (int(g.degree().max()),), strategy).sample(few, few_ts)[0]
    assert a.num_edges > 0 and np.array_equal(a.eid, b.eid)
    assert np.array_equal(a.row, b.row)


def test_sampler_buffers_that_cannot_be_allocated(store, monkeypatch):
    from ddstore import DDStoreMemoryError
    from ddstore._core import TCSR
    from ddstore.temporal import TemporalGraph, TemporalSampler
    g = TemporalGraph.from_arrays(store, "g", [0, 1, 2], [1, 2, 0], [0.0, 1.0, 2.0])
    sampler = TemporalSampler(g, (5,))

    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 7.28 TiB")
    monkeypatch.setattr(TCSR, "sample", no_memory)
    with pytest.raises(DDStoreMemoryError, match=r"sample of graph 'g', layer 0: fanout 5 "
                                                 r"for 2 roots needs room for 10 sampled "
                                                 r"edges .* about \d+ fit"):
        sampler.sample([0, 1], [5.0, 5.0])


def test_sampler_after_remove_names_the_graph(store):
    from ddstore import DDStoreStateError
    from ddstore.temporal import TemporalGraph, TemporalSampler
    g = TemporalGraph.from_arrays(store, "g", [0, 1, 2], [1, 2, 0], [0.0, 1.0, 2.0])
    sampler = TemporalSampler(g, (2,))
    g.remove()
    with pytest.raises(DDStoreStateError, match=r"sample: graph 'g' was removed from the "
                                                r"store"):
        sampler.sample([0], [5.0])
    TemporalGraph.from_arrays(store, "g", [0, 1, 2], [1, 2, 0], [0.0, 1.0, 2.0])
    with pytest.raises(DDStoreStateError, match=r"graph 'g' was removed"):
        sampler.sample([0], [5.0])


def test_degree_after_remove_or_free_is_refused():
    """degree() read this process's copy of indptr and went on answering for a graph
    removed, or a store freed (every other read refused); now it is refused too, in
    the rank and in a process forked from it (the rank's remove, after the fork)."""
    import os
    import pickle
    from mpi4py import MPI
    import ddstore
    from ddstore import DDStoreStateError
    from ddstore.temporal import TemporalGraph
    store = ddstore.DDStore(MPI.COMM_SELF)
    g = TemporalGraph.from_arrays(store, "g", [0, 1, 2], [1, 2, 0], [0.0, 1.0, 2.0])
    assert g.degree().tolist() == [1, 1, 1]
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: reads after the rank's remove
        try:
            os.read(go_r, 1)
            out = ("returned", g.degree().tolist())
        except BaseException as exc:  # noqa: BLE001 -- told to the parent
            out = ("raised", str(exc))
        try:
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    g.remove()
    os.write(go_w, b"1")
    with os.fdopen(r, "rb") as f:
        got = pickle.loads(f.read())
    os.waitpid(pid, 0)
    assert got[0] == "raised" and "was removed by the rank this process was forked" in \
        got[1], got
    with pytest.raises(DDStoreStateError, match=r"degree: graph 'g' was removed"):
        g.degree([0])
    g = TemporalGraph.from_arrays(store, "g", [0, 1, 2], [1, 2, 0], [0.0, 1.0, 2.0])
    store.free()
    with pytest.raises(DDStoreStateError, match=r"freed"):
        g.degree()


def test_sampler_epoch_reaches_processes_forked_before(store):
    """set_epoch in the rank reaches a process forked before it (a persistent DataLoader
    worker): its uniform draws are the rank's for the new epoch (a copy of the epoch
    repeated the draws of the epoch of its fork, every epoch)."""
    import os
    import pickle
    from ddstore.temporal import TemporalGraph, TemporalSampler, synthetic_stream
    s = synthetic_stream(40, 2000, seed=3)
    g = TemporalGraph.from_arrays(store, "g", s.src, s.dst, s.t, num_nodes=40)
    sampler = TemporalSampler(g, (5,), strategy="uniform", seed=7)
    roots, ts = np.arange(40), np.full(40, float(s.t.max()) + 1)
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker forked in epoch 0, sampling in epoch 1
        try:
            os.read(go_r, 1)
            out = (sampler.epoch, sampler.sample(roots, ts)[0].nodes.tolist())
        except BaseException as exc:  # noqa: BLE001 -- told to the parent
            out = (None, repr(exc))
        try:
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    first = sampler.sample(roots, ts)[0].nodes.tolist()
    sampler.set_epoch(1)
    os.write(go_w, b"1")
    with os.fdopen(r, "rb") as f:
        epoch, got = pickle.loads(f.read())
    os.waitpid(pid, 0)
    want = sampler.sample(roots, ts)[0].nodes.tolist()
    assert epoch == 1 and got == want and want != first, (epoch, got)


def test_sampler_copy_has_its_own_epoch_and_degree_refused_in_a_transaction(store):
    """A copy of a sampler keeps an epoch of its own (the epoch lives in memory shared
    with forked workers: a copy shared it), ``epoch`` is assignable as before; degree()
    is refused once the graph was removed inside a transaction, as sample() is."""
    import copy
    from ddstore import DDStoreStateError
    from ddstore.temporal import TemporalGraph, TemporalSampler
    g = TemporalGraph.from_arrays(store, "g", [0, 1, 2], [1, 2, 0], [0.0, 1.0, 2.0])
    sampler = TemporalSampler(g, (2,))
    other = copy.copy(sampler)
    other.set_epoch(9)
    sampler.epoch = 3
    assert (sampler.epoch, other.epoch) == (3, 9)
    with store.transaction():
        g.remove()
        with pytest.raises(DDStoreStateError, match=r"degree: graph 'g' was removed"):
            g.degree()


def test_tgl_row_with_extra_field_refused(store, tmp_path):
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    (tmp_path / "edges.csv").write_text(",src,dst,time,ext_roll\n0,0,1,1.0,0\n"
                                        "1,1,2,2.0,0,7\n2,2,0,3.0,0\n")
    with pytest.raises(DDStoreValueError, match=r"edges.csv, line 3: malformed row: 6 "
                                                r"fields, expected 5"):
        TemporalGraph.from_tgl(store, "g", str(tmp_path))
    (tmp_path / "edges.csv").write_text(",src,dst,time,ext_roll\n0,0,1,1.0,0\n"
                                        "1,1,2,2.0\n")
    with pytest.raises(DDStoreValueError, match=r"edges.csv, line 3: malformed row: 4 "
                                                r"fields, expected 5"):
        TemporalGraph.from_tgl(store, "g", str(tmp_path))
    # node features of fewer rows than the edges' nodes: the file named (it was
    # "node_feat has 1 rows over all ranks", no file)
    import torch
    (tmp_path / "edges.csv").write_text(",src,dst,time,ext_roll\n0,0,1,1.0,0\n"
                                        "1,1,2,2.0,0\n")
    torch.save(torch.ones(1, 2), str(tmp_path / "node_features.pt"))
    with pytest.raises(DDStoreValueError, match=r"graph 'g': .*node_features.pt: 1 rows, "
                                                r"but .*edges.csv names nodes up to id 2 "
                                                r"\(3 nodes\); it needs one row per node"):
        TemporalGraph.from_tgl(store, "g", str(tmp_path))
    assert store.variables() == []


@pytest.mark.parametrize("field,text", [("src", "1e1"), ("dst", "2.0"),
                                        ("src", "18446744073709551615"),
                                        ("dst", "9223372036854775808"),
                                        ("ext_roll", "1.0")])
def test_tgl_ids_must_be_integer_literals(store, tmp_path, field, text):
    """A TGL id or split written other than as an integer literal within int64 ("1e1"
    was node 10, 2**64 - 1 was "-1" with no line) is refused by ``from_tgl`` naming the
    file, the line and the text as written; nothing is stored."""
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    row = {"src": "1", "dst": "2", "ext_roll": "0"}
    row[field] = text
    (tmp_path / "edges.csv").write_text(
        ",src,dst,time,ext_roll\n0,0,1,1.0,0\n"
        f"1,{row['src']},{row['dst']},2.0,{row['ext_roll']}\n2,2,0,3.0,0\n")
    path = str(tmp_path / "edges.csv")
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{path}, line 3: column {field!r} is {text!r}; it must be")):
        TemporalGraph.from_tgl(store, "g", str(tmp_path))
    assert store.variables() == []


# ------------------------------------------------------------------ JODIE and PyG (1 rank)
def _jodie(path, rows):
    path.write_text("user_id,item_id,timestamp,state_label,comma_separated_list_of_features"
                    "\n" + "".join(r + "\n" for r in rows))
    return str(path)


def test_jodie_small_file_and_labels(store, tmp_path):
    from ddstore.temporal import TemporalGraph
    path = _jodie(tmp_path / "j.csv", ["0,0,1.0,0,0.5,1.5", "2,1,1.0,1,0.25,-2",
                                       "1,0,4.0,0,3,4"])
    g = TemporalGraph.from_jodie(store, "j", path)
    assert (g.num_users, g.num_items, g.num_nodes, g.num_edges) == (3, 2, 5, 3)
    s, d, t = g.edges([0, 1, 2])
    assert s.tolist() == [0, 2, 1] and d.tolist() == [3, 4, 3] and t.tolist() == [1, 1, 4]
    assert g.edge_labels([2, 1]).tolist() == [0, 1]
    assert g.edge_features([1]).tolist() == [[0.25, -2.0]]
    assert g.edge_features([0]).dtype == np.float32 and g.t_dtype == np.int64
    assert g.to_pyg().msg.tolist() == [[0.5, 1.5], [0.25, -2.0], [3.0, 4.0]]
    g.remove()
    assert store.variables() == []
    import torch
    # no feature columns: msg is float32 [E, 0], as PyG's JODIEDataset gives (it was
    # None, and TGN's `msg_dim = data.msg.size(-1)` failed on it)
    path = _jodie(tmp_path / "n.csv", ["0,0,1.0,0", "2,1,1.0,1", "1,0,4.0,0"])
    data = TemporalGraph.from_jodie(store, "n", path).to_pyg()
    assert data.msg.shape == (3, 0) and data.msg.dtype == torch.float32
    assert data.y.tolist() == [0, 1, 0]
    TemporalGraph.open(store, "n").remove()


@pytest.mark.parametrize("tail", ["\n", "\n\n\n", "  \r\n\r\n", "\t\n \n"])
def test_jodie_blank_lines_at_the_end_are_no_rows(store, tmp_path, tail):
    """As pandas (PyG's JODIEDataset) reads them: the graph of the rows alone; a blank
    line between rows stays refused, naming its line."""
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    rows = ["0,0,1.0,0,0.5,1.5", "2,1,1.0,1,0.25,-2", "1,0,4.0,0,3,4"]
    path = _jodie(tmp_path / "j.csv", rows)
    with open(path, "a") as f:
        f.write(tail)
    g = TemporalGraph.from_jodie(store, "j", path)
    s, d, t = g.edges([0, 1, 2])
    assert g.num_edges == 3 and s.tolist() == [0, 2, 1] and t.tolist() == [1, 1, 4]
    assert g.edge_features([2]).tolist() == [[3.0, 4.0]]
    g.remove()
    path = _jodie(tmp_path / "gap.csv", rows[:2] + [""] + rows[2:])
    with pytest.raises(DDStoreValueError, match=re.escape(f"{path}, line 4: malformed")):
        TemporalGraph.from_jodie(store, "g", path)
    assert store.variables() == []


@pytest.mark.parametrize("rows, line, fragment", [
    (["0,0,1.0,0,0.5", "1,1,2.0,0,0.5,7", "2,0,3.0,1,0.1"], 3,
     "malformed row: 6 fields, but line 2 has 5"),
    (["0,0,1.0,0,0.5", "1,1,2.0,0", "2,0,3.0,1,0.1"], 3,
     "malformed row: 4 fields, but line 2 has 5"),
    (["0,0,1.0,0,0.5", "1,1,abc,0,0.5"], 3, "timestamp (field 3) is 'abc'; it must be a "
                                            "finite number"),
    (["0,0,1.0,0,0.5", "-1,1,2.0,0,0.5"], 3, "user (field 1) is -1; it must be an "
                                             "integer user id >= 0"),
    (["0,0,1.0,0.5,0.5"], 2, "state_label (field 4) is 0.5; it must be an integer label"),
    (["0,0,5.0,0,0.5", "1,1,2.0,0,0.5"], 3, "timestamp 2.0 is earlier than the previous "
                                            "row's 5.0"),
    (["0,0,1.0"], 2, "malformed row: 3 fields, a JODIE row needs at least 4"),
    (["0,0,1.0,0,0.5", "1e1,1,2.0,0,0.5"], 3, "user (field 1) is '1e1'; it must be an "
                                              "integer user id >= 0"),
    (["0,0,1.0,0,0.5", "1,2.0,2.0,0,0.5"], 3, "item (field 2) is '2.0'; it must be an "
                                              "integer item id >= 0"),
    (["0,0,1.0,0,0.5", "1,1,2.0,1e0,0.5"], 3, "state_label (field 4) is '1e0'; it must "
                                              "be an integer label"),
    # Python's int() reads "1_0" as 10: shown as written
    (["0,0,1.0,0,0.5", "1_0,1,2.0,0,0.5"], 3, "user (field 1) is '1_0'; it must be an "
                                              "integer user id >= 0"),
    (["0,0,1.0,0,0.5", "1,1,2_0,0,0.5"], 3, "timestamp (field 3) is '2_0'; it must be a "
                                            "finite number"),
    # a legal int64 user id leaving no room for the items' node ids (OverflowError)
    (["0,0,1.0,0,0.5", "9223372036854775807,1,2.0,0,0.5"], 3,
     "user id 9223372036854775807 with item id 1 (line 3) makes 9223372036854775810 "
     "nodes, beyond int64: JODIE numbers item i as node i + num_users"),
    (["0,7,1.0,0,0.5", "9223372036854775800,0,2.0,0,0.5"], 3,
     "user id 9223372036854775800 with item id 7 (line 2) makes 9223372036854775809 "
     "nodes, beyond int64"),
])
def test_jodie_malformed_row_names_file_and_line(store, tmp_path, rows, line, fragment):
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    path = _jodie(tmp_path / "bad.csv", rows)
    with pytest.raises(DDStoreValueError, match=re.escape(f"{path}, line {line}: {fragment}")):
        TemporalGraph.from_jodie(store, "g", path)
    assert store.variables() == []


def test_jodie_bytes_that_are_not_text_name_their_line(store, tmp_path):
    """Bytes ``ff fe`` on line 27 of a JODIE file are named by that line, bytes shown
    (pandas' decode error said only "lines 2+", where the rank's share starts)."""
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    path = _jodie(tmp_path / "b.csv", [f"{i},0,{i}.0,0,0.5" for i in range(40)])
    lines = open(path, "rb").read().split(b"\n")
    lines[26] += b"\xff\xfe"
    open(path, "wb").write(b"\n".join(lines))
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{path}, line 27: bytes b'25,0,25.0,0,0.5\\xff\\xfe' are not UTF-8 text "
            f"(byte 16 of the line is ff)")):
        TemporalGraph.from_jodie(store, "g", path)
    assert store.variables() == []


def test_jodie_missing_file_and_no_header(store, tmp_path):
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    missing = str(tmp_path / "nope.csv")
    with pytest.raises(DDStoreValueError, match=re.escape(f"{missing}: not found")):
        TemporalGraph.from_jodie(store, "g", missing)
    (tmp_path / "h.csv").write_text("0,0,1.0,0,0.5\n1,1,2.0,0,0.5\n")
    # the line shown as text, not as a bytes literal (b'...\\n')
    with pytest.raises(DDStoreValueError, match=r"h.csv, line 1: '0,0,1.0,0,0.5' is a data "
                                                r"row, but a JODIE file starts with one "
                                                r"header line"):
        TemporalGraph.from_jodie(store, "g", str(tmp_path / "h.csv"))
    with pytest.raises(DDStoreValueError, match=r"no data rows after the header"):
        TemporalGraph.from_jodie(store, "g", _jodie(tmp_path / "e.csv", []))
    assert store.variables() == []


def test_from_pyg_refuses_temporal_data_without_t(store):
    import torch
    from torch_geometric.data import TemporalData
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    from ddstore.temporal.pyg_data import chronological_split
    data = TemporalData(src=torch.tensor([0, 1]), dst=torch.tensor([1, 2]),
                        msg=torch.zeros(2, 3))
    with pytest.raises(DDStoreValueError, match=r"graph 'g': the TemporalData has no 't' "
                                                r"\(from_pyg needs src, dst and t"):
        TemporalGraph.from_pyg(store, "g", data)
    bad = TemporalData(src=torch.tensor([0, 1]), dst=torch.tensor([1, 2]),
                       t=torch.tensor([0.0, 1.0]), msg=torch.zeros(3, 4))
    with pytest.raises(DDStoreValueError, match=r"data.msg has shape \(3, 4\)"):
        TemporalGraph.from_pyg(store, "g", bad)
    ok = TemporalData(src=torch.tensor([0, 1]), dst=torch.tensor([1, 2]),
                      t=torch.tensor([0.0, 1.0]))
    with pytest.raises(DDStoreValueError, match=r"split has shape \(3,\), needs \(2,\)"):
        TemporalGraph.from_pyg(store, "g", ok, split=[0, 1, 2])
    with pytest.raises(DDStoreValueError, match=r"test_ratio=1.5 must be a number in"):
        TemporalGraph.from_pyg(store, "g", ok, test_ratio=1.5)
    # unsorted times with the chronological split (by position, as PyG's): refused
    # (later events went to train silently); with a split given, taken
    late = TemporalData(src=torch.tensor([0, 1, 2]), dst=torch.tensor([1, 2, 0]),
                        t=torch.tensor([5, 3, 4]))
    with pytest.raises(DDStoreValueError, match=r"data.t is not sorted \(event 1 at t=3 "
                                                r"comes after t=5\).*pass split="):
        TemporalGraph.from_pyg(store, "g", late)
    assert store.variables() == []
    g = TemporalGraph.from_pyg(store, "g", late, split=[0, 0, 2])
    g.remove()
    assert store.variables() == []
    # bfloat16 t and msg: held (and given back) as float32, which holds them exactly; the
    # chronological split computed on them (a raw torch TypeError, it was)
    t16 = torch.tensor([0.5, 1.0, 1.5, 2.0, 3.0, 8.0], dtype=torch.bfloat16)
    b16 = TemporalData(src=torch.arange(6), dst=torch.arange(6).flip(0), t=t16,
                       msg=torch.randn(6, 2).bfloat16())
    g = TemporalGraph.from_pyg(store, "g", b16)
    back = g.to_pyg()
    assert torch.equal(back.t, t16.float()) and torch.equal(back.msg, b16.msg.float())
    f32 = TemporalData(src=b16.src, dst=b16.dst, t=t16.float())
    assert np.array_equal(g.split, chronological_split(f32.t))
    g.remove()


def test_chronological_split_is_pygs():
    """Our split (one process, and the sorted-shares version that from_jodie runs over
    ranks) equals TemporalData.train_val_test_split, for integer and float times with
    ties, and several ratios."""
    import torch
    from mpi4py import MPI
    from torch_geometric.data import TemporalData
    from ddstore.temporal.pyg_data import chronological_split, chronological_split_share
    rng = np.random.default_rng(0)
    ratios = [(0.15, 0.15), (0.1, 0.2), (0.0, 0.0), (0.5, 0.5), (1 / 3, 1 / 7), (0.0, 1.0)]
    for trial in range(300):
        n = int(rng.integers(1, 80))
        if trial % 2:
            t = torch.from_numpy(np.sort(rng.random(n) * 1e3))
        else:  # integers, past float32's exact range now and then (torch compares there)
            t = torch.from_numpy(np.sort(rng.integers(0, 40, n)) + (2 ** 24 if trial % 4
                                                                    else 0))
        val, test = ratios[trial % len(ratios)]
        data = TemporalData(src=torch.zeros(n, dtype=torch.long),
                            dst=torch.zeros(n, dtype=torch.long), t=t)
        tr, va, te = data.train_val_test_split(val_ratio=val, test_ratio=test)
        want = np.repeat([0, 1, 2], [tr.num_events, va.num_events, te.num_events])
        got = chronological_split(t, val, test)
        assert np.array_equal(got, want), (trial, n, val, test)
        share = chronological_split_share(MPI.COMM_SELF, t.numpy().astype(np.float64),
                                          t.numpy().dtype, val, test)
        assert np.array_equal(share, want), (trial, n, val, test)


# ------------------------------------------------------------------ node memory
@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
@pytest.mark.shared_launch("node_memory.py", timeout=120)
def test_node_memory_all_placements(shared_launch, nprocs):
    """tests/mpi/node_memory.py: NodeMemory on every width and both transports against
    the one-process brute force, byte for byte; the P-rank equality; snapshot/restore,
    reset; every error on every rank with the state unchanged."""
    passed_on(shared_launch, nprocs)


@pytest.fixture
def memory(store):
    from ddstore.temporal import NodeMemory
    return NodeMemory(store, "m", 10, 4, 3, mailbox_size=2)


def test_node_memory_constructor_errors(store):
    import torch
    from ddstore import DDStoreValueError
    from ddstore.temporal import NodeMemory
    for kw, msg in (({"num_nodes": 0}, r"NodeMemory 'm': num_nodes=0 must be an integer "
                                       r">= 1"),
                    ({"memory_dim": 2.5}, r"memory_dim=2\.5 must be an integer >= 1"),
                    ({"mail_dim": -1}, r"mail_dim=-1 must be an integer >= 1"),
                    ({"mailbox_size": True}, r"mailbox_size=True must be an integer"),
                    ({"dtype": np.int64}, r"dtype=int64; allowed: a floating-point"),
                    ({"dtype": "nonsense"}, r"dtype='nonsense' is not a dtype"),
                    # num_nodes named (mailbox_size was, with an empty range)
                    ({"num_nodes": 2 ** 63}, r"num_nodes=9223372036854775808 out of "
                                             r"range: allowed 1 <= num_nodes <= 2\*\*63 - 1"),
                    ({"ts_dtype": torch.float32}, r"ts_dtype: times of dtype float32"),
                    ({"ts_dtype": "nonsense"}, r"ts_dtype='nonsense' is not a dtype")):
        args = dict(num_nodes=10, memory_dim=4, mail_dim=3)
        args.update(kw)
        with pytest.raises(DDStoreValueError, match=msg):
            NodeMemory(store, "m", **args)
    with pytest.raises(DDStoreValueError, match=r"name must be a non-empty str, got ''"):
        NodeMemory(store, "", 10, 4, 3)
    assert store.variables() == []
    m = NodeMemory(store, "m", 10, 4, 3, ts_dtype=torch.int64)  # as dtype= takes torch's
    assert m.ts_dtype == np.int64
    # another byte order is the machine's (torch reads no other: read() failed before)
    b = NodeMemory(store, "b", 10, 2, 3, dtype=">f4", ts_dtype=">f8")
    assert b.dtype == np.float32 and b.ts_dtype == np.float64
    b.write([1], np.array([[1.5, 2.5]], np.float32), [3.0])
    b.commit()
    got = b.read([1])
    assert got.memory.dtype == torch.float32 and got.memory.tolist() == [[1.5, 2.5]]
    b.remove()
    with pytest.raises(DDStoreValueError, match=r"NodeMemory 'm': the store already holds "
                                                r"variables \['m/commits', 'm/mail'"):
        NodeMemory(store, "m", 10, 4, 3)


def test_node_memory_staging_errors_raise_at_commit(memory):
    """Bad staged updates raise at commit (naming the rank, the node and the range),
    nothing of that commit is applied and every staged update is dropped."""
    from ddstore import DDStoreIndexError, DDStoreValueError
    m = memory
    m.write([1, 2], np.ones((2, 4), np.float32), [5.0, 6.0])
    m.post([3], np.ones((1, 3), np.float32), 7.0)
    m.commit()
    before = m.read(np.arange(10))
    cases = [
        (DDStoreIndexError, r"rank 0: NodeMemory 'm': write: node id 10 \(position 1\) "
                            r"out of range \[0, 10\)",
         lambda: m.write([0, 10], np.zeros((2, 4), np.float32), 1.0)),
        (DDStoreIndexError, r"post: node id -3 \(position 0\) out of range \[0, 10\)",
         lambda: m.post([-3], np.zeros((1, 3), np.float32), 1.0)),
        (DDStoreValueError, r"write: memory: dtype complex128 cannot be cast to this "
                            r"memory's dtype float32; allowed: rows of dtype float32 or",
         lambda: m.write([0], np.zeros((1, 4), np.complex128), 1.0)),
        (DDStoreValueError, r"write: memory: value 1e\+300 at \(0, 2\) does not fit this "
                            r"memory's dtype float32 \(finite values up to 3.40282e\+38",
         lambda: m.write([0], np.array([[0, 0, 1e300, 0]]), 1.0)),
        (DDStoreValueError, r"post: mail has dtype float32 shape \(1, 4\); needs dtype "
                            r"float32 shape \(1, 3\)",
         lambda: m.post([0], np.zeros((1, 4), np.float32), 1.0)),
        (DDStoreValueError, r"write: ts\[0\] = nan \(node 0\) is NaN or infinite",
         lambda: m.write([0], np.zeros((1, 4), np.float32), float("nan"))),
        (DDStoreValueError, r"post: ts has dtype <U1 shape \(1,\); needs 1 real timestamps",
         lambda: m.post([0], np.zeros((1, 3), np.float32), ["a"])),
        # NaN / inf rows were stored silently
        (DDStoreValueError, r"rank 0: NodeMemory 'm': write: row 1 \(node 7\) has memory "
                            r"value nan; memory values must be finite \(1 of 2 rows hold "
                            r"NaN or inf\)",
         lambda: m.write([6, 7], np.array([[0, 0, 0, 0], [1, np.nan, 2, 3]], np.float32),
                         1.0)),
        (DDStoreValueError, r"post: row 0 \(node 2\) has mail value inf; mail values must "
                            r"be finite \(1 of 1 rows",
         lambda: m.post([2], np.array([[np.inf, 0, 0]], np.float32), 1.0)),
        # integer times float64 would round (2**53 + 1 became 2**53: the earlier write won)
        (DDStoreValueError, r"write: ts\[1\] = 9007199254740993 \(node 3\) is outside "
                            r"\[-2\*\*53, 2\*\*53\], the integers the store's float64 "
                            r"times hold exactly",
         lambda: m.write([3, 3], np.ones((2, 4), np.float32),
                         np.array([2 ** 53, 2 ** 53 + 1]))),
        (DDStoreValueError, r"post: ts\[0\] = -9007199254740993 \(node 1\) is outside",
         lambda: m.post([1], np.zeros((1, 3), np.float32), -2 ** 53 - 1)),
        (DDStoreValueError, r"write: ts\[0\] = 18446744073709551615 \(node 1\) is outside",
         lambda: m.write([1], np.ones((1, 4), np.float32), np.uint64(2 ** 64 - 1))),
        (DDStoreValueError, r"write: ts\[0\] = 1267650600228229401496703205376 \(node 0\)",
         lambda: m.write([0], np.ones((1, 4), np.float32), 2 ** 100)),
    ]
    raw = [m.store.get_range(f"m/{k}", 0, 10).tobytes()
           for k in ("memory", "memory_ts", "mail", "mail_ts", "mail_count")]
    for cls, msg, bad in cases:
        m.write([4], np.full((1, 4), 9, np.float32), 1.0)  # good, dropped with the bad one
        bad()
        m.write([5], np.full((1, 4), 9, np.float32), 1.0)
        assert m.staged()[0] >= 1
        with pytest.raises(cls, match=msg):
            m.commit()
        assert m.staged() == (0, 0)
        assert raw == [m.store.get_range(f"m/{k}", 0, 10).tobytes()
                       for k in ("memory", "memory_ts", "mail", "mail_ts", "mail_count")]
        after = m.read(np.arange(10))
        for key in ("memory", "memory_ts", "mail", "mail_ts"):
            assert np.array_equal(getattr(after, key).numpy(), getattr(before, key).numpy())
    m.commit()  # nothing staged: a no-op
    assert np.array_equal(m.read(np.arange(10)).memory.numpy(), before.memory.numpy())


def test_node_memory_rows_of_another_dtype_cast_by_value(memory):
    """Rows of float16, bfloat16, float64, int, bool or a list go into the float32 memory as
    DDStore.update casts them (bfloat16 was taken and float16 / float64 refused), read
    back equal to the values cast; mails the same."""
    import torch
    m = memory
    vals = np.array([[0.5, -1.25, 3.0, 65504.0]])
    rows = [torch.tensor(vals, dtype=torch.float16), torch.tensor(vals, dtype=torch.bfloat16),
            vals, vals.astype(np.float16), vals.tolist(), np.array([[1, -2, 3, 4]]),
            np.array([[True, False, True, True]])]
    for i, r in enumerate(rows):
        m.write([i], r, float(i + 1))
    m.post([0, 1], torch.tensor([[0.5, 1.5, -2.0], [1e-3, 2.0, 3.0]], dtype=torch.float64),
           9.0)
    m.commit()
    got = m.read(np.arange(len(rows)))
    for i, r in enumerate(rows):
        want = (r.float().numpy() if isinstance(r, torch.Tensor) else
                np.asarray(r).astype(np.float32))
        assert np.array_equal(got.memory[i].numpy(), want[0]), (i, r)
    assert np.array_equal(got.mail[:2, -1].numpy(), np.array(
        [[0.5, 1.5, -2.0], [1e-3, 2.0, 3.0]], np.float32))


def test_node_memory_integer_times_at_the_exact_limit(memory):
    """Integer times up to +-2**53 are kept exactly (2**53 - 1 and 2**53 stay apart)."""
    m = memory
    m.write([1, 2, 3], np.ones((3, 4), np.float32),
            np.array([2 ** 53 - 1, 2 ** 53, -2 ** 53], np.int64))
    m.post([1], np.ones((1, 3), np.float32), 2 ** 53)
    m.commit()
    r = m.read([1, 2, 3])
    assert [int(v) for v in r.memory_ts.tolist()] == [2 ** 53 - 1, 2 ** 53, -2 ** 53]
    assert int(r.mail_ts[0, -1]) == 2 ** 53


def _wait_until(cond, what):
    import time
    end = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < end, f"waited 30 s for {what}"
        time.sleep(0.001)


def test_node_memory_read_during_commit_is_before_or_after(memory):
    """What a read in another thread returns during a commit, as documented: a read
    that began before the commit returns the state before it (the commit waits for
    it); a read that begins while the commit is under way waits and returns the state
    after it.  (tests/mpi/node_memory.py checks that no read is ever torn, 1-2 ranks.)"""
    import threading
    m = memory
    m.write([1], np.full((1, 4), 1, np.float32), 1.0)
    m.commit()
    # 1. a read already under way when the commit begins: the state before
    inside, go, got = threading.Event(), threading.Event(), {}
    read_into = m._read_into

    def slow_read_into(idx, out):
        inside.set()
        assert go.wait(30)
        read_into(idx, out)

    m._read_into = slow_read_into
    reader = threading.Thread(target=lambda: got.setdefault("r", m.read([1])))
    reader.start()
    assert inside.wait(30)
    # let the read finish only once the commit is waiting for it
    release = threading.Thread(target=lambda: (
        _wait_until(lambda: m._lock._waiting == 1, "the commit to wait"), go.set()))
    release.start()
    m.write([1], np.full((1, 4), 2, np.float32), 2.0)
    m.commit()
    reader.join(30)
    release.join(30)
    m._read_into = read_into
    assert got["r"].memory.tolist() == [[1.0] * 4] and got["r"].memory_ts.tolist() == [1.0]
    # 2. a read that begins inside the commit (after its apply): the state after
    sync, got = m._sync, {}

    def sync_with_a_read():
        reader = threading.Thread(target=lambda: got.setdefault("r", m.read([1])))
        reader.start()
        _wait_until(lambda: m._lock._queued == 1, "the read to queue")
        got["thread"] = reader
        sync()

    m._sync = sync_with_a_read
    m.write([1], np.full((1, 4), 3, np.float32), 3.0)
    m.commit()
    m._sync = sync
    got["thread"].join(30)
    assert got["r"].memory.tolist() == [[3.0] * 4] and got["r"].memory_ts.tolist() == [3.0]


@pytest.mark.forks_workers
def test_node_memory_in_a_process_forked_mid_commit(memory):
    """A process forked (os.fork, a DataLoader worker) while a commit holds the memory's
    lock: its reads raise that the state is unknown (they waited for ever: no thread of
    the child releases the lock it copied); forked with no commit under way, it reads
    the state."""
    import os
    m = memory
    m.write([2], np.full((1, 4), 7, np.float32), 1.0)
    m.commit()

    def child_reads():
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: one line back, then out at once
            os.close(r)
            try:
                text = repr(m.read([2]).memory.tolist())
            except BaseException as exc:  # noqa: BLE001 -- reported to the parent
                text = f"{type(exc).__name__}: {exc}"
            os.write(w, text.encode()[:4000])
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            text = f.read()
        assert os.waitpid(pid, 0)[1] == 0
        return text
    m._lock.acquire_exclusive()  # what a non-blocking commit's thread holds
    try:
        got = child_reads()
    finally:
        m._lock.release_exclusive()
    assert got.startswith("DDStoreStateError: NodeMemory 'm': this process was forked "
                          "(os.fork, a DataLoader worker) while a commit was under way"), got
    assert child_reads() == repr([[7.0] * 4])
    assert m.read([2]).memory.tolist() == [[7.0] * 4]  # the parent: untouched


def test_node_memory_objects_of_one_memory_take_turns(store):
    """A second object of a memory (``NodeMemory.open`` on the live store) reads and
    commits in turn with the first: a read through it after a non-blocking commit through
    the first is the state after that commit (it read the state before), and a commit
    through it waits for that one (it lost mails)."""
    import threading
    from ddstore.temporal import NodeMemory
    m1 = NodeMemory(store, "two", 6, 2, 1, mailbox_size=2)
    m2 = NodeMemory.open(store, "two")
    m1._lock.acquire_exclusive()  # what a commit through m1 holds
    done = threading.Event()
    reader = threading.Thread(target=lambda: (m2.read([3]), done.set()))
    reader.start()
    try:
        assert not done.wait(0.3), "a read through m2 did not wait for m1's commit"
    finally:
        m1._lock.release_exclusive()
    reader.join(10)
    assert done.is_set()
    for c in range(1, 21):
        m1.post([3], np.full((1, 1), c, np.float32), float(c))
        m1.commit(wait=False)
        assert m2.read([3]).mail_ts.tolist() == [[max(c - 1, 0), c]], c
        m2.post([4], np.full((1, 1), c, np.float32), float(c))
        m2.commit()
    m1.wait()
    assert m1.read([3, 4]).mail_ts.tolist() == [[19.0, 20.0], [19.0, 20.0]]


def test_forked_reads_while_the_rank_rewrites_private_rows(store):
    """A process forked from a rank whose rows are private memory (width 1) reads in a
    loop while the rank rewrites them: refused (its copy is the fork's), never a crash
    (the core looked the variable up again after its check and walked a NULL one when
    the rank's write came between: SIGSEGV in 1-4 of 10 such children)."""
    import os
    import time
    n = 20000
    store.add("priv", np.zeros((n, 16), np.float32))
    h = store.handle("priv")
    assert store.private_rows("priv")
    for trial in range(8):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                buf, idx = np.empty((n, 16), np.float32), np.arange(n)
                try:
                    while True:
                        store.get_batch(h, idx, out=buf)
                except Exception as exc:  # noqa: BLE001 -- reported to the parent
                    os.write(w, f"{type(exc).__name__}: {exc}".encode()[:2000])
            finally:
                os._exit(0)
        os.close(w)
        time.sleep(0.02 * (trial % 4))
        store.update("priv", np.full((1, 16), trial, np.float32), 0)
        store.sync()
        with os.fdopen(r) as f:
            text = f.read()
        status = os.waitpid(pid, 0)[1]
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (trial, status)
        assert "wrote its rows since the fork" in text, text
    store.remove("priv")


def test_node_memory_read_and_order(memory):
    """Ties in ts are broken by position; mailbox rows oldest first, unfilled slots first
    with zeros; torch tensors in; read errors are local."""
    import torch
    from ddstore import DDStoreIndexError, DDStoreValueError
    from ddstore.temporal import MemoryBatch
    m = memory
    m.write(torch.tensor([1, 1, 1]), torch.arange(12, dtype=torch.float32).view(3, 4),
            torch.tensor([2.0, 2.0, 1.0]))
    m.post([1, 1, 1], np.arange(9, dtype=np.float32).reshape(3, 3), [3.0, 1.0, 3.0])
    m.post([2], np.full((1, 3), 7, np.float32), 4.0)
    m.commit()
    r = m.read([2, 1, 2])
    assert r.memory[1].tolist() == [4.0, 5.0, 6.0, 7.0] and r.memory_ts[1] == 2.0
    assert r.mail_ts.tolist() == [[0.0, 4.0], [3.0, 3.0], [0.0, 4.0]]
    assert r.mail[1].tolist() == [[0.0, 1.0, 2.0], [6.0, 7.0, 8.0]]
    assert r.mail[0].tolist() == [[0.0, 0.0, 0.0], [7.0, 7.0, 7.0]]
    assert r.memory.dtype == torch.float32 and r.memory_ts.dtype == torch.float64
    assert m.read([], out=None).memory.shape == (0, 4)
    with pytest.raises(DDStoreIndexError, match=r"read: node 10 \(position 0\) out of "
                                                r"range \[0, 10\)"):
        m.read([10])
    # a batch of another length: its field named with its shape (was the batch's repr,
    # cut at 80 characters)
    with pytest.raises(DDStoreValueError, match=re.escape(
            "out.memory must be a C-contiguous, writable CPU tensor without grad, of shape "
            "(2, 4) and dtype float32 (what a read of 2 nodes returns), got a Tensor of "
            "shape (3, 4)")):
        m.read([1, 2], out=r)
    with pytest.raises(DDStoreValueError, match=r"out must be a MemoryBatch of 2 nodes .*"
                                                r"got tuple$"):
        m.read([1, 2], out=tuple(r.__dict__.values()))
    # an out that a read could not fill whole is refused before any field is written
    # (a wrong size was a bare reshape error after memory was overwritten; a wrong
    # shape of the right size was filled and came back so)
    good = m.read([1, 2])
    fields = ("memory", "memory_ts", "mail", "mail_ts")
    for field, bad in (("mail", torch.zeros(2, 1, 6)), ("mail", torch.zeros(2, 2, 2)),
                       ("mail_ts", torch.zeros(4, dtype=torch.float64)),
                       ("memory_ts", torch.zeros(2, dtype=torch.float32)),
                       ("memory", torch.zeros(2, 4, requires_grad=True)),
                       ("memory", np.zeros((2, 4), np.float32)),
                       ("memory", torch.zeros(4, 2).t())):
        out = MemoryBatch(*(torch.full_like(getattr(good, f), -1.0) for f in fields))
        setattr(out, field, bad)
        with pytest.raises(DDStoreValueError, match=rf"read: out.{field} must be a "
                                                    rf"C-contiguous, writable CPU tensor"):
            m.read([1, 2], out=out)
        assert all((getattr(out, f) == -1).all() for f in fields if f != field)
    again = m.read([1, 2], out=MemoryBatch(*(torch.empty_like(getattr(good, f))
                                              for f in fields)))
    assert all(torch.equal(getattr(again, f), getattr(good, f)) for f in fields)
    # a batch filled again (its views kept, not checked whole): the same bytes, and a
    # change to it since (a field replaced, resized, given grad) is seen and refused
    for field in fields:
        getattr(again, field).fill_(-1)
    assert m.read([1, 2], out=again) is again
    assert all(torch.equal(getattr(again, f), getattr(good, f)) for f in fields)
    def swap_data(field, make):  # the same tensor object over other bytes
        def change(b):
            getattr(b, field).data = make(getattr(b, field).data)
        return change
    for change in (lambda b: setattr(b, "mail_ts", b.mail_ts.float()),
                   lambda b: b.memory.resize_(2, 2),
                   lambda b: b.mail.requires_grad_(),
                   lambda b: setattr(b, "memory", torch.zeros(2, 4)[:, :2]),
                   swap_data("memory", lambda d: d.view(torch.int32)),
                   swap_data("memory", torch._neg_view)):
        b = m.read([1, 2], out=MemoryBatch(*(torch.empty_like(getattr(good, f))
                                             for f in fields)))
        m.read([1, 2], out=b)
        change(b)
        with pytest.raises(DDStoreValueError, match=r"read: out\.\w+ must be a "):
            m.read([1, 2], out=b)
    # a batch a graph saved for its backward, filled again: autograd is told (as by
    # torch's in-place ops), so the backward refuses instead of using the new values
    b = m.read([1, 2])
    w = torch.ones(4, requires_grad=True)
    loss = (b.memory * w).pow(2).sum()
    m.read([1, 2], out=b)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    m.reset()
    z = m.read([1, 2])
    assert not z.memory.any() and not z.mail.any() and not z.mail_ts.any()


def test_node_memory_snapshot_restore_nbytes(memory):
    from ddstore import DDStoreValueError
    m = memory
    per_node = 4 * 4 + 8 + 2 * (3 * 4 + 8) + 8
    assert m.nbytes() == 10 * per_node + 16  # (and the member's commit counts)
    with pytest.raises(DDStoreValueError, match=r"restore\(\) without a snapshot\(\)"):
        m.restore()
    m.write([3], np.ones((1, 4), np.float32), 1.0)
    m.commit()
    m.snapshot()
    assert m.nbytes() == 20 * per_node + 16
    m.write([3], np.full((1, 4), 2, np.float32), 2.0)
    m.commit()
    assert m.read([3]).memory.tolist() == [[2.0] * 4]
    m.restore()
    assert m.read([3]).memory.tolist() == [[1.0] * 4]
    m.remove()
    assert m.store.variables() == []


def test_node_memory_after_remove_or_free(store):
    """After remove() (or store.remove of one of its variables, or free) every call is a
    DDStoreError, never a read of freed memory; remove() after store.remove of one of
    them removes the others."""
    from ddstore import DDStoreStateError
    from ddstore.temporal import NodeMemory
    m = NodeMemory(store, "m", 10, 4, 3)
    m.remove()
    for call in (lambda: m.read([0]), m.commit, m.reset, m.snapshot, m.restore, m.nbytes,
                 m.remove):
        with pytest.raises(DDStoreStateError, match=r"NodeMemory 'm' was removed"):
            call()
    m = NodeMemory(store, "m", 10, 4, 3)
    store.remove("m/mail")
    with pytest.raises(DDStoreStateError, match=r"missing \['m/mail'\]"):
        m.commit()
    m.remove()  # the rest goes too (it used to be refused, leaving four variables)
    assert not [v for v in store.variables() if v.startswith("m/")], store.variables()
    with pytest.raises(DDStoreStateError, match=r"NodeMemory 'm' was removed"):
        m.remove()
    m = NodeMemory(store, "m", 10, 4, 3)
    store.free()
    with pytest.raises(DDStoreStateError, match=r"has been freed"):
        m.read([0])
    with pytest.raises(DDStoreStateError, match=r"has been freed"):
        m.commit()


def test_node_memory_post_to_neighbors(store):
    """APAN's delivery from a sampled block equals posting each root's mail to its
    sampled neighbours in edge order; a mail per root that is missing raises at commit."""
    from ddstore import DDStoreIndexError, DDStoreValueError
    from ddstore.temporal import NodeMemory, TemporalGraph, TemporalSampler
    rng = np.random.default_rng(3)
    g = TemporalGraph.from_arrays(store, "g", rng.integers(0, 12, 80),
                                  rng.integers(0, 12, 80), rng.random(80), add_reverse=True)
    block = TemporalSampler(g, (3,), "recent").sample(np.arange(6), np.full(6, 0.9))[0]
    assert block.num_edges > 6
    a = NodeMemory(store, "a", 12, 2, 3, mailbox_size=4)
    b = NodeMemory(store, "b", 12, 2, 3, mailbox_size=4)
    mail = rng.standard_normal((6, 3)).astype(np.float32)
    ts = rng.integers(0, 3, 6).astype(np.float64)
    a.post_to_neighbors(block, mail, ts)
    a.commit()
    b.post(block.nodes[block.col], mail[block.row], ts[block.row])
    b.commit()
    ra, rb = a.read(np.arange(12)), b.read(np.arange(12))
    assert ra.mail_ts.any()
    for key in ("memory", "memory_ts", "mail", "mail_ts"):
        assert np.array_equal(getattr(ra, key).numpy(), getattr(rb, key).numpy()), key
    # checked per root as passed (they were named as post's of the expanded arrays: a
    # shape (18, 3), ts[9] for root 2)
    bad_mail, bad_ts = mail.copy(), ts.copy()
    bad_mail[4, 1], bad_ts[2] = np.nan, np.inf
    r4, r2 = int(block.nodes[4]), int(block.nodes[2])
    for args, pattern in (
            ((mail[:5], ts), r"post_to_neighbors: mail has dtype float32 shape \(5, 3\); "
                             r"needs dtype float32 shape \(6, 3\) \(one row of 3 per root; "),
            ((mail.astype(np.complex64), ts), r"mail: dtype complex64 cannot be cast"),
            ((bad_mail, ts), rf"post_to_neighbors: row 4 \(root node {r4}\) has mail value "
                             rf"nan; mail values must be finite \(1 of 6 rows"),
            ((mail, bad_ts), rf"post_to_neighbors: ts\[2\] = inf \(root node {r2}\) is NaN"),
            ((mail, ts[:4]), r"ts has dtype float64 shape \(4,\); needs 6 real timestamps "
                             r"\(one per root\) or one")):
        a.post_to_neighbors(block, *args)
        with pytest.raises(DDStoreValueError, match=pattern):
            a.commit()
        assert np.array_equal(a.read(np.arange(12)).mail.numpy(), ra.mail.numpy())
    a.post_to_neighbors(block, mail, 2.0)  # one time for all, as post takes it
    b.post(block.nodes[block.col], mail[block.row], 2.0)
    a.commit()
    b.commit()
    ra, rb = a.read(np.arange(12)), b.read(np.arange(12))
    for key in ("mail", "mail_ts"):
        assert np.array_equal(getattr(ra, key).numpy(), getattr(rb, key).numpy()), key
    a.post_to_neighbors(object(), mail, ts)  # not a block: named at commit
    with pytest.raises(DDStoreValueError, match=r"block must be a TemporalBlock .*got "
                                                r"object, which has no row, col, nodes"):
        a.commit()
    assert np.array_equal(a.read(np.arange(12)).mail.numpy(), ra.mail.numpy())
    # a block's positions are checked, not wrapped (-1: the last) or truncated (2.7: 2)
    from types import SimpleNamespace
    n = block.nodes.shape[0]
    for kw, pattern in ((dict(col=[-1]), rf"block.col: index -1 \(position 0\) out of "
                                         rf"range \[0, {n}\) \(a position in block.nodes"),
                        (dict(row=[-1]), r"block.row: index -1 .* out of range \[0, 6\)"),
                        (dict(col=[n]), rf"block.col: index {n} .* out of range"),
                        (dict(col=[2.7]), r"block.col: indices must be a 1-D sequence of "
                                          r"integers, got dtype float64"),
                        (dict(row=[0.9]), r"block.row: indices must be .*float64"),
                        (dict(row=[0, 1]), r"block.row has 2 entries and block.col 1"),
                        (dict(num_roots=2.7), r"block.num_roots.*2.7"),
                        (dict(num_roots=n + 1), rf"block.num_roots={n + 1} but block.nodes "
                                                rf"holds {n} \(the roots come first\)")):
        parts = dict(row=[0], col=[2], nodes=block.nodes, num_roots=6) | kw
        a.post_to_neighbors(SimpleNamespace(**parts), mail, ts)
        with pytest.raises(DDStoreIndexError if "range" in pattern else DDStoreValueError,
                           match=pattern):
            a.commit()
        assert np.array_equal(a.read(np.arange(12)).mail.numpy(), ra.mail.numpy()), kw


def test_link_prediction_metrics_agrees_on_bad_input():
    """link_prediction_metrics is collective: bad input on any rank raises the same
    agreed error on every rank (a raw allgather before: not through the agreement, not
    in step with other collective calls); good input gives AP and AUC on the root."""
    from mpi4py import MPI
    from ddstore import DDStoreValueError
    from ddstore._collective import is_agreed
    from ddstore.temporal.metrics import link_prediction_metrics
    for scores, labels, fragment in (([0.1, 0.9], [1], "2 scores and 1 labels"),
                                     (["a"], [1], "must be real numbers")):
        with pytest.raises(DDStoreValueError, match=fragment) as info:
            link_prediction_metrics(MPI.COMM_SELF, scores, labels)
        assert is_agreed(info.value) and "rank 0: link_prediction_metrics" in \
            str(info.value), info.value
    ap, auc, _, _, pos = link_prediction_metrics(MPI.COMM_SELF, [0.9, 0.8, 0.1, 0.2],
                                                 [1, 1, 0, 0])
    assert (ap, auc, pos) == (1.0, 1.0, 2)


def test_csv_readers_name_the_first_bad_line(store, tmp_path):
    """TGL and JODIE files go through one reader: with bad values in two columns, the
    error names the first bad line (line 3, the later column), not the first bad column
    (the TGL reader named ``time`` on line 4, the JODIE reader ``timestamp`` on line 4)."""
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    (tmp_path / "edges.csv").write_text(",src,dst,time,ext_roll\n0,0,1,1.0,0\n"
                                        "1,1,2,2.0,7\n2,2,0,abc,0\n")
    path = str(tmp_path / "edges.csv")
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{path}, line 3: column 'ext_roll' is '7'; it must be 0, 1 or 2")):
        TemporalGraph.from_tgl(store, "g", str(tmp_path))
    path = _jodie(tmp_path / "j.csv", ["0,0,1.0,0,0.5", "1,1,2.0,2.5,0.5",
                                       "1,1,abc,0,0.5"])
    with pytest.raises(DDStoreValueError, match=re.escape(
            f"{path}, line 3: state_label (field 4) is 2.5; it must be an integer label")):
        TemporalGraph.from_jodie(store, "g", path)
    assert store.variables() == []


def test_edge_batches_refuse_what_int_would_truncate(store):
    """EdgeBatches' integers go through _checks.as_int: floats, bools and negatives are
    refused, naming the argument and the range (int() truncated 2.5 and took True)."""
    import numpy as np
    from ddstore import DDStoreValueError
    from ddstore.temporal import EdgeBatches, TemporalGraph
    g = TemporalGraph.from_arrays(store, "g", np.arange(6), np.arange(1, 7),
                                  np.arange(6.0), split=np.zeros(6, np.int64))
    for kw, text in ((dict(batch_size=2.5), "batch_size must be an integer >= 1, got 2.5"),
                     (dict(batch_size=2, chunks=True), "chunks must be an integer >= 1"),
                     (dict(batch_size=2, negatives=1.0), "negatives must be an integer"),
                     (dict(batch_size=2, seed=1.0), "seed must be an integer, got 1.0"),
                     (dict(batch_size=2, split=True), "split=True must be")):
        with pytest.raises(DDStoreValueError, match=text):
            EdgeBatches(g, **kw)
    # negatives whose batch cannot be held: refused as built, with the allowed range
    from ddstore import DDStoreMemoryError
    for neg in (2 ** 40, 2 ** 63):
        with pytest.raises(DDStoreMemoryError, match=rf"negatives={neg}: a batch of 2 "
                                                     rf"edges of negative ids .* needs .* "
                                                     rf"allowed: negatives in 0 \.\. "):
            EdgeBatches(g, 2, negatives=neg)
    eb = EdgeBatches(g, 2, seed=np.int64(3))
    for epoch in (1.5, -1, "2"):
        with pytest.raises(DDStoreValueError, match="set_epoch: epoch must be an integer"):
            eb.set_epoch(epoch)
    eb.set_epoch(np.int32(2))
    assert eb.epoch == 2 and type(eb.epoch) is int


@pytest.mark.parametrize("mode,background", [("", False), ("sync", False),
                                             ("background", True), ("off", None),
                                             ("sometimes", False)])
def test_build_prefaults_what_samplers_read(store, monkeypatch, mode, background):
    """A build ends with store.prefault of the T-CSR (DDSTORE_PREFAULT: sync by default,
    background, off; an unknown value is refused by the store's constructor, naming the
    values; set after the store was made, the build warns and means sync); samples are
    the same every way, and removing the graph right after a background prefault waits
    for it."""
    import ddstore
    from ddstore.temporal import TemporalGraph, TemporalSampler
    calls, real = [], ddstore.DDStore.prefault

    def spy(self, *names, background=False):
        out = real(self, *names, background=background)
        calls.append((names, background, out))
        return out
    monkeypatch.setattr(ddstore.DDStore, "prefault", spy)
    monkeypatch.setenv("DDSTORE_PREFAULT", mode)
    rng = np.random.default_rng(5)
    m = 3000
    src, dst, t = rng.integers(0, 50, m), rng.integers(0, 50, m), rng.random(m)
    roots, ts = np.arange(50), np.full(50, 0.6)
    if mode == "sometimes":
        message = r"DDSTORE_PREFAULT='sometimes' is not one of sync \(also 1, on, true, " \
                  r"yes; the default\), background, off \(also 0, no, false\)"
        with pytest.raises(ddstore.DDStoreValueError, match=message):
            ddstore.DDStore(store.comm)
        with pytest.warns(UserWarning, match=message + ": using sync"):
            g = TemporalGraph.from_arrays(store, "g", src, dst, t, add_reverse=True)
    else:
        g = TemporalGraph.from_arrays(store, "g", src, dst, t, add_reverse=True)
    if background is None:
        assert calls == []
    else:
        (names, bg, out), = calls
        assert names == ("g/nbr", "g/ts", "g/eid") and bg is background
        if bg:
            out.join()
            out = out.nbytes
        # its whole T-CSR (int32 ids: 16 B per entry): one rank holds it all
        assert out == 16 * 2 * m == sum(store.nbytes(v) for v in names)
    got = TemporalSampler(g, (5, 5), "uniform", seed=1).sample(roots, ts)
    monkeypatch.setenv("DDSTORE_PREFAULT", "off")
    ref_g = TemporalGraph.from_arrays(store, "ref", src, dst, t, add_reverse=True)
    ref = TemporalSampler(ref_g, (5, 5), "uniform", seed=1).sample(roots, ts)
    for a, b in zip(got, ref):
        for key in ("nodes", "ts", "row", "col", "eid", "edge_ts"):
            assert np.array_equal(getattr(a, key), getattr(b, key)), key
    monkeypatch.setenv("DDSTORE_PREFAULT", "background")
    g.remove()
    g = TemporalGraph.from_arrays(store, "g", src, dst, t, add_reverse=True)
    g.remove()  # joins the prefault thread before the pages go
    assert "g/nbr" not in store.variables()


def test_node_memory_commit_without_overlap_below_thread_multiple(store, monkeypatch):
    """commit(wait=False) below MPI_THREAD_MULTIPLE runs in the caller's thread, the same
    MPI calls on the same communicator, told once with a RuntimeWarning (its exchange in
    a thread crashed or hung the job at FUNNELED / SERIALIZED); the memory is what a
    blocking commit makes."""
    from mpi4py import MPI
    from ddstore.temporal import NodeMemory
    a = NodeMemory(store, "lvl_a", 10, 2, 3)
    b = NodeMemory(store, "lvl_b", 10, 2, 3)
    monkeypatch.setattr(MPI, "Query_thread", lambda: MPI.THREAD_SERIALIZED)
    threads = {t.name for t in threading.enumerate()}
    with pytest.warns(RuntimeWarning, match=r"NodeMemory 'lvl_a': commit\(wait=False\) "
                                            r"overlaps .*MPI_THREAD_SERIALIZED on rank 0: it "
                                            r"commits without overlap") as told:
        for r in range(3):
            for m, wait in ((a, False), (b, True)):
                m.write([r, 9], np.full((2, 2), r, np.float32), float(r + 1))
                m.post([r], np.full((1, 3), r, np.float32), float(r + 1))
                m.commit(wait=wait)
    mine = [w for w in told if "lvl_a" in str(w.message)]
    assert len(mine) == 1 and mine[0].filename == __file__  # (the caller's line)
    assert not any(t.name.startswith("ddstore-commit") for t in threading.enumerate()
                   if t.name not in threads)
    a.wait()
    ra, rb = a.read(np.arange(10)), b.read(np.arange(10))
    for key in ("memory", "memory_ts", "mail", "mail_ts"):
        assert np.array_equal(getattr(ra, key).numpy(), getattr(rb, key).numpy()), key


def test_a_list_of_ints_and_fractions_is_not_rounded(store):
    """A Python list mixing fractions and an integer beyond 2**53 (numpy makes float64 of
    it, rounding 2**53 + 1 to 2**53 before any check): refused, naming the value, by the
    graph's builder, a sampler's query times and a node memory's timestamps (all three
    stored or used the rounded value); the same integer in an int64 array is kept."""
    import torch
    from ddstore import DDStoreValueError
    from ddstore.temporal import MemoryBatch, NodeMemory, TemporalGraph, TemporalSampler
    said = re.escape("[1] = 9007199254740993 is an integer beyond 2**53 in a list with "
                     "fractions")
    with pytest.raises(DDStoreValueError, match=r"graph 'g': t" + said):
        TemporalGraph.from_arrays(store, "g", [0, 1], [1, 0], [0.5, 2 ** 53 + 1])
    g = TemporalGraph.from_arrays(store, "g", [0, 1], [1, 0], np.array([1, 2 ** 53 + 1]))
    assert g.edge_times().tolist() == [1, 2 ** 53 + 1]
    with pytest.raises(DDStoreValueError, match=r"sample: ts" + said):
        TemporalSampler(g, [2]).sample([0, 1], [0.5, 2 ** 53 + 1])
    m = NodeMemory(store, "m", 4, 2, 2, ts_dtype=np.int64, mailbox_size=2)
    # nodes that are the batch's own int64 times, read into it: read as given (the
    # mail's ranges were computed from the times just read: 10**12 as a node id)
    m.write([0, 1, 2], np.ones((3, 2), np.float32), np.array([10 ** 12] * 3))
    m.commit()
    b = m.read([0, 1, 2])
    b.memory_ts.copy_(torch.tensor([0, 1, 2]))
    assert m.read(b.memory_ts, out=b).memory_ts.tolist() == [10 ** 12] * 3
    # fields that share memory: refused, naming them (the second of the read's two
    # calls overwrote what the first had written)
    big = torch.zeros(6, dtype=torch.int64)
    shared = MemoryBatch(b.memory.clone(), big[:3], b.mail.clone(), big.view(3, 2))
    with pytest.raises(DDStoreValueError, match=r"out.memory_ts and out.mail_ts share "
                                                r"memory"):
        m.read([0, 1, 2], out=shared)
    m.write([0, 1], np.ones((2, 2), np.float32), [0.5, 2 ** 53 + 1])
    with pytest.raises(DDStoreValueError, match=r"write: ts" + said):
        m.commit()
    m.remove()
    g.remove()


def test_big_endian_arrays_and_narrow_float_times(store):
    """``from_arrays`` takes edge features, node features and labels in the other byte
    order by their values (they were refused by an internal piece check naming neither
    graph nor argument); ``to_pyg(t_dtype=float16)`` refuses a time beyond float16's
    range, naming it (it gave inf), and gives the times that fit."""
    import torch
    from ddstore import DDStoreValueError
    from ddstore.temporal import TemporalGraph
    ef = np.arange(6, dtype=">f4").reshape(3, 2)
    nf = np.arange(12, dtype=">f8").reshape(4, 3)
    g = TemporalGraph.from_arrays(store, "be", [0, 1, 2], [1, 2, 3], [10.0, 7e4, 1e5],
                                  edge_feat=ef, node_feat=nf,
                                  edge_label=np.array([1, 0, 1], dtype=">i4"))
    data = g.to_pyg()
    assert data.msg.numpy().tolist() == ef.tolist()
    assert data.y.tolist() == [1, 0, 1]
    assert np.asarray(g.node_features(np.arange(4))).tolist() == nf.tolist()
    for dt in (np.float16, torch.float16):
        with pytest.raises(DDStoreValueError, match=r"edge times: value 70000.0 at \(1,\) "
                                                    r"does not fit the t_dtype's dtype "
                                                    r"float16 \(finite values up to 65504"):
            g.to_pyg(t_dtype=dt)
    g.remove()
    g = TemporalGraph.from_arrays(store, "be", [0, 1], [1, 2], [10.0, 6e4])
    assert g.to_pyg(t_dtype=torch.float16).t.tolist() == [10.0, 60000.0]
