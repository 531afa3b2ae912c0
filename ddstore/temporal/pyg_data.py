"""PyG's ``TemporalData`` to and from a :class:`TemporalGraph`, and PyG's chronological
split (``TemporalData.train_val_test_split``) computed with PyG's own arithmetic, on one
process or over ranks that each hold a time-sorted share of the edges.

PyG (``torch_geometric/data/temporal.py``) splits by::

    val_time, test_time = np.quantile(t.numpy(), [1 - val_ratio - test_ratio, 1 - test_ratio])
    val_idx = int((t <= val_time).sum()); test_idx = int((t <= test_time).sum())
    train, val, test = data[:val_idx], data[val_idx:test_idx], data[test_idx:]

(positions, not times: it assumes the events sorted by time; for an integer ``t`` torch
compares in float32, and so do we, by making the same torch call).  Here edge ``i`` gets
0 (train) if ``i < val_idx``, 1 (val) if ``i < test_idx``, else 2 (test).
"""
import math

import numpy as np

from .._checks import host_tensor
from .._times import time_share
from .._collective import collective
from ..errors import DDStoreValueError

__all__ = ["chronological_split", "chronological_split_share", "check_ratios"]



def check_ratios(val_ratio, test_ratio):
    """Raise :class:`DDStoreValueError` for split ratios PyG's split cannot use."""
    for label, r in (("val_ratio", val_ratio), ("test_ratio", test_ratio)):
        if isinstance(r, bool) or not isinstance(r, (int, float, np.integer, np.floating)) \
                or not math.isfinite(r) or not 0 <= r <= 1:
            raise DDStoreValueError(f"{label}={r!r} must be a number in [0, 1]")
    if val_ratio + test_ratio > 1:
        raise DDStoreValueError(f"val_ratio + test_ratio = {val_ratio + test_ratio} must "
                                f"be <= 1")


def _positions(lo, hi, val_idx, test_idx):
    """The split (int8: 0 train, 1 val, 2 test) of the events ``[lo, hi)``."""
    pos = np.arange(lo, hi, dtype=np.int64)
    return ((pos >= val_idx).astype(np.int8) + (pos >= test_idx).astype(np.int8))


def chronological_split(t, val_ratio=0.15, test_ratio=0.15):
    """PyG's ``train_val_test_split`` of events with times ``t`` (a torch tensor, all
    events), as one int8 per event: 0 train, 1 val, 2 test."""
    import torch
    t = torch.as_tensor(t)
    if t.dtype == torch.bfloat16:  # (numpy has no bfloat16; float32 holds it exactly)
        t = t.float()
    val_time, test_time = np.quantile(t.cpu().numpy(),
                                      [1. - val_ratio - test_ratio, 1. - test_ratio])
    val_idx = int((t <= val_time).sum())
    test_idx = int((t <= test_time).sum())
    return _positions(0, t.shape[0], val_idx, test_idx)


def _lerp_quantile(value_at, n, q):
    """``np.quantile(x, q)`` (method 'linear') of a sorted ``x`` of length ``n``, from
    ``value_at(i)`` (numpy scalars): numpy's own steps (``_quantile``, ``_lerp``)."""
    virtual = (n - 1) * np.float64(q)
    if virtual >= n - 1:
        return np.float64(value_at(n - 1))
    prev = np.floor(virtual)
    gamma = virtual - prev
    a, b = value_at(int(prev)), value_at(int(prev) + 1)
    diff = b - a
    if gamma >= 0.5:
        return np.float64(b - diff * (1 - gamma))
    return np.float64(a + diff * gamma)


def chronological_split_share(comm, t, t_dtype, val_ratio=0.15, test_ratio=0.15):
    """Collective: :func:`chronological_split` of the events of every rank's share of
    ``t`` concatenated in rank order, which must be sorted (JODIE files are): this rank's
    part of the split.  ``t_dtype``: the dtype PyG holds ``t`` in (``int64`` for
    JODIEDataset), which decides the arithmetic.  Three steps over ``comm`` (later steps
    of the caller's collective call: whatever a rank's part raises is agreed): the
    shares' lengths, the times at the quantiles' positions, the events up to each
    threshold."""
    import torch
    t_dtype = np.dtype(t_dtype)
    with collective(comm, None) as step:
        counts = step.agree(len(t))
    rank = comm.Get_rank()
    n = sum(counts)
    off = sum(counts[:rank])
    qs = [1. - val_ratio - test_ratio, 1. - test_ratio]
    with collective(comm, None) as step:
        need = set()
        for q in qs:
            virtual = (n - 1) * np.float64(q)
            if virtual >= n - 1:
                need.add(n - 1)
            else:
                need.update((int(np.floor(virtual)), int(np.floor(virtual)) + 1))
        mine = {p: t[p - off] for p in need if off <= p < off + len(t)}
        local = torch.from_numpy(np.ascontiguousarray(t).astype(t_dtype))
        values = {}
        for d in step.agree(mine):
            values.update(d)
    with collective(comm, None) as step:
        below = [int((local <= _lerp_quantile(lambda i: t_dtype.type(values[i]), n, q))
                     .sum()) for q in qs]
        idx = np.sum(step.agree(below), axis=0).tolist()
    return _positions(off, off + len(t), *idx)


def temporal_data_arrays(data, name):
    """The arrays dict of a TemporalData: ``src, dst, t`` (required), ``msg``, ``y``
    (optional) as numpy arrays, checked; raises :class:`DDStoreValueError` naming the
    graph and the field."""
    import torch
    out = {}
    for key in ("src", "dst", "t", "msg", "y"):
        try:
            x = getattr(data, key, None)
        except Exception:  # PyG's storage raises AttributeError subclasses or KeyError
            x = None
        if x is None:
            if key in ("src", "dst", "t"):
                raise DDStoreValueError(f"graph {name!r}: the TemporalData has no {key!r} "
                                        f"(from_pyg needs src, dst and t; msg and y are "
                                        f"optional)")
            continue
        if not isinstance(x, torch.Tensor):
            raise DDStoreValueError(f"graph {name!r}: data.{key} is a "
                                    f"{type(x).__name__}, not a torch tensor")
        out[key] = host_tensor(x, f"graph {name!r}: data.{key}")
    n = out["src"].shape[0] if out["src"].ndim else -1
    if n == 0:
        raise DDStoreValueError(f"graph {name!r}: the TemporalData has no events")
    for key, x in out.items():
        if x.ndim == 0 or x.shape[0] != n or (key in ("src", "dst", "t") and x.ndim != 1):
            raise DDStoreValueError(f"graph {name!r}: data.{key} has shape "
                                    f"{tuple(x.shape)}; src, dst and t must be 1-D and "
                                    f"every field must have one row per event (data.src "
                                    f"has {n})")
    t = out["t"]
    if t.dtype == torch.bool or t.is_complex():
        raise DDStoreValueError(f"graph {name!r}: data.t has dtype {t.dtype}; "
                                f"timestamps must be integers or floats")
    if not t.is_floating_point():  # integers are kept as int64: within it (uint64)
        time_share(t.numpy(), f"graph {name!r}: data.t")
    arrs = {k: (v.numpy() if v.dtype != torch.bfloat16 else v.float().numpy())
            for k, v in out.items()}
    return arrs
