"""TemporalSampler: multi-layer temporal neighbour sampling, its loop in C
(``csrc/temporal.c``) over the store's memory."""
import mmap

import numpy as np

from .. import _core
from ..errors import DDStoreError, DDStoreMemoryError, DDStoreStateError, \
    DDStoreValueError
from .._checks import as_bool, as_indices, as_int, as_seed, check_indices, is_int, tensor_values
from .._times import as_times, refuse_rounded_list
from ..memory import available_memory

_CLAMP_ABOVE = 1 << 16  # output buffers larger than this are sized by the roots' degrees
_EDGE_BYTES = 32  # per sampled edge: row, neighbour, edge id, time
_INT64_MAX = (1 << 63) - 1


class TemporalBlock:
    """One sampled layer, with the fields a TGL user knows.

    - ``nodes``: the layer's roots first (``num_roots`` of them), then one entry per
      sampled edge (its neighbour);
    - ``ts``: (like every time here, of the graph's ``time_dtype``: int64 times exactly)
      the time of each entry of ``nodes``: the root's query time for roots; for
      sampled neighbours the edge's time (or, with ``prop_time=True``, its root's time).
      The next layer samples ``nodes`` at ``ts``;
    - ``row``: the root position (0 .. num_roots-1) of each sampled edge;
    - ``col``: the position in ``nodes`` of each sampled edge's neighbour
      (``num_roots + j`` for edge ``j``);
    - ``eid``: the edge id (int64); ``edge_ts``: the edge's timestamp;
    - ``dts``: root time minus edge time (always > 0: only strictly earlier edges;
      exact for int64 times, whose span must then be below 2**63).

    ``edge_index`` is ``[col, row]`` (messages flow from the neighbour to its root, PyG's
    source/target order).  Fields are numpy arrays; :meth:`to_torch` gives CPU tensors.
    Without ``prop_time``, ``edge_ts`` is a view of ``ts[num_roots:]`` (the sample
    writes them once): copy one before changing it in place.
    """
    __slots__ = ("nodes", "ts", "row", "col", "eid", "edge_ts", "dts", "num_roots")

    def __init__(self, nodes, ts, row, col, eid, edge_ts, dts, num_roots):
        self.nodes, self.ts, self.row, self.col = nodes, ts, row, col
        self.eid, self.edge_ts, self.dts, self.num_roots = eid, edge_ts, dts, num_roots

    @property
    def num_edges(self):
        return len(self.eid)

    @property
    def edge_index(self):
        if isinstance(self.col, np.ndarray):
            return np.stack([self.col, self.row])
        import torch
        return torch.stack([self.col, self.row])

    def to_torch(self):
        """The same block with CPU tensors (sharing memory with the numpy arrays)."""
        import torch
        f = torch.from_numpy
        return TemporalBlock(f(self.nodes), f(self.ts), f(self.row), f(self.col),
                             f(self.eid), f(self.edge_ts), f(self.dts), self.num_roots)

    def __repr__(self):
        return f"TemporalBlock(num_roots={self.num_roots}, num_edges={self.num_edges})"


class TemporalSampler:
    """Temporal neighbour sampler over a :class:`TemporalGraph` (local; no communication
    besides one-sided reads of lists held by members that are not node-local).

    ``fanouts``: neighbours per root for each layer (``(10, 10)``: two layers).
    ``strategy``: ``"recent"`` takes the ``k`` eligible edges with the latest timestamps
    (in time order); ``"uniform"`` draws ``k`` with replacement among the eligible edges
    when there are more than ``k`` and takes all of them otherwise.  Eligible means a
    timestamp **strictly before** the root's time: no information from the future and
    none from the root's own instant.  Every eligible edge can be returned, including the
    node's earliest (TGL's sampler never returns that one and loses one slot per edge at
    the root's own time; see docs/temporal-graphs.md).

    Uniform draws come from a counter-based stream keyed by ``(seed, epoch, layer, root
    position)``: the same roots give the same samples on any rank count, width or
    transport; :meth:`set_epoch` changes the stream.

    Layer ``l + 1`` samples every entry of layer ``l``'s ``nodes`` (roots and sampled
    neighbours) at its ``ts``; ``prop_time=True`` gives sampled neighbours their root's
    time instead of the edge's.

    Lists held by group members that are not node-local (or any other member with
    ``transport="rma"``) are read one-sidedly.  A list with at most
    ``remote_fetch_max * max(1, r / 2)`` entries, ``r`` being the roots of the layer that
    ask for it, is fetched whole once per layer and sampled like a local one; a longer
    list is binary-searched remotely and only the selected rows are read: in one piece
    per root, except for uniform draws from more than ``remote_range_factor * k``
    eligible entries, read one row per draw.  With ``remote_fetch_max=None`` (the
    default: 2048) the longer lists of a layer are fetched whole too when together they
    hold at most 1 MiB (a search's round trips cost more than that between nodes:
    docs/benchmarks.md); an integer makes the rule exact.  The samples are the same
    whichever way a list is read.
    """

    def __init__(self, graph, fanouts=(10, 10), strategy="recent", seed=0, prop_time=False,
                 remote_fetch_max=None, remote_range_factor=64):
        if isinstance(fanouts, (int, np.integer)) and not isinstance(fanouts, bool):
            fanouts = (fanouts,)
        try:
            fan = [f for f in fanouts]
        except TypeError:
            raise DDStoreValueError(f"fanouts must be a sequence of positive integers, got "
                                    f"{fanouts!r}") from None
        if not fan or any(not is_int(f) or f <= 0 for f in fan):
            raise DDStoreValueError(f"fanouts must be a non-empty sequence of integers >= 1,"
                                    f" got {fanouts!r}")
        if not isinstance(strategy, str) or strategy not in _core.SAMPLE_STRATEGIES:
            raise DDStoreValueError(f"unknown strategy {strategy!r}; allowed: "
                                    f"{sorted(_core.SAMPLE_STRATEGIES)}")
        seed = as_seed(seed, "TemporalSampler: seed")
        self.graph = graph
        self.fanouts = tuple(int(f) for f in fan)
        self.strategy = strategy
        self._strategy = _core.SAMPLE_STRATEGIES[strategy]
        self.seed = seed
        self.prop_time = as_bool(prop_time, "TemporalSampler: prop_time")
        # the epoch in memory shared with the processes forked from this one (DataLoader
        # workers, persistent ones included): they draw the epoch set_epoch set since
        # (a copy would repeat the epoch of their fork, every epoch)
        self._epoch = np.frombuffer(mmap.mmap(-1, 8), dtype=np.uint64)
        for label, v in (("remote_fetch_max", remote_fetch_max),
                         ("remote_range_factor", remote_range_factor)):
            if (v is not None or label == "remote_range_factor") and (
                    not is_int(v) or not 1 <= v <= _INT64_MAX):
                raise DDStoreValueError(f"{label}={v!r} must be an integer >= 1" +
                                        (" or None" if label == "remote_fetch_max" else "")
                                        + " (integers at most 2**63 - 1)")
        self._tcsr = graph.tcsr_handle(int(remote_fetch_max or 0), int(remote_range_factor))

    def set_epoch(self, epoch):
        """Select the random stream of ``uniform`` sampling (like DistributedSampler);
        seen by DataLoader workers forked before (``persistent_workers=True``)."""
        self._epoch[0] = as_int(epoch, "set_epoch: epoch") & 0xFFFFFFFFFFFFFFFF

    @property
    def epoch(self):
        """The epoch :meth:`set_epoch` set (0 at first; assigning it is set_epoch)."""
        return int(self._epoch[0])

    @epoch.setter
    def epoch(self, epoch):
        self.set_epoch(epoch)

    def __copy__(self):
        """A copy with an epoch of its own (the shared memory is per sampler)."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._epoch = np.frombuffer(mmap.mmap(-1, 8), dtype=np.uint64)
        other._epoch[0] = self._epoch[0]
        return other

    def sample(self, nodes, ts):
        """Local: sample every layer for roots ``nodes`` at times ``ts`` (finite real
        numbers the graph's ``time_dtype`` holds exactly: for int64 times, integers or
        whole floats; for float64, floats or integers within ``[-2**53, 2**53]``).

        Returns a list of :class:`TemporalBlock`, one per layer (layer 0 first).
        """
        if self.graph.removed:
            raise DDStoreStateError(f"sample: graph {self.graph.name!r} was removed from "
                                    f"the store (TemporalGraph.remove, or the rollback of "
                                    f"the transaction that built it); build a new graph "
                                    f"and a sampler over it")
        roots = as_indices(nodes, f"sample of graph {self.graph.name!r}",
                           self.graph.num_nodes, "root")
        t = np.asarray(tensor_values(ts, "sample: ts"))
        refuse_rounded_list(ts, t, "sample: ts")
        if t.ndim != 1 or (t.size and t.dtype.kind not in "iufO"):  # (O: Python ints
            # beyond int64, named by as_times with the range)
            raise DDStoreValueError(f"sample: ts must be a 1-D array of real times, got "
                                    f"dtype {t.dtype} shape {t.shape}")
        if t.shape[0] != roots.shape[0]:
            raise DDStoreValueError(f"sample: {roots.shape[0]} nodes but {t.shape[0]} times;"
                                    f" they must have the same length")
        t = np.ascontiguousarray(as_times(t, self.graph.time_dtype, "sample: ts",
                                          copy=False))
        n = self.graph.num_nodes
        check_indices(roots, n, "sample", item="root")
        if t.dtype.kind == "f" and not np.isfinite(t).all():  # as NodeMemory's times
            i = int(np.argmin(np.isfinite(t)))
            raise DDStoreValueError(f"sample: ts[{i}] = {t[i]} (root {roots[i]}) is NaN or "
                                    f"infinite; root times must be finite")
        blocks = []
        indptr = self.graph.indptr
        for layer, k in enumerate(self.fanouts):
            nr = roots.shape[0]
            if nr * k > _CLAMP_ABOVE or k > _CLAMP_ABOVE:  # (no roots: k beyond int64)
                # the output buffers hold nr * k edges: no root has more eligible edges
                # than its degree, so a larger k samples the same (recent: all of them;
                # uniform: all of them, no draws); size them by what can exist
                k = max(1, min(k, int((indptr[roots + 1] - indptr[roots]).max(
                    initial=0))))
            try:
                # the block's nodes and ts (roots first), made by the sample itself
                row, nodes, eid, times = self._tcsr.sample(
                    roots, t, k, self._strategy, self.seed, self.epoch, layer, lead=True)
            except MemoryError as exc:
                if isinstance(exc, DDStoreError):
                    raise
                fit = available_memory() // _EDGE_BYTES
                raise DDStoreMemoryError(
                    f"sample of graph {self.graph.name!r}, layer {layer}: fanout "
                    f"{self.fanouts[layer]} for {nr} roots needs room for {nr * k} sampled "
                    f"edges ({_EDGE_BYTES} bytes each), which cannot be allocated; about "
                    f"{fit} fit in the memory available: sample fewer roots or a smaller "
                    f"fanout") from None
            root_time = t[row]
            ets = times[nr:]
            if self.prop_time:  # the neighbours at their roots' times; the edges' kept
                ets = ets.copy()
                times[nr:] = root_time
            block = TemporalBlock(nodes, times, row,
                                  np.arange(nr, nr + len(row), dtype=np.int64), eid,
                                  ets, self._dts(root_time, ets, layer), nr)
            blocks.append(block)
            roots, t = block.nodes, block.ts
        return blocks

    def _dts(self, root_time, ets, layer):
        """Root time minus edge time; int64 times: exact, or a :class:`DDStoreValueError`
        where the difference exceeds int64 (times spanning 2**63 or more); float64
        times: the same error where it exceeds float64 (an infinity)."""
        with np.errstate(over="ignore"):
            dts = root_time - ets
        if not dts.size:
            return dts
        if dts.dtype.kind == "i" and int(dts.min()) <= 0:  # wrapped around
            j = int(np.argmax(dts <= 0))
            raise DDStoreValueError(
                f"sample of graph {self.graph.name!r}, layer {layer}: root time "
                f"{int(root_time[j])} minus edge time {int(ets[j])} is "
                f"{int(root_time[j]) - int(ets[j])}, beyond int64's 2**63 - 1: the graph's "
                f"int64 times span too much for dts")
        if dts.dtype.kind == "f" and not np.isfinite(dts).all():  # (both times finite)
            j = int(np.argmin(np.isfinite(dts)))
            raise DDStoreValueError(
                f"sample of graph {self.graph.name!r}, layer {layer}: root time "
                f"{float(root_time[j])!r} minus edge time {float(ets[j])!r} is beyond "
                f"float64's largest number ({float(np.finfo(np.float64).max)!r}): the graph's "
                f"float64 times span too much for dts")
        return dts
