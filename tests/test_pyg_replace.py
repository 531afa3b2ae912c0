"""A layout put again replaces it, and an edge index reads back in the dtypes it was
put in, as PyG's own graph stores do (tests/mpi/pyg_replace.py: its docstring lists
the checks).  In-process on one rank, and on 2 and 3 ranks (width = ranks, transports
auto and rma)."""
from conftest import passes_in_process, ranks_program_test


def test_pyg_replace_one_rank():
    """The whole MPI program on one rank, in this process."""
    passes_in_process("pyg_replace", more_than=85)


test_pyg_replace_ranks = ranks_program_test(
    "pyg_replace.py", [2, 3], doc="2 and 3 ranks: a replacement's failure on the last "
    "rank only, dtypes that differ between ranks, the lists of every member read by "
    "message and by MPI_Get.")
