"""Prefetch: read the next batches in a background thread while the caller computes.

``loader(..., prefetch=k)`` on :class:`~ddstore.graphs.GraphDataset` and on the window
datasets of :mod:`ddstore.spatiotemporal` wraps their ``DataLoader`` in a
:class:`PrefetchLoader`: one background thread per iteration runs the loader (sampler,
store read, collation) up to ``k`` batches ahead of the caller, and hands the batches over
in exactly the order the plain loader gives them.  The thread starts at the first
``next``, where the plain loader takes its epoch's order: a ``set_epoch`` between
``iter()`` and the first batch counts, as without read-ahead.

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
explicitly.  What the batches made ahead and dropped drew is given back: a seeded ddstore
``NeighborSampler``'s draws and the loader's own ``generator=`` (its shuffle; torch's
``RandomSampler`` draws a new permutation once its last index is taken), each where
nothing else drew from it meanwhile (:func:`_give_back`), so the next epoch is the one
the plain loader gives after the same ``break``.  Torch's global generator is left as
it is (the caller's loop draws from it too, by timing between the thread's draws):
batches that draw from it (PyG's negative sampling, a ``seed=None`` sampler) differ
from the plain loader's under read-ahead.  ``k`` is at most :data:`MAX_PREFETCH`.  An
iterator kept alive is safe too: freeing the store or removing a variable waits for the
batch being made (:mod:`ddstore._readers`), and the batches after it raise
(:class:`~ddstore.errors.DDStoreStateError` for a freed store) in their turn.
"""
import atexit
import collections
import queue
import threading
import time
import warnings
import weakref
from concurrent.futures import Future

from .errors import DDStoreValueError
from ._checks import is_int
from ._readers import ahead, reading

__all__ = ["PrefetchLoader", "PrefetchWarning", "check_prefetch", "epoch_samplers",
           "prefetch", "prefetch_depth", "MAX_PREFETCH", "draw_counter",
           "check_one_read_ahead", "wrapped_loaders", "BatchEpoch"]


class PrefetchWarning(RuntimeWarning):
    """Prefetch was asked for but the MPI thread level cannot support it: no prefetch."""


MAX_PREFETCH = 1024  # batches read ahead at most (each is held until it is taken)


def check_prefetch(prefetch, num_workers=0, what="loader", arg="prefetch"):
    """Validate ``prefetch`` (an integer in ``[0, MAX_PREFETCH]``, the argument named
    ``arg``) against ``num_workers`` (must be 0 with a read-ahead thread); returns it
    as int."""
    if not is_int(prefetch) or not 0 <= prefetch <= MAX_PREFETCH:
        raise DDStoreValueError(f"{what}: {arg}={prefetch!r} must be an integer in "
                                f"[0, {MAX_PREFETCH}] (batches read ahead in a background "
                                f"thread; 0 = off)")
    if prefetch and num_workers:
        raise DDStoreValueError(
            f"{what}: {arg}={prefetch} cannot be combined with num_workers="
            f"{num_workers!r}: worker processes make batches ahead themselves (forked "
            f"ones read the rows this node holds, PyG's loaders: ddstore.pyg.workers; a "
            f"read from another node needs MPI, which a worker may not call), and what "
            f"they made ahead of an epoch left early could not be given back; use "
            f"num_workers=0 (the read-ahead thread overlaps reading with compute) or "
            f"the workers alone")
    return int(prefetch)


def wrapped_loaders(loader):
    """``loader``, then the loader it wraps (``.loader``: our wrappers', PyG's
    ``PrefetchLoader``'s), and so on, 16 at most: where a wrapper's attributes are
    looked up through the loaders under it."""
    for _ in range(16):
        if loader is None:
            return
        yield loader
        loader = getattr(loader, "loader", None)


def check_one_read_ahead(loader, depth, what):
    """With ``depth > 0``, refuse a ``loader`` that already reads batches ahead (a
    wrapper of ours whose ``reads_ahead`` is true, itself or under its ``.loader``):
    the batches two read-aheads made for an epoch left early would not all be given
    back (the outer one's came from the inner one, whose sampler count had moved on),
    so the next epoch of a seeded sampler would differ from the plain loader's."""
    for inner in wrapped_loaders(loader if depth else None):
        if getattr(inner, "reads_ahead", False) is True:
            raise DDStoreValueError(
                f"{what}: the loader already reads batches ahead ({inner!r}); read ahead "
                f"in one wrapper only: prefetch=0 here, or give the depth to that one")


def needs_thread_multiple(store):
    """Whether reads from ``store`` make MPI calls (some group member is read with
    ``MPI_Get`` rather than from node-local shared memory)."""
    return store.shm_peers < store.group_size - 1


class BatchEpoch:
    """One epoch of a loader's own iterator: a single-process ``DataLoader`` whose every
    batch is one call ``read(indices)`` on the next item of ``batches`` (the batch
    sampler's index lists, or slices of an epoch's order) gives the batches torch's
    iterator gives, without its fetcher, collate call and checks on every batch (15 us
    to 185 us a batch).  As torch's iterator: ``len`` the epoch's ``length`` batches,
    each ``next`` a profiler scope ``enumerate(DataLoader)#...``, and one number drawn
    from ``generator`` (torch's global one when None) as the epoch begins, the draw
    torch makes for its workers' base seed, so a loop's random stream is the one it has
    over a plain ``DataLoader``."""
    __slots__ = ("_read", "_batches", "_len")

    def __init__(self, read, batches, length, generator=None):
        import torch
        self._read, self._batches, self._len = read, batches, length
        torch.empty((), dtype=torch.int64).random_(generator=generator)

    def __iter__(self):
        return self

    def __len__(self):
        return self._len

    def __next__(self):
        from torch.autograd.profiler import record_function
        with record_function(_EPOCH_SCOPE):  # (as torch's iterator records a batch)
            return self._read(next(self._batches))


_EPOCH_SCOPE = f"enumerate(DataLoader)#{BatchEpoch.__name__}.__next__"


def prefetch_depth(store, prefetch, what="loader", arg="prefetch"):
    """The prefetch depth that is safe on this rank: ``prefetch``, or 0 (with a
    :class:`PrefetchWarning` naming ``what`` and its argument ``arg``) when reads need
    ``MPI_THREAD_MULTIPLE`` and the MPI was initialised with less."""
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
        f"{what}: {arg}={prefetch} needs MPI_THREAD_MULTIPLE on rank {store.rank} "
        f"(its reads from {remote} group member{'s' if remote != 1 else ''} use "
        f"MPI_Get) but MPI was initialised with {names.get(level, level)}; loading "
        f"without prefetch (initialise MPI with THREAD_MULTIPLE, mpi4py's default, to "
        f"prefetch)", PrefetchWarning, stacklevel=3)
    return 0


def draw_counter(loader):
    """The random streams of ``loader`` that a read-ahead must give back when the
    caller stops early (:class:`Streams`), or None when it has none: the draw count of
    a ddstore :class:`~ddstore.pyg.NeighborSampler` behind it (its ``draws``) and the
    ``generator=`` of its shuffle, looked up through wrappers (``.loader``)."""
    counter = generator = None
    for inner in wrapped_loaders(loader):
        for owner in (getattr(inner, "node_sampler", None),
                      getattr(inner, "link_sampler", None)):
            if counter is None and owner is not None and hasattr(type(owner), "draws"):
                counter = owner
        # the generator the thread draws from: the shuffle's (its sampler's), before the
        # loader's own (which a DataLoader draws from in the caller's thread, at iter())
        for s in (getattr(inner, "sampler", None),
                  getattr(getattr(inner, "batch_sampler", None), "sampler", None),
                  getattr(getattr(inner, "sampler", None), "sampler", None),
                  getattr(inner, "batch_sampler", None), inner):
            g = getattr(s, "generator", None)
            if generator is None and g is not None and hasattr(g, "get_state"):
                generator = g
    return None if counter is None and generator is None else Streams(counter, generator)


class Streams:
    """What the batches of a loader draw from that belongs to the loader, so that a
    read-ahead can give back what the batches it dropped drew: a sampler's draw count
    (``counter.draws``, or None) and the loader's own ``generator`` (or None).  Torch's
    global generator is not among them: the caller's loop draws from it too (dropout),
    while the thread makes batches, and no state of it tells whose draw it was, so
    setting it back could undo the caller's draws."""
    __slots__ = ("counter", "generator")

    def __init__(self, counter, generator):
        self.counter, self.generator = counter, generator

    def states(self):
        """``(draw count or None, generator state or None)``."""
        return (None if self.counter is None else self.counter.draws,
                None if self.generator is None else self.generator.get_state())

    def restore(self, k, state):
        if k == 0:
            self.counter.draws = state
        else:
            self.generator.set_state(state)


_NONE = Streams(None, None)


def _same(a, b):
    """Whether two states of one stream (counts, or generator state tensors) are equal."""
    import torch  # (not at import: pyddstore uses this module without torch)
    if a is None or b is None:
        return False
    return a == b if isinstance(a, int) else torch.equal(a, b)


class _Draws:
    """Where the random streams (:class:`Streams`) stood before and after one batch
    made ahead."""
    __slots__ = ("before", "after")

    def __init__(self, streams):
        self.before = streams.states()
        self.after = None


class _Worker:
    """One read-ahead thread: ``submit(fn, *args)`` -> a ``Future``, run in order;
    ``shutdown(wait, cancel_futures)`` as ``ThreadPoolExecutor``'s.  A daemon thread:
    Python joins a ``ThreadPoolExecutor``'s threads at exit before any ``atexit``
    handler, so a batch still being made (a ``__getitem__`` that blocks) held the exit
    without bound; this one the store's bounded exit (``DDSTORE_EXIT_TIMEOUT``, which
    waits for the reads in flight: :mod:`ddstore._readers`) may give up on."""

    def __init__(self):
        self._tasks = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="ddstore-prefetch",
                                        daemon=True)
        if not _STOP_REGISTERED:  # (registered after the stores' exit: run before it)
            _STOP_REGISTERED.append(atexit.register(_stop_workers))
        _WORKERS.add(self)
        self._thread.start()

    def _run(self):
        while True:
            task = self._tasks.get()
            if task is None:
                return
            future, fn, args = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 -- handed to the caller
                future.set_exception(exc)
            del task, future  # (the batch is the caller's now)

    def submit(self, fn, *args):
        future = Future()
        self._tasks.put((future, fn, args))
        return future

    def shutdown(self, wait=True, cancel_futures=False):
        if cancel_futures:  # what is queued and not begun
            pending = []
            while True:
                try:
                    pending.append(self._tasks.get_nowait())
                except queue.Empty:
                    break
            for task in pending:
                if task is not None:
                    task[0].cancel()
        self._tasks.put(None)
        if wait and self._thread is not threading.current_thread():
            self._thread.join()


_WORKERS = weakref.WeakSet()  # this process's read-ahead threads (their _Worker)
_STOP_REGISTERED = []  # _stop_workers, once registered with atexit
#: Seconds the exit waits, in all, for the batches the read-ahead threads are making.
STOP_WAIT = 10.0


def _stop_workers():
    """At a clean exit, before the stores are freed: every read-ahead thread still
    running (an iterator kept to the end of the script) drops the batches queued and
    ends the one it is making, waited for :data:`STOP_WAIT` seconds in all (a batch that
    blocks longer does not hold the exit).  A daemon thread still making a batch when
    the interpreter finalises is ended by Python inside torch's C++ frames, which ended
    the process with SIGABRT ("terminate called without an active exception")."""
    workers = list(_WORKERS)
    for w in workers:
        w.shutdown(wait=False, cancel_futures=True)
    end = time.monotonic() + STOP_WAIT
    for w in workers:
        w._thread.join(max(0.0, end - time.monotonic()))


def _give_back(chain, streams):
    """Set each stream back to where it stood before ``chain[0]`` (the first batch made
    and not used, then every one made after it), where only those batches drew from it
    since: each batch began where the one before it ended, and the stream is still where
    the last one left it.  A stream that something else drew from meanwhile (another
    iterator over the same sampler, which ran an epoch while this one was kept) is left
    as it is: setting it back would undo those draws."""
    if not chain or chain[-1].after is None:
        return
    now = streams.states()
    for k in range(2):
        if not _same(now[k], chain[-1].after[k]):
            continue
        if all(_same(b.before[k], a.after[k]) for a, b in zip(chain, chain[1:])):
            if not _same(chain[0].before[k], now[k]):
                streams.restore(k, chain[0].before[k])


def _step(iterator, streams, nested):
    """One batch from ``iterator`` in the background thread: ``(ended, batch, draws)``,
    ``draws`` a :class:`_Draws`.  A module function so that the thread holds no
    reference to the prefetch iterator.  Made inside :func:`ddstore._readers.reading`:
    a free or a removal of a variable by the caller's thread waits for it, and the
    batches after find what it removed gone.  ``nested``: asked for from inside another
    batch, which waits for it (it may start while a removal waits)."""
    draws = _Draws(streams)
    try:
        with reading(nested):
            return False, next(iterator), draws
    except StopIteration:
        return True, None, draws
    finally:
        draws.after = streams.states()


class PrefetchIter:
    """Up to ``depth`` batches of ``iterator`` made ahead by one background thread.
    ``streams``: what the batches draw from besides torch's global generator
    (:func:`draw_counter`: a sampler's draw count, the loader's ``generator``): when the
    iteration is closed before its end, each stream that only the dropped batches drew
    from since is set back to where the batches the caller took end
    (:func:`_give_back`), so the batches made ahead and dropped leave no trace (the next
    epoch is the plain loader's, batch for batch).  ``holds_end``: the caller looks one
    batch ahead of its own caller (:class:`~ddstore.device.DevicePrefetcher`), so the
    end it takes may not be passed on: what making the end drew (torch's
    ``RandomSampler`` draws the next permutation there) is given back at a
    :meth:`close` that says the end was not seen."""

    def __init__(self, iterator, depth, streams=None, holds_end=False):
        self._it = iterator
        self._pool = _Worker()
        self._pending = collections.deque()
        # the first batches are asked for at the first next, not here: a loader takes
        # its epoch's order there (a set_epoch between iter() and next() counts)
        self._depth = depth
        self._streams = _NONE if streams is None else streams
        self._taken = 0  # batches handed to the caller
        self._handed = collections.deque(maxlen=2)  # their _Draws (the last two)
        self._ended = False
        self._holds_end = holds_end
        self._end = None  # the _Draws of the end, while it may be given back

    def __iter__(self):
        return self

    def __len__(self):
        """The epoch's batches, as the iterator read ahead says (torch's iterators and
        :class:`BatchEpoch` have it; a plain generator has not: ``TypeError``)."""
        return len(self._it)

    def __bool__(self):  # (true, as any iterator: not its len)
        return True

    def __next__(self):
        if self._depth:
            depth, self._depth = self._depth, 0
            if self._pool is not None:
                for _ in range(depth):
                    self._pending.append(self._pool.submit(_step, self._it,
                                                           self._streams, ahead()))
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
            if self._holds_end:  # unless the caller does not pass the end on
                self._end = draws
                self._pool.shutdown(wait=True, cancel_futures=True)
            else:
                self.close()
            raise StopIteration
        self._pending.append(self._pool.submit(_step, self._it, self._streams, ahead()))
        self._taken += 1
        self._handed.append(draws)
        return batch

    def close(self, taken=None, end_seen=True):
        """Stop prefetching: cancel queued batches and wait for the read in flight.
        ``taken``: how many of the batches handed out the caller used (default: all;
        :class:`~ddstore.device.DevicePrefetcher` holds one more); the random streams
        are set back to where they stood before the first batch it did not use.
        ``end_seen=False`` (with ``holds_end``): the end this iterator raised was not
        passed on, so what making it drew is given back too."""
        pool = self._pool
        if pool is None:
            return
        self._pool = None
        pending, self._pending = list(self._pending), collections.deque()
        pool.shutdown(wait=True, cancel_futures=True)
        streams, self._streams = self._streams, None
        unused = 0 if taken is None else self._taken - taken
        handed = list(self._handed)[-unused:] if 0 < unused <= len(self._handed) else []
        if self._ended:
            end, self._end = self._end, None
            if end is not None and not end_seen:
                _give_back(handed + [end], streams)
            return
        made = [f.result()[2] for f in pending
                if f.done() and not f.cancelled() and f.exception() is None]
        _give_back(handed + made, streams)  # handed out and not used, then made ahead

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


def epoch_samplers(loader):
    """The samplers of ``loader`` that take ``set_epoch``: its ``sampler`` and
    ``batch_sampler``, and the sampler inside either where it is a batch sampler
    (``BatchSampler(DistributedSampler(...))`` given as a ``DataLoader``'s ``sampler``,
    as the graph loader does), each once; where it has none, those of the loader a
    wrapper holds in ``.loader`` (PyG's ``PrefetchLoader``, ours), at any depth."""
    out = []
    for inner in wrapped_loaders(loader):
        for s in (getattr(inner, "sampler", None), getattr(inner, "batch_sampler", None)):
            for t in (s, getattr(s, "sampler", None)):
                if hasattr(t, "set_epoch") and all(t is not o for o in out):
                    out.append(t)
        if out:
            break
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
    wrapped loader's (:class:`WrappedLoader`).  ``store``: the store the loader reads
    (found by itself, :func:`store_of`, where it can be): a rank whose reads need
    ``MPI_THREAD_MULTIPLE`` that MPI does not provide reads without a thread, with a
    :class:`PrefetchWarning` (what :func:`prefetch` does)."""

    def __init__(self, loader, depth, store=None):
        self.depth = check_prefetch(depth, getattr(loader, "num_workers", 0),
                                    "PrefetchLoader", "depth")
        store = store if store is not None or not self.depth else store_of(loader)
        if store is not None:  # (the one fallback of every read-ahead thread)
            self.depth = prefetch_depth(store, self.depth, "PrefetchLoader", "depth")
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
    may use forked worker processes instead, :mod:`ddstore.pyg.workers`; a worker reads
    the rows its node holds, and is refused the others).  Batches come in exactly the
    order of ``loader`` itself, and they are the same batches when their draws are the
    sampler's ``seed=`` and the loader's ``generator=``; draws from torch's global
    generator (PyG's negative sampling, a ``seed=None`` sampler) are made ahead by the
    thread, so the loop's own draws (dropout) interleave with them by timing.  An epoch
    left early gives back the sampler's and the loader generator's draws of the batches
    made ahead (:func:`_give_back`).

    ``store``: the store the loader reads (found by itself for PyG loaders over a
    ddstore sampler); with it, a rank whose reads need ``MPI_THREAD_MULTIPLE`` that MPI
    does not provide falls back to no prefetch with a :class:`PrefetchWarning`."""
    depth = check_prefetch(depth, getattr(loader, "num_workers", 0), "prefetch", "depth")
    store = store if store is not None else store_of(loader)
    if store is not None:  # (told naming this call; PrefetchLoader's then finds 0)
        depth = prefetch_depth(store, depth, "prefetch", "depth")
    return PrefetchLoader(loader, depth, store)
