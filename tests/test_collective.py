"""The collective step (issue 35): every collective entry point, enumerated from the
code, fails alike when its local part raises on one rank (tests/mpi/collective_inject.py),
and the enumeration itself (in-process)."""
import pytest

from conftest import summary_of


def test_named_steps_are_found_in_the_code():
    """The AST scan finds the core's entry points with their places, and no step whose
    op is computed (every op must be a string literal for the scan to see it)."""
    from collective_inject import named_steps
    found = named_steps()
    for op in ("DDStore", "add", "init", "sync", "remove", "free", "add_records",
               "init_records"):
        assert op in found, (op, sorted(found))
        assert all(":" in where for where in found[op])
    assert "<not a string literal>" not in found, found.get("<not a string literal>")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,transport", [(2, "auto"), (3, "rma")])
@pytest.mark.shared_launch("collective_inject.py", "{transport}", timeout=900)
def test_every_entry_point_agrees_on_an_injected_failure(shared_launch, nprocs, transport):
    """For every named step found in the code: an exception raised in its local part on
    one rank (an interrupt, a ``__str__`` that raises, and OSError, RuntimeError,
    KeyError, ValueError or MemoryError in turn: collective_inject.exceptions_for) ->
    every rank raises the same agreed error naming that rank, within seconds, and the
    store holds what it held before the call (on 3 ranks one type into every other op:
    about half the checks)."""
    summary = summary_of(shared_launch, "collective_inject")
    assert summary[0] > (1000 if nprocs <= 2 else 500), shared_launch[-3000:]


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs,transport,most", [(2, "auto", 24), (3, "rma", 8)])
@pytest.mark.shared_launch("collective_inject.py", "{transport}", "--every-step", "{most}",
                           timeout=900)
def test_a_failure_in_any_step_is_agreed_and_undone(shared_launch, nprocs, transport,
                                                    most):
    """The hostile round: a failure injected into the k-th step each driver enters
    (named or a later step of a call: a build's rounds, a removal), up to ``most``
    positions spread over each driver (fewer on 3 ranks, which share 2 cores) -> the
    same agreed error on every rank, and the store holds what it held before the
    public call that failed (a removal included: all or nothing)."""
    summary = summary_of(shared_launch, "collective_inject")
    assert summary[0] > 1000, shared_launch[-3000:]
