"""Checkpoint and restart of the temporal layers (issue 37).

``tests/mpi/temporal_checkpoint.py`` saves every temporal builder's graph and node
memories (mailbox 1 and 3) and restores them on 1-4 ranks at every width, both
transports, comparing every byte, every read and the samplers' batches (see its
docstring).  ``examples/tgn_link_prediction.py`` stopped after an epoch and resumed:
tests/test_examples_resume.py."""
import pytest

from conftest import on_ranks


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,transport,width", [(1, "auto", 1), (2, "rma", 1),
                                                    (3, "rma", 3), (4, "auto", 2)])
@pytest.mark.shared_launch("temporal_checkpoint.py", "{transport}", "{width}", timeout=300)
def test_temporal_checkpoint(shared_launch, nprocs, transport, width):
    assert f"0 failures {on_ranks(nprocs)}" in shared_launch, shared_launch
