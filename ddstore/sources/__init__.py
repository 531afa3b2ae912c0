"""Readers: each reads only a given range of a data set (rows, time steps or bytes).

Sample sources (preloader plugins; ``ddstore.graphs`` turns their samples into records):

- :class:`SequenceSource`: an indexable in-memory sequence (or a map-style Dataset that
  builds samples on access).
- :class:`PickleDirSource`: one pickle file per sample (PFF), via a restricted unpickler.
- :class:`AdiosSource`: one ADIOS2 BP file with per-key concatenated arrays and offsets
  (CFF).

Series readers (each returns a lazy :class:`Series` ``[T, nodes, features]`` on a graph;
``ddstore.spatiotemporal`` and ``ddstore.dynamic`` window them):

- :func:`from_arrays` (``series``): in-memory numpy arrays or torch tensors.
- :func:`load_npy` (``npy``): raw ``.npy`` files, read block by block.
- :func:`load_pems_h5` / :func:`write_pems_h5` (``hdf5``): PeMS / METR-LA HDF5 frames.
- :func:`load_pgt_json` (``pgt``): PyTorch Geometric Temporal JSON, every layout
  (:class:`DynamicSeries` for the ones whose graph changes every step).

Edge streams (``ddstore.temporal`` builds on them), each rank parsing only its byte range:
:func:`read_tgl_share` / :func:`write_tgl` (``tgl``): TGL's ``edges.csv`` directories;
:func:`read_jodie_share` / :func:`write_jodie` (``jodie``): JODIE's CSV files.

Row ranges of big tables (``rows``): :func:`count_rows` / :func:`read_rows` for ``.csv``,
``.csv.gz`` (streamed from the start, only the range's rows kept) and ``.npy`` (only the
range's bytes read); :class:`OGBNodeData` / :func:`write_ogb_node` (``ogb``): OGB's raw
node-property layout (``raw/edge.csv.gz``, ``node-feat.csv.gz``, ``node-label.csv.gz``,
``split/<name>/*.csv.gz``), one row range per call; :class:`NpyNodeData` (``npy_nodes``):
the same from ``.npy`` arrays; :class:`SyntheticNodeGraph` (``synthetic_nodes``): an
ogbn-products-shaped graph generated range by range, the same for any number of ranks.

Shared by the readers: :mod:`~ddstore.sources.csv_lines`, the one CSV reader (TGL, JODIE
and the ``.csv`` / ``.csv.gz`` tables: field counts, typed columns, the first bad line
named, sortedness across ranks); :mod:`~ddstore.sources.node_data`, the base of the three
node data sets (split names and id ranges checked one way).

Only numpy is imported here; torch, pandas, h5py and adios2 are imported where a reader
needs them.
"""
from .adios import AdiosSource, write_records_adios
from .base import SequenceSource, Source, check_range
from .hdf5 import load_pems_h5, write_pems_h5
from .npy import load_npy
from .pgt import DynamicSeries, load_pgt_json
from .pickle_dir import (META_NAME, PickleDirSource, RestrictedUnpickler, restricted_load,
                         restricted_loads, write_pickle_files)
from .series import (Series, adjacency_to_edges, check_finite_weights, from_arrays,
                      gaussian_kernel_adjacency)
from .tgl import read_tgl_share, write_tgl
from .jodie import read_jodie_share, write_jodie
from .rows import count_rows, read_csv_rows, read_npy_rows, read_rows
from .ogb import OGBNodeData, write_ogb_node
from .npy_nodes import NpyNodeData
from .synthetic_nodes import SyntheticNodeGraph

__all__ = ["Source", "SequenceSource", "PickleDirSource", "AdiosSource",
           "RestrictedUnpickler", "restricted_load", "restricted_loads",
           "write_pickle_files", "write_records_adios", "check_range", "META_NAME"]
__all__ += ["Series", "from_arrays", "adjacency_to_edges", "gaussian_kernel_adjacency",
            "check_finite_weights", "load_npy", "load_pems_h5", "write_pems_h5",
            "load_pgt_json", "DynamicSeries", "read_tgl_share", "write_tgl",
            "read_jodie_share", "write_jodie"]
__all__ += ["count_rows", "read_rows", "read_csv_rows", "read_npy_rows", "OGBNodeData",
            "write_ogb_node", "NpyNodeData", "SyntheticNodeGraph"]
