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


def checked_scores(scores: np.ndarray, members: np.ndarray, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    """``scores`` as C-contiguous float64 and ``members`` as C-contiguous bool, once checked: equal ``ndim``-D
    shapes and no NaN score (±inf is allowed: a ROC curve clips it).

    Raises:
        BnmemError: the shapes differ or are not ``ndim``-D, or a score is NaN.
    """
    scores, members = np.asarray(scores, dtype=np.float64), np.asarray(members, dtype=bool)
    if scores.shape != members.shape or scores.ndim != ndim:
        raise BnmemError(f"scores {scores.shape} and members {members.shape} must be equal {ndim}-D shapes")
    if np.isnan(scores).any():
        raise BnmemError("attack scores contain NaN")
    return np.ascontiguousarray(scores), np.ascontiguousarray(members)


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
    scores = _finite_scores(scores)
    members = np.asarray(members, dtype=bool)
    if scores.shape != members.shape or scores.ndim != 1:
        raise BnmemError(f"scores {scores.shape} and members {members.shape} must be equal 1-D shapes")
    if members.all() or not members.any():
        return np.zeros(0), np.zeros(0)
    fpr, tpr, _ = roc_curve(members, scores)
    return fpr.astype(np.float64), tpr.astype(np.float64)


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
    # check (the costly part: argument validation) is only made when it does not. The rule is written out
    # as scipy.integrate.trapezoid computes it for 1-D float64 (the same operations: no wrapper per call).
    rising = bool(np.all(fpr[1:] >= fpr[:-1]))
    auc = np.add.reduce((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2.0) if rising else _trapezoid_auc(fpr, tpr)
    out = {"auc": float(auc), "balanced_acc": float(np.max((tpr + 1.0 - fpr) / 2.0))}
    # On a curve whose FPR and TPR both rise, the points with FPR <= level are a prefix and the largest TPR
    # among them is its last: a binary search instead of a pass per level.
    prefix = rising and bool(np.all(tpr[1:] >= tpr[:-1]))
    for name, level in FPR_LEVELS.items():
        if prefix:
            end = int(np.searchsorted(fpr, level, side="right"))
            out[name] = float(tpr[end - 1]) if end else math.nan
        else:
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
