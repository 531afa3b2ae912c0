"""NeighborSampler: PyG's ``BaseSampler`` over a :class:`GraphStore`, one C call per hop
and edge type (``csrc/neighbor.c``) where the CSC lives."""
import os

import numpy as np
import torch
from torch_geometric.sampler import (BaseSampler, HeteroSamplerOutput, NegativeSampling,
                                     SamplerOutput)
from torch_geometric.sampler.base import NumNeighbors
from torch_geometric.typing import EdgeTypeStr
from torch_geometric.sampler.base import SubgraphType
from torch_geometric.sampler.neighbor_sampler import \
    BidirectionalNeighborSampler as _PygBidirectionalNeighborSampler
from torch_geometric.sampler.neighbor_sampler import edge_sample, node_sample

from .. import _core
from .._checks import as_bool, as_indices, as_seed, check_indices, is_int, tensor_values
from .._times import FLOAT_TIMES, INT_TIMES, as_times, time_share
from ..errors import DDStoreNotImplementedError, DDStoreStateError, DDStoreValueError
from . import workers
from ._common import edge_var, node_var
from ._merge import merge_outputs

__all__ = ["NeighborSampler", "BidirectionalNeighborSampler", "canonical_fanout"]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
#: With ``replace=True`` every node draws exactly ``k`` edges, so ``k`` sizes the output
#: (24 bytes per draw and node): fanouts above this bound are refused.  Without
#: replacement any ``k`` is valid (a node takes ``min(k, degree)``).
MAX_FANOUT_WITH_REPLACEMENT = 2 ** 20
_INT64_MAX = (1 << 63) - 1
#: ``subgraph_type="induced"`` filters the whole in-list of every sampled node: the
#: lists not readable by load (other members' over RMA) are fetched at most this many
#: entries per batched read (a longer list alone), 8 bytes each at most.
INDUCED_CHUNK_ENTRIES = 1 << 22
SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
#: The relabelling (global ids to a batch's positions) is done in C inside each hop's
#: sampling call (``dds_neighbor_hop``, ``csrc/relabel.c``), by one rule: a key space
#: (a node type's nodes, or with disjoint sampling subgraphs x nodes) of at most this
#: many keys is mapped through a dense table (4 bytes per key), a larger one through a
#: hash.  Both are kept by the sampler between batches.
DENSE_RELABEL_MAX_NODES = _core.RELABEL_DENSE_MAX


class _RelabelPool:
    """The relabelling maps (``_core.RelabelMap``, held in C) a sampler keeps between
    batches, by node count and mode.  A batch takes one per node type and gives it back
    reset (a background thread sampling beside the main one takes its own)."""

    def __init__(self):
        self._free = {}

    def take(self, key):
        try:
            return self._free.setdefault(key, []).pop()
        except IndexError:
            return _core.RelabelMap()

    def give(self, key, relabel):
        """Back, after its ``reset()``."""
        self._free.setdefault(key, []).append(relabel)


def _joined_times(parts):
    """The seed times of every node type in one array: int64 when all are integers,
    else float64 (an integer float64 would round is refused, as everywhere)."""
    dt = INT_TIMES if all(p.dtype == INT_TIMES for p in parts) else FLOAT_TIMES
    return np.concatenate([as_times(p, dt, "seed times", copy=False) for p in parts]
                          or [np.zeros(0, dt)])


class _StoredTime:
    """A node-time attribute read from the store on demand: what PyG's negative sampling
    indexes (``node_time[idx]``, ``node_time.argmin()``) without a replicated copy."""

    def __init__(self, store, var):
        self.store, self.var = store, var

    def __getitem__(self, idx):
        idx = torch.as_tensor(idx)
        flat = self.store.get_batch(self.var, idx.reshape(-1).numpy().astype(np.int64))
        return torch.from_numpy(flat.reshape(-1)).view(idx.shape)

    def argmin(self):  # PyG's last resort; reads the whole attribute onto this rank
        return torch.from_numpy(self.store.get_range(
            self.var, 0, self.store.nrows(self.var)).reshape(-1)).argmin()


class _NodeSet:
    """The sampled nodes of one node type: global ids in order, their subgraph (disjoint
    mode), and the C map from key (the node id; disjoint, the pair (subgraph, node)) to
    the position in ``nodes``, which each hop's sampling call fills."""

    def __init__(self, num_nodes, disjoint, pool, subgraphs=1):
        self.num_nodes, self.disjoint = num_nodes, disjoint
        self.nodes, self.batch = [], []
        self.count = 0
        self.sizes = []
        self._pool, self._key = pool, (int(num_nodes), bool(disjoint))
        self.map = pool.take(self._key)
        try:
            self.map.begin(num_nodes, max(1, int(subgraphs)) if disjoint else 0,
                           dense_max=DENSE_RELABEL_MAX_NODES)
        except BaseException:
            self.release()
            raise

    def release(self):
        """Give the map back to the pool, reset (after the batch, failed or not)."""
        if self._pool is not None:
            self.map.reset()
            self._pool.give(self._key, self.map)
            self._pool = None

    def added(self, new_nodes, new_batch):
        """The nodes a hop appended to the map's list (and their subgraphs)."""
        self.count += new_nodes.shape[0]
        self.nodes.append(new_nodes)
        if self.disjoint:
            self.batch.append(new_batch)
        self.sizes.append(int(new_nodes.shape[0]))

    def add_seeds(self, seeds, batch):
        """The seeds, kept as given (duplicates included; a repeated seed maps to its
        first position); returns the frontier ``(ids, positions, subgraphs)``."""
        n = seeds.shape[0]
        seeds = np.ascontiguousarray(seeds, dtype=np.int64)
        self.map.seed(seeds, batch if self.disjoint else None)
        self.count = n
        self.nodes.append(seeds)
        if self.disjoint:
            self.batch.append(batch)
        self.sizes.append(n)
        return (seeds, np.arange(n, dtype=np.int64),
                batch if batch is not None else np.zeros(n, dtype=np.int64))

    def node_tensor(self):
        return torch.from_numpy(np.concatenate(self.nodes) if self.nodes else
                                np.zeros(0, dtype=np.int64))

    def batch_tensor(self):
        return torch.from_numpy(np.concatenate(self.batch) if self.batch else
                                np.zeros(0, dtype=np.int64))


def _pair_bidirectional(row, col, rev_row, rev_col, edge=None, rev_edge=None,
                        num_nodes=None):
    """``(row, col, edge)`` tensors of the C ``to_bidirectional`` of one edge set
    (``num_nodes``: the bound of the local ids when known, else found from them)."""
    ids = edge is not None and rev_edge is not None
    r, c, e = _core.bidirectional(row.numpy(), col.numpy(), rev_row.numpy(),
                                  rev_col.numpy(), edge.numpy() if ids else None,
                                  rev_edge.numpy() if ids else None, num_nodes=num_nodes)
    return torch.from_numpy(r), torch.from_numpy(c), torch.from_numpy(e) if ids else None


def to_bidirectional(out):
    """PyG's ``SamplerOutput.to_bidirectional()`` / ``HeteroSamplerOutput.
    to_bidirectional()`` (``keep_orig_edges=False``), by the same rules, with the merge
    done in C (:func:`ddstore._core.bidirectional`: two counting sorts, O(edges + nodes),
    where PyG sorts 64-bit keys; 5-20x faster on a sampled batch).

    Every sampled edge is also taken reversed, each distinct local pair once, sorted by
    (col, row) as PyG's ``coalesce(sort_by_row=False)``; the per-hop counts are cleared.
    Homogeneous: a pair sampled both ways keeps the edge id of one of its two edges
    (PyG's ``reduce="any"``: which one PyG keeps depends on its unstable sort; ours is
    always the reversed edge's).  Heterogeneous, as PyG: an edge type ``(s, r, d)``
    (``r`` not starting with ``rev_``) is merged with ``(d, "rev_" + r, s)`` when that
    was sampled (both get the merged pairs), else with itself when ``s == d``, else with
    the only sampled type from ``d`` to ``s`` (PyG warns when there is none or several,
    and so do we); edge ids of the merged types are dropped."""
    import copy
    import warnings
    res = copy.copy(out)
    res.num_sampled_nodes = res.num_sampled_edges = None
    if not isinstance(out, HeteroSamplerOutput):
        # local ids index the batch's nodes: their count bounds them (no pass to find it)
        res.row, res.col, res.edge = _pair_bidirectional(out.row, out.col, out.row,
                                                         out.col, out.edge, out.edge,
                                                         num_nodes=out.node.numel())
        return res
    res.row, res.col = dict(out.row), dict(out.col)
    res.edge = None if out.edge is None else dict(out.edge)
    by_ends = {}
    for key in out.row:
        by_ends.setdefault((key[0], key[2]), []).append(key)
    for key in [k for k in out.row if not k[1].startswith("rev_")]:
        src, rel, dst = key
        rev = (dst, f"rev_{rel}", src)
        if rev in out.row:
            pass
        elif src == dst:
            rev = key
        elif len(by_ends.get((dst, src), ())) == 1:
            rev = by_ends[(dst, src)][0]
        else:
            warnings.warn(f"Cannot convert to bidirectional graph since the edge type "
                          f"{key} does not seem to have a reverse edge type", stacklevel=2)
            continue
        row, col, _ = _pair_bidirectional(out.row[key], out.col[key], out.row[rev],
                                          out.col[rev])
        res.row[key], res.col[key] = row, col
        if rev[1] == f"rev_{rel}" and rev != key:
            res.row[rev], res.col[rev] = col, row
        if res.edge is not None:
            res.edge[key] = None
            if rev[1] == f"rev_{rel}" and rev != key:
                res.edge[rev] = None
    return res


def _check_subgraph_type(subgraph_type, disjoint, asked_disjoint):
    """PyG's ``subgraph_type`` (a str or ``SubgraphType``) as a str, checked."""
    value = getattr(subgraph_type, "value", subgraph_type)
    if value not in SUBGRAPH_TYPES:
        raise DDStoreValueError(f"subgraph_type must be one of {list(SUBGRAPH_TYPES)}, got "
                                f"{subgraph_type!r}")
    if value == "induced" and disjoint:
        raise DDStoreValueError(
            "subgraph_type='induced' cannot be combined with disjoint subgraphs ("
            + ("disjoint=True" if asked_disjoint else "temporal sampling is disjoint")
            + "), as in PyG; use subgraph_type='directional' or 'bidirectional'")
    return value


def _refuse_dropped_in_lists(graph_store, edge_types, sample_direction, subgraph_type):
    """A :class:`DDStoreValueError` when the sampling asked for reads in-lists that
    ``build_backward(keep_in_lists=False)`` dropped: forward sampling (temporal too, and
    the forward half of :class:`BidirectionalNeighborSampler`) and
    ``subgraph_type="induced"`` (which filters in-lists)."""
    dropped = [et for et in edge_types if graph_store.sampled_lists(et).dropped]
    if not dropped:
        return
    if sample_direction != "backward":
        why = (f"sample_direction={sample_direction!r} (forward sampling: also "
               f"BidirectionalNeighborSampler's forward half) draws from each node's "
               f"in-lists")
    elif getattr(subgraph_type, "value", subgraph_type) == "induced":
        why = "subgraph_type='induced' filters each sampled node's in-lists"
    else:
        return
    raise DDStoreValueError(
        f"{why}, and graph store {graph_store.name!r} holds none of edge type(s) "
        f"{', '.join(repr(et) for et in dropped)}: build_backward(keep_in_lists=False) "
        f"dropped them and kept only the out-lists.  Sample with "
        f"sample_direction='backward' (subgraph_type 'directional' or 'bidirectional'), "
        f"or keep the in-lists (remove_edge_index, put the edges again, build_backward() "
        f"with keep_in_lists=True)")


def _untimed_edge_types(graph_store, edge_types, time_attr):
    """The edge types stored without times while the graph store has a ``time_attr``
    (heterogeneous graphs whose source node type has no such attribute): sampled
    without a time rule.  Refused when the times exist now (put after the edges)."""
    if time_attr is None:
        return frozenset()
    out = []
    for et in edge_types:
        if graph_store.sampled_lists(et).time_level is not None:
            continue
        st, name = graph_store.store, graph_store.name
        late = [v for v in (edge_var(name, et, time_attr),
                            node_var(name, None if et is None else et[0], time_attr))
                if v in st]
        if late:
            raise DDStoreValueError(
                f"edge type {et!r} was put without times but {late[0]!r} exists now: "
                f"put the time attribute before the edge index (remove_edge_index and "
                f"put it again)")
        out.append(et)
    return frozenset(out)



def canonical_fanout(k):
    """One hop's fanout as the sampler keeps it: any negative number is -1 (all
    neighbours, as pyg-lib reads it); one beyond int64 (without replacement, a k beyond
    every degree takes the whole list) is cut to int64's largest."""
    return -1 if int(k) < 0 else min(int(k), _INT64_MAX)

class NeighborSampler(BaseSampler):
    """PyG's neighbour sampling over a :class:`GraphStore`, for ``NeighborLoader`` /
    ``LinkNeighborLoader(data=(feature_store, graph_store), ...,
    neighbor_sampler=this)``; no pyg-lib or torch-sparse needed.

    Each hop, for each edge type ``(src, rel, dst)``, every node of type ``dst`` added
    in the previous hop (the seeds at hop 0) draws neighbours from its CSC list (the
    sources of its incoming edges) in one C call over the store: lists held by this rank
    or node-local members are read by load, the others one-sidedly in one batched read
    per variable.  ``num_neighbors`` (a list per hop, or a dict per edge type, as PyG):
    ``k = -1`` takes every neighbour; ``replace=False`` takes ``min(k, deg)`` distinct
    neighbours, each set equally likely (every one when ``deg <= k``);
    ``replace=True`` takes ``k`` independent uniform draws (the same edge may repeat).

    Output (PyG's ``SamplerOutput`` / ``HeteroSamplerOutput``): ``node`` = the seeds in
    the given order, then each hop's new nodes in order of first draw; ``row`` = the
    local index of the neighbour (the edge's source), ``col`` = that of the node it was
    drawn for (the target); ``edge`` = the edge ids (they index the feature store's edge
    attributes); ``num_sampled_nodes`` / ``num_sampled_edges`` per hop.  With
    ``disjoint=True`` every seed grows its own subgraph (a node reached from two seeds
    appears twice) and ``batch`` names each node's seed.

    **Temporal** (``time_attr``, which must be the ``time_attr`` the graph store is
    sorted by): sampling is disjoint, as in PyG; an entry is eligible when its time (the
    edge's time, or its source node's time) is **not later than** the seed's time
    (``t <= seed_time``) of the subgraph it is drawn for, at every hop.
    ``temporal_strategy="uniform"`` draws among the eligible entries as above,
    ``"last"`` takes the ``k`` latest eligible ones (``replace=True``: ``k`` draws among
    them, as pyg-lib).  Seed times come from the loader
    (``input_time`` / ``edge_label_time``); without them, node-level time uses the
    seeds' own times and edge-level time is an error (as pyg-lib).  Times are compared
    exactly, in the edge type's time dtype (int64 for an integer time attribute: Unix
    nanoseconds included; else float64): a seed time that dtype does not hold exactly
    (a fraction against int64 times, an integer beyond 2**53 against float64 ones) is
    refused.

    ``subgraph_type`` (PyG's): ``"directional"`` (the drawn edges), ``"bidirectional"``
    (PyG's ``to_bidirectional``: every drawn edge also reversed, duplicate local pairs
    merged, per-hop counts cleared) or ``"induced"`` (the drawn nodes with every stored
    edge among them, each once; not with disjoint/temporal sampling, as in PyG).
    ``sample_direction="backward"`` (PyG's): every node draws from its **out**-lists
    instead (the destinations of its outgoing edges, as PyG samples the CSR), so each
    hop of edge type ``(src, rel, dst)`` grows ``dst`` nodes from the ``src`` frontier;
    the output keeps PyG's orientation: ``row`` = the edge's source (the node drawn
    for), ``col`` = its destination (the drawn neighbour), ``edge`` = the edge ids as
    put, edge types as stored (a dict ``num_neighbors`` is keyed by them).  The
    out-lists must exist: ``gs.build_backward()`` (collective, once) builds them; the
    sampler names that call when they are missing.  After
    ``gs.build_backward(keep_in_lists=False)`` (the out-lists replace the in-lists),
    only backward sampling (``"directional"`` or ``"bidirectional"``) is possible:
    forward, temporal and ``"induced"`` sampling are refused here, naming the edge
    type and that call.  Weighted backward sampling draws by
    the same weights; ``"induced"`` takes every stored edge among the drawn nodes, as
    forward; temporal backward sampling is refused (PyG does not define it), with a
    :class:`~ddstore.DDStoreNotImplementedError` (a ``NotImplementedError``, as PyG's).
    Hetero temporal: an edge type whose source node type has no time attribute is
    sampled without the time rule (PyG's rule).

    **DataLoader workers** (``num_workers > 0``, forked): they sample and read features
    by plain loads from the shared-memory windows they inherit, where every read of the
    store is node-local (``transport="auto"`` with each group on one node, or
    ``"shm"``); the loader is refused when it is built where a read needs MPI
    (``transport="rma"``, a group spanning nodes) or the workers would not be forked
    (``"spawn"``, ``"forkserver"``): use :func:`ddstore.prefetch.prefetch` there (a
    background thread; the C sampler and the store reads release the GIL).  With an
    integer ``seed`` the workers' batches are those of ``num_workers=0``, batch for
    batch.  See :mod:`ddstore.pyg.workers`.

    **Weighted** (``weight_attr``, which must be the ``weight_attr`` the graph store was
    built with: ``GraphStore(store, name, weight_attr=...)``, the weights put as an edge
    attribute before the edges): an entry is drawn in proportion to its edge's weight,
    with pyg-lib's rule for what is taken.  ``k = -1``, or ``k`` at or above the list's
    length without replacement: the whole (eligible) list, in list order, zero weights
    included (the weights play no part).  ``replace=True``: ``k`` independent draws,
    each entry with probability ``w / sum(w)`` over the node's (eligible) list, so
    never one of weight 0 (a list whose weights are all 0 takes nothing, where
    pyg-lib's multinomial raises).  ``replace=False``: ``k`` distinct entries drawn as
    pyg-lib draws them (Efraimidis-Spirakis: the ``k`` smallest ``E / w``, ``E``
    exponential), which is the law of ``k`` successive draws without replacement, each
    in proportion to the weights left; when the list has ``p <= k`` positive weights,
    all ``p`` and ``k - p`` of its zero-weight entries, each such choice alike (pyg-lib's
    keys of weight 0 tie), in list order.  Weighted
    temporal sampling draws among the eligible entries (pyg-lib refuses it);
    ``temporal_strategy="last"`` ignores weights, so it is refused with them.  Hetero:
    edge types without the attribute are sampled uniformly, as in PyG.  Costs one more
    read per list (its weights: by load, or one batched read for the remote lists) and
    a pass over the list for each node that draws.

    Draws come from a counter-based stream: with ``seed=None`` (default) its key is drawn
    from torch's generator for every batch (reproducible under ``torch.manual_seed``);
    an integer ``seed`` gives the same sequence of batches on every run and rank count.
    Sampling is local: no collective call, ranks sample at their own pace.
    """

    def __init__(self, graph_store, num_neighbors, replace=False, disjoint=False,
                 temporal_strategy="uniform", time_attr=None, seed=None,
                 subgraph_type="directional", sample_direction="forward",
                 weight_attr=None):
        from .graph_store import GraphStore
        if not isinstance(graph_store, GraphStore):
            raise DDStoreValueError(f"NeighborSampler needs a ddstore.pyg.GraphStore, got "
                                    f"{type(graph_store).__name__}")
        if sample_direction == "backward" and time_attr is not None:
            # PyG refuses this first, whatever else the graph holds: so do we
            raise DDStoreNotImplementedError(
                f"sample_direction='backward' with time_attr={time_attr!r}: PyG does "
                f"not define temporal backward sampling (its NeighborSampler raises "
                f"NotImplementedError); sample forward, or backward without "
                f"time_attr")
        self.graph_store = graph_store
        self.store = graph_store.store
        self.edge_types = graph_store.sampled_edge_types()
        # the lists sampled (what the checks below and the node counts were taken
        # from): a batch after they changed is refused (_handle)
        self._built_on = {et: graph_store.sampled_lists(et) for et in self.edge_types}
        # node types: those of the edge types, then those with node attributes only
        # (a graph with no edges, or no edge of some type, samples its seeds)
        counts = graph_store.node_counts()
        self.is_hetero = (self.edge_types != [None] if self.edge_types else
                          any(t is not None for t in counts))
        counts = {t: n for t, n in counts.items() if (t is not None) == self.is_hetero}
        if not counts:
            raise DDStoreValueError(f"graph store {graph_store.name!r} holds no edges and "
                                    f"its feature store no node attributes nor declared "
                                    f"node counts: put an edge index (it may have no "
                                    f"edges) or node attributes, or declare the node "
                                    f"counts (FeatureStore.declare_rows) first")
        _refuse_dropped_in_lists(graph_store, self.edge_types, sample_direction,
                                 subgraph_type)
        self.replace = as_bool(replace, "NeighborSampler: replace")
        self.num_neighbors = num_neighbors
        self._disjoint = as_bool(disjoint, "NeighborSampler: disjoint")
        if temporal_strategy not in ("uniform", "last"):
            raise DDStoreValueError(f"temporal_strategy must be 'uniform' or 'last', got "
                                    f"{temporal_strategy!r}")
        self.temporal_strategy = temporal_strategy
        if time_attr is not None and time_attr != graph_store.time_attr:
            raise DDStoreValueError(
                f"time_attr={time_attr!r}: graph store {graph_store.name!r} is sorted by "
                f"time_attr={graph_store.time_attr!r}; temporal sampling needs the lists "
                f"sorted by the same attribute (GraphStore(store, name, time_attr=...))")
        self.time_attr = time_attr
        # edge types put without times (PyG's rule: a source node type with no time
        # attribute is always eligible) have no time level; a graph with no edge types
        # samples its seeds only, at node level
        levels = {graph_store.sampled_lists(et).time_level
                  for et in self.edge_types} - {None} \
            if self.edge_types else {"node"}
        self.time_level = levels.pop() if time_attr is not None and len(levels) == 1 \
            else None
        if time_attr is not None and self.time_level is None:
            raise DDStoreValueError(
                f"time_attr={time_attr!r} is node-level for some edge types and "
                f"edge-level for others" if levels else
                f"time_attr={time_attr!r}: no edge type of graph store "
                f"{graph_store.name!r} has times (put {time_attr!r} before the edges)")
        self.seed = None if seed is None else as_seed(seed, "NeighborSampler: seed")
        self._calls = 0
        self._worker_calls = workers.Calls()  # how _calls goes on in DataLoader workers
        self.subgraph_type = _check_subgraph_type(subgraph_type, self.disjoint,
                                                  self._disjoint)
        if sample_direction not in ("forward", "backward"):
            raise DDStoreValueError(f"sample_direction must be 'forward' or 'backward', "
                                    f"got {sample_direction!r}")
        if sample_direction == "backward":
            missing = [et for et in self.edge_types
                       if graph_store.sampled_lists(et, backward=True) is None]
            if missing:
                names = ", ".join(repr(et) for et in missing)
                raise DDStoreValueError(
                    f"sample_direction='backward' samples each node's out-edges, and graph "
                    f"store {graph_store.name!r} holds no out-lists of edge type(s) "
                    f"{names}: build them first with GraphStore.build_backward() "
                    f"(collective: every rank calls gs.build_backward())")
        self.sample_direction = sample_direction
        self._backward = sample_direction == "backward"
        self._untimed = _untimed_edge_types(graph_store, self.edge_types, time_attr)
        self._pid = os.getpid()  # a forked child (DataLoader worker): _check_process
        self.node_types = list(counts)
        self.num_nodes = counts if self.is_hetero else counts[None]
        self._handles = {}
        self._maps = _RelabelPool()
        self.weight_attr = self._check_weight_attr(weight_attr)
        self._weight_vids = {}

    # ------------------------------------------------------------------ PyG's API
    @property
    def num_neighbors(self):
        """PyG's ``NumNeighbors`` as given (for ``sample_direction="backward"`` too, a
        dict is keyed by the stored edge types)."""
        return self._num_neighbors

    @num_neighbors.setter
    def num_neighbors(self, num_neighbors):
        """Checked and turned into the fanouts per edge type and hop (PyG's
        ``BidirectionalNeighborSampler`` sets it before every hop)."""
        if not isinstance(num_neighbors, NumNeighbors):
            try:
                num_neighbors = NumNeighbors(num_neighbors)
            except (ValueError, TypeError) as exc:
                raise DDStoreValueError(f"num_neighbors: {exc}") from None
        given = num_neighbors.values
        if self.is_hetero and isinstance(given, dict):  # PyG's error names none of them
            known = {EdgeTypeStr(et) for et in self.edge_types}
            unknown = [k.to_tuple() for k in given if k not in known]
            if unknown:
                raise DDStoreValueError(
                    f"num_neighbors: edge type(s) {unknown} not in graph store "
                    f"{self.graph_store.name!r}; its edge types: {self.edge_types}")
        try:
            values = num_neighbors.get_values(self.edge_types if self.is_hetero else None)
        except ValueError as exc:
            raise DDStoreValueError(f"num_neighbors: {exc}") from None
        if not self.is_hetero and isinstance(values, dict):
            raise DDStoreValueError(f"num_neighbors: graph store "
                                    f"{self.graph_store.name!r} is "
                                    f"homogeneous (edge type None), so num_neighbors is a "
                                    f"list of fanouts per hop (e.g. [10, 5]), not a dict "
                                    f"per edge type (got {num_neighbors.values!r})")
        if self.is_hetero and isinstance(values, list):
            values = {et: values for et in self.edge_types}
        fanouts = values if isinstance(values, dict) else {None: values}
        for et, ks in fanouts.items():
            where = f"num_neighbors{'' if et is None else f'[{et}]'}"
            if not isinstance(ks, (list, tuple)) or any(not is_int(k) for k in ks):
                raise DDStoreValueError(f"{where} must be a list of integers (-1, or any "
                                        f"negative one as pyg-lib reads it: all), got "
                                        f"{ks!r}")
            if self.replace and any(k > MAX_FANOUT_WITH_REPLACEMENT for k in ks):
                raise DDStoreValueError(
                    f"{where}={list(ks)!r} with replace=True: every node draws exactly k "
                    f"edges, so k must be <= {MAX_FANOUT_WITH_REPLACEMENT} (-1: all "
                    f"neighbours); use replace=False to take min(k, degree)")
        self._fanouts = {et: [canonical_fanout(k) for k in ks]
                         for et, ks in fanouts.items()}
        self._num_neighbors = num_neighbors
        self.num_hops = max([len(ks) for ks in self._fanouts.values()] + [
            len(num_neighbors.values) if isinstance(num_neighbors.values, list) else 0])

    def fanouts(self, edge_type=None):
        """Local: the fanouts sampled per hop for ``edge_type`` (None: a homogeneous
        graph), as checked from ``num_neighbors``: a new list of Python ints (-1: all
        neighbours; a fanout beyond int64 is cut to its largest value)."""
        return list(self._fanouts[edge_type])

    @property
    def fanouts_by_type(self):
        """Local: ``{edge type: fanouts per hop}`` (None: a homogeneous graph), new
        lists as :meth:`fanouts` gives them."""
        return {et: list(ks) for et, ks in self._fanouts.items()}

    @property
    def asked_disjoint(self):
        """``disjoint`` as given to the constructor (:attr:`disjoint` is also True with
        temporal sampling)."""
        return self._disjoint

    @property
    def disjoint(self):
        """Disjoint subgraphs per seed: as asked, and always with temporal sampling."""
        return self._disjoint or self.time_attr is not None

    @property
    def is_temporal(self):
        return self.time_attr is not None

    def sample_from_nodes(self, index, **kwargs):
        """Local: the sampled subgraph of ``index.node`` (PyG's ``NodeSamplerInput``)."""
        self._check_process()
        return self._subgraph(node_sample(index, self._sample))

    def sample_from_edges(self, index, neg_sampling=None):
        """Local: the sampled subgraph of the seed links (``EdgeSamplerInput``), with
        PyG's negative sampling (``binary``: random node pairs; ``triplet``: random
        destinations), done in torch as PyG does, with node-level times (when temporal)
        read from the store."""
        self._check_process()
        et = getattr(index, "input_type", None)
        if self.is_hetero and et is not None:  # PyG reads its end types: a KeyError
            unknown = [t for t in (et[0], et[-1]) if t not in self.node_types]
            if unknown:
                raise DDStoreValueError(
                    f"sample: the seed links' edge type {tuple(et)!r} has node type "
                    f"{unknown[0]!r}, unknown to graph store {self.graph_store.name!r}; "
                    f"known node types: {self.node_types}")
        if neg_sampling is not None and not isinstance(neg_sampling, NegativeSampling):
            neg_sampling = NegativeSampling.cast(neg_sampling)
        node_time = None
        if self.time_level == "node":
            mk = self._time_source
            if self.is_hetero:  # types without the attribute: no time (always eligible)
                node_time = {t: v for t, v in ((t, mk(t)) for t in self.node_types)
                             if v is not None}
            else:
                node_time = mk(None)
        return self._subgraph(edge_sample(index, self._sample, self.num_nodes,
                                          self.disjoint, node_time, neg_sampling))

    # ------------------------------------------------------------------ options
    def _subgraph(self, out):
        """``subgraph_type="bidirectional"``: :func:`to_bidirectional` (PyG's
        ``to_bidirectional``, in C)."""
        if self.subgraph_type == "bidirectional":
            out = to_bidirectional(out)
        return out

    def _check_process(self):
        """In a forked process (a DataLoader worker whose loader's check was bypassed:
        ``num_workers`` set after it was built, a loader of another kind): refuse where
        a read needs MPI, before any is made (the core would refuse it too)."""
        if os.getpid() != self._pid and workers.reads_need_mpi(self.store):
            raise DDStoreStateError(workers.refusal(
                "NeighborSampler in a process forked from this rank (a DataLoader "
                "worker, num_workers > 0)", self.store))

    def share_draws(self, num_workers):
        """Before a loader forks ``num_workers`` DataLoader workers: let them record the
        draws they make, so that the rank's next draw follows theirs
        (:class:`ddstore.pyg.workers.Calls`).  ``num_workers``: an integer in
        ``[0, 65536]`` (0: nothing to share)."""
        if not (is_int(num_workers) and 0 <= num_workers <= 65536):
            raise DDStoreValueError(f"share_draws: num_workers={num_workers!r} must be an "
                                    f"integer in [0, 65536] (the loader's workers)")
        if num_workers:
            self._worker_calls.share(self, int(num_workers))

    def take_worker_draws(self):
        """In the rank: take up the draws this sampler's workers made (its next draw, and
        the next fork, continue after them)."""
        self._calls = self._worker_calls.taken(self._calls)

    @property
    def draws(self):
        """How many draws this sampler made (a batch is one draw; with ``seed=``, draw
        ``c``'s stream key is made from ``seed`` and ``c``).  Set back by a read-ahead
        that ends early (:class:`ddstore.prefetch.PrefetchIter`) to where the batches
        the caller took end, so that the next epoch is the plain loader's."""
        return self._calls

    @draws.setter
    def draws(self, count):
        self._calls = int(count)

    def _check_loader(self, loader):
        """Run by PyG's loader constructors (:func:`ddstore.pyg.workers.install`): refuse
        ``num_workers > 0`` where it cannot work (:func:`~ddstore.pyg.workers.
        check_loader`)."""
        workers.check_loader(loader, self.graph_store, [self])

    def __getstate__(self):
        raise DDStoreStateError(
            "NeighborSampler cannot be pickled (a DataLoader with num_workers > 0 whose "
            "workers start by 'spawn' or 'forkserver'?): it reads the store's memory of "
            "this process, which only a forked process inherits. Pass "
            "multiprocessing_context='fork' to the loader (where the store's reads are "
            "node-local), or " + workers.ALTERNATIVE)

    def _induced_edges(self, et, dst_nodes, src_nodes):
        """``(row, col, edge)`` of every stored edge of type ``et`` from a node of
        ``src_nodes`` to one of ``dst_nodes`` (positions of each node's first
        occurrence), each edge once, in destination order and each list's stored order:
        one C call (:meth:`ddstore._core.CSC.induced`, ``dds_induced_edges``) that
        filters the destinations' whole in-lists through a map of the source set."""
        empty = np.zeros(0, dtype=np.int64)
        if dst_nodes.shape[0] == 0 or src_nodes.shape[0] == 0:
            return empty, empty, empty
        c, handle = self._handle(et)
        dst = np.ascontiguousarray(dst_nodes, dtype=np.int64)
        src = dst if src_nodes is dst_nodes else np.ascontiguousarray(src_nodes,
                                                                      dtype=np.int64)
        # sources beyond this edge type's size (another type's count) have no entries
        return handle.induced(dst, src, max(int(c.size[0]), int(src.max()) + 1),
                              INDUCED_CHUNK_ENTRIES)

    def _induce(self, out):
        """``subgraph_type="induced"``: the sampled nodes as drawn, with every stored
        edge among them instead of the drawn edges (PyG's ``directed=False``)."""
        t = torch.from_numpy
        if isinstance(out, SamplerOutput):
            nodes = out.node.numpy()
            r, c, e = self._induced_edges(None, nodes, nodes)
            out.row, out.col, out.edge = t(r), t(c), t(e)
        else:
            for et in self.edge_types:
                r, c, e = self._induced_edges(et, out.node[et[2]].numpy(),
                                              out.node[et[0]].numpy())
                out.row[et], out.col[et], out.edge[et] = t(r), t(c), t(e)
        # per-hop counts have no meaning for an induced subgraph: None for both, as
        # PyG's induced path (a batch with nodes but no edges per hop broke
        # trim_to_layer-style code that tests one and reads the other)
        out.num_sampled_nodes = out.num_sampled_edges = None
        return out

    @property
    def edge_permutation(self):
        return None  # edge ids are the ids as put, never permuted

    # ------------------------------------------------------------------ sampling
    def _time_source(self, node_type):
        var = node_var(self.graph_store.name, node_type, self.time_attr)
        return _StoredTime(self.store, var) if var in self.store else None

    def _handle(self, et, backward=False):
        """``(lists, C handle)`` of edge type ``et``: its in-lists (the CSC), or with
        ``backward`` its out-lists (:meth:`GraphStore.build_backward`)."""
        c = self.graph_store.sampled_lists(et, backward)
        if c is None or c.removed:
            raise DDStoreStateError(f"sample: edge type {et!r} was removed from graph store "
                                    f"{self.graph_store.name!r}"
                                    + (" (or its out-lists)" if backward else "")
                                    + "; build a new sampler")
        if c.dropped:  # a sampler built before build_backward(keep_in_lists=False)
            raise DDStoreStateError(f"sample: the in-lists of edge type {et!r} were "
                                    f"dropped from graph store {self.graph_store.name!r} "
                                    f"by build_backward(keep_in_lists=False); only "
                                    f"sample_direction='backward' can sample it now")
        if (self.graph_store.sampled_lists(et) if backward else c) is not \
                self._built_on.get(et):
            raise DDStoreStateError(
                f"sample: the edges of edge type {et!r} in graph store "
                f"{self.graph_store.name!r} changed since this sampler was built (a "
                f"put_edge_index replaced them, or a layout put or removed changed the "
                f"one sampled); build a new sampler")
        h = self._handles.get((et, backward))
        if h is None or h[0] is not c:
            core, ids = self.store.core_ids(*c.vars.values())
            vid = dict(zip(c.vars, ids))
            h = (c, _core.CSC(core, vid["nbr"], vid["eid"], vid.get("ts"), c.indptr,
                              c.node_offsets, c.node_times,
                              FLOAT_TIMES if c.time_dtype is None else c.time_dtype))
            self._handles[(et, backward)] = h
        return h

    def _check_weight_attr(self, weight_attr):
        """``weight_attr`` checked against the graph store (see the class docstring)."""
        if weight_attr is None:
            return None
        gs = self.graph_store
        if weight_attr != gs.weight_attr:
            raise DDStoreValueError(
                f"weight_attr={weight_attr!r}: graph store {gs.name!r} keeps the weights "
                f"of weight_attr={gs.weight_attr!r}; weighted sampling reads them in CSC "
                f"order: call gs.put_edge_weights({weight_attr!r}) on this graph store "
                f"(the attribute put first; collective), or build it with "
                f"GraphStore(store, name, weight_attr={weight_attr!r})")
        if not any(gs.weight_attr_of(et) for et in self.edge_types):
            raise DDStoreValueError(f"weight_attr={weight_attr!r}: no edge type of graph "
                                    f"store {gs.name!r} has that attribute")
        if self.time_attr is not None and self.temporal_strategy == "last":
            raise DDStoreValueError(f"weight_attr={weight_attr!r} with "
                                    f"temporal_strategy='last': 'last' takes the latest "
                                    f"entries whatever their weights; use 'uniform' (draws "
                                    f"in proportion to the weights among eligible entries)")
        return weight_attr

    def _weight_vid(self, et, c):
        """The variable id of edge type ``et``'s CSC-ordered weights, or None when the
        sampling is not weighted for it."""
        if self.weight_attr is None or "w" not in c.vars:
            return None
        h = self._weight_vids.get(et)
        if h is None or h[0] is not c:
            h = (c, self.store.core_ids(c.vars["w"])[1][0])
            self._weight_vids[et] = h
        return h[1]

    def _key(self):
        """The stream key of this batch."""
        if self.seed is None:  # (torch's generator: the DataLoader seeds each worker's)
            self._calls += 1
            return int(torch.randint(0, 1 << 62, (1,)).item())
        self._calls = self._worker_calls.next(self._calls)
        return (self.seed + _GOLDEN * self._calls) & _MASK

    def _seed_times(self, node_type, seeds, given):
        if self.time_attr is None:
            return None
        if given is not None:
            t = np.asarray(tensor_values(given, "seed times"))
            if t.shape != seeds.shape:
                raise DDStoreValueError(f"seed times have shape {t.shape}, the seeds "
                                        f"{seeds.shape}")
            return time_share(t, "seed times")[0]  # integers int64, floats float64
        if self.time_level == "edge":
            raise DDStoreValueError("temporal sampling with edge-level time needs the "
                                    "seeds' times (input_time / edge_label_time)")
        src = self._time_source(node_type)
        if src is None:
            raise DDStoreValueError(f"node type {node_type!r} has no {self.time_attr!r} "
                                    f"attribute for its seeds' times; pass input_time")
        return time_share(src[torch.from_numpy(seeds)].numpy(), "seed times")[0]

    def _hop(self, et, hop, frontier, nset, times, key, slot):
        """One C call: the drawn edges of edge type ``et`` for ``frontier`` (global ids,
        positions, subgraphs: its destination nodes, or with backward sampling its
        source nodes); ``nset``: the node set of the drawn neighbours.  Returns (row,
        col, edge, new nodes, their subgraphs): ``row`` indexes the edges' sources,
        ``col`` their destinations, as PyG's samplers return them in both directions."""
        glob, loc, batch = frontier
        ks = self._fanouts.get(et, ())
        k = ks[hop] if hop < len(ks) else 0
        empty = np.zeros(0, dtype=np.int64)
        if k == 0 or glob.shape[0] == 0 or et not in self.edge_types:
            nset.sizes.append(0)
            nset.nodes.append(empty)
            if nset.disjoint:
                nset.batch.append(empty)
            return empty, empty, empty, empty, empty
        c, handle = self._handle(et, self._backward)
        lists = c.indptr.shape[0] - 1
        if lists < (self.num_nodes if et is None else
                    self.num_nodes.get(et[0 if self._backward else 2], 0)):
            # nodes beyond this edge type's lists (a node count that another edge type
            # or a node attribute made larger than its own put) have no edges of it
            inside = glob < lists
            glob, loc = glob[inside], loc[inside]
            batch = batch[inside] if batch.shape[0] == inside.shape[0] else batch
        if 0 < k and k * glob.shape[0] <= _core.SMALL_SAMPLE:
            cap = k * glob.shape[0]  # (at most k each: no pass over the degrees)
        else:
            deg = c.indptr[glob + 1] - c.indptr[glob]
            # Python ints: k * nodes never wraps (k <= MAX_FANOUT_WITH_REPLACEMENT there)
            cap = int(deg.sum()) if k < 0 else (
                k * int(np.count_nonzero(deg)) if self.replace
                else int(np.minimum(deg, k).sum()))
        timed = times is not None and et not in self._untimed
        flags = (_core.NEIGHBOR_REPLACE if self.replace else 0) | (
            _core.NEIGHBOR_LAST if timed and self.temporal_strategy == "last" else 0)
        ts = np.ascontiguousarray(as_times(times[batch], handle.time_dtype, "seed times",
                                           copy=False)) if timed else None
        stream = (key + _GOLDEN * (1 + hop * 4096 + slot)) & _MASK
        wvid = self._weight_vid(et, c)
        # one C call: drawn, and relabelled through the node set's map (new nodes appended)
        frm, to, eid, new_nodes, new_batch = handle.hop(
            nset.map, glob, loc, np.ascontiguousarray(batch) if nset.disjoint else None,
            ts, k, flags, stream, cap, -1 if wvid is None else wvid)
        nset.added(new_nodes, new_batch)
        row, col = (frm, to) if self._backward else (to, frm)
        return row, col, eid, new_nodes, (new_batch if nset.disjoint else empty)

    def _sample(self, seed, seed_time=None, **kwargs):
        if self.is_hetero and not isinstance(seed, dict):
            raise DDStoreValueError(
                f"sample: graph store {self.graph_store.name!r} is heterogeneous (node "
                f"types {self.node_types}): seed nodes need their node type; pass "
                f"input_nodes=(node_type, ids) to the loader (or a dict "
                f"{{node_type: ids}} to the sampler), not plain ids")
        if not self.is_hetero and isinstance(seed, dict):
            raise DDStoreValueError(
                f"sample: graph store {self.graph_store.name!r} is homogeneous: pass the "
                f"seed nodes as plain ids (input_nodes=ids), not by node type "
                f"{list(seed)}")
        if isinstance(seed, dict):
            unknown = [t for t in seed if t not in self.node_types]
            if unknown:
                raise DDStoreValueError(f"sample: unknown node type {unknown[0]!r}; known: "
                                        f"{self.node_types}")
        key = self._key()
        out = (self._sample_homo(seed, seed_time, key) if not isinstance(seed, dict) else
               self._sample_hetero(seed, seed_time, key))
        return self._induce(out) if self.subgraph_type == "induced" else out

    def _seeds(self, node_type, seed, num_nodes):
        seeds = as_indices(seed.numpy() if hasattr(seed, "numpy") else seed,
                           "sample: seed nodes")
        check_indices(seeds, num_nodes, f"sample: seed nodes"
                      f"{'' if node_type is None else f' of type {node_type!r}'}",
                      item="node")
        return seeds

    def _sample_homo(self, seed, seed_time, key):
        n_nodes = self.num_nodes
        seeds = self._seeds(None, seed, n_nodes)
        times = self._seed_times(None, seeds, seed_time)
        disjoint = self.disjoint
        nset = _NodeSet(n_nodes, disjoint, self._maps, subgraphs=seeds.shape[0])
        try:
            frontier = nset.add_seeds(seeds, np.arange(seeds.shape[0], dtype=np.int64)
                                      if disjoint else None)
            rows, cols, edges, n_edges = [], [], [], []
            for hop in range(self.num_hops):
                r, c, e, new_nodes, new_batch = self._hop(None, hop, frontier, nset,
                                                          times, key, 0)
                rows.append(r)
                cols.append(c)
                edges.append(e)
                n_edges.append(int(e.shape[0]))
                new_ids = np.arange(nset.count - nset.sizes[-1], nset.count,
                                    dtype=np.int64)
                frontier = (new_nodes, new_ids, new_batch)
        finally:
            nset.release()
        cat = (lambda xs: torch.from_numpy(np.concatenate(xs)) if xs else
               torch.zeros(0, dtype=torch.long))
        return SamplerOutput(node=nset.node_tensor(), row=cat(rows), col=cat(cols), edge=cat(edges),
                            batch=nset.batch_tensor() if disjoint else None,
                            num_sampled_nodes=list(nset.sizes), num_sampled_edges=n_edges)

    def _sample_hetero(self, seed, seed_time, key):
        disjoint = self.disjoint
        types = list(dict.fromkeys(self.node_types + list(seed)))
        sets = {}
        subgraphs = sum(np.asarray(v).size for v in seed.values())  # one per seed
        try:
            for t in types:
                sets[t] = _NodeSet(self.num_nodes.get(t, 0), disjoint, self._maps,
                                   subgraphs=subgraphs)
            return self._grow_hetero(seed, seed_time, key, types, sets)
        finally:
            for s in sets.values():
                s.release()

    def _grow_hetero(self, seed, seed_time, key, types, sets):
        disjoint = self.disjoint
        sizes = self.num_nodes
        frontier = {}
        # the subgraphs (disjoint) are numbered in the order of the seed types, as
        # pyg-lib numbers them (a link's source type first, then its destination's)
        seeds = {t: self._seeds(t, seed[t], sizes.get(t, 0)) for t in seed}
        first = dict(zip(seeds, np.cumsum([0] + [v.shape[0] for v in seeds.values()])))
        time_of = {}
        for t in types:
            s = sets[t]
            if t in seeds:
                batch = np.arange(first[t], first[t] + seeds[t].shape[0], dtype=np.int64)
                if self.time_attr is not None:
                    time_of[t] = self._seed_times(
                        t, seeds[t], None if seed_time is None else seed_time.get(t))
                frontier[t] = s.add_seeds(seeds[t], batch if disjoint else None)
            else:
                s.sizes.append(0)
                e = np.zeros(0, dtype=np.int64)
                frontier[t] = (e, e, e)
        times = _joined_times([time_of[t] for t in seeds]) \
            if self.time_attr is not None else None
        rows = {et: [] for et in self.edge_types}
        cols = {et: [] for et in self.edge_types}
        edges = {et: [] for et in self.edge_types}
        n_edges = {et: [] for et in self.edge_types}
        for hop in range(self.num_hops):
            added = {t: [] for t in types}
            before = {t: sets[t].count for t in types}
            for slot, et in enumerate(self.edge_types):
                # forward: destinations draw sources; backward: sources draw destinations
                s_t, d_t = (et[2], et[0]) if self._backward else (et[0], et[2])
                r, c, e, new_nodes, new_batch = self._hop(et, hop, frontier[d_t],
                                                          sets[s_t], times, key, slot)
                rows[et].append(r)
                cols[et].append(c)
                edges[et].append(e)
                n_edges[et].append(int(e.shape[0]))
                added[s_t].append((new_nodes, new_batch))
            for t in types:
                s = sets[t]
                # every _hop call appended one size entry: merge this hop's into one
                calls = len(added[t])
                if calls:
                    hop_sizes = s.sizes[-calls:]
                    del s.sizes[-calls:]
                    s.sizes.append(int(sum(hop_sizes)))
                else:
                    s.sizes.append(0)
                nn = [a[0] for a in added[t]]
                nb = [a[1] for a in added[t]]
                glob = np.concatenate(nn) if nn else np.zeros(0, np.int64)
                frontier[t] = (glob, np.arange(before[t], s.count, dtype=np.int64),
                               np.concatenate(nb) if disjoint and nb else
                               np.zeros(glob.shape[0], np.int64))
        cat = (lambda xs: torch.from_numpy(np.concatenate(xs)) if xs else
               torch.zeros(0, dtype=torch.long))
        return HeteroSamplerOutput(
            node={t: sets[t].node_tensor() for t in types},
            row={et: cat(v) for et, v in rows.items()},
            col={et: cat(v) for et, v in cols.items()},
            edge={et: cat(v) for et, v in edges.items()},
            batch={t: sets[t].batch_tensor() for t in types} if disjoint else None,
            num_sampled_nodes={t: list(sets[t].sizes) for t in types},
            num_sampled_edges=n_edges)

    def __repr__(self):
        return (f"NeighborSampler(num_neighbors={self._fanouts}, replace={self.replace}, "
                f"disjoint={self.disjoint}, time_attr={self.time_attr!r}"
                + (", sample_direction='backward'" if self._backward else "")
                + (f", weight_attr={self.weight_attr!r})" if self.weight_attr else ")"))


class BidirectionalNeighborSampler(_PygBidirectionalNeighborSampler):
    """PyG's ``BidirectionalNeighborSampler`` over a :class:`GraphStore`: PyG's own
    class (its merge and collate rules, so its contract exactly; its hop loop as PyG
    2.8's, written again in :meth:`_sample` to sample ``disjoint=True`` too), with our
    :class:`NeighborSampler` as its ``forward_sampler`` and its ``backward_sampler``
    (``sample_direction="backward"``: the out-lists must exist,
    :meth:`GraphStore.build_backward`).  Each hop samples the frontier forward (in-edges)
    and backward (out-edges) with that hop's fanout, merges the two
    (``SamplerOutput.merge_with``'s result, found by sorting: the forward's nodes first,
    each node once), and the nodes not seen before are the next frontier; the hops are
    then collated.

    ``disjoint=True``: every seed grows its own subgraph through every hop, and the
    output is PyG's (node, row, col, edge, ``batch`` = the seed's position,
    ``num_sampled_nodes`` / ``num_sampled_edges`` per forward and backward call, the
    values PyG's own test expects): PyG's merge and collate rules are used, each node
    keyed by ``(subgraph, node)``.  Where PyG's hop loop maps a frontier node back to
    its seed through the merged output (right when each hop's frontier holds each
    subgraph once, as in PyG's tests; an ``IndexError`` or another subgraph otherwise,
    PyG 2.8), ours keeps each frontier node's subgraph, so a node reached by two seeds
    stays in both subgraphs at every hop.  PyG's merge compares every node of the batch
    with every other (memory and time quadratic in them: 12.8 GB for 1,024 seeds of
    fanouts [10, 5]); ours gives its result by sorting (:mod:`ddstore.pyg._merge`).

    As PyG's, refused with a :class:`~ddstore.DDStoreNotImplementedError` (a
    ``NotImplementedError``, and so a ``RuntimeError``, the types PyG raises):
    heterogeneous graphs, a dict ``num_neighbors`` (per edge type), temporal sampling
    (``time_attr``: PyG's backward sampler refuses it; seed times given by a loader);
    negative sampling in ``LinkNeighborLoader`` is refused by PyG's own code (a
    ``RuntimeError``).  The arguments are :class:`NeighborSampler`'s (``replace``,
    ``temporal_strategy``, ``seed``, ``weight_attr``, ...), given to both samplers;
    ``subgraph_type="bidirectional"`` is
    applied to the collated output (PyG's ``to_bidirectional``).  Local, like
    :class:`NeighborSampler`."""

    def __init__(self, graph_store, num_neighbors, subgraph_type="directional",
                 replace=False, disjoint=False, temporal_strategy="uniform",
                 time_attr=None, weight_attr=None, seed=None):
        values = (num_neighbors.values if isinstance(num_neighbors, NumNeighbors) else
                  num_neighbors)
        if isinstance(values, dict):
            raise DDStoreNotImplementedError(
                "BidirectionalNeighborSampler: num_neighbors must be a list of fanouts "
                "per hop; PyG's BidirectionalNeighborSampler does not define a dict per "
                "edge type (it raises RuntimeError)")
        if time_attr is not None:  # (before the inner samplers name their own rules)
            raise DDStoreNotImplementedError(
                f"BidirectionalNeighborSampler(time_attr={time_attr!r}): no temporal "
                f"sampling (PyG's backward sampler refuses it: NotImplementedError); use "
                f"NeighborSampler")
        kw = dict(subgraph_type=subgraph_type, replace=replace, disjoint=disjoint,
                  temporal_strategy=temporal_strategy, time_attr=time_attr,
                  weight_attr=weight_attr, seed=seed)
        self.forward_sampler = NeighborSampler(graph_store, num_neighbors, **kw)
        if self.forward_sampler.is_hetero:
            raise DDStoreNotImplementedError(
                f"BidirectionalNeighborSampler: graph store {graph_store.name!r} is "
                f"heterogeneous; PyG's BidirectionalNeighborSampler samples homogeneous "
                f"graphs only (it raises NotImplementedError)")
        self.backward_sampler = NeighborSampler(graph_store, num_neighbors,
                                                sample_direction="backward", **kw)
        for inner in (self.forward_sampler, self.backward_sampler):
            inner._worker_calls.per = max(1, len(values))  # a draw per hop and batch
        self._num_neighbors = self.forward_sampler.num_neighbors  # (PyG's setter prints)
        self.subgraph_type = SubgraphType(self.forward_sampler.subgraph_type)
        self.keep_orig_edges = False
        self.num_nodes = self.forward_sampler.num_nodes
        self.node_time = None
        self.graph_store = graph_store

    @property
    def draws(self):
        """The draws of the forward and the backward sampler (see
        :attr:`NeighborSampler.draws`)."""
        return self.forward_sampler.draws, self.backward_sampler.draws

    @draws.setter
    def draws(self, counts):
        self.forward_sampler.draws, self.backward_sampler.draws = counts

    def _sample(self, seed, seed_time=None, **kwargs):
        """PyG's hop loop (``BidirectionalNeighborSampler._sample``), merge and
        collate, disjoint or not (see the class docstring); seed times are refused
        first, as PyG's loop refuses them."""
        if seed_time is not None:
            raise DDStoreNotImplementedError(
                "BidirectionalNeighborSampler does not sample temporally (seed times "
                "were given): PyG's raises NotImplementedError; use NeighborSampler")
        seeds = torch.as_tensor(seed).view(-1).long()
        n = int(self.num_nodes)
        # disjoint: node v of subgraph g (the g-th seed's) is keyed g * m + v, so that
        # PyG's merge, which tells nodes apart by (node, the node its subgraph grew
        # from), keeps subgraphs apart; the keys become node ids again at the end
        disjoint = self.disjoint
        m = max(n, 1) if disjoint else 0
        count = int(seeds.numel())
        if count * m > _INT64_MAX:
            raise DDStoreValueError(
                f"BidirectionalNeighborSampler(disjoint=True): {count} seeds of "
                f"{n} nodes: the (subgraph, node) keys overflow int64; sample fewer seeds "
                f"per batch")
        front, sub = seeds, torch.arange(count, dtype=torch.long)
        seen = sub * m + front
        hops = []
        for fanout in self.num_neighbors.values:
            self.forward_sampler.num_neighbors = [fanout]
            self.backward_sampler.num_neighbors = [fanout]
            outs = [self.forward_sampler._sample(front, None, **kwargs),
                    self.backward_sampler._sample(front, None, **kwargs)]
            if disjoint:
                for out in outs:  # batch: the frontier position each node grew from
                    out.node = sub[out.batch] * m + out.node
            hop = _merged(outs[0], outs[1])
            keys = hop.node
            if disjoint:  # what the collate merges by: the key of the subgraph's seed
                hop.seed_node = (keys // m) * m + seeds[keys // m]
            fresh = ~torch.isin(keys, seen)
            seen = torch.cat([seen, keys[fresh]])
            front, sub = ((keys[fresh] % m, keys[fresh] // m) if disjoint else
                          (keys[fresh], sub[:0]))
            hops.append(hop)
        if not hops:
            raise DDStoreValueError("BidirectionalNeighborSampler: num_neighbors has no "
                                    "hop (PyG's collates no output then: ValueError)")
        out = hops[0]
        for hop in hops[1:]:  # PyG's SamplerOutput.collate
            out = _merged(out, hop)
        if disjoint:
            out.node = out.node % m
        return out

    def __getstate__(self):
        return self.forward_sampler.__getstate__()

    def _check_loader(self, loader):
        """As :meth:`NeighborSampler._check_loader`, for both inner samplers."""
        workers.check_loader(loader, self.graph_store,
                             [self.forward_sampler, self.backward_sampler])

    def __repr__(self):
        return (f"BidirectionalNeighborSampler(num_neighbors="
                f"{self.forward_sampler.fanouts()}, replace="
                f"{self.forward_sampler.replace}, disjoint={self.disjoint})")


def _merged(first, second):
    """PyG's ``first.merge_with(second)`` (:func:`~ddstore.pyg._merge.merge_outputs`:
    its result, in O(n log n)), its edge ids kept one-dimensional (PyG squeezes a single
    merged edge id to a 0-d tensor, which its next merge cannot take)."""
    out = merge_outputs(first, second)
    if out.edge is not None:
        out.edge = out.edge.view(-1)
    return out


workers.install()
