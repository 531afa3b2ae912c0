"""The backend and device choice of ``init_torch_distributed`` (issue 44 item 1): ranks
that outnumber the GPUs of their node share them over gloo instead of failing in NCCL
("Duplicate GPU detected"), a forced device or backend that cannot work is refused
before any rendezvous, and the choice is logged once.  The choice is a pure function of
what every rank sees, tested here for GPU layouts this CPU machine does not have."""
import logging

import numpy as np
import pytest

from ddstore.distributed import choose_backend, node_places
from ddstore.errors import DDStoreStateError, DDStoreValueError


def _node(name, ranks, gpus):
    return [(name, i, ranks, gpus) for i in range(ranks)]


def test_one_gpu_per_rank_is_nccl():
    backend, devices, reason = choose_backend(_node("a", 2, 2) + _node("b", 2, 4))
    assert backend == "nccl" and devices == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert "one GPU per rank" in reason


@pytest.mark.parametrize("ranks,gpus", [(2, 1), (4, 1), (4, 3), (5, 2)])
def test_ranks_sharing_a_gpu_get_gloo_and_every_gpu_in_turn(ranks, gpus):
    backend, devices, reason = choose_backend(_node("n0", ranks, gpus))
    assert backend == "gloo"
    assert devices == [f"cuda:{i % gpus}" for i in range(ranks)]
    assert f"n0: {ranks} ranks on {gpus} GPU(s)" in reason and "NCCL" in reason


def test_one_shared_node_makes_the_whole_job_gloo():
    """One backend for the job: a node with too few GPUs decides it for all."""
    backend, devices, _ = choose_backend(_node("a", 2, 2) + _node("b", 3, 1))
    assert backend == "gloo" and devices == ["cuda:0", "cuda:1"] + ["cuda:0"] * 3


def test_nccl_asked_for_on_shared_gpus_is_refused_naming_the_node():
    with pytest.raises(DDStoreValueError, match=r"backend='nccl' needs one GPU per rank"
                       r".*n0: 4 ranks on 1 GPU\(s\)"):
        choose_backend(_node("n0", 4, 1), backend="nccl")


def test_cpu_choices():
    assert choose_backend(_node("a", 3, 0)) == (
        "gloo", ["cpu"] * 3, "backend gloo on CPU: no rank sees a CUDA device")
    backend, devices, reason = choose_backend(_node("a", 2, 2), device="cpu")
    assert (backend, devices) == ("gloo", ["cpu", "cpu"]) and "device='cpu'" in reason
    # some ranks without a GPU: the job stays on CPU, and says which ranks
    backend, devices, reason = choose_backend(_node("a", 1, 1) + _node("b", 2, 0))
    assert devices == ["cpu"] * 3 and "rank(s) 1, 2 see no CUDA device" in reason
    with pytest.raises(DDStoreValueError, match=r"device='cuda' but rank\(s\) 1, 2 see no CUDA "
                                                r"device .*; use device='cpu', or 'auto'"):
        choose_backend(_node("a", 1, 1) + _node("b", 2, 0), device="cuda")
    with pytest.raises(DDStoreValueError, match="backend='nccl' needs a GPU on every rank"):
        choose_backend(_node("a", 2, 0), backend="nccl")


def test_bad_arguments_name_the_allowed_values():
    with pytest.raises(DDStoreValueError, match=r"device='tpu'; allowed: None, 'auto'"):
        choose_backend(_node("a", 1, 0), device="tpu")
    with pytest.raises(DDStoreValueError, match=r"backend='ncl'; allowed: None"):
        choose_backend(_node("a", 1, 0), backend="ncl")
    # an index, as a string or a torch.device, refused alike (a torch.device's was
    # ignored: rank 0 on cuda:0 for cuda:1, and the string refused without saying why)
    import torch
    for device in ("cuda:1", torch.device("cuda:1"), "cpu:0", torch.device("cpu", 0)):
        with pytest.raises(DDStoreValueError, match=r"an index is not taken: (each rank "
                                                    r"trains on GPU <its place among the|"
                                                    r"give 'cpu')"):
            choose_backend(_node("a", 2, 2), device=device)
    assert choose_backend(_node("a", 2, 2), device=torch.device("cuda"))[1] == [
        "cuda:0", "cuda:1"]


def test_init_on_this_machine_refuses_cuda_and_logs_its_choice(caplog, monkeypatch):
    """In process, one rank (a world of one): device='cuda' without CUDA is refused before
    any rendezvous; the default initialises gloo on the CPU and logs why."""
    import torch
    import torch.distributed as dist
    from mpi4py import MPI
    from ddstore.distributed import init_torch_distributed
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal needs a machine without")
    for var in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(DDStoreValueError, match="device='cuda' but rank"):
        init_torch_distributed(MPI.COMM_SELF, device="cuda")
    assert not dist.is_initialized()
    # a backend this torch was not built with: named, with the ones it has, before any
    # rendezvous (torch's own error came from inside init_process_group)
    missing = [b for b in ("mpi", "ucc") if not getattr(dist, f"is_{b}_available")()]
    for b in missing:
        with pytest.raises(DDStoreValueError, match=rf"backend '{b}' is not built into "
                                                    rf"torch on rank\(s\) 0; built there: "
                                                    rf".*'gloo'"):
            init_torch_distributed(MPI.COMM_SELF, backend=b, device="cpu")
        assert not dist.is_initialized()
    # what is no intracommunicator: refused before any rank waits (an intercommunicator
    # hung rank 0, COMM_NULL failed inside MPI)
    for bad, shown in (("x", "str 'x'"), (MPI.COMM_NULL, "Comm")):
        with pytest.raises(DDStoreValueError, match=rf"init_torch_distributed: comm must be "
                                                     rf"an mpi4py intracommunicator .*got "
                                                     rf"{shown}"):
            init_torch_distributed(bad)
    # a MASTER_ADDR that is not this host's (a leftover of another job): refused before
    # torch's rendezvous, which waited 30 minutes for it
    for addr, why in (("192.0.2.1", "OSError: .*Cannot assign requested address"),
                      ("no.such.host.invalid", "gaierror")):
        monkeypatch.setenv("MASTER_ADDR", addr)
        with pytest.raises(DDStoreValueError, match=rf"MASTER_ADDR='{addr}' is not an "
                                                    rf"address of rank 0's node .*\({why}.*"
                                                    rf"set MASTER_ADDR to an address of rank "
                                                    rf"0's node, or unset it"):
            init_torch_distributed(MPI.COMM_SELF)
        assert not dist.is_initialized()
    monkeypatch.delenv("MASTER_ADDR")
    with caplog.at_level(logging.INFO, logger="ddstore"):
        device = init_torch_distributed(MPI.COMM_SELF)
    try:
        assert device == torch.device("cpu") and dist.get_backend() == "gloo"
        assert "backend gloo on CPU: no rank sees a CUDA device (1 rank on 1 node(s))" \
            in caplog.text
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="ddstore"):  # a second call: refused
            with pytest.raises(DDStoreStateError, match=r"torch.distributed is initialised "
                                                        r"already \(backend gloo\)"):
                init_torch_distributed(MPI.COMM_SELF)
        assert "backend gloo" not in caplog.text  # (it logged a choice, then torch raised)
    finally:
        dist.destroy_process_group()


def test_gpu_ids_read_only_where_the_job_may_use_cuda():
    """The GPUs' UUIDs (reading one starts CUDA) are asked for only when every rank sees
    a GPU and the device is not forced to the CPU: a job that goes to the CPU because
    one rank has none started CUDA on the others (and forked its DataLoader workers
    from processes holding a CUDA context)."""
    from ddstore.distributed import _needs_ids
    import torch
    assert _needs_ids([1, 2], None) and _needs_ids([1, 2], "auto")
    assert _needs_ids([1, 1], "cuda") and _needs_ids([4], torch.device("cuda"))
    assert not _needs_ids([1, 0], None) and not _needs_ids([0, 0], "auto")
    assert not _needs_ids([1, 1], "cpu") and not _needs_ids([2], torch.device("cpu"))
    assert not _needs_ids([0, 1], "cuda")  # (refused by choose_backend, from the counts)
    with pytest.raises(DDStoreValueError, match="device='cuda' but rank"):
        choose_backend(node_places([("n0", 0), ("n0", 1)]), device="cuda")


def test_gpus_told_apart_by_their_ids():
    """Ranks that a launcher shows one GPU each (``CUDA_VISIBLE_DEVICES`` per task: each
    sees ``cuda:0``, another GPU in each) train on NCCL, one GPU per rank; ranks that see
    the same GPUs share them only when they outnumber them (all ranks were taken as
    sharing cuda:0, gloo, and NCCL was refused)."""
    own = [("n0", i, 4, (f"GPU-{i}",)) for i in range(4)]
    backend, devices, reason = choose_backend(own)
    assert backend == "nccl" and devices == ["cuda:0"] * 4 and "one GPU per rank" in reason
    assert choose_backend(own, backend="nccl")[0] == "nccl"
    # 4 ranks bound to 2 GPUs each, all different: cuda:0 of each, distinct
    pairs = [("n0", i, 4, (f"GPU-{2 * i}", f"GPU-{2 * i + 1}")) for i in range(4)]
    assert choose_backend(pairs)[:2] == ("nccl", ["cuda:0"] * 4)
    # two ranks shown the same 2 GPUs, two others one GPU between them: the last two share
    mixed = [("n0", 0, 4, ("A", "B")), ("n0", 1, 4, ("A", "B")), ("n0", 2, 4, ("C",)),
             ("n0", 3, 4, ("C",))]
    backend, devices, reason = choose_backend(mixed)
    assert backend == "gloo" and devices == ["cuda:0", "cuda:1", "cuda:0", "cuda:0"]
    assert "n0: 4 ranks on 3 GPU(s)" in reason
    with pytest.raises(DDStoreValueError, match=r"ranks share GPUs \(n0: 4 ranks on 3"):
        choose_backend(mixed, backend="nccl")
    # every rank seeing every GPU by id: as by count (a numpy count too)
    same = [("n0", i, 4, ("A", "B")) for i in range(4)]
    assert choose_backend(same)[:2] == choose_backend(_node("n0", 4, 2))[:2] == \
        choose_backend(_node("n0", 4, np.int64(2)))[:2]


def test_node_places_count_ranks_per_node_in_rank_order():
    from ddstore.distributed import node_places
    seen = [("a", 1), ("b", 0), ("a", 1), ("a", 1), ("b", 0)]
    assert node_places(seen) == [("a", 0, 3, 1), ("b", 0, 2, 0), ("a", 1, 3, 1),
                                 ("a", 2, 3, 1), ("b", 1, 2, 0)]
    # interleaved nodes feed choose_backend: rank i of a node on GPU i % gpus
    _, devices, _ = choose_backend(node_places([("a", 2), ("b", 1), ("a", 2), ("b", 1)]))
    assert devices == ["cuda:0", "cuda:0", "cuda:1", "cuda:0"]


def test_rendezvous_check_takes_every_rank_and_ipv6(monkeypatch):
    """Rank 0's listener accepts (and closes) what it is sent, so a job of more ranks
    than the kernel's accept queue (``somaxconn``) reaches it (its queue was never
    emptied: the ranks beyond it timed out after 20 s); IPv6 addresses, bracketed or
    not, are checked as torch takes them (an IPv4-only check refused '[::1]')."""
    import socket
    import torch.distributed as dist
    from mpi4py import MPI
    from ddstore.distributed import _reach, _Rendezvous, init_torch_distributed, url_host
    try:
        queue = int(open("/proc/sys/net/core/somaxconn").read())
    except OSError:
        queue = 4096
    probe = _Rendezvous()
    try:
        for _ in range(queue + 50):  # (each closed at once, as a rank's check does)
            _reach("127.0.0.1", probe.info[2], None, 1, "node", None)
    finally:
        probe.close()
    assert not probe._thread.is_alive()
    assert url_host("::1") == url_host("[::1]") == "[::1]" and url_host("a.b") == "a.b"
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"this machine has no IPv6 loopback ({exc})")
    for addr in ("[::1]", "::1"):
        monkeypatch.setenv("MASTER_ADDR", addr)
        init_torch_distributed(MPI.COMM_SELF)
        try:
            assert dist.get_world_size() == 1
        finally:
            dist.destroy_process_group()
