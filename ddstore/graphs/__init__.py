"""PyG / HydraGNN graph samples over a DDStore.

- :class:`GraphDataset`: a torch ``Dataset`` of ``torch_geometric.data.Data`` kept in the
  store; ``from_samples`` / ``from_pickle_dir`` / ``from_adios`` load each rank's chunk.
- :func:`write_pickle_dir` (PFF) and :func:`write_adios` (CFF): the file layouts the
  DDStore paper compares against.
- :func:`ising_dataset`: the paper's synthetic Ising data set.
- :func:`restricted_load`: the unpickler used for pickle files (numpy/torch/PyG only).
- :func:`collate_records`: a ``Batch`` straight from packed records.
- :func:`timed_batches`: iterate a loader with the load time of each batch.
"""
from ..sources.pickle_dir import RestrictedUnpickler, restricted_load, restricted_loads
from .dataset import GraphDataset, timed_batches
from .io import graph_records, write_adios, write_pickle_dir
from .ising import IsingDataset, ising_dataset, ising_energy, ising_graph, lattice_bonds
from .layout import GraphLayout, KeyLayout, collate_records

__all__ = ["GraphDataset", "timed_batches", "write_pickle_dir", "write_adios", "graph_records",
           "ising_dataset", "ising_graph", "ising_energy", "lattice_bonds", "IsingDataset",
           "restricted_load", "restricted_loads", "RestrictedUnpickler", "GraphLayout",
           "KeyLayout", "collate_records"]
