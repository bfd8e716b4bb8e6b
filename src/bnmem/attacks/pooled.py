"""The pooled ROC curve of many sorted rows, thinned for drawing, without merging the rows.

The pooled curve (all targets' scores together, as the LiRA paper plots it) is only drawn, so the
streaming evaluator keeps it thinned (:func:`thin_curve`): per FPR level of a
log and a linear grid, the last point of the full curve at or below that level. The full curve needs
the rows merged into one sorted sequence (tens of millions of entries at CIFAR scale); the thinned
one needs only the few thousand points the grid picks, and those are found here from exact counts:

- *splitters*: a sample of every row's scores (every ``stride``-th, plus each row's first and
  last); each row's entries scoring at least and above each splitter (a binary search per row and
  splitter) give, summed over rows, the pooled counts at every splitter exactly;
- between two consecutive splitters lies a *bucket* of a few hundred entries; only the buckets
  that hold a grid level's point are gathered from the rows and sorted.

A grid level g picks the last point whose FPR = fp / n_out is at most g, i.e. (division being
monotone) whose non-member count is at most c(g), the largest such whole number. Among the points
``sklearn.metrics.roc_curve`` keeps (``drop_intermediate``: a point whose step in equals its step
out is dropped; the first and the last are always kept), that is the last kept point at or before
the last point with fp ≤ c(g). A point's step in is its own tie group's counts, its step out the
next point's, so whether a point is kept is read off two neighbouring groups.

The thinned curve equals :func:`thin_curve` of the merged rows' curve, bit for
bit, whenever that curve has more than ``max_points`` points; when this cannot be shown from the
points seen (the kept points counted in the gathered buckets and between adjacent splitters), the
rows are merged as before (:meth:`bnmem.attacks.metrics.RankedRows.merged`).
"""

from __future__ import annotations

import math

import numpy as np

from bnmem.attacks.metrics import RankedRows, _finite_scores

# Pooled ROC curves (all targets' scores together) are only drawn; the streaming evaluator thins them.
POOLED_POINTS = 4000
# Below this many pooled entries the rows are simply merged (the full curve is cheap).
MERGE_BELOW = 1 << 16
# Entries gathered from the buckets at a time.
GATHER_BATCH = 1 << 18


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


def count_levels(grid: np.ndarray, n_out: int) -> np.ndarray:
    """Per level g, the largest whole c in [0, n_out] with float64(c) / n_out ≤ g (the FPR a count gives)."""
    c = np.clip(np.floor(grid * n_out), 0, n_out).astype(np.int64)
    denom = float(n_out)
    for _ in range(64):  # the floor is within one or two of the answer; correct it against the division itself
        up = (c < n_out) & ((c + 1) / denom <= grid)
        down = (c > 0) & (c / denom > grid)
        if not (up.any() or down.any()):
            return c
        c = c + up - down
    raise AssertionError("count_levels did not settle")  # pragma: no cover - the division is monotone


def thinned_pooled_curve(view: RankedRows, max_points: int, stride: int | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """``thin_curve(*view.merged().curves()[0], max_points)``: the pooled ROC of every row together, thinned.

    Args:
        view: the rows, each sorted descending (:func:`bnmem.attacks.metrics.rank_rows`, or a subset of it).
        max_points: as :func:`thin_curve`.
        stride: every how many entries of a row a splitter is sampled (None: chosen from the sizes).

    Returns:
        ``(fpr, tpr)`` float64, as the thinned curve of the merged rows.
    """
    rows, n = view.values.shape
    total = rows * n
    n_in = int(np.count_nonzero(view.members))
    if rows < 2 or total < MERGE_BELOW or n_in == 0 or n_in == total:
        return _merged(view, max_points)
    out = _Splitters(view, stride).thinned(n_in, total - n_in, max_points)
    return _merged(view, max_points) if out is None else out


def _merged(view: RankedRows, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """The slow, obviously-correct way: merge the rows, the whole curve, thin it."""
    return thin_curve(*view.merged().curves()[0], max_points=max_points)


class _Splitters:
    """Pooled counts at sampled splitter values (descending), per row positions of each."""

    def __init__(self, view: RankedRows, stride: int | None):
        values = _finite_scores(view.values) if view.has_inf() else view.values  # the curve's clipped scores
        rows, n = values.shape
        if stride is None:
            # Binary searches (rows × splitters) against gathered buckets (grid levels × bucket size): balanced
            # on attack scores at CIFAR scale (M = 256, N = 50,000: a splitter every ~500 entries of a row).
            stride = max(16, int(rows * math.sqrt(n / 12000.0)))
        # Rows scored alike put their k-th entries at alike values: each row starts at its own phase, so the
        # pooled splitters spread evenly instead of clustering.
        phase = (np.arange(rows) * stride) // rows
        picks = np.arange(0, n, stride)[None, :] + phase[:, None]
        sample = np.take_along_axis(values, np.minimum(picks, n - 1), axis=1)
        sig = np.unique(np.concatenate([sample.ravel(), values[:, 0], values[:, -1]]))[::-1]  # distinct, descending
        self.values, self.members, self.sig = values, view.members, sig
        # Per row: entries >= and > each splitter (positions in the descending row), and members among them.
        ge = np.empty((rows, sig.size), dtype=np.int64)
        gt = np.empty((rows, sig.size), dtype=np.int64)
        neg_sig = np.negative(sig)  # ascending
        for r in range(rows):
            asc = np.negative(values[r])  # ascending: -v <= -s  <=>  v >= s
            ge[r] = np.searchsorted(asc, neg_sig, side="right")
            # Entries above a splitter: as many as at or above it, unless the last of those equals it (a tie:
            # searched again; with continuous scores only a row's own sampled values).
            g = gt[r]
            g[:] = ge[r]
            tie = np.flatnonzero((g > 0) & (asc[np.maximum(g - 1, 0)] == neg_sig))
            g[tie] = np.searchsorted(asc, neg_sig[tie], side="left")
        cum = np.zeros((rows, n + 1), dtype=np.int32 if n < 2**31 else np.int64)
        np.cumsum(view.members, axis=1, out=cum[:, 1:])
        row_base = (np.arange(rows, dtype=np.int64) * (n + 1))[:, None]
        mge = np.take(cum, ge + row_base).sum(axis=0, dtype=np.int64)
        mgt = np.take(cum, gt + row_base).sum(axis=0, dtype=np.int64)
        del cum
        self.ge_rows, self.gt_rows = ge, gt
        nge, ngt = ge.sum(axis=0), gt.sum(axis=0)
        self.f = nge - mge  # the splitter's point: non-members and members scoring at least it
        self.t = mge
        self.a = (nge - ngt) - (mge - mgt)  # its tie group (the step into its point)
        self.b = mge - mgt
        # Entries strictly between splitter j and j + 1 (bucket j); the last splitter is the pooled minimum.
        self.bucket = np.append(ngt[1:] - nge[:-1], 0)

    def thinned(self, n_in: int, n_out: int, max_points: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The thinned curve, or None when it cannot be shown that the full curve has > max_points points."""
        J = self.sig.size
        c = np.unique(count_levels(fpr_grid(max_points), n_out))
        j1 = np.searchsorted(self.f, c, side="right")  # first splitter with more than c non-members
        mid = (j1 > 0) & (j1 < J)  # the answer lies in splitter j1 - 1 or its bucket
        answers_f = [np.zeros(1, np.int64), np.array([self.f[-1]])]  # the origin and the last point
        answers_t = [np.zeros(1, np.int64), np.array([self.t[-1]])]
        seg, goal = j1[mid] - 1, c[mid]
        segs = np.unique(seg)
        # Kept points seen: the last point, splitters followed directly by another splitter, and the gathered.
        empty = np.flatnonzero(self.bucket[:-1] == 0)
        empty = empty[~np.isin(empty, segs)]
        known = 1 + int(np.count_nonzero((self.a[empty] != self.a[empty + 1]) | (self.b[empty] != self.b[empty + 1])
                                         | (empty == 0)))
        pending_seg = []
        # The buckets a batch at a time (small arrays, reused memory).
        bounds = _batch_bounds(self.bucket[segs], GATHER_BATCH)
        for a0, b0 in bounds:
            batch = segs[a0:b0]
            loc = self._local(batch)
            known += int(np.count_nonzero(loc.kept))
            here = (seg >= batch[0]) & (seg <= batch[-1])
            ok, f, t = loc.resolve(batch, seg[here], seg[here], goal[here])
            answers_f.append(f)
            answers_t.append(t)
            pending_seg.append(seg[here][~ok])
        if known < max_points:
            return None  # the full curve may have <= max_points points: thin_curve would keep them all
        # Unresolved: every point from the segment's splitter down to the answer was dropped: look in the buckets
        # above (twice as many each time; the pooled first point is always kept).
        lo = np.concatenate(pending_seg) if pending_seg else np.zeros(0, np.int64)
        width = 1
        while lo.size:
            seg = lo - 1
            if (seg < 0).any():  # pragma: no cover - the first point is always kept
                raise AssertionError("pooled curve: no kept point above the first splitter")
            width *= 2
            lo = np.maximum(seg - width + 1, 0)
            segs = np.unique(np.concatenate([np.arange(a, b + 1) for a, b in set(zip(lo.tolist(), seg.tolist()))]))
            loc = self._local(segs)
            ok, f, t = loc.resolve(segs, lo, seg, np.full(seg.size, np.iinfo(np.int64).max))
            answers_f.append(f)
            answers_t.append(t)
            lo = lo[~ok]
        f = np.concatenate(answers_f)
        t = np.concatenate(answers_t)
        _, first_of = np.unique(f + t, return_index=True)  # points are ordered by f + t (strictly increasing)
        f, t = f[first_of], t[first_of]
        return f.astype(np.float64) / float(n_out), t.astype(np.float64) / float(n_in)

    def _local(self, segs: np.ndarray) -> "_Local":
        """The points of splitters ``segs`` (sorted) and of their buckets, merged, with what is kept."""
        rows, n = self.values.shape
        lo = self.ge_rows[:, segs]  # bucket j: row positions [ge_j, gt_{j+1})
        hi = np.where(segs + 1 < self.sig.size, self.gt_rows[:, np.minimum(segs + 1, self.sig.size - 1)], lo)
        lengths = (hi - lo).T.ravel()  # segment-major
        starts = (lo + (np.arange(rows, dtype=np.int64) * n)[:, None]).T.ravel()
        size_g = int(lengths.sum())
        idx = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths) + np.arange(size_g)
        vals = np.take(self.values.reshape(-1), idx)
        mem = np.take(self.members.reshape(-1), idx)
        order = np.argsort(np.negative(vals), kind="stable")  # buckets are disjoint ranges: segment-major
        vals, mem = vals[order], mem[order]
        per_seg = self.bucket[segs]
        seg_of = np.repeat(np.arange(segs.size), per_seg)
        # Tie groups (points) within the gathered entries.
        ends = np.ones(size_g, dtype=bool)
        if size_g > 1:
            ends[:-1] = vals[1:] != vals[:-1]
        group_end = np.flatnonzero(ends)
        cm = np.zeros(size_g + 1, dtype=np.int64)  # members among the first i gathered entries
        np.cumsum(mem, out=cm[1:])
        prev_end = np.concatenate(([0], group_end[:-1] + 1))  # each group's first entry
        g_mem = cm[group_end + 1] - cm[prev_end]
        g_all = group_end + 1 - prev_end
        g_seg = seg_of[group_end]
        # Cumulative counts of the groups within their segment, on top of the segment's splitter.
        seg_first = np.cumsum(per_seg) - per_seg  # first gathered entry of each segment
        g_cm = cm[group_end + 1]
        before_m = cm[seg_first]  # members before the segment
        g_t_in = g_cm - before_m[g_seg]
        g_n_in = group_end + 1 - seg_first[g_seg]
        base_f, base_t = self.f[segs], self.t[segs]
        g_t = base_t[g_seg] + g_t_in
        g_f = base_f[g_seg] + (g_n_in - g_t_in)
        # Local list: per segment its splitter, then its groups.
        n_groups = np.bincount(g_seg, minlength=segs.size)
        size = 1 + n_groups
        start = np.cumsum(size) - size
        total = int(size.sum())
        pos_groups = np.ones(total, dtype=bool)
        pos_groups[start] = False
        f = np.empty(total, np.int64)
        t = np.empty(total, np.int64)
        a = np.empty(total, np.int64)
        b = np.empty(total, np.int64)
        f[start], t[start], a[start], b[start] = base_f, base_t, self.a[segs], self.b[segs]
        f[pos_groups], t[pos_groups] = g_f, g_t
        a[pos_groups], b[pos_groups] = g_all - g_mem, g_mem
        # The step out of each point: the next local point's group, or the next splitter's after a segment.
        a_next = np.empty(total, np.int64)
        b_next = np.empty(total, np.int64)
        a_next[:-1], b_next[:-1] = a[1:], b[1:]
        last = start + size - 1
        after = np.minimum(segs + 1, self.sig.size - 1)
        a_next[last], b_next[last] = self.a[after], self.b[after]
        kept = (a != a_next) | (b != b_next)
        kept[start[segs == 0]] = True  # the pooled first point
        last_kept = np.maximum.accumulate(np.where(kept, np.arange(total), -1))
        return _Local(f, t, kept, last_kept, start, size)


def _batch_bounds(sizes: np.ndarray, batch: int) -> list[tuple[int, int]]:
    """Consecutive ranges of ``sizes`` summing to about ``batch`` (at least one item each)."""
    out, a, acc = [], 0, 0
    for i, s in enumerate(sizes.tolist()):
        if acc and acc + s > batch:
            out.append((a, i))
            a, acc = i, 0
        acc += s
    if a < len(sizes):
        out.append((a, len(sizes)))
    return out


class _Local:
    """Gathered points (per segment: its splitter, then its bucket's points), their counts and kept flags."""

    def __init__(self, f: np.ndarray, t: np.ndarray, kept: np.ndarray, last_kept: np.ndarray, start: np.ndarray,
                 size: np.ndarray):
        self.f, self.t, self.kept, self.last_kept, self.start, self.size = f, t, kept, last_kept, start, size

    def resolve(self, segs: np.ndarray, lo: np.ndarray, hi: np.ndarray, goal: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per query: the last kept point with at most ``goal`` non-members in segments ``lo``..``hi`` (all
        gathered, ``segs`` sorted). Returns (found, its f, its t) with f and t of the found ones only."""
        k_hi = np.searchsorted(segs, hi)
        end = self.start[k_hi] + self.size[k_hi] - 1
        at = np.minimum(np.searchsorted(self.f, goal, side="right") - 1, end)
        best = self.last_kept[at]
        ok = best >= self.start[np.searchsorted(segs, lo)]
        return ok, self.f[best[ok]], self.t[best[ok]]
