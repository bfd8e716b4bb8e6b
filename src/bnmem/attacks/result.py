"""What an attack evaluation accepts and returns, shared by both evaluators.

The in-memory oracle (:func:`bnmem.attacks.evaluate.evaluate_attacks`) and the
streaming evaluator (:func:`bnmem.attacks.streaming.evaluate_stream`) differ
only in how they compute scores. Everything around the scores lives here once:

- the request checks against the attack registry (:mod:`bnmem.attacks.spec`: names and the
  reference models (IN / OUT) each one needs);
- checking a request: attack names, RMIA parameters, subset masks, the keep
  matrix, target indices, enough references on each side;
- the result dict: per attack and subset the metrics summarized over targets
  (:func:`summarize`), the ROC curves, the subset sizes and the settings.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Mapping, Sequence

import numpy as np

from bnmem.attacks import spec as attack_spec
from bnmem.attacks.epsilon import LEVEL, KnownQuantiles, epsilon_ranked, summarize_bounds
from bnmem.attacks.metrics import METRIC_NAMES, roc
from bnmem.attacks.per_target import roc_summaries
from bnmem.attacks.pooled import POOLED_POINTS, pooled_curves, thin_curve  # noqa: F401 (thin_curve re-exported)
from bnmem.attacks.rmia import RMIAParams
from bnmem.errors import BnmemError

# The built-in attacks as declared in bnmem.attacks.spec (a snapshot at import, for readers of these
# names; the evaluators and checks ask the registry, so an attack registered later is seen too).
ALL: tuple[str, ...] = attack_spec.default_attacks()
"""The attacks an evaluation runs by default (the registry's defaults at import)."""
AVAILABLE: tuple[str, ...] = attack_spec.available()
"""Every attack registered at import, the defaults first."""
EXTRA: tuple[str, ...] = tuple(a for a in AVAILABLE if a not in ALL)
"""The registered attacks that run only when asked for by name."""
NEEDS_IN = attack_spec.needing("in")
NEEDS_OUT = attack_spec.needing("out")


def check_keep(keep: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``keep`` as a bool [n_models, n_examples] array of the expected shape.

    Raises:
        BnmemError: wrong shape, or values other than booleans / 0 / 1.
    """
    keep = np.asarray(keep)
    if keep.shape != tuple(shape):
        raise BnmemError(f"keep must be [n_models, n_examples] = {tuple(shape)}, got {keep.shape}")
    if keep.dtype != bool:
        if not np.isin(keep, (0, 1)).all():
            raise BnmemError("keep must be boolean (or 0/1)")
        keep = keep.astype(bool)
    return keep


def check_mask(mask: Any, n_examples: int, what: str) -> np.ndarray:
    """``mask`` as a bool [n_examples] array; ``what`` names it in the error."""
    mask = np.asarray(mask)
    if mask.shape != (n_examples,) or not (mask.dtype == bool or np.isin(mask, (0, 1)).all()):
        raise BnmemError(f"{what} must be a boolean mask of shape ({n_examples},), got {mask.dtype} {mask.shape}")
    return mask.astype(bool)


def _as_rmia_params(rmia_params: RMIAParams | Mapping[str, Any] | None) -> RMIAParams:
    if rmia_params is None:
        return RMIAParams()
    if isinstance(rmia_params, RMIAParams):
        return rmia_params
    unknown = set(rmia_params) - {"gamma", "a", "online"}
    if unknown:
        raise BnmemError(f"unknown RMIA parameter(s): {sorted(unknown)}; known: gamma, a, online")
    return RMIAParams(**rmia_params)


def check_request(rmia_params: RMIAParams | Mapping[str, Any] | None, attacks: Sequence[str] | None,
                  subsets: Mapping[str, np.ndarray] | None, n_examples: int
                  ) -> tuple[RMIAParams, list[str], dict[str, np.ndarray]]:
    """The validated RMIA parameters, attack names and subset masks (``all`` first) of one evaluation.

    Raises:
        BnmemError: an unknown attack or a malformed subset mask.
    """
    params = _as_rmia_params(rmia_params)
    attacks = list(attack_spec.default_attacks() if attacks is None else attacks)
    available = attack_spec.available()
    unknown = [a for a in attacks if a not in available]
    if unknown:
        raise BnmemError(f"unknown attack(s) {unknown}; available: {', '.join(available)}")
    masks = {"all": np.ones(n_examples, dtype=bool)}
    for name, mask in (subsets or {}).items():
        masks[name] = check_mask(mask, n_examples, f"subset {name!r}")
    return params, attacks, masks


def check_targets(targets: Sequence[int] | None, n_models: int) -> list[int]:
    """The target model indices (default: every model).

    Raises:
        BnmemError: an index outside 0..n_models−1.
    """
    targets = list(range(n_models)) if targets is None else [int(t) for t in targets]
    bad = [t for t in targets if not 0 <= t < n_models]
    if bad:
        raise BnmemError(f"target index(es) {bad} out of range for {n_models} models")
    return targets


def check_references(attacks: Sequence[str], k_in: int | np.ndarray, k_out: int | np.ndarray, n_refs: int,
                     target: int | None = None) -> None:
    """Raise unless the attacks that need IN (OUT) references have at least one per example.

    Args:
        attacks: the requested attack names.
        k_in, k_out: references per side that every example has (one count, or one per target).
        n_refs: the reference models a target has.
        target: the one target counted (None: every target).
    """
    wanted = set(attacks)
    if ((wanted & attack_spec.needing("in") and np.any(np.asarray(k_in) < 1))
            or (wanted & attack_spec.needing("out") and np.any(np.asarray(k_out) < 1))):
        where = f"among the other {n_refs} models" + (" of a target" if target is None else "")
        raise BnmemError(
            ("" if target is None else f"target {target}: ") + f"some example is never IN (or never OUT) {where}, "
            "so reference-based attacks are impossible; with a balanced keep matrix this needs at least 4 models"
        )


def summarize(per_target: list[dict[str, float]]) -> dict[str, Any]:
    """Mean, sample std (ddof=1) and per-target lists over targets; nan entries are skipped."""
    return summarize_rows({name: np.array([m[name] for m in per_target], dtype=np.float64) for name in METRIC_NAMES})


def summarize_rows(per_target: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """:func:`summarize` of each metric's float64 [targets] array."""
    out: dict[str, Any] = {}
    for name in METRIC_NAMES:
        values = per_target[name]
        ok = values[np.isfinite(values)]
        out[name] = float(ok.mean()) if ok.size else math.nan
        out[f"{name}_std"] = float(ok.std(ddof=1)) if ok.size >= 2 else math.nan
        out[f"{name}_per_target"] = values.tolist()
    out["n_targets"] = int(np.isfinite(per_target["auc"]).sum())
    return out


def settings(params: RMIAParams, population: str, shape: tuple[int, int, int], rmia_a: str | None = None,
             **extra: Any) -> dict[str, Any]:
    """The ``settings`` block: RMIA parameters, how its population was chosen, [models, examples, views], extras."""
    m, n, v = shape
    head = {"rmia": asdict(params)} | ({} if rmia_a is None else {"rmia_a": rmia_a})
    return {**head, "rmia_population": population, "n_models": m, "n_examples": n, "n_views": v, **extra}


def evaluation_result(scores: dict[str, np.ndarray], members: np.ndarray, targets: list[int],
                      masks: dict[str, np.ndarray], settings: dict[str, Any], *,
                      per_target_curves: bool = True, pooled_points: int | None = None) -> dict[str, Any]:
    """The result dict of an evaluation (documented at :func:`bnmem.attacks.evaluate.evaluate_attacks`).

    Args:
        scores: attack -> float64 [n_targets, n_examples], higher = member.
        members: bool [n_targets, n_examples], the targets' keep rows.
        targets: the target indices, in the rows' order.
        masks: subset -> bool [n_examples] (``all`` included).
        settings: the ``settings`` block (:func:`settings`).
        per_target_curves: keep each target's ROC curve next to the pooled one.
        pooled_points: thin the pooled curve to about this many points (None: keep it whole).
    """
    metrics: dict[str, dict[str, Any]] = {}
    curves: dict[str, dict[str, Any]] = {}
    # ε_lb's δ: 1/(examples the target trained on), the DP variants' convention, on every subset.
    deltas = 1.0 / np.maximum(members.sum(axis=1), 1)
    known = KnownQuantiles()  # Clopper–Pearson bounds repeat across attacks (same class sizes and ranks)
    for name, s in scores.items():
        metrics[name], curves[name] = {}, {}
        summaries = roc_summaries(s, members, masks, deltas)  # first: it checks the scores
        pooled = pooled_curves(s, members, masks, pooled_points)
        for sub, (per_target, counts) in summaries.items():
            metrics[name][sub] = summarize_rows(per_target)
            metrics[name][sub].update(summarize_bounds(epsilon_ranked(counts, deltas, known=known), deltas, LEVEL))
            mask = masks[sub]
            curves[name][sub] = {"pooled": pooled[sub]}
            if per_target_curves:
                curves[name][sub] = {"per_target": [roc(row[mask], m[mask]) for row, m in zip(s, members)],
                                     **curves[name][sub]}
    return {
        "metrics": metrics,
        "curves": curves,
        "scores": scores,
        "members": members,
        "targets": targets,
        "subset_sizes": {sub: int(mask.sum()) for sub, mask in masks.items()},
        "settings": settings,
    }
