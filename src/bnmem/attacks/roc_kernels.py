"""The metrics side of the attack evaluation in compiled kernels (numba): ROC walks over sorted scores.

:func:`roc_rows` splits each target's sorted row into its subsets' in one pass and walks each for its ROC
metrics, ε point bound and rank counts (:mod:`bnmem.attacks.per_target` calls it and keeps the per-row numpy
oracles); :func:`pooled_split` gathers a subset's member and non-member scores and :func:`pooled_curve` merges
them, sorted, into its thinned pooled curve (:mod:`bnmem.attacks.pooled`), with :func:`merge_sorted` joining
two sorted subsets into their union. Plain Python over numpy arrays: :func:`bnmem.attacks.kernels.compiled`
compiles these functions with the scoring kernels (one switch, one cache), and none of them imports bnmem.
"""

from __future__ import annotations

import math

import numpy as np

_BIG = 1.7976931348623157e308  # the largest float: a ROC curve sees ±inf clipped to ±_BIG


def _eps_ratio(t: int, f: int, n_in: int, n_out: int, delta: float) -> float:
    """e to the larger of the ε bound's two terms at counts (t, f) from the point estimates TPR = t/n_in and
    FPR = f/n_out (:func:`bnmem.attacks.epsilon._terms` takes the logs of these ratios; 0 where neither is
    defined): the walk keeps the largest ratio and takes one log of it, not two per corner."""
    tpr, fpr = t / n_in, f / n_out
    a = b = 0.0
    if tpr - delta > 0.0:
        a = np.inf if fpr == 0.0 else max(tpr - delta, 1e-300) / fpr
    if (1.0 - fpr) - delta > 0.0:
        b = np.inf if tpr == 1.0 else max((1.0 - fpr) - delta, 1e-300) / (1.0 - tpr)
    return max(a, b)


def _roc_walk(values: np.ndarray, members: np.ndarray, n_in: int, n_out: int, levels: np.ndarray, gk: np.ndarray,
              gj: np.ndarray, delta: float, stats: np.ndarray, tp: np.ndarray, fp: np.ndarray) -> None:
    """One row and subset (see :func:`roc_rows`): its scores ``values`` in descending order and their
    ``members`` flags, walked once."""
    n_k = gk.size
    f = t = 0  # non-members and members at or above the current score
    started = False
    raw = clip = 0.0  # the current score, and as the ROC curve sees it
    rf = rt = 0  # the counts above the current score's run of equal (raw) scores
    cand_f = cand_t = 0  # the last raw point, a corner of the staircase if the next step adds non-members
    cand = False  # whether the step into it added members (or it is the first)
    best = 0.0  # the largest e^ε term so far
    ik, ij = 0, gj.size - 1
    n_pts = 0
    f0 = t0 = f1 = t1 = 0  # the last two ROC points (clipped runs), for drop_intermediate
    pf = pt = 0.0  # the last kept point's rates (the origin first)
    auc, bal = 0.0, 0.5
    for i in range(levels.size):
        stats[2 + i] = 0.0
    for i in range(values.size + 1):
        last = i == values.size
        if not last:
            v = values[i]
            c = min(max(v, -_BIG), _BIG)
        if started and (last or v != raw):  # a run of equal raw scores ends at (f, t): the ε side
            if cand and f > cand_f:
                best = max(best, _eps_ratio(cand_t, cand_f, n_in, n_out, delta))
            cand, cand_f, cand_t = t > rt or (rf == 0 and rt == 0), f, t
            while ik < n_k and gk[ik] < f and gk[ik] < n_out:  # the (k+1)-th largest non-member is in this run
                tp[ik], fp[ik] = rt, rf
                ik += 1
            while ij >= 0 and gj[ij] >= 1 and gj[ij] > n_in - t:  # so is the j-th smallest member
                tp[n_k + ij], fp[n_k + ij] = rt, rf
                ij -= 1
            if not last:
                rf, rt = f, t
        if started and (last or c != clip):  # a run of equal clipped scores ends: a ROC point (f, t)
            n_pts += 1
            # sklearn's drop_intermediate: a point is kept where the step into it and the step out differ (the
            # first and the last always); the previous point is decided now, the last at the end
            keep_prev = n_pts == 2 or (n_pts > 2 and (f1 - f0 != f - f1 or t1 - t0 != t - t1))
            for k_f, k_t, kept in ((f1, t1, keep_prev), (f, t, last)):
                if kept:  # the trapezoid from the last kept point, the maxima, the FPR levels
                    fpr, tpr = k_f / n_out, k_t / n_in
                    auc += (fpr - pf) * (tpr + pt) / 2.0
                    bal = max(bal, (tpr + 1.0 - fpr) / 2.0)
                    for lv in range(levels.size):
                        if fpr <= levels[lv]:
                            stats[2 + lv] = tpr
                    pf, pt = fpr, tpr
            f0, t0, f1, t1 = f1, t1, f, t
        if last:
            break
        started = True
        raw, clip = v, c
        member = 1 if members[i] else 0  # a count advanced, not a branch: which class comes next is a coin flip
        t += member
        f += 1 - member
    if cand:  # the last point: no step follows
        best = max(best, _eps_ratio(cand_t, cand_f, n_in, n_out, delta))
    above = (rf, rt) if raw == -np.inf else (f, t)  # the thresholds at −inf: everything above a final −inf run
    while ik < n_k:
        fp[ik], tp[ik] = above
        ik += 1
    while ij >= 0:
        fp[n_k + ij], tp[n_k + ij] = above
        ij -= 1
    stats[0], stats[1], stats[2 + levels.size] = auc, bal, math.log(max(best, 1.0))


def roc_rows(values: np.ndarray, order: np.ndarray, members: np.ndarray, masks: np.ndarray, r0: int,
             n_in: np.ndarray, n_out: np.ndarray, levels: np.ndarray, grids: np.ndarray, grid_at: np.ndarray, deltas: np.ndarray,
             stats: np.ndarray, tp: np.ndarray, fp: np.ndarray) -> None:
    """Every row's ROC metrics and what its ε bound reads, per subset, from one walk of the row's scores in the
    subset in descending order (:func:`bnmem.attacks.per_target.roc_summaries` documents the outputs).

    Args:
        values: float64 [R, N] scores (no NaN); order: int64 [K, N] the columns of rows r0..r0 + K by descending
            score (the rows walked).
        members: bool [R, N]; masks: bool [S, N] the subsets.
        n_in, n_out: int64 [S, R] members and non-members of each row in each subset.
        levels: float64 [L] the FPR levels.
        grids: int64 flat rank grids; grid_at: int64 [S, R, 3] where row r's non-member ranks start in subset s,
            where its member ranks start, and where they end (in ``grids``, ``tp`` and ``fp``).
        deltas: float64 [R] each row's δ.
        stats: float64 [S, R, L + 3] AUC, balanced accuracy, TPR at each level, the ε point bound (nan for a row
            lacking a class); tp, fp: int64 flat, the counts above each rank threshold.
    """
    s_count, n = masks.shape
    # each subset's scores of the row in descending order, and their member flags: gathered in one pass over
    # the row's order (each value written to every subset, its count advanced where the column is in it), so
    # every walk reads only its own values, contiguous
    sub_v, sub_m = np.empty((s_count, n + 1)), np.empty((s_count, n + 1), np.bool_)
    count = np.empty(s_count, np.int64)
    masks_t = np.ascontiguousarray(masks.T)
    for r in range(r0, r0 + order.shape[0]):
        row_order = order[r - r0]
        count[:] = 0
        for i in range(n):
            col = row_order[i]
            v, m = values[r, col], members[r, col]
            for s in range(s_count):
                k = count[s]
                sub_v[s, k], sub_m[s, k] = v, m
                count[s] = k + (1 if masks_t[col, s] else 0)
        for s in range(s_count):
            if n_in[s, r] == 0 or n_out[s, r] == 0:
                stats[s, r, :] = np.nan
                continue
            a, b, e = grid_at[s, r]
            _roc_walk(sub_v[s, :count[s]], sub_m[s, :count[s]], n_in[s, r], n_out[s, r], levels, grids[a:b],
                      grids[b:e], deltas[r], stats[s, r], tp[a:e], fp[a:e])


def pooled_split(scores: np.ndarray, members: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """The member and the non-member scores of every row in the columns of ``mask``, ±inf clipped to ±the
    largest float (as :func:`bnmem.attacks.metrics.roc` sees them), unsorted: ``(pos, neg, ok)``, ok False
    where a score is NaN. Straight from the 2-D arrays in one pass (each value written to both, the count of
    its class advanced), so no masked, flattened or compressed copy is made."""
    cols = np.flatnonzero(mask)
    n_in = 0
    for r in range(scores.shape[0]):
        for c in cols:
            n_in += 1 if members[r, c] else 0
    n_out = scores.shape[0] * cols.size - n_in
    pos, neg = np.empty(n_in + 1), np.empty(n_out + 1)  # one spare: the last value is written to both
    i = o = 0
    for r in range(scores.shape[0]):
        for c in cols:
            v = scores[r, c]
            if v != v:
                return pos[:0], neg[:0], False
            v = min(max(v, -_BIG), _BIG)
            pos[i] = v
            neg[o] = v
            m = 1 if members[r, c] else 0
            i += m
            o += 1 - m
    return pos[:n_in], neg[:n_out], True


def merge_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The values of the ascending arrays a and b in one ascending array (two subsets' sorted scores into
    their union's)."""
    out = np.empty(a.size + b.size)
    i = j = 0
    for k in range(out.size):
        if j >= b.size or (i < a.size and a[i] <= b[j]):
            out[k] = a[i]
            i += 1
        else:
            out[k] = b[j]
            j += 1
    return out


def pooled_curve(pos: np.ndarray, neg: np.ndarray, grid: np.ndarray, whole: np.ndarray, thin: np.ndarray
                 ) -> tuple[int, int]:
    """The ROC curve of member scores ``pos`` and non-member scores ``neg`` (each ascending, finite) with
    sklearn's ``drop_intermediate``, and :func:`bnmem.attacks.pooled.thin_curve` of it, in one walk.

    Writes (fpr, tpr) rows: the curve's first ``len(whole)`` points into ``whole``, and into ``thin``
    [len(grid) + 2, 2] the origin, per level of ``grid`` (ascending) the last point at or below it, and the last
    point, each once. Returns the curve's length and how many rows ``thin`` holds."""
    n_in, n_out = pos.size, neg.size
    i, j = n_in - 1, n_out - 1
    f = t = n_pts = 0
    f0 = t0 = f1 = t1 = 0  # the last two points, for drop_intermediate
    idx = 0  # the last kept point's index on the curve (the origin is 0), and its rates
    pf = pt = 0.0
    whole[0, 0] = whole[0, 1] = thin[0, 0] = thin[0, 1] = 0.0
    n_thin, thin_idx, g = 1, 0, 0
    last = False
    while not last:
        v = max(pos[i] if i >= 0 else -np.inf, neg[j] if j >= 0 else -np.inf)
        while i >= 0 and pos[i] == v:
            t += 1
            i -= 1
        while j >= 0 and neg[j] == v:
            f += 1
            j -= 1
        n_pts += 1
        last = i < 0 and j < 0
        keep_prev = n_pts == 2 or (n_pts > 2 and (f1 - f0 != f - f1 or t1 - t0 != t - t1))
        for k_f, k_t, kept in ((f1, t1, keep_prev), (f, t, last)):
            if not kept:
                continue
            fpr, tpr = k_f / n_out, k_t / n_in
            while g < grid.size and grid[g] < fpr:  # the last point at or below the level: the previous one
                if thin_idx != idx:
                    thin[n_thin, 0], thin[n_thin, 1] = pf, pt
                    n_thin, thin_idx = n_thin + 1, idx
                g += 1
            idx += 1
            if idx < whole.shape[0]:
                whole[idx, 0], whole[idx, 1] = fpr, tpr
            pf, pt = fpr, tpr
        f0, t0, f1, t1 = f1, t1, f, t
    thin[n_thin, 0], thin[n_thin, 1] = pf, pt  # the last point (every level left reads it too)
    return idx + 1, n_thin + 1
