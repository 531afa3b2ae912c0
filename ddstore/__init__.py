"""ddstore: a distributed in-memory data store for GNN and spatiotemporal training on MPI.

Quick start (run under ``mpiexec``)::

    from mpi4py import MPI
    import ddstore

    with ddstore.DDStore(MPI.COMM_WORLD, width=2) as store:
        lo, hi = ddstore.partition(total_rows, store.group_size, store.group_rank)
        store.add("x", data[lo:hi])              # collective
        batch = store.get_batch("x", [5, 0, 5])  # one-sided, any rows of the group

Subpackages, loaded on first use: ``ddstore.sources`` (readers, one module per file
format), ``ddstore.graphs`` (PyG graph samples), ``ddstore.spatiotemporal``
(index-batched windows), ``ddstore.dynamic`` (dynamic graphs: checkpoints plus deltas)
``ddstore.temporal`` (temporal graphs: T-CSR, temporal neighbour sampling),
``ddstore.pyg`` (PyG's feature and graph stores and loaders), and for training
``ddstore.distributed``, ``ddstore.prefetch`` and ``ddstore.device``; all but ``sources``
import torch.
"""
import importlib

from ._version import __version__
from .errors import (DDStoreError, DDStoreIndexError, DDStoreInterrupt, DDStoreMemoryError,
                     DDStoreNotImplementedError, DDStoreOSError, DDStoreStateError,
                     DDStoreValueError)
from .store import DDStore, abort_on_exception, partition

__all__ = ["DDStore", "partition", "abort_on_exception", "DDStoreError", "DDStoreValueError",
           "DDStoreIndexError", "DDStoreMemoryError", "DDStoreStateError",
           "DDStoreNotImplementedError", "DDStoreOSError", "DDStoreInterrupt"]

_LAZY = ("graphs", "spatiotemporal", "dynamic", "temporal", "bench", "sources", "pyg",
         "device", "prefetch", "distributed")


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'ddstore' has no attribute {name!r}")
