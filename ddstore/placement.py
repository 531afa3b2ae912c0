"""Where rows live in the striped layout, and the collective that moves rows there
(:func:`alltoallv_rows`, the one row scatter of the bounded build, :mod:`ddstore.build`,
and of the node memory's commit).

Every group of ``width`` consecutive ranks holds one replica; member ``g`` of a group
holds a contiguous range of rows (``member_offsets``: ``partition(total, width, g)``; or,
for adjacency lists, ``balanced_offsets``: node ranges with about equal entries).  The
temporal graph, the node memory and the PyG stores place their rows with these.
"""
import numpy as np

from ._checks import partition


def member_offsets(total, width):
    return np.array([partition(total, width, g)[0] for g in range(width)] + [total],
                    dtype=np.int64)


def balanced_offsets(indptr, width):
    """Node ranges of the members: contiguous, with about equal T-CSR entries each
    (power-law degrees make equal node counts very uneven)."""
    total = int(indptr[-1])
    n = indptr.shape[0] - 1
    if total == 0:
        return member_offsets(n, width)
    cuts = [int(np.searchsorted(indptr, total * g / width, side="left"))
            for g in range(1, width)]
    return np.array([0] + [min(c, n) for c in cuts] + [n], dtype=np.int64)


def alltoallv_rows(comm, send, send_counts, send_displs, recv, recv_counts, recv_displs):
    """Collective: the one row scatter of the layers (``MPI_Alltoallv``).  ``send`` and
    ``recv`` are C-contiguous arrays of the same row size (bytes of ``a[0]``);
    ``send_counts[r]`` rows starting at row ``send_displs[r]`` of ``send`` go to rank
    ``r``, and what rank ``r`` sends lands at row ``recv_displs[r]`` of ``recv``
    (``recv_counts[r]`` rows).  Counts and displacements are in **rows** of a contiguous
    datatype, so up to ``2**31 - 1`` rows per peer whatever the row size.  Rows of zero
    bytes move nothing (no communication).  Allocation is the caller's (every caller
    allocates ``recv`` in a step's local part, so that a failed allocation is raised on
    every rank before anyone enters this call)."""
    row_bytes = send.itemsize * int(np.prod(send.shape[1:], dtype=np.int64))
    if not row_bytes:
        return
    from mpi4py import MPI

    def raw(a):
        return a.reshape(-1).view(np.uint8) if a.size else np.zeros(0, np.uint8)
    row_type = MPI.BYTE.Create_contiguous(int(row_bytes)).Commit()
    try:
        comm.Alltoallv([raw(send), (list(send_counts), list(send_displs)), row_type],
                       [raw(recv), (list(recv_counts), list(recv_displs)), row_type])
    finally:
        row_type.Free()
