"""``bnmem audit --compare-gs-reg λ``: the audit's shadow copies with and without the γ/σ regularizer.

The same architecture, data, keep matrix, seeds and recipe train a second set of shadow copies
with the regularizer of weight λ added (``train.gs_reg``, what :class:`bnmem.GammaSigmaPenalty`
adds to a user's own loop). The two sets are paired (same initial weights, same halves, same
batch order), so the side-by-side AUCs are the privacy gain of the regularizer on the user's
data and architecture, and the shadow copies' train/test accuracies its cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from bnmem.auditing.membership import shadow_membership
from bnmem.config import TrainConfig
from bnmem.data.dataset import OutlierDataset

COMPARE_DIR = "compare_gs_reg"
# Groups shown side by side (when the audit has them).
GROUPS = ("all", "outliers", "most_exposed")


def arm(mem: dict[str, Any], gs_reg: float) -> dict[str, Any]:
    """One column of the comparison: λ, online-LiRA/RMIA AUCs per group with intervals, shadow accuracies."""
    leak = mem["leakage"]
    return {
        "gs_reg": gs_reg,
        "auc": {a: {g: {"auc": v[g]["auc"], "ci": v[g]["ci"]["auc"]} for g in GROUPS if g in v}
                for a, v in leak.items()},
        "tpr_at_1pct_fpr": {a: {g: v[g]["tpr_at_1pct_fpr"] for g in GROUPS if g in v} for a, v in leak.items()},
        "shadow_accuracy": mem["shadow_accuracy"],
    }


def gs_reg_comparison(baseline: dict[str, Any], model: nn.Module, ds: OutlierDataset, train: TrainConfig,
                      lam: float, out: Path | None, progress: bool, executor: Any,
                      exposed: np.ndarray) -> dict[str, Any]:
    """Train the regularized shadow copies and put them beside ``baseline`` (the audit's membership section).

    Args:
        baseline: the membership section of the recipe as given.
        model, ds, train: as for the audit's membership section.
        lam: λ of the regularizer (τ is ``train.gs_tau``).
        out: the audit folder (the regularized copies go under ``compare_gs_reg/``; None: memory).
        progress, executor, exposed: as for the membership section.

    Returns:
        ``{"lambda", "tau", "without", "with", "gain", "cost_test_points", "membership"}``: ``gain`` is the
        drop in pooled AUC per attack and group, ``cost_test_points`` the drop in the copies' test
        accuracy (percentage points).
    """
    regularized = train.model_copy(update={"gs_reg": lam})
    sub = None if out is None else out / COMPARE_DIR
    mem = shadow_membership(model, ds, baseline["shadow_models"], regularized, sub, progress, executor, exposed)
    without, with_ = arm(baseline, train.gs_reg), arm(mem, lam)
    gain = {a: {g: without["auc"][a][g]["auc"] - v["auc"] for g, v in groups.items() if g in without["auc"][a]}
            for a, groups in with_["auc"].items() if a in without["auc"]}
    cost = 100 * (without["shadow_accuracy"]["test"] - with_["shadow_accuracy"]["test"])
    return {"lambda": lam, "tau": train.gs_tau, "without": without, "with": with_, "gain": gain,
            "cost_test_points": cost, "membership": mem}
