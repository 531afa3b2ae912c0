"""Weighted neighbour sampling of ddstore.pyg (``weight_attr``): the program
tests/mpi/pyg_weights.py in-process on one rank and in the shared MPI jobs of 2 and 3
ranks (widths 1, 2 and 3; transports auto and rma): the laws with and without
replacement by chi-square against brute force, zero weights as pyg-lib takes them
(never with replacement; without, a whole list for ``k`` at or above its length, and
the fill of a list with fewer positive weights than ``k``), temporal and hetero with
weights, bad weights refused on every rank naming the edge."""

import numpy as np
import pytest
import torch

from conftest import passes_in_process, widths_program_test


def test_pyg_weights_one_rank():
    passes_in_process("pyg_weights", [1], more_than=500)


test_pyg_weights = widths_program_test("pyg_weights.py", [(2, "all"), (3, "3")], timeout=240)


def _one_list(store, weights, name, **kw):
    """A graph of one destination (node 0) with in-edges i from source i + 1."""
    from ddstore import pyg as dpyg
    from torch_geometric.data import Data
    m = len(weights)
    data = Data(edge_index=torch.stack([torch.arange(1, m + 1), torch.zeros(m, dtype=torch.long)]),
                edge_weight=torch.tensor(weights, dtype=torch.float64), num_nodes=m + 2)
    return dpyg.from_pyg(store, data, name=name, weight_attr="edge_weight", **kw)


def test_weights_core_refusals(store):
    """The C entry refuses what the Python layer never passes: LAST with weights, a
    weight variable that is neither float32 nor float64, a capacity below what is taken
    (one below what k could take but not below what is taken draws as with room), and a
    weight it finds negative (naming the CSC row); nothing is counted as written."""
    from ddstore import DDStoreValueError, _core
    from ddstore import pyg as dpyg
    fs, gs = _one_list(store, [1.0, 2.0, 0.0, 3.0], "core")
    s = dpyg.NeighborSampler(gs, [2], weight_attr="edge_weight")
    c, handle = s._handle(None)
    wvid = s._weight_vid(None, c)
    nodes = np.zeros(3, dtype=np.int64)
    with pytest.raises(DDStoreValueError, match="only DDS_NEIGHBOR_REPLACE"):
        handle.sample_weighted(wvid, nodes, None, 2, _core.NEIGHBOR_LAST, 1, 6)
    with pytest.raises(DDStoreValueError, match="output capacity 5"):
        handle.sample_weighted(wvid, nodes, None, 2, 0, 1, 5)
    with pytest.raises(DDStoreValueError, match=r"rows of 2 bytes, not float32 \(4\) or "
                       r"float64 \(8\)"):
        store.add("core_int16", np.zeros(4, dtype=np.int16))
        handle.sample_weighted(store.core_ids("core_int16")[1][0], nodes, None, 2, 0, 1, 6)
    r, nbr, eid = handle.sample_weighted(wvid, nodes, None, 2, 0, 1, 6)
    assert r.tolist() == [0, 0, 1, 1, 2, 2] and set(eid.tolist()) <= {0, 1, 3}
    assert (nbr == eid + 1).all()
    # k = 5 >= the list's 4 without replacement: the whole list, its zero included
    r, nbr, eid = handle.sample_weighted(wvid, nodes, None, 5, 0, 1, 12)
    assert eid.tolist() == [0, 1, 2, 3] * 3
    # with replacement a list whose weights are all 0 takes nothing: a capacity below
    # what k could take (3 lists x 3) but not below what is taken (2 x 3): the entries
    # are counted first, then drawn as with room
    from torch_geometric.data import Data
    data = Data(edge_index=torch.tensor([[1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 1, 1]]),
                edge_weight=torch.tensor([1.0, 2.0, 0.0, 3.0, 0.0, 0.0],
                                         dtype=torch.float64), num_nodes=7)
    fs2, gs2 = dpyg.from_pyg(store, data, name="core2", weight_attr="edge_weight")
    s2 = dpyg.NeighborSampler(gs2, [3], weight_attr="edge_weight")
    c2, handle2 = s2._handle(None)
    wvid2, mixed = s2._weight_vid(None, c2), np.array([0, 1, 0], dtype=np.int64)
    roomy = handle2.sample_weighted(wvid2, mixed, None, 3, _core.NEIGHBOR_REPLACE, 1, 9)
    exact = handle2.sample_weighted(wvid2, mixed, None, 3, _core.NEIGHBOR_REPLACE, 1, 6)
    assert all(a.tolist() == b.tolist() for a, b in zip(roomy, exact))
    assert exact[0].tolist() == [0, 0, 0, 2, 2, 2] and set(exact[2].tolist()) <= {0, 1, 3}
    with pytest.raises(DDStoreValueError, match="6 entries taken, more than the output "
                                                "capacity 5"):
        handle2.sample_weighted(wvid2, mixed, None, 3, _core.NEIGHBOR_REPLACE, 1, 5)
    # a corrupt weight column (never made by a put): refused naming the row
    store.local_view(c.vars["w"])[1] = -4.0
    with pytest.raises(DDStoreValueError, match="CSC row 1 .* is -4"):
        handle.sample_weighted(wvid, nodes, None, -1, 0, 1, 12)


def test_weighted_replace_huge_weights(store):
    """Weights whose sum overflows float64 still draw in proportion (rescaled)."""
    from ddstore import pyg as dpyg
    big = 1e308
    fs, gs = _one_list(store, [big, 0.0, big, big / 2], "huge")
    s = dpyg.NeighborSampler(gs, [4000], replace=True, seed=2, weight_attr="edge_weight")
    e = s._sample(torch.zeros(1, dtype=torch.long)).edge.numpy()
    counts = np.bincount(e, minlength=4)
    exp = 4000 * np.array([0.4, 0, 0.4, 0.2])
    assert counts[1] == 0
    keep = exp > 0
    assert (((counts[keep] - exp[keep]) ** 2) / exp[keep]).sum() < 13.816, counts


@pytest.mark.parametrize("replace", [False, True])
def test_weights_at_the_ends_of_double_are_drawn_as_scaled_ones(store, replace):
    """A list of weights all near the ends of float64's range (subnormal, or near its
    largest) draws what the same weights scaled by a power of two into the usual range
    draw (the law is scale-free): the keys E / w or their sums overflowed or lost their
    bits, so a list of equal weights 1e-310 drew its last entry 547 times in 600, and
    of 1e308 its first one 223 times.  Also with a zero weight in the list, and a
    tiny weight beside huge ones, which keeps a chance above zero."""
    from ddstore import pyg as dpyg
    base = np.array([1.0, 3.0, 0.0, 2.0, 1.0, 1.5, 1.0])
    picks = {}
    for e in (0, -1070, -1000, 1020):
        fs, gs = _one_list(store, list(np.ldexp(base, e)), f"ends{e}{replace}")
        s = dpyg.NeighborSampler(gs, [3], replace=replace, seed=4,
                                 weight_attr="edge_weight")
        picks[e] = s._sample(torch.zeros(800, dtype=torch.long)).edge.numpy()
    for e in (-1070, -1000, 1020):
        assert np.array_equal(picks[e], picks[0]), e
    counts = np.bincount(picks[0], minlength=7)
    assert counts[2] == 0 and counts.sum() == 2400
    fs, gs = _one_list(store, [1e308, 1e-300, 1e308, 1e308], f"mixed{replace}")
    s = dpyg.NeighborSampler(gs, [2], replace=replace, seed=1, weight_attr="edge_weight")
    got = s._sample(torch.zeros(300, dtype=torch.long)).edge.numpy()
    assert got.size == 600 and set(got.tolist()) <= {0, 1, 2, 3}
    if not replace:  # one weight beside four subnormal ones (1e-310 as a key E / w was
        # inf: the last of the four was taken 95 % of the time): each tiny one alike
        fs, gs = _one_list(store, [1.0] + [1e-310] * 4, "tiny")
        s = dpyg.NeighborSampler(gs, [2], seed=3, weight_attr="edge_weight")
        counts = np.bincount(s._sample(torch.zeros(4000, dtype=torch.long)).edge.numpy(),
                             minlength=5)
        assert counts[0] == 4000
        assert (((counts[1:] - 1000.0) ** 2) / 1000.0).sum() < 16.27, counts  # 0.999, df 3


def test_all_zero_list(store):
    """pyg-lib's rule: with replacement a list of zero weights takes nothing (pyg-lib's
    multinomial raises there); without, ``k`` at or above its length takes it whole,
    and below, ``k`` of its entries, every choice alike."""
    from ddstore import pyg as dpyg
    fs, gs = _one_list(store, [0.0, 0.0, 0.0], "zeros")
    s = dpyg.NeighborSampler(gs, [3], replace=True, weight_attr="edge_weight")
    out = s._sample(torch.zeros(4, dtype=torch.long))
    assert out.edge.numel() == 0 and out.node.tolist() == [0, 0, 0, 0]
    for k in (3, 4, -1):
        s = dpyg.NeighborSampler(gs, [k], weight_attr="edge_weight")
        out = s._sample(torch.zeros(1, dtype=torch.long))
        assert out.edge.tolist() == [0, 1, 2]
    s = dpyg.NeighborSampler(gs, [1], seed=5, weight_attr="edge_weight")
    counts = np.bincount(s._sample(torch.zeros(3000, dtype=torch.long)).edge.numpy(),
                         minlength=3)
    assert ((counts - 1000.0) ** 2 / 1000.0).sum() < 13.816, counts  # chi2 0.999, df 2


def test_fewer_positive_weights_than_k_fill_up_with_zeros(store):
    """Without replacement, a list with ``p < k`` positive weights takes all ``p`` and
    ``k - p`` of its zero-weight entries, each such subset alike (pyg-lib: the keys of
    weight 0 tie); ``p == k`` takes exactly the positive ones; always in list order."""
    from ddstore import pyg as dpyg
    fs, gs = _one_list(store, [0.0, 5.0, 0.0, 0.0, 1.0], "fill")
    trials = 3000
    s = dpyg.NeighborSampler(gs, [2], seed=1, weight_attr="edge_weight")
    e = s._sample(torch.zeros(trials, dtype=torch.long)).edge.numpy().reshape(trials, 2)
    assert (e == [1, 4]).all()
    for k, subsets in ((3, [(0, 1, 4), (1, 2, 4), (1, 3, 4)]),
                       (4, [(0, 1, 2, 4), (0, 1, 3, 4), (1, 2, 3, 4)])):
        s = dpyg.NeighborSampler(gs, [k], seed=k, weight_attr="edge_weight")
        e = s._sample(torch.zeros(trials, dtype=torch.long)).edge.numpy().reshape(trials, k)
        assert (np.diff(e, axis=1) > 0).all()  # distinct, in list order
        got = [tuple(r) for r in e.tolist()]
        assert set(got) == set(subsets), sorted(set(got))
        counts = np.array([got.count(x) for x in subsets], float)
        assert ((counts - trials / 3) ** 2 / (trials / 3)).sum() < 13.816, counts


def test_without_replacement_law_longer_list(store):
    """k=3 of 8 positive weights (zeros between them): many exponential jumps per list;
    the drawn 3-subsets against their exact law (brute force over the 336 orders),
    chi-square below the 0.999 quantile (df 55)."""
    import sys
    from conftest import MPI_DIR
    if MPI_DIR not in sys.path:
        sys.path.insert(0, MPI_DIR)
    from pyg_weights import subset_law
    from ddstore import pyg as dpyg
    weights = [0.5, 0.0, 1.0, 4.0, 0.0, 2.0, 3.0, 1.5, 0.0, 0.75, 2.5]
    fs, gs = _one_list(store, weights, "long")
    law = subset_law(weights, 3)
    trials = 20000
    s = dpyg.NeighborSampler(gs, [3], seed=9, weight_attr="edge_weight")
    e = s._sample(torch.zeros(trials, dtype=torch.long)).edge.numpy().reshape(trials, 3)
    got = {}
    for r in np.sort(e, axis=1).tolist():
        got[tuple(r)] = got.get(tuple(r), 0) + 1
    assert set(got) <= set(law), sorted(set(got) - set(law))
    keys = sorted(law)
    counts = np.array([got.get(k, 0) for k in keys], float)
    exp = trials * np.array([law[k] for k in keys])
    assert len(keys) == 56 and (((counts - exp) ** 2) / exp).sum() < 93.17
