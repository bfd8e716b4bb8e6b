"""Leave-one-out evaluation of every attack on a set of trained models.

Each model in turn is the target; all the other models are its reference
(shadow) models. Per target the attacks score every example, and the metrics
are computed per subset of examples (all, outliers, inliers, ... as masks given
by the caller) against the target's true membership. Results are averaged over
targets, as in the LiRA paper's leave-one-out protocol.

Reference models per example are truncated to the same count on each side (the
smallest over examples, first ones in model order), as the LiRA reference code
does; see :func:`bnmem.attacks.keep.split_references`. The attack names, the
checks of a request and the result dict are shared with the streaming evaluator
(:mod:`bnmem.attacks.result`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from bnmem.attacks.keep import split_references
from bnmem.attacks import spec as attack_spec
from bnmem.attacks.result import (
    check_keep, check_mask, check_references, check_request, check_targets, evaluation_result, settings,
)
from bnmem.attacks.rmia import (
    RMIAParams, population_log_ratio, rmia_log_ratio, rmia_scores, rmia_scores_against, select_offline_a, view_log_mean,
)
from bnmem.attacks.scores import check_logits, lira_statistic, loss_from_phi
from bnmem.attacks.spec import TargetRefs
from bnmem.errors import BnmemError


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
        keep = check_keep(keep, phi.shape[:2])
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
        keep = check_keep(keep, logits.shape[:2])
        phi = lira_statistic(logits, labels)
        loss = loss_from_phi(phi)
        return cls(
            phi=phi,
            loss=loss,
            log_p=view_log_mean(-loss),
            keep=keep,
        )


def target_scores(
    inputs: AttackInputs,
    target: int,
    attacks: Sequence[str] | None = None,
    rmia_params: RMIAParams = RMIAParams(),
    population: np.ndarray | None = None,
    chosen_a: dict[str, float] | None = None,
) -> dict[str, np.ndarray]:
    """Scores of every requested attack against one target, the other models as references.

    Args:
        inputs: :class:`AttackInputs`.
        target: index of the target model.
        attacks: registered attack names (:mod:`bnmem.attacks.spec`; None: the default ones).
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
    attacks = attack_spec.default_attacks() if attacks is None else attacks
    refs = np.array([m for m in range(n_models) if m != target], dtype=np.intp)
    idx_in, idx_out = split_references(inputs.keep[refs])
    check_references(attacks, idx_in.shape[0], idx_out.shape[0], len(refs), target)
    view = TargetRefs(inputs.phi[target], inputs.loss[target], inputs.phi[refs], idx_in, idx_out)
    out: dict[str, np.ndarray] = {}
    for name in attacks:
        spec = attack_spec.get(name)
        if spec.family == "rmia":
            out[name] = _rmia_target_scores(inputs, name, target, refs, idx_in, idx_out, rmia_params, population,
                                            chosen_a)
        else:
            out[name] = spec.oracle(view)
    return out


def _gather(arr: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Each example's chosen reference rows: arr [refs, n_examples, ...] at idx [k, n_examples] -> [k, n_examples, ...]."""
    return arr[idx, np.arange(arr.shape[1])]


def _rmia_target_scores(inputs: AttackInputs, name: str, target: int, refs: np.ndarray, idx_in: np.ndarray,
                        idx_out: np.ndarray, rmia_params: RMIAParams, population: np.ndarray | None,
                        chosen_a: dict[str, float] | None) -> np.ndarray:
    """RMIA's scores [n_examples] against one target (``rmia``: online as in rmia_params; ``rmia_offline``)."""
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
        _gather(log_p_refs, idx_out),
        _gather(log_p_refs, idx_in) if params.online else None,
        params,
    )
    if inputs.population_log_p is not None:
        pop = inputs.population_log_p
        log_rz = population_log_ratio(pop[target], pop[refs], online, a)
        return rmia_scores_against(log_ratio, log_rz, params.gamma)
    pop = ~inputs.keep[target]
    if population is not None:
        pop = pop & population
    return rmia_scores(log_ratio, pop, params.gamma)


def evaluate_attacks(
    logits: np.ndarray,
    keep: np.ndarray,
    labels: np.ndarray,
    subsets: Mapping[str, np.ndarray] | None = None,
    attacks: Sequence[str] | None = None,
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
        attacks: registered attack names (:mod:`bnmem.attacks.spec`; None: every default one).
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
            ``n_targets`` (targets whose subset had both members and non-members), and the
            empirical ε lower bound: ``eps_lb`` (mean over targets), ``eps_lb_std``,
            ``eps_lb_max``, ``eps_lb_per_target``, ``eps_lb_counts``, ``eps_lb_settings``
            (:func:`bnmem.attacks.epsilon.epsilon_summary`; δ = 1/(examples the target trained on)).
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
    attacks: Sequence[str] | None = None,
    rmia_params: RMIAParams | Mapping[str, Any] | None = None,
    targets: Sequence[int] | None = None,
    population: np.ndarray | None = None,
) -> dict[str, Any]:
    """:func:`evaluate_attacks` on precomputed :class:`AttackInputs` (e.g. from φ)."""
    n_models, n_examples = inputs.keep.shape
    params, attacks, masks = check_request(rmia_params, attacks, subsets, n_examples)
    pop = None if population is None else check_mask(population, n_examples, "population")
    targets = check_targets(targets, n_models)

    scores = {a: np.empty((len(targets), n_examples)) for a in attacks}
    chosen: dict[str, list[float]] = {}
    for i, t in enumerate(targets):
        picked: dict[str, float] = {}
        for name, s in target_scores(inputs, t, attacks, params, pop, chosen_a=picked).items():
            scores[name][i] = s
        if params.a is None:
            for name, a in picked.items():
                chosen.setdefault(f"{name}_a_per_target", []).append(a)
    population_text = ("separate population" if inputs.population_log_p is not None
                       else "legacy: OUT for the target" if pop is None
                       else "legacy: given mask minus the target's members")
    return evaluation_result(scores, inputs.keep[targets], targets, masks,
                             settings(params, population_text, inputs.phi.shape, **chosen))
