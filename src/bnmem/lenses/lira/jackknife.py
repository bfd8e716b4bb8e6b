"""Delete-one-model jackknife of the paired BN − other AUC difference, within one experiment.

The targets of a leave-one-out LiRA evaluation share reference models, the
training data and the keep matrix, so resampling targets as if independent
makes the interval about 2× too narrow. Deleting one shadow model at a time
(as a target and from every reference set) and re-running the attacks gives
the delete-one-model jackknife, whose spread includes that shared dependence;
:func:`bnmem.stats.jackknife_interval` turns the leave-one-out values into an
interval. It costs one full attack evaluation per model and norm, so it is
meant for runs with a single replicate (with replicates, the report's interval
is over replicates and needs none of this).

The report reads the result from ``metrics.json`` as
``paired["<ref>-<other>"][attack][subset]["auc"]["jackknife"] = {"leave_one_out": [...]}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from bnmem.attacks import evaluate_attacks
from bnmem.errors import BnmemError
from bnmem.lenses.lira.query import load_attack_inputs

JACKKNIFE_ATTACKS = ("online", "offline", "rmia")
MIN_MODELS = 6  # with a balanced keep, fewer leave some example without an IN reference after a deletion


def paired_jackknife(
    logits_a: np.ndarray,
    logits_b: np.ndarray,
    keep: np.ndarray,
    labels: np.ndarray,
    subsets: Mapping[str, np.ndarray] | None = None,
    attacks: Sequence[str] = JACKKNIFE_ATTACKS,
    **attack_kwargs: Any,
) -> dict[str, dict[str, list[float]]]:
    """Leave-one-model-out means of the per-target AUC difference a − b.

    Args:
        logits_a: [n_models, n_examples, n_views, n_classes] of one norm (e.g. BN).
        logits_b: the same shape for the other norm; model m of both trained on keep row m.
        keep: [n_models, n_examples] membership, shared by both norms.
        labels: [n_examples] true labels.
        subsets: extra example subsets, as for :func:`bnmem.attacks.evaluate_attacks` (``all`` is added).
        attacks: attack names.
        **attack_kwargs: passed to :func:`~bnmem.attacks.evaluate_attacks` unchanged (e.g. ``rmia_params``,
            ``population``), so the jackknife uses the lens's own attack settings.

    Returns:
        ``{attack: {subset: [value with model 0 deleted, ..., with model M−1 deleted]}}``: each value
        the mean over the remaining targets of the AUC difference, every attack re-run on the M − 1
        remaining models (nan where a subset had no scorable target).

    Raises:
        BnmemError: shapes disagree, or fewer than :data:`MIN_MODELS` models.
    """
    if logits_a.shape != logits_b.shape or keep.shape != logits_a.shape[:2]:
        raise BnmemError(f"jackknife: logits {logits_a.shape} / {logits_b.shape} and keep {keep.shape} disagree")
    n_models = keep.shape[0]
    if n_models < MIN_MODELS:
        raise BnmemError(f"jackknife: needs at least {MIN_MODELS} shadow models, got {n_models}")
    out: dict[str, dict[str, list[float]]] = {}
    for j in range(n_models):
        rest = np.array([m for m in range(n_models) if m != j])
        res = [evaluate_attacks(lg[rest], keep[rest], labels, subsets=subsets, attacks=attacks, **attack_kwargs)
               ["metrics"] for lg in (logits_a, logits_b)]
        for attack in attacks:
            for sub in res[0][attack]:
                d = (np.asarray(res[0][attack][sub]["auc_per_target"], dtype=np.float64)
                     - np.asarray(res[1][attack][sub]["auc_per_target"], dtype=np.float64))
                ok = d[np.isfinite(d)]
                out.setdefault(attack, {}).setdefault(sub, []).append(float(ok.mean()) if ok.size else float("nan"))
    return out


def attach_jackknife(paired: dict[str, Any], out_dir: str | Path, reference: str, others: Sequence[str],
                     attacks: Sequence[str] = JACKKNIFE_ATTACKS, **attack_kwargs: Any) -> dict[str, Any]:
    """Add the jackknife to a lira run's ``paired`` section (in place), from the arrays the lens saved.

    Args:
        paired: ``metrics.json``'s ``paired`` block (``{"<ref>-<other>": {attack: {subset: {"auc": ...}}}}``).
        out_dir: the lira run directory (``<out_dir>/<norm>/`` holds each norm's query arrays).
        reference: the reference norm (BN).
        others: the norms compared with it.
        attacks: attacks to re-run.
        **attack_kwargs: the lens's attack settings (see :func:`paired_jackknife`).

    Returns:
        ``paired``, with ``["auc"]["jackknife"] = {"leave_one_out": [...], "unit": ...}`` where computed.
    """
    ref = load_attack_inputs(Path(out_dir) / reference)
    outliers = ref["is_noisy"] | ref["is_ood"]
    subsets = {"outliers": outliers, "inliers": ~outliers}
    for other in others:
        arrays = load_attack_inputs(Path(out_dir) / other)
        if not np.array_equal(arrays["keep"], ref["keep"]):
            raise BnmemError(f"jackknife: {reference} and {other} were trained on different keep matrices")
        jk = paired_jackknife(ref["logits"], arrays["logits"], ref["keep"], ref["labels"], subsets, attacks,
                              **attack_kwargs)
        for attack, per_sub in jk.items():
            for sub, loo in per_sub.items():
                block = paired.get(f"{reference}-{other}", {}).get(attack, {}).get(sub, {}).get("auc")
                if isinstance(block, dict):
                    block["jackknife"] = {"leave_one_out": loo,
                                          "unit": "shadow model (deleted as a target and from every reference set)"}
    return paired
