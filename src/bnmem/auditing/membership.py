"""Membership risk of a training recipe, for ``bnmem audit``: LiRA over shadow copies of a user's model.

The user's model is one trained network; what leaks is a property of the
architecture and recipe. So M fresh copies of the architecture train with the
recipe on balanced halves of the training data and are queried on every
training example and on the test split, all by the shadow-model engine
(:mod:`bnmem.shadow.copies`: the keep matrix, the views the recipe trains with,
BN in eval mode, φ). The attacks of :mod:`bnmem.attacks` then run
leave-one-out on φ, with the test split as RMIA's population, as the lira lens
does for bnmem's own architectures. This module only checks the request and
turns the attacks' numbers into the audit's section.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError
from torch import nn

from bnmem.attacks import spec as attack_spec
from bnmem.auditing.data import masks_known
from bnmem.auditing.leakage import leakage_section
from bnmem.auditing.load import is_scripted
from bnmem.config import ShadowCopies, TrainConfig, check_shadow_models, validation_line
from bnmem.data.dataset import OutlierDataset
from bnmem.errors import BnmemError
from bnmem.shadow.copies import CopySet, CopyTraining, copy_cost, query_copies

__all__ = ["RAW", "check_shadow_request", "membership_section", "shadow_copies", "shadow_membership"]

# The in-memory key of a membership section holding the raw pooled scores (for the paired comparison);
# removed before the result is written.
RAW = "_raw"
# What the section keeps of each attack summary.
SECTION_METRICS = ("auc", "auc_std", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "balanced_acc",
                   "eps_lb", "eps_lb_max", "eps_lb_per_target")  # eps_lb: bnmem.attacks.epsilon


def _mem_scores(copies: Any, keep: np.ndarray, ds: Any, subsets: dict[str, np.ndarray] | None) -> dict[str, Any]:
    """Feldman–Zhang top-1 scores of the user's examples over the copies: per subset, and the 10 highest."""
    from bnmem.attacks.memscore import mem_scores, subset_summary, top1_values, top_k

    mem = mem_scores(top1_values(copies.pred, ds.y_train.numpy()), keep)["mem"]
    top = top_k(mem, 10)
    return {"definition": "P[copy predicts the training label | example IN] − P[... | OUT], top-1 over the query "
                          "views (docs/attacks.md)",
            "by_subset": subset_summary(mem, {"all": np.ones(mem.shape, bool), **(subsets or {})}),
            "top_memorized": {"index": top.tolist(), "mem": mem[top].tolist(),
                              **({"file": [ds.info["files"][i] for i in top]} if "files" in ds.info else {})}}


def shadow_copies(shadow: ShadowCopies | dict[str, Any] | None = None, **options: Any) -> ShadowCopies:
    """The audit's shadow options (:class:`bnmem.config.ShadowCopies`), validated once: ``shadow`` with
    ``options`` (``shadow_models=16``, ...) over it.

    Raises:
        BnmemError: one line naming each bad option as the Python caller wrote it (``shadow_models: must be
            even and at least 4, got 5``), or an option that needs shadow copies without them.
    """
    if isinstance(shadow, ShadowCopies) and not options:
        return shadow
    base = shadow.model_dump() if isinstance(shadow, ShadowCopies) else dict(shadow or {})
    try:
        return ShadowCopies.model_validate({**base, **options})
    except ValidationError as e:
        raise BnmemError(validation_line(e)) from None


def check_shadow_request(model: nn.Module, shadow: ShadowCopies | int, compare_gs_reg: float | None = None,
                         match_accuracy: bool = False) -> ShadowCopies:
    """The shadow options, validated, if shadow copies of ``model`` can be trained.

    ``shadow``: the options, or (as before) M with ``compare_gs_reg`` and ``match_accuracy``.

    Raises:
        BnmemError: a bad option (:func:`shadow_copies`), or a TorchScript model (its architecture cannot be
            re-instantiated).
    """
    copies = shadow if isinstance(shadow, ShadowCopies) else shadow_copies(
        shadow_models=shadow, compare_gs_reg=compare_gs_reg, match_accuracy=match_accuracy)
    if is_scripted(model):
        raise BnmemError("--shadow-models needs to re-instantiate the architecture, which a TorchScript model "
                         "cannot do; save the model with torch.save(model, path) (a pickled nn.Module) instead")
    return copies


def membership_section(model: nn.Module, ds: OutlierDataset, shadow_models: int, train: TrainConfig,
                       out: Path | None, keep_seed: int = 0, progress: bool = False,
                       executor: Any = None, groups: dict[str, np.ndarray] | None = None,
                       held_out: tuple[Any, Any] | None = None,
                       training: CopyTraining | None = None) -> dict[str, Any]:
    """Train ``shadow_models`` fresh copies on balanced halves and attack them leave-one-out.

    Args:
        model: the (pickled) model whose architecture is copied.
        ds: the training data (every example is IN for exactly half the copies).
        shadow_models: M, even and >= 4.
        train: the training recipe of the copies.
        out: folder for the copies (resumable); None keeps them in memory.
        keep_seed: seed of the keep matrix.
        progress: progress bars (the cost estimate is printed on stderr either way).
        executor: train the copies through it (local worker processes, Ray; needs ``out``);
            None trains them here, one after another. The copies are the same either way.
        groups: attack groups besides the data's outlier masks (bool masks over the training set: the
            examples with the largest gradient norms on the user's model; rare examples).
        held_out: ``(x, y)`` of the target-model audit's non-members, queried on every copy (IN for none); their
            φ, and the copies' φ and keep matrix, stay in memory under :data:`RAW` (:mod:`bnmem.auditing.target`).
        training: how the copies train (None: bnmem's trainer with ``train``; or the user's function).

    Raises:
        BnmemError: a TorchScript model, or M odd or below 4.
    """
    from bnmem.attacks import paired_keep_matrix

    check_shadow_request(model, shadow_models)
    check_shadow_models(shadow_models, "shadow_models")  # 0 (off) is the caller's switch, not a count
    training = training or CopyTraining(train)
    # Complementary pairs: the first M rows are the same for any larger M, so a rerun with more copies reuses these.
    keep = paired_keep_matrix(shadow_models, ds.n_train, keep_seed)
    stored = CopySet.of(model, ds, keep, training) if out is not None else None
    cost = copy_cost(model, ds, keep, training, stored.pending(out) if stored is not None else None)
    print(cost["text"], file=sys.stderr, flush=True)  # always (also under --quiet): the README promises it
    copies = query_copies(model, ds, keep, training, out, executor=executor, progress=progress, copies=stored,
                          held_out=held_out)
    section = {
        "shadow_models": shadow_models,
        "protocol": f"fresh copies of the architecture (reset_parameters, seeded) train with {training.describe()} "
                    "on balanced halves of the training data, in complementary pairs (each example IN for exactly "
                    "half); LiRA/RMIA leave-one-out: each copy is the target once, the others its references",
        **({"train_fn": {"name": training.fn_name, "source_sha256": training.fn_sha256}} if training.fn else {}),
        "reinitialized_parameters": f"{copies.reset[0]} of {copies.reset[1]} parameter tensors "
                                    "(others keep the given model's values)",
        "views": copies.views,
        "bn_mode_at_query": "eval",
        "train": train.model_dump(mode="json"),
        "keep_seed": keep_seed,
        **attack_section(ds, keep, copies.phi, copies.population_phi, groups, keep_seed),
        "shadow_accuracy": {k: float(np.mean([a[k] for a in copies.accuracy])) for k in ("train_in", "train_out",
                                                                                          "test")},
        "shadow_accuracy_per_copy": copies.accuracy,
        "memorization_scores": _mem_scores(copies, keep, ds, {
            **({"outliers": ds.is_outlier, "inliers": ds.is_clean} if masks_known(ds) else {}),
            **{g: m for g, m in (groups or {}).items() if g == "rare"}} or None),
        # measured: the copies' training seconds (copies trained by earlier runs included).
        "cost": {**{k: v for k, v in cost.items() if k != "text"}, "measured_seconds": copies.seconds,
                 "trained": copies.trained},
    }
    section[RAW].update(keep=keep, phi=copies.phi, population_phi=copies.population_phi,
                        held_out_phi=copies.held_out_phi, views=copies.views)
    return section


def attack_section(ds: OutlierDataset, keep: np.ndarray, phi: np.ndarray, pop_phi: np.ndarray,
                   groups: dict[str, np.ndarray] | None, seed: int) -> dict[str, Any]:
    """Every attack leave-one-out over the copies' φ: per-target metrics per subset, the pooled leakage of
    each group with intervals (:mod:`bnmem.auditing.leakage`) and each headline attack's pooled ROC per
    subset; the raw scores stay in memory under :data:`RAW`."""
    from bnmem.attacks.streaming import evaluate_stream

    subsets = {"outliers": ds.is_outlier, "inliers": ds.is_clean} if masks_known(ds) else {}
    subsets.update({g: m for g, m in (groups or {}).items() if m.any()})
    masks = {"all": np.ones(ds.n_train, bool), **subsets}
    population = f"the test split (n={ds.x_test.shape[0]}; no copy trained on it)"
    # The attacks whose spec is shown in the audit (bnmem.attacks.spec).
    shown = attack_spec.shown_in(attack_spec.AUDIT)
    # exposure.csv's per-example likelihood ratio comes from one more attack, scored but not shown.
    exposure = attack_spec.the(attack_spec.EXPOSURE)
    extra = () if exposure in shown else (exposure,)
    res = evaluate_stream(phi, keep, subsets=subsets or None, attacks=shown + extra, population_phi=pop_phi,
                          population_name=population)
    return {
        "rmia_population": population,
        "attacks": {a: {s: {k: v[k] for k in SECTION_METRICS if k in v} for s, v in subs.items()}
                    for a, subs in res["metrics"].items() if a in shown},
        "subset_sizes": res["subset_sizes"],
        "leakage": leakage_section(res["scores"], res["members"], masks, seed=seed),
        "roc": {a: {s: {"fpr": c["pooled"][0].tolist(), "tpr": c["pooled"][1].tolist()} for s, c in curves.items()}
                for a, curves in res["curves"].items() if a in attack_spec.playing(attack_spec.HEADLINE)},
        RAW: {"scores": res["scores"], "members": res["members"], "masks": masks},
    }


def shadow_membership(model: nn.Module, ds: OutlierDataset, shadow_models: int, train: TrainConfig,
                      out: Path | None, progress: bool, executor: Any,
                      groups: dict[str, np.ndarray], held_out: tuple[Any, Any] | None = None,
                      training: CopyTraining | None = None) -> dict[str, Any]:
    """The membership section; copies go under ``out`` (a temporary folder when an executor needs one)."""
    if executor is None or out is not None:
        return membership_section(model, ds, shadow_models, train, out, progress=progress, executor=executor,
                                  groups=groups, held_out=held_out, training=training)
    with tempfile.TemporaryDirectory(prefix="bnmem-audit-") as tmp:  # worker processes pass copies by file
        return membership_section(model, ds, shadow_models, train, Path(tmp), progress=progress, executor=executor,
                                  groups=groups, held_out=held_out, training=training)
