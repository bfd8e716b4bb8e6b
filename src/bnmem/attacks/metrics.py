"""ROC-based metrics of a membership-inference attack.

Scores are "higher = more likely a member"; ``members`` is the ground truth.
The metrics are the ones the LiRA paper reports: AUC, balanced accuracy (its
"accuracy": the best (TPR + 1 − FPR)/2 over thresholds), and TPR at 0.1% and
1% FPR, taken as the largest TPR among ROC points with FPR <= the level.

With n non-members the smallest non-zero FPR is 1/n; for n < 1000 the TPR at
0.1% FPR is therefore the TPR at zero false positives.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.integrate import trapezoid
from sklearn.metrics import auc as _trapezoid_auc
from sklearn.metrics import roc_curve

from bnmem.errors import BnmemError

METRIC_NAMES = ("auc", "balanced_acc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr")
"""The metrics every attack evaluation reports per target and subset (:func:`attack_metrics`)."""
FPR_LEVELS = {"tpr_at_0.1pct_fpr": 1e-3, "tpr_at_1pct_fpr": 1e-2}


def _finite_scores(scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if np.isnan(scores).any():
        raise BnmemError("attack scores contain NaN")
    # ±inf can come out of a degenerate Gaussian fit; clamp keeps their order
    # relative to finite scores, which is all a ROC curve uses.
    big = np.finfo(np.float64).max
    return np.clip(scores, -big, big)


def _checked(scores: np.ndarray, members: np.ndarray, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    """Finite float64 scores and bool members of the same ``ndim``-D shape (:func:`roc`, :func:`roc_rows`).

    Raises:
        BnmemError: shapes differ or scores contain NaN.
    """
    scores = _finite_scores(scores)
    members = np.asarray(members, dtype=bool)
    if scores.shape != members.shape or scores.ndim != ndim:
        raise BnmemError(f"scores {scores.shape} and members {members.shape} must be equal {ndim}-D shapes")
    return scores, members


def roc(scores: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ROC curve of ``scores`` against membership.

    Args:
        scores: [n] attack scores, higher = member.
        members: [n] bool ground truth.

    Returns:
        ``(fpr, tpr)`` float64 arrays from (0, 0) to (1, 1), or two empty arrays
        when ``members`` lacks one of the two classes.

    Raises:
        BnmemError: shapes differ or scores contain NaN.
    """
    scores, members = _checked(scores, members, ndim=1)
    if members.all() or not members.any():
        return np.zeros(0), np.zeros(0)
    fpr, tpr, _ = roc_curve(members, scores)
    return fpr.astype(np.float64), tpr.astype(np.float64)


def roc_rows(scores: np.ndarray, members: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`roc` of every row of ``scores`` against the same row of ``members``, from one sort.

    The same curves, bit for bit, as :func:`roc` row by row (that is, as ``sklearn.metrics.roc_curve`` with
    its default ``drop_intermediate``): per row, the counts of members and non-members scoring at least
    each distinct score (whole numbers, exact in float64), the points collinear with both neighbours
    dropped, (0, 0) prepended, divided by the last count.

    Args:
        scores: [rows, n] attack scores, higher = member.
        members: [rows, n] bool ground truth.

    Returns:
        One ``(fpr, tpr)`` per row; two empty arrays for a row that lacks one of the two classes.

    Raises:
        BnmemError: shapes differ or scores contain NaN.
    """
    scores, members = _checked(scores, members, ndim=2)
    n_rows, n = scores.shape
    if n == 0:
        return [(np.zeros(0), np.zeros(0)) for _ in range(n_rows)]
    order = np.argsort(-scores, axis=1, kind="stable")  # descending; the order within ties does not matter
    ranked = np.take_along_axis(scores, order, axis=1)
    tps = np.cumsum(np.take_along_axis(members, order, axis=1), axis=1, dtype=np.float64)
    fps = np.arange(1, n + 1, dtype=np.float64) - tps
    ends = np.ones((n_rows, n), dtype=bool)  # the last example of each distinct score: a threshold
    ends[:, :-1] = ranked[:, 1:] != ranked[:, :-1]
    rows, cols = np.nonzero(ends)
    f, t = fps[rows, cols], tps[rows, cols]
    first = np.r_[True, rows[1:] != rows[:-1]]
    last = np.r_[rows[1:] != rows[:-1], True]
    keep = first | last
    keep[1:-1] |= ((f[2:] - f[1:-1]) - (f[1:-1] - f[:-2]) != 0) | ((t[2:] - t[1:-1]) - (t[1:-1] - t[:-2]) != 0)
    rows, f, t = rows[keep], f[keep], t[keep]
    bounds = np.searchsorted(rows, np.arange(n_rows + 1))
    out = []
    for r in range(n_rows):
        fr, tr = f[bounds[r]:bounds[r + 1]], t[bounds[r]:bounds[r + 1]]
        if fr[-1] <= 0 or tr[-1] <= 0:
            out.append((np.zeros(0), np.zeros(0)))
            continue
        fr, tr = np.concatenate(([0.0], fr)), np.concatenate(([0.0], tr))
        out.append((fr / fr[-1], tr / tr[-1]))
    return out


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, level: float) -> float:
    """Largest TPR among ROC points with FPR <= ``level`` (nan for an empty curve).

    Args:
        fpr: ROC false-positive rates.
        tpr: ROC true-positive rates.
        level: FPR level, e.g. 1e-3.

    Returns:
        The TPR as a float.
    """
    ok = np.asarray(fpr) <= level
    return float(np.max(np.asarray(tpr)[ok])) if ok.any() else math.nan


def metrics_from_roc(fpr: np.ndarray, tpr: np.ndarray) -> dict[str, float]:
    """AUC, balanced accuracy and TPR at low FPR from a ROC curve.

    Args:
        fpr: ROC false-positive rates (from :func:`roc`).
        tpr: ROC true-positive rates.

    Returns:
        dict with keys ``auc``, ``balanced_acc``, ``tpr_at_0.1pct_fpr``,
        ``tpr_at_1pct_fpr``; all nan for an empty curve.
    """
    fpr = np.asarray(fpr, dtype=np.float64)
    tpr = np.asarray(tpr, dtype=np.float64)
    if fpr.size == 0:
        return {name: math.nan for name in METRIC_NAMES}
    # sklearn's auc is the trapezoid rule after checking x's direction; a curve from roc rises, so the
    # check (the costly part: argument validation) is only made when it does not.
    rising = bool(np.all(fpr[1:] >= fpr[:-1]))
    out = {
        "auc": float(trapezoid(tpr, fpr)) if rising else float(_trapezoid_auc(fpr, tpr)),
        "balanced_acc": float(np.max((tpr + 1.0 - fpr) / 2.0)),
    }
    for name, level in FPR_LEVELS.items():
        out[name] = tpr_at_fpr(fpr, tpr, level)
    return out


def attack_metrics(scores: np.ndarray, members: np.ndarray) -> dict[str, float]:
    """All metrics of one attack on one target.

    Args:
        scores: [n] attack scores, higher = member.
        members: [n] bool ground truth.

    Returns:
        dict with keys ``auc``, ``balanced_acc``, ``tpr_at_0.1pct_fpr``,
        ``tpr_at_1pct_fpr`` (nan when one class is absent). The AUC equals
        ``sklearn.metrics.roc_auc_score(members, scores)``.

    Raises:
        BnmemError: shapes differ or scores contain NaN.
    """
    return metrics_from_roc(*roc(scores, members))
