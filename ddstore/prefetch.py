"""Prefetch: read the next batches in a background thread while the caller computes.

``loader(..., prefetch=k)`` on :class:`~ddstore.graphs.GraphDataset` and on the window
datasets of :mod:`ddstore.spatiotemporal` wraps their ``DataLoader`` in a
:class:`PrefetchLoader`: one background thread per iteration runs the loader (sampler,
store read, collation) up to ``k`` batches ahead of the caller, and hands the batches over
in exactly the order the plain loader gives them.

Why a thread helps: the store read (``dds_read`` through cffi) runs without the GIL, so
the caller's model step (GPU work, or torch operations that release the GIL) overlaps the
next read.  Pure-Python work on either side still takes turns on the GIL.

What the MPI must allow:

- Reads from group members on the same node are plain loads from MPI-3 shared memory:
  no MPI call, so they are safe from a second thread at any MPI thread level.
- Reads from other members use ``MPI_Get``/``MPI_Win_flush`` from the background thread
  while the caller's thread may make its own MPI calls (an allreduce of gradients), which
  needs ``MPI_THREAD_MULTIPLE`` (what mpi4py asks for by default).  When such reads are
  needed (``store.shm_peers < store.group_size - 1``, e.g. ``transport="rma"`` or a group
  spanning nodes) and ``MPI.Query_thread()`` is lower, the loader falls back to no
  prefetch and emits a :class:`PrefetchWarning` (on each rank that falls back).

Errors: an exception raised while producing a batch in the background (a bad index from a
sampler, a failed read) is re-raised in the caller's thread by the ``__next__`` that
would have returned that batch; the iteration then ends.  The C core keeps one error
message buffer per store, so if the caller's thread reads from the same store at the same
moment and both fail, one message may be overwritten by the other (the exception types
stay right).

Ending early: leaving a ``for`` loop over a prefetching loader (``break``, an exception)
drops its iterator, which waits for the reads in flight (at most ``k``) before it goes, so
the store can be freed right after the loop.  ``close()`` on the iterator does the same
explicitly.  A seeded ddstore ``NeighborSampler`` behind the loader gets back the draws
of the batches made ahead and dropped (its ``draws``), so the next epoch is the one the
plain loader gives after the same ``break``.  ``k`` is at most :data:`MAX_PREFETCH`.  An
iterator kept alive is safe too: freeing the store or removing a variable waits for the
batch being made (:mod:`ddstore._readers`), and the batches after it raise
(:class:`~ddstore.errors.DDStoreStateError` for a freed store) in their turn.
"""
import collections
import warnings
from concurrent.futures import ThreadPoolExecutor

from .errors import DDStoreValueError
from ._checks import is_int
from ._readers import reading

__all__ = ["PrefetchLoader", "PrefetchWarning", "check_prefetch", "epoch_samplers",
           "prefetch", "prefetch_depth", "MAX_PREFETCH", "draw_counter",
           "check_one_read_ahead"]


class PrefetchWarning(RuntimeWarning):
    """Prefetch was asked for but the MPI thread level cannot support it: no prefetch."""


MAX_PREFETCH = 1024  # batches read ahead at most (each is held until it is taken)


def check_prefetch(prefetch, num_workers=0, what="loader"):
    """Validate ``prefetch`` (an integer in ``[0, MAX_PREFETCH]``) against
    ``num_workers`` (must be 0 with prefetch: worker processes cannot use the MPI
    windows); returns it as int."""
    if not is_int(prefetch) or not 0 <= prefetch <= MAX_PREFETCH:
        raise DDStoreValueError(f"{what}: prefetch={prefetch!r} must be an integer in "
                                f"[0, {MAX_PREFETCH}] (batches read ahead in a background "
                                f"thread; 0 = off)")
    if prefetch and num_workers:
        raise DDStoreValueError(f"{what}: prefetch={prefetch} cannot be combined with "
                                f"num_workers={num_workers!r}: DataLoader worker processes "
                                f"cannot read the store's MPI windows; use num_workers=0 "
                                f"(prefetch already overlaps reading with compute)")
    return int(prefetch)


def check_one_read_ahead(loader, depth, what):
    """With ``depth > 0``, refuse a ``loader`` that already reads batches ahead (a
    wrapper of ours whose ``reads_ahead`` is true, itself or under its ``.loader``):
    the batches two read-aheads made for an epoch left early would not all be given
    back (the outer one's came from the inner one, whose sampler count had moved on),
    so the next epoch of a seeded sampler would differ from the plain loader's."""
    inner = loader if depth else None
    for _ in range(16):
        if inner is None:
            return
        if getattr(inner, "reads_ahead", False) is True:
            raise DDStoreValueError(
                f"{what}: the loader already reads batches ahead ({inner!r}); read ahead "
                f"in one wrapper only: prefetch=0 here, or give the depth to that one")
        inner = getattr(inner, "loader", None)


def needs_thread_multiple(store):
    """Whether reads from ``store`` make MPI calls (some group member is read with
    ``MPI_Get`` rather than from node-local shared memory)."""
    return store.shm_peers < store.group_size - 1


def prefetch_depth(store, prefetch, what="loader"):
    """The prefetch depth that is safe on this rank: ``prefetch``, or 0 (with a
    :class:`PrefetchWarning`) when reads need ``MPI_THREAD_MULTIPLE`` and the MPI was
    initialised with less."""
    if not prefetch or not needs_thread_multiple(store):
        return prefetch
    from mpi4py import MPI
    level = MPI.Query_thread()
    if level >= MPI.THREAD_MULTIPLE:
        return prefetch
    names = {MPI.THREAD_SINGLE: "MPI_THREAD_SINGLE", MPI.THREAD_FUNNELED:
             "MPI_THREAD_FUNNELED", MPI.THREAD_SERIALIZED: "MPI_THREAD_SERIALIZED"}
    remote = store.group_size - 1 - store.shm_peers
    warnings.warn(
        f"{what}: prefetch={prefetch} needs MPI_THREAD_MULTIPLE on rank {store.rank} "
        f"(its reads from {remote} group member{'s' if remote != 1 else ''} use "
        f"MPI_Get) but MPI was initialised with {names.get(level, level)}; loading "
        f"without prefetch (initialise MPI with THREAD_MULTIPLE, mpi4py's default, to "
        f"prefetch)", PrefetchWarning, stacklevel=3)
    return 0


def draw_counter(loader):
    """The sampler of ``loader`` whose draws a read-ahead must give back when the caller
    stops early (a ddstore :class:`~ddstore.pyg.NeighborSampler`: its ``draws``), or
    None."""
    for owner in (getattr(loader, "node_sampler", None),
                  getattr(loader, "link_sampler", None)):
        if owner is not None and hasattr(type(owner), "draws"):
            return owner
    return None


class _Draws:
    """Where the random draws stood before one batch made ahead: the sampler's count
    (``counter.draws``, or None) and torch's global generator state (what PyG's
    negative sampling and a ``seed=None`` sampler draw from), and torch's state after
    it (to tell, at the close, whether anything else drew since)."""
    __slots__ = ("count", "before", "after")

    def __init__(self, counter):
        import torch  # (not at import: pyddstore uses this module without torch)
        self.count = None if counter is None else counter.draws
        self.before = torch.get_rng_state()
        self.after = None

    def give_back(self, counter, last):
        """Set the draws back to before this batch: the sampler's count, and torch's
        generator when nothing drew from it since the thread's ``last`` batch (the
        caller's loop drawing too, e.g. dropout, makes them interleave by timing: then
        it is left as it is)."""
        import torch
        if counter is not None and self.count is not None:
            counter.draws = self.count
        if last is not None and last.after is not None and \
                torch.equal(torch.get_rng_state(), last.after):
            torch.set_rng_state(self.before)


def _step(iterator, counter):
    """One batch from ``iterator`` in the background thread: ``(ended, batch, draws)``,
    ``draws`` a :class:`_Draws`.  A module function so that the thread holds no
    reference to the prefetch iterator.  Made inside :func:`ddstore._readers.reading`:
    a free or a removal of a variable by the caller's thread waits for it, and the
    batches after find what it removed gone."""
    draws = _Draws(counter)
    try:
        with reading():
            return False, next(iterator), draws
    except StopIteration:
        return True, None, draws
    finally:
        import torch
        draws.after = torch.get_rng_state()


class PrefetchIter:
    """Up to ``depth`` batches of ``iterator`` made ahead by one background thread.
    ``counter``: the sampler whose draws the batches make (:func:`draw_counter`): when
    the iteration is closed before its end, its ``draws`` are set back to where the
    batches the caller took end, and so is torch's global generator when only the
    batches drew from it, so the batches made ahead and dropped leave no trace (the
    next epoch is the plain loader's, batch for batch)."""

    def __init__(self, iterator, depth, counter=None):
        self._it = iterator
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ddstore-prefetch")
        self._pending = collections.deque()
        self._counter = counter
        self._taken = 0  # batches handed to the caller
        self._handed = collections.deque(maxlen=2)  # their _Draws (the last two)
        self._ended = False
        for _ in range(depth):
            self._pending.append(self._pool.submit(_step, self._it, counter))

    def __iter__(self):
        return self

    def __next__(self):
        if not self._pending:
            raise StopIteration
        future = self._pending.popleft()
        try:
            ended, batch, draws = future.result()
        except BaseException:
            self.close()  # the error ends the iteration; no read is left running
            raise
        if ended:
            self._ended = True  # the whole epoch was taken: nothing to give back
            self.close()
            raise StopIteration
        self._pending.append(self._pool.submit(_step, self._it, self._counter))
        self._taken += 1
        self._handed.append(draws)
        return batch

    def close(self, taken=None):
        """Stop prefetching: cancel queued batches and wait for the read in flight.
        ``taken``: how many of the batches handed out the caller used (default: all;
        :class:`~ddstore.device.DevicePrefetcher` holds one more); the sampler's draws
        are set back to the count before the first batch it did not use."""
        pool = self._pool
        if pool is None:
            return
        self._pool = None
        pending, self._pending = list(self._pending), collections.deque()
        pool.shutdown(wait=True, cancel_futures=True)
        counter, self._counter = self._counter, None
        if self._ended:
            return
        made = [f.result()[2] for f in pending
                if f.done() and not f.cancelled() and f.exception() is None]
        last = made[-1] if made else (self._handed[-1] if self._handed else None)
        unused = 0 if taken is None else self._taken - taken
        if 0 < unused <= len(self._handed):  # handed out, not used: the first of them
            self._handed[-unused].give_back(counter, last)
        elif made:  # made ahead and dropped: back to before the first
            made[0].give_back(counter, last)

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


def epoch_samplers(loader):
    """The samplers of ``loader`` that take ``set_epoch``: its ``sampler`` and
    ``batch_sampler``, and the sampler inside either where it is a batch sampler
    (``BatchSampler(DistributedSampler(...))`` given as a ``DataLoader``'s ``sampler``,
    as the graph loader does), each once."""
    out = []
    for s in (getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
        for t in (s, getattr(s, "sampler", None)):
            if hasattr(t, "set_epoch") and all(t is not o for o in out):
                out.append(t)
    return out


class WrappedLoader:
    """The part of a loader wrapper that looks like the loader it wraps (``self.loader``):
    ``sampler``, ``batch_sampler``, ``dataset`` and ``len()`` are the wrapped loader's,
    and :meth:`set_epoch` forwards to it, so :func:`~ddstore.spatiotemporal.set_epoch`
    and a ``DistributedSampler``'s epochs work unchanged through the wrapper."""
    loader = None

    @property
    def sampler(self):
        return getattr(self.loader, "sampler", None)

    @property
    def batch_sampler(self):
        return getattr(self.loader, "batch_sampler", None)

    @property
    def dataset(self):
        return getattr(self.loader, "dataset", None)

    def set_epoch(self, epoch):
        """Forward ``set_epoch`` to the loader, or to its samplers
        (:func:`epoch_samplers`)."""
        if hasattr(self.loader, "set_epoch"):
            self.loader.set_epoch(epoch)
            return
        for s in epoch_samplers(self):
            s.set_epoch(epoch)

    def __len__(self):
        return len(self.loader)


class PrefetchLoader(WrappedLoader):
    """An iterable over ``loader`` that produces up to ``depth`` batches ahead in a
    background thread (see the module notes).  Batches come in the same order as from
    ``loader`` itself; ``sampler``, ``batch_sampler``, ``dataset`` and ``len()`` are the
    wrapped loader's (:class:`WrappedLoader`)."""

    def __init__(self, loader, depth):
        self.depth = check_prefetch(depth, getattr(loader, "num_workers", 0),
                                    "PrefetchLoader")
        check_one_read_ahead(loader, self.depth, "PrefetchLoader")
        self.loader = loader

    @property
    def reads_ahead(self):
        """Whether iterating this makes batches ahead of the caller (a depth > 0)."""
        return self.depth > 0

    def __iter__(self):
        if self.depth <= 0:
            return iter(self.loader)
        return PrefetchIter(iter(self.loader), self.depth, draw_counter(self.loader))

    def __repr__(self):
        return f"PrefetchLoader(depth={self.depth}, loader={self.loader!r})"


def store_of(loader):
    """The DDStore a loader reads, or None: PyG's NodeLoader / LinkLoader over a ddstore
    sampler, a loader (or a wrapper of one: ``.loader``) with a ``store`` or a ``graph``
    on the store (:class:`~ddstore.temporal.EdgeBatches`), or whose dataset, or the
    dataset that dataset is a view of (a window split), has one."""
    owners, seen = [loader], set()
    while owners:
        owner = owners.pop(0)
        if owner is None or id(owner) in seen or len(seen) > 16:
            continue
        seen.add(id(owner))
        for store in (getattr(owner, "store", None),
                      getattr(getattr(owner, "graph", None), "store", None)):
            if store is not None and hasattr(store, "shm_peers"):
                return store
        owners += [getattr(owner, a, None) for a in ("node_sampler", "link_sampler",
                                                     "loader", "dataset")]
    return None


def prefetch(loader, depth=2, store=None):
    """Wrap any loader (PyG's ``NeighborLoader`` / ``LinkNeighborLoader`` over a
    :class:`ddstore.pyg.NeighborSampler`, or a torch ``DataLoader`` over the store) so
    that one background thread produces up to ``depth`` batches ahead: the supported way
    to overlap sampling and feature reads with training, whatever the transport (a
    loader with ``num_workers > 0`` is refused here: PyG's loaders over a node-local store
    may use forked worker processes instead, :mod:`ddstore.pyg.workers`; elsewhere they
    cannot read the store).  Batches come in exactly the
    order of ``loader`` itself, and they are the same batches when their draws are the
    sampler's ``seed=``, or torch's global generator (PyG's negative sampling, a
    ``seed=None`` sampler) with nothing else drawing from it during the loop: the thread
    draws ahead, so the loop's own draws (dropout) would interleave with its draws by
    timing.  An epoch left early gives back the draws of the batches made ahead.

    ``store``: the store the loader reads (found by itself for PyG loaders over a
    ddstore sampler); with it, a rank whose reads need ``MPI_THREAD_MULTIPLE`` that MPI
    does not provide falls back to no prefetch with a :class:`PrefetchWarning`."""
    depth = check_prefetch(depth, getattr(loader, "num_workers", 0), "prefetch")
    store = store if store is not None else store_of(loader)
    if store is not None:
        depth = prefetch_depth(store, depth, "prefetch")
    return PrefetchLoader(loader, depth)
