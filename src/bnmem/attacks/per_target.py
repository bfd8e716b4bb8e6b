"""Every target's ROC metrics and what its ε bound reads, per subset of the examples.

With numba (:mod:`bnmem.attacks.kernels`) each target's row of scores is sorted once (numpy's argsort), split
into its subsets' in one pass and walked once per subset by the compiled :func:`~bnmem.attacks.roc_kernels.roc_rows`:
the ROC points (runs of equal scores, ±inf clipped as :func:`~bnmem.attacks.metrics.roc` sees them) with
sklearn's ``drop_intermediate``, their trapezoid AUC, balanced accuracy and TPR at each FPR level; the ε point
bound at the staircase's upper-left corners (raw scores); and the counts above each rank threshold of the ε
bound. Without numba each row and subset goes through the slow, obvious oracles: sklearn's ROC and
:func:`~bnmem.attacks.metrics.metrics_from_roc`, and :class:`~bnmem.attacks.epsilon.RankCounts`'s class
searches. The two agree to rounding (the AUC is summed in another order; tests/test_kernels.py).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from bnmem.attacks import kernels
from bnmem.attacks.epsilon import RankCounts, rank_grid
from bnmem.attacks.metrics import FPR_LEVELS, METRIC_NAMES, checked_scores, metrics_from_roc, roc

# Rows sorted at a time (their order array stays small).
ROWS_AT_ONCE = 32


def roc_summaries(scores: np.ndarray, members: np.ndarray, masks: Mapping[str, np.ndarray], deltas: np.ndarray
                  ) -> dict[str, tuple[dict[str, np.ndarray], RankCounts]]:
    """Per subset: every row's metrics (:data:`~bnmem.attacks.metrics.METRIC_NAMES` -> float64 [rows], nan for
    a row lacking a class) and what its ε bound reads (:class:`~bnmem.attacks.epsilon.RankCounts`).

    Args:
        scores: float64 [rows, n] attack scores, higher = member (±inf allowed, no NaN).
        members: bool [rows, n]; masks: subset name -> bool [n]; deltas: float64 [rows] each row's δ.

    Raises:
        BnmemError: shapes differ or scores contain NaN.
    """
    scores, members = checked_scores(scores, members, 2)
    masks = {name: np.asarray(mask, dtype=bool) for name, mask in masks.items()}
    n_in = np.stack([np.count_nonzero(members & mask, axis=1) for mask in masks.values()]).astype(np.int64)
    n_out = np.array([[int(mask.sum())] for mask in masks.values()], dtype=np.int64) - n_in
    kern = kernels.compiled()
    if kern is None:
        return {name: (_metrics_of(scores[:, mask], members[:, mask]),
                       RankCounts.of(scores[:, mask], members[:, mask], deltas))
                for name, mask in masks.items()}
    counts = [RankCounts.sized(i, o) for i, o in zip(n_in, n_out)]
    levels = np.array(list(FPR_LEVELS.values()))  # stats' columns: METRIC_NAMES' order, then the point bound
    stats = np.empty((len(masks), scores.shape[0], levels.size + 3))
    base = np.cumsum([0] + [c.tp.size for c in counts])
    grids = np.concatenate([c.grids() for c in counts])
    tp, fp = np.zeros(grids.size, np.int64), np.zeros(grids.size, np.int64)
    grid_at = np.empty(stats.shape[:2] + (3,), np.int64)  # per subset and row: its ranks' start, middle, end
    for k, c in enumerate(counts):
        grid_at[k, :, 0], grid_at[k, :, 2] = base[k] + c.offsets[:-1], base[k] + c.offsets[1:]
        grid_at[k, :, 1] = grid_at[k, :, 0] + [rank_grid(o).size if i and o else 0
                                               for i, o in zip(c.n_in.tolist(), c.n_out.tolist())]
    mask_rows = np.stack(list(masks.values()))
    deltas = np.asarray(deltas, dtype=np.float64)
    for r0 in range(0, scores.shape[0], ROWS_AT_ONCE):
        order = np.argsort(np.negative(scores[r0:r0 + ROWS_AT_ONCE]), axis=1)
        kern["roc_rows"](scores, order, members, mask_rows, r0, n_in, n_out, levels, grids, grid_at, deltas,
                         stats, tp, fp)
    out = {}
    for k, (name, c) in enumerate(zip(masks, counts)):
        c.tp[:], c.fp[:] = tp[base[k]:base[k + 1]], fp[base[k]:base[k + 1]]
        c.points[:] = stats[k, :, -1]
        out[name] = ({m: stats[k, :, i].copy() for i, m in enumerate(METRIC_NAMES)}, c)
    return out


def _metrics_of(scores: np.ndarray, members: np.ndarray) -> dict[str, np.ndarray]:
    """Every row's metrics the slow, obvious way: sklearn's ROC of the row, :func:`metrics_from_roc` of it."""
    rows = [metrics_from_roc(*roc(s, m)) for s, m in zip(scores, members)]
    return {name: np.array([r[name] for r in rows], dtype=np.float64) for name in METRIC_NAMES}
