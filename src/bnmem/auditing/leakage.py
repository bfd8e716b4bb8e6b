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


class PooledScores:
    """One attack's scores on one group, pooled over targets and sorted once.

    A bootstrap resample of the group's examples is a weight per example (how often it was
    drawn), so every resample's metrics come from the same sorted order in linear time, with
    ties counted as in the Mann–Whitney AUC and as in :func:`bnmem.attacks.metrics.tpr_at_fpr`.

    Args:
        scores: [targets, examples] attack scores (higher = member).
        members: [targets, examples] bool ground truth.
    """

    def __init__(self, scores: np.ndarray, members: np.ndarray) -> None:
        t, n = scores.shape
        order = np.argsort(scores.ravel(), kind="stable")
        _, self.group = np.unique(scores.ravel()[order], return_inverse=True)  # tied scores share a group
        self.n_groups = int(self.group.max()) + 1 if order.size else 0
        self.member = members.ravel()[order].astype(bool)
        self.example = np.tile(np.arange(n), t)[order]

    def metrics(self, weights: np.ndarray) -> dict[str, float]:
        """AUC and TPR at each FPR of :data:`FPRS` when example j counts ``weights[j]`` times."""
        w = weights[self.example].astype(np.float64)
        pos = np.bincount(self.group, w * self.member, self.n_groups)
        neg = np.bincount(self.group, w * ~self.member, self.n_groups)
        n_pos, n_neg = pos.sum(), neg.sum()
        if not n_pos or not n_neg:
            return {"auc": float("nan"), **{k: float("nan") for k in FPRS}}
        below = np.cumsum(neg) - neg  # non-members strictly below each score
        out = {"auc": float((pos * (below + 0.5 * neg)).sum() / (n_pos * n_neg))}
        neg_from_top, pos_above = np.cumsum(neg[::-1]), np.cumsum(pos[::-1]) - pos[::-1]
        for key, fpr in FPRS.items():
            allowed = np.floor(fpr * n_neg + 1e-9)  # non-members allowed strictly above the threshold
            k = int(np.searchsorted(neg_from_top, allowed, side="right"))  # the threshold's score group
            out[key] = float(pos_above[k] / n_pos) if k < neg_from_top.size else 1.0
        return out


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
    pooled = PooledScores(scores, members)
    point = pooled.metrics(np.ones(n))
    rng = np.random.default_rng([seed, 0xB007])
    draws = [pooled.metrics(np.bincount(rng.integers(0, n, n), minlength=n)) for _ in range(n_boot)]
    tail = 100 * (1 - LEVEL) / 2
    ci = {k: [float(np.nanpercentile(v, tail)), float(np.nanpercentile(v, 100 - tail))]
          for k in point for v in [np.array([d[k] for d in draws])]}
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
