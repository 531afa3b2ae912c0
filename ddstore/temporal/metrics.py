"""Link-prediction metrics (numpy only): average precision, ROC AUC, and their collective
form over the ranks of a data-parallel evaluation, beside a random scorer's."""
import numpy as np

from .._collective import collective
from ..errors import DDStoreValueError

__all__ = ["average_precision", "link_prediction_metrics", "roc_auc"]


def average_precision(labels, scores):
    """Average precision: the mean, over the positives, of the precision of the ranking
    (scores high to low, ties in input order) down to each positive; NaN without
    positives."""
    scores = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-scores, kind="stable")
    y = np.asarray(labels)[order]
    hits = np.cumsum(y)
    prec = hits / np.arange(1, len(y) + 1)
    return float(prec[y == 1].mean()) if y.sum() else float("nan")


def roc_auc(labels, scores):
    """ROC-AUC: the probability that a random positive scores above a random negative,
    ties counting 1/2 (Mann-Whitney U from average ranks); NaN unless both classes are
    present."""
    scores = np.asarray(scores, dtype=np.float64)
    pos = np.asarray(labels) == 1
    npos = int(pos.sum())
    nneg = len(scores) - npos
    if npos == 0 or nneg == 0:
        return float("nan")
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])  # first of each run of ties
    ends = np.r_[starts[1:], len(s)]
    ranks = np.empty(len(s))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)  # 1-based, averaged
    return float((ranks[pos].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def link_prediction_metrics(comm, scores, labels, root=0, seed=0):
    """Collective over ``comm`` (an mpi4py communicator): gather every rank's ``scores``
    and ``labels`` (1 for a true edge, 0 for a negative; equal lengths, any length,
    empty included) to ``root`` in rank order (scores and labels of different
    lengths on any rank: :class:`DDStoreValueError` on every rank; whatever this rank's
    checks raise is agreed by the call's one step, ``"link_prediction_metrics"``).

    Returns, on ``root``, ``(ap, auc, random_ap, random_auc, positives)``: average
    precision and ROC AUC of the scores, the same of a random scorer (uniform scores from
    ``numpy.random.default_rng(seed)``) over the same labels, and the number of
    positives; ``None`` on the other ranks."""
    with collective(comm, "link_prediction_metrics"):  # every rank raises, or none
        try:
            local = (np.asarray(scores, dtype=np.float64).reshape(-1),
                     np.asarray(labels, dtype=np.float64).reshape(-1))
        except (TypeError, ValueError) as exc:  # not numbers: worded for the caller
            raise DDStoreValueError(f"link_prediction_metrics: scores and labels must be "
                                    f"real numbers ({type(exc).__name__}: {exc})") from exc
        if local[0].shape != local[1].shape:
            raise DDStoreValueError(f"link_prediction_metrics: {local[0].shape[0]} scores "
                                    f"and {local[1].shape[0]} labels; their lengths must "
                                    f"be equal")
    parts = comm.gather(local, root=root)
    if comm.Get_rank() != root:
        return None
    s = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    rnd = np.random.default_rng(seed).random(len(s))
    return (average_precision(y, s), roc_auc(y, s), average_precision(y, rnd),
            roc_auc(y, rnd), int((y == 1).sum()))
