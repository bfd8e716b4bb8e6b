"""Leave-one-out evaluation of every attack on a set of trained models.

Each model in turn is the target; all the other models are its reference
(shadow) models. Per target the attacks score every example, and the metrics
are computed per subset of examples (all, outliers, inliers, ... as masks given
by the caller) against the target's true membership. Results are averaged over
targets, as in the LiRA paper's leave-one-out protocol.

Reference models per example are truncated to the same count on each side (the
smallest over examples, first ones in model order), as the LiRA reference code
does; see :func:`bnmem.attacks.keep.split_references`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from bnmem.attacks.epsilon import epsilon_summary
from bnmem.attacks.keep import split_references
from bnmem.attacks.lira import global_threshold, lira_offline, lira_online, loss_attack
from bnmem.attacks.metrics import METRIC_NAMES, metrics_from_roc, roc
from bnmem.attacks.rmia import (
    RMIAParams,
    population_log_ratio,
    rmia_log_ratio,
    rmia_scores,
    rmia_scores_against,
    select_offline_a,
    view_log_mean,
)
from bnmem.attacks.scores import check_logits, lira_statistic, loss_from_phi
from bnmem.errors import BnmemError

ALL: tuple[str, ...] = (
    "online",
    "online_fixed_variance",
    "offline",
    "offline_fixed_variance",
    "global_threshold",
    "loss",
    "rmia",
)
# Opt-in extras: RMIA with the offline setting, next to "rmia" (which uses rmia_params).
EXTRA: tuple[str, ...] = ("rmia_offline",)
AVAILABLE: tuple[str, ...] = ALL + EXTRA

_NEEDS_IN = {"online", "online_fixed_variance", "rmia"}
_NEEDS_OUT = {"online", "online_fixed_variance", "offline", "offline_fixed_variance", "rmia", "rmia_offline"}


@dataclass(frozen=True)
class AttackInputs:
    """Everything the attacks read, computed once from the logits.

    Attributes:
        phi: [n_models, n_examples, n_views] LiRA statistic φ.
        loss: [n_models, n_examples, n_views] cross-entropy.
        log_p: [n_models, n_examples] log of the view-averaged p_y (for RMIA).
        keep: [n_models, n_examples] bool membership.
        population_log_p: [n_models, P] the same as log_p on RMIA population
            points no model trained on; None: the legacy population (the
            target's non-members).
    """

    phi: np.ndarray
    loss: np.ndarray
    log_p: np.ndarray
    keep: np.ndarray
    population_log_p: np.ndarray | None = None

    @classmethod
    def from_phi(cls, phi: np.ndarray, keep: np.ndarray, population_phi: np.ndarray | None = None) -> "AttackInputs":
        """The statistics from φ [n_models, n_examples, n_views] (e.g. a stored phi.npy)."""
        phi = np.asarray(phi, dtype=np.float64)
        if phi.ndim != 3:
            raise BnmemError(f"phi must be [n_models, n_examples, n_views], got shape {phi.shape}")
        keep = _check_keep(keep, phi.shape[:2])
        loss = loss_from_phi(phi)
        pop = None
        if population_phi is not None:
            pop = view_log_mean(-loss_from_phi(np.asarray(population_phi, dtype=np.float64)))
        return cls(phi=phi, loss=loss, log_p=view_log_mean(-loss), keep=keep, population_log_p=pop)

    @classmethod
    def from_logits(cls, logits: np.ndarray, keep: np.ndarray, labels: np.ndarray) -> "AttackInputs":
        """Compute the statistics from logits [n_models, n_examples, n_views, n_classes].

        Raises:
            BnmemError: malformed or non-finite inputs, or keep of the wrong shape.
        """
        logits, labels = check_logits(logits, labels)
        keep = _check_keep(keep, logits.shape[:2])
        phi = lira_statistic(logits, labels)
        loss = loss_from_phi(phi)
        return cls(
            phi=phi,
            loss=loss,
            log_p=view_log_mean(-loss),
            keep=keep,
        )


def _check_keep(keep: Any, shape: tuple[int, ...]) -> np.ndarray:
    keep = np.asarray(keep)
    if keep.shape != tuple(shape):
        raise BnmemError(f"keep must be [n_models, n_examples] = {tuple(shape)}, got {keep.shape}")
    if keep.dtype != bool:
        if not np.isin(keep, (0, 1)).all():
            raise BnmemError("keep must be boolean (or 0/1)")
        keep = keep.astype(bool)
    return keep


def _as_rmia_params(rmia_params: RMIAParams | Mapping[str, Any] | None) -> RMIAParams:
    if rmia_params is None:
        return RMIAParams()
    if isinstance(rmia_params, RMIAParams):
        return rmia_params
    unknown = set(rmia_params) - {"gamma", "a", "online"}
    if unknown:
        raise BnmemError(f"unknown RMIA parameter(s): {sorted(unknown)}; known: gamma, a, online")
    return RMIAParams(**rmia_params)


def target_scores(
    inputs: AttackInputs,
    target: int,
    attacks: Sequence[str] = ALL,
    rmia_params: RMIAParams = RMIAParams(),
    population: np.ndarray | None = None,
    chosen_a: dict[str, float] | None = None,
) -> dict[str, np.ndarray]:
    """Scores of every requested attack against one target, the other models as references.

    Args:
        inputs: :class:`AttackInputs`.
        target: index of the target model.
        attacks: names from :data:`AVAILABLE`.
        rmia_params: settings of the ``rmia`` attack (``rmia_offline`` uses the
            same γ and a with ``online=False``).
        population: legacy population only (when ``inputs`` has no
            ``population_log_p``): bool mask [n_examples] of RMIA population
            points; the target's members are always removed from it. None:
            every example that is OUT for the target.
        chosen_a: filled with the offline a used per RMIA attack name.

    Returns:
        dict attack name -> float64 [n_examples], higher = member.

    Raises:
        BnmemError: unknown attack, or too few reference models on a side.
    """
    n_models, n_examples = inputs.keep.shape
    refs = np.array([m for m in range(n_models) if m != target], dtype=np.intp)
    keep_refs = inputs.keep[refs]
    idx_in, idx_out = split_references(keep_refs)
    wanted = set(attacks)
    if wanted & _NEEDS_IN and idx_in.shape[0] == 0 or wanted & _NEEDS_OUT and idx_out.shape[0] == 0:
        raise BnmemError(
            f"target {target}: some example is never IN (or never OUT) among the other "
            f"{len(refs)} models, so reference-based attacks are impossible; with a balanced "
            "keep matrix this needs at least 4 models"
        )
    cols = np.arange(n_examples)
    phi_refs = inputs.phi[refs]
    phi_t = inputs.phi[target]

    def gather(arr: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return arr[idx, cols]  # [k, n_examples, ...]

    out: dict[str, np.ndarray] = {}
    for name in attacks:
        if name == "online":
            out[name] = lira_online(phi_t, gather(phi_refs, idx_in), gather(phi_refs, idx_out))
        elif name == "online_fixed_variance":
            out[name] = lira_online(phi_t, gather(phi_refs, idx_in), gather(phi_refs, idx_out), fix_variance=True)
        elif name == "offline":
            out[name] = lira_offline(phi_t, gather(phi_refs, idx_out))
        elif name == "offline_fixed_variance":
            out[name] = lira_offline(phi_t, gather(phi_refs, idx_out), fix_variance=True)
        elif name == "global_threshold":
            out[name] = global_threshold(phi_t)
        elif name == "loss":
            out[name] = loss_attack(inputs.loss[target])
        elif name in ("rmia", "rmia_offline"):
            online = rmia_params.online if name == "rmia" else False
            a = rmia_params.a
            if not online and a is None:
                a, _ = select_offline_a(inputs.log_p, inputs.keep, target, rmia_params.gamma, inputs.population_log_p)
            if chosen_a is not None and not online:
                chosen_a[name] = a
            params = RMIAParams(rmia_params.gamma, a, online=online)
            log_p_refs = inputs.log_p[refs]
            log_ratio = rmia_log_ratio(
                inputs.log_p[target],
                gather(log_p_refs, idx_out),
                gather(log_p_refs, idx_in) if params.online else None,
                params,
            )
            if inputs.population_log_p is not None:
                pop = inputs.population_log_p
                log_rz = population_log_ratio(pop[target], pop[refs], online, a)
                out[name] = rmia_scores_against(log_ratio, log_rz, params.gamma)
            else:
                pop = ~inputs.keep[target]
                if population is not None:
                    pop = pop & population
                out[name] = rmia_scores(log_ratio, pop, params.gamma)
        else:
            raise BnmemError(f"unknown attack {name!r}; available: {', '.join(AVAILABLE)}")
    return out


def check_request(rmia_params: RMIAParams | Mapping[str, Any] | None, attacks: Sequence[str],
                  subsets: Mapping[str, np.ndarray] | None, n_examples: int
                  ) -> tuple[RMIAParams, list[str], dict[str, np.ndarray]]:
    """The validated RMIA parameters, attack names and subset masks (``all`` first) of one evaluation.

    Raises:
        BnmemError: an unknown attack or a malformed subset mask.
    """
    params = _as_rmia_params(rmia_params)
    attacks = list(attacks)
    unknown = [a for a in attacks if a not in AVAILABLE]
    if unknown:
        raise BnmemError(f"unknown attack(s) {unknown}; available: {', '.join(AVAILABLE)}")
    masks = {"all": np.ones(n_examples, dtype=bool)}
    for name, mask in (subsets or {}).items():
        masks[name] = _check_mask(mask, n_examples, f"subset {name!r}")
    return params, attacks, masks


def _check_mask(mask: Any, n_examples: int, what: str) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.shape != (n_examples,) or not (mask.dtype == bool or np.isin(mask, (0, 1)).all()):
        raise BnmemError(f"{what} must be a boolean mask of shape ({n_examples},), got {mask.dtype} {mask.shape}")
    return mask.astype(bool)


def _summary(per_target: list[dict[str, float]]) -> dict[str, Any]:
    """Mean, sample std (ddof=1) and per-target lists over targets; nan entries are skipped."""
    out: dict[str, Any] = {}
    for name in METRIC_NAMES:
        values = np.array([m[name] for m in per_target], dtype=np.float64)
        ok = values[np.isfinite(values)]
        out[name] = float(ok.mean()) if ok.size else math.nan
        out[f"{name}_std"] = float(ok.std(ddof=1)) if ok.size >= 2 else math.nan
        out[f"{name}_per_target"] = values.tolist()
    out["n_targets"] = int(np.isfinite([m["auc"] for m in per_target]).sum())
    return out


def evaluate_attacks(
    logits: np.ndarray,
    keep: np.ndarray,
    labels: np.ndarray,
    subsets: Mapping[str, np.ndarray] | None = None,
    attacks: Sequence[str] = ALL,
    rmia_params: RMIAParams | Mapping[str, Any] | None = None,
    targets: Sequence[int] | None = None,
    population: np.ndarray | None = None,
    population_logits: np.ndarray | None = None,
    population_labels: np.ndarray | None = None,
) -> dict[str, Any]:
    """Leave-one-out membership-inference evaluation of every attack (the in-memory oracle).

    The lira lens evaluates with :func:`bnmem.attacks.streaming.evaluate_stream`,
    which gives the same results in bounded memory; this one, simple and
    per-target, is what the streaming evaluator is tested against.

    Args:
        logits: [n_models, n_examples, n_views, n_classes] (float32 is fine;
            all arithmetic is float64).
        keep: bool [n_models, n_examples], True where the model trained on the example.
        labels: int [n_examples] true labels.
        subsets: name -> bool mask [n_examples] (e.g. ``outliers``, ``inliers``).
            An ``all`` subset is added when missing.
        attacks: names from :data:`AVAILABLE` (default :data:`ALL`).
        rmia_params: :class:`RMIAParams` or a dict with ``gamma``, ``a``,
            ``online`` (defaults γ=1, a selected on reference models, online).
        targets: model indices to attack (default: every model).
        population: legacy RMIA population only: bool mask [n_examples]
            restricting it (default: all examples OUT for the target).
        population_logits: [n_models, P, n_views, n_classes] logits of RMIA
            population points no model trained on (e.g. the test split); with
            ``population_labels``. None: the legacy population.
        population_labels: [P] their labels.

    Returns:
        dict with keys

        - ``metrics``: ``{attack: {subset: summary}}``; a summary holds, for each
          of ``auc``, ``balanced_acc``, ``tpr_at_0.1pct_fpr``,
          ``tpr_at_1pct_fpr``: the mean over targets (key = metric name),
          ``<metric>_std`` (sample std over targets, nan for < 2 targets) and
          ``<metric>_per_target`` (list in ``targets`` order, so
          ``auc_per_target`` is in model-index order by default), plus
          ``n_targets`` (targets whose subset had both members and non-members).
        - ``curves``: ``{attack: {subset: {"per_target": [(fpr, tpr), ...],
          "pooled": (fpr, tpr)}}}``; ``pooled`` is the ROC of all targets'
          scores together, as the reference code plots it.
        - ``scores``: ``{attack: float64 [n_targets, n_examples]}``.
        - ``members``: bool [n_targets, n_examples], the targets' keep rows.
        - ``targets``: list of target indices.
        - ``subset_sizes``: ``{subset: n_examples in it}``.
        - ``settings``: the RMIA parameters and array sizes used.

    Raises:
        BnmemError: malformed inputs, unknown attack or subset mask, or too few
            models for reference-based attacks (a balanced keep needs >= 4).
    """
    inputs = AttackInputs.from_logits(logits, keep, labels)
    if population_logits is not None:
        pop_phi = lira_statistic(population_logits, population_labels)
        inputs = AttackInputs(inputs.phi, inputs.loss, inputs.log_p, inputs.keep,
                              view_log_mean(-loss_from_phi(pop_phi)))
    return evaluate_inputs(inputs, subsets, attacks, rmia_params, targets, population)


def evaluate_inputs(
    inputs: AttackInputs,
    subsets: Mapping[str, np.ndarray] | None = None,
    attacks: Sequence[str] = ALL,
    rmia_params: RMIAParams | Mapping[str, Any] | None = None,
    targets: Sequence[int] | None = None,
    population: np.ndarray | None = None,
) -> dict[str, Any]:
    """:func:`evaluate_attacks` on precomputed :class:`AttackInputs` (e.g. from φ)."""
    n_models, n_examples = inputs.keep.shape
    params, attacks, masks = check_request(rmia_params, attacks, subsets, n_examples)
    pop = None if population is None else _check_mask(population, n_examples, "population")
    if targets is None:
        targets = list(range(n_models))
    targets = [int(t) for t in targets]
    bad = [t for t in targets if not 0 <= t < n_models]
    if bad:
        raise BnmemError(f"target index(es) {bad} out of range for {n_models} models")

    scores = {a: np.empty((len(targets), n_examples)) for a in attacks}
    chosen: dict[str, list[float]] = {}
    for i, t in enumerate(targets):
        picked: dict[str, float] = {}
        for name, s in target_scores(inputs, t, attacks, params, pop, chosen_a=picked).items():
            scores[name][i] = s
        if params.a is None:
            for name, a in picked.items():
                chosen.setdefault(f"{name}_a_per_target", []).append(a)
    members = inputs.keep[targets]
    deltas = 1.0 / np.maximum(members.sum(axis=1), 1)

    metrics: dict[str, dict[str, Any]] = {}
    curves: dict[str, dict[str, Any]] = {}
    for name in attacks:
        metrics[name], curves[name] = {}, {}
        for sub, mask in masks.items():
            per_roc = [roc(scores[name][i, mask], members[i, mask]) for i in range(len(targets))]
            metrics[name][sub] = _summary([metrics_from_roc(*c) for c in per_roc])
            # δ = 1/(examples the target trained on), the DP variants' convention, on every subset.
            metrics[name][sub].update(epsilon_summary(scores[name][:, mask], members[:, mask], deltas))
            pooled = roc(scores[name][:, mask].ravel(), members[:, mask].ravel())
            curves[name][sub] = {"per_target": per_roc, "pooled": pooled}
    return {
        "metrics": metrics,
        "curves": curves,
        "scores": scores,
        "members": members,
        "targets": targets,
        "subset_sizes": {sub: int(mask.sum()) for sub, mask in masks.items()},
        "settings": {
            "rmia": asdict(params),
            "rmia_population": "separate population" if inputs.population_log_p is not None
            else "legacy: OUT for the target" if pop is None else "legacy: given mask minus the target's members",
            "n_models": n_models,
            "n_examples": n_examples,
            "n_views": int(inputs.phi.shape[2]),
            **chosen,
        },
    }
