"""Empirical ε lower bounds from a membership-inference attack's ROC.

If training is (ε, δ)-differentially private, every membership test with
false-positive rate FPR and true-positive rate TPR obeys

    TPR ≤ e^ε · FPR + δ    and    1 − FPR ≤ e^ε · (1 − TPR) + δ,

so an observed test proves ε ≥ log((TPR − δ)/FPR) and
ε ≥ log((1 − FPR − δ)/(1 − TPR)) (Kairouz et al. 2015; used for auditing by
Jagielski, Ullman & Oprea 2020 and Nasr et al. 2021). With finitely many trials
TPR is replaced by a Clopper–Pearson lower bound and FPR by an upper bound.

How the 95% is split (see docs/attacks.md). Per target the thresholds form a
small family fixed before looking at the scores' values, by rank: "above the
(k+1)-th largest non-member score" for k in a geometric grid G(n_out) (0, 1,
2, 3, 4, 5, 6, 8, 10, … and the same distances from n_out), where the FPR is
what the low-FPR term needs, and "above the j-th smallest member score" for j
in G(n_in), where the FNR is what the complement term needs. At each of the K
thresholds two one-sided Clopper–Pearson bounds (TPR from below, FPR from
above) are taken at α/(2K) each, α = 1 − level: a union bound over 2K
statements, so with probability ≥ level all hold at once and the maximum over
thresholds is a lower bound. Both terms use the same two bounds (1 − FPR_high
bounds the TNR from below, 1 − TPR_low the FNR from above). A grid of about
2·log(n)/log(1.25) ranks instead of all n + 1 keeps K small: the union bound
costs less confidence per threshold and the bounds cost O(K) quantiles, not
O(n) (at CIFAR scale, all n would take minutes per attack).

Assumptions: a target's member (non-member) scores are independent draws from
one distribution, the examples' membership was drawn independently of them, and
scores are continuous (at a non-member rank threshold the CP bound on the FPR is
then exact: the true FPR is an order statistic, Beta(k + 1, n_out − k); at a
member rank threshold the CP bound on the TPR is conservative the same way). Examples scored by one target model are not independent trials in
general; see docs/attacks.md for what that means for the bound.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.special import betaincinv  # the beta quantile, Beta⁻¹(q; a, b) = betaincinv(a, b, q)

from bnmem.attacks.metrics import checked_scores
from bnmem.errors import BnmemError

LEVEL = 0.95
GRID_RATIO = 1.25  # spacing of the rank grid (module docstring)
METHOD = ("Clopper–Pearson, TPR from below and FPR from above at α/(2K) each over K rank thresholds "
          "(non-member ranks and member ranks on a geometric grid; union bound); ε_lb = max over thresholds of "
          "log((TPR_low − δ)/FPR_high) and log((1 − FPR_high − δ)/(1 − TPR_low)), 0 when no term is positive")


def clopper_pearson(k: np.ndarray | int, n: np.ndarray | int, alpha: np.ndarray | float,
                    upper: bool) -> np.ndarray:
    """One-sided Clopper–Pearson bound on a binomial proportion.

    Args:
        k: successes (array or int), 0 ≤ k ≤ n.
        n: trials (≥ 1; an int, or an array broadcast with ``k``).
        alpha: the bound fails with probability at most ``alpha`` (a float, or an array as ``n``).
        upper: True for the upper bound ``Beta⁻¹(1 − α; k + 1, n − k)`` (1 at k = n), False for the
            lower bound ``Beta⁻¹(α; k, n − k + 1)`` (0 at k = 0).

    Returns:
        float64 array shaped like ``k``.
    """
    n_arr, a_arr = np.asarray(n), np.asarray(alpha, dtype=np.float64)
    if (n_arr < 1).any() or not ((0.0 < a_arr) & (a_arr < 1.0)).all():
        raise BnmemError(f"Clopper–Pearson needs n ≥ 1 and 0 < alpha < 1, got n={n}, alpha={alpha}")
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        if upper:
            out = np.where(k >= n, 1.0, betaincinv(k + 1.0, np.maximum(n - k, 1e-300), 1.0 - alpha))
        else:
            out = np.where(k <= 0, 0.0, betaincinv(np.maximum(k, 1e-300), n - k + 1.0, alpha))
    return np.asarray(out, dtype=np.float64)


def distinct_clopper_pearson(k: np.ndarray, n: np.ndarray, alpha: np.ndarray, upper: bool,
                             known: "KnownQuantiles | None" = None) -> np.ndarray:
    """:func:`clopper_pearson` of whole-number arrays ``k``, ``n`` and ``alpha`` (all 1-D, one length), each
    distinct (k, n, α) computed once: targets with as many examples of a class share the counts at the same
    ranks (about a third of an evaluation's quantiles repeat). With ``known``, also once across calls."""
    k, n = np.asarray(k, dtype=np.int64), np.asarray(n, dtype=np.int64)
    alpha = np.asarray(alpha, dtype=np.float64)
    if k.size == 0:
        return clopper_pearson(k, n, alpha, upper)
    if known is not None:
        return known.bounds(k, n, alpha, upper)
    levels, which = np.unique(alpha, return_inverse=True)
    key = (k * (int(n.max()) + 1) + n) * levels.size + which.ravel()  # k <= n: no overflow below ~10^12 trials
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return clopper_pearson(k[first], n[first], alpha[first], upper)[inverse.ravel()]


class KnownQuantiles:
    """The Clopper–Pearson bounds computed so far (one evaluation's), each (k, n, α, side) once.

    Across the attacks of an evaluation many repeat: at a non-member rank threshold the false positives
    are the rank itself whatever the attack (and at a member rank the true positives), and n and α depend
    only on the target's class sizes. The bounds are :func:`clopper_pearson`'s, element by element, so a
    remembered one is the number a new call would give.
    """

    _BITS = 32  # a key is k·2^32 + n

    def __init__(self) -> None:
        # (upper, α) -> (sorted keys, their bounds)
        self._known: dict[tuple[bool, float], tuple[np.ndarray, np.ndarray]] = {}

    def bounds(self, k: np.ndarray, n: np.ndarray, alpha: np.ndarray, upper: bool) -> np.ndarray:
        """:func:`clopper_pearson` of int64 ``k``, ``n`` and float64 ``alpha`` (1-D, one length), each new
        (k, n, α) computed and remembered, the others read back."""
        if int(n.max()) >= 1 << self._BITS or int(n.min()) < 1 or int(k.min()) < 0:
            return clopper_pearson(k, n, alpha, upper)  # no key for them (the call raises on n < 1)
        out = np.empty(k.size)
        levels, which = np.unique(alpha, return_inverse=True)
        which = which.ravel()
        for i, level in enumerate(levels.tolist()):
            at = np.flatnonzero(which == i) if levels.size > 1 else slice(None)
            keys, inverse = np.unique((k[at] << self._BITS) | n[at], return_inverse=True)
            old_keys, old = self._known.get((upper, level), (np.zeros(0, np.int64), np.zeros(0)))
            pos = np.minimum(np.searchsorted(old_keys, keys), max(old_keys.size - 1, 0))
            hit = old_keys[pos] == keys if old_keys.size else np.zeros(keys.size, dtype=bool)
            vals = np.empty(keys.size)
            vals[hit] = old[pos[hit]]
            new = keys[~hit]
            vals[~hit] = clopper_pearson(new >> self._BITS, new & ((1 << self._BITS) - 1), level, upper)
            if new.size:
                both = np.concatenate([old_keys, new])
                order = np.argsort(both, kind="stable")
                self._known[(upper, level)] = (both[order], np.concatenate([old, vals[~hit]])[order])
            out[at] = vals[inverse.ravel()]
        return out


def rank_grid(n: int, ratio: float = GRID_RATIO) -> np.ndarray:
    """Ranks 0..n on a geometric grid from both ends: 0, 1, 2, …, ⌊ratio^i⌋, … and n minus the same
    (read-only: one array per (n, ratio), shared by every target and attack with that many examples)."""
    return _rank_grid(int(n), float(ratio))


@lru_cache(maxsize=1024)
def _rank_grid(n: int, ratio: float) -> np.ndarray:
    steps = [0]
    x = 1.0
    while x <= n:
        steps.append(int(x))
        x = max(x * ratio, x + 1.0)
    steps = np.unique(np.array(steps, dtype=np.int64))
    grid = np.unique(np.concatenate([steps, n - steps]).clip(0, n))
    grid.flags.writeable = False
    return grid


@dataclass(frozen=True)
class EpsilonBound:
    """One target's ε lower bound and the counts behind it.

    Attributes:
        eps_lb: the bound (0 when no threshold gives a positive term).
        eps_point: the same maximum from the point estimates TPR, FPR (inf when some threshold
            has FPR = 0 < TPR − δ): what ε_lb would be without confidence bounds.
        term: ``"tpr/fpr"``, ``"tnr/fnr"`` or ``"none"`` (which inequality gave ε_lb).
        tp, n_in, fp, n_out: member and non-member counts above the deciding threshold.
        tpr_low, fpr_high: the Clopper–Pearson bounds there.
        delta, level: the δ and the confidence used.
        n_thresholds: K, the number of thresholds the confidence was split over.
    """

    eps_lb: float
    eps_point: float
    term: str
    tp: int
    n_in: int
    fp: int
    n_out: int
    tpr_low: float
    fpr_high: float
    delta: float
    level: float
    n_thresholds: int

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


def _sorted_classes(scores: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores, members = checked_scores(scores, members, 1)
    return np.sort(scores[members]), np.sort(scores[~members])


def _rank_counts(s_in: np.ndarray, s_out: np.ndarray, k: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """tp, fp above the thresholds at non-member ranks k and member ranks j (sorted class scores)."""
    desc = np.concatenate([s_out[::-1], [-np.inf]])
    asc = np.concatenate([[-np.inf], s_in])
    thresholds = np.concatenate([desc[k], asc[j]])
    tp = s_in.size - np.searchsorted(s_in, thresholds, side="right")
    fp = s_out.size - np.searchsorted(s_out, thresholds, side="right")
    return tp, fp


def _point_bound(s_in: np.ndarray, s_out: np.ndarray, delta: float) -> float:
    # Every rank on both sides: the thresholds at every distinct score, i.e. every ROC point.
    tp, fp = _rank_counts(s_in, s_out, np.arange(s_out.size + 1), np.arange(s_in.size + 1))
    a, b = _terms(tp / s_in.size, fp / s_out.size, delta)
    return float(max(np.max(a), np.max(b), 0.0))


def _terms(tpr: np.ndarray, fpr: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(tpr - delta > 0, np.log(np.maximum(tpr - delta, 1e-300)) - np.log(fpr), -np.inf)
        tnr = 1.0 - fpr
        b = np.where(tnr - delta > 0, np.log(np.maximum(tnr - delta, 1e-300)) - np.log(1.0 - tpr), -np.inf)
    return a, b


def epsilon_lower_bound(scores: np.ndarray, members: np.ndarray, delta: float, level: float = LEVEL) -> EpsilonBound:
    """ε lower bound of one target's attack scores (module docstring for the method).

    Args:
        scores: [n] attack scores, higher = member.
        members: [n] bool ground truth.
        delta: the δ of the (ε, δ) guarantee tested, 0 ≤ δ ≤ 1.
        level: joint confidence of all the Clopper–Pearson bounds.

    Returns:
        An :class:`EpsilonBound`; with no members or no non-members, eps_lb is nan.

    Raises:
        BnmemError: malformed scores, members, δ or level.
    """
    _check_delta_level(delta, level)
    s_in, s_out = _sorted_classes(scores, members)
    point = _point_bound(s_in, s_out, delta) if s_in.size and s_out.size else math.nan
    return _bound(s_in, s_out, delta, level, point)


def _check_delta_level(delta: float, level: float) -> None:
    if not 0.0 <= delta <= 1.0 or not 0.0 < level < 1.0:
        raise BnmemError(f"need 0 ≤ delta ≤ 1 and 0 < level < 1, got delta={delta}, level={level}")


def _bound(s_in: np.ndarray, s_out: np.ndarray, delta: float, level: float, point: float) -> EpsilonBound:
    """The bound from one target's member and non-member scores, each sorted ascending, and its point bound."""
    n_in, n_out = int(s_in.size), int(s_out.size)
    if n_in == 0 or n_out == 0:
        return EpsilonBound(math.nan, math.nan, "none", 0, n_in, 0, n_out, math.nan, math.nan, delta, level, 0)
    tp, fp = _rank_counts(s_in, s_out, rank_grid(n_out), rank_grid(n_in))
    alpha = (1.0 - level) / (2.0 * tp.size)
    return _best(tp, fp, clopper_pearson(tp, n_in, alpha, upper=False), clopper_pearson(fp, n_out, alpha, upper=True),
                 n_in, n_out, delta, level, point)


def _best(tp: np.ndarray, fp: np.ndarray, tpr_low: np.ndarray, fpr_high: np.ndarray, n_in: int, n_out: int,
          delta: float, level: float, point: float) -> EpsilonBound:
    """The largest term over one target's thresholds, and the counts where it is reached."""
    a, b = _terms(tpr_low, fpr_high, delta)
    ia, ib = int(np.argmax(a)), int(np.argmax(b))
    best, i, term = (a[ia], ia, "tpr/fpr") if a[ia] >= b[ib] else (b[ib], ib, "tnr/fnr")
    if not best > 0:
        i, term, best = ia, "none", 0.0  # the counts at the best tpr/fpr threshold, for the record
    return EpsilonBound(float(best), point, term, int(tp[i]), n_in, int(fp[i]), n_out,
                        float(tpr_low[i]), float(fpr_high[i]), float(delta), float(level), int(tp.size))


def _best_rows(tp: np.ndarray, fp: np.ndarray, tpr_low: np.ndarray, fpr_high: np.ndarray, starts: np.ndarray,
               sizes: np.ndarray, n_in: list[int], n_out: list[int], deltas: np.ndarray, level: float,
               points: np.ndarray) -> list[EpsilonBound]:
    """:func:`_best` of every row at once (flat arrays, row r's ``sizes[r]`` from ``starts[r]``): the same
    terms element by element, the same first maxima, the same choice between them."""
    a, b = _terms(tpr_low, fpr_high, np.repeat(deltas, sizes))
    ia, ib = _first_max(a, starts, sizes), _first_max(b, starts, sizes)
    best_a, best_b = a[ia], b[ib]
    first = best_a >= best_b
    best, at = np.where(first, best_a, best_b), np.where(first, ia, ib)
    positive = best > 0
    at = np.where(positive, at, ia)  # none positive: the counts at the best tpr/fpr threshold, for the record
    best = np.where(positive, best, 0.0)
    terms = np.where(positive, np.where(first, "tpr/fpr", "tnr/fnr"), "none").tolist()
    return [EpsilonBound(e, pt, term, t, ni, f, no, lo, hi, d, float(level), k)
            for e, pt, term, t, ni, f, no, lo, hi, d, k in zip(
                best.tolist(), points.tolist(), terms, tp[at].tolist(), n_in, fp[at].tolist(), n_out,
                tpr_low[at].tolist(), fpr_high[at].tolist(), deltas.tolist(), sizes.tolist())]


@dataclass
class RankCounts:
    """What the ε bounds of a set of rows (targets) read from their scores.

    Attributes:
        n_in, n_out: int64 [rows] each row's members and non-members.
        points: float64 [rows] each row's point bound (:class:`EpsilonBound`'s ``eps_point``; nan for a row
            lacking a class).
        tp, fp: int64, flat: per row with both classes, the members and non-members scoring above each rank
            threshold (:func:`_rank_counts` at its non-member ranks, then its member ranks); row r's from
            ``offsets[r]`` to ``offsets[r + 1]``.
    """

    n_in: np.ndarray
    n_out: np.ndarray
    points: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    offsets: np.ndarray

    @classmethod
    def sized(cls, n_in: np.ndarray, n_out: np.ndarray) -> "RankCounts":
        """Room for rows of these class sizes (counts 0, points nan)."""
        n_in, n_out = np.asarray(n_in, dtype=np.int64), np.asarray(n_out, dtype=np.int64)
        sizes = [rank_grid(o).size + rank_grid(i).size if i and o else 0 for i, o in zip(n_in.tolist(), n_out.tolist())]
        offsets = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
        return cls(n_in, n_out, np.full(n_in.size, math.nan), np.zeros(offsets[-1], np.int64),
                   np.zeros(offsets[-1], np.int64), offsets)

    def grids(self) -> np.ndarray:
        """The rank thresholds, flat like ``tp``: each row's non-member ranks, then its member ranks."""
        parts = [np.concatenate([rank_grid(o), rank_grid(i)])
                 for i, o in zip(self.n_in.tolist(), self.n_out.tolist()) if i and o]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    @classmethod
    def of(cls, scores: np.ndarray, members: np.ndarray, deltas: np.ndarray) -> "RankCounts":
        """The slow, obvious way: each row's classes sorted and searched (:func:`_rank_counts`, :func:`_point_bound`)."""
        n_in = members.sum(axis=1)
        out = cls.sized(n_in, members.shape[1] - n_in)
        for r in np.flatnonzero(np.diff(out.offsets)).tolist():
            s_in, s_out = _sorted_classes(scores[r], members[r])
            at = slice(out.offsets[r], out.offsets[r + 1])
            out.tp[at], out.fp[at] = _rank_counts(s_in, s_out, rank_grid(s_out.size), rank_grid(s_in.size))
            out.points[r] = _point_bound(s_in, s_out, float(deltas[r]))
        return out


def epsilon_ranked(counts: RankCounts, deltas: np.ndarray, level: float = LEVEL,
                   known: KnownQuantiles | None = None) -> list[EpsilonBound]:
    """:func:`epsilon_lower_bound` of every row from what it reads of the scores (:class:`RankCounts`): the
    same numbers, with the beta quantiles of all rows in one call per side.

    Args:
        counts: the rows' class sizes, point bounds and counts at the rank thresholds.
        deltas: [rows] each target's δ.
        level: joint confidence per target.
        known: the quantiles computed so far in this evaluation (:class:`KnownQuantiles`; None: none).
    """
    deltas = np.asarray(deltas, dtype=np.float64)
    for d in deltas:
        _check_delta_level(float(d), level)
    sizes = np.diff(counts.offsets)
    rows = np.flatnonzero(sizes)
    done: dict[int, EpsilonBound] = {}
    if rows.size:
        sizes, starts = sizes[rows], counts.offsets[rows]  # rows lacking a class hold no entries
        n_in, n_out = np.repeat(counts.n_in[rows], sizes), np.repeat(counts.n_out[rows], sizes)
        alpha = np.repeat((1.0 - level) / (2.0 * sizes), sizes)
        n_k = np.array([rank_grid(o).size for o in counts.n_out[rows].tolist()])
        by_rank = np.arange(counts.tp.size) - np.repeat(starts, sizes) < np.repeat(n_k, sizes)  # non-member ranks
        tpr_low, fpr_high = _deciding_quantiles(counts.tp, counts.fp, n_in, n_out, alpha,
                                                np.repeat(deltas[rows], sizes), starts, by_rank, known)
        done = dict(zip(rows.tolist(), _best_rows(counts.tp, counts.fp, tpr_low, fpr_high, starts, sizes,
                                                  counts.n_in[rows].tolist(), counts.n_out[rows].tolist(),
                                                  deltas[rows], level, counts.points[rows])))
    return [done[i] if i in done else
            EpsilonBound(math.nan, math.nan, "none", 0, int(counts.n_in[i]), 0, int(counts.n_out[i]), math.nan,
                         math.nan, float(deltas[i]), level, 0) for i in range(deltas.size)]


# How far below a row's known term a threshold's bound from the point estimates may lie and still be
# evaluated: covers the rounding of two logarithms and a subtraction (~1e-15) many times over.
_PRUNE_MARGIN = 1e-9


def _deciding_quantiles(tp: np.ndarray, fp: np.ndarray, n_in: np.ndarray, n_out: np.ndarray, alpha: np.ndarray,
                        deltas: np.ndarray, starts: np.ndarray, non_member_rank: np.ndarray,
                        known: KnownQuantiles | None) -> tuple[np.ndarray, np.ndarray]:
    """TPR_low and FPR_high (:func:`clopper_pearson`) at every threshold of the rows (flat, row r's from
    ``starts[r]``) where they can decide :func:`_best`; elsewhere 0 and 1, which make both terms −inf.

    The beta quantiles are most of the bounds' cost, and few thresholds can give a row's largest term.
    At a non-member rank threshold (``non_member_rank``) FPR_high is computed (its count is the rank itself
    with continuous scores: the same quantile for every attack, remembered by ``known``), and so is TPR_low
    at a member rank threshold; the other side is bounded by its point estimate: a one-sided
    Clopper–Pearson bound at α < 1/2 lies on its side of it (TPR_low ≤ tp/n_in, FPR_high ≥ fp/n_out), and
    both terms grow with TPR_low and fall with FPR_high, so those terms bound the true ones from above.
    Per row, the true terms are evaluated where the bounds are largest; every threshold whose bound is not
    below that value (less a margin for rounding) is evaluated too. Every threshold that can reach the
    row's largest term of either kind, ties included, is then exact, and so are :func:`_best`'s maxima,
    the first index reaching each and the counts and bounds it records there: the numbers of evaluating
    every threshold.
    """
    sizes = np.diff(np.append(starts, tp.size))
    tpr_low, fpr_high = np.zeros(tp.size), np.ones(tp.size)
    at_f, at_t = np.flatnonzero(non_member_rank), np.flatnonzero(~non_member_rank)
    fpr_high[at_f] = distinct_clopper_pearson(fp[at_f], n_out[at_f], alpha[at_f], upper=True, known=known)
    tpr_low[at_t] = distinct_clopper_pearson(tp[at_t], n_in[at_t], alpha[at_t], upper=False, known=known)
    low_bound, high_bound = tp / n_in, fp / n_out
    low_bound[at_t], high_bound[at_f] = tpr_low[at_t], fpr_high[at_f]
    with np.errstate(divide="ignore", invalid="ignore"):
        top_a, top_b = _terms(low_bound, high_bound, deltas)
    seeds = np.concatenate([_first_max(top_a, starts, sizes), _first_max(top_b, starts, sizes)])
    _fill(tpr_low, fpr_high, seeds, non_member_rank, tp, fp, n_in, n_out, alpha, known)
    seed_a, seed_b = _terms(tpr_low[seeds], fpr_high[seeds], deltas[seeds])
    rows = starts.size
    floor_a, floor_b = seed_a[:rows], seed_b[rows:]  # each kind's true term where its bound is largest
    with np.errstate(invalid="ignore"):  # -inf less the margin stays -inf: every threshold is evaluated
        need = ((top_a >= np.repeat(floor_a - _PRUNE_MARGIN * (1.0 + np.abs(floor_a)), sizes))
                | (top_b >= np.repeat(floor_b - _PRUNE_MARGIN * (1.0 + np.abs(floor_b)), sizes)))
    need[seeds] = True
    _fill(tpr_low, fpr_high, np.flatnonzero(need), non_member_rank, tp, fp, n_in, n_out, alpha, known)
    tpr_low[~need], fpr_high[~need] = 0.0, 1.0
    return tpr_low, fpr_high


def _fill(tpr_low: np.ndarray, fpr_high: np.ndarray, at: np.ndarray, non_member_rank: np.ndarray, tp: np.ndarray,
          fp: np.ndarray, n_in: np.ndarray, n_out: np.ndarray, alpha: np.ndarray, known: KnownQuantiles | None) -> None:
    """Compute the bound not yet computed at the thresholds ``at``: TPR_low at a non-member rank, FPR_high at
    a member rank."""
    f, t = at[~non_member_rank[at]], at[non_member_rank[at]]
    tpr_low[t] = distinct_clopper_pearson(tp[t], n_in[t], alpha[t], upper=False, known=known)
    fpr_high[f] = distinct_clopper_pearson(fp[f], n_out[f], alpha[f], upper=True, known=known)


def _first_max(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per row of ``values`` (flat, row r's from ``starts[r]``), the flat index of its first largest entry."""
    largest = np.maximum.reduceat(values, starts)
    index = np.where(values == np.repeat(largest, sizes), np.arange(values.size), values.size)
    return np.minimum.reduceat(index, starts)


def epsilon_summary(scores: np.ndarray, members: np.ndarray, delta: float | np.ndarray | None = None,
                    level: float = LEVEL, rank_counts: RankCounts | None = None,
                    known: KnownQuantiles | None = None) -> dict[str, Any]:
    """ε lower bounds of every target, aggregated as the other attack metrics are (mean over targets).

    Args:
        scores: [n_targets, n] attack scores.
        members: [n_targets, n] bool membership of each target.
        delta: one δ, one per target, or None: 1/(number of examples the target trained on in
            ``members``), the δ = 1/N convention of the DP variants.
        level: joint confidence per target.
        rank_counts: what the bounds read from the scores, already gathered (:class:`RankCounts`; None:
            gathered here, row by row).
        known: the quantiles computed so far in this evaluation, shared by its calls (:class:`KnownQuantiles`).

    Returns:
        ``eps_lb`` (mean over targets with both classes), ``eps_lb_std`` (ddof 1), ``eps_lb_max``,
        ``eps_lb_per_target``, ``eps_lb_counts`` (per target: tp, n_in, fp, n_out, term, tpr_low,
        fpr_high, eps_point) and ``eps_lb_settings`` (δ per target, level, method).
    """
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    members = np.atleast_2d(np.asarray(members, dtype=bool))
    if scores.shape != members.shape:
        raise BnmemError(f"scores {scores.shape} and members {members.shape} differ")
    t = scores.shape[0]
    if delta is None:
        deltas = np.array([1.0 / max(int(members[i].sum()), 1) for i in range(t)])
    else:
        deltas = np.broadcast_to(np.asarray(delta, dtype=np.float64), (t,)).copy()
    if rank_counts is None:
        if np.isnan(scores).any():
            raise BnmemError("attack scores contain NaN")
        rank_counts = RankCounts.of(scores, members, deltas)
    return summarize_bounds(epsilon_ranked(rank_counts, deltas, level, known=known), deltas, level)


def summarize_bounds(bounds: list[EpsilonBound], deltas: np.ndarray, level: float) -> dict[str, Any]:
    """:func:`epsilon_summary`'s entries from every target's bound."""
    vals = np.array([b.eps_lb for b in bounds])
    ok = vals[np.isfinite(vals)]
    keys = ("tp", "n_in", "fp", "n_out", "term", "tpr_low", "fpr_high", "eps_point")
    return {
        "eps_lb": float(ok.mean()) if ok.size else math.nan,
        "eps_lb_std": float(ok.std(ddof=1)) if ok.size >= 2 else math.nan,
        "eps_lb_max": float(ok.max()) if ok.size else math.nan,
        "eps_lb_per_target": vals.tolist(),
        "eps_lb_counts": {k: [getattr(b, k) for b in bounds] for k in keys},
        "eps_lb_settings": {"delta": [float(d) for d in deltas], "level": level, "method": METHOD},
    }


def epsilon_audit(scores: Mapping[str, np.ndarray], members: np.ndarray, masks: Mapping[str, np.ndarray],
                  epsilons: Sequence[float] | np.ndarray, deltas: Sequence[float] | np.ndarray,
                  family_extra: int = 1, level: float = LEVEL) -> dict[str, Any]:
    """Does any attack prove more leakage than a DP guarantee allows? (ε_lb ≤ ε for every bound.)

    Every (attack, subset, target) bound is taken at level ``1 − (1 − level) / F`` with
    F = attacks × subsets × targets × ``family_extra`` (Bonferroni): if the training is
    (ε, δ)-DP as the accountant says (and the module's assumptions hold), the audit fails
    wrongly with probability at most ``1 − level``.

    Args:
        scores: attack -> [T, n] scores.
        members: [T, n] bool membership of each target.
        masks: subset -> [n] bool mask (the canaries, all examples, ...).
        epsilons: [T] each target's accountant ε.
        deltas: [T] each target's δ.
        family_extra: further independent families the caller audits at once (e.g. replicates).
        level: family-wise confidence.

    Returns:
        ``passed``, ``eps_lb_max`` and where it was reached (``attack``, ``subset``, ``target``,
        ``epsilon`` there, its counts), ``level_each``, ``family_size`` and ``method``.
    """
    members = np.asarray(members, dtype=bool)
    t = members.shape[0]
    family = len(scores) * len(masks) * t * max(1, int(family_extra))
    level_each = 1.0 - (1.0 - level) / family
    worst: dict[str, Any] = {"eps_lb_max": -math.inf}
    passed = True
    for attack, s in scores.items():
        for sub, mask in masks.items():
            mask = np.asarray(mask, dtype=bool)
            for i in range(t):
                b = epsilon_lower_bound(np.asarray(s)[i, mask], members[i, mask], float(deltas[i]), level_each)
                if not math.isfinite(b.eps_lb):
                    continue
                passed &= b.eps_lb <= float(epsilons[i])
                if b.eps_lb - float(epsilons[i]) > worst.get("margin", -math.inf):
                    worst = {"eps_lb_max": b.eps_lb, "margin": b.eps_lb - float(epsilons[i]), "attack": attack,
                             "subset": sub, "target": i, "epsilon": float(epsilons[i]), "counts": b.to_dict()}
    return {"passed": bool(passed), **worst, "level_each": level_each, "family_size": family, "level": level,
            "method": f"every (attack, subset, target) bound at level 1 − {1 - level:g}/{family} (Bonferroni); "
                      "passed: every bound ≤ that target's accountant ε"}
