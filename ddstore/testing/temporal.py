"""Brute-force references for tests: the T-CSR and the sampler written the obvious way
(Python loops over every edge), with none of the code of the real implementation."""
import numpy as np

_M64 = (1 << 64) - 1


def _splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def reference_lists(src, dst, t, num_nodes, add_reverse=False):
    """Every node's list ``[(time, eid, nbr), ...]`` sorted by time then edge id."""
    lists = [[] for _ in range(num_nodes)]
    for e, (s, d, tt) in enumerate(zip(np.asarray(src).tolist(), np.asarray(dst).tolist(),
                                       np.asarray(t, dtype=np.float64).tolist())):
        lists[s].append((tt, e, d))
        if add_reverse:
            lists[d].append((tt, e, s))
    return [sorted(lst, key=lambda x: (x[0], x[1])) for lst in lists]


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
    """All layers: a list of dicts with nodes, ts, row, eid, edge_ts (numpy arrays)."""
    roots = np.asarray(roots, dtype=np.int64)
    ts = np.asarray(ts, dtype=np.float64)
    blocks = []
    for layer, k in enumerate(fanouts):
        got = reference_layer(lists, roots, ts, k, strategy, seed, epoch, layer)
        row = np.array([g[0] for g in got], dtype=np.int64)
        nbr = np.array([g[1] for g in got], dtype=np.int64)
        eid = np.array([g[2] for g in got], dtype=np.int64)
        ets = np.array([g[3] for g in got], dtype=np.float64)
        nts = ts[row] if prop_time else ets
        blocks.append(dict(nodes=np.concatenate([roots, nbr]), ts=np.concatenate([ts, nts]),
                           row=row, eid=eid, edge_ts=ets))
        roots, ts = blocks[-1]["nodes"], blocks[-1]["ts"]
    return blocks
