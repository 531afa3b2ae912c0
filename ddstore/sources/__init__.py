"""Preloader plugins: each reads only a given row range of a data set.

- :class:`SequenceSource`: an indexable in-memory sequence (or a map-style Dataset that
  builds samples on access).
- :class:`PickleDirSource`: one pickle file per sample (PFF), via a restricted unpickler.
- :class:`AdiosSource`: one ADIOS2 BP file with per-key concatenated arrays and offsets
  (CFF).

Sources know nothing of graphs; ``ddstore.graphs`` turns their samples into records.
"""
from .adios import AdiosSource, write_records_adios
from .base import SequenceSource, Source, check_range
from .pickle_dir import (META_NAME, PickleDirSource, RestrictedUnpickler, restricted_load,
                         restricted_loads, write_pickle_files)

__all__ = ["Source", "SequenceSource", "PickleDirSource", "AdiosSource",
           "RestrictedUnpickler", "restricted_load", "restricted_loads",
           "write_pickle_files", "write_records_adios", "check_range", "META_NAME"]
