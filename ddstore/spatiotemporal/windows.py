"""Window arithmetic: valid starts, splits, the as-if-materialised statistics, layouts.

Pure numpy; no store, no torch.  A window with start ``s`` over horizon ``h`` is
``x = series[s : s+h]`` (input) and ``y = series[s+h : s+2h]`` (target); it covers time
steps ``[s, s + 2h)``.  The valid starts are ``s in [0, T - 2h + 1)``.
"""
import math
import numbers

import numpy as np

from ..errors import DDStoreValueError
from .._checks import as_bool, as_int, integer_scalar, is_int

__all__ = ["check_horizon", "num_windows", "split_ranges", "window_weights",
           "Moments", "chunk_moments", "series_layout"]

SPLIT_NAMES = ("train", "val", "test")


def check_horizon(horizon, num_steps):
    """Validate ``horizon`` against a series of ``num_steps`` steps; returns it as int
    (a Python or numpy integer, or a 0-d integer tensor; never a float or a bool)."""
    horizon = integer_scalar(horizon)
    if num_steps < 2:  # no horizon fits: say so rather than an empty range
        raise DDStoreValueError(f"a series of T = {num_steps} step(s) is too short for any "
                                f"window: a window of horizon h needs 2*h <= T steps "
                                f"(inputs and targets), so T >= 2 (horizon={horizon!r})")
    if not is_int(horizon):
        raise DDStoreValueError(f"horizon must be an integer in [1, {num_steps // 2}] "
                                f"(2*horizon <= T = {num_steps}), got {horizon!r}")
    horizon = int(horizon)
    if horizon <= 0 or 2 * horizon > num_steps:
        raise DDStoreValueError(f"horizon={horizon} out of range: allowed 1 <= horizon <= "
                                f"{num_steps // 2} (2*horizon <= T = {num_steps} steps)")
    return horizon


def num_windows(num_steps, horizon):
    """Number of valid window starts, ``T - 2h + 1``: ``num_steps`` an integer (``T``),
    ``horizon`` one in ``[1, T // 2]`` (:func:`check_horizon`), else a
    :class:`DDStoreValueError` naming them."""
    num_steps = as_int(integer_scalar(num_steps), "num_windows: num_steps", 0)
    return num_steps - 2 * check_horizon(horizon, num_steps) + 1


def check_ratios(split):
    """``split`` as three floats (train, val, test) in [0, 1] that sum to 1, train's > 0;
    an ordered sequence (a list, tuple or 1-D array), not a set or dict, whose order is
    not the splits'."""
    ordered = isinstance(split, (list, tuple)) or (
        isinstance(split, np.ndarray) and split.ndim == 1)
    if not ordered or len(split) != 3:
        raise DDStoreValueError(f"split must be three ratios (train, val, test) that sum to "
                                f"1, as a list, tuple or 1-D array (in that order), got "
                                f"{split!r}")
    ratios = []
    for name, r in zip(SPLIT_NAMES, split):
        if isinstance(r, bool) or not isinstance(r, numbers.Real) or not math.isfinite(r):
            raise DDStoreValueError(f"split ratio {name}={r!r} must be a finite number in "
                                    f"[0, 1]")
        if not 0 <= r <= 1:
            raise DDStoreValueError(f"split ratio {name}={r} out of range [0, 1]")
        ratios.append(float(r))
    if abs(sum(ratios) - 1.0) > 1e-6:
        raise DDStoreValueError(f"split ratios {tuple(split)} sum to {sum(ratios):.6g}; "
                                f"they must sum to 1")
    if ratios[0] == 0:
        raise DDStoreValueError(f"split ratio train={ratios[0]} must be > 0 (the "
                                f"statistics come from the training windows)")
    return ratios


def _start_counts(S, ratios):
    """``overlap=True``'s window counts ``(train, val, test)`` of ``S`` window starts
    (an int, or an int64 array of counts: each cut alike; numpy's ``rint`` rounds halves
    to even, as Python's ``round`` does, on the same float64 products)."""
    S = np.asarray(S, dtype=np.int64)
    n_test = np.rint(S * ratios[2]).astype(np.int64)
    # val's ratio 0: what rounding leaves goes to train (its ratio is > 0)
    n_train = S - n_test if ratios[1] == 0 else np.rint(S * ratios[0]).astype(np.int64)
    n_val = S - n_train - n_test
    n_test = np.where(n_val < 0, n_test + n_val, n_test)  # rounding both up
    return n_train, np.maximum(n_val, 0), n_test


def _windowed(S, ratios):
    """Where ``overlap=True``'s cut of ``S`` starts (an int64 array of counts) gives
    every split of a positive ratio a window."""
    ok = np.ones(np.shape(S), bool)
    for n, r in zip(_start_counts(S, ratios), ratios):
        if r > 0:
            ok &= n > 0
    return ok


def _start_cut(S, ratios):
    """``overlap=True``'s cut of ``S`` window starts: ``{split: (a, b)}``."""
    n_train, n_val, n_test = (int(n) for n in _start_counts(S, ratios))
    return {"train": (0, n_train), "val": (n_train, n_train + n_val),
            "test": (S - n_test, S)}


_SEARCHED = 1 << 16  # window counts an error message may try, at most


def _enough_steps(S, h, ratios):
    """What ``overlap=True``'s message says the ratios need: ``"T >= x"``, the series
    length from which every split of a positive ratio gets a window, whatever longer
    (rounding makes some counts above the first that works fail again; from ``2 / r``
    windows on, a split of ratio ``r`` gets one however the others round), found by a
    search of at most :data:`_SEARCHED` counts; beyond that, the ``2 / r`` bound."""
    smallest = min(q for q in ratios if q > 0)
    top = 2 / smallest
    if top > S + _SEARCHED:
        bound = f"T >= {top + 2 * h - 1:.3g}" if top < 1e300 else "T beyond 1e300"
        return f"{bound} (enough, for a smallest ratio of {smallest:g})"
    counts = np.arange(S, math.ceil(top) + 2, dtype=np.int64)  # (every one at once)
    return f"T >= {int(counts[~_windowed(counts, ratios)][-1]) + 1 + 2 * h - 1}"


def _segments(num_steps, ratios):
    """``overlap=False``'s cut of the *time steps*: ``{split: (lo, hi)}``."""
    cut1 = int(round(num_steps * ratios[0]))
    cut2 = int(round(num_steps * (ratios[0] + ratios[1])))
    if ratios[2] == 0:
        cut2 = num_steps
    if ratios[1] == 0:
        cut1 = cut2 if ratios[2] > 0 else num_steps
    return {"train": (0, cut1), "val": (cut1, cut2), "test": (cut2, num_steps)}


def largest_horizon(num_steps, split=(0.7, 0.1, 0.2), overlap=False):
    """The largest horizon at which every split of a positive ratio gets a complete
    window (what :func:`split_ranges` accepts), 0 when none does.  Without ``overlap``
    every smaller horizon is accepted too; with ``overlap=True`` the rounding of the
    window counts may leave a split of some smaller horizon without a window (at odd
    ``T`` for the default ratios, ``largest - 1``): check a horizon with
    :func:`split_ranges`.  ``num_steps``: an integer >= 0; ``overlap``: True or False.

    With ``overlap=True`` the work is bounded whatever ``T``: the largest horizon has
    the fewest window starts ``S = T - 2h + 1`` that give every split a window, and from
    ``2 / r`` starts on (``r``: the smallest positive ratio) every count does, so at
    most :data:`_SEARCHED` counts below that are tried (beyond them, for a smallest
    ratio under about ``3e-5``, the horizon of the first count past ``2 / r``: one that
    fits, not always the largest)."""
    ratios = check_ratios(split)
    T = as_int(integer_scalar(num_steps), "largest_horizon: num_steps", 0)
    if not as_bool(overlap, "largest_horizon: overlap"):
        return max(0, min((b - a) // 2 for (a, b), r in
                          zip(_segments(T, ratios).values(), ratios) if r > 0))
    # S = T + 1 - 2h has T + 1's parity, 1 <= h <= T // 2: S from s0 to T - 1, by 2
    s0, last = 2 - (T + 1) % 2, T - 1
    if last < s0:
        return 0
    top = 2 / min(q for q in ratios if q > 0)  # every count from here on has windows
    end = min(last, s0 + 2 * _SEARCHED, int(min(top, last)) + 2)
    S = np.arange(s0, end + 1, 2, dtype=np.int64)
    ok = np.flatnonzero(_windowed(S, ratios))
    if ok.size:
        return (T + 1 - int(S[ok[0]])) // 2
    if top > last:  # (searched up to T - 1, or past the bound: none fits)
        return 0
    first = math.ceil(top)
    first += (first - s0) % 2  # T + 1's parity
    return (T + 1 - first) // 2 if first <= last else 0


def split_ranges(num_steps, horizon, split=(0.7, 0.1, 0.2), overlap=False):
    """Window-start ranges ``{"train": (a, b), "val": ..., "test": ...}`` in time order.

    ``overlap=False`` (the default, no leakage): the *time steps* are cut at
    ``round(T * train)`` and ``round(T * (train + val))`` and each split keeps the windows
    that lie entirely inside its own segment, so no window of one split touches a step
    of another (``2h - 1`` starts are lost at each cut).
    ``overlap=True`` (PGT / DCRNN convention): the ``T - 2h + 1`` *starts* are cut,
    ``n_train = round(S * train)``, ``n_test = round(S * test)``, val gets the rest
    (train does when val's ratio is 0); the last training windows' targets overlap the
    first validation inputs.
    A split with ratio 0 is empty; a split with a positive ratio but no complete window
    is an error, as are a horizon out of ``[1, T // 2]`` and an ``overlap`` that is not
    True or False (what :class:`WindowDataset` refuses).
    """
    ratios = check_ratios(split)
    num_steps = as_int(integer_scalar(num_steps), "split_ranges: num_steps", 0)
    overlap = as_bool(overlap, "split_ranges: overlap")
    try:
        h = check_horizon(horizon, num_steps)
    except DDStoreValueError as exc:  # (the series' range; the splits' may be smaller)
        most = largest_horizon(num_steps, ratios, overlap)
        raise DDStoreValueError(
            f"{exc}; " + (f"horizon <= {most} fits every split of these ratios" if most
                          else "no horizon fits every split of these ratios") +
            (" (with overlap=True, check a smaller one: rounding leaves gaps)"
             if overlap and most else "")) from None
    S = num_windows(num_steps, h)
    if overlap:
        bounds = _start_cut(S, ratios)
        for name, r in zip(SPLIT_NAMES, ratios):
            a, b = bounds[name]
            if r > 0 and b <= a:
                raise DDStoreValueError(
                    f"split {name!r} (ratio {r}) gets no window: {S} windows in all "
                    f"(T={num_steps}, horizon={h}); these ratios need "
                    f"{_enough_steps(S, h, ratios)} at this horizon (or other ratios, or "
                    f"ratio 0 for {name!r})")
        return bounds
    segments = _segments(num_steps, ratios)
    bounds = {}
    most = largest_horizon(num_steps, ratios)
    for name, r in zip(SPLIT_NAMES, ratios):
        lo, hi = segments[name]
        n = max(0, hi - lo - 2 * h + 1)
        if r > 0 and n == 0:
            fits = (f"horizon <= {most} fits every split of these ratios" if most else
                    "no horizon fits every split of these ratios")
            raise DDStoreValueError(
                f"split {name!r} (ratio {r}) gets time steps [{lo}, {hi}) = {hi - lo} "
                f"steps, fewer than 2*horizon = {2 * h}, so no complete window ({fits}); "
                f"use a smaller horizon, other ratios, or overlap=True (PGT convention)")
        bounds[name] = (lo, lo + n) if n else (lo, lo)
    return bounds


def window_weights(start, stop, train, horizon):
    """How many training input windows ``x`` cover each step of ``[start, stop)``.

    ``train = (a, b)`` are the training window starts; step ``t`` lies in the inputs of
    starts ``s`` with ``s <= t < s + h``, so its weight is
    ``|[max(a, t - h + 1), min(t, b - 1)]|``.  float64 ``[stop - start]``.
    """
    a, b = train
    t = np.arange(start, stop, dtype=np.int64)
    lo = np.maximum(a, t - horizon + 1)
    hi = np.minimum(t, b - 1)
    return np.maximum(hi - lo + 1, 0).astype(np.float64)


class Moments:
    """Weighted count, mean and sum of squared deviations (M2), mergeable (Chan et al.).

    ``per_node=False``: statistics per feature, shape ``[f]``; ``True``: ``[nodes, f]``.
    """

    __slots__ = ("count", "mean", "m2")

    def __init__(self, count, mean, m2):
        self.count, self.mean, self.m2 = count, mean, m2

    @classmethod
    def empty(cls, num_nodes, num_features, per_node):
        shape = (num_nodes, num_features) if per_node else (num_features,)
        return cls(0.0, np.zeros(shape), np.zeros(shape))

    def merge(self, other):
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        n = self.count + other.count
        with np.errstate(over="ignore", invalid="ignore"):  # inf: refused by mean_std
            delta = other.mean - self.mean
            mean = self.mean + delta * (other.count / n)
            m2 = self.m2 + other.m2 + delta * delta * (self.count * other.count / n)
        return Moments(n, mean, m2)

    def mean_std(self):
        """(mean, population std); a zero std becomes 1 so that scaling is defined."""
        if self.count == 0:
            raise DDStoreValueError("no training window to compute statistics from")
        with np.errstate(over="ignore", invalid="ignore"):
            std = np.sqrt(np.maximum(self.m2 / self.count, 0.0))
        if not (np.isfinite(self.mean).all() and np.isfinite(std).all()):
            # values near float64's limit: their squares overflow, the std is inf and
            # every standardised value would come out 0
            raise DDStoreValueError(
                f"standardize: the training windows' mean or standard deviation overflows "
                f"float64 (mean {np.max(np.abs(self.mean)):.3g}, std "
                f"{np.max(std):.3g}): the series' values are too large to standardise; "
                f"allowed: values whose squares fit float64 (|x| < 1e154), or "
                f"standardize=False")
        std = np.where(std > 0, std, 1.0)
        return self.mean.copy(), std

    def as_tuple(self):
        return float(self.count), self.mean, self.m2


def chunk_moments(values, weights, per_node):
    """Moments of one block ``values`` ``[k, nodes, f]`` (float64) with step ``weights``."""
    k, n, f = values.shape
    total = float(weights.sum())
    with np.errstate(over="ignore", invalid="ignore"):  # inf: refused by mean_std
        return _chunk_moments(values, weights, per_node, k, n, f, total)


def _chunk_moments(values, weights, per_node, k, n, f, total):
    if total == 0:
        return Moments.empty(n, f, per_node)
    flat = values.reshape(k, n * f)
    if per_node:
        mean = (weights @ flat / total).reshape(n, f)
        dev = values - mean
        m2 = (weights @ (dev * dev).reshape(k, n * f)).reshape(n, f)
        return Moments(total, mean, m2)
    count = total * n
    mean = (weights @ flat).reshape(n, f).sum(axis=0) / count
    dev = values - mean
    m2 = (weights @ (dev * dev).reshape(k, n * f)).reshape(n, f).sum(axis=0)
    return Moments(count, mean, m2)


def series_layout(num_steps, horizon, width, halo, split_bounds=None):
    """How the time steps are placed on the ``width`` members of a group.

    The time axis is cut into *pieces*, each owned by one member; a member owns the
    windows that start in its pieces and stores them in order.  Returns a dict of int64
    arrays, per piece (sorted by ``lo``): ``lo``, ``hi`` (owned steps ``[lo, hi)``),
    ``member``, ``stored`` (rows it stores from step ``lo``) and ``offset`` (its first row
    in the store's global row space); per member: ``member_stored`` and
    ``member_offset`` (``width + 1`` entries: where each member's rows begin).

    ``halo=True`` (balanced placement): the time axis is first cut into one segment per
    split (at the first window start of each split in ``split_bounds``, the
    ``{"train": (a, b), ...}`` of window starts), and each segment's window starts are
    divided evenly over the members (:func:`ddstore.partition`; the last member also owns
    the steps after the segment's last start, where no window starts).  Every split is
    thus spread over every member, and a rank's share of each split is local.  Each piece
    stores its own steps plus the next ``2h - 1`` (capped at ``T``), so every window (of a
    split, or one that straddles two splits) lies wholly in its owner's memory.
    ``halo=False``: one piece per member, the steps striped contiguously
    (:func:`ddstore.partition` of ``T``), exactly ``T / width`` rows per member; a window
    that straddles two members is read from both.
    """
    from .._checks import partition
    T, h = int(num_steps), int(horizon)
    pieces = []  # (lo, hi, member, rows stored)
    if halo and width > 1:
        segments = sorted((int(a), int(b)) for a, b in (split_bounds or {}).values()
                          if b > a) or [(0, num_windows(T, h))]
        if segments[0][0] > 0:  # steps before the first split's windows
            segments.insert(0, (0, 0))
        edges = [a for a, _ in segments] + [T]
        for k, (a, b) in enumerate(segments):
            for g in range(width):
                s_lo, s_hi = partition(b - a, width, g)  # this member's window starts
                p_lo, p_hi = a + s_lo, (a + s_hi if g < width - 1 else edges[k + 1])
                if p_hi > p_lo:  # every window starting in it lies in its rows
                    pieces.append((p_lo, p_hi, g, min(p_hi + 2 * h - 1, T) - p_lo))
    else:
        for g in range(width):
            p_lo, p_hi = partition(T, width, g)
            if p_hi > p_lo or width == 1:
                pieces.append((p_lo, p_hi, g, p_hi - p_lo))
    lo, hi, member, stored = (np.array([p[i] for p in pieces], dtype=np.int64)
                              for i in range(4))
    member_stored = np.bincount(member, weights=stored, minlength=width).astype(np.int64)
    member_offset = np.zeros(width + 1, dtype=np.int64)
    np.cumsum(member_stored, out=member_offset[1:])
    offset = np.empty(len(pieces), dtype=np.int64)
    for g in range(width):
        mine = np.flatnonzero(member == g)
        offset[mine] = member_offset[g] + np.concatenate(
            ([0], np.cumsum(stored[mine])[:-1])).astype(np.int64)
    return {"lo": lo, "hi": hi, "member": member, "stored": stored.astype(np.int64),
            "offset": offset, "member_stored": member_stored,
            "member_offset": member_offset}
