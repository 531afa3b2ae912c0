"""PyG loaders with DataLoader worker processes over ddstore.pyg (issue 38, item 5): the
MPI program tests/mpi/pyg_workers.py on one rank in this process and on 2 ranks (its own
job: the workers are forked from the ranks)."""
import pytest

from conftest import passed_on, passes_in_process


def test_pyg_workers_one_rank():
    """The whole program on one rank (width 1: auto, shm, rma), in this process."""
    passes_in_process("pyg_workers", more_than=60)


@pytest.mark.mpi
def test_pyg_workers_two_ranks(mpirun):
    """2 ranks, widths 1 and 2: node-local stores equal batch for batch with workers,
    rma refused at construction, the forked child's guard."""
    out = mpirun("pyg_workers.py", 2, timeout=400)
    passed_on(out, 2)
