"""The pooled ROC curve of many targets' scores (all together, as the LiRA paper plots it), thinned for drawing.

The pooled curve is only drawn, so the streaming evaluator keeps it thinned (:func:`thin_curve`: per FPR level
of a log and a linear grid, the last point of the full curve at or below that level). With numba, the members'
and the non-members' scores are gathered straight from the 2-D arrays by the compiled
:func:`bnmem.attacks.roc_kernels.pooled_split`, each sorted (numpy) and merged in one walk by the compiled
:func:`bnmem.attacks.roc_kernels.pooled_curve`, which finds sklearn's curve (``drop_intermediate``) and thins it as
it goes (a subset that is the disjoint union of two others, ``all`` of outliers and inliers, merges their sorted
scores instead: :func:`pooled_curves`); without numba, sklearn's ROC of all the scores is thinned (the slow,
obvious way, and the oracle).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from bnmem.attacks import kernels
from bnmem.attacks.metrics import roc
from bnmem.errors import BnmemError

# Pooled ROC curves (all targets' scores together) are only drawn; the streaming evaluator thins them.
POOLED_POINTS = 4000


def fpr_grid(max_points: int) -> np.ndarray:
    """The FPR levels :func:`thin_curve` keeps one point for (log and linear)."""
    half = max_points // 2
    return np.concatenate([np.logspace(-7, 0, half), np.linspace(0, 1, half)])


def thin_curve(fpr: np.ndarray, tpr: np.ndarray, max_points: int = POOLED_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """A ROC curve cut to about ``max_points`` points spread evenly on log and linear FPR axes.

    Keeps both ends and, per grid level, the last point at or below it, so a
    log-log plot looks the same; metrics are never computed from a thinned curve.
    """
    if fpr.size <= max_points:
        return fpr, tpr
    idx = np.searchsorted(fpr, fpr_grid(max_points), side="right") - 1
    idx = np.unique(np.concatenate([[0, fpr.size - 1], np.clip(idx, 0, fpr.size - 1)]))
    return fpr[idx], tpr[idx]


def pooled_curve(scores: np.ndarray, members: np.ndarray, mask: np.ndarray, max_points: int | None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The ROC curve of every row's scores in the columns of ``mask`` together, thinned (:func:`thin_curve`).

    Args:
        scores: float64 [rows, n] (no NaN), higher = member; members: bool [rows, n]; mask: bool [n].
        max_points: as :func:`thin_curve` (None: the whole curve).

    Returns:
        ``(fpr, tpr)`` float64, the points of ``thin_curve(*roc(pooled scores, pooled members), max_points)``;
        two empty arrays when the pooled scores lack a class.
    """
    return pooled_curves(scores, members, {"": mask}, max_points)[""]


def pooled_curves(scores: np.ndarray, members: np.ndarray, masks: Mapping[str, np.ndarray],
                  max_points: int | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """:func:`pooled_curve` of each subset of ``masks`` (name -> bool [n]), by name.

    With the compiled kernels, a subset that is the disjoint union of two others (``all`` of outliers and
    inliers) merges their sorted member and non-member scores instead of gathering and sorting its own."""
    scores, members = np.asarray(scores, dtype=np.float64), np.asarray(members, dtype=bool)
    masks = {name: np.asarray(mask, dtype=bool) for name, mask in masks.items()}
    kern = kernels.compiled()
    usable = scores.ndim == 2 and scores.shape == members.shape and all(m.shape == scores.shape[1:]
                                                                        for m in masks.values())
    if kern is None or max_points is None or not usable:
        return {name: _oracle_curve(scores, members, mask, max_points) for name, mask in masks.items()}
    halves = {name: _halves(name, masks) for name in masks}
    classes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in sorted(masks, key=lambda name: halves[name] is not None):  # the halves first
        parts = halves[name]
        if parts is not None and all(part in classes for part in parts):
            (pos_a, neg_a), (pos_b, neg_b) = classes[parts[0]], classes[parts[1]]
            classes[name] = kern["merge_sorted"](pos_a, pos_b), kern["merge_sorted"](neg_a, neg_b)
            continue
        pos, neg, ok = kern["pooled_split"](scores, members, masks[name])
        if not ok:
            raise BnmemError("attack scores contain NaN")
        pos.sort()
        neg.sort()
        classes[name] = pos, neg
    grid = np.sort(fpr_grid(max_points))
    out = {}
    for name, mask in masks.items():
        pos, neg = classes[name]
        if not (pos.size and neg.size):
            out[name] = np.zeros(0), np.zeros(0)
            continue
        whole, thin = np.empty((max_points, 2)), np.empty((grid.size + 2, 2))
        length, kept = kern["pooled_curve"](pos, neg, grid, whole, thin)
        points = whole[:length] if length <= max_points else thin[:kept]
        out[name] = points[:, 0].copy(), points[:, 1].copy()
    return out


def _halves(name: str, masks: Mapping[str, np.ndarray]) -> tuple[str, str] | None:
    """Two other subsets whose disjoint union is subset ``name``, if there are."""
    mask = masks[name]
    others = [other for other in masks if other != name]
    for i, a in enumerate(others):
        for b in others[i + 1:]:
            if not (masks[a] & masks[b]).any() and np.array_equal(masks[a] | masks[b], mask):
                return a, b
    return None


def _oracle_curve(scores: np.ndarray, members: np.ndarray, mask: np.ndarray, max_points: int | None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """sklearn's ROC of every row's scores in the columns of ``mask`` together, thinned (the slow, obvious way)."""
    if not mask.all():
        scores, members = scores[:, mask], members[:, mask]
    fpr, tpr = roc(scores.ravel(), members.ravel())
    return (fpr, tpr) if max_points is None else thin_curve(fpr, tpr, max_points)
