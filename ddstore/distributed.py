"""``torch.distributed`` over the ranks of an MPI job (for data-parallel training next to
a DDStore, without a launcher of torch's own)."""
import os
import socket

__all__ = ["init_torch_distributed"]


def init_torch_distributed(comm=None, backend=None):
    """Collective: initialise ``torch.distributed`` with one process per rank of ``comm``
    (default ``MPI.COMM_WORLD``), ranks and world size taken from MPI.

    ``backend`` None picks ``"nccl"`` when CUDA is available, else ``"gloo"``.  Rank 0
    chooses a free port on its host and broadcasts it; the address is ``MASTER_ADDR`` if
    set, else loopback when every rank runs on one node, else rank 0's address (its host
    name resolved on rank 0).  Returns the
    ``torch.device`` this rank should use: with ``"nccl"``, the GPU of its rank among the
    ranks on its node; otherwise the CPU.  Raises :class:`~ddstore.DDStoreStateError`
    (every rank, before any rendezvous) when the processes were not launched as one MPI
    job of the size their launcher meant (e.g. ``torchrun``: each process an MPI world
    of one), naming the ``mpiexec -n N`` to use.
    """
    import torch
    import torch.distributed as dist
    from mpi4py import MPI
    from ._collective import collective
    from ._lifecycle import check_launch
    comm = MPI.COMM_WORLD if comm is None else comm
    # before torch's rendezvous, which would wait forever for processes of another job
    with collective(comm, "init_torch_distributed"):
        check_launch()
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        local = comm.Split_type(MPI.COMM_TYPE_SHARED)
        device = torch.device("cuda", local.rank % torch.cuda.device_count())
        local.Free()
        torch.cuda.set_device(device)
    addr, port = None, None
    if comm.rank == 0:
        try:
            addr = socket.gethostbyname(socket.gethostname())
        except OSError:
            addr = "127.0.0.1"
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
    names = comm.allgather(MPI.Get_processor_name())
    addr, port = comm.bcast((addr, port), root=0)
    if os.environ.get("MASTER_ADDR"):
        addr = os.environ["MASTER_ADDR"]  # the address torch's own launchers use
    elif len(set(names)) == 1:
        addr = "127.0.0.1"  # one node: stay on loopback
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=comm.rank,
                            world_size=comm.size)
    return device
