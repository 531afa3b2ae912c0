"""Discrete-time dynamic graphs over a :class:`~ddstore.DDStore` (STGraph's idea).

A dynamic graph is a sequence of snapshots ``G_0 .. G_{T-1}`` over the same ``N`` nodes;
each snapshot is a set of directed, weighted edges.  Storing every snapshot in full costs
``sum_t |E_t|`` edges; when few edges change per step that is mostly copies of unchanged
edges.  :class:`DynamicGraph` keeps instead, as records in the store (chunked over the
group, replicated by ``width``):

- per step ``t >= 1`` the delta ``Delta_t`` from ``G_{t-1}`` to ``G_t``: the edges added
  (with their weights), the edges deleted (with the weights they had, so the delta can be
  undone) and the edges whose weight changed (old and new weight);
- full *checkpoints* ``G_c`` for ``c = 0, k, 2k, ...`` (``k = checkpoint_every``).

Snapshot ``t`` is rebuilt from the cheapest base (a cached snapshot or a checkpoint, on
either side of ``t``) by applying deltas forward or in reverse.  Iterating forward or
backward applies one delta per step: the work is ``O(|Delta_t|)`` searches plus writing
the new snapshot (vectorised numpy; no Python loop per edge).

Edges are kept as int64 keys ``(dst << b) | src`` (``b`` = bits of ``N - 1``), so that
sorting the keys sorts the edges by ``(dst, src)``: the **canonical order** in which
every snapshot comes out, on every rank and in every run.
"""
import collections
import json
import os
import threading

import numpy as np
import torch

from .. import _core
from ..cli import progress_bar
from ..errors import (DDStoreError, DDStoreIndexError, DDStoreMemoryError, DDStoreStateError,
                      DDStoreValueError)
from .._checks import (as_bool, check_free_names, integer_scalar, is_int, partition,
                       tensor_values)
from .._collective import holds_interrupts
from ..memory import release_free_heap
from ..annotations import check_object_name
from .._fingerprint import fingerprint
from ..sources.base import check_same_files
from ..sources.series import Series, check_finite_weights

__all__ = ["DynamicGraph", "canonical_edges"]

KIND = "DynamicGraph"  # the kind of its annotation (checkpoint and restart)

_DEDUP = (None, "sum", "last")
_MAX_NODES = 1 << 31
_READ_BLOCK = 64  # deltas per store read during iteration
_RECORD_COST = 32  # a delta record read, in delta entries (ties broken by distance)
# the canonical steps and deltas a build keeps between its two passes, per rank: steps
# beyond it are made again when they are stored (a build then holds about what it
# stores plus this, not every step twice)
KEEP_BYTES = 256 << 20


def _step_print(cur):
    """The fingerprint of a canonical step ``(keys, weights or None)``."""
    return fingerprint(cur[1], fingerprint(cur[0]))


def _key_bits(num_nodes):
    return max(1, int(num_nodes - 1).bit_length())


def _step_array(seq, t, what):
    """``seq[t]`` as a numpy array (a tensor's values: bfloat16 widened to float32, as
    the package reads tensors); what cannot be read, an index error of a lazy sequence
    included, is refused naming ``what`` (``"edges[3]"``)."""
    try:
        return np.asarray(tensor_values(seq[t], what))
    except DDStoreError:
        raise
    except Exception as exc:
        raise _unreadable(what, exc) from None


def _unreadable(what, exc):
    """The error for ``what`` (e.g. ``"edges[3]"``) that could not be read as an array
    (``exc``): ``"<what> is not an array: <type>: <text>"``, or, for a ``MemoryError``,
    a :class:`DDStoreMemoryError` ``"<what>: MemoryError: <text>"``."""
    if isinstance(exc, MemoryError):
        return DDStoreMemoryError(f"{what}: {type(exc).__name__}: {exc}")
    return DDStoreValueError(f"{what} is not an array: {type(exc).__name__}: {exc}")


def _step_edges(edges, t, num_nodes, who):
    """Validated ``[2, E]`` int64 array of step ``t`` of ``edges`` (``num_nodes`` None:
    ids in ``[0, _MAX_NODES)``); ``who`` begins each error (``"DynamicGraph 'g': "``)."""
    what = f"{who}edges[{t}]"
    arr = _step_array(edges, t, what)
    if arr.size == 0 and arr.ndim in (1, 2) and (arr.ndim == 1 or arr.shape[0] == 2 or
                                                arr.shape[1] == 2):
        return np.zeros((2, 0), dtype=np.int64)  # an empty step (PGT writes [] for it)
    if arr.ndim != 2 or arr.shape[0] != 2:
        raise DDStoreValueError(f"{what} must have shape [2, E_t] (row 0 source, row 1 "
                                f"target), got shape {tuple(arr.shape)}")
    if arr.dtype.kind not in "iu":
        raise DDStoreValueError(f"{what} must hold integer node ids, got dtype "
                                f"{arr.dtype}")
    # range first, on the ids as given (uint64 beyond int64 must not wrap around)
    low, high = arr.min(), arr.max()
    limit = _MAX_NODES if num_nodes is None else num_nodes
    if int(low) < 0 or int(high) >= limit:
        bad = low if int(low) < 0 else high
        pos = np.argwhere(arr == bad)[0]
        raise DDStoreValueError(f"{what} holds node id {int(bad)} (row {pos[0]}, edge "
                                f"{pos[1]}), out of range [0, {limit})")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _step_weights(weights, t, edge_index, who):
    """float64 ``[E]`` weights of step ``t`` (or None: unit weights / unweighted) for its
    validated ``edge_index`` ``[2, E]``; ``who`` begins each error."""
    what = f"{who}weights[{t}]"
    if weights is None:
        return None
    num_edges = edge_index.shape[1]
    w = _step_array(weights, t, what)
    if w.dtype == object and w.ndim == 0 and w.item() is None:  # (a step given as None)
        return np.ones(num_edges)
    if w.size == 0 and num_edges == 0:
        return np.zeros(0)
    if w.ndim != 1 or w.dtype.kind not in "biuf":
        raise DDStoreValueError(f"{what} must be a 1-D numeric array [E_t], got "
                                f"dtype {w.dtype} shape {tuple(w.shape)}")
    if w.shape[0] != num_edges:
        raise DDStoreValueError(f"{what} has {w.shape[0]} entries but edges[{t}] has "
                                f"{num_edges} edges")
    w = w.astype(np.float64)
    with np.errstate(over="ignore"):  # beyond float32 (as stored): inf, refused
        check_finite_weights(w.astype(np.float32), edge_index, what, w)
    return w


def canonical_edges(edge_index, edge_weight, num_nodes, dedup=None, step=0, who=""):
    """Canonical form of one snapshot: ``(keys, weights)``.

    ``keys`` is int64, sorted and unique, ``(dst << b) | src`` with ``b`` the bit length
    of ``num_nodes - 1`` (sorted keys = edges sorted by ``(dst, src)``); ``weights``
    float64 in key order (None when ``edge_weight`` is None).  Duplicate edges raise
    :class:`~ddstore.DDStoreValueError` unless ``dedup`` is ``"sum"`` (weights added in
    float64 one after the other in input order, as ``sum()`` would) or ``"last"`` (the
    last occurrence in input order wins).  The error names ``edges[step]``, after
    ``who`` (e.g. ``"DynamicGraph 'g': "``).
    """
    ei = np.asarray(edge_index, dtype=np.int64)
    bits = _key_bits(num_nodes)
    raw = (ei[1] << bits) | ei[0]
    # distinct keys sort to one order whatever the sort: numpy's unstable sorts (several
    # times faster than its stable one, 5 against 90 ms for 1M keys) unless there are
    # duplicates, whose weights are merged in input order (a stable sort, below)
    if edge_weight is None:
        key, w = np.sort(raw), None
    else:
        order = np.argsort(raw)
        key = raw[order]
        w = np.asarray(edge_weight, np.float64)[order]
    if key.shape[0] > 1:
        dup = key[1:] == key[:-1]
        if dup.any():
            if dedup is None:
                i = int(np.argmax(dup))
                k = int(key[i])
                n = int(np.count_nonzero(key == k))
                first = np.flatnonzero(raw == k)[:2].tolist()
                raise DDStoreValueError(
                    f"{who}edges[{step}]: edge {k & ((1 << bits) - 1)} -> {k >> bits} "
                    f"appears "
                    f"{n} times (input positions {first[0]} and {first[1]}), "
                    f"{int(dup.sum())} duplicates in all; a snapshot is a set of edges: "
                    f"pass dedup='sum' or dedup='last' to merge them")
            starts = np.flatnonzero(np.concatenate(([True], ~dup)))
            if w is not None:
                # (the same sorted keys, their weights in input order within each key)
                w = np.asarray(edge_weight, np.float64)[np.argsort(raw, kind="stable")]
                if dedup == "sum":  # in input order, one addition after the other
                    # (np.add.at is unbuffered and in order; reduceat's order is numpy's)
                    summed = np.full(starts.shape[0], -0.0)  # -0.0 + x is x, -0.0 too
                    np.add.at(summed, np.concatenate(([0], np.cumsum(~dup))), w)
                    w = summed
                else:  # last occurrence in input order: the end of each stable run
                    w = w[np.concatenate((starts[1:], [key.shape[0]])) - 1]
            key = key[starts]
    return key, w


def _diff(old_k, old_w, new_k, new_w):
    """Delta between two canonical snapshots as a dict of arrays (keys sorted)."""
    # keys (< 2**62) tagged with their side (bit 0: 1 = new) and merged: a stable sort
    # finds the two sorted runs and merges them in one pass (2.5 against 85 ms for two
    # searchsorted of 1M keys); a key in both comes as 2k, 2k + 1 side by side
    s = np.concatenate((old_k << 1, (new_k << 1) | 1))
    s.sort(kind="stable")  # (in place)
    side = (s & 1).astype(bool)
    s >>= 1  # (the keys again)
    pair = s[1:] == s[:-1]
    both = np.zeros(s.shape[0], dtype=bool)
    both[:-1] = pair
    both[1:] |= pair
    in_old, in_new = both[side], both[~side]  # (each in its snapshot's order)
    out = {"add_key": new_k[~in_old], "del_key": old_k[~in_new]}
    if new_w is not None:
        out["add_w"] = new_w[~in_old].astype(np.float32)
        out["del_w"] = old_w[~in_new].astype(np.float32)
        wo = old_w.astype(np.float32)[in_new]  # (the common keys, in order, on each side)
        wn = new_w.astype(np.float32)[in_old]
        changed = wo.view(np.int32) != wn.view(np.int32)  # bits: 0.0 -> -0.0 too
        out["chg_key"] = new_k[in_old][changed]
        out["chg_old"] = wo[changed]
        out["chg_new"] = wn[changed]
    return out


def _apply(keys, w, rm, add, add_w, chg, chg_w, bits):
    """Snapshot ``keys - rm + add`` with the weights of ``chg`` set to ``chg_w``, and its
    ``edge_index``: ``(keys, w, edge_index)``.

    ``keys`` sorted unique; ``rm`` a sorted subset of it; ``add`` sorted and disjoint from
    ``keys - rm``.  Inputs are never modified (snapshots are shared with the cache and the
    caller); the results are new arrays.  One linear merge in C (``dds_apply_delta``)
    that also splits every key into its source and target.
    """
    return _core.apply_delta(keys, w, rm, add, add_w, chg, chg_w, bits)


def _compose(deltas, forward, weighted):
    """The net effect of applying ``deltas`` in turn (forward), or of undoing them in
    reverse order (backward), as one ``(rm, add, add_w, chg, chg_w)`` for :func:`_apply`.

    Every delta's events are concatenated in walking order and stably sorted by key; a
    key's first event says whether the edge existed before the walk (it was deleted or
    re-weighted first) and its last event whether it exists after it, with which weight.
    Work ``O(D log D)`` for ``D`` events in all, instead of one snapshot copy per step.
    """
    seq = deltas if forward else deltas[::-1]
    gone, come = ("del", "add") if forward else ("add", "del")
    keys, before, after, weights = [], [], [], []
    for d in seq:
        for kind, was, now in ((gone, True, False), (come, False, True),
                               ("chg", True, True)):
            k = d.get(f"{kind}_key")
            if k is None or not k.shape[0]:
                continue
            keys.append(k)
            before.append(np.full(k.shape[0], was))
            after.append(np.full(k.shape[0], now))
            if weighted:
                if kind == "chg":
                    weights.append(d["chg_new" if forward else "chg_old"])
                else:
                    weights.append(d[f"{kind}_w"] if now else
                                   np.zeros(k.shape[0], np.float32))
    empty = np.zeros(0, np.int64)
    if not keys:
        return empty, empty, np.zeros(0, np.float32), empty, np.zeros(0, np.float32)
    keys = np.concatenate(keys)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    new = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    last = np.concatenate((new[1:], [keys.shape[0]])) - 1
    was = np.concatenate(before)[order][new]
    now = np.concatenate(after)[order][last]
    uk = keys[new]
    w = np.concatenate(weights)[order][last] if weighted else None
    rm = uk[was & ~now]
    add_mask, chg_mask = ~was & now, was & now
    return (rm, uk[add_mask], None if w is None else w[add_mask],
            uk[chg_mask] if weighted else None, None if w is None else w[chg_mask])


def _same_steps(edges, weights, who):
    """``same=`` settings that hold every rank to the same in-memory ``edges`` and
    ``weights``: for each that is a list or tuple (every step already in memory), one
    XXH64 fingerprint of all its steps, chained by seed (each step's dtype, shape and
    values; see :func:`ddstore._fingerprint.fingerprint`).  Another sequence produces
    its steps on demand (each rank reads only its own): not read whole here."""
    out = {}
    for key, seq in (("edges", edges), ("weights", weights)):
        if not isinstance(seq, (list, tuple)):
            continue
        fp = 0
        for t, value in enumerate(seq):
            try:
                fp = fingerprint(value, fp)
            except Exception as exc:  # what reading the step would say
                raise _unreadable(f"{who}{key}[{t}]", exc) from None
        out[f"argument {key!r}"] = f"{len(seq)} steps, fingerprint 0x{fp:016x}"
    return out


class _Snap:
    """One materialised snapshot: canonical keys, weights, and the output tensors."""
    __slots__ = ("t", "keys", "w", "out")

    def __init__(self, t, keys, w):
        self.t, self.keys, self.w, self.out = t, keys, w, None


class _SnapCache:
    """The snapshots a graph keeps, least recently used dropped first, safe for several
    threads (a loader's read-ahead thread and the caller's loop read one graph at once:
    the plain ``OrderedDict`` raised "mutated during iteration")."""

    def __init__(self):
        self._snaps = collections.OrderedDict()  # step -> _Snap
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._snaps)

    def get(self, t):
        """The snapshot of step ``t`` (now the most recently used), or None."""
        with self._lock:
            snap = self._snaps.get(t)
            if snap is not None:
                self._snaps.move_to_end(t)
            return snap

    def put(self, snap, size):
        """Keep ``snap``, then drop the least recently used beyond ``size``."""
        with self._lock:
            self._snaps[snap.t] = snap
            self._snaps.move_to_end(snap.t)
            while len(self._snaps) > size:
                self._snaps.popitem(last=False)

    def holds(self, t):
        """Whether step ``t`` is kept (its place in the order unchanged)."""
        with self._lock:
            return t in self._snaps

    def snaps(self):
        """The snapshots held now (a list: the cache may change meanwhile)."""
        with self._lock:
            return list(self._snaps.values())

    def clear(self):
        with self._lock:
            self._snaps.clear()


class DynamicGraph:
    """A discrete-time dynamic graph kept in a DDStore as checkpoints plus deltas.

    Construction is **collective** over ``store.comm``: every rank passes the same
    arguments (each rank reads only the steps whose deltas and checkpoints it stores:
    ``edges`` may be any sequence that produces ``edges[t]`` on demand).  This is
    checked in the first step (the same error on every rank naming ``'edges'`` or
    ``'weights'`` and which ranks hold what; nothing stored): ``edges`` and ``weights``
    given as a list or tuple (in memory) by a 64-bit XXH64 fingerprint of every step's
    dtype, shape and values, hashed whole on every rank (about 0.13 s per GB on one
    core plus about 10 us per step, measured on the 2-core CI VM); another sequence is not
    read whole for this (its steps are not checked), nor files (:meth:`from_series` agrees
    them).

    Parameters
    ----------
    store : ddstore.DDStore
    name : str
        Prefix of the store variables: ``"<name>/delta"`` and ``"<name>/ckpt"`` (records).
    edges : sequence of ``T`` arrays ``[2, E_t]``
        Step ``t``'s directed edges (row 0 source, row 1 target), integer numpy arrays or
        torch tensors; an empty step may be ``[]`` or ``[2, 0]``.  Self-loops are kept.
    weights : None or sequence of ``T`` arrays ``[E_t]`` (or None entries = unit weights)
        Finite numbers, stored as float32.  ``None``: an unweighted graph (snapshots
        return ``edge_weight=None``).
    num_nodes : int, optional
        Node count ``N`` (default: largest node id + 1).  At most ``2**31``.
    checkpoint_every : int, optional
        ``k``: a full checkpoint at every step ``c`` with ``c % k == 0``.  Default: from
        the measured sizes, ``k = round(mean snapshot bytes / mean delta bytes)``
        clipped to ``[1, T]``, so that the deltas between two checkpoints together weigh
        about one snapshot: checkpoints then cost about as much as all deltas together,
        and a random step costs one checkpoint plus at most ``k/2`` deltas (about half a
        snapshot; up to ``k - 1`` after the last checkpoint, which no checkpoint
        follows).  With ``k == 1`` every step is a checkpoint and no deltas are stored
        (graphs that change almost entirely every step gain nothing from deltas).
    dedup : None, "sum" or "last"
        Duplicate edges within one step are an error by default; ``"sum"`` adds their
        weights (in input order; a sum beyond float32 is refused), ``"last"`` keeps the
        last one (input order).
    cache_size : int
        Snapshots kept in an LRU cache (default 8; at least 1), for the repeated access
        of truncated backpropagation through time; the same on every rank (checked: it
        is recorded for :meth:`open`), another per rank with ``open(cache_size=...)``.
    show_progress : bool
        Default False.  True: progress bars on rank 0, over the steps rank 0 itself
        makes canonical and stores (its share of the ``T`` steps, as each rank stores
        its own: "(rank 0)" in their labels).

    Notes
    -----
    Snapshots are ``(edge_index, edge_weight)``: int64 ``[2, E_t]`` and float32 ``[E_t]``
    (or None) torch tensors on the CPU, sorted by ``(dst, src)`` (the canonical order),
    equal as a set with weights to what went in at step ``t``.  They are shared with the
    cache: do not modify them in place.

    ``build_id``: a random id of this build (rank 0's, the same on every rank; kept by a
    checkpoint, so :meth:`open` gives it back): a graph built again under the same name
    has another, which is how a :class:`~ddstore.dynamic.DynamicWindowDataset` over a
    shared graph tells its own from a successor (a graph saved by a version without it
    is given one made from what was saved).
    """

    @holds_interrupts  # (its steps are several: its later ones told by its name)
    def __init__(self, store, name, edges, weights=None, num_nodes=None,
                 checkpoint_every=None, *, dedup=None, cache_size=8, show_progress=False):
        self.store, self.name = store, name
        self._dname, self._cname = f"{name}/delta", f"{name}/ckpt"
        self._handles = {}  # name -> the store's handle, once added (_bind)
        g, width = store.group_rank, store.group_size
        # step 1: the arguments, and (only without num_nodes) this rank's own steps
        # validated for the node count
        with store.collective("DynamicGraph", name) as step:
            T = self._check_args(store, name, edges, weights, num_nodes, checkpoint_every,
                                 dedup, cache_size)
            show_progress = as_bool(show_progress, f"DynamicGraph {name!r}: show_progress")
            lo, hi = partition(T, width, g)  # the steps whose deltas this rank stores
            top = -1
            if num_nodes is None:
                for t in range(lo, hi):
                    ei = _step_edges(edges, t, None, self._who)
                    if ei.size:
                        top = max(top, int(ei.max()))
            # and the steps in memory (each rank stores its own steps from its own copy)
            tops = step.agree(top, same={
                "steps": T, "num_nodes": num_nodes, "checkpoint_every": checkpoint_every,
                "dedup": dedup, "weighted": weights is not None,
                # (kept in the annotation, alike on every rank: what open() defaults to)
                "cache_size": cache_size,
                **_same_steps(edges, weights, self._who)})
        if num_nodes is None:
            num_nodes = max(1, 1 + max(tops))  # <= _MAX_NODES
        self.num_steps = T
        self.weighted = weights is not None
        self.dedup = dedup
        self.cache_size = int(cache_size)
        self._cache = _SnapCache()
        self.num_nodes = int(num_nodes)
        self._bits = _key_bits(self.num_nodes)
        self._mask = (1 << self._bits) - 1

        # step 2: canonical snapshots of own steps (and the one before), their deltas'
        # sizes; every rank learns every step's edge and delta sizes (small), then k:
        # gathered over the communicator; this group's members are its ranks
        # [group * width, (group + 1) * width).  What is made here is kept for step 3
        # up to KEEP_BYTES (the steps after are made again there, one at a time)
        with store.collective(None) as step:
            counts, sizes, kept, prints, before = self._measure(
                edges, weights, lo, hi, checkpoint_every, show_progress)
            # (and rank 0's random id of this build: every rank takes it; and the
            # fingerprints of the step before this rank's first and of its last)
            shares = step.agree((counts, sizes, os.urandom(8).hex(),
                                 (before, prints[-1] if prints else None)))
            self._check_reads_alike([s[3] for s in shares], T, width)
            self.build_id = shares[0][2]
            gathered = [s[:2] for s in shares[store.group * width:(store.group + 1) * width]]
        self._num_edges = np.concatenate([c for c, _ in gathered])
        dsize = np.concatenate([s for _, s in gathered])  # [T, add/del(/chg)]
        self._delta_entries = dsize.sum(axis=1)
        self._delta_entries[0] = 0
        edge_bytes = 8 + (4 if self.weighted else 0)
        dbytes = (dsize[:, 0] + dsize[:, 1]) * edge_bytes
        if self.weighted:
            dbytes = dbytes + dsize[:, 2] * 16
        if checkpoint_every is None:
            mean_snap = self._num_edges.mean() * edge_bytes if T else 0.0
            mean_delta = dbytes[1:].mean() if T > 1 else 0.0
            k = T if mean_delta == 0 else int(round(mean_snap / mean_delta))
            checkpoint_every = min(max(k, 1), max(T, 1))
        self.checkpoint_every = int(checkpoint_every)
        self._ckpt_steps = np.arange(0, T, self.checkpoint_every, dtype=np.int64)
        self.has_deltas = self.checkpoint_every > 1
        # cost of walking between steps: cumulative delta entries
        self._cum = np.concatenate(([0], np.cumsum(self._delta_entries[1:]))).astype(
            np.int64)
        # step 3: the records, made to their sizes, filled one step at a time
        self._store_steps(edges, weights, lo, hi, counts, sizes, kept, prints, before,
                          show_progress)
        del kept
        release_free_heap()  # (the build's snapshots, stored now: their heap released)

    @classmethod
    def from_series(cls, store, name, series, **kwargs):
        """Collective: the graph of a :class:`~ddstore.spatiotemporal.DynamicSeries` (what
        :func:`~ddstore.spatiotemporal.load_pgt_json` returns for a file whose edges change
        every step, e.g. Twitter tennis); keyword arguments as for the constructor."""
        with store.collective("DynamicGraph.from_series", name) as step:
            if getattr(series, "edges", None) is None:
                raise DDStoreValueError(f"DynamicGraph.from_series {name!r}: "
                                        f"{type(series).__name__} has no per-step edges "
                                        f"(a DynamicSeries is needed)")
            # the file it was read from, the same on every rank (each rank stores its
            # own steps' edges)
            check_same_files(step.agree(series.files if isinstance(series, Series)
                                        else None))
        return cls(store, name, series.edges, series.weights, num_nodes=series.num_nodes,
                   **kwargs)

    # ------------------------------------------------------------------ build helpers
    @staticmethod
    def _check_args(store, name, edges, weights, num_nodes, checkpoint_every, dedup,
                    cache_size):
        if not isinstance(name, str) or not name:
            raise DDStoreValueError(f"DynamicGraph name must be a non-empty str, got "
                                    f"{name!r}")
        if isinstance(edges, (str, bytes, dict)) or not hasattr(edges, "__len__") or \
                not hasattr(edges, "__getitem__"):
            raise DDStoreValueError(f"DynamicGraph {name!r}: edges must be a sequence of "
                                    f"[2, E_t] arrays, got {type(edges).__name__}")
        T = len(edges)
        if T < 1:
            raise DDStoreValueError(f"DynamicGraph {name!r}: edges has 0 steps; need >= 1")
        if weights is not None:
            if not hasattr(weights, "__len__") or isinstance(weights, (str, bytes, dict)):
                raise DDStoreValueError(f"DynamicGraph {name!r}: weights must be None or a "
                                        f"sequence of [E_t] arrays")
            if len(weights) != T:
                raise DDStoreValueError(f"DynamicGraph {name!r}: {len(weights)} weight "
                                        f"arrays for {T} steps of edges")
        if num_nodes is not None:
            if not is_int(num_nodes) or not 1 <= num_nodes <= _MAX_NODES:
                raise DDStoreValueError(f"DynamicGraph {name!r}: num_nodes={num_nodes!r}; "
                                        f"allowed: an integer in [1, {_MAX_NODES}]")
        if checkpoint_every is not None:
            if not is_int(checkpoint_every) or not 1 <= checkpoint_every:
                raise DDStoreValueError(f"DynamicGraph {name!r}: checkpoint_every="
                                        f"{checkpoint_every!r}; allowed: None or an "
                                        f"integer >= 1")
        if dedup not in _DEDUP:
            raise DDStoreValueError(f"DynamicGraph {name!r}: dedup={dedup!r}; allowed: "
                                    f"None, 'sum', 'last'")
        if not is_int(cache_size) or cache_size < 1:
            raise DDStoreValueError(f"DynamicGraph {name!r}: cache_size={cache_size!r}; "
                                    f"allowed: an integer >= 1")
        check_free_names(f"DynamicGraph {name!r}", [
            var for var in (f"{name}/delta", f"{name}/ckpt") if var in store])
        check_object_name(store, name, KIND, f"DynamicGraph {name!r}")
        return T

    @property
    def _who(self):
        """What begins the errors of a step's edges and weights."""
        return f"DynamicGraph {self.name!r}: "

    def _canonical(self, edges, weights, t):
        ei = _step_edges(edges, t, self.num_nodes, self._who)
        w = _step_weights(weights, t, ei, self._who)
        keys, w = canonical_edges(ei, w, self.num_nodes, self.dedup, t, self._who)
        if w is not None and self.dedup == "sum" and keys.shape[0] < ei.shape[1]:
            # finite inputs can add up beyond float32 (as stored): refused, not kept as inf
            with np.errstate(over="ignore"):
                w32 = w.astype(np.float32)
            merged = np.stack([keys & self._mask, keys >> self._bits])
            check_finite_weights(w32, merged, f"{self._who}weights[{t}] summed by "
                                 f"dedup='sum'", w)
        return keys, w

    def _measure(self, edges, weights, lo, hi, checkpoint_every, show_progress):
        """Local: this rank's steps ``[lo, hi)`` made canonical and diffed with the step
        before: ``(edge counts, delta sizes [hi - lo, add/del(/chg)], kept, prints)``.
        ``kept`` maps the first steps to what step 3 stores for them (``(checkpoint or
        None, delta or None)``), as long as they fit in :data:`KEEP_BYTES` together;
        ``prints`` the fingerprint of each step's edges and weights (a step made again in
        step 3 must match it), ``before`` that of step ``lo - 1`` as read here (None for
        ``lo == 0``), the owner of which must have read it alike
        (:meth:`_check_reads_alike`)."""
        dkeys = ("add_key", "del_key") + (("chg_key",) if self.weighted else ())
        counts = np.zeros(hi - lo, dtype=np.int64)
        prints = [0] * (hi - lo)
        sizes = np.zeros((hi - lo, len(dkeys)), dtype=np.int64)
        # (a delta may be stored unless every step is a checkpoint; which steps are
        # checkpoints is known only with checkpoint_every)
        need_delta = checkpoint_every is None or checkpoint_every > 1
        kept, held = {}, 0
        with progress_bar(show_progress and self.store.rank == 0, total=hi - lo,
                          desc=f"deltas of {self.name!r} (rank 0)", unit="step") as progress:
            prev = self._canonical(edges, weights, lo - 1) if lo > 0 else None
            before = None if prev is None else _step_print(prev)
            for t in range(lo, hi):
                cur = self._canonical(edges, weights, t)
                d = _diff(*(prev if t > 0 else cur), *cur)  # (step 0's: empty)
                counts[t - lo] = cur[0].shape[0]
                prints[t - lo] = _step_print(cur)
                sizes[t - lo] = [d[k].shape[0] for k in dkeys]
                if held is not None:
                    ckpt = cur if checkpoint_every is not None and \
                        t % checkpoint_every == 0 else None
                    delta = d if need_delta else None
                    held += sum(a.nbytes for a in (ckpt or ()) if a is not None) + \
                        sum(a.nbytes for a in (delta or {}).values())
                    if held <= KEEP_BYTES:
                        kept[t] = (ckpt, delta)
                    else:
                        held = None  # (the steps from here made again in step 3)
                prev = cur
                progress.update(1)
        return counts, sizes, kept, prints, before

    def _check_reads_alike(self, ends, T, width):
        """Local, on what every rank told (the same on every rank): a step read by two
        ranks of a group (its owner, and the next rank for the delta of its first step)
        gave both the same edges and weights, or raise naming it.  ``ends``: per rank of
        the communicator, the fingerprints of the step before its first and of its last.
        (A lazy step that read otherwise there was stored as two different steps.)"""
        for group in range(len(ends) // width):
            for g in range(1, width):
                lo, hi = partition(T, width, g)
                if lo >= hi:
                    continue
                owner = group * width + g - 1  # (a non-empty part comes after one)
                seen, stored = ends[group * width + g][0], ends[owner][1]
                if seen != stored:
                    raise DDStoreValueError(
                        f"DynamicGraph {self.name!r}: edges[{lo - 1}] (or weights[{lo - 1}]) "
                        f"gave other values on rank {group * width + g} than on rank "
                        f"{owner} (which stores it): the steps must read the same on every "
                        f"rank and every time while the graph is built")

    def _store_steps(self, edges, weights, lo, hi, counts, sizes, kept, prints, before,
                     show_progress):
        """Collective: create the delta and checkpoint records to their sizes and write
        this rank's steps ``[lo, hi)`` into them, one step at a time (the ``kept`` ones
        as they are, the others made again); on failure neither record set (the store's
        transaction removes what was created)."""
        store, k, name = self.store, self.checkpoint_every, self.name
        f32, i64 = np.dtype(np.float32).str, np.dtype(np.int64).str
        dschema = {"add_key": i64, "del_key": i64}
        if self.weighted:
            dschema.update(add_w=f32, del_w=f32, chg_key=i64, chg_old=f32, chg_new=f32)
        cschema = {"key": i64, **({"w": f32} if self.weighted else {})}
        column = {"add": 0, "del": 1, "chg": 2}  # sizes' column of each delta key
        mine = [c for c in range(lo, hi) if c % k == 0]
        csizes = counts[np.asarray(mine, dtype=np.int64) - lo]
        with store.transaction(f"DynamicGraph {name!r}") as txn:
            # an enclosing transaction that rolls back removes the records: the cached
            # snapshots go too (reads then fail as after free())
            txn.on_rollback(self.forget)
            if self.has_deltas:
                store.init_records(self._dname, {f: (d, ()) for f, d in dschema.items()},
                                   {f: sizes[:, column[f[:3]]] for f in dschema})
            store.init_records(self._cname, {f: (d, ()) for f, d in cschema.items()},
                               {f: csizes for f in cschema})
            # a step that fails when made again, or memory that runs out, on one rank:
            # raised on every rank (and the records removed)
            with store.collective(None), \
                    progress_bar(show_progress and store.rank == 0, total=hi - lo,
                                 desc=f"storing {name!r} (rank 0)", unit="step") as progress:
                prev = None  # step t - 1 made canonical, when it was at t - 1
                for t in range(lo, hi):
                    ckpt, delta = kept.pop(t, (None, None))
                    cur = None
                    if t % k == 0:
                        cur = ckpt or self._again(edges, weights, t, prints[t - lo])
                        store.update_records(self._cname, t // k - mine[0] // k,
                                             t // k - mine[0] // k + 1,
                                             {"key": cur[0], **({"w": cur[1].astype(
                                                 np.float32)} if self.weighted else {})})
                    if self.has_deltas:
                        if delta is None:
                            cur = cur or self._again(edges, weights, t, prints[t - lo])
                            if t == 0:
                                prev = cur
                            elif prev is None:
                                prev = self._again(edges, weights, t - 1, prints[
                                    t - 1 - lo] if t > lo else before)
                            delta = _diff(*prev, *cur)
                        store.update_records(self._dname, t - lo, t - lo + 1, delta)
                    prev = cur
                    progress.update(1)
            store.sync()
            self._bind()
            # what open() needs to rebuild every step from a restored store (a step: a
            # rank failing here is agreed, and the build rolls back on every rank)
            with store.collective(None):
                store.annotate(self.name, KIND, {
                    "num_steps": int(self.num_steps), "num_nodes": int(self.num_nodes),
                    "weighted": bool(self.weighted), "dedup": self.dedup,
                    "checkpoint_every": int(self.checkpoint_every),
                    "cache_size": int(self.cache_size), "build_id": self.build_id},
                    {"num_edges": self._num_edges, "delta_entries": self._delta_entries},
                    variables=self.held())

    def _again(self, edges, weights, t, first):
        """Step ``t`` made canonical a second time (for step 3), checked against the
        fingerprint of its edges and weights the first time (``first``; None: not
        checked)."""
        cur = self._canonical(edges, weights, t)
        if first is not None and _step_print(cur) != first:
            raise DDStoreValueError(
                f"DynamicGraph {self.name!r}: edges[{t}] (or weights[{t}]) gave other "
                f"values when read a second time ({cur[0].shape[0]} edges): the steps must "
                f"not change while the graph is built")
        return cur

    @classmethod
    def open(cls, store, name, *, cache_size=None):
        """Local: the graph ``name`` built on this store, or brought back by
        :meth:`DDStore.restore <ddstore.DDStore.restore>` from a checkpoint written by
        :meth:`DDStore.save <ddstore.DDStore.save>`, at any rank count and width, without
        its source edges (every rank calls it alike; no communication).  Every step's
        snapshot equals the one saved.  ``cache_size``: the snapshot cache (default: as
        built).  Raises :class:`DDStoreValueError` naming the known graphs when ``name``
        is none of them."""
        ann = store.annotation(name, kind=KIND)
        meta = ann.meta
        given = f"cache_size={cache_size!r}"
        if cache_size is None:  # (as built: checked as a given one, naming the annotation)
            cache_size = meta.get("cache_size")
            given = f"its annotation's 'cache_size' is {cache_size!r} (absent: None)"
        if not is_int(cache_size) or cache_size < 1:
            raise DDStoreValueError(f"DynamicGraph {name!r}: {given}; allowed: an integer "
                                    f">= 1")
        with ann.reading(f"DynamicGraph.open({name!r})") as meta:
            _check_annotation(store, name, meta, ann.arrays)
            self = cls.__new__(cls)
            self.store, self.name = store, name
            self._dname, self._cname = f"{name}/delta", f"{name}/ckpt"
            self.num_steps, self.num_nodes = int(meta["num_steps"]), int(meta["num_nodes"])
            self.weighted, self.dedup = bool(meta["weighted"]), meta["dedup"]
            # saved by a version without it: an id made from what was saved (a graph built
            # since has a random one, so a successor under the name still differs)
            told = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), np.uint8)
            self.build_id = meta.get("build_id") or \
                f"saved-{fingerprint(told, fingerprint(ann.arrays['num_edges'])):016x}"
            self.cache_size = int(cache_size)
            self._cache = _SnapCache()
            self._bits = _key_bits(self.num_nodes)
            self._mask = (1 << self._bits) - 1
            self._num_edges = np.array(ann.arrays["num_edges"], dtype=np.int64)
            self._delta_entries = np.array(ann.arrays["delta_entries"], dtype=np.int64)
            self.checkpoint_every = int(meta["checkpoint_every"])
            self._ckpt_steps = np.arange(0, self.num_steps, self.checkpoint_every,
                                         dtype=np.int64)
            self.has_deltas = self.checkpoint_every > 1
            self._cum = np.concatenate(([0], np.cumsum(self._delta_entries[1:]))).astype(
                np.int64)
        self._bind()
        return self

    def _bind(self):
        """Read the records through handles: bound to these records, not to the names
        (freed, and another graph built under the name, this object refuses to read
        instead of reading the other graph's records with its own layout)."""
        self._handles = {n: self.store.handle(n) for n in (self._dname, self._cname)
                         if n in self.store}

    def check_held(self):
        """Local: raise :class:`~ddstore.DDStoreStateError` unless the store still holds
        this graph's records (not freed, not removed by a rollback)."""
        # the checkpoints: every graph has them, and free() and a rollback remove both
        # record sets (deltas removed alone: their handle refuses when they are read)
        if self._handles[self._cname] not in self.store:
            raise DDStoreStateError(f"DynamicGraph {self.name!r} is no longer in the "
                                    f"store (freed, or removed by a rollback); build or "
                                    f"open it again")

    # ------------------------------------------------------------------ reading
    def _check_step(self, t, what="t"):
        t = integer_scalar(t)
        if not is_int(t):
            raise DDStoreValueError(f"DynamicGraph {self.name!r}: {what} must be an "
                                    f"integer, got {t!r}")
        t = int(t)
        if not 0 <= t < self.num_steps:
            raise DDStoreIndexError(f"DynamicGraph {self.name!r}: {what}={t} out of range "
                                    f"[0, {self.num_steps})")
        return t

    def _read_ckpt(self, c):
        return self._read_ckpts([c])[0]

    def _read_ckpts(self, steps):
        """The checkpoints of ``steps`` (each a checkpoint's step), in one store read."""
        data, sizes = self.store.get_records_packed(
            self._handles[self._cname],
            np.asarray(steps, np.int64) // self.checkpoint_every)
        if len(steps) == 1:
            return [_Snap(int(steps[0]), data["key"], data.get("w"))]
        # each its own copy: a kept snapshot must not hold the whole read alive
        ends = np.cumsum(sizes["key"]).tolist()
        keys, w = data["key"], data.get("w")
        return [_Snap(int(c), keys[e - n:e].copy(), None if w is None else w[e - n:e].copy())
                for c, n, e in zip(steps, sizes["key"].tolist(), ends)]

    def _read_deltas(self, a, b):
        """Deltas of steps ``[a, b)`` as a list of dicts of arrays (views)."""
        data, sizes = self.store.get_records_packed(self._handles[self._dname],
                                                    np.arange(a, b, dtype=np.int64))
        out = [dict() for _ in range(b - a)]
        for key, arr in data.items():
            ends = np.cumsum(sizes[key])
            starts = ends - sizes[key]
            for rec, s, e in zip(out, starts.tolist(), ends.tolist()):
                rec[key] = arr[s:e]
        return out

    def _step(self, snap, delta, forward):
        """Snapshot after applying ``delta`` (of step ``snap.t + 1`` forward, or of step
        ``snap.t`` backward)."""
        if forward:
            return self._made(snap.t + 1, *_apply(
                snap.keys, snap.w, delta["del_key"], delta["add_key"], delta.get("add_w"),
                delta.get("chg_key"), delta.get("chg_new"), self._bits))
        return self._made(snap.t - 1, *_apply(
            snap.keys, snap.w, delta["add_key"], delta["del_key"], delta.get("del_w"),
            delta.get("chg_key"), delta.get("chg_old"), self._bits))

    @staticmethod
    def _made(t, keys, w, edge_index):
        """A snapshot built by :func:`_apply`, its output tensors made already."""
        snap = _Snap(t, keys, w)
        snap.out = (torch.from_numpy(edge_index),
                    None if w is None else torch.from_numpy(w))
        return snap

    def _walk(self, snap, t):
        """From ``snap`` to step ``t``: the deltas in between (one store read) composed
        into one net delta, applied once; none read where they are all empty."""
        if self._cum[t] == self._cum[snap.t]:  # the same edges (a static graph's steps)
            same = _Snap(t, snap.keys, snap.w)
            same.out = snap.out  # (shared, as with the cache: never changed in place)
            return same
        if abs(snap.t - t) > 1:
            forward = snap.t < t
            a, b = (snap.t + 1, t + 1) if forward else (t + 1, snap.t + 1)
            rm, add, add_w, chg, chg_w = _compose(self._read_deltas(a, b), forward,
                                                  self.weighted)
            return self._made(t, *_apply(snap.keys, snap.w, rm, add, add_w, chg, chg_w,
                                         self._bits))
        if snap.t < t:
            for a in range(snap.t + 1, t + 1, _READ_BLOCK):
                b = min(t + 1, a + _READ_BLOCK)
                for d in self._read_deltas(a, b):
                    snap = self._step(snap, d, True)
        elif snap.t > t:
            for b in range(snap.t + 1, t + 1, -_READ_BLOCK):
                a = max(t + 1, b - _READ_BLOCK)
                for d in reversed(self._read_deltas(a, b)):
                    snap = self._step(snap, d, False)
        return snap

    def _walk_cost(self, s, t):
        """The work of :meth:`_walk` from step ``s`` to ``t``: the delta entries in
        between, and :data:`_RECORD_COST` for each delta read (none when all are empty:
        no read)."""
        entries = int(abs(self._cum[t] - self._cum[s]))
        return entries + _RECORD_COST * abs(t - s) if entries else 0

    def _snap(self, t):
        """Materialised state of step ``t`` (cache, else the cheapest base + deltas)."""
        self.check_held()  # a freed graph's cache is not served either
        cached = self._cache.get(t)
        if cached is not None:
            return cached
        best, best_cost = None, None
        if self.has_deltas:
            for snap in self._cache.snaps():
                cost = self._walk_cost(snap.t, t)
                if best_cost is None or cost < best_cost:
                    best, best_cost = snap, cost
            i = int(np.searchsorted(self._ckpt_steps, t, side="right")) - 1
            for j in (i, i + 1):
                if 0 <= j < len(self._ckpt_steps):
                    c = int(self._ckpt_steps[j])
                    cost = int(self._num_edges[c]) + self._walk_cost(c, t)
                    if best_cost is None or cost < best_cost:
                        best, best_cost = c, cost
        else:
            best = t
        if not isinstance(best, _Snap):
            best = self._read_ckpt(best)
        snap = self._walk(best, t)
        self._remember(snap)
        return snap

    def _remember(self, snap):
        self._cache.put(snap, self.cache_size)

    def _emit(self, snap):
        if snap.out is None:
            keys = snap.keys
            ei = np.empty((2, keys.shape[0]), dtype=np.int64)
            np.bitwise_and(keys, self._mask, out=ei[0])
            np.right_shift(keys, self._bits, out=ei[1])
            snap.out = (torch.from_numpy(ei),
                        None if snap.w is None else torch.from_numpy(snap.w))
        return snap.out

    def snapshot(self, t):
        """Snapshot ``t``: ``(edge_index [2, E_t] int64, edge_weight [E_t] float32 or
        None)`` in canonical ``(dst, src)`` order.  Local (no collective call)."""
        return self._emit(self._snap(self._check_step(t)))

    def __getitem__(self, t):
        """``graph[t]``: :meth:`snapshot` ``t``, as a sequence of snapshots reads it (as
        PyTorch Geometric Temporal's signals index their steps): a negative ``t`` counts
        from the end, a slice gives the list of those snapshots (:meth:`snapshots`)."""
        if isinstance(t, slice):
            try:
                steps = range(self.num_steps)[t]
            except (TypeError, ValueError) as exc:  # a step of 0, parts not integers
                raise DDStoreValueError(f"DynamicGraph {self.name!r}: slice {t}: {exc}; "
                                        f"allowed: integers or None, a step other than "
                                        f"0") from None
            return self.snapshots(steps)
        t = integer_scalar(t)
        if is_int(t) and t < 0:
            if t < -self.num_steps:
                raise DDStoreIndexError(f"DynamicGraph {self.name!r}: t={t} out of range "
                                        f"[{-self.num_steps}, {self.num_steps})")
            t += self.num_steps
        return self.snapshot(t)

    def snapshots(self, steps):
        """Snapshots of ``steps`` (any order, repeats allowed), as a list in request order.

        The distinct steps are built in increasing order, each from the cheapest base
        (usually the one built just before), so a run of consecutive steps costs one
        delta per step; steps whose edges did not change since the step before share its
        tensors."""
        if isinstance(steps, (str, bytes)) or not hasattr(steps, "__iter__"):
            raise DDStoreValueError(f"DynamicGraph {self.name!r}.snapshots: steps must be "
                                    f"a sequence of integers in [0, {self.num_steps}), got "
                                    f"{type(steps).__name__}")
        if isinstance(steps, np.ndarray) and steps.ndim == 1 and steps.dtype.kind in "iu":
            bad = (steps < 0) | (steps >= self.num_steps)  # (all checked at once)
            if bad.any():
                i = int(np.argmax(bad))
                self._check_step(steps[i], f"snapshots: steps[{i}]")  # (raises)
            distinct = np.unique(steps).tolist()
            steps = steps.tolist()
        else:
            steps = [self._check_step(t, f"snapshots: steps[{i}]")
                     for i, t in enumerate(steps)]
            distinct = sorted(set(steps))
        # steps with no delta entries since the one before have its edges: one snapshot
        # built for each run of them (a static graph's steps: one in all)
        cum = self._cum[distinct]
        heads = [t for t, new in zip(distinct, np.concatenate(
            ([True], cum[1:] != cum[:-1])).tolist()) if new]
        read = {}  # every step a checkpoint: those not kept, in one store read
        if not self.has_deltas and len(heads) > 1:
            self.check_held()
            missing = [t for t in heads if not self._cache.holds(t)]
            if len(missing) > 1:
                read = {snap.t: snap for snap in self._read_ckpts(missing)}
        built, i = {}, -1
        for t in distinct:
            if i + 1 < len(heads) and heads[i + 1] == t:
                i += 1
                snap = read.get(t)
                if snap is None:
                    snap = self._snap(t)
                else:
                    self._remember(snap)
                out = self._emit(snap)
            built[t] = out
        return [built[t] for t in steps]

    def _range(self, start, stop, what):
        if stop is None:
            stop = self.num_steps
        start, stop = integer_scalar(start), integer_scalar(stop)
        for label, v in (("start", start), ("stop", stop)):
            if not is_int(v):
                raise DDStoreValueError(f"DynamicGraph {self.name!r}.{what}: {label} must "
                                        f"be an integer, got {v!r}")
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.num_steps:
            raise DDStoreIndexError(f"DynamicGraph {self.name!r}.{what}: steps [{start}, "
                                    f"{stop}) out of range; allowed 0 <= start <= stop <= "
                                    f"{self.num_steps}")
        return start, stop

    def forward(self, start=0, stop=None):
        """Iterate ``(t, (edge_index, edge_weight))`` for ``t = start .. stop - 1``.

        The first snapshot comes from the cheapest base; each later one is its stored
        checkpoint, if it has one, or the one before with its delta applied (deltas are
        read from the store in blocks); cached steps are reused as they are.
        """
        start, stop = self._range(start, stop, "forward")
        return self._iterate(start, stop, True)

    def backward(self, stop=None, start=0):
        """Iterate ``(t, (edge_index, edge_weight))`` for ``t = stop - 1`` down to
        ``start``, undoing one delta per step (the order of backpropagation through
        time)."""
        start, stop = self._range(start, stop, "backward")
        return self._iterate(start, stop, False)

    def _iterate(self, start, stop, forward):
        if start == stop:
            return
        steps = range(start, stop) if forward else range(stop - 1, start - 1, -1)
        snap, buf = None, {}
        for t in steps:
            self.check_held()
            u = t if forward else t + 1  # the delta that takes the previous step to t
            cached = self._cache.get(t)
            if cached is not None:
                snap = cached
            elif (snap is None or not self.has_deltas or
                  (t % self.checkpoint_every == 0 and
                   self._num_edges[t] < self._delta_entries[u])):
                snap = self._snap(t)  # first step, or a checkpoint cheaper than a delta
            else:
                d = buf.pop(u, None)
                if d is None:  # the next block of deltas, in walking order
                    a, b = ((u, min(stop, u + _READ_BLOCK)) if forward else
                            (max(start + 1, u + 1 - _READ_BLOCK), u + 1))
                    buf = dict(zip(range(a, b), self._read_deltas(a, b)))
                    d = buf.pop(u)
                snap = self._step(snap, d, forward)
                self._remember(snap)
            yield t, self._emit(snap)

    # ------------------------------------------------------------------ sizes
    def __len__(self):
        return self.num_steps

    def num_edges(self, t=None):
        """Edges of step ``t`` (after dedup); all steps as an int64 array when ``t`` is
        None."""
        if t is None:
            return self._num_edges.copy()
        return int(self._num_edges[self._check_step(t)])

    def delta_entries(self):
        """Local: the entries of each step's delta (edges added + deleted [+ changed
        weights]) as a new int64 array of one value per step; step 0 (a checkpoint,
        never a delta) counts 0."""
        return self._delta_entries.copy()

    def _record_bytes(self, name):
        h = self._handles.get(name)
        return self.store.nbytes(h) if h is not None and h in self.store else 0

    def nbytes(self):
        """Bytes this rank holds for the graph: its share of the deltas and checkpoints
        in the store, the records' offset tables and the per-step size tables (the
        snapshot cache not included; see :meth:`cache_nbytes`)."""
        return (self._record_bytes(self._dname) + self._record_bytes(self._cname) +
                self._num_edges.nbytes + self._delta_entries.nbytes + self._cum.nbytes +
                self._ckpt_steps.nbytes)

    def clear_cache(self):
        """Drop every cached snapshot (the next access rebuilds from a checkpoint)."""
        self._cache.clear()

    def cache_nbytes(self):
        """Bytes held by the snapshot cache (keys, weights, emitted edge_index)."""
        total = 0
        for snap in self._cache.snaps():
            total += snap.keys.nbytes + (0 if snap.w is None else snap.w.nbytes)
            if snap.out is not None:
                total += snap.out[0].numel() * 8
        return int(total)

    def materialized_nbytes(self):
        """Bytes of every snapshot stored in full as PyG tensors (int64 ``[2, E_t]``
        plus float32 ``[E_t]`` weights when weighted), as a list of snapshots such as
        PyTorch Geometric Temporal's ``DynamicGraphTemporalSignal`` holds on every rank."""
        return int(self._num_edges.sum()) * (16 + (4 if self.weighted else 0))

    def free(self):
        """Collective: remove the graph's records from the store.  Safe to call
        twice."""
        with self.store.collective("DynamicGraph.free", self.name):
            held = self.held()
        if held:
            self.store.remove(*held)
        self._cache.clear()

    def forget(self):
        """Local: drop the snapshots this rank cached (after its variables were
        removed by the dataset that owns it, or by a rollback)."""
        self._cache.clear()

    def held(self):
        """Local: the names of the graph's variables the store still holds."""
        return [n for n, h in self._handles.items() if h in self.store and n in self.store]

    def __repr__(self):
        return (f"DynamicGraph({self.name!r}, steps={self.num_steps}, nodes="
                f"{self.num_nodes}, edges={int(self._num_edges.sum())} in all, "
                f"checkpoint_every={self.checkpoint_every}, weighted={self.weighted})")


def _check_annotation(store, name, meta, arrays):
    """Raise a :class:`DDStoreValueError` unless graph ``name``'s annotation agrees with
    the record sets it describes (a checkpoint's manifest edited by hand: num_steps or
    num_nodes changed read other snapshots, or raised a bare IndexError)."""
    steps, nodes, every = (meta.get(k) for k in ("num_steps", "num_nodes",
                                                  "checkpoint_every"))
    ok = all(is_int(v) and v >= 1 for v in (steps, nodes, every))
    if ok:
        lengths = [np.shape(arrays.get(k, ())) for k in ("num_edges", "delta_entries")]
        held = store.nrows(f"{name}/ckpt") if f"{name}/ckpt" in store else None
        deltas = store.nrows(f"{name}/delta") if f"{name}/delta" in store else None
        ok = lengths == [(steps,)] * 2 and held == -(-steps // every) and (
            deltas == (steps if every > 1 else None))
    if not ok:
        raise DDStoreValueError(
            f"DynamicGraph.open({name!r}): its annotation (num_steps={steps!r}, "
            f"num_nodes={nodes!r}, checkpoint_every={every!r}) does not match its "
            f"records (a damaged checkpoint?)")
