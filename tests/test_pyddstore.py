"""Tests of the pyddstore compatibility layer (MPI programs under mpiexec + timeout)."""
import pytest

from conftest import run_mpi


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_pyddstore_roundtrip(nprocs):
    out = run_mpi("pyddstore_roundtrip.py", nprocs, timeout=120)
    assert f"pyddstore_roundtrip: {nprocs} ranks" in out and "checks passed" in out


def test_pyddstore_importable_without_mpi_launch():
    import pyddstore
    assert hasattr(pyddstore.PyDDStore, "epoch_begin")
    for name in ("add", "init", "update", "get", "get_batch", "epoch_begin",
                 "epoch_end", "free"):
        assert callable(getattr(pyddstore.PyDDStore, name)), name
