"""Brute-force references for tests: the T-CSR, the sampler and node memory written the
obvious way (Python loops over every edge and update), with none of the code of the real
implementation.  Times are compared as Python numbers: integer times (int64 arrays) as
exact Python ints, float times as floats."""
import numpy as np

from .._checks import partition

_M64 = (1 << 64) - 1


def _splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _times(t):
    """Times as an int64 array when they are integers, else float64."""
    t = np.asarray(t)
    return t.astype(np.int64 if t.dtype.kind in "iu" else np.float64)


def reference_lists(src, dst, t, num_nodes, add_reverse=False):
    """Every node's list ``[(time, eid, nbr), ...]`` sorted by time then edge id (times
    Python ints for integer ``t``, else floats)."""
    lists = [[] for _ in range(num_nodes)]
    for e, (s, d, tt) in enumerate(zip(np.asarray(src).tolist(), np.asarray(dst).tolist(),
                                       _times(t).tolist())):
        lists[s].append((tt, e, d))
        if add_reverse:
            lists[d].append((tt, e, s))
    return [sorted(lst, key=lambda x: (x[0], x[1])) for lst in lists]


def reference_tcsr(src, dst, t, num_nodes, add_reverse, width):
    """The whole T-CSR as the first (all-at-once) build made it, in numpy:
    ``(indptr, node_offsets, nbr, ts, eid)`` for the global edges (edge id = position):
    entries sorted by (node, time, edge id), members' node ranges balanced by entries."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    t = _times(t)
    eid = np.arange(src.shape[0], dtype=np.int64)
    node = np.concatenate([src, dst]) if add_reverse else src
    nbr = np.concatenate([dst, src]) if add_reverse else dst
    ets = np.concatenate([t, t]) if add_reverse else t
    eids = np.concatenate([eid, eid]) if add_reverse else eid
    order = np.lexsort((eids, ets, node))
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(node, minlength=num_nodes), out=indptr[1:])
    total = int(indptr[-1])
    if total == 0:
        offs = [partition(num_nodes, width, g)[0] for g in range(width)] + [num_nodes]
    else:
        offs = [0] + [min(int(np.searchsorted(indptr, total * g / width, side="left")),
                          num_nodes) for g in range(1, width)] + [num_nodes]
    return indptr, np.array(offs, dtype=np.int64), nbr[order], ets[order], eids[order]


def reference_layer(lists, roots, ts, k, strategy, seed=0, epoch=0, layer=0):
    """One layer: list of (root position, nbr, eid, edge time)."""
    out = []
    base = _splitmix64(_splitmix64(_splitmix64(seed) ^ epoch) ^ layer)
    for i, (v, tr) in enumerate(zip(np.asarray(roots).tolist(), np.asarray(ts).tolist())):
        eligible = [x for x in lists[v] if x[0] < tr]
        if len(eligible) <= k:
            chosen = eligible
        elif strategy == "recent":
            chosen = eligible[len(eligible) - k:]
        else:
            key = _splitmix64(base ^ _splitmix64(i))
            chosen = [eligible[(_splitmix64((key + (q + 1) * 0x9E3779B97F4A7C15) & _M64) *
                                len(eligible)) >> 64] for q in range(k)]
        out.extend((i, nb, e, tt) for tt, e, nb in chosen)
    return out


def reference_sample(lists, roots, ts, fanouts, strategy, seed=0, epoch=0,
                     prop_time=False):
    """All layers: a list of dicts with nodes, ts, row, eid, edge_ts (numpy arrays; times
    int64 for integer ``ts``, else float64, as the lists' times must be)."""
    roots = np.asarray(roots, dtype=np.int64)
    ts = _times(ts)
    blocks = []
    for layer, k in enumerate(fanouts):
        got = reference_layer(lists, roots, ts, k, strategy, seed, epoch, layer)
        row = np.array([g[0] for g in got], dtype=np.int64)
        nbr = np.array([g[1] for g in got], dtype=np.int64)
        eid = np.array([g[2] for g in got], dtype=np.int64)
        ets = np.array([g[3] for g in got], dtype=ts.dtype)
        nts = ts[row] if prop_time else ets
        blocks.append(dict(nodes=np.concatenate([roots, nbr]), ts=np.concatenate([ts, nts]),
                           row=row, eid=eid, edge_ts=ets))
        roots, ts = blocks[-1]["nodes"], blocks[-1]["ts"]
    return blocks


class ReferenceNodeMemory:
    """Node memory and mailboxes the obvious way: Python lists, every update applied one
    by one in ``(ts, rank, position)`` order (memory: each replaces the last; mails:
    appended, the ``mailbox_size`` latest kept).  Times are ``ts_dtype`` (int64: exact
    Python ints)."""

    def __init__(self, num_nodes, memory_dim, mail_dim, mailbox_size=1, dtype=np.float32,
                 ts_dtype=np.float64):
        self.n, self.md, self.ad, self.S = num_nodes, memory_dim, mail_dim, mailbox_size
        self.dtype, self.ts_dtype = np.dtype(dtype), np.dtype(ts_dtype)
        self._time = int if self.ts_dtype.kind == "i" else float
        self.reset()

    def reset(self):
        self.memory = [np.zeros(self.md, self.dtype) for _ in range(self.n)]
        self.memory_ts = [self._time(0)] * self.n
        self.mails = [[] for _ in range(self.n)]  # [(ts, row)], arrival order

    def copy(self):
        other = ReferenceNodeMemory(self.n, self.md, self.ad, self.S, self.dtype,
                                    self.ts_dtype)
        other.memory = [m.copy() for m in self.memory]
        other.memory_ts = list(self.memory_ts)
        other.mails = [list(x) for x in self.mails]
        return other

    def commit(self, writes, posts):
        """``writes`` / ``posts``: lists of ``(rank, position, node, ts, row)``."""
        for rank, pos, node, ts, row in sorted(writes, key=lambda u: (u[3], u[0], u[1])):
            self.memory[node] = np.array(row, dtype=self.dtype)
            self.memory_ts[node] = self._time(ts)
        for rank, pos, node, ts, row in sorted(posts, key=lambda u: (u[3], u[0], u[1])):
            self.mails[node].append((self._time(ts), np.array(row, dtype=self.dtype)))
            del self.mails[node][:-self.S]

    def read(self, nodes):
        """(memory, memory_ts, mail, mail_ts) arrays; unfilled slots first, zeros."""
        nodes = list(nodes)
        mem = np.array([self.memory[v] for v in nodes], dtype=self.dtype).reshape(
            len(nodes), self.md)
        mts = np.array([self.memory_ts[v] for v in nodes], dtype=self.ts_dtype)
        mail = np.zeros((len(nodes), self.S, self.ad), self.dtype)
        mail_ts = np.zeros((len(nodes), self.S), self.ts_dtype)
        for i, v in enumerate(nodes):
            got = self.mails[v]
            for j, (t, row) in enumerate(got):
                mail[i, self.S - len(got) + j] = row
                mail_ts[i, self.S - len(got) + j] = t
        return mem, mts, mail, mail_ts
