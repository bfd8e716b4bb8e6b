"""Membership-inference attacks on saved logits: LiRA, RMIA, baselines, ROC metrics.

Pure numpy/scipy; no training happens here. Every attack reads φ [n_models,
n_examples, n_views] (:mod:`bnmem.attacks.phi`; from logits [n_models,
n_examples, n_views, n_classes] and labels when given those) and ``keep`` bool
[n_models, n_examples]. Every attack score is "higher = member". The lira lens
evaluates with :func:`evaluate_stream`; :func:`evaluate_attacks` is the simple
in-memory oracle it is tested against.
"""

from bnmem.attacks.spec import AttackSpec, register as register_attack, unregister as unregister_attack
from bnmem.attacks.evaluate import AttackInputs, evaluate_attacks, evaluate_inputs, target_scores
from bnmem.attacks.keep import first_k_references, keep_matrix, split_references
from bnmem.attacks.lira import fit_gaussian, global_threshold, lira_offline, lira_online, loss_attack
from bnmem.attacks.metrics import METRIC_NAMES, attack_metrics, metrics_from_roc, roc, tpr_at_fpr
from bnmem.attacks.phi import ArrayPhi, LogitsPhi, NpyPhi, open_phi, write_phi
from bnmem.attacks.rmia import (
    A_GRID,
    RMIAParams,
    log_marginal,
    population_log_ratio,
    rmia_log_ratio,
    rmia_scores,
    rmia_scores_against,
    select_offline_a,
    view_log_mean,
)
from bnmem.attacks.result import ALL, AVAILABLE, EXTRA, evaluation_result, summarize, thin_curve
from bnmem.attacks.streaming import evaluate_stream
from bnmem.attacks.scores import cross_entropy, lira_statistic, true_class_log_prob, true_class_prob

__all__ = [
    "AttackSpec",
    "register_attack",
    "unregister_attack",
    "A_GRID",
    "ArrayPhi",
    "LogitsPhi",
    "NpyPhi",
    "evaluate_inputs",
    "evaluate_stream",
    "evaluation_result",
    "open_phi",
    "population_log_ratio",
    "rmia_scores_against",
    "select_offline_a",
    "write_phi",
    "ALL",
    "AVAILABLE",
    "EXTRA",
    "METRIC_NAMES",
    "AttackInputs",
    "RMIAParams",
    "attack_metrics",
    "cross_entropy",
    "evaluate_attacks",
    "first_k_references",
    "fit_gaussian",
    "global_threshold",
    "keep_matrix",
    "lira_offline",
    "lira_online",
    "lira_statistic",
    "log_marginal",
    "loss_attack",
    "metrics_from_roc",
    "rmia_log_ratio",
    "rmia_scores",
    "roc",
    "split_references",
    "summarize",
    "target_scores",
    "thin_curve",
    "tpr_at_fpr",
    "true_class_log_prob",
    "true_class_prob",
    "view_log_mean",
]
