"""The DDSTORE_TRANSPORT environment variable replaces transport='auto'."""
import numpy as np
from mpi4py import MPI

from _harness import check, run_main

import ddstore

comm = MPI.COMM_WORLD


def main():
    with ddstore.DDStore(comm) as store:
        store.add("x", np.full((3, 2), comm.rank, dtype=np.int64))
        got = store.get_batch("x", np.arange(3 * comm.size))
        check((got[:, 0] == np.repeat(np.arange(comm.size), 3)).all(),
              f"rows read: {got[:, 0]}")
        if comm.rank == 0:
            print(f"transport={store.transport} shm_peers={store.shm_peers}")


run_main(main)
