"""Measured leakage for the audit's headline: pooled attack metrics per group of examples, with intervals.

For each attack and each group (the whole training set, the known outliers, the most-exposed
examples), the scores of every target model on the group's examples are pooled (as the
pooled ROC of the LiRA paper), and

* the AUC and the TPR at 1% and 0.1% FPR of that pooled ROC;
* 95% percentile intervals from a bootstrap over examples (each resampled example keeps
  its scores under every target, so the interval reflects how few examples a group has);
* cautions where a metric rests on too little: a TPR at FPR f needs about
  :data:`MIN_FALSE_POSITIVES` pooled non-members above its threshold (non-members × f), an
  AUC at least :data:`MIN_PER_SIDE` pooled members and non-members.

The risk level of a group is read from the lower end of its AUC interval (the thresholds
live in :mod:`bnmem.auditing.report`), so a high AUC on a handful of examples does not
outweigh its own uncertainty.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Attacks whose pooled metrics and intervals the headline reads (online LiRA: the reference; RMIA).
HEADLINE_ATTACKS = ("online", "rmia")
BOOTSTRAP = 200
LEVEL = 0.95
FPRS = {"tpr_at_1pct_fpr": 0.01, "tpr_at_0.1pct_fpr": 0.001}
# A TPR at FPR f read from fewer expected false positives than this is flagged.
MIN_FALSE_POSITIVES = 10
# An AUC with fewer pooled members (or non-members) than this is flagged.
MIN_PER_SIDE = 30


def pooled_auc(scores: np.ndarray, members: np.ndarray) -> float:
    """AUC of scores (higher = member) against bool members, ties counted half (Mann–Whitney)."""
    from scipy.stats import rankdata

    s, m = np.ravel(scores), np.ravel(members).astype(bool)
    n_pos, n_neg = int(m.sum()), int((~m).sum())
    if not n_pos or not n_neg:
        return float("nan")
    ranks = rankdata(s)
    return float((ranks[m].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def pooled_tpr(scores: np.ndarray, members: np.ndarray, fpr: float) -> float:
    """Largest TPR over thresholds whose FPR is at most ``fpr`` (0 when none)."""
    s, m = np.ravel(scores), np.ravel(members).astype(bool)
    neg, pos = np.sort(s[~m])[::-1], s[m]
    if not neg.size or not pos.size:
        return float("nan")
    allowed = int(np.floor(fpr * neg.size))  # non-members allowed strictly above the threshold
    threshold = neg[allowed] if allowed < neg.size else -np.inf
    return float((pos > threshold).mean())


def group_metrics(scores: np.ndarray, members: np.ndarray, seed: int = 0,
                  n_boot: int = BOOTSTRAP) -> dict[str, Any]:
    """Pooled metrics of one attack on one group, with bootstrap intervals and cautions.

    Args:
        scores: [targets, examples] attack scores.
        members: [targets, examples] bool, True where the example trained the target.
        seed: bootstrap seed.
        n_boot: bootstrap resamples.
    """
    t, n = scores.shape
    point = {"auc": pooled_auc(scores, members), **{k: pooled_tpr(scores, members, f) for k, f in FPRS.items()}}
    rng = np.random.default_rng([seed, 0xB007])
    draws = {k: np.empty(n_boot) for k in point}
    for b in range(n_boot):
        cols = rng.integers(0, n, n)
        s, m = scores[:, cols], members[:, cols]
        draws["auc"][b] = pooled_auc(s, m)
        for k, f in FPRS.items():
            draws[k][b] = pooled_tpr(s, m, f)
    tail = 100 * (1 - LEVEL) / 2
    ci = {k: [float(np.nanpercentile(v, tail)), float(np.nanpercentile(v, 100 - tail))] for k, v in draws.items()}
    n_in, n_out = int(members.sum()), int((~members).sum())
    cautions = []
    if min(n_in, n_out) < MIN_PER_SIDE:
        cautions.append(f"AUC from {n_in} member and {n_out} non-member scores (fewer than {MIN_PER_SIDE})")
    thin = [f for f in FPRS.values() if n_out * f < MIN_FALSE_POSITIVES]
    if thin:
        cautions.append(f"TPR at {' and '.join(f'{100 * f:g}%' for f in thin)} FPR from {n_out} non-member scores "
                        f"({n_out // max(t, 1)} per target × {t} targets; {MIN_FALSE_POSITIVES} false positives "
                        f"need {' and '.join(f'{int(MIN_FALSE_POSITIVES / f):,}' for f in thin)})")
    return {**point, "ci": ci, "n_examples": n, "targets": t, "member_scores": n_in, "nonmember_scores": n_out,
            "cautions": cautions}


def leakage_section(scores: dict[str, np.ndarray], members: np.ndarray, masks: dict[str, np.ndarray],
                    seed: int = 0) -> dict[str, dict[str, Any]]:
    """``{attack: {group: group_metrics}}`` for the headline attacks on every non-empty group."""
    return {a: {g: group_metrics(scores[a][:, mask], members[:, mask], seed) for g, mask in masks.items()
                if mask.any()}
            for a in HEADLINE_ATTACKS if a in scores}


def strongest(leakage: dict[str, dict[str, Any]], group: str) -> tuple[str, dict[str, Any]] | None:
    """The headline attack with the highest lower AUC bound on ``group`` (None when no attack scored it)."""
    found = [(a, subs[group]) for a, subs in leakage.items() if group in subs]
    return max(found, key=lambda item: item[1]["ci"]["auc"][0]) if found else None
