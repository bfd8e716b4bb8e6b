"""The scoring pass in compiled kernels (numba), where numba is installed (the ``fast`` extra).

:func:`score_block` scores a block of examples for every target at once. Per example and view it summarises
each side's reference values once (three middle order statistics by selection, mean and M2) into a table of
the median and spread for every position a target can remove (its own value, the last model's, or none), so
every target's fit is a look-up; the LiRA scores (online, offline, both fixed-variance forms) and RMIA's
leave-one-out reference means follow in the same loop, with no [targets × block × views] temporaries.
The metrics side's walks (:mod:`bnmem.attacks.roc_kernels`: per-target ROC rows, the pooled curve) are
compiled with these, by :func:`compiled`.

Equal to the plain numpy path and the oracles to rounding, not bit for bit (libm's ``log``/``exp`` and
Cody's erfcx instead of numpy's and SciPy's, sums in another order): the project's tolerance is scores within
1e-12 relative and every metric, ε bound and decision within 1e-9 (tests/test_kernels.py,
benchmarks/bench_attacks.py). Without numba, or with ``BNMEM_NO_NUMBA=1``, the evaluation runs the numpy path
(:func:`available`). Compiled code is cached beside this file (``cache=True``); where that directory is not
writable numba falls back to its user-wide cache, and where no cache can be written it compiles per process.
"""

from __future__ import annotations

import math
import os
import warnings
from functools import lru_cache
from typing import Any, Callable

import numpy as np

# The attacks score_block scores, in the order of its slots (the baselines need no kernel: numpy's mean).
KERNEL_ATTACKS = ("online", "online_fixed_variance", "offline", "offline_fixed_variance")
STD_EPS = 1e-30  # as bnmem.attacks.lira.STD_EPS (not imported: this module compiles without bnmem's imports)
# A removal that leaves less than this fraction of a side's M2 is recomputed exactly (two passes): "M2 minus the
# removed value's share" loses about log2(1 / fraction) bits to cancellation, here at most 4.
EXACT_BELOW = 1.0 / 16
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_SQRT1_2 = math.sqrt(0.5)
# log of the largest float: beyond t² = this SciPy's erfc(t) (Cephes) underflows to 0, and so does log_ndtr's
_MAXLOG = math.log(1.7976931348623157e308)


# W. J. Cody, "Rational Chebyshev approximations for the error function", Math. Comp. 23 (1969) 631-637: the
# published coefficients of erf on [0, 0.46875] (A / B), and of erfcx(y) = e^{y²} erfc(y) on [0.46875, 4]
# (C / D) and on (4, ∞) as (1/√π − R(1/y²)) / y (P / Q).
_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02, 3.20937758913846947e03,
      1.85777706184603153e-1)
_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01, 2.98635138197400131e02,
      8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03,
      2.15311535474403846e-8)
_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
      3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03, 1.23033935480374942e03)
_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1, 1.60837851487422766e-2,
      6.58749161529837803e-4, 1.63153871373020978e-2)
_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1, 6.05183413124413191e-2,
      2.33520497626869185e-3)
_ONE_OVER_SQRT_PI = 5.6418958354775628695e-1


def _erf_small(y: float) -> float:
    """erf(y) for |y| ≤ 0.46875 (Cody's first interval)."""
    z = y * y
    num = _A[4] * z
    den = z
    for i in range(3):
        num = (num + _A[i]) * z
        den = (den + _B[i]) * z
    return y * (num + _A[3]) / (den + _B[3])


def _erfcx(y: float) -> float:
    """The scaled complementary error function e^{y²} erfc(y) for y ≥ 0.46875 (Cody's second and third
    intervals): a rational function, no exponential, so it neither underflows nor loses relative precision
    far in the tail."""
    if y <= 4.0:
        num = _C[8] * y
        den = y
        for i in range(7):
            num = (num + _C[i]) * y
            den = (den + _D[i]) * y
        return (num + _C[7]) / (den + _D[7])
    z = 1.0 / (y * y)
    num = _P[5] * z
    den = z
    for i in range(4):
        num = (num + _P[i]) * z
        den = (den + _Q[i]) * z
    return (_ONE_OVER_SQRT_PI - z * (num + _P[4]) / (den + _Q[4])) / y


def _log1p(w: float) -> float:
    """log(1 + w) to a few ulps from one log: log(u)·w/(u − 1) with u = 1 + w rounded (Goldberg 1991)."""
    u = 1.0 + w
    if u == 1.0:
        return w
    return math.log(u) * (w / (u - 1.0))


def log_ndtr(x: float) -> float:
    """log Φ(x), the log of the standard normal CDF, to rounding over the whole line (SciPy's formulas).

    With t = x/√2: x < −1: log(erfcx(−t)/2) − t² (the lower tail: erfcx is Cody's rational form, which for
    large −t is the asymptotic series 1/(√π y)·(1 − 1/(2y²) + …) summed as a rational function of 1/y², so
    nothing underflows however far out); x ≥ −1: log1p(−erfc(t)/2), Φ near 1, with erfc(t) = 1 − erf(t)
    near 0 and e^{−t²}·erfcx(|t|) (or 2 minus that for t < 0) beyond. Where t² > log(largest float)
    (x > 37.677) erfc is 0, as SciPy's underflows: log Φ(x) = −Φ(−x) is subnormal there, and −0 (SciPy's
    value) keeps the ties SciPy makes (offline LiRA scores 0 for every φ that far below the OUT Gaussian),
    so a member scored 1e-318 does not outrank non-members scored 0 and move the AUC by one pair.
    """
    t = x * _SQRT1_2
    if x < -1.0:
        return math.log(0.5 * _erfcx(-t)) - t * t
    if abs(t) <= 0.46875:
        erfc = 1.0 - _erf_small(t)
    elif t < 0.0:
        erfc = 2.0 - math.exp(-t * t) * _erfcx(-t)
    elif t * t > _MAXLOG:
        erfc = 0.0
    else:
        erfc = math.exp(-t * t) * _erfcx(t)
    return _log1p(-0.5 * erfc)


def _select(buf: np.ndarray, n: int, k: int) -> None:
    """Reorder buf[:n] so that buf[k] is its k-th smallest value, buf[:k] are ≤ it and buf[k + 1:n] ≥ it.

    Quickselect with a median-of-three pivot and branch-free partitions (which side a value goes to is a
    coin flip, so a branch would mispredict half the time): values below the pivot first, then, in the rest,
    values equal to it (so ties cost no extra rounds)."""
    lo, hi = 0, n
    while hi - lo > 1:
        a, b, c = buf[lo], buf[(lo + hi) // 2], buf[hi - 1]
        if a > b:
            a, b = b, a
        if b > c:
            b = c
            if a > b:
                b = a
        pivot = b
        store = lo
        for i in range(lo, hi):
            v = buf[i]
            buf[i] = buf[store]
            buf[store] = v
            store += v < pivot
        if k < store:
            hi = store
            continue
        low = store
        for i in range(low, hi):
            v = buf[i]
            buf[i] = buf[store]
            buf[store] = v
            store += v <= pivot
        if k < store:  # buf[low:store] all equal the pivot
            return
        lo = store


def _middle(vals: np.ndarray, buf: np.ndarray, n: int, ranks: np.ndarray) -> None:
    """ranks[0..2] = the sorted values of vals[:n] at ranks r0, r0 + 1, r0 + 2 with r0 = max(0, (n − 2) // 2)
    (ranks past the end repeat the largest): every rank a leave-one-out median of n or n − 1 values reads."""
    for i in range(n):
        buf[i] = vals[i]
    r0 = max(0, (n - 2) // 2)
    _select(buf, n, r0)
    first = second = np.inf
    for i in range(r0 + 1, n):
        v = buf[i]
        if v < first:
            second = first
            first = v
        elif v < second:
            second = v
    ranks[0] = buf[r0]
    ranks[1] = first if n > r0 + 1 else buf[r0]
    ranks[2] = second if n > r0 + 2 else ranks[1]


def _side_table(vals: np.ndarray, n: int, buf: np.ndarray, ranks: np.ndarray, med: np.ndarray,
                scale: np.ndarray) -> None:
    """A side's leave-one-out fits for every removal: med[p] and scale[p] (std + :data:`STD_EPS`) of its n
    values vals[:n] without position p, and of all n at p = n.

    The median is np.median's of the remaining values (an even count: the mean of the two middle ones): the
    i-th smallest of the others is the sorted value at i, or at i + 1 when the removed value ranks at or
    below it, so three middle order statistics serve every removal. The M2 of the others is
    M2 − (r − mean)²·n/(n − 1) for the removed value r, recomputed exactly in two passes where that keeps
    less than :data:`EXACT_BELOW` of M2 (r carried almost all the spread, e.g. a diverged model). Sums run
    in four interleaved parts, so the adds do not wait on one another.
    """
    _middle(vals, buf, n, ranks)
    s0 = s1 = s2 = s3 = 0.0
    i = 0
    while i + 4 <= n:
        s0 += vals[i]
        s1 += vals[i + 1]
        s2 += vals[i + 2]
        s3 += vals[i + 3]
        i += 4
    for i in range(i, n):
        s0 += vals[i]
    mean = ((s0 + s1) + (s2 + s3)) / n
    s0 = s1 = s2 = s3 = 0.0
    i = 0
    while i + 4 <= n:
        d0, d1, d2, d3 = vals[i] - mean, vals[i + 1] - mean, vals[i + 2] - mean, vals[i + 3] - mean
        s0 += d0 * d0
        s1 += d1 * d1
        s2 += d2 * d2
        s3 += d3 * d3
        i += 4
    for i in range(i, n):
        d0 = vals[i] - mean
        s0 += d0 * d0
    m2_all = (s0 + s1) + (s2 + s3)
    r0 = max(0, (n - 2) // 2)
    lo, hi = (n - 2) // 2, (n - 1) // 2
    share = n / (n - 1.0)
    for p in range(n):
        r = vals[p]
        # an index, not a branch: which way it goes is a coin flip per removal
        a = ranks[lo - r0 + int(r <= ranks[lo - r0])]
        if hi != lo:
            a = (a + ranks[hi - r0 + int(r <= ranks[hi - r0])]) / 2
        med[p] = a
        d = r - mean
        m2 = m2_all - d * d * share
        if not m2 >= m2_all * EXACT_BELOW:
            m2 = _exact_m2(vals, n, p)
        scale[p] = math.sqrt(m2 / (n - 1)) + STD_EPS
    lo, hi = (n - 1) // 2, n // 2
    med[n] = ranks[lo - r0] if lo == hi else (ranks[lo - r0] + ranks[hi - r0]) / 2
    scale[n] = math.sqrt(m2_all / n) + STD_EPS


def _exact_m2(vals: np.ndarray, n: int, pos: int) -> float:
    """M2 of vals[:n] without position pos, in two passes (the rare exact case of :func:`_side_table`)."""
    total = 0.0
    for i in range(n):
        if i != pos:
            total += vals[i]
    mean = total / (n - 1)
    m2 = 0.0
    for i in range(n):
        if i != pos:
            e = vals[i] - mean
            m2 += e * e
    return m2


def view_log_p(loss: np.ndarray, p: np.ndarray, out: np.ndarray) -> None:
    """out[m, j] = log of the mean over views of p_y, from the loss [M, B, V] and p = e^{−loss} (RMIA's
    per-model statistic): SciPy's logsumexp of −loss (the largest terms kept out of the sum, log1p of the
    rest), with e^{−loss_v + min loss} taken as p_v / p_max (or computed where p_max underflows)."""
    m_count, b_count, v_count = loss.shape
    log_v = math.log(v_count)
    for m in range(m_count):
        for j in range(b_count):
            best = np.inf
            p_best = 0.0
            for v in range(v_count):
                if loss[m, j, v] < best:
                    best = loss[m, j, v]
                    p_best = p[m, j, v]
            if best == np.inf:
                out[m, j] = -np.inf
                continue
            s = 0.0
            at_best = 0
            for v in range(v_count):
                if loss[m, j, v] == best:
                    at_best += 1
                elif p_best > 0.0:
                    s += p[m, j, v] / p_best
                else:  # e^{−loss} underflowed: the shifted exponent itself
                    s += math.exp(best - loss[m, j, v])
            out[m, j] = _log1p(s / at_best) + math.log(at_best) - best - log_v


def _loo_log_means(lp: np.ndarray, idx: np.ndarray, n: int, table: np.ndarray, pre: np.ndarray,
                   suf: np.ndarray) -> None:
    """table[p] = log of the mean of exp(lp[idx[c]]) over the side's n values with position p removed
    (p = n: none removed): sums scaled by the side's largest value, prefix + suffix (no cancellation); the
    removal of the largest value rescales by the largest remaining one."""
    big = -np.inf
    arg = 0
    for c in range(n):
        if lp[idx[c]] > big:
            big = lp[idx[c]]
            arg = c
    if big == -np.inf:  # every p_y is 0 (or the side is empty)
        table[: n + 1] = -np.inf
        return
    pre[0] = 0.0
    for c in range(n):
        pre[c + 1] = pre[c] + math.exp(lp[idx[c]] - big)
    suf[n] = 0.0
    suf[n + 1] = 0.0
    for c in range(n - 1, -1, -1):
        suf[c] = suf[c + 1] + math.exp(lp[idx[c]] - big)
    for p in range(n + 1):
        k = n - 1 if p < n else n
        if k == 0:
            table[p] = -np.inf
        elif p == arg:  # the largest value removed: rescale by the largest remaining one
            second = -np.inf
            for c in range(n):
                if c != p and lp[idx[c]] > second:
                    second = lp[idx[c]]
            if second == -np.inf:
                table[p] = -np.inf
                continue
            total = 0.0
            for c in range(n):
                if c != p:
                    total += math.exp(lp[idx[c]] - second)
            table[p] = math.log(total) + second - math.log(k)
        else:
            table[p] = math.log(pre[p] + suf[p + 1]) + big - math.log(k)


def population_means(lp: np.ndarray, out: np.ndarray) -> None:
    """out[t, p] = log of the mean p_y over every model but t on population point p, from lp [M, P] (every
    model is OUT for a population point, so a target's references are all the others)."""
    m_count, p_count = lp.shape
    idx = np.arange(m_count)
    table = np.empty(m_count + 1)
    pre = np.empty(m_count + 1)
    suf = np.empty(m_count + 2)
    for p in range(p_count):
        _loo_log_means(lp[:, p], idx, m_count, table, pre, suf)
        for t in range(m_count):
            out[t, p] = table[t]


def _example_sides(keep: np.ndarray, j: int, targets: np.ndarray, k_in: np.ndarray, k_out: np.ndarray,
                   idx_in: np.ndarray, idx_out: np.ndarray, where: np.ndarray, pos_in: np.ndarray,
                   pos_out: np.ndarray) -> tuple[int, int]:
    """Example j's IN and OUT models in model order (``idx_in`` / ``idx_out``, their counts returned) and each
    target's removed position per side: its own value on its side; on the other, the side's last model (the
    truncation to k references) or none (the side's count)."""
    c_in = 0
    c_out = 0
    for m in range(keep.shape[0]):
        if keep[m, j]:
            where[m] = c_in
            idx_in[c_in] = m
            c_in += 1
        else:
            where[m] = c_out
            idx_out[c_out] = m
            c_out += 1
    for t in range(targets.shape[0]):
        tm = targets[t]
        if keep[tm, j]:
            pos_in[t] = where[tm]
            pos_out[t] = c_out - 1 if k_out[t] == c_out - 1 else c_out
        else:
            pos_out[t] = where[tm]
            pos_in[t] = c_in - 1 if k_in[t] == c_in - 1 else c_in
    return c_in, c_out


def _rmia_reference_means(lp: np.ndarray, j: int, idx: np.ndarray, c: int, ks: np.ndarray, pos: np.ndarray,
                          table: np.ndarray, pre: np.ndarray, suf: np.ndarray, dest: np.ndarray) -> None:
    """``dest[t, j]``: the log of the mean p_y over target t's references on one side of example j (−inf where
    it has none), read off the side's leave-one-out table."""
    _loo_log_means(lp[:, j], idx, c, table, pre, suf)
    for t in range(pos.shape[0]):
        dest[t, j] = table[pos[t]] if ks[t] >= 1 else -np.inf


def _add_view_terms(x_view: np.ndarray, targets: np.ndarray, pos_in: np.ndarray, pos_out: np.ndarray,
                    med_in: np.ndarray, inv_in: np.ndarray, med_out: np.ndarray, scale_out: np.ndarray,
                    inv_out: np.ndarray, inv_fixed_in: np.ndarray, inv_fixed_out: np.ndarray, log_fixed: np.ndarray,
                    slots: np.ndarray, acc: np.ndarray, ratio: np.ndarray) -> None:
    """Add one view's LiRA terms to every target's sums ``acc`` [4, T] (the order of :data:`KERNEL_ATTACKS`:
    online, online fixed variance, offline, offline fixed variance; only the wanted ones, ``slots`` ≥ 0).

    Spreads enter as reciprocals (``inv_*``: a multiplication, not a division, per target). The online
    attack's log(scale_out / scale_in) is summed over views as the log of the product of the ratios:
    ``ratio`` [T] carries each target's product, moved into ``acc`` by one log where it leaves
    [1e-150, 1e150] (so it never overflows nor underflows: a ratio beyond 1e158 would need a spread beyond
    1e128) and at the example's end (:func:`score_block`)."""
    want_on, want_onf = slots[0] >= 0, slots[1] >= 0
    want_off, want_offf = slots[2] >= 0, slots[3] >= 0
    for t in range(targets.shape[0]):
        x = x_view[targets[t]]
        po = pos_out[t]
        d_out = x - med_out[po]
        if want_off or want_on:
            y_out = d_out * inv_out[po]
            if want_off:
                acc[2, t] -= log_ndtr(-y_out)
            if want_on:
                p = pos_in[t]
                y_in = (x - med_in[p]) * inv_in[p]
                acc[0, t] += 0.5 * (y_out * y_out - y_in * y_in)
                r = ratio[t] * (scale_out[po] * inv_in[p])
                if not (r >= 1e-150 and r <= 1e150):
                    acc[0, t] += math.log(r)
                    r = 1.0
                ratio[t] = r
        if want_offf or want_onf:
            y_out = d_out * inv_fixed_out[t]
            if want_offf:
                acc[3, t] -= log_ndtr(-y_out)
            if want_onf:
                y_in = (x - med_in[pos_in[t]]) * inv_fixed_in[t]
                acc[1, t] += 0.5 * (y_out * y_out - y_in * y_in) + log_fixed[t]


def score_block(phi: np.ndarray, keep: np.ndarray, targets: np.ndarray, k_in: np.ndarray, k_out: np.ndarray,
                sd_in: np.ndarray, sd_out: np.ndarray, slots: np.ndarray, scores: np.ndarray, col0: int,
                lp: np.ndarray, mean_in: np.ndarray, mean_out: np.ndarray) -> None:
    """Score one block of examples for every target (balanced keep: every example on each side C times).

    Args:
        phi: float64 [M, B, V] the block's φ.
        keep: bool [M, B] membership.
        targets: int64 [T] the targets' model indices; k_in, k_out: int64 [T] their reference counts.
        sd_in, sd_out: float64 [T] the targets' global spreads (read by the fixed-variance attacks).
        slots: int64 [4] for each attack of :data:`KERNEL_ATTACKS` its index in ``scores`` (−1: not wanted).
        scores: float64 [K, T, N] the wanted attacks' scores; columns col0..col0 + B are written.
        lp: float64 [M, B] every model's view-averaged log p_y (:func:`view_log_p`), or [0, 0] for no RMIA;
            then ``mean_in`` / ``mean_out`` [T, B] get the log of the mean p_y over each target's IN / OUT
            references (−inf where it has none).
    """
    m_count, b_count, v_count = phi.shape
    t_count = targets.shape[0]
    rmia = lp.shape[0] > 0
    want_on, want_onf = slots[0] >= 0, slots[1] >= 0
    want_off, want_offf = slots[2] >= 0, slots[3] >= 0
    fit_in = want_on or want_onf
    fit_out = fit_in or want_off or want_offf
    idx_in = np.empty(m_count, np.int64)
    idx_out = np.empty(m_count, np.int64)
    where = np.empty(m_count, np.int64)  # a model's position on its side, in model order
    pos_in = np.empty(t_count, np.int64)  # each target's removed position per side (C: none)
    pos_out = np.empty(t_count, np.int64)
    vin = np.empty(m_count)
    vout = np.empty(m_count)
    buf = np.empty(m_count)
    ranks = np.empty(3)
    med_in, med_out = np.empty(m_count + 1), np.empty(m_count + 1)
    scale_in, scale_out = np.empty(m_count + 1), np.empty(m_count + 1)
    inv_in, inv_out = np.empty(m_count + 1), np.empty(m_count + 1)
    ratio = np.ones(t_count)  # the online attack's product of spread ratios (:func:`_add_view_terms`)
    acc = np.zeros((4, t_count))
    table = np.empty(m_count + 1)
    pre = np.empty(m_count + 1)
    suf = np.empty(m_count + 2)
    slab = np.empty((v_count, m_count))  # the example's φ, views first: each view's values contiguous
    inv_fixed_in, inv_fixed_out = np.empty(t_count), np.empty(t_count)
    log_fixed = np.empty(t_count)  # log(scale_out) − log(scale_in) of the fixed-variance Gaussians
    for t in range(t_count):
        fixed_in, fixed_out = sd_in[t] + STD_EPS, sd_out[t] + STD_EPS
        inv_fixed_in[t], inv_fixed_out[t] = 1.0 / fixed_in, 1.0 / fixed_out
        log_fixed[t] = math.log(fixed_out) - math.log(fixed_in)
    for j in range(b_count):
        c_in, c_out = _example_sides(keep, j, targets, k_in, k_out, idx_in, idx_out, where, pos_in, pos_out)
        if rmia:
            _rmia_reference_means(lp, j, idx_in, c_in, k_in, pos_in, table, pre, suf, mean_in)
            _rmia_reference_means(lp, j, idx_out, c_out, k_out, pos_out, table, pre, suf, mean_out)
        if not fit_out:
            continue
        for m in range(m_count):
            for v in range(v_count):
                slab[v, m] = phi[m, j, v]
        acc[:] = 0.0
        for v in range(v_count):
            if fit_in:
                for c in range(c_in):
                    vin[c] = slab[v, idx_in[c]]
                _side_table(vin, c_in, buf, ranks, med_in, scale_in)
                for c in range(c_in + 1):
                    inv_in[c] = 1.0 / scale_in[c]
            if fit_out:
                for c in range(c_out):
                    vout[c] = slab[v, idx_out[c]]
                _side_table(vout, c_out, buf, ranks, med_out, scale_out)
                for c in range(c_out + 1):
                    inv_out[c] = 1.0 / scale_out[c]
            _add_view_terms(slab[v], targets, pos_in, pos_out, med_in, inv_in, med_out, scale_out, inv_out,
                            inv_fixed_in, inv_fixed_out, log_fixed, slots, acc, ratio)
        if want_on:
            for t in range(t_count):
                acc[0, t] += math.log(ratio[t])
                ratio[t] = 1.0
        for a in range(4):
            if slots[a] >= 0:
                for t in range(t_count):
                    scores[slots[a], t, col0 + j] = acc[a, t] / v_count


def global_sums(phi: np.ndarray, keep: np.ndarray, targets: np.ndarray, k_in: np.ndarray, k_out: np.ndarray,
                shift: float, sums: np.ndarray) -> None:
    """Add to sums [2 sides, 2, T] each target's Σ(φ − shift) and Σ(φ − shift)² over its leave-one-out
    references on each side (the fixed-variance spreads' first pass; balanced keep)."""
    m_count, b_count, v_count = phi.shape
    t_count = targets.shape[0]
    s1 = np.empty(m_count)
    s2 = np.empty(m_count)
    for j in range(b_count):
        c_in = 0
        last_in = last_out = 0
        tot = np.zeros((2, 2))
        for m in range(m_count):
            a = 0.0
            b = 0.0
            for v in range(v_count):
                d = phi[m, j, v] - shift
                a += d
                b += d * d
            s1[m] = a
            s2[m] = b
            side = 0 if keep[m, j] else 1
            tot[side, 0] += a
            tot[side, 1] += b
            if side == 0:
                c_in += 1
                last_in = m
            else:
                last_out = m
        c_out = m_count - c_in
        for t in range(t_count):
            tm = targets[t]
            member = keep[tm, j]
            for side in range(2):
                on = member == (side == 0)
                c, k, last = (c_in, k_in[t], last_in) if side == 0 else (c_out, k_out[t], last_out)
                drop = tm if on else (last if k == c - 1 else -1)
                sums[side, 0, t] += tot[side, 0] - (s1[drop] if drop >= 0 else 0.0)
                sums[side, 1, t] += tot[side, 1] - (s2[drop] if drop >= 0 else 0.0)


# This module's functions that are compiled, and the metrics walks' (bnmem.attacks.roc_kernels).
_KERNELS = ("_erf_small", "_erfcx", "_log1p", "log_ndtr", "_select", "_middle", "_side_table", "_exact_m2",
            "view_log_p", "_loo_log_means", "population_means", "_example_sides", "_rmia_reference_means",
            "_add_view_terms", "score_block", "global_sums")
_ROC_KERNELS = ("_eps_ratio", "_roc_walk", "roc_rows", "pooled_split", "merge_sorted", "pooled_curve")
# small helpers inlined into the kernels' loops
_INLINED = frozenset({"log_ndtr", "_erf_small", "_erfcx", "_log1p", "_example_sides", "_rmia_reference_means",
                      "_add_view_terms", "_eps_ratio"})
# What compiled() hands out.
_ENTRY_POINTS = ("log_ndtr", "view_log_p", "population_means", "score_block", "global_sums", "roc_rows",
                 "pooled_split", "merge_sorted", "pooled_curve")


def _numba_wanted() -> bool:
    return os.environ.get("BNMEM_NO_NUMBA", "") in ("", "0")


def _compile_in_place(numba: Any, namespace: dict[str, Any], names: tuple[str, ...]) -> None:
    """Replace each named function of a module's namespace by its compiled form, in order, so a kernel's calls
    reach the compiled helpers; cached on disk where a cache directory is writable."""
    for name in names:
        fn = getattr(namespace[name], "py_func", namespace[name])  # compiled again after cache_clear: the source
        options = {"nogil": True, "error_model": "numpy"}
        if name in _INLINED:
            options["inline"] = "always"
        try:
            namespace[name] = numba.njit(cache=True, **options)(fn)
        except RuntimeError:  # no writable cache location: compile in each process instead
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                namespace[name] = numba.njit(**options)(fn)


@lru_cache(maxsize=None)
def compiled() -> dict[str, Callable[..., Any]] | None:
    """The compiled kernels by name (this module's and :mod:`bnmem.attacks.roc_kernels`'), or None where numba is
    not installed or ``BNMEM_NO_NUMBA=1``."""
    if not _numba_wanted():
        return None
    try:
        import numba
    except ImportError:
        return None
    from bnmem.attacks import roc_kernels

    _compile_in_place(numba, globals(), _KERNELS)
    _compile_in_place(numba, vars(roc_kernels), _ROC_KERNELS)
    found = {**{n: globals()[n] for n in _KERNELS}, **{n: getattr(roc_kernels, n) for n in _ROC_KERNELS}}
    return {name: found[name] for name in _ENTRY_POINTS}


def available() -> bool:
    """Whether the compiled kernels run (numba installed and not switched off by ``BNMEM_NO_NUMBA``)."""
    return compiled() is not None
