"""A layout put again replaces it, and an edge index reads back in the dtypes it was
put in, as PyG's own graph stores do (tests/mpi/pyg_replace.py: its docstring lists
the checks).  In-process on one rank, and on 2 and 3 ranks (width = ranks, transports
auto and rma)."""
import pytest

from conftest import passed_on, passes_in_process


def test_pyg_replace_one_rank():
    """The whole MPI program on one rank, in this process."""
    passes_in_process("pyg_replace", more_than=75)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.shared_launch("pyg_replace.py", timeout=240)
def test_pyg_replace_ranks(shared_launch, nprocs):
    """2 and 3 ranks: a replacement's failure on the last rank only, dtypes that differ
    between ranks, the lists of every member read by message and by MPI_Get."""
    passed_on(shared_launch, nprocs)
