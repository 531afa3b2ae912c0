"""Exceptions raised by ddstore.  Every error a user can cause is a :class:`DDStoreError`.

:func:`as_error` is the one conversion of any other exception (a user callable failing, an
allocation refused) into one of these."""

__all__ = ["DDStoreError", "DDStoreValueError", "DDStoreIndexError", "DDStoreMemoryError",
           "DDStoreStateError", "DDStoreNotImplementedError", "DDStoreOSError",
           "DDStoreInterrupt", "as_error", "plain_class"]


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


class DDStoreNotImplementedError(DDStoreValueError, NotImplementedError):
    """A request that the library ddstore stands in for refuses itself (PyG's samplers:
    temporal backward sampling, a heterogeneous or per-edge-type
    ``BidirectionalNeighborSampler``...): also a ``NotImplementedError``, the type that
    library raises and its users catch (and so a ``RuntimeError``, what PyG raises for
    some of the same refusals), and a :class:`DDStoreValueError` like every refused
    argument."""


class DDStoreOSError(DDStoreValueError, OSError):
    """A failure of the operating system met by a call (a full disk, a file that cannot
    be read or written, a permission refused), raised on every rank of a collective call
    with the failing rank, the file and the system's reason in its message: an
    ``OSError``, what code that handles a full disk catches, and a
    :class:`DDStoreValueError` as every other failure of a call is (its ``errno`` is
    None: the rank's own error number is in the message)."""


class DDStoreInterrupt(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` (SIGINT: Ctrl-C, ``kill -INT``) that reached a rank inside
    a collective call, raised alike on every rank of the communicator: the round it was
    agreed in completed everywhere, the transaction around the call rolls back on every
    rank, and every rank's ``except KeyboardInterrupt:`` runs (it is not a
    :class:`DDStoreError`: code that catches those must not swallow a Ctrl-C).  The
    message names the interrupted ranks and what they were in."""


def as_error(error, what=None):
    """The one conversion of a failure into a ``(class, message)`` pair (what an agreement
    carries, see :class:`ddstore._collective.Step`, or what a layer raises as
    ``cls(message)``).

    ``None`` and a ``(class, message)`` pair are returned as they are; a
    :class:`DDStoreError` keeps its class and message.  Any other exception becomes a
    :class:`DDStoreMemoryError` if it is a ``MemoryError`` (numpy's refused allocations
    included), a :class:`DDStoreOSError` if it is an ``OSError``, a
    :class:`DDStoreValueError` otherwise, with the message ``"<type name>: <text>"``,
    prefixed by ``"<what>: "`` when ``what`` is given."""
    if error is None or isinstance(error, tuple):
        return error
    if isinstance(error, DDStoreError):
        return type(error), str(error)
    cls = plain_class(error)
    text = f"{type(error).__name__}: {error}"
    return cls, text if what is None else f"{what}: {text}"


def plain_class(error):
    """The class of ours that a failure other than a :class:`DDStoreError` is raised as
    (:func:`as_error`)."""
    return DDStoreMemoryError if isinstance(error, MemoryError) else \
        DDStoreOSError if isinstance(error, OSError) else DDStoreValueError
