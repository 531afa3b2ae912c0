"""Checkpoint and restart of the data-set layers (issue 37): ``GraphDataset``,
``WindowDataset``, ``DynamicGraph`` and ``DynamicWindowDataset`` reopen by name
(``open(store, name)``) from a store restored at other rank counts and widths, without
their source data, every byte and every read equal (tests/mpi/datasets_checkpoint.py).

Three jobs share one directory: 2 ranks build at width 2, save, restore at widths 1 and
2 and on 1 rank; 4 ranks restore that at widths 1, 2, 4, build at width 2 (two
replicas), save, restore at widths 1, 2, 4 and on 3 ranks at width 3; 2 ranks restore
the 4-rank checkpoint at widths 1 and 2 and on 1 rank.  Each job restores every width
with both transports (``auto``, ``rma``) over its two restores.
"""
import pytest

from conftest import passed_on


@pytest.mark.mpi
def test_datasets_checkpoint_restart(mpirun, tmp_path):
    out = mpirun("datasets_checkpoint.py", 2, tmp_path, 2, timeout=240)
    passed_on(out, 2)
    out = mpirun("datasets_checkpoint.py", 4, tmp_path, 2, timeout=240)
    passed_on(out, 4)
    assert "restore an earlier job's checkpoint': 0 checks" not in out
    out = mpirun("datasets_checkpoint.py", 2, tmp_path, "-", timeout=240)
    passed_on(out, 2)
