"""PyG's remote-backend interfaces over a :class:`~ddstore.DDStore`: a
:class:`FeatureStore`, a :class:`GraphStore` (CSC striped by destination ranges) and a
:class:`NeighborSampler` whose loop runs in C where the graph lives, so that PyG's own
``NeighborLoader`` and ``LinkNeighborLoader`` train on graphs larger than one rank's
memory, with no pyg-lib or torch-sparse::

    from mpi4py import MPI
    import ddstore
    from ddstore import pyg as dpyg
    from torch_geometric.loader import NeighborLoader

    with ddstore.DDStore(MPI.COMM_WORLD, width=2) as store:
        fs, gs = dpyg.from_pyg(store, data)      # collective; or put_range/put_edge_range
        # too big for one rank: fs, gs, ... = dpyg.load_ogb(store, root) (range-wise)
        # a later job: store = ddstore.DDStore.restore(path) after store.save(path);
        # fs, gs = dpyg.open_stores(store)
        sampler = dpyg.NeighborSampler(gs, num_neighbors=[15, 10])
        loader = NeighborLoader((fs, gs), num_neighbors=[15, 10], input_nodes=train_idx,
                                batch_size=1024, neighbor_sampler=sampler)
"""
from ._common import EDGES
from .feature_store import FeatureStore, TensorAttr, UnknownAttributeError, edge_features
from .graph_store import EdgeAttr, GraphStore
from .loading import from_hetero, from_pyg, open_stores
from .ranges import NodeData, load_npy, load_ogb, load_synthetic, put_node_data
from .sampler import BidirectionalNeighborSampler, NeighborSampler
from . import loader_options

loader_options.install()  # PyG's loaders build ours over our stores (see the module)

__all__ = ["FeatureStore", "GraphStore", "NeighborSampler", "BidirectionalNeighborSampler",
           "TensorAttr", "EdgeAttr", "EDGES", "UnknownAttributeError", "edge_features",
           "from_pyg", "from_hetero", "open_stores", "NodeData", "put_node_data",
           "load_ogb", "load_npy", "load_synthetic"]
