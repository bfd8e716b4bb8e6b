"""Measured leakage for the audit's headline: pooled attack metrics per group of examples, with intervals.

For each attack and each group (the whole training set, the known outliers, the examples with the
largest gradient norms), the scores of every target model on the group's examples are pooled (as the
pooled ROC of the LiRA paper), and

* the AUC and the TPR at 1% and 0.1% FPR of that pooled ROC;
* for the AUC, a 95% percentile interval from a bootstrap over examples (each resampled example
  keeps its scores under every target, so the interval reflects how few examples a group has);
* a TPR at FPR f only where the pooled non-members can reach it (at least 1/f of them, so that
  one false positive is allowed); otherwise it is "not estimable with N non-members". Where it is
  estimable, its interval is the exact (Clopper–Pearson) 95% interval of the members found out of
  the member scores, which is never a single point ([0%, 12%] for 0 of 30);
* cautions where a metric rests on little: a TPR read from fewer than
  :data:`MIN_FALSE_POSITIVES` expected false positives, an AUC from fewer than
  :data:`MIN_PER_SIDE` pooled members or non-members.

The risk level of a group is read from both ends of its AUC interval (the rule lives in
:mod:`bnmem.auditing.report`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnmem.attacks import spec as attack_spec

# The headline reads the pooled metrics and intervals of the attacks playing HEADLINE (bnmem.attacks.spec).
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


def estimable(n_nonmembers: int, fpr: float) -> bool:
    """A TPR at ``fpr`` can be read from ``n_nonmembers`` scores: they allow at least one false positive."""
    return int(np.floor(fpr * n_nonmembers + 1e-9)) >= 1


def not_estimable_text(n_nonmembers: int, fpr: float) -> str:
    return f"not estimable with {n_nonmembers} non-members (needs {int(np.ceil(1 / fpr - 1e-9)):,})"


def clopper_pearson_interval(k: int, n: int, level: float = LEVEL) -> list[float]:
    """Two-sided exact interval of a proportion k/n (each side at (1 − level)/2; [0, u] at k = 0)."""
    from bnmem.attacks.epsilon import clopper_pearson

    alpha = (1 - level) / 2
    return [float(clopper_pearson(k, n, alpha, upper=False)), float(clopper_pearson(k, n, alpha, upper=True))]


def group_metrics(scores: np.ndarray, members: np.ndarray, seed: int = 0,
                  n_boot: int = BOOTSTRAP) -> dict[str, Any]:
    """Pooled metrics of one attack on one group: the AUC with a bootstrap interval, the TPR at each FPR of
    :data:`FPRS` with an exact interval where estimable (None and a note where not), and cautions.

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
    aucs = np.array([pooled.metrics(np.bincount(rng.integers(0, n, n), minlength=n))["auc"] for _ in range(n_boot)])
    tail = 100 * (1 - LEVEL) / 2
    ci: dict[str, Any] = {"auc": [float(np.nanpercentile(aucs, tail)), float(np.nanpercentile(aucs, 100 - tail))]}
    n_in, n_out = int(members.sum()), int((~members).sum())
    notes, cautions = {}, []
    for key, fpr in FPRS.items():
        if n_in and estimable(n_out, fpr):
            ci[key] = clopper_pearson_interval(int(round(point[key] * n_in)), n_in)
            if n_out * fpr < MIN_FALSE_POSITIVES:
                cautions.append(f"TPR at {100 * fpr:g}% FPR read from {int(np.floor(n_out * fpr + 1e-9))} allowed "
                                f"false positive(s) among {n_out} non-member scores ({n_out // max(t, 1)} per target "
                                f"× {t} targets; {MIN_FALSE_POSITIVES} need {int(MIN_FALSE_POSITIVES / fpr):,})")
        else:
            point[key], ci[key] = None, None
            notes[key] = not_estimable_text(n_out, fpr)
    if min(n_in, n_out) < MIN_PER_SIDE:
        cautions.append(f"AUC from {n_in} member and {n_out} non-member scores (fewer than {MIN_PER_SIDE})")
    return {**point, "ci": ci, "tpr_notes": notes, "n_examples": n, "targets": t, "member_scores": n_in,
            "nonmember_scores": n_out, "cautions": cautions}


def leakage_section(scores: dict[str, np.ndarray], members: np.ndarray, masks: dict[str, np.ndarray],
                    seed: int = 0) -> dict[str, dict[str, Any]]:
    """``{attack: {group: group_metrics}}`` for the headline attacks on every non-empty group."""
    return {a: {g: group_metrics(scores[a][:, mask], members[:, mask], seed) for g, mask in masks.items()
                if mask.any()}
            for a in attack_spec.playing(attack_spec.HEADLINE) if a in scores}


def strongest(leakage: dict[str, dict[str, Any]], group: str) -> tuple[str, dict[str, Any]] | None:
    """The headline attack with the highest lower AUC bound on ``group``: the one whose evidence rules out the
    most (the level's rule; not the highest point AUC). None when no attack scored the group."""
    found = [(a, subs[group]) for a, subs in leakage.items() if group in subs]
    return max(found, key=lambda item: item[1]["ci"]["auc"][0]) if found else None
