"""Membership-inference attacks on saved logits: LiRA, RMIA, baselines, ROC metrics.

Pure numpy/scipy; no training happens here. Inputs everywhere are ``logits``
[n_models, n_examples, n_views, n_classes], ``keep`` bool [n_models, n_examples]
and ``labels`` int [n_examples]. Every attack score is "higher = member".
"""

from bnmem.attacks.evaluate import ALL, AVAILABLE, EXTRA, AttackInputs, evaluate_attacks, target_scores
from bnmem.attacks.keep import first_k_references, keep_matrix, split_references
from bnmem.attacks.lira import fit_gaussian, global_threshold, lira_offline, lira_online, loss_attack
from bnmem.attacks.metrics import METRIC_NAMES, attack_metrics, metrics_from_roc, roc, tpr_at_fpr
from bnmem.attacks.rmia import RMIAParams, log_marginal, rmia_log_ratio, rmia_scores, view_log_mean
from bnmem.attacks.scores import cross_entropy, lira_statistic, true_class_log_prob, true_class_prob

__all__ = [
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
    "target_scores",
    "tpr_at_fpr",
    "true_class_log_prob",
    "true_class_prob",
    "view_log_mean",
]
