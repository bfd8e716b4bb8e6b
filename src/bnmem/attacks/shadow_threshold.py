"""Low-FPR operating points with the threshold fitted on shadow (reference) models only.

A realistic attacker never sees the target's scores when choosing a threshold: it calibrates on its own
shadow models, whose membership it knows. :func:`shadow_threshold` picks, from the non-member scores of the
reference models, the smallest threshold whose false-positive rate there is at most ``fpr`` (a score above
the threshold reads "member"); :func:`rates_at` then reads the target's TPR and FPR at it, and
:func:`precision_at_prior` the precision an attacker would see when only a fraction ``prior`` of the
candidates are members (instead of LiRA's 50%). Higher scores mean "member".
"""

from __future__ import annotations

import math

import numpy as np

LOW_FPR = 0.001  # the operating point reported beside the AUC (0.1% FPR)
MEMBER_PRIOR = 0.01  # the member prior precision is reported at (1%)


def shadow_threshold(reference_nonmember_scores: np.ndarray, fpr: float = LOW_FPR) -> float:
    """The smallest threshold t with mean(z > t) ≤ ``fpr`` over the reference models' non-member scores z:
    t is the (k+1)-th largest z, k = ⌊fpr·len(z)⌋ (ties stay below it, so the bound holds)."""
    z = np.asarray(reference_nonmember_scores, dtype=np.float64).ravel()
    z = z[np.isfinite(z)]
    if z.size == 0:
        return math.inf
    k = int(math.floor(fpr * z.size + 1e-12))
    if k >= z.size:
        return -math.inf
    return float(np.sort(z)[::-1][k])


def rates_at(scores: np.ndarray, members: np.ndarray, threshold: float) -> tuple[float, float]:
    """(TPR, FPR) of ``scores > threshold`` on one target (``members``: bool, its true membership)."""
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(members, dtype=bool)
    hit = s > threshold
    tpr = float(hit[m].mean()) if m.any() else math.nan
    fpr = float(hit[~m].mean()) if (~m).any() else math.nan
    return tpr, fpr


def precision_at_prior(tpr: float, fpr: float, prior: float = MEMBER_PRIOR) -> float:
    """π·TPR / (π·TPR + (1 − π)·FPR): the share of flagged candidates that are members when a fraction π
    of the candidates are; nan when nothing is flagged."""
    num = prior * tpr
    den = num + (1.0 - prior) * fpr
    return num / den if den > 0 else math.nan
