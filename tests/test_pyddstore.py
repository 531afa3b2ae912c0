"""Tests of the pyddstore compatibility layer (MPI programs under mpiexec + timeout)."""
import pytest



@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
@pytest.mark.shared_launch("pyddstore_roundtrip.py", timeout=120)
def test_pyddstore_roundtrip(shared_launch, nprocs):
    from conftest import summary_of
    checks, failed, ranks = summary_of(shared_launch, "pyddstore_roundtrip")
    assert checks > 0 and failed == 0 and ranks == nprocs, shared_launch


def test_pyddstore_in_process_round_trip():
    """One process (COMM_SELF), no launcher: the original API's add / get / get_batch
    give back every byte written."""
    import numpy as np
    from mpi4py import MPI

    import pyddstore
    data = np.arange(60, dtype=np.float64).reshape(20, 3) * 0.5
    store = pyddstore.PyDDStore(MPI.COMM_SELF)
    try:
        store.add("x", data)
        store.epoch_begin()
        row = np.empty((1, 3))
        store.get("x", row, 7)
        assert row.tobytes() == data[7:8].tobytes()
        batch = np.empty((4, 3))
        store.get_batch("x", batch, [19, 0, 7, 0])
        assert batch.tobytes() == data[[19, 0, 7, 0]].tobytes()
        store.epoch_end()
    finally:
        store.free()
