"""Weighted neighbour sampling of ddstore.pyg (``weight_attr``): the program
tests/mpi/pyg_weights.py in-process on one rank and in the shared MPI jobs of 2 and 3
ranks (widths 1, 2 and 3; transports auto and rma): the laws with and without
replacement by chi-square against brute force, zero weights never drawn, ``k`` at or
above the positive-weight count, temporal and hetero with weights, bad weights refused
on every rank naming the edge."""

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
    # a capacity below what k could take (3 x 4) but not below what is taken (3 x 3
    # positive weights): the entries are counted first, then drawn as with room
    roomy = handle.sample_weighted(wvid, nodes, None, 5, 0, 1, 12)
    exact = handle.sample_weighted(wvid, nodes, None, 5, 0, 1, 9)
    assert all(a.tolist() == b.tolist() for a, b in zip(roomy, exact))
    assert exact[0].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    with pytest.raises(DDStoreValueError, match="9 entries taken, more than the output "
                                                "capacity 8"):
        handle.sample_weighted(wvid, nodes, None, 5, 0, 1, 8)
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


def test_all_zero_list_takes_nothing(store):
    from ddstore import pyg as dpyg
    fs, gs = _one_list(store, [0.0, 0.0], "zeros")
    for replace in (False, True):
        s = dpyg.NeighborSampler(gs, [3], replace=replace, weight_attr="edge_weight")
        out = s._sample(torch.zeros(4, dtype=torch.long))
        assert out.edge.numel() == 0 and out.node.tolist() == [0, 0, 0, 0]


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
