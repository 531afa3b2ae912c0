"""DataLoader worker processes (``num_workers > 0``) over the PyG stores.

A worker of PyG's ``NeighborLoader`` / ``LinkNeighborLoader`` is a process forked from
the rank: it inherits the rank's memory, the store's MPI-3 shared-memory windows
included (this rank's chunks and the node-local group members' chunks stay mapped, at
the same addresses), so the C sampler and the feature reads run in it by plain loads.
It must make no MPI call (MPI does not define a forked child's use of its parent's MPI
state): the C core refuses every path that would make one there (``dds_forked``, see
:func:`ddstore._core.forked`), and so do the collective steps.  Hence the rule, checked
when the loader is built (:func:`check_loader`, run by PyG's ``NodeLoader`` /
``LinkLoader`` constructors once this module is imported: :func:`install`):

- workers are allowed where every read of the store is node-local: ``transport="auto"``
  with each group on one node, or ``"shm"``;
- they are refused where a read needs MPI (``transport="rma"``, a group spanning
  nodes), naming the thread-based alternative, :func:`ddstore.prefetch.prefetch`;
- and where the workers would not be forked (start method ``"spawn"`` /
  ``"forkserver"``: a new process inherits no mapping).

A worker sees the feature store as it was when it was forked: the attribute table is a
copy, and so are the mappings of its variables' windows.  Rows written in place later
(``update_tensor`` of the same layout, a put with an index) reach it through the shared
memory where this rank's rows are in shared memory (a group of several ranks on one
node); anything else the rank changes afterwards (an attribute put, removed or replaced,
e.g. ``update_tensor`` with another dtype, or rows written into the private memory of a
group of one rank) would be stale there.  So every :class:`~ddstore.pyg.FeatureStore`
keeps a version in a few shared bytes, raised by the rank at each such change, and a
worker whose copy is older refuses every read (:class:`DDStoreStateError`: recreate the
DataLoader, or use ``persistent_workers=False``, whose workers are forked anew each
epoch).  This matters for ``persistent_workers=True`` (workers kept across epochs) and
for a change made while an epoch is being loaded.

Seeded samplers (``seed=`` an integer) draw each batch from a stream keyed by the
batch's number.  A worker draws batch ``j`` of an iteration with the number the rank
itself would give it (``num_workers=0``): PyG's loaders hand batch ``j`` to worker
``j % num_workers`` and each worker takes its batches in order, so worker ``w``'s
``k``-th batch is ``w + k * num_workers`` after the count the worker inherited
(:class:`Calls`); the workers record their last number in a few shared bytes, and the
rank takes the highest before it forks the next iteration's workers.  So with the same
seed the batches are those of ``num_workers=0``, batch for batch (negative sampling of
``LinkNeighborLoader`` draws from torch's generator, which the DataLoader seeds per
worker: those differ).  With ``persistent_workers=True`` the workers keep counting into
the next epochs: the batches stay reproducible and never repeat a stream, but after
the first epoch they match ``num_workers=0`` only when the batches per epoch are a
multiple of ``num_workers``.
"""
import functools
import mmap
import multiprocessing
import os
import weakref

import numpy as np

from ..errors import DDStoreStateError, DDStoreValueError

__all__ = ["ALTERNATIVE", "reads_need_mpi", "refusal", "start_method", "check_loader",
           "Calls", "sync", "install"]

#: What to use instead of worker processes where they are refused.
ALTERNATIVE = ("use num_workers=0 and overlap sampling with training in a background "
               "thread: ddstore.prefetch.prefetch(loader, depth=2) (the C sampler and the "
               "store reads run without the GIL)")


def reads_need_mpi(store):
    """Whether a read of ``store`` may be an MPI call (``MPI_Get``): with
    ``transport="rma"``, or when some member of this rank's group is on another node."""
    return store.transport == "rma" or store.shm_peers < store.group_size - 1


def _why_mpi(store):
    """Why ``store``'s reads need MPI, in words."""
    if store.transport == "rma":
        return "transport='rma' (rows are read through MPI windows with MPI_Get)"
    remote = store.group_size - 1 - store.shm_peers
    return (f"{remote} of the {store.group_size - 1} other members of this rank's group "
            f"(width {store.group_size}) are on other nodes (their rows are read with "
            f"MPI_Get)")


def refusal(what, store):
    """The message for ``what`` (a loader, a sampler) that would read ``store`` from a
    forked process while its reads need MPI."""
    return (f"{what}: DataLoader worker processes are forked from this MPI rank and must "
            f"make no MPI call, but the store's reads need MPI: {_why_mpi(store)}. Worker "
            f"processes work where every read is node-local (transport='auto' with each "
            f"group on one node, or transport='shm'); here {ALTERNATIVE}")


def start_method(context):
    """The start method of a DataLoader's workers: its ``multiprocessing_context``'s, or
    (None) the default one of :mod:`multiprocessing`, which the DataLoader uses then."""
    if context is not None:
        return context.get_start_method()
    return (multiprocessing.get_start_method(allow_none=True)
            or multiprocessing.get_all_start_methods()[0])


def check_loader(loader, graph_store, samplers):
    """Refuse ``loader`` (PyG's ``NodeLoader`` / ``LinkLoader``, just built over
    ``graph_store`` and our ``samplers``) when its ``num_workers > 0`` cannot work: the
    graph store's or the loader's feature store's reads need MPI
    (:func:`reads_need_mpi`), or the workers would not be forked.  Otherwise let the
    seeded ``samplers`` share their batch count with the workers (:meth:`Calls.share`).
    Raises :class:`DDStoreValueError`; nothing with ``num_workers=0``."""
    n = loader.num_workers
    if not n:
        return
    what = f"{type(loader).__name__}(num_workers={n})"
    stores = [graph_store.store]
    data = getattr(loader, "data", None)
    from .feature_store import FeatureStore
    if isinstance(data, (tuple, list)) and data and isinstance(data[0], FeatureStore):
        stores.append(data[0].store)
    for store in stores:
        if reads_need_mpi(store):
            raise DDStoreValueError(refusal(what, store))
    method = start_method(loader.multiprocessing_context)
    if method != "fork":
        raise DDStoreValueError(
            f"{what}: the workers' start method is {method!r}, which starts a new "
            f"process: it inherits none of this rank's shared-memory windows (and the "
            f"sampler cannot be pickled to it); pass multiprocessing_context='fork' to "
            f"the loader (workers forked from this rank read the store by plain loads), "
            f"or {ALTERNATIVE}")
    for sampler in samplers:
        sampler.share_draws(n)


# samplers whose count the workers advance: synced by the rank before each fork
_SHARED = weakref.WeakSet()


class Calls:
    """How a sampler's count of draws (``sampler._calls``: the stream key of its
    ``c``-th draw is made from ``c``) goes on in DataLoader workers: :meth:`next` gives
    ``count + 1`` in the process that built the sampler, and in worker ``w`` of ``n``
    the number the rank would give the same draw with ``num_workers=0`` (see the module
    docstring): the worker's ``c``-th draw (from 0), of ``per`` per batch, is number
    ``(w + (c // per) * n) * per + c % per + 1`` after the count it inherited.  ``per``:
    the draws per batch (1 for :class:`NeighborSampler`; the hops for the inner samplers
    of :class:`BidirectionalNeighborSampler`)."""

    __slots__ = ("per", "_owner", "_slots", "_pid", "_base", "_local")

    def __init__(self, per=1):
        self.per = per
        self._owner = os.getpid()
        self._slots = None  # the last number of each worker id, shared with the workers
        self._pid, self._base, self._local = None, 0, 0

    def share(self, sampler, num_workers):
        """Before forking: room for ``num_workers`` workers of ``sampler`` to record
        their last number (an anonymous shared mapping, 8 bytes per worker, kept while
        the sampler is); the rank takes them up before each fork (:func:`sync`)."""
        if self._slots is None or self._slots.shape[0] < num_workers:
            slots = np.frombuffer(mmap.mmap(-1, 8 * num_workers), dtype=np.int64)
            if self._slots is not None:
                slots[:self._slots.shape[0]] = self._slots
            self._slots = slots
        _SHARED.add(sampler)

    def taken(self, count):
        """In the owner: ``count`` raised to the last number the workers drew."""
        if self._slots is not None and os.getpid() == self._owner:
            return max(count, int(self._slots.max()))
        return count

    def next(self, count):
        """The number of the draw after ``count`` (the sampler's count in this process,
        inherited by a worker)."""
        pid = os.getpid()
        if pid == self._owner:
            return self.taken(count) + 1
        import torch.utils.data
        info = torch.utils.data.get_worker_info()
        if info is None:  # forked otherwise: a count of its own
            return count + 1
        built = 0 if self._slots is None else self._slots.shape[0]
        if info.id >= built:  # (built with none: every worker drew the same keys)
            raise DDStoreStateError(
                f"DataLoader worker {info.id} of {info.num_workers}: a seeded sampler's "
                f"loader was built with fewer workers ({built}); set num_workers when "
                f"building the NeighborLoader / LinkNeighborLoader, not after (in the "
                f"workers of another DataLoader a seeded sampler would repeat its draws "
                f"in each: use seed=None there)")
        if self._pid != pid:  # this worker's first draw: from the count it inherited
            self._pid, self._base, self._local = pid, count, 0
        c, per = self._local, self.per
        call = self._base + (info.id + (c // per) * info.num_workers) * per + c % per + 1
        self._local += 1
        self._slots[info.id] = call
        return call


def sync(sampler):
    """In the rank: take up the draws ``sampler``'s workers made (what its next draw
    and the next fork do)."""
    sampler.take_worker_draws()


def _sync_before_fork():
    for sampler in list(_SHARED):
        sync(sampler)


os.register_at_fork(before=_sync_before_fork)


def _check_built(loader, sampler):
    """After PyG's loader constructors: :func:`check_loader` through the loader's
    sampler when it is ours (it has ``_check_loader``)."""
    check = getattr(sampler, "_check_loader", None)
    if check is not None:
        check(loader)


def install():
    """Make PyG's ``NodeLoader`` and ``LinkLoader`` (so ``NeighborLoader``,
    ``LinkNeighborLoader``) run our check when built over our samplers
    (:func:`ddstore._pyg_seams.after_loader_init`); loaders over other samplers are
    untouched."""
    from .._pyg_seams import after_loader_init
    after_loader_init(_check_built)
