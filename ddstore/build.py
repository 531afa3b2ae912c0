"""The bounded build of striped rows and of (T-)CSR adjacency lists, shared by the layers
that store graphs: :class:`~ddstore.TemporalGraph`'s builders (the T-CSR) and the PyG
stores (the ``GraphStore``'s CSC, the ``FeatureStore``'s range-wise put).  It sits
below both, beside :mod:`ddstore.placement` (where rows live, and the one row scatter
every round uses: :func:`~ddstore.placement.alltoallv_rows`).

Every variable of the graph is created once in the store at its final size
(:meth:`DDStore.init`) and filled in place; outside the store, the build holds one chunk
of edges at a time (``chunk_edges`` rows, a keyword of the builders; default
:func:`default_chunk_edges`):

1. **edge table** (:func:`fill_rows`): each rank's edges go, one chunk per round, to the
   members that own their edge ids, in every group; the rows are received straight into
   the members' chunks of ``edges``, ``edge_t``, ``edge_split`` (and features, labels);
2. **counting pass** (:func:`degree_indptr`): the members of group 0 count every node's
   T-CSR entries from their chunk of the edge table (C), one ``Allreduce`` of the counts
   gives ``indptr`` and the members' node ranges (about equal entries each);
3. **T-CSR** (:func:`fill_tcsr`): inside each group, each member packs one chunk of its
   edge table rows per round into entries ``(node, neighbour, time, edge id)`` for the
   members owning the nodes (C), and each member places what it receives at a per-node
   cursor in its chunks of ``nbr`` / ``ts`` / ``eid`` (C);
4. every node's list is sorted in place by (time, edge id) (C), node features are
   sent like step 1, and one ``sync`` publishes the graph.

The PyG ``GraphStore`` builds its CSC with steps 3 and 4 (:func:`fill_tcsr` with
``every_group``): rows ``(destination, source)`` straight from each rank's own edges,
no reverse entries, and without a time the lists sorted by edge id alone.  The PyG
``FeatureStore``'s range-wise put is step 1 alone (:func:`fill_rows`, rows striped by
``member_offsets``).

Each round is a collective step (:meth:`DDStore.collective`, ``op=None``: a later step of
the builder's call): its local part (parsing a piece, packing a chunk, allocating a
buffer, placing what the last round received) may raise anything on any rank, the step's
one round (an ``allgather``) agrees on it, and every rank raises the same error; the
builder's transaction (:meth:`DDStore.transaction`) then removes what was created, on
every rank.  The data exchanges (``Alltoallv``, ``Allreduce``) run after a round, never
inside a local part.
"""
import os

import numpy as np

from .errors import DDStoreMemoryError, DDStoreValueError
from ._checks import is_int, native_order
from . import _core
from .settings import prefault_mode
from .placement import alltoallv_rows

_ENTRY = 32  # bytes of one packed T-CSR entry (node, nbr, ts, eid)
CHUNK_BYTES = 64 << 20  # default bound of one round's buffers per rank
# node and edge ids are stored as int32 when the counts they index are all <= this, else
# int64 (read at every build: a test lowers it to force the int64 layout on a small graph)
ID32_LIMIT = 2 ** 31 - 1


def id_dtype(*counts, limit=None):
    """The dtype of stored ids indexing ``counts`` items (ids ``< count``): int32 when
    every count is ``<= limit`` (default :data:`ID32_LIMIT`), else int64.  The samplers
    (C) read either width and give int64; readers widen what they return."""
    limit = ID32_LIMIT if limit is None else limit
    return np.dtype(np.int32 if max(int(c) for c in counts) <= limit else np.int64)


def default_chunk_edges(num_edges, size, row_bytes=25, add_reverse=True):
    """Edges per rank per round by default: about 1/64 of a rank's share (so that a
    round's buffers stay a small fraction of what the rank stores, at every size), at
    least 4096, and at most what keeps one round's buffers near ``CHUNK_BYTES``."""
    per_edge = row_bytes + 2 * _ENTRY * (2 if add_reverse else 1) * 2
    cap = max(4096, CHUNK_BYTES // per_edge)
    want = -(-int(num_edges) // (64 * max(1, int(size))))
    return int(min(cap, max(4096, want)))


def check_chunk_edges(chunk_edges, name):
    """``chunk_edges`` as a Python int (a numpy integer too), or None; a
    :class:`DDStoreValueError` unless it is an integer >= 1 or None (a local check: call
    it in a step's local part)."""
    if chunk_edges is None or (is_int(chunk_edges) and chunk_edges >= 1):
        return None if chunk_edges is None else int(chunk_edges)
    raise DDStoreValueError(f"graph {name!r}: chunk_edges={chunk_edges!r} must be an "
                            f"integer >= 1 (edges per rank per round) or None")


def create(store, name, n_local, row_shape, dtype):
    """Collective: ``store.init`` one variable; returns this rank's chunk of it
    (``store.local_view``).  Call it inside the build's transaction."""
    store.init(name, int(n_local), row_shape, dtype)
    return store.local_view(name)


def _intersect(a, b, c, d):
    lo, hi = max(a, c), min(b, d)
    return lo, max(lo, hi)


def fill_rows(store, owner_off, first_row, pieces, views):
    """Collective: rows to their owners, one piece per rank per round.

    ``owner_off``: the members' first global rows (``[width + 1]``, the same in every
    group); ``first_row``: the global row of this rank's first row; ``pieces``: an
    iterator over this rank's rows in order, each item a list with one array per view
    (same number of rows, at most one chunk); ``views``: this rank's local chunk of each
    variable (``store.local_view``).  Each round is a step whose local part takes the
    next piece: whatever ``pieces`` raises (a parse error, an ``OSError``, a
    ``MemoryError``) is agreed on, and every rank raises it.  Returns the number of rows
    this rank sent."""
    comm = store.comm
    size = comm.Get_size()
    width = store.group_size
    ngroups = size // width
    g = store.group_rank
    my_lo, my_hi = int(owner_off[g]), int(owner_off[g + 1])
    it = iter(pieces)
    row, done = int(first_row), False
    while True:
        with store.collective(None) as step:
            piece = None
            if not done:
                piece = next(it, None)
                done = piece is None
            n = int(piece[0].shape[0]) if piece is not None else 0
            if piece is not None:  # (a piece in the other byte order: its values)
                piece = [native_order(np.asarray(p)) for p in piece]
                bad = [i for i, p in enumerate(piece) if p.shape[0] != n or
                       p.shape[1:] != views[i].shape[1:] or p.dtype != views[i].dtype]
                if bad:  # the layer's own pieces are wrong: say so, on every rank
                    raise DDStoreValueError(
                        f"fill_rows: piece {bad[0]} has shape {piece[bad[0]].shape} "
                        f"{piece[bad[0]].dtype}, the variable {views[bad[0]].shape[1:]} "
                        f"{views[bad[0]].dtype}")
            info = step.agree((row, n, done))
        if all(x[2] and x[1] == 0 for x in info):
            return row - int(first_row)
        send_c = np.zeros(size, dtype=np.int64)
        send_d = np.zeros(size, dtype=np.int64)
        for m in range(width):
            lo, hi = _intersect(row, row + n, int(owner_off[m]), int(owner_off[m + 1]))
            for k in range(ngroups):
                send_c[k * width + m] = hi - lo
                send_d[k * width + m] = lo - row
        recv_c = np.zeros(size, dtype=np.int64)
        recv_d = np.zeros(size, dtype=np.int64)
        for r, (r_row, r_n, _) in enumerate(info):
            lo, hi = _intersect(r_row, r_row + r_n, my_lo, my_hi)
            recv_c[r] = hi - lo
            recv_d[r] = lo - my_lo
        got = recv_c > 0
        base = int(recv_d[got].min()) if got.any() else 0
        span = int((recv_d + recv_c)[got].max()) - base if got.any() else 0
        recv_d -= base  # displacements from the first row received (int-sized)
        recv_d[~got] = 0
        for i, v in enumerate(views):
            send = np.ascontiguousarray(piece[i]) if n else \
                np.zeros((0,) + v.shape[1:], v.dtype)
            alltoallv_rows(comm, send, send_c.tolist(), send_d.tolist(),
                           v[base:base + span], recv_c.tolist(), recv_d.tolist())
        row += n
        del piece


def degree_indptr(store, edges_view, num_nodes, add_reverse):
    """Collective: ``indptr`` (int64 ``[num_nodes + 1]``: where each node's T-CSR list
    starts) from every node's number of entries, counted by group 0's members from their
    chunk of the edge table (int64 or int32 ids, widened one block at a time) and summed
    over the communicator.  One step (allocating and counting are its local part: a
    failure, memory for the counts included, is agreed), then one ``Allreduce``."""
    from mpi4py import MPI
    with store.collective(None):
        try:
            deg = np.zeros(int(num_nodes), dtype=np.int64)
            indptr = np.zeros(int(num_nodes) + 1, dtype=np.int64)
        except MemoryError as exc:  # the message says what did not fit
            raise DDStoreMemoryError(
                f"the degrees of num_nodes={num_nodes} nodes ({16 * int(num_nodes)} "
                f"bytes) cannot be allocated: MemoryError: {exc}") from exc
        if store.comm.Get_rank() < store.group_size:  # group 0 holds one full replica
            step = max(1, CHUNK_BYTES // 16)
            for a in range(0, edges_view.shape[0], step):
                _core.tcsr_count(np.ascontiguousarray(edges_view[a:a + step],
                                                      dtype=np.int64), add_reverse, deg)
    store.comm.Allreduce(MPI.IN_PLACE, deg, op=MPI.SUM)
    np.cumsum(deg, out=indptr[1:])
    return indptr


def fill_tcsr(store, n_local, rows, first_eid, add_reverse, indptr, node_off, tcsr_views,
              chunk, every_group=False, nbr_time=None):
    """Collective: fill this member's T-CSR chunk (``tcsr_views`` = nbr, ts, eid; ts None:
    no times, lists sorted by edge id alone) from ``n_local`` rows of edges on this rank,
    ``chunk`` rows per rank per round, then sort every list by (time, edge id).
    ``nbr_time`` (ts None): every neighbour's time by id (float32 or float64); the lists
    are then sorted by (their neighbours' times, edge id), and no time per entry is kept.

    ``rows(a, b)`` returns rows ``[a, b)`` as ``(edges [b - a, 2] int64 or int32, t
    float64 or None)``; row ``i`` is edge id ``first_eid + i`` and its entries are keyed
    by column 0 (and by column 1 too with ``add_reverse``).  ``every_group`` False: the
    rows are this member's chunk of its group's edge table (every group holds the same
    edges), sent within the group; True: the rows are this rank's own (one copy over the
    communicator), sent to the owning member of every group (the PyG ``GraphStore``'s
    CSC: rows ``(destination, source)``).

    Steps (each agrees on whatever its local part raises, ``rows`` included): one that
    allocates the buffers and agrees on the number of rounds; per round, one that places
    what the previous round received and packs this round's rows, and one that allocates
    the receive buffer before the ``Alltoallv``; a last one that places the last round's
    entries, checks them against the degrees and sorts every list."""
    comm = store.comm
    size = comm.Get_size()
    width = store.group_size
    g = store.group_rank
    grp0 = (comm.Get_rank() // width) * width
    peers = range(size) if every_group else range(grp0, grp0 + width)
    node_lo, node_hi = int(node_off[g]), int(node_off[g + 1])
    nbr, ts, eid = tcsr_views
    n_local = int(n_local)
    per = 2 if add_reverse else 1
    with store.collective(None) as step:
        fill = np.zeros(node_hi - node_lo, dtype=np.int64)
        out = np.empty((per * min(chunk, max(n_local, 1)), 4), dtype=np.int64)
        # the same number of rounds on every rank of the communicator
        n_rows = step.agree(n_local)
    rounds = -(-max(n_rows) // chunk) if max(n_rows) else 0
    recv = None

    def place():  # what the last round received, into this member's lists
        if recv is not None:
            _core.tcsr_place(recv, node_lo, node_hi, indptr, fill, nbr, ts, eid)

    for k in range(rounds):
        a, b = min(k * chunk, n_local), min((k + 1) * chunk, n_local)
        counts = np.zeros(width, dtype=np.int64)
        with store.collective(None) as step:
            place()
            recv = None
            e, t = rows(a, b)
            e = np.ascontiguousarray(e, dtype=np.int64)  # one chunk, widened if int32
            _core.tcsr_pack(e, t, first_eid + a, add_reverse, node_off, out, counts)
            del e, t
            info = step.agree(counts.tolist())
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
        send_c = np.zeros(size, dtype=np.int64)
        send_d = np.zeros(size, dtype=np.int64)
        recv_c = np.zeros(size, dtype=np.int64)
        for first in (range(0, size, width) if every_group else (grp0,)):
            send_c[first:first + width] = counts
            send_d[first:first + width] = displs
        for r in peers:
            recv_c[r] = info[r][g]
        recv_d = np.concatenate([[0], np.cumsum(recv_c)[:-1]])
        with store.collective(None):
            recv = np.empty((int(recv_c.sum()), 4), dtype=np.int64)
        alltoallv_rows(comm, out, send_c.tolist(), send_d.tolist(), recv,
                       recv_c.tolist(), recv_d.tolist())
    del out
    with store.collective(None):
        place()
        recv = None
        if not np.array_equal(fill, np.diff(indptr[node_lo:node_hi + 1])):
            raise DDStoreValueError("T-CSR build: the entries received do not match the "
                                    "counted degrees (edge table changed?)")
        _core.tcsr_sort(node_lo, node_hi, indptr, nbr, ts, eid, nbr_time)


def prefault_built(store, names):
    """Local, at the end of a graph build: :meth:`DDStore.prefault` of the variables a
    sampler reads (``names``), so that sampling's first pass pays no page fault per
    first touch of a node-local peer's chunk, as :func:`prefault_mode` says (in the
    calling thread, in a background thread, or not at all).  Returns what
    ``store.prefault`` returned, or None when off."""
    mode = prefault_mode(strict=False)  # (the graph is made: nothing to refuse now)
    if mode == "off":
        return None
    return store.prefault(*names, background=mode == "background")
