"""EdgeBatches: a split's edges in time order, in batches, with TGL's random chunk
scheduling."""
import numpy as np

from .._collective import collective
from ..errors import DDStoreValueError
from ..memory import check_fits
from .._checks import as_bool, as_int, as_seed, is_int, partition
from .graph import SPLITS, TemporalGraph


def _shown(value):
    """A setting as the agreement compares it: integers by value (``np.int64(3)`` is
    ``3``), anything else by its repr (it is refused on every rank by the checks)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return int(value) if is_int(value) else repr(value)


class EdgeBatches:
    """Iterate the edges of one split in time order, in batches of ``batch_size``.

    Each item is ``(src, dst, neg_dst, t, eid)``: int64 ``src``/``dst``/``eid``, ``t`` of
    the graph's ``time_dtype`` (int64 or float64) and int64 ``neg_dst`` of shape ``[n,
    negatives]`` (destinations drawn uniformly
    from all nodes, deterministic per ``(seed, epoch, batch)``).

    Random chunk scheduling (TGL §4): with ``chunks > 1`` a batch is ``chunks`` chunks of
    ``batch_size // chunks`` edges, and each epoch (:meth:`set_epoch`) shifts every batch
    boundary by a random whole number of chunks in ``[0, chunks)`` (the first batch of the
    epoch is then shorter), so the model does not always see the same edges together.
    ``shuffle_chunks=False`` shifts by ``epoch % chunks`` chunks instead.  Every edge of
    the split is in exactly one batch per epoch.

    With ``comm`` (an mpi4py communicator), every rank gets its part
    (``partition(len(batch), comm.size, comm.rank)``) of every batch, so data-parallel
    ranks train on the same time window; all ranks see the same number of batches.  The
    constructor and :meth:`set_epoch` are then collective over ``comm`` (one step each,
    ``"EdgeBatches"`` / ``"EdgeBatches.set_epoch"``): the graph's name and every setting
    (the epoch) must be the same on every rank, else every rank raises a
    :class:`~ddstore.DDStoreValueError` naming the setting and each rank's value (ranks
    with different settings would train on overlapping or missing edges).

    Construction reads the split and time of every edge once (``num_edges`` bytes and
    doubles) and keeps the split's edge ids in time order (int64 per edge of the split).
    """

    def __init__(self, graph, batch_size, split="train", chunks=1, negatives=1,
                 shuffle_chunks=True, comm=None, seed=0):
        if comm is None:
            self._setup(graph, batch_size, split, chunks, negatives, shuffle_chunks, seed)
        else:  # every rank must cut the same batches: the settings are agreed
            same = {k: _shown(v) for k, v in (
                ("graph", getattr(graph, "name", graph)), ("batch_size", batch_size),
                ("split", split), ("chunks", chunks), ("negatives", negatives),
                ("shuffle_chunks", shuffle_chunks), ("seed", seed))}
            with collective(comm, "EdgeBatches", same=same):
                self._setup(graph, batch_size, split, chunks, negatives, shuffle_chunks,
                            seed)
        self.comm = comm

    def _setup(self, graph, batch_size, split, chunks, negatives, shuffle_chunks, seed):
        if not isinstance(graph, TemporalGraph):
            raise DDStoreValueError(f"EdgeBatches: graph must be a TemporalGraph, got "
                                    f"{type(graph).__name__} {graph!r:.60}")
        batch_size = as_int(batch_size, "EdgeBatches: batch_size", 1)
        chunks = as_int(chunks, "EdgeBatches: chunks", 1)
        negatives = as_int(negatives, "EdgeBatches: negatives", 0)
        seed = as_seed(seed, "EdgeBatches: seed")
        if batch_size % chunks:
            raise DDStoreValueError(f"EdgeBatches: chunks={chunks} must divide "
                                    f"batch_size={batch_size}")
        if isinstance(split, str):
            if split not in SPLITS:
                raise DDStoreValueError(f"EdgeBatches: split={split!r} is not one of "
                                        f"{list(SPLITS)}")
            code = SPLITS[split]
        elif is_int(split) and 0 <= split <= 2:
            code = int(split)
        else:
            raise DDStoreValueError(f"EdgeBatches: split={split!r} must be 'train', 'val', "
                                    f"'test' or 0-2")
        self.graph = graph
        self.batch_size, self.chunks = batch_size, chunks
        self.chunk_size = self.batch_size // self.chunks
        self.negatives = negatives
        self.shuffle_chunks = as_bool(shuffle_chunks, "EdgeBatches: shuffle_chunks")
        self.seed = seed
        self.epoch = 0
        eids = np.flatnonzero(graph.split == code).astype(np.int64)
        t = graph.edge_times()[eids]
        self.eids = eids[np.argsort(t, kind="stable")]  # time order, ties by edge id
        # a batch's negatives, [edges, negatives] int64, must fit (a number beyond it
        # failed at the first batch, inside numpy)
        most = min(batch_size, eids.size)
        check_fits(most * negatives * 8, f"EdgeBatches: negatives={negatives}: a batch "
                   f"of {most} edges of negative ids (int64)",
                   lambda avail: f"negatives in 0 .. {avail // (8 * most)} for this "
                                 f"batch_size")

    def loader(self, device=None, prefetch=0):
        """These batches for training: with ``device`` (e.g. ``"cuda"``) through a
        :class:`ddstore.device.DevicePrefetcher` (``prefetch`` batches read ahead,
        staged in reused pinned buffers, copied on a side stream; the arrays arrive as
        torch tensors on the device); with ``device=None`` and ``prefetch >= 1`` the
        read-ahead thread alone (:class:`ddstore.prefetch.PrefetchLoader`, numpy
        arrays); neither: this object.  Call :meth:`set_epoch` on this object."""
        from ..device import device_loader
        return device_loader(self, device, prefetch, store=self.graph.store,
                             what="EdgeBatches.loader")

    def set_epoch(self, epoch):
        """Select the epoch's batch boundaries and negatives (an integer >= 0).  With
        ``comm``: collective over it, every rank the same epoch (checked: ranks in
        different epochs would cut different batches)."""
        if self.comm is None:
            self.epoch = as_int(epoch, "EdgeBatches.set_epoch: epoch", 0)
            return
        with collective(self.comm, "EdgeBatches.set_epoch", same={"epoch": _shown(epoch)}):
            value = as_int(epoch, "EdgeBatches.set_epoch: epoch", 0)
        self.epoch = value  # (after the round: an epoch refused on any rank changes none)

    def shift(self):
        """The batch-boundary shift of this epoch, in edges."""
        if self.chunks == 1:
            return 0
        if self.shuffle_chunks:
            k = int(np.random.default_rng([self.seed, self.epoch, 7]).integers(self.chunks))
        else:
            k = self.epoch % self.chunks
        return k * self.chunk_size

    def boundaries(self):
        """Batch boundaries of this epoch: ``[0, b1, ..., len(split)]``."""
        n = len(self.eids)
        off = self.shift()
        inner = np.arange(off if off else self.batch_size, n, self.batch_size)
        return np.unique(np.concatenate([[0], inner, [n]])).astype(np.int64)

    def __len__(self):
        return len(self.boundaries()) - 1

    def __iter__(self):
        b = self.boundaries()
        g = self.graph
        for i in range(len(b) - 1):
            lo, hi = int(b[i]), int(b[i + 1])
            neg = np.random.default_rng([self.seed, self.epoch, i, 11]).integers(
                0, g.num_nodes, (hi - lo, self.negatives), dtype=np.int64)
            if self.comm is not None:
                a, z = partition(hi - lo, self.comm.Get_size(), self.comm.Get_rank())
            else:
                a, z = 0, hi - lo
            eid = self.eids[lo + a:lo + z]
            src, dst, t = g.edges(eid)
            yield src, dst, neg[a:z], t, eid
