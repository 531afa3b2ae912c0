"""Checkpoint and restart of the data-set layers (issue 37): ``GraphDataset``,
``WindowDataset``, ``DynamicGraph`` and ``DynamicWindowDataset`` reopen by name
(``open(store, name)``) from a store restored at other rank counts and widths, without
their source data, every byte and every read equal (tests/mpi/datasets_checkpoint.py).

Two sections of the shared jobs (conftest's ``shared_launch``) share one directory
(``{across}``): 2 ranks build at width 2, save, restore at widths 1 and 2 and on 1 rank;
4 ranks restore that (a later job, more ranks) at widths 1, 2, 4, build at width 2 (two
replicas), save, restore at widths 1, 2, 4 and on 3 ranks at width 3 (fewer ranks).
Each job restores every width with both transports (``auto``, ``rma``) over its two
restores.  (The program also restores an earlier job's checkpoint alone:
``datasets_checkpoint.py DIR -``.)  Alone, by hand::

    timeout 240 mpiexec -n 2 python tests/mpi/datasets_checkpoint.py /tmp/dc 2
    timeout 240 mpiexec -n 4 python tests/mpi/datasets_checkpoint.py /tmp/dc 2
"""
import pytest

from conftest import passed_on, shared_job_ran

PROGRAM = "datasets_checkpoint.py"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 4])
@pytest.mark.shared_launch(PROGRAM, "{across}/datasets", "2", timeout=240)
def test_datasets_checkpoint_restart(shared_launch, nprocs, request):
    passed_on(shared_launch, nprocs)
    if nprocs == 4:
        # the 4-rank save on fewer ranks: its sub-communicator of 3 ranks, in that job (a
        # third job restoring it on 2 ranks took 6 s of the suite for the same reads)
        assert "restore on fewer ranks': 0 checks" not in shared_launch
        # the 2-rank section's checkpoint, restored here (when this session ran it: the
        # shared jobs run in increasing rank count)
        if shared_job_ran(request.config, 2, PROGRAM):
            assert "restore an earlier job's checkpoint': 0 checks" not in shared_launch


@pytest.mark.parametrize("layer", ["graphs", "windows", "dynamic", "temporal"])
def test_open_refuses_an_annotation_its_data_contradicts(layer):
    """A layer's ``open`` checks its annotation (a checkpoint's, whose manifest a user
    edited, checksum recomputed) against the variables it describes: sizes that the
    stored data contradicts are one DDStoreValueError naming the object (a
    GraphDataset of 17 graphs opened as 5, a TemporalGraph of more nodes than its
    indptr read out of range, a DynamicGraph or WindowDataset read other steps)."""
    import copy
    import numpy as np
    import torch
    from mpi4py import MPI
    from torch_geometric.data import Data
    import ddstore
    from ddstore import DDStoreValueError
    from ddstore.dynamic import DynamicGraph
    from ddstore.graphs import GraphDataset
    from ddstore.spatiotemporal import WindowDataset
    from ddstore.temporal import TemporalGraph
    with ddstore.DDStore(MPI.COMM_SELF, width=1) as store:
        if layer == "graphs":
            GraphDataset.from_samples(store, "o", [Data(x=torch.ones(i + 1, 2))
                                                   for i in range(6)], progress=False)
            cls, edits = GraphDataset, [("nsamples", 5), ("nsamples", "6"),
                                        ("layout", [["x", "bad"]])]
        elif layer == "windows":
            WindowDataset(store, "o", np.arange(300.0).reshape(100, 3, 1), 3)
            cls, edits = WindowDataset, [("horizon", 51), ("shape", [100, 4, 1]),
                                         ("splits", {"train": [0, 99]}), ("horizon", 2.5)]
        elif layer == "dynamic":
            DynamicGraph(store, "o", [np.array([[0, 1], [1, 2]])] * 9, num_nodes=4,
                         checkpoint_every=3)
            cls, edits = DynamicGraph, [("num_steps", 12), ("checkpoint_every", 2),
                                        ("num_nodes", 0)]
        else:
            TemporalGraph.from_arrays(store, "o", [0, 1, 2], [1, 2, 0], [0.0, 1.0, 2.0])
            cls, edits = TemporalGraph, [("num_nodes", 40), ("num_nodes", 2),
                                         ("num_edges", 2)]
        cls.open(store, "o")  # as built: opens
        ann = store.annotation("o")
        kept = copy.deepcopy(ann.meta)
        for key, value in edits:
            ann.meta[key] = value
            with pytest.raises(DDStoreValueError, match=rf"{cls.__name__}.open\('o'\): its "
                                                        rf"annotation.*a damaged checkpoint"):
                cls.open(store, "o")
            ann.meta.clear()
            ann.meta.update(copy.deepcopy(kept))
        cls.open(store, "o")
