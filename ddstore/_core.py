"""Thin typed wrapper over the compiled C core (``ddstore._ddstore_cffi``).

Nothing else in the package touches cffi.  Every C error code becomes a
:class:`~ddstore.errors.DDStoreError` subclass carrying the core's message.
"""
import operator
import os

import numpy as np

from .errors import (DDStoreError, DDStoreIndexError, DDStoreMemoryError,
                     DDStoreStateError, DDStoreValueError)
from ._checks import c_label
from ._times import as_time_dtype

try:
    from ._ddstore_cffi import ffi, lib
except ImportError as exc:  # pragma: no cover - only when the package was not built
    raise ImportError(
        "the ddstore C extension is not built; install the package with "
        "'pip install --no-build-isolation -e .' after 'pip install mpich mpi4py cffi'"
    ) from exc

TRANSPORTS = {"auto": lib.DDS_TRANSPORT_AUTO, "rma": lib.DDS_TRANSPORT_RMA,
              "shm": lib.DDS_TRANSPORT_SHM}
READ_PER_ROW_LOCK = lib.DDS_READ_PER_ROW_LOCK

_ERRORS = {
    lib.DDS_EINVAL: DDStoreValueError,
    lib.DDS_ERANGE: DDStoreIndexError,
    lib.DDS_ENOMEM: DDStoreMemoryError,
    lib.DDS_EMPI: DDStoreStateError,
    lib.DDS_ESTATE: DDStoreStateError,
}


def _mark_child():
    """In a process forked from this one (os.fork, DataLoader workers): ``Core.alive``
    asks the core whether the rank freed the store since (the rank's own check stays a
    pointer test)."""
    Core.alive = property(_alive_in_child)


os.register_at_fork(after_in_child=_mark_child)


def _alive_in_child(core):
    return core._handle[0] != ffi.NULL and not core.gone()


def forked():
    """Whether this process was forked from an MPI rank after the core was loaded (a
    DataLoader worker, ``os.fork``): there no MPI call may be made, and the core refuses
    every one (``dds_forked``: a ``pthread_atfork`` flag) with a
    :class:`DDStoreStateError`; reads of memory this process holds (its own chunk,
    node-local members' shared memory) work as in the parent."""
    return bool(lib.dds_forked())


def _comm_handle(comm):
    from mpi4py import MPI
    return ffi.cast("MPI_Comm *", MPI._addressof(comm))


def _ptr(arr):
    """Address of a C-contiguous array's data (``ffi.from_buffer`` is far cheaper than
    ``arr.ctypes``; a 0-size array gets NULL)."""
    if arr.size == 0:
        return ffi.NULL
    return ffi.from_buffer(arr, require_writable=False)


def _aligned(arr):
    """``arr``, or an aligned copy when its data is not aligned for its dtype (numpy
    allows it: ``np.frombuffer`` at an odd offset): the core reads int64 / double
    inputs through typed pointers, undefined behaviour at an unaligned address.  For
    inputs only; the outputs the core writes are the package's own numpy arrays,
    always aligned."""
    return arr if arr.flags.aligned else arr.copy()


def _out(arr, ctype=None):
    """``(pointer, capacity)`` of a writable output buffer: the capacity in bytes (no
    ``ctype``) or in elements of ``ctype`` (e.g. ``"int64_t[]"``), from the memory the
    buffer really has, which is what the C core is told it may write.  A read-only or
    non-contiguous buffer raises :class:`DDStoreValueError`."""
    try:
        buf = (ffi.from_buffer(arr, require_writable=True) if ctype is None else
               ffi.from_buffer(ctype, arr, require_writable=True))
    except (TypeError, ValueError, BufferError) as exc:
        raise DDStoreValueError(f"output buffer: {exc} (a writable C-contiguous buffer "
                                f"is needed)") from None
    n = len(buf)
    return (ffi.NULL if n == 0 else buf), n


_C_DTYPES = {"int64_t[]": np.dtype(np.int64), "double[]": np.dtype(np.float64)}


def _typed(arr, ctype="int64_t[]"):
    """A C-contiguous numpy array (or None) as a ``ctype`` buffer for the core (``int64_t[]``
    or ``double[]``); NULL when None or empty.  Its dtype must be the C type's: cffi would
    reinterpret any other's bytes (float32 times read as doubles), so another dtype
    raises :class:`DDStoreValueError`."""
    if arr is None or arr.size == 0:
        return ffi.NULL
    if arr.dtype != _C_DTYPES[ctype]:
        raise DDStoreValueError(f"an array of dtype {arr.dtype} passed to the core as "
                                f"{ctype}; expected {_C_DTYPES[ctype]}")
    return ffi.from_buffer(ctype, _aligned(arr))


# the dtypes of a graph's times and their C dds_time_type: float64 (double) and int64
TIME_TYPES = {np.dtype(np.float64): lib.DDS_TIME_F64, np.dtype(np.int64): lib.DDS_TIME_I64}
# the dtypes of a neighbour-time table (dds_tcsr.nbr_time) per time dtype: 8 bytes, or 4
# for times the narrow dtype holds exactly
_TABLE_DTYPES = {np.dtype(np.float32): np.dtype(np.float64),
                 np.dtype(np.float64): np.dtype(np.float64),
                 np.dtype(np.int32): np.dtype(np.int64),
                 np.dtype(np.int64): np.dtype(np.int64)}


def _times(arr, dtype, n, what):
    """A C-contiguous 1-d array of ``n`` times of ``dtype`` (or None: NULL) for the core;
    another dtype or length raises :class:`DDStoreValueError` (cffi would reinterpret
    the bytes, or C read past the end)."""
    if arr is None:
        return ffi.NULL
    if arr.dtype != dtype or arr.shape != (n,) or not arr.flags.c_contiguous:
        raise DDStoreValueError(f"{what}: times of dtype {arr.dtype} shape {arr.shape}; "
                                f"expected a C-contiguous {dtype} array of shape ({n},)")
    return _ptr(_aligned(arr))


def _last_error():
    """The C core's message for this thread's last failed call (``dds_last_error``: per
    thread, so it must be read in the thread that made the call, as here)."""
    return ffi.string(lib.dds_last_error()).decode(errors="replace")


class Core:
    """One C store.  Methods mirror ``csrc/ddstore.h``; see there for semantics."""

    def __init__(self, comm, width, transport):
        out, agreed = ffi.new("dds_store **"), ffi.new("int *")
        rc = lib.dds_create(_comm_handle(comm), int(width), TRANSPORTS[transport], out,
                            agreed)
        if rc != lib.DDS_OK:
            exc = _ERRORS.get(rc, DDStoreError)(_last_error())
            exc.core_agreed = bool(agreed[0])  # every rank of comm raises it alike
            raise exc
        self._handle = ffi.new("dds_store **", out[0])

    def start_progress(self, interval_us):
        """Start the store's progress agent (``dds_progress_start``; see
        csrc/dds_progress.h); :meth:`free` stops it."""
        self._check(lib.dds_progress_start(self._handle[0], int(interval_us)))

    def serve(self, min_pieces):
        """Reads of members on other nodes by message from ``min_pieces`` pieces, or
        never (0) (``dds_serve``; needs the progress agent)."""
        self._check(lib.dds_serve(self._handle[0], int(min_pieces > 0),
                                  max(1, int(min_pieces))))

    def set_copy_threads(self, threads, min_bytes):
        """Threads that copy the local pieces of a read of at least ``min_bytes``
        bytes (0: chosen from the CPUs and the node's ranks; ``dds_set_copy_threads``);
        returns the number in effect."""
        self._check(lib.dds_set_copy_threads(self._handle[0], int(threads), int(min_bytes)))
        return self.copy_threads

    @property
    def copy_threads(self):
        """The threads copying a large read's local pieces (``dds_copy_threads``)."""
        return int(lib.dds_copy_threads(self._handle[0]))

    @property
    def serving(self):
        """Whether reads of members on other nodes go by message (``dds_serving``)."""
        return bool(lib.dds_serving(self._handle[0]))

    @property
    def progress(self):
        """Whether the store's progress agent runs."""
        return bool(lib.dds_progress_running(self._handle[0]))

    @property
    def alive(self):
        """Not freed (in a process forked from the rank, by the rank either:
        :func:`_mark_child`)."""
        return self._handle[0] != ffi.NULL

    def gone(self):
        """In a process forked from the rank: whether the rank freed the store since."""
        return self._handle[0] != ffi.NULL and bool(lib.dds_gone(self._handle[0]))

    def freed_message(self):
        """What a use of a freed store is told (freed here, or by the rank this process
        was forked from)."""
        if self.gone():
            return ("this DDStore has been freed by the rank this process was forked from "
                    "(a DataLoader worker that outlived it: persistent_workers=True across "
                    "a free); nothing is read")
        return "this DDStore has been freed; create a new one"

    def _check(self, rc):
        if rc != lib.DDS_OK:
            raise _ERRORS.get(rc, DDStoreError)(_last_error())

    def free(self):
        lib.dds_free(self._handle)

    @property
    def group_rank(self):
        return lib.dds_group_rank(self._handle[0])

    @property
    def group_size(self):
        return lib.dds_group_size(self._handle[0])

    @property
    def off_node(self):
        return lib.dds_off_node(self._handle[0])

    @property
    def ngroups(self):
        return lib.dds_ngroups(self._handle[0])

    @property
    def shm_peers(self):
        return lib.dds_shm_peers(self._handle[0])

    def add(self, name, n_local, row_bytes):
        var = ffi.new("int *")
        self._check(lib.dds_add(self._handle[0], c_label(name), int(n_local),
                                int(row_bytes), var))
        return var[0]

    def remove(self, var):
        self._check(lib.dds_remove(self._handle[0], var))

    def zero_private(self, var):
        """Zero this rank's chunk of ``var`` where it is private memory (``init``'s rows
        read as zeros until written; a node-shared chunk is zero already)."""
        self._check(lib.dds_zero_private(self._handle[0], var))

    def write_local(self, var, offset, rows):
        """``rows``: C-contiguous array whose rows have the variable's row size."""
        self._check(lib.dds_write_local(self._handle[0], var, int(offset), _ptr(rows),
                                        int(rows.shape[0]) if rows.ndim else 1))

    def local_view(self, var, dtype, row_shape):
        """A numpy array over this rank's own chunk of ``var`` (``[n_local, *row_shape]``
        of ``dtype``, no copy): writing it is what :meth:`write_local` does, for layers
        that scatter rows (other ranks see the writes after the next :meth:`sync`).
        Valid until the variable is removed or the store freed.  Marks the chunk as
        written by plain stores (``dds_mark_written``: processes forked from this one
        refuse a private copy of it after a sync)."""
        self._check(lib.dds_mark_written(self._handle[0], var))
        return self.member_view(var, self.group_rank, dtype, row_shape)

    def private_rows(self, var):
        """Whether this rank's chunk of ``var`` is private memory (no node-local peer:
        processes forked before keep a copy of its rows; ``dds_private_rows``)."""
        return bool(lib.dds_private_rows(self._handle[0], var))

    def held(self, var):
        """Whether variable ``var`` is held (not removed, the store not freed; in a
        process forked from the rank, by the rank too)."""
        return bool(lib.dds_held(self._handle[0], var))

    def member_view(self, var, member, dtype, row_shape):
        """A numpy array over group member ``member``'s chunk of ``var``, no copy, when
        this process maps it (its own chunk, and node-local members' over shared
        memory); None for a member read with MPI_Get.  Valid until the variable is
        removed or the store freed."""
        ptr = ffi.new("void **")
        n = ffi.new("int64_t *")
        self._check(lib.dds_member_ptr(self._handle[0], var, member, ptr, n))
        if ptr[0] == ffi.NULL and n[0] > 0 and member != self.group_rank:
            return None
        dtype = np.dtype(dtype)
        row = int(np.prod(row_shape, dtype=np.int64))
        shape = (int(n[0]),) + tuple(row_shape)
        if shape[0] * row == 0 or ptr[0] == ffi.NULL:
            return np.zeros(shape, dtype)
        buf = ffi.buffer(ptr[0], shape[0] * row * dtype.itemsize)
        return np.frombuffer(buf, dtype=dtype).reshape(shape)

    def prefault(self, var, peers=True, touch=False):
        """``dds_prefault`` of ``var``: map this rank's own chunk and (``peers``) the
        node-local members' chunks; ``touch``: without madvise (one read per page).
        Returns the bytes mapped.  Releases the GIL (a cffi call)."""
        out = ffi.new("int64_t *")
        flags = (lib.DDS_PREFAULT_OWN | (lib.DDS_PREFAULT_PEERS if peers else 0) |
                 (lib.DDS_PREFAULT_TOUCH if touch else 0))
        self._check(lib.dds_prefault(self._handle[0], var, flags, out))
        return int(out[0])

    def sync(self):
        self._check(lib.dds_sync(self._handle[0]))

    def sync_windows(self, var_ids):
        """``dds_sync_windows``: local MPI_Win_sync of the windows of ``var_ids`` (a
        sequence of ids).  Releases the GIL (a cffi call)."""
        ids = _aligned(np.ascontiguousarray(var_ids, dtype=np.intc))
        self._check(lib.dds_sync_windows(self._handle[0], ffi.from_buffer("int[]", ids)
                                         if ids.size else ffi.NULL, int(ids.size)))

    def nrows(self, var):
        n = ffi.new("int64_t *")
        self._check(lib.dds_nrows(self._handle[0], var, n))
        return n[0]

    def chunk_offsets(self, var):
        offsets = np.empty(self.group_size + 1, dtype=np.int64)
        self._check(lib.dds_chunk_offsets(self._handle[0], var, *_out(offsets,
                                                                      "int64_t[]")))
        return offsets

    def range_reader(self):
        """A function ``read(var, start, count, out)``: rows ``[start, start + count)``
        into ``out`` (a writable C-contiguous buffer); the core checks the range and that
        ``out`` holds the rows (:class:`DDStoreValueError` when it is too small or not
        writable).  The hot path of single-row reads, so everything it needs is bound
        once here instead of looked up per call.  Use it only while the store is alive
        (the caller checks: a freed store has no variables to read)."""
        handle, read_range, from_buffer, check = (self._handle, lib.dds_read_range,
                                                  ffi.from_buffer, self._check)

        def read(var, start, count, out):
            try:
                buf = from_buffer(out, require_writable=True)
            except (TypeError, ValueError, BufferError):
                buf = _out(out)[0]  # raises the ddstore error
            rc = read_range(handle[0], var, start, count, buf, len(buf))
            if rc:
                check(rc)
        return read

    def rows_reader(self):
        """A function ``read(var, rows, out)`` for a short Python sequence of Python ints
        ``rows`` (one row each, in order): no numpy index array is built.  Bound once,
        like :meth:`range_reader`."""
        handle, read, new, from_buffer, null, check = (
            self._handle, lib.dds_read, ffi.new, ffi.from_buffer, ffi.NULL, self._check)

        def read_rows(var, rows, out):
            try:
                buf = from_buffer(out, require_writable=True)
            except (TypeError, ValueError, BufferError):
                buf = _out(out)[0]  # raises the ddstore error
            rc = read(handle[0], var, new("int64_t[]", rows), null, len(rows), buf,
                      len(buf), 0)
            if rc:
                check(rc)
        return read_rows

    def ranges_total(self, var, starts, counts):
        """Check ranges as :meth:`read` would; return the rows they hold in all."""
        total = ffi.new("int64_t *")
        self._check(lib.dds_ranges_total(self._handle[0], var,
                                         ffi.from_buffer("int64_t[]", _aligned(starts)),
                                         ffi.NULL if counts is None else
                                         ffi.from_buffer("int64_t[]", _aligned(counts)),
                                         starts.shape[0], total))
        return total[0]

    def read(self, var, starts, counts, out, flags=0):
        """``starts``/``counts``: C-contiguous int64 arrays of equal length; ``counts``
        None reads one row per start.  ``out``: a writable C-contiguous buffer; the core
        refuses rows that do not fit it (:class:`DDStoreValueError`)."""
        ptr, nbytes = _out(out)
        self._check(lib.dds_read(self._handle[0], var,
                                 ffi.from_buffer("int64_t[]", _aligned(starts)),
                                 ffi.NULL if counts is None else
                                 ffi.from_buffer("int64_t[]", _aligned(counts)),
                                 starts.shape[0], ptr, nbytes, flags))

    def read_many(self, requests):
        """Several :meth:`read` calls made as one (``dds_read_many``): ``requests`` a
        list of ``(var, starts, counts, out)`` as :meth:`read` takes them; every one is
        checked before anything is read, and the remote pieces of all are waited for
        together (one round trip per remote owner)."""
        reqs = ffi.new("dds_read_req[]", len(requests))
        keep = []
        for r, (var, starts, counts, out) in zip(reqs, requests):
            ptr, nbytes = _out(out)
            st = ffi.from_buffer("int64_t[]", _aligned(starts))
            ct = (ffi.NULL if counts is None else
                  ffi.from_buffer("int64_t[]", _aligned(counts)))
            keep.append((st, ct, ptr))
            r.var_id, r.starts, r.counts, r.n = var, st, ct, starts.shape[0]
            r.out, r.out_bytes = ptr, nbytes
        self._check(lib.dds_read_many(self._handle[0], reqs, len(requests)))

    def local_bytes(self):
        return lib.dds_local_bytes(self._handle[0])


SAMPLE_STRATEGIES = {"recent": lib.DDS_SAMPLE_RECENT, "uniform": lib.DDS_SAMPLE_UNIFORM}
#: Sampled edges a layer's or hop's outputs hold without sizing them by degree: up to
#: this many, ``k`` per node (what a fanout ``k`` can take at most) is allocated rather
#: than a pass over the nodes' degrees (the core counts them again and checks).
SMALL_SAMPLE = 1 << 16


class TCSR:
    """A ``dds_tcsr`` over three variables of ``core`` (see ``csrc/ddstore.h``).  Keeps
    the replicated ``indptr`` and ``node_offsets`` arrays alive for the C sampler.
    ``time_dtype``: the dtype of the graph's times (float64 or int64: what ``ts_var``
    holds, what :meth:`sample` takes and gives)."""

    def __init__(self, core, nbr_var, ts_var, eid_var, indptr, node_offsets,
                 fetch_whole_max=0, range_factor=0, time_dtype=np.float64):
        self._core = core
        self.time_dtype = as_time_dtype(time_dtype, "TCSR")
        self._indptr = _aligned(np.ascontiguousarray(indptr, dtype=np.int64))
        self._node_offsets = _aligned(np.ascontiguousarray(node_offsets, dtype=np.int64))
        self._c = ffi.new("dds_tcsr *")
        self._c.nbr_var, self._c.ts_var, self._c.eid_var = nbr_var, ts_var, eid_var
        self._c.num_nodes = self._indptr.shape[0] - 1
        self._c.indptr = ffi.from_buffer("int64_t[]", self._indptr)
        self._c.node_offsets = ffi.from_buffer("int64_t[]", self._node_offsets)
        self._c.fetch_whole_max = int(fetch_whole_max)
        self._c.range_factor = int(range_factor)
        self._c.time_type = TIME_TYPES[self.time_dtype]

    def _live_core(self):
        if not self._core.alive:
            raise DDStoreStateError(self._core.freed_message())
        return self._core

    @staticmethod
    def _sampled(core, rc, cap):
        """``core._check(rc)`` for a sampling call whose outputs hold ``cap`` entries: a
        failed allocation inside the core is told as the outputs' own is (the same
        :class:`DDStoreMemoryError` whichever allocation failed first, which depends on
        how much memory the machine has and whether it overcommits)."""
        try:
            core._check(rc)
        except DDStoreMemoryError as exc:
            raise DDStoreMemoryError(f"sample: {cap} sampled entries and the sampler's "
                                     f"working memory do not fit in memory ({exc})") \
                from None

    @staticmethod
    def _outputs(cap, n=3):
        """``n`` int64 output buffers of ``cap`` entries (a cap too large for memory is a
        :class:`DDStoreMemoryError` naming it)."""
        if cap < 0:
            raise DDStoreValueError(f"sample: output capacity {cap} must be >= 0")
        try:
            return [np.empty(cap, dtype=np.int64) for _ in range(n)]
        except (MemoryError, ValueError) as exc:
            raise DDStoreMemoryError(f"sample: {n} output arrays of {cap} entries do not "
                                     f"fit in memory ({exc})") from None

    def _taken_at_most(self, nodes, k):
        """The sum over ``nodes`` of ``min(k, degree)`` (every node's whole list when
        ``k < 0``): what a sample without replacement can take.  Nodes out of range count
        0 here (the core refuses them)."""
        if nodes.shape[0] == 0:
            return 0
        num = self._indptr.shape[0] - 1
        v = np.clip(nodes, 0, max(num - 1, 0))
        deg = (self._indptr[v + 1] - self._indptr[v]) if num else np.zeros_like(v)
        return int(deg.sum() if k < 0 else np.minimum(deg, k).sum())

    def sample(self, roots, root_ts, k, strategy, seed, epoch, layer, lead=False):
        """One layer: ``(row, nbr, eid, ets)`` arrays of the sampled edges (compact, in
        root order).  ``roots`` int64 and ``root_ts`` of :attr:`time_dtype` (``ets``
        too), C-contiguous, same length.  The outputs are sized by what the roots' lists
        hold (at most ``min(k, degree)`` each; ``k`` each when that is at most
        :data:`SMALL_SAMPLE` entries in all, which skips the pass over the degrees).
        ``lead=True``: ``nbr`` and ``ets`` start with the roots and their times (a
        temporal block's ``nodes`` and ``ts``: ``[roots, sampled]``), written in place
        rather than concatenated after."""
        n = roots.shape[0]
        pt = _times(root_ts, self.time_dtype, n, "temporal sample: root_ts")
        cap = n * k if 0 <= k and n * k <= SMALL_SAMPLE else self._taken_at_most(roots, k)
        head = n if lead else 0
        # a MemoryError here is explained by the caller (ddstore.temporal's sampler)
        row, eid = (np.empty(cap, dtype=np.int64) for _ in range(2))
        nbr = np.empty(head + cap, dtype=np.int64)
        ets = np.empty(head + cap, dtype=self.time_dtype)
        if lead:
            nbr[:n], ets[:n] = roots, root_ts
        count = ffi.new("int64_t *")
        core = self._live_core()
        self._sampled(core, lib.dds_temporal_sample(
            core._handle[0], self._c, _i64(roots), pt, n, k, strategy, seed,
            epoch, layer, cap, _i64(row), _i64(nbr[head:]), _i64(eid), _ptr(ets[head:]),
            count), cap)
        m = count[0]
        return row[:m], nbr[:head + m], eid[:m], ets[:head + m]


def _local_check(rc):
    if rc != lib.DDS_OK:
        raise _ERRORS.get(rc, DDStoreError)(_last_error())


def _i64(arr):
    return _typed(arr, "int64_t[]")


def tcsr_count(edges, add_reverse, deg):
    """``deg[v] +=`` the T-CSR entries of node ``v`` in edge-table rows ``edges``
    (``[n, 2]`` C-contiguous int64; ``deg`` int64 of ``num_nodes``)."""
    _local_check(lib.dds_tcsr_count(_i64(edges), edges.shape[0], int(bool(add_reverse)),
                                    deg.shape[0], _i64(deg)))


def tcsr_pack(edges, t, eid0, add_reverse, node_offsets, out, counts):
    """Pack the T-CSR entries of edge-table rows ``edges`` (``[n, 2]``; times ``t``,
    float64 or int64, moved as their bytes; ids from ``eid0``) into ``out`` (int64
    ``[>= n * (1 + add_reverse), 4]``) grouped by owning member; ``counts`` (int64
    ``[width]``) gets entries per member.  ``t`` None: time 0.  The core refuses entries
    that do not fit ``out``."""
    width = node_offsets.shape[0] - 1
    ptr, words = _out(out, "int64_t[]")
    pt = ffi.NULL if t is None else _times(
        t, as_time_dtype(t.dtype, "tcsr_pack: t"), edges.shape[0], "tcsr_pack: t")
    _local_check(lib.dds_tcsr_pack(_i64(edges), pt, int(eid0), edges.shape[0],
                                   int(bool(add_reverse)), _i64(node_offsets), width,
                                   _i64(counts), ptr, words // 4))


def _id_lists(nbr, eid, what):
    """``(nbr, eid, id_bytes)`` as C pointers for ``dds_tcsr_place`` / ``dds_tcsr_sort``:
    both int32 or both int64, C-contiguous."""
    dt = np.dtype(nbr.dtype)
    if dt != eid.dtype or dt not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise DDStoreValueError(f"{what}: nbr and eid must both be int32 or both int64, "
                                f"got {nbr.dtype} and {eid.dtype}")
    if not (nbr.flags.c_contiguous and eid.flags.c_contiguous):
        raise DDStoreValueError(f"{what}: nbr and eid must be C-contiguous")

    pn, nn = _out(nbr)
    pe, ne = _out(eid)
    return pn, pe, dt.itemsize, min(nn, ne) // dt.itemsize


def _times_out(ts, rows, what):
    """``(pointer, rows, dds_time_type)`` with ``rows`` cut to the times ``ts`` holds
    (float64 or int64; None: no times, ``DDS_TIME_F64``)."""
    if ts is None:
        return ffi.NULL, rows, lib.DDS_TIME_F64
    dt = as_time_dtype(ts.dtype, f"{what}: ts")
    pt, nbytes = _out(ts)
    return pt, min(rows, nbytes // 8), TIME_TYPES[dt]


def tcsr_place(entries, node_lo, node_hi, indptr, fill, nbr, ts, eid):
    """Place received entries (``[n, 4]`` int64) into this member's T-CSR chunk
    (``nbr``/``eid``: both int64, or both int32 when every id fits; ``ts`` None: no
    times kept; float64 or int64 times, moved as their bytes)."""
    pn, pe, id_bytes, rows = _id_lists(nbr, eid, "tcsr_place")
    pt, rows, _ = _times_out(ts, rows, "tcsr_place")
    _local_check(lib.dds_tcsr_place(_i64(entries), entries.shape[0], int(node_lo),
                                    int(node_hi), _i64(indptr), _i64(fill), pn, pt, pe,
                                    rows, id_bytes))


def tcsr_sort(node_lo, node_hi, indptr, nbr, ts, eid, nbr_time=None):
    """Sort every list of nodes ``[node_lo, node_hi)`` of the chunk in place by (time,
    edge id), or by edge id alone when ``ts`` is None (``nbr``/``eid`` as in
    :func:`tcsr_place`; ``ts`` float64 or int64, compared as numbers of its dtype).
    ``nbr_time`` (with ``ts`` None): every neighbour's time, by id (float32 or float64,
    int32 or int64: :func:`neighbour_times`); the lists are then sorted by (their
    neighbours' times, edge id), through a scratch of the longest list's length."""
    pn, pe, id_bytes, rows = _id_lists(nbr, eid, "tcsr_sort")
    pt, rows, ttype = _times_out(ts, rows, "tcsr_sort")
    table, n_table, t_bytes, scratch, n_scratch = ffi.NULL, 0, 0, ffi.NULL, 0
    if nbr_time is not None:
        t, dt = neighbour_times(nbr_time, "tcsr_sort")
        table = ffi.from_buffer(t, require_writable=False)  # (non-NULL even when empty)
        n_table, t_bytes, ttype = t.shape[0], t.itemsize, TIME_TYPES[dt]
        lo, hi = int(node_lo), int(node_hi)
        longest = int(np.diff(indptr[lo:hi + 1]).max()) if hi > lo else 0
        scratch, n_scratch = _out(np.empty(max(longest, 1), dtype=np.int64), "int64_t[]")
    _local_check(lib.dds_tcsr_sort(int(node_lo), int(node_hi), _i64(indptr), pn, pt, pe,
                                   rows, id_bytes, ttype, table, n_table, t_bytes,
                                   scratch, n_scratch))


def neighbour_times(nbr_time, what):
    """``(table, time dtype)`` of a neighbour-time table (``dds_tcsr.nbr_time``): a
    C-contiguous 1-d array of float32 or float64 (times of a float64 graph) or int32 or
    int64 (times of an int64 graph); anything else raises :class:`DDStoreValueError`."""
    t = np.asarray(nbr_time)
    if t.dtype not in _TABLE_DTYPES or t.ndim != 1 or not t.flags.c_contiguous:
        raise DDStoreValueError(f"{what}: nbr_time must be a C-contiguous 1-d float32, "
                                f"float64, int32 or int64 array, got {t.dtype} of shape "
                                f"{t.shape}")
    return _aligned(t), _TABLE_DTYPES[t.dtype]


NEIGHBOR_REPLACE = lib.DDS_NEIGHBOR_REPLACE
NEIGHBOR_LAST = lib.DDS_NEIGHBOR_LAST


class CSC(TCSR):
    """A CSC held like a T-CSR (a ``dds_tcsr`` with ``ts_var`` -1 when it has no times)
    for ``dds_neighbor_sample`` (see ``csrc/ddstore.h``); keeps the replicated ``indptr``
    and ``node_offsets`` alive for C."""

    def __init__(self, core, nbr_var, eid_var, ts_var, indptr, node_offsets,
                 nbr_time=None, time_dtype=np.float64, fetch_whole_max=0):
        """``nbr_time`` (node-level time without a time per entry, ``ts_var`` None): the
        time of every source node, by id (kept alive here): float64 or float32 for
        float64 times, int64 or int32 for int64 times (:func:`neighbour_times`), which
        then decides :attr:`time_dtype`; else ``time_dtype`` is the dtype of
        ``ts_var``'s times (float64 or int64), what :meth:`sample` compares.
        ``fetch_whole_max``: the longest list of another member whose times are read to
        cut it by time (longer ones are searched where they lie; 0: 65,536, and longer
        ones read too while they hold at most 1 MiB: ``dds_tcsr.fetch_whole_max``)."""
        table = dt = None
        if nbr_time is not None:
            table, dt = neighbour_times(nbr_time, "CSC")
        super().__init__(core, nbr_var, -1 if ts_var is None else ts_var, eid_var, indptr,
                         node_offsets, fetch_whole_max,
                         time_dtype=time_dtype if dt is None else dt)
        if table is not None:
            self._nbr_time = table
            self._c.nbr_time = ffi.from_buffer(table, require_writable=False)
            self._c.nbr_time_len = table.shape[0]
            self._c.nbr_time_bytes = table.itemsize

    def sample(self, nodes, node_ts, k, flags, seed, cap):
        """One hop: ``(row, nbr, eid)`` (compact, in node order).  ``nodes`` int64 and
        ``node_ts`` of :attr:`time_dtype` (or None), C-contiguous; ``cap`` bounds the
        output (the core refuses a sample that needs more; an output too large for
        memory is a :class:`DDStoreMemoryError`)."""
        pt = _times(node_ts, self.time_dtype, nodes.shape[0], "neighbour sample: node_ts")
        row, nbr, eid = self._outputs(cap)
        count = ffi.new("int64_t *")
        core = self._live_core()
        p = _typed
        self._sampled(core, lib.dds_neighbor_sample(
            core._handle[0], self._c, p(nodes), pt, nodes.shape[0], k,
            flags, seed, min(row.shape[0], int(cap)), p(row), p(nbr), p(eid), count), cap)
        m = count[0]
        return row[:m], nbr[:m], eid[:m]

    def sample_weighted(self, weight_var, nodes, node_ts, k, flags, seed, cap):
        """One hop drawn in proportion to the float32 or float64 weights of variable ``weight_var``
        (one per CSC row; ``dds_neighbor_sample_weighted``): ``(row, nbr, eid)`` as
        :meth:`sample`; ``flags`` only ``NEIGHBOR_REPLACE``."""
        pt = _times(node_ts, self.time_dtype, nodes.shape[0], "neighbour sample: node_ts")
        row, nbr, eid = self._outputs(cap)
        count = ffi.new("int64_t *")
        core = self._live_core()
        p = _typed
        self._sampled(core, lib.dds_neighbor_sample_weighted(
            core._handle[0], self._c, int(weight_var), p(nodes), pt,
            nodes.shape[0], k, flags, seed, min(row.shape[0], int(cap)), p(row), p(nbr),
            p(eid), count), cap)
        m = count[0]
        return row[:m], nbr[:m], eid[:m]

    def hop(self, relabel, nodes, pos, sub, node_ts, k, flags, seed, cap, weight_var=-1):
        """One hop sampled and relabelled in one C call (``dds_neighbor_hop``):
        ``(from, to, eid, new_nodes, new_subs)``: per drawn edge the local id ``pos[i]``
        of the frontier node that drew it and the position of the drawn neighbour in
        ``relabel``'s node list (a :class:`RelabelMap`), its edge id; the neighbours new
        to the list (``new_subs``: their subgraphs, ``sub[i]`` of the node that drew
        them, None unless disjoint).  Drawn by :meth:`sample`, or by
        :meth:`sample_weighted` when ``weight_var >= 0``."""
        pt = _times(node_ts, self.time_dtype, nodes.shape[0], "neighbour sample: node_ts")
        frm, to, eid, new, new_sub = self._outputs(cap, 5 if sub is not None else 4) + (
            [] if sub is not None else [None])
        count, n_new = ffi.new("int64_t *"), ffi.new("int64_t *")
        core = self._live_core()
        p = _typed
        self._sampled(core, lib.dds_neighbor_hop(
            core._handle[0], self._c, int(weight_var), p(nodes), p(pos), p(sub), pt,
            nodes.shape[0], k, flags, seed, relabel._m, int(cap), p(frm), p(to), p(eid),
            p(new), p(new_sub), count, n_new), cap)
        m, q = count[0], n_new[0]
        return frm[:m], to[:m], eid[:m], new[:q], (new_sub[:q] if sub is not None
                                                   else None)

    def induced(self, dst, src, num_src, chunk):
        """``(row, col, eid)`` of every stored entry of the lists of ``dst`` whose source
        is in ``src`` (``dds_induced_edges``): ``row`` / ``col`` the positions of the
        first occurrences in ``src`` / ``dst``, in destination order, each list in its
        stored order.  ``dst`` and ``src`` int64, C-contiguous (``src`` may be ``dst``);
        sources in ``[0, num_src)``; ``chunk``: the most entries of lists not readable
        by load fetched per batched read (a longer list alone)."""
        cap = self._taken_at_most(dst, -1)
        row, col, eid = self._outputs(cap)  # pages never written are never mapped
        count = ffi.new("int64_t *")
        core = self._live_core()
        p = _typed
        self._sampled(core, lib.dds_induced_edges(
            core._handle[0], self._c, p(dst), dst.shape[0], p(src), src.shape[0],
            int(num_src), int(chunk), cap, p(row), p(col), p(eid), count), cap)
        m = count[0]
        return row[:m], col[:m], eid[:m]


#: The relabelling's one rule (``csrc/relabel.c``, see ``dds_relabel_begin``): a key
#: space of at most this many keys (or 16 per key expected) is mapped densely.
RELABEL_DENSE_MAX = lib.DDS_RELABEL_DENSE_MAX


class RelabelMap:
    """A batch's node list of one node type and the map from its keys (node ids, or
    ``(node, subgraph)`` pairs when disjoint) to their first positions, held in C
    (``dds_relabel``): dense or hashed by the one rule of ``csrc/relabel.c``, kept
    between batches (:meth:`begin` clears only what the last batch set)."""

    def __init__(self):
        out = ffi.new("dds_relabel **")
        _local_check(lib.dds_relabel_open(out))
        self._m = ffi.gc(out[0], lib.dds_relabel_free)
        self.disjoint = False

    def begin(self, num_nodes, subgraphs=0, expected=0, dense_max=RELABEL_DENSE_MAX):
        """A new batch over nodes ``[0, num_nodes)`` (and subgraphs ``[0, subgraphs)``
        when ``subgraphs > 0``: disjoint keys)."""
        _local_check(lib.dds_relabel_begin(self._m, int(num_nodes), int(subgraphs),
                                           int(expected), int(dense_max)))
        self.disjoint = subgraphs > 0

    def reset(self):
        """The batch forgotten (count 0; the map cleared of its keys)."""
        lib.dds_relabel_reset(self._m)

    @property
    def count(self):
        return lib.dds_relabel_count(self._m)

    @property
    def dense(self):
        return bool(lib.dds_relabel_is_dense(self._m))

    @property
    def slots(self):
        """Dense entries or hash slots held."""
        return lib.dds_relabel_slots(self._m)

    def seed(self, nodes, subs=None):
        """Append ``nodes`` (int64, C-contiguous; ``subs`` their subgraphs when disjoint)
        as given, a repeat keeping its own position (the map names the first)."""
        _local_check(lib.dds_relabel_seed(self._m, _i64(nodes), _i64(subs),
                                          nodes.shape[0]))

    def add(self, nodes, subs=None):
        """``(pos, new_nodes, new_subs)``: the position of every key, and the keys new to
        the map (appended, in order of first occurrence; ``new_subs`` None unless
        disjoint)."""
        nodes = np.ascontiguousarray(nodes, dtype=np.int64)
        subs = None if subs is None else np.ascontiguousarray(subs, dtype=np.int64)
        n = nodes.shape[0]
        pos, new, new_sub = (np.empty(n, dtype=np.int64) for _ in range(3))
        n_new = ffi.new("int64_t *")
        _local_check(lib.dds_relabel_add(self._m, _i64(nodes), _i64(subs), n, n,
                                         _i64(pos), _i64(new),
                                         _i64(new_sub) if self.disjoint else ffi.NULL,
                                         n_new))
        m = n_new[0]
        return pos, new[:m], (new_sub[:m] if self.disjoint else None)


def apply_delta(keys, w, rm, add, add_w, chg, chg_w, bits):
    """One dynamic-graph step in C (``dds_apply_delta``): ``(new_keys, new_w, edge_index)``
    for the snapshot ``keys - rm + add`` with the weights of ``chg`` set to ``chg_w``.

    Keys are C-contiguous int64 arrays (``rm``/``add``/``chg`` may be None for none);
    weights float32 or None (``w`` None: unweighted).  ``edge_index`` is ``[2, E]`` int64
    (sources, then targets).  A delta that does not fit the snapshot raises
    :class:`DDStoreStateError` (the stored data is corrupt)."""
    none = np.zeros(0, dtype=np.int64)
    rm, add, chg = (none if a is None else a for a in (rm, add, chg))
    n, nr, na = keys.shape[0], rm.shape[0], add.shape[0]
    size = max(0, n - nr + na)  # the core refuses a delta removing more than there is
    new_keys = np.empty(size, dtype=np.int64)
    edge_index = np.empty((2, size), dtype=np.int64)
    weighted = w is not None
    for name, arr, length in (("w", w, n), ("add_w", add_w, na), ("chg_w", chg_w,
                                                                 chg.shape[0])):
        if weighted and (arr if arr is not None else none).shape[0] != length:
            raise DDStoreValueError(f"apply_delta: {name} must hold {length} weights, got "
                                    f"{None if arr is None else arr.shape[0]}")
    new_w = np.empty(size, dtype=np.float32) if weighted else None
    out_n = ffi.new("int64_t *")

    def ptr(arr, ctype):
        if arr is None or arr.size == 0:
            return ffi.NULL
        dtype = np.int64 if ctype == "int64_t[]" else np.float32
        return ffi.from_buffer(ctype, _aligned(np.ascontiguousarray(arr, dtype=dtype)))

    rc = lib.dds_apply_delta(
        ptr(keys, "int64_t[]"), ptr(w, "float[]"), n, ptr(rm, "int64_t[]"), nr,
        ptr(add, "int64_t[]"), ptr(add_w if weighted else None, "float[]"), na,
        ptr(chg if weighted else None, "int64_t[]"),
        ptr(chg_w if weighted else None, "float[]"),
        chg.shape[0] if weighted else 0, int(bits), size, ptr(new_keys, "int64_t[]"),
        ptr(new_w, "float[]"), ptr(edge_index[0], "int64_t[]"),
        ptr(edge_index[1], "int64_t[]"), out_n)
    if rc != lib.DDS_OK or out_n[0] != size:
        why = _last_error() if rc != lib.DDS_OK else f"{out_n[0]} edges, not {size}"
        raise DDStoreStateError(f"dynamic graph: a stored delta does not fit its snapshot "
                                f"({n} edges, -{nr} +{na}): {why}; the stored data is "
                                f"corrupt")
    return new_keys, new_w, edge_index


_ONE_I64 = np.zeros(1, dtype=np.int64)  # a valid pointer for an empty id array


def bidirectional(row, col, rev_row, rev_col, edge_id=None, rev_edge_id=None,
                  num_nodes=None):
    """PyG's ``to_bidirectional`` in C (``dds_bidirectional``): ``(row, col, edge_id)``
    of the pairs ``(row, col)`` and ``(rev_col, rev_row)`` sorted by ``(col, row)``, each
    distinct pair once, a pair with ids keeping the id of its last occurrence (the
    reversed ones come after the originals).  Inputs are int64 numpy arrays; ids given for
    both sides or for none (``edge_id`` None: the third output is None).  ``num_nodes``
    bounds every id (default: the largest + 1)."""
    row, col, rev_row, rev_col = (np.ascontiguousarray(a, dtype=np.int64)
                                  for a in (row, col, rev_row, rev_col))
    with_ids = edge_id is not None
    if with_ids != (rev_edge_id is not None):
        raise DDStoreValueError("bidirectional: edge ids must be given for both sides or "
                                "for neither")
    n, nr = row.shape[0], rev_row.shape[0]
    if num_nodes is None:
        num_nodes = 1 + max([-1] + [int(a.max()) for a in (row, col, rev_row, rev_col)
                                    if a.shape[0]])
    cap = n + nr
    out_row, out_col = np.empty(cap, np.int64), np.empty(cap, np.int64)
    out_eid = np.empty(cap, np.int64) if with_ids else None

    def ptr(arr):
        if arr is None:
            return ffi.NULL
        return ffi.from_buffer("int64_t[]", _aligned(arr) if arr.shape[0] else _ONE_I64)

    if with_ids:
        edge_id, rev_edge_id = (np.ascontiguousarray(a, dtype=np.int64)
                                for a in (edge_id, rev_edge_id))
    out_n = ffi.new("int64_t *")
    _local_check(lib.dds_bidirectional(
        ptr(row), ptr(col), ptr(edge_id), n, ptr(rev_row), ptr(rev_col), ptr(rev_edge_id),
        nr, int(num_nodes), cap, ptr(out_row), ptr(out_col), ptr(out_eid), out_n))
    m = out_n[0]
    return out_row[:m], out_col[:m], None if out_eid is None else out_eid[:m]


def rma_stats():
    """``{gets, bytes, flushes}``: this process's one-sided traffic so far
    (``dds_rma_stats``): MPI_Get calls, the bytes they asked for, and the round trips
    reads waited for (``flushes``: one per owner per read call, whatever its
    variables).  Shared-memory reads are loads and count nothing.  Take differences
    around what you measure."""
    out = [ffi.new("int64_t *") for _ in range(3)]
    _local_check(lib.dds_rma_stats(*out))
    return {"gets": out[0][0], "bytes": out[1][0], "flushes": out[2][0]}


def serve_stats():
    """What this process's message path did so far (``dds_serve_stats``): request
    messages ``sent`` and the bytes they ``asked`` for (a reader's side), requests
    ``served`` here and the ``bytes`` packed (an owner's side)."""
    out = ffi.new("int64_t[4]")
    _local_check(lib.dds_serve_stats(out, out + 1, out + 2, out + 3))
    return {"sent": out[0], "asked": out[1], "served": out[2], "bytes": out[3]}


def progress_stats():
    """``{polls, busy_s, running}`` of this process's progress agents
    (``dds_progress_stats``): polls made since the process started, seconds spent in
    them, agents running now."""
    out = [ffi.new("int64_t *") for _ in range(3)]
    _local_check(lib.dds_progress_stats(*out))
    return {"polls": out[0][0], "busy_s": out[1][0] / 1e9, "running": out[2][0]}


def fingerprint(buffer, seed=0):
    """XXH64 of the bytes of ``buffer`` (``dds_fingerprint``: a C-contiguous numpy array,
    ``bytes`` or any other contiguous buffer) with ``seed`` (an integer, taken modulo
    2**64), as a Python int in ``[0, 2**64)``; about one pass over the memory, the GIL
    released."""
    try:
        view = memoryview(buffer)
        if not view.c_contiguous:
            raise BufferError("not C-contiguous")
        data = ffi.from_buffer(view.cast("B") if view.nbytes else b"",
                               require_writable=False)
    except (TypeError, ValueError, BufferError) as exc:
        raise DDStoreValueError(f"fingerprint: {exc} (a C-contiguous buffer is needed)") \
            from None
    out = ffi.new("uint64_t *")
    _local_check(lib.dds_fingerprint(data if view.nbytes else ffi.NULL, view.nbytes,
                                     int(seed) & 0xFFFFFFFFFFFFFFFF, out))
    return int(out[0])


def mark_ids(bits, ids, nbits, mark=True):
    """``dds_mark_ids``: with ``mark``, set the bits of the int64 ``ids`` in the uint64
    bitmap ``bits`` (``nbits`` bits), stopping at the first id whose bit was already set;
    without, only test.  Returns that id's position in ``ids``, or None (every bit was
    clear).  An id outside ``[0, nbits)`` raises :class:`DDStoreIndexError`."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    if bits.dtype != np.uint64 or bits.shape[0] * 64 < nbits:
        raise DDStoreValueError(f"mark_ids: a uint64 bitmap of at least {nbits} bits is "
                                f"needed, got {bits.dtype} [{bits.shape[0]}]")
    first = ffi.new("int64_t *")
    _local_check(lib.dds_mark_ids(
        ffi.from_buffer("uint64_t[]", bits, require_writable=True) if bits.size else
        ffi.NULL, int(nbits), _typed(ids), ids.shape[0], 1 if mark else 0, first))
    return None if first[0] < 0 else int(first[0])


def copy_pieces(fn, dst, dst_bytes, dst_off, src, nbytes, kind, stream):
    """``dds_copy_pieces``: through ``fn`` (the address of a function with
    cudaMemcpyAsync's signature), copy ``nbytes[i]`` bytes from address ``src[i]`` to
    ``dst + dst_off[i]`` for every ``i`` (1-D integer arrays of one length; addresses as
    integers), ``kind`` and ``stream`` (an address, 0 the default stream) passed
    through; every piece is checked against ``dst_bytes`` before any is issued.  Returns
    the pieces issued; a piece out of range raises :class:`DDStoreIndexError`, a copy
    ``fn`` refuses or an argument of another type or range :class:`DDStoreValueError`
    (the pieces before a refused one issued).  The GIL is released."""
    def address(v, what):
        try:
            v = operator.index(v)
        except TypeError:
            raise DDStoreValueError(f"copy_pieces: {what}={v!r:.60} is not an integer "
                                    f"address") from None
        if not 0 <= v < 1 << 64:
            raise DDStoreValueError(f"copy_pieces: {what}={v}; allowed: [0, 2**64)")
        return v

    def ints(a, dtype, what):
        a = np.asarray(a)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise DDStoreValueError(f"copy_pieces: {what} must be a 1-D integer array, "
                                    f"got {a.dtype} of shape {a.shape}")
        if a.size and dtype == np.uint64 and a.dtype.kind == "i" and a.min() < 0:
            raise DDStoreValueError(f"copy_pieces: {what} holds a negative address")
        if a.size and dtype == np.int64 and a.dtype == np.uint64 and a.max() >= 1 << 63:
            raise DDStoreValueError(f"copy_pieces: {what} holds a value >= 2**63")
        return np.ascontiguousarray(a, dtype=dtype)

    fn, dst, stream = (address(v, w) for v, w in ((fn, "fn"), (dst, "dst"),
                                                    (stream, "stream")))
    dst_off = ints(dst_off, np.int64, "dst_off")
    src = ints(src, np.uint64, "src")
    nbytes = ints(nbytes, np.int64, "nbytes")
    dst_bytes = operator.index(dst_bytes) if isinstance(dst_bytes, (int, np.integer)) \
        else None
    if dst_bytes is None or not -(1 << 63) <= dst_bytes < 1 << 63:
        raise DDStoreValueError("copy_pieces: dst_bytes must be an int64")
    if not isinstance(kind, (int, np.integer)) or not -(1 << 31) <= kind < 1 << 31:
        raise DDStoreValueError(f"copy_pieces: kind={kind!r:.40} must be a C int")
    n = dst_off.shape[0]
    if src.shape[0] != n or nbytes.shape[0] != n:
        raise DDStoreValueError(f"copy_pieces: {n} offsets, {src.shape[0]} sources and "
                                f"{nbytes.shape[0]} sizes; one of each per piece")
    issued = ffi.new("int64_t *")
    _local_check(lib.dds_copy_pieces(
        fn, dst, int(dst_bytes), _i64(dst_off),
        ffi.from_buffer("uintptr_t[]", _aligned(src)) if n else ffi.NULL, _i64(nbytes), n,
        int(kind), stream, issued))
    return int(issued[0])
