"""PyG loaders with DataLoader worker processes over ddstore.pyg (issue 38, item 5): the
MPI program tests/mpi/pyg_workers.py on one rank in this process and on 2 ranks (a section
of the 2-rank shared job: the workers are forked from the ranks there, as from a user's)."""
import pytest

from conftest import passed_on, passes_in_process


@pytest.mark.forks_workers
def test_pyg_workers_one_rank():
    """The whole program on one rank (width 1: auto, shm, rma), in this process."""
    passes_in_process("pyg_workers", more_than=60)


@pytest.mark.mpi
@pytest.mark.shared_launch("pyg_workers.py", nprocs=2, timeout=400)
def test_pyg_workers_two_ranks(shared_launch):
    """2 ranks, widths 1 and 2: node-local stores equal batch for batch with workers,
    rma refused at construction, the forked child's guard."""
    passed_on(shared_launch, 2)


@pytest.mark.mpi
def test_benchmark_workers_smoke(tmp_path_factory):
    """bench-pyg --workers on a tiny graph, 2 ranks: over shared memory num_workers 0 and
    2 and the prefetch thread timed, each over num_workers=0 with its control; over rma
    the workers' refusal reported, the thread timed."""
    import json
    from bench_job import bench_output
    out, tmp_path = bench_output("pyg-workers", tmp_path_factory)
    assert "width 2 auto DataLoader workers" in out and "num_workers=2 " in out, out
    res = json.load(open(tmp_path / "pyg_n2.json"))
    by = {r["transport"]: r["by_workers"] for r in res["results"]}
    assert sorted(by) == ["auto", "rma"] and sorted(by["auto"]) == ["0", "2", "prefetch"]
    for v in by["auto"].values():
        assert v["batches_per_s_per_rank"] > 0 and len(v["batches_per_s_by_rank"]) == 2
        assert len(v["over_workers_0"]["control"]) == 2 and v["edges_per_batch"] > 0
    assert by["auto"]["0"]["control"]["batches_per_s_per_rank"] > 0
    assert "transport='rma'" in by["rma"]["2"]["refused"] and \
        "ddstore.prefetch.prefetch(loader, depth=2)" in by["rma"]["2"]["refused"]
    assert by["rma"]["prefetch"]["batches_per_s_per_rank"] > 0


@pytest.mark.forks_workers
def test_workers_refuse_a_store_freed_by_their_rank():
    """Persistent DataLoader workers outlive an epoch; after their rank frees the store
    (its own store here, one rank), neither the rest of the live epoch nor the next one
    serves a batch from the copy of the memory the workers still map: each raises a
    DDStoreStateError naming the freed store (the C core's shared 'gone' page)."""
    import torch
    from mpi4py import MPI
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    import ddstore
    from ddstore import DDStoreStateError
    from ddstore import pyg as dpyg
    g = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(200, 5, generator=g),
                edge_index=torch.randint(0, 200, (2, 1000), generator=g))
    store = ddstore.DDStore(MPI.COMM_SELF, width=1)
    fs, gs = dpyg.from_pyg(store, data)
    loader = NeighborLoader((fs, gs), num_neighbors=[3, 2], batch_size=8,
                            input_nodes=torch.arange(200), num_workers=2,
                            persistent_workers=True)
    it = iter(loader)
    next(it)
    store.free()
    for source in (it, loader):
        with pytest.raises(DDStoreStateError, match="freed by the rank this process was "
                                                    "forked from"):
            for _ in source:
                pass
