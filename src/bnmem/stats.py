"""Paired statistics for BN vs other-norm comparisons.

Every comparison the report makes is paired: the BN model and the other-norm
model of a pair share the data, the corruption, the keep matrix and the seed, so
the report works on the per-pair differences d_i = BN_i − other_i and gives
their mean with a 95% confidence interval. The pairing unit is the model seed
(memorization, gradient-norm ratios, γ/σ) or the LiRA target model index
(per-target AUC; target i of both norms was trained on the same keep row).

Which interval decides. A percentile bootstrap is the default, seeded so the
same numbers give the same interval. With few pairs it is too narrow: over 3
seeds there are only 10 distinct resamples and the interval can never leave
[min, max] of the three differences, so it undercovers badly. Below
``SMALL_N`` pairs the deciding interval is therefore the Student t-interval
(n − 1 degrees of freedom); the bootstrap interval and the min/max are still
reported next to it, and the method string says which one decided.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats as _sps

LEVEL = 0.95
N_RESAMPLES = 10_000
SEED = 0
# Below this many pairs the t-interval decides (see the module docstring).
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

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


def _clean(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).ravel()
    return arr[np.isfinite(arr)]


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray,
    level: float = LEVEL,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the mean.

    Args:
        values: the sample (non-finite entries are dropped).
        level: coverage, e.g. 0.95.
        n_resamples: bootstrap resamples.
        seed: seed of the resampling; the same inputs give the same interval.

    Returns:
        ``(low, high)``, or None with fewer than 2 finite values.
    """
    x = _clean(values)
    if x.size < 2:
        return None
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
    mean = float(x.mean())
    sd = float(x.std(ddof=1))
    if sd == 0.0:
        return mean, mean
    half = float(_sps.t.ppf(0.5 + level / 2.0, df=x.size - 1)) * sd / math.sqrt(x.size)
    return mean - half, mean + half


def paired_difference(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    unit: str = "seeds",
    level: float = LEVEL,
    n_resamples: int = N_RESAMPLES,
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
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> PairedDiff:
    """Like :func:`paired_difference`, from the differences themselves."""
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
    boot = bootstrap_mean_ci(d, level, n_resamples, seed)
    tint = t_interval(d, level)
    if d.size == 1:
        notes.append(f"1 pair ({unit[:-1] if unit.endswith('s') else unit}) only: no interval; "
                     "decided on the point estimate")
        method = "single pair: no confidence interval"
        low = high = None
    elif d.size < SMALL_N:
        boot_text = f"[{boot[0]:+.3g}, {boot[1]:+.3g}]"
        notes.append(
            f"only {d.size} {unit}: the interval is coarse; the percentile bootstrap {boot_text} cannot leave "
            "the range of so few values and undercovers, so the t-interval decides"
        )
        method = f"{pct} Student t-interval over {d.size} paired {unit} (n < {SMALL_N})"
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
