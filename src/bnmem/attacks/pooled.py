"""The pooled ROC curve of many sorted rows, thinned for drawing, without merging the rows.

The pooled curve (all targets' scores together, as the LiRA paper plots it) is only drawn, so the
streaming evaluator keeps it thinned (:func:`thin_curve`): per FPR level of a
log and a linear grid, the last point of the full curve at or below that level. The full curve needs
the rows merged into one sorted sequence (tens of millions of entries at CIFAR scale); the thinned
one needs only the few thousand points the grid picks, and those are found here from exact counts:

- *splitters*: about every ``stride``-th pooled score (every few values of a denser sample of
  every row, sorted: the gaps between splitters come out even), plus each row's first and last;
  each row's entries scoring at least and above each splitter (the row merged with the splitters)
  give, summed over rows, the pooled counts at every splitter exactly;
- between two consecutive splitters lies a *bucket* of a few hundred entries; only the buckets
  that hold a grid level's point are gathered from the rows and sorted (each in a row of its own).

A grid level g picks the last point whose FPR = fp / n_out is at most g, i.e. (division being
monotone) whose non-member count is at most c(g), the largest such whole number. Among the points
``sklearn.metrics.roc_curve`` keeps (``drop_intermediate``: a point whose step in equals its step
out is dropped; the first and the last are always kept), that is the last kept point at or before
the last point with fp ≤ c(g). A point's step in is its own tie group's counts, its step out the
next point's, so whether a point is kept is read off two neighbouring groups.

A view made of two others (all examples = outliers + inliers) is counted from its parts
(:func:`thinned_pooled_curves`): the small part merged whole, the large part's rows merged with
splitters that serve the whole view too; the whole view's counts are the parts' sums.

The thinned curve equals :func:`thin_curve` of the merged rows' curve, bit for
bit, whenever that curve has more than ``max_points`` points; when this cannot be shown from the
points seen (the kept points counted in the gathered buckets and between adjacent splitters), the
rows are merged as before (:meth:`bnmem.attacks.metrics.RankedRows.merged`).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np

from bnmem.attacks import kernels
from bnmem.attacks.metrics import RankedRows, _finite_scores

# Pooled ROC curves (all targets' scores together) are only drawn; the streaming evaluator thins them.
POOLED_POINTS = 4000
# Below this many pooled entries the rows are simply merged (the full curve is cheap).
MERGE_BELOW = 1 << 16
# A view made of two parts is computed from them when the smaller part holds at most this share of it.
SPLIT_SHARE = 0.25
# Entries gathered from the buckets at a time.
GATHER_BATCH = 1 << 18
# Splitters sampled from a pooled sample this many times as dense (the splitters' gaps even out).
OVERSAMPLE = 8
# Pooled entries per bucket, times rows × sqrt(n / 12,000) (default_stride).
STRIDE_SCALE = 0.7
# Entries merged at a time (rows of a row block and the splitters).


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
    out = _Splitters.of_view(view, stride).thinned(n_in, total - n_in, max_points)
    return _merged(view, max_points) if out is None else out


def thinned_pooled_curves(views: Mapping[str, RankedRows], masks: Mapping[str, np.ndarray], max_points: int
                          ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """:func:`thinned_pooled_curve` of every view (the same rows restricted to the columns of ``masks``).

    Where one view's columns are two others' together (``all`` = outliers + inliers) and the smaller part
    holds at most :data:`SPLIT_SHARE` of them, that view is not merged with splitters of its own: the
    smaller part is merged whole (its curve, the slow way, costs no more than its splitters), the larger
    part is merged with splitters that serve the whole view too, and the whole view's counts are the two
    parts' sums (:func:`_split_curves`).
    """
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    split = _split_of(masks)
    if split is not None:
        out.update(_split_curves(*(views[k] for k in split), split, max_points))
    for name, view in views.items():
        if name not in out:
            out[name] = thinned_pooled_curve(view, max_points)
    return out


def _split_of(masks: Mapping[str, np.ndarray]) -> tuple[str, str, str] | None:
    """(whole, larger part, smaller part): three masks where the parts are disjoint, both non-empty, make up
    the whole together, and the smaller holds at most SPLIT_SHARE of it; None if no three do."""
    names = list(masks)
    for whole in names:
        m = np.asarray(masks[whole], dtype=bool)
        for i, x in enumerate(names):
            for y in names[i + 1:]:
                if whole in (x, y):
                    continue
                mx, my = np.asarray(masks[x], dtype=bool), np.asarray(masks[y], dtype=bool)
                nx, ny = int(mx.sum()), int(my.sum())
                if (nx and ny and not (mx & my).any() and np.array_equal(mx | my, m)
                        and min(nx, ny) <= SPLIT_SHARE * (nx + ny)):
                    return (whole, x, y) if nx >= ny else (whole, y, x)
    return None


def _split_curves(whole: RankedRows, large: RankedRows, small: RankedRows, names: tuple[str, str, str],
                  max_points: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The thinned curves of a view and of the two parts it is made of (:func:`thinned_pooled_curves`)."""
    merged = small.merged()
    out = {names[2]: thin_curve(*merged.curves()[0], max_points=max_points)}
    rows, n = large.values.shape
    n_in = int(np.count_nonzero(large.members))
    if rows < 2 or rows * n < MERGE_BELOW or n_in == 0 or n_in == rows * n:
        return out  # the caller computes the other two on their own
    values = _clipped(large)
    sig_large = _splitter_values(values, default_stride(rows, n))
    # The small part, merged: its entries at or above and above each splitter by one search each.
    small_vals = _clipped(merged)[0]
    sig = np.unique(np.concatenate([sig_large, small_vals[[0, -1]]]))[::-1]  # the whole's ends included
    ge, gt, counts = _row_positions(values, large.members, sig)
    own = np.flatnonzero(np.isin(sig, sig_large))  # the large part's own splitters (its values)
    large_sp = _Splitters(sig[own], tuple(c[own] for c in counts),
                          lambda js: _gather_rows(values, large.members, ge, gt, js, own))
    out[names[1]] = _finish(large_sp, large, n_in, max_points)
    # The small part's counts at every splitter: one search each in its merged scores.
    asc = np.negative(small_vals)
    neg_sig = np.negative(sig)
    s_ge, s_gt = np.searchsorted(asc, neg_sig, side="right"), np.searchsorted(asc, neg_sig, side="left")
    s_cum = np.zeros(asc.size + 1, dtype=np.int64)
    np.cumsum(merged.members[0], out=s_cum[1:])
    whole_counts = tuple(c + d for c, d in zip(counts, (s_ge, s_gt, s_cum[s_ge], s_cum[s_gt])))

    def whole_gather(js: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A bucket of the whole: the large part's rows' entries in it and the small part's (a slice of
        its merged scores), bucket by bucket."""
        big_v, big_m, big_n = _gather_rows(values, large.members, ge, gt, js, counts_too=True)
        lo = s_ge[js]
        n_small = np.where(js + 1 < sig.size, s_gt[np.minimum(js + 1, sig.size - 1)], lo) - lo
        first = np.cumsum(big_n + n_small) - (big_n + n_small)
        out_v = np.empty(big_v.size + int(n_small.sum()))
        out_m = np.empty(out_v.size, dtype=bool)
        at = _runs(first, big_n)
        out_v[at], out_m[at] = big_v, big_m
        at, src = _runs(first + big_n, n_small), _runs(lo, n_small)
        out_v[at], out_m[at] = np.take(small_vals, src), np.take(merged.members[0], src)
        return out_v, out_m

    whole_n_in = n_in + int(np.count_nonzero(merged.members))
    whole_sp = _Splitters(sig, whole_counts, whole_gather)
    out[names[0]] = _finish(whole_sp, whole, whole_n_in, max_points)
    return out


def _finish(splitters: "_Splitters", view: RankedRows, n_in: int, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """The splitters' thinned curve, or the view's merged one where the counts cannot show it."""
    out = splitters.thinned(n_in, view.values.size - n_in, max_points)
    return _merged(view, max_points) if out is None else out


def _merged(view: RankedRows, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """The slow, obviously-correct way: merge the rows, the whole curve, thin it."""
    return thin_curve(*view.merged().curves()[0], max_points=max_points)


class _Splitters:
    """Pooled counts at sampled splitter values (descending), and where each row holds each splitter."""

    def __init__(self, sig: np.ndarray, counts: _Counts, gather: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]):
        """
        Args:
            sig: the splitters, distinct, descending; the first and the last are the pooled maximum and minimum.
            counts: pooled entries and members at or above and above each splitter.
            gather: splitter indices (sorted) -> the scores (clipped as the curve sees them) and member flags
                of their buckets, bucket by bucket.
        """
        self.sig, self.gather = sig, gather
        nge, ngt, mge, mgt = counts
        self.f = nge - mge  # the splitter's point: non-members and members scoring at least it
        self.t = mge
        self.a = (nge - ngt) - (mge - mgt)  # its tie group (the step into its point)
        self.b = mge - mgt
        # Entries strictly between splitter j and j + 1 (bucket j); the last splitter is the pooled minimum.
        self.bucket = np.append(ngt[1:] - nge[:-1], 0)

    @classmethod
    def of_view(cls, view: RankedRows, stride: int | None) -> "_Splitters":
        """Splitters sampled from the view's own rows, each row merged with them."""
        values = _clipped(view)
        rows, n = values.shape
        sig = _splitter_values(values, default_stride(rows, n) if stride is None else stride)
        ge, gt, counts = _row_positions(values, view.members, sig)
        return cls(sig, counts, lambda js: _gather_rows(values, view.members, ge, gt, js))

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
        # Per gathered segment, its last kept point (for the levels whose own segment has none before them).
        seen, has = np.zeros(J, dtype=bool), np.zeros(J, dtype=bool)
        last_f, last_t = np.zeros(J, dtype=np.int64), np.zeros(J, dtype=np.int64)
        no_limit = np.iinfo(np.int64).max

        def note(loc: _Local, batch: np.ndarray) -> None:
            ok, f, t = loc.resolve(batch, batch, batch, np.full(batch.size, no_limit))
            seen[batch], has[batch[ok]], last_f[batch[ok]], last_t[batch[ok]] = True, True, f, t

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
            note(loc, batch)
        if known < max_points:
            return None  # the full curve may have <= max_points points: thin_curve would keep them all
        # Unresolved: every point from the segment's splitter down to the answer was dropped: the answer is the
        # last kept point of the nearest segment above that has one (the pooled first point always is). The
        # segments above are looked at in windows twice as wide each time, each segment gathered once.
        lo = np.concatenate(pending_seg) if pending_seg else np.zeros(0, np.int64)
        width = 1
        while lo.size:
            seg = lo - 1
            if (seg < 0).any():  # pragma: no cover - the first point is always kept
                raise AssertionError("pooled curve: no kept point above the first splitter")
            width *= 2
            lo = np.maximum(seg - width + 1, 0)
            inside = np.zeros(J + 1, dtype=np.int64)  # the windows [lo, seg], as +1/-1 steps
            np.add.at(inside, lo, 1)
            np.add.at(inside, seg + 1, -1)
            new = np.flatnonzero((np.cumsum(inside[:-1]) > 0) & ~seen)
            if new.size:
                note(self._local(new), new)
            nearest = np.maximum.accumulate(np.where(has, np.arange(J), -1))[seg]
            ok = nearest >= lo
            answers_f.append(last_f[nearest[ok]])
            answers_t.append(last_t[nearest[ok]])
            lo = lo[~ok]
        f = np.concatenate(answers_f)
        t = np.concatenate(answers_t)
        _, first_of = np.unique(f + t, return_index=True)  # points are ordered by f + t (strictly increasing)
        f, t = f[first_of], t[first_of]
        return f.astype(np.float64) / float(n_out), t.astype(np.float64) / float(n_in)

    def _local(self, segs: np.ndarray) -> "_Local":
        """The points of splitters ``segs`` (sorted) and of their buckets, merged, with what is kept."""
        per_seg = self.bucket[segs]
        vals, mem = _sort_segments(*self.gather(segs), per_seg)
        size_g = vals.size
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


_Counts = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _clipped(view: RankedRows) -> np.ndarray:
    """The view's scores as its curve sees them (±inf clipped to the largest finite floats)."""
    return _finite_scores(view.values) if view.has_inf() else view.values


def default_stride(rows: int, n: int) -> int:
    """Entries per bucket (pooled) when none is asked for: balances the rows' merges with the splitters
    (rows × splitters) against the gathered buckets (grid levels × bucket size)."""
    return max(16, int(STRIDE_SCALE * rows * math.sqrt(n / 12000.0)))


def _splitter_values(values: np.ndarray, stride: int) -> np.ndarray:
    """Distinct splitter values, descending, about ``stride`` pooled entries apart, with every row's ends.

    Every row is sampled ``OVERSAMPLE`` times as densely (each row at its own phase: rows scored alike put
    their k-th entries at alike values), the pooled sample sorted, and every ``OVERSAMPLE``-th kept: the
    pooled gaps between splitters are then close to ``stride`` instead of spread like a random sample's
    (whose long gaps hold most grid levels: each level's bucket is gathered and sorted)."""
    rows, n = values.shape
    fine = max(1, stride // OVERSAMPLE)  # entries between a row's samples (and between pooled ones)
    phase = (np.arange(rows) * fine) // max(rows, 1)
    picks = np.arange(0, n, fine)[None, :] + phase[:, None]
    sample = np.take_along_axis(values, np.minimum(picks, n - 1), axis=1).reshape(-1)
    sample = np.sort(sample)[::-1][::max(1, stride // fine)]
    return np.unique(np.concatenate([sample, values[:, 0], values[:, -1]]))[::-1]


def _row_positions(values: np.ndarray, members: np.ndarray, sig: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, _Counts]:
    """Per row and splitter, the entries at or above it and above it (positions in the descending row), and
    the pooled counts: entries and members at or above and above each splitter (summed over rows).

    One merge-walk of each row with the splitters in the compiled kernels
    (:func:`bnmem.attacks.kernels.row_positions`), a binary search per row and splitter without them."""
    rows, n = values.shape
    dtype = np.int32 if n < 2**31 else np.int64
    ge = np.empty((rows, sig.size), dtype=dtype)
    gt = np.empty((rows, sig.size), dtype=dtype)
    counts = np.zeros((4, sig.size), dtype=np.int64)  # nge, ngt, mge, mgt
    kern = kernels.compiled()
    if kern is not None:
        kern["row_positions"](np.ascontiguousarray(values), np.ascontiguousarray(members), sig, ge, gt, counts)
        return ge, gt, tuple(counts)
    neg_sig = np.negative(sig)
    before = np.zeros(n + 1, dtype=np.int64)  # members before each position
    for r in range(rows):
        ge[r] = np.searchsorted(-values[r], neg_sig, side="right")
        gt[r] = np.searchsorted(-values[r], neg_sig, side="left")
        np.cumsum(members[r], out=before[1:])
        for total, pos in zip(counts, (ge[r], gt[r], before[ge[r]], before[gt[r]])):
            total += pos
    return ge, gt, tuple(counts)


def _runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices of consecutive runs: starts[k], starts[k] + 1, ... (lengths[k] of them), run after run."""
    total = int(lengths.sum())
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)


def _gather_rows(values: np.ndarray, members: np.ndarray, ge: np.ndarray, gt: np.ndarray, js: np.ndarray,
                 cols: np.ndarray | None = None, counts_too: bool = False) -> tuple[np.ndarray, ...]:
    """The entries of buckets ``js`` (sorted splitter indices) in every row, bucket by bucket: bucket j is
    row positions [ge_j, gt_{j+1}) (none after the last splitter). ``cols`` maps splitter indices to the
    columns of ``ge`` and ``gt`` (None: the same). Returns scores and member flags (and with
    ``counts_too`` the entries per bucket)."""
    rows, n = values.shape
    size = ge.shape[1] if cols is None else cols.size
    nxt = np.minimum(js + 1, size - 1)
    lo = ge[:, js if cols is None else cols[js]]
    hi = np.where(js + 1 < size, gt[:, nxt if cols is None else cols[nxt]], lo)
    lengths = (hi - lo).T.ravel()  # bucket-major
    idx = _runs((lo + (np.arange(rows, dtype=np.int64) * n)[:, None]).T.ravel(), lengths)
    vals, mem = np.take(values.reshape(-1), idx), np.take(members.reshape(-1), idx)
    return (vals, mem, (hi - lo).sum(axis=0)) if counts_too else (vals, mem)


def _sort_segments(vals: np.ndarray, mem: np.ndarray, per_seg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gathered entries (consecutive segments of ``per_seg`` entries) sorted descending within each
    segment, with their member flags. The order within a run of equal scores is arbitrary (the points are
    read at the runs' ends).

    Segments are disjoint score ranges, so one sort of everything would do, but sorting each segment in a
    row of its own (padded to a power of two; segments of alike size together) stays in cache: several
    times faster."""
    out_v, out_m = np.empty_like(vals), np.empty_like(mem)
    first = np.cumsum(per_seg) - per_seg
    width = np.left_shift(1, np.ceil(np.log2(np.maximum(per_seg, 1))).astype(np.int64))
    classes = np.unique(width).tolist()
    for w in classes:
        sel = np.flatnonzero(width == w) if len(classes) > 1 else np.arange(per_seg.size)
        cnt = per_seg[sel]
        n_sel = int(cnt.sum())
        cnt_first = np.cumsum(cnt) - cnt
        # The class's entries in padded rows of w: entry i at row_base + column (its place in the segment).
        row_base = np.repeat(np.arange(sel.size, dtype=np.int64) * w, cnt)
        at = row_base + (np.arange(n_sel) - np.repeat(cnt_first, cnt))
        src = None if len(classes) == 1 else np.repeat(first[sel] - cnt_first, cnt) + np.arange(n_sel)
        keys = np.full(sel.size * w, np.inf)  # padding sorts last (scores here are finite)
        flags = np.zeros(sel.size * w, dtype=bool)
        keys[at] = np.negative(vals if src is None else vals[src])
        flags[at] = mem if src is None else mem[src]
        # Sorted, a row's column c holds the entry at row_base + order[row, c]: one take of each array.
        at = row_base + np.take(np.argsort(keys.reshape(sel.size, w), axis=1).reshape(-1), at)
        got_v, got_m = np.negative(np.take(keys, at)), np.take(flags, at)
        if src is None:
            out_v, out_m = got_v, got_m
        else:
            out_v[src], out_m[src] = got_v, got_m
    return out_v, out_m


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
