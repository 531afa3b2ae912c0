"""Checkpoint and restart of the data-set layers (issue 37): ``GraphDataset``,
``WindowDataset``, ``DynamicGraph`` and ``DynamicWindowDataset`` reopen by name
(``open(store, name)``) from a store restored at other rank counts and widths, without
their source data, every byte and every read equal (tests/mpi/datasets_checkpoint.py).

Two jobs share one directory: 2 ranks build at width 2, save, restore at widths 1 and
2 and on 1 rank; 4 ranks restore that (a later job, more ranks) at widths 1, 2, 4, build
at width 2 (two replicas), save, restore at widths 1, 2, 4 and on 3 ranks at width 3
(fewer ranks).  Each job restores every width with both transports (``auto``, ``rma``)
over its two restores.  (The program also restores an earlier job's checkpoint alone:
``datasets_checkpoint.py DIR -``.)
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
    # the 4-rank save on fewer ranks: its sub-communicator of 3 ranks, in that job (a
    # third job restoring it on 2 ranks took 6 s of the suite for the same reads)
    assert "restore on fewer ranks': 0 checks" not in out
