"""The quick path: a PyG ``Data`` / ``HeteroData`` that fits one rank, put into a
:class:`FeatureStore` and a :class:`GraphStore` by every rank."""
import torch

from ..errors import DDStoreValueError
from ._common import EDGES
from .feature_store import FeatureStore
from .graph_store import GraphStore

__all__ = ["from_pyg", "from_hetero"]


def _tensors(storage, skip=("edge_index", "adj_t")):
    return [(k, v) for k, v in storage.items()
            if k not in skip and isinstance(v, torch.Tensor) and v.dim() >= 1]


def from_pyg(store, data, name="pyg", time_attr=None):
    """Collective: every rank passes the same ``torch_geometric.data.Data`` (checked:
    attributes, shapes and dtypes); returns ``(feature_store, graph_store)``.

    Node-level tensors (``x``, ``y``, masks, ``time``...) become node attributes
    (``group_name=None``), edge-level tensors (``edge_attr``, ``edge_time``...) edge
    attributes of the edge type :data:`EDGES`, and ``edge_index`` the CSC (edge ids are
    the columns of ``data.edge_index``; without one, a graph with no edges, stored as an
    empty edge index of ``num_nodes`` nodes, which samples its seeds).  ``time_attr``:
    the node- or edge-level attribute to sort each neighbourhood by, for temporal
    sampling.  Each rank keeps only its member's rows of everything.

    All or nothing (:meth:`DDStore.transaction`): if any put fails on any rank, every
    rank raises the same error and what was already put is removed.
    """
    from torch_geometric.data import Data
    error = None
    if not isinstance(data, Data):
        error = (DDStoreValueError, f"from_pyg needs a torch_geometric.data.Data, got "
                                    f"{type(data).__name__}")
    store.agree(error, call=("pyg.from_pyg", name))
    fs, gs = FeatureStore(store, name), GraphStore(store, name, time_attr=time_attr)
    n = data.num_nodes
    with store.transaction(f"pyg.from_pyg {name!r}"):
        for key, value in _tensors(data):
            if data.is_node_attr(key) and value.size(0) == n:
                fs.put_tensor(value, group_name=None, attr_name=key)
            elif data.is_edge_attr(key):
                fs.put_tensor(value, group_name=EDGES, attr_name=key)
        # no edge_index: a graph with no edges (stored empty: its size names the nodes)
        edge_index = getattr(data, "edge_index", None)
        if edge_index is None:
            edge_index = torch.zeros((2, 0), dtype=torch.long)
        gs.put_edge_index(edge_index, edge_type=None, layout="coo", size=(n, n))
    return fs, gs


def from_hetero(store, data, name="pyg", time_attr=None):
    """Collective: :func:`from_pyg` for a ``torch_geometric.data.HeteroData``: node
    attributes under their node type, edge attributes under their edge type
    ``(src, rel, dst)``, one CSC per edge type with ``size = (num src nodes, num dst
    nodes)``.  All or nothing, as :func:`from_pyg`."""
    from torch_geometric.data import HeteroData
    error = None if isinstance(data, HeteroData) else (
        DDStoreValueError, f"from_hetero needs a HeteroData, got {type(data).__name__}")
    store.agree(error, call=("pyg.from_hetero", name))
    fs, gs = FeatureStore(store, name), GraphStore(store, name, time_attr=time_attr)
    with store.transaction(f"pyg.from_hetero {name!r}"):
        for nt in data.node_types:
            for key, value in _tensors(data[nt]):
                fs.put_tensor(value, group_name=nt, attr_name=key)
        for et in data.edge_types:
            for key, value in _tensors(data[et]):
                fs.put_tensor(value, group_name=et, attr_name=key)
        for et in data.edge_types:
            gs.put_edge_index(data[et].edge_index, edge_type=et, layout="coo",
                              size=(data[et[0]].num_nodes, data[et[2]].num_nodes))
    return fs, gs
