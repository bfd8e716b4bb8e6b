"""Paired statistics for BN vs other-norm comparisons.

Every comparison the report makes is paired: the BN model and the other-norm
model of a pair share the data, the corruption, the keep matrix and the seed, so
the report works on the per-pair differences d_i = BN_i − other_i and gives
their mean with a 95% confidence interval. The pairing unit is the model seed
(memorization, gradient-norm ratios, γ/σ) or the LiRA target model index
(per-target AUC; target i of both norms was trained on the same keep row).

Unit of replication. Pairs inside one experiment share its data corruption,
keep matrix and (for LiRA) reference models, so they are not independent
replications of the experiment. :func:`replicated_difference` therefore works
on replicates (independent repeats with their own corruption, keep and model
seeds): the interval is over replicate means. Inside a single replicate it
falls back to the pairs only when they are independent given the data (models
trained with different seeds); LiRA targets are not (they share reference
models), so one replicate of LiRA needs the delete-one-model jackknife
(:func:`jackknife_interval`) or has no interval at all.

Which interval decides. The Student t-interval (n − 1 degrees of freedom) at
every n (analysis plan 3.0). The percentile bootstrap undercovers with few
units (over 3 seeds it can never leave [min, max] of the three differences; at
n = 10 it covers about 0.88 for a nominal 0.95 on normal data) and switching
to it at a threshold made the interval jump narrower at the switch. The
bootstrap interval and the min/max are still reported next to it. Plan 2.0's
rule (the bootstrap from ``SMALL_N`` units) stays available through
``bootstrap_from=SMALL_N`` so the report can show the previous plan's verdict.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats as _sps

LEVEL = 0.95
N_RESAMPLES = 10_000
SEED = 0
# Plan 2.0 switched to the percentile bootstrap from this many units (kept for its verdicts only).
SMALL_N = 10


@dataclass(frozen=True)
class PairedDiff:
    """Mean paired difference (BN − other) with its confidence intervals.

    Attributes:
        mean: mean of the finite paired differences (nan when there are none).
        ci_low, ci_high: the deciding interval (None with fewer than 2 pairs).
        n: number of pairs used.
        unit: what a pair is ("seeds", "targets").
        method: one sentence naming the deciding interval and its settings.
        boot_low, boot_high: percentile bootstrap interval.
        t_low, t_high: Student t-interval.
        min, max: smallest and largest paired difference.
        note: a caveat for the reader (few pairs, dropped pairs), or "".
        sd: the sample standard deviation of the units (n − 1 denominator; None with fewer than 2): the
            spread the power of a design is computed from (:mod:`bnmem.power`).
    """

    mean: float
    ci_low: float | None
    ci_high: float | None
    n: int
    unit: str
    method: str
    boot_low: float | None = None
    boot_high: float | None = None
    t_low: float | None = None
    t_high: float | None = None
    min: float | None = None
    max: float | None = None
    note: str = ""
    sd: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


def _clean(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).ravel()
    return arr[np.isfinite(arr)]


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray,
    level: float = LEVEL,
    n_resamples: int | None = None,
    seed: int = SEED,
) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the mean.

    Args:
        values: the sample (non-finite entries are dropped).
        level: coverage, e.g. 0.95.
        n_resamples: bootstrap resamples (None: :data:`N_RESAMPLES`, read at call time).
        seed: seed of the resampling; the same inputs give the same interval.

    Returns:
        ``(low, high)``, or None with fewer than 2 finite values.
    """
    x = _clean(values)
    if x.size < 2:
        return None
    n_resamples = n_resamples or N_RESAMPLES
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    # Chunks keep the index matrix small for large n (e.g. thousands of targets).
    chunk = max(1, 2_000_000 // x.size)
    for start in range(0, n_resamples, chunk):
        stop = min(n_resamples, start + chunk)
        idx = rng.integers(0, x.size, size=(stop - start, x.size))
        means[start:stop] = x[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    # A constant sample has a zero-width interval; rounding in the means must not widen it.
    if np.ptp(x) == 0:
        low = high = float(x[0])
    return float(low), float(high)


def t_interval(values: Sequence[float] | np.ndarray, level: float = LEVEL) -> tuple[float, float] | None:
    """Student t-interval of the mean (n − 1 degrees of freedom).

    Returns:
        ``(low, high)``, or None with fewer than 2 finite values.
    """
    x = _clean(values)
    if x.size < 2:
        return None
    low, high = t_intervals(x[None, :], level)
    return float(low[0]), float(high[0])


@functools.lru_cache(maxsize=256)
def _t_quantile(q: float, df: int) -> float:
    """Student t quantile (cached: the report and its simulations ask for the same few levels and df)."""
    return float(_sps.t.ppf(q, df=df))


@functools.lru_cache(maxsize=256)
def _ks_quantile(q: float, n: int) -> float:
    """One-sided Kolmogorov–Smirnov quantile of n values (cached like :func:`_t_quantile`)."""
    return float(_sps.ksone.ppf(q, n))


def t_intervals(samples: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Student t-intervals of the mean of each row of ``samples`` [runs, n] (n ≥ 2, all finite).

    The one implementation behind :func:`t_interval`, vectorized so simulations
    of coverage and null rates run the code the report uses.
    """
    x = np.asarray(samples, dtype=np.float64)
    n = x.shape[-1]
    mean = x.mean(axis=-1)
    sd = x.std(axis=-1, ddof=1)
    half = _t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


def paired_difference(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    unit: str = "seeds",
    level: float = LEVEL,
    n_resamples: int | None = None,
    seed: int = SEED,
) -> PairedDiff:
    """Mean of the paired differences ``a − b`` with confidence intervals.

    Args:
        a: BN values, one per pair.
        b: the other norm's values, in the same pair order.
        unit: what a pair is, for the method text ("seeds", "targets").
        level: coverage of the intervals.
        n_resamples: bootstrap resamples.
        seed: bootstrap seed.

    Returns:
        A :class:`PairedDiff`; pairs with a non-finite value on either side are
        dropped (and counted in ``note``).

    Raises:
        ValueError: ``a`` and ``b`` differ in length.
    """
    a_arr = np.asarray(a, dtype=np.float64).ravel()
    b_arr = np.asarray(b, dtype=np.float64).ravel()
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"paired samples differ in length: {a_arr.size} vs {b_arr.size}")
    return difference_stats(a_arr - b_arr, unit=unit, level=level, n_resamples=n_resamples, seed=seed)


def difference_stats(
    diffs: Sequence[float] | np.ndarray,
    unit: str = "seeds",
    level: float = LEVEL,
    n_resamples: int | None = None,
    seed: int = SEED,
    bootstrap_from: int | None = None,
) -> PairedDiff:
    """Like :func:`paired_difference`, from the differences themselves.

    ``bootstrap_from``: None (plan 3.0) lets the t-interval decide at every n;
    an integer reproduces plan 2.0, where the percentile bootstrap decided from
    that many units on.
    """
    raw = np.asarray(diffs, dtype=np.float64).ravel()
    d = raw[np.isfinite(raw)]
    dropped = raw.size - d.size
    notes = []
    if dropped:
        notes.append(f"{dropped} pair(s) without a finite value on both sides dropped")
    pct = f"{level * 100:g}%"
    if d.size == 0:
        return PairedDiff(math.nan, None, None, 0, unit, "no pairs", note="; ".join(notes))
    mean = float(d.mean())
    n_resamples = n_resamples or N_RESAMPLES
    boot = bootstrap_mean_ci(d, level, n_resamples, seed)
    tint = t_interval(d, level)
    if d.size == 1:
        notes.append(f"1 pair ({unit[:-1] if unit.endswith('s') else unit}) only: no interval; "
                     "decided on the point estimate")
        method = "single pair: no confidence interval"
        low = high = None
    elif bootstrap_from is None or d.size < bootstrap_from:
        method = f"{pct} Student t-interval over {d.size} paired {unit}"
        low, high = tint
    else:
        method = f"{pct} percentile bootstrap over {d.size} paired {unit} ({n_resamples} resamples, seed {seed})"
        low, high = boot
    return PairedDiff(
        mean=mean,
        ci_low=low,
        ci_high=high,
        n=int(d.size),
        unit=unit,
        method=method,
        boot_low=boot[0] if boot else None,
        boot_high=boot[1] if boot else None,
        t_low=tint[0] if tint else None,
        t_high=tint[1] if tint else None,
        min=float(d.min()),
        max=float(d.max()),
        note="; ".join(notes),
        sd=float(d.std(ddof=1)) if d.size >= 2 else None,
    )


def pair_by_key(
    a: Mapping[str, float | None], b: Mapping[str, float | None]
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Align two per-key samples (seed -> value) on their common keys.

    Returns:
        ``(keys, a_values, b_values)`` over the keys both have, in sorted order
        (numeric keys sorted as numbers); None becomes nan.
    """
    common = sorted(set(a) & set(b), key=lambda k: (0, int(k), "") if str(k).lstrip("-").isdigit() else (1, 0, str(k)))

    def val(v: float | None) -> float:
        return math.nan if v is None else float(v)

    return common, np.array([val(a[k]) for k in common]), np.array([val(b[k]) for k in common])


def paired_summary(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    level: float = LEVEL,
    n_resamples: int | None = None,
    seed: int = SEED,
) -> dict[str, Any]:
    """The paired block of a LiRA ``metrics.json``: per-target differences and their interval.

    The same numbers as :func:`paired_difference` (one implementation for the
    lens and the report), in the lens's JSON shape.

    Args:
        a: per-target values (e.g. BN AUCs in model-index order).
        b: the paired values (e.g. no-norm AUCs, same models).
        level, n_resamples, seed: as in :func:`difference_stats`.

    Returns:
        ``{"per_target", "mean", "ci", "level", "n", "method", "note"}``; mean
        is nan without pairs, ci is ``[nan, nan]`` with fewer than 2 pairs.
        The targets share reference models, so this interval is descriptive
        of this set of shadow models, not a confidence interval for a fresh
        experiment (see the module docstring).
    """
    a_arr = np.asarray(a, dtype=np.float64).ravel()
    b_arr = np.asarray(b, dtype=np.float64).ravel()
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"paired samples differ in length: {a_arr.size} vs {b_arr.size}")
    diff = a_arr - b_arr
    pd = difference_stats(diff, unit="targets", level=level, n_resamples=n_resamples, seed=seed)
    ci = [pd.ci_low, pd.ci_high] if pd.ci_low is not None else [math.nan, math.nan]
    return {"per_target": diff.tolist(), "mean": pd.mean, "ci": ci, "level": level, "n": pd.n,
            "method": pd.method, "note": pd.note}


def jackknife_interval(
    full: float,
    leave_one_out: Sequence[float] | np.ndarray,
    unit: str = "models",
    level: float = LEVEL,
) -> PairedDiff:
    """Delete-one jackknife interval: ``full ± t_{n−1} · se_jack``.

    ``se_jack² = (n − 1)/n · Σ (θ_(i) − mean θ_(·))²`` over the n estimates
    with one unit (e.g. one shadow model, with every use of it as a target or a
    reference) deleted. It captures dependence that a resampling of targets
    misses, because deleting a model changes every target that used it.

    Args:
        full: the statistic on all units.
        leave_one_out: the statistic with unit i deleted, one per unit.
        unit: what was deleted, for the method text.
        level: coverage.

    Returns:
        A :class:`PairedDiff` centred on ``full`` (no interval with fewer than 2
        finite leave-one-out values).
    """
    loo = _clean(leave_one_out)
    n = loo.size
    if n < 2 or not math.isfinite(full):
        return PairedDiff(full, None, None, n, unit, "jackknife: fewer than 2 leave-one-out values",
                          note="no interval")
    se = math.sqrt((n - 1) / n * float(((loo - loo.mean()) ** 2).sum()))
    half = float(_sps.t.ppf(0.5 + level / 2.0, df=n - 1)) * se
    pct = f"{level * 100:g}%"
    return PairedDiff(full, full - half, full + half, n, unit,
                      f"{pct} delete-one-{unit[:-1] if unit.endswith('s') else unit} jackknife over {n} {unit} "
                      f"(t with {n - 1} df, se {se:.3g})", min=float(loo.min()), max=float(loo.max()))


def median_interval(values: Sequence[float] | np.ndarray, level: float = LEVEL) -> tuple[float, float] | None:
    """Distribution-free interval for the median: the order statistics ``[x_(k), x_(n−k+1)]``.

    k is the largest with ``1 − 2·P(Bin(n, ½) ≤ k − 1) ≥ level`` (the sign-test
    inversion). Each bound is an order statistic, so raising any value never
    lowers either bound: a rule that compares the bounds with a threshold is
    monotone in the data.

    Returns:
        ``(low, high)``, or None when n is too small for the level (n < 6 at 95%).
    """
    x = np.sort(_clean(values))
    n = x.size
    best = None
    for k in range(1, n // 2 + 1):
        if 1.0 - 2.0 * float(_sps.binom.cdf(k - 1, n, 0.5)) >= level:
            best = k
        else:
            break
    if best is None:
        return None
    return float(x[best - 1]), float(x[n - best])


def replicated_difference(
    groups: Sequence[Sequence[float] | np.ndarray],
    within_unit: str,
    within_independent: bool,
    level: float = LEVEL,
    bootstrap_from: int | None = None,
) -> PairedDiff:
    """Mean paired difference with replicates (not the pairs inside one) as the unit.

    Args:
        groups: one sequence per replicate of that replicate's paired
            differences (per seed, or per LiRA target).
        within_unit: what a pair inside a replicate is ("seeds", "targets").
        within_independent: whether the pairs inside one replicate are
            independent given its data (seeds: yes; LiRA targets sharing
            reference models: no).
        level: coverage.

    Returns:
        With 2 or more replicates: :func:`difference_stats` over the replicate
        means (unit "replicates"). With one replicate: over its pairs when they
        are independent (the interval is then conditional on that replicate's
        data corruption, said in the note), else the mean without an interval.
    """
    means, sizes = [], []
    for g in groups:
        x = _clean(g)
        if x.size:
            means.append(float(x.mean()))
            sizes.append(int(x.size))
    if len(means) >= 2:
        pd = difference_stats(means, unit="replicates", level=level, bootstrap_from=bootstrap_from)
        per = f"each replicate the mean over its {within_unit} ({min(sizes)}–{max(sizes)})" if min(sizes) != max(
            sizes) else f"each replicate the mean over its {sizes[0]} {within_unit}"
        return PairedDiff(**{**pd.to_dict(), "method": f"{pd.method}; {per}"})
    if not means:
        return difference_stats([], unit="replicates", level=level)
    only = _clean(groups[[i for i, g in enumerate(groups) if _clean(g).size][0]])
    if within_independent and only.size >= 2:
        pd = difference_stats(only, unit=within_unit, level=level, bootstrap_from=bootstrap_from)
        note = "; ".join(x for x in (pd.note, "one replicate: the interval is over its "
                                     f"{within_unit} and conditional on its data-corruption draw") if x)
        return PairedDiff(**{**pd.to_dict(), "note": note})
    why = ("one replicate whose targets share reference models, so they are not independent and no interval "
           "over them is valid" if not within_independent and only.size >= 2 else f"a single pair ({within_unit})")
    return PairedDiff(float(only.mean()), None, None, 1, "replicates", "no interval: " + why,
                      min=float(only.min()), max=float(only.max()), note=f"no interval: {why}")


def bounded_mean_intervals(samples: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Distribution-free intervals for the mean of values in [0, 1], one per row of ``samples`` [runs, n].

    Anderson's bound: with probability at least 1 − α/2 the true distribution
    function F lies below F_n + ε (ε the one-sided Kolmogorov–Smirnov quantile
    of n values at 1 − α/2; conservative for discrete F), and the mean is
    ∫ (1 − F), so ``low = Σ_i (x_(i+1) − x_(i)) · max(0, 1 − i/n − ε)`` with
    x_(0) = 0; the upper end is the same bound applied to 1 − x. Valid for any
    distribution on [0, 1] (a fraction of four layers included) at every n ≥ 1,
    and both ends lie in [0, 1]. The price: at n = 3 the interval of three ones
    is [0.29, 1], because three fair coins all land 1 with probability 1/8.
    """
    x = np.sort(np.clip(np.asarray(samples, dtype=np.float64), 0.0, 1.0), axis=-1)
    n = x.shape[-1]
    eps = _ks_quantile(0.5 + level / 2.0, n)
    weights = np.maximum(0.0, 1.0 - np.arange(n) / n - eps)  # 1 − F_n − ε on [x_(i), x_(i+1))

    def lower(v: np.ndarray) -> np.ndarray:
        steps = np.diff(np.concatenate([np.zeros(v.shape[:-1] + (1,)), v], axis=-1), axis=-1)
        return (steps * weights).sum(axis=-1)

    return lower(x), 1.0 - lower(np.sort(1.0 - x, axis=-1))


def bounded_mean(values: Sequence[float] | np.ndarray, unit: str, level: float = LEVEL) -> PairedDiff:
    """The mean of independent values in [0, 1] with :func:`bounded_mean_intervals`' interval."""
    x = _clean(values)
    if x.size == 0:
        return PairedDiff(math.nan, None, None, 0, unit, "no values")
    lo, hi = bounded_mean_intervals(x[None, :], level)
    return PairedDiff(float(x.mean()), float(lo[0]), float(hi[0]), int(x.size), unit,
                      f"{level * 100:g}% distribution-free interval for a mean in [0, 1] over {x.size} {unit} "
                      "(Anderson's bound: one-sided Kolmogorov–Smirnov band)", min=float(x.min()),
                      max=float(x.max()), sd=float(x.std(ddof=1)) if x.size >= 2 else None)


def replicated_bounded_mean(groups: Sequence[Sequence[float] | np.ndarray], within_unit: str,
                            level: float = LEVEL) -> PairedDiff:
    """Like :func:`replicated_difference` for values in [0, 1] (e.g. a fraction of layers): per replicate the
    mean over its units, the distribution-free :func:`bounded_mean` over replicates; one replicate: over its
    units (independent given its data), said in the note."""
    means = [float(_clean(g).mean()) for g in groups if _clean(g).size]
    if len(means) >= 2:
        pd = bounded_mean(means, "replicates", level)
        return PairedDiff(**{**pd.to_dict(), "method": f"{pd.method}; each replicate the mean over its {within_unit}"})
    if not means:
        return bounded_mean([], "replicates", level)
    only = next(_clean(g) for g in groups if _clean(g).size)
    pd = bounded_mean(only, within_unit, level)
    return PairedDiff(**{**pd.to_dict(), "note": f"one replicate: the interval is over its {within_unit} and "
                                                 "conditional on its data-corruption draw"})
