"""Changes since a fork: what a PyG store of ddstore (a :class:`FeatureStore` or a
:class:`GraphStore`) changed in its rank after a DataLoader worker was forked from it.

A worker forked from the rank holds a copy of the store object as it was at the fork
(its attribute table, its lists, its variables' mappings), and persistent workers keep
it over epochs.  Every change in the rank bumps a version kept in memory shared with
the workers (:meth:`ForkVersion.changed`); a worker that reads the store compares it
with the version it was forked with (:meth:`ForkVersion.check`) and refuses to serve a
store that changed: it would give stale rows, another dtype's bytes, lists that were
removed, or miss what was added.  One read of a shared int64 per check.
"""
import mmap
import os

import numpy as np

from ..errors import DDStoreStateError

__all__ = ["ForkVersion"]


class ForkVersion:
    """The version of one store object's contents, shared with the processes forked
    from the process that made it (its owner, the rank).

    ``kind`` and ``name`` name the object in the refusal (``"feature store"``,
    ``"pyg"``); ``changes`` says what counts as a change there."""

    def __init__(self, kind, name, changes):
        self.kind, self.name, self.changes = kind, name, changes
        self.owner = os.getpid()
        # an anonymous shared mapping: what the owner writes, processes forked from it
        # read, however long ago they were forked
        self.version = np.frombuffer(mmap.mmap(-1, 8), dtype=np.int64)
        self.seen = 0  # this process's copy: the version at its fork

    def changed(self):
        """In the owner, after the contents changed: a new version (a process forked
        before sees its copy of ``seen`` behind the shared one).  Nothing elsewhere."""
        if os.getpid() == self.owner:
            self.version[0] += 1
            self.seen = int(self.version[0])

    def check(self, what):
        """Raise :class:`DDStoreStateError` in a process forked from the owner when the
        owner changed the contents since the fork; nothing in the owner."""
        if int(self.version[0]) == self.seen or os.getpid() == self.owner:
            return
        raise DDStoreStateError(
            f"{what}: the {self.kind} {self.name!r} changed after the DataLoader workers "
            f"started ({self.changes}, in the rank, pid {self.owner}, after this worker "
            f"process, pid {os.getpid()}, was forked): a worker sees only the store as "
            f"it was at its fork; recreate the DataLoader (or its iterator) after "
            f"changing the {self.kind}, or use persistent_workers=False")
