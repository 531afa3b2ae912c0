"""Where rows live in the striped layout, and the collective that moves rows there.

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


def exchange(comm, width, dest, arrays):
    """Collective: send item ``i`` of every array to group member ``dest[i]`` of **every**
    group (each group holds one full replica).  Returns the arrays each rank receives,
    concatenated in source-rank order (within a source, in its original order)."""
    from mpi4py import MPI
    size = comm.Get_size()
    ngroups = size // width
    dest = np.asarray(dest, dtype=np.int64)
    order = np.argsort(dest, kind="stable")
    counts = np.bincount(dest, minlength=width).astype(np.int64)
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    send_counts = np.tile(counts, ngroups)
    send_displs = np.tile(displs, ngroups)
    recv_counts = np.array(comm.alltoall(send_counts.tolist()), dtype=np.int64)
    recv_displs = np.concatenate([[0], np.cumsum(recv_counts)[:-1]]).astype(np.int64)
    nrecv = int(recv_counts.sum())
    out = []
    for a in arrays:
        a = np.ascontiguousarray(a[order])
        row_bytes = a.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
        recv = np.empty((nrecv,) + a.shape[1:], dtype=a.dtype)
        if row_bytes:
            # counts in rows of a contiguous datatype: up to 2**31 - 1 rows per peer
            row_type = MPI.BYTE.Create_contiguous(row_bytes).Commit()
            try:
                sb = a.reshape(-1).view(np.uint8)
                rb = recv.reshape(-1).view(np.uint8)
                comm.Alltoallv([sb, (send_counts.tolist(), send_displs.tolist()), row_type],
                               [rb, (recv_counts.tolist(), recv_displs.tolist()), row_type])
            finally:
                row_type.Free()
        out.append(recv)
    return out
