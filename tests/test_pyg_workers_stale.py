"""DataLoader workers and a feature store changed after their fork (issue 43, item 4):
persistent workers refuse it (DDStoreStateError naming the way out) instead of serving
stale features; writes in place and workers forked per epoch see every change.  The
MPI program tests/mpi/pyg_workers_stale.py on one rank in this process and on 2 ranks
(in the shared job of 2 ranks)."""
import pytest

from conftest import passed_on, passes_in_process


@pytest.mark.forks_workers
def test_stale_workers_one_rank():
    passes_in_process("pyg_workers_stale", more_than=40)


@pytest.mark.mpi
@pytest.mark.shared_launch("pyg_workers_stale.py", nprocs=2, timeout=120)
def test_stale_workers_two_ranks(shared_launch):
    passed_on(shared_launch, 2)
