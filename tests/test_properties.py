"""Property tests (hypothesis) against brute force: the temporal sampler and T-CSR build,
the pyg NeighborSampler, the dynamic graph's delta merge, node-memory commits, the
TGL / JODIE / .npy readers and nested transactions (the properties and their
strategies: tests/mpi/properties.py).

In this process on one rank (a ``COMM_SELF`` store), hypothesis draws examples and
shrinks any failure to a minimal one (profile ``ci``: 40 examples per property; set
``HYPOTHESIS_PROFILE=thorough`` for 400).  On 2 ranks the same program runs under
mpiexec with derandomized examples that every rank draws alike (shared launch); a
failure there is reported with its example, not shrunk.
"""
import os
import sys

import pytest

from conftest import MPI_DIR, on_ranks

if MPI_DIR not in sys.path:
    sys.path.insert(0, MPI_DIR)

from hypothesis import example, given, settings  # noqa: E402 (a requirement: never skipped)

import properties as P  # noqa: E402


PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _property(name, max_examples=None, examples=()):
    """A pytest test of property ``name`` over hypothesis' examples (shrunk on failure),
    plus ``examples`` (failures found earlier, always run first)."""
    strategy, prop = {n: (s, p) for n, s, p in P.PROPERTIES}[name]
    kw = {} if max_examples is None or PROFILE.max_examples > 100 else \
        {"max_examples": max_examples}

    def run(store, ex):
        prop([store], ex)
        assert store.variables() == [], f"left {store.variables()} in the store"
    for ex in examples:
        run = example(ex=ex)(run)
    run = settings(PROFILE, **kw)(given(ex=strategy)(run))
    run.__name__ = f"test_{name}"
    run.__doc__ = prop.__doc__
    return run


test_temporal_sampler_and_tcsr = _property("temporal")
test_pyg_sampler = _property("pyg")

def _dyn(steps, weights, dedup):
    return dict(steps=steps, weights=weights, dedup=dedup, num_nodes=None,
                checkpoint_every=None, cache_size=1, order=[0], store=0)


# found by this test (fixed in ddstore/dynamic/graph.py): dedup='sum' stored a sum
# beyond float32 as inf; it added a step's duplicates in numpy's reduceat order
# (0.25 + 0.0 + 3e38 - 3e38 gave 0.25, where adding them in input order gives 0.0); a
# weight going from 0.0 to -0.0 was no change to the delta (snapshot 1 said 0.0)
test_dynamic_delta_merge = _property("dynamic", examples=[
    _dyn([[(0, 0)], [(0, 0)]], [[0.0], [-0.0]], None),
    _dyn([[(0, 0), (0, 0), (0, 1)]], [[0.0, 0.0, -0.0]], "sum"),
    _dyn([[(0, 0), (0, 0)]], [[3e38, 3e38]], "sum"),
    _dyn([[(1, 0), (1, 0), (1, 0), (1, 0)]], [[0.25, 0.0, 3e38, -3e38]], "sum")])
test_node_memory_commits = _property("memory")
test_tgl_reader = _property("tgl", 25)
test_jodie_reader = _property("jodie", 25)
test_npy_reader = _property("npy", 30)
test_transactions_nested = _property("transactions")


@pytest.mark.mpi
@pytest.mark.shared_launch("properties.py", "25", nprocs=2, timeout=300)
def test_properties_two_ranks(shared_launch):
    """Every property on 2 ranks (widths 1 and 2, transports auto and rma), 25
    derandomized examples each, the same on both ranks."""
    assert "0 failures " + on_ranks(2) in shared_launch, shared_launch


def test_pyg_fanout_beyond_every_degree(store):
    """Found by the PyG property (issue 25 item 6: it raised 'neighbour sample: out of
    memory'): 3 nodes, edges 0 -> 1 and 1 -> 2, seeds [1, 2], one hop of k = 2**31 - 1
    without replacement: each seed gets its one in-edge."""
    ex = dict(n=3, src=[0, 1], dst=[1, 2], seeds=[1, 2], fanouts=[2 ** 31 - 1],
              replace=False, disjoint=False, temporal=False, strategy="uniform",
              etime=[0.0, 0.0], stime=[0.0, 0.0], xdtype="float32", xseed=0, seed=1,
              id32=None, store=0)
    P.prop_pyg([store], ex)
