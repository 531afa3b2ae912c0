"""Several nodes simulated on one machine (MPICH's MPIR_CVAR_NUM_CLIQUES or
MPIR_CVAR_ODD_EVEN_CLIQUES split the ranks into cliques that MPI treats as nodes).

Usage: MPIR_CVAR_ODD_EVEN_CLIQUES=1 timeout 120 mpiexec -n 4 python core_nodes.py
Checks that transport='auto' reads node-local members by shared memory and the others
by MPI_Get (every byte compared), and that transport='shm' refuses a group spanning
nodes on every rank with a clear error, agreed (told once).
"""
import numpy as np
from mpi4py import MPI

from _harness import check, run_main

import ddstore
from ddstore import _collective

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def main():
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    node_ranks = set(node.allgather(rank))
    assert len(node_ranks) < size, "no simulated nodes: run with MPIR_CVAR_*_CLIQUES set"

    for width in [w for w in (2, size) if size % w == 0]:
        group = set(range(rank - rank % width, rank - rank % width + width))
        with ddstore.DDStore(comm, width=width, transport="auto") as store:
            expected_peers = len((group & node_ranks) - {rank})
            check(store.shm_peers == expected_peers,
                  f"width={width}: shm_peers {store.shm_peers}, expected {expected_peers}")
            total = 50 * width
            data = np.random.default_rng(3).standard_normal((total, 9)).astype(np.float32)
            lo, hi = ddstore.partition(total, width, store.group_rank)
            store.add("x", data[lo:hi])
            idx = np.random.default_rng(rank).integers(0, total, 400)
            check(store.get_batch("x", idx).tobytes() == data[idx].tobytes(),
                  f"width={width}: get_batch bytes differ")
            check(store.get_range("x", 0, total).tobytes() == data.tobytes(),
                  f"width={width}: get_range bytes differ")
        spans_nodes = not group <= node_ranks
        spans_anywhere = comm.allreduce(spans_nodes, op=MPI.LOR)
        try:
            ddstore.DDStore(comm, width=width, transport="shm").free()
            check(not spans_anywhere, "transport='shm' accepted a group spanning nodes")
        except ddstore.DDStoreValueError as exc:
            check(spans_anywhere, f"unexpected error: {exc}")
            check("transport='shm'" in str(exc) and f"width={width}" in str(exc), str(exc))
            # refused by the core alike on every rank: agreed, so told once (by rank 0)
            check(_collective.is_agreed(exc), f"not marked agreed: {exc}")
        if rank == 0:
            print(f"width={width}: shm peers {expected_peers}, spans nodes: {spans_anywhere}",
                  flush=True)
    print(f"rank {rank}: simulated nodes ok", flush=True)


run_main(main)
