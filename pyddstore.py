"""``pyddstore``: the original DDStore Python API, as a compatibility layer over ddstore.

Code written for ORNL DDStore's ``PyDDStore`` (HydraGNN's ``DistDataset`` and
``AdiosDataset``, the DDStore examples) runs unchanged::

    import pyddstore as dds
    store = dds.PyDDStore(comm)                   # or PyDDStore(comm, ddstore_width=2)
    store.add("x", local_rows)                    # collective; global rows = rank order
    store.epoch_begin()                           # collective
    buf = np.zeros((count, ncols), dtype=np.float32)
    store.get("x", buf, start)                    # buf.shape[0] rows from global row start
    store.epoch_end()                             # collective
    store.free()

Semantics kept from the original:

- ``add(name, arr)``: collective; each rank contributes ``arr`` (``[nrows, ...]``, any
  C-contiguous numpy array or CPU torch tensor) and the variable's global rows are the
  contributions in rank order (within a group, see ``ddstore_width``).  A row is
  ``disp`` elements of ``itemsize`` bytes (``disp = prod(arr.shape[1:])``).
- ``init(name, nrows, disp, itemsize=1)`` (collective) reserves ``nrows`` local rows;
  ``update(name, arr, offset)`` (local) writes rows at local row ``offset``.  Those
  rows become visible to other ranks at the next ``epoch_begin`` (or ``sync()``).
- ``get(name, arr, start=0)``: fills ``arr`` with ``arr.shape[0]`` rows from global row
  ``start``.  ``arr`` must have the variable's itemsize and ``disp`` elements per row; the
  bytes are copied as they are (the original is untyped too).  Unlike the original the
  range may span several ranks' chunks.
- ``epoch_begin()`` / ``epoch_end()``: collective, as in the original (there they are
  ``MPI_Win_fence``).  Reads here are passive-target one-sided reads and need no epoch,
  so in a store built with ``add`` only (HydraGNN's, which opens an epoch per batch) the
  pair is free, but without the progress agent (below ``MPI_THREAD_MULTIPLE``, see
  "Thread level") where some rank reads a member on another node: there each is a round
  every rank meets, as the fence, and a rank waiting in ``epoch_end`` lets MPI answer the
  reads other ranks make of its rows (between nodes they wait for its next MPI call).  A
  store holding a variable made by ``init`` (the original's way to fill one with
  ``update``, kept through ``save`` / ``restore``) is synchronised by every
  ``epoch_begin`` and ``epoch_end``, as the original's fence: the ``update`` writes that
  any rank made before ``epoch_begin`` are what every rank's ``get`` reads after it, and
  none made after ``epoch_end`` reaches a ``get`` of the epoch it closed.  A ``get``
  outside an epoch also works.
- ``free()``: collective, safe to call twice.

Additions: ``ddstore_width`` (groups of that many consecutive ranks, each holding a full
replica; what HydraGNN's ``DistDataset(ddstore_width=...)`` builds by splitting the
communicator), ``get_batch(name, arr, indices)`` (local, not collective: the original's
``main`` branch has none, a newer branch's is collective at ``method=0`` and reads the
same rows; its paragraph "Which original" of docs/hydragnn.md), ``size(name)`` and
``info(name)``; the newer original's ``register_recv``, ``unregister_recv``,
``get_profile``, ``join`` and constructor arguments, as it behaves at ``method=0``.  Only
``method=0`` (MPI) exists; the original's ``method=1`` (libfabric) raises an error.  Errors
are ``ddstore.DDStoreError`` subclasses that are also what the original raised: a row range
outside the variable is a :class:`PyDDStoreRangeError`, both ``ValueError`` (the original's)
and ``DDStoreIndexError``; an argument of another type (an array that is none, a name that
is no string, a start, offset or size that is no integer) a :class:`PyDDStoreTypeError`,
both ``TypeError`` (what the original's typed signatures raised for a string or ``None``)
and ``DDStoreValueError``; other bad arguments are ``DDStoreValueError`` (a ``ValueError``).

Thread level: the original's users lower mpi4py's thread level to ``"serialized"``
(HydraGNN's ``DistDataset``); then, unless ``DDSTORE_PROGRESS`` is set, the store runs
without its progress agent, as the original (reads of a computing rank on another node
wait for its next MPI call, at the latest its ``epoch_end``, which is then a round every
rank meets, as the original's fence, where some rank reads a member on another node), and
reads made from several threads take turns.  ``add`` / ``init`` refuse a ``disp`` or
``itemsize`` that differs between ranks, as the original refused a ``disp`` that differs.

Differences from the original: adding a name that exists raises (the original silently
kept the old data); ``get`` ranges may span ranks; epochs are optional for reads
(but, without the progress agent, a rank that never meets the others in an MPI call
leaves their reads of its rows waiting); a dropped ``PyDDStore`` keeps its memory until
``free()`` or the end of the job (the original's destructor freed it, a collective
call at whatever moment each rank collects it; call ``free()``); an
``update`` into a variable made by ``add`` in a store with no ``init`` variable is
published by ``sync()`` (collective), not by ``epoch_begin``.  Arguments are checked
where the original converted them: a ``float`` or ``bool`` start, offset or size (which
the original's Cython signatures truncated, ``get(name, buf, 1.7)`` reading row 1) is a
:class:`PyDDStoreTypeError`, and a start beyond int64 a :class:`PyDDStoreRangeError`
(the original: ``OverflowError``); a non-contiguous array is a ``DDStoreValueError`` (the
original: ``AssertionError``); dtypes the original refused with ``NotImplementedError``
(int8, int16, uint32, float16, ...) are stored and read, except an array not in the
machine's byte order (``'>f8'`` on x86), a ``DDStoreValueError`` (rows are kept as
bytes, so its values would come back swapped).

Checkpoint and restart (the original has none): ``store.save(path)`` (collective)
writes every variable, with its ``disp`` and ``itemsize``, to directory ``path``
(:meth:`ddstore.DDStore.save`: one file per rank written in parallel, a JSON manifest,
all or nothing); ``PyDDStore.restore(path, comm, ddstore_width=...)`` (collective) gives
a new store holding them at any rank count and width, and ``store.load(path)`` adds them
to a store that exists.  A variable keeps its global rows in order (rank ``r``'s rows
of ``add`` are where they were in the global order), split over the new ranks as
:func:`ddstore.partition` splits them, so ``get`` / ``get_batch`` of any global row
give the bytes they gave before the save::

    store.save("/lustre/me/ckpt")                               # collective
    # ... a later job, any rank count
    store = dds.PyDDStore.restore("/lustre/me/ckpt", comm, ddstore_width=2)
"""
import functools
import os
import time

import numpy as np

import ddstore
from ddstore.errors import DDStoreIndexError, DDStoreStateError, DDStoreValueError
from ddstore._checks import host_tensor, integer_scalar, is_int
from ddstore._collective import collective
from ddstore._lifecycle import as_comm, install_abort_hook
from ddstore.variables import Variables

__all__ = ["PyDDStore", "PyDDStoreRangeError", "PyDDStoreTypeError"]

_KIND = "PyDDStore"          # the annotation kind of a PyDDStore variable
_ANNOTATION = "pyddstore:"   # + the variable's name: its annotation's name


class PyDDStoreRangeError(DDStoreIndexError, ValueError):
    """A row range outside the variable.  The original DDStore raised ``ValueError``
    there, so this is both that and a :class:`ddstore.DDStoreIndexError`."""


class PyDDStoreTypeError(DDStoreValueError, TypeError):
    """An argument of another type (an array that is neither a numpy array nor a CPU
    tensor, a name that is not a string, a row count, ``disp``, ``itemsize``, ``start``
    or ``offset`` that is not an integer).  The original's typed (Cython) signatures
    raised ``TypeError`` there, so this is both that and a
    :class:`ddstore.DDStoreValueError`."""


class _Info:
    __slots__ = ("disp", "itemsize", "read_range", "read_rows", "init", "handle")

    def __init__(self, disp, itemsize, store, readers, name, init):
        self.disp, self.itemsize = disp, itemsize
        self.read_range, self.read_rows = readers  # the store's unchecked hot path
        self.init = init  # made by init (filled by update): epoch_begin synchronises
        # bound to the variable, not the name: one removed through .store is refused
        self.handle = store.handle(name)


_PLAIN = "biufc"  # the dtype kinds a buffer may have: bytes of numbers, no objects
_INT64 = np.int64  # (a start of this type takes the fast path, as an int does)


def _named(exc, info, name):
    """The message of ``exc``, raised by the store for a call through the handle of
    ``info``, with the variable's name where the store named the handle: a user of this
    module never sees handles."""
    return str(exc).replace(repr(info.handle), repr(name))


def _as_numpy(arr, name, what, stored=False):
    """A numpy view of ``arr`` (numpy array or CPU torch tensor), never a copy.  With
    ``stored`` (its values go into the store: ``add``, ``update``) not numpy's long double
    either (:meth:`ddstore.variables.Variables.check_dtype`; into a buffer a read's bytes
    may go)."""
    if isinstance(arr, np.ndarray):
        out = arr
    else:
        try:
            import torch
        except ImportError:  # pragma: no cover
            torch = None
        if torch is not None and isinstance(arr, torch.Tensor):
            if arr.device.type != "cpu":
                raise DDStoreValueError(f"{what} {name!r}: only CPU tensors are "
                                        f"supported, got one on {arr.device}")
            if arr.layout is not torch.strided or arr.is_nested:
                host_tensor(arr, f"{what} {name!r}")  # (raises, naming the layout)
            if arr.is_conj() or arr.is_neg():  # (a view whose values numpy cannot see)
                lazy = "conj" if arr.is_conj() else "neg"
                raise DDStoreValueError(f"{what} {name!r}: the tensor has torch's lazy "
                                        f"{lazy} bit set; give x.resolve_{lazy}()")
            if not arr.is_contiguous():
                raise DDStoreValueError(f"{what} {name!r}: tensor must be contiguous")
            try:
                out = arr.detach().numpy()
            except TypeError as exc:  # bfloat16 and the like: no numpy dtype
                raise DDStoreValueError(f"{what} {name!r}: tensor dtype {arr.dtype} has no "
                                        f"numpy equivalent ({exc}); allowed: bool, "
                                        f"integers, float16/32/64, complex") from None
        else:
            raise PyDDStoreTypeError(f"{what} {name!r}: expected a numpy array or torch "
                                     f"tensor, got {type(arr).__name__}")
    if out.ndim < 1:
        raise DDStoreValueError(f"{what} {name!r}: array needs a first (row) dimension, "
                                f"got a scalar")
    if not out.flags.c_contiguous:
        raise DDStoreValueError(f"{what} {name!r}: array must be C-contiguous")
    if out.dtype.kind not in _PLAIN or out.dtype.fields is not None:
        raise DDStoreValueError(f"{what} {name!r}: dtype {out.dtype} cannot be stored; "
                                f"allowed: bool, integers, float16/32/64, complex (a "
                                f"datetime64 / timedelta64 array as arr.view(np.int64))")
    if stored:  # (the store's own dtype rule and message)
        Variables.check_dtype(name, out.dtype)
    if not out.dtype.isnative:  # rows are bytes: another order would swap the values
        raise DDStoreValueError(f"{what} {name!r}: dtype {out.dtype.str} is not in this "
                                f"machine's byte order; use arr.astype("
                                f"{out.dtype.newbyteorder('=').str!r})")
    return out


def _check_name(name, what):
    """A variable's name is a ``str`` (the original's typed signature)."""
    if not isinstance(name, str):
        raise PyDDStoreTypeError(f"{what}: a variable's name is a str, got "
                                 f"{type(name).__name__} {name!r}")


def _bytes_rows(arr, nrows):
    """``arr`` viewed as ``[nrows, row_bytes]`` uint8 (no copy)."""
    flat = arr.reshape(-1).view(np.uint8)
    return flat.reshape(nrows, -1) if nrows else flat.reshape(0, arr.itemsize *
                                                             int(np.prod(arr.shape[1:])))


def _progress():
    """The progress agent of a PyDDStore's store: the original DDStore has none, and its
    users (HydraGNN's ``DistDataset``, DDStore's own demos) lower mpi4py's thread level
    to ``"serialized"``, below the ``MPI_THREAD_MULTIPLE`` the agent needs.  Then,
    unless ``DDSTORE_PROGRESS`` is set, the store is built without it (``"off"``): reads
    of a rank on another node that is computing wait for its next MPI call, as in the
    original, instead of the constructor refusing.  None otherwise (the store's own
    rule)."""
    from mpi4py import MPI
    if "DDSTORE_PROGRESS" in os.environ or MPI.Query_thread() >= MPI.THREAD_MULTIPLE:
        return None
    return "off"


class PyDDStore:
    """The original DDStore API over a :class:`ddstore.DDStore` (see the module docs).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        Communicator of every rank taking part (construction is collective).
    method : int
        0 (MPI one-sided reads).  The original's libfabric ``method=1`` is not
        available and raises :class:`ddstore.DDStoreValueError`.
    ddstore_width : int, optional
        Ranks per group (each group holds one full replica); ``None`` = all ranks.
    transport : str
        ``"auto"``, ``"rma"`` or ``"shm"``, passed to :class:`ddstore.DDStore`.
    """

    def __init__(self, comm=None, method=0, ddstore_width=None, transport="auto", *,
                 comm_or_none=None, handshake_dir="", n_core=0, nic_map=None):
        from mpi4py import MPI
        # a refusal with no communicator to agree over ends the job (as the core's, and
        # as the original's uncaught exception did), rather than leave the others waiting
        install_abort_hook()
        given = (comm, comm_or_none)  # (the newer original's name for the argument)
        comm = comm_or_none if comm_or_none is not None else comm
        if comm is None:
            comm = MPI.COMM_WORLD
        if not isinstance(comm, MPI.Comm):
            raise PyDDStoreTypeError(f"PyDDStore: comm must be an mpi4py communicator, "
                                     f"got {type(comm).__name__}")
        comm = as_comm(comm, "PyDDStore")  # (not COMM_NULL, nor an intercommunicator)
        with collective(comm, "PyDDStore"):  # the rest: agreed on every rank
            if all(c is not None for c in given):
                raise PyDDStoreTypeError("PyDDStore: comm given twice (comm and "
                                         "comm_or_none)")
            # the newer original's method-2 arguments (a handshake directory, extra
            # members) and NIC map (methods 1 and 2): their types checked as its
            # signature does, unused at method 0
            if not isinstance(handshake_dir, str) or not is_int(n_core) or n_core < 0:
                raise PyDDStoreTypeError(f"PyDDStore: handshake_dir must be a str and "
                                         f"n_core an integer >= 0 (method 2 only), got "
                                         f"{handshake_dir!r}, {n_core!r}")
            if method != 0:
                raise DDStoreValueError(f"PyDDStore: method={method!r} is not available; "
                                        f"allowed: 0 (MPI one-sided reads)")
        self._adopt(comm, ddstore.DDStore(comm, width=ddstore_width, transport=transport,
                                          progress=_progress()))

    def _adopt(self, comm, store):
        # below MPI_THREAD_MULTIPLE (what the original's users ask for: "serialized"),
        # reads from several threads (HydraGNN's threaded loader) take turns where they
        # may call MPI: the core's own lock (DDStore, docs/store.md "Threads")
        self.comm = comm
        self.method = 0
        self._store = store
        self.ddstore_width = self._store.width
        self._info = {}
        # True while a variable made by init exists: every epoch_begin then synchronises
        # (the same on every rank, as init, remove and restore are collective)
        self._fence = False
        self._open = False  # an epoch is open (tracked once a variable is held)
        self._begun_empty = False  # the last epoch_begin came with no variable held
        self._recv = {}  # register_recv's buffers, kept alive: (name, address) -> array
        # DDSTORE_PROFILE (not "" or "0"): get / get_batch timed, as the newer original
        # (get_profile); the methods wrapped on this object only, so a store that does
        # not profile pays nothing on its reads
        self._prof = {"py_gets": 0, "py_get": 0.0, "py_sync": 0.0}
        if os.environ.get("DDSTORE_PROFILE", "0") not in ("", "0"):
            self.get = self._timed(PyDDStore.get)
            self.get_batch = self._timed(PyDDStore.get_batch)
        self._open_annotated()

    def _timed(self, method):
        prof = self._prof

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                prof["py_get"] += time.perf_counter() - t
                prof["py_gets"] += 1
        return functools.update_wrapper(timed, method)

    # ------------------------------------------------------------ checkpoint
    def _annotate(self, name, info):
        """Record ``disp`` and ``itemsize`` of variable ``name`` in the store (local,
        alike on every rank, at the end of the collective ``add`` / ``init``), so that
        :meth:`save` keeps them and :meth:`restore` / :meth:`load` bring them back."""
        self._store.annotate(_ANNOTATION + name, _KIND,
                             {"disp": info.disp, "itemsize": info.itemsize,
                              "init": info.init}, variables=(name,))
        self._fence = self._fence or info.init

    def _open_annotated(self):
        """Take up every variable of the store that a PyDDStore annotated and this one
        does not hold yet (after a restore or load)."""
        st = self._store
        for ann_name in st.annotations(_KIND):
            name = ann_name[len(_ANNOTATION):]
            if name in self._info or name not in st:
                continue
            with st.annotation(ann_name, _KIND).reading(f"PyDDStore {name!r}") as meta:
                init = meta.get("init") is True  # (absent from checkpoints made before)
                disp, itemsize = int(meta["disp"]), int(meta["itemsize"])
            self._info[name] = _Info(disp, itemsize, st, self._readers(name), name, init)
            self._fence = self._fence or init

    def save(self, path):
        """Collective: write every variable (its rows, ``disp`` and ``itemsize``) to
        directory ``path`` (created if needed): each rank writes its own part in
        parallel, plus one JSON manifest, made visible by one atomic rename once every
        rank's part is written, so a failure on any rank (a full disk) raises the same
        error on every rank and leaves the previous checkpoint at ``path`` readable
        (:meth:`ddstore.DDStore.save`).  In a store with a variable made by ``init``,
        every rank's ``update`` writes are published first, as by ``epoch_begin``.
        Returns the manifest (a dict)."""
        if self._fence:
            self.sync()
        return self._store.save(os.fspath(path) if isinstance(path, os.PathLike)
                                else path)

    @classmethod
    def restore(cls, path, comm=None, ddstore_width=None, transport="auto"):
        """Collective: a new PyDDStore over ``comm`` (default ``MPI.COMM_WORLD``) holding
        every variable of the checkpoint at ``path`` (:meth:`save`), at any rank count
        and ``ddstore_width``: each variable keeps its global rows, ``disp`` and
        ``itemsize``; rank ``r`` of each group holds rows ``partition(nrows, width, r)``
        and reads only those from the files (checksums verified).  A missing, truncated
        or altered file is refused with a :class:`ddstore.DDStoreValueError` naming it,
        alike on every rank."""
        if comm is None:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD
        store = ddstore.DDStore.restore(path, comm, width=ddstore_width,
                                        transport=transport, progress=_progress())
        self = cls.__new__(cls)
        try:
            self._adopt(comm, store)
        except ddstore.DDStoreError:  # (a damaged annotation: read alike on every rank,
            store.free()             # which all hold the same annotations)
            raise
        return self

    def load(self, path):
        """Collective: add every variable of the checkpoint at ``path`` to this store
        (refused, on every rank, for a name it already holds; see
        :meth:`ddstore.DDStore.load`).  Returns the manifest."""
        manifest = self._store.load(os.fspath(path) if isinstance(path, os.PathLike)
                                    else path)
        self._open_annotated()
        return manifest

    def variables(self):
        """Names of the variables, sorted (local); not one removed through
        :attr:`store`."""
        st = self._store
        return sorted(n for n, i in self._info.items() if n in st and
                      st.handle(n) is i.handle)

    @property
    def store(self):
        """The underlying :class:`ddstore.DDStore` (e.g. for :meth:`ddstore.DDStore.save`
        options or its statistics).  A variable of this object removed through it is
        gone from :meth:`variables`, and reads of its name raise a
        :class:`ddstore.DDStoreStateError`, even after another of that name was added
        through it (use :meth:`add` / :meth:`init` here)."""
        return self._store

    def _readers(self, name):
        """The store's unchecked readers of ``name``."""
        return self._store.fast_readers(name)

    def _var(self, name):
        info = self._info.get(name) if isinstance(name, str) else None
        if info is None:
            self._store.check_alive()
            error = DDStoreValueError if isinstance(name, str) else PyDDStoreTypeError
            raise error(f"unknown variable {name!r}; known: {sorted(self._info)}" + (
                "" if isinstance(name, str) else f" (a name is a str, not "
                                                 f"{type(name).__name__})"))
        self._store.handle(info.handle)  # (removed through .store: DDStoreStateError)
        return info

    def add(self, name, arr):
        """Collective: add variable ``name`` from each rank's rows ``arr``."""
        # bad input on one rank raises on every rank, before anything is created
        with self._store.collective("PyDDStore.add", name) as step:
            _check_name(name, "add")
            local = _as_numpy(arr, name, "add", stored=True)
            disp = int(np.prod(local.shape[1:], dtype=np.int64))
            rows = _bytes_rows(local, local.shape[0])
            # rows of the same bytes but other elements (2 x float32 and 1 x float64):
            # refused, as the original refused a disp that differs ("Invalid disp")
            step.agree(same={"disp (elements per row)": disp,
                             "itemsize (bytes per element)": local.itemsize})
        with self._store.transaction(f"PyDDStore.add {name!r}"):
            self._store.add(name, rows)
            self._take(name, disp, local.itemsize, False)

    def init(self, name, nrows, disp, itemsize=1):
        """Collective: reserve ``nrows`` local rows of ``disp`` elements of ``itemsize``
        bytes for ``name``; fill them with :meth:`update`."""
        # a bad argument on one rank raises on every rank
        with self._store.collective("PyDDStore.init", name) as step:
            _check_name(name, "init")
            nrows, disp, itemsize = (integer_scalar(v) for v in (nrows, disp, itemsize))
            for label, value, low in (("nrows", nrows, 0), ("disp", disp, 1),
                                      ("itemsize", itemsize, 1)):
                if not is_int(value) or not low <= value <= 2 ** 63 - 1:
                    error = DDStoreValueError if is_int(value) else PyDDStoreTypeError
                    raise error(f"init {name!r}: {label}={value!r} must be an integer "
                                f"in [{low}, 2**63 - 1]")
            step.agree(same={"disp (elements per row)": int(disp),
                             "itemsize (bytes per element)": int(itemsize)})
        with self._store.transaction(f"PyDDStore.init {name!r}"):
            self._store.init(name, int(nrows), (int(disp) * int(itemsize),), np.uint8)
            self._take(name, int(disp), int(itemsize), True)

    def _take(self, name, disp, itemsize, init):
        """Collective, inside the transaction that made variable ``name``: its readers
        and annotation, in a step (what fails on one rank is agreed, and the variable
        removed on every rank)."""
        with self._store.collective(None):
            info = _Info(disp, itemsize, self._store, self._readers(name), name, init)
            self._annotate(name, info)
        self._info[name] = info

    def update(self, name, arr, offset=0):
        """Local: write rows ``arr`` into this rank's chunk at local row ``offset``."""
        info = self._var(name)
        local = _as_numpy(arr, name, "update", stored=True)
        self._check_row(name, info, local, "update")
        try:  # the store checks offset: never truncated (1.5) nor parsed ("1")
            self._store.update(info.handle, _bytes_rows(local, local.shape[0]), offset)
        except DDStoreIndexError as exc:  # what get raises for rows outside: ValueError too
            raise PyDDStoreRangeError(_named(exc, info, name)) from None
        except DDStoreValueError as exc:  # an offset of another type: TypeError too
            if is_int(integer_scalar(offset)):
                raise DDStoreValueError(_named(exc, info, name)) from None
            raise PyDDStoreTypeError(_named(exc, info, name)) from None

    @staticmethod
    def _check_row(name, info, arr, what):
        nrows = arr.shape[0]
        per_row = arr.size // nrows if nrows else int(np.prod(arr.shape[1:]))
        if arr.itemsize != info.itemsize or per_row != info.disp:
            raise DDStoreValueError(
                f"{what} {name!r}: array rows have {per_row} elements of {arr.itemsize} "
                f"bytes; the variable has rows of {info.disp} elements of "
                f"{info.itemsize} bytes")

    def get(self, name, arr, start=0):
        """Local: fill ``arr`` with ``arr.shape[0]`` rows from global row ``start``.

        The hot path of per-sample loaders: a numpy ``arr`` of the right layout goes
        straight to the core, which checks the range; anything else (torch tensors, bad
        input) takes the checked path below, which explains what is wrong.
        """
        info = self._info.get(name) if type(name) is str else None
        # (numpy int64 starts too: HydraGNN's DistDataset reads its offsets from arrays)
        if info is not None and type(arr) is np.ndarray and \
                (type(start) is int or type(start) is _INT64) and arr.ndim:
            flags = arr.flags
            count = arr.shape[0]
            # (0 rows: their width is checked on the checked path)
            dt = arr.dtype
            if (count and flags.c_contiguous and flags.writeable
                    and arr.itemsize == info.itemsize and arr.size == count * info.disp
                    and dt.kind in _PLAIN and dt.isnative):
                try:
                    info.read_range(start, count, arr)
                    return
                except (DDStoreIndexError, OverflowError):
                    pass  # explained by the checked path
        self._get_checked(name, arr, start)

    def _get_checked(self, name, arr, start):
        info = self._var(name)
        out = _as_numpy(arr, name, "get")
        if not out.flags.writeable:
            raise DDStoreValueError(f"get {name!r}: array is read-only")
        self._check_row(name, info, out, "get")
        start = integer_scalar(start)  # a 0-d integer tensor: its value
        if not is_int(start):
            raise PyDDStoreTypeError(f"get {name!r}: start must be an integer, got "
                                     f"{start!r}")
        start = int(start)  # (numpy integers would wrap in start + count)
        count, total = out.shape[0], self._store.nrows(info.handle)
        if start < 0 or start + count > total:
            raise PyDDStoreRangeError(f"get {name!r}: rows [{start}, {start + count}) out "
                                      f"of range [0, {total})")
        if count:
            info.read_range(start, count, out)

    def get_batch(self, name, arr, indices):
        """Local: row ``i`` of ``arr`` receives global row ``indices[i]``."""
        info = self._info.get(name) if type(name) is str else None
        t = type(indices)
        if (info is not None and type(arr) is np.ndarray and (t is list or t is tuple)
                and 0 < len(indices) <= 16 and arr.ndim and arr.shape[0] == len(indices)
                and all(type(i) is int for i in indices)):
            flags = arr.flags
            dt = arr.dtype
            if (flags.c_contiguous and flags.writeable and arr.itemsize == info.itemsize
                    and arr.size == len(indices) * info.disp and dt.kind in _PLAIN
                    and dt.isnative):
                try:
                    info.read_rows(indices, arr)
                    return
                except (DDStoreIndexError, OverflowError):
                    pass  # explained by the checked path
        info = self._var(name)
        out = _as_numpy(arr, name, "get_batch")
        idx = np.asarray(indices)
        if idx.ndim != 1:
            raise DDStoreValueError(f"get_batch {name!r}: indices must be 1-D")
        if len(idx) and idx.dtype.kind in "bfcUSV":  # (huge ints: object, the store's)
            raise PyDDStoreTypeError(f"get_batch {name!r}: indices must be integers, got "
                                     f"{idx.dtype} values")
        if out.shape[0] != len(idx):
            raise DDStoreValueError(f"get_batch {name!r}: arr has {out.shape[0]} rows but "
                                    f"{len(idx)} indices were given")
        self._check_row(name, info, out, "get_batch")
        if len(idx):
            try:
                self._store.get_batch(info.handle, indices if isinstance(
                    indices, (list, tuple)) else idx, out=_bytes_rows(out, len(idx)))
            except DDStoreIndexError as exc:
                raise PyDDStoreRangeError(_named(exc, info, name)) from None

    def register_recv(self, name, arr):
        """Local: as the newer original at ``method=0``, where registering a receive
        buffer (for its libfabric methods) does nothing but keep ``arr`` alive until
        :meth:`unregister_recv` or :meth:`free`: an empty ``arr`` is ignored, ``name``
        must be a variable, and a CUDA tensor is refused (a ``RuntimeError``: the
        original takes one only at its methods 1 and 2)."""
        if getattr(arr, "is_cuda", False) is True:
            raise DDStoreStateError(f"register_recv {name!r}: a GPU destination buffer "
                                    f"needs the original's libfabric methods 1 or 2; "
                                    f"this store has method 0 (read into CPU memory)")
        out = _as_numpy(arr, name, "register_recv")
        if out.nbytes == 0:
            return
        self._var(name)
        self._recv[(name, out.ctypes.data)] = arr

    def unregister_recv(self, name, arr):
        """Local: undo :meth:`register_recv` of ``arr`` for ``name``; a buffer that is not
        registered is ignored, as the original does at ``method=0``."""
        out = _as_numpy(arr, name, "unregister_recv")
        self._recv.pop((name, out.ctypes.data), None)

    def get_profile(self, name):
        """Local: the newer original's ``DDSTORE_PROFILE`` counters for ``name``, as it
        gives them at ``method=0``: its libfabric counters (``calls``, ``lock_wait``,
        ``mr``, ``mr_miss``, ``read``, ``cq``, ``rows``) 0, and this store's Python
        counters across all variables: ``py_gets`` (calls of :meth:`get` and
        :meth:`get_batch`), ``py_get`` (seconds in them) and ``py_sync`` (seconds of
        device synchronisation: 0, no GPU buffer is read into), counted only when
        ``DDSTORE_PROFILE`` (not ``""`` or ``"0"``) was set when the store was made."""
        self._var(name)
        return {"calls": 0, "lock_wait": 0.0, "mr": 0.0, "mr_miss": 0, "read": 0.0,
                "cq": 0.0, "rows": 0, **self._prof}

    def join(self, name):
        """The newer original's ``method=2`` extra member's discovery of a variable: on
        a store made with a communicator (every store here) a ``RuntimeError``
        (:class:`ddstore.DDStoreStateError`), as in the original."""
        raise DDStoreStateError(f"join({name!r}) is only valid for the extra members of "
                                f"the original's method 2; this store has method 0 and a "
                                f"communicator")

    def size(self, name):
        """Global number of rows of ``name`` (in this rank's group)."""
        return self._store.nrows(self._var(name).handle)

    def info(self, name):
        """``(total_rows, disp, itemsize)`` of ``name``."""
        info = self._var(name)
        return self._store.nrows(info.handle), info.disp, info.itemsize

    def epoch_begin(self):
        """Collective: open a read epoch.

        Reads here are passive-target and need no epoch, so in a store built with ``add``
        only the pair costs nothing, but where the store runs without its progress agent
        (the original's users' ``"serialized"`` thread level) and some rank reads a
        member on another node: there every rank meets the others in it, as in the
        original's ``MPI_Win_fence``, and a rank waiting there lets MPI answer the reads
        other ranks make of its rows (a read of a rank on another node waits for that
        rank's next MPI call).  In a store holding a variable made by :meth:`init`
        (filled by :meth:`update`), it also synchronises every rank as the fence did: the
        ``update`` writes any rank made before it are what every ``get`` reads after it.
        Once the store holds a variable, an epoch opened twice is a
        :class:`ddstore.DDStoreStateError` (a ``RuntimeError``; the original's "Fence
        already activated" ended the process).
        """
        self._store.check_alive()
        self._epoch(True)
        if self._fence:
            self.sync()

    def epoch_end(self):
        """Collective: close a read epoch.

        Every ``get`` is complete when it returns, so in a store built with ``add`` only
        this costs nothing, but where :meth:`epoch_begin` is a round (no progress agent,
        reads of members on other nodes), or in a store holding a variable made by
        :meth:`init`, no rank leaves it before every rank has entered it, as the
        original's ``MPI_Win_fence``: the reads of the epoch are answered meanwhile, and
        an ``update`` made after it never reaches a ``get`` another rank made in the
        epoch it closes.  Once the store holds a variable, closing an epoch not open is a
        :class:`ddstore.DDStoreStateError` (the original's "Fence is not activated")."""
        self._store.check_alive()
        self._epoch(False)

    def _epoch(self, opening):
        """Open (``opening``) or close the epoch: a round every rank meets where reads
        need it (no progress agent, reads of members on other nodes) or the store holds
        an ``init`` variable (a refusal agreed in it), else this rank's own check."""
        # where a read may wait for its owner's next MPI call (store.reads_wait: some
        # rank reads a member on another node, some runs no progress agent), a round, in
        # which MPI answers the reads of the waiting rank's rows
        if self._fence or self._store.reads_wait:
            if opening:  # (the calls' names literal: the steps' scan reads them)
                with self._store.collective("PyDDStore.epoch_begin"):
                    self._check_epoch(True)  # its round: the gets before are done
            else:
                with self._store.collective("PyDDStore.epoch_end"):
                    self._check_epoch(False)
        elif self._info and self._open == opening:
            self._check_epoch(opening)  # (raises)
        self._open = opening and bool(self._info)
        # (an epoch begun with no variable held opens none, as the original's fence per
        # variable: its epoch_end then says so)
        self._begun_empty = opening and not self._info

    def _check_epoch(self, opening):
        if self._info and self._open == opening:
            raise DDStoreStateError(
                "PyDDStore.epoch_begin: an epoch is open already (epoch_begin twice "
                "without epoch_end)" if opening else
                "PyDDStore.epoch_end: no epoch is open: epoch_begin was called before the "
                "store held a variable, which opens none (the original's fences are per "
                "variable); call epoch_begin after add / init" if
                self._begun_empty else
                "PyDDStore.epoch_end: no epoch is open (epoch_end without epoch_begin)")

    def sync(self):
        """Collective: make every rank's ``update`` writes visible to all readers."""
        self._store.sync()

    def free(self):
        """Collective: release the store.  Safe to call twice."""
        self._store.free()
        self._info.clear()
        self._recv.clear()
        self._fence = self._open = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()
        return False
