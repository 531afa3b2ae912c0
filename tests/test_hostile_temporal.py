"""The temporal layer's hostile round (ddstore.temporal, sources/jodie.py, sources/tgl.py):
one test per problem found, in-process on a one-rank store where possible; the cases that
need several ranks are tests/mpi/hostile_temporal.py, launched once."""
import math
import re

import numpy as np
import pytest

from conftest import passed_on
from ddstore import DDStoreValueError
from ddstore.temporal import average_precision, roc_auc


def _ap_by_thresholds(labels, scores):
    """scikit-learn's average precision, spelled out: for every distinct score from high
    to low, (recall gained there) x (precision of everything scored at least that)."""
    y, s = np.asarray(labels, float), np.asarray(scores, float)
    ap, recall = 0.0, 0.0
    for th in sorted(set(s.tolist()), reverse=True):
        sel = s >= th
        new = y[sel].sum() / y.sum()
        ap += (new - recall) * y[sel].mean()
        recall = new
    return ap


def test_metrics_ties_and_bad_input():
    """Average precision counts tied scores as one threshold (it ranked ties in input
    order: a constant scorer with the positives listed first got AP 1.0, listed last
    0.42); labels other than 0/1, NaN or infinite scores, unequal lengths and 2-D input
    are refused naming the value (they returned a number, NaN with a warning, or an
    IndexError)."""
    assert average_precision([1, 1, 0, 0], [.5] * 4) == 0.5
    assert average_precision([0, 0, 1, 1], [.5] * 4) == 0.5
    assert average_precision([1, 0, 1, 0, 0, 1], [.9, .9, .3, .3, .1, .9]) == \
        pytest.approx(_ap_by_thresholds([1, 0, 1, 0, 0, 1], [.9, .9, .3, .3, .1, .9]),
                      abs=1e-15)
    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(2, 30))
        y, s = rng.integers(0, 2, n), rng.integers(0, 4, n) / 3
        y[0] = 1
        perm = rng.permutation(n)
        assert average_precision(y, s) == pytest.approx(_ap_by_thresholds(y, s), abs=1e-12)
        assert average_precision(y[perm], s[perm]) == pytest.approx(
            average_precision(y, s), abs=1e-12)
    assert math.isnan(average_precision([0, 0], [.1, .2]))
    assert math.isnan(average_precision([], []))
    for fn in (average_precision, roc_auc):
        for labels, scores, words in (([2, 0, 1], [.9, .5, .1], "labels[0] = 2.0"),
                                      ([1, -1], [.9, .5], "labels[1] = -1.0"),
                                      ([1, 0], [np.nan, .5], "scores[0] = nan"),
                                      ([1, 0], [.5, np.inf], "scores[1] = inf"),
                                      ([1, 0], [.5], "1 scores and 2 labels"),
                                      ([[1, 0]], [[.9, .1]], "must be 1-D")):
            with pytest.raises(DDStoreValueError, match=r"\S+") as info:
                fn(labels, scores)
            assert words in str(info.value) and fn.__name__ in str(info.value), info.value


def test_link_prediction_metrics_root_and_values():
    """link_prediction_metrics refuses a root outside the communicator (was MPI's
    'Invalid root' error stack), NaN scores and labels other than 0/1 (were scored: a
    NaN gave AP 1.0), agreed in its step."""
    from mpi4py import MPI
    from ddstore._collective import is_agreed
    from ddstore.temporal import link_prediction_metrics
    for kw, words in ((dict(root=1), "root=1 must be a rank of comm, an integer in [0, 1)"),
                      (dict(root=-1), "root=-1"), (dict(root=0.0), "root=0.0"),
                      (dict(scores=[np.nan, .5]), "scores[0] = nan"),
                      (dict(labels=[2, 0]), "labels[0] = 2.0")):
        args = dict(scores=[.9, .5], labels=[1, 0])
        args.update(kw)
        with pytest.raises(DDStoreValueError) as info:
            link_prediction_metrics(MPI.COMM_SELF, **args)
        assert is_agreed(info.value) and words in str(info.value), info.value
    assert link_prediction_metrics(MPI.COMM_SELF, [.5, .5], [1, 0])[:2] == (0.5, 0.5)


def _graph(store, name="g", **kw):
    from ddstore import temporal as tg
    src, dst = np.arange(10) % 4, (np.arange(10) + 1) % 4
    return tg.TemporalGraph.from_arrays(store, name, src, dst, np.arange(10), **kw)


def test_switches_are_true_or_false(store, tmp_path):
    """add_reverse (every builder), prop_time and shuffle_chunks take True or False, as
    every switch of the package (as_bool): "no" was read as True (add_reverse="no"
    indexed every edge at both ends).  (from_pyg checks it the same way, before
    from_arrays would; not run here: importing PyG takes seconds.)"""
    from ddstore import temporal as tg
    tg.write_tgl(tmp_path / "tgl", [0, 1], [1, 0], [1, 2], [0, 0])
    tg.write_jodie(tmp_path / "j.csv", [0, 1], [0, 0], [1, 2], [0, 0])
    builders = {"from_arrays": lambda v: _graph(store, "a", add_reverse=v),
                "from_tgl": lambda v: tg.TemporalGraph.from_tgl(store, "a", tmp_path / "tgl",
                                                                add_reverse=v),
                "from_jodie": lambda v: tg.TemporalGraph.from_jodie(
                    store, "a", tmp_path / "j.csv", add_reverse=v)}
    for label, build in builders.items():
        for bad in ("no", 0, None):
            with pytest.raises(DDStoreValueError,
                               match=f"graph 'a': add_reverse must be True or False, got "
                                     f"{bad!r}"):
                build(bad)
            assert store.variables() == [], (label, store.variables())
        build(np.bool_(False)).remove()
    g = _graph(store)
    with pytest.raises(DDStoreValueError, match="prop_time must be True or False, got 'no'"):
        tg.TemporalSampler(g, [2], prop_time="no")
    with pytest.raises(DDStoreValueError,
                       match="shuffle_chunks must be True or False, got 'no'"):
        tg.EdgeBatches(g, 4, chunks=2, shuffle_chunks="no")
    assert tg.EdgeBatches(g, 4, chunks=2, shuffle_chunks=False).shuffle_chunks is False


def test_graph_inputs_named(store):
    """to_pyg(t_dtype=) that is no dtype is named (was numpy's bare TypeError 'data type
    not understood'); a bfloat16 torch edge_feat is stored as float32, as from_pyg stores
    a bfloat16 msg (was 'edge_feat is not an array (Got unsupported ScalarType')."""
    import torch
    g = _graph(store, edge_feat=torch.arange(20.).reshape(10, 2).to(torch.bfloat16))
    assert g.edge_features(np.arange(10)).dtype == np.float32
    assert np.array_equal(g.edge_features(np.arange(10)),
                          np.arange(20, dtype=np.float32).reshape(10, 2))
    with pytest.raises(DDStoreValueError, match=r"t_dtype='garbage' is not a dtype .*"
                                                r"integer or float dtype"):
        g.to_pyg(t_dtype="garbage")
    if np.dtype(np.longdouble).itemsize > 8:  # (no torch dtype: torch's TypeError it was)
        with pytest.raises(DDStoreValueError, match=rf"t_dtype={np.dtype(np.longdouble)}; "
                                                    rf"allowed: an integer or float dtype "
                                                    rf"of 1-8 bytes"):
            g.to_pyg(t_dtype=np.longdouble)
    assert g.to_pyg(t_dtype=np.float32).t.dtype == torch.float32


def test_synthetic_stream_arguments_named():
    """synthetic_stream names a bad seed, communities, probability, edge_dim or alpha
    (were numpy's 'expected non-negative integer', 'high <= 0', 'negative dimensions',
    'Integers to negative integer powers', 'Probabilities contain NaN'; p_within=2 and
    p_repeat=nan were used as they came, communities=0 meant the default); a negative
    alpha works; the default stream is unchanged value for value."""
    from ddstore.temporal import synthetic_stream
    for kw, words in ((dict(seed="a"), "seed must be an integer, got 'a'"),
                      (dict(communities=0),
                       "communities=0 must be an integer in [1, num_nodes=10] or None"),
                      (dict(communities=-3), "communities=-3"),
                      (dict(p_within=2), "p_within=2 must be a probability in [0, 1]"),
                      (dict(p_repeat=float("nan")), "p_repeat=nan must be a probability"),
                      (dict(edge_dim=-1), "edge_dim=-1 must be an integer >= 0"),
                      (dict(alpha=float("nan")), "alpha=nan must be a finite real number"),
                      (dict(alpha="1"), "alpha='1'")):
        with pytest.raises(DDStoreValueError) as info:
            synthetic_stream(10, 10, **kw)
        assert words in str(info.value), info.value
    assert synthetic_stream(10, 20, alpha=-1).num_edges == 20
    s = synthetic_stream(50, 200, seed=3)
    assert int(s.src.sum()) == 3683 and float(s.t[-1]) == 215.39860704339418  # as before


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2])
@pytest.mark.shared_launch("hostile_temporal.py", timeout=120)
def test_hostile_temporal_mpi(shared_launch, nprocs):
    """EdgeBatches(comm=...) agrees its settings and set_epoch its epoch over comm (ranks
    with another batch_size, seed, split, graph or epoch cut different batches: edges
    trained twice or never, silently); link_prediction_metrics' root and values agreed
    (tests/mpi/hostile_temporal.py)."""
    passed_on(shared_launch, nprocs)


def test_node_memory_takes_bfloat16_as_float32(store):
    """A bfloat16 tensor staged into a NodeMemory is its float32 values (the package's
    one rule for tensors: tensor_values), applied exactly into a float32 memory, and
    cast by value into a float16 one (as DDStore.update casts), a value beyond float16
    refused naming it (was 'write: TypeError: Got unsupported ScalarType BFloat16',
    naming neither)."""
    import torch
    from ddstore import temporal as tg
    mem = tg.NodeMemory(store, "m", 4, 3, 2)
    rows = torch.tensor([[1.5, -2.0, 0.0078125]], dtype=torch.bfloat16)
    mem.write([2], rows, [1.0])
    mem.post([3], torch.ones(1, 2, dtype=torch.bfloat16), torch.tensor([2.0],
                                                                     dtype=torch.bfloat16))
    mem.commit()
    got = mem.read([2, 3])
    assert got.memory[0].tolist() == [1.5, -2.0, 0.0078125]
    assert got.mail[1, -1].tolist() == [1.0, 1.0] and got.mail_ts[1, -1].item() == 2.0
    half = tg.NodeMemory(store, "h", 4, 3, 2, dtype=np.float16)
    half.write([0], rows, [1.0])
    half.commit()
    assert half.read([0]).memory.tolist() == [[1.5, -2.0, 0.0078125]]
    half.write([1], torch.tensor([[1.0, 2.0, 1e5]], dtype=torch.bfloat16), [1.0])
    with pytest.raises(DDStoreValueError, match=r"write: memory: value 99840.0 at \(0, 2\) "
                                                r"does not fit this memory's dtype float16"):
        half.commit()
    assert half.read([1]).memory.tolist() == [[0.0, 0.0, 0.0]]


def test_times_and_ids_beyond_their_range_named(store):
    """The fortieth session's temporal round: float64 times whose difference overflows
    are refused as int64 ones are (``dts`` became ``inf``, NaN in a time encoding); a
    list of whole numbers one of which is beyond int64 is named by the int64 range (it
    was "an integer beyond 2**53 in a list with fractions... give an int64 array"); a
    uint64 id beyond int64 is refused with the allowed range."""
    from ddstore import DDStoreIndexError
    from ddstore import temporal as tg
    g = tg.TemporalGraph.from_arrays(store, "far", [0], [1], [-1.7e308])
    sampler = tg.TemporalSampler(g, 1)
    with pytest.raises(DDStoreValueError, match=r"root time 1\.7e\+308 minus edge time "
                                                r"-1\.7e\+308 is beyond float64's largest "
                                                r"number \(1\.7976931348623157e\+308\)"):
        sampler.sample([0], [1.7e308])
    b = sampler.sample([0], [1e306])[0]  # within float64: finite, as numpy's
    assert b.dts.tolist() == [1e306 - -1.7e308] and np.isfinite(b.dts).all()
    g.remove()
    inside = "is outside [-2**63, 2**63 - 1], the integer times the store keeps (int64)"
    for t in ([1, 2, 2 ** 63], [1, 2, -2 ** 63 - 1], [1, 2, 2 ** 64]):
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"t[2] = {t[2]} {inside}")):
            tg.TemporalGraph.from_arrays(store, "g", [0, 1, 2], [1, 2, 0], t)
    for big in (2 ** 53 + 1, 2 ** 64):  # with fractions: float64's exact range named
        with pytest.raises(DDStoreValueError, match=re.escape(
                f"t[2] = {big} is an integer beyond 2**53 in a list with fractions")):
            tg.TemporalGraph.from_arrays(store, "g", [0, 1, 2], [1, 2, 0], [0.5, 2, big])
    assert "g/nbr" not in store.variables()
    g = tg.TemporalGraph.from_arrays(store, "g", [0, 1], [1, 2], [1, 2])
    with pytest.raises(DDStoreValueError, match=re.escape(f"sample: ts[1] = {2 ** 63} "
                                                          f"{inside}")):
        tg.TemporalSampler(g, 1).sample([0, 0], [1, 2 ** 63])
    big = np.array([2 ** 63], np.uint64)
    for call, text in ((lambda: tg.TemporalSampler(g, 1).sample(big, [9]),
                        f"sample of graph 'g': root {2 ** 63} (position 0) out of range "
                        f"[0, 3)"),
                       (lambda: g.neighbors(np.uint64(2 ** 63)),
                        f"neighbors of graph 'g': node {2 ** 63} (position 0) out of range "
                        f"[0, 3)"),
                       (lambda: g.degree(big), f"node {2 ** 63} (position 0) out of range "
                                               f"[0, 3)"),
                       (lambda: g.edges(np.array([2 ** 64 - 1], np.uint64)),
                        f"edges of graph 'g': edge id {2 ** 64 - 1} (position 0) out of "
                        f"range [0, 2)")):
        with pytest.raises(DDStoreIndexError, match=re.escape(text)):
            call()
    g.remove()
