"""Exceptions raised by ddstore.  Every error a user can cause is a :class:`DDStoreError`."""


class DDStoreError(Exception):
    """Base class of every error the package raises."""


class DDStoreValueError(DDStoreError, ValueError):
    """A bad argument: wrong dtype, shape, width, name, file contents..."""


class DDStoreIndexError(DDStoreError, IndexError):
    """An index or offset outside the allowed range."""


class DDStoreMemoryError(DDStoreError, MemoryError):
    """An allocation that cannot be satisfied."""


class DDStoreStateError(DDStoreError, RuntimeError):
    """A call on a freed store, or an MPI failure."""
