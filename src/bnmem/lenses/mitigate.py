"""Mitigation: BN vs BN + γ/σ regularizer (several λ) vs other norms — privacy against utility.

Every variant trains on identical corrupted data from identical initial weights
and batch order (per seed); they differ only in the norm and in λ of the
regularizer (:mod:`bnmem.train.regularizer`, τ = ``train.gs_tau``). Reported per
variant: memorization of the corrupted subset (accuracy against the flipped or
random label) at a fixed epoch and at the end, clean train and test accuracy,
the BN layers' |γ|/σ (per-layer median, fraction of channels above 1), and
validation accuracy.

Selection without the test set, nested in the run. λ (and τ, when several are
given) is chosen on ``selection_seeds`` extra model seeds (the seeds after the
largest of ``seeds``; same data, never evaluated) by the rule
:data:`SELECTION_RULE`, on the validation split (``data.val_fraction``; this
lens carves :data:`DEFAULT_VAL_FRACTION` when it is 0, the data config's
default). The validation gate (:func:`validation_gate`, plan 5.0) is a screen
with an indifference zone: a variant passes when its validation drop is at most
2 points, the midpoint between the claim's 1-point margin and the 3-point cost it
must catch, so a variant costing 3 points and one costing 1 point are misjudged
equally often (Φ(−1 point / se)); the gate records its power at its own standard
error, and plan 4.0's gate (1 point + 1.645 standard errors, which admitted
variants costing 4–10 points on digits' 90 validation images) beside it. The evaluation
seeds (``seeds``) then report the chosen variant's memorization and test
accuracy against plain BN, paired by seed, with an interval
(:func:`bnmem.stats.paired_difference`). In a study every replicate runs the
lens, so every replicate selects on its own selection seeds and contributes
one evaluation (claim 6, plan 4.0). ``selection_seeds: 0`` selects on the
evaluation seeds themselves (in-sample; ``selection.nested`` says so).

Privacy. With ``lira_models`` > 0, shadow models are trained with the recipes
of plain BN, the selected regularized variant and the other norms (the same
model seeds and keep matrix: targets pair across recipes), and the online LiRA
and RMIA AUCs are reported side by side (:func:`bnmem.shadow.run_shadow_norm`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from bnmem import io
from bnmem.analysis_plan import (
    MITIGATE_GATE_COST, MITIGATE_GATE_THRESHOLD, MITIGATE_GATE_Z, MITIGATE_LAMBDAS, MITIGATE_TEST_DROP,
    mitigate_gate_passes, mitigate_gate_power,
)
from bnmem.attacks import spec as attack_spec
from bnmem.config import DataConfig
from bnmem.data.loaded import load_once
from bnmem.data.dataset import OutlierDataset
from bnmem.figures.privacy_utility import plot_privacy_utility
from bnmem.config import ExperimentConfig, Seed32, ShadowModelsOrOff, ShadowProtocol
from bnmem.formatting import fmt
from bnmem.texttable import table
from bnmem.measure.memorization import mean_curve
from bnmem.measure.gamma_sigma import SIGMA_MODES, compact, gamma_sigma_stats
from bnmem.measure.memorization import CURVES
from bnmem.lenses.registry import Lens, register
from bnmem.lenses.work import LensWork
from bnmem.lenses.spec import SPECS
from bnmem.names import MITIGATE
from bnmem.lenses.conditions import conditions
from bnmem.lenses.runs import PendingRun, run_folder, train_fresh_together, train_run
from bnmem.rundir import prepare_run_dir
from bnmem.stats import paired_difference
from bnmem.train.trainer import EpochHook

_PROBE_STREAM = 0x6D17
# LiRA metrics carried into the mitigation table (the reference LiRA: the attack playing PRIMARY; every attack
# playing MITIGATION is carried too, one AUC column each; bnmem.attacks.spec).
# eps_lb: the empirical ε lower bound (mean over targets; bnmem.attacks.epsilon).
LIRA_METRICS = ("auc", "tpr_at_1pct_fpr", "tpr_at_0.1pct_fpr", "eps_lb")
# Validation share carved when the data config leaves val_fraction unset.
DEFAULT_VAL_FRACTION = 0.1
# The validation gate (claim 6, plan 5.0): a variant passes when its validation drop is at most GATE_THRESHOLD,
# the midpoint of the indifference zone from the claim's 1-point margin to a 3-point cost (GATE_COST). Plan 4.0's
# gate (the margin widened by GATE_Z standard errors) is recorded beside it.
VAL_TOLERANCE = MITIGATE_TEST_DROP
GATE_Z = MITIGATE_GATE_Z
GATE_THRESHOLD = MITIGATE_GATE_THRESHOLD
GATE_COST = MITIGATE_GATE_COST
SELECTION_RULE = (
    f"on the selection seeds (never evaluated), among the regularized variants whose validation drop against plain "
    f"BN (per validation image the mean over selection seeds of BN correct − variant correct; its mean over images) "
    f"is at most {GATE_THRESHOLD * 100:g} points (the gate: the midpoint between the {VAL_TOLERANCE * 100:g}-point "
    f"margin and a {GATE_COST * 100:g}-point cost), the one with the lowest mean corrupted-subset accuracy on the "
    f"training set (memorization; on clean data: the lowest train−validation accuracy gap); ties to the smaller λ, "
    f"then τ. If none passes the gate (the fallback, recorded as such), the one with the smallest validation drop. "
    f"The test set is not consulted"
)
EXTRA_CURVES = ("train_acc", "val_acc")


@dataclass(frozen=True)
class Variant:
    """One recipe of the comparison."""

    name: str  # shown in tables and figures, e.g. "batch+gs1"
    norm: str
    lam: float  # λ of the γ/σ regularizer (0: off)
    tau: float | None = None  # τ of the regularizer (None: train.gs_tau)

    @property
    def folder(self) -> str:
        return self.name.replace("+", "_")


class MitigateConfig(ExperimentConfig):
    """Config of ``bnmem mitigate``.

    Attributes:
        norms: the unregularized baselines; must include ``batch`` (the
            regularizer variants are BN models).
        lambdas: λ values of the regularized BN variants.
        taus: τ values crossed with ``lambdas`` (None: ``train.gs_tau`` alone).
        fixed_epoch: the epoch at which memorization is compared (besides the last).
        lira_models: shadow models per LiRA recipe (plain norms and the
            selected variant; 0: off; else even, >= 4).
        keep_seed: seed of the LiRA keep matrix (a study's replicate k adds k, like every other seed).
        selection_seeds: model seeds that only select λ (and τ): plain BN and the regularized
            variants train on the ``selection_seeds`` seeds after ``max(seeds)``, never evaluated
            (0: select on ``seeds`` themselves, in-sample).
    """

    lambdas: list[float] = list(MITIGATE_LAMBDAS)  # the plan's declared grid (claim 6, plan 6.0)
    taus: list[float] | None = None
    fixed_epoch: int = 10
    lira_models: ShadowModelsOrOff = ShadowProtocol.field("shadow_models", 0, "shadow models per variant for "
                                                                            "LiRA AUC (0: off; even, >= 4)")
    keep_seed: Seed32 = ShadowProtocol.field("keep_seed", 0, "seed of the LiRA keep matrix")
    selection_seeds: int = Field(1, ge=0, le=100)

    @model_validator(mode="before")
    @classmethod
    def _validation_split(cls, values: Any) -> Any:
        """λ is selected on a validation split: val_fraction 0 (unset, or a study's default) means DEFAULT_VAL_FRACTION."""
        if not isinstance(values, dict):
            return values
        data = values.get("data")
        if data is None:
            return {**values, "data": DataConfig(val_fraction=DEFAULT_VAL_FRACTION)}
        if isinstance(data, DataConfig):
            if data.val_fraction == 0:
                return {**values, "data": data.model_copy(update={"val_fraction": DEFAULT_VAL_FRACTION})}
        elif isinstance(data, dict) and not data.get("val_fraction"):
            return {**values, "data": {**data, "val_fraction": DEFAULT_VAL_FRACTION}}
        return values

    @field_validator("taus")
    @classmethod
    def _positive_taus(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (not v or any(not (x > 0 and np.isfinite(x)) for x in v)):
            raise ValueError(f"taus must be positive numbers, got {v}")
        return None if v is None else list(dict.fromkeys(float(x) for x in v))

    @field_validator("lambdas")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if not v or any(not (x > 0 and np.isfinite(x)) for x in v):
            raise ValueError(f"lambdas must be positive numbers, got {v}")
        return list(dict.fromkeys(float(x) for x in v))

    @model_validator(mode="after")
    def _consistent(self) -> "MitigateConfig":
        if "batch" not in self.norms:
            raise ValueError(f"mitigate compares against plain BN: norms must include 'batch', got {self.norms}")
        if self.train.gs_reg != 0:
            raise ValueError("mitigate sets the regularizer strength per variant: use lambdas (--lambdas), "
                             "not train.gs_reg (--gs-reg)")
        if not 1 <= self.fixed_epoch <= self.train.epochs:
            raise ValueError(f"fixed_epoch {self.fixed_epoch} must lie in 1..{self.train.epochs} (the epochs)")
        return self

    def selection_seed_list(self) -> list[int]:
        """The seeds that select λ (and τ): the ``selection_seeds`` seeds after the largest evaluation seed."""
        return [max(self.seeds) + 1 + i for i in range(self.selection_seeds)]

    def tau_values(self) -> list[float]:
        return self.taus if self.taus is not None else [self.train.gs_tau]

    def variants(self) -> list[Variant]:
        """Plain BN, BN + regularizer for each (λ, τ), then the other norms."""
        out = [Variant("batch", "batch", 0.0)]
        several = len(self.tau_values()) > 1
        for tau in self.tau_values():
            for lam in self.lambdas:
                name = f"batch+gs{lam:g}" + (f"+tau{tau:g}" if several else "")
                out.append(Variant(name, "batch", lam, tau))
        out += [Variant(n, n, 0.0) for n in self.norms if n != "batch"]
        return out


def gamma_sigma_hook(ds: OutlierDataset, epochs: set[int], batch_size: int, data_seed: int) -> EpochHook:
    """``on_epoch`` hook recording compact γ/σ statistics (running and batch σ) at ``epochs``."""
    rng = np.random.default_rng([int(data_seed), _PROBE_STREAM])
    probe = ds.x_train[torch.as_tensor(np.sort(rng.choice(ds.n_train, min(batch_size, ds.n_train), replace=False)))]

    def hook(epoch: int, model) -> dict | None:
        if epoch not in epochs:
            return None
        return {"gamma_sigma": {m: compact(gamma_sigma_stats(model, probe, m)) for m in SIGMA_MODES}}

    return hook


def _stat(values: list[float | None]) -> dict[str, Any]:
    ok = [v for v in values if v is not None]
    return {"mean": float(np.mean(ok)) if ok else None, "min": float(min(ok)) if ok else None,
            "max": float(max(ok)) if ok else None, "per_seed": values}


def _gs_at(histories: dict[int, list[dict]], epoch: int) -> dict[str, Any] | None:
    """Per-layer γ/σ medians and fractions > 1 at ``epoch`` (mean over seeds); None without BN."""
    recs = [h[epoch - 1].get("gamma_sigma") for h in histories.values()]
    if not recs or recs[0] is None or not recs[0]["running"]["layers"]:
        return None
    out: dict[str, Any] = {}
    for mode in SIGMA_MODES:
        layers = list(recs[0][mode]["layers"])
        out[mode] = {
            "layers": {layer: {key: float(np.mean([r[mode]["layers"][layer][key] for r in recs]))
                               for key in ("median_ratio", "frac_above_1")} for layer in layers},
            "frac_above_1": float(np.mean([r[mode]["summary"]["frac_above_1"] for r in recs])),
            "median_ratio": float(np.mean([r[mode]["summary"]["median_ratio"] for r in recs])),
        }
    return out


def summarize_variant(v: Variant, histories: dict[int, list[dict]], fixed: int) -> dict[str, Any]:
    """Curves, memorization at the fixed and last epoch, accuracies and γ/σ of one variant."""
    last = len(next(iter(histories.values())))
    keys = CURVES + EXTRA_CURVES
    per_seed = {str(s): {k: [h.get(k) for h in hist] for k in keys} for s, hist in histories.items()}
    at = lambda key, e: _stat([c[key][e - 1] for c in per_seed.values()])  # noqa: E731
    point = ("noisy_acc", "ood_acc", "test_acc", "clean_acc") + EXTRA_CURVES
    return {
        "norm": v.norm,
        "gs_reg": v.lam,
        "gs_tau": v.tau,
        "mean": {k: mean_curve([c[k] for c in per_seed.values()]) for k in keys},
        "per_seed": per_seed,
        "fixed_epoch": {"epoch": fixed, **{k: at(k, fixed) for k in point}},
        "final": {"epoch": last, **{k: at(k, last) for k in point}},
        "gamma_sigma": {"fixed_epoch": _gs_at(histories, fixed), "final": _gs_at(histories, last)},
        "penalty": _penalty_activity(histories) if v.lam else None,
    }


def _penalty_activity(histories: dict[int, list[dict]]) -> dict[str, Any] | None:
    """How active the γ/σ penalty was, mean over epochs and seeds (None when training recorded nothing):
    its share of the training loss and the fraction of channels above τ it acts on."""
    def mean_of(key: str) -> float | None:
        vals = [h[key] for hist in histories.values() for h in hist if h.get(key) is not None]
        return float(np.mean(vals)) if vals else None

    share, above = mean_of("extra_loss_share"), mean_of("gs_frac_above_tau")
    if share is None and above is None:
        return None
    return {"loss_share_mean": share, "frac_above_tau_mean": above,
            "definition": "mean over epochs and seeds of the penalty's share of the training loss and of the "
                          "fraction of BN channels with |γ|/σ (batch σ) above τ at each step"}


def _relative(metrics: dict[str, Any]) -> None:
    """Add each variant's memorization ratio and test-accuracy change against plain BN, in place."""
    ref = metrics["batch"]
    for m in metrics.values():
        rel = {}
        for when in ("fixed_epoch", "final"):
            for key in ("noisy_acc", "ood_acc"):
                a, b = m[when][key]["mean"], ref[when][key]["mean"]
                rel[f"{key}_{when}_vs_bn"] = None if a is None or not b else a / b
            a, b = m[when]["test_acc"]["mean"], ref[when]["test_acc"]["mean"]
            rel[f"test_acc_{when}_minus_bn"] = a - b
        m["relative_to_bn"] = rel


def _mem_score(rec: dict[str, Any], key: str | None) -> float | None:
    """Selection score (lower is better): memorization, or on clean data the train−validation gap."""
    if key is not None:
        return rec["final"][key]["mean"]
    train, val = rec["final"]["train_acc"]["mean"], rec["final"]["val_acc"]["mean"]
    return None if train is None or val is None else train - val


def validation_gate(bn: np.ndarray, reg: np.ndarray) -> dict[str, Any]:
    """The validation gate of one regularized variant against plain BN (plan 5.0, claim 6).

    Args:
        bn, reg: per selection seed and validation image, 1 where the model is right ([seeds, n_val]).

    Returns:
        ``drop`` (mean over images of the per-image mean over seeds of BN − variant), ``se`` (its
        standard error over images), ``bound`` (:data:`GATE_THRESHOLD`), ``passes`` (drop ≤ bound),
        ``power`` (the chance this gate, at this standard error, excludes a variant costing
        :data:`GATE_COST`), plan 4.0's ``bound_v4`` (:data:`VAL_TOLERANCE` + :data:`GATE_Z` · se),
        ``passes_v4`` and ``power_v4``, and ``n_val``.
    """
    d = (np.asarray(bn, float) - np.asarray(reg, float)).mean(axis=0)
    se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("nan")
    drop = float(d.mean()) if d.size else float("nan")
    return {"drop": drop, "se": se, "bound": GATE_THRESHOLD, "passes": mitigate_gate_passes(drop, se),
            "power": mitigate_gate_power(se), "bound_v4": VAL_TOLERANCE + GATE_Z * se,
            "passes_v4": mitigate_gate_passes(drop, se, "4.0"), "power_v4": mitigate_gate_power(se, rule="4.0"),
            "n_val": int(d.size)}


def val_correct(cfg: MitigateConfig, v: Variant, ds: OutlierDataset, seed: int, job: Path) -> np.ndarray:
    """Per validation image, whether the finished run in ``job`` classifies it right (eval mode)."""
    from bnmem.measure.predict import predict_logits
    from bnmem.threads import torch_threads
    from bnmem.train.trainer import load_finished, seeded_model

    with torch_threads(cfg.train.threads):
        model = load_finished(seeded_model(cfg.model(v.norm), ds, seed), job).model
        return (predict_logits(model, ds.x_val).argmax(1) == ds.y_val.cpu()).numpy()


def select_variant(metrics: dict[str, dict[str, Any]], variants: list[Variant], key: str | None,
                   gates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Apply :data:`SELECTION_RULE` (selection seeds, validation split and training set only).

    Args:
        metrics: variant name -> :func:`summarize_variant` record over the selection seeds.
        variants: the variants, plain BN first.
        key: the memorization key (``noisy_acc``/``ood_acc``), or None on clean data.
        gates: regularized variant name -> :func:`validation_gate`.

    Returns:
        ``{"variant", "gs_reg", "gs_tau", "eligible", "fallback", "gate", "val_acc", "score", "criterion",
        "rule"}``; ``fallback`` is True when no variant passed the gate and the criterion did not run.
    """
    regs = [v for v in variants if v.lam > 0]
    score = {v.name: _mem_score(metrics[v.name], key) for v in regs}
    eligible = [v for v in regs if gates[v.name]["passes"] and score[v.name] is not None]
    if eligible:
        chosen = min(eligible, key=lambda v: (score[v.name], v.lam, v.tau or 0.0))
    else:
        chosen = min(regs, key=lambda v: (gates[v.name]["drop"], v.lam, v.tau or 0.0))
    return {
        "variant": chosen.name,
        "gs_reg": chosen.lam,
        "gs_tau": chosen.tau,
        "eligible": [v.name for v in eligible],
        "fallback": not eligible,
        "gate": gates,
        "val_acc": {v.name: metrics[v.name]["final"]["val_acc"]["mean"] for v in [variants[0], *regs]},
        "score": score,
        "criterion": key or "train_acc - val_acc",
        "rule": SELECTION_RULE,
    }


def _seed_diff(a: dict[str, Any], b: dict[str, Any], key: str) -> dict[str, Any]:
    """Paired-by-seed difference a − b of a last-epoch value, with its interval."""
    seeds = sorted(set(a["per_seed"]) & set(b["per_seed"]), key=int)
    return paired_difference([a["per_seed"][s][key][-1] for s in seeds], [b["per_seed"][s][key][-1] for s in seeds],
                             unit="seeds").to_dict()


def run_lira_variant(cfg: MitigateConfig, v: Variant, directory: Path, progress: bool) -> dict[str, Any]:
    """LiRA (online and RMIA) on ``cfg.lira_models`` shadow models trained with variant ``v``'s recipe.

    The shadow models train on the pool without the validation split (the
    same data config), with the model seeds and keep matrix of every other
    variant, so targets pair across variants.

    """
    from bnmem.shadow import ShadowConfig, run_shadow_norm

    train = cfg.train.model_copy(update={"gs_reg": v.lam, "gs_tau": v.tau if v.tau is not None else cfg.train.gs_tau})
    lcfg = ShadowConfig(data=cfg.data, arch=cfg.arch, norms=[v.norm], seeds=[cfg.seeds[0]], train=train,
                      shadow_models=cfg.lira_models, keep_seed=cfg.keep_seed)
    entry = run_shadow_norm(lcfg, v.norm, directory, progress=progress)
    primary = attack_spec.the(attack_spec.PRIMARY)
    attack = entry["attacks"][primary]
    return {
        "attack": primary,
        "shadow_models": cfg.lira_models,
        "keep_seed": cfg.keep_seed,
        "bn_mode_at_query": lcfg.query_bn_mode,
        "views": entry["query"].get("views"),
        **{sub: {k: attack[sub][k] for k in LIRA_METRICS} for sub in attack},
        "attacks": {a: {sub: {k: entry["attacks"][a][sub][k] for k in (*LIRA_METRICS, "auc_per_target", "eps_lb_per_target")}
                        for sub in entry["attacks"][a]}
                    for a in attack_spec.playing(attack_spec.MITIGATION) if a in entry["attacks"]},
        "shadow_accuracy": {k: entry["accuracy"][k]["mean"] for k in entry["accuracy"]},
        "memorization_scores": entry["memorization"],  # Feldman–Zhang, per variant (top1/conf) and subset
    }


def _lira_pairs(metrics: dict[str, Any], selected: str, others: list[str]) -> dict[str, Any]:
    """Per-target AUC differences (same model seeds and keep matrix) of the LiRA recipes, with intervals."""
    from bnmem.stats import paired_summary as paired_differences

    pairs = [(selected, "batch")] + [("batch", o) for o in others] + [(selected, o) for o in others]
    out: dict[str, Any] = {}
    for a, b in pairs:
        if "lira" not in metrics.get(a, {}) or "lira" not in metrics.get(b, {}):
            continue
        out[f"{a}-{b}"] = {
            attack: {sub: paired_differences(metrics[a]["lira"]["attacks"][attack][sub]["auc_per_target"],
                                             metrics[b]["lira"]["attacks"][attack][sub]["auc_per_target"])
                     for sub in metrics[a]["lira"]["attacks"][attack]}
            for attack in metrics[a]["lira"]["attacks"]
        }
    return out


def _recipe(cfg: MitigateConfig, v: Variant):
    """The training recipe of variant ``v``: the lens's, with its λ and τ."""
    return cfg.train.model_copy(update={"gs_reg": v.lam, "gs_tau": v.tau if v.tau is not None else cfg.train.gs_tau})


def _train_together(cfg: MitigateConfig, ds: OutlierDataset, out: Path, progress: bool,
                    runs: list[tuple[Variant, int]]) -> None:
    """Train the fresh runs among ``runs`` together, one grouped network per norm (:mod:`bnmem.train.ensemble_runs`);
    runs that are finished or have a checkpoint are left to :func:`train_run` (read back, or resumed)."""
    epochs = {cfg.fixed_epoch, cfg.train.epochs}
    by_norm: dict[str, list[PendingRun]] = {}
    for v, s in runs:
        by_norm.setdefault(v.norm, []).append(PendingRun(
            s, _recipe(cfg, v), run_folder(out, v.folder, s),
            lambda: gamma_sigma_hook(ds, epochs, cfg.train.batch_size, cfg.data.seed)))
    for norm, pending in by_norm.items():
        train_fresh_together(cfg.model(norm), ds, pending, progress=f"{norm}: {len(pending)} runs" if progress else False)


def grouped_runs(cfg: MitigateConfig) -> list[tuple[Variant, int]]:
    """The runs trained together: every variant on every evaluation seed and the BN variants on the selection
    seeds. (In a study the unregularized runs on the evaluation seeds usually arrive finished from the runs it
    shares between lenses, :mod:`bnmem.study.share`, trained together the same way.)"""
    bn = [v for v in cfg.variants() if v.norm == "batch"]
    return ([(v, s) for v in cfg.variants() for s in cfg.seeds]
            + [(v, s) for v in bn for s in cfg.selection_seed_list()])


def _train_variants(cfg: MitigateConfig, ds: OutlierDataset, out: Path, progress: bool, variants: list[Variant],
                    seeds: list[int]) -> dict[str, Any]:
    """Train every (variant, seed) not trained yet one by one (resumable); summarize each variant over its seeds."""
    epochs = {cfg.fixed_epoch, cfg.train.epochs}
    metrics: dict[str, Any] = {}
    for v in variants:
        histories = {
            seed: train_run(cfg.model(v.norm), ds, _recipe(cfg, v), seed, run_folder(out, v.folder, seed),
                            lambda: gamma_sigma_hook(ds, epochs, cfg.train.batch_size, cfg.data.seed),
                            progress=f"{v.name} seed {seed}" if progress else False)
            for seed in seeds
        }
        metrics[v.name] = summarize_variant(v, histories, cfg.fixed_epoch)
    return metrics


def _memorization_of(metrics: dict[str, Any]) -> str | None:
    """noisy_acc or ood_acc, whichever plain BN measured; None on clean data."""
    first = metrics["batch"]["final"]
    return next((k for k in ("noisy_acc", "ood_acc") if first[k]["mean"] is not None), None)


def _select(cfg: MitigateConfig, ds: OutlierDataset, out: Path, metrics: dict[str, Any], progress: bool) -> dict[str, Any]:
    """Select on the selection seeds (trained here), then the chosen variant's paired-by-seed changes against
    plain BN on the evaluation seeds."""
    variants = cfg.variants()
    bn_variants = [v for v in variants if v.norm == "batch"]
    seeds = cfg.selection_seed_list() or list(cfg.seeds)
    chosen_from = _train_variants(cfg, ds, out, progress, bn_variants, seeds) if cfg.selection_seeds else metrics
    correct = {v.name: np.stack([val_correct(cfg, v, ds, s, run_folder(out, v.folder, s)) for s in seeds])
               for v in bn_variants}
    gates = {v.name: validation_gate(correct["batch"], correct[v.name]) for v in bn_variants if v.lam > 0}
    key = _memorization_of(metrics)
    selection = select_variant(chosen_from, variants, key, gates)
    selection.update(nested=bool(cfg.selection_seeds), seeds=seeds,
                     final={v.name: chosen_from[v.name]["final"] for v in bn_variants})
    chosen = metrics[selection["variant"]]
    selection["test_acc_change"] = _seed_diff(chosen, metrics["batch"], "test_acc")
    selection["val_acc_change"] = _seed_diff(chosen, metrics["batch"], "val_acc")
    if key is not None:
        selection["memorization_change"] = _seed_diff(chosen, metrics["batch"], key)
    return selection


def run_mitigate(cfg: MitigateConfig, out: str | Path, *, progress: bool = True, executor: Any = None) -> dict[str, Any]:
    """Train every (variant, seed) and compare memorization, accuracy, γ/σ (and LiRA).

    Writes ``config.json``, one folder per ``<variant>/seed<k>`` (resumable; the
    BN variants also on the selection seeds), ``<variant>/lira/`` when LiRA is on, ``metrics.json`` and
    ``privacy_utility.png`` into ``out``.

    Args:
        cfg: the experiment config.
        out: run directory.
        progress: show tqdm bars.

    Returns:
        The metrics dict (also written to ``metrics.json``).

    Raises:
        BnmemError: data or directory problems; LiRA asked for but unavailable.
    """
    out = prepare_run_dir(out, cfg.model_dump(mode="json"))
    ds = load_once(cfg.data)
    variants = cfg.variants()
    _train_together(cfg, ds, out, progress, grouped_runs(cfg))
    metrics = _train_variants(cfg, ds, out, progress, variants, list(cfg.seeds))
    selection = _select(cfg, ds, out, metrics, progress)
    if cfg.lira_models:
        # Shadow models for plain BN, the selected variant and the other norms (not every λ: cost).
        for v in variants:
            if v.lam == 0 or v.name == selection["variant"]:
                metrics[v.name]["lira"] = run_lira_variant(cfg, v, out / v.folder / "lira", progress)
        selection["lira_paired_auc"] = _lira_pairs(metrics, selection["variant"],
                                                   [v.name for v in variants if v.norm != "batch"])
    _relative(metrics)
    result = LENS.stamp({
        **metrics,
        "variants": [v.name for v in cfg.variants()],
        "selection": selection,
        # Read by the report's claim 6 (the λ its plan decides on).
        "selected_lambda": selection["gs_reg"],
        "selected_tau": selection["gs_tau"] if selection["gs_tau"] is not None else cfg.train.gs_tau,
        "conditions": {
            **conditions(cfg),
            "lambdas": cfg.lambdas,
            "gs_tau": cfg.train.gs_tau,
            "taus": cfg.tau_values(),
            "selection_rule": SELECTION_RULE,
            "selection_seeds": cfg.selection_seed_list(),
            "validation_gate": {"margin": VAL_TOLERANCE, "threshold": GATE_THRESHOLD, "cost": GATE_COST,
                                "z_v4": GATE_Z},
            "n_val": ds.n_val,
            "val_fraction": cfg.data.val_fraction,
            "lira_recipes": "plain norms and the selected variant" if cfg.lira_models else None,
            "lira_attacks": list(attack_spec.playing(attack_spec.MITIGATION)) if cfg.lira_models else [],
            "regularizer": "λ · mean over BN channels of relu(|γ|/σ_batch − τ)², added to the loss",
            "fixed_epoch": cfg.fixed_epoch,
            "epochs": cfg.train.epochs,
            "memorization": "accuracy on the noisy subset against its flipped label (OOD: its random label)",
            "bn_mode_at_query": "eval",
            "gamma_sigma": "|γ|/σ per BN channel; σ running (sqrt(running_var + eps)) or of one fixed training "
                           "batch; per layer the median and the fraction above 1",
            "lira_models": cfg.lira_models,
        },
        "dataset": ds.summary(),
    })
    io.write_json(out / LENS.results, result)
    plot_privacy_utility(result, out / "privacy_utility.png", _memorization_key(result),
                         legacy_attack=attack_spec.the(attack_spec.PRIMARY),
                         title=f"{cfg.data.dataset} {cfg.arch}, label noise {cfg.data.label_noise}, OOD {cfg.data.ood}, "
                               f"τ={cfg.train.gs_tau}, seeds {cfg.seeds}")
    return result


def _memorization_key(result: dict[str, Any]) -> str:
    """noisy_acc when there are flipped labels, else ood_acc."""
    first = result[result["variants"][0]]
    return "noisy_acc" if first["final"]["noisy_acc"]["mean"] is not None else "ood_acc"


def summary_table(result: dict[str, Any]) -> str:
    """Printable mitigation table: memorization, accuracy and γ/σ per variant (means over seeds)."""
    key = _memorization_key(result)
    fe = result["conditions"]["fixed_epoch"]
    lira = any("lira" in result[n] for n in result["variants"])
    chosen = (result.get("selection") or {}).get("variant")
    rows = []
    for n in result["variants"]:
        m = result[n]
        gs = m["gamma_sigma"]["final"]
        layers = "/".join(f"{s['median_ratio']:.2f}" for s in gs["running"]["layers"].values()) if gs else "-"
        frac = "/".join(f"{s['frac_above_1']:.2f}" for s in gs["running"]["layers"].values()) if gs else "-"
        row = [n + (" *" if n == chosen else ""), fmt(m["fixed_epoch"][key]["mean"]), fmt(m["final"][key]["mean"]),
               fmt((m["final"].get("val_acc") or {}).get("mean")), fmt(m["final"]["test_acc"]["mean"]),
               fmt(m["final"]["clean_acc"]["mean"]), layers, frac]
        if lira:
            attacks = (m.get("lira") or {}).get("attacks") or {}
            row += [fmt(((attacks.get(a) or {}).get("all") or {}).get("auc"))
                    for a in attack_spec.playing(attack_spec.MITIGATION)]
            row += [fmt((m.get("lira") or {}).get("outliers", {}).get("auc"))]
        rows.append(row)
    mem = key.replace("_acc", "")
    header = ["variant", f"{mem}@ep{fe}", f"{mem} final", "val final", "test final", "clean final",
              "median |γ|/σ per layer", "frac>1 per layer"]
    if lira:
        header += [f"{attack_spec.get(a).short_label} AUC" for a in attack_spec.playing(attack_spec.MITIGATION)]
        header += [f"{attack_spec.get(attack_spec.the(attack_spec.PRIMARY)).short_label} AUC outliers"]
    lines = [table(rows, header)]
    sel = result.get("selection")
    if sel:
        tc = sel["test_acc_change"]
        ci = "no interval" if tc["ci_low"] is None else f"[{100 * tc['ci_low']:+.1f}, {100 * tc['ci_high']:+.1f}]"
        how = ("the fallback (no variant passed the validation gate)" if sel.get("fallback") else
               "the criterion")
        where = (f"selection seeds {sel['seeds']}" if sel.get("nested") else "the evaluation seeds (in-sample)")
        lines.append(f"* selected by {how} on {where}: {sel['variant']} (λ={sel['gs_reg']:g}); test accuracy "
                     f"change vs BN {100 * tc['mean']:+.1f} pt {ci} over {tc['n']} evaluation seeds")
    return "\n".join(lines)


def hook(cfg: MitigateConfig, ds: OutlierDataset, job: Path, seed: int) -> EpochHook:
    """The per-epoch hook of every variant (γ/σ at the fixed and the last epoch)."""
    return gamma_sigma_hook(ds, {cfg.fixed_epoch, cfg.train.epochs}, cfg.train.batch_size, cfg.data.seed)


class MitigateWork(LensWork):
    """The mitigate lens's work in one cell: every λ variant's runs, and its LiRA recipes' shadow models."""

    def models(self) -> float:
        return float(len(self.cfg.seeds) * len(self.cfg.lambdas) + 2 * int(self.cfg.lira_models or 0))


LENS = register(Lens.of(SPECS[MITIGATE], config=MitigateConfig, run=run_mitigate, summary=summary_table, hook=hook,
                        work=MitigateWork))
