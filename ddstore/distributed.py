"""``torch.distributed`` over the ranks of an MPI job (for data-parallel training next to
a DDStore, without a launcher of torch's own), on CPUs, on one GPU per rank, or with
several ranks sharing a GPU."""
import collections
import numbers
import logging
import os
import socket

from .cli import plural
from . import _lifecycle
from ._collective import holds_interrupts
from .errors import DDStoreStateError, DDStoreValueError

__all__ = ["init_torch_distributed", "choose_backend", "node_places", "rank_order_mean"]

logger = logging.getLogger("ddstore")

_DEVICES = ("auto", "cpu", "cuda")
_BACKENDS = ("nccl", "gloo", "mpi", "ucc")


def _device_kind(device):
    """``device`` (None, a string or a ``torch.device``) as one of ``_DEVICES``."""
    if device is None:
        return "auto"
    kind = getattr(device, "type", device)
    index = device.index if hasattr(device, "type") else None  # (a torch.device's)
    if isinstance(kind, str) and index is None and ":" in kind:
        kind, _, index = kind.partition(":")
    if kind not in _DEVICES or index is not None:
        why = "" if index is None or kind not in _DEVICES else (
            " (an index is not taken: give 'cpu')" if kind == "cpu" else
            " (an index is not taken: each rank trains on GPU <its place among the "
            "ranks of its node that see the same GPUs> % <their number>, so give the "
            "type alone)")
        raise DDStoreValueError(f"init_torch_distributed: device={device!r}{why}; allowed: "
                                f"None, 'auto', 'cpu', 'cuda' (or a torch.device of type "
                                f"cpu or cuda, without an index)")
    return kind


def choose_backend(ranks, backend=None, device=None):
    """The backend and devices of a job, from what every rank saw (pure: the same result
    on every rank for the same ``ranks``).

    ``ranks``: one ``(node, local_rank, local_size, gpus)`` per rank, in rank order
    (``gpus`` the CUDA devices the rank sees: a count, 0 without CUDA, the node's GPUs
    ``0 .. gpus-1``; or a tuple of the devices' UUIDs in the rank's order, which tells
    GPUs apart when the launcher shows each rank other ones, ``CUDA_VISIBLE_DEVICES``
    per task).  ``backend``: None (choose) or a name to use; ``device``:
    None/``"auto"`` (CUDA where every rank has it, else CPU), ``"cpu"`` or ``"cuda"``.

    Returns ``(backend, devices, reason)``: ``devices[r]`` is ``"cpu"`` or ``"cuda:i"``
    for rank ``r`` (its place among the ranks of its node that see the same GPUs,
    modulo their number), and ``reason`` says why, in one line.  NCCL needs one GPU per
    rank: where two ranks of a node would train on one GPU (more ranks than GPUs), the
    choice is gloo, which reduces CUDA tensors too (through the host).  Raises
    :class:`~ddstore.DDStoreValueError` for a choice that
    cannot work (``device="cuda"`` where a rank has no GPU, ``backend="nccl"`` on shared
    or absent GPUs), naming the ranks and counts.
    """
    kind = _device_kind(device)
    if backend is not None and backend not in _BACKENDS:
        raise DDStoreValueError(f"init_torch_distributed: backend={backend!r}; allowed: "
                                f"None (choose), {', '.join(map(repr, _BACKENDS))}")
    ids = [_gpu_ids(node, gpus) for node, _l, _s, gpus in ranks]
    no_gpu = [r for r, seen in enumerate(ids) if not seen]
    if kind == "cuda" and no_gpu:
        raise DDStoreValueError(
            f"init_torch_distributed: device='cuda' but rank(s) "
            f"{', '.join(map(str, no_gpu))} see no CUDA device (torch.cuda.is_available() "
            f"is False there); use device='cpu', or 'auto' (CUDA only where every rank "
            f"has it)")
    use_cuda = kind == "cuda" or (kind == "auto" and not no_gpu)
    if not use_cuda:
        if backend == "nccl":
            raise DDStoreValueError(
                "init_torch_distributed: backend='nccl' needs a GPU on every rank, but "
                + (f"rank(s) {', '.join(map(str, no_gpu))} see none" if no_gpu
                   else "device='cpu' was asked for") + "; use backend=None or 'gloo'")
        why = ("device='cpu' was asked for" if kind == "cpu" else
               "no rank sees a CUDA device" if len(no_gpu) == len(ranks) else
               f"rank(s) {', '.join(map(str, no_gpu))} see no CUDA device")
        return backend or "gloo", ["cpu"] * len(ranks), \
            f"backend {backend or 'gloo'} on CPU: {why}"
    # each rank's place among the ranks of its node that see the same GPUs, in rank
    # order: rank i of them on their GPU i % count (what it uses: that GPU's id)
    place, devices, used = collections.Counter(), [], {}
    for (node, _l, _s, _g), seen in zip(ranks, ids):
        i = place[node, seen] % len(seen)
        place[node, seen] += 1
        devices.append(f"cuda:{i}")
        used.setdefault(node, collections.Counter())[seen[i]] += 1
    shared = {node: (sum(c.values()), len(c)) for node, c in used.items()
              if max(c.values()) > 1}  # node -> (ranks there, GPUs they use)
    if shared:
        detail = "; ".join(f"{node}: {size} ranks on {gpus} GPU(s)"
                           for node, (size, gpus) in shared.items())
        if backend == "nccl":
            raise DDStoreValueError(
                f"init_torch_distributed: backend='nccl' needs one GPU per rank, but "
                f"ranks share GPUs ({detail}); use backend=None (gloo, which reduces CUDA "
                f"tensors through the host), fewer ranks per node, or device='cpu'")
        chosen = backend or "gloo"
        return chosen, devices, (f"backend {chosen} with ranks sharing GPUs ({detail}); "
                                 f"NCCL needs one GPU per rank")
    chosen = backend or "nccl"
    return chosen, devices, f"backend {chosen}, one GPU per rank"


def _gpu_ids(node, gpus):
    """The GPUs a rank sees as ids that tell them apart across the ranks of its node: its
    UUIDs (a tuple), or for a count ``(node, 0) .. (node, gpus-1)``."""
    if isinstance(gpus, numbers.Integral):
        return tuple((node, i) for i in range(int(gpus)))
    return tuple(gpus)


def _gpu_count(torch):
    """The CUDA devices this rank sees (0 without CUDA), found without starting CUDA."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _needs_ids(counts, device):
    """Whether the ranks must tell each other their GPUs' UUIDs: only where the job may
    train on GPUs (every rank sees one, ``device`` not ``"cpu"``).  Reading a UUID
    starts CUDA, in a process that may then train on the CPU and fork DataLoader
    workers."""
    return _device_kind(device) != "cpu" and all(counts)


def _visible_gpus(torch, count):
    """What this rank tells the others of its ``count`` GPUs: their UUIDs (distinct
    GPUs that a launcher numbers 0 in each rank are told apart), or their count where
    torch gives no UUID."""
    try:
        return tuple(str(torch.cuda.get_device_properties(i).uuid) for i in range(count))
    except Exception:  # noqa: BLE001 -- (an older torch, a driver without UUIDs)
        return count


def _backend_built(dist, name):
    """Whether this process's torch has ``torch.distributed`` backend ``name``."""
    probe = getattr(dist, f"is_{name}_available", None)
    return bool(probe()) if probe is not None else False


def node_places(seen):
    """``(node, local_rank, local_size, gpus)`` per rank from every rank's ``(node,
    gpus)`` in rank order: a rank's place among the ranks of its node (by host name) and
    their number, in one pass (a job may have tens of thousands of ranks)."""
    per_node = collections.Counter(node for node, _g in seen)
    before = collections.Counter()
    places = []
    for node, gpus in seen:
        places.append((node, before[node], per_node[node], gpus))
        before[node] += 1
    return places


@holds_interrupts
def init_torch_distributed(comm=None, backend=None, device=None):
    """Collective: initialise ``torch.distributed`` with one process per rank of ``comm``
    (default ``MPI.COMM_WORLD``), ranks and world size taken from MPI.  Returns the
    ``torch.device`` this rank should train on.

    ``device``: None or ``"auto"`` uses CUDA where every rank sees a GPU, else the CPU;
    ``"cpu"`` / ``"cuda"`` force it.  ``backend``: None chooses (see
    :func:`choose_backend`): NCCL with one GPU per rank; gloo where ranks outnumber the
    GPUs of their node (they then share them, the ``i``-th rank of a node among those
    that see the same GPUs on GPU ``i % <their number>``, GPUs told apart by UUID:
    NCCL refuses two ranks on one GPU) and on CPUs.  Rank 0 logs the choice and why
    (logger ``"ddstore"``).  Every rank decides alike from what all ranks see, so a
    refused choice raises the same :class:`~ddstore.DDStoreValueError` everywhere,
    before any rendezvous.

    Rank 0 chooses a free port on its host and broadcasts it; the address is
    ``MASTER_ADDR`` if set, else loopback when every rank runs on one node, else rank 0's
    address (its host name resolved on rank 0).  Raises
    :class:`~ddstore.DDStoreStateError` (every rank, before any rendezvous) when the
    processes were not launched as one MPI job of the size their launcher meant (e.g.
    ``torchrun``: each process an MPI world of one), naming the ``mpiexec -n N`` to use.
    """
    import torch
    import torch.distributed as dist
    from mpi4py import MPI
    from ._collective import collective
    from ._lifecycle import check_launch
    # (an intercommunicator or COMM_NULL: refused here, before any rank waits)
    comm = _lifecycle.as_comm(comm, "init_torch_distributed")
    mine = (MPI.Get_processor_name(), _gpu_count(torch),
            [b for b in _BACKENDS if _backend_built(dist, b)])
    master = os.environ.get("MASTER_ADDR", "").strip() or None
    probe = None  # rank 0's listener that every rank connects to before torch does
    try:
        # before torch's rendezvous, which would wait forever for processes of another
        # job, or for an address that does not reach rank 0
        with collective(comm, "init_torch_distributed",
                        same={"backend": backend,
                              "device": "auto" if device is None else str(device),
                              "MASTER_ADDR": master}) as step:
            check_launch()
            if dist.is_initialized():  # (torch says so only after this call's log line)
                raise DDStoreStateError(
                    f"init_torch_distributed: torch.distributed is initialised already "
                    f"(backend {dist.get_backend()}); call it once per process, or "
                    f"torch.distributed.destroy_process_group() first")
            if comm.rank == 0:
                probe = _Rendezvous()
            seen = step.agree(share=(mine, probe and probe.info))
            gpus = [g for (_n, g, _b), _ in seen]
            if _needs_ids(gpus, device):  # (the UUIDs only where CUDA may be used)
                with collective(comm, None) as ids:
                    gpus = ids.agree(share=_visible_gpus(torch, mine[1]))
            ranks = node_places([(node, g) for ((node, _g, _b), _), g in zip(seen, gpus)])
            backend, devices, reason = choose_backend(ranks, backend, device)
            lacking = [r for r, ((_n, _g, built), _) in enumerate(seen)
                       if backend not in built]
            if lacking:
                raise DDStoreValueError(
                    f"init_torch_distributed: backend {backend!r} is not built into torch "
                    f"on rank(s) {', '.join(map(str, lacking[:8]))}"
                    f"{' ...' if len(lacking) > 8 else ''}; built there: "
                    f"{', '.join(map(repr, seen[lacking[0]][0][2])) or 'none'}")
        host, port, probe_port = seen[0][1]
        if master:
            addr = master  # the address torch's own launchers use
        elif len({r[0] for r in ranks}) == 1:
            addr = "127.0.0.1"  # one node: stay on loopback
        else:
            addr = host
        with collective(comm, None) as step:  # every rank reaches rank 0 at that address
            _reach(addr, probe_port, master, comm.rank, ranks[0][0], probe)
            step.agree()
    finally:
        if probe is not None:
            probe.close()
    if comm.rank == 0:
        logger.info("init_torch_distributed: %s (%s on %d node(s))", reason,
                    plural(comm.size, "rank"), len({r[0] for r in ranks}))
    device = torch.device(devices[comm.rank])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://{url_host(addr)}:{port}",
                            rank=comm.rank, world_size=comm.size)
    # torch's excepthook now wraps ddstore's abort, which would end the job before torch
    # printed what it captured: the abort goes around it again
    _lifecycle.outermost_abort_hook()
    return device


#: Seconds a rank tries to reach rank 0's rendezvous address before it is refused.
REACH_TIMEOUT = 20.0


class _Rendezvous:
    """Rank 0's side of the address check: a listener on every interface (IPv4 and,
    where the system has it, IPv6), whose connections a thread accepts and closes (a
    queue that nobody empties holds ``somaxconn`` of them: a larger job's ranks would
    time out), and the free port torch's store will take.  ``info``: ``(host address,
    torch's port, the listener's port)``."""

    def __init__(self):
        import threading
        try:
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            host = "127.0.0.1"
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if socket.has_dualstack_ipv6():
            self.sock = socket.create_server(("", 0), family=socket.AF_INET6,
                                             dualstack_ipv6=True, backlog=socket.SOMAXCONN)
        else:
            self.sock = socket.create_server(("", 0), backlog=socket.SOMAXCONN)
        self.sock.settimeout(0.2)
        self._open = True
        self._thread = threading.Thread(target=self._accept, daemon=True,
                                        name="ddstore-rendezvous-check")
        self._thread.start()
        self.info = (host, port, self.sock.getsockname()[1])

    def _accept(self):
        while self._open:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:  # closed
                return
            conn.close()

    def close(self):
        self._open = False
        self.sock.close()
        self._thread.join(timeout=5)


def url_host(addr):
    """``addr`` as the host of a ``tcp://`` URL: an IPv6 address in brackets."""
    host = addr.strip("[]")
    return f"[{host}]" if ":" in host else host


def _reach(addr, port, master, rank, node0, probe):
    """Raise :class:`DDStoreValueError` when this rank cannot open a connection to
    ``addr:port`` (rank 0's listener; any of the addresses the name resolves to, IPv4
    or IPv6) within :data:`REACH_TIMEOUT` seconds, or, on rank 0, when ``addr`` is not
    an address of its host (torch's store listens there)."""
    told = f"MASTER_ADDR={master!r}" if master else f"rank 0's address {addr!r}"
    fix = ("set MASTER_ADDR to an address of rank 0's node, or unset it (ddstore then "
           "takes loopback on one node, else rank 0's host address)") if master else \
        "set MASTER_ADDR to an address of rank 0's node that every node reaches"
    host = addr.strip("[]")
    try:
        if probe is not None:  # torch's store runs on rank 0: one of its addresses
            _bind_any(host)
        with socket.create_connection((host, port), timeout=REACH_TIMEOUT):
            pass
    except OSError as exc:
        where = (f"is not an address of rank 0's node {node0!r}" if probe is not None
                 else f"does not reach rank 0 (node {node0!r}) from rank {rank}")
        why = "no answer" if isinstance(exc, socket.timeout) else exc
        raise DDStoreValueError(
            f"init_torch_distributed: {told} {where} ({type(exc).__name__}: {why}"
            f"{f' in {REACH_TIMEOUT:g} s' if isinstance(exc, socket.timeout) else ''}); "
            f"{fix}") from None


def _bind_any(host):
    """Bind a socket to one of the addresses ``host`` resolves to, or raise the
    ``OSError`` of the last (``socket.gaierror`` for a name that does not resolve)."""
    failure = None
    for family, kind, proto, _, where in socket.getaddrinfo(host, 0,
                                                           type=socket.SOCK_STREAM):
        try:
            with socket.socket(family, kind, proto) as s:
                s.bind(where)
            return
        except OSError as exc:
            failure = exc
    raise failure


def rank_order_mean(process_group, bucket):
    """A ``DistributedDataParallel`` communication hook
    (``ddp.register_comm_hook(None, rank_order_mean)``): DDP's gradient average (each
    rank's gradients divided by the rank count, then summed), the shares summed in rank
    order, so that a run resumed from a checkpoint trains on the same bits as the run
    that never stopped.  A DDP made again on resume lays its buckets out anew on its
    first iteration, and the default ring all-reduce's order of summation (with 3 ranks
    or more) depends on where a gradient sits in its bucket; with 2 ranks the sum is the
    same either way.  Costs an all-gather (ranks x the gradients) instead of an
    all-reduce: for small models, or where bits matter more than the gradients' time."""
    import torch
    import torch.distributed as dist
    t = bucket.buffer()
    t.div_(dist.get_world_size(process_group))
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(process_group))]
    fut = dist.all_gather(parts, t, group=process_group, async_op=True).get_future()

    def total(_):
        out = parts[0].clone()
        for p in parts[1:]:
            out += p
        return out
    return fut.then(total)
