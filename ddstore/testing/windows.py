"""The materialised sliding-window pipeline that index-batching replaces.

Used as the ground truth in tests and as variant (a) of the benchmark.  It builds every
window explicitly: memory ``2 * (T - 2h + 1) * h * nodes * features`` elements
(PGT-I eq. 1), against ``T * nodes * features + (T - 2h + 1)`` for index-batching (eq. 2).
"""
import numpy as np

__all__ = ["materialize_windows", "brute_force_stats", "algorithm1", "materialized_elements",
           "index_batching_elements"]


def materialized_elements(num_steps, nodes, features, horizon):
    """PGT-I eq. (1): elements held by the materialised x and y windows."""
    return 2 * (num_steps - (2 * horizon - 1)) * horizon * nodes * features


def index_batching_elements(num_steps, nodes, features, horizon):
    """PGT-I eq. (2): the series once plus one index per window start."""
    return num_steps * nodes * features + (num_steps - (2 * horizon - 1))


def materialize_windows(series, horizon, starts=None, dtype=None):
    """Every window, copied: ``(x, y)`` each ``[len(starts), h, nodes, features]``.

    ``series`` is ``[T, nodes]`` or ``[T, nodes, features]``; ``starts`` defaults to all
    valid starts ``0 .. T - 2h``.  Preallocated and filled window by window.
    """
    arr = np.asarray(series)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    h = int(horizon)
    if starts is None:
        starts = np.arange(arr.shape[0] - 2 * h + 1)
    starts = np.asarray(starts, dtype=np.int64)
    dt = arr.dtype if dtype is None else np.dtype(dtype)
    x = np.empty((len(starts), h) + arr.shape[1:], dtype=dt)
    y = np.empty_like(x)
    for i, s in enumerate(starts):
        x[i] = arr[s:s + h]
        y[i] = arr[s + h:s + 2 * h]
    return x, y


def brute_force_stats(x_train, per_node=False, block=256):
    """Mean and population std over materialised training input windows (float64).

    ``x_train`` ``[W, h, nodes, f]``; per feature (over windows, steps and nodes) or per
    node and feature.  Two passes in blocks of windows, so no float64 copy of all windows.
    """
    W, h, n, f = x_train.shape
    axes = (0, 1) if per_node else (0, 1, 2)
    count = W * h * (1 if per_node else n)
    total = 0.0
    for i in range(0, W, block):
        total = total + x_train[i:i + block].astype(np.float64).sum(axis=axes)
    mean = total / count
    sq = 0.0
    for i in range(0, W, block):
        d = x_train[i:i + block].astype(np.float64) - mean
        sq = sq + (d * d).sum(axis=axes)
    std = np.sqrt(sq / count)
    std = np.where(std > 0, std, 1.0)
    return mean, std


def standardize_windows(windows, mean, std, dtype=None, block=256):
    """``(windows - mean) / std`` computed in float64 and cast back, in place if possible."""
    dt = windows.dtype if dtype is None else np.dtype(dtype)
    out = windows if dt == windows.dtype else np.empty(windows.shape, dtype=dt)
    for i in range(0, windows.shape[0], block):
        out[i:i + block] = ((windows[i:i + block].astype(np.float64) - mean) / std).astype(dt)
    return out


def algorithm1(series, horizon, train_ratio=0.7, per_node=False):
    """PGT-I's Algorithm 1: build every ``x``/``y`` window, stack them, take mean and std
    over the first ``round(train_ratio * W)`` ``x`` windows, standardise both in place.

    Returns ``(x, y, mean, std)``.
    """
    x, y = materialize_windows(series, horizon)
    n_train = int(round(x.shape[0] * train_ratio))
    mean, std = brute_force_stats(x[:n_train], per_node=per_node)
    standardize_windows(x, mean, std)
    standardize_windows(y, mean, std)
    return x, y, mean, std
