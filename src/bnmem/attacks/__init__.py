"""Membership-inference attacks on saved logits: LiRA, RMIA, baselines, ROC metrics.

Pure numpy/scipy; no training happens here. Every attack reads φ [n_models,
n_examples, n_views] (:mod:`bnmem.attacks.phi`; from logits [n_models,
n_examples, n_views, n_classes] and labels when given those) and ``keep`` bool
[n_models, n_examples]. Every attack score is "higher = member". The lira lens
evaluates with :func:`evaluate_stream`; :func:`evaluate_attacks` is the simple
in-memory oracle it is tested against.
"""

import importlib
from typing import Any

# Each public name is imported from its submodule on first use (PEP 562), so that importing one submodule
# (the report reads attacks.spec) does not load scipy.stats and sklearn with the rest.
_WHERE = {
    "AttackSpec": ("spec", "AttackSpec"),
    "register_attack": ("spec", "register"),
    "unregister_attack": ("spec", "unregister"),
    "AttackInputs": ("evaluate", "AttackInputs"),
    "evaluate_attacks": ("evaluate", "evaluate_attacks"),
    "evaluate_inputs": ("evaluate", "evaluate_inputs"),
    "target_scores": ("evaluate", "target_scores"),
    "first_k_references": ("keep", "first_k_references"),
    "keep_matrix": ("keep", "keep_matrix"),
    "paired_keep_matrix": ("keep", "paired_keep_matrix"),
    "split_references": ("keep", "split_references"),
    "fit_gaussian": ("lira", "fit_gaussian"),
    "global_threshold": ("lira", "global_threshold"),
    "lira_offline": ("lira", "lira_offline"),
    "lira_online": ("lira", "lira_online"),
    "loss_attack": ("lira", "loss_attack"),
    "METRIC_NAMES": ("metrics", "METRIC_NAMES"),
    "attack_metrics": ("metrics", "attack_metrics"),
    "metrics_from_roc": ("metrics", "metrics_from_roc"),
    "roc": ("metrics", "roc"),
    "tpr_at_fpr": ("metrics", "tpr_at_fpr"),
    "ArrayPhi": ("phi", "ArrayPhi"),
    "LogitsPhi": ("phi", "LogitsPhi"),
    "NpyPhi": ("phi", "NpyPhi"),
    "open_phi": ("phi", "open_phi"),
    "write_phi": ("phi", "write_phi"),
    "A_GRID": ("rmia", "A_GRID"),
    "RMIAParams": ("rmia", "RMIAParams"),
    "log_marginal": ("rmia", "log_marginal"),
    "population_log_ratio": ("rmia", "population_log_ratio"),
    "rmia_log_ratio": ("rmia", "rmia_log_ratio"),
    "rmia_scores": ("rmia", "rmia_scores"),
    "rmia_scores_against": ("rmia", "rmia_scores_against"),
    "select_offline_a": ("rmia", "select_offline_a"),
    "view_log_mean": ("rmia", "view_log_mean"),
    "ALL": ("result", "ALL"),
    "AVAILABLE": ("result", "AVAILABLE"),
    "EXTRA": ("result", "EXTRA"),
    "evaluation_result": ("result", "evaluation_result"),
    "summarize": ("result", "summarize"),
    "thin_curve": ("result", "thin_curve"),
    "evaluate_stream": ("streaming", "evaluate_stream"),
    "cross_entropy": ("scores", "cross_entropy"),
    "lira_statistic": ("scores", "lira_statistic"),
    "true_class_log_prob": ("scores", "true_class_log_prob"),
    "true_class_prob": ("scores", "true_class_prob"),
}


__all__ = list(_WHERE)  # the public names: the lazy table is their one list


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'bnmem.attacks' has no attribute {name!r}")
    module, attr = _WHERE[name]
    value = getattr(importlib.import_module(f"bnmem.attacks.{module}"), attr)
    globals()[name] = value  # the next look-up finds it directly
    return value


def __dir__() -> list[str]:
    """The loaded names and the public ones not imported yet (dir() and help() list both)."""
    return sorted({*globals(), *__all__})

