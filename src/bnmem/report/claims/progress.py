"""Matched training progress (plan 5.0, claims 1 and 2): read the baseline where it has learned as much of its
clean training data as BN has.

A model's progress at an epoch is its clean-subset training accuracy (the memorize lens records it after every
epoch). For a BN checkpoint t with clean accuracy a, the baseline is read at t' = the first (fractional) epoch
its clean-accuracy curve reaches a, linearly interpolated between its recorded epochs
(:func:`first_reach`), and any of its per-epoch or per-checkpoint quantities at t' by linear interpolation
(:func:`value_at`). A level the baseline never reaches in its run, or had already passed at its first record
(when it crossed it is not measured), has no match: the comparison covers the range of progress both reach.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def _finite_xy(epochs: Sequence[float], values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(epochs, dtype=float)
    y = np.asarray(values, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    order = np.argsort(x[ok], kind="stable")
    return x[ok][order], y[ok][order]


def first_reach(epochs: Sequence[float], curve: Sequence[float], level: float) -> float:
    """The first (fractional) epoch at which ``curve`` (its values at ``epochs``) reaches ``level``, by linear
    interpolation between recorded epochs; NaN when it never does, when ``level`` is not finite, or when the
    curve is already above ``level`` at its first record (the crossing lies before what was measured)."""
    if not math.isfinite(level):
        return math.nan
    x, y = _finite_xy(epochs, curve)
    if x.size == 0:
        return math.nan
    hit = np.nonzero(y >= level)[0]
    if hit.size == 0:
        return math.nan
    j = int(hit[0])
    if j == 0:
        return float(x[0]) if y[0] == level else math.nan
    y0, y1 = y[j - 1], y[j]
    return float(x[j - 1] + (level - y0) / (y1 - y0) * (x[j] - x[j - 1]))


def value_at(epochs: Sequence[float], values: Sequence[float], t: float) -> float:
    """``values`` (recorded at ``epochs``) linearly interpolated at epoch ``t``; NaN outside the recorded
    range (no extrapolation) or for a non-finite ``t``."""
    if not math.isfinite(t):
        return math.nan
    x, y = _finite_xy(epochs, values)
    if x.size == 0 or t < x[0] or t > x[-1]:
        return math.nan
    return float(np.interp(t, x, y))


def curve_epochs(curve: Sequence[float]) -> np.ndarray:
    """The epochs of a per-epoch curve: 1, 2, ..., len(curve) (value i is recorded after epoch i + 1)."""
    return np.arange(1, len(curve) + 1, dtype=float)


def matched_difference(bn_progress: Sequence[float], bn_values: Sequence[float],
                       base_progress_epochs: Sequence[float], base_progress: Sequence[float],
                       base_epochs: Sequence[float], base_values: Sequence[float]) -> tuple[float, int]:
    """One pair's matched-progress statistic: the mean over BN's checkpoints (BN's clean accuracy
    ``bn_progress`` and its value ``bn_values`` at each) of BN's value minus the baseline's value at the epoch its
    clean curve (``base_progress`` at ``base_progress_epochs``) first reaches BN's clean accuracy (its values
    ``base_values`` at ``base_epochs`` interpolated there). Returns (mean, matched checkpoints); (NaN, 0)
    when no checkpoint matches."""
    diffs = []
    for a, v in zip(bn_progress, bn_values):
        if not (math.isfinite(a) and math.isfinite(v)):
            continue
        u = value_at(base_epochs, base_values, first_reach(base_progress_epochs, base_progress, a))
        if math.isfinite(u):
            diffs.append(v - u)
    return (float(np.mean(diffs)), len(diffs)) if diffs else (math.nan, 0)
