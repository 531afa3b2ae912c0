"""The quick path: a PyG ``Data`` / ``HeteroData`` that fits one rank, put into a
:class:`FeatureStore` and a :class:`GraphStore` by every rank."""
import torch

from .._fingerprint import same_data
from ..errors import DDStoreValueError
from ._common import EDGES, is_array_like, values_agreed
from .feature_store import FeatureStore
from .graph_store import GraphStore

__all__ = ["from_pyg", "from_hetero", "open_stores"]

# connectivity, not attributes (the GraphStore holds it)
_STRUCTURE = ("edge_index", "adj", "adj_t", "num_nodes")


def _row_attrs(data, storage, counts, edge_keys=()):
    """The one rule of :func:`from_pyg` and :func:`from_hetero`: which values of one
    storage are stored, and as what.  ``counts``: ``{"node": n, "edge": m}`` (only the
    kinds this storage can hold).  A value is an attribute of a kind when it is
    array-like (a torch tensor, numpy array / memmap, anything with ``shape``, or a
    list / tuple as PyG's ``Data`` takes) of at least one dimension, concatenated along
    its first dimension (``data.__cat_dim__`` is 0: never ``*_index`` such as
    ``edge_label_index``) and that dimension equals the kind's count; when nodes and
    edges are as many, a key containing ``edge`` is an edge attribute (PyG's own tie
    rule), and so is a key of ``edge_keys`` (the caller's ``weight_attr``: weights are
    per edge).  Anything else (graph-level values: ``edge_label_index``, an ``edge_label``
    of the label edges, scalars, strings) is not a node or edge attribute and is not
    stored.  Returns ``[(kind, key, value)]``."""
    out = []
    for key, value in storage.items():
        if key in _STRUCTURE:
            continue
        if isinstance(value, (list, tuple)):
            rows, ndim = len(value), 1
        elif is_array_like(value):
            ndim = len(value.shape)
            rows = int(value.shape[0]) if ndim else None
        else:
            continue
        if ndim < 1:
            continue
        try:
            cat = data.__cat_dim__(key, value, storage)
        except Exception:  # noqa: BLE001 -- PyG could not tell: row-wise by default
            cat = 0
        if cat != 0:
            continue
        kinds = [k for k, n in counts.items() if n == rows]
        if len(kinds) > 1:
            kinds = ["edge" if "edge" in key or key in edge_keys else "node"]
        if kinds:
            out.append((kinds[0], key, value))
    return out


def _check_taken(storage, taken, named, counts, where):
    """``named``: ``[(argument, key)]`` (``time_attr``, ``weight_attr``).  A key this
    storage holds must be one of the attributes :func:`_row_attrs` took (``taken``):
    one it left out (a first dimension that is no count of ``counts``) was not stored,
    and the put then reported it "not found"."""
    keys = set(storage.keys())
    for argument, key in named:
        if key is None or key not in keys or key in taken:
            continue
        value = storage[key]
        shape = tuple(value.shape) if hasattr(value, "shape") else (
            (len(value),) if isinstance(value, (list, tuple)) else ())
        rows = " or ".join(f"{n} {kind}s" for kind, n in counts.items() if n is not None)
        raise DDStoreValueError(f"{argument}={key!r}{where} has shape {shape}: it is "
                                f"stored when its first dimension is one row per "
                                f"{' or '.join(counts)} ({rows})")


def _num_edges(storage):
    """The columns of the storage's ``edge_index`` (a tensor, an array, or a pair of
    lists, as PyG's ``Data`` takes), or None (no edge index, or not ``[2, E]``: the put
    refuses it, naming it)."""
    ei = storage.get("edge_index") if hasattr(storage, "get") else None
    if isinstance(ei, (list, tuple)):
        return len(ei[1]) if len(ei) == 2 and hasattr(ei[1], "__len__") else None
    shape = getattr(ei, "shape", None)
    return int(shape[1]) if shape is not None and len(shape) == 2 else None


#: What from_pyg / from_hetero tell a user whose ranks passed different data.
_ALIKE = ("every rank must pass the same data: make it alike on every rank (the same "
          "seed for a random graph, the same file), or build the stores from each rank's "
          "own rows with FeatureStore.put_range / GraphStore (docs/pyg.md)")


def from_pyg(store, data, name="pyg", time_attr=None, weight_attr=None):
    """Collective: every rank passes the same ``torch_geometric.data.Data`` (checked:
    every stored value's dtype, shape and 64-bit fingerprint of its bytes, see
    :func:`ddstore._fingerprint.same_data`: data that differs between ranks is refused
    on every rank naming the value and the ranks); returns ``(feature_store,
    graph_store)``.

    Per-node values (``x``, ``y``, masks, ``time``...: first dimension ``num_nodes``)
    become node attributes (``group_name=None``), per-edge values (``edge_attr``,
    ``edge_time``...: first dimension the number of edges) edge attributes of the edge
    type :data:`EDGES`, and ``edge_index`` the CSC (edge ids are the columns of
    ``data.edge_index``; the number of nodes is declared,
    :meth:`FeatureStore.declare_rows`); the rule is :func:`_row_attrs`, shared with
    :func:`from_hetero`; without an ``edge_index``, a graph with no edges, stored as an
    empty edge index of ``num_nodes`` nodes, which samples its seeds.  Graph-level values
    (``edge_label_index``, ``edge_label`` of other edges...) are not stored: give them to
    the loader.  Values may be any array-like PyG takes: torch tensors, numpy arrays,
    ``np.memmap`` (read range-wise: each rank reads only its own member's rows, never the
    whole array), lists; one that cannot be stored (strings, objects, a torch dtype without
    a bit-pattern form) is refused on every rank naming it.  ``time_attr``: the node- or
    edge-level attribute to sort each neighbourhood by, for temporal sampling.
    ``weight_attr``: the edge attribute to keep in CSC order for weighted sampling (see
    :class:`GraphStore`), taken as an edge attribute even where nodes and edges are as many.
    Each rank keeps only its member's rows of everything.

    All or nothing (:meth:`DDStore.transaction`): if any put fails on any rank, every
    rank raises the same error and what was already put is removed.
    """
    from torch_geometric.data import Data
    with store.collective("pyg.from_pyg", name) as step:
        if not isinstance(data, Data):
            raise DDStoreValueError(
                f"from_pyg needs a torch_geometric.data.Data, got {type(data).__name__}"
                + ("; a HeteroData is put by ddstore.pyg.from_hetero"
                   if type(data).__name__ == "HeteroData" else ""))
        n = data.num_nodes
        counts = {"node": n, "edge": _num_edges(data)}
        attrs = _row_attrs(data, data.stores[0], counts,
                           edge_keys=() if weight_attr is None else (weight_attr,))
        _check_taken(data.stores[0], {key for _, key, _ in attrs},
                     (("time_attr", time_attr), ("weight_attr", weight_attr)), counts, "")
        # no edge_index: a graph with no edges (stored empty: its size names the nodes)
        edge_index = getattr(data, "edge_index", None)
        if edge_index is None:
            edge_index = torch.zeros((2, 0), dtype=torch.long)
        step.agree(same=same_data(dict({key: value for _, key, value in attrs},
                                       edge_index=edge_index, num_nodes=[n]), hint=_ALIKE))
    # the stores made inside the transaction: a rollback forgets their annotations
    with store.transaction(f"pyg.from_pyg {name!r}"), values_agreed():
        fs, gs = FeatureStore(store, name), GraphStore(store, name, time_attr=time_attr,
                                                       weight_attr=weight_attr)
        fs.declare_rows({None: n})
        for kind, key, value in attrs:
            fs.put_tensor(value, group_name=None if kind == "node" else EDGES,
                          attr_name=key, index=None)
        gs.put_edge_index(edge_index, edge_type=None, layout="coo", size=(n, n))
    return fs, gs


def from_hetero(store, data, name="pyg", time_attr=None, weight_attr=None):
    """Collective: :func:`from_pyg` for a ``torch_geometric.data.HeteroData``: per-node
    values under their node type, per-edge values (first dimension the edge type's
    number of edges: never ``edge_label_index`` and other graph-level values) under
    their edge type ``(src, rel, dst)``, one CSC per edge type with ``size = (num src
    nodes, num dst nodes)``.  Every node type's number of nodes is declared
    (:meth:`FeatureStore.declare_rows`), so that a node type with no edges and no
    attributes (``HeteroData(paper=dict(num_nodes=100))``) is still sampled (its seeds).
    Same rule, same-data check and all or nothing, as :func:`from_pyg`."""
    from torch_geometric.data import HeteroData
    with store.collective("pyg.from_hetero", name) as step:
        if not isinstance(data, HeteroData):
            raise DDStoreValueError(f"from_hetero needs a HeteroData, got "
                                    f"{type(data).__name__}")
        named = (("time_attr", time_attr), ("weight_attr", weight_attr))
        ends = dict.fromkeys(list(data.node_types) + [t for et in data.edge_types
                                                      for t in (et[0], et[2])])
        unknown = [nt for nt in ends
                   if nt not in data.node_types or data[nt].num_nodes is None]
        if unknown:  # (the puts refused "size must be ... integers, got (None, None)")
            raise DDStoreValueError(
                f"from_hetero: node type {unknown[0]!r} has no num_nodes (no node "
                f"attribute to count it from, and none set): set "
                f"data[{unknown[0]!r}].num_nodes to its number of nodes")
        attrs = []
        for group, counts in ([(nt, {"node": data[nt].num_nodes}) for nt in data.node_types]
                              + [(et, {"edge": _num_edges(data[et])})
                                 for et in data.edge_types]):
            got = [(group, key, value) for _, key, value in
                   _row_attrs(data, data[group], counts)]
            _check_taken(data[group], {key for _, key, _ in got}, named, counts,
                         f" of {'node' if 'node' in counts else 'edge'} type {group!r}")
            attrs += got
        edges = [(et, data[et].edge_index,
                  (data[et[0]].num_nodes, data[et[2]].num_nodes))
                 for et in data.edge_types]
        counts = {nt: data[nt].num_nodes for nt in data.node_types
                  if data[nt].num_nodes is not None}
        values = {(group, key): value for group, key, value in attrs}
        values.update({(et, "edge_index"): ei for et, ei, _ in edges})
        values.update({(nt, "num_nodes"): [data[nt].num_nodes] for nt in data.node_types})
        # the order the stores are filled in (the data's own: types, then their
        # attributes): the same data inserted in another order on some rank is told so
        order = {"the order of the node types, edge types and attributes (as inserted)":
                 [f"{group}.{key}" for group, key, _ in attrs] +
                 [f"{et}.edge_index" for et, _, _ in edges]}
        step.agree(same={**same_data(values, hint=_ALIKE), **order})
    # the stores made inside the transaction: a rollback forgets their annotations
    with store.transaction(f"pyg.from_hetero {name!r}"), values_agreed():
        fs, gs = FeatureStore(store, name), GraphStore(store, name, time_attr=time_attr,
                                                       weight_attr=weight_attr)
        fs.declare_rows(counts)
        for group, key, value in attrs:
            fs.put_tensor(value, group_name=group, attr_name=key, index=None)
        for et, edge_index, size in edges:
            gs.put_edge_index(edge_index, edge_type=et, layout="coo", size=size)
    return fs, gs


def open_stores(store, name="pyg"):
    """Local: ``(feature_store, graph_store)`` named ``name`` reopened from a store made
    by :meth:`DDStore.restore` (or :meth:`DDStore.load`) -- what :func:`from_pyg`,
    :func:`from_hetero` and the range-wise loaders (:func:`~ddstore.pyg.load_ogb`...)
    built before :meth:`DDStore.save` -- with no source data:
    :meth:`FeatureStore.open` and :meth:`GraphStore.open`.  Every rank calls it (no
    communication).  Raises :class:`~ddstore.DDStoreValueError` naming the stores held
    when ``name`` is not one."""
    return FeatureStore.open(store, name), GraphStore.open(store, name)
