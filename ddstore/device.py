"""The pipeline from the store to the device: read ahead, stage, copy while the model steps.

:class:`DevicePrefetcher` wraps any loader of the store (the window loaders of
:mod:`ddstore.spatiotemporal`, :meth:`GraphDataset.loader
<ddstore.graphs.GraphDataset.loader>`, PyG's ``NeighborLoader`` / ``LinkNeighborLoader``
over a :class:`ddstore.pyg.NeighborSampler`, :class:`ddstore.temporal.EdgeBatches`) and
yields the same batches, in the same order, on ``device``::

    for x, y in DevicePrefetcher(loader, "cuda", prefetch=2):
        loss = model(x, y)  # the copy of the next batch runs meanwhile

What happens to batch ``i``:

1. **Read ahead** (``prefetch=k >= 1``): one background thread runs the loader (sampler,
   store read, collation) ``k`` batches ahead of the batch being copied (step 3), so up
   to ``k + 1`` batches ahead of the caller, exactly as :mod:`ddstore.prefetch` does
   (starting at the first ``next``), with its rule for the MPI thread level: reads from
   node-local members are plain loads and safe from a thread at any level, reads that
   use ``MPI_Get`` need ``MPI_THREAD_MULTIPLE`` (``tests/mpi/core_threads.py`` checks
   concurrent reads from several threads byte for byte), and a rank without it falls
   back to ``k = 0`` with a :class:`~ddstore.prefetch.PrefetchWarning`.
2. **Stage**: in the same thread, every tensor of the batch (and every numpy array,
   which becomes a tensor) is copied into a staging buffer: one flat buffer per dtype
   per slot, **pinned** (page-locked) when the device is CUDA, allocated once and grown
   only when a batch is larger than any before (to 1.5x), never per batch.  There are
   ``k + 2`` slots, used in turn.  A loader that can read straight into staging (the
   window loaders: ``read_ranges(..., out=)``) does so and the copy is skipped.  A
   :class:`DeviceRows` leaf (the window loader's ``direct=True``) skips the staging
   altogether: its rows are copied to a new device buffer right here, on the side
   stream, from the store's memory page-locked in place.
3. **Copy**: in the caller's thread, one copy per dtype from the slot to a new device
   buffer, ``non_blocking=True`` on a side ``torch.cuda.Stream``; an event is recorded
   after it.  With ``k >= 1`` batch ``i + 1`` is copied before batch ``i`` is returned,
   so that copy overlaps the caller's step on batch ``i``.
4. **Hand over**: the caller's current stream waits on batch ``i``'s event (no host
   synchronisation), and every device buffer is marked with ``record_stream`` for the
   caller's stream, so the caching allocator never reuses it early.  A slot is written
   again only after the event of its last copy has completed.

The batch's tensors are views of one device buffer per dtype (contiguous, their own
shapes); containers are rebuilt: tensors, numpy arrays, tuples (namedtuples too),
lists, dicts, and PyG ``Data`` / ``Batch`` / ``HeteroData`` (a shallow copy of the
object, its tensors replaced through its ``apply``; the loader's object is not
changed).  Anything else passes through unchanged; tensors already on ``device``
too, and sparse tensors and tensor subclasses (PyG's ``EdgeIndex`` and ``Index``,
whose sizes and sort order ride on the object) are moved with their own
``.to(device)``; a ``torch.nn.Parameter`` is staged as data (a plain tensor).

With ``device="cpu"`` the same staging runs (buffers reused, copies ordinary, no
streams): this is how the logic is tested without a GPU.  The loaders of the store wrap
with it when a ``device=`` is given to ``loader`` (``"cpu"`` included) or the dataset's
own device is not the CPU; by default CPU training keeps its path.

Pinned memory it costs: ``k + 2`` slots, each as large as the largest batch seen
(rounded up by at most 1.5x on growth), per dtype: for windows of 535 KB, batch 64,
``k = 2``, about 4 x 34 MB = 137 MB of pinned host memory.  :attr:`StagingPool.nbytes`
says what it holds.

Errors: an exception in the loader (or in staging) is raised by the ``next`` that would
have returned that batch; the read-ahead thread is then joined and the iteration ends.
A ``KeyboardInterrupt`` or ``SystemExit`` raised while the next batch is made ahead
(``prefetch >= 1``) comes out at once, from the ``next`` before (its batch is lost): a
Ctrl-C is not held back until the model step that batch would feed.
Leaving a loop early (``break``) drops the iterator, which joins the thread.

PyG's own ``torch_geometric.loader.PrefetchLoader`` works over these loaders too (it
pins each batch and copies it on its own stream, without reusing buffers).  It takes
one batch from the loader ahead of the caller, to copy it meanwhile, and gives nothing
back: after a ``break`` over a seeded :class:`ddstore.pyg.NeighborSampler` the next
epoch is then one batch's draws further on than the plain loader's (this class gives
such draws back).
"""
import copy
import ctypes
import math

import numpy as np
import torch

from ._pins import clear_cuda_error, cuda_runtime
from .errors import DDStoreError, DDStoreValueError
from .prefetch import WrappedLoader

__all__ = ["DevicePrefetcher", "DeviceRows", "StagingPool", "StagedReads",
           "device_loader"]

_ALIGN_BYTES = 256  # every staged tensor starts at a multiple of this in its buffer


def _is_pyg(obj):
    """A PyG ``Data`` / ``Batch`` / ``HeteroData`` (anything of PyG's ``BaseData``)."""
    try:
        from torch_geometric.data.data import BaseData
    except ImportError:  # pragma: no cover - PyG not installed
        return False
    return isinstance(obj, BaseData)


def _map(obj, fn):
    """``obj`` with every tensor / numpy array leaf ``t`` replaced by ``fn(t)``, in a
    fixed order (the same for the same structure)."""
    if isinstance(obj, (torch.Tensor, np.ndarray, DeviceRows)):
        return fn(obj)
    if isinstance(obj, tuple):
        items = [_map(v, fn) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, list):
        items = [_map(v, fn) for v in obj]
        return items if type(obj) is list else _refilled(obj, items, items)
    if isinstance(obj, dict):
        items = [(k, _map(v, fn)) for k, v in obj.items()]
        return dict(items) if type(obj) is dict else _refilled(obj, items, dict(items))
    if _is_pyg(obj):  # its apply also calls fn on other values (strings): guard
        return copy.copy(obj).apply(
            lambda v: fn(v) if isinstance(v, (torch.Tensor, np.ndarray)) else v)
    return obj


def _refilled(obj, items, plain):
    """A copy of the list or dict subclass ``obj`` holding ``items`` (a defaultdict keeps
    its factory, a list subclass its type: what torch's ``pin_memory`` keeps), or
    ``plain`` where the type cannot be copied so."""
    try:
        clone = copy.copy(obj)
        if isinstance(obj, list):
            clone[:] = items
        else:
            clone.update(items)
        return clone
    except Exception:  # noqa: BLE001 -- a type that does not copy: the plain container
        return plain


def _leaves(obj):
    """The tensor / numpy array leaves of ``obj`` in :func:`_map`'s order."""
    out = []

    def grab(t):
        out.append(t)
        return t
    _map(obj, grab)
    return out


class DeviceRows:
    """A batch leaf that the pipeline makes on the device from rows of host memory, with
    no staging: a tensor of ``shape`` and ``dtype`` copied piece by piece.

    Seen as ``[rows, *shape[row_dims:]]`` (its first ``row_dims`` dimensions flattened),
    the leaf's rows ``[dst_row[i], dst_row[i] + nrows[i])`` are rows
    ``[src_row[i], src_row[i] + nrows[i])`` of ``sources[src_index[i]]`` (a contiguous
    CPU tensor of such rows; None for one no piece reads) for each piece ``i`` (int64
    arrays, one entry per piece); together the pieces cover every row once.  The store's
    page-locked views (:meth:`DDStore.device_views <ddstore.DDStore.device_views>`) make
    them DMAs, all of a leaf issued by one call of the core (``dds_copy_pieces`` through
    the CUDA runtime's ``cudaMemcpyAsync``, found where torch loaded it; torch's
    ``copy_`` one piece at a time where it is not found, and on the CPU).

    Only :class:`DevicePrefetcher` takes these (the loader of the store that makes them
    does so only for it): the copies run in its read-ahead thread, on its side stream.
    """
    __slots__ = ("shape", "dtype", "row_dims", "sources", "src_index", "src_row",
                 "dst_row", "nrows")

    def __init__(self, shape, dtype, sources, src_index, src_row, dst_row, nrows,
                 row_dims=1):
        self.shape, self.dtype = tuple(int(s) for s in shape), dtype
        self.row_dims, self.sources = int(row_dims), sources
        self.src_index, self.src_row, self.dst_row, self.nrows = (
            np.asarray(a, dtype=np.int64) for a in (src_index, src_row, dst_row, nrows))

    def _checked(self):
        """The pieces' source rows within their sources (an index past one raises
        :class:`~ddstore.DDStoreIndexError`: nothing is read from outside them)."""
        from .errors import DDStoreIndexError
        have = np.array([-1 if s is None else s.shape[0] for s in self.sources],
                        dtype=np.int64)  # a piece of a source that is None: refused
        if self.src_index.size and (
                self.src_index.min() < 0 or self.src_index.max() >= len(have) or
                self.src_row.min() < 0 or self.nrows.min() < 0 or
                np.any(self.src_row + self.nrows > have[self.src_index])):
            raise DDStoreIndexError(f"DeviceRows: a piece reads past its source (sources "
                                    f"of {have.tolist()} rows)")

    def assemble(self, device, stream=None):
        """The leaf on ``device``: one buffer, each piece copied into its rows
        (``non_blocking`` on CUDA, on ``stream`` when given, else the current one)."""
        self._checked()
        # allocated on the stream that writes it: the caching allocator then waits for
        # that stream's earlier work before it hands the block out again
        with torch.cuda.stream(stream) if stream is not None else _nullcontext():
            out = torch.empty(self.shape, dtype=self.dtype, device=device)
            cuda = out.device.type == "cuda"
            fn = copy_function(out.device)
            if fn is not None and out.numel():
                from . import _core
                row = out.element_size() * math.prod(self.shape[self.row_dims:])
                base = np.array([0 if s is None else s.data_ptr() for s in self.sources],
                                dtype=np.uint64)
                src = base[self.src_index] + (self.src_row * row).astype(np.uint64)
                # the runtime's current device in this thread is the buffer's (a thread
                # starts on device 0; the stream belongs to the buffer's device)
                with torch.cuda.device(out.device) if cuda else _nullcontext():
                    try:
                        _core.copy_pieces(
                            fn, out.data_ptr(), out.numel() * out.element_size(),
                            self.dst_row * row, src, self.nrows * row, _HOST_TO_DEVICE,
                            torch.cuda.current_stream(out.device).cuda_stream
                            if cuda else 0)
                    except DDStoreError:
                        clear_cuda_error()  # ours to report: no later kernel fails with it
                        raise
                return out
            flat = out.view((math.prod(self.shape[:self.row_dims]),) +
                            self.shape[self.row_dims:])
            for i, a, d, k in zip(self.src_index.tolist(), self.src_row.tolist(),
                                  self.dst_row.tolist(), self.nrows.tolist()):
                flat[d:d + k].copy_(self.sources[i][a:a + k], non_blocking=cuda)
        return out


_HOST_TO_DEVICE = 1  # cudaMemcpyHostToDevice
_CUDA_COPY = []      # [address of cudaMemcpyAsync or None], found once


def copy_function(device):
    """The address of ``cudaMemcpyAsync`` in the CUDA runtime this process loaded (for a
    CUDA ``device``; None on the CPU, or where torch's runtime is not a shared library
    it can be found in: :class:`DeviceRows` then copies with torch)."""
    if device.type != "cuda":
        return None
    if not _CUDA_COPY:
        _CUDA_COPY.append(_find_cuda_copy())
    return _CUDA_COPY[0]


def _find_cuda_copy():
    lib = cuda_runtime()
    try:
        return None if lib is None else ctypes.cast(lib.cudaMemcpyAsync,
                                                     ctypes.c_void_p).value
    except AttributeError:
        return None


class _Slot:
    """One staging slot: a flat buffer per dtype, filled front to back for one batch."""

    def __init__(self, pool):
        self.pool = pool
        self.buffers = {}  # dtype -> flat tensor
        self.used = {}     # dtype -> elements taken this round
        self.extra = []    # [dtype, flat tensor, elements taken]: overflow this round
        self.event = None  # CUDA event after the last copy out of this slot

    def begin(self):
        """Start a new batch: wait until the last copy out of this slot is done; a
        dtype that overflowed last round gets one buffer as large as that round."""
        if self.event is not None:
            self.event.synchronize()
            self.event = None
        for dt in {e[0] for e in self.extra}:
            need = self.used.get(dt, 0) + sum(_aligned(n, dt) for d, _, n in self.extra
                                              if d == dt)
            self.buffers[dt] = self.pool._alloc(need, dt, grow=True)
        self.extra = []
        self.used = {}

    def take(self, numel, dtype):
        """A fresh 1-D staging view of ``numel`` elements of ``dtype``."""
        return self._take(numel, dtype)[0]

    def _take(self, numel, dtype):
        """``(view, source key, offset)``: :meth:`take` and where the view lies."""
        buf = self.buffers.get(dtype)
        off = self.used.get(dtype, 0)
        if buf is None:
            buf = self.buffers[dtype] = self.pool._alloc(numel, dtype)
        if off + numel <= buf.numel():
            self.used[dtype] = off + _aligned(numel, dtype)
            return buf[off:off + numel], ("main", dtype), off
        t = self.pool._alloc(numel, dtype)
        self.extra.append([dtype, t, numel])
        return t[:numel], ("extra", len(self.extra) - 1), 0

    def segments(self):
        """``(source key, flat staging tensor, elements used)`` of this round."""
        out = [(("main", dt), self.buffers[dt], min(n, self.buffers[dt].numel()))
               for dt, n in self.used.items()]
        out += [(("extra", i), t, n) for i, (_, t, n) in enumerate(self.extra)]
        return out

    def locate(self, t):
        """``(source key, offset)`` when tensor ``t`` is a contiguous piece of this slot's
        staging (handed out by :meth:`take`), else None."""
        if not t.is_contiguous() or t.device.type != "cpu":
            return None
        ptr, size = t.data_ptr(), t.element_size()
        for key, buf, n in self.segments():
            if buf.dtype != t.dtype:
                continue
            lo = buf.data_ptr()
            if lo <= ptr and ptr + t.numel() * size <= lo + n * size and \
                    (ptr - lo) % size == 0:
                return key, (ptr - lo) // size
        return None


def _aligned(numel, dtype):
    step = max(1, _ALIGN_BYTES // torch.empty(0, dtype=dtype).element_size())
    return -(-numel // step) * step


class StagingPool:
    """The staging buffers of a :class:`DevicePrefetcher`'s iterations: ``slots`` slots,
    each a flat buffer per dtype (pinned when ``pin``), made by the first iteration and
    reused by the next ones (one at a time: an iteration begun while another is live
    makes its own).  :attr:`allocations` counts the buffers allocated, :attr:`nbytes`
    the bytes held."""

    def __init__(self, slots, pin, device="cpu", stream=None):
        self.pin = bool(pin)
        self.device, self.stream = torch.device(device), stream  # for DeviceRows leaves
        self.allocations = 0
        self.slots = [_Slot(self) for _ in range(int(slots))]
        self._turn = 0

    def _alloc(self, numel, dtype, grow=False):
        if grow:  # a buffer that overflowed: room for some more growth
            numel = int(math.ceil(numel * 1.5))
        self.allocations += 1
        return torch.empty(_aligned(max(numel, 1), dtype), dtype=dtype,
                           pin_memory=self.pin)

    def rewind(self):
        """An iteration begins with the first slot (the last one ended: its copies are
        waited for by each slot's :meth:`_Slot.begin`), so that epochs of fewer batches
        than slots reuse the same ones (carried on in turn, each epoch filled slots with
        no buffer yet, up to ``k + 2``)."""
        self._turn = 0

    def next_slot(self):
        slot = self.slots[self._turn]
        self._turn = (self._turn + 1) % len(self.slots)
        slot.begin()
        return slot

    @property
    def nbytes(self):
        return sum(b.numel() * b.element_size() for s in self.slots
                   for b in s.buffers.values())


class _Staged:
    """A batch staged in a slot: the batch object (its leaves as read) and, per leaf in
    order, ``(source key, offset, shape)`` in the slot, or ``None`` (passes through)."""
    __slots__ = ("batch", "where", "slot")

    def __init__(self, batch, where, slot):
        self.batch, self.where, self.slot = batch, where, slot


def _numpy_leaf(a):
    """A numpy leaf as a CPU tensor of its values and shape (0-d stays 0-d; another byte
    order becomes the machine's), or None for what torch does not hold (strings,
    objects, long double: passed through as they are)."""
    if a.dtype.kind not in "biufc":
        return None
    c = np.ascontiguousarray(a).reshape(a.shape)  # (ascontiguousarray makes 0-d 1-d)
    if not c.dtype.isnative:
        c = c.astype(c.dtype.newbyteorder("="))
    try:
        return torch.from_numpy(c)
    except TypeError:  # a dtype torch lacks (np.longdouble, complex256)
        return None


#: The tensor types staged (as their data); another subclass moves with its own ``to``.
_STAGED_TYPES = (torch.Tensor, torch.nn.Parameter)


def _stage(batch, slot):
    """Copy every tensor leaf of ``batch`` that is not in ``slot`` already into it; a
    :class:`DeviceRows` leaf is made on the device here (its copies issued on the side
    stream, in the read-ahead thread when there is one)."""
    where = []
    for t in _leaves(batch):
        if isinstance(t, DeviceRows):
            where.append(("device", t.assemble(slot.pool.device, slot.pool.stream)))
            continue
        if isinstance(t, np.ndarray):
            t = _numpy_leaf(t)
        if t is None or t.layout != torch.strided or t.device.type != "cpu" or \
                t.is_quantized or type(t) not in _STAGED_TYPES:
            # (quantized: no staging of its kind; a subclass keeps what it carries)
            where.append(None)
            continue
        if t.numel() == 0:
            where.append((None, t.dtype, tuple(t.shape)))
            continue
        found = slot.locate(t)
        if found is None:
            view, key, off = slot._take(t.numel(), t.dtype)
            view.view(t.shape).copy_(t.detach())  # (data: no autograd history kept)
            found = key, off
        where.append((found[0], found[1], tuple(t.shape)))
    return _Staged(batch, where, slot)


class StagedReads:
    """The iterator a loader of the store gives :class:`DevicePrefetcher` to have its
    reads land in the staging: the batch ``read(indices)`` of each item of ``batches``
    (an iterator of index lists, ``length`` of them), and ``next_into(take)``, the next
    one read by ``read(indices, take)`` into views that ``take(numel, dtype)`` hands
    out.

    Made in the caller's thread by the loader's ``__iter__``, right after
    ``iter(sampler)``: it makes the one draw from torch's global generator that a
    ``DataLoader``'s iterator makes there (its workers' base seed), so that a
    ``RandomSampler`` after it, and whatever the caller draws next, get what they get
    under the plain loader."""

    def __init__(self, read, batches, length):
        self._read, self._batches, self._len = read, batches, length
        torch.empty((), dtype=torch.int64).random_()

    def __iter__(self):
        return self

    def __len__(self):
        """The epoch's batches (``length``: what the loader's ``len`` says)."""
        return self._len

    def __next__(self):
        return self._read(next(self._batches))

    def next_into(self, take):
        """The next batch, its store reads written into ``take(numel, dtype)``."""
        return self._read(next(self._batches), take)


def _stage_all(iterator, pool):
    """Generator (runs in the read-ahead thread when there is one): each batch of
    ``iterator`` staged in the next slot; reads straight into staging where the
    iterator offers ``next_into``."""
    into = getattr(iterator, "next_into", None)
    while True:
        slot = pool.next_slot()
        try:
            batch = into(slot.take) if into is not None else next(iterator)
        except StopIteration:
            return
        yield _stage(batch, slot)


class _DeviceIter:
    def __init__(self, owner, host_iter, depth):
        self._device = owner.device
        self._cuda = self._device.type == "cuda"
        # the staging of the last iteration that ended, if one did (pinned buffers are
        # costly to make, and made every epoch they grew the heap), else a new one
        pool, owner._spare_pool = owner._spare_pool, None
        if pool is None or len(pool.slots) != depth + 2:
            stream = torch.cuda.Stream(device=self._device) if self._cuda else None
            pool = StagingPool(depth + 2, pin=self._cuda, device=self._device,
                               stream=stream)
        pool.rewind()
        self._stream = pool.stream
        self.pool = pool
        self._owner = owner
        owner.last_pool = self.pool
        gen = _stage_all(host_iter, self.pool)
        self._host = host_iter  # (its len: the epoch's batches)
        self._thread = None
        self._returned = 0  # batches handed to the caller
        if depth > 0:
            from .prefetch import PrefetchIter, draw_counter
            self._thread = PrefetchIter(gen, depth, draw_counter(owner.loader),
                                        holds_end=True)
            self._source = self._thread
        else:
            self._source = gen
        self._overlap = depth > 0
        self._ahead = _FIRST
        self._done = False

    def __iter__(self):
        return self

    def __len__(self):
        """The epoch's batches, as the host iterator says (as torch's iterator has)."""
        return len(self._host)

    def __bool__(self):  # (true, as any iterator: not its len)
        return True

    def _copy_next(self):
        """Copy the next staged batch to the device: ``(batch, event, buffers)``, None
        at the end, or the exception that producing it raised (raised in its turn)."""
        try:
            return self._to_device(next(self._source))
        except StopIteration:
            return None
        except Exception as exc:  # noqa: BLE001 -- raised by the next that wants it
            self.close()
            return exc

    def _to_device(self, staged):
        slot, dev, event = staged.slot, {}, None
        ctx = torch.cuda.stream(self._stream) if self._cuda else _nullcontext()
        with ctx:
            for key, buf, n in slot.segments():
                d = torch.empty(n, dtype=buf.dtype, device=self._device)
                d.copy_(buf[:n], non_blocking=self._cuda)
                dev[key] = d
            if self._cuda:
                event = torch.cuda.Event()
                event.record(self._stream)
                slot.event = event
        where = iter(staged.where)

        def put(t):
            w = next(where)
            if w is not None and w[0] == "device":  # made on the device by _stage
                dev[("device", len(dev))] = w[1]
                return w[1]
            if w is None:
                if isinstance(t, torch.Tensor) and t.device != self._device:
                    return t.to(self._device)
                return t
            key, off, shape = w
            if key is None:  # no elements
                return torch.empty(shape, dtype=off, device=self._device)
            flat = dev[key]
            return flat[off:off + math.prod(shape)].view(shape)
        return _map(staged.batch, put), event, list(dev.values())

    def __next__(self):
        if self._done:
            raise StopIteration
        if not self._overlap:
            current = self._copy_next()
        else:
            current = self._copy_next() if self._ahead is _FIRST else self._ahead
            self._ahead = None
        if current is None or isinstance(current, BaseException):
            self._done = True
            self.close(end_seen=True)
            if current is None:
                raise StopIteration
            raise current
        self._returned += 1
        if self._overlap:
            self._ahead = self._copy_next()  # overlaps the caller's step on `current`
        batch, event, buffers = current
        if self._cuda:
            stream = torch.cuda.current_stream(self._device)
            stream.wait_event(event)
            for d in buffers:
                d.record_stream(stream)
        return batch

    def close(self, end_seen=False):
        """Stop reading ahead and join the thread (the reads in flight finish; the
        random streams are set back to the end of the batches returned, and of the
        epoch's end when the caller saw it: ``end_seen``)."""
        self._ahead = None
        if self._thread is not None:
            self._thread.close(taken=self._returned, end_seen=end_seen)
            self._thread = None
        owner, self._owner = self._owner, None
        if owner is not None:  # nothing reads into the staging now: the next iteration's
            owner._spare_pool = self.pool

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


_FIRST = object()  # no batch copied ahead yet


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def check_device(device, what):
    """``device`` as a ``torch.device`` the pipeline serves (``cpu``, or a CUDA device
    this process sees; a bare ``cuda`` becomes the current one), else a
    :class:`~ddstore.DDStoreValueError` from ``what`` naming what is allowed."""
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        device = f"cuda:{device}"  # what torch reads an index as (an accelerator's)
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise DDStoreValueError(f"{what}: device={device!r} is not a torch device "
                                f"({exc}); allowed: 'cpu', 'cuda' or 'cuda:N'") from None
    if device.type not in ("cpu", "cuda"):
        raise DDStoreValueError(f"{what}: device={str(device)!r}; allowed: 'cpu', 'cuda' "
                                f"or 'cuda:N' (the pipeline stages for CUDA; 'cpu' runs "
                                f"its staging on the host)")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DDStoreValueError(f"{what}: device={str(device)!r} but CUDA is not "
                                    f"available here; allowed: 'cpu' or a CUDA device "
                                    f"where torch.cuda.is_available()")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        elif device.index >= torch.cuda.device_count():
            raise DDStoreValueError(f"{what}: device={str(device)!r} but this process "
                                    f"sees {torch.cuda.device_count()} CUDA device(s); "
                                    f"allowed: 'cuda:0' to "
                                    f"'cuda:{torch.cuda.device_count() - 1}'")
    return device


class DevicePrefetcher(WrappedLoader):
    """Iterate ``iterable`` with its batches on ``device``, reading ``prefetch`` batches
    ahead and copying through reused (pinned, on CUDA) staging buffers on a side stream
    (see the module notes).

    Parameters
    ----------
    iterable : iterable of batches
        Any loader of the store; iterated once per ``iter()``.
    device : str or torch.device
        Where batches go ("cuda", "cuda:1", or "cpu" for the staging logic alone).
    prefetch : int
        Batches read ahead in a background thread (``>= 0``; 0: no thread and no
        overlap, each batch read, staged and copied when asked for), beyond the one
        copied ahead: the loader runs up to ``prefetch + 1`` batches ahead of the
        caller.
    store : ddstore.DDStore, optional
        The store the loader reads, for the MPI thread-level rule (found by itself for
        PyG loaders over a ddstore sampler and loaders whose dataset has a ``store``).

    Notes
    -----
    ``len()``, ``sampler``, ``batch_sampler``, ``dataset`` are the wrapped loader's;
    :meth:`set_epoch` forwards to it.  :attr:`last_pool` is the :class:`StagingPool` of
    the latest iteration (``allocations``, ``nbytes``).  Batches are data: a tensor the
    loader yields with ``requires_grad`` comes out as a copy without autograd history
    (the staging buffers are reused; a copy that kept the history chained every batch
    that used a slot to the ones before it).
    """

    def __init__(self, iterable, device, prefetch=2, store=None):
        self.device = check_device(device, "DevicePrefetcher")
        from .prefetch import (check_one_read_ahead, check_prefetch, prefetch_depth,
                               store_of)
        prefetch = check_prefetch(prefetch, getattr(iterable, "num_workers", 0),
                                  "DevicePrefetcher")
        check_one_read_ahead(iterable, prefetch, "DevicePrefetcher")
        store = store if store is not None else store_of(iterable)
        if store is not None:
            prefetch = prefetch_depth(store, prefetch, "DevicePrefetcher")
        self.loader = iterable
        self.prefetch = prefetch
        self.last_pool = None
        self._spare_pool = None  # the staging of an iteration that ended, to reuse

    @property
    def reads_ahead(self):
        """Whether iterating this takes batches ahead of the caller (``prefetch`` > 0)."""
        return self.prefetch > 0

    def __iter__(self):
        return _DeviceIter(self, iter(self.loader), self.prefetch)

    def __repr__(self):
        return (f"DevicePrefetcher(device={self.device}, prefetch={self.prefetch}, "
                f"loader={self.loader!r})")


def device_loader(loader, device=None, prefetch=0, store=None, what="loader"):
    """What the loaders of the store return for ``device=`` / ``prefetch=``: with no
    ``device``, today's path (``loader`` itself, or with ``prefetch >= 1`` a
    :class:`ddstore.prefetch.PrefetchLoader`: the read-ahead thread alone); with a
    ``device`` (``"cpu"`` included, which runs the staging on the host), a
    :class:`DevicePrefetcher`."""
    from .prefetch import PrefetchLoader, store_of, check_prefetch, prefetch_depth
    prefetch = check_prefetch(prefetch, getattr(loader, "num_workers", 0), what)
    if device is None and not prefetch:
        return loader
    store = store if store is not None else store_of(loader)
    if store is not None:  # (a fallback to no read-ahead is told naming the user's call)
        prefetch = prefetch_depth(store, prefetch, what)
    if device is None:
        return PrefetchLoader(loader, prefetch, store)
    return DevicePrefetcher(loader, check_device(device, what), prefetch, store=store)
