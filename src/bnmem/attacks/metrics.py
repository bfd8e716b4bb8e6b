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
from collections.abc import Callable, Iterator
from dataclasses import dataclass

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
    return rank_rows(scores, members).curves()


# Sorted entries processed at a time by the per-row passes: small enough that a chunk's arrays stay in cache.
CHUNK_ENTRIES = 1 << 17


class RankedRows:
    """Every row of a [rows, n] score matrix sorted once, descending, with what each sorted entry is.

    Sorting is what a ROC costs; one sort per row serves every row's curve (:meth:`curves`), any subset of
    the columns (:meth:`subset` keeps the order: no new sort), the ε bounds
    (:func:`bnmem.attacks.epsilon.epsilon_ranked`) and the pooled curve of all rows together
    (:meth:`merged`, a merge of the sorted rows into one). The order within ties is arbitrary: every curve
    is read at the ends of runs of equal scores.

    Attributes:
        values: [rows, n] float64 scores (±inf kept), descending per row.
        members: [rows, n] bool, the ground truth of each sorted entry.
        columns: [rows, n] the column of ``scores`` each sorted entry came from.
    """

    def __init__(self, values: np.ndarray, members: np.ndarray,
                 columns: np.ndarray | Callable[[], np.ndarray]):
        self.values, self.members = values, members
        self._columns = columns  # or how to find them, when first read (a subset's often never are)

    @property
    def columns(self) -> np.ndarray:
        if callable(self._columns):
            self._columns = self._columns()
        return self._columns

    def subset(self, mask: np.ndarray) -> "RankedRows":
        """The rows restricted to the columns where ``mask`` [n] is True, still sorted (their columns picked
        when first read: the metrics, ε bounds and thinned pooled curve never do)."""
        mask = np.asarray(mask, dtype=bool)
        if mask.all():
            return self
        rows = self.values.shape[0]
        sel = mask[self.columns].ravel()  # every row keeps as many entries (each holds each column equally often)
        k = int(np.count_nonzero(sel)) // max(rows, 1)
        columns = self.columns

        def picked(a: np.ndarray) -> np.ndarray:
            # np.compress picks the same entries in the same order as boolean indexing, in about 2/3 of the time.
            return np.compress(sel, a.ravel()).reshape(rows, k)

        return RankedRows(picked(self.values), picked(self.members), lambda: picked(columns))

    def merged(self) -> "RankedRows":
        """All rows as one row, sorted: the scores pooled over rows (each entry keeps its column, picked
        when first read: a pooled curve never reads them)."""
        rows, n = self.values.shape
        if rows <= 1:
            return self
        # Each row negated is an ascending run; a stable sort merges the runs (timsort) instead of sorting
        # anew, and its order is descending in the scores themselves (no reversed copies). Within a run of
        # equal scores the order differs from other merges, which no curve reads (the class docstring).
        negated = np.negative(self.values.ravel())
        order = np.argsort(negated, kind="stable")
        del negated
        return RankedRows(np.take(self.values.ravel(), order).reshape(1, -1),
                          np.take(self.members.ravel(), order).reshape(1, -1),
                          lambda: np.take(self.columns.ravel(), order).reshape(1, -1))

    def chunks(self) -> Iterator["RankedRows"]:
        """The rows in consecutive groups of about :data:`CHUNK_ENTRIES` entries (views, no copies)."""
        rows, n = self.values.shape
        step = max(1, CHUNK_ENTRIES // max(n, 1))
        for r in range(0, rows, step):
            yield RankedRows(self.values[r:r + step], self.members[r:r + step], self.columns[r:r + step])

    def thresholds(self, clip: bool = True) -> "Thresholds":
        """Per row and distinct score (descending), the non-members and members scoring at least it.

        Args:
            clip: distinct after clipping ±inf to the largest finite floats, as :func:`roc` sees them
                (False: the raw scores, as the ε bounds compare them).
        """
        values = self.values
        if clip and self.has_inf():
            values = _finite_scores(values)
        n_rows, n = values.shape
        ends = np.empty((n_rows, n), dtype=bool)  # the last example of each distinct score: a threshold
        ends[:, -1] = True
        np.not_equal(values[:, 1:], values[:, :-1], out=ends[:, :-1])
        sizes = np.count_nonzero(ends, axis=1)
        idx = np.flatnonzero(ends)
        del ends
        # Counts are whole numbers: float32 holds them exactly below 2^24 (half the memory of a pooled row).
        # They are summed as integers (several times faster than a float cumsum) and converted once.
        count = np.float32 if values.size < 2**24 else np.float64
        cum = np.cumsum(self.members, axis=1, dtype=np.int32 if n < 2**31 else np.int64)
        tps = np.take(cum.ravel(), idx)
        del cum  # before the conversion: a pooled row's arrays are large
        tps = tps.astype(count)
        if n_rows > 1:  # the position within its row (a subtraction per row: no integer division)
            idx -= np.repeat(np.arange(n_rows) * n, sizes)
        idx += 1
        fps = idx.astype(count)
        fps -= tps
        return Thresholds(fps, tps, sizes)

    def has_inf(self) -> bool:
        """Whether some score is ±inf (sorted rows: it would sit at an end)."""
        return bool(self.values.size) and bool(np.isinf(self.values[:, [0, -1]]).any())

    def roc_passes(self) -> Iterator[tuple[int, "RankedRows", "Thresholds", "Thresholds"]]:
        """Per chunk (:meth:`chunks`): its first row, the chunk, and its thresholds as the ROC curves read
        them (±inf clipped) and as the ε bounds compare them (raw; the same object unless a score is
        infinite), so one count serves both."""
        at = 0
        for part in self.chunks():
            clipped = part.thresholds()
            yield at, part, clipped, (part.thresholds(clip=False) if part.has_inf() else clipped)
            at += part.values.shape[0]

    def curves(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every row's ROC curve, as :func:`roc_rows` documents."""
        n_rows, n = self.values.shape
        if n == 0:
            return [(np.zeros(0), np.zeros(0)) for _ in range(n_rows)]
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for part in self.chunks():
            out += curves_from(part.thresholds())
        return out


@dataclass(frozen=True)
class Thresholds:
    """A chunk's ROC counts (:meth:`RankedRows.thresholds`): per row and distinct score, descending, the
    non-members (``fps``) and members (``tps``) scoring at least it, as flat arrays in row order (whole
    numbers, exact: float32 below 2^24 entries, else float64); row r holds ``sizes[r]`` (≥ 1) entries."""

    fps: np.ndarray
    tps: np.ndarray
    sizes: np.ndarray

    @property
    def starts(self) -> np.ndarray:
        """Where each row's entries start."""
        return np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.intp)


@dataclass(frozen=True)
class KeptPoints:
    """Every row's ROC points as counts, the points collinear with both neighbours dropped (sklearn's
    ``drop_intermediate``): non-members ``fps`` and members ``tps`` at or above each kept threshold, flat in
    row order; row r's are ``[bounds[r], bounds[r + 1])`` (at least one each)."""

    fps: np.ndarray
    tps: np.ndarray
    bounds: np.ndarray

    @classmethod
    def of(cls, th: Thresholds) -> "KeptPoints":
        """The kept points of a chunk's counts (:meth:`RankedRows.thresholds`)."""
        f, t = th.fps, th.tps
        starts = th.starts
        keep = np.zeros(f.size, dtype=bool)
        if f.size > 2:
            # A point is kept where the step to it and the step from it differ (counts: exact differences).
            df, dt = np.diff(f), np.diff(t)
            np.not_equal(df[1:], df[:-1], out=keep[1:-1])
            keep[1:-1] |= dt[1:] != dt[:-1]
        keep[starts] = True  # every row's first and last point
        keep[starts + th.sizes - 1] = True
        # Kept points per row, then the kept counts (no index array: a pooled row has millions of points).
        per_row = (np.add.reduceat(keep, starts, dtype=np.intp) if starts.size > 1
                   else np.array([np.count_nonzero(keep)]))
        return cls(np.compress(keep, f), np.compress(keep, t), np.concatenate(([0], np.cumsum(per_row))))

    def curves(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every row's ROC curve: (0, 0) prepended, divided by the last count; empty for a row lacking a class."""
        f, t, bounds = self.fps, self.tps, self.bounds
        out = []
        for r in range(bounds.size - 1):
            fr, tr = f[bounds[r]:bounds[r + 1]], t[bounds[r]:bounds[r + 1]]
            if fr[-1] <= 0 or tr[-1] <= 0:
                out.append((np.zeros(0), np.zeros(0)))
                continue
            fr, tr = np.concatenate(([0.0], fr)), np.concatenate(([0.0], tr))
            out.append((fr / fr[-1], tr / tr[-1]))
        return out

    def metrics(self) -> dict[str, np.ndarray]:
        """Per row, :func:`metrics_from_roc` of its curve (:meth:`curves`), bit for bit, without the curves.

        The rates are the same divisions. A row's AUC is the same ``np.add.reduce`` over the same trapezoid
        terms, laid out contiguously: the step from the origin, (f₀ − 0)(t₀ + 0)/2 = f₀t₀/2 exactly, in the
        slot before the row's other steps. The balanced accuracy is the maximum of the same values (the
        origin's is 1/2), and a curve from counts rises, so the TPR at an FPR level is that of the last
        point within it, found by counting the points there (none: the origin's, 0).
        """
        f, t, bounds = self.fps, self.tps, self.bounds
        rows = bounds.size - 1
        starts, lasts = bounds[:-1], bounds[1:] - 1
        sizes = np.diff(bounds)
        f_last, t_last = f[lasts].astype(np.float64), t[lasts].astype(np.float64)
        ok = (f_last > 0) & (t_last > 0)
        with np.errstate(divide="ignore", invalid="ignore"):  # rows lacking a class: not read
            fpr, tpr = f / np.repeat(f_last, sizes), t / np.repeat(t_last, sizes)
        terms = np.empty(f.size)  # row r's steps: [starts[r], starts[r] + sizes[r])
        terms[1:] = (fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2.0  # a row's first slot: overwritten
        terms[starts] = fpr[starts] * tpr[starts] / 2.0
        out = {name: np.full(rows, math.nan) for name in METRIC_NAMES}
        auc = out["auc"]
        for r in np.flatnonzero(ok).tolist():
            auc[r] = np.add.reduce(terms[starts[r]:starts[r] + sizes[r]])
        out["balanced_acc"][ok] = np.maximum(np.maximum.reduceat((tpr + 1.0 - fpr) / 2.0, starts), 0.5)[ok]
        for name, level in FPR_LEVELS.items():
            within = np.add.reduceat(fpr <= level, starts, dtype=np.intp)
            out[name][ok] = np.where(within > 0, tpr[starts + within - 1], 0.0)[ok]
        return out


def curves_from(th: Thresholds) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every row's ROC curve from its counts: the points collinear with both neighbours dropped (sklearn's
    ``drop_intermediate``), (0, 0) prepended, divided by the last count; empty for a row lacking a class."""
    return KeptPoints.of(th).curves()


def rank_rows(scores: np.ndarray, members: np.ndarray) -> RankedRows:
    """Sort every row of ``scores`` [rows, n] once, descending (see :class:`RankedRows`).

    Raises:
        BnmemError: shapes differ or scores contain NaN.
    """
    members = np.asarray(members, dtype=bool)
    raw = np.asarray(scores, dtype=np.float64)
    if raw.shape != members.shape or raw.ndim != 2:
        raise BnmemError(f"scores {raw.shape} and members {members.shape} must be equal 2-D shapes")
    if np.isnan(raw).any():
        raise BnmemError("attack scores contain NaN")
    rows, n = raw.shape
    small = np.int32 if rows * n < 2**31 else np.intp
    values = np.empty((rows, n))
    ranked_members = np.empty((rows, n), dtype=bool)
    columns = np.empty((rows, n), dtype=small)
    # A few rows at a time: each row's sort is its own, and the index arrays stay small (no [rows, n] int64
    # temporaries: fresh memory costs page faults).
    step = max(1, CHUNK_ENTRIES // max(n, 1))
    for r in range(0, rows, step):
        part = slice(r, r + step)
        chunk = np.ascontiguousarray(raw[part])
        flat = sort_descending(chunk, values[part], small)  # positions in the chunk's flat entries
        # Flat gathers straight into the results (mode="clip": no buffered copy; every position is valid).
        np.take(np.ascontiguousarray(members[part]).ravel(), flat, out=ranked_members[part], mode="clip")
        np.subtract(flat, (np.arange(flat.shape[0], dtype=small) * n)[:, None], out=columns[part])
    return RankedRows(values, ranked_members, columns)


def sort_descending(chunk: np.ndarray, out: np.ndarray, dtype: type = np.intp) -> np.ndarray:
    """Sort every row of ``chunk`` [rows, n] (C-contiguous float64, no NaN) descending into ``out`` (same
    shape), and return the positions it took them from in ``chunk``'s flat entries (row r's offset by r·n),
    as ``dtype``; ties in any order.

    A comparison sort costs about 60 ns an entry on 50,000-long rows; this radix sort about half. Keys whose
    ascending order is the descending order of the scores (a float's bits, all but the sign flipped where it
    is positive; ±0 neighbours, ±inf at the ends) are sorted on their high 32 bits (sign, exponent and 20
    mantissa bits) by two stable passes of numpy's radix sort of 16-bit keys. Only entries whose high bits
    are equal can then be out of order; in the runs of equal high bits holding such a pair (a few dozen
    entries a row), the entries are sorted again by value. Entries in different runs are already ordered by
    their high bits, so one sort of all of those entries orders each run in place.
    """
    rows, n = chunk.shape
    bits = chunk.view(np.uint64).reshape(rows, n)
    high = (bits >> np.uint64(32)).astype(np.uint32)
    high ^= ((high >> np.uint32(31)) - np.uint32(1)) >> np.uint32(1)  # the key's high half
    offsets = (np.arange(rows, dtype=np.int64) * n)[:, None]
    order = np.argsort(high.astype(np.uint16), axis=1, kind="stable")  # least significant digit first
    order += offsets
    top = np.take((high >> np.uint32(16)).astype(np.uint16).ravel(), order)
    second = np.argsort(top, axis=1, kind="stable")
    second += offsets
    flat = np.take(order.ravel(), second).astype(dtype)
    np.take(chunk.ravel(), flat, out=out, mode="clip")
    wrong = out[:, 1:] > out[:, :-1]
    for r in np.flatnonzero(wrong.any(axis=1)) if wrong.any() else ():
        row_high = out[r].view(np.uint64) >> np.uint64(32)  # equal high bits of the value <=> of the key
        run = np.zeros(n, dtype=np.intp)  # runs of equal high bits, numbered
        np.cumsum(row_high[1:] != row_high[:-1], out=run[1:])
        bad = np.zeros(int(run[-1]) + 1, dtype=bool)
        bad[run[1:][wrong[r]]] = True
        fix = np.flatnonzero(bad[run])
        again = np.argsort(np.negative(out[r, fix]), kind="stable")
        flat[r, fix] = flat[r, fix[again]]
        out[r, fix] = out[r, fix[again]]
    return flat


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
