"""Link-prediction metrics (numpy only): average precision, ROC AUC, and their collective
form over the ranks of a data-parallel evaluation, beside a random scorer's.

Labels are 0 (a negative) or 1 (a true edge) and scores finite real numbers, one per
label; anything else is a :class:`~ddstore.DDStoreValueError` naming what is wrong
(a NaN score has no place in a ranking, and a label of 2 or -1 is neither class).
Tied scores count as one threshold in both metrics (scikit-learn's
``average_precision_score`` and ``roc_auc_score``, which TGL's evaluation uses): the
result does not depend on the order of the input."""
import numpy as np

from .._checks import as_seed, is_int, tensor_values
from .._collective import collective, holds_interrupts
from ..errors import DDStoreValueError

__all__ = ["average_precision", "link_prediction_metrics", "roc_auc"]


def _checked(labels, scores, what):
    """``(labels as float64 0/1, scores as float64)``, both 1-D and of equal length, or a
    :class:`DDStoreValueError` naming ``what`` and the first bad value."""
    out = []
    for label, x in (("labels", labels), ("scores", scores)):
        try:
            arr = np.asarray(tensor_values(x, f"{what}: {label}"), dtype=np.float64)
        except (TypeError, ValueError) as exc:  # not numbers: worded for the caller
            raise DDStoreValueError(f"{what}: {label} must be real numbers "
                                    f"({type(exc).__name__}: {exc})") from None
        if arr.ndim != 1:
            raise DDStoreValueError(f"{what}: {label} must be 1-D (one per edge scored), "
                                    f"got shape {arr.shape}")
        out.append(arr)
    y, s = out
    if y.shape != s.shape:
        raise DDStoreValueError(f"{what}: {s.shape[0]} scores and {y.shape[0]} labels; "
                                f"their lengths must be equal")
    bad = (y != 0) & (y != 1)
    if bad.any():
        i = int(np.argmax(bad))
        raise DDStoreValueError(f"{what}: labels[{i}] = {float(y[i])!r}; labels must be 0 "
                                f"(negative) or 1 (positive)")
    bad = ~np.isfinite(s)
    if bad.any():
        i = int(np.argmax(bad))
        raise DDStoreValueError(f"{what}: scores[{i}] = {float(s[i])!r}; scores must be finite "
                                f"({int(bad.sum())} of {len(s)} are NaN or infinite)")
    return y, s


def _average_precision(y, s):
    """AP of checked arrays: sum over the distinct scores, high to low, of (recall gain)
    x (precision at that threshold): ties form one threshold."""
    npos = int(y.sum())
    if not npos:
        return float("nan")
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[s[1:] != s[:-1], True]  # the last entry of each run of tied scores
    tp = np.cumsum(y)[last]
    seen = np.flatnonzero(last) + 1.0
    gain = np.diff(np.r_[0.0, tp])
    return float(np.sum(gain * (tp / seen)) / npos)


def _roc_auc(y, s):
    pos = y == 1
    npos = int(pos.sum())
    nneg = len(s) - npos
    if npos == 0 or nneg == 0:
        return float("nan")
    order = np.argsort(s, kind="stable")
    ss = s[order]
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])  # first of each run of ties
    ends = np.r_[starts[1:], len(ss)]
    ranks = np.empty(len(ss))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)  # 1-based, averaged
    return float((ranks[pos].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def average_precision(labels, scores):
    """Average precision of ``scores`` (finite reals) for ``labels`` (0/1), as
    scikit-learn's ``average_precision_score``: the sum over the distinct scores, from
    high to low, of the recall gained at that threshold times the precision there
    (tied scores are one threshold: the input's order does not matter); NaN without
    positives."""
    return _average_precision(*_checked(labels, scores, "average_precision"))


def roc_auc(labels, scores):
    """ROC-AUC: the probability that a random positive scores above a random negative,
    ties counting 1/2 (Mann-Whitney U from average ranks); NaN unless both classes are
    present.  Labels 0/1, finite scores."""
    return _roc_auc(*_checked(labels, scores, "roc_auc"))


@holds_interrupts  # (a gather follows the round)
def link_prediction_metrics(comm, scores, labels, root=0, seed=0):
    """Collective over ``comm`` (an mpi4py communicator): gather every rank's ``scores``
    and ``labels`` (1 for a true edge, 0 for a negative; equal lengths, any length,
    empty included; finite scores) to ``root`` (a rank of ``comm``) in rank order
    (anything else on any rank: :class:`DDStoreValueError` on every rank; whatever this
    rank's checks raise is agreed by the call's one step, ``"link_prediction_metrics"``).

    Returns, on ``root``, ``(ap, auc, random_ap, random_auc, positives)``: average
    precision and ROC AUC of the scores, the same of a random scorer (uniform scores from
    ``numpy.random.default_rng(seed)``) over the same labels, and the number of
    positives; ``None`` on the other ranks.  The random scores are drawn for the pairs in
    their gathered order, so they repeat for a rank count, not across rank counts."""
    root_ok = is_int(root)
    with collective(comm, "link_prediction_metrics",
                    same={"root": int(root) if root_ok else repr(root)}):
        size = comm.Get_size()
        if not root_ok or not 0 <= root < size:
            raise DDStoreValueError(f"link_prediction_metrics: root={root!r} must be a rank "
                                    f"of comm, an integer in [0, {size})")
        y, s = _checked(labels, scores, "link_prediction_metrics")
        seed = as_seed(seed, "link_prediction_metrics: seed")
    parts = comm.gather((s, y), root=int(root))
    if comm.Get_rank() != root:
        return None
    s = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    rnd = np.random.default_rng(seed).random(len(s))
    return (_average_precision(y, s), _roc_auc(y, s), _average_precision(y, rnd),
            _roc_auc(y, rnd), int((y == 1).sum()))
