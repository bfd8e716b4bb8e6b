"""Leave-one-out reference statistics for every target at once.

In a leave-one-out evaluation over a balanced keep matrix (every example IN for
the same number C of models), target t's IN references for example j are the
example's IN models in model order with one removed: t itself when t trained
on j, otherwise the last one (the truncation to the smallest count over
examples, see :func:`bnmem.attacks.keep.split_references`); when t trained on
nothing, none is removed. The same holds for OUT.

:class:`Side` is what the streaming evaluator uses: the removed value is t's own
φ or the last model's, so a few middle order statistics, the mean and M2 of the
C values and the last value give every target's median (bit for bit) and spread
elementwise, with no per-target gather. The prefix/suffix summaries below handle
a removal at any position without cancellation:

- median: the i-th smallest of the C − 1 remaining values is the sorted value
  at i, or at i + 1 from the removed value's rank on;
- mean and variance: Chan's merge of the prefix before and the suffix after the
  removed position (all terms non-negative, so no cancellation, unlike
  "total minus the removed value"); :class:`Side` falls back to it where the
  subtraction would cancel;
- log of a sum of probabilities: ``logaddexp`` of prefix and suffix log-sums
  (RMIA's reference means).

Arrays here: ``vals`` [C, B, V] (a side's values in model order), ``pos``
[T, B] (removed position per target and example, C for none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SideStats:
    """Prefix/suffix summaries of one side's C values per (example, view).

    Attributes:
        sorted_vals: [C, B, V] values sorted per (example, view).
        rank_ext: [C + 1, B, V] rank of the value at each model-order position;
            row C is C (a removed position of C removes nothing).
        pre_mean, pre_m2: [C + 1, B, V] mean and sum of squared deviations of the
            first p values (row p); row 0 is empty (0, 0).
        suf_mean, suf_m2: [C + 2, B, V] the same for values p..C−1; rows C and
            C + 1 are empty.
    """

    sorted_vals: np.ndarray
    rank_ext: np.ndarray
    pre_mean: np.ndarray
    pre_m2: np.ndarray
    suf_mean: np.ndarray
    suf_m2: np.ndarray

    @property
    def size(self) -> int:
        return int(self.pre_mean.shape[0]) - 1


def _welford(vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Running mean and M2 of vals[0:p] for p = 0..C (Welford, exact in exact arithmetic)."""
    c = vals.shape[0]
    mean = np.zeros((c + 1,) + vals.shape[1:])
    m2 = np.zeros_like(mean)
    for i in range(c):
        delta = vals[i] - mean[i]
        mean[i + 1] = mean[i] + delta / (i + 1)
        m2[i + 1] = m2[i] + delta * (vals[i] - mean[i + 1])
    return mean, m2


def side_stats(vals: np.ndarray, sort: bool = True) -> SideStats:
    """Summaries of ``vals`` [C, B, V] (float64, model order) for leave-one-out queries.

    With ``sort=False`` only the moments are prepared (no medians).
    """
    c = vals.shape[0]
    if sort:
        order = np.argsort(vals, axis=0, kind="stable")
        sorted_vals = np.take_along_axis(vals, order, axis=0)
        rank_ext = np.full((c + 1,) + vals.shape[1:], c, dtype=np.intp)
        np.put_along_axis(rank_ext[:c], order, np.arange(c, dtype=np.intp).reshape((c,) + (1,) * (vals.ndim - 1)),
                          axis=0)
    else:
        sorted_vals = rank_ext = np.empty((0,) + vals.shape[1:])
    pre_mean, pre_m2 = _welford(vals)
    rev_mean, rev_m2 = _welford(vals[::-1])
    # suffix p (values p..C-1) = reversed prefix of length C - p; rows C, C+1 empty.
    suf_mean = np.zeros((c + 2,) + vals.shape[1:])
    suf_m2 = np.zeros_like(suf_mean)
    suf_mean[: c + 1] = rev_mean[::-1]
    suf_m2[: c + 1] = rev_m2[::-1]
    return SideStats(sorted_vals, rank_ext, pre_mean, pre_m2, suf_mean, suf_m2)


def _flat_index(pos: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Flat indices into a C-contiguous [R, B, V] array of the rows ``pos`` [T, B] for every view: [T, B, V].

    One 1-D ``take`` with these is several times faster than ``take_along_axis``
    with broadcast index grids, and the same indices serve several arrays.
    """
    _, b, v = shape
    off = np.arange(b * v, dtype=np.intp).reshape(b, v)
    return pos[:, :, None].astype(np.intp) * (b * v) + off


def _take(arr: np.ndarray, flat: np.ndarray) -> np.ndarray:
    return np.take(arr.reshape(-1), flat)


def loo_median(stats: SideStats, pos: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Median of each side's values with position ``pos`` removed, as ``np.median`` computes it.

    Args:
        stats: :func:`side_stats` of a side with C values.
        pos: int [T, B]; C removes nothing.
        k: int [T], the number of values left for each target (C − 1 where
            ``pos`` < C, C where ``pos`` = C; constant per target).

    Returns:
        float64 [T, B, V].
    """
    shape = stats.sorted_vals.shape
    r = _take(stats.rank_ext, _flat_index(pos, stats.rank_ext.shape))
    k = np.asarray(k, dtype=np.intp)[:, None, None]
    lo, hi = (k - 1) // 2, k // 2
    # The i-th smallest remaining value sits at sorted index i, or i + 1 from the removed rank on.
    off = np.arange(shape[1] * shape[2], dtype=np.intp).reshape(1, shape[1], shape[2])
    stride = shape[1] * shape[2]
    a = _take(stats.sorted_vals, (lo + (lo >= r)) * stride + off)
    if (lo == hi).all():
        return a
    b = _take(stats.sorted_vals, (hi + (hi >= r)) * stride + off)
    # np.median of an even count is the mean of the two middle values, (a + b) / 2.
    return np.where(lo == hi, a, (a + b) / 2)


def loo_m2(stats: SideStats, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Count and M2 (sum of squared deviations from the mean) with position ``pos`` removed.

    Chan's merge of the prefix before and the suffix after ``pos``.

    Args:
        stats: :func:`side_stats` of a side with C values.
        pos: int [T, B]; C removes nothing.

    Returns:
        ``(n, m2)``: n float64 [T, B, 1]; m2 float64 [T, B, V].
    """
    c = stats.size
    n_a = pos[:, :, None].astype(np.float64)
    n_b = np.maximum(c - 1 - pos[:, :, None], 0).astype(np.float64)
    n = n_a + n_b
    flat = _flat_index(pos, stats.pre_mean.shape)
    step = stats.pre_mean.shape[1] * stats.pre_mean.shape[2]  # suffix row pos + 1
    delta = _take(stats.suf_mean, flat + step) - _take(stats.pre_mean, flat)
    m2 = _take(stats.pre_m2, flat) + _take(stats.suf_m2, flat + step)
    m2 += delta * delta * (n_a * n_b / n)
    return n, m2


def loo_moments(stats: SideStats, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Count, mean and M2 with position ``pos`` [T, B] removed (C: none).

    Returns:
        ``(n, mean, m2)``: n float64 [T, B, 1]; mean and m2 float64 [T, B, V].
    """
    c = stats.size
    n_a = pos[:, :, None].astype(np.float64)
    n_b = np.maximum(c - 1 - pos[:, :, None], 0).astype(np.float64)
    n = n_a + n_b
    flat = _flat_index(pos, stats.pre_mean.shape)
    step = stats.pre_mean.shape[1] * stats.pre_mean.shape[2]
    mean_a, mean_b = _take(stats.pre_mean, flat), _take(stats.suf_mean, flat + step)
    delta = mean_b - mean_a
    mean = mean_a + delta * (n_b / n)
    m2 = _take(stats.pre_m2, flat) + _take(stats.suf_m2, flat + step) + delta * delta * (n_a * n_b / n)
    return n, mean, m2


def log_prefix_suffix(log_vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Log of prefix and suffix sums of exp(log_vals) [C, B] in model order.

    Returns:
        ``(pre, suf)``: pre [C + 1, B] (row p: log Σ of the first p; row 0 = −inf),
        suf [C + 2, B] (row p: log Σ of values p..C−1; rows C, C + 1 = −inf).
    """
    c = log_vals.shape[0]
    pre = np.empty((c + 1,) + log_vals.shape[1:])
    suf = np.empty((c + 2,) + log_vals.shape[1:])
    pre[0] = suf[c:] = -np.inf
    if c:  # accumulated straight into place (suffixes: the reversed rows, written reversed)
        np.logaddexp.accumulate(log_vals, axis=0, out=pre[1:])
        np.logaddexp.accumulate(log_vals[::-1], axis=0, out=suf[c - 1::-1])
    return pre, suf


def loo_log_mean(pre: np.ndarray, suf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """log of the mean of exp(values) with position ``pos`` [T, B] removed (C: none).

    Returns:
        float64 [T, B].
    """
    c = pre.shape[0] - 1
    total = np.logaddexp(np.take_along_axis(pre, pos, axis=0), np.take_along_axis(suf, pos + 1, axis=0))
    return total - np.log(np.where(pos < c, c - 1, c))


def loo_log_means_by_position(pre: np.ndarray, suf: np.ndarray) -> np.ndarray:
    """:func:`loo_log_mean` for every removed position p = 0..C at once: [C + 1, B] (row p removes p).

    Every target's value is one of these rows' entries (its removed position's), bit for bit: the same
    ``logaddexp`` of the same prefix and suffix, minus the same log count. A side's C values give C + 1
    rows, fewer than the T targets that read them, so :func:`loo_log_mean_at` of this table does less work.
    """
    c = pre.shape[0] - 1
    table = np.logaddexp(pre, suf[1:])
    with np.errstate(divide="ignore"):
        logs = np.log(np.array([c - 1, c], dtype=np.float64))  # the counts left: C − 1, or C (none removed)
    table[:c] -= logs[0]
    table[c] -= logs[1]
    return table


def loo_log_mean_at(table: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Entries of :func:`loo_log_means_by_position`'s ``table`` [C + 1, B] at the rows ``pos`` [T, B]: [T, B]."""
    b = table.shape[1]
    return np.take(table.reshape(-1), pos.astype(np.intp, copy=False) * b + np.arange(b, dtype=np.intp))


# ---------------------------------------------------------------- one removal per target: its own value or the last

# A removal that leaves less than this fraction of a side's M2 is recomputed exactly (prefix/suffix merge):
# "M2 minus the removed value's share" loses about log2(1 / fraction) bits to cancellation, here at most 4.
EXACT_BELOW = 1.0 / 16


@dataclass(frozen=True)
class Side:
    """One side's C reference values per (example, view), summarized for the leave-one-out removals.

    In a leave-one-out evaluation over a balanced keep matrix, target t's references on a side are the
    side's C values with one removed: t's own value when t is on that side (t's φ itself), otherwise the
    last model's (the truncation), or none when t has C references there. So per (example, view) a few
    middle order statistics, the mean and M2 of all C values and the last value are all that every
    target's median and spread need: O(1) elementwise work per target instead of a gather.

    Attributes:
        vals: [C, B, V] the values in model order.
        ranked: [B, V, C] the same sorted per (example, view).
        mean, m2: [B, V] mean and sum of squared deviations of all C values (two passes).
        last: [B, V] the last model's value.
    """

    vals: np.ndarray
    ranked: np.ndarray
    mean: np.ndarray
    m2: np.ndarray
    last: np.ndarray

    @classmethod
    def of(cls, vals: np.ndarray) -> "Side":
        """Summarize ``vals`` [C, B, V] (float64, model order, C >= 1)."""
        mean = vals.mean(axis=0)
        dev = vals - mean
        return cls(vals, np.sort(vals.transpose(1, 2, 0), axis=-1), mean, np.einsum("cbv,cbv->bv", dev, dev),
                   vals[-1])

    @property
    def size(self) -> int:
        return int(self.vals.shape[0])

    def _rank(self, i: int) -> np.ndarray:
        return np.ascontiguousarray(self.ranked[..., i])

    def median(self, removed: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Each target's median as ``np.median`` computes it, bit for bit.

        Args:
            removed: [T, B, V] the value each target removes (read where it removes one).
            k: [T] references left per target: C − 1 (one removed) or C (none).

        Returns:
            float64 [T, B, V].
        """
        c = self.size

        def without_one(r: np.ndarray, one: np.ndarray) -> np.ndarray:
            lo, hi = (c - 2) // 2, (c - 1) // 2
            # The i-th smallest of the others is the sorted value at i, or at i + 1 when the removed value
            # ranks at or below i (with ties, any of the equal values may be the one removed).
            a = np.where(r <= self._rank(lo), self._rank(lo + 1), self._rank(lo))
            if hi != lo:
                b = np.where(r <= self._rank(hi), self._rank(hi + 1), self._rank(hi))
                a = (a + b) / 2  # np.median of an even count: the mean of the two middle values
            return a

        def of_all() -> np.ndarray:
            lo, hi = (c - 1) // 2, c // 2
            return self._rank(lo) if lo == hi else (self._rank(lo) + self._rank(hi)) / 2

        return self._per_target(removed, k, without_one, of_all)

    def spread(self, removed: np.ndarray, k: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Each target's population std (ddof 0) of the side's values without the removed one.

        M2 without value r is M2 − (r − mean)²·C/(C − 1); where that keeps less than :data:`EXACT_BELOW`
        of M2 (the removed value carried almost all the spread) it is recomputed exactly from the lane's
        values by a prefix/suffix merge (:func:`loo_m2`).

        Args:
            removed: [T, B, V] the value each target removes (read where it removes one).
            k: [T] references left per target: C − 1 or C.
            pos: [T, B] the removed value's model-order position (C: none).

        Returns:
            float64 [T, B, V].
        """
        c = self.size

        def without_one(r: np.ndarray, one: np.ndarray) -> np.ndarray:
            d = r - self.mean
            d *= d
            d *= c / (c - 1.0)
            m2 = np.subtract(self.m2, d, out=d)
            bad = ~(m2 >= self.m2 * EXACT_BELOW)
            if bad.any():
                m2[bad] = self._exact_m2(np.flatnonzero(one), bad, pos)
            m2 /= c - 1
            return np.sqrt(m2, out=m2)

        return self._per_target(removed, k, without_one, lambda: np.sqrt(self.m2 / c))

    def _per_target(self, removed: np.ndarray, k: np.ndarray,
                    without_one: Callable[[np.ndarray, np.ndarray], np.ndarray],
                    of_all: Callable[[], np.ndarray]) -> np.ndarray:
        """[T, B, V]: ``without_one(r, one)`` for the targets that remove one value (``one``: [T] which; ``r``:
        their removed values), ``of_all()`` ([B, V]) for those that remove none; when every target removes
        one, ``without_one``'s own array is returned (no copy)."""
        one = k == self.size - 1
        if one.all():
            return without_one(removed, one)
        out = np.empty(removed.shape)
        if one.any():
            out[one] = without_one(removed[one], one)
        out[~one] = of_all()
        return out

    def _exact_m2(self, rows: np.ndarray, bad: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """M2 without the removed value at the flagged (row of ``rows``, example, view) places, exactly."""
        ti, bi, vi = np.nonzero(bad)
        lanes = self.vals[:, bi, vi]  # [C, F]: each flagged place's own lane
        _, m2 = loo_m2(side_stats(lanes[:, :, None], sort=False), pos[rows[ti], bi][None, :])
        return m2[0, :, 0]
