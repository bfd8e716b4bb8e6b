"""``bnmem audit --compare-gs-reg λ``: what the γ/σ regularizer changes, measured on paired shadow copies.

The same architecture, data, keep matrix, seeds and recipe train a second set of shadow copies
with the regularizer of weight λ added (``train.gs_reg``, what :class:`bnmem.GammaSigmaPenalty`
adds to a user's own loop), calibrated as the plain copies were (the same step matching and, with
``--match-accuracy``, their own probe). The two sets are paired: copy m of each shares its initial
weights, its half and its batch order, and both are attacked with the same keep matrix. So

* each group's AUC difference (with − without) gets a paired interval: one bootstrap over the
  group's examples, the same resampled examples in both arms (:func:`paired_auc`);
* the accuracy cost gets a paired t-interval over the copies (copy m with the regularizer against
  copy m without, :func:`paired_cost`);
* the regularized copies' training accuracy is compared with the model's like the plain copies', so
  a privacy gain bought by under-fitting is said to be one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
from torch import nn

from bnmem.auditing.calibration import ACCURACY_MARGIN
from bnmem.auditing.leakage import BOOTSTRAP, LEVEL, PooledScores
from bnmem.auditing.membership import RAW, shadow_membership
from bnmem.config import TrainConfig
from bnmem.data.dataset import OutlierDataset

COMPARE_DIR = "compare_gs_reg"
# Groups compared (when the audit has them).
GROUPS = ("all", "outliers", "rare", "most_exposed")
TITLE = "What the γ/σ regularizer changes on your data: membership AUC and accuracy, paired copies"


def paired_auc(without: tuple[np.ndarray, np.ndarray], with_: tuple[np.ndarray, np.ndarray], seed: int = 0,
               n_boot: int = BOOTSTRAP) -> dict[str, Any]:
    """Pooled AUC of one group in both arms and the difference (with − without) with a paired interval.

    Args:
        without, with_: ``(scores, members)`` [targets, examples] of each arm; the members must agree
            (the same keep matrix).
        seed, n_boot: the bootstrap over examples, the same draws for both arms.
    """
    (s0, m0), (s1, m1) = without, with_
    if s0.shape != s1.shape or not np.array_equal(m0, m1):
        raise ValueError("the two arms of the comparison must share the keep matrix and the examples")
    n = s0.shape[1]
    a, b = PooledScores(s0, m0), PooledScores(s1, m1)
    rng = np.random.default_rng([seed, 0xC0A1])
    diffs = []
    for _ in range(n_boot):
        w = np.bincount(rng.integers(0, n, n), minlength=n)
        diffs.append(b.metrics(w)["auc"] - a.metrics(w)["auc"])
    tail = 100 * (1 - LEVEL) / 2
    auc0, auc1 = a.metrics(np.ones(n))["auc"], b.metrics(np.ones(n))["auc"]
    return {"without": auc0, "with": auc1, "diff": auc1 - auc0,
            "ci": [float(np.nanpercentile(diffs, tail)), float(np.nanpercentile(diffs, 100 - tail))],
            "n_examples": n}


def paired_cost(without: list[dict[str, Any]], with_: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Accuracy lost to the regularizer (points; negative: gained), copy by copy, with a paired t-interval."""
    from bnmem.stats import t_interval

    d = 100 * (np.array([c[key] for c in without], float) - np.array([c[key] for c in with_], float))
    ci = t_interval(d)
    return {"points": float(d.mean()), "ci": list(ci) if ci is not None else None, "per_copy": d.tolist()}


def gs_reg_comparison(baseline: dict[str, Any], model: nn.Module, ds: OutlierDataset, base: TrainConfig,
                      lam: float, out: Path | None, progress: bool, executor: Any, groups: dict[str, np.ndarray],
                      calibrate: Callable[[TrainConfig], tuple[TrainConfig, dict[str, Any] | None]],
                      model_train_acc: float | None = None) -> dict[str, Any]:
    """Train the regularized shadow copies and compare them, pair by pair, with ``baseline``.

    Args:
        baseline: the membership section of the recipe as given (with its raw scores).
        model, ds: as for the membership section.
        base: the copies' recipe before any accuracy matching (the step-matched one).
        lam: λ of the regularizer (τ is ``base.gs_tau``).
        out: the audit folder (the regularized copies go under ``compare_gs_reg/``; None: memory).
        progress, executor, groups: as for the membership section.
        calibrate: the plain copies' calibration, applied to the regularized recipe.
        model_train_acc: the model's training accuracy (the regularized copies are compared with it).

    Returns:
        ``{"title", "lambda", "tau", "auc": {attack: {group: paired_auc}}, "cost_test", "cost_train",
        "shadow_accuracy": {"without", "with"}, "train": recipe, "matched", "calibration_gap", "confounded",
        "membership"}``.
    """
    regularized, matched = calibrate(base.model_copy(update={"gs_reg": lam}))
    sub = None if out is None else out / COMPARE_DIR
    mem = shadow_membership(model, ds, baseline["shadow_models"], regularized, sub, progress, executor, groups)
    r0, r1 = baseline[RAW], mem[RAW]
    auc = {a: {g: paired_auc((r0["scores"][a][:, m], r0["members"][:, m]), (r1["scores"][a][:, m],
                                                                             r1["members"][:, m]))
               for g, m in r0["masks"].items() if g in GROUPS and m.any()}
           for a in baseline["leakage"] if a in r1["scores"]}
    per0, per1 = baseline["shadow_accuracy_per_copy"], mem["shadow_accuracy_per_copy"]
    gap = None if model_train_acc is None else mem["shadow_accuracy"]["train_in"] - model_train_acc
    return {"title": TITLE, "lambda": lam, "tau": base.gs_tau, "auc": auc,
            "cost_test": paired_cost(per0, per1, "test"), "cost_train": paired_cost(per0, per1, "train_in"),
            "shadow_accuracy": {"without": baseline["shadow_accuracy"], "with": mem["shadow_accuracy"]},
            "train": regularized.model_dump(mode="json"), "matched": matched, "calibration_gap": gap,
            "confounded": gap is not None and gap < -ACCURACY_MARGIN, "membership": mem}
