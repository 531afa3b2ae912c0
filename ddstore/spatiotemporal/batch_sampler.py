"""Batch-level shuffling of window starts (PGT-I's generalized distributed index-batching)."""
import numpy as np
import torch

from ..errors import DDStoreValueError
from .._checks import as_bool, as_int, as_seed, is_int


def agree_epoch(store, what, epoch):
    """Collective: ``epoch`` checked (an integer >= 0) and agreed on every rank of
    ``store`` by one step (``set_epoch``, named ``what``); returns it as an int.  Samplers
    that split windows over the ranks draw every rank's share from one permutation per
    epoch, so ranks in different epochs would skip some windows and repeat others."""
    with store.collective("set_epoch", what) as step:
        epoch = as_int(epoch, "set_epoch: epoch", 0)
        step.agree(same={"epoch": epoch})
    return epoch

__all__ = ["BatchShuffleSampler", "assign_blocks"]


def _blocks(start, stop, batch_size, cuts):
    """Cut starts ``[start, stop)`` into blocks of at most ``batch_size`` consecutive
    starts, never across a cut (``cuts``: sorted boundaries, e.g. between the pieces of a
    partitioned series).  Returns (first, last+1) pairs and the index of the segment
    between cuts that each block lies in."""
    edges = [start] + [int(c) for c in cuts if start < c < stop] + [stop]
    blocks, segment = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        seg = int(np.searchsorted(cuts, a, side="right")) if len(cuts) else 0
        for s in range(a, b, batch_size):
            blocks.append((s, min(b, s + batch_size)))
            segment.append(seg)
    return blocks, segment


def assign_blocks(block_owner, num_replicas, width, seed, epoch, shuffle=True,
                  drop_last=False, local=True, rank=None):
    """Deal blocks to ranks; returns one list of block ids per rank, all the same length
    (or, with ``rank``, that rank's list alone).

    ``block_owner[i]``: the group rank that stores block ``i`` (0 .. width-1).  Rank ``r``
    is group rank ``r % width`` of group ``r // width`` (``num_replicas // width``
    groups).  With ``local``: each rank first takes blocks its group rank stores (split
    among the groups), up to ``M`` blocks, where ``M = ceil(n_blocks / num_replicas)``
    (or floor with ``drop_last``); blocks left over go to the ranks with room, so the
    load is balanced and most reads are local.  Without ``local``: blocks are dealt
    round-robin after a global shuffle.  When blocks do not divide evenly, ranks short of
    ``M`` repeat some of their blocks (``drop_last=False``, as ``DistributedSampler``
    pads) or ``M`` is rounded down and extra blocks are left out this epoch.
    Deterministic in ``(seed, epoch)``; no communication.  The work grows with the
    blocks, not with ``num_replicas`` (ranks beyond the blocks all get the same padding).
    """
    if rank is not None and not (is_int(rank) and 0 <= rank < num_replicas):
        raise DDStoreValueError(f"assign_blocks: rank={rank!r} out of range [0, "
                                f"{num_replicas}) (num_replicas)")
    owner = np.asarray(block_owner, dtype=np.int64)
    nb = owner.shape[0]
    rng = np.random.default_rng([int(seed), int(epoch)])
    order = rng.permutation(nb) if shuffle else np.arange(nb)
    M = nb // num_replicas if drop_last else -(-nb // num_replicas)
    groups = num_replicas // width
    dealt = {}  # the ranks dealt a block: their blocks (every other rank has none)
    if local and width > 1:
        leftover = []
        for g in range(width):
            mine = order[owner[order] == g]
            for q in range(min(groups, len(mine))):
                take = list(mine[q::groups])
                dealt[q * width + g] = take[:M]
                leftover.extend(take[M:])
        leftover = np.array(leftover, dtype=np.int64)
        if shuffle and leftover.size:
            leftover = leftover[rng.permutation(leftover.size)]
        pos, r = 0, 0
        while M and pos < leftover.size and r < num_replicas:  # (each rank passed
            lst = dealt.setdefault(r, [])                      # takes one, or is full)
            need = M - len(lst)
            if need > 0:
                lst.extend(leftover[pos:pos + need].tolist())
                pos += min(need, leftover.size - pos)
            r += 1
    else:
        for r in range(min(num_replicas, nb)):
            dealt[r] = list(order[r::num_replicas][:M])
    pool = order.tolist()

    def finish(lst):
        """A rank's list padded to ``M`` (own blocks first) and shuffled."""
        lst = list(lst)
        k = 0
        while len(lst) < M:  # padding (drop_last=False), own blocks first
            src = lst if lst else pool
            lst.append(src[k % len(src)])
            k += 1
        if shuffle:  # (a permutation of 0 or 1 items draws nothing from rng)
            perm = rng.permutation(len(lst))
            lst = [lst[i] for i in perm]
        return [int(b) for b in lst]

    if M <= 1:  # no draws: each rank's list on its own, the undealt ones alike
        empty = finish([])
        if rank is not None:
            return finish(dealt[rank]) if rank in dealt else empty
        return [finish(dealt[r]) if r in dealt else list(empty)
                for r in range(num_replicas)]
    # (M >= 2: fewer ranks than blocks) the shuffles draw from rng in rank order
    per_rank = [finish(dealt.get(r, ())) for r in range(
        num_replicas if rank is None else rank + 1)]
    return per_rank if rank is None else per_rank[rank]


class BatchShuffleSampler(torch.utils.data.Sampler):
    """Batches of consecutive window starts whose order is shuffled every epoch.

    PGT-I's generalized distributed index-batching: the starts of a split are cut into
    blocks of ``batch_size`` consecutive starts (never across the boundary between two
    members' parts of a partitioned series); each epoch the blocks are shuffled and dealt
    to the ranks, every rank getting the same number of batches.  A batch of consecutive
    windows touches only ``batch_size + 2h - 1`` steps, so it is one short contiguous
    read.  With ``local=True`` (default for a partitioned store) each rank prefers the
    blocks its own group rank stores: with ``halo=True`` those are read without any
    communication.  The alternative, sample-level global shuffle, is
    ``torch.utils.data.DistributedSampler`` over the same split.

    Use as ``DataLoader(split, batch_sampler=sampler, collate_fn=batch_collate)``;
    yields lists of indices into ``split``.  Call :meth:`set_epoch` every epoch.
    ``num_replicas``/``rank`` default to the store's communicator size and rank.
    ``seed``: the shuffle's seed (an integer, modulo 2**64; the same on every rank);
    ``drop_last``: when the blocks do not divide evenly over the ranks, leave the extra
    blocks out this epoch instead of repeating some (as ``DistributedSampler``).
    """

    def __init__(self, split, batch_size, num_replicas=None, rank=None, shuffle=True,
                 seed=0, drop_last=False, local=None):
        if not is_int(batch_size) or batch_size < 1:
            raise DDStoreValueError(f"batch_size={batch_size!r} must be an integer >= 1")
        seed = as_seed(seed, "BatchShuffleSampler: seed")
        # what a WindowDataset or one of its splits offers (the split's window range, the
        # dataset's store and layout); this module sits below the dataset's
        if not (all(hasattr(split, a) for a in ("start", "stop", "dataset")) and
                all(hasattr(split.dataset, a) for a in ("store", "layout"))):
            raise DDStoreValueError(f"BatchShuffleSampler: split must be a WindowDataset "
                                    f"or one of its splits, got {type(split).__name__}")
        ds = split.dataset
        store = ds.store
        self.num_replicas = store.size if num_replicas is None else \
            as_int(num_replicas, "BatchShuffleSampler: num_replicas", 1)
        self.rank = store.rank if rank is None else as_int(rank, "BatchShuffleSampler: rank")
        if not 0 <= self.rank < self.num_replicas:
            raise DDStoreValueError(f"BatchShuffleSampler: rank={self.rank} out of range "
                                    f"[0, {self.num_replicas}) (num_replicas)")
        shuffle = as_bool(shuffle, "BatchShuffleSampler: shuffle")
        drop_last = as_bool(drop_last, "BatchShuffleSampler: drop_last")
        width = store.group_size
        if local is None:
            local = width > 1
        local = as_bool(local, "BatchShuffleSampler: local")
        if local and width > 1 and self.num_replicas % width:
            raise DDStoreValueError(f"local=True needs num_replicas ({self.num_replicas}) "
                                    f"to be a multiple of the store width {width}")
        self.split, self.batch_size = split, int(batch_size)
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.local, self.width = bool(local), width
        cuts = ds.layout["hi"][:-1] if width > 1 else []
        blocks, piece = _blocks(split.start, split.stop, self.batch_size, cuts)
        self.blocks = blocks
        self.block_owner = (ds.layout["member"][np.asarray(piece, dtype=np.int64)]
                            if width > 1 else np.zeros(len(blocks), dtype=np.int64))
        self.epoch = 0

    @property
    def agrees_epoch(self):
        """Whether :meth:`set_epoch` is collective: this sampler spans the store's ranks
        as this rank (the default ``num_replicas`` and ``rank``)."""
        store = self.split.dataset.store
        return self.num_replicas == store.size and self.rank == store.rank

    def set_epoch(self, epoch):
        """Shuffle differently in epoch ``epoch``, the same on every rank: collective
        where the sampler spans the store's ranks (:attr:`agrees_epoch`; an epoch that
        differs, or is bad on one rank, raises on every rank), else local."""
        if self.agrees_epoch:
            self.epoch = agree_epoch(self.split.dataset.store, "BatchShuffleSampler",
                                     epoch)
        else:
            self.epoch = as_int(epoch, "set_epoch: epoch", 0)

    def rank_blocks(self, rank=None):
        """Block ids (into :attr:`blocks`) that ``rank`` (default this sampler's; an
        integer in ``[0, num_replicas)``) gets this epoch, in order."""
        return assign_blocks(self.block_owner, self.num_replicas, self.width, self.seed,
                             self.epoch, self.shuffle, self.drop_last, self.local,
                             self.rank if rank is None else rank)

    def __iter__(self):
        base = self.split.start
        for b in self.rank_blocks():
            a, e = self.blocks[b]
            yield list(range(a - base, e - base))

    def __len__(self):
        nb = len(self.blocks)
        return nb // self.num_replicas if self.drop_last else -(-nb // self.num_replicas)
