"""A synthetic interaction stream with structure a temporal model can learn."""
import numbers

import numpy as np

from ..errors import DDStoreValueError
from .._checks import as_seed, is_int
from ..memory import check_fits


class Stream:
    """Arrays of a synthetic stream: ``src``, ``dst`` (int64), ``t`` (float64, sorted),
    ``edge_feat`` (float32 ``[E, edge_dim]``), ``split`` (int8: first 70 % of the time
    span train, next 15 % val, last 15 % test), ``num_nodes``, ``community`` (per node)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    @property
    def num_edges(self):
        """The number of interactions (``len(src)``)."""
        return len(self.src)


def synthetic_stream(num_nodes, num_edges, seed=0, communities=None, p_within=0.8,
                     p_repeat=0.3, edge_dim=8, alpha=1.0, partners=0):
    """A power-law interaction stream over ``num_nodes`` nodes (deterministic per seed).

    Structure: every node belongs to one of ``communities`` groups (default
    ``num_nodes // 64``, at least 2) and has an activity weight ``~ 1 / rank**alpha``
    (power-law degrees).  Each interaction picks its source by activity; with probability
    ``p_repeat`` the source repeats one of its own earlier interactions' destinations
    (a recurring pair), else with probability ``p_within`` the destination is drawn by
    activity from the source's own community, otherwise from all nodes.  Times are a
    Poisson process (sorted).  Edge features are the destination community's centroid
    plus noise.  A temporal model learns that a node links again to its past partners and
    to its community (both visible in its sampled temporal neighbourhood), so it beats a
    random ranking of negatives; a model without temporal neighbours cannot tell nodes
    apart.

    ``partners=k > 0`` makes the recurring pairs a node's own: every node gets ``k`` fixed
    partners, drawn once uniformly from all nodes, and a repeating edge (probability
    ``p_repeat``) goes to one of its source's partners, uniformly, from its first edge on.
    Partners are unrelated to communities and activity, so what tells a partner from a
    random node is only whom the source has met before: a model that remembers each
    node's history (TGN, JODIE, APAN) beats one that only looks at the structure of its
    recent neighbours.  With ``partners=0`` (the default) the stream is the one above,
    value for value (the partners come from a generator of their own).

    Arguments: ``seed`` an integer (modulo ``2**64``), ``edge_dim``, ``partners``
    integers >= 0, ``communities`` an
    integer >= 1 or None, ``p_within`` / ``p_repeat`` probabilities in [0, 1], ``alpha``
    a finite real; anything else is a :class:`~ddstore.DDStoreValueError` naming it.
    """
    for label, v, low in (("num_nodes", num_nodes, 2), ("num_edges", num_edges, 1),
                          ("partners", partners, 0), ("edge_dim", edge_dim, 0)):
        if not is_int(v) or v < low:
            raise DDStoreValueError(f"synthetic_stream: {label}={v!r} must be an integer "
                                    f">= {low}")
    if communities is not None and (not is_int(communities) or
                                    not 1 <= communities <= num_nodes):
        raise DDStoreValueError(f"synthetic_stream: communities={communities!r} must be an "
                                f"integer in [1, num_nodes={num_nodes}] or None "
                                f"(num_nodes // 64, at least 2)")
    for label, v, lo, hi in (("p_within", p_within, 0, 1), ("p_repeat", p_repeat, 0, 1),
                             ("alpha", alpha, -np.inf, np.inf)):
        if not isinstance(v, numbers.Real) or isinstance(v, (bool, np.bool_)) or \
                not np.isfinite(v) or not lo <= v <= hi:
            where = "a probability in [0, 1]" if hi == 1 else "a finite real number"
            raise DDStoreValueError(f"synthetic_stream: {label}={v!r} must be {where}")
    seed = as_seed(seed, "synthetic_stream: seed")
    n, e = int(num_nodes), int(num_edges)
    c = int(communities) if communities is not None else max(2, n // 64)
    # what the stream and its working arrays take at their peak (about): per edge a
    # dozen 8-byte values and its features (noise drawn in float64, then float32, plus
    # the centroids'), per node a few plus its partners
    per_edge, per_node = 96 + 16 * int(edge_dim), 48 + 8 * int(partners)
    check_fits(e * per_edge + n * per_node + c * (16 + 4 * int(edge_dim)),
               f"synthetic_stream(num_nodes={n}, num_edges={e}, edge_dim={edge_dim}, "
               f"partners={partners})",
               lambda avail: f"num_edges x (96 + 16 x edge_dim) + num_nodes x (48 + 8 "
                             f"x partners) bytes (about) within {avail} bytes")
    rng = np.random.default_rng(seed)
    community = rng.integers(0, c, n)
    activity = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** float(alpha)
    activity = activity[rng.permutation(n)]
    src = rng.choice(n, size=e, p=activity / activity.sum())
    # destinations within the source's community, by activity
    by_comm = np.argsort(community, kind="stable")
    cum = np.cumsum(activity[by_comm])
    comm_end = np.searchsorted(community[by_comm], np.arange(c), side="right")
    comm_start = np.concatenate([[0], comm_end[:-1]])
    lo = np.where(comm_start > 0, cum[np.maximum(comm_start - 1, 0)], 0.0)
    hi = cum[np.maximum(comm_end - 1, 0)]
    cs = community[src]
    r = lo[cs] + rng.random(e) * (hi[cs] - lo[cs])
    within = by_comm[np.minimum(np.searchsorted(cum, r, side="right"), n - 1)]
    anywhere = rng.choice(n, size=e, p=activity / activity.sum())
    dst = np.where(rng.random(e) < p_within, within, anywhere)
    rep = rng.random(e) < p_repeat
    if partners:  # recurring pairs: the source's own partners
        prng = np.random.default_rng([seed, 17])
        table = prng.integers(0, n, (n, int(partners)))
        pick = prng.integers(0, int(partners), e)
        dst = np.where(rep, table[src, pick], dst)
    else:
        dst = _repeat_earlier(src, dst, rep, rng)
    t = np.cumsum(rng.exponential(1.0, e))
    centroids = rng.standard_normal((c, edge_dim)).astype(np.float32)
    edge_feat = centroids[community[dst]] + 0.5 * rng.standard_normal(
        (e, edge_dim)).astype(np.float32)
    split = np.zeros(e, dtype=np.int8)
    span = t[-1] - t[0]
    split[t > t[0] + 0.70 * span] = 1
    split[t > t[0] + 0.85 * span] = 2
    return Stream(src=src.astype(np.int64), dst=dst.astype(np.int64), t=t,
                  edge_feat=edge_feat, split=split, num_nodes=n, community=community)


def _repeat_earlier(src, dst, rep, rng):
    """Where ``rep``, an edge repeats the destination of an earlier edge of its source
    (uniformly among them; an edge without an earlier one keeps its destination)."""
    e = src.shape[0]
    order = np.argsort(src, kind="stable")  # edges of each source, in time order
    s_sorted = src[order]
    first = np.r_[True, s_sorted[1:] != s_sorted[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(e), 0))
    pos = np.arange(e) - start  # index among the source's edges
    back = (rng.random(e) * pos).astype(np.int64)  # an earlier one, uniformly
    take = rep[order] & (pos > 0)
    d_sorted = dst[order]
    # sequential so chains of repeats resolve to a real earlier destination
    idx = np.flatnonzero(take)
    for j in idx.tolist():
        d_sorted[j] = d_sorted[start[j] + back[j]]
    out = np.empty_like(dst)
    out[order] = d_sorted
    return out
