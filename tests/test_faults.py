"""Failure behaviour (README "Failure behaviour"): one rank failing while the others read
or wait in a collective call must end the whole job within seconds with a non-zero exit
code and the traceback visible; a clean run exits 0 after freeing collectively."""
import pytest

from conftest import mpich_shm_files, orphan_shm_files, run_mpi

READ_SECONDS = 120  # what the healthy ranks would do if the job were not ended
PROMPT = 30         # seconds: generous for a loaded CI machine, far below READ_SECONDS


def launch(mode, nprocs, runner=(), env=None):
    r = run_mpi("faults.py", nprocs, mode, READ_SECONDS, timeout=READ_SECONDS + 60,
                env=env, runner=runner, check=False)
    return r.returncode, r.elapsed, r.output


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.parametrize("mode", ["raise", "raise-in-collective", "raise-in-with", "osexit",
                                  "kill", "kill-in-commit", "raise-in-commit"])
def test_failing_rank_ends_the_job(mode, nprocs):
    before = mpich_shm_files()
    rc, elapsed, out = launch(mode, nprocs)
    # the killed job's shared-memory files are not left in /dev/shm (run_mpi removes them;
    # a job running beside this one maps its own, which are not counted)
    left = orphan_shm_files(before)
    assert not left, sorted(left)
    assert rc not in (0, 124, 137), f"exit code {rc} after {elapsed:.1f}s:\n{out}"
    assert elapsed < PROMPT, f"job took {elapsed:.1f}s to end:\n{out}"
    if mode.startswith("raise"):
        assert "RuntimeError: injected failure" in out  # the traceback is shown
        assert "aborting the MPI job" in out


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.parametrize("mode", ["end-during-commit", "exit0-during-commit",
                                  "exit3-during-commit", "osexit0-during-commit"])
def test_rank_leaving_during_a_collective_fails_the_job(mode, nprocs):
    """A rank that ends its script while the others are inside NodeMemory.commit: the
    others get the agreed "out of step" error (caught here) and end their scripts too.
    Before: their exit-time free waited forever for the rank already in MPI_Finalize
    (and os._exit(0) ended the job with exit code 0, no message).  Now the leaving
    rank's exit-time free meets the others' commit, and it ends the job, non-zero, with
    a message naming both calls."""
    rc, elapsed, out = launch(mode, nprocs)
    assert rc not in (0, 124, 137), f"exit code {rc} after {elapsed:.1f}s:\n{out}"
    assert elapsed < PROMPT, f"job took {elapsed:.1f}s to end:\n{out}"
    assert "while other ranks are inside a collective call" in out, out
    assert "called NodeMemory.commit('mem')" in out and "called free() (exiting)" in out, out


@pytest.mark.mpi
def test_exit_time_free_waits_a_bounded_time():
    """A rank ends its script while the others wait in a plain MPI Barrier: its free at
    exit gives up after DDSTORE_EXIT_TIMEOUT seconds and ends the job (before: both
    waited until the timeout killed them)."""
    rc, elapsed, out = launch("end-during-barrier", 2, env={"DDSTORE_EXIT_TIMEOUT": "2"})
    assert rc not in (0, 124, 137), f"exit code {rc} after {elapsed:.1f}s:\n{out}"
    assert elapsed < PROMPT, f"job took {elapsed:.1f}s to end:\n{out}"
    assert "was not joined by all 2 ranks" in out and "within 2 s" in out, out


@pytest.mark.mpi
def test_sys_exit_under_mpi4py_runner_ends_the_job():
    # python -m mpi4py aborts on sys.exit(n != 0); the exit-time free must not wait first
    rc, elapsed, out = launch("exit", 2, runner=("-m", "mpi4py"))
    assert rc == 3 and elapsed < PROMPT, f"exit code {rc} after {elapsed:.1f}s:\n{out}"


@pytest.mark.mpi
def test_hook_switched_off_defers_to_mpi4py_runner():
    rc, elapsed, out = launch("raise", 2, runner=("-m", "mpi4py"),
                              env={"DDSTORE_ABORT_ON_EXCEPTION": "0"})
    assert rc not in (0, 124, 137) and elapsed < PROMPT, \
        f"exit code {rc} after {elapsed:.1f}s:\n{out}"
    assert "RuntimeError: injected failure" in out
    assert "aborting the MPI job" not in out


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_clean_run_exits_zero(nprocs):
    rc, elapsed, out = launch("clean", nprocs)
    assert rc == 0, f"exit code {rc}:\n{out}"
    assert out.count("done reading") == nprocs


# ------------------------------------------------------------------ launch size (in-process)
LAUNCH_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")


@pytest.fixture
def launch_env(monkeypatch):
    """This process's launch variables cleared (pytest runs as an MPI world of one)."""
    for var in LAUNCH_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.mark.parametrize("var", LAUNCH_VARIABLES)
def test_launch_of_another_size_is_refused(launch_env, var):
    """torchrun --nproc_per_node 2 makes every worker an MPI world of one with
    WORLD_SIZE=2 (before: each waited forever in torch's rendezvous).  DDStore() refuses
    such a launch, agreed, naming the variable and the mpiexec to use; nothing is left."""
    from mpi4py import MPI
    import ddstore
    from ddstore._collective import is_agreed
    launch_env.setenv(var, "2")
    for comm in (MPI.COMM_SELF, MPI.COMM_WORLD):
        with pytest.raises(ddstore.DDStoreStateError) as info:
            ddstore.DDStore(comm)
        msg = str(info.value)
        assert f"{var}=2" in msg and "`mpiexec -n 2 python script.py`" in msg, msg
        assert "has 1 rank" in msg and is_agreed(info.value), msg
    from ddstore import _lifecycle
    assert not _lifecycle._LIVE_STORES


def test_launch_before_torch_rendezvous_is_refused(launch_env):
    """The examples start torch.distributed before the store: the same check comes first
    there, so a torchrun launch fails at once instead of blocking in the rendezvous."""
    import torch.distributed as dist
    import ddstore
    from ddstore.distributed import init_torch_distributed
    launch_env.setenv("WORLD_SIZE", "2")
    with pytest.raises(ddstore.DDStoreStateError, match=r"mpiexec -n 2 python"):
        init_torch_distributed()
    assert not dist.is_initialized()


def test_launch_of_the_right_size_is_accepted(launch_env):
    """mpiexec sets PMI_SIZE (MPICH) or OMPI_COMM_WORLD_SIZE (Open MPI) to the job's size
    itself: equal to MPI.COMM_WORLD's size, it is no error; nor is a value that is not a
    count."""
    from mpi4py import MPI
    import ddstore
    from ddstore._lifecycle import launch_error
    for var in LAUNCH_VARIABLES:
        launch_env.setenv(var, "1")
    launch_env.setenv("MV2_COMM_WORLD_SIZE", "")
    ddstore.DDStore(MPI.COMM_SELF).free()
    assert launch_error({"PMI_SIZE": "4", "WORLD_SIZE": "4"}, 4) is None
    assert launch_error({"WORLD_SIZE": "x"}, 3) is None
    err = launch_error({"PMI_SIZE": "4", "OMPI_COMM_WORLD_SIZE": "3"}, 4)
    assert err is not None and "OMPI_COMM_WORLD_SIZE=3" in err[1] and \
        "mpiexec -n 3" in err[1], err
