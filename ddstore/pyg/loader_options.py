"""PyG's ``NeighborLoader`` / ``LinkNeighborLoader`` sampling options over our stores.

PyG's loaders take the sampling options (``num_neighbors``, ``replace``,
``subgraph_type``, ``disjoint``, ``temporal_strategy``, ``time_attr``, ``weight_attr``,
the deprecated ``directed``) and build their own sampler from them, unless a
``neighbor_sampler`` is given, whose options then win and the loader's are dropped
without a word.  Over ddstore's stores (``data=(FeatureStore, GraphStore)``) PyG's own
sampler cannot run (it copies the whole edge index to every process, then needs pyg-lib
or torch-sparse), so, through :func:`ddstore._pyg_seams.before_neighbor_loader_init`:

- **no** ``neighbor_sampler``: the loader builds ours, :class:`~ddstore.pyg.NeighborSampler`
  over the graph store, from the loader's options, as PyG builds its own
  (``directed=False``: ``subgraph_type="induced"``, with PyG's deprecation warning;
  ``is_sorted`` is moot: our lists are sorted at put);
- **our** sampler given (:class:`~ddstore.pyg.NeighborSampler` or
  :class:`~ddstore.pyg.BidirectionalNeighborSampler`): every sampling option passed to the
  loader must be the sampler's (``num_neighbors`` compared as the fanouts per edge type and
  hop); one that differs is refused (:class:`~ddstore.DDStoreValueError` naming the option,
  the loader's value and the sampler's) instead of being dropped.

Loaders over other data or other samplers are untouched.
"""
import warnings

import numpy as np
import torch
from torch_geometric.sampler.base import NumNeighbors, SubgraphType

from .._checks import as_bool
from ..errors import DDStoreValueError
from .sampler import canonical_fanout

__all__ = ["install"]

#: The loader's sampling options, each with how the sampler keeps it.
_OPTIONS = ("replace", "subgraph_type", "disjoint", "temporal_strategy", "time_attr",
            "weight_attr")


def _ours(data):
    from .feature_store import FeatureStore
    from .graph_store import GraphStore
    return (isinstance(data, (tuple, list)) and len(data) == 2
            and isinstance(data[0], FeatureStore) and isinstance(data[1], GraphStore))


def _subgraph_type(value):
    try:
        return SubgraphType(value).value
    except ValueError:
        return value


def _fanouts(sampler, value):
    """``value`` (a loader's ``num_neighbors``) as the sampler keeps its own: a dict
    ``{edge type: [fanouts]}`` over the sampler's edge types."""
    nn = value if isinstance(value, NumNeighbors) else NumNeighbors(value)
    values = nn.get_values(sampler.edge_types if sampler.is_hetero else None)
    if sampler.is_hetero and isinstance(values, list):
        values = {et: values for et in sampler.edge_types}
    fan = values if isinstance(values, dict) else {None: values}
    return {et: [canonical_fanout(k) for k in ks] for et, ks in fan.items()}


def _check_sampler(name, args, sampler):
    """Refuse a sampling option given to the loader that differs from ``sampler``'s."""
    def refuse(option, loader_value, sampler_value):
        raise DDStoreValueError(
            f"{name}({option}={loader_value!r}, neighbor_sampler=...): the "
            f"neighbor_sampler samples with {option}={sampler_value!r}, and PyG would "
            f"drop the loader's {option} without a word; pass the same {option} to "
            f"both{'' if option == 'num_neighbors' else ', or leave it out of the loader'}"
            f" (or leave out neighbor_sampler: the loader then builds ddstore's "
            f"NeighborSampler from its own options)")
    # BidirectionalNeighborSampler: its options are its inner samplers' (whose fanouts
    # it sets hop by hop: its own num_neighbors is the list given)
    inner = getattr(sampler, "forward_sampler", sampler)
    if "num_neighbors" in args:
        given = args["num_neighbors"]
        try:
            fan = _fanouts(inner, given)
        except (ValueError, TypeError) as exc:
            refuse("num_neighbors", given, f"{sampler.num_neighbors.values!r} ({exc})")
        held = ({None: [canonical_fanout(k) for k in sampler.num_neighbors.values]}
                if inner is not sampler else
                sampler.fanouts_by_type)
        if fan != held:
            refuse("num_neighbors", given, sampler.num_neighbors.values)
    have = {"replace": inner.replace, "subgraph_type": _subgraph_type(sampler.subgraph_type),
            "disjoint": inner.asked_disjoint, "temporal_strategy": inner.temporal_strategy,
            "time_attr": inner.time_attr, "weight_attr": inner.weight_attr}
    for option in _OPTIONS:
        if option not in args:
            continue
        given = args[option]
        if option == "subgraph_type":
            given = _subgraph_type(given)
        elif option in ("replace", "disjoint"):
            given = as_bool(given, f"loader option {option}")
        if given != have[option]:
            refuse(option, args[option], have[option])
    if "directed" in args and not args["directed"] and have["subgraph_type"] != "induced":
        refuse("directed", args["directed"],
               f"True (subgraph_type={have['subgraph_type']!r})")


def _untyped(index):
    """The ids of ``index`` given as ``(type, ids)`` (``type`` None, a node type or an
    edge type), else ``index`` itself."""
    if isinstance(index, (tuple, list)) and len(index) == 2 and (
            index[0] is None or isinstance(index[0], (str, tuple))):
        return index[1]
    return index


def _count(index, per_seed=False):
    """How many seeds ``index`` names (ids, a boolean mask, ``[2, n]`` edge ids, or any
    of them after a type, ``(type, ids)``), or None when it does not say (None: every
    node of the type; something PyG will refuse itself).  ``per_seed``: ``index`` holds
    a value per seed (times, labels, of any type and trailing shape): their number is
    its first dimension."""
    index = _untyped(index)
    if index is None:
        return None
    try:
        t = torch.as_tensor(index)
    except (TypeError, ValueError, RuntimeError):
        return None
    if not t.dim():
        return 1
    if per_seed:
        return int(t.shape[0])
    return int(t.sum()) if t.dtype == torch.bool else int(t.shape[-1])


#: per loader: the argument naming the seeds, and those that must have one entry each
_SEEDS = {"NeighborLoader": ("input_nodes", ("input_time",)),
          "LinkNeighborLoader": ("edge_label_index", ("edge_label", "edge_label_time"))}


def _check_seeds(name, args):
    """Refuse, as the loader is built, seeds it could not use over our stores: none
    given (PyG's loaders over a remote backend need them; its own check is a bare
    ``assert``), or per-seed values (times, labels) of another length than the seeds
    (PyG would fail at the first batch, or with a bare ``assert``)."""
    seeds, per_seed = _SEEDS[name]
    if args.get(seeds) is None:
        raise DDStoreValueError(
            f"{name} over ddstore's (FeatureStore, GraphStore): {seeds} is required (PyG's "
            f"loaders over a remote backend take the seeds from it): pass "
            + ("node ids, a boolean mask, or (node_type, ids)" if seeds == "input_nodes"
               else "a [2, n] tensor of source and destination ids, or (edge_type, "
                    "that tensor)"))
    if seeds == "edge_label_index" and isinstance(args[seeds], torch.Tensor):
        raise DDStoreValueError(
            f"{name} over ddstore's (FeatureStore, GraphStore): edge_label_index must be "
            f"(edge_type, [2, n] tensor), (None, tensor) for a homogeneous graph (PyG's "
            f"loaders over a remote backend take no bare tensor)")
    if seeds == "edge_label_index":  # [2, n] (PyG's first batch failed on a 1-D one
        # with a bare IndexError)
        try:
            shape = tuple(torch.as_tensor(_untyped(args[seeds])).shape)
        except (TypeError, ValueError, RuntimeError):
            shape = None  # (PyG's own checks name it)
        if shape is not None and (len(shape) != 2 or shape[0] != 2):
            raise DDStoreValueError(
                f"{name} over ddstore's (FeatureStore, GraphStore): edge_label_index "
                f"must hold a [2, n] tensor of source and destination ids, got shape "
                f"{list(shape)}")
    n = _count(args[seeds])
    for option in per_seed:
        if args.get(option) is None or n is None:
            continue
        got = _count(args[option], per_seed=True)
        if got is not None and got != n:
            raise DDStoreValueError(
                f"{name}({option}=...): {got} values for {n} seeds in {seeds}; give "
                f"one per seed")


def _seed_tensors(args):
    """``args`` with the seeds' values given as a list or a numpy array made tensors, as
    ``input_nodes`` already are (:func:`_check_nodes`): PyG's loaders need tensors for
    ``edge_label_index``'s links, ``edge_label``, ``edge_label_time`` and
    ``input_time``, and failed on a list at the first ``.clone()`` or ``.cpu()`` with a
    bare ``AttributeError``.  A value that is not numbers is left as it is (the checks
    after this, or PyG, name it)."""
    def tensor(value):
        if value is None or isinstance(value, torch.Tensor):
            return value
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError):
            return value
        return torch.from_numpy(np.ascontiguousarray(arr)) if arr.dtype.kind in "biuf" \
            else value
    out = {k: tensor(args[k]) for k in ("edge_label", "edge_label_time", "input_time")
           if k in args}
    links = args.get("edge_label_index")
    if isinstance(links, (tuple, list)) and len(links) == 2 and (
            links[0] is None or isinstance(links[0], (str, tuple))):  # (edge type, links)
        out["edge_label_index"] = (links[0], tensor(links[1]))
    return dict(args, **out)


def _arguments(name, args):
    """The hook: ``args`` of a ``NeighborLoader`` / ``LinkNeighborLoader`` about to be
    built, returned with our sampler when over our stores (see the module docstring),
    after :func:`_check_seeds`."""
    from .sampler import BidirectionalNeighborSampler, NeighborSampler
    data = args.get("data")
    if not _ours(data):
        return args
    seeds = args.get("input_nodes")
    if isinstance(seeds, (tuple, list)) and len(seeds) == 2 and \
            isinstance(seeds[0], str) and seeds[1] is None:
        # (node_type, None): every node of the type, as PyG's in-memory path reads it;
        # its remote-backend path asks the feature store for the size of None, and by
        # the type's name alone finds no size for a type of a count only (no attribute)
        n = data[1].node_counts().get(seeds[0])
        args = dict(args, input_nodes=seeds[0] if n is None else
                    (seeds[0], torch.arange(n, dtype=torch.int64)))
    links = args.get("edge_label_index")
    if isinstance(links, (tuple, list)) and len(links) == 2 and links[0] is None and \
            links[1] is None:
        # (None, None): every edge of a homogeneous graph, as PyG's in-memory path reads
        # None; its remote-backend path fails on it (RuntimeError: values expected
        # sparse tensor layout), a (type, None) of a heterogeneous graph takes them
        held = data[1].get_all_edge_attrs()
        typed = sorted({repr(a.edge_type) for a in held if a.edge_type is not None})
        if typed or not held:
            raise DDStoreValueError(
                f"{name}(edge_label_index=(None, None)): every edge of a homogeneous "
                f"graph, but this graph store holds " + (
                    f"edge types {', '.join(typed)}: pass (edge_type, None) for every "
                    f"edge of one type" if typed else "no edges"))
        row, col = data[1].coo([None])[:2]  # (whatever layout it was put in; ids in
        args = dict(args, edge_label_index=(None, torch.stack((row, col))))  # order)
    args = _seed_tensors(args)
    _check_seeds(name, args)
    sampler = args.get("neighbor_sampler")
    if isinstance(sampler, (NeighborSampler, BidirectionalNeighborSampler)):
        _check_sampler(name, args, sampler)
        return _check_seed_ids(name, args, sampler)
    if sampler is not None:  # a sampler of another kind: PyG's rules
        return args
    if "num_neighbors" not in args:
        return args  # PyG's own TypeError names it
    subgraph_type = args.get("subgraph_type", "directional")
    if not args.get("directed", True):
        warnings.warn(f"The usage of the 'directed' argument in '{name}' is deprecated. "
                      f"Use `subgraph_type='induced'` instead.", stacklevel=4)
        subgraph_type = "induced"
    args = dict(args)
    args["neighbor_sampler"] = NeighborSampler(
        data[1], args["num_neighbors"], replace=args.get("replace", False),
        disjoint=args.get("disjoint", False),
        temporal_strategy=args.get("temporal_strategy", "uniform"),
        time_attr=args.get("time_attr"), subgraph_type=subgraph_type,
        weight_attr=args.get("weight_attr"))
    return _check_seed_ids(name, args, args["neighbor_sampler"])


def _check_seed_ids(name, args, sampler):
    """The seeds' ids, as the loader is built: a ``NeighborLoader``'s nodes
    (:func:`_check_nodes`), a ``LinkNeighborLoader``'s links (:func:`_check_links`, after
    :func:`_canonical_links`); returns ``args``, their edge type made whole."""
    inner = getattr(sampler, "forward_sampler", sampler)
    if name == "NeighborLoader":
        return _check_nodes(name, args, inner)
    args = _canonical_links(name, args, inner)
    _check_links(name, args, inner)
    return args


def _canonical_links(name, args, inner):
    """``args`` with a heterogeneous ``edge_label_index``'s edge type given as a
    ``(source, destination)`` pair (alone, or as ``(pair, ids or None)``) made the
    ``(source, relation, destination)`` triple, as ``HeteroData`` reads it: the graph's
    only edge type between the two (a tuple or a list).  A pair that several edge types
    fit is refused, naming them, and so is one that none fits where its edges are asked
    for (no ids); with ids it stays as given (links between node types the graph holds
    no edges of, as PyG's remote path takes them: the batch's key is the pair)."""
    index = args.get("edge_label_index")
    if not inner.is_hetero or not isinstance(index, (tuple, list)) or len(index) != 2:
        return args
    whole = all(isinstance(t, str) for t in index)  # the pair is the edge type, alone
    pair = index if whole else index[0]
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and
            all(isinstance(t, str) for t in pair)):
        return args
    pair = tuple(pair)
    fits = [et for et in inner.edge_types if (et[0], et[-1]) == pair]
    if not fits and not whole and index[1] is not None:
        return args
    if len(fits) != 1:
        how = f"fits {len(fits)} of its edge types" if fits else "fits none of its " \
            "edge types"
        raise DDStoreValueError(f"{name}(edge_label_index=...): edge type {pair!r} (source, "
                                f"destination) {how} ({inner.edge_types}); give one as "
                                f"(source, relation, destination)")
    return dict(args, edge_label_index=fits[0] if whole else (fits[0], index[1]))


def _check_links(name, args, inner):
    """Refuse, as a ``LinkNeighborLoader`` is built, seed links the sampler ``inner``
    could not
    sample (PyG would fail at the first batch, with its own or a bare error): an edge
    type that does not fit the graph (none on a heterogeneous one, one on a
    homogeneous one, a relation name alone), ids outside their node type's range
    (named by row and column as given), negatives of a temporal sampler with
    node-level times but no ``edge_label_time`` (PyG's bare ``assert``)."""
    index = args.get("edge_label_index")
    if not (isinstance(index, (tuple, list)) and len(index) == 2):
        return  # (an edge type alone: all its edges, PyG's path)
    what = f"{name}(edge_label_index=...)"
    et, ids = index
    if inner.is_hetero:
        if not (isinstance(et, tuple) and len(et) in (2, 3)
                and all(isinstance(t, str) for t in et)):
            known = f", e.g. one of {inner.edge_types}" if inner.edge_types else ""
            raise DDStoreValueError(
                f"{what}: edge type {et!r}; the graph is heterogeneous: give "
                f"(edge_type, [2, n] ids) with a (source, relation, destination) edge "
                f"type{known}")
        unknown = [t for t in (et[0], et[-1]) if t not in inner.node_types]
        if unknown:
            raise DDStoreValueError(f"{what}: edge type {et!r} has node type "
                                    f"{unknown[0]!r}, unknown to graph store "
                                    f"{inner.graph_store.name!r}; known node types: "
                                    f"{inner.node_types}")
        ends = ((et[0], inner.num_nodes.get(et[0], 0)), (et[-1], inner.num_nodes.get(
            et[-1], 0)))
    elif et is not None:
        raise DDStoreValueError(f"{what}: edge type {et!r}; the graph is homogeneous: "
                                f"give (None, [2, n] ids)")
    else:
        ends = ((None, inner.num_nodes),) * 2
    if (args.get("neg_sampling") is not None and args.get("edge_label_time") is None
            and inner.time_level == "node"):
        raise DDStoreValueError(
            f"{name}(neg_sampling=...): the sampler has node times ({inner.time_attr!r}) "
            f"and negatives may only be nodes no later than their link: give "
            f"edge_label_time (one time per link), or no neg_sampling")
    ids = _integer_ids(ids, what)
    if ids is None or ids.ndim != 2:
        return
    for row, (role, (t, n)) in enumerate(zip(("source", "destination"), ends)):
        bad = (ids[row] < 0) | (ids[row] >= n)
        if bool(bad.any()):
            j = int(np.flatnonzero(bad)[0])
            raise DDStoreValueError(
                f"{what}: {role} id {int(ids[row, j])} (row {row}, column {j}) out of "
                f"range [0, {n}){'' if t is None else f' of node type {t!r}'}")


def _integer_ids(ids, what, mask=False):
    """``ids`` as a numpy array of integers (any width, signed or not), or of bools when
    ``mask`` (a boolean mask given as a tensor), or None when it is no array (PyG's own
    checks name it).  Refused: floating-point or complex ids (they failed at the first
    batch, naming neither the argument nor its shape), bools where no mask is taken,
    and a mask that is not a tensor (PyG reads a list or numpy array of bools as the
    node ids 0 and 1)."""
    tensor = isinstance(ids, torch.Tensor)
    if tensor and ids.numel() == 0:
        return None  # no seed: nothing to check (an empty list is float64 to numpy)
    if tensor and (ids.dtype.is_floating_point or ids.dtype.is_complex):
        kind, dtype = "f", ids.dtype  # (bfloat16 has no numpy dtype)
    else:
        try:
            arr = ids.detach().cpu().numpy() if tensor else np.asarray(ids)
        except (TypeError, ValueError, RuntimeError, NotImplementedError):
            return None
        if arr.size == 0:
            return None
        kind, dtype = arr.dtype.kind, ids.dtype if tensor else arr.dtype
    if kind in "fc" or (kind == "b" and not mask):
        raise DDStoreValueError(f"{what} must hold integer node ids, got dtype {dtype} "
                                f"of shape {list(ids.shape if tensor else arr.shape)}")
    if kind == "b" and not tensor:
        raise DDStoreValueError(f"{what}: a boolean mask must be a torch.Tensor (PyG "
                                f"reads a {type(ids).__name__} of bools as the node ids "
                                f"0 and 1)")
    return arr if kind in "biu" else None


def _check_nodes(name, args, sampler):
    """Refuse, as a ``NeighborLoader`` is built, seed nodes ``sampler`` could not
    sample: floating-point ids, ids of other than one dimension, ids outside their node
    type's range (named by position; they failed at the batch holding them, on the
    rank holding them), a boolean mask of another length than the node count (PyG
    takes a short one as the first nodes' mask, a long one failed at the batch past
    the end) or not given as a tensor.  Returns ``args``, ids given as a list or an
    array made a tensor (PyG's loader takes those over in-memory data, and only a
    tensor over remote stores)."""
    index = args.get("input_nodes")
    typed = isinstance(index, (tuple, list)) and len(index) == 2 and \
        (index[0] is None or isinstance(index[0], str))
    node_type, given = index if typed else (None, index)
    what = f"{name}(input_nodes=...)"
    if not sampler.is_hetero and (node_type is not None or isinstance(given, str) or
                                  given is None):  # (PyG's remote path: a bare assert)
        raise DDStoreValueError(
            f"{what}: {index!r:.80} names a node type, or no nodes, but the graph is "
            f"homogeneous: give its node ids or a boolean mask (or (None, ids), as "
            f"LinkNeighborLoader's (None, edge_label_index))")
    if typed and node_type is None:  # a homogeneous graph's (None, ids): the ids
        args = dict(args, input_nodes=given)
        typed = False
    if isinstance(given, str) or given is None:
        return args  # a node type alone: all its nodes
    ids = _integer_ids(given, what, mask=True)
    n = (sampler.num_nodes.get(node_type) if isinstance(sampler.num_nodes, dict) else
         sampler.num_nodes)
    if ids is None or n is None:
        return args  # (an unknown node type: the sampler names it)
    if not isinstance(given, torch.Tensor):
        args = dict(args)
        t = torch.from_numpy(ids.astype(np.int64))  # (a mask is refused unless a tensor)
        args["input_nodes"] = (node_type, t) if typed else t
    of_type = "" if node_type is None else f" of node type {node_type!r}"
    if ids.dtype == bool:
        if ids.ndim != 1 or ids.shape[0] != n:
            raise DDStoreValueError(f"{what}: a boolean mask of shape {list(ids.shape)} "
                                    f"for {n} nodes{of_type}; a mask has one entry per "
                                    f"node")
        return args
    if ids.ndim != 1:
        raise DDStoreValueError(f"{what}: node ids of shape {list(ids.shape)}; give a "
                                f"1-D sequence of ids")
    bad = (ids < 0) | (ids >= n)
    if bool(bad.any()):
        j = int(np.flatnonzero(bad)[0])
        raise DDStoreValueError(f"{what}: node id {int(ids[j])} (position {j}) out of "
                                f"range [0, {n}){of_type}")
    return args


def install():
    """Make PyG's ``NeighborLoader`` and ``LinkNeighborLoader`` apply the rules of this
    module over our stores (:func:`ddstore._pyg_seams.before_neighbor_loader_init`)."""
    from .._pyg_seams import before_neighbor_loader_init
    before_neighbor_loader_init(_arguments)
