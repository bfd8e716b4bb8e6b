"""Leave-one-out LiRA with the low-FPR threshold fitted on each target's reference models alone.

In the usual leave-one-out protocol each shadow model is the target once and the others are its
references; the TPR at a low FPR is then read off the target's own ROC curve, i.e. with a threshold chosen
on the target's scores, which an attacker never has. Here the threshold is what an attacker could fit:
for target t, every reference model r ≠ t is scored as a target against the references that exclude both
t and r (the protocol run on the M − 1 models without t), the non-member scores of all of them are pooled,
and :func:`~bnmem.attacks.shadow_threshold.shadow_threshold` picks the threshold at the declared FPR there.
The target's scores (against all M − 1 references, as for its AUC) are then read at that threshold
(:func:`~bnmem.attacks.shadow_threshold.rates_at`).

Cost: M + 1 leave-one-out scorings of one attack (M·(M − 1) + M target scorings), the metrics of one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnmem.attacks import spec as attack_spec
from bnmem.attacks.shadow_threshold import LOW_FPR, rates_at, shadow_threshold
from bnmem.attacks.streaming import evaluate_stream


def shadow_operating_points(phi: np.ndarray, keep: np.ndarray, attack: str | None = None,
                            fpr: float = LOW_FPR) -> dict[str, Any]:
    """Per target: the leave-one-out AUC, and the TPR and FPR at a threshold fitted on its references only.

    Args:
        phi: φ [M, N, V] of M shadow models on the N candidates (float64 or float32).
        keep: bool [M, N] membership.
        attack: a registered attack name (None: the one playing :data:`~bnmem.attacks.spec.PRIMARY`,
            online LiRA).
        fpr: the false-positive rate the threshold is fitted for, on the references' non-members.

    Returns:
        ``{"auc_per_target", "tpr_at_shadow_threshold", "fpr_at_shadow_threshold", "threshold"}``: lists of
        M floats (nan where a target has no member or no non-member).

    Raises:
        BnmemError: too few models for every example to keep a reference on each side.
    """
    if attack is None:
        attack = attack_spec.the(attack_spec.PRIMARY)
    phi = np.asarray(phi, dtype=np.float64)
    keep = np.asarray(keep, dtype=bool)
    full = evaluate_stream(phi, keep, attacks=[attack])
    scores = full["scores"][attack]
    out: dict[str, Any] = {"auc_per_target": list(full["metrics"][attack]["all"]["auc_per_target"]),
                           "tpr_at_shadow_threshold": [], "fpr_at_shadow_threshold": [], "threshold": []}
    for t in range(keep.shape[0]):
        rest = np.arange(keep.shape[0]) != t
        refs = evaluate_stream(phi[rest], keep[rest], attacks=[attack], metrics=False)  # the scores alone
        threshold = shadow_threshold(refs["scores"][attack][~keep[rest]], fpr)
        tpr, f = rates_at(scores[t], keep[t], threshold)
        out["tpr_at_shadow_threshold"].append(tpr)
        out["fpr_at_shadow_threshold"].append(f)
        out["threshold"].append(threshold)
    return out
