"""GraphDataset: PyG graph samples kept in a DDStore, as a torch Dataset."""
import copy
import functools
import itertools
import logging
import math
import sys
import time

import numpy as np
import torch

from ..errors import DDStoreError, DDStoreIndexError, DDStoreValueError, plain_class
from .._collective import format_ranks
from .._fingerprint import same_data
from ..memory import release_free_heap
from ..prefetch import BatchEpoch
from ..sources import AdiosSource, PickleDirSource, SequenceSource, Source
from ..sources.base import check_same_files
from .._checks import as_bool, as_indices, integer_scalar, is_int, partition
from ..annotations import check_object_name
from .io import META_KIND
from .layout import GraphLayout, collate_records

__all__ = ["GraphDataset", "timed_batches"]

KIND = "GraphDataset"  # the kind of its annotation (checkpoint and restart)

logger = logging.getLogger("ddstore.graphs")

_WORKER_MESSAGE = (
    "GraphDataset {name!r} is read through MPI windows that belong to the training "
    "process, and its batches are made there; DataLoader worker processes "
    "(num_workers > 0) are not supported for it. Use num_workers=0: each mini-batch is "
    "already one batched one-sided read; to overlap the reads with training, read "
    "ahead in a thread: ds.loader(batch_size, prefetch=2).")


def timed_batches(loader):
    """Iterate ``loader``, yielding ``(batch, seconds)``: the time spent producing each
    batch (store reads and collation), not the caller's work on it.  Divide by
    ``batch.num_graphs`` for the per-graph load latency."""
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            return
        yield batch, time.perf_counter() - t0


def _identity(batch):
    return batch


def _human(nbytes):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(nbytes) < 1024 or unit == "TiB":
            return f"{nbytes:.1f} {unit}" if unit != "B" else f"{int(nbytes)} B"
        nbytes /= 1024.0


class GraphDataset(torch.utils.data.Dataset):
    """PyG ``Data`` samples held in a :class:`~ddstore.DDStore`, served to any rank.

    Build one with a constructor (each is **collective** over the store's communicator,
    and each rank loads only its own chunk ``ddstore.partition(len, group_size,
    group_rank)`` of the source):

    - :meth:`from_samples` (an indexable sequence, the same on every rank),
    - :meth:`from_pickle_dir` (one pickle file per sample, PFF),
    - :meth:`from_adios` (an ADIOS2 file written by :func:`write_adios`, CFF),
    - :meth:`from_source` (any :class:`ddstore.sources.Source`);

    or reopen one by name with :meth:`open` (after :meth:`DDStore.restore
    <ddstore.DDStore.restore>` of a checkpoint: no source needed).

    Reading is local and one-sided: ``ds[i]`` is a ``Data``; ``ds.__getitems__(idx)``
    (what ``DataLoader`` calls for a whole mini-batch) is a list of ``Data`` fetched with
    one batched read; :meth:`get_batch` is a ready ``Batch`` (one read, no per-graph
    objects) and :meth:`loader` a ``DataLoader`` of such batches.  Every sample equals
    what went in, key by key, type, dtype and shape included.

    ``DataLoader(num_workers > 0)`` is refused with a :class:`DDStoreValueError` on the
    first batch (its batches are made in the training process: one batched read each).

    ``transform`` (a keyword of every constructor and of :meth:`open`, or the attribute,
    as PyG's ``Dataset.transform``): a callable applied to each graph on every access
    (``ds[i]``, ``__getitems__``, and the graphs of :meth:`get_batch` and :meth:`loader`,
    collated by ``Batch.from_data_list`` after it); views (``index_select``, ``shuffle``,
    slices) keep it.  None (the default): the graphs as stored, batches collated straight
    from the packed read.  A random transform under read-ahead (``prefetch``, ``device``)
    draws in the read-ahead thread, from torch's global generator (docs/development.md,
    "Known debts": its batches then differ from run to run).
    """

    def __init__(self, store, name, layout, nsamples, transform=None):
        self.store = store
        self.transform = transform
        self.name = name
        # read through a handle: bound to these records, not to the name (removed and
        # others added under the name: refused, not read as these)
        self._records = store.handle(name)
        self.layout = layout
        self._n = int(nsamples)
        self._map = None  # a view's graphs (index_select): their ids in the store

    # ------------------------------------------------------------------ building
    @classmethod
    def from_samples(cls, store, name, samples, progress=True, *, transform=None):
        """Collective: store the graphs ``samples`` (a list, or any map-style Dataset
        that builds samples on access; the same on every rank).  Each rank reads the
        ``samples[i]`` of its own chunk, and on more than one rank the first, middle and
        last samples, compared between the ranks (a sample a rank cannot read, a shard
        held elsewhere, is not compared there)."""
        with store.collective("GraphDataset.from_samples", name) as step:
            share = _Share(store, name, SequenceSource(samples), progress)
            reference = share.agree(step)
        return cls._store(store, name, share, reference, progress, transform)

    @classmethod
    def from_pickle_dir(cls, store, name, path, pattern="*.pkl", progress=True, *,
                        transform=None):
        """Collective: load a PFF directory (one pickle per sample, see
        :func:`write_pickle_dir`); each rank unpickles (restricted) only its files."""
        with store.collective("GraphDataset.from_pickle_dir", name) as step:
            share = _Share(store, name, PickleDirSource(path, pattern), progress)
            reference = share.agree(step)
        return cls._store(store, name, share, reference, progress, transform)

    @classmethod
    def from_adios(cls, store, name, path, progress=True, *, transform=None):
        """Collective: load a CFF ADIOS2 file written by :func:`write_adios`; each rank
        reads only its row range."""
        source = None
        try:
            with store.collective("GraphDataset.from_adios", name) as step:
                source = AdiosSource(path)
                share = _Share(store, name, source, progress)
                reference = share.agree(step)
            return cls._store(store, name, share, reference, progress, transform)
        finally:
            if source is not None:
                source.close()

    @classmethod
    def from_source(cls, store, name, source, progress=True, *, transform=None):
        """Collective: load the rank's chunk of ``source`` into records ``name``.

        Every error (an unreadable file, a sample whose keys, dtypes or shapes differ,
        an empty data set, whatever a user's ``Dataset`` raises) is raised on every rank,
        naming the sample and the key, and the store stays usable.
        """
        with store.collective("GraphDataset.from_source", name) as step:
            if not isinstance(source, Source):
                raise DDStoreValueError(f"source must be a ddstore.sources.Source, got "
                                        f"{type(source).__name__}")
            share = _Share(store, name, source, progress)
            reference = share.agree(step)
        return cls._store(store, name, share, reference, progress, transform)

    @classmethod
    def _store(cls, store, name, share, reference, progress, transform):
        """Collective, after the ranks agreed on ``reference`` (the layout): copy this
        rank's ``share`` into records ``name`` (all or nothing) and log the bytes held."""
        before = store.nbytes()
        with store.transaction(f"GraphDataset {name!r}"):  # the records, or nothing
            if share.records is None:  # a CFF file: read block by block into the store
                sizes = {k: np.diff(o) for k, o in share.offsets.items()}
                _fill_records(store, name, reference, sizes,
                              _cff_blocks(share.source, share.lo, share.offsets),
                              progress, "loading")
            else:
                keys = [lay.key for lay in reference.keys]
                records, share.records = share.records, None
                sizes = {k: np.fromiter((r[k].shape[0] for r in records), np.int64,
                                        len(records)) for k in keys}
                _fill_records(store, name, reference, sizes, _owned_blocks(records, keys),
                              progress, "storing")
                del records
            # what open() needs to serve the records again from a restored store (in a
            # step: a rank that fails here is agreed, and the records roll back on every
            # rank; alone, the others went on to the gather below and waited for ever)
            with store.collective(None):
                store.annotate(name, KIND, {"layout": reference.to_list(),
                                            "nsamples": int(share.total)}, variables=(name,))
        release_free_heap()  # the samples read and freed: back to the kernel, not held
        held = store.nbytes() - before
        sizes = store.comm.gather(held, root=0)
        if store.comm.rank == 0:
            logger.info("graphs %r: %d graphs, %d replica%s of width %d; bytes per rank: "
                        "%s (min %s, max %s, total %s)", name, share.total, store.replicas,
                        "s" if store.replicas != 1 else "", store.width, sizes,
                        _human(min(sizes)), _human(max(sizes)), _human(sum(sizes)))
        return cls(store, name, reference, share.total, transform)

    @classmethod
    def open(cls, store, name, *, transform=None):
        """Local: the dataset ``name`` built by a constructor on this store, or brought
        back by :meth:`DDStore.restore <ddstore.DDStore.restore>` (or
        :meth:`~ddstore.DDStore.load`) from a checkpoint that :meth:`DDStore.save
        <ddstore.DDStore.save>` wrote, at any rank count and width: no source data is
        read and no communication is made (every rank calls it alike).  Every sample
        equals the one that was saved.  Raises :class:`DDStoreValueError` naming the
        graph datasets the store holds when ``name`` is none of them."""
        ann = store.annotation(name, kind=KIND)
        # the annotation checked against the records it describes (a checkpoint's
        # manifest edited by hand: nsamples 17 -> 5 opened as 5 graphs of 17)
        where = f"GraphDataset.open({name!r})"
        n, held = ann.meta.get("nsamples"), store.nrows(name)
        if not is_int(n) or n != held:
            raise DDStoreValueError(f"{where}: its annotation says nsamples={n!r}, its "
                                    f"records hold {held} graphs (a damaged checkpoint?)")
        try:
            layout = GraphLayout(ann.meta["layout"])
        except (DDStoreError, KeyError, TypeError, ValueError) as exc:
            raise DDStoreValueError(f"{where}: its annotation's graph layout cannot be "
                                    f"read ({type(exc).__name__}: {exc}; a damaged "
                                    f"checkpoint?)") from None
        keys = sorted(store.handle(name).keys)
        if sorted(layout.by_key) != keys:
            raise DDStoreValueError(f"{where}: its annotation's layout names keys "
                                    f"{sorted(layout.by_key)}, its records hold {keys} (a "
                                    f"damaged checkpoint?)")
        return cls(store, name, layout, n, transform)

    # ------------------------------------------------------------------ reading
    def __len__(self):
        return self._n

    def _check_process(self):
        if torch.utils.data.get_worker_info() is not None:
            raise DDStoreValueError(_WORKER_MESSAGE.format(name=self.name))

    def _indices(self, indices):
        """``indices`` as int64 positions in ``[0, len)``: a negative one counts from
        the end, as in :meth:`__getitem__`; outside ``[-len, len)`` is refused."""
        if isinstance(indices, torch.Tensor):
            indices = indices.cpu().numpy()
        what, n = f"graphs {self.name!r}", self._n
        try:
            idx = as_indices(indices, what, limit=n, low=-n)
        except DDStoreIndexError:
            raise
        except DDStoreValueError as exc:  # a bad index type: an IndexError, as PyG's
            try:  # (integers of another shape: a ValueError, as before)
                kind = np.asarray(indices).dtype.kind
            except Exception:  # noqa: BLE001 -- ragged nesting: not integers
                kind = "O"
            if kind in "iub":
                raise
            raise DDStoreIndexError(str(exc)) from None
        if len(idx) and (idx.min() < 0 or idx.max() >= n):
            bad = np.flatnonzero((idx < -n) | (idx >= n))
            if len(bad):
                pos = int(bad[0])
                raise DDStoreIndexError(f"{what}: index {int(idx[pos])} (position {pos}) "
                                        f"out of range [{-n}, {n})")
            idx = np.where(idx < 0, idx + n, idx)
        return idx if self._map is None else self._map[idx]

    def __getitem__(self, index):
        """Local: graph ``index`` as a ``torch_geometric.data.Data``; a negative
        ``index`` counts from the end, as in a list or PyG's ``Dataset``.  A slice, a
        list, a tuple, a range, an integer or boolean tensor or array gives a view of
        those graphs (:meth:`index_select`), as PyG's ``Dataset`` does."""
        self._check_process()
        index = integer_scalar(index)
        if not is_int(index):
            if isinstance(index, (slice, list, tuple, range)) or (
                    isinstance(index, (torch.Tensor, np.ndarray)) and index.ndim):
                return self.index_select(index)  # (a 0-d float or bool: refused)
            # (an IndexError, as PyG's Dataset raises)
            raise DDStoreIndexError(f"graphs {self.name!r}: index must be an integer, or "
                                    f"a slice, list, tuple, range, tensor or array of "
                                    f"indices or booleans, got {index!r}")
        if not -self._n <= index < self._n:
            raise DDStoreIndexError(f"graphs {self.name!r}: index {index} out of range "
                                    f"[{-self._n}, {self._n})")
        index = int(index) % self._n
        if self._map is not None:
            index = int(self._map[index])
        data = self.layout.to_data(self.store.get_record(self._records, index))
        return data if self.transform is None else self.transform(data)

    def index_select(self, idx):
        """Local: a view of graphs ``idx`` of this dataset (PyG's
        ``Dataset.index_select``; ``ds[idx]`` for a non-integer ``idx``): a slice (float
        bounds are fractions of ``len``, ``ds[:0.9]``, as in PyG), a list, tuple or range
        of indices (negative ones count from the end), an integer tensor or array, or a
        boolean tensor or array, flattened, as in PyG (the graphs where it is True: a
        ``[len, 1]`` mask such as ``y > 0`` too; a True beyond ``len`` is refused).  A
        list of bools is refused: PyG reads it as the indices 0 and 1, numpy as a mask.
        The view reads the same stored graphs (nothing is copied): ``len(view) ==
        len(idx)``, ``view[i]`` is graph ``idx[i]``, and its ``__getitems__``,
        :meth:`get_batch`, :meth:`loader` and ``index_select`` take positions in the
        view.  An index outside ``[-len, len)`` is refused."""
        n, what = self._n, f"graphs {self.name!r}: index_select"
        if isinstance(idx, slice):
            start, stop = idx.start, idx.stop
            try:  # (a NaN or infinite fraction: refused as any bad bound)
                start = round(start * n) if isinstance(start, float) else start
                stop = round(stop * n) if isinstance(stop, float) else stop
                pos = np.arange(n, dtype=np.int64)[slice(start, stop, idx.step)]
            except (TypeError, ValueError, OverflowError) as exc:
                raise DDStoreValueError(f"{what}: {idx!r}: {exc}") from None
        else:
            given = idx
            if isinstance(idx, torch.Tensor):
                idx = idx.detach().cpu().numpy()
            arr = np.asarray(idx)  # (a range, a list of ints or of bools too)
            if arr.dtype == bool:  # a mask, flattened (PyG's rule)
                if not isinstance(given, (torch.Tensor, np.ndarray)):
                    raise DDStoreValueError(
                        f"{what}: a {type(given).__name__} of bools is ambiguous (PyG's "
                        f"Dataset reads it as the indices 0 and 1, numpy as a mask); give a "
                        f"bool tensor or array as a mask, or integer indices")
                pos = np.flatnonzero(arr)
            else:
                pos = arr.reshape(-1) if arr.ndim > 1 else arr  # (PyG flattens)
        view = copy.copy(self)
        view._map = np.ascontiguousarray(self._indices(pos), dtype=np.int64)
        view._n = int(view._map.shape[0])
        return view

    def shuffle(self, return_perm=False):
        """Local: a view of the graphs in the order of ``torch.randperm(len)`` (PyG's
        ``Dataset.shuffle``), and the permutation with ``return_perm=True``."""
        perm = torch.randperm(len(self))
        view = self.index_select(perm)
        return (view, perm) if return_perm is True else view

    @property
    def num_node_features(self):
        """Features per node of the first graph (PyG's ``Dataset.num_node_features``)."""
        return self[0].num_node_features

    @property
    def num_features(self):
        """:attr:`num_node_features`, as in PyG."""
        return self.num_node_features

    @property
    def num_edge_features(self):
        """Features per edge of the first graph (PyG's ``Dataset.num_edge_features``)."""
        return self[0].num_edge_features

    @property
    def num_classes(self):
        """Classes of the targets ``y`` of every graph, as PyG's ``Dataset.num_classes``
        infers them (read in batches of 4,096 graphs): 0 without ``y``; for one integer
        per row, the largest + 1; for one float per row, the distinct values; else the
        last dimension of ``y`` (of the graphs as read: a :attr:`transform` that adds or
        drops ``y`` counts)."""
        if not self._n or (self.transform is None and
                           "y" not in (k.key for k in self.layout.keys)):
            return 0
        n, step = self._n, 4096
        ys = [getattr(self.get_batch(range(a, min(a + step, n))), "y", None)
              for a in range(0, n, step)]
        if any(y is None for y in ys):  # (a transform that drops it)
            return 0
        y = torch.cat([torch.as_tensor(y) for y in ys])  # (the batches' y, as PyG's cat)
        if y.numel() == y.size(0):
            return int(y.max()) + 1 if not torch.is_floating_point(y) else \
                int(torch.unique(y).numel())
        return int(y.size(-1))

    def records(self, indices):
        """Local: the raw stored records (dicts of arrays) of ``indices``."""
        self._check_process()
        packed, sizes = self.store.get_records_packed(self._records, self._indices(indices))
        return self.layout.split_packed(packed, sizes)

    def __getitems__(self, indices):
        """Local: graphs ``indices`` as a list of ``Data``, fetched with one batched
        read (``DataLoader`` calls this with a whole mini-batch)."""
        self._check_process()
        idx = self._indices(indices)
        if not len(idx):
            return []
        packed, sizes = self.store.get_records_packed(self._records, idx)
        graphs = self.layout.to_data_list(packed, sizes)
        return graphs if self.transform is None else [self.transform(g) for g in graphs]

    def get_batch(self, indices):
        """Local: graphs ``indices`` collated into a ``torch_geometric.data.Batch``
        (equal to ``Batch.from_data_list(self.__getitems__(indices))``) with one
        batched read and no per-graph objects (with a :attr:`transform`: the transformed
        graphs, collated by ``Batch.from_data_list``)."""
        return self._batch(indices)

    def _batch(self, indices, take=None):
        """:meth:`get_batch`; with ``take`` (a staging slot's ``take(numel, torch
        dtype)``, :mod:`ddstore.device`) the rows are read straight into staging."""
        self._check_process()
        idx = self._indices(indices)
        if not len(idx):
            raise DDStoreValueError(f"graphs {self.name!r}: get_batch needs at least one "
                                    f"index")
        if self.transform is not None:  # (it may change anything: collated after it)
            from torch_geometric.data import Batch
            return Batch.from_data_list(self.__getitems__(indices))
        alloc = None if take is None else functools.partial(_staged_array, take)
        packed, sizes = self.store.get_records_packed(self._records, idx, alloc)
        return collate_records(self.layout, packed, sizes)

    def loader(self, batch_size, sampler=None, shuffle=False, drop_last=False,
               num_workers=0, prefetch=0, device=None, **kwargs):
        """A ``DataLoader`` that yields ``Batch`` objects built by :meth:`get_batch`.

        ``batch_size`` (an integer >= 1; one beyond the samples gives one batch of all)
        samples a batch; ``sampler`` (e.g. ``DistributedSampler``) gives the order of
        samples; it is wrapped in a ``BatchSampler``, which with ``drop_last=True``
        leaves out a last batch shorter than ``batch_size`` (as torch's).
        ``num_workers`` must be 0.

        ``prefetch=k`` (k >= 1) reads and collates up to ``k`` batches ahead in a
        background thread while the caller computes, and returns a
        :class:`ddstore.prefetch.PrefetchLoader` that yields the same batches in the same
        order (see :mod:`ddstore.prefetch` for the MPI thread level it needs and its
        fallback).  ``shuffle=True`` draws each epoch's order from ``generator=`` (as
        torch's ``DataLoader``), by default torch's global generator, in the read-ahead
        thread: two shuffled loaders read ahead at once race for it, so give each its
        own ``generator=torch.Generator().manual_seed(s)`` for reproducible batches.

        ``device`` (e.g. ``"cuda"``): batches arrive there through a
        :class:`ddstore.device.DevicePrefetcher` (``prefetch`` batches read ahead, each
        staged in reused pinned buffers and copied on a side stream while the caller
        steps); ``"cpu"`` runs the same staging on the host.  Default None: as before.
        Without other ``DataLoader`` options (``**kwargs``), each batch's rows are read
        from the store straight into the staging buffers (no copy on the host but the
        edge indices' offsets and layout).
        """
        from ..prefetch import PrefetchLoader, check_prefetch, prefetch_depth
        prefetch = check_prefetch(prefetch, num_workers, f"graphs {self.name!r} loader")
        if num_workers:
            raise DDStoreValueError(_WORKER_MESSAGE.format(name=self.name) +
                                    f" (got num_workers={num_workers})")
        if not is_int(batch_size) or batch_size < 1:
            raise DDStoreValueError(f"graphs {self.name!r} loader: batch_size="
                                    f"{batch_size!r} must be an integer >= 1")
        shuffle = as_bool(shuffle, f"graphs {self.name!r} loader: shuffle")
        if sampler is None:
            sampler = (torch.utils.data.RandomSampler(  # (torch's DataLoader's shuffle)
                self, generator=kwargs.get("generator")) if shuffle
                else torch.utils.data.SequentialSampler(self))
        elif shuffle:
            raise DDStoreValueError("give either a sampler or shuffle=True, not both")
        fixed = sorted(set(kwargs) & {"collate_fn", "batch_sampler", "dataset"})
        if fixed:
            raise DDStoreValueError(
                f"graphs {self.name!r} loader: {', '.join(fixed)} cannot be given: the "
                f"loader sets them (batches of batch_size from sampler, collated by the "
                f"dataset's get_batch); other DataLoader options (pin_memory, "
                f"generator...) pass through")
        # options of torch's worker processes, which this loader never starts (torch
        # refused them at the first batch, or ignored worker_init_fn)
        alone = {"timeout": 0, "prefetch_factor": None, "persistent_workers": False,
                 "multiprocessing_context": None, "worker_init_fn": None, "in_order": True}
        workers = sorted(k for k in set(kwargs) & set(alone) if kwargs[k] != alone[k])
        if workers:
            raise DDStoreValueError(
                f"graphs {self.name!r} loader: {', '.join(workers)} is an option of "
                f"DataLoader's worker processes, which this loader does not start (a store "
                f"is read from its rank's own process); read ahead with prefetch=k")
        pyg_only = sorted(set(kwargs) & {"follow_batch", "exclude_keys"})
        if pyg_only:
            raise DDStoreValueError(
                f"graphs {self.name!r} loader: {', '.join(pyg_only)} is an option of PyG's "
                f"DataLoader, not of this loader (its batches are collated by get_batch): "
                f"use torch_geometric.loader.DataLoader(dataset, batch_size, "
                f"{pyg_only[0]}=...), which reads each batch with one __getitems__ call")
        batches = _AnySizeBatches(sampler, int(batch_size), as_bool(
            drop_last, f"graphs {self.name!r} loader: drop_last"))
        what = f"graphs {self.name!r} loader"
        if kwargs or device is None:  # (torch's iterator for its options: pin_memory...)
            cls = _GraphLoader if set(kwargs) <= {"generator"} else \
                torch.utils.data.DataLoader
            loader = cls(_BatchView(self), sampler=batches, batch_size=None,
                         collate_fn=_identity, num_workers=0, **kwargs)
        else:  # the same batches, their rows read straight into the staging
            loader = _GraphBatches(self, batches)
        if device is not None:
            from ..device import device_loader
            return device_loader(loader, device, prefetch, store=self.store, what=what)
        if not prefetch:
            return loader
        return PrefetchLoader(loader, prefetch_depth(self.store, prefetch, what), self.store)

    def __repr__(self):
        view = "" if self._map is None else " (a view: index_select)"
        return (f"GraphDataset(name={self.name!r}, graphs={self._n}{view}, "
                f"keys={[k.key for k in self.layout.keys]})")


class _AnySizeBatches(torch.utils.data.BatchSampler):
    """torch's ``BatchSampler`` for any ``batch_size``: the same batches, each cut from
    the sampler's order as it comes (torch's makes a list of ``batch_size`` items with
    ``drop_last``, and ``islice`` takes at most ``sys.maxsize``)."""

    def __iter__(self):
        order, size = iter(self.sampler), min(self.batch_size, sys.maxsize)
        while True:
            batch = list(itertools.islice(order, size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch


def _staged_array(take, shape, dtype):
    """A numpy view of ``take(numel, torch dtype)`` shaped ``shape``, or None for a
    dtype torch does not have (read into a new array, staged by a copy)."""
    try:
        tdt = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    except TypeError:
        return None
    return take(math.prod(shape), tdt).numpy().reshape(shape)


class _GraphLoader(torch.utils.data.DataLoader):
    """The graph loader without other ``DataLoader`` options: a ``DataLoader`` (its
    attributes, ``len``, the sampler's ``set_epoch``) whose epoch reads each batch of
    its batch sampler with one :meth:`GraphDataset.get_batch`
    (:class:`ddstore.prefetch.BatchEpoch`), without torch's per-batch fetcher and
    checks: the batches torch's iterator gives over :class:`_BatchView`."""

    def __iter__(self):
        return BatchEpoch(self.dataset.dataset.get_batch, iter(self.sampler),
                          len(self.sampler), self.generator)


class _GraphBatches:
    """The graph loader's batches for :class:`ddstore.device.DevicePrefetcher`: those of
    the ``DataLoader`` over :class:`_BatchView` (same order; ``sampler`` the batch
    sampler, ``dataset`` the view), plus ``next_into`` on its iterator, which reads a
    batch's rows straight into the pipeline's staging."""

    def __init__(self, dataset, batches):
        self.dataset, self.sampler, self.batch_sampler = _BatchView(dataset), batches, None

    def __len__(self):
        return len(self.sampler)

    def __iter__(self):
        from ..device import StagedReads
        return StagedReads(self.dataset.dataset._batch, iter(self.sampler), len(self))


class _BatchView(torch.utils.data.Dataset):
    """``view[list_of_indices]`` is ``dataset.get_batch(list_of_indices)``."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, indices):
        return self.dataset.get_batch(indices)


class _Share:
    """What one rank reads of a graph source for its chunk ``[lo, hi)`` (the local part
    of a constructor's step): the sample ``total``, the ``layout`` of its samples (None
    for an empty chunk) and the index of its ``first`` sample, and either the samples'
    ``records`` (dicts of arrays) or, for a CFF file, their row ``offsets`` (the rows
    are then read block by block while storing)."""
    __slots__ = ("name", "source", "total", "lo", "hi", "layout", "first", "records",
                 "offsets", "marks", "same")

    def __init__(self, store, name, source, progress):
        """Local: read this rank's chunk of ``source``; raises on bad input."""
        progress = as_bool(progress, f"graphs {name!r}: progress")
        # a name another kind of object holds: refused before anything is read or made
        check_object_name(store, name, KIND, f"graphs {name!r}")
        self.name, self.source, self.records, self.offsets = name, source, None, None
        # what the samples are read from (None: not files), agreed in the round
        self.marks = source.file_marks() if isinstance(source, Source) else None
        self.total = int(len(source))
        if self.total == 0:
            raise DDStoreValueError(f"graphs {name!r}: empty data set (no samples)")
        self.lo, self.hi = partition(self.total, store.group_size, store.group_rank)
        # samples in memory (files are agreed by their marks): a few of them read by every
        # rank and compared (a list made without a seed stored a mix of every rank's)
        self.same = _probed(source, self.total) if isinstance(
            source, SequenceSource) and store.size > 1 else {}
        if isinstance(source, AdiosSource):  # packed rows: loaded block by block
            self.layout = _adios_layout(source)
            self.first = self.lo if self.hi > self.lo else None
            self.offsets = _stored_offsets(name, source, self.layout, self.lo, self.hi)
        else:
            self.layout, self.records, self.first = _load_chunk(
                store, name, source, self.lo, self.hi, progress)

    def agree(self, step):
        """The round of ``step``: every rank's length and layout.  Returns the layout of
        every rank's samples, or raises (alike on every rank) when the lengths differ or
        naming the first sample whose layout differs."""
        info = step.agree((self.total, None if self.layout is None
                           else self.layout.to_list(), self.first, self.marks, self.same))
        # each rank loads its chunk from the files it opened: other files on some rank
        # (a stale copy on one node) would mix two data sets
        check_same_files([i[3] for i in info])
        probed = [i[4] for i in info]
        info = [i[:3] for i in info]
        totals = [t for t, _, _ in info]
        if len(set(totals)) > 1:
            raise DDStoreValueError(f"graphs {self.name!r}: the data set has a different "
                                    f"length on different ranks: {totals}")
        layouts = [(GraphLayout(lay), f) for _, lay, f in info if lay is not None]
        reference, ref_first = layouts[0]
        for lay, f in layouts[1:]:
            diff = reference.difference(lay)
            if diff is not None:
                raise DDStoreValueError(f"graphs {self.name!r}: sample {f}: {diff} (as in "
                                        f"sample {ref_first})")
        for i in probed[0]:  # (the same positions: the same length)
            read = {r: p[i] for r, p in enumerate(probed) if p[i] is not None}
            for key in dict.fromkeys(k for keys in read.values() for k in keys):
                by = {}
                for r, keys in read.items():
                    by.setdefault(keys.get(key, "no such key"), []).append(r)
                if len(by) > 1:
                    raise DDStoreValueError(
                        f"graphs {self.name!r}: {key} differs between ranks ("
                        f"{'; '.join(f'{format_ranks(r)}: {v}' for v, r in by.items())}"
                        f"); {_ALIKE}")
        return reference


#: What to do when the samples given differ between ranks (:func:`_probed`).
_ALIKE = ("every rank must pass the same samples: make them alike on every rank (the same "
          "seeds: random.seed, numpy's and torch.manual_seed, all of which PyG's "
          "FakeDataset uses), or write them once (write_pickle_dir, write_adios) and load "
          "the files")


def _probed(source, total):
    """What holds every rank to the same samples (a :class:`SequenceSource`: a list, a
    user's Dataset), compared in the constructor's round once the lengths and layouts
    are: the fingerprints (:func:`~ddstore._fingerprint.same_data`) of the samples at
    the first, middle and last positions, which every rank reads (3 samples besides its
    chunk; the others are read by one rank of each group only, so a list that differs
    elsewhere alone is not caught).  A sample this rank cannot read or record (a
    Dataset of node-local shards) is marked, not compared here: the rank whose chunk
    holds it names what is wrong with it.  Returns ``{position: {"sample <i> '<key>'":
    what it holds} or None (not read)}``."""
    out = {}
    for i in sorted({0, total // 2, total - 1}):
        try:
            out[i] = same_data(GraphLayout.of(source.read_one(i))[1], what=f"sample {i}")
        except Exception:  # noqa: BLE001 -- (its owner reads it again, and names it)
            out[i] = None
    return out


def _sample_error(name, source, index, exc):
    """The :class:`DDStoreError` that reading sample ``index`` of ``source`` for graphs
    ``name`` failing with ``exc`` is raised as, naming the sample (and its file)."""
    where = source.describe(index)
    if isinstance(exc, DDStoreError):
        cls, text = type(exc), str(exc)
    else:
        cls, text = plain_class(exc), f"{type(exc).__name__}: {exc}"
    named = source.file(index) if hasattr(source, "file") else where
    prefix = "" if (named in text or where == f"sample {index}") else f"{where}: "
    return cls(f"graphs {name!r}: sample {index}: {prefix}{text}")


def _adios_layout(source):
    meta = source.meta
    if not isinstance(meta, dict) or meta.get("kind") != META_KIND or "layout" not in meta:
        raise DDStoreValueError(f"ADIOS2 file {source.path!r} was not written by "
                                f"ddstore.graphs.write_adios (no graph layout in its "
                                f"ddstore/meta attribute)")
    try:
        layout = GraphLayout(meta["layout"])
    except (TypeError, ValueError) as exc:
        raise DDStoreValueError(f"ADIOS2 file {source.path!r}: corrupt graph layout "
                                f"({exc})") from None
    schema = {k: (d, t) for k, d, t in source.schema}
    for lay in layout.keys:
        if schema.get(lay.key) != (lay.dtype, lay.trailing):
            raise DDStoreValueError(f"ADIOS2 file {source.path!r}: key {lay.key!r} is "
                                    f"stored as {schema.get(lay.key)}, its graph layout "
                                    f"says {lay.dtype} {lay.trailing}")
    if set(schema) != set(layout.by_key):
        raise DDStoreValueError(f"ADIOS2 file {source.path!r}: variables for keys "
                                f"{sorted(schema)}, graph layout has "
                                f"{sorted(layout.by_key)}")
    return layout


def _stored_offsets(name, source, layout, lo, hi):
    """Row offsets of samples [lo, hi) of a CFF file, checked against ``layout``."""
    offsets = source.read_offsets(lo, hi)
    for lay in layout.keys:
        counts = np.diff(offsets[lay.key])
        if lay.ndim == 0 and (counts != 1).any():
            bad = lo + int(np.flatnonzero(counts != 1)[0])
            raise DDStoreValueError(f"graphs {name!r}: {source.describe(bad)}: key "
                                    f"{lay.key!r} is a scalar but has "
                                    f"{int(counts[bad - lo])} rows")
    return offsets


LOAD_BLOCK_BYTES = 64 << 20  # bytes copied into the store at a time, per rank


def _fill_records(store, name, layout, sizes, read_block, progress, desc):
    """Collective: records ``name`` of this rank's chunk, whose per-key row counts are
    ``sizes``, copied into the store block by block (about ``LOAD_BLOCK_BYTES`` each):
    ``read_block(a, b)`` returns ``{key: rows}`` of local records ``[a, b)``, so the
    rank never holds its chunk twice.  A failure on any rank raises on every rank (the
    caller's transaction then removes the records)."""
    from ..cli import progress_bar
    schema = {lay.key: (lay.dtype, lay.trailing) for lay in layout.keys}
    store.init_records(name, schema, sizes)
    row_bytes = {lay.key: lay.dtype.itemsize * int(np.prod(lay.trailing, dtype=np.int64))
                 for lay in layout.keys}
    n = len(next(iter(sizes.values())))
    ends = np.cumsum(sum(np.asarray(sizes[k], dtype=np.int64) * row_bytes[k]
                         for k in sizes)) if n else np.zeros(0)
    done, block_bytes = 0, LOAD_BLOCK_BYTES
    show = bool(progress) and store.rank == 0
    # the copy is this step's local part: a block that fails to read on one rank (an
    # I/O error...) raises on every rank, and the caller's transaction removes the records
    with store.collective(None), \
            progress_bar(show, total=n, desc=f"{desc} {name} (rank 0)", unit="graph",
                         leave=False) as bar:
        try:
            while done < n:
                # the records that fit in one block (at least one)
                stop = max(done + 1, int(np.searchsorted(
                    ends, (ends[done - 1] if done else 0) + block_bytes, side="right")))
                stop = min(stop, n)
                store.update_records(name, done, stop, read_block(done, stop))
                bar.update(stop - done)
                done = stop
        except (DDStoreError, MemoryError):
            raise
        except Exception as exc:  # named: the step says which rank, this says what
            raise DDStoreValueError(f"graphs {name!r}: {type(exc).__name__}: {exc}") \
                from exc
    store.sync()


def _cff_blocks(source, lo, offsets):
    """``read_block`` for :func:`_fill_records`: rows of samples ``lo + [a, b)`` of a
    CFF file, read straight from the file."""
    def read_block(a, b):
        part = {k: o[a:b + 1] for k, o in offsets.items()}
        return source.read_packed(lo + a, lo + b, offsets=part)[0]
    return read_block


def _owned_blocks(records, keys):
    """``read_block`` for :func:`_fill_records` over a list of records this function
    now owns: each block's records are dropped once concatenated, so their memory goes
    back while the store fills."""
    def read_block(a, b):
        part = records[a:b]
        records[a:b] = [None] * (b - a)
        return {k: np.concatenate([r[k] for r in part]) for k in keys}
    return read_block


def _load_chunk(store, name, source, lo, hi, progress):
    """Local: records of samples [lo, hi) of ``source``; (layout, records, first index).
    Whatever reading a sample raises is raised as a :class:`DDStoreError` naming the
    sample (a ``MemoryError`` as a :class:`DDStoreMemoryError`); a source whose
    ``read(lo, hi)`` yields another index than the next one, or stops early or late, is refused
    naming the index (its records would be shifted)."""
    from ..cli import progress_bar
    show = bool(progress) and store.rank == 0
    layout = None
    records = []
    index = lo
    with progress_bar(show, total=hi - lo, desc=f"loading {name} (rank 0)", unit="graph",
                      leave=False) as bar:
        samples = source.read(lo, hi)
        try:
            while True:
                index = lo + len(records)  # the sample being read, for messages
                try:
                    got, sample = next(samples)
                except StopIteration:
                    if index < hi:
                        raise DDStoreValueError(
                            f"{type(source).__name__}.read({lo}, {hi}) stopped after "
                            f"{index - lo} samples; it must yield (index, sample) for "
                            f"every index of [{lo}, {hi}), in order") from None
                    break
                if got != index or index >= hi:
                    due = f"{index} was next" if index < hi else "the range had ended"
                    raise DDStoreValueError(
                        f"{type(source).__name__}.read({lo}, {hi}) yielded index {got!r} "
                        f"where {due}; it must yield (index, sample) for every index of "
                        f"[{lo}, {hi}), in order")
                if layout is None:
                    layout, rec = GraphLayout.of(sample)
                else:  # (the chunk's first sample is the reference: named)
                    rec = layout.to_record(sample, reference=lo)
                records.append(rec)
                bar.update(1)
        except Exception as exc:  # DDStoreErrors, and a user Dataset's own failures
            raise _sample_error(name, source, index, exc) from exc
    return layout, records, lo if records else None
