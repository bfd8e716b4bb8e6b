"""Statistical power of the claims' tests: the chance a design reaches "reproduced" when the truth is the
planning effect (pure numpy/scipy; docs/analysis-plan.md declares the tests and planning effects).

Each claim declares its test in :data:`bnmem.analysis_plan.PLANNING` and this module computes its power:

* :func:`power_above`: one-sided t against a threshold, the interval's lower end above it (claims 1, 2, 3,
  7; claim 6's cut). The lower end of a two-sided level-L t-interval clears θ exactly when the one-sided t
  test at α = (1 − L)/2 rejects μ ≤ θ, so the power is the noncentral t tail
  P(T_{n−1}(δ) > t_{1−α, n−1}) with δ = (effect − θ)·√n / sd.
* :func:`power_below`: the same, upper end below a margin (claim 6's non-inferiority on the test drop).
* :func:`power_band`: equivalence, the whole interval inside a band (claim 5b): two one-sided tests on one
  sample, integrated exactly over the sample SD's χ distribution.
* :func:`power_simulated`: any other rule (an exact test on discrete outcomes, claim 4) by Monte Carlo of the
  production decision on data drawn from the planning model.
* :func:`power_all`: intersection–union over settings ("reproduced" needs every deciding setting): the
  product of the settings' powers, exact for independent settings and a lower bound when they are
  positively dependent.

:func:`units_needed` finds the smallest number of units (replicates) reaching a target power.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import numpy as np
from scipy import integrate
from scipy import stats as sps

__all__ = ["MAX_UNITS", "TARGET", "UNDERPOWERED", "power_above", "power_all", "power_band", "power_below",
           "power_simulated", "power_simulated_all", "units_needed"]

TARGET = 0.8
"""The power a design is sized for (80%): :func:`units_needed`'s default target."""
UNDERPOWERED = 0.5
"""Below this power an inconclusive verdict says nothing about the paper: the report calls it underpowered."""
MAX_UNITS = 10_000
"""The most units :func:`units_needed` searches before it gives up."""


def _valid(n: int, sd: float | None) -> bool:
    return n >= 2 and sd is not None and math.isfinite(sd)


def power_above(n: int, sd: float | None, effect: float, threshold: float, alpha: float) -> float:
    """P(lower end of the two-sided (1 − 2α) t-interval over n units > threshold) when the mean is ``effect``.

    ``sd`` is the standard deviation of one unit's value. n < 2 (no interval): 0. sd = 0: 1 if the effect
    clears the threshold, else 0.
    """
    if not _valid(n, sd):
        return 0.0
    assert sd is not None
    if sd == 0:
        return float(effect > threshold)
    crit = sps.t.ppf(1.0 - alpha, n - 1)
    nc = (effect - threshold) * math.sqrt(n) / sd
    return float(sps.nct.sf(crit, n - 1, nc))


def power_below(n: int, sd: float | None, effect: float, margin: float, alpha: float) -> float:
    """P(upper end of the interval < margin) when the mean is ``effect`` (non-inferiority)."""
    return power_above(n, sd, -effect, -margin, alpha)


def power_band(n: int, sd: float | None, effect: float, band: tuple[float, float], alpha: float) -> float:
    """P(the whole (1 − 2α) t-interval lies inside ``band``) when the mean is ``effect`` (equivalence)."""
    if not _valid(n, sd):
        return 0.0
    assert sd is not None
    lo, hi = band
    if sd == 0:
        return float(lo < effect < hi)
    crit = sps.t.ppf(1.0 - alpha, n - 1)
    df = n - 1
    se = sd / math.sqrt(n)

    def given_s(u: float) -> float:
        # u = s / sd; the interval is mean ± crit·s/√n; the mean is N(effect, se²), independent of s.
        half = crit * u * se
        width = (hi - half) - (lo + half)
        if width <= 0:
            return 0.0
        p = sps.norm.cdf((hi - half - effect) / se) - sps.norm.cdf((lo + half - effect) / se)
        # density of u = sqrt(χ²_df / df)
        dens = sps.chi.pdf(u * math.sqrt(df), df) * math.sqrt(df)
        return float(p * dens)

    upper = (hi - lo) / (2 * crit * se)  # beyond this s the interval is wider than the band
    value, _ = integrate.quad(given_s, 0.0, upper, limit=200)
    return float(min(1.0, max(0.0, value)))


def sd_upper_bound(sd: float | None, n: int, level: float) -> float | None:
    """The one-sided ``level`` upper confidence bound on a normal SD estimated from n units:
    s·sqrt((n − 1) / χ²_{1 − level, n − 1}) (the chi-square lower quantile). None without an SD or with
    fewer than 2 units; 0 stays 0."""
    if sd is None or not math.isfinite(sd) or n < 2:
        return None
    return float(sd * math.sqrt((n - 1) / sps.chi2.ppf(1.0 - level, n - 1)))


def power_all(powers: Iterable[float]) -> float:
    """Intersection–union: every setting must pass (product; a lower bound under positive dependence)."""
    out = 1.0
    for p in powers:
        out *= p
    return out


def power_simulated(decide: Callable[[np.ndarray], bool], draw: Callable[[np.random.Generator, int], np.ndarray],
                    n: int, runs: int = 2000, seed: int = 0) -> float:
    """Monte Carlo power of a decision rule: the fraction of ``runs`` studies of n units, each drawn by
    ``draw(rng, n)`` from the planning model, that ``decide`` calls reproduced (standard error
    ≤ 0.5/√runs)."""
    rng = np.random.default_rng(seed)
    return sum(bool(decide(draw(rng, n))) for _ in range(runs)) / runs


def power_simulated_all(decide_all: Callable[[list], np.ndarray], draw: Callable[[np.random.Generator, int], Any],
                        n: int, runs: int = 2000, seed: int = 0) -> float:
    """:func:`power_simulated` with a rule that decides all ``runs`` studies at once (bool array): the same
    studies from the same generator, so the same power when ``decide_all`` agrees with ``decide``."""
    rng = np.random.default_rng(seed)
    studies = [draw(rng, n) for _ in range(runs)]
    return int(np.count_nonzero(decide_all(studies))) / runs


def units_needed(power_at: Callable[[int], float], target: float = TARGET, start: int = 2,
                 limit: int = MAX_UNITS) -> int | None:
    """The smallest n ≥ ``start`` with ``power_at(n) ≥ target`` (None if even ``limit`` units fall short).

    Assumes power grows with n (true of every test above); doubling, then bisection.
    """
    lo = start
    if power_at(lo) >= target:
        return lo
    hi = lo
    while power_at(hi) < target:
        lo, hi = hi, hi * 2
        if hi > limit:
            if power_at(limit) < target:
                return None
            hi = limit
            break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power_at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi
