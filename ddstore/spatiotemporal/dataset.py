"""Index-batched sliding windows over a series kept once in a :class:`~ddstore.DDStore`."""
import bisect
import collections.abc
import math
import numbers

import numpy as np
import torch

from ..annotations import check_object_name
from ..errors import DDStoreIndexError, DDStoreStateError, DDStoreValueError
from .._checks import (SEED_MASK, as_bool, as_dtype, as_indices, as_int, as_seed,
                      check_indices, integer_scalar, is_int)
from .._fingerprint import fingerprint, same_data
from ..prefetch import BatchEpoch
from ..sources.base import check_same_files
from ..sources.series import Series, decode_node_ids, encode_node_ids, from_arrays
from .batch_sampler import agree_epoch
from .windows import (SPLIT_NAMES, Moments, check_horizon, chunk_moments, num_windows,
                      series_layout, split_ranges, window_weights)

__all__ = ["WindowDataset", "WindowSplit", "WindowBatch", "time_feature_array",
           "batch_collate", "set_epoch", "distributed_order"]

_TIME_FEATURES = {"tod": 1, "dow": 7}
KIND = "WindowDataset"  # the kind of its annotation (checkpoint and restart)
_HASH_BLOCK = 64 << 20  # bytes of an in-memory series fingerprinted at a time


def _same_series(series, timestamps):
    """``same=`` settings that hold every rank to the same in-memory series (see
    :func:`ddstore._fingerprint.same_data`): the graph (``edge_index``, ``edge_weight``)
    and ``timestamps`` always (small), the values (``'data'``) when the series is an
    array (:func:`~ddstore.sources.series.from_arrays`).  A series read from files is
    agreed by its files (:func:`~ddstore.sources.base.check_same_files`), and another
    reader's steps are not read whole here.  The values are fingerprinted in blocks of
    ``_HASH_BLOCK`` bytes chained by seed, so that an array in any memory layout is
    never copied whole (a C-ordered one is not copied at all; an ``np.memmap`` is
    described by what it maps)."""
    out = same_data({"edge_index": series.edge_index, "edge_weight": series.edge_weight,
                     "timestamps": timestamps}, what="series",
                    hint="every rank must pass the same series: make it alike on every "
                         "rank (the same seed for a random series, the same file)")
    if series.files is None and series.source == "array":
        T, n, f = series.shape
        arr = series.read(0, T)  # a view
        rows = max(1, _HASH_BLOCK // (n * f * arr.dtype.itemsize))
        fp = 0
        for a in range(0, T, rows):
            fp = fingerprint(arr[a:a + rows], fp)
        out["series 'data'"] = f"{arr.dtype.name} {list(arr.shape)}, fingerprint 0x{fp:016x}"
    return out


def _restored_layout(store, name, halo, arrays):
    """The layout (see :func:`series_layout`) of series ``name`` as the store holds it
    now, at its width: with ``halo`` the saved pieces, each on the member whose chunk
    holds its first row; without, one piece per member, its chunk (rows = steps)."""
    offs = np.asarray(store.chunk_offsets(name), dtype=np.int64)
    width = offs.shape[0] - 1
    if halo:
        lo, hi, stored, offset = (np.asarray(arrays[f"piece_{k}"], dtype=np.int64)
                                  for k in ("lo", "hi", "stored", "offset"))
        member = (np.searchsorted(offs, offset, side="right") - 1).clip(0, width - 1)
    else:
        keep = [g for g in range(width) if offs[g + 1] > offs[g] or width == 1]
        lo = offs[keep]
        hi = offs[[g + 1 for g in keep]]
        member = np.array(keep, dtype=np.int64)
        stored, offset = hi - lo, lo.copy()
    return {"lo": lo, "hi": hi, "member": member.astype(np.int64), "stored": stored,
            "offset": offset, "member_stored": np.diff(offs), "member_offset": offs}


def time_feature_array(timestamps, kinds, dtype=np.float32):
    """DCRNN's time features for ``timestamps`` ``[T]``: ``[T, k]`` of ``dtype``
    (computed in float64).

    ``"tod"``: time of day as a fraction of the day in ``[0, 1)`` (1 column; in
    ``dtype``, a time that would round to 1 is its largest value below 1);
    ``"dow"``: day of week, one-hot over Monday..Sunday (7 columns).  Columns in the order
    of ``kinds``.  A ``NaT`` timestamp gives NaN in every column (as pandas does).
    """
    ts = np.asarray(timestamps).astype("datetime64[ns]")
    # days since 1970 and nanoseconds into the day by integer floor division (numpy's
    # cast to datetime64[D] wraps within a day of the int64 minimum, 1677-09-21)
    days, into = np.divmod(ts.view(np.int64), np.int64(86_400_000_000_000))
    nat = np.isnat(ts)  # no time: NaN features, as pandas and DCRNN's formula give
    dtype = np.dtype(dtype)
    # the largest time of day below 1 in dtype (23:59:59.99 rounds to 1.0 in float32)
    below_one = np.nextafter(dtype.type(1), dtype.type(0)) if dtype.kind == "f" else 1
    cols = []
    for kind in kinds:
        if kind == "tod":
            tod = np.minimum((into / 86_400e9).astype(dtype), below_one)
            cols.append(np.where(nat, np.nan, tod)[:, None])
        elif kind == "dow":
            dow = (days + 3) % 7  # 1970-01-01 was a Thursday; Monday = 0
            onehot = np.zeros((ts.shape[0], 7))
            onehot[np.arange(ts.shape[0]), dow] = 1.0
            onehot[nat] = np.nan
            cols.append(onehot)
    if not cols:
        return np.zeros((ts.shape[0], 0), dtype=dtype)
    return np.concatenate(cols, axis=1).astype(dtype)


def _check_time_features(time_features):
    if time_features is None:
        return ()
    kinds = (time_features,) if isinstance(time_features, str) else tuple(time_features)
    for k in kinds:
        if not isinstance(k, str) or k not in _TIME_FEATURES:
            raise DDStoreValueError(f"time_features entry {k!r} unknown; allowed: "
                                    f"{sorted(_TIME_FEATURES)}")
    if len(set(kinds)) != len(kinds):
        raise DDStoreValueError(f"time_features {kinds} repeats an entry")
    return kinds


class WindowBatch(collections.abc.Sequence):
    """What a window dataset's ``__getitems__`` returns (torch's ``Dataset`` contract):
    the batch's windows as a sequence of samples, ``batch[b]`` equal to ``ds[idx[b]]``,
    read with one store call and held stacked in :attr:`parts` (what ``get_batch``
    returns: ``(x, y)``, or ``(x, y, graphs)`` for a
    :class:`~ddstore.dynamic.DynamicWindowDataset`).  :func:`batch_collate` hands
    :attr:`parts` on as they are; torch's default collate stacks the samples again
    (``[x, y]``, one copy more).  A sample is made when asked for: views of the
    stacked tensors (a dynamic window's graphs cut out of the block-diagonal batch)."""
    __slots__ = ("parts", "_nodes", "_runs")

    def __init__(self, parts, nodes=None):
        self.parts, self._nodes = parts, nodes
        self._runs = None  # per graph step: where each window's edges start (a list)

    def _edge_runs(self):
        """Per graph step, the ``B + 1`` positions where each window's run of edges
        starts in the block-diagonal batch (window ``b``'s nodes offset ``b * nodes``),
        found once for all the windows: one pass over each step's edges."""
        if self._runs is None:
            n = len(self)
            runs = []
            for ei, _ in self.parts[2]:
                window = torch.div(ei[0], self._nodes, rounding_mode="floor")
                runs.append(torch.searchsorted(
                    window, torch.arange(n + 1, device=ei.device)).tolist())
            self._runs = runs
        return self._runs

    def __len__(self):
        return int(self.parts[0].shape[0])

    def __iter__(self):
        # the windows in order, without a checked __getitem__ per window: torch's
        # default collate walks the batch twice (the samples' lengths, then zip)
        if len(self.parts) == 2:
            return zip(self.parts[0].unbind(0), self.parts[1].unbind(0))
        return (self[b] for b in range(len(self)))

    def __getitem__(self, b):
        n = len(self)
        if isinstance(b, slice):
            return [self[i] for i in range(n)[b]]
        b = integer_scalar(b)
        if not is_int(b):
            raise TypeError(f"WindowBatch indices must be integers or slices, not "
                            f"{type(b).__name__}")
        if not -n <= b < n:
            raise IndexError(f"WindowBatch index {b!r} out of range for {n} windows")
        b = int(b) + (n if b < 0 else 0)
        x, y = self.parts[0][b], self.parts[1][b]
        if len(self.parts) == 2:
            return x, y
        graphs = []
        for (ei, ew), run in zip(self.parts[2], self._edge_runs()):
            lo, hi = run[b], run[b + 1]  # window b's edges, its nodes offset b * nodes
            graphs.append((ei[:, lo:hi] - b * self._nodes,
                           None if ew is None else ew[lo:hi]))
        return x, y, graphs


def batch_collate(batch):
    """``collate_fn`` for a DataLoader over a window dataset: the stacked batch ``(x,
    y)`` (``(x, y, graphs)`` for dynamic windows) that ``__getitems__`` read, without a
    copy (a :class:`WindowBatch`'s :attr:`~WindowBatch.parts`); a list of samples (a
    dataset without ``__getitems__`` around the windows) goes to torch's
    ``default_collate``, except dynamic windows' ``(x, y, graphs)``, whose graphs are
    batched block-diagonally as ``get_batch`` batches them (window ``b``'s nodes offset by
    ``b * nodes``); one sample (``batch_size=None``) is handed on as it is."""
    if isinstance(batch, WindowBatch):
        return batch.parts
    if isinstance(batch, list):
        if batch and all(_is_dynamic_sample(s) for s in batch):
            return _collate_dynamic(batch)
        return torch.utils.data.default_collate(batch)
    return batch


def _is_dynamic_sample(sample):
    """Whether ``sample`` is a dynamic window ``(x, y, graphs)``: ``graphs`` a list of
    ``(edge_index [2, E], edge_weight or None)`` (a user's own ``(x, y, index)`` or
    ``(x, y, mask)`` goes to torch's default collate)."""
    return (isinstance(sample, tuple) and len(sample) == 3 and
            isinstance(sample[2], list) and all(
                isinstance(g, tuple) and len(g) == 2 and isinstance(g[0], torch.Tensor)
                and g[0].ndim == 2 and g[0].shape[0] == 2 for g in sample[2]))


def _collate_dynamic(samples):
    """Dynamic windows ``(x, y, graphs)`` (a ``ConcatDataset`` of them, or any wrapper
    that hands ``batch_collate`` a list) as ``get_batch``'s batch: ``x``, ``y`` stacked,
    ``graphs[j]`` the ``B`` windows' step-``j`` graphs block-diagonally (torch's
    default collate stacked the edge lists unshifted, or failed on unequal edge counts
    and unweighted graphs)."""
    nodes = int(samples[0][0].shape[-2])
    steps = len(samples[0][2])
    if any(len(s[2]) != steps or int(s[0].shape[-2]) != nodes for s in samples):
        raise DDStoreValueError("batch_collate: dynamic windows of different node counts "
                                "or graph steps cannot be batched together")
    graphs = []
    for j in range(steps):
        ei = torch.cat([s[2][j][0] + b * nodes for b, s in enumerate(samples)], dim=1)
        weights = [s[2][j][1] for s in samples]
        if any((w is None) != (weights[0] is None) for w in weights):
            raise DDStoreValueError(f"batch_collate: step {j}: weighted and unweighted "
                                    f"graphs cannot be batched together")
        graphs.append((ei, None if weights[0] is None else torch.cat(weights)))
    return (torch.stack([s[0] for s in samples]), torch.stack([s[1] for s in samples]),
            graphs)


def set_epoch(loader, epoch):
    """Call ``set_epoch`` on a DataLoader's sampler and batch sampler, where they have it
    (and on the sampler a batch sampler wraps, or on those of the loader a wrapper holds:
    :func:`ddstore.prefetch.epoch_samplers`); without them, the object's own
    ``set_epoch`` (:class:`~ddstore.temporal.EdgeBatches`), or the first one of the
    loaders it wraps (``.loader``); samplers that need no epoch
    (torch's ``SequentialSampler``, ``RandomSampler``): nothing; an object that is no
    loader (no sampler, batch sampler or ``set_epoch``) is refused.
    Collective for the window loaders' samplers (they split the windows over the ranks:
    the epoch is checked to be the same on every rank)."""
    from ..prefetch import epoch_samplers, wrapped_loaders
    samplers = epoch_samplers(loader)
    if not samplers:
        for inner in wrapped_loaders(loader):
            own = getattr(inner, "set_epoch", None)
            if callable(own):  # an object with its own (EdgeBatches, a wrapper of one,
                own(epoch)     # under PyG's PrefetchLoader, which has none)
                return
        if not any(getattr(inner, "sampler", None) is not None or
                   getattr(inner, "batch_sampler", None) is not None
                   for inner in wrapped_loaders(loader)):
            # (an epoch that changed nothing would repeat one order)
            raise DDStoreValueError(
                f"set_epoch: {type(loader).__name__} {loader!r:.80} is not a loader: it "
                f"has no sampler, batch sampler or set_epoch (nor has the loader it "
                f"wraps in .loader)")
        return  # samplers that need no epoch (torch's SequentialSampler, RandomSampler)
    ours = [s for s in samplers if getattr(s, "agrees_epoch", False)]
    for s in ours:  # first: a bad epoch raises alike on every rank
        s.set_epoch(epoch)
    epoch = as_int(epoch, "set_epoch: epoch", 0)  # as BatchShuffleSampler.set_epoch
    for s in samplers:
        if not any(s is o for o in ours):
            s.set_epoch(epoch)


class _RanksSampler(torch.utils.data.DistributedSampler):
    """The window loader's ``DistributedSampler`` over the store's ranks: the same
    order, and a collective :meth:`set_epoch` (the epoch agreed on every rank)."""
    agrees_epoch = True

    def __init__(self, view, **kwargs):
        store = view.dataset.store
        super().__init__(view, num_replicas=store.size, rank=store.rank, **kwargs)
        self._store, self._what = store, view._what()

    def set_epoch(self, epoch):
        super().set_epoch(agree_epoch(self._store, self._what, epoch))

    def order(self):
        """This rank's indices of the current epoch, ``DistributedSampler``'s order (its
        seed + epoch taken modulo 2**64): an int64 tensor (:func:`distributed_order`)."""
        return distributed_order(len(self.dataset), self.num_replicas, self.rank,
                                 self.shuffle, self.seed, self.epoch, self.drop_last)

    def __iter__(self):
        return iter(self.order().tolist())


def _torch_dtype(dtype):
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


def _index_array(index, length, what):
    """Indices into a view of ``length`` windows -> int64 numpy array in ``[0, length)``.

    Negative indices count from the end, as for Python sequences.
    """
    if isinstance(index, torch.Tensor):
        index = index.detach().cpu().numpy()
    idx = as_indices(index, what)
    if idx.size == 0:
        return idx
    smallest = check_indices(idx, length, what, low=-length, detail=f" for {length} windows")
    return np.where(idx < 0, idx + length, idx) if smallest < 0 else idx


class _WindowView(torch.utils.data.Dataset):
    """Windows with starts ``[start, stop)`` of a :class:`WindowDataset`."""

    def _init_view(self, dataset, split_name, start, stop):
        self._ds = dataset
        self.split_name = split_name
        self.start, self.stop = int(start), int(stop)

    @property
    def dataset(self):
        """The :class:`WindowDataset` this view belongs to."""
        return self._ds

    @property
    def starts(self):
        """Global window starts of this view, ``range(start, stop)``."""
        return range(self.start, self.stop)

    def __len__(self):
        return self.stop - self.start

    def __getitem__(self, index):
        """Window ``index`` of this view: ``(x, y)`` each ``[h, nodes, features]``.  A
        slice gives those windows as a ``torch.utils.data.Subset`` of this view (a
        DataLoader over it reads each batch with one call, as over the view)."""
        if isinstance(index, slice):
            return torch.utils.data.Subset(self, range(len(self))[index])
        index = integer_scalar(index)
        if not is_int(index):  # (an IndexError, as a torch TensorDataset raises)
            raise DDStoreIndexError(f"{self._what()}: index must be an integer or a "
                                    f"slice, got {index!r}; use get_batch for a batch")
        index, length = int(index), self.stop - self.start
        if not -length <= index < length:
            raise DDStoreIndexError(f"{self._what()}: index {index} (position 0) out of "
                                    f"range [{-length}, {length}) for {length} windows")
        return self._ds._fetch_one(self.start + (index if index >= 0 else index + length))

    def get_batch(self, indices):
        """Windows ``indices`` as one batch ``(x, y)`` each ``[B, h, nodes, features]``
        (negative indices count from the end): one store read (one access epoch) for
        the whole batch."""
        idx = _index_array(indices, self.stop - self.start, self._what())
        return self._ds._fetch(idx + self.start if self.start else idx)

    def __getitems__(self, indices):
        """Windows ``indices`` as a :class:`WindowBatch`: a sequence of samples
        (torch's ``Dataset`` contract, what a ``DataLoader`` calls) read with one
        :meth:`get_batch`; give the loader ``collate_fn=batch_collate`` to take the
        stacked batch as read (or use :meth:`loader`)."""
        return WindowBatch(self.get_batch(indices), self._ds.num_nodes)

    def inverse_transform(self, values, features=None):
        """Undo the standardisation of predictions; see
        :meth:`WindowDataset.inverse_transform`."""
        return self._ds.inverse_transform(values, features)

    def batch_sampler(self, batch_size, **kwargs):
        """A :class:`~ddstore.spatiotemporal.BatchShuffleSampler` over this view."""
        from .batch_sampler import BatchShuffleSampler
        return BatchShuffleSampler(self, batch_size, **kwargs)

    def loader(self, batch_size, *, sampler="global", shuffle=True, seed=0,
               drop_last=False, local=None, prefetch=0, num_workers=0, device=None,
               direct=False):
        """A ``DataLoader`` of batches ``(x, y)`` for this rank.

        ``sampler="global"``: ``DistributedSampler`` over all ranks of the store's
        communicator (sample-level global shuffle; every epoch each start once, padded
        to a multiple of the rank count unless ``drop_last``).  ``sampler="batch"``:
        :class:`BatchShuffleSampler` (batches of consecutive starts, order shuffled;
        ``local`` prefers windows this rank stores; unused by ``"global"``, but checked
        alike).  Call :func:`set_epoch` every epoch.
        Single-process loading (``num_workers=0``; anything else raises
        :class:`DDStoreValueError`): the store is MPI memory.

        ``prefetch=k`` (k >= 1) reads up to ``k`` batches ahead in a background thread
        while the caller computes, and returns a :class:`ddstore.prefetch.PrefetchLoader`
        that yields the same batches in the same order (see :mod:`ddstore.prefetch` for
        the MPI thread level it needs and its fallback).

        ``device``: where batches go; default the dataset's.  With the series in the
        store (``resident="store"``) and a non-CPU device, or any ``device`` given here,
        the loader is a :class:`ddstore.device.DevicePrefetcher`: windows are read
        straight into reused (pinned, on CUDA) staging buffers, ``prefetch`` batches
        ahead, and copied on a side stream while the caller steps (``device="cpu"``
        runs the same staging on the host).  With the series on the device
        (``resident="device"``), the epoch's order (``DistributedSampler``'s, or the
        batch sampler's blocks) is computed once per epoch and moved to the device once;
        each batch is a slice of it and a gather there (no Python ints, no per-batch
        host-to-device copy; ``prefetch`` has nothing to read and is ignored).

        ``direct=True`` (with the pipeline, i.e. the series in the store and a device):
        windows that lie in memory this process maps (its own chunk, and node-local
        members' chunks in shared memory) are copied to the device straight from the
        store, page-locked in place on CUDA (:meth:`DDStore.device_views
        <ddstore.DDStore.device_views>`): no host copy into staging; a batch with a
        window read by MPI_Get goes through staging as without.  Experimental: the same
        batches (tested on the CPU), its speed on a GPU not measured yet
        (docs/index-batching.md).

        Collective: the samplers split the windows over all ranks, so every rank makes
        its loader alike: ``batch_size``, ``sampler``, ``shuffle``, ``seed`` (with a
        shuffle), ``drop_last`` and ``local`` are checked to be the same on every rank (a
        difference, or a bad argument on one rank, raises on every rank naming them);
        ``prefetch``, ``device`` and ``direct`` are this rank's own.
        """
        store = self._ds.store
        with store.collective("WindowDataset.loader", self._what()) as step:
            # the sampler first: the settings agreed next are that sampler's (samplers
            # that differ are told as such, not as their settings differing too)
            with store.collective(None) as first:
                first.agree(same={"sampler": sampler})
            out, smp = self._loader(batch_size, sampler, shuffle, seed, drop_last, local,
                                    prefetch, num_workers, device, direct)
            same = {k: getattr(smp, k) for k in ("shuffle", "seed", "drop_last", "local")
                    if hasattr(smp, k)}
            if sampler == "global":  # unused there, checked alike (BatchShuffleSampler
                # checks its own)
                what = f"{self._what()}.loader: local"
                same["local"] = None if local is None else as_bool(local, what)
            if not same["shuffle"]:
                del same["seed"]  # unused without a shuffle: may differ
            step.agree(same={"batch_size": int(batch_size), **same})
        return out

    def _loader(self, batch_size, sampler, shuffle, seed, drop_last, local, prefetch,
                num_workers, device, direct):
        """:meth:`loader`'s local part: ``(the loader, its sampler)`` (the
        ``DistributedSampler`` or the :class:`BatchShuffleSampler`, whose settings are
        agreed)."""
        from ..prefetch import PrefetchLoader, check_prefetch, prefetch_depth
        what = f"{self._what()}.loader"
        if not is_int(batch_size) or batch_size < 1:
            raise DDStoreValueError(f"{what}: batch_size={batch_size!r} must be an integer "
                                    f">= 1")
        batch_size = int(batch_size)  # torch's BatchSampler takes no numpy integer
        prefetch = check_prefetch(prefetch, num_workers, what)
        if num_workers:
            raise DDStoreValueError(
                f"{what}: num_workers={num_workers!r}; allowed: 0. This loader makes a "
                f"batch with one read of the store in this process; to overlap reading "
                f"with training use prefetch= (a read-ahead thread). (A DataLoader of "
                f"your own may give the dataset forked workers, "
                f"multiprocessing_context='fork': they read the rows this node holds, "
                f"and are refused rows on other nodes, which need MPI.)")
        direct = as_bool(direct, f"{what}: direct")
        ds = self._ds
        store = ds.store
        if device is not None:
            device, _ = _placement(store, device, "store", what)
        on_device = ds._dev_series is not None
        if on_device and device is not None and _same_device(device, ds.device):
            device = None  # the dataset's own device, however it is spelled
        if on_device and device is not None:
            raise DDStoreValueError(f"{what}: device={str(device)!r} but the series lives "
                                    f"on {ds.device} (resident='device'); allowed: "
                                    f"device=None or {str(ds.device)!r}")
        if on_device and direct:
            raise DDStoreValueError(f"{what}: direct=True but the series lives on "
                                    f"{ds.device} (resident='device'): nothing is copied; "
                                    f"allowed: direct=False")
        if sampler == "global":
            # DistributedSampler wants a Python int seed and bools (a numpy seed fails at
            # the first epoch; a float or a truthy string would be taken and fail late,
            # or mean True); BatchShuffleSampler checks its own.  Seeds follow the
            # package's rule (modulo 2**64: -1 is torch's 2**64 - 1)
            seed = as_seed(seed, f"{what}: seed")
            shuffle = as_bool(shuffle, f"{what}: shuffle")
            drop_last = as_bool(drop_last, f"{what}: drop_last")
            smp = _RanksSampler(self, shuffle=shuffle, seed=seed, drop_last=drop_last)
            if on_device:
                return _DeviceWindowBatches(self, smp, batch_size), smp
            batches = torch.utils.data.BatchSampler(smp, batch_size, False)
        elif sampler == "batch":
            smp = None
            batches = self.batch_sampler(batch_size, shuffle=shuffle, seed=seed,
                                         drop_last=drop_last, local=local)
            if on_device:
                return _DeviceWindowBatches(self, None, batch_size, batches), batches
        else:
            raise DDStoreValueError(f"sampler={sampler!r}; allowed: 'global', 'batch'")
        target = device if device is not None else ds.device
        if not on_device and (device is not None or target.type != "cpu"):
            from ..device import device_loader
            return device_loader(
                _WindowBatches(self, smp, batches, direct=target if direct else None),
                target, prefetch, store=store, what=what), (
                    smp if smp is not None else batches)
        if direct:
            raise DDStoreValueError(f"{what}: direct=True copies windows from the store "
                                    f"to a device: give device= (or a dataset on a "
                                    f"device with the series in the store)")
        if smp is not None:
            loader = _WindowLoader(self, batch_size=batch_size, sampler=smp,
                                   drop_last=False, collate_fn=batch_collate)
        else:
            loader = _WindowLoader(self, batch_sampler=batches, collate_fn=batch_collate)
        if not prefetch:
            return loader, (smp if smp is not None else batches)
        return PrefetchLoader(loader, prefetch_depth(store, prefetch, what), store), (
            smp if smp is not None else batches)

    def _what(self):
        return f"{type(self).__name__}({self._ds.name!r}, {self.split_name})"


def _same_device(a, b):
    """Whether torch devices ``a`` and ``b`` are one device (``cuda`` is the current
    CUDA device, ``cuda:0`` spelled out; the host's memory is one device however its
    index is spelled: ``cpu``, ``cpu:0``)."""
    if a.type != b.type:
        return False
    if a.type == "cpu":
        return True
    if a.type != "cuda" or (a.index is not None and b.index is not None):
        return a.index == b.index
    current = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return (a.index if a.index is not None else current) == \
        (b.index if b.index is not None else current)


def distributed_order(length, num_replicas, rank, shuffle=True, seed=0, epoch=0,
                      drop_last=False):
    """The indices ``DistributedSampler(dataset of length, num_replicas, rank, shuffle,
    seed, drop_last)`` gives in ``epoch``, as an int64 tensor, computed with tensor
    operations (the same ``torch.randperm`` with a generator seeded ``seed + epoch``, the
    same padding by repetition or cut, the same stride over ranks).  ``seed + epoch`` is
    taken modulo ``2**64``, as torch reads a negative seed, so that any seed and epoch
    work (``DistributedSampler`` fails beyond ``2**64 - 1``: ``as_seed``'s rule)."""
    if shuffle:
        g = torch.Generator()
        g.manual_seed((seed + epoch) & SEED_MASK)
        idx = torch.randperm(length, generator=g)
    else:
        idx = torch.arange(length)
    if drop_last and length % num_replicas:
        num_samples = math.ceil((length - num_replicas) / num_replicas)
    else:
        num_samples = math.ceil(length / num_replicas)
    total = num_samples * num_replicas
    if not drop_last:
        pad = total - length
        if pad > 0:
            idx = torch.cat([idx, idx.repeat(math.ceil(pad / length))[:pad]])
    else:
        idx = idx[:total]
    return idx[rank:total:num_replicas]


class _WindowBatches:
    """Host batches ``(x, y)`` of a window view, in the order of ``batches`` (a batch
    sampler): what a ``DataLoader`` with ``collate_fn=batch_collate`` gives, plus
    ``next_into`` on its iterator, which reads a batch straight into staging (for
    :class:`ddstore.device.DevicePrefetcher`)."""

    def __init__(self, view, sampler, batches, direct=None):
        self.view, self.sampler, self.batch_sampler = view, sampler, batches
        self.direct = direct  # the device windows are copied to straight from the store

    @property
    def dataset(self):
        return self.view

    def __len__(self):
        return len(self.batch_sampler)

    def __iter__(self):
        from ..device import StagedReads
        return StagedReads(self._read, iter(self.batch_sampler), len(self))

    def _read(self, indices, take=None):
        """The batch of window ``indices`` (in the view), read into ``take`` if given."""
        v = self.view
        idx = _index_array(indices, len(v), v._what())
        return v._ds._fetch(idx + v.start if v.start else idx, host=True, into=take,
                            direct=self.direct if take is not None else None)


class _WindowLoader(torch.utils.data.DataLoader):
    """The host window loader: a ``DataLoader`` (its attributes, ``len``, ``set_epoch``
    on its sampler) whose iterator reads each batch of the batch sampler with one
    :meth:`~_WindowView.get_batch` -- the batches ``batch_collate`` makes of
    ``__getitems__`` (another ``collate_fn`` set on it, or a view whose class has its
    own ``__getitems__``: torch's iterator), without the ~15 us a batch of torch's
    single-process iterator (its fetcher, collate call and checks): an epoch is a
    :class:`ddstore.prefetch.BatchEpoch` (a profiler scope per batch and a draw from
    the loader's ``generator`` per epoch, as torch's iterator)."""

    def __iter__(self):
        # a collate_fn set on the loader, or a dataset whose own __getitems__ makes the
        # batches (a subclass's): torch's iterator, which calls them
        if self.collate_fn is not batch_collate or \
                type(self.dataset).__getitems__ is not _WindowView.__getitems__:
            return super().__iter__()
        bs = self.batch_sampler
        smp = getattr(bs, "sampler", None)
        if type(bs) is torch.utils.data.BatchSampler and type(smp) is _RanksSampler \
                and not bs.drop_last:  # the epoch's order at once, batches its slices
            batches = _order_slices(smp, bs.batch_size)
        else:  # the batch sampler's lists (BatchShuffleSampler's, a user's own)
            batches = iter(bs)
        return BatchEpoch(self.dataset.get_batch, batches, len(bs), self.generator)


def _order_slices(sampler, batch_size):
    """The batches of ``sampler`` (a :class:`_RanksSampler`) as slices of its epoch's
    order, which is taken at the first ``next`` (as torch's samplers read their epoch:
    a ``set_epoch`` between ``iter`` and the first batch counts)."""
    order = sampler.order().numpy()
    for i in range(0, order.shape[0], batch_size):
        yield order[i:i + batch_size]


_ROWS_AT_ONCE = 1 << 16  # windows whose series rows the resident loader makes at once


class _DeviceWindowBatches:
    """Batches ``(x, y)`` of a view whose dataset keeps the series on the device: the
    starts of an epoch are computed once, moved to the device once, and each batch is a
    slice of them.  The order is ``DistributedSampler``'s (``sampler``: its
    ``set_epoch``, seed, rank; :func:`distributed_order`), or, with ``batch_sampler`` (a
    :class:`BatchShuffleSampler`), its blocks of consecutive starts for this rank."""

    def __init__(self, view, sampler, batch_size, batch_sampler=None):
        if not is_int(batch_size) or batch_size < 1:
            raise DDStoreValueError(f"batch_size={batch_size!r} must be an integer >= 1")
        self.view, self.sampler, self.batch_size = view, sampler, int(batch_size)
        self.batch_sampler = batch_sampler

    @property
    def dataset(self):
        return self.view

    def order(self):
        """This rank's window indices (in the view) of the current epoch in
        ``DistributedSampler`` order, on the device."""
        return self.sampler.order().to(self.view._ds.device)

    def _epoch(self):
        """``(starts, bounds)``: the window starts (in the series) of this rank's epoch
        on the device, and each batch's ``(begin, end)`` in them."""
        ds = self.view._ds
        if self.batch_sampler is None:
            starts = self.order()
            if self.view.start:
                starts += self.view.start
            n, b = starts.shape[0], self.batch_size
            return starts, [(i, min(i + b, n)) for i in range(0, n, b)]
        bs = self.batch_sampler
        blocks = np.asarray([bs.blocks[k] for k in bs.rank_blocks()],
                            dtype=np.int64).reshape(-1, 2)
        lens = blocks[:, 1] - blocks[:, 0]
        ends = np.cumsum(lens)
        begins = ends - lens
        total = int(ends[-1]) if ends.size else 0
        starts = np.repeat(blocks[:, 0] - begins, lens) + np.arange(total, dtype=np.int64)
        return (torch.from_numpy(starts).to(ds.device),
                list(zip(begins.tolist(), ends.tolist())))

    def __len__(self):
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return -(-self.sampler.num_samples // self.batch_size)

    def __iter__(self):
        # the draw torch's iterator makes (its workers' base seed), as the host loader
        # makes it: a loop's random stream is the same wherever the series lives
        torch.empty((), dtype=torch.int64).random_()
        return _SizedIter(self._batches(), len(self))

    def _batches(self):
        ds = self.view._ds
        starts, bounds = self._epoch()
        h = ds.horizon
        # the windows' series rows, made for _ROWS_AT_ONCE windows' batches at a time
        # (bounded memory, one addition per group): a batch is then two index_select
        # kernels on slices of them (no per-batch index arithmetic)
        per = max(1, _ROWS_AT_ONCE // self.batch_size)
        for i in range(0, len(bounds), per):
            group = bounds[i:i + per]
            a0 = group[0][0]
            rx, ry = ds._epoch_rows(starts[a0:group[-1][1]])
            for a, e in group:
                lo, hi = (a - a0) * h, (e - a0) * h
                yield ds._fetch(starts[a:e], rows=(rx[lo:hi], ry[lo:hi]))


class _SizedIter:
    """An iterator over ``it`` whose ``len`` is ``n`` (the batches of an epoch, as
    ``len`` of a torch ``DataLoader``'s iterator says)."""
    __slots__ = ("_it", "_n")

    def __init__(self, it, n):
        self._it, self._n = it, n

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def __len__(self):
        return self._n


class WindowSplit(_WindowView):
    """One split (train, val or test) of a :class:`WindowDataset`: a torch ``Dataset``
    of the windows whose starts lie in ``[start, stop)``, in time order."""

    def __init__(self, dataset, split_name, start, stop):
        self._init_view(dataset, split_name, start, stop)

    def __repr__(self):
        return (f"WindowSplit({self.split_name}, starts [{self.start}, {self.stop}), "
                f"{len(self)} windows)")


def _placement(store, device, resident, what="window dataset"):
    """``(torch.device, resident)`` of a window dataset over ``store``: ``resident``
    None chooses ``"device"`` for a non-CPU device at width 1, else ``"store"``; a bad
    device, an unknown ``resident`` or ``"device"`` at width > 1 is refused (``what``
    names the call in messages)."""
    from ..device import check_device  # the one check of a device argument
    device = check_device(device, what)
    width = store.group_size
    if resident is None:
        resident = "device" if (device.type != "cpu" and width == 1) else "store"
    if resident not in ("store", "device"):
        raise DDStoreValueError(f"{what}: resident={resident!r}; allowed: None, "
                                f"'store', 'device'")
    if resident == "device" and width != 1:
        raise DDStoreValueError(f"{what}: resident='device' needs the whole series on "
                                f"every rank: store width must be 1, got width={width}")
    return device, resident


def _overflow(value, dtype, big):
    """Refuse an inverse transform whose result the values' dtype cannot hold (it was
    cast to inf without a word)."""
    raise DDStoreValueError(
        f"inverse_transform: a value on the original scale, {value:.6g}, is beyond "
        f"{dtype}'s range (+-{big:.6g}); pass float64 values (x.double() or "
        f"x.astype(np.float64)) to have float64 results")

class WindowDataset(_WindowView):
    """Sliding windows of a series ``[T, nodes, features]`` held once in a DDStore.

    Index-batching (PGT-I): the store holds the (standardised) series once; a window with
    start ``s`` is cut on demand, ``x = series[s : s+h]``, ``y = series[s+h : s+2h]``,
    each ``[h, nodes, features]``.  The dataset itself is every valid start
    ``0 .. T - 2h``; :meth:`splits` gives train / val / test.

    Construction is **collective** over ``store.comm`` (it adds variable ``name``).
    Every rank must pass the same series and settings, and this is checked in the first
    step (the same error on every rank, naming the value and which ranks hold what;
    nothing stored): a series read from files by its files, the values of an array,
    tensor or :func:`~ddstore.sources.series.from_arrays` series by a 64-bit XXH64
    fingerprint of the whole (every rank hashes every step: about 0.13 s per GB of a
    C-ordered array on one core, measured on the 2-core CI VM; a non-contiguous one is
    copied 64 MB at a time first, about 2 s per GB for a Fortran-ordered one), and the
    graph and timestamps always.  Another :class:`Series` reader (neither files nor
    arrays) is not read whole for this: its values are not checked.

    Parameters
    ----------
    store : ddstore.DDStore
        Placement follows its width.  ``width == 1`` (replicated): every rank stores the
        whole series and reads are local copies; shuffle globally with
        ``DistributedSampler`` and no communication.  ``width > 1`` (partitioned): the
        time steps are striped over the ``width`` members of each group (``series / width``
        per rank); windows that straddle two members are served correctly.
    name : str
        Store variable that holds the series.
    series : array, torch tensor or :class:`Series`
        ``[T, nodes]`` or ``[T, nodes, features]``, any memory layout; read block by block
        (never copied whole), so a lazy :class:`Series` (HDF5) is read only where needed.
    horizon : int
        ``h``; needs ``1 <= h`` and ``2h <= T``.
    split : (train, val, test)
        Ratios, each in ``[0, 1]``, summing to 1, train > 0.
    overlap : bool
        Split convention.  **Default ``False``: no leakage** — the time axis is cut at
        ``round(T*train)`` and ``round(T*(train+val))`` and each split keeps only the
        windows inside its segment (no window of one split touches a step of another).
        ``True``: PGT / DCRNN convention — the window starts are cut by the ratios, so the
        last training targets overlap the first validation inputs.
    standardize : bool
        Default True: as-if-SWA statistics — the mean and population standard deviation
        of all training input windows ``x`` as if materialised (a step inside ``k``
        training inputs counts ``k`` times), computed in float64 without materialising,
        and applied to the whole series as it is stored, so ``x`` and ``y`` both come out
        standardised.  Zero std becomes 1.
    per_node : bool
        Statistics per node and feature instead of per feature (over windows, steps, nodes).
    time_features : None, "tod", "dow" or a tuple of them
        Append DCRNN's time-of-day (1 column) and day-of-week one-hot (7 columns)
        features, unstandardised, to ``x`` and ``y`` (needs timestamps).  They are
        computed from a small ``[T, k]`` table at batch time, not stored per node.
    timestamps : array of datetime64, optional
        Overrides the series' own timestamps.
    fill : float, optional
        Replace NaN / inf by this value (before statistics).  Default: a NaN or inf is an
        error that says how many there are and where the first is.
    dtype : numpy float dtype
        Dtype of the stored series (default float32).
    device : str or torch.device
        Where windows are returned.  With a CUDA device and ``width == 1`` the series is
        copied to the device once and windows are gathered there (GPU-index-batching:
        no host copies during training).  With ``width > 1`` windows are read from the
        store on the host; :meth:`loader` then reads them ahead into pinned staging
        buffers and copies them on a side stream (:class:`ddstore.device.DevicePrefetcher`),
        while ``__getitems__`` copies each batch itself.  Allowed: ``"cpu"``, ``"cuda"``
        or ``"cuda:N"`` for a GPU this process sees.
    halo : bool
        Partitioned mode only.  Default True (balanced placement): each split's windows
        (train, val, test) are divided evenly over the members, each member owning one
        piece of every split, and each piece also stores the ``2h - 1`` steps after its
        own, so every window lives wholly on its owner (one-owner reads; with
        :class:`BatchShuffleSampler` ``local=True`` every rank's batches of every split
        are local).  False: exactly ``series / width`` per rank, the time axis striped
        contiguously over the members (so a split may sit on few members); a straddling
        window is read from two owners.  See :func:`series_layout`.
    resident : None, "store" or "device"
        Where windows are cut from.  None: "device" for a non-CPU device with width 1,
        else "store".  "device" keeps a copy of the series as a torch tensor on ``device``
        (allowed with width 1 only; on CPU this is a second copy, useful for testing).
    chunk_bytes : int
        Block size (float64 bytes) for loading and statistics.
    """

    _KIND = KIND

    def __init__(self, store, name, series, horizon, split=(0.7, 0.1, 0.2), *,
                 overlap=False, standardize=True, per_node=False, time_features=None,
                 timestamps=None, fill=None, dtype=np.float32, device="cpu", halo=True,
                 resident=None, chunk_bytes=2 << 20):
        # the first step: every rank checks its arguments (a failure on any rank raises on
        # every rank) and the settings that shape the stored series must agree
        with store.collective("WindowDataset", name) as step:
            # first the files the series was read from, the same on every rank (each
            # rank reads its own steps from the file it opened), so that other files
            # are named before the settings they make differ
            with store.collective(None) as files:
                check_same_files(files.agree(series.files if isinstance(series, Series)
                                             else None))
            series, fill, tf = self._configure(
                store, name, series, horizon, split, overlap, standardize, per_node,
                time_features, timestamps, fill, dtype, device, halo, resident,
                chunk_bytes)
            # and the data in memory: each rank stores its own steps from its own copy,
            # so copies that differ would be stored as a mix of them
            step.agree(same={
                "name": name, "shape": self.shape, "horizon": self.horizon,
                "splits": self.split_bounds, "dtype": self.dtype.str, "halo": self.halo,
                "per_node": self.per_node, "standardize": self.standardized,
                "fill": fill, "time_features": self.time_features,
                **_same_series(series, self.timestamps)})
        T, n, f = self.shape
        dt = self.dtype
        self._tdtype = _torch_dtype(dt)
        self._counts = {}
        self._tf = self._dev_series = None
        self._gone = None
        with store.transaction(f"WindowDataset {name!r}") as txn:  # the series, or nothing
            # an enclosing transaction that rolls back removes the series: this object
            # then refuses to read (and lets go of its device copy)
            txn.on_rollback(self._rolled_back)
            self._load(series, fill, max(1, self.chunk_bytes // (n * f * 8)))
            # the copies on the device (a device out of memory on one rank raises on
            # every rank, and the series is removed)
            with store.collective(None):
                if tf is not None:
                    self._tf = torch.from_numpy(tf.astype(dt)).to(self.device)
                if self.resident == "device":
                    self._dev_series = torch.empty((T, n, f), dtype=self._tdtype,
                                                   device=self.device)
                    rows = max(1, self.chunk_bytes // (n * f * dt.itemsize))
                    for a in range(0, T, rows):
                        b = min(T, a + rows)
                        self._dev_series[a:b] = torch.from_numpy(
                            store.get_range(name, a, b - a))
            if self._KIND == KIND:  # a layer built on it annotates once it is whole
                self._annotate(KIND)

    # ------------------------------------------------------------------ checkpoint
    def _annotation(self):
        """``(meta, arrays, cuts)``: what :meth:`open` needs (no source data)."""
        T, n, f = self.shape
        lay = self.layout
        meta = {"shape": [int(T), int(n), int(f)], "horizon": int(self.horizon),
                "splits": {k: [int(a), int(b)] for k, (a, b) in self.split_bounds.items()},
                "overlap": self.overlap, "per_node": self.per_node,
                "standardize": self.standardized, "dtype": self.dtype.str,
                "time_features": list(self.time_features), "halo": self.halo,
                "source": None if self.source is None else str(self.source),
                "timestamps": self.timestamps is not None, "node_ids": None}
        arrays = {"mean": np.ascontiguousarray(self.mean, dtype=np.float64),
                  "std": np.ascontiguousarray(self.std, dtype=np.float64),
                  "edge_index": self.edge_index.numpy(),
                  "edge_weight": self.edge_weight.numpy()}
        if self.timestamps is not None:
            arrays["timestamps"] = np.ascontiguousarray(
                self.timestamps.astype("datetime64[ns]")).view(np.int64)
        meta["node_ids"], ids = encode_node_ids(self.node_ids, f"WindowDataset "
                                                                f"{self.name!r}")
        if ids is not None:
            arrays["node_ids"] = ids
        cuts = {}
        if self.halo:  # the stored pieces (each with its halo) and where they start
            for k in ("lo", "hi", "stored", "offset"):
                arrays[f"piece_{k}"] = np.ascontiguousarray(lay[k], dtype=np.int64)
            # a restore at another width starts each member's chunk at a piece, so
            # that every window still lies wholly on one member
            arrays["cuts"] = np.unique(np.concatenate(
                ([0], lay["offset"], [lay["member_offset"][-1]]))).astype(np.int64)
            cuts = {self.name: "cuts"}
        return meta, arrays, cuts

    def _annotate(self, kind, meta=None, arrays=None, variables=()):
        """Local, alike on every rank, at the end of a constructor: record the dataset
        for :meth:`open` (its series, plus ``variables``, ``meta``, ``arrays``)."""
        with self.store.collective(None):  # (a rank failing here: agreed, rolled back)
            m, a, cuts = self._annotation()
            m.update(meta or {})
            a.update(arrays or {})
            self.store.annotate(self.name, kind, m, a, variables=(self.name,) +
                                tuple(variables), cuts=cuts)

    @classmethod
    def open(cls, store, name, *, device="cpu", resident=None):
        """Local: the dataset ``name`` built on this store, or brought back by
        :meth:`DDStore.restore <ddstore.DDStore.restore>` from a checkpoint written by
        :meth:`DDStore.save <ddstore.DDStore.save>`, at any rank count and width, without
        the source series (every rank calls it alike; no communication).  Splits,
        horizon, standardisation statistics, time features, graph and every window are
        those that were saved.  ``device`` and ``resident`` as for the constructor.

        The stored series keeps its rows (with the ``2h - 1`` halo steps of each piece
        when it was built partitioned with ``halo=True``); a restore at another width
        starts each member's chunk at a piece, so every window stays on one member.
        Raises :class:`DDStoreValueError` naming the known datasets when ``name`` is
        none of them."""
        ann = store.annotation(name, kind=cls._KIND)
        self = cls.__new__(cls)
        with ann.reading(f"{cls.__name__}.open({name!r})"):
            _check_annotation(store, name, ann.meta)
            self._open(store, name, ann, device, resident)
        return self

    def _open(self, store, name, ann, device, resident):
        meta, arr = ann.meta, ann.arrays
        T, n, f = (int(v) for v in meta["shape"])
        self.store, self.name, self.shape = store, name, (T, n, f)
        self._series = store.handle(name)  # (see _load)
        self.horizon, self.num_steps, self.num_nodes = int(meta["horizon"]), T, n
        self.num_series_features = f
        self.overlap, self.per_node = bool(meta["overlap"]), bool(meta["per_node"])
        self.standardized = bool(meta["standardize"])
        self.split_bounds = {k: (int(a), int(b)) for k, (a, b) in meta["splits"].items()}
        self.source = meta["source"]
        self.dtype = dt = np.dtype(meta["dtype"])
        self.timestamps = (arr["timestamps"].view("datetime64[ns]") if meta["timestamps"]
                           else None)
        self.time_features = tuple(meta["time_features"])
        tf = (time_feature_array(self.timestamps, self.time_features, dt)
              if self.time_features else None)
        self.num_features = f + (0 if tf is None else tf.shape[1])
        self.node_ids = decode_node_ids(meta["node_ids"], arr.get("node_ids"))
        self.mean, self.std = arr["mean"].copy(), arr["std"].copy()
        self.edge_index = torch.from_numpy(arr["edge_index"].copy())
        self.edge_weight = torch.from_numpy(arr["edge_weight"].copy())
        self.device, self.resident = _placement(
            store, device, resident, f"{type(self).__name__}.open({name!r})")
        width = store.group_size
        # the layout of the rows as they are now (the pieces as saved, on the members
        # whose chunks hold them)
        self.halo = bool(meta["halo"])
        self.layout = _restored_layout(store, name, self.halo, arr)
        self._lo, self._hi, self._offset = (self.layout[k].tolist()
                                            for k in ("lo", "hi", "offset"))
        self._init_view(self, "all", 0, num_windows(T, self.horizon))
        self._tdtype = _torch_dtype(dt)
        self._counts = {}
        self._tf = self._dev_series = None
        self._gone = None
        if tf is not None:
            self._tf = torch.from_numpy(tf.astype(dt)).to(self.device)
        if self.resident == "device":  # the decision (resident=None may choose it)
            self._dev_series = torch.empty((T, n, f), dtype=self._tdtype,
                                           device=self.device)
            for lo, hi, row in zip(self._lo, self._hi, self._offset):
                if hi > lo:
                    self._dev_series[lo:hi] = torch.from_numpy(
                        store.get_range(name, row, hi - lo))

    def _configure(self, store, name, series, horizon, split, overlap, standardize,
                   per_node, time_features, timestamps, fill, dtype, device, halo,
                   resident, chunk_bytes):
        """Local validation of every argument; no communication."""
        if not isinstance(name, str) or not name:
            raise DDStoreValueError(f"name must be a non-empty str, got {name!r}")
        check_object_name(store, name, self._KIND, f"{self._KIND} {name!r}")
        if not isinstance(series, Series):
            series = from_arrays(series)
        T, n, f = series.shape
        self.shape = (T, n, f)
        h = check_horizon(horizon, T)
        self.store, self.name, self.horizon = store, name, h
        self.num_steps, self.num_nodes = T, n
        self.num_series_features = f
        # flags are True or False, never truthiness ("no" or None would be read wrongly)
        self.overlap = as_bool(overlap, "WindowDataset: overlap")
        self.per_node = as_bool(per_node, "WindowDataset: per_node")
        self.standardized = as_bool(standardize, "WindowDataset: standardize")
        halo = as_bool(halo, "WindowDataset: halo")
        self.chunk_bytes = as_int(chunk_bytes, "WindowDataset: chunk_bytes", 1)
        self.split_bounds = split_ranges(T, h, split, self.overlap)
        self.source = series.source
        dt = as_dtype(dtype, "WindowDataset: dtype", "f",
                      "float16, float32, float64 (the stored series' dtype)", (2, 4, 8))
        self.dtype = dt
        if fill is not None:
            if (isinstance(fill, bool) or not isinstance(fill, numbers.Real)
                    or not np.isfinite(fill)):
                raise DDStoreValueError(f"fill={fill!r} must be a finite number (or None to "
                                        f"reject NaN/inf)")
            fill = float(fill)
        kinds = _check_time_features(time_features)
        ts = series.timestamps
        if timestamps is not None:
            ts = Series((T, 1, 1), np.float32, None, timestamps=timestamps,
                        source="timestamps").timestamps
        if kinds and ts is None:
            raise DDStoreValueError(f"time_features={kinds} needs timestamps: pass "
                                    f"timestamps=[T] datetime64 or load a timestamped series")
        self.timestamps = ts
        self.time_features = kinds
        tf = time_feature_array(ts, kinds, dt) if kinds else None
        self.num_features = f + (0 if tf is None else tf.shape[1])
        self.device, self.resident = _placement(store, device, resident,
                                                     f"WindowDataset({name!r})")
        width = store.group_size
        self.halo = bool(halo) and width > 1
        self.layout = series_layout(T, h, width, self.halo, self.split_bounds)
        # the same as Python lists, for scalar lookups on the per-window path
        self._lo, self._hi, self._offset = (self.layout[k].tolist()
                                            for k in ("lo", "hi", "offset"))
        # copies: the dataset's graph is its own (a read-only or later changed array of
        # the caller's is neither warned about by torch nor seen)
        self.edge_index = torch.from_numpy(np.array(series.edge_index))
        self.edge_weight = torch.from_numpy(np.array(series.edge_weight))
        self.node_ids = series.node_ids
        self._init_view(self, "all", 0, num_windows(T, h))
        return series, fill, tf

    # ------------------------------------------------------------------ loading
    def _load(self, series, fill, chunk):
        store = self.store
        T, n, f = series.shape
        g = store.group_rank
        lay = self.layout
        # this member's pieces: (first step, owned stop, rows stored)
        pieces = [(int(a), int(b), int(c)) for a, b, c, m in
                  zip(lay["lo"], lay["hi"], lay["stored"], lay["member"]) if m == g]
        train = self.split_bounds["train"]
        check = series.dtype.kind == "f"

        # pass 1 (own steps only): non-finite values and as-if-SWA moments; every rank
        # learns every rank's counts and moments in the step's round
        with store.collective(None) as step:
            nan_count, first = 0, None
            moments = Moments.empty(n, f, self.per_node)
            for lo, hi, _ in pieces:
                c, fx, m = self._scan(series, fill, chunk, lo, hi, train, check)
                nan_count += c
                first = fx if first is None or (fx is not None and fx < first) else first
                moments = moments.merge(m)
            info = step.agree((nan_count, first, moments.as_tuple()))
            # decided over the whole communicator, not per replica group: every group
            # reads its own copy, and a NaN in one copy must stop every rank
            width = store.group_size
            for group in range(store.replicas):
                members = info[group * width:(group + 1) * width]
                total_bad = sum(c for c, _, _ in members)
                if total_bad and fill is None:
                    t, node, feat, val = min(fx for _, fx, _ in members if fx is not None)
                    ranks = (f"rank {group}" if width == 1 else
                             f"ranks {group * width}-{(group + 1) * width - 1}")
                    where = f" (as read by {ranks})" if store.replicas > 1 else ""
                    src = getattr(series, "source", None)
                    src = f" (from {src})" if src and src != "array" else ""
                    raise DDStoreValueError(
                        f"series for {self.name!r}{src} has {total_bad} non-finite values (NaN "
                        f"or inf) of {T * n * f}{where}; the first at step {t}, node "
                        f"{node}, feature {feat} (value {val}); allowed: finite values "
                        f"only, or pass fill=<number>")
        mine = info[store.group * width:(store.group + 1) * width]
        if self.standardized:
            merged = Moments.empty(n, f, self.per_node)
            for _, _, (cnt, mean, m2) in mine:
                merged = merged.merge(Moments(cnt, mean, m2))
            self.mean, self.std = merged.mean_std()
        else:
            shape = (n, f) if self.per_node else (f,)
            self.mean, self.std = np.zeros(shape), np.ones(shape)
        self._store_series(series, fill, chunk, pieces, check)

    def _scan(self, series, fill, chunk, lo, hi, train, check):
        """Pass 1 over this rank's own steps: non-finite count, first, moments."""
        h, n, f = self.horizon, self.num_nodes, self.num_series_features
        nan_count, first = 0, None
        moments = Moments.empty(n, f, self.per_node)
        for a in range(lo, hi, chunk):
            b = min(hi, a + chunk)
            raw = series.read(a, b)
            if check:
                bad = ~np.isfinite(raw)
                c = int(np.count_nonzero(bad))
                if c:
                    if first is None:
                        k = int(np.argmax(bad.reshape(-1)))
                        t, node, feat = np.unravel_index(k, raw.shape)
                        first = (a + int(t), int(node), int(feat),
                                 float(raw[t, node, feat]))
                    nan_count += c
                del bad
            if self.standardized and not (nan_count and fill is None):
                w = window_weights(a, b, train, h)
                nz = np.flatnonzero(w)
                if nz.size:
                    i0, i1 = int(nz[0]), int(nz[-1]) + 1
                    vals = np.asarray(raw[i0:i1], dtype=np.float64)
                    if fill is not None and check:
                        vals = np.where(np.isfinite(vals), vals, fill)
                    moments = moments.merge(chunk_moments(vals, w[i0:i1], self.per_node))
                    del vals
            del raw
        return nan_count, first, moments

    def _store_series(self, series, fill, chunk, pieces, check):
        store = self.store
        n, f = self.num_nodes, self.num_series_features
        g = store.group_rank
        # pass 2: own pieces (+ halo) -> store, standardised, one after the other
        store.init(self.name, sum(c for _, _, c in pieces), (n, f), self.dtype)
        # read through a handle: bound to this series, not to the name (a series
        # removed and another added under the name is refused, not read as this one)
        self._series = store.handle(self.name)
        blocks, row = [], 0  # (first step, stop, local row of the first step)
        for lo, _, stored in pieces:
            blocks += [(a, min(lo + stored, a + chunk), row + a - lo)
                       for a in range(lo, lo + stored, chunk)]
            row += stored
        # the fill is a step's local part: an I/O error on one rank raises on every rank
        # (the caller's transaction then removes the series)
        with store.collective(None):
            got = store.local_rows(self.name)
            offsets = self.layout["member_offset"]
            want = (int(offsets[g]), int(offsets[g + 1]))
            if tuple(got) != want or store.nrows(self.name) != int(offsets[-1]):
                raise DDStoreStateError(f"{self.name!r}: store placed local rows at {got}, "
                                        f"expected {want}")
            mean, std = self.mean, self.std
            for a, b, local in blocks:
                raw = series.read(a, b)
                if self.standardized or (fill is not None and check):
                    vals = np.asarray(raw, dtype=np.float64)
                    if fill is not None and check:
                        vals = np.where(np.isfinite(vals), vals, fill)
                    with np.errstate(over="ignore"):  # inf: refused by _check_fits
                        if self.standardized:
                            vals = (vals - mean) / std
                        block = vals.astype(self.dtype)
                    del vals
                else:
                    with np.errstate(over="ignore"):
                        block = np.asarray(raw, dtype=self.dtype)
                self._check_fits(block, raw, a)
                self._check_exact(block, raw, a)
                store.update(self.name, block, local)
                del raw, block
        store.sync()

    def _check_fits(self, block, raw, first):
        """Raise naming the first value of ``block`` (steps from ``first``, as stored)
        that the cast to the stored dtype made infinite: the source's values are finite
        here (checked, or filled), so an inf is an overflow that would be stored."""
        if (self.dtype.itemsize >= 8 and not self.standardized) or np.isfinite(block).all():
            return
        k = int(np.argmax(~np.isfinite(block).reshape(-1)))
        t, node, feat = np.unravel_index(k, block.shape)
        value = float(raw[t, node, feat])
        what = " once standardised" if self.standardized else ""
        allowed = ["values within that range"] + \
            (["dtype=np.float64"] if self.dtype.itemsize < 8 else []) + \
            ([] if self.standardized else ["standardize=True"])  # (only what would help)
        raise DDStoreValueError(
            f"series for {self.name!r}: step {first + int(t)}, node {int(node)}, feature "
            f"{int(feat)} (value {value!r}){what} does not fit the stored dtype={self.dtype} "
            f"(largest finite {float(np.finfo(self.dtype).max):.4g}); allowed: "
            f"{', or '.join(allowed)}")

    def _check_exact(self, block, raw, first):
        """Raise naming the first integer of ``raw`` (an integer series stored as is, not
        standardised) that the stored float dtype cannot hold exactly (float32 holds the
        integers up to 2**24 in magnitude, float16 2**11, float64 2**53): rounding it
        would store another count than the source's."""
        raw = np.asarray(raw)
        if self.standardized or raw.dtype.kind not in "iub":
            return
        exact = 2 ** (np.finfo(self.dtype).nmant + 1)
        if raw.size == 0 or max(int(raw.max()), -int(raw.min())) <= exact:
            return  # (in the integers' own dtype: a float64 would round 2**53 + 1)
        with np.errstate(invalid="ignore"):
            changed = block.astype(raw.dtype) != raw
        if not changed.any():
            return
        t, node, feat = np.unravel_index(int(np.argmax(changed.reshape(-1))), raw.shape)
        more = ["dtype=np.float64"] if self.dtype.itemsize < 8 else []
        raise DDStoreValueError(
            f"series for {self.name!r}: step {first + int(t)}, node {int(node)}, feature "
            f"{int(feat)} holds the integer {int(raw[t, node, feat])}, which the stored "
            f"dtype={self.dtype} cannot hold exactly (it would be stored as "
            f"{block[t, node, feat].item()!r}); allowed: integers within +-{exact}"
            + "".join(f", or {m}" for m in more + ["standardize=True"]))

    # ------------------------------------------------------------------ reading
    def rows_of(self, starts):
        """Store rows where windows ``starts`` (global, int64 array) begin."""
        if not self.halo:
            return starts
        lay = self.layout
        piece = np.searchsorted(lay["hi"], starts, side="right")
        return lay["offset"][piece] + starts - lay["lo"][piece]

    def owner_of(self, starts):
        """Group rank that owns (stores, with all its steps) each window start."""
        lay = self.layout
        return lay["member"][np.searchsorted(lay["hi"], np.asarray(starts), side="right")]

    def _fetch_one(self, start):
        """Window with global ``start`` (an int) -> ``(x, y)`` ``[h, nodes, features]``:
        one contiguous store read of ``2h`` rows (x then y), no index arrays."""
        if self._gone:
            raise DDStoreStateError(self._gone)
        if self._dev_series is not None or self._tf is not None:
            # this class's windows alone (a subclass's _fetch adds to the batch)
            x, y = WindowDataset._fetch(self, np.array([start], dtype=np.int64))
            return x[0], y[0]
        h = self.horizon
        row = start
        if self.halo:
            g = bisect.bisect_right(self._hi, start)
            row = self._offset[g] + start - self._lo[g]
        buf = self.store.get_range(self._series, row, 2 * h)
        x, y = torch.from_numpy(buf[:h]), torch.from_numpy(buf[h:])
        if self.device.type != "cpu":
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True)
        return x, y

    def _check_resident(self):
        """The series on the device is read without the store: refuse, as a read from
        the store does, once the store's series is removed (and let go of the copy)."""
        try:
            self.store.nrows(self._series)
        except DDStoreStateError as exc:
            self._gone = str(exc)
            self._tf = self._dev_series = None
            raise

    def free(self):
        """Collective: remove the series (and what a subclass built with it) from the
        store and let go of the copies on the device.  Safe to call twice; the dataset
        then refuses to read, saying it was freed.  Another dataset built under its
        name since is not touched.  Inside a transaction that rolls back, the series and
        this dataset come back as they were."""
        store = self.store
        with store.transaction("WindowDataset.free") as txn:
            with store.collective("WindowDataset.free", self.name):
                names = self._held()
            if names:
                store.remove(*names)
            kept = self._gone, self._tf, self._dev_series
            txn.on_rollback(lambda: self._put_back(kept))
            self._gone = (f"{type(self).__name__} {self.name!r} was freed (free()); "
                          f"build it again, or open() one the store holds")
            self._tf = self._dev_series = None

    def _put_back(self, kept):
        """A rollback put the freed series back: so is this dataset."""
        self._gone, self._tf, self._dev_series = kept

    def _held(self):
        """Local: the names of this dataset's variables the store still holds."""
        return [self.name] if self._series in self.store else []

    def _rolled_back(self):
        """A rollback removed the series (see the constructor)."""
        self._gone = (f"{type(self).__name__} {self.name!r} was rolled back with the "
                      f"transaction that built it (its series is removed); build it again")
        self._tf = self._dev_series = None

    def _epoch_rows(self, starts):
        """``(rx, ry)``: the series rows of the windows ``starts`` (a tensor on the
        device), flat: ``rx[i*h:(i+1)*h]`` are window ``i``'s x rows, ``ry`` its y rows
        (the ``rows`` argument of :meth:`_fetch`)."""
        ar = self._aranges(starts.device)
        rx = (starts[:, None] + ar[0]).reshape(-1)
        return rx, rx + self.horizon

    def _fetch(self, starts, host=False, into=None, rows=None, direct=None):
        """Windows with global ``starts`` -> ``(x, y)`` ``[B, h, nodes, features]``.

        ``starts``: int64 numpy array, or (series on the device) a tensor on the device.
        ``host``: leave windows read from the store on the host (the device pipeline
        copies them); ``into(numel, dtype)``: a 1-D CPU tensor to read them into.
        ``rows``: with the series on the device, the windows' rows as
        :meth:`_epoch_rows` gives them (the resident loader makes them once for a group
        of batches), else None: made here.  ``direct``: with ``into``, the device the
        pipeline copies to: when this process maps every window of the batch, ``x`` and
        ``y`` are :class:`ddstore.device.DeviceRows` copied from the store's memory
        where it lies (see :meth:`_direct`), else read into ``into`` as without."""
        if self._gone:
            raise DDStoreStateError(self._gone)
        if self._dev_series is not None:
            self._check_resident()
        h, B = self.horizon, len(starts)
        n, f = self.num_nodes, self.num_series_features
        if direct is not None and into is not None and self._tf is None and \
                self._dev_series is None:
            xy = self._direct(starts, direct)
            if xy is not None:
                return xy
        if self._dev_series is not None:  # the series lives on the device
            s = self._dev_series
            rx, ry = rows if rows is not None else self._epoch_rows(
                torch.as_tensor(starts, device=self.device))
            x = s.index_select(0, rx).view(B, h, n, f)
            y = s.index_select(0, ry).view(B, h, n, f)
        else:  # one store read: every window's x ranges, then every window's y ranges
            rows = self.rows_of(starts)
            counts = self._counts.get(B)
            if counts is None:
                counts = self._counts[B] = np.full(2 * B, h, dtype=np.int64)
            if into is not None:
                flat = into(2 * B * h * n * f, self._tdtype)
                self.store.read_ranges(self._series, np.concatenate((rows, rows + h)), counts,
                                       out=flat.numpy().reshape(2 * B * h, n, f))
                xy = flat.view(2, B, h, n, f)
                x, y = xy[0], xy[1]
            else:
                buf = self.store.read_ranges(self._series, np.concatenate((rows, rows + h)),
                                             counts).reshape(2, B, h, n, f)
                x, y = torch.from_numpy(buf[0]), torch.from_numpy(buf[1])
            if self.device.type != "cpu" and not host:
                x = x.to(self.device, non_blocking=True)
                y = y.to(self.device, non_blocking=True)
        if self._tf is not None:
            tf = self._tf
            if host and self._dev_series is None and tf.device.type != "cpu":
                tf = self.__dict__.get("_tf_host")
                if tf is None:
                    tf = self._tf_host = self._tf.cpu()
            st = torch.as_tensor(starts, device=tf.device)
            ar = self._aranges(tf.device)
            k = tf.shape[1]
            tx = tf[st[:, None] + ar[0]].unsqueeze(2).expand(B, h, n, k)
            ty = tf[st[:, None] + ar[1]].unsqueeze(2).expand(B, h, n, k)
            x = torch.cat([x, tx], dim=-1)
            y = torch.cat([y, ty], dim=-1)
        return x, y

    def _direct(self, starts, device):
        """``(x, y)`` of windows ``starts`` as :class:`ddstore.device.DeviceRows` whose
        pieces are the windows' rows in the store's memory (page-locked in place on
        CUDA: :meth:`DDStore.device_views <ddstore.DDStore.device_views>`), one piece
        per window and half; None when a window lies in a chunk this process does not
        map (read by MPI_Get) or across two chunks (``halo=False``): the batch is then
        read into staging."""
        from ..device import DeviceRows
        views = self.store.device_views(self._series, device)
        rows = self.rows_of(starts)
        offsets = self.layout["member_offset"]
        member = np.searchsorted(offsets, rows, side="right") - 1
        h = self.horizon
        if any(views[m] is None for m in np.unique(member)) or \
                np.any(rows + 2 * h > offsets[member + 1]):
            return None
        local = rows - offsets[member]
        shape = (len(rows), h, self.num_nodes, self.num_series_features)
        dst, nrows = np.arange(len(rows), dtype=np.int64) * h, np.full(len(rows), h)
        return (DeviceRows(shape, self._tdtype, views, member, local, dst, nrows, 2),
                DeviceRows(shape, self._tdtype, views, member, local + h, dst, nrows, 2))

    def _aranges(self, device):
        """``(arange(h), arange(h, 2h))`` on ``device``, made once."""
        cache = self.__dict__.setdefault("_arange_cache", {})
        ar = cache.get(device)
        if ar is None:
            h = self.horizon
            ar = cache[device] = (torch.arange(h, device=device),
                                  torch.arange(h, 2 * h, device=device))
        return ar

    # ------------------------------------------------------------------ API
    def splits(self):
        """``(train, val, test)`` :class:`WindowSplit` views, in time order.

        Default convention (``overlap=False``): disjoint time segments, no window of one
        split reaches into another; ``overlap=True``: PGT's cut of the window starts.
        """
        return tuple(WindowSplit(self, name, *self.split_bounds[name])
                     for name in SPLIT_NAMES)

    def inverse_transform(self, values, features=None):
        """Map standardised values back to the original scale: ``values * std + mean``.

        ``values`` (numpy array or torch tensor) ends in ``[..., nodes, F]`` where ``F`` is
        the series' feature count, or that plus the time features (left unchanged), or
        ``len(features)`` when ``features`` lists which series features it holds (e.g.
        ``features=[0]`` for a model predicting feature 0 only).  Per-feature statistics
        need only ``[..., F]``.  Returns the same type, on the same device.
        """
        f = self.num_series_features
        is_torch = isinstance(values, torch.Tensor)
        arr = values if is_torch else np.asarray(values)
        last = arr.shape[-1] if arr.ndim else 0
        if features is not None:
            feats = [integer_scalar(i) for i in np.atleast_1d(features)]
            if not all(is_int(i) for i in feats):
                raise DDStoreValueError(f"inverse_transform: features={features!r} must "
                                        f"be integers in [0, {f})")
            feats = [int(i) for i in feats]
            if any(not 0 <= i < f for i in feats):
                raise DDStoreValueError(f"inverse_transform: features {feats} out of range "
                                        f"[0, {f})")
            if last != len(feats):
                raise DDStoreValueError(f"inverse_transform: last dimension {last} != "
                                        f"{len(feats)} features {feats}")
        elif last in (f, self.num_features):
            feats = list(range(f))
        else:
            allowed = f"{f} (series features)" + (
                f" or {self.num_features} (with time features)"
                if self.num_features != f else "")
            raise DDStoreValueError(f"inverse_transform: last dimension {last}; allowed: "
                                    f"{allowed}, or pass features=")
        mean, std = self.mean[..., feats], self.std[..., feats]
        if self.per_node and (arr.ndim < 2 or arr.shape[-2] != self.num_nodes):
            raise DDStoreValueError(f"inverse_transform: per-node statistics need values "
                                    f"[..., {self.num_nodes}, F], got shape "
                                    f"{tuple(arr.shape)}")
        k = len(feats)
        if is_torch:
            dt = arr.dtype if arr.is_floating_point() else torch.float64
            # computed in float64 (a float16 mean or std above 65504 was inf: every value
            # inf or NaN), then given the values' dtype, as the numpy path does
            wide = torch.float64
            m = torch.as_tensor(mean, dtype=wide, device=arr.device)
            s = torch.as_tensor(std, dtype=wide, device=arr.device)
            head = arr[..., :k].to(wide) * s + m
            if dt != wide:  # (what the cast makes infinite, from a finite value)
                cast = head.to(dt)
                over = cast.isinf() & head.isfinite()
                if bool(over.any()):
                    _overflow(head[over][0].item(), torch.finfo(dt).dtype,
                              float(torch.finfo(dt).max))
                head = cast
            return torch.cat([head, arr[..., k:].to(dt)], dim=-1) if last > k else head
        dt = arr.dtype if arr.dtype.kind == "f" else np.float64
        head = arr[..., :k].astype(np.float64) * std + mean
        if np.dtype(dt).itemsize < 8:  # (what the cast makes infinite, from a finite value)
            with np.errstate(over="ignore"):
                cast = head.astype(dt)
            over = np.isinf(cast) & np.isfinite(head)
            if over.any():
                _overflow(float(head[over][0]), np.dtype(dt), float(np.finfo(dt).max))
            head = cast
        else:
            head = head.astype(dt)
        return np.concatenate([head, arr[..., k:].astype(dt)], axis=-1) if last > k \
            else head

    def transform(self, values):
        """Standardise raw values ``[..., nodes, F]`` with this dataset's statistics."""
        arr = np.asarray(values, dtype=np.float64)
        return (arr - self.mean) / self.std

    @property
    def device_series(self):
        """The whole series on :attr:`device` (a ``[T, nodes, features]`` tensor) when
        the dataset was built with ``resident="device"``, else None (read-only)."""
        return self._dev_series

    def local_bytes(self):
        """Bytes of the series this rank stores (its share, plus halo)."""
        g = self.store.group_rank
        return int(self.layout["member_stored"][g]) * self.num_nodes * \
            self.num_series_features * self.dtype.itemsize

    def __repr__(self):
        return (f"WindowDataset({self.name!r}, T={self.num_steps}, nodes={self.num_nodes}, "
                f"features={self.num_features}, horizon={self.horizon}, windows={len(self)},"
                f" width={self.store.group_size}, halo={self.halo}, "
                f"resident={self.resident!r}, device={self.device})")


def _check_annotation(store, name, meta):
    """Raise a :class:`DDStoreValueError` unless dataset ``name``'s annotation agrees
    with the series it describes: its shape with the stored rows' shape, a horizon in
    ``[1, T // 2]``, splits of window starts within the series, an empty one anywhere
    in it (without ``overlap``, a split of ratio 0 is empty at its first time step: at
    ``T`` for the test split) (a checkpoint's manifest edited by hand: a horizon or
    splits changed read other windows, or raised a bare IndexError)."""
    try:
        T, n, f = (int(v) if is_int(v) else None for v in meta["shape"])
        h, splits = meta["horizon"], meta["splits"]
        windows = num_windows(T, h) if is_int(h) and T and 1 <= h <= T // 2 else None
        ok = windows is not None and store.handle(name).row_shape == (n, f) and \
            isinstance(splits, dict) and all(
                is_int(a) and is_int(b) and (0 <= a <= b <= windows or 0 <= a == b <= T)
                for a, b in splits.values())
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise DDStoreValueError(
            f"WindowDataset.open({name!r}): its annotation (shape {meta.get('shape')!r}, "
            f"horizon {meta.get('horizon')!r}, splits {meta.get('splits')!r}) does not "
            f"match its series (a damaged checkpoint?)")
